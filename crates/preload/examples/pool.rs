//! Helper for trying the shim by hand: `pool mkfs PATH [MiB]` formats a pool,
//! `pool serve PATH SOCKET` serves it until interrupted (it also takes `engram serve`'s
//! `--socket S --idle-exit N`, so that tests can stand it in for `engram serve`), `pool run -- CMD…` is `engram run`.

use std::ffi::OsString;
use std::path::PathBuf;

fn main() {
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    let a = |i: usize| args.get(i).cloned().unwrap_or_default();
    match a(0).to_str() {
        Some("mkfs") => {
            let mib: u64 = a(2).to_str().and_then(|s| s.parse().ok()).unwrap_or(64);
            engram_core::Fs::mkfs(PathBuf::from(a(1)), mib << 20).expect("mkfs");
        }
        Some("serve") => {
            // `serve POOL SOCKET`, or as `engram serve`: `serve POOL --socket S --idle-exit N`.
            let flag = |name: &str| args.iter().position(|x| x == name).map(|i| a(i + 1));
            let socket = flag("--socket").unwrap_or_else(|| a(2));
            let idle = flag("--idle-exit")
                .and_then(|v| v.to_str().and_then(|s| s.parse::<u64>().ok()))
                .map(std::time::Duration::from_secs);
            let stop = engram_core::daemon::Stop::new();
            let opts = engram_core::daemon::ServeOptions {
                socket: PathBuf::from(socket),
                idle_exit: idle,
                log_clients: true,
            };
            engram_core::daemon::serve_until(&PathBuf::from(a(1)), &opts, &stop, &|l| {
                eprintln!("daemon: {l}")
            })
            .expect("serve");
        }
        Some("run") => {
            let cmd: Vec<OsString> = args
                .iter()
                .skip(1)
                .skip_while(|s| *s == "--")
                .cloned()
                .collect();
            match engram_run::run(std::env::var_os("POOL").map(PathBuf::from), None, &cmd) {
                Ok(code) => std::process::exit(code),
                Err(e) => {
                    eprintln!("engram: {e}");
                    std::process::exit(1);
                }
            }
        }
        _ => eprintln!("usage: pool mkfs PATH [MiB] | pool serve PATH SOCKET | pool run -- CMD..."),
    }
}

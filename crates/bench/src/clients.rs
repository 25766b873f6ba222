//! Throughput through the daemon with 1 and 2 client *processes* (not threads), against the
//! in-process engine, and the latency of each operation (one thread: the mean time of an
//! operation in a closed loop): each client is this executable started again as a worker
//! (`ENGRAM_BENCH_CLIENT`), connected to a daemon that runs in this process.

use engram_core::daemon::{ServeOptions, Stop, serve_until};
use engram_core::{Fs, OpenOptions, Options};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

const ENV: &str = "ENGRAM_BENCH_CLIENT";
const OPS: [&str; 4] = ["create", "stat", "write4k", "read4k"];

/// Most creates one client does (the pool has a fixed number of inodes).
const MAX_CREATES: u64 = 40_000;

/// Run one operation for `secs` seconds (or MAX_CREATES creates) in directory `dir`;
/// returns operations per second.
fn work(fs: &Fs, op: &str, dir: &str, secs: f64) -> Result<f64, String> {
    let e = |e: engram_core::Error| e.to_string();
    fs.mkdir(dir, 0o755).map_err(e)?;
    let f = fs
        .open_file(
            format!("{dir}/data"),
            &OpenOptions::new().read(true).write(true).create(true),
        )
        .map_err(e)?;
    f.write_at(&vec![1u8; 1 << 20], 0).map_err(e)?;
    let page = vec![7u8; 4096];
    let mut buf = vec![0u8; 4096];
    let start = Instant::now();
    let until = start + Duration::from_secs_f64(secs);
    let mut n = 0u64;
    while Instant::now() < until && !(op == "create" && n >= MAX_CREATES) {
        for _ in 0..64 {
            match op {
                "create" => drop(
                    fs.open_file(
                        format!("{dir}/f{n}"),
                        &OpenOptions::new().write(true).create_new(true),
                    )
                    .map_err(e)?,
                ),
                "stat" => drop(fs.stat(format!("{dir}/data")).map_err(e)?),
                "read4k" => drop(f.read_at(&mut buf, (n % 256) * 4096).map_err(e)?),
                _ => drop(f.write_at(&page, (n % 256) * 4096).map_err(e)?),
            }
            n += 1;
        }
    }
    Ok(n as f64 / start.elapsed().as_secs_f64())
}

/// If this process was started as a benchmark client, run it and return the exit code.
pub fn client_worker() -> Option<i32> {
    let spec = std::env::var(ENV).ok()?;
    let parts: Vec<&str> = spec.splitn(4, ':').collect();
    let [op, secs, dir, socket] = parts[..] else {
        return Some(2);
    };
    let result = Fs::connect(socket)
        .map_err(|e| e.to_string())
        .and_then(|fs| work(&fs, op, dir, secs.parse().unwrap_or(1.0)));
    match result {
        Ok(rate) => {
            println!("{rate}");
            Some(0)
        }
        Err(e) => {
            eprintln!("benchmark client: {e}");
            Some(1)
        }
    }
}

/// Ops/s of `procs` client processes running `op` at once through the daemon at `socket`
/// (the sum of their rates).
fn through_daemon(
    socket: &Path,
    op: &str,
    procs: usize,
    secs: f64,
    round: usize,
) -> Result<f64, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let children: Vec<_> = (0..procs)
        .map(|i| {
            Command::new(&exe)
                .env(
                    ENV,
                    format!("{op}:{secs}:/c{round}-{i}:{}", socket.display()),
                )
                .stdout(Stdio::piped())
                .spawn()
                .map_err(|e| e.to_string())
        })
        .collect::<Result<_, _>>()?;
    let mut total = 0.0;
    for c in children {
        let out = c.wait_with_output().map_err(|e| e.to_string())?;
        if !out.status.success() {
            return Err(format!("a client process failed ({})", out.status));
        }
        total += String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse::<f64>()
            .map_err(|e| e.to_string())?;
    }
    Ok(total)
}

/// Print the table; `quick` runs each row for less time.
pub fn run(quick: bool) -> Result<(), String> {
    let secs = if quick { 0.5 } else { 2.0 };
    let id = std::process::id();
    let served = crate::targets::engram::pool_path("clients");
    let local = crate::targets::engram::pool_path("local");
    let socket = format!("/tmp/engram-bench-clients-{id}.sock");
    for p in [&served, &local] {
        Fs::mkfs(p, 1 << 30).map_err(|e| e.to_string())?;
    }
    let stop = Arc::new(Stop::new());
    let (p, s, st) = (served.clone(), socket.clone(), stop.clone());
    let daemon = std::thread::spawn(move || {
        serve_until(
            Path::new(&p),
            &ServeOptions {
                socket: s.into(),
                idle_exit: None,
                log_clients: false,
            },
            &st,
            &|_| {},
        )
    });
    let t = Instant::now();
    while Fs::connect(&socket).is_err() && t.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(10));
    }
    println!("\n== Daemon clients: processes sharing one pool ==");
    println!(
        "  {:<10} {:>14} {:>16} {:>16} {:>12} {:>12}",
        "operation", "in-process", "daemon 1 proc", "daemon 2 procs", "1p/in-proc", "2p/1p"
    );
    let local_fs = Fs::open(&local, &Options::default()).map_err(|e| e.to_string())?;
    let mut result = Ok(());
    let mut latency = Vec::new();
    for (round, op) in OPS.iter().enumerate() {
        let native = work(&local_fs, op, &format!("/l{round}"), secs)?;
        let one = through_daemon(Path::new(&socket), op, 1, secs, round * 10);
        let two = through_daemon(Path::new(&socket), op, 2, secs, round * 10 + 1);
        match (one, two) {
            (Ok(one), Ok(two)) => {
                println!(
                    "  {op:<10} {:>12.0}/s {:>14.0}/s {:>14.0}/s {:>11.2}x {:>11.2}x",
                    native,
                    one,
                    two,
                    one / native,
                    two / one
                );
                latency.push((op, 1e6 / native, 1e6 / one));
            }
            (Err(e), _) | (_, Err(e)) => {
                result = Err(e);
                break;
            }
        }
    }
    println!(
        "  note: each client process runs one thread; {secs} s per cell (creates: at most {MAX_CREATES} per client); write4k overwrites, read4k reads a 1 MiB file in 4 KiB pages"
    );
    println!("\n  latency, µs/op (one thread; the mean of a closed loop, from the rows above):");
    println!(
        "  {:<10} {:>12} {:>12} {:>18}",
        "operation", "in-process", "daemon", "daemon/in-process"
    );
    for (op, native, daemon) in latency {
        println!(
            "  {op:<10} {native:>12.2} {daemon:>12.2} {:>17.2}x",
            daemon / native
        );
    }
    drop(local_fs);
    stop.stop();
    let _ = daemon.join();
    for p in [&served, &local] {
        let _ = std::fs::remove_file(p);
    }
    result
}

//! `engram run [--pool POOL] [--mount DIR] -- CMD ARGS…`: make sure a daemon serves the
//! pool, then run CMD with the shim preloaded, so that CMD and every process it starts share
//! the pool.
//!
//! This crate is separate from the shim so that a program linking it (the `engram` CLI, the
//! tests) does not get the shim's libc symbols linked into itself.

use engram_core::Fs;
use std::ffi::OsString;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The pool used when none is named (the one `engram demo` uses).
pub const DEFAULT_POOL: &str = "/dev/shm/engram-demo.pool";
/// The mount prefix used when none is named.
pub const DEFAULT_MOUNT: &str = "/mnt/engram";
/// Size of the pool `engram run` creates when the default one is missing (as `engram demo`).
pub const DEFAULT_POOL_SIZE: u64 = 256 << 20;
/// A daemon started by `engram run` exits after this long without clients, once no process
/// maps the pool either (a client's forked child that has not made a call of its own yet:
/// the daemon then looks again after as long).
pub const IDLE_EXIT: Duration = Duration::from_secs(5);
const LIBRARY: &str = "libengram_preload.so";

/// The socket of the daemon that serves `pool`: `POOL.sock`.
pub fn socket_for(pool: &Path) -> PathBuf {
    let mut s = pool.as_os_str().to_owned();
    s.push(".sock");
    PathBuf::from(s)
}

/// Where `libengram_preload.so` is: `ENGRAM_PRELOAD_LIB`, else next to the running program
/// (cargo puts it beside the `engram` binary), its parent directory (test binaries live in
/// target/*/deps), or `../lib/engram/`.
pub fn find_library() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("ENGRAM_PRELOAD_LIB") {
        return Some(PathBuf::from(p));
    }
    let exe = std::env::current_exe().ok()?;
    let dir = exe.parent()?;
    [
        dir.join(LIBRARY),
        dir.join("..").join(LIBRARY),
        dir.join("../lib/engram").join(LIBRARY),
    ]
    .into_iter()
    .find(|p| p.is_file())
}

/// The `engram` binary to start `engram serve` with, if one is found.
fn engram_binary() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("ENGRAM_BIN") {
        return Some(PathBuf::from(p));
    }
    let exe = std::env::current_exe().ok()?;
    if exe.file_name().is_some_and(|n| n == "engram") {
        return Some(exe);
    }
    let dir = exe.parent()?;
    [dir.join("engram"), dir.join("../engram")]
        .into_iter()
        .find(|p| p.is_file())
}

fn wait_for(socket: &Path, limit: Duration, mut alive: impl FnMut() -> bool) -> Option<Fs> {
    let t = Instant::now();
    while t.elapsed() < limit {
        if let Ok(fs) = Fs::connect(socket) {
            return Some(fs);
        }
        if !alive() {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

/// Where a daemon `engram run` starts writes its log: beside its socket (`POOL.sock.log`),
/// appended to (a start that fails, because another daemon serves the pool, must not wipe
/// that daemon's log).
pub fn log_for(socket: &Path) -> PathBuf {
    let mut s = socket.as_os_str().to_owned();
    s.push(".log");
    PathBuf::from(s)
}

/// Start `engram serve POOL --socket S --idle-exit 5` in its own session, its output in
/// `log_for(S)` (a refused client is told why; this is for the rest, and for a daemon
/// that cannot start).
fn spawn_serve(bin: &Path, pool: &Path, socket: &Path) -> Option<Fs> {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log_for(socket))
        .ok();
    let out = || {
        log.as_ref()
            .and_then(|f| f.try_clone().ok())
            .map_or_else(Stdio::null, Stdio::from)
    };
    let mut cmd = Command::new(bin);
    cmd.arg("serve")
        .arg(pool)
        .arg("--socket")
        .arg(socket)
        .arg("--idle-exit")
        .arg(IDLE_EXIT.as_secs().to_string())
        .arg("--quiet-clients")
        .env_remove("LD_PRELOAD")
        .stdin(Stdio::null())
        .stdout(out())
        .stderr(out());
    // SAFETY: setsid in the child before exec is async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
    let mut child = cmd.spawn().ok()?;
    let fs = wait_for(socket, Duration::from_secs(10), || {
        matches!(child.try_wait(), Ok(None))
    });
    if fs.is_none() {
        // It never answered: do not leave it holding the pool.
        let _ = child.kill();
        let _ = child.wait();
    }
    fs
}

/// Serve the pool from a detached grandchild of this process (when no `engram` binary with
/// `serve` is at hand).
fn fork_serve(pool: &Path, socket: &Path) -> Option<Fs> {
    // SAFETY: fork; the child only forks again and exits, the grandchild serves and exits
    // with _exit, never returning into the caller's code.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return None;
    }
    if pid == 0 {
        // SAFETY: as above.
        unsafe {
            libc::setsid();
            if libc::fork() != 0 {
                libc::_exit(0);
            }
            let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
            for fd in 0..=2 {
                libc::dup2(null, fd);
            }
        }
        // Never stopped but by the idle exit: `serve_until` sleeps without a timer.
        let stop = engram_core::daemon::Stop::new();
        let opts = engram_core::daemon::ServeOptions {
            socket: socket.to_path_buf(),
            idle_exit: Some(IDLE_EXIT),
            log_clients: false,
        };
        engram_core::daemon::raise_descriptor_limit();
        engram_core::daemon::raise_priority();
        let r = engram_core::daemon::serve_until(pool, &opts, &stop, &|_| {});
        // SAFETY: leaving the grandchild without running the caller's exit handlers.
        unsafe { libc::_exit(r.is_err() as i32) };
    }
    let mut status = 0;
    // SAFETY: reaping the intermediate child.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    wait_for(socket, Duration::from_secs(10), || true)
}

/// Connect to the daemon serving `pool`, starting one if none answers. The returned
/// connection keeps the daemon from exiting while it is held.
pub fn ensure_daemon(pool: &Path) -> Result<(Fs, PathBuf), String> {
    let socket = socket_for(pool);
    let first = match Fs::connect(&socket) {
        Ok(fs) => return Ok((fs, socket)),
        Err(e) => e,
    };
    // A daemon that answered and refused (the pool's permissions, say) has told why:
    // starting another for the same pool could only fail, or wait for that one to go.
    if first
        .to_string()
        .contains(engram_core::daemon::REFUSED_MESSAGE)
    {
        return Err(first.to_string());
    }
    if !pool.exists() {
        Fs::mkfs(pool, DEFAULT_POOL_SIZE)
            .map_err(|e| format!("cannot create pool {}: {e}", pool.display()))?;
    }
    // A daemon could not say why it failed where it cannot write its log: the pool and the
    // socket's directory must be writable (a read-only mount gave only "cannot reach a
    // daemon: No such file or directory").
    for (what, path) in [
        ("pool", pool.to_path_buf()),
        (
            "directory for its socket and log",
            socket.parent().unwrap_or(Path::new(".")).to_path_buf(),
        ),
    ] {
        if let Err(e) = writable(&path) {
            return Err(format!(
                "cannot serve {}: the {what} {} is not writable: {e}",
                pool.display(),
                path.display()
            ));
        }
    }
    // What the daemon about to start appends to its log is read from here on.
    let logged = std::fs::metadata(log_for(&socket)).map_or(0, |m| m.len());
    let fs = engram_binary()
        .and_then(|bin| spawn_serve(&bin, pool, &socket))
        .or_else(|| fork_serve(pool, &socket))
        .ok_or_else(|| {
            // What the daemon said before it stopped (the pool in use by another process,
            // say), else the first connection's error (a daemon that listens but refused).
            let said = std::fs::read(log_for(&socket))
                .map(|b| {
                    String::from_utf8_lossy(b.get(logged as usize..).unwrap_or(&[])).into_owned()
                })
                .unwrap_or_default();
            match said.lines().rev().find(|l| !l.trim().is_empty()) {
                Some(last) => format!(
                    "cannot start a daemon (its log: {}): {}",
                    log_for(&socket).display(),
                    last.trim_start_matches("engram: ")
                ),
                None => format!(
                    "cannot start a daemon for {} (socket {}; connecting first: {first})",
                    pool.display(),
                    socket.display()
                ),
            }
        })?;
    Ok((fs, socket))
}

/// Whether this process may write `path` (`access(W_OK)`, which also answers EROFS).
fn writable(path: &Path) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: access with a NUL-terminated path.
    if unsafe { libc::access(c.as_ptr(), libc::W_OK) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Run `cmd` under the shim and return its exit status (128 + signal if it was killed).
pub fn run(pool: Option<PathBuf>, mount: Option<PathBuf>, cmd: &[OsString]) -> Result<i32, String> {
    let Some((prog, args)) = cmd.split_first() else {
        return Err("no command given (engram run -- CMD ARGS...)".into());
    };
    let pool = pool.unwrap_or_else(|| PathBuf::from(DEFAULT_POOL));
    let mount = mount.unwrap_or_else(|| PathBuf::from(DEFAULT_MOUNT));
    if !mount.is_absolute() {
        return Err(format!(
            "the mount prefix {} must be absolute",
            mount.display()
        ));
    }
    let lib = find_library().ok_or_else(|| {
        format!("cannot find {LIBRARY} (build it with `cargo build -p engram-preload`, or set ENGRAM_PRELOAD_LIB)")
    })?;
    let lib = std::fs::canonicalize(&lib).unwrap_or(lib);
    let (keep, socket) = ensure_daemon(&pool)?;
    let mut preload = lib.into_os_string();
    if let Some(old) = std::env::var_os("LD_PRELOAD").filter(|v| !v.is_empty()) {
        preload.push(":");
        preload.push(old);
    }
    let status = Command::new(prog)
        .args(args)
        .env("LD_PRELOAD", preload)
        .env("ENGRAM_SOCKET", &socket)
        .env("ENGRAM_MOUNT", &mount)
        .env("ENGRAM_POOL", &pool)
        .env_remove("ENGRAM_CWD")
        .status();
    drop(keep);
    let status = match status {
        Ok(s) => s,
        // As a shell reports them: 127 not found, 126 found but not runnable.
        Err(e) => {
            eprintln!("engram: cannot run {}: {e}", Path::new(prog).display());
            return Ok(if e.kind() == std::io::ErrorKind::NotFound {
                127
            } else {
                126
            });
        }
    };
    Ok(status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0)))
}

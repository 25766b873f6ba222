//! A pool served by a daemon thread, and real programs run under the shim against it.

#![allow(dead_code)]

use engram_core::Fs;
use engram_core::daemon::{ServeOptions, serve};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

pub const MOUNT: &str = "/mnt/engram";

/// target/<profile>/ of this test binary (it lives in target/<profile>/deps).
pub fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().unwrap().parent().unwrap().to_path_buf()
}

/// The shim, built by cargo beside the test binaries. `cargo test` builds the crate's
/// library for the tests but not always its `cdylib`, so it is built (or found up to date)
/// once per test binary: a shim left from an older build would test old code.
pub fn library() -> PathBuf {
    static BUILT: std::sync::Once = std::sync::Once::new();
    let lib = target_dir().join("libengram_preload.so");
    BUILT.call_once(|| {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut cmd = Command::new(cargo);
        cmd.args(["build", "-p", "engram-preload"]);
        if target_dir().ends_with("release") {
            cmd.arg("--release");
        }
        assert!(cmd.status().unwrap().success(), "building the shim failed");
    });
    assert!(lib.is_file(), "{} is missing", lib.display());
    lib
}

/// Whether `tool` (from Debian package `pkg`) is installed. A missing tool fails the test
/// under CI (env `CI` set: scripts/install-deps.sh installs it there), so that a test can
/// never pass without running; elsewhere it is skipped with a message saying so.
pub fn require(tool: &str, pkg: &str) -> bool {
    if have(tool) {
        return true;
    }
    let msg =
        format!("{tool} is not installed (apt-get install {pkg}, or scripts/install-deps.sh)");
    if std::env::var_os("CI").is_some_and(|v| !v.is_empty()) {
        panic!("{msg}: required under CI");
    }
    eprintln!("SKIPPED: {msg}; this test did not run");
    false
}

pub fn have(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

pub struct Pool {
    pub pool: PathBuf,
    pub socket: PathBuf,
    pub scratch: PathBuf,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<engram_core::Result<()>>>,
}

impl Pool {
    /// A fresh pool of `mib` MiB served by a daemon thread, and an empty scratch directory.
    pub fn new(name: &str, mib: u64) -> Pool {
        Pool::new_in("/dev/shm", name, mib)
    }

    /// `new`, with the pool file in directory `dir` (outside tmpfs, the engine makes its
    /// writes durable with msync).
    pub fn new_in(dir: &str, name: &str, mib: u64) -> Pool {
        let id = format!("{}-{name}", std::process::id());
        let pool = PathBuf::from(format!("{dir}/engram-preload-{id}.pool"));
        let socket = PathBuf::from(format!("/tmp/engram-preload-{id}.sock"));
        let scratch = PathBuf::from(format!("/tmp/engram-preload-{id}"));
        let _ = std::fs::remove_file(&pool);
        let _ = std::fs::remove_dir_all(&scratch);
        std::fs::create_dir_all(&scratch).unwrap();
        Fs::mkfs(&pool, mib << 20).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let (p, s, st) = (pool.clone(), socket.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            serve(
                &p,
                &ServeOptions {
                    socket: s,
                    idle_exit: None,
                    log_clients: true,
                },
                &st,
                &|_| {},
            )
        });
        let t = Instant::now();
        while Fs::connect(&socket).is_err() {
            assert!(
                t.elapsed() < Duration::from_secs(10),
                "daemon did not start"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        Pool {
            pool,
            socket,
            scratch,
            stop,
            thread: Some(thread),
        }
    }

    /// A command with the shim preloaded and connected to this pool's daemon.
    pub fn command(&self, prog: &str) -> Command {
        let mut c = Command::new(prog);
        c.env("LD_PRELOAD", library())
            .env("ENGRAM_SOCKET", &self.socket)
            .env("ENGRAM_MOUNT", MOUNT)
            .env_remove("ENGRAM_CWD")
            .current_dir(&self.scratch);
        c
    }

    /// Run a bash script under the shim; its output (fails the test on a non-zero exit).
    pub fn sh(&self, script: &str) -> String {
        let out = self.sh_status(script);
        assert!(
            out.status.success(),
            "script failed ({:?}):\n{script}\n--- stdout\n{}\n--- stderr\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    pub fn sh_status(&self, script: &str) -> Output {
        let mut c = self.command("bash");
        c.args(["-euo", "pipefail", "-c", script]);
        output(c, Duration::from_secs(300))
    }

    /// Check the pool with a new connection.
    pub fn fsck(&self) {
        let fs = Fs::connect(&self.socket).unwrap();
        let r = fs.fsck(false).unwrap();
        assert!(r.is_clean(), "fsck: {:?}", r.problems);
    }

    pub fn stop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            t.join().unwrap().unwrap();
        }
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        remove_lock_files(&self.pool);
        let _ = std::fs::remove_file(&self.pool);
        let _ = std::fs::remove_dir_all(&self.scratch);
    }
}

/// Remove the shim's lock and mapping files of the pool at `pool` from /dev/shm (the next
/// open of the pool would, docs/compatibility.md; these pools are not opened again).
#[allow(dead_code)] // Each test binary compiles this module; not all of them lock.
pub fn remove_lock_files(pool: &Path) {
    engram_core::sidefiles::remove_all(pool);
}

/// Run with a time limit (a hung program and what it started are killed and the test
/// fails).
pub fn output(mut c: Command, limit: Duration) -> Output {
    use std::os::unix::process::CommandExt;
    // A group of its own, so that a timeout ends the processes it started too: they hold
    // the output's pipes, and the read below would wait for them for good.
    c.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let mut child = c.spawn().expect("spawn");
    let t = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            return child.wait_with_output().unwrap();
        }
        if t.elapsed() > limit {
            // SAFETY: signalling the process group made for the child above.
            unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
            let out = child.wait_with_output().unwrap();
            panic!(
                "timed out after {limit:?}\n--- stdout\n{}\n--- stderr\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A real directory tree with text, binary, empty, nested files and a symlink.
pub fn make_tree(root: &Path) {
    std::fs::create_dir_all(root.join("a/b/c")).unwrap();
    std::fs::create_dir_all(root.join("empty")).unwrap();
    std::fs::write(root.join("a/hello.txt"), "hello world\n").unwrap();
    std::fs::write(root.join("a/b/empty.bin"), b"").unwrap();
    let mut x = 0x1234_5678u64;
    let big: Vec<u8> = (0..3_000_000)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    std::fs::write(root.join("a/b/c/big.bin"), &big).unwrap();
    for i in 0..50 {
        std::fs::write(
            root.join(format!("a/b/f{i:02}")),
            format!("file {i}\n").repeat(i + 1),
        )
        .unwrap();
    }
    std::os::unix::fs::symlink("a/hello.txt", root.join("link")).unwrap();
}

/// Compile tests/c/NAME.c into `dir` (gcc, with the flags the C tests share).
pub fn compile_c(name: &str, dir: &Path) -> PathBuf {
    compile_c_with(name, dir, &[])
}

/// `compile_c` with more arguments for gcc (`-static`).
pub fn compile_c_with(name: &str, dir: &Path, more: &[&str]) -> PathBuf {
    let src = format!("{}/tests/c/{name}.c", env!("CARGO_MANIFEST_DIR"));
    let exe = dir.join(name);
    let st = Command::new("gcc")
        .args([
            "-O1",
            "-Wall",
            "-Wno-deprecated-declarations",
            "-D_FORTIFY_SOURCE=2",
        ])
        .args(more)
        .args(["-pthread", "-o"])
        .arg(&exe)
        .arg(&src)
        .status()
        .expect("run gcc");
    assert!(st.success(), "gcc failed on {src}");
    exe
}

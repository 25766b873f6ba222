//! `engram run` through the real binary: it creates a missing pool, starts the real
//! `engram serve --idle-exit` daemon, runs the command with the pool under the mount
//! prefix, and passes the command's exit status on. The default pool (the demo pool in
//! /dev/shm) is tested inside a private mount namespace with its own /dev/shm, so that a
//! user's demo pool is never touched.

mod common;

use common::TempPool;
use engram_core::Fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

const ENGRAM: &str = env!("CARGO_BIN_EXE_engram");

/// The shim beside the `engram` binary (where `engram run` looks first), built if missing.
fn library() -> PathBuf {
    let lib = Path::new(ENGRAM).with_file_name("libengram_preload.so");
    if !lib.is_file() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut cmd = Command::new(cargo);
        cmd.args(["build", "-p", "engram-preload"]);
        if lib.parent().is_some_and(|d| d.ends_with("release")) {
            cmd.arg("--release");
        }
        assert!(cmd.status().unwrap().success(), "building the shim failed");
    }
    assert!(lib.is_file(), "{} is missing", lib.display());
    lib
}

fn engram_run(args: &[&str]) -> Output {
    library();
    Command::new(ENGRAM)
        .arg("run")
        .args(args)
        .env_remove("ENGRAM_PRELOAD_LIB")
        .env_remove("ENGRAM_BIN")
        .env_remove("LD_PRELOAD")
        .output()
        .expect("run engram")
}

/// Wait (bounded) for the daemon started by `engram run` to exit by itself once idle.
fn wait_daemon_gone(socket: &Path) {
    let t = Instant::now();
    while Fs::connect(socket).is_ok() || socket.exists() {
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "the daemon on {} did not exit",
            socket.display()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn engram_run_creates_the_pool_starts_the_real_daemon_and_passes_the_status_on() {
    let pool = TempPool::new("run");
    let socket = PathBuf::from(format!("{}.sock", pool.s()));
    let mount = format!("/tmp/engram-cli-run-mnt-{}", std::process::id());
    assert!(!pool.path().exists());
    // The command sees the pool under the prefix, a child process of it too, and the
    // daemon serving it is the real `engram serve` (found in /proc by its arguments 1 to 6,
    // matched as a whole line so that the shell and grep, whose arguments hold the pattern,
    // do not count).
    let script = format!(
        "set -e; mkdir {m}/d; echo hello > {m}/d/f; sh -c 'cat {m}/d/f'; ls {m}; \
         for p in /proc/[0-9]*; do tr '\\0' '\\n' < $p/cmdline 2>/dev/null | sed -n 2,7p \
           | tr '\\n' ' '; echo; done | grep -cx 'serve {pool} --socket {sock} --idle-exit [0-9]* '; \
         exit 7",
        m = mount,
        pool = pool.s(),
        sock = socket.display()
    );
    let out = engram_run(&[
        "--pool",
        pool.s(),
        "--mount",
        &mount,
        "--",
        "sh",
        "-c",
        &script,
    ]);
    assert_eq!(
        out.status.code(),
        Some(7),
        "{}\n{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    assert_eq!(text(&out.stdout), "hello\nd\n1\n", "{}", text(&out.stderr));
    assert!(pool.path().is_file(), "the pool was created");
    // A second command finds the pool's contents (through the running or a new daemon),
    // and a command killed by a signal reports 128 + the signal.
    let out = engram_run(&[
        "--pool",
        pool.s(),
        "--mount",
        &mount,
        "--",
        "cat",
        &format!("{mount}/d/f"),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "hello\n");
    let out = engram_run(&[
        "--pool",
        pool.s(),
        "--mount",
        &mount,
        "--",
        "sh",
        "-c",
        "kill -TERM $$",
    ]);
    assert_eq!(out.status.code(), Some(128 + libc::SIGTERM));
    let out = engram_run(&["--pool", pool.s(), "--", "true"]);
    assert_eq!(out.status.code(), Some(0));
    // No command: a usage error, not a crash.
    let out = Command::new(ENGRAM)
        .args(["run", "--pool", pool.s()])
        .output()
        .unwrap();
    assert!(!out.status.success());
    // A command that cannot run: the shell's statuses (127 not found, 126 not runnable).
    let out = engram_run(&["--pool", pool.s(), "--", "no-such-command-engram"]);
    assert_eq!(out.status.code(), Some(127), "{}", text(&out.stderr));
    let out = engram_run(&["--pool", pool.s(), "--", "/etc/passwd"]);
    assert_eq!(out.status.code(), Some(126), "{}", text(&out.stderr));
    // The daemon exits by itself once idle, and leaves the pool clean with the data in it.
    wait_daemon_gone(&socket);
    // A pool another process holds: the daemon cannot start, and says why.
    let held = Fs::open(pool.path(), &Default::default()).unwrap();
    let out = engram_run(&["--pool", pool.s(), "--", "true"]);
    assert!(
        !out.status.success() && text(&out.stderr).contains("in use by another process"),
        "{}",
        text(&out.stderr)
    );
    drop(held);
    // The daemons `engram run` started logged their start, not each process of the runs.
    let log = std::fs::read_to_string(format!("{}.sock.log", pool.s())).unwrap();
    assert!(
        log.contains("serving ") && !log.contains(" connected (pid"),
        "{log}"
    );
    let _ = std::fs::remove_file(format!("{}.sock.log", pool.s()));
    let fs = Fs::open(pool.path(), &Default::default()).unwrap();
    assert!(fs.mount_info().was_clean);
    assert_eq!(fs.read_file("/d/f").unwrap(), b"hello\n");
    assert!(fs.fsck(false).unwrap().is_clean());
}

#[test]
fn engram_run_without_a_pool_uses_the_demo_pool_in_a_private_dev_shm() {
    // A private mount namespace with a fresh tmpfs on /dev/shm: the default pool
    // (/dev/shm/engram-demo.pool) is created there and vanishes with the namespace.
    let probe = Command::new("unshare")
        .args(["-m", "sh", "-c", "mount -t tmpfs tmpfs /dev/shm"])
        .output();
    if !probe.is_ok_and(|o| o.status.success()) {
        let msg = "cannot make a private /dev/shm (unshare -m needs root or CAP_SYS_ADMIN)";
        assert!(std::env::var_os("CI").is_none(), "{msg}: required under CI");
        eprintln!("SKIPPED: {msg}; the default-pool path was not tested");
        return;
    }
    library();
    let script = format!(
        "mount -t tmpfs tmpfs /dev/shm && test ! -e /dev/shm/engram-demo.pool && \
         {engram} run -- sh -c 'echo demo > /mnt/engram/x && cat /mnt/engram/x && \
           test -S /dev/shm/engram-demo.pool.sock && exit 3'; \
         s=$?; test -f /dev/shm/engram-demo.pool && echo created; exit $s",
        engram = ENGRAM
    );
    let out = Command::new("unshare")
        .args(["-m", "sh", "-c", &script])
        .env_remove("LD_PRELOAD")
        .env_remove("ENGRAM_PRELOAD_LIB")
        .env_remove("ENGRAM_BIN")
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}\n{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    assert_eq!(
        text(&out.stdout),
        "demo\ncreated\n",
        "{}",
        text(&out.stderr)
    );
}

/// A pool on a read-only mount: `engram run` says so, rather than that no daemon answered
/// (a daemon that cannot start there cannot write its log either).
#[test]
fn engram_run_on_a_read_only_pool_says_it_is_read_only() {
    let probe = Command::new("unshare")
        .args(["-m", "sh", "-c", "mount -t tmpfs tmpfs /mnt"])
        .output();
    if !probe.is_ok_and(|o| o.status.success()) {
        let msg = "cannot make a private mount namespace (unshare -m needs root)";
        assert!(std::env::var_os("CI").is_none(), "{msg}: required under CI");
        eprintln!("SKIPPED: {msg}");
        return;
    }
    let script = format!(
        "mount -t tmpfs tmpfs /mnt && mkdir /mnt/rw /mnt/ro && \
         {engram} mkfs /mnt/rw/p.pool --size 8M >/dev/null && \
         mount --bind /mnt/rw /mnt/ro && mount -o remount,bind,ro /mnt/ro && \
         {engram} run --pool /mnt/ro/p.pool -- true",
        engram = ENGRAM
    );
    let out = Command::new("unshare")
        .args(["-m", "sh", "-c", &script])
        .env_remove("LD_PRELOAD")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("is not writable: Read-only file system"),
        "{}",
        text(&out.stderr)
    );
}

//! `engram run` starts a daemon that all processes of the command share, and that exits by
//! itself once idle. (A test binary of its own: it sets environment variables.)

mod common;

use common::{library, target_dir};
use engram_core::Fs;
use std::path::PathBuf;
use std::time::{Duration, Instant};

fn scratch(name: &str) -> PathBuf {
    let d = PathBuf::from(format!("/tmp/engram-run-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn engram_run_starts_a_shared_daemon_that_exits_when_idle() {
    let dir = scratch("run");
    let pool = dir.join("run.pool");
    // Stand the example in for `engram serve` (same flags).
    let serve = target_dir().join("examples/pool");
    assert!(serve.is_file(), "{} not built", serve.display());
    // SAFETY: this test binary runs this one test, so no other thread reads the environment.
    unsafe {
        std::env::set_var("ENGRAM_BIN", &serve);
        std::env::set_var("ENGRAM_PRELOAD_LIB", library());
    }
    let script = "mkdir -p /mnt/engram/r && seq 1 1000 > /mnt/engram/r/n && \
                  sh -c 'wc -l < /mnt/engram/r/n' > /mnt/engram/r/count && \
                  cat /mnt/engram/r/count /mnt/engram/r/n | sha256sum > /mnt/engram/r/sum && \
                  test \"$(cat /mnt/engram/r/count)\" = 1000";
    let cmd: Vec<std::ffi::OsString> = ["bash", "-c", script].iter().map(Into::into).collect();
    let code = engram_run::run(Some(pool.clone()), None, &cmd).unwrap();
    assert_eq!(code, 0);
    let code = engram_run::run(Some(pool.clone()), None, &["false".into()]).unwrap();
    assert_eq!(code, 1);
    // A background job holding a pool descriptor, whose parent exits at once, writes after
    // the daemon's idle time: it connected when it started, so the daemon stayed (found by
    // probing: `nohup cmd > /mnt/engram/log &` lost its output with EIO).
    let late = format!(
        "nohup sh -c 'sleep {}; echo late' > /mnt/engram/r/late 2>/dev/null &",
        engram_run::IDLE_EXIT.as_secs() + 2
    );
    let cmd: Vec<std::ffi::OsString> = ["sh", "-c", &late].iter().map(Into::into).collect();
    assert_eq!(engram_run::run(Some(pool.clone()), None, &cmd).unwrap(), 0);
    // The daemon exits by itself once idle, leaving the pool clean.
    let socket = engram_run::socket_for(&pool);
    let t = Instant::now();
    while Fs::connect(&socket).is_ok() || socket.exists() {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "the daemon did not exit"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_millis(300));
    let fs = Fs::open(&pool, &Default::default()).unwrap();
    assert!(fs.mount_info().was_clean);
    assert_eq!(fs.read_file("/r/count").unwrap(), b"1000\n");
    assert_eq!(fs.read_file("/r/late").unwrap(), b"late\n");
    assert!(fs.fsck(false).unwrap().is_clean());
    drop(fs);
    // The shell forked with pool files open: their lock files are in /dev/shm.
    engram_core::sidefiles::remove_all(&pool);
    let _ = std::fs::remove_dir_all(&dir);
}

//! A program whose daemon goes away while it runs is told once, on stderr, why every call
//! under the prefix now fails with EIO.

mod common;

use common::Pool;
use std::time::{Duration, Instant};

#[test]
fn a_program_is_told_once_that_its_daemon_has_gone() {
    let mut p = Pool::new("gone", 64);
    let go = p.scratch.join("go");
    let mut c = p.command("bash");
    c.arg("-c").arg(format!(
        "echo a > /mnt/engram/a; while [ ! -e {go} ]; do sleep 0.02; done; \
         echo b > /mnt/engram/b; echo c > /mnt/engram/c; true",
        go = go.display()
    ));
    c.stderr(std::process::Stdio::piped());
    let child = c.spawn().unwrap();
    let fs = engram_core::Fs::connect(&p.socket).unwrap();
    let t = Instant::now();
    while fs.stat("/a").map_or(true, |m| m.size < 2) {
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "the program did not start"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    drop(fs);
    p.stop();
    std::fs::write(&go, b"").unwrap();
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.matches("daemon has gone away").count(), 1, "{err}");
    assert_eq!(err.matches("Input/output error").count(), 2, "{err}");
}

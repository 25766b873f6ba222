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

/// A program started when no daemon listens any more (killed, its socket left or removed)
/// gets EIO from calls under the prefix, as one whose daemon went away does, and is told
/// why once per process; not the socket's ECONNREFUSED or ENOENT, which it would take for
/// its file's (found by probing: Python raised ConnectionRefusedError from makedirs).
#[test]
fn a_program_started_without_its_daemon_gets_eio() {
    let mut p = Pool::new("never", 64);
    p.stop();
    for socket_left in [false, true] {
        if socket_left {
            // A socket file nobody listens on: what a killed daemon leaves.
            let _ = std::fs::remove_file(&p.socket);
            drop(std::os::unix::net::UnixListener::bind(&p.socket).unwrap());
        }
        let out = p
            .command("bash")
            .arg("-c")
            .arg("mkdir /mnt/engram/d; cat /mnt/engram/f; true")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("/mnt/engram/d’: Input/output error"), "{err}");
        assert!(
            err.contains("cat: /mnt/engram/f: Input/output error"),
            "{err}"
        );
        // Once per process (mkdir, cat).
        assert_eq!(
            err.matches("cannot reach an EngramFS daemon").count(),
            2,
            "{err}"
        );
    }
}

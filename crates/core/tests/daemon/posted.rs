//! Closes are posted without waiting for their answer: the next call of the process waits
//! for them, so the server still sees its requests in order, and a daemon that has gone
//! makes later calls fail rather than hang.

use super::{Daemon, spawn_worker};
use engram_core::request::Request;
use engram_core::{Fs, Handle, OpenOptions};
use std::sync::OnceLock;
use std::time::Duration;

fn rw() -> OpenOptions {
    OpenOptions::new().read(true).write(true)
}

/// The last close of an unlinked file frees its inode; the very next call already sees it
/// freed, however soon it comes.
#[test]
fn a_call_after_a_close_sees_the_close_done() {
    let d = Daemon::start("posted-order", 64 << 20);
    let fs = Fs::connect(&d.socket).unwrap();
    let before = fs.statfs().unwrap().files_free;
    for i in 0..2000 {
        let f = fs
            .open_file(format!("/f{i}"), &rw().create(true).create_new(true))
            .unwrap();
        f.write_at(&[7u8; 8192], 0).unwrap();
        fs.unlink(format!("/f{i}")).unwrap();
        assert_eq!(fs.statfs().unwrap().files_free, before - 1, "round {i}");
        drop(f);
        assert_eq!(fs.statfs().unwrap().files_free, before, "round {i}");
    }
}

/// A posted request is answered before the next call is sent, a forged one too (its error
/// is dropped).
#[test]
fn every_call_first_collects_the_posted_answers() {
    let d = Daemon::start("posted-collect", 16 << 20);
    let fs = Fs::connect(&d.socket).unwrap();
    let remote = fs.remote().unwrap();
    let forged = Request::Close {
        target: Handle {
            ino: 12345,
            generation: 9,
        },
        write: true,
    };
    for i in 0..20 {
        remote.post(&forged).unwrap();
        assert!(remote.posted() <= 1, "a post first collects the one before");
        if i % 4 == 0 {
            fs.mkdir(format!("/d{i}"), 0o755).unwrap();
            assert_eq!(remote.posted(), 0, "round {i}");
        }
    }
    assert!(fs.statfs().is_ok());
    assert_eq!(remote.posted(), 0);
}

/// More threads than a client has slots, each closing as fast as it can: every slot a
/// posted close holds comes free, nothing is lost and nothing hangs.
#[test]
fn threads_posting_closes_share_the_slots() {
    let d = Daemon::start("posted-threads", 64 << 20);
    let fs = Fs::connect(&d.socket).unwrap();
    let before = fs.statfs().unwrap().files_free;
    std::thread::scope(|s| {
        for t in 0..16 {
            let fs = &fs;
            s.spawn(move || {
                for i in 0..300 {
                    let path = format!("/t{t}-{i}");
                    let f = fs.open_file(&path, &rw().create(true)).unwrap();
                    f.write_at(format!("{t} {i}").as_bytes(), 0).unwrap();
                    // Two handles of one file: the first close frees nothing.
                    let g = fs.open_file(&path, &rw()).unwrap();
                    drop(f);
                    if i % 2 == 0 {
                        fs.unlink(&path).unwrap();
                    }
                    drop(g);
                }
            });
        }
    });
    let left = 16 * 150;
    assert_eq!(fs.statfs().unwrap().files_free, before - left);
    assert_eq!(fs.read_dir("/").unwrap().count(), left as usize + 2);
    assert_eq!(fs.read_file("/t3-1").unwrap(), b"3 1");
}

/// Closes posted to a daemon that has stopped: the one whose answer is awaited fails, and
/// so does every later call, at once.
#[test]
fn closes_posted_to_a_daemon_that_has_gone_do_not_hang() {
    let mut d = Daemon::start("posted-gone", 16 << 20);
    let fs = Fs::connect(&d.socket).unwrap();
    let files: Vec<_> = (0..20)
        .map(|i| fs.open_file(format!("/f{i}"), &rw().create(true)).unwrap())
        .collect();
    d.stop();
    drop(files);
    let e = fs.mkdir("/after", 0o755).unwrap_err();
    assert_eq!(e.errno(), libc::EIO, "{e}");
}

/// Worker role "serve": a daemon in a process of its own (ENGRAM_ARG: the pool), so that a
/// test can stop it with SIGSTOP.
pub fn serve_worker() {
    let pool = std::env::var("ENGRAM_ARG").unwrap();
    let socket = std::env::var("ENGRAM_SOCKET").unwrap();
    let opts = engram_core::daemon::ServeOptions {
        socket: socket.into(),
        idle_exit: None,
        log_clients: true,
    };
    let stop = engram_core::daemon::Stop::new();
    engram_core::daemon::serve_until(pool.as_ref(), &opts, &stop, &|_| {}).unwrap();
}

static NESTED: OnceLock<Fs> = OnceLock::new();

extern "C" fn nested_call(_: libc::c_int) {
    assert!(NESTED.get().unwrap().statfs().is_ok());
}

/// A signal handler's call made while its thread waits for a posted close's answer (the
/// daemon stopped meanwhile) waits too, and both finish once the daemon answers: the
/// wait does not take the slot, which the handler's call would then never find.
#[test]
fn a_signal_handlers_call_inside_a_wait_for_a_posted_close_finishes() {
    let id = std::process::id();
    let pool = format!("/dev/shm/engram-daemon-{id}-posted-signal.pool");
    let socket = std::path::PathBuf::from(format!("/tmp/engram-daemon-{id}-posted-signal.sock"));
    let _ = std::fs::remove_file(&socket);
    Fs::mkfs(&pool, 16 << 20).unwrap();
    let mut daemon = spawn_worker("serve", &socket, &pool);
    let fs = loop {
        match Fs::connect(&socket) {
            Ok(fs) => break fs,
            Err(_) => std::thread::sleep(Duration::from_millis(10)),
        }
    };
    let f = fs.open_file("/a", &rw().create(true)).unwrap();
    NESTED.set(fs).ok().unwrap();
    let fs = NESTED.get().unwrap();
    let pid = daemon.id() as i32;
    // SAFETY: installing a handler for a signal only this test sends, to its own thread.
    unsafe {
        libc::signal(
            libc::SIGUSR2,
            nested_call as *const () as libc::sighandler_t,
        );
    }
    // SAFETY: stopping our own child.
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    drop(f);
    assert_eq!(fs.remote().unwrap().posted(), 1);
    // SAFETY: pthread_self names this thread.
    let me = unsafe { libc::pthread_self() };
    let helper = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        // SAFETY: signalling the test's thread, which has the handler installed.
        unsafe { libc::pthread_kill(me, libc::SIGUSR2) };
        std::thread::sleep(Duration::from_millis(300));
        // SAFETY: continuing our own child.
        unsafe { libc::kill(pid, libc::SIGCONT) };
    });
    assert!(fs.statfs().is_ok());
    helper.join().unwrap();
    assert_eq!(fs.remote().unwrap().posted(), 0);
    daemon.kill().unwrap();
    daemon.wait().unwrap();
    let _ = std::fs::remove_file(&pool);
    let _ = std::fs::remove_file(&socket);
}

//! `engram serve`: a daemon process that other processes connect to, that stops cleanly on
//! SIGTERM, and that a new `engram serve` recovers after it was killed.

mod common;

use common::{TempPool, ok};
use engram_core::{Fs, Options};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn start(pool: &TempPool, socket: &PathBuf) -> Child {
    let child = Command::new(env!("CARGO_BIN_EXE_engram"))
        .args(["serve", pool.s(), "--socket"])
        .arg(socket)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let until = Instant::now() + Duration::from_secs(10);
    while Fs::connect(socket).is_err() {
        assert!(Instant::now() < until, "the daemon did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    child
}

fn signal(child: &Child, sig: i32) {
    // SAFETY: signalling our own child process.
    unsafe { libc::kill(child.id() as i32, sig) };
}

#[test]
fn serve_shares_the_pool_and_stops_cleanly_on_sigterm() {
    let pool = TempPool::new("serve");
    ok(["mkfs", pool.s(), "--size", "32M"]);
    let socket = PathBuf::from(format!("{}.sock", pool.s()));
    let mut daemon = start(&pool, &socket);
    let a = Fs::connect(&socket).unwrap();
    let b = Fs::connect(&socket).unwrap();
    a.write_file("/from-a", b"a").unwrap();
    assert_eq!(b.read_file("/from-a").unwrap(), b"a");
    drop((a, b));
    signal(&daemon, libc::SIGTERM);
    let out = daemon.wait_with_output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let log = String::from_utf8_lossy(&out.stderr);
    // The probe in `start`, a and b: three clients, each connected and disconnected once.
    let (on, off) = sessions(&log);
    assert_eq!(on.len(), 3, "{log}");
    assert_eq!(on, off, "{log}");
    assert!(log.contains("marked clean"), "{log}");
    assert!(!socket.exists(), "the socket is removed");
    let fs = Fs::open(pool.path(), &Options::default()).unwrap();
    assert!(fs.mount_info().was_clean);
    assert_eq!(fs.read_file("/from-a").unwrap(), b"a");
    assert!(fs.fsck(false).unwrap().is_clean());
    drop(fs);
    // SIGINT with a client still connected that holds an unlinked file open.
    daemon = start(&pool, &socket);
    let c = Fs::connect(&socket).unwrap();
    c.write_file("/kept", &[4u8; 10000]).unwrap();
    c.write_file("/gone", &[5u8; 10000]).unwrap();
    let held = c
        .open_file("/gone", &engram_core::OpenOptions::new().read(true))
        .unwrap();
    c.unlink("/gone").unwrap();
    // A call's ordinary answer is not logged; a request that points at a client's mistake
    // (a close for writing of a file it does not hold open for writing) is, once.
    assert!(c.mkdir("/kept", 0o755).is_err());
    let kept = c.handle_of(c.stat("/kept").unwrap().ino).unwrap();
    let mut w = engram_core::wire::Writer::default();
    engram_core::wire::encode_request(
        &engram_core::request::Request::Close {
            target: kept,
            write: true,
        },
        &mut w,
    );
    let reply = c.remote().unwrap().call_raw(&w.0).unwrap();
    assert!(engram_core::wire::decode_reply(&reply).is_err());
    signal(&daemon, libc::SIGINT);
    let out = daemon.wait_with_output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let log = String::from_utf8_lossy(&out.stderr);
    let (on, off) = sessions(&log);
    assert_eq!((on.len(), on.clone()), (2, off), "{log}");
    let failed: Vec<&str> = log.lines().filter(|l| l.contains(" failed: ")).collect();
    assert_eq!(failed.len(), 1, "{log}");
    assert!(
        failed[0].starts_with(&format!(
            "engram serve: client {}: close failed: errno 9",
            on[1]
        )),
        "{log}"
    );
    drop((held, c));
    let fs = Fs::open(pool.path(), &Options::default()).unwrap();
    assert!(fs.mount_info().was_clean, "SIGINT leaves the pool clean");
    assert_eq!(fs.read_file("/kept").unwrap(), [4u8; 10000]);
    assert!(fs.stat("/gone").is_err());
    let r = fs.fsck(false).unwrap();
    assert!(r.is_clean(), "{:?}", r.problems);
}

/// The client ids of the log's "client N connected (...)" and "client N disconnected"
/// lines, each list sorted. Other lines that mention clients ("client N: open failed")
/// do not count, nor does "disconnected" count as "connected".
fn sessions(log: &str) -> (Vec<u64>, Vec<u64>) {
    let (mut on, mut off) = (Vec::new(), Vec::new());
    for line in log.lines() {
        let Some(rest) = line.strip_prefix("engram serve: client ") else {
            continue;
        };
        let Some((id, what)) = rest.split_once(' ') else {
            continue;
        };
        let Ok(id) = id.parse::<u64>() else {
            continue;
        };
        if what.starts_with("connected (pid ") {
            on.push(id);
        } else if what == "disconnected" {
            off.push(id);
        }
    }
    on.sort_unstable();
    off.sort_unstable();
    (on, off)
}

#[test]
fn a_killed_daemon_is_recovered_by_the_next_one() {
    let pool = TempPool::new("serve-kill");
    ok(["mkfs", pool.s(), "--size", "32M"]);
    let socket = PathBuf::from(format!("{}.sock", pool.s()));
    let mut daemon = start(&pool, &socket);
    let fs = Fs::connect(&socket).unwrap();
    for i in 0..50 {
        fs.write_file(format!("/f{i}"), format!("{i}").as_bytes())
            .unwrap();
    }
    signal(&daemon, libc::SIGKILL);
    daemon.wait().unwrap();
    drop(fs);
    // The socket file is left behind; the next daemon replaces it and recovers the pool.
    let daemon = start(&pool, &socket);
    let fs = Fs::connect(&socket).unwrap();
    for i in 0..50 {
        assert_eq!(
            fs.read_file(format!("/f{i}")).unwrap(),
            format!("{i}").as_bytes()
        );
    }
    assert!(fs.fsck(false).unwrap().is_clean());
    drop(fs);
    signal(&daemon, libc::SIGTERM);
    let out = daemon.wait_with_output().unwrap();
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(log.contains("recovered"), "{log}");
}

/// The daemon runs above ordinary processes where it may (as root here): its serving
/// threads' nice value is `SERVER_NICE` (/proc/PID/task/*/stat, field 19).
#[test]
fn serve_runs_its_threads_at_a_higher_priority() {
    // SAFETY: geteuid has no failure.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: only root may raise a priority");
        return;
    }
    let pool = TempPool::new("serve-nice");
    ok(["mkfs", pool.s(), "--size", "32M"]);
    let socket = PathBuf::from(format!("{}.sock", pool.s()));
    let daemon = start(&pool, &socket);
    let tasks = std::fs::read_dir(format!("/proc/{}/task", daemon.id())).unwrap();
    let nices: Vec<i32> = tasks
        .map(|t| {
            let stat = std::fs::read_to_string(t.unwrap().path().join("stat")).unwrap();
            // After the command's name in parentheses: state is field 3, nice field 19.
            let after = &stat[stat.rfind(')').unwrap() + 2..];
            after.split(' ').nth(16).unwrap().parse().unwrap()
        })
        .collect();
    signal(&daemon, libc::SIGTERM);
    assert!(daemon.wait_with_output().unwrap().status.success());
    assert!(nices.len() >= 2, "{nices:?}");
    assert!(
        nices.iter().all(|&n| n == engram_core::daemon::SERVER_NICE),
        "{nices:?}"
    );
}

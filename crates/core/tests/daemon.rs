//! The daemon: clients in other threads and processes share one pool through `engram serve`'s
//! shared-memory transport.

mod common;
#[path = "daemon/forged.rs"]
mod forged;
#[path = "daemon/idle.rs"]
mod idle;
#[path = "daemon/in_place.rs"]
mod in_place;
#[path = "daemon/isolation.rs"]
mod isolation;
#[path = "daemon/killed.rs"]
mod killed;
#[path = "daemon/many_clients.rs"]
mod many_clients;
#[path = "daemon/mapped.rs"]
mod mapped;
#[path = "daemon/pool_file.rs"]
mod pool_file;
#[path = "daemon/posted.rs"]
mod posted;
#[path = "daemon/processes.rs"]
mod processes;
#[path = "daemon/replace_race.rs"]
mod replace_race;
#[path = "daemon/reserve.rs"]
mod reserve;
#[path = "daemon/walk_cache.rs"]
mod walk_cache;

use engram_core::daemon::{ServeOptions, Stop, serve_until};
use engram_core::{Fs, OpenOptions, Options};
use processes::{mixed_worker, nobody_worker, pattern_writer};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

struct Daemon {
    stop: Arc<Stop>,
    thread: Option<Served>,
    socket: PathBuf,
    pool: PathBuf,
}

impl Daemon {
    fn start(name: &str, size: u64) -> Daemon {
        let pool = PathBuf::from(format!(
            "/dev/shm/engram-daemon-{}-{name}.pool",
            std::process::id()
        ));
        let socket = PathBuf::from(format!(
            "/tmp/engram-daemon-{}-{name}.sock",
            std::process::id()
        ));
        let _ = std::fs::remove_file(&pool);
        Fs::mkfs(&pool, size).unwrap();
        let (stop, thread) = serve(&pool, &socket);
        Daemon {
            stop,
            thread: Some(thread),
            socket,
            pool,
        }
    }

    /// Stop the daemon (it checkpoints and marks the pool clean).
    fn stop(&mut self) {
        self.stop.stop();
        self.thread.take().unwrap().join().unwrap().unwrap();
    }
}

type Served = std::thread::JoinHandle<engram_core::Result<()>>;

/// Serve `pool` on `socket` in a thread; returns once the socket is there.
fn serve(pool: &Path, socket: &Path) -> (Arc<Stop>, Served) {
    let stop = Arc::new(Stop::new());
    let (p, s, st) = (pool.to_path_buf(), socket.to_path_buf(), stop.clone());
    let thread = std::thread::spawn(move || {
        serve_until(
            &p,
            &ServeOptions {
                socket: s,
                idle_exit: None,
                log_clients: true,
            },
            &st,
            &|line| eprintln!("daemon: {line}"),
        )
    });
    for _ in 0..200 {
        if socket.exists() {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    (stop, thread)
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.stop.stop();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.pool);
    }
}

/// Send `req` as raw bytes through this client's slots and decode the reply (a forged
/// request, or one step of a write path driven by hand).
fn send(
    fs: &Fs,
    req: &engram_core::request::Request,
) -> engram_core::Result<engram_core::request::Response> {
    let mut w = engram_core::wire::Writer::default();
    engram_core::wire::encode_request(req, &mut w);
    engram_core::wire::decode_reply(&fs.remote().unwrap().call_raw(&w.0).unwrap())
}

/// Whether the pool `fs` reaches checks clean (the daemon still running).
fn assert_fsck_clean(fs: &Fs) {
    let r = fs.fsck(false).unwrap();
    assert!(r.is_clean(), "{:?}", r.problems);
}

fn check_clean(pool: &Path) {
    let fs = Fs::open(pool, &Options::default()).unwrap();
    assert!(
        fs.mount_info().was_clean,
        "the daemon leaves the pool clean"
    );
    let r = fs.fsck(false).unwrap();
    assert!(r.is_clean(), "{:?}", r.problems);
}

#[test]
fn every_operation_works_through_the_daemon() {
    let d = Daemon::start("ops", 64 << 20);
    let fs = Fs::connect(&d.socket).unwrap();
    fs.mkdir("/a", 0o755).unwrap();
    fs.write_file("/a/f", b"hello daemon").unwrap();
    assert_eq!(fs.read_file("/a/f").unwrap(), b"hello daemon");
    let f = fs
        .open_file("/a/f", &OpenOptions::new().read(true).write(true))
        .unwrap();
    f.write_at(b"HELLO", 0).unwrap();
    f.write_at(&[9u8; 10000], 20000).unwrap();
    f.set_len(25000).unwrap();
    drop(f);
    let data = fs.read_file("/a/f").unwrap();
    assert_eq!(&data[..12], b"HELLO daemon");
    assert!(data[12..20000].iter().all(|&b| b == 0));
    assert!(data[20000..25000].iter().all(|&b| b == 9));
    fs.rename("/a/f", "/a/g").unwrap();
    fs.symlink("a/g", "/s").unwrap();
    fs.link("/a/g", "/h").unwrap();
    assert_eq!(fs.stat("/s").unwrap().nlink, 2);
    assert_eq!(fs.read_dir("/a").unwrap().count(), 3);
    fs.unlink("/h").unwrap();
    assert!(fs.fsck(false).unwrap().is_clean());
    // A second client sees every update at once.
    let other = Fs::connect(&d.socket).unwrap();
    assert_eq!(other.read_file("/s").unwrap().len(), 25000);
    other.write_file("/from-other", b"x").unwrap();
    assert_eq!(fs.read_file("/from-other").unwrap(), b"x");
    drop(other);
    drop(fs);
    let mut d = d;
    d.stop();
    check_clean(&d.pool);
}

/// On a pool in memory (tmpfs, or persistent memory) fsync has nothing to write back and
/// nothing that can fail: it answers without a round trip. Everything written before it is
/// already durable, as a new client sees.
#[test]
fn fsync_of_a_pool_in_memory_makes_no_round_trip() {
    let d = Daemon::start("fsync", 16 << 20);
    let fs = Fs::connect(&d.socket).unwrap();
    assert_eq!(fs.mount_info().media, engram_pmem::Media::Tmpfs);
    let f = fs
        .open_file("/f", &OpenOptions::new().write(true).create(true))
        .unwrap();
    let dir = fs.open_file("/", &OpenOptions::new()).unwrap();
    let remote = fs.remote().unwrap();
    f.write_at(b"durable", 0).unwrap();
    let before = remote.requests_sent();
    f.sync_all().unwrap();
    f.sync_data().unwrap();
    dir.sync_all().unwrap();
    assert_eq!(remote.requests_sent(), before, "fsync asks nothing");
    fs.statfs().unwrap();
    assert_eq!(
        remote.requests_sent(),
        before.wrapping_add(1),
        "statfs asks"
    );
    let other = Fs::connect(&d.socket).unwrap();
    assert_eq!(other.read_file("/f").unwrap(), b"durable");
}

/// Requests and replies of every length around the slot's inline block (a create's request
/// is its name plus 23 bytes; an error reply carries its message) arrive whole, and a
/// slot's payload area, used by a long request and then by its reply, keeps neither's
/// bytes for the next message.
#[test]
fn messages_of_every_length_cross_the_slots_intact() {
    let d = Daemon::start("lengths", 64 << 20);
    let fs = Fs::connect(&d.socket).unwrap();
    fs.mkdir("/n", 0o755).unwrap();
    let name = |n: usize| -> String { (0..n).map(|i| (b'a' + (i % 26) as u8) as char).collect() };
    for n in 1..=255 {
        fs.write_file(format!("/n/{}", name(n)), n.to_string().as_bytes())
            .unwrap();
        // An error reply right after, with the same slot's payload area just used.
        let e = fs.mkdir(format!("/n/{}", name(n)), 0o755).unwrap_err();
        assert_eq!(e.errno(), libc::EEXIST, "name of {n} bytes");
    }
    let mut names: Vec<String> = fs
        .read_dir("/n")
        .unwrap()
        .map(|e| String::from_utf8(e.unwrap().name).unwrap())
        .filter(|n| n != "." && n != "..")
        .collect();
    names.sort_by_key(|n| n.len());
    assert!(
        names.iter().map(String::as_str).eq((1..=255)
            .map(name)
            .collect::<Vec<_>>()
            .iter()
            .map(String::as_str)),
        "the names listed differ"
    );
    for n in 1..=255 {
        let data = fs.read_file(format!("/n/{}", name(n))).unwrap();
        assert_eq!(data, n.to_string().as_bytes(), "name of {n} bytes");
    }
}

/// Once the daemon has gone, every call fails with EIO, however many: none waits for ever
/// on a slot an earlier failed call left taken (a client has eight), and none reuses such
/// a slot.
#[test]
fn calls_after_the_daemon_has_gone_fail_with_eio() {
    let mut d = Daemon::start("gone", 16 << 20);
    let fs = Fs::connect(&d.socket).unwrap();
    fs.mkdir("/before", 0o755).unwrap();
    d.stop();
    for i in 0..20 {
        let e = fs.mkdir(format!("/after{i}"), 0o755).unwrap_err();
        assert_eq!(e.errno(), libc::EIO, "call {i}: {e}");
    }
    drop(fs);
    let fs = Fs::open(&d.pool, &Default::default()).unwrap();
    assert!(fs.stat("/before").is_ok());
    assert!(fs.stat("/after0").is_err());
}

// ------------------------------------------------------------------ processes

/// Run `role` in a child process: this test binary again, entering `worker_entry`.
fn spawn_worker(role: &str, socket: &Path, arg: &str) -> std::process::Child {
    std::process::Command::new(std::env::current_exe().unwrap())
        .args(["worker_entry", "--exact", "--nocapture", "--test-threads=1"])
        .env("ENGRAM_WORKER", role)
        .env("ENGRAM_SOCKET", socket)
        .env("ENGRAM_ARG", arg)
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap()
}

/// The body of the child processes the multi-process tests start (`daemon/processes.rs`
/// and others). Run on its own (without ENGRAM_WORKER) it does nothing.
#[test]
fn worker_entry() {
    let Ok(role) = std::env::var("ENGRAM_WORKER") else {
        return;
    };
    if role == "nobody" {
        return nobody_worker();
    }
    if role == "serve" {
        return posted::serve_worker();
    }
    if role == "serve-as-nobody" {
        return mapped::serve_as_nobody();
    }
    if role == "drop-after-connect" {
        return processes::drop_after_connect();
    }
    if role == "suid-forger" {
        return processes::suid_forger();
    }
    if role == "nobody-maps" {
        return mapped::nobody_maps();
    }
    let fs = Fs::connect(std::env::var("ENGRAM_SOCKET").unwrap()).unwrap();
    let arg = std::env::var("ENGRAM_ARG").unwrap_or_default();
    match role.as_str() {
        "mixed" => mixed_worker(&fs, &arg),
        "pattern-writer" => pattern_writer(&fs),
        "common-store" => isolation::store_into_common(&fs),
        "hold-and-hang" => killed::hold_and_hang(&fs),
        "overlap-writer" => killed::overlap_writer(&fs, &arg),
        "walk-change" => walk_cache::change(&fs, &arg),
        "map-and-hang" => mapped::map_and_hang(&fs),
        "linger-and-hang" => mapped::linger_and_hang(&fs),
        "fork-writer" => processes::fork_writer(&fs),
        "stray-store" => {
            let geo = fs.mount_info().geometry;
            let p = fs.pool().as_ptr();
            // SAFETY: deliberately not: this store hits the read-only metadata mapping and
            // must kill this process with SIGSEGV.
            unsafe { std::ptr::write_volatile(p.add(geo.inode_off as usize + 128), 0xFFu8) };
            panic!("the store into read-only metadata did not fault");
        }
        other => panic!("unknown worker role {other}"),
    }
}

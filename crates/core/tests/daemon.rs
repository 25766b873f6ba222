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
#[path = "daemon/mapped.rs"]
mod mapped;
#[path = "daemon/posted.rs"]
mod posted;
#[path = "daemon/walk_cache.rs"]
mod walk_cache;

use engram_core::daemon::{ServeOptions, Stop, serve_until};
use engram_core::{Fs, OpenOptions, Options, sidefiles};
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

/// What clients of an earlier run left in /dev/shm for inodes since freed (lock and mapping
/// files of the pool) is removed when the daemon starts, and so is a live inode's mapping
/// file that no process holds (written back first if marked current: tests/backing_files.rs);
/// a live inode's lock file (a client that outlived the daemon may hold one) and another
/// pool's files are not.
#[test]
fn the_daemon_removes_what_earlier_clients_left_of_freed_inodes() {
    let mut d = Daemon::start("sidefiles", 16 << 20);
    let fs = Fs::connect(&d.socket).unwrap();
    let make = |path: &str| {
        let f = fs
            .open_file(path, &OpenOptions::new().write(true).create(true))
            .unwrap();
        f.handle()
    };
    let (live, freed) = (make("/live"), make("/freed"));
    fs.unlink("/freed").unwrap();
    drop(fs);
    d.stop();
    let other = PathBuf::from(format!(
        "/dev/shm/engram-daemon-{}-other.pool",
        std::process::id()
    ));
    std::fs::write(&other, b"").unwrap();
    let id = |p: &Path| sidefiles::pool_id(&std::fs::canonicalize(p).unwrap());
    let dead = [
        sidefiles::lock_file(id(&d.pool), freed.ino, freed.generation),
        sidefiles::map_file(id(&d.pool), freed.ino, freed.generation),
        // A slot never used, and the live inode under an older generation.
        sidefiles::lock_file(id(&d.pool), 12, 3),
        sidefiles::lock_file(id(&d.pool), live.ino, live.generation.wrapping_sub(1)),
        sidefiles::map_file(id(&d.pool), live.ino, live.generation),
    ];
    let kept = [
        sidefiles::lock_file(id(&d.pool), live.ino, live.generation),
        sidefiles::lock_file(id(&other), freed.ino, freed.generation),
    ];
    for f in dead.iter().chain(&kept) {
        std::fs::write(f, b"").unwrap();
    }
    let (stop, thread) = serve(&d.pool, &d.socket.with_extension("again"));
    let exists = |f: &String| Path::new(f).exists();
    let (dead_left, kept_left): (Vec<bool>, Vec<bool>) = (
        dead.iter().map(exists).collect(),
        kept.iter().map(exists).collect(),
    );
    stop.stop();
    thread.join().unwrap().unwrap();
    for f in dead
        .iter()
        .chain(&kept)
        .chain([&other.display().to_string()])
    {
        let _ = std::fs::remove_file(f);
    }
    assert_eq!(
        dead_left, [false; 5],
        "the files of freed inodes, and an unheld mapping file, are removed"
    );
    assert_eq!(
        kept_left, [true; 2],
        "a live inode's lock file and another pool's files stay"
    );
}

/// A daemon whose pool file was replaced at its path (moved away, a new pool made there)
/// refuses new clients, which would write into the file it still serves; a client connected
/// before goes on with that file.
#[test]
fn a_daemon_refuses_clients_once_its_pool_file_is_replaced() {
    let mut d = Daemon::start("replaced", 16 << 20);
    let before = Fs::connect(&d.socket).unwrap();
    before.write_file("/old", b"served").unwrap();
    let moved = d.pool.with_extension("moved");
    std::fs::rename(&d.pool, &moved).unwrap();
    Fs::mkfs(&d.pool, 16 << 20).unwrap();
    let refused = Fs::connect(&d.socket);
    before.write_file("/after", b"still served").unwrap();
    assert_eq!(before.read_file("/old").unwrap(), b"served");
    drop(before);
    d.stop();
    let after = Fs::open(&moved, &Options::default()).map(|old| old.read_file("/after"));
    let new_has_old = Fs::open(&d.pool, &Options::default()).map(|new| new.stat("/old").is_ok());
    let _ = std::fs::remove_file(&moved);
    let e = refused.err().expect("a client of the new file was refused");
    // The client is told why (a daemon `engram run` started has no log to read).
    assert!(
        e.to_string().contains("refused")
            && e.to_string()
                .contains("is no longer the pool file this daemon serves"),
        "{e}"
    );
    assert_eq!(after.unwrap().unwrap(), b"still served");
    assert!(!new_has_old.unwrap(), "the new pool got nothing");
}

/// The same through a symlink: the daemon serves the path as given, and a new pool made
/// in the symlink's place (its old target still there) is not the served file.
#[test]
fn a_daemon_given_a_symlink_refuses_clients_once_the_path_is_replaced() {
    let dir = std::env::temp_dir().join(format!("engram-daemon-link-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let (target, link, socket) = (dir.join("t.pool"), dir.join("p.pool"), dir.join("p.sock"));
    Fs::mkfs(&target, 16 << 20).unwrap();
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let (stop, thread) = serve(&link, &socket);
    let before = Fs::connect(&socket).map(|fs| fs.write_file("/x", b"kept").is_ok());
    std::fs::remove_file(&link).unwrap();
    Fs::mkfs(&link, 16 << 20).unwrap();
    let after = Fs::connect(&socket).map(|_| ());
    stop.stop();
    thread.join().unwrap().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(matches!(before, Ok(true)), "the first client worked");
    assert!(
        after.is_err(),
        "a client of the new file at the link's path was refused"
    );
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

/// The body of the child processes the tests below start. Run on its own (without
/// ENGRAM_WORKER) it does nothing.
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

/// Creates, renames, writes and reads in a private directory and a shared one.
fn mixed_worker(fs: &Fs, id: &str) {
    let mine = format!("/private-{id}");
    fs.mkdir(&mine, 0o755).unwrap();
    for i in 0..200 {
        let data = format!("{id}:{i}:").repeat(i % 50 + 1);
        fs.write_file(format!("{mine}/f{i}"), data.as_bytes())
            .unwrap();
        if i % 3 == 0 {
            fs.rename(format!("{mine}/f{i}"), format!("{mine}/r{i}"))
                .unwrap();
        }
        fs.write_file(format!("/shared/{id}-{i}"), data.as_bytes())
            .unwrap();
        let back = fs.read_file(format!("/shared/{id}-{i}")).unwrap();
        assert_eq!(back, data.as_bytes());
        // Everybody appends to one shared log file.
        let f = fs
            .open_file("/shared/log", &OpenOptions::new().write(true).append(true))
            .unwrap();
        f.write_next(format!("<{id}:{i:04}>").as_bytes()).unwrap();
    }
}

/// Rewrites a 64 KiB file, each write one generation byte across all of it, forever.
fn pattern_writer(fs: &Fs) {
    let f = fs
        .open_file("/pattern", &OpenOptions::new().write(true))
        .unwrap();
    for g in 0u64.. {
        f.write_at(&[(g % 250) as u8 + 1; 65536], 0).unwrap();
    }
}

#[test]
fn several_processes_share_one_pool() {
    let mut d = Daemon::start("procs", 128 << 20);
    let fs = Fs::connect(&d.socket).unwrap();
    fs.mkdir("/shared", 0o777).unwrap();
    fs.write_file("/shared/log", b"").unwrap();
    let children: Vec<_> = (0..3)
        .map(|i| spawn_worker("mixed", &d.socket, &i.to_string()))
        .collect();
    for mut c in children {
        assert!(c.wait().unwrap().success());
    }
    for id in 0..3 {
        for i in 0..200 {
            let data = format!("{id}:{i}:").repeat(i % 50 + 1);
            let name = if i % 3 == 0 {
                format!("/private-{id}/r{i}")
            } else {
                format!("/private-{id}/f{i}")
            };
            assert_eq!(fs.read_file(&name).unwrap(), data.as_bytes(), "{name}");
            assert_eq!(
                fs.read_file(format!("/shared/{id}-{i}")).unwrap(),
                data.as_bytes()
            );
        }
    }
    // Appends from three processes: every record exactly once, none torn.
    let log = String::from_utf8(fs.read_file("/shared/log").unwrap()).unwrap();
    assert_eq!(log.len(), 3 * 200 * 8);
    let mut records: Vec<&str> = (0..log.len() / 8).map(|i| &log[i * 8..i * 8 + 8]).collect();
    records.sort();
    records.dedup();
    assert_eq!(records.len(), 600, "every append appears once");
    assert!(fs.fsck(false).unwrap().is_clean());
    drop(fs);
    d.stop();
    check_clean(&d.pool);
}

#[test]
fn a_killed_writer_costs_only_its_last_write() {
    let mut d = Daemon::start("kill", 64 << 20);
    let fs = Fs::connect(&d.socket).unwrap();
    fs.write_file("/pattern", &[1u8; 65536]).unwrap();
    for round in 0..4 {
        let mut child = spawn_worker("pattern-writer", &d.socket, "");
        // Readers keep checking while the writer runs, then it is killed mid-write.
        let until = std::time::Instant::now() + Duration::from_millis(150 + 70 * round);
        let mut reads = 0;
        // At least one read, however slowly this process is scheduled.
        loop {
            let data = fs.read_file("/pattern").unwrap();
            assert_eq!(data.len(), 65536);
            assert!(
                data.iter().all(|&b| b == data[0]),
                "torn read while the writer runs"
            );
            reads += 1;
            if std::time::Instant::now() >= until {
                break;
            }
        }
        // SAFETY: sending SIGKILL to our own child process.
        unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
        let status = child.wait().unwrap();
        assert!(!status.success());
        assert!(reads > 0);
        let data = fs.read_file("/pattern").unwrap();
        assert!(
            data.iter().all(|&b| b == data[0]),
            "torn data after the kill"
        );
    }
    // The dead writers' reservations came back: nothing leaked.
    std::thread::sleep(Duration::from_millis(300));
    let r = fs.fsck(false).unwrap();
    assert!(r.is_clean(), "{:?}", r.problems);
    drop(fs);
    d.stop();
    check_clean(&d.pool);
}

#[test]
fn a_stray_store_into_metadata_faults_in_that_client_only() {
    use std::os::unix::process::ExitStatusExt;
    let mut d = Daemon::start("stray", 64 << 20);
    let fs = Fs::connect(&d.socket).unwrap();
    fs.write_file("/keep", b"safe").unwrap();
    let mut child = spawn_worker("stray-store", &d.socket, "");
    let status = child.wait().unwrap();
    assert_eq!(
        status.signal(),
        Some(libc::SIGSEGV),
        "the child must die of SIGSEGV: {status:?}"
    );
    assert_eq!(fs.read_file("/keep").unwrap(), b"safe");
    fs.write_file("/after", b"still serving").unwrap();
    assert!(fs.fsck(false).unwrap().is_clean());
    drop(fs);
    d.stop();
    check_clean(&d.pool);
}

/// Becomes uid/gid 65534, connects, and reports what it could do through its exit code:
/// 10 refused at connect, 20 connected and the permission checks held, other = failure.
fn nobody_worker() {
    // With ENGRAM_ARG=groups: one supplementary group, 4242.
    let groups: &[libc::gid_t] = if std::env::var("ENGRAM_ARG").as_deref() == Ok("groups") {
        &[4242]
    } else {
        &[]
    };
    // SAFETY: dropping privileges in this child process before it does anything else.
    unsafe {
        assert_eq!(libc::setgroups(groups.len(), groups.as_ptr()), 0);
        assert_eq!(libc::setgid(65534), 0);
        assert_eq!(libc::setuid(65534), 0);
    }
    let fs = match Fs::connect(std::env::var("ENGRAM_SOCKET").unwrap()) {
        Ok(fs) => fs,
        Err(e) => {
            eprintln!("nobody: connect refused: {e}");
            std::process::exit(10)
        }
    };
    // The server checks with the credentials of the socket, whatever the client claims.
    if !groups.is_empty() {
        // Files only their group may write: the server, which checks writes with the
        // socket's credentials, knows the supplementary groups.
        let mine = fs.write_file("/grp/mine", b"n").is_ok();
        let other = fs.write_file("/grp/other", b"n").map_err(|e| e.errno()) == Err(libc::EACCES);
        std::process::exit(if mine && other { 30 } else { 1 });
    }
    let denied = fs.mkdir("/rootonly/x", 0o755).map_err(|e| e.errno()) == Err(libc::EACCES);
    let allowed = fs.write_file("/open/mine", b"n").is_ok();
    let owner = fs.stat("/open/mine").map(|m| m.uid).ok();
    let no_write = forged::nobody_may_not_write(&fs);
    std::process::exit(if denied && allowed && owner == Some(65534) && no_write {
        20
    } else {
        1
    });
}

#[test]
fn the_daemon_takes_the_client_groups_from_the_socket() {
    // SAFETY: reading our own effective uid.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: needs root to run a client as another user");
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    let mut d = Daemon::start("groups", 64 << 20);
    std::fs::set_permissions(&d.pool, std::fs::Permissions::from_mode(0o666)).unwrap();
    let fs = Fs::connect(&d.socket).unwrap();
    fs.mkdir("/grp", 0o755).unwrap();
    for (name, gid) in [("mine", 4242), ("other", 4343)] {
        let path = format!("/grp/{name}");
        fs.write_file(&path, b"group's").unwrap();
        fs.chown(&path, Some(0), Some(gid)).unwrap();
        fs.chmod(&path, 0o020).unwrap();
    }
    let code = spawn_worker("nobody", &d.socket, "groups")
        .wait()
        .unwrap()
        .code();
    assert_eq!(
        code,
        Some(30),
        "a client writes a file of its supplementary group, and not another group's"
    );
    drop(fs);
    d.stop();
    check_clean(&d.pool);
}

#[test]
fn the_daemon_checks_the_client_uid_from_the_socket() {
    use std::os::unix::fs::PermissionsExt;
    // SAFETY: reading our own effective uid.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: needs root to run a client as another user");
        return;
    }
    let mut d = Daemon::start("uid", 64 << 20);
    let fs = Fs::connect(&d.socket).unwrap();
    fs.mkdir("/rootonly", 0o755).unwrap();
    fs.write_file("/rootonly/file", b"root's").unwrap();
    fs.mkdir("/open", 0o777).unwrap();
    std::fs::set_permissions(&d.pool, std::fs::Permissions::from_mode(0o600)).unwrap();
    let code = spawn_worker("nobody", &d.socket, "").wait().unwrap().code();
    assert_eq!(
        code,
        Some(10),
        "a uid that may not use the pool file is refused"
    );
    std::fs::set_permissions(&d.pool, std::fs::Permissions::from_mode(0o666)).unwrap();
    let code = spawn_worker("nobody", &d.socket, "").wait().unwrap().code();
    assert_eq!(
        code,
        Some(20),
        "permission checks use the socket's credentials"
    );
    assert_eq!(fs.read_file("/rootonly/file").unwrap(), b"root's");
    drop(fs);
    d.stop();
    check_clean(&d.pool);
}

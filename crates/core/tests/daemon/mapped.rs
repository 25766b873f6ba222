//! The bit per inode that says some client maps it shared: set while any client counts a
//! mapping of it, cleared when the last is given up or its client goes, and refused for a
//! file the client does not hold open.

use super::{Daemon, spawn_worker};
use engram_core::{Fs, OpenOptions};
use std::time::Duration;

/// A daemon, two clients of it, and file /f written by the first.
fn two_clients(name: &str) -> (Daemon, Fs, Fs) {
    let d = Daemon::start(name, 16 << 20);
    let a = Fs::connect(&d.socket).unwrap();
    let b = Fs::connect(&d.socket).unwrap();
    a.write_file("/f", b"x").unwrap();
    (d, a, b)
}

/// A filled backing file's mode.
const FILLED: u32 =
    0o600 | engram_core::sidefiles::MAP_CURRENT | engram_core::sidefiles::MAP_FILLED;

/// A backing file of inode `h` of `d`'s pool as the shim makes it, holding `image`, with
/// mode `mode` (its marks); returns its name.
fn backing_file(d: &Daemon, h: engram_core::Handle, image: &[u8], mode: u32) -> String {
    use engram_core::sidefiles;
    use std::os::unix::fs::PermissionsExt;
    let id = sidefiles::pool_id(&std::fs::canonicalize(&d.pool).unwrap());
    let name = sidefiles::map_file(id, h.ino, h.generation);
    std::fs::write(&name, image).unwrap();
    std::fs::set_permissions(&name, std::fs::Permissions::from_mode(mode)).unwrap();
    name
}

#[test]
fn the_mapped_bit_follows_every_clients_mappings() {
    let (_d, a, b) = two_clients("mapped");
    let fa = a
        .open_file("/f", &OpenOptions::new().read(true).write(true))
        .unwrap();
    let h = fa.handle();
    // b has not opened it: refused, and nothing set.
    assert_eq!(b.set_mapped(h, true).unwrap_err().errno(), libc::EBADF);
    assert!(!a.mapped_anywhere(h.ino) && !b.mapped_anywhere(h.ino));
    let fb = b.open_file("/f", &OpenOptions::new().read(true)).unwrap();
    a.set_mapped(h, true).unwrap();
    a.set_mapped(h, true).unwrap();
    b.set_mapped(h, true).unwrap();
    assert!(b.mapped_anywhere(h.ino), "seen by another client");
    a.set_mapped(h, false).unwrap();
    a.set_mapped(h, false).unwrap();
    // A give-up a client never counted is refused (it is posted: the next call collects it).
    a.set_mapped(h, false).unwrap();
    assert!(a.statfs().is_ok());
    assert!(a.mapped_anywhere(h.ino), "b still maps it");
    b.set_mapped(h, false).unwrap();
    assert!(b.statfs().is_ok());
    // Nobody maps it, but both still hold it open: their counts linger (see the next test).
    assert!(a.mapped_anywhere(h.ino), "lingers while open");
    // Out of range or stale: refused.
    let mut stale = h;
    stale.generation += 1;
    assert!(a.set_mapped(stale, true).is_err());
    drop(fb);
    assert!(b.statfs().is_ok());
    assert!(a.mapped_anywhere(h.ino), "a still holds it open");
    drop(fa);
    assert!(a.statfs().is_ok());
    assert!(!a.mapped_anywhere(h.ino), "nobody maps it or holds it open");
}

/// A client's last mapping of a file it still holds open lingers (the file stays counted
/// as mapped, so its backing file stays current and the next mapping joins it): mapped
/// again and given up again it is counted once, and it ends when the client closes the
/// file, or when another client writes it, truncates it or clears part of it while no
/// mapping is live (only the shim copies writes into a backing file). The live-mapping bit
/// is set only while a mapping is.
#[test]
fn a_last_mapping_lingers_while_its_file_is_open() {
    let (_d, a, b) = two_clients("mapped-linger");
    let rw = OpenOptions::new().read(true).write(true);
    let settled = |fs: &Fs| assert!(fs.statfs().is_ok());
    let fa = a.open_file("/f", &rw).unwrap();
    let h = fa.handle();
    for _ in 0..3 {
        a.set_mapped(h, true).unwrap();
        assert!(a.mapped_live(h.ino) && b.mapped_live(h.ino), "live");
        a.set_mapped(h, false).unwrap();
        settled(&a);
        assert!(a.mapped_anywhere(h.ino), "lingers");
        // Reads read the file: its backing file holds no store the file has not got.
        assert!(!b.mapped_live(h.ino), "lingering is not live");
    }
    // Its own writes keep it (its shim copies them).
    fa.write_placed(b"own", Some(0)).unwrap();
    assert!(a.mapped_anywhere(h.ino), "kept by the client's own write");
    fa.set_len(2).unwrap();
    assert!(
        a.mapped_anywhere(h.ino),
        "kept by the client's own truncate"
    );
    // Truncated to zero (as by O_TRUNC, which leaves the backing file as it was): ended.
    fa.set_len(0).unwrap();
    assert!(
        !a.mapped_anywhere(h.ino),
        "ended by the client's own truncate to zero"
    );
    drop(fa);
    settled(&a);
    assert!(!a.mapped_anywhere(h.ino), "ended by the close");

    // Another client's write, truncate or hole ends it while nobody maps the file.
    type Change = fn(&engram_core::File);
    let changes: [(&str, Change); 3] = [
        ("write", |f| {
            assert_eq!(f.write_placed(b"w", Some(1)).unwrap().len, 1)
        }),
        ("truncate", |f| f.set_len(2).unwrap()),
        ("punch", |f| f.punch_hole(0, 1).unwrap()),
    ];
    for (what, change) in changes {
        let fa = a.open_file("/f", &rw).unwrap();
        let fb = b.open_file("/f", &rw).unwrap();
        a.set_mapped(h, true).unwrap();
        // Live: another client's change leaves the count alone.
        change(&fb);
        assert!(a.mapped_anywhere(h.ino), "{what}: live mapping kept");
        a.set_mapped(h, false).unwrap();
        settled(&a);
        // The change may not be in the backing file: the count does not linger.
        assert!(!a.mapped_anywhere(h.ino), "{what}: changed while live");
        a.set_mapped(h, true).unwrap();
        a.set_mapped(h, false).unwrap();
        settled(&a);
        assert!(a.mapped_anywhere(h.ino), "{what}: lingers");
        change(&fb);
        assert!(!a.mapped_anywhere(h.ino), "{what}: ended by another client");
        // Mapped again from there, it is counted anew.
        a.set_mapped(h, true).unwrap();
        assert!(a.mapped_anywhere(h.ino), "{what}: counted again");
        a.set_mapped(h, false).unwrap();
        drop((fa, fb));
        settled(&a);
        assert!(!a.mapped_anywhere(h.ino), "{what}: closed");
    }
}

/// Another client's write while a mapping is live leaves the counts alone (the live
/// mapping needs its backing file), but the write did not reach that file if the writer
/// was not a shim (native or FUSE): once the live mapping goes, the lingering counts must
/// go too, or the lingering client's next mapping joins a backing file without the write.
#[test]
fn a_write_while_live_ends_the_lingering_counts_with_the_live_ones() {
    let (d, a, b) = two_clients("mapped-linger-live");
    let x = Fs::connect(&d.socket).unwrap();
    let rw = OpenOptions::new().read(true).write(true);
    let settled = |fs: &Fs| assert!(fs.statfs().is_ok());
    let fa = a.open_file("/f", &rw).unwrap();
    let fb = b.open_file("/f", &rw).unwrap();
    let fx = x.open_file("/f", &OpenOptions::new().read(true)).unwrap();
    let h = fa.handle();
    a.set_mapped(h, true).unwrap();
    a.set_mapped(h, false).unwrap();
    settled(&a);
    assert!(a.mapped_anywhere(h.ino), "a lingers");
    x.set_mapped(h, true).unwrap();
    // b writes while x maps live: nothing ends yet.
    fb.write_placed(b"w", Some(0)).unwrap();
    assert!(a.mapped_anywhere(h.ino), "x maps it live");
    x.set_mapped(h, false).unwrap();
    settled(&x);
    assert!(
        !a.mapped_anywhere(h.ino),
        "b's write reached no backing file: a's lingering count must end"
    );
    // The same when b writes before a's count lingers.
    x.set_mapped(h, true).unwrap();
    fb.write_placed(b"v", Some(0)).unwrap();
    a.set_mapped(h, true).unwrap();
    a.set_mapped(h, false).unwrap();
    settled(&a);
    assert!(a.mapped_anywhere(h.ino), "x maps it live, a lingers");
    x.set_mapped(h, false).unwrap();
    settled(&x);
    assert!(
        !a.mapped_anywhere(h.ino),
        "b's write: a's lingering count ended"
    );
    // A file nobody changed meanwhile keeps its lingering count.
    a.set_mapped(h, true).unwrap();
    a.set_mapped(h, false).unwrap();
    x.set_mapped(h, true).unwrap();
    x.set_mapped(h, false).unwrap();
    settled(&x);
    settled(&a);
    assert!(a.mapped_anywhere(h.ino), "nothing changed: a lingers");
    drop((fa, fb, fx));
}

/// A client's write commit says whether another client mapped the file shared at that
/// moment (`Response::Committed`; in-process, `write_path.rs`).
#[test]
fn a_commit_says_whether_another_client_mapped_the_file() {
    let (_d, a, b) = two_clients("mapped-commit");
    let rw = OpenOptions::new().read(true).write(true);
    let fa = a.open_file("/f", &rw).unwrap();
    let fb = b.open_file("/f", &rw).unwrap();
    let h = fa.handle();
    assert!(!fb.write_placed(b"1", Some(0)).unwrap().mapped);
    a.set_mapped(h, true).unwrap();
    let w = fb.write_placed(b"22", Some(0)).unwrap();
    assert_eq!((w.len, w.end, w.mapped), (2, 2, true));
    // Posted: the next call of `a` waits until the server has taken it.
    a.set_mapped(h, false).unwrap();
    assert!(a.statfs().is_ok());
    assert!(!fb.write_placed(b"3", Some(0)).unwrap().mapped);
    assert_eq!(b.read_file("/f").unwrap(), b"32");
    drop((fa, fb));
}

/// Worker role "map-and-hang": opens /f, counts a mapping of it, says so, waits forever.
pub fn map_and_hang(fs: &Fs) {
    let f = fs.open_file("/f", &OpenOptions::new().read(true)).unwrap();
    fs.set_mapped(f.handle(), true).unwrap();
    fs.write_file("/ready", b"").unwrap();
    loop {
        std::thread::park();
    }
}

/// Worker role "linger-and-hang": opens /f, counts a mapping of it and gives it up (the
/// count lingers while /f is open), says so, waits forever.
pub fn linger_and_hang(fs: &Fs) {
    let f = fs.open_file("/f", &OpenOptions::new().read(true)).unwrap();
    fs.set_mapped(f.handle(), true).unwrap();
    fs.set_mapped(f.handle(), false).unwrap();
    fs.write_file("/ready", b"").unwrap();
    loop {
        std::thread::park();
    }
}

#[test]
fn a_killed_clients_mappings_go_with_it() {
    let d = Daemon::start("mapped-killed", 16 << 20);
    let fs = Fs::connect(&d.socket).unwrap();
    fs.write_file("/f", b"x").unwrap();
    let ino = fs.stat("/f").unwrap().ino;
    let mut child = spawn_worker("map-and-hang", &d.socket, "");
    super::killed::eventually(|| fs.stat("/ready").is_ok());
    assert!(fs.mapped_anywhere(ino));
    // SAFETY: sending SIGKILL to our own child process.
    unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
    assert!(!child.wait().unwrap().success());
    super::killed::eventually(|| !fs.mapped_anywhere(ino));
    assert!(!fs.mapped_anywhere(ino));
}

/// A dead client's mapped stores are written back only once no write to the file is in
/// flight (a writer holds the backing file's fill lock, shared, from before its commit to
/// its copy): meanwhile the file is left as it is and the mapped bit stays set.
#[test]
fn a_dead_clients_stores_wait_for_a_write_in_flight() {
    use engram_core::sidefiles;
    use std::os::fd::AsRawFd;
    let d = Daemon::start("mapped-inflight", 16 << 20);
    let fs = Fs::connect(&d.socket).unwrap();
    fs.write_file("/f", &[b'a'; 8192]).unwrap();
    let h = fs
        .open_file("/f", &OpenOptions::new().read(true))
        .unwrap()
        .handle();
    // The backing file a mapper made, with a store in its second page.
    let mut image = vec![b'a'; 8192];
    image[5000] = b'Z';
    let name = backing_file(&d, h, &image, 0o600 | sidefiles::MAP_CURRENT);
    // The mapper: a client counting a mapping, then gone.
    let mapper = Fs::connect(&d.socket).unwrap();
    let f = mapper
        .open_file("/f", &OpenOptions::new().read(true))
        .unwrap();
    mapper.set_mapped(f.handle(), true).unwrap();
    // A writer in flight: the fill lock's shared side, on a description of its own.
    let writer = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&name)
        .unwrap();
    let fill = |kind: i32| {
        // SAFETY: plain data, for which all zeros is a valid value.
        let mut l: libc::flock = unsafe { std::mem::zeroed() };
        l.l_type = kind as libc::c_short;
        l.l_whence = libc::SEEK_SET as libc::c_short;
        l.l_start = 1 << 62;
        l.l_len = 1;
        // SAFETY: an OFD lock request on a descriptor this test owns.
        assert_eq!(
            unsafe { libc::fcntl(writer.as_raw_fd(), libc::F_OFD_SETLK, &mut l) },
            0
        );
    };
    fill(libc::F_RDLCK);
    drop(f);
    drop(mapper);
    std::thread::sleep(std::time::Duration::from_millis(100));
    assert_eq!(
        fs.read_file("/f").unwrap()[5000],
        b'a',
        "written back under a write"
    );
    assert!(
        fs.mapped_anywhere(h.ino),
        "the bit went while the write-back waits"
    );
    fill(libc::F_UNLCK);
    super::killed::eventually(|| !fs.mapped_anywhere(h.ino));
    assert_eq!(
        fs.read_file("/f").unwrap()[5000],
        b'Z',
        "never written back"
    );
    assert!(!fs.mapped_anywhere(h.ino), "the bit stayed");
    assert!(
        !std::path::Path::new(&name).exists(),
        "the backing file was left"
    );
}

/// A client that dies mapping a file while another lingers on it: once its stores are
/// written back, the file holds them and the lingering count is not live (reads read the
/// file). Kept marked as died, the backing file was compared with the file again when the
/// count later reached zero, and a native write made meanwhile through a live mapping
/// (which reaches no backing file) was reverted.
#[test]
fn a_dead_mappers_stores_written_back_leave_a_lingering_count_alone() {
    let (d, a, b) = two_clients("mapped-linger-dead");
    let rw = OpenOptions::new().read(true).write(true);
    a.write_file("/f", &[b'a'; 8192]).unwrap();
    let fa = a.open_file("/f", &rw).unwrap();
    let fb = b.open_file("/f", &rw).unwrap();
    let h = fa.handle();
    // The backing file a first mapping filled: the file's bytes.
    let name = backing_file(&d, h, &[b'a'; 8192], FILLED);
    a.set_mapped(h, true).unwrap();
    a.set_mapped(h, false).unwrap();
    assert!(a.statfs().is_ok());
    // Another client maps it and dies without giving the mapping up.
    let mapper = Fs::connect(&d.socket).unwrap();
    let f = mapper
        .open_file("/f", &OpenOptions::new().read(true))
        .unwrap();
    mapper.set_mapped(f.handle(), true).unwrap();
    assert!(a.mapped_live(h.ino));
    drop(f);
    drop(mapper);
    std::thread::sleep(Duration::from_millis(300));
    assert!(a.mapped_anywhere(h.ino), "a lingers");
    assert!(
        !a.mapped_live(h.ino),
        "written back: only a's lingering count is left"
    );
    // a maps it again; b writes natively meanwhile (its bytes reach no backing file).
    a.set_mapped(h, true).unwrap();
    fb.write_placed(b"N", Some(5000)).unwrap();
    a.set_mapped(h, false).unwrap();
    drop((fa, fb));
    assert!(a.statfs().is_ok());
    super::killed::eventually(|| !a.mapped_anywhere(h.ino));
    assert_eq!(a.read_file("/f").unwrap()[5000], b'N', "b's write reverted");
    assert!(
        !std::path::Path::new(&name).exists(),
        "the backing file was left"
    );
}

/// A client that goes while its count only lingers held no mapping: nothing of it is
/// written back. (It was treated as a dead mapper: the backing file, shared with a live
/// mapping of another client, was compared whole with the file, and a native write made
/// through that live mapping, which reaches no backing file, was reverted.)
#[test]
fn a_client_gone_while_lingering_writes_nothing_back() {
    let (d, a, b) = two_clients("mapped-linger-gone");
    let rw = OpenOptions::new().read(true).write(true);
    a.write_file("/f", &[b'a'; 8192]).unwrap();
    let fa = a.open_file("/f", &OpenOptions::new().read(true)).unwrap();
    let fb = b.open_file("/f", &rw).unwrap();
    let h = fa.handle();
    backing_file(&d, h, &[b'a'; 8192], FILLED);
    // A client lingers on it (and goes), a goes on mapping it live.
    let mut child = spawn_worker("linger-and-hang", &d.socket, "");
    super::killed::eventually(|| a.stat("/ready").is_ok());
    assert!(a.mapped_anywhere(h.ino) && !a.mapped_live(h.ino), "lingers");
    a.set_mapped(h, true).unwrap();
    // b writes natively while a maps it live.
    fb.write_placed(b"N", Some(5000)).unwrap();
    // SAFETY: sending SIGKILL to our own child process.
    unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
    assert!(!child.wait().unwrap().success());
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(a.read_file("/f").unwrap()[5000], b'N', "b's write reverted");
    a.set_mapped(h, false).unwrap();
    drop((fa, fb));
    assert!(a.statfs().is_ok());
    super::killed::eventually(|| !a.mapped_anywhere(h.ino));
    assert_eq!(a.read_file("/f").unwrap()[5000], b'N', "b's write reverted");
}

/// Worker role "serve-as-nobody": serves pool ENGRAM_ARG on ENGRAM_SOCKET as uid 65534.
pub fn serve_as_nobody() {
    // SAFETY: dropping privileges in this child process before it does anything else.
    unsafe {
        assert_eq!(libc::setgroups(0, std::ptr::null()), 0);
        assert_eq!(libc::setgid(65534), 0);
        assert_eq!(libc::setuid(65534), 0);
    }
    super::posted::serve_worker();
}

/// A client makes its mappings' backing file itself, 0600 in the sticky /dev/shm. A daemon
/// of another user (not root) could neither write it back nor remove it, and a file left
/// marked current was later written back over newer writes (found by probing: SQLite with
/// `mmap_size` lost rows when root's processes joined a daemon postgres had started). Such
/// a client's shared mappings are refused (ENODEV, before it makes a file); the daemon's
/// own user maps as before.
#[test]
fn a_daemon_of_another_user_refuses_shared_mappings_it_could_not_tend() {
    // SAFETY: reading our own effective uid.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: needs root to run a daemon as another user");
        return;
    }
    let id = std::process::id();
    let pool = format!("/dev/shm/engram-daemon-{id}-nobody-serves.pool");
    let socket = std::path::PathBuf::from(format!("/tmp/engram-daemon-{id}-nobody-serves.sock"));
    let _ = std::fs::remove_file(&socket);
    Fs::mkfs(&pool, 16 << 20).unwrap();
    std::os::unix::fs::chown(&pool, Some(65534), Some(65534)).unwrap();
    let mut daemon = spawn_worker("serve-as-nobody", &socket, &pool);
    let fs = (0..500)
        .find_map(|_| {
            Fs::connect(&socket).ok().or_else(|| {
                std::thread::sleep(Duration::from_millis(10));
                None
            })
        })
        .expect("the daemon serves");
    fs.write_file("/f", b"x").unwrap();
    let f = fs
        .open_file("/f", &OpenOptions::new().read(true).write(true))
        .unwrap();
    let e = fs.set_mapped(f.handle(), true).unwrap_err();
    assert_eq!(e.errno(), libc::ENODEV, "{e}");
    assert!(!fs.mapped_anywhere(f.handle().ino));
    // The daemon's own user: counted as before.
    fs.chmod("/", 0o777).unwrap();
    let status = spawn_worker("nobody-maps", &socket, "").wait().unwrap();
    assert_eq!(
        status.code(),
        Some(20),
        "the daemon's own user could not map"
    );
    drop((f, fs));
    let _ = daemon.kill();
    let _ = daemon.wait();
    let _ = std::fs::remove_file(&pool);
    let _ = std::fs::remove_file(&socket);
}

/// Worker role "nobody-maps": as uid 65534, makes a file and counts a mapping of it;
/// exit 20 when the daemon took it.
pub fn nobody_maps() {
    // SAFETY: dropping privileges in this child process before it does anything else.
    unsafe {
        assert_eq!(libc::setgroups(0, std::ptr::null()), 0);
        assert_eq!(libc::setgid(65534), 0);
        assert_eq!(libc::setuid(65534), 0);
    }
    let fs = Fs::connect(std::env::var("ENGRAM_SOCKET").unwrap()).unwrap();
    fs.write_file("/mine", b"n").unwrap();
    let f = fs
        .open_file("/mine", &OpenOptions::new().read(true).write(true))
        .unwrap();
    let taken = fs.set_mapped(f.handle(), true).is_ok() && fs.mapped_anywhere(f.handle().ino);
    std::process::exit(if taken { 20 } else { 1 });
}

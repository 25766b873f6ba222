//! The daemon's pool file: what earlier clients left beside it, and the file replaced.

use super::{Daemon, serve};
use engram_core::{Fs, OpenOptions, Options, sidefiles};
use std::path::{Path, PathBuf};

/// What clients of an earlier run left in /dev/shm for inodes since freed (lock, mapping
/// and FIFO files of the pool) is removed when the daemon starts, and so is a live inode's
/// mapping file that no process holds (written back first if marked current:
/// tests/backing_files.rs); a live inode's lock file and FIFO (a client that outlived the
/// daemon may hold one) and another pool's files are not.
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
        sidefiles::fifo_file(id(&d.pool), freed.ino, freed.generation),
        // A slot never used, and the live inode under an older generation.
        sidefiles::lock_file(id(&d.pool), 12, 3),
        sidefiles::lock_file(id(&d.pool), live.ino, live.generation.wrapping_sub(1)),
        sidefiles::map_file(id(&d.pool), live.ino, live.generation),
    ];
    let kept = [
        sidefiles::lock_file(id(&d.pool), live.ino, live.generation),
        sidefiles::fifo_file(id(&d.pool), live.ino, live.generation),
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
        dead_left, [false; 6],
        "the files of freed inodes, and an unheld mapping file, are removed"
    );
    assert_eq!(
        kept_left, [true; 3],
        "a live inode's lock file and FIFO, and another pool's files, stay"
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

/// A client that outlives its daemon can still store into the data pages it had reserved,
/// so no later daemon, in-process opener or mkfs may take the pool while it maps it.
/// Before, a new daemon handed those pages to another file and the old client's next write
/// (failing with EIO) landed in that file: fsck clean, the other file's bytes gone. Once the
/// client has gone, the pool opens as usual, holding what was written before.
#[test]
fn a_pool_mapped_by_a_client_of_a_stopped_daemon_is_not_reused() {
    let mut d = Daemon::start("outlived", 16 << 20);
    let fs = Fs::connect(&d.socket).unwrap();
    fs.write_file("/a", b"before").unwrap();
    d.stop();
    let busy = |e: engram_core::Error| {
        assert_eq!(e.errno(), libc::EBUSY, "{e}");
        assert!(e.to_string().contains("still mapped by a client"), "{e}");
    };
    busy(Fs::open(&d.pool, &Options::default()).err().unwrap());
    let stop = engram_core::daemon::Stop::new();
    let opts = engram_core::daemon::ServeOptions {
        socket: d.socket.with_extension("again"),
        idle_exit: None,
        log_clients: false,
    };
    busy(engram_core::daemon::serve_until(&d.pool, &opts, &stop, &|_| {}).unwrap_err());
    busy(Fs::mkfs(&d.pool, 16 << 20).unwrap_err());
    assert_eq!(fs.write_file("/b", b"late").unwrap_err().errno(), libc::EIO);
    drop(fs);
    let fs = Fs::open(&d.pool, &Options::default()).unwrap();
    assert_eq!(fs.read_file("/a").unwrap(), b"before");
    assert!(fs.stat("/b").is_err());
    let r = fs.fsck(false).unwrap();
    assert!(r.is_clean(), "{:?}", r.problems);
}

//! A client's cached path walks are never used after another client, in this process or
//! another, renamed or removed a directory on the path: the sequence counters they check
//! are the daemon's, shared by every client.

use super::{Daemon, spawn_worker};
use engram_core::Fs;

/// Worker role "walk-change": apply the change named by ENGRAM_ARG, then exit.
pub fn change(fs: &Fs, what: &str) {
    match what {
        "rename" => fs.rename("/a/b", "/a/moved").unwrap(),
        "unlink" => fs.unlink("/a/moved/c/f").unwrap(),
        "rmdir" => {
            fs.rmdir("/a/moved/c").unwrap();
            fs.mkdir("/a/moved/c", 0o700).unwrap();
        }
        other => panic!("unknown change {other}"),
    }
}

#[test]
fn another_clients_rename_unlink_and_rmdir_are_seen_at_once() {
    let d = Daemon::start("walk-cache", 64 << 20);
    let fs = Fs::connect(&d.socket).unwrap();
    for p in ["/a", "/a/b", "/a/b/c"] {
        fs.mkdir(p, 0o755).unwrap();
    }
    fs.write_file("/a/b/c/f", b"x").unwrap();
    let warm = |p: &str| {
        let a = fs.stat(p).unwrap().ino;
        assert_eq!(fs.stat(p).unwrap().ino, a);
    };
    let enoent = |p: &str| assert_eq!(fs.stat(p).unwrap_err().errno(), libc::ENOENT);
    // Another client in this process.
    warm("/a/b/c/f");
    let other = Fs::connect(&d.socket).unwrap();
    other.rename("/a/b", "/a/x").unwrap();
    enoent("/a/b/c/f");
    warm("/a/x/c/f");
    other.rename("/a/x", "/a/b").unwrap();
    drop(other);
    // Other processes.
    let steps = [
        ("rename", "/a/b/c/f", "/a/moved/c/f"),
        ("unlink", "/a/moved/c/f", "/a/moved/c"),
        ("rmdir", "/a/moved/c/.", "/a/moved/c"),
    ];
    for (what, gone, there) in steps {
        if what == "rmdir" {
            fs.write_file("/a/moved/c/g", b"").unwrap();
            fs.unlink("/a/moved/c/g").unwrap();
        }
        warm(gone);
        let st = spawn_worker("walk-change", &d.socket, what).wait().unwrap();
        assert!(st.success(), "worker {what}: {st:?}");
        if what == "rmdir" {
            // The same path names the new directory (its inode number may be the old one).
            assert_eq!(fs.stat(gone).unwrap().permissions(), 0o700);
            assert_eq!(fs.stat(there).unwrap().permissions(), 0o700);
        } else {
            enoent(gone);
            warm(there);
        }
    }
}

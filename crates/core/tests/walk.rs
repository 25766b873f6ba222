//! The path walk and its per-thread cache of walks: a cached walk is never used once a
//! directory it went through changed (rename, unlink, rmdir, chmod), whoever changed it;
//! `staying_inside` walks stop where a process's namespace would leave the pool.

mod common;

use common::{assert_errno, new_fs};
use engram_core::{Creds, Fs};
use libc::{EACCES, ENOENT, ENOTDIR};

fn ino(fs: &Fs, p: &str) -> u64 {
    fs.stat(p).unwrap().ino
}

/// Stat twice, so that the second comes from the cache.
fn warm(fs: &Fs, p: &str) -> u64 {
    let a = ino(fs, p);
    assert_eq!(ino(fs, p), a);
    a
}

#[test]
fn rename_of_a_directory_on_the_path_is_seen_at_once() {
    let (_p, fs) = new_fs("walk-rename", 64);
    fs.mkdir("/a", 0o755).unwrap();
    fs.mkdir("/a/b", 0o755).unwrap();
    fs.mkdir("/a/b/c", 0o755).unwrap();
    fs.write_file("/a/b/c/f", b"x").unwrap();
    let f = warm(&fs, "/a/b/c/f");
    // Through another handle of the same pool.
    let other = fs.clone();
    other.rename("/a/b", "/a/x").unwrap();
    assert_errno(fs.stat("/a/b/c/f"), ENOENT);
    assert_eq!(warm(&fs, "/a/x/c/f"), f);
    // A directory of the same name put back: the path names the new tree.
    other.mkdir("/a/b", 0o755).unwrap();
    other.mkdir("/a/b/c", 0o755).unwrap();
    other.write_file("/a/b/c/f", b"yy").unwrap();
    assert_eq!(fs.stat("/a/b/c/f").unwrap().size, 2);
    assert_eq!(fs.stat("/a/x/c/f").unwrap().size, 1);
}

#[test]
fn unlink_rmdir_and_replacing_rename_are_seen_at_once() {
    let (_p, fs) = new_fs("walk-unlink", 64);
    fs.mkdir("/d", 0o755).unwrap();
    fs.mkdir("/d/e", 0o755).unwrap();
    fs.write_file("/d/e/f", b"1").unwrap();
    warm(&fs, "/d/e/f");
    fs.unlink("/d/e/f").unwrap();
    assert_errno(fs.stat("/d/e/f"), ENOENT);
    fs.write_file("/d/e/f", b"22").unwrap();
    assert_eq!(fs.stat("/d/e/f").unwrap().size, 2);
    // A rename over the file: the name never disappears, and names the new file.
    fs.write_file("/d/e/g", b"333").unwrap();
    warm(&fs, "/d/e/f");
    fs.rename("/d/e/g", "/d/e/f").unwrap();
    assert_eq!(fs.stat("/d/e/f").unwrap().size, 3);
    // The directory removed and made again, empty.
    warm(&fs, "/d/e/f");
    fs.unlink("/d/e/f").unwrap();
    fs.rmdir("/d/e").unwrap();
    assert_errno(fs.stat("/d/e/f"), ENOENT);
    assert_errno(fs.stat("/d/e"), ENOENT);
    fs.write_file("/d/e", b"").unwrap();
    assert_errno(fs.stat("/d/e/f"), ENOTDIR);
    assert_errno(fs.stat("/d/e/"), ENOTDIR);
}

#[test]
fn chmod_of_a_directory_on_the_path_is_seen_at_once() {
    let (_p, fs) = new_fs("walk-chmod", 64);
    fs.mkdir("/p", 0o755).unwrap();
    fs.mkdir("/p/q", 0o755).unwrap();
    fs.write_file("/p/q/f", b"x").unwrap();
    let user = fs.with_creds(Creds {
        uid: 1000,
        gid: 1000,
        groups: vec![],
    });
    // Changed from another thread, so that this thread's cache keeps the user's walks.
    let chmod = |p: &str, mode: u32| {
        std::thread::scope(|s| s.spawn(|| fs.chmod(p, mode).unwrap()).join().unwrap())
    };
    warm(&user, "/p/q/f");
    chmod("/p/q", 0o700);
    assert_errno(user.stat("/p/q/f"), EACCES);
    chmod("/p/q", 0o711);
    warm(&user, "/p/q/f");
    // The same path, other credentials: not the other's cached walk.
    let other = fs.with_creds(Creds {
        uid: 1001,
        gid: 1001,
        groups: vec![],
    });
    fs.chmod("/p", 0o700).unwrap();
    assert_errno(other.stat("/p/q/f"), EACCES);
    assert_errno(user.stat("/p/q/f"), EACCES);
}

#[test]
fn symlinks_repointed_and_dot_dot_are_seen_at_once() {
    let (_p, fs) = new_fs("walk-link", 64);
    for d in ["/a", "/b", "/a/s"] {
        fs.mkdir(d, 0o755).unwrap();
    }
    fs.write_file("/a/f", b"a").unwrap();
    fs.write_file("/b/f", b"bb").unwrap();
    fs.symlink("a", "/l").unwrap();
    assert_eq!(fs.stat("/l/f").unwrap().size, 1);
    assert_eq!(fs.stat("/a/s/../f").unwrap().size, 1);
    warm(&fs, "/l/f");
    warm(&fs, "/a/s/../f");
    fs.unlink("/l").unwrap();
    fs.symlink("/b", "/l").unwrap();
    assert_eq!(fs.stat("/l/f").unwrap().size, 2);
    // ".." follows the directory's own parent, which a rename changes.
    fs.rename("/a/s", "/b/s").unwrap();
    assert_errno(fs.stat("/a/s/../f"), ENOENT);
    assert_eq!(fs.stat("/b/s/../f").unwrap().size, 2);
    assert!(fs.lstat("/l").unwrap().is_symlink());
    assert!(fs.stat("/l").unwrap().is_dir());
}

#[test]
fn a_change_by_another_thread_is_seen_once_it_returned() {
    let (_p, fs) = new_fs("walk-thread", 64);
    fs.mkdir("/t", 0o755).unwrap();
    // Main makes a path, the reader caches its walk, main changes it, the reader checks.
    let (to_main, from_reader) = std::sync::mpsc::channel::<()>();
    let (to_reader, from_main) = std::sync::mpsc::channel::<u32>();
    let reader = {
        let fs = fs.clone();
        std::thread::spawn(move || {
            while let Ok(round) = from_main.recv() {
                let p = format!("/t/d{round}/f");
                warm(&fs, &p);
                to_main.send(()).unwrap();
                from_main.recv().unwrap();
                assert_errno(fs.stat(&p), ENOENT);
                to_main.send(()).unwrap();
            }
        })
    };
    for round in 0..50u32 {
        let d = format!("/t/d{round}");
        fs.mkdir(&d, 0o755).unwrap();
        fs.write_file(format!("{d}/f"), b"x").unwrap();
        to_reader.send(round).unwrap();
        from_reader.recv().unwrap();
        match round % 3 {
            0 => fs.unlink(format!("{d}/f")).unwrap(),
            1 => fs.rename(&d, format!("/t/moved{round}")).unwrap(),
            _ => {
                fs.unlink(format!("{d}/f")).unwrap();
                fs.rmdir(&d).unwrap();
            }
        }
        to_reader.send(round).unwrap();
        from_reader.recv().unwrap();
    }
    drop(to_reader);
    reader.join().unwrap();
}

#[test]
fn staying_inside_stops_where_the_process_namespace_leaves_the_pool() {
    let (_p, fs) = new_fs("walk-inside", 64);
    fs.mkdir("/a", 0o755).unwrap();
    fs.write_file("/a/f", b"x").unwrap();
    fs.symlink("/etc", "/abs").unwrap();
    fs.symlink("a", "/rel").unwrap();
    fs.symlink("../..", "/a/up").unwrap();
    let inside = |p: &str| fs.stat_inside(p.as_bytes(), true).unwrap();
    assert_eq!(inside("/rel/f").unwrap().ino, ino(&fs, "/a/f"));
    assert_eq!(inside("/a/./f").unwrap().ino, ino(&fs, "/a/f"));
    assert!(inside("/abs/passwd").is_none());
    assert!(inside("/abs").is_none());
    assert!(
        fs.stat_inside(b"/abs", false)
            .unwrap()
            .unwrap()
            .is_symlink()
    );
    assert!(inside("/..").is_none());
    assert!(inside("/a/../../x").is_none());
    assert!(inside("/a/up/x").is_none());
    assert_errno(fs.stat_inside(b"/nothing/..", true), ENOENT);
    // The natively resolved answers stay what they were: ".." of the root is the root.
    assert_eq!(ino(&fs, "/a/../.."), ino(&fs, "/"));
    let e = fs.staying_inside().read_file("/abs/passwd").unwrap_err();
    assert!(e.leaves_pool());
    assert_eq!(fs.staying_inside().read_file("/rel/f").unwrap(), b"x");
}

/// Creates, unlinks and renames find their parent directory through the cache too: a
/// directory on the way renamed, replaced by a file or a symlink, or made unsearchable is
/// seen at once.
#[test]
fn parent_walks_of_changes_see_changes_above_them_at_once() {
    let (_p, fs) = new_fs("walk-parent", 64);
    let create = engram_core::OpenOptions::new().write(true).create_new(true);
    fs.mkdir("/a", 0o755).unwrap();
    fs.mkdir("/a/b", 0o755).unwrap();
    fs.open_file("/a/b/f1", &create).unwrap();
    fs.open_file("/a/b/f2", &create).unwrap();
    fs.rename("/a/b/f2", "/a/b/f3").unwrap();
    fs.unlink("/a/b/f3").unwrap();
    // Renamed away: the old path is gone, the new one works.
    fs.clone().rename("/a/b", "/a/x").unwrap();
    assert_errno(fs.open_file("/a/b/f4", &create), ENOENT);
    assert_errno(fs.unlink("/a/b/f1"), ENOENT);
    fs.open_file("/a/x/f4", &create).unwrap();
    // A file where the directory was.
    fs.write_file("/a/b", b"x").unwrap();
    assert_errno(fs.open_file("/a/b/f5", &create), ENOTDIR);
    assert_errno(fs.unlink("/a/b/f5"), ENOTDIR);
    // A symlink to a directory: followed.
    fs.unlink("/a/b").unwrap();
    fs.symlink("x", "/a/b").unwrap();
    fs.open_file("/a/b/f6", &create).unwrap();
    assert!(fs.stat("/a/x/f6").is_ok());
    fs.rename("/a/b/f6", "/a/b/f7").unwrap();
    assert!(fs.stat("/a/x/f7").is_ok());
    // The directory made unsearchable for another user: the cached walk is not used.
    let user = fs.with_creds(Creds {
        uid: 1000,
        gid: 1000,
        groups: Vec::new(),
    });
    user.stat("/a/x").unwrap();
    fs.chmod("/a/x", 0o777).unwrap();
    user.open_file("/a/x/u1", &create).unwrap();
    user.unlink("/a/x/u1").unwrap();
    fs.chmod("/a/x", 0o766).unwrap();
    assert_errno(user.open_file("/a/x/u2", &create), EACCES);
    assert_errno(user.unlink("/a/x/f4"), EACCES);
    assert_errno(user.rename("/a/x/f4", "/a/x/f8"), EACCES);
}

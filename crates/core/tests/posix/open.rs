//! Opening files: O_CREAT, O_EXCL, O_TRUNC, O_APPEND, O_DIRECTORY, O_NOFOLLOW and access modes.

use super::{creat, dir_opts, ro, rw, user};
use crate::common::{assert_clean, assert_errno, new_fs, pattern, remount};
use engram_core::OpenOptions;
use libc::{EBADF, EEXIST, EINVAL, EISDIR, ELOOP, ENOENT, ENOTDIR};
use std::io::{Seek, SeekFrom, Write};

#[test]
fn open_creat_excl_trunc() {
    let (_p, fs) = new_fs("open", 16);
    assert_errno(fs.open_file("/a", &ro()), ENOENT);
    let f = fs
        .open_file(
            "/a",
            &OpenOptions::new().write(true).create(true).mode(0o600),
        )
        .unwrap();
    f.write_at(b"hello", 0).unwrap();
    drop(f);
    let m = fs.stat("/a").unwrap();
    assert!(m.is_file());
    assert_eq!(m.permissions(), 0o600);
    assert_eq!((m.uid, m.gid, m.nlink, m.size), (0, 0, 1, 5));

    // O_CREAT on an existing file opens it without truncating (and without changing its mode).
    let f = fs.open_file("/a", &creat().mode(0o777)).unwrap();
    assert_eq!(f.ino(), m.ino);
    drop(f);
    assert_eq!(fs.read_file("/a").unwrap(), b"hello");
    assert_eq!(fs.stat("/a").unwrap().permissions(), 0o600);

    // O_EXCL.
    assert_errno(
        fs.open_file("/a", &OpenOptions::new().write(true).create_new(true)),
        EEXIST,
    );
    let f = fs
        .open_file("/b", &OpenOptions::new().write(true).create_new(true))
        .unwrap();
    drop(f);
    assert!(fs.stat("/b").unwrap().is_file());

    // O_EXCL on a dangling symlink: EEXIST, and the target is not created.
    fs.symlink("/target", "/dangling").unwrap();
    assert_errno(
        fs.open_file(
            "/dangling",
            &OpenOptions::new().write(true).create_new(true),
        ),
        EEXIST,
    );
    assert_errno(fs.stat("/target"), ENOENT);
    // O_EXCL on a symlink to an existing file: EEXIST too.
    fs.symlink("/a", "/to_a").unwrap();
    assert_errno(
        fs.open_file("/to_a", &OpenOptions::new().write(true).create_new(true)),
        EEXIST,
    );
    // Without O_CREAT, a dangling symlink is ENOENT.
    assert_errno(fs.open_file("/dangling", &ro()), ENOENT);

    // O_TRUNC.
    let f = fs
        .open_file("/a", &OpenOptions::new().write(true).truncate(true))
        .unwrap();
    assert_eq!(f.metadata().unwrap().size, 0);
    drop(f);
    assert_eq!(fs.read_file("/a").unwrap(), b"");
    // O_TRUNC through a symlink truncates the target.
    fs.write_file("/a", b"again").unwrap();
    drop(
        fs.open_file("/to_a", &OpenOptions::new().write(true).truncate(true))
            .unwrap(),
    );
    assert_eq!(fs.stat("/a").unwrap().size, 0);
    assert!(fs.lstat("/to_a").unwrap().is_symlink());
    assert_clean(&fs);
}

/// In a directory of 4,096 entries or more an exclusive create makes its inode before the
/// lookup (architecture.md item 19): a name that exists gives EEXIST and gives the inode
/// back, and the creates that succeed are whole files, across a remount too.
#[test]
fn exclusive_create_in_a_large_directory() {
    let (p, fs) = new_fs("bigexcl", 64);
    fs.mkdir("/big", 0o755).unwrap();
    let excl = OpenOptions::new().write(true).create_new(true);
    for i in 0..5000 {
        drop(fs.open_file(format!("/big/f{i}"), &excl).unwrap());
    }
    let free = fs.statfs().unwrap().files_free;
    for i in (0..5000).step_by(97) {
        assert_errno(fs.open_file(format!("/big/f{i}"), &excl), EEXIST);
    }
    assert_eq!(
        fs.statfs().unwrap().files_free,
        free,
        "EEXIST gave the inode back"
    );
    let f = fs.open_file("/big/new", &excl).unwrap();
    f.write_at(b"data", 0).unwrap();
    drop(f);
    assert_eq!(fs.statfs().unwrap().files_free, free - 1);
    assert_eq!(fs.stat("/big").unwrap().size, 5001);
    assert_clean(&fs);
    let fs = remount(&p, fs);
    assert_eq!(fs.read_file("/big/new").unwrap(), b"data");
    assert_eq!(fs.statfs().unwrap().files_free, free - 1);
    assert_clean(&fs);
}

#[test]
fn open_creat_through_dangling_symlink_creates_target() {
    let (_p, fs) = new_fs("dangling", 16);
    fs.mkdir("/d", 0o755).unwrap();
    fs.symlink("target", "/d/dangling").unwrap();
    let f = fs
        .open_file("/d/dangling", &OpenOptions::new().write(true).create(true))
        .unwrap();
    f.write_at(b"via link", 0).unwrap();
    drop(f);
    assert_eq!(fs.read_file("/d/target").unwrap(), b"via link");
    assert!(fs.lstat("/d/dangling").unwrap().is_symlink());
    assert_clean(&fs);
}

/// open(2) with O_CREAT returns a descriptor for the access asked even when the mode given
/// forbids it, for a file made through a dangling symlink as for one made directly.
#[test]
fn o_creat_through_a_dangling_symlink_writes_whatever_the_mode() {
    let (_p, fs) = new_fs("dangling-mode", 16);
    fs.mkdir("/u", 0o777).unwrap();
    let u = user(&fs, 1000);
    u.symlink("made", "/u/dangling").unwrap();
    let opts = OpenOptions::new().write(true).create(true).mode(0o444);
    for path in ["/u/direct", "/u/dangling"] {
        let f = u.open_file(path, &opts).unwrap();
        f.write_at(b"ok", 0).unwrap();
    }
    assert_eq!(fs.read_file("/u/direct").unwrap(), b"ok");
    assert_eq!(fs.read_file("/u/made").unwrap(), b"ok");
    assert_eq!(fs.stat("/u/made").unwrap().permissions(), 0o444);
    // Once made, the mode applies.
    assert_errno(u.open_file("/u/dangling", &opts), libc::EACCES);
    assert_clean(&fs);
}

#[test]
fn open_rdonly_trunc_truncates() {
    let (_p, fs) = new_fs("rdtrunc", 16);
    fs.write_file("/f", b"hello").unwrap();
    let f = fs
        .open_file("/f", &OpenOptions::new().read(true).truncate(true))
        .unwrap();
    drop(f);
    assert_eq!(fs.stat("/f").unwrap().size, 0);
    assert_clean(&fs);
}

#[test]
fn open_append_writes_at_end() {
    let (p, fs) = new_fs("append", 16);
    let mut f = fs
        .open_file(
            "/log",
            &OpenOptions::new()
                .read(true)
                .write(true)
                .append(true)
                .create(true),
        )
        .unwrap();
    f.write_all(b"abc").unwrap();
    assert_eq!(f.position(), 3);
    f.seek(SeekFrom::Start(0)).unwrap();
    f.write_all(b"def").unwrap();
    assert_eq!(f.position(), 6);
    // pwrite on an O_APPEND file appends too (Linux).
    f.write_at(b"XYZ", 0).unwrap();
    // Another handle writing in the middle does not confuse the appender.
    let g = fs.open_file("/log", &rw()).unwrap();
    g.write_at(b"__", 1).unwrap();
    f.seek(SeekFrom::Start(1)).unwrap();
    f.write_all(b"!").unwrap();
    drop((f, g));
    assert_eq!(fs.read_file("/log").unwrap(), b"a__defXYZ!");
    // Appending across a page boundary.
    let f = fs
        .open_file("/log", &OpenOptions::new().write(true).append(true))
        .unwrap();
    let big = pattern(1, 5000);
    f.write_next(&big).unwrap();
    f.write_next(b"end").unwrap();
    drop(f);
    let data = fs.read_file("/log").unwrap();
    assert_eq!(data.len(), 10 + 5000 + 3);
    assert_eq!(&data[10..5010], &big[..]);
    assert_eq!(&data[5010..], b"end");
    let fs = remount(&p, fs);
    assert_eq!(fs.read_file("/log").unwrap(), data);
    assert_clean(&fs);
}

#[test]
fn open_directory_nofollow_and_dirs() {
    let (_p, fs) = new_fs("openflags", 16);
    fs.write_file("/f", b"x").unwrap();
    fs.mkdir("/d", 0o755).unwrap();
    fs.symlink("/f", "/lf").unwrap();
    fs.symlink("/d", "/ld").unwrap();

    // O_DIRECTORY.
    assert_errno(fs.open_file("/f", &dir_opts()), ENOTDIR);
    assert_errno(fs.open_file("/lf", &dir_opts()), ENOTDIR);
    let d = fs.open_file("/d", &dir_opts()).unwrap();
    assert!(d.metadata().unwrap().is_dir());
    drop(fs.open_file("/ld", &dir_opts()).unwrap());

    // O_NOFOLLOW: a final symlink is ELOOP, a symlink in the middle is followed.
    assert_errno(fs.open_file("/lf", &ro().nofollow(true)), ELOOP);
    assert_errno(fs.open_file("/lf", &creat().nofollow(true)), ELOOP);
    fs.symlink("/nowhere", "/dangling").unwrap();
    assert_errno(fs.open_file("/dangling", &creat().nofollow(true)), ELOOP);
    drop(fs.open_file("/f", &ro().nofollow(true)).unwrap());
    fs.write_file("/d/g", b"y").unwrap();
    drop(fs.open_file("/ld/g", &ro().nofollow(true)).unwrap());

    // Directories cannot be opened for writing or truncation.
    assert_errno(fs.open_file("/d", &OpenOptions::new().write(true)), EISDIR);
    assert_errno(fs.open_file("/d", &rw()), EISDIR);
    assert_errno(fs.open_file("/d", &ro().truncate(true)), EISDIR);
    assert_errno(fs.open_file("/ld", &rw()), EISDIR);
    assert_errno(fs.open_file("/d", &creat()), EISDIR);
    assert_errno(fs.open_file("/d/", &creat()), EISDIR);
    assert_errno(fs.open_file("/new/", &creat()), EISDIR);
    assert_errno(fs.stat("/new"), ENOENT);
    // Reading a directory handle as a file.
    let mut buf = [0u8; 4];
    assert_errno(d.read_at(&mut buf, 0), EISDIR);

    // Access modes.
    let r = fs.open_file("/f", &ro()).unwrap();
    assert_errno(r.write_at(b"z", 0), EBADF);
    let w = fs.open_file("/f", &OpenOptions::new().write(true)).unwrap();
    assert_errno(w.read_at(&mut buf, 0), EBADF);
    // ftruncate on a descriptor not open for writing: EINVAL.
    assert_errno(r.set_len(0), EINVAL);
    assert_eq!(fs.read_file("/f").unwrap(), b"x");
    drop((d, r, w));
    assert_clean(&fs);
}

#[test]
fn open_nofollow_directory_on_symlink_is_enotdir() {
    // Linux checks O_DIRECTORY before refusing the symlink: ENOTDIR, not ELOOP.
    let (_p, fs) = new_fs("nofollowdir", 16);
    fs.mkdir("/d", 0o755).unwrap();
    fs.symlink("/d", "/ld").unwrap();
    assert_errno(fs.open_file("/ld", &dir_opts().nofollow(true)), ENOTDIR);
    assert_clean(&fs);
}

#[test]
fn open_creat_on_existing_directory_is_eisdir() {
    let (_p, fs) = new_fs("creatdir", 16);
    fs.mkdir("/d", 0o755).unwrap();
    assert_errno(
        fs.open_file("/d", &OpenOptions::new().read(true).create(true)),
        EISDIR,
    );
    assert_clean(&fs);
}

#[test]
fn o_path_opens_the_node_itself() {
    let (p, fs) = new_fs("opath", 16);
    fs.write_file("/f", b"abc").unwrap();
    fs.chmod("/f", 0).unwrap();
    fs.symlink("f", "/lf").unwrap();
    let path = OpenOptions::from_flags(libc::O_PATH | libc::O_NOFOLLOW, 0);
    assert!(path.path && path.read && !path.write);

    // No permission on the node itself: a user may open a 000 file it cannot read.
    let alice = user(&fs, 1000);
    assert_errno(alice.open_file("/f", &ro()), libc::EACCES);
    let f = alice.open_file("/f", &path).unwrap();
    assert_eq!(f.metadata().unwrap().size, 3);

    // The flags O_PATH ignores: no create, no truncate, no write.
    let o = OpenOptions::from_flags(
        libc::O_PATH | libc::O_TRUNC | libc::O_CREAT | libc::O_RDWR,
        0,
    );
    assert!(o.path && !o.write && !o.truncate && !o.create);
    drop(fs.open_file("/f", &o).unwrap());
    assert_eq!(fs.stat("/f").unwrap().size, 3);
    assert_errno(fs.open_file("/none", &o), ENOENT);

    // With O_NOFOLLOW a final symlink opens as itself, and keeps its node once unlinked.
    let l = fs.open_file("/lf", &path).unwrap();
    let m = l.metadata().unwrap();
    assert!(m.is_symlink());
    assert_eq!(fs.readlink_handle(l.handle()).unwrap(), b"f");
    fs.link_handle(l.handle(), None, b"/lf2").unwrap();
    assert_eq!(fs.lstat("/lf2").unwrap().nlink, 2);
    fs.unlink("/lf").unwrap();
    fs.unlink("/lf2").unwrap();
    assert_eq!(l.metadata().unwrap().nlink, 0);
    assert_eq!(fs.readlink_handle(l.handle()).unwrap(), b"f");
    assert_errno(fs.link_handle(l.handle(), None, b"/lf3"), ENOENT);
    drop(l);
    assert_errno(
        fs.open_file(
            "/f",
            &OpenOptions::from_flags(libc::O_PATH | libc::O_DIRECTORY, 0),
        ),
        ENOTDIR,
    );
    // Without O_NOFOLLOW the link is followed as before.
    fs.symlink("f", "/lf").unwrap();
    let t = fs
        .open_file("/lf", &OpenOptions::from_flags(libc::O_PATH, 0))
        .unwrap();
    assert!(t.metadata().unwrap().is_file());
    drop((t, f, alice));
    // A long target, kept out of the inode, is freed with the link's last handle.
    let long = vec![b'x'; 300];
    fs.symlink(&long, "/long").unwrap();
    let l = fs.open_file("/long", &path).unwrap();
    fs.unlink("/long").unwrap();
    assert_eq!(fs.readlink_handle(l.handle()).unwrap(), long);
    drop(l);
    assert_clean(&fs);
    let fs = remount(&p, fs);
    assert_clean(&fs);
}

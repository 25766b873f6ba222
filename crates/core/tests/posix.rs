//! POSIX behaviour of the native API, checked against what Linux does (every expectation
//! here was confirmed on tmpfs with the equivalent system calls).

mod common;

use common::{PoolFile, assert_clean, assert_errno, new_fs, pattern, remount};
use engram_core::{Creds, Fs, Metadata, OpenOptions, RENAME_EXCHANGE, RENAME_NOREPLACE, SetTime};
use libc::{
    EACCES, EBADF, EBUSY, EEXIST, EINVAL, EISDIR, ELOOP, ENAMETOOLONG, ENOENT, ENOTDIR, ENOTEMPTY,
    EPERM,
};
use std::collections::{BTreeMap, HashSet};
use std::io::{Read, Seek, SeekFrom, Write};

const MIB: u64 = 1 << 20;

fn ro() -> OpenOptions {
    OpenOptions::new().read(true)
}

fn rw() -> OpenOptions {
    OpenOptions::new().read(true).write(true)
}

fn creat() -> OpenOptions {
    OpenOptions::new().read(true).write(true).create(true)
}

fn dir_opts() -> OpenOptions {
    OpenOptions::new().read(true).directory(true)
}

fn user(fs: &Fs, uid: u32) -> Fs {
    fs.with_creds(Creds {
        uid,
        gid: uid,
        groups: vec![],
    })
}

/// Names in a directory, in readdir order, without "." and "..".
fn names(fs: &Fs, path: &str) -> Vec<String> {
    fs.read_dir(path)
        .unwrap()
        .map(|e| e.unwrap().name_str().into_owned())
        .filter(|n| n != "." && n != "..")
        .collect()
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i64
}

/// Let the clock move so that a later timestamp is strictly greater.
fn tick() {
    std::thread::sleep(std::time::Duration::from_millis(2));
}

// ---------------------------------------------------------------------------------- open

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

// ---------------------------------------------------------------------------------- namespace

#[test]
fn mkdir_rmdir_unlink() {
    let (_p, fs) = new_fs("mkdir", 16);
    let root = fs.stat("/").unwrap();
    assert!(root.is_dir());
    assert_eq!(root.nlink, 2);
    fs.mkdir("/d", 0o750).unwrap();
    let d = fs.stat("/d").unwrap();
    assert!(d.is_dir());
    assert_eq!(d.permissions(), 0o750);
    assert_eq!(d.nlink, 2);
    assert_eq!(fs.stat("/").unwrap().nlink, 3);
    fs.write_file("/f", b"x").unwrap();

    assert_errno(fs.mkdir("/d", 0o755), EEXIST);
    assert_errno(fs.mkdir("/f", 0o755), EEXIST);
    assert_errno(fs.mkdir("/f/", 0o755), EEXIST);
    assert_errno(fs.mkdir("/", 0o755), EEXIST);
    assert_errno(fs.mkdir("/d/..", 0o755), EEXIST);
    assert_errno(fs.mkdir("/d/.", 0o755), EEXIST);
    assert_errno(fs.mkdir("/missing/x", 0o755), ENOENT);
    assert_errno(fs.mkdir("/f/x", 0o755), ENOTDIR);
    fs.mkdir("/d/sub/", 0o755).unwrap(); // a trailing slash is fine for mkdir
    assert!(fs.stat("/d/sub").unwrap().is_dir());
    assert_eq!(fs.stat("/d").unwrap().nlink, 3);

    assert_errno(fs.rmdir("/d"), ENOTEMPTY);
    assert_errno(fs.rmdir("/f"), ENOTDIR);
    assert_errno(fs.rmdir("/"), EBUSY);
    assert_errno(fs.rmdir("/d/sub/."), EINVAL);
    assert_errno(fs.rmdir("/missing"), ENOENT);
    assert_errno(fs.unlink("/d"), EISDIR);
    assert_errno(fs.unlink("/d/"), EISDIR);
    assert_errno(fs.unlink("/f/"), ENOTDIR);
    assert_errno(fs.unlink("/missing"), ENOENT);
    assert_errno(fs.unlink("/"), EISDIR);

    fs.rmdir("/d/sub/").unwrap();
    assert_errno(fs.stat("/d/sub"), ENOENT);
    assert_eq!(fs.stat("/d").unwrap().nlink, 2);
    fs.rmdir("/d").unwrap();
    assert_eq!(fs.stat("/").unwrap().nlink, 2);
    fs.unlink("/f").unwrap();
    assert_errno(fs.stat("/f"), ENOENT);
    assert!(names(&fs, "/").is_empty());
    assert_clean(&fs);
}

#[test]
fn rmdir_dotdot_is_enotempty() {
    let (_p, fs) = new_fs("rmdirdotdot", 16);
    fs.mkdir("/d", 0o755).unwrap();
    fs.mkdir("/d/sub", 0o755).unwrap();
    assert_errno(fs.rmdir("/d/sub/.."), ENOTEMPTY);
    assert_clean(&fs);
}

#[test]
fn rename_files_and_dirs() {
    let (p, fs) = new_fs("rename", 16);
    fs.mkdir("/a", 0o755).unwrap();
    fs.mkdir("/b", 0o755).unwrap();
    fs.write_file("/a/f", b"file f").unwrap();
    let ino = fs.stat("/a/f").unwrap().ino;

    // A file within a directory and across directories.
    fs.rename("/a/f", "/a/g").unwrap();
    assert_errno(fs.stat("/a/f"), ENOENT);
    assert_eq!(fs.stat("/a/g").unwrap().ino, ino);
    fs.rename("/a/g", "/b/h").unwrap();
    assert_eq!(fs.read_file("/b/h").unwrap(), b"file f");
    assert_eq!(fs.stat("/b/h").unwrap().ino, ino);
    assert!(names(&fs, "/a").is_empty());
    assert_eq!(fs.stat("/a").unwrap().nlink, 2);

    // Replacing a file: the old target's inode goes away.
    fs.write_file("/b/victim", b"old").unwrap();
    fs.rename("/b/h", "/b/victim").unwrap();
    assert_eq!(fs.read_file("/b/victim").unwrap(), b"file f");
    assert_eq!(fs.stat("/b/victim").unwrap().nlink, 1);
    assert_eq!(sorted(names(&fs, "/b")), ["victim"]);

    // The replaced file stays readable through a handle opened before.
    fs.write_file("/b/open", b"old contents").unwrap();
    let held = fs.open_file("/b/open", &ro()).unwrap();
    fs.write_file("/b/new", b"new").unwrap();
    fs.rename("/b/new", "/b/open").unwrap();
    assert_eq!(fs.read_file("/b/open").unwrap(), b"new");
    let mut buf = [0u8; 20];
    let n = held.read_at(&mut buf, 0).unwrap();
    assert_eq!(&buf[..n], b"old contents");
    assert_eq!(held.metadata().unwrap().nlink, 0);
    drop(held);
    fs.unlink("/b/open").unwrap();
    assert_clean(&fs);

    // A directory across directories: nlink of both parents and its "..".
    fs.mkdir("/a/dir", 0o755).unwrap();
    fs.mkdir("/a/dir/inner", 0o755).unwrap();
    fs.write_file("/a/dir/inner/x", b"deep").unwrap();
    assert_eq!(fs.stat("/a").unwrap().nlink, 3);
    fs.rename("/a/dir", "/b/moved").unwrap();
    assert_eq!(fs.stat("/a").unwrap().nlink, 2);
    assert_eq!(fs.stat("/b").unwrap().nlink, 3);
    let b_ino = fs.stat("/b").unwrap().ino;
    assert_eq!(fs.stat("/b/moved/..").unwrap().ino, b_ino);
    assert_eq!(fs.stat("/b/moved/inner/../..").unwrap().ino, b_ino);
    assert_eq!(fs.read_file("/b/moved/inner/x").unwrap(), b"deep");
    let dotdot = fs
        .read_dir("/b/moved")
        .unwrap()
        .map(|e| e.unwrap())
        .find(|e| e.name == b"..")
        .unwrap();
    assert_eq!(dotdot.ino, b_ino);

    // Replacing an empty directory.
    fs.mkdir("/a/empty", 0o755).unwrap();
    let moved_ino = fs.stat("/b/moved").unwrap().ino;
    fs.rename("/b/moved", "/a/empty").unwrap();
    assert_eq!(fs.stat("/a/empty").unwrap().ino, moved_ino);
    assert_eq!(fs.stat("/a").unwrap().nlink, 3);
    assert_eq!(fs.stat("/b").unwrap().nlink, 2);
    assert_eq!(
        fs.stat("/a/empty/..").unwrap().ino,
        fs.stat("/a").unwrap().ino
    );

    // A directory over a non-empty directory, over a file; a file over a directory.
    fs.mkdir("/b/full", 0o755).unwrap();
    fs.write_file("/b/full/x", b"").unwrap();
    assert_errno(fs.rename("/a/empty", "/b/full"), ENOTEMPTY);
    assert_errno(fs.rename("/a/empty", "/b/victim"), ENOTDIR);
    assert_errno(fs.rename("/b/victim", "/b/full"), EISDIR);
    assert_errno(fs.rename("/b/victim", "/b/newname/"), ENOTDIR);
    assert_errno(fs.rename("/b/victim/", "/b/newname"), ENOTDIR);

    // Into its own subtree; onto its own ancestor.
    assert_errno(fs.rename("/a", "/a/empty/inner/x2"), EINVAL);
    assert_errno(fs.rename("/a", "/a/empty"), EINVAL);
    assert_errno(fs.rename("/a/empty", "/a"), ENOTEMPTY);
    assert_errno(fs.rename("/a/empty/inner", "/a/empty/inner/sub"), EINVAL);

    // ".", "..", "/" and missing names.
    assert_errno(fs.rename("/a/.", "/x"), EBUSY);
    assert_errno(fs.rename("/a/empty/..", "/x"), EBUSY);
    assert_errno(fs.rename("/b/victim", "/a/."), EBUSY);
    assert_errno(fs.rename("/", "/x"), EBUSY);
    assert_errno(fs.rename("/missing", "/x"), ENOENT);
    assert_errno(fs.rename("/b/victim", "/missing/x"), ENOENT);

    // A name onto itself; a trailing slash on a directory is fine.
    fs.rename("/b/victim", "/b/victim").unwrap();
    fs.rename("/a/empty", "/a/empty").unwrap();
    fs.rename("/a/empty/", "/a/renamed/").unwrap();
    assert!(fs.stat("/a/renamed/inner").unwrap().is_dir());

    let fs = remount(&p, fs);
    assert_eq!(fs.read_file("/a/renamed/inner/x").unwrap(), b"deep");
    assert_eq!(fs.read_file("/b/victim").unwrap(), b"file f");
    assert_eq!(fs.stat("/a").unwrap().nlink, 3);
    assert_eq!(fs.stat("/b").unwrap().nlink, 3);
    assert_clean(&fs);
}

#[test]
fn rename_flags() {
    let (p, fs) = new_fs("renameflags", 16);
    fs.write_file("/f", b"F").unwrap();
    fs.write_file("/g", b"G").unwrap();
    let r = |from: &str, to: &str, flags| {
        fs.rename_at(None, from.as_bytes(), None, to.as_bytes(), flags)
    };

    // RENAME_NOREPLACE.
    assert_errno(r("/f", "/g", RENAME_NOREPLACE), EEXIST);
    assert_eq!(fs.read_file("/g").unwrap(), b"G");
    r("/f", "/h", RENAME_NOREPLACE).unwrap();
    assert_eq!(fs.read_file("/h").unwrap(), b"F");
    assert_errno(r("/h", "/missing", RENAME_EXCHANGE), ENOENT);
    assert_errno(r("/h", "/g", RENAME_EXCHANGE | RENAME_NOREPLACE), EINVAL);
    assert_errno(r("/h", "/g", 0x80), EINVAL);

    // RENAME_EXCHANGE of two files.
    r("/h", "/g", RENAME_EXCHANGE).unwrap();
    assert_eq!(fs.read_file("/h").unwrap(), b"G");
    assert_eq!(fs.read_file("/g").unwrap(), b"F");

    // RENAME_EXCHANGE of a file and a directory in different directories.
    fs.mkdir("/p1", 0o755).unwrap();
    fs.mkdir("/p2", 0o755).unwrap();
    fs.write_file("/p1/file", b"contents").unwrap();
    fs.mkdir("/p2/dir", 0o755).unwrap();
    fs.mkdir("/p2/dir/inner", 0o755).unwrap();
    let (p1, p2) = (fs.stat("/p1").unwrap(), fs.stat("/p2").unwrap());
    let (file, dir) = (fs.stat("/p1/file").unwrap(), fs.stat("/p2/dir").unwrap());
    assert_eq!((p1.nlink, p2.nlink), (2, 3));
    r("/p1/file", "/p2/dir", RENAME_EXCHANGE).unwrap();
    let check = |fs: &Fs| {
        assert_eq!(
            fs.stat("/p1").unwrap().nlink,
            3,
            "p1 now holds the directory"
        );
        assert_eq!(fs.stat("/p2").unwrap().nlink, 2, "p2 now holds the file");
        assert_eq!(fs.stat("/p1/file").unwrap().ino, dir.ino);
        assert!(fs.stat("/p1/file").unwrap().is_dir());
        assert_eq!(fs.stat("/p2/dir").unwrap().ino, file.ino);
        assert_eq!(fs.read_file("/p2/dir").unwrap(), b"contents");
        assert_eq!(fs.stat("/p1/file/..").unwrap().ino, p1.ino);
        assert_eq!(fs.stat("/p1/file/inner/../..").unwrap().ino, p1.ino);
        let e: BTreeMap<Vec<u8>, u8> = fs
            .read_dir("/p1")
            .unwrap()
            .map(|e| e.unwrap())
            .map(|e| (e.name, e.file_type))
            .collect();
        assert_eq!(e[&b"file"[..]], libc::DT_DIR);
        let e: BTreeMap<Vec<u8>, u8> = fs
            .read_dir("/p2")
            .unwrap()
            .map(|e| e.unwrap())
            .map(|e| (e.name, e.file_type))
            .collect();
        assert_eq!(e[&b"dir"[..]], libc::DT_REG);
        let dotdot = fs
            .read_dir("/p1/file")
            .unwrap()
            .map(|e| e.unwrap())
            .find(|e| e.name == b"..")
            .unwrap();
        assert_eq!(dotdot.ino, p1.ino);
    };
    check(&fs);
    // Exchanging a directory with something inside it.
    assert_errno(r("/p1/file", "/p1/file/inner", RENAME_EXCHANGE), EINVAL);
    assert_errno(r("/p1/file/inner", "/p1/file", RENAME_EXCHANGE), EINVAL);
    assert_clean(&fs);
    let fs = remount(&p, fs);
    check(&fs);
    assert_clean(&fs);
}

#[test]
fn rename_onto_hard_link_of_itself() {
    let (_p, fs) = new_fs("renamelink", 16);
    fs.write_file("/f", b"same").unwrap();
    fs.link("/f", "/g").unwrap();
    fs.rename("/f", "/g").unwrap();
    assert_eq!(fs.stat("/f").unwrap().nlink, 2);
    assert_eq!(fs.stat("/f").unwrap().ino, fs.stat("/g").unwrap().ino);
    assert_eq!(sorted(names(&fs, "/")), ["f", "g"]);
    assert_clean(&fs);
}

#[test]
fn hard_links() {
    let (p, fs) = new_fs("link", 16);
    fs.write_file("/f", b"one").unwrap();
    fs.mkdir("/d", 0o755).unwrap();
    let before = fs.stat("/f").unwrap();
    tick();
    fs.link("/f", "/d/g").unwrap();
    let (f, g) = (fs.stat("/f").unwrap(), fs.stat("/d/g").unwrap());
    assert_eq!(f.ino, g.ino);
    assert_eq!((f.nlink, g.nlink), (2, 2));
    assert!(f.ctime_ns > before.ctime_ns, "link changes ctime");
    fs.open_file("/d/g", &rw())
        .unwrap()
        .write_at(b"ONE", 0)
        .unwrap();
    assert_eq!(fs.read_file("/f").unwrap(), b"ONE");

    assert_errno(fs.link("/f", "/d/g"), EEXIST);
    assert_errno(fs.link("/f", "/d"), EEXIST);
    assert_errno(fs.link("/d", "/d2"), EPERM);
    assert_errno(fs.link("/missing", "/x"), ENOENT);
    assert_errno(fs.link("/f", "/missing/x"), ENOENT);
    assert_errno(fs.link("/f", "/new/"), ENOENT);

    // link(2) does not follow a symlink: the new name is another name of the link.
    fs.symlink("/f", "/sl").unwrap();
    fs.link("/sl", "/sl2").unwrap();
    assert!(fs.lstat("/sl2").unwrap().is_symlink());
    assert_eq!(fs.lstat("/sl2").unwrap().nlink, 2);
    assert_eq!(fs.readlink("/sl2").unwrap(), b"/f");

    fs.unlink("/f").unwrap();
    assert_eq!(fs.stat("/d/g").unwrap().nlink, 1);
    assert_eq!(fs.read_file("/d/g").unwrap(), b"ONE");
    assert_errno(fs.stat("/sl2"), ENOENT); // dangling now
    let fs = remount(&p, fs);
    assert_eq!(fs.stat("/d/g").unwrap().nlink, 1);
    assert_eq!(fs.lstat("/sl").unwrap().nlink, 2);
    assert_clean(&fs);
}

#[test]
fn symlinks() {
    let (p, fs) = new_fs("symlink", 16);
    fs.mkdir("/d", 0o755).unwrap();
    fs.mkdir("/d/e", 0o755).unwrap();
    fs.write_file("/d/t", b"target").unwrap();
    fs.write_file("/d/e/deep", b"deep").unwrap();

    fs.symlink("t", "/d/rel").unwrap();
    fs.symlink("/d/t", "/abs").unwrap();
    fs.symlink("/d", "/dl").unwrap();
    fs.symlink("d", "/dl_rel").unwrap();
    fs.symlink("../t", "/d/e/up").unwrap();
    fs.symlink("e", "/d/el").unwrap();
    assert_eq!(fs.read_file("/d/rel").unwrap(), b"target");
    assert_eq!(fs.read_file("/abs").unwrap(), b"target");
    assert_eq!(fs.read_file("/dl/t").unwrap(), b"target");
    assert_eq!(fs.read_file("/dl_rel/e/deep").unwrap(), b"deep");
    assert_eq!(fs.read_file("/dl/el/deep").unwrap(), b"deep");
    assert_eq!(fs.read_file("/d/e/up").unwrap(), b"target");
    assert_eq!(fs.read_file("/dl/el/up").unwrap(), b"target");
    assert_eq!(fs.read_file("/dl/el/../t").unwrap(), b"target");
    assert_eq!(fs.readlink("/d/rel").unwrap(), b"t");
    assert_eq!(fs.readlink("/abs").unwrap(), b"/d/t");
    assert_eq!(fs.readlink("/dl/rel").unwrap(), b"t");
    assert_errno(fs.readlink("/d/t"), EINVAL);
    assert_errno(fs.readlink("/d"), EINVAL);
    assert_errno(fs.readlink("/nothing"), ENOENT);

    let l = fs.lstat("/abs").unwrap();
    assert!(l.is_symlink());
    assert_eq!(l.size, 4);
    assert_eq!(l.permissions(), 0o777);
    assert_eq!(fs.stat("/abs").unwrap().ino, fs.stat("/d/t").unwrap().ino);
    assert!(fs.stat("/dl").unwrap().is_dir());
    assert!(fs.lstat("/dl").unwrap().is_symlink());
    assert!(
        fs.lstat("/dl/").unwrap().is_dir(),
        "a trailing slash follows the link"
    );
    fs.symlink("/d/t", "/lf").unwrap();
    assert_errno(fs.lstat("/lf/"), ENOTDIR);
    assert_errno(fs.symlink("x", "/abs"), EEXIST);
    assert_errno(fs.symlink("x", "/new/"), ENOENT);
    assert_errno(fs.symlink("", "/empty"), ENOENT);
    assert_errno(fs.symlink("x", "/missing/l"), ENOENT);

    // 40 links in a chain resolve; 41 are ELOOP; a loop is ELOOP.
    fs.mkdir("/chain", 0o755).unwrap();
    for i in 0..45 {
        fs.symlink(format!("s{}", i + 1), format!("/chain/s{i}"))
            .unwrap();
    }
    fs.write_file("/chain/s45", b"end").unwrap();
    assert_eq!(fs.read_file("/chain/s5").unwrap(), b"end"); // 40 links
    assert_eq!(fs.read_file("/chain/s6").unwrap(), b"end");
    assert_errno(fs.read_file("/chain/s4"), ELOOP); // 41 links
    assert_errno(fs.stat("/chain/s0"), ELOOP);
    assert!(fs.lstat("/chain/s0").unwrap().is_symlink());
    fs.symlink("loop", "/chain/loop").unwrap();
    assert_errno(fs.stat("/chain/loop"), ELOOP);
    assert_errno(fs.stat("/chain/loop/x"), ELOOP);
    fs.symlink("b", "/chain/a").unwrap();
    fs.symlink("a", "/chain/b").unwrap();
    assert_errno(fs.open_file("/chain/a", &ro()), ELOOP);

    // Long targets: 4000 bytes resolve, 4095 are stored, 4096 are ENAMETOOLONG.
    let long = format!("{}d//t", "./".repeat(1998));
    assert_eq!(long.len(), 4000);
    fs.symlink(&long, "/long").unwrap();
    assert_eq!(fs.readlink("/long").unwrap(), long.as_bytes());
    assert_eq!(fs.lstat("/long").unwrap().size, 4000);
    assert_eq!(fs.read_file("/long").unwrap(), b"target");
    fs.symlink("z".repeat(4095), "/l4095").unwrap();
    assert_eq!(fs.readlink("/l4095").unwrap().len(), 4095);
    assert_errno(fs.symlink("z".repeat(4096), "/l4096"), ENAMETOOLONG);
    // Every inline/outline boundary round-trips.
    for len in [1usize, 47, 48, 49, 63, 64, 65, 255, 256, 4094] {
        let t: String = (0..len).map(|i| (b'a' + (i % 26) as u8) as char).collect();
        fs.symlink(&t, format!("/len{len}")).unwrap();
        assert_eq!(
            fs.readlink(format!("/len{len}")).unwrap(),
            t.as_bytes(),
            "target of {len} bytes"
        );
    }

    let fs = remount(&p, fs);
    assert_eq!(fs.readlink("/long").unwrap(), long.as_bytes());
    assert_eq!(fs.read_file("/long").unwrap(), b"target");
    assert_eq!(fs.read_file("/dl/el/up").unwrap(), b"target");
    assert_eq!(fs.readlink("/len4094").unwrap().len(), 4094);
    fs.unlink("/long").unwrap();
    fs.unlink("/l4095").unwrap();
    assert_clean(&fs);
}

#[test]
fn truncate_up_and_down() {
    let (p, fs) = new_fs("truncate", 16);
    let data = pattern(7, 10_000);
    fs.write_file("/f", &data).unwrap();
    assert_eq!(fs.stat("/f").unwrap().blocks, 3 * 8);

    fs.truncate("/f", 5_000).unwrap();
    assert_eq!(fs.stat("/f").unwrap().size, 5_000);
    assert_eq!(fs.stat("/f").unwrap().blocks, 2 * 8);
    assert_eq!(fs.read_file("/f").unwrap(), &data[..5_000]);

    // Growing again: the bytes past the old end read as zeros, including those in the
    // page that still holds the shrunk-away data.
    fs.truncate("/f", 20_000).unwrap();
    let got = fs.read_file("/f").unwrap();
    assert_eq!(got.len(), 20_000);
    assert_eq!(&got[..5_000], &data[..5_000]);
    assert!(
        got[5_000..].iter().all(|&b| b == 0),
        "bytes past a shrink read as zeros"
    );

    // The same through an open handle, and a write after a shrink within one page.
    let f = fs.open_file("/f", &rw()).unwrap();
    f.set_len(100).unwrap();
    f.write_at(b"Z", 200).unwrap();
    let mut buf = vec![0xAAu8; 300];
    assert_eq!(f.read_at(&mut buf, 0).unwrap(), 201);
    assert_eq!(&buf[..100], &data[..100]);
    assert!(buf[100..200].iter().all(|&b| b == 0));
    assert_eq!(buf[200], b'Z');
    f.set_len(0).unwrap();
    assert_eq!(f.metadata().unwrap().blocks, 0);
    f.set_len(3 * MIB).unwrap();
    assert_eq!(
        f.metadata().unwrap().blocks,
        0,
        "growing by truncate allocates nothing"
    );
    let mut big = vec![1u8; (3 * MIB) as usize];
    assert_eq!(f.read_at(&mut big, 0).unwrap(), (3 * MIB) as usize);
    assert!(big.iter().all(|&b| b == 0));
    drop(f);

    // Errors, and truncate through a symlink.
    fs.mkdir("/d", 0o755).unwrap();
    assert_errno(fs.truncate("/d", 0), EISDIR);
    assert_errno(fs.truncate("/missing", 0), ENOENT);
    fs.symlink("/f", "/l").unwrap();
    fs.truncate("/l", 7).unwrap();
    assert_eq!(fs.stat("/f").unwrap().size, 7);
    assert!(fs.lstat("/l").unwrap().is_symlink());
    let fs = remount(&p, fs);
    assert_eq!(fs.read_file("/f").unwrap(), [0u8; 7]);
    assert_clean(&fs);
}

#[test]
fn chmod_chown_utimens() {
    let (p, fs) = new_fs("attrs", 16);
    fs.write_file("/f", b"x").unwrap();
    let m0 = fs.stat("/f").unwrap();
    tick();
    fs.chmod("/f", 0o4751).unwrap();
    let m = fs.stat("/f").unwrap();
    assert_eq!(m.permissions(), 0o4751);
    assert!(m.is_file());
    assert!(m.ctime_ns > m0.ctime_ns);
    assert_eq!(m.mtime_ns, m0.mtime_ns, "chmod leaves mtime alone");

    fs.chown("/f", Some(1000), Some(2000)).unwrap();
    let m = fs.stat("/f").unwrap();
    assert_eq!((m.uid, m.gid), (1000, 2000));
    assert_eq!(m.permissions(), 0o751, "chown clears set-user-ID");
    fs.chown("/f", None, Some(3000)).unwrap();
    assert_eq!(
        (fs.stat("/f").unwrap().uid, fs.stat("/f").unwrap().gid),
        (1000, 3000)
    );

    // Nanosecond times, set exactly (also before 1970).
    let (at, mt) = (1_234_567_890_123_456_789, 987_654_321_987_654_321);
    fs.utimens("/f", Some(SetTime::Ns(at)), Some(SetTime::Ns(mt)))
        .unwrap();
    let m = fs.stat("/f").unwrap();
    assert_eq!((m.atime_ns, m.mtime_ns), (at, mt));
    fs.utimens("/f", None, Some(SetTime::Ns(-1_500_000_001)))
        .unwrap();
    let m = fs.stat("/f").unwrap();
    assert_eq!(
        (m.atime_ns, m.mtime_ns),
        (at, -1_500_000_001),
        "None leaves atime alone"
    );
    let before = now_ns();
    fs.utimens("/f", Some(SetTime::Now), Some(SetTime::Now))
        .unwrap();
    let after = now_ns();
    let m = fs.stat("/f").unwrap();
    assert!(
        m.atime_ns >= before && m.atime_ns <= after,
        "{} not in [{before}, {after}]",
        m.atime_ns
    );
    assert!(m.mtime_ns >= before && m.mtime_ns <= after);
    assert!(m.ctime_ns >= before && m.ctime_ns <= after);

    // On a symlink: follow or not.
    fs.symlink("/f", "/l").unwrap();
    fs.chmod("/l", 0o600).unwrap();
    assert_eq!(fs.stat("/f").unwrap().permissions(), 0o600);
    fs.utimens_at(
        None,
        b"/l",
        Some(SetTime::Ns(5)),
        Some(SetTime::Ns(6)),
        false,
    )
    .unwrap();
    let l = fs.lstat("/l").unwrap();
    assert_eq!((l.atime_ns, l.mtime_ns), (5, 6));
    assert_ne!(fs.stat("/f").unwrap().mtime_ns, 6);
    fs.chown_at(None, b"/l", Some(42), Some(43), false).unwrap();
    assert_eq!(
        (fs.lstat("/l").unwrap().uid, fs.lstat("/l").unwrap().gid),
        (42, 43)
    );
    assert_eq!(fs.stat("/f").unwrap().uid, 1000);

    // Through an open handle.
    let f = fs.open_file("/f", &rw()).unwrap();
    f.set_mode(0o644).unwrap();
    f.set_owner(Some(0), Some(0)).unwrap();
    f.set_times(Some(SetTime::Ns(11)), Some(SetTime::Ns(12)))
        .unwrap();
    let m = f.metadata().unwrap();
    assert_eq!(
        (m.permissions(), m.uid, m.gid, m.atime_ns, m.mtime_ns),
        (0o644, 0, 0, 11, 12)
    );
    drop(f);

    // Directories too.
    fs.mkdir("/d", 0o755).unwrap();
    fs.chmod("/d", 0o1777).unwrap();
    assert_eq!(fs.stat("/d").unwrap().permissions(), 0o1777);
    assert!(fs.stat("/d").unwrap().is_dir());
    assert_errno(fs.chmod("/missing", 0o644), ENOENT);

    let fs = remount(&p, fs);
    let m = fs.stat("/f").unwrap();
    assert_eq!(
        (m.permissions(), m.uid, m.gid, m.atime_ns, m.mtime_ns),
        (0o644, 0, 0, 11, 12)
    );
    let l = fs.lstat("/l").unwrap();
    assert_eq!((l.uid, l.gid, l.atime_ns, l.mtime_ns), (42, 43, 5, 6));
    assert_clean(&fs);
}

#[test]
fn stat_fields() {
    let (p, fs) = new_fs("stat", 16);
    let root = fs.stat("/").unwrap();
    assert_eq!(root.blksize, 4096);
    fs.write_file("/f", b"").unwrap();
    let f0 = fs.stat("/f").unwrap();
    assert_eq!(
        (f0.size, f0.blocks, f0.nlink, f0.uid, f0.gid),
        (0, 0, 1, 0, 0)
    );
    assert_ne!(f0.ino, root.ino);

    // Blocks are 512-byte units of 4 KiB pages held.
    let f = fs.open_file("/f", &rw()).unwrap();
    f.write_at(b"1", 0).unwrap();
    assert_eq!(f.metadata().unwrap().blocks, 8);
    f.write_at(&[2u8; 4096], 1).unwrap();
    assert_eq!(f.metadata().unwrap().blocks, 16);
    f.write_at(b"3", 10 * MIB).unwrap();
    assert_eq!(f.metadata().unwrap().blocks, 24, "a hole holds no blocks");
    assert_eq!(f.metadata().unwrap().size, 10 * MIB + 1);

    // mtime and ctime change on write; reads leave them alone.
    fs.utimens("/f", Some(SetTime::Ns(1_000)), Some(SetTime::Ns(1_000)))
        .unwrap();
    let m1 = fs.stat("/f").unwrap();
    let mut buf = [0u8; 10];
    f.read_at(&mut buf, 0).unwrap();
    assert_eq!(fs.stat("/f").unwrap().mtime_ns, 1_000);
    tick();
    let before = now_ns();
    f.write_at(b"x", 5).unwrap();
    let m2 = fs.stat("/f").unwrap();
    assert!(m2.mtime_ns >= before, "write sets mtime");
    assert!(m2.ctime_ns > m1.ctime_ns, "write sets ctime");
    drop(f);

    // Directory: nlink is 2 + subdirectories; mtime and ctime change when entries change.
    fs.mkdir("/d", 0o755).unwrap();
    fs.utimens("/d", Some(SetTime::Ns(1_000)), Some(SetTime::Ns(1_000)))
        .unwrap();
    let d0 = fs.stat("/d").unwrap();
    tick();
    fs.write_file("/d/file", b"").unwrap();
    let d1 = fs.stat("/d").unwrap();
    assert!(
        d1.mtime_ns > 1_000 && d1.ctime_ns > d0.ctime_ns,
        "create changes the directory"
    );
    assert_eq!(d1.nlink, 2, "files do not count in a directory's nlink");
    for i in 0..3 {
        fs.mkdir(format!("/d/sub{i}"), 0o755).unwrap();
    }
    assert_eq!(fs.stat("/d").unwrap().nlink, 5);
    fs.utimens("/d", None, Some(SetTime::Ns(1_000))).unwrap();
    let d2 = fs.stat("/d").unwrap();
    tick();
    fs.rmdir("/d/sub1").unwrap();
    let d3 = fs.stat("/d").unwrap();
    assert_eq!(d3.nlink, 4);
    assert!(
        d3.mtime_ns > 1_000 && d3.ctime_ns > d2.ctime_ns,
        "rmdir changes the directory"
    );
    for (op, what) in [
        (0, "unlink"),
        (1, "rename out"),
        (2, "symlink"),
        (3, "link"),
    ] {
        fs.utimens("/d", None, Some(SetTime::Ns(1_000))).unwrap();
        let before = fs.stat("/d").unwrap();
        tick();
        match op {
            0 => fs.unlink("/d/file").unwrap(),
            1 => fs.rename("/d/sub0", "/sub0").unwrap(),
            2 => fs.symlink("x", "/d/sl").unwrap(),
            _ => fs.link("/f", "/d/hard").unwrap(),
        }
        let after = fs.stat("/d").unwrap();
        assert!(
            after.mtime_ns > 1_000 && after.ctime_ns > before.ctime_ns,
            "{what} changes the directory"
        );
    }
    assert_eq!(fs.stat("/d").unwrap().nlink, 3);
    assert_eq!(fs.stat("/").unwrap().nlink, 4);

    // Inode numbers are stable across renames and remounts.
    let ino = fs.stat("/f").unwrap().ino;
    fs.rename("/f", "/g").unwrap();
    assert_eq!(fs.stat("/g").unwrap().ino, ino);
    let fs = remount(&p, fs);
    assert_eq!(fs.stat("/g").unwrap().ino, ino);
    assert_eq!(fs.stat("/g").unwrap().blocks, 24);
    assert_eq!(fs.stat("/").unwrap().ino, root.ino);
    assert_clean(&fs);
}

#[test]
fn statfs_moves() {
    let (_p, fs) = new_fs("statfs", 32);
    let s0 = fs.statfs().unwrap();
    assert_eq!(s0.block_size, 4096);
    assert_eq!(s0.name_max, 255);
    assert!(s0.blocks > 0 && s0.blocks_free <= s0.blocks);
    assert!(s0.files > 0 && s0.files_free < s0.files);
    fs.write_file("/f", &vec![9u8; (2 * MIB) as usize]).unwrap();
    let s1 = fs.statfs().unwrap();
    assert_eq!(s1.files_free, s0.files_free - 1);
    assert!(
        s1.blocks_free + 512 <= s0.blocks_free,
        "{} -> {}",
        s0.blocks_free,
        s1.blocks_free
    );
    assert_eq!(s1.blocks, s0.blocks);
    for i in 0..10 {
        fs.mkdir(format!("/d{i}"), 0o755).unwrap();
    }
    assert_eq!(fs.statfs().unwrap().files_free, s0.files_free - 11);
    assert_clean(&fs);
}

#[test]
fn statfs_counts_deleted_space_as_free() {
    let (_p, fs) = new_fs("statfsdel", 32);
    fs.write_file("/f", &vec![9u8; (2 * MIB) as usize]).unwrap();
    fs.write_file("/g", b"small").unwrap();
    let s1 = fs.statfs().unwrap();
    fs.unlink("/f").unwrap();
    fs.unlink("/g").unwrap();
    let s2 = fs.statfs().unwrap();
    assert_eq!(
        s2.files_free,
        s1.files_free + 2,
        "inodes of deleted files are free"
    );
    assert!(
        s2.blocks_free >= s1.blocks_free + 512,
        "{} -> {}",
        s1.blocks_free,
        s2.blocks_free
    );
    assert_clean(&fs);
}

// ---------------------------------------------------------------------------------- paths

#[test]
fn path_forms() {
    let (_p, fs) = new_fs("paths", 16);
    fs.mkdir("/a", 0o755).unwrap();
    fs.mkdir("/a/b", 0o755).unwrap();
    fs.write_file("/a/b/f", b"data").unwrap();
    let root = fs.stat("/").unwrap().ino;
    let b = fs.stat("/a/b").unwrap().ino;
    assert_eq!(fs.stat("/.").unwrap().ino, root);
    assert_eq!(fs.stat("/..").unwrap().ino, root);
    assert_eq!(fs.stat("/../../..").unwrap().ino, root);
    assert_eq!(fs.stat(".").unwrap().ino, root);
    assert_eq!(fs.stat("a/b").unwrap().ino, b);
    assert_eq!(fs.stat("//a///b/").unwrap().ino, b);
    assert_eq!(fs.stat("/a/./b/../b/.").unwrap().ino, b);
    assert_eq!(fs.stat("/a/b/../../a/b").unwrap().ino, b);
    assert_eq!(fs.read_file("//a//b//f").unwrap(), b"data");
    assert_eq!(fs.read_file("/../a/b/f").unwrap(), b"data");

    // A trailing slash (or "/.") needs a directory.
    assert_errno(fs.stat("/a/b/f/"), ENOTDIR);
    assert_errno(fs.stat("/a/b/f/."), ENOTDIR);
    assert_errno(fs.stat("/a/b/f/x"), ENOTDIR);
    assert_errno(fs.open_file("/a/b/f/", &ro()), ENOTDIR);
    assert_errno(fs.open_file("/a/b/f/", &creat()), EISDIR);
    assert_errno(fs.stat("/a/b/f/.."), ENOTDIR);

    // Name and path length limits.
    let n255 = "n".repeat(255);
    let n256 = "n".repeat(256);
    fs.write_file(format!("/a/{n255}"), b"long name").unwrap();
    assert_eq!(fs.read_file(format!("/a/{n255}")).unwrap(), b"long name");
    assert!(names(&fs, "/a").contains(&n255));
    assert_errno(fs.open_file(format!("/a/{n256}"), &creat()), ENAMETOOLONG);
    assert_errno(fs.stat(format!("/a/{n256}")), ENAMETOOLONG);
    assert_errno(fs.stat(format!("/a/{n256}/x")), ENAMETOOLONG);
    assert_errno(fs.mkdir(format!("/{n256}"), 0o755), ENAMETOOLONG);
    assert_errno(fs.symlink("x", format!("/{n256}")), ENAMETOOLONG);
    assert_errno(fs.rename("/a/b/f", format!("/a/{n256}")), ENAMETOOLONG);
    assert_errno(fs.link("/a/b/f", format!("/a/{n256}")), ENAMETOOLONG);
    let p4096 = format!("{}a/b/f", "./".repeat(2045));
    assert_eq!(p4096.len(), 4095);
    assert_eq!(
        fs.read_file(&p4096).unwrap(),
        b"data",
        "a path of 4095 bytes resolves"
    );
    let p4096 = format!("/{p4096}");
    assert_eq!(p4096.len(), 4096);
    assert_errno(fs.stat(&p4096), ENAMETOOLONG);
    assert_errno(fs.open_file(&p4096, &creat()), ENAMETOOLONG);
    assert_errno(fs.mkdir(&p4096, 0o755), ENAMETOOLONG);
    assert_errno(fs.unlink(&p4096), ENAMETOOLONG);

    // Empty paths and NUL bytes.
    assert_errno(fs.stat(""), ENOENT);
    assert_errno(fs.open_file("", &creat()), ENOENT);
    assert_errno(fs.mkdir("", 0o755), ENOENT);
    assert_errno(fs.unlink(""), ENOENT);
    assert_errno(fs.rename("", "/x"), ENOENT);
    assert_errno(fs.rename("/a/b/f", ""), ENOENT);
    assert_errno(fs.stat(b"/a/b\0/f"), EINVAL);
    assert_errno(fs.open_file(b"/x\0y", &creat()), EINVAL);
    assert_errno(fs.mkdir(b"/x\0y", 0o755), EINVAL);
    assert_errno(fs.symlink("t", b"/x\0y"), EINVAL);
    assert!(!names(&fs, "/").iter().any(|n| n.starts_with('x')));
    // Arbitrary non-UTF-8 bytes are fine in names.
    let odd: &[u8] = b"/a/\xff\xfe name \x01";
    fs.write_file(odd, b"odd").unwrap();
    assert_eq!(fs.read_file(odd).unwrap(), b"odd");
    assert!(
        fs.read_dir("/a")
            .unwrap()
            .any(|e| e.unwrap().name == b"\xff\xfe name \x01")
    );
    assert_clean(&fs);
}

#[test]
fn at_functions_resolve_against_a_directory_handle() {
    let (_p, fs) = new_fs("at", 16);
    fs.mkdir("/d", 0o755).unwrap();
    fs.mkdir("/e", 0o755).unwrap();
    let d = fs.open_file("/d", &dir_opts()).unwrap();
    let e = fs.open_file("/e", &dir_opts()).unwrap();

    let f = fs.open_at(Some(&d), b"x", &creat()).unwrap();
    f.write_at(b"at", 0).unwrap();
    drop(f);
    assert_eq!(fs.read_file("/d/x").unwrap(), b"at");
    assert_eq!(
        fs.stat_at(Some(&d), b"x", true).unwrap().ino,
        fs.stat("/d/x").unwrap().ino
    );
    assert_eq!(fs.stat_at(Some(&d), b".", true).unwrap().ino, d.ino());
    assert_eq!(
        fs.stat_at(Some(&d), b"..", true).unwrap().ino,
        fs.stat("/").unwrap().ino
    );
    assert_eq!(fs.stat_at(Some(&d), b"../e", true).unwrap().ino, e.ino());
    // An absolute path ignores the handle.
    assert_eq!(fs.stat_at(Some(&d), b"/e", true).unwrap().ino, e.ino());

    fs.mkdir_at(Some(&d), b"sub", 0o700).unwrap();
    assert_eq!(fs.stat("/d/sub").unwrap().permissions(), 0o700);
    fs.symlink_at(b"x", Some(&d), b"sl").unwrap();
    assert_eq!(fs.readlink_at(Some(&d), b"sl").unwrap(), b"x");
    assert_eq!(
        fs.stat_at(Some(&d), b"sl", true).unwrap().ino,
        fs.stat("/d/x").unwrap().ino
    );
    assert!(fs.stat_at(Some(&d), b"sl", false).unwrap().is_symlink());
    fs.link_at(Some(&d), b"x", Some(&e), b"y", false).unwrap();
    assert_eq!(fs.stat("/e/y").unwrap().nlink, 2);
    // link_at with follow (AT_SYMLINK_FOLLOW) links the target.
    fs.link_at(Some(&d), b"sl", Some(&e), b"z", true).unwrap();
    assert_eq!(fs.stat("/e/z").unwrap().nlink, 3);
    assert!(fs.lstat("/e/z").unwrap().is_file());
    fs.rename_at(Some(&d), b"x", Some(&e), b"moved", 0).unwrap();
    assert_eq!(fs.read_file("/e/moved").unwrap(), b"at");
    fs.chmod_at(Some(&e), b"moved", 0o600, true).unwrap();
    assert_eq!(fs.stat("/e/moved").unwrap().permissions(), 0o600);
    fs.access_at(Some(&e), b"moved", 4 | 2, true).unwrap();
    fs.unlink_at(Some(&e), b"moved", false).unwrap();
    fs.unlink_at(Some(&d), b"sub", true).unwrap();
    assert_errno(fs.unlink_at(Some(&d), b"sl", true), ENOTDIR);
    assert_errno(fs.stat("/d/sub"), ENOENT);
    let rd: Vec<_> = d
        .read_dir()
        .unwrap()
        .map(|e| e.unwrap().name_str().into_owned())
        .collect();
    assert_eq!(rd, [".", "..", "sl"]);

    // The handle follows the directory when it is renamed.
    fs.rename("/d", "/d-renamed").unwrap();
    assert_eq!(fs.readlink_at(Some(&d), b"sl").unwrap(), b"x");
    fs.mkdir_at(Some(&d), b"after", 0o755).unwrap();
    assert!(fs.stat("/d-renamed/after").unwrap().is_dir());
    fs.unlink_at(Some(&d), b"after", true).unwrap();

    // A file handle is not a directory.
    let file = fs.open_file("/e/y", &ro()).unwrap();
    assert_errno(fs.stat_at(Some(&file), b"x", true), ENOTDIR);
    assert_errno(fs.open_at(Some(&file), b"x", &creat()), ENOTDIR);
    assert_errno(file.read_dir(), ENOTDIR);

    // A removed directory still open: lookups in it work, creating in it is ENOENT.
    fs.mkdir("/gone", 0o755).unwrap();
    let gone = fs.open_file("/gone", &dir_opts()).unwrap();
    fs.rmdir("/gone").unwrap();
    assert_eq!(fs.stat_at(Some(&gone), b".", true).unwrap().ino, gone.ino());
    assert_errno(fs.open_at(Some(&gone), b"new", &creat()), ENOENT);
    assert_errno(fs.mkdir_at(Some(&gone), b"new", 0o755), ENOENT);
    drop((d, e, file, gone));
    assert_clean(&fs);
}

// ---------------------------------------------------------------------------------- readdir

#[test]
fn readdir_dots_first_and_every_name_once() {
    let (p, fs) = new_fs("readdir", 64);
    fs.mkdir("/d", 0o755).unwrap();
    let d_ino = fs.stat("/d").unwrap().ino;
    let root = fs.stat("/").unwrap().ino;
    let all: Vec<_> = fs.read_dir("/d").unwrap().map(|e| e.unwrap()).collect();
    assert_eq!(all.len(), 2);
    assert_eq!(
        (all[0].name.as_slice(), all[0].ino, all[0].file_type),
        (&b"."[..], d_ino, libc::DT_DIR)
    );
    assert_eq!(
        (all[1].name.as_slice(), all[1].ino, all[1].file_type),
        (&b".."[..], root, libc::DT_DIR)
    );
    let r: Vec<_> = fs.read_dir("/").unwrap().map(|e| e.unwrap()).collect();
    assert_eq!((r[0].name.as_slice(), r[0].ino), (&b"."[..], root));
    assert_eq!(
        (r[1].name.as_slice(), r[1].ino),
        (&b".."[..], root),
        "the root is its own parent"
    );

    let mut want = BTreeMap::new();
    for i in 0..5000 {
        let name = format!("entry-{i:05}-{}", "x".repeat(i % 70));
        let path = format!("/d/{name}");
        let t = match i % 10 {
            0 => {
                fs.mkdir(&path, 0o755).unwrap();
                libc::DT_DIR
            }
            1 => {
                fs.symlink("target", &path).unwrap();
                libc::DT_LNK
            }
            _ => {
                drop(
                    fs.open_file(&path, &OpenOptions::new().write(true).create_new(true))
                        .unwrap(),
                );
                libc::DT_REG
            }
        };
        want.insert(name.into_bytes(), t);
    }
    let check = |fs: &Fs| {
        let all: Vec<_> = fs.read_dir("/d").unwrap().map(|e| e.unwrap()).collect();
        assert_eq!(all[0].name, b".");
        assert_eq!(all[1].name, b"..");
        let mut got = BTreeMap::new();
        for e in &all[2..] {
            assert!(
                got.insert(e.name.clone(), e.file_type).is_none(),
                "{} returned twice",
                e.name_str()
            );
            let path = [&b"/d/"[..], &e.name].concat();
            assert_eq!(e.ino, fs.lstat(&path).unwrap().ino);
        }
        assert_eq!(got.len(), want.len());
        assert!(got == want, "readdir differs from what was created");
    };
    check(&fs);
    assert_eq!(fs.stat("/d").unwrap().nlink, 2 + 500);
    let fs = remount(&p, fs);
    check(&fs);
    assert_clean(&fs);
}

#[test]
fn readdir_during_changes() {
    let (_p, fs) = new_fs("readdirchg", 32);
    fs.mkdir("/d", 0o755).unwrap();
    let n = 2000;
    for i in 0..n {
        fs.write_file(format!("/d/k{i}"), b"").unwrap();
    }
    // Even names stay throughout; odd names are removed and new ones added while iterating.
    let mut seen = HashSet::new();
    let mut removed = 0;
    let mut added = 0;
    let mut possible: HashSet<String> = (0..n).map(|i| format!("k{i}")).collect();
    for (count, e) in fs.read_dir("/d").unwrap().enumerate() {
        let name = e.unwrap().name_str().into_owned();
        assert!(seen.insert(name.clone()), "{name} returned twice");
        if name != "." && name != ".." {
            assert!(possible.contains(&name), "{name} never existed");
        }
        if count % 3 == 0 && removed < n {
            fs.unlink(format!("/d/k{}", removed + 1)).unwrap();
            removed += 2;
        }
        if count % 2 == 0 {
            let new = format!("new{added}");
            fs.write_file(format!("/d/{new}"), b"").unwrap();
            possible.insert(new);
            added += 1;
        }
    }
    for i in (0..n).step_by(2) {
        assert!(
            seen.contains(&format!("k{i}")),
            "k{i} existed throughout but was not returned"
        );
    }
    assert!(added > 100 && removed > 100);
    assert_clean(&fs);
}

#[test]
fn readdir_seek_to_cookie() {
    let (_p, fs) = new_fs("readdirseek", 16);
    fs.mkdir("/d", 0o755).unwrap();
    for i in 0..300 {
        fs.write_file(format!("/d/f{i}"), b"").unwrap();
    }
    let all: Vec<_> = fs.read_dir("/d").unwrap().map(|e| e.unwrap()).collect();
    assert_eq!(all.len(), 302);
    for k in [0usize, 1, 2, 57, 150, 300, 301] {
        let mut rd = fs.read_dir("/d").unwrap();
        for _ in 0..=k {
            rd.next().unwrap().unwrap();
        }
        assert_eq!(rd.tell(), all[k].cookie);
        let mut again = fs.read_dir("/d").unwrap();
        again.seek(all[k].cookie);
        let rest: Vec<_> = again.map(|e| e.unwrap().name).collect();
        let want: Vec<_> = all[k + 1..].iter().map(|e| e.name.clone()).collect();
        assert_eq!(rest, want, "continuing after entry {k}");
    }
    // Seeking to 0 rewinds.
    let mut rd = fs.read_dir("/d").unwrap();
    rd.by_ref().take(10).for_each(drop);
    rd.seek(0);
    assert_eq!(rd.next().unwrap().unwrap().name, b".");
    // A saved cookie still works after its entry is removed.
    let mut rd = fs.read_dir("/d").unwrap();
    rd.seek(all[100].cookie);
    let name = String::from_utf8(all[100].name.clone()).unwrap();
    fs.unlink(format!("/d/{name}")).unwrap();
    let rest: Vec<_> = rd.map(|e| e.unwrap().name).collect();
    let want: Vec<_> = all[101..].iter().map(|e| e.name.clone()).collect();
    assert_eq!(rest, want);
    assert_clean(&fs);
}

/// Names whose hashes share their first 9 bits land in one slot of the directory trie's
/// root; enough of them force a second level of inner nodes, which readdir must walk fully.
#[test]
fn readdir_deep_trie_returns_every_name() {
    let (_p, fs) = new_fs("readdirdeep", 32);
    fs.mkdir("/d", 0o755).unwrap();
    let mut want = HashSet::new();
    let mut per_slot = BTreeMap::<u64, usize>::new();
    let mut i = 0u64;
    while per_slot.values().sum::<usize>() < 3 * 150 {
        let name = format!("n{i}");
        i += 1;
        let slot = engram_core::dir::name_hash(name.as_bytes()) >> 54;
        if (7..10).contains(&slot) && per_slot.get(&slot).copied().unwrap_or(0) < 150 {
            *per_slot.entry(slot).or_default() += 1;
            fs.write_file(format!("/d/{name}"), b"").unwrap();
            want.insert(name);
        }
    }
    for j in 0..300 {
        let name = format!("spread{j}");
        fs.write_file(format!("/d/{name}"), b"").unwrap();
        want.insert(name);
    }
    let got = names(&fs, "/d");
    let set: HashSet<_> = got.iter().cloned().collect();
    assert_eq!(set.len(), got.len(), "a name was returned twice");
    let missing: Vec<_> = want.difference(&set).collect();
    assert!(
        missing.is_empty(),
        "{} of {} names missing, e.g. {:?}",
        missing.len(),
        want.len(),
        &missing[..3.min(missing.len())]
    );
    assert_clean(&fs);
}

// ---------------------------------------------------------------------------------- data

#[test]
fn data_odd_offsets_and_lengths() {
    let (p, fs) = new_fs("data", 64);
    let f = fs.open_file("/f", &creat()).unwrap();
    let mut model: Vec<u8> = Vec::new();
    let sizes = [1u64, 4095, 4096, 4097, MIB + 17];
    let mut seed = 0;
    for &off in &[0u64, 1, 4095, 4096, 4097, MIB + 17, 3 * MIB - 1] {
        for &len in &sizes {
            seed += 1;
            let data = pattern(seed, len as usize);
            assert_eq!(f.write_at(&data, off).unwrap(), len as usize);
            let end = (off + len) as usize;
            if model.len() < end {
                model.resize(end, 0);
            }
            model[off as usize..end].copy_from_slice(&data);
            // Read back the written range with a little on either side.
            let lo = off.saturating_sub(3);
            let mut buf = vec![0u8; (len + 6) as usize];
            let n = f.read_at(&mut buf, lo).unwrap();
            let want_end = (lo as usize + buf.len()).min(model.len());
            assert_eq!(n, want_end - lo as usize);
            assert!(
                buf[..n] == model[lo as usize..want_end],
                "write of {len} at {off}"
            );
        }
    }
    // One write larger than the engine's atomic step (8 MiB).
    let huge = pattern(999, (9 * MIB + 5) as usize);
    assert_eq!(f.write_at(&huge, 3).unwrap(), huge.len());
    if model.len() < huge.len() + 3 {
        model.resize(huge.len() + 3, 0);
    }
    model[3..3 + huge.len()].copy_from_slice(&huge);
    assert_eq!(f.metadata().unwrap().size, model.len() as u64);
    // pread at odd places.
    for &off in &[
        0u64,
        1,
        4095,
        4096,
        4097,
        8191,
        MIB + 17,
        model.len() as u64 - 1,
    ] {
        for &len in &[1usize, 4095, 4096, 4097, 10_000] {
            let mut buf = vec![0u8; len];
            let n = f.read_at(&mut buf, off).unwrap();
            let want_end = (off as usize + len).min(model.len());
            assert_eq!(n, want_end - off as usize);
            assert!(
                buf[..n] == model[off as usize..want_end],
                "read of {len} at {off}"
            );
        }
    }
    let mut buf = [0u8; 8];
    assert_eq!(f.read_at(&mut buf, model.len() as u64).unwrap(), 0);
    assert_eq!(f.read_at(&mut buf, model.len() as u64 + 5000).unwrap(), 0);
    assert_eq!(f.write_at(b"", 99 * MIB).unwrap(), 0);
    assert_eq!(
        f.metadata().unwrap().size,
        model.len() as u64,
        "an empty write does not extend"
    );
    drop(f);
    assert!(fs.read_file("/f").unwrap() == model);
    let fs = remount(&p, fs);
    assert!(fs.read_file("/f").unwrap() == model);
    assert_clean(&fs);
}

#[test]
fn sparse_files() {
    let (p, fs) = new_fs("sparse", 16);
    let f = fs.open_file("/s", &creat()).unwrap();
    f.write_at(b"head", 0).unwrap();
    f.write_at(b"tail", 100 * MIB).unwrap();
    f.write_at(b"mid", 40 * MIB + 4094).unwrap(); // straddles a page boundary
    let m = f.metadata().unwrap();
    assert_eq!(m.size, 100 * MIB + 4);
    assert_eq!(m.blocks, 4 * 8);
    let mut buf = vec![0xEEu8; 3 * 4096];
    f.read_at(&mut buf, 40 * MIB - 4096).unwrap();
    assert!(buf[..2 * 4096 - 2].iter().all(|&b| b == 0));
    assert_eq!(&buf[2 * 4096 - 2..2 * 4096 + 1], b"mid");
    assert!(buf[2 * 4096 + 1..].iter().all(|&b| b == 0));
    let mut buf = vec![0xEEu8; 8];
    f.read_at(&mut buf, 100 * MIB - 4).unwrap();
    assert_eq!(&buf, b"\0\0\0\0tail");
    // Far offsets need a taller file index: 1 GiB, 600 GiB, 200 TiB.
    for (k, off) in [1u64 << 30, 600 << 30, 200 << 40].into_iter().enumerate() {
        let tag = format!("far{k}");
        f.write_at(tag.as_bytes(), off).unwrap();
        let mut buf = [0u8; 4];
        f.read_at(&mut buf, off).unwrap();
        assert_eq!(&buf, tag.as_bytes());
        assert_eq!(f.metadata().unwrap().size, off + 4);
    }
    let mut buf = [0xEEu8; 4];
    assert_eq!(f.read_at(&mut buf, 100 << 40).unwrap(), 4);
    assert_eq!(buf, [0; 4]);
    assert_eq!(f.metadata().unwrap().blocks, 7 * 8);
    assert_clean(&fs);
    // Shrinking back frees the far pages (and the index nodes above them).
    f.set_len(100 * MIB + 4).unwrap();
    assert_eq!(f.metadata().unwrap().blocks, 4 * 8);
    assert_clean(&fs);

    // Filling a hole keeps the neighbours.
    f.write_at(b"fill", 5 * MIB).unwrap();
    assert_eq!(f.metadata().unwrap().blocks, 5 * 8);
    drop(f);
    let fs = remount(&p, fs);
    let f = fs.open_file("/s", &ro()).unwrap();
    let mut buf = [0u8; 4];
    f.read_at(&mut buf, 5 * MIB).unwrap();
    assert_eq!(&buf, b"fill");
    f.read_at(&mut buf, 0).unwrap();
    assert_eq!(&buf, b"head");
    f.read_at(&mut buf, 50 * MIB).unwrap();
    assert_eq!(&buf, &[0; 4]);
    drop(f);
    assert_clean(&fs);
}

#[test]
fn fallocate_modes() {
    let (p, fs) = new_fs("fallocate", 32);
    let f = fs.open_file("/f", &creat()).unwrap();
    f.allocate(0, MIB, false).unwrap();
    let m = f.metadata().unwrap();
    assert_eq!(m.size, MIB, "mode 0 extends the size");
    assert_eq!(m.blocks, MIB / 512);
    let mut buf = vec![1u8; MIB as usize];
    assert_eq!(f.read_at(&mut buf, 0).unwrap(), MIB as usize);
    assert!(buf.iter().all(|&b| b == 0));

    f.allocate(MIB, MIB, true).unwrap();
    let m = f.metadata().unwrap();
    assert_eq!(m.size, MIB, "FALLOC_FL_KEEP_SIZE keeps the size");
    assert_eq!(m.blocks, 2 * MIB / 512, "but the blocks grow");

    // Allocating over data keeps it; allocating what is there already adds nothing.
    f.write_at(b"keep me", 4000).unwrap();
    f.allocate(0, 2 * MIB, false).unwrap();
    let m = f.metadata().unwrap();
    assert_eq!(m.size, 2 * MIB);
    assert_eq!(m.blocks, 2 * MIB / 512);
    let mut buf = [0u8; 7];
    f.read_at(&mut buf, 4000).unwrap();
    assert_eq!(&buf, b"keep me");
    // An unaligned range beyond the end.
    f.allocate(3 * MIB + 100, 10, false).unwrap();
    assert_eq!(f.metadata().unwrap().size, 3 * MIB + 110);
    assert_eq!(f.metadata().unwrap().blocks, (2 * MIB + 4096) / 512);
    assert_errno(f.allocate(0, 0, false), EINVAL);
    // Writing into pre-allocated space beyond the end.
    f.allocate(4 * MIB, MIB, true).unwrap();
    f.write_at(b"later", 4 * MIB + 10).unwrap();
    let mut buf = vec![9u8; 15];
    f.read_at(&mut buf, 4 * MIB).unwrap();
    assert_eq!(&buf, b"\0\0\0\0\0\0\0\0\0\0later");
    let blocks = f.metadata().unwrap().blocks;
    drop(f);
    let ro_f = fs.open_file("/f", &ro()).unwrap();
    assert_errno(ro_f.allocate(0, 4096, false), EBADF);
    drop(ro_f);
    let fs = remount(&p, fs);
    assert_eq!(fs.stat("/f").unwrap().blocks, blocks);
    assert_eq!(fs.stat("/f").unwrap().size, 4 * MIB + 15);
    assert_clean(&fs);
}

#[test]
fn std_io_traits() {
    let (_p, fs) = new_fs("io", 16);
    let mut f = fs.open_file("/f", &creat()).unwrap();
    f.write_all(b"hello, ").unwrap();
    write!(f, "world {}", 42).unwrap();
    f.flush().unwrap();
    assert_eq!(f.stream_position().unwrap(), 15);
    f.rewind().unwrap();
    let mut s = String::new();
    f.read_to_string(&mut s).unwrap();
    assert_eq!(s, "hello, world 42");
    assert_eq!(f.seek(SeekFrom::End(-2)).unwrap(), 13);
    let mut two = [0u8; 2];
    f.read_exact(&mut two).unwrap();
    assert_eq!(&two, b"42");
    assert_eq!(f.seek(SeekFrom::Current(-8)).unwrap(), 7);
    let mut five = [0u8; 5];
    f.read_exact(&mut five).unwrap();
    assert_eq!(&five, b"world");
    assert!(f.seek(SeekFrom::Current(-100)).is_err());
    assert_eq!(
        f.stream_position().unwrap(),
        12,
        "a failed seek leaves the offset"
    );
    // Seeking past the end and writing leaves a hole.
    f.seek(SeekFrom::End(10)).unwrap();
    f.write_all(b"!").unwrap();
    let mut all = Vec::new();
    f.rewind().unwrap();
    f.read_to_end(&mut all).unwrap();
    assert_eq!(all, b"hello, world 42\0\0\0\0\0\0\0\0\0\0!");
    // A clone shares the offset; std::io::copy works between files.
    let mut g = f.try_clone().unwrap();
    g.seek(SeekFrom::Start(7)).unwrap();
    assert_eq!(f.stream_position().unwrap(), 7);
    let mut out = fs.open_file("/copy", &creat()).unwrap();
    let big = pattern(3, 300_000);
    out.write_all(&big).unwrap();
    out.rewind().unwrap();
    let mut dst = fs.open_file("/copy2", &creat()).unwrap();
    assert_eq!(std::io::copy(&mut out, &mut dst).unwrap(), big.len() as u64);
    drop((f, g, out, dst));
    assert!(fs.read_file("/copy2").unwrap() == big);
    // Read returns 0 at the end; short reads at the end.
    let mut f = fs.open_file("/copy2", &ro()).unwrap();
    f.seek(SeekFrom::Start(big.len() as u64 - 3)).unwrap();
    let mut buf = [0u8; 10];
    assert_eq!(f.read(&mut buf).unwrap(), 3);
    assert_eq!(f.read(&mut buf).unwrap(), 0);
    let e = f.write(b"x").unwrap_err();
    assert_eq!(e.raw_os_error(), Some(EBADF));
    drop(f);
    assert_clean(&fs);
}

/// Free pages as statfs reports them, after giving the client's reservation back.
fn free_blocks(fs: &Fs) -> u64 {
    // fsck returns reserved pages to the server first, so the number is comparable.
    assert_clean(fs);
    fs.statfs().unwrap().blocks_free
}

#[test]
fn unlinked_open_file_lives_until_closed() {
    let p = PoolFile::new("orphan");
    let fs = p.mkfs_open(32 * MIB);
    let files_free0 = fs.statfs().unwrap().files_free;
    let f = fs.open_file("/f", &creat()).unwrap();
    let data = pattern(11, (2 * MIB) as usize);
    f.write_at(&data, 0).unwrap();
    let g = fs.open_file("/f", &ro()).unwrap();
    fs.unlink("/f").unwrap();
    assert_errno(fs.stat("/f"), ENOENT);
    assert!(names(&fs, "/").is_empty());
    assert_eq!(f.metadata().unwrap().nlink, 0);
    // Still readable and writable through both handles.
    let mut buf = vec![0u8; data.len()];
    assert_eq!(g.read_at(&mut buf, 0).unwrap(), data.len());
    assert!(buf == data);
    f.write_at(b"more", 2 * MIB).unwrap();
    let mut tail = [0u8; 4];
    g.read_at(&mut tail, 2 * MIB).unwrap();
    assert_eq!(&tail, b"more");
    f.set_len(MIB).unwrap();
    assert_eq!(g.metadata().unwrap().size, MIB);
    // A new file with the same name is a different file.
    fs.write_file("/f", b"new").unwrap();
    assert_ne!(fs.stat("/f").unwrap().ino, f.ino());
    fs.unlink("/f").unwrap();
    drop(f);
    drop(g);
    assert_clean(&fs);

    // An orphan still open at unmount is gone after the next mount.
    let f = fs.open_file("/o", &creat()).unwrap();
    f.write_at(&data, 0).unwrap();
    fs.unlink("/o").unwrap();
    fs.unmount().unwrap();
    drop(f);
    let fs = p.open();
    assert!(fs.mount_info().was_clean);
    assert!(names(&fs, "/").is_empty());
    assert_eq!(fs.statfs().unwrap().files_free, files_free0);
    assert_eq!(
        free_blocks(&fs),
        fs.statfs().unwrap().blocks,
        "every data page is free again"
    );
    assert_clean(&fs);
}

#[test]
fn unlinked_open_file_space_comes_back_after_close() {
    let (_p, fs) = new_fs("orphanspace", 32);
    let f = fs.open_file("/f", &creat()).unwrap();
    f.write_at(&pattern(12, (2 * MIB) as usize), 0).unwrap();
    fs.unlink("/f").unwrap();
    let held = free_blocks(&fs);
    drop(f);
    let freed = free_blocks(&fs);
    assert!(
        freed >= held + 512,
        "space of the closed orphan comes back: {held} -> {freed}"
    );
}

// ---------------------------------------------------------------------------------- permissions

#[test]
fn permissions_for_a_non_root_user() {
    let (_p, fs) = new_fs("perm", 16);
    let alice = user(&fs, 1000);
    let bob = user(&fs, 1001);
    fs.write_file("/secret", b"s").unwrap();
    fs.chmod("/secret", 0o600).unwrap();
    fs.mkdir("/rootdir", 0o755).unwrap();
    fs.write_file("/rootdir/existing", b"e").unwrap();

    // Reading and writing a root-owned 0600 file.
    assert_errno(alice.open_file("/secret", &ro()), EACCES);
    assert_errno(
        alice.open_file("/secret", &OpenOptions::new().write(true)),
        EACCES,
    );
    assert_errno(alice.read_file("/secret"), EACCES);
    assert_errno(alice.truncate("/secret", 0), EACCES);
    assert_eq!(
        alice.stat("/secret").unwrap().size,
        1,
        "stat needs no permission on the file"
    );
    // Creating in, and removing from, a 0755 root directory.
    assert_errno(alice.open_file("/rootdir/x", &creat()), EACCES);
    assert_errno(alice.mkdir("/rootdir/x", 0o755), EACCES);
    assert_errno(alice.symlink("t", "/rootdir/x"), EACCES);
    assert_errno(alice.unlink("/rootdir/existing"), EACCES);
    assert_errno(alice.rename("/rootdir/existing", "/rootdir/y"), EACCES);
    assert_errno(alice.write_file("/x", b""), EACCES);
    assert_eq!(names(&alice, "/rootdir"), ["existing"]);
    assert_eq!(alice.read_file("/rootdir/existing").unwrap(), b"e");
    // Attributes of someone else's file.
    assert_errno(alice.chmod("/secret", 0o644), EPERM);
    assert_errno(alice.chown("/secret", Some(1000), None), EPERM);
    assert_errno(
        alice.utimens("/secret", Some(SetTime::Ns(1)), Some(SetTime::Ns(1))),
        EPERM,
    );
    assert_errno(
        alice.utimens("/secret", Some(SetTime::Now), Some(SetTime::Now)),
        EACCES,
    );
    assert_eq!(fs.stat("/secret").unwrap().permissions(), 0o600);
    // Search permission on a directory.
    fs.mkdir("/private", 0o700).unwrap();
    fs.write_file("/private/x", b"").unwrap();
    assert_errno(alice.stat("/private/x"), EACCES);
    assert_errno(alice.read_dir("/private"), EACCES);
    let private = fs.stat("/private").unwrap();
    let private = alice.handle_of(private.ino).unwrap();
    assert_errno(alice.lookup_in(private, b"x"), EACCES);
    assert!(
        fs.lookup_in(private, b"x").is_ok(),
        "root may search any directory"
    );
    // Group permission.
    fs.write_file("/group", b"g").unwrap();
    fs.chown("/group", None, Some(1000)).unwrap();
    fs.chmod("/group", 0o640).unwrap();
    assert_eq!(alice.read_file("/group").unwrap(), b"g");
    assert_errno(alice.open_file("/group", &rw()), EACCES);
    assert_errno(bob.read_file("/group"), EACCES);
    let carol = fs.with_creds(Creds {
        uid: 1002,
        gid: 1002,
        groups: vec![1000],
    });
    assert_eq!(carol.read_file("/group").unwrap(), b"g");

    // Root may not execute what nobody may execute, but may write anything.
    fs.write_file("/plain", b"").unwrap();
    fs.chmod("/plain", 0o444).unwrap();
    assert_errno(fs.access_at(None, b"/plain", 1, true), EACCES);
    fs.access_at(None, b"/plain", 2, true).unwrap();
    assert_errno(alice.access_at(None, b"/plain", 2, true), EACCES);
    alice.access_at(None, b"/plain", 4, true).unwrap();

    // Set-group-ID directory: new entries take its group, new directories its bit.
    fs.mkdir("/sg", 0o777).unwrap();
    fs.chown("/sg", None, Some(500)).unwrap();
    fs.chmod("/sg", 0o2777).unwrap();
    let alice_g = fs.with_creds(Creds {
        uid: 1000,
        gid: 1000,
        groups: vec![1000],
    });
    drop(alice_g.open_file("/sg/file", &creat().mode(0o644)).unwrap());
    alice_g.mkdir("/sg/dir", 0o755).unwrap();
    let m = fs.stat("/sg/file").unwrap();
    assert_eq!((m.uid, m.gid, m.permissions()), (1000, 500, 0o644));
    let m = fs.stat("/sg/dir").unwrap();
    assert_eq!((m.uid, m.gid, m.permissions()), (1000, 500, 0o2755));
    // chmod by an owner outside the file's group drops set-group-ID.
    alice_g.chmod("/sg/file", 0o2755).unwrap();
    assert_eq!(fs.stat("/sg/file").unwrap().permissions(), 0o755);
    // chown by the owner: only to a group of theirs, never to another user.
    alice_g.chown("/sg/file", None, Some(1000)).unwrap();
    assert_errno(alice_g.chown("/sg/file", None, Some(5)), EPERM);
    assert_errno(alice_g.chown("/sg/file", Some(1001), None), EPERM);
    alice_g.chown("/sg/file", Some(1000), None).unwrap();
    alice_g.chmod("/sg/file", 0o2755).unwrap();
    assert_eq!(fs.stat("/sg/file").unwrap().permissions(), 0o2755);
    assert_eq!(fs.stat("/sg/file").unwrap().gid, 1000);

    // Sticky world-writable directory.
    fs.mkdir("/tmp", 0o777).unwrap();
    fs.chmod("/tmp", 0o1777).unwrap();
    fs.write_file("/tmp/rootfile", b"r").unwrap();
    assert_errno(alice.unlink("/tmp/rootfile"), EPERM);
    assert_errno(alice.rename("/tmp/rootfile", "/tmp/zz"), EPERM);
    let f = alice.open_file("/tmp/mine", &creat().mode(0o644)).unwrap();
    f.write_at(b"alice", 0).unwrap();
    drop(f);
    let m = fs.stat("/tmp/mine").unwrap();
    assert_eq!((m.uid, m.gid), (1000, 1000));
    assert_errno(bob.unlink("/tmp/mine"), EPERM);
    assert_errno(bob.open_file("/tmp/mine", &rw()), EACCES);
    alice.chmod("/tmp/mine", 0o600).unwrap();
    alice.rename("/tmp/mine", "/tmp/mine2").unwrap();
    assert_errno(alice.rename("/tmp/mine2", "/tmp/rootfile"), EPERM);
    alice.unlink("/tmp/mine2").unwrap();
    alice.mkdir("/tmp/adir", 0o755).unwrap();
    assert_errno(bob.rmdir("/tmp/adir"), EPERM);
    alice.rmdir("/tmp/adir").unwrap();
    fs.unlink("/tmp/rootfile").unwrap(); // root may
    assert!(names(&fs, "/tmp").is_empty());
    assert_clean(&fs);
}

// ---------------------------------------------------------------------------------- persistence

#[derive(Debug, PartialEq)]
struct Snap {
    meta: Metadata,
    content: Vec<u8>,
}

fn snapshot(fs: &Fs, dir: &str, out: &mut BTreeMap<String, Snap>) {
    for e in fs.read_dir(if dir.is_empty() { "/" } else { dir }).unwrap() {
        let e = e.unwrap();
        if e.name == b"." || e.name == b".." {
            continue;
        }
        let path = format!("{dir}/{}", e.name_str());
        let mut meta = fs.lstat(&path).unwrap();
        meta.atime_ns = 0;
        let content = if meta.is_symlink() {
            fs.readlink(&path).unwrap()
        } else if meta.is_file() {
            fs.read_file(&path).unwrap()
        } else {
            Vec::new()
        };
        let is_dir = meta.is_dir();
        out.insert(path.clone(), Snap { meta, content });
        if is_dir {
            snapshot(fs, &path, out);
        }
    }
}

#[test]
fn everything_persists_across_remount() {
    let (p, fs) = new_fs("persist", 64);
    fs.mkdir("/a", 0o750).unwrap();
    fs.mkdir("/a/b", 0o700).unwrap();
    fs.mkdir("/a/b/c", 0o755).unwrap();
    for (i, len) in [0usize, 1, 4095, 4096, 4097, (MIB + 17) as usize]
        .into_iter()
        .enumerate()
    {
        fs.write_file(format!("/a/f{i}"), &pattern(100 + i as u64, len))
            .unwrap();
    }
    let f = fs.open_file("/a/b/sparse", &creat()).unwrap();
    f.write_at(b"x", 7 * MIB + 3).unwrap();
    f.allocate(MIB, 8192, true).unwrap();
    drop(f);
    fs.symlink("../f1", "/a/b/link").unwrap();
    fs.symlink("z".repeat(3000), "/a/longlink").unwrap();
    fs.link("/a/f2", "/a/b/c/hard").unwrap();
    fs.chown("/a/f3", Some(5), Some(6)).unwrap();
    fs.chmod("/a/f4", 0o2640).unwrap();
    fs.utimens(
        "/a/f5",
        Some(SetTime::Ns(123_456_789)),
        Some(SetTime::Ns(987_654_321)),
    )
    .unwrap();
    fs.rename("/a/f0", "/a/b/c/renamed").unwrap();
    fs.mkdir("/gone", 0o755).unwrap();
    fs.write_file("/gone/x", b"x").unwrap();
    fs.unlink("/gone/x").unwrap();
    fs.rmdir("/gone").unwrap();
    for i in 0..200 {
        fs.write_file(format!("/a/b/many{i}"), format!("{i}").as_bytes())
            .unwrap();
    }
    for i in (0..200).step_by(3) {
        fs.unlink(format!("/a/b/many{i}")).unwrap();
    }
    let append = fs
        .open_file(
            "/a/appended",
            &OpenOptions::new().write(true).append(true).create(true),
        )
        .unwrap();
    for i in 0..100 {
        append.write_next(format!("line {i}\n").as_bytes()).unwrap();
    }
    drop(append);
    let mut before = BTreeMap::new();
    snapshot(&fs, "", &mut before);
    assert_eq!(before.len(), 3 + 5 + 1 + 1 + 1 + 1 + 1 + 133 + 1);
    assert_clean(&fs);
    let fs = remount(&p, fs);
    let mut after = BTreeMap::new();
    snapshot(&fs, "", &mut after);
    assert_eq!(
        before.keys().collect::<Vec<_>>(),
        after.keys().collect::<Vec<_>>()
    );
    for (k, v) in &before {
        assert!(
            after[k] == *v,
            "{k} differs after remount: {:?} vs {:?}",
            v.meta,
            after[k].meta
        );
    }
    assert_eq!(fs.stat("/").unwrap().nlink, 3);
    assert_clean(&fs);
    // And a second cycle, after changing something.
    fs.write_file("/a/f1", b"changed").unwrap();
    let fs = remount(&p, fs);
    assert_eq!(fs.read_file("/a/b/link").unwrap(), b"changed");
    assert_clean(&fs);
}

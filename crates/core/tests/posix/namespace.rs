//! Names: mkdir, rmdir, unlink, rename (and its flags), hard links and symlinks.

use super::{names, ro, rw, sorted, tick};
use crate::common::{assert_clean, assert_errno, new_fs, remount};
use engram_core::{Fs, RENAME_EXCHANGE, RENAME_NOREPLACE};
use libc::{EBUSY, EEXIST, EINVAL, EISDIR, ELOOP, ENAMETOOLONG, ENOENT, ENOTDIR, ENOTEMPTY, EPERM};
use std::collections::BTreeMap;

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

/// A directory removed while held (a process's current directory) stays, empty and without
/// links, and so does the parent it had, also once that is removed too: `..` leads there,
/// as Linux keeps a removed directory's d_parent. Nothing can be made in either; both go
/// when the hold is dropped (or at unmount). A directory replaced by a rename is removed
/// the same way.
#[test]
fn a_removed_directory_in_use_keeps_its_parent() {
    let (p, fs) = new_fs("removedheld", 16);
    let handle = |path: &str| fs.handle_of(fs.stat(path).unwrap().ino).unwrap();
    let files_free = fs.statfs().unwrap().files_free;
    fs.mkdir("/a", 0o755).unwrap();
    fs.mkdir("/a/p", 0o755).unwrap();
    fs.mkdir("/a/p/c", 0o755).unwrap();
    let (a, ph) = (handle("/a"), handle("/a/p"));
    let c = fs.hold_dir(handle("/a/p/c")).unwrap();
    fs.rmdir("/a/p/c").unwrap();
    fs.rmdir("/a/p").unwrap();
    assert_errno(fs.stat("/a/p"), ENOENT);
    let m = fs.stat_handle(c.handle()).unwrap();
    assert!(m.is_dir() && m.nlink == 0);
    let (up, um) = fs.lookup_in(c.handle(), b"..").unwrap();
    assert_eq!((up, um.nlink), (ph, 0));
    assert_eq!(fs.lookup_in(ph, b"..").unwrap().0, a);
    assert_errno(fs.mkdir_in(c.handle(), b"x", 0o755), ENOENT);
    assert_errno(fs.create_in(ph, b"x", 0o644, false), ENOENT);
    assert_errno(fs.lookup_in(c.handle(), b"x"), ENOENT);
    assert_clean(&fs);
    drop(c);
    assert_errno(fs.stat_handle(ph), libc::ESTALE);
    assert_eq!(fs.stat("/a").unwrap().nlink, 2);

    // Replaced by a rename: /b/t's directory stays, and keeps /b once that is removed.
    fs.mkdir("/b", 0o755).unwrap();
    fs.mkdir("/b/t", 0o755).unwrap();
    fs.mkdir("/b/s", 0o755).unwrap();
    let b = handle("/b");
    let t = fs.hold_dir(handle("/b/t")).unwrap();
    fs.rename("/b/s", "/b/t").unwrap();
    fs.rename("/b/t", "/s").unwrap();
    fs.rmdir("/b").unwrap();
    assert_eq!(fs.stat_handle(t.handle()).unwrap().nlink, 0);
    assert_eq!(fs.lookup_in(t.handle(), b"..").unwrap().0, b);
    assert_clean(&fs);
    // Still held at unmount: both are freed there.
    fs.unmount().unwrap();
    drop(t);
    let fs = p.open();
    assert!(fs.mount_info().was_clean);
    fs.rmdir("/s").unwrap();
    fs.rmdir("/a").unwrap();
    assert_eq!(fs.statfs().unwrap().files_free, files_free);
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

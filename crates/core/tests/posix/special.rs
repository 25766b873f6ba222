//! Special files: FIFOs, sockets, character and block devices made by mknod, as tmpfs has
//! them (checked there with mknod(2), stat(2), getdents64(2), open(2) and truncate(2)).

use super::{creat, names, ro, rw, sorted, user};
use crate::common::{assert_clean, assert_errno, new_fs, remount};
use engram_core::{Fs, Opened, SetAttr, SetTime};
use libc::{EACCES, EEXIST, EINVAL, ENOENT, ENOTDIR, ENXIO, EOPNOTSUPP, EPERM};
use libc::{S_IFBLK, S_IFCHR, S_IFDIR, S_IFIFO, S_IFMT, S_IFREG, S_IFSOCK};
use std::collections::BTreeMap;

const NULL: u64 = libc::makedev(1, 3);
const SDA: u64 = libc::makedev(8, 0);
/// The widest number the system call takes: major 4095, minor 2^20 - 1.
const WIDEST: u64 = libc::makedev(4095, 0xF_FFFF);

#[test]
fn each_type_is_made_listed_and_kept() {
    let (p, fs) = new_fs("special", 16);
    fs.mkdir("/d", 0o755).unwrap();
    fs.mknod("/d/fifo", S_IFIFO | 0o640, 0).unwrap();
    // Linux keeps no number for a socket or a FIFO, whatever the caller passed.
    fs.mknod("/d/sock", S_IFSOCK | 0o755, 7).unwrap();
    fs.mknod("/d/null", S_IFCHR | 0o666, NULL).unwrap();
    fs.mknod("/d/sda", S_IFBLK | 0o660, SDA).unwrap();
    fs.mknod("/d/widest", S_IFCHR | 0o600, WIDEST).unwrap();
    fs.mknod("/d/reg", S_IFREG | 0o644, 99).unwrap();
    // Type 0 is a regular file.
    fs.mknod("/d/zero", 0o600, 0).unwrap();
    let check = |fs: &Fs| {
        for (name, kind, perm, rdev) in [
            ("fifo", S_IFIFO, 0o640, 0),
            ("sock", S_IFSOCK, 0o755, 0),
            ("null", S_IFCHR, 0o666, NULL),
            ("sda", S_IFBLK, 0o660, SDA),
            ("widest", S_IFCHR, 0o600, WIDEST),
            ("reg", S_IFREG, 0o644, 0),
            ("zero", S_IFREG, 0o600, 0),
        ] {
            let m = fs.lstat(format!("/d/{name}")).unwrap();
            assert_eq!(
                (m.mode, m.rdev, m.size, m.blocks, m.nlink, m.uid),
                (kind | perm, rdev, 0, 0, 1, 0),
                "{name}"
            );
        }
        let widest = fs.lstat("/d/widest").unwrap().rdev;
        assert_eq!((libc::major(widest), libc::minor(widest)), (4095, 0xF_FFFF));
        let m = fs.lstat("/d/fifo").unwrap();
        assert!(m.is_fifo() && !m.is_file() && !m.is_device() && !m.is_socket());
        assert!(fs.lstat("/d/sock").unwrap().is_socket());
        assert!(fs.lstat("/d/sda").unwrap().is_device());
        let types: BTreeMap<String, u8> = fs
            .read_dir("/d")
            .unwrap()
            .map(|e| e.unwrap())
            .map(|e| (e.name_str().into_owned(), e.file_type))
            .collect();
        let want: BTreeMap<String, u8> = [
            (".", libc::DT_DIR),
            ("..", libc::DT_DIR),
            ("fifo", libc::DT_FIFO),
            ("sock", libc::DT_SOCK),
            ("null", libc::DT_CHR),
            ("sda", libc::DT_BLK),
            ("widest", libc::DT_CHR),
            ("reg", libc::DT_REG),
            ("zero", libc::DT_REG),
        ]
        .into_iter()
        .map(|(n, t)| (n.to_string(), t))
        .collect();
        assert_eq!(types, want);
        assert_eq!(fs.stat("/d").unwrap().size, 7);
        let r = fs.fsck(false).unwrap();
        assert!(r.is_clean(), "{:?}", r.problems);
        assert_eq!((r.files, r.specials, r.dirs), (2, 5, 2));
    };
    check(&fs);
    let fs = remount(&p, fs);
    check(&fs);
    // Gone with its last name, and its inode with it.
    let free = fs.statfs().unwrap().files_free;
    for name in ["fifo", "sock", "null", "sda", "widest"] {
        fs.unlink(format!("/d/{name}")).unwrap();
    }
    assert_eq!(sorted(names(&fs, "/d")), ["reg", "zero"]);
    assert_eq!(fs.statfs().unwrap().files_free, free + 5);
    assert_clean(&fs);
}

#[test]
fn mknod_refuses_as_linux_does() {
    let (_p, fs) = new_fs("mknod-errors", 16);
    fs.mkdir("/d", 0o755).unwrap();
    fs.mknod("/d/fifo", S_IFIFO | 0o644, 0).unwrap();
    // A name that exists, whatever the type asked for.
    assert_errno(fs.mknod("/d/fifo", S_IFIFO | 0o644, 0), EEXIST);
    assert_errno(fs.mknod("/d/fifo", 0o644, 0), EEXIST);
    assert_errno(fs.mknod("/d", S_IFCHR | 0o644, NULL), EEXIST);
    assert_errno(fs.mknod("/", S_IFIFO | 0o644, 0), EEXIST);
    assert_errno(fs.mknod("/d/fifo/", S_IFIFO | 0o644, 0), EEXIST);
    // The type is refused before the path is looked at: a directory is mkdir's, a type
    // that does not exist, or a number wider than the system call's 32 bits, EINVAL.
    assert_errno(fs.mknod("/d/fifo", S_IFDIR | 0o755, 0), EPERM);
    assert_errno(fs.mknod("/missing/x", S_IFMT | 0o644, 0), EINVAL);
    assert_errno(fs.mknod("/d/x", 0o050000 | 0o644, 0), EINVAL);
    assert_errno(fs.mknod("/d/x", S_IFCHR | 0o644, 1 << 32), EINVAL);
    assert_errno(fs.mknod("/d/x", S_IFIFO | 0o644, 1 << 32), EINVAL);
    // Then the path.
    assert_errno(fs.mknod("/missing/x", S_IFIFO | 0o644, 0), ENOENT);
    assert_errno(fs.mknod("/d/fifo/x", S_IFIFO | 0o644, 0), ENOTDIR);
    assert_errno(fs.mknod("/d/new/", S_IFIFO | 0o644, 0), ENOENT);
    // Not root: FIFOs and sockets where the user may write, devices nowhere (EPERM, as
    // Linux without CAP_MKNOD), and nothing where the user may not write (EACCES first).
    fs.mkdir("/open", 0o777).unwrap();
    let alice = user(&fs, 1000);
    alice.mknod("/open/fifo", S_IFIFO | 0o600, 0).unwrap();
    alice.mknod("/open/sock", S_IFSOCK | 0o600, 0).unwrap();
    assert_eq!(fs.lstat("/open/fifo").unwrap().uid, 1000);
    assert_errno(alice.mknod("/open/null", S_IFCHR | 0o666, NULL), EPERM);
    assert_errno(alice.mknod("/open/sda", S_IFBLK | 0o660, SDA), EPERM);
    assert_errno(alice.mknod("/d/null", S_IFCHR | 0o666, NULL), EACCES);
    assert_errno(alice.mknod("/d/fifo2", S_IFIFO | 0o666, 0), EACCES);
    assert_eq!(sorted(names(&fs, "/open")), ["fifo", "sock"]);
    assert_eq!(names(&fs, "/d"), ["fifo"]);
    assert_clean(&fs);
}

#[test]
fn special_files_are_not_opened_for_io_nor_truncated() {
    let (_p, fs) = new_fs("special-open", 16);
    fs.mknod("/fifo", S_IFIFO | 0o644, 0).unwrap();
    fs.mknod("/sock", S_IFSOCK | 0o644, 0).unwrap();
    fs.mknod("/null", S_IFCHR | 0o666, NULL).unwrap();
    fs.symlink("fifo", "/link").unwrap();
    // The API has no pipe and no driver: a FIFO or device is EOPNOTSUPP, a socket ENXIO
    // (Linux's answer to opening one).
    for opts in [ro(), rw(), creat()] {
        assert_errno(fs.open_file("/fifo", &opts), EOPNOTSUPP);
        assert_errno(fs.open_file("/link", &opts), EOPNOTSUPP);
        assert_errno(fs.open_file("/null", &opts), EOPNOTSUPP);
        assert_errno(fs.open_file("/sock", &opts), ENXIO);
    }
    assert_errno(fs.read_file("/fifo"), EOPNOTSUPP);
    assert_errno(fs.open_file("/fifo", &creat().create_new(true)), EEXIST);
    assert_errno(fs.open_file("/fifo", &ro().directory(true)), ENOTDIR);
    let h = fs.handle_of(fs.stat("/fifo").unwrap().ino).unwrap();
    assert_errno(fs.open_handle(h, &ro()), EOPNOTSUPP);
    // `open_node` hands them back once the caller's permissions allow the open: O_TRUNC
    // asks for write permission, as on Linux, though it truncates nothing.
    match fs.open_node("/link", &rw().truncate(true)).unwrap() {
        Opened::Special(got, m) => assert!(got == h && m.is_fifo()),
        Opened::File(_) => panic!("a FIFO opened as a file"),
    }
    let alice = user(&fs, 1000);
    assert!(matches!(
        alice.open_node("/fifo", &ro()),
        Ok(Opened::Special(..))
    ));
    assert_errno(alice.open_node("/fifo", &rw()), EACCES);
    assert_errno(alice.open_node("/fifo", &ro().truncate(true)), EACCES);
    // truncate: EINVAL for anything but a regular file or a directory, before the
    // permission check; through a symlink too.
    for path in ["/fifo", "/sock", "/null", "/link"] {
        assert_errno(fs.truncate(path, 0), EINVAL);
        assert_errno(alice.truncate(path, 0), EINVAL);
    }
    let size = SetAttr {
        size: Some(0),
        ..SetAttr::default()
    };
    assert_errno(fs.setattr(h, size), EINVAL);
    // Not a directory, not a symlink.
    assert_errno(fs.stat("/fifo/x"), ENOTDIR);
    assert_errno(fs.read_dir("/fifo"), ENOTDIR);
    assert_errno(fs.readlink("/fifo"), EINVAL);
    assert_clean(&fs);
}

#[test]
fn names_and_attributes_change_as_for_files() {
    let (p, fs) = new_fs("special-attrs", 16);
    fs.mknod("/fifo", S_IFIFO | 0o644, 0).unwrap();
    fs.mknod("/null", S_IFCHR | 0o666, NULL).unwrap();
    fs.write_file("/file", b"f").unwrap();
    fs.mkdir("/d", 0o755).unwrap();
    // link, rename (over a file, and with an exchange), chmod, chown, utimens.
    fs.link("/fifo", "/d/fifo2").unwrap();
    assert_eq!(fs.lstat("/fifo").unwrap().nlink, 2);
    fs.rename("/null", "/file").unwrap();
    assert_eq!(fs.lstat("/file").unwrap().rdev, NULL);
    fs.rename_at(None, b"/fifo", None, b"/file", engram_core::RENAME_EXCHANGE)
        .unwrap();
    assert!(fs.lstat("/file").unwrap().is_fifo());
    assert_eq!(fs.lstat("/fifo").unwrap().rdev, NULL);
    fs.chmod("/file", 0o4600).unwrap();
    fs.chown("/file", Some(1000), Some(1001)).unwrap();
    fs.utimens("/file", Some(SetTime::Ns(5)), Some(SetTime::Ns(6)))
        .unwrap();
    let m = fs.lstat("/d/fifo2").unwrap();
    assert_eq!(
        (m.mode, m.uid, m.gid, m.atime_ns, m.mtime_ns),
        (S_IFIFO | 0o600, 1000, 1001, 5, 6),
        "chown cleared set-user-ID, as on Linux"
    );
    let fs = remount(&p, fs);
    assert_eq!(fs.lstat("/d/fifo2").unwrap().mode, S_IFIFO | 0o600);
    assert_eq!(sorted(names(&fs, "/")), ["d", "fifo", "file"]);
    fs.unlink("/file").unwrap();
    fs.unlink("/d/fifo2").unwrap();
    fs.unlink("/fifo").unwrap();
    assert_eq!(sorted(names(&fs, "/")), ["d"]);
    assert_clean(&fs);
}

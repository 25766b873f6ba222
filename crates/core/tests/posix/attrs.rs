//! Attributes: chmod, chown and timestamps, the fields stat reports, and statfs.

use super::{MIB, now_ns, rw, tick};
use crate::common::{assert_clean, assert_errno, new_fs, remount};
use engram_core::SetTime;
use libc::ENOENT;

/// A symbolic link's own mode cannot be changed (Linux's fchmodat2 with
/// AT_SYMLINK_NOFOLLOW): EOPNOTSUPP, also for a user who does not own it.
#[test]
fn chmod_of_a_symlink_itself_is_not_supported() {
    let (_p, fs) = new_fs("lchmod", 16);
    fs.write_file("/t", b"x").unwrap();
    fs.symlink("t", "/l").unwrap();
    assert_errno(fs.chmod_at(None, b"/l", 0o700, false), libc::EOPNOTSUPP);
    assert_eq!(fs.lstat("/l").unwrap().permissions(), 0o777);
    fs.chmod_at(None, b"/l", 0o600, true).unwrap(); // follows: the target's
    assert_eq!(fs.stat("/t").unwrap().permissions(), 0o600);
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

/// Files of more than `index::SMALL` pages each take a metadata page for their index: when
/// those run out before the inodes and data pages do, statfs says so (next to no files
/// free), rather than reporting most of the pool free while creating fails with ENOSPC.
#[test]
fn statfs_counts_metadata_pages_as_what_bounds_files() {
    let (_p, fs) = new_fs("statfs-meta", 16);
    for i in 0..3 {
        fs.write_file(format!("/small{i}"), b"").unwrap();
    }
    let s0 = fs.statfs().unwrap();
    let mut made = 0;
    let err = loop {
        match fs.write_file(format!("/f{made}"), &[7u8; 33_000]) {
            Ok(()) => made += 1,
            Err(e) => break e,
        }
    };
    assert_eq!(err.errno(), libc::ENOSPC, "{err}");
    let s1 = fs.statfs().unwrap();
    assert!(
        s1.files_free * 20 < s0.files_free,
        "{made} files made, then ENOSPC, but statfs says {s1:?} (at first {s0:?})"
    );
    assert!(
        s1.blocks_free > s1.blocks / 4,
        "data pages are left: {s1:?}"
    );
    assert!(s0.files_free >= made, "{s0:?} for {made} files");
    // Files of up to 7 pages still grow: their index is in their inode.
    for i in 0..3 {
        fs.write_file(format!("/small{i}"), &[2u8; 28_672]).unwrap();
    }
    // A chmod names no new page: it still works, and so does reading every file.
    fs.chmod("/f0", 0o600).unwrap();
    assert_eq!(
        fs.read_file(format!("/f{}", made - 1)).unwrap(),
        [7u8; 33_000]
    );
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

/// A pool made with more metadata pages (`Geometry::with_meta_ratio`, `engram mkfs
/// --meta-ratio`) holds more files of more than `index::SMALL` pages (each takes one for
/// its index).
#[test]
fn more_metadata_pages_hold_more_files() {
    let fill = |name: &str, ratio: u64| {
        let p = crate::common::PoolFile::new(name);
        let geo = engram_core::layout::Geometry::with_meta_ratio(16 << 20, ratio).unwrap();
        engram_core::Fs::mkfs_with(p.path(), geo).unwrap();
        let fs = p.open();
        let mut made = 0u64;
        while fs.write_file(format!("/f{made}"), &[1u8; 33_000]).is_ok() {
            made += 1;
        }
        assert_clean(&fs);
        (made, geo.meta_pages)
    };
    let (default, pages) = fill(
        "meta-default",
        engram_core::layout::DEFAULT_BYTES_PER_META_PAGE,
    );
    let (more, more_pages) = fill("meta-more", 32 << 10);
    assert!(
        default < pages && default + 16 > pages,
        "{default} files, {pages} pages"
    );
    assert!(
        more > default + default / 4,
        "{more} files with {more_pages} pages, {default} with {pages}"
    );
}

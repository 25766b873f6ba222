//! Truncation changes mtime and ctime even when the size stays the same: open with O_TRUNC
//! of an existing empty file (also read-only), truncate and ftruncate to the current size.
//! Linux does so on ext4 and tmpfs: every truncation asks for both times.

use super::{creat, ro, rw, tick, user};
use crate::common::{assert_clean, assert_errno, new_fs};
use engram_core::{Fs, Metadata, OpenOptions, SetTime};
use libc::EACCES;

/// Set `path`'s mtime far in the past and let the clock move: a later change of mtime or
/// ctime is then visible whatever the clock's resolution.
fn aged(fs: &Fs, path: &str) -> Metadata {
    fs.utimens(path, None, Some(SetTime::Ns(1_000))).unwrap();
    let m = fs.stat(path).unwrap();
    tick();
    m
}

#[track_caller]
fn assert_touched(fs: &Fs, path: &str, before: &Metadata, what: &str) {
    let m = fs.stat(path).unwrap();
    assert!(m.mtime_ns > 1_000, "{what} leaves mtime alone");
    assert!(m.ctime_ns > before.ctime_ns, "{what} leaves ctime alone");
}

#[track_caller]
fn assert_untouched(fs: &Fs, path: &str, before: &Metadata, what: &str) {
    let m = fs.stat(path).unwrap();
    assert_eq!(m.mtime_ns, 1_000, "{what} changes mtime");
    assert_eq!(m.ctime_ns, before.ctime_ns, "{what} changes ctime");
}

#[test]
fn o_trunc_of_an_existing_empty_file_changes_mtime_and_ctime() {
    let (_p, fs) = new_fs("trunc-empty", 16);
    fs.write_file("/e", b"").unwrap();
    fs.symlink("e", "/l").unwrap();
    let cases = [
        (
            "O_WRONLY|O_TRUNC",
            OpenOptions::new().write(true).truncate(true),
        ),
        ("O_RDONLY|O_TRUNC", ro().truncate(true)),
        ("O_RDWR|O_TRUNC", rw().truncate(true)),
        ("O_RDWR|O_CREAT|O_TRUNC", creat().truncate(true)),
    ];
    for (what, opts) in cases {
        for path in ["/e", "/l"] {
            let before = aged(&fs, "/e");
            let records = fs.stats().records;
            drop(fs.open_file(path, &opts).unwrap());
            assert_touched(&fs, "/e", &before, &format!("{what} of {path}"));
            assert!(fs.stats().records > records, "{what}: the change is logged");
            assert_eq!(fs.stat("/e").unwrap().size, 0);
        }
    }
    // By handle (FUSE's open).
    let h = fs.handle_of(fs.stat("/e").unwrap().ino).unwrap();
    let before = aged(&fs, "/e");
    drop(fs.open_handle(h, &rw().truncate(true)).unwrap());
    assert_touched(&fs, "/e", &before, "open_handle with O_TRUNC");
    assert_clean(&fs);
}

#[test]
fn opens_without_truncation_leave_the_times_alone() {
    let (_p, fs) = new_fs("trunc-none", 16);
    fs.write_file("/e", b"").unwrap();
    for (what, opts) in [("O_RDONLY", ro()), ("O_RDWR", rw()), ("O_CREAT", creat())] {
        let before = aged(&fs, "/e");
        let records = fs.stats().records;
        drop(fs.open_file("/e", &opts).unwrap());
        assert_untouched(&fs, "/e", &before, what);
        assert_eq!(fs.stats().records, records, "{what} logs nothing");
    }
    // O_TRUNC without write permission: refused, nothing changes.
    fs.chmod("/e", 0o444).unwrap();
    let before = aged(&fs, "/e");
    let other = user(&fs, 1000);
    assert_errno(other.open_file("/e", &ro().truncate(true)), EACCES);
    assert_untouched(&fs, "/e", &before, "a refused O_TRUNC");
    assert_clean(&fs);
}

#[test]
fn truncate_and_ftruncate_to_the_same_size_change_mtime_and_ctime() {
    let (_p, fs) = new_fs("trunc-same", 16);
    fs.write_file("/f", b"hello").unwrap();
    fs.write_file("/e", b"").unwrap();
    for (path, size) in [("/f", 5), ("/e", 0)] {
        let before = aged(&fs, path);
        fs.truncate(path, size).unwrap();
        assert_touched(&fs, path, &before, &format!("truncate({path}, {size})"));

        let f = fs.open_file(path, &rw()).unwrap();
        let before = aged(&fs, path);
        f.set_len(size).unwrap();
        assert_touched(&fs, path, &before, &format!("ftruncate({path}, {size})"));
        drop(f);
        assert_eq!(fs.stat(path).unwrap().size, size);
    }
    assert_eq!(fs.read_file("/f").unwrap(), b"hello");
    assert_clean(&fs);
}

//! Out-of-range input: over-long names and paths, absurd offsets and sizes.

use crate::common::{assert_clean, assert_errno, errname, new_fs, remount};
use engram_core::{Error, OpenOptions};
use libc::{EEXIST, EFBIG, EINVAL, ENAMETOOLONG, ENOENT, ENOTDIR};
use std::io::{Seek, SeekFrom};

#[test]
fn overlong_names_and_paths() {
    let (_p, fs) = new_fs("names", 8);
    fs.mkdir("/d", 0o755).unwrap();
    fs.write_file("/d/f", b"f").unwrap();
    let long = "x".repeat(256);
    let path = format!("/d/{long}");
    assert_errno(fs.write_file(&path, b""), ENAMETOOLONG);
    assert_errno(fs.mkdir(&path, 0o755), ENAMETOOLONG);
    assert_errno(fs.symlink("t", &path), ENAMETOOLONG);
    assert_errno(fs.link("/d/f", &path), ENAMETOOLONG);
    assert_errno(fs.rename("/d/f", &path), ENAMETOOLONG);
    assert_errno(fs.stat(&path), ENAMETOOLONG);
    assert_errno(fs.unlink(&path), ENAMETOOLONG);
    assert_errno(fs.rmdir(&path), ENAMETOOLONG);
    let huge = "y".repeat(100_000);
    assert_errno(fs.write_file(format!("/d/{huge}"), b""), ENAMETOOLONG);
    // Paths: 4096 bytes and more, made of short components.
    let deep = "/d".repeat(2048);
    assert_eq!(deep.len(), 4096);
    assert_errno(fs.stat(&deep), ENAMETOOLONG);
    assert_errno(fs.write_file(&deep, b""), ENAMETOOLONG);
    assert_errno(fs.mkdir(&deep, 0o755), ENAMETOOLONG);
    assert_errno(fs.rename("/d/f", &deep), ENAMETOOLONG);
    assert_errno(fs.rename(&deep, "/d/g"), ENAMETOOLONG);
    assert_errno(fs.symlink("/d/f", &deep), ENAMETOOLONG);
    assert_errno(fs.symlink(&deep, "/d/sl"), ENAMETOOLONG);
    assert_errno(fs.stat("/".repeat(1 << 20)), ENAMETOOLONG);
    // A '/' is a separator, never part of a name.
    assert_errno(fs.write_file("/d/f/inside", b""), ENOTDIR);
    assert_errno(fs.write_file("/nodir/inside", b""), ENOENT);
    assert_errno(engram_core::server::check_name(b"a/b"), EINVAL);
    assert_errno(engram_core::server::check_name(b""), EINVAL);
    assert_errno(engram_core::server::check_name(b"a\0b"), EINVAL);
    assert_errno(engram_core::server::check_name(&[b'n'; 256]), ENAMETOOLONG);
    assert_errno(engram_core::server::check_name(b".."), EEXIST);
    engram_core::server::check_name(&[b'n'; 255]).unwrap();
    // Nothing changed.
    let names: Vec<_> = fs
        .read_dir("/d")
        .unwrap()
        .map(|e| e.unwrap().name)
        .collect();
    assert_eq!(names, [&b"."[..], b"..", b"f"]);
    assert_eq!(fs.read_file("/d/f").unwrap(), b"f");
    assert_clean(&fs);
}

#[test]
fn absurd_offsets_and_sizes() {
    let (p, fs) = new_fs("offsets", 8);
    let mut f = fs
        .open_file(
            "/f",
            &OpenOptions::new().read(true).write(true).create(true),
        )
        .unwrap();
    f.write_at(b"data", 0).unwrap();
    let big = |e: Error| {
        assert!(
            [EFBIG, EINVAL].contains(&e.errno()),
            "got {}",
            errname(e.errno())
        );
    };
    big(f.write_at(b"x", u64::MAX - 1).unwrap_err());
    big(f.write_at(b"x", u64::MAX).unwrap_err());
    big(f.write_at(b"x", 1 << 60).unwrap_err());
    big(f.set_len(u64::MAX).unwrap_err());
    big(f.set_len(1 << 60).unwrap_err());
    big(fs.truncate("/f", u64::MAX).unwrap_err());
    big(f.allocate(u64::MAX - 10, 100, false).unwrap_err());
    big(f.allocate(1 << 60, 4096, true).unwrap_err());
    let mut buf = [0u8; 4];
    assert_eq!(f.read_at(&mut buf, u64::MAX).unwrap(), 0);
    assert_eq!(f.read_at(&mut buf, u64::MAX - 2).unwrap(), 0);
    assert!(f.seek(SeekFrom::Start(u64::MAX)).is_err());
    f.seek(SeekFrom::Start(i64::MAX as u64)).unwrap();
    assert!(f.seek(SeekFrom::Current(1)).is_err());
    assert!(f.seek(SeekFrom::End(i64::MIN)).is_err());
    big(f.write_next(b"x").unwrap_err());
    assert_eq!(f.metadata().unwrap().size, 4);
    assert_eq!(f.metadata().unwrap().blocks, 8);
    drop(f);
    assert_eq!(fs.read_file("/f").unwrap(), b"data");
    assert_clean(&fs);
    let fs = remount(&p, fs);
    assert_eq!(fs.read_file("/f").unwrap(), b"data");
    assert_clean(&fs);
}

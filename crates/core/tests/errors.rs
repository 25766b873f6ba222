//! Bad input gets a clear error and loses nothing: foreign, corrupt and truncated pools,
//! bad sizes, a pool opened twice, full pools, over-long names and paths.

mod common;

use common::{PoolFile, assert_clean, assert_errno, errname, new_fs, pattern, remount};
use engram_core::{Error, Fs, OpenOptions, Options};
use libc::{EBUSY, EEXIST, EFBIG, EINVAL, ENAMETOOLONG, ENOENT, ENOSPC, ENOTDIR, EUCLEAN};
use std::io::{Seek, SeekFrom};
use std::os::unix::fs::FileExt;

const MIB: u64 = 1 << 20;

fn open_err(path: &std::path::Path) -> Error {
    match Fs::open(path, &Options::default()) {
        Ok(_) => panic!("opening {} should fail", path.display()),
        Err(e) => e,
    }
}

fn msg(e: &Error) -> String {
    e.message().unwrap_or_default().to_string()
}

fn bytes_of(p: &PoolFile) -> Vec<u8> {
    std::fs::read(p.path()).unwrap()
}

/// Overwrite bytes of the pool file in place.
fn scribble(p: &PoolFile, at: u64, data: &[u8]) {
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(p.path())
        .unwrap();
    f.write_all_at(data, at).unwrap();
}

/// A pool with a few files in it, unmounted; returns what they hold.
fn populated(p: &PoolFile, size: u64) -> Vec<(String, Vec<u8>)> {
    let fs = p.mkfs_open(size);
    fs.mkdir("/dir", 0o755).unwrap();
    let files: Vec<(String, Vec<u8>)> = (0..5)
        .map(|i| {
            (
                format!("/dir/file{i}"),
                pattern(i, 1000 + 5000 * i as usize),
            )
        })
        .collect();
    for (name, data) in &files {
        fs.write_file(name, data).unwrap();
    }
    fs.unmount().unwrap();
    files
}

fn check_files(fs: &Fs, files: &[(String, Vec<u8>)]) {
    for (name, data) in files {
        assert!(
            fs.read_file(name).unwrap() == *data,
            "{name} lost its contents"
        );
    }
    assert_clean(fs);
}

#[test]
fn foreign_pool_of_zeros() {
    let p = PoolFile::new("zeros");
    std::fs::write(p.path(), vec![0u8; (8 * MIB) as usize]).unwrap();
    let e = open_err(p.path());
    assert_eq!(e.errno(), EUCLEAN, "{e}");
    assert!(msg(&e).contains("not an EngramFS pool"), "{e}");
    assert!(Fs::superblock(p.path()).is_err());
    assert!(
        bytes_of(&p).iter().all(|&b| b == 0),
        "a failed open wrote to the file"
    );
}

#[test]
fn foreign_pool_of_random_bytes() {
    let p = PoolFile::new("random");
    let junk = pattern(99, (8 * MIB) as usize);
    std::fs::write(p.path(), &junk).unwrap();
    let e = open_err(p.path());
    assert_eq!(e.errno(), EUCLEAN, "{e}");
    assert!(msg(&e).contains("not an EngramFS pool"), "{e}");
    assert!(bytes_of(&p) == junk, "a failed open wrote to the file");

    // Random bytes behind a correct magic: the checksum catches them.
    let magic = b"ENGRAMFS";
    scribble(&p, 0, magic);
    scribble(&p, 4096, magic);
    let e = open_err(p.path());
    assert_eq!(e.errno(), EUCLEAN, "{e}");
    assert!(msg(&e).contains("superblock"), "{e}");
}

#[test]
fn truncated_and_resized_pools() {
    let p = PoolFile::new("trunc");
    let files = populated(&p, 16 * MIB);
    let original = bytes_of(&p);
    let copy = PoolFile::new("trunc-copy");
    for len in [8 * MIB, 16 * MIB - 4096, 3 * 4096, 4096, 4097, 100, 0] {
        std::fs::write(copy.path(), &original[..len as usize]).unwrap();
        let e = open_err(copy.path());
        assert!(e.errno() != 0 && !msg(&e).is_empty(), "len {len}: {e}");
        if len >= 2 * 4096 && len % 4096 == 0 {
            assert_eq!(e.errno(), EUCLEAN, "len {len}: {e}");
            assert!(msg(&e).contains("truncated"), "len {len}: {e}");
        }
    }
    // Grown beyond what the superblock says.
    let mut longer = original.clone();
    longer.resize((17 * MIB) as usize, 0);
    std::fs::write(copy.path(), &longer).unwrap();
    let e = open_err(copy.path());
    assert_eq!(e.errno(), EUCLEAN, "{e}");
    assert!(
        msg(&e).contains("resized") || msg(&e).contains("truncated"),
        "{e}"
    );
    // The original still opens with everything in it.
    let fs = p.open();
    check_files(&fs, &files);
}

#[test]
fn missing_pool_file() {
    let p = PoolFile::new("missing");
    let e = open_err(p.path());
    assert_eq!(e.errno(), ENOENT, "{e}");
    assert!(msg(&e).contains(&p.path().display().to_string()), "{e}");
}

#[test]
fn both_superblocks_corrupt() {
    let p = PoolFile::new("bothsb");
    let files = populated(&p, 16 * MIB);
    let original = bytes_of(&p);
    // Flip a byte inside the checksummed body of each copy.
    for at in [100u64, 4096 + 100] {
        scribble(&p, at, &[original[at as usize] ^ 0x5a]);
    }
    let e = open_err(p.path());
    assert_eq!(e.errno(), EUCLEAN, "{e}");
    assert!(msg(&e).contains("superblock"), "{e}");
    let e = Fs::superblock(p.path()).unwrap_err();
    assert!(msg(&e).contains("superblock"), "{e}");
    // Nothing else was touched: repairing one copy by hand brings everything back.
    let now = bytes_of(&p);
    assert!(
        now[8192..] == original[8192..],
        "a failed open wrote to the pool"
    );
    scribble(&p, 0, &original[..4096]);
    let fs = p.open();
    check_files(&fs, &files);
}

#[test]
fn one_superblock_corrupt_still_opens() {
    let p = PoolFile::new("onesb");
    let files = populated(&p, 16 * MIB);
    for copy in [0u64, 1] {
        let at = copy * 4096;
        // Zero the magic of one copy, then garble its body.
        scribble(&p, at, &[0u8; 8]);
        scribble(&p, at + 40, &[0xffu8; 16]);
        let fs = p.open();
        check_files(&fs, &files);
        fs.write_file(format!("/after{copy}"), b"written after")
            .unwrap();
        fs.unmount().unwrap();
        // Both copies are valid again after a clean unmount.
        assert!(Fs::superblock(p.path()).is_ok());
    }
    let fs = p.open();
    assert_eq!(fs.read_file("/after0").unwrap(), b"written after");
    assert_eq!(fs.read_file("/after1").unwrap(), b"written after");
    check_files(&fs, &files);
}

#[test]
fn mkfs_bad_sizes() {
    let p = PoolFile::new("mkfs");
    for size in [0, 4096, MIB / 2, MIB - 4096] {
        let e = Fs::mkfs(p.path(), size).unwrap_err();
        assert_eq!(e.errno(), EINVAL, "size {size}: {e}");
        assert!(msg(&e).contains("too small"), "size {size}: {e}");
        assert!(!p.path().exists(), "a refused mkfs created the file");
    }
    for size in [8 * MIB + 1, 8 * MIB + 2048, 16 * MIB - 1] {
        let e = Fs::mkfs(p.path(), size).unwrap_err();
        assert_eq!(e.errno(), EINVAL, "size {size}: {e}");
        assert!(msg(&e).contains("multiple of 4096"), "size {size}: {e}");
        assert!(!p.path().exists(), "a refused mkfs created the file");
    }
    // The smallest size works.
    Fs::mkfs(p.path(), 4 * MIB).unwrap();
    let fs = p.open();
    fs.write_file("/f", b"tiny").unwrap();
    let fs = remount(&p, fs);
    assert_eq!(fs.read_file("/f").unwrap(), b"tiny");
    assert_clean(&fs);
}

#[test]
fn pool_opened_twice_is_ebusy() {
    let (p, fs) = new_fs("twice", 8);
    fs.write_file("/f", b"first").unwrap();
    let e = open_err(p.path());
    assert_eq!(e.errno(), EBUSY, "{e}");
    assert!(msg(&e).contains("in use"), "{e}");
    // mkfs over a pool in use is refused too, and destroys nothing.
    assert!(Fs::mkfs(p.path(), 8 * MIB).is_err());
    assert_eq!(fs.read_file("/f").unwrap(), b"first");
    fs.write_file("/g", b"still works").unwrap();
    assert_clean(&fs);
    // Once the first is gone, it opens again.
    let fs = remount(&p, fs);
    assert_eq!(fs.read_file("/f").unwrap(), b"first");
    assert_eq!(fs.read_file("/g").unwrap(), b"still works");
    assert_clean(&fs);
}

#[test]
fn full_pool_enospc_then_recovers() {
    let (p, fs) = new_fs("full", 8);
    fs.write_file("/small", b"keep me").unwrap();
    let f = fs
        .open_file(
            "/big",
            &OpenOptions::new().read(true).write(true).create(true),
        )
        .unwrap();
    let chunk = 64 * 1024;
    let mut written = 0u64;
    let err = loop {
        let data = pattern(written / chunk as u64, chunk);
        match f.write_at(&data, written) {
            Ok(n) => {
                assert_eq!(n, chunk);
                written += n as u64;
            }
            Err(e) => break e,
        }
        assert!(written < 8 * MIB, "wrote more than the pool holds");
    };
    assert_eq!(err.errno(), ENOSPC, "{err}");
    assert!(written > 4 * MIB, "only {written} bytes fit");
    // Fill the last pages one at a time.
    let big_chunks = written / chunk as u64;
    let err = loop {
        match f.write_at(&pattern(written, 4096), written) {
            Ok(n) => written += n as u64,
            Err(e) => break e,
        }
        assert!(written < 8 * MIB, "wrote more than the pool holds");
    };
    assert_eq!(err.errno(), ENOSPC, "{err}");
    // A failed write changes nothing; a big one fails as a whole.
    assert_eq!(f.metadata().unwrap().size, written);
    assert_errno(f.write_at(&vec![1u8; MIB as usize], written), ENOSPC);
    assert_errno(f.write_at(&vec![1u8; MIB as usize], 0), ENOSPC);
    assert_eq!(f.metadata().unwrap().size, written);
    assert_errno(f.allocate(written, MIB, false), ENOSPC);
    assert_eq!(f.metadata().unwrap().size, written);
    let check_big = |f: &engram_core::File| {
        let mut buf = vec![0u8; chunk];
        for i in 0..big_chunks {
            assert_eq!(f.read_at(&mut buf, i * chunk as u64).unwrap(), chunk);
            assert!(buf == pattern(i, chunk), "chunk {i} damaged");
        }
        let mut page = vec![0u8; 4096];
        for at in (big_chunks * chunk as u64..written).step_by(4096) {
            assert_eq!(f.read_at(&mut page, at).unwrap(), 4096);
            assert!(page == pattern(at, 4096), "page at {at} damaged");
        }
    };
    check_big(&f);
    assert_eq!(fs.read_file("/small").unwrap(), b"keep me");
    // Metadata-only operations still work.
    fs.mkdir("/d", 0o755).unwrap();
    fs.rename("/small", "/d/small").unwrap();
    fs.write_file("/empty", b"").unwrap();
    assert_errno(fs.write_file("/one", b"x"), ENOSPC);
    assert_clean(&fs);
    drop(f);

    // Survives a remount in this state.
    let fs = remount(&p, fs);
    let f = fs
        .open_file("/big", &OpenOptions::new().read(true))
        .unwrap();
    check_big(&f);
    drop(f);
    assert_clean(&fs);

    // Deleting frees the space again (checked after a remount; see the next test).
    fs.unlink("/big").unwrap();
    let fs = remount(&p, fs);
    let data = pattern(7, (3 * MIB) as usize);
    fs.write_file("/again", &data).unwrap();
    assert!(fs.read_file("/again").unwrap() == data);
    assert_eq!(fs.read_file("/d/small").unwrap(), b"keep me");
    assert_clean(&fs);
    let fs = remount(&p, fs);
    assert!(fs.read_file("/again").unwrap() == data);
    assert_clean(&fs);
}

#[test]
fn write_larger_than_an_atomic_step_that_runs_out_of_space_is_short() {
    let (p, fs) = new_fs("shortwrite", 16);
    // File::write_at applies writes in atomic steps of 8 MiB (ATOMIC_WRITE_MAX).
    let step = 8 * MIB as usize;
    let data = pattern(11, 20 * MIB as usize);
    let mut f = fs
        .open_file(
            "/big",
            &OpenOptions::new().read(true).write(true).create(true),
        )
        .unwrap();
    // The first 8 MiB step fits, the second does not: the first stays, and says so.
    assert_eq!(f.write_at(&data, 0).unwrap(), step);
    assert_eq!(f.metadata().unwrap().size, step as u64);
    // Nothing of the rest fits in one step: now the error.
    assert_errno(f.write_at(&data[step..], step as u64), ENOSPC);
    assert_eq!(f.metadata().unwrap().size, step as u64);
    // Through `Write`: the offset moves by what was written.
    f.set_len(0).unwrap();
    f.seek(SeekFrom::Start(0)).unwrap();
    assert_eq!(std::io::Write::write(&mut f, &data).unwrap(), step);
    assert_eq!(f.stream_position().unwrap(), step as u64);
    drop(f);
    assert!(fs.read_file("/big").unwrap() == data[..step]);
    // A whole-file write keeps going after a short step and reports the failure.
    assert_errno(fs.write_file("/big2", &data), ENOSPC);
    fs.unlink("/big2").unwrap();
    assert_clean(&fs);
    let fs = remount(&p, fs);
    assert!(fs.read_file("/big").unwrap() == data[..step]);
    assert_clean(&fs);
}

#[test]
fn writing_after_delete_on_a_full_pool_works_at_once() {
    let (_p, fs) = new_fs("fullreuse", 8);
    let f = fs
        .open_file("/big", &OpenOptions::new().write(true).create(true))
        .unwrap();
    let mut written = 0;
    while f.write_at(&[7u8; 4096], written).is_ok() {
        written += 4096;
    }
    drop(f);
    fs.unlink("/big").unwrap();
    fs.write_file("/again", &[1u8; 4096]).unwrap();
    assert_clean(&fs);
}

/// Create small files in /d until the pool says ENOSPC; returns how many fit.
fn fill_with_files(fs: &Fs) -> usize {
    fs.mkdir("/d", 0o755).unwrap();
    let mut n = 0;
    let err = loop {
        match fs.open_file(
            format!("/d/f{n}"),
            &OpenOptions::new().write(true).create_new(true),
        ) {
            Ok(f) => {
                f.write_at(format!("{n}").as_bytes(), 0).unwrap();
                n += 1;
            }
            Err(e) => break e,
        }
        assert!(n < 100_000);
    };
    assert_eq!(err.errno(), ENOSPC, "{err}");
    assert!(n > 500, "only {n} files fit");
    assert!(!msg(&err).is_empty(), "ENOSPC should say what ran out");
    n
}

#[test]
fn many_files_until_enospc_then_reuse() {
    let (p, fs) = new_fs("manyfiles", 8);
    let n = fill_with_files(&fs);
    assert_errno(fs.mkdir("/d2", 0o755), ENOSPC);
    assert_errno(fs.symlink("t", "/sl"), ENOSPC);
    assert_errno(fs.write_file("/one-more", b""), ENOSPC);
    assert_eq!(fs.read_dir("/d").unwrap().count() - 2, n);
    for i in 0..n {
        assert_eq!(
            fs.read_file(format!("/d/f{i}")).unwrap(),
            format!("{i}").as_bytes()
        );
    }
    assert_clean(&fs);
    // Delete a tenth; after a remount the same number can be created again, no more.
    for i in (0..n).step_by(10) {
        fs.unlink(format!("/d/f{i}")).unwrap();
    }
    assert_clean(&fs);
    let fs = remount(&p, fs);
    for i in (0..n).step_by(10) {
        fs.write_file(format!("/d/g{i}"), b"again").unwrap();
    }
    assert_errno(fs.write_file("/d/one-more", b""), ENOSPC);
    for i in (1..n).step_by(10) {
        assert_eq!(
            fs.read_file(format!("/d/f{i}")).unwrap(),
            format!("{i}").as_bytes()
        );
    }
    assert_clean(&fs);
    let fs = remount(&p, fs);
    assert_eq!(fs.read_dir("/d").unwrap().count() - 2, n);
    assert_eq!(fs.read_file("/d/g0").unwrap(), b"again");
    assert_clean(&fs);
}

#[test]
fn deleting_on_a_full_pool_makes_room_at_once() {
    let (_p, fs) = new_fs("reuse", 8);
    let n = fill_with_files(&fs);
    fs.unlink("/d/f0").unwrap();
    fs.write_file("/d/new", b"fits").unwrap();
    assert_errno(fs.write_file("/d/newer", b""), ENOSPC);
    for i in (1..n).step_by(10) {
        fs.unlink(format!("/d/f{i}")).unwrap();
    }
    for i in (1..n).step_by(10) {
        fs.write_file(format!("/d/g{i}"), b"again").unwrap();
    }
    assert_clean(&fs);
}

#[test]
fn many_directories_until_enospc_then_reuse() {
    let (p, fs) = new_fs("manydirs", 8);
    let mut n = 0;
    let err = loop {
        let r = fs
            .mkdir(format!("/m{n}"), 0o755)
            .and_then(|()| fs.write_file(format!("/m{n}/x"), b""));
        match r {
            Ok(()) => n += 1,
            Err(e) => break e,
        }
        assert!(n < 100_000);
    };
    assert_eq!(err.errno(), ENOSPC, "{err}");
    assert!(n > 50, "only {n} directories fit");
    assert_clean(&fs);
    for i in 0..n / 2 {
        fs.unlink(format!("/m{i}/x")).unwrap();
        fs.rmdir(format!("/m{i}")).unwrap();
    }
    // Directory pages are not merged when entries go (as in ext4), so the root directory
    // may need a page or two more for the new names: leave it that slack.
    let again = n / 2 - 4;
    for i in 0..again {
        fs.mkdir(format!("/again{i}"), 0o755).unwrap();
        fs.write_file(format!("/again{i}/x"), b"y").unwrap();
    }
    assert_clean(&fs);
    let fs = remount(&p, fs);
    assert_eq!(
        fs.read_file(format!("/again{}/x", again - 1)).unwrap(),
        b"y"
    );
    assert!(fs.stat(format!("/m{}/x", n - 1)).is_ok());
    assert_clean(&fs);
}

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

/// Garbage in one area of an unmounted pool: opening, walking and fsck must give errors or
/// reports, never panic.
fn corrupt_area_gives_errors_not_panics(what: &str, seed: u64) {
    let p = PoolFile::new("corrupt");
    let files = populated(&p, 16 * MIB);
    let geo = Fs::superblock(p.path()).unwrap().geometry;
    let (off, len) = match what {
        "inode table" => (geo.inode_off + 2 * 128, 64 * 128),
        "metadata pages" => (geo.meta_off, 64 * 4096),
        "bitmaps" => (geo.bitmap_off, geo.bitmap_len),
        _ => (geo.log_off, geo.log_len),
    };
    scribble(&p, off, &pattern(seed, len as usize));
    let result = std::panic::catch_unwind(|| {
        let fs = match Fs::open(p.path(), &Options::default()) {
            Ok(fs) => fs,
            Err(e) => {
                assert!(!msg(&e).is_empty(), "an error without a message: {e}");
                return;
            }
        };
        let _ = fs.fsck(false);
        if let Ok(rd) = fs.read_dir("/dir") {
            for e in rd.take(1000) {
                let Ok(e) = e else { continue };
                let path = format!("/dir/{}", e.name_str());
                let _ = fs.lstat(&path);
                let _ = fs.read_file(&path);
            }
        }
        for (name, _) in &files {
            let _ = fs.read_file(name);
            let _ = fs.write_file(name, b"overwrite");
            let _ = fs.unlink(name);
        }
        let _ = fs.mkdir("/new", 0o755);
        let _ = fs.write_file("/new/file", b"x");
        let _ = fs.fsck(false);
        let _ = fs.unmount();
    });
    assert!(
        result.is_ok(),
        "garbage in the {what} made the engine panic"
    );
}

#[test]
fn corrupt_inode_table_gives_errors_not_panics() {
    corrupt_area_gives_errors_not_panics("inode table", 1000);
}

#[test]
fn corrupt_metadata_pages_give_errors_not_panics() {
    corrupt_area_gives_errors_not_panics("metadata pages", 1001);
}

#[test]
fn corrupt_bitmaps_give_errors_not_panics() {
    corrupt_area_gives_errors_not_panics("bitmaps", 1002);
}

#[test]
fn corrupt_log_gives_errors_not_panics() {
    corrupt_area_gives_errors_not_panics("log", 1003);
}

#[test]
fn fsck_reports_and_repairs_a_damaged_superblock_copy() {
    let (_p, fs) = new_fs("sbcopy", 8);
    fs.write_file("/f", b"data").unwrap();
    // Damage the second copy behind the file system's back.
    fs.pool().write(4096 + 100, &[0xA5; 8]);
    let r = fs.fsck(false).unwrap();
    assert!(
        r.problems.iter().any(|p| p.contains("superblock copy 1")),
        "{:?}",
        r.problems
    );
    let r = fs.fsck(true).unwrap();
    assert!(r.repaired > 0);
    assert_clean(&fs);
    assert_eq!(fs.read_file("/f").unwrap(), b"data");
}

#[test]
fn entry_naming_a_free_inode_is_an_error_not_an_endless_walk() {
    let p = PoolFile::new("free-ino");
    let fs = p.mkfs_open(8 << 20);
    fs.mkdir("/d", 0o755).unwrap();
    fs.write_file("/d/x", b"x").unwrap();
    let ino = fs.stat("/d/x").unwrap().ino;
    let at = fs.mount_info().geometry.inode_addr(ino) + engram_core::inode::field::MODE;
    fs.unmount().unwrap();
    // The damage: the inode marked free, its directory entry left in place (a clean pool,
    // so it opens without recovery looking at the tree).
    scribble(&p, at, &0u32.to_le_bytes());
    let fs = p.open();
    for path in ["/d/x", "/d/x/", "/d/x/y"] {
        let e = fs.stat(path).unwrap_err();
        assert_eq!(e.errno(), EUCLEAN, "{path}: {e}");
        assert!(msg(&e).contains("free"), "{path}: {e}");
    }
    // The rest of the pool still reads.
    assert!(fs.stat("/d").unwrap().is_dir());
}

//! Pools that cannot be opened or made: foreign, truncated, missing, bad superblocks, sizes.

use super::{MIB, msg, populated, scribble};
use crate::common::{PoolFile, assert_clean, new_fs, pattern, remount};
use engram_core::{Error, Fs, Options};
use libc::{EBUSY, EINVAL, ENOENT, EUCLEAN};

fn open_err(path: &std::path::Path) -> Error {
    match Fs::open(path, &Options::default()) {
        Ok(_) => panic!("opening {} should fail", path.display()),
        Err(e) => e,
    }
}

fn bytes_of(p: &PoolFile) -> Vec<u8> {
    std::fs::read(p.path()).unwrap()
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

//! Damage inside a pool gives errors and fsck reports, never panics.

use super::{MIB, msg, populated, scribble};
use crate::common::{PoolFile, assert_clean, new_fs, pattern};
use engram_core::{Fs, Options};
use libc::EUCLEAN;

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

/// A superblock copy damaged while the pool was not open is noticed when it is opened (the
/// other copy serves), said in what the mount set right (`engram info` and `fsck` print it),
/// and written again: the next open finds both copies valid. Before, the damage was
/// repaired without a word.
#[test]
fn a_superblock_copy_damaged_while_closed_is_reported_and_rewritten() {
    let (p, fs) = new_fs("sbclosed", 8);
    fs.write_file("/f", b"data").unwrap();
    fs.unmount().unwrap();
    {
        let pool = engram_pmem::Pool::open(p.path()).unwrap();
        pool.write(100, &[0xA5; 8]);
        pool.sync_point().unwrap();
    }
    let fs = Fs::open(p.path(), &Options::default()).unwrap();
    let info = fs.mount_info();
    assert!(
        info.repaired
            .iter()
            .any(|m| m.contains("superblock copy 0") && m.contains("written again")),
        "{:?}",
        info.repaired
    );
    assert!(info.problems.is_empty(), "{:?}", info.problems);
    assert_eq!(fs.read_file("/f").unwrap(), b"data");
    assert_clean(&fs);
    fs.unmount().unwrap();
    let fs = Fs::open(p.path(), &Options::default()).unwrap();
    assert!(
        fs.mount_info().repaired.is_empty(),
        "{:?}",
        fs.mount_info().repaired
    );
}

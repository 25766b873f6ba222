//! fsck on planted damage, written as raw bytes into an unmounted pool file following
//! docs/format.md (leaked data page and inode, an orphan, wrong link count, block count and
//! directory size) and into the live log: each is reported in words, `repair` fixes it, and
//! a second check is clean.

mod common;

use common::{PoolFile, assert_clean, pattern};
use engram_core::layout::{Geometry, Superblock};
use std::os::unix::fs::FileExt;

const MIB: u64 = 1 << 20;
/// Inode fields (docs/format.md, "Inodes").
const NLINK: u64 = 4;
const SIZE: u64 = 16;
const BLOCKS: u64 = 64;

fn write_raw(p: &PoolFile, at: u64, data: &[u8]) {
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(p.path())
        .unwrap();
    f.write_all_at(data, at).unwrap();
}

fn read_raw(p: &PoolFile, at: u64, len: usize) -> Vec<u8> {
    let mut b = vec![0u8; len];
    std::fs::File::open(p.path())
        .unwrap()
        .read_exact_at(&mut b, at)
        .unwrap();
    b
}

/// Byte offsets of the inode, metadata-page and data-page bitmaps (docs/format.md,
/// "Allocator bitmaps": each starts on an 8-byte boundary of the bitmap area).
fn bitmaps(g: &Geometry) -> (u64, u64, u64) {
    let i = g.bitmap_off;
    let m = i + g.inode_count.div_ceil(64) * 8;
    let d = m + g.meta_pages.div_ceil(64) * 8;
    (i, m, d)
}

/// Mark bit `n` of the bitmap at `off` used.
fn set_bit(p: &PoolFile, off: u64, n: u64) {
    let at = off + n / 8;
    let mut b = read_raw(p, at, 1);
    b[0] |= 1 << (n % 8);
    write_raw(p, at, &b);
}

#[test]
fn planted_damage_is_reported_in_words_and_repaired() {
    let p = PoolFile::new("repair");
    let fs = p.mkfs_open(8 * MIB);
    fs.mkdir("/dir", 0o755).unwrap();
    let data = pattern(5, 3 * 4096 - 100);
    fs.write_file("/dir/file", &data).unwrap();
    fs.write_file("/other", b"other").unwrap();
    let file = fs.stat("/dir/file").unwrap().ino;
    let dir = fs.stat("/dir").unwrap().ino;
    assert_eq!(fs.stat("/dir/file").unwrap().blocks, 3 * 8);
    fs.unmount().unwrap();

    let g = Superblock::load(&engram_pmem::Pool::open(p.path()).unwrap())
        .unwrap()
        .geometry;
    let (ibm, _, dbm) = bitmaps(&g);
    let leaked_page = g.data_pages - 1;
    let leaked_ino = g.inode_count - 1;
    let orphan = g.inode_count - 2;
    set_bit(&p, dbm, leaked_page);
    set_bit(&p, ibm, leaked_ino);
    // An orphan: a live regular file with one link that no directory names.
    let mut inode = vec![0u8; 128];
    inode[0..4].copy_from_slice(&(libc::S_IFREG | 0o644).to_le_bytes());
    inode[4..8].copy_from_slice(&1u32.to_le_bytes());
    inode[60..64].copy_from_slice(&1u32.to_le_bytes());
    write_raw(&p, g.inode_addr(orphan), &inode);
    set_bit(&p, ibm, orphan);
    write_raw(&p, g.inode_addr(file) + NLINK, &5u32.to_le_bytes());
    write_raw(&p, g.inode_addr(file) + BLOCKS, &99u64.to_le_bytes());
    write_raw(&p, g.inode_addr(dir) + SIZE, &42u64.to_le_bytes());

    let fs = p.open();
    assert!(fs.mount_info().was_clean, "the damage is not a crash");
    let r = fs.fsck(false).unwrap();
    let page_off = g.data_off + leaked_page * 4096;
    let want = [
        format!("data page {page_off:#x} is marked used but unreachable (leak)"),
        format!("inode {leaked_ino} is marked used but free (leak)"),
        format!("inode {orphan} is allocated but has no name (orphan)"),
        format!("inode {file}: link count is 5, expected 1"),
        format!("file {file}: block count says 99 pages, index has 3"),
        format!("directory {dir}: size says 42 entries, it has 1"),
    ];
    for w in &want {
        assert!(
            r.problems.iter().any(|p| p == w),
            "fsck did not say {w:?}: {:#?}",
            r.problems
        );
    }
    assert_eq!(r.problems.len(), want.len(), "{:#?}", r.problems);
    assert_eq!(r.repaired, 0, "a check alone repairs nothing");
    let fixed = fs.fsck(true).unwrap();
    assert_eq!(fixed.problems.len(), want.len());
    assert!(fixed.repaired >= want.len(), "{fixed:?}");
    assert_clean(&fs);
    let st = fs.stat("/dir/file").unwrap();
    assert_eq!((st.nlink, st.blocks), (1, 24));
    assert_eq!(fs.stat("/dir").unwrap().size, 1);
    assert_eq!(fs.read_file("/dir/file").unwrap(), data);
    fs.unmount().unwrap();
    let fs = p.open();
    assert!(fs.mount_info().was_clean);
    assert_clean(&fs);
    assert_eq!(fs.read_file("/other").unwrap(), b"other");
    // The repaired pool has its space back: the leaked inode and page are usable.
    let st = fs.statfs().unwrap();
    assert_eq!(st.files_free, st.files - 4, "root, /dir, two files");
}

#[test]
fn damaged_log_record_of_a_live_pool_is_reported_and_repaired() {
    let p = PoolFile::new("livelog");
    let fs = p.mkfs_open(8 * MIB);
    for i in 0..4 {
        fs.mkdir(format!("/d{i}"), 0o755).unwrap();
    }
    assert_clean(&fs);
    let pool = fs.pool();
    let sb = Superblock::load(pool).unwrap();
    let g = sb.geometry;
    // The second record since the last checkpoint: skip the first by its length.
    let first = g.log_off + sb.log_head;
    let len = u32::from_le_bytes(pool.slice(first + 8, 4).try_into().unwrap()) as u64;
    let second = first + len;
    let byte = pool.slice(second + 40, 1)[0];
    pool.write(second + 40, &[byte ^ 0x40]);
    let r = fs.fsck(false).unwrap();
    assert_eq!(r.problems.len(), 1, "{:#?}", r.problems);
    let msg = &r.problems[0];
    assert!(
        msg.starts_with(&format!(
            "operation log: record {} fails its checks",
            sb.log_head_seq + 1
        )),
        "{msg}"
    );
    let fixed = fs.fsck(true).unwrap();
    assert!(fixed.repaired >= 1);
    assert_clean(&fs);
    fs.mkdir("/after", 0o755).unwrap();
    assert_clean(&fs);
    // A crash now recovers from the new head, past the damaged record.
    let copy = PoolFile::new("livelog-copy");
    std::fs::copy(p.path(), copy.path()).unwrap();
    drop(fs);
    let fs = copy.open();
    assert!(!fs.mount_info().was_clean);
    assert!(fs.stat("/after").unwrap().is_dir());
    assert!(fs.stat("/d3").unwrap().is_dir());
    assert_clean(&fs);
}

//! Formatting a pool: root directory, empty log, bitmaps, both superblocks.

use crate::alloc::Allocator;
use crate::inode::{InodeData, S_IFDIR};
use crate::layout::{Geometry, ROOT_INO, Superblock, now_ns};
use engram_pmem::Pool;

/// Write a fresh file system into `pool`. A new pool file is zero, except for the areas
/// written here; a device keeps its old content, so its whole inode table is zeroed too
/// (everything else is initialised when it is allocated).
pub fn format(pool: &Pool, geo: &Geometry) {
    pool.zero_nt(geo.log_off, geo.log_len);
    let inodes = if pool.backing().is_device() {
        geo.inode_count
    } else {
        2
    };
    pool.zero_nt(geo.inode_off, inodes * crate::layout::INODE_SIZE);
    let now = now_ns();
    let creds = crate::perm::Creds::current();
    let root = InodeData {
        mode: S_IFDIR | 0o755,
        nlink: 2,
        uid: creds.uid,
        gid: creds.gid,
        atime: now,
        mtime: now,
        ctime: now,
        generation: 1,
        parent: ROOT_INO,
        ..InodeData::default()
    };
    pool.write(geo.inode_addr(ROOT_INO), &root.encode());
    pool.flush(geo.inode_addr(ROOT_INO), 128);
    let mut alloc = Allocator::empty(geo);
    alloc.inodes.set(ROOT_INO);
    alloc.store(pool);
    pool.fence();
    let mut sb = Superblock {
        geometry: *geo,
        generation: 0,
        clean: 1,
        log_head: 0,
        log_head_seq: 1,
        uuid: now as u64 ^ (std::process::id() as u64) << 32,
        created_ns: now as u64,
    };
    sb.store(pool);
}

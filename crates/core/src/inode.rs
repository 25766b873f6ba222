//! Inode records: 128 bytes, two cache lines, at `inode_off + ino * 128`.
//!
//! Fields are read in place by clients; every change after creation goes through the log.

use crate::layout::Geometry;
use engram_pmem::Pool;

pub mod field {
    pub const MODE: u64 = 0; // u32; 0 = free slot
    pub const NLINK: u64 = 4; // u32
    pub const UID: u64 = 8; // u32
    pub const GID: u64 = 12; // u32
    pub const SIZE: u64 = 16; // u64: bytes (file), entries (dir), target length (symlink)
    pub const ATIME: u64 = 24; // i64 ns
    pub const MTIME: u64 = 32; // i64 ns
    pub const CTIME: u64 = 40; // i64 ns
    // u64: file index root / directory trie root / symlink page / device number (devices)
    pub const ROOT: u64 = 48;
    pub const HEIGHT: u64 = 56; // u32: file index height
    pub const GENERATION: u64 = 60; // u32: bumped each time the slot is reused
    pub const BLOCKS: u64 = 64; // u64: data pages held
    pub const PARENT: u64 = 72; // u64: parent directory (directories only)
    pub const INLINE: u64 = 80; // 48 bytes: short symlink target
    /// Regular files: 7 u64 entries, the index of a file of up to 7 pages (`index::SMALL`),
    /// over `PARENT` and `INLINE`, which only directories and symlinks use.
    pub const SMALL_NODE: u64 = 72;
    pub const INLINE_LEN: u64 = 48;
}

pub const S_IFMT: u32 = libc::S_IFMT;
pub const S_IFREG: u32 = libc::S_IFREG;
pub const S_IFDIR: u32 = libc::S_IFDIR;
pub const S_IFLNK: u32 = libc::S_IFLNK;
pub const S_IFIFO: u32 = libc::S_IFIFO;
pub const S_IFCHR: u32 = libc::S_IFCHR;
pub const S_IFBLK: u32 = libc::S_IFBLK;
pub const S_IFSOCK: u32 = libc::S_IFSOCK;

/// Whether `mode` is a FIFO, a device or a socket: an inode with no content (no pages, size
/// 0), whose root word holds a device's number and nothing else.
pub fn is_special(mode: u32) -> bool {
    matches!(mode & S_IFMT, S_IFIFO | S_IFCHR | S_IFBLK | S_IFSOCK)
}

/// Whether `mode` is a character or block device.
pub fn is_device(mode: u32) -> bool {
    matches!(mode & S_IFMT, S_IFCHR | S_IFBLK)
}

/// A snapshot of an inode's fields, laid out as the record is (checked below), so that
/// decoding is one copy.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct InodeData {
    pub mode: u32,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    pub size: u64,
    pub atime: i64,
    pub mtime: i64,
    pub ctime: i64,
    pub root: u64,
    pub height: u32,
    pub generation: u32,
    pub blocks: u64,
    pub parent: u64,
}

impl InodeData {
    pub fn is_free(&self) -> bool {
        self.mode == 0
    }
    pub fn file_type(&self) -> u32 {
        self.mode & S_IFMT
    }
    pub fn is_dir(&self) -> bool {
        self.file_type() == S_IFDIR
    }
    pub fn is_reg(&self) -> bool {
        self.file_type() == S_IFREG
    }
    pub fn is_symlink(&self) -> bool {
        self.file_type() == S_IFLNK
    }
    /// A FIFO, device or socket (`is_special`).
    pub fn is_special(&self) -> bool {
        is_special(self.mode)
    }
    /// The device number of a character or block device (kept in the root word), else 0.
    pub fn rdev(&self) -> u64 {
        if is_device(self.mode) { self.root } else { 0 }
    }

    /// The first 80 bytes of the record (everything but the inline symlink area).
    pub fn encode(&self) -> [u8; 80] {
        let mut b = [0u8; 80];
        b[0..4].copy_from_slice(&self.mode.to_le_bytes());
        b[4..8].copy_from_slice(&self.nlink.to_le_bytes());
        b[8..12].copy_from_slice(&self.uid.to_le_bytes());
        b[12..16].copy_from_slice(&self.gid.to_le_bytes());
        b[16..24].copy_from_slice(&self.size.to_le_bytes());
        b[24..32].copy_from_slice(&self.atime.to_le_bytes());
        b[32..40].copy_from_slice(&self.mtime.to_le_bytes());
        b[40..48].copy_from_slice(&self.ctime.to_le_bytes());
        b[48..56].copy_from_slice(&self.root.to_le_bytes());
        b[56..60].copy_from_slice(&self.height.to_le_bytes());
        b[60..64].copy_from_slice(&self.generation.to_le_bytes());
        b[64..72].copy_from_slice(&self.blocks.to_le_bytes());
        b[72..80].copy_from_slice(&self.parent.to_le_bytes());
        b
    }

    /// The fields of the record at the start of `b` (at least `field::INLINE` bytes).
    ///
    /// One unaligned copy of the record's bytes, not a load and a store per field: a
    /// snapshot built field by field is later copied whole with wider loads, which cannot
    /// take their bytes from the narrower stores still in the store buffer and wait for
    /// them to reach the cache (a stat through the shim copied it twice).
    #[inline]
    pub fn decode(b: &[u8]) -> InodeData {
        let b = &b[..RECORD_FIELDS];
        // SAFETY: `b` holds RECORD_FIELDS bytes; InodeData is repr(C) with exactly the
        // record's fields at the record's offsets and no padding (asserted at compile time
        // below), every field is a plain integer (any bit pattern is valid), and the record
        // is little-endian like x86_64, the only target of engram-pmem.
        unsafe { std::ptr::read_unaligned(b.as_ptr().cast::<InodeData>()) }
    }
}

/// Bytes of the record that `InodeData` holds: everything before the inline target.
const RECORD_FIELDS: usize = field::INLINE as usize;

// `InodeData::decode` copies the record as it lies: the struct must be the record.
macro_rules! fields_at_record_offsets {
    ($($field:ident = $at:ident),* $(,)?) => {
        $(assert!(std::mem::offset_of!(InodeData, $field) == field::$at as usize);)*
    };
}
const _: () = {
    assert!(std::mem::size_of::<InodeData>() == RECORD_FIELDS);
    fields_at_record_offsets!(
        mode = MODE,
        nlink = NLINK,
        uid = UID,
        gid = GID,
        size = SIZE,
        atime = ATIME,
        mtime = MTIME,
        ctime = CTIME,
        root = ROOT,
        height = HEIGHT,
        generation = GENERATION,
        blocks = BLOCKS,
        parent = PARENT,
    );
    #[cfg(not(target_endian = "little"))]
    panic!("inode records are little-endian");
};

/// Read an inode record as it is now (callers that race with the server validate with the
/// inode's sequence counter).
pub fn read(pool: &Pool, geo: &Geometry, ino: u64) -> InodeData {
    let mut b = [0u8; 80];
    pool.read(geo.inode_addr(ino), &mut b);
    InodeData::decode(&b)
}

/// Read the inline symlink target bytes.
pub fn read_inline(pool: &Pool, geo: &Geometry, ino: u64, len: usize) -> Vec<u8> {
    let mut b = vec![0u8; len.min(field::INLINE_LEN as usize)];
    pool.read(geo.inode_addr(ino) + field::INLINE, &mut b);
    b
}

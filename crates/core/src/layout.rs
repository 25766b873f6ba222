//! On-media geometry and the superblock (see docs/format.md for the byte-level description).

use crate::error::{Error, Result};
use engram_pmem::Pool;

pub const PAGE: u64 = 4096;
pub const INODE_SIZE: u64 = 128;
pub const MAGIC: u64 = u64::from_le_bytes(*b"ENGRAMFS");
/// 2: a regular file of up to `index::SMALL` pages keeps its index in its inode (a small
/// node). A binary of version 1 would take such a root for a corrupt pointer, so it is
/// refused such a pool; this one opens both, and a pool it opens becomes version 2.
pub const FORMAT_VERSION: u32 = 2;
/// The oldest format version this binary opens.
pub const OLDEST_FORMAT_VERSION: u32 = 1;
pub const ROOT_INO: u64 = 1;
/// Superblock copies live in pages 0 and 1.
const SB_COPIES: [u64; 2] = [0, PAGE];
/// Bytes of the superblock covered by its checksum (the crc itself follows).
const SB_BODY: usize = 160;
/// The smallest pool that can hold the format with room for a few files.
pub const MIN_POOL_SIZE: u64 = 1 << 20;

/// Where each area of the pool starts and how big it is. Everything is page aligned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    pub pool_size: u64,
    pub log_off: u64,
    pub log_len: u64,
    pub bitmap_off: u64,
    pub bitmap_len: u64,
    pub inode_off: u64,
    pub inode_count: u64,
    pub meta_off: u64,
    pub meta_pages: u64,
    pub data_off: u64,
    pub data_pages: u64,
}

fn round_up(v: u64, to: u64) -> u64 {
    v.div_ceil(to) * to
}

/// One metadata page per `bytes_per_meta_page` bytes of a pool of `size` bytes, at least 16.
fn meta_pages(size: u64, bytes_per_meta_page: u64) -> u64 {
    (size / bytes_per_meta_page).max(16)
}

/// 1/64 of the pool, within 256 KiB..64 MiB.
fn default_log(size: u64) -> u64 {
    round_up((size / 64).clamp(256 << 10, 64 << 20), PAGE)
}

/// Bytes of pool per metadata page unless mkfs is told otherwise: 1/16 of the pool.
pub const DEFAULT_BYTES_PER_META_PAGE: u64 = 64 << 10;
/// The fewest bytes of pool per metadata page (half the pool in metadata pages).
pub const MIN_BYTES_PER_META_PAGE: u64 = 8 << 10;

impl Geometry {
    /// Lay out a pool of `size` bytes: 1/64 log (256 KiB..64 MiB), one inode per 8 KiB,
    /// 1/16 metadata pages, the rest data pages.
    pub fn for_size(size: u64) -> Result<Geometry> {
        Geometry::with_log(size, default_log(size))
    }

    /// The same layout with a log of `log_len` bytes (a small log makes checkpoints and
    /// wrap-around frequent, which the crash harness wants).
    pub fn with_log(size: u64, log_len: u64) -> Result<Geometry> {
        Geometry::laid_out(size, log_len, meta_pages(size, DEFAULT_BYTES_PER_META_PAGE))
    }

    /// The layout with one metadata page per `bytes_per_meta_page` bytes of pool. Every
    /// file of more than `index::SMALL` pages takes one for its index, and every directory
    /// with entries at least one: a pool for many such files wants more than the default.
    pub fn with_meta_ratio(size: u64, bytes_per_meta_page: u64) -> Result<Geometry> {
        if bytes_per_meta_page < MIN_BYTES_PER_META_PAGE {
            return Err(Error::with_msg(
                libc::EINVAL,
                format!(
                    "one metadata page per {bytes_per_meta_page} bytes is too many: at most \
                     one per {MIN_BYTES_PER_META_PAGE} bytes (half the pool)"
                ),
            ));
        }
        Geometry::laid_out(
            size,
            default_log(size),
            meta_pages(size, bytes_per_meta_page),
        )
    }

    /// The layout of a pool of `size` bytes with a log of `log_len` bytes and `meta_pages`
    /// metadata pages (what a superblock records: opening checks it against this).
    pub fn laid_out(size: u64, log_len: u64, meta_pages: u64) -> Result<Geometry> {
        if log_len < 4 * PAGE || !log_len.is_multiple_of(PAGE) {
            return Err(Error::with_msg(
                libc::EINVAL,
                "the log must be at least 16 KiB and page aligned",
            ));
        }
        if size < MIN_POOL_SIZE {
            return Err(Error::with_msg(
                libc::EINVAL,
                format!(
                    "a pool of {size} bytes is too small: the format needs at least {} MiB",
                    MIN_POOL_SIZE >> 20
                ),
            ));
        }
        if !size.is_multiple_of(PAGE) {
            return Err(Error::with_msg(
                libc::EINVAL,
                format!("pool size {size} is not a multiple of {PAGE} bytes"),
            ));
        }
        let inode_count = (size / 8192).max(64);
        let inode_bytes = round_up(inode_count * INODE_SIZE, PAGE);
        if meta_pages < 16 || meta_pages > size / MIN_BYTES_PER_META_PAGE {
            return Err(Error::with_msg(
                libc::EINVAL,
                format!("{meta_pages} metadata pages do not fit a pool of {size} bytes"),
            ));
        }
        let log_off = 2 * PAGE;
        let fixed = log_off + log_len + inode_bytes + meta_pages * PAGE;
        if fixed + 64 * PAGE > size {
            return Err(Error::with_msg(
                libc::EINVAL,
                "pool too small for its metadata",
            ));
        }
        // Bitmaps cover inodes, metadata pages and data pages; data pages are what is left,
        // so size the bitmap for an upper bound of them.
        let max_data = (size - fixed) / PAGE;
        let bitmap_len = round_up((inode_count + meta_pages + max_data).div_ceil(8), PAGE);
        let bitmap_off = log_off + log_len;
        let inode_off = bitmap_off + bitmap_len;
        let meta_off = inode_off + inode_bytes;
        let data_off = meta_off + meta_pages * PAGE;
        if data_off + 16 * PAGE > size {
            return Err(Error::with_msg(
                libc::EINVAL,
                "pool too small for its metadata",
            ));
        }
        let data_pages = (size - data_off) / PAGE;
        Ok(Geometry {
            pool_size: size,
            log_off,
            log_len,
            bitmap_off,
            bitmap_len,
            inode_off,
            inode_count,
            meta_off,
            meta_pages,
            data_off,
            data_pages,
        })
    }

    #[inline]
    pub fn inode_addr(&self, ino: u64) -> u64 {
        self.inode_off + ino * INODE_SIZE
    }

    /// The small node of inode `ino`: the root of the index of a regular file of up to
    /// `index::SMALL` pages, kept in the inode's last 56 bytes (`inode::field::SMALL_NODE`).
    pub fn small_node(&self, ino: u64) -> u64 {
        self.inode_addr(ino) + crate::inode::field::SMALL_NODE
    }

    /// Whether `off` is some inode's small node (see `small_node`).
    pub fn is_small_node(&self, off: u64) -> bool {
        off >= self.inode_off
            && off < self.inode_off + self.inode_count * INODE_SIZE
            && (off - self.inode_off) % INODE_SIZE == crate::inode::field::SMALL_NODE
    }

    pub fn is_meta_page(&self, off: u64) -> bool {
        off.is_multiple_of(PAGE) && off >= self.meta_off && off < self.data_off
    }

    pub fn is_data_page(&self, off: u64) -> bool {
        off.is_multiple_of(PAGE)
            && off >= self.data_off
            && off < self.data_off + self.data_pages * PAGE
    }

    /// Index of a metadata page; an offset outside the area gives an index past the end
    /// (which the bitmaps ignore) rather than a panic.
    pub fn meta_index(&self, off: u64) -> u64 {
        off.wrapping_sub(self.meta_off) / PAGE
    }

    /// Index of a data page (same rule for offsets outside the area).
    pub fn data_index(&self, off: u64) -> u64 {
        off.wrapping_sub(self.data_off) / PAGE
    }
}

/// The mutable part of the superblock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Superblock {
    pub geometry: Geometry,
    /// Bumped on every superblock write; the valid copy with the larger value wins.
    pub generation: u64,
    /// 1 when the pool was unmounted cleanly (bitmaps valid, log empty).
    pub clean: u64,
    /// Byte offset inside the log of the first record recovery must replay.
    pub log_head: u64,
    /// Sequence number of the record at `log_head`.
    pub log_head_seq: u64,
    pub uuid: u64,
    pub created_ns: u64,
}

impl Superblock {
    fn encode(&self) -> [u8; SB_BODY + 4] {
        let g = &self.geometry;
        let words = [
            MAGIC,
            FORMAT_VERSION as u64 | (PAGE << 32),
            g.pool_size,
            g.log_off,
            g.log_len,
            g.bitmap_off,
            g.bitmap_len,
            g.inode_off,
            g.inode_count,
            g.meta_off,
            g.meta_pages,
            g.data_off,
            g.data_pages,
            self.generation,
            self.clean,
            self.log_head,
            self.log_head_seq,
            self.uuid,
            self.created_ns,
            INODE_SIZE,
        ];
        let mut out = [0u8; SB_BODY + 4];
        for (i, w) in words.iter().enumerate() {
            out[i * 8..i * 8 + 8].copy_from_slice(&w.to_le_bytes());
        }
        let crc = crate::oplog::crc::crc32c(&out[..SB_BODY]);
        out[SB_BODY..].copy_from_slice(&crc.to_le_bytes());
        out
    }

    fn decode(b: &[u8]) -> std::result::Result<Superblock, String> {
        let w = |i: usize| u64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().unwrap());
        if w(0) != MAGIC {
            return Err("bad magic: not an EngramFS pool".into());
        }
        let crc = u32::from_le_bytes(b[SB_BODY..SB_BODY + 4].try_into().unwrap());
        if crc != crate::oplog::crc::crc32c(&b[..SB_BODY]) {
            return Err("superblock checksum mismatch".into());
        }
        let version = w(1) as u32;
        if !(OLDEST_FORMAT_VERSION..=FORMAT_VERSION).contains(&version)
            || w(1) >> 32 != PAGE
            || w(19) != INODE_SIZE
        {
            return Err(format!("unsupported format version {version}"));
        }
        let geometry = Geometry {
            pool_size: w(2),
            log_off: w(3),
            log_len: w(4),
            bitmap_off: w(5),
            bitmap_len: w(6),
            inode_off: w(7),
            inode_count: w(8),
            meta_off: w(9),
            meta_pages: w(10),
            data_off: w(11),
            data_pages: w(12),
        };
        match Geometry::laid_out(geometry.pool_size, geometry.log_len, geometry.meta_pages) {
            Ok(expected) if expected == geometry => {}
            _ => return Err("superblock geometry is inconsistent".into()),
        }
        let sb = Superblock {
            geometry,
            generation: w(13),
            clean: w(14),
            log_head: w(15),
            log_head_seq: w(16),
            uuid: w(17),
            created_ns: w(18),
        };
        if !sb.log_head.is_multiple_of(64) || sb.log_head >= geometry.log_len {
            return Err("superblock log head out of range".into());
        }
        Ok(sb)
    }

    /// Problems with either copy (fsck): each must decode and match the one in use.
    pub fn check_copies(&self, pool: &Pool) -> Vec<String> {
        let mut out = Vec::new();
        for (i, &at) in SB_COPIES.iter().enumerate() {
            match Superblock::decode(pool.slice(at, (SB_BODY + 4) as u64)) {
                Err(e) => out.push(format!("superblock copy {i} is invalid: {e}")),
                Ok(sb) if sb != *self => out.push(format!("superblock copy {i} is stale")),
                Ok(_) => {}
            }
        }
        out
    }

    /// Read both copies and return the newest valid one, or say why the pool is unusable.
    pub fn load(pool: &Pool) -> Result<Superblock> {
        Superblock::load_noting_damage(pool).map(|(sb, _)| sb)
    }

    /// `load`, and what is wrong with a copy that does not validate while the other does
    /// (a torn update at a crash, or damage): "copy 0: bad checksum".
    pub fn load_noting_damage(pool: &Pool) -> Result<(Superblock, Vec<String>)> {
        if pool.len() < 2 * PAGE {
            return Err(Error::corrupt(format!(
                "pool file is only {} bytes: not an EngramFS pool",
                pool.len()
            )));
        }
        let mut best: Option<Superblock> = None;
        let mut errors = Vec::new();
        for (i, &at) in SB_COPIES.iter().enumerate() {
            match Superblock::decode(pool.slice(at, (SB_BODY + 4) as u64)) {
                Ok(sb) if best.is_none_or(|b| sb.generation > b.generation) => best = Some(sb),
                Ok(_) => {}
                Err(e) => errors.push(format!("copy {i}: {e}")),
            }
        }
        let sb = best.ok_or_else(|| {
            let all_foreign = errors.iter().all(|e| e.contains("bad magic"));
            if all_foreign {
                Error::corrupt("not an EngramFS pool (no superblock magic)")
            } else {
                Error::corrupt(format!(
                    "both superblocks are invalid ({})",
                    errors.join("; ")
                ))
            }
        })?;
        // A device may be larger than the pool formatted on it (mkfs --size); a file is
        // exactly the pool.
        let fits = if pool.backing().is_device() {
            sb.geometry.pool_size <= pool.len()
        } else {
            sb.geometry.pool_size == pool.len()
        };
        if !fits {
            return Err(Error::corrupt(format!(
                "pool is truncated or resized: superblock says {} bytes, {} has {}",
                sb.geometry.pool_size,
                pool.backing(),
                pool.len()
            )));
        }
        Ok((sb, errors))
    }

    /// Persist a new version: copy A, then copy B, each persisted before the next, so that a
    /// torn write leaves at least one valid copy.
    pub fn store(&mut self, pool: &Pool) {
        self.generation += 1;
        let bytes = self.encode();
        for &at in &SB_COPIES {
            pool.write(at, &bytes);
            pool.persist(at, bytes.len() as u64);
        }
    }
}

pub fn now_ns() -> i64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    t.as_nanos() as i64
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The superblock of a pool of `version`, as the binary of that version wrote it.
    fn written_as(version: u32) -> [u8; SB_BODY + 4] {
        let sb = Superblock {
            geometry: Geometry::for_size(16 << 20).unwrap(),
            generation: 1,
            clean: 1,
            log_head: 0,
            log_head_seq: 1,
            uuid: 7,
            created_ns: 1,
        };
        let mut b = sb.encode();
        b[8..12].copy_from_slice(&version.to_le_bytes());
        let crc = crate::oplog::crc::crc32c(&b[..SB_BODY]);
        b[SB_BODY..].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Version 1 pools (no small nodes) open; a version from the future does not.
    #[test]
    fn versions_one_and_two_open_and_no_other() {
        assert!(Superblock::decode(&written_as(1)).is_ok());
        assert!(Superblock::decode(&written_as(2)).is_ok());
        let e = Superblock::decode(&written_as(3)).unwrap_err();
        assert!(e.contains("unsupported format version 3"), "{e}");
        assert!(Superblock::decode(&written_as(0)).is_err());
    }

    /// A small node is where an inode's bytes 72..128 are, and nowhere else.
    #[test]
    fn small_nodes_lie_in_inodes() {
        let g = Geometry::for_size(16 << 20).unwrap();
        assert!(g.is_small_node(g.small_node(1)));
        assert!(g.is_small_node(g.small_node(g.inode_count - 1)));
        assert!(!g.is_small_node(g.inode_addr(1)));
        assert!(!g.is_small_node(g.small_node(1) + 8));
        assert!(!g.is_small_node(g.small_node(g.inode_count)));
        assert!(!g.is_small_node(g.meta_off + 72));
    }
}

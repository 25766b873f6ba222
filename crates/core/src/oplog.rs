//! The operation log: a circular redo log of checksummed records of physical updates.
//!
//! Each record lists absolute stores (never deltas) into the inode table and metadata pages,
//! so replaying it any number of times gives the same result. A record is persisted before
//! any of its stores is applied in place (log before apply).

pub(crate) mod crc;
mod replay;

pub use replay::{Replayed, count_valid, replay};

use crate::error::{Error, Result};
use crate::layout::Geometry;
use engram_pmem::{CACHE_LINE, Pool};
use std::slice::ChunksExactMut;

const RECORD_MAGIC: u32 = u32::from_le_bytes(*b"ELOG");
const HEADER: usize = 32;
const KIND_OPS: u32 = 0;
const KIND_WRAP: u32 = 1;
const OFF_MASK: u64 = (1 << 48) - 1;
const TAG_SET: u64 = 1;
const TAG_SEQ: u64 = 2;
const TAG_BYTES: u64 = 3;

/// One physical update.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Entry {
    /// Store `value` (1, 2, 4 or 8 bytes wide) at `off`.
    Set { off: u64, width: u8, value: u64 },
    /// Store `count` u64 words at `off`, word i = `start + i * step`.
    Seq {
        off: u64,
        count: u64,
        start: u64,
        step: u64,
    },
    /// Store these bytes at `off`.
    Bytes { off: u64, data: Vec<u8> },
    /// Store the first `len` (1..=8) bytes of `data` at `off`; the rest of `data` is zero.
    /// Logged exactly as `Bytes` (replay decodes such a `Bytes` entry as this), but made
    /// without an allocation: directory fingerprint stores are all this small.
    Short { off: u64, len: u8, data: [u8; 8] },
}

impl Entry {
    pub fn set64(off: u64, value: u64) -> Entry {
        Entry::Set {
            off,
            width: 8,
            value,
        }
    }
    pub fn set32(off: u64, value: u32) -> Entry {
        Entry::Set {
            off,
            width: 4,
            value: value as u64,
        }
    }

    /// A `Short` store of `bytes` (at most 8) at `off`.
    pub fn short(off: u64, bytes: &[u8]) -> Entry {
        let mut data = [0u8; 8];
        data[..bytes.len()].copy_from_slice(bytes);
        Entry::Short {
            off,
            len: bytes.len() as u8,
            data,
        }
    }

    fn range(&self) -> (u64, u64) {
        match self {
            Entry::Set { off, width, .. } => (*off, *width as u64),
            Entry::Seq { off, count, .. } => (*off, count.saturating_mul(8)),
            Entry::Bytes { off, data } => (*off, data.len() as u64),
            Entry::Short { off, len, .. } => (*off, *len as u64),
        }
    }

    fn encoded_len(&self) -> usize {
        match self {
            Entry::Set { .. } => 16,
            Entry::Seq { .. } => 32,
            Entry::Bytes { data, .. } => 16 + data.len().div_ceil(8) * 8,
            Entry::Short { .. } => 24,
        }
    }

    /// Encode into the next `encoded_len / 8` words of `out` (zeroed).
    fn encode(&self, out: &mut ChunksExactMut<'_, u8>) {
        let mut word = |w: u64| {
            if let Some(at) = out.next() {
                at.copy_from_slice(&w.to_le_bytes());
            }
        };
        match self {
            Entry::Set { off, width, value } => {
                word(off | (*width as u64) << 48 | TAG_SET << 56);
                word(*value);
            }
            Entry::Seq {
                off,
                count,
                start,
                step,
            } => {
                word(off | TAG_SEQ << 56);
                word(*count);
                word(*start);
                word(*step);
            }
            Entry::Short { off, len, data } => {
                word(off | TAG_BYTES << 56);
                word(*len as u64);
                word(u64::from_le_bytes(*data));
            }
            Entry::Bytes { off, data } => {
                word(off | TAG_BYTES << 56);
                word(data.len() as u64);
                for (src, at) in data.chunks(8).zip(out) {
                    at[..src.len()].copy_from_slice(src);
                }
            }
        }
    }

    /// Decode one entry from `b`; returns it and the bytes consumed.
    fn decode(b: &[u8]) -> Option<(Entry, usize)> {
        let w = |i: usize| -> Option<u64> {
            b.get(i * 8..i * 8 + 8)
                .map(|s| u64::from_le_bytes(s.try_into().unwrap()))
        };
        let w0 = w(0)?;
        let off = w0 & OFF_MASK;
        match w0 >> 56 {
            TAG_SET => {
                let width = ((w0 >> 48) & 0xff) as u8;
                if !matches!(width, 1 | 2 | 4 | 8) {
                    return None;
                }
                Some((
                    Entry::Set {
                        off,
                        width,
                        value: w(1)?,
                    },
                    16,
                ))
            }
            TAG_SEQ => Some((
                Entry::Seq {
                    off,
                    count: w(1)?,
                    start: w(2)?,
                    step: w(3)?,
                },
                32,
            )),
            TAG_BYTES => {
                let len = w(1)? as usize;
                let data = b.get(16..16 + len)?;
                let e = if (1..=8).contains(&len) {
                    Entry::short(off, data)
                } else {
                    Entry::Bytes {
                        off,
                        data: data.to_vec(),
                    }
                };
                Some((e, 16 + len.div_ceil(8) * 8))
            }
            _ => None,
        }
    }

    /// Perform the store (not written back); returns the range stored to.
    #[inline(always)]
    fn store(&self, pool: &Pool) -> (u64, u64) {
        match self {
            Entry::Set { off, width, value } => {
                match width {
                    1 => pool.store_u8(*off, *value as u8),
                    2 => pool.write(*off, &(*value as u16).to_le_bytes()),
                    4 => pool.store_u32(*off, *value as u32),
                    _ => pool.store_u64(*off, *value),
                }
                (*off, *width as u64)
            }
            Entry::Seq {
                off,
                count,
                start,
                step,
            } => {
                for i in 0..*count {
                    pool.store_u64(off + i * 8, start.wrapping_add(i.wrapping_mul(*step)));
                }
                (*off, count.saturating_mul(8))
            }
            Entry::Bytes { off, data } => {
                pool.write(*off, data);
                (*off, data.len() as u64)
            }
            Entry::Short { off, len, data } => {
                match len {
                    1 => pool.store_u8(*off, data[0]),
                    _ => pool.write(*off, &data[..*len as usize]),
                }
                (*off, *len as u64)
            }
        }
    }

    /// Perform the store and flush it (no fence).
    pub fn apply(&self, pool: &Pool) {
        let (off, len) = self.store(pool);
        pool.flush(off, len);
    }
}

/// Lines the records' in-place stores changed and that are not yet written back, as up to
/// `RUNS` runs of whole lines `[start, end)`.
///
/// The log makes the in-place stores redundant until a checkpoint moves the head past
/// their records, so they need not be durable sooner: the server writes them back at a
/// durability point (checkpoint, fsync, unmount), or the older half of them when a new
/// line finds no run free, never right after the stores. Written back at once, the first
/// locked instruction after them waited for the write-backs to finish (a third of a 4 KiB
/// overwrite). Written back with the next record (until 2026-11-26), the lines every
/// operation on a file stores to again (its inode, the index leaf, a directory's inode)
/// were written back every time, and where `clwb` evicts the line (AMD's processors: a
/// load after it takes 435 cycles here, 47 without) the next operation's stores and
/// loads missed on each; on persistent memory every write-back also costs media
/// bandwidth. Kept, a hot line stays in the newer runs and is written back once per
/// checkpoint or per `RUNS / 2` distinct runs.
///
/// Kept as two arrays of words, not one of pairs: a pair just stored as two words and read
/// back as one 16-byte load (a copy, a swap) cannot be forwarded from the store buffer, and
/// such a load waits for every earlier store, here the record's stores into lines that
/// missed (13 % of a create at 1,000,000 entries, `perf annotate`).
#[derive(Clone, Debug)]
pub struct Unflushed {
    starts: [u64; Unflushed::RUNS],
    ends: [u64; Unflushed::RUNS],
    n: usize,
}

impl Default for Unflushed {
    fn default() -> Unflushed {
        Unflushed {
            starts: [0; Unflushed::RUNS],
            ends: [0; Unflushed::RUNS],
            n: 0,
        }
    }
}

impl Unflushed {
    /// Runs kept: a few operations' worth of distinct lines. Each store looks through them.
    pub const RUNS: usize = 32;
    /// Runs a new line is looked for in, newest first.
    const SEARCHED: usize = 8;

    /// The runs, as `[start, end)` byte ranges of whole lines.
    pub fn ranges(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        (0..self.n).map(|i| (self.starts[i], self.ends[i]))
    }

    /// Write the lines back (not fenced) and forget them.
    pub fn flush(&mut self, pool: &Pool) {
        self.write_back(pool, self.n);
        self.n = 0;
    }

    /// Write back the oldest `count` runs (not fenced).
    fn write_back(&self, pool: &Pool, count: usize) {
        for i in 0..count {
            pool.flush(self.starts[i], self.ends[i] - self.starts[i]);
        }
    }

    /// Add the lines of `[off, off + len)`; when no run is free for them, the older half
    /// of the runs is written back first (not fenced: the next record's fence or a
    /// durability point drains them).
    fn add(&mut self, pool: &Pool, off: u64, len: u64) {
        const LINE: u64 = CACHE_LINE - 1;
        let (start, end) = (off & !LINE, (off + len + LINE) & !LINE);
        // Only the newest runs are searched: a record's stores mostly fall in lines it or
        // the record before stored to, and a search of all 32 took a tenth of a create. A
        // line found in no run searched gets a run of its own, and may be written back
        // twice.
        let last = self.n.wrapping_sub(1);
        for i in (self.n.saturating_sub(Self::SEARCHED)..self.n).rev() {
            let (s, e) = (self.starts[i], self.ends[i]);
            // Overlapping or touching: one run (never a line that was not stored to).
            if start <= e && s <= end {
                let merged = (s.min(start), e.max(end));
                // Made the newest, so that a line stored to again and again stays among
                // the runs searched and is not written back with the older half.
                if i != last {
                    (self.starts[i], self.ends[i]) = (self.starts[last], self.ends[last]);
                }
                (self.starts[last], self.ends[last]) = merged;
                return;
            }
        }
        if self.n == Self::RUNS {
            // The older half goes back; the newer, where the lines stored to again are,
            // stays.
            let half = Self::RUNS / 2;
            self.write_back(pool, half);
            self.starts.copy_within(half.., 0);
            self.ends.copy_within(half.., 0);
            self.n -= half;
        }
        (self.starts[self.n], self.ends[self.n]) = (start, end);
        self.n += 1;
    }
}

/// Apply every entry of a record in place, not written back: the lines it stored to are
/// added to `lines`, for the caller to write back by its next durability point. Filled
/// in place rather than returned: copying the returned runs out reloaded words just stored
/// in halves, a load the store buffer cannot forward, which waited for every earlier store
/// (`perf annotate`: 15 % of a create at 1,000,000 entries).
///
/// Each cache line is written back once, after the record's last store to it, instead of
/// once per entry: an append's size, block count and times share the inode's line. No fence
/// separates the entries, so one write-back of the line's final contents persists what the
/// several did.
pub fn apply_all(pool: &Pool, entries: &[Entry], lines: &mut Unflushed) {
    for e in entries {
        let (off, len) = e.store(pool);
        if len != 0 {
            lines.add(pool, off, len);
        }
    }
}

/// The log writer: where the next record goes and how much space the records since the last
/// checkpoint take.
#[derive(Debug)]
pub struct Log {
    off: u64,
    len: u64,
    /// Byte offset (inside the log) of the next record.
    tail: u64,
    next_seq: u64,
    /// Bytes used since the last checkpoint (records and wrap padding).
    used: u64,
    /// Records appended and wrap-arounds since the log was opened (statistics).
    pub appended: u64,
    pub wraps: u64,
    buf: Vec<u8>,
}

/// Where the log stands after a checkpoint: what the superblock records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogHead {
    pub head: u64,
    pub seq: u64,
}

impl Log {
    pub fn new(geo: &Geometry, head: LogHead) -> Log {
        Log {
            off: geo.log_off,
            len: geo.log_len,
            tail: head.head,
            next_seq: head.seq,
            used: 0,
            appended: 0,
            wraps: 0,
            buf: Vec::new(),
        }
    }

    /// The largest record accepted: a quarter of the log, so that a checkpoint always makes room.
    pub fn max_record(&self) -> u64 {
        self.len / 4
    }

    pub fn record_len(entries: &[Entry]) -> u64 {
        let body: usize = entries.iter().map(Entry::encoded_len).sum();
        ((HEADER + body).div_ceil(64) * 64) as u64
    }

    /// Whether a checkpoint should happen before appending a record of `len` bytes.
    pub fn needs_checkpoint(&self, len: u64) -> bool {
        // Room for the record, a possible wrap padding of up to one record, and a gap line.
        self.used + 2 * len + 64 > self.len || self.used > self.len / 2
    }

    pub fn used(&self) -> u64 {
        self.used
    }

    /// The sequence number the next record gets.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// The head a checkpoint taken now would record: everything so far is applied.
    pub fn checkpoint(&mut self) -> LogHead {
        self.used = 0;
        if self.tail == self.len {
            self.tail = 0;
        }
        LogHead {
            head: self.tail,
            seq: self.next_seq,
        }
    }

    /// Append a record of `len` bytes (`record_len(entries)`) and make it durable. The
    /// caller has made sure it fits (`needs_checkpoint` false) and that everything it
    /// depends on is persisted.
    pub fn append(&mut self, pool: &Pool, entries: &[Entry], len: u64) -> Result<()> {
        debug_assert_eq!(len, Log::record_len(entries));
        if len > self.max_record() {
            return Err(Error::with_msg(
                libc::EFBIG,
                "operation too large for the log",
            ));
        }
        if self.tail == self.len {
            // The last record ended exactly at the end: replay wraps there by itself.
            self.tail = 0;
        } else if self.tail + len > self.len {
            let pad = self.len - self.tail;
            self.write_record(pool, KIND_WRAP, &[], pad);
            // Durable before the record after it: a valid record must never follow a
            // torn one (replay takes that for a damaged log).
            pool.fence();
            self.used += pad;
            self.tail = 0;
            self.wraps += 1;
        }
        self.write_record(pool, KIND_OPS, entries, len);
        self.appended += 1;
        self.used += len;
        self.tail += len;
        pool.fence();
        Ok(())
    }

    fn write_record(&mut self, pool: &Pool, kind: u32, entries: &[Entry], len: u64) {
        // A wrap record only needs its header; the rest of the log end is left as it is.
        let body_len = if kind == KIND_WRAP {
            HEADER
        } else {
            len as usize
        };
        // Header: magic, kind, length, checksum (0 while it is computed), sequence number,
        // 8 reserved bytes; then the entries; zero padding to `body_len`.
        let mut buf = std::mem::take(&mut self.buf);
        buf.clear();
        buf.resize(body_len, 0);
        let mut out = buf.chunks_exact_mut(8);
        for w in [
            RECORD_MAGIC as u64 | (kind as u64) << 32,
            len,
            self.next_seq,
            0,
        ] {
            if let Some(at) = out.next() {
                at.copy_from_slice(&w.to_le_bytes());
            }
        }
        for e in entries {
            e.encode(&mut out);
        }
        let crc = crc::crc32c(&buf);
        buf[12..16].copy_from_slice(&crc.to_le_bytes());
        pool.copy_nt(self.off + self.tail, &buf);
        self.next_seq += 1;
        self.buf = buf;
    }
}

#[cfg(test)]
#[path = "oplog_tests.rs"]
mod tests;

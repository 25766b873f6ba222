//! Replay of the operation log at recovery, and the checks of its records.

use super::{Entry, HEADER, KIND_WRAP, LogHead, RECORD_MAGIC, apply_all, crc};
use crate::error::{Error, Result};
use crate::layout::Geometry;
use engram_pmem::Pool;

/// What replay found.
#[derive(Debug)]
pub struct Replayed {
    pub records: u64,
    /// Where the log ends: the next record goes here.
    pub end: LogHead,
}

/// A valid record found by a scan of the log.
#[derive(Clone, Copy, Debug)]
struct Found {
    pos: u64,
    len: u64,
    kind: u32,
    seq: u64,
}

/// Replay every valid record from `head`, in order, applying its stores. Idempotent.
///
/// The log ends at the first record that fails its checks (magic, the next sequence number,
/// length, checksum): a torn last record is normal after a crash. But a record can only be
/// written once every earlier one is durable, so a valid record with a later sequence
/// number anywhere in the log means the failing one was committed and is now damaged:
/// replaying past it is impossible and stopping there would drop committed operations, so
/// that is refused as corruption. So is a valid record that cannot be decoded or that
/// targets anything outside the inode table and the metadata pages. Everything is checked
/// before anything is applied: a refused log leaves the pool untouched.
pub fn replay(pool: &Pool, geo: &Geometry, head: LogHead) -> Result<Replayed> {
    let (records, end) = scan(pool, geo, head)?;
    // Lines many records store to (an inode, a directory's lines) are written back once.
    let mut lines = super::Unflushed::default();
    for entries in &records {
        apply_all(pool, entries, &mut lines);
    }
    lines.flush(pool);
    pool.fence();
    Ok(Replayed {
        records: records.len() as u64,
        end,
    })
}

/// The decoded, checked entries of an operations record.
fn record_entries(pool: &Pool, geo: &Geometry, f: &Found) -> Result<Vec<Entry>> {
    let body = pool.slice(geo.log_off + f.pos + HEADER as u64, f.len - HEADER as u64);
    let seq = f.seq;
    let entries = decode_entries(body)
        .ok_or_else(|| Error::corrupt(format!("log record {seq} has an undecodable entry")))?;
    for e in &entries {
        let (off, l) = e.range();
        if off < geo.inode_off || off.checked_add(l).is_none_or(|end| end > geo.data_off) {
            return Err(Error::corrupt(format!(
                "log record {seq} writes outside the metadata area (offset {off:#x})"
            )));
        }
    }
    Ok(entries)
}

/// The decoded entries of every operations record from `head` in order, and where the log
/// ends; refuses a log whose chain breaks before a later record (see [`replay`]). Changes
/// nothing.
fn scan(pool: &Pool, geo: &Geometry, head: LogHead) -> Result<(Vec<Vec<Entry>>, LogHead)> {
    let mut records = Vec::new();
    let mut count = 0u64;
    let mut pos = head.head;
    let mut seq = head.seq;
    let mut laps = 0u64;
    while let Some(f) = record_at(pool, geo, pos).filter(|f| f.seq == seq) {
        count += 1;
        seq += 1;
        if f.kind == KIND_WRAP {
            pos = 0;
            laps += 1;
            if laps > 2 {
                return Err(Error::corrupt("operation log wraps more than once"));
            }
            continue;
        }
        records.push(record_entries(pool, geo, &f)?);
        pos += f.len;
        if pos >= geo.log_len {
            pos = 0;
        }
        if count > geo.log_len / 64 {
            return Err(Error::corrupt(
                "operation log has more records than it can hold",
            ));
        }
    }
    if let Some(later) = later_record(pool, geo, seq) {
        return Err(Error::corrupt(format!(
            "operation log is damaged: record {seq} at log offset {pos:#x} fails its checks, \
             but record {} at log offset {:#x} was written after it; recovery would lose \
             committed operations, so the pool is left as it is",
            later.seq, later.pos
        )));
    }
    Ok((records, LogHead { head: pos, seq }))
}

/// A valid record anywhere in the log with a sequence number after `seq` (and not absurdly
/// far after it: at most as many records as the log holds).
fn later_record(pool: &Pool, geo: &Geometry, seq: u64) -> Option<Found> {
    let limit = geo.log_len / 64;
    (0..geo.log_len)
        .step_by(64)
        .filter_map(|pos| record_at(pool, geo, pos))
        .find(|f| f.seq > seq && f.seq - seq <= limit)
}

/// The record at `pos` if its header and checksum are right (any sequence number).
fn record_at(pool: &Pool, geo: &Geometry, pos: u64) -> Option<Found> {
    if pos + HEADER as u64 > geo.log_len {
        return None;
    }
    let h = pool.slice(geo.log_off + pos, HEADER as u64);
    let u32_at = |i: usize| u32::from_le_bytes(h[i..i + 4].try_into().unwrap());
    let magic = u32_at(0);
    if magic != RECORD_MAGIC {
        return None;
    }
    let kind = u32_at(4);
    let len = u32_at(8) as u64;
    let crc = u32_at(12);
    let seq = u64::from_le_bytes(h[16..24].try_into().unwrap());
    if len < HEADER as u64 || !len.is_multiple_of(64) {
        return None;
    }
    if pos + len > geo.log_len || kind > KIND_WRAP {
        return None;
    }
    let covered = if kind == KIND_WRAP {
        HEADER as u64
    } else {
        len
    };
    let mut bytes = pool.slice(geo.log_off + pos, covered).to_vec();
    bytes[12..16].fill(0);
    (crc::crc32c(&bytes) == crc).then_some(Found {
        pos,
        len,
        kind,
        seq,
    })
}

fn decode_entries(mut b: &[u8]) -> Option<Vec<Entry>> {
    let mut out = Vec::new();
    // Padding after the last entry is zero, which decodes as no tag.
    while b.len() >= 16 && b[..8] != [0u8; 8] {
        let (e, used) = Entry::decode(b)?;
        out.push(e);
        b = &b[used.min(b.len())..];
    }
    Some(out)
}

/// How many records from `head` form a valid chain (fsck compares it with the number
/// appended since the last checkpoint).
pub fn count_valid(pool: &Pool, geo: &Geometry, head: LogHead) -> u64 {
    let mut pos = head.head;
    let mut seq = head.seq;
    let mut n = 0;
    while let Some(f) = record_at(pool, geo, pos).filter(|f| f.seq == seq) {
        pos = if f.kind == KIND_WRAP {
            0
        } else {
            (pos + f.len) % geo.log_len
        };
        seq += 1;
        n += 1;
        if n > geo.log_len / 64 {
            break;
        }
    }
    n
}

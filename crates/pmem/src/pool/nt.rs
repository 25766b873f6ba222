//! Non-temporal writes into the pool: bulk copies and zeroing that bypass the cache (with
//! the partial edge lines written back), and whole lines streamed for the caller's fence.

use super::Pool;
use crate::flush::{self, CACHE_LINE};
use crate::map::Media;

/// Copies shorter than this use ordinary stores plus flushes instead of non-temporal stores.
const NT_THRESHOLD: usize = 256;

impl Pool {
    /// Whether `data` overlaps the pool range `[off, off + len)`.
    fn overlaps(&self, off: u64, data: &[u8]) -> bool {
        let (d0, d1) = (data.as_ptr() as usize, data.as_ptr() as usize + data.len());
        let p0 = self.at(off) as usize;
        d0 < p0 + data.len() && p0 < d1
    }

    /// Non-temporal bulk write of an in-bounds range of at least
    /// `NT_THRESHOLD` bytes: ordinary stores plus explicit write-back for the
    /// partial head and tail lines, `stream` for the aligned middle.
    fn nt_range(
        &self,
        off: u64,
        len: u64,
        edge: impl Fn(u64, u64),
        stream: impl FnOnce(*mut u8, u64, usize),
    ) {
        let end = off + len;
        let mid_start = off.next_multiple_of(CACHE_LINE);
        let mid_end = end / CACHE_LINE * CACHE_LINE;
        if off < mid_start {
            edge(off, mid_start - off);
        }
        stream(
            self.at(mid_start),
            mid_start - off,
            (mid_end - mid_start) as usize,
        );
        if mid_end < end {
            edge(mid_end, end - mid_end);
        }
        if self.media == Media::File {
            self.dirty.add(off, len);
        } else {
            // The partial edge lines went through the cache: write them back.
            if off < mid_start {
                self.write_back(off, 1);
            }
            if mid_end < end {
                self.write_back(mid_end, 1);
            }
        }
        // Rust requires an sfence after non-temporal stores before the memory
        // is accessed again by any means; durability still needs `fence()`.
        flush::sfence();
        self.record_lines(off, len);
    }

    /// Whole cache lines (`off` and the length multiples of 64) written with non-temporal
    /// stores whatever their number: a line written whole need not be read first, which an
    /// ordinary store does when the line is not cached (a directory entry's line in a large
    /// directory). Unlike `copy_nt` there is no `sfence` of its own: the next
    /// [`Pool::fence`] orders the stores and makes them durable, and nothing may read the
    /// lines or publish them before that fence (for unpublished structures, whose
    /// publication comes after one anyway; two fences in a row wait for the stores twice).
    /// Anything not line-aligned goes through `copy_nt`.
    #[track_caller]
    pub fn write_lines_nt(&self, off: u64, data: &[u8]) {
        let len = data.len() as u64;
        self.check(off, len, "write_lines_nt");
        if !off.is_multiple_of(CACHE_LINE)
            || !len.is_multiple_of(CACHE_LINE)
            || len == 0
            || self.overlaps(off, data)
        {
            self.copy_nt(off, data);
            return;
        }
        // SAFETY: in bounds (checked); the mapping is page aligned, so a 64-aligned offset
        // is a 64-aligned address; `data` does not overlap the range (checked).
        unsafe { flush::stream_copy(self.at(off), data.as_ptr(), data.len()) };
        if self.media == Media::File {
            self.note_dirty(off, len);
        }
        self.record_lines(off, len);
    }

    /// Bulk copy with non-temporal stores; durable after the next
    /// [`Pool::fence`]. Short copies (< 256 bytes) use `write` + `flush`.
    #[track_caller]
    #[inline(always)]
    pub fn copy_nt(&self, off: u64, data: &[u8]) {
        let len = data.len() as u64;
        self.check(off, len, "copy_nt");
        if data.len() < NT_THRESHOLD || self.overlaps(off, data) {
            self.write(off, data);
            self.flush(off, len);
            return;
        }
        self.stream_in(off, data);
    }

    /// The streaming part of `copy_nt` (range checked, long, not overlapping the pool), out
    /// of line: a short copy then costs no register saves for the AVX loop.
    #[inline(never)]
    fn stream_in(&self, off: u64, data: &[u8]) {
        let len = data.len() as u64;
        self.nt_range(
            off,
            len,
            |o, n| self.write(o, &data[(o - off) as usize..(o - off + n) as usize]),
            |dst, skip, n| {
                // SAFETY: `dst` is the 64-aligned in-bounds middle of the
                // range, `data[skip..skip + n]` its source, and they do not
                // overlap (`copy_nt`, the only caller, checked both).
                unsafe { flush::stream_copy(dst, data.as_ptr().add(skip as usize), n) }
            },
        );
    }

    /// Zero a range with non-temporal stores; durable after the next
    /// [`Pool::fence`]. Short ranges (< 256 bytes) use `fill_zero` + `flush`.
    #[track_caller]
    pub fn zero_nt(&self, off: u64, len: u64) {
        self.check(off, len, "zero_nt");
        if len < NT_THRESHOLD as u64 {
            self.fill_zero(off, len);
            self.flush(off, len);
            return;
        }
        self.nt_range(
            off,
            len,
            |o, n| self.fill_zero(o, n),
            |dst, _, n| {
                // SAFETY: `dst` is the 64-aligned in-bounds middle of the range.
                unsafe { flush::stream_zero(dst, n) }
            },
        );
    }
}

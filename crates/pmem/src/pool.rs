//! `Pool`: a mapped persistent-memory pool with bounds-checked loads, stores,
//! flushes and fences.

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::ptr;
use std::sync::atomic::{AtomicU8, AtomicU32, AtomicU64, Ordering};

use crate::device::{self, Backing};
use crate::flush::{self, FlushKind};
use crate::map::{self, Mapping, Media, PAGE};
use crate::record::{Event, Recorder, Recording};
use crate::sync::DirtyPages;

mod nt;
mod setup;

pub use setup::fd_at_or_above;

/// A mapped pool. Offsets are byte offsets from the pool base; an offset out
/// of range is a bug in the caller and panics with a clear message.
pub struct Pool {
    map: Mapping,
    len: u64,
    media: Media,
    backing: Backing,
    kind: FlushKind,
    path: Option<PathBuf>,
    file: Option<File>,
    dirty: DirtyPages,
    rec: Recorder,
}

impl fmt::Debug for Pool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pool")
            .field("len", &self.len)
            .field("media", &self.media)
            .field("backing", &self.backing)
            .field("flush", &self.kind)
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl Pool {
    // ---- bounds checks and addresses ----

    // The panics are out of line so that a check costs a compare and a branch on the
    // loads of every read, not also the stores of the panic's arguments.
    #[track_caller]
    #[inline]
    fn check(&self, off: u64, len: u64, what: &str) {
        let ok = off.checked_add(len).is_some_and(|end| end <= self.len);
        if !ok {
            out_of_bounds(what, off, len, self.len);
        }
    }

    #[track_caller]
    #[inline]
    fn check_aligned(&self, off: u64, size: u64, what: &str) {
        self.check(off, size, what);
        if !off.is_multiple_of(size) {
            misaligned(what, off, size);
        }
    }

    /// Address of `off`; only call after a bounds check.
    #[inline]
    fn at(&self, off: u64) -> *mut u8 {
        self.map.ptr().wrapping_add(off as usize)
    }

    /// The 64 bytes of the cache line at `line` (a multiple of 64 inside the mapping).
    fn line_data(&self, line: u64) -> [u8; 64] {
        let mut data = [0u8; 64];
        // SAFETY: `line` is a line overlapping a checked range; the mapping is
        // page-granular, so all 64 bytes are mapped. Races with writers only
        // yield some value of the bytes, as on the hardware.
        unsafe { ptr::copy_nonoverlapping(self.at(line), data.as_mut_ptr(), 64) };
        data
    }

    // ---- loads ----

    #[track_caller]
    pub fn load_u8(&self, off: u64) -> u8 {
        self.check(off, 1, "load_u8");
        // SAFETY: in bounds; the mapping lives as long as `self`; shared
        // locations are only accessed atomically by these methods.
        unsafe { AtomicU8::from_ptr(self.at(off)) }.load(Ordering::Acquire)
    }

    #[track_caller]
    pub fn load_u32(&self, off: u64) -> u32 {
        self.check_aligned(off, 4, "load_u32");
        // SAFETY: in bounds and 4-aligned (the mapping is page aligned).
        unsafe { AtomicU32::from_ptr(self.at(off).cast()) }.load(Ordering::Acquire)
    }

    #[track_caller]
    #[inline]
    pub fn load_u64(&self, off: u64) -> u64 {
        self.check_aligned(off, 8, "load_u64");
        // SAFETY: in bounds and 8-aligned (the mapping is page aligned).
        unsafe { AtomicU64::from_ptr(self.at(off).cast()) }.load(Ordering::Acquire)
    }

    /// Start fetching the cache line at `off` into the caches without waiting for it (a
    /// hint: nothing happens outside the pool or on machines without the instruction).
    #[inline]
    pub fn prefetch(&self, off: u64) {
        if off >= self.len {
            return;
        }
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a prefetch never faults and changes no memory; the address is inside the
        // mapping anyway.
        unsafe {
            use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
            _mm_prefetch::<_MM_HINT_T0>(self.at(off).cast_const().cast());
        }
    }

    /// Copy bytes out (may race with writers: validate with a seqlock).
    #[track_caller]
    #[inline]
    pub fn read(&self, off: u64, buf: &mut [u8]) {
        self.check(off, buf.len() as u64, "read");
        // SAFETY: source in bounds of the mapping, destination is `buf`;
        // `ptr::copy` tolerates overlap.
        unsafe { ptr::copy(self.at(off), buf.as_mut_ptr(), buf.len()) };
    }

    /// Copy `N` bytes out into an array (a fixed-size read the compiler turns into a few
    /// register moves; may race with writers: validate with a seqlock).
    #[track_caller]
    #[inline]
    pub fn read_array<const N: usize>(&self, off: u64) -> [u8; N] {
        self.check(off, N as u64, "read");
        let mut b = [0u8; N];
        // SAFETY: source in bounds of the mapping, destination a local array.
        unsafe { ptr::copy_nonoverlapping(self.at(off), b.as_mut_ptr(), N) };
        b
    }

    /// Direct view into the mapping.
    #[track_caller]
    #[inline]
    pub fn slice(&self, off: u64, len: u64) -> &[u8] {
        self.check(off, len, "slice");
        // SAFETY: in bounds; the mapping outlives the borrow of `self`.
        unsafe { std::slice::from_raw_parts(self.at(off), len as usize) }
    }

    // ---- stores (not durable until flushed and fenced) ----

    #[track_caller]
    #[inline]
    pub fn store_u8(&self, off: u64, v: u8) {
        self.check(off, 1, "store_u8");
        // SAFETY: in bounds; see `load_u8`.
        unsafe { AtomicU8::from_ptr(self.at(off)) }.store(v, Ordering::Release);
    }

    #[track_caller]
    #[inline]
    pub fn store_u32(&self, off: u64, v: u32) {
        self.check_aligned(off, 4, "store_u32");
        // SAFETY: in bounds and aligned; see `load_u32`.
        unsafe { AtomicU32::from_ptr(self.at(off).cast()) }.store(v, Ordering::Release);
    }

    /// 8-byte atomic publish store.
    #[track_caller]
    #[inline]
    pub fn store_u64(&self, off: u64, v: u64) {
        self.check_aligned(off, 8, "store_u64");
        // SAFETY: in bounds and aligned; see `load_u64`.
        unsafe { AtomicU64::from_ptr(self.at(off).cast()) }.store(v, Ordering::Release);
    }

    /// Copy bytes in with ordinary (cached) stores.
    #[track_caller]
    #[inline]
    pub fn write(&self, off: u64, data: &[u8]) {
        self.check(off, data.len() as u64, "write");
        // SAFETY: destination in bounds; `ptr::copy` tolerates `data` being a
        // view into the pool itself.
        unsafe { ptr::copy(data.as_ptr(), self.at(off), data.len()) };
    }

    /// Zero a range with ordinary stores.
    #[track_caller]
    pub fn fill_zero(&self, off: u64, len: u64) {
        self.check(off, len, "fill_zero");
        // SAFETY: in bounds.
        unsafe { ptr::write_bytes(self.at(off), 0, len as usize) };
    }

    // ---- persistence ----

    /// Write back the lines overlapping an in-bounds range, without recording.
    #[inline]
    fn write_back(&self, off: u64, len: u64) {
        if self.media == Media::File {
            self.note_dirty(off, len);
        } else {
            // SAFETY: the range is in bounds and `kind` was detected on this CPU.
            unsafe { flush::flush_range(self.kind, self.at(off), len as usize) };
        }
    }

    /// Cache-line write-back buys nothing for page-cache memory: the fence's msync makes
    /// these pages durable. Out of line: it takes a lock, the PM path only a branch.
    #[inline(never)]
    fn note_dirty(&self, off: u64, len: u64) {
        self.dirty.add(off, len);
    }

    #[inline]
    fn record_lines(&self, off: u64, len: u64) {
        if self.rec.is_on() {
            self.push_recorded_lines(off, len);
        }
    }

    /// Out of line, so that a flush outside recording mode costs one load and branch.
    #[cold]
    #[inline(never)]
    fn push_recorded_lines(&self, off: u64, len: u64) {
        self.rec.push_lines(off, len, |line| self.line_data(line));
    }

    /// Write back every cache line overlapping `[off, off + len)`. No fence.
    #[track_caller]
    #[inline]
    pub fn flush(&self, off: u64, len: u64) {
        self.check(off, len, "flush");
        if len == 0 {
            return;
        }
        self.record_lines(off, len);
        self.write_back(off, len);
    }

    /// `sfence`; for ordinary files also `msync(MS_SYNC)` of every page
    /// flushed since the last fence. An `msync` failure is not returned here:
    /// it is kept until [`Pool::take_sync_error`] takes it, so that a caller
    /// at a durability point (a log append, a checkpoint, fsync) sees a
    /// failure of any fence since its last check. [`Pool::try_fence`] also
    /// returns it directly.
    pub fn fence(&self) {
        let _ = self.try_fence();
    }

    /// [`Pool::fence`], returning the `msync` error if there is one (it is
    /// also kept for [`Pool::take_sync_error`]).
    pub fn try_fence(&self) -> io::Result<()> {
        flush::sfence();
        let result = if self.media == Media::File {
            self.dirty.sync(self.map.ptr())
        } else {
            Ok(())
        };
        if self.rec.is_on() {
            self.rec.push(Event::Fence);
        }
        result
    }

    /// The first `msync` error seen by any fence since the last call, if any.
    pub fn take_sync_error(&self) -> Option<io::Error> {
        self.dirty.take_error()
    }

    /// Fence, then report any `msync` failure since the last check: the one
    /// call a durability point needs.
    pub fn sync_point(&self) -> io::Result<()> {
        let now = self.try_fence();
        match self.take_sync_error() {
            Some(e) => Err(e),
            None => now,
        }
    }

    /// Test hook: make every `msync` of an ordinary-file pool fail with
    /// `errno` (None: behave normally again). No effect on other media,
    /// which never call `msync`.
    #[doc(hidden)]
    pub fn inject_sync_failure(&self, errno: Option<i32>) {
        self.dirty.set_fault(errno, (0, u64::MAX));
    }

    /// Test hook: as `inject_sync_failure`, for the `msync` of pages overlapping the pool
    /// range `[off, off + len)` only (a disk that fails some blocks).
    #[doc(hidden)]
    pub fn inject_sync_failure_at(&self, errno: Option<i32>, off: u64, len: u64) {
        self.dirty.set_fault(errno, (off, off.saturating_add(len)));
    }

    /// Page ranges awaiting `msync` (ordinary files only).
    #[cfg(test)]
    pub(crate) fn pending_sync(&self) -> Vec<(u64, u64)> {
        self.dirty.pending()
    }

    /// Flush and fence.
    #[track_caller]
    pub fn persist(&self, off: u64, len: u64) {
        self.flush(off, len);
        self.fence();
    }

    // ---- recording mode ----

    /// Snapshot the pool as the base image and log every flush, fence and
    /// mark from now on. Restarts the recording if one is in progress.
    pub fn start_recording(&self) {
        self.rec.start(self.slice(0, self.len).to_vec());
    }

    /// Stop recording and return what was recorded.
    pub fn stop_recording(&self) -> Option<Recording> {
        self.rec.stop()
    }

    pub fn is_recording(&self) -> bool {
        self.rec.is_on()
    }

    /// Insert a marker event (only while recording).
    pub fn mark(&self, label: u64) {
        if self.rec.is_on() {
            self.rec.push(Event::Mark(label));
        }
    }
}

#[cold]
#[inline(never)]
#[track_caller]
fn out_of_bounds(what: &str, off: u64, len: u64, pool: u64) -> ! {
    panic!(
        "engram-pmem: {what} of {len} bytes at offset {off} is outside the pool of {pool} bytes"
    );
}

#[cold]
#[inline(never)]
#[track_caller]
fn misaligned(what: &str, off: u64, size: u64) -> ! {
    panic!("engram-pmem: {what} at offset {off} is not {size}-byte aligned");
}

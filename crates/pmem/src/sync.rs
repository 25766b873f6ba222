//! Durability for ordinary files: remember the pages flushed since the last
//! fence and `msync` them at the fence.

use std::io;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use crate::map::PAGE;

/// Keep the list short: coalesce when it grows past this many ranges.
const COALESCE_AT: usize = 64;

/// Page ranges `[start, end)` (pool offsets) awaiting `msync`.
#[derive(Debug, Default)]
pub(crate) struct DirtyPages {
    ranges: Mutex<Vec<(u64, u64)>>,
    /// Held for the whole of a sync, so that a fence which finds the list
    /// empty waits until a concurrent fence's `msync` of its ranges is done.
    syncing: Mutex<()>,
    /// First `msync` error not yet taken by the caller.
    error: Mutex<Option<io::Error>>,
    /// Whether `error` holds one: every durability point asks, and almost always the
    /// answer is no, which one load gives without taking the lock.
    has_error: AtomicBool,
    /// Test hook: when non-zero, every sync of a non-empty set of ranges fails with this errno
    /// (only of ranges that overlap `[fault_start, fault_end)`).
    fault: AtomicI32,
    fault_start: AtomicU64,
    fault_end: AtomicU64,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Sort and merge overlapping or adjacent ranges in place.
fn coalesce(v: &mut Vec<(u64, u64)>) {
    v.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::with_capacity(v.len());
    for &(s, e) in v.iter() {
        match out.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(e),
            _ => out.push((s, e)),
        }
    }
    *v = out;
}

impl DirtyPages {
    /// Note that `[off, off + len)` must be synced at the next fence.
    pub(crate) fn add(&self, off: u64, len: u64) {
        if len == 0 {
            return;
        }
        let start = off / PAGE * PAGE;
        let end = (off + len).div_ceil(PAGE) * PAGE;
        let mut v = lock(&self.ranges);
        if let Some(last) = v.last_mut()
            && start <= last.1
            && end >= last.0
        {
            last.0 = last.0.min(start);
            last.1 = last.1.max(end);
            return;
        }
        v.push((start, end));
        if v.len() >= COALESCE_AT {
            coalesce(&mut v);
        }
    }

    /// `msync(MS_SYNC)` every range added so far. `base` is the pool's address.
    pub(crate) fn sync(&self, base: *mut u8) -> io::Result<()> {
        let _syncing = lock(&self.syncing);
        let mut v = std::mem::take(&mut *lock(&self.ranges));
        coalesce(&mut v);
        let mut result = Ok(());
        for (start, end) in v {
            // SAFETY: ranges come from bounds-checked pool offsets rounded to
            // pages; pools are page multiples, so they lie inside the mapping.
            // The system call itself, not libc's `msync`: in a process running the shim,
            // that name is the shim's, whose lock a thread writing back a mapping holds
            // while it waits for a writer that is here (a deadlock on pools in ordinary
            // files, found in review).
            let rc = unsafe {
                libc::syscall(
                    libc::SYS_msync,
                    base.add(start as usize),
                    (end - start) as usize,
                    libc::MS_SYNC,
                )
            } as i32;
            if rc != 0 && result.is_ok() {
                result = Err(io::Error::last_os_error());
            }
            let fault = self.fault.load(Ordering::Relaxed);
            let hit = start < self.fault_end.load(Ordering::Relaxed)
                && self.fault_start.load(Ordering::Relaxed) < end;
            if fault != 0 && hit && result.is_ok() {
                result = Err(io::Error::from_raw_os_error(fault));
            }
        }
        if let Err(e) = &result {
            let mut err = lock(&self.error);
            if err.is_none() {
                *err = Some(match e.raw_os_error() {
                    Some(errno) => io::Error::from_raw_os_error(errno),
                    None => io::Error::new(e.kind(), e.to_string()),
                });
                self.has_error.store(true, Ordering::Release);
            }
        }
        result
    }

    /// Fail every sync with `errno` (None: none), or only syncs of pages that overlap the
    /// pool range `[start, end)`.
    pub(crate) fn set_fault(&self, errno: Option<i32>, (start, end): (u64, u64)) {
        self.fault_start.store(start, Ordering::Relaxed);
        self.fault_end.store(end, Ordering::Relaxed);
        self.fault.store(errno.unwrap_or(0), Ordering::Relaxed);
    }

    pub(crate) fn take_error(&self) -> Option<io::Error> {
        if !self.has_error.load(Ordering::Acquire) {
            return None;
        }
        let mut err = lock(&self.error);
        self.has_error.store(false, Ordering::Release);
        err.take()
    }

    #[cfg(test)]
    pub(crate) fn pending(&self) -> Vec<(u64, u64)> {
        lock(&self.ranges).clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_are_page_rounded_and_merged() {
        let d = DirtyPages::default();
        d.add(10, 1);
        d.add(4000, 200);
        assert_eq!(d.pending(), vec![(0, 8192)]);
        d.add(5 * PAGE + 1, 0);
        d.add(5 * PAGE + 1, 1);
        assert_eq!(d.pending(), vec![(0, 8192), (5 * PAGE, 6 * PAGE)]);
        for i in (0..100).rev() {
            d.add(20 * PAGE + i * 2 * PAGE, 1);
        }
        d.add(20 * PAGE, 200 * PAGE);
        let mut v = d.pending();
        coalesce(&mut v);
        assert_eq!(
            v,
            vec![(0, 2 * PAGE), (5 * PAGE, 6 * PAGE), (20 * PAGE, 220 * PAGE)]
        );
    }
}

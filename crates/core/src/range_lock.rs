//! A byte-range (page-range) lock for one file in one process: threads writing disjoint
//! ranges proceed in parallel, overlapping ones take turns.

use std::sync::{Condvar, Mutex};

#[derive(Default)]
pub struct RangeLock {
    held: Mutex<Vec<(u64, u64)>>,
    released: Condvar,
}

/// Holds `[start, end)` until dropped.
pub struct RangeGuard<'a> {
    lock: &'a RangeLock,
    range: (u64, u64),
}

impl RangeLock {
    pub fn lock(&self, start: u64, end: u64) -> RangeGuard<'_> {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        while held.iter().any(|&(s, e)| s < end && start < e) {
            held = self.released.wait(held).unwrap_or_else(|e| e.into_inner());
        }
        held.push((start, end));
        RangeGuard {
            lock: self,
            range: (start, end),
        }
    }
}

impl Drop for RangeGuard<'_> {
    fn drop(&mut self) {
        let mut held = self.lock.held.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(i) = held.iter().position(|&r| r == self.range) {
            held.swap_remove(i);
        }
        self.lock.released.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    #[test]
    fn disjoint_ranges_do_not_block_overlapping_ones_do() {
        let l = Arc::new(RangeLock::default());
        let g = l.lock(0, 10);
        let _h = l.lock(10, 20);
        let done = Arc::new(AtomicBool::new(false));
        let (l2, d2) = (l.clone(), done.clone());
        let t = std::thread::spawn(move || {
            let _g = l2.lock(5, 6);
            d2.store(true, Ordering::SeqCst);
        });
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert!(!done.load(Ordering::SeqCst));
        drop(g);
        t.join().unwrap();
        assert!(done.load(Ordering::SeqCst));
    }
}

//! A byte-range (page-range) lock for one file in one process: threads writing disjoint
//! ranges proceed in parallel, overlapping ones take turns.

use std::sync::{Condvar, Mutex, MutexGuard};

#[derive(Default)]
pub struct RangeLock {
    state: Mutex<State>,
    released: Condvar,
}

#[derive(Default)]
struct State {
    held: Vec<(u64, u64)>,
    /// Threads waiting in `lock`: a release wakes them only if there are any, because
    /// `notify_all` is a `futex` system call even with nobody waiting (a sixth of a 4 KiB
    /// append's time when every write paid it).
    waiters: usize,
}

/// Holds `[start, end)` until dropped.
pub struct RangeGuard<'a> {
    lock: &'a RangeLock,
    range: (u64, u64),
}

impl RangeLock {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn lock(&self, start: u64, end: u64) -> RangeGuard<'_> {
        let mut st = self.state();
        while st.held.iter().any(|&(s, e)| s < end && start < e) {
            st.waiters += 1;
            st = self.released.wait(st).unwrap_or_else(|e| e.into_inner());
            st.waiters -= 1;
        }
        st.held.push((start, end));
        RangeGuard {
            lock: self,
            range: (start, end),
        }
    }
}

impl Drop for RangeGuard<'_> {
    fn drop(&mut self) {
        let mut st = self.lock.state();
        if let Some(i) = st.held.iter().position(|&r| r == self.range) {
            st.held.swap_remove(i);
        }
        if st.waiters > 0 {
            self.lock.released.notify_all();
        }
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

    #[test]
    fn every_waiter_on_a_released_range_gets_it_in_turn() {
        let l = Arc::new(RangeLock::default());
        let g = l.lock(0, 100);
        let inside = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let threads: Vec<_> = (0..4)
            .map(|i| {
                let (l, inside) = (l.clone(), inside.clone());
                std::thread::spawn(move || {
                    let _g = l.lock(i * 10, i * 10 + 50);
                    // Overlapping ranges: never two of them at once.
                    assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0);
                    std::thread::sleep(std::time::Duration::from_millis(5));
                    inside.fetch_sub(1, Ordering::SeqCst);
                })
            })
            .collect();
        // Let every thread block on the held range, then release it.
        while l.state().waiters < 4 {
            std::thread::yield_now();
        }
        drop(g);
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(l.state().waiters, 0);
        assert!(l.state().held.is_empty());
    }
}

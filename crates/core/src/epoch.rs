//! Lock-free reader support: epochs (when may a freed page be reused?) and per-inode
//! sequence counters (did the inode change while I read it?).
//!
//! Both live in DRAM here; they are plain arrays of atomics so that the daemon can place them
//! in shared memory for clients of other processes.

use std::any::Any;
use std::ops::Deref;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering, fence};

/// A slice of atomics in this process's heap or in a mapping shared with other processes.
pub struct Atomics {
    ptr: *const AtomicU64,
    len: usize,
    _owner: Arc<dyn Any + Send + Sync>,
}

// SAFETY: the slice holds only atomics, which are safe to share; `_owner` keeps the memory.
unsafe impl Send for Atomics {}
// SAFETY: as above.
unsafe impl Sync for Atomics {}

impl Atomics {
    /// Zero-initialised atomics that only touch memory on first use (calloc).
    pub fn zeroed(n: usize) -> Atomics {
        let v = vec![0u64; n];
        let mut v = std::mem::ManuallyDrop::new(v);
        // SAFETY: AtomicU64 has the same size, alignment and bit validity as u64, and the
        // vector's allocation is handed over whole (pointer, length, capacity) exactly once.
        let v =
            unsafe { Vec::from_raw_parts(v.as_mut_ptr() as *mut AtomicU64, v.len(), v.capacity()) };
        let b: Box<[AtomicU64]> = v.into_boxed_slice();
        let ptr = b.as_ptr();
        Atomics {
            ptr,
            len: n,
            _owner: Arc::new(b),
        }
    }

    /// Atomics at `ptr` inside memory kept alive by `owner` (a shared mapping).
    ///
    /// # Safety
    /// `ptr` must be 8-aligned and valid for reads and writes of `len` u64 for as long as
    /// `owner` lives, and only ever accessed atomically.
    pub unsafe fn from_raw(
        ptr: *const AtomicU64,
        len: usize,
        owner: Arc<dyn Any + Send + Sync>,
    ) -> Atomics {
        Atomics {
            ptr,
            len,
            _owner: owner,
        }
    }
}

impl Deref for Atomics {
    type Target = [AtomicU64];
    fn deref(&self) -> &[AtomicU64] {
        // SAFETY: guaranteed by the constructors: valid, aligned, alive while `_owner` is.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

/// Epoch-based reclamation: a global epoch and one slot per concurrently pinned reader.
/// Slots come in groups (one per client process of the daemon, each in memory that client
/// owns); a client pins only in its own group, the server scans them all.
pub struct Epochs {
    global: Atomics,
    groups: Vec<Atomics>,
    mine: usize,
    /// The groups a scan reads (the daemon's connected clients), if not all of them.
    live: Option<Arc<LiveGroups>>,
}

/// Which groups are in use, a bit each: the daemon has room for many clients, and a scan of
/// every place would read 32 slots for each, connected or not.
pub struct LiveGroups(Box<[AtomicU64]>);

impl LiveGroups {
    pub fn new(groups: usize) -> LiveGroups {
        LiveGroups(
            (0..groups.div_ceil(64))
                .map(|_| AtomicU64::new(0))
                .collect(),
        )
    }

    /// Group `g` is scanned from now on: set before its owner can pin.
    pub fn set(&self, g: usize) {
        self.0[g / 64].fetch_or(1 << (g % 64), Ordering::SeqCst);
    }

    /// Group `g` is no longer scanned: cleared once its owner is gone.
    pub fn unset(&self, g: usize) {
        self.0[g / 64].fetch_and(!(1 << (g % 64)), Ordering::SeqCst);
    }

    fn each(&self) -> impl Iterator<Item = usize> + '_ {
        self.0.iter().enumerate().flat_map(|(w, word)| {
            let mut bits = word.load(Ordering::SeqCst);
            std::iter::from_fn(move || {
                (bits != 0).then(|| {
                    let b = bits.trailing_zeros() as usize;
                    bits &= bits - 1;
                    w * 64 + b
                })
            })
        })
    }
}

/// While held, nothing retired at or after the pinned epoch is reused.
pub struct Guard<'a> {
    slot: &'a AtomicU64,
}

impl Drop for Guard<'_> {
    fn drop(&mut self) {
        self.slot.store(0, Ordering::Release);
    }
}

thread_local! {
    static SLOT_HINT: std::cell::Cell<usize> = const { std::cell::Cell::new(usize::MAX) };
}

impl Epochs {
    pub fn new(slots: usize) -> Epochs {
        let global = Atomics::zeroed(1);
        global[0].store(1, Ordering::Relaxed);
        Epochs {
            global,
            groups: vec![Atomics::zeroed(slots)],
            mine: 0,
            live: None,
        }
    }

    /// Epochs in shared memory: `global` holds one word (initialised to 1 by whoever
    /// created it), `groups` the reader slots, `mine` the group this process pins in (the
    /// server, which never pins, passes an index past the end).
    pub fn shared(global: Atomics, groups: Vec<Atomics>, mine: usize) -> Epochs {
        Epochs {
            global,
            groups,
            mine,
            live: None,
        }
    }

    /// Scan only the groups `live` names (the server's view of its clients' slots).
    pub fn scanning_only(self, live: Arc<LiveGroups>) -> Epochs {
        Epochs {
            live: Some(live),
            ..self
        }
    }

    /// Unpin every slot of group `g` (a client that died while pinned).
    pub fn clear(&self, g: usize) {
        for s in self.groups.get(g).map_or(&[][..], |a| &a[..]) {
            s.store(0, Ordering::SeqCst);
        }
    }

    /// Pin the current epoch for the duration of a read.
    ///
    /// The fast path is one compare-and-swap on the slot this thread used last time. The
    /// epoch may be read before the swap: a stale (smaller) value only holds reclamation back
    /// longer, and a reader that read the new value synchronises with the `safe_epoch` that
    /// made it, so it sees the unlinking that preceded it.
    #[inline]
    pub fn pin(&self) -> Guard<'_> {
        let mine = &self.groups[self.mine];
        let e = self.global[0].load(Ordering::Acquire);
        if let Some(slot) = mine.get(SLOT_HINT.get())
            && slot
                .compare_exchange(0, e, Ordering::SeqCst, Ordering::Relaxed)
                .is_ok()
        {
            fence_after_rmw();
            return Guard { slot };
        }
        self.pin_slow(mine)
    }

    #[cold]
    #[inline(never)]
    fn pin_slow<'a>(&'a self, mine: &'a Atomics) -> Guard<'a> {
        let n = mine.len();
        let hint = SLOT_HINT.get();
        // A thread's first pin starts at the next cache line in turn: threads that start
        // together get lines of their own.
        let start = if hint < n {
            hint
        } else {
            static NEXT_LINE: std::sync::atomic::AtomicUsize =
                std::sync::atomic::AtomicUsize::new(0);
            NEXT_LINE.fetch_add(1, Ordering::Relaxed) * SlotOrder::PER_LINE
        };
        let order = SlotOrder::new(mine, start);
        loop {
            for k in 0..n {
                let idx = order.nth(k);
                let e = self.global[0].load(Ordering::Acquire);
                let slot = &mine[idx];
                if slot
                    .compare_exchange(0, e, Ordering::SeqCst, Ordering::Relaxed)
                    .is_ok()
                {
                    fence_after_rmw();
                    SLOT_HINT.set(idx);
                    return Guard { slot };
                }
            }
            std::thread::yield_now();
        }
    }

    /// Tag for items being retired now (already unlinked): readers pinned at this epoch or
    /// earlier may still hold them.
    ///
    /// Neither a fence nor an advance here, only a load. Only the server advances the epoch
    /// (`safe_epoch`, under the server's lock in-process), so this reads its latest value.
    /// A reader that can still hold an item read the structure before the unlinking was
    /// visible to it, so the epoch it pinned, loaded before that, cannot come from an
    /// advance made after the unlinking (the advance is a release, the reader's load an
    /// acquire: it would then have seen the unlinking): it is at most this tag.
    ///
    /// Why no fence and no advance: a fence here waited for the write-backs of the
    /// commit's in-place updates (x86 orders `clwb` with locked instructions), and an
    /// advance moved the global epoch's line to the server's core, which in the daemon
    /// every client that pins then reads back across the cores: both on every commit that
    /// retires a page, which is every overwrite.
    pub fn retire_tag(&self) -> u64 {
        self.global[0].load(Ordering::Relaxed)
    }

    /// Advance the epoch and return the epoch below which retired items can be reused:
    /// what was retired until now comes free once its readers have left (new readers pin
    /// at the advanced value). The fence pairs with the one after a reader's pin: either
    /// the scan below sees the reader's slot, or the reader sees what was unlinked.
    pub fn safe_epoch(&self) -> u64 {
        self.global[0].fetch_add(1, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        let mut min = self.global[0].load(Ordering::SeqCst);
        let mut scan = |g: &Atomics| {
            for s in g.iter() {
                let v = s.load(Ordering::SeqCst);
                if v != 0 && v < min {
                    min = v;
                }
            }
        };
        match &self.live {
            Some(live) => live.each().for_each(|g| scan(&self.groups[g])),
            None => self.groups.iter().for_each(scan),
        }
        min
    }
}

/// The order in which a thread looks for a free slot: the first slot of every cache line
/// first, starting at a line picked by `start`, then the second of every line, and so on,
/// so that threads pinning at once each get a line of their own (a pin and an unpin write
/// the slot: slots of two threads in one line would bounce it between their cores).
struct SlotOrder {
    n: usize,
    lines: usize,
    first: usize,
    /// Index of the first slot that starts a cache line.
    skew: usize,
}

impl SlotOrder {
    const PER_LINE: usize = 64 / std::mem::size_of::<AtomicU64>();

    fn new(slots: &[AtomicU64], start: usize) -> SlotOrder {
        let n = slots.len();
        if n == 0 || !n.is_multiple_of(Self::PER_LINE) {
            // Plain round robin from `start`.
            return SlotOrder {
                n,
                lines: 1,
                first: start % n.max(1),
                skew: 0,
            };
        }
        let lines = n / Self::PER_LINE;
        let into_line = (slots.as_ptr() as usize / 8) % Self::PER_LINE;
        SlotOrder {
            n,
            lines,
            first: (start / Self::PER_LINE) % lines,
            skew: (Self::PER_LINE - into_line) % Self::PER_LINE,
        }
    }

    /// The `k`-th slot to try, for `k < n`: every slot once.
    fn nth(&self, k: usize) -> usize {
        if self.lines == 1 {
            return (self.first + k) % self.n;
        }
        let line = (self.first + k) % self.lines;
        let pos = k / self.lines;
        (line * Self::PER_LINE + pos + self.skew) % self.n
    }
}

/// Publish a pin (a successful SeqCst compare-and-swap on the slot) before any pool pointer
/// is read: the store must not be reordered after the loads that follow (store-load order,
/// which only a full fence gives). On x86-64 a locked read-modify-write already is a full
/// fence (Intel SDM vol. 3A, "Memory Ordering in P6 and More Recent Processor Families":
/// reads and writes are not reordered with locked instructions; the kernel's
/// `smp_mb__after_atomic` is empty there for the same reason), so only the compiler needs
/// holding back; `mfence` on top of the `lock cmpxchg` would stall a second time per read.
#[inline(always)]
fn fence_after_rmw() {
    #[cfg(target_arch = "x86_64")]
    std::sync::atomic::compiler_fence(Ordering::SeqCst);
    #[cfg(not(target_arch = "x86_64"))]
    fence(Ordering::SeqCst);
}

/// Per-inode sequence counters: odd while the server updates the inode or what it points to.
pub struct SeqTable {
    seqs: Atomics,
}

impl SeqTable {
    pub fn new(inodes: u64) -> SeqTable {
        SeqTable {
            seqs: Atomics::zeroed(inodes as usize),
        }
    }

    /// A table in shared memory, one word per inode.
    pub fn shared(seqs: Atomics) -> SeqTable {
        SeqTable { seqs }
    }

    /// Make every counter even again (after a writer died between begin and end).
    pub fn settle(&self) {
        for s in self.seqs.iter() {
            let v = s.load(Ordering::Relaxed);
            if v & 1 == 1 {
                s.store(v.wrapping_add(1), Ordering::Release);
            }
        }
    }

    /// Wait for a stable (even) value and return it.
    #[inline]
    pub fn read_begin(&self, ino: u64) -> u64 {
        self.counter(ino).begin()
    }

    /// True if what was read since `read_begin` returned `v` is consistent.
    #[inline]
    pub fn read_ok(&self, ino: u64, v: u64) -> bool {
        self.counter(ino).ok(v)
    }

    /// The counter of `ino`, looked up once for a reader that validates several times.
    #[inline]
    pub fn counter(&self, ino: u64) -> Seq<'_> {
        Seq(&self.seqs[ino as usize])
    }

    // Only the server writes the counters, so plain stores suffice: a locked increment
    // would also wait for every cache-line write-back in flight.
    pub fn write_begin(&self, ino: u64) {
        let s = &self.seqs[ino as usize];
        s.store(s.load(Ordering::Relaxed).wrapping_add(1), Ordering::Relaxed);
        fence(Ordering::Release);
    }

    pub fn write_end(&self, ino: u64) {
        let s = &self.seqs[ino as usize];
        s.store(s.load(Ordering::Relaxed).wrapping_add(1), Ordering::Release);
    }
}

/// One inode's sequence counter, as a reader sees it.
#[derive(Clone, Copy)]
pub struct Seq<'a>(&'a AtomicU64);

impl Seq<'_> {
    /// Wait for a stable (even) value and return it.
    #[inline]
    pub fn begin(self) -> u64 {
        let v = self.0.load(Ordering::Acquire);
        if v & 1 == 0 { v } else { self.wait() }
    }

    #[cold]
    fn wait(self) -> u64 {
        let mut spins = 0u32;
        loop {
            let v = self.0.load(Ordering::Acquire);
            if v & 1 == 0 {
                return v;
            }
            spins += 1;
            if spins > 64 {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
    }

    /// True if what was read since `begin` returned `v` is consistent.
    #[inline]
    pub fn ok(self, v: u64) -> bool {
        fence(Ordering::Acquire);
        self.0.load(Ordering::Relaxed) == v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pinned_reader_holds_back_reclamation() {
        let e = Epochs::new(4);
        let g = e.pin();
        let tag = e.retire_tag();
        assert!(
            e.safe_epoch() <= tag,
            "a reader pinned before retirement blocks reuse"
        );
        drop(g);
        assert!(e.safe_epoch() > tag);
    }

    /// Retiring does not advance the epoch; reclaiming does. A reader pinned when an item
    /// was retired holds it back through any number of advances, and only until it leaves.
    #[test]
    fn a_reader_holds_back_what_was_retired_while_it_was_pinned() {
        let e = Epochs::new(4);
        let g = e.pin();
        let tag = e.retire_tag();
        assert_eq!(e.retire_tag(), tag, "retiring does not advance the epoch");
        for _ in 0..3 {
            assert!(
                e.safe_epoch() <= tag,
                "the pinned reader may still hold the item"
            );
        }
        drop(g);
        assert!(e.safe_epoch() > tag);
        // Items retired while no reader was pinned come free at the next reclaim.
        let tag = e.retire_tag();
        assert!(e.safe_epoch() > tag);
    }

    /// The server's scan reads only the groups marked live: a pin in one holds back
    /// reclamation, also in a group past the first word of the set; an unmarked group is
    /// not read (a departed client's place).
    #[test]
    fn a_scan_reads_the_live_groups_only() {
        let global = Atomics::zeroed(1);
        global[0].store(1, Ordering::Relaxed);
        let groups: Vec<Atomics> = (0..130).map(|_| Atomics::zeroed(4)).collect();
        let live = Arc::new(LiveGroups::new(130));
        let e = Epochs::shared(global, groups, usize::MAX).scanning_only(live.clone());
        // Stores into the slots, as a client's pin makes them.
        let (s70, s129) = (&e.groups[70][2], &e.groups[129][0]);
        s70.store(1, Ordering::SeqCst);
        assert!(
            e.safe_epoch() > 1,
            "group 70 is not live: its slot is not read"
        );
        live.set(70);
        assert_eq!(e.safe_epoch(), 1, "group 70's pin holds reclamation back");
        live.unset(70);
        s129.store(2, Ordering::SeqCst);
        live.set(129);
        assert_eq!(
            e.safe_epoch(),
            2,
            "group 129's pin, in the set's third word"
        );
        live.unset(129);
        assert!(e.safe_epoch() > 2);
    }

    #[test]
    fn slot_order_visits_every_slot_once_line_starts_first() {
        for n in [1usize, 3, 8, 32, 256] {
            let slots = Atomics::zeroed(n);
            for start in [0usize, 5, 17, 1000] {
                let o = SlotOrder::new(&slots, start);
                let seen: std::collections::HashSet<usize> = (0..n).map(|k| o.nth(k)).collect();
                assert_eq!(seen.len(), n, "n {n} start {start}");
                assert!(seen.iter().all(|&i| i < n));
                if n >= 32 {
                    // The first tries are in distinct cache lines.
                    let lines: std::collections::HashSet<usize> = (0..n / 8)
                        .map(|k| (slots.as_ptr() as usize + o.nth(k) * 8) / 64)
                        .collect();
                    assert_eq!(lines.len(), n / 8);
                }
            }
        }
    }

    #[test]
    fn many_threads_pin_at_once() {
        let e = Epochs::new(8);
        std::thread::scope(|s| {
            for _ in 0..16 {
                s.spawn(|| {
                    for _ in 0..1000 {
                        let _g = e.pin();
                        let _nested = e.pin();
                    }
                });
            }
        });
        assert!(e.groups[0].iter().all(|s| s.load(Ordering::SeqCst) == 0));
    }

    #[test]
    fn seq_detects_concurrent_write() {
        let s = SeqTable::new(4);
        let v = s.read_begin(2);
        s.write_begin(2);
        s.write_end(2);
        assert!(!s.read_ok(2, v));
        let v = s.read_begin(2);
        assert!(s.read_ok(2, v));
    }
}

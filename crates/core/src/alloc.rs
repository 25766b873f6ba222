//! Allocation of inodes, metadata pages and data pages.
//!
//! The allocator lives in DRAM and belongs to the server. Its bitmaps are written to the pool
//! at a clean unmount; after a crash, recovery rebuilds them from what is reachable, so a
//! crash can neither leak nor double-allocate (reservations of clients are DRAM-only for the
//! same reason). Freed items wait for every reader that may hold them (epochs) and, for
//! anything the log may still write to (inodes, metadata pages), for the next checkpoint.

use crate::layout::{Geometry, PAGE};
use engram_pmem::Pool;

/// A plain bitmap with a next-fit hint. Set bit = in use.
#[derive(Clone, Debug)]
pub struct Bitmap {
    words: Vec<u64>,
    len: u64,
    used: u64,
    hint: usize,
}

impl Bitmap {
    pub fn new(len: u64) -> Bitmap {
        let mut b = Bitmap {
            words: vec![0; len.div_ceil(64) as usize],
            len,
            used: 0,
            hint: 0,
        };
        // Bits past the end are permanently "used" so that scans never return them.
        for i in len..b.words.len() as u64 * 64 {
            b.words[(i / 64) as usize] |= 1 << (i % 64);
        }
        b
    }

    pub fn len(&self) -> u64 {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    pub fn used(&self) -> u64 {
        self.used
    }
    pub fn free(&self) -> u64 {
        self.len - self.used
    }

    pub fn get(&self, i: u64) -> bool {
        i < self.len && self.words[(i / 64) as usize] & (1 << (i % 64)) != 0
    }

    /// Mark bit `i` used; returns false if it already was.
    pub fn set(&mut self, i: u64) -> bool {
        if i >= self.len {
            return false;
        }
        let w = &mut self.words[(i / 64) as usize];
        let m = 1u64 << (i % 64);
        if *w & m != 0 {
            return false;
        }
        *w |= m;
        self.used += 1;
        true
    }

    /// Mark bit `i` free; returns false if it already was.
    /// Out-of-range bits (from a corrupt pointer) are left alone.
    pub fn clear(&mut self, i: u64) -> bool {
        if i >= self.len {
            return false;
        }
        let w = &mut self.words[(i / 64) as usize];
        let m = 1u64 << (i % 64);
        if *w & m == 0 {
            return false;
        }
        *w &= !m;
        self.used -= 1;
        // Reuse freed bits first: their pages have been touched already (no first-use fault).
        self.hint = self.hint.min((i / 64) as usize);
        true
    }

    /// Take one free bit.
    pub fn alloc(&mut self) -> Option<u64> {
        self.alloc_run(1).map(|(start, _)| start)
    }

    /// Take a run of up to `max` contiguous free bits (at least one), next-fit from the hint.
    pub fn alloc_run(&mut self, max: u64) -> Option<(u64, u64)> {
        if self.used == self.len || max == 0 {
            return None;
        }
        let n = self.words.len();
        for k in 0..n {
            let wi = (self.hint + k) % n;
            let w = self.words[wi];
            if w == u64::MAX {
                continue;
            }
            let start = wi as u64 * 64 + (!w).trailing_zeros() as u64;
            let mut count = 0;
            while count < max && start + count < self.len && !self.get(start + count) {
                self.set(start + count);
                count += 1;
            }
            self.hint = ((start + count) / 64) as usize % n;
            return Some((start, count));
        }
        None
    }

    fn words_len(&self) -> u64 {
        self.words.len() as u64 * 8
    }

    fn store(&self, pool: &Pool, off: u64) {
        let bytes: Vec<u8> = self.words.iter().flat_map(|w| w.to_le_bytes()).collect();
        pool.write(off, &bytes);
        pool.flush(off, bytes.len() as u64);
    }

    fn load(len: u64, pool: &Pool, off: u64) -> Bitmap {
        let mut b = Bitmap::new(len);
        let bytes = pool.slice(off, b.words_len());
        for (i, c) in bytes.chunks_exact(8).enumerate() {
            b.words[i] |= u64::from_le_bytes(c.try_into().unwrap());
        }
        b.used = b.words.iter().map(|w| w.count_ones() as u64).sum::<u64>()
            - (b.words.len() as u64 * 64 - len);
        b
    }
}

/// What a freed item is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Item {
    Inode(u64),
    MetaPage(u64),
    DataPage(u64),
}

#[derive(Clone, Copy, Debug)]
struct Pending {
    item: Item,
    epoch: u64,
    checkpoint: u64,
}

/// The server's allocator.
#[derive(Debug)]
pub struct Allocator {
    geo: Geometry,
    pub inodes: Bitmap,
    pub meta: Bitmap,
    pub data: Bitmap,
    pending: Vec<Pending>,
}

impl Allocator {
    /// An allocator with nothing in use but the reserved inode 0.
    pub fn empty(geo: &Geometry) -> Allocator {
        let mut inodes = Bitmap::new(geo.inode_count);
        inodes.set(0);
        Allocator {
            geo: *geo,
            inodes,
            meta: Bitmap::new(geo.meta_pages),
            data: Bitmap::new(geo.data_pages),
            pending: Vec::new(),
        }
    }

    fn offsets(geo: &Geometry) -> (u64, u64, u64) {
        let i = geo.bitmap_off;
        let m = i + geo.inode_count.div_ceil(64) * 8;
        let d = m + geo.meta_pages.div_ceil(64) * 8;
        (i, m, d)
    }

    /// Load the bitmaps written at the last clean unmount.
    pub fn load(pool: &Pool, geo: &Geometry) -> Allocator {
        let (i, m, d) = Allocator::offsets(geo);
        Allocator {
            geo: *geo,
            inodes: Bitmap::load(geo.inode_count, pool, i),
            meta: Bitmap::load(geo.meta_pages, pool, m),
            data: Bitmap::load(geo.data_pages, pool, d),
            pending: Vec::new(),
        }
    }

    /// Write the bitmaps (at a clean unmount; the caller fences).
    pub fn store(&self, pool: &Pool) {
        let (i, m, d) = Allocator::offsets(&self.geo);
        self.inodes.store(pool, i);
        self.meta.store(pool, m);
        self.data.store(pool, d);
    }

    pub fn alloc_inode(&mut self) -> Option<u64> {
        self.inodes.alloc()
    }

    pub fn alloc_meta_page(&mut self) -> Option<u64> {
        self.meta.alloc().map(|i| self.geo.meta_off + i * PAGE)
    }

    /// Up to `max` data pages, as contiguous runs where the bitmap allows.
    pub fn alloc_data_pages(&mut self, max: u64, out: &mut Vec<u64>) {
        let mut left = max;
        while left > 0 {
            let Some((start, n)) = self.data.alloc_run(left) else {
                break;
            };
            out.extend((start..start + n).map(|i| self.geo.data_off + i * PAGE));
            left -= n;
        }
    }

    /// Return a never-published item at once (no reader or log record can refer to it).
    pub fn release_now(&mut self, item: Item) {
        self.clear(item);
    }

    /// Free an item once readers pinned at `epoch` or earlier are gone and, for inodes and
    /// metadata pages, once the checkpoint after `checkpoint` has happened.
    pub fn retire(&mut self, item: Item, epoch: u64, checkpoint: u64) {
        self.pending.push(Pending {
            item,
            epoch,
            checkpoint,
        });
    }

    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    /// Free what is safe: retired before `safe_epoch` and, where it matters, before the
    /// checkpoint numbered `checkpoint`.
    pub fn reclaim(&mut self, safe_epoch: u64, checkpoint: u64) -> usize {
        let mut freed = Vec::new();
        self.pending.retain(|p| {
            let log_safe = matches!(p.item, Item::DataPage(_)) || p.checkpoint < checkpoint;
            let ok = p.epoch < safe_epoch && log_safe;
            if ok {
                freed.push(p.item);
            }
            !ok
        });
        for item in &freed {
            self.clear(*item);
        }
        freed.len()
    }

    /// How many inodes, metadata pages and data pages are pending, in one pass.
    pub fn pending_by_kind(&self) -> (u64, u64, u64) {
        let mut n = (0, 0, 0);
        for p in &self.pending {
            match p.item {
                Item::Inode(_) => n.0 += 1,
                Item::MetaPage(_) => n.1 += 1,
                Item::DataPage(_) => n.2 += 1,
            }
        }
        n
    }

    /// Items waiting to be freed.
    pub fn pending_items(&self) -> impl Iterator<Item = Item> + '_ {
        self.pending.iter().map(|p| p.item)
    }

    /// Mark an item used (fsck repair of an item in use but marked free).
    pub fn mark_used(&mut self, item: Item) {
        match item {
            Item::Inode(i) => self.inodes.set(i),
            Item::MetaPage(off) => self.meta.set(self.geo.meta_index(off)),
            Item::DataPage(off) => self.data.set(self.geo.data_index(off)),
        };
    }

    fn clear(&mut self, item: Item) {
        match item {
            Item::Inode(i) => self.inodes.clear(i),
            Item::MetaPage(off) => self.meta.clear(self.geo.meta_index(off)),
            Item::DataPage(off) => self.data.clear(self.geo.data_index(off)),
        };
    }
}

/// Consecutive pages of `pages` as (first page, count) runs.
fn runs(pages: impl IntoIterator<Item = u64>) -> impl Iterator<Item = (u64, u64)> {
    let mut pages = pages.into_iter().peekable();
    std::iter::from_fn(move || {
        let start = pages.next()?;
        let mut n = 1;
        while start
            .checked_add(n * PAGE)
            .is_some_and(|next| pages.next_if_eq(&next).is_some())
        {
            n += 1;
        }
        Some((start, n))
    })
}

/// The data pages one client has reserved and not committed yet, as sorted, disjoint runs
/// of consecutive pages. A reservation hands out runs and the client uses them in order,
/// so a client has few runs and a write takes its pages from the front of one: checking
/// and taking the pages of a write costs a search per run, not a hash lookup per page.
#[derive(Debug, Default)]
pub struct Reserved {
    /// (first page, number of pages), ascending.
    runs: Vec<(u64, u64)>,
}

impl Reserved {
    pub fn is_empty(&self) -> bool {
        self.runs.is_empty()
    }

    /// How many pages (a sum over the runs, of which a client has few).
    pub fn len(&self) -> u64 {
        self.runs.iter().map(|r| r.1).sum()
    }

    pub fn pages(&self) -> impl Iterator<Item = u64> + '_ {
        self.runs
            .iter()
            .flat_map(|&(s, n)| (0..n).map(move |i| s + i * PAGE))
    }

    /// Add pages, none of them reserved already.
    pub fn insert(&mut self, pages: impl IntoIterator<Item = u64>) {
        for run in runs(pages) {
            self.insert_run(run);
        }
    }

    fn insert_run(&mut self, (s, n): (u64, u64)) {
        let i = self.runs.partition_point(|r| r.0 < s);
        let joins_prev = i > 0 && self.runs[i - 1].0 + self.runs[i - 1].1 * PAGE == s;
        let joins_next = i < self.runs.len() && s + n * PAGE == self.runs[i].0;
        match (joins_prev, joins_next) {
            (true, true) => {
                self.runs[i - 1].1 += n + self.runs[i].1;
                self.runs.remove(i);
            }
            (true, false) => self.runs[i - 1].1 += n,
            (false, true) => self.runs[i] = (s, n + self.runs[i].1),
            (false, false) => self.runs.insert(i, (s, n)),
        }
    }

    /// Take `pages` out if every one of them is reserved, each named once; otherwise take
    /// nothing and return false.
    pub fn take(&mut self, pages: impl IntoIterator<Item = u64> + Clone) -> bool {
        for (k, run) in runs(pages.clone()).enumerate() {
            if !self.take_run(run) {
                for r in runs(pages).take(k) {
                    self.insert_run(r);
                }
                return false;
            }
        }
        true
    }

    fn take_run(&mut self, (s, n): (u64, u64)) -> bool {
        // The run that would hold `s`: the last one starting at or before it.
        let i = self.runs.partition_point(|r| r.0 <= s);
        let Some(&(rs, rn)) = i.checked_sub(1).and_then(|i| self.runs.get(i)) else {
            return false;
        };
        let (end, rend) = (s.saturating_add(n * PAGE), rs + rn * PAGE);
        if end > rend || !(s - rs).is_multiple_of(PAGE) {
            return false;
        }
        let r = &mut self.runs[i - 1];
        match (s == rs, end == rend) {
            (true, true) => {
                self.runs.remove(i - 1);
            }
            (true, false) => *r = (end, (rend - end) / PAGE),
            (false, true) => r.1 = (s - rs) / PAGE,
            (false, false) => {
                r.1 = (s - rs) / PAGE;
                self.runs.insert(i, (end, (rend - end) / PAGE));
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bitmap_alloc_and_free() {
        let mut b = Bitmap::new(130);
        assert_eq!(b.alloc_run(100), Some((0, 100)));
        assert_eq!(b.alloc_run(100), Some((100, 30)));
        assert_eq!(b.alloc(), None);
        assert!(b.clear(5));
        assert!(!b.clear(5));
        assert_eq!(b.alloc(), Some(5));
        assert_eq!(b.free(), 0);
    }

    #[test]
    fn reclaim_waits_for_epoch_and_checkpoint() {
        let geo = Geometry::for_size(8 << 20).unwrap();
        let mut a = Allocator::empty(&geo);
        let ino = a.alloc_inode().unwrap();
        let mut pages = Vec::new();
        a.alloc_data_pages(1, &mut pages);
        a.retire(Item::Inode(ino), 5, 0);
        a.retire(Item::DataPage(pages[0]), 5, 0);
        assert_eq!(a.reclaim(5, 0), 0);
        assert_eq!(a.reclaim(6, 0), 1, "data page needs only the epoch");
        assert_eq!(a.reclaim(6, 1), 1, "inode also needs a checkpoint");
        assert_eq!(a.pending(), 0);
    }

    #[test]
    fn reserved_pages_are_taken_once_in_runs() {
        let p = |i: u64| (1 << 20) + i * PAGE;
        let mut r = Reserved::default();
        r.insert((0..8).map(p));
        r.insert([p(20), p(10), p(11)]);
        r.insert([p(8), p(9)]);
        assert_eq!(r.runs, [(p(0), 12), (p(20), 1)]);
        // From the front, from the middle (a split), from the end, across runs.
        assert!(r.take([p(0)]));
        assert!(r.take([p(4), p(5), p(20)]));
        assert!(r.take([p(11)]));
        assert_eq!(r.runs, [(p(1), 3), (p(6), 5)]);
        // Not reserved, named twice, not page-aligned, partly reserved: nothing is taken.
        for bad in [
            vec![p(0)],
            vec![p(1), p(1)],
            vec![p(6), p(7) + 8],
            vec![p(9), p(10), p(11)],
            vec![p(2), p(5)],
        ] {
            assert!(!r.take(bad.iter().copied()), "{bad:?}");
            assert_eq!(r.runs, [(p(1), 3), (p(6), 5)], "{bad:?}");
        }
        let all: Vec<u64> = r.pages().collect();
        assert_eq!(all, [1, 2, 3, 6, 7, 8, 9, 10].map(p));
        assert!(r.take(all.iter().rev().copied()));
        assert!(r.is_empty());
    }

    /// Random inserts and takes (single pages and runs, valid and not) against a set of
    /// pages: the runs always hold exactly the set, joined where consecutive.
    #[test]
    fn reserved_matches_a_set_of_pages() {
        let p = |i: u64| (1 << 20) + i * PAGE;
        let mut r = Reserved::default();
        let mut model = std::collections::BTreeSet::new();
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut rand = move |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        for _ in 0..20_000 {
            let first = rand(200);
            let len = 1 + rand(4);
            let pages: Vec<u64> = (first..first + len).map(p).collect();
            if rand(2) == 0 {
                let fresh: Vec<u64> = pages.into_iter().filter(|q| !model.contains(q)).collect();
                r.insert(fresh.iter().copied());
                model.extend(fresh);
            } else {
                let ok = pages.iter().all(|q| model.contains(q));
                assert_eq!(r.take(pages.iter().copied()), ok, "{pages:?}");
                if ok {
                    for q in &pages {
                        model.remove(q);
                    }
                }
            }
            assert!(r.pages().eq(model.iter().copied()));
            assert!(r.runs.windows(2).all(|w| w[0].0 + w[0].1 * PAGE < w[1].0));
        }
    }

    #[test]
    fn store_and_load_round_trip() {
        let geo = Geometry::for_size(8 << 20).unwrap();
        let pool = Pool::anonymous(8 << 20).unwrap();
        let mut a = Allocator::empty(&geo);
        a.alloc_inode();
        a.alloc_meta_page();
        let mut v = Vec::new();
        a.alloc_data_pages(70, &mut v);
        a.store(&pool);
        let b = Allocator::load(&pool, &geo);
        assert_eq!(b.inodes.used(), 2);
        assert_eq!(b.meta.used(), 1);
        assert_eq!(b.data.used(), 70);
    }
}

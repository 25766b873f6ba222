//! Size changes: truncate and fallocate, and zeroing beyond the end of file what a
//! growing size makes visible.

use super::{Staged, fresh_pages};
use crate::alloc::Item;
use crate::error::{Error, Result};
use crate::index;
use crate::inode::{InodeData, field};
use crate::layout::{Geometry, PAGE};
use crate::oplog::Entry;
use crate::request::{Handle, Response};
use crate::server::{ClientId, Server};
use engram_pmem::Pool;

/// Zero the bytes in `[from, to)` of pages the file already has but those `skip` names:
/// they lie beyond the end of file (invisible), but may hold old bytes that must read as
/// zeros once the size grows. Non-temporal stores; the caller fences.
pub fn zero_range_beyond_eof(
    pool: &Pool,
    geo: &Geometry,
    d: &InodeData,
    (from, to): (u64, u64),
    skip: &dyn Fn(u64) -> bool,
) -> Result<()> {
    if from >= to {
        return Ok(());
    }
    index::for_each_page(
        pool,
        geo,
        d.root,
        d.height,
        from / PAGE,
        to.div_ceil(PAGE),
        &mut |pg, page| {
            if !skip(pg) {
                let start = (pg * PAGE).max(from);
                let end = ((pg + 1) * PAGE).min(to);
                pool.zero_nt(page + start - pg * PAGE, end - start);
            }
        },
    )
}

impl Server {
    /// Zero `[from, to)` in the pages the file (inode `d`) already has beyond its end of
    /// file but those `skip` names: bytes that must read as zeros once the size grows.
    /// `in_place` unless a client other than the one asking may be writing in place beyond
    /// the end of file: one alone in holding the file open for writing does so without a
    /// lock (architecture.md, "Appends in place through the daemon"), and such a write, begun
    /// before another opened the file, must not land in bytes this change makes visible.
    /// Those pages are then replaced instead: the page holding `from` by a fresh copy of its
    /// bytes before `from`, a page wholly beyond it by a hole (no space, no copy) or, if its
    /// number is in `allocated` (fallocate's range), by a fresh zeroed page. Returned as
    /// (page number, fresh page or 0) for the commit to map (`release_data_pages` of the
    /// fresh ones if it fails); the write in place then fails its check and is redone. Not
    /// fenced.
    pub(super) fn zero_beyond_eof(
        &mut self,
        in_place: bool,
        d: &InodeData,
        (from, to): (u64, u64),
        allocated: std::ops::Range<u64>,
        skip: &dyn Fn(u64) -> bool,
    ) -> Result<Vec<(u64, u64)>> {
        if in_place || from >= to {
            zero_range_beyond_eof(&self.pool, &self.geo, d, (from, to), skip)?;
            return Ok(Vec::new());
        }
        let mut old = Vec::new();
        let (first, last) = (from / PAGE, to.div_ceil(PAGE));
        index::for_each_page(
            &self.pool,
            &self.geo,
            d.root,
            d.height,
            first,
            last,
            &mut |pg, page| {
                if !skip(pg) {
                    old.push((pg, page));
                }
            },
        )?;
        let needs_page = |pg: u64| pg * PAGE < from || allocated.contains(&pg);
        let fresh = self.alloc_data(old.iter().filter(|o| needs_page(o.0)).count())?;
        let mut taken = 0;
        let mut buf = vec![0u8; PAGE as usize];
        let mut replaced = Vec::with_capacity(old.len());
        for &(pg, page) in &old {
            let new = if needs_page(pg) {
                // `alloc_data` gave exactly one page for each: never short, but if it were,
                // every page taken goes back (none is published yet).
                let Some(&p) = fresh.get(taken) else {
                    self.release_data_pages(&fresh);
                    return Err(Error::EIO);
                };
                taken += 1;
                p
            } else {
                0
            };
            if new != 0 {
                let keep = from.saturating_sub(pg * PAGE).min(PAGE) as usize;
                self.pool.read(page, &mut buf[..keep]);
                buf[keep..].fill(0);
                self.pool.copy_nt(new, &buf);
            }
            replaced.push((pg, new));
        }
        Ok(replaced)
    }

    /// Stores that change the size to `size` for `client`, what to retire after the commit
    /// and what to give back if it fails.
    pub(super) fn stage_truncate(
        &mut self,
        client: ClientId,
        ino: u64,
        d: &InodeData,
        size: u64,
        out: &mut Vec<Entry>,
    ) -> Result<Staged> {
        let mut retired = Vec::new();
        let (mut fresh, mut new_nodes) = (Vec::new(), Vec::new());
        if size < d.size {
            let mut plan =
                index::plan_truncate(&self.pool, &self.geo, d.root, d.height, size.div_ceil(PAGE))?;
            self.push_plan(ino, d, &mut plan, out);
            if !plan.old_pages.is_empty() {
                out.push(self.set64(ino, field::BLOCKS, d.blocks - plan.old_pages.len() as u64));
            }
            retired.extend(plan.old_pages.iter().map(|&p| Item::DataPage(p)));
            retired.extend(plan.old_nodes.iter().map(|&p| Item::MetaPage(p)));
        } else if size > d.size {
            let in_place = !self.others_write(client, ino);
            let replaced = self.zero_beyond_eof(in_place, d, (d.size, size), 0..0, &|_| false)?;
            self.pool.fence();
            if !replaced.is_empty() {
                fresh = fresh_pages(&replaced);
                let mut plan = index::Plan::default();
                if let Err(e) = self.stage_pages(ino, d, &replaced, &mut plan, out) {
                    self.release_data_pages(&fresh);
                    return Err(e);
                }
                retired.extend(plan.old_pages.iter().map(|&p| Item::DataPage(p)));
                new_nodes = plan.new_nodes;
            }
        }
        if size != d.size {
            out.push(self.set64(ino, field::SIZE, size));
        }
        Ok(Staged {
            retired,
            fresh,
            new_nodes,
        })
    }

    pub(in crate::server) fn fallocate(
        &mut self,
        client: ClientId,
        h: Handle,
        offset: u64,
        len: u64,
        keep_size: bool,
    ) -> Result<Response> {
        let (d, end) = self.data_range(h, offset, len)?;
        let (first, last) = (offset / PAGE, end.div_ceil(PAGE));
        // The range may be far larger than the pool (up to MAX_FILE_SIZE): the pages the
        // file has there are walked, not every page number looked up, and the space is
        // checked before the holes are listed.
        let mut existing = Vec::new();
        let mut each = |pg, _| existing.push(pg);
        index::for_each_page(
            &self.pool, &self.geo, d.root, d.height, first, last, &mut each,
        )?;
        let holes_n = last - first - existing.len() as u64;
        if holes_n > self.alloc.data.free() + self.alloc.pending() as u64 {
            return Err(Error::ENOSPC);
        }
        let mut at = existing.iter().peekable();
        let holes: Vec<u64> = (first..last)
            .filter(|&pg| at.next_if_eq(&&pg).is_none())
            .collect();
        let mut pages = self.alloc_data(holes.len())?;
        for &p in &pages {
            self.pool.zero_nt(p, PAGE);
        }
        let mut updates: Vec<(u64, u64)> =
            holes.iter().copied().zip(pages.iter().copied()).collect();
        if !keep_size && end > d.size {
            let in_place = !self.others_write(client, h.ino);
            let range = offset / PAGE..end.div_ceil(PAGE);
            let replaced = self.zero_beyond_eof(in_place, &d, (d.size, end), range, &|_| false);
            self.take_replaced(replaced, &mut pages, &mut updates)?;
        }
        let now = self.now();
        let mut extra = Vec::new();
        // mtime and ctime, also where the size stays (ext4 and tmpfs change both).
        if !keep_size && end > d.size {
            extra.push(self.set64(h.ino, field::SIZE, end));
        }
        self.touch(h.ino, now, &mut extra);
        self.publish_pages(h.ino, &d, (&updates, &pages), &extra)
    }
}

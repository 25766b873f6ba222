//! Data-side requests: page reservations, write commits, truncate, fallocate, attributes.
//! This module keeps what they share: staging index updates, the server's own data pages.

use super::Server;
use crate::alloc::Item;
use crate::error::{Error, Result};
use crate::index;
use crate::index::MAX_FILE_SIZE;
use crate::inode::{InodeData, field};
use crate::oplog::Entry;
use crate::request::{Handle, Response};

mod attr;
mod clear;
mod size;
mod write;

pub use size::zero_range_beyond_eof;
pub(super) use write::Scratch;

/// Two lists of (page number, data page), each ascending and naming no page number the
/// other does, as one ascending list.
fn merge_updates(a: &[(u64, u64)], b: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let mut all = Vec::with_capacity(a.len() + b.len());
    all.extend_from_slice(a);
    all.extend_from_slice(b);
    all.sort_unstable_by_key(|u| u.0);
    all
}

/// The data pages of a list of (page number, data page), leaving out holes (0).
fn fresh_pages(updates: &[(u64, u64)]) -> Vec<u64> {
    updates.iter().map(|u| u.1).filter(|&p| p != 0).collect()
}

/// What a staged change retires once committed, and gives back if its commit fails (data
/// pages and index nodes it took).
#[derive(Default)]
struct Staged {
    retired: Vec<Item>,
    fresh: Vec<u64>,
    new_nodes: Vec<u64>,
}

impl Server {
    /// Stage mapping `updates` (page number, data page, or 0 for a hole: `zero_beyond_eof`)
    /// into inode `ino` (`d`): the index stores and the block count go into `out`; `plan`
    /// keeps the nodes it made (to release if the commit fails; planning that fails
    /// releases them itself) and the pages the updates replace (to retire once committed).
    fn stage_pages(
        &mut self,
        ino: u64,
        d: &InodeData,
        updates: &[(u64, u64)],
        plan: &mut index::Plan,
        out: &mut Vec<Entry>,
    ) -> Result<()> {
        self.plan_index(ino, d, updates, plan)?;
        self.push_plan(ino, d, plan, out);
        let mapped = updates.iter().filter(|u| u.1 != 0).count() as u64;
        let blocks = d.blocks + mapped - plan.old_pages.len() as u64;
        if blocks != d.blocks {
            out.push(self.set64(ino, field::BLOCKS, blocks));
        }
        Ok(())
    }

    /// Plan an index update into `plan`, allocating (zeroed) nodes (`plan.new_nodes`, to
    /// release if the commit fails). On an error, the nodes taken are released.
    fn plan_index(
        &mut self,
        ino: u64,
        d: &InodeData,
        pages: &[(u64, u64)],
        plan: &mut index::Plan,
    ) -> Result<()> {
        let max_pg = pages.last().map_or(0, |p| p.0);
        // Room for growing to the new height plus a few paths of new nodes, so that making
        // room (a checkpoint) rarely has to happen in the middle of planning.
        // A file that stays within its small node needs none.
        let small = max_pg < index::SMALL && (d.height == 0 || self.geo.is_small_node(d.root));
        if !small {
            let likely = (index::height_for(max_pg) as u64 + 1) * (pages.len() as u64).clamp(1, 4);
            self.ensure_meta(likely.min(self.alloc.meta.len()))?;
        }
        let pool = self.pool.clone();
        let alloc = &mut self.alloc;
        let planned = index::plan_set(
            &pool,
            &self.geo,
            (d.root, d.height),
            self.geo.small_node(ino),
            pages,
            &mut || {
                alloc
                    .alloc_meta_page()
                    .ok_or_else(|| Error::with_msg(libc::ENOSPC, "no free metadata pages"))
            },
            plan,
        );
        if let Err(e) = planned {
            self.release_nodes(&plan.new_nodes);
            return Err(e);
        }
        // New nodes were zeroed with non-temporal stores: they must be durable before the
        // record that links them in (a reused metadata page still holds an old node's
        // pointers). The crash harness's full mode found this.
        if !plan.new_nodes.is_empty() {
            self.pool.fence();
        }
        Ok(())
    }

    fn release_nodes(&mut self, nodes: &[u64]) {
        for &n in nodes {
            self.alloc.release_now(Item::MetaPage(n));
        }
    }

    /// The stores of an index plan, including the inode's root and height if they change.
    fn push_plan(&self, ino: u64, d: &InodeData, plan: &mut index::Plan, out: &mut Vec<Entry>) {
        index::coalesce(&mut plan.words, out);
        if plan.root != d.root {
            out.push(self.set64(ino, field::ROOT, plan.root));
        }
        if plan.height != d.height {
            out.push(self.set32(ino, field::HEIGHT, plan.height));
        }
    }

    /// File `h` for a change to the bytes `[offset, offset + len)` (fallocate, clearing a
    /// range), and the range's end.
    fn data_range(&self, h: Handle, offset: u64, len: u64) -> Result<(InodeData, u64)> {
        let d = self.inode(h)?;
        if d.is_dir() {
            return Err(Error::EISDIR);
        }
        if !d.is_reg() {
            return Err(Error::ENODEV);
        }
        if len == 0 {
            return Err(Error::EINVAL);
        }
        let end = offset
            .checked_add(len)
            .filter(|&e| e <= MAX_FILE_SIZE)
            .ok_or(Error::EFBIG)?;
        Ok((d, end))
    }

    /// Add what `zero_beyond_eof` replaced to `updates`, and its fresh pages to `pages`
    /// (the server's own, to give back if the change fails). If it failed, every page of
    /// `pages` goes back now.
    fn take_replaced(
        &mut self,
        replaced: Result<Vec<(u64, u64)>>,
        pages: &mut Vec<u64>,
        updates: &mut Vec<(u64, u64)>,
    ) -> Result<()> {
        match replaced {
            Ok(r) => {
                if !r.is_empty() {
                    pages.extend(fresh_pages(&r));
                    *updates = merge_updates(updates, &r);
                }
                Ok(())
            }
            Err(e) => {
                self.release_data_pages(pages);
                Err(e)
            }
        }
    }

    /// Publish `updates` (page number → the server's fresh data page, or 0 for a hole) into
    /// file `ino` (`d`) with the `extra` stores, in one commit after a fence that makes the
    /// fresh pages durable first, and retire the pages they replace. If it fails, the fresh
    /// `pages` and any new index nodes go back.
    fn publish_pages(
        &mut self,
        ino: u64,
        d: &InodeData,
        (updates, pages): (&[(u64, u64)], &[u64]),
        extra: &[Entry],
    ) -> Result<Response> {
        self.pool.fence();
        let mut out = Vec::new();
        let mut plan = index::Plan::default();
        if let Err(e) = self.stage_pages(ino, d, updates, &mut plan, &mut out) {
            self.release_data_pages(pages);
            return Err(e);
        }
        out.extend_from_slice(extra);
        if let Err(e) = self.commit(&out, &[ino]) {
            self.release_nodes(&plan.new_nodes);
            self.release_data_pages(pages);
            return Err(e);
        }
        let replaced: Vec<Item> = plan.old_pages.iter().map(|&p| Item::DataPage(p)).collect();
        self.retire(&replaced);
        Ok(Response::Done)
    }

    /// `n` fresh data pages for the server's own writes, making room if need be (ENOSPC,
    /// with none taken, if there is none). Not published: `release_data_pages` gives them
    /// back at once if the commit fails.
    pub(super) fn alloc_data(&mut self, n: usize) -> Result<Vec<u64>> {
        let mut pages = Vec::with_capacity(n);
        while pages.len() < n {
            let before = pages.len();
            self.alloc
                .alloc_data_pages((n - pages.len()) as u64, &mut pages);
            if pages.len() == before && !self.make_room() {
                self.release_data_pages(&pages);
                return Err(Error::ENOSPC);
            }
        }
        Ok(pages)
    }

    /// Give back data pages taken by `alloc_data` and never published.
    pub(super) fn release_data_pages(&mut self, pages: &[u64]) {
        for &p in pages {
            self.alloc.release_now(Item::DataPage(p));
        }
    }
}

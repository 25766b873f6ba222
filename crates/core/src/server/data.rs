//! Data-side requests: page reservations, write commits, truncate, fallocate, attributes.

use super::{ClientId, Server};
use crate::alloc::Item;
use crate::error::{Error, Result};
use crate::index::{self, MAX_FILE_SIZE};
use crate::inode::{InodeData, field};
use crate::layout::{Geometry, PAGE};
use crate::oplog::Entry;
use crate::perm::{self, Creds, W};
use crate::request::{Handle, Response, SetAttr, SetTime, WriteCheck};
use engram_pmem::Pool;

/// Lists a write commit fills, kept from one commit to the next so that a commit allocates
/// nothing once they have grown.
#[derive(Debug, Default)]
pub(super) struct Scratch {
    plan: index::Plan,
    out: Vec<Entry>,
    items: Vec<Item>,
}

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

/// Most pages one reservation request hands out.
const MAX_RESERVE: u64 = 4096;

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
    pub(super) fn reserve(&mut self, client: ClientId, want: u64) -> Result<Response> {
        let want = want.clamp(1, MAX_RESERVE);
        let mut pages = Vec::new();
        loop {
            self.alloc.alloc_data_pages(want, &mut pages);
            if !pages.is_empty() || !self.make_room() {
                break;
            }
        }
        if pages.is_empty() {
            return Err(Error::with_msg(libc::ENOSPC, "no free data pages"));
        }
        self.reservations
            .entry(client)
            .or_default()
            .insert(pages.iter().copied());
        Ok(Response::Pages(pages))
    }

    pub(super) fn unreserve(&mut self, client: ClientId, pages: &[u64]) -> Result<Response> {
        self.take_reserved(
            client,
            pages.iter().copied(),
            "page not reserved by this client",
        )?;
        self.release_data_pages(pages);
        Ok(Response::Done)
    }

    /// Take pages out of a client's reservation: all of them, or none and EINVAL (`what`)
    /// if one is not reserved by the client or is named twice.
    fn take_reserved(
        &mut self,
        client: ClientId,
        pages: impl IntoIterator<Item = u64> + Clone,
        what: &'static str,
    ) -> Result<()> {
        let taken = match self.reservations.get_mut(&client) {
            Some(r) => r.take(pages),
            // A client that never reserved may still commit no pages (a write in place
            // beyond the end of file).
            None => pages.into_iter().next().is_none(),
        };
        if taken {
            Ok(())
        } else {
            Err(Error::with_msg(libc::EINVAL, what))
        }
    }

    /// `Request::CommitWrite`, also called directly (with no owned list of pages) by a
    /// client in this process.
    pub(crate) fn commit_write(
        &mut self,
        client: ClientId,
        h: Handle,
        pages: &[(u64, u64)],
        end: u64,
        check: Option<&WriteCheck>,
    ) -> Result<Response> {
        if self.closed {
            return Err(Error::with_msg(libc::EIO, "the pool has been unmounted"));
        }
        self.check_writer(client, h)?;
        if self.backing_pending() {
            self.retry_backing();
        }
        let d = self.inode(h)?;
        if d.is_dir() {
            return Err(Error::EISDIR);
        }
        if !d.is_reg() {
            return Err(Error::EINVAL);
        }
        if end > MAX_FILE_SIZE {
            return Err(Error::EFBIG);
        }
        // Page numbers strictly ascending (as the client writes them): no page number
        // twice, and the checks below can search the list instead of building a set.
        let mut prev = None;
        for &(pg, _) in pages {
            if pg >= MAX_FILE_SIZE / PAGE || prev.is_some_and(|p| pg <= p) {
                return Err(Error::with_msg(
                    libc::EINVAL,
                    "write commit names page numbers out of order or out of range",
                ));
            }
            if pg >= end.div_ceil(PAGE) {
                return Err(Error::with_msg(
                    libc::EINVAL,
                    "write commit names a page beyond its end",
                ));
            }
            prev = Some(pg);
        }
        // The data pages must be the client's reserved ones, each named once. They leave the
        // reservation now and go back to it if the commit fails.
        let data_pages = pages.iter().map(|p| p.1);
        let what = "write commit names a page it does not own";
        self.take_reserved(client, data_pages.clone(), what)?;
        let committed = match check {
            Some(c) => self.commit_checked(client, h, &d, pages, end, c),
            None => self.commit_pages(h, &d, pages, end),
        };
        if committed.is_ok() && self.shared.mapped.contains(h.ino) {
            // A write-back of this file's mappings waits until its copy has had time to
            // reach the backing file (`backing.rs`'s `take_fill_lock`).
            self.mapped_writes.insert(h.ino, std::time::Instant::now());
        }
        if committed.is_err() {
            self.reservations
                .entry(client)
                .or_default()
                .insert(data_pages);
        }
        committed
    }

    /// Map `pages` into the file and set its size to at least `end`: a write commit whose
    /// page numbers and data pages have been checked.
    pub(super) fn commit_pages(
        &mut self,
        h: Handle,
        d: &InodeData,
        pages: &[(u64, u64)],
        end: u64,
    ) -> Result<Response> {
        self.check_end(d, pages, end, None)?;
        self.map_pages(h, d, pages, end)
    }

    /// `commit_pages` of a write checked against what `client` saw (another process may
    /// write the file).
    fn commit_checked(
        &mut self,
        client: ClientId,
        h: Handle,
        d: &InodeData,
        pages: &[(u64, u64)],
        end: u64,
        c: &WriteCheck,
    ) -> Result<Response> {
        self.check_end(d, pages, end, Some(c))?;
        let replaced = self.check_write(client, h.ino, d, pages, end, c)?;
        if replaced.is_empty() {
            return self.map_pages(h, d, pages, end);
        }
        // Pages of the gap replaced rather than zeroed in place go in with the client's.
        let r = self.map_pages(h, d, &merge_updates(pages, &replaced), end);
        if r.is_err() {
            self.release_data_pages(&fresh_pages(&replaced));
        }
        r
    }

    /// The index, block count, size and times of a commit of `pages` (checked) up to `end`.
    fn map_pages(
        &mut self,
        h: Handle,
        d: &InodeData,
        pages: &[(u64, u64)],
        end: u64,
    ) -> Result<Response> {
        // The lists a commit fills are kept from one commit to the next (an error drops
        // them: the next commit allocates anew). Boxed, so that taking them moves a pointer.
        let mut scratch = self.scratch.take().unwrap_or_default();
        let Scratch { plan, out, items } = &mut *scratch;
        out.clear();
        self.stage_pages(h.ino, d, pages, plan, out)?;
        if end > d.size {
            out.push(self.set64(h.ino, field::SIZE, end));
        }
        let now = self.now();
        self.touch(h.ino, now, out);
        if let Err(e) = self.commit(out, &[h.ino]) {
            self.release_nodes(&plan.new_nodes);
            return Err(e);
        }
        items.clear();
        items.extend(plan.old_pages.iter().map(|&p| Item::DataPage(p)));
        self.retire(items);
        self.scratch = Some(scratch);
        Ok(Response::Done)
    }

    /// The size a commit may set: a checked commit (another process may write the file)
    /// supplies every page of the range it wrote, so it grows the file only over its own
    /// bytes; an unchecked one grows it at most to the end of a page it supplies or the
    /// file already has (bytes written in place beyond the end of file).
    fn check_end(
        &self,
        d: &InodeData,
        supplied: &[(u64, u64)],
        end: u64,
        check: Option<&WriteCheck>,
    ) -> Result<()> {
        let bad = |why: &str| {
            Err(Error::with_msg(
                libc::EINVAL,
                format!("write commit: {why}"),
            ))
        };
        match check {
            Some(c) => {
                if c.start >= end {
                    return bad("its range is empty");
                }
                // Ascending and distinct: as many pages as the range has, none before it
                // (none after it was checked above), is exactly the range. Pages written in
                // place count too, each ascending, inside the range and not supplied.
                let (first, last) = (c.start / PAGE, end.div_ceil(PAGE));
                let mut prev = None;
                for &(pg, _) in &c.in_place {
                    if prev.is_some_and(|p| pg <= p)
                        || pg < first
                        || pg >= last
                        || supplied.binary_search_by_key(&pg, |&(p, _)| p).is_ok()
                    {
                        return bad("its pages written in place are out of order or range");
                    }
                    prev = Some(pg);
                }
                if (supplied.len() + c.in_place.len()) as u64 != last - first
                    || supplied.first().is_some_and(|&(pg, _)| pg < first)
                {
                    return bad("its pages do not cover the range it wrote");
                }
            }
            None if end > d.size => {
                let tail = (end - 1) / PAGE;
                if supplied.binary_search_by_key(&tail, |&(pg, _)| pg).is_err()
                    && index::lookup(&self.pool, &self.geo, d.root, d.height, tail)? == 0
                {
                    return bad("it grows the file beyond the pages it wrote");
                }
            }
            None => {}
        }
        Ok(())
    }

    /// Refuse (EAGAIN) a write prepared against pages or a size that another process has
    /// changed since; otherwise zero the gap between the end of file and the write, in pages
    /// the write does not replace (they are beyond the end of file, so invisible).
    fn check_write(
        &mut self,
        client: ClientId,
        ino: u64,
        d: &InodeData,
        pages: &[(u64, u64)],
        end: u64,
        c: &WriteCheck,
    ) -> Result<Vec<(u64, u64)>> {
        // No old pages: the client copied no old byte (whole pages), so there is nothing
        // of them that another process could have changed since.
        let whole = c.start.is_multiple_of(PAGE) && end.is_multiple_of(PAGE);
        if c.old_pages.len() != pages.len() && !(c.old_pages.is_empty() && whole) {
            return Err(Error::with_msg(
                libc::EINVAL,
                "write check does not match the pages",
            ));
        }
        for (&(pg, _), &old) in pages.iter().zip(&c.old_pages) {
            if index::lookup(&self.pool, &self.geo, d.root, d.height, pg)? != old {
                return Err(Error::with_msg(
                    libc::EAGAIN,
                    "pages changed by another process",
                ));
            }
        }
        for &(pg, page) in &c.in_place {
            if page == 0 || index::lookup(&self.pool, &self.geo, d.root, d.height, pg)? != page {
                return Err(Error::with_msg(
                    libc::EAGAIN,
                    "pages changed by another process",
                ));
            }
        }
        // A write into the page holding the end of file copies the bytes beyond it too,
        // which a sole writer may have filled in place (or the server zeroed) and committed
        // since: the size it saw must still hold, or the copy would undo that.
        let touches_eof = c.start > c.size_seen || end.next_multiple_of(PAGE) > c.size_seen;
        if touches_eof && d.size != c.size_seen {
            return Err(Error::with_msg(
                libc::EAGAIN,
                "size changed by another process",
            ));
        }
        if c.start <= d.size {
            return Ok(Vec::new());
        }
        // The gap, in pages the write does not supply (their copies hold zeros there). The
        // pages it wrote in place are zeroed too: the gap ends where their stores begin. A
        // client that wrote in place was alone in writing in place (`several_writers`): the
        // gap is then zeroed in place.
        let skip = |pg: u64| pages.binary_search_by_key(&pg, |&(p, _)| p).is_ok();
        let in_place = !c.in_place.is_empty() || !self.others_write(client, ino);
        let replaced = self.zero_beyond_eof(in_place, d, (d.size, c.start), 0..0, &skip)?;
        self.pool.fence();
        Ok(replaced)
    }

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
    fn zero_beyond_eof(
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
        let mut fresh = fresh.into_iter();
        let mut buf = vec![0u8; PAGE as usize];
        let mut replaced = Vec::with_capacity(old.len());
        for &(pg, page) in &old {
            let new = match needs_page(pg) {
                true => fresh.next().ok_or(Error::EIO)?,
                false => 0,
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
        self.plan_index(d, updates, plan)?;
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
        d: &InodeData,
        pages: &[(u64, u64)],
        plan: &mut index::Plan,
    ) -> Result<()> {
        let max_pg = pages.last().map_or(0, |p| p.0);
        // Room for growing to the new height plus a few paths of new nodes, so that making
        // room (a checkpoint) rarely has to happen in the middle of planning.
        let likely = (index::height_for(max_pg) as u64 + 1) * (pages.len() as u64).clamp(1, 4);
        self.ensure_meta(likely.min(self.alloc.meta.len()))?;
        let pool = self.pool.clone();
        let alloc = &mut self.alloc;
        let planned = index::plan_set(
            &pool,
            &self.geo,
            (d.root, d.height),
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

    pub(super) fn setattr(
        &mut self,
        client: ClientId,
        c: &Creds,
        h: Handle,
        a: SetAttr,
    ) -> Result<Response> {
        let d = self.inode(h)?;
        let now = self.now();
        let mut out = Vec::new();
        let mut staged = Staged::default();
        let mut mode = d.mode;
        if let Some(m) = a.mode {
            if !c.owns(&d) {
                return Err(Error::EPERM);
            }
            mode = (d.mode & libc::S_IFMT) | (m & 0o7777);
            if !c.is_root() && !c.in_group(d.gid) {
                mode &= !libc::S_ISGID;
            }
        }
        if a.uid.is_some() || a.gid.is_some() {
            let uid = a.uid.unwrap_or(d.uid);
            let gid = a.gid.unwrap_or(d.gid);
            if !c.is_root()
                && (uid != d.uid || c.uid != d.uid || (gid != d.gid && !c.in_group(gid)))
            {
                return Err(Error::EPERM);
            }
            if uid != d.uid || gid != d.gid {
                // As Linux does: a change of owner clears set-user-ID and set-group-ID.
                if !d.is_dir() {
                    mode &= !libc::S_ISUID;
                    if mode & libc::S_IXGRP != 0 {
                        mode &= !libc::S_ISGID;
                    }
                }
                out.push(self.set32(h.ino, field::UID, uid));
                out.push(self.set32(h.ino, field::GID, gid));
            }
        }
        if mode != d.mode {
            out.push(self.set32(h.ino, field::MODE, mode));
        }
        for (t, f) in [(a.atime, field::ATIME), (a.mtime, field::MTIME)] {
            match t {
                None => {}
                Some(SetTime::Now) => {
                    if !c.owns(&d) {
                        perm::check(c, &d, W)?;
                    }
                    out.push(self.set64(h.ino, f, now as u64));
                }
                Some(SetTime::Ns(ns)) => {
                    if !c.owns(&d) {
                        return Err(Error::EPERM);
                    }
                    out.push(self.set64(h.ino, f, ns as u64));
                }
            }
        }
        if let Some(size) = a.size {
            if d.is_dir() {
                return Err(Error::EISDIR);
            }
            if !d.is_reg() {
                return Err(Error::EINVAL);
            }
            if size > MAX_FILE_SIZE {
                return Err(Error::EFBIG);
            }
            perm::check(c, &d, W)?;
            staged = self.stage_truncate(client, h.ino, &d, size, &mut out)?;
            if a.mtime.is_none() {
                out.push(self.set64(h.ino, field::MTIME, now as u64));
            }
        }
        out.push(self.set64(h.ino, field::CTIME, now as u64));
        if let Err(e) = self.commit(&out, &[h.ino]) {
            self.release_data_pages(&staged.fresh);
            self.release_nodes(&staged.new_nodes);
            return Err(e);
        }
        self.retire(&staged.retired);
        Ok(Response::Done)
    }

    /// Stores that change the size to `size` for `client`, what to retire after the commit
    /// and what to give back if it fails.
    fn stage_truncate(
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

    pub(super) fn fallocate(
        &mut self,
        client: ClientId,
        h: Handle,
        offset: u64,
        len: u64,
        keep_size: bool,
    ) -> Result<Response> {
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
        let mut holes = Vec::new();
        for pg in offset / PAGE..end.div_ceil(PAGE) {
            if index::lookup(&self.pool, &self.geo, d.root, d.height, pg)? == 0 {
                holes.push(pg);
            }
        }
        if holes.len() as u64 > self.alloc.data.free() + self.alloc.pending() as u64 {
            return Err(Error::ENOSPC);
        }
        let mut pages = self.alloc_data(holes.len())?;
        for &p in &pages {
            self.pool.zero_nt(p, PAGE);
        }
        let mut updates: Vec<(u64, u64)> =
            holes.iter().copied().zip(pages.iter().copied()).collect();
        if !keep_size && end > d.size {
            let in_place = !self.others_write(client, h.ino);
            let range = offset / PAGE..end.div_ceil(PAGE);
            match self.zero_beyond_eof(in_place, &d, (d.size, end), range, &|_| false) {
                Ok(replaced) if !replaced.is_empty() => {
                    pages.extend(fresh_pages(&replaced));
                    updates = merge_updates(&updates, &replaced);
                }
                Ok(_) => {}
                Err(e) => {
                    self.release_data_pages(&pages);
                    return Err(e);
                }
            }
        }
        self.pool.fence();
        let mut out = Vec::new();
        let mut plan = index::Plan::default();
        if let Err(e) = self.stage_pages(h.ino, &d, &updates, &mut plan, &mut out) {
            self.release_data_pages(&pages);
            return Err(e);
        }
        let now = self.now();
        if !keep_size && end > d.size {
            out.push(self.set64(h.ino, field::SIZE, end));
            self.touch(h.ino, now, &mut out);
        } else {
            out.push(self.set64(h.ino, field::CTIME, now as u64));
        }
        if let Err(e) = self.commit(&out, &[h.ino]) {
            self.release_nodes(&plan.new_nodes);
            self.release_data_pages(&pages);
            return Err(e);
        }
        let replaced: Vec<Item> = plan.old_pages.iter().map(|&p| Item::DataPage(p)).collect();
        self.retire(&replaced);
        Ok(Response::Done)
    }
}

//! Page reservations and write commits: checking a commit against what its client saw,
//! then mapping its pages into the file.

use super::{fresh_pages, merge_updates};
use crate::alloc::Item;
use crate::error::{Error, Result};
use crate::index::{self, MAX_FILE_SIZE};
use crate::inode::{InodeData, field};
use crate::layout::PAGE;
use crate::oplog::Entry;
use crate::perm::Creds;
use crate::request::{Handle, Response, WriteCheck};
use crate::server::{ClientId, Server};

/// Lists a write commit fills, kept from one commit to the next so that a commit allocates
/// nothing once they have grown.
#[derive(Debug, Default)]
pub(in crate::server) struct Scratch {
    plan: index::Plan,
    out: Vec<Entry>,
    items: Vec<Item>,
}

/// At most this fraction of the free pages goes to one reservation (a client that needs
/// more asks again).
const RESERVE_SHARE: u64 = 16;

/// The most reserved pages one client may hold, taken or not by writes in flight, in a pool
/// of `data_pages`: a quarter of the pool, but room for one write's atomic step at least
/// and for sixteen of them and a batch at most (144 MiB: a client's threads writing 8 MiB
/// steps at once hold a step each until they commit; fio with 16 threads of 16 MiB writes
/// runs).
fn held_at_most(data_pages: u64) -> u64 {
    let step = crate::fs::ATOMIC_WRITE_MAX / PAGE;
    (data_pages / 4).clamp(step, 16 * step + crate::request::MAX_RESERVE)
}

impl Server {
    pub(in crate::server) fn reserve(&mut self, client: ClientId, want: u64) -> Result<Response> {
        // Once little is free, a share of it rather than a whole batch: the pages a client
        // holds are lost to the others until it writes or goes, and a small pool shared by
        // a few dozen processes ran out of space while nearly empty. The share shrinks with
        // the clients already holding pages: at 1/16 each, 30 processes that each wrote a
        // little and kept their file open held 86% of a small pool, and another writer got
        // ENOSPC with 240 KB of data in 16 MiB (found by probing); now about a quarter.
        let holders = self.reservations.values().filter(|r| !r.is_empty()).count() as u64;
        let share = (self.alloc.data.free() / (RESERVE_SHARE * (holders + 1))).max(1);
        // And a bound on what one client holds in all: a client asks again only when its
        // pages are fewer than one write needs (an atomic step, `ATOMIC_WRITE_MAX`), so it
        // never holds more than that and a batch; one that kept asking without writing took
        // every free page, and root's 1 MiB write got ENOSPC in an empty pool (found by
        // fuzzing the daemon).
        let held = self.reservations.get(&client).map_or(0, |r| r.len());
        let room = held_at_most(self.alloc.data.len()).saturating_sub(held);
        if room == 0 {
            return Err(Error::with_msg(
                libc::ENOSPC,
                "this client already holds as many reserved pages as one may",
            ));
        }
        let want = want
            .clamp(1, crate::request::MAX_RESERVE)
            .min(share)
            .min(room);
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

    pub(in crate::server) fn unreserve(
        &mut self,
        client: ClientId,
        pages: &[u64],
    ) -> Result<Response> {
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
    /// client in this process. Returns whether some process mapped the file shared when the
    /// commit was made (its mapped bit, `Response::Committed`).
    pub(crate) fn commit_write(
        &mut self,
        client: ClientId,
        creds: &Creds,
        h: Handle,
        pages: &[(u64, u64)],
        end: u64,
        check: Option<&WriteCheck>,
    ) -> Result<bool> {
        if self.closed {
            return Err(Error::with_msg(libc::EIO, "the pool has been unmounted"));
        }
        self.check_writer(client, h)?;
        self.changed_by(client, h.ino);
        self.kill_privs_for_write(client, creds, h)?;
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
        // The load that decides whether a write-back waits also answers the writer: no
        // other request runs between the commit and it.
        let mapped = committed.is_ok() && self.shared.mapped.contains(h.ino);
        if mapped {
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
        committed.map(|()| mapped)
    }

    /// Map `pages` into the file and set its size to at least `end`: a write commit whose
    /// page numbers and data pages have been checked.
    pub(in crate::server) fn commit_pages(
        &mut self,
        h: Handle,
        d: &InodeData,
        pages: &[(u64, u64)],
        end: u64,
    ) -> Result<()> {
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
    ) -> Result<()> {
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
    ) -> Result<()> {
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
        Ok(())
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
}

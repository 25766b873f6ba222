//! Clearing a range of a file: fallocate's `FALLOC_FL_PUNCH_HOLE` and
//! `FALLOC_FL_ZERO_RANGE`. Like every data change, copy-on-write: the pages that keep some
//! of their bytes are replaced by fresh copies with the range zeroed, so the change is one
//! commit, atomic for readers and across a crash.

use crate::error::{Error, Result};
use crate::index;
use crate::inode::field;
use crate::layout::PAGE;
use crate::request::{Clear, Handle, Response};
use crate::server::{ClientId, Server};

impl Server {
    /// Make `[offset, offset + len)` of file `h` read as zeros, as `how` says.
    pub(in crate::server) fn clear_range(
        &mut self,
        client: ClientId,
        h: Handle,
        (offset, len): (u64, u64),
        how: Clear,
    ) -> Result<Response> {
        let (d, end) = self.data_range(h, offset, len)?;
        let (first, last) = (offset / PAGE, end.div_ceil(PAGE));
        let punch = how == Clear::PunchHole;
        let grows = how == Clear::ZeroRange { keep_size: false } && end > d.size;
        if !punch && last - first > self.alloc.data.free() + self.alloc.pending() as u64 {
            return Err(Error::ENOSPC);
        }
        let mut existing = Vec::new();
        let mut each = |pg, page| existing.push((pg, page));
        index::for_each_page(
            &self.pool, &self.geo, d.root, d.height, first, last, &mut each,
        )?;
        // (page number, old page or 0) of each page the change replaces: a punch leaves
        // holes alone, zeroing gives every page of the range space.
        let targets: Vec<(u64, u64)> = if punch {
            existing
        } else {
            let mut at = existing.iter().peekable();
            (first..last)
                .map(|pg| (pg, at.next_if(|e| e.0 == pg).map_or(0, |e| e.1)))
                .collect()
        };
        // A page wholly inside the range is freed (a punch) or replaced by a zeroed one; a
        // page the range covers in part keeps its other bytes in a copy.
        let whole = |pg: u64| offset <= pg * PAGE && (pg + 1) * PAGE <= end;
        let freed = |pg: u64| punch && whole(pg);
        let needed = targets.iter().filter(|t| !freed(t.0)).count();
        let mut pages = self.alloc_data(needed)?;
        let mut fresh = pages.iter().copied();
        let mut buf = vec![0u8; PAGE as usize];
        let mut updates = Vec::with_capacity(targets.len());
        for &(pg, old) in &targets {
            if freed(pg) {
                updates.push((pg, 0));
                continue;
            }
            // `alloc_data` gave one page for each.
            let Some(new) = fresh.next() else {
                self.release_data_pages(&pages);
                return Err(Error::EIO);
            };
            if whole(pg) || old == 0 {
                self.pool.zero_nt(new, PAGE);
            } else {
                // The copy keeps the bytes outside the range that lie before the end of
                // file; those beyond it, invisible now, must read as zeros if the size ever
                // grows over them.
                let base = pg * PAGE;
                let in_page = |at: u64| (at.clamp(base, base + PAGE) - base) as usize;
                self.pool.read(old, &mut buf);
                buf[in_page(offset)..in_page(end)].fill(0);
                buf[in_page(d.size)..].fill(0);
                self.pool.copy_nt(new, &buf);
            }
            updates.push((pg, new));
        }
        let mut extra = Vec::new();
        if grows {
            // What lies between the old end of file and the range becomes visible.
            let in_place = !self.others_write(client, h.ino);
            let inside = |pg: u64| (first..last).contains(&pg);
            let replaced = self.zero_beyond_eof(in_place, &d, (d.size, offset), 0..0, &inside);
            self.take_replaced(replaced, &mut pages, &mut updates)?;
            extra.push(self.set64(h.ino, field::SIZE, end));
        }
        let now = self.now();
        self.touch(h.ino, now, &mut extra);
        self.publish_pages(h.ino, &d, (&updates, &pages), &extra)
    }
}

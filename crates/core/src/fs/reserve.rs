//! Pages reserved to this client: taken in batches from the server, handed to writes,
//! faulted in ahead, and given back (at unmount, and through a daemon when the process's
//! last file open for writing closes).

use super::{Fs, lock};
use crate::error::{Error, Result};
use crate::request::{Request, Response};
use std::sync::atomic::Ordering;

/// Pages asked for per reservation (4 MiB); the server hands out less when little is free.
const RESERVE_BATCH: u64 = 1024;
/// Pages an idle client keeps when it gives its reservation back (64 KiB).
const KEEP_IDLE: usize = 16;

impl Fs {
    /// A file was opened for writing (counted for `close_handle`).
    pub(crate) fn writer_opened(&self) {
        self.core.writers.fetch_add(1, Ordering::AcqRel);
    }

    /// With no file open for writing left, a daemon's client gives its reserved pages back
    /// (posted) when free pages are short: held by an idle process they were lost to every
    /// other, and a few dozen processes that had each written a small file left a small pool
    /// with no free page. Not otherwise: taking a batch again costs its faulting in, and a
    /// process writing small files one after another spent 150 µs more on each. The next
    /// `KEEP_IDLE` pages stay, so that such a process asks again only every so many files.
    pub(super) fn give_back_reservation(&self, r: &crate::daemon::Remote) -> Result<()> {
        if !self.core.tight.load(Ordering::Relaxed) || self.core.forked() {
            return Ok(());
        }
        let pages = {
            let mut reserve = lock(&self.core.reserve);
            // A file opened for writing since keeps them.
            if self.core.writers.load(Ordering::Acquire) != 0 || reserve.len() <= KEEP_IDLE {
                return Ok(());
            }
            // The end of the list is handed out next (`take_pages`).
            let give = reserve.len() - KEEP_IDLE;
            reserve.drain(..give).collect::<Vec<u64>>()
        };
        r.post(&Request::Unreserve { pages })
    }

    /// EIO in a forked child of the process that made this `Fs` (`forks.rs`): the reserved
    /// pages it would write into are its parent's.
    pub(super) fn not_forked(&self) -> Result<()> {
        if !self.core.forked() {
            return Ok(());
        }
        Err(Error::with_msg(
            libc::EIO,
            "this pool was opened by the parent of a fork: a forked child changes it through a \
             connection of its own (Fs::connect)",
        ))
    }

    /// Give reserved pages back to the server.
    pub(super) fn flush_reservation(&self) -> Result<()> {
        if self.core.forked() {
            lock(&self.core.reserve).clear();
            return Ok(());
        }
        let pages = std::mem::take(&mut *lock(&self.core.reserve));
        if !pages.is_empty() {
            self.call(Request::Unreserve { pages })?;
        }
        Ok(())
    }

    /// `n` reserved pages into `out` (cleared first), ascending where the reservation allows.
    pub(crate) fn take_pages(&self, n: usize, out: &mut Vec<u64>) -> Result<()> {
        out.clear();
        self.not_forked()?;
        let mut r = lock(&self.core.reserve);
        while r.len() < n {
            let want = (n - r.len()) as u64;
            let asked = want.max(RESERVE_BATCH);
            match self.call(Request::Reserve { pages: asked }) {
                Ok(Response::Pages(mut p)) => {
                    // Short of what the server hands out at most: free pages are short.
                    let most = asked.min(crate::request::MAX_RESERVE);
                    self.core
                        .tight
                        .store((p.len() as u64) < most, Ordering::Relaxed);
                    self.prefault_pages(&p);
                    // Stored reversed so that pop() hands out ascending runs.
                    p.reverse();
                    p.append(&mut r);
                    *r = p;
                }
                Ok(_) => return Err(Error::EIO),
                Err(e) => return Err(e),
            }
        }
        let at = r.len() - n;
        out.extend(r.drain(at..).rev());
        Ok(())
    }

    /// Fault freshly reserved pages in ahead of the writes that will fill them, one run of
    /// consecutive pages at a time (a first store to each would otherwise fault). A lone
    /// page is left to its fault: the call costs what the fault does, and a page this
    /// process wrote before (a deleted journal's, say) is still mapped and would not fault
    /// at all. Once the free space is fragmented, a reservation is mostly lone pages
    /// (SQLite with several processes: about 120 calls per reservation).
    fn prefault_pages(&self, pages: &[u64]) {
        let page = crate::layout::PAGE;
        let mut i = 0;
        while i < pages.len() {
            let mut j = i + 1;
            while j < pages.len() && pages[j] == pages[j - 1] + page {
                j += 1;
            }
            if j - i > 1 {
                self.core.pool.prefault(pages[i], (j - i) as u64 * page);
            }
            i = j;
        }
    }

    /// Return pages that were taken but not committed.
    pub(crate) fn untake_pages(&self, pages: impl DoubleEndedIterator<Item = u64>) {
        lock(&self.core.reserve).extend(pages.rev());
    }
}

//! The commit machinery: durability points, logging and applying records, checkpoints,
//! and retiring and reclaiming space (making room when an allocation finds none).

use super::{RECLAIM_BATCH, Server};
use crate::alloc::Item;
use crate::error::{Error, Result};
use crate::oplog::{self, Entry, Log};
use crate::request::Response;

/// How long making room waits for pinned readers to move on before the allocation that
/// needed the room fails with ENOSPC. A reader stopped while pinned (SIGSTOP in the middle
/// of a read) holds reclamation back until it runs again: each allocation that needs room
/// then waits this long and fails.
const MAKE_ROOM_WAIT: std::time::Duration = std::time::Duration::from_millis(100);

impl Server {
    // ------------------------------------------------------------------ commit machinery

    /// fsync, fdatasync, syncfs: everything is durable already, but a failure to write the
    /// pool back (since the last check) is reported here as EIO.
    pub(super) fn sync(&mut self) -> Result<Response> {
        self.sync_point("fsync")?;
        Ok(Response::Done)
    }

    /// Record a write-back failure seen at `what`: the pool takes no more changes.
    fn fail(&mut self, what: &str, e: &std::io::Error) {
        if self.failed.is_none() {
            self.failed = Some(format!(
                "writing the pool back to its file failed ({what}: {e})"
            ));
        }
    }

    /// EIO if writing the pool back has failed since it was opened.
    fn check_failed(&self) -> Result<()> {
        match &self.failed {
            None => Ok(()),
            Some(m) => Err(Error::with_msg(
                libc::EIO,
                format!("{m}; the pool takes no more changes until it is reopened"),
            )),
        }
    }

    /// Whether a fence since the last check failed to write the pool back (without a new
    /// fence: the caller's last fence has just run).
    pub(super) fn check_synced(&mut self, what: &str) -> Result<()> {
        if let Some(e) = self.pool.take_sync_error() {
            self.fail(what, &e);
        }
        self.check_failed()
    }

    /// A durability point: fence, then EIO if that or any fence since the last check failed.
    pub(crate) fn sync_point(&mut self, what: &str) -> Result<()> {
        // In-place stores are durable at every durability point (a checkpoint relies on
        // it).
        self.unflushed.flush(&self.pool);
        if let Err(e) = self.pool.sync_point() {
            self.fail(what, &e);
        }
        self.check_failed()
    }

    /// Log, then apply, a record. Everything it makes reachable must already be persisted.
    /// EIO (and nothing logged or applied) if persisting those structures failed; EIO
    /// (nothing applied) if persisting the record failed.
    pub(crate) fn commit(&mut self, entries: &[Entry], inos: &[u64]) -> Result<()> {
        if entries.is_empty() {
            return Ok(());
        }
        let len = Log::record_len(entries);
        if self.log.needs_checkpoint(len) {
            self.checkpoint()?;
        }
        // Earlier records' in-place stores stay cached until a durability point or until
        // their runs are all taken (`oplog::Unflushed`): the log covers them. On an
        // ordinary file the record's fence is an `msync`, and a failure to write back what
        // came before would be reported only once this record may be durable, too late to
        // undo its operation: there everything before the record is synced and checked
        // first.
        if self.pool.media() == engram_pmem::Media::File {
            self.sync_point("persisting new structures")?;
        } else {
            self.check_synced("persisting new structures")?;
        }
        self.log.append(&self.pool, entries, len)?;
        self.check_synced("a log append")?;
        // The inodes touched, sorted so that concurrent readers always see the counters
        // taken in one order. An operation names a handful: no allocation then.
        let mut small = [0u64; 8];
        let mut large = Vec::new();
        let touched: &mut [u64] = if inos.len() <= small.len() {
            small[..inos.len()].copy_from_slice(inos);
            &mut small[..inos.len()]
        } else {
            large.extend_from_slice(inos);
            &mut large
        };
        touched.sort_unstable();
        let distinct = |k: usize| touched[k] != 0 && (k == 0 || touched[k] != touched[k - 1]);
        for k in (0..touched.len()).filter(|&k| distinct(k)) {
            self.shared.seqs.write_begin(touched[k]);
        }
        oplog::apply_all(&self.pool, entries, &mut self.unflushed);
        for k in (0..touched.len()).filter(|&k| distinct(k)) {
            self.shared.seqs.write_end(touched[k]);
        }
        Ok(())
    }

    /// Make every applied record redundant: persist in-place updates, move the log head.
    /// EIO, with the head left where it was, if the in-place updates could not be written
    /// back.
    pub fn checkpoint(&mut self) -> Result<()> {
        self.sync_point("a checkpoint")?;
        let head = self.log.checkpoint();
        self.sb.log_head = head.head;
        self.sb.log_head_seq = head.seq;
        self.sb.store(&self.pool);
        self.check_synced("a checkpoint's superblock write")?;
        self.checkpoints += 1;
        self.reclaim();
        Ok(())
    }

    fn reclaim(&mut self) -> usize {
        let safe = self.shared.epochs.safe_epoch();
        self.alloc.reclaim(safe, self.checkpoints)
    }

    /// Free space held by retired items: checkpoint so that logged structures may be reused,
    /// then reclaim what no reader holds. Returns whether anything came free.
    /// (`server/data/` uses this form: a failed checkpoint then reads as no room, and the
    /// next request reports EIO.)
    pub(super) fn make_room(&mut self) -> bool {
        self.try_make_room().unwrap_or(false)
    }

    fn try_make_room(&mut self) -> Result<bool> {
        let before = self.alloc.pending();
        if before == 0 {
            return Ok(false);
        }
        // The checkpoint itself reclaims what is safe.
        self.checkpoint()?;
        // A reader may be pinned for a while: a 4 MB read copies for a millisecond or more,
        // and a process reading in a loop pins again at once. A hundred yields (well under
        // a millisecond) gave a writer ENOSPC with two thirds of the pool free while
        // another process read a file in a loop. Each reclaim advances the epoch, so a
        // reader's next pin no longer holds back what was retired before it.
        let deadline = std::time::Instant::now() + MAKE_ROOM_WAIT;
        for round in 0u32.. {
            if self.alloc.pending() < before || self.reclaim() > 0 {
                return Ok(true);
            }
            if std::time::Instant::now() >= deadline {
                return Ok(false);
            }
            if round < 100 {
                std::thread::yield_now();
            } else {
                std::thread::sleep(std::time::Duration::from_micros(100));
            }
        }
        Ok(false)
    }

    pub(crate) fn retire(&mut self, items: &[Item]) {
        if items.is_empty() {
            return;
        }
        let tag = self.shared.epochs.retire_tag();
        for &it in items {
            self.alloc.retire(it, tag, self.checkpoints);
        }
        if self.alloc.pending() >= self.reclaim_at {
            self.reclaim();
            // Items gated by the next checkpoint stay pending: do not rescan them every time.
            self.reclaim_at = self.alloc.pending() + RECLAIM_BATCH;
        }
    }

    pub(crate) fn alloc_inode(&mut self) -> Result<u64> {
        loop {
            if let Some(i) = self.alloc.alloc_inode() {
                return Ok(i);
            }
            if !self.try_make_room()? {
                return Err(Error::with_msg(libc::ENOSPC, "no free inodes"));
            }
        }
    }

    /// Make sure `n` metadata pages can be allocated without making room midway.
    pub(crate) fn ensure_meta(&mut self, n: u64) -> Result<()> {
        while self.alloc.meta.free() < n {
            if !self.try_make_room()? {
                return Err(Error::with_msg(libc::ENOSPC, "no free metadata pages"));
            }
        }
        Ok(())
    }

    pub(crate) fn alloc_meta(&mut self) -> Result<u64> {
        self.ensure_meta(1)?;
        self.alloc.alloc_meta_page().ok_or(Error::ENOSPC)
    }
}

//! The write side of open files: copy-on-write into reserved pages, then a commit through
//! the server.

use super::{ATOMIC_WRITE_MAX, File};
use crate::error::{Error, Result};
use crate::index::{self, MAX_FILE_SIZE};
use crate::inode::{InodeData, field};
use crate::layout::PAGE;
use crate::request::WriteCheck;
use crate::server::zero_range_beyond_eof;
use engram_pmem::Pool;
use std::cell::RefCell;

thread_local! {
    /// The lists a write fills, kept from one write to the next on each thread.
    static SCRATCH: RefCell<WriteScratch> = RefCell::default();
}

#[derive(Default)]
struct WriteScratch {
    /// Each page of the write (from its first): its data page now, 0 for a hole.
    old: Vec<u64>,
    /// Fresh pages taken from the reservation, in the order they are used.
    fresh: Vec<u64>,
    /// (page number, fresh page) to commit, page numbers ascending.
    updates: Vec<(u64, u64)>,
    /// A page assembled from old bytes and new.
    buf: Vec<u8>,
    /// (page number, data page) written in place beyond the end of file, for the commit's
    /// check when other processes may write the pool.
    in_place: Vec<(u64, u64)>,
}

/// What a write did (`File::write_placed`, `File::write_in_place`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Written {
    /// How many bytes were written.
    pub len: usize,
    /// Where they end (for an append, the end of file they were added at).
    pub end: u64,
    /// Some process mapped the file shared when one of the write's commits was made
    /// (`Response::Committed`): a writer that held none of the mappings' locks across its
    /// commits sees to it that they get its bytes (the shim's `mmap/writes.rs`). False for
    /// a write of nothing.
    pub mapped: bool,
}

/// Whether page `pg` of a write at `off` gets a fresh copy: holes, and pages whose visible
/// bytes change. With other processes holding the file open for writing (`copy_all`),
/// every page is copied: bytes beyond the end of file are only ours while this process
/// alone may write them.
fn copies(copy_all: bool, d: &InodeData, off: u64, pg: u64, old: u64) -> bool {
    copy_all || old == 0 || off.max(pg * PAGE) < d.size
}

/// Whole pages of a write going to consecutive pool pages: one copy for all of them.
#[derive(Default)]
struct Run {
    /// Pool offset, offset in the write's data, and length of the pending copy.
    dst: u64,
    src: usize,
    len: usize,
}

impl Run {
    /// Add the whole page at `src` of `data` going to pool page `dst`.
    fn add(&mut self, pool: &Pool, data: &[u8], dst: u64, src: usize) {
        if self.len > 0 && (self.dst + self.len as u64 != dst || self.src + self.len != src) {
            self.copy(pool, data);
        }
        if self.len == 0 {
            (self.dst, self.src) = (dst, src);
        }
        self.len += PAGE as usize;
    }

    /// Issue the pending copy (non-temporal, not fenced).
    fn copy(&mut self, pool: &Pool, data: &[u8]) {
        if self.len > 0 {
            pool.copy_nt(self.dst, &data[self.src..self.src + self.len]);
            self.len = 0;
        }
    }
}

impl File {
    /// Write `data` at `off` (or at the end of file for None); returns bytes written and
    /// where the write ended. A write larger than `ATOMIC_WRITE_MAX` is a series of atomic
    /// steps: if a later step fails (ENOSPC, EFBIG, …) the steps before it stay written and
    /// their length is returned (a short write, as POSIX has it); the error is returned
    /// only when nothing was written.
    pub(super) fn write_inner(&self, data: &[u8], off: Option<u64>) -> Result<Written> {
        if !self.opts.write {
            return Err(Error::EBADF);
        }
        if data.is_empty() {
            let end = off.unwrap_or_else(|| self.data().size);
            return Ok(Written {
                len: 0,
                end,
                mapped: false,
            });
        }
        let mut done = 0usize;
        let mut pos = off;
        // Where the last step ended (an append's offset is the end of its own bytes).
        let mut end = 0;
        let mut mapped = false;
        while done < data.len() {
            let n = (data.len() - done).min(ATOMIC_WRITE_MAX as usize);
            match self.write_chunk(&data[done..done + n], pos) {
                Ok((e, m)) => {
                    done += n;
                    end = e;
                    mapped |= m;
                    pos = pos.map(|_| e);
                }
                Err(_) if done > 0 => break,
                Err(e) => return Err(e),
            }
        }
        Ok(Written {
            len: done,
            end,
            mapped,
        })
    }

    /// One atomic write; returns where it ended, and whether the file was mapped at its
    /// commit (`Written::mapped`). When other processes share the pool, a commit that raced
    /// with another process's write is refused and redone.
    fn write_chunk(&self, data: &[u8], off: Option<u64>) -> Result<(u64, bool)> {
        let mut again_after_enospc = self.fs.pool_is_shared();
        loop {
            match self.try_write_chunk(data, off) {
                Err(e) if e.errno() == libc::EAGAIN => std::thread::yield_now(),
                // Near a full pool, the epoch this write pinned through its commit can be
                // what holds back the pages freed just before it (they were retired at that
                // epoch), so the server found no room. Once, the write starts again: it pins
                // the epoch the server has advanced since. (Found by probing: an append
                // right after deleting files failed, and the same append 0.1 s later did
                // not.)
                Err(e) if e.errno() == libc::ENOSPC && again_after_enospc => {
                    again_after_enospc = false;
                }
                other => return other,
            }
        }
    }

    fn try_write_chunk(&self, data: &[u8], off: Option<u64>) -> Result<(u64, bool)> {
        // This thread's lists, unless it is already using them (or is exiting).
        let r = SCRATCH.try_with(|c| {
            c.try_borrow_mut()
                .ok()
                .map(|mut s| self.write_with(&mut s, data, off))
        });
        match r {
            Ok(Some(r)) => r,
            _ => self.write_with(&mut WriteScratch::default(), data, off),
        }
    }

    fn write_with(
        &self,
        s: &mut WriteScratch,
        data: &[u8],
        off: Option<u64>,
    ) -> Result<(u64, bool)> {
        let fs = &self.fs;
        let core = &*fs.core;
        let shared = fs.pool_is_shared();
        let lock = self.range_lock();
        // Lock from the page of min(offset, size): the gap between the old end of file and
        // the write is ours to zero. Appends lock to infinity so that they take turns.
        let (_guard, d, at, off) = loop {
            // Only a hint (read without the inode's sequence counter): checked below.
            let size = core
                .pool
                .load_u64(core.geo.inode_addr(self.handle.ino) + field::SIZE);
            let start = off.unwrap_or(size).min(size) / PAGE;
            let end = match off {
                Some(o) => o.saturating_add(data.len() as u64).div_ceil(PAGE),
                None => u64::MAX,
            };
            let guard = lock.lock(start, end);
            let (d, at) = fs.read_inode_at(self.handle.ino);
            if d.size < start * PAGE {
                continue;
            }
            let off = off.unwrap_or(d.size);
            break (guard, d, at, off);
        };
        let end = off
            .checked_add(data.len() as u64)
            .filter(|&e| e <= MAX_FILE_SIZE)
            .ok_or(Error::EFBIG)?;
        if !d.is_reg() {
            return Err(if d.is_dir() {
                Error::EISDIR
            } else {
                Error::EINVAL
            });
        }
        let first = off / PAGE;
        let last = end.div_ceil(PAGE);
        // Through the daemon, this process may write beyond the end of file in place only
        // while no other process holds the file open for writing (the server says so before
        // answering the open that makes them several).
        let copy_all = shared && core.shared.several_writers.contains(self.handle.ino);
        s.old.clear();
        // Whole pages: no old byte survives, so the old pages are not needed (nor, through
        // the daemon, the index lines the server's last commit wrote, each a transfer from
        // its core), and the server has nothing of them to check (it still checks the size
        // a write past the end saw). Alone, a process needs them past the end of file,
        // where pages allocated ahead are written in place.
        let whole = off % PAGE == 0 && end % PAGE == 0 && (shared || end <= d.size);
        if whole {
            s.old.resize((last - first) as usize, 0);
        } else {
            self.walk_old(s, &d, at, first, last)?;
        }
        let fresh = (first..last)
            .zip(&s.old)
            .filter(|&(pg, &old)| copies(copy_all, &d, off, pg, old))
            .count();
        fs.take_pages(fresh, &mut s.fresh)?;
        // Through the daemon, a page the walk found (written in place, or copied from) may
        // be replaced by another process meanwhile; the commit then fails its check. An
        // epoch pin, held through the commit, keeps it from being reused before that check,
        // and so from coming back as the file's page under it (ABA: a stale copy or a store
        // in place would then pass), and a page written in place from being reused before
        // the stores into it are fenced. Taken after the reservation (a round trip that may
        // have to reclaim, which a pin would hold back), and valid only if no commit changed
        // the file since the walk. A write of whole pages walks nothing.
        let _pin = if shared && !whole {
            let pin = core.shared.epochs.pin();
            if !core.shared.seqs.counter(self.handle.ino).ok(at) {
                fs.untake_pages(s.fresh.iter().copied());
                return Err(Error::from_errno(libc::EAGAIN));
            }
            Some(pin)
        } else {
            None
        };
        let copied = self.fill_pages(s, &d, data, off, end, copy_all);
        let check = match copied {
            Ok(()) if shared => Some(WriteCheck {
                // The old page of each page copied (those written in place go apart).
                old_pages: if whole {
                    Vec::new()
                } else {
                    let old = |&(pg, _): &(u64, u64)| s.old[(pg - first) as usize];
                    s.updates.iter().map(old).collect()
                },
                size_seen: d.size,
                start: off,
                in_place: s.in_place.clone(),
            }),
            Ok(()) => None,
            Err(e) => {
                // Stores made in place land before the pin lets their pages be reused.
                core.pool.fence();
                fs.untake_pages(s.fresh.iter().copied());
                return Err(e);
            }
        };
        if let Err(e) = core.pool.try_fence() {
            // The data may not be durable: commit nothing. The server sees the same failure
            // at its next durability point.
            fs.untake_pages(s.fresh.iter().copied());
            return Err(Error::with_msg(
                libc::EIO,
                format!("writing file data back to the pool failed: {e}"),
            ));
        }
        match fs.commit_write(self.handle, &s.updates, end, check) {
            Ok(mapped) => Ok((end, mapped)),
            Err(e) => {
                fs.untake_pages(s.fresh.iter().copied());
                Err(e)
            }
        }
    }

    /// The data pages (0 for a hole) of pages `first..last` into `s.old`, as of the inode
    /// `d` read at counter value `at`.
    fn walk_old(
        &self,
        s: &mut WriteScratch,
        d: &InodeData,
        at: u64,
        first: u64,
        last: u64,
    ) -> Result<()> {
        let core = &*self.fs.core;
        let seq = core.shared.seqs.counter(self.handle.ino);
        let walked = if last - first == 1 {
            // One page (most writes): the plain walk is shorter.
            index::lookup(&core.pool, &core.geo, d.root, d.height, first).map(|p| s.old.push(p))
        } else {
            let tree = (d.root, d.height);
            index::lookup_range(&core.pool, &core.geo, tree, first, last, &mut s.old)
        };
        // The walk reads index nodes that another writer of the file (a thread writing
        // another range, another process) may replace, retire and see reused meanwhile:
        // what it found, or the error it met, holds only if no commit changed the file
        // since `d` was read (the walk's lookups keep to the pool, whatever they read).
        // Otherwise the write starts again (EAGAIN is retried by `write_chunk`).
        if !seq.ok(at) {
            return Err(Error::from_errno(libc::EAGAIN));
        }
        walked
    }

    /// Copy `data` (written at `off`, ending at `end`) into the fresh pages of `s` (or in
    /// place beyond the end of file), and list the pages to commit in `s.updates`. Not
    /// fenced. Without other writers, also zero the old bytes between the end of file and
    /// `off`.
    fn fill_pages(
        &self,
        s: &mut WriteScratch,
        d: &InodeData,
        data: &[u8],
        off: u64,
        end: u64,
        copy_all: bool,
    ) -> Result<()> {
        let core = &*self.fs.core;
        let pool = &core.pool;
        let WriteScratch {
            old: olds,
            fresh,
            updates,
            buf,
            in_place,
        } = s;
        let shared = self.fs.pool_is_shared();
        updates.clear();
        in_place.clear();
        let mut fresh = fresh.iter().copied();
        // Whole pages going to consecutive fresh pages are copied as one run.
        let mut run = Run::default();
        for (pg, &old) in (off / PAGE..).zip(olds.iter()) {
            let base = pg * PAGE;
            let ws = off.max(base) - base;
            let we = end.min(base + PAGE) - base;
            let at = (base + ws - off) as usize;
            let src = &data[at..(base + we - off) as usize];
            if !copies(copy_all, d, off, pg, old) {
                // Beyond the end of file: invisible until the size commits, so in place.
                pool.copy_nt(old + ws, src);
                if shared {
                    in_place.push((pg, old));
                }
                continue;
            }
            let new = fresh.next().ok_or(Error::EIO)?;
            updates.push((pg, new));
            if ws == 0 && we == PAGE {
                run.add(pool, data, new, at);
                continue;
            }
            buf.resize(PAGE as usize, 0);
            if old == 0 {
                buf.fill(0);
            } else {
                pool.read(old, buf);
                // Old bytes between the end of file and the write must read as zeros.
                let gap = d.size.clamp(base, base + ws) - base;
                buf[gap as usize..ws as usize].fill(0);
            }
            buf[ws as usize..we as usize].copy_from_slice(src);
            pool.copy_nt(new, buf);
        }
        run.copy(pool, data);
        if !shared && off > d.size {
            zero_range_beyond_eof(pool, &core.geo, d, (d.size, off), &|_| false)?;
        }
        Ok(())
    }
}

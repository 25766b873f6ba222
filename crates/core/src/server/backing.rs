//! Backing files of shared mappings whose processes ended without giving their mappings
//! up (`_exit`, a signal): their stores were never written back.
//!
//! The shim marks a backing file current (`sidefiles::MAP_CURRENT`) once it holds the
//! file's contents; from then until the last counted mapping of the inode goes, every
//! write to the file is copied into it, so it is the file plus the mappings' stores. When
//! a client that mapped an inode dies (`disconnect`), the server writes every page in
//! which the inode's backing file differs from the file back into the file, as the
//! client's exit would have; if no process maps the inode any more it also removes the
//! file. The same happens at mount for every backing file no process holds (an in-process
//! pool has no server left when its process dies). One that some process holds without
//! the server counting it (a client of an earlier daemon) stops being current when the
//! count reaches zero: writes no longer reach it, so it must never be written back.

use super::Server;
use crate::error::{Error, Result};
use crate::index;
use crate::inode::InodeData;
use crate::layout::PAGE;
use crate::request::Handle;
use crate::sidefiles;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, OpenOptionsExt, PermissionsExt};

/// Pages written back per commit: a bounded record, and a bounded buffer.
const BATCH_PAGES: usize = 64;

/// How long a write-back waits for writes in flight to the file (see `fill_lock`) before
/// it gives up: a writer holds the lock for one commit and one copy.
const WAIT_FOR_WRITERS: std::time::Duration = std::time::Duration::from_secs(1);

/// How long after a client's write to a mapped file a write-back of it waits. A write that
/// began before any process mapped the file holds no lock, and its bytes reach the backing
/// file a moment after its commit: compared in between, that page would be taken for an
/// older store.
const AFTER_A_WRITE: std::time::Duration = std::time::Duration::from_millis(2);

/// How long a kept gate makes `AFTER_A_WRITE` unneeded: new writers queue behind it, so
/// later writes come only from mappings written back, not from writes to copy.
const GATE_LONG_ENOUGH: std::time::Duration = std::time::Duration::from_millis(20);

/// Where the shim's fill lock lies in a backing file (`mmap/backing.rs`'s `FillLock::AT`), and the
/// gate byte every taker passes (`FillLock::GATE`).
const FILL_LOCK_AT: i64 = 1 << 62;
const FILL_GATE: i64 = FILL_LOCK_AT + 1;

/// Take byte `at` of `file` exclusively without waiting.
fn try_lock(file: &File, at: i64) -> bool {
    // SAFETY: plain data, for which all zeros is a valid value.
    let mut l: libc::flock = unsafe { std::mem::zeroed() };
    l.l_type = libc::F_WRLCK as libc::c_short;
    l.l_whence = libc::SEEK_SET as libc::c_short;
    l.l_start = at;
    l.l_len = 1;
    // SAFETY: an OFD lock request on a descriptor we own, with a valid flock struct.
    unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_SETLK, &mut l) == 0 }
}

/// Take `file`'s `MAP_CURRENT` mark off: it is no longer to be written back.
fn unmark(file: &File) {
    if let Ok(m) = file.metadata() {
        let mode = sidefiles::unmarked(m.permissions().mode());
        let _ = file.set_permissions(std::fs::Permissions::from_mode(mode));
    }
}

/// How a look at a backing file ended.
#[derive(PartialEq, Eq)]
pub(super) enum Settled {
    Done,
    /// A write to the file was in flight: look again (`retry_backing`).
    Busy,
}

/// A backing file the server found, and what it found out.
struct Backing {
    file: File,
    name: String,
    h: Handle,
    /// Marked current (`MAP_CURRENT`).
    marked: bool,
    /// Marked current, and made by someone who may write the file.
    current: bool,
}

impl Server {
    /// Take the fill lock's exclusive side of `ino`'s backing file `name` without waiting:
    /// None while a process writes the file (it holds the shared side from before its
    /// commit until its bytes are in the backing file) or fills it. Returns the description
    /// that holds it (closing it gives it up). When writes are in flight, the gate is kept
    /// (through the daemon, whose loop looks again at once: in-process nothing would, and a
    /// writer of this very process would wait at the gate for good), so that new writers
    /// queue behind it and the ones in flight drain.
    fn take_fill_lock(&mut self, ino: u64, name: &str) -> Option<File> {
        let (gate, since) = match self.gates.remove(&ino) {
            Some(kept) => kept,
            None => {
                // A description of its own: the caller's holds the file's flock, which a
                // kept gate must not keep after the caller is done.
                let g = std::fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
                    .open(name)
                    .ok()?;
                if !try_lock(&g, FILL_GATE) {
                    return None;
                }
                (g, std::time::Instant::now())
            }
        };
        // Quiet for `AFTER_A_WRITE`, or the gate kept long enough that every write begun
        // before it has copied its bytes: writes since (a live mapping's `msync`, whose
        // bytes come from the backing file itself) need no wait.
        let settled = since.elapsed() >= GATE_LONG_ENOUGH
            || self
                .mapped_writes
                .get(&ino)
                .is_none_or(|t| t.elapsed() >= AFTER_A_WRITE);
        if settled && try_lock(&gate, FILL_LOCK_AT) {
            return Some(gate);
        }
        if self.retries_driven {
            self.gates.insert(ino, (gate, since));
        }
        None
    }

    /// The daemon's loop calls `retry_backing` whenever `backing_pending`: a write-back that
    /// waits for writes may then hold the gate between its looks.
    pub fn drive_backing_retries(&mut self) {
        self.retries_driven = true;
    }

    /// Name side files after pool `id` (`sidefiles::pool_id`): only then does the server
    /// look for backing files left behind. Also writes back those already left, of the
    /// inodes `map_files` (as `sidefiles::remove_dead` lists them; the pool was just
    /// mounted: no process maps it through this server yet).
    pub fn use_side_files(&mut self, id: u64, map_files: &[u64]) {
        self.side_files = Some(id);
        // `remove_dead` left only the files of live inodes.
        for &ino in map_files {
            if self.settle_backing(ino) == Settled::Busy {
                // A process of an earlier server still writing: looked at again.
                self.retry_later(ino);
            }
        }
    }

    /// What writing back backing files failed with since the last call (the opener or the
    /// daemon logs it: the server itself may not write to a descriptor that is a pool file).
    pub fn take_backing_errors(&mut self) -> Vec<String> {
        std::mem::take(&mut self.backing_errors)
    }

    /// A client that mapped `ino` died while other processes still map it: its stores are
    /// in the backing file they share, which stays.
    pub(super) fn write_back_dead_stores(&mut self, ino: u64) -> Settled {
        let Some(b) = self.open_backing(ino) else {
            return Settled::Done;
        };
        if !b.current {
            if !b.marked {
                self.backing_errors.push(format!(
                    "{} is not written back: it was unmarked before (see the lines above)",
                    b.name
                ));
            }
            return Settled::Done;
        }
        let Some(_held) = self.take_fill_lock(ino, &b.name) else {
            return Settled::Busy;
        };
        self.write_back_or_unmark(&b);
        Settled::Done
    }

    /// No counted mapping of `ino` is left: with `died`, one of their processes died since
    /// the count was last zero (`settle_backing`); without, remove the backing file
    /// (`remove_backing`). The mapped bit is cleared once done; while a write in flight
    /// holds the file, a settle waits (`retry_backing`) with the bit set.
    pub(super) fn backing_unmapped(&mut self, ino: u64, died: bool) {
        if died && self.settle_backing(ino) == Settled::Busy {
            self.retry_later(ino);
            return;
        }
        if !died {
            self.remove_backing(ino);
        }
        self.mapped_writes.remove(&ino);
        self.shared.mapped.set(ino, false);
        self.show_live(ino);
    }

    /// Look again at the backing files whose write-back found a write in flight, while the
    /// inode's bit stays set (so that writes go on reaching the file). Given up after
    /// `WAIT_FOR_WRITERS`: the file is then unmarked, and the dead process's stores lost.
    pub fn retry_backing(&mut self) {
        let now = std::time::Instant::now();
        let waiting: Vec<(u64, std::time::Instant)> = self.backing_retry.drain().collect();
        for (ino, since) in waiting {
            let counted = self.mappings_of(ino) > 0;
            let settled = match counted {
                true => self.write_back_dead_stores(ino),
                false => self.settle_backing(ino),
            };
            if settled == Settled::Done {
                self.gates.remove(&ino);
                if counted {
                    self.dead_stores_written(ino);
                } else {
                    self.mapped_writes.remove(&ino);
                    self.shared.mapped.set(ino, false);
                }
            } else if now.duration_since(since) > WAIT_FOR_WRITERS {
                self.gates.remove(&ino);
                if let Some(b) = self.open_backing(ino) {
                    unmark(&b.file);
                    self.backing_errors.push(format!(
                        "{} is not written back: writes to the file went on for {:?}",
                        b.name, WAIT_FOR_WRITERS
                    ));
                    if !counted {
                        let _ = std::fs::remove_file(&b.name);
                    }
                }
                if !counted {
                    self.mapped_writes.remove(&ino);
                    self.shared.mapped.set(ino, false);
                }
            } else {
                self.backing_retry.insert(ino, since);
            }
            self.show_live(ino);
        }
    }

    /// Whether some backing file waits for `retry_backing`.
    pub fn backing_pending(&self) -> bool {
        !self.backing_retry.is_empty()
    }

    /// Note that `ino`'s backing file waits for `retry_backing`.
    pub(super) fn retry_later(&mut self, ino: u64) {
        self.backing_retry
            .entry(ino)
            .or_insert_with(std::time::Instant::now);
        self.show_live(ino);
    }

    /// No counted mapping of `ino` is left, and none of their processes died: remove its
    /// backing file. A write that opened it before copies its bytes into a new mapping's
    /// file instead when it finds it removed (`mmap/writes.rs`'s `written_held`). A process the
    /// server does not count that still maps it keeps an unlinked file, which writes no
    /// longer reach.
    fn remove_backing(&self, ino: u64) {
        if let Some(id) = self.side_files {
            let d = self.read_inode(ino);
            if !d.is_free() {
                let _ = std::fs::remove_file(sidefiles::map_file(id, ino, d.generation));
            }
        }
    }

    /// No counted mapping of `ino` is left, and one of their processes died: write back
    /// and remove its backing file if nobody holds it, or unmark it if a process nobody
    /// counted still does.
    pub(super) fn settle_backing(&mut self, ino: u64) -> Settled {
        let Some(b) = self.open_backing(ino) else {
            return Settled::Done;
        };
        // SAFETY: flock on a descriptor we own.
        if unsafe { libc::flock(b.file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            unmark(&b.file);
            return Settled::Done;
        }
        if b.current {
            let Some(_held) = self.take_fill_lock(ino, &b.name) else {
                return Settled::Busy;
            };
            if !self.write_back_or_unmark(&b) {
                // Left, unmarked: a later mapping starts from the file again.
                return Settled::Done;
            }
        }
        // Removed while we hold it: a process opening it meanwhile waits for our lock,
        // then finds it unlinked and makes a new one.
        let _ = std::fs::remove_file(&b.name);
        Settled::Done
    }

    /// The backing file of live inode `ino`, if there is one that is ours to act on: a
    /// regular file with one name that nobody but its owner can write (anyone may make
    /// files in /dev/shm). Whether it may be written back is `current`.
    fn open_backing(&mut self, ino: u64) -> Option<Backing> {
        let id = self.side_files?;
        let d = self.read_inode(ino);
        if d.is_free() || !d.is_reg() {
            return None;
        }
        let name = sidefiles::map_file(id, ino, d.generation);
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(&name)
            // Gone: the last process to give its mapping up removed it (the usual case).
            .ok()?;
        // SAFETY: plain data, for which all zeros is a valid value.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: fstat of a descriptor we own into a local buffer.
        if unsafe { libc::fstat(file.as_raw_fd(), &mut st) } != 0
            || st.st_mode & libc::S_IFMT != libc::S_IFREG
            || st.st_nlink != 1
            || st.st_mode & 0o022 != 0
        {
            return None;
        }
        let marked = sidefiles::map_file_is_current(st.st_mode);
        let current = marked && sidefiles::map_file_trusted(&st, d.uid, d.gid, d.mode);
        if marked && !current {
            // Said, as stores that Linux would keep are dropped.
            self.backing_errors.push(format!(
                "{name} is not written back: its owner (uid {}, gid {}) may not write the file",
                st.st_uid, st.st_gid
            ));
        }
        let h = Handle {
            ino,
            generation: d.generation,
        };
        Some(Backing {
            file,
            name,
            h,
            marked,
            current,
        })
    }

    /// Write `b` back; on failure unmark it and note why. Returns whether it succeeded.
    fn write_back_or_unmark(&mut self, b: &Backing) -> bool {
        match self.write_back_backing(b.h, &b.file) {
            Ok(()) => true,
            Err(e) => {
                unmark(&b.file);
                self.backing_errors
                    .push(format!("writing back {} failed: {e}", b.name));
                false
            }
        }
    }

    /// Write every page in which `backing` differs from file `h` back into the file (within
    /// the file's size: a mapping cannot grow a file). In commits of up to `BATCH_PAGES`
    /// pages; one that finds too little free space is tried again with half as many, down
    /// to one page, each commit freeing the pages it replaces for the next, as a process's
    /// own `msync` writes page by page. (A dead process's 64 stores were dropped with 60
    /// pages free before: found by probing LMDB with `writemap` on a full pool.)
    fn write_back_backing(&mut self, h: Handle, backing: &File) -> Result<()> {
        let io = |e: std::io::Error| Error::with_msg(libc::EIO, format!("backing file: {e}"));
        let len = backing.metadata().map_err(io)?.len();
        let mut buf = vec![0u8; BATCH_PAGES * PAGE as usize];
        let mut changed: Vec<(u64, usize)> = Vec::with_capacity(BATCH_PAGES);
        let mut pg = 0u64;
        let mut batch = BATCH_PAGES;
        loop {
            let d = self.inode(h)?;
            let end = d.size.min(len);
            if pg * PAGE >= end {
                return Ok(());
            }
            let n = ((end - pg * PAGE).div_ceil(PAGE) as usize).min(batch);
            let bytes = &mut buf[..n * PAGE as usize];
            backing.read_exact_at(bytes, pg * PAGE).map_err(io)?;
            changed.clear();
            for i in 0..n {
                let at = (pg + i as u64) * PAGE;
                let page = &mut bytes[i * PAGE as usize..(i + 1) * PAGE as usize];
                // Bytes past the end of file are not the file's: zero, as the server keeps
                // them (a later extension must read zeros there).
                let visible = (d.size - at).min(PAGE) as usize;
                page[visible..].fill(0);
                if !self.page_holds(&d, pg + i as u64, page)? {
                    changed.push((pg + i as u64, i));
                }
            }
            if !changed.is_empty() {
                match self.replace_pages(h, &d, &changed, bytes) {
                    Err(e) if e.errno() == libc::ENOSPC && batch > 1 => {
                        batch /= 2;
                        continue;
                    }
                    r => r?,
                }
            }
            pg += n as u64;
        }
    }

    /// Whether file page `pg` of `d` holds exactly `bytes` (a hole holds zeros).
    fn page_holds(&self, d: &InodeData, pg: u64, bytes: &[u8]) -> Result<bool> {
        Ok(
            match index::lookup(&self.pool, &self.geo, d.root, d.height, pg)? {
                0 => bytes.iter().all(|&b| b == 0),
                p => self.pool.slice(p, PAGE) == bytes,
            },
        )
    }

    /// Give file `h` new data pages: page `pg` gets page `i` of `bytes`, for each `(pg, i)`
    /// of `changed` (page numbers ascending), in one commit.
    fn replace_pages(
        &mut self,
        h: Handle,
        d: &InodeData,
        changed: &[(u64, usize)],
        bytes: &[u8],
    ) -> Result<()> {
        let pages = self.alloc_data(changed.len())?;
        for (&(_, i), &p) in changed.iter().zip(&pages) {
            let at = i * PAGE as usize;
            self.pool.copy_nt(p, &bytes[at..at + PAGE as usize]);
        }
        self.pool.fence();
        let updates: Vec<(u64, u64)> = changed
            .iter()
            .zip(&pages)
            .map(|(&(pg, _), &p)| (pg, p))
            .collect();
        let r = self.commit_pages(h, d, &updates, d.size);
        if r.is_err() {
            self.release_data_pages(&pages);
        }
        r
    }
}

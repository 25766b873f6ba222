//! Open files: lock-free reads, copy-on-write writes into reserved pages, and the `std::io`
//! traits.

use super::{Fs, Metadata, ReadDir};
use crate::error::{Error, Result};
use crate::index::{self, MAX_FILE_SIZE};
use crate::inode::{self, InodeData};
use crate::layout::PAGE;
use crate::range_lock::RangeLock;
use crate::request::{Handle, Request, SetAttr, SetTime, WriteCheck};
use crate::server::zero_range_beyond_eof;
use engram_pmem::Pool;
use std::cell::RefCell;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::sync::{Arc, Mutex};

/// Writes larger than this are applied in atomic steps of this size.
pub const ATOMIC_WRITE_MAX: u64 = 8 << 20;

thread_local! {
    /// The lists a write fills, kept from one write to the next on each thread.
    static SCRATCH: RefCell<WriteScratch> = RefCell::default();
}

#[derive(Default)]
struct WriteScratch {
    /// Each page of the write: its page number, its data page now, whether it is copied.
    pages: Vec<(u64, u64, bool)>,
    /// Fresh pages taken from the reservation, in the order they are used.
    fresh: Vec<u64>,
    /// (page number, fresh page) to commit, page numbers ascending.
    updates: Vec<(u64, u64)>,
    /// A page assembled from old bytes and new.
    buf: Vec<u8>,
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

/// How to open a file (the flags of open(2)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OpenOptions {
    pub read: bool,
    pub write: bool,
    pub append: bool,
    pub create: bool,
    pub excl: bool,
    pub truncate: bool,
    pub directory: bool,
    pub nofollow: bool,
    /// Permission bits for a created file (the caller applies its umask).
    pub mode: u32,
}

impl OpenOptions {
    pub fn new() -> OpenOptions {
        OpenOptions {
            mode: 0o644,
            ..OpenOptions::default()
        }
    }
    pub fn read(mut self, v: bool) -> Self {
        self.read = v;
        self
    }
    pub fn write(mut self, v: bool) -> Self {
        self.write = v;
        self
    }
    pub fn append(mut self, v: bool) -> Self {
        self.append = v;
        self
    }
    pub fn create(mut self, v: bool) -> Self {
        self.create = v;
        self
    }
    pub fn create_new(mut self, v: bool) -> Self {
        self.create = v;
        self.excl = v;
        self
    }
    pub fn truncate(mut self, v: bool) -> Self {
        self.truncate = v;
        self
    }
    pub fn directory(mut self, v: bool) -> Self {
        self.directory = v;
        self
    }
    pub fn nofollow(mut self, v: bool) -> Self {
        self.nofollow = v;
        self
    }
    pub fn mode(mut self, m: u32) -> Self {
        self.mode = m;
        self
    }

    /// From open(2) flags and mode.
    pub fn from_flags(flags: i32, mode: u32) -> OpenOptions {
        let acc = flags & libc::O_ACCMODE;
        OpenOptions {
            read: acc == libc::O_RDONLY || acc == libc::O_RDWR,
            write: acc == libc::O_WRONLY || acc == libc::O_RDWR,
            append: flags & libc::O_APPEND != 0,
            create: flags & libc::O_CREAT != 0,
            excl: flags & libc::O_EXCL != 0,
            truncate: flags & libc::O_TRUNC != 0,
            directory: flags & libc::O_DIRECTORY != 0,
            nofollow: flags & libc::O_NOFOLLOW != 0,
            mode,
        }
    }
}

/// An open file or directory.
pub struct File {
    fs: Fs,
    handle: Handle,
    opts: OpenOptions,
    pos: Arc<Mutex<u64>>,
    /// This process's page-range lock of the inode (shared by all its open files).
    lock: Arc<RangeLock>,
}

impl File {
    pub(crate) fn new(fs: Fs, handle: Handle, opts: OpenOptions) -> Result<File> {
        fs.call(Request::Open {
            target: handle,
            write: opts.write,
        })?;
        Ok(File::opened(fs, handle, opts))
    }

    /// A file the server already counts as open for this client (a create that opened it).
    pub(crate) fn opened(fs: Fs, handle: Handle, opts: OpenOptions) -> File {
        let lock = fs.range_lock(handle.ino);
        File {
            lock,
            fs,
            handle,
            opts,
            pos: Arc::new(Mutex::new(0)),
        }
    }

    pub fn ino(&self) -> u64 {
        self.handle.ino
    }

    pub fn handle(&self) -> Handle {
        self.handle
    }

    pub fn options(&self) -> OpenOptions {
        self.opts
    }

    pub fn fs(&self) -> &Fs {
        &self.fs
    }

    /// Another handle to the same open file, sharing the offset (like dup(2)).
    pub fn try_clone(&self) -> Result<File> {
        self.fs.call(Request::Open {
            target: self.handle,
            write: self.opts.write,
        })?;
        Ok(File {
            fs: self.fs.clone(),
            handle: self.handle,
            opts: self.opts,
            pos: self.pos.clone(),
            lock: self.lock.clone(),
        })
    }

    pub fn metadata(&self) -> Result<Metadata> {
        Ok(Metadata::from_inode(
            self.handle.ino,
            &self.fs.read_inode(self.handle.ino),
        ))
    }

    fn data(&self) -> InodeData {
        self.fs.read_inode(self.handle.ino)
    }

    /// Read at `off` without moving the offset. Lock-free: retried if a write commits meanwhile.
    pub fn read_at(&self, buf: &mut [u8], off: u64) -> Result<usize> {
        if !self.opts.read {
            return Err(Error::EBADF);
        }
        let core = &*self.fs.core;
        let ino = self.handle.ino;
        if self.data().is_dir() {
            return Err(Error::EISDIR);
        }
        let _pin = core.shared.epochs.pin();
        loop {
            let s = core.shared.seqs.read_begin(ino);
            let d = inode::read(&core.pool, &core.geo, ino);
            let n = if off >= d.size {
                0
            } else {
                buf.len().min((d.size - off) as usize)
            };
            let copied = self.copy_out(&d, &mut buf[..n], off);
            if core.shared.seqs.read_ok(ino, s) {
                copied?;
                return Ok(n);
            }
        }
    }

    fn copy_out(&self, d: &InodeData, buf: &mut [u8], off: u64) -> Result<()> {
        let core = &*self.fs.core;
        let mut done = 0usize;
        while done < buf.len() {
            let pos = off + done as u64;
            let pg = pos / PAGE;
            let in_page = (pos % PAGE) as usize;
            let n = (PAGE as usize - in_page).min(buf.len() - done);
            let page = index::lookup(&core.pool, &core.geo, d.root, d.height, pg)?;
            if page == 0 {
                buf[done..done + n].fill(0);
            } else {
                core.pool
                    .read(page + in_page as u64, &mut buf[done..done + n]);
            }
            done += n;
        }
        Ok(())
    }

    /// Write at `off` without moving the offset (O_APPEND files write at the end).
    pub fn write_at(&self, data: &[u8], off: u64) -> Result<usize> {
        self.write_inner(data, if self.opts.append { None } else { Some(off) })
            .map(|(n, _)| n)
    }

    /// Write `data` at `off` (or at the end of file for None); returns bytes written and
    /// where the write ended. A write larger than `ATOMIC_WRITE_MAX` is a series of atomic
    /// steps: if a later step fails (ENOSPC, EFBIG, …) the steps before it stay written and
    /// their length is returned (a short write, as POSIX has it); the error is returned
    /// only when nothing was written.
    fn write_inner(&self, data: &[u8], off: Option<u64>) -> Result<(usize, u64)> {
        if !self.opts.write {
            return Err(Error::EBADF);
        }
        if data.is_empty() {
            return Ok((0, off.unwrap_or_else(|| self.data().size)));
        }
        let mut done = 0usize;
        let mut pos = off;
        while done < data.len() {
            let n = (data.len() - done).min(ATOMIC_WRITE_MAX as usize);
            match self.write_chunk(&data[done..done + n], pos) {
                Ok(end) => {
                    done += n;
                    pos = pos.map(|_| end);
                }
                Err(_) if done > 0 => break,
                Err(e) => return Err(e),
            }
        }
        let end = match off {
            Some(o) => o + done as u64,
            None => self.data().size,
        };
        Ok((done, end))
    }

    /// One atomic write; returns where it ended. When other processes share the pool, a
    /// commit that raced with another process's write is refused and redone.
    fn write_chunk(&self, data: &[u8], off: Option<u64>) -> Result<u64> {
        loop {
            match self.try_write_chunk(data, off) {
                Err(e) if e.errno() == libc::EAGAIN => std::thread::yield_now(),
                other => return other,
            }
        }
    }

    fn try_write_chunk(&self, data: &[u8], off: Option<u64>) -> Result<u64> {
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

    fn write_with(&self, s: &mut WriteScratch, data: &[u8], off: Option<u64>) -> Result<u64> {
        let fs = &self.fs;
        let core = &*fs.core;
        let shared = fs.pool_is_shared();
        let lock = &self.lock;
        // Lock from the page of min(offset, size): the gap between the old end of file and
        // the write is ours to zero. Appends lock to infinity so that they take turns.
        let (_guard, d, off) = loop {
            let size = self.data().size;
            let start = off.unwrap_or(size).min(size) / PAGE;
            let end = match off {
                Some(o) => o.saturating_add(data.len() as u64).div_ceil(PAGE),
                None => u64::MAX,
            };
            let guard = lock.lock(start, end);
            let d = self.data();
            if d.size < start * PAGE {
                continue;
            }
            let off = off.unwrap_or(d.size);
            break (guard, d, off);
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
        // Which pages need a fresh copy: holes, and pages whose visible bytes change. With
        // other processes writing the pool, every page is copied: bytes beyond the end of
        // file are only ours while this process alone writes.
        let first = off / PAGE;
        let last = end.div_ceil(PAGE);
        s.pages.clear();
        let mut fresh = 0;
        for pg in first..last {
            let page = index::lookup(&core.pool, &core.geo, d.root, d.height, pg)?;
            let ws = off.max(pg * PAGE);
            let cow = shared || page == 0 || ws < d.size;
            fresh += cow as usize;
            s.pages.push((pg, page, cow));
        }
        fs.take_pages(fresh, &mut s.fresh)?;
        let copied = self.fill_pages(s, &d, data, off, end);
        let check = match copied {
            Ok(()) if shared => Some(WriteCheck {
                old_pages: s.pages.iter().map(|p| p.1).collect(),
                size_seen: d.size,
                start: off,
            }),
            Ok(()) => None,
            Err(e) => {
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
        if let Err(e) = fs.commit_write(self.handle, &s.updates, end, check) {
            fs.untake_pages(s.fresh.iter().copied());
            return Err(e);
        }
        Ok(end)
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
    ) -> Result<()> {
        let core = &*self.fs.core;
        let pool = &core.pool;
        let WriteScratch {
            pages,
            fresh,
            updates,
            buf,
        } = s;
        updates.clear();
        let mut fresh = fresh.iter().copied();
        // Whole pages going to consecutive fresh pages are copied as one run.
        let mut run = Run::default();
        for &(pg, old, cow) in pages.iter() {
            let base = pg * PAGE;
            let ws = off.max(base) - base;
            let we = end.min(base + PAGE) - base;
            let at = (base + ws - off) as usize;
            let src = &data[at..(base + we - off) as usize];
            if !cow {
                // Beyond the end of file: invisible until the size commits, so in place.
                pool.copy_nt(old + ws, src);
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
        if !self.fs.pool_is_shared() && off > d.size {
            zero_range_beyond_eof(pool, &core.geo, d, d.size, off)?;
        }
        Ok(())
    }

    /// Change the size (ftruncate).
    pub fn set_len(&self, size: u64) -> Result<()> {
        if !self.opts.write {
            return Err(Error::EINVAL);
        }
        self.fs.truncate_handle(self.handle, size)
    }

    /// Allocate space (fallocate mode 0 or FALLOC_FL_KEEP_SIZE).
    pub fn allocate(&self, offset: u64, len: u64, keep_size: bool) -> Result<()> {
        if !self.opts.write {
            return Err(Error::EBADF);
        }
        let lock = &self.lock;
        let size = self.data().size;
        let _g = lock.lock(offset.min(size) / PAGE, u64::MAX);
        self.fs.call(Request::Fallocate {
            target: self.handle,
            offset,
            len,
            keep_size,
        })?;
        Ok(())
    }

    /// Everything is durable when a write returns; this orders nothing but is still a
    /// round trip so that a failing pool reports it: EIO if writing the pool back to its
    /// file (`msync`) failed since the last check.
    pub fn sync_all(&self) -> Result<()> {
        self.fs.call(Request::Sync)?;
        Ok(())
    }

    pub fn sync_data(&self) -> Result<()> {
        self.sync_all()
    }

    pub fn set_times(&self, atime: Option<SetTime>, mtime: Option<SetTime>) -> Result<()> {
        self.fs.call(Request::SetAttr {
            target: self.handle,
            attr: SetAttr {
                atime,
                mtime,
                ..SetAttr::default()
            },
        })?;
        Ok(())
    }

    pub fn set_mode(&self, mode: u32) -> Result<()> {
        self.fs.call(Request::SetAttr {
            target: self.handle,
            attr: SetAttr {
                mode: Some(mode),
                ..SetAttr::default()
            },
        })?;
        Ok(())
    }

    pub fn set_owner(&self, uid: Option<u32>, gid: Option<u32>) -> Result<()> {
        self.fs.call(Request::SetAttr {
            target: self.handle,
            attr: SetAttr {
                uid,
                gid,
                ..SetAttr::default()
            },
        })?;
        Ok(())
    }

    /// Iterate a directory opened with this handle.
    pub fn read_dir(&self) -> Result<ReadDir> {
        if !self.data().is_dir() {
            return Err(Error::ENOTDIR);
        }
        Ok(ReadDir::new(self.fs.clone(), self.handle))
    }

    /// The current offset.
    pub fn position(&self) -> u64 {
        *self.pos.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Read at the offset and advance it.
    pub fn read_next(&self, buf: &mut [u8]) -> Result<usize> {
        let mut pos = self.pos.lock().unwrap_or_else(|e| e.into_inner());
        let n = self.read_at(buf, *pos)?;
        *pos += n as u64;
        Ok(n)
    }

    /// Write at the offset (or the end, for O_APPEND) and advance it.
    pub fn write_next(&self, data: &[u8]) -> Result<usize> {
        let mut pos = self.pos.lock().unwrap_or_else(|e| e.into_inner());
        let at = if self.opts.append { None } else { Some(*pos) };
        let (n, end) = self.write_inner(data, at)?;
        *pos = end;
        Ok(n)
    }

    /// lseek: returns the new offset.
    pub fn seek_to(&self, whence: SeekFrom) -> Result<u64> {
        let mut pos = self.pos.lock().unwrap_or_else(|e| e.into_inner());
        let new = match whence {
            SeekFrom::Start(n) => Some(n),
            SeekFrom::Current(d) => pos.checked_add_signed(d),
            SeekFrom::End(d) => self.data().size.checked_add_signed(d),
        };
        let new = new.filter(|&n| n <= i64::MAX as u64).ok_or(Error::EINVAL)?;
        *pos = new;
        Ok(new)
    }
}

impl Drop for File {
    fn drop(&mut self) {
        let _ = self.fs.call(Request::Close {
            target: self.handle,
            write: self.opts.write,
        });
        self.fs.forget_range_lock(self.handle.ino, &self.lock);
    }
}

impl Read for File {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        Ok(self.read_next(buf)?)
    }
}

impl Write for File {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        Ok(self.write_next(buf)?)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Seek for File {
    fn seek(&mut self, pos: SeekFrom) -> io::Result<u64> {
        Ok(self.seek_to(pos)?)
    }
}

impl std::os::unix::fs::FileExt for File {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        Ok(File::read_at(self, buf, offset)?)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<usize> {
        Ok(File::write_at(self, buf, offset)?)
    }
}

//! Open files: lock-free reads, copy-on-write writes into reserved pages, and the `std::io`
//! traits.

mod sparse;
mod write;

pub use write::Written;

use super::{Fs, Metadata, ReadDir};
use crate::error::{Error, Result};
use crate::index;
use crate::inode::{self, InodeData};
use crate::layout::PAGE;
use crate::range_lock::RangeLock;
use crate::request::{Clear, Fallocate, Handle, Request, SetAttr, SetTime};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

/// Writes larger than this are applied in atomic steps of this size.
pub const ATOMIC_WRITE_MAX: u64 = 8 << 20;

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
    /// O_PATH: a handle of the node itself, for its status and as the base of `*at` calls.
    /// Linux asks no permission of the node for it, and with `nofollow` a final symlink is
    /// opened as itself.
    pub path: bool,
    /// O_NOATIME: only the file's owner (or root) may ask for it (EPERM otherwise, as
    /// Linux); atime is never updated here anyway.
    pub noatime: bool,
    /// Permission bits for a created file (the caller applies its umask).
    pub mode: u32,
    /// With `truncate`: checked as O_TRUNC is, but the file is truncated only by the
    /// caller's `File::truncate_opened` (the shim zeroes a mapped file's backing file
    /// around it, as around ftruncate).
    pub truncate_later: bool,
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
    /// See the field.
    pub fn truncate_later(mut self, v: bool) -> Self {
        self.truncate_later = v;
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
    /// O_PATH (see the field): reading, writing, creating and truncating are off.
    pub fn path(self, v: bool) -> Self {
        if !v {
            return OpenOptions {
                path: false,
                ..self
            };
        }
        OpenOptions {
            read: true,
            directory: self.directory,
            nofollow: self.nofollow,
            path: true,
            ..OpenOptions::default()
        }
    }

    /// From open(2) flags and mode.
    pub fn from_flags(flags: i32, mode: u32) -> OpenOptions {
        let acc = flags & libc::O_ACCMODE;
        // With O_PATH, Linux ignores every flag but O_DIRECTORY, O_NOFOLLOW and O_CLOEXEC.
        let path = flags & libc::O_PATH != 0;
        OpenOptions {
            read: acc == libc::O_RDONLY || acc == libc::O_RDWR,
            write: acc == libc::O_WRONLY || acc == libc::O_RDWR,
            append: flags & libc::O_APPEND != 0,
            create: flags & libc::O_CREAT != 0,
            excl: flags & libc::O_EXCL != 0,
            truncate: flags & libc::O_TRUNC != 0,
            directory: flags & libc::O_DIRECTORY != 0,
            nofollow: flags & libc::O_NOFOLLOW != 0,
            path: false,
            noatime: flags & libc::O_NOATIME != 0,
            mode,
            truncate_later: false,
        }
        .path(path)
    }
}

/// An open file or directory.
pub struct File {
    fs: Fs,
    handle: Handle,
    opts: OpenOptions,
    pos: Mutex<Offset>,
    /// This process's page-range lock of the inode (shared by all its open files), taken
    /// from `Fs` on the first write: an open that never writes needs none.
    lock: OnceLock<Arc<RangeLock>>,
}

/// A file's offset: its own until `try_clone` makes it shared with the clone (dup(2)).
enum Offset {
    Own(u64),
    Shared(Arc<Mutex<u64>>),
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
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
        if opts.write {
            fs.writer_opened();
        }
        File {
            lock: OnceLock::new(),
            fs,
            handle,
            opts,
            pos: Mutex::new(Offset::Own(0)),
        }
    }

    /// The inode's range lock in this process.
    fn range_lock(&self) -> &RangeLock {
        self.lock
            .get_or_init(|| self.fs.range_lock(self.handle.ino))
    }

    /// Run `f` on the offset, locked (a shared one under the shared lock as well).
    fn with_pos<R>(&self, f: impl FnOnce(&mut u64) -> R) -> R {
        let mut own = lock(&self.pos);
        match &mut *own {
            Offset::Own(p) => f(p),
            Offset::Shared(s) => f(&mut lock(s)),
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
        let mut own = lock(&self.pos);
        let shared = match &*own {
            Offset::Own(p) => Arc::new(Mutex::new(*p)),
            Offset::Shared(s) => s.clone(),
        };
        *own = Offset::Shared(shared.clone());
        if self.opts.write {
            // Counted as a writer as much as the original (its drop is a writer's close).
            self.fs.writer_opened();
        }
        Ok(File {
            fs: self.fs.clone(),
            handle: self.handle,
            opts: self.opts,
            pos: Mutex::new(Offset::Shared(shared)),
            lock: self
                .lock
                .get()
                .cloned()
                .map_or_else(OnceLock::new, OnceLock::from),
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
        let seq = core.shared.seqs.counter(ino);
        let _pin = core.shared.epochs.pin();
        loop {
            let s = seq.begin();
            let v = ReadView::read(core, ino);
            // Decided on the validated snapshot below, like everything else read here.
            let r = if v.is_dir() {
                Err(Error::EISDIR)
            } else if off >= v.size {
                Ok(0)
            } else {
                let n = buf.len().min((v.size - off) as usize);
                let buf = &mut buf[..n];
                let in_page = off % PAGE;
                if in_page + n as u64 <= PAGE {
                    // Within one page (every aligned read of up to 4 KiB): one walk, one copy.
                    index::lookup(&core.pool, &core.geo, v.root, v.height, off / PAGE).map(|page| {
                        if page == 0 {
                            buf.fill(0);
                        } else {
                            core.pool.read(page + in_page, buf);
                        }
                        n
                    })
                } else {
                    self.copy_pages(&v, buf, off).map(|()| n)
                }
            };
            if seq.ok(s) {
                return r;
            }
        }
    }

    /// The part of a read that spans pages.
    #[inline(never)]
    fn copy_pages(&self, v: &ReadView, buf: &mut [u8], off: u64) -> Result<()> {
        let core = &*self.fs.core;
        let mut done = 0usize;
        while done < buf.len() {
            let pos = off + done as u64;
            let in_page = (pos % PAGE) as usize;
            let n = (PAGE as usize - in_page).min(buf.len() - done);
            let page = index::lookup(&core.pool, &core.geo, v.root, v.height, pos / PAGE)?;
            let part = &mut buf[done..done + n];
            if page == 0 {
                part.fill(0);
            } else {
                core.pool.read(page + in_page as u64, part);
            }
            done += n;
        }
        Ok(())
    }

    /// Write at `off` without moving the offset (O_APPEND files write at the end).
    pub fn write_at(&self, data: &[u8], off: u64) -> Result<usize> {
        self.write_at_end(data, off).map(|(n, _)| n)
    }

    /// `write_at`, also returning where the written bytes end (opened for appending: the
    /// end of file they were added at, not `off`).
    pub fn write_at_end(&self, data: &[u8], off: u64) -> Result<(usize, u64)> {
        let w = self.write_inner(data, if self.opts.append { None } else { Some(off) })?;
        Ok((w.len, w.end))
    }

    /// Write at `off` even if the file was opened for appending (a mapping's pages written
    /// back where they belong).
    pub fn write_in_place(&self, data: &[u8], off: u64) -> Result<Written> {
        self.write_placed(data, Some(off))
    }

    /// Write at `Some(off)` even if the file was opened for appending, or at the end of
    /// file (`None`) even if it was not (pwritev2's `RWF_NOAPPEND` and `RWF_APPEND`);
    /// returns how many bytes, where they end, and whether the file was mapped then.
    pub fn write_placed(&self, data: &[u8], at: Option<u64>) -> Result<Written> {
        self.write_inner(data, at)
    }

    /// The truncation an open with `truncate` and `truncate_later` asked for: a regular
    /// file to size 0, its mtime and ctime changed also when it was empty or opened
    /// read-only (as open does it otherwise); nothing for a file the open made (whose
    /// options it stored without `truncate`).
    pub fn truncate_opened(&self) -> Result<()> {
        if !self.opts.truncate || !self.metadata()?.is_file() {
            return Ok(());
        }
        self.fs.truncate_handle(self.handle, 0, true)
    }

    /// Change the size (ftruncate).
    pub fn set_len(&self, size: u64) -> Result<()> {
        if !self.opts.write {
            return Err(Error::EINVAL);
        }
        self.fs.truncate_handle(self.handle, size, true)
    }

    /// Allocate space (fallocate mode 0 or FALLOC_FL_KEEP_SIZE).
    pub fn allocate(&self, offset: u64, len: u64, keep_size: bool) -> Result<()> {
        self.change_from(offset, |target| Request::Fallocate {
            target,
            offset,
            len,
            keep_size,
        })
    }

    /// Free the pages wholly inside `[offset, offset + len)` and zero the rest of the range
    /// (fallocate's `FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE`). The size stays.
    pub fn punch_hole(&self, offset: u64, len: u64) -> Result<()> {
        self.clear(offset, len, Clear::PunchHole)
    }

    /// Zero `[offset, offset + len)` and give it space (fallocate's `FALLOC_FL_ZERO_RANGE`,
    /// with `FALLOC_FL_KEEP_SIZE` if `keep_size`); without `keep_size` the size grows to
    /// the range's end if that is larger.
    pub fn zero_range(&self, offset: u64, len: u64, keep_size: bool) -> Result<()> {
        self.clear(offset, len, Clear::ZeroRange { keep_size })
    }

    /// fallocate(2) with `mode` (`Fallocate::from_mode`).
    pub fn fallocate(&self, mode: Fallocate, offset: u64, len: u64) -> Result<()> {
        match mode {
            Fallocate::Allocate { keep_size } => self.allocate(offset, len, keep_size),
            Fallocate::Clear(how) => self.clear(offset, len, how),
        }
    }

    /// Make `[offset, offset + len)` read as zeros, as `how` says.
    pub fn clear(&self, offset: u64, len: u64, how: Clear) -> Result<()> {
        self.change_from(offset, |target| Request::Clear {
            target,
            offset,
            len,
            how,
        })
    }

    /// Send the server a change to this file's data from `offset` on (which may grow it),
    /// with this process's writes from there (or from the end of file) held off.
    fn change_from(&self, offset: u64, request: impl FnOnce(Handle) -> Request) -> Result<()> {
        if !self.opts.write {
            return Err(Error::EBADF);
        }
        let lock = self.range_lock();
        let size = self.data().size;
        let _g = lock.lock(offset.min(size) / PAGE, u64::MAX);
        self.fs.call(request(self.handle))?;
        Ok(())
    }

    /// Everything is durable when a write returns; this orders nothing. A pool in an
    /// ordinary file is written back with `msync`, which can fail: there this is a round
    /// trip to the server, EIO if a write-back failed since the last check. In persistent
    /// memory or tmpfs nothing is written back, nothing can fail, and this returns at once
    /// (SQLite makes four of these per transaction).
    pub fn sync_all(&self) -> Result<()> {
        if self.fs.mount_info().media == engram_pmem::Media::File {
            self.fs.call(Request::Sync)?;
        }
        Ok(())
    }

    pub fn sync_data(&self) -> Result<()> {
        self.sync_all()
    }

    pub fn set_times(&self, atime: Option<SetTime>, mtime: Option<SetTime>) -> Result<()> {
        // Both UTIME_OMIT: nothing changes, not even ctime, as on Linux.
        if atime.is_none() && mtime.is_none() {
            return Ok(());
        }
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
                chown: true,
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
        self.with_pos(|p| *p)
    }

    /// Read at the offset and advance it.
    pub fn read_next(&self, buf: &mut [u8]) -> Result<usize> {
        self.with_pos(|pos| {
            let n = self.read_at(buf, *pos)?;
            *pos += n as u64;
            Ok(n)
        })
    }

    /// Write at the offset (or the end, for O_APPEND) and advance it.
    pub fn write_next(&self, data: &[u8]) -> Result<usize> {
        self.with_pos(|pos| {
            let at = if self.opts.append { None } else { Some(*pos) };
            let w = self.write_inner(data, at)?;
            *pos = w.end;
            Ok(w.len)
        })
    }

    /// lseek: returns the new offset.
    pub fn seek_to(&self, whence: SeekFrom) -> Result<u64> {
        self.with_pos(|pos| {
            let new = match whence {
                SeekFrom::Start(n) => Some(n),
                SeekFrom::Current(d) => pos.checked_add_signed(d),
                SeekFrom::End(d) => self.data().size.checked_add_signed(d),
            };
            let new = new.filter(|&n| n <= i64::MAX as u64).ok_or(Error::EINVAL)?;
            *pos = new;
            Ok(new)
        })
    }
}

/// What a read needs of the inode, from the first cache line of its record: no decoding of
/// the fields a read never looks at.
struct ReadView {
    mode: u32,
    size: u64,
    root: u64,
    height: u32,
}

impl ReadView {
    #[inline]
    fn read(core: &super::Core, ino: u64) -> ReadView {
        use inode::field;
        let b: [u8; 64] = core.pool.read_array(core.geo.inode_addr(ino));
        let u32_at = |i: u64| u32::from_le_bytes(b[i as usize..][..4].try_into().unwrap());
        let u64_at = |i: u64| u64::from_le_bytes(b[i as usize..][..8].try_into().unwrap());
        ReadView {
            mode: u32_at(field::MODE),
            size: u64_at(field::SIZE),
            root: u64_at(field::ROOT),
            height: u32_at(field::HEIGHT),
        }
    }

    fn is_dir(&self) -> bool {
        self.mode & inode::S_IFMT == inode::S_IFDIR
    }
}

impl Drop for File {
    fn drop(&mut self) {
        let _ = self.fs.close_handle(self.handle, self.opts.write);
        if let Some(l) = self.lock.get() {
            self.fs.forget_range_lock(self.handle.ino, l);
        }
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

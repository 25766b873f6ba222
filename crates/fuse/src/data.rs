//! Open files and directories: open, read, write, fsync, release, readdir(plus), statfs,
//! fallocate, copy_file_range.

use crate::state::{EngramFuse, Result, TTL, attr, dirent_type, errno};
use engram_core::{Error, OpenOptions, StatFs};
use fuser::{
    FileHandle, Generation, INodeNo, ReplyData, ReplyDirectory, ReplyDirectoryPlus, Request,
};
use std::cell::RefCell;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;

/// The most one copy_file_range request copies (callers loop over short copies).
const COPY_MAX: u64 = 64 << 20;
/// Bytes staged per step of a copy.
const COPY_CHUNK: usize = 1 << 20;

thread_local! {
    /// A per-thread read buffer, so that 1 MiB reads do not fault in fresh pages each time.
    static BUF: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Run `f` on a zeroed-once buffer of at least `len` bytes.
fn with_buf<T>(len: usize, f: impl FnOnce(&mut [u8]) -> T) -> T {
    BUF.with(|b| {
        let mut b = b.borrow_mut();
        if b.len() < len {
            b.resize(len, 0);
        }
        f(&mut b[..len])
    })
}

impl EngramFuse {
    pub(crate) fn do_open(&self, req: &Request, ino: INodeNo, flags: i32) -> Result<u64> {
        let h = self.handle(ino)?;
        let mut opts = OpenOptions::from_flags(flags, 0);
        // The kernel picks the offset of an O_APPEND write (the size it knows, under the
        // inode lock) and caches the written pages there: the engine must write there too.
        opts.append = false;
        if self.read_only && (opts.write || opts.truncate) {
            return Err(Error::EROFS);
        }
        let f = self.caller(req).open_handle(h, &opts)?;
        Ok(self.add_file(f))
    }

    /// Read up to `size` bytes at `offset` and reply with them.
    pub(crate) fn do_read(&self, fh: FileHandle, offset: u64, size: u32, reply: ReplyData) {
        let f = match self.file(fh.0) {
            Ok(f) => f,
            Err(e) => return reply.error(errno(&e)),
        };
        with_buf(size as usize, |buf| match f.read_at(buf, offset) {
            Ok(n) => {
                self.io.read(n);
                reply.data(&buf[..n]);
            }
            Err(e) => reply.error(errno(&e)),
        })
    }

    pub(crate) fn do_write(&self, fh: FileHandle, offset: u64, data: &[u8]) -> Result<u32> {
        let f = self.file(fh.0)?;
        let n = f.write_at(data, offset)?;
        self.io.write(n);
        Ok(n as u32)
    }

    /// lseek with SEEK_DATA or SEEK_HOLE (the kernel answers the other kinds itself).
    pub(crate) fn do_lseek(&self, fh: FileHandle, offset: i64, whence: i32) -> Result<i64> {
        let f = self.file(fh.0)?;
        let Ok(offset) = u64::try_from(offset) else {
            return Err(Error::from_errno(libc::ENXIO));
        };
        if !matches!(whence, libc::SEEK_DATA | libc::SEEK_HOLE) {
            return Err(Error::EINVAL);
        }
        if self.open_for_writing(f.ino()) {
            // A shared writable mapping's stores sit in the kernel's page cache until it
            // writes them back, and it does not before asking: a hole here may hold them
            // (cp, which skips holes, lost such a store). While a handle may write, which
            // a mapping keeps open until its unmap writes its pages back, the whole file
            // is data, as Linux's generic answer has it.
            let size = f.metadata()?.size;
            if offset >= size {
                return Err(Error::from_errno(libc::ENXIO));
            }
            return Ok(if whence == libc::SEEK_DATA {
                offset
            } else {
                size
            } as i64);
        }
        let at = match whence {
            libc::SEEK_DATA => f.seek_data(offset)?,
            _ => f.seek_hole(offset)?,
        };
        Ok(at as i64)
    }

    /// fsync and fsyncdir: every completed write is already durable; still ask the pool,
    /// so that a failing pool reports it.
    pub(crate) fn do_fsync(&self, fh: FileHandle) -> Result<()> {
        self.file(fh.0)?.sync_all()
    }

    pub(crate) fn do_opendir(&self, req: &Request, ino: INodeNo) -> Result<u64> {
        let h = self.handle(ino)?;
        if !self.stat(h)?.is_dir() {
            return Err(Error::ENOTDIR);
        }
        let f = self
            .caller(req)
            .open_handle(h, &OpenOptions::new().read(true))?;
        Ok(self.add_file(f))
    }

    /// readdir: the FUSE offset is the engine's cookie (0 = start, 1 = after ".",
    /// 2 = after "..", else the hash of the last name returned), so a listing resumes
    /// correctly while the directory changes.
    pub(crate) fn do_readdir(
        &self,
        fh: FileHandle,
        offset: u64,
        reply: &mut ReplyDirectory,
    ) -> Result<()> {
        let f = self.file(fh.0)?;
        let mut rd = f.read_dir()?;
        rd.seek(offset);
        for e in rd {
            let e = e?;
            let name = OsStr::from_bytes(&e.name);
            if reply.add(INodeNo(e.ino), e.cookie, dirent_type(e.file_type), name) {
                break;
            }
        }
        Ok(())
    }

    /// readdirplus: entries with their attributes. The kernel takes a reference to every
    /// entry but "." and "..", so each is remembered like a lookup.
    pub(crate) fn do_readdirplus(
        &self,
        fh: FileHandle,
        offset: u64,
        reply: &mut ReplyDirectoryPlus,
    ) -> Result<()> {
        let f = self.file(fh.0)?;
        let mut rd = f.read_dir()?;
        rd.seek(offset);
        for e in rd {
            let e = e?;
            let dot = e.name == b"." || e.name == b"..";
            let h = match self.root.handle_of(e.ino) {
                Ok(h) => h,
                // Removed since the directory page was read: skip it.
                Err(_) if !dot => continue,
                Err(err) => return Err(err),
            };
            let m = match self.stat(h) {
                Ok(m) => m,
                Err(_) if !dot => continue,
                Err(err) => return Err(err),
            };
            let name = OsStr::from_bytes(&e.name);
            let generation = Generation(u64::from(h.generation));
            if reply.add(INodeNo(e.ino), e.cookie, name, &TTL, &attr(&m), generation) {
                break;
            }
            if !dot {
                self.remember(h);
            }
        }
        Ok(())
    }

    pub(crate) fn do_statfs(&self) -> Result<StatFs> {
        self.root.statfs()
    }

    pub(crate) fn do_fallocate(
        &self,
        fh: FileHandle,
        offset: u64,
        len: u64,
        mode: i32,
    ) -> Result<()> {
        self.writable()?;
        let mode = engram_core::Fallocate::from_mode(mode)?;
        self.file(fh.0)?.fallocate(mode, offset, len)
    }

    /// copy_file_range inside the mount: one request instead of a read and a write per
    /// 1 MiB through the caller. The kernel has checked the descriptors and ranges.
    pub(crate) fn do_copy_file_range(
        &self,
        from: (FileHandle, u64),
        to: (FileHandle, u64),
        len: u64,
    ) -> Result<u32> {
        self.writable()?;
        let src = self.file(from.0.0)?;
        let dst = self.file(to.0.0)?;
        let len = len.min(COPY_MAX);
        let mut buf = vec![0u8; COPY_CHUNK.min(len as usize)];
        let mut done = 0u64;
        while done < len {
            let want = (len - done).min(buf.len() as u64) as usize;
            let n = src.read_at(&mut buf[..want], from.1 + done)?;
            if n == 0 {
                break;
            }
            let w = dst.write_at(&buf[..n], to.1 + done)?;
            done += w as u64;
            if w < n {
                break;
            }
        }
        Ok(done as u32)
    }
}

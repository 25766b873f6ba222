//! The FUSE operations: each decodes its request, calls the engine (namespace.rs, data.rs)
//! and answers the kernel.
//!
//! # Kernel caching
//!
//! - Attributes and names (including negative entries: a lookup that finds nothing answers
//!   node id 0, which the kernel caches as "no such name") are valid for [`TTL`]; see its
//!   comment for why that is coherent.
//! - File data stays in the page cache across opens (`FOPEN_KEEP_CACHE`): every write,
//!   truncate, fallocate and copy goes through this mount, and the kernel updates or drops
//!   the affected cached pages itself. On a pool shared through a daemon, other processes
//!   write too: there each open drops the file's cached pages (close-to-open consistency,
//!   as NFS gives), and `FUSE_AUTO_INVAL_DATA` drops them when a refreshed mtime or size
//!   shows a change.
//! - Symlink targets are cached (`FUSE_CACHE_SYMLINKS`): a symlink's target never changes.
//! - `writeback_cache` is **not** enabled: with it the kernel would acknowledge `write(2)`
//!   from its page cache and send the data later, breaking the engine's guarantee that a
//!   write is atomic and durable when it returns (and the kernel would own mtime and size).
//!   Writes are write-through; `max_write` is 1 MiB so large writes arrive whole.
//! - Locks (`fcntl`, `flock`) are left to the kernel, which handles them locally because
//!   the file system does not ask for POSIX or flock locks: correct for a single mount.

use crate::namespace::AttrChange;
use crate::state::{EngramFuse, IO_SIZE, TTL, attr, errno, negative_attr};
use engram_core::{Handle, Metadata};
use fuser::{
    CopyFileRangeFlags, Errno, FileHandle, Filesystem, FopenFlags, Generation, INodeNo, InitFlags,
    IoctlFlags, KernelConfig, LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyIoctl, ReplyLseek, ReplyOpen,
    ReplyStatfs, ReplyWrite, Request, TimeOrNow, WriteFlags,
};
use std::ffi::OsStr;
use std::io;
use std::path::Path;
use std::time::SystemTime;

type Result<T> = std::result::Result<T, engram_core::Error>;

fn reply_entry(reply: ReplyEntry, r: Result<(Handle, Metadata)>) {
    match r {
        Ok((h, m)) => reply.entry(&TTL, &attr(&m), Generation(u64::from(h.generation))),
        Err(e) => reply.error(errno(&e)),
    }
}

fn reply_empty(reply: ReplyEmpty, r: Result<()>) {
    match r {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(errno(&e)),
    }
}

impl EngramFuse {
    /// How an opened file may use the page cache.
    fn open_flags(&self) -> FopenFlags {
        if self.shared {
            FopenFlags::empty()
        } else {
            FopenFlags::FOPEN_KEEP_CACHE
        }
    }
}

fn reply_attr(reply: ReplyAttr, r: Result<Metadata>) {
    match r {
        Ok(m) => reply.attr(&TTL, &attr(&m)),
        Err(e) => reply.error(errno(&e)),
    }
}

/// Capabilities asked of the kernel when it offers them.
fn wanted_capabilities() -> InitFlags {
    InitFlags::FUSE_DO_READDIRPLUS
        | InitFlags::FUSE_READDIRPLUS_AUTO
        | InitFlags::FUSE_PARALLEL_DIROPS
        | InitFlags::FUSE_CACHE_SYMLINKS
        | InitFlags::FUSE_MAX_PAGES
        | InitFlags::FUSE_BIG_WRITES
        | InitFlags::FUSE_ASYNC_READ
}

impl Filesystem for EngramFuse {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> io::Result<()> {
        let mut want = wanted_capabilities();
        if self.shared {
            want |= InitFlags::FUSE_AUTO_INVAL_DATA;
        }
        let want = want & config.capabilities();
        let _ = config.add_capabilities(want);
        // 1 MiB requests (the kernel's default limit of 256 pages per request).
        let _ = config.set_max_write(IO_SIZE);
        if let Err(max) = config.set_max_readahead(IO_SIZE) {
            let _ = config.set_max_readahead(max);
        }
        let _ = config.set_max_background(64);
        Ok(())
    }

    fn destroy(&mut self) {
        self.close_all();
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        match self.do_lookup(parent, name) {
            Ok(Some((h, m))) => reply.entry(&TTL, &attr(&m), Generation(u64::from(h.generation))),
            Ok(None) => reply.entry(&TTL, &negative_attr(), Generation(0)),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        EngramFuse::forget(self, ino.0, nlookup);
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        reply_attr(reply, self.do_getattr(ino));
    }

    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let change = AttrChange {
            mode,
            uid,
            gid,
            size,
            atime,
            mtime,
            fh,
        };
        reply_attr(reply, self.do_setattr(req, ino, change));
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        match self.do_readlink(ino) {
            Ok(t) => reply.data(&t),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        reply_entry(reply, self.do_mknod(req, parent, name, mode, rdev));
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        reply: ReplyEntry,
    ) {
        reply_entry(reply, self.do_mkdir(req, parent, name, mode));
    }

    fn unlink(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        reply_empty(reply, self.do_unlink(req, parent, name, false));
    }

    fn rmdir(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        reply_empty(reply, self.do_unlink(req, parent, name, true));
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        let r = self.do_symlink(req, parent, link_name, target.as_os_str());
        reply_entry(reply, r);
    }

    fn rename(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let r = self.do_rename(req, (parent, name), (newparent, newname), flags);
        reply_empty(reply, r);
    }

    fn link(
        &self,
        req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        reply_entry(reply, self.do_link(req, ino, newparent, newname));
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        match self.do_open(req, ino, flags.0) {
            Ok(fh) => reply.opened(FileHandle(fh), self.open_flags()),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        self.do_read(fh, offset, size, reply);
    }

    fn write(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        match self.do_write(fh, offset, data) {
            Ok(n) => reply.written(n),
            Err(e) => reply.error(errno(&e)),
        }
    }

    /// close(2) of one descriptor: nothing is buffered here, so nothing to do.
    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        self.remove_file(fh.0);
        reply.ok();
    }

    fn lseek(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: i64,
        whence: i32,
        reply: ReplyLseek,
    ) {
        match self.do_lseek(fh, offset, whence) {
            Ok(at) => reply.offset(at),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn fsync(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        reply_empty(reply, self.do_fsync(fh));
    }

    fn opendir(&self, req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        match self.do_opendir(req, ino) {
            Ok(fh) => reply.opened(FileHandle(fh), FopenFlags::empty()),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        match self.do_readdir(fh, offset, &mut reply) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn readdirplus(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        match self.do_readdirplus(fh, offset, &mut reply) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        self.remove_file(fh.0);
        reply.ok();
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        reply_empty(reply, self.do_fsync(fh));
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        match self.do_statfs() {
            Ok(s) => reply.statfs(
                s.blocks,
                s.blocks_free,
                s.blocks_free,
                s.files,
                s.files_free,
                s.block_size as u32,
                s.name_max as u32,
                s.block_size as u32,
            ),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        match self.do_create(req, parent, name, mode, flags) {
            Ok((h, m, fh)) => reply.created(
                &TTL,
                &attr(&m),
                Generation(u64::from(h.generation)),
                FileHandle(fh),
                self.open_flags(),
            ),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn fallocate(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        reply_empty(reply, self.do_fallocate(fh, offset, length, mode));
    }

    fn ioctl(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _flags: IoctlFlags,
        cmd: u32,
        in_data: &[u8],
        out_size: u32,
        reply: ReplyIoctl,
    ) {
        match crate::fileattr::answer(cmd, in_data, out_size) {
            Ok(out) => reply.ioctl(0, &out),
            Err(e) => reply.error(e),
        }
    }

    fn copy_file_range(
        &self,
        _req: &Request,
        _ino_in: INodeNo,
        fh_in: FileHandle,
        offset_in: u64,
        _ino_out: INodeNo,
        fh_out: FileHandle,
        offset_out: u64,
        len: u64,
        flags: CopyFileRangeFlags,
        reply: ReplyWrite,
    ) {
        if !flags.is_empty() {
            return reply.error(Errno::EINVAL);
        }
        match self.do_copy_file_range((fh_in, offset_in), (fh_out, offset_out), len) {
            Ok(n) => reply.written(n),
            Err(e) => reply.error(errno(&e)),
        }
    }
}

//! Names and attributes: lookup, getattr/setattr, create, mknod, mkdir, symlink, link,
//! unlink, rmdir, rename, readlink.

use crate::state::{EngramFuse, Result, fuse_time_ns};
use engram_core::{Error, Handle, Metadata, OpenOptions, RENAME_EXCHANGE, RENAME_NOREPLACE};
use engram_core::{SetAttr, SetTime};
use fuser::{FileHandle, INodeNo, RenameFlags, Request, TimeOrNow};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;

/// What setattr asks for, as FUSE delivers it.
pub(crate) struct AttrChange {
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub size: Option<u64>,
    pub atime: Option<TimeOrNow>,
    pub mtime: Option<TimeOrNow>,
    pub fh: Option<FileHandle>,
}

fn set_time(t: Option<TimeOrNow>) -> Option<SetTime> {
    t.map(|t| match t {
        TimeOrNow::Now => SetTime::Now,
        TimeOrNow::SpecificTime(t) => SetTime::Ns(fuse_time_ns(t)),
    })
}

impl EngramFuse {
    /// An entry the kernel will hold a reference to.
    fn entry(&self, h: Handle) -> Result<(Handle, Metadata)> {
        let m = self.stat(h)?;
        self.remember(h);
        Ok((h, m))
    }

    /// Look a name up; `Ok(None)` means it does not exist.
    pub(crate) fn do_lookup(
        &self,
        parent: INodeNo,
        name: &OsStr,
    ) -> Result<Option<(Handle, Metadata)>> {
        let p = self.handle(parent)?;
        match self.root.lookup_in(p, name.as_bytes()) {
            Ok((h, m)) => {
                self.remember(h);
                Ok(Some((h, m)))
            }
            Err(e) if e.errno() == libc::ENOENT => Ok(None),
            Err(e) => Err(e),
        }
    }

    pub(crate) fn do_getattr(&self, ino: INodeNo) -> Result<Metadata> {
        self.stat(self.handle(ino)?)
    }

    pub(crate) fn do_setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        c: AttrChange,
    ) -> Result<Metadata> {
        self.writable()?;
        let h = self.handle(ino)?;
        let caller = self.caller(req);
        let mut rest = SetAttr {
            mode: c.mode,
            uid: c.uid,
            gid: c.gid,
            size: None,
            atime: set_time(c.atime),
            mtime: set_time(c.mtime),
            ..SetAttr::default()
        };
        if let Some(mode) = rest.mode
            && rest.uid.is_none()
            && rest.gid.is_none()
        {
            let old = self.stat(h)?.mode & 0o7777;
            let new = mode & 0o7777;
            let setid = libc::S_ISUID | libc::S_ISGID;
            if new != old && new & !old == 0 && (old & !new) & !setid == 0 {
                // Only set-id bits cleared: the kernel does this after a write by anyone
                // (file_remove_privs), having authorised it; the engine would insist on the
                // owner.
                self.root.setattr(
                    h,
                    SetAttr {
                        mode: Some(mode),
                        ..SetAttr::default()
                    },
                )?;
                rest.mode = None;
            }
        }
        // A request that changes nothing (a chown to -1, -1, which asks no permission; the
        // kernel sends no ctime without its writeback cache) still changes ctime, as on
        // Linux: the server sets it on every change.
        if rest != SetAttr::default() || c.size.is_none() {
            caller.setattr(h, rest)?;
        }
        if let Some(size) = c.size {
            let size_only = SetAttr {
                size: Some(size),
                ..SetAttr::default()
            };
            match c.fh {
                // ftruncate (or open with O_TRUNC): the kernel checked that the descriptor
                // is open for writing, which is all POSIX asks; the mode may forbid writing.
                // As the caller, whose set-id bits a truncate clears.
                Some(fh) => {
                    self.file(fh.0)?;
                    let opened = SetAttr {
                        through_open_file: true,
                        ..size_only
                    };
                    caller.setattr(h, opened)?
                }
                None => caller.setattr(h, size_only)?,
            }
        }
        self.stat(h)
    }

    pub(crate) fn do_readlink(&self, ino: INodeNo) -> Result<Vec<u8>> {
        self.root.readlink_handle(self.handle(ino)?)
    }

    /// A regular file, FIFO, socket or device (the kernel has checked CAP_MKNOD for a
    /// device; the engine checks again that the caller is root). The kernel serves a FIFO's
    /// pipe itself, and refuses to open a device (the mount is `nodev`) or a socket.
    pub(crate) fn do_mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        rdev: u32,
    ) -> Result<(Handle, Metadata)> {
        self.writable()?;
        let p = self.handle(parent)?;
        let mode = mode & (libc::S_IFMT | 0o7777);
        let h = self
            .caller(req)
            .mknod_in(p, name.as_bytes(), mode, u64::from(rdev))?;
        self.entry(h)
    }

    pub(crate) fn do_mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
    ) -> Result<(Handle, Metadata)> {
        self.writable()?;
        let p = self.handle(parent)?;
        let h = self
            .caller(req)
            .mkdir_in(p, name.as_bytes(), mode & 0o7777)?;
        self.entry(h)
    }

    pub(crate) fn do_symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        target: &OsStr,
    ) -> Result<(Handle, Metadata)> {
        self.writable()?;
        let p = self.handle(parent)?;
        let h = self
            .caller(req)
            .symlink_in(p, name.as_bytes(), target.as_bytes())?;
        self.entry(h)
    }

    pub(crate) fn do_link(
        &self,
        req: &Request,
        ino: INodeNo,
        parent: INodeNo,
        name: &OsStr,
    ) -> Result<(Handle, Metadata)> {
        self.writable()?;
        let target = self.handle(ino)?;
        let p = self.handle(parent)?;
        self.caller(req).link_in(target, p, name.as_bytes())?;
        self.entry(target)
    }

    pub(crate) fn do_unlink(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        dir: bool,
    ) -> Result<()> {
        self.writable()?;
        let p = self.handle(parent)?;
        self.caller(req).unlink_in(p, name.as_bytes(), dir)
    }

    pub(crate) fn do_rename(
        &self,
        req: &Request,
        from: (INodeNo, &OsStr),
        to: (INodeNo, &OsStr),
        flags: RenameFlags,
    ) -> Result<()> {
        self.writable()?;
        let mut f = 0;
        if flags.contains(RenameFlags::RENAME_NOREPLACE) {
            f |= RENAME_NOREPLACE;
        }
        if flags.contains(RenameFlags::RENAME_EXCHANGE) {
            f |= RENAME_EXCHANGE;
        }
        if flags.bits() & !(RenameFlags::RENAME_NOREPLACE | RenameFlags::RENAME_EXCHANGE).bits()
            != 0
        {
            // RENAME_WHITEOUT needs character devices, which the pool cannot hold.
            return Err(Error::EINVAL);
        }
        let fp = self.handle(from.0)?;
        let tp = self.handle(to.0)?;
        self.caller(req)
            .rename_in(fp, from.1.as_bytes(), tp, to.1.as_bytes(), f)
    }

    /// create: make (or, without O_EXCL, find) a regular file and open it.
    pub(crate) fn do_create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        flags: i32,
    ) -> Result<(Handle, Metadata, u64)> {
        self.writable()?;
        let p = self.handle(parent)?;
        let caller = self.caller(req);
        let excl = flags & libc::O_EXCL != 0;
        let (h, created) = caller.create_in(p, name.as_bytes(), mode & 0o7777, excl)?;
        let mut opts = OpenOptions::from_flags(flags, mode & 0o7777);
        opts.create = false;
        opts.excl = false;
        // As in open: the kernel chooses where O_APPEND writes go.
        opts.append = false;
        let file = if created {
            // The creator may use the descriptor whatever mode it gave the file (open(2)),
            // and Linux does not truncate a file its open made (nor change its times).
            opts.truncate = false;
            self.root.open_handle(h, &opts)?
        } else {
            // Lost a race with another creator: an ordinary open of what is there.
            let m = self.stat(h)?;
            if m.is_dir() {
                return Err(Error::EISDIR);
            }
            if !m.is_file() {
                return Err(Error::EEXIST);
            }
            caller.open_handle(h, &opts)?
        };
        let m = self.stat(h)?;
        let fh = self.add_file(file);
        self.remember(h);
        Ok((h, m, fh))
    }
}

//! Path operations of the public API. Every `*_at` form resolves relative paths against an
//! open directory; the plain forms resolve them against the root.

use super::path::Parent;
use super::{File, Fs, Metadata, OpenOptions, ReadDir};
use crate::error::{Error, Result};
use crate::layout::PAGE;
use crate::perm::{self, R, W, X};
use crate::request::{
    Handle, RENAME_EXCHANGE, RENAME_NOREPLACE, Request, Response, SetAttr, SetTime, StatFs,
};

pub(super) fn base(dir: Option<&File>) -> Option<Handle> {
    dir.map(File::handle)
}

impl Fs {
    /// Split a path for an operation that creates or removes its last component.
    fn parent_for_change<'p>(
        &self,
        dir: Option<Handle>,
        path: &'p [u8],
    ) -> Result<(Parent<'p>, Vec<u8>)> {
        let mut p = self.resolve_parent(dir, path)?;
        match p.name.take() {
            Some(n) => Ok((p, n.into_owned())),
            None => Err(Error::EEXIST),
        }
    }

    /// Truncate `h` to `size`; `opened`: through a description open for writing (its
    /// permission was checked when it was opened).
    pub(crate) fn truncate_handle(&self, h: Handle, size: u64, opened: bool) -> Result<()> {
        let lock = self.range_lock(h.ino);
        let cur = self.read_inode(h.ino).size;
        let g = lock.lock(size.min(cur) / PAGE, u64::MAX);
        let r = self.call(Request::SetAttr {
            target: h,
            attr: SetAttr {
                size: Some(size),
                through_open_file: opened,
                ..SetAttr::default()
            },
        });
        drop(g);
        // Files lock lazily: with none of them holding the lock, drop the map's entry.
        self.forget_range_lock(h.ino, &lock);
        r.map(drop)
    }

    pub fn mkdir(&self, path: impl AsRef<[u8]>, mode: u32) -> Result<()> {
        self.mkdir_at(None, path.as_ref(), mode)
    }

    pub fn mkdir_at(&self, dir: Option<&File>, path: &[u8], mode: u32) -> Result<()> {
        self.mkdir_from(base(dir), path, mode)
    }

    /// `mkdir_at` with the directory given by its handle.
    pub fn mkdir_from(&self, dir: Option<Handle>, path: &[u8], mode: u32) -> Result<()> {
        // Every request below names a directory found lock-free, which a rename over it can
        // free before the request arrives: `retry_stale` walks again.
        self.retry_stale(|| {
            let (p, name) = self.parent_for_change(dir, path)?;
            self.call_entry(Request::Mkdir {
                parent: p.dir,
                name,
                mode,
            })
            .map(drop)
        })
    }

    /// mknod(2): make a FIFO (`S_IFIFO`), socket (`S_IFSOCK`), character or block device
    /// (`S_IFCHR`, `S_IFBLK`, with device number `rdev`, root only: EPERM otherwise, as
    /// Linux without CAP_MKNOD) or empty regular file (type 0 or `S_IFREG`) at `path`, with
    /// the permission bits of `mode` (no umask is applied). `rdev` is ignored but for
    /// devices, and must fit in 32 bits (glibc's `makedev` of a major below 4096 and a minor
    /// below 2^20), else EINVAL. Such a node cannot be opened through this API
    /// (`Opened::Special`).
    pub fn mknod(&self, path: impl AsRef<[u8]>, mode: u32, rdev: u64) -> Result<()> {
        self.mknod_from(None, path.as_ref(), mode, rdev)
    }

    pub fn mknod_at(&self, dir: Option<&File>, path: &[u8], mode: u32, rdev: u64) -> Result<()> {
        self.mknod_from(base(dir), path, mode, rdev)
    }

    /// `mknod_at` with the directory given by its handle.
    pub fn mknod_from(&self, dir: Option<Handle>, path: &[u8], mode: u32, rdev: u64) -> Result<()> {
        // Linux refuses the type before it looks anything up.
        crate::server::mknod_kind(mode, rdev)?;
        self.retry_stale(|| {
            let (p, name) = self.parent_for_change(dir, path)?;
            if p.trailing_slash {
                return Err(self.slash_name_error(p.dir, &name)?);
            }
            self.mknod_in(p.dir, &name, mode, rdev).map(drop)
        })
    }

    /// Remove a file or symlink.
    pub fn unlink(&self, path: impl AsRef<[u8]>) -> Result<()> {
        self.unlink_at(None, path.as_ref(), false)
    }

    pub fn rmdir(&self, path: impl AsRef<[u8]>) -> Result<()> {
        self.unlink_at(None, path.as_ref(), true)
    }

    /// unlinkat(2): `dir_flag` selects rmdir semantics (AT_REMOVEDIR).
    pub fn unlink_at(&self, dir: Option<&File>, path: &[u8], dir_flag: bool) -> Result<()> {
        self.unlink_from(base(dir), path, dir_flag)
    }

    /// `unlink_at` with the directory given by its handle.
    pub fn unlink_from(&self, dir: Option<Handle>, path: &[u8], dir_flag: bool) -> Result<()> {
        self.retry_stale(|| self.unlink_once(dir, path, dir_flag))
    }

    fn unlink_once(&self, dir: Option<Handle>, path: &[u8], dir_flag: bool) -> Result<()> {
        let p = self.resolve_parent(dir, path)?;
        let Some(name) = p.name else {
            return Err(if dir_flag {
                match path.split(|&b| b == b'/').rfind(|c| !c.is_empty()) {
                    Some(b".") => Error::EINVAL,
                    Some(b"..") => Error::ENOTEMPTY,
                    _ => Error::EBUSY,
                }
            } else {
                Error::EISDIR
            });
        };
        if p.trailing_slash && !dir_flag {
            // "file/" names a directory that must exist.
            let (_, d) = self.lookup_child(p.dir.ino, &name)?.ok_or(Error::ENOENT)?;
            return Err(if d.is_dir() {
                Error::EISDIR
            } else {
                Error::ENOTDIR
            });
        }
        self.call_unlink(p.dir, &name, dir_flag)?;
        Ok(())
    }

    pub fn rename(&self, from: impl AsRef<[u8]>, to: impl AsRef<[u8]>) -> Result<()> {
        self.rename_at(None, from.as_ref(), None, to.as_ref(), 0)
    }

    /// renameat2(2) with RENAME_NOREPLACE / RENAME_EXCHANGE flags.
    pub fn rename_at(
        &self,
        fdir: Option<&File>,
        from: &[u8],
        tdir: Option<&File>,
        to: &[u8],
        flags: u32,
    ) -> Result<()> {
        self.rename_from(base(fdir), from, base(tdir), to, flags)
    }

    /// `rename_at` with the directories given by their handles.
    pub fn rename_from(
        &self,
        fdir: Option<Handle>,
        from: &[u8],
        tdir: Option<Handle>,
        to: &[u8],
        flags: u32,
    ) -> Result<()> {
        let both = RENAME_EXCHANGE | RENAME_NOREPLACE;
        if flags & !both != 0 || flags & both == both {
            return Err(Error::EINVAL);
        }
        self.retry_stale(|| self.rename_once((fdir, from), (tdir, to), flags))
    }

    fn rename_once(
        &self,
        (fdir, from): (Option<Handle>, &[u8]),
        (tdir, to): (Option<Handle>, &[u8]),
        flags: u32,
    ) -> Result<()> {
        let f = self.resolve_parent(fdir, from)?;
        let t = self.resolve_parent(tdir, to)?;
        let Some(fname) = f.name else {
            return Err(Error::EBUSY);
        };
        let Some(tname) = t.name else {
            // The target is "/" or ends in "." or "..": it exists.
            return Err(if flags & RENAME_NOREPLACE != 0 {
                Error::EEXIST
            } else {
                Error::EBUSY
            });
        };
        if f.trailing_slash || t.trailing_slash {
            // A trailing slash says "this is a directory": the source, or an existing target,
            // must be one (checked after the existence checks, as Linux does).
            let (_, s) = self.lookup_child(f.dir.ino, &fname)?.ok_or(Error::ENOENT)?;
            let d = self.lookup_child(t.dir.ino, &tname)?;
            if flags & RENAME_EXCHANGE != 0 && d.is_none() {
                return Err(Error::ENOENT);
            }
            if flags & RENAME_NOREPLACE != 0 && d.is_some() {
                return Err(Error::EEXIST);
            }
            let exchange = flags & RENAME_EXCHANGE != 0;
            if exchange && t.trailing_slash && d.as_ref().is_some_and(|(_, d)| !d.is_dir()) {
                return Err(Error::ENOTDIR);
            }
            if !s.is_dir() && (f.trailing_slash || (!exchange && t.trailing_slash)) {
                return Err(Error::ENOTDIR);
            }
        }
        self.call_rename((f.dir, &fname), (t.dir, &tname), flags)?;
        Ok(())
    }

    /// Make `new` another name of `existing` (which is not followed if it is a symlink).
    pub fn link(&self, existing: impl AsRef<[u8]>, new: impl AsRef<[u8]>) -> Result<()> {
        self.link_at(None, existing.as_ref(), None, new.as_ref(), false)
    }

    pub fn link_at(
        &self,
        odir: Option<&File>,
        old: &[u8],
        ndir: Option<&File>,
        new: &[u8],
        follow: bool,
    ) -> Result<()> {
        self.link_from(base(odir), old, base(ndir), new, follow)
    }

    /// `link_at` with the directories given by their handles.
    pub fn link_from(
        &self,
        odir: Option<Handle>,
        old: &[u8],
        ndir: Option<Handle>,
        new: &[u8],
        follow: bool,
    ) -> Result<()> {
        self.retry_stale(|| self.link_once((odir, old), (ndir, new), follow))
    }

    fn link_once(
        &self,
        (odir, old): (Option<Handle>, &[u8]),
        (ndir, new): (Option<Handle>, &[u8]),
        follow: bool,
    ) -> Result<()> {
        let (h, _) = self.resolve(odir, old, follow)?;
        self.link_handle(h, ndir, new)
    }

    /// A new name `new` (from `ndir`) for the node of handle `target`: linkat with
    /// AT_EMPTY_PATH. ENOENT once the node has no name left (the server checks).
    pub fn link_handle(&self, target: Handle, ndir: Option<Handle>, new: &[u8]) -> Result<()> {
        let (p, name) = self.parent_for_change(ndir, new)?;
        if p.trailing_slash {
            return Err(self.slash_name_error(p.dir, &name)?);
        }
        self.call_entry(Request::Link {
            target,
            parent: p.dir,
            name,
        })?;
        Ok(())
    }

    /// Create a symlink at `linkpath` pointing to `target`.
    pub fn symlink(&self, target: impl AsRef<[u8]>, linkpath: impl AsRef<[u8]>) -> Result<()> {
        self.symlink_at(target.as_ref(), None, linkpath.as_ref())
    }

    pub fn symlink_at(&self, target: &[u8], dir: Option<&File>, linkpath: &[u8]) -> Result<()> {
        // Linux checks the target before the new name.
        if target.is_empty() {
            return Err(Error::ENOENT);
        }
        if target.len() >= super::path::PATH_MAX {
            return Err(Error::ENAMETOOLONG);
        }
        self.retry_stale(|| {
            let (p, name) = self.parent_for_change(base(dir), linkpath)?;
            if p.trailing_slash {
                return Err(self.slash_name_error(p.dir, &name)?);
            }
            self.call_entry(Request::Symlink {
                parent: p.dir,
                name,
                target: target.to_vec(),
            })
            .map(drop)
        })
    }

    /// The error for a new name written with a trailing slash ("name/"): EEXIST if the name
    /// exists, else ENOENT (a new non-directory cannot end with a slash).
    fn slash_name_error(&self, dir: Handle, name: &[u8]) -> Result<Error> {
        Ok(if self.lookup_child(dir.ino, name)?.is_some() {
            Error::EEXIST
        } else {
            Error::ENOENT
        })
    }

    pub fn readlink(&self, path: impl AsRef<[u8]>) -> Result<Vec<u8>> {
        self.readlink_at(None, path.as_ref())
    }

    pub fn readlink_at(&self, dir: Option<&File>, path: &[u8]) -> Result<Vec<u8>> {
        // The symlink found can be unlinked (and its inode reused) before its target is
        // read (ESTALE): look the name up again, as Linux reads it atomically.
        self.retry_stale(|| {
            let (h, _) = self.resolve(base(dir), path, false)?;
            self.read_link_target(h)
        })
    }

    /// stat(2): follows a final symlink.
    pub fn stat(&self, path: impl AsRef<[u8]>) -> Result<Metadata> {
        self.stat_at(None, path.as_ref(), true)
    }

    /// lstat(2).
    pub fn lstat(&self, path: impl AsRef<[u8]>) -> Result<Metadata> {
        self.stat_at(None, path.as_ref(), false)
    }

    pub fn stat_at(&self, dir: Option<&File>, path: &[u8], follow: bool) -> Result<Metadata> {
        let (h, d) = self.resolve_inline(base(dir), path, follow)?;
        Ok(Metadata::from_inode(h.ino, &d))
    }

    /// access(2) with R_OK/W_OK/X_OK bits (F_OK = 0 checks existence).
    pub fn access_at(
        &self,
        dir: Option<&File>,
        path: &[u8],
        mode: u32,
        follow: bool,
    ) -> Result<()> {
        let (_, d) = self.resolve(base(dir), path, follow)?;
        perm::check(self.creds(), &d, mode & (R | W | X))
    }

    pub fn truncate(&self, path: impl AsRef<[u8]>, size: u64) -> Result<()> {
        self.retry_stale(|| {
            let (h, d) = self.resolve(None, path.as_ref(), true)?;
            if d.is_dir() {
                return Err(Error::EISDIR);
            }
            // A FIFO, device or socket: before the permission check, as Linux.
            if !d.is_reg() {
                return Err(Error::EINVAL);
            }
            perm::check(self.creds(), &d, W)?;
            self.truncate_handle(h, size, false)
        })
    }

    fn setattr_at(
        &self,
        dir: Option<&File>,
        path: &[u8],
        follow: bool,
        attr: SetAttr,
    ) -> Result<()> {
        self.retry_stale(|| {
            let (h, _) = self.resolve(base(dir), path, follow)?;
            self.call(Request::SetAttr { target: h, attr }).map(drop)
        })
    }

    pub fn chmod(&self, path: impl AsRef<[u8]>, mode: u32) -> Result<()> {
        self.chmod_at(None, path.as_ref(), mode, true)
    }

    pub fn chmod_at(&self, dir: Option<&File>, path: &[u8], mode: u32, follow: bool) -> Result<()> {
        self.setattr_at(
            dir,
            path,
            follow,
            SetAttr {
                mode: Some(mode),
                ..SetAttr::default()
            },
        )
    }

    pub fn chown(&self, path: impl AsRef<[u8]>, uid: Option<u32>, gid: Option<u32>) -> Result<()> {
        self.chown_at(None, path.as_ref(), uid, gid, true)
    }

    pub fn chown_at(
        &self,
        dir: Option<&File>,
        path: &[u8],
        uid: Option<u32>,
        gid: Option<u32>,
        follow: bool,
    ) -> Result<()> {
        self.setattr_at(
            dir,
            path,
            follow,
            SetAttr {
                uid,
                gid,
                chown: true,
                ..SetAttr::default()
            },
        )
    }

    /// utimensat(2): None leaves a time alone (UTIME_OMIT).
    pub fn utimens(
        &self,
        path: impl AsRef<[u8]>,
        atime: Option<SetTime>,
        mtime: Option<SetTime>,
    ) -> Result<()> {
        self.utimens_at(None, path.as_ref(), atime, mtime, true)
    }

    pub fn utimens_at(
        &self,
        dir: Option<&File>,
        path: &[u8],
        atime: Option<SetTime>,
        mtime: Option<SetTime>,
        follow: bool,
    ) -> Result<()> {
        // Nothing to change: Linux returns at once, without even looking the path up.
        if atime.is_none() && mtime.is_none() {
            return Ok(());
        }
        self.setattr_at(
            dir,
            path,
            follow,
            SetAttr {
                atime,
                mtime,
                ..SetAttr::default()
            },
        )
    }

    pub fn read_dir(&self, path: impl AsRef<[u8]>) -> Result<ReadDir> {
        let (h, d) = self.resolve(None, path.as_ref(), true)?;
        if !d.is_dir() {
            return Err(Error::ENOTDIR);
        }
        perm::check(self.creds(), &d, R)?;
        Ok(ReadDir::new(self.clone(), h))
    }

    pub fn statfs(&self) -> Result<StatFs> {
        match self.call(Request::Statfs)? {
            Response::StatFs(s) => Ok(s),
            _ => Err(Error::EIO),
        }
    }

    /// Read a whole file.
    pub fn read_file(&self, path: impl AsRef<[u8]>) -> Result<Vec<u8>> {
        let f = self.open_file(path, &OpenOptions::new().read(true))?;
        let len = f.metadata()?.size as usize;
        let mut buf = vec![0u8; len];
        let n = f.read_at(&mut buf, 0)?;
        buf.truncate(n);
        Ok(buf)
    }

    /// Create or replace a whole file.
    pub fn write_file(&self, path: impl AsRef<[u8]>, data: &[u8]) -> Result<()> {
        let f = self.open_file(
            path,
            &OpenOptions::new().write(true).create(true).truncate(true),
        )?;
        // A write larger than one atomic step may be short (a later step ran out of space):
        // go on until everything is written or a write fails outright.
        let mut done = 0;
        while done < data.len() {
            done += f.write_at(&data[done..], done as u64)?;
        }
        Ok(())
    }
}

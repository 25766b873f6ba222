//! Operations by inode handle and name, for front ends that work with inode numbers
//! rather than paths (FUSE, the daemon's clients, the shim's descriptors).

use super::{File, Fs, Metadata, OpenOptions, ReadDir};
use crate::error::{Error, Result};
use crate::perm::{self, R};
use crate::request::{Handle, Request, SetAttr};

impl Fs {
    /// The handle of inode `ino` as it is now (its current generation), if it is live.
    pub fn handle_of(&self, ino: u64) -> Result<Handle> {
        if ino == 0 || ino >= self.core.geo.inode_count {
            return Err(Error::ESTALE);
        }
        let d = self.read_inode(ino);
        if d.is_free() {
            return Err(Error::ESTALE);
        }
        Ok(Handle {
            ino,
            generation: d.generation,
        })
    }

    /// stat by handle; ESTALE if the inode was freed (and maybe reused) since.
    pub fn stat_handle(&self, h: Handle) -> Result<Metadata> {
        let d = self.read_inode(h.ino);
        if d.is_free() || d.generation != h.generation {
            return Err(Error::ESTALE);
        }
        Ok(Metadata::from_inode(h.ino, &d))
    }

    /// Look one name up in a directory (search permission on it checked against the
    /// caller's credentials, as a path walk checks it).
    pub fn lookup_in(&self, dir: Handle, name: &[u8]) -> Result<(Handle, Metadata)> {
        let data = self.read_inode(dir.ino);
        if data.is_free() || data.generation != dir.generation {
            return Err(Error::ESTALE);
        }
        if !data.is_dir() {
            return Err(Error::ENOTDIR);
        }
        crate::perm::check(&self.creds, &data, crate::perm::X)?;
        match name {
            b"." => return Ok((dir, Metadata::from_inode(dir.ino, &data))),
            b".." => {
                let p = self.read_inode(dir.ino).parent;
                let h = self.handle_of(p)?;
                return Ok((h, self.stat_handle(h)?));
            }
            _ => {}
        }
        if name.len() > crate::dir::NAME_MAX {
            return Err(Error::ENAMETOOLONG);
        }
        let (h, data) = self.lookup_child(dir.ino, name)?.ok_or(Error::ENOENT)?;
        Ok((h, Metadata::from_inode(h.ino, &data)))
    }

    /// Open by handle (permission checked against the caller's credentials).
    pub fn open_handle(&self, h: Handle, opts: &OpenOptions) -> Result<File> {
        let mut opts = *opts;
        if !opts.read && !opts.write {
            opts.read = true;
        }
        let m = self.stat_handle(h)?;
        if m.is_dir() && (opts.write || opts.truncate) {
            return Err(Error::EISDIR);
        }
        let d = self.read_inode(h.ino);
        let writes = opts.write || opts.truncate;
        let want = if opts.read { R } else { 0 } | if writes { perm::W } else { 0 };
        perm::check(self.creds(), &d, want)?;
        if d.is_special() {
            return Err(super::special_open_error(d.mode));
        }
        let file = File::new(self.clone(), h, opts)?;
        // As `open_from`: an empty file or a read-only open is truncated too (mtime, ctime).
        if opts.truncate && !opts.truncate_later && m.is_file() {
            self.truncate_handle(h, 0, true)?;
        }
        Ok(file)
    }

    /// Hold directory `h` open without reading it (no permission asked: whoever reached it
    /// may), as the kernel holds a process's current directory. Removed meanwhile, it stays
    /// (empty, no links) until dropped, and so does the parent it had.
    pub fn hold_dir(&self, h: Handle) -> Result<File> {
        if !self.stat_handle(h)?.is_dir() {
            return Err(Error::ENOTDIR);
        }
        File::new(self.clone(), h, OpenOptions::new())
    }

    pub fn read_dir_handle(&self, h: Handle) -> Result<ReadDir> {
        let m = self.stat_handle(h)?;
        if !m.is_dir() {
            return Err(Error::ENOTDIR);
        }
        Ok(ReadDir::new(self.clone(), h))
    }

    /// Create a regular file; returns its handle and whether it was created.
    pub fn create_in(
        &self,
        dir: Handle,
        name: &[u8],
        mode: u32,
        excl: bool,
    ) -> Result<(Handle, bool)> {
        self.call_create(dir, name, mode, excl, None)
    }

    pub fn mkdir_in(&self, dir: Handle, name: &[u8], mode: u32) -> Result<Handle> {
        Ok(self
            .call_entry(Request::Mkdir {
                parent: dir,
                name: name.to_vec(),
                mode,
            })?
            .0)
    }

    pub fn symlink_in(&self, dir: Handle, name: &[u8], target: &[u8]) -> Result<Handle> {
        Ok(self
            .call_entry(Request::Symlink {
                parent: dir,
                name: name.to_vec(),
                target: target.to_vec(),
            })?
            .0)
    }

    /// mknod(2) of `name` in `dir` (see `Fs::mknod`).
    pub fn mknod_in(&self, dir: Handle, name: &[u8], mode: u32, rdev: u64) -> Result<Handle> {
        crate::server::mknod_kind(mode, rdev)?;
        Ok(self
            .call_entry(Request::Mknod {
                parent: dir,
                name: name.to_vec(),
                mode,
                rdev,
            })?
            .0)
    }

    pub fn link_in(&self, target: Handle, dir: Handle, name: &[u8]) -> Result<()> {
        self.call_entry(Request::Link {
            target,
            parent: dir,
            name: name.to_vec(),
        })?;
        Ok(())
    }

    /// Remove a name; `is_dir` selects rmdir semantics.
    pub fn unlink_in(&self, dir: Handle, name: &[u8], is_dir: bool) -> Result<()> {
        self.call_unlink(dir, name, is_dir)?;
        Ok(())
    }

    pub fn rename_in(
        &self,
        from: Handle,
        from_name: &[u8],
        to: Handle,
        to_name: &[u8],
        flags: u32,
    ) -> Result<()> {
        self.call_rename((from, from_name), (to, to_name), flags)?;
        Ok(())
    }

    /// chmod/chown/utimens/truncate by handle. A size change takes the file's range lock.
    pub fn setattr(&self, h: Handle, attr: SetAttr) -> Result<()> {
        if let Some(size) = attr.size {
            let rest = SetAttr {
                size: None,
                through_open_file: false,
                ..attr
            };
            if rest != SetAttr::default() {
                self.call(Request::SetAttr {
                    target: h,
                    attr: rest,
                })?;
            }
            return self.truncate_handle(h, size, attr.through_open_file);
        }
        self.call(Request::SetAttr { target: h, attr })?;
        Ok(())
    }

    /// ESTALE if the inode was freed (and maybe reused) since (`read_link_target` checks).
    pub fn readlink_handle(&self, h: Handle) -> Result<Vec<u8>> {
        self.read_link_target(h)
    }
}

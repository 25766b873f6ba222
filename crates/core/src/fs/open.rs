//! open(2) by path: the walk, O_CREAT (through symlinks too), the checks Linux makes, and
//! O_TRUNC. A FIFO, device or socket passes the same checks and is then handed back as
//! such (`Opened::Special`): the engine holds no data for it, a front end serves it.

use super::ops::base;
use super::{File, Fs, Metadata, OpenOptions};
use crate::error::{Error, Result};
use crate::inode::{InodeData, S_IFMT, S_IFSOCK};
use crate::perm::{self, R, W};
use crate::request::Handle;

/// What an open found.
pub enum Opened {
    /// A regular file or a directory, open.
    File(File),
    /// A FIFO, device or socket the caller may open as asked (permissions checked; nothing
    /// is held open in the pool). The shim opens a kernel FIFO for a FIFO; FUSE's kernel
    /// serves such nodes itself.
    Special(Handle, Metadata),
}

impl Opened {
    /// The file, or the error of opening a special node for I/O (`special_open_error`).
    pub fn into_file(self) -> Result<File> {
        match self {
            Opened::File(f) => Ok(f),
            Opened::Special(_, m) => Err(special_open_error(m.mode)),
        }
    }
}

/// Why the API cannot open a FIFO, device or socket for reading and writing: a socket is
/// ENXIO, as Linux answers an open of one; a FIFO or a device EOPNOTSUPP, since the pool
/// holds no pipe and no driver (see `Opened::Special`).
pub(crate) fn special_open_error(mode: u32) -> Error {
    if mode & S_IFMT == S_IFSOCK {
        Error::with_msg(libc::ENXIO, "a socket cannot be opened")
    } else {
        Error::with_msg(
            libc::EOPNOTSUPP,
            "a FIFO or device of the pool cannot be opened through the EngramFS API",
        )
    }
}

impl Fs {
    pub fn open_file(&self, path: impl AsRef<[u8]>, opts: &OpenOptions) -> Result<File> {
        self.open_at(None, path.as_ref(), opts)
    }

    pub fn open_at(&self, dir: Option<&File>, path: &[u8], opts: &OpenOptions) -> Result<File> {
        self.open_from(base(dir), path, opts)
    }

    /// `open_at` with the directory given by its handle (a front end that keeps its own
    /// table of open directories, as the shim does); the walk checks that it is still a
    /// live directory.
    pub fn open_from(&self, dir: Option<Handle>, path: &[u8], opts: &OpenOptions) -> Result<File> {
        self.open_node_from(dir, path, opts)?.into_file()
    }

    /// `open_file`, handing a FIFO, device or socket back instead of failing on it.
    pub fn open_node(&self, path: impl AsRef<[u8]>, opts: &OpenOptions) -> Result<Opened> {
        self.open_node_from(None, path.as_ref(), opts)
    }

    /// `open_from`, handing a FIFO, device or socket back instead of failing on it.
    pub fn open_node_from(
        &self,
        dir: Option<Handle>,
        path: &[u8],
        opts: &OpenOptions,
    ) -> Result<Opened> {
        // Linux opens the inode its walk found even if a rename replaces the name meanwhile;
        // here that inode may be freed before the open reaches the server: look again.
        self.retry_stale(|| self.open_once(dir, path, opts))
    }

    fn open_once(&self, dir: Option<Handle>, path: &[u8], opts: &OpenOptions) -> Result<Opened> {
        let mut opts = *opts;
        if !opts.read && !opts.write {
            opts.read = true;
        }
        let (h, d, created) = if opts.create {
            let p = self.resolve_parent(dir, path)?;
            let Some(name) = p.name else {
                return Err(if opts.excl {
                    Error::EEXIST
                } else {
                    Error::EISDIR
                });
            };
            if p.trailing_slash {
                return Err(Error::EISDIR);
            }
            // With O_EXCL the server refuses a name that exists (EEXIST, whatever it names:
            // O_EXCL follows no symlink), so there is nothing to look up first.
            let found = if opts.excl {
                None
            } else {
                self.lookup_child(p.dir.ino, &name)?
            };
            match found {
                Some((_, d)) if d.is_symlink() => {
                    if opts.nofollow {
                        return Err(symlink_not_followed(&opts));
                    }
                    self.open_symlink_target(dir, path, &opts)?
                }
                Some((_, d)) if d.is_dir() => return Err(Error::EISDIR),
                Some((h, d)) => (h, d, false),
                None => {
                    let open = Some(opts.write);
                    let (h, c) = self.call_create(p.dir, &name, opts.mode, opts.excl, open)?;
                    if c {
                        // A new empty regular file: no directory, nothing to truncate, no
                        // permission to check, so its inode need not be read.
                        // `File::truncate_opened` must not truncate it either (Linux
                        // truncates only a file that was there: a truncation would clear
                        // set-id bits, want write permission and change mtime and ctime).
                        let opts = OpenOptions {
                            truncate: false,
                            ..opts
                        };
                        if opts.directory {
                            drop(File::opened(self.clone(), h, opts));
                            return Err(Error::ENOTDIR);
                        }
                        return Ok(Opened::File(File::opened(self.clone(), h, opts)));
                    }
                    // The name was there after all. What it names may be gone again (ESTALE:
                    // look again), or be a directory or a symlink by now.
                    let d = self.read_inode(h.ino);
                    if d.is_free() || d.generation != h.generation {
                        return Err(Error::ESTALE);
                    }
                    if d.is_dir() {
                        return Err(Error::EISDIR);
                    }
                    if d.is_symlink() {
                        if opts.nofollow {
                            return Err(symlink_not_followed(&opts));
                        }
                        // The name went with the request: resolve it again (a rare race).
                        self.open_symlink_target(dir, path, &opts)?
                    } else {
                        (h, d, false)
                    }
                }
            }
        } else {
            let (h, d) = self.resolve(dir, path, !opts.nofollow)?;
            // O_PATH|O_NOFOLLOW opens a final symlink as itself (O_DIRECTORY: ENOTDIR below).
            if d.is_symlink() && !opts.path {
                return Err(symlink_not_followed(&opts));
            }
            (h, d, false)
        };
        if opts.directory && !d.is_dir() {
            return Err(Error::ENOTDIR);
        }
        if d.is_dir() && (opts.write || opts.truncate) {
            return Err(Error::EISDIR);
        }
        if created {
            // Made by this open (through a symlink): its creator may use it whatever mode it
            // gave it, and there is nothing to truncate (nor for `File::truncate_opened`).
            let opts = OpenOptions {
                truncate: false,
                ..opts
            };
            return File::new(self.clone(), h, opts).map(Opened::File);
        }
        // O_TRUNC asks for write permission also where it truncates nothing, as on Linux.
        // O_PATH asks for none: only the search permission of the walk.
        if !opts.path {
            let want =
                if opts.read { R } else { 0 } | if opts.write || opts.truncate { W } else { 0 };
            perm::check(self.creds(), &d, want)?;
            if opts.noatime && !self.creds().owns(&d) {
                return Err(Error::EPERM);
            }
        }
        if d.is_special() {
            return Ok(Opened::Special(h, Metadata::from_inode(h.ino, &d)));
        }
        let file = File::new(self.clone(), h, opts)?;
        // Linux truncates an existing regular file on O_TRUNC even when it is empty or
        // opened read-only (write permission checked above): the size may stay, mtime and
        // ctime change. Once open, the inode cannot be freed: the file truncated is the
        // file opened (on an error, dropping it closes it).
        if opts.truncate && !opts.truncate_later && d.is_reg() {
            self.truncate_handle(h, 0, true)?;
        }
        Ok(Opened::File(file))
    }

    /// O_CREAT through a symlink: follow the chain of links to a final name, open it if it
    /// exists (EISDIR for a directory), else create it, as Linux does; whether it made it.
    /// A link whose target ends with a slash names a directory: EISDIR. The path is walked
    /// again with its links counted: Linux's limit of 40 covers the whole resolution, the
    /// links in the path, the chain and the links inside the chain's targets.
    fn open_symlink_target(
        &self,
        base: Option<Handle>,
        path: &[u8],
        opts: &OpenOptions,
    ) -> Result<(Handle, InodeData, bool)> {
        let mut links = 0;
        let p = self.resolve_parent_counting(base, path, &mut links)?;
        let name = p.name.ok_or(Error::EISDIR)?;
        let (mut dir, mut name) = (p.dir, name.into_owned());
        loop {
            match self.lookup_child(dir.ino, &name)? {
                Some((_, d)) if d.is_dir() => return Err(Error::EISDIR),
                Some((h, d)) if d.is_symlink() => {
                    links += 1;
                    if links > super::path::MAX_SYMLINKS {
                        return Err(Error::ELOOP);
                    }
                    let target = self.read_link_target(h)?;
                    let p = self.resolve_parent_counting(Some(dir), &target, &mut links)?;
                    let Some(n) = p.name else {
                        return Err(Error::EISDIR);
                    };
                    if p.trailing_slash {
                        // Linux refuses O_CREAT of "name/" before looking the name up.
                        return Err(Error::EISDIR);
                    }
                    (dir, name) = (p.dir, n.into_owned());
                }
                Some((h, d)) => return Ok((h, d, false)),
                None => {
                    let (h, created) = self.call_create(dir, &name, opts.mode, false, None)?;
                    let d = self.read_inode(h.ino);
                    if d.is_free() || d.generation != h.generation {
                        return Err(Error::ESTALE);
                    }
                    if created || !(d.is_dir() || d.is_symlink()) {
                        return Ok((h, d, created));
                    }
                    // The name became a directory or a symlink since the lookup: look again
                    // (EISDIR, or follow the link).
                }
            }
        }
    }
}

/// The error of an open that names a symlink it may not follow (O_NOFOLLOW): ELOOP, or
/// ENOTDIR when O_DIRECTORY asked for a directory.
fn symlink_not_followed(opts: &OpenOptions) -> Error {
    if opts.directory {
        Error::ENOTDIR
    } else {
        Error::ELOOP
    }
}

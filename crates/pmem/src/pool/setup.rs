//! Making and opening a pool (a file, a block or DAX device, anonymous memory, an image),
//! its locks, page protections and descriptor, and faulting ranges in.

use super::*;

/// `fd` moved to a number at or above `min` (close-on-exec; a lock on its open file
/// description stays), or unchanged if it is there already or no such number is free. For
/// descriptors a library keeps in a program that takes the small numbers for itself.
pub fn fd_at_or_above(fd: std::os::fd::OwnedFd, min: std::os::fd::RawFd) -> std::os::fd::OwnedFd {
    use std::os::fd::FromRawFd;
    if fd.as_raw_fd() >= min {
        return fd;
    }
    // SAFETY: duplicating a descriptor we own; the original closes when `fd` drops.
    let high = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, min) };
    if high < 0 {
        return fd;
    }
    // SAFETY: `high` is a fresh duplicate that nothing else owns.
    unsafe { std::os::fd::OwnedFd::from_raw_fd(high) }
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

fn with_path(e: io::Error, what: &str, path: &Path) -> io::Error {
    io::Error::new(e.kind(), format!("{what} {}: {e}", path.display()))
}

fn flock(file: &File, op: libc::c_int) -> io::Result<()> {
    // SAFETY: plain system call on a descriptor owned by `file`.
    if unsafe { libc::flock(file.as_raw_fd(), op) } == 0 {
        return Ok(());
    }
    let e = io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
        Err(io::Error::new(
            io::ErrorKind::WouldBlock,
            "pool is in use by another process",
        ))
    } else {
        Err(e)
    }
}

/// A lock of `kind` on byte 0 of the pool file, the byte a daemon client's lock covers.
fn first_byte(kind: libc::c_int) -> libc::flock {
    // SAFETY: a zeroed flock is a valid value for the fields not set below (l_pid must be 0
    // for an open-file-description lock).
    let mut l: libc::flock = unsafe { std::mem::zeroed() };
    l.l_type = kind as libc::c_short;
    l.l_whence = libc::SEEK_SET as libc::c_short;
    l.l_start = 0;
    l.l_len = 1;
    l
}

/// Set (`kind`) or clear (F_UNLCK) the open-file-description lock on byte 0 of the pool
/// file that marks a daemon client's mapping (`Pool::hold_as_client`).
fn client_lock(file: &File, kind: libc::c_int, wait: bool) -> io::Result<()> {
    let mut l = first_byte(kind);
    let cmd = if wait {
        libc::F_OFD_SETLKW
    } else {
        libc::F_OFD_SETLK
    };
    loop {
        // SAFETY: fcntl on a descriptor owned by `file` with a local struct flock.
        if unsafe { libc::fcntl(file.as_raw_fd(), cmd, &mut l) } == 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        // A signal during the wait: wait again (the exclusive check is momentary).
        if e.raw_os_error() != Some(libc::EINTR) {
            return Err(e);
        }
    }
}

/// Whether an open file description other than `file`'s holds a lock on byte 0 of the file
/// that a write lock there would conflict with: a client's (`client_lock`).
fn client_lock_held(file: &File) -> io::Result<bool> {
    let mut l = first_byte(libc::F_WRLCK);
    // SAFETY: fcntl on a descriptor owned by `file` with a local struct flock, which it
    // overwrites with the conflicting lock (or F_UNLCK for none).
    if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_GETLK, &mut l) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(l.l_type != libc::F_UNLCK as libc::c_short)
}

/// An exclusive `flock` on `file`, taken only while no daemon client maps it
/// (`Pool::try_lock_exclusive`).
fn lock_exclusive(file: &File) -> io::Result<()> {
    flock(file, libc::LOCK_EX | libc::LOCK_NB)?;
    match client_lock(file, libc::F_WRLCK, false) {
        Ok(()) => client_lock(file, libc::F_UNLCK, false),
        Err(e) => {
            let _ = flock(file, libc::LOCK_UN);
            Err(
                if matches!(e.raw_os_error(), Some(libc::EAGAIN | libc::EACCES)) {
                    io::Error::new(
                        io::ErrorKind::ResourceBusy,
                        "pool is still mapped by a client of a daemon that has stopped; end those \
                     processes first (`fuser -v POOL` lists them)",
                    )
                } else {
                    e
                },
            )
        }
    }
}

impl Pool {
    fn new(
        map: Mapping,
        len: u64,
        (media, backing): (Media, Backing),
        path: Option<PathBuf>,
        file: Option<File>,
    ) -> Pool {
        Pool {
            map,
            len,
            media,
            backing,
            kind: flush::flush_kind(),
            path,
            file,
            dirty: DirtyPages::default(),
            rec: Recorder::default(),
        }
    }

    /// Create (or truncate and resize) the file at `path` to `size` bytes and
    /// map it shared. `size` must be a non-zero multiple of 4096. Space is
    /// reserved up front where the file system supports it. Refuses to
    /// truncate a pool file another process holds a lock on.
    ///
    /// If `path` is a block device or a device-DAX device, it is used in place:
    /// `size` must not exceed the device, nothing is resized, and the old
    /// content is left as it is (the caller writes what it needs).
    pub fn create(path: &Path, size: u64) -> io::Result<Pool> {
        let len = map::check_pool_size(size).map_err(invalid)?;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(|e| with_path(e, "cannot create pool file", path))?;
        let meta = file
            .metadata()
            .map_err(|e| with_path(e, "cannot stat pool file", path))?;
        let (backing, device_size) = device::probe(&file, &meta, path)?;
        lock_exclusive(&file).map_err(|e| with_path(e, "cannot create pool file", path))?;
        let sized = if !backing.is_device() {
            // The space is taken before the old content goes, without moving the file's end
            // (ext4 keeps the blocks and the size of a fallocate that ran out of space): a
            // size the file system cannot hold leaves an existing pool as it was.
            map::reserve_space(&file, size)
                .and_then(|()| file.set_len(0))
                .and_then(|()| map::allocate(&file, size))
        } else if size > device_size {
            Err(invalid(format!(
                "{backing} {} holds {device_size} bytes, less than the {size} asked for",
                path.display()
            )))
        } else {
            Ok(())
        };
        flock(&file, libc::LOCK_UN)?;
        sized.map_err(|e| with_path(e, "cannot size pool", path))?;
        let (map, media) = map::map_file(&file, len, backing)
            .map_err(|e| with_path(e, "cannot map pool file", path))?;
        Ok(Pool::new(
            map,
            size,
            (media, backing),
            Some(path.to_path_buf()),
            Some(file),
        ))
    }

    /// Map an existing pool read/write: a file, whose length is the pool size,
    /// or a block or device-DAX device, mapped whole (rounded down to pages).
    /// The size must be a non-zero multiple of 4096.
    pub fn open(path: &Path) -> io::Result<Pool> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(|e| with_path(e, "cannot open pool file", path))?;
        let meta = file
            .metadata()
            .map_err(|e| with_path(e, "cannot stat pool file", path))?;
        let (backing, size) = device::probe(&file, &meta, path)?;
        let len = map::check_pool_size(size)
            .map_err(|m| invalid(format!("pool {} {}: {m}", backing, path.display())))?;
        let (map, media) = map::map_file(&file, len, backing)
            .map_err(|e| with_path(e, "cannot map pool file", path))?;
        Ok(Pool::new(
            map,
            size,
            (media, backing),
            Some(path.to_path_buf()),
            Some(file),
        ))
    }

    /// Zeroed private anonymous memory of `size` (non-zero) bytes. Flushes and
    /// fences are the real instructions.
    pub fn anonymous(size: u64) -> io::Result<Pool> {
        let len = usize::try_from(size)
            .map_err(|_| invalid(format!("anonymous pool size {size} is too large")))?;
        let map = map::map_anonymous(len)?;
        Ok(Pool::new(
            map,
            size,
            (Media::Memory, Backing::Memory),
            None,
            None,
        ))
    }

    /// Anonymous memory initialised with a copy of `image` (non-empty).
    pub fn from_image(image: &[u8]) -> io::Result<Pool> {
        let pool = Pool::anonymous(image.len() as u64)?;
        pool.write(0, image);
        Ok(pool)
    }

    pub fn len(&self) -> u64 {
        self.len
    }

    /// Move the kept descriptor of the pool's file to a number at or above `min`
    /// (`fd_at_or_above`).
    pub fn keep_descriptor_at_or_above(&mut self, min: std::os::fd::RawFd) {
        if let Some(file) = self.file.take() {
            self.file = Some(File::from(fd_at_or_above(file.into(), min)));
        }
    }

    /// The descriptor of the pool's file, kept open (it carries the pool's lock), if any.
    pub fn descriptor(&self) -> Option<std::os::fd::RawFd> {
        self.file.as_ref().map(AsRawFd::as_raw_fd)
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn media(&self) -> Media {
        self.media
    }

    /// What the pool is mapped from (a file, a block or DAX device, memory).
    pub fn backing(&self) -> Backing {
        self.backing
    }

    /// The flush instruction this pool uses.
    pub fn flush_kind(&self) -> FlushKind {
        self.kind
    }

    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    pub fn as_ptr(&self) -> *mut u8 {
        self.map.ptr()
    }

    /// The device and inode of the backing file (None for anonymous memory).
    pub fn file_identity(&self) -> Option<(u64, u64)> {
        use std::os::unix::fs::MetadataExt;
        let m = self.file.as_ref()?.metadata().ok()?;
        Some((m.dev(), m.ino()))
    }

    /// Take an exclusive `flock` on the backing file without blocking. Fails
    /// with `WouldBlock` ("pool is in use by another process") if another open
    /// of the file holds a lock. Always succeeds for anonymous pools.
    ///
    /// It also fails, with `ResourceBusy`, while a process that was a client of an earlier
    /// holder (a daemon that has stopped or died) still maps the pool (`hold_as_client`):
    /// such a process can still store into the data pages it had reserved, which the new
    /// holder would hand out to other files.
    pub fn try_lock_exclusive(&self) -> io::Result<()> {
        self.file.as_ref().map_or(Ok(()), lock_exclusive)
    }

    /// Mark this mapping as a daemon client's for as long as its descriptor stays open (in
    /// this process and any child that inherits it): a read lock on the file's first byte,
    /// an open-file-description lock, which `flock` does not see. `try_lock_exclusive`
    /// fails while any is held. Waits out an exclusive opener's momentary check.
    pub fn hold_as_client(&self) -> io::Result<()> {
        self.file
            .as_ref()
            .map_or(Ok(()), |f| client_lock(f, libc::F_RDLCK, true))
    }

    /// Whether a process still maps the pool as a daemon client (`hold_as_client`) through
    /// an open file description other than this one: a client, or a forked child of one,
    /// which inherits its parent's description and so the lock, even before it has spoken
    /// to the daemon itself. Always false for anonymous pools.
    pub fn held_by_client(&self) -> io::Result<bool> {
        self.file.as_ref().map_or(Ok(false), client_lock_held)
    }

    /// Take a shared `flock` on the backing file without blocking.
    pub fn try_lock_shared(&self) -> io::Result<()> {
        self.file
            .as_ref()
            .map_or(Ok(()), |f| flock(f, libc::LOCK_SH | libc::LOCK_NB))
    }

    /// Release a lock taken with `try_lock_*` (also released on drop).
    pub fn unlock(&self) -> io::Result<()> {
        self.file
            .as_ref()
            .map_or(Ok(()), |f| flock(f, libc::LOCK_UN))
    }

    fn protect(&self, off: u64, len: u64, prot: libc::c_int) -> io::Result<()> {
        let end = off
            .checked_add(len)
            .filter(|&e| e <= self.len.next_multiple_of(PAGE));
        if !off.is_multiple_of(PAGE) || !len.is_multiple_of(PAGE) || end.is_none() {
            return Err(invalid(format!(
                "cannot protect {len} bytes at offset {off}: range must be page aligned and inside the pool of {} bytes",
                self.len
            )));
        }
        if len == 0 {
            return Ok(());
        }
        map::protect(self.at(off), len as usize, prot)
    }

    /// Make a page-aligned range read-only (stores to it then fault).
    pub fn protect_read_only(&self, off: u64, len: u64) -> io::Result<()> {
        self.protect(off, len, libc::PROT_READ)
    }

    /// Make a page-aligned range writable again.
    pub fn protect_read_write(&self, off: u64, len: u64) -> io::Result<()> {
        self.protect(off, len, libc::PROT_READ | libc::PROT_WRITE)
    }

    /// Fault a page-aligned range in writable ahead of stores to it (data pages a writer was
    /// just given): one system call instead of a page fault per page on first touch. Only
    /// where stores reach the media directly (DAX, tmpfs): on page-cache media it would mark
    /// the pages dirty and make msync write them back for nothing.
    pub fn prefault(&self, off: u64, len: u64) {
        let inside = off
            .checked_add(len)
            .is_some_and(|e| e <= self.len.next_multiple_of(PAGE));
        if matches!(self.media(), Media::Dax | Media::Tmpfs)
            && off.is_multiple_of(PAGE)
            && len.is_multiple_of(PAGE)
            && len > 0
            && inside
        {
            map::populate_write(self.at(off), len as usize);
        }
    }
}

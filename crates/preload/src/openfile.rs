//! An open file description of ours: where its state lives (private memory until another
//! process could inherit it, then a memfd page: `desc`), the EngramFS file it reads and
//! writes through, and the lock file that carries its record locks. The descriptor table
//! (`table`) maps descriptor numbers to these.

use crate::desc::{self, DescState};
use crate::real;
use crate::session;
use crate::util::{Res, en};
use engram_core::{File, Handle, OpenOptions, ReadDir};
use libc::c_int;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicPtr, Ordering};
use std::sync::{Mutex, RwLock};

pub(crate) struct Bound {
    pub(crate) epoch: u64,
    pub(crate) file: File,
}

/// An open file description of ours.
pub struct OpenFile {
    /// The memfd page holding the state once published; null while it is `private`.
    pub(crate) desc: AtomicPtr<DescState>,
    /// The state until publication (kept until drop: a thread may still be using it).
    pub(crate) private: DescState,
    pub(crate) published: AtomicBool,
    pub(crate) handle: Handle,
    pub(crate) path: Vec<u8>,
    pub(crate) is_dir: bool,
    pub(crate) bound: RwLock<Option<Bound>>,
    /// Serialises offset updates (read/write/lseek) of this description in this process.
    pub pos: Mutex<()>,
    pub(crate) lock_fd: AtomicI32,
    /// Directory iteration state: (generation, iterator).
    pub dir: Mutex<Option<(u64, ReadDir)>>,
}

/// The offset held still (`OpenFile::lock_offset`); the shared lock is released first.
pub struct OffsetGuard<'a> {
    _shared: Option<crate::poslock::Held<'a>>,
    _local: std::sync::MutexGuard<'a, ()>,
}

// SAFETY: the state is accessed through atomics (and immutable fields written before
// publication); everything else is Sync.
unsafe impl Send for OpenFile {}
// SAFETY: as above.
unsafe impl Sync for OpenFile {}

/// Drop `v` if it was made in this process, forget it if it belongs to a forked-from parent.
pub fn release<T>(epoch: u64, v: T) {
    if epoch == session::generation() {
        drop(v);
    } else {
        std::mem::forget(v);
    }
}

impl OpenFile {
    fn desc(&self) -> &DescState {
        let p = self.desc.load(Ordering::Acquire);
        if p.is_null() {
            return &self.private;
        }
        // SAFETY: the page stays mapped until this object is dropped.
        unsafe { &*p }
    }

    pub(crate) fn is_published(&self) -> bool {
        self.published.load(Ordering::Acquire)
    }

    /// Move the state into a memfd page and make every descriptor in `fds` a duplicate of
    /// the memfd's stand-in (`desc::publish`). On failure the description stays private
    /// (usable in this process).
    pub(crate) fn publish(&self, fds: &[c_int]) -> Res<()> {
        if self.is_published() {
            return Ok(());
        }
        // A read or write in flight in another thread holds the offset with this process's
        // mutex alone: it finishes (and stores its offset) before the state is copied and
        // other processes can share it. (Callers hold the table's write lock; nothing takes
        // the table's lock under this mutex.)
        let _pos = self.pos.lock().unwrap_or_else(|e| e.into_inner());
        let (memfd, page) = desc::publish(self.desc(), &self.path)?;
        for &fd in fds {
            desc::replace(memfd, fd);
        }
        // SAFETY: closing the stand-in; the descriptors replaced above keep it alive.
        unsafe { real::close(memfd) };
        self.desc.store(page.as_ptr(), Ordering::Release);
        self.published.store(true, Ordering::Release);
        Ok(())
    }

    pub fn handle(&self) -> Handle {
        self.handle
    }

    /// The canonical pool path the file was opened by.
    pub fn path(&self) -> &[u8] {
        &self.path
    }

    pub fn is_dir(&self) -> bool {
        self.is_dir
    }

    pub fn flags(&self) -> c_int {
        self.desc().flags.load(Ordering::Acquire) as c_int
    }

    /// Opened with O_PATH: good for fstat, fchdir, dup, fcntl and as the directory of `*at`
    /// calls; anything that reads, writes or changes the file through it is EBADF, as on
    /// Linux.
    pub fn is_path(&self) -> bool {
        self.flags() & libc::O_PATH != 0
    }

    /// EBADF for a descriptor opened with O_PATH (see `is_path`).
    pub fn not_path(&self) -> crate::util::Res<()> {
        if self.is_path() {
            Err(libc::EBADF)
        } else {
            Ok(())
        }
    }

    pub fn readable(&self) -> bool {
        let a = self.flags() & libc::O_ACCMODE;
        self.flags() & libc::O_PATH == 0 && (a == libc::O_RDONLY || a == libc::O_RDWR)
    }

    pub fn writable(&self) -> bool {
        let a = self.flags() & libc::O_ACCMODE;
        self.flags() & libc::O_PATH == 0 && (a == libc::O_WRONLY || a == libc::O_RDWR)
    }

    pub fn offset(&self) -> u64 {
        self.desc().offset.load(Ordering::Acquire)
    }

    pub fn set_offset(&self, off: u64) {
        self.desc().offset.store(off, Ordering::Release);
    }

    /// Hold the description's offset still for a read, write or seek: against the other
    /// threads of this process and, once published, against the other processes sharing
    /// it (Linux's `f_pos_lock`).
    pub fn lock_offset(&self) -> OffsetGuard<'_> {
        let local = self.pos.lock().unwrap_or_else(|e| e.into_inner());
        let shared = self.is_published().then(|| self.desc().pos_lock.lock());
        OffsetGuard {
            _shared: shared,
            _local: local,
        }
    }

    fn options(flags: c_int) -> OpenOptions {
        let acc = flags & libc::O_ACCMODE;
        OpenOptions::new()
            .read(acc == libc::O_RDONLY || acc == libc::O_RDWR)
            .write(acc == libc::O_WRONLY || acc == libc::O_RDWR)
            .append(flags & libc::O_APPEND != 0)
    }

    /// Run `f` with this description's EngramFS file, opening it again by handle if this
    /// process has none yet (inherited across exec) or its own is the parent's (fork).
    pub fn with_file<R>(&self, f: impl FnOnce(&File) -> Res<R>) -> Res<R> {
        let epoch = session::generation();
        {
            let g = self.bound.read().unwrap_or_else(|e| e.into_inner());
            if let Some(b) = g.as_ref()
                && b.epoch == epoch
            {
                return f(&b.file);
            }
        }
        let mut g = self.bound.write().unwrap_or_else(|e| e.into_inner());
        if g.as_ref().is_none_or(|b| b.epoch != epoch) {
            if let Some(old) = g.take() {
                release(old.epoch, old);
            }
            let fs = session::fs()?;
            let file = fs
                .open_handle(self.handle, &Self::options(self.flags()))
                .map_err(en)?;
            *g = Some(Bound { epoch, file });
        }
        f(&g.as_ref().expect("bound above").file)
    }

    /// Whether the caller owns the file or is root (Linux's `inode_owner_or_capable`).
    pub fn owned_by_caller(&self) -> Res<bool> {
        let fs = session::fs()?;
        let owner = fs.stat_handle(self.handle).map_err(en)?.uid;
        Ok(fs.creds().is_root() || fs.creds().uid == owner)
    }

    /// F_SETFL: the status flags change; O_APPEND needs a file opened for appending.
    pub fn set_flags(&self, flags: c_int) -> Res<()> {
        let changeable =
            libc::O_APPEND | libc::O_NONBLOCK | libc::O_DIRECT | libc::O_NOATIME | libc::O_ASYNC;
        let old = self.flags();
        let new = (old & !changeable) | (flags & changeable);
        // As Linux: O_NOATIME newly asked for by someone who neither owns the file nor is
        // root.
        if new & !old & libc::O_NOATIME != 0 && !self.owned_by_caller()? {
            return Err(libc::EPERM);
        }
        if (old ^ new) & libc::O_APPEND != 0 && !self.is_dir {
            let fs = session::fs()?;
            let file = fs
                .open_handle(self.handle, &Self::options(new))
                .map_err(en)?;
            let mut g = self.bound.write().unwrap_or_else(|e| e.into_inner());
            if let Some(old) = g.take() {
                release(old.epoch, old);
            }
            *g = Some(Bound {
                epoch: session::generation(),
                file,
            });
        }
        self.desc().flags.store(new as u32, Ordering::Release);
        Ok(())
    }

    /// The descriptor of the per-inode lock file that carries this description's record
    /// locks and flocks (opened on first use; POSIX and OFD semantics come from the kernel).
    pub fn lock_fd(&self) -> Res<c_int> {
        let fd = self.lock_fd.load(Ordering::Acquire);
        if fd >= 0 {
            return Ok(fd);
        }
        // Under the operation guard: fork waits, so no child starts with OPENING held.
        let _op = session::op();
        self.open_lock_fd(session::pool_id()?)
    }

    /// The lock file's descriptor, if this process has opened it.
    pub(crate) fn lock_fd_if_open(&self) -> Option<c_int> {
        let fd = self.lock_fd.load(Ordering::Acquire);
        (fd >= 0).then_some(fd)
    }

    /// Open the lock file's descriptor unless it is open (close-on-exec, at a high number).
    /// Called under the operation guard, or before fork with every operation finished.
    pub(crate) fn open_lock_fd(&self, pool: u64) -> Res<c_int> {
        // One opening at a time: a second descriptor of the lock file, opened by a racing
        // thread and closed again, would release every POSIX lock of the process on it; and
        // `lockfds::open` must see every descriptor of the file opened before.
        let _one = OPENING.lock().unwrap_or_else(|e| e.into_inner());
        let fd = self.lock_fd.load(Ordering::Acquire);
        if fd >= 0 {
            return Ok(fd);
        }
        let fd = crate::lockfds::open(&self.lock_file_name(pool), self.handle)?;
        self.lock_fd.store(fd, Ordering::Release);
        Ok(fd)
    }

    /// The lock file's path, NUL-terminated.
    fn lock_file_name(&self, pool: u64) -> String {
        format!(
            "{}\0",
            engram_core::sidefiles::lock_file(pool, self.handle.ino, self.handle.generation)
        )
    }

    /// Record the lock file's descriptor in the published page for the image this process
    /// is about to exec.
    /// `pool`: None in an image that has not connected yet, whose lock file descriptor can
    /// only be one it adopted: the page already names its pool.
    pub(crate) fn pass_lock_fd(&self, fd: c_int, pool: Option<u64>) {
        let d = self.desc();
        if let Some(pool) = pool {
            d.lock_pool.store(pool, Ordering::Release);
        }
        d.lock_fd.store(fd, Ordering::Release);
    }

    /// In an image that inherited this description: take over the lock file's descriptor
    /// the image before it passed, if that number is among the lock files this image
    /// inherited (`inherited`: descriptor and /proc/self/fd link) and names this file's (a
    /// number from another process sharing the page, or reused since, does not). Returns
    /// whether it did.
    pub(crate) fn adopt_lock_fd(&self, inherited: &[(c_int, Vec<u8>)]) -> bool {
        let d = self.desc();
        let fd = d.lock_fd.load(Ordering::Acquire);
        let name = self.lock_file_name(d.lock_pool.load(Ordering::Acquire));
        let want = &name.as_bytes()[..name.len() - 1];
        if !inherited
            .iter()
            .any(|(f, link)| *f == fd && link[..] == *want)
        {
            return false;
        }
        // SAFETY: marking the inherited descriptor close-on-exec again, as the shim keeps
        // its own (the next exec passes it on if the description survives it).
        unsafe { real::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC as libc::c_ulong) };
        crate::ownfds::own(fd);
        crate::lockfds::register(fd, self.handle);
        self.lock_fd.store(fd, Ordering::Release);
        true
    }
}

/// Held while a lock file's descriptor is opened (see `open_lock_fd`).
static OPENING: Mutex<()> = Mutex::new(());

impl Drop for OpenFile {
    fn drop(&mut self) {
        let b = self
            .bound
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(b) = b {
            release(b.epoch, b);
        }
        let d = self.dir.get_mut().unwrap_or_else(|e| e.into_inner()).take();
        if let Some((epoch, rd)) = d {
            release(epoch, rd);
        }
        let fd = self.lock_fd.load(Ordering::Acquire);
        if fd >= 0 {
            crate::lockfds::forget(fd);
            crate::ownfds::close(fd);
        }
        // SAFETY: unmapping our page; nothing uses it.
        unsafe {
            if self.is_published() {
                desc::unmap(self.desc.load(Ordering::Acquire));
            }
        }
    }
}

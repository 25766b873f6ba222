//! The descriptor table: which kernel descriptor numbers are EngramFS files.
//!
//! Every open file description of ours is a small memfd (the placeholder that reserves the
//! descriptor number) whose one mapped page holds what other processes need: the inode,
//! the status flags and the offset. `dup`, `fork` and shell redirection share it as they
//! share any description; an `exec`'d image finds its inherited ones by scanning
//! /proc/self/fd for memfds named "engram-fd".
//!
//! The table is an array of atomic pointers indexed by descriptor: telling whether a
//! descriptor is ours is one atomic load, with no lock.

use crate::real;
use crate::session;
use crate::util::{Res, SpinRw, en};
use engram_core::{File, Handle, OpenOptions, ReadDir};
use libc::{c_int, c_void};
use std::ptr::{NonNull, null_mut};
use std::sync::atomic::{AtomicI32, AtomicPtr, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

pub const MAX_FDS: usize = 1 << 16;
const DESC_BYTES: usize = 8192;
const DESC_MAGIC: u64 = u64::from_le_bytes(*b"ENGRFD01");
const MEMFD_NAME: &[u8] = b"engram-fd\0";
/// Flags that describe the open file (kept for F_GETFL), as opposed to how it was opened.
const KEEP_FLAGS: c_int = libc::O_ACCMODE
    | libc::O_APPEND
    | libc::O_NONBLOCK
    | libc::O_DIRECT
    | libc::O_NOATIME
    | libc::O_SYNC
    | libc::O_DSYNC
    | libc::O_PATH
    | libc::O_DIRECTORY
    | libc::O_ASYNC;

/// The part of an open file description that lives in shared memory.
#[repr(C)]
struct SharedDesc {
    magic: u64,
    ino: u64,
    generation: u32,
    flags: AtomicU32,
    offset: AtomicU64,
    is_dir: u32,
    path_len: u32,
    path: [u8; DESC_BYTES - 40],
}

struct Bound {
    epoch: u64,
    file: File,
}

/// An open file description of ours.
pub struct OpenFile {
    desc: NonNull<SharedDesc>,
    handle: Handle,
    path: Vec<u8>,
    is_dir: bool,
    bound: RwLock<Option<Bound>>,
    /// Serialises offset updates (read/write/lseek) of this description in this process.
    pub pos: Mutex<()>,
    lock_fd: AtomicI32,
    /// Directory iteration state: (generation, iterator).
    pub dir: Mutex<Option<(u64, ReadDir)>>,
}

// SAFETY: the shared page is accessed through atomics (and immutable fields written before
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
    fn desc(&self) -> &SharedDesc {
        // SAFETY: the page stays mapped until this object is dropped.
        unsafe { self.desc.as_ref() }
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

    /// F_SETFL: the status flags change; O_APPEND needs a file opened for appending.
    pub fn set_flags(&self, flags: c_int) -> Res<()> {
        let changeable =
            libc::O_APPEND | libc::O_NONBLOCK | libc::O_DIRECT | libc::O_NOATIME | libc::O_ASYNC;
        let old = self.flags();
        let new = (old & !changeable) | (flags & changeable);
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
        let name = format!(
            "/dev/shm/engram-lock-{:016x}-{}-{}\0",
            session::pool_id(),
            self.handle.ino,
            self.handle.generation
        );
        // SAFETY: opening a NUL-terminated path with the real open.
        let fd = unsafe {
            real::open(
                name.as_ptr() as *const libc::c_char,
                libc::O_RDWR | libc::O_CREAT | libc::O_CLOEXEC,
                0o666,
            )
        };
        if fd < 0 {
            return Err(crate::util::errno());
        }
        let fd = crate::util::move_high(fd);
        match self
            .lock_fd
            .compare_exchange(-1, fd, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => Ok(fd),
            Err(other) => {
                // SAFETY: closing the descriptor we just opened and did not publish.
                unsafe { real::close(fd) };
                Ok(other)
            }
        }
    }
}

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
        // SAFETY: unmapping our page and closing our lock descriptor; nothing uses either.
        unsafe {
            if fd >= 0 {
                real::close(fd);
            }
            real::munmap(self.desc.as_ptr() as *mut c_void, DESC_BYTES);
        }
    }
}

fn map_desc(fd: c_int) -> Res<NonNull<SharedDesc>> {
    // SAFETY: mapping DESC_BYTES of a memfd that is at least that long.
    let p = unsafe {
        real::mmap(
            null_mut(),
            DESC_BYTES,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(crate::util::errno());
    }
    NonNull::new(p as *mut SharedDesc).ok_or(libc::ENOMEM)
}

/// Make a new description for `file` and return the descriptor reserved for it.
pub fn create(file: File, path: &[u8], is_dir: bool, flags: c_int) -> Res<c_int> {
    let mfl = if flags & libc::O_CLOEXEC != 0 {
        libc::MFD_CLOEXEC
    } else {
        0
    };
    // SAFETY: memfd_create with a NUL-terminated name.
    let fd = unsafe { libc::memfd_create(MEMFD_NAME.as_ptr() as *const libc::c_char, mfl) };
    if fd < 0 {
        return Err(crate::util::errno());
    }
    let fail = |e: c_int| {
        // SAFETY: closing the memfd we created.
        unsafe { real::close(fd) };
        Err(e)
    };
    if fd as usize >= MAX_FDS {
        return fail(libc::EMFILE);
    }
    // SAFETY: sizing our own memfd.
    if unsafe { real::ftruncate(fd, DESC_BYTES as libc::off_t) } != 0 {
        return fail(crate::util::errno());
    }
    let desc = match map_desc(fd) {
        Ok(d) => d,
        Err(e) => return fail(e),
    };
    let handle = file.handle();
    // SAFETY: the fresh page is ours alone until the descriptor is published.
    unsafe {
        let d = desc.as_ptr();
        (*d).ino = handle.ino;
        (*d).generation = handle.generation;
        (*d).flags = AtomicU32::new((flags & KEEP_FLAGS) as u32);
        (*d).offset = AtomicU64::new(0);
        (*d).is_dir = is_dir as u32;
        let dst = &mut (*d).path;
        let n = path.len().min(dst.len());
        dst[..n].copy_from_slice(&path[..n]);
        (*d).path_len = n as u32;
        std::ptr::write_volatile(&mut (*d).magic, DESC_MAGIC);
    }
    let of = OpenFile {
        desc,
        handle,
        path: path.to_vec(),
        is_dir,
        bound: RwLock::new(Some(Bound {
            epoch: session::generation(),
            file,
        })),
        pos: Mutex::new(()),
        lock_fd: AtomicI32::new(-1),
        dir: Mutex::new(None),
    };
    install(fd, Arc::new(of));
    Ok(fd)
}

/// Take over a description inherited through exec (its file is opened on first use).
fn adopt(fd: c_int) -> Option<OpenFile> {
    let desc = map_desc(fd).ok()?;
    // SAFETY: the page is mapped; the fields were written before the magic by the creator.
    let d = unsafe { desc.as_ref() };
    if d.magic != DESC_MAGIC {
        // SAFETY: unmapping the page we just mapped.
        unsafe { real::munmap(desc.as_ptr() as *mut c_void, DESC_BYTES) };
        return None;
    }
    let n = (d.path_len as usize).min(d.path.len());
    Some(OpenFile {
        desc,
        handle: Handle {
            ino: d.ino,
            generation: d.generation,
        },
        path: d.path[..n].to_vec(),
        is_dir: d.is_dir != 0,
        bound: RwLock::new(None),
        pos: Mutex::new(()),
        lock_fd: AtomicI32::new(-1),
        dir: Mutex::new(None),
    })
}

/// At start-up: find the descriptions this image inherited.
pub fn adopt_inherited() {
    let mut found: Vec<(u64, Arc<OpenFile>)> = Vec::new();
    // SAFETY: listing /proc/self/fd with the real directory calls; every pointer comes from
    // libc and is used before closedir.
    unsafe {
        let d = real::opendir(c"/proc/self/fd".as_ptr());
        if d.is_null() {
            return;
        }
        let own = real::dirfd(d);
        loop {
            let e = real::readdir64(d);
            if e.is_null() {
                break;
            }
            let name = crate::util::cbytes((*e).d_name.as_ptr());
            let Some(fd) = std::str::from_utf8(name)
                .ok()
                .and_then(|s| s.parse::<c_int>().ok())
            else {
                continue;
            };
            if fd == own || fd as usize >= MAX_FDS {
                continue;
            }
            let link = format!("/proc/self/fd/{fd}\0");
            let mut buf = [0u8; 64];
            let n = real::readlink(
                link.as_ptr() as *const libc::c_char,
                buf.as_mut_ptr() as *mut libc::c_char,
                buf.len(),
            );
            if n <= 0 || !buf[..n as usize].starts_with(b"/memfd:engram-fd") {
                continue;
            }
            let mut st: libc::stat = std::mem::zeroed();
            if real::fstat(fd, &mut st) != 0 {
                continue;
            }
            if let Some((_, of)) = found.iter().find(|(ino, _)| *ino == st.st_ino) {
                install(fd, of.clone());
            } else if let Some(of) = adopt(fd) {
                let of = Arc::new(of);
                install(fd, of.clone());
                found.push((st.st_ino, of));
            }
        }
        real::closedir(d);
    }
}

// ------------------------------------------------------------------ the table

static SLOTS: [AtomicPtr<OpenFile>; MAX_FDS] = [const { AtomicPtr::new(null_mut()) }; MAX_FDS];
/// Excludes removal while a lookup takes its reference.
static LOCK: SpinRw = SpinRw::new();

/// Whether `fd` is one of ours: one atomic load, no lock.
#[inline]
pub fn is_ours(fd: c_int) -> bool {
    fd >= 0 && (fd as usize) < MAX_FDS && !SLOTS[fd as usize].load(Ordering::Acquire).is_null()
}

pub fn get(fd: c_int) -> Option<Arc<OpenFile>> {
    if !is_ours(fd) {
        return None;
    }
    let _g = LOCK.read();
    let p = SLOTS[fd as usize].load(Ordering::Acquire);
    if p.is_null() {
        return None;
    }
    // SAFETY: `p` came from Arc::into_raw and the slot's reference cannot be released while
    // we hold the read lock.
    unsafe {
        Arc::increment_strong_count(p);
        Some(Arc::from_raw(p))
    }
}

/// Make `fd` refer to `of`; whatever it referred to before is released.
pub fn install(fd: c_int, of: Arc<OpenFile>) {
    if fd < 0 || fd as usize >= MAX_FDS {
        return;
    }
    let old = {
        let _g = LOCK.write();
        SLOTS[fd as usize].swap(Arc::into_raw(of) as *mut OpenFile, Ordering::AcqRel)
    };
    if !old.is_null() {
        // SAFETY: the slot held this reference.
        drop(unsafe { Arc::from_raw(old) });
    }
}

/// Forget `fd` (before the kernel descriptor is closed or replaced).
pub fn remove(fd: c_int) -> Option<Arc<OpenFile>> {
    if !is_ours(fd) {
        return None;
    }
    let old = {
        let _g = LOCK.write();
        SLOTS[fd as usize].swap(null_mut(), Ordering::AcqRel)
    };
    // SAFETY: the slot held this reference.
    (!old.is_null()).then(|| unsafe { Arc::from_raw(old) })
}

/// Forget every descriptor in `first..=last`.
pub fn remove_range(first: u32, last: u32) {
    let end = (last as usize).min(MAX_FDS - 1);
    for fd in first as usize..=end {
        if let Some(of) = remove(fd as c_int) {
            drop(of);
        }
    }
}

pub fn clear_all() {
    remove_range(0, (MAX_FDS - 1) as u32);
}

pub fn lock_for_fork() {
    LOCK.write_lock();
}

pub fn unlock_after_fork() {
    LOCK.write_unlock();
}

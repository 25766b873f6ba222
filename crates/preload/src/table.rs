//! The descriptor table: which kernel descriptor numbers are EngramFS files.
//!
//! Each open file description of ours is an `OpenFile`; its descriptors are placeholders
//! that reserve the numbers, so that `dup`, `fork` and shell redirection share it as they
//! share any description. Where its state lives (private memory, or a memfd page once
//! another process could inherit it) is `desc`'s concern; an `exec`'d image finds its
//! inherited descriptions by scanning /proc/self/fd for memfds named "engram-fd".
//!
//! The table is an array of atomic pointers indexed by descriptor: telling whether a
//! descriptor is ours is one atomic load, with no lock.

use crate::desc::{self, DESC_MAGIC};
use crate::openfile::Bound;
pub use crate::openfile::{OpenFile, release};
use crate::real;
use crate::session;
use crate::util::{Res, SpinRw};
use engram_core::{File, Handle};
use libc::c_int;
use std::ptr::null_mut;
use std::sync::atomic::{
    AtomicBool, AtomicI32, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering,
};
use std::sync::{Arc, Mutex, RwLock};

pub const MAX_FDS: usize = 1 << 16;
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
    | libc::O_NOFOLLOW
    | libc::O_ASYNC;

/// Make a new description for `file` and return the descriptor reserved for it.
pub fn create(file: File, path: Vec<u8>, is_dir: bool, flags: c_int) -> Res<c_int> {
    let cloexec = flags & libc::O_CLOEXEC != 0;
    let fd = desc::placeholder(cloexec)?;
    if fd as usize >= MAX_FDS {
        // SAFETY: closing the placeholder we just made.
        unsafe { real::close(fd) };
        return Err(libc::EMFILE);
    }
    let handle = file.handle();
    let private = desc::private(
        handle.ino,
        handle.generation,
        (flags & KEEP_FLAGS) as u32,
        is_dir,
    );
    let of = OpenFile {
        desc: AtomicPtr::new(null_mut()),
        private,
        published: AtomicBool::new(false),
        handle,
        path,
        is_dir,
        bound: RwLock::new(Some(Bound {
            epoch: session::generation(),
            file,
        })),
        pos: Mutex::new(()),
        lock_fd: AtomicI32::new(-1),
        dir: Mutex::new(None),
    };
    if !cloexec && let Err(e) = of.publish(&[fd]) {
        // An exec'd image could not find it: fail the open rather than lose it there.
        // SAFETY: closing the placeholder we just made.
        unsafe { real::close(fd) };
        return Err(e);
    }
    install(fd, Arc::new(of));
    set_cloexec(fd, cloexec);
    Ok(fd)
}

/// Take over a description inherited through exec (its file is opened on first use).
fn adopt(fd: c_int) -> Option<OpenFile> {
    let desc = desc::map_inherited(fd).ok()?;
    // SAFETY: the page is mapped; the fields were written before the magic by the creator.
    let d = unsafe { desc.as_ref() };
    if d.magic != DESC_MAGIC {
        // SAFETY: unmapping the page we just mapped.
        unsafe { desc::unmap(desc.as_ptr()) };
        return None;
    }
    Some(OpenFile {
        desc: AtomicPtr::new(desc.as_ptr()),
        // Unused: the state is the inherited page.
        private: desc::private(d.ino, d.generation, 0, d.is_dir != 0),
        published: AtomicBool::new(true),
        handle: Handle {
            ino: d.ino,
            generation: d.generation,
        },
        path: desc::page_path(d).to_vec(),
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
    // Lock files' descriptors the image before passed on: those no description adopts
    // belong to descriptions this image did not get (a posix_spawn file action closed
    // them), and would hold their locks for as long as it and its children live.
    let mut lock_files: Vec<(c_int, Vec<u8>)> = Vec::new();
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
            let mut buf = [0u8; 128];
            let n = real::readlink(
                link.as_ptr() as *const libc::c_char,
                buf.as_mut_ptr() as *mut libc::c_char,
                buf.len(),
            );
            if n > 0 && engram_core::sidefiles::is_lock_file(&buf[..n as usize]) {
                lock_files.push((fd, buf[..n as usize].to_vec()));
                continue;
            }
            if n <= 0 || !buf[..n as usize].starts_with(desc::MEMFD_PREFIX) {
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
        let adopted: Vec<c_int> = found
            .iter()
            .filter(|(_, of)| of.adopt_lock_fd(&lock_files))
            .filter_map(|(_, of)| of.lock_fd_if_open())
            .collect();
        for (fd, _) in lock_files {
            if !adopted.contains(&fd) {
                real::close(fd);
            }
        }
    }
}

// ------------------------------------------------------------------ the table

static SLOTS: [AtomicPtr<OpenFile>; MAX_FDS] = [const { AtomicPtr::new(null_mut()) }; MAX_FDS];
/// One past the highest descriptor ever installed: scans of the table stop there.
static END: AtomicUsize = AtomicUsize::new(0);
/// Excludes removal while a lookup takes its reference.
static LOCK: SpinRw = SpinRw::new();

/// Whether no descriptor is ours (so an exec passes no description on).
pub fn is_empty() -> bool {
    let end = END.load(Ordering::Acquire).min(MAX_FDS);
    SLOTS[..end]
        .iter()
        .all(|slot| slot.load(Ordering::Acquire).is_null())
}

/// Whether `fd` is one of ours: one atomic load, no lock.
#[inline]
pub fn is_ours(fd: c_int) -> bool {
    fd >= 0 && (fd as usize) < MAX_FDS && !SLOTS[fd as usize].load(Ordering::Acquire).is_null()
}

/// Run `f` on the description `fd` refers to, under the table's read lock (so that it
/// cannot be released meanwhile), without taking a reference to it.
#[inline]
fn with_slot<R>(fd: c_int, f: impl FnOnce(*const OpenFile) -> R) -> Option<R> {
    if !is_ours(fd) {
        return None;
    }
    let _g = LOCK.read();
    let p = SLOTS[fd as usize].load(Ordering::Acquire);
    (!p.is_null()).then(|| f(p))
}

pub fn get(fd: c_int) -> Option<Arc<OpenFile>> {
    // SAFETY: `p` came from Arc::into_raw and the slot's reference cannot be released while
    // `with_slot` holds the read lock.
    with_slot(fd, |p| unsafe {
        Arc::increment_strong_count(p);
        Arc::from_raw(p)
    })
}

/// Per descriptor: the handle of its file and whether it is a directory, readable without
/// any lock or reference (`dir_of`: every relative path's walk). A sequence number, odd
/// while the slot changes (under `LOCK`'s write side), tells a reader that raced a change.
struct Known {
    seq: AtomicU32,
    ino: AtomicU64,
    /// The generation shifted left by one, the low bit set for a directory.
    gen_dir: AtomicU64,
}

static KNOWN: [Known; MAX_FDS] = [const {
    Known {
        seq: AtomicU32::new(0),
        ino: AtomicU64::new(0),
        gen_dir: AtomicU64::new(0),
    }
}; MAX_FDS];

/// Swap `fd`'s slot for `new` (the caller holds `LOCK`'s write side), keeping `KNOWN` in step.
fn swap_slot(fd: usize, new: *mut OpenFile) -> *mut OpenFile {
    let k = &KNOWN[fd];
    let s = k.seq.load(Ordering::Relaxed);
    k.seq.store(s.wrapping_add(1), Ordering::Relaxed);
    std::sync::atomic::fence(Ordering::Release);
    if !new.is_null() {
        // SAFETY: `new` is a live description the caller is installing.
        let (h, dir) = unsafe { ((*new).handle, (*new).is_dir) };
        k.ino.store(h.ino, Ordering::Relaxed);
        k.gen_dir.store(
            u64::from(h.generation) << 1 | u64::from(dir),
            Ordering::Relaxed,
        );
    }
    let old = SLOTS[fd].swap(new, Ordering::AcqRel);
    k.seq.store(s.wrapping_add(2), Ordering::Release);
    old
}

/// A handle as `dir_of` reads it, in two whole words: a route that carries it is copied
/// by the compiler in 8-byte moves, and a `Handle` (a u32 beside a u64) leaves 4 bytes of
/// padding that such a move loads across a narrower store, a store-forwarding stall on
/// every relative call (`perf annotate` of a stat loop: the largest cost in the shim).
#[derive(Clone, Copy, Debug)]
pub struct DirRef {
    ino: u64,
    generation: u64,
}

impl From<Handle> for DirRef {
    fn from(h: Handle) -> DirRef {
        DirRef {
            ino: h.ino,
            generation: u64::from(h.generation),
        }
    }
}

impl DirRef {
    pub fn handle(self) -> Handle {
        Handle {
            ino: self.ino,
            generation: self.generation as u32,
        }
    }
}

/// The handle of the file `fd` refers to and whether it is a directory, without a lock or
/// a reference to its description (a relative path's walk needs no more).
#[inline]
pub fn dir_of(fd: c_int) -> Option<(DirRef, bool)> {
    if !is_ours(fd) {
        return None;
    }
    let k = &KNOWN[fd as usize];
    loop {
        let s = k.seq.load(Ordering::Acquire);
        if s & 1 != 0 {
            std::hint::spin_loop();
            continue;
        }
        let live = !SLOTS[fd as usize].load(Ordering::Acquire).is_null();
        let ino = k.ino.load(Ordering::Relaxed);
        let gd = k.gen_dir.load(Ordering::Relaxed);
        std::sync::atomic::fence(Ordering::Acquire);
        if k.seq.load(Ordering::Relaxed) == s {
            let h = DirRef {
                ino,
                generation: gd >> 1,
            };
            return live.then_some((h, gd & 1 != 0));
        }
    }
}

/// The path the directory `fd` was opened by, joined with `rel`, in one allocation.
pub fn path_joined(fd: c_int, rel: &[u8]) -> Option<Vec<u8>> {
    with_slot(fd, |p| {
        // SAFETY: `with_slot` keeps the description alive.
        let dir = unsafe { &(*p).path };
        let mut v = Vec::with_capacity(dir.len() + 1 + rel.len());
        v.extend_from_slice(dir);
        if !v.ends_with(b"/") {
            v.push(b'/');
        }
        v.extend_from_slice(rel);
        v
    })
}

/// Per descriptor of ours: whether its placeholder is known to be close-on-exec (set by
/// `create` for an O_CLOEXEC open and by F_SETFD; a duplicate or an inherited descriptor
/// starts without), so that a close can keep it as a spare (`desc::keep_spare`).
static CLOEXEC: [AtomicU64; MAX_FDS / 64] = [const { AtomicU64::new(0) }; MAX_FDS / 64];

pub fn set_cloexec(fd: c_int, on: bool) {
    if fd < 0 || fd as usize >= MAX_FDS {
        return;
    }
    let (w, bit) = (fd as usize / 64, 1u64 << (fd as usize % 64));
    if on {
        CLOEXEC[w].fetch_or(bit, Ordering::AcqRel);
    } else {
        CLOEXEC[w].fetch_and(!bit, Ordering::AcqRel);
    }
}

/// Whether `fd`'s placeholder is close-on-exec, forgetting it.
fn take_cloexec(fd: c_int) -> bool {
    let (w, bit) = (fd as usize / 64, 1u64 << (fd as usize % 64));
    CLOEXEC[w].fetch_and(!bit, Ordering::AcqRel) & bit != 0
}

/// Close descriptor `fd` of ours: forget it, and keep its placeholder as a spare for the
/// next open when it is a close-on-exec /dev/null placeholder (else close it). Returns the
/// real close's result.
pub fn close(fd: c_int) -> c_int {
    let of = remove(fd);
    let spare = fd >= 0
        && (fd as usize) < MAX_FDS
        && take_cloexec(fd)
        && of.as_ref().is_some_and(|of| !of.is_published());
    drop(of);
    if spare && desc::keep_spare(fd) {
        return 0;
    }
    // SAFETY: closing the placeholder descriptor.
    unsafe { real::close(fd) }
}

/// Make `fd` refer to `of`; whatever it referred to before is released.
pub fn install(fd: c_int, of: Arc<OpenFile>) {
    if fd < 0 || fd as usize >= MAX_FDS {
        return;
    }
    set_cloexec(fd, false);
    END.fetch_max(fd as usize + 1, Ordering::AcqRel);
    let old = {
        let _g = LOCK.write();
        swap_slot(fd as usize, Arc::into_raw(of) as *mut OpenFile)
    };
    if !old.is_null() {
        // SAFETY: the slot held this reference.
        let old = unsafe { Arc::from_raw(old) };
        crate::reclocks::closed(&old);
    }
}

/// Forget `fd` (before the kernel descriptor is closed or replaced).
pub fn remove(fd: c_int) -> Option<Arc<OpenFile>> {
    if !is_ours(fd) {
        return None;
    }
    let old = {
        let _g = LOCK.write();
        swap_slot(fd as usize, null_mut())
    };
    // SAFETY: the slot held this reference.
    let old = (!old.is_null()).then(|| unsafe { Arc::from_raw(old) });
    if let Some(of) = &old {
        // Closing any descriptor of a file releases the process's POSIX locks on it.
        crate::reclocks::closed(of);
    }
    old
}

/// Forget every descriptor in `first..=last`. Only slots below `END` can be in use: a
/// scan of the whole table (`close_range(3, ~0)`, the table cleared at exit) touched
/// 512 KiB of untouched slots, a page fault per 4 KiB, about 0.3 ms per process.
pub fn remove_range(first: u32, last: u32) {
    let end = END.load(Ordering::Acquire).min(MAX_FDS);
    for fd in first as usize..end.min(last as usize + 1) {
        if let Some(of) = remove(fd as c_int) {
            drop(of);
        }
    }
}

pub fn clear_all() {
    remove_range(0, (MAX_FDS - 1) as u32);
}

/// The descriptors in the table that refer to `of` (the caller holds `LOCK`).
fn descriptors_of(of: *const OpenFile) -> Vec<c_int> {
    let end = END.load(Ordering::Acquire).min(MAX_FDS);
    (0..end)
        .filter(|&fd| std::ptr::eq(SLOTS[fd].load(Ordering::Acquire), of))
        .map(|fd| fd as c_int)
        .collect()
}

/// Publish the description of `fd` if it is private and `fd` would survive exec.
pub fn publish_if_inheritable(fd: c_int) {
    let Some(of) = get(fd) else { return };
    if of.is_published() || desc::is_cloexec(fd) {
        return;
    }
    let _g = LOCK.write();
    let _ = of.publish(&descriptors_of(Arc::as_ptr(&of)));
}

/// Publish every private description (before fork; the caller holds the table lock).
fn publish_all_locked() {
    let end = END.load(Ordering::Acquire).min(MAX_FDS);
    let mut private: Vec<(*const OpenFile, c_int)> = (0..end)
        .filter_map(|fd| {
            let p = SLOTS[fd].load(Ordering::Acquire);
            // SAFETY: the slot's reference keeps `p` alive while we hold the table lock.
            (!p.is_null() && !unsafe { &*p }.is_published()).then_some((p as *const _, fd as c_int))
        })
        .collect();
    private.sort_unstable();
    for group in private.chunk_by(|a, b| a.0 == b.0) {
        let fds: Vec<c_int> = group.iter().map(|&(_, fd)| fd).collect();
        // SAFETY: as above.
        let _ = unsafe { &*group[0].0 }.publish(&fds);
    }
}

/// Publish every private description (before posix_spawn and the like).
pub fn publish_all() {
    let _g = LOCK.write();
    publish_all_locked();
}

pub fn lock_for_fork() {
    LOCK.write_lock();
    publish_all_locked();
    open_lock_fds_locked();
}

/// Bind every description to this process's connection, opening it again by handle where
/// it has not been yet (inherited across fork): before a change of credentials, so that
/// each keeps the access it was opened with (`creds.rs`).
pub fn bind_all() {
    let _g = LOCK.read();
    each_description(|of| {
        let _ = of.with_file(|_| Ok(()));
    });
}

/// Every description in the table, once each (the caller holds `LOCK`).
fn each_description(mut f: impl FnMut(&OpenFile)) {
    let end = END.load(Ordering::Acquire).min(MAX_FDS);
    let mut all: Vec<*const OpenFile> = SLOTS[..end]
        .iter()
        .map(|slot| slot.load(Ordering::Acquire) as *const OpenFile)
        .filter(|p| !p.is_null())
        .collect();
    all.sort_unstable();
    all.dedup();
    for p in all {
        // SAFETY: the slot's reference keeps `p` alive while the caller holds the lock.
        f(unsafe { &*p });
    }
}

/// Before fork (and posix_spawn), through a daemon: open the lock file of every file
/// description that has none yet, so that parent and child share it as they share the
/// description. A flock is the description's: with a lock file opened by each process
/// after the fork, `exec 9>f; flock -x 9` (the lock taken by a child, which exits) would
/// hold nothing, and the parent's and child's flocks would conflict. (A pool opened in the
/// process is not shared with a child: nothing to do.)
fn open_lock_fds_locked() {
    let Some((pool, true)) = session::pool_id_now() else {
        return;
    };
    // Not for directories (a walk such as `find -exec` holds many, each fork would leave a
    // lock file per directory in /dev/shm) nor O_PATH descriptors: locked before the fork,
    // they have their lock file already.
    each_description(|of| {
        if !of.is_dir() && of.flags() & libc::O_PATH == 0 {
            let _ = of.open_lock_fd(pool);
        }
    });
}

/// `open_lock_fds_locked` for posix_spawn.
pub fn open_lock_fds() {
    let _g = LOCK.write();
    open_lock_fds_locked();
}

/// Just before exec: the lock file descriptors of the descriptions the new image inherits
/// (those with a descriptor that is not close-on-exec) stay open across exec, recorded in
/// the description's page, so that the new image takes its flocks, OFD locks and the
/// process's POSIX locks on them through the same open file as this one. Returns the
/// descriptors to make close-on-exec again if the exec fails (`keep_lock_fds`), with their
/// descriptions, which keep them open (and their numbers ours) until then.
pub fn pass_lock_fds() -> Vec<(Arc<OpenFile>, c_int)> {
    // Not connected (an image that has made no call to the pool since its exec): only lock
    // descriptors it adopted can be open, and they go on to the next image all the same.
    let pool = session::pool_id_now().map(|(pool, _)| pool);
    let _g = LOCK.read();
    let end = END.load(Ordering::Acquire).min(MAX_FDS);
    let mut passed = Vec::new();
    for (fd, slot) in SLOTS.iter().enumerate().take(end) {
        let p = slot.load(Ordering::Acquire);
        if p.is_null() {
            continue;
        }
        // SAFETY: the slot's reference keeps `p` alive while we hold the lock.
        let of = unsafe { &*p };
        let Some(lock_fd) = of.lock_fd_if_open() else {
            continue;
        };
        if passed.iter().any(|&(_, l)| l == lock_fd)
            || !of.is_published()
            || desc::is_cloexec(fd as c_int)
        {
            continue;
        }
        // SAFETY: clearing close-on-exec on our own descriptor with the real call.
        if unsafe { real::fcntl(lock_fd, libc::F_SETFD, 0) } == 0 {
            of.pass_lock_fd(lock_fd, pool);
            // SAFETY: `p` came from Arc::into_raw and the slot's reference cannot be
            // released while we hold the lock: one more reference for the list.
            let of = unsafe {
                Arc::increment_strong_count(p);
                Arc::from_raw(p)
            };
            passed.push((of, lock_fd));
        }
    }
    passed
}

/// The exec failed (or posix_spawn returned in the parent): the lock file descriptors are
/// close-on-exec again.
pub fn keep_lock_fds(fds: &[(Arc<OpenFile>, c_int)]) {
    for &(_, fd) in fds {
        // SAFETY: setting close-on-exec on our own descriptor with the real call.
        unsafe { real::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC as libc::c_ulong) };
    }
}

pub fn unlock_after_fork() {
    LOCK.write_unlock();
}

/// In the forked child: the lock free, with no reader of the parent's threads counted.
pub fn unlock_in_child() {
    LOCK.reset_after_fork();
}

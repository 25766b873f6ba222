//! Where an open file description's state lives: the inode, the status flags, the offset
//! and the path it was opened by.
//!
//! Other processes see a description only through a kernel descriptor they inherit (fork,
//! exec, posix_spawn), so a new one starts private: its state in this process's memory,
//! its number reserved by a duplicate of the shim's /dev/null descriptor (well under a
//! microsecond). It is
//! *published* — the state copied into a page of a memfd named "engram-fd", and every
//! descriptor of it replaced by that memfd at the same number — as soon as it could be
//! inherited: at open when it is not close-on-exec, when a descriptor of it stops being
//! close-on-exec, and before fork and posix_spawn. A forked child then shares the page (and
//! the offset) with its parent, and an exec'd image finds it by the memfd's name. Creating
//! and mapping a memfd costs about 20 µs; most descriptions (databases open everything
//! close-on-exec) never need one.
//!
//! The number a published description holds is the memfd reopened with no access
//! (`stand_in`), and a private one's is the shim's /dev/null opened the same way
//! (`NO_ACCESS`): a program or a kernel interface that bypasses libc (a static binary, Go,
//! io_uring, Linux AIO, a raw system call) gets EBADF for a read or a write of a pool
//! descriptor, never success without the file's bytes. Found by probing: with the memfd
//! itself there, `go env > /mnt/engram/x` wrote over the state page that its parent shell
//! shared, whose next write then failed with EBADF (or, with 200 bytes, aborted in the
//! offset lock), and a forged page sent the shell's writes into another file; with a
//! readable stand-in, AIO reads at offset 0 returned the page; with /dev/null open for
//! writing behind a private descriptor, MariaDB's io_uring writes reported success and
//! its data files stayed zeros. An image that inherits a published description maps the
//! page through /proc/self/fd (`map_inherited`), which reopens it for reading and
//! writing.

use crate::real;
use crate::util::{Res, errno};
use libc::{c_int, c_void};
use std::ptr::{NonNull, null_mut};
use std::sync::atomic::{AtomicI32, AtomicU32, AtomicU64, Ordering};

pub const DESC_BYTES: usize = 8192;
/// Open flags for neither reading nor writing (Linux's access mode 3: permission to both is
/// checked at open). Such a descriptor can be polled, stat'ed, duplicated and reopened
/// through /proc/self/fd, while read, write, AIO and io_uring on it give EBADF and mmap
/// EACCES.
pub const NO_ACCESS: c_int = libc::O_ACCMODE;
/// Its last bytes are the layout's version (03: the offset lock, a pthread mutex).
pub const DESC_MAGIC: u64 = u64::from_le_bytes(*b"ENGRFD03");
pub const MEMFD_PREFIX: &[u8] = b"/memfd:engram-fd";
const MEMFD_NAME: &[u8] = b"engram-fd\0";

/// The state of a description: the head of its memfd page once published.
#[repr(C)]
pub struct DescState {
    pub magic: u64,
    pub ino: u64,
    pub generation: u32,
    pub flags: AtomicU32,
    pub offset: AtomicU64,
    pub is_dir: u32,
    pub path_len: u32,
    /// The descriptor of the description's lock file that an exec'd image inherits (-1:
    /// none); written just before exec by the process that execs (`table::pass_lock_fds`).
    pub lock_fd: AtomicI32,
    /// The offset lock between the processes sharing the description (`poslock`).
    pub pos_lock: crate::poslock::PosLock,
    /// The pool the lock file is named after (`sidefiles::pool_id`), with `lock_fd`.
    pub lock_pool: AtomicU64,
}

/// A published description's memfd page: the state, then the path.
#[repr(C)]
struct DescPage {
    state: DescState,
    path: [u8; DESC_BYTES - std::mem::size_of::<DescState>()],
}

/// The state of a new description, in this process's memory (the path stays with the
/// caller until the description is published).
pub fn private(ino: u64, generation: u32, flags: u32, is_dir: bool) -> DescState {
    DescState {
        magic: DESC_MAGIC,
        ino,
        generation,
        flags: AtomicU32::new(flags),
        offset: AtomicU64::new(0),
        is_dir: is_dir as u32,
        path_len: 0,
        lock_fd: AtomicI32::new(-1),
        pos_lock: crate::poslock::PosLock::unused(),
        lock_pool: AtomicU64::new(0),
    }
}

/// The path stored in a published page.
pub fn page_path(state: &DescState) -> &[u8] {
    // SAFETY: `state` heads a mapped DescPage (the caller got it from `map`).
    let page = unsafe { &*(state as *const DescState as *const DescPage) };
    &page.path[..(state.path_len as usize).min(page.path.len())]
}

/// A descriptor of /dev/null opened by the shim, duplicated to reserve numbers.
static NULL_FD: AtomicI32 = AtomicI32::new(-1);

/// The program closed or replaced descriptors `first..=last` (close, dup2, close_range):
/// if ours was among them, open another, so that a placeholder never holds open a file of
/// the program's that took the number.
#[inline]
///
/// Returns whether a spare placeholder was among them (forgotten here; the caller's real
/// call closes or replaces it).
pub fn released(first: c_int, last: c_int) -> bool {
    let fd = NULL_FD.load(Ordering::Relaxed);
    if fd >= 0
        && (first..=last).contains(&fd)
        && NULL_FD
            .compare_exchange(fd, -1, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
    {
        // The program's from now on (dup2 onto the number).
        crate::ownfds::disown(fd);
    }
    let mut any = false;
    for s in &SPARE {
        let fd = s.load(Ordering::Acquire);
        if fd >= 0
            && (first..=last).contains(&fd)
            && s.compare_exchange(fd, -1, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        {
            any = true;
        }
    }
    any
}

/// Placeholders of closed descriptions kept open for the next open, so that an open and
/// a close of ours cost no system call to reserve and release a number (about 0.5 µs
/// here). Only close-on-exec placeholders of /dev/null numbered 3 and up, a few at most,
/// the lowest handed out first (the number the kernel would give in the usual
/// open-close-open sequence). `released` drops one as soon as the application could reuse
/// its number (close, dup2/dup3 onto it, close_range, closefrom): the only difference the
/// application can see is that its own opens skip the numbers still kept here.
const SPARES: usize = 4;
static SPARE: [AtomicI32; SPARES] = [const { AtomicI32::new(-1) }; SPARES];

/// Keep `fd` (a close-on-exec /dev/null placeholder no description uses any more) as a
/// spare; false when there is no room (the caller closes it).
pub fn keep_spare(fd: c_int) -> bool {
    fd > 2
        && SPARE.iter().any(|s| {
            s.compare_exchange(-1, fd, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        })
}

/// Whether `fd` is a spare placeholder (a number closed as far as the program knows).
pub fn is_spare(fd: c_int) -> bool {
    fd >= 0 && SPARE.iter().any(|s| s.load(Ordering::Acquire) == fd)
}

/// EBADF for a spare placeholder's number, which is closed as far as the program knows: a
/// call that passes a descriptor the shim does not serve to the kernel checks this first,
/// so that it fails as on a closed number instead of acting on the `/dev/null` behind it.
pub fn refuse_spare(fd: c_int) -> Res<()> {
    if is_spare(fd) {
        Err(libc::EBADF)
    } else {
        Ok(())
    }
}

/// The lowest spare placeholder, taken out of the spares.
fn take_spare() -> Option<c_int> {
    loop {
        let (slot, fd) = SPARE
            .iter()
            .map(|s| (s, s.load(Ordering::Acquire)))
            .filter(|&(_, fd)| fd >= 0)
            .min_by_key(|&(_, fd)| fd)?;
        if slot
            .compare_exchange(fd, -1, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
        {
            return Some(fd);
        }
    }
}

/// The shim's /dev/null (opened on first use, with no access), which placeholders
/// duplicate.
pub(crate) fn dev_null() -> Res<c_int> {
    let fd = NULL_FD.load(Ordering::Acquire);
    if fd >= 0 {
        return Ok(fd);
    }
    // Read-only where /dev/null may not be opened for both (writes still fail).
    // SAFETY: opening /dev/null with the real call.
    let fd = unsafe {
        match real::open(c"/dev/null".as_ptr(), NO_ACCESS | libc::O_CLOEXEC, 0) {
            -1 => real::open(c"/dev/null".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC, 0),
            fd => fd,
        }
    };
    if fd < 0 {
        return Err(errno());
    }
    let fd = crate::util::move_high(fd);
    match NULL_FD.compare_exchange(-1, fd, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => Ok(fd),
        Err(other) => {
            // Another thread opened one first.
            crate::ownfds::close(fd);
            Ok(other)
        }
    }
}

/// The shim's /dev/null, if open (dup2 onto its number is the program's to do).
pub fn null_fd() -> c_int {
    NULL_FD.load(Ordering::Acquire)
}

/// A new descriptor number (the lowest free, as open gives) for a private description.
pub fn placeholder(cloexec: bool) -> Res<c_int> {
    if let Some(fd) = take_spare() {
        // An inheritable open clears the flag: one system call, as the new number would cost,
        // and the number is the lowest free one all the same.
        // SAFETY: fcntl on the placeholder just taken.
        if cloexec || unsafe { real::fcntl(fd, libc::F_SETFD, 0) } == 0 {
            return Ok(fd);
        }
        // SAFETY: closing the placeholder that could not be made inheritable.
        unsafe { real::close(fd) };
    }
    let cmd = if cloexec {
        libc::F_DUPFD_CLOEXEC
    } else {
        libc::F_DUPFD
    };
    // SAFETY: duplicating our /dev/null descriptor.
    let fd = unsafe { real::fcntl(dev_null()?, cmd, 0) };
    if fd < 0 { Err(errno()) } else { Ok(fd) }
}

/// The page of a description published by another image, which passed on `stand_in`'s
/// read-only descriptor: mapped writable through a descriptor of its own for the same
/// memfd, or, if /proc cannot give one, through `fd` itself (a memfd passed on whole).
pub fn map_inherited(fd: c_int) -> Res<NonNull<DescState>> {
    let Ok(rw) = crate::util::reopen(fd, libc::O_RDWR) else {
        return map(fd);
    };
    let page = map(rw);
    // SAFETY: closing the descriptor opened above; the mapping keeps the memfd.
    unsafe { real::close(rw) };
    page
}

/// The descriptor a published description's numbers become: memfd `memfd` opened again
/// with no access (see the module's comment).
fn stand_in(memfd: c_int) -> Res<c_int> {
    crate::util::reopen(memfd, NO_ACCESS)
}

fn map(fd: c_int) -> Res<NonNull<DescState>> {
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
        return Err(errno());
    }
    NonNull::new(p as *mut DescState).ok_or(libc::ENOMEM)
}

/// # Safety
/// `p` came from `map` and nothing uses it any more.
pub unsafe fn unmap(p: *mut DescState) {
    // SAFETY: per the contract.
    unsafe { real::munmap(p as *mut c_void, DESC_BYTES) };
}

/// A descriptor (close-on-exec) standing for a new memfd that holds a copy of `from` with
/// `path`, and its mapped page.
pub fn publish(from: &DescState, path: &[u8]) -> Res<(c_int, NonNull<DescState>)> {
    // SAFETY: memfd_create with a NUL-terminated name.
    let fd = unsafe {
        libc::memfd_create(
            MEMFD_NAME.as_ptr() as *const libc::c_char,
            libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING,
        )
    };
    if fd < 0 {
        return Err(errno());
    }
    let fail = |e: c_int| {
        // SAFETY: closing the memfd we created.
        unsafe { real::close(fd) };
        Err(e)
    };
    // SAFETY: sizing our own memfd.
    if unsafe { real::ftruncate(fd, DESC_BYTES as libc::off_t) } != 0 {
        return fail(errno());
    }
    // Its size for good: a program without libc that opens /dev/stdout anew with O_TRUNC
    // would otherwise cut the page from under every process mapping it (SIGBUS).
    let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;
    // SAFETY: sealing our own memfd.
    if unsafe { real::fcntl(fd, libc::F_ADD_SEALS, seals as libc::c_ulong) } != 0 {
        return fail(errno());
    }
    let page = match map(fd) {
        Ok(p) => p,
        Err(e) => return fail(e),
    };
    // SAFETY: the fresh page is ours alone until the descriptors are replaced.
    unsafe {
        let d = page.as_ptr() as *mut DescPage;
        let dst = &mut (*d).path;
        let n = path.len().min(dst.len());
        dst[..n].copy_from_slice(&path[..n]);
        let st = &mut (*d).state;
        st.ino = from.ino;
        st.generation = from.generation;
        st.flags = AtomicU32::new(from.flags.load(Ordering::Acquire));
        st.offset = AtomicU64::new(from.offset.load(Ordering::Acquire));
        st.is_dir = from.is_dir;
        st.path_len = n as u32;
        st.lock_fd = AtomicI32::new(-1);
        st.lock_pool = AtomicU64::new(0);
        crate::poslock::PosLock::init(&mut st.pos_lock);
        std::ptr::write_volatile(&mut st.magic, DESC_MAGIC);
    }
    // Without /proc the memfd itself (an image it passes to could not find it anyway).
    match stand_in(fd) {
        Ok(stand_in) => {
            // SAFETY: closing the memfd; the stand-in and the mapping keep it.
            unsafe { real::close(fd) };
            Ok((stand_in, page))
        }
        Err(_) => Ok((fd, page)),
    }
}

/// Make descriptor `fd` a duplicate of `memfd` (`publish`'s descriptor), keeping its
/// close-on-exec flag.
pub fn replace(memfd: c_int, fd: c_int) {
    // SAFETY: reading and replacing one of our own descriptors with the real calls.
    unsafe {
        let fl = real::fcntl(fd, libc::F_GETFD, 0);
        if fl < 0 {
            return;
        }
        let cloexec = if fl & libc::FD_CLOEXEC != 0 {
            libc::O_CLOEXEC
        } else {
            0
        };
        real::dup3(memfd, fd, cloexec);
    }
}

/// Whether a descriptor is close-on-exec.
pub fn is_cloexec(fd: c_int) -> bool {
    // SAFETY: reading a descriptor flag with the real call.
    let fl = unsafe { real::fcntl(fd, libc::F_GETFD, 0) };
    fl >= 0 && fl & libc::FD_CLOEXEC != 0
}

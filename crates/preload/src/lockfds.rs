//! The descriptors of lock files this process holds, by the file they lock, and how one is
//! opened without releasing the process's POSIX locks.
//!
//! The kernel releases every POSIX lock a process holds on a file when the process closes
//! any descriptor of that file. A new descriptor lands at the lowest free number, below
//! `HIGH_FD`, and moving it up (`util::move_high`) closes that first number: once the
//! process held a POSIX lock through another descriptor of the same lock file, that close
//! released it (a second open of a pool file and then a fork, which opens the lock file of
//! each description, left the first description's lock excluding nobody). So while another
//! descriptor of the lock file is open, the low free numbers are filled with the shim's
//! /dev/null first: the open lands at `HIGH_FD` or above, and nothing of the file is closed.

use crate::real;
use crate::table::MAX_FDS;
use crate::util::{HIGH_FD, Res, errno};
use engram_core::Handle;
use libc::c_int;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// Per descriptor number: the inode and generation + 1 (0: none) of the file whose lock
/// file it is. Lock-free, so that a description dropped anywhere (also while another thread
/// forks) can forget its descriptor.
static INO: [AtomicU64; MAX_FDS] = [const { AtomicU64::new(0) }; MAX_FDS];
static GEN: [AtomicU64; MAX_FDS] = [const { AtomicU64::new(0) }; MAX_FDS];
/// One past the highest number ever registered: lookups stop there.
static END: AtomicUsize = AtomicUsize::new(0);
/// How many are registered: a close in a process that locks nothing looks up nothing.
static COUNT: AtomicUsize = AtomicUsize::new(0);

fn slot(fd: c_int) -> Option<usize> {
    usize::try_from(fd).ok().filter(|&i| i < MAX_FDS)
}

/// `fd` is a descriptor of `h`'s lock file.
pub fn register(fd: c_int, h: Handle) {
    let Some(i) = slot(fd) else { return };
    INO[i].store(h.ino, Ordering::Relaxed);
    GEN[i].store(u64::from(h.generation) + 1, Ordering::Release);
    END.fetch_max(i + 1, Ordering::AcqRel);
    COUNT.fetch_add(1, Ordering::AcqRel);
}

/// `fd` is about to be closed.
pub fn forget(fd: c_int) {
    let Some(i) = slot(fd) else { return };
    if GEN[i].swap(0, Ordering::AcqRel) != 0 {
        COUNT.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A descriptor of `h`'s lock file this process holds, if any.
pub fn of_file(h: Handle) -> Option<c_int> {
    if COUNT.load(Ordering::Acquire) == 0 {
        return None;
    }
    let end = END.load(Ordering::Acquire).min(MAX_FDS);
    let want = u64::from(h.generation) + 1;
    (0..end)
        .find(|&i| {
            GEN[i].load(Ordering::Acquire) == want && INO[i].load(Ordering::Relaxed) == h.ino
        })
        .map(|i| i as c_int)
}

/// Open `h`'s lock file (`name`, NUL-terminated) for a description, at `HIGH_FD` or above
/// (close-on-exec, the shim's own), and register it. The caller serialises these opens.
pub fn open(name: &str, h: Handle) -> Res<c_int> {
    debug_assert!(name.ends_with('\0'));
    let path = name.as_ptr() as *const libc::c_char;
    let fd = if of_file(h).is_some() {
        open_above_low(path)?
    } else {
        // No descriptor of the file is open: the process holds no POSIX lock on it, and
        // closing the first number releases nothing.
        // SAFETY: opening a NUL-terminated path with the real open.
        let fd = unsafe { real::open(path, FLAGS, 0o666) };
        if fd < 0 {
            return Err(errno());
        }
        crate::util::move_high(fd)
    };
    register(fd, h);
    Ok(fd)
}

const FLAGS: c_int = libc::O_RDWR | libc::O_CREAT | libc::O_CLOEXEC;

/// Open `path` with every free number below `HIGH_FD` taken by a /dev/null duplicate for the
/// moment (the shim's own: a `dup2` onto one gets EBUSY, as Linux may give one racing an
/// open), so that nothing is moved.
fn open_above_low(path: *const libc::c_char) -> Res<c_int> {
    let null = crate::desc::dev_null()?;
    let mut fillers = Vec::new();
    loop {
        // SAFETY: duplicating the shim's /dev/null at the lowest free number.
        let f = unsafe { real::fcntl(null, libc::F_DUPFD_CLOEXEC, 0) };
        if f < 0 {
            // Out of descriptors: the open fails, or lands where one was freed.
            break;
        }
        if f >= HIGH_FD {
            // SAFETY: closing the duplicate just made; the open takes its number.
            unsafe { real::close(f) };
            break;
        }
        crate::ownfds::own(f);
        fillers.push(f);
    }
    // SAFETY: opening a NUL-terminated path with the real open.
    let fd = unsafe { real::open(path, FLAGS, 0o666) };
    let e = errno();
    for f in fillers {
        crate::ownfds::close(f);
    }
    if fd < 0 {
        return Err(e);
    }
    // Below HIGH_FD only if another thread freed a low number meanwhile: it stays there,
    // the shim's own, since moving it would close it.
    crate::ownfds::own(fd);
    Ok(fd)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setlk(fd: c_int, cmd: c_int, ty: c_int) -> (c_int, c_int) {
        let mut f = libc::flock {
            l_type: ty as _,
            l_whence: libc::SEEK_SET as _,
            l_start: 0,
            l_len: 0,
            l_pid: 0,
        };
        // SAFETY: fcntl with a local struct flock.
        let r = unsafe { real::fcntl(fd, cmd, &mut f as *mut libc::flock as libc::c_ulong) };
        (r, f.l_type as c_int)
    }

    /// A POSIX lock taken through one descriptor of a lock file is still the process's once
    /// a second descriptor of it is open: an OFD query through a description of its own,
    /// which POSIX locks of the same process conflict with, finds it.
    #[test]
    fn a_second_descriptor_leaves_the_process_posix_locks() {
        let name = format!("/tmp/engram-lockfds-test-{}\0", std::process::id());
        let h = Handle {
            ino: 7,
            generation: 3,
        };
        let a = open(&name, h).unwrap();
        assert_eq!(of_file(h), Some(a));
        assert_eq!(setlk(a, libc::F_SETLK, libc::F_WRLCK).0, 0);
        let b = open(&name, h).unwrap();
        assert!(b != a && b >= 0);
        // SAFETY: opening the NUL-terminated path with the real open.
        let c = unsafe { real::open(name.as_ptr() as *const libc::c_char, libc::O_RDWR, 0) };
        assert!(c >= 0);
        assert_eq!(
            setlk(c, libc::F_OFD_GETLK, libc::F_WRLCK),
            (0, libc::F_WRLCK)
        );
        for fd in [a, b] {
            forget(fd);
            crate::ownfds::close(fd);
        }
        assert_eq!(of_file(h), None);
        // SAFETY: closing the test's own descriptor with the real call.
        unsafe { real::close(c) };
        let _ = std::fs::remove_file(&name[..name.len() - 1]);
    }
}

//! The shim's own descriptors (its daemon connection or pool file, lock files, mapping
//! files, the /dev/null it duplicates), kept out of the program's reach.
//!
//! Programs close descriptors they never opened: `closefrom(3)` or `close_range(3, ~0U, 0)`
//! before going on, or a loop of `close` over every number. Closing the shim's would lose
//! its daemon connection (and worse, once the program reused the number, the shim would
//! send its requests into the program's file). To the program these numbers are not open:
//! `close` gives EBADF without closing, and the range calls close everything around them.
//! Each is registered when the shim opens it (`own`) and forgotten when the shim closes it
//! (`close`).

use crate::real;
use libc::{c_int, c_uint};
use std::sync::atomic::{AtomicU64, Ordering};

const WORDS: usize = crate::table::MAX_FDS / 64;
static OWN: [AtomicU64; WORDS] = [const { AtomicU64::new(0) }; WORDS];

fn bit(fd: c_int) -> Option<(usize, u64)> {
    let fd = usize::try_from(fd).ok()?;
    (fd < WORDS * 64).then(|| (fd / 64, 1u64 << (fd % 64)))
}

/// `fd` is one of the shim's own from now on.
pub fn own(fd: c_int) {
    if let Some((w, b)) = bit(fd) {
        OWN[w].fetch_or(b, Ordering::AcqRel);
    }
}

/// Whether `fd` is one of the shim's own.
#[inline]
pub fn is_own(fd: c_int) -> bool {
    bit(fd).is_some_and(|(w, b)| OWN[w].load(Ordering::Acquire) & b != 0)
}

/// `fd` is no longer the shim's (the program replaced it, with dup2 onto its number).
pub fn disown(fd: c_int) {
    if let Some((w, b)) = bit(fd) {
        OWN[w].fetch_and(!b, Ordering::AcqRel);
    }
}

/// Close one of the shim's own descriptors.
pub fn close(fd: c_int) {
    disown(fd);
    // SAFETY: closing our own descriptor with the real call.
    unsafe { real::close(fd) };
}

/// EBUSY for a `dup2`/`dup3` onto one of the shim's own numbers but its /dev/null (which
/// the shim replaces when it goes): the shim's socket, pool file, lock and mapping files
/// are used by their numbers, so the program cannot have one.
pub fn refuse_taking(fd: c_int) -> crate::util::Res<()> {
    if is_own(fd) && fd != crate::desc::null_fd() {
        Err(libc::EBUSY)
    } else {
        Ok(())
    }
}

const KNOWN_FLAGS: c_int = (libc::CLOSE_RANGE_CLOEXEC | libc::CLOSE_RANGE_UNSHARE) as c_int;

/// The program's `close_range(first, last, flags)`: the real call on each stretch between
/// the shim's own descriptors (-1 and errno on the first failure, as the real call gives).
pub fn close_range_around(first: c_uint, last: c_uint, flags: c_int) -> c_int {
    if first > last || flags & !KNOWN_FLAGS != 0 {
        // SAFETY: forwarding unchanged: the kernel gives EINVAL.
        return unsafe { real::close_range(first, last, flags) };
    }
    if flags & libc::CLOSE_RANGE_UNSHARE as c_int != 0 {
        // Unshared once, then the stretches are closed in the private table.
        // SAFETY: unshare of the descriptor table takes no pointers.
        if unsafe { libc::unshare(libc::CLONE_FILES) } != 0 {
            return -1;
        }
    }
    let flags = flags & libc::CLOSE_RANGE_CLOEXEC as c_int;
    let mut result = 0;
    let mut stretch = |from: c_uint, to: c_uint| {
        if close_stretch(from, to, flags) != 0 && result == 0 {
            result = -1;
        }
    };
    let mut from = first;
    let top = last.min((WORDS * 64 - 1) as c_uint);
    let mut fd = first;
    while fd <= top {
        let (w, b) = (fd as usize / 64, fd as usize % 64);
        let word = OWN[w].load(Ordering::Acquire) >> b;
        if word == 0 {
            // Nothing of ours in the rest of this word.
            fd = ((w as c_uint) + 1) * 64;
            continue;
        }
        let at = fd + word.trailing_zeros();
        if at > top {
            break;
        }
        if at > from {
            stretch(from, at - 1);
        }
        from = at + 1;
        fd = at + 1;
    }
    if from <= last {
        stretch(from, last);
    }
    result
}

/// The real close_range on `[from, to]`; on kernels without it (before 5.9: ENOSYS), each
/// open descriptor in the range one by one, as glibc's closefrom does.
fn close_stretch(from: c_uint, to: c_uint, flags: c_int) -> c_int {
    // SAFETY: closing (or marking) the program's descriptors with the real call.
    let r = unsafe { real::close_range(from, to, flags) };
    if r == 0 || crate::util::errno() != libc::ENOSYS {
        return r;
    }
    let open: Vec<c_uint> = std::fs::read_dir("/proc/self/fd")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .filter(|&fd| (from..=to).contains(&fd) && !is_own(fd as c_int))
        .collect();
    for fd in open {
        // SAFETY: as above, one descriptor at a time.
        unsafe {
            if flags & libc::CLOSE_RANGE_CLOEXEC as c_int != 0 {
                real::fcntl(
                    fd as c_int,
                    libc::F_SETFD,
                    libc::FD_CLOEXEC as libc::c_ulong,
                );
            } else {
                real::close(fd as c_int);
            }
        }
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registered_numbers_are_own_until_closed() {
        // SAFETY: opening /dev/null for the test.
        let fd = unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
        assert!(fd >= 0 && !is_own(fd));
        own(fd);
        assert!(is_own(fd));
        close(fd);
        assert!(!is_own(fd));
        // SAFETY: probing a descriptor number.
        assert!(unsafe { libc::fcntl(fd, libc::F_GETFD) } < 0, "closed");
        assert!(!is_own(-1) && !is_own(c_int::MAX));
    }
}

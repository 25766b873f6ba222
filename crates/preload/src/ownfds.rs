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

/// The program's `close_range(first, last, flags)`: the real call on each stretch between
/// the shim's own descriptors. The first failure is returned (-1, errno set).
pub fn close_range_around(first: c_uint, last: c_uint, flags: c_int) -> c_int {
    let mut from = first;
    let mut result = 0;
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
            // SAFETY: closing the program's descriptors with the real call.
            if unsafe { real::close_range(from, at - 1, flags) } != 0 && result == 0 {
                result = -1;
            }
        }
        from = at + 1;
        fd = at + 1;
    }
    if from <= last {
        // SAFETY: as above.
        if unsafe { real::close_range(from, last, flags) } != 0 && result == 0 {
            result = -1;
        }
    }
    result
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

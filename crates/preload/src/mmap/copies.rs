//! Copies: a private mapping of a pool file, and a shared one of a file opened read-only,
//! are anonymous memory filled from the file at mmap time. They are listed here so that
//! growing one with `mremap` fills the new pages from the file, as a file mapping shows
//! them (the kernel would give zeros), and so that one made from a shared mapping of a
//! descriptor opened read-only cannot be made writable (EACCES, as on Linux).
//!
//! A copy leaves the list when any of it is unmapped or mapped over (`munmap`, a
//! `MAP_FIXED` mapping, `mremap` onto it): what is left of it then grows as anonymous
//! memory does. Only a whole copy grows from the file, so memory the list no longer
//! describes exactly is never filled.

use super::{MapCall, load};
use crate::real;
use crate::session::op;
use crate::table::OpenFile;
use crate::util::{Res, errno};
use libc::{c_int, c_void};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

const PAGE: usize = super::PAGE;

struct Copy {
    addr: usize,
    len: usize,
    of: Arc<OpenFile>,
    off: u64,
    prot: c_int,
    /// Made for a shared mapping (of a descriptor opened read-only).
    shared: bool,
}

static COPIES: Mutex<Vec<Copy>> = Mutex::new(Vec::new());
/// How many copies are listed: munmap, mprotect and mremap look no further when zero.
static NCOPIES: AtomicUsize = AtomicUsize::new(0);

/// Whether any copy is listed.
pub(super) fn any() -> bool {
    NCOPIES.load(Ordering::Acquire) != 0
}

/// The list, taken under the operation guard (a fork waits for it, so no child starts with
/// the lock held). Never held across a call into the engine, whose own mmap and munmap
/// calls come back here.
fn copies() -> MutexGuard<'static, Vec<Copy>> {
    COPIES.lock().unwrap_or_else(|e| e.into_inner())
}

fn overlaps(c: &Copy, a: usize, end: usize) -> bool {
    c.addr < end && a < c.addr + c.len
}

/// Map a copy of the file's bytes from the call's offset (zeros past its end), protected as
/// asked; `shared` if the call asked for a shared mapping.
pub(super) fn snapshot(of: &Arc<OpenFile>, call: MapCall, shared: bool) -> Res<*mut c_void> {
    if !of.readable() {
        return Err(libc::EACCES);
    }
    let (len, prot, off) = (call.len, call.prot, call.off);
    let keep = call.flags
        & (libc::MAP_FIXED | libc::MAP_FIXED_NOREPLACE | libc::MAP_NORESERVE | libc::MAP_POPULATE);
    // SAFETY: an anonymous private mapping of len bytes.
    let p = unsafe {
        real::mmap(
            call.addr,
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | keep,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(errno());
    }
    // SAFETY: the fresh mapping is ours, len bytes long.
    let dst = unsafe { std::slice::from_raw_parts_mut(p as *mut u8, len) };
    let r = load(of, dst, off).and_then(|_| protect(p, len, prot));
    if let Err(e) = r {
        // SAFETY: unmapping our own mapping.
        unsafe { real::munmap(p, len) };
        return Err(e);
    }
    copies().push(Copy {
        addr: p as usize,
        len,
        of: of.clone(),
        off,
        prot,
        shared,
    });
    NCOPIES.fetch_add(1, Ordering::AcqRel);
    Ok(p)
}

fn protect(p: *mut c_void, len: usize, prot: c_int) -> Res<()> {
    // SAFETY: protecting memory of a copy of ours.
    if unsafe { real::mprotect(p, len, prot) } != 0 {
        Err(errno())
    } else {
        Ok(())
    }
}

/// Drop the copies that `a..end` touches (unmapped, or mapped over).
pub(super) fn forget(a: usize, end: usize) {
    let _op = op();
    let mut list = copies();
    let before = list.len();
    list.retain(|c| !overlaps(c, a, end));
    NCOPIES.fetch_sub(before - list.len(), Ordering::AcqRel);
}

/// Whether `mprotect` of `a..end` to `prot` would make a copy of a shared mapping of a
/// read-only descriptor writable (EACCES, as on Linux).
pub(super) fn refuses(a: usize, end: usize, prot: c_int) -> bool {
    let _op = op();
    prot & libc::PROT_WRITE != 0 && copies().iter().any(|c| c.shared && overlaps(c, a, end))
}

/// After `mprotect` of `a..end` to `prot`: the whole copies there keep it for their growth.
pub(super) fn protected(a: usize, end: usize, prot: c_int) {
    let _op = op();
    for c in copies()
        .iter_mut()
        .filter(|c| c.addr >= a && c.addr + c.len <= end)
    {
        c.prot = prot;
    }
}

/// `mremap` of a whole copy: the kernel moves or resizes it, then the pages it grew by are
/// filled from the file. None if `addr..addr+old` is not exactly a listed copy.
pub(super) fn remap(
    addr: *mut c_void,
    old: usize,
    new: usize,
    flags: c_int,
    naddr: *mut c_void,
) -> Option<Res<*mut c_void>> {
    let _op = op();
    let c = {
        let mut list = copies();
        let at = list
            .iter()
            .position(|c| c.addr == addr as usize && c.len == old)?;
        NCOPIES.fetch_sub(1, Ordering::AcqRel);
        list.swap_remove(at)
    };
    // SAFETY: resizing (or moving) a whole copy of ours as the caller asked.
    let p = unsafe { real::mremap(addr, old, new, flags, naddr) };
    if p == libc::MAP_FAILED {
        let e = errno();
        relist(c);
        return Some(Err(e));
    }
    // The kernel's pages past the old end's page are anonymous zeros: the file's bytes
    // there, as a mapping of the file would show.
    let from = old.next_multiple_of(PAGE);
    let to = new.next_multiple_of(PAGE);
    if to > from {
        // SAFETY: the grown pages are ours, `to - from` bytes from `p + from`.
        let dst =
            unsafe { std::slice::from_raw_parts_mut((p as usize + from) as *mut u8, to - from) };
        let grown = (p as usize + from) as *mut c_void;
        let filled = protect(grown, to - from, libc::PROT_READ | libc::PROT_WRITE)
            .and_then(|_| load(&c.of, dst, c.off + from as u64))
            .and_then(|_| protect(grown, to - from, c.prot));
        if let Err(e) = filled {
            // The call has moved the memory already: what is left is anonymous memory.
            crate::util::set_errno(e);
            return Some(Ok(p));
        }
    }
    relist(Copy {
        addr: p as usize,
        len: new,
        ..c
    });
    Some(Ok(p))
}

fn relist(c: Copy) {
    copies().push(c);
    NCOPIES.fetch_add(1, Ordering::AcqRel);
}

//! Which pages of a shared writable mapping this process stored to since it last wrote
//! them back, as the kernel records them: the mapping is registered with a userfaultfd for
//! write-protection in async mode and write-protected, so that a store to a protected page
//! only clears its protection (a minor fault, no thread to answer it), and a write-back
//! asks `/proc/self/pagemap` (`PAGEMAP_SCAN`) for the pages no longer protected, protecting
//! them again in the same call. So a write-back costs in the pages stored to, not in the
//! mapping's size (LMDB with `MDB_WRITEMAP` msyncs its whole map at every commit), and a
//! page that differs from the file for another reason (another process's write whose copy
//! into the backing file has not landed) is not taken for a store.
//!
//! Where the record is not sure, the caller compares every page with the file, as before:
//! no userfaultfd here (a kernel before 6.7), registration refused, a mapping moved or
//! resized (`mremap` drops or leaves out the registration) or whose protection changed
//! (`mprotect`), a failed scan, a forked child's copy of its parent's mapping, and a
//! mapping this process has forked since it made it (the child's stores are in the child's
//! page tables). A write-back of the whole mapping (`msync`) protects an unsure mapping
//! again before it compares, and the record is sure from then on; forks are for good.

use super::{Mapping, PAGE};
use crate::real;
use crate::session;
use libc::{c_int, c_ulong};
use std::sync::Mutex;

// The kernel's interface (linux/userfaultfd.h, linux/fs.h), newer than the libc crate's.
const UFFD_USER_MODE_ONLY: libc::c_long = 1;
const UFFD_API: u64 = 0xAA;
const UFFD_FEATURE_WP_HUGETLBFS_SHMEM: u64 = 1 << 12;
const UFFD_FEATURE_WP_ASYNC: u64 = 1 << 15;
const UFFDIO_REGISTER_MODE_WP: u64 = 1 << 1;
const UFFDIO_WRITEPROTECT_MODE_WP: u64 = 1 << 0;
const PAGE_IS_WRITTEN: u64 = 1 << 1;
const PM_SCAN_WP_MATCHING: u64 = 1 << 0;
const PM_SCAN_CHECK_WPASYNC: u64 = 1 << 1;

/// `_IOWR(kind, nr, T)`.
const fn iowr<T>(kind: u8, nr: u8) -> c_ulong {
    (3 << 30) | ((size_of::<T>() as c_ulong) << 16) | ((kind as c_ulong) << 8) | nr as c_ulong
}

#[repr(C)]
struct UffdioApi {
    api: u64,
    features: u64,
    ioctls: u64,
}

#[repr(C)]
struct UffdioRange {
    start: u64,
    len: u64,
}

#[repr(C)]
struct UffdioRegister {
    range: UffdioRange,
    mode: u64,
    ioctls: u64,
}

#[repr(C)]
struct UffdioWriteprotect {
    range: UffdioRange,
    mode: u64,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct PageRegion {
    start: u64,
    end: u64,
    categories: u64,
}

#[repr(C)]
#[derive(Default)]
struct PmScanArg {
    size: u64,
    flags: u64,
    start: u64,
    end: u64,
    walk_end: u64,
    vec: u64,
    vec_len: u64,
    max_pages: u64,
    category_inverted: u64,
    category_mask: u64,
    category_anyof_mask: u64,
    return_mask: u64,
}

const UFFDIO_API: c_ulong = iowr::<UffdioApi>(0xAA, 0x3F);
const UFFDIO_REGISTER: c_ulong = iowr::<UffdioRegister>(0xAA, 0x00);
const UFFDIO_WRITEPROTECT: c_ulong = iowr::<UffdioWriteprotect>(0xAA, 0x06);
const PAGEMAP_SCAN: c_ulong = iowr::<PmScanArg>(b'f', 16);

/// A mapping's record of its stores.
#[derive(Clone)]
pub(super) struct Tracking {
    /// Registered and write-protected, and nothing since made the record unsure.
    sure: bool,
    /// `session::forks()` when the mapping was made: a fork since gave a child the mapping.
    forks: u64,
    /// The process that made it: a child of a raw fork (`syscall(SYS_fork)`, `_Fork`, which
    /// run no fork handlers) compares (its stores are in its own page tables).
    pid: libc::pid_t,
    /// Pages the kernel reported stored to whose write-back has not succeeded yet
    /// (addresses, end exclusive): the scan protected them again, so it will not report
    /// them a second time.
    pending: Vec<(usize, usize)>,
}

impl Tracking {
    /// The record of a mapping just made at `addr` (`len` bytes): sure from now on if it is
    /// writable and the kernel protects it. One mapped without `PROT_WRITE` is not
    /// protected (SQLite's read-only map of its database would pay for nothing); made
    /// writable later (`mprotect`), it is at its next whole `msync`. `off`, `size`: its
    /// offset in the file and the file's size (see `protect`).
    pub(super) fn new(addr: usize, len: usize, off: u64, size: u64, writable: bool) -> Tracking {
        Tracking {
            sure: writable && protect(addr, len, covered(len, off, size)),
            forks: session::forks(),
            // SAFETY: getpid has no failure.
            pid: unsafe { libc::getpid() },
            pending: Vec::new(),
        }
    }

    /// The kernel's record can no longer be trusted (`mremap`, `mprotect`): compare until
    /// a whole write-back protects the mapping again.
    pub(super) fn unsure(&mut self) {
        self.sure = false;
        self.pending.clear();
    }

    /// Pages whose write-back failed (`ENOSPC`): written back at the next write-back.
    pub(super) fn keep(&mut self, ranges: impl IntoIterator<Item = (usize, usize)>) {
        self.pending.extend(ranges);
    }

    /// Take the pending pages within `from..to` out of the list, merged and in order.
    fn take(&mut self, from: usize, to: usize) -> Vec<(usize, usize)> {
        let mut inside = Vec::new();
        let mut rest = Vec::new();
        for (a, b) in self.pending.drain(..) {
            let (ia, ib) = (a.max(from), b.min(to));
            if ia < ib {
                inside.push((ia, ib));
            }
            if a < from {
                rest.push((a, b.min(from)));
            }
            if to < b {
                rest.push((a.max(to), b));
            }
        }
        self.pending = rest;
        inside.sort_unstable();
        let mut merged: Vec<(usize, usize)> = Vec::with_capacity(inside.len());
        for (a, b) in inside {
            match merged.last_mut() {
                Some(last) if a <= last.1 => last.1 = last.1.max(b),
                _ => merged.push((a, b)),
            }
        }
        merged
    }
}

/// The pages of `m` within `from..to` (page-aligned, inside the mapping) to write back:
/// those stored to since the last write-back and those whose write-back failed. None: not
/// known, compare them all. `whole`: the caller writes the whole mapping back, and an
/// unsure mapping is protected again first, so that stores from now on are recorded while
/// the compare finds those made before.
pub(super) fn stored(
    m: &mut Mapping,
    from: usize,
    to: usize,
    whole: bool,
) -> Option<Vec<(usize, usize)>> {
    let t = &mut m.tracking;
    // SAFETY: getpid has no failure.
    let pid = unsafe { libc::getpid() };
    if m.born != session::generation() || t.forks != session::forks() || t.pid != pid {
        return None;
    }
    let Ok(covered) = crate::io::size_of(&m.of).map(|size| covered(m.len, m.off, size)) else {
        return None;
    };
    if !t.sure {
        if whole {
            t.pending.clear();
            t.sure = protect(m.addr, m.len, covered);
        }
        return None;
    }
    // Past the end of file nothing is written back: not scanned either (see `protect`).
    let end = to.min(m.addr + covered);
    if from >= end {
        return Some(t.take(from, to));
    }
    match scan(from, end) {
        Some(found) => {
            t.pending.extend(found);
            Some(t.take(from, to))
        }
        None => {
            t.unsure();
            None
        }
    }
}

/// This process's userfaultfd and `/proc/self/pagemap`: both name this process's memory,
/// so a forked child opens its own (the parent's would register and scan the parent).
struct Kernel {
    generation: u64,
    /// The process they were opened in: /proc/self/pagemap names it for good, and a child
    /// of a raw fork (no fork handlers, the same generation) must not scan its parent.
    pid: libc::pid_t,
    /// None: not available in this process.
    fds: Option<(c_int, c_int)>,
}

static KERNEL: Mutex<Option<Kernel>> = Mutex::new(None);

/// Run `f` with this process's userfaultfd and pagemap descriptors, opened on first use;
/// None if they cannot be had.
fn with_kernel<T>(f: impl FnOnce(c_int, c_int) -> Option<T>) -> Option<T> {
    let mut k = KERNEL.lock().unwrap_or_else(|e| e.into_inner());
    let now = session::generation();
    // SAFETY: getpid has no failure.
    let pid = unsafe { libc::getpid() };
    if k.as_ref()
        .is_none_or(|k| k.generation != now || k.pid != pid)
    {
        // The parent's, inherited across fork: not ours to use.
        if let Some((uffd, pagemap)) = k.take().and_then(|k| k.fds) {
            crate::ownfds::close(uffd);
            crate::ownfds::close(pagemap);
        }
        *k = Some(Kernel {
            generation: now,
            pid,
            fds: open_kernel(),
        });
    }
    let (uffd, pagemap) = k.as_ref()?.fds?;
    f(uffd, pagemap)
}

/// A userfaultfd that resolves write-protect faults itself (`UFFD_FEATURE_WP_ASYNC`) on
/// shmem too, and `/proc/self/pagemap`. User-mode faults only: without the privilege,
/// `vm.unprivileged_userfaultfd` 0 refuses any other, and async faults never reach the
/// descriptor anyway (a store by the kernel, `read` into the mapping, is recorded too).
fn open_kernel() -> Option<(c_int, c_int)> {
    let flags = (libc::O_CLOEXEC | libc::O_NONBLOCK) as libc::c_long | UFFD_USER_MODE_ONLY;
    // SAFETY: the userfaultfd system call takes its flags only.
    let uffd = unsafe { real::syscall6(libc::SYS_userfaultfd, [flags, 0, 0, 0, 0, 0]) };
    if uffd < 0 {
        return None;
    }
    let uffd = crate::util::move_high(uffd as c_int);
    let mut api = UffdioApi {
        api: UFFD_API,
        features: UFFD_FEATURE_WP_ASYNC | UFFD_FEATURE_WP_HUGETLBFS_SHMEM,
        ioctls: 0,
    };
    let path = c"/proc/self/pagemap";
    // SAFETY: UFFDIO_API with a valid struct on our own descriptor; opening a path.
    let pagemap = unsafe {
        if ioctl(uffd, UFFDIO_API, &mut api) != 0 {
            -1
        } else {
            real::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC, 0)
        }
    };
    if pagemap < 0 {
        crate::ownfds::close(uffd);
        return None;
    }
    Some((uffd, crate::util::move_high(pagemap)))
}

/// The real ioctl with a pointer to `arg`.
///
/// # Safety
/// `req` is a request whose argument is a `T`.
unsafe fn ioctl<T>(fd: c_int, req: c_ulong, arg: &mut T) -> c_int {
    // SAFETY: as the caller promises.
    unsafe { real::ioctl(fd, req, arg as *mut T as c_ulong) }
}

/// How much of a mapping of `len` bytes at file offset `off` a file of `size` bytes
/// covers, in whole pages.
fn covered(len: usize, off: u64, size: u64) -> usize {
    size.saturating_sub(off)
        .next_multiple_of(PAGE as u64)
        .min(len.next_multiple_of(PAGE) as u64) as usize
}

/// Register `addr..addr+len` for write-protection and protect its first `covered` bytes,
/// the part the file covers; whether both succeeded. Protecting a page puts an entry in
/// the page tables even where nothing is mapped yet: protected whole, an LMDB-style map of
/// 64 GiB over a small file took 131 MB of page tables and 211 ms (found in review). A page
/// past the end when the file grows is not protected, so the scan reports it as stored
/// and it is compared (then protected).
fn protect(addr: usize, len: usize, covered: usize) -> bool {
    let range = |len: usize| UffdioRange {
        start: addr as u64,
        len: len.next_multiple_of(PAGE) as u64,
    };
    with_kernel(|uffd, _| {
        let mut reg = UffdioRegister {
            range: range(len),
            mode: UFFDIO_REGISTER_MODE_WP,
            ioctls: 0,
        };
        let mut wp = UffdioWriteprotect {
            range: range(covered),
            mode: UFFDIO_WRITEPROTECT_MODE_WP,
        };
        // SAFETY: the uffd requests with their own structs, on our own descriptor, for a
        // range this process maps.
        let ok = unsafe {
            ioctl(uffd, UFFDIO_REGISTER, &mut reg) == 0
                && (covered == 0 || ioctl(uffd, UFFDIO_WRITEPROTECT, &mut wp) == 0)
        };
        Some(ok)
    })
    .unwrap_or(false)
}

/// The pages within `from..to` stored to since they were last protected, protecting them
/// again in the same step; None on any failure (a part of the range not registered, as
/// after `mremap`, gives EPERM). Asked for `PAGE_IS_WRITTEN` alone, the kernel also reports
/// a page whose entry was dropped (a punched hole, `MADV_DONTNEED`), so a store is never
/// missed that way.
fn scan(from: usize, to: usize) -> Option<Vec<(usize, usize)>> {
    with_kernel(|_, pagemap| {
        let mut found = Vec::new();
        let mut regions = [PageRegion::default(); 256];
        let mut start = from as u64;
        while start < to as u64 {
            let mut arg = PmScanArg {
                size: size_of::<PmScanArg>() as u64,
                flags: PM_SCAN_WP_MATCHING | PM_SCAN_CHECK_WPASYNC,
                start,
                end: to as u64,
                vec: regions.as_mut_ptr() as u64,
                vec_len: regions.len() as u64,
                category_mask: PAGE_IS_WRITTEN,
                return_mask: PAGE_IS_WRITTEN,
                ..PmScanArg::default()
            };
            // SAFETY: PAGEMAP_SCAN with its struct, whose vector is our local array of
            // `vec_len` regions.
            let n = unsafe { ioctl(pagemap, PAGEMAP_SCAN, &mut arg) };
            if n < 0 {
                return None;
            }
            let got = &regions[..(n as usize).min(regions.len())];
            found.extend(got.iter().map(|r| (r.start as usize, r.end as usize)));
            // Where the walk stopped: the end, or where the vector filled up.
            if arg.walk_end <= start {
                return None;
            }
            start = arg.walk_end;
        }
        Some(found)
    })
}

//! Mapping a pool into memory and detecting how durability is achieved.

use std::fmt;
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::ptr;

use crate::device::Backing;

/// Page size assumed for pool sizes and protection ranges (x86_64).
pub(crate) const PAGE: u64 = 4096;

/// How durability is achieved for a mapping, detected at open (like libpmem2's granularity).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Media {
    /// DAX file or device mapped with `MAP_SYNC`: cache-line flushes make data durable.
    Dax,
    /// File on tmpfs: emulated PM, same instructions, contents lost on reboot.
    Tmpfs,
    /// Page cache (an ordinary file, or a block device without DAX): durability through
    /// `msync` of the touched pages.
    File,
    /// Anonymous memory (tests, crash harness): never durable.
    Memory,
}

impl fmt::Display for Media {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Media::Dax => "DAX (MAP_SYNC, cache-line flushes)",
            Media::Tmpfs => "tmpfs (emulated PM: cache-line flushes, lost on reboot)",
            Media::File => "page cache (msync of touched pages)",
            Media::Memory => "anonymous memory",
        })
    }
}

/// An owned memory mapping; unmapped on drop.
#[derive(Debug)]
pub(crate) struct Mapping {
    ptr: *mut u8,
    /// Length actually mapped (a multiple of the page size).
    map_len: usize,
}

// SAFETY: `Mapping` owns its address range exclusively (nothing else unmaps
// it); the raw pointer is just an address, and all access through it goes via
// `Pool`, whose methods are designed for concurrent use.
unsafe impl Send for Mapping {}
// SAFETY: as above; `&Mapping` only exposes the address.
unsafe impl Sync for Mapping {}

impl Mapping {
    pub(crate) fn ptr(&self) -> *mut u8 {
        self.ptr
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`map_len` describe a mapping this value created and
        // still owns; no reference into it outlives the owning `Pool`.
        unsafe { unmap(self.ptr, self.map_len) };
    }
}

/// Reject sizes that are zero, not page multiples, or too large for the address space.
pub(crate) fn check_pool_size(size: u64) -> Result<usize, String> {
    if size == 0 || !size.is_multiple_of(PAGE) {
        return Err(format!(
            "pool size {size} is invalid: a pool must be a non-zero multiple of {PAGE} bytes"
        ));
    }
    usize::try_from(size)
        .ok()
        .filter(|&s| s <= isize::MAX as usize)
        .ok_or_else(|| format!("pool size {size} does not fit in the address space"))
}

fn mmap(fd: libc::c_int, len: usize, flags: libc::c_int) -> io::Result<*mut u8> {
    mmap_at(
        ptr::null_mut(),
        fd,
        len,
        libc::PROT_READ | libc::PROT_WRITE,
        flags,
    )
}

fn mmap_at(
    at: *mut u8,
    fd: libc::c_int,
    len: usize,
    prot: libc::c_int,
    flags: libc::c_int,
) -> io::Result<*mut u8> {
    // SAFETY: without MAP_FIXED the kernel picks an unused range and touches no existing
    // memory; with MAP_FIXED `at` is inside a reservation the caller made and owns (see
    // `map_shared_aligned`), which nothing references. The result is checked.
    let p = unsafe { libc::mmap(at.cast(), len, prot, flags, fd, 0) };
    if p == libc::MAP_FAILED {
        Err(io::Error::last_os_error())
    } else {
        Ok(p.cast())
    }
}

/// Size of a PMD (huge) page-table entry on x86_64.
pub(crate) const HUGE_PAGE: usize = 2 << 20;

/// Unmap `[ptr, ptr + len)` (page aligned; nothing if `len` is 0).
///
/// # Safety
/// The range belongs to a mapping the caller owns and nothing references any more.
unsafe fn unmap(ptr: *mut u8, len: usize) {
    if len != 0 {
        // SAFETY: as the caller guarantees.
        unsafe { libc::munmap(ptr.cast(), len) };
    }
}

/// Map `len` bytes of `fd` shared at a 2 MiB-aligned address, and ask for huge pages.
///
/// The kernel maps DAX persistent memory with 2 MiB (PMD) entries only where the virtual
/// address is 2 MiB aligned, and so does a huge-page tmpfs; one entry per 2 MiB instead of
/// 512 means far fewer TLB misses and page faults over a large pool. So: reserve `len` +
/// 2 MiB of address space (PROT_NONE), map the file over its first aligned address with
/// MAP_FIXED, and give back the slack on either side. MADV_HUGEPAGE is only a hint (a
/// `huge=advise` tmpfs honours it; EINVAL without transparent huge pages is ignored).
fn map_shared_aligned(fd: libc::c_int, len: usize, flags: libc::c_int) -> io::Result<*mut u8> {
    let span = len
        .checked_add(HUGE_PAGE)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "pool too large to map"))?;
    let reserved = mmap_at(
        ptr::null_mut(),
        -1,
        span,
        libc::PROT_NONE,
        libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
    )?;
    let head = reserved.align_offset(HUGE_PAGE);
    // SAFETY: `head` < 2 MiB, so the aligned address and `len` bytes after it lie inside
    // the reservation of `len` + 2 MiB bytes.
    let aligned = unsafe { reserved.add(head) };
    let prot = libc::PROT_READ | libc::PROT_WRITE;
    if let Err(e) = mmap_at(aligned, fd, len, prot, flags | libc::MAP_FIXED) {
        // SAFETY: what is left of our reservation (a failed MAP_FIXED may have unmapped
        // part of it); nothing points into it.
        unsafe { unmap(reserved, span) };
        return Err(e);
    }
    // SAFETY: the slack before and after the file mapping: parts of our reservation that
    // nothing points into (`head` + `len` <= `span`).
    unsafe {
        unmap(reserved, head);
        unmap(aligned.add(len), span - head - len);
    }
    // SAFETY: advice on the range just mapped; MADV_HUGEPAGE changes no contents.
    unsafe { libc::madvise(aligned.cast(), len, libc::MADV_HUGEPAGE) };
    Ok(aligned)
}

/// Map `len` bytes of `file` shared (2 MiB aligned, see `map_shared_aligned`) and detect
/// the media: `MAP_SYNC` first, then plain `MAP_SHARED`. A device-DAX device is direct
/// access either way; a block device without `MAP_SYNC` goes through the page cache (its
/// node lives on devtmpfs, which must not make it look like tmpfs); a regular file is
/// told apart from one on tmpfs by `fstatfs`, first: tmpfs never grants `MAP_SYNC`, so a
/// pool there (every process that opens one) skips the attempt and its reservation.
pub(crate) fn map_file(file: &File, len: usize, backing: Backing) -> io::Result<(Mapping, Media)> {
    let fd = file.as_raw_fd();
    if backing == Backing::File && is_tmpfs(file)? {
        let ptr = map_shared_aligned(fd, len, libc::MAP_SHARED)?;
        return Ok((Mapping { ptr, map_len: len }, Media::Tmpfs));
    }
    match map_shared_aligned(fd, len, libc::MAP_SHARED_VALIDATE | libc::MAP_SYNC) {
        Ok(ptr) => return Ok((Mapping { ptr, map_len: len }, Media::Dax)),
        Err(e) if matches!(e.raw_os_error(), Some(libc::EOPNOTSUPP | libc::EINVAL)) => {}
        Err(e) => return Err(e),
    }
    let ptr = map_shared_aligned(fd, len, libc::MAP_SHARED)?;
    let mapping = Mapping { ptr, map_len: len };
    let media = match backing {
        Backing::DaxDevice => Media::Dax,
        _ => Media::File,
    };
    Ok((mapping, media))
}

/// Whether `file` lives on tmpfs.
pub(crate) fn is_tmpfs(file: &File) -> io::Result<bool> {
    // SAFETY: `statfs` is plain old data; all-zero is a valid value.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `fd` is open for the duration of the call and `st` is a valid out-pointer.
    if unsafe { libc::fstatfs(file.as_raw_fd(), &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(st.f_type == libc::TMPFS_MAGIC)
}

/// Private anonymous zeroed memory of at least `len` bytes (rounded up to pages).
pub(crate) fn map_anonymous(len: usize) -> io::Result<Mapping> {
    let map_len = len
        .checked_next_multiple_of(PAGE as usize)
        .filter(|&l| l != 0 && l <= isize::MAX as usize)
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("anonymous pool size {len} is invalid: it must be non-zero"),
            )
        })?;
    let ptr = mmap(-1, map_len, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS)?;
    Ok(Mapping { ptr, map_len })
}

/// Give `file` (just truncated to 0) `size` bytes, reserving the space where
/// the file system can so that a full tmpfs or disk is reported here rather
/// than as SIGBUS on first touch.
pub(crate) fn allocate(file: &File, size: u64) -> io::Result<()> {
    match fallocate(file, 0, size) {
        Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => file.set_len(size),
        r => r,
    }
}

/// Take `size` bytes of space for `file` without changing its size or content
/// (`FALLOC_FL_KEEP_SIZE`), to learn before anything is lost that the file system holds
/// them. Where the file system cannot, there is nothing to learn: Ok.
pub(crate) fn reserve_space(file: &File, size: u64) -> io::Result<()> {
    match fallocate(file, libc::FALLOC_FL_KEEP_SIZE, size) {
        Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => Ok(()),
        r => r,
    }
}

/// `fallocate(mode, 0, size)`, its ENOSPC said in words.
fn fallocate(file: &File, mode: libc::c_int, size: u64) -> io::Result<()> {
    let len = libc::off_t::try_from(size)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "pool size too large"))?;
    // SAFETY: plain system call on an open descriptor.
    if unsafe { libc::fallocate(file.as_raw_fd(), mode, 0, len) } == 0 {
        return Ok(());
    }
    let e = io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::ENOSPC) => Err(io::Error::new(
            io::ErrorKind::StorageFull,
            format!("not enough free space for a pool of {size} bytes"),
        )),
        _ => Err(e),
    }
}

/// `mprotect` `[ptr, ptr + len)` (page aligned) to `prot`.
pub(crate) fn protect(ptr: *mut u8, len: usize, prot: libc::c_int) -> io::Result<()> {
    // SAFETY: the caller passes a page-aligned range inside a mapping it owns;
    // changing protection does not invalidate Rust references (readers keep
    // working; stores to a read-only range fault, which the caller opted into).
    if unsafe { libc::mprotect(ptr.cast(), len, prot) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `MADV_POPULATE_WRITE` (Linux 5.14): fault a range in writable, as stores would, in one call.
const MADV_POPULATE_WRITE: libc::c_int = 23;

/// Map the pages of a range writable now rather than one page fault at a time on first store.
/// Best effort: an older kernel refuses with EINVAL, and the stores then fault as before.
pub(crate) fn populate_write(ptr: *mut u8, len: usize) {
    // SAFETY: the caller passes a page-aligned range inside a writable shared mapping it
    // owns; populating changes no contents (it faults pages in, as a store would).
    unsafe {
        libc::madvise(ptr.cast(), len, MADV_POPULATE_WRITE);
    }
}

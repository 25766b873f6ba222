//! mmap of EngramFS files. A private mapping is a copy of the file taken at mmap time
//! (`copies.rs`, which also makes `mremap` and `mprotect` of copies behave as Linux's). A
//! shared mapping is backed by a file in /dev/shm named after the inode, which every
//! process mapping that inode shares (so that, for instance, SQLite's WAL index works
//! between processes); msync, munmap, exit and exec write the pages of a writable one that
//! this process stored to (`dirty.rs`) back to EngramFS, where they become durable. Writes
//! to a file some process maps go to the backing file too, so that the mappings see them
//! (SQLite reads its database through a read-only mapping and writes it with pwrite, from
//! every process that opens it): the server keeps a bit per inode that some process maps
//! shared (`Fs::set_mapped`), which every writer reads after its write. A mapping sets it
//! before it fills a backing file from the file, and fills under an exclusive lock that
//! writers of the backing file wait for (`FillLock`): a write is then either in what the
//! fill read or written over it.

use crate::io::pread_file;
use crate::session::{self, op};
use crate::table::OpenFile;
use crate::util::{Res, en, errno, guard};
use crate::{ours, real};
use backing::{backing_name, lock_backing, prepare_backing};
use libc::{c_int, c_void, off_t, size_t};
use std::cell::Cell;
use std::ffi::CString;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use writeback::{detach, forget, write_back};

mod backing;
mod copies;
mod dirty;
mod reads;
mod writeback;
mod writes;

pub use reads::read_mapped;
pub use writeback::{at_exit, write_back_all};
pub use writes::{
    WriteHold, clearing, growing_write, hold_for_write, mapped_now, resizing, written, written_held,
};

const PAGE: usize = 4096;

struct Mapping {
    addr: usize,
    len: usize,
    of: Arc<OpenFile>,
    off: u64,
    backing: c_int,
    name: CString,
    /// Mapped with PROT_WRITE, or made writable since (`mprotect`): only then can it hold
    /// changes to write back.
    writable: bool,
    /// Some of it made PROT_NONE since (`mprotect`): its bytes are read back through the
    /// backing file, not the mapping.
    unreadable: bool,
    /// The process generation (`session::generation`) that made it: a forked child leaves
    /// its parent's mappings to the parent.
    born: u64,
    /// Counted by the daemon for this process (`Fs::set_mapped`): given up when forgotten.
    counted: bool,
    /// Which pages this process stored to since they were last written back (`dirty.rs`).
    tracking: dirty::Tracking,
}

static MAPS: Mutex<Vec<Mapping>> = Mutex::new(Vec::new());
/// How many shared mappings exist: munmap/msync/writes look no further when zero.
static NMAPS: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// Set while this thread holds `MAPS`. Writing a mapping back runs the engine, whose own
    /// msync/munmap calls land on this module's exports: they must go straight to the
    /// kernel rather than wait for the lock their own thread holds.
    static HOLDING: Cell<bool> = const { Cell::new(false) };
}

/// Whether this thread is inside the shim's mapping code (see `HOLDING`).
fn reentered() -> bool {
    HOLDING.try_with(|h| h.get()).unwrap_or(false)
}

struct Maps(std::sync::MutexGuard<'static, Vec<Mapping>>);

impl std::ops::Deref for Maps {
    type Target = Vec<Mapping>;
    fn deref(&self) -> &Vec<Mapping> {
        &self.0
    }
}

impl std::ops::DerefMut for Maps {
    fn deref_mut(&mut self) -> &mut Vec<Mapping> {
        &mut self.0
    }
}

impl Drop for Maps {
    fn drop(&mut self) {
        let _ = HOLDING.try_with(|h| h.set(false));
    }
}

fn maps() -> Maps {
    let g = MAPS.lock().unwrap_or_else(|e| e.into_inner());
    let _ = HOLDING.try_with(|h| h.set(true));
    Maps(g)
}

/// Fill `dst` from the file at `off` (zeros past its end).
fn load(of: &OpenFile, dst: &mut [u8], off: u64) -> Res<()> {
    let mut done = 0;
    while done < dst.len() {
        let n = pread_file(of, &mut dst[done..], off + done as u64)?;
        if n == 0 {
            dst[done..].fill(0);
            break;
        }
        done += n;
    }
    Ok(())
}

/// What an mmap call on a pool file asked for.
#[derive(Clone, Copy)]
struct MapCall {
    addr: *mut c_void,
    len: usize,
    prot: c_int,
    flags: c_int,
    off: u64,
}

fn shared(of: &Arc<OpenFile>, call: MapCall) -> Res<*mut c_void> {
    let MapCall {
        addr,
        len,
        prot,
        flags,
        off,
    } = call;
    let writable = prot & libc::PROT_WRITE != 0;
    if !of.readable() || (writable && !of.writable()) {
        return Err(libc::EACCES);
    }
    let h = of.handle();
    let name = backing_name(h)?;
    // The daemon counts mappings of files this process holds open: a description
    // inherited across fork or exec is opened on first use.
    of.with_file(|_| Ok(()))?;
    // Before the backing file is filled: a writer that misses the bit wrote before the
    // fill read the file.
    session::fs()?.set_mapped(h, true).map_err(en)?;
    let (fd, first) = lock_backing(&name).inspect_err(|_| {
        let _ = session::fs().map(|fs| fs.set_mapped(h, false));
    })?;
    let end = (off + len as u64).div_ceil(PAGE as u64) * PAGE as u64;
    let mapped = prepare_backing(of, fd, first, end).and_then(|_| {
        // SAFETY: mapping the backing file as the caller asked.
        let p = unsafe { real::mmap(addr, len, prot, flags, fd, off as off_t) };
        if p == libc::MAP_FAILED {
            Err(errno())
        } else {
            Ok(p)
        }
    });
    match mapped {
        Ok(p) => {
            let size = crate::io::size_of(of).unwrap_or(u64::MAX);
            let tracking = dirty::Tracking::new(p as usize, len, off, size, writable);
            maps().push(Mapping {
                addr: p as usize,
                len,
                of: of.clone(),
                off,
                backing: fd,
                name,
                writable,
                unreadable: prot == libc::PROT_NONE,
                born: session::generation(),
                counted: true,
                tracking,
            });
            NMAPS.fetch_add(1, Ordering::AcqRel);
            Ok(p)
        }
        Err(e) => {
            crate::ownfds::close(fd);
            let _ = session::fs().map(|fs| fs.set_mapped(h, false));
            Err(e)
        }
    }
}

/// Whether this process may write the file of `of` by its mode (the pool has no ACLs),
/// with the credentials the pool checks it by: a backing file it makes is then one that
/// other processes and the server trust (`sidefiles::map_file_trusted`).
fn may_write(of: &OpenFile) -> bool {
    let Ok(fs) = session::fs() else {
        return false;
    };
    let c = fs.creds();
    of.with_file(|f| f.metadata().map_err(en))
        .is_ok_and(|m| c.is_root() || c.class_bits(m.uid, m.gid, m.mode) & 0o2 != 0)
}

/// Gives mappings up when dropped (after the call that replaced them).
struct Forget(Vec<Mapping>);

impl Drop for Forget {
    fn drop(&mut self) {
        if self.0.is_empty() {
            return;
        }
        let _op = op();
        for m in self.0.drain(..) {
            forget(m);
        }
    }
}

macro_rules! mmaps {
    ($($name:ident),*) => {$(
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(addr: *mut c_void, len: size_t, prot: c_int, flags: c_int, fd: c_int, off: off_t) -> *mut c_void {
    crate::guarded!(libc::MAP_FAILED, {
            // A fixed mapping replaces what was there: our mappings there are written back
            // and given up, as munmap would.
            let replaced = if flags & libc::MAP_FIXED != 0
                && NMAPS.load(Ordering::Acquire) != 0
                && !reentered()
            {
                detach(addr as usize, len)
            } else {
                Vec::new()
            };
            let _forget = Forget(replaced);
            if flags & libc::MAP_FIXED != 0 && copies::any() && !reentered() {
                copies::forget(addr as usize, (addr as usize).saturating_add(len));
            }
            if flags & libc::MAP_ANONYMOUS != 0 {
                // SAFETY: forwarding unchanged.
                return Ok(unsafe { real::$name(addr, len, prot, flags, fd, off) });
            }
            let of = ours!(fd, real::$name(addr, len, prot, flags, fd, off));
            guard(libc::MAP_FAILED, || {
                let _op = op();
                if len == 0 || off < 0 || off as usize % PAGE != 0 {
                    return Err(libc::EINVAL);
                }
                if of.is_dir() {
                    return Err(libc::ENODEV);
                }
                // A read-only shared mapping joins the backing file too, so that writes
                // show in it as they do on Linux (SQLite maps its database read-only and
                // writes it with pwrite; a read-only SQLite connection or LMDB
                // environment maps it through a descriptor opened read-only, and read
                // stale pages from a copy before 2026-11-27). Only a process that may
                // write the file makes a backing file that others trust; one that may
                // not maps a copy of the file at mmap time.
                // The mapping's type is a field of the flags, not a bit: MAP_PRIVATE (2)
                // shares a bit with MAP_SHARED_VALIDATE (3).
                let kind = flags & libc::MAP_TYPE;
                let is_shared = kind == libc::MAP_SHARED || kind == libc::MAP_SHARED_VALIDATE;
                let call = MapCall { addr, len, prot, flags, off: off as u64 };
                if is_shared && (prot & libc::PROT_WRITE != 0 || of.writable()) {
                    shared(&of, call)
                } else if is_shared && may_write(&of) {
                    // Where the backing file cannot be had (a daemon of another user
                    // refuses to count the mapping, ENODEV), the copy this was before.
                    shared(&of, call).or_else(|_| copies::snapshot(&of, call, true))
                } else {
                    copies::snapshot(&of, call, is_shared)
                }
            })
        })
}
    )*};
}
mmaps!(mmap, mmap64);

#[unsafe(no_mangle)]
pub unsafe extern "C" fn msync(addr: *mut c_void, len: size_t, flags: c_int) -> c_int {
    crate::guarded!(-1, {
        if NMAPS.load(Ordering::Acquire) == 0 || reentered() {
            // SAFETY: forwarding unchanged.
            return Ok(unsafe { real::msync(addr, len, flags) });
        }
        let r = guard(-1, || {
            let _op = op();
            let (a, end) = (addr as usize, (addr as usize).saturating_add(len));
            let mut maps = maps();
            let inside = |m: &Mapping| m.addr < end && a < m.addr + m.len;
            // The parts of files the range maps: (backing file, from, to in the file).
            let mut parts = Vec::new();
            for m in maps.iter_mut() {
                if inside(m) {
                    let (from, to) = (a.max(m.addr) - m.addr, end.min(m.addr + m.len) - m.addr);
                    parts.push((m.name.clone(), m.off + from as u64, m.off + to as u64));
                }
                write_back(m, a, end, true)?;
            }
            // Linux's msync writes the file's pages back whichever mapping stored to them:
            // so the stores of this process's other mappings of those parts too (found in
            // review: they were written back only at that mapping's own msync or munmap).
            // Not a forked child's copies of its parent's mappings: the parent's to write.
            let now = session::generation();
            for m in maps.iter_mut().filter(|m| !inside(m) && m.born == now) {
                for (name, from, to) in &parts {
                    let mapped = m.off..m.off + m.len as u64;
                    if m.name == *name && *from < mapped.end && mapped.start < *to {
                        let start = m.addr + from.saturating_sub(m.off) as usize;
                        let stop = m.addr + (to - m.off).min(m.len as u64) as usize;
                        write_back(m, start, stop, true)?;
                    }
                }
            }
            Ok(0)
        });
        if r < 0 {
            return Ok(r);
        }
        // SAFETY: forwarding unchanged.
        unsafe { real::msync(addr, len, flags) }
    })
}

/// A shared mapping made writable holds changes to write back; of a descriptor not opened
/// for writing it cannot be made writable (EACCES), as on Linux. Copies note their new
/// protection once the kernel has taken it (`copies.rs`).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mprotect(addr: *mut c_void, len: size_t, prot: c_int) -> c_int {
    crate::guarded!(-1, {
        let (a, end) = (addr as usize, (addr as usize).saturating_add(len));
        let copies_here = copies::any() && !reentered();
        if copies_here && copies::refuses(a, end, prot) {
            crate::util::set_errno(libc::EACCES);
            return Ok(-1);
        }
        let r = protect_shared(addr, len, prot);
        if r == 0 && copies_here {
            copies::protected(a, end, prot);
        }
        r
    })
}

/// `mprotect` where shared mappings may lie: EACCES for one of a descriptor not opened for
/// writing made writable; otherwise the kernel's call, then the mappings' flags.
fn protect_shared(addr: *mut c_void, len: size_t, prot: c_int) -> c_int {
    if NMAPS.load(Ordering::Acquire) == 0 || reentered() {
        // SAFETY: forwarding unchanged.
        return unsafe { real::mprotect(addr, len, prot) };
    }
    let (a, end) = (addr as usize, (addr as usize).saturating_add(len));
    let _op = op();
    let mut maps = maps();
    let hit = |m: &Mapping| m.addr < end && a < m.addr + m.len;
    let writes = prot & libc::PROT_WRITE != 0;
    if writes && maps.iter().any(|m| hit(m) && !m.of.writable()) {
        crate::util::set_errno(libc::EACCES);
        return -1;
    }
    // SAFETY: forwarding unchanged.
    let r = unsafe { real::mprotect(addr, len, prot) };
    if r == 0 {
        for m in maps.iter_mut().filter(|m| hit(m)) {
            m.writable |= writes;
            m.unreadable |= prot == libc::PROT_NONE;
            m.tracking.unsure();
        }
    }
    r
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn munmap(addr: *mut c_void, len: size_t) -> c_int {
    crate::guarded!(-1, {
        if copies::any() && !reentered() {
            copies::forget(addr as usize, (addr as usize).saturating_add(len));
        }
        if NMAPS.load(Ordering::Acquire) == 0 || reentered() {
            // SAFETY: forwarding unchanged.
            return Ok(unsafe { real::munmap(addr, len) });
        }
        let gone = detach(addr as usize, len);
        // SAFETY: forwarding unchanged.
        let r = unsafe { real::munmap(addr, len) };
        let _op = op();
        for m in gone {
            forget(m);
        }
        r
    })
}

/// `mremap` of a shared mapping of ours (None: none there). A whole mapping grows,
/// shrinks or moves (`MREMAP_MAYMOVE`) as the kernel's does, its tail written back first
/// when it shrinks; Python's `mmap.resize` does so after truncating the file, and failed
/// with ENOMEM before (found by probing). Part of a mapping, `MREMAP_FIXED` or
/// `MREMAP_DONTUNMAP`: ENOMEM, as before (the bookkeeping would have to split it).
fn remap_shared(
    addr: *mut c_void,
    old: size_t,
    new: size_t,
    flags: c_int,
) -> Option<Res<*mut c_void>> {
    let (a, end) = (addr as usize, (addr as usize).saturating_add(old));
    let mut maps = maps();
    let i = maps
        .iter()
        .position(|m| m.addr < end && a < m.addr + m.len)?;
    let m = &mut maps[i];
    if m.addr != a || m.len != old || new == 0 || flags & !libc::MREMAP_MAYMOVE != 0 {
        return Some(Err(libc::ENOMEM));
    }
    // Shrinking: the part cut off is written back first. Growing: the backing file is
    // filled from the file as far as the mapping reaches, as for a mapping that joins it
    // (its pages past the end would fault, and read as zeros they would be written back
    // over the file's bytes as stores).
    let ready = if new < old {
        writeback::write_back(m, a + new, end, false)
    } else {
        prepare_backing(&m.of, m.backing, false, m.off + new as u64)
    };
    if let Err(e) = ready {
        return Some(Err(e));
    }
    // SAFETY: the caller's mapping, resized as it asked.
    let p = unsafe { real::mremap(addr, old, new, flags, std::ptr::null_mut()) };
    if p == libc::MAP_FAILED {
        return Some(Err(crate::util::errno()));
    }
    maps[i].addr = p as usize;
    maps[i].len = new;
    // Moved, the kernel dropped the registration; grown in place, the new part was never
    // protected.
    maps[i].tracking.unsure();
    Some(Ok(p))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn mremap(
    addr: *mut c_void,
    old: size_t,
    new: size_t,
    flags: c_int,
    naddr: *mut c_void,
) -> *mut c_void {
    crate::guarded!(libc::MAP_FAILED, {
        // Under the operation guard, as every other taking of MAPS: a fork waits for it,
        // so no child starts with the lock held.
        if NMAPS.load(Ordering::Acquire) != 0 && !reentered() {
            let _op = op();
            if let Some(r) = remap_shared(addr, old, new, flags) {
                return Ok(match r {
                    Ok(p) => p,
                    Err(e) => {
                        crate::util::set_errno(e);
                        libc::MAP_FAILED
                    }
                });
            }
        }
        if copies::any() && !reentered() {
            // Moved onto a copy, that copy is gone.
            if flags & libc::MREMAP_FIXED != 0 {
                copies::forget(naddr as usize, (naddr as usize).saturating_add(new));
            }
            match copies::remap(addr, old, new, flags, naddr) {
                Some(Ok(p)) => return Ok(p),
                Some(Err(e)) => {
                    crate::util::set_errno(e);
                    return Ok(libc::MAP_FAILED);
                }
                None => {}
            }
        }
        // SAFETY: forwarding unchanged.
        unsafe { real::mremap(addr, old, new, flags, naddr) }
    })
}

//! Write-back of a shared mapping's changed pages to the file (msync, munmap, exit, exec),
//! and giving mappings up.

use super::backing::{FillLock, reopen_backing};
use super::{Mapping, NMAPS, PAGE, load, maps, reentered};
use crate::real;
use crate::session::{self, op};
use crate::table::OpenFile;
use crate::util::{Res, en, guard};
use std::sync::atomic::Ordering;

/// Write a mapping's bytes back to the file at `off`, where they belong even on a
/// descriptor opened for appending. Nothing else: the bytes came from the backing file,
/// which every mapping shows, and the fill lock held exclusively keeps any other write-back
/// from comparing meanwhile.
fn put_back(of: &OpenFile, data: &[u8], off: u64) -> Res<()> {
    if !of.writable() {
        return Err(libc::EBADF);
    }
    of.with_file(|f| f.write_in_place(data, off).map_err(en))?;
    Ok(())
}

/// Write the pages of `m` within `from..to` (addresses) that this process stored to back to
/// the file: those the kernel reports (`dirty.rs`), or, where its record is not sure, every
/// page that differs from the file. `msync`: the caller may protect an unsure mapping
/// again (`dirty::stored`), as an msync of it all compares it all.
pub(super) fn write_back(m: &mut Mapping, from: usize, to: usize, msync: bool) -> Res<()> {
    if !m.writable {
        return Ok(());
    }
    let from = from.max(m.addr);
    let to = to.min(m.addr + m.len);
    if from >= to {
        return Ok(());
    }
    let from = from - (from - m.addr) % PAGE;
    let to = to
        .next_multiple_of(PAGE)
        .min(m.addr + m.len.next_multiple_of(PAGE));
    let whole = msync && from == m.addr && to >= m.addr + m.len;
    let ranges = match super::dirty::stored(m, from, to, whole) {
        Some(r) if r.is_empty() => return Ok(()),
        Some(r) => r,
        None => vec![(from, to)],
    };
    // Even a page stored to is compared: a store may have put back the bytes the file has.
    // The fill lock held exclusively, on a description of its own (a lock is one per
    // description, and the mapping's is shared with other threads), across the compares and
    // the writes back: a write of another process or thread holds its shared side from
    // before its commit until its bytes are in the backing file, so a page written back
    // holds every write committed before (compared then, a page whose write had not landed
    // yet was written back over it: tests/c/mapsync.c). Without a description of its own
    // (no /proc, no descriptor left), the mapping's: every user of it here writes back
    // under MAPS, which this thread holds. Held for a chunk at a time, so that writers of
    // the file wait for one chunk's compares, not a whole large mapping's.
    let own = own_description(m.backing);
    let fd = own.unwrap_or(m.backing);
    let mut r = Ok(());
    let mut held: Option<Hold> = None;
    'ranges: for (i, &(a, b)) in ranges.iter().enumerate() {
        let mut p = a;
        while p < b {
            let done = Hold::take(&mut held, fd, &m.of).and_then(|h| {
                let end = b.min(p + h.left);
                write_back_locked(m, p, end, h.size)?;
                h.left -= end - p;
                Ok(end)
            });
            match done {
                Ok(end) => p = end,
                Err(e) => {
                    // Stores not written back, whose record the scan has cleared: kept
                    // for the next write-back.
                    let rest = std::iter::once((p, b)).chain(ranges[i + 1..].iter().copied());
                    m.tracking.keep(rest.collect::<Vec<_>>());
                    r = Err(e);
                    break 'ranges;
                }
            }
            if held.as_ref().is_some_and(|h| h.left == 0) {
                held = None;
            }
        }
    }
    drop(held);
    if let Some(fd) = own {
        crate::ownfds::close(fd);
    }
    r
}

/// How much of a mapping one hold of the fill lock writes back (1 MiB).
const CHUNK: usize = 256 * PAGE;

/// The fill lock held exclusively for one chunk of a write-back.
struct Hold {
    _fill: FillLock,
    /// The file's size, read under the lock (a truncate changes it under the lock).
    size: u64,
    /// How many more bytes of the mapping this hold may write back.
    left: usize,
}

impl Hold {
    /// The hold in `held`, taken first if there is none.
    fn take<'a>(held: &'a mut Option<Hold>, fd: libc::c_int, of: &OpenFile) -> Res<&'a mut Hold> {
        if held.is_none() {
            let fill = FillLock::exclusive(fd);
            *held = Some(Hold {
                size: crate::io::size_of(of)?,
                _fill: fill,
                left: CHUNK,
            });
        }
        Ok(held.as_mut().expect("taken above"))
    }
}

/// A new open file description of the file `fd` names (removed or not), at a high number.
fn own_description(fd: libc::c_int) -> Option<libc::c_int> {
    crate::util::reopen(fd, libc::O_RDWR)
        .ok()
        .map(crate::util::move_high)
}

/// `write_back`'s compares and writes of the pages `from..to` (page-aligned), the fill
/// lock held; `size`: the file's, read under it.
fn write_back_locked(m: &Mapping, from: usize, to: usize, size: u64) -> Res<()> {
    let mut page = vec![0u8; PAGE];
    let mut held = vec![0u8; if m.unreadable { PAGE } else { 0 }];
    let mut a = from;
    while a < to {
        let foff = m.off + (a - m.addr) as u64;
        if foff >= size {
            break;
        }
        let n = PAGE.min(m.addr + m.len - a).min((size - foff) as usize);
        let mem = if m.unreadable {
            // The same bytes as the mapping's (it maps the backing file there), readable
            // whatever the mapping's protection now is.
            let got = &mut held[..n];
            // SAFETY: reading into our own buffer of n bytes from our backing descriptor.
            let r = unsafe { real::pread(m.backing, got.as_mut_ptr().cast(), n, foff as _) };
            if r != n as isize {
                return Err(libc::EIO);
            }
            &held[..n]
        } else {
            // SAFETY: the mapping is live, readable, and n bytes from `a` lie inside it.
            unsafe { std::slice::from_raw_parts(a as *const u8, n) }
        };
        load(&m.of, &mut page[..n], foff)?;
        if page[..n] != *mem {
            put_back(&m.of, mem, foff)?;
        }
        a += PAGE;
    }
    Ok(())
}

/// Write every shared writable mapping back whole: at exit and before exec, which end the
/// mappings without munmap (on Linux their pages are the file's; here they would stay in
/// the /dev/shm backing file and never reach EngramFS).
pub fn write_back_all() {
    if NMAPS.load(Ordering::Acquire) == 0 || reentered() {
        return;
    }
    let _op = op();
    let now = session::generation();
    for m in maps().iter_mut().filter(|m| m.born == now) {
        let (a, end) = (m.addr, m.addr + m.len);
        let _ = guard(-1, || write_back(m, a, end, false).map(|_| 0));
    }
}

/// At exit: every mapping written back, and its backing file given up (removed if no
/// other process maps the inode), as munmap would.
pub fn at_exit() {
    write_back_all();
    if NMAPS.load(Ordering::Acquire) == 0 || reentered() {
        return;
    }
    let now = session::generation();
    let _op = op();
    let mine: Vec<Mapping> = {
        let mut all = maps();
        let (mine, theirs) = std::mem::take(&mut *all)
            .into_iter()
            .partition(|m| m.born == now);
        *all = theirs;
        mine
    };
    for m in mine {
        forget(m);
    }
}

/// Take the pages `a..end` out of the tracked mappings (munmap, or an mmap with MAP_FIXED
/// over them): mappings inside the range are returned, to be given up once unmapped;
/// mappings it covers in part keep the rest, a piece on each side, the second with a
/// descriptor of its own to the backing file. (Kept whole, a mapping whose pages were
/// unmapped or replaced was read in full when written back: a fault, or another mapping's
/// memory written into the file.)
fn cut(all: &mut Vec<Mapping>, a: usize, end: usize) -> Vec<Mapping> {
    let mut gone = Vec::new();
    for mut m in std::mem::take(all) {
        let (ms, me) = (m.addr, m.addr + m.len);
        if me <= a || end <= ms {
            all.push(m);
            continue;
        }
        if a <= ms && me <= end {
            gone.push(m);
            continue;
        }
        if ms < a && end < me {
            // A piece after the hole: its own open description of the backing file, so
            // that giving one piece up never removes the file the other still maps.
            if let Some(fd) = reopen_backing(&m.name) {
                // Each piece is given up on its own, and so counted on its own.
                let counted = m.counted
                    && session::fs().is_ok_and(|fs| fs.set_mapped(m.of.handle(), true).is_ok());
                all.push(Mapping {
                    addr: end,
                    len: me - end,
                    of: m.of.clone(),
                    off: m.off + (end - ms) as u64,
                    backing: fd,
                    name: m.name.clone(),
                    writable: m.writable,
                    unreadable: m.unreadable,
                    born: m.born,
                    counted,
                    tracking: m.tracking.clone(),
                });
                NMAPS.fetch_add(1, Ordering::AcqRel);
            }
            m.len = a - ms;
        } else if ms < a {
            m.len = a - ms;
        } else {
            m.off += (end - ms) as u64;
            m.len = me - end;
            m.addr = end;
        }
        all.push(m);
    }
    gone
}

/// Before munmap of `a..end`, or an mmap with MAP_FIXED over it: write back what the
/// range holds of our mappings and take it out of them; returns the mappings to give up
/// once the range is unmapped.
pub(super) fn detach(a: usize, len: usize) -> Vec<Mapping> {
    let end = a.saturating_add(len).next_multiple_of(PAGE);
    let _op = op();
    let mut all = maps();
    for m in all.iter_mut() {
        let _ = guard(-1, || write_back(m, a, end, false).map(|_| 0));
    }
    cut(&mut all, a, end)
}

pub(super) fn forget(m: Mapping) {
    if m.born != session::generation() {
        // A forked child's copy of its parent's mapping: its descriptor shares the
        // parent's lock, and the parent, which counted it, gives it up.
        crate::ownfds::close(m.backing);
        NMAPS.fetch_sub(1, Ordering::AcqRel);
        return;
    }
    crate::ownfds::close(m.backing);
    if m.counted {
        // The server removes the backing file when its count of the inode's mappings
        // reaches zero, in the same step that clears the bit: a new mapping then finds it
        // gone and fills a new one, never joins a file that missed writes. If a counted
        // mapper died unseen, the count stays above zero until the server sees the death,
        // and the file (with that process's stores) until it has written them back
        // (`server/backing.rs`). Posted: nothing waits for it.
        let _ = session::fs().map(|fs| fs.set_mapped(m.of.handle(), false));
    } else {
        // Never counted (its count was refused): removed here if nobody else holds it.
        // SAFETY: reopening and locking the file by name, then unlinking it.
        unsafe {
            let fd = real::open(
                m.name.as_ptr(),
                libc::O_RDWR | libc::O_CLOEXEC | libc::O_NOFOLLOW,
                0,
            );
            if fd >= 0 {
                if real::flock(fd, libc::LOCK_EX | libc::LOCK_NB) == 0 {
                    real::unlink(m.name.as_ptr());
                }
                real::close(fd);
            }
        }
    }
    NMAPS.fetch_sub(1, Ordering::AcqRel);
}

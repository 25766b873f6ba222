//! POSIX record locks answered without the kernel, for a pool opened in this process.
//!
//! Such a pool is held exclusively by this process (a second one is refused, a forked child
//! cannot use it), and POSIX record locks of one process never conflict with each other:
//! a `F_SETLK`/`F_SETLKW` always succeeds and `F_GETLK` always finds nothing. Taking them on
//! the per-inode lock file in /dev/shm cost a system call each, and sqlite3 takes two or
//! three per statement (`strace -c`: 116,091 `fcntl` calls for 44,000 statements).
//!
//! What the process holds is still recorded, per file, as the ranges a kernel would hold:
//! OFD locks (per open file description) do conflict with the process's POSIX locks. The
//! first OFD request on a file moves its POSIX locks into the kernel (`to_kernel`); from
//! then on every lock on that file is the kernel's again. As POSIX says, closing any
//! descriptor of a file releases the process's locks on it (`closed`, also for the locks
//! the kernel holds, in every mode). `flock` locks are a separate kind on Linux and stay
//! the kernel's.

use crate::table::OpenFile;
use crate::util::{Res, errno};
use engram_core::Handle;
use libc::c_int;
use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// A locked byte range, both ends included.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Range {
    start: u64,
    end: u64,
    write: bool,
}

#[derive(Default)]
struct FileLocks {
    ranges: Vec<Range>,
    /// Locks on this file are the kernel's (an OFD lock was asked for).
    kernel: bool,
}

type Key = (u64, u32);

static LOCKS: Mutex<Option<HashMap<Key, FileLocks>>> = Mutex::new(None);

/// Set once this process has opened its pool itself.
static IN_PROCESS: AtomicBool = AtomicBool::new(false);

pub fn set_in_process() {
    IN_PROCESS.store(true, Ordering::Release);
}

fn key(h: Handle) -> Key {
    (h.ino, h.generation)
}

/// How many files `LOCKS` holds: a close of a file nobody locked (the usual case) then
/// needs neither the mutex nor a lookup.
static FILES: AtomicUsize = AtomicUsize::new(0);

fn with<T>(f: impl FnOnce(&mut HashMap<Key, FileLocks>) -> T) -> T {
    let mut g = LOCKS.lock().unwrap_or_else(|e| e.into_inner());
    let files = g.get_or_insert_with(HashMap::new);
    let r = f(files);
    FILES.store(files.len(), Ordering::Release);
    r
}

/// The range of an absolute `struct flock` (`l_whence` already SEEK_SET): `l_len` 0 runs
/// to the end of any file, a negative one ends just before `l_start`.
fn range_of(f: &libc::flock) -> Res<(u64, u64)> {
    let (start, len) = (f.l_start, f.l_len);
    let (first, last) = match len {
        0 => (start, i64::MAX),
        l if l > 0 => (start, start.checked_add(l - 1).ok_or(libc::EOVERFLOW)?),
        l => (start.checked_add(l).ok_or(libc::EINVAL)?, start - 1),
    };
    if first < 0 || last < first {
        return Err(libc::EINVAL);
    }
    Ok((first as u64, last as u64))
}

/// Set `[start, end]` to `write`/read-locked, or unlocked (`lock` None), as a POSIX lock
/// of the owner of `ranges`: overlapped parts are replaced, neighbours of one kind merged.
fn set(ranges: &mut Vec<Range>, start: u64, end: u64, lock: Option<bool>) {
    let mut out = Vec::with_capacity(ranges.len() + 2);
    for r in ranges.drain(..) {
        if r.end < start || r.start > end {
            out.push(r);
            continue;
        }
        if r.start < start {
            out.push(Range {
                end: start - 1,
                ..r
            });
        }
        if r.end > end {
            out.push(Range {
                start: end + 1,
                ..r
            });
        }
    }
    if let Some(write) = lock {
        out.push(Range { start, end, write });
    }
    out.sort_by_key(|r| r.start);
    for r in out {
        match ranges.last_mut() {
            Some(last) if last.write == r.write && last.end.checked_add(1) == Some(r.start) => {
                last.end = r.end;
            }
            _ => ranges.push(r),
        }
    }
}

/// Answer a POSIX lock request (`F_SETLK`, `F_SETLKW`, `F_GETLK`; `f` absolute) on `of`'s
/// file without the kernel, or None if its locks are the kernel's (or the pool is not
/// this process's own).
pub fn posix(of: &OpenFile, cmd: c_int, f: &mut libc::flock) -> Option<Res<c_int>> {
    if !IN_PROCESS.load(Ordering::Acquire) {
        return None;
    }
    // A forked child cannot use its parent's pool: the error it gets everywhere.
    if let Err(e) = crate::session::fs() {
        return Some(Err(e));
    }
    let (start, end) = match range_of(f) {
        Ok(r) => r,
        Err(e) => return Some(Err(e)),
    };
    let lock = match f.l_type as c_int {
        libc::F_RDLCK => Some(false),
        libc::F_WRLCK => Some(true),
        // F_GETLK asks about a lock: F_UNLCK is no question (EINVAL, as Linux says).
        libc::F_UNLCK if cmd != libc::F_GETLK => None,
        _ => return Some(Err(libc::EINVAL)),
    };
    with(|files| {
        let fl = files.entry(key(of.handle)).or_default();
        if fl.kernel {
            return None;
        }
        if cmd == libc::F_GETLK {
            // Nothing of this process's own conflicts, and no other process has the pool.
            f.l_type = libc::F_UNLCK as _;
        } else {
            set(&mut fl.ranges, start, end, lock);
        }
        Some(Ok(0))
    })
}

/// Before an OFD lock request on `of`'s file: its POSIX locks held here go to the kernel,
/// which from now on answers every lock on the file.
pub fn to_kernel(of: &OpenFile) -> Res<()> {
    if !IN_PROCESS.load(Ordering::Acquire) {
        return Ok(());
    }
    // A forked child cannot use its parent's pool, nor take over the parent's locks.
    crate::session::fs()?;
    let fd = of.lock_fd()?;
    with(|files| {
        let fl = files.entry(key(of.handle)).or_default();
        if fl.kernel {
            return Ok(());
        }
        for r in &fl.ranges {
            let mut k: libc::flock = libc::flock {
                l_type: if r.write {
                    libc::F_WRLCK
                } else {
                    libc::F_RDLCK
                } as _,
                l_whence: libc::SEEK_SET as _,
                l_start: r.start as i64,
                l_len: if r.end >= i64::MAX as u64 {
                    0
                } else {
                    (r.end - r.start + 1) as i64
                },
                l_pid: 0,
            };
            // SAFETY: fcntl on our lock descriptor with a local struct flock. No OFD lock
            // exists yet (this is the first), so nothing can conflict.
            if unsafe { crate::real::fcntl(fd, libc::F_SETLK, &mut k as *mut _ as libc::c_ulong) }
                < 0
            {
                // The kernel held none of the process's POSIX locks on the file before:
                // take back what was handed over, and keep answering here.
                let e = errno();
                unlock_all(fd);
                return Err(e);
            }
        }
        fl.ranges.clear();
        fl.kernel = true;
        Ok(())
    })
}

/// Release every POSIX lock of the process on the lock file `fd` refers to.
fn unlock_all(fd: c_int) {
    let mut k = libc::flock {
        l_type: libc::F_UNLCK as _,
        l_whence: libc::SEEK_SET as _,
        l_start: 0,
        l_len: 0,
        l_pid: 0,
    };
    // SAFETY: fcntl on our lock descriptor with a local struct flock.
    unsafe { crate::real::fcntl(fd, libc::F_SETLK, &mut k as *mut _ as libc::c_ulong) };
}

/// A descriptor of `of`'s file was closed: the process's POSIX locks on the file are
/// released, as Linux does on any close (not only the description's last).
pub fn closed(of: &OpenFile) {
    if IN_PROCESS.load(Ordering::Acquire) {
        if FILES.load(Ordering::Acquire) == 0 {
            // No file of this process was ever locked with a POSIX lock or handed over.
            return;
        }
        let h = of.handle;
        let answered_here = with(|files| match files.get(&key(h)) {
            Some(fl) if !fl.kernel => {
                files.remove(&key(h));
                true
            }
            Some(_) => false,
            None => true,
        });
        if answered_here {
            return;
        }
    }
    // The kernel's: through this description's lock file, or any other of the file's (a
    // description that never locked has none, and its close releases them all the same).
    if let Some(fd) = of
        .lock_fd_if_open()
        .or_else(|| crate::lockfds::of_file(of.handle))
    {
        unlock_all(fd);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(start: u64, end: u64, write: bool) -> Range {
        Range { start, end, write }
    }

    #[test]
    fn ranges_split_replace_and_merge_as_posix_locks_do() {
        let mut v = Vec::new();
        set(&mut v, 0, 99, Some(false));
        set(&mut v, 40, 59, Some(true));
        assert_eq!(v, [r(0, 39, false), r(40, 59, true), r(60, 99, false)]);
        set(&mut v, 50, 69, None);
        assert_eq!(v, [r(0, 39, false), r(40, 49, true), r(70, 99, false)]);
        set(&mut v, 40, 49, Some(false));
        assert_eq!(
            v,
            [r(0, 49, false), r(70, 99, false)],
            "neighbours of one kind merge"
        );
        set(&mut v, 50, 69, Some(false));
        assert_eq!(v, [r(0, 99, false)]);
        set(&mut v, 0, u64::MAX, None);
        assert!(v.is_empty());
    }

    #[test]
    fn flock_ranges_follow_posix() {
        // SAFETY: struct flock is plain data; all-zero is a valid value.
        let mut f: libc::flock = unsafe { std::mem::zeroed() };
        f.l_start = 10;
        f.l_len = 0;
        assert_eq!(range_of(&f), Ok((10, i64::MAX as u64)));
        f.l_len = 5;
        assert_eq!(range_of(&f), Ok((10, 14)));
        f.l_len = -4;
        assert_eq!(range_of(&f), Ok((6, 9)));
        f.l_len = -11;
        assert_eq!(range_of(&f), Err(libc::EINVAL));
    }
}

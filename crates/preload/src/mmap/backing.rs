//! The backing file in /dev/shm of a shared mapping: its name, opening and locking it,
//! its fill lock, filling it from the file, and zeroing and copying writes into it.

use super::{PAGE, load};
use crate::real;
use crate::session;
use crate::table::OpenFile;
use crate::util::{Res, en, errno};
use engram_core::{Handle, sidefiles};
use libc::{c_int, c_void, off_t};
use std::ffi::CString;

/// An open-file-description lock on one byte of a backing file far past its data: held
/// exclusively while a backing file is filled from the file, shared while a write is
/// copied into it (flock on the same file says who maps it; the two do not interact).
pub(super) struct FillLock(c_int);

impl FillLock {
    const AT: off_t = 1 << 62;
    /// The byte before which every taker of `AT` passes: shared and at once given up by a
    /// writer, held exclusively with `AT` by a filler (and by the server while it waits for
    /// the writers in flight to finish), so that a stream of overlapping writes, each
    /// holding `AT` shared, cannot keep the exclusive side away for ever.
    const GATE: off_t = Self::AT + 1;
    /// Held shared by a writer that found the gate taken, while it waits there; an
    /// exclusive taker waits until nobody holds it before it takes the gate. The lock
    /// keeps no queue: a thread writing a mapping back in a loop (`msync` after `msync`)
    /// gave the gate up and took it again before a woken writer ran, and on a pool in an
    /// ordinary file, where each write-back waits for the pool's own `msync`, another
    /// thread made 1,780 writes in 60 s against 20,000 `msync`s. Taken only by writers that
    /// wait: a stream of writers that find the gate free never holds the exclusive side off.
    const WAITING: off_t = Self::AT + 2;

    fn set(fd: c_int, kind: c_int) {
        Self::set_at(fd, kind, Self::AT);
    }

    fn set_at(fd: c_int, kind: c_int, at: off_t) {
        // Retried when a signal interrupts the wait; any other failure (not expected on a
        // descriptor we hold) lets the copy go ahead unlocked.
        while Self::request(fd, libc::F_OFD_SETLKW, kind, at) != 0 && errno() == libc::EINTR {}
    }

    /// Take byte `at` as `kind` if nobody holds it otherwise, without waiting.
    fn try_at(fd: c_int, kind: c_int, at: off_t) -> bool {
        Self::request(fd, libc::F_OFD_SETLK, kind, at) == 0
    }

    /// One OFD lock request `cmd` on byte `at`: the call's result.
    fn request(fd: c_int, cmd: c_int, kind: c_int, at: off_t) -> c_int {
        // SAFETY: plain data, for which all zeros is a valid value.
        let mut l: libc::flock = unsafe { std::mem::zeroed() };
        l.l_type = kind as libc::c_short;
        l.l_whence = libc::SEEK_SET as libc::c_short;
        l.l_start = at;
        l.l_len = 1;
        // SAFETY: an OFD lock request on our own descriptor with a valid flock struct.
        unsafe { real::fcntl(fd, cmd, &mut l as *mut libc::flock as libc::c_ulong) }
    }

    pub(super) fn exclusive(fd: c_int) -> FillLock {
        // Writers waiting at the gate go first (`WAITING`): taken and given up at once.
        Self::set_at(fd, libc::F_WRLCK, Self::WAITING);
        Self::set_at(fd, libc::F_UNLCK, Self::WAITING);
        Self::set_at(fd, libc::F_WRLCK, Self::GATE);
        Self::set(fd, libc::F_WRLCK);
        FillLock(fd)
    }

    pub(super) fn shared(fd: c_int) -> FillLock {
        Self::take_shared(fd);
        FillLock(fd)
    }

    /// `AT` shared, through the gate (saying so while it waits there, `WAITING`).
    pub(super) fn take_shared(fd: c_int) {
        let waits = !Self::try_at(fd, libc::F_RDLCK, Self::GATE);
        if waits {
            Self::set_at(fd, libc::F_RDLCK, Self::WAITING);
            Self::set_at(fd, libc::F_RDLCK, Self::GATE);
        }
        Self::set(fd, libc::F_RDLCK);
        Self::set_at(fd, libc::F_UNLCK, Self::GATE);
        if waits {
            Self::set_at(fd, libc::F_UNLCK, Self::WAITING);
        }
    }

    /// Give up `AT` and, if held, the gate.
    pub(super) fn release(fd: c_int) {
        Self::set(fd, libc::F_UNLCK);
        Self::set_at(fd, libc::F_UNLCK, Self::GATE);
    }
}

impl Drop for FillLock {
    fn drop(&mut self) {
        Self::release(self.0);
    }
}

/// Copy the file's bytes in `from..to` into the backing file.
fn fill_backing(of: &OpenFile, fd: c_int, from: u64, to: u64) -> Res<()> {
    let mut buf = vec![0u8; 1 << 20];
    let mut pos = from;
    while pos < to {
        let n = ((to - pos) as usize).min(buf.len());
        load(of, &mut buf[..n], pos)?;
        // SAFETY: writing a local buffer to our backing descriptor.
        if unsafe { real::pwrite64(fd, buf.as_ptr() as *const c_void, n, pos as off_t) } < 0 {
            return Err(errno());
        }
        pos += n as u64;
    }
    Ok(())
}

pub(super) fn backing_stat(fd: c_int) -> Res<libc::stat> {
    // SAFETY: fstat into a local buffer.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { real::fstat(fd, &mut st) } != 0 {
        return Err(errno());
    }
    Ok(st)
}

fn backing_size(fd: c_int) -> Res<u64> {
    backing_stat(fd).map(|st| st.st_size as u64)
}

/// Whether backing file `st` of a file of owner `uid`, group `gid` and mode `mode` is one
/// to take bytes from. Anyone may make files in /dev/shm: one that others may write, or
/// that a user who may not write the file made, would let them change what a mapping
/// shows, and so what it writes back (or what a read gives).
pub(super) fn trusted(st: &libc::stat, uid: u32, gid: u32, mode: u32) -> bool {
    // SAFETY: geteuid has no failure.
    let mine = st.st_uid == unsafe { libc::geteuid() };
    st.st_mode & 0o022 == 0 && (mine || sidefiles::map_file_trusted(st, uid, gid, mode))
}

/// Whether backing file `st` is filled and marked current (see `prepare_backing`).
pub(super) fn current(st: &libc::stat) -> bool {
    sidefiles::map_file_is_current(st.st_mode) && st.st_mode & sidefiles::MAP_FILLED != 0
}

/// Make backing file `fd` ready to map up to `end`: filled from the file if this process
/// is the first to map the inode (`first`, holding it exclusively), grown to `end` if not.
pub(super) fn prepare_backing(of: &OpenFile, fd: c_int, first: bool, end: u64) -> Res<()> {
    let st = backing_stat(fd)?;
    // SAFETY: geteuid has no failure.
    let mine = st.st_uid == unsafe { libc::geteuid() };
    let meta = of.with_file(|f| f.metadata().map_err(en))?;
    if !trusted(&st, meta.uid, meta.gid, meta.mode) {
        return Err(libc::EACCES);
    }
    let _fill = FillLock::exclusive(fd);
    // A file marked current that nobody holds is still the file plus the stores of the
    // mappings counted since it was filled: the server removes it when their count
    // reaches zero, and writes back the stores of any of their processes that died (it
    // counts their mappings until it has seen the death). Joined as it is: writes whose
    // copies have not landed yet land in it. Before 2026-11-26 such a first mapper wrote
    // every page in which the file differed back into the file, to save a dead process's
    // stores, and so also reverted a finished write whose copy had not yet landed (found
    // by probing: two processes re-mapping while a third wrote lost 0.4-2.5% of writes).
    let current = current(&st);
    // SAFETY: ftruncate, fchmod and flock on our own backing descriptor.
    unsafe {
        if first && !current {
            // Nobody maps this inode: start from the file's current contents, then let
            // others join (on failure the descriptor's close drops the lock). Not current
            // while it is filled: a death now leaves nothing to write back.
            // Of the file's group where this process may (it is one of its groups): a user
            // who may write the file through that group is then seen to
            // (`sidefiles::map_file_trusted`), by other users' processes and the server.
            if mine && st.st_uid != meta.uid && st.st_gid != meta.gid {
                real::fchown(fd, u32::MAX, meta.gid);
            }
            let size = crate::io::size_of(of)?;
            let want = end.max(size.div_ceil(PAGE as u64) * PAGE as u64);
            if real::fchmod(fd, 0o600) != 0
                || real::ftruncate(fd, 0) != 0
                || real::ftruncate(fd, want as off_t) != 0
            {
                return Err(errno());
            }
            fill_backing(of, fd, 0, size.min(want))?;
            let done = 0o600 | sidefiles::MAP_CURRENT | sidefiles::MAP_FILLED;
            if real::fchmod(fd, done) != 0 {
                return Err(errno());
            }
            real::flock(fd, libc::LOCK_SH);
        } else {
            // Grown by the writes that fill it (no `ftruncate` first): a process that dies
            // midway leaves no zeros to be taken for stores.
            let have = backing_size(fd)?;
            if have < end {
                fill_backing(of, fd, have, end)?;
            }
            if first {
                real::flock(fd, libc::LOCK_SH);
            }
        }
    }
    Ok(())
}

/// The backing file of inode `h` of this pool.
pub(super) fn backing_name(h: Handle) -> Res<CString> {
    let name = engram_core::sidefiles::map_file(session::pool_id()?, h.ino, h.generation);
    CString::new(name).map_err(|_| libc::EINVAL)
}

/// Open (making it if need be) the backing file `name` and lock it: exclusively if no
/// other process maps it (returns true: its contents are to be filled), shared otherwise.
/// A file removed between the open and the lock by the last process giving its mapping up
/// is opened again: a mapping of it would miss every later write.
/// A file whose first mapper died filling it (`sidefiles::MAP_FILLED` not set when this
/// process gets its shared lock) is let go too, until one opener finds nobody holding it
/// and fills it anew: joined, its unfilled zeros would be written back as stores.
pub(super) fn lock_backing(name: &CString) -> Res<(c_int, bool)> {
    for attempt in 0.. {
        let fd = open_backing(name)?;
        // SAFETY: flock and fstat on our own backing descriptor, into a local buffer.
        let (first, linked, filled) = unsafe {
            let first = real::flock(fd, libc::LOCK_EX | libc::LOCK_NB) == 0;
            if !first {
                real::flock(fd, libc::LOCK_SH);
            }
            let mut st: libc::stat = std::mem::zeroed();
            let ok = real::fstat(fd, &mut st) == 0;
            let filled = st.st_mode & sidefiles::MAP_FILLED != 0;
            (first, ok && st.st_nlink > 0, filled)
        };
        if linked && (first || filled) {
            return Ok((fd, first));
        }
        crate::ownfds::close(fd);
        if attempt > 0 {
            std::thread::yield_now();
        }
        if attempt >= 10_000 {
            break;
        }
    }
    Err(libc::EAGAIN)
}

/// Open (making it if need be) the backing file `name`, at a high descriptor.
fn open_backing(name: &CString) -> Res<c_int> {
    // SAFETY: opening the backing file with the real call.
    let fd = unsafe {
        real::open(
            name.as_ptr(),
            libc::O_RDWR | libc::O_CREAT | libc::O_CLOEXEC,
            0o600,
        )
    };
    if fd < 0 {
        return Err(errno());
    }
    Ok(crate::util::move_high(fd))
}

/// Another descriptor of a backing file, holding its shared lock as the first does.
pub(super) fn reopen_backing(name: &CString) -> Option<c_int> {
    // SAFETY: opening and locking the backing file with the real calls.
    unsafe {
        let fd = real::open(name.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC, 0);
        if fd < 0 {
            return None;
        }
        let fd = crate::util::move_high(fd);
        real::flock(fd, libc::LOCK_SH);
        Some(fd)
    }
}

/// Open the backing file `name` if it exists and is one the shim makes: a regular file
/// with one name that nobody but its owner may write (anyone may make files in /dev/shm:
/// another's could hold the fill lock for good, or be a link elsewhere). At a high number,
/// out of the program's way.
pub(super) fn open_existing_backing(name: &CString) -> Option<c_int> {
    // SAFETY: opening with the real call, not following a symlink.
    let fd = unsafe {
        real::open(
            name.as_ptr(),
            libc::O_RDWR | libc::O_CLOEXEC | libc::O_NOFOLLOW,
            0,
        )
    };
    if fd < 0 {
        return None;
    }
    let fd = crate::util::move_high(fd);
    match backing_stat(fd) {
        Ok(st)
            if st.st_mode & libc::S_IFMT == libc::S_IFREG
                && st.st_nlink == 1
                && st.st_mode & 0o022 == 0 =>
        {
            Some(fd)
        }
        _ => {
            crate::ownfds::close(fd);
            None
        }
    }
}

/// Zero a backing file from `from` to its end (the caller holds its fill lock).
pub(super) fn zero_backing_from(fd: c_int, from: u64) {
    zero_backing_range(fd, from, u64::MAX);
}

/// Zero `[from, to)` of a backing file, as far as it reaches (the caller holds its fill
/// lock).
pub(super) fn zero_backing_range(fd: c_int, from: u64, to: u64) {
    let Ok(size) = backing_size(fd) else {
        return;
    };
    let to = to.min(size);
    if from < to {
        let mode = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
        // SAFETY: punching a hole in a backing descriptor we hold (tmpfs reads zeros there).
        unsafe { real::fallocate(fd, mode, from as off_t, (to - from) as off_t) };
    }
}

/// Write `data` at `off` into a backing file whose fill lock the caller holds (shared).
pub(super) fn copy_into_backing(of: &OpenFile, fd: c_int, data: &[u8], off: u64) {
    // As far as the file reaches now, too: a truncate since the write (which zeroes the
    // backing file under the lock's exclusive side) cut off what lies beyond.
    let (Ok(size), Ok(file_size)) = (backing_size(fd), crate::io::size_of(of)) else {
        return;
    };
    let size = size.min(file_size);
    if off >= size {
        return;
    }
    let n = data.len().min((size - off) as usize);
    // SAFETY: writing the caller's bytes into a backing descriptor we hold.
    unsafe { real::pwrite64(fd, data.as_ptr() as *const c_void, n, off as off_t) };
}

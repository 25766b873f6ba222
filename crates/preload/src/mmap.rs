//! mmap of EngramFS files. A private mapping is a copy of the file taken at mmap time. A
//! shared mapping is backed by a file in /dev/shm named after the inode, which every
//! process mapping that inode shares (so that, for instance, SQLite's WAL index works
//! between processes); msync, munmap, exit and exec write a writable one's changed pages
//! back to EngramFS, where they become durable. Writes to a file some process maps go to
//! the backing file too, so that the mappings see them (SQLite reads its database through
//! a read-only mapping and writes it with pwrite, from every process that opens it): the
//! server keeps a bit per inode that some process maps shared (`Fs::set_mapped`), which
//! every writer reads after its write. A mapping sets it before it fills a backing file
//! from the file, and fills under an exclusive lock that writers of the backing file wait
//! for (`FillLock`): a write is then either in what the fill read or written over it.

use crate::io::pread_of;
use crate::session::{self, op};
use crate::table::OpenFile;
use crate::util::{Res, en, errno, guard};
use crate::{ours, real};
use engram_core::{Handle, sidefiles};
use libc::{c_int, c_void, off_t, size_t};
use std::cell::Cell;
use std::ffi::CString;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

const PAGE: usize = 4096;

struct Mapping {
    addr: usize,
    len: usize,
    of: Arc<OpenFile>,
    off: u64,
    backing: c_int,
    name: CString,
    /// Mapped with PROT_WRITE: only then can it hold changes to write back.
    writable: bool,
    /// The process generation (`session::generation`) that made it: a forked child leaves
    /// its parent's mappings to the parent.
    born: u64,
    /// Counted by the daemon for this process (`Fs::set_mapped`): given up when forgotten.
    counted: bool,
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

/// An open-file-description lock on one byte of a backing file far past its data: held
/// exclusively while a backing file is filled from the file, shared while a write is
/// copied into it (flock on the same file says who maps it; the two do not interact).
struct FillLock(c_int);

impl FillLock {
    const AT: off_t = 1 << 62;
    /// The byte before which every taker of `AT` passes: shared and at once given up by a
    /// writer, held exclusively with `AT` by a filler (and by the server while it waits for
    /// the writers in flight to finish), so that a stream of overlapping writes, each
    /// holding `AT` shared, cannot keep the exclusive side away for ever.
    const GATE: off_t = Self::AT + 1;

    fn set(fd: c_int, kind: c_int) {
        Self::set_at(fd, kind, Self::AT);
    }

    fn set_at(fd: c_int, kind: c_int, at: off_t) {
        // SAFETY: plain data, for which all zeros is a valid value.
        let mut l: libc::flock = unsafe { std::mem::zeroed() };
        l.l_type = kind as libc::c_short;
        l.l_whence = libc::SEEK_SET as libc::c_short;
        l.l_start = at;
        l.l_len = 1;
        // Retried when a signal interrupts the wait; any other failure (not expected on a
        // descriptor we hold) lets the copy go ahead unlocked.
        // SAFETY: an OFD lock request on our own descriptor with a valid flock struct.
        while unsafe {
            real::fcntl(
                fd,
                libc::F_OFD_SETLKW,
                &mut l as *mut libc::flock as libc::c_ulong,
            )
        } != 0
            && errno() == libc::EINTR
        {}
    }

    fn exclusive(fd: c_int) -> FillLock {
        Self::set_at(fd, libc::F_WRLCK, Self::GATE);
        Self::set(fd, libc::F_WRLCK);
        FillLock(fd)
    }

    fn shared(fd: c_int) -> FillLock {
        Self::take_shared(fd);
        FillLock(fd)
    }

    /// `AT` shared, through the gate.
    fn take_shared(fd: c_int) {
        Self::set_at(fd, libc::F_RDLCK, Self::GATE);
        Self::set(fd, libc::F_RDLCK);
        Self::set_at(fd, libc::F_UNLCK, Self::GATE);
    }

    /// Give up `AT` and, if held, the gate.
    fn release(fd: c_int) {
        Self::set(fd, libc::F_UNLCK);
        Self::set_at(fd, libc::F_UNLCK, Self::GATE);
    }
}

impl Drop for FillLock {
    fn drop(&mut self) {
        Self::release(self.0);
    }
}

/// Write a mapping's bytes back to the file at `off`, where they belong even on a
/// descriptor opened for appending, and into the backing file's other users' view.
fn put_back(of: &OpenFile, data: &[u8], off: u64) -> Res<()> {
    if !of.writable() {
        return Err(libc::EBADF);
    }
    let n = of.with_file(|f| f.write_in_place(data, off).map_err(en))?;
    written(of, &data[..n], off);
    Ok(())
}

/// Fill `dst` from the file at `off` (zeros past its end).
fn load(of: &OpenFile, dst: &mut [u8], off: u64) -> Res<()> {
    let mut done = 0;
    while done < dst.len() {
        let n = pread_of(of, &mut dst[done..], off + done as u64)?;
        if n == 0 {
            dst[done..].fill(0);
            break;
        }
        done += n;
    }
    Ok(())
}

fn snapshot(
    of: &OpenFile,
    addr: *mut c_void,
    len: usize,
    prot: c_int,
    flags: c_int,
    off: u64,
) -> Res<*mut c_void> {
    if !of.readable() {
        return Err(libc::EACCES);
    }
    let keep = flags
        & (libc::MAP_FIXED | libc::MAP_FIXED_NOREPLACE | libc::MAP_NORESERVE | libc::MAP_POPULATE);
    // SAFETY: an anonymous private mapping of len bytes.
    let p = unsafe {
        real::mmap(
            addr,
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
    let r = load(of, dst, off).and_then(|_| {
        // SAFETY: protecting our own mapping as the caller asked.
        if unsafe { libc::mprotect(p, len, prot) } != 0 {
            Err(errno())
        } else {
            Ok(())
        }
    });
    if let Err(e) = r {
        // SAFETY: unmapping our own mapping.
        unsafe { real::munmap(p, len) };
        return Err(e);
    }
    Ok(p)
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

/// A backing file this process alone holds but did not fill, made by someone who may write
/// the file (the caller checked): if it is marked current (`sidefiles::MAP_CURRENT`), its
/// last holder
/// died with stores not yet written back (the daemon has not seen the death yet); write
/// every page in which it differs from the file into the file, as that process's exit
/// would have.
fn write_back_left(
    of: &OpenFile,
    fd: c_int,
    st: &libc::stat,
    meta: &engram_core::Metadata,
) -> Res<()> {
    if !sidefiles::map_file_is_current(st.st_mode) || st.st_size == 0 {
        return Ok(());
    }
    let end = meta.size.min(st.st_size as u64);
    let (mut left, mut file) = (vec![0u8; PAGE], vec![0u8; PAGE]);
    let mut at = 0;
    while at < end {
        let n = PAGE.min((end - at) as usize);
        // SAFETY: reading into a local buffer from our backing descriptor.
        let got = unsafe { real::pread64(fd, left.as_mut_ptr() as *mut c_void, n, at as off_t) };
        if got != n as isize {
            return Err(if got < 0 { errno() } else { libc::EIO });
        }
        load(of, &mut file[..n], at)?;
        if left[..n] != file[..n] {
            // Not copied into the backing file (nobody else holds it, and the caller,
            // holding its fill lock, refills it next).
            of.with_file(|f| f.write_in_place(&left[..n], at).map_err(en))?;
        }
        at += n as u64;
    }
    Ok(())
}

fn backing_stat(fd: c_int) -> Res<libc::stat> {
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

fn shared(
    of: &Arc<OpenFile>,
    addr: *mut c_void,
    len: usize,
    prot: c_int,
    flags: c_int,
    off: u64,
) -> Res<*mut c_void> {
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
            maps().push(Mapping {
                addr: p as usize,
                len,
                of: of.clone(),
                off,
                backing: fd,
                name,
                writable,
                born: session::generation(),
                counted: true,
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

/// Make backing file `fd` ready to map up to `end`: filled from the file if this process
/// is the first to map the inode (`first`, holding it exclusively), grown to `end` if not.
fn prepare_backing(of: &OpenFile, fd: c_int, first: bool, end: u64) -> Res<()> {
    let st = backing_stat(fd)?;
    // SAFETY: geteuid has no failure.
    let mine = st.st_uid == unsafe { libc::geteuid() };
    let meta = of.with_file(|f| f.metadata().map_err(en))?;
    // Anyone may make files in /dev/shm: one that others may write, or that a user who may
    // not write the file made, would let them change what this mapping shows, and so what
    // it writes back.
    if st.st_mode & 0o022 != 0
        || (!mine && !sidefiles::map_file_trusted(&st, meta.uid, meta.gid, meta.mode))
    {
        return Err(libc::EACCES);
    }
    let _fill = FillLock::exclusive(fd);
    if first {
        // Left by a process that died mapping the file, and not yet written back by the
        // daemon (which has not yet seen the death), or by the last process to unmap it
        // while another was about to map it: its stores first. Failing that, they are
        // lost, as the refill below replaces them. Under the fill lock: a write to the
        // file holds its shared side from before its commit until its bytes are in the
        // backing file (`hold_for_write`), so no page compared here is one whose write
        // has committed but not yet reached the backing file.
        let _ = write_back_left(of, fd, &st, &meta);
    }
    // SAFETY: ftruncate, fchmod and flock on our own backing descriptor.
    unsafe {
        if first {
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
        }
    }
    Ok(())
}

/// The backing file of inode `h` of this pool.
fn backing_name(h: Handle) -> Res<CString> {
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
fn lock_backing(name: &CString) -> Res<(c_int, bool)> {
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
                // A read-only shared mapping of a file opened for writing joins the backing
                // file, so that the process's writes show in it (SQLite maps its database
                // read-only and writes it with pwrite); of a file opened read-only (rustc's
                // and ripgrep's maps) it stays a copy of the file at mmap time, without a
                // file in /dev/shm or a round trip to count it.
                let is_shared = flags & (libc::MAP_SHARED | libc::MAP_SHARED_VALIDATE) != 0;
                if is_shared && (prot & libc::PROT_WRITE != 0 || of.writable()) {
                    shared(&of, addr, len, prot, flags, off as u64)
                } else {
                    snapshot(&of, addr, len, prot, flags, off as u64)
                }
            })
        })
}
    )*};
}
mmaps!(mmap, mmap64);

/// Write the changed pages of `m` within `from..to` (addresses) back to the file.
fn write_back(m: &Mapping, from: usize, to: usize) -> Res<()> {
    if !m.writable {
        return Ok(());
    }
    let from = from.max(m.addr);
    let to = to.min(m.addr + m.len);
    if from >= to {
        return Ok(());
    }
    let size = crate::io::size_of(&m.of)?;
    let mut page = vec![0u8; PAGE];
    let mut a = from - (from - m.addr) % PAGE;
    while a < to {
        let foff = m.off + (a - m.addr) as u64;
        if foff >= size {
            break;
        }
        let n = PAGE.min(m.addr + m.len - a).min((size - foff) as usize);
        // SAFETY: the mapping is live and n bytes from `a` lie inside it.
        let mem = unsafe { std::slice::from_raw_parts(a as *const u8, n) };
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
    for m in maps().iter().filter(|m| m.born == now) {
        let _ = guard(-1, || write_back(m, m.addr, m.addr + m.len).map(|_| 0));
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
                    born: m.born,
                    counted,
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

/// Another descriptor of a backing file, holding its shared lock as the first does.
fn reopen_backing(name: &CString) -> Option<c_int> {
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

/// Before munmap of `a..end`, or an mmap with MAP_FIXED over it: write back what the
/// range holds of our mappings and take it out of them; returns the mappings to give up
/// once the range is unmapped.
fn detach(a: usize, len: usize) -> Vec<Mapping> {
    let end = a.saturating_add(len).next_multiple_of(PAGE);
    let _op = op();
    let mut all = maps();
    for m in all.iter() {
        let _ = guard(-1, || write_back(m, a, end).map(|_| 0));
    }
    cut(&mut all, a, end)
}

/// This process wrote `data` at `off` of `of`'s file: if some process maps that file,
/// the backing file (which the mappings show) gets the bytes too, as far as it reaches.
pub fn written(of: &OpenFile, data: &[u8], off: u64) {
    if data.is_empty() {
        return;
    }
    with_backing(of.handle(), |fd| {
        let _fill = FillLock::shared(fd);
        copy_into_backing(of, fd, data, off)
    });
}

/// A write to a file that some process maps, from before its commit until its bytes are in
/// the backing file: a descriptor of the backing file with the fill lock's shared side
/// held. Without it, a compare of the backing file with the file in between (a first
/// mapper writing back what a dead one left) would take the committed bytes not yet
/// copied for a store of older ones, and write those back over the write.
/// The descriptor is one of its own: an open file description's lock is one for all its
/// users, so a mapping's descriptor, shared with other threads, would let one thread's
/// unlock end another's hold.
pub struct WriteHold {
    fd: c_int,
}

impl Drop for WriteHold {
    fn drop(&mut self) {
        FillLock::release(self.fd);
        crate::ownfds::close(self.fd);
    }
}

/// Take a `WriteHold` before writing to `of`'s file, if some process maps it now.
pub fn hold_for_write(of: &OpenFile) -> Option<WriteHold> {
    let h = of.handle();
    if reentered() || !session::fs().is_ok_and(|fs| fs.mapped_anywhere(h.ino)) {
        return None;
    }
    let fd = open_existing_backing(&backing_name(h).ok()?)?;
    FillLock::take_shared(fd);
    Some(WriteHold { fd })
}

/// The write that `hold` (if any) was taken for is done: `data` went to `off`. With a
/// hold, its bytes go into the backing file under it; without one, as `written` does (a
/// mapping made since the write began).
pub fn written_held(of: &OpenFile, hold: Option<WriteHold>, data: &[u8], off: u64) {
    match hold {
        // Removed meanwhile (the count reached zero while the write waited at the gate): a
        // mapping made since has a new backing file, which the write must reach.
        Some(h) if backing_stat(h.fd).is_ok_and(|st| st.st_nlink == 0) => {
            drop(h);
            written(of, data, off);
        }
        Some(h) if !data.is_empty() => copy_into_backing(of, h.fd, data, off),
        Some(_) => {}
        None => written(of, data, off),
    }
}

/// Change the size of file `h` with `change` (a truncate, an allocation past the end),
/// `size` reading it. If some process maps the file, its backing file then reads zeros
/// from the lower of the old and new sizes on, as the file does there (on Linux a mapping
/// reads zeros past the end of file in its last page, and faults on later pages); without
/// this, bytes cut off would still show in the mappings and be written back as stores.
/// The sizes, the change and the zeroing hold the backing file's fill lock exclusively, on
/// a description of their own, and writers copy under its shared side clamped to the
/// file's size then: a write's copy lands either before the old size is read (which then
/// includes it) or after the zeroing.
pub fn resizing(
    h: Handle,
    size: impl Fn() -> Res<u64>,
    change: impl FnOnce() -> Res<()>,
) -> Res<()> {
    // Mapped by no process (one load), or inside the shim's own mapping code.
    if reentered() || !session::fs().is_ok_and(|fs| fs.mapped_anywhere(h.ino)) {
        return change();
    }
    let Ok(name) = backing_name(h) else {
        return change();
    };
    // Not there yet: the process that maps the file makes it and fills it from the file,
    // after this change.
    let Some(fd) = open_existing_backing(&name) else {
        return change();
    };
    let r = (|| {
        let _fill = FillLock::exclusive(fd);
        let old = size()?;
        change()?;
        zero_backing_from(fd, old.min(size()?));
        Ok(())
    })();
    crate::ownfds::close(fd);
    r
}

/// Run `f` on a descriptor of its own of file `h`'s backing file, if some process maps the
/// file (see `WriteHold` for why not a mapping's).
fn with_backing(h: Handle, f: impl FnOnce(c_int)) {
    if reentered() {
        return;
    }
    // One load when nobody maps it.
    if !session::fs().is_ok_and(|fs| fs.mapped_anywhere(h.ino)) {
        return;
    }
    let Ok(name) = backing_name(h) else {
        return;
    };
    // Not there yet: the process that maps the file makes it and fills it from the file,
    // after this change.
    if let Some(fd) = open_existing_backing(&name) {
        f(fd);
        crate::ownfds::close(fd);
    }
}

/// Open the backing file `name` if it exists and is one the shim makes: a regular file
/// with one name that nobody but its owner may write (anyone may make files in /dev/shm:
/// another's could hold the fill lock for good, or be a link elsewhere). At a high number,
/// out of the program's way.
fn open_existing_backing(name: &CString) -> Option<c_int> {
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
fn zero_backing_from(fd: c_int, from: u64) {
    let Ok(size) = backing_size(fd) else {
        return;
    };
    if from < size {
        let mode = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
        // SAFETY: punching a hole in a backing descriptor we hold (tmpfs reads zeros there).
        unsafe { real::fallocate(fd, mode, from as off_t, (size - from) as off_t) };
    }
}

/// Write `data` at `off` into a backing file whose fill lock the caller holds (shared).
fn copy_into_backing(of: &OpenFile, fd: c_int, data: &[u8], off: u64) {
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

fn forget(m: Mapping) {
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

#[unsafe(no_mangle)]
pub unsafe extern "C" fn msync(addr: *mut c_void, len: size_t, flags: c_int) -> c_int {
    crate::guarded!(-1, {
        if NMAPS.load(Ordering::Acquire) == 0 || reentered() {
            // SAFETY: forwarding unchanged.
            return Ok(unsafe { real::msync(addr, len, flags) });
        }
        let r = guard(-1, || {
            let _op = op();
            let a = addr as usize;
            for m in maps().iter() {
                write_back(m, a, a.saturating_add(len))?;
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

#[unsafe(no_mangle)]
pub unsafe extern "C" fn munmap(addr: *mut c_void, len: size_t) -> c_int {
    crate::guarded!(-1, {
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
        let ours = NMAPS.load(Ordering::Acquire) != 0 && !reentered() && {
            let _op = op();
            let (a, end) = (addr as usize, (addr as usize).saturating_add(old));
            maps().iter().any(|m| m.addr < end && a < m.addr + m.len)
        };
        if ours {
            crate::util::set_errno(libc::ENOMEM);
            return Ok(libc::MAP_FAILED);
        }
        // SAFETY: forwarding unchanged.
        unsafe { real::mremap(addr, old, new, flags, naddr) }
    })
}

//! read/write and friends, seeking, syncing and sizing (copying between descriptors is
//! `xfer`).

use crate::ops::{buf, buf_mut};
use crate::session::op;
use crate::table::OpenFile;
use crate::util::{Res, en, guard, guard_errno};
use crate::{ours, real};
use engram_core::Fallocate;
use libc::{c_int, c_uint, c_void, iovec, off_t, size_t, ssize_t};
use std::sync::Arc;

/// A read of `of` as a program's `pread` makes it: of a file some process maps shared, as
/// the mappings show it (`mmap::read_mapped`).
pub fn pread_of(of: &OpenFile, b: &mut [u8], off: u64) -> Res<usize> {
    check_readable(of)?;
    crate::mmap::read_mapped(of, b, off).unwrap_or_else(|| file_read(of, b, off))
}

/// A read of the file itself, whatever the mappings hold (what they are compared with
/// and filled from).
pub fn pread_file(of: &OpenFile, b: &mut [u8], off: u64) -> Res<usize> {
    check_readable(of)?;
    file_read(of, b, off)
}

fn check_readable(of: &OpenFile) -> Res<()> {
    if of.is_dir() {
        return Err(libc::EISDIR);
    }
    if !of.readable() {
        return Err(libc::EBADF);
    }
    Ok(())
}

fn file_read(of: &OpenFile, b: &mut [u8], off: u64) -> Res<usize> {
    of.with_file(|f| f.read_at(b, off).map_err(en))
}

pub fn read_of(of: &OpenFile, b: &mut [u8]) -> Res<usize> {
    let _p = of.lock_offset();
    let off = of.offset();
    let n = pread_of(of, b, off)?;
    of.set_offset(off + n as u64);
    Ok(n)
}

pub fn pwrite_of(of: &OpenFile, data: &[u8], off: u64) -> Res<usize> {
    write_placing(of, data, Some(off), of.flags() & libc::O_APPEND != 0)
}

pub fn write_of(of: &OpenFile, data: &[u8]) -> Res<usize> {
    write_placing(of, data, None, of.flags() & libc::O_APPEND != 0)
}

/// A write at `at` (`None`: at the description's offset, which then moves past it), or at
/// the end of file if `append` (opened with O_APPEND, or pwritev2's `RWF_APPEND`), wherever
/// `at` says, as Linux does.
fn write_placing(of: &OpenFile, data: &[u8], at: Option<u64>, append: bool) -> Res<usize> {
    match at {
        Some(off) => placed_of(of, data, (!append).then_some(off)).map(|(n, _)| n),
        None => {
            let _p = of.lock_offset();
            let (n, end) = placed_of(of, data, (!append).then(|| of.offset()))?;
            of.set_offset(end);
            Ok(n)
        }
    }
}

/// Write at `Some(off)`, or at the end of file; returns how many bytes and where they end.
fn placed_of(of: &OpenFile, data: &[u8], at: Option<u64>) -> Res<(usize, u64)> {
    // A directory is never open for writing: EBADF, as Linux checks the mode first.
    if !of.writable() {
        return Err(libc::EBADF);
    }
    if of.is_dir() {
        return Err(libc::EISDIR);
    }
    let write = || of.with_file(|f| f.write_placed(data, at).map_err(en));
    if !crate::mmap::mapped_now(of) {
        // The common case, one load; a mapping counted by the commit meanwhile gets the
        // bytes after it (`written`, told so by the commit's answer).
        let w = write()?;
        crate::mmap::written(of, &data[..w.len], w.end - w.len as u64, w.mapped);
        return Ok((w.len, w.end));
    }
    // At an offset past the end of a mapped file: the gap between is zeroed in the
    // mappings too (`growing_write`). Appends start at the end and leave no gap.
    if let Some(off) = at
        && let Some(r) = crate::mmap::growing_write(of, data, off, || size_of(of), write)
    {
        return r;
    }
    let hold = crate::mmap::hold_for_write(of);
    let w = write()?;
    crate::mmap::written_held(of, hold, &data[..w.len], w.end - w.len as u64, w.mapped);
    Ok((w.len, w.end))
}

/// preadv2/pwritev2 flags. Those that change nothing here are accepted (every write is
/// durable when it returns, and none waits for a device); `RWF_APPEND` and `RWF_NOAPPEND`
/// say where a write goes; the others (`RWF_ATOMIC`, `RWF_DONTCACHE`, unknown ones) are
/// EOPNOTSUPP, as tmpfs answers. Returns whether a write appends, given the descriptor's
/// O_APPEND.
fn appends_with(fl: c_int, o_append: bool) -> Res<bool> {
    const ACCEPTED: c_int = libc::RWF_HIPRI
        | libc::RWF_DSYNC
        | libc::RWF_SYNC
        | libc::RWF_NOWAIT
        | libc::RWF_APPEND
        | libc::RWF_NOAPPEND;
    if fl & !ACCEPTED != 0 {
        return Err(libc::EOPNOTSUPP);
    }
    match (fl & libc::RWF_APPEND != 0, fl & libc::RWF_NOAPPEND != 0) {
        (true, true) => Err(libc::EINVAL),
        (true, false) => Ok(true),
        (false, true) => Ok(false),
        (false, false) => Ok(o_append),
    }
}

fn check_off(off: off_t) -> Res<u64> {
    if off < 0 {
        Err(libc::EINVAL)
    } else {
        Ok(off as u64)
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn read(fd: c_int, b: *mut c_void, n: size_t) -> ssize_t {
    crate::guarded!(-1, {
        let of = ours!(fd, real::read(fd, b, n));
        // SAFETY: the caller's buffer holds n bytes.
        let b = unsafe { buf_mut(b, n) };
        guard(-1, || {
            let _op = op();
            read_of(&of, b).map(|n| n as ssize_t)
        })
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn __read_chk(fd: c_int, b: *mut c_void, n: size_t, len: size_t) -> ssize_t {
    crate::guarded!(-1, {
        if n > len {
            std::process::abort();
        }
        // SAFETY: same contract as read.
        unsafe { read(fd, b, n) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn write(fd: c_int, b: *const c_void, n: size_t) -> ssize_t {
    crate::guarded!(-1, {
        let of = ours!(fd, real::write(fd, b, n));
        // SAFETY: the caller's buffer holds n bytes.
        let b = unsafe { buf(b, n) };
        guard(-1, || {
            let _op = op();
            write_of(&of, b).map(|n| n as ssize_t)
        })
    })
}

fn pread_impl(of: Arc<OpenFile>, b: &mut [u8], off: off_t) -> ssize_t {
    guard(-1, || {
        let _op = op();
        pread_of(&of, b, check_off(off)?).map(|n| n as ssize_t)
    })
}

fn pwrite_impl(of: Arc<OpenFile>, b: &[u8], off: off_t) -> ssize_t {
    guard(-1, || {
        let _op = op();
        pwrite_of(&of, b, check_off(off)?).map(|n| n as ssize_t)
    })
}

macro_rules! preads {
    ($($name:ident),*) => {$(
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(fd: c_int, b: *mut c_void, n: size_t, off: off_t) -> ssize_t {
    crate::guarded!(-1, {
            let of = ours!(fd, real::$name(fd, b, n, off));
            // SAFETY: the caller's buffer holds n bytes.
            pread_impl(of, unsafe { buf_mut(b, n) }, off)
        })
}
    )*};
}
preads!(pread, pread64);

macro_rules! pwrites {
    ($($name:ident),*) => {$(
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(fd: c_int, b: *const c_void, n: size_t, off: off_t) -> ssize_t {
    crate::guarded!(-1, {
            let of = ours!(fd, real::$name(fd, b, n, off));
            // SAFETY: the caller's buffer holds n bytes.
            pwrite_impl(of, unsafe { buf(b, n) }, off)
        })
}
    )*};
}
pwrites!(pwrite, pwrite64);

#[unsafe(no_mangle)]
pub unsafe extern "C" fn __pread_chk(
    fd: c_int,
    b: *mut c_void,
    n: size_t,
    off: off_t,
    len: size_t,
) -> ssize_t {
    crate::guarded!(-1, {
        if n > len {
            std::process::abort();
        }
        // SAFETY: same contract as pread.
        unsafe { pread64(fd, b, n, off) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn __pread64_chk(
    fd: c_int,
    b: *mut c_void,
    n: size_t,
    off: off_t,
    len: size_t,
) -> ssize_t {
    crate::guarded!(-1, {
        // SAFETY: same contract as pread.
        unsafe { __pread_chk(fd, b, n, off, len) }
    })
}

/// The caller's iovecs as slices.
unsafe fn iovs<'a>(iov: *const iovec, cnt: c_int) -> Res<&'a [iovec]> {
    if !(0..=libc::UIO_MAXIOV).contains(&cnt) {
        return Err(libc::EINVAL);
    }
    if cnt == 0 {
        return Ok(&[]);
    }
    // SAFETY: the caller passes cnt iovecs.
    Ok(unsafe { std::slice::from_raw_parts(iov, cnt as usize) })
}

/// Vectored read at `off` (None: the file offset), as one read then scattered.
fn readv_impl(of: &OpenFile, v: &[iovec], off: Option<u64>, fl: c_int) -> Res<ssize_t> {
    appends_with(fl, false)?;
    let total: usize = v.iter().map(|i| i.iov_len).sum();
    let mut tmp = vec![0u8; total];
    let n = match off {
        Some(o) => pread_of(of, &mut tmp, o)?,
        None => read_of(of, &mut tmp)?,
    };
    let mut done = 0;
    for i in v {
        if done >= n {
            break;
        }
        let k = i.iov_len.min(n - done);
        // SAFETY: each iovec names a writable buffer of iov_len bytes.
        unsafe { std::ptr::copy_nonoverlapping(tmp[done..].as_ptr(), i.iov_base as *mut u8, k) };
        done += k;
    }
    Ok(n as ssize_t)
}

/// Vectored write, gathered so that it stays one atomic write.
fn writev_impl(of: &OpenFile, v: &[iovec], off: Option<u64>, fl: c_int) -> Res<ssize_t> {
    let append = appends_with(fl, of.flags() & libc::O_APPEND != 0)?;
    let mut tmp = Vec::with_capacity(v.iter().map(|i| i.iov_len).sum());
    for i in v {
        // SAFETY: each iovec names a readable buffer of iov_len bytes.
        tmp.extend_from_slice(unsafe { buf(i.iov_base, i.iov_len) });
    }
    write_placing(of, &tmp, off, append).map(|n| n as ssize_t)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn readv(fd: c_int, iov: *const iovec, cnt: c_int) -> ssize_t {
    crate::guarded!(-1, {
        let of = ours!(fd, real::readv(fd, iov, cnt));
        guard(-1, || {
            let _op = op();
            // SAFETY: the caller passes cnt iovecs.
            readv_impl(&of, unsafe { iovs(iov, cnt) }?, None, 0)
        })
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn writev(fd: c_int, iov: *const iovec, cnt: c_int) -> ssize_t {
    crate::guarded!(-1, {
        let of = ours!(fd, real::writev(fd, iov, cnt));
        guard(-1, || {
            let _op = op();
            // SAFETY: the caller passes cnt iovecs.
            writev_impl(&of, unsafe { iovs(iov, cnt) }?, None, 0)
        })
    })
}

macro_rules! vectored {
    ($($name:ident, $impl:ident, $v2:tt);* $(;)?) => {$(
        vectored!(@one $name, $impl, $v2);
    )*};
    (@one $name:ident, $impl:ident, v1) => {
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(fd: c_int, iov: *const iovec, cnt: c_int, off: off_t) -> ssize_t {
    crate::guarded!(-1, {
            let of = ours!(fd, real::$name(fd, iov, cnt, off));
            guard(-1, || {
                let _op = op();
                // SAFETY: the caller passes cnt iovecs.
                $impl(&of, unsafe { iovs(iov, cnt) }?, Some(check_off(off)?), 0)
            })
        })
}
    };
    (@one $name:ident, $impl:ident, v2) => {
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(fd: c_int, iov: *const iovec, cnt: c_int, off: off_t, fl: c_int) -> ssize_t {
    crate::guarded!(-1, {
            let of = ours!(fd, real::$name(fd, iov, cnt, off, fl));
            guard(-1, || {
                let _op = op();
                let at = if off == -1 { None } else { Some(check_off(off)?) };
                // SAFETY: the caller passes cnt iovecs.
                $impl(&of, unsafe { iovs(iov, cnt) }?, at, fl)
            })
        })
}
    };
}
vectored! {
    preadv, readv_impl, v1;
    preadv64, readv_impl, v1;
    pwritev, writev_impl, v1;
    pwritev64, writev_impl, v1;
    preadv2, readv_impl, v2;
    preadv64v2, readv_impl, v2;
    pwritev2, writev_impl, v2;
    pwritev64v2, writev_impl, v2;
}

pub fn size_of(of: &OpenFile) -> Res<u64> {
    of.with_file(|f| Ok(f.metadata().map_err(en)?.size))
}

pub fn lseek_of(of: &OpenFile, off: off_t, whence: c_int) -> Res<off_t> {
    let _p = of.lock_offset();
    let cur = of.offset();
    let new = match whence {
        libc::SEEK_SET => Some(off as i128),
        libc::SEEK_CUR => Some(cur as i128 + off as i128),
        libc::SEEK_END => Some(size_of(of)? as i128 + off as i128),
        libc::SEEK_DATA | libc::SEEK_HOLE if !of.is_dir() => {
            if off < 0 {
                return Err(libc::ENXIO);
            }
            let at = of.with_file(|f| {
                match whence {
                    libc::SEEK_DATA => f.seek_data(off as u64),
                    _ => f.seek_hole(off as u64),
                }
                .map_err(en)
            })?;
            Some(at as i128)
        }
        _ => None,
    };
    // A file's offset stops at the largest size it can have, as on ext4 (a directory's
    // offsets are readdir cookies, up to 2^63).
    let max = if of.is_dir() {
        i64::MAX as i128
    } else {
        engram_core::index::MAX_FILE_SIZE as i128
    };
    let new = new.filter(|&n| n >= 0 && n <= max).ok_or(libc::EINVAL)? as u64;
    if of.is_dir() && whence != libc::SEEK_SET && !(whence == libc::SEEK_CUR && off == 0) {
        return Err(libc::EINVAL);
    }
    of.set_offset(new);
    Ok(new as off_t)
}

macro_rules! lseeks {
    ($($name:ident),*) => {$(
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(fd: c_int, off: off_t, whence: c_int) -> off_t {
    crate::guarded!(-1, {
            let of = ours!(fd, real::$name(fd, off, whence));
            guard(-1, || {
                let _op = op();
                lseek_of(&of, off, whence)
            })
        })
}
    )*};
}
lseeks!(lseek, lseek64);

fn sync_of(of: &OpenFile) -> c_int {
    guard(-1, || {
        let _op = op();
        of.not_path()?;
        of.with_file(|f| f.sync_all().map_err(en))?;
        Ok(0)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn fsync(fd: c_int) -> c_int {
    crate::guarded!(-1, {
        let of = ours!(fd, real::fsync(fd));
        sync_of(&of)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn fdatasync(fd: c_int) -> c_int {
    crate::guarded!(-1, {
        let of = ours!(fd, real::fdatasync(fd));
        sync_of(&of)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn syncfs(fd: c_int) -> c_int {
    crate::guarded!(-1, {
        let of = ours!(fd, real::syncfs(fd));
        sync_of(&of)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn sync_file_range(fd: c_int, off: off_t, n: off_t, flags: c_uint) -> c_int {
    crate::guarded!(-1, {
        let of = ours!(fd, real::sync_file_range(fd, off, n, flags));
        if off < 0 || n < 0 {
            crate::util::set_errno(libc::EINVAL);
            return Ok(-1);
        }
        sync_of(&of)
    })
}

pub fn truncate_of(of: &OpenFile, len: off_t) -> Res<c_int> {
    if len < 0 || of.is_dir() {
        return Err(libc::EINVAL);
    }
    if !of.writable() {
        return Err(libc::EINVAL);
    }
    crate::mmap::resizing(
        of.handle(),
        || size_of(of),
        || of.with_file(|f| f.set_len(len as u64).map_err(en)),
    )?;
    Ok(0)
}

macro_rules! ftruncates {
    ($($name:ident),*) => {$(
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(fd: c_int, len: off_t) -> c_int {
    crate::guarded!(-1, {
            let of = ours!(fd, real::$name(fd, len));
            guard(-1, || {
                let _op = op();
                truncate_of(&of, len)
            })
        })
}
    )*};
}
ftruncates!(ftruncate, ftruncate64);

fn allocate_of(of: &OpenFile, mode: c_int, off: off_t, len: off_t) -> Res<()> {
    if off < 0 || len <= 0 {
        return Err(libc::EINVAL);
    }
    if !of.writable() {
        return Err(libc::EBADF);
    }
    if of.is_dir() {
        return Err(libc::EISDIR);
    }
    let (off, len) = (off as u64, len as u64);
    let mode = Fallocate::from_mode(mode).map_err(en)?;
    let change = || of.with_file(|f| f.fallocate(mode, off, len).map_err(en));
    match mode {
        // The size stays, and so do the bytes.
        Fallocate::Allocate { keep_size: true } => change(),
        Fallocate::Allocate { keep_size: false } => {
            crate::mmap::resizing(of.handle(), || size_of(of), change)
        }
        Fallocate::Clear(_) => {
            let zeroed = Some((off, off.saturating_add(len)));
            crate::mmap::clearing(of.handle(), || size_of(of), zeroed, change)
        }
    }
}

macro_rules! fallocates {
    ($($name:ident),*) => {$(
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(fd: c_int, mode: c_int, off: off_t, len: off_t) -> c_int {
    crate::guarded!(-1, {
            let of = ours!(fd, real::$name(fd, mode, off, len));
            guard(-1, || {
                let _op = op();
                allocate_of(&of, mode, off, len).map(|_| 0)
            })
        })
}
    )*};
}
fallocates!(fallocate, fallocate64);

macro_rules! posix_fallocates {
    ($($name:ident),*) => {$(
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(fd: c_int, off: off_t, len: off_t) -> c_int {
    crate::guarded!(libc::EIO, {
            if crate::desc::is_spare(fd) {
                return Ok(libc::EBADF);
            }
            let of = ours!(fd, real::$name(fd, off, len));
            guard_errno(|| {
                let _op = op();
                allocate_of(&of, 0, off, len)
            })
        })
}
    )*};
}
posix_fallocates!(posix_fallocate, posix_fallocate64);

macro_rules! fadvises {
    ($($name:ident),*) => {$(
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(fd: c_int, off: off_t, len: off_t, advice: c_int) -> c_int {
    crate::guarded!(libc::EIO, {
            if crate::desc::is_spare(fd) {
                return Ok(libc::EBADF);
            }
            let _of = ours!(fd, real::$name(fd, off, len, advice));
            if len < 0 || !(0..=5).contains(&advice) { libc::EINVAL } else { 0 }
        })
}
    )*};
}
fadvises!(posix_fadvise, posix_fadvise64);

#[unsafe(no_mangle)]
pub unsafe extern "C" fn readahead(fd: c_int, off: off_t, n: size_t) -> ssize_t {
    crate::guarded!(-1, {
        let _of = ours!(fd, real::readahead(fd, off, n));
        0
    })
}

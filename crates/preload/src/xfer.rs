//! Moving data between two descriptors (ours, the kernel's, or one of each):
//! copy_file_range and sendfile as reads and writes once Linux's checks passed (made here in
//! its order: what it refuses, such as a pipe or an overlapping copy, is never read or
//! written), and splice (not supported on ours).

use crate::io::{pread_of, pwrite_of, read_of, write_of};
use crate::session::op;
use crate::table::OpenFile;
use crate::util::{Res, guard};
use crate::{real, table};
use libc::{c_int, c_uint, c_void, off_t, size_t, ssize_t};
use std::cell::OnceCell;
use std::sync::Arc;

/// Read from any descriptor (ours or the kernel's).
pub fn read_any(fd: c_int, b: &mut [u8], off: Option<u64>) -> Res<usize> {
    if let Some(of) = table::get(fd) {
        return match off {
            Some(o) => pread_of(&of, b, o),
            None => read_of(&of, b),
        };
    }
    // SAFETY: reading into the caller's buffer with the real calls.
    let n = unsafe {
        match off {
            Some(o) => real::pread64(fd, b.as_mut_ptr() as *mut c_void, b.len(), o as off_t),
            None => real::read(fd, b.as_mut_ptr() as *mut c_void, b.len()),
        }
    };
    if n < 0 {
        Err(crate::util::errno())
    } else {
        Ok(n as usize)
    }
}

pub fn write_any(fd: c_int, b: &[u8], off: Option<u64>) -> Res<usize> {
    if let Some(of) = table::get(fd) {
        return match off {
            Some(o) => pwrite_of(&of, b, o),
            None => write_of(&of, b),
        };
    }
    // SAFETY: writing the caller's buffer with the real calls.
    let n = unsafe {
        match off {
            Some(o) => real::pwrite64(fd, b.as_ptr() as *const c_void, b.len(), o as off_t),
            None => real::write(fd, b.as_ptr() as *const c_void, b.len()),
        }
    };
    if n < 0 {
        Err(crate::util::errno())
    } else {
        Ok(n as usize)
    }
}

/// Copy `len` bytes between any two descriptors with reads and writes. The input is read
/// at explicit places, and its offset (the caller's, or the descriptor's own) moves by what
/// reached the output only: a write that fails after some bytes went (EAGAIN on a
/// non-blocking socket, ENOSPC) ends the call with the count so far, as Linux's sendfile
/// and copy_file_range answer. (Before 2026-11-26 such a call failed having sent bytes and
/// moved the input's own offset by a whole chunk: nginx with `sendfile on` sent files over
/// 1 MiB with bytes repeated and the end missing.)
///
/// `start` is where the input is read from (`None`: where it is, for one that cannot seek).
fn copy(
    fin: c_int,
    oin: Option<&mut u64>,
    start: Option<u64>,
    fout: c_int,
    oout: Option<&mut u64>,
    len: usize,
) -> Res<ssize_t> {
    let out_start = oout.as_deref().copied();
    let mut buf = vec![0u8; len.min(1 << 20)];
    let mut done = 0usize;
    let ended = 'chunks: loop {
        if done >= len {
            break Ok(());
        }
        let want = (len - done).min(buf.len());
        let n = match read_any(fin, &mut buf[..want], start.map(|s| s + done as u64)) {
            Ok(0) => break Ok(()),
            Ok(n) => n,
            Err(e) => break Err(e),
        };
        let mut w = 0;
        while w < n {
            let at = out_start.map(|o| o + (done + w) as u64);
            match write_any(fout, &buf[w..n], at) {
                Ok(0) => {
                    done += w;
                    break 'chunks Err(libc::EIO);
                }
                Ok(k) => w += k,
                Err(e) => {
                    done += w;
                    break 'chunks Err(e);
                }
            }
        }
        done += n;
    };
    match (oin, start) {
        (Some(o), _) => *o += done as u64,
        (None, Some(s)) => set_position(fin, s + done as u64)?,
        (None, None) => {}
    }
    if let Some(o) = oout {
        *o += done as u64;
    }
    match ended {
        Err(e) if done == 0 => Err(e),
        _ => Ok(done as ssize_t),
    }
}

/// The file offset of descriptor `fd` (ours or the kernel's); None if it cannot seek.
fn position(fd: c_int) -> Option<u64> {
    let at = match table::get(fd) {
        Some(of) => crate::io::lseek_of(&of, 0, libc::SEEK_CUR).ok()?,
        // SAFETY: lseek on the caller's descriptor, which reads its offset.
        None => unsafe { real::lseek(fd, 0, libc::SEEK_CUR) },
    };
    u64::try_from(at).ok()
}

/// Set the file offset of descriptor `fd` (ours or the kernel's) to `at`.
fn set_position(fd: c_int, at: u64) -> Res<()> {
    let at = off_t::try_from(at).map_err(|_| libc::EOVERFLOW)?;
    match table::get(fd) {
        Some(of) => crate::io::lseek_of(&of, at, libc::SEEK_SET).map(drop),
        // SAFETY: lseek on the caller's descriptor.
        None => match unsafe { real::lseek(fd, at, libc::SEEK_SET) } {
            -1 => Err(crate::util::errno()),
            _ => Ok(()),
        },
    }
}

/// One end of a copy (ours or the kernel's), as Linux's checks see it.
struct End {
    fd: c_int,
    ours: Option<Arc<OpenFile>>,
    flags: c_int,
    /// The kernel's descriptor's `fstat`, made when first asked for.
    st: OnceCell<libc::stat>,
}

impl End {
    /// EBADF for a descriptor that is not open or was opened with O_PATH: Linux's `fdget`
    /// finds neither.
    fn get(fd: c_int) -> Res<End> {
        let ours = table::get(fd);
        let flags = match &ours {
            Some(of) => of.flags(),
            // SAFETY: F_GETFL reads the description's flags.
            None => match unsafe { real::fcntl(fd, libc::F_GETFL, 0) } {
                -1 => return Err(crate::util::errno()),
                fl => fl,
            },
        };
        if flags & libc::O_PATH != 0 {
            return Err(libc::EBADF);
        }
        Ok(End {
            fd,
            ours,
            flags,
            st: OnceCell::new(),
        })
    }

    fn stat(&self) -> Res<&libc::stat> {
        if let Some(st) = self.st.get() {
            return Ok(st);
        }
        // SAFETY: an all-zero stat is valid; fstat fills it.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: fstat of the caller's descriptor into `st`.
        if unsafe { real::fstat(self.fd, &mut st) } != 0 {
            return Err(crate::util::errno());
        }
        Ok(self.st.get_or_init(|| st))
    }

    /// The file type (`S_IFMT` bits): ours are regular files and directories.
    fn kind(&self) -> Res<libc::mode_t> {
        match &self.ours {
            Some(of) if of.is_dir() => Ok(libc::S_IFDIR),
            Some(_) => Ok(libc::S_IFREG),
            None => Ok(self.stat()?.st_mode & libc::S_IFMT),
        }
    }

    fn readable(&self) -> bool {
        matches!(self.flags & libc::O_ACCMODE, libc::O_RDONLY | libc::O_RDWR)
    }

    fn writable(&self) -> bool {
        matches!(self.flags & libc::O_ACCMODE, libc::O_WRONLY | libc::O_RDWR)
    }

    fn appends(&self) -> bool {
        self.flags & libc::O_APPEND != 0
    }

    /// Whether it seeks (Linux's FMODE_LSEEK and FMODE_PREAD): not a pipe, a socket or a
    /// character device without lseek (a tty).
    fn seeks(&self) -> Res<bool> {
        Ok(match self.kind()? {
            libc::S_IFIFO | libc::S_IFSOCK => false,
            // SAFETY: lseek to where the descriptor is moves nothing.
            libc::S_IFCHR => (unsafe { real::lseek(self.fd, 0, libc::SEEK_CUR) }) != -1,
            _ => true,
        })
    }

    /// Where the descriptor's own offset is (0 where it cannot seek, as Linux reads
    /// `f_pos`).
    fn position(&self) -> i64 {
        position(self.fd).map_or(0, |p| p as i64)
    }

    fn size(&self) -> Res<u64> {
        match &self.ours {
            Some(of) => crate::io::size_of(of),
            None => Ok(self.stat()?.st_size as u64),
        }
    }

    /// Whether both are the same file of ours (two ends of the kernel's are never here).
    fn same_file(&self, other: &End) -> bool {
        match (&self.ours, &other.ours) {
            (Some(a), Some(b)) => a.handle() == b.handle(),
            _ => false,
        }
    }
}

/// Linux's `rw_verify_area` for a copy of `count` bytes at `pos`: EINVAL for a count over
/// SSIZE_MAX, a negative offset, or a range past the largest offset.
fn verify_area(pos: i64, count: u64) -> Res<()> {
    if count > i64::MAX as u64 || pos < 0 || pos.checked_add(count as i64).is_none() {
        return Err(libc::EINVAL);
    }
    Ok(())
}

/// The caller's offset, or None for a null pointer.
///
/// # Safety
/// `p` is null or points to a valid off_t for the call.
unsafe fn offset_at<'a>(p: *mut off_t) -> Option<&'a mut off_t> {
    // SAFETY: as the caller promises.
    unsafe { p.as_mut() }
}

/// An offset the checks made non-negative, as the u64 `copy` moves.
fn unsigned(o: &mut off_t) -> &mut u64 {
    debug_assert!(*o >= 0);
    // SAFETY: same size and alignment; a non-negative off_t read as u64 is the same number.
    unsafe { &mut *(o as *mut off_t as *mut u64) }
}

/// The checks Linux's `copy_file_range` makes, in its order (`generic_copy_file_checks`,
/// then `rw_verify_area` for each end), on `n` bytes from `pos_in` of `src` to `pos_out` of
/// `dst`: the count left to copy, cut to the input's end.
fn copy_checks(src: &End, pos_in: i64, dst: &End, pos_out: i64, n: u64) -> Res<u64> {
    let (kin, kout) = (src.kind()?, dst.kind()?);
    if kin == libc::S_IFDIR || kout == libc::S_IFDIR {
        return Err(libc::EISDIR);
    }
    if kin != libc::S_IFREG || kout != libc::S_IFREG {
        return Err(libc::EINVAL);
    }
    if !src.readable() || !dst.writable() || dst.appends() {
        return Err(libc::EBADF);
    }
    // Two file systems (the pool and another): Linux copies only within one, or between
    // two of a kind whose driver copies itself (NFS, CIFS); `cp` then reads and writes.
    // (Before 2026-11-27 the shim copied.)
    if src.ours.is_some() != dst.ours.is_some() {
        return Err(libc::EXDEV);
    }
    // Offsets that wrap with the count (as unsigned numbers).
    if (pos_in as u64).checked_add(n).is_none() || (pos_out as u64).checked_add(n).is_none() {
        return Err(libc::EOVERFLOW);
    }
    let same = src.same_file(dst);
    let mut count = n;
    // Cut to the input's end: only where that can change the answer (the size costs a
    // look at the file).
    let end = |pos: i64| pos as i128 + n as i128 > i64::MAX as i128;
    if same || end(pos_in) || end(pos_out) {
        let size = src.size()?;
        count = if pos_in >= 0 && pos_in as u64 >= size {
            0
        } else {
            count.min(size.wrapping_sub(pos_in as u64))
        };
    }
    if dst.ours.is_some() {
        let max = engram_core::index::MAX_FILE_SIZE as i128;
        if pos_out as i128 >= max {
            return Err(libc::EFBIG);
        }
        count = count.min((max - pos_out as i128).min(u64::MAX as i128) as u64);
    }
    if same {
        let (i, o, c) = (pos_in as i128, pos_out as i128, count as i128);
        if o + c > i && o < i + c {
            return Err(libc::EINVAL);
        }
    }
    verify_area(pos_in, count)?;
    verify_area(pos_out, count)?;
    Ok(count)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn copy_file_range(
    fin: c_int,
    oin: *mut off_t,
    fout: c_int,
    oout: *mut off_t,
    n: size_t,
    fl: c_uint,
) -> ssize_t {
    crate::guarded!(-1, {
        crate::desc::refuse_spare(fin)?;
        crate::desc::refuse_spare(fout)?;
        if !table::is_ours(fin) && !table::is_ours(fout) {
            // SAFETY: forwarding unchanged.
            return Ok(unsafe { real::copy_file_range(fin, oin, fout, oout, n, fl) });
        }
        guard(-1, || {
            let _op = op();
            let (src, dst) = (End::get(fin)?, End::get(fout)?);
            if fl != 0 {
                return Err(libc::EINVAL);
            }
            // SAFETY: the caller's offset pointers are valid or null.
            let (oin, oout) = unsafe { (offset_at(oin), offset_at(oout)) };
            let pos_in = oin.as_deref().map_or_else(|| src.position(), |&o| o);
            let pos_out = oout.as_deref().map_or_else(|| dst.position(), |&o| o);
            let count = copy_checks(&src, pos_in, &dst, pos_out, n as u64)?;
            if count == 0 {
                return Ok(0);
            }
            copy(
                fin,
                oin.map(unsigned),
                Some(pos_in as u64),
                fout,
                oout.map(unsigned),
                count.min(usize::MAX as u64) as usize,
            )
        })
    })
}

/// Linux's largest count for one read or write (`MAX_RW_COUNT`).
const MAX_RW_COUNT: u64 = (i32::MAX as u64) & !4095;

/// sendfile (one end ours), with Linux's checks in its order (`do_sendfile`, then
/// `splice_direct_to_actor` or `splice_file_to_pipe`).
fn sendfile_ours(out: c_int, inp: c_int, off: Option<&mut off_t>, n: size_t) -> Res<ssize_t> {
    let src = End::get(inp)?;
    if !src.readable() {
        return Err(libc::EBADF);
    }
    let seeks = src.seeks()?;
    let pos = match off.as_deref() {
        Some(_) if !seeks => return Err(libc::ESPIPE),
        Some(&o) => o,
        None => src.position(),
    };
    let mut count = n as u64;
    verify_area(pos, count)?;
    count = count.min(MAX_RW_COUNT);
    let dst = End::get(out)?;
    if !dst.writable() {
        return Err(libc::EBADF);
    }
    // The largest file of ours: EOVERFLOW from there on, as ext4 gives from its own.
    if src.ours.is_some() || dst.ours.is_some() {
        let max = engram_core::index::MAX_FILE_SIZE;
        if pos as u64 + count > max {
            if pos as u64 >= max {
                return Err(libc::EOVERFLOW);
            }
            count = max - pos as u64;
        }
    }
    // Into a pipe the input is read as it is spliced; anything else is written to through
    // a pipe the kernel keeps, from an input that seeks, and not appended to. (Only then
    // does an output of the kernel's need a look at what it is.)
    if (dst.appends() || !seeks) && (dst.ours.is_some() || dst.kind()? != libc::S_IFIFO) {
        return Err(libc::EINVAL);
    }
    if count == 0 {
        return Ok(0);
    }
    if src.kind()? == libc::S_IFDIR {
        return Err(libc::EINVAL);
    }
    let start = seeks.then_some(pos as u64);
    copy(inp, off.map(unsigned), start, out, None, count as usize)
}

macro_rules! sendfiles {
    ($($name:ident),*) => {$(
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(out: c_int, inp: c_int, off: *mut off_t, n: size_t) -> ssize_t {
    crate::guarded!(-1, {
            crate::desc::refuse_spare(out)?;
            crate::desc::refuse_spare(inp)?;
            if !table::is_ours(out) && !table::is_ours(inp) {
                // SAFETY: forwarding unchanged.
                return Ok(unsafe { real::$name(out, inp, off, n) });
            }
            guard(-1, || {
                let _op = op();
                // SAFETY: the caller's offset pointer is valid or null.
                sendfile_ours(out, inp, unsafe { offset_at(off) }, n)
            })
        })
}
    )*};
}
sendfiles!(sendfile, sendfile64);

#[unsafe(no_mangle)]
pub unsafe extern "C" fn splice(
    fin: c_int,
    oin: *mut off_t,
    fout: c_int,
    oout: *mut off_t,
    n: size_t,
    fl: c_uint,
) -> ssize_t {
    crate::guarded!(-1, {
        crate::desc::refuse_spare(fin)?;
        crate::desc::refuse_spare(fout)?;
        if !table::is_ours(fin) && !table::is_ours(fout) {
            // SAFETY: forwarding unchanged.
            return Ok(unsafe { real::splice(fin, oin, fout, oout, n, fl) });
        }
        crate::util::set_errno(libc::EINVAL);
        -1
    })
}

//! Moving data between two descriptors (ours, the kernel's, or one of each):
//! copy_file_range and sendfile as reads and writes, and splice (not supported on ours).

use crate::io::{pread_of, pwrite_of, read_of, write_of};
use crate::session::op;
use crate::util::{Res, guard};
use crate::{real, table};
use libc::{c_int, c_uint, c_void, off_t, size_t, ssize_t};

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
fn copy(
    fin: c_int,
    oin: Option<&mut u64>,
    fout: c_int,
    oout: Option<&mut u64>,
    len: usize,
) -> Res<ssize_t> {
    // An input that cannot seek (a pipe) is read where it is, as before.
    let start = match oin.as_deref() {
        Some(&o) => Some(o),
        None => position(fin),
    };
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

/// Whether `fd` (ours or the kernel's) was opened for appending: copy_file_range
/// (EBADF) and sendfile (EINVAL) refuse such an output, as Linux does.
fn appends(fd: c_int) -> bool {
    match table::get(fd) {
        Some(of) => of.flags() & libc::O_APPEND != 0,
        None => {
            // SAFETY: F_GETFL reads the description's flags.
            let fl = unsafe { real::fcntl(fd, libc::F_GETFL, 0) };
            fl >= 0 && fl & libc::O_APPEND != 0
        }
    }
}

unsafe fn off_ptr<'a>(p: *mut off_t) -> Res<Option<&'a mut u64>> {
    if p.is_null() {
        return Ok(None);
    }
    // SAFETY: the caller passes a valid off_t; it is non-negative (checked) so it can be
    // viewed as u64.
    unsafe {
        if *p < 0 {
            return Err(libc::EINVAL);
        }
        Ok(Some(&mut *(p as *mut u64)))
    }
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
            if fl != 0 {
                return Err(libc::EINVAL);
            }
            if appends(fout) {
                return Err(libc::EBADF);
            }
            // SAFETY: the caller's offset pointers are valid or null.
            copy(
                fin,
                unsafe { off_ptr(oin) }?,
                fout,
                unsafe { off_ptr(oout) }?,
                n,
            )
        })
    })
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
                if appends(out) {
                    return Err(libc::EINVAL);
                }
                // SAFETY: the caller's offset pointer is valid or null.
                copy(inp, unsafe { off_ptr(off) }?, out, None, n)
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

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

/// Copy `len` bytes between any two descriptors with reads and writes.
fn copy(
    fin: c_int,
    mut oin: Option<&mut u64>,
    fout: c_int,
    mut oout: Option<&mut u64>,
    len: usize,
) -> Res<ssize_t> {
    let mut buf = vec![0u8; len.min(1 << 20)];
    let mut done = 0usize;
    while done < len {
        let want = (len - done).min(buf.len());
        let n = read_any(fin, &mut buf[..want], oin.as_deref().copied())?;
        if n == 0 {
            break;
        }
        let mut w = 0;
        while w < n {
            let k = write_any(fout, &buf[w..n], oout.as_deref().map(|o| *o + w as u64))?;
            if k == 0 {
                return Err(libc::EIO);
            }
            w += k;
        }
        if let Some(o) = oin.as_deref_mut() {
            *o += n as u64;
        }
        if let Some(o) = oout.as_deref_mut() {
            *o += n as u64;
        }
        done += n;
    }
    Ok(done as ssize_t)
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

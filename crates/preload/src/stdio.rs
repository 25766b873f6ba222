//! stdio on EngramFS files: fopen/fdopen/freopen give streams made with fopencookie whose
//! callbacks go through the shim's read/write/lseek/close (glibc's own FILE would call the
//! kernel directly). stdin, stdout and stderr become such streams when their descriptor is
//! ours at start-up (shell redirection) or after dup2 onto them. They start unoriented, as
//! glibc's fopen makes them, and `wide` serves the wide-character functions on them (glibc's
//! own need wide-character data that a cookie stream lacks).

use crate::util::{cbytes, guard};
use crate::{open, real, routed, table};
use libc::{FILE, c_char, c_int, c_void, size_t, ssize_t};
use std::sync::atomic::{AtomicBool, Ordering};

#[repr(C)]
struct CookieIo {
    read: Option<unsafe extern "C" fn(*mut c_void, *mut c_char, size_t) -> ssize_t>,
    write: Option<unsafe extern "C" fn(*mut c_void, *const c_char, size_t) -> ssize_t>,
    seek: Option<unsafe extern "C" fn(*mut c_void, *mut i64, c_int) -> c_int>,
    close: Option<unsafe extern "C" fn(*mut c_void) -> c_int>,
}

unsafe extern "C" {
    fn fopencookie(cookie: *mut c_void, mode: *const c_char, io: CookieIo) -> *mut FILE;
    static mut stdin: *mut FILE;
    static mut stdout: *mut FILE;
    static mut stderr: *mut FILE;
}

/// The cookie is the descriptor number.
fn fd_of(cookie: *mut c_void) -> c_int {
    cookie as usize as c_int
}

unsafe extern "C" fn c_read(cookie: *mut c_void, buf: *mut c_char, n: size_t) -> ssize_t {
    // SAFETY: glibc passes a buffer of n bytes.
    unsafe { crate::io::read(fd_of(cookie), buf as *mut c_void, n) }
}

unsafe extern "C" fn c_write(cookie: *mut c_void, buf: *const c_char, n: size_t) -> ssize_t {
    // SAFETY: glibc passes n bytes.
    let r = unsafe { crate::io::write(fd_of(cookie), buf as *const c_void, n) };
    r.max(0)
}

unsafe extern "C" fn c_seek(cookie: *mut c_void, pos: *mut i64, whence: c_int) -> c_int {
    // SAFETY: glibc passes a valid position.
    unsafe {
        let r = crate::io::lseek64(fd_of(cookie), *pos, whence);
        if r < 0 {
            return -1;
        }
        *pos = r;
    }
    0
}

unsafe extern "C" fn c_close(cookie: *mut c_void) -> c_int {
    crate::wide::unregister(fd_of(cookie));
    // SAFETY: closing the stream's descriptor through the shim.
    unsafe { open::close(fd_of(cookie)) }
}

/// A stream over descriptor `fd` (ours), with `fileno` answering `fd`.
fn cookie_stream(fd: c_int, mode: *const c_char) -> *mut FILE {
    let io = CookieIo {
        read: Some(c_read),
        write: Some(c_write),
        seek: Some(c_seek),
        close: Some(c_close),
    };
    // SAFETY: fopencookie with our callbacks; the cookie is the descriptor number.
    let fp = unsafe { fopencookie(fd as usize as *mut c_void, mode, io) };
    if !fp.is_null() {
        set_fileno(fp, fd);
        crate::wide::unoriented(fp);
        crate::wide::register(fd, fp);
    }
    fp
}

/// glibc gives a cookie stream the descriptor -2; make fileno() answer the real one (the
/// `_fileno` field of glibc's FILE; cookie streams never use it for I/O).
fn set_fileno(fp: *mut FILE, fd: c_int) {
    #[cfg(all(target_env = "gnu", target_pointer_width = "64"))]
    // SAFETY: glibc's struct _IO_FILE on LP64 keeps _fileno at byte 112, after the flags
    // word and thirteen pointers.
    unsafe {
        let p = (fp as *mut u8).add(crate::wide::FILENO_AT) as *mut c_int;
        if *p == -2 {
            *p = fd;
        }
    }
}

/// open(2) flags for an fopen mode.
fn mode_flags(mode: &[u8]) -> Option<c_int> {
    let plus = mode.contains(&b'+');
    let mut fl = match mode.first()? {
        b'r' => {
            if plus {
                libc::O_RDWR
            } else {
                libc::O_RDONLY
            }
        }
        b'w' => (if plus { libc::O_RDWR } else { libc::O_WRONLY }) | libc::O_CREAT | libc::O_TRUNC,
        b'a' => (if plus { libc::O_RDWR } else { libc::O_WRONLY }) | libc::O_CREAT | libc::O_APPEND,
        _ => return None,
    };
    for &c in mode.iter().skip(1).take_while(|&&c| c != b',') {
        match c {
            b'x' => fl |= libc::O_EXCL,
            b'e' => fl |= libc::O_CLOEXEC,
            _ => {}
        }
    }
    Some(fl)
}

/// glibc starts an "a" stream (not "a+") at the end of the file, so that ftell before the
/// first write answers the size: fopen always, fdopen when it added O_APPEND itself.
fn seek_end_for_append(fd: c_int, mode: &[u8], added: bool) -> crate::util::Res<()> {
    if added && mode.first() == Some(&b'a') && !mode.contains(&b'+') {
        // SAFETY: moving the offset of our own descriptor through the shim.
        if unsafe { crate::io::lseek64(fd, 0, libc::SEEK_END) } < 0 {
            return Err(crate::util::errno());
        }
    }
    Ok(())
}

/// A stream for `mode` on the descriptor `open` gives for the mode's open flags.
fn fopen_impl(mode: *const c_char, open: impl FnOnce(c_int) -> c_int) -> *mut FILE {
    guard(std::ptr::null_mut(), || {
        // SAFETY: the caller's mode string.
        let m = unsafe { cbytes(mode) };
        let flags = mode_flags(m).ok_or(libc::EINVAL)?;
        let fd = open(flags);
        if fd < 0 {
            return Err(crate::util::errno());
        }
        let fp = if table::is_ours(fd) {
            if let Err(e) = seek_end_for_append(fd, m, true) {
                // SAFETY: closing the descriptor we opened.
                unsafe { open::close(fd) };
                return Err(e);
            }
            cookie_stream(fd, mode)
        } else {
            // SAFETY: the path resolved outside the pool: a normal stream.
            unsafe { real::fdopen(fd, mode) }
        };
        if fp.is_null() {
            let e = crate::util::errno();
            // SAFETY: closing the descriptor we opened.
            unsafe { open::close(fd) };
            return Err(e);
        }
        Ok(fp)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn fopen(path: *const c_char, mode: *const c_char) -> *mut FILE {
    crate::guarded!(std::ptr::null_mut(), {
        let r = routed!(libc::AT_FDCWD, path, true, real::fopen(path, mode));
        fopen_impl(mode, |flags| open::open_routed(r, flags, 0o666))
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn fopen64(path: *const c_char, mode: *const c_char) -> *mut FILE {
    crate::guarded!(std::ptr::null_mut(), {
        let r = routed!(libc::AT_FDCWD, path, true, real::fopen64(path, mode));
        fopen_impl(mode, |flags| open::open_routed(r, flags, 0o666))
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn fdopen(fd: c_int, mode: *const c_char) -> *mut FILE {
    crate::guarded!(std::ptr::null_mut(), {
        let Some(of) = table::get(fd) else {
            crate::desc::refuse_spare(fd)?;
            // SAFETY: forwarding unchanged.
            return Ok(unsafe { real::fdopen(fd, mode) });
        };
        guard(std::ptr::null_mut(), || {
            // SAFETY: the caller's mode string.
            let m = unsafe { cbytes(mode) };
            let want = mode_flags(m).ok_or(libc::EINVAL)? & libc::O_ACCMODE;
            // As glibc: the mode may not ask for access the descriptor lacks.
            let have = of.flags() & libc::O_ACCMODE;
            if (have == libc::O_RDONLY || have == libc::O_WRONLY) && want != have {
                Err(libc::EINVAL)?
            }
            let added = m.first() == Some(&b'a') && of.flags() & libc::O_APPEND == 0;
            if added {
                of.set_flags(of.flags() | libc::O_APPEND)?;
            }
            seek_end_for_append(fd, m, added)?;
            let fp = cookie_stream(fd, mode);
            if fp.is_null() {
                Err(crate::util::errno())
            } else {
                Ok(fp)
            }
        })
    })
}

/// Whether `fp` is one of the shim's streams.
fn is_ours_stream(fp: *mut FILE) -> bool {
    // SAFETY: fileno on a valid stream.
    !fp.is_null() && table::is_ours(unsafe { libc::fileno(fp) })
}

/// Replace the global stream variable that holds `old`, if any, by `new`.
fn replace_global(old: *mut FILE, new: *mut FILE) {
    // SAFETY: the standard stream variables are plain pointers owned by the program.
    unsafe {
        if stdin == old {
            stdin = new;
        }
        if stdout == old {
            stdout = new;
        }
        if stderr == old {
            stderr = new;
        }
    }
}

fn freopen_impl(
    path: *const c_char,
    mode: *const c_char,
    fp: *mut FILE,
    realf: impl FnOnce() -> *mut FILE,
) -> *mut FILE {
    // SAFETY: the caller's path.
    let ours_path = !path.is_null()
        && !matches!(
            unsafe { crate::route::route(libc::AT_FDCWD, path) },
            Ok(crate::route::Route::Pass)
        );
    if path.is_null() {
        // A mode change of the same file: our streams keep theirs.
        return if is_ours_stream(fp) { fp } else { realf() };
    }
    if !ours_path && !is_ours_stream(fp) {
        return realf();
    }
    // SAFETY: flushing the old stream before it is replaced.
    unsafe { libc::fflush(fp) };
    let new = if ours_path {
        // SAFETY: the caller's path.
        fopen_impl(mode, |flags| unsafe {
            open::openat64(libc::AT_FDCWD, path, flags, 0o666)
        })
    } else {
        // SAFETY: a normal stream for a path outside the pool.
        unsafe { real::fopen64(path, mode) }
    };
    if new.is_null() {
        return new;
    }
    replace_global(fp, new);
    // SAFETY: the old stream is closed, as freopen does.
    unsafe { libc::fclose(fp) };
    new
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn freopen(
    path: *const c_char,
    mode: *const c_char,
    fp: *mut FILE,
) -> *mut FILE {
    crate::guarded!(std::ptr::null_mut(), {
        // SAFETY: forwarding unchanged.
        freopen_impl(path, mode, fp, || unsafe { real::freopen(path, mode, fp) })
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn freopen64(
    path: *const c_char,
    mode: *const c_char,
    fp: *mut FILE,
) -> *mut FILE {
    crate::guarded!(std::ptr::null_mut(), {
        // SAFETY: forwarding unchanged.
        freopen_impl(path, mode, fp, || unsafe {
            real::freopen64(path, mode, fp)
        })
    })
}

static ADOPTED: [AtomicBool; 3] = [const { AtomicBool::new(false) }; 3];

/// Descriptor `fd` (0, 1 or 2) became ours: route its standard stream through the shim.
pub fn adopt_std(fd: c_int) {
    if !(0..=2).contains(&fd) || ADOPTED[fd as usize].swap(true, Ordering::AcqRel) {
        return;
    }
    let mode: &[u8] = if fd == 0 { b"r\0" } else { b"w\0" };
    let fp = cookie_stream(fd, mode.as_ptr() as *const c_char);
    if fp.is_null() {
        return;
    }
    // SAFETY: replacing the program's standard stream variable; stderr stays unbuffered.
    unsafe {
        match fd {
            0 => stdin = fp,
            1 => {
                libc::fflush(stdout);
                stdout = fp;
            }
            _ => {
                libc::fflush(stderr);
                libc::setvbuf(fp, std::ptr::null_mut(), libc::_IONBF, 0);
                stderr = fp;
            }
        }
    }
}

/// At start-up: standard descriptors redirected to our files get shim streams.
pub fn adopt_std_streams() {
    for fd in 0..=2 {
        if table::is_ours(fd) {
            adopt_std(fd);
        }
    }
}

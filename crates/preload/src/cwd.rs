//! The current directory: chdir into the pool makes a virtual current directory (the real
//! one stays where it was) against which relative paths resolve; getcwd, realpath and
//! canonicalize_file_name answer in the process's namespace.

use crate::ops::{Side, real_ret, side};
use crate::realcwd;
use crate::route::{Route, mounted};
use crate::session::op;
use crate::util::{Res, en, guard};
use crate::{real, routed, table};
use libc::{c_char, c_int, size_t};

fn strip_slash(mut p: Vec<u8>) -> Vec<u8> {
    while p.len() > 1 && p.ends_with(b"/") {
        p.pop();
    }
    p
}

/// After a successful real chdir: the current directory is a real one again.
fn left_pool() {
    if crate::vcwd::is_set() {
        crate::vcwd::set(None);
    }
    realcwd::refresh();
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn chdir(path: *const c_char) -> c_int {
    crate::guarded!(-1, {
        // SAFETY: the caller's path.
        let mut r = unsafe { crate::route::route(libc::AT_FDCWD, path) };
        if let Ok(Route::Pass) = r {
            // SAFETY: forwarding unchanged.
            let v = unsafe { real::chdir(path) };
            if v == 0 {
                left_pool();
            }
            if v != -1 {
                return Ok(v);
            }
            // SAFETY: the caller's path.
            match unsafe { crate::reallinks::after_failure(libc::AT_FDCWD, path, true) } {
                Some(rerouted) => r = rerouted,
                None => return Ok(v),
            }
        }
        guard(-1, || {
            let _op = op();
            match side(r, true)? {
                Side::Pool(fs, p) => {
                    let m = fs.stat(&p).map_err(en)?;
                    if !m.is_dir() {
                        return Err(libc::ENOTDIR);
                    }
                    fs.access_at(None, &p, libc::X_OK as u32, true)
                        .map_err(en)?;
                    // The directory itself, which relative paths then start from.
                    let h = fs.handle_of(m.ino).map_err(en)?;
                    crate::vcwd::enter(strip_slash(p), h)?;
                    Ok(0)
                }
                // A removed directory (`cd ..` in one whose parent was removed too).
                Side::Removed(fs, d, name) => {
                    fs.access_at(Some(&d), b".", libc::X_OK as u32, true)
                        .map_err(en)?;
                    crate::vcwd::enter_held(name, d);
                    Ok(0)
                }
                Side::Real(p) => {
                    // SAFETY: the real call on the resolved path.
                    let v = real_ret(unsafe { real::chdir(p.as_ptr()) })?;
                    left_pool();
                    Ok(v)
                }
            }
        })
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn fchdir(fd: c_int) -> c_int {
    crate::guarded!(-1, {
        let Some(of) = table::get(fd) else {
            crate::desc::refuse_spare(fd)?;
            // SAFETY: forwarding unchanged.
            let v = unsafe { real::fchdir(fd) };
            if v == 0 {
                left_pool();
            }
            return Ok(v);
        };
        guard(-1, || {
            if !of.is_dir() {
                return Err(libc::ENOTDIR);
            }
            crate::vcwd::enter(of.path().to_vec(), of.handle())?;
            Ok(0)
        })
    })
}

/// A libc string result as a result (errno on null).
fn non_null(p: *mut c_char) -> Res<*mut c_char> {
    if p.is_null() {
        Err(crate::util::errno())
    } else {
        Ok(p)
    }
}

/// Copy `s` as a C string into the caller's buffer, or a malloc'd one for a null buffer.
fn out_str(s: &[u8], buf: *mut c_char, size: size_t, exact_if_null: bool) -> Res<*mut c_char> {
    let need = s.len() + 1;
    let dst = if buf.is_null() {
        let n = if exact_if_null || size == 0 {
            need
        } else {
            size
        };
        if n < need {
            return Err(libc::ERANGE);
        }
        // SAFETY: malloc of n bytes (the caller frees it).
        let p = unsafe { libc::malloc(n) } as *mut c_char;
        if p.is_null() {
            return Err(libc::ENOMEM);
        }
        p
    } else {
        if size < need {
            return Err(libc::ERANGE);
        }
        buf
    };
    // SAFETY: dst holds at least `need` bytes.
    unsafe {
        std::ptr::copy_nonoverlapping(s.as_ptr(), dst as *mut u8, s.len());
        *dst.add(s.len()) = 0;
    }
    Ok(dst)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn getcwd(buf: *mut c_char, size: size_t) -> *mut c_char {
    crate::guarded!(std::ptr::null_mut(), {
        if !crate::vcwd::is_set() {
            // SAFETY: forwarding unchanged.
            return Ok(unsafe { real::getcwd(buf, size) });
        }
        guard(std::ptr::null_mut(), || {
            if !buf.is_null() && size == 0 {
                return Err(libc::EINVAL);
            }
            let _op = op();
            let Some(v) = crate::vcwd::current_path() else {
                // Left the pool meanwhile (another thread's chdir).
                // SAFETY: forwarding unchanged.
                return non_null(unsafe { real::getcwd(buf, size) });
            };
            out_str(&mounted(&v?), buf, size, false)
        })
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn __getcwd_chk(buf: *mut c_char, size: size_t, len: size_t) -> *mut c_char {
    crate::guarded!(std::ptr::null_mut(), {
        if size > len {
            std::process::abort();
        }
        // SAFETY: same contract as getcwd.
        unsafe { getcwd(buf, size) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn get_current_dir_name() -> *mut c_char {
    crate::guarded!(std::ptr::null_mut(), {
        if !crate::vcwd::is_set() {
            // SAFETY: forwarding unchanged.
            return Ok(unsafe { real::get_current_dir_name() });
        }
        guard(std::ptr::null_mut(), || {
            let _op = op();
            let Some(v) = crate::vcwd::current_path() else {
                // SAFETY: forwarding unchanged.
                return non_null(unsafe { real::get_current_dir_name() });
            };
            out_str(&mounted(&v?), std::ptr::null_mut(), 0, true)
        })
    })
}

fn realpath_routed(r: Res<Route>, out: *mut c_char) -> *mut c_char {
    guard(std::ptr::null_mut(), || {
        let _op = op();
        // glibc's realpath starts a relative path from getcwd, which fails (ENOENT) in a
        // removed directory, wherever the path leads.
        if let Ok(Route::At { dir, .. }) = &r
            && crate::removed::is_removed(crate::session::fs()?, dir.handle())
        {
            return Err(libc::ENOENT);
        }
        match side(r, true)? {
            Side::Pool(fs, p) => {
                let m = fs.stat(&p).map_err(en)?;
                if p.ends_with(b"/") && p.len() > 1 && !m.is_dir() {
                    return Err(libc::ENOTDIR);
                }
                let full = mounted(&strip_slash(p));
                out_str(&full, out, libc::PATH_MAX as usize, true).map_err(|e| {
                    if e == libc::ERANGE {
                        libc::ENAMETOOLONG
                    } else {
                        e
                    }
                })
            }
            // A removed directory has no name (its descriptor's link, followed).
            Side::Removed(..) => Err(libc::ENOENT),
            Side::Real(p) => {
                // SAFETY: the real call on the resolved path.
                let v = unsafe { real::realpath(p.as_ptr(), out) };
                if v.is_null() {
                    Err(crate::util::errno())
                } else {
                    Ok(v)
                }
            }
        }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn realpath(path: *const c_char, out: *mut c_char) -> *mut c_char {
    crate::guarded!(std::ptr::null_mut(), {
        let r = routed!(libc::AT_FDCWD, path, true, real::realpath(path, out));
        realpath_routed(r, out)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn __realpath_chk(
    path: *const c_char,
    out: *mut c_char,
    len: size_t,
) -> *mut c_char {
    crate::guarded!(std::ptr::null_mut(), {
        if !out.is_null() && len < libc::PATH_MAX as usize {
            std::process::abort();
        }
        // SAFETY: same contract as realpath.
        unsafe { realpath(path, out) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn canonicalize_file_name(path: *const c_char) -> *mut c_char {
    crate::guarded!(std::ptr::null_mut(), {
        let r = routed!(
            libc::AT_FDCWD,
            path,
            true,
            real::canonicalize_file_name(path)
        );
        realpath_routed(r, std::ptr::null_mut())
    })
}

/// getwd: getcwd into a buffer of PATH_MAX bytes; on failure the buffer holds the message.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn getwd(buf: *mut c_char) -> *mut c_char {
    crate::guarded!(std::ptr::null_mut(), {
        if !crate::vcwd::is_set() {
            // SAFETY: forwarding unchanged.
            return Ok(unsafe { real::getwd(buf) });
        }
        if buf.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: the caller's buffer holds PATH_MAX bytes.
        let r = unsafe { getcwd(buf, libc::PATH_MAX as size_t) };
        if r.is_null() {
            let e = crate::util::errno();
            // SAFETY: the message fits in the caller's PATH_MAX bytes (strerror_r bounds it).
            unsafe { libc::strerror_r(e, buf, libc::PATH_MAX as size_t) };
            crate::util::set_errno(e);
        }
        r
    })
}

/// The fortified getwd (`buflen` is the buffer's real size): getcwd with that size, and a
/// buffer too small for the name is a fortify failure, as in glibc.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __getwd_chk(buf: *mut c_char, buflen: size_t) -> *mut c_char {
    crate::guarded!(std::ptr::null_mut(), {
        // SAFETY: the caller's buffer holds buflen bytes.
        let r = unsafe { getcwd(buf, buflen) };
        if r.is_null() && crate::util::errno() == libc::ERANGE {
            std::process::abort();
        }
        r
    })
}

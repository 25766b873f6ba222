//! glob(3): glibc's own matching, with its directory reads and stats through the shim.
//! glibc reads directories with its internal calls, which never reach the shim, so a
//! pattern under the prefix matched nothing. With `GLOB_ALTDIRFUNC` glibc uses the
//! functions it is given instead: the shim's exported opendir, readdir, closedir, stat and
//! lstat, which pass every path that is not ours to libc unchanged.

use crate::real;
use libc::{c_char, c_int, c_void, size_t};

/// glibc's `GLOB_ALTDIRFUNC`: use the `gl_*` functions for directories and stats.
const GLOB_ALTDIRFUNC: c_int = 1 << 9;

/// glibc's `glob_t` (and `glob64_t`, the same on 64-bit Linux).
#[repr(C)]
struct Glob {
    pathc: size_t,
    pathv: *mut *mut c_char,
    offs: size_t,
    flags: c_int,
    closedir: Option<unsafe extern "C" fn(*mut c_void)>,
    readdir: Option<unsafe extern "C" fn(*mut c_void) -> *mut c_void>,
    opendir: Option<unsafe extern "C" fn(*const c_char) -> *mut c_void>,
    lstat: Option<unsafe extern "C" fn(*const c_char, *mut c_void) -> c_int>,
    stat: Option<unsafe extern "C" fn(*const c_char, *mut c_void) -> c_int>,
}

unsafe extern "C" fn gl_closedir(d: *mut c_void) {
    // SAFETY: a stream our opendir made for glob.
    unsafe { crate::dirs::closedir(d.cast()) };
}

unsafe extern "C" fn gl_readdir(d: *mut c_void) -> *mut c_void {
    // SAFETY: as above.
    unsafe { crate::dirs::readdir64(d.cast()).cast() }
}

unsafe extern "C" fn gl_opendir(path: *const c_char) -> *mut c_void {
    // SAFETY: glob's C string.
    unsafe { crate::dirs::opendir(path).cast() }
}

unsafe extern "C" fn gl_lstat(path: *const c_char, st: *mut c_void) -> c_int {
    // SAFETY: glob's C string and its stat buffer.
    unsafe { crate::stat::lstat64(path, st.cast()) }
}

unsafe extern "C" fn gl_stat(path: *const c_char, st: *mut c_void) -> c_int {
    // SAFETY: as above.
    unsafe { crate::stat::stat64(path, st.cast()) }
}

macro_rules! globs {
    ($($name:ident),*) => {$(
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(
            pattern: *const c_char,
            flags: c_int,
            errfunc: *const c_void,
            pglob: *mut c_void,
        ) -> c_int {
            // The caller's own directory functions, or nowhere to put ours: libc as asked.
            if flags & GLOB_ALTDIRFUNC != 0 || pglob.is_null() {
                // SAFETY: forwarding the caller's arguments unchanged.
                return unsafe { real::$name(pattern, flags, errfunc, pglob) };
            }
            let g = pglob.cast::<Glob>();
            // SAFETY: the caller's glob_t, whose `gl_*` fields glob reads only with
            // GLOB_ALTDIRFUNC; the pattern, callback and flags go to libc unchanged.
            unsafe {
                (*g).closedir = Some(gl_closedir);
                (*g).readdir = Some(gl_readdir);
                (*g).opendir = Some(gl_opendir);
                (*g).lstat = Some(gl_lstat);
                (*g).stat = Some(gl_stat);
                let r = real::$name(pattern, flags | GLOB_ALTDIRFUNC, errfunc, pglob);
                (*g).flags &= !GLOB_ALTDIRFUNC;
                r
            }
        }
    )*};
}
globs!(glob, glob64);

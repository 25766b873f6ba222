//! Shared helpers of the call families: turning a routed path into the side that serves it,
//! and the shapes every export has.

use crate::resolve::{Resolved, resolve};
use crate::route::Route;
use crate::session;
use crate::util::{Res, cstring, errno};
use engram_core::{File, Fs, Handle};
use libc::c_int;
use std::ffi::CString;
use std::sync::atomic::{AtomicU32, Ordering};

/// The whole body of an exported function, run under `guard`: an error becomes errno and
/// `$fail`, and so does a panic (EIO) — a panic must never unwind into the host program.
/// Inside, `return Ok(v)` returns `v` unchanged (errno as the real call left it) and `?`
/// fails with an errno. `catch_unwind` costs nothing unless something panics, so the path
/// to libc stays free of allocations and locks.
#[macro_export]
macro_rules! guarded {
    ($fail:expr, $body:block) => {
        $crate::util::guard($fail, || Ok($body))
    };
}

/// Inside `guarded!`: return at once to libc when a path is not ours; otherwise evaluate
/// to the routed path (`Res<Route>`). Allocates nothing on the way to libc. A real call
/// that fails with ENOENT is looked at again (`reallinks`): if the path reaches the prefix
/// through a real symlink, it evaluates to that route instead. `follow`: whether the call
/// follows a symlink as the last component (false for lstat, unlink, O_NOFOLLOW, ...).
#[macro_export]
macro_rules! routed {
    ($dirfd:expr, $path:expr, $follow:expr, $pass:expr) => {{
        // SAFETY: the caller's path is a valid C string (or null).
        let r = unsafe { $crate::route::route($dirfd, $path) };
        if let Ok($crate::route::Route::Pass) = r {
            // SAFETY: forwarding the caller's arguments unchanged.
            let v = unsafe { $pass };
            if !$crate::reallinks::Outcome::failed(&v) {
                return Ok(v);
            }
            // SAFETY: the caller's path, as above.
            match unsafe { $crate::reallinks::after_failure($dirfd, $path, $follow) } {
                Some(rerouted) => rerouted,
                None => return Ok(v),
            }
        } else {
            r
        }
    }};
}

/// Inside `guarded!`: return at once to libc when a descriptor is not ours; otherwise
/// evaluate to its `Arc<OpenFile>`. A spare placeholder's number is closed as far as the
/// program knows (`desc::is_spare`): EBADF, as the kernel gives for a closed number,
/// instead of acting on the `/dev/null` behind it.
#[macro_export]
macro_rules! ours {
    ($fd:expr, $pass:expr) => {{
        match $crate::table::get($fd) {
            Some(of) => of,
            None => {
                $crate::desc::refuse_spare($fd)?;
                // SAFETY: forwarding the caller's arguments unchanged.
                return Ok(unsafe { $pass });
            }
        }
    }};
}

/// Who serves a path that was routed to us.
pub enum Side {
    /// It resolved outside the pool: libc, with this absolute path.
    Real(CString),
    /// A canonical pool path.
    Pool(&'static Fs, Vec<u8>),
    /// A removed directory, which has no path (`removed`): held for the call, which acts
    /// on it as `*_at(Some(dir), ".")`; its name as last known (a hint).
    Removed(&'static Fs, File, Vec<u8>),
}

pub fn side(r: Res<Route>, follow: bool) -> Res<Side> {
    let r = r?;
    if let Route::Desc { fd, orig, .. } = r {
        return desc_side(fd, orig, follow);
    }
    let fs = session::fs()?;
    let raw = match r {
        Route::At { dir, fd, rel } => {
            if let Some(s) = crate::removed::side(fs, fd, dir.handle(), rel, follow)? {
                return Ok(s);
            }
            // Not removed (looked at just now): `Route::joined` would look again.
            crate::route::joined_path(fd, dir, rel, true)?.into()
        }
        Route::Ours(raw) => raw,
        _ => return Err(libc::EINVAL),
    };
    Ok(match resolve(fs, &raw, follow)? {
        Resolved::Inside(p) => Side::Pool(fs, p),
        Resolved::Outside(p) => Side::Real(cstring(&p)?),
    })
}

/// The side of a path naming descriptor `fd` of ours (`magicfd`): followed, the path of
/// its file, as long as that still names it (a directory's is found again from its
/// handle; a renamed file's cannot be, ENOENT); not followed, the kernel's link `orig`.
#[cold]
fn desc_side(fd: c_int, orig: &[u8], follow: bool) -> Res<Side> {
    if !follow {
        return Ok(Side::Real(cstring(orig)?));
    }
    let of = crate::table::get(fd).ok_or(libc::EBADF)?;
    let fs = session::fs()?;
    let h = of.handle();
    let path = of.path().to_vec();
    // The same inode number and generation: not a file made since at a freed number.
    if fs
        .lstat(&path)
        .is_ok_and(|m| m.ino == h.ino && fs.handle_of(m.ino).is_ok_and(|now| now == h))
    {
        return Ok(Side::Pool(fs, path));
    }
    if of.is_dir() {
        // A removed directory is reached through the link, as Linux's is.
        if crate::removed::is_removed(fs, h) {
            let dir = fs.hold_dir(h).map_err(crate::util::en)?;
            return Ok(Side::Removed(fs, dir, path));
        }
        return Ok(Side::Pool(fs, crate::vcwd::path_of_dir(h, true)?));
    }
    Err(libc::ENOENT)
}

/// Run `f` with the pool view whose walks stay inside it (`Fs::staying_inside`) on where
/// route `r` starts and its path: one walk of the pool, as the process would resolve it.
/// `Ok(None)` where that cannot serve the call (not a route to the pool, or a path that may
/// leave it): the caller then resolves the path itself (`side`).
pub fn inside<T>(
    r: &Res<Route>,
    f: impl FnOnce(&Fs, Option<Handle>, &[u8]) -> engram_core::Result<T>,
) -> Res<Option<T>> {
    let Some((dir, path)) = r.as_ref().ok().and_then(Route::start) else {
        return Ok(None);
    };
    staying(|fs| f(fs, dir, path))
}

/// Run `f` on the pool view that stays inside it: `Ok(None)` where a path it walked may
/// leave the pool (the caller then resolves the path itself).
pub fn staying<T>(f: impl FnOnce(&Fs) -> engram_core::Result<T>) -> Res<Option<T>> {
    match f(session::fs_inside()?) {
        Ok(v) => Ok(Some(v)),
        Err(e) if e.leaves_pool() => Ok(None),
        Err(e) => Err(crate::util::en(e)),
    }
}

/// A libc return value as a result (errno on -1).
pub fn real_ret<T: PartialEq + From<i8>>(v: T) -> Res<T> {
    if v == T::from(-1) {
        Err(errno())
    } else {
        Ok(v)
    }
}

pub fn ok<T>(r: engram_core::Result<T>) -> Res<c_int> {
    r.map(|_| 0).map_err(crate::util::en)
}

/// The process's umask as the shim last saw it set (`u32::MAX`: not read yet).
static UMASK: AtomicU32 = AtomicU32::new(u32::MAX);

/// The process's umask: read once (by setting and restoring it), then kept up to date by
/// the `umask` wrapper, so that a create does not cost two system calls more.
pub fn current_umask() -> u32 {
    let m = UMASK.load(Ordering::Relaxed);
    if m != u32::MAX {
        return m;
    }
    // SAFETY: umask only swaps the process's mask.
    let m = unsafe {
        let m = crate::real::umask(0);
        crate::real::umask(m);
        m
    };
    UMASK.store(m, Ordering::Relaxed);
    m
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn umask(mask: libc::mode_t) -> libc::mode_t {
    // Nothing here can panic (a system call and an atomic store), so no guard is needed.
    // SAFETY: forwarding unchanged.
    let old = unsafe { crate::real::umask(mask) };
    UMASK.store(mask & 0o777, Ordering::Relaxed);
    old
}

/// A caller's buffer as a slice (empty for a zero length, whatever the pointer).
///
/// # Safety
/// `p` points to `n` writable bytes when `n > 0`.
pub unsafe fn buf_mut<'a>(p: *mut libc::c_void, n: usize) -> &'a mut [u8] {
    if n == 0 || p.is_null() {
        &mut []
    } else {
        // SAFETY: as the caller promises.
        unsafe { std::slice::from_raw_parts_mut(p as *mut u8, n) }
    }
}

/// # Safety
/// `p` points to `n` readable bytes when `n > 0`.
pub unsafe fn buf<'a>(p: *const libc::c_void, n: usize) -> &'a [u8] {
    if n == 0 || p.is_null() {
        &[]
    } else {
        // SAFETY: as the caller promises.
        unsafe { std::slice::from_raw_parts(p as *const u8, n) }
    }
}

/// Exported symbols that jump to C implementations (variadic functions, which stable Rust
/// cannot define: c/printf.c, c/execl.c) with every register and stack argument intact;
/// the real signature is libc's.
#[macro_export]
macro_rules! c_trampolines {
    ($($name:ident => $target:ident),* $(,)?) => {$(
        /// A tail jump to the C implementation (see `c_trampolines`).
        #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
        #[unsafe(naked)]
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name() {
            #[cfg(target_arch = "x86_64")]
            core::arch::naked_asm!("jmp {}", sym $target);
            #[cfg(target_arch = "aarch64")]
            core::arch::naked_asm!("b {}", sym $target);
        }
    )*};
}

#[cfg(test)]
mod tests {
    use crate::util::{errno, set_errno};

    fn body(what: u8) -> libc::c_int {
        crate::guarded!(-1, {
            match what {
                0 => return Ok(7),
                1 => Err(libc::ENOENT)?,
                2 => panic!("a bug inside the shim"),
                _ => {}
            }
            3
        })
    }

    #[test]
    fn guarded_turns_errors_and_panics_into_errno() {
        set_errno(0);
        assert_eq!(body(0), 7);
        assert_eq!(errno(), 0);
        assert_eq!(body(3), 3);
        assert_eq!(body(1), -1);
        assert_eq!(errno(), libc::ENOENT);
        assert_eq!(body(2), -1);
        assert_eq!(errno(), libc::EIO);
    }
}

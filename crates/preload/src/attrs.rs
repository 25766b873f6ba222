//! Attribute calls: access, chmod, chown, the utime family, and extended attributes
//! (EngramFS has none: lists are empty, reads ENODATA, writes ENOTSUP).

use crate::ops::{Side, ok, real_ret, side};
use crate::route::Route;
use crate::session::op;
use crate::table::OpenFile;
use crate::util::{Res, en, guard};
use crate::{ours, real, routed};
use engram_core::SetTime;
use libc::{c_char, c_int, c_void, gid_t, mode_t, size_t, ssize_t, uid_t};

fn access_routed(r: Res<Route>, mode: c_int, flags: c_int) -> c_int {
    guard(-1, || {
        let _op = op();
        let follow = flags & libc::AT_SYMLINK_NOFOLLOW == 0;
        match side(r, follow)? {
            Side::Pool(fs, p) => ok(fs.access_at(None, &p, mode as u32, follow)),
            Side::Removed(fs, d, _) => ok(fs.access_at(Some(&d), b".", mode as u32, follow)),
            Side::Real(p) => {
                // SAFETY: the real call on the resolved path.
                real_ret(unsafe { real::faccessat(libc::AT_FDCWD, p.as_ptr(), mode, flags) })
            }
        }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn access(path: *const c_char, mode: c_int) -> c_int {
    crate::guarded!(-1, {
        let r = routed!(libc::AT_FDCWD, path, true, real::access(path, mode));
        access_routed(r, mode, 0)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn euidaccess(path: *const c_char, mode: c_int) -> c_int {
    crate::guarded!(-1, {
        let r = routed!(libc::AT_FDCWD, path, true, real::euidaccess(path, mode));
        access_routed(r, mode, libc::AT_EACCESS)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn eaccess(path: *const c_char, mode: c_int) -> c_int {
    crate::guarded!(-1, {
        let r = routed!(libc::AT_FDCWD, path, true, real::eaccess(path, mode));
        access_routed(r, mode, libc::AT_EACCESS)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn faccessat(
    dirfd: c_int,
    path: *const c_char,
    mode: c_int,
    flags: c_int,
) -> c_int {
    crate::guarded!(-1, {
        let r = routed!(
            dirfd,
            path,
            flags & libc::AT_SYMLINK_NOFOLLOW == 0,
            real::faccessat(dirfd, path, mode, flags)
        );
        access_routed(r, mode, flags)
    })
}

// ------------------------------------------------------------------ chmod, chown

fn chmod_routed(r: Res<Route>, mode: mode_t, follow: bool) -> c_int {
    guard(-1, || {
        let _op = op();
        match side(r, follow)? {
            Side::Pool(fs, p) => ok(fs.chmod_at(None, &p, mode & 0o7777, follow)),
            Side::Removed(fs, d, _) => ok(fs.chmod_at(Some(&d), b".", mode & 0o7777, follow)),
            // SAFETY: the real call on the resolved path.
            Side::Real(p) => real_ret(unsafe {
                real::fchmodat(
                    libc::AT_FDCWD,
                    p.as_ptr(),
                    mode,
                    if follow { 0 } else { libc::AT_SYMLINK_NOFOLLOW },
                )
            }),
        }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn chmod(path: *const c_char, mode: mode_t) -> c_int {
    crate::guarded!(-1, {
        let r = routed!(libc::AT_FDCWD, path, true, real::chmod(path, mode));
        chmod_routed(r, mode, true)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn lchmod(path: *const c_char, mode: mode_t) -> c_int {
    crate::guarded!(-1, {
        let r = routed!(libc::AT_FDCWD, path, false, real::lchmod(path, mode));
        chmod_routed(r, mode, false)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn fchmodat(
    dirfd: c_int,
    path: *const c_char,
    mode: mode_t,
    flags: c_int,
) -> c_int {
    crate::guarded!(-1, {
        let r = routed!(
            dirfd,
            path,
            flags & libc::AT_SYMLINK_NOFOLLOW == 0,
            real::fchmodat(dirfd, path, mode, flags)
        );
        chmod_routed(r, mode, flags & libc::AT_SYMLINK_NOFOLLOW == 0)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn fchmod(fd: c_int, mode: mode_t) -> c_int {
    crate::guarded!(-1, {
        let of = ours!(fd, real::fchmod(fd, mode));
        guard(-1, || {
            let _op = op();
            of.not_path()?;
            of.with_file(|f| f.set_mode(mode & 0o7777).map_err(en))?;
            Ok(0)
        })
    })
}

fn id(v: u32) -> Option<u32> {
    (v != u32::MAX).then_some(v)
}

fn chown_routed(r: Res<Route>, uid: uid_t, gid: gid_t, follow: bool) -> c_int {
    guard(-1, || {
        let _op = op();
        match side(r, follow)? {
            Side::Pool(fs, p) => ok(fs.chown_at(None, &p, id(uid), id(gid), follow)),
            Side::Removed(fs, d, _) => ok(fs.chown_at(Some(&d), b".", id(uid), id(gid), follow)),
            // SAFETY: the real call on the resolved path.
            Side::Real(p) => real_ret(unsafe {
                real::fchownat(
                    libc::AT_FDCWD,
                    p.as_ptr(),
                    uid,
                    gid,
                    if follow { 0 } else { libc::AT_SYMLINK_NOFOLLOW },
                )
            }),
        }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn chown(path: *const c_char, uid: uid_t, gid: gid_t) -> c_int {
    crate::guarded!(-1, {
        let r = routed!(libc::AT_FDCWD, path, true, real::chown(path, uid, gid));
        chown_routed(r, uid, gid, true)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn lchown(path: *const c_char, uid: uid_t, gid: gid_t) -> c_int {
    crate::guarded!(-1, {
        let r = routed!(libc::AT_FDCWD, path, false, real::lchown(path, uid, gid));
        chown_routed(r, uid, gid, false)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn fchownat(
    dirfd: c_int,
    path: *const c_char,
    uid: uid_t,
    gid: gid_t,
    flags: c_int,
) -> c_int {
    crate::guarded!(-1, {
        // SAFETY: the caller's path.
        if unsafe { crate::stat::empty_path(path, flags) } {
            let of = ours!(dirfd, real::fchownat(dirfd, path, uid, gid, flags));
            return Ok(fchown_of(&of, uid, gid));
        }
        let r = routed!(
            dirfd,
            path,
            flags & libc::AT_SYMLINK_NOFOLLOW == 0,
            real::fchownat(dirfd, path, uid, gid, flags)
        );
        chown_routed(r, uid, gid, flags & libc::AT_SYMLINK_NOFOLLOW == 0)
    })
}

fn fchown_of(of: &OpenFile, uid: uid_t, gid: gid_t) -> c_int {
    guard(-1, || {
        let _op = op();
        of.with_file(|f| f.set_owner(id(uid), id(gid)).map_err(en))?;
        Ok(0)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn fchown(fd: c_int, uid: uid_t, gid: gid_t) -> c_int {
    crate::guarded!(-1, {
        let of = ours!(fd, real::fchown(fd, uid, gid));
        if of.is_path() {
            crate::util::set_errno(libc::EBADF);
            return Ok(-1);
        }
        fchown_of(&of, uid, gid)
    })
}

// ------------------------------------------------------------------ times

type Times = (Option<SetTime>, Option<SetTime>);

/// Seconds and nanoseconds as the pool keeps a time, signed nanoseconds (1677 to 2262):
/// a time outside that range is clamped to it, as Linux clamps to each file system's range
/// and never fails for it.
fn clamped_ns(sec: i64, nsec: i64) -> i64 {
    sec.saturating_mul(1_000_000_000).saturating_add(nsec)
}

fn from_timespec(t: &libc::timespec) -> Res<Option<SetTime>> {
    match t.tv_nsec {
        libc::UTIME_NOW => Ok(Some(SetTime::Now)),
        libc::UTIME_OMIT => Ok(None),
        n if (0..1_000_000_000).contains(&n) => Ok(Some(SetTime::Ns(clamped_ns(t.tv_sec, n)))),
        _ => Err(libc::EINVAL),
    }
}

/// # Safety
/// `t` is null or points to two timespecs.
unsafe fn timespecs(t: *const libc::timespec) -> Res<Times> {
    if t.is_null() {
        return Ok((Some(SetTime::Now), Some(SetTime::Now)));
    }
    // SAFETY: as the caller promises.
    let (a, m) = unsafe { (&*t, &*t.add(1)) };
    Ok((from_timespec(a)?, from_timespec(m)?))
}

/// # Safety
/// `t` is null or points to two timevals.
unsafe fn timevals(t: *const libc::timeval) -> Res<Times> {
    if t.is_null() {
        return Ok((Some(SetTime::Now), Some(SetTime::Now)));
    }
    // SAFETY: as the caller promises.
    let (a, m) = unsafe { (&*t, &*t.add(1)) };
    let cv = |v: &libc::timeval| -> Res<Option<SetTime>> {
        if !(0..1_000_000).contains(&v.tv_usec) {
            return Err(libc::EINVAL);
        }
        Ok(Some(SetTime::Ns(clamped_ns(v.tv_sec, v.tv_usec * 1000))))
    };
    Ok((cv(a)?, cv(m)?))
}

fn times_routed(
    r: Res<Route>,
    t: Res<Times>,
    follow: bool,
    realf: impl FnOnce(*const c_char) -> c_int,
) -> c_int {
    guard(-1, || {
        let _op = op();
        let (a, m) = t?;
        match side(r, follow)? {
            Side::Pool(fs, p) => ok(fs.utimens_at(None, &p, a, m, follow)),
            Side::Removed(fs, d, _) => ok(fs.utimens_at(Some(&d), b".", a, m, follow)),
            Side::Real(p) => real_ret(realf(p.as_ptr())),
        }
    })
}

fn times_of(of: &OpenFile, t: Res<Times>) -> c_int {
    guard(-1, || {
        let _op = op();
        let (a, m) = t?;
        of.with_file(|f| f.set_times(a, m).map_err(en))?;
        Ok(0)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn utimensat(
    dirfd: c_int,
    path: *const c_char,
    t: *const libc::timespec,
    flags: c_int,
) -> c_int {
    crate::guarded!(-1, {
        if path.is_null() {
            let of = ours!(dirfd, real::utimensat(dirfd, path, t, flags));
            // SAFETY: the caller's times.
            return Ok(times_of(&of, unsafe { timespecs(t) }));
        }
        let r = routed!(
            dirfd,
            path,
            flags & libc::AT_SYMLINK_NOFOLLOW == 0,
            real::utimensat(dirfd, path, t, flags)
        );
        // SAFETY: the caller's times; the real call on the resolved path.
        times_routed(
            r,
            unsafe { timespecs(t) },
            flags & libc::AT_SYMLINK_NOFOLLOW == 0,
            |p| unsafe { real::utimensat(libc::AT_FDCWD, p, t, flags) },
        )
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn futimens(fd: c_int, t: *const libc::timespec) -> c_int {
    crate::guarded!(-1, {
        let of = ours!(fd, real::futimens(fd, t));
        // SAFETY: the caller's times.
        times_of(&of, unsafe { timespecs(t) })
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn utime(path: *const c_char, t: *const libc::utimbuf) -> c_int {
    crate::guarded!(-1, {
        let r = routed!(libc::AT_FDCWD, path, true, real::utime(path, t));
        let times = if t.is_null() {
            Ok((Some(SetTime::Now), Some(SetTime::Now)))
        } else {
            // SAFETY: the caller's utimbuf.
            let u = unsafe { &*t };
            Ok((
                Some(SetTime::Ns(clamped_ns(u.actime, 0))),
                Some(SetTime::Ns(clamped_ns(u.modtime, 0))),
            ))
        };
        // SAFETY: the real call on the resolved path.
        times_routed(r, times, true, |p| unsafe { real::utime(p, t) })
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn utimes(path: *const c_char, t: *const libc::timeval) -> c_int {
    crate::guarded!(-1, {
        let r = routed!(libc::AT_FDCWD, path, true, real::utimes(path, t));
        // SAFETY: the caller's times; the real call on the resolved path.
        times_routed(r, unsafe { timevals(t) }, true, |p| unsafe {
            real::utimes(p, t)
        })
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn lutimes(path: *const c_char, t: *const libc::timeval) -> c_int {
    crate::guarded!(-1, {
        let r = routed!(libc::AT_FDCWD, path, false, real::lutimes(path, t));
        // SAFETY: the caller's times; the real call on the resolved path.
        times_routed(r, unsafe { timevals(t) }, false, |p| unsafe {
            real::lutimes(p, t)
        })
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn futimesat(
    dirfd: c_int,
    path: *const c_char,
    t: *const libc::timeval,
) -> c_int {
    crate::guarded!(-1, {
        let r = routed!(dirfd, path, true, real::futimesat(dirfd, path, t));
        // SAFETY: the caller's times; the real call on the resolved path.
        times_routed(r, unsafe { timevals(t) }, true, |p| unsafe {
            real::utimes(p, t)
        })
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn futimes(fd: c_int, t: *const libc::timeval) -> c_int {
    crate::guarded!(-1, {
        let of = ours!(fd, real::futimes(fd, t));
        // SAFETY: the caller's times.
        times_of(&of, unsafe { timevals(t) })
    })
}

// ------------------------------------------------------------------ extended attributes

/// An xattr call on a path of ours: the path must exist; then `answer`.
fn xattr_routed(
    r: Res<Route>,
    follow: bool,
    answer: Res<ssize_t>,
    realf: impl FnOnce(*const c_char) -> ssize_t,
) -> ssize_t {
    guard(-1, || {
        let _op = op();
        match side(r, follow)? {
            Side::Pool(fs, p) => {
                fs.stat_at(None, &p, follow).map_err(en)?;
                answer
            }
            Side::Removed(..) => answer,
            Side::Real(p) => real_ret(realf(p.as_ptr())),
        }
    })
}

macro_rules! xattr_gets {
    ($($name:ident, $follow:expr);* $(;)?) => {$(
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(path: *const c_char, name: *const c_char, v: *mut c_void, n: size_t) -> ssize_t {
    crate::guarded!(-1, {
            let r = routed!(libc::AT_FDCWD, path, $follow, real::$name(path, name, v, n));
            // SAFETY: the real call on the resolved path.
            xattr_routed(r, $follow, Err(libc::ENODATA), |p| unsafe { real::$name(p, name, v, n) })
        })
}
    )*};
}
xattr_gets! { getxattr, true; lgetxattr, false; }

macro_rules! xattr_lists {
    ($($name:ident, $follow:expr);* $(;)?) => {$(
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(path: *const c_char, list: *mut c_char, n: size_t) -> ssize_t {
    crate::guarded!(-1, {
            let r = routed!(libc::AT_FDCWD, path, $follow, real::$name(path, list, n));
            // SAFETY: the real call on the resolved path.
            xattr_routed(r, $follow, Ok(0), |p| unsafe { real::$name(p, list, n) })
        })
}
    )*};
}
xattr_lists! { listxattr, true; llistxattr, false; }

macro_rules! xattr_sets {
    ($($name:ident, $follow:expr);* $(;)?) => {$(
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(path: *const c_char, name: *const c_char, v: *const c_void, n: size_t, fl: c_int) -> c_int {
    crate::guarded!(-1, {
            let r = routed!(libc::AT_FDCWD, path, $follow, real::$name(path, name, v, n, fl));
            // SAFETY: the real call on the resolved path.
            xattr_routed(r, $follow, Err(libc::ENOTSUP), |p| unsafe { real::$name(p, name, v, n, fl) as ssize_t }) as c_int
        })
}
    )*};
}
xattr_sets! { setxattr, true; lsetxattr, false; }

macro_rules! xattr_removes {
    ($($name:ident, $follow:expr);* $(;)?) => {$(
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(path: *const c_char, name: *const c_char) -> c_int {
    crate::guarded!(-1, {
            let r = routed!(libc::AT_FDCWD, path, $follow, real::$name(path, name));
            // SAFETY: the real call on the resolved path.
            xattr_routed(r, $follow, Err(libc::ENODATA), |p| unsafe { real::$name(p, name) as ssize_t }) as c_int
        })
}
    )*};
}
xattr_removes! { removexattr, true; lremovexattr, false; }

fn fail<T: From<i8>>(e: c_int) -> T {
    crate::util::set_errno(e);
    T::from(-1)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn fgetxattr(
    fd: c_int,
    name: *const c_char,
    v: *mut c_void,
    n: size_t,
) -> ssize_t {
    crate::guarded!(-1, {
        let _of = ours!(fd, real::fgetxattr(fd, name, v, n));
        fail(libc::ENODATA)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn flistxattr(fd: c_int, list: *mut c_char, n: size_t) -> ssize_t {
    crate::guarded!(-1, {
        let _of = ours!(fd, real::flistxattr(fd, list, n));
        0
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn fsetxattr(
    fd: c_int,
    name: *const c_char,
    v: *const c_void,
    n: size_t,
    fl: c_int,
) -> c_int {
    crate::guarded!(-1, {
        let _of = ours!(fd, real::fsetxattr(fd, name, v, n, fl));
        fail(libc::ENOTSUP)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn fremovexattr(fd: c_int, name: *const c_char) -> c_int {
    crate::guarded!(-1, {
        let _of = ours!(fd, real::fremovexattr(fd, name));
        fail(libc::ENODATA)
    })
}

//! Calls that change the namespace: mkdir, rmdir, unlink, rename, link, symlink, readlink,
//! truncate, mknod. A rename or link from one side of the mount prefix to the other is
//! EXDEV, as between two file systems.

use crate::ops::{Side, inside, ok, real_ret, side, staying};
use crate::route::{Route, route};
use crate::session::op;
use crate::util::{Res, cbytes, en, guard};
use crate::{real, reallinks, routed};
use engram_core::Handle;
use libc::{c_char, c_int, c_uint, mode_t, off_t, size_t, ssize_t};

/// One path of a two-path call.
enum Any {
    /// Not ours: the caller's arguments.
    Orig(c_int, *const c_char),
    Side(Side),
}

impl Any {
    fn of(dirfd: c_int, path: *const c_char, r: Res<Route>, follow: bool) -> Res<Any> {
        Ok(match r {
            Ok(Route::Pass) => Any::Orig(dirfd, path),
            r => Any::Side(side(r, follow)?),
        })
    }

    /// The arguments for the real call (None for a pool path).
    fn real(&self) -> Option<(c_int, *const c_char)> {
        match self {
            Any::Orig(fd, p) => Some((*fd, *p)),
            Any::Side(Side::Real(p)) => Some((libc::AT_FDCWD, p.as_ptr())),
            Any::Side(Side::Pool(..) | Side::Removed(..)) => None,
        }
    }

    /// A pool path: the directory it starts from (a removed one: `Side::Removed`), and the
    /// path.
    fn pool(&self) -> Option<(&engram_core::Fs, Option<&engram_core::File>, &[u8])> {
        match self {
            Any::Side(Side::Pool(fs, p)) => Some((fs, None, p)),
            Any::Side(Side::Removed(fs, d, _)) => Some((fs, Some(d), b".")),
            _ => None,
        }
    }
}

/// A pool path of a two-path call: the directory it starts from (None: the root), and
/// the path.
type PoolPath<'a> = (Option<&'a engram_core::File>, &'a [u8]);

/// Where each path of a two-path call starts in the pool, and the path.
type Starts<'a> = ((Option<Handle>, &'a [u8]), (Option<Handle>, &'a [u8]));

/// A two-path call served on the pool view that stays inside it.
type Fast<'f> = &'f dyn Fn(&engram_core::Fs, Starts) -> engram_core::Result<()>;

/// A two-path call (rename, link): both in the pool, both outside, or EXDEV. `fast`, when
/// given, serves two pool paths with one walk each on the pool view that stays inside it
/// (None when a path may leave the pool; the paths are then resolved by the shim).
#[allow(clippy::too_many_arguments)]
fn two(
    (fd1, p1): (c_int, *const c_char),
    (fd2, p2): (c_int, *const c_char),
    lookups: (Lookup, Lookup),
    fast: Option<Fast>,
    pool: impl FnOnce(&engram_core::Fs, PoolPath, PoolPath) -> Res<c_int>,
    realf: impl Fn((c_int, *const c_char), (c_int, *const c_char)) -> c_int,
) -> c_int {
    let follow1 = matches!(lookups.0, Lookup::Whole { follow: true });
    // SAFETY: the caller's paths are valid C strings.
    let (mut r1, mut r2) = unsafe { (route(fd1, p1), route(fd2, p2)) };
    let (pass1, pass2) = (matches!(r1, Ok(Route::Pass)), matches!(r2, Ok(Route::Pass)));
    if pass1 && pass2 {
        let v = realf((fd1, p1), (fd2, p2));
        let e = crate::util::errno();
        if v != -1 || e != libc::ENOENT {
            return v;
        }
    }
    // A path given outside the prefix may reach it through real symlinks: looked at only
    // when the kernel could not find a path or the other path is the pool's.
    // SAFETY: the caller's paths.
    let (a, b) = unsafe {
        (
            pass1
                .then(|| reallinks::reroute(fd1, p1, follow1))
                .flatten(),
            pass2.then(|| reallinks::reroute(fd2, p2, false)).flatten(),
        )
    };
    if pass1 && pass2 && a.is_none() && b.is_none() {
        crate::util::set_errno(libc::ENOENT);
        return -1;
    }
    r1 = a.unwrap_or(r1);
    r2 = b.unwrap_or(r2);
    guard(-1, || {
        let _op = op();
        // One path in the pool, the other null: EFAULT, as the kernel checks both names
        // before it compares file systems (EXDEV before, found by pjdfstest).
        if p1.is_null() || p2.is_null() {
            return Err(libc::EFAULT);
        }
        if let (Some(fast), Ok(a), Ok(b)) = (fast, &r1, &r2)
            && let (Some(a), Some(b)) = (a.start(), b.start())
            && let Some(()) = staying(|fs| fast(fs, (a, b)))?
        {
            return Ok(0);
        }
        let a = Any::of(fd1, p1, r1, follow1)?;
        let b = Any::of(fd2, p2, r2, false)?;
        match (a.pool(), b.pool(), a.real(), b.real()) {
            (Some((fs, da, a)), Some((_, db, b)), _, _) => pool(fs, (da, a), (db, b)),
            (_, _, Some(x), Some(y)) => real_ret(realf(x, y)),
            _ => Err((a.looked_up(lookups.0))
                .and(b.looked_up(lookups.1))
                .err()
                .unwrap_or(libc::EXDEV)),
        }
    })
}

/// What of a path Linux looks up before it compares the two file systems of a rename or
/// link: ENOENT, ENOTDIR and the like, and a link's EEXIST, come before EXDEV.
#[derive(Clone, Copy)]
enum Lookup {
    /// The directory the name is in (a rename's two names).
    Parent,
    /// The whole path (a link's existing name).
    Whole { follow: bool },
    /// The directory, and the name not taken (a link's new name).
    New,
}

impl Any {
    /// Look the path up as Linux does before EXDEV (see `Lookup`).
    fn looked_up(&self, what: Lookup) -> Res<()> {
        if let Lookup::New = what {
            self.looked_up(Lookup::Parent)?;
            return match self.looked_up(Lookup::Whole { follow: false }) {
                Ok(()) => Err(libc::EEXIST),
                Err(_) => Ok(()),
            };
        }
        let (path, whole) = match (self, what) {
            (Any::Side(Side::Removed(..)), _) => return Ok(()),
            (_, Lookup::Whole { follow }) => (None, Some(follow)),
            // SAFETY: the caller's path, a valid C string (null paths were refused).
            (Any::Orig(_, p), _) => (Some(parent_of(unsafe { cbytes(*p) })), None),
            (Any::Side(Side::Real(p)), _) => (Some(parent_of(p.as_bytes())), None),
            (Any::Side(Side::Pool(_, p)), _) => (Some(parent_of(p)), None),
        };
        match self {
            Any::Side(Side::Pool(fs, p)) => {
                let m = fs
                    .stat_at(None, path.unwrap_or(p), whole.unwrap_or(true))
                    .map_err(en)?;
                if whole.is_none() && !m.is_dir() {
                    return Err(libc::ENOTDIR);
                }
                Ok(())
            }
            _ => {
                let (fd, p) = self.real().ok_or(libc::EXDEV)?;
                let p = match path {
                    Some(parent) => std::ffi::CString::new(parent).map_err(|_| libc::EINVAL)?,
                    // SAFETY: the caller's path, a valid C string, or our resolved one.
                    None => std::ffi::CString::from(unsafe { std::ffi::CStr::from_ptr(p) }),
                };
                // SAFETY: a plain C struct, all zeros valid.
                let mut st: libc::stat = unsafe { std::mem::zeroed() };
                let flags = match whole {
                    Some(false) => libc::AT_SYMLINK_NOFOLLOW,
                    _ => 0,
                };
                // SAFETY: fstatat of a NUL-terminated path into a local buffer.
                if unsafe { real::fstatat(fd, p.as_ptr(), &mut st, flags) } != 0 {
                    return Err(crate::util::errno());
                }
                if whole.is_none() && st.st_mode & libc::S_IFMT != libc::S_IFDIR {
                    return Err(libc::ENOTDIR);
                }
                Ok(())
            }
        }
    }
}

/// The directory part of `p` ("." for a bare name, "/" for a name in the root), trailing
/// slashes ignored.
fn parent_of(p: &[u8]) -> &[u8] {
    let end = p.iter().rposition(|&c| c != b'/').map_or(0, |k| k + 1);
    match p[..end].iter().rposition(|&c| c == b'/') {
        None => b".",
        Some(0) => b"/",
        Some(k) => &p[..k],
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn rename(from: *const c_char, to: *const c_char) -> c_int {
    crate::guarded!(-1, {
        // SAFETY: forwarding to renameat with the same paths.
        unsafe { renameat2(libc::AT_FDCWD, from, libc::AT_FDCWD, to, 0) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn renameat(
    fd1: c_int,
    from: *const c_char,
    fd2: c_int,
    to: *const c_char,
) -> c_int {
    renameat2_inside(fd1, from, fd2, to, 0)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn renameat2(
    fd1: c_int,
    from: *const c_char,
    fd2: c_int,
    to: *const c_char,
    flags: c_uint,
) -> c_int {
    renameat2_inside(fd1, from, fd2, to, flags)
}

/// renameat2's body, called directly (not through the exported symbol, which a program
/// may define itself: patch's gnulib renameat2 calls `syscall`, which comes back here).
pub(crate) fn renameat2_inside(
    fd1: c_int,
    from: *const c_char,
    fd2: c_int,
    to: *const c_char,
    flags: c_uint,
) -> c_int {
    crate::guarded!(-1, {
        two(
            (fd1, from),
            (fd2, to),
            (Lookup::Parent, Lookup::Parent),
            Some(&|fs, ((d1, a), (d2, b))| fs.rename_from(d1, a, d2, b, flags)),
            |fs, (da, a), (db, b)| {
                if flags & !(libc::RENAME_NOREPLACE | libc::RENAME_EXCHANGE) != 0 {
                    return Err(libc::EINVAL);
                }
                ok(fs.rename_at(da, a, db, b, flags))
            },
            // SAFETY: the real call with the caller's (or resolved) paths.
            |(f1, a), (f2, b)| unsafe {
                if flags == 0 {
                    real::renameat(f1, a, f2, b)
                } else {
                    real::renameat2(f1, a, f2, b, flags)
                }
            },
        )
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn link(from: *const c_char, to: *const c_char) -> c_int {
    crate::guarded!(-1, {
        // SAFETY: as linkat without flags.
        unsafe { linkat(libc::AT_FDCWD, from, libc::AT_FDCWD, to, 0) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn linkat(
    fd1: c_int,
    from: *const c_char,
    fd2: c_int,
    to: *const c_char,
    flags: c_int,
) -> c_int {
    crate::guarded!(-1, {
        // SAFETY: the caller's path.
        if unsafe { crate::stat::empty_path(from, flags) } {
            let of = crate::ours!(fd1, real::linkat(fd1, from, fd2, to, flags));
            // SAFETY: the caller's path.
            return Ok(link_descriptor(&of, unsafe { route(fd2, to) }));
        }
        let follow = flags & libc::AT_SYMLINK_FOLLOW != 0;
        two(
            (fd1, from),
            (fd2, to),
            (Lookup::Whole { follow }, Lookup::New),
            Some(&|fs, ((d1, a), (d2, b))| fs.link_from(d1, a, d2, b, follow)),
            |fs, (da, a), (db, b)| ok(fs.link_at(da, a, db, b, follow)),
            // SAFETY: the real call with the caller's (or resolved) paths.
            |(f1, a), (f2, b)| unsafe {
                if f1 == libc::AT_FDCWD && f2 == libc::AT_FDCWD && flags == 0 {
                    real::link(a, b)
                } else {
                    real::linkat(f1, a, f2, b, flags)
                }
            },
        )
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn symlink(target: *const c_char, path: *const c_char) -> c_int {
    crate::guarded!(-1, {
        // SAFETY: as symlinkat relative to the current directory.
        unsafe { symlinkat(target, libc::AT_FDCWD, path) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn symlinkat(
    target: *const c_char,
    dirfd: c_int,
    path: *const c_char,
) -> c_int {
    crate::guarded!(-1, {
        let r = routed!(dirfd, path, false, real::symlinkat(target, dirfd, path));
        guard(-1, || {
            let _op = op();
            if target.is_null() {
                return Err(libc::EFAULT);
            }
            // SAFETY: the caller's target string.
            let t = unsafe { cbytes(target) };
            if t.is_empty() {
                return Err(libc::ENOENT);
            }
            match side(r, false)? {
                Side::Pool(fs, p) => ok(fs.symlink(t, &p)),
                Side::Removed(fs, d, _) => ok(fs.symlink_at(t, Some(&d), b".")),
                Side::Real(p) => {
                    // SAFETY: the real call on the resolved path.
                    real_ret(unsafe { real::symlinkat(target, libc::AT_FDCWD, p.as_ptr()) })
                }
            }
        })
    })
}

/// linkat(fd, "", …, AT_EMPTY_PATH) of a descriptor of ours: a new name for its node. Linux
/// asks CAP_DAC_READ_SEARCH for it (ENOENT without); the pool is one file system (EXDEV to
/// a name outside it).
fn link_descriptor(of: &crate::table::OpenFile, to: Res<Route>) -> c_int {
    guard(-1, || {
        let _op = op();
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return Err(libc::ENOENT);
        }
        if matches!(to, Ok(Route::Pass)) {
            return Err(libc::EXDEV);
        }
        match side(to, false)? {
            Side::Pool(fs, p) => ok(fs.link_handle(of.handle(), None, &p)),
            Side::Removed(..) => Err(libc::ENOENT),
            Side::Real(_) => Err(libc::EXDEV),
        }
    })
}

/// Copy a link's target into the caller's buffer of `n` bytes, cut to fit, as readlink does.
fn copy_target(t: &[u8], out: *mut c_char, n: size_t) -> Res<ssize_t> {
    let k = t.len().min(n);
    // SAFETY: the caller's buffer holds n bytes.
    unsafe { std::ptr::copy_nonoverlapping(t.as_ptr(), out as *mut u8, k) };
    Ok(k as ssize_t)
}

/// readlinkat of a descriptor of ours with an empty path: its target if it is a symlink
/// (opened with O_PATH|O_NOFOLLOW), ENOENT otherwise, as Linux answers.
fn readlink_of(of: &crate::table::OpenFile, out: *mut c_char, n: size_t) -> ssize_t {
    guard(-1, || {
        let _op = op();
        let fs = crate::session::fs()?;
        if !of.with_file(|f| f.metadata().map_err(en))?.is_symlink() {
            return Err(libc::ENOENT);
        }
        copy_target(&fs.readlink_handle(of.handle()).map_err(en)?, out, n)
    })
}

fn readlink_routed(r: Res<Route>, out: *mut c_char, n: size_t) -> ssize_t {
    guard(-1, || {
        let _op = op();
        let copy_out = |t: &[u8]| copy_target(t, out, n);
        // The kernel's `fd/N` link of a descriptor of ours reads as its file's path.
        if let Ok(Route::Desc {
            fd,
            via: crate::magicfd::Via::Link,
            ..
        }) = &r
        {
            let of = crate::table::get(*fd).ok_or(libc::EBADF)?;
            return copy_out(&crate::route::mounted(of.path()));
        }
        match side(r, false)? {
            Side::Pool(fs, p) => copy_out(&fs.readlink(&p).map_err(en)?),
            Side::Removed(fs, d, _) => copy_out(&fs.readlink_at(Some(&d), b".").map_err(en)?),
            // SAFETY: the real call on the resolved path.
            Side::Real(p) => real_ret(unsafe { real::readlink(p.as_ptr(), out, n) }),
        }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn readlink(path: *const c_char, out: *mut c_char, n: size_t) -> ssize_t {
    crate::guarded!(-1, {
        let r = routed!(libc::AT_FDCWD, path, false, real::readlink(path, out, n));
        readlink_routed(r, out, n)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn readlinkat(
    dirfd: c_int,
    path: *const c_char,
    out: *mut c_char,
    n: size_t,
) -> ssize_t {
    crate::guarded!(-1, {
        // An empty path reads the link the descriptor is (O_PATH|O_NOFOLLOW), as on Linux.
        // SAFETY: the caller's path.
        if unsafe { crate::stat::empty_path(path, libc::AT_EMPTY_PATH) } && !path.is_null() {
            let of = crate::ours!(dirfd, real::readlinkat(dirfd, path, out, n));
            return Ok(readlink_of(&of, out, n));
        }
        let r = routed!(dirfd, path, false, real::readlinkat(dirfd, path, out, n));
        readlink_routed(r, out, n)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn __readlink_chk(
    path: *const c_char,
    out: *mut c_char,
    n: size_t,
    len: size_t,
) -> ssize_t {
    crate::guarded!(-1, {
        if n > len {
            std::process::abort();
        }
        // SAFETY: same contract as readlink.
        unsafe { readlink(path, out, n) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn __readlinkat_chk(
    dirfd: c_int,
    path: *const c_char,
    out: *mut c_char,
    n: size_t,
    len: size_t,
) -> ssize_t {
    crate::guarded!(-1, {
        if n > len {
            std::process::abort();
        }
        // SAFETY: same contract as readlinkat.
        unsafe { readlinkat(dirfd, path, out, n) }
    })
}

fn mkdir_routed(r: Res<Route>, mode: mode_t) -> c_int {
    guard(-1, || {
        let _op = op();
        let mode = mode & 0o7777;
        let masked = mode & !crate::ops::current_umask();
        if let Some(()) = inside(&r, |fs, at, p| fs.mkdir_from(at, p, masked))? {
            return Ok(0);
        }
        match side(r, false)? {
            Side::Pool(fs, p) => ok(fs.mkdir(&p, masked)),
            Side::Removed(fs, d, _) => ok(fs.mkdir_at(Some(&d), b".", masked)),
            // SAFETY: the real call on the resolved path.
            Side::Real(p) => real_ret(unsafe { real::mkdir(p.as_ptr(), mode) }),
        }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn mkdir(path: *const c_char, mode: mode_t) -> c_int {
    crate::guarded!(-1, {
        let r = routed!(libc::AT_FDCWD, path, false, real::mkdir(path, mode));
        mkdir_routed(r, mode)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn mkdirat(dirfd: c_int, path: *const c_char, mode: mode_t) -> c_int {
    crate::guarded!(-1, {
        let r = routed!(dirfd, path, false, real::mkdirat(dirfd, path, mode));
        mkdir_routed(r, mode)
    })
}

fn unlink_routed(r: Res<Route>, dir: bool) -> c_int {
    guard(-1, || {
        let _op = op();
        if let Some(()) = inside(&r, |fs, at, p| fs.unlink_from(at, p, dir))? {
            return Ok(0);
        }
        match side(r, false)? {
            Side::Pool(fs, p) => ok(fs.unlink_at(None, &p, dir)),
            Side::Removed(fs, d, _) => ok(fs.unlink_at(Some(&d), b".", dir)),
            // SAFETY: the real call on the resolved path.
            Side::Real(p) => real_ret(unsafe {
                real::unlinkat(
                    libc::AT_FDCWD,
                    p.as_ptr(),
                    if dir { libc::AT_REMOVEDIR } else { 0 },
                )
            }),
        }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn unlink(path: *const c_char) -> c_int {
    crate::guarded!(-1, {
        let r = routed!(libc::AT_FDCWD, path, false, real::unlink(path));
        unlink_routed(r, false)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn rmdir(path: *const c_char) -> c_int {
    crate::guarded!(-1, {
        let r = routed!(libc::AT_FDCWD, path, false, real::rmdir(path));
        unlink_routed(r, true)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn unlinkat(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int {
    crate::guarded!(-1, {
        let r = routed!(dirfd, path, false, real::unlinkat(dirfd, path, flags));
        unlink_routed(r, flags & libc::AT_REMOVEDIR != 0)
    })
}

/// remove(3): glibc's calls unlink/rmdir internally, so it is served here.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn remove(path: *const c_char) -> c_int {
    crate::guarded!(-1, {
        let r = routed!(libc::AT_FDCWD, path, false, real::remove(path));
        guard(-1, || {
            let _op = op();
            match side(r, false)? {
                Side::Pool(fs, p) => {
                    let dir = fs.lstat(&p).map_err(en)?.is_dir();
                    ok(fs.unlink_at(None, &p, dir))
                }
                Side::Removed(fs, d, _) => ok(fs.unlink_at(Some(&d), b".", true)),
                // SAFETY: the real call on the resolved path.
                Side::Real(p) => real_ret(unsafe { real::remove(p.as_ptr()) }),
            }
        })
    })
}

fn truncate_routed(r: Res<Route>, len: off_t) -> c_int {
    guard(-1, || {
        let _op = op();
        if len < 0 {
            return Err(libc::EINVAL);
        }
        match side(r, true)? {
            Side::Pool(fs, p) => {
                let truncate = || fs.truncate(&p, len as u64).map_err(en);
                // Only a file some process maps needs its handle (`mmap::resizing`).
                let mapped = fs
                    .stat(&p)
                    .ok()
                    .filter(|st| fs.mapped_anywhere(st.ino))
                    .and_then(|st| fs.handle_of(st.ino).ok());
                match mapped {
                    Some(h) => {
                        let size = || fs.stat(&p).map(|st| st.size).map_err(en);
                        crate::mmap::resizing(h, size, truncate)?;
                    }
                    None => truncate()?,
                }
                Ok(0)
            }
            Side::Removed(..) => Err(libc::EISDIR),
            // SAFETY: the real call on the resolved path.
            Side::Real(p) => real_ret(unsafe { real::truncate64(p.as_ptr(), len) }),
        }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn truncate(path: *const c_char, len: off_t) -> c_int {
    crate::guarded!(-1, {
        let r = routed!(libc::AT_FDCWD, path, true, real::truncate(path, len));
        truncate_routed(r, len)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn truncate64(path: *const c_char, len: off_t) -> c_int {
    crate::guarded!(-1, {
        let r = routed!(libc::AT_FDCWD, path, true, real::truncate64(path, len));
        truncate_routed(r, len)
    })
}

/// mknod and mkfifo: a regular file, FIFO, socket or device node (the engine's `mknod`:
/// root alone makes devices). The permission bits lose the umask, as the kernel takes it.
fn mknod_routed(r: Res<Route>, mode: mode_t, dev: libc::dev_t) -> c_int {
    guard(-1, || {
        let _op = op();
        let masked = (mode & libc::S_IFMT) | (mode & 0o7777 & !crate::ops::current_umask());
        if let Some(()) = inside(&r, |fs, at, p| fs.mknod_from(at, p, masked, dev))? {
            return Ok(0);
        }
        match side(r, false)? {
            Side::Pool(fs, p) => ok(fs.mknod(&p, masked, dev)),
            // Its name exists (EEXIST), once the type is found valid.
            Side::Removed(fs, d, _) => ok(fs.mknod_at(Some(&d), b".", masked, dev)),
            // SAFETY: the real call on the resolved path.
            Side::Real(p) => real_ret(unsafe { real::mknod(p.as_ptr(), mode, dev) }),
        }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn mknod(path: *const c_char, mode: mode_t, dev: libc::dev_t) -> c_int {
    crate::guarded!(-1, {
        let r = routed!(libc::AT_FDCWD, path, false, real::mknod(path, mode, dev));
        mknod_routed(r, mode, dev)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn mknodat(
    dirfd: c_int,
    path: *const c_char,
    mode: mode_t,
    dev: libc::dev_t,
) -> c_int {
    crate::guarded!(-1, {
        let r = routed!(dirfd, path, false, real::mknodat(dirfd, path, mode, dev));
        mknod_routed(r, mode, dev)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn mkfifo(path: *const c_char, mode: mode_t) -> c_int {
    crate::guarded!(-1, {
        let r = routed!(libc::AT_FDCWD, path, false, real::mkfifo(path, mode));
        mknod_routed(r, mode | libc::S_IFIFO, 0)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn mkfifoat(dirfd: c_int, path: *const c_char, mode: mode_t) -> c_int {
    crate::guarded!(-1, {
        let r = routed!(dirfd, path, false, real::mkfifoat(dirfd, path, mode));
        mknod_routed(r, mode | libc::S_IFIFO, 0)
    })
}

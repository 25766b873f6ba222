//! The stat family in every form glibc 2.36 exports (stat/lstat/fstat/fstatat and their 64
//! forms, the old `__xstat` entry points, statx), statfs/statvfs and pathconf.

use crate::resolve::{Resolved, walk};
use crate::session::{self, op};
use crate::table::{self, OpenFile};
use crate::util::{Res, en, errno, guard};
use crate::{ours, real, routed};
use engram_core::Metadata;
use libc::{c_char, c_int, c_long, c_uint};

/// The device number EngramFS files report (major 0xEE; stable so that tools that compare
/// st_dev treat the pool as one file system).
pub const DEV_MAJOR: u32 = 0xEE;
pub const DEV_MINOR: u32 = 0x42;
/// f_type of statfs: "ENGR".
pub const FS_MAGIC: i64 = 0x454E_4752;

#[inline]
fn split(ns: i64) -> (i64, i64) {
    const NS: i64 = 1_000_000_000;
    if ns >= 0 {
        // Unsigned division by a constant: a multiply and a shift, no sign fix-ups.
        let u = ns as u64;
        ((u / NS as u64) as i64, (u % NS as u64) as i64)
    } else {
        (ns.div_euclid(NS), ns.rem_euclid(NS))
    }
}

#[inline(always)]
pub fn fill_stat(m: &Metadata, st: &mut libc::stat) {
    // SAFETY: libc::stat is plain data; all-zero is a valid value.
    *st = unsafe { std::mem::zeroed() };
    st.st_dev = libc::makedev(DEV_MAJOR, DEV_MINOR);
    st.st_ino = m.ino;
    st.st_mode = m.mode;
    st.st_nlink = m.nlink as _;
    st.st_uid = m.uid;
    st.st_gid = m.gid;
    st.st_rdev = m.rdev;
    st.st_size = m.size as i64;
    st.st_blksize = m.blksize as _;
    st.st_blocks = m.blocks as i64;
    // A write sets mtime and ctime together, a create all three: split each value once.
    let a = split(m.atime_ns);
    let mt = if m.mtime_ns == m.atime_ns {
        a
    } else {
        split(m.mtime_ns)
    };
    let c = if m.ctime_ns == m.mtime_ns {
        mt
    } else {
        split(m.ctime_ns)
    };
    (st.st_atime, st.st_atime_nsec) = a;
    (st.st_mtime, st.st_mtime_nsec) = mt;
    (st.st_ctime, st.st_ctime_nsec) = c;
}

fn ts(ns: i64) -> libc::statx_timestamp {
    let (s, n) = split(ns);
    // SAFETY: plain data.
    let mut t: libc::statx_timestamp = unsafe { std::mem::zeroed() };
    t.tv_sec = s;
    t.tv_nsec = n as u32;
    t
}

pub fn fill_statx(m: &Metadata, st: &mut libc::statx) {
    // SAFETY: plain data.
    *st = unsafe { std::mem::zeroed() };
    st.stx_mask = libc::STATX_BASIC_STATS;
    st.stx_blksize = m.blksize as u32;
    st.stx_nlink = m.nlink;
    st.stx_uid = m.uid;
    st.stx_gid = m.gid;
    st.stx_mode = m.mode as u16;
    st.stx_ino = m.ino;
    st.stx_size = m.size;
    st.stx_blocks = m.blocks;
    st.stx_atime = ts(m.atime_ns);
    st.stx_mtime = ts(m.mtime_ns);
    st.stx_ctime = ts(m.ctime_ns);
    st.stx_dev_major = DEV_MAJOR;
    st.stx_dev_minor = DEV_MINOR;
    st.stx_rdev_major = libc::major(m.rdev);
    st.stx_rdev_minor = libc::minor(m.rdev);
}

pub fn stat_of(of: &OpenFile) -> Res<Metadata> {
    session::fs()?.stat_handle(of.handle()).map_err(en)
}

/// Look up a routed path (following a final symlink if `follow`): `meta` gets its metadata,
/// or `real` the real path it leads to outside the pool. Inline, so that the metadata goes
/// straight from the walk into the caller's buffer.
#[inline(always)]
pub fn stat_routed<T>(
    r: Res<crate::route::Route>,
    follow: bool,
    meta: impl FnOnce(&Metadata) -> Res<T>,
    real: impl FnOnce(&std::ffi::CStr) -> Res<T>,
) -> Res<T> {
    let r = r?;
    if let crate::route::Route::Desc { fd, orig, .. } = r {
        return stat_desc(fd, orig, follow, meta, real);
    }
    let Some((dir, path)) = r.start() else {
        return Err(libc::EINVAL);
    };
    let fs = session::fs()?;
    // One walk of the pool, unless the path may leave it (an absolute symlink, ".." in
    // the root): then the shim's own walk of the whole path.
    match fs.stat_inside_from(dir, path, follow) {
        Ok(Some(m)) => meta(&m),
        Ok(None) => {
            let crate::route::Route::Ours(raw) = r.joined()? else {
                return Err(libc::EINVAL);
            };
            match stat_walked(fs, &raw, follow)? {
                Ok(m) => meta(&m),
                Err(p) => real(&p),
            }
        }
        Err(e) => Err(crate::util::en(e)),
    }
}

/// `stat_routed` of a path naming descriptor `fd` of ours (`magicfd`): followed, the
/// description's file; not followed, the kernel's link `orig`.
#[cold]
fn stat_desc<T>(
    fd: c_int,
    orig: &[u8],
    follow: bool,
    meta: impl FnOnce(&Metadata) -> Res<T>,
    real: impl FnOnce(&std::ffi::CStr) -> Res<T>,
) -> Res<T> {
    if !follow {
        return real(&crate::util::cstring(orig)?);
    }
    let of = table::get(fd).ok_or(libc::EBADF)?;
    meta(&session::fs()?.stat_handle(of.handle()).map_err(en)?)
}

/// `stat_routed` by the shim's own walk.
#[cold]
fn stat_walked(
    fs: &engram_core::Fs,
    raw: &[u8],
    follow: bool,
) -> Res<Result<Metadata, std::ffi::CString>> {
    let w = walk(fs, raw, follow, true)?;
    Ok(match (w.resolved, w.found) {
        (Resolved::Inside(_), Some((_, m))) => Ok(m),
        (Resolved::Inside(p), None) => {
            Ok(if follow { fs.stat(&p) } else { fs.lstat(&p) }.map_err(en)?)
        }
        (Resolved::Outside(p), _) => Err(crate::util::cstring(&p)?),
    })
}

/// stat of a routed path into the caller's buffer (inside the export's guard).
#[inline(always)]
fn do_stat(r: Res<crate::route::Route>, follow: bool, st: *mut libc::stat) -> Res<c_int> {
    let _op = op();
    stat_routed(
        r,
        follow,
        |m| {
            // SAFETY: the caller's stat buffer.
            fill_stat(m, unsafe { &mut *st });
            Ok(0)
        },
        |p| {
            let flags = if follow { 0 } else { libc::AT_SYMLINK_NOFOLLOW };
            // SAFETY: real fstatat on the resolved path into the caller's buffer.
            let r = unsafe { real::fstatat64(libc::AT_FDCWD, p.as_ptr(), st, flags) };
            if r < 0 { Err(errno()) } else { Ok(0) }
        },
    )
}

/// fstat of one of our descriptors into the caller's buffer (inside the export's guard).
fn do_fstat(of: &OpenFile, st: *mut libc::stat) -> Res<c_int> {
    let _op = op();
    let m = stat_of(of)?;
    // SAFETY: the caller's stat buffer.
    fill_stat(&m, unsafe { &mut *st });
    Ok(0)
}

macro_rules! stats {
    ($($name:ident, $follow:expr);* $(;)?) => {$(
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(path: *const c_char, st: *mut libc::stat) -> c_int {
    crate::guarded!(-1, {
            let r = routed!(libc::AT_FDCWD, path, $follow, real::$name(path, st));
            do_stat(r, $follow, st)?
        })
}
    )*};
}
stats! { stat, true; stat64, true; lstat, false; lstat64, false; }

macro_rules! xstats {
    ($($name:ident, $follow:expr);* $(;)?) => {$(
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(ver: c_int, path: *const c_char, st: *mut libc::stat) -> c_int {
    crate::guarded!(-1, {
            let r = routed!(libc::AT_FDCWD, path, $follow, real::$name(ver, path, st));
            do_stat(r, $follow, st)?
        })
}
    )*};
}
xstats! { __xstat, true; __xstat64, true; __lxstat, false; __lxstat64, false; }

macro_rules! fstats {
    ($($name:ident),*) => {$(
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(fd: c_int, st: *mut libc::stat) -> c_int {
    crate::guarded!(-1, {
            let of = ours!(fd, real::$name(fd, st));
            do_fstat(&of, st)?
        })
}
    )*};
}
fstats!(fstat, fstat64);

macro_rules! fxstats {
    ($($name:ident),*) => {$(
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(ver: c_int, fd: c_int, st: *mut libc::stat) -> c_int {
    crate::guarded!(-1, {
            let of = ours!(fd, real::$name(ver, fd, st));
            do_fstat(&of, st)?
        })
}
    )*};
}
fxstats!(__fxstat, __fxstat64);

/// Whether an *at call with this path and flags means "the descriptor itself".
///
/// # Safety
/// `path` is null or a valid C string.
pub unsafe fn empty_path(path: *const c_char, flags: c_int) -> bool {
    // SAFETY: reading the first byte of a valid C string.
    flags & libc::AT_EMPTY_PATH != 0 && (path.is_null() || unsafe { *path } == 0)
}

fn fstatat_impl(
    dirfd: c_int,
    path: *const c_char,
    st: *mut libc::stat,
    flags: c_int,
    pass: impl FnOnce() -> c_int,
) -> Res<c_int> {
    // SAFETY: the caller's path.
    if unsafe { empty_path(path, flags) } {
        return match table::get(dirfd) {
            Some(of) => do_fstat(&of, st),
            None => crate::desc::refuse_spare(dirfd).map(|()| pass()),
        };
    }
    let follow = flags & libc::AT_SYMLINK_NOFOLLOW == 0;
    // SAFETY: the caller's path.
    let r = unsafe { crate::route::route(dirfd, path) };
    if let Ok(crate::route::Route::Pass) = r {
        let v = pass();
        if v != -1 {
            return Ok(v);
        }
        // SAFETY: the caller's path.
        match unsafe { crate::reallinks::after_failure(dirfd, path, follow) } {
            Some(r) => return do_stat(r, follow, st),
            None => return Ok(v),
        }
    }
    do_stat(r, follow, st)
}

macro_rules! fstatats {
    ($($name:ident),*) => {$(
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(dirfd: c_int, path: *const c_char, st: *mut libc::stat, flags: c_int) -> c_int {
    crate::guarded!(-1, {
            // SAFETY: forwarding unchanged when not ours.
            fstatat_impl(dirfd, path, st, flags, || unsafe { real::$name(dirfd, path, st, flags) })?
        })
}
    )*};
}
fstatats!(fstatat, fstatat64);

macro_rules! fxstatats {
    ($($name:ident),*) => {$(
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(ver: c_int, dirfd: c_int, path: *const c_char, st: *mut libc::stat, flags: c_int) -> c_int {
    crate::guarded!(-1, {
            // SAFETY: forwarding unchanged when not ours.
            fstatat_impl(dirfd, path, st, flags, || unsafe { real::$name(ver, dirfd, path, st, flags) })?
        })
}
    )*};
}
fxstatats!(__fxstatat, __fxstatat64);

#[unsafe(no_mangle)]
pub unsafe extern "C" fn statx(
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    mask: c_uint,
    st: *mut libc::statx,
) -> c_int {
    crate::guarded!(-1, {
        // SAFETY: the caller's path.
        let of = if unsafe { empty_path(path, flags) } {
            match table::get(dirfd) {
                Some(of) => Some(of),
                None => {
                    crate::desc::refuse_spare(dirfd)?;
                    // SAFETY: forwarding unchanged.
                    return Ok(unsafe { real::statx(dirfd, path, flags, mask, st) });
                }
            }
        } else {
            None
        };
        let r = match of {
            Some(_) => Ok(crate::route::Route::Pass),
            None => routed!(
                dirfd,
                path,
                flags & libc::AT_SYMLINK_NOFOLLOW == 0,
                real::statx(dirfd, path, flags, mask, st)
            ),
        };
        guard(-1, || {
            let _op = op();
            let fill = |m: &Metadata| {
                // SAFETY: the caller's statx buffer.
                fill_statx(m, unsafe { &mut *st });
                Ok(0)
            };
            match &of {
                Some(of) => fill(&stat_of(of)?),
                None => stat_routed(r, flags & libc::AT_SYMLINK_NOFOLLOW == 0, fill, |p| {
                    // SAFETY: real statx on the resolved path into the caller's buffer.
                    let r = unsafe { real::statx(libc::AT_FDCWD, p.as_ptr(), flags, mask, st) };
                    if r < 0 { Err(errno()) } else { Ok(0) }
                }),
            }
        })
    })
}

// ------------------------------------------------------------------ statfs

fn statfs_pool() -> Res<engram_core::StatFs> {
    session::fs()?.statfs().map_err(en)
}

fn fill_statfs(s: &engram_core::StatFs, st: &mut libc::statfs) {
    // SAFETY: plain data.
    *st = unsafe { std::mem::zeroed() };
    st.f_type = FS_MAGIC;
    st.f_bsize = s.block_size as _;
    st.f_frsize = s.block_size as _;
    st.f_blocks = s.blocks;
    st.f_bfree = s.blocks_free;
    st.f_bavail = s.blocks_free;
    st.f_files = s.files;
    st.f_ffree = s.files_free;
    st.f_namelen = s.name_max as _;
}

fn fill_statvfs(s: &engram_core::StatFs, st: &mut libc::statvfs) {
    // SAFETY: plain data.
    *st = unsafe { std::mem::zeroed() };
    st.f_bsize = s.block_size;
    st.f_frsize = s.block_size;
    st.f_blocks = s.blocks;
    st.f_bfree = s.blocks_free;
    st.f_bavail = s.blocks_free;
    st.f_files = s.files;
    st.f_ffree = s.files_free;
    st.f_favail = s.files_free;
    st.f_fsid = FS_MAGIC as u64;
    st.f_namemax = s.name_max;
    // Reads never update atime (architecture.md: as `noatime`), and device nodes do not
    // open (as `nodev`): say so, as a mount does.
    st.f_flag = libc::ST_NOATIME | libc::ST_NODIRATIME | libc::ST_NODEV;
}

/// statfs of a routed path: the pool's numbers (the path must exist), or the real call.
fn statfs_routed<T>(
    r: Res<crate::route::Route>,
    out: *mut T,
    fill: fn(&engram_core::StatFs, &mut T),
    real_fn: unsafe fn(*const c_char, *mut T) -> c_int,
) -> c_int {
    guard(-1, || {
        let _op = op();
        stat_routed(
            r,
            true,
            |_| {
                // SAFETY: the caller's buffer.
                fill(&statfs_pool()?, unsafe { &mut *out });
                Ok(0)
            },
            |p| {
                // SAFETY: the real call on the resolved path.
                let r = unsafe { real_fn(p.as_ptr(), out) };
                if r < 0 { Err(errno()) } else { Ok(0) }
            },
        )
    })
}

fn fstatfs_of<T>(of: &OpenFile, out: *mut T, fill: fn(&engram_core::StatFs, &mut T)) -> c_int {
    guard(-1, || {
        let _op = op();
        let _ = of;
        // SAFETY: the caller's buffer.
        fill(&statfs_pool()?, unsafe { &mut *out });
        Ok(0)
    })
}

macro_rules! statfss {
    ($($name:ident, $ty:ty, $fill:ident);* $(;)?) => {$(
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(path: *const c_char, st: *mut $ty) -> c_int {
    crate::guarded!(-1, {
            let r = routed!(libc::AT_FDCWD, path, true, real::$name(path, st));
            statfs_routed(r, st, $fill, real::$name)
        })
}
    )*};
}
statfss! { statfs, libc::statfs, fill_statfs; statfs64, libc::statfs, fill_statfs; statvfs, libc::statvfs, fill_statvfs; statvfs64, libc::statvfs, fill_statvfs; }

macro_rules! fstatfss {
    ($($name:ident, $ty:ty, $fill:ident);* $(;)?) => {$(
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(fd: c_int, st: *mut $ty) -> c_int {
    crate::guarded!(-1, {
            let of = ours!(fd, real::$name(fd, st));
            fstatfs_of(&of, st, $fill)
        })
}
    )*};
}
fstatfss! { fstatfs, libc::statfs, fill_statfs; fstatfs64, libc::statfs, fill_statfs; fstatvfs, libc::statvfs, fill_statvfs; fstatvfs64, libc::statvfs, fill_statvfs; }

fn conf(name: c_int) -> c_long {
    match name {
        libc::_PC_LINK_MAX => 65000,
        libc::_PC_NAME_MAX => 255,
        libc::_PC_PATH_MAX => libc::PATH_MAX as c_long,
        libc::_PC_PIPE_BUF => 4096,
        libc::_PC_FILESIZEBITS => 64,
        libc::_PC_REC_XFER_ALIGN | libc::_PC_ALLOC_SIZE_MIN | libc::_PC_REC_MIN_XFER_SIZE => 4096,
        libc::_PC_CHOWN_RESTRICTED | libc::_PC_NO_TRUNC => 1,
        libc::_PC_SYMLINK_MAX => libc::PATH_MAX as c_long,
        _ => -1,
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn pathconf(path: *const c_char, name: c_int) -> c_long {
    crate::guarded!(-1, {
        let r = routed!(libc::AT_FDCWD, path, true, real::pathconf(path, name));
        guard(-1, || {
            let _op = op();
            stat_routed(
                r,
                true,
                |_| Ok(conf(name)),
                // SAFETY: the real call on the resolved path.
                |p| Ok(unsafe { real::pathconf(p.as_ptr(), name) }),
            )
        })
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn fpathconf(fd: c_int, name: c_int) -> c_long {
    crate::guarded!(-1, {
        let _of = ours!(fd, real::fpathconf(fd, name));
        conf(name)
    })
}

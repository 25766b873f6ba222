//! open/openat/creat (and the fortified `__open_2` forms), close, dup, dup2, dup3,
//! close_range and closefrom.

use crate::ops::{Side, side, staying};
use crate::route::Route;
use crate::session::op;
use crate::table;
use crate::util::{Res, cstring, en, errno, guard};
use crate::{real, routed};
use engram_core::OpenOptions;
use libc::{c_char, c_int, c_uint, mode_t};

/// The options an open call asks for.
fn options(flags: c_int, mode: u32) -> OpenOptions {
    let mode = if flags & libc::O_CREAT != 0 {
        mode & 0o7777 & !crate::ops::current_umask()
    } else {
        0
    };
    // O_TRUNC is made by `install`, once the file has its descriptor.
    OpenOptions::from_flags(flags, mode).truncate_later(true)
}

/// Give `file` a descriptor; then make the truncation O_TRUNC asks for
/// (`OpenOptions::truncate_later`), so that the backing file of a file some process maps
/// shared is zeroed with it, as for ftruncate (before, a mapping went on showing the bytes
/// `> file` cut off), and only once the descriptor is there (at EMFILE Linux fails the
/// open and leaves the file alone).
fn install(file: engram_core::File, mut p: Vec<u8>, is_dir: bool, flags: c_int) -> Res<c_int> {
    while p.len() > 1 && p.ends_with(b"/") {
        p.pop();
    }
    let fd = table::create(file, p, is_dir, flags)?;
    if flags & libc::O_TRUNC != 0
        && let Err(e) = truncate_opened(fd)
    {
        table::close(fd);
        return Err(e);
    }
    Ok(fd)
}

/// `File::truncate_opened` of descriptor `fd`, inside `mmap::resizing`.
fn truncate_opened(fd: c_int) -> Res<()> {
    let of = table::get(fd).ok_or(libc::EBADF)?;
    crate::mmap::resizing(
        of.handle(),
        || crate::io::size_of(&of),
        || of.with_file(|f| f.truncate_opened().map_err(en)),
    )
}

/// Where an open under the operation guard got to.
enum Opened {
    /// The descriptor, of ours or the kernel's.
    Fd(c_int),
    /// A FIFO of the pool: its kernel FIFO, to be opened once the guard is let go.
    Fifo(crate::fifo::Fifo),
}

/// Open a canonical pool path: the reserved descriptor, or the kernel FIFO of a FIFO.
fn open_pool(fs: &engram_core::Fs, path: &[u8], flags: c_int, mode: u32) -> Res<Opened> {
    if flags & libc::O_TMPFILE == libc::O_TMPFILE {
        return Err(libc::EOPNOTSUPP);
    }
    // The descriptor reads by offset; appending is the file's own mode.
    let file = match fs.open_node(path, &options(flags, mode)).map_err(en)? {
        engram_core::Opened::File(file) => file,
        engram_core::Opened::Special(h, m) => {
            return crate::fifo::for_node(h, &m).map(Opened::Fifo);
        }
    };
    let is_dir = file.metadata().map_err(en)?.is_dir();
    install(file, path.to_vec(), is_dir, flags).map(Opened::Fd)
}

/// Open a routed, unresolved pool path with one walk of the pool when the process would
/// resolve it the same way; `None` when it may leave the pool, or names a directory (whose
/// descriptor must remember the canonical path): the caller resolves it first.
fn open_inside(r: &Route, flags: c_int, mode: u32) -> Res<Option<Opened>> {
    if flags & libc::O_TMPFILE == libc::O_TMPFILE {
        return Err(libc::EOPNOTSUPP);
    }
    let Some((dir, raw)) = r.start() else {
        return Ok(None);
    };
    let file = match staying(|fs| fs.open_node_from(dir, raw, &options(flags, mode)))? {
        None => return Ok(None),
        Some(engram_core::Opened::File(file)) => file,
        Some(engram_core::Opened::Special(h, m)) => {
            return crate::fifo::for_node(h, &m).map(|f| Some(Opened::Fifo(f)));
        }
    };
    // O_CREAT|O_EXCL succeeded: a new regular file, no need to look.
    let created = flags & (libc::O_CREAT | libc::O_EXCL) == libc::O_CREAT | libc::O_EXCL;
    if !created && file.metadata().map_err(en)?.is_dir() {
        return Ok(None);
    }
    let path = match r {
        Route::At { dir, fd, rel } => crate::route::joined_path(*fd, *dir, rel, false)?,
        _ => raw.to_vec(),
    };
    install(file, path, false, flags).map(|fd| Some(Opened::Fd(fd)))
}

/// An open of `/dev/stdout`, `/proc/self/fd/N` and the like naming descriptor `fd` of ours
/// (`magicfd`): a new description of the same file, found by its handle, as Linux opens
/// the inode the link leads to. With O_NOFOLLOW the real link is opened (ELOOP).
#[cold]
fn reopen(fd: c_int, orig: &[u8], flags: c_int, mode: c_uint) -> Res<c_int> {
    if flags & libc::O_NOFOLLOW != 0 {
        let p = cstring(orig)?;
        // SAFETY: a valid C path; flags and mode as the caller gave them.
        let fd = unsafe { real::open64(p.as_ptr(), flags, mode) };
        return if fd < 0 { Err(errno()) } else { Ok(fd) };
    }
    if flags & (libc::O_CREAT | libc::O_EXCL) == libc::O_CREAT | libc::O_EXCL {
        return Err(libc::EEXIST);
    }
    let of = table::get(fd).ok_or(libc::EBADF)?;
    if flags & libc::O_DIRECTORY != 0 && !of.is_dir() {
        return Err(libc::ENOTDIR);
    }
    let fs = crate::session::fs()?;
    let file = fs
        .open_handle(of.handle(), &options(flags, mode))
        .map_err(en)?;
    install(file, of.path().to_vec(), of.is_dir(), flags)
}

/// Whether an open with `flags` follows a symlink as the last component: not with
/// O_NOFOLLOW, nor with O_CREAT|O_EXCL (which fails with EEXIST on any symlink).
fn follows(flags: c_int) -> bool {
    flags & libc::O_NOFOLLOW == 0 && !(flags & libc::O_CREAT != 0 && flags & libc::O_EXCL != 0)
}

/// The body of every open call once the path is known to be ours (fopen and opendir too).
pub fn open_routed(r: Res<crate::route::Route>, flags: c_int, mode: c_uint) -> c_int {
    guard(-1, || match open_guarded(r, flags, mode)? {
        Opened::Fd(fd) => Ok(fd),
        // Outside the operation guard: it may wait for the pipe's other end.
        Opened::Fifo(fifo) => fifo.open(flags),
    })
}

/// `open_routed` under the operation guard.
fn open_guarded(r: Res<crate::route::Route>, flags: c_int, mode: c_uint) -> Res<Opened> {
    let _op = op();
    // Refused before anything is looked up or made, as Linux has since 6.4 (before, it
    // made a regular file and then failed with ENOTDIR).
    if flags & (libc::O_CREAT | libc::O_DIRECTORY) == libc::O_CREAT | libc::O_DIRECTORY {
        return Err(libc::EINVAL);
    }
    // With O_PATH the kernel drops every other flag but these (build_open_flags).
    let flags = if flags & libc::O_PATH != 0 {
        flags & (libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
    } else {
        flags
    };
    if let Ok(Route::Desc { fd, orig, .. }) = &r {
        return reopen(*fd, orig, flags, mode).map(Opened::Fd);
    }
    let follow = follows(flags);
    if let Ok(r) = &r
        && let Some(opened) = open_inside(r, flags, mode)?
    {
        return Ok(opened);
    }
    match side(r, follow)? {
        Side::Pool(fs, p) => open_pool(fs, &p, flags, mode),
        Side::Removed(fs, d, name) => {
            if flags & libc::O_TMPFILE == libc::O_TMPFILE {
                return Err(libc::EOPNOTSUPP);
            }
            let file = fs
                .open_at(Some(&d), b".", &options(flags, mode))
                .map_err(en)?;
            install(file, name, true, flags).map(Opened::Fd)
        }
        Side::Real(p) => {
            // SAFETY: a valid C path; flags and mode as the caller gave them.
            let fd = unsafe { real::open64(p.as_ptr(), flags, mode) };
            if fd < 0 {
                Err(errno())
            } else {
                Ok(Opened::Fd(fd))
            }
        }
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn open(path: *const c_char, flags: c_int, mode: c_uint) -> c_int {
    crate::guarded!(-1, {
        let r = routed!(
            libc::AT_FDCWD,
            path,
            follows(flags),
            real::open(path, flags, mode)
        );
        open_routed(r, flags, mode)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn open64(path: *const c_char, flags: c_int, mode: c_uint) -> c_int {
    crate::guarded!(-1, {
        let r = routed!(
            libc::AT_FDCWD,
            path,
            follows(flags),
            real::open64(path, flags, mode)
        );
        open_routed(r, flags, mode)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn openat(
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    mode: c_uint,
) -> c_int {
    crate::guarded!(-1, {
        let r = routed!(
            dirfd,
            path,
            follows(flags),
            real::openat(dirfd, path, flags, mode)
        );
        open_routed(r, flags, mode)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn openat64(
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    mode: c_uint,
) -> c_int {
    crate::guarded!(-1, {
        let r = routed!(
            dirfd,
            path,
            follows(flags),
            real::openat64(dirfd, path, flags, mode)
        );
        open_routed(r, flags, mode)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn __open_2(path: *const c_char, flags: c_int) -> c_int {
    crate::guarded!(-1, {
        let r = routed!(
            libc::AT_FDCWD,
            path,
            follows(flags),
            real::__open_2(path, flags)
        );
        open_routed(r, flags, 0)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn __open64_2(path: *const c_char, flags: c_int) -> c_int {
    crate::guarded!(-1, {
        let r = routed!(
            libc::AT_FDCWD,
            path,
            follows(flags),
            real::__open64_2(path, flags)
        );
        open_routed(r, flags, 0)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn __openat_2(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int {
    crate::guarded!(-1, {
        let r = routed!(
            dirfd,
            path,
            follows(flags),
            real::__openat_2(dirfd, path, flags)
        );
        open_routed(r, flags, 0)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn __openat64_2(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int {
    crate::guarded!(-1, {
        let r = routed!(
            dirfd,
            path,
            follows(flags),
            real::__openat64_2(dirfd, path, flags)
        );
        open_routed(r, flags, 0)
    })
}

const CREAT: c_int = libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC;

#[unsafe(no_mangle)]
pub unsafe extern "C" fn creat(path: *const c_char, mode: mode_t) -> c_int {
    crate::guarded!(-1, {
        let r = routed!(libc::AT_FDCWD, path, true, real::creat(path, mode));
        open_routed(r, CREAT, mode)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn creat64(path: *const c_char, mode: mode_t) -> c_int {
    crate::guarded!(-1, {
        let r = routed!(libc::AT_FDCWD, path, true, real::creat64(path, mode));
        open_routed(r, CREAT, mode)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn close(fd: c_int) -> c_int {
    crate::guarded!(-1, {
        if !table::is_ours(fd) {
            if crate::ownfds::is_own(fd) {
                // The shim's own: not open as far as the program knows.
                return Err(libc::EBADF);
            }
            if crate::desc::released(fd, fd) {
                // A spare placeholder: closed as far as the program knows.
                // SAFETY: closing the spare we just forgot.
                unsafe { real::close(fd) };
                return Err(libc::EBADF);
            }
            // SAFETY: forwarding unchanged.
            return Ok(unsafe { real::close(fd) });
        }
        guard(-1, || {
            let _op = op();
            let r = table::close(fd);
            if r < 0 { Err(errno()) } else { Ok(r) }
        })
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn close_range(first: c_uint, last: c_uint, flags: c_int) -> c_int {
    crate::guarded!(-1, {
        if flags & libc::CLOSE_RANGE_CLOEXEC as c_int == 0 && first <= last {
            crate::desc::released(
                first.min(c_int::MAX as c_uint) as c_int,
                last.min(c_int::MAX as c_uint) as c_int,
            );
            let _op = op();
            table::remove_range(first, last);
        }
        // Around the shim's own descriptors.
        crate::ownfds::close_range_around(first, last, flags)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn closefrom(low: c_int) {
    crate::guarded!((), {
        let low = low.max(0);
        crate::desc::released(low, c_int::MAX);
        {
            let _op = op();
            table::remove_range(low as u32, u32::MAX);
        }
        // Around the shim's own descriptors (closefrom ignores errors, as glibc's does, and
        // takes a negative number as 0).
        crate::ownfds::close_range_around(low as c_uint, c_uint::MAX, 0);
    })
}

/// After the kernel made `new` a copy of `old`: mirror it in the table.
pub fn mirrored(old: c_int, new: c_int) {
    if new < 0 {
        return;
    }
    match table::get(old) {
        Some(of) => {
            table::install(new, of);
            table::publish_if_inheritable(new);
            if new <= 2 {
                crate::stdio::adopt_std(new);
            }
        }
        None => drop(table::remove(new)),
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn dup(fd: c_int) -> c_int {
    crate::guarded!(-1, {
        if !table::is_ours(fd) {
            crate::desc::refuse_spare(fd)?;
            // SAFETY: forwarding unchanged.
            return Ok(unsafe { real::dup(fd) });
        }
        let _op = op();
        // SAFETY: duplicating the placeholder reserves the new number.
        let new = unsafe { real::dup(fd) };
        mirrored(fd, new);
        new
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn dup2(old: c_int, new: c_int) -> c_int {
    crate::guarded!(-1, {
        crate::ownfds::refuse_taking(new)?;
        if !table::is_ours(old) && !table::is_ours(new) {
            crate::desc::refuse_spare(old)?;
            crate::desc::released(new, new);
            // SAFETY: forwarding unchanged.
            return Ok(unsafe { real::dup2(old, new) });
        }
        let _op = op();
        crate::desc::released(new, new);
        // SAFETY: the kernel does the duplication; the table follows.
        let r = unsafe { real::dup2(old, new) };
        if r >= 0 && old != new {
            mirrored(old, r);
        }
        r
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn dup3(old: c_int, new: c_int, flags: c_int) -> c_int {
    crate::guarded!(-1, {
        crate::ownfds::refuse_taking(new)?;
        if !table::is_ours(old) && !table::is_ours(new) {
            crate::desc::refuse_spare(old)?;
            crate::desc::released(new, new);
            // SAFETY: forwarding unchanged.
            return Ok(unsafe { real::dup3(old, new, flags) });
        }
        let _op = op();
        crate::desc::released(new, new);
        // SAFETY: as dup2.
        let r = unsafe { real::dup3(old, new, flags) };
        if r >= 0 {
            mirrored(old, r);
        }
        r
    })
}

/// A path as a C string for a real call (used by families that re-route).
pub fn c(p: &[u8]) -> Res<std::ffi::CString> {
    cstring(p)
}

//! Directory streams (opendir, fdopendir, readdir, readdir_r, rewinddir, seekdir, telldir,
//! closedir, dirfd, scandir) with the shim's own DIR, and getdents64. The position is the
//! description's offset (a cookie that stays valid while the directory changes).

use crate::session::{self, op};
use crate::table::{self, OpenFile, release};
use crate::util::{Res, en, guard};
use crate::{open, real, routed};
use engram_core::DirEntry;
use libc::{DIR, c_char, c_int, c_long, c_void, dirent64, size_t, ssize_t};

const TAG1: i32 = -0x454E_4752;
const TAG2: u64 = u64::from_le_bytes(*b"ENGRAMDR");

/// Our DIR. glibc's DIR starts with its (non-negative) descriptor, so a negative first
/// word and a second tag tell the two apart without any lookup.
#[repr(C)]
struct EDir {
    tag1: i32,
    _pad: i32,
    tag2: u64,
    fd: c_int,
    ent: dirent64,
}

fn ours_dir(d: *mut DIR) -> Option<&'static mut EDir> {
    if d.is_null() {
        return None;
    }
    // SAFETY: both glibc's DIR and ours are at least 16 bytes long; reading the first two
    // words of either is valid.
    unsafe {
        let p = d as *const u8;
        if *(p as *const i32) == TAG1 && *(p.add(8) as *const u64) == TAG2 {
            Some(&mut *(d as *mut EDir))
        } else {
            None
        }
    }
}

/// ENOENT if directory `of` has been removed: it lists nothing, not even its dots, as
/// Linux's getdents gives (glibc's readdir then ends the stream).
fn not_removed(of: &OpenFile) -> Res<()> {
    if crate::removed::is_removed(session::fs()?, of.handle()) {
        return Err(libc::ENOENT);
    }
    Ok(())
}

/// The next entry of a directory description, advancing its offset.
pub fn next_entry(of: &OpenFile) -> Res<Option<DirEntry>> {
    of.not_path()?;
    let epoch = session::generation();
    let mut g = of.dir.lock().unwrap_or_else(|e| e.into_inner());
    let cookie = of.offset();
    // Past its dots, a removed directory (empty) has nothing more to list anyway.
    if cookie <= 2 {
        not_removed(of)?;
    }
    let stale = match &*g {
        Some((gn, rd)) => *gn != epoch || rd.tell() != cookie,
        None => true,
    };
    if stale {
        if let Some((gn, rd)) = g.take() {
            release(gn, rd);
        }
        let mut rd = session::fs()?.read_dir_handle(of.handle()).map_err(en)?;
        rd.seek(cookie);
        *g = Some((epoch, rd));
    }
    let (_, rd) = g.as_mut().expect("set above");
    match rd.next() {
        None => Ok(None),
        Some(Err(e)) => Err(en(e)),
        Some(Ok(e)) => {
            of.set_offset(rd.tell());
            Ok(Some(e))
        }
    }
}

fn new_dir(fd: c_int) -> *mut DIR {
    // SAFETY: dirent64 is plain data.
    let ent: dirent64 = unsafe { std::mem::zeroed() };
    Box::into_raw(Box::new(EDir {
        tag1: TAG1,
        _pad: 0,
        tag2: TAG2,
        fd,
        ent,
    })) as *mut DIR
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn opendir(path: *const c_char) -> *mut DIR {
    crate::guarded!(std::ptr::null_mut(), {
        let r = routed!(libc::AT_FDCWD, path, true, real::opendir(path));
        let fd = open::open_routed(r, libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC, 0);
        if fd < 0 {
            return Ok(std::ptr::null_mut());
        }
        if !table::is_ours(fd) {
            crate::desc::refuse_spare(fd)?;
            // It resolved outside the pool: let glibc make the stream.
            // SAFETY: the real fdopendir takes the descriptor over.
            return Ok(unsafe { real::fdopendir(fd) });
        }
        new_dir(fd)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn fdopendir(fd: c_int) -> *mut DIR {
    crate::guarded!(std::ptr::null_mut(), {
        let Some(of) = table::get(fd) else {
            crate::desc::refuse_spare(fd)?;
            // SAFETY: forwarding unchanged.
            return Ok(unsafe { real::fdopendir(fd) });
        };
        if !of.is_dir() {
            crate::util::set_errno(libc::ENOTDIR);
            return Ok(std::ptr::null_mut());
        }
        new_dir(fd)
    })
}

fn fill(ent: &mut dirent64, e: &DirEntry) {
    ent.d_ino = e.ino;
    ent.d_off = e.cookie as i64;
    ent.d_reclen = std::mem::size_of::<dirent64>() as u16;
    ent.d_type = e.file_type;
    let n = e.name.len().min(ent.d_name.len() - 1);
    for (d, s) in ent.d_name.iter_mut().zip(&e.name[..n]) {
        *d = *s as c_char;
    }
    ent.d_name[n] = 0;
}

fn readdir_impl(d: &mut EDir) -> *mut dirent64 {
    let saved = crate::util::errno();
    guard(std::ptr::null_mut(), || {
        let _op = op();
        let of = table::get(d.fd).ok_or(libc::EBADF)?;
        match next_entry(&of) {
            Ok(Some(e)) => {
                fill(&mut d.ent, &e);
                Ok(&mut d.ent as *mut dirent64)
            }
            // The end, also of a removed directory (as glibc treats getdents' ENOENT).
            Ok(None) | Err(libc::ENOENT) => {
                crate::util::set_errno(saved);
                Ok(std::ptr::null_mut())
            }
            Err(e) => Err(e),
        }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn readdir(d: *mut DIR) -> *mut dirent64 {
    crate::guarded!(std::ptr::null_mut(), {
        match ours_dir(d) {
            Some(e) => readdir_impl(e),
            // SAFETY: forwarding unchanged.
            None => unsafe { real::readdir(d) },
        }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn readdir64(d: *mut DIR) -> *mut dirent64 {
    crate::guarded!(std::ptr::null_mut(), {
        match ours_dir(d) {
            Some(e) => readdir_impl(e),
            // SAFETY: forwarding unchanged.
            None => unsafe { real::readdir64(d) },
        }
    })
}

fn readdir_r_impl(d: &mut EDir, entry: *mut dirent64, result: *mut *mut dirent64) -> c_int {
    let p = readdir_impl(d);
    // SAFETY: the caller's entry and result pointers.
    unsafe {
        if p.is_null() {
            *result = std::ptr::null_mut();
            return 0;
        }
        std::ptr::copy_nonoverlapping(p, entry, 1);
        *result = entry;
    }
    0
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn readdir_r(
    d: *mut DIR,
    entry: *mut dirent64,
    result: *mut *mut dirent64,
) -> c_int {
    crate::guarded!(libc::EIO, {
        match ours_dir(d) {
            Some(e) => readdir_r_impl(e, entry, result),
            // SAFETY: forwarding unchanged.
            None => unsafe { real::readdir_r(d, entry, result) },
        }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn readdir64_r(
    d: *mut DIR,
    entry: *mut dirent64,
    result: *mut *mut dirent64,
) -> c_int {
    crate::guarded!(libc::EIO, {
        match ours_dir(d) {
            Some(e) => readdir_r_impl(e, entry, result),
            // SAFETY: forwarding unchanged.
            None => unsafe { real::readdir64_r(d, entry, result) },
        }
    })
}

fn set_pos(d: &EDir, pos: u64) {
    if let Some(of) = table::get(d.fd) {
        of.set_offset(pos);
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn rewinddir(d: *mut DIR) {
    crate::guarded!((), {
        match ours_dir(d) {
            Some(e) => set_pos(e, 0),
            // SAFETY: forwarding unchanged.
            None => unsafe { real::rewinddir(d) },
        }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn seekdir(d: *mut DIR, pos: c_long) {
    crate::guarded!((), {
        match ours_dir(d) {
            Some(e) => set_pos(e, pos as u64),
            // SAFETY: forwarding unchanged.
            None => unsafe { real::seekdir(d, pos) },
        }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn telldir(d: *mut DIR) -> c_long {
    crate::guarded!(-1, {
        match ours_dir(d) {
            Some(e) => table::get(e.fd).map_or(-1, |of| of.offset() as c_long),
            // SAFETY: forwarding unchanged.
            None => unsafe { real::telldir(d) },
        }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn closedir(d: *mut DIR) -> c_int {
    crate::guarded!(-1, {
        let Some(e) = ours_dir(d) else {
            // SAFETY: forwarding unchanged.
            return Ok(unsafe { real::closedir(d) });
        };
        let fd = e.fd;
        // SAFETY: the DIR was made by new_dir from a Box; nothing else refers to it.
        drop(unsafe { Box::from_raw(d as *mut EDir) });
        // SAFETY: closing the stream's descriptor through the shim's close.
        unsafe { open::close(fd) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn dirfd(d: *mut DIR) -> c_int {
    crate::guarded!(-1, {
        match ours_dir(d) {
            Some(e) => e.fd,
            // SAFETY: forwarding unchanged.
            None => unsafe { real::dirfd(d) },
        }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn getdents64(fd: c_int, buf: *mut c_void, n: size_t) -> ssize_t {
    crate::guarded!(-1, {
        let Some(of) = table::get(fd) else {
            crate::desc::refuse_spare(fd)?;
            // SAFETY: forwarding unchanged.
            return Ok(unsafe { real::getdents64(fd, buf, n) });
        };
        guard(-1, || {
            let _op = op();
            of.not_path()?;
            if !of.is_dir() {
                return Err(libc::ENOTDIR);
            }
            not_removed(&of)?;
            let mut done = 0usize;
            loop {
                let prev = of.offset();
                let Some(e) = next_entry(&of)? else { break };
                let reclen = (19 + e.name.len() + 1).div_ceil(8) * 8;
                if done + reclen > n {
                    of.set_offset(prev);
                    if done == 0 {
                        return Err(libc::EINVAL);
                    }
                    break;
                }
                // SAFETY: the caller's buffer holds n bytes; the record fits in it.
                unsafe {
                    let p = (buf as *mut u8).add(done);
                    std::ptr::write_bytes(p, 0, reclen);
                    (p as *mut u64).write_unaligned(e.ino);
                    (p.add(8) as *mut i64).write_unaligned(e.cookie as i64);
                    (p.add(16) as *mut u16).write_unaligned(reclen as u16);
                    *p.add(18) = e.file_type;
                    std::ptr::copy_nonoverlapping(e.name.as_ptr(), p.add(19), e.name.len());
                }
                done += reclen;
            }
            Ok(done as ssize_t)
        })
    })
}

type Filter = Option<unsafe extern "C" fn(*const dirent64) -> c_int>;
type Compar = Option<unsafe extern "C" fn(*const c_void, *const c_void) -> c_int>;

/// scandir of `path` relative to `dirfd` (`AT_FDCWD`: the current directory), through the
/// shim's own openat, fdopendir, readdir and closedir.
fn scandir_impl(
    dirfd: c_int,
    path: *const c_char,
    list: *mut *mut *mut dirent64,
    filter: Filter,
    compar: Compar,
) -> c_int {
    // SAFETY: our openat/fdopendir/readdir/closedir on the caller's path; entries are
    // malloc'd copies handed to the caller, who frees them.
    unsafe {
        let fd = crate::open::openat(
            dirfd,
            path,
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
            0,
        );
        if fd < 0 {
            return -1;
        }
        let d = fdopendir(fd);
        if d.is_null() {
            let e = crate::util::errno();
            crate::open::close(fd);
            crate::util::set_errno(e);
            return -1;
        }
        let mut v: Vec<*mut dirent64> = Vec::new();
        loop {
            let e = readdir64(d);
            if e.is_null() {
                break;
            }
            if let Some(f) = filter
                && f(e) == 0
            {
                continue;
            }
            let c = libc::malloc(std::mem::size_of::<dirent64>()) as *mut dirent64;
            if c.is_null() {
                break;
            }
            std::ptr::copy_nonoverlapping(e, c, 1);
            v.push(c);
        }
        closedir(d);
        let arr = libc::malloc(v.len().max(1) * std::mem::size_of::<*mut dirent64>())
            as *mut *mut dirent64;
        if arr.is_null() {
            crate::util::set_errno(libc::ENOMEM);
            return -1;
        }
        std::ptr::copy_nonoverlapping(v.as_ptr(), arr, v.len());
        if let Some(c) = compar {
            libc::qsort(
                arr as *mut c_void,
                v.len(),
                std::mem::size_of::<*mut dirent64>(),
                Some(c),
            );
        }
        *list = arr;
        v.len() as c_int
    }
}

/// The body of the scandir family: libc for paths that are not ours (`pass`).
fn scandir_routed(
    dirfd: c_int,
    path: *const c_char,
    list: *mut *mut *mut dirent64,
    filter: Filter,
    compar: Compar,
    pass: impl FnOnce(*const c_void, *const c_void) -> c_int,
) -> c_int {
    crate::guarded!(-1, {
        let (f, c) = (
            filter.map_or(std::ptr::null(), |f| f as *const c_void),
            compar.map_or(std::ptr::null(), |c| c as *const c_void),
        );
        // SAFETY: the caller's path is a valid C string (or null).
        if let Ok(crate::route::Route::Pass) = unsafe { crate::route::route(dirfd, path) } {
            let v = pass(f, c);
            // Through real symlinks into the prefix, glibc's own opendir failed: the
            // shim's openat follows them.
            // SAFETY: the caller's path.
            if v != -1 || !unsafe { crate::reallinks::failed_for_links(dirfd, path, true) } {
                return Ok(v);
            }
        }
        scandir_impl(dirfd, path, list, filter, compar)
    })
}

macro_rules! scandirs {
    ($($name:ident),*) => {$(
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(
            path: *const c_char,
            list: *mut *mut *mut dirent64,
            filter: Filter,
            compar: Compar,
        ) -> c_int {
            // SAFETY: forwarding the caller's arguments unchanged when not ours.
            scandir_routed(libc::AT_FDCWD, path, list, filter, compar, |f, c| unsafe {
                real::$name(path, list, f, c)
            })
        }
    )*};
}
scandirs!(scandir, scandir64);

macro_rules! scandirats {
    ($($name:ident),*) => {$(
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(
            dirfd: c_int,
            path: *const c_char,
            list: *mut *mut *mut dirent64,
            filter: Filter,
            compar: Compar,
        ) -> c_int {
            // SAFETY: forwarding the caller's arguments unchanged when not ours.
            scandir_routed(dirfd, path, list, filter, compar, |f, c| unsafe {
                real::$name(dirfd, path, list, f, c)
            })
        }
    )*};
}
scandirats!(scandirat, scandirat64);

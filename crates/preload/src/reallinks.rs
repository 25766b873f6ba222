//! Symlinks of the real file system that lead into the pool (`ln -s /mnt/engram/proj
//! /tmp/p; cat /tmp/p/f`). The kernel follows such a link to the mount prefix, which it
//! does not have (EngramFS is not a kernel mount), and fails with ENOENT. Only then, never
//! when the kernel succeeds, does the shim walk the path itself, as the kernel would
//! (`readlink` a component at a time, 40 links at most), and if the walk enters the prefix
//! the call is made again in the pool with the path from there on.
//!
//! A failing call pays one `openat2` with `RESOLVE_NO_SYMLINKS` first, which says whether
//! the kernel's lookup met a symlink at all: most failing lookups (a shell's PATH search,
//! Python's and a compiler's probing) meet none and cost that one system call more. The
//! others are walked, and each link's target is checked the same way before its
//! components are (`/bin/x`, `/bin` a link to `usr/bin`: three system calls more).

use crate::route::{Route, strip_mount};
use crate::util::{Res, cbytes, errno, set_errno};
use libc::{c_char, c_int};
use std::borrow::Cow;

/// The kernel's limit on symlinks followed in one lookup.
const MAX_LINKS: u32 = 40;

/// What a real libc call returned: whether it failed (and so errno says why).
pub trait Outcome {
    fn failed(&self) -> bool;
}

impl Outcome for c_int {
    #[inline(always)]
    fn failed(&self) -> bool {
        *self == -1
    }
}

impl Outcome for isize {
    #[inline(always)]
    fn failed(&self) -> bool {
        *self == -1
    }
}

impl Outcome for i64 {
    #[inline(always)]
    fn failed(&self) -> bool {
        *self == -1
    }
}

impl<T> Outcome for *mut T {
    #[inline(always)]
    fn failed(&self) -> bool {
        self.is_null()
    }
}

/// After a real call of `path` (relative to `dirfd`) failed: `None` to return its result
/// as it is (errno as it was), unless it failed with ENOENT, the only error a link into the
/// prefix gives, and the path reaches the prefix through real symlinks: then the route to
/// the pool to make the call again. `follow`: whether the call follows a symlink as the
/// last component.
///
/// # Safety
/// `path` is null or a valid C string.
#[cold]
#[inline(never)]
pub unsafe fn after_failure(
    dirfd: c_int,
    path: *const c_char,
    follow: bool,
) -> Option<Res<Route<'static>>> {
    let e = errno();
    if e != libc::ENOENT {
        return None;
    }
    // SAFETY: as the caller promises.
    let r = unsafe { reroute(dirfd, path, follow) };
    if r.is_none() {
        set_errno(e);
    }
    r
}

/// After a real call of `path` failed: whether it failed with ENOENT because the path
/// reaches the prefix through real symlinks (errno is kept). For the calls whose libc
/// version cannot be given a route (scandir, nftw): they then run the shim's own, whose
/// calls follow the links (`after_failure`).
///
/// # Safety
/// `path` is null or a valid C string.
#[cold]
pub unsafe fn failed_for_links(dirfd: c_int, path: *const c_char, follow: bool) -> bool {
    let e = errno();
    // SAFETY: as the caller promises.
    let leads_in = e == libc::ENOENT && unsafe { reroute(dirfd, path, follow) }.is_some();
    set_errno(e);
    leads_in
}

/// The route to the pool of `path` (relative to `dirfd`) if resolving its real symlinks
/// leads under the mount prefix; `None` if it does not (or cannot be told). Also for a path
/// the kernel was not asked about (the other path of a rename whose first is ours).
///
/// # Safety
/// `path` is null or a valid C string.
pub unsafe fn reroute(
    dirfd: c_int,
    path: *const c_char,
    follow: bool,
) -> Option<Res<Route<'static>>> {
    // Before the shim's constructor (a malloc initialising itself) nothing may allocate.
    if path.is_null() || !crate::route::configured() {
        return None;
    }
    // SAFETY: as the caller promises.
    let p = unsafe { cbytes(path) };
    // SAFETY: as the caller promises.
    if p.is_empty() || !unsafe { meets_symlink(dirfd, path, follow) } {
        return None;
    }
    let start = if p[0] == b'/' {
        Vec::new()
    } else {
        start_dir(dirfd)?
    };
    match walk(start, p, follow) {
        Ok(Some(inner)) => Some(Ok(Route::Ours(Cow::Owned(inner)))),
        Ok(None) => None,
        Err(e) => Some(Err(e)),
    }
}

/// After the kernel could not find program `path` (ENOENT): its name under the prefix if
/// it reaches the pool through real symlinks, to be run from there (exec and spawn; a
/// script then sees that name as its path).
///
/// # Safety
/// `path` is null or a valid C string.
#[cold]
pub unsafe fn program_name(path: *const c_char) -> Res<Option<std::ffi::CString>> {
    // SAFETY: as the caller promises.
    match unsafe { reroute(libc::AT_FDCWD, path, true) } {
        None => Ok(None),
        Some(r) => match r? {
            Route::Ours(inner) => crate::util::cstring(&crate::route::mounted(&inner)).map(Some),
            _ => Err(libc::ENOENT),
        },
    }
}

/// The argument of `openat2` (`struct open_how`).
#[repr(C)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}

/// `RESOLVE_NO_SYMLINKS` of linux/openat2.h.
const RESOLVE_NO_SYMLINKS: u64 = 0x04;

/// Whether the kernel's lookup of `path` meets a symlink (`ELOOP` from `openat2` refusing
/// every symlink); true too where the kernel cannot tell (no `openat2`).
///
/// # Safety
/// `path` is a valid C string.
unsafe fn meets_symlink(dirfd: c_int, path: *const c_char, follow: bool) -> bool {
    let nofollow = if follow { 0 } else { libc::O_NOFOLLOW };
    let how = OpenHow {
        flags: (libc::O_PATH | libc::O_CLOEXEC | nofollow) as u64,
        mode: 0,
        resolve: RESOLVE_NO_SYMLINKS,
    };
    // SAFETY: openat2 with the caller's path and a local open_how of the size given.
    let fd = unsafe {
        crate::real::syscall6(
            libc::SYS_openat2,
            [
                dirfd as libc::c_long,
                path as libc::c_long,
                &how as *const OpenHow as libc::c_long,
                std::mem::size_of::<OpenHow>() as libc::c_long,
                0,
                0,
            ],
        )
    };
    if fd >= 0 {
        // Found now: the file came since the call failed.
        // SAFETY: closing the descriptor just opened.
        unsafe { crate::real::close(fd as c_int) };
        return false;
    }
    matches!(
        errno(),
        libc::ELOOP | libc::ENOSYS | libc::EPERM | libc::E2BIG
    )
}

/// The canonical real directory a relative path starts from ("" for the root), or None
/// where it cannot be known.
fn start_dir(dirfd: c_int) -> Option<Vec<u8>> {
    let mut buf = vec![0u8; libc::PATH_MAX as usize + 1];
    let n = if dirfd == libc::AT_FDCWD {
        if crate::vcwd::is_set() {
            return None;
        }
        // SAFETY: getcwd into a local buffer of the given size.
        let p = unsafe { crate::real::getcwd(buf.as_mut_ptr() as *mut c_char, buf.len()) };
        if p.is_null() {
            return None;
        }
        buf.iter().position(|&b| b == 0)?
    } else {
        crate::util::real_dir_name(dirfd, &mut buf)?
    };
    buf.truncate(n);
    if buf.first() != Some(&b'/') {
        return None;
    }
    if buf == b"/" {
        buf.clear();
    }
    Some(buf)
}

/// The next component of `p` at or after `*pos` (skipping slashes), advancing `*pos`.
fn next_comp<'a>(p: &'a [u8], pos: &mut usize) -> Option<&'a [u8]> {
    while *pos < p.len() && p[*pos] == b'/' {
        *pos += 1;
    }
    if *pos >= p.len() {
        return None;
    }
    let start = *pos;
    while *pos < p.len() && p[*pos] != b'/' {
        *pos += 1;
    }
    Some(&p[start..*pos])
}

/// What a real path is, by `readlink` alone (one system call): a symlink's target, or
/// `None` for anything else that exists; `Err` if it does not (or a component before it
/// is not a directory).
fn link_target(path: &[u8]) -> Result<Option<Vec<u8>>, ()> {
    let c = std::ffi::CString::new(path).map_err(|_| ())?;
    let mut buf = vec![0u8; libc::PATH_MAX as usize];
    // SAFETY: readlink of a valid C path into a local buffer of the given size.
    let n =
        unsafe { crate::real::readlink(c.as_ptr(), buf.as_mut_ptr() as *mut c_char, buf.len()) };
    if n > 0 {
        buf.truncate(n as usize);
        return Ok(Some(buf));
    }
    if n < 0 && errno() == libc::EINVAL {
        return Ok(None);
    }
    Err(())
}

fn has_dotdot(p: &[u8]) -> bool {
    p.split(|&b| b == b'/').any(|c| c == b"..")
}

/// Walk `path` from the canonical real directory `resolved` ("" for the root) as the kernel
/// would: the pool path it enters the prefix with, or None if it stays in the real file
/// system. The walk goes on where the pool sends it back out (a pool symlink to a real
/// path), so that a loop through both sides ends in ELOOP, as it would on Linux; it then
/// answers the last pool path it entered by, from which the pool's own resolution leads
/// the call back out.
fn walk(mut resolved: Vec<u8>, path: &[u8], follow: bool) -> Res<Option<Vec<u8>>> {
    let mut rest = path.to_vec();
    let mut pos = 0;
    let mut links = 0u32;
    let mut entered = None;
    let mut full = Vec::new();
    // Whether `rest` was just replaced by a link's target (the caller looked at `path`).
    let mut fresh = false;
    loop {
        // Under the prefix, lexically, from here on: the pool's, as `route` decides for a
        // path given so.
        full.clear();
        full.extend_from_slice(&resolved);
        full.push(b'/');
        full.extend_from_slice(&rest[pos..]);
        if let Some(inner) = strip_mount(&full) {
            let inner = if inner.is_empty() { &b"/"[..] } else { inner }.to_vec();
            match leaves_pool(&inner, follow) {
                None => return Ok(Some(inner)),
                Some(real) => {
                    links += 1;
                    if links > MAX_LINKS {
                        return Err(libc::ELOOP);
                    }
                    entered = Some(inner);
                    resolved.clear();
                    rest = real;
                    pos = 0;
                    fresh = true;
                    continue;
                }
            }
        }
        // A target whose lookup meets no further symlink stays where it is (a ".." past a
        // missing component could not be taken lexically): one system call for the rest
        // of a path such as /bin/x, /bin being a link to usr/bin.
        if fresh && !has_dotdot(&full) && !full_meets_symlink(&full, follow) {
            return Ok(entered);
        }
        fresh = false;
        let Some(c) = next_comp(&rest, &mut pos) else {
            return Ok(entered);
        };
        if c == b"." {
            continue;
        }
        if c == b".." {
            // `resolved` holds no symlink, so its parent is lexical.
            let cut = resolved.iter().rposition(|&b| b == b'/').unwrap_or(0);
            resolved.truncate(cut);
            continue;
        }
        // A last component not followed: the call acts on it in the real file system.
        if pos == rest.len() && !follow {
            return Ok(entered);
        }
        let here = resolved.len();
        resolved.push(b'/');
        resolved.extend_from_slice(c);
        match link_target(&resolved) {
            Ok(None) => {}
            Ok(Some(target)) => {
                links += 1;
                if links > MAX_LINKS {
                    return Err(libc::ELOOP);
                }
                resolved.truncate(if target[0] == b'/' { 0 } else { here });
                let mut next = target;
                next.extend_from_slice(&rest[pos..]);
                rest = next;
                pos = 0;
                fresh = true;
            }
            // Missing, or a file with more to walk: the real file system's answer stands.
            Err(()) => return Ok(entered),
        }
    }
}

/// `meets_symlink` for an absolute path held as bytes.
fn full_meets_symlink(full: &[u8], follow: bool) -> bool {
    match std::ffi::CString::new(full) {
        // SAFETY: a valid C path.
        Ok(c) => unsafe { meets_symlink(libc::AT_FDCWD, c.as_ptr(), follow) },
        Err(_) => true,
    }
}

/// Where the pool's own resolution of `inner` leads out of the pool (a symlink to a real
/// path, ".." above its root), if it does.
fn leaves_pool(inner: &[u8], follow: bool) -> Option<Vec<u8>> {
    let _op = crate::session::op();
    let fs = crate::session::fs().ok()?;
    match crate::resolve::resolve(fs, inner, follow) {
        Ok(crate::resolve::Resolved::Outside(real)) => Some(real),
        // Inside, or an error the call itself will meet and report.
        _ => None,
    }
}

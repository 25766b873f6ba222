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
//!
//! Up to the prefix none of this allocates or takes a lock: the call that failed may have
//! been made in a signal handler, after fork or in a vfork child, and on a merged-/usr
//! system every failing path under /bin, /lib or /var/run meets a link. The walk works in
//! fixed buffers on the stack (`StackPath`: `readlink` into one, the paths NUL-terminated in
//! place); a path too long for them is given up on and the kernel's error stands. Only once
//! the walk is under the prefix (`leaves_pool`: the session, the pool's own resolution) is
//! it a pool call, which allocates as every pool call does.

use crate::route::{Route, has_dotdot, strip_mount};
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
    // A path with ".." is walked whether or not it meets a link: "/mnt/../mnt/engram/f"
    // reaches the prefix with none (an absolute path is matched to the prefix as
    // written).
    // SAFETY: as the caller promises.
    if p.is_empty() || !(has_dotdot(p) || unsafe { meets_symlink(dirfd, path, follow) }) {
        return None;
    }
    let mut start = StackPath::new();
    if p[0] != b'/' {
        start_dir(dirfd, &mut start)?;
    }
    match walk(&mut start, p, follow) {
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

/// Bytes of the walk's buffers: a path as long as the kernel takes (PATH_MAX with its NUL)
/// and the slash a join adds.
const BUF: usize = libc::PATH_MAX as usize + 2;

/// A path in a fixed buffer on the stack, with room for its NUL: the walk allocates
/// nothing before it reaches the prefix. A path too long for it is given up on (the
/// kernel's error stands).
struct StackPath {
    b: [u8; BUF],
    len: usize,
}

impl StackPath {
    fn new() -> Self {
        StackPath {
            b: [0; BUF],
            len: 0,
        }
    }

    fn bytes(&self) -> &[u8] {
        &self.b[..self.len]
    }

    /// Append `parts`; None (and unchanged) if they do not fit with a NUL after them.
    fn push(&mut self, parts: &[&[u8]]) -> Option<()> {
        let n: usize = parts.iter().map(|p| p.len()).sum();
        if self.len + n >= BUF {
            return None;
        }
        for p in parts {
            self.b[self.len..self.len + p.len()].copy_from_slice(p);
            self.len += p.len();
        }
        Some(())
    }

    fn set(&mut self, parts: &[&[u8]]) -> Option<()> {
        self.len = 0;
        self.push(parts)
    }

    /// Replace the bytes before `pos` with `head` (a link's target before the rest of the
    /// path); None (and unchanged) if the result does not fit.
    fn splice(&mut self, pos: usize, head: &[u8]) -> Option<()> {
        let tail = self.len - pos;
        if head.len() + tail >= BUF {
            return None;
        }
        self.b.copy_within(pos..self.len, head.len());
        self.b[..head.len()].copy_from_slice(head);
        self.len = head.len() + tail;
        Some(())
    }

    /// The path as a C string (NUL-terminated in place).
    fn c_str(&mut self) -> *const c_char {
        self.b[self.len] = 0;
        self.b.as_ptr() as *const c_char
    }
}

/// The canonical real directory a relative path starts from into `out` ("" for the root);
/// None where it cannot be known.
fn start_dir(dirfd: c_int, out: &mut StackPath) -> Option<()> {
    let n = if dirfd == libc::AT_FDCWD {
        if crate::vcwd::is_set() {
            return None;
        }
        // SAFETY: getcwd into `out`'s buffer, BUF bytes.
        let p = unsafe { crate::real::getcwd(out.b.as_mut_ptr() as *mut c_char, BUF) };
        if p.is_null() {
            return None;
        }
        out.b.iter().position(|&b| b == 0)?
    } else {
        crate::util::real_dir_name(dirfd, &mut out.b)?
    };
    if n == 0 || n >= BUF - 1 || out.b[0] != b'/' {
        return None;
    }
    out.len = if n == 1 { 0 } else { n };
    Some(())
}

/// The next component of `p` at or after `*pos` (skipping slashes), advancing `*pos`: its
/// range.
fn next_comp(p: &[u8], pos: &mut usize) -> Option<(usize, usize)> {
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
    Some((start, *pos))
}

/// What a real path is, by `readlink` alone (one system call): a symlink, its target read
/// into `target` (`Some(length)`), or `None` for anything else that exists; `Err` if it
/// does not (or a component before it is not a directory), or the target does not fit.
fn link_target(path: &mut StackPath, target: &mut StackPath) -> Result<Option<usize>, ()> {
    let c = path.c_str();
    // SAFETY: readlink of a NUL-terminated path into a local buffer of the given size.
    let n = unsafe { crate::real::readlink(c, target.b.as_mut_ptr() as *mut c_char, BUF - 1) };
    if n > 0 && (n as usize) < BUF - 1 {
        target.len = n as usize;
        return Ok(Some(n as usize));
    }
    if n < 0 && errno() == libc::EINVAL {
        return Ok(None);
    }
    Err(())
}

/// Walk `path` from the canonical real directory `resolved` ("" for the root) as the kernel
/// would: the pool path it enters the prefix with, or None if it stays in the real file
/// system (or is too long for the buffers). The walk goes on where the pool sends it back
/// out (a pool symlink to a real path), so that a loop through both sides ends in ELOOP, as
/// it would on Linux; it then answers the last pool path it entered by, from which the
/// pool's own resolution leads the call back out. Until the walk is under the prefix it
/// allocates nothing and takes no lock; from there on it is a pool call.
fn walk(resolved: &mut StackPath, path: &[u8], follow: bool) -> Res<Option<Vec<u8>>> {
    let mut rest = StackPath::new();
    if rest.set(&[path]).is_none() {
        return Ok(None);
    }
    // The whole path (`resolved`, then the rest), then a link's target.
    let mut scratch = StackPath::new();
    let mut pos = 0;
    let mut links = 0u32;
    let mut entered = None;
    // Whether `rest` was just replaced by a link's target (the caller looked at `path`).
    let mut fresh = false;
    loop {
        // Too long for the buffers: the kernel's answer stands.
        if scratch
            .set(&[resolved.bytes(), b"/", &rest.bytes()[pos..]])
            .is_none()
        {
            return Ok(entered);
        }
        // Under the prefix, lexically, from here on: the pool's, as `route` decides for a
        // path given so. Only here does the walk reach the pool.
        if let Some(inner) = strip_mount(scratch.bytes()) {
            let inner = if inner.is_empty() { &b"/"[..] } else { inner }.to_vec();
            match leaves_pool(&inner, follow) {
                None => return Ok(Some(inner)),
                Some(real) => {
                    links += 1;
                    if links > MAX_LINKS {
                        return Err(libc::ELOOP);
                    }
                    // Too long to walk: the pool's own resolution leads the call out.
                    if rest.set(&[&real]).is_none() {
                        return Ok(Some(inner));
                    }
                    entered = Some(inner);
                    resolved.len = 0;
                    pos = 0;
                    fresh = true;
                    continue;
                }
            }
        }
        // A target whose lookup meets no further symlink stays where it is (a ".." past a
        // missing component could not be taken lexically): one system call for the rest
        // of a path such as /bin/x, /bin being a link to usr/bin.
        if fresh && !has_dotdot(scratch.bytes()) && {
            let c = scratch.c_str();
            // SAFETY: a NUL-terminated path in a local buffer.
            !unsafe { meets_symlink(libc::AT_FDCWD, c, follow) }
        } {
            return Ok(entered);
        }
        fresh = false;
        let Some((s, e)) = next_comp(rest.bytes(), &mut pos) else {
            return Ok(entered);
        };
        let c = &rest.b[s..e];
        if c == b"." {
            continue;
        }
        if c == b".." {
            // `resolved` holds no symlink, so its parent is lexical.
            resolved.len = resolved
                .bytes()
                .iter()
                .rposition(|&b| b == b'/')
                .unwrap_or(0);
            continue;
        }
        // A last component not followed: the call acts on it in the real file system.
        if pos == rest.len && !follow {
            return Ok(entered);
        }
        let here = resolved.len;
        if resolved.push(&[b"/", c]).is_none() {
            return Ok(entered);
        }
        match link_target(resolved, &mut scratch) {
            Ok(None) => {}
            Ok(Some(n)) => {
                links += 1;
                if links > MAX_LINKS {
                    return Err(libc::ELOOP);
                }
                if rest.splice(pos, &scratch.b[..n]).is_none() {
                    return Ok(entered);
                }
                resolved.len = if scratch.b[0] == b'/' { 0 } else { here };
                pos = 0;
                fresh = true;
            }
            // Missing, or a file with more to walk: the real file system's answer stands.
            Err(()) => return Ok(entered),
        }
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

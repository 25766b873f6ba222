//! Paths from a removed directory: the current directory, or a directory descriptor, whose
//! directory has been removed since (by this process or another). Linux keeps such a
//! directory while it is in use, empty and without links, and its `..` leads to the parent
//! it had when it was removed; the pool does the same while the shim holds it (the current
//! directory's hold, a descriptor's open file). It has no path, so a path from it is not
//! joined to one: it is walked here by handle, through "." and ".." up to the first
//! directory that still has a name, and the rest is joined to that directory's path.

use crate::ops::Side;
use crate::resolve::{Resolved, resolve};
use crate::util::{Res, cstring, en};
use engram_core::{Fs, Handle};
use libc::c_int;

/// Where a path from a removed directory leads.
pub enum Reached {
    /// A pool path from the pool's root (not yet resolved).
    Path(Vec<u8>),
    /// A removed directory itself (the start, or a removed parent), reached by `walked`
    /// (the components walked, "." and ".." only).
    Dir(Handle, usize),
}

/// Whether directory `h` has been removed and is still kept (a live inode without links).
pub fn is_removed(fs: &Fs, h: Handle) -> bool {
    fs.stat_handle(h).is_ok_and(|m| m.is_dir() && m.nlink == 0)
}

/// A stale handle (the directory was freed before this process held it) as ENOENT: it had
/// been removed.
fn gone(e: engram_core::Error) -> c_int {
    match e.errno() {
        libc::ESTALE => libc::ENOENT,
        _ => en(e),
    }
}

/// Walk `rel` from removed directory `h`. A name in a removed directory is ENOENT, to look
/// up or to make, as Linux gives: it is empty, and takes no new names.
pub fn walk(fs: &Fs, h: Handle, rel: &[u8]) -> Res<Reached> {
    let mut cur = h;
    let mut pos = 0;
    let mut walked = 0;
    loop {
        while rel.get(pos) == Some(&b'/') {
            pos += 1;
        }
        let start = pos;
        while pos < rel.len() && rel[pos] != b'/' {
            pos += 1;
        }
        match &rel[start..pos] {
            b"" => return Ok(Reached::Dir(cur, walked)),
            b"." => {}
            b".." => {
                cur = fs.lookup_in(cur, b"..").map_err(gone)?.0;
                if !is_removed(fs, cur) {
                    let mut path = crate::vcwd::path_of(fs, cur).ok_or(libc::ENOENT)?;
                    // The rest, from its slash (kept: a trailing one says "a directory").
                    if path == b"/" && pos < rel.len() {
                        path.clear();
                    }
                    path.extend_from_slice(&rel[pos..]);
                    return Ok(Reached::Path(path));
                }
            }
            _ => return Err(libc::ENOENT),
        }
        walked += 1;
    }
}

/// The path a route from directory `h` (open as `fd`, or the current directory) joins,
/// if `h` has been removed: the path from the first directory on the way that still has a
/// name. ENOENT where the path names a removed directory itself, which has no path.
pub fn joined(h: Handle, rel: &[u8]) -> Res<Option<Vec<u8>>> {
    let fs = crate::session::fs()?;
    if !is_removed(fs, h) {
        return Ok(None);
    }
    match walk(fs, h, rel)? {
        Reached::Path(p) => Ok(Some(p)),
        Reached::Dir(..) => Err(libc::ENOENT),
    }
}

/// The side of a route from directory `h` (open as `fd`, or AT_FDCWD: the current
/// directory), if `h` has been removed (None if it has not): where the path leads past the
/// removed directories, or one of them, held for the call.
pub fn side(fs: &'static Fs, fd: c_int, h: Handle, rel: &[u8], follow: bool) -> Res<Option<Side>> {
    if !is_removed(fs, h) {
        return Ok(None);
    }
    Ok(Some(match walk(fs, h, rel)? {
        Reached::Path(p) => match resolve(fs, &p, follow)? {
            Resolved::Inside(p) => Side::Pool(fs, p),
            Resolved::Outside(p) => Side::Real(cstring(&p)?),
        },
        Reached::Dir(d, walked) => {
            let dir = fs.hold_dir(d).map_err(gone)?;
            Side::Removed(fs, dir, name(fd, h, rel, walked))
        }
    }))
}

/// The name of a removed directory reached from `h` (open as `fd`, or the current
/// directory) by the first `walked` components of `rel`: the start's name as last known,
/// with them applied (a hint, as every descriptor's name is).
fn name(fd: c_int, h: Handle, rel: &[u8], walked: usize) -> Vec<u8> {
    let start = if fd == libc::AT_FDCWD {
        crate::vcwd::get()
            .map(|(_, p)| p)
            .filter(|_| crate::vcwd::is_dir(h))
    } else {
        crate::table::get(fd).map(|of| of.path().to_vec())
    };
    let mut path = start.unwrap_or_else(|| b"/".to_vec());
    for c in rel
        .split(|&b| b == b'/')
        .filter(|c| !c.is_empty())
        .take(walked)
    {
        if c == b".." {
            let cut = path.iter().rposition(|&b| b == b'/').unwrap_or(0);
            path.truncate(cut.max(1));
        }
    }
    path
}

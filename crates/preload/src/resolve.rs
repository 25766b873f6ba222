//! Resolving a pool path the way the kernel would, one component at a time, so that a
//! symlink whose target is absolute is followed in the process's namespace: a target under
//! the mount prefix continues inside the pool, any other leaves it (the call then goes to
//! libc with the real path). ".." above the pool's root leaves it too.
//!
//! The result is a canonical pool path (no symlink before the last component, no "." or
//! ".."), which the EngramFS path API then resolves again, cheaply and lock-free.

use crate::route::{outside, strip_mount};
use crate::util::Res;
use engram_core::{Fs, Handle, Metadata};
use std::borrow::Cow;

const MAX_SYMLINKS: u32 = 40;

pub enum Resolved {
    /// A canonical pool path ("/" for the root); a trailing slash is kept.
    Inside(Vec<u8>),
    /// The path leaves the pool: this real absolute path.
    Outside(Vec<u8>),
}

/// A resolution and, when the walk looked it up, what the path names.
pub struct Walk {
    pub resolved: Resolved,
    /// The object at the end of the path (the symlink itself when not following), if it
    /// exists and the walk reached it; `None` says nothing (ask the pool by path).
    pub found: Option<(Handle, Metadata)>,
}

fn comps(p: &[u8]) -> impl DoubleEndedIterator<Item = &[u8]> {
    p.split(|&b| b == b'/').filter(|c| !c.is_empty())
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

/// "/c" for each remaining component (and a final "/" if `trailing`).
fn rest_of(rest: &[u8], trailing: bool) -> Vec<u8> {
    let mut v = Vec::new();
    for c in comps(rest) {
        v.push(b'/');
        v.extend_from_slice(c);
    }
    if trailing {
        v.push(b'/');
    }
    v
}

/// The canonical path so far (`out`) with `last` and a trailing slash appended.
fn finish(mut out: Vec<u8>, last: Option<&[u8]>, trailing: bool) -> Vec<u8> {
    if let Some(l) = last {
        out.push(b'/');
        out.extend_from_slice(l);
    }
    if out.is_empty() || trailing {
        out.push(b'/');
    }
    out
}

/// Resolve `raw` (a path from the pool's root); `follow` decides whether a symlink as the
/// last component is followed (a trailing slash always follows).
pub fn resolve(fs: &Fs, raw: &[u8], follow: bool) -> Res<Resolved> {
    walk(fs, raw, follow, false).map(|w| w.resolved)
}

/// `resolve`, also reporting what the path names; `look_last` looks the last component up
/// even when it is not followed.
pub fn walk(fs: &Fs, raw: &[u8], follow: bool, look_last: bool) -> Res<Walk> {
    let inside = |p: Vec<u8>, found| {
        Ok(Walk {
            resolved: Resolved::Inside(p),
            found,
        })
    };
    let trailing = raw.len() > 1 && raw.ends_with(b"/");
    let follow = follow || trailing;
    let root = fs
        .handle_of(engram_core::layout::ROOT_INO)
        .map_err(crate::util::en)?;
    // What is left to walk: the caller's path until a symlink replaces it.
    let mut rest: Cow<[u8]> = Cow::Borrowed(raw);
    let mut pos = 0;
    // The canonical path so far, and for each of its components: where it starts in
    // `out` and the directory it names.
    let mut out: Vec<u8> = Vec::with_capacity(raw.len() + 1);
    let mut stack: Vec<(usize, Handle)> = Vec::new();
    let mut found = None;
    let mut links = 0u32;
    while let Some(c) = next_comp(&rest, &mut pos) {
        if c == b"." {
            continue;
        }
        found = None;
        if c == b".." {
            match stack.pop() {
                Some((at, _)) => out.truncate(at),
                None => {
                    let real = outside(&rest_of(&rest[pos..], trailing));
                    // "/mnt/engram/../engram/f" comes back in.
                    match strip_mount(&real) {
                        Some(inner) => {
                            rest = Cow::Owned(inner.to_vec());
                            pos = 0;
                        }
                        None => {
                            return Ok(Walk {
                                resolved: Resolved::Outside(real),
                                found: None,
                            });
                        }
                    }
                }
            }
            continue;
        }
        let last = comps(&rest[pos..]).all(|q| q == b".");
        let cur = stack.last().map_or(root, |s| s.1);
        if last && !follow {
            let f = if look_last {
                match fs.lookup_in(cur, c) {
                    Ok(f) => Some(f),
                    Err(e) if e.errno() == libc::ENOENT => None,
                    Err(e) => return Err(crate::util::en(e)),
                }
            } else {
                None
            };
            return inside(finish(out, Some(c), trailing), f);
        }
        let (h, m) = match fs.lookup_in(cur, c) {
            Ok(f) => f,
            Err(e) if e.errno() == libc::ENOENT && last => {
                return inside(finish(out, Some(c), trailing), None);
            }
            Err(e) => return Err(crate::util::en(e)),
        };
        if m.is_symlink() {
            links += 1;
            if links > MAX_SYMLINKS {
                return Err(libc::ELOOP);
            }
            let target = fs.readlink_handle(h).map_err(crate::util::en)?;
            let mut next = if target.first() == Some(&b'/') {
                match strip_mount(&target) {
                    Some(inner) => {
                        stack.clear();
                        out.clear();
                        inner.to_vec()
                    }
                    None => {
                        let mut real = target.clone();
                        real.extend_from_slice(&rest_of(&rest[pos..], trailing));
                        let real = normalize_abs(&real);
                        // A target such as "/mnt" followed by "engram/f" comes back in.
                        if let Some(inner) = strip_mount(&real) {
                            stack.clear();
                            out.clear();
                            rest = Cow::Owned(inner.to_vec());
                            pos = 0;
                            continue;
                        }
                        return Ok(Walk {
                            resolved: Resolved::Outside(real),
                            found: None,
                        });
                    }
                }
            } else {
                target
            };
            next.push(b'/');
            next.extend_from_slice(&rest[pos..]);
            rest = Cow::Owned(next);
            pos = 0;
            continue;
        }
        if !last && !m.is_dir() {
            return Err(libc::ENOTDIR);
        }
        stack.push((out.len(), h));
        out.push(b'/');
        out.extend_from_slice(c);
        found = Some((h, m));
    }
    inside(finish(out, None, trailing), found)
}

/// Remove "." and ".." from an absolute path, lexically.
fn normalize_abs(p: &[u8]) -> Vec<u8> {
    let mut out: Vec<&[u8]> = Vec::new();
    for c in comps(p) {
        match c {
            b"." => {}
            b".." => {
                out.pop();
            }
            c => out.push(c),
        }
    }
    let mut v = Vec::new();
    for c in out {
        v.push(b'/');
        v.extend_from_slice(c);
    }
    if v.is_empty() {
        v.push(b'/');
    }
    if p.len() > 1 && p.ends_with(b"/") && v != b"/" {
        v.push(b'/');
    }
    v
}

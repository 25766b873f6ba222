//! Resolving a pool path the way the kernel would, one component at a time, so that a
//! symlink whose target is absolute is followed in the process's namespace: a target under
//! the mount prefix continues inside the pool, any other leaves it (the call then goes to
//! libc with the real path). ".." above the pool's root leaves it too.
//!
//! The result is a canonical pool path (no symlink before the last component, no "." or
//! ".."), which the EngramFS path API then resolves again, cheaply and lock-free.

use crate::route::{outside, strip_mount};
use crate::util::Res;
use engram_core::{Fs, Handle};
use std::collections::VecDeque;

const MAX_SYMLINKS: u32 = 40;

pub enum Resolved {
    /// A canonical pool path ("/" for the root); a trailing slash is kept.
    Inside(Vec<u8>),
    /// The path leaves the pool: this real absolute path.
    Outside(Vec<u8>),
}

fn comps(p: &[u8]) -> impl DoubleEndedIterator<Item = &[u8]> {
    p.split(|&b| b == b'/').filter(|c| !c.is_empty())
}

fn canonical(stack: &[(Vec<u8>, Handle)], last: Option<&[u8]>, trailing: bool) -> Vec<u8> {
    let mut v = Vec::new();
    for (name, _) in stack {
        v.push(b'/');
        v.extend_from_slice(name);
    }
    if let Some(l) = last {
        v.push(b'/');
        v.extend_from_slice(l);
    }
    if v.is_empty() || trailing {
        v.push(b'/');
    }
    v
}

fn rest_of(queue: &VecDeque<Vec<u8>>, trailing: bool) -> Vec<u8> {
    let mut v = Vec::new();
    for c in queue {
        v.push(b'/');
        v.extend_from_slice(c);
    }
    if trailing {
        v.push(b'/');
    }
    v
}

/// Resolve `raw` (a path from the pool's root); `follow` decides whether a symlink as the
/// last component is followed (a trailing slash always follows).
pub fn resolve(fs: &Fs, raw: &[u8], follow: bool) -> Res<Resolved> {
    if raw.len() >= libc::PATH_MAX as usize {
        return Err(libc::ENAMETOOLONG);
    }
    let trailing = raw.len() > 1 && raw.ends_with(b"/");
    let follow = follow || trailing;
    let root = fs
        .handle_of(engram_core::layout::ROOT_INO)
        .map_err(|e| e.errno())?;
    let mut queue: VecDeque<Vec<u8>> = comps(raw).map(|c| c.to_vec()).collect();
    let mut stack: Vec<(Vec<u8>, Handle)> = Vec::new();
    let mut links = 0u32;
    while let Some(c) = queue.pop_front() {
        if c == b"." {
            continue;
        }
        if c == b".." {
            if stack.pop().is_none() {
                return Ok(Resolved::Outside(outside(&rest_of(&queue, trailing))));
            }
            continue;
        }
        let last = queue.iter().all(|q| q == b".");
        if last && !follow {
            return Ok(Resolved::Inside(canonical(&stack, Some(&c), trailing)));
        }
        let cur = stack.last().map_or(root, |s| s.1);
        let (h, m) = match fs.lookup_in(cur, &c) {
            Ok(found) => found,
            Err(e) if e.errno() == libc::ENOENT && last => {
                return Ok(Resolved::Inside(canonical(&stack, Some(&c), trailing)));
            }
            Err(e) => return Err(e.errno()),
        };
        if m.is_symlink() {
            links += 1;
            if links > MAX_SYMLINKS {
                return Err(libc::ELOOP);
            }
            let target = fs.readlink_handle(h).map_err(|e| e.errno())?;
            if target.first() == Some(&b'/') {
                match strip_mount(&target) {
                    Some(rest) => {
                        stack.clear();
                        for t in comps(rest).rev() {
                            queue.push_front(t.to_vec());
                        }
                    }
                    None => {
                        let mut real = target.clone();
                        real.extend_from_slice(&rest_of(&queue, trailing));
                        return Ok(Resolved::Outside(normalize_abs(&real)));
                    }
                }
            } else {
                for t in comps(&target).rev() {
                    queue.push_front(t.to_vec());
                }
            }
            continue;
        }
        if !last && !m.is_dir() {
            return Err(libc::ENOTDIR);
        }
        stack.push((c, h));
    }
    Ok(Resolved::Inside(canonical(&stack, None, trailing)))
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

//! The path walk: one epoch pin per path, each directory's inode read once, under its own
//! sequence counter, together with the lookup of the next component in it.
//!
//! A lookup in directory D reads the child's inode number and generation while D's counter
//! is unchanged (a child is only freed after its entry left D, which bumps D's counter).
//! The child's own fields are read at the next step, under the child's counter; if its
//! generation differs by then (it was freed and maybe reused, as when a rename replaced
//! it), that lookup in D is simply done again.

use super::cache::{Deps, Query};
use super::{MAX_SYMLINKS, Parent};
use crate::dir;
use crate::error::{Error, Result};
use crate::fs::Fs;
use crate::inode::{InodeData, S_IFDIR, S_IFLNK, S_IFMT, field};
use crate::layout::ROOT_INO;
use crate::perm::{self, X};
use crate::request::Handle;
use std::borrow::Cow;
use std::ops::Range;

/// An inode a walk has reached, with the generation its directory entry was read with
/// (None for the walk's root, which is never freed).
#[derive(Clone, Copy)]
pub(crate) struct At {
    pub ino: u64,
    pub generation: Option<u32>,
}

impl At {
    fn of(h: Handle) -> At {
        At {
            ino: h.ino,
            generation: Some(h.generation),
        }
    }

    const ROOT: At = At {
        ino: ROOT_INO,
        generation: None,
    };

    /// Whether `d` (read now) is no longer the inode this was reached as.
    #[inline]
    fn is_stale(&self, d: &InodeData) -> bool {
        d.is_free() || self.generation.is_some_and(|g| g != d.generation)
    }
}

/// Where a relative path starts: the directory, or the root (inode 0, reserved and never
/// a directory's). Two registers: an `Option<Handle>` is 24 bytes and went by pointer, and
/// the walk's wide load of it waited for the caller's narrower stores to reach the cache.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct Base {
    ino: u64,
    generation: u32,
}

impl Base {
    #[inline]
    pub(crate) fn of(h: Option<Handle>) -> Base {
        debug_assert!(h.is_none_or(|h| h.ino != 0), "inode 0 is never a directory");
        h.map_or(
            Base {
                ino: 0,
                generation: 0,
            },
            |h| Base {
                ino: h.ino,
                generation: h.generation,
            },
        )
    }

    #[inline]
    fn handle(self) -> Option<Handle> {
        (self.ino != 0).then_some(Handle {
            ino: self.ino,
            generation: self.generation,
        })
    }
}

/// Lookups a walk redoes after finding a free or reused inode before it calls the pool
/// damaged (`walk_uncached`).
const MAX_REDONE: u32 = 1000;

/// What one step of a walk found.
enum Step {
    /// The component names this inode.
    Child(At),
    Missing,
    /// The inode the walk stands on is gone (or reused): redo the lookup that led to it.
    Stale,
    /// The inode the walk stands on is a symlink: follow it first.
    Link,
    /// ".." in the root of a walk that must not leave the pool's root.
    Leaves,
}

pub(crate) enum Want {
    /// The object the whole path names.
    Object { follow: bool },
    /// The directory that holds the last component, and that component.
    Parent,
}

pub(crate) enum Walked<'p> {
    Object(Handle, InodeData),
    Parent(Parent<'p>),
    /// The path leaves the pool's namespace (see `Fs::stat_local`).
    Leaves,
}

/// The next non-empty component of `p` at or after `pos`.
fn next_comp(p: &[u8], pos: usize) -> Option<Range<usize>> {
    let start = pos + p[pos..].iter().position(|&b| b != b'/')?;
    let end = p[start..]
        .iter()
        .position(|&b| b == b'/')
        .map_or(p.len(), |n| start + n);
    Some(start..end)
}

fn u32_at(b: &[u8], off: u64) -> u32 {
    let i = off as usize;
    u32::from_le_bytes(b[i..i + 4].try_into().unwrap())
}

fn u64_at(b: &[u8], off: u64) -> u64 {
    let i = off as usize;
    u64::from_le_bytes(b[i..i + 8].try_into().unwrap())
}

impl Fs {
    /// The fields of inode `ino` that a walk needs, read in place (no copy, no decoding of
    /// the rest): mode, uid, gid, generation, root and parent.
    fn dir_fields(&self, ino: u64) -> InodeData {
        let core = &*self.core;
        let b = core.pool.slice(core.geo.inode_addr(ino), field::INLINE);
        InodeData {
            mode: u32_at(b, field::MODE),
            uid: u32_at(b, field::UID),
            gid: u32_at(b, field::GID),
            root: u64_at(b, field::ROOT),
            generation: u32_at(b, field::GENERATION),
            parent: u64_at(b, field::PARENT),
            ..InodeData::default()
        }
    }

    /// The generation of a valid inode number (read without its counter: see the module
    /// comment), or None.
    fn generation_of(&self, ino: u64) -> Option<u32> {
        let core = &*self.core;
        (ino > 0 && ino < core.geo.inode_count).then(|| {
            core.pool
                .load_u32(core.geo.inode_addr(ino) + field::GENERATION)
        })
    }

    /// Look `name` up in the directory the walk stands on, with the search permission
    /// check, all under the directory's sequence counter.
    /// The directory's counter value is recorded in `deps` (when the walk keeps them).
    fn step(
        &self,
        at: At,
        name: &[u8],
        stay_inside: bool,
        deps: Option<&mut Deps>,
    ) -> Result<Step> {
        let core = &*self.core;
        loop {
            let s = core.shared.seqs.read_begin(at.ino);
            let d = self.dir_fields(at.ino);
            let early = if at.is_stale(&d) {
                Some(Ok(Step::Stale))
            } else if d.mode & S_IFMT == S_IFLNK {
                Some(Ok(Step::Link))
            } else if d.mode & S_IFMT != S_IFDIR {
                Some(Err(Error::ENOTDIR))
            } else {
                perm::check(&self.creds, &d, X).err().map(Err)
            };
            let found = match early {
                Some(r) => r,
                None if name == b"." => Ok(Step::Child(At {
                    ino: at.ino,
                    generation: Some(d.generation),
                })),
                None if name == b".." && at.ino == ROOT_INO => Ok(if stay_inside {
                    Step::Leaves
                } else {
                    Step::Child(At::ROOT)
                }),
                None if name == b".." => match self.generation_of(d.parent) {
                    Some(g) => Ok(Step::Child(At {
                        ino: d.parent,
                        generation: Some(g),
                    })),
                    None => Err(Error::corrupt(format!(
                        "directory {} has a bad parent {}",
                        at.ino, d.parent
                    ))),
                },
                None if name.len() > dir::NAME_MAX => Err(Error::ENAMETOOLONG),
                None => match dir::lookup_ino(&core.pool, &core.geo, d.root, name) {
                    Ok(None) => Ok(Step::Missing),
                    Ok(Some((ino, _))) => match self.generation_of(ino) {
                        Some(g) => Ok(Step::Child(At {
                            ino,
                            generation: Some(g),
                        })),
                        None => Err(Error::corrupt(format!("entry points to bad inode {ino}"))),
                    },
                    Err(e) => Err(e),
                },
            };
            if core.shared.seqs.read_ok(at.ino, s) {
                if let Some(deps) = deps {
                    deps.push(at.ino, s);
                }
                return found;
            }
        }
    }

    /// The whole inode the walk stands on, or None if it is stale. Inline: returned through
    /// memory, the snapshot was stored and reloaded in different widths (a stall each).
    #[inline(always)]
    fn full(&self, at: At) -> Option<InodeData> {
        let core = &*self.core;
        let seqs = &core.shared.seqs;
        loop {
            let s = seqs.read_begin(at.ino);
            // Decoded in place: no copy of the record first.
            let d = InodeData::decode(core.pool.slice(core.geo.inode_addr(at.ino), field::INLINE));
            if seqs.read_ok(at.ino, s) {
                return (!at.is_stale(&d)).then_some(d);
            }
        }
    }

    /// The target of the symlink the walk stands on, or None if it is stale.
    fn link_target(&self, at: At) -> Result<Option<Vec<u8>>> {
        match self.full(at) {
            Some(d) if d.is_symlink() => self.readlink_data(at.ino, &d).map(Some),
            Some(_) => Err(Error::corrupt(format!("inode {} changed type", at.ino))),
            None => Ok(None),
        }
    }

    /// Resolve `path` from `base` (the root when None or when the path is absolute).
    ///
    /// With `stay_inside`, the walk ends with `Leaves` where a process's namespace and the
    /// pool's disagree: a symlink whose target is absolute, or ".." in the root.
    ///
    /// The object walk that the cache answers comes first (`walk_cached`), the rest in
    /// `walk_rest`.
    #[inline]
    pub(crate) fn walk<'p>(
        &self,
        base: Base,
        path: &'p [u8],
        want: Want,
        stay_inside: bool,
    ) -> Result<Walked<'p>> {
        if let Want::Object { follow } = want
            && let Some((h, d)) = self.walk_cached(base, path, follow, stay_inside)
        {
            return Ok(Walked::Object(h, d));
        }
        self.walk_rest(base.handle(), path, want, stay_inside)
    }

    /// The object an object walk ends at, if the cache of walks answers it (None: walk).
    /// Inline into the callers that want speed (stat): through an out-of-line `walk`, the
    /// answer went back in memory as a `Walked`, stored in one set of widths and loaded in
    /// another, and each such load waited for the stores to reach the cache.
    #[inline(always)]
    pub(super) fn walk_cached(
        &self,
        base: Base,
        path: &[u8],
        follow: bool,
        stay_inside: bool,
    ) -> Option<(Handle, InodeData)> {
        let query = Query {
            base,
            follow,
            stay_inside,
        };
        // Inode records are never reclaimed: reading one needs no epoch pin.
        let at = self.cached_walk(query, path)?;
        let d = self.full(at)?;
        let h = Handle {
            ino: at.ino,
            generation: d.generation,
        };
        Some((h, d))
    }

    /// `walk` past the cache of object walks.
    #[inline(never)]
    pub(super) fn walk_rest<'p>(
        &self,
        base: Option<Handle>,
        path: &'p [u8],
        want: Want,
        stay_inside: bool,
    ) -> Result<Walked<'p>> {
        let Want::Object { follow } = want else {
            if let Some(p) = self.cached_parent(base, path, stay_inside) {
                return Ok(p);
            }
            return self.walk_uncached(base, path, want, stay_inside, &mut Deps::new(), &mut 0);
        };
        let query = Query {
            base: Base::of(base),
            follow,
            stay_inside,
        };
        let mut deps = Deps::new();
        let w = self.walk_uncached(base, path, want, stay_inside, &mut deps, &mut 0)?;
        if let Walked::Object(h, _) = &w {
            self.cache_walk(query, path, deps, At::of(*h));
        }
        Ok(w)
    }

    /// A parent walk through the cache: the directory the path up to its last slash names
    /// (a cached object walk, which depends on the directories above it but not on the one
    /// it ends at, so creates and removals there leave it valid), checked as the walk's
    /// last step checks it. None where that would not give the walk's own result (a last
    /// component "." or "..", no slash, a bad path, any failure): walk then.
    fn cached_parent<'p>(
        &self,
        base: Option<Handle>,
        path: &'p [u8],
        stay_inside: bool,
    ) -> Option<Walked<'p>> {
        if self.path_too_long(path) {
            return None;
        }
        let end = path.iter().rposition(|&b| b != b'/')? + 1;
        let slash = path[..end].iter().rposition(|&b| b == b'/')?;
        let name = &path[slash + 1..end];
        if name == b"." || name == b".." || name.contains(&0) {
            return None;
        }
        let (prefix, follow) = (&path[..=slash], true);
        let query = Query {
            base: Base::of(base),
            follow,
            stay_inside,
        };
        let at = match self.cached_walk(query, prefix) {
            Some(at) => at,
            // Walked (and cached) for the next time.
            None => match self.walk(query.base, prefix, Want::Object { follow }, stay_inside) {
                Ok(Walked::Object(h, _)) => At::of(h),
                _ => return None,
            },
        };
        // The walk's last step: still there, a directory, searchable.
        match self.step(at, b".", stay_inside, None) {
            Ok(Step::Child(At {
                ino,
                generation: Some(generation),
            })) => Some(Walked::Parent(Parent {
                dir: Handle { ino, generation },
                name: Some(Cow::Borrowed(name)),
                trailing_slash: end < path.len(),
            })),
            _ => None,
        }
    }

    /// The walk itself; `links` counts the symlinks followed, from what the caller already
    /// followed (Linux's limit of 40 is for a whole resolution, links inside links too).
    pub(super) fn walk_uncached<'p>(
        &self,
        base: Option<Handle>,
        path: &'p [u8],
        want: Want,
        stay_inside: bool,
        deps: &mut Deps,
        links: &mut u32,
    ) -> Result<Walked<'p>> {
        if path.is_empty() {
            return Err(Error::ENOENT);
        }
        // PATH_MAX bounds what the caller passes; a symlink's target spliced into the rest
        // of the path may be longer (Linux follows link bodies separately).
        if self.path_too_long(path) {
            return Err(Error::ENAMETOOLONG);
        }
        if path.contains(&0) {
            return Err(Error::EINVAL);
        }
        let _pin = self.core.shared.epochs.pin();
        let mut buf: Cow<[u8]> = Cow::Borrowed(path);
        let start = match base {
            Some(h) if path[0] != b'/' => At::of(h),
            _ => At::ROOT,
        };
        let links_before = *links;
        let mut cur = start;
        // The directory holding `cur` (where a relative symlink's target starts) and the
        // component looked up there, to redo the lookup if `cur` turns out stale.
        let mut from: Option<(At, Range<usize>)> = None;
        // Lookups redone because the inode found was gone: a race with an unlink ends after
        // one or two, so this many means an entry that names a free inode in a damaged pool
        // (which would otherwise be looked up again forever).
        let mut redone = 0u32;
        let mut pos = 0;
        loop {
            let comp = next_comp(&buf, pos);
            let is_last = |c: &Range<usize>| buf[c.end..].iter().all(|&b| b == b'/');
            let trailing = buf.ends_with(b"/");
            // Where the walk goes on after following a symlink at `cur`: the target, then
            // what is left of the path from `rest` on.
            let mut link_rest: Option<usize> = None;
            match (&comp, &want) {
                (Some(c), Want::Parent) if is_last(c) => {
                    // The directory itself is searched for "." (checks and permission) or
                    // its parent for "..".
                    let name = &buf[c.clone()];
                    let probe: &[u8] = if name == b".." { b".." } else { b"." };
                    match self.step(cur, probe, stay_inside, Some(deps))? {
                        Step::Child(at) => {
                            let generation = match at.generation {
                                Some(g) => g,
                                None => self.read_inode(at.ino).generation,
                            };
                            return Ok(Walked::Parent(Parent {
                                dir: Handle {
                                    ino: at.ino,
                                    generation,
                                },
                                name: (name != b"." && name != b"..").then(|| match &buf {
                                    Cow::Borrowed(p) => Cow::Borrowed(&p[c.clone()]),
                                    Cow::Owned(_) => Cow::Owned(name.to_vec()),
                                }),
                                trailing_slash: trailing,
                            }));
                        }
                        Step::Leaves => return Ok(Walked::Leaves),
                        Step::Link => link_rest = Some(c.start),
                        Step::Stale | Step::Missing => {}
                    }
                }
                (Some(c), _) => match self.step(cur, &buf[c.clone()], stay_inside, Some(deps))? {
                    Step::Child(next) => {
                        from = Some((cur, c.clone()));
                        cur = next;
                        pos = c.end;
                        continue;
                    }
                    Step::Missing => return Err(Error::ENOENT),
                    Step::Leaves => return Ok(Walked::Leaves),
                    Step::Stale => {}
                    Step::Link => link_rest = Some(c.start),
                },
                (None, want) => match self.full(cur) {
                    None => {}
                    Some(d) => {
                        let follow = matches!(want, Want::Object { follow: true });
                        if d.is_symlink() && (follow || trailing) {
                            link_rest = Some(buf.len());
                        } else if trailing && !d.is_dir() {
                            return Err(Error::ENOTDIR);
                        } else {
                            let h = Handle {
                                ino: cur.ino,
                                generation: d.generation,
                            };
                            return Ok(match want {
                                Want::Object { .. } => Walked::Object(h, d),
                                Want::Parent => Walked::Parent(Parent {
                                    dir: h,
                                    name: None,
                                    trailing_slash: trailing,
                                }),
                            });
                        }
                    }
                },
            }
            // Either `cur` is stale or it is a symlink to follow. Only the walk's start has
            // no `from`: a handle given as the base that is stale or not a directory.
            let Some((dir, c)) = from.clone() else {
                return Err(if link_rest.is_some() {
                    Error::ENOTDIR
                } else {
                    Error::ENOENT
                });
            };
            let link = match link_rest {
                Some(rest) => self.link_target(cur)?.map(|target| (rest, target)),
                None => None,
            };
            let Some((rest, mut target)) = link else {
                // `cur` is gone: look its name up again.
                redone += 1;
                if redone > MAX_REDONE {
                    return Err(Error::corrupt(format!(
                        "directory {} names inode {}, which is free",
                        dir.ino, cur.ino
                    )));
                }
                if dir.ino == cur.ino {
                    // The directory to look the name up again in is itself gone (replaced by
                    // a rename while the walk was inside it): walk the whole path again.
                    buf = Cow::Borrowed(path);
                    *links = links_before;
                    from = None;
                    cur = start;
                    pos = 0;
                    continue;
                }
                cur = dir;
                pos = c.start;
                continue;
            };
            *links += 1;
            if *links > MAX_SYMLINKS {
                return Err(Error::ELOOP);
            }
            if target[0] == b'/' {
                if stay_inside {
                    return Ok(Walked::Leaves);
                }
                cur = At::ROOT;
            } else {
                cur = dir;
            }
            // The target followed by the rest of the path (which keeps a trailing slash).
            if rest < buf.len() || trailing {
                target.push(b'/');
            }
            target.extend_from_slice(&buf[rest..]);
            buf = Cow::Owned(target);
            from = None;
            pos = 0;
        }
    }
}

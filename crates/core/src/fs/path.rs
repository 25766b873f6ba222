//! Path resolution on the client: lock-free lookups, symlinks, "." and "..", and the errors
//! Linux gives.

mod cache;
mod walk;

use super::{Fs, Metadata};
use crate::dir;
use crate::error::{Error, Result};
use crate::inode::{self, InodeData};
use crate::request::Handle;
use std::borrow::Cow;
use walk::{Base, Walked, Want};

/// Symlinks followed in one resolution before ELOOP, as Linux.
pub(super) const MAX_SYMLINKS: u32 = 40;
pub const PATH_MAX: usize = libc::PATH_MAX as usize;

/// Lookups a path call makes again because what it found was freed before the server acted
/// on it (`Fs::retry_stale`): a race with a rename ends after one or two.
const STALE_RETRIES: u32 = 1000;

/// The message of the error a `staying_inside` walk ends with where the path leaves the pool.
const LEAVES_POOL: &str = "the path leaves the pool's namespace";

impl Error {
    /// Whether a `Fs::staying_inside` walk stopped because the path may leave the pool.
    pub fn leaves_pool(&self) -> bool {
        self.errno() == libc::EXDEV && self.message() == Some(LEAVES_POOL)
    }
}

/// A path split into the directory that holds its last component and that component.
pub struct Parent<'p> {
    pub dir: Handle,
    /// None when the path names the directory itself ("/", ".", "a/.."). Borrowed from the
    /// path unless a symlink's target supplied it.
    pub name: Option<Cow<'p, [u8]>>,
    /// The path ended with a slash: the last component must be a directory.
    pub trailing_slash: bool,
}

impl Fs {
    /// Run `call`, which resolves a path and then acts on what it found (a request with its
    /// handle, or a read of it), again while the action finds the handle stale (ESTALE):
    /// another thread or process removed the name, or renamed another object over it,
    /// between the walk and the action, and the inode was freed. Linux acts on the object
    /// its walk found, old or new, and does not fail; a new walk finds the new object, or
    /// no name at all (ENOENT). The server checks every handle before it changes anything,
    /// so an attempt that found its handle stale did nothing.
    pub(crate) fn retry_stale<T>(&self, mut call: impl FnMut() -> Result<T>) -> Result<T> {
        for _ in 0..STALE_RETRIES {
            match call() {
                Err(e) if e.errno() == libc::ESTALE => continue,
                other => return other,
            }
        }
        // Replaced again before every action: the name has named nothing for a moment.
        Err(Error::ENOENT)
    }

    /// Look `name` up in directory `dir`; the child's inode is read consistently with the
    /// directory, so a name removed (and its inode reused) meanwhile is never returned.
    pub(crate) fn lookup_child(
        &self,
        dir: u64,
        name: &[u8],
    ) -> Result<Option<(Handle, InodeData)>> {
        let _pin = self.core.shared.epochs.pin();
        self.lookup_child_pinned(dir, name)
    }

    /// `lookup_child` for callers that already hold an epoch pin.
    fn lookup_child_pinned(&self, dir: u64, name: &[u8]) -> Result<Option<(Handle, InodeData)>> {
        if name.len() > dir::NAME_MAX {
            return Err(Error::ENAMETOOLONG);
        }
        let core = &*self.core;
        loop {
            let s = core.shared.seqs.read_begin(dir);
            // Only the trie root is needed from the directory's inode (its other fields were
            // checked by the caller): one load instead of decoding the whole inode.
            let root = core
                .pool
                .load_u64(core.geo.inode_addr(dir) + inode::field::ROOT);
            let found = dir::lookup_ino(&core.pool, &core.geo, root, name);
            let child = match &found {
                Ok(Some((ino, _))) if *ino > 0 && *ino < core.geo.inode_count => {
                    Some((*ino, self.read_inode(*ino)))
                }
                _ => None,
            };
            if !core.shared.seqs.read_ok(dir, s) {
                continue;
            }
            return match found? {
                None => Ok(None),
                Some((bad, _)) => {
                    let (ino, data) = child.ok_or_else(|| {
                        Error::corrupt(format!("entry points to bad inode {bad}"))
                    })?;
                    Ok(Some((
                        Handle {
                            ino,
                            generation: data.generation,
                        },
                        data,
                    )))
                }
            };
        }
    }

    fn readlink_data(&self, ino: u64, d: &InodeData) -> Result<Vec<u8>> {
        let core = &*self.core;
        let len = d.size as usize;
        if len == 0 || len >= PATH_MAX {
            return Err(Error::corrupt(format!("symlink {ino} has a bad length")));
        }
        if d.size <= inode::field::INLINE_LEN {
            return Ok(inode::read_inline(&core.pool, &core.geo, ino, len));
        }
        if !core.geo.is_meta_page(d.root) {
            return Err(Error::corrupt(format!(
                "symlink {ino} points outside the metadata area"
            )));
        }
        Ok(core.pool.slice(d.root, d.size).to_vec())
    }

    /// The target of symlink `h`; ESTALE if the inode was freed, or freed and reused, since
    /// the handle was found (another thread or process unlinked the name), never another
    /// inode's target or EINVAL for what is no longer this symlink. A target never changes
    /// while its inode lives: it is read under a pin (its page is not reused meanwhile)
    /// and checked against the inode's counter.
    pub(crate) fn read_link_target(&self, h: Handle) -> Result<Vec<u8>> {
        let _pin = self.core.shared.epochs.pin();
        let seq = self.core.shared.seqs.counter(h.ino);
        loop {
            let s = seq.begin();
            let d = crate::inode::read(&self.core.pool, &self.core.geo, h.ino);
            let r = if d.is_free() || d.generation != h.generation {
                Err(Error::ESTALE)
            } else if !d.is_symlink() {
                Err(Error::EINVAL)
            } else {
                self.readlink_data(h.ino, &d)
            };
            if seq.ok(s) {
                return r;
            }
        }
    }

    /// This pool for a front end that maps it into a process's namespace (the LD_PRELOAD
    /// shim): path walks fail with an error for which `Error::leaves_pool` holds where the
    /// process would resolve the path differently (a symlink whose target is absolute, or
    /// ".." in the root); the front end then resolves that path itself.
    pub fn staying_inside(&self) -> Fs {
        Fs {
            stay_inside: true,
            ..self.clone()
        }
    }

    /// This pool for a front end that builds paths itself (the LD_PRELOAD shim joins a
    /// relative path to the path of the directory it starts from): paths of PATH_MAX bytes
    /// or more are walked, not refused with ENAMETOOLONG. The kernel limits only the string
    /// a program passes (which the front end then checks), not where the walk starts: a
    /// program may work in a directory deeper than PATH_MAX through relative paths.
    pub fn without_path_limit(&self) -> Fs {
        Fs {
            long_paths: true,
            ..self.clone()
        }
    }

    /// Whether `path` is too long for this view (`without_path_limit`).
    pub(crate) fn path_too_long(&self, path: &[u8]) -> bool {
        !self.long_paths && path.len() >= PATH_MAX
    }

    /// stat (`follow`) or lstat of `path` from the root, as `staying_inside` walks it:
    /// `Ok(None)` where the path may leave the pool. One walk, no handle to clone.
    pub fn stat_inside(&self, path: &[u8], follow: bool) -> Result<Option<Metadata>> {
        self.stat_inside_from(None, path, follow)
    }

    /// `stat_inside` of a path relative to the directory `dir` (the root when None or when
    /// the path is absolute). Inline: the shim then fills `struct stat` straight from the
    /// walk's result, without a `Metadata` stored in between and reloaded in other widths.
    #[inline(always)]
    pub fn stat_inside_from(
        &self,
        dir: Option<Handle>,
        path: &[u8],
        follow: bool,
    ) -> Result<Option<Metadata>> {
        if let Some((h, d)) = self.walk_cached(Base::of(dir), path, follow, true) {
            return Ok(Some(Metadata::from_inode(h.ino, &d)));
        }
        Ok(
            match self.walk_rest(dir, path, Want::Object { follow }, true)? {
                Walked::Object(h, d) => Some(Metadata::from_inode(h.ino, &d)),
                _ => None,
            },
        )
    }

    #[inline]
    fn walk_or_leave<'p>(
        &self,
        base: Option<Handle>,
        path: &'p [u8],
        want: Want,
    ) -> Result<Walked<'p>> {
        match self.walk(Base::of(base), path, want, self.stay_inside)? {
            Walked::Leaves => Err(Error::with_msg(libc::EXDEV, LEAVES_POOL)),
            w => Ok(w),
        }
    }

    /// Resolve all but the last component of `path`, starting at `base` for relative paths.
    pub(crate) fn resolve_parent<'p>(
        &self,
        base: Option<Handle>,
        path: &'p [u8],
    ) -> Result<Parent<'p>> {
        match self.walk_or_leave(base, path, Want::Parent)? {
            Walked::Parent(p) => Ok(p),
            _ => unreachable!("a parent walk ends at a parent"),
        }
    }

    /// `resolve_parent` past the caches, adding the symlinks it follows to `links` (ELOOP
    /// past 40 in all): for O_CREAT through a chain of symlinks, whose links and the links
    /// inside their targets count toward one limit, as in Linux.
    pub(crate) fn resolve_parent_counting<'p>(
        &self,
        base: Option<Handle>,
        path: &'p [u8],
        links: &mut u32,
    ) -> Result<Parent<'p>> {
        let deps = &mut cache::Deps::new();
        match self.walk_uncached(base, path, Want::Parent, self.stay_inside, deps, links)? {
            Walked::Parent(p) => Ok(p),
            Walked::Leaves => Err(Error::with_msg(libc::EXDEV, LEAVES_POOL)),
            Walked::Object(..) => unreachable!("a parent walk ends at a parent"),
        }
    }

    /// Resolve a whole path; `follow` decides whether a symlink as the last component is
    /// followed (a trailing slash always follows).
    #[inline]
    pub(crate) fn resolve(
        &self,
        base: Option<Handle>,
        path: &[u8],
        follow: bool,
    ) -> Result<(Handle, InodeData)> {
        match self.walk_or_leave(base, path, Want::Object { follow })? {
            Walked::Object(h, d) => Ok((h, d)),
            _ => unreachable!("an object walk ends at an object"),
        }
    }

    /// `resolve` with the answer of the cache of walks inline: for the calls whose result
    /// goes straight back to the caller (stat), not through memory as a `Walked`.
    #[inline(always)]
    pub(crate) fn resolve_inline(
        &self,
        base: Option<Handle>,
        path: &[u8],
        follow: bool,
    ) -> Result<(Handle, InodeData)> {
        if let Some(found) = self.walk_cached(Base::of(base), path, follow, self.stay_inside) {
            return Ok(found);
        }
        match self.walk_rest(base, path, Want::Object { follow }, self.stay_inside)? {
            Walked::Object(h, d) => Ok((h, d)),
            Walked::Leaves => Err(Error::with_msg(libc::EXDEV, LEAVES_POOL)),
            Walked::Parent(_) => unreachable!("an object walk ends at an object"),
        }
    }
}

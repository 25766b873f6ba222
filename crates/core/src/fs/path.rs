//! Path resolution on the client: lock-free lookups, symlinks, "." and "..", and the errors
//! Linux gives.

use super::Fs;
use crate::dir;
use crate::error::{Error, Result};
use crate::inode::{self, InodeData};
use crate::layout::ROOT_INO;
use crate::perm::{self, X};
use crate::request::Handle;

/// Symlinks followed in one resolution before ELOOP, as Linux.
const MAX_SYMLINKS: u32 = 40;
pub const PATH_MAX: usize = libc::PATH_MAX as usize;

/// A path split into the directory that holds its last component and that component.
pub struct Parent {
    pub dir: Handle,
    pub dir_data: InodeData,
    /// None when the path names the directory itself ("/", ".", "a/..").
    pub name: Option<Vec<u8>>,
    /// The path ended with a slash: the last component must be a directory.
    pub trailing_slash: bool,
}

impl Fs {
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

    pub(crate) fn read_link_target(&self, h: Handle) -> Result<Vec<u8>> {
        let d = self.read_inode(h.ino);
        if !d.is_symlink() {
            return Err(Error::EINVAL);
        }
        self.readlink_data(h.ino, &d)
    }

    fn parent_of(&self, dir: u64) -> (Handle, InodeData) {
        let p = if dir == ROOT_INO {
            ROOT_INO
        } else {
            self.read_inode(dir).parent
        };
        let d = self.read_inode(p);
        (
            Handle {
                ino: p,
                generation: d.generation,
            },
            d,
        )
    }

    /// Resolve all but the last component of `path`, starting at `base` for relative paths.
    pub(crate) fn resolve_parent(&self, base: Option<Handle>, path: &[u8]) -> Result<Parent> {
        let _pin = self.core.shared.epochs.pin();
        let mut links = 0;
        self.resolve_parent_counted(base, path, &mut links)
    }

    fn start(&self, base: Option<Handle>, path: &[u8]) -> Result<(Handle, InodeData)> {
        if path.first() == Some(&b'/') {
            return Ok(self.root());
        }
        match base {
            None => Ok(self.root()),
            Some(h) => {
                let d = self.read_inode(h.ino);
                if d.is_free() || d.generation != h.generation {
                    return Err(Error::ENOENT);
                }
                if !d.is_dir() {
                    return Err(Error::ENOTDIR);
                }
                Ok((h, d))
            }
        }
    }

    fn resolve_parent_counted(
        &self,
        base: Option<Handle>,
        path: &[u8],
        links: &mut u32,
    ) -> Result<Parent> {
        if path.is_empty() {
            return Err(Error::ENOENT);
        }
        // PATH_MAX bounds what the caller passes; a symlink's target spliced into the rest
        // of the path may be longer (Linux follows link bodies separately).
        if *links == 0 && path.len() >= PATH_MAX {
            return Err(Error::ENAMETOOLONG);
        }
        if path.contains(&0) {
            return Err(Error::EINVAL);
        }
        let (mut dir, mut dir_data) = self.start(base, path)?;
        let trailing_slash = path.ends_with(b"/");
        // Walk the components in place; each is known to be the last once no other follows.
        let mut comps = path
            .split(|&b| b == b'/')
            .filter(|c| !c.is_empty())
            .peekable();
        let Some(mut c) = comps.next() else {
            return Ok(Parent {
                dir,
                dir_data,
                name: None,
                trailing_slash,
            });
        };
        while let Some(&next) = comps.peek() {
            comps.next();
            let this = std::mem::replace(&mut c, next);
            if this.len() > dir::NAME_MAX {
                return Err(Error::ENAMETOOLONG);
            }
            perm::check(&self.creds, &dir_data, X)?;
            match this {
                b"." => continue,
                b".." => {
                    (dir, dir_data) = self.parent_of(dir.ino);
                    continue;
                }
                _ => {}
            }
            let (h, d) = self
                .lookup_child_pinned(dir.ino, this)?
                .ok_or(Error::ENOENT)?;
            if d.is_symlink() {
                *links += 1;
                if *links > MAX_SYMLINKS {
                    return Err(Error::ELOOP);
                }
                // The link's target followed by the rest of the path (which starts with '/'
                // and keeps any trailing slash).
                let end = this.as_ptr() as usize - path.as_ptr() as usize + this.len();
                let mut p = self.readlink_data(h.ino, &d)?;
                p.extend_from_slice(&path[end..]);
                return self.resolve_parent_counted(Some(dir), &p, links);
            }
            if !d.is_dir() {
                return Err(Error::ENOTDIR);
            }
            (dir, dir_data) = (h, d);
        }
        let last = c;
        if !dir_data.is_dir() {
            return Err(Error::ENOTDIR);
        }
        perm::check(&self.creds, &dir_data, X)?;
        match last {
            b"." => Ok(Parent {
                dir,
                dir_data,
                name: None,
                trailing_slash,
            }),
            b".." => {
                let (dir, dir_data) = self.parent_of(dir.ino);
                Ok(Parent {
                    dir,
                    dir_data,
                    name: None,
                    trailing_slash,
                })
            }
            _ => Ok(Parent {
                dir,
                dir_data,
                name: Some(last.to_vec()),
                trailing_slash,
            }),
        }
    }

    /// Resolve a whole path; `follow` decides whether a symlink as the last component is
    /// followed (a trailing slash always follows).
    pub(crate) fn resolve(
        &self,
        base: Option<Handle>,
        path: &[u8],
        follow: bool,
    ) -> Result<(Handle, InodeData)> {
        let _pin = self.core.shared.epochs.pin();
        let mut links = 0;
        let mut base = base;
        // The caller's path until a symlink's target replaces it.
        let mut target: Option<Vec<u8>> = None;
        loop {
            let path = target.as_deref().unwrap_or(path);
            let p = self.resolve_parent_counted(base, path, &mut links)?;
            let Some(name) = p.name else {
                return Ok((p.dir, p.dir_data));
            };
            let (h, d) = self
                .lookup_child_pinned(p.dir.ino, &name)?
                .ok_or(Error::ENOENT)?;
            if d.is_symlink() && (follow || p.trailing_slash) {
                links += 1;
                if links > MAX_SYMLINKS {
                    return Err(Error::ELOOP);
                }
                let mut t = self.readlink_data(h.ino, &d)?;
                if p.trailing_slash {
                    t.push(b'/');
                }
                target = Some(t);
                base = Some(p.dir);
                continue;
            }
            if p.trailing_slash && !d.is_dir() {
                return Err(Error::ENOTDIR);
            }
            return Ok((h, d));
        }
    }
}

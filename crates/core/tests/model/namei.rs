//! The model's path resolution, after fs/namei.c: link_path_walk, lookups and O_CREAT opens.

use super::posix_model::{Kind, Last, Model, Parent, R};
use super::{MAXSYMLINKS, NAME_MAX, PATH_MAX, ROOT};
use libc::{EEXIST, EISDIR, ELOOP, ENAMETOOLONG, ENOENT, ENOTDIR};

impl Model {
    // ---- path resolution (fs/namei.c) ----

    /// link_path_walk: resolve all but the last component.
    fn walk_parent(&self, start: u64, path: &[u8], links: &mut u32) -> R<Parent> {
        if path.is_empty() {
            return Err(ENOENT);
        }
        if path.len() >= PATH_MAX {
            return Err(ENAMETOOLONG);
        }
        let mut dir = if path[0] == b'/' { ROOT } else { start };
        let comps: Vec<&[u8]> = path
            .split(|&b| b == b'/')
            .filter(|c| !c.is_empty())
            .collect();
        let Some((&last, inner)) = comps.split_last() else {
            return Ok(Parent {
                dir,
                last: Last::Root,
                trailing: false,
            });
        };
        for &c in inner {
            dir = self.walk_component(dir, c, links)?;
        }
        let last = match last {
            b"." => Last::Dot,
            b".." => Last::DotDot,
            n => Last::Norm(n.to_vec()),
        };
        Ok(Parent {
            dir,
            last,
            trailing: path.ends_with(b"/"),
        })
    }

    /// walk_component for a component that is not the last: symlinks are followed and the
    /// result must be a directory.
    fn walk_component(&self, dir: u64, c: &[u8], links: &mut u32) -> R<u64> {
        let ino = match c {
            b"." => dir,
            b".." => self.parent(dir),
            _ => {
                if c.len() > NAME_MAX {
                    return Err(ENAMETOOLONG);
                }
                let ino = self.lookup(dir, c).ok_or(ENOENT)?;
                if self.link_target(ino).is_some() {
                    self.follow(dir, ino, links)?
                } else {
                    ino
                }
            }
        };
        if !self.is_dir(ino) {
            return Err(ENOTDIR);
        }
        Ok(ino)
    }

    /// Follow symlink `ino` found in `dir` completely.
    fn follow(&self, dir: u64, ino: u64, links: &mut u32) -> R<u64> {
        *links += 1;
        if *links > MAXSYMLINKS {
            return Err(ELOOP);
        }
        let target = self.link_target(ino).expect("symlink").to_vec();
        self.resolve_from(dir, &target, true, links)
    }

    /// path_lookupat: resolve a whole path; a final symlink is followed if `follow` or if
    /// slashes follow it, and slashes demand a directory.
    fn resolve_from(&self, start: u64, path: &[u8], follow: bool, links: &mut u32) -> R<u64> {
        let p = self.walk_parent(start, path, links)?;
        let ino = match p.last {
            Last::Root | Last::Dot => p.dir,
            Last::DotDot => self.parent(p.dir),
            Last::Norm(n) => {
                if n.len() > NAME_MAX {
                    return Err(ENAMETOOLONG);
                }
                let ino = self.lookup(p.dir, &n).ok_or(ENOENT)?;
                if self.link_target(ino).is_some() && (follow || p.trailing) {
                    self.follow(p.dir, ino, links)?
                } else {
                    ino
                }
            }
        };
        if p.trailing && !self.is_dir(ino) {
            return Err(ENOTDIR);
        }
        Ok(ino)
    }

    pub(crate) fn resolve(&self, path: &[u8], follow: bool) -> R<u64> {
        self.resolve_from(ROOT, path, follow, &mut 0)
    }

    pub(crate) fn parent_of(&self, path: &[u8]) -> R<Parent> {
        self.walk_parent(ROOT, path, &mut 0)
    }

    /// filename_create: the directory and the new name for mkdir, symlink and link.
    pub(crate) fn filename_create(&self, path: &[u8], want_dir: bool) -> R<(u64, Vec<u8>)> {
        let p = self.parent_of(path)?;
        let Last::Norm(name) = p.last else {
            return Err(EEXIST);
        };
        if name.len() > NAME_MAX {
            return Err(ENAMETOOLONG);
        }
        if self.lookup(p.dir, &name).is_some() {
            return Err(EEXIST);
        }
        if p.trailing && !want_dir {
            return Err(ENOENT);
        }
        Ok((p.dir, name))
    }

    /// open(2) with O_CREAT: a final symlink is followed (unless O_EXCL) and a missing
    /// target is created.
    pub(crate) fn open_create(
        &mut self,
        path: &[u8],
        excl: bool,
        trunc: bool,
        perm: u32,
    ) -> R<u64> {
        let mut links = 0;
        let mut start = ROOT;
        let mut path = path.to_vec();
        loop {
            let p = self.walk_parent(start, &path, &mut links)?;
            let Last::Norm(name) = p.last else {
                return Err(if excl { EEXIST } else { EISDIR });
            };
            if p.trailing {
                return Err(EISDIR);
            }
            if name.len() > NAME_MAX {
                return Err(ENAMETOOLONG);
            }
            let Some(ino) = self.lookup(p.dir, &name) else {
                let ino = self.alloc(Kind::File(Vec::new()), perm);
                self.add_entry(p.dir, &name, ino);
                return Ok(ino);
            };
            if excl {
                return Err(EEXIST);
            }
            if let Some(t) = self.link_target(ino) {
                links += 1;
                if links > MAXSYMLINKS {
                    return Err(ELOOP);
                }
                path = t.to_vec();
                start = p.dir;
                continue;
            }
            if self.is_dir(ino) {
                return Err(EISDIR);
            }
            if trunc && let Kind::File(d) = &mut self.node_mut(ino).kind {
                d.clear();
            }
            return Ok(ino);
        }
    }

    /// open(2) without O_CREAT.
    pub(crate) fn open_existing(&self, path: &[u8], write: bool) -> R<u64> {
        let ino = self.resolve(path, true)?;
        if write && self.is_dir(ino) {
            return Err(EISDIR);
        }
        Ok(ino)
    }
}

//! A full walk of the tree from the root: which inodes, metadata pages and data pages are
//! reachable, how often, and what every inode's counters should be. Recovery rebuilds the
//! allocator from it; fsck compares it with what the pool says.

use crate::alloc::{Allocator, Bitmap};
use crate::dir;
use crate::index;
use crate::inode::{self, InodeData, field};
use crate::layout::{Geometry, ROOT_INO};
use engram_pmem::Pool;
use std::collections::{HashMap, VecDeque};

/// What the walk expects of one inode.
#[derive(Clone, Copy, Debug, Default)]
pub struct Expected {
    /// Names pointing at it.
    pub links: u32,
    /// For directories: entries and subdirectories.
    pub entries: u64,
    pub subdirs: u32,
    /// Directory that holds it (for directories: must match the parent field).
    pub parent: u64,
    /// For files: data pages in the index.
    pub pages: u64,
}

pub struct Census {
    pub inodes: HashMap<u64, Expected>,
    pub meta: Bitmap,
    pub data: Bitmap,
    pub problems: Vec<String>,
}

impl Census {
    pub fn take(pool: &Pool, geo: &Geometry) -> Census {
        let mut c = Census {
            inodes: HashMap::new(),
            meta: Bitmap::new(geo.meta_pages),
            data: Bitmap::new(geo.data_pages),
            problems: Vec::new(),
        };
        c.inodes.insert(
            ROOT_INO,
            Expected {
                links: 1,
                parent: ROOT_INO,
                ..Expected::default()
            },
        );
        let root = inode::read(pool, geo, ROOT_INO);
        if !root.is_dir() {
            c.problems.push(format!(
                "root inode is not a directory (mode {:o})",
                root.mode
            ));
            return c;
        }
        let mut queue = VecDeque::from([ROOT_INO]);
        while let Some(dino) = queue.pop_front() {
            let d = inode::read(pool, geo, dino);
            let mut children = Vec::new();
            let mut names = std::collections::HashSet::new();
            let mut problems = Vec::new();
            let mut meta = Vec::new();
            let walked = dir::walk(pool, geo, d.root, &mut |p| meta.push(p), &mut |e| {
                if e.ino == 0 || e.ino >= geo.inode_count {
                    problems.push(format!(
                        "directory {dino}: entry {:?} points to invalid inode {}",
                        lossy(&e.name),
                        e.ino
                    ));
                } else if e.hash != dir::name_hash(&e.name) {
                    problems.push(format!(
                        "directory {dino}: entry {:?} has a wrong hash",
                        lossy(&e.name)
                    ));
                } else if crate::server::check_name(&e.name).is_err() {
                    problems.push(format!(
                        "directory {dino}: invalid name {:?}",
                        lossy(&e.name)
                    ));
                } else if !names.insert(e.name.clone()) {
                    problems.push(format!(
                        "directory {dino}: name {:?} appears twice",
                        lossy(&e.name)
                    ));
                } else {
                    children.push((e.ino, e.ftype, e.name.clone()));
                }
            });
            c.problems.extend(problems);
            if let Err(e) = walked {
                c.problems.push(format!("directory {dino}: {e}"));
            }
            for p in meta {
                c.mark_meta(geo, p, dino);
            }
            let entries = children.len() as u64;
            let mut subdirs = 0;
            for (ino, ftype, name) in children {
                let child = inode::read(pool, geo, ino);
                if child.is_free() {
                    c.problems.push(format!(
                        "directory {dino}: entry {:?} points to free inode {ino}",
                        lossy(&name)
                    ));
                    continue;
                }
                if crate::server::ftype_of(child.mode) != ftype {
                    c.problems.push(format!(
                        "directory {dino}: entry {:?} has the wrong file type",
                        lossy(&name)
                    ));
                }
                let first = !c.inodes.contains_key(&ino);
                let exp = c.inodes.entry(ino).or_default();
                exp.links += 1;
                exp.parent = dino;
                if child.is_dir() {
                    subdirs += 1;
                    if first {
                        queue.push_back(ino);
                    } else {
                        c.problems
                            .push(format!("directory inode {ino} has more than one name"));
                    }
                } else if first {
                    c.walk_content(pool, geo, ino, &child);
                }
            }
            let exp = c.inodes.entry(dino).or_default();
            exp.entries = entries;
            exp.subdirs = subdirs;
        }
        c
    }

    /// Count what a file or symlink holds, and check that a special file holds nothing (also
    /// used for open orphans, and for directories removed while in use, whose empty tree is
    /// still theirs).
    pub fn walk_content(&mut self, pool: &Pool, geo: &Geometry, ino: u64, d: &InodeData) {
        if d.is_reg() {
            // A small node lies in the file's own inode (index.rs): one in another inode
            // would share that inode's bytes.
            if geo.is_small_node(d.root) && (d.height != 1 || d.root != geo.small_node(ino)) {
                self.problems.push(format!(
                    "file {ino}: its index root {:#x} is another inode's small node",
                    d.root
                ));
                return;
            }
            let mut nodes = Vec::new();
            let mut pages = Vec::new();
            let r = index::walk(
                pool,
                geo,
                d.root,
                d.height,
                &mut |n| nodes.push(n),
                &mut |_, p| pages.push(p),
            );
            if let Err(e) = r {
                self.problems.push(format!("file {ino}: {e}"));
            }
            for n in nodes {
                self.mark_meta(geo, n, ino);
            }
            self.inodes.entry(ino).or_default().pages = pages.len() as u64;
            for p in pages {
                if !self.data.set(geo.data_index(p)) {
                    self.problems.push(format!(
                        "data page {p:#x} is used twice (again by inode {ino})"
                    ));
                }
            }
        } else if d.is_symlink() {
            if d.size == 0 || d.size >= libc::PATH_MAX as u64 {
                self.problems
                    .push(format!("symlink {ino} has an invalid length {}", d.size));
            } else if d.size > field::INLINE_LEN {
                if geo.is_meta_page(d.root) {
                    self.mark_meta(geo, d.root, ino);
                } else {
                    self.problems
                        .push(format!("symlink {ino} points outside the metadata area"));
                }
            }
        } else if d.is_dir() {
            let mut meta = Vec::new();
            if let Err(e) = dir::walk(pool, geo, d.root, &mut |p| meta.push(p), &mut |_| {}) {
                self.problems.push(format!("directory {ino}: {e}"));
            }
            for p in meta {
                self.mark_meta(geo, p, ino);
            }
        } else if d.is_special() {
            // A FIFO, device or socket holds nothing; only a device keeps a number, in the
            // root word.
            let stray_root = !crate::inode::is_device(d.mode) && d.root != 0;
            if d.size != 0 || d.blocks != 0 || d.height != 0 || stray_root {
                self.problems.push(format!(
                    "special file {ino} (mode {:o}) has content: size {}, {} pages, root {:#x}",
                    d.mode, d.size, d.blocks, d.root
                ));
            }
        } else {
            self.problems.push(format!(
                "inode {ino} has an unknown file type (mode {:o})",
                d.mode
            ));
        }
    }

    fn mark_meta(&mut self, geo: &Geometry, p: u64, owner: u64) {
        if !self.meta.set(geo.meta_index(p)) {
            self.problems.push(format!(
                "metadata page {p:#x} is used twice (again by inode {owner})"
            ));
        }
    }

    /// An allocator holding exactly what is reachable.
    pub fn allocator(&self, geo: &Geometry) -> Allocator {
        let mut a = Allocator::empty(geo);
        for &ino in self.inodes.keys() {
            a.inodes.set(ino);
        }
        a.meta = self.meta.clone();
        a.data = self.data.clone();
        a
    }
}

pub fn lossy(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

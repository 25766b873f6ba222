//! The in-memory POSIX model: its inodes and directory tree, and the whole tree as `Tree`.

use super::tree::{Tree, finish_tree};
use super::values::{Bytes, P};
use super::{Errno, ROOT};
use std::collections::BTreeMap;

// ---------------------------------------------------------------------------------------
// The model
// ---------------------------------------------------------------------------------------

#[derive(Clone, Debug)]
pub(crate) enum Kind {
    File(Vec<u8>),
    Dir(BTreeMap<Vec<u8>, u64>),
    Symlink(Vec<u8>),
}

#[derive(Clone, Debug)]
pub(crate) struct Node {
    pub(crate) kind: Kind,
    pub(crate) nlink: u32,
    pub(crate) perm: u32,
    /// Directories only.
    pub(crate) parent: u64,
}

/// The last component of a path, as link_path_walk leaves it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Last {
    Root,
    Dot,
    DotDot,
    Norm(Vec<u8>),
}

pub(crate) struct Parent {
    pub(crate) dir: u64,
    pub(crate) last: Last,
    /// Slashes follow the last component.
    pub(crate) trailing: bool,
}

#[derive(Clone, Debug)]
pub struct Model {
    nodes: BTreeMap<u64, Node>,
    next: u64,
    /// Open handles: slot -> inode.
    pub(crate) handles: BTreeMap<u8, u64>,
}

pub(crate) type R<T> = Result<T, Errno>;

impl Default for Model {
    fn default() -> Self {
        Self::new()
    }
}

impl Model {
    pub fn new() -> Model {
        let mut nodes = BTreeMap::new();
        nodes.insert(
            ROOT,
            Node {
                kind: Kind::Dir(BTreeMap::new()),
                nlink: 2,
                perm: 0o755,
                parent: ROOT,
            },
        );
        Model {
            nodes,
            next: ROOT + 1,
            handles: BTreeMap::new(),
        }
    }

    pub(crate) fn node(&self, ino: u64) -> &Node {
        &self.nodes[&ino]
    }

    pub(crate) fn node_mut(&mut self, ino: u64) -> &mut Node {
        self.nodes.get_mut(&ino).expect("model inode")
    }

    pub(crate) fn is_dir(&self, ino: u64) -> bool {
        matches!(self.node(ino).kind, Kind::Dir(_))
    }

    pub(crate) fn entries(&self, dir: u64) -> &BTreeMap<Vec<u8>, u64> {
        match &self.node(dir).kind {
            Kind::Dir(e) => e,
            _ => panic!("model: {dir} is not a directory"),
        }
    }

    pub(crate) fn entries_mut(&mut self, dir: u64) -> &mut BTreeMap<Vec<u8>, u64> {
        match &mut self.node_mut(dir).kind {
            Kind::Dir(e) => e,
            _ => panic!("model: {dir} is not a directory"),
        }
    }

    pub(crate) fn lookup(&self, dir: u64, name: &[u8]) -> Option<u64> {
        self.entries(dir).get(name).copied()
    }

    pub(crate) fn link_target(&self, ino: u64) -> Option<&[u8]> {
        match &self.node(ino).kind {
            Kind::Symlink(t) => Some(t),
            _ => None,
        }
    }

    pub(crate) fn parent(&self, dir: u64) -> u64 {
        self.node(dir).parent
    }

    pub(crate) fn alloc(&mut self, kind: Kind, perm: u32) -> u64 {
        let ino = self.next;
        self.next += 1;
        let nlink = if matches!(kind, Kind::Dir(_)) { 2 } else { 0 };
        self.nodes.insert(
            ino,
            Node {
                kind,
                nlink,
                perm,
                parent: 0,
            },
        );
        ino
    }

    /// Add a name; counts the link (and the ".." of a directory).
    pub(crate) fn add_entry(&mut self, dir: u64, name: &[u8], ino: u64) {
        self.entries_mut(dir).insert(name.to_vec(), ino);
        if self.is_dir(ino) {
            self.node_mut(dir).nlink += 1;
            self.node_mut(ino).parent = dir;
        } else {
            self.node_mut(ino).nlink += 1;
        }
    }

    /// Remove a name; the inode is freed once it has no names and no open handles.
    pub(crate) fn remove_entry(&mut self, dir: u64, name: &[u8]) -> u64 {
        let ino = self.entries_mut(dir).remove(name).expect("model entry");
        if self.is_dir(ino) {
            self.node_mut(dir).nlink -= 1;
            self.node_mut(ino).nlink = 0;
        } else {
            self.node_mut(ino).nlink -= 1;
        }
        self.release(ino);
        ino
    }

    pub(crate) fn release(&mut self, ino: u64) {
        if self.node(ino).nlink == 0 && !self.handles.values().any(|&h| h == ino) {
            self.nodes.remove(&ino);
        }
    }
}

impl Model {
    /// Every path in the tree (not through symlinks) and its inode, "/" first.
    pub fn paths(&self) -> Vec<(Vec<u8>, u64)> {
        let mut out = Vec::new();
        let mut stack = vec![(b"/".to_vec(), ROOT)];
        while let Some((path, ino)) = stack.pop() {
            if let Kind::Dir(e) = &self.node(ino).kind {
                for (name, &child) in e.iter().rev() {
                    stack.push((join(&path, name), child));
                }
            }
            out.push((path, ino));
        }
        out
    }

    /// The whole tree, as `Tree`.
    pub fn tree(&self) -> Tree {
        let mut raw = BTreeMap::new();
        let mut stack = vec![(b"/".to_vec(), ROOT)];
        while let Some((path, ino)) = stack.pop() {
            let n = self.node(ino);
            let (kind, content) = match &n.kind {
                Kind::File(d) => ('f', d.clone()),
                Kind::Symlink(t) => ('l', t.clone()),
                Kind::Dir(e) => {
                    for (name, &child) in e {
                        stack.push((join(&path, name), child));
                    }
                    ('d', Vec::new())
                }
            };
            raw.insert(P(path), (ino, kind, n.perm, n.nlink, Bytes(content)));
        }
        finish_tree(raw)
    }
}

pub(crate) fn join(dir: &[u8], name: &[u8]) -> Vec<u8> {
    let mut p = dir.to_vec();
    if !p.ends_with(b"/") {
        p.push(b'/');
    }
    p.extend_from_slice(name);
    p
}

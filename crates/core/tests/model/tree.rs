//! Whole trees as both sides report them, and where two of them differ.

use super::values::{Bytes, Mode, P};
use std::collections::BTreeMap;

// ---------------------------------------------------------------------------------------
// Trees
// ---------------------------------------------------------------------------------------

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TreeEntry {
    pub kind: char,
    pub perm: Mode,
    pub nlink: u32,
    /// File contents or symlink target.
    pub content: Bytes,
    /// The first path (in sorted order) naming the same inode: hard links agree.
    pub same_as: P,
}

pub type Tree = BTreeMap<P, TreeEntry>;

/// Raw walk results: path -> (inode number, kind, perm, nlink, content).
pub type RawTree = BTreeMap<P, (u64, char, u32, u32, Bytes)>;

pub fn finish_tree(raw: RawTree) -> Tree {
    let mut first: BTreeMap<u64, P> = BTreeMap::new();
    raw.into_iter()
        .map(|(path, (ino, kind, perm, nlink, content))| {
            let same_as = first.entry(ino).or_insert_with(|| path.clone()).clone();
            (
                path,
                TreeEntry {
                    kind,
                    perm: Mode(perm),
                    nlink,
                    content,
                    same_as,
                },
            )
        })
        .collect()
}

pub fn diff_trees(want: &Tree, got: &Tree) -> Option<String> {
    let mut out = Vec::new();
    for (p, w) in want {
        match got.get(p) {
            None => out.push(format!("  missing {p:?}: {w:?}")),
            Some(g) if g != w => out.push(format!(
                "  differs {p:?}:\n    model  {w:?}\n    engram {g:?}"
            )),
            Some(_) => {}
        }
    }
    for (p, g) in got {
        if !want.contains_key(p) {
            out.push(format!("  unexpected {p:?}: {g:?}"));
        }
    }
    if out.is_empty() {
        None
    } else {
        Some(out.join("\n"))
    }
}

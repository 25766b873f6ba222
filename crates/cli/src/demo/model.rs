//! What the demo tree should contain: the expected state every check compares against, and
//! the deterministic pseudo-random numbers that build it.

use std::collections::BTreeMap;

/// SplitMix64: tiny, fast and the same on every run.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n > 0; the tiny modulo bias does not matter here).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    pub fn bytes(&mut self, len: usize) -> Vec<u8> {
        let mut out = Vec::with_capacity(len + 8);
        while out.len() < len {
            out.extend_from_slice(&self.next_u64().to_le_bytes());
        }
        out.truncate(len);
        out
    }
}

/// One expected entry.
#[derive(Clone, Debug)]
pub enum Node {
    Dir {
        mode: u32,
    },
    /// `id` indexes `Model::data`; hard links share it.
    File {
        id: usize,
        mode: u32,
    },
    Symlink {
        target: Vec<u8>,
    },
}

/// Expected paths (absolute, inside the pool) and file contents.
#[derive(Default)]
pub struct Model {
    pub nodes: BTreeMap<Vec<u8>, Node>,
    pub data: Vec<Vec<u8>>,
}

/// `p` is `dir` or lies below it.
pub fn is_within(p: &[u8], dir: &[u8]) -> bool {
    p == dir || (p.starts_with(dir) && p.get(dir.len()) == Some(&b'/'))
}

/// The directory part of a path ("/" for top-level names).
pub fn parent(p: &[u8]) -> &[u8] {
    match p.iter().rposition(|&c| c == b'/') {
        Some(0) | None => b"/",
        Some(i) => &p[..i],
    }
}

impl Model {
    pub fn add_dir(&mut self, path: Vec<u8>, mode: u32) {
        self.nodes.insert(path, Node::Dir { mode });
    }

    pub fn add_file(&mut self, path: Vec<u8>, mode: u32, content: Vec<u8>) -> usize {
        self.data.push(content);
        let id = self.data.len() - 1;
        self.nodes.insert(path, Node::File { id, mode });
        id
    }

    pub fn add_symlink(&mut self, path: Vec<u8>, target: Vec<u8>) {
        self.nodes.insert(path, Node::Symlink { target });
    }

    pub fn add_hard_link(&mut self, existing: &[u8], new: Vec<u8>) {
        let node = self.nodes[existing].clone();
        self.nodes.insert(new, node);
    }

    pub fn remove(&mut self, path: &[u8]) {
        self.nodes.remove(path);
    }

    /// Move `from` and everything below it to `to`.
    pub fn rename(&mut self, from: &[u8], to: &[u8]) {
        let moved: Vec<Vec<u8>> = self
            .nodes
            .keys()
            .filter(|k| is_within(k, from))
            .cloned()
            .collect();
        for old in moved {
            let node = self.nodes.remove(&old).expect("listed above");
            let mut new = to.to_vec();
            new.extend_from_slice(&old[from.len()..]);
            self.nodes.insert(new, node);
        }
    }

    /// The content of the file at `path`.
    pub fn file(&self, path: &[u8]) -> Option<&Vec<u8>> {
        match self.nodes.get(path)? {
            Node::File { id, .. } => Some(&self.data[*id]),
            _ => None,
        }
    }

    pub fn file_mut(&mut self, path: &[u8]) -> &mut Vec<u8> {
        match self.nodes[path] {
            Node::File { id, .. } => &mut self.data[id],
            _ => panic!(
                "demo model: {} is not a file",
                String::from_utf8_lossy(path)
            ),
        }
    }

    /// How many names the file `id` has.
    pub fn links(&self, id: usize) -> usize {
        self.nodes
            .values()
            .filter(|n| matches!(n, Node::File { id: i, .. } if *i == id))
            .count()
    }

    /// Direct subdirectories of `dir`.
    pub fn subdirs(&self, dir: &[u8]) -> usize {
        self.nodes
            .iter()
            .filter(|(p, n)| {
                matches!(n, Node::Dir { .. }) && p.as_slice() != dir && parent(p) == dir
            })
            .count()
    }

    /// Regular-file paths in order, with their content sizes.
    pub fn files(&self) -> impl Iterator<Item = (&Vec<u8>, usize, usize)> {
        self.nodes.iter().filter_map(|(p, n)| match n {
            Node::File { id, .. } => Some((p, *id, self.data[*id].len())),
            _ => None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rename_moves_subtrees() {
        let mut m = Model::default();
        m.add_dir(b"/d".to_vec(), 0o755);
        m.add_dir(b"/d/a".to_vec(), 0o755);
        m.add_file(b"/d/a/f".to_vec(), 0o644, b"x".to_vec());
        m.add_file(b"/d/ab".to_vec(), 0o644, b"y".to_vec());
        m.rename(b"/d/a", b"/d/z");
        let keys: Vec<&[u8]> = m.nodes.keys().map(|k| k.as_slice()).collect();
        assert_eq!(keys, [&b"/d"[..], b"/d/ab", b"/d/z", b"/d/z/f"]);
        assert_eq!(m.subdirs(b"/d"), 1);
        assert_eq!(parent(b"/d/z/f"), b"/d/z");
        assert_eq!(parent(b"/d"), b"/");
    }

    #[test]
    fn rng_is_deterministic() {
        assert_eq!(Rng::new(7).bytes(13), Rng::new(7).bytes(13));
        assert_ne!(Rng::new(7).bytes(16), Rng::new(8).bytes(16));
    }
}

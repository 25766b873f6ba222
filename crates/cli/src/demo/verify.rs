//! Compare what the pool holds with the model: the same names, types, modes, link counts,
//! symlink targets and, byte for byte, the same contents.

use super::model::{Model, Node, is_within, parent};
use crate::error::{CliError, Result};
use crate::pool::{join, show};
use engram_core::Fs;
use std::collections::{BTreeSet, HashMap};

/// What a verification covered.
#[derive(Default)]
pub struct Checked {
    /// Distinct files (inodes) and the names they have.
    pub files: u64,
    pub names: u64,
    pub dirs: u64,
    pub symlinks: u64,
    pub bytes: u64,
}

fn mismatch(path: &[u8], what: impl std::fmt::Display) -> CliError {
    CliError::new(format!("verification failed: {}: {what}", show(path)))
}

fn io(path: &[u8], what: &str, e: engram_core::Error) -> CliError {
    mismatch(path, format!("{what}: {}", crate::error::describe(&e)))
}

/// Every path below `dir` (and `dir` itself), as the pool lists them.
fn walk(fs: &Fs, dir: &[u8], out: &mut BTreeSet<Vec<u8>>) -> Result<()> {
    out.insert(dir.to_vec());
    for e in fs.read_dir(dir).map_err(|e| io(dir, "cannot list", e))? {
        let e = e.map_err(|e| io(dir, "cannot list", e))?;
        if e.name == b"." || e.name == b".." {
            continue;
        }
        let p = join(dir, &e.name);
        if e.file_type == libc::DT_DIR {
            walk(fs, &p, out)?;
        } else {
            out.insert(p);
        }
    }
    Ok(())
}

/// Compare two contents; on a difference say where.
fn same_bytes(path: &[u8], got: &[u8], want: &[u8]) -> Result<()> {
    if got.len() != want.len() {
        return Err(mismatch(
            path,
            format!("read {} bytes, expected {}", got.len(), want.len()),
        ));
    }
    if let Some(i) = got.iter().zip(want).position(|(a, b)| a != b) {
        return Err(mismatch(
            path,
            format!("byte {i} is {:#04x}, expected {:#04x}", got[i], want[i]),
        ));
    }
    Ok(())
}

pub fn verify(fs: &Fs, model: &Model, root: &[u8]) -> Result<Checked> {
    let mut found = BTreeSet::new();
    walk(fs, root, &mut found)?;
    let expected: BTreeSet<Vec<u8>> = model
        .nodes
        .keys()
        .filter(|p| is_within(p, root))
        .cloned()
        .collect();
    if let Some(p) = expected.difference(&found).next() {
        return Err(mismatch(p, "missing"));
    }
    if let Some(p) = found.difference(&expected).next() {
        return Err(mismatch(p, "should not exist"));
    }
    let mut c = Checked::default();
    let mut inos: HashMap<usize, u64> = HashMap::new();
    for p in &expected {
        let m = fs.lstat(p).map_err(|e| io(p, "cannot stat", e))?;
        match &model.nodes[p] {
            Node::Dir { mode } => {
                if !m.is_dir() || m.permissions() != *mode {
                    return Err(mismatch(
                        p,
                        format!("mode {:o}, expected directory {mode:o}", m.mode),
                    ));
                }
                let want = 2 + model.subdirs(p) as u32;
                if m.nlink != want {
                    return Err(mismatch(p, format!("{} links, expected {want}", m.nlink)));
                }
                c.dirs += 1;
            }
            Node::File { id, mode } => {
                if !m.is_file() || m.permissions() != *mode {
                    return Err(mismatch(
                        p,
                        format!("mode {:o}, expected file {mode:o}", m.mode),
                    ));
                }
                let links = model.links(*id) as u32;
                if m.nlink != links {
                    return Err(mismatch(p, format!("{} links, expected {links}", m.nlink)));
                }
                if *inos.entry(*id).or_insert(m.ino) != m.ino {
                    return Err(mismatch(p, "hard links lead to different inodes"));
                }
                let want = &model.data[*id];
                if m.size != want.len() as u64 {
                    return Err(mismatch(
                        p,
                        format!("size {}, expected {}", m.size, want.len()),
                    ));
                }
                let got = fs.read_file(p).map_err(|e| io(p, "cannot read", e))?;
                same_bytes(p, &got, want)?;
                c.names += 1;
                if inos.len() as u64 > c.files {
                    c.files += 1;
                    c.bytes += got.len() as u64;
                }
            }
            Node::Symlink { target } => {
                let got = fs.readlink(p).map_err(|e| io(p, "cannot read link", e))?;
                if !m.is_symlink() || &got != target {
                    return Err(mismatch(
                        p,
                        format!("link to {}, expected {}", show(&got), show(target)),
                    ));
                }
                // Reading through the link gives the target's content.
                if let Some(want) = model.file(&join(parent(p), target)) {
                    let through = fs
                        .read_file(p)
                        .map_err(|e| io(p, "cannot read through", e))?;
                    same_bytes(p, &through, want)?;
                }
                c.symlinks += 1;
            }
        }
    }
    Ok(c)
}

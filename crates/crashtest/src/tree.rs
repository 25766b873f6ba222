//! The logical state of a file system, as the oracle compares it: every path with its type,
//! permission bits, link count, file contents, symlink target and device number (times are
//! left out).

use engram_core::{Fs, Result};
use std::collections::BTreeMap;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Node {
    File {
        mode: u32,
        nlink: u32,
        data: Vec<u8>,
    },
    Dir {
        mode: u32,
        nlink: u32,
    },
    Symlink {
        target: Vec<u8>,
    },
    /// A FIFO, socket or device: its whole mode (type and permissions).
    Special {
        mode: u32,
        nlink: u32,
        rdev: u64,
    },
}

pub type Tree = BTreeMap<String, Node>;

/// Read the whole tree through the public API (every file read, every directory listed).
pub fn snapshot(fs: &Fs) -> Result<Tree> {
    let mut t = Tree::new();
    let root = fs.lstat("/")?;
    t.insert(
        "/".into(),
        Node::Dir {
            mode: root.permissions(),
            nlink: root.nlink,
        },
    );
    walk(fs, "", &mut t)?;
    Ok(t)
}

fn walk(fs: &Fs, dir: &str, t: &mut Tree) -> Result<()> {
    let shown = if dir.is_empty() { "/" } else { dir };
    let mut names = Vec::new();
    for e in fs.read_dir(shown)? {
        let e = e?;
        if e.name != b"." && e.name != b".." {
            names.push(e.name_str().into_owned());
        }
    }
    for name in names {
        let path = format!("{dir}/{name}");
        let m = fs.lstat(&path)?;
        if m.is_dir() {
            t.insert(
                path.clone(),
                Node::Dir {
                    mode: m.permissions(),
                    nlink: m.nlink,
                },
            );
            walk(fs, &path, t)?;
        } else if m.is_symlink() {
            t.insert(
                path.clone(),
                Node::Symlink {
                    target: fs.readlink(&path)?,
                },
            );
        } else if !m.is_file() {
            t.insert(
                path,
                Node::Special {
                    mode: m.mode,
                    nlink: m.nlink,
                    rdev: m.rdev,
                },
            );
        } else {
            let data = fs.read_file(&path)?;
            t.insert(
                path,
                Node::File {
                    mode: m.permissions(),
                    nlink: m.nlink,
                    data,
                },
            );
        }
    }
    Ok(())
}

fn describe(n: &Node) -> String {
    match n {
        Node::File { mode, nlink, data } => {
            format!(
                "file mode {mode:o} nlink {nlink} size {} crc {:08x}",
                data.len(),
                crc(data)
            )
        }
        Node::Dir { mode, nlink } => format!("dir mode {mode:o} nlink {nlink}"),
        Node::Symlink { target } => format!("symlink -> {}", String::from_utf8_lossy(target)),
        Node::Special { mode, nlink, rdev } => {
            format!("special mode {mode:o} nlink {nlink} rdev {rdev:#x}")
        }
    }
}

fn crc(d: &[u8]) -> u32 {
    // A cheap content fingerprint for messages only.
    d.iter().fold(0x811c_9dc5u32, |h, &b| {
        (h ^ b as u32).wrapping_mul(0x0100_0193)
    })
}

/// The first few differences between `got` and `want`, in words.
pub fn diff(got: &Tree, want: &Tree) -> String {
    let mut out = Vec::new();
    for (p, n) in want {
        match got.get(p) {
            None => out.push(format!("missing {p} ({})", describe(n))),
            Some(g) if g != n => {
                out.push(format!("{p}: got {}, want {}", describe(g), describe(n)))
            }
            _ => {}
        }
    }
    for (p, n) in got {
        if !want.contains_key(p) {
            out.push(format!("unexpected {p} ({})", describe(n)));
        }
    }
    out.truncate(6);
    out.join("; ")
}

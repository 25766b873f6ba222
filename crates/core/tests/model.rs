//! Model-based property test: random sequences of operations run against EngramFS and
//! against an in-memory model of the POSIX semantics Linux (ext4, tmpfs) gives; every
//! result (value or errno) and the final tree must agree, also after unmount and reopen,
//! and fsck must stay clean.
//!
//! The model follows fs/namei.c closely: `walk_parent` is link_path_walk (every component
//! but the last, symlinks followed, ELOOP after 40 links), and each operation then treats
//! the last component the way its system call does (filename_create for mkdir, symlink
//! and link; do_unlinkat; do_rmdir; do_renameat2 with lock_rename's "trap"; path_openat
//! for O_CREAT, which follows a final symlink and may create its target).
//!
//! Generated paths are literals (".", "..", repeated and trailing slashes, names of 250 to
//! 260 bytes, deep paths for the 40-link limit) or picks of paths that exist when the
//! operation runs, so that operations often hit something.
//!
//! Knobs: `PROPTEST_CASES` (default 256), `ENGRAM_MODEL_MAX_OPS` (operations per case,
//! default 60), `ENGRAM_MODEL_PARANOID=1` (compare the whole tree after every operation),
//! e.g. `PROPTEST_CASES=5000 cargo test --release -p engram-core --test model`.
//!
//! Operations that would hit a known engine bug (`Model::known_bug`) are skipped by the
//! random test so that it keeps finding other problems; each bug has an ignored regression
//! case (`regression_cases`). `ENGRAM_MODEL_NO_SKIP=1` runs them anyway. The model itself was checked against the Linux kernel (tmpfs) by running the
//! same generated sequences and regression cases through system calls.

use engram_core::{File, Fs, Metadata, OpenOptions, Options, RENAME_EXCHANGE, RENAME_NOREPLACE};
use libc::{EBUSY, EEXIST, EINVAL, EISDIR, ELOOP, ENAMETOOLONG, ENOENT, ENOTDIR, ENOTEMPTY, EPERM};
use proptest::prelude::*;
use proptest::strategy::Union;
use proptest::test_runner::TestCaseError;
use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

pub type Errno = i32;

const ROOT: u64 = 1;
const NAME_MAX: usize = 255;
const PATH_MAX: usize = 4096;
const MAXSYMLINKS: u32 = 40;
const POOL_SIZE: u64 = 32 << 20;
/// Slot the compound "open, unlink, use" operation keeps its handle in.
const TEMP_SLOT: u8 = u8::MAX;

// ---------------------------------------------------------------------------------------
// Printable values
// ---------------------------------------------------------------------------------------

/// A path or name; printed with long runs of one byte abbreviated (`{x*255}`).
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct P(pub Vec<u8>);

impl P {
    pub fn new(s: impl AsRef<[u8]>) -> P {
        P(s.as_ref().to_vec())
    }
}

impl fmt::Debug for P {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = &self.0;
        let show = |unit: &[u8]| -> String {
            unit.iter()
                .map(|&c| {
                    if c.is_ascii_graphic() {
                        (c as char).to_string()
                    } else {
                        format!("\\x{c:02x}")
                    }
                })
                .collect()
        };
        let mut s = String::new();
        let mut i = 0;
        while i < b.len() {
            // The longest run of a one- or two-byte unit starting here.
            let (unit, reps) = [1, 2]
                .into_iter()
                .filter(|&u| i + u <= b.len())
                .map(|u| {
                    (
                        u,
                        b[i..]
                            .chunks_exact(u)
                            .take_while(|c| *c == &b[i..i + u])
                            .count(),
                    )
                })
                .max_by_key(|&(u, n)| (u * n, std::cmp::Reverse(u)))
                .unwrap_or((1, 1));
            if unit * reps > 12 {
                s.push_str(&format!("{{{}*{reps}}}", show(&b[i..i + unit])));
                i += unit * reps;
            } else {
                s.push_str(&show(&b[i..i + 1]));
                i += 1;
            }
        }
        write!(f, "\"{s}\"")
    }
}

/// File contents; printed as length, checksum and the first bytes.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct Bytes(pub Vec<u8>);

impl fmt::Debug for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sum = self.0.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
            (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
        });
        let head: Vec<u8> = self.0.iter().take(8).copied().collect();
        write!(
            f,
            "<{} bytes, fnv {sum:016x}, starts {head:?}>",
            self.0.len()
        )
    }
}

/// Permission bits (with set-ID and sticky bits), printed in octal.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Mode(pub u32);

impl fmt::Debug for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#o}", self.0)
    }
}

/// What `stat` reports that the model knows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StatV {
    /// 'f', 'd' or 'l'.
    pub kind: char,
    pub perm: Mode,
    pub nlink: u32,
    /// Files and symlinks only (directory sizes are file-system specific).
    pub size: Option<u64>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Val {
    Unit,
    Len(usize),
    Data(Bytes),
    Stat(StatV),
    Names(Vec<P>),
    Target(P),
    /// A handle operation on an empty slot (nothing happened).
    NoHandle,
    Seq(Vec<Outcome>),
}

pub type Outcome = Result<Val, Errno>;

pub fn errno_name(e: Errno) -> String {
    let names: &[(i32, &str)] = &[
        (libc::ENOENT, "ENOENT"),
        (libc::EEXIST, "EEXIST"),
        (libc::ENOTDIR, "ENOTDIR"),
        (libc::EISDIR, "EISDIR"),
        (libc::ENOTEMPTY, "ENOTEMPTY"),
        (libc::EINVAL, "EINVAL"),
        (libc::ENAMETOOLONG, "ENAMETOOLONG"),
        (libc::ELOOP, "ELOOP"),
        (libc::EBUSY, "EBUSY"),
        (libc::EPERM, "EPERM"),
        (libc::EACCES, "EACCES"),
        (libc::EXDEV, "EXDEV"),
        (libc::EMLINK, "EMLINK"),
        (libc::EBADF, "EBADF"),
        (libc::ENOSPC, "ENOSPC"),
        (libc::EFBIG, "EFBIG"),
        (libc::EIO, "EIO"),
        (libc::EUCLEAN, "EUCLEAN"),
    ];
    names
        .iter()
        .find(|n| n.0 == e)
        .map_or_else(|| format!("errno {e}"), |n| n.1.to_string())
}

pub fn show(o: &Outcome) -> String {
    match o {
        Ok(v) => format!("Ok({v:?})"),
        Err(e) => errno_name(*e),
    }
}

/// The bytes a write puts down: depends on the seed and the position in the buffer.
pub fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| seed.wrapping_add((i % 251) as u8))
        .collect()
}

// ---------------------------------------------------------------------------------------
// Operations
// ---------------------------------------------------------------------------------------

/// One operation; `T` is how paths are given (`P` once concrete, `PathGen` when generated).
#[derive(Clone, Debug)]
pub enum OpT<T> {
    /// open(O_CREAT [|O_EXCL] [|O_TRUNC], O_RDWR or O_RDONLY), then close.
    Create {
        path: T,
        excl: bool,
        trunc: bool,
        write: bool,
        perm: Mode,
    },
    /// open(O_WRONLY), pwrite, close.
    Write {
        path: T,
        off: u64,
        len: usize,
        seed: u8,
    },
    /// open(O_RDONLY), read everything, close.
    Read {
        path: T,
    },
    Truncate {
        path: T,
        size: u64,
    },
    Mkdir {
        path: T,
        perm: Mode,
    },
    Rmdir {
        path: T,
    },
    Unlink {
        path: T,
    },
    Rename {
        from: T,
        to: T,
        flags: u32,
    },
    Link {
        from: T,
        to: T,
    },
    Symlink {
        target: T,
        path: T,
    },
    Readlink {
        path: T,
    },
    Stat {
        path: T,
    },
    Lstat {
        path: T,
    },
    Chmod {
        path: T,
        perm: Mode,
    },
    ReadDir {
        path: T,
    },
    /// open(O_RDWR [|O_CREAT]) and keep the handle in a slot (closing what it held).
    Open {
        slot: u8,
        path: T,
        create: bool,
    },
    HWrite {
        slot: u8,
        off: u64,
        len: usize,
        seed: u8,
    },
    HRead {
        slot: u8,
    },
    HStat {
        slot: u8,
    },
    HTruncate {
        slot: u8,
        size: u64,
    },
    Close {
        slot: u8,
    },
    /// open(O_RDWR|O_CREAT), unlink the path, write and read through the handle, fstat, close.
    UnlinkOpen {
        path: T,
        off: u64,
        len: usize,
        seed: u8,
    },
    /// open(O_WRONLY|O_APPEND), write, close.
    Append {
        path: T,
        len: usize,
        seed: u8,
    },
    /// Create (O_EXCL) or unlink `n` names in a directory: "n0", "n1", ... or, if `long`,
    /// names of about 200 bytes; big directories split and merge their leaves. Runs as
    /// one operation per name.
    Bulk {
        dir: T,
        n: u16,
        long: bool,
        remove: bool,
    },
    /// Drop every handle, unmount, open the pool again.
    Remount,
}

/// An operation with concrete paths.
pub type Op = OpT<P>;

impl Op {
    /// The operations `self` stands for: `Bulk` is one create or unlink per name.
    pub fn expand(self) -> Vec<Op> {
        let OpT::Bulk {
            dir,
            n,
            long,
            remove,
        } = self
        else {
            return vec![self];
        };
        (0..n)
            .map(|i| {
                let name = if long {
                    format!("{i}-{}", "y".repeat(200))
                } else {
                    format!("n{i}")
                };
                let path = P(join(&dir.0, name.as_bytes()));
                if remove {
                    OpT::Unlink { path }
                } else {
                    OpT::Create {
                        path,
                        excl: true,
                        trunc: false,
                        write: true,
                        perm: Mode(0o644),
                    }
                }
            })
            .collect()
    }
}

impl<T> OpT<T> {
    /// The same operation with every path passed through `f` (in field order).
    pub fn map<U>(&self, mut f: impl FnMut(&T) -> U) -> OpT<U> {
        use OpT::*;
        match self {
            Create {
                path,
                excl,
                trunc,
                write,
                perm,
            } => Create {
                path: f(path),
                excl: *excl,
                trunc: *trunc,
                write: *write,
                perm: *perm,
            },
            Write {
                path,
                off,
                len,
                seed,
            } => Write {
                path: f(path),
                off: *off,
                len: *len,
                seed: *seed,
            },
            Read { path } => Read { path: f(path) },
            Truncate { path, size } => Truncate {
                path: f(path),
                size: *size,
            },
            Mkdir { path, perm } => Mkdir {
                path: f(path),
                perm: *perm,
            },
            Rmdir { path } => Rmdir { path: f(path) },
            Unlink { path } => Unlink { path: f(path) },
            Rename { from, to, flags } => Rename {
                from: f(from),
                to: f(to),
                flags: *flags,
            },
            Link { from, to } => Link {
                from: f(from),
                to: f(to),
            },
            Symlink { target, path } => Symlink {
                target: f(target),
                path: f(path),
            },
            Readlink { path } => Readlink { path: f(path) },
            Stat { path } => Stat { path: f(path) },
            Lstat { path } => Lstat { path: f(path) },
            Chmod { path, perm } => Chmod {
                path: f(path),
                perm: *perm,
            },
            ReadDir { path } => ReadDir { path: f(path) },
            Open { slot, path, create } => Open {
                slot: *slot,
                path: f(path),
                create: *create,
            },
            HWrite {
                slot,
                off,
                len,
                seed,
            } => HWrite {
                slot: *slot,
                off: *off,
                len: *len,
                seed: *seed,
            },
            HRead { slot } => HRead { slot: *slot },
            HStat { slot } => HStat { slot: *slot },
            HTruncate { slot, size } => HTruncate {
                slot: *slot,
                size: *size,
            },
            Close { slot } => Close { slot: *slot },
            UnlinkOpen {
                path,
                off,
                len,
                seed,
            } => UnlinkOpen {
                path: f(path),
                off: *off,
                len: *len,
                seed: *seed,
            },
            Append { path, len, seed } => Append {
                path: f(path),
                len: *len,
                seed: *seed,
            },
            Bulk {
                dir,
                n,
                long,
                remove,
            } => Bulk {
                dir: f(dir),
                n: *n,
                long: *long,
                remove: *remove,
            },
            Remount => Remount,
        }
    }
}

/// A generated path: a literal, or one of the paths that exist when the operation runs
/// (by index, so that generated operations often hit something) with a suffix.
#[derive(Clone, Debug)]
pub enum PathGen {
    Lit(P),
    Pick(u16, Filter, Suffix),
}

/// Which existing paths a pick chooses from.
#[derive(Clone, Copy, Debug)]
pub enum Filter {
    Any,
    NonDir,
    NonRoot,
}

#[derive(Clone, Debug)]
pub enum Suffix {
    None,
    Slash,
    Dot,
    DotDot,
    Child(P),
}

/// Paths that become concrete against the model's current tree.
pub trait ToPath: fmt::Debug {
    fn to_path(&self, m: &Model) -> P;
}

impl ToPath for P {
    fn to_path(&self, _: &Model) -> P {
        self.clone()
    }
}

impl ToPath for PathGen {
    fn to_path(&self, m: &Model) -> P {
        match self {
            PathGen::Lit(p) => p.clone(),
            PathGen::Pick(i, filter, suffix) => {
                let all = m.paths();
                let ok = |&&(ref p, ino): &&(Vec<u8>, u64)| match filter {
                    Filter::Any => true,
                    Filter::NonDir => !m.is_dir(ino),
                    Filter::NonRoot => p != b"/",
                };
                let some: Vec<_> = all.iter().filter(ok).collect();
                // Nothing qualifies: a name in the root that may not exist yet.
                let mut p = match some.len() {
                    0 => join(b"/", [b"a", b"b", b"c", b"d"][*i as usize % 4]),
                    n => some[*i as usize % n].0.clone(),
                };
                match suffix {
                    Suffix::None => {}
                    Suffix::Slash => p.push(b'/'),
                    Suffix::Dot => p = join(&p, b"."),
                    Suffix::DotDot => p = join(&p, b".."),
                    Suffix::Child(n) => p = join(&p, &n.0),
                }
                P(p)
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// The model
// ---------------------------------------------------------------------------------------

#[derive(Clone, Debug)]
enum Kind {
    File(Vec<u8>),
    Dir(BTreeMap<Vec<u8>, u64>),
    Symlink(Vec<u8>),
}

#[derive(Clone, Debug)]
struct Node {
    kind: Kind,
    nlink: u32,
    perm: u32,
    /// Directories only.
    parent: u64,
}

/// The last component of a path, as link_path_walk leaves it.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Last {
    Root,
    Dot,
    DotDot,
    Norm(Vec<u8>),
}

struct Parent {
    dir: u64,
    last: Last,
    /// Slashes follow the last component.
    trailing: bool,
}

#[derive(Clone, Debug)]
pub struct Model {
    nodes: BTreeMap<u64, Node>,
    next: u64,
    /// Open handles: slot -> inode.
    handles: BTreeMap<u8, u64>,
}

type R<T> = Result<T, Errno>;

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

    fn node(&self, ino: u64) -> &Node {
        &self.nodes[&ino]
    }

    fn node_mut(&mut self, ino: u64) -> &mut Node {
        self.nodes.get_mut(&ino).expect("model inode")
    }

    fn is_dir(&self, ino: u64) -> bool {
        matches!(self.node(ino).kind, Kind::Dir(_))
    }

    fn entries(&self, dir: u64) -> &BTreeMap<Vec<u8>, u64> {
        match &self.node(dir).kind {
            Kind::Dir(e) => e,
            _ => panic!("model: {dir} is not a directory"),
        }
    }

    fn entries_mut(&mut self, dir: u64) -> &mut BTreeMap<Vec<u8>, u64> {
        match &mut self.node_mut(dir).kind {
            Kind::Dir(e) => e,
            _ => panic!("model: {dir} is not a directory"),
        }
    }

    fn lookup(&self, dir: u64, name: &[u8]) -> Option<u64> {
        self.entries(dir).get(name).copied()
    }

    fn link_target(&self, ino: u64) -> Option<&[u8]> {
        match &self.node(ino).kind {
            Kind::Symlink(t) => Some(t),
            _ => None,
        }
    }

    fn parent(&self, dir: u64) -> u64 {
        self.node(dir).parent
    }

    fn alloc(&mut self, kind: Kind, perm: u32) -> u64 {
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
    fn add_entry(&mut self, dir: u64, name: &[u8], ino: u64) {
        self.entries_mut(dir).insert(name.to_vec(), ino);
        if self.is_dir(ino) {
            self.node_mut(dir).nlink += 1;
            self.node_mut(ino).parent = dir;
        } else {
            self.node_mut(ino).nlink += 1;
        }
    }

    /// Remove a name; the inode is freed once it has no names and no open handles.
    fn remove_entry(&mut self, dir: u64, name: &[u8]) -> u64 {
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

    fn release(&mut self, ino: u64) {
        if self.node(ino).nlink == 0 && !self.handles.values().any(|&h| h == ino) {
            self.nodes.remove(&ino);
        }
    }

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

    fn resolve(&self, path: &[u8], follow: bool) -> R<u64> {
        self.resolve_from(ROOT, path, follow, &mut 0)
    }

    fn parent_of(&self, path: &[u8]) -> R<Parent> {
        self.walk_parent(ROOT, path, &mut 0)
    }

    /// filename_create: the directory and the new name for mkdir, symlink and link.
    fn filename_create(&self, path: &[u8], want_dir: bool) -> R<(u64, Vec<u8>)> {
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
    fn open_create(&mut self, path: &[u8], excl: bool, trunc: bool, perm: u32) -> R<u64> {
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
    fn open_existing(&self, path: &[u8], write: bool) -> R<u64> {
        let ino = self.resolve(path, true)?;
        if write && self.is_dir(ino) {
            return Err(EISDIR);
        }
        Ok(ino)
    }

    fn file_data(&mut self, ino: u64) -> R<&mut Vec<u8>> {
        match &mut self.node_mut(ino).kind {
            Kind::File(d) => Ok(d),
            Kind::Dir(_) => Err(EISDIR),
            Kind::Symlink(_) => Err(EINVAL),
        }
    }

    fn write(&mut self, ino: u64, off: u64, len: usize, seed: u8) -> Outcome {
        let d = self.file_data(ino)?;
        if len > 0 {
            let off = off as usize;
            if d.len() < off + len {
                d.resize(off + len, 0);
            }
            d[off..off + len].copy_from_slice(&pattern(seed, len));
        }
        Ok(Val::Len(len))
    }

    fn read(&mut self, ino: u64) -> Outcome {
        Ok(Val::Data(Bytes(self.file_data(ino)?.clone())))
    }

    fn set_len(&mut self, ino: u64, size: u64) -> Outcome {
        self.file_data(ino)?.resize(size as usize, 0);
        Ok(Val::Unit)
    }

    fn stat_of(&self, ino: u64) -> StatV {
        let n = self.node(ino);
        let (kind, size) = match &n.kind {
            Kind::File(d) => ('f', Some(d.len() as u64)),
            Kind::Dir(_) => ('d', None),
            Kind::Symlink(t) => ('l', Some(t.len() as u64)),
        };
        StatV {
            kind,
            perm: Mode(n.perm),
            nlink: n.nlink,
            size,
        }
    }

    fn unlink(&mut self, path: &[u8]) -> Outcome {
        let p = self.parent_of(path)?;
        let Last::Norm(name) = p.last else {
            return Err(EISDIR);
        };
        if name.len() > NAME_MAX {
            return Err(ENAMETOOLONG);
        }
        let ino = self.lookup(p.dir, &name).ok_or(ENOENT)?;
        if p.trailing {
            return Err(if self.is_dir(ino) { EISDIR } else { ENOTDIR });
        }
        if self.is_dir(ino) {
            return Err(EISDIR);
        }
        self.remove_entry(p.dir, &name);
        Ok(Val::Unit)
    }

    fn rmdir(&mut self, path: &[u8]) -> Outcome {
        let p = self.parent_of(path)?;
        let name = match p.last {
            Last::DotDot => return Err(ENOTEMPTY),
            Last::Dot => return Err(EINVAL),
            Last::Root => return Err(EBUSY),
            Last::Norm(n) => n,
        };
        if name.len() > NAME_MAX {
            return Err(ENAMETOOLONG);
        }
        let ino = self.lookup(p.dir, &name).ok_or(ENOENT)?;
        if !self.is_dir(ino) {
            return Err(ENOTDIR);
        }
        if !self.entries(ino).is_empty() {
            return Err(ENOTEMPTY);
        }
        self.remove_entry(p.dir, &name);
        Ok(Val::Unit)
    }

    /// lock_rename(p1, p2): the child of one directory that is an ancestor of (or is) the
    /// other, if there is one.
    fn trap(&self, p1: u64, p2: u64) -> Option<u64> {
        if p1 == p2 {
            return None;
        }
        for (from, to) in [(p1, p2), (p2, p1)] {
            let mut p = from;
            loop {
                let r = self.parent(p);
                if r == to {
                    return Some(p);
                }
                if r == p {
                    break;
                }
                p = r;
            }
        }
        None
    }

    fn rename(&mut self, from: &[u8], to: &[u8], flags: u32) -> Outcome {
        let exchange = flags & RENAME_EXCHANGE != 0;
        let noreplace = flags & RENAME_NOREPLACE != 0;
        if flags & !(RENAME_EXCHANGE | RENAME_NOREPLACE) != 0 || (exchange && noreplace) {
            return Err(EINVAL);
        }
        let f = self.parent_of(from)?;
        let t = self.parent_of(to)?;
        let Last::Norm(fname) = f.last else {
            return Err(EBUSY);
        };
        let Last::Norm(tname) = t.last else {
            return Err(if noreplace { EEXIST } else { EBUSY });
        };
        if fname.len() > NAME_MAX {
            return Err(ENAMETOOLONG);
        }
        let src = self.lookup(f.dir, &fname).ok_or(ENOENT)?;
        if tname.len() > NAME_MAX {
            return Err(ENAMETOOLONG);
        }
        let dst = self.lookup(t.dir, &tname);
        if noreplace && dst.is_some() {
            return Err(EEXIST);
        }
        if exchange {
            let d = dst.ok_or(ENOENT)?;
            if !self.is_dir(d) && t.trailing {
                return Err(ENOTDIR);
            }
        }
        if !self.is_dir(src) && (f.trailing || (!exchange && t.trailing)) {
            return Err(ENOTDIR);
        }
        let trap = self.trap(t.dir, f.dir);
        if trap == Some(src) {
            return Err(EINVAL);
        }
        if dst.is_some() && trap == dst {
            return Err(if exchange { EINVAL } else { ENOTEMPTY });
        }
        if dst == Some(src) {
            return Ok(Val::Unit);
        }
        let sdir = self.is_dir(src);
        if exchange {
            let d = dst.expect("exchange target");
            let ddir = self.is_dir(d);
            self.entries_mut(f.dir).insert(fname, d);
            self.entries_mut(t.dir).insert(tname, src);
            if sdir {
                self.node_mut(src).parent = t.dir;
                self.node_mut(f.dir).nlink -= 1;
                self.node_mut(t.dir).nlink += 1;
            }
            if ddir {
                self.node_mut(d).parent = f.dir;
                self.node_mut(t.dir).nlink -= 1;
                self.node_mut(f.dir).nlink += 1;
            }
            return Ok(Val::Unit);
        }
        if let Some(d) = dst {
            let ddir = self.is_dir(d);
            if sdir && !ddir {
                return Err(ENOTDIR);
            }
            if !sdir && ddir {
                return Err(EISDIR);
            }
            if ddir && !self.entries(d).is_empty() {
                return Err(ENOTEMPTY);
            }
        }
        if dst.is_some() {
            self.remove_entry(t.dir, &tname);
        }
        self.entries_mut(f.dir).remove(&fname);
        self.entries_mut(t.dir).insert(tname, src);
        if sdir {
            self.node_mut(f.dir).nlink -= 1;
            self.node_mut(t.dir).nlink += 1;
            self.node_mut(src).parent = t.dir;
        }
        Ok(Val::Unit)
    }

    fn link(&mut self, from: &[u8], to: &[u8]) -> Outcome {
        let ino = self.resolve(from, false)?;
        let (dir, name) = self.filename_create(to, false)?;
        if self.is_dir(ino) {
            return Err(EPERM);
        }
        self.add_entry(dir, &name, ino);
        Ok(Val::Unit)
    }

    fn symlink(&mut self, target: &[u8], path: &[u8]) -> Outcome {
        if target.is_empty() {
            return Err(ENOENT);
        }
        if target.len() >= PATH_MAX {
            return Err(ENAMETOOLONG);
        }
        let (dir, name) = self.filename_create(path, false)?;
        let ino = self.alloc(Kind::Symlink(target.to_vec()), 0o777);
        self.add_entry(dir, &name, ino);
        Ok(Val::Unit)
    }

    fn mkdir(&mut self, path: &[u8], perm: u32) -> Outcome {
        let (dir, name) = self.filename_create(path, true)?;
        // vfs_mkdir keeps the permission and sticky bits; a set-group-ID parent passes
        // its S_ISGID on.
        let perm = perm & 0o1777 | self.node(dir).perm & 0o2000;
        let ino = self.alloc(Kind::Dir(BTreeMap::new()), perm);
        self.add_entry(dir, &name, ino);
        Ok(Val::Unit)
    }

    fn close(&mut self, slot: u8) {
        if let Some(ino) = self.handles.remove(&slot) {
            self.release(ino);
        }
    }

    fn handle(&self, slot: u8) -> Option<u64> {
        self.handles.get(&slot).copied()
    }

    /// Apply one operation; returns what Linux would return.
    pub fn apply(&mut self, op: &Op) -> Outcome {
        match op {
            OpT::Create {
                path,
                excl,
                trunc,
                perm,
                ..
            } => {
                self.open_create(&path.0, *excl, *trunc, perm.0)?;
                Ok(Val::Unit)
            }
            OpT::Write {
                path,
                off,
                len,
                seed,
            } => {
                let ino = self.open_existing(&path.0, true)?;
                self.write(ino, *off, *len, *seed)
            }
            OpT::Read { path } => {
                let ino = self.open_existing(&path.0, false)?;
                self.read(ino)
            }
            OpT::Truncate { path, size } => {
                let ino = self.resolve(&path.0, true)?;
                self.set_len(ino, *size)
            }
            OpT::Mkdir { path, perm } => self.mkdir(&path.0, perm.0),
            OpT::Rmdir { path } => self.rmdir(&path.0),
            OpT::Unlink { path } => self.unlink(&path.0),
            OpT::Rename { from, to, flags } => self.rename(&from.0, &to.0, *flags),
            OpT::Link { from, to } => self.link(&from.0, &to.0),
            OpT::Symlink { target, path } => self.symlink(&target.0, &path.0),
            OpT::Readlink { path } => {
                let ino = self.resolve(&path.0, false)?;
                let t = self.link_target(ino).ok_or(EINVAL)?;
                Ok(Val::Target(P::new(t)))
            }
            OpT::Stat { path } => Ok(Val::Stat(self.stat_of(self.resolve(&path.0, true)?))),
            OpT::Lstat { path } => Ok(Val::Stat(self.stat_of(self.resolve(&path.0, false)?))),
            OpT::Chmod { path, perm } => {
                let ino = self.resolve(&path.0, true)?;
                self.node_mut(ino).perm = perm.0 & 0o7777;
                Ok(Val::Unit)
            }
            OpT::ReadDir { path } => {
                let ino = self.resolve(&path.0, true)?;
                if !self.is_dir(ino) {
                    return Err(ENOTDIR);
                }
                Ok(Val::Names(self.entries(ino).keys().map(P::new).collect()))
            }
            OpT::Open { slot, path, create } => {
                self.close(*slot);
                let ino = if *create {
                    self.open_create(&path.0, false, false, 0o644)?
                } else {
                    self.open_existing(&path.0, true)?
                };
                self.handles.insert(*slot, ino);
                Ok(Val::Unit)
            }
            OpT::HWrite {
                slot,
                off,
                len,
                seed,
            } => match self.handle(*slot) {
                Some(ino) => self.write(ino, *off, *len, *seed),
                None => Ok(Val::NoHandle),
            },
            OpT::HRead { slot } => match self.handle(*slot) {
                Some(ino) => self.read(ino),
                None => Ok(Val::NoHandle),
            },
            OpT::HStat { slot } => match self.handle(*slot) {
                Some(ino) => Ok(Val::Stat(self.stat_of(ino))),
                None => Ok(Val::NoHandle),
            },
            OpT::HTruncate { slot, size } => match self.handle(*slot) {
                Some(ino) => self.set_len(ino, *size),
                None => Ok(Val::NoHandle),
            },
            OpT::Close { slot } => {
                let had = self.handles.contains_key(slot);
                self.close(*slot);
                Ok(if had { Val::Unit } else { Val::NoHandle })
            }
            OpT::UnlinkOpen {
                path,
                off,
                len,
                seed,
            } => {
                let ino = self.open_create(&path.0, false, false, 0o644)?;
                self.handles.insert(TEMP_SLOT, ino);
                let out = vec![
                    self.unlink(&path.0),
                    self.write(ino, *off, *len, *seed),
                    self.read(ino),
                    Ok(Val::Stat(self.stat_of(ino))),
                ];
                self.close(TEMP_SLOT);
                Ok(Val::Seq(out))
            }
            OpT::Append { path, len, seed } => {
                let ino = self.open_existing(&path.0, true)?;
                let end = self.file_data(ino)?.len() as u64;
                self.write(ino, end, *len, *seed)
            }
            OpT::Bulk { .. } => Ok(Val::Seq(
                op.clone().expand().iter().map(|o| self.apply(o)).collect(),
            )),
            OpT::Remount => {
                let slots: Vec<u8> = self.handles.keys().copied().collect();
                for s in slots {
                    self.close(s);
                }
                Ok(Val::Unit)
            }
        }
    }

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

fn join(dir: &[u8], name: &[u8]) -> Vec<u8> {
    let mut p = dir.to_vec();
    if !p.ends_with(b"/") {
        p.push(b'/');
    }
    p.extend_from_slice(name);
    p
}

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

// ---------------------------------------------------------------------------------------
// EngramFS side
// ---------------------------------------------------------------------------------------

static POOL_COUNTER: AtomicU64 = AtomicU64::new(0);

fn errno(e: engram_core::Error) -> Errno {
    e.errno()
}

fn statv(m: &Metadata) -> StatV {
    let kind = if m.is_dir() {
        'd'
    } else if m.is_symlink() {
        'l'
    } else if m.is_file() {
        'f'
    } else {
        '?'
    };
    StatV {
        kind,
        perm: Mode(m.permissions()),
        nlink: m.nlink,
        size: if m.is_dir() { None } else { Some(m.size) },
    }
}

fn read_all(f: &File) -> R<Vec<u8>> {
    let len = f.metadata().map_err(errno)?.size as usize;
    let mut buf = vec![0u8; len];
    let n = f.read_at(&mut buf, 0).map_err(errno)?;
    buf.truncate(n);
    Ok(buf)
}

pub struct Engine {
    path: PathBuf,
    fs: Option<Fs>,
    handles: BTreeMap<u8, File>,
}

impl Engine {
    pub fn new() -> Engine {
        let n = POOL_COUNTER.fetch_add(1, Ordering::Relaxed);
        let path = PathBuf::from(format!("/dev/shm/engram-model-{}-{n}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        Fs::mkfs(&path, POOL_SIZE).expect("mkfs");
        let fs = Fs::open(&path, &Options::default()).expect("open");
        Engine {
            path,
            fs: Some(fs),
            handles: BTreeMap::new(),
        }
    }

    fn fs(&self) -> &Fs {
        self.fs.as_ref().expect("mounted")
    }

    pub fn remount(&mut self) -> Result<(), String> {
        self.handles.clear();
        let fs = self.fs.take().expect("mounted");
        fs.unmount().map_err(|e| format!("unmount: {e}"))?;
        let fs = Fs::open(&self.path, &Options::default()).map_err(|e| format!("reopen: {e}"))?;
        let info = fs.mount_info();
        if !info.was_clean || !info.problems.is_empty() {
            return Err(format!(
                "reopen after a clean unmount: was_clean {} problems {:?}",
                info.was_clean, info.problems
            ));
        }
        self.fs = Some(fs);
        Ok(())
    }

    pub fn fsck(&self) -> Result<(), String> {
        let r = self
            .fs()
            .fsck(false)
            .map_err(|e| format!("fsck failed: {e}"))?;
        if r.is_clean() {
            Ok(())
        } else {
            Err(format!("fsck problems: {:#?}", r.problems))
        }
    }

    fn open(&self, path: &P, o: OpenOptions) -> R<File> {
        self.fs().open_file(&path.0, &o).map_err(errno)
    }

    pub fn apply(&mut self, op: &Op) -> Outcome {
        let rw = OpenOptions::new().read(true).write(true);
        let unit = |r: engram_core::Result<()>| r.map(|()| Val::Unit).map_err(errno);
        match op {
            OpT::Create {
                path,
                excl,
                trunc,
                write,
                perm,
            } => {
                let o = OpenOptions {
                    read: true,
                    write: *write,
                    create: true,
                    excl: *excl,
                    truncate: *trunc,
                    mode: perm.0,
                    ..rw
                };
                self.open(path, o)?;
                Ok(Val::Unit)
            }
            OpT::Write {
                path,
                off,
                len,
                seed,
            } => {
                let f = self.open(path, OpenOptions::new().write(true))?;
                f.write_at(&pattern(*seed, *len), *off)
                    .map(Val::Len)
                    .map_err(errno)
            }
            OpT::Read { path } => self
                .fs()
                .read_file(&path.0)
                .map(|d| Val::Data(Bytes(d)))
                .map_err(errno),
            OpT::Truncate { path, size } => unit(self.fs().truncate(&path.0, *size)),
            OpT::Mkdir { path, perm } => unit(self.fs().mkdir(&path.0, perm.0)),
            OpT::Rmdir { path } => unit(self.fs().rmdir(&path.0)),
            OpT::Unlink { path } => unit(self.fs().unlink(&path.0)),
            OpT::Rename { from, to, flags } => {
                unit(self.fs().rename_at(None, &from.0, None, &to.0, *flags))
            }
            OpT::Link { from, to } => unit(self.fs().link(&from.0, &to.0)),
            OpT::Symlink { target, path } => unit(self.fs().symlink(&target.0, &path.0)),
            OpT::Readlink { path } => self
                .fs()
                .readlink(&path.0)
                .map(|t| Val::Target(P(t)))
                .map_err(errno),
            OpT::Stat { path } => self
                .fs()
                .stat(&path.0)
                .map(|m| Val::Stat(statv(&m)))
                .map_err(errno),
            OpT::Lstat { path } => self
                .fs()
                .lstat(&path.0)
                .map(|m| Val::Stat(statv(&m)))
                .map_err(errno),
            OpT::Chmod { path, perm } => unit(self.fs().chmod(&path.0, perm.0)),
            OpT::ReadDir { path } => {
                let mut names = Vec::new();
                for e in self.fs().read_dir(&path.0).map_err(errno)? {
                    let e = e.map_err(errno)?;
                    if e.name != b"." && e.name != b".." {
                        names.push(P(e.name));
                    }
                }
                names.sort();
                Ok(Val::Names(names))
            }
            OpT::Open { slot, path, create } => {
                self.handles.remove(slot);
                let f = self.open(path, rw.create(*create))?;
                self.handles.insert(*slot, f);
                Ok(Val::Unit)
            }
            OpT::HWrite {
                slot,
                off,
                len,
                seed,
            } => match self.handles.get(slot) {
                Some(f) => f
                    .write_at(&pattern(*seed, *len), *off)
                    .map(Val::Len)
                    .map_err(errno),
                None => Ok(Val::NoHandle),
            },
            OpT::HRead { slot } => match self.handles.get(slot) {
                Some(f) => read_all(f).map(|d| Val::Data(Bytes(d))),
                None => Ok(Val::NoHandle),
            },
            OpT::HStat { slot } => match self.handles.get(slot) {
                Some(f) => f.metadata().map(|m| Val::Stat(statv(&m))).map_err(errno),
                None => Ok(Val::NoHandle),
            },
            OpT::HTruncate { slot, size } => match self.handles.get(slot) {
                Some(f) => unit(f.set_len(*size)),
                None => Ok(Val::NoHandle),
            },
            OpT::Close { slot } => Ok(if self.handles.remove(slot).is_some() {
                Val::Unit
            } else {
                Val::NoHandle
            }),
            OpT::UnlinkOpen {
                path,
                off,
                len,
                seed,
            } => {
                let f = self.open(path, rw.create(true))?;
                let out = vec![
                    unit(self.fs().unlink(&path.0)),
                    f.write_at(&pattern(*seed, *len), *off)
                        .map(Val::Len)
                        .map_err(errno),
                    read_all(&f).map(|d| Val::Data(Bytes(d))),
                    f.metadata().map(|m| Val::Stat(statv(&m))).map_err(errno),
                ];
                drop(f);
                Ok(Val::Seq(out))
            }
            OpT::Append { path, len, seed } => {
                let f = self.open(path, OpenOptions::new().write(true).append(true))?;
                f.write_at(&pattern(*seed, *len), 0)
                    .map(Val::Len)
                    .map_err(errno)
            }
            OpT::Bulk { .. } => Ok(Val::Seq(
                op.clone().expand().iter().map(|o| self.apply(o)).collect(),
            )),
            OpT::Remount => match self.remount() {
                Ok(()) => Ok(Val::Unit),
                Err(e) => panic!("{e}"),
            },
        }
    }

    /// Walk the whole tree through directory handles (no long paths), checking that
    /// readdir agrees with lstat on the way.
    pub fn tree(&self) -> Result<Tree, String> {
        let fs = self.fs();
        let dir_opts = OpenOptions::new().read(true).directory(true);
        let root = fs
            .open_file("/", &dir_opts)
            .map_err(|e| format!("open /: {e}"))?;
        let md = root.metadata().map_err(|e| format!("stat /: {e}"))?;
        let mut raw = RawTree::new();
        raw.insert(
            P::new("/"),
            (md.ino, 'd', md.permissions(), md.nlink, Bytes::default()),
        );
        let mut stack = vec![(b"/".to_vec(), root, md.ino)];
        while let Some((path, dir, parent)) = stack.pop() {
            let mut count = 0;
            for e in dir
                .read_dir()
                .map_err(|e| format!("readdir {:?}: {e}", P(path.clone())))?
            {
                let e = e.map_err(|e| format!("readdir {:?}: {e}", P(path.clone())))?;
                let dots = [(&b"."[..], dir.ino()), (&b".."[..], parent)];
                if let Some(&(_, want)) = dots.iter().find(|d| d.0 == e.name) {
                    if e.ino != want {
                        return Err(format!(
                            "{:?} in {:?} is inode {} (want {want})",
                            P(e.name),
                            P(path),
                            e.ino
                        ));
                    }
                    continue;
                }
                count += 1;
                let child = join(&path, &e.name);
                let cp = P(child.clone());
                let md = fs
                    .stat_at(Some(&dir), &e.name, false)
                    .map_err(|err| format!("lstat {cp:?}: {err}"))?;
                let sv = statv(&md);
                let dtype = match sv.kind {
                    'd' => libc::DT_DIR,
                    'l' => libc::DT_LNK,
                    _ => libc::DT_REG,
                };
                if e.ino != md.ino || e.file_type != dtype {
                    return Err(format!(
                        "readdir of {cp:?} says ino {} type {} but lstat says ino {} type {}",
                        e.ino, e.file_type, md.ino, dtype
                    ));
                }
                if raw.contains_key(&cp) {
                    return Err(format!("readdir returned {cp:?} twice"));
                }
                let content = match sv.kind {
                    'f' => {
                        let f = fs
                            .open_at(Some(&dir), &e.name, &OpenOptions::new().read(true))
                            .map_err(|err| format!("open {cp:?}: {err}"))?;
                        read_all(&f).map_err(|err| format!("read {cp:?}: {}", errno_name(err)))?
                    }
                    'l' => fs
                        .readlink_at(Some(&dir), &e.name)
                        .map_err(|err| format!("readlink {cp:?}: {err}"))?,
                    _ => {
                        let sub = fs
                            .open_at(Some(&dir), &e.name, &dir_opts)
                            .map_err(|err| format!("opendir {cp:?}: {err}"))?;
                        stack.push((child, sub, dir.ino()));
                        Vec::new()
                    }
                };
                raw.insert(cp, (md.ino, sv.kind, sv.perm.0, sv.nlink, Bytes(content)));
            }
            let md = dir.metadata().map_err(|e| format!("fstat: {e}"))?;
            if md.size != count {
                return Err(format!(
                    "directory {:?} has {count} entries but its size says {}",
                    P(path),
                    md.size
                ));
            }
        }
        Ok(finish_tree(raw))
    }
}

impl Default for Engine {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.handles.clear();
        self.fs = None;
        let _ = std::fs::remove_file(&self.path);
    }
}

// ---------------------------------------------------------------------------------------
// Known engine bugs
// ---------------------------------------------------------------------------------------

type BugCheck = fn(&Model, &Op) -> Option<&'static str>;

impl Model {
    /// The known engine bug `op` would hit in the current state, if any. The random test
    /// skips such operations (on both sides) so that it keeps finding other problems;
    /// each bug has an ignored regression case below, named like the bug.
    pub fn known_bug(&self, op: &Op) -> Option<&'static str> {
        const CHECKS: &[BugCheck] = &[];
        CHECKS.iter().find_map(|check| check(self, op))
    }
}

// ---------------------------------------------------------------------------------------
// Running a case
// ---------------------------------------------------------------------------------------

fn compare_trees(model: &Model, eng: &Engine, when: &str) -> Result<(), String> {
    let got = eng
        .tree()
        .map_err(|e| format!("{when}: walking EngramFS: {e}"))?;
    match diff_trees(&model.tree(), &got) {
        None => Ok(()),
        Some(d) => Err(format!("{when}: trees differ (model = Linux):\n{d}")),
    }
}

fn check_state(model: &Model, eng: &Engine, when: &str) -> Result<(), String> {
    compare_trees(model, eng, when)?;
    eng.fsck().map_err(|e| format!("{when}: {e}"))
}

/// Run `ops` against the model and EngramFS; the first disagreement, as a message that
/// lists the concrete operations run so far.
pub fn run_ops<T: ToPath>(ops: &[OpT<T>], skip_known: bool) -> Result<(), String> {
    let mut model = Model::new();
    let mut eng = Engine::new();
    let mut done: Vec<Op> = Vec::new();
    let paranoid = std::env::var_os("ENGRAM_MODEL_PARANOID").is_some();
    let fail = |done: &[Op], msg: String| {
        let list: Vec<String> = done.iter().map(|o| format!("    {o:?}")).collect();
        Err(format!(
            "{msg}\n  concrete operations run:\n{}",
            list.join("\n")
        ))
    };
    for op in ops {
        for op in op.map(|p| p.to_path(&model)).expand() {
            if skip_known && model.known_bug(&op).is_some() {
                continue;
            }
            done.push(op.clone());
            let i = done.len() - 1;
            let want = model.apply(&op);
            let got = match op {
                OpT::Remount => eng.remount().map(|()| Ok(Val::Unit)),
                _ => std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| eng.apply(&op)))
                    .map_err(|p| {
                        let msg = p
                            .downcast_ref::<String>()
                            .cloned()
                            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()));
                        format!("EngramFS panicked: {}", msg.unwrap_or_default())
                    }),
            };
            let got = match got {
                Ok(got) => got,
                Err(e) => return fail(&done, format!("op #{i} {op:?}: {e}")),
            };
            if want != got {
                let msg = format!(
                    "op #{i} {op:?}:\n  model (Linux): {}\n  EngramFS:      {}",
                    show(&want),
                    show(&got)
                );
                return fail(&done, msg);
            }
            let r = if matches!(op, OpT::Remount) {
                check_state(&model, &eng, &format!("after remount at op #{i}"))
            } else if paranoid {
                compare_trees(&model, &eng, &format!("after op #{i}"))
            } else {
                Ok(())
            };
            if let Err(e) = r {
                return fail(&done, e);
            }
        }
    }
    let r = check_state(&model, &eng, "at the end").and_then(|()| {
        eng.remount()?;
        model
            .apply(&OpT::Remount)
            .map_err(|e| format!("model remount: {e}"))?;
        check_state(&model, &eng, "after the final remount")
    });
    match r {
        Ok(()) => Ok(()),
        Err(e) => fail(&done, e),
    }
}

fn skip_known() -> bool {
    std::env::var_os("ENGRAM_MODEL_NO_SKIP").is_none()
}

// ---------------------------------------------------------------------------------------
// Generators
// ---------------------------------------------------------------------------------------

fn name() -> BoxedStrategy<Vec<u8>> {
    Union::new_weighted(vec![
        (
            30,
            prop::sample::select(vec!["a", "b", "c", "d"])
                .prop_map(|s| s.as_bytes().to_vec())
                .boxed(),
        ),
        (
            1,
            prop::sample::select(vec![250usize, 255, 256, 260])
                .prop_map(|n| vec![b'x'; n])
                .boxed(),
        ),
    ])
    .boxed()
}

fn component() -> BoxedStrategy<Vec<u8>> {
    Union::new_weighted(vec![
        (12, name()),
        (1, Just(b".".to_vec()).boxed()),
        (1, Just(b"..".to_vec()).boxed()),
    ])
    .boxed()
}

fn slashes(weights: [u32; 3]) -> BoxedStrategy<&'static str> {
    let opts = [("", weights[0]), ("/", weights[1]), ("//", weights[2])];
    Union::new_weighted(
        opts.into_iter()
            .filter(|o| o.1 > 0)
            .map(|(s, w)| (w, Just(s).boxed()))
            .collect(),
    )
    .boxed()
}

/// One to three components joined by one or two slashes, maybe with slashes after.
fn relative_path() -> BoxedStrategy<Vec<u8>> {
    let comps = |n: usize| prop::collection::vec((component(), slashes([0, 8, 1])), n).boxed();
    (
        Union::new_weighted(vec![(5, comps(1)), (4, comps(2)), (1, comps(3))]),
        slashes([10, 3, 1]),
    )
        .prop_map(|(comps, trailing)| {
            let mut p = Vec::new();
            for (i, (c, sep)) in comps.into_iter().enumerate() {
                if i > 0 {
                    p.extend_from_slice(sep.as_bytes());
                }
                p.extend_from_slice(&c);
            }
            p.extend_from_slice(trailing.as_bytes());
            p
        })
        .boxed()
}

fn literal_path() -> BoxedStrategy<P> {
    Union::new_weighted(vec![
        (
            40,
            (slashes([0, 9, 1]), relative_path())
                .prop_map(|(lead, rel)| P([lead.as_bytes(), &rel].concat()))
                .boxed(),
        ),
        (1, Just(P::new("/")).boxed()),
        // Deep paths through one name, for symlink loops and the 40-link limit.
        (
            1,
            (name(), 36usize..44, name())
                .prop_map(|(n, k, last)| {
                    let mut p = Vec::new();
                    for _ in 0..k {
                        p.push(b'/');
                        p.extend_from_slice(&n);
                    }
                    p.push(b'/');
                    p.extend_from_slice(&last);
                    P(p)
                })
                .boxed(),
        ),
    ])
    .boxed()
}

fn suffix(filter: Filter) -> BoxedStrategy<Suffix> {
    let (none, child) = match filter {
        Filter::NonDir => (24, 2),
        _ => (8, 6),
    };
    Union::new_weighted(vec![
        (none, Just(Suffix::None).boxed()),
        (child, name().prop_map(|n| Suffix::Child(P(n))).boxed()),
        (1, Just(Suffix::Slash).boxed()),
        (1, Just(Suffix::Dot).boxed()),
        (1, Just(Suffix::DotDot).boxed()),
    ])
    .boxed()
}

fn pick(filter: Filter) -> BoxedStrategy<PathGen> {
    (any::<u16>(), suffix(filter))
        .prop_map(move |(i, s)| PathGen::Pick(i, filter, s))
        .boxed()
}

fn path_with(filter: Filter) -> BoxedStrategy<PathGen> {
    Union::new_weighted(vec![
        (2, literal_path().prop_map(PathGen::Lit).boxed()),
        (2, pick(Filter::Any)),
        (
            if matches!(filter, Filter::Any) { 1 } else { 5 },
            pick(filter),
        ),
    ])
    .boxed()
}

fn path() -> BoxedStrategy<PathGen> {
    path_with(Filter::Any)
}

/// Mostly files and symlinks.
fn file_path() -> BoxedStrategy<PathGen> {
    path_with(Filter::NonDir)
}

fn link_target() -> BoxedStrategy<PathGen> {
    Union::new_weighted(vec![
        (6, path()),
        (6, relative_path().prop_map(|p| PathGen::Lit(P(p))).boxed()),
        (
            1,
            prop::sample::select(vec![".", "..", "/", "a", "a/", "./a", "../a"])
                .prop_map(|s| PathGen::Lit(P::new(s)))
                .boxed(),
        ),
        (1, Just(PathGen::Lit(P::new(""))).boxed()),
        // The longest target there is, and one byte more.
        (
            1,
            prop::sample::select(vec![PATH_MAX - 1, PATH_MAX])
                .prop_map(|n| {
                    PathGen::Lit(P([
                        "./".repeat((n - 1) / 2).as_bytes(),
                        &b"ab"[..1 + (n - 1) % 2],
                    ]
                    .concat()))
                })
                .boxed(),
        ),
    ])
    .boxed()
}

fn file_perm() -> BoxedStrategy<u32> {
    prop::sample::select(vec![0o644, 0o600, 0o755, 0o640]).boxed()
}

fn dir_perm() -> BoxedStrategy<u32> {
    prop::sample::select(vec![0o755, 0o700, 0o750, 0o1777, 0o2755, 0o4755]).boxed()
}

/// For chmod: with set-ID and sticky bits.
fn any_perm() -> BoxedStrategy<u32> {
    prop::sample::select(vec![
        0o644, 0o755, 0o700, 0o000, 0o4755, 0o2755, 0o1777, 0o7777,
    ])
    .boxed()
}

fn slot() -> BoxedStrategy<u8> {
    (0u8..2).boxed()
}

/// Where 2 MiB (512 pages) ends, the file index grows a level.
const TWO_MIB: u64 = 2 << 20;

fn offset() -> BoxedStrategy<u64> {
    Union::new_weighted(vec![
        (24, (0u64..20_000).boxed()),
        (8, (0u64..5000).boxed()),
        (1, (TWO_MIB - 10_000..TWO_MIB + 10_000).boxed()),
    ])
    .boxed()
}

fn length() -> BoxedStrategy<usize> {
    Union::new_weighted(vec![
        (3, (0usize..10_000).boxed()),
        (1, (0usize..64).boxed()),
    ])
    .boxed()
}

fn size() -> BoxedStrategy<u64> {
    Union::new_weighted(vec![
        (8, Just(0u64).boxed()),
        (32, (0u64..30_000).boxed()),
        (1, (TWO_MIB - 10_000..TWO_MIB + 10_000).boxed()),
    ])
    .boxed()
}

fn rename_flags() -> BoxedStrategy<u32> {
    Union::new_weighted(vec![
        (8, Just(0).boxed()),
        (3, Just(RENAME_NOREPLACE).boxed()),
        (3, Just(RENAME_EXCHANGE).boxed()),
        (1, Just(RENAME_NOREPLACE | RENAME_EXCHANGE).boxed()),
    ])
    .boxed()
}

pub type GenOp = OpT<PathGen>;

pub fn op() -> BoxedStrategy<GenOp> {
    let p = path;
    let f = file_path;
    let nr = || path_with(Filter::NonRoot);
    Union::new_weighted(vec![
        (
            12,
            (
                p(),
                any::<bool>(),
                any::<bool>(),
                prop::bool::weighted(0.85),
                file_perm(),
            )
                .prop_map(|(path, excl, trunc, write, perm)| OpT::Create {
                    path,
                    excl,
                    trunc,
                    write,
                    perm: Mode(perm),
                })
                .boxed(),
        ),
        (
            10,
            (f(), offset(), length(), any::<u8>())
                .prop_map(|(path, off, len, seed)| OpT::Write {
                    path,
                    off,
                    len,
                    seed,
                })
                .boxed(),
        ),
        (5, f().prop_map(|path| OpT::Read { path }).boxed()),
        (
            3,
            (f(), size())
                .prop_map(|(path, size)| OpT::Truncate { path, size })
                .boxed(),
        ),
        (
            10,
            (p(), dir_perm())
                .prop_map(|(path, perm)| OpT::Mkdir {
                    path,
                    perm: Mode(perm),
                })
                .boxed(),
        ),
        (4, nr().prop_map(|path| OpT::Rmdir { path }).boxed()),
        (5, f().prop_map(|path| OpT::Unlink { path }).boxed()),
        (
            10,
            (nr(), nr(), rename_flags())
                .prop_map(|(from, to, flags)| OpT::Rename { from, to, flags })
                .boxed(),
        ),
        (
            5,
            (f(), p())
                .prop_map(|(from, to)| OpT::Link { from, to })
                .boxed(),
        ),
        (
            7,
            (link_target(), p())
                .prop_map(|(target, path)| OpT::Symlink { target, path })
                .boxed(),
        ),
        (2, p().prop_map(|path| OpT::Readlink { path }).boxed()),
        (3, p().prop_map(|path| OpT::Stat { path }).boxed()),
        (3, p().prop_map(|path| OpT::Lstat { path }).boxed()),
        (
            1,
            (p(), any_perm())
                .prop_map(|(path, perm)| OpT::Chmod {
                    path,
                    perm: Mode(perm),
                })
                .boxed(),
        ),
        (3, p().prop_map(|path| OpT::ReadDir { path }).boxed()),
        (
            6,
            (slot(), f(), prop::bool::weighted(0.7))
                .prop_map(|(slot, path, create)| OpT::Open { slot, path, create })
                .boxed(),
        ),
        (
            4,
            (slot(), offset(), length(), any::<u8>())
                .prop_map(|(slot, off, len, seed)| OpT::HWrite {
                    slot,
                    off,
                    len,
                    seed,
                })
                .boxed(),
        ),
        (2, slot().prop_map(|slot| OpT::HRead { slot }).boxed()),
        (1, slot().prop_map(|slot| OpT::HStat { slot }).boxed()),
        (
            1,
            (slot(), size())
                .prop_map(|(slot, size)| OpT::HTruncate { slot, size })
                .boxed(),
        ),
        (1, slot().prop_map(|slot| OpT::Close { slot }).boxed()),
        (
            2,
            (f(), offset(), length(), any::<u8>())
                .prop_map(|(path, off, len, seed)| OpT::UnlinkOpen {
                    path,
                    off,
                    len,
                    seed,
                })
                .boxed(),
        ),
        (
            3,
            (f(), length(), any::<u8>())
                .prop_map(|(path, len, seed)| OpT::Append { path, len, seed })
                .boxed(),
        ),
        (
            1,
            (
                p(),
                1u16..200,
                prop::bool::weighted(0.3),
                prop::bool::weighted(0.3),
            )
                .prop_map(|(dir, n, long, remove)| OpT::Bulk {
                    dir,
                    n,
                    long,
                    remove,
                })
                .boxed(),
        ),
        (1, Just(OpT::Remount).boxed()),
    ])
    .boxed()
}

/// Operations per case: up to 60, or `ENGRAM_MODEL_MAX_OPS`.
fn max_ops() -> usize {
    std::env::var("ENGRAM_MODEL_MAX_OPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(60)
        .max(1)
}

fn config() -> ProptestConfig {
    let mut c = ProptestConfig {
        failure_persistence: None,
        ..ProptestConfig::default()
    };
    if std::env::var_os("PROPTEST_CASES").is_none() {
        c.cases = 256;
    }
    c
}

proptest! {
    #![proptest_config(config())]

    #[test]
        fn engram_matches_linux_model(ops in prop::collection::vec(op(), 1..=max_ops())) {
        run_ops(&ops, skip_known()).map_err(TestCaseError::fail)?;
    }
}

// ---------------------------------------------------------------------------------------
// Deterministic regression cases
// ---------------------------------------------------------------------------------------

pub fn create(path: &str) -> Op {
    OpT::Create {
        path: P::new(path),
        excl: false,
        trunc: false,
        write: true,
        perm: Mode(0o644),
    }
}

pub fn create_excl(path: &str) -> Op {
    OpT::Create {
        path: P::new(path),
        excl: true,
        trunc: false,
        write: true,
        perm: Mode(0o644),
    }
}

pub fn mkdir(path: &str) -> Op {
    OpT::Mkdir {
        path: P::new(path),
        perm: Mode(0o755),
    }
}

pub fn symlink(target: &str, path: &str) -> Op {
    OpT::Symlink {
        target: P::new(target),
        path: P::new(path),
    }
}

pub fn link(from: &str, to: &str) -> Op {
    OpT::Link {
        from: P::new(from),
        to: P::new(to),
    }
}

pub fn rename(from: &str, to: &str, flags: u32) -> Op {
    OpT::Rename {
        from: P::new(from),
        to: P::new(to),
        flags,
    }
}

pub fn stat(path: &str) -> Op {
    OpT::Stat { path: P::new(path) }
}

pub fn write(path: &str, off: u64, len: usize) -> Op {
    OpT::Write {
        path: P::new(path),
        off,
        len,
        seed: 7,
    }
}

/// A named sequence of operations; `bug` names the engine bug it shows, if it does.
pub struct Case {
    pub name: &'static str,
    pub bug: Option<&'static str>,
    pub ops: Vec<Op>,
}

/// Every regression case (the Linux check harness runs these against the kernel too).
pub fn regression_cases() -> Vec<Case> {
    // "/l" -> "." so that every "/l" component costs one link.
    let deep = |n: usize| "/l".repeat(n) + "/f";
    vec![
        Case {
            name: "symlink_limit_is_40",
            bug: None,
            ops: vec![
                symlink(".", "/l"),
                create("/f"),
                stat(&deep(40)),
                stat(&deep(41)),
                create(&deep(40)),
                create(&deep(41)),
            ],
        },
        Case {
            name: "bug_new_name_with_slash_exists",
            bug: Some(
                "symlink and link onto an existing name followed by a slash give ENOENT, not EEXIST",
            ),
            ops: vec![
                create("/f"),
                mkdir("/d"),
                symlink("x", "/f/"),
                symlink("x", "/d/"),
                link("/f", "/d/"),
            ],
        },
        Case {
            name: "bug_create_excl_dot",
            bug: Some("open(\"/.\", O_CREAT|O_EXCL) gives EISDIR, not EEXIST"),
            ops: vec![
                mkdir("/d"),
                create_excl("/."),
                create_excl("/d/.."),
                create_excl("/"),
            ],
        },
        Case {
            name: "bug_link_dir_onto_existing",
            bug: Some(
                "link(dir, existing) gives EPERM, not EEXIST (Linux looks at the new name first)",
            ),
            ops: vec![mkdir("/d"), create("/f"), link("/d", "/f"), link("/", "/d")],
        },
        Case {
            name: "bug_rename_noreplace_onto_dot",
            bug: Some("rename(f, \"/\", RENAME_NOREPLACE) gives EBUSY, not EEXIST"),
            ops: vec![
                create("/f"),
                mkdir("/d"),
                rename("/f", "/", RENAME_NOREPLACE),
                rename("/f", "/d/.", RENAME_NOREPLACE),
            ],
        },
        Case {
            name: "bug_rename_bad_flags_checked_late",
            bug: Some(
                "rename with RENAME_NOREPLACE|RENAME_EXCHANGE fails on the paths before EINVAL",
            ),
            ops: vec![
                rename("/missing/x", "/y", RENAME_NOREPLACE | RENAME_EXCHANGE),
                rename("/", "/y", RENAME_NOREPLACE | RENAME_EXCHANGE),
            ],
        },
        Case {
            name: "bug_rename_slash_checked_early",
            bug: Some(
                "rename checks \"a source with slashes must be a directory\" before the target: \
                 rename(f, \"f/\", NOREPLACE) gives ENOTDIR, not EEXIST; rename(f, \"d/\", EXCHANGE) \
                 fails with ENOTDIR but Linux exchanges; rename(d, \"f/\", EXCHANGE) exchanges but Linux \
                 says ENOTDIR",
            ),
            ops: vec![
                create("/f"),
                mkdir("/d"),
                rename("/f", "/f/", RENAME_NOREPLACE),
                rename("/f/", "/missing", RENAME_EXCHANGE),
                rename("/d", "/f/", RENAME_EXCHANGE),
                rename("/f", "/d/", RENAME_EXCHANGE),
            ],
        },
        Case {
            name: "bug_creat_through_symlink",
            bug: Some(
                "open(O_CREAT) through a symlink: a dangling symlink to \"a/b/\" creates the regular \
                 file a/b (Linux: EISDIR); a symlink to a dangling symlink opens the second symlink \
                 itself (Linux creates the final target); a symlink \"c\" -> \"c/\" gives ELOOP \
                 (Linux: EISDIR); O_CREAT|O_RDONLY through a symlink to a directory succeeds \
                 (Linux: EISDIR)",
            ),
            ops: vec![
                mkdir("/a"),
                symlink("/a/b/", "/c"),
                create("/c"),
                stat("/a/b"),
                symlink("x", "/s"),
                symlink("y", "/x"),
                create("/s"),
                stat("/y"),
                write("/s", 0, 10),
                symlink("l/", "/l"),
                create("/l"),
                symlink("/a", "/sa"),
                OpT::Create {
                    path: P::new("/sa"),
                    excl: false,
                    trunc: false,
                    write: false,
                    perm: Mode(0o644),
                },
            ],
        },
        Case {
            name: "bug_creat_symlink_chain_counts_all_links",
            bug: Some(
                "open(O_CREAT) through a symlink counted the links of the path, of the chain and \
                 inside each target separately (40 each), where Linux's limit of 40 is for the \
                 whole resolution: a link to \"/b\"x40 with \"/b\" -> \"/\" gave EISDIR \
                 (Linux: ELOOP), and \"/l\"x40 + \"/s\" created s's target",
            ),
            ops: vec![
                symlink("/", "/b"),
                symlink(&"/b".repeat(40), "/a40"),
                symlink(&"/b".repeat(39), "/a39"),
                create("/a40"),
                create("/a39"),
                symlink(".", "/l"),
                symlink("t", "/s"),
                create(&("/l".repeat(40) + "/s")),
                stat("/t"),
                create(&("/l".repeat(39) + "/s")),
                stat("/t"),
            ],
        },
        Case {
            name: "bug_rename_file_onto_ancestor",
            bug: Some(
                "rename(\"/a/f\", \"/a\") gives EISDIR (Linux: ENOTEMPTY, the target is an ancestor)",
            ),
            ops: vec![mkdir("/a"), create("/a/f"), rename("/a/f", "/a", 0)],
        },
        Case {
            name: "bug_long_last_name_checked_early",
            bug: Some(
                "a last component longer than 255 bytes fails with ENAMETOOLONG before the other \
                 checks: rename(\"/<256 bytes>\", \"/missing/x\") (Linux: ENOENT), \
                 open(\"/<256 bytes>/\", O_CREAT) (Linux: EISDIR)",
            ),
            ops: vec![
                rename(&format!("/{}", "x".repeat(256)), "/missing/x", 0),
                rename("/missing", &format!("/{}", "x".repeat(256)), 0),
                create(&format!("/{}/", "x".repeat(256))),
            ],
        },
        Case {
            name: "bug_symlink_target_checked_late",
            bug: Some(
                "the target of symlink() is checked after the link path: symlink(\"\", \"/\") gives \
                 EEXIST (Linux: ENOENT), symlink(<4096 bytes>, \"/missing/x\") gives ENOENT \
                 (Linux: ENAMETOOLONG)",
            ),
            ops: vec![
                symlink("", "/"),
                symlink(&"y".repeat(PATH_MAX), "/missing/x"),
            ],
        },
        Case {
            // rmdir of "..", "." and "/" (once an engine bug: errno from the last byte).
            name: "rmdir_dot_errnos",
            bug: None,
            ops: vec![
                mkdir("/a"),
                OpT::Rmdir {
                    path: P::new("/a/.."),
                },
                OpT::Rmdir {
                    path: P::new("/a/./"),
                },
                OpT::Rmdir {
                    path: P::new("/.."),
                },
                OpT::Rmdir { path: P::new("//") },
            ],
        },
        Case {
            // Once an engine bug: open("/d", O_CREAT|O_RDONLY) of a directory succeeded.
            name: "creat_rdonly_dir_is_eisdir",
            bug: None,
            ops: vec![
                mkdir("/d"),
                OpT::Create {
                    path: P::new("/d"),
                    excl: false,
                    trunc: false,
                    write: false,
                    perm: Mode(0o644),
                },
            ],
        },
        Case {
            name: "bug_symlink_path_concat_too_long",
            bug: Some(
                "a path through a symlink fails with ENAMETOOLONG when the target plus the rest of \
                 the path exceed PATH_MAX, though both are shorter (Linux resolves it)",
            ),
            ops: vec![
                mkdir("/d"),
                create("/d/f"),
                symlink(&("./".repeat(2000) + "d"), "/s"),
                stat(&("/s/".to_string() + &"./".repeat(100) + "f")),
                symlink(&format!("/l/{}", "x".repeat(250)), "/l"),
                stat("/l/x"),
            ],
        },
        Case {
            // Once an engine bug: zero_range_beyond_eof zeroed page 0 of a one-page file with
            // a length of -1 (a panic) when the file grew from 4096 bytes or more.
            name: "grow_one_page_file",
            bug: None,
            ops: vec![
                create("/f"),
                OpT::Truncate {
                    path: P::new("/f"),
                    size: 4097,
                },
                write("/f", 0, 1),
                write("/f", 4098, 1),
                OpT::Read { path: P::new("/f") },
                create("/g"),
                write("/g", 0, 1),
                OpT::Truncate {
                    path: P::new("/g"),
                    size: 5000,
                },
                OpT::Truncate {
                    path: P::new("/g"),
                    size: 9000,
                },
            ],
        },
        Case {
            name: "bug_mkdir_keeps_setid_bits",
            bug: Some(
                "mkdir(\"/d\", 0o2755) makes a directory with mode 0o2755 (Linux drops S_ISUID and \
                 S_ISGID from mkdir's mode: 0o755)",
            ),
            ops: vec![
                OpT::Mkdir {
                    path: P::new("/d"),
                    perm: Mode(0o2755),
                },
                OpT::Mkdir {
                    path: P::new("/e"),
                    perm: Mode(0o4755),
                },
                stat("/d"),
                stat("/e"),
            ],
        },
        Case {
            name: "setgid_directory_is_inherited",
            bug: None,
            ops: vec![
                mkdir("/d"),
                OpT::Chmod {
                    path: P::new("/d"),
                    perm: Mode(0o2755),
                },
                mkdir("/d/e"),
                create("/d/f"),
                stat("/d/e"),
                stat("/d/f"),
            ],
        },
    ]
}

fn run_case(name: &str) {
    let case = regression_cases()
        .into_iter()
        .find(|c| c.name == name)
        .expect("no such case");
    if let Err(e) = run_ops(&case.ops, false) {
        panic!(
            "{}{e}",
            case.bug
                .map(|b| format!("engine bug: {b}\n"))
                .unwrap_or_default()
        );
    }
}

#[test]
fn bug_creat_symlink_chain_counts_all_links() {
    run_case("bug_creat_symlink_chain_counts_all_links");
}

#[test]
fn symlink_limit_is_40() {
    run_case("symlink_limit_is_40");
}

#[test]
fn bug_new_name_with_slash_exists() {
    run_case("bug_new_name_with_slash_exists");
}

#[test]
fn bug_create_excl_dot() {
    run_case("bug_create_excl_dot");
}

#[test]
fn bug_link_dir_onto_existing() {
    run_case("bug_link_dir_onto_existing");
}

#[test]
fn bug_rename_noreplace_onto_dot() {
    run_case("bug_rename_noreplace_onto_dot");
}

#[test]
fn bug_rename_bad_flags_checked_late() {
    run_case("bug_rename_bad_flags_checked_late");
}

#[test]
fn bug_rename_slash_checked_early() {
    run_case("bug_rename_slash_checked_early");
}

#[test]
fn bug_creat_through_symlink() {
    run_case("bug_creat_through_symlink");
}

#[test]
fn bug_rename_file_onto_ancestor() {
    run_case("bug_rename_file_onto_ancestor");
}

#[test]
fn bug_long_last_name_checked_early() {
    run_case("bug_long_last_name_checked_early");
}

#[test]
fn bug_symlink_target_checked_late() {
    run_case("bug_symlink_target_checked_late");
}

#[test]
fn rmdir_dot_errnos() {
    run_case("rmdir_dot_errnos");
}

#[test]
fn creat_rdonly_dir_is_eisdir() {
    run_case("creat_rdonly_dir_is_eisdir");
}

#[test]
fn bug_symlink_path_concat_too_long() {
    run_case("bug_symlink_path_concat_too_long");
}

#[test]
fn grow_one_page_file() {
    run_case("grow_one_page_file");
}

#[test]
fn bug_mkdir_keeps_setid_bits() {
    run_case("bug_mkdir_keeps_setid_bits");
}

#[test]
fn setgid_directory_is_inherited() {
    run_case("setgid_directory_is_inherited");
}

/// Every case has its test.
#[test]
fn every_case_has_a_test() {
    let src = include_str!("model.rs");
    for c in regression_cases() {
        assert!(
            src.contains(&format!("fn {}()", c.name)),
            "regression case {} has no #[test]",
            c.name
        );
        assert_eq!(
            c.bug.is_some(),
            c.name.starts_with("bug_"),
            "{}: name bug cases bug_*",
            c.name
        );
    }
}

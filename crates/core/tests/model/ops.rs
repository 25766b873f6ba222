//! The operations a case runs, and generated paths that become concrete against the model.

use super::posix_model::{Model, join};
use super::values::{Mode, P};
use std::fmt;

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
    /// fallocate's hole punch (`how` 0), or zeroing of the range with (2) or without (1)
    /// `FALLOC_FL_KEEP_SIZE`.
    HClear {
        slot: u8,
        off: u64,
        len: u64,
        how: u8,
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
            HClear {
                slot,
                off,
                len,
                how,
            } => HClear {
                slot: *slot,
                off: *off,
                len: *len,
                how: *how,
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

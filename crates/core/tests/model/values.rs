//! Printable values: paths, contents, modes, stat results and outcomes, and errno names.

use super::Errno;
use std::fmt;

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

//! Opening pools with clear errors, `POOL:/path` arguments, and small path helpers.

use crate::error::{CliError, Result, describe, describe_io};
use engram_core::{Fs, Options};
use std::borrow::Cow;
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

/// Why a pool could not be opened.
pub enum OpenError {
    /// The file exists but does not hold a usable EngramFS pool (foreign, truncated, corrupt).
    Invalid(String),
    /// Anything else: missing file, no permission, in use by another process, …
    Other(String),
}

impl From<OpenError> for CliError {
    fn from(e: OpenError) -> CliError {
        match e {
            OpenError::Invalid(m) | OpenError::Other(m) => CliError::new(m),
        }
    }
}

/// Open a pool, telling a foreign or damaged file apart from other failures.
pub fn try_open(path: &Path) -> std::result::Result<Fs, OpenError> {
    let shown = path.display();
    let meta = std::fs::metadata(path)
        .map_err(|e| OpenError::Other(format!("cannot open pool {shown}: {}", describe_io(&e))))?;
    if meta.is_dir() {
        return Err(OpenError::Other(format!(
            "{shown} is a directory, not an EngramFS pool"
        )));
    }
    if meta.is_file() {
        let len = meta.len();
        if len == 0 {
            return Err(OpenError::Invalid(format!(
                "{shown} is empty: not an EngramFS pool"
            )));
        }
        if !len.is_multiple_of(4096) {
            return Err(OpenError::Invalid(format!(
                "{shown} is {len} bytes, not a multiple of 4096: not an EngramFS pool, or a truncated one"
            )));
        }
    }
    Fs::open(path, &Options::default()).map_err(|e| {
        let mut msg = describe(&e);
        if !msg.contains(&*shown.to_string()) {
            msg = format!("{shown}: {msg}");
        }
        if e.errno() == libc::EUCLEAN {
            OpenError::Invalid(msg)
        } else {
            OpenError::Other(msg)
        }
    })
}

/// Open a pool or fail with a message that says why.
pub fn open(path: &Path) -> Result<Fs> {
    Ok(try_open(path)?)
}

/// A `POOL:/path` argument: a pool file and an absolute path inside it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolPath {
    pub pool: PathBuf,
    pub path: Vec<u8>,
}

impl PoolPath {
    /// Split at the first `:/`; None if the argument has no non-empty pool part before it.
    pub fn parse(arg: &OsStr) -> Option<PoolPath> {
        let b = arg.as_bytes();
        let at = b.windows(2).position(|w| w == b":/").filter(|&i| i > 0)?;
        Some(PoolPath {
            pool: PathBuf::from(OsString::from_vec(b[..at].to_vec())),
            path: b[at + 1..].to_vec(),
        })
    }

    /// The same pool, another path inside it.
    pub fn with_path(&self, path: Vec<u8>) -> PoolPath {
        PoolPath {
            pool: self.pool.clone(),
            path,
        }
    }
}

impl std::fmt::Display for PoolPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.pool.display(), show(&self.path))
    }
}

/// A pool path for messages.
pub fn show(p: &[u8]) -> Cow<'_, str> {
    String::from_utf8_lossy(p)
}

/// `dir/name` (no doubled slash after the root or a trailing slash).
pub fn join(dir: &[u8], name: &[u8]) -> Vec<u8> {
    let mut out = dir.to_vec();
    while out.len() > 1 && out.ends_with(b"/") {
        out.pop();
    }
    if !out.ends_with(b"/") {
        out.push(b'/');
    }
    out.extend_from_slice(name);
    out
}

/// The last component (ignoring trailing slashes); empty for the root.
pub fn basename(p: &[u8]) -> &[u8] {
    let end = p.iter().rposition(|&c| c != b'/').map_or(0, |i| i + 1);
    let trimmed = &p[..end];
    let start = trimmed
        .iter()
        .rposition(|&c| c == b'/')
        .map_or(0, |i| i + 1);
    &trimmed[start..]
}

/// `ls -l` style type and permission letters, e.g. `drwxr-xr-x`.
pub fn mode_string(mode: u32) -> String {
    let kind = match mode & libc::S_IFMT {
        libc::S_IFDIR => 'd',
        libc::S_IFLNK => 'l',
        libc::S_IFREG => '-',
        libc::S_IFCHR => 'c',
        libc::S_IFBLK => 'b',
        libc::S_IFIFO => 'p',
        libc::S_IFSOCK => 's',
        _ => '?',
    };
    let mut s = String::with_capacity(10);
    s.push(kind);
    // (shift of the rwx triple, special bit, letter when x is also set, letter when not)
    let triples = [
        (6, libc::S_ISUID, 's', 'S'),
        (3, libc::S_ISGID, 's', 'S'),
        (0, libc::S_ISVTX, 't', 'T'),
    ];
    for (shift, special, with_x, without_x) in triples {
        let bits = (mode >> shift) & 7;
        s.push(if bits & 4 != 0 { 'r' } else { '-' });
        s.push(if bits & 2 != 0 { 'w' } else { '-' });
        let x = bits & 1 != 0;
        s.push(match (mode & special != 0, x) {
            (true, true) => with_x,
            (true, false) => without_x,
            (false, true) => 'x',
            (false, false) => '-',
        });
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_pool_paths() {
        let p = PoolPath::parse(OsStr::new("/dev/shm/x.pool:/a/b")).unwrap();
        assert_eq!(p.pool, PathBuf::from("/dev/shm/x.pool"));
        assert_eq!(p.path, b"/a/b");
        assert_eq!(p.to_string(), "/dev/shm/x.pool:/a/b");
        assert_eq!(PoolPath::parse(OsStr::new("p:/")).unwrap().path, b"/");
        assert!(PoolPath::parse(OsStr::new("/local/path")).is_none());
        assert!(PoolPath::parse(OsStr::new(":/x")).is_none());
        assert!(PoolPath::parse(OsStr::new("pool:rel")).is_none());
    }

    #[test]
    fn path_helpers() {
        assert_eq!(join(b"/", b"a"), b"/a");
        assert_eq!(join(b"/a/", b"b"), b"/a/b");
        assert_eq!(join(b"/a", b"b"), b"/a/b");
        assert_eq!(basename(b"/a/b"), b"b");
        assert_eq!(basename(b"/a/b//"), b"b");
        assert_eq!(basename(b"b"), b"b");
        assert_eq!(basename(b"/"), b"");
    }

    #[test]
    fn mode_strings() {
        assert_eq!(mode_string(libc::S_IFDIR | 0o755), "drwxr-xr-x");
        assert_eq!(mode_string(libc::S_IFREG | 0o644), "-rw-r--r--");
        assert_eq!(mode_string(libc::S_IFLNK | 0o777), "lrwxrwxrwx");
        assert_eq!(mode_string(libc::S_IFREG | 0o4754), "-rwsr-xr--");
        assert_eq!(mode_string(libc::S_IFDIR | 0o1777), "drwxrwxrwt");
        assert_eq!(mode_string(libc::S_IFREG | 0o2640), "-rw-r-S---");
    }
}

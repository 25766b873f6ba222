//! Which side a path belongs to: the mount prefix (`ENGRAM_MOUNT`, default `/mnt/engram`)
//! routes to EngramFS, everything else to libc. Deciding that allocates nothing and takes no
//! lock unless the path is ours (or the current directory is a virtual one inside the pool).

use crate::util::{Res, cbytes};
use crate::{realcwd, table};
use engram_core::Handle;
use libc::{c_char, c_int};
use std::borrow::Cow;
use std::path::PathBuf;
use std::sync::OnceLock;

pub use engram_run::{DEFAULT_MOUNT, DEFAULT_POOL};

pub struct Config {
    /// The mount prefix, absolute, without a trailing slash.
    pub mount: Vec<u8>,
    /// `ENGRAM_SOCKET`: the daemon to connect to (else the pool is opened in-process).
    pub socket: Option<PathBuf>,
    /// `ENGRAM_POOL`: the pool to open in-process.
    pub pool: PathBuf,
}

static CONFIG: OnceLock<Config> = OnceLock::new();

fn env(name: &[u8]) -> Option<Vec<u8>> {
    // SAFETY: getenv with a NUL-terminated name; the value is copied at once.
    let p = unsafe { libc::getenv(name.as_ptr() as *const c_char) };
    if p.is_null() {
        return None;
    }
    // SAFETY: getenv returned a valid C string.
    let v = unsafe { cbytes(p) }.to_vec();
    (!v.is_empty()).then_some(v)
}

/// The mount prefix: the configuration's once the shim's constructor has read it. Before
/// that (another library's constructor, or a program's own malloc initialising itself,
/// which calls `readlink` before any constructor runs) it is read from the environment
/// without allocating: an allocation there would re-enter that malloc (jemalloc in rustc
/// then waited on its own lock for ever).
#[inline(always)]
pub(crate) fn mount_prefix() -> Option<&'static [u8]> {
    match CONFIG.get() {
        Some(c) => Some(&c.mount[..]),
        None => mount_from_env(),
    }
}

/// ENGRAM_MOUNT (unset or empty: the default) without a trailing slash, allocation-free
/// (getenv allocates nothing); None if it is not a usable prefix (`config` then says so
/// and uses the default).
#[cold]
fn mount_from_env() -> Option<&'static [u8]> {
    // SAFETY: getenv with a NUL-terminated name; the value stays valid while the
    // environment is not changed, and is used only during this call's caller.
    let p = unsafe { libc::getenv(c"ENGRAM_MOUNT".as_ptr()) };
    let mut m: &'static [u8] = if p.is_null() {
        DEFAULT_MOUNT.as_ref()
    } else {
        // SAFETY: getenv returned a valid C string.
        unsafe { std::ffi::CStr::from_ptr(p) }.to_bytes()
    };
    if m.is_empty() {
        m = DEFAULT_MOUNT.as_ref();
    }
    while m.len() > 1 && m.ends_with(b"/") {
        m = &m[..m.len() - 1];
    }
    (m.starts_with(b"/") && m != b"/").then_some(m)
}

/// Whether the shim's constructor has read the configuration (before it, the shim's own
/// work must not allocate).
pub fn configured() -> bool {
    CONFIG.get().is_some()
}

pub fn config() -> &'static Config {
    CONFIG.get_or_init(|| {
        use std::os::unix::ffi::OsStringExt;
        let mount = match mount_from_env() {
            Some(m) => m.to_vec(),
            None => {
                crate::util::warn(
                    "ENGRAM_MOUNT must be an absolute directory other than /; using /mnt/engram",
                );
                DEFAULT_MOUNT.into()
            }
        };
        let path = |v: Vec<u8>| PathBuf::from(std::ffi::OsString::from_vec(v));
        Config {
            mount,
            socket: env(b"ENGRAM_SOCKET\0").map(path),
            pool: path(env(b"ENGRAM_POOL\0").unwrap_or_else(|| DEFAULT_POOL.into())),
        }
    })
}

/// The components of a path, skipping empty ones and ".", with the index where each ends.
fn next_comp(p: &[u8], mut i: usize) -> Option<(usize, usize)> {
    loop {
        while i < p.len() && p[i] == b'/' {
            i += 1;
        }
        if i >= p.len() {
            return None;
        }
        let start = i;
        while i < p.len() && p[i] != b'/' {
            i += 1;
        }
        if &p[start..i] != b"." {
            return Some((start, i));
        }
    }
}

/// If absolute `path` lies under the mount prefix (component by component), the rest of it
/// (empty, or starting with '/').
#[inline(always)]
pub fn strip_mount(path: &[u8]) -> Option<&[u8]> {
    let m = mount_prefix()?;
    // The usual spelling: the prefix's very bytes (absolute, never "/", no trailing slash:
    // see `config`), ending at a component boundary.
    if path.len() >= m.len() && same(&path[..m.len()], m) {
        let rest = &path[m.len()..];
        if rest.first().is_none_or(|&b| b == b'/') {
            return Some(rest);
        }
    }
    strip_by_component(m, path)
}

pub(crate) fn strip_prefix<'a>(prefix: &[u8], path: &'a [u8]) -> Option<&'a [u8]> {
    if path.first() != Some(&b'/') {
        return None;
    }
    // The usual spelling: the prefix's very bytes, ending at a component boundary.
    if !prefix.ends_with(b"/") && path.len() >= prefix.len() && same(&path[..prefix.len()], prefix)
    {
        let rest = &path[prefix.len()..];
        if rest.is_empty() || rest[0] == b'/' {
            return Some(rest);
        }
    }
    strip_by_component(prefix, path)
}

/// `strip_prefix` for other spellings ("//mnt/./engram/f"), kept out of line.
#[inline(never)]
fn strip_by_component<'a>(prefix: &[u8], path: &'a [u8]) -> Option<&'a [u8]> {
    if path.first() != Some(&b'/') {
        return None;
    }
    let (mut i, mut j) = (0, 0);
    while let Some((ms, me)) = next_comp(prefix, i) {
        let (ps, pe) = next_comp(path, j)?;
        if prefix[ms..me] != path[ps..pe] {
            return None;
        }
        i = me;
        j = pe;
    }
    Some(&path[j..])
}

/// Whether two slices of equal length hold the same bytes: compared a word at a time, inline
/// (a call to memcmp costs more than the comparison of a short prefix).
#[inline]
fn same(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    debug_assert_eq!(n, b.len());
    let word = |s: &[u8], i: usize| u64::from_ne_bytes(s[i..i + 8].try_into().expect("8 bytes"));
    if n < 8 {
        return a.iter().zip(b).all(|(x, y)| x == y);
    }
    let mut i = 0;
    while i + 8 < n {
        if word(a, i) != word(b, i) {
            return false;
        }
        i += 8;
    }
    // The last (possibly overlapping) word.
    word(a, n - 8) == word(b, n - 8)
}

/// Join and normalise lexically ("." and ".." removed) into `out`; returns the length.
fn lexical(parts: &[&[u8]], out: &mut [u8]) -> Option<usize> {
    let mut len = 0;
    for part in parts {
        let mut i = 0;
        while let Some((s, e)) = next_comp(part, i) {
            i = e;
            let c = &part[s..e];
            if c == b".." {
                while len > 0 && out[len - 1] != b'/' {
                    len -= 1;
                }
                len = len.saturating_sub(1);
                continue;
            }
            if len + 1 + c.len() > out.len() {
                return None;
            }
            out[len] = b'/';
            out[len + 1..len + 1 + c.len()].copy_from_slice(c);
            len += 1 + c.len();
        }
    }
    if len == 0 {
        out[0] = b'/';
        len = 1;
    }
    Some(len)
}

/// `path` joined to the parent directory of the mount prefix, normalised (where a ".."
/// above the pool's root leads).
pub fn outside(rest: &[u8]) -> Vec<u8> {
    let mut buf = vec![0u8; config().mount.len() + rest.len() + 8];
    let n = lexical(&[&config().mount, b"..", rest], &mut buf).unwrap_or(1);
    buf.truncate(n);
    buf
}

/// Whether `p` has a ".." component.
pub(crate) fn has_dotdot(p: &[u8]) -> bool {
    p.split(|&b| b == b'/').any(|c| c == b"..")
}

// ------------------------------------------------------------------ routing

/// Where a path goes.
pub enum Route<'a> {
    /// To libc, unchanged.
    Pass,
    /// To EngramFS: a path from the pool's root, not yet resolved (may hold "..", symlinks);
    /// borrowed from the caller's absolute path when it can be.
    Ours(Cow<'a, [u8]>),
    /// To EngramFS: a relative path (not empty) from the directory open as descriptor `fd`
    /// (AT_FDCWD: the virtual current directory), whose handle is `dir`. The pool walks it
    /// from that directory; only where the walk would leave the pool is it joined to the
    /// directory's path (`joined`).
    At {
        dir: table::DirRef,
        fd: c_int,
        rel: &'a [u8],
    },
    /// To EngramFS: the description open as descriptor `fd`, named by a path of the
    /// kernel's (`orig`: `/dev/stdout`, `/proc/self/fd/N`, `magicfd`). Calls that follow
    /// it act on the description's file; the others on the real link.
    Desc {
        fd: c_int,
        orig: &'a [u8],
        via: crate::magicfd::Via,
    },
}

impl<'a> Route<'a> {
    /// Where a pool walk of this route starts (None: the root) and the path it walks.
    pub fn start(&self) -> Option<(Option<Handle>, &[u8])> {
        match self {
            Route::Pass => None,
            Route::Ours(raw) => Some((None, raw)),
            Route::At { dir, rel, .. } => Some((Some(dir.handle()), rel)),
            // No walk reaches a description by a path: `ops::side` serves it.
            Route::Desc { .. } => None,
        }
    }

    /// This route with a path from the pool's root: a relative one is joined to the path
    /// its directory was opened by (EBADF if the descriptor was closed meanwhile), or from
    /// a removed directory to the path of the first one on the way up that has a name
    /// (`removed::joined`).
    pub fn joined(self) -> Res<Route<'a>> {
        match self {
            Route::At { dir, fd, rel } => Ok(Route::Ours(
                match crate::removed::joined(dir.handle(), rel)? {
                    Some(p) => p,
                    None => joined_path(fd, dir, rel, true)?,
                }
                .into(),
            )),
            r => Ok(r),
        }
    }
}

/// The path of directory `fd` joined with `rel`: the path it was opened by, or for AT_FDCWD
/// the path of `dir`, the current directory the route was made from, even if another thread
/// has changed directory since. `checked`: as it is now (a walk that leaves the pool must
/// start from where it really is); else as last known, the name a new descriptor keeps, a
/// hint as every descriptor's path is (checking it would walk the whole path again on every
/// relative open: 55 ns of 290).
pub fn joined_path(fd: c_int, dir: table::DirRef, rel: &[u8], checked: bool) -> Res<Vec<u8>> {
    if fd == libc::AT_FDCWD {
        let cwd = crate::vcwd::path_of_dir(dir.handle(), checked)?;
        return Ok(join(&cwd, rel));
    }
    table::path_joined(fd, rel).ok_or(libc::EBADF)
}

fn join(base: &[u8], rel: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(base.len() + rel.len() + 1);
    v.extend_from_slice(base);
    if !v.ends_with(b"/") {
        v.push(b'/');
    }
    v.extend_from_slice(rel);
    v
}

/// Route `path` relative to `dirfd` (AT_FDCWD or a descriptor). The caller handles an empty
/// path with AT_EMPTY_PATH itself; here an empty path is ENOENT on our side.
///
/// # Safety
/// `path` is null or a valid C string.
#[inline(always)]
pub unsafe fn route<'a>(dirfd: c_int, path: *const c_char) -> Res<Route<'a>> {
    if path.is_null() {
        return Ok(Route::Pass);
    }
    // SAFETY: the caller passes a valid C string.
    let p = unsafe { cbytes(path) };
    route_bytes(dirfd, p)
}

/// Whether `path` (from the current directory) is one the shim serves, not libc: for the
/// calls that replace what glibc does with its own internal calls (mkstemp, nftw, exec).
///
/// # Safety
/// `path` is null or a valid C string.
pub unsafe fn is_ours(path: *const c_char) -> bool {
    // SAFETY: the caller's C string (null routes to libc).
    !matches!(unsafe { route(libc::AT_FDCWD, path) }, Ok(Route::Pass))
}

#[inline(always)]
pub fn route_bytes(dirfd: c_int, p: &[u8]) -> Res<Route<'_>> {
    let r = route_any_length(dirfd, p)?;
    if p.len() >= libc::PATH_MAX as usize && !matches!(r, Route::Pass) {
        return too_long(r);
    }
    Ok(r)
}

thread_local! {
    /// Set while the shim's own code calls its entry points with paths it joined itself
    /// (`with_joined_paths`).
    static JOINED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Run `f`, whose calls into the shim's entry points pass paths the shim joined itself
/// (its nftw walker's: a directory's path and a name), exempt from PATH_MAX.
pub fn with_joined_paths<T>(f: impl FnOnce() -> T) -> T {
    /// Puts the flag back however `f` ends.
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            let _ = JOINED.try_with(|j| j.set(self.0));
        }
    }
    let _restore = Restore(JOINED.with(|j| j.replace(true)));
    f()
}

/// A route to the pool for a path of PATH_MAX bytes or more: refused, as the kernel refuses
/// such a string from a program (paths the shim joins from one may be longer: the pool
/// walks them). Routes to libc are left to libc, which may resolve such a string piece by
/// piece (`realpath`).
#[cold]
fn too_long(r: Route<'_>) -> Res<Route<'_>> {
    if JOINED.with(|j| j.get()) {
        Ok(r)
    } else {
        Err(libc::ENAMETOOLONG)
    }
}

#[inline(always)]
fn route_any_length(dirfd: c_int, p: &[u8]) -> Res<Route<'_>> {
    if p.first() == Some(&b'/') {
        return Ok(match strip_mount(p) {
            Some(rest) => Route::Ours(if rest.is_empty() {
                Cow::Borrowed(b"/")
            } else {
                Cow::Borrowed(rest)
            }),
            None if p.starts_with(b"/dev/") || p.starts_with(b"/proc/") => {
                return crate::magicfd::route(p);
            }
            None => Route::Pass,
        });
    }
    // Relative to a directory of ours (every *at call of a program that works in a
    // directory it opened): inline, without the out-of-line call below.
    if dirfd != libc::AT_FDCWD
        && let Some((dir, is_dir)) = table::dir_of(dirfd)
    {
        if p.is_empty() {
            return Err(libc::ENOENT);
        }
        if !is_dir {
            return Err(libc::ENOTDIR);
        }
        return Ok(Route::At {
            dir,
            fd: dirfd,
            rel: p,
        });
    }
    route_relative(dirfd, p)
}

/// `route_bytes` for a relative path: out of line, since its buffers would make every call
/// probe pages of stack.
#[inline(never)]
fn route_relative(dirfd: c_int, p: &[u8]) -> Res<Route<'_>> {
    if dirfd != libc::AT_FDCWD {
        if !table::is_ours(dirfd) {
            if crate::desc::is_spare(dirfd) {
                return Err(libc::EBADF);
            }
            return Ok(route_real_dir(dirfd, p));
        }
        // Closed since `route_bytes` looked.
        return Err(libc::EBADF);
    }
    if crate::vcwd::is_set() {
        // Walked from the directory itself (so a rename of it changes nothing), or from its
        // path where no handle of this pool is known (inherited from a process that had no
        // handle, or that worked in another pool).
        return match crate::vcwd::start() {
            Some(_) if p.is_empty() => Err(libc::ENOENT),
            Some(crate::vcwd::Start::Dir(dir)) => Ok(Route::At {
                dir,
                fd: libc::AT_FDCWD,
                rel: p,
            }),
            Some(crate::vcwd::Start::Path(cwd)) => Ok(Route::Ours(join(&cwd, p).into())),
            None => Ok(Route::Pass),
        };
    }
    if p.is_empty() || (!realcwd::near() && !has_dotdot(p)) {
        return Ok(Route::Pass);
    }
    let mut cwd = [0u8; realcwd::MAX];
    let n = realcwd::copy(&mut cwd);
    if n == 0 {
        return Ok(Route::Pass);
    }
    let mut buf = [0u8; realcwd::MAX * 2];
    let Some(len) = lexical(&[&cwd[..n], p], &mut buf) else {
        return Ok(Route::Pass);
    };
    Ok(match strip_mount(&buf[..len]) {
        Some([]) => Route::Ours(Cow::Borrowed(b"/")),
        Some(rest) => Route::Ours(rest.to_vec().into()),
        None => Route::Pass,
    })
}

/// Whether `c` is one of the mount prefix's components (or ".."): only then can a path
/// relative to a real directory lead into the prefix.
fn could_reach_mount(c: &[u8]) -> bool {
    if c == b".." {
        return true;
    }
    let Some(m) = mount_prefix() else {
        return false;
    };
    let mut i = 0;
    while let Some((s, e)) = next_comp(m, i) {
        if &m[s..e] == c {
            return true;
        }
        i = e;
    }
    false
}

/// A path relative to a real directory descriptor: ours when the directory's name joined
/// with it reaches the mount prefix lexically (`openat(fd of /mnt, "engram/f")`), as for a
/// relative path from the real current directory. The kernel is asked for the directory's
/// name only when the path's first component could lead there; nothing is allocated unless
/// the path is ours.
fn route_real_dir(dirfd: c_int, p: &[u8]) -> Route<'_> {
    let Some((s, e)) = next_comp(p, 0) else {
        return Route::Pass;
    };
    if dirfd < 0 || !could_reach_mount(&p[s..e]) {
        return Route::Pass;
    }
    let mut dir = [0u8; realcwd::MAX];
    let Some(n) = crate::util::real_dir_name(dirfd, &mut dir) else {
        return Route::Pass;
    };
    let mut buf = [0u8; realcwd::MAX * 2];
    let Some(len) = lexical(&[&dir[..n], p], &mut buf) else {
        return Route::Pass;
    };
    match strip_mount(&buf[..len]) {
        Some([]) => Route::Ours(Cow::Borrowed(b"/")),
        Some(rest) => Route::Ours(rest.to_vec().into()),
        None => Route::Pass,
    }
}

/// The absolute name, in the process's view, of a pool path.
pub fn mounted(pool_path: &[u8]) -> Vec<u8> {
    let mut v = config().mount.clone();
    if pool_path != b"/" {
        v.extend_from_slice(pool_path);
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_matching_is_by_component() {
        let m = b"/mnt/engram";
        assert_eq!(strip_prefix(m, b"/mnt/engram"), Some(&b""[..]));
        assert_eq!(strip_prefix(m, b"/mnt/engram/a/b"), Some(&b"/a/b"[..]));
        assert_eq!(strip_prefix(m, b"//mnt/./engram//a"), Some(&b"//a"[..]));
        assert_eq!(strip_prefix(m, b"/mnt/engramx/a"), None);
        assert_eq!(strip_prefix(m, b"/mnt"), None);
        assert_eq!(strip_prefix(m, b"mnt/engram"), None);
        assert_eq!(strip_prefix(m, b"/mnt/engram/"), Some(&b"/"[..]));
        assert_eq!(strip_prefix(b"/", b"/a"), Some(&b"/a"[..]));
        assert_eq!(strip_prefix(b"/", b"/"), Some(&b"/"[..]));
        let long = b"/a/rather/long/mount/prefix";
        assert_eq!(
            strip_prefix(long, b"/a/rather/long/mount/prefix/f"),
            Some(&b"/f"[..])
        );
        assert_eq!(strip_prefix(long, b"/a/rather/long/mount/prefiy/f"), None);
        assert_eq!(strip_prefix(long, b"/a/rather/lonG/mount/prefix/f"), None);
        assert_eq!(strip_prefix(b"/mnt", b"/mnt/f"), Some(&b"/f"[..]));
        assert_eq!(strip_prefix(b"/mnt", b"/mnu/f"), None);
    }

    #[test]
    fn same_compares_every_byte() {
        let a: Vec<u8> = (0..40).collect();
        for n in 0..40 {
            assert!(same(&a[..n], &a[..n]));
            for k in 0..n {
                let mut b = a[..n].to_vec();
                b[k] ^= 1;
                assert!(!same(&a[..n], &b), "n {n} k {k}");
            }
        }
    }

    #[test]
    fn lexical_join() {
        let mut b = [0u8; 64];
        let n = lexical(&[b"/work/x", b"../../mnt/engram/f"], &mut b).unwrap();
        assert_eq!(&b[..n], b"/mnt/engram/f");
        let n = lexical(&[b"/", b".."], &mut b).unwrap();
        assert_eq!(&b[..n], b"/");
    }
}

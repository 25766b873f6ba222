//! nftw(3) and ftw(3) of trees under the prefix. glibc walks with its internal opendir and
//! stat calls, which never reach the shim: a walk of a pool path failed with ENOENT. The
//! shim walks such trees itself through its own exports, with glibc's semantics: the same
//! type flags (and ftw's narrower set), `FTW_PHYS`, `FTW_MOUNT`, `FTW_DEPTH`, `FTW_CHDIR`
//! and `FTW_ACTIONRETVAL`, each directory reported once when symlinks are followed, and
//! entries in directory order. Paths outside the prefix go to libc.

use crate::real;
use crate::route::with_joined_paths;
use crate::util::{errno, set_errno};
use libc::{c_char, c_int, c_void};
use std::collections::HashSet;
use std::ffi::CString;

#[repr(C)]
pub struct FtwBuf {
    base: c_int,
    level: c_int,
}

type NftwFn = unsafe extern "C" fn(*const c_char, *const libc::stat, c_int, *mut FtwBuf) -> c_int;
type FtwFn = unsafe extern "C" fn(*const c_char, *const libc::stat, c_int) -> c_int;

// glibc's type flags, walk flags and (with FTW_ACTIONRETVAL) callback answers.
const FTW_F: c_int = 0;
const FTW_D: c_int = 1;
const FTW_DNR: c_int = 2;
const FTW_NS: c_int = 3;
const FTW_SL: c_int = 4;
const FTW_DP: c_int = 5;
const FTW_SLN: c_int = 6;
const FTW_PHYS: c_int = 1;
const FTW_MOUNT: c_int = 2;
const FTW_CHDIR: c_int = 4;
const FTW_DEPTH: c_int = 8;
const FTW_ACTIONRETVAL: c_int = 16;
const FTW_SKIP_SUBTREE: c_int = 2;
const FTW_SKIP_SIBLINGS: c_int = 3;

enum Callback {
    Nftw(NftwFn),
    /// ftw reports symlinks as files, post-order directories as directories and dangling
    /// symlinks as unstatable (glibc's mapping).
    Ftw(FtwFn),
}

/// What the walk does next.
enum Flow {
    Continue,
    SkipSubtree,
    SkipSiblings,
    /// Stop and return this (the callback's answer, or -1 with errno set).
    Stop(c_int),
}

struct Walk {
    callback: Callback,
    flags: c_int,
    /// The device of the starting point (`FTW_MOUNT`).
    dev: u64,
    /// Directories entered, when symlinks are followed (each is walked once).
    seen: HashSet<(u64, u64)>,
    /// Under `FTW_CHDIR` with a relative starting point: the starting directory, which a
    /// reported path is relative to (the paths reported stay as the caller gave them).
    start: Option<Vec<u8>>,
}

fn stat_of(path: &CString, follow: bool) -> Result<libc::stat, c_int> {
    let mut st = std::mem::MaybeUninit::<libc::stat>::zeroed();
    // SAFETY: the shim's own stat on a C string, into a local buffer.
    let r = with_joined_paths(|| unsafe {
        if follow {
            crate::stat::stat64(path.as_ptr(), st.as_mut_ptr())
        } else {
            crate::stat::lstat64(path.as_ptr(), st.as_mut_ptr())
        }
    });
    // SAFETY: zeroed is a valid stat, filled on success.
    if r == 0 {
        Ok(unsafe { st.assume_init() })
    } else {
        Err(errno())
    }
}

fn is(st: &libc::stat, kind: u32) -> bool {
    st.st_mode & libc::S_IFMT == kind
}

impl Walk {
    fn call(
        &self,
        path: &CString,
        st: &libc::stat,
        flag: c_int,
        base: usize,
        level: c_int,
    ) -> Flow {
        let r = match self.callback {
            Callback::Nftw(f) => {
                let mut b = FtwBuf {
                    base: base as c_int,
                    level,
                };
                // SAFETY: the caller's callback, with what nftw passes.
                unsafe { f(path.as_ptr(), st, flag, &mut b) }
            }
            Callback::Ftw(f) => {
                let flag = match flag {
                    FTW_SL => FTW_F,
                    FTW_DP => FTW_D,
                    FTW_SLN => FTW_NS,
                    f => f,
                };
                // SAFETY: as above, with ftw's arguments.
                unsafe { f(path.as_ptr(), st, flag) }
            }
        };
        if self.flags & FTW_ACTIONRETVAL == 0 {
            return if r == 0 {
                Flow::Continue
            } else {
                Flow::Stop(r)
            };
        }
        match r {
            0 => Flow::Continue,
            FTW_SKIP_SUBTREE => Flow::SkipSubtree,
            FTW_SKIP_SIBLINGS => Flow::SkipSiblings,
            // FTW_STOP, and any other answer, ends the walk with it (as glibc does).
            r => Flow::Stop(r),
        }
    }

    /// Report `path` (its last component at `base`) and, for a directory, what it holds.
    fn visit(&mut self, path: &mut Vec<u8>, base: usize, level: c_int) -> Flow {
        let c = CString::new(path.clone()).expect("names hold no NUL");
        // Where it is from the current directory (which FTW_CHDIR moves).
        let at = self.at(path);
        let follow = self.flags & FTW_PHYS == 0;
        let st = match stat_of(&at, follow) {
            Ok(st) => st,
            Err(e) if e == libc::EACCES || e == libc::ENOENT => {
                // A dangling symlink gets its own lstat; anything else nothing read.
                return match stat_of(&at, false) {
                    Ok(l) if follow && is(&l, libc::S_IFLNK) => {
                        self.call(&c, &l, FTW_SLN, base, level)
                    }
                    _ => {
                        // SAFETY: a stat buffer of zeros, as nothing could be read.
                        let none: libc::stat = unsafe { std::mem::zeroed() };
                        self.call(&c, &none, FTW_NS, base, level)
                    }
                };
            }
            Err(e) => {
                set_errno(e);
                return Flow::Stop(-1);
            }
        };
        if self.flags & FTW_MOUNT != 0 && st.st_dev != self.dev {
            return Flow::Continue;
        }
        if !is(&st, libc::S_IFDIR) {
            let flag = if is(&st, libc::S_IFLNK) {
                FTW_SL
            } else {
                FTW_F
            };
            return self.call(&c, &st, flag, base, level);
        }
        if follow && !self.seen.insert((st.st_dev, st.st_ino)) {
            return Flow::Continue;
        }
        let names = match read_names(&at) {
            Ok(names) => names,
            Err(libc::EACCES) => return self.call(&c, &st, FTW_DNR, base, level),
            Err(e) => {
                set_errno(e);
                return Flow::Stop(-1);
            }
        };
        if self.flags & FTW_DEPTH == 0 {
            match self.call(&c, &st, FTW_D, base, level) {
                Flow::Continue => {}
                Flow::SkipSubtree => return Flow::Continue,
                other => return other,
            }
        }
        if self.flags & FTW_CHDIR != 0 && !self.chdir(path) {
            return Flow::Stop(-1);
        }
        let len = path.len();
        for name in names {
            path.truncate(len);
            if path.last() != Some(&b'/') {
                path.push(b'/');
            }
            let child_base = path.len();
            path.extend_from_slice(&name);
            match self.visit(path, child_base, level + 1) {
                Flow::Continue | Flow::SkipSubtree => {}
                Flow::SkipSiblings => break,
                stop => {
                    path.truncate(len);
                    return stop;
                }
            }
        }
        path.truncate(len);
        // After its entries, still inside it (as glibc reports it), then back out.
        let after = if self.flags & FTW_DEPTH != 0 {
            match self.call(&c, &st, FTW_DP, base, level) {
                Flow::SkipSubtree => Flow::Continue,
                other => other,
            }
        } else {
            Flow::Continue
        };
        if self.flags & FTW_CHDIR != 0 && !self.chdir(parent_of(path)) {
            return Flow::Stop(-1);
        }
        after
    }

    /// `path`, a reported path, as the shim's calls must name it: under FTW_CHDIR a
    /// relative one is relative to where the walk started, not to where it is now.
    fn at(&self, path: &[u8]) -> CString {
        let mut p = match (&self.start, path.first()) {
            (Some(start), Some(&b)) if b != b'/' => {
                let mut p = start.clone();
                p.push(b'/');
                p
            }
            _ => Vec::new(),
        };
        p.extend_from_slice(path);
        CString::new(p).expect("names hold no NUL")
    }

    fn chdir(&self, path: &[u8]) -> bool {
        chdir(&self.at(path))
    }
}

/// The directory holding `path` ("." for a name without a slash).
fn parent_of(path: &[u8]) -> &[u8] {
    match path.iter().rposition(|&b| b == b'/') {
        Some(0) => b"/",
        Some(i) => &path[..i],
        None => b".",
    }
}

/// The names in directory `path` (without "." and ".."), read whole before the walk goes
/// down: one stream open at a time, whatever the depth.
fn read_names(path: &CString) -> Result<Vec<Vec<u8>>, c_int> {
    // SAFETY: the shim's own directory calls on a C string; each entry's name is a C string
    // inside the stream's buffer, copied before the next read.
    with_joined_paths(|| unsafe {
        let d = crate::dirs::opendir(path.as_ptr());
        if d.is_null() {
            return Err(errno());
        }
        let mut names = Vec::new();
        loop {
            let e = crate::dirs::readdir64(d);
            if e.is_null() {
                break;
            }
            let name = std::ffi::CStr::from_ptr((*e).d_name.as_ptr()).to_bytes();
            if name != b"." && name != b".." {
                names.push(name.to_vec());
            }
        }
        crate::dirs::closedir(d);
        Ok(names)
    })
}

fn chdir(path: &CString) -> bool {
    // SAFETY: the shim's own chdir on a C string.
    with_joined_paths(|| unsafe { crate::cwd::chdir(path.as_ptr()) == 0 })
}

/// The current directory, as the shim sees it (of any length: getcwd allocates it).
fn cwd() -> Option<Vec<u8>> {
    // SAFETY: the shim's own getcwd, allocating; the copy is taken before it is freed.
    unsafe {
        let p = crate::cwd::getcwd(std::ptr::null_mut(), 0);
        if p.is_null() {
            return None;
        }
        let v = std::ffi::CStr::from_ptr(p).to_bytes().to_vec();
        libc::free(p.cast());
        Some(v)
    }
}

/// Walk the tree at `dir` (under the prefix, or reaching it through real symlinks) as nftw
/// would.
fn walk(dir: *const c_char, callback: Callback, flags: c_int) -> c_int {
    // SAFETY: the caller's C string.
    let mut path = unsafe { std::ffi::CStr::from_ptr(dir) }.to_bytes().to_vec();
    if path.is_empty() {
        set_errno(libc::ENOENT);
        return -1;
    }
    // The program's own string is held to PATH_MAX (the paths joined from it below are not).
    if path.len() >= libc::PATH_MAX as usize {
        set_errno(libc::ENAMETOOLONG);
        return -1;
    }
    // Trailing slashes go (not a lone "/"), as glibc strips them.
    while path.len() > 1 && path.last() == Some(&b'/') {
        path.pop();
    }
    let start = if flags & FTW_CHDIR != 0 {
        let Some(start) = cwd() else { return -1 };
        Some(start)
    } else {
        None
    };
    let base = path[..path.len() - 1]
        .iter()
        .rposition(|&b| b == b'/')
        .map_or(0, |i| i + 1);
    let c = CString::new(path.clone()).expect("a C string holds no NUL");
    // A starting point that cannot be read is an error, not an entry: only a dangling
    // symlink (followed) is reported (`visit`), as glibc does.
    let follow = flags & FTW_PHYS == 0;
    let dev = match stat_of(&c, follow) {
        Ok(st) => st.st_dev,
        Err(libc::ENOENT) if follow && stat_of(&c, false).is_ok_and(|l| is(&l, libc::S_IFLNK)) => 0,
        Err(e) => {
            set_errno(e);
            return -1;
        }
    };
    let mut w = Walk {
        callback,
        flags,
        dev,
        seen: HashSet::new(),
        start: start.clone(),
    };
    if flags & FTW_CHDIR != 0 && !w.chdir(parent_of(&path)) {
        return -1;
    }
    let r = match w.visit(&mut path, base, 0) {
        Flow::Stop(r) => r,
        _ => 0,
    };
    if let Some(start) = start {
        let e = errno();
        if CString::new(start).is_ok_and(|s| chdir(&s)) {
            set_errno(e);
        }
    }
    r
}

/// Whether `dir` reaches the prefix through real symlinks (`reallinks`): glibc's walk
/// would report it as a dangling symlink, the shim walks it, its calls following them.
/// Asked of every walk outside the prefix: one `openat2` when `dir` meets no symlink.
///
/// # Safety
/// `dir` is null or a valid C string.
unsafe fn through_real_links(dir: *const c_char, flags: c_int) -> bool {
    // SAFETY: the caller's C string.
    unsafe { crate::reallinks::reroute(libc::AT_FDCWD, dir, flags & FTW_PHYS == 0) }.is_some()
}

macro_rules! nftws {
    ($($name:ident),*) => {$(
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(
            dir: *const c_char,
            f: Option<NftwFn>,
            nopenfd: c_int,
            flags: c_int,
        ) -> c_int {
            // SAFETY: the caller's C string.
            match f {
                Some(f) if unsafe { crate::route::is_ours(dir) || through_real_links(dir, flags) } => {
                    crate::util::guard(-1, || Ok(walk(dir, Callback::Nftw(f), flags)))
                }
                // SAFETY: forwarding the caller's arguments unchanged.
                _ => unsafe { real::$name(dir, f.map_or(std::ptr::null(), |f| f as *const c_void), nopenfd, flags) },
            }
        }
    )*};
}
nftws!(nftw, nftw64);

macro_rules! ftws {
    ($($name:ident),*) => {$(
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(dir: *const c_char, f: Option<FtwFn>, nopenfd: c_int) -> c_int {
            // SAFETY: the caller's C string.
            match f {
                Some(f) if unsafe { crate::route::is_ours(dir) || through_real_links(dir, 0) } => {
                    crate::util::guard(-1, || Ok(walk(dir, Callback::Ftw(f), 0)))
                }
                // SAFETY: forwarding the caller's arguments unchanged.
                _ => unsafe { real::$name(dir, f.map_or(std::ptr::null(), |f| f as *const c_void), nopenfd) },
            }
        }
    )*};
}
ftws!(ftw, ftw64);

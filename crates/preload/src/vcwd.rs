//! The virtual current directory: where relative paths start while the process's current
//! directory is a directory of the pool (the real one stays where it was). It is kept as
//! the directory itself (its handle), as the kernel keeps a process's current directory:
//! renaming it, or a directory above it, changes nothing for relative paths, and its path
//! is found again from the handle when something needs it (getcwd, a child's ENGRAM_CWD, a
//! walk that leaves the pool). A current directory taken over from the image that exec'd
//! this one has only its path until the next chdir.

use crate::table::DirRef;
use crate::util::Res;
use engram_core::{Fs, Handle};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

struct Vcwd {
    /// Canonical, from the pool's root, as last known.
    path: Vec<u8>,
    dir: Option<Handle>,
}

/// Set while the current directory is a directory of the pool.
static SET: AtomicBool = AtomicBool::new(false);
static VCWD: Mutex<Vcwd> = Mutex::new(Vcwd {
    path: Vec::new(),
    dir: None,
});

/// Directories above one another that `path_of` climbs at most (a damaged pool's parent
/// pointers could form a loop).
const MAX_DEPTH: usize = 1 << 16;

fn lock() -> std::sync::MutexGuard<'static, Vcwd> {
    VCWD.lock().unwrap_or_else(|e| e.into_inner())
}

/// Whether the current directory is a directory of the pool (no lock).
#[inline]
pub fn is_set() -> bool {
    SET.load(Ordering::Acquire)
}

/// The current directory, if it is a directory of the pool: its handle when known, and its
/// path as last known (not checked: see `current_path`).
pub fn get() -> Option<(Option<DirRef>, Vec<u8>)> {
    if !is_set() {
        return None;
    }
    let g = lock();
    is_set().then(|| (g.dir.map(DirRef::from), g.path.clone()))
}

/// Make directory `dir` (its canonical path from the pool's root, and its handle when
/// known) the current directory, or leave the pool (None).
pub fn set(to: Option<(Vec<u8>, Option<Handle>)>) {
    let mut g = lock();
    match to {
        Some((path, dir)) => {
            *g = Vcwd { path, dir };
            SET.store(true, Ordering::Release);
        }
        None => {
            *g = Vcwd {
                path: Vec::new(),
                dir: None,
            };
            SET.store(false, Ordering::Release);
        }
    }
    drop(g);
    crate::process::export_cwd();
}

/// The current directory's path as it is now, if it is a directory of the pool: the path
/// last known while it still names the directory, else found again from the handle (and
/// kept). ENOENT once the directory has been removed, as Linux's getcwd gives.
pub fn current_path() -> Option<Res<Vec<u8>>> {
    let (dir, path) = get()?;
    let Some(h) = dir.map(DirRef::handle) else {
        return Some(Ok(path));
    };
    let Ok(fs) = crate::session::fs() else {
        return Some(Ok(path));
    };
    if names(fs, &path, h) {
        return Some(Ok(path));
    }
    let Some(now) = path_of(fs, h) else {
        return Some(Err(libc::ENOENT));
    };
    let mut g = lock();
    if g.dir == Some(h) {
        g.path = now.clone();
    }
    drop(g);
    crate::process::export_cwd();
    Some(Ok(now))
}

/// Whether `path` names the directory `h` (live: its generation is the inode's now, and an
/// inode number has one live generation at a time).
fn names(fs: &Fs, path: &[u8], h: Handle) -> bool {
    fs.stat_handle(h).is_ok() && fs.stat(path).is_ok_and(|m| m.ino == h.ino)
}

/// The path of directory `h` from the pool's root, found by climbing its parents and
/// looking for its entry in each (as glibc's getcwd does without the kernel's help); None
/// if it was removed, or a directory on the way cannot be read.
fn path_of(fs: &Fs, h: Handle) -> Option<Vec<u8>> {
    let mut comps: Vec<Vec<u8>> = Vec::new();
    let mut cur = h;
    for _ in 0..MAX_DEPTH {
        if cur.ino == engram_core::layout::ROOT_INO {
            let mut path = Vec::new();
            for n in comps.iter().rev() {
                path.push(b'/');
                path.extend_from_slice(n);
            }
            if path.is_empty() {
                path.push(b'/');
            }
            // A rename while we climbed may have moved a directory we passed: the path
            // holds only if it still names the directory.
            return names(fs, &path, h).then_some(path);
        }
        let (parent, _) = fs.lookup_in(cur, b"..").ok()?;
        let entry = fs
            .read_dir_handle(parent)
            .ok()?
            .filter_map(Result::ok)
            .find(|e| e.ino == cur.ino)?;
        comps.push(entry.name);
        cur = parent;
    }
    None
}

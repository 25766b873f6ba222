//! The virtual current directory: where relative paths start while the process's current
//! directory is a directory of the pool (the real one stays where it was). It is kept as
//! the directory itself (its handle), as the kernel keeps a process's current directory:
//! renaming it, or a directory above it, changes nothing for relative paths, and its path
//! is found again from the handle when something needs it (getcwd, a walk that leaves the
//! pool). A handle belongs to one pool: one inherited across exec (`ENGRAM_CWD`) is used
//! only once this process is connected to the pool it came from; until then, and in a
//! process connected to another pool, relative paths start from the path. The directory is
//! held open meanwhile, as the kernel holds it: removed, it stays (empty, no links) with the
//! parent it had, and paths from it behave as Linux's (`removed`).

use crate::table::{DirRef, release};
use crate::util::{Res, en};
use engram_core::{File, Fs, Handle};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

/// A directory's handle and the pool it belongs to (`sidefiles::pool_id`).
pub type PoolDir = (Handle, u64);

struct Vcwd {
    /// Canonical, from the pool's root, as last known.
    path: Vec<u8>,
    dir: Option<PoolDir>,
    /// The directory held in this process (`Fs::hold_dir`), and the fork generation that
    /// took the hold (a forked child holds it again through its own connection). Taken
    /// once connected to the handle's pool; `None` inside if the directory had gone by then.
    held: Option<(u64, Option<File>)>,
}

/// Set while the current directory is a directory of the pool.
static SET: AtomicBool = AtomicBool::new(false);
static VCWD: Mutex<Vcwd> = Mutex::new(Vcwd {
    path: Vec::new(),
    dir: None,
    held: None,
});

/// Directories above one another that `climb` goes up at most (a damaged pool's parent
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

/// The current directory, if it is a directory of the pool: its handle when it can be used
/// (this process is connected to the pool the handle belongs to), and its path as last
/// known (not checked: see `current_path`).
pub fn get() -> Option<(Option<DirRef>, Vec<u8>)> {
    if !is_set() {
        return None;
    }
    let g = lock();
    let pool = crate::session::connected().map(|c| c.pool_id);
    let dir = g
        .dir
        .filter(|&(_, of)| Some(of) == pool)
        .map(|(h, _)| DirRef::from(h));
    is_set().then(|| (dir, g.path.clone()))
}

/// Where a walk from the current directory starts.
pub enum Start {
    /// The directory itself.
    Dir(DirRef),
    /// Its path, where no handle of this pool is known.
    Path(Vec<u8>),
}

/// Where a walk from the current directory starts, if it is a directory of the pool (the
/// path is copied only when there is no handle to use). A handle inherited across exec is
/// checked against the pool this process connects to first: a fresh image has not
/// connected yet, and the path it inherited may be stale.
pub fn start() -> Option<Start> {
    if !is_set() {
        return None;
    }
    let mut connected = crate::session::connected();
    if connected.is_none() && lock().dir.is_some() {
        // Connect, then look (an error leaves the path: the walk then reports it).
        let _ = crate::session::fs();
        connected = crate::session::connected();
    }
    let pool = connected.map(|c| c.pool_id);
    let mut g = lock();
    let mut dir = g.dir.filter(|&(_, of)| Some(of) == pool);
    if dir.is_some() && !held_here(&g) {
        drop(g);
        hold(pool);
        g = lock();
        dir = g.dir.filter(|&(_, of)| Some(of) == pool);
    }
    is_set().then(|| match dir {
        Some((h, _)) => Start::Dir(DirRef::from(h)),
        None => Start::Path(g.path.clone()),
    })
}

/// What `ENGRAM_CWD` passes on: the path as last known, the handle and its pool.
pub fn exported() -> Option<(Vec<u8>, Option<PoolDir>)> {
    if !is_set() {
        return None;
    }
    let g = lock();
    is_set().then(|| (g.path.clone(), g.dir))
}

/// Whether this process (not a parent it was forked from) holds the current directory.
fn held_here(g: &Vcwd) -> bool {
    g.held
        .as_ref()
        .is_some_and(|&(at, _)| at == crate::session::generation())
}

/// Hold the current directory if it is a directory of pool `pool` (the one this process is
/// connected to) that this process does not hold yet: a fresh image or a forked child, at
/// its first use. The hold is taken without the lock (it is a request to the pool).
fn hold(pool: Option<u64>) {
    let at = crate::session::generation();
    let h = match lock().dir {
        Some((h, of)) if Some(of) == pool => h,
        _ => return,
    };
    let file = crate::session::fs().ok().and_then(|fs| fs.hold_dir(h).ok());
    let mut g = lock();
    let spare = if g.dir.is_some_and(|(d, _)| d == h) && !held_here(&g) {
        g.held.replace((at, file))
    } else {
        Some((at, file))
    };
    drop(g);
    if let Some((at, f)) = spare {
        release(at, f);
    }
}

/// Make directory `dir` of the pool this process is connected to (its canonical path from
/// the pool's root, and its handle) the current directory, held from now on. ENOENT if it
/// has gone since it was found.
pub fn enter(path: Vec<u8>, dir: Handle) -> Res<()> {
    let fs = crate::session::fs()?;
    let file = fs.hold_dir(dir).map_err(|e| match e.errno() {
        libc::ESTALE => libc::ENOENT,
        _ => en(e),
    })?;
    enter_held(path, file);
    Ok(())
}

/// `enter` a directory already held (`Fs::hold_dir`) in this process's connection.
pub fn enter_held(path: Vec<u8>, dir: File) {
    let pool = crate::session::connected().map(|c| c.pool_id);
    let h = dir.handle();
    let held = Some((crate::session::generation(), Some(dir)));
    replace(Some((path, pool.map(|p| (h, p)))), held);
}

/// Make the directory at `path` the current directory, with its handle in pool `pool` when
/// known (`Some((handle, pool))`), or leave the pool (None).
pub fn set(to: Option<(Vec<u8>, Option<PoolDir>)>) {
    replace(to, None);
}

fn replace(to: Option<(Vec<u8>, Option<PoolDir>)>, held: Option<(u64, Option<File>)>) {
    let inside = to.is_some();
    let (path, dir) = to.unwrap_or_default();
    let mut g = lock();
    let old = std::mem::replace(&mut *g, Vcwd { path, dir, held });
    SET.store(inside, Ordering::Release);
    drop(g);
    // Let go of the directory left (a request to the pool), not under the lock; one a
    // forked-from parent took is the parent's to let go.
    if let Some((at, f)) = old.held {
        release(at, f);
    }
    crate::cwd_env::export();
}

/// The current directory's path as it is now, if it is a directory of the pool: the path
/// last known while it still names the directory, else found again from the handle (and
/// kept). ENOENT once the directory has been removed, as Linux's getcwd gives. Through a
/// daemon, an image not yet connected connects (the path it inherited may be stale); a
/// forked child of a process that opened the pool itself cannot, and gives the path last
/// known.
pub fn current_path() -> Option<Res<Vec<u8>>> {
    if is_set() && crate::session::connected().is_none() && crate::route::config().socket.is_some()
    {
        let _ = crate::session::fs();
    }
    let (dir, path) = get()?;
    let (Some(h), Some(conn)) = (dir.map(DirRef::handle), crate::session::connected()) else {
        return Some(Ok(path));
    };
    let fs = &conn.fs;
    if names(fs, &path, h) {
        return Some(Ok(path));
    }
    let Some(now) = path_of(fs, h) else {
        return Some(Err(libc::ENOENT));
    };
    let mut g = lock();
    let same = is_set() && g.dir.is_some_and(|(d, _)| d == h);
    if same {
        g.path = now.clone();
    }
    drop(g);
    if same {
        crate::cwd_env::export();
    }
    Some(Ok(now))
}

/// The path of directory `h`, which a route from the current directory walked from: the
/// current directory's (`checked`: as `current_path` gives it; else as last known) while it
/// is still `h`, else found from the handle (another thread changed directory since the
/// route was made). ENOENT if it cannot be found (removed).
pub fn path_of_dir(h: Handle, checked: bool) -> Res<Vec<u8>> {
    if is_dir(h) {
        if checked {
            if let Some(p) = current_path() {
                return p;
            }
        } else if let Some((_, p)) = get() {
            return Ok(p);
        }
    }
    let conn = crate::session::connected().ok_or(libc::ENOENT)?;
    path_of(&conn.fs, h).ok_or(libc::ENOENT)
}

/// Whether the current directory is directory `h`.
pub fn is_dir(h: Handle) -> bool {
    is_set() && lock().dir.is_some_and(|(d, _)| d == h)
}

/// Whether `path` is the canonical path of the live directory `h`: it reaches `h` and goes
/// through no symlink (a stale path may now lead to the same directory through one).
fn names(fs: &Fs, path: &[u8], h: Handle) -> bool {
    if path == b"/" {
        // The walk of the root looks nothing up.
        return h.ino == engram_core::layout::ROOT_INO && fs.stat_handle(h).is_ok();
    }
    match crate::resolve::walk(fs, path, true, true) {
        Ok(w) => {
            matches!(&w.resolved, crate::resolve::Resolved::Inside(c) if c == path)
                && w.found.is_some_and(|(f, _)| f == h)
        }
        Err(_) => false,
    }
}

/// The path of directory `h` from the pool's root (`climb`); None if it was removed, or a
/// directory on the way cannot be read. A climb that meets a rename in flight finds no path:
/// it is tried again (a removed directory fails at once each time).
pub fn path_of(fs: &Fs, h: Handle) -> Option<Vec<u8>> {
    (0..8).find_map(|_| climb(fs, h))
}

/// The path of directory `h`, found by climbing its parents and looking for its entry in
/// each (as glibc's getcwd does without the kernel's help).
fn climb(fs: &Fs, h: Handle) -> Option<Vec<u8>> {
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

//! The connection to the pool: through an `engram serve` daemon (`ENGRAM_SOCKET`), or the
//! pool opened in this process (`ENGRAM_POOL`), made lazily on the first call under the
//! mount prefix. After `fork` a child makes its own connection; the parent's is forgotten,
//! never used or dropped, in the child.

use crate::route::config;
use crate::util::{Res, warn};
use engram_core::{Fs, Options};
use libc::c_int;
use std::ptr::null_mut;
use std::sync::Mutex;
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};

/// Bumped in the child of every `fork`: state made under an older generation belongs to
/// the parent.
static FORK_GEN: AtomicU64 = AtomicU64::new(0);

/// Held by every operation on EngramFS; `fork` waits until no other thread holds it, so
/// that no thread is inside EngramFS code (holding its locks) when the process is copied.
#[inline]
pub fn op() -> crate::opguard::OpGuard {
    crate::opguard::enter()
}

pub fn generation() -> u64 {
    FORK_GEN.load(Ordering::Acquire)
}

/// Bumped before every `fork` of this process: a mapping made before a fork is mapped by a
/// child too, whose stores the kernel records in the child's page tables, not this
/// process's (`mmap/dirty.rs`).
static FORKS: AtomicU64 = AtomicU64::new(0);

/// How many times this process has begun a `fork` (see `FORKS`).
pub fn forks() -> u64 {
    FORKS.load(Ordering::Acquire)
}

pub fn before_fork() {
    crate::real::resolve_exec();
    // First: a thread waiting here holds nothing a spawning thread's own fork needs.
    crate::spawn::before_fork();
    crate::opguard::before_fork();
    // Once no operation runs: a mapping being made in another thread (under the guard)
    // took the count before it, and is compared from now on; counted before the wait, it
    // was taken for one made after the fork, and a child's stores to it were lost (found
    // in review).
    FORKS.fetch_add(1, Ordering::AcqRel);
    crate::table::lock_for_fork();
}

pub fn after_fork_parent() {
    crate::table::unlock_after_fork();
    crate::opguard::after_fork_parent();
    crate::spawn::after_fork();
}

pub fn after_fork_child() {
    // The parent's connection is the parent's: the next call takes the slow path and
    // forgets it (the child has one thread, outside any operation, so no borrow is live).
    FAST.store(null_mut(), Ordering::Release);
    FORK_GEN.fetch_add(1, Ordering::AcqRel);
    crate::table::unlock_in_child();
    crate::opguard::after_fork_child();
    crate::inherit::after_fork_child();
    crate::spawn::after_fork();
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    None,
    Daemon,
    InProcess,
}

/// A connection: the pool as every call sees it, and the view whose walks stop where the
/// process's namespace would leave the pool (`Fs::staying_inside`). Leaked when made, so
/// that borrowing it needs neither a lock nor a reference count: a thread may still be
/// using it after a fork or an unmount made it stale (one per connection, and a process
/// connects once, or once more per forked child).
pub struct Conn {
    pub fs: Fs,
    pub inside: Fs,
    /// The number naming the pool's side files (`sidefiles::pool_id`).
    pub pool_id: u64,
}

/// The current connection, published for lock-free borrowing; null until connected, in a
/// forked child until it reconnects, and after shutdown.
static FAST: AtomicPtr<Conn> = AtomicPtr::new(null_mut());

struct State {
    fs: Option<&'static Conn>,
    /// Views of the connection `fs` is one of, one per set of credentials the process has
    /// taken since it connected (`adopt_current_creds`).
    by_creds: Vec<&'static Conn>,
    epoch: u64,
    failed: Option<c_int>,
    mode: Mode,
    pool_id: u64,
}

static STATE: Mutex<State> = Mutex::new(State {
    fs: None,
    by_creds: Vec::new(),
    epoch: 0,
    failed: None,
    mode: Mode::None,
    pool_id: 0,
});

fn state() -> std::sync::MutexGuard<'static, State> {
    STATE.lock().unwrap_or_else(|e| e.into_inner())
}

/// The pool, connecting (or reconnecting after fork) if needed.
#[inline]
pub fn fs() -> Res<&'static Fs> {
    conn().map(|c| &c.fs)
}

/// The pool as `Fs::staying_inside` sees it.
#[inline]
pub fn fs_inside() -> Res<&'static Fs> {
    conn().map(|c| &c.inside)
}

#[inline]
fn conn() -> Res<&'static Conn> {
    let p = FAST.load(Ordering::Acquire);
    if p.is_null() {
        return connect_slow();
    }
    // SAFETY: FAST only ever holds a leaked `Conn`, never freed.
    Ok(unsafe { &*p })
}

/// This process's connection, if it has one already (never connects: not in a forked child
/// before its first call to the pool, nor in a process that has not reached it yet).
#[inline]
pub fn connected() -> Option<&'static Conn> {
    let p = FAST.load(Ordering::Acquire);
    // SAFETY: FAST only ever holds a leaked `Conn`, never freed.
    (!p.is_null()).then(|| unsafe { &*p })
}

/// This process's daemon connection, if it has one already (never connects).
pub fn daemon_now() -> Option<&'static Fs> {
    let p = FAST.load(Ordering::Acquire);
    if p.is_null() {
        return None;
    }
    // SAFETY: FAST only ever holds a leaked `Conn`, never freed.
    let c = unsafe { &*p };
    c.fs.remote().is_some().then_some(&c.fs)
}

#[cold]
fn connect_slow() -> Res<&'static Conn> {
    let epoch = generation();
    let mut s = state();
    if s.epoch != epoch {
        forget_parent(&mut s, epoch);
    }
    if let Some(c) = s.fs {
        return Ok(c);
    }
    if let Some(e) = s.failed {
        return Err(e);
    }
    match connect(&mut s) {
        Ok(fs) => {
            // What the connection keeps open (its socket, the pool file whose lock makes
            // the pool this process's alone) is the shim's own.
            for fd in fs.descriptors() {
                crate::ownfds::own(fd);
            }
            // The shim joins relative paths to the path of their directory, which may be
            // longer than PATH_MAX; it checks the strings programs pass itself (`route`).
            let fs = fs.without_path_limit();
            let inside = fs.staying_inside();
            let pool_id = s.pool_id;
            let c: &'static Conn = Box::leak(Box::new(Conn {
                fs,
                inside,
                pool_id,
            }));
            s.fs = Some(c);
            s.by_creds = vec![c];
            FAST.store(c as *const Conn as *mut Conn, Ordering::Release);
            Ok(c)
        }
        Err((e, msg)) => {
            warn(&format!(
                "{msg}; calls under {} fail with: {}",
                String::from_utf8_lossy(&config().mount),
                std::io::Error::from_raw_os_error(e)
            ));
            s.failed = Some(e);
            Err(e)
        }
    }
}

/// Whether this process reaches the pool through a daemon (or its parent did, before the
/// fork that made it), without connecting.
pub fn uses_daemon() -> bool {
    state().mode == Mode::Daemon
}

/// `uses_daemon`, or would on its first call: not connected yet, with a daemon's socket
/// configured.
pub fn uses_or_would_use_daemon() -> bool {
    let mode = state().mode;
    mode == Mode::Daemon || (mode == Mode::None && config().socket.is_some())
}

/// The process changed its credentials (`creds.rs`): the connection acts as its current
/// ones from now on, in the daemon's checks (it reads them from the kernel) and in the
/// shim's own, with the same epoch, so that every description stays bound and keeps its
/// access. Not connected: nothing to do (a connection made later is the new credentials'
/// from the start). The credentials are read under the state's lock, so that two threads
/// changing them one after the other leave the later ones. The `Conn` made for a set of
/// credentials is kept and used again when the process comes back to it (a server that
/// switches its effective uid per request would otherwise leak one per switch).
pub fn adopt_current_creds() {
    let _op = op();
    let mut s = state();
    let Some(c) = s.fs.filter(|_| s.epoch == generation()) else {
        return;
    };
    let creds = engram_core::Creds::current();
    if c.fs.creds() == &creds {
        return;
    }
    if let Err(e) = c.fs.with_own_creds(creds.clone()) {
        warn(&format!(
            "the daemon keeps checking this process as uid {}: {e}",
            c.fs.creds().uid
        ));
        return;
    }
    let next = match s.by_creds.iter().find(|k| k.fs.creds() == &creds) {
        Some(&known) => known,
        None => {
            let made: &'static Conn = Box::leak(Box::new(Conn {
                fs: c.fs.with_creds(creds.clone()),
                inside: c.inside.with_creds(creds),
                pool_id: c.pool_id,
            }));
            s.by_creds.push(made);
            made
        }
    };
    s.fs = Some(next);
    FAST.store(next as *const Conn as *mut Conn, Ordering::Release);
}

/// The number naming the pool's side files (`sidefiles::pool_id`), connecting first: an
/// image that inherited a description may lock or map it before any other call, and
/// unconnected the number is 0, which names other files than every other process's.
pub fn pool_id() -> Res<u64> {
    fs()?;
    Ok(state().pool_id)
}

/// The pool's id if this process is connected, without waiting for the state (before fork
/// and exec: a thread that holds it is not waited for), and whether a daemon serves it
/// (then forked children share it).
pub fn pool_id_now() -> Option<(u64, bool)> {
    let s = STATE.try_lock().ok()?;
    (s.mode != Mode::None && s.fs.is_some()).then_some((s.pool_id, s.mode == Mode::Daemon))
}

/// In a forked child: the parent's connection must be neither used nor dropped (dropping
/// would send its requests from this process).
fn forget_parent(s: &mut State, epoch: u64) {
    s.epoch = epoch;
    s.by_creds.clear();
    // Leaked: never used nor dropped here. Its descriptors (the parent's daemon socket and
    // region, or the pool file whose lock the parent's copy and mapping keep) are closed in
    // the child, so that they do not pile up with each generation of forks.
    if let Some(old) = s.fs.take() {
        for fd in old.fs.descriptors() {
            crate::ownfds::close(fd);
        }
    }
    match s.mode {
        Mode::Daemon => {
            s.failed = None;
        }
        Mode::InProcess => {
            warn(
                "the pool is open in the parent process (no daemon): a forked child cannot use it; \
                 run the program under `engram run` (or ENGRAM_SOCKET) to share the pool",
            );
            s.failed = Some(libc::EIO);
        }
        Mode::None => {}
    }
}

fn connect(s: &mut State) -> Result<Fs, (c_int, String)> {
    let cfg = config();
    if let Some(sock) = &cfg.socket {
        let fs = Fs::connect(sock).map_err(|e| {
            // No daemon listens there (killed, or gone): the pool's calls fail with EIO, as
            // those of a process whose daemon went away do, not with the socket's own
            // ECONNREFUSED or ENOENT, which a program would take for its file's.
            let errno = match e.errno() {
                libc::ECONNREFUSED | libc::ENOENT => libc::EIO,
                n => n,
            };
            (
                errno,
                e.message().map_or_else(|| e.to_string(), str::to_string),
            )
        })?;
        s.mode = Mode::Daemon;
        s.pool_id = fs.mount_info().side_files.unwrap_or_default();
        return Ok(fs);
    }
    // Both a daemon connection and a pool opened in-process keep their descriptors at 64
    // and above themselves (what opening the pool opens for a moment lands anywhere, and
    // is closed again before the program's next call).
    let opts = Options {
        warn: Some(crate::util::warn),
        ..Options::default()
    };
    let fs = Fs::open(&cfg.pool, &opts).map_err(|e| {
        let hint = if e.errno() == libc::EBUSY {
            " (another process has it open: run programs that share a pool under `engram run`, \
             or set ENGRAM_SOCKET to an `engram serve` socket)"
        } else {
            ""
        };
        let what = match e.message() {
            Some(m) => m.to_string(),
            None => format!("cannot open pool {}: {e}", cfg.pool.display()),
        };
        (e.errno(), format!("{what}{hint}"))
    })?;
    s.mode = Mode::InProcess;
    crate::reclocks::set_in_process();
    s.pool_id = fs.mount_info().side_files.unwrap_or_default();
    Ok(fs)
}

/// At exit, unmount a pool this process opened itself (cleanly: no recovery next time).
pub fn shutdown() {
    let epoch = generation();
    let mut s = state();
    if s.epoch != epoch || s.mode != Mode::InProcess || s.fs.is_none() {
        return;
    }
    drop(s);
    // Buffered stdio output to our files goes out first.
    // SAFETY: fflush(NULL) flushes every stream.
    unsafe { libc::fflush(std::ptr::null_mut()) };
    crate::table::clear_all();
    s = state();
    FAST.store(null_mut(), Ordering::Release);
    if let Some(c) = s.fs.take() {
        // A thread still holding the (leaked) connection gets the errors of an unmounted
        // pool, as it did with a clone.
        let _ = c.fs.clone().unmount();
    }
    s.failed = Some(libc::EIO);
}

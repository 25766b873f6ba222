//! The server side of the daemon: serve requests from the clients' slots in shared memory,
//! clean up after clients that go away (the watcher thread in `watch` accepts them and
//! notices their departure). An idle server sleeps on futexes without a timeout: the wake
//! word every client rings (`wake`), a control word the watcher rings, and the stop word.

use super::futex::{self, Waiter};
use super::idle::{self, Idle};
use super::scan::Clients;
use super::shm::{self, ClientArea, Common, SLOTS_PER_CLIENT};
use super::wake::Wake;
use super::watch;
use crate::epoch::Epochs;
use crate::error::{Error, Result};
use crate::fasthash::FastSet;
use crate::perm::Creds;
use crate::recovery;
use crate::request::Request;
use crate::server::{self, ClientId, Server};
use crate::wire::{self, Writer};
use engram_pmem::Pool;
use std::collections::HashMap;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Clone, Debug)]
pub struct ServeOptions {
    pub socket: PathBuf,
    /// Exit after this long with no client (the daemons `engram run` starts), once no
    /// process maps the pool either (a client's forked child that has not connected yet
    /// holds the client lock its parent took: then look again after as long).
    pub idle_exit: Option<Duration>,
    /// Log each client's connection and departure. A daemon started for one command
    /// (`engram run`) leaves them out: a build would add two lines per process.
    pub log_clients: bool,
}

/// Tells a running daemon to stop, waking it at once. `stop` is async-signal-safe (an
/// atomic store and one futex wake), so a signal handler may call it.
pub struct Stop {
    flag: AtomicBool,
    word: AtomicU32,
}

impl Default for Stop {
    fn default() -> Stop {
        Stop::new()
    }
}

impl Stop {
    pub const fn new() -> Stop {
        Stop {
            flag: AtomicBool::new(false),
            word: AtomicU32::new(0),
        }
    }

    pub fn stop(&self) {
        self.flag.store(true, Ordering::SeqCst);
        self.word.fetch_add(1, Ordering::SeqCst);
        futex::wake_private(&self.word);
    }

    pub fn is_stopped(&self) -> bool {
        self.flag.load(Ordering::SeqCst)
    }
}

/// What stops the daemon: a `Stop` (wakes it), or a bare flag, looked at every
/// `FLAG_POLL` since nothing wakes the daemon when it is set.
#[derive(Clone, Copy)]
enum StopBy<'a> {
    Stop(&'a Stop),
    Flag(&'a AtomicBool),
}

const FLAG_POLL: Duration = Duration::from_millis(200);

impl StopBy<'_> {
    fn stopped(&self) -> bool {
        match self {
            StopBy::Stop(s) => s.is_stopped(),
            StopBy::Flag(f) => f.load(Ordering::SeqCst),
        }
    }
}

pub(super) struct Conn {
    pub index: usize,
    pub creds: Creds,
    pub stream: UnixStream,
    /// Readable once the client process has exited.
    pub pidfd: Option<OwnedFd>,
    /// The client's process, as the socket gave it at the connection.
    pub pid: u32,
}

#[derive(Default)]
pub(super) struct Conns {
    pub live: HashMap<ClientId, Conn>,
    pub dead: Vec<(ClientId, usize)>,
    pub free: Vec<usize>,
    pub next_id: ClientId,
    /// Bumped whenever `live` changes, so the server loop refreshes its list.
    pub version: u64,
}

/// What the server loop and the watcher share.
pub(super) struct Shared<'a> {
    pub conns: Mutex<Conns>,
    pub area: &'a ClientArea,
    /// The server loop's control word: rung when the clients change.
    pub ctl: AtomicU32,
    /// Set by the server loop when it ends; `wake` then wakes the watcher.
    pub quit: AtomicBool,
    pub wake: OwnedFd,
    /// The device and inode of the pool file served: a client is refused once the pool path
    /// names another file (the served one deleted or replaced), whose data it would
    /// otherwise write into a file no longer there.
    pub pool_file: (u64, u64),
    /// The pool path as given (absolute, a symlink not resolved): the socket is named after
    /// it, and a new pool made there replaces what it names.
    pub given_path: PathBuf,
    /// `ServeOptions::log_clients`.
    pub log_clients: bool,
}

impl Shared<'_> {
    /// Wake the server loop to look at the clients again.
    pub fn ring(&self) {
        self.ctl.fetch_add(1, Ordering::SeqCst);
        futex::wake_private(&self.ctl);
    }

    fn wake_watcher(&self) {
        let one = 1u64;
        // SAFETY: writing 8 bytes from a local u64 to our eventfd.
        unsafe {
            libc::write(
                self.wake.as_raw_fd(),
                &one as *const u64 as *const libc::c_void,
                8,
            )
        };
    }
}

pub(super) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The device and inode at `path`, if there is a file.
fn file_id(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(path)
        .ok()
        .map(|m| (m.dev(), m.ino()))
}

fn bind(socket: &Path) -> Result<UnixListener> {
    if socket.exists() {
        if UnixStream::connect(socket).is_ok() {
            return Err(Error::with_msg(
                libc::EADDRINUSE,
                format!("a daemon already listens on {}", socket.display()),
            ));
        }
        let _ = std::fs::remove_file(socket);
    }
    // Made under a name of its own and renamed into place once it listens, open to all: a
    // client that sees the socket can connect (between bind and listen, or before the mode
    // was set, a test's client was refused under load).
    let name = socket.file_name().map(|n| n.to_string_lossy().into_owned());
    let fresh = socket.with_file_name(format!(
        ".{}.{}.new",
        name.as_deref().unwrap_or("socket"),
        std::process::id()
    ));
    let _ = std::fs::remove_file(&fresh);
    let cannot = |e: std::io::Error| {
        Error::with_msg(
            crate::error::io_errno(&e),
            format!("cannot listen on {}: {e}", socket.display()),
        )
    };
    let l = UnixListener::bind(&fresh).map_err(cannot)?;
    l.set_nonblocking(true)?;
    // Anyone may knock; the server decides from the peer's credentials (SO_PEERCRED) and
    // the pool file's permissions whom to serve.
    use std::os::unix::fs::PermissionsExt;
    let placed = std::fs::set_permissions(&fresh, std::fs::Permissions::from_mode(0o666))
        .and_then(|()| std::fs::rename(&fresh, socket));
    if let Err(e) = placed {
        let _ = std::fs::remove_file(&fresh);
        return Err(cannot(e));
    }
    Ok(l)
}

fn eventfd() -> Result<OwnedFd> {
    // SAFETY: eventfd with valid flags returns a new descriptor or -1.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error().into());
    }
    // SAFETY: a fresh descriptor that we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Serve the pool until `stop` is set (or, with `idle_exit`, until idle that long), then
/// checkpoint and mark the pool clean. Nothing wakes the daemon when a bare flag is set, so
/// it looks at it every 200 ms; `serve_until` with a `Stop` sleeps without any timeout.
pub fn serve(
    pool_path: &Path,
    opts: &ServeOptions,
    stop: &AtomicBool,
    log: &(dyn Fn(&str) + Sync),
) -> Result<()> {
    run(pool_path, opts, StopBy::Flag(stop), log)
}

/// Serve the pool until `stop.stop()` (or, with `idle_exit`, until idle that long), then
/// checkpoint and mark the pool clean. An idle daemon uses no CPU.
pub fn serve_until(
    pool_path: &Path,
    opts: &ServeOptions,
    stop: &Stop,
    log: &(dyn Fn(&str) + Sync),
) -> Result<()> {
    run(pool_path, opts, StopBy::Stop(stop), log)
}

/// Each client holds two of the daemon's descriptors (its socket and a pidfd): the usual
/// soft limit of 1,024 would refuse clients long before `shm::MAX_CLIENTS`. Raises this
/// process's to the hard limit (at most 65,536); for a process of its own (`engram serve`),
/// not for a program that serves from a thread and may use `select`.
pub fn raise_descriptor_limit() {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit fills a local struct.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) } != 0 {
        return;
    }
    let want = r.rlim_max.min(1 << 16);
    if r.rlim_cur < want {
        r.rlim_cur = want;
        // SAFETY: setrlimit reads a local struct; a failure leaves the limit as it was.
        unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &r) };
    }
}

/// The nice value the daemon runs at where it may (root, CAP_SYS_NICE, RLIMIT_NICE): every
/// client's request waits for it, so on a machine with more runnable threads than cores
/// it should not wait behind them. Four busy loops on two cores: a 4 KiB append through
/// the daemon took 1.8 ms at nice 0, 16 µs at -10 (tmpfs 9 µs; performance.md).
pub const SERVER_NICE: i32 = -10;

/// Run the calling thread, and the threads it starts from now on, at `SERVER_NICE` if that
/// is higher than its priority now and the process may; returns whether it does. For a
/// process of its own (`engram serve`), as `raise_descriptor_limit`.
pub fn raise_priority() -> bool {
    // SAFETY: getpriority and setpriority of the calling thread (Linux: PRIO_PROCESS with
    // 0 names the calling thread); errno is cleared first, as -1 is a valid answer.
    unsafe {
        *libc::__errno_location() = 0;
        let now = libc::getpriority(libc::PRIO_PROCESS, 0);
        if now <= SERVER_NICE && *libc::__errno_location() == 0 {
            return true;
        }
        libc::setpriority(libc::PRIO_PROCESS, 0, SERVER_NICE) == 0
    }
}

fn run(
    pool_path: &Path,
    opts: &ServeOptions,
    stop: StopBy<'_>,
    log: &(dyn Fn(&str) + Sync),
) -> Result<()> {
    let pool = Pool::open(pool_path)
        .map_err(|e| Error::with_msg(crate::error::io_errno(&e), e.to_string()))?;
    pool.try_lock_exclusive()
        .map_err(|e| crate::error::pool_busy(pool_path, &e))?;
    let abs_path = std::fs::canonicalize(pool_path)?;
    // The file opened, and the path as given (made absolute, a symlink not resolved): the
    // socket is named after that path, and it is what a new pool made there replaces.
    let pool_file = pool
        .file_identity()
        .ok_or_else(|| Error::with_msg(libc::EINVAL, "the pool is not a file"))?;
    let given_path = std::path::absolute(pool_path)?;
    let m = recovery::mount(&pool)?;
    let side_id = crate::sidefiles::pool_id(&abs_path);
    let map_files = crate::sidefiles::remove_dead(side_id, &pool, &m.sb.geometry);
    if !m.was_clean {
        log(&format!(
            "recovered: {} log records replayed, {} orphans freed",
            m.replayed, m.orphans_freed
        ));
    }
    let (common, common_fd) = Common::create(m.sb.geometry.inode_count)?;
    let (wake, wake_fd) = Wake::create()?;
    let area = ClientArea::new()?;
    let epochs = Epochs::shared(common.global_epoch(), area.epoch_groups(), shm::MAX_CLIENTS);
    let shared = Arc::new(server::Shared {
        epochs: epochs.scanning_only(area.live()),
        seqs: common.seqs(),
        mapped: common.mapped(),
        several_writers: common.several_writers(),
        mapped_live: common.mapped_live(),
    });
    let mut server = Server::start(Arc::new(pool), m.sb, m.alloc, m.head, shared);
    server.drive_backing_retries();
    server.use_side_files(side_id, &map_files);
    for e in server.take_backing_errors() {
        log(&e);
    }
    let listener = bind(&opts.socket)?;
    let socket_file = file_id(&opts.socket);
    log(&format!(
        "serving {} on {}",
        pool_path.display(),
        opts.socket.display()
    ));
    let sh = Shared {
        conns: Mutex::new(Conns {
            free: (0..shm::MAX_CLIENTS).rev().collect(),
            next_id: 1,
            ..Conns::default()
        }),
        area: &area,
        ctl: AtomicU32::new(0),
        quit: AtomicBool::new(false),
        wake: eventfd()?,
        pool_file,
        given_path,
        log_clients: opts.log_clients,
    };
    let result = std::thread::scope(|scope| {
        let watcher =
            scope.spawn(|| watch::watch(&listener, &sh, &common_fd, &wake_fd, &abs_path, log));
        let r = run_loop(
            &mut server,
            (&common, &wake),
            &sh,
            stop,
            opts.idle_exit,
            log,
        );
        sh.quit.store(true, Ordering::SeqCst);
        sh.wake_watcher();
        let _ = watcher.join();
        // Clients still there when the daemon stops are disconnected now (and logged once).
        let mut c = lock(&sh.conns);
        let mut left = std::mem::take(&mut c.dead);
        left.extend(c.live.drain().map(|(id, conn)| (id, conn.index)));
        left.sort_unstable();
        for (id, _) in left {
            server.disconnect(id);
            if sh.log_clients {
                log(&format!("client {id} disconnected"));
            }
        }
        r
    });
    // Only our own socket: once the pool was replaced, a daemon of the new pool may have
    // bound the path meanwhile, and removing its socket would hide it from its clients.
    if socket_file.is_some() && file_id(&opts.socket) == socket_file {
        let _ = std::fs::remove_file(&opts.socket);
    }
    server.shutdown()?;
    log("pool checkpointed and marked clean; daemon stopped");
    result
}

/// A live client as the server loop sees it.
/// Serve requests until stopped.
fn run_loop(
    server: &mut Server,
    (common, wake): (&Common, &Wake),
    sh: &Shared<'_>,
    stop: StopBy<'_>,
    idle_exit: Option<Duration>,
    log: &(dyn Fn(&str) + Sync),
) -> Result<()> {
    let mut clients = Clients::default();
    let mut seen_version = u64::MAX;
    let mut ctl_handled: Option<u32> = None;
    let mut idle = Idle::new();
    // Idle means: no client connected, and none that sent a request for `idle_exit` (a
    // client that connects and leaves without a request, such as a probe, does not count).
    let mut last_client = Instant::now();
    // Whether this idle stretch has logged that a process without a connection keeps the
    // daemon (once per stretch).
    let mut said_staying = false;
    let mut active: FastSet<ClientId> = FastSet::default();
    // Reply and request buffers, reused by every request.
    let mut buf = (Writer::default(), Vec::new());
    loop {
        // Read the wake words before looking at what they announce: a change after this
        // point makes the sleep below return at once.
        let ctl_seen = sh.ctl.load(Ordering::SeqCst);
        let stop_seen = match stop {
            StopBy::Stop(s) => s.word.load(Ordering::SeqCst),
            StopBy::Flag(_) => 0,
        };
        if stop.stopped() {
            break;
        }
        // The clients changed only if the watcher rang since the last look (it rings after
        // every change, with the lock released): otherwise the lock is not taken. Taken on
        // every scan, it stalled every client's requests while the watcher held it through
        // a connection's handshake (or was preempted holding it).
        if ctl_handled != Some(ctl_seen) {
            ctl_handled = Some(ctl_seen);
            let dead = std::mem::take(&mut lock(&sh.conns).dead);
            // Without the clients' lock: a disconnect may write a mapping back
            // (`server/backing.rs`), and the watcher goes on meanwhile.
            for (id, index) in dead {
                server.disconnect(id);
                for e in server.take_backing_errors() {
                    log(&format!("client {id} gone: {e}"));
                }
                // Zero pages replace the region: its epochs read as unpinned, and whatever
                // the client's other processes still write there reaches nobody.
                if let Err(e) = sh.area.clear(index) {
                    log(&format!("client {id}: cannot unmap its region: {e}"));
                    continue;
                }
                lock(&sh.conns).free.push(index);
                if active.remove(&id) {
                    last_client = Instant::now();
                }
                if sh.log_clients {
                    log(&format!("client {id} disconnected"));
                }
            }
            let c = lock(&sh.conns);
            if c.version != seen_version {
                seen_version = c.version;
                let live = c.live.iter();
                clients.refresh(live.map(|(&id, conn)| (id, conn.index, conn.creds.clone())));
            }
        }
        // Write-backs of dead clients' mappings that found a write in flight.
        if server.backing_pending() {
            server.retry_backing();
            for e in server.take_backing_errors() {
                log(&e);
            }
        }
        let idle_deadline = match idle_exit {
            Some(d) if clients.list.is_empty() => {
                let mut at = last_client + d;
                if Instant::now() >= at {
                    // A process may map the pool without being a client yet: a client's
                    // forked child connects on its first call of its own, maybe after its
                    // parent left. It holds the client lock its parent took (inherited
                    // with the descriptor); while any process does, the daemon stays, and
                    // looks again after another idle period.
                    match server.pool().held_by_client() {
                        Ok(true) => {
                            if !said_staying {
                                said_staying = true;
                                log("idle with no clients, but a process still maps the pool \
                                     (a client's child that has not connected yet, say): \
                                     staying until none does");
                            }
                            last_client = Instant::now();
                            at = last_client + d;
                        }
                        Ok(false) => {
                            log("idle with no clients: exiting");
                            break;
                        }
                        Err(e) => {
                            log(&format!(
                                "idle with no clients: exiting (cannot tell whether a process \
                                 still maps the pool: {e})"
                            ));
                            break;
                        }
                    }
                }
                Some(at)
            }
            _ => {
                said_staying = false;
                None
            }
        };
        if let Some(client_here) =
            serve_slots(server, sh, &mut clients, &mut buf, &mut active, &idle, log)
        {
            idle.served(client_here);
            continue;
        }
        if idle.scan_again() {
            continue;
        }
        if server.backing_pending() {
            // Not asleep while a write-back waits (the writer's copy is a moment away).
            std::thread::yield_now();
            continue;
        }
        // Sleep. Note the wake word, announce the sleep, and scan once more: a client that
        // posts after the scan sees the announcement and rings, which changes the wake word
        // (so the wait returns at once) or wakes the wait.
        let rung = wake.word().load(Ordering::SeqCst);
        common.sleeping().store(1, Ordering::SeqCst);
        if let Some(client_here) =
            serve_slots(server, sh, &mut clients, &mut buf, &mut active, &idle, log)
        {
            idle.served(client_here);
        } else if !stop.stopped() {
            let mut waiters = vec![Waiter {
                word: &sh.ctl,
                expected: ctl_seen,
                private: true,
            }];
            if let StopBy::Stop(s) = stop {
                waiters.push(Waiter {
                    word: &s.word,
                    expected: stop_seen,
                    private: true,
                });
            }
            waiters.push(Waiter {
                word: wake.word(),
                expected: rung,
                private: false,
            });
            let poll = match stop {
                StopBy::Flag(_) => Some(Instant::now() + FLAG_POLL),
                StopBy::Stop(_) => None,
            };
            let deadline = match (idle_deadline, poll) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            if !futex::wait_any(&waiters, deadline) {
                // No futex_waitv (Linux before 5.16): poll the slots at a slow pace.
                futex::wait_private(&sh.ctl, ctl_seen, Duration::from_millis(1));
            }
            idle.woke();
        }
        common.sleeping().store(0, Ordering::SeqCst);
    }
    Ok(())
}

/// Handle every posted request once; returns None if there were none, else whether one
/// came from a client that waits for its reply on this thread's processor (looked for only
/// if `idle` yields to such clients). The slots are in
/// memory the clients write: only a slot whose request awaits its reply is read, its
/// length is clamped, and the request is decoded and validated like any other input. A
/// request is served with the identity and credentials of the client whose region it is
/// in.
fn serve_slots(
    server: &mut Server,
    sh: &Shared<'_>,
    clients: &mut Clients,
    (buf, inbuf): &mut (Writer, Vec<u8>),
    active: &mut FastSet<ClientId>,
    idle: &Idle,
    log: &(dyn Fn(&str) + Sync),
) -> Option<bool> {
    let mut any = None;
    let clock = clients.start_scan();
    let mut list = std::mem::take(&mut clients.list);
    for c in &mut list {
        let region = sh.area.region(c.index);
        if !c.due(region.bell()) {
            continue;
        }
        let look = Clients::before(c, clock, region.bell());
        let mut found = false;
        for i in 0..SLOTS_PER_CLIENT {
            let slot = region.slot(i);
            let Some(seq) = slot.pending() else {
                continue;
            };
            found = true;
            any.get_or_insert(false);
            active.insert(c.id);
            let mut kind = "undecodable request";
            slot.get_request(inbuf);
            let request = wire::decode_request(inbuf);
            if let Ok(Request::Gone { pid }) = request
                && watch::exited_but_connected(sh, pid)
            {
                // Answered once the watcher has disconnected that process's clients: left
                // pending, and looked at again by the next scan.
                continue;
            }
            let result = request.and_then(|req| {
                kind = req.kind();
                match req {
                    Request::CredsChanged => watch::creds_now(sh, c.id).map(|creds| {
                        c.creds = creds;
                        crate::request::Response::Done
                    }),
                    req => server.handle(c.id, &c.creds, req),
                }
            });
            if let Err(e) = &result
                && !is_ordinary_answer(kind, e.errno())
            {
                let what = format!("client {}: {kind} failed: errno {} ({e})", c.id, e.errno());
                if let Some(line) = c.log_failure(what) {
                    log(&line);
                }
            }
            buf.0.clear();
            wire::encode_reply(&result, buf);
            if slot.put_reply(&buf.0).is_err() {
                buf.0.clear();
                wire::encode_reply(&Err(Error::with_msg(libc::E2BIG, "reply too large")), buf);
                let _ = slot.put_reply(&buf.0);
            }
            slot.reply_seq().store(seq, Ordering::SeqCst);
            if slot.waiting().load(Ordering::SeqCst) != 0 {
                futex::wake(slot.reply_seq());
            }
            if idle.yields_to_clients() {
                let yielding_on = slot.yielding_on().load(Ordering::Relaxed);
                if yielding_on != 0 && idle::yields_here(yielding_on) {
                    any = Some(true);
                }
            }
        }
        clients.scanned(c, look, found);
    }
    clients.list = list;
    any
}

/// Whether a failed request's errno is a call's ordinary answer (a name that exists or is
/// missing, a directory not empty, a conflict the client retries), which gets no line in
/// the daemon's log: `mkdir -p`, `rm -f` and `mv` loops made a line per call (100,000 calls,
/// 7.5 MB in /dev/shm), and concurrent appenders one per retried commit. What stays logged
/// points at a client or at the daemon: forged or stale handles (EBADF, EINVAL), EIO,
/// ENOSPC, undecodable requests. Two answers are ordinary for one request only: EINVAL
/// for a rename (a directory into itself, as `mv d d/sub` asks) and EOPNOTSUPP for a
/// setattr (the mode of a symbolic link).
fn is_ordinary_answer(kind: &str, errno: i32) -> bool {
    match (kind, errno) {
        ("rename", libc::EINVAL) | ("setattr", libc::EOPNOTSUPP) => return true,
        _ => {}
    }
    matches!(
        errno,
        libc::EEXIST
            | libc::ENOENT
            | libc::ENOTEMPTY
            | libc::ENOTDIR
            | libc::EISDIR
            | libc::EACCES
            | libc::EPERM
            | libc::EAGAIN
            | libc::ESTALE
            | libc::EXDEV
            | libc::ELOOP
            | libc::ENAMETOOLONG
            | libc::EMLINK
            | libc::EFBIG
            | libc::ETXTBSY
    )
}

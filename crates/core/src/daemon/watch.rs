//! The daemon's watcher thread: accepts clients on the socket and notices departed ones
//! (socket closed, or process gone: a pidfd per client, so that a dead client is noticed even
//! when a forked child still holds its socket). It blocks in poll(2) with no timeout; the
//! server loop wakes it through an eventfd when the daemon stops.

use super::handshake::{self, Hello};
use super::serve::{Conn, Shared, lock};
use super::shm::{self, ClientRegion};
use crate::perm::Creds;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::atomic::Ordering;

/// Whether `c` may read and write the pool file.
fn may_use(c: &Creds, meta: &std::fs::Metadata) -> bool {
    let mode = meta.mode();
    c.is_root()
        || (c.uid == meta.uid() && mode & 0o600 == 0o600)
        || (c.uid != meta.uid() && c.in_group(meta.gid()) && mode & 0o060 == 0o060)
        || (c.uid != meta.uid() && !c.in_group(meta.gid()) && mode & 0o006 == 0o006)
}

/// A descriptor that becomes readable when process `pid` exits (an error if pidfds are not
/// available: the socket alone then tells).
fn pidfd_open(pid: i32) -> std::io::Result<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor that we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

fn out_of_descriptors(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE))
}

/// Whether some connected client is process `pid` and that process has exited (its pidfd
/// readable, or without one its socket closed): this thread disconnects it a moment later.
/// Also while clients this thread found gone wait for the server loop (it may be one).
pub(super) fn exited_but_connected(sh: &Shared<'_>, pid: u32) -> bool {
    let c = lock(&sh.conns);
    !c.dead.is_empty() || c.live.values().filter(|conn| conn.pid == pid).any(exited)
}

/// Whether a client's process has exited: its pidfd readable, or without one its socket
/// closed.
fn exited(conn: &Conn) -> bool {
    match &conn.pidfd {
        Some(p) => {
            let mut fd = [pollfd(p.as_raw_fd())];
            // SAFETY: polling one descriptor we own, without waiting.
            unsafe { libc::poll(fd.as_mut_ptr(), 1, 0) == 1 }
        }
        None => socket_closed(&conn.stream),
    }
}

/// `Request::CredsChanged`: the credentials client `id`'s process has now, as the kernel
/// keeps them (/proc/PID/status), never what the client says. Read and then checked
/// against the process's pidfd, so that a pid reused by another process after the client
/// died is not read; EPERM when they cannot be read (/proc mounted with `hidepid`), and
/// the client keeps the credentials it had.
pub(super) fn creds_now(
    sh: &Shared<'_>,
    id: crate::server::ClientId,
) -> crate::error::Result<Creds> {
    let refused = |why: &str| {
        crate::error::Error::with_msg(
            libc::EPERM,
            format!("the daemon cannot read the client's new credentials: {why}"),
        )
    };
    let pid = lock(&sh.conns)
        .live
        .get(&id)
        .map(|c| c.pid)
        .ok_or_else(|| refused("not connected"))?;
    let creds = handshake::creds_from_proc(pid).ok_or_else(|| refused("/proc unreadable"))?;
    let c = lock(&sh.conns);
    if c.live.get(&id).is_none_or(exited) {
        return Err(refused("the process has exited"));
    }
    Ok(creds)
}

/// Whether a readable client socket has closed (a client never sends on it).
fn socket_closed(stream: &UnixStream) -> bool {
    let mut b = [0u8; 64];
    // SAFETY: a non-blocking read into a local buffer.
    let n = unsafe {
        libc::recv(
            stream.as_raw_fd(),
            b.as_mut_ptr() as *mut libc::c_void,
            b.len(),
            libc::MSG_DONTWAIT,
        )
    };
    n == 0 || (n < 0 && std::io::Error::last_os_error().kind() != std::io::ErrorKind::WouldBlock)
}

fn pollfd(fd: i32) -> libc::pollfd {
    libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    }
}

/// Accept new clients and notice departed ones until the server loop says stop.
pub(super) fn watch(
    listener: &UnixListener,
    sh: &Shared<'_>,
    common_fd: &OwnedFd,
    wake_fd: &OwnedFd,
    pool_path: &Path,
    log: &(dyn Fn(&str) + Sync),
) {
    // The next client's region, made while no client waits for it (a memfd, its sizing,
    // sealing and first page: about 20 µs here). Each region serves one client only.
    let mut next_region: Option<OwnedFd> = None;
    // A descriptor kept spare, so that a client that comes when the daemon has none left
    // (each client holds two) can still be accepted and told why it is refused; without
    // it the listener would stay readable and this loop spin.
    let mut spare = open_spare();
    loop {
        if sh.quit.load(Ordering::SeqCst) {
            return;
        }
        if next_region.is_none() {
            next_region = ClientRegion::create().ok();
        }
        // Which client each pollfd after the first two belongs to.
        let mut owners = Vec::new();
        let mut fds = vec![pollfd(sh.wake.as_raw_fd()), pollfd(listener.as_raw_fd())];
        {
            let c = lock(&sh.conns);
            for (&id, conn) in &c.live {
                fds.push(pollfd(conn.stream.as_raw_fd()));
                owners.push(id);
                if let Some(p) = &conn.pidfd {
                    fds.push(pollfd(p.as_raw_fd()));
                    owners.push(id);
                }
            }
        }
        // SAFETY: polling valid descriptors (owned by `sh.conns`, which only this thread
        // removes from, the listener and the eventfd), without a timeout.
        let r = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, -1) };
        if r < 0 {
            // EINTR (a signal): look at the stop flag again.
            continue;
        }
        if fds[0].revents != 0 {
            let mut v = 0u64;
            // SAFETY: draining the eventfd counter into a local u64.
            unsafe {
                libc::read(
                    sh.wake.as_raw_fd(),
                    &mut v as *mut u64 as *mut libc::c_void,
                    8,
                )
            };
        }
        let mut gone = Vec::new();
        for (i, id) in owners.iter().enumerate() {
            let p = &fds[i + 2];
            if p.revents == 0 || gone.contains(id) {
                continue;
            }
            let c = lock(&sh.conns);
            let dead = match c.live.get(id) {
                // The pidfd is readable: the process has exited.
                Some(conn) if p.fd != conn.stream.as_raw_fd() => true,
                Some(conn) => socket_closed(&conn.stream),
                None => false,
            };
            if dead {
                gone.push(*id);
            }
        }
        if !gone.is_empty() {
            let mut c = lock(&sh.conns);
            for id in gone {
                if let Some(conn) = c.live.remove(&id) {
                    c.dead.push((id, conn.index));
                    c.version += 1;
                }
            }
            drop(c);
            sh.ring();
        }
        if fds[1].revents != 0 {
            loop {
                match listener.accept() {
                    Ok((stream, _)) => accept(
                        stream,
                        sh,
                        common_fd,
                        wake_fd,
                        pool_path,
                        next_region.take(),
                        log,
                    ),
                    Err(e) if matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)) => {
                        if !refuse_for_descriptors(listener, &mut spare, log) {
                            break;
                        }
                    }
                    Err(_) => break,
                }
            }
        }
    }
}

fn open_spare() -> Option<OwnedFd> {
    std::fs::File::open("/dev/null").ok().map(OwnedFd::from)
}

/// Out of descriptors: give up the spare one to accept the waiting client, tell it why it
/// is refused, and take the spare back. False if there was no spare (the client then waits
/// for a descriptor to come free).
fn refuse_for_descriptors(
    listener: &UnixListener,
    spare: &mut Option<OwnedFd>,
    log: &(dyn Fn(&str) + Sync),
) -> bool {
    if spare.take().is_none() {
        *spare = open_spare();
        // Still none: look again in a moment rather than spin on the readable listener.
        std::thread::sleep(std::time::Duration::from_millis(10));
        return false;
    }
    if let Ok((stream, _)) = listener.accept() {
        let why = "the daemon has no file descriptors left for another client (RLIMIT_NOFILE)";
        log(why);
        handshake::send_refusal(&stream, why);
    }
    *spare = open_spare();
    true
}

fn accept(
    stream: UnixStream,
    sh: &Shared<'_>,
    common_fd: &OwnedFd,
    wake_fd: &OwnedFd,
    pool_path: &Path,
    region: Option<OwnedFd>,
    log: &(dyn Fn(&str) + Sync),
) {
    let _ = stream.set_nonblocking(false);
    // Logged, and told to the client, which may have no way to read the log (a daemon
    // `engram run` started has none).
    let refuse = |why: String| {
        handshake::send_refusal(&stream, &why);
        log(&format!("refused {why}"));
    };
    let (creds, pid) = match handshake::peer_creds(&stream) {
        Ok(c) => c,
        Err(e) => {
            return refuse(format!("a client: cannot read its credentials: {e}"));
        }
    };
    // Permissions are read at each connection: chmod of the pool file takes effect at once.
    let file = std::fs::metadata(&sh.given_path);
    if !file
        .as_ref()
        .is_ok_and(|m| (m.dev(), m.ino()) == sh.pool_file)
    {
        return refuse(format!(
            "pid {pid}: {} is no longer the pool file this daemon serves (deleted or \
             replaced); start a daemon for the new file once this one has stopped",
            sh.given_path.display()
        ));
    }
    let allowed = file.map(|m| may_use(&creds, &m)).unwrap_or(false);
    if !allowed {
        return refuse(format!(
            "pid {pid}: uid {} may not read and write the pool file {}",
            creds.uid,
            sh.given_path.display()
        ));
    }
    let mut c = lock(&sh.conns);
    let Some(index) = c.free.pop() else {
        return refuse(format!(
            "pid {pid}: too many clients ({})",
            shm::MAX_CLIENTS
        ));
    };
    let id = c.next_id;
    c.next_id += 1;
    let hello = Hello {
        client_id: id,
        index: index as u64,
        pool_path: pool_path.as_os_str().as_bytes().to_vec(),
    };
    // Without a pidfd (a kernel before 5.3) the socket alone tells that the client left;
    // out of descriptors, the client is told so.
    let pidfd = match pidfd_open(pid) {
        Ok(fd) => Some(fd),
        Err(e) if out_of_descriptors(&e) => {
            c.free.push(index);
            return refuse(format!(
                "pid {pid}: the daemon has no file descriptors left: {e}"
            ));
        }
        Err(_) => None,
    };
    // The client's own region: mapped at its place in the server's area before the client
    // can pin an epoch in it, then handed over with the common and wake regions.
    let region = region
        .map_or_else(ClientRegion::create, Ok)
        .and_then(|fd| sh.area.install(index, &fd).map(|()| fd));
    let region = match region {
        Ok(fd) => fd,
        Err(e) => {
            let _ = sh.area.clear(index);
            c.free.push(index);
            return refuse(format!("pid {pid}: cannot make its shared region: {e}"));
        }
    };
    let fds = [
        common_fd.as_raw_fd(),
        region.as_raw_fd(),
        wake_fd.as_raw_fd(),
    ];
    if let Err(e) = handshake::send_hello(&stream, &hello, fds) {
        let _ = sh.area.clear(index);
        c.free.push(index);
        return log(&format!("handshake with pid {pid} failed: {e}"));
    }
    if sh.log_clients {
        log(&format!(
            "client {id} connected (pid {pid}, uid {})",
            creds.uid
        ));
    }
    c.live.insert(
        id,
        Conn {
            index,
            creds,
            stream,
            pidfd,
            pid: pid as u32,
        },
    );
    c.version += 1;
    drop(c);
    sh.ring();
}

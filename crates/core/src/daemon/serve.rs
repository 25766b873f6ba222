//! The server side of the daemon: accept clients on a Unix socket, serve their requests from
//! shared memory, clean up after clients that go away.

use super::handshake::{self, Hello};
use super::shm::{self, REPLY, REQUEST, SLOTS_PER_CLIENT, Shm};
use crate::error::{Error, Result};
use crate::perm::Creds;
use crate::recovery;
use crate::server::{ClientId, Server, Shared};
use crate::wire::{self, Writer};
use engram_pmem::Pool;
use std::collections::HashMap;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Clone, Debug)]
pub struct ServeOptions {
    pub socket: PathBuf,
    /// Exit after this long with no client (the daemons `engram run` starts).
    pub idle_exit: Option<Duration>,
}

struct Conn {
    index: usize,
    creds: Creds,
    stream: UnixStream,
}

#[derive(Default)]
struct Conns {
    live: HashMap<ClientId, Conn>,
    dead: Vec<(ClientId, usize)>,
    free: Vec<usize>,
    next_id: ClientId,
    /// Bumped whenever `live` changes, so the server loop refreshes its list.
    version: u64,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Whether `c` may read and write the pool file.
fn may_use(c: &Creds, meta: &std::fs::Metadata) -> bool {
    let mode = meta.mode();
    c.is_root()
        || (c.uid == meta.uid() && mode & 0o600 == 0o600)
        || (c.uid != meta.uid() && c.in_group(meta.gid()) && mode & 0o060 == 0o060)
        || (c.uid != meta.uid() && !c.in_group(meta.gid()) && mode & 0o006 == 0o006)
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
    let l = UnixListener::bind(socket).map_err(|e| {
        Error::with_msg(
            crate::error::io_errno(&e),
            format!("cannot listen on {}: {e}", socket.display()),
        )
    })?;
    l.set_nonblocking(true)?;
    // Anyone may knock; the server decides from the peer's credentials (SO_PEERCRED) and
    // the pool file's permissions whom to serve.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(socket, std::fs::Permissions::from_mode(0o666))?;
    Ok(l)
}

/// Serve the pool until `stop` is set (or, with `idle_exit`, until idle that long), then
/// checkpoint and mark the pool clean.
pub fn serve(
    pool_path: &Path,
    opts: &ServeOptions,
    stop: &AtomicBool,
    log: &(dyn Fn(&str) + Sync),
) -> Result<()> {
    let pool = Pool::open(pool_path)
        .map_err(|e| Error::with_msg(crate::error::io_errno(&e), e.to_string()))?;
    pool.try_lock_exclusive().map_err(|_| {
        Error::with_msg(
            libc::EBUSY,
            format!("pool {} is in use by another process", pool_path.display()),
        )
    })?;
    let abs_path = std::fs::canonicalize(pool_path)?;
    let m = recovery::mount(&pool)?;
    if !m.was_clean {
        log(&format!(
            "recovered: {} log records replayed, {} orphans freed",
            m.replayed, m.orphans_freed
        ));
    }
    let (shm, memfd) = Shm::create(m.sb.geometry.inode_count)?;
    let server_epochs = shm.epochs(None);
    let shared = Arc::new(Shared {
        epochs: shm.epochs(None),
        seqs: shm.seqs(),
    });
    let mut server = Server::start(Arc::new(pool), m.sb, m.alloc, m.head, shared);
    let listener = bind(&opts.socket)?;
    log(&format!(
        "serving {} on {}",
        pool_path.display(),
        opts.socket.display()
    ));
    let conns = Mutex::new(Conns {
        free: (0..shm::MAX_CLIENTS).rev().collect(),
        next_id: 1,
        ..Conns::default()
    });
    let result = std::thread::scope(|scope| {
        let watcher = scope.spawn(|| watch(&listener, &conns, &shm, &memfd, &abs_path, stop, log));
        let r = run_loop(
            &mut server,
            &shm,
            &server_epochs,
            &conns,
            stop,
            opts.idle_exit,
            log,
        );
        stop.store(true, Ordering::SeqCst);
        let _ = watcher.join();
        r
    });
    let _ = std::fs::remove_file(&opts.socket);
    server.shutdown()?;
    log("pool checkpointed and marked clean; daemon stopped");
    result
}

/// Accept new clients and notice departed ones.
#[allow(clippy::too_many_arguments)]
fn watch(
    listener: &UnixListener,
    conns: &Mutex<Conns>,
    shm: &Shm,
    memfd: &OwnedFd,
    pool_path: &Path,
    stop: &AtomicBool,
    log: &(dyn Fn(&str) + Sync),
) {
    while !stop.load(Ordering::SeqCst) {
        let (ids, mut fds): (Vec<ClientId>, Vec<libc::pollfd>) = {
            let c = lock(conns);
            c.live
                .iter()
                .map(|(&id, conn)| {
                    (
                        id,
                        libc::pollfd {
                            fd: conn.stream.as_raw_fd(),
                            events: libc::POLLIN,
                            revents: 0,
                        },
                    )
                })
                .unzip()
        };
        fds.push(libc::pollfd {
            fd: listener.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        });
        // SAFETY: polling valid descriptors owned by `conns` and the listener for 200 ms.
        unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, 200) };
        for (i, id) in ids.iter().enumerate() {
            if fds[i].revents != 0 {
                let mut c = lock(conns);
                let gone = match c.live.get(id) {
                    Some(conn) => {
                        let mut b = [0u8; 64];
                        // SAFETY: a non-blocking read into a local buffer.
                        let n = unsafe {
                            libc::recv(
                                conn.stream.as_raw_fd(),
                                b.as_mut_ptr() as *mut libc::c_void,
                                b.len(),
                                libc::MSG_DONTWAIT,
                            )
                        };
                        n == 0
                            || (n < 0
                                && std::io::Error::last_os_error().kind()
                                    != std::io::ErrorKind::WouldBlock)
                    }
                    None => false,
                };
                if gone && let Some(conn) = c.live.remove(id) {
                    c.dead.push((*id, conn.index));
                    c.version += 1;
                    drop(c);
                    ring(shm);
                }
            }
        }
        while let Ok((stream, _)) = listener.accept() {
            accept(stream, conns, shm, memfd, pool_path, log);
        }
    }
}

fn ring(shm: &Shm) {
    shm.doorbell().fetch_add(1, Ordering::SeqCst);
    shm::futex_wake(shm.doorbell());
}

fn accept(
    stream: UnixStream,
    conns: &Mutex<Conns>,
    shm: &Shm,
    memfd: &OwnedFd,
    pool_path: &Path,
    log: &(dyn Fn(&str) + Sync),
) {
    let _ = stream.set_nonblocking(false);
    let (creds, pid) = match handshake::peer_creds(&stream) {
        Ok(c) => c,
        Err(e) => {
            return log(&format!(
                "refused a client: cannot read its credentials: {e}"
            ));
        }
    };
    // Permissions are read at each connection: chmod of the pool file takes effect at once.
    let allowed = std::fs::metadata(pool_path)
        .map(|m| may_use(&creds, &m))
        .unwrap_or(false);
    if !allowed {
        return log(&format!(
            "refused pid {pid}: uid {} may not use the pool file",
            creds.uid
        ));
    }
    let mut c = lock(conns);
    let Some(index) = c.free.pop() else {
        return log(&format!(
            "refused pid {pid}: too many clients ({})",
            shm::MAX_CLIENTS
        ));
    };
    let id = c.next_id;
    c.next_id += 1;
    for i in 0..SLOTS_PER_CLIENT {
        shm.slot(index, i).reset();
    }
    shm.epochs(None).clear(Shm::epoch_range(index));
    let hello = Hello {
        client_id: id,
        index: index as u64,
        pool_path: pool_path.as_os_str().as_bytes().to_vec(),
    };
    if let Err(e) = handshake::send_hello(&stream, &hello, memfd.as_raw_fd()) {
        c.free.push(index);
        return log(&format!("handshake with pid {pid} failed: {e}"));
    }
    log(&format!(
        "client {id} connected (pid {pid}, uid {})",
        creds.uid
    ));
    c.live.insert(
        id,
        Conn {
            index,
            creds,
            stream,
        },
    );
    c.version += 1;
}

/// Serve requests until stopped.
fn run_loop(
    server: &mut Server,
    shm: &Shm,
    epochs: &crate::epoch::Epochs,
    conns: &Mutex<Conns>,
    stop: &AtomicBool,
    idle_exit: Option<Duration>,
    log: &(dyn Fn(&str) + Sync),
) -> Result<()> {
    let mut clients: Vec<(ClientId, usize, Creds)> = Vec::new();
    let mut seen_version = u64::MAX;
    let mut idle_spins = 0u32;
    let mut last_client = Instant::now();
    let mut buf = Writer::default();
    while !stop.load(Ordering::SeqCst) {
        {
            let mut c = lock(conns);
            for (id, index) in std::mem::take(&mut c.dead) {
                server.disconnect(id);
                epochs.clear(Shm::epoch_range(index));
                for i in 0..SLOTS_PER_CLIENT {
                    shm.slot(index, i).reset();
                }
                c.free.push(index);
                log(&format!("client {id} disconnected"));
            }
            if c.version != seen_version {
                seen_version = c.version;
                clients = c
                    .live
                    .iter()
                    .map(|(&id, conn)| (id, conn.index, conn.creds.clone()))
                    .collect();
            }
        }
        if !clients.is_empty() {
            last_client = Instant::now();
        } else if idle_exit.is_some_and(|d| last_client.elapsed() >= d) {
            log("idle with no clients: exiting");
            break;
        }
        let served = serve_slots(server, shm, &clients, &mut buf);
        if served {
            idle_spins = 0;
            continue;
        }
        idle_spins += 1;
        if idle_spins < 2000 {
            std::hint::spin_loop();
            continue;
        }
        // Sleep on the doorbell; scan once more after announcing it so that no request
        // posted in between waits for the timeout.
        let seen = shm.doorbell().load(Ordering::SeqCst);
        shm.server_sleeping().store(1, Ordering::SeqCst);
        if !serve_slots(server, shm, &clients, &mut buf) {
            shm::futex_wait(shm.doorbell(), seen, Duration::from_millis(500));
        }
        shm.server_sleeping().store(0, Ordering::SeqCst);
        idle_spins = 0;
    }
    Ok(())
}

/// Handle every posted request once; returns whether there were any.
fn serve_slots(
    server: &mut Server,
    shm: &Shm,
    clients: &[(ClientId, usize, Creds)],
    buf: &mut Writer,
) -> bool {
    let mut any = false;
    for (id, index, creds) in clients {
        for i in 0..SLOTS_PER_CLIENT {
            let slot = shm.slot(*index, i);
            if slot.state().load(Ordering::Acquire) != REQUEST {
                continue;
            }
            any = true;
            let result =
                wire::decode_request(&slot.get()).and_then(|req| server.handle(*id, creds, req));
            buf.0.clear();
            wire::encode_reply(&result, buf);
            if slot.put(&buf.0).is_err() {
                buf.0.clear();
                wire::encode_reply(&Err(Error::with_msg(libc::E2BIG, "reply too large")), buf);
                let _ = slot.put(&buf.0);
            }
            slot.state().store(REPLY, Ordering::SeqCst);
            if slot.waiting().load(Ordering::SeqCst) != 0 {
                shm::futex_wake(slot.state());
            }
        }
    }
    any
}

//! The client side and the public Rust API: `Fs` opens a pool, resolves paths and reads
//! metadata and data directly (lock-free), writes file data into reserved pages, and sends
//! small requests to the server through the transport.

mod calls;
#[cfg(test)]
mod epoch_tests;
mod file;
mod forks;
mod handle_ops;
mod metadata;
mod open;
mod ops;
mod path;
mod readdir;
mod reserve;

pub use file::{ATOMIC_WRITE_MAX, File, OpenOptions, Written};
pub use metadata::Metadata;
pub use open::Opened;
pub(crate) use open::special_open_error;
pub use readdir::{DirEntry, ReadDir};

use crate::epoch::{Epochs, SeqTable};
use crate::error::{Error, Result};
use crate::fasthash::FastMap;
use crate::inode::{self, InodeData};
use crate::inode_bits::InodeBits;
use crate::layout::{Geometry, Superblock};
use crate::perm::Creds;
use crate::range_lock::RangeLock;
use crate::recovery;
use crate::request::{Request, Response};
use crate::server::{ClientId, FsckReport, Server, Shared};
use engram_pmem::{Media, Pool};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize};
use std::sync::{Arc, Mutex, MutexGuard};

/// Concurrent readers that can be pinned at once.
const EPOCH_SLOTS: usize = 256;
const IN_PROCESS_CLIENT: ClientId = 1;

/// How to open a pool.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// Act as these credentials (default: the process's effective ones).
    pub creds: Option<Creds>,
    /// Where `Fs::open` reports what it found and could not mend (a mapping's stores it
    /// could not write back), one line each; standard error if not set. The shim gives
    /// its own, which writes with the real `write(2)`: its standard error may be a file
    /// of this very pool, whose interposed write would need the connection being made.
    pub warn: Option<fn(&str)>,
}

/// What mounting found.
#[derive(Clone, Debug)]
pub struct MountInfo {
    pub media: Media,
    pub was_clean: bool,
    pub replayed: u64,
    pub orphans_freed: u64,
    pub problems: Vec<String>,
    /// What the open set right that is no inconsistency (`recovery::Mounted::repaired`).
    pub repaired: Vec<String>,
    pub geometry: Geometry,
    /// The number naming the pool's side files (`sidefiles::pool_id` of its canonical
    /// path), for a pool opened by its path or through a daemon.
    pub side_files: Option<u64>,
}

/// How requests reach the server. The daemon adds a shared-memory transport beside this one.
enum Transport {
    InProcess(Box<Mutex<Server>>),
    /// Requests go to an `engram serve` daemon through shared memory.
    Remote(crate::daemon::Remote),
}

pub(crate) struct Core {
    pub pool: Arc<Pool>,
    pub geo: Geometry,
    pub shared: Arc<Shared>,
    transport: Transport,
    reserve: Mutex<Vec<u64>>,
    /// Files of this process open for writing: when the last closes, a daemon's client
    /// gives its reserved pages back (`close_handle`).
    writers: AtomicUsize,
    /// The server's last reservation answer gave fewer pages than asked: free pages are
    /// short, and an idle client's reservation is given back (`give_back_reservation`).
    tight: AtomicBool,
    locks: Mutex<FastMap<u64, Arc<RangeLock>>>,
    info: MountInfo,
    /// The fork generation of the process that made it (`forks.rs`): a forked child takes
    /// no reserved page, and gives none back.
    born: u64,
}

/// An open EngramFS pool. Cheap to clone; the pool is unmounted cleanly when the last clone
/// (and the last open file) is dropped, or by `unmount`.
#[derive(Clone)]
pub struct Fs {
    pub(crate) core: Arc<Core>,
    creds: Arc<Creds>,
    /// Path walks stop where a process's namespace would leave the pool (see
    /// `Fs::staying_inside`).
    stay_inside: bool,
    /// Paths may be PATH_MAX long or longer (see `Fs::without_path_limit`).
    long_paths: bool,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Fs {
    /// Format a new pool file of `size` bytes (replacing whatever the file held).
    pub fn mkfs(path: impl AsRef<Path>, size: u64) -> Result<()> {
        Fs::mkfs_with(path, Geometry::for_size(size)?)
    }

    /// `mkfs` with a layout of the caller's (`Geometry::with_meta_ratio`).
    pub fn mkfs_with(path: impl AsRef<Path>, geo: Geometry) -> Result<()> {
        let size = geo.pool_size;
        let pool = Pool::create(path.as_ref(), size).map_err(|e| {
            Error::with_msg(
                crate::error::io_errno(&e),
                format!("cannot create pool: {e}"),
            )
        })?;
        crate::mkfs::format(&pool, &geo);
        pool.sync_point().map_err(|e| {
            Error::with_msg(libc::EIO, format!("cannot write the new pool back: {e}"))
        })?;
        // The side files in /dev/shm named after this path are an earlier pool's (deleted,
        // or formatted over): none of its inodes lives on in this one. Left, they would
        // tie this pool's locks to processes still holding the old pool's files.
        crate::sidefiles::remove_all(path.as_ref());
        Ok(())
    }

    /// Open (and if needed recover) a pool file. Fails with EBUSY if another process has it.
    pub fn open(path: impl AsRef<Path>, opts: &Options) -> Result<Fs> {
        let path = path.as_ref();
        let mut pool = Pool::open(path)
            .map_err(|e| Error::with_msg(crate::error::io_errno(&e), e.to_string()))?;
        // The pool's descriptor (it carries the lock) stays open for as long as the pool is
        // mounted: kept above the small numbers, which a program that opens the pool in
        // its own process (the shim) expects to get for its own files.
        pool.keep_descriptor_at_or_above(crate::daemon::MIN_FD);
        pool.try_lock_exclusive()
            .map_err(|e| crate::error::pool_busy(path, &e))?;
        let canonical = std::fs::canonicalize(path);
        // Side files are named after the canonical path (or the path as given, if it has
        // gone meanwhile: then only dead ones can be named after it).
        let id = crate::sidefiles::pool_id(canonical.as_deref().unwrap_or(path));
        let fs = Fs::open_mapped(pool, opts, Some(id))?;
        let map_files = crate::sidefiles::remove_dead(id, &fs.core.pool, &fs.core.geo);
        if let (Ok(_), Transport::InProcess(m)) = (&canonical, &fs.core.transport) {
            let failed = {
                let mut server = lock(m);
                server.use_side_files(id, &map_files);
                server.take_backing_errors()
            };
            // With the server's lock given up: stderr may be a file of this very pool.
            for e in failed {
                match opts.warn {
                    Some(warn) => warn(&e),
                    None => eprintln!("engram: {e}"),
                }
            }
        }
        Ok(fs)
    }

    /// Open an already mapped pool (a file, or memory in tests and the crash harness).
    pub fn open_pool(pool: Pool, opts: &Options) -> Result<Fs> {
        Fs::open_mapped(pool, opts, None)
    }

    /// `open_pool`, for a pool whose side files are named `side_files`.
    fn open_mapped(pool: Pool, opts: &Options, side_files: Option<u64>) -> Result<Fs> {
        let pool = Arc::new(pool);
        let m = recovery::mount(&pool)?;
        let geo = m.sb.geometry;
        let shared = Arc::new(Shared {
            epochs: Epochs::new(EPOCH_SLOTS),
            seqs: SeqTable::new(geo.inode_count),
            mapped: InodeBits::new(geo.inode_count),
            several_writers: InodeBits::new(geo.inode_count),
            mapped_live: InodeBits::new(geo.inode_count),
        });
        let info = MountInfo {
            media: pool.media(),
            was_clean: m.was_clean,
            replayed: m.replayed,
            orphans_freed: m.orphans_freed,
            problems: m.problems,
            repaired: m.repaired,
            geometry: geo,
            side_files,
        };
        let server = Server::start(pool.clone(), m.sb, m.alloc, m.head, shared.clone());
        Ok(Fs {
            core: Arc::new(Core {
                pool,
                geo,
                shared,
                transport: Transport::InProcess(Box::new(Mutex::new(server))),
                reserve: Mutex::new(Vec::new()),
                writers: AtomicUsize::new(0),
                tight: AtomicBool::new(false),
                locks: Mutex::new(FastMap::default()),
                info,
                born: forks::generation(),
            }),
            creds: Arc::new(opts.creds.clone().unwrap_or_else(Creds::current)),
            stay_inside: false,
            long_paths: false,
        })
    }

    /// Connect to an `engram serve` daemon. The pool is mapped with its metadata and log
    /// read-only: a stray store there faults in this process and cannot corrupt the pool.
    pub fn connect(socket: impl AsRef<Path>) -> Result<Fs> {
        use std::os::unix::ffi::OsStrExt;
        let remote = crate::daemon::Remote::connect(socket.as_ref())?;
        let path = std::ffi::OsStr::from_bytes(&remote.hello.pool_path).to_owned();
        let mut pool = Pool::open(Path::new(&path)).map_err(|e| {
            Error::with_msg(
                crate::error::io_errno(&e),
                format!("cannot map pool {}: {e}", Path::new(&path).display()),
            )
        })?;
        pool.keep_descriptor_at_or_above(crate::daemon::MIN_FD);
        // While this mapping lives, in this process or a child, no later daemon or opener
        // may reuse the pool: this process can store into the pages it reserved.
        pool.hold_as_client().map_err(|e| {
            Error::with_msg(
                crate::error::io_errno(&e),
                format!(
                    "cannot mark pool {} as mapped: {e}",
                    Path::new(&path).display()
                ),
            )
        })?;
        let sb = Superblock::load(&pool)?;
        let geo = sb.geometry;
        pool.protect_read_only(0, geo.data_off)?;
        let shared = Arc::new(Shared {
            epochs: remote.epochs(),
            seqs: remote.seqs(),
            mapped: remote.mapped(),
            several_writers: remote.several_writers(),
            mapped_live: remote.mapped_live(),
        });
        let info = MountInfo {
            media: pool.media(),
            was_clean: true,
            replayed: 0,
            orphans_freed: 0,
            problems: Vec::new(),
            repaired: Vec::new(),
            geometry: geo,
            side_files: Some(crate::sidefiles::pool_id(Path::new(&path))),
        };
        Ok(Fs {
            core: Arc::new(Core {
                pool: Arc::new(pool),
                geo,
                shared,
                transport: Transport::Remote(remote),
                reserve: Mutex::new(Vec::new()),
                writers: AtomicUsize::new(0),
                tight: AtomicBool::new(false),
                locks: Mutex::new(FastMap::default()),
                info,
                born: forks::generation(),
            }),
            creds: Arc::new(Creds::current()),
            stay_inside: false,
            long_paths: false,
        })
    }

    /// Read the superblock of a pool file without opening it for use.
    pub fn superblock(path: impl AsRef<Path>) -> Result<Superblock> {
        let pool = Pool::open(path.as_ref())?;
        Superblock::load(&pool)
    }

    /// The daemon connection, when connected (tests use it to send forged requests).
    pub fn remote(&self) -> Option<&crate::daemon::Remote> {
        match &self.core.transport {
            Transport::Remote(r) => Some(r),
            Transport::InProcess(_) => None,
        }
    }

    /// The mapped pool (for tools such as the crash harness).
    pub fn pool(&self) -> &Arc<Pool> {
        &self.core.pool
    }

    /// The descriptors this file system keeps open: the pool file's, and through a daemon
    /// the connection's (a program that closes descriptors it did not open, such as
    /// the LD_PRELOAD shim's host program, must be kept from these).
    pub fn descriptors(&self) -> Vec<std::os::fd::RawFd> {
        let mut v: Vec<_> = self.core.pool.descriptor().into_iter().collect();
        if let Transport::Remote(r) = &self.core.transport {
            v.extend(r.descriptors());
        }
        v
    }

    /// Byte ranges of the pool committed records stored to in place and the server has not
    /// written back yet (the log covers them until a durability point: `oplog::Unflushed`).
    /// In-process only (empty through the daemon); the crash harness checks that nothing
    /// else is left unflushed after an operation.
    pub fn write_back_pending(&self) -> Vec<(u64, u64)> {
        match &self.core.transport {
            Transport::InProcess(m) => self
                .server(m)
                .map_or_else(|_| Vec::new(), |s| s.write_back_pending()),
            Transport::Remote(_) => Vec::new(),
        }
    }

    pub fn mount_info(&self) -> &MountInfo {
        &self.core.info
    }

    pub fn creds(&self) -> &Creds {
        &self.creds
    }

    /// This process changed its credentials (setuid, setgroups, …): the pool acting as
    /// `creds` (what the process reads of its own) from now on; a daemon reads them from
    /// the kernel (`Request::CredsChanged`). Files open before keep the access they were
    /// opened with, as on Linux.
    pub fn with_own_creds(&self, creds: Creds) -> Result<Fs> {
        if let Transport::Remote(r) = &self.core.transport {
            r.call(&Request::CredsChanged)?;
        }
        Ok(self.with_creds(creds))
    }

    /// The same pool acting as other credentials (for permission checks).
    pub fn with_creds(&self, creds: Creds) -> Fs {
        Fs {
            core: self.core.clone(),
            creds: Arc::new(creds),
            stay_inside: self.stay_inside,
            long_paths: self.long_paths,
        }
    }

    /// Log activity since the pool was opened.
    pub fn stats(&self) -> crate::server::ServerStats {
        match self.call(Request::Stats) {
            Ok(Response::Stats(s)) => s,
            _ => crate::server::ServerStats::default(),
        }
    }

    /// Check every invariant (and repair counts and leaks if asked).
    pub fn fsck(&self, repair: bool) -> Result<FsckReport> {
        self.flush_reservation()?;
        match self.call(Request::Fsck { repair })? {
            Response::Fsck(r) => Ok(r),
            _ => Err(Error::EIO),
        }
    }

    /// Unmount cleanly now (in-process), or leave the daemon (connected). Files still open
    /// keep their handles, but nothing else may use the pool afterwards.
    pub fn unmount(self) -> Result<()> {
        self.flush_reservation()?;
        match &self.core.transport {
            Transport::InProcess(m) => self.server(m)?.shutdown(),
            Transport::Remote(_) => Ok(()),
        }
    }

    /// Whether other processes write this pool too (through the daemon).
    pub(crate) fn pool_is_shared(&self) -> bool {
        !matches!(self.core.transport, Transport::InProcess(_))
    }

    pub(crate) fn range_lock(&self, ino: u64) -> Arc<RangeLock> {
        lock(&self.core.locks).entry(ino).or_default().clone()
    }

    /// Drop the map's entry for an inode once only the map and `held` (being dropped)
    /// refer to its lock, so the map does not grow with every file ever opened.
    pub(crate) fn forget_range_lock(&self, ino: u64, held: &Arc<RangeLock>) {
        let mut map = lock(&self.core.locks);
        if Arc::strong_count(held) <= 2 {
            map.remove(&ino);
        }
    }

    /// Read an inode consistently (retrying while the server changes it).
    pub(crate) fn read_inode(&self, ino: u64) -> InodeData {
        self.read_inode_at(ino).0
    }

    /// `read_inode` and the inode's counter value it was read at (to check later that
    /// nothing changed it since).
    pub(crate) fn read_inode_at(&self, ino: u64) -> (InodeData, u64) {
        let seq = self.core.shared.seqs.counter(ino);
        loop {
            let s = seq.begin();
            let d = inode::read(&self.core.pool, &self.core.geo, ino);
            if seq.ok(s) {
                return (d, s);
            }
        }
    }
}

impl Core {
    /// Whether this process is a fork of the one that made it (`forks.rs`).
    fn forked(&self) -> bool {
        forks::generation() != self.born
    }
}

impl Drop for Core {
    fn drop(&mut self) {
        // A forked child's copy: the parent's reservation, and in-process the parent's
        // server, whose shutdown would write over the parent's pool. Nothing to do.
        if self.forked() {
            return;
        }
        let pages = std::mem::take(&mut *lock(&self.reserve));
        match &self.transport {
            Transport::InProcess(m) => {
                let mut server = lock(m);
                if !pages.is_empty() {
                    let _ = server.handle(
                        IN_PROCESS_CLIENT,
                        &Creds::root(),
                        Request::Unreserve { pages },
                    );
                }
                let _ = server.shutdown();
                // Release the pool's lock now: a child forked by another thread shares the
                // open file (and so the lock) until it execs, and would keep the pool "in
                // use" for a moment after this unmount.
                let _ = self.pool.unlock();
            }
            Transport::Remote(r) => {
                if !pages.is_empty() {
                    let _ = r.call(&Request::Unreserve { pages });
                }
            }
        }
    }
}

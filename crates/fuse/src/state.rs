//! What the FUSE front end keeps between requests: the inodes the kernel knows (with their
//! generations), the open files behind each FUSE file handle, credential views, and I/O
//! counters.
//!
//! # Inode numbers and generations
//!
//! The FUSE node id is the EngramFS inode number (stable across remounts; the root is inode 1,
//! which is `FUSE_ROOT_ID`). A slot can be reused once its inode is freed, so each reply
//! carries the inode's generation, and requests are resolved against the generation the
//! kernel was told (kept here with the kernel's lookup count until it forgets the inode):
//! a request for a freed or reused slot then fails with ESTALE instead of reaching another
//! file.
//!
//! # Credentials
//!
//! Permission checks are done twice. The mount uses `default_permissions`, so the kernel
//! checks every access against the attributes we report, with the caller's full credentials
//! (fsuid, all supplementary groups, capabilities such as CAP_DAC_OVERRIDE and CAP_FOWNER,
//! the sticky bit, `protected_hardlinks`) before a request reaches us; the kernel is the
//! authority. Requests that change the tree are then sent to the engine as the caller
//! (`Fs::with_creds`): new inodes must belong to the caller's fsuid/fsgid, and the engine's
//! own checks stay a second line of defence. The FUSE header has no supplementary groups,
//! so they are read from `/proc/PID/status` of the calling thread (for non-root callers
//! only; root passes every engine check anyway). Where the kernel has already authorised
//! something that the engine's mode-bit check would refuse (writing to a file just created
//! with a mode that forbids it, `ftruncate` on a descriptor opened for writing, the kernel
//! clearing set-user-ID after a write), the request goes through a root view.
//!
//! A pool reached through an `engram serve` daemon (`Fs::connect`) is different: the daemon
//! acts with the credentials of the connection (this process), so files created through
//! such a mount belong to the user running the mount; the kernel's checks still apply.

use engram_core::{Creds, Error, File, Fs, Handle, Metadata};
use fuser::{Errno, FileAttr, FileType, INodeNo, Request};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub(crate) type Result<T> = std::result::Result<T, Error>;

/// How long the kernel may trust an attribute or a name (positive or negative) without
/// asking again. A pool opened by this process (`Fs::open`) is locked for the whole mount,
/// so every change reaches it through this mount and the kernel sees (and invalidates on)
/// each of them: any TTL would be coherent. One second keeps `stat`-heavy tools (git, find,
/// make) from calling us for every repeated lookup, and bounds how stale a name or an
/// attribute can be when the pool is shared through an `engram serve` daemon
/// (`Fs::connect`), whose other clients change it behind the kernel's back.
pub(crate) const TTL: Duration = Duration::from_secs(1);

/// The preferred I/O size reported as `st_blksize`: the largest FUSE write, so that `cp`
/// and friends (which size their buffers from it) send 1 MiB writes rather than 128 KiB.
pub(crate) const IO_SIZE: u32 = 1 << 20;

/// The FUSE root node id; EngramFS's root inode has the same number.
pub(crate) const ROOT: u64 = 1;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Request and byte counts of the data path.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IoStats {
    pub reads: u64,
    pub writes: u64,
    pub bytes_read: u64,
    pub bytes_written: u64,
    /// The largest single FUSE read and write seen.
    pub max_read: u64,
    pub max_write: u64,
}

#[derive(Default)]
pub(crate) struct IoCounters {
    reads: AtomicU64,
    writes: AtomicU64,
    bytes_read: AtomicU64,
    bytes_written: AtomicU64,
    max_read: AtomicU64,
    max_write: AtomicU64,
}

impl IoCounters {
    pub(crate) fn read(&self, n: usize) {
        self.reads.fetch_add(1, Ordering::Relaxed);
        self.bytes_read.fetch_add(n as u64, Ordering::Relaxed);
        self.max_read.fetch_max(n as u64, Ordering::Relaxed);
    }

    pub(crate) fn write(&self, n: usize) {
        self.writes.fetch_add(1, Ordering::Relaxed);
        self.bytes_written.fetch_add(n as u64, Ordering::Relaxed);
        self.max_write.fetch_max(n as u64, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self) -> IoStats {
        IoStats {
            reads: self.reads.load(Ordering::Relaxed),
            writes: self.writes.load(Ordering::Relaxed),
            bytes_read: self.bytes_read.load(Ordering::Relaxed),
            bytes_written: self.bytes_written.load(Ordering::Relaxed),
            max_read: self.max_read.load(Ordering::Relaxed),
            max_write: self.max_write.load(Ordering::Relaxed),
        }
    }
}

/// Inodes the kernel holds: generation and lookup count.
#[derive(Default)]
struct Nodes {
    map: Mutex<HashMap<u64, (u32, u64)>>,
}

/// Credential views of the pool, by (uid, gid, groups).
type Views = HashMap<(u32, u32, Vec<u32>), Fs>;

/// The state behind the mount.
pub(crate) struct EngramFuse {
    /// The pool acting as root: lookups, stat, and what the kernel already authorised.
    pub(crate) root: Fs,
    pub(crate) read_only: bool,
    /// Other processes may change the pool (it is served by a daemon): file data must not
    /// outlive an open in the page cache.
    pub(crate) shared: bool,
    nodes: Nodes,
    files: Mutex<HashMap<u64, Arc<File>>>,
    next_fh: AtomicU64,
    views: Mutex<Views>,
    pub(crate) io: Arc<IoCounters>,
}

impl EngramFuse {
    pub(crate) fn new(fs: &Fs, read_only: bool, io: Arc<IoCounters>) -> EngramFuse {
        EngramFuse {
            root: fs.with_creds(Creds::root()),
            read_only,
            shared: fs.remote().is_some(),
            nodes: Nodes::default(),
            files: Mutex::new(HashMap::new()),
            next_fh: AtomicU64::new(1),
            views: Mutex::new(HashMap::new()),
            io,
        }
    }

    /// The handle the kernel means by `ino`.
    pub(crate) fn handle(&self, ino: INodeNo) -> Result<Handle> {
        let ino = ino.0;
        if ino != ROOT
            && let Some(&(generation, _)) = lock(&self.nodes.map).get(&ino)
        {
            return Ok(Handle { ino, generation });
        }
        self.root.handle_of(ino)
    }

    /// Count one more kernel reference to `h` (call before the reply is sent).
    pub(crate) fn remember(&self, h: Handle) {
        if h.ino == ROOT {
            return;
        }
        let mut map = lock(&self.nodes.map);
        let e = map.entry(h.ino).or_insert((h.generation, 0));
        // A reused slot: the kernel drops its old inode and will forget both counts.
        e.0 = h.generation;
        e.1 += 1;
    }

    pub(crate) fn forget(&self, ino: u64, n: u64) {
        let mut map = lock(&self.nodes.map);
        if let Some(e) = map.get_mut(&ino) {
            e.1 = e.1.saturating_sub(n);
            if e.1 == 0 {
                map.remove(&ino);
            }
        }
    }

    pub(crate) fn stat(&self, h: Handle) -> Result<Metadata> {
        self.root.stat_handle(h)
    }

    /// The pool acting as the caller of `req`.
    pub(crate) fn caller(&self, req: &Request) -> Fs {
        let (uid, gid) = (req.uid(), req.gid());
        let groups = if uid == 0 {
            Vec::new()
        } else {
            groups_of(req.pid())
        };
        let mut views = lock(&self.views);
        if views.len() > 64 {
            views.clear();
        }
        views
            .entry((uid, gid, groups.clone()))
            .or_insert_with(|| self.root.with_creds(Creds { uid, gid, groups }))
            .clone()
    }

    /// Fail with EROFS on a read-only mount (the kernel refuses first; this is a backstop).
    pub(crate) fn writable(&self) -> Result<()> {
        if self.read_only {
            Err(Error::EROFS)
        } else {
            Ok(())
        }
    }

    pub(crate) fn add_file(&self, f: File) -> u64 {
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
        lock(&self.files).insert(fh, Arc::new(f));
        fh
    }

    pub(crate) fn file(&self, fh: u64) -> Result<Arc<File>> {
        lock(&self.files).get(&fh).cloned().ok_or(Error::EBADF)
    }

    /// Whether some handle of inode `ino` is open for writing.
    pub(crate) fn open_for_writing(&self, ino: u64) -> bool {
        lock(&self.files)
            .values()
            .any(|f| f.ino() == ino && f.options().write)
    }

    /// Forget a file handle; the file closes when its last in-flight request ends.
    pub(crate) fn remove_file(&self, fh: u64) {
        let f = lock(&self.files).remove(&fh);
        drop(f);
    }

    /// Close every open file (the session is over).
    pub(crate) fn close_all(&self) {
        let files = std::mem::take(&mut *lock(&self.files));
        drop(files);
        lock(&self.views).clear();
    }
}

/// The supplementary groups of thread `pid`, from `/proc` (empty if it is gone).
fn groups_of(pid: u32) -> Vec<u32> {
    if pid == 0 {
        return Vec::new();
    }
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return Vec::new();
    };
    status
        .lines()
        .find_map(|l| l.strip_prefix("Groups:"))
        .map(|g| {
            g.split_whitespace()
                .filter_map(|n| n.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// The errno to answer the kernel with.
pub(crate) fn errno(e: &Error) -> Errno {
    Errno::from_i32(e.errno())
}

fn system_time(ns: i64) -> SystemTime {
    if ns >= 0 {
        UNIX_EPOCH + Duration::from_nanos(ns as u64)
    } else {
        UNIX_EPOCH - Duration::from_nanos(ns.unsigned_abs())
    }
}

/// A time from a FUSE setattr as nanoseconds since the epoch. fuser 0.18 builds a time
/// before the epoch as `EPOCH - (|secs| s + nsec ns)` for the kernel's (secs < 0, nsec),
/// which this inverts exactly (the mount test checks it with a fractional 1969 time).
pub(crate) fn fuse_time_ns(t: SystemTime) -> i64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_nanos()).unwrap_or(i64::MAX),
        Err(e) => {
            let d = e.duration();
            let secs = i64::try_from(d.as_secs()).unwrap_or(i64::MAX / 1_000_000_000);
            secs.saturating_mul(-1_000_000_000) + i64::from(d.subsec_nanos())
        }
    }
}

pub(crate) fn file_type(mode: u32) -> FileType {
    match mode & libc::S_IFMT {
        libc::S_IFDIR => FileType::Directory,
        libc::S_IFLNK => FileType::Symlink,
        libc::S_IFIFO => FileType::NamedPipe,
        libc::S_IFSOCK => FileType::Socket,
        libc::S_IFCHR => FileType::CharDevice,
        libc::S_IFBLK => FileType::BlockDevice,
        _ => FileType::RegularFile,
    }
}

/// A `DT_*` value as a file type.
pub(crate) fn dirent_type(dt: u8) -> FileType {
    match dt {
        libc::DT_DIR => FileType::Directory,
        libc::DT_LNK => FileType::Symlink,
        libc::DT_FIFO => FileType::NamedPipe,
        libc::DT_SOCK => FileType::Socket,
        libc::DT_CHR => FileType::CharDevice,
        libc::DT_BLK => FileType::BlockDevice,
        _ => FileType::RegularFile,
    }
}

pub(crate) fn attr(m: &Metadata) -> FileAttr {
    FileAttr {
        ino: INodeNo(m.ino),
        size: m.size,
        blocks: m.blocks,
        atime: system_time(m.atime_ns),
        mtime: system_time(m.mtime_ns),
        ctime: system_time(m.ctime_ns),
        crtime: system_time(m.ctime_ns),
        kind: file_type(m.mode),
        perm: (m.mode & 0o7777) as u16,
        nlink: m.nlink,
        uid: m.uid,
        gid: m.gid,
        // The engine takes numbers of 32 bits only (`Fs::mknod`).
        rdev: m.rdev as u32,
        blksize: IO_SIZE,
        flags: 0,
    }
}

/// The attributes of a negative entry (node id 0: "no such name", cacheable for TTL).
pub(crate) fn negative_attr() -> FileAttr {
    FileAttr {
        ino: INodeNo(0),
        size: 0,
        blocks: 0,
        atime: UNIX_EPOCH,
        mtime: UNIX_EPOCH,
        ctime: UNIX_EPOCH,
        crtime: UNIX_EPOCH,
        kind: FileType::RegularFile,
        perm: 0,
        nlink: 0,
        uid: 0,
        gid: 0,
        rdev: 0,
        blksize: IO_SIZE,
        flags: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_round_trip() {
        for ns in [
            0i64,
            1,
            1_500_000_000,
            -1,
            -1_000_000_000,
            -750_000_000,
            -2_250_000_001,
        ] {
            // What fuser builds from the kernel's (secs, nsec) split of `ns`.
            let secs = ns.div_euclid(1_000_000_000);
            let nsec = ns.rem_euclid(1_000_000_000) as u32;
            let t = if secs >= 0 {
                UNIX_EPOCH + Duration::new(secs as u64, nsec)
            } else {
                UNIX_EPOCH - Duration::new((-secs) as u64, nsec)
            };
            assert_eq!(fuse_time_ns(t), ns, "{ns}");
        }
    }

    #[test]
    fn groups_of_self() {
        let g = groups_of(std::process::id());
        let mut want = Creds::current().groups;
        want.sort();
        let mut got = g;
        got.sort();
        assert_eq!(got, want);
    }
}

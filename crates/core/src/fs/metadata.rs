//! `stat` results.

use crate::inode::{InodeData, S_IFDIR, S_IFIFO, S_IFLNK, S_IFMT, S_IFREG, S_IFSOCK};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// What `stat` reports.
///
/// The fields from `mode` to `ctime_ns` are in the inode record's order (`InodeData`), so
/// that `from_inode` copies them as one block: a caller that then reads two neighbours
/// with one load (uid and gid, for `st_uid`/`st_gid`) finds them in one store, which the
/// store buffer can forward, not in two, which it cannot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
pub struct Metadata {
    pub mode: u32,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    /// Bytes for files and symlinks; the number of entries for directories.
    pub size: u64,
    pub atime_ns: i64,
    pub mtime_ns: i64,
    pub ctime_ns: i64,
    pub ino: u64,
    /// 512-byte units held, as `st_blocks`.
    pub blocks: u64,
    pub blksize: u64,
    /// A character or block device's number (glibc's `dev_t`, as `makedev` builds it); 0
    /// for every other type.
    pub rdev: u64,
}

fn to_time(ns: i64) -> SystemTime {
    if ns >= 0 {
        UNIX_EPOCH + Duration::from_nanos(ns as u64)
    } else {
        UNIX_EPOCH - Duration::from_nanos(ns.unsigned_abs())
    }
}

impl Metadata {
    pub(crate) fn from_inode(ino: u64, d: &InodeData) -> Metadata {
        Metadata {
            mode: d.mode,
            nlink: d.nlink,
            uid: d.uid,
            gid: d.gid,
            size: d.size,
            atime_ns: d.atime,
            mtime_ns: d.mtime,
            ctime_ns: d.ctime,
            ino,
            blocks: d.blocks * 8,
            blksize: crate::layout::PAGE,
            rdev: d.rdev(),
        }
    }

    pub fn is_dir(&self) -> bool {
        self.mode & S_IFMT == S_IFDIR
    }
    pub fn is_file(&self) -> bool {
        self.mode & S_IFMT == S_IFREG
    }
    pub fn is_symlink(&self) -> bool {
        self.mode & S_IFMT == S_IFLNK
    }
    pub fn is_fifo(&self) -> bool {
        self.mode & S_IFMT == S_IFIFO
    }
    pub fn is_socket(&self) -> bool {
        self.mode & S_IFMT == S_IFSOCK
    }
    /// A character or block device.
    pub fn is_device(&self) -> bool {
        crate::inode::is_device(self.mode)
    }
    pub fn len(&self) -> u64 {
        self.size
    }
    pub fn is_empty(&self) -> bool {
        self.size == 0
    }
    /// Permission bits (including set-id and sticky bits).
    pub fn permissions(&self) -> u32 {
        self.mode & 0o7777
    }
    pub fn accessed(&self) -> SystemTime {
        to_time(self.atime_ns)
    }
    pub fn modified(&self) -> SystemTime {
        to_time(self.mtime_ns)
    }
    pub fn changed(&self) -> SystemTime {
        to_time(self.ctime_ns)
    }
}

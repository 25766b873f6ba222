//! Helpers shared by the integration tests: a pool file per test in /dev/shm, removed when
//! the test ends, and short ways to check errnos and fsck.

#![allow(dead_code)]

pub mod replace;

use engram_core::{Error, Fs, Options};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// A pool file path unique to this process and call; the file is removed on drop.
pub struct PoolFile {
    pub path: PathBuf,
}

impl PoolFile {
    pub fn new(tag: &str) -> PoolFile {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let path = PathBuf::from(format!(
            "/dev/shm/engram-it-{}-{n}-{tag}",
            std::process::id()
        ));
        let _ = std::fs::remove_file(&path);
        PoolFile { path }
    }

    /// A pool path in the system's temporary directory, usually an ordinary (disk) file
    /// system, where a pool is kept durable with `msync` (`Media::File`).
    pub fn on_disk(tag: &str) -> PoolFile {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!("engram-it-{}-{n}-{tag}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        PoolFile { path }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Format the pool with `size` bytes and open it.
    pub fn mkfs_open(&self, size: u64) -> Fs {
        Fs::mkfs(&self.path, size).expect("mkfs");
        self.open()
    }

    pub fn open(&self) -> Fs {
        Fs::open(&self.path, &Options::default()).expect("open pool")
    }
}

impl Drop for PoolFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// A fresh pool of `mib` MiB, opened.
pub fn new_fs(tag: &str, mib: u64) -> (PoolFile, Fs) {
    let p = PoolFile::new(tag);
    let fs = p.mkfs_open(mib << 20);
    (p, fs)
}

/// Assert that fsck finds nothing wrong.
pub fn assert_clean(fs: &Fs) {
    let r = fs.fsck(false).expect("fsck");
    assert!(r.is_clean(), "fsck problems: {:#?}", r.problems);
}

/// Unmount cleanly, reopen, and check the mount was clean.
pub fn remount(p: &PoolFile, fs: Fs) -> Fs {
    fs.unmount().expect("unmount");
    let fs = p.open();
    assert!(
        fs.mount_info().was_clean,
        "pool was not marked clean: {:?}",
        fs.mount_info()
    );
    fs
}

/// The errno of a result that must be an error.
#[track_caller]
pub fn errno<T>(r: Result<T, Error>) -> i32 {
    match r {
        Ok(_) => panic!("expected an error, got Ok"),
        Err(e) => e.errno(),
    }
}

/// Assert that `r` failed with `want`.
#[track_caller]
pub fn assert_errno<T>(r: Result<T, Error>, want: i32) {
    match r {
        Ok(_) => panic!("expected {}, got Ok", errname(want)),
        Err(e) => assert_eq!(
            e.errno(),
            want,
            "expected {}, got {} ({e})",
            errname(want),
            errname(e.errno())
        ),
    }
}

pub fn errname(e: i32) -> String {
    let name = match e {
        libc::ENOENT => "ENOENT",
        libc::EEXIST => "EEXIST",
        libc::ENOTDIR => "ENOTDIR",
        libc::EISDIR => "EISDIR",
        libc::ENOTEMPTY => "ENOTEMPTY",
        libc::EINVAL => "EINVAL",
        libc::ENAMETOOLONG => "ENAMETOOLONG",
        libc::ELOOP => "ELOOP",
        libc::EACCES => "EACCES",
        libc::EPERM => "EPERM",
        libc::ENOSPC => "ENOSPC",
        libc::EBADF => "EBADF",
        libc::EBUSY => "EBUSY",
        libc::EUCLEAN => "EUCLEAN",
        libc::EIO => "EIO",
        libc::EFBIG => "EFBIG",
        _ => return format!("errno {e}"),
    };
    name.to_string()
}

/// A deterministic byte pattern that differs at every offset of a page and between files.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

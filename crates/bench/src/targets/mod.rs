//! What a benchmark runs against: EngramFS (native API in-process, or through the daemon)
//! and plain directories reached through system calls (tmpfs, ext4 on a loop device, and
//! later a FUSE mount or the `LD_PRELOAD` shim).
//!
//! Paths given to a target are absolute within it ("/b3/f0"); each target maps them onto
//! its own root.

pub mod engram;
pub mod posix;

use crate::Scale;
use std::ffi::CString;
use std::io;
use std::path::{Path, PathBuf};

/// The tmpfs baseline on /dev/shm itself, run beside `tmpfs` when the pools (and `tmpfs`)
/// live on the harness's huge-page mount.
pub const TMPFS_SHM: &str = "tmpfs-shm";

/// Whether a target is an EngramFS front end (the ratios are computed for these) or a
/// baseline it is compared with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Engram,
    Baseline,
}

/// How to open a file (a subset of open(2)'s flags).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Open {
    pub write: bool,
    pub create: bool,
    pub append: bool,
    pub truncate: bool,
}

impl Open {
    pub const READ: Open = Open {
        write: false,
        create: false,
        append: false,
        truncate: false,
    };
    pub const WRITE: Open = Open {
        write: true,
        ..Open::READ
    };
    /// O_CREAT | O_TRUNC | O_RDWR.
    pub const CREATE: Open = Open {
        write: true,
        create: true,
        truncate: true,
        append: false,
    };
    /// O_CREAT | O_APPEND | O_RDWR.
    pub const APPEND: Open = Open {
        write: true,
        create: true,
        append: true,
        truncate: false,
    };
}

/// An open file of a target. Shared by the threads of a benchmark.
pub trait TargetFile: Send + Sync {
    fn pread(&self, buf: &mut [u8], off: u64) -> io::Result<usize>;
    fn pwrite(&self, buf: &[u8], off: u64) -> io::Result<usize>;
    /// Write at the end of file (the file was opened with `Open::APPEND`).
    fn append(&self, buf: &[u8]) -> io::Result<usize>;
    fn fdatasync(&self) -> io::Result<()>;
}

/// Where a program started by the harness (sqlite3, db_bench, fio) keeps its files on a
/// target, and what its environment needs to reach them (the shim's variables).
pub struct ProgramDir {
    pub dir: PathBuf,
    pub env: Vec<(String, String)>,
    /// Undoes what `Target::program_dir` set up beside the scratch directory (run once the
    /// program has exited).
    pub cleanup: Option<Box<dyn FnOnce() -> io::Result<()>>>,
}

impl Drop for ProgramDir {
    fn drop(&mut self) {
        if let Some(f) = self.cleanup.take() {
            let _ = f();
        }
    }
}

/// A path that a benchmark stats over and over, converted once, as a program holds the C
/// strings it passes to stat(2). Converted on every call, it cost the system-call targets
/// about 10 ns per stat that the native API (which takes the Rust string) did not pay: a
/// copy, then `strlen`'s wide loads waiting for the copy's narrower stores.
pub struct HeldPath {
    pub text: String,
    /// The path relative to a target's root ("." for the root itself), as a C string.
    pub relative: CString,
}

impl HeldPath {
    pub fn new(path: &str) -> io::Result<HeldPath> {
        let relative =
            CString::new(relative(path)).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
        Ok(HeldPath {
            text: path.to_string(),
            relative,
        })
    }
}

/// A target's absolute path ("/b3/f0") relative to its root ("b3/f0"; "." for "/").
pub(crate) fn relative(path: &str) -> &str {
    match path.trim_start_matches('/') {
        "" => ".",
        rel => rel,
    }
}

/// A file system under test.
pub trait Target: Send + Sync {
    fn name(&self) -> &str;
    fn kind(&self) -> Kind;
    fn open(&self, path: &str, how: Open) -> io::Result<Box<dyn TargetFile>>;
    /// Create an empty file and close it (open(O_CREAT | O_EXCL) + close).
    fn create(&self, path: &str) -> io::Result<()>;
    fn mkdir(&self, path: &str) -> io::Result<()>;
    fn unlink(&self, path: &str) -> io::Result<()>;
    fn rmdir(&self, path: &str) -> io::Result<()>;
    fn rename(&self, from: &str, to: &str) -> io::Result<()>;
    /// stat(2); returns the size.
    fn stat(&self, path: &str) -> io::Result<u64>;
    /// `stat` of a path converted beforehand.
    fn stat_held(&self, path: &HeldPath) -> io::Result<u64> {
        self.stat(&path.text)
    }
    /// Read a whole directory; returns the number of entries other than "." and "..".
    fn count_dir(&self, path: &str) -> io::Result<usize>;
    /// Names in a directory (without "." and ".."), with whether each is a directory.
    fn list_dir(&self, path: &str) -> io::Result<Vec<(String, bool)>>;

    /// Remove a directory tree (between benchmarks; not timed).
    fn remove_tree(&self, path: &str) -> io::Result<()> {
        for (name, is_dir) in self.list_dir(path)? {
            let p = format!("{path}/{name}");
            if is_dir {
                self.remove_tree(&p)?;
            } else {
                self.unlink(&p)?;
            }
        }
        self.rmdir(path)
    }

    /// How another process reaches `scratch` (a fresh directory of this target, made by
    /// `Ctx::scratch`). Targets that no other process can reach say why.
    fn program_dir(&self, _scratch: &str) -> io::Result<ProgramDir> {
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            format!("{}: programs cannot reach this target", self.name()),
        ))
    }

    /// A new, empty instance of the same kind able to hold `files` files, for benchmarks
    /// that need more than the shared instance holds (EngramFS pools are sized at mkfs).
    /// None: use this instance.
    fn fresh(&self, _files: u64) -> Option<io::Result<Box<dyn Target>>> {
        None
    }
}

/// A target that could not be set up, and why.
#[derive(Clone, Debug)]
pub struct Skipped {
    pub name: String,
    pub reason: String,
}

/// The targets of one run, in column order (EngramFS front ends first).
pub struct TargetSet {
    pub live: Vec<Box<dyn Target>>,
    pub skipped: Vec<Skipped>,
}

fn skip(name: &str, reason: impl Into<String>) -> Skipped {
    Skipped {
        name: name.to_string(),
        reason: reason.into(),
    }
}

/// Set up every standard target, plus `extra` (FUSE mounts and the like, see
/// `posix::mounted_dir`). A target that cannot be set up is skipped with the reason.
pub fn standard(scale: &Scale, extra: Vec<Box<dyn Target>>) -> TargetSet {
    let mut live: Vec<Box<dyn Target>> = Vec::new();
    let mut skipped = Vec::new();
    match engram::EngramTarget::native("engram", scale.pool_size) {
        Ok(t) => live.push(Box::new(t)),
        Err(e) => skipped.push(skip("engram", format!("cannot create a pool: {e}"))),
    }
    match engram::EngramTarget::daemon("engram-daemon", scale.pool_size) {
        Ok(t) => live.push(Box::new(t)),
        Err(e) => skipped.push(skip("engram-daemon", format!("cannot start a daemon: {e}"))),
    }
    // The shim and FUSE front ends run through system calls on a directory: when one is
    // available, its directory becomes a `posix::mounted_dir` target. The shim must be
    // loaded into this process (LD_PRELOAD) for its directories to reach EngramFS.
    let shim = "not requested (run the benchmark under `engram run` and set";
    let hooks = [
        (
            "engram-shim",
            "ENGRAM_BENCH_SHIM_DIR",
            format!("{shim} ENGRAM_BENCH_SHIM_DIR=<a directory under its prefix>)"),
        ),
        (
            "engram-shim-daemon",
            "ENGRAM_BENCH_SHIM_DAEMON_DIR",
            format!(
                "{shim} ENGRAM_BENCH_SHIM_DAEMON_DIR=<a directory under its prefix, served \
                 by a daemon>)"
            ),
        ),
        (
            "engram-fuse",
            "ENGRAM_BENCH_FUSE_DIR",
            "no FUSE mount given (set ENGRAM_BENCH_FUSE_DIR=<a directory in an `engram \
             mount`>, or pass posix::mounted_dir(..) to run_with)"
                .to_string(),
        ),
    ];
    for (name, var, why) in hooks {
        match std::env::var_os(var) {
            Some(dir) => match posix::mounted_dir(name, dir.as_ref(), Kind::Engram) {
                Ok(t) => live.push(Box::new(t)),
                Err(e) => skipped.push(skip(name, e.to_string())),
            },
            None => skipped.push(skip(name, why)),
        }
    }
    live.extend(extra);
    // On the pools' tmpfs (huge pages when the harness could mount one): large writes to
    // tmpfs are several times faster on 2 MiB pages, so it gets what EngramFS gets.
    let pools = crate::pools::current();
    match posix::PosixTarget::tmpfs("tmpfs", &pools) {
        Ok(t) => live.push(Box::new(t)),
        Err(e) => skipped.push(skip("tmpfs", e.to_string())),
    }
    // The issue names /dev/shm as the tmpfs baseline: when the pools live elsewhere it runs
    // there too, and every target against tmpfs takes the faster of the two (goals.rs).
    if pools != Path::new(crate::pools::SHM) {
        match posix::PosixTarget::tmpfs(TMPFS_SHM, Path::new(crate::pools::SHM)) {
            Ok(t) => live.push(Box::new(t)),
            Err(e) => skipped.push(skip(TMPFS_SHM, e.to_string())),
        }
    }
    match posix::PosixTarget::ext4_loop("ext4", scale.ext4_image, scale.ext4_inodes) {
        Ok(t) => live.push(Box::new(t)),
        Err(e) => skipped.push(skip("ext4", e)),
    }
    // ENGRAM_BENCH_ONLY=engram,tmpfs keeps only those (for profiling one target).
    if let Ok(only) = std::env::var("ENGRAM_BENCH_ONLY") {
        let keep: Vec<&str> = only.split(',').map(str::trim).collect();
        live.retain(|t| keep.contains(&t.name()));
        skipped.retain(|s| keep.contains(&s.name.as_str()));
    }
    // EngramFS front ends first, then the baselines, each in the order added.
    live.sort_by_key(|t| t.kind() != Kind::Engram);
    TargetSet { live, skipped }
}

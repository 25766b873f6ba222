//! Helpers for running the `engram` binary against pools in /dev/shm and trees in /tmp.
// Each test binary uses a different part of this module.
#![allow(dead_code)]

use std::ffi::OsStr;
use std::fs;
use std::os::unix::fs::{FileExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

static NEXT: AtomicU32 = AtomicU32::new(0);

fn unique(name: &str) -> String {
    format!(
        "engram-cli-test-{}-{}-{name}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// A pool path under /dev/shm, removed on drop.
pub struct TempPool(PathBuf);

impl TempPool {
    pub fn new(name: &str) -> TempPool {
        let p = PathBuf::from(format!("/dev/shm/{}.pool", unique(name)));
        let _ = fs::remove_file(&p);
        TempPool(p)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    pub fn s(&self) -> &str {
        self.0.to_str().unwrap()
    }

    /// `POOL:inner`
    pub fn at(&self, inner: &str) -> String {
        format!("{}:{inner}", self.s())
    }
}

impl Drop for TempPool {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.0);
    }
}

/// A directory under the system temp dir, removed with its content on drop.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(name: &str) -> TempDir {
        let p = std::env::temp_dir().join(unique(name));
        let _ = fs::remove_dir_all(&p);
        fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        // Make everything writable again so that the removal can go everywhere.
        fn unlock(p: &Path) {
            if let Ok(m) = fs::symlink_metadata(p)
                && m.is_dir()
            {
                let _ = fs::set_permissions(p, fs::Permissions::from_mode(0o700));
                for e in fs::read_dir(p).into_iter().flatten().flatten() {
                    unlock(&e.path());
                }
            }
        }
        unlock(&self.0);
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// What a run of `engram` did.
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

/// Run `engram` with these arguments. Nothing it prints may look like a panic.
pub fn engram<I, S>(args: I) -> Run
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let args: Vec<_> = args.into_iter().map(|a| a.as_ref().to_owned()).collect();
    let out = Command::new(env!("CARGO_BIN_EXE_engram"))
        .args(&args)
        .output()
        .expect("run engram");
    let run = Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    };
    for text in [&run.stdout, &run.stderr] {
        assert!(
            !text.contains("panicked")
                && !text.contains("internal error")
                && !text.contains("RUST_BACKTRACE"),
            "engram {args:?} panicked:\n{}\n{}",
            run.stdout,
            run.stderr
        );
    }
    run
}

/// Run `engram` and require success.
pub fn ok<I, S>(args: I) -> Run
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let r = engram(args);
    assert_eq!(
        r.code, 0,
        "engram failed:\nstdout:\n{}\nstderr:\n{}",
        r.stdout, r.stderr
    );
    r
}

/// Run `engram` and require a reported failure: exit 1 and `engram: <message>` on stderr.
pub fn fails<I, S>(args: I) -> Run
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let r = engram(args);
    assert_eq!(
        r.code, 1,
        "engram should have failed:\nstdout:\n{}\nstderr:\n{}",
        r.stdout, r.stderr
    );
    assert!(r.stderr.starts_with("engram: "), "stderr: {}", r.stderr);
    r
}

/// Deterministic bytes.
pub fn pattern(len: usize, seed: u64) -> Vec<u8> {
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

/// Assert that two local trees hold the same names, types, permission bits, contents and
/// symlink targets.
pub fn assert_same_tree(a: &Path, b: &Path) {
    let ma = fs::symlink_metadata(a).unwrap();
    let mb = fs::symlink_metadata(b).unwrap_or_else(|e| panic!("{}: {e}", b.display()));
    assert_eq!(
        ma.file_type(),
        mb.file_type(),
        "{} vs {}",
        a.display(),
        b.display()
    );
    if !ma.file_type().is_symlink() {
        assert_eq!(
            ma.permissions().mode() & 0o7777,
            mb.permissions().mode() & 0o7777,
            "mode of {} vs {}",
            a.display(),
            b.display()
        );
    }
    if ma.is_dir() {
        let names = |p: &Path| {
            let mut v: Vec<_> = fs::read_dir(p)
                .unwrap()
                .map(|e| e.unwrap().file_name())
                .collect();
            v.sort();
            v
        };
        let (na, nb) = (names(a), names(b));
        assert_eq!(na, nb, "entries of {} vs {}", a.display(), b.display());
        for n in na {
            assert_same_tree(&a.join(&n), &b.join(&n));
        }
    } else if ma.file_type().is_symlink() {
        assert_eq!(fs::read_link(a).unwrap(), fs::read_link(b).unwrap());
    } else {
        let (da, db) = (fs::read(a).unwrap(), fs::read(b).unwrap());
        assert!(
            da == db,
            "content of {} ({} bytes) vs {} ({} bytes)",
            a.display(),
            da.len(),
            b.display(),
            db.len()
        );
    }
}

/// Invert one byte of a file.
pub fn flip_byte(path: &Path, off: u64) {
    let f = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    let mut b = [0u8];
    f.read_exact_at(&mut b, off).unwrap();
    f.write_all_at(&[!b[0]], off).unwrap();
}

/// Write bytes into a file at an offset.
pub fn write_at(path: &Path, off: u64, data: &[u8]) {
    let f = fs::OpenOptions::new().write(true).open(path).unwrap();
    f.write_all_at(data, off).unwrap();
}

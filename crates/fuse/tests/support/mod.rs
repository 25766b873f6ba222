//! Helpers of the mount tests: scratch pools and directories, mounting (or skipping where
//! FUSE is missing), shell commands, tree manifests and a generated tree of awkward files.

#![allow(dead_code)]

use engram_core::{Fs, Options};
use engram_fuse::{MountHandle, MountOptions, spawn_mount};
use std::collections::BTreeMap;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

pub const POOL_SIZE: u64 = 512 << 20;

static SEQ: AtomicU32 = AtomicU32::new(0);

/// A pool file in /dev/shm and scratch directories, removed on drop.
pub struct Scratch {
    pub pool: PathBuf,
    pub root: PathBuf,
    pub mnt: PathBuf,
}

impl Scratch {
    pub fn new(name: &str) -> Scratch {
        let id = format!(
            "engram-fuse-{}-{}-{name}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        );
        let pool = PathBuf::from(format!("/dev/shm/{id}"));
        let root = std::env::temp_dir().join(id);
        let _ = std::fs::remove_dir_all(&root);
        let mnt = root.join("mnt");
        std::fs::create_dir_all(&mnt).unwrap();
        Fs::mkfs(&pool, POOL_SIZE).unwrap();
        Scratch { pool, root, mnt }
    }

    pub fn open(&self) -> Fs {
        Fs::open(&self.pool, &Options::default()).unwrap()
    }

    /// A scratch directory outside the mount.
    pub fn dir(&self, name: &str) -> PathBuf {
        let d = self.root.join(name);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    /// Mount the pool, or `None` (after saying so) where `/dev/fuse` is absent: the only
    /// reason to skip. Where the device exists, failing to mount fails the test.
    pub fn mount(&self, opts: &MountOptions) -> Option<MountHandle> {
        if !fuse_present() {
            return None;
        }
        self.mount_fs(self.open(), opts)
    }

    /// Mount `fs` (opened or connected by the caller), or `None` as `mount` says.
    pub fn mount_fs(&self, fs: Fs, opts: &MountOptions) -> Option<MountHandle> {
        if !fuse_present() {
            return None;
        }
        match spawn_mount(fs, &self.mnt, opts) {
            Ok(h) => Some(h),
            Err(e) => panic!("mount failed although /dev/fuse exists: {e}"),
        }
    }
}

/// Whether `/dev/fuse` exists; says why the test skips when it does not.
pub fn fuse_present() -> bool {
    if Path::new("/dev/fuse").exists() {
        return true;
    }
    eprintln!("SKIPPED: /dev/fuse is absent, so FUSE mounts cannot be tested here");
    false
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.pool);
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.root);
        }
    }
}

/// Run `script` with `sh -e` in `dir`; its stdout, or a panic with everything it said.
pub fn sh(dir: &Path, script: &str) -> String {
    let out = Command::new("sh")
        .arg("-ec")
        .arg(script)
        .current_dir(dir)
        .env("LC_ALL", "C")
        .env("TZ", "UTC")
        .output()
        .expect("cannot run sh");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "`{script}` in {} failed ({}):\n{stdout}\n{}",
        dir.display(),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// Run `script` expecting it to fail; its stderr.
pub fn sh_fails(dir: &Path, script: &str) -> String {
    let out = Command::new("sh")
        .arg("-ec")
        .arg(script)
        .current_dir(dir)
        .env("LC_ALL", "C")
        .output()
        .expect("cannot run sh");
    assert!(!out.status.success(), "`{script}` should have failed");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Every entry under `dir` (type, path, target) and the sha256 of every file, as the shell
/// tools see them; with `modes`, permission bits too.
pub fn manifest(dir: &Path, modes: bool) -> String {
    let fmt = if modes {
        "%y %m %p %l\\n"
    } else {
        "%y %p %l\\n"
    };
    let list = sh(dir, &format!("find . -mindepth 1 -printf '{fmt}' | sort"));
    let sums = sh(
        dir,
        "find . -type f -print0 | sort -z | xargs -0 -r sha256sum",
    );
    format!("{list}{sums}")
}

/// A deterministic pseudo-random byte stream.
pub fn bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// A tree of awkward cases: odd sizes around page boundaries, a sparse file, a large file,
/// many entries in one directory, deep nesting, long and non-ASCII names, empty files and
/// directories, relative, absolute and dangling symlinks, hard links, unusual modes.
pub fn make_awkward_tree(dir: &Path) {
    use std::os::unix::fs::{PermissionsExt, symlink};
    std::fs::create_dir_all(dir).unwrap();
    let w = |p: &str, data: &[u8]| std::fs::write(dir.join(p), data).unwrap();
    for (i, len) in [0usize, 1, 4095, 4096, 4097, 65537, (3 << 20) + 123]
        .into_iter()
        .enumerate()
    {
        w(&format!("size-{len}"), &bytes(i as u64, len));
    }
    let sparse = std::fs::File::create(dir.join("sparse")).unwrap();
    sparse.set_len(10 << 20).unwrap();
    std::os::unix::fs::FileExt::write_at(&sparse, b"middle", 5 << 20).unwrap();
    drop(sparse);
    std::fs::create_dir_all(dir.join("many")).unwrap();
    for i in 0..700 {
        w(
            &format!("many/entry-{i:04}-{}", "x".repeat(i % 40)),
            format!("{i}").as_bytes(),
        );
    }
    let deep = "d1/d2/d3/d4/d5/d6/d7/d8/d9/d10";
    std::fs::create_dir_all(dir.join(deep)).unwrap();
    w(&format!("{deep}/leaf"), b"deep leaf\n");
    std::fs::create_dir_all(dir.join("empty-dir/inner-empty")).unwrap();
    w("with space and 'quote'", b"spaces\n");
    w("ünïcødé-名前-🦀", b"unicode\n");
    w(&"L".repeat(255), b"longest name\n");
    w("exec.sh", b"#!/bin/sh\necho hi\n");
    std::fs::set_permissions(dir.join("exec.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
    w("private", b"secret\n");
    std::fs::set_permissions(dir.join("private"), std::fs::Permissions::from_mode(0o600)).unwrap();
    symlink("size-4096", dir.join("link-rel")).unwrap();
    symlink("d1/d2/../d2/d3", dir.join("link-dir")).unwrap();
    symlink("/nonexistent/target", dir.join("link-dangling")).unwrap();
    symlink("x".repeat(200), dir.join("link-long-target")).unwrap();
    std::fs::hard_link(dir.join("size-1"), dir.join("hardlink-to-size-1")).unwrap();
}

/// Walk a tree on disk and check that the pool holds the same at `at`: types, symlink
/// targets, file contents and (with `modes`) permission bits. Returns the entries checked.
pub fn check_tree_in_pool(fs: &Fs, disk: &Path, at: &str, modes: bool) -> usize {
    let mut n = 0;
    let mut stack = vec![(disk.to_path_buf(), at.to_string())];
    while let Some((d, p)) = stack.pop() {
        let mut names = BTreeMap::new();
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            names.insert(e.file_name().as_bytes().to_vec(), e.path());
        }
        let in_pool: BTreeMap<Vec<u8>, u64> = fs
            .read_dir(p.as_bytes())
            .unwrap()
            .map(|e| e.unwrap())
            .filter(|e| e.name != b"." && e.name != b"..")
            .map(|e| (e.name, e.ino))
            .collect();
        assert_eq!(
            in_pool.keys().collect::<Vec<_>>(),
            names.keys().collect::<Vec<_>>(),
            "entries of {p}"
        );
        for (name, path) in names {
            n += 1;
            let pp = format!("{p}/{}", String::from_utf8(name).unwrap());
            let meta = std::fs::symlink_metadata(&path).unwrap();
            let pm = fs.lstat(pp.as_bytes()).unwrap();
            if modes {
                use std::os::unix::fs::PermissionsExt;
                assert_eq!(pm.permissions(), meta.permissions().mode() & 0o7777, "{pp}");
            }
            if meta.file_type().is_symlink() {
                assert!(pm.is_symlink(), "{pp}");
                let t = std::fs::read_link(&path).unwrap();
                assert_eq!(
                    fs.readlink(pp.as_bytes()).unwrap(),
                    t.as_os_str().as_bytes()
                );
            } else if meta.is_dir() {
                assert!(pm.is_dir(), "{pp}");
                stack.push((path, pp));
            } else {
                assert!(pm.is_file(), "{pp}");
                let want = std::fs::read(&path).unwrap();
                assert!(
                    fs.read_file(pp.as_bytes()).unwrap() == want,
                    "content of {pp}"
                );
            }
        }
    }
    n
}

/// The pool is consistent.
pub fn assert_clean(fs: &Fs) {
    let r = fs.fsck(false).unwrap();
    assert!(r.is_clean(), "fsck: {:?}", r.problems);
}

//! POSIX behaviour of the native API, checked against what Linux does (every expectation
//! here was confirmed on tmpfs with the equivalent system calls).

mod common;

// ---------------------------------------------------------------------------------- open
#[path = "posix/open.rs"]
mod open;

// ---------------------------------------------------------------------------------- namespace
#[path = "posix/namespace.rs"]
mod namespace;

// ---------------------------------------------------------------------------------- attributes
#[path = "posix/attrs.rs"]
mod attrs;

// ---------------------------------------------------------------------------------- truncation times
#[path = "posix/truncate_times.rs"]
mod truncate_times;

// ---------------------------------------------------------------------------------- paths
#[path = "posix/paths.rs"]
mod paths;

// ---------------------------------------------------------------------------------- readdir
#[path = "posix/readdir.rs"]
mod readdir;

// ---------------------------------------------------------------------------------- data
#[path = "posix/data.rs"]
mod data;

// ---------------------------------------------------------------------------------- holes
#[path = "posix/holes.rs"]
mod holes;

// ---------------------------------------------------------------------------------- permissions
#[path = "posix/permissions.rs"]
mod permissions;

// ---------------------------------------------------------------------------------- special files
#[path = "posix/special.rs"]
mod special;

// ---------------------------------------------------------------------------------- persistence
#[path = "posix/persistence.rs"]
mod persistence;

use engram_core::{Creds, Fs, OpenOptions};

const MIB: u64 = 1 << 20;

fn ro() -> OpenOptions {
    OpenOptions::new().read(true)
}

fn rw() -> OpenOptions {
    OpenOptions::new().read(true).write(true)
}

fn creat() -> OpenOptions {
    OpenOptions::new().read(true).write(true).create(true)
}

fn dir_opts() -> OpenOptions {
    OpenOptions::new().read(true).directory(true)
}

fn user(fs: &Fs, uid: u32) -> Fs {
    fs.with_creds(Creds {
        uid,
        gid: uid,
        groups: vec![],
    })
}

/// Names in a directory, in readdir order, without "." and "..".
fn names(fs: &Fs, path: &str) -> Vec<String> {
    fs.read_dir(path)
        .unwrap()
        .map(|e| e.unwrap().name_str().into_owned())
        .filter(|n| n != "." && n != "..")
        .collect()
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i64
}

/// Let the clock move so that a later timestamp is strictly greater.
fn tick() {
    std::thread::sleep(std::time::Duration::from_millis(2));
}

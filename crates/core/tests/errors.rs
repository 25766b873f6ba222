//! Bad input gets a clear error and loses nothing: foreign, corrupt and truncated pools,
//! bad sizes, a pool opened twice, full pools, over-long names and paths.

mod common;
#[path = "errors/corrupt.rs"]
mod corrupt;
#[path = "errors/full.rs"]
mod full;
#[path = "errors/limits.rs"]
mod limits;
#[path = "errors/pools.rs"]
mod pools;

use common::{PoolFile, pattern};
use engram_core::Error;
use std::os::unix::fs::FileExt;

const MIB: u64 = 1 << 20;

fn msg(e: &Error) -> String {
    e.message().unwrap_or_default().to_string()
}

/// Overwrite bytes of the pool file in place.
fn scribble(p: &PoolFile, at: u64, data: &[u8]) {
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(p.path())
        .unwrap();
    f.write_all_at(data, at).unwrap();
}

/// A pool with a few files in it, unmounted; returns what they hold.
fn populated(p: &PoolFile, size: u64) -> Vec<(String, Vec<u8>)> {
    let fs = p.mkfs_open(size);
    fs.mkdir("/dir", 0o755).unwrap();
    let files: Vec<(String, Vec<u8>)> = (0..5)
        .map(|i| {
            (
                format!("/dir/file{i}"),
                pattern(i, 1000 + 5000 * i as usize),
            )
        })
        .collect();
    for (name, data) in &files {
        fs.write_file(name, data).unwrap();
    }
    fs.unmount().unwrap();
    files
}

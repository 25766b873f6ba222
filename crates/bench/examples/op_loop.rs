//! A tight loop of one EngramFS operation through the native API, for profilers
//! (`valgrind --tool=callgrind`, `perf record`): instruction counts per operation are
//! repeatable on a noisy machine where timings are not.
//!
//! `cargo run --release -p engram-bench --example op_loop -- OP [COUNT]`, OP one of
//! create, unlink, rename, stat, overwrite, overwritesync (+ fdatasync), append, append1m,
//! overwrite1m, read. With `ENGRAM_SOCKET` set, the
//! operations go through that `engram serve` daemon (whose pool must have room) instead.
//! The pool is made in /dev/shm, or in `ENGRAM_POOL_DIR` (a huge-page tmpfs, say, as
//! `engram bench` uses).

use engram_core::{Fs, OpenOptions, Options};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let op = args.next().unwrap_or_else(|| "create".into());
    let count: u64 = args.next().map_or(Ok(20_000), |c| c.parse())?;
    let dir = std::env::var_os("ENGRAM_POOL_DIR").unwrap_or_else(|| "/dev/shm".into());
    let pool =
        std::path::Path::new(&dir).join(format!("engram-op-loop-{}.pool", std::process::id()));
    let socket = std::env::var_os("ENGRAM_SOCKET");
    let fs = match &socket {
        Some(s) => Fs::connect(std::path::Path::new(s))?,
        None => {
            Fs::mkfs(&pool, 512 << 20)?;
            Fs::open(&pool, &Options::default())?
        }
    };
    let started = std::time::Instant::now();
    fs.mkdir("/d", 0o755)?;
    let name = |i: u64| format!("/d/f{i}");
    let create = OpenOptions::new().write(true).create_new(true);
    let rw = OpenOptions::new().read(true).write(true);
    let page = vec![7u8; 4096];
    match op.as_str() {
        "create" => {
            for i in 0..count {
                fs.open_file(name(i), &create)?;
            }
        }
        "unlink" | "rename" => {
            for i in 0..count {
                fs.open_file(name(i), &create)?;
            }
            for i in 0..count {
                if op == "unlink" {
                    fs.unlink(name(i))?;
                } else {
                    fs.rename(name(i), format!("/d/r{i}"))?;
                }
            }
        }
        "stat" => {
            fs.mkdir("/a", 0o755)?;
            fs.mkdir("/a/b", 0o755)?;
            fs.mkdir("/a/b/c", 0o755)?;
            fs.mkdir("/a/b/c/d", 0o755)?;
            fs.write_file("/a/b/c/d/e", b"x")?;
            for _ in 0..count {
                fs.stat("/a/b/c/d/e")?;
            }
        }
        "overwrite" | "overwritesync" | "read" => {
            let f = fs.open_file(
                "/d/big",
                &OpenOptions::new().read(true).write(true).create(true),
            )?;
            for p in 0..256u64 {
                f.write_at(&page, p * 4096)?;
            }
            let f = fs.open_file("/d/big", &rw)?;
            let mut buf = vec![0u8; 4096];
            for i in 0..count {
                let off = (i * 97 % 256) * 4096;
                if op == "read" {
                    f.read_at(&mut buf, off)?;
                } else {
                    f.write_at(&page, off)?;
                }
                if op == "overwritesync" {
                    f.sync_data()?;
                }
            }
        }
        "append" => {
            let f = fs.open_file(
                "/d/log",
                &OpenOptions::new().write(true).create(true).append(true),
            )?;
            for _ in 0..count {
                f.write_next(&page)?;
            }
        }
        "append1m" => {
            let big = vec![9u8; 1 << 20];
            let f = fs.open_file(
                "/d/log",
                &OpenOptions::new().write(true).create(true).append(true),
            )?;
            for i in 0..count {
                // Start a new file every 256 MiB so that the pool never fills.
                if i % 256 == 255 {
                    f.set_len(0)?;
                }
                f.write_next(&big)?;
            }
        }
        "overwrite1m" => {
            let big = vec![9u8; 1 << 20];
            let f = fs.open_file(
                "/d/big",
                &OpenOptions::new().read(true).write(true).create(true),
            )?;
            for m in 0..16u64 {
                f.write_at(&big, m << 20)?;
            }
            for i in 0..count {
                f.write_at(&big, (i * 7 % 16) << 20)?;
            }
        }
        other => return Err(format!("unknown operation {other}").into()),
    }
    eprintln!(
        "{op}: {count} in {:.3} s ({:.2} µs per operation, setup included)",
        started.elapsed().as_secs_f64(),
        started.elapsed().as_secs_f64() * 1e6 / count.max(1) as f64
    );
    fs.unmount()?;
    if socket.is_none() {
        std::fs::remove_file(&pool)?;
    }
    Ok(())
}

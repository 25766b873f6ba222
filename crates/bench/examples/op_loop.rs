//! A tight loop of one EngramFS operation through the native API, for profilers
//! (`valgrind --tool=callgrind`, `perf record`): instruction counts per operation are
//! repeatable on a noisy machine where timings are not.
//!
//! `cargo run --release -p engram-bench --example op_loop -- OP [COUNT]`, OP one of
//! create, unlink, rename, stat, overwrite, append, read.

use engram_core::{Fs, OpenOptions, Options};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let op = args.next().unwrap_or_else(|| "create".into());
    let count: u64 = args.next().map_or(Ok(20_000), |c| c.parse())?;
    let pool = format!("/dev/shm/engram-op-loop-{}.pool", std::process::id());
    Fs::mkfs(&pool, 512 << 20)?;
    let fs = Fs::open(&pool, &Options::default())?;
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
        "overwrite" | "read" => {
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
        other => return Err(format!("unknown operation {other}").into()),
    }
    fs.unmount()?;
    std::fs::remove_file(&pool)?;
    Ok(())
}

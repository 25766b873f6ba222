//! Workloads: the operations the harness runs, the fixed starting tree, and the generated
//! sets (every single operation, ordered pairs, random sequences, and one that stores to
//! more lines in place than the server keeps unflushed).

use engram_core::{Clear, Fs, OpenOptions, RENAME_EXCHANGE, RENAME_NOREPLACE, Result};

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    Create(String),
    Mkdir(String),
    Rmdir(String),
    Unlink(String),
    Write {
        path: String,
        off: u64,
        len: u64,
        seed: u8,
    },
    Truncate(String, u64),
    Rename(String, String, u32),
    Link(String, String),
    Symlink(String, String),
    Chmod(String, u32),
    Fallocate {
        path: String,
        off: u64,
        len: u64,
        keep: bool,
    },
    /// A punched hole or a zeroed range (fallocate).
    Clear {
        path: String,
        off: u64,
        len: u64,
        how: Clear,
    },
    /// Open a file, unlink it, write through the still-open handle, close it.
    UnlinkOpen(String),
    /// mknod: a FIFO, socket or device (mode with its type bits, device number).
    Mknod(String, u32, u64),
}

/// Deterministic content for writes.
pub fn pattern(seed: u8, off: u64, len: u64) -> Vec<u8> {
    (0..len)
        .map(|i| seed.wrapping_add(((off + i) % 251) as u8))
        .collect()
}

impl Op {
    pub fn apply(&self, fs: &Fs) -> Result<()> {
        match self {
            Op::Create(p) => fs
                .open_file(p, &OpenOptions::new().write(true).create(true))
                .map(drop),
            Op::Mkdir(p) => fs.mkdir(p, 0o755),
            Op::Rmdir(p) => fs.rmdir(p),
            Op::Unlink(p) => fs.unlink(p),
            Op::Write {
                path,
                off,
                len,
                seed,
            } => {
                let f = fs.open_file(path, &OpenOptions::new().write(true))?;
                f.write_at(&pattern(*seed, *off, *len), *off).map(drop)
            }
            Op::Truncate(p, size) => fs.truncate(p, *size),
            Op::Rename(a, b, flags) => fs.rename_at(None, a.as_bytes(), None, b.as_bytes(), *flags),
            Op::Link(a, b) => fs.link(a, b),
            Op::Symlink(target, p) => fs.symlink(target, p),
            Op::Chmod(p, mode) => fs.chmod(p, *mode),
            Op::Fallocate {
                path,
                off,
                len,
                keep,
            } => {
                let f = fs.open_file(path, &OpenOptions::new().write(true))?;
                f.allocate(*off, *len, *keep)
            }
            Op::Clear {
                path,
                off,
                len,
                how,
            } => {
                let f = fs.open_file(path, &OpenOptions::new().write(true))?;
                f.clear(*off, *len, *how)
            }
            Op::UnlinkOpen(p) => {
                let f = fs.open_file(p, &OpenOptions::new().read(true).write(true))?;
                fs.unlink(p)?;
                f.write_at(b"still here", 0).map(drop)
            }
            Op::Mknod(p, mode, rdev) => fs.mknod(p, *mode, *rdev),
        }
    }
}

/// The tree every single-operation and pair workload starts from.
pub fn starting_tree(fs: &Fs) -> Result<()> {
    fs.write_file("/small", &pattern(1, 0, 100))?;
    fs.write_file("/page", &pattern(2, 0, 4096))?;
    fs.write_file("/big", &pattern(3, 0, 3 * 4096 + 100))?;
    fs.mkdir("/dir", 0o755)?;
    fs.mkdir("/dir/sub", 0o755)?;
    fs.write_file("/dir/sub/file", &pattern(4, 0, 5000))?;
    fs.write_file("/dir/a", &pattern(5, 0, 10))?;
    fs.mkdir("/empty", 0o700)?;
    fs.symlink("small", "/sl")?;
    fs.link("/page", "/hard")?;
    let f = fs.open_file("/sparse", &OpenOptions::new().write(true).create(true))?;
    f.write_at(&pattern(6, 20000, 100), 20000)?;
    Ok(())
}

fn s(x: &str) -> String {
    x.to_string()
}

fn write(path: &str, off: u64, len: u64, seed: u8) -> Op {
    Op::Write {
        path: s(path),
        off,
        len,
        seed,
    }
}

fn clear(path: &str, off: u64, len: u64, how: Clear) -> Op {
    Op::Clear {
        path: s(path),
        off,
        len,
        how,
    }
}

/// Every single operation of the engine, named.
pub fn singles() -> Vec<(String, Op)> {
    let long_target = "t".repeat(100);
    let v = vec![
        ("create", Op::Create(s("/new"))),
        ("create-nested", Op::Create(s("/dir/sub/new"))),
        (
            "create-long-name",
            Op::Create(format!("/{}", "n".repeat(200))),
        ),
        ("mkdir", Op::Mkdir(s("/newdir"))),
        ("mkdir-nested", Op::Mkdir(s("/dir/sub/deep"))),
        ("rmdir", Op::Rmdir(s("/empty"))),
        ("rmdir-nonempty", Op::Rmdir(s("/dir"))),
        ("unlink", Op::Unlink(s("/small"))),
        ("unlink-hardlink", Op::Unlink(s("/hard"))),
        ("unlink-symlink", Op::Unlink(s("/sl"))),
        ("unlink-open", Op::UnlinkOpen(s("/big"))),
        ("rename", Op::Rename(s("/small"), s("/moved"), 0)),
        ("rename-replace", Op::Rename(s("/small"), s("/page"), 0)),
        (
            "rename-dir-replace-empty",
            Op::Rename(s("/dir"), s("/empty"), 0),
        ),
        (
            "rename-dir-across",
            Op::Rename(s("/dir/sub"), s("/moved-sub"), 0),
        ),
        (
            "rename-into-subdir",
            Op::Rename(s("/big"), s("/dir/sub/big"), 0),
        ),
        (
            "rename-exchange",
            Op::Rename(s("/small"), s("/dir"), RENAME_EXCHANGE),
        ),
        (
            "rename-noreplace",
            Op::Rename(s("/small"), s("/big"), RENAME_NOREPLACE),
        ),
        (
            "rename-dir-into-itself",
            Op::Rename(s("/dir"), s("/dir/sub/x"), 0),
        ),
        ("link", Op::Link(s("/small"), s("/dir/link2"))),
        ("symlink", Op::Symlink(s("small"), s("/dir/sl2"))),
        ("symlink-long", Op::Symlink(long_target, s("/lsl"))),
        ("mkfifo", Op::Mknod(s("/fifo"), libc::S_IFIFO | 0o640, 0)),
        (
            "mknod-char-device",
            Op::Mknod(s("/dir/null"), libc::S_IFCHR | 0o666, libc::makedev(1, 3)),
        ),
        ("append-in-page", write("/small", 100, 50, 7)),
        ("append-across-pages", write("/small", 100, 9000, 8)),
        ("overwrite-aligned", write("/big", 4096, 4096, 9)),
        ("overwrite-unaligned", write("/big", 1000, 5000, 10)),
        ("overwrite-and-extend", write("/big", 10000, 8000, 11)),
        ("extend-over-hole", write("/small", 30000, 10, 12)),
        ("fill-hole", write("/sparse", 0, 100, 13)),
        ("write-large", write("/big", 0, 40000, 14)),
        // /big (4 pages) has its index in its inode: past 7 pages it moves to a node of its
        // own, which takes the pages it keeps.
        (
            "append-outgrows-small-node",
            write("/big", 3 * 4096 + 100, 20000, 15),
        ),
        ("truncate-down", Op::Truncate(s("/big"), 10)),
        ("truncate-zero", Op::Truncate(s("/big"), 0)),
        ("truncate-up", Op::Truncate(s("/small"), 20000)),
        ("chmod", Op::Chmod(s("/small"), 0o600)),
        (
            "fallocate",
            Op::Fallocate {
                path: s("/small"),
                off: 0,
                len: 20000,
                keep: false,
            },
        ),
        (
            "fallocate-keep-size",
            Op::Fallocate {
                path: s("/small"),
                off: 0,
                len: 20000,
                keep: true,
            },
        ),
        // Part of page 0, all of page 1, part of page 2.
        ("punch-hole", clear("/big", 1000, 9000, Clear::PunchHole)),
        (
            "zero-range",
            clear("/big", 1000, 5000, Clear::ZeroRange { keep_size: true }),
        ),
        (
            "zero-range-grow",
            clear("/small", 50, 20000, Clear::ZeroRange { keep_size: false }),
        ),
    ];
    v.into_iter().map(|(n, o)| (n.to_string(), o)).collect()
}

/// A small deterministic generator (splitmix64).
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
}

/// More distinct lines stored to in place between two checkpoints than the server keeps
/// unflushed (`oplog::Unflushed::RUNS`): 40 creates, then a chmod of each file (each its
/// own inode's line, a run of its own), so that the older runs are written back while
/// later records are made; then writes and unlinks over them. Without it no workload
/// reaches that write-back (the log's checkpoints empty the runs first).
pub fn many_lines() -> Vec<Op> {
    let n = 40;
    let name = |i: u64| format!("/f{i}");
    let mut ops: Vec<Op> = (0..n).map(|i| Op::Create(name(i))).collect();
    ops.extend((0..n).map(|i| Op::Chmod(name(i), 0o600 + i as u32)));
    ops.extend((0..4).map(|i| Op::Write {
        path: name(i * 7),
        off: 0,
        len: 100,
        seed: i as u8,
    }));
    ops.extend((0..4).map(|i| Op::Unlink(name(i * 5 + 1))));
    ops
}

/// Writes that need the pages of a file unlinked just before, in a pool too small for both:
/// the allocation runs dry in the middle of the write and the server checkpoints to reclaim
/// them (`Server::make_room`). Since a reservation takes at most a sixteenth of the free
/// pages (5e3dd80), no other workload runs the 1 MiB pool dry: the full set's checkpoints
/// went from 13 to 1, which this brings back.
pub fn space_reuse() -> Vec<Op> {
    let write = |path: &str, len: u64, seed: u8| Op::Write {
        path: path.to_string(),
        off: 0,
        len,
        seed,
    };
    vec![
        Op::Create("/a".to_string()),
        write("/a", 360 << 10, 1),
        Op::Create("/b".to_string()),
        write("/b", 200 << 10, 2),
        Op::Unlink("/a".to_string()),
        Op::Create("/c".to_string()),
        write("/c", 360 << 10, 3),
        Op::Unlink("/b".to_string()),
        write("/c", 360 << 10, 4),
        Op::Create("/a".to_string()),
        write("/a", 200 << 10, 5),
        write("/c", 360 << 10, 6),
        Op::Unlink("/a".to_string()),
        write("/c", 360 << 10, 7),
    ]
}

/// A random sequence of `len` operations over a small set of names, so that they collide.
pub fn random_sequence(rng: &mut Rng, len: usize) -> Vec<Op> {
    const NAMES: [&str; 8] = ["/a", "/b", "/d", "/d/a", "/d/b", "/d/e", "/d/e/c", "/small"];
    let mut ops = Vec::with_capacity(len);
    for _ in 0..len {
        let mut name = || NAMES[rng.below(NAMES.len() as u64) as usize].to_string();
        let (a, b) = (name(), name());
        let op = match rng.below(15) {
            0 | 1 => Op::Create(a),
            2 => Op::Mkdir(a),
            3 => Op::Rmdir(a),
            4 => Op::Unlink(a),
            5..=7 => {
                let off = rng.below(3) * 4096 + rng.below(2) * rng.below(4096);
                let len = 1 + rng.below(3) * rng.below(6000);
                Op::Write {
                    path: a,
                    off,
                    len,
                    seed: rng.below(250) as u8,
                }
            }
            8 => Op::Truncate(a, rng.below(3) * rng.below(9000)),
            9 => Op::Rename(
                a,
                b,
                [0, 0, RENAME_NOREPLACE, RENAME_EXCHANGE][rng.below(4) as usize],
            ),
            10 => Op::Link(a, b),
            11 => Op::Symlink(b.trim_start_matches('/').to_string(), a),
            12 => Op::Chmod(a, 0o600 + rng.below(0o177) as u32),
            13 => Op::Fallocate {
                path: a,
                off: rng.below(8000),
                len: 1 + rng.below(9000),
                keep: rng.below(2) == 0,
            },
            _ => Op::Clear {
                path: a,
                off: rng.below(8000),
                len: 1 + rng.below(9000),
                how: [
                    Clear::PunchHole,
                    Clear::ZeroRange { keep_size: false },
                    Clear::ZeroRange { keep_size: true },
                ][rng.below(3) as usize],
            },
        };
        ops.push(op);
    }
    ops
}

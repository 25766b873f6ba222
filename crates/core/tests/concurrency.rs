//! Several threads sharing one `Fs`: atomic writes seen whole by lock-free readers, disjoint
//! writers, creates, renames and appends racing in one directory or file.

mod common;

use common::{assert_clean, new_fs, remount};
use engram_core::{Fs, OpenOptions};
use libc::ENOENT;
use std::collections::{HashMap, HashSet};
use std::sync::Barrier;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;

const PAGE: usize = 4096;
const MIB: u64 = 1 << 20;

fn rw() -> OpenOptions {
    OpenOptions::new().read(true).write(true)
}

/// 16 pages, page `p` filled with the byte `gen + p`.
fn generation_image(generation: u8) -> Vec<u8> {
    let mut buf = vec![0u8; 16 * PAGE];
    for (p, page) in buf.chunks_mut(PAGE).enumerate() {
        page.fill(generation.wrapping_add(p as u8));
    }
    buf
}

/// Check that `buf`, read at `off` within the 64 KiB image, comes from one generation.
fn check_one_generation(buf: &[u8], off: usize) -> u8 {
    let generation = buf[0].wrapping_sub((off / PAGE) as u8);
    for (i, &b) in buf.iter().enumerate() {
        let p = (off + i) / PAGE;
        assert_eq!(
            b,
            generation.wrapping_add(p as u8),
            "torn read: byte {} (page {p}) is from another generation than byte {off}",
            off + i
        );
    }
    generation
}

#[test]
fn readers_never_see_torn_writes() {
    let (_p, fs) = new_fs("torn", 64);
    let f = fs.open_file("/f", &rw().create(true)).unwrap();
    f.write_at(&generation_image(0), 0).unwrap();
    drop(f);
    let done = AtomicBool::new(false);
    let reads = AtomicU64::new(0);
    let generations = 3000u32;
    thread::scope(|s| {
        let writer_fs = fs.clone();
        let done = &done;
        s.spawn(move || {
            let f = writer_fs.open_file("/f", &rw()).unwrap();
            for g in 1..=generations {
                assert_eq!(
                    f.write_at(&generation_image(g as u8), 0).unwrap(),
                    16 * PAGE
                );
            }
            done.store(true, Ordering::SeqCst);
        });
        let mut readers = Vec::new();
        for r in 0..3 {
            let fs = fs.clone();
            let reads = &reads;
            readers.push(s.spawn(move || {
                let f = fs.open_file("/f", &OpenOptions::new().read(true)).unwrap();
                let mut seen = HashSet::new();
                let mut buf = vec![0u8; 16 * PAGE];
                // Whole-range reads, and unaligned ones that still span many pages.
                let (off, len) = match r {
                    0 => (0, 16 * PAGE),
                    1 => (PAGE - 1, 14 * PAGE + 2),
                    _ => (5000, 40_000),
                };
                while !done.load(Ordering::SeqCst) {
                    assert_eq!(f.read_at(&mut buf[..len], off as u64).unwrap(), len);
                    seen.insert(check_one_generation(&buf[..len], off));
                    reads.fetch_add(1, Ordering::Relaxed);
                }
                // One final read sees the last generation.
                f.read_at(&mut buf[..len], off as u64).unwrap();
                assert_eq!(check_one_generation(&buf[..len], off), generations as u8);
                seen.len()
            }));
        }
        let distinct: usize = readers.into_iter().map(|h| h.join().unwrap()).sum();
        // Not a timing assertion: 3 readers over 3000 writes see at least two generations
        // unless the scheduler never ran them alongside the writer (then the test is void).
        assert!(distinct > 1, "the readers never overlapped the writer");
    });
    assert!(reads.load(Ordering::Relaxed) > 3, "the readers barely ran");
    assert_eq!(
        fs.read_file("/f").unwrap(),
        generation_image(generations as u8)
    );
    assert_eq!(
        fs.stat("/f").unwrap().blocks,
        16 * 8,
        "old pages were not all released"
    );
    assert_clean(&fs);
}

#[test]
fn disjoint_writers_one_file() {
    let (p, fs) = new_fs("disjoint", 64);
    drop(fs.open_file("/f", &rw().create(true)).unwrap());
    let threads = 4u64;
    let region = 2 * MIB;
    let byte_at =
        |pos: u64, pass: u64| (pos.wrapping_mul(31) ^ (pos >> 12) ^ pass.wrapping_mul(101)) as u8;
    let barrier = Barrier::new(threads as usize);
    // Phase 1: each thread owns a 2 MiB region and writes it in odd-sized pieces, in a
    // scattered order, three times over.
    thread::scope(|s| {
        for t in 0..threads {
            let fs = fs.clone();
            let barrier = &barrier;
            s.spawn(move || {
                let f = fs.open_file("/f", &rw()).unwrap();
                barrier.wait();
                let piece = 3001 + 1000 * t;
                let base = t * region;
                let count = region.div_ceil(piece);
                for pass in 0..3 {
                    for k in 0..count {
                        let i = (k * 7919 + t) % count;
                        let start = base + i * piece;
                        let end = (start + piece).min(base + region);
                        let data: Vec<u8> = (start..end).map(|pos| byte_at(pos, pass)).collect();
                        assert_eq!(f.write_at(&data, start).unwrap(), data.len());
                    }
                }
            });
        }
    });
    let data = fs.read_file("/f").unwrap();
    assert_eq!(data.len() as u64, threads * region);
    for (pos, &b) in data.iter().enumerate() {
        assert_eq!(b, byte_at(pos as u64, 2), "byte {pos} lost its last write");
    }
    // Phase 2: byte-disjoint writes that share pages (1000-byte stripes dealt round-robin).
    let stripe = 1000u64;
    let total = 3 * MIB;
    thread::scope(|s| {
        for t in 0..threads {
            let fs = fs.clone();
            let barrier = &barrier;
            s.spawn(move || {
                let f = fs.open_file("/f", &rw()).unwrap();
                barrier.wait();
                for i in (t..total / stripe).step_by(threads as usize) {
                    let data: Vec<u8> = (i * stripe..(i + 1) * stripe)
                        .map(|pos| byte_at(pos, 7))
                        .collect();
                    f.write_at(&data, i * stripe).unwrap();
                }
            });
        }
    });
    let data = fs.read_file("/f").unwrap();
    for (pos, &b) in data.iter().enumerate() {
        let want = if (pos as u64) < total / stripe * stripe {
            byte_at(pos as u64, 7)
        } else {
            byte_at(pos as u64, 2)
        };
        assert_eq!(b, want, "byte {pos} lost a write to a shared page");
    }
    assert_clean(&fs);
    let fs = remount(&p, fs);
    assert!(fs.read_file("/f").unwrap() == data);
    assert_clean(&fs);
}

#[test]
fn concurrent_creates_in_one_directory() {
    let (p, fs) = new_fs("creates", 128);
    fs.mkdir("/d", 0o755).unwrap();
    let threads = 4;
    let per_thread = 2000;
    let done = AtomicBool::new(false);
    let barrier = Barrier::new(threads + 1);
    thread::scope(|s| {
        let mut creators = Vec::new();
        for t in 0..threads {
            let fs = fs.clone();
            let barrier = &barrier;
            creators.push(s.spawn(move || {
                barrier.wait();
                for i in 0..per_thread {
                    let path = format!("/d/t{t}-{i}");
                    let f = fs
                        .open_file(&path, &OpenOptions::new().write(true).create_new(true))
                        .unwrap();
                    if i % 100 == 0 {
                        f.write_at(path.as_bytes(), 0).unwrap();
                    }
                    if i % 500 == 0 {
                        fs.mkdir(format!("/d/dir{t}-{i}"), 0o755).unwrap();
                    }
                }
            }));
        }
        // A reader lists the directory while it grows: no name twice in one pass.
        let fs = fs.clone();
        let (done, barrier) = (&done, &barrier);
        let lister = s.spawn(move || {
            barrier.wait();
            let mut passes = 0;
            while !done.load(Ordering::SeqCst) {
                let mut seen = HashSet::new();
                for e in fs.read_dir("/d").unwrap() {
                    let name = e.unwrap().name;
                    assert!(
                        seen.insert(name.clone()),
                        "{} listed twice in one pass",
                        String::from_utf8_lossy(&name)
                    );
                }
                passes += 1;
            }
            passes
        });
        for c in creators {
            c.join().unwrap();
        }
        done.store(true, Ordering::SeqCst);
        assert!(lister.join().unwrap() > 0);
    });
    let check = |fs: &Fs| {
        let mut seen = HashSet::new();
        for e in fs.read_dir("/d").unwrap() {
            let e = e.unwrap();
            assert!(
                seen.insert(e.name_str().into_owned()),
                "{} listed twice",
                e.name_str()
            );
        }
        for t in 0..threads {
            for i in 0..per_thread {
                assert!(seen.contains(&format!("t{t}-{i}")), "t{t}-{i} missing");
            }
        }
        assert_eq!(seen.len(), 2 + threads * per_thread + threads * 4);
        assert_eq!(fs.stat("/d").unwrap().nlink as usize, 2 + threads * 4);
        assert_eq!(fs.read_file("/d/t3-1900").unwrap(), b"/d/t3-1900");
    };
    check(&fs);
    assert_clean(&fs);
    let fs = remount(&p, fs);
    check(&fs);
    assert_clean(&fs);
}

#[test]
fn concurrent_renames_and_stats() {
    let (p, fs) = new_fs("renames", 64);
    fs.mkdir("/a", 0o755).unwrap();
    fs.mkdir("/b", 0o755).unwrap();
    let files = 64;
    let mut inos = HashMap::new();
    for i in 0..files {
        fs.write_file(format!("/a/f{i}"), format!("content {i}").as_bytes())
            .unwrap();
        inos.insert(i, fs.stat(format!("/a/f{i}")).unwrap().ino);
    }
    // Directories that move between /a and /b with a file inside.
    for i in 0..4 {
        fs.mkdir(format!("/a/dir{i}"), 0o755).unwrap();
        fs.write_file(format!("/a/dir{i}/inner"), format!("inner {i}").as_bytes())
            .unwrap();
    }
    let done = AtomicBool::new(false);
    let renames = 400;
    let stats = AtomicU64::new(0);
    thread::scope(|s| {
        let mut movers = Vec::new();
        for t in 0..2usize {
            let fs = fs.clone();
            movers.push(s.spawn(move || {
                for r in 0..renames {
                    // Thread t owns the files with i % 2 == t.
                    for i in (t..files).step_by(2) {
                        let (from, to) = if r % 2 == 0 { ("a", "b") } else { ("b", "a") };
                        let (fname, tname) = if r % 2 == 0 {
                            (format!("f{i}"), format!("g{i}"))
                        } else {
                            (format!("g{i}"), format!("f{i}"))
                        };
                        fs.rename(format!("/{from}/{fname}"), format!("/{to}/{tname}"))
                            .unwrap();
                    }
                    // And owns two of the directories.
                    for d in [t, t + 2] {
                        let (from, to) = if r % 2 == 0 { ("a", "b") } else { ("b", "a") };
                        fs.rename(format!("/{from}/dir{d}"), format!("/{to}/dir{d}"))
                            .unwrap();
                    }
                }
            }));
        }
        for _ in 0..2 {
            let fs = fs.clone();
            let (inos, done, stats) = (&inos, &done, &stats);
            s.spawn(move || {
                let mut k = 0usize;
                while !done.load(Ordering::SeqCst) {
                    k += 1;
                    let i = k * 7 % files;
                    for path in [format!("/a/f{i}"), format!("/b/g{i}")] {
                        match fs.stat(&path) {
                            Ok(m) => {
                                assert_eq!(m.ino, inos[&i], "{path} resolved to another inode");
                                assert_eq!(m.size, format!("content {i}").len() as u64);
                            }
                            Err(e) => assert_eq!(e.errno(), ENOENT, "stat {path}: {e}"),
                        }
                        match fs.read_file(&path) {
                            Ok(data) => assert_eq!(data, format!("content {i}").as_bytes()),
                            Err(e) => assert_eq!(e.errno(), ENOENT, "read {path}: {e}"),
                        }
                    }
                    let d = k % 4;
                    for path in [format!("/a/dir{d}/inner"), format!("/b/dir{d}/inner")] {
                        match fs.read_file(&path) {
                            Ok(data) => assert_eq!(data, format!("inner {d}").as_bytes()),
                            Err(e) => assert_eq!(e.errno(), ENOENT, "read {path}: {e}"),
                        }
                    }
                    stats.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        for m in movers {
            m.join().unwrap();
        }
        done.store(true, Ordering::SeqCst);
    });
    assert!(stats.load(Ordering::Relaxed) > 10);
    // renames is even: everything is back in /a under its first name.
    let check = |fs: &Fs| {
        for i in 0..files {
            assert_eq!(
                fs.read_file(format!("/a/f{i}")).unwrap(),
                format!("content {i}").as_bytes()
            );
            assert_eq!(fs.stat(format!("/a/f{i}")).unwrap().ino, inos[&i]);
        }
        for i in 0..4 {
            assert_eq!(
                fs.read_file(format!("/a/dir{i}/inner")).unwrap(),
                format!("inner {i}").as_bytes()
            );
            assert_eq!(
                fs.stat(format!("/a/dir{i}/..")).unwrap().ino,
                fs.stat("/a").unwrap().ino
            );
        }
        assert_eq!(fs.read_dir("/b").unwrap().count(), 2);
        assert_eq!(fs.stat("/a").unwrap().nlink, 6);
        assert_eq!(fs.stat("/b").unwrap().nlink, 2);
    };
    check(&fs);
    assert_clean(&fs);
    let fs = remount(&p, fs);
    check(&fs);
    assert_clean(&fs);
}

const RECORD: usize = 100;

/// A fixed-size record: thread, sequence number, filler, and a checksum.
fn record(t: usize, seq: usize) -> Vec<u8> {
    let mut r = format!("T{t:02} S{seq:06} ").into_bytes();
    while r.len() < RECORD - 10 {
        r.push(b'a' + ((t * 7 + seq + r.len()) % 26) as u8);
    }
    let sum: u32 = r.iter().map(|&b| b as u32).sum();
    r.extend_from_slice(format!(" {sum:08}\n").as_bytes());
    assert_eq!(r.len(), RECORD);
    r
}

fn parse_record(r: &[u8]) -> Option<(usize, usize)> {
    let s = std::str::from_utf8(r).ok()?;
    let t = s.get(1..3)?.parse().ok()?;
    let seq = s.get(5..11)?.parse().ok()?;
    (record(t, seq) == r).then_some((t, seq))
}

#[test]
fn concurrent_appends() {
    let (p, fs) = new_fs("appends", 64);
    drop(fs.open_file("/log", &rw().create(true)).unwrap());
    let threads = 4;
    let per_thread = 1000;
    let barrier = Barrier::new(threads);
    thread::scope(|s| {
        for t in 0..threads {
            let fs = fs.clone();
            let barrier = &barrier;
            s.spawn(move || {
                let f = fs
                    .open_file("/log", &OpenOptions::new().write(true).append(true))
                    .unwrap();
                barrier.wait();
                for seq in 0..per_thread {
                    let r = record(t, seq);
                    // Half the threads use the offset-moving write, half pwrite (which
                    // appends too on an O_APPEND file).
                    let n = if t % 2 == 0 {
                        f.write_next(&r).unwrap()
                    } else {
                        f.write_at(&r, 0).unwrap()
                    };
                    assert_eq!(n, RECORD);
                }
            });
        }
    });
    let check = |fs: &Fs| {
        let data = fs.read_file("/log").unwrap();
        assert_eq!(data.len(), threads * per_thread * RECORD);
        let mut next = vec![0; threads];
        for (k, r) in data.chunks(RECORD).enumerate() {
            let (t, seq) = parse_record(r).unwrap_or_else(|| {
                panic!("record {k} is damaged: {:?}", String::from_utf8_lossy(r))
            });
            assert_eq!(
                seq, next[t],
                "thread {t}'s records out of order or repeated at record {k}"
            );
            next[t] += 1;
        }
        assert!(next.iter().all(|&n| n == per_thread));
    };
    check(&fs);
    assert_clean(&fs);
    let fs = remount(&p, fs);
    check(&fs);
    assert_clean(&fs);
}

#[test]
fn truncate_and_write_race_with_readers() {
    let (_p, fs) = new_fs("truncrace", 64);
    let f = fs.open_file("/f", &rw().create(true)).unwrap();
    f.write_at(&generation_image(0), 0).unwrap();
    drop(f);
    let done = AtomicBool::new(false);
    thread::scope(|s| {
        let writer_fs = fs.clone();
        let done = &done;
        s.spawn(move || {
            let f = writer_fs.open_file("/f", &rw()).unwrap();
            for g in 1..=1000u32 {
                f.set_len(0).unwrap();
                f.write_at(&generation_image(g as u8), 0).unwrap();
            }
            done.store(true, Ordering::SeqCst);
        });
        for _ in 0..2 {
            let fs = fs.clone();
            s.spawn(move || {
                let f = fs.open_file("/f", &OpenOptions::new().read(true)).unwrap();
                let mut buf = vec![0u8; 16 * PAGE];
                let (mut empty, mut full) = (0, 0);
                while !done.load(Ordering::SeqCst) {
                    match f.read_at(&mut buf, 0).unwrap() {
                        0 => empty += 1,
                        n => {
                            assert_eq!(n, 16 * PAGE, "a read saw a partly written file");
                            check_one_generation(&buf, 0);
                            full += 1;
                        }
                    }
                }
                (empty, full)
            });
        }
    });
    assert_eq!(fs.read_file("/f").unwrap(), generation_image(1000u32 as u8));
    assert_clean(&fs);
}

#[test]
fn exclusive_create_races_have_one_winner() {
    let (_p, fs) = new_fs("excl", 64);
    let rounds = 500;
    let wins: Vec<AtomicU64> = (0..rounds).map(|_| AtomicU64::new(0)).collect();
    let dir_wins: Vec<AtomicU64> = (0..rounds).map(|_| AtomicU64::new(0)).collect();
    thread::scope(|s| {
        for _ in 0..4 {
            let fs = fs.clone();
            let (wins, dir_wins) = (&wins, &dir_wins);
            s.spawn(move || {
                for i in 0..rounds {
                    match fs.open_file(
                        format!("/race{i}"),
                        &OpenOptions::new().write(true).create_new(true),
                    ) {
                        Ok(_) => {
                            wins[i].fetch_add(1, Ordering::SeqCst);
                        }
                        Err(e) => assert_eq!(e.errno(), libc::EEXIST, "{e}"),
                    }
                    match fs.mkdir(format!("/dir{i}"), 0o755) {
                        Ok(()) => {
                            dir_wins[i].fetch_add(1, Ordering::SeqCst);
                        }
                        Err(e) => assert_eq!(e.errno(), libc::EEXIST, "{e}"),
                    }
                }
            });
        }
    });
    for i in 0..rounds {
        assert_eq!(
            wins[i].load(Ordering::SeqCst),
            1,
            "/race{i} created more or less than once"
        );
        assert_eq!(
            dir_wins[i].load(Ordering::SeqCst),
            1,
            "/dir{i} created more or less than once"
        );
    }
    assert_eq!(fs.stat("/").unwrap().nlink as usize, 2 + rounds);
    assert_clean(&fs);
}

/// A forked child of a process that opened the pool in-process changes nothing through
/// the `Fs` it inherited: its copy of the server's state would write over the parent's in
/// the pool they share, and its reservation list is the parent's. Its write and its create
/// get EIO, and dropping the `Fs` leaves the pool as the parent has it (no shutdown of the
/// copy); the parent goes on, and the pool remounts clean with the parent's data.
#[test]
fn a_forked_child_changes_nothing_through_its_parent_s_pool() {
    let (p, fs) = new_fs("forked-child", 32);
    let f = fs.open_file("/kept", &rw().create(true)).unwrap();
    f.write_at(&[1u8; 8192], 0).unwrap();
    // SAFETY: fork; the child uses only the inherited `Fs` and leaves with _exit.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        let eio = |r: engram_core::Result<()>| matches!(r, Err(e) if e.errno() == libc::EIO);
        let wrote = eio(f.write_at(&[0xEEu8; 8192], 0).map(drop));
        let made = eio(fs.write_file("/child", b"x"));
        drop(f);
        drop(fs);
        // SAFETY: ending the child without the parent's other destructors.
        unsafe { libc::_exit(if wrote && made { 0 } else { 1 }) };
    }
    let mut status = 0;
    // SAFETY: waiting for our own child.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "the forked child's changes were not refused with EIO (status {status:#x})"
    );
    f.write_at(&[2u8; 4096], 4096).unwrap();
    drop(f);
    assert_clean(&fs);
    let fs = remount(&p, fs);
    let mut want = vec![1u8; 8192];
    want[4096..].fill(2);
    assert_eq!(fs.read_file("/kept").unwrap(), want);
    assert!(fs.stat("/child").is_err());
    assert_clean(&fs);
}

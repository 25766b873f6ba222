//! Writes beyond the end of file in place through the daemon: a client alone in holding a
//! file open for writing appends into its last page without copying it; once another
//! client holds it open for writing too, both copy, and what the other makes visible
//! beyond the old end of file (a growing truncate, fallocate, a write past the end) reads
//! as zeros and never as bytes the first was writing in place (architecture.md, "Appends
//! in place through the daemon"). Each `Fs::connect` is its own client.

use super::{Daemon, assert_fsck_clean, send};
use engram_core::request::{Request, Response, WriteCheck};
use engram_core::{Fs, OpenOptions, index, inode};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

fn rw() -> OpenOptions {
    OpenOptions::new().read(true).write(true)
}

/// Two clients of the daemon `d`.
fn two_clients(d: &Daemon) -> (Fs, Fs) {
    let connect = || Fs::connect(&d.socket).unwrap();
    (connect(), connect())
}

fn contents(fs: &Fs, path: &str) -> Vec<u8> {
    fs.read_file(path).unwrap()
}

/// One client appends alone (in place), then a second opens the file for writing and grows
/// it three ways while the first still holds it: every byte is where a model puts it.
#[test]
fn growth_by_a_second_writer_reads_as_zeros_and_keeps_every_append() {
    let d = Daemon::start("in-place-growth", 64 << 20);
    let (a, b) = two_clients(&d);
    let fa = a.open_file("/f", &rw().create(true).append(true)).unwrap();
    let mut model = Vec::new();
    // Alone: 300 appends of odd sizes, most of them inside the last page.
    for i in 0..300usize {
        let rec = vec![(i % 250) as u8 + 1; i % 97 + 1];
        fa.write_next(&rec).unwrap();
        model.extend_from_slice(&rec);
    }
    assert_eq!(contents(&b, "/f"), model);
    let fb = b.open_file("/f", &rw()).unwrap();
    // A growing truncate, while the first client holds the file open for writing.
    let grown = model.len() as u64 + 3000;
    fb.set_len(grown).unwrap();
    model.resize(grown as usize, 0);
    assert_eq!(contents(&a, "/f"), model);
    // The first client appends after it (both hold the file now: a copy).
    fa.write_next(b"after the truncate").unwrap();
    model.extend_from_slice(b"after the truncate");
    // A write past the end leaves a gap.
    let at = model.len() as u64 + 5000;
    fb.write_at(b"past the end", at).unwrap();
    model.resize(at as usize, 0);
    model.extend_from_slice(b"past the end");
    // fallocate growing the file.
    let end = model.len() as u64 + 7000;
    fb.allocate(model.len() as u64 - 4, end - model.len() as u64 + 4, false)
        .unwrap();
    model.resize(end as usize, 0);
    assert_eq!(contents(&a, "/f"), model);
    // The second writer gone, the first appends alone again.
    drop(fb);
    for i in 0..50usize {
        let rec = vec![b'z' - (i % 20) as u8; i + 1];
        fa.write_next(&rec).unwrap();
        model.extend_from_slice(&rec);
    }
    assert_eq!(contents(&b, "/f"), model);
    assert_eq!(a.stat("/f").unwrap().size, model.len() as u64);
    // The pages replaced by the growth were retired and their block counts kept.
    assert_fsck_clean(&a);
}

/// Growth by a second writer over pages the first allocated ahead: the page holding the old
/// end of file is copied, those wholly beyond it become holes (no copy, no space), except
/// where a growing fallocate allocates; the bytes read as zeros and the counts stay right.
#[test]
fn growth_by_a_second_writer_makes_holes_of_pages_allocated_ahead() {
    let d = Daemon::start("in-place-holes", 64 << 20);
    let (a, b) = two_clients(&d);
    let fa = a.open_file("/f", &rw().create(true)).unwrap();
    fa.write_at(&[b'a'; 100], 0).unwrap();
    fa.allocate(0, 64 * 4096, true).unwrap();
    let pages = |fs: &Fs| fs.stat("/f").unwrap().blocks / 8;
    assert_eq!(pages(&a), 64);
    let fb = b.open_file("/f", &rw()).unwrap();
    // Pages 1..33 become holes, page 0 a copy; 33..64 stay beyond the end.
    fb.set_len(32 * 4096 + 1).unwrap();
    let mut model = vec![b'a'; 100];
    model.resize(32 * 4096 + 1, 0);
    assert_eq!(contents(&a, "/f"), model);
    assert_eq!(pages(&a), 64 - 32);
    // fallocate to page 50 from page 40: pages 33..40 become holes, 40..50 stay allocated.
    fb.allocate(40 * 4096, 10 * 4096, false).unwrap();
    model.resize(50 * 4096, 0);
    assert_eq!(contents(&b, "/f"), model);
    assert_eq!(pages(&a), 64 - 32 - 7);
    // The first client's append, begun alone, now lands in a copy.
    fa.write_at(b"end", 50 * 4096).unwrap();
    model.extend_from_slice(b"end");
    assert_eq!(contents(&b, "/f"), model);
    assert_fsck_clean(&a);
}

/// A write past the end into a page the file already has: the old bytes between the end
/// of file and the write read as zeros, also in the page the client writes in place (the
/// server zeroes that gap; SQLite's `-shm` is truncated to 3 bytes, then written at 4095).
#[test]
fn the_gap_before_a_write_in_place_reads_as_zeros() {
    let d = Daemon::start("in-place-gap", 64 << 20);
    let fs = Fs::connect(&d.socket).unwrap();
    let f = fs.open_file("/shm", &rw().create(true)).unwrap();
    f.write_at(&[b'a'; 300], 0).unwrap();
    f.set_len(100).unwrap();
    f.write_at(b"X", 200).unwrap();
    let mut want = vec![b'a'; 100];
    want.resize(200, 0);
    want.push(b'X');
    assert_eq!(contents(&fs, "/shm"), want);
    // Across pages: the gap spans the rest of page 0 (stale bytes) and page 1, and the
    // write goes in place into page 2, allocated ahead.
    f.write_at(&[b'b'; 3 * 4096], 0).unwrap();
    f.set_len(3).unwrap();
    f.allocate(0, 3 * 4096, true).unwrap();
    f.write_at(b"Y", 2 * 4096 + 7).unwrap();
    let mut want = vec![b'b'; 3];
    want.resize(2 * 4096 + 7, 0);
    want.push(b'Y');
    assert_eq!(contents(&fs, "/shm"), want);
}

/// A record: a non-zero magic word, its number, and a payload derived from the number, no
/// byte of it zero (so the zeros between records can be skipped).
const REC: usize = 160;

fn record(seq: u32) -> Vec<u8> {
    let mut r = Vec::with_capacity(REC);
    r.extend_from_slice(&0xE5A1_u32.to_le_bytes());
    r.extend_from_slice(&(seq | 0x8000_0000).to_le_bytes());
    r.extend((0..REC - 8).map(|i| (seq as usize * 31 + i) as u8 | 1));
    r
}

/// One client appends records while another, over and over, opens the file for writing,
/// grows it with fallocate (which never shrinks it) and closes it: the file is the records
/// in order, each whole and once, with runs of zeros between them and nothing else.
#[test]
fn appends_beside_another_writers_growth_stay_whole() {
    let d = Daemon::start("in-place-race", 64 << 20);
    let (a, b) = two_clients(&d);
    let fa = a
        .open_file("/log", &rw().create(true).append(true))
        .unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let grower = {
        let done = done.clone();
        std::thread::spawn(move || {
            let mut grown = 0;
            while !done.load(Ordering::Relaxed) {
                let f = b.open_file("/log", &rw()).unwrap();
                let size = f.metadata().unwrap().size;
                f.allocate(size, 1 + grown % 300, false).unwrap();
                grown += 1;
            }
            grown
        })
    };
    const N: u32 = 60_000;
    for seq in 0..N {
        fa.write_next(&record(seq)).unwrap();
    }
    done.store(true, Ordering::Relaxed);
    let grown = grower.join().unwrap();
    let data = contents(&a, "/log");
    let mut pos = 0;
    let mut next = 0u32;
    while pos < data.len() {
        if data[pos] == 0 {
            pos += 1;
            continue;
        }
        let want = record(next);
        assert!(
            data.len() >= pos + REC && data[pos..pos + REC] == want[..],
            "record {next} (of {N}) is not whole at offset {pos} (after {grown} growths)"
        );
        pos += REC;
        next += 1;
    }
    assert_eq!(next, N, "records found, after {grown} growths");
    assert_fsck_clean(&a);
}

/// The data page of page `pg` of inode `ino`, and the inode's size, as a client reads them.
fn page_and_size(fs: &Fs, ino: u64, pg: u64) -> (u64, u64) {
    let geo = fs.mount_info().geometry;
    let d = inode::read(fs.pool(), &geo, ino);
    let page = index::lookup(fs.pool(), &geo, d.root, d.height, pg).unwrap();
    (page, d.size)
}

/// A (alone when its write began) appends in place into the last page; B, which opened the
/// file for writing meanwhile, rewrites a byte inside the file in that same page (a copy,
/// taken before A's stores landed) and commits after A: B's commit must fail (EAGAIN, and
/// B writes again), or its copy would undo A's committed append. The interleaving the two
/// write paths allow, driven step by step with raw requests.
#[test]
fn a_stale_copy_of_the_last_page_does_not_undo_an_append_made_in_place() {
    let d = Daemon::start("in-place-stale", 64 << 20);
    let (a, b) = two_clients(&d);
    let fa = a.open_file("/f", &rw().create(true)).unwrap();
    fa.write_at(&[b'a'; 100], 0).unwrap();
    let (ino, h) = (fa.ino(), fa.handle());
    // A's write (100 bytes at 100) starts: the several-writers bit is clear.
    assert!(!a.remote().unwrap().several_writers().contains(ino));
    let (q, size) = page_and_size(&a, ino, 0);
    assert_eq!(size, 100);
    // B opens the file for writing (the bit is set before the reply) and copies page 0
    // into a reserved page to write byte 50.
    let fb = b.open_file("/f", &rw()).unwrap();
    assert!(b.remote().unwrap().several_writers().contains(ino));
    let Ok(Response::Pages(p)) = send(&b, &Request::Reserve { pages: 1 }) else {
        panic!("reserve failed");
    };
    let copy = p[0];
    let mut buf = vec![0u8; 4096];
    b.pool().read(q, &mut buf);
    buf[50] = b'b';
    // SAFETY: a page reserved to b, in the data area, which clients map read/write.
    unsafe {
        std::ptr::copy_nonoverlapping(buf.as_ptr(), b.pool().as_ptr().add(copy as usize), 4096)
    };
    // A's stores land in place beyond the end of file, then A commits.
    // SAFETY: page q is the file's; these bytes lie beyond its end of file, where A's write
    // path stores in place.
    unsafe { std::ptr::write_bytes(a.pool().as_ptr().add(q as usize + 100), b'X', 100) };
    let appended = Request::CommitWrite {
        target: h,
        pages: vec![],
        end: 200,
        check: Some(WriteCheck {
            old_pages: vec![],
            size_seen: 100,
            start: 100,
            in_place: vec![(0, q)],
        }),
    };
    assert!(matches!(
        send(&a, &appended),
        Ok(Response::Committed { mapped: false })
    ));
    let mut want = vec![b'a'; 100];
    want.extend_from_slice(&[b'X'; 100]);
    assert_eq!(a.read_file("/f").unwrap(), want);
    // B's commit: its old page is still the file's and its write ends inside the size it
    // saw, but the page it copied holds the end of file, which has moved.
    let rewrite = Request::CommitWrite {
        target: h,
        pages: vec![(0, copy)],
        end: 51,
        check: Some(WriteCheck {
            old_pages: vec![q],
            size_seen: 100,
            start: 50,
            in_place: vec![],
        }),
    };
    let r = send(&b, &rewrite);
    assert!(
        r.as_ref().is_err_and(|e| e.errno() == libc::EAGAIN),
        "{r:?}"
    );
    assert_eq!(a.read_file("/f").unwrap(), want);
    // B's write path then writes again, from the page as it is now.
    fb.write_at(b"b", 50).unwrap();
    want[50] = b'b';
    assert_eq!(a.read_file("/f").unwrap(), want);
    assert!(send(&b, &Request::Unreserve { pages: vec![copy] }).is_ok());
    assert_fsck_clean(&a);
}

/// The same race through the real write paths: A appends alone; B, over and over, opens
/// the file for writing, rewrites its last byte with what it holds, and closes it.
#[test]
fn rewrites_of_the_last_byte_beside_appends_keep_every_record() {
    let d = Daemon::start("in-place-rewrite", 64 << 20);
    let (a, b) = two_clients(&d);
    let fa = a
        .open_file("/log", &rw().create(true).append(true))
        .unwrap();
    fa.write_next(b"start").unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let other = {
        let done = done.clone();
        std::thread::spawn(move || {
            let mut n = 0u64;
            while !done.load(Ordering::Relaxed) {
                let f = b.open_file("/log", &rw()).unwrap();
                let size = f.metadata().unwrap().size;
                let mut byte = [0u8];
                f.read_at(&mut byte, size - 1).unwrap();
                f.write_at(&byte, size - 1).unwrap();
                n += 1;
            }
            n
        })
    };
    let mut model = b"start".to_vec();
    for i in 0..20_000u32 {
        let rec = format!("<{i:08}>");
        fa.write_next(rec.as_bytes()).unwrap();
        model.extend_from_slice(rec.as_bytes());
    }
    done.store(true, Ordering::Relaxed);
    let n = other.join().unwrap();
    let got = contents(&a, "/log");
    if got != model {
        let at = got.iter().zip(&model).position(|(x, y)| x != y);
        let at = at.unwrap_or(got.len().min(model.len()));
        let around = |v: &[u8]| {
            String::from_utf8_lossy(&v[at.saturating_sub(20)..(at + 40).min(v.len())]).into_owned()
        };
        panic!(
            "after {n} rewrites the log differs at {at} (length {} against {}): {:?}, want {:?}",
            got.len(),
            model.len(),
            around(&got),
            around(&model)
        );
    }
}

/// A sole writer overwriting nearly all of a small pool, page by page: the pages each
/// overwrite retires come free when the pool runs short (a write's epoch pin, if it were
/// held across the round trip that reserves pages, would hold them back: ENOSPC).
#[test]
fn overwrites_in_a_nearly_full_pool_do_not_run_out_of_space() {
    let d = Daemon::start("in-place-full", 64 << 20);
    let fs = Fs::connect(&d.socket).unwrap();
    let pages = fs.statfs().unwrap().blocks_free - 3000;
    let f = fs.open_file("/f", &rw().create(true)).unwrap();
    f.write_at(&vec![1u8; (pages * 4096) as usize], 0).unwrap();
    for round in 0..2u8 {
        for i in 0..pages {
            if let Err(e) = f.write_at(&[round; 4096], i * 4096) {
                let free = fs.statfs().map(|s| s.blocks_free);
                panic!("round {round}, page {i}: {e} (free: {free:?})");
            }
        }
    }
}

/// A growing truncate by a second writer over pages the first allocated ahead needs no
/// space (they become holes), as in-process or with one writer.
#[test]
fn a_growing_truncate_by_a_second_writer_needs_no_space() {
    let d = Daemon::start("in-place-trunc-space", 64 << 20);
    let (a, b) = two_clients(&d);
    let fa = a.open_file("/f", &rw().create(true)).unwrap();
    let ahead = a.statfs().unwrap().blocks_free * 6 / 10 * 4096;
    fa.allocate(0, ahead, true).unwrap();
    let fb = b.open_file("/f", &rw()).unwrap();
    fb.set_len(ahead).unwrap();
    assert_eq!(contents(&a, "/f"), vec![0u8; ahead as usize]);
    drop((fa, fb));
    assert_fsck_clean(&a);
}

/// Page 0 allocated ahead of an empty file (index height 0), the file held open for
/// writing by A; B writes 600 pages from page 10: page 0 becomes a hole in the same plan
/// that grows the index by two levels.
#[test]
fn a_hole_for_page_0_in_a_plan_that_grows_the_index() {
    let d = Daemon::start("in-place-h0", 64 << 20);
    let (a, b) = two_clients(&d);
    let fa = a.open_file("/f", &rw().create(true)).unwrap();
    fa.allocate(0, 4096, true).unwrap();
    let fb = b.open_file("/f", &rw()).unwrap();
    fb.write_at(&vec![7u8; 600 * 4096], 10 * 4096).unwrap();
    let mut want = vec![0u8; 10 * 4096];
    want.resize(610 * 4096, 7);
    assert!(contents(&a, "/f") == want);
    assert_fsck_clean(&a);
    drop((fa, fb));
}

/// A xorshift generator: the same steps on every run.
struct Steps(u64);

impl Steps {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// Random truncates (up and down), fallocates (both modes), punched holes, zeroed ranges,
/// writes inside, at and past the end, by two clients, the second opening and closing its
/// handle at random (so the first is at times the sole writer, writing in place): after
/// every step the file matches a byte model and fsck (block counts, leaks) is clean.
#[test]
fn random_changes_by_two_writers_match_a_model() {
    const P: u64 = 4096;
    let d = Daemon::start("in-place-random", 64 << 20);
    let (a, b) = two_clients(&d);
    let fa = a.open_file("/f", &rw().create(true)).unwrap();
    let mut fb = None;
    let mut model: Vec<u8> = Vec::new();
    let mut rng = Steps(0x9E37_79B9_7F4A_7C15);
    for step in 0..1500u64 {
        if rng.below(8) == 0 {
            fb = match fb {
                Some(_) => None,
                None => Some(b.open_file("/f", &rw()).unwrap()),
            };
        }
        let f = match (&fb, rng.below(2)) {
            (Some(fb), 0) => fb,
            _ => &fa,
        };
        let size = model.len() as u64;
        let what = match rng.below(8) {
            0 => {
                let n = rng.below(40 * P);
                f.set_len(n).unwrap();
                model.resize(n as usize, 0);
                format!("set_len {n}")
            }
            1..=3 => {
                let off = match rng.below(3) {
                    0 => rng.below(size + 1),
                    1 => size + rng.below(3 * P),
                    _ => rng.below(40) * P,
                };
                let len = match rng.below(3) {
                    0 => 1 + rng.below(200),
                    1 => P * (1 + rng.below(3)),
                    _ => 1 + rng.below(3 * P),
                };
                let byte = (step % 250 + 1) as u8;
                f.write_at(&vec![byte; len as usize], off).unwrap();
                let end = (off + len) as usize;
                if model.len() < end {
                    model.resize(end, 0);
                }
                model[off as usize..end].fill(byte);
                format!("write {off} +{len}")
            }
            6 | 7 => {
                // A punch, or zeroing with or without keeping the size.
                let (off, len) = (rng.below(40 * P), 1 + rng.below(8 * P));
                let how = rng.below(3);
                match how {
                    0 => f.punch_hole(off, len).unwrap(),
                    _ => f.zero_range(off, len, how == 2).unwrap(),
                }
                if how == 1 && off + len > size {
                    model.resize((off + len) as usize, 0);
                }
                let to = ((off + len) as usize).min(model.len());
                if (off as usize) < to {
                    model[off as usize..to].fill(0);
                }
                format!("clear {off} +{len}, how {how}")
            }
            _ => {
                let (off, len) = (rng.below(40 * P), 1 + rng.below(8 * P));
                let keep = rng.below(2) == 0;
                f.allocate(off, len, keep).unwrap();
                if !keep && off + len > size {
                    model.resize((off + len) as usize, 0);
                }
                format!("allocate {off} +{len}, keep size {keep}")
            }
        };
        let got = contents(&a, "/f");
        if got != model {
            let at = got.iter().zip(&model).position(|(x, y)| x != y);
            panic!(
                "step {step} ({what}, second writer {}): differs at {at:?}, length {} against {}",
                fb.is_some(),
                got.len(),
                model.len()
            );
        }
        let r = a.fsck(false).unwrap();
        assert!(r.is_clean(), "step {step} ({what}): {:?}", r.problems);
    }
}

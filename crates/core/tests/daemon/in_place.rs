//! Writes beyond the end of file in place through the daemon: a client alone in holding a
//! file open for writing appends into its last page without copying it; once another
//! client holds it open for writing too, both copy, and what the other makes visible
//! beyond the old end of file (a growing truncate, fallocate, a write past the end) reads
//! as zeros and never as bytes the first was writing in place (architecture.md, "Appends
//! in place through the daemon"). Each `Fs::connect` is its own client.

use super::Daemon;
use engram_core::{Fs, OpenOptions};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

fn rw() -> OpenOptions {
    OpenOptions::new().read(true).write(true)
}

fn contents(fs: &Fs, path: &str) -> Vec<u8> {
    fs.read_file(path).unwrap()
}

/// One client appends alone (in place), then a second opens the file for writing and grows
/// it three ways while the first still holds it: every byte is where a model puts it.
#[test]
fn growth_by_a_second_writer_reads_as_zeros_and_keeps_every_append() {
    let d = Daemon::start("in-place-growth", 64 << 20);
    let (a, b) = (
        Fs::connect(&d.socket).unwrap(),
        Fs::connect(&d.socket).unwrap(),
    );
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
    let r = a.fsck(false).unwrap();
    assert!(r.is_clean(), "{:?}", r.problems);
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
    let (a, b) = (
        Fs::connect(&d.socket).unwrap(),
        Fs::connect(&d.socket).unwrap(),
    );
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
    let r = a.fsck(false).unwrap();
    assert!(r.is_clean(), "{:?}", r.problems);
}

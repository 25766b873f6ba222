//! The read path's single-page fast path and its edges: reads at page boundaries, at and past
//! the end of file, in holes and deep in the file index, and 4 KiB reads racing overwrites
//! and truncates (never torn, never from a freed page).

mod common;

use common::{assert_clean, new_fs};
use engram_core::OpenOptions;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;

const PAGE: usize = 4096;

fn rw() -> OpenOptions {
    OpenOptions::new().read(true).write(true)
}

/// Byte `i` of the reference file: distinct within and across pages.
fn byte(i: usize) -> u8 {
    (i % 251) as u8 ^ (i / PAGE) as u8
}

#[test]
fn reads_at_page_boundaries_and_end_of_file() {
    let (_p, fs) = new_fs("rp-edges", 64);
    let size = 3 * PAGE + 100;
    let image: Vec<u8> = (0..size).map(byte).collect();
    let f = fs.open_file("/f", &rw().create(true)).unwrap();
    f.write_at(&image, 0).unwrap();
    let mut buf = vec![0xeeu8; 2 * PAGE + 10];
    let cases: &[(usize, usize)] = &[
        (0, PAGE),
        (PAGE, PAGE),
        (PAGE - 1, 1),
        (PAGE - 1, 2),
        (PAGE, 1),
        (PAGE - 1, PAGE),
        (PAGE + 1, PAGE - 1),
        (PAGE + 1, PAGE),
        (10, 2 * PAGE + 10),
        (3 * PAGE, PAGE),
        (3 * PAGE + 99, PAGE),
        (2 * PAGE + 5, 2 * PAGE),
        (0, 0),
    ];
    for &(off, len) in cases {
        let want = &image[off.min(size)..(off + len).min(size)];
        let n = f.read_at(&mut buf[..len], off as u64).unwrap();
        assert_eq!(n, want.len(), "read of {len} at {off}");
        assert_eq!(&buf[..n], want, "read of {len} at {off}");
    }
    // At and past the end of file: nothing, and the buffer is left alone.
    for off in [size, size + 1, 4 * PAGE, 1 << 40] {
        buf.fill(0xee);
        assert_eq!(f.read_at(&mut buf[..PAGE], off as u64).unwrap(), 0);
        assert!(buf.iter().all(|&b| b == 0xee));
    }
    assert_clean(&fs);
}

#[test]
fn reads_of_holes_and_deep_indexes() {
    let (_p, fs) = new_fs("rp-holes", 64);
    let f = fs.open_file("/f", &rw().create(true)).unwrap();
    // A page far out makes the index three levels high (512^2 pages < 2 GiB / 4 KiB); the
    // pages around it and every page before it are holes.
    let far = (2u64 << 30) + 3 * PAGE as u64;
    let data: Vec<u8> = (0..PAGE).map(|i| byte(i + 7)).collect();
    f.write_at(&data, far).unwrap();
    f.write_at(&data[..100], PAGE as u64 + 50).unwrap();
    let mut buf = vec![0xeeu8; 2 * PAGE];
    for off in [0u64, 2 * PAGE as u64, 1 << 30, far - PAGE as u64] {
        assert_eq!(f.read_at(&mut buf[..PAGE], off).unwrap(), PAGE);
        assert!(buf[..PAGE].iter().all(|&b| b == 0), "hole at {off}");
        buf.fill(0xee);
    }
    // Part hole, part data, within one page and across a boundary.
    assert_eq!(f.read_at(&mut buf[..PAGE], PAGE as u64).unwrap(), PAGE);
    assert!(buf[..50].iter().all(|&b| b == 0));
    assert_eq!(&buf[50..150], &data[..100]);
    assert!(buf[150..PAGE].iter().all(|&b| b == 0));
    assert_eq!(f.read_at(&mut buf, far - 10).unwrap(), PAGE + 10);
    assert!(buf[..10].iter().all(|&b| b == 0));
    assert_eq!(&buf[10..PAGE + 10], &data[..]);
    assert_eq!(f.read_at(&mut buf[..PAGE], far).unwrap(), PAGE);
    assert_eq!(&buf[..PAGE], &data[..]);
    assert_eq!(f.read_at(&mut buf[..PAGE], far + 1).unwrap(), PAGE - 1);
    assert_eq!(&buf[..PAGE - 1], &data[1..]);
    assert_eq!(f.read_at(&mut buf[..PAGE], far + PAGE as u64).unwrap(), 0);
    assert_clean(&fs);
}

#[test]
fn read_errors() {
    let (_p, fs) = new_fs("rp-errors", 64);
    fs.mkdir("/d", 0o755).unwrap();
    let f = fs
        .open_file("/f", &OpenOptions::new().write(true).create(true))
        .unwrap();
    f.write_at(b"abc", 0).unwrap();
    let mut buf = [0u8; 16];
    assert_eq!(f.read_at(&mut buf, 0).unwrap_err().errno(), libc::EBADF);
    {
        let d = fs.open_file("/d", &OpenOptions::new().read(true)).unwrap();
        assert_eq!(d.read_at(&mut buf, 0).unwrap_err().errno(), libc::EISDIR);
    }
}

/// Page `p` of generation `g`: even bytes `g`, odd bytes `p + 100`, so that a read shows
/// both which write and which page its bytes come from.
fn fill_page(g: u8, p: usize) -> Vec<u8> {
    (0..PAGE)
        .map(|i| if i % 2 == 0 { g } else { p as u8 + 100 })
        .collect()
}

/// Each 4 KiB read (page-aligned, and one inside a page) comes whole from one generation,
/// while one writer overwrites the pages and another truncates and rewrites the file: a
/// read sees the old bytes or the new, or nothing once truncated, never a mix and never a
/// freed page's reuse.
#[test]
fn single_page_reads_race_overwrites_and_truncates() {
    let (_p, fs) = new_fs("rp-race", 64);
    let pages = 8;
    let f = fs.open_file("/f", &rw().create(true)).unwrap();
    for p in 0..pages {
        f.write_at(&fill_page(0, p), (p * PAGE) as u64).unwrap();
    }
    drop(f);
    let done = AtomicBool::new(false);
    thread::scope(|s| {
        let done = &done;
        let wfs = fs.clone();
        s.spawn(move || {
            let f = wfs.open_file("/f", &rw()).unwrap();
            for g in 1..=1500u32 {
                let g8 = g as u8;
                if g % 3 == 0 {
                    // Truncate into page 2, then rewrite everything.
                    f.set_len(2 * PAGE as u64 + 100).unwrap();
                    let all: Vec<u8> = (0..pages).flat_map(|p| fill_page(g8, p)).collect();
                    f.write_at(&all, 0).unwrap();
                } else {
                    let p = g as usize % pages;
                    f.write_at(&fill_page(g8, p), (p * PAGE) as u64).unwrap();
                }
            }
            done.store(true, Ordering::SeqCst);
        });
        for r in 0..2usize {
            let fs = fs.clone();
            s.spawn(move || {
                let f = fs.open_file("/f", &OpenOptions::new().read(true)).unwrap();
                let mut buf = vec![0u8; PAGE];
                let mut i = 0usize;
                while !done.load(Ordering::SeqCst) {
                    let p = i % pages;
                    i += 1;
                    let (off, len) = if r == 0 {
                        (p * PAGE, PAGE)
                    } else {
                        (p * PAGE + 37, PAGE - 37)
                    };
                    let n = f.read_at(&mut buf[..len], off as u64).unwrap();
                    let page_end = (p + 1) * PAGE;
                    // Whole, or cut at the truncated size (2 pages + 100 bytes).
                    let cut = (2 * PAGE + 100).saturating_sub(off);
                    assert!(
                        n == len || (p == 2 && n == cut) || (p > 2 && n == 0),
                        "read of {len} at {off} returned {n} (page ends at {page_end})"
                    );
                    // One generation, and page p's bytes.
                    let g = buf[(off % 2 == 1) as usize];
                    for (k, &b) in buf[..n].iter().enumerate() {
                        let want = if (off + k) % 2 == 0 { g } else { p as u8 + 100 };
                        assert_eq!(b, want, "torn read of {len} at {off}: byte {k}");
                    }
                }
            });
        }
    });
    assert_clean(&fs);
}

/// SEEK_DATA and SEEK_HOLE find the pages the file maps and the holes between them; a hole
/// past the last data page runs to the end of file, and at or past it both give ENXIO.
#[test]
fn seek_data_and_hole_find_mapped_pages_and_holes() {
    let (_p, fs) = new_fs("rp-sparse", 64);
    let f = fs.open_file("/sparse", &rw().create(true)).unwrap();
    let enxio = |r: engram_core::Result<u64>| r.unwrap_err().errno() == libc::ENXIO;
    f.write_at(b"x", 0).unwrap();
    // Pages: 0 data, 1-2 holes, 3-4 data, 5-9 holes, 10 data (partly: the end of file).
    f.write_at(&[1u8; 2 * PAGE], 3 * PAGE as u64).unwrap();
    f.write_at(b"tail", 10 * PAGE as u64 + 100).unwrap();
    let size = 10 * PAGE as u64 + 104;
    assert_eq!(f.seek_data(0).unwrap(), 0);
    assert_eq!(f.seek_hole(0).unwrap(), PAGE as u64);
    assert_eq!(f.seek_hole(10).unwrap(), PAGE as u64);
    assert_eq!(f.seek_data(PAGE as u64 + 5).unwrap(), 3 * PAGE as u64);
    assert_eq!(
        f.seek_hole(PAGE as u64 + 5).unwrap(),
        PAGE as u64 + 5,
        "inside a hole"
    );
    assert_eq!(
        f.seek_data(3 * PAGE as u64 + 7).unwrap(),
        3 * PAGE as u64 + 7
    );
    assert_eq!(f.seek_hole(3 * PAGE as u64).unwrap(), 5 * PAGE as u64);
    assert_eq!(f.seek_data(5 * PAGE as u64).unwrap(), 10 * PAGE as u64);
    assert_eq!(
        f.seek_hole(10 * PAGE as u64).unwrap(),
        size,
        "the end of file is a hole"
    );
    assert!(enxio(f.seek_data(size)) && enxio(f.seek_hole(size)));
    assert!(enxio(f.seek_data(size + 5000)));
    // Only holes after the offset: no data there.
    f.set_len(12 * PAGE as u64).unwrap();
    assert!(enxio(f.seek_data(11 * PAGE as u64)));
    assert_eq!(f.seek_hole(11 * PAGE as u64).unwrap(), 11 * PAGE as u64);
    // A file of one page (an index of height 0) and a deep one.
    let one = fs.open_file("/one", &rw().create(true)).unwrap();
    one.write_at(b"abc", 0).unwrap();
    assert_eq!(one.seek_data(1).unwrap(), 1);
    assert_eq!(one.seek_hole(0).unwrap(), 3);
    let deep = fs.open_file("/deep", &rw().create(true)).unwrap();
    let far = 3 * 512 * 512 * PAGE as u64;
    deep.write_at(b"far", far).unwrap();
    assert_eq!(deep.seek_data(0).unwrap(), far);
    assert_eq!(deep.seek_hole(far).unwrap(), far + 3);
    assert_eq!(deep.seek_hole(0).unwrap(), 0);
    drop((f, one, deep));
    assert_clean(&fs);
}

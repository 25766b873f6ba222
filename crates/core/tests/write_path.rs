//! The write path: whole pages copied in runs, partial pages assembled from old bytes, writes
//! beyond the end of file, and appends, checked against a byte model of the file, after a
//! remount, and by fsck.

mod common;

use common::{assert_clean, new_fs, pattern, remount};
use engram_core::OpenOptions;

const PAGE: u64 = 4096;

fn write_model(model: &mut Vec<u8>, data: &[u8], off: u64) {
    let end = off as usize + data.len();
    if model.len() < end {
        model.resize(end, 0);
    }
    model[off as usize..end].copy_from_slice(data);
}

#[test]
fn writes_of_every_shape_match_a_model() {
    let (p, fs) = new_fs("write-shapes", 64);
    let opts = OpenOptions::new().read(true).write(true).create(true);
    let f = fs.open_file("/f", &opts).unwrap();
    let mut model = Vec::new();
    // (offset, length): whole pages, partial head and tail, one byte, a gap beyond the end
    // of file inside a page and across pages, overwrites straddling the end of file, and
    // writes larger than a reservation batch (fresh pages not all consecutive).
    let shapes = [
        (0, 3 * PAGE),
        (100, 10),
        (PAGE - 1, 2),
        (5 * PAGE + 17, 2 * PAGE + 100),
        (7 * PAGE + 200, PAGE),
        (3 * PAGE, 9 * PAGE),
        (20 * PAGE + 5, 1),
        (20 * PAGE + 4000, 300),
        (2 * PAGE, 5 << 20),
        (PAGE / 2, (9 << 20) + 123),
    ];
    for (i, &(off, len)) in shapes.iter().enumerate() {
        let data = pattern(i as u64 + 1, len as usize);
        assert_eq!(f.write_at(&data, off).unwrap(), data.len());
        write_model(&mut model, &data, off);
        let mut back = vec![0u8; model.len()];
        assert_eq!(f.read_at(&mut back, 0).unwrap(), model.len());
        assert!(back == model, "file differs from the model after write {i}");
        assert_eq!(f.metadata().unwrap().len(), model.len() as u64);
    }
    drop(f);
    assert_clean(&fs);
    let fs = remount(&p, fs);
    let mut back = vec![0u8; model.len() + 10];
    let f = fs.open_file("/f", &OpenOptions::new().read(true)).unwrap();
    assert_eq!(f.read_at(&mut back, 0).unwrap(), model.len());
    assert!(back[..model.len()] == model[..]);
    drop(f);
    assert_clean(&fs);
}

#[test]
fn appends_of_odd_sizes_match_a_model() {
    let (p, fs) = new_fs("write-appends", 64);
    let opts = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .append(true);
    let mut f = fs.open_file("/log", &opts).unwrap();
    let mut model = Vec::new();
    for (i, len) in [1usize, 4095, 4096, 4097, 100, 1 << 20, 3, 5 << 20, 8191]
        .into_iter()
        .enumerate()
    {
        let data = pattern(i as u64 + 50, len);
        std::io::Write::write_all(&mut f, &data).unwrap();
        model.extend_from_slice(&data);
    }
    drop(f);
    let fs = remount(&p, fs);
    let f = fs
        .open_file("/log", &OpenOptions::new().read(true))
        .unwrap();
    let mut back = vec![0u8; model.len()];
    assert_eq!(f.read_at(&mut back, 0).unwrap(), model.len());
    assert!(back == model);
    assert_eq!(
        f.metadata().unwrap().blocks,
        model.len().div_ceil(PAGE as usize) as u64 * 8
    );
    drop(f);
    assert_clean(&fs);
}

#[test]
fn a_write_in_place_needs_no_reservation() {
    // After a remount the client has reserved nothing; a write beyond the end of file that
    // fits in the last page is made in place and commits no page.
    let (p, fs) = new_fs("write-in-place", 16);
    fs.write_file("/f", &pattern(1, 5000)).unwrap();
    let fs = remount(&p, fs);
    let opts = OpenOptions::new().write(true).append(true);
    let f = fs.open_file("/f", &opts).unwrap();
    assert_eq!(f.write_at(b"xy", 0).unwrap(), 2);
    drop(f);
    let mut want = pattern(1, 5000);
    want.extend_from_slice(b"xy");
    assert_eq!(fs.read_file("/f").unwrap(), want);
    assert_clean(&fs);
}

/// A one-page file (height 0: its root is page 0's data page), then one write of 600 pages
/// from offset 0: the index grows by two levels and replaces page 0 in the same plan (the
/// old page 0 once stayed mapped, the write to it lost and the new page leaked).
#[test]
fn a_large_write_over_a_one_page_file_replaces_page_0() {
    let (p, fs) = new_fs("wp-height0", 64);
    let opts = OpenOptions::new().read(true).write(true).create(true);
    let f = fs.open_file("/f", &opts).unwrap();
    f.write_at(&[b'a'; 100], 0).unwrap();
    let big = vec![b'b'; 600 * 4096];
    f.write_at(&big, 0).unwrap();
    assert!(fs.read_file("/f").unwrap() == big);
    assert_clean(&fs);
    drop(f);
    let fs = remount(&p, fs);
    assert!(fs.read_file("/f").unwrap() == big);
}

/// A write says whether some process mapped the file shared when it was committed (the
/// shim then sees to it that the mappings get its bytes): while a mapping is counted, for
/// a write of one step and one of several, and not before or after (the count lingers
/// until the file is closed); a write of nothing commits nothing.
#[test]
fn a_write_says_whether_the_file_was_mapped_at_its_commit() {
    let (_p, fs) = new_fs("wp-mapped", 64);
    let opts = OpenOptions::new().read(true).write(true).create(true);
    let f = fs.open_file("/f", &opts).unwrap();
    let h = f.handle();
    let w = f.write_placed(b"a", Some(0)).unwrap();
    assert_eq!((w.len, w.end, w.mapped), (1, 1, false));
    fs.set_mapped(h, true).unwrap();
    let w = f.write_placed(b"bc", None).unwrap();
    assert_eq!((w.len, w.end, w.mapped), (2, 3, true));
    let steps = vec![b'd'; 2 * engram_core::fs::ATOMIC_WRITE_MAX as usize + 5];
    let w = f.write_in_place(&steps, 1).unwrap();
    assert_eq!((w.len, w.mapped), (steps.len(), true));
    assert!(!f.write_in_place(b"", 0).unwrap().mapped);
    fs.set_mapped(h, false).unwrap();
    // Still open: the count lingers until the close (`server/mapped.rs`).
    assert!(f.write_in_place(b"e", 0).unwrap().mapped);
    drop(f);
    let f = fs.open_file("/f", &opts).unwrap();
    assert!(!f.write_in_place(b"e", 0).unwrap().mapped);
    assert_clean(&fs);
}

//! fallocate's FALLOC_FL_PUNCH_HOLE and FALLOC_FL_ZERO_RANGE (expectations as ext4 gives
//! them; tmpfs has no ZERO_RANGE).

use super::{MIB, creat, ro};
use crate::common::{assert_clean, assert_errno, new_fs, pattern, remount};
use engram_core::File;
use libc::{EBADF, EFBIG, EINVAL, ENOSPC};

const PAGE: u64 = 4096;

fn read_all(f: &File) -> Vec<u8> {
    let mut buf = vec![0u8; f.metadata().unwrap().size as usize];
    assert_eq!(f.read_at(&mut buf, 0).unwrap(), buf.len());
    buf
}

fn blocks(f: &File) -> u64 {
    f.metadata().unwrap().blocks
}

#[test]
fn punch_hole_frees_whole_pages_and_zeroes_the_rest() {
    let (p, fs) = new_fs("punch", 32);
    let f = fs.open_file("/f", &creat()).unwrap();
    let mut model = pattern(3, 10 * PAGE as usize + 100);
    f.write_at(&model, 0).unwrap();
    assert_eq!(blocks(&f), 11 * 8);

    // Whole pages 2..5: freed.
    f.punch_hole(2 * PAGE, 3 * PAGE).unwrap();
    model[2 * PAGE as usize..5 * PAGE as usize].fill(0);
    assert_eq!(read_all(&f), model);
    assert_eq!(blocks(&f), 8 * 8, "three pages freed");
    assert_eq!(
        f.metadata().unwrap().size,
        model.len() as u64,
        "the size stays"
    );

    // Parts of pages 6 and 7 (and all of none): both kept, their range zeroed.
    f.punch_hole(6 * PAGE + 100, PAGE).unwrap();
    model[6 * PAGE as usize + 100..7 * PAGE as usize + 100].fill(0);
    assert_eq!(read_all(&f), model);
    assert_eq!(blocks(&f), 8 * 8);

    // Inside one page, and over a hole already punched: nothing to free.
    f.punch_hole(8 * PAGE + 1, 10).unwrap();
    model[8 * PAGE as usize + 1..8 * PAGE as usize + 11].fill(0);
    f.punch_hole(2 * PAGE, PAGE).unwrap();
    assert_eq!(read_all(&f), model);

    // Past the end of file: the size stays; the last page keeps its bytes before the range.
    f.punch_hole(10 * PAGE + 50, 10 * MIB).unwrap();
    model[10 * PAGE as usize + 50..].fill(0);
    assert_eq!(read_all(&f), model);
    assert_eq!(f.metadata().unwrap().size, model.len() as u64);

    // Space allocated beyond the end of file is freed by a punch there.
    f.allocate(MIB, MIB, true).unwrap();
    let before = blocks(&f);
    f.punch_hole(MIB, MIB).unwrap();
    assert_eq!(blocks(&f), before - MIB / 512);

    // Every page of the file, covered whole: no space is left.
    f.punch_hole(0, 11 * PAGE).unwrap();
    assert_eq!(blocks(&f), 0);
    assert!(read_all(&f).iter().all(|&b| b == 0));
    assert_eq!(f.metadata().unwrap().size, model.len() as u64);
    drop(f);
    let fs = remount(&p, fs);
    let f = fs.open_file("/f", &ro()).unwrap();
    assert_eq!(blocks(&f), 0);
    assert_eq!(read_all(&f), vec![0; model.len()]);
    drop(f);
    assert_clean(&fs);
}

#[test]
fn zero_range_gives_space_and_grows_only_without_keep_size() {
    let (p, fs) = new_fs("zero-range", 32);
    let f = fs.open_file("/f", &creat()).unwrap();
    let mut model = pattern(5, 3 * PAGE as usize);
    f.write_at(&model, 0).unwrap();

    // A hole first: zeroing allocates it.
    f.set_len(6 * PAGE).unwrap();
    model.resize(6 * PAGE as usize, 0);
    assert_eq!(blocks(&f), 3 * 8);
    f.zero_range(100, 5 * PAGE, true).unwrap();
    model[100..100 + 5 * PAGE as usize].fill(0);
    assert_eq!(read_all(&f), model);
    assert_eq!(blocks(&f), 6 * 8, "pages 0..=5 all have space now");

    // KEEP_SIZE past the end: space, no size.
    f.zero_range(6 * PAGE, 2 * PAGE, true).unwrap();
    assert_eq!(f.metadata().unwrap().size, 6 * PAGE);
    assert_eq!(blocks(&f), 8 * 8);

    // Without it, the size grows to the range's end.
    f.zero_range(9 * PAGE + 7, 10, false).unwrap();
    model.resize(9 * PAGE as usize + 17, 0);
    assert_eq!(read_all(&f), model);

    assert_errno(f.zero_range(0, 0, false), EINVAL);
    assert_errno(f.punch_hole(0, 0), EINVAL);
    assert_errno(f.zero_range(u64::MAX - 10, 100, false), EFBIG);
    assert_errno(f.zero_range(0, 1 << 40, true), ENOSPC);
    assert_eq!(read_all(&f), model, "a refused change changes nothing");
    drop(f);
    let ro_f = fs.open_file("/f", &ro()).unwrap();
    assert_errno(ro_f.punch_hole(0, 4096), EBADF);
    assert_errno(ro_f.zero_range(0, 4096, true), EBADF);
    drop(ro_f);
    let fs = remount(&p, fs);
    assert_eq!(fs.read_file("/f").unwrap(), model);
    assert_clean(&fs);
}

#[test]
fn bytes_beyond_the_end_of_file_read_as_zeros_when_zeroing_grows_over_them() {
    let (_p, fs) = new_fs("zero-stale", 16);
    let f = fs.open_file("/f", &creat()).unwrap();
    f.write_at(&pattern(9, 3 * PAGE as usize), 0).unwrap();
    // The page that holds the new end keeps its old bytes beyond it.
    f.set_len(100).unwrap();
    // Growing over them from a range that starts in that page ...
    f.zero_range(200, 50, false).unwrap();
    let got = read_all(&f);
    assert_eq!(got.len(), 250);
    assert_eq!(&got[..100], &pattern(9, 100)[..]);
    assert!(got[100..].iter().all(|&b| b == 0), "{:?}", &got[100..120]);
    // ... and from one that starts in a later page.
    f.set_len(100).unwrap();
    f.zero_range(2 * PAGE, 50, false).unwrap();
    let got = read_all(&f);
    assert_eq!(&got[..100], &pattern(9, 100)[..]);
    assert!(got[100..].iter().all(|&b| b == 0));
    drop(f);
    assert_clean(&fs);
}

#[test]
fn clearing_a_range_updates_mtime_and_ctime() {
    let (_p, fs) = new_fs("clear-times", 16);
    let f = fs.open_file("/f", &creat()).unwrap();
    f.write_at(b"hello", 0).unwrap();
    let before = f.metadata().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(5));
    f.punch_hole(0, 2).unwrap();
    let after = f.metadata().unwrap();
    assert!(after.mtime_ns > before.mtime_ns && after.ctime_ns > before.ctime_ns);
    std::thread::sleep(std::time::Duration::from_millis(5));
    f.zero_range(2, 1, true).unwrap();
    let last = f.metadata().unwrap();
    assert!(last.mtime_ns > after.mtime_ns && last.ctime_ns > after.ctime_ns);
    assert_eq!(read_all(&f), b"\0\0\0lo");
}

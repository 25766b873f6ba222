//! Tests of `Pool` against real files on tmpfs and an ordinary file system.

use std::fs::{self, File};
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::{CACHE_LINE, Event, FlushKind, Media, Pool, flush_kind};

/// A unique temporary path, removed on drop.
struct TempPath(PathBuf);

impl TempPath {
    fn new(dir: &str, tag: &str) -> TempPath {
        static COUNTER: AtomicUsize = AtomicUsize::new(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let name = format!("engram-pmem-test-{}-{n}-{tag}", std::process::id());
        TempPath(Path::new(dir).join(name))
    }
}

impl Drop for TempPath {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.0);
    }
}

fn expected_media(dir: &str) -> Media {
    let tmpfs = crate::map::is_tmpfs(&File::open(dir).unwrap()).unwrap();
    if tmpfs { Media::Tmpfs } else { Media::File }
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) | 1)
        .collect()
}

fn round_trip(dir: &str) {
    let tmp = TempPath::new(dir, "roundtrip");
    let size = 1 << 20;
    let data = pattern(10_000, 3);
    {
        let pool = Pool::create(&tmp.0, size).unwrap();
        assert_eq!(pool.len(), size);
        assert!(!pool.is_empty());
        assert_eq!(pool.media(), expected_media(dir));
        assert_eq!(pool.path(), Some(tmp.0.as_path()));
        assert_eq!(pool.flush_kind(), flush_kind());
        assert!(pool.slice(0, size).iter().all(|&b| b == 0));
        pool.write(4096 + 5, &data);
        pool.persist(4096 + 5, data.len() as u64);
        pool.store_u64(8, 0xdead_beef_0123_4567);
        pool.store_u32(16, 77);
        pool.store_u8(size - 1, 9);
        pool.flush(8, 12);
        pool.flush(size - 1, 1);
        pool.copy_nt(200_001, &data);
        pool.zero_nt(300_003, 5000);
        pool.fence();
        if pool.media() == Media::File {
            assert!(pool.pending_sync().is_empty());
        }
        assert!(pool.take_sync_error().is_none());
    }
    let pool = Pool::open(&tmp.0).unwrap();
    assert_eq!(pool.media(), expected_media(dir));
    assert_eq!(pool.len(), size);
    assert_eq!(pool.load_u64(8), 0xdead_beef_0123_4567);
    assert_eq!(pool.load_u32(16), 77);
    assert_eq!(pool.load_u8(size - 1), 9);
    let mut buf = vec![0u8; data.len()];
    pool.read(4096 + 5, &mut buf);
    assert_eq!(buf, data);
    assert_eq!(pool.slice(200_001, data.len() as u64), &data[..]);
    assert_eq!(pool.load_u8(4096 + 4), 0);
    assert_eq!(pool.load_u8(4096 + 5 + data.len() as u64), 0);
}

#[test]
fn round_trip_on_tmpfs() {
    assert_eq!(expected_media("/dev/shm"), Media::Tmpfs);
    round_trip("/dev/shm");
}

#[test]
fn round_trip_on_tmp() {
    round_trip(std::env::temp_dir().to_str().unwrap());
}

#[test]
fn file_media_tracks_and_syncs_dirty_pages() {
    let dir = std::env::temp_dir();
    if expected_media(dir.to_str().unwrap()) != Media::File {
        return; // /tmp is tmpfs here: nothing to check.
    }
    let tmp = TempPath::new(dir.to_str().unwrap(), "dirty");
    let pool = Pool::create(&tmp.0, 64 * 4096).unwrap();
    pool.write(10, b"abc");
    pool.flush(10, 3);
    pool.flush(4090, 10);
    pool.copy_nt(20 * 4096 + 7, &pattern(3 * 4096, 1));
    assert_eq!(
        pool.pending_sync(),
        vec![(0, 2 * 4096), (20 * 4096, 24 * 4096)]
    );
    pool.try_fence().unwrap();
    assert!(pool.pending_sync().is_empty());
}

#[test]
fn injected_msync_failure_is_reported_once_and_kept_for_the_next_check() {
    let dir = std::env::temp_dir();
    if expected_media(dir.to_str().unwrap()) != Media::File {
        eprintln!(
            "skipped: {} is tmpfs, so no pool there uses msync",
            dir.display()
        );
        return;
    }
    let tmp = TempPath::new(dir.to_str().unwrap(), "syncfail");
    let pool = Pool::create(&tmp.0, 16 * 4096).unwrap();
    pool.inject_sync_failure(Some(libc::EIO));
    // Nothing dirty: nothing to sync, nothing fails.
    pool.try_fence().unwrap();
    assert!(pool.sync_point().is_ok());
    pool.persist(100, 8);
    // `fence` inside `persist` swallowed the error; the durability point still sees it.
    let e = pool.sync_point().unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EIO));
    assert!(pool.take_sync_error().is_none());
    pool.write(5000, b"x");
    pool.flush(5000, 1);
    assert_eq!(
        pool.try_fence().unwrap_err().raw_os_error(),
        Some(libc::EIO)
    );
    assert_eq!(
        pool.take_sync_error().unwrap().raw_os_error(),
        Some(libc::EIO)
    );
    pool.inject_sync_failure(None);
    pool.persist(100, 8);
    pool.sync_point().unwrap();
}

#[test]
fn create_truncates_an_existing_pool() {
    let tmp = TempPath::new("/dev/shm", "trunc");
    Pool::create(&tmp.0, 8192).unwrap().write(100, b"old");
    let pool = Pool::create(&tmp.0, 3 * 4096).unwrap();
    assert_eq!(pool.len(), 3 * 4096);
    assert!(pool.slice(0, pool.len()).iter().all(|&b| b == 0));
    assert_eq!(fs::metadata(&tmp.0).unwrap().len(), 3 * 4096);
}

#[test]
fn bad_sizes_are_rejected() {
    let tmp = TempPath::new("/dev/shm", "badsize");
    for size in [0, 1, 4095, 4097, 10_000] {
        let e = Pool::create(&tmp.0, size).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput);
        assert!(e.to_string().contains("multiple of 4096"), "{e}");
        assert!(!tmp.0.exists(), "a rejected create must not touch the file");
    }
    for len in [0, 100, 4097] {
        fs::write(&tmp.0, vec![1u8; len]).unwrap();
        let e = Pool::open(&tmp.0).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput);
        let msg = e.to_string();
        assert!(
            msg.contains("multiple of 4096") && msg.contains("engram-pmem-test"),
            "{msg}"
        );
    }
    fs::remove_file(&tmp.0).unwrap();
    let e = Pool::open(&tmp.0).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound);
    assert!(e.to_string().contains("engram-pmem-test"), "{e}");
    assert!(Pool::anonymous(0).is_err());
    assert!(Pool::from_image(&[]).is_err());
}

#[test]
fn a_client_mapping_keeps_exclusive_openers_out_until_it_goes() {
    let tmp = TempPath::new("/dev/shm", "client");
    drop(Pool::create(&tmp.0, 4096).unwrap());
    let client = Pool::open(&tmp.0).unwrap();
    let other = Pool::open(&tmp.0).unwrap();
    assert!(!other.held_by_client().unwrap());
    client.hold_as_client().unwrap();
    // Seen from another description (a daemon's), not from the holder's own.
    assert!(other.held_by_client().unwrap());
    assert!(!client.held_by_client().unwrap());
    let e = other.try_lock_exclusive().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::ResourceBusy);
    assert!(e.to_string().contains("still mapped by a client"), "{e}");
    // Refused as a whole: the flock taken first is given back.
    other.try_lock_shared().unwrap();
    other.unlock().unwrap();
    client.store_u64(0, 42);
    assert_eq!(
        Pool::create(&tmp.0, 4096).unwrap_err().kind(),
        ErrorKind::ResourceBusy
    );
    assert_eq!(other.load_u64(0), 42);
    // Several clients at once hold it; it goes with the last mapping.
    let second = Pool::open(&tmp.0).unwrap();
    second.hold_as_client().unwrap();
    drop(client);
    assert!(other.try_lock_exclusive().is_err());
    assert!(other.held_by_client().unwrap());
    drop(second);
    assert!(!other.held_by_client().unwrap());
    other.try_lock_exclusive().unwrap();
}

#[test]
fn a_size_the_file_system_cannot_hold_leaves_the_old_pool() {
    let tmp = TempPath::new("/dev/shm", "toolarge");
    let old = Pool::create(&tmp.0, 8192).unwrap();
    old.store_u64(4096, 7);
    old.flush(4096, 8);
    drop(old);
    // 64 TiB: more than /dev/shm holds.
    let e = Pool::create(&tmp.0, 64 << 40).unwrap_err();
    assert!(e.to_string().contains("not enough free space"), "{e}");
    let again = Pool::open(&tmp.0).unwrap();
    assert_eq!(again.len(), 8192);
    assert_eq!(again.load_u64(4096), 7);
}

#[test]
fn exclusive_lock_conflicts_between_pools() {
    let tmp = TempPath::new("/dev/shm", "lock");
    let a = Pool::create(&tmp.0, 4096).unwrap();
    let b = Pool::open(&tmp.0).unwrap();
    a.try_lock_exclusive().unwrap();
    a.try_lock_exclusive().unwrap(); // same open file: re-locking is fine
    for e in [b.try_lock_exclusive(), b.try_lock_shared()] {
        let e = e.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::WouldBlock);
        assert!(e.to_string().contains("pool is in use by another process"));
    }
    // Re-creating a locked pool must not destroy it.
    a.store_u64(0, 42);
    let e = Pool::create(&tmp.0, 8192).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::WouldBlock);
    assert_eq!(b.load_u64(0), 42);
    assert_eq!(b.len(), 4096);

    a.unlock().unwrap();
    b.try_lock_shared().unwrap();
    let c = Pool::open(&tmp.0).unwrap();
    c.try_lock_shared().unwrap();
    assert!(a.try_lock_exclusive().is_err());
    drop(b);
    drop(c);
    a.try_lock_exclusive().unwrap();

    let anon = Pool::anonymous(4096).unwrap();
    anon.try_lock_exclusive().unwrap();
    anon.try_lock_shared().unwrap();
}

/// Every (offset, length) combination writes exactly the right bytes and
/// leaves neighbours untouched.
fn check_nt_sweep(pool: &Pool, base: u64, offsets: impl Iterator<Item = u64> + Clone) {
    const REGION: usize = 1024;
    let fill = vec![0xAAu8; REGION];
    for len in 0..=300usize {
        let src = pattern(len, len as u8);
        for off in offsets.clone() {
            for zero in [false, true] {
                pool.write(base, &fill);
                if zero {
                    pool.zero_nt(base + off, len as u64);
                } else {
                    pool.copy_nt(base + off, &src);
                }
                let mut want = fill.clone();
                let (o, e) = (off as usize, off as usize + len);
                if zero {
                    want[o..e].fill(0);
                } else {
                    want[o..e].copy_from_slice(&src);
                }
                let got = pool.slice(base, REGION as u64);
                assert!(got == &want[..], "zero={zero} off={off} len={len}");
            }
        }
    }
    pool.fence();
}

#[test]
fn nt_copies_of_unaligned_ranges_are_exact() {
    let pool = Pool::anonymous(8192).unwrap();
    check_nt_sweep(&pool, 64, 1..=130);
    // Larger copies, ending at the very end of the pool.
    for len in [256u64, 257, 1000, 4096, 4097, 8191] {
        let src = pattern(len as usize, 9);
        pool.fill_zero(0, 8192);
        pool.copy_nt(8192 - len, &src);
        assert_eq!(pool.slice(8192 - len, len), &src[..]);
        assert!(pool.slice(0, 8192 - len).iter().all(|&b| b == 0));
        pool.write(0, &vec![5u8; 8192]);
        pool.zero_nt(8192 - len, len);
        assert!(pool.slice(8192 - len, len).iter().all(|&b| b == 0));
        assert!(pool.slice(0, 8192 - len).iter().all(|&b| b == 5));
    }
}

#[test]
fn nt_copies_on_file_pools_are_exact() {
    for dir in ["/dev/shm", std::env::temp_dir().to_str().unwrap()] {
        let tmp = TempPath::new(dir, "nt");
        let pool = Pool::create(&tmp.0, 8192).unwrap();
        check_nt_sweep(&pool, 4096 - 512, [1, 2, 63, 64, 65, 127, 130].into_iter());
    }
}

#[test]
fn copy_nt_from_the_pool_itself_behaves_like_memmove() {
    let pool = Pool::from_image(&pattern(8192, 4)).unwrap();
    let original = pool.slice(0, 8192).to_vec();
    pool.copy_nt(10, pool.slice(0, 3000));
    assert_eq!(pool.slice(10, 3000), &original[..3000]);
    assert_eq!(pool.slice(0, 10), &original[..10]);
    assert_eq!(pool.slice(3010, 8192 - 3010), &original[3010..]);
}

#[test]
fn atomics_round_trip() {
    let pool = Pool::anonymous(4096).unwrap();
    assert_eq!(pool.media(), Media::Memory);
    assert_eq!(pool.path(), None);
    pool.store_u64(4088, u64::MAX - 1);
    pool.store_u32(4, 0x0102_0304);
    pool.store_u8(3, 0xff);
    assert_eq!(pool.load_u64(4088), u64::MAX - 1);
    assert_eq!(pool.load_u32(4), 0x0102_0304);
    assert_eq!(pool.slice(3, 5), &[0xff, 4, 3, 2, 1]);
    pool.persist(0, 4096);
    pool.flush(4096, 0);
    pool.flush(0, 0);
}

#[test]
#[should_panic(expected = "outside the pool of 4096 bytes")]
fn out_of_range_load_panics() {
    Pool::anonymous(4096).unwrap().load_u64(4096);
}

#[test]
#[should_panic(expected = "outside the pool")]
fn out_of_range_write_panics() {
    Pool::anonymous(4096).unwrap().write(4000, &[0; 97]);
}

#[test]
#[should_panic(expected = "outside the pool")]
fn overflowing_range_panics() {
    Pool::anonymous(4096).unwrap().flush(u64::MAX, 2);
}

#[test]
#[should_panic(expected = "not 8-byte aligned")]
fn misaligned_atomic_panics() {
    Pool::anonymous(4096).unwrap().store_u64(4, 1);
}

#[test]
fn protection() {
    let pool = Pool::anonymous(3 * 4096).unwrap();
    pool.store_u64(4096, 7);
    pool.protect_read_only(4096, 4096).unwrap();
    assert_eq!(pool.load_u64(4096), 7);
    pool.protect_read_write(4096, 4096).unwrap();
    pool.store_u64(4096, 8);
    assert_eq!(pool.load_u64(4096), 8);
    for (off, len) in [
        (1, 4096),
        (0, 100),
        (4096, 3 * 4096),
        (u64::MAX - 4095, 8192),
    ] {
        let e = pool.protect_read_only(off, len).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput);
    }
}

#[test]
fn displays() {
    assert_eq!(Media::Dax.to_string(), "DAX (MAP_SYNC, cache-line flushes)");
    assert_eq!(
        Media::Tmpfs.to_string(),
        "tmpfs (emulated PM: cache-line flushes, lost on reboot)"
    );
    assert_eq!(
        Media::File.to_string(),
        "page cache (msync of touched pages)"
    );
    assert_eq!(Media::Memory.to_string(), "anonymous memory");
    assert_eq!(FlushKind::Clflushopt.to_string(), "clflushopt");
    assert_eq!(CACHE_LINE, 64);
}

#[test]
fn pool_is_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<Pool>();
    let pool = Pool::anonymous(1 << 16).unwrap();
    std::thread::scope(|s| {
        for t in 0..4u64 {
            let pool = &pool;
            s.spawn(move || {
                for i in 0..100 {
                    let off = t * 16384 + i * 64;
                    pool.store_u64(off, i);
                    pool.persist(off, 8);
                }
            });
        }
    });
    assert_eq!(pool.load_u64(3 * 16384 + 99 * 64), 99);
}

fn line(pool_image: &[u8], line: u64) -> [u8; 64] {
    pool_image[line as usize..line as usize + 64]
        .try_into()
        .unwrap()
}

#[test]
fn recording_captures_events_in_order() {
    let pool = Pool::anonymous(4096).unwrap();
    assert!(pool.stop_recording().is_none());
    // Recording off records nothing.
    pool.write(0, &[9; 100]);
    pool.persist(0, 100);
    pool.mark(1);
    pool.copy_nt(1000, &[3; 500]);
    assert!(!pool.is_recording());
    let before = pool.slice(0, 4096).to_vec();

    pool.start_recording();
    assert!(pool.is_recording());
    pool.mark(10);
    pool.write(0, &[1; 10]);
    pool.flush(0, 10); // event 1: line 0 with 1s
    let after_first_flush = pool.slice(0, 4096).to_vec();
    pool.write(0, &[2; 10]); // not flushed before the fence: the log keeps the 1s
    pool.fence(); // event 2
    pool.write(100, &[4; 40]);
    pool.flush(100, 40); // events 3, 4: lines 64 and 128
    pool.mark(11); // event 5
    pool.copy_nt(300, &[5; 400]); // events 6..=12: lines 256..=640
    pool.zero_nt(2000, 10); // event 13: line 1984
    pool.fence(); // event 14
    pool.write(3000, &[6; 8]);
    pool.flush(3000, 8); // event 15: line 2944, never fenced
    let rec = pool.stop_recording().unwrap();
    assert!(!pool.is_recording());
    pool.persist(0, 64);
    pool.mark(12);
    assert!(pool.stop_recording().is_none());

    assert_eq!(rec.base, before);
    let kinds: Vec<String> = rec
        .events
        .iter()
        .map(|e| match e {
            Event::Flush { line, .. } => format!("F{line}"),
            Event::Fence => "|".into(),
            Event::Mark(m) => format!("M{m}"),
        })
        .collect();
    let want = "M10 F0 | F64 F128 M11 F256 F320 F384 F448 F512 F576 F640 F1984 | F2944";
    assert_eq!(kinds.join(" "), want);
    assert_eq!(
        rec.events[1],
        Event::Flush {
            line: 0,
            data: line(&after_first_flush, 0)
        }
    );
    let Event::Flush { data, .. } = &rec.events[1] else {
        unreachable!()
    };
    assert_eq!(&data[..10], &[1; 10]);
    assert_eq!(&data[10..], &before[10..64]);

    // Nothing durable before the first fence.
    for upto in 0..=2 {
        assert_eq!(rec.durable_image_at(upto), before, "upto {upto}");
    }
    // After the first fence: only line 0 as flushed (with 1s).
    let mut want = before.clone();
    want[..10].fill(1);
    for upto in 3..=14 {
        assert_eq!(rec.durable_image_at(upto), want, "upto {upto}");
    }
    // After the second fence: everything but the unfenced last flush.
    let mut want = want.clone();
    want[100..140].fill(4);
    want[300..700].fill(5);
    want[2000..2010].fill(0);
    for upto in [15, 16, 17, 1000] {
        assert_eq!(rec.durable_image_at(upto), want, "upto {upto}");
    }
    let crashed = Pool::from_image(&rec.durable_image_at(16)).unwrap();
    assert_eq!(crashed.slice(0, 4096), &want[..]);
    assert_eq!(crashed.load_u8(3000), before[3000]);

    // A new recording starts from the current contents.
    pool.start_recording();
    let rec = pool.stop_recording().unwrap();
    assert_eq!(rec.base, pool.slice(0, 4096));
    assert!(rec.events.is_empty());
}

#[test]
fn write_lines_nt_writes_whole_lines_and_records_each_for_the_next_fence() {
    let pool = Pool::from_image(&pattern(8192, 7)).unwrap();
    let before = pool.slice(0, 8192).to_vec();
    pool.start_recording();
    pool.write_lines_nt(128, &[1; 64]); // one line, below copy_nt's streaming threshold
    pool.write_lines_nt(1024, &[2; 192]); // three lines
    pool.write_lines_nt(3000, &[3; 70]); // not line-aligned: copy_nt's path
    pool.fence();
    let rec = pool.stop_recording().unwrap();
    let lines: Vec<u64> = rec
        .events
        .iter()
        .filter_map(|e| match e {
            Event::Flush { line, .. } => Some(*line),
            _ => None,
        })
        .collect();
    assert_eq!(lines, [128, 1024, 1088, 1152, 2944, 3008]);
    assert!(matches!(rec.events.last(), Some(Event::Fence)));
    let mut want = before.clone();
    want[128..192].fill(1);
    want[1024..1216].fill(2);
    want[3000..3070].fill(3);
    assert_eq!(pool.slice(0, 8192), &want[..]);
    assert_eq!(rec.durable_image_at(rec.events.len()), want);
    // Before the fence nothing of it is durable.
    assert_eq!(rec.durable_image_at(rec.events.len() - 1), before);
}

//! Full pools: ENOSPC for data, files and directories, and the space back once freed.

use super::{MIB, msg};
use crate::common::{assert_clean, assert_errno, new_fs, pattern, remount};
use engram_core::{Fs, OpenOptions};
use libc::ENOSPC;
use std::io::{Seek, SeekFrom};

#[test]
fn full_pool_enospc_then_recovers() {
    let (p, fs) = new_fs("full", 8);
    fs.write_file("/small", b"keep me").unwrap();
    let f = fs
        .open_file(
            "/big",
            &OpenOptions::new().read(true).write(true).create(true),
        )
        .unwrap();
    let chunk = 64 * 1024;
    let mut written = 0u64;
    let err = loop {
        let data = pattern(written / chunk as u64, chunk);
        match f.write_at(&data, written) {
            Ok(n) => {
                assert_eq!(n, chunk);
                written += n as u64;
            }
            Err(e) => break e,
        }
        assert!(written < 8 * MIB, "wrote more than the pool holds");
    };
    assert_eq!(err.errno(), ENOSPC, "{err}");
    assert!(written > 4 * MIB, "only {written} bytes fit");
    // Fill the last pages one at a time.
    let big_chunks = written / chunk as u64;
    let err = loop {
        match f.write_at(&pattern(written, 4096), written) {
            Ok(n) => written += n as u64,
            Err(e) => break e,
        }
        assert!(written < 8 * MIB, "wrote more than the pool holds");
    };
    assert_eq!(err.errno(), ENOSPC, "{err}");
    // A failed write changes nothing; a big one fails as a whole.
    assert_eq!(f.metadata().unwrap().size, written);
    assert_errno(f.write_at(&vec![1u8; MIB as usize], written), ENOSPC);
    assert_errno(f.write_at(&vec![1u8; MIB as usize], 0), ENOSPC);
    assert_eq!(f.metadata().unwrap().size, written);
    assert_errno(f.allocate(written, MIB, false), ENOSPC);
    assert_eq!(f.metadata().unwrap().size, written);
    // Ranges far past the pool's size are refused without listing their pages (a list of
    // 2^32 page numbers, 32 GiB, before 2026-11-26), and so are zeroed ranges.
    assert_errno(f.allocate(0, 1 << 44, true), ENOSPC);
    assert_errno(f.zero_range(0, 1 << 44, true), ENOSPC);
    f.punch_hole(written, 1 << 44).unwrap();
    assert_eq!(f.metadata().unwrap().size, written);
    let check_big = |f: &engram_core::File| {
        let mut buf = vec![0u8; chunk];
        for i in 0..big_chunks {
            assert_eq!(f.read_at(&mut buf, i * chunk as u64).unwrap(), chunk);
            assert!(buf == pattern(i, chunk), "chunk {i} damaged");
        }
        let mut page = vec![0u8; 4096];
        for at in (big_chunks * chunk as u64..written).step_by(4096) {
            assert_eq!(f.read_at(&mut page, at).unwrap(), 4096);
            assert!(page == pattern(at, 4096), "page at {at} damaged");
        }
    };
    check_big(&f);
    assert_eq!(fs.read_file("/small").unwrap(), b"keep me");
    // Metadata-only operations still work.
    fs.mkdir("/d", 0o755).unwrap();
    fs.rename("/small", "/d/small").unwrap();
    fs.write_file("/empty", b"").unwrap();
    assert_errno(fs.write_file("/one", b"x"), ENOSPC);
    assert_clean(&fs);
    drop(f);

    // Survives a remount in this state.
    let fs = remount(&p, fs);
    let f = fs
        .open_file("/big", &OpenOptions::new().read(true))
        .unwrap();
    check_big(&f);
    drop(f);
    assert_clean(&fs);

    // Deleting frees the space again (checked after a remount; see the next test).
    fs.unlink("/big").unwrap();
    let fs = remount(&p, fs);
    let data = pattern(7, (3 * MIB) as usize);
    fs.write_file("/again", &data).unwrap();
    assert!(fs.read_file("/again").unwrap() == data);
    assert_eq!(fs.read_file("/d/small").unwrap(), b"keep me");
    assert_clean(&fs);
    let fs = remount(&p, fs);
    assert!(fs.read_file("/again").unwrap() == data);
    assert_clean(&fs);
}

#[test]
fn write_larger_than_an_atomic_step_that_runs_out_of_space_is_short() {
    let (p, fs) = new_fs("shortwrite", 16);
    // File::write_at applies writes in atomic steps of 8 MiB (ATOMIC_WRITE_MAX).
    let step = 8 * MIB as usize;
    let data = pattern(11, 20 * MIB as usize);
    let mut f = fs
        .open_file(
            "/big",
            &OpenOptions::new().read(true).write(true).create(true),
        )
        .unwrap();
    // The first 8 MiB step fits, the second does not: the first stays, and says so.
    assert_eq!(f.write_at(&data, 0).unwrap(), step);
    assert_eq!(f.metadata().unwrap().size, step as u64);
    // Nothing of the rest fits in one step: now the error.
    assert_errno(f.write_at(&data[step..], step as u64), ENOSPC);
    assert_eq!(f.metadata().unwrap().size, step as u64);
    // Through `Write`: the offset moves by what was written.
    f.set_len(0).unwrap();
    f.seek(SeekFrom::Start(0)).unwrap();
    assert_eq!(std::io::Write::write(&mut f, &data).unwrap(), step);
    assert_eq!(f.stream_position().unwrap(), step as u64);
    drop(f);
    assert!(fs.read_file("/big").unwrap() == data[..step]);
    // A whole-file write keeps going after a short step and reports the failure.
    assert_errno(fs.write_file("/big2", &data), ENOSPC);
    fs.unlink("/big2").unwrap();
    assert_clean(&fs);
    let fs = remount(&p, fs);
    assert!(fs.read_file("/big").unwrap() == data[..step]);
    assert_clean(&fs);
}

#[test]
fn writing_after_delete_on_a_full_pool_works_at_once() {
    let (_p, fs) = new_fs("fullreuse", 8);
    let f = fs
        .open_file("/big", &OpenOptions::new().write(true).create(true))
        .unwrap();
    let mut written = 0;
    while f.write_at(&[7u8; 4096], written).is_ok() {
        written += 4096;
    }
    drop(f);
    fs.unlink("/big").unwrap();
    fs.write_file("/again", &[1u8; 4096]).unwrap();
    assert_clean(&fs);
}

/// Create small files in /d until the pool says ENOSPC; returns how many fit.
fn fill_with_files(fs: &Fs) -> usize {
    fs.mkdir("/d", 0o755).unwrap();
    let mut n = 0;
    let err = loop {
        match fs.open_file(
            format!("/d/f{n}"),
            &OpenOptions::new().write(true).create_new(true),
        ) {
            Ok(f) => {
                f.write_at(format!("{n}").as_bytes(), 0).unwrap();
                n += 1;
            }
            Err(e) => break e,
        }
        assert!(n < 100_000);
    };
    assert_eq!(err.errno(), ENOSPC, "{err}");
    assert!(n > 500, "only {n} files fit");
    assert!(!msg(&err).is_empty(), "ENOSPC should say what ran out");
    n
}

#[test]
fn many_files_until_enospc_then_reuse() {
    let (p, fs) = new_fs("manyfiles", 8);
    let n = fill_with_files(&fs);
    assert_errno(fs.mkdir("/d2", 0o755), ENOSPC);
    assert_errno(fs.symlink("t", "/sl"), ENOSPC);
    assert_errno(fs.write_file("/one-more", b""), ENOSPC);
    assert_eq!(fs.read_dir("/d").unwrap().count() - 2, n);
    for i in 0..n {
        assert_eq!(
            fs.read_file(format!("/d/f{i}")).unwrap(),
            format!("{i}").as_bytes()
        );
    }
    assert_clean(&fs);
    // Delete a tenth; after a remount the same number can be created again, no more.
    for i in (0..n).step_by(10) {
        fs.unlink(format!("/d/f{i}")).unwrap();
    }
    assert_clean(&fs);
    let fs = remount(&p, fs);
    for i in (0..n).step_by(10) {
        fs.write_file(format!("/d/g{i}"), b"again").unwrap();
    }
    assert_errno(fs.write_file("/d/one-more", b""), ENOSPC);
    for i in (1..n).step_by(10) {
        assert_eq!(
            fs.read_file(format!("/d/f{i}")).unwrap(),
            format!("{i}").as_bytes()
        );
    }
    assert_clean(&fs);
    let fs = remount(&p, fs);
    assert_eq!(fs.read_dir("/d").unwrap().count() - 2, n);
    assert_eq!(fs.read_file("/d/g0").unwrap(), b"again");
    assert_clean(&fs);
}

#[test]
fn deleting_on_a_full_pool_makes_room_at_once() {
    let (_p, fs) = new_fs("reuse", 8);
    let n = fill_with_files(&fs);
    fs.unlink("/d/f0").unwrap();
    fs.write_file("/d/new", b"fits").unwrap();
    assert_errno(fs.write_file("/d/newer", b""), ENOSPC);
    for i in (1..n).step_by(10) {
        fs.unlink(format!("/d/f{i}")).unwrap();
    }
    for i in (1..n).step_by(10) {
        fs.write_file(format!("/d/g{i}"), b"again").unwrap();
    }
    assert_clean(&fs);
}

#[test]
fn many_directories_until_enospc_then_reuse() {
    let (p, fs) = new_fs("manydirs", 8);
    let mut n = 0;
    let err = loop {
        let r = fs
            .mkdir(format!("/m{n}"), 0o755)
            .and_then(|()| fs.write_file(format!("/m{n}/x"), b""));
        match r {
            Ok(()) => n += 1,
            Err(e) => break e,
        }
        assert!(n < 100_000);
    };
    assert_eq!(err.errno(), ENOSPC, "{err}");
    assert!(n > 50, "only {n} directories fit");
    assert_clean(&fs);
    for i in 0..n / 2 {
        fs.unlink(format!("/m{i}/x")).unwrap();
        fs.rmdir(format!("/m{i}")).unwrap();
    }
    // Directory pages are not merged when entries go (as in ext4), so the root directory
    // may need a page or two more for the new names: leave it that slack.
    let again = n / 2 - 4;
    for i in 0..again {
        fs.mkdir(format!("/again{i}"), 0o755).unwrap();
        fs.write_file(format!("/again{i}/x"), b"y").unwrap();
    }
    assert_clean(&fs);
    let fs = remount(&p, fs);
    assert_eq!(
        fs.read_file(format!("/again{}/x", again - 1)).unwrap(),
        b"y"
    );
    assert!(fs.stat(format!("/m{}/x", n - 1)).is_ok());
    assert_clean(&fs);
}

/// Space freed while another thread reads in a loop is reused: each read pins an epoch for
/// as long as its copy takes, and pins again at once. Making room waited a hundred yields
/// for such a reader, well under one read of 4 MB, and the writer got ENOSPC with two
/// thirds of the pool free (found by probing, with two processes through a daemon).
#[test]
fn space_freed_beside_a_reader_in_a_loop_is_reused() {
    let (_p, fs) = new_fs("busy-reader", 16);
    fs.write_file("/r", &pattern(3, 4_000_000)).unwrap();
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            let f = fs.open_file("/r", &OpenOptions::new().read(true)).unwrap();
            let mut buf = vec![0u8; 4_000_000];
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                assert_eq!(f.read_at(&mut buf, 0).unwrap(), buf.len());
            }
        });
        let data = pattern(5, 6_000_000);
        for i in 0..30 {
            let r = fs.write_file("/w", &data);
            if let Err(e) = r {
                stop.store(true, std::sync::atomic::Ordering::Relaxed);
                panic!("rewrite {i}: {e} ({:?})", fs.statfs().unwrap());
            }
            fs.unlink("/w").unwrap();
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    assert_clean(&fs);
}

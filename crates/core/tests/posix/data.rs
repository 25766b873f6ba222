//! File data: reads and writes at odd offsets, truncate, holes, fallocate, std::io, orphans.

use super::{MIB, creat, names, ro, rw};
use crate::common::{PoolFile, assert_clean, assert_errno, new_fs, pattern, remount};
use engram_core::Fs;
use libc::{EBADF, EINVAL, EISDIR, ENOENT};
use std::io::{Read, Seek, SeekFrom, Write};

#[test]
fn truncate_up_and_down() {
    let (p, fs) = new_fs("truncate", 16);
    let data = pattern(7, 10_000);
    fs.write_file("/f", &data).unwrap();
    assert_eq!(fs.stat("/f").unwrap().blocks, 3 * 8);

    fs.truncate("/f", 5_000).unwrap();
    assert_eq!(fs.stat("/f").unwrap().size, 5_000);
    assert_eq!(fs.stat("/f").unwrap().blocks, 2 * 8);
    assert_eq!(fs.read_file("/f").unwrap(), &data[..5_000]);

    // Growing again: the bytes past the old end read as zeros, including those in the
    // page that still holds the shrunk-away data.
    fs.truncate("/f", 20_000).unwrap();
    let got = fs.read_file("/f").unwrap();
    assert_eq!(got.len(), 20_000);
    assert_eq!(&got[..5_000], &data[..5_000]);
    assert!(
        got[5_000..].iter().all(|&b| b == 0),
        "bytes past a shrink read as zeros"
    );

    // The same through an open handle, and a write after a shrink within one page.
    let f = fs.open_file("/f", &rw()).unwrap();
    f.set_len(100).unwrap();
    f.write_at(b"Z", 200).unwrap();
    let mut buf = vec![0xAAu8; 300];
    assert_eq!(f.read_at(&mut buf, 0).unwrap(), 201);
    assert_eq!(&buf[..100], &data[..100]);
    assert!(buf[100..200].iter().all(|&b| b == 0));
    assert_eq!(buf[200], b'Z');
    f.set_len(0).unwrap();
    assert_eq!(f.metadata().unwrap().blocks, 0);
    f.set_len(3 * MIB).unwrap();
    assert_eq!(
        f.metadata().unwrap().blocks,
        0,
        "growing by truncate allocates nothing"
    );
    let mut big = vec![1u8; (3 * MIB) as usize];
    assert_eq!(f.read_at(&mut big, 0).unwrap(), (3 * MIB) as usize);
    assert!(big.iter().all(|&b| b == 0));
    drop(f);

    // Errors, and truncate through a symlink.
    fs.mkdir("/d", 0o755).unwrap();
    assert_errno(fs.truncate("/d", 0), EISDIR);
    assert_errno(fs.truncate("/missing", 0), ENOENT);
    fs.symlink("/f", "/l").unwrap();
    fs.truncate("/l", 7).unwrap();
    assert_eq!(fs.stat("/f").unwrap().size, 7);
    assert!(fs.lstat("/l").unwrap().is_symlink());
    let fs = remount(&p, fs);
    assert_eq!(fs.read_file("/f").unwrap(), [0u8; 7]);
    assert_clean(&fs);
}

#[test]
fn data_odd_offsets_and_lengths() {
    let (p, fs) = new_fs("data", 64);
    let f = fs.open_file("/f", &creat()).unwrap();
    let mut model: Vec<u8> = Vec::new();
    let sizes = [1u64, 4095, 4096, 4097, MIB + 17];
    let mut seed = 0;
    for &off in &[0u64, 1, 4095, 4096, 4097, MIB + 17, 3 * MIB - 1] {
        for &len in &sizes {
            seed += 1;
            let data = pattern(seed, len as usize);
            assert_eq!(f.write_at(&data, off).unwrap(), len as usize);
            let end = (off + len) as usize;
            if model.len() < end {
                model.resize(end, 0);
            }
            model[off as usize..end].copy_from_slice(&data);
            // Read back the written range with a little on either side.
            let lo = off.saturating_sub(3);
            let mut buf = vec![0u8; (len + 6) as usize];
            let n = f.read_at(&mut buf, lo).unwrap();
            let want_end = (lo as usize + buf.len()).min(model.len());
            assert_eq!(n, want_end - lo as usize);
            assert!(
                buf[..n] == model[lo as usize..want_end],
                "write of {len} at {off}"
            );
        }
    }
    // One write larger than the engine's atomic step (8 MiB).
    let huge = pattern(999, (9 * MIB + 5) as usize);
    assert_eq!(f.write_at(&huge, 3).unwrap(), huge.len());
    if model.len() < huge.len() + 3 {
        model.resize(huge.len() + 3, 0);
    }
    model[3..3 + huge.len()].copy_from_slice(&huge);
    assert_eq!(f.metadata().unwrap().size, model.len() as u64);
    // pread at odd places.
    for &off in &[
        0u64,
        1,
        4095,
        4096,
        4097,
        8191,
        MIB + 17,
        model.len() as u64 - 1,
    ] {
        for &len in &[1usize, 4095, 4096, 4097, 10_000] {
            let mut buf = vec![0u8; len];
            let n = f.read_at(&mut buf, off).unwrap();
            let want_end = (off as usize + len).min(model.len());
            assert_eq!(n, want_end - off as usize);
            assert!(
                buf[..n] == model[off as usize..want_end],
                "read of {len} at {off}"
            );
        }
    }
    let mut buf = [0u8; 8];
    assert_eq!(f.read_at(&mut buf, model.len() as u64).unwrap(), 0);
    assert_eq!(f.read_at(&mut buf, model.len() as u64 + 5000).unwrap(), 0);
    assert_eq!(f.write_at(b"", 99 * MIB).unwrap(), 0);
    assert_eq!(
        f.metadata().unwrap().size,
        model.len() as u64,
        "an empty write does not extend"
    );
    drop(f);
    assert!(fs.read_file("/f").unwrap() == model);
    let fs = remount(&p, fs);
    assert!(fs.read_file("/f").unwrap() == model);
    assert_clean(&fs);
}

#[test]
fn sparse_files() {
    let (p, fs) = new_fs("sparse", 16);
    let f = fs.open_file("/s", &creat()).unwrap();
    f.write_at(b"head", 0).unwrap();
    f.write_at(b"tail", 100 * MIB).unwrap();
    f.write_at(b"mid", 40 * MIB + 4094).unwrap(); // straddles a page boundary
    let m = f.metadata().unwrap();
    assert_eq!(m.size, 100 * MIB + 4);
    assert_eq!(m.blocks, 4 * 8);
    let mut buf = vec![0xEEu8; 3 * 4096];
    f.read_at(&mut buf, 40 * MIB - 4096).unwrap();
    assert!(buf[..2 * 4096 - 2].iter().all(|&b| b == 0));
    assert_eq!(&buf[2 * 4096 - 2..2 * 4096 + 1], b"mid");
    assert!(buf[2 * 4096 + 1..].iter().all(|&b| b == 0));
    let mut buf = vec![0xEEu8; 8];
    f.read_at(&mut buf, 100 * MIB - 4).unwrap();
    assert_eq!(&buf, b"\0\0\0\0tail");
    // Far offsets need a taller file index: 1 GiB, 600 GiB, 200 TiB.
    for (k, off) in [1u64 << 30, 600 << 30, 200 << 40].into_iter().enumerate() {
        let tag = format!("far{k}");
        f.write_at(tag.as_bytes(), off).unwrap();
        let mut buf = [0u8; 4];
        f.read_at(&mut buf, off).unwrap();
        assert_eq!(&buf, tag.as_bytes());
        assert_eq!(f.metadata().unwrap().size, off + 4);
    }
    let mut buf = [0xEEu8; 4];
    assert_eq!(f.read_at(&mut buf, 100 << 40).unwrap(), 4);
    assert_eq!(buf, [0; 4]);
    assert_eq!(f.metadata().unwrap().blocks, 7 * 8);
    assert_clean(&fs);
    // Shrinking back frees the far pages (and the index nodes above them).
    f.set_len(100 * MIB + 4).unwrap();
    assert_eq!(f.metadata().unwrap().blocks, 4 * 8);
    assert_clean(&fs);

    // Filling a hole keeps the neighbours.
    f.write_at(b"fill", 5 * MIB).unwrap();
    assert_eq!(f.metadata().unwrap().blocks, 5 * 8);
    drop(f);
    let fs = remount(&p, fs);
    let f = fs.open_file("/s", &ro()).unwrap();
    let mut buf = [0u8; 4];
    f.read_at(&mut buf, 5 * MIB).unwrap();
    assert_eq!(&buf, b"fill");
    f.read_at(&mut buf, 0).unwrap();
    assert_eq!(&buf, b"head");
    f.read_at(&mut buf, 50 * MIB).unwrap();
    assert_eq!(&buf, &[0; 4]);
    drop(f);
    assert_clean(&fs);
}

#[test]
fn fallocate_modes() {
    let (p, fs) = new_fs("fallocate", 32);
    let f = fs.open_file("/f", &creat()).unwrap();
    f.allocate(0, MIB, false).unwrap();
    let m = f.metadata().unwrap();
    assert_eq!(m.size, MIB, "mode 0 extends the size");
    assert_eq!(m.blocks, MIB / 512);
    let mut buf = vec![1u8; MIB as usize];
    assert_eq!(f.read_at(&mut buf, 0).unwrap(), MIB as usize);
    assert!(buf.iter().all(|&b| b == 0));

    f.allocate(MIB, MIB, true).unwrap();
    let m = f.metadata().unwrap();
    assert_eq!(m.size, MIB, "FALLOC_FL_KEEP_SIZE keeps the size");
    assert_eq!(m.blocks, 2 * MIB / 512, "but the blocks grow");

    // Allocating over data keeps it; allocating what is there already adds nothing.
    f.write_at(b"keep me", 4000).unwrap();
    f.allocate(0, 2 * MIB, false).unwrap();
    let m = f.metadata().unwrap();
    assert_eq!(m.size, 2 * MIB);
    assert_eq!(m.blocks, 2 * MIB / 512);
    let mut buf = [0u8; 7];
    f.read_at(&mut buf, 4000).unwrap();
    assert_eq!(&buf, b"keep me");
    // An unaligned range beyond the end.
    f.allocate(3 * MIB + 100, 10, false).unwrap();
    assert_eq!(f.metadata().unwrap().size, 3 * MIB + 110);
    assert_eq!(f.metadata().unwrap().blocks, (2 * MIB + 4096) / 512);
    assert_errno(f.allocate(0, 0, false), EINVAL);
    // Writing into pre-allocated space beyond the end.
    f.allocate(4 * MIB, MIB, true).unwrap();
    f.write_at(b"later", 4 * MIB + 10).unwrap();
    let mut buf = vec![9u8; 15];
    f.read_at(&mut buf, 4 * MIB).unwrap();
    assert_eq!(&buf, b"\0\0\0\0\0\0\0\0\0\0later");
    let blocks = f.metadata().unwrap().blocks;
    drop(f);
    let ro_f = fs.open_file("/f", &ro()).unwrap();
    assert_errno(ro_f.allocate(0, 4096, false), EBADF);
    drop(ro_f);
    let fs = remount(&p, fs);
    assert_eq!(fs.stat("/f").unwrap().blocks, blocks);
    assert_eq!(fs.stat("/f").unwrap().size, 4 * MIB + 15);
    assert_clean(&fs);
}

#[test]
fn std_io_traits() {
    let (_p, fs) = new_fs("io", 16);
    let mut f = fs.open_file("/f", &creat()).unwrap();
    f.write_all(b"hello, ").unwrap();
    write!(f, "world {}", 42).unwrap();
    f.flush().unwrap();
    assert_eq!(f.stream_position().unwrap(), 15);
    f.rewind().unwrap();
    let mut s = String::new();
    f.read_to_string(&mut s).unwrap();
    assert_eq!(s, "hello, world 42");
    assert_eq!(f.seek(SeekFrom::End(-2)).unwrap(), 13);
    let mut two = [0u8; 2];
    f.read_exact(&mut two).unwrap();
    assert_eq!(&two, b"42");
    assert_eq!(f.seek(SeekFrom::Current(-8)).unwrap(), 7);
    let mut five = [0u8; 5];
    f.read_exact(&mut five).unwrap();
    assert_eq!(&five, b"world");
    assert!(f.seek(SeekFrom::Current(-100)).is_err());
    assert_eq!(
        f.stream_position().unwrap(),
        12,
        "a failed seek leaves the offset"
    );
    // Seeking past the end and writing leaves a hole.
    f.seek(SeekFrom::End(10)).unwrap();
    f.write_all(b"!").unwrap();
    let mut all = Vec::new();
    f.rewind().unwrap();
    f.read_to_end(&mut all).unwrap();
    assert_eq!(all, b"hello, world 42\0\0\0\0\0\0\0\0\0\0!");
    // A clone shares the offset; std::io::copy works between files.
    let mut g = f.try_clone().unwrap();
    g.seek(SeekFrom::Start(7)).unwrap();
    assert_eq!(f.stream_position().unwrap(), 7);
    let mut out = fs.open_file("/copy", &creat()).unwrap();
    let big = pattern(3, 300_000);
    out.write_all(&big).unwrap();
    out.rewind().unwrap();
    let mut dst = fs.open_file("/copy2", &creat()).unwrap();
    assert_eq!(std::io::copy(&mut out, &mut dst).unwrap(), big.len() as u64);
    drop((f, g, out, dst));
    assert!(fs.read_file("/copy2").unwrap() == big);
    // Read returns 0 at the end; short reads at the end.
    let mut f = fs.open_file("/copy2", &ro()).unwrap();
    f.seek(SeekFrom::Start(big.len() as u64 - 3)).unwrap();
    let mut buf = [0u8; 10];
    assert_eq!(f.read(&mut buf).unwrap(), 3);
    assert_eq!(f.read(&mut buf).unwrap(), 0);
    let e = f.write(b"x").unwrap_err();
    assert_eq!(e.raw_os_error(), Some(EBADF));
    drop(f);
    assert_clean(&fs);
}

/// Free pages as statfs reports them, after giving the client's reservation back.
fn free_blocks(fs: &Fs) -> u64 {
    // fsck returns reserved pages to the server first, so the number is comparable.
    assert_clean(fs);
    fs.statfs().unwrap().blocks_free
}

#[test]
fn unlinked_open_file_lives_until_closed() {
    let p = PoolFile::new("orphan");
    let fs = p.mkfs_open(32 * MIB);
    let files_free0 = fs.statfs().unwrap().files_free;
    let f = fs.open_file("/f", &creat()).unwrap();
    let data = pattern(11, (2 * MIB) as usize);
    f.write_at(&data, 0).unwrap();
    let g = fs.open_file("/f", &ro()).unwrap();
    fs.unlink("/f").unwrap();
    assert_errno(fs.stat("/f"), ENOENT);
    assert!(names(&fs, "/").is_empty());
    assert_eq!(f.metadata().unwrap().nlink, 0);
    // Still readable and writable through both handles.
    let mut buf = vec![0u8; data.len()];
    assert_eq!(g.read_at(&mut buf, 0).unwrap(), data.len());
    assert!(buf == data);
    f.write_at(b"more", 2 * MIB).unwrap();
    let mut tail = [0u8; 4];
    g.read_at(&mut tail, 2 * MIB).unwrap();
    assert_eq!(&tail, b"more");
    f.set_len(MIB).unwrap();
    assert_eq!(g.metadata().unwrap().size, MIB);
    // A new file with the same name is a different file.
    fs.write_file("/f", b"new").unwrap();
    assert_ne!(fs.stat("/f").unwrap().ino, f.ino());
    fs.unlink("/f").unwrap();
    drop(f);
    drop(g);
    assert_clean(&fs);

    // An orphan still open at unmount is gone after the next mount.
    let f = fs.open_file("/o", &creat()).unwrap();
    f.write_at(&data, 0).unwrap();
    fs.unlink("/o").unwrap();
    fs.unmount().unwrap();
    drop(f);
    let fs = p.open();
    assert!(fs.mount_info().was_clean);
    assert!(names(&fs, "/").is_empty());
    assert_eq!(fs.statfs().unwrap().files_free, files_free0);
    assert_eq!(
        free_blocks(&fs),
        fs.statfs().unwrap().blocks,
        "every data page is free again"
    );
    assert_clean(&fs);
}

#[test]
fn unlinked_open_file_space_comes_back_after_close() {
    let (_p, fs) = new_fs("orphanspace", 32);
    let f = fs.open_file("/f", &creat()).unwrap();
    f.write_at(&pattern(12, (2 * MIB) as usize), 0).unwrap();
    fs.unlink("/f").unwrap();
    let held = free_blocks(&fs);
    drop(f);
    let freed = free_blocks(&fs);
    assert!(
        freed >= held + 512,
        "space of the closed orphan comes back: {held} -> {freed}"
    );
}

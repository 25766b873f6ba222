//! Recovery: a clean pool skips replay and an unclean one replays (with the count the API
//! reports); a torn last log record is dropped while a damaged record in the middle of the
//! log is refused (EUCLEAN, the pool untouched); a process killed in the middle of
//! operations leaves a pool that opens, checks clean and has its orphans freed.

mod common;

use common::{PoolFile, assert_clean, pattern};
use engram_core::{Fs, OpenOptions, Options};
use std::io::{BufRead, BufReader};
use std::os::unix::fs::FileExt;
use std::process::{Command, Stdio};

const MIB: u64 = 1 << 20;

/// An image of a mounted pool as a crash would leave it (every store made so far is in the
/// file: the pool lives in the page cache or on tmpfs): a copy of the file taken while it is
/// open.
fn crash_copy(p: &PoolFile, tag: &str) -> PoolFile {
    let copy = PoolFile::new(tag);
    std::fs::copy(p.path(), copy.path()).unwrap();
    copy
}

/// A record header of the operation log: where it is (pool offset), its length and sequence.
#[derive(Debug, Clone, Copy)]
struct Rec {
    at: u64,
    len: u64,
    seq: u64,
}

/// The chain of records from the superblock's log head, read from the raw file (see
/// docs/format.md: magic "ELOG", kind, length, crc, sequence number).
fn records(p: &PoolFile) -> Vec<Rec> {
    let sb = Fs::superblock(p.path()).unwrap();
    let g = sb.geometry;
    let f = std::fs::File::open(p.path()).unwrap();
    let mut out = Vec::new();
    let (mut pos, mut seq) = (sb.log_head, sb.log_head_seq);
    loop {
        let mut h = [0u8; 32];
        f.read_exact_at(&mut h, g.log_off + pos).unwrap();
        let rseq = u64::from_le_bytes(h[16..24].try_into().unwrap());
        if &h[0..4] != b"ELOG" || rseq != seq {
            return out;
        }
        let kind = u32::from_le_bytes(h[4..8].try_into().unwrap());
        let len = u32::from_le_bytes(h[8..12].try_into().unwrap()) as u64;
        assert_eq!(kind, 0, "these tests never fill the log");
        out.push(Rec {
            at: g.log_off + pos,
            len,
            seq,
        });
        pos += len;
        seq += 1;
    }
}

fn flip(p: &PoolFile, at: u64) {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(p.path())
        .unwrap();
    let mut b = [0u8; 1];
    f.read_exact_at(&mut b, at).unwrap();
    b[0] ^= 0x5a;
    f.write_all_at(&b, at).unwrap();
}

#[test]
fn clean_pool_skips_replay_and_unclean_pool_replays() {
    let p = PoolFile::new("replay");
    let fs = p.mkfs_open(8 * MIB);
    assert!(fs.mount_info().was_clean);
    for i in 0..5 {
        fs.mkdir(format!("/d{i}"), 0o755).unwrap();
    }
    let logged = fs.stats().records;
    assert!(logged >= 5, "{logged}");
    let copy = crash_copy(&p, "replay-copy");
    fs.unmount().unwrap();
    let fs = p.open();
    let m = fs.mount_info();
    assert!(m.was_clean);
    assert_eq!(m.replayed, 0, "a clean pool replays nothing");
    drop(fs);
    let fs = copy.open();
    let m = fs.mount_info().clone();
    assert!(!m.was_clean);
    assert_eq!(
        m.replayed, logged,
        "every record since the last checkpoint replays"
    );
    for i in 0..5 {
        assert!(fs.stat(format!("/d{i}")).unwrap().is_dir());
    }
    assert_clean(&fs);
}

#[test]
fn torn_last_record_is_the_end_of_the_log() {
    let p = PoolFile::new("torn");
    let fs = p.mkfs_open(8 * MIB);
    fs.write_file("/a", b"first").unwrap();
    fs.mkdir("/b", 0o755).unwrap();
    let before = crash_copy(&p, "torn-copy");
    fs.mkdir("/last", 0o755).unwrap();
    let after = crash_copy(&p, "torn-after");
    drop(fs);
    // The crash came while the last record was being written: the image is the pool from
    // before that operation, plus the record without its last line (nothing of it applied).
    let recs = records(&after);
    let last = *recs.last().unwrap();
    let mut rec = vec![0u8; last.len as usize];
    let src = std::fs::File::open(after.path()).unwrap();
    src.read_exact_at(&mut rec, last.at).unwrap();
    let n = rec.len();
    rec[n - 64..].fill(0);
    let dst = std::fs::OpenOptions::new()
        .write(true)
        .open(before.path())
        .unwrap();
    dst.write_all_at(&rec, last.at).unwrap();
    drop(dst);
    let fs = before.open();
    let m = fs.mount_info().clone();
    assert!(!m.was_clean);
    assert_eq!(m.replayed, recs.len() as u64 - 1);
    assert_eq!(fs.read_file("/a").unwrap(), b"first");
    assert!(fs.stat("/b").unwrap().is_dir());
    assert_eq!(fs.stat("/last").unwrap_err().errno(), libc::ENOENT);
    assert_clean(&fs);
    // The log goes on from there.
    fs.mkdir("/again", 0o755).unwrap();
    fs.unmount().unwrap();
    let fs = before.open();
    assert!(fs.stat("/again").unwrap().is_dir());
    assert_clean(&fs);
}

#[test]
fn damaged_record_in_the_middle_of_the_log_is_refused() {
    let p = PoolFile::new("middle");
    let fs = p.mkfs_open(8 * MIB);
    for i in 0..4 {
        fs.mkdir(format!("/d{i}"), 0o755).unwrap();
    }
    let copy = crash_copy(&p, "middle-copy");
    drop(fs);
    let recs = records(&copy);
    assert!(recs.len() >= 4, "{recs:?}");
    let victim = recs[1];
    for (what, at) in [
        ("body", victim.at + 40),
        ("checksum", victim.at + 12),
        ("magic", victim.at),
    ] {
        let image = crash_copy(&copy, "middle-image");
        flip(&image, at);
        let before = std::fs::read(image.path()).unwrap();
        let e = match Fs::open(image.path(), &Options::default()) {
            Ok(_) => panic!("a log damaged in its {what} must not mount"),
            Err(e) => e,
        };
        assert_eq!(e.errno(), libc::EUCLEAN, "{what}: {e}");
        let msg = e.to_string();
        assert!(msg.contains("operation log"), "{what}: {msg}");
        assert!(
            msg.contains(&format!("record {}", victim.seq)),
            "{what}: {msg}"
        );
        assert!(
            std::fs::read(image.path()).unwrap() == before,
            "{what}: a refused recovery must leave the pool as it was"
        );
    }
    // The undamaged image still recovers everything.
    let fs = copy.open();
    for i in 0..4 {
        assert!(fs.stat(format!("/d{i}")).unwrap().is_dir());
    }
    assert_clean(&fs);
}

/// The environment variable that turns `killed_child` into the helper process.
const CHILD_POOL: &str = "ENGRAM_RECOVERY_CHILD_POOL";

/// Not a test on its own: run by `process_killed_mid_operations_recovers` as a child
/// process, it works on the pool until it is killed.
#[test]
fn killed_child() {
    let Ok(path) = std::env::var(CHILD_POOL) else {
        return;
    };
    let fs = Fs::open(&path, &Options::default()).unwrap();
    // An unlinked file still open: an orphan when the process dies.
    let orphan = fs
        .open_file(
            "/orphan",
            &OpenOptions::new().read(true).write(true).create(true),
        )
        .unwrap();
    orphan.write_at(&pattern(9, 100_000), 0).unwrap();
    fs.unlink("/orphan").unwrap();
    fs.mkdir("/work", 0o755).unwrap();
    let mut i = 0u64;
    loop {
        let name = format!("/work/f{}", i % 50);
        fs.write_file(&name, &pattern(i, (i as usize * 997) % 20_000))
            .unwrap();
        if i.is_multiple_of(7) {
            let _ = fs.unlink(format!("/work/f{}", (i + 25) % 50));
        }
        if i.is_multiple_of(11) {
            let _ = fs.rename(&name, format!("/work/r{}", i % 13));
        }
        if i == 200 {
            println!("ENGRAM-READY");
        }
        i += 1;
    }
}

#[test]
fn process_killed_mid_operations_recovers() {
    let p = PoolFile::new("killed");
    Fs::mkfs(p.path(), 16 * MIB).unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "killed_child", "--nocapture", "--test-threads=1"])
        .env(CHILD_POOL, p.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let out = child.stdout.take().unwrap();
    let ready = BufReader::new(out)
        .lines()
        .map_while(|l| l.ok())
        .any(|l| l.contains("ENGRAM-READY"));
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(ready, "the helper process died before it was ready");
    let fs = p.open();
    let m = fs.mount_info().clone();
    assert!(!m.was_clean);
    assert!(m.orphans_freed >= 1, "{m:?}");
    assert!(m.problems.is_empty(), "{:?}", m.problems);
    assert_clean(&fs);
    // Every file left is whole: one of the contents the helper wrote.
    for e in fs.read_dir("/work").unwrap() {
        let e = e.unwrap();
        if e.name_str() == "." || e.name_str() == ".." {
            continue;
        }
        let data = fs.read_file(format!("/work/{}", e.name_str())).unwrap();
        assert!(
            (0..100_000u64).any(
                |i| data.len() == (i as usize * 997) % 20_000 && data == pattern(i, data.len())
            ),
            "a torn file: {} bytes",
            data.len()
        );
    }
    fs.unmount().unwrap();
    let fs = p.open();
    assert!(fs.mount_info().was_clean);
    assert_clean(&fs);
}

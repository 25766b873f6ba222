//! What a client that dies holds comes back while the daemon runs, and writes from several
//! processes to one range are all-or-nothing.

use super::{Daemon, check_clean, spawn_worker};
use engram_core::{Fs, OpenOptions};

/// Worker role "hold-and-hang": writes a file, keeps it open after unlinking it, takes a
/// page reservation (a write elsewhere), says so by creating /ready, then waits forever.
pub fn hold_and_hang(fs: &Fs) {
    fs.write_file("/victim", &[3u8; 1 << 20]).unwrap();
    let f = fs
        .open_file("/victim", &OpenOptions::new().read(true).write(true))
        .unwrap();
    fs.unlink("/victim").unwrap();
    f.write_at(b"still mine", 100).unwrap();
    fs.write_file("/ready", b"").unwrap();
    loop {
        std::thread::park();
    }
}

/// Wait for `cond` without a time limit on the assertion itself: the daemon notices a dead
/// client asynchronously. Gives up (and lets the caller's assertion fail) after a minute.
pub fn eventually(mut cond: impl FnMut() -> bool) {
    for _ in 0..6000 {
        if cond() {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

#[test]
fn a_killed_clients_pages_and_unlinked_open_file_come_back() {
    let mut d = Daemon::start("reclaim", 64 << 20);
    let fs = Fs::connect(&d.socket).unwrap();
    fs.write_file("/mine", b"x").unwrap();
    let before = fs.statfs().unwrap();
    let mut child = spawn_worker("hold-and-hang", &d.socket, "");
    eventually(|| fs.stat("/ready").is_ok());
    fs.unlink("/ready").unwrap();
    // The worker's close of /ready is posted: until the server has taken it, the unlinked
    // /ready is still open and keeps its inode.
    eventually(|| fs.statfs().unwrap().files_free + 1 == before.files_free);
    let during = fs.statfs().unwrap();
    // 256 pages of the unlinked file plus a reservation batch.
    assert!(
        during.blocks_free + 256 < before.blocks_free,
        "{during:?} vs {before:?}"
    );
    assert_eq!(
        during.files_free + 1,
        before.files_free,
        "the unlinked file is alive"
    );
    // SAFETY: sending SIGKILL to our own child process.
    unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
    assert!(!child.wait().unwrap().success());
    eventually(|| fs.statfs().unwrap().blocks_free == before.blocks_free);
    let after = fs.statfs().unwrap();
    assert_eq!(after.blocks_free, before.blocks_free, "pages came back");
    assert_eq!(
        after.files_free, before.files_free,
        "the unlinked inode was freed"
    );
    let r = fs.fsck(false).unwrap();
    assert!(r.is_clean(), "{:?}", r.problems);
    drop(fs);
    d.stop();
    check_clean(&d.pool);
}

const REGION: usize = 128 << 10;
const WRITES: usize = 200;

/// Worker role "overlap-writer": writer "0" writes [0, 96K) and writer "1" writes
/// [32K, 128K) of /overlap, WRITES times, each write one byte value (odd for writer 0, even
/// for writer 1) that changes every time.
pub fn overlap_writer(fs: &Fs, id: &str) {
    let f = fs
        .open_file("/overlap", &OpenOptions::new().write(true))
        .unwrap();
    let (off, parity) = if id == "0" { (0, 1) } else { (32 << 10, 2) };
    for g in 0..WRITES {
        let b = ((g * 2) % 240 + parity) as u8;
        f.write_at(&[b; 96 << 10], off as u64).unwrap();
    }
}

/// The file's three parts: [0, 32K) only writer 0 writes, [96K, 128K) only writer 1, and
/// the middle both: each must be uniform, and the middle equal to one of the writes it
/// came from (the one that committed last).
fn check_overlap(data: &[u8]) {
    assert_eq!(data.len(), REGION);
    let (a, mid, b) = (
        &data[..32 << 10],
        &data[32 << 10..96 << 10],
        &data[96 << 10..],
    );
    for part in [a, mid, b] {
        assert!(part.iter().all(|&x| x == part[0]), "a torn write");
    }
    assert!(
        mid[0] == a[0] || mid[0] == b[0],
        "the overlap is from neither write: {} {} {}",
        a[0],
        mid[0],
        b[0]
    );
}

#[test]
fn overlapping_writes_from_two_processes_are_all_or_nothing() {
    let mut d = Daemon::start("overlap", 64 << 20);
    let fs = Fs::connect(&d.socket).unwrap();
    fs.write_file("/overlap", &[0u8; REGION]).unwrap();
    let mut kids: Vec<_> = (0..2)
        .map(|i| spawn_worker("overlap-writer", &d.socket, &i.to_string()))
        .collect();
    let mut running = true;
    while running {
        check_overlap(&fs.read_file("/overlap").unwrap());
        running = kids.iter_mut().any(|k| k.try_wait().unwrap().is_none());
    }
    for mut k in kids {
        assert!(k.wait().unwrap().success());
    }
    let data = fs.read_file("/overlap").unwrap();
    check_overlap(&data);
    // Both writers finished: the last values of both are there.
    let last = |parity: usize| (((WRITES - 1) * 2) % 240 + parity) as u8;
    assert_eq!(data[0], last(1));
    assert_eq!(data[REGION - 1], last(2));
    let r = fs.fsck(false).unwrap();
    assert!(r.is_clean(), "{:?}", r.problems);
    drop(fs);
    d.stop();
    check_clean(&d.pool);
}

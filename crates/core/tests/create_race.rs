//! O_CREAT racing with another thread that makes the same name a directory or a symlink:
//! whatever the interleaving, an open never hands out a directory or a symlink inode as a
//! file, and its errors are the ones Linux gives (EISDIR, or ELOOP with O_NOFOLLOW).

mod common;

use common::{assert_clean, new_fs};
use engram_core::OpenOptions;
use std::sync::atomic::{AtomicBool, Ordering};

const ROUNDS: usize = 3000;

/// Stops the other thread when dropped, also when an assertion fails, so that the scope
/// can join it.
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

#[test]
fn o_creat_racing_with_mkdir_and_symlink_opens_only_regular_files() {
    let (_p, fs) = new_fs("creat-race", 16);
    fs.write_file("/target", b"target").unwrap();
    let stop = AtomicBool::new(false);
    let mut opened = 0usize;
    std::thread::scope(|s| {
        let other = fs.clone();
        let stop = &stop;
        s.spawn(move || {
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                if i.is_multiple_of(2) {
                    if other.mkdir("/x", 0o755).is_ok() {
                        let _ = other.rmdir("/x");
                    }
                } else if other.symlink("target", "/x").is_ok() {
                    let _ = other.unlink("/x");
                }
                // A regular file left by the opener makes room for the next round.
                if other.lstat("/x").is_ok_and(|m| m.is_file()) {
                    let _ = other.unlink("/x");
                }
                i += 1;
            }
        });
        let _stop = StopOnDrop(stop);
        // Until ROUNDS are done and at least one open has succeeded: on a loaded machine the
        // other thread can sit descheduled with /x a directory for a whole batch of rounds.
        let mut round = 0;
        while round < ROUNDS || (opened == 0 && round < ROUNDS * 50) {
            round += 1;
            let nofollow = round.is_multiple_of(3);
            let opts = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .nofollow(nofollow);
            match fs.open_file("/x", &opts) {
                Ok(f) => {
                    let m = f.metadata().unwrap();
                    assert!(
                        m.is_file(),
                        "round {round}: O_CREAT opened a non-file (mode {:o})",
                        m.mode
                    );
                    opened += 1;
                }
                Err(e) => {
                    let ok = [libc::EISDIR, libc::ELOOP];
                    assert!(
                        ok.contains(&e.errno()) && (e.errno() != libc::ELOOP || nofollow),
                        "round {round} (nofollow {nofollow}): unexpected {e}"
                    );
                    // Let the other thread move on from the name it holds.
                    std::thread::yield_now();
                }
            }
        }
    });
    assert!(opened > 0);
    assert_eq!(fs.read_file("/target").unwrap(), b"target");
    assert_clean(&fs);
}

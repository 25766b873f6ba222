//! Reclamation end to end: a page that a pinned reader may still hold is not handed out
//! again. Integration tests cannot reach this: a file read holds its pin only for the read,
//! and the sequence counter makes such a read retry anyway, so a test through the public
//! API passes even with reclamation ignoring the pins.

use super::{Fs, Options};
use crate::OpenOptions;
use crate::layout::PAGE;

#[test]
fn pages_a_pinned_reader_may_hold_are_not_reused() {
    /// Removes the pool file however the test ends.
    struct Remove(std::path::PathBuf);
    impl Drop for Remove {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }
    let path = std::env::temp_dir().join(format!("engram-epoch-unit-{}.pool", std::process::id()));
    let _remove = Remove(path.clone());
    Fs::mkfs(&path, 16 << 20).unwrap();
    let fs = Fs::open(&path, &Options::default()).unwrap();
    // A file of a quarter of the free pages: each overwrite of it needs as many fresh pages
    // and retires its old ones.
    let pages = fs.statfs().unwrap().blocks_free / 4;
    let data = vec![0x5au8; (pages * PAGE) as usize];
    let f = fs
        .open_file("/f", &OpenOptions::new().write(true).create(true))
        .unwrap();
    f.write_at(&data, 0).unwrap();

    let pin = fs.core.shared.epochs.pin();
    let refused = (0..8).any(|_| match f.write_at(&data, 0) {
        Ok(n) => {
            assert_eq!(n, data.len());
            false
        }
        Err(e) => {
            assert_eq!(e.errno(), libc::ENOSPC, "{e}");
            true
        }
    });
    assert!(
        refused,
        "eight overwrites of a quarter of the pool while a reader was pinned: pages retired \
         after the pin were handed out again"
    );
    drop(pin);
    // Unpinned, the retired pages come free.
    for _ in 0..8 {
        assert_eq!(f.write_at(&data, 0).unwrap(), data.len());
    }
}

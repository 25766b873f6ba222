//! A bit per inode, set and cleared by the server and read, without a call, by every
//! client's write path. In the daemon the bits live in the common region, which clients map
//! read-only. Two sets:
//!
//! - **mapped**: some client maps the inode shared (`Request::Mapped`). A front end that
//!   emulates shared mappings with a backing file (the shim) needs it: a write by a process
//!   that does not map the file must still reach the mappings of those that do.
//! - **several writers**: more than one client holds the inode open for writing. Only a
//!   client alone in holding it so writes in place beyond the end of file (architecture.md,
//!   "Appends in place through the daemon").

use crate::epoch::Atomics;
use std::sync::atomic::Ordering;

pub struct InodeBits {
    bits: Atomics,
}

impl InodeBits {
    /// Words of the set for a pool of `inodes` inodes.
    pub fn words(inodes: u64) -> usize {
        inodes.div_ceil(64) as usize
    }

    /// A set in this process's memory (a pool opened in-process).
    pub fn new(inodes: u64) -> InodeBits {
        InodeBits {
            bits: Atomics::zeroed(Self::words(inodes)),
        }
    }

    /// A set in shared memory, `words(inodes)` words.
    pub fn shared(bits: Atomics) -> InodeBits {
        InodeBits { bits }
    }

    /// Whether `ino`'s bit is set. Acquire: a writer that sees the bit after a reply also
    /// sees everything the server did before setting it.
    pub fn contains(&self, ino: u64) -> bool {
        self.bits
            .get((ino / 64) as usize)
            .is_some_and(|w| w.load(Ordering::Acquire) & (1 << (ino % 64)) != 0)
    }

    /// Set or clear `ino`'s bit (the server only).
    pub(crate) fn set(&self, ino: u64, on: bool) {
        let Some(w) = self.bits.get((ino / 64) as usize) else {
            return;
        };
        let bit = 1u64 << (ino % 64);
        if on {
            w.fetch_or(bit, Ordering::SeqCst);
        } else {
            w.fetch_and(!bit, Ordering::SeqCst);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bits_are_per_inode_and_out_of_range_is_never_mapped() {
        let s = InodeBits::new(130);
        assert_eq!(InodeBits::words(130), 3);
        for ino in [1, 63, 64, 129] {
            assert!(!s.contains(ino));
            s.set(ino, true);
            assert!(s.contains(ino));
        }
        assert!(!s.contains(2) && !s.contains(65) && !s.contains(128));
        s.set(64, false);
        assert!(!s.contains(64) && s.contains(63));
        s.set(1 << 20, true);
        assert!(!s.contains(1 << 20));
    }
}

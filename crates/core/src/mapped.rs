//! Which inodes some process maps shared: one bit per inode, set by the server while any
//! client holds such a mapping (`Request::Mapped`) and read, without a call, by every
//! client's write path. A front end that emulates shared mappings with a backing file
//! (the shim) needs it: a write by a process that does not map the file must still reach
//! the mappings of those that do. In the daemon the bits live in the common region, which
//! clients map read-only.

use crate::epoch::Atomics;
use std::sync::atomic::Ordering;

pub struct MappedSet {
    bits: Atomics,
}

impl MappedSet {
    /// Words of the set for a pool of `inodes` inodes.
    pub fn words(inodes: u64) -> usize {
        inodes.div_ceil(64) as usize
    }

    /// A set in this process's memory (a pool opened in-process).
    pub fn new(inodes: u64) -> MappedSet {
        MappedSet {
            bits: Atomics::zeroed(Self::words(inodes)),
        }
    }

    /// A set in shared memory, `words(inodes)` words.
    pub fn shared(bits: Atomics) -> MappedSet {
        MappedSet { bits }
    }

    /// Whether some client maps `ino` shared. Acquire: a writer that sees the bit after its
    /// commit's reply also sees everything the server did before setting it.
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
        let s = MappedSet::new(130);
        assert_eq!(MappedSet::words(130), 3);
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

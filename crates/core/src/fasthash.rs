//! A fast hasher for the maps on the request path, keyed by inode numbers, client ids and
//! page offsets. std's SipHash guards against keys chosen to collide; these keys are
//! assigned by the server (inode numbers and pages come from its allocator, client ids from
//! its counter), so a multiply-rotate hash (the one rustc uses) is safe here and costs a few
//! instructions instead of about a hundred per lookup.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

const K: u64 = 0x517c_c1b7_2722_0a95;

#[derive(Clone, Copy, Default)]
pub struct FastHasher(u64);

impl FastHasher {
    #[inline]
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(K);
    }
}

impl Hasher for FastHasher {
    #[inline]
    fn finish(&self) -> u64 {
        // The product's low bits depend only on the key's low bits, and page offsets have
        // twelve zero bits there: rotate the well-mixed high bits down, where hashbrown
        // picks the bucket.
        self.0.rotate_left(26)
    }

    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            self.add(u64::from_le_bytes(c.try_into().unwrap()));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            // The tail zero-padded to a word, built in registers: copied into a buffer and
            // loaded back whole, the load waited for the copy's narrower stores to reach the
            // cache (a path's hash did this on every cached walk).
            let word = match bytes.len().checked_sub(8) {
                // The last eight bytes (overlapping the chunks), shifted down to the tail.
                Some(at) => {
                    u64::from_le_bytes(bytes[at..].try_into().unwrap()) >> (8 * (8 - rest.len()))
                }
                None => rest.iter().rev().fold(0, |w, &b| (w << 8) | u64::from(b)),
            };
            self.add(word);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.add(n);
    }

    fn write_u32(&mut self, n: u32) {
        self.add(n as u64);
    }

    fn write_usize(&mut self, n: usize) {
        self.add(n as u64);
    }
}

pub type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<FastHasher>>;
pub type FastSet<K> = HashSet<K, BuildHasherDefault<FastHasher>>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_work_and_neighbouring_keys_spread() {
        let mut m: FastMap<u64, u64> = FastMap::default();
        for i in 0..10_000 {
            m.insert(i, i * 2);
        }
        assert!((0..10_000).all(|i| m[&i] == i * 2));
        // hashbrown picks buckets from the low bits and tags from the top 7: both must vary.
        let hash = |k: u64| {
            let mut h = FastHasher::default();
            h.write_u64(k);
            h.finish()
        };
        let tops: FastSet<u64> = (0..1000).map(|k| hash(k) >> 57).collect();
        let lows: FastSet<u64> = (0..1000).map(|k| hash(k) & 1023).collect();
        assert!(
            tops.len() > 100 && lows.len() > 500,
            "{} {}",
            tops.len(),
            lows.len()
        );
    }

    #[test]
    fn bytes_hash_as_zero_padded_words() {
        let data: Vec<u8> = (1..=40).collect();
        for len in 0..=data.len() {
            let bytes = &data[..len];
            let mut want = FastHasher::default();
            for c in bytes.chunks(8) {
                let mut w = [0u8; 8];
                w[..c.len()].copy_from_slice(c);
                want.add(u64::from_le_bytes(w));
            }
            let mut got = FastHasher::default();
            got.write(bytes);
            assert_eq!(got.finish(), want.finish(), "length {len}");
        }
    }
}

//! Where a large directory's names were last found: for each of a few large directories, a
//! DRAM table from the top bits of a name's hash to the leaf page that last held that part
//! of the hash space.
//!
//! Finding a name's leaf reads an inner node's slot, then the leaf's header line, each a miss
//! once a directory's trie outgrows the caches (about 0.15 µs apiece at a million entries).
//! With the leaf known beforehand, its header is fetched while the inner node is read, so
//! the two misses overlap. A hint is only ever a prefetch: a stale one (the leaf split since,
//! its page reused) costs one wasted line fetch, and the trie walk stays the only answer.

use super::untag;

/// Directories smaller than this keep their whole trie in the caches: no table.
const MIN_ENTRIES: u64 = 4096;
/// One table slot per 64 entries, about one per leaf (a leaf holds up to 63): 2^14 slots
/// (64 KiB) at a million entries. A table four times larger names the right leaf more often
/// but misses the caches itself; 64, 128 and 16 measured alike within noise, 64 best.
const ENTRIES_PER_SLOT: u64 = 64;
const MAX_BITS: u32 = 18;
/// Tables kept at once; the one used least recently makes way (at most 4 MiB in all).
const MAX_TABLES: usize = 4;

struct Table {
    ino: u64,
    bits: u32,
    /// Leaf page numbers (offset / 4096); 0 for none known.
    leaves: Box<[u32]>,
    last_used: u64,
}

impl Table {
    fn slot(&self, hash: u64) -> usize {
        // Name hashes have 63 bits.
        (hash >> (63 - self.bits)) as usize
    }
}

#[derive(Default)]
pub struct Hints {
    tables: Vec<Table>,
    clock: u64,
}

fn bits_for(entries: u64) -> u32 {
    (entries / ENTRIES_PER_SLOT)
        .next_power_of_two()
        .trailing_zeros()
        .min(MAX_BITS)
}

impl Hints {
    /// The leaf that last held names near `hash` in directory `ino`, if one is known.
    pub fn leaf(&mut self, ino: u64, hash: u64) -> Option<u64> {
        self.clock += 1;
        let clock = self.clock;
        let t = self.tables.iter_mut().find(|t| t.ino == ino)?;
        t.last_used = clock;
        let page = t.leaves[t.slot(hash)];
        (page != 0).then_some(u64::from(page) * 4096)
    }

    /// Note that `hash` was found to belong to `leaf` (a tagged or untagged page offset) in
    /// directory `ino`, which holds about `entries` names.
    pub fn learn(&mut self, ino: u64, entries: u64, hash: u64, leaf: u64) {
        if entries < MIN_ENTRIES {
            return;
        }
        let Ok(page) = u32::try_from(untag(leaf) / 4096) else {
            return;
        };
        let bits = bits_for(entries);
        let at = match self.tables.iter().position(|t| t.ino == ino) {
            // Grown well past its table: a larger one (the hints start over).
            Some(i) if self.tables[i].bits < bits => {
                self.tables[i] = new_table(ino, bits, self.clock);
                i
            }
            Some(i) => i,
            None if self.tables.len() < MAX_TABLES => {
                self.tables.push(new_table(ino, bits, self.clock));
                self.tables.len() - 1
            }
            None => {
                let (i, _) = self
                    .tables
                    .iter()
                    .enumerate()
                    .min_by_key(|(_, t)| t.last_used)
                    .expect("MAX_TABLES > 0");
                self.tables[i] = new_table(ino, bits, self.clock);
                i
            }
        };
        let t = &mut self.tables[at];
        let slot = t.slot(hash);
        t.leaves[slot] = page;
    }

    /// Forget directory `ino` (removed: its number may come back as another directory).
    pub fn forget(&mut self, ino: u64) {
        self.tables.retain(|t| t.ino != ino);
    }
}

fn new_table(ino: u64, bits: u32, clock: u64) -> Table {
    Table {
        ino,
        bits,
        leaves: vec![0; 1 << bits].into_boxed_slice(),
        last_used: clock,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_directories_get_no_table() {
        let mut h = Hints::default();
        h.learn(5, MIN_ENTRIES - 1, 1 << 40, 0x10_0001);
        assert_eq!(h.leaf(5, 1 << 40), None);
    }

    #[test]
    fn a_learned_leaf_is_hinted_for_nearby_hashes_only() {
        let mut h = Hints::default();
        let entries = 1 << 20;
        let hash = 0x2bcd_ef01_2345_6789;
        h.learn(7, entries, hash, 0x10_0001);
        assert_eq!(h.leaf(7, hash), Some(0x10_0000), "the tag is dropped");
        assert_eq!(h.leaf(7, hash ^ 1), Some(0x10_0000), "same top bits");
        assert_eq!(h.leaf(7, hash ^ (1 << 62)), None);
        assert_eq!(h.leaf(8, hash), None, "another directory");
    }

    #[test]
    fn growing_past_the_table_starts_a_larger_one() {
        let mut h = Hints::default();
        let hash = 0x4000_0000_0000_0000;
        h.learn(7, MIN_ENTRIES, hash, 0x20_0000);
        assert_eq!(h.tables[0].bits, bits_for(MIN_ENTRIES));
        h.learn(7, MIN_ENTRIES * 64, hash ^ (1 << 61), 0x30_0000);
        assert_eq!(h.tables[0].bits, bits_for(MIN_ENTRIES * 64));
        assert_eq!(
            h.leaf(7, hash),
            None,
            "the old hints went with the old table"
        );
        assert_eq!(h.leaf(7, hash ^ (1 << 61)), Some(0x30_0000));
        assert!(bits_for(u64::MAX) <= MAX_BITS);
    }

    #[test]
    fn the_table_used_least_recently_makes_way() {
        let mut h = Hints::default();
        let hash = 1 << 50;
        for ino in 1..=MAX_TABLES as u64 {
            h.learn(ino, MIN_ENTRIES, hash, ino << 12);
        }
        // Directory 1 used again: directory 2 is now the least recently used.
        assert!(h.leaf(1, hash).is_some());
        h.learn(99, MIN_ENTRIES, hash, 99 << 12);
        assert_eq!(h.tables.len(), MAX_TABLES);
        assert_eq!(h.leaf(2, hash), None);
        assert_eq!(h.leaf(1, hash), Some(1 << 12));
        assert_eq!(h.leaf(99, hash), Some(99 << 12));
        h.forget(99);
        assert_eq!(h.leaf(99, hash), None);
    }
}

//! Directories: a hash trie of 4 KiB pages with 64-byte, cache-line aligned dentries.
//!
//! The inode's root word is 0 (empty), a leaf page tagged with bit 0, or an inner node page.
//! An inner node at depth d has 512 slots indexed by 9 bits of the name's 63-bit hash (most
//! significant first, so trie order is hash order and readdir cursors are hashes). A leaf may
//! be referenced by a contiguous range of slots of its parent; splitting halves the range, or
//! pushes a new node one level down once the range is a single slot.
//!
//! Leaf page: line 0 holds one fingerprint byte per slot (0 free, 0xFF continuation of a long
//! name, else 1..=0xFE derived from the hash); lines 1..=63 hold dentries:
//! hash u64 | ino u64 | name_len u8 | file type u8 | name[46], and continuation lines hold 64
//! more name bytes each. A dentry line is written while unpublished and never changed after;
//! publishing and removing are single logged fingerprint stores.

use crate::error::{Error, Result};
use crate::layout::{Geometry, PAGE};
use crate::oplog::Entry;
use engram_pmem::Pool;

mod hints;
mod split;
mod traverse;
pub use hints::Hints;
pub use split::{Split, init_first_leaf, split};
pub use traverse::{next_batch, walk};

pub const LEAF_TAG: u64 = 1;
pub const SLOTS: u64 = 63;
const FANOUT: u64 = 512;
const BITS: u32 = 9;
pub const MAX_DEPTH: u32 = 6;
const INLINE_NAME: usize = 46;
const FP_CONT: u8 = 0xFF;
pub const NAME_MAX: usize = 255;

/// 63-bit FNV-1a with a splitmix finaliser; never 0, 1 or 2 (readdir cursors for the start, "." and "..").
pub fn name_hash(name: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in name {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h ^= h >> 30;
    h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h ^= h >> 27;
    h = h.wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^= h >> 31;
    (h >> 1).max(3)
}

fn fingerprint(hash: u64) -> u8 {
    1 + (hash % 254) as u8
}

fn slot_index(hash: u64, depth: u32) -> u64 {
    (hash >> (63 - BITS * (depth + 1))) & (FANOUT - 1)
}

pub fn slots_for(name_len: usize) -> u64 {
    1 + name_len.saturating_sub(INLINE_NAME).div_ceil(64) as u64
}

fn is_leaf(ptr: u64) -> bool {
    ptr & LEAF_TAG != 0
}

fn untag(ptr: u64) -> u64 {
    ptr & !LEAF_TAG
}

/// One directory entry as read from a leaf.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dentry {
    pub hash: u64,
    pub ino: u64,
    pub ftype: u8,
    pub name: Vec<u8>,
    pub leaf: u64,
    pub slot: u64,
}

impl Dentry {
    pub fn nslots(&self) -> u64 {
        slots_for(self.name.len())
    }
}

fn check_meta(geo: &Geometry, ptr: u64) -> Result<u64> {
    let p = untag(ptr);
    if geo.is_meta_page(p) {
        Ok(p)
    } else {
        Err(Error::corrupt(format!(
            "directory points outside the metadata area ({ptr:#x})"
        )))
    }
}

/// Read the dentry at `slot` if its fingerprint says one starts there. Garbage (possible
/// while racing the server, or in a corrupt pool) is reported as None, never a panic.
fn read_slot(pool: &Pool, leaf: u64, slot: u64) -> Option<Dentry> {
    let fp = pool.load_u8(leaf + slot - 1);
    if fp == 0 || fp == FP_CONT {
        return None;
    }
    let line = pool.slice(leaf + slot * 64, 64);
    let hash = u64::from_le_bytes(line[0..8].try_into().unwrap());
    let ino = u64::from_le_bytes(line[8..16].try_into().unwrap());
    let len = line[16] as usize;
    let ftype = line[17];
    if len == 0 || slot + slots_for(len) - 1 > SLOTS {
        return None;
    }
    let mut name = Vec::with_capacity(len);
    name.extend_from_slice(&line[18..18 + len.min(INLINE_NAME)]);
    if len > INLINE_NAME {
        name.extend_from_slice(pool.slice(leaf + (slot + 1) * 64, (len - INLINE_NAME) as u64));
    }
    Some(Dentry {
        hash,
        ino,
        ftype,
        name,
        leaf,
        slot,
    })
}

fn leaf_entries(pool: &Pool, leaf: u64) -> Vec<Dentry> {
    // A head's continuation slots are skipped even if (in a corrupt page) they look like
    // heads, so the entries never claim more than the page's 63 slots.
    let mut out = Vec::new();
    let mut s = 1;
    while s <= SLOTS {
        match read_slot(pool, leaf, s) {
            Some(d) => {
                s += d.nslots();
                out.push(d);
            }
            None => s += 1,
        }
    }
    out
}

/// Find `name` in the directory whose root word is `root`.
pub fn lookup(pool: &Pool, geo: &Geometry, root: u64, name: &[u8]) -> Result<Option<Dentry>> {
    Ok(match find_slot(pool, geo, root, name)? {
        Some((leaf, _, slot)) => read_slot(pool, leaf, slot),
        None => None,
    })
}

/// Inode number and file type of `name`, compared in place (the path-walk fast path: no
/// allocation).
pub fn lookup_ino(
    pool: &Pool,
    geo: &Geometry,
    root: u64,
    name: &[u8],
) -> Result<Option<(u64, u8)>> {
    Ok(find_slot(pool, geo, root, name)?.map(|(_, page, slot)| {
        let line = &page[(slot * 64) as usize..(slot * 64 + 64) as usize];
        (
            u64::from_le_bytes(line[8..16].try_into().unwrap()),
            line[17],
        )
    }))
}

/// The leaf (its offset and its bytes) and the slot where `name`'s dentry starts.
fn find_slot<'p>(
    pool: &'p Pool,
    geo: &Geometry,
    root: u64,
    name: &[u8],
) -> Result<Option<(u64, &'p [u8], u64)>> {
    find_slot_hashed(pool, geo, root, name, name_hash(name))
}

/// `find_slot` with the name's hash already computed.
fn find_slot_hashed<'p>(
    pool: &'p Pool,
    geo: &Geometry,
    root: u64,
    name: &[u8],
    hash: u64,
) -> Result<Option<(u64, &'p [u8], u64)>> {
    if root == 0 || name.is_empty() || name.len() > NAME_MAX {
        return Ok(None);
    }
    let leaf = find_leaf(pool, geo, root, hash, false)?.leaf;
    let fp = fingerprint(hash);
    // The whole page in one view: one bounds check for the header and the dentries.
    let page = pool.slice(leaf, PAGE);
    // Word by word, so that the usual case (a match among the first slots) stops early.
    for word in 0..8 {
        let mut candidates = header_word_mask(page, word, fp);
        while candidates != 0 {
            let slot = word * 8 + candidates.trailing_zeros() as u64 + 1;
            if slot_holds(page, slot, hash, name) {
                return Ok(Some((leaf, page, slot)));
            }
            candidates &= candidates - 1;
        }
    }
    Ok(None)
}

/// Bit `i` set where the fingerprint of slot `8 * word + i + 1` in `leaf`'s header line
/// equals `fp`: eight header bytes compared at once (SWAR) instead of a byte loop.
fn header_word_mask(header: &[u8], word: u64, fp: u8) -> u64 {
    const LOW7: u64 = 0x7f7f_7f7f_7f7f_7f7f;
    // Multiplying the flags (bit 8j of each byte j) by this gathers them into bits 56..64.
    const GATHER: u64 = 0x0102_0408_1020_4080;
    let at = word as usize * 8;
    let bytes: [u8; 8] = header[at..at + 8].try_into().unwrap();
    let x = u64::from_le_bytes(bytes) ^ u64::from_ne_bytes([fp; 8]);
    // 0x80 in each byte of x that is zero, nothing elsewhere (no carries between bytes).
    let zero = !(((x & LOW7) + LOW7) | x | LOW7);
    let mask = (zero >> 7).wrapping_mul(GATHER) >> 56;
    // Byte 63 of the header line is not a slot.
    if word == 7 { mask & 0x7f } else { mask }
}

/// `header_word_mask` over the whole header line: bit `i` for slot `i + 1`.
fn header_mask(pool: &Pool, leaf: u64, fp: u8) -> u64 {
    let header = pool.slice(leaf, 64);
    (0..8).fold(0, |m, w| m | header_word_mask(header, w, fp) << (w * 8))
}

/// Whether the dentry at `slot` of leaf `page` is `name` (with `hash`), read in place.
fn slot_holds(page: &[u8], slot: u64, hash: u64, name: &[u8]) -> bool {
    let at = (slot * 64) as usize;
    let line = &page[at..at + 64];
    let len = line[16] as usize;
    if u64::from_le_bytes(line[0..8].try_into().unwrap()) != hash
        || len != name.len()
        || slot + slots_for(len) - 1 > SLOTS
    {
        return false;
    }
    let first = len.min(INLINE_NAME);
    line[18..18 + first] == name[..first]
        && (len <= INLINE_NAME || page[at + 64..at + 64 + len - INLINE_NAME] == name[first..])
}

/// Where a leaf hangs: the inode's root word, or a slot range of an inner node.
#[derive(Clone, Copy, Debug)]
pub enum Parent {
    Root,
    Node {
        node: u64,
        depth: u32,
        lo: u64,
        hi: u64,
    },
}

#[derive(Clone, Copy, Debug)]
pub struct LeafLoc {
    pub leaf: u64,
    pub parent: Parent,
}

/// Start fetching the inner node slot that `hash` reads below the root, the first line of
/// a large directory's walk that is likely not cached (the root node is read by every
/// lookup). Only a prefetch: nothing is checked or trusted.
pub fn prefetch_walk(pool: &Pool, geo: &Geometry, root: u64, hash: u64) {
    if root == 0 || is_leaf(root) || !geo.is_meta_page(root) {
        return;
    }
    let child = pool.load_u64(root + slot_index(hash, 0) * 8);
    if child != 0 && !is_leaf(child) && geo.is_meta_page(child) {
        pool.prefetch(child + slot_index(hash, 1) * 8);
    }
}

/// The leaf a hash belongs to. Only a split needs the leaf's slot range in its parent
/// (`with_range`); lookups skip scanning for it.
fn find_leaf(
    pool: &Pool,
    geo: &Geometry,
    root: u64,
    hash: u64,
    with_range: bool,
) -> Result<LeafLoc> {
    let mut ptr = root;
    let mut parent = Parent::Root;
    let mut depth = 0;
    loop {
        let page = check_meta(geo, ptr)?;
        if is_leaf(ptr) {
            return Ok(LeafLoc { leaf: page, parent });
        }
        if depth > MAX_DEPTH {
            return Err(Error::corrupt("directory trie deeper than the hash allows"));
        }
        let idx = slot_index(hash, depth);
        let child = pool.load_u64(page + idx * 8);
        if child == 0 {
            return Err(Error::corrupt("directory trie has an empty slot"));
        }
        let (mut lo, mut hi) = (idx, idx);
        while with_range && lo > 0 && pool.load_u64(page + (lo - 1) * 8) == child {
            lo -= 1;
        }
        while with_range && hi + 1 < FANOUT && pool.load_u64(page + (hi + 1) * 8) == child {
            hi += 1;
        }
        parent = Parent::Node {
            node: page,
            depth,
            lo,
            hi,
        };
        ptr = child;
        depth += 1;
    }
}

// ---------------------------------------------------------------- server side (writers)

/// Lines a dentry of the longest name takes.
const MAX_ENTRY_LINES: usize = 1 + (NAME_MAX - INLINE_NAME).div_ceil(64);

/// Encode a dentry (and its continuation lines) into `lines`, which is `slots_for(len)` lines.
fn encode_dentry(hash: u64, ino: u64, ftype: u8, name: &[u8], lines: &mut [u8]) {
    lines.fill(0);
    lines[0..8].copy_from_slice(&hash.to_le_bytes());
    lines[8..16].copy_from_slice(&ino.to_le_bytes());
    lines[16] = name.len() as u8;
    lines[17] = ftype;
    let first = name.len().min(INLINE_NAME);
    lines[18..18 + first].copy_from_slice(&name[..first]);
    lines[64..64 + name.len() - first].copy_from_slice(&name[first..]);
}

/// The header bytes of an entry of `k` slots: its fingerprint, then continuation marks
/// (the first `k` bytes count).
fn fp_run(hash: u64, k: u64) -> [u8; 8] {
    debug_assert!((1..=8).contains(&k));
    let mut v = [FP_CONT; 8];
    v[0] = fingerprint(hash);
    v
}

/// Where a name's dentry is, as the server needs it to replace or remove the entry (the
/// name is not copied).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Found {
    pub ino: u64,
    pub ftype: u8,
    pub leaf: u64,
    pub slot: u64,
    pub nslots: u64,
}

/// Find `name` (whose `name_hash` is `hash`) in the directory whose root word is `root`, for
/// the server.
pub fn find(
    pool: &Pool,
    geo: &Geometry,
    root: u64,
    name: &[u8],
    hash: u64,
) -> Result<Option<Found>> {
    Ok(find_slot_hashed(pool, geo, root, name, hash)?
        .map(|(leaf, _, slot)| found_at(pool, leaf, slot, name)))
}

fn found_at(pool: &Pool, leaf: u64, slot: u64, name: &[u8]) -> Found {
    let line = pool.slice(leaf + slot * 64, 64);
    Found {
        ino: u64::from_le_bytes(line[8..16].try_into().unwrap()),
        ftype: line[17],
        leaf,
        slot,
        nslots: slots_for(name.len()),
    }
}

/// `find` and `find_space` (with nothing claimed) of one name (whose `name_hash` is `hash`)
/// in a single visit of its leaf: whether the name is there, and where a new entry for it
/// would go.
pub fn probe(
    pool: &Pool,
    geo: &Geometry,
    root: u64,
    name: &[u8],
    hash: u64,
) -> Result<(Option<Found>, Space)> {
    if root == 0 {
        return Ok((None, Space::Empty));
    }
    let loc = find_leaf(pool, geo, root, hash, false)?;
    let mut found = None;
    if !name.is_empty() && name.len() <= NAME_MAX {
        // The candidates in slot order, as `find_slot` tries them.
        let mut candidates = header_mask(pool, loc.leaf, fingerprint(hash));
        let page = pool.slice(loc.leaf, PAGE);
        while candidates != 0 {
            let slot = candidates.trailing_zeros() as u64 + 1;
            if slot_holds(page, slot, hash, name) {
                found = Some(found_at(pool, loc.leaf, slot, name));
                break;
            }
            candidates &= candidates - 1;
        }
    }
    let space = space_in(pool, geo, root, hash, loc.leaf, slots_for(name.len()), &[])?;
    Ok((found, space))
}

/// Where a new entry of `k` slots can go, or which leaf must be split first.
#[derive(Clone, Copy)]
pub enum Space {
    /// The directory has no pages yet.
    Empty,
    Free {
        leaf: u64,
        slot: u64,
    },
    Full(LeafLoc),
}

/// `claimed` lists (leaf, first slot, slots) already taken by entries staged in this operation.
pub fn find_space(
    pool: &Pool,
    geo: &Geometry,
    root: u64,
    name: &[u8],
    claimed: &[(u64, u64, u64)],
) -> Result<Space> {
    if root == 0 {
        return Ok(Space::Empty);
    }
    let hash = name_hash(name);
    let loc = find_leaf(pool, geo, root, hash, false)?;
    space_in(
        pool,
        geo,
        root,
        hash,
        loc.leaf,
        slots_for(name.len()),
        claimed,
    )
}

/// Room for an entry of `k` slots in `leaf`, the leaf of `hash` in the trie at `root`.
fn space_in(
    pool: &Pool,
    geo: &Geometry,
    root: u64,
    hash: u64,
    leaf: u64,
    k: u64,
    claimed: &[(u64, u64, u64)],
) -> Result<Space> {
    let mut free = header_mask(pool, leaf, 0);
    for &(l, s, n) in claimed {
        if l == leaf && (1..=SLOTS).contains(&s) {
            free &= !(((1u64 << n.min(SLOTS)) - 1) << (s - 1));
        }
    }
    // Bit i survives where slots i+1 ..= i+k are all free.
    let mut run = free;
    for shift in 1..k {
        run &= free >> shift;
    }
    if run != 0 {
        return Ok(Space::Free {
            leaf,
            slot: run.trailing_zeros() as u64 + 1,
        });
    }
    Ok(Space::Full(find_leaf(pool, geo, root, hash, true)?))
}

/// Write an unpublished dentry into free slots of a reachable leaf (streamed, not fenced:
/// the caller fences before it publishes the entry) and return the logged store that
/// publishes it.
pub fn stage_entry(pool: &Pool, leaf: u64, slot: u64, name: &[u8], ino: u64, ftype: u8) -> Entry {
    let hash = name_hash(name);
    let k = slots_for(name.len());
    let mut buf = [0u8; MAX_ENTRY_LINES * 64];
    let lines = &mut buf[..(k * 64) as usize];
    encode_dentry(hash, ino, ftype, name, lines);
    pool.write_lines_nt(leaf + slot * 64, lines);
    Entry::short(leaf + slot - 1, &fp_run(hash, k)[..k as usize])
}

/// The logged store that removes a published entry.
pub fn remove_entry(d: &Found) -> Entry {
    Entry::short(d.leaf + d.slot - 1, &[0; 8][..d.nslots as usize])
}

#[cfg(test)]
mod tests {
    use super::split::{leaf_image, split_images};
    use super::*;

    #[test]
    fn hashes_avoid_cursor_values_and_spread() {
        assert!(name_hash(b"") >= 3);
        assert_ne!(name_hash(b"a"), name_hash(b"b"));
        assert_eq!(slots_for(1), 1);
        assert_eq!(slots_for(46), 1);
        assert_eq!(slots_for(47), 2);
        assert_eq!(slots_for(255), 5);
    }

    #[test]
    fn header_mask_matches_a_byte_by_byte_scan() {
        let pool = Pool::anonymous(1 << 20).unwrap();
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for round in 0..200 {
            let mut line = [0u8; 64];
            for b in line.iter_mut() {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                // Few distinct values, so that matches, zeros and 0x80/0xFF bytes abound.
                *b = [0u8, 1, 0x7f, 0x80, 0xfe, 0xff, (x >> 8) as u8][(x % 7) as usize];
            }
            pool.write(0, &line);
            for fp in [0u8, 1, 0x7f, 0x80, 0xfe, 0xff, round as u8] {
                let want = (0..SLOTS as usize)
                    .filter(|&i| line[i] == fp)
                    .fold(0u64, |m, i| m | 1 << i);
                assert_eq!(header_mask(&pool, 0, fp), want, "fp {fp:#x} line {line:?}");
            }
        }
    }

    #[test]
    fn split_images_match_decoded_and_encoded_entries() {
        let pool = Pool::anonymous(1 << 20).unwrap();
        let leaf = 0;
        // Names of 1 to 4 slots, until the leaf is full.
        let mut slot = 1;
        let mut i = 0u64;
        loop {
            let name = vec![b'a' + (i % 26) as u8; 1 + (i as usize * 37) % 200];
            let name = [name.as_slice(), &i.to_le_bytes()].concat();
            if slot + slots_for(name.len()) - 1 > SLOTS {
                break;
            }
            let e = stage_entry(&pool, leaf, slot, &name, 100 + i, 8);
            // The entry's line before its publication (stage_entry's contract).
            pool.fence();
            e.apply(&pool);
            slot += slots_for(name.len());
            i += 1;
        }
        let entries = leaf_entries(&pool, leaf);
        assert_eq!(entries.len() as u64, i);
        for (depth, mid) in [(0, 256), (0, 1), (1, 300), (2, 511)] {
            let (a, b): (Vec<&Dentry>, Vec<&Dentry>) = entries
                .iter()
                .partition(|d| slot_index(d.hash, depth) < mid);
            let mut img = vec![0u8; 2 * PAGE as usize];
            let (ia, ib) = img.split_at_mut(PAGE as usize);
            split_images(&pool, leaf, depth, mid, ia, ib);
            assert_eq!(ia, leaf_image(&a).as_slice());
            assert_eq!(ib, leaf_image(&b).as_slice());
        }
    }

    #[test]
    fn dentry_round_trip_long_name() {
        let pool = Pool::anonymous(8 << 20).unwrap();
        let geo = Geometry::for_size(8 << 20).unwrap();
        let leaf = geo.meta_off;
        let name = vec![b'x'; 200];
        init_first_leaf(&pool, leaf, &name, 42, 8);
        let d = lookup(&pool, &geo, leaf | LEAF_TAG, &name)
            .unwrap()
            .unwrap();
        assert_eq!((d.ino, d.ftype, d.name.len()), (42, 8, 200));
        assert!(
            lookup(&pool, &geo, leaf | LEAF_TAG, b"y")
                .unwrap()
                .is_none()
        );
    }
}

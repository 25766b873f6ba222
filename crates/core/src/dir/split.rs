//! Splitting a full directory leaf: its entries copied whole into two fresh leaf pages (and
//! a new inner node when the leaf hangs from a single slot), published by one logged store.

use super::{
    Dentry, FANOUT, FP_CONT, LEAF_TAG, LeafLoc, MAX_DEPTH, Parent, SLOTS, encode_dentry,
    fingerprint, fp_run, name_hash, slot_index, slots_for,
};
use crate::error::{Error, Result};
use crate::layout::PAGE;
use crate::oplog::Entry;
use engram_pmem::Pool;

/// Build a fresh leaf page image holding `entries` packed from slot 1.
pub(super) fn leaf_image(entries: &[&Dentry]) -> Vec<u8> {
    let mut img = vec![0u8; PAGE as usize];
    let mut slot = 1u64;
    for d in entries {
        let k = d.nslots();
        let at = (slot * 64) as usize;
        encode_dentry(
            d.hash,
            d.ino,
            d.ftype,
            &d.name,
            &mut img[at..at + (k * 64) as usize],
        );
        img[(slot - 1) as usize..(slot - 1 + k) as usize]
            .copy_from_slice(&fp_run(d.hash, k)[..k as usize]);
        slot += k;
    }
    img
}

/// Pack the entries of `leaf` into two zeroed leaf images, in slot order: those whose slot
/// index at `depth` is below `mid` into `a`, the others into `b`. Dentry lines never change
/// once written (unused bytes zero), so they are copied whole instead of decoded and
/// encoded again; the pages come out as `leaf_image` would build them. Slots are skipped
/// as `leaf_entries` skips them.
pub(super) fn split_images(
    pool: &Pool,
    leaf: u64,
    depth: u32,
    mid: u64,
    a: &mut [u8],
    b: &mut [u8],
) {
    let page = pool.slice(leaf, PAGE);
    let mut next = [1usize, 1usize];
    let mut s = 1usize;
    while s <= SLOTS as usize {
        let fp = page[s - 1];
        let line = &page[s * 64..s * 64 + 64];
        let len = line[16] as usize;
        let k = slots_for(len) as usize;
        if fp == 0 || fp == FP_CONT || len == 0 || s + k - 1 > SLOTS as usize {
            s += 1;
            continue;
        }
        let hash = u64::from_le_bytes(line[0..8].try_into().unwrap());
        let side = usize::from(slot_index(hash, depth) >= mid);
        let img = if side == 0 { &mut *a } else { &mut *b };
        let at = next[side];
        img[at * 64..(at + k) * 64].copy_from_slice(&page[s * 64..(s + k) * 64]);
        img[at - 1] = fingerprint(hash);
        img[at..at + k - 1].fill(FP_CONT);
        next[side] += k;
        s += k;
    }
}

/// Fill a fresh, unreachable leaf with one entry (for the first entry of a directory).
pub fn init_first_leaf(pool: &Pool, page: u64, name: &[u8], ino: u64, ftype: u8) {
    let d = Dentry {
        hash: name_hash(name),
        ino,
        ftype,
        name: name.to_vec(),
        leaf: 0,
        slot: 0,
    };
    pool.copy_nt(page, &leaf_image(&[&d]));
}

/// A planned split: the fresh pages are written and flushed; `publish` makes them reachable.
pub struct Split {
    pub publish: Vec<Entry>,
    pub new_pages: Vec<u64>,
    pub old_leaf: u64,
}

/// Split the full leaf at `loc` using pages from `alloc_page` (two or three of them).
/// `root_field` is the address of the directory inode's root word.
pub fn split(
    pool: &Pool,
    loc: LeafLoc,
    root_field: u64,
    alloc_page: &mut dyn FnMut() -> Result<u64>,
) -> Result<Split> {
    let mut new_pages = Vec::new();
    let mut take = |new_pages: &mut Vec<u64>| -> Result<u64> {
        let p = alloc_page()?;
        new_pages.push(p);
        Ok(p)
    };
    // Distribute by the slot index at `depth`: below `mid` to A, the rest to B.
    let (depth, lo, hi, new_node) = match loc.parent {
        Parent::Root => (0, 0, FANOUT - 1, true),
        Parent::Node { depth, lo, hi, .. } if lo == hi => {
            if depth + 1 > MAX_DEPTH {
                return Err(Error::with_msg(
                    libc::ENOSPC,
                    "directory hash bucket is full",
                ));
            }
            (depth + 1, 0, FANOUT - 1, true)
        }
        Parent::Node { depth, lo, hi, .. } => (depth, lo, hi, false),
    };
    let mid = (lo + hi).div_ceil(2);
    let leaf_a = take(&mut new_pages)?;
    let leaf_b = take(&mut new_pages)?;
    let mut images = vec![0u8; 2 * PAGE as usize];
    let (a, b) = images.split_at_mut(PAGE as usize);
    split_images(pool, loc.leaf, depth, mid, a, b);
    pool.copy_nt(leaf_a, a);
    pool.copy_nt(leaf_b, b);
    let (ta, tb) = (leaf_a | LEAF_TAG, leaf_b | LEAF_TAG);
    let publish = if new_node {
        let node = take(&mut new_pages)?;
        let mut img = vec![0u8; PAGE as usize];
        for i in 0..FANOUT {
            let v = if i < mid { ta } else { tb };
            img[(i * 8) as usize..(i * 8 + 8) as usize].copy_from_slice(&v.to_le_bytes());
        }
        pool.copy_nt(node, &img);
        let at = match loc.parent {
            Parent::Root => root_field,
            Parent::Node {
                node: parent, lo, ..
            } => parent + lo * 8,
        };
        vec![Entry::set64(at, node)]
    } else {
        let Parent::Node { node, .. } = loc.parent else {
            unreachable!()
        };
        vec![
            Entry::Seq {
                off: node + lo * 8,
                count: mid - lo,
                start: ta,
                step: 0,
            },
            Entry::Seq {
                off: node + mid * 8,
                count: hi + 1 - mid,
                start: tb,
                step: 0,
            },
        ]
    };
    Ok(Split {
        publish,
        new_pages,
        old_leaf: loc.leaf,
    })
}

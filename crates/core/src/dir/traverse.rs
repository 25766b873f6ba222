//! Traversals of a whole directory trie: readdir's batches in hash order, and the visit of
//! every page and entry (fsck, removal of a directory's pages).

use super::{Dentry, FANOUT, MAX_DEPTH, check_meta, is_leaf, leaf_entries, slot_index};
use crate::error::{Error, Result};
use crate::layout::Geometry;
use engram_pmem::Pool;

/// Entries with a hash above `cursor`, from the first leaf in trie order that has any,
/// sorted by hash (entries with equal hashes always come in the same batch).
pub fn next_batch(pool: &Pool, geo: &Geometry, root: u64, cursor: u64) -> Result<Vec<Dentry>> {
    if root == 0 {
        return Ok(Vec::new());
    }
    Ok(visit(pool, geo, root, 0, cursor, true)?.unwrap_or_default())
}

fn visit(
    pool: &Pool,
    geo: &Geometry,
    ptr: u64,
    depth: u32,
    cursor: u64,
    on_cursor_path: bool,
) -> Result<Option<Vec<Dentry>>> {
    let page = check_meta(geo, ptr)?;
    if is_leaf(ptr) {
        let mut v: Vec<Dentry> = leaf_entries(pool, page)
            .into_iter()
            .filter(|d| d.hash > cursor)
            .collect();
        v.sort_by(|a, b| a.hash.cmp(&b.hash).then_with(|| a.name.cmp(&b.name)));
        return Ok((!v.is_empty()).then_some(v));
    }
    if depth > MAX_DEPTH {
        return Err(Error::corrupt("directory trie deeper than the hash allows"));
    }
    // Only the subtree on the cursor's own path starts at the cursor's slot; every later
    // subtree holds only larger hashes and is searched from its first slot.
    let start = if on_cursor_path {
        slot_index(cursor, depth)
    } else {
        0
    };
    let mut prev = 0;
    for i in start..FANOUT {
        let child = pool.load_u64(page + i * 8);
        if child == 0 || child == prev {
            continue;
        }
        prev = child;
        if let Some(v) = visit(
            pool,
            geo,
            child,
            depth + 1,
            cursor,
            on_cursor_path && i == start,
        )? {
            return Ok(Some(v));
        }
    }
    Ok(None)
}

/// Visit every page of the trie (nodes and leaves, each once) and every dentry.
pub fn walk(
    pool: &Pool,
    geo: &Geometry,
    root: u64,
    page_fn: &mut dyn FnMut(u64),
    entry_fn: &mut dyn FnMut(&Dentry),
) -> Result<()> {
    if root != 0 {
        walk_ptr(pool, geo, root, 0, page_fn, entry_fn)?;
    }
    Ok(())
}

fn walk_ptr(
    pool: &Pool,
    geo: &Geometry,
    ptr: u64,
    depth: u32,
    page_fn: &mut dyn FnMut(u64),
    entry_fn: &mut dyn FnMut(&Dentry),
) -> Result<()> {
    let page = check_meta(geo, ptr)?;
    page_fn(page);
    if is_leaf(ptr) {
        for d in leaf_entries(pool, page) {
            entry_fn(&d);
        }
        return Ok(());
    }
    if depth > MAX_DEPTH {
        return Err(Error::corrupt("directory trie deeper than the hash allows"));
    }
    let mut prev = 0;
    for i in 0..FANOUT {
        let child = pool.load_u64(page + i * 8);
        if child == 0 {
            return Err(Error::corrupt(format!(
                "directory node {page:#x} has an empty slot {i}"
            )));
        }
        if child != prev {
            walk_ptr(pool, geo, child, depth + 1, page_fn, entry_fn)?;
        }
        prev = child;
    }
    Ok(())
}

//! File index: a radix tree of 512-way nodes (4 KiB metadata pages) mapping page numbers to
//! data pages. Height 0: the root is the data page of page 0 itself (small files need no
//! node). Height h: the root node covers 512^h pages. Empty entries are holes. A file of up
//! to `SMALL` pages has a small node instead, of `SMALL` entries in its own inode
//! (`Geometry::small_node`), as the root at height 1: it takes no metadata page.
//!
//! Readers walk it without locks and validate with the inode's sequence counter; the server
//! changes it only through logged stores into nodes that are initialised before they are
//! published.

use crate::error::{Error, Result};
use crate::layout::{Geometry, PAGE};
use crate::oplog::Entry;
use engram_pmem::Pool;

const FANOUT: u64 = 512;
/// Entries of a small node (the 56 bytes at the end of a regular file's inode).
pub const SMALL: u64 = 7;
pub const MAX_HEIGHT: u32 = 4;
/// Largest file size the index can address.
pub const MAX_FILE_SIZE: u64 = FANOUT.pow(MAX_HEIGHT) * PAGE;

fn span(height: u32) -> u64 {
    FANOUT.pow(height.saturating_sub(1))
}

/// Pages addressable at `height`.
fn capacity(height: u32) -> u64 {
    if height == 0 { 1 } else { FANOUT.pow(height) }
}

/// The height needed to address page `pgno`.
pub fn height_for(pgno: u64) -> u32 {
    (0..=MAX_HEIGHT)
        .find(|&h| pgno < capacity(h))
        .unwrap_or(MAX_HEIGHT + 1)
}

fn node(geo: &Geometry, p: u64) -> Result<u64> {
    if geo.is_meta_page(p) {
        Ok(p)
    } else {
        Err(bad_node(p))
    }
}

fn data(geo: &Geometry, p: u64) -> Result<u64> {
    if p == 0 || geo.is_data_page(p) {
        Ok(p)
    } else {
        Err(bad_data(p))
    }
}

#[cold]
fn bad_node(p: u64) -> Error {
    Error::corrupt(format!(
        "file index node {p:#x} is outside the metadata area"
    ))
}

#[cold]
fn bad_data(p: u64) -> Error {
    Error::corrupt(format!(
        "file index points to {p:#x}, outside the data area"
    ))
}

/// log2 of `FANOUT`: level `h` of the walk takes bits `[9(h-1), 9h)` of the page number.
const FANOUT_BITS: u32 = FANOUT.trailing_zeros();

/// The data page holding file page `pgno`, or 0 for a hole.
#[inline]
pub fn lookup(pool: &Pool, geo: &Geometry, root: u64, height: u32, pgno: u64) -> Result<u64> {
    lookup_raw(pool, geo, root, height, pgno).map_err(bad_pointer)
}

/// `lookup` without building the error: only the pointer that left its area (a
/// value returned in registers; `bad_pointer` makes the error). Shifts instead of powers,
/// one checked load per level. Every pointer followed is checked to lie in its area, so a
/// walk racing the server (which the caller's sequence check then discards) never leaves
/// the pool.
#[inline]
fn lookup_raw(
    pool: &Pool,
    geo: &Geometry,
    root: u64,
    height: u32,
    pgno: u64,
) -> std::result::Result<u64, u64> {
    // `height` first: a torn or corrupt height must not overflow the shift.
    if root == 0 || height > MAX_HEIGHT || pgno >> (FANOUT_BITS * height) != 0 {
        return Ok(0);
    }
    let mut p = root;
    for h in (0..height).rev() {
        let i = (pgno >> (FANOUT_BITS * h)) & (FANOUT - 1);
        if !geo.is_meta_page(p) {
            if !geo.is_small_node(p) {
                return Err(p);
            }
            if i >= SMALL {
                return Ok(0);
            }
        }
        p = pool.load_u64(p + i * 8);
        if p == 0 {
            return Ok(0);
        }
    }
    if geo.is_data_page(p) { Ok(p) } else { Err(p) }
}

/// The error of a walk that met pointer `p` outside its area (the metadata area for a
/// node, the data area for a page).
#[cold]
fn bad_pointer(p: u64) -> Error {
    Error::corrupt(format!(
        "file index points to {p:#x}, outside the metadata or data area"
    ))
}

/// The data pages holding file pages `start..end` (0 for holes), appended to `out` in order:
/// `lookup` for each, with one walk from the root per leaf node instead of per page.
pub fn lookup_range(
    pool: &Pool,
    geo: &Geometry,
    (root, height): (u64, u32),
    start: u64,
    end: u64,
    out: &mut Vec<u64>,
) -> Result<()> {
    let mut pg = start;
    while pg < end {
        if height == 0
            || root == 0
            || pg >= capacity(height)
            || height > MAX_HEIGHT
            || geo.is_small_node(root)
        {
            out.push(lookup(pool, geo, root, height, pg)?);
            pg += 1;
            continue;
        }
        let stop = end.min((pg / FANOUT + 1) * FANOUT);
        let mut p = root;
        for h in (2..=height).rev() {
            p = pool.load_u64(node(geo, p)? + (pg / span(h)) % FANOUT * 8);
            if p == 0 {
                break;
            }
        }
        if p == 0 {
            out.extend(std::iter::repeat_n(0, (stop - pg) as usize));
        } else {
            let leaf = node(geo, p)?;
            for q in pg..stop {
                out.push(data(geo, pool.load_u64(leaf + q % FANOUT * 8))?);
            }
        }
        pg = stop;
    }
    Ok(())
}

/// Visit the allocated pages with page numbers in `[start, end)`, in order.
pub fn for_each_page(
    pool: &Pool,
    geo: &Geometry,
    root: u64,
    height: u32,
    start: u64,
    end: u64,
    f: &mut dyn FnMut(u64, u64),
) -> Result<()> {
    if root == 0 || height > MAX_HEIGHT {
        return Ok(());
    }
    let range = (start, end.min(capacity(height)));
    let mut page_fn = |pg, page| {
        f(pg, page);
        false
    };
    visit(
        pool,
        geo,
        (root, height, 0),
        range,
        &mut |_| {},
        &mut page_fn,
    )
    .map(drop)
}

/// The data pages of file pages `start..end`, in order, until `f` says stop (returns
/// true); returns whether it did. Unlike `for_each_page`, the walk ends there.
pub fn scan_pages(
    pool: &Pool,
    geo: &Geometry,
    (root, height): (u64, u32),
    start: u64,
    end: u64,
    f: &mut dyn FnMut(u64) -> bool,
) -> Result<bool> {
    if root == 0 || height > MAX_HEIGHT {
        return Ok(false);
    }
    let range = (start, end.min(capacity(height)));
    visit(
        pool,
        geo,
        (root, height, 0),
        range,
        &mut |_| {},
        &mut |pg, _| f(pg),
    )
}

/// Visit every node and every data page of the tree.
pub fn walk(
    pool: &Pool,
    geo: &Geometry,
    root: u64,
    height: u32,
    node_fn: &mut dyn FnMut(u64),
    page_fn: &mut dyn FnMut(u64, u64),
) -> Result<()> {
    if root == 0 {
        return Ok(());
    }
    if height > MAX_HEIGHT {
        return Err(Error::corrupt(format!(
            "file index height {height} is too large"
        )));
    }
    let mut page_fn = |pg, page| {
        page_fn(pg, page);
        false
    };
    let range = (0, capacity(height));
    visit(pool, geo, (root, height, 0), range, node_fn, &mut page_fn).map(drop)
}

/// Visit the subtree at `p` (of `height`, holding file pages from `base`) within pages
/// `start..end`, in order, until `page_fn` says stop (returns true); returns whether it did.
fn visit(
    pool: &Pool,
    geo: &Geometry,
    (p, height, base): (u64, u32, u64),
    (start, end): (u64, u64),
    node_fn: &mut dyn FnMut(u64),
    page_fn: &mut dyn FnMut(u64, u64) -> bool,
) -> Result<bool> {
    if height == 0 {
        // A lone page (a file of height 0) may lie outside the range asked for.
        if base >= start && base < end {
            return Ok(page_fn(base, data(geo, p)?));
        }
        return Ok(false);
    }
    // A small node is the root of a file of height 1, held in its inode: no metadata page
    // to report.
    let (n, fanout) = if height == 1 && geo.is_small_node(p) {
        (p, SMALL)
    } else {
        let n = node(geo, p)?;
        node_fn(n);
        (n, FANOUT)
    };
    let s = span(height);
    for i in 0..fanout {
        let child_base = base + i * s;
        if child_base + s <= start || child_base >= end {
            continue;
        }
        let c = pool.load_u64(n + i * 8);
        let child = (c, height - 1, child_base);
        if c != 0 && visit(pool, geo, child, (start, end), node_fn, page_fn)? {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Turn single-word stores into as few log entries as possible (appended to `out`):
/// consecutive words whose values step by a constant (page runs, or zeros) become one `Seq`.
/// Sorts `words` by offset.
pub fn coalesce(words: &mut [(u64, u64)], out: &mut Vec<Entry>) {
    // Mostly sorted already (a write's leaf slots ascend): the sort is then one pass.
    words.sort_unstable_by_key(|w| w.0);
    let mut i = 0;
    while i < words.len() {
        let (off, start) = words[i];
        let mut j = i + 1;
        let step = match words.get(j) {
            Some(&(o, v)) if o == off + 8 => v.wrapping_sub(start),
            _ => 0,
        };
        while j < words.len()
            && words[j].0 == off + 8 * (j - i) as u64
            && words[j].1 == start.wrapping_add(step.wrapping_mul((j - i) as u64))
        {
            j += 1;
        }
        if j - i == 1 {
            out.push(Entry::set64(off, start));
        } else {
            out.push(Entry::Seq {
                off,
                count: (j - i) as u64,
                start,
                step,
            });
        }
        i = j;
    }
}

/// The result of planning an index update. Reusable: `plan_set` clears it first, so a
/// caller that keeps one allocates nothing per update once its lists have grown.
#[derive(Debug, Default)]
pub struct Plan {
    pub root: u64,
    pub height: u32,
    /// Stores into existing or new nodes (not the inode's root/height: see `root`, `height`).
    pub words: Vec<(u64, u64)>,
    /// Data pages no longer referenced.
    pub old_pages: Vec<u64>,
    /// Nodes allocated (already zeroed and flushed).
    pub new_nodes: Vec<u64>,
    /// Nodes no longer referenced.
    pub old_nodes: Vec<u64>,
}

impl Plan {
    fn reset(&mut self, root: u64, height: u32) {
        self.root = root;
        self.height = height;
        self.words.clear();
        self.old_pages.clear();
        self.new_nodes.clear();
        self.old_nodes.clear();
    }
}

/// Plan pointing file pages at new data pages, into `plan` (cleared first). `updates` must
/// be in strictly ascending page order (EINVAL otherwise). New nodes come from
/// `alloc_node`, zeroed; on an error, `plan.new_nodes` lists the nodes taken so far.
/// `small` is the file's small node (`Geometry::small_node`), or 0 for none: a file of
/// height 0 that grows to at most `SMALL` pages takes it as its root, and one that grows
/// beyond moves to a node of its own.
pub fn plan_set(
    pool: &Pool,
    geo: &Geometry,
    (root, height): (u64, u32),
    small: u64,
    updates: &[(u64, u64)],
    alloc_node: &mut dyn FnMut() -> Result<u64>,
    plan: &mut Plan,
) -> Result<()> {
    plan.reset(root, height);
    if updates.windows(2).any(|w| w[0].0 >= w[1].0) {
        return Err(Error::with_msg(
            libc::EINVAL,
            "index update not in ascending page order",
        ));
    }
    let last_pg = updates.last().map_or(0, |u| u.0);
    let need = height_for(last_pg);
    if need > MAX_HEIGHT {
        return Err(Error::EFBIG);
    }
    // Set when the small node was taken by this plan: all its slots are planned stores, and
    // what the pool holds there is stale (a symlink's target, an earlier file's pages).
    let mut fresh_small = false;
    if small != 0 && plan.height == 0 && need == 1 && last_pg < SMALL {
        let old = plan.root;
        if old != 0 && updates[0].0 == 0 {
            plan.old_pages.push(data(geo, old)?);
        }
        // One store per slot: the updates' own, or page 0's old page, or a hole.
        for i in (0..SMALL).filter(|&i| updates.iter().all(|u| u.0 != i)) {
            plan.words
                .push((small + i * 8, if i == 0 { old } else { 0 }));
        }
        plan.root = small;
        plan.height = 1;
        fresh_small = true;
    } else if plan.height == 1 && geo.is_small_node(plan.root) && last_pg >= SMALL {
        // Outgrown: a node of its own, written whole with the small node's entries while
        // unreachable (no store planned into it twice).
        let n = alloc_node()?;
        plan.new_nodes.push(n);
        let mut page = [0u8; PAGE as usize];
        for i in 0..SMALL as usize {
            let v = pool.load_u64(plan.root + i as u64 * 8);
            page[i * 8..i * 8 + 8].copy_from_slice(&v.to_le_bytes());
        }
        pool.write_lines_nt(n, &page);
        plan.root = n;
    }
    // The planned value of the slot last visited at each level. Pages ascend, so a slot
    // left behind is never visited again: one entry per level stands in for a map of every
    // planned store, and any other slot still holds its value in the pool.
    let mut last = [(0u64, 0u64); MAX_HEIGHT as usize + 1];
    let mut fresh_node = |plan: &mut Plan| -> Result<u64> {
        let n = alloc_node()?;
        pool.zero_nt(n, PAGE);
        plan.new_nodes.push(n);
        Ok(n)
    };
    while plan.height < need {
        if plan.root != 0 {
            let n = fresh_node(plan)?;
            // At height 0 the root is page 0's data page. If this plan replaces page 0, the
            // old page is not linked into the new leaf at all: two stores to one slot would
            // come out of `coalesce`'s unstable sort in either order (with more than 20
            // stores, the old page won, and the write to page 0 was lost).
            let keep = if plan.height == 0 && updates.first().is_some_and(|u| u.0 == 0) {
                plan.old_pages.push(data(geo, plan.root)?);
                0
            } else {
                plan.words.push((n, plan.root));
                plan.root
            };
            last[plan.height as usize + 1] = (n, keep);
            plan.root = n;
        }
        plan.height += 1;
    }
    // The leaf node of the last update, by its first page number / FANOUT.
    let mut leaf_of: Option<(u64, u64)> = None;
    for &(pgno, page) in updates {
        if plan.height == 0 {
            if plan.root != 0 {
                plan.old_pages.push(plan.root);
            }
            plan.root = page;
            continue;
        }
        if plan.root == 0 {
            plan.root = fresh_node(plan)?;
        }
        let leaf = match leaf_of {
            Some((base, n)) if base == pgno / FANOUT => n,
            _ => {
                let mut n = plan.root;
                for h in (2..=plan.height).rev() {
                    let slot = n + ((pgno / span(h)) % FANOUT) * 8;
                    let cur = match last[h as usize] {
                        (s, v) if s == slot => v,
                        _ => pool.load_u64(slot),
                    };
                    n = if cur == 0 {
                        let c = fresh_node(plan)?;
                        plan.words.push((slot, c));
                        c
                    } else {
                        node(geo, cur)?
                    };
                    last[h as usize] = (slot, n);
                }
                leaf_of = Some((pgno / FANOUT, n));
                n
            }
        };
        let slot = leaf + (pgno % FANOUT) * 8;
        let cur = match last[1] {
            _ if fresh_small => 0,
            (s, v) if s == slot => v,
            _ => pool.load_u64(slot),
        };
        if cur != 0 {
            plan.old_pages.push(data(geo, cur)?);
        }
        plan.words.push((slot, page));
        last[1] = (slot, page);
    }
    Ok(())
}

/// Plan dropping every page at or after page number `keep`.
pub fn plan_truncate(
    pool: &Pool,
    geo: &Geometry,
    root: u64,
    height: u32,
    keep: u64,
) -> Result<Plan> {
    let mut plan = Plan {
        root,
        height,
        ..Plan::default()
    };
    if root == 0 {
        return Ok(plan);
    }
    if keep == 0 {
        walk(
            pool,
            geo,
            root,
            height,
            &mut |n| plan.old_nodes.push(n),
            &mut |_, p| plan.old_pages.push(p),
        )?;
        plan.root = 0;
        plan.height = 0;
        return Ok(plan);
    }
    if keep >= capacity(height) {
        return Ok(plan);
    }
    truncate_node(pool, geo, root, height, 0, keep, &mut plan)?;
    Ok(plan)
}

fn truncate_node(
    pool: &Pool,
    geo: &Geometry,
    n: u64,
    height: u32,
    base: u64,
    keep: u64,
    plan: &mut Plan,
) -> Result<()> {
    let (n, fanout) = if height == 1 && geo.is_small_node(n) {
        (n, SMALL)
    } else {
        (node(geo, n)?, FANOUT)
    };
    let s = span(height);
    for i in 0..fanout {
        let child_base = base + i * s;
        if child_base + s <= keep {
            continue;
        }
        let c = pool.load_u64(n + i * 8);
        if c == 0 {
            continue;
        }
        if child_base >= keep {
            plan.words.push((n + i * 8, 0));
            if height == 1 {
                plan.old_pages.push(data(geo, c)?);
            } else {
                walk(
                    pool,
                    geo,
                    c,
                    height - 1,
                    &mut |x| plan.old_nodes.push(x),
                    &mut |_, p| plan.old_pages.push(p),
                )?;
            }
        } else {
            truncate_node(pool, geo, c, height - 1, child_base, keep, plan)?;
        }
    }
    Ok(())
}

#[cfg(test)]
#[path = "index_tests.rs"]
mod tests;

#[cfg(test)]
mod model_tests;

#[cfg(test)]
mod plan_tests;

//! The file index against a map from page numbers to data pages: random runs of plans that
//! set pages (to fresh pages or to holes) and truncate, applied as a commit applies them,
//! at every height the index reaches.

use super::*;
use crate::alloc::Allocator;
use proptest::prelude::*;
use std::collections::{BTreeMap, BTreeSet};

#[derive(Clone, Debug)]
enum Op {
    /// Set these page numbers (deduplicated and sorted by the test); `true` makes a hole.
    Set(Vec<(u64, bool)>),
    Truncate(u64),
    /// Truncate to nothing, then set page 0 alone: an index of height 0.
    Restart,
}

/// Page numbers near the start (height 0 and 1), across leaves (height 2), and far out
/// (height 3).
fn page_number() -> impl Strategy<Value = u64> {
    prop_oneof![4 => 0u64..4, 4 => 0u64..40, 3 => 0u64..2_000, 1 => 0u64..300_000]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => proptest::collection::vec((page_number(), proptest::bool::weighted(0.2)), 1..80)
            .prop_map(Op::Set),
        // Many consecutive pages from page 0 or 1: growth by one or two levels in one plan.
        2 => (0u64..2, prop_oneof![20u64..60, 500u64..700]).prop_map(|(from, n)| {
            Op::Set((from..from + n).map(|pg| (pg, false)).collect())
        }),
        1 => page_number().prop_map(Op::Truncate),
        // Back to height 0: everything dropped, then page 0 alone.
        1 => Just(Op::Restart),
    ]
}

/// Apply a plan as a commit does: its words, then the new root and height.
fn apply(pool: &Pool, plan: &mut Plan) -> (u64, u32) {
    let mut out = Vec::new();
    coalesce(&mut plan.words, &mut out);
    for e in &out {
        e.apply(pool);
    }
    (plan.root, plan.height)
}

fn sorted(mut v: Vec<u64>) -> Vec<u64> {
    v.sort_unstable();
    v
}

/// What the test hands out and takes back: retired nodes and data pages are reused first,
/// and a node comes back filled with garbage, so that a plan that forgets to zero a new
/// node, or retires one still linked, reads wrong pointers.
struct Pages<'a> {
    pool: &'a Pool,
    alloc: Allocator,
    data: Vec<u64>,
    nodes: Vec<u64>,
}

impl Pages<'_> {
    fn data_page(&mut self) -> u64 {
        if self.data.is_empty() {
            self.alloc.alloc_data_pages(1024, &mut self.data);
        }
        self.data.pop().unwrap()
    }

    fn node(&mut self) -> u64 {
        let n = self
            .nodes
            .pop()
            .unwrap_or_else(|| self.alloc.alloc_meta_page().unwrap());
        self.pool.write(n, &[0xA5; PAGE as usize]);
        n
    }
}

/// The nodes reachable from `tree`.
fn nodes_of(pool: &Pool, geo: &Geometry, tree: (u64, u32)) -> BTreeSet<u64> {
    let mut nodes = BTreeSet::new();
    walk(
        pool,
        geo,
        tree.0,
        tree.1,
        &mut |n| {
            nodes.insert(n);
        },
        &mut |_, _| {},
    )
    .unwrap();
    nodes
}

/// Apply `plan` to `tree` and check its node lists against what is reachable before and
/// after: the nodes it retires were linked and no longer are, those it made are linked,
/// and the linked ones are exactly `live`'s. Then its retired nodes and pages go back to
/// `pages` for reuse.
fn commit(
    pool: &Pool,
    geo: &Geometry,
    plan: &mut Plan,
    live: &mut BTreeSet<u64>,
    pages: &mut Pages,
) -> std::result::Result<(u64, u32), TestCaseError> {
    let tree = apply(pool, plan);
    let reachable = nodes_of(pool, geo, tree);
    for n in &plan.old_nodes {
        prop_assert!(live.remove(n), "node {:#x} retired but never linked", n);
        prop_assert!(
            !reachable.contains(n),
            "node {:#x} retired but still linked",
            n
        );
    }
    live.extend(plan.new_nodes.iter().copied());
    prop_assert_eq!(
        &reachable,
        &*live,
        "linked nodes against those made and not retired"
    );
    pages.nodes.extend(plan.old_nodes.iter().copied());
    pages.data.extend(plan.old_pages.iter().copied());
    Ok(tree)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]
    #[test]
    fn the_index_matches_a_map(
        ops in proptest::collection::vec(op(), 1..25),
        with_small in proptest::bool::ANY,
    ) {
        let geo = Geometry::for_size(256 << 20).unwrap();
        let pool = Pool::anonymous(256 << 20).unwrap();
        // A file's small node, holding garbage first (as a slot a symlink had leaves it):
        // a plan that takes it must store every slot.
        let small = if with_small { geo.small_node(3) } else { 0 };
        if with_small {
            pool.write(small, &[0xA5; (SMALL * 8) as usize]);
        }
        let mut pages = Pages { pool: &pool, alloc: Allocator::empty(&geo), data: Vec::new(), nodes: Vec::new() };
        let mut model: BTreeMap<u64, u64> = BTreeMap::new();
        let mut live = BTreeSet::new();
        let mut tree = (0u64, 0u32);
        let mut plan = Plan::default();
        for op in ops {
            let set = |pages: &mut Pages, tree, updates: &[(u64, u64)], plan: &mut Plan| {
                let cell = std::cell::RefCell::new(pages);
                let mut new_node = || Ok(cell.borrow_mut().node());
                plan_set(&pool, &geo, tree, small, updates, &mut new_node, plan).unwrap();
            };
            match op {
                Op::Set(list) => {
                    let list: BTreeMap<u64, bool> = list.into_iter().collect();
                    let updates: Vec<(u64, u64)> = list
                        .iter()
                        .map(|(&pg, &hole)| (pg, if hole { 0 } else { pages.data_page() }))
                        .collect();
                    set(&mut pages, tree, &updates, &mut plan);
                    let replaced: Vec<u64> =
                        updates.iter().filter_map(|u| model.get(&u.0).copied()).collect();
                    prop_assert_eq!(sorted(plan.old_pages.clone()), sorted(replaced));
                    tree = commit(&pool, &geo, &mut plan, &mut live, &mut pages)?;
                    for &(pg, page) in &updates {
                        match page {
                            0 => model.remove(&pg),
                            _ => model.insert(pg, page),
                        };
                    }
                }
                Op::Restart => {
                    let mut p = plan_truncate(&pool, &geo, tree.0, tree.1, 0).unwrap();
                    tree = commit(&pool, &geo, &mut p, &mut live, &mut pages)?;
                    let page = [(0, pages.data_page())];
                    set(&mut pages, tree, &page, &mut plan);
                    tree = commit(&pool, &geo, &mut plan, &mut live, &mut pages)?;
                    prop_assert_eq!(tree.1, 0);
                    model.clear();
                    model.insert(0, page[0].1);
                }
                Op::Truncate(keep) => {
                    let mut p = plan_truncate(&pool, &geo, tree.0, tree.1, keep).unwrap();
                    let dropped: Vec<u64> = model.range(keep..).map(|(_, &p)| p).collect();
                    prop_assert_eq!(sorted(p.old_pages.clone()), sorted(dropped));
                    tree = commit(&pool, &geo, &mut p, &mut live, &mut pages)?;
                    model.retain(|&pg, _| pg < keep);
                }
            }
            // Every page the map has, a few neighbours of each that it lacks, and the
            // pages the walk reports, all agree.
            let mut probes: BTreeSet<u64> = model.keys().copied().collect();
            probes.extend(model.keys().flat_map(|&pg| [pg.saturating_sub(1), pg + 1, pg + 512]));
            probes.extend([0, 1, 511, 512, 262_143, 262_144]);
            for pg in probes {
                let want = model.get(&pg).copied().unwrap_or(0);
                prop_assert_eq!(lookup(&pool, &geo, tree.0, tree.1, pg).unwrap(), want, "page {}", pg);
            }
            let mut ranged = Vec::new();
            lookup_range(&pool, &geo, tree, 0, 600, &mut ranged).unwrap();
            let each: Vec<u64> = (0..600).map(|pg| model.get(&pg).copied().unwrap_or(0)).collect();
            prop_assert_eq!(ranged, each);
            if with_small && tree.1 == 1 && tree.0 == small {
                prop_assert!(model.keys().all(|&pg| pg < SMALL), "{:?}", model);
            }
            let mut seen = Vec::new();
            for_each_page(&pool, &geo, tree.0, tree.1, 0, u64::MAX, &mut |pg, p| seen.push((pg, p)))
                .unwrap();
            let want: Vec<(u64, u64)> = model.iter().map(|(&a, &b)| (a, b)).collect();
            prop_assert_eq!(seen, want);
        }
    }
}

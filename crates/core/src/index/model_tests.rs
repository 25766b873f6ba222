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

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]
    #[test]
    fn the_index_matches_a_map(ops in proptest::collection::vec(op(), 1..25)) {
        let geo = Geometry::for_size(256 << 20).unwrap();
        let pool = Pool::anonymous(256 << 20).unwrap();
        let mut alloc = Allocator::empty(&geo);
        let mut free = Vec::new();
        alloc.alloc_data_pages(40_000, &mut free);
        let mut free = free.into_iter();
        let mut model: BTreeMap<u64, u64> = BTreeMap::new();
        let mut tree = (0u64, 0u32);
        let mut plan = Plan::default();
        for op in ops {
            match op {
                Op::Set(pages) => {
                    let pages: BTreeMap<u64, bool> = pages.into_iter().collect();
                    let updates: Vec<(u64, u64)> = pages
                        .iter()
                        .map(|(&pg, &hole)| (pg, if hole { 0 } else { free.next().unwrap() }))
                        .collect();
                    let mut new_node = || Ok(alloc.alloc_meta_page().unwrap());
                    plan_set(&pool, &geo, tree, &updates, &mut new_node, &mut plan).unwrap();
                    let replaced: Vec<u64> =
                        updates.iter().filter_map(|u| model.get(&u.0).copied()).collect();
                    prop_assert_eq!(sorted(plan.old_pages.clone()), sorted(replaced));
                    tree = apply(&pool, &mut plan);
                    for &(pg, page) in &updates {
                        match page {
                            0 => model.remove(&pg),
                            _ => model.insert(pg, page),
                        };
                    }
                }
                Op::Restart => {
                    let mut p = plan_truncate(&pool, &geo, tree.0, tree.1, 0).unwrap();
                    tree = apply(&pool, &mut p);
                    let page = [(0, free.next().unwrap())];
                    let mut new_node = || Ok(alloc.alloc_meta_page().unwrap());
                    plan_set(&pool, &geo, tree, &page, &mut new_node, &mut plan).unwrap();
                    tree = apply(&pool, &mut plan);
                    prop_assert_eq!(tree.1, 0);
                    model.clear();
                    model.insert(0, page[0].1);
                }
                Op::Truncate(keep) => {
                    let mut p = plan_truncate(&pool, &geo, tree.0, tree.1, keep).unwrap();
                    let dropped: Vec<u64> = model.range(keep..).map(|(_, &p)| p).collect();
                    prop_assert_eq!(sorted(p.old_pages.clone()), sorted(dropped));
                    tree = apply(&pool, &mut p);
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
            let mut seen = Vec::new();
            for_each_page(&pool, &geo, tree.0, tree.1, 0, u64::MAX, &mut |pg, p| seen.push((pg, p)))
                .unwrap();
            let want: Vec<(u64, u64)> = model.iter().map(|(&a, &b)| (a, b)).collect();
            prop_assert_eq!(seen, want);
        }
    }
}

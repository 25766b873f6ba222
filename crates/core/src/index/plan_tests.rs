use super::*;
use crate::alloc::Allocator;

/// Apply a plan as a commit would: its words, then the new root and height.
fn apply(pool: &Pool, plan: &mut Plan, root: &mut (u64, u32)) {
    let mut out = Vec::new();
    coalesce(&mut plan.words, &mut out);
    for e in &out {
        e.apply(pool);
    }
    *root = (plan.root, plan.height);
}

#[test]
fn plan_set_builds_a_tree_lookup_agrees_with() {
    let geo = Geometry::for_size(64 << 20).unwrap();
    let pool = Pool::anonymous(64 << 20).unwrap();
    let mut alloc = Allocator::empty(&geo);
    let mut data = Vec::new();
    alloc.alloc_data_pages(3000, &mut data);
    let mut model = std::collections::BTreeMap::new();
    let mut root = (0u64, 0u32);
    let mut plan = Plan::default();
    let mut next = data.into_iter();
    // Page 0 alone (height 0), growth by two levels at once, runs crossing leaf
    // nodes, sparse pages, and overwrites of pages already mapped.
    let writes: Vec<Vec<u64>> = vec![
        vec![0],
        vec![0],
        vec![1, 2, 600],
        vec![510, 511, 512, 513, 1023, 1024],
        vec![300_000],
        (1000..1600).collect(),
        vec![0, 511, 300_000],
    ];
    for pgs in writes {
        let updates: Vec<(u64, u64)> = pgs.iter().map(|&p| (p, next.next().unwrap())).collect();
        plan_set(
            &pool,
            &geo,
            root,
            0,
            &updates,
            &mut || Ok(alloc.alloc_meta_page().unwrap()),
            &mut plan,
        )
        .unwrap();
        let mut old = plan.old_pages.clone();
        let mut expect_old: Vec<u64> = updates
            .iter()
            .filter_map(|u| model.get(&u.0).copied())
            .collect();
        old.sort_unstable();
        expect_old.sort_unstable();
        assert_eq!(old, expect_old);
        apply(&pool, &mut plan, &mut root);
        model.extend(updates.iter().copied());
        for (&pg, &page) in &model {
            assert_eq!(lookup(&pool, &geo, root.0, root.1, pg).unwrap(), page);
        }
        for pg in [3, 509, 2000, 299_999] {
            assert_eq!(lookup(&pool, &geo, root.0, root.1, pg).unwrap(), 0);
        }
        // scan_pages: the mapped pages in order, and no further than asked.
        for (a, b) in [(0, 1), (2, 2000), (1023, 400_000)] {
            let want: Vec<u64> = model.range(a..b).map(|(&pg, _)| pg).collect();
            let mut got = Vec::new();
            let stopped = scan_pages(&pool, &geo, root, a, b, &mut |pg| {
                got.push(pg);
                false
            })
            .unwrap();
            assert!(!stopped);
            assert_eq!(got, want, "pages {a}..{b}");
            let mut calls = 0;
            let stopped = scan_pages(&pool, &geo, root, a, b, &mut |_| {
                calls += 1;
                true
            })
            .unwrap();
            assert_eq!((stopped, calls), (!want.is_empty(), want.len().min(1)));
        }
        // Ranges within a leaf, across leaves, over holes and beyond the capacity.
        for (a, b) in [
            (0, 1),
            (0, 3),
            (500, 1100),
            (1023, 1025),
            (299_990, 300_010),
        ] {
            let mut got = Vec::new();
            lookup_range(&pool, &geo, root, a, b, &mut got).unwrap();
            let want: Vec<u64> = (a..b)
                .map(|pg| lookup(&pool, &geo, root.0, root.1, pg).unwrap())
                .collect();
            assert_eq!(got, want, "pages {a}..{b} at height {}", root.1);
        }
    }
    assert_eq!(root.1, 3);
}

/// A file at height 0 (its root is page 0's data page), then one plan that replaces
/// page 0 (by a page or a hole) and grows the tree by one or two levels, with few
/// stores and with many: page 0 maps what the plan says, and its old page is retired.
#[test]
fn growth_from_height_0_replacing_page_0() {
    for top in [2u64, 30, 511, 600, 1100, 3000] {
        for hole in [false, true] {
            let geo = Geometry::for_size(64 << 20).unwrap();
            let pool = Pool::anonymous(64 << 20).unwrap();
            let mut alloc = Allocator::empty(&geo);
            let mut data = Vec::new();
            alloc.alloc_data_pages(4000, &mut data);
            let old0 = data[0];
            let page = |pg: u64| match pg {
                0 if hole => 0,
                _ => data[1 + pg as usize],
            };
            let updates: Vec<(u64, u64)> = (0..top).map(|pg| (pg, page(pg))).collect();
            let mut plan = Plan::default();
            let mut new_node = || Ok(alloc.alloc_meta_page().unwrap());
            plan_set(
                &pool,
                &geo,
                (old0, 0),
                0,
                &updates,
                &mut new_node,
                &mut plan,
            )
            .unwrap();
            assert_eq!(plan.old_pages, vec![old0]);
            let mut root = (old0, 0);
            apply(&pool, &mut plan, &mut root);
            for &(pg, p) in &updates {
                let got = lookup(&pool, &geo, root.0, root.1, pg).unwrap();
                assert_eq!(got, p, "{top} pages, hole {hole}: page {pg}");
            }
        }
    }
}

#[test]
fn plan_set_refuses_pages_out_of_order() {
    let geo = Geometry::for_size(8 << 20).unwrap();
    let pool = Pool::anonymous(8 << 20).unwrap();
    let mut plan = Plan::default();
    let mut no_nodes = || -> Result<u64> { Err(Error::ENOSPC) };
    for updates in [[(2, 0), (1, 0)], [(1, 0), (1, 0)]] {
        let e = plan_set(&pool, &geo, (0, 0), 0, &updates, &mut no_nodes, &mut plan);
        assert_eq!(e.unwrap_err().errno(), libc::EINVAL);
    }
}

//! Proptest strategies: names, paths, sizes, permissions and whole operations.

use super::PATH_MAX;
use super::ops::{Filter, OpT, PathGen, Suffix};
use super::values::{Mode, P};
use engram_core::{RENAME_EXCHANGE, RENAME_NOREPLACE};
use proptest::prelude::*;
use proptest::strategy::Union;

// ---------------------------------------------------------------------------------------
// Generators
// ---------------------------------------------------------------------------------------

fn name() -> BoxedStrategy<Vec<u8>> {
    Union::new_weighted(vec![
        (
            30,
            prop::sample::select(vec!["a", "b", "c", "d"])
                .prop_map(|s| s.as_bytes().to_vec())
                .boxed(),
        ),
        (
            1,
            prop::sample::select(vec![250usize, 255, 256, 260])
                .prop_map(|n| vec![b'x'; n])
                .boxed(),
        ),
    ])
    .boxed()
}

fn component() -> BoxedStrategy<Vec<u8>> {
    Union::new_weighted(vec![
        (12, name()),
        (1, Just(b".".to_vec()).boxed()),
        (1, Just(b"..".to_vec()).boxed()),
    ])
    .boxed()
}

fn slashes(weights: [u32; 3]) -> BoxedStrategy<&'static str> {
    let opts = [("", weights[0]), ("/", weights[1]), ("//", weights[2])];
    Union::new_weighted(
        opts.into_iter()
            .filter(|o| o.1 > 0)
            .map(|(s, w)| (w, Just(s).boxed()))
            .collect(),
    )
    .boxed()
}

/// One to three components joined by one or two slashes, maybe with slashes after.
fn relative_path() -> BoxedStrategy<Vec<u8>> {
    let comps = |n: usize| prop::collection::vec((component(), slashes([0, 8, 1])), n).boxed();
    (
        Union::new_weighted(vec![(5, comps(1)), (4, comps(2)), (1, comps(3))]),
        slashes([10, 3, 1]),
    )
        .prop_map(|(comps, trailing)| {
            let mut p = Vec::new();
            for (i, (c, sep)) in comps.into_iter().enumerate() {
                if i > 0 {
                    p.extend_from_slice(sep.as_bytes());
                }
                p.extend_from_slice(&c);
            }
            p.extend_from_slice(trailing.as_bytes());
            p
        })
        .boxed()
}

fn literal_path() -> BoxedStrategy<P> {
    Union::new_weighted(vec![
        (
            40,
            (slashes([0, 9, 1]), relative_path())
                .prop_map(|(lead, rel)| P([lead.as_bytes(), &rel].concat()))
                .boxed(),
        ),
        (1, Just(P::new("/")).boxed()),
        // Deep paths through one name, for symlink loops and the 40-link limit.
        (
            1,
            (name(), 36usize..44, name())
                .prop_map(|(n, k, last)| {
                    let mut p = Vec::new();
                    for _ in 0..k {
                        p.push(b'/');
                        p.extend_from_slice(&n);
                    }
                    p.push(b'/');
                    p.extend_from_slice(&last);
                    P(p)
                })
                .boxed(),
        ),
    ])
    .boxed()
}

fn suffix(filter: Filter) -> BoxedStrategy<Suffix> {
    let (none, child) = match filter {
        Filter::NonDir => (24, 2),
        _ => (8, 6),
    };
    Union::new_weighted(vec![
        (none, Just(Suffix::None).boxed()),
        (child, name().prop_map(|n| Suffix::Child(P(n))).boxed()),
        (1, Just(Suffix::Slash).boxed()),
        (1, Just(Suffix::Dot).boxed()),
        (1, Just(Suffix::DotDot).boxed()),
    ])
    .boxed()
}

fn pick(filter: Filter) -> BoxedStrategy<PathGen> {
    (any::<u16>(), suffix(filter))
        .prop_map(move |(i, s)| PathGen::Pick(i, filter, s))
        .boxed()
}

fn path_with(filter: Filter) -> BoxedStrategy<PathGen> {
    Union::new_weighted(vec![
        (2, literal_path().prop_map(PathGen::Lit).boxed()),
        (2, pick(Filter::Any)),
        (
            if matches!(filter, Filter::Any) { 1 } else { 5 },
            pick(filter),
        ),
    ])
    .boxed()
}

fn path() -> BoxedStrategy<PathGen> {
    path_with(Filter::Any)
}

/// Mostly files and symlinks.
fn file_path() -> BoxedStrategy<PathGen> {
    path_with(Filter::NonDir)
}

fn link_target() -> BoxedStrategy<PathGen> {
    Union::new_weighted(vec![
        (6, path()),
        (6, relative_path().prop_map(|p| PathGen::Lit(P(p))).boxed()),
        (
            1,
            prop::sample::select(vec![".", "..", "/", "a", "a/", "./a", "../a"])
                .prop_map(|s| PathGen::Lit(P::new(s)))
                .boxed(),
        ),
        (1, Just(PathGen::Lit(P::new(""))).boxed()),
        // The longest target there is, and one byte more.
        (
            1,
            prop::sample::select(vec![PATH_MAX - 1, PATH_MAX])
                .prop_map(|n| {
                    PathGen::Lit(P([
                        "./".repeat((n - 1) / 2).as_bytes(),
                        &b"ab"[..1 + (n - 1) % 2],
                    ]
                    .concat()))
                })
                .boxed(),
        ),
    ])
    .boxed()
}

fn file_perm() -> BoxedStrategy<u32> {
    prop::sample::select(vec![0o644, 0o600, 0o755, 0o640]).boxed()
}

fn dir_perm() -> BoxedStrategy<u32> {
    prop::sample::select(vec![0o755, 0o700, 0o750, 0o1777, 0o2755, 0o4755]).boxed()
}

/// For chmod: with set-ID and sticky bits.
fn any_perm() -> BoxedStrategy<u32> {
    prop::sample::select(vec![
        0o644, 0o755, 0o700, 0o000, 0o4755, 0o2755, 0o1777, 0o7777,
    ])
    .boxed()
}

fn slot() -> BoxedStrategy<u8> {
    (0u8..2).boxed()
}

/// Where 2 MiB (512 pages) ends, the file index grows a level.
const TWO_MIB: u64 = 2 << 20;

fn offset() -> BoxedStrategy<u64> {
    Union::new_weighted(vec![
        (24, (0u64..20_000).boxed()),
        (8, (0u64..5000).boxed()),
        (1, (TWO_MIB - 10_000..TWO_MIB + 10_000).boxed()),
    ])
    .boxed()
}

fn length() -> BoxedStrategy<usize> {
    Union::new_weighted(vec![
        (3, (0usize..10_000).boxed()),
        (1, (0usize..64).boxed()),
    ])
    .boxed()
}

fn size() -> BoxedStrategy<u64> {
    Union::new_weighted(vec![
        (8, Just(0u64).boxed()),
        (32, (0u64..30_000).boxed()),
        (1, (TWO_MIB - 10_000..TWO_MIB + 10_000).boxed()),
    ])
    .boxed()
}

fn rename_flags() -> BoxedStrategy<u32> {
    Union::new_weighted(vec![
        (8, Just(0).boxed()),
        (3, Just(RENAME_NOREPLACE).boxed()),
        (3, Just(RENAME_EXCHANGE).boxed()),
        (1, Just(RENAME_NOREPLACE | RENAME_EXCHANGE).boxed()),
    ])
    .boxed()
}

pub type GenOp = OpT<PathGen>;

pub fn op() -> BoxedStrategy<GenOp> {
    let p = path;
    let f = file_path;
    let nr = || path_with(Filter::NonRoot);
    Union::new_weighted(vec![
        (
            12,
            (
                p(),
                any::<bool>(),
                any::<bool>(),
                prop::bool::weighted(0.85),
                file_perm(),
            )
                .prop_map(|(path, excl, trunc, write, perm)| OpT::Create {
                    path,
                    excl,
                    trunc,
                    write,
                    perm: Mode(perm),
                })
                .boxed(),
        ),
        (
            10,
            (f(), offset(), length(), any::<u8>())
                .prop_map(|(path, off, len, seed)| OpT::Write {
                    path,
                    off,
                    len,
                    seed,
                })
                .boxed(),
        ),
        (5, f().prop_map(|path| OpT::Read { path }).boxed()),
        (
            3,
            (f(), size())
                .prop_map(|(path, size)| OpT::Truncate { path, size })
                .boxed(),
        ),
        (
            10,
            (p(), dir_perm())
                .prop_map(|(path, perm)| OpT::Mkdir {
                    path,
                    perm: Mode(perm),
                })
                .boxed(),
        ),
        (4, nr().prop_map(|path| OpT::Rmdir { path }).boxed()),
        (5, f().prop_map(|path| OpT::Unlink { path }).boxed()),
        (
            10,
            (nr(), nr(), rename_flags())
                .prop_map(|(from, to, flags)| OpT::Rename { from, to, flags })
                .boxed(),
        ),
        (
            5,
            (f(), p())
                .prop_map(|(from, to)| OpT::Link { from, to })
                .boxed(),
        ),
        (
            7,
            (link_target(), p())
                .prop_map(|(target, path)| OpT::Symlink { target, path })
                .boxed(),
        ),
        (2, p().prop_map(|path| OpT::Readlink { path }).boxed()),
        (3, p().prop_map(|path| OpT::Stat { path }).boxed()),
        (3, p().prop_map(|path| OpT::Lstat { path }).boxed()),
        (
            1,
            (p(), any_perm())
                .prop_map(|(path, perm)| OpT::Chmod {
                    path,
                    perm: Mode(perm),
                })
                .boxed(),
        ),
        (3, p().prop_map(|path| OpT::ReadDir { path }).boxed()),
        (
            6,
            (slot(), f(), prop::bool::weighted(0.7))
                .prop_map(|(slot, path, create)| OpT::Open { slot, path, create })
                .boxed(),
        ),
        (
            4,
            (slot(), offset(), length(), any::<u8>())
                .prop_map(|(slot, off, len, seed)| OpT::HWrite {
                    slot,
                    off,
                    len,
                    seed,
                })
                .boxed(),
        ),
        (2, slot().prop_map(|slot| OpT::HRead { slot }).boxed()),
        (1, slot().prop_map(|slot| OpT::HStat { slot }).boxed()),
        (
            1,
            (slot(), size())
                .prop_map(|(slot, size)| OpT::HTruncate { slot, size })
                .boxed(),
        ),
        (
            3,
            (slot(), offset(), length(), 0u8..3)
                .prop_map(|(slot, off, len, how)| OpT::HClear {
                    slot,
                    off,
                    len: len as u64,
                    how,
                })
                .boxed(),
        ),
        (1, slot().prop_map(|slot| OpT::Close { slot }).boxed()),
        (
            2,
            (f(), offset(), length(), any::<u8>())
                .prop_map(|(path, off, len, seed)| OpT::UnlinkOpen {
                    path,
                    off,
                    len,
                    seed,
                })
                .boxed(),
        ),
        (
            3,
            (f(), length(), any::<u8>())
                .prop_map(|(path, len, seed)| OpT::Append { path, len, seed })
                .boxed(),
        ),
        (
            1,
            (
                p(),
                1u16..200,
                prop::bool::weighted(0.3),
                prop::bool::weighted(0.3),
            )
                .prop_map(|(dir, n, long, remove)| OpT::Bulk {
                    dir,
                    n,
                    long,
                    remove,
                })
                .boxed(),
        ),
        (1, Just(OpT::Remount).boxed()),
    ])
    .boxed()
}

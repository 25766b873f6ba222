//! Interleaved A/B timing of the two ways to make a copy into the pool durable:
//! non-temporal stores + sfence (`Pool::copy_nt`, then `fence`) against ordinary stores +
//! a write-back of every line + sfence (`Pool::write`, `flush`, `fence`). Both are durable
//! at the fence. Rounds alternate between the variants, so that the noise of a shared
//! machine hits both alike; only the ratios of one run mean anything.
//!
//! `cargo run --release -p engram-pmem --example copy_ab -- [SIZE_BYTES] [ROUNDS]`
//! (pool file in /dev/shm, removed at the end).

use engram_pmem::Pool;
use std::time::Instant;

const POOL: u64 = 128 << 20;

fn main() -> std::io::Result<()> {
    let mut args = std::env::args().skip(1);
    let size: usize = args.next().map_or(4096, |s| s.parse().expect("size"));
    let rounds: usize = args.next().map_or(31, |s| s.parse().expect("rounds"));
    let path = std::path::PathBuf::from(format!("/dev/shm/engram-copy-ab-{}", std::process::id()));
    let pool = Pool::create(&path, POOL)?;
    pool.prefault(0, POOL);
    println!(
        "media: {}, flush: {}, copy of {size} bytes",
        pool.media(),
        pool.flush_kind()
    );
    let src: Vec<u8> = (0..size).map(|i| (i * 7 + 3) as u8).collect();
    let slots = (POOL / size as u64).max(1);
    // Hot: a few destinations that stay cached. Cold: walk the whole pool (larger than
    // the caches), as fresh copy-on-write pages are.
    for (name, span) in [("hot", 16.min(slots)), ("cold", slots)] {
        let iters = ((64usize << 20) / size).clamp(16, 4000);
        let mut slot = 0u64;
        let mut next = || {
            slot = (slot + 1) % span;
            slot * size as u64
        };
        let mut t = [Vec::new(), Vec::new()];
        for r in 0..rounds * 2 {
            let v = (r + r / 2) % 2; // order ABBA… so that neither always goes first
            let start = Instant::now();
            for _ in 0..iters {
                let off = next();
                if v == 0 {
                    pool.copy_nt(off, &src);
                } else {
                    pool.write(off, &src);
                    pool.flush(off, size as u64);
                }
                pool.fence();
            }
            t[v].push(start.elapsed().as_nanos() as f64 / iters as f64);
        }
        for x in &mut t {
            x.sort_by(f64::total_cmp);
        }
        let (nt, cached) = (t[0][rounds / 2], t[1][rounds / 2]);
        println!(
            "{name:>4}: nt+sfence {nt:8.0} ns, memcpy+clwb+sfence {cached:8.0} ns (median of {rounds}); \
             cached/nt = {:.2}, {:.2} GB/s vs {:.2} GB/s",
            cached / nt,
            size as f64 / nt,
            size as f64 / cached
        );
    }
    drop(pool);
    std::fs::remove_file(&path)
}

//! Does this processor's cache-line write-back keep the line cached? A store to a line, its
//! write-back (`Pool::flush`: `clwb` where there is one) and a fence, then a load of the
//! line, timed, against the same loop without the write-back. Where the write-back evicts
//! (AMD's processors), the load goes to memory: what the server's in-place stores paid on
//! every operation when each record's lines were written back at the next one
//! (architecture.md item 18).
//!
//! `cargo run --release -p engram-bench --example flush_evicts -- [ROUNDS]`

use engram_pmem::Pool;
use std::time::Instant;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let rounds: u64 = std::env::args().nth(1).map_or(Ok(200_000), |r| r.parse())?;
    let pool = Pool::anonymous(1 << 20)?;
    println!("write-back instruction: {}", pool.flush_kind());
    for write_back in [false, true] {
        let mut total = 0u128;
        for i in 0..rounds {
            pool.store_u64(64, i);
            if write_back {
                pool.flush(64, 8);
            }
            pool.fence();
            let t = Instant::now();
            std::hint::black_box(pool.load_u64(64));
            total += t.elapsed().as_nanos();
        }
        let what = if write_back {
            "written back"
        } else {
            "not written back"
        };
        println!(
            "load of a line {what}: {:.1} ns (with the clock's own cost)",
            total as f64 / rounds as f64
        );
    }
    Ok(())
}

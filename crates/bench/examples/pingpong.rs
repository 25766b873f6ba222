//! The host's cross-core latency: one cache line handed back and forth between two threads,
//! printed as nanoseconds per one-way hand-off. On a virtual machine it moves with where
//! the host places the virtual CPUs (docs/performance.md: the daemon's rows move with it).
//!
//! `cargo run --release -p engram-bench --example pingpong -- [ROUND_TRIPS]`

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// The line the two threads hand over, alone in its cache line.
#[repr(align(64))]
struct Line(AtomicU64);

fn main() {
    let trips: u64 = std::env::args().nth(1).map_or(2_000_000, |a| {
        a.parse().expect("ROUND_TRIPS must be a number")
    });
    let line = Line(AtomicU64::new(0));
    let flag = &line.0;
    let started = std::thread::scope(|s| {
        s.spawn(|| {
            for i in 0..trips {
                while flag.load(Ordering::Acquire) != 2 * i + 1 {
                    std::hint::spin_loop();
                }
                flag.store(2 * i + 2, Ordering::Release);
            }
        });
        let started = Instant::now();
        for i in 0..trips {
            flag.store(2 * i + 1, Ordering::Release);
            while flag.load(Ordering::Acquire) != 2 * i + 2 {
                std::hint::spin_loop();
            }
        }
        started.elapsed()
    });
    println!(
        "{:.1} ns per one-way hand-off",
        started.as_nanos() as f64 / trips as f64 / 2.0
    );
}

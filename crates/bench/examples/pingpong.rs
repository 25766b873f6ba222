//! The host's cross-core latency: one cache line handed back and forth between two threads,
//! printed as nanoseconds per one-way hand-off (`engram_bench::measure::handoff_ns`, which
//! `engram bench` reports at the start and end of a run). On a virtual machine it moves
//! with where the host places the virtual CPUs (docs/performance.md: the daemon's rows move
//! with it).
//!
//! `cargo run --release -p engram-bench --example pingpong -- [ROUND_TRIPS]` (at most
//! `measure::HANDOFF_TIME` of them).

fn main() {
    let trips: u64 = std::env::args().nth(1).map_or(2_000_000, |a| {
        a.parse().expect("ROUND_TRIPS must be a number")
    });
    match engram_bench::measure::handoff_ns(trips) {
        Some(ns) => println!("{ns:.1} ns per one-way hand-off"),
        None => println!("no hand-off to measure: fewer than two CPUs"),
    }
}

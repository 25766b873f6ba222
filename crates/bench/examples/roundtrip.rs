//! The daemon transport's own cost: a `statfs` (a request the server answers from a few
//! counters) through a daemon this process starts, timed per round trip, beside the host's
//! cross-core hand-off. What a daemon row costs above its in-process row, less this, is
//! the server's work and the lines it hands back and forth.
//!
//! With IDLE, that many more clients stay connected without asking anything meanwhile (the
//! server's scan of their slots).
//!
//! `cargo run --release -p engram-bench --example roundtrip -- [COUNT [IDLE]]`

use engram_bench::targets::engram::EngramTarget;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let count: u64 = std::env::args().nth(1).map_or(Ok(200_000), |c| c.parse())?;
    let idle: usize = std::env::args().nth(2).map_or(Ok(0), |c| c.parse())?;
    let _pools = engram_bench::PoolDir::acquire();
    let target = EngramTarget::daemon("roundtrip", 64 << 20)?;
    let fs = target.fs();
    let socket = target.socket().expect("a daemon");
    let _idle: Vec<engram_core::Fs> = (0..idle)
        .map(|_| engram_core::Fs::connect(socket))
        .collect::<Result<_, _>>()?;
    for _ in 0..1000 {
        fs.statfs()?;
    }
    let started = std::time::Instant::now();
    for _ in 0..count {
        std::hint::black_box(fs.statfs()?);
    }
    let ns = started.elapsed().as_nanos() as f64 / count as f64;
    println!("statfs through the daemon: {ns:.0} ns per round trip ({idle} idle clients)");
    if let Some(h) = engram_bench::measure::handoff_ns(2_000_000) {
        println!("host hand-off: {h:.1} ns one way");
    }
    Ok(())
}

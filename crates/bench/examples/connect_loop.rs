//! A connection to a running daemon, as each new process through the shim makes one: COUNT
//! connections made and dropped in turn, each timed to its first answer (a `statfs`); prints
//! the median and the quartiles in µs.
//!
//! `engram serve POOL --socket SOCK &` then
//! `target/release/examples/connect_loop SOCK [COUNT]`

use engram_core::Fs;
use std::time::Instant;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let socket = args.next().ok_or("usage: connect_loop SOCKET [COUNT]")?;
    let count: usize = args.next().map_or(Ok(500), |c| c.parse())?;
    let mut us = Vec::with_capacity(count);
    for _ in 0..count {
        let started = Instant::now();
        let fs = Fs::connect(&socket)?;
        fs.statfs()?;
        us.push(started.elapsed().as_secs_f64() * 1e6);
        drop(fs);
    }
    us.sort_by(f64::total_cmp);
    let at = |q: f64| us[((us.len() - 1) as f64 * q) as usize];
    println!(
        "connect + first answer: median {:.0} us (quartiles {:.0}-{:.0}, {count} connections)",
        at(0.5),
        at(0.25),
        at(0.75)
    );
    Ok(())
}

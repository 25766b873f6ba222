//! `engram crashtest [--quick] [--seed N] [--workload NAME]`: explore every crash state of
//! the workloads and check recovery against the oracle (docs/crash-consistency.md).

use crate::error::{CliError, Result};
use engram_crashtest::{Config, run as explore};
use std::io::Write;

#[derive(clap::Args)]
pub struct Args {
    /// The reduced set the test suite runs
    #[arg(long)]
    pub quick: bool,
    /// Seed of the random sequences and subset sampling
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Only workloads whose name contains this (e.g. single/rename, pair/, random/)
    #[arg(long)]
    pub workload: Option<String>,
    /// Worker threads (default: the number of CPUs)
    #[arg(long)]
    pub threads: Option<usize>,
}

pub fn run(a: &Args) -> Result<()> {
    let threads = a
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let cfg = Config {
        quick: a.quick,
        seed: a.seed,
        workload: a.workload.clone(),
        threads,
    };
    let started = std::time::Instant::now();
    let out = explore(&cfg, &mut |done, total, o| {
        eprint!(
            "\r[{done}/{total}] workloads, {} crash states, {} failures",
            o.states,
            o.failures.len()
        );
        let _ = std::io::stderr().flush();
    });
    eprintln!();
    for f in out.failures.iter().take(50) {
        out!("FAIL {} at {}: {}", f.workload, f.crash_point, f.detail);
    }
    if out.failures.len() > 50 {
        out!("... and {} more failures", out.failures.len() - 50);
    }
    for u in &out.unflushed {
        out!("UNFLUSHED {u}");
    }
    out!(
        "{} workloads, {} log checkpoints, {} log wrap-arounds, {:.1} s",
        out.workloads,
        out.checkpoints,
        out.log_wraps,
        started.elapsed().as_secs_f64()
    );
    out!(
        "crash states checked: {}, failures: {}",
        out.states,
        out.failures.len()
    );
    if out.ok() {
        Ok(())
    } else {
        Err(CliError::new(format!(
            "{} failures and {} stores never flushed (replay one with --workload NAME)",
            out.failures.len(),
            out.unflushed.len()
        )))
    }
}

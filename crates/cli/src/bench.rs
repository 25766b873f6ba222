//! `engram bench`: EngramFS side by side with tmpfs and ext4 (docs/performance.md).

use crate::error::{CliError, Result};
use engram_bench::{BenchOptions, run as bench};
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// The reduced set (about two minutes)
    #[arg(long)]
    pub quick: bool,
    /// Only benchmarks whose group/name contains this (e.g. micro, create, varmail)
    #[arg(long)]
    pub filter: Option<String>,
    /// Also write the results as JSON
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Also write one PNG bar chart per group into this directory
    #[arg(long)]
    pub charts: Option<PathBuf>,
    /// Thread counts, comma-separated
    #[arg(long, value_delimiter = ',', default_value = "1,2")]
    pub threads: Vec<usize>,
}

pub fn run(a: &Args) -> Result<()> {
    let opts = BenchOptions {
        quick: a.quick,
        filter: a.filter.clone(),
        json: a.json.clone(),
        charts: a.charts.clone(),
        threads: a.threads.clone(),
    };
    bench(&opts).map(drop).map_err(CliError::new)
}

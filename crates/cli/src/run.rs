//! `engram run [--pool POOL] [--mount DIR] -- CMD ARGS…`: run unmodified programs on
//! EngramFS through the LD_PRELOAD shim, with a daemon shared by every process CMD starts.

use crate::error::{CliError, Result};
use std::ffi::OsString;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// Pool file (default: the demo pool, created if missing)
    #[arg(long)]
    pub pool: Option<PathBuf>,
    /// Where the pool appears to the program (default /mnt/engram)
    #[arg(long)]
    pub mount: Option<PathBuf>,
    /// The command and its arguments
    #[arg(last = true, required = true)]
    pub cmd: Vec<OsString>,
}

pub fn run(a: &Args) -> Result<()> {
    let code = engram_run::run(a.pool.clone(), a.mount.clone(), &a.cmd).map_err(CliError::new)?;
    // The command's own status is ours.
    std::process::exit(code);
}

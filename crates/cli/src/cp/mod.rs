//! `engram cp [-r] SRC DST`: one side is `POOL:/path`, the other a local path. Regular files,
//! directories (with -r) and symlinks are copied; permission bits are preserved.

mod copy_in;
mod copy_out;

use crate::error::{CliError, Context, Result};
use crate::pool::{self, PoolPath};
use crate::size;
use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Instant;

/// Bytes moved per read or write call.
const CHUNK: usize = 1 << 20;

#[derive(clap::Args)]
pub struct Args {
    /// Copy directories recursively (symlinks are copied as symlinks)
    #[arg(short = 'r', short_alias = 'R', long = "recursive")]
    pub recursive: bool,
    /// Print what was copied and how fast
    #[arg(short, long)]
    pub verbose: bool,
    /// Source: POOL:/path or a local path
    pub src: OsString,
    /// Destination: POOL:/path or a local path (an existing directory receives SRC inside it)
    pub dst: OsString,
}

/// What a copy did.
#[derive(Default)]
pub struct Stats {
    pub files: u64,
    pub dirs: u64,
    pub symlinks: u64,
    pub bytes: u64,
    pub skipped: u64,
}

pub fn run(a: &Args) -> Result<()> {
    let src = PoolPath::parse(&a.src);
    let dst = PoolPath::parse(&a.dst);
    let t = Instant::now();
    let (stats, pool) = match (src, dst) {
        (Some(src), None) => {
            let fs = pool::open(&src.pool)?;
            let r = copy_out::copy(&fs, &src, &PathBuf::from(&a.dst), a.recursive);
            fs.unmount()
                .context(format_args!("cannot unmount {}", src.pool.display()))?;
            (r?, src.pool)
        }
        (None, Some(dst)) => {
            let fs = pool::open(&dst.pool)?;
            let r = copy_in::copy(&fs, &PathBuf::from(&a.src), &dst, a.recursive);
            fs.unmount()
                .context(format_args!("cannot unmount {}", dst.pool.display()))?;
            (r?, dst.pool)
        }
        (Some(_), Some(_)) => {
            return Err(CliError::new(
                "both SRC and DST are in a pool: one side must be a local path",
            ));
        }
        (None, None) => {
            return Err(CliError::new(
                "neither SRC nor DST is in a pool: one side must be POOL:/path",
            ));
        }
    };
    if a.verbose {
        let took = t.elapsed();
        out!(
            "copied {} files, {} directories, {} symlinks ({}) in {} ({}), pool {}",
            stats.files,
            stats.dirs,
            stats.symlinks,
            size::human(stats.bytes),
            size::duration(took),
            size::rate(stats.bytes, took),
            pool.display()
        );
    }
    if stats.skipped > 0 {
        return Err(CliError::new(format!(
            "skipped {} special files",
            stats.skipped
        )));
    }
    Ok(())
}

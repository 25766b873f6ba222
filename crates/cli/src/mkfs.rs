//! `engram mkfs POOL --size SIZE`

use crate::error::{Context, Result};
use crate::size::{self, parse_size};
use engram_core::Fs;
use std::path::PathBuf;
use std::time::Instant;

#[derive(clap::Args)]
pub struct Args {
    /// Pool file to create (its previous content is lost)
    pub pool: PathBuf,
    /// Pool size in bytes, or with a K, M, G or T suffix (binary units), e.g. 64M or 1G
    #[arg(long, short, value_parser = parse_size)]
    pub size: u64,
}

pub fn run(a: &Args) -> Result<()> {
    let shown = a.pool.display();
    let t = Instant::now();
    Fs::mkfs(&a.pool, a.size).context(format_args!("cannot format {shown}"))?;
    let took = t.elapsed();
    let geo = Fs::superblock(&a.pool)
        .context(format_args!("cannot read back {shown}"))?
        .geometry;
    out!(
        "formatted {shown}: {} pool in {}",
        size::human(geo.pool_size),
        size::duration(took)
    );
    out!(
        "  {} inodes, {} metadata pages, {} data pages ({}), {} log",
        geo.inode_count,
        geo.meta_pages,
        geo.data_pages,
        size::human(geo.data_pages * 4096),
        size::human(geo.log_len)
    );
    Ok(())
}

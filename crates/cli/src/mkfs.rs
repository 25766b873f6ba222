//! `engram mkfs POOL [--size SIZE] [--meta-ratio BYTES]`

use crate::error::{CliError, Context, Result};
use crate::size::{self, parse_size};
use engram_core::Fs;
use std::path::PathBuf;
use std::time::Instant;

#[derive(clap::Args)]
pub struct Args {
    /// Pool file to create, or a block or device-DAX device to format in place (its previous
    /// content is lost)
    pub pool: PathBuf,
    /// Pool size in bytes, or with a K, M, G or T suffix (binary units), e.g. 64M or 1G.
    /// Required for a file; for a device, the default is the whole device
    #[arg(long, short, value_parser = parse_size)]
    pub size: Option<u64>,
    /// One metadata page per this many bytes of pool (default 64K, the pool's sixteenth).
    /// Each file of more than 7 pages (28 KiB) takes a metadata page for its index, and
    /// each directory one per 63 entries or so: for many files of 32 to 64 KiB give 16K;
    /// at least 8K (half the pool)
    #[arg(long, value_parser = parse_size)]
    pub meta_ratio: Option<u64>,
}

pub fn run(a: &Args) -> Result<()> {
    let shown = a.pool.display();
    // A device that does not exist yet is a file to create; any other failure to look is
    // reported by the format below.
    let device = match engram_pmem::device_size(&a.pool) {
        Ok(d) => d,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(CliError::new(format!("cannot format {shown}: {e}"))),
    };
    let size = match (a.size, device) {
        (Some(s), _) => s,
        (None, Some(d)) => d,
        (None, None) => {
            return Err(CliError::new(format!(
                "cannot format {shown}: --size is required for a pool file (only a device has a size of its own)"
            )));
        }
    };
    let t = Instant::now();
    let ratio = a
        .meta_ratio
        .unwrap_or(engram_core::layout::DEFAULT_BYTES_PER_META_PAGE);
    let geo = engram_core::layout::Geometry::with_meta_ratio(size, ratio)
        .context(format_args!("cannot format {shown}"))?;
    Fs::mkfs_with(&a.pool, geo).context(format_args!("cannot format {shown}"))?;
    let took = t.elapsed();
    let geo = Fs::superblock(&a.pool)
        .context(format_args!("cannot read back {shown}"))?
        .geometry;
    let what = match device {
        Some(d) => format!(" (a device of {})", size::human(d)),
        None => String::new(),
    };
    out!(
        "formatted {shown}{what}: {} pool in {}",
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

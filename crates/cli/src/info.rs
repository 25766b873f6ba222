//! `engram info POOL`

use crate::error::{Context, Result};
use crate::pool;
use crate::size::human;
use engram_core::Fs;
use engram_pmem::Media;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// Pool file
    pub pool: PathBuf,
}

pub fn run(a: &Args) -> Result<()> {
    let fs = pool::open(&a.pool)?;
    let shown = a.pool.display();
    let m = fs.mount_info().clone();
    let g = m.geometry;
    let st = fs.statfs().context(format_args!("{shown}: statfs"))?;
    let uuid = Fs::superblock(&a.pool)
        .map(|sb| format!("{:016x}", sb.uuid))
        .unwrap_or_else(|_| "?".into());

    out!("pool:      {shown}");
    out!("uuid:      {uuid}");
    out!("media:     {}", m.media);
    let pool = fs.pool();
    if pool.backing().is_device() {
        let how = match m.media {
            Media::Dax => "direct access",
            _ => "not DAX: through the page cache, durable with msync",
        };
        out!(
            "device:    {} of {} ({how})",
            pool.backing(),
            human(pool.len())
        );
    }
    if m.was_clean {
        out!("state:     cleanly unmounted");
    } else {
        out!("state:     not cleanly unmounted (recovered at this open)");
    }
    out!(
        "recovery:  {} log records replayed, {} orphaned inodes freed",
        m.replayed,
        m.orphans_freed
    );
    for p in &m.problems {
        out!("           recovery noticed: {p}");
    }
    for p in &m.repaired {
        out!("           set right: {p}");
    }
    out!("geometry:");
    out!(
        "  pool size:       {} ({} bytes)",
        human(g.pool_size),
        g.pool_size
    );
    out!(
        "  log:             {} at offset {:#x}",
        human(g.log_len),
        g.log_off
    );
    out!("  inodes:          {}", g.inode_count);
    out!(
        "  metadata pages:  {} ({})",
        g.meta_pages,
        human(g.meta_pages * 4096)
    );
    out!(
        "  data pages:      {} ({})",
        g.data_pages,
        human(g.data_pages * 4096)
    );
    out!("usage:");
    let used = st.blocks - st.blocks_free.min(st.blocks);
    out!(
        "  blocks:          {} of {} used, {} free ({} free, {}-byte blocks)",
        used,
        st.blocks,
        st.blocks_free,
        human(st.blocks_free * st.block_size),
        st.block_size
    );
    let iused = st.files - st.files_free.min(st.files);
    out!(
        "  inodes:          {} of {} used, {} free",
        iused,
        st.files,
        st.files_free
    );
    fs.unmount().context(format_args!("cannot unmount {shown}"))
}

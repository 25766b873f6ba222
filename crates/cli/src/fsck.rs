//! `engram fsck [--repair] POOL`

use crate::error::{CliError, Context, Result};
use crate::pool;
use crate::size::count;
use engram_core::FsckReport;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// Repair what can be repaired (link and block counts, leaked pages and inodes, orphans)
    #[arg(long)]
    pub repair: bool,
    /// Pool file
    pub pool: PathBuf,
}

fn summary(r: &FsckReport) -> String {
    let mut parts = vec![
        count(r.files, "file"),
        count(r.dirs, "directory"),
        count(r.symlinks, "symlink"),
    ];
    // Named only in a pool that has some: most have none.
    if r.specials > 0 {
        parts.push(count(r.specials, "special file"));
    }
    parts.push(count(r.meta_pages, "metadata page"));
    parts.push(count(r.data_pages, "data page"));
    parts.join(", ")
}

fn print_problems(r: &FsckReport) {
    for p in &r.problems {
        out!("  problem: {p}");
    }
}

pub fn run(a: &Args) -> Result<()> {
    let fs = pool::open(&a.pool)?;
    let shown = a.pool.display();
    let m = fs.mount_info();
    if !m.was_clean {
        out!(
            "{shown} was not cleanly unmounted: recovery replayed {} log records and freed {} orphaned inodes",
            m.replayed,
            m.orphans_freed
        );
    }
    for p in &m.problems {
        out!("  recovery noticed: {p}");
    }
    for p in &m.repaired {
        out!("  set right: {p}");
    }
    let mut r = fs
        .fsck(a.repair)
        .context(format_args!("fsck of {shown} failed"))?;
    print_problems(&r);
    if a.repair && !r.is_clean() {
        out!(
            "repaired {} of {} problems; checking again",
            r.repaired,
            r.problems.len()
        );
        r = fs
            .fsck(false)
            .context(format_args!("fsck of {shown} failed"))?;
        print_problems(&r);
    }
    let n = r.problems.len();
    let state = if n == 0 {
        "clean".to_string()
    } else {
        count(n as u64, "problem")
    };
    out!("{shown}: {state}: {}", summary(&r));
    fs.unmount()
        .context(format_args!("cannot unmount {shown}"))?;
    if n == 0 {
        Ok(())
    } else {
        let hint = if a.repair {
            ""
        } else {
            " (run with --repair to fix what can be fixed)"
        };
        Err(CliError::new(format!("{shown} has {state}{hint}")))
    }
}

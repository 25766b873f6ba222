//! Mounting a pool: validate the superblock, and after a crash replay the log, rebuild the
//! allocator from what is reachable and free orphaned inodes.

use crate::alloc::Allocator;
use crate::census::Census;
use crate::error::{Error, Result};
use crate::inode::field;
use crate::layout::Superblock;
use crate::oplog::{self, LogHead};
use engram_pmem::Pool;

/// What mounting found and did.
#[derive(Debug)]
pub struct Mounted {
    pub sb: Superblock,
    pub alloc: Allocator,
    /// Where the next log record goes.
    pub head: LogHead,
    pub was_clean: bool,
    pub replayed: u64,
    pub orphans_freed: u64,
    /// Inconsistencies seen by the recovery walk (fsck tells more).
    pub problems: Vec<String>,
    /// What the open set right that is no inconsistency: a superblock copy that did not
    /// validate (torn by a crash during its update, or damaged) and was written again.
    pub repaired: Vec<String>,
}

pub fn mount(pool: &Pool) -> Result<Mounted> {
    let (mut sb, damaged) = Superblock::load_noting_damage(pool)?;
    let mut noticed = Vec::new();
    if !damaged.is_empty() {
        // Both copies written again from the valid one, so that one copy can again fail.
        sb.store(pool);
        pool.sync_point().map_err(|e| {
            Error::with_msg(libc::EIO, format!("cannot write the superblock back: {e}"))
        })?;
        for d in damaged {
            noticed.push(format!("superblock {d}; written again from the other copy"));
        }
    }
    let geo = sb.geometry;
    let head = LogHead {
        head: sb.log_head,
        seq: sb.log_head_seq,
    };
    if sb.clean == 1 {
        return Ok(Mounted {
            sb,
            alloc: Allocator::load(pool, &geo),
            head,
            was_clean: true,
            replayed: 0,
            orphans_freed: 0,
            problems: Vec::new(),
            repaired: noticed,
        });
    }
    let replayed = oplog::replay(pool, &geo, head)?;
    let census = Census::take(pool, &geo);
    // Inodes with a mode but no name: unlinked while open when the crash came, or created
    // by an operation that never committed. Their slots are freed; their pages were never
    // marked by the census, so they are free already.
    let mut orphans = 0;
    for ino in 2..geo.inode_count {
        let at = geo.inode_addr(ino) + field::MODE;
        if pool.load_u32(at) != 0 && !census.inodes.contains_key(&ino) {
            pool.store_u32(at, 0);
            pool.flush(at, 4);
            orphans += 1;
        }
    }
    pool.sync_point().map_err(|e| {
        Error::with_msg(
            libc::EIO,
            format!("cannot write the recovered pool back to its file: {e}"),
        )
    })?;
    Ok(Mounted {
        sb,
        alloc: census.allocator(&geo),
        head: replayed.end,
        was_clean: false,
        replayed: replayed.records,
        orphans_freed: orphans,
        problems: census.problems,
        repaired: noticed,
    })
}

//! fsck: check every invariant of a mounted pool, and optionally repair counts and leaks.

use super::Server;
use crate::alloc::Item;
use crate::census::{Census, Expected};
use crate::error::Result;
use crate::index::MAX_FILE_SIZE;
use crate::inode::field;
use crate::layout::ROOT_INO;
use crate::oplog::{self, Entry, LogHead};

/// What fsck found (and fixed).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FsckReport {
    pub problems: Vec<String>,
    pub repaired: usize,
    pub files: u64,
    pub dirs: u64,
    pub symlinks: u64,
    /// FIFOs, devices and sockets.
    pub specials: u64,
    pub meta_pages: u64,
    pub data_pages: u64,
}

impl FsckReport {
    pub fn is_clean(&self) -> bool {
        self.problems.is_empty()
    }
}

impl Server {
    pub fn fsck(&mut self, repair: bool) -> Result<FsckReport> {
        let mut census = Census::take(&self.pool, &self.geo);
        let mut fixes: Vec<Entry> = Vec::new();
        let mut touched = Vec::new();
        let mut orphans = Vec::new();
        let open: Vec<u64> = (self.open.keys().chain(self.kept_parents.keys()))
            .copied()
            .collect();
        for ino in open {
            if !census.inodes.contains_key(&ino) {
                let d = self.read_inode(ino);
                census.walk_content(&self.pool, &self.geo, ino, &d);
                census.inodes.entry(ino).or_default();
            }
        }
        let mut r = FsckReport {
            problems: std::mem::take(&mut census.problems),
            ..FsckReport::default()
        };
        let bad_superblock = self.sb.check_copies(&self.pool);
        let rewrite_superblock = !bad_superblock.is_empty();
        r.problems.extend(bad_superblock);
        let bad_log = self.check_log();
        r.problems.extend(bad_log.clone());
        let mut inos: Vec<(u64, Expected)> = census.inodes.iter().map(|(&i, &e)| (i, e)).collect();
        inos.sort_by_key(|e| e.0);
        for (ino, exp) in inos {
            let d = self.read_inode(ino);
            let mut want_nlink = exp.links;
            if d.is_dir() {
                r.dirs += 1;
                want_nlink = if d.nlink == 0 && exp.links == 0 {
                    0
                } else {
                    2 + exp.subdirs
                };
                if d.size != exp.entries {
                    r.problems.push(format!(
                        "directory {ino}: size says {} entries, it has {}",
                        d.size, exp.entries
                    ));
                    fixes.push(self.set64(ino, field::SIZE, exp.entries));
                }
                let want_parent = if ino == ROOT_INO {
                    ROOT_INO
                } else {
                    exp.parent
                };
                if exp.links > 0 && d.parent != want_parent {
                    r.problems.push(format!(
                        "directory {ino}: parent says {}, it is in {want_parent}",
                        d.parent
                    ));
                    fixes.push(self.set64(ino, field::PARENT, want_parent));
                }
            } else if d.is_reg() {
                r.files += 1;
                // Pages beyond the size are legitimate (fallocate with KEEP_SIZE); a size
                // the index cannot address is not.
                if d.size > MAX_FILE_SIZE {
                    r.problems.push(format!(
                        "file {ino}: size {} is beyond the largest file ({MAX_FILE_SIZE})",
                        d.size
                    ));
                }
                if d.blocks != exp.pages {
                    r.problems.push(format!(
                        "file {ino}: block count says {} pages, index has {}",
                        d.blocks, exp.pages
                    ));
                    fixes.push(self.set64(ino, field::BLOCKS, exp.pages));
                }
            } else if d.is_special() {
                r.specials += 1;
            } else if d.is_symlink() {
                r.symlinks += 1;
                if let Some(p) = self.check_symlink_target(ino, &d) {
                    r.problems.push(p);
                }
            }
            if d.nlink != want_nlink {
                r.problems.push(format!(
                    "inode {ino}: link count is {}, expected {want_nlink}",
                    d.nlink
                ));
                fixes.push(self.set32(ino, field::NLINK, want_nlink));
            }
            touched.push(ino);
        }
        let pending: std::collections::HashSet<Item> = self.alloc.pending_items().collect();
        let reserved: std::collections::HashSet<u64> = self.reserved_pages().collect();
        let mut leaks = Vec::new();
        let mut unmarked = Vec::new();
        for ino in 1..self.geo.inode_count {
            let live = self.read_inode(ino).mode != 0;
            let reached = census.inodes.contains_key(&ino);
            let used = self.alloc.inodes.get(ino);
            if live && !reached {
                r.problems
                    .push(format!("inode {ino} is allocated but has no name (orphan)"));
                orphans.push(ino);
            } else if reached && !used {
                r.problems
                    .push(format!("inode {ino} is in use but marked free"));
                unmarked.push(Item::Inode(ino));
            } else if used && !live && !pending.contains(&Item::Inode(ino)) {
                r.problems
                    .push(format!("inode {ino} is marked used but free (leak)"));
                leaks.push(Item::Inode(ino));
            }
        }
        for i in 0..self.geo.meta_pages {
            let off = self.geo.meta_off + i * crate::layout::PAGE;
            let (reached, used) = (census.meta.get(i), self.alloc.meta.get(i));
            if reached && !used {
                r.problems
                    .push(format!("metadata page {off:#x} is in use but marked free"));
                unmarked.push(Item::MetaPage(off));
            } else if used && !reached && !pending.contains(&Item::MetaPage(off)) {
                r.problems.push(format!(
                    "metadata page {off:#x} is marked used but unreachable (leak)"
                ));
                leaks.push(Item::MetaPage(off));
            }
        }
        for i in 0..self.geo.data_pages {
            let off = self.geo.data_off + i * crate::layout::PAGE;
            let (reached, used) = (census.data.get(i), self.alloc.data.get(i));
            if reached && !used {
                r.problems
                    .push(format!("data page {off:#x} is in use but marked free"));
                unmarked.push(Item::DataPage(off));
            } else if used
                && !reached
                && !reserved.contains(&off)
                && !pending.contains(&Item::DataPage(off))
            {
                r.problems.push(format!(
                    "data page {off:#x} is marked used but unreachable (leak)"
                ));
                leaks.push(Item::DataPage(off));
            }
        }
        r.meta_pages = census.meta.used();
        r.data_pages = census.data.used();
        if repair && !r.problems.is_empty() {
            if rewrite_superblock {
                self.sb.store(&self.pool);
                r.repaired += 1;
            }
            if !bad_log.is_empty() {
                // Every record is applied in place when it is made durable: a checkpoint
                // makes the damaged ones unnecessary.
                self.checkpoint()?;
                r.repaired += 1;
            }
            self.commit(&fixes, &touched)?;
            r.repaired += fixes.len();
            for ino in orphans {
                self.free_inode(ino)?;
                r.repaired += 1;
            }
            for it in leaks {
                self.alloc.release_now(it);
                r.repaired += 1;
            }
            for it in unmarked {
                self.alloc.mark_used(it);
                r.repaired += 1;
            }
        }
        Ok(r)
    }

    /// Every record since the last checkpoint must still validate: recovery after a crash
    /// would stop at (or refuse) a damaged one.
    fn check_log(&self) -> Vec<String> {
        let head = LogHead {
            head: self.sb.log_head,
            seq: self.sb.log_head_seq,
        };
        let expected = self.log.next_seq().saturating_sub(head.seq);
        let valid = oplog::count_valid(&self.pool, &self.geo, head);
        if valid >= expected {
            return Vec::new();
        }
        vec![format!(
            "operation log: record {} fails its checks; only {valid} of the {expected} records \
             written since the last checkpoint are valid",
            head.seq + valid
        )]
    }

    /// A symlink's target must be free of NUL bytes within its length (the length itself
    /// and where the target lives are checked by the census).
    fn check_symlink_target(&self, ino: u64, d: &crate::inode::InodeData) -> Option<String> {
        if d.size == 0 || d.size >= libc::PATH_MAX as u64 {
            return None;
        }
        let at = if d.size <= field::INLINE_LEN {
            self.geo.inode_addr(ino) + field::INLINE
        } else if self.geo.is_meta_page(d.root) {
            d.root
        } else {
            return None;
        };
        self.pool
            .slice(at, d.size)
            .contains(&0)
            .then(|| format!("symlink {ino}: its target has a NUL byte within its length"))
    }
}

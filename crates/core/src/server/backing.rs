//! Backing files of shared mappings left behind by processes that ended without giving
//! their mappings up (`_exit`, a signal): their stores were never written back.
//!
//! The shim marks a backing file current (`sidefiles::MAP_CURRENT`) once it holds the
//! file's contents; from then until the last counted mapping of the inode goes, every
//! write to the file is copied into it, so it is the file plus the mappings' stores. When
//! the server's count of an inode's mappings reaches zero (the last process gave its
//! mapping up, or died: `disconnect`), and when a pool is mounted, a backing file still
//! there that no process holds (its flock) had its last holder die: the server writes
//! every page in which it differs from the file back into the file, as that process's
//! exit would have, and removes it. One that some process still holds without the
//! server counting it (a forked child's copy of its parent's mapping) stops being current:
//! writes no longer reach it, so it must never be written back.

use super::Server;
use crate::error::{Error, Result};
use crate::index;
use crate::inode::InodeData;
use crate::layout::PAGE;
use crate::request::Handle;
use crate::sidefiles;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, OpenOptionsExt, PermissionsExt};

/// Pages written back per commit: a bounded record, and a bounded buffer.
const BATCH_PAGES: usize = 64;

impl Server {
    /// Name side files after pool `id` (`sidefiles::pool_id`): only then does the server
    /// look for backing files left behind. Also writes back those already left (the pool
    /// was just mounted: no process maps it through this server yet).
    pub fn use_side_files(&mut self, id: u64) {
        self.side_files = Some(id);
        for (ino, generation) in sidefiles::map_files_of(id) {
            if sidefiles::is_live(&self.pool, &self.geo, ino, generation) {
                self.settle_backing(ino);
            }
        }
    }

    /// No counted mapping of `ino` is left: write back and remove its backing file if its
    /// last holder died, or mark it stale if a process nobody counted still holds it.
    pub(super) fn settle_backing(&mut self, ino: u64) {
        let Some(id) = self.side_files else {
            return;
        };
        let d = self.read_inode(ino);
        if d.is_free() {
            return;
        }
        let name = sidefiles::map_file(id, ino, d.generation);
        let Ok(file) = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(&name)
        else {
            // Gone: the last process to give its mapping up removed it (the usual case).
            return;
        };
        // SAFETY: flock on a descriptor we own.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            let _ = file.set_permissions(std::fs::Permissions::from_mode(0o600));
            return;
        }
        let current = file
            .metadata()
            .is_ok_and(|m| sidefiles::map_file_is_current(m.permissions().mode()));
        if current && d.is_reg() {
            let h = Handle {
                ino,
                generation: d.generation,
            };
            if let Err(e) = self.write_back_backing(h, &file) {
                // Left in place, unmarked: the file keeps what it had, and a later
                // mapping starts from the file again.
                let _ = file.set_permissions(std::fs::Permissions::from_mode(0o600));
                eprintln!("engram: writing back {name} failed: {e}");
                return;
            }
        }
        // Removed while we hold it: a process opening it meanwhile waits for our lock,
        // then finds it unlinked and makes a new one.
        let _ = std::fs::remove_file(&name);
    }

    /// Write every page in which `backing` differs from file `h` back into the file (within
    /// the file's size: a mapping cannot grow a file).
    fn write_back_backing(&mut self, h: Handle, backing: &File) -> Result<()> {
        let io = |e: std::io::Error| Error::with_msg(libc::EIO, format!("backing file: {e}"));
        let len = backing.metadata().map_err(io)?.len();
        let mut buf = vec![0u8; BATCH_PAGES * PAGE as usize];
        let mut changed: Vec<(u64, usize)> = Vec::with_capacity(BATCH_PAGES);
        let mut pg = 0u64;
        loop {
            let d = self.inode(h)?;
            let end = d.size.min(len);
            if pg * PAGE >= end {
                return Ok(());
            }
            let n = ((end - pg * PAGE).div_ceil(PAGE) as usize).min(BATCH_PAGES);
            let bytes = &mut buf[..n * PAGE as usize];
            backing.read_exact_at(bytes, pg * PAGE).map_err(io)?;
            changed.clear();
            for i in 0..n {
                let at = (pg + i as u64) * PAGE;
                let page = &mut bytes[i * PAGE as usize..(i + 1) * PAGE as usize];
                // Bytes past the end of file are not the file's: zero, as the server keeps
                // them (a later extension must read zeros there).
                let visible = (d.size - at).min(PAGE) as usize;
                page[visible..].fill(0);
                if !self.page_holds(&d, pg + i as u64, page)? {
                    changed.push((pg + i as u64, i));
                }
            }
            if !changed.is_empty() {
                self.replace_pages(h, &d, &changed, bytes)?;
            }
            pg += n as u64;
        }
    }

    /// Whether file page `pg` of `d` holds exactly `bytes` (a hole holds zeros).
    fn page_holds(&self, d: &InodeData, pg: u64, bytes: &[u8]) -> Result<bool> {
        Ok(
            match index::lookup(&self.pool, &self.geo, d.root, d.height, pg)? {
                0 => bytes.iter().all(|&b| b == 0),
                p => self.pool.slice(p, PAGE) == bytes,
            },
        )
    }

    /// Give file `h` new data pages: page `pg` gets page `i` of `bytes`, for each `(pg, i)`
    /// of `changed` (page numbers ascending), in one commit.
    fn replace_pages(
        &mut self,
        h: Handle,
        d: &InodeData,
        changed: &[(u64, usize)],
        bytes: &[u8],
    ) -> Result<()> {
        let mut pages = Vec::with_capacity(changed.len());
        while pages.len() < changed.len() {
            let before = pages.len();
            self.alloc
                .alloc_data_pages((changed.len() - pages.len()) as u64, &mut pages);
            if pages.len() == before && !self.make_room() {
                self.release_data_pages(&pages);
                return Err(Error::ENOSPC);
            }
        }
        for (&(_, i), &p) in changed.iter().zip(&pages) {
            let at = i * PAGE as usize;
            self.pool.copy_nt(p, &bytes[at..at + PAGE as usize]);
        }
        self.pool.fence();
        let updates: Vec<(u64, u64)> = changed
            .iter()
            .zip(&pages)
            .map(|(&(pg, _), &p)| (pg, p))
            .collect();
        let r = self.commit_pages(h, d, &updates, d.size, None);
        if r.is_err() {
            self.release_data_pages(&pages);
        }
        r.map(drop)
    }

    fn release_data_pages(&mut self, pages: &[u64]) {
        for &p in pages {
            self.alloc.release_now(crate::alloc::Item::DataPage(p));
        }
    }
}

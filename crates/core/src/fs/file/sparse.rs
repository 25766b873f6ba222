//! SEEK_DATA and SEEK_HOLE: where a file's data and holes are. A page is data when the
//! file's index maps it; a hole is a page it does not map, or the end of file (lseek(2)
//! lets a file system call any range data: before this, the whole file was).

use super::{File, ReadView};
use crate::error::{Error, Result};
use crate::index;
use crate::layout::PAGE;

impl File {
    /// The first offset at or after `off` that holds data; ENXIO at or past the end of
    /// file, or when only holes follow.
    pub fn seek_data(&self, off: u64) -> Result<u64> {
        self.seek_sparse(off, true)
    }

    /// The first offset at or after `off` in a hole (the end of file counts as one);
    /// ENXIO at or past the end of file.
    pub fn seek_hole(&self, off: u64) -> Result<u64> {
        self.seek_sparse(off, false)
    }

    /// Lock-free, like a read: retried if a write commits meanwhile.
    fn seek_sparse(&self, off: u64, data: bool) -> Result<u64> {
        let core = &*self.fs.core;
        let seq = core.shared.seqs.counter(self.handle.ino);
        let _pin = core.shared.epochs.pin();
        loop {
            let s = seq.begin();
            let v = ReadView::read(core, self.handle.ino);
            let r = if v.is_dir() {
                Err(Error::EINVAL)
            } else if off >= v.size {
                Err(Error::from_errno(libc::ENXIO))
            } else {
                self.first_of(&v, off, data)
            };
            if seq.ok(s) {
                return r;
            }
        }
    }

    fn first_of(&self, v: &ReadView, off: u64, data: bool) -> Result<u64> {
        let core = &*self.fs.core;
        let (first, last) = (off / PAGE, v.size.div_ceil(PAGE));
        // The mapped pages come in order: stop at the first of them (data), or at the
        // first gap between them (a hole); the walk goes no further than the answer.
        let mut next = first;
        let stopped = index::scan_pages(
            &core.pool,
            &core.geo,
            (v.root, v.height),
            first,
            last,
            &mut |pg| {
                if data {
                    next = pg;
                    return true;
                }
                // A gap before `pg`: `next` is the hole.
                if pg != next {
                    return true;
                }
                next = pg + 1;
                false
            },
        )?;
        if data && !stopped {
            return Err(Error::from_errno(libc::ENXIO));
        }
        // Data: the page found; a hole: the first page not mapped (at the end of file at
        // the latest).
        Ok((next * PAGE).max(off).min(v.size))
    }
}

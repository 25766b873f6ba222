//! Reads of a file that some process maps shared: from its backing file, where the
//! mappings' stores are, as Linux's page cache shows stores to `read` at once (Tokyo
//! Cabinet stores records through its mapping and reads their headers past the mapped
//! region with `pread`; before 2026-11-27 such reads gave the file's bytes from before
//! the stores, until a write-back, and its databases broke, found by probing).

use super::backing::{backing_stat, current, trusted};
use super::reentered;
use super::writes::backing_now;
use crate::real;
use crate::session;
use crate::table::OpenFile;
use crate::util::{Res, en};

/// `b.len()` bytes of `of`'s file at `off` (cut to its end) as the mappings show them;
/// None when no mapping of the file is live (one load: a lingering count's backing file
/// is the file, `server/mapped.rs`), its backing file is not there, not yet filled or not
/// one to trust: the caller reads the file.
pub fn read_mapped(of: &OpenFile, b: &mut [u8], off: u64) -> Option<Res<usize>> {
    if b.is_empty() || reentered() {
        return None;
    }
    let h = of.handle();
    if !session::fs().is_ok_and(|fs| fs.mapped_live(h.ino)) {
        return None;
    }
    let fd = backing_now(h)?;
    let r = read_backing(of, fd, b, off);
    crate::ownfds::close(fd);
    r
}

/// `read_mapped` with backing file `fd` open.
fn read_backing(of: &OpenFile, fd: libc::c_int, b: &mut [u8], off: u64) -> Option<Res<usize>> {
    let st = backing_stat(fd).ok()?;
    let meta = match of.with_file(|f| f.metadata().map_err(en)) {
        Ok(m) => m,
        Err(e) => return Some(Err(e)),
    };
    // Filled (before that its unfilled part reads as zeros), and made by this user or one
    // who may write the file.
    if st.st_nlink == 0 || !current(&st) || !trusted(&st, meta.uid, meta.gid, meta.mode) {
        return None;
    }
    if off >= meta.size {
        return Some(Ok(0));
    }
    let n = (b.len() as u64).min(meta.size - off) as usize;
    // The backing file covers the file as far as it was mapped; the rest is the file's.
    let covered = (st.st_size as u64).saturating_sub(off).min(n as u64) as usize;
    let mut done = 0;
    while done < covered {
        let want = &mut b[done..covered];
        // SAFETY: reading into the caller's buffer, within its length.
        let got = unsafe {
            real::pread64(
                fd,
                want.as_mut_ptr().cast(),
                want.len(),
                (off + done as u64) as i64,
            )
        };
        if got <= 0 {
            return None;
        }
        done += got as usize;
    }
    if done < n {
        return Some(
            of.with_file(|f| f.read_at(&mut b[done..n], off + done as u64).map_err(en))
                .map(|k| done + k),
        );
    }
    Some(Ok(n))
}

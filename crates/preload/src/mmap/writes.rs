//! Writes to a file some process maps: their bytes copied into its backing file, and its
//! size changes zeroing the backing file's tail.

use super::backing::{
    FillLock, backing_name, backing_stat, copy_into_backing, open_existing_backing,
    zero_backing_from, zero_backing_range,
};
use super::reentered;
use crate::session;
use crate::table::OpenFile;
use crate::util::Res;
use engram_core::{Handle, Written};
use libc::c_int;

/// This process wrote `data` at `off` of `of`'s file without a `WriteHold` that covered
/// its commit (nobody mapped the file when the write began, its backing file was not made
/// yet, or it was removed meanwhile); `mapped`: the server counted a shared mapping of the
/// file when it committed the write (`engram_core::Written::mapped`). Makes sure that no
/// mapping's `msync` writes older bytes back over the write once the call returns
/// (`tests/c/mapsync.c`, which maps again and again while another process writes).
pub fn written(of: &OpenFile, data: &[u8], off: u64, mapped: bool) {
    // Why nothing when none was counted: a mapping is counted before it fills its backing
    // file from the file, and gives its count up only after its last write-back. So every
    // mapping made since filled after the commit and holds the bytes, and none filled
    // before is left to take them for a store of older ones. (No load either: the common
    // write to a file nobody maps costs nothing here.)
    if !mapped || data.is_empty() || reentered() {
        return;
    }
    // Why a loop: a mapping counted at the commit may have filled its backing file before
    // it, and `msync`ed after it: the file may have lost the bytes, and a backing file
    // made since may lack them, whether or not that mapping still exists. Each look
    // settles it if it finds a backing file still linked after copying under its lock, or
    // none at all; otherwise it looks again until a write made again finds no mapping
    // counted at its commit. Each new look needs the backing file to have been replaced
    // meanwhile (its last mapping given up, a new one made): bounded only in case a
    // program maps and unmaps without end beside the write.
    let mut counted = true;
    for round in 0..LOOKS {
        if !counted {
            return;
        }
        match look(of, data, off) {
            Look::Done => return,
            Look::Again { counted: c } => counted = c,
        }
        if round > 0 {
            std::thread::yield_now();
        }
    }
}

/// How many times `written` looks before it gives up (see there).
const LOOKS: u32 = 10_000;

/// What one look of `written` found.
enum Look {
    /// The file holds the write's bytes, and every mapping of it does or will.
    Done,
    /// Not known yet: `counted`, whether the server counted a mapping when it committed
    /// the write made again (true when it was not made again).
    Again { counted: bool },
}

/// One look of `written`.
fn look(of: &OpenFile, data: &[u8], off: u64) -> Look {
    if let Some(fd) = backing_now(of.handle()) {
        // Why under the lock's shared side: a write-back of this backing file compares
        // with the file under its exclusive side, so it compares either before the bytes
        // are checked (and any it wrote back are made again here) or after they are in
        // both the file and the backing file.
        let fill = FillLock::shared(fd);
        let again = again_if_lost(of, data, off);
        copy_into_backing(of, fd, data, off);
        // Why linked settles it: the server removes a backing file only once no mapping of
        // it is counted, and a new mapping never joins a removed one; so while it is still
        // linked after the copy, every mapping that can write back is on it, and all
        // later ones fill from a file that holds the bytes.
        let linked = backing_stat(fd).is_ok_and(|st| st.st_nlink != 0);
        drop(fill);
        crate::ownfds::close(fd);
        return match again {
            _ if linked => Look::Done,
            Again::Failed => Look::Done,
            Again::Held => Look::Again { counted: true },
            Again::Made { counted } => Look::Again { counted },
        };
    }
    // No backing file: nobody maps the file, or the mappings counted have not made it yet
    // and so fill it after this point. Why a file that holds the bytes then settles it:
    // it can lose them only to the write-back of a mapping that lacks them, which must
    // have filled while the file lacked them, after an earlier loss; and a loss before
    // this point is seen here, as only this write puts the bytes back.
    match again_if_lost(of, data, off) {
        Again::Held | Again::Failed => Look::Done,
        Again::Made { counted } => Look::Again { counted },
    }
}

/// What `again_if_lost` did.
enum Again {
    /// The file holds the bytes: nothing made again.
    Held,
    /// Made again: `counted`, whether a mapping was counted at its commit.
    Made { counted: bool },
    /// The write made again failed: nothing more can be done for it.
    Failed,
}

/// Make the write of `data` at `off` again, as far as the file reaches, where the file no
/// longer holds its bytes: a mapping's write-back took them for a store of older ones
/// and wrote those back. The call has not returned, so the write taking effect again is an
/// order Linux allows, unless a reader saw these bytes before a later write of the same
/// range, which this undoes (compatibility.md "mmap").
fn again_if_lost(of: &OpenFile, data: &[u8], off: u64) -> Again {
    let within = crate::io::size_of(of).map_or(0, |size| size.saturating_sub(off));
    let again = &data[..data.len().min(within as usize)];
    let mut now = vec![0u8; again.len()];
    if super::load(of, &mut now, off).is_err() || now == again {
        return Again::Held;
    }
    match of.with_file(|f| f.write_in_place(again, off).map_err(crate::util::en)) {
        Ok(w) => Again::Made { counted: w.mapped },
        Err(_) => Again::Failed,
    }
}

/// A write to a file that some process maps, from before its commit until its bytes are in
/// the backing file: a descriptor of the backing file with the fill lock's shared side
/// held. Without it, a compare of the backing file with the file in between (a first
/// mapper writing back what a dead one left) would take the committed bytes not yet
/// copied for a store of older ones, and write those back over the write.
/// The descriptor is one of its own: an open file description's lock is one for all its
/// users, so a mapping's descriptor, shared with other threads, would let one thread's
/// unlock end another's hold.
pub struct WriteHold {
    fd: c_int,
}

impl Drop for WriteHold {
    fn drop(&mut self) {
        FillLock::release(self.fd);
        crate::ownfds::close(self.fd);
    }
}

/// Whether some process maps `of`'s file now (one load of its bit), outside the shim's
/// own mapping code.
pub fn mapped_now(of: &OpenFile) -> bool {
    !reentered() && session::fs().is_ok_and(|fs| fs.mapped_anywhere(of.handle().ino))
}

/// Take a `WriteHold` before writing to `of`'s file, if some process maps it now.
pub fn hold_for_write(of: &OpenFile) -> Option<WriteHold> {
    if reentered() {
        return None;
    }
    let fd = backing_now(of.handle())?;
    FillLock::take_shared(fd);
    Some(WriteHold { fd })
}

/// The write that `hold` (if any) was taken for is done: `data` went to `off`, and
/// `mapped` says whether a mapping was counted at its commit. With a hold whose backing file
/// is still linked, its bytes go into it under the hold (every mapping is on it, and none
/// could compare in between); otherwise as `written` does.
pub fn written_held(of: &OpenFile, hold: Option<WriteHold>, data: &[u8], off: u64, mapped: bool) {
    match hold {
        // Removed meanwhile (the count reached zero while the write waited at the gate): a
        // mapping made since has a new backing file, which may have been filled before the
        // commit and written back after it, under a lock the hold does not exclude.
        Some(h) if backing_stat(h.fd).is_ok_and(|st| st.st_nlink == 0) => {
            drop(h);
            written(of, data, off, mapped);
        }
        Some(h) if !data.is_empty() => copy_into_backing(of, h.fd, data, off),
        Some(_) => {}
        None => written(of, data, off, mapped),
    }
}

/// A write at `off` past the end of a file some process maps, made by `write` under the
/// backing file's fill lock held exclusively (through the gate): the end of file is read
/// (`size`), the write made, the backing file zeroed between the old end and the write, and
/// the bytes copied, so that no other write's copy lands in between. A mapping's stores past
/// the old end in its last page are not the file's, and ext4 zeroes them when a write grows
/// the file; left, they became file data at the mapping's next write-back. (Zeroing under
/// the lock's shared side, which every writer takes, wiped another writer's bytes copied
/// into the gap meanwhile: a reviewer's test lost them in 432 of 2,000 rounds.) For a file
/// the caller saw mapped (`mapped_now`); None when the write does not go past the end, or
/// the file has no backing file yet: the caller writes as usual.
pub fn growing_write(
    of: &OpenFile,
    data: &[u8],
    off: u64,
    size: impl Fn() -> Res<u64>,
    write: impl FnOnce() -> Res<Written>,
) -> Option<Res<(usize, u64)>> {
    let h = of.handle();
    // Within the file (looked at unlocked): no gap, the ordinary write. One that the file
    // grew past meanwhile needs none either; one it shrank under makes a gap the backing
    // file already reads as zeros there (a truncate zeroes it).
    if size().is_ok_and(|s| off.saturating_add(data.len() as u64) <= s) {
        return None;
    }
    let fd = open_existing_backing(&backing_name(h).ok()?)?;
    let r = (|| {
        let fill = FillLock::exclusive(fd);
        let old = size()?;
        let Written {
            len: n,
            end,
            mapped,
        } = write()?;
        let start = end - n as u64;
        // Removed meanwhile (the count reached zero): a mapping made since has a new
        // backing file, which the bytes must reach.
        if backing_stat(fd).is_ok_and(|st| st.st_nlink == 0) {
            drop(fill);
            written(of, &data[..n], start, mapped);
            return Ok((n, end));
        }
        if old < start {
            zero_backing_range(fd, old, start);
        }
        copy_into_backing(of, fd, &data[..n], start);
        Ok((n, end))
    })();
    crate::ownfds::close(fd);
    Some(r)
}

/// Change the size of file `h` with `change` (a truncate, an allocation past the end),
/// `size` reading it. If some process maps the file, its backing file then reads zeros
/// from the lower of the old and new sizes on, as the file does there (on Linux a mapping
/// reads zeros past the end of file in its last page, and faults on later pages); without
/// this, bytes cut off would still show in the mappings and be written back as stores.
/// The sizes, the change and the zeroing hold the backing file's fill lock exclusively, on
/// a description of their own, and writers copy under its shared side clamped to the
/// file's size then: a write's copy lands either before the old size is read (which then
/// includes it) or after the zeroing.
pub fn resizing(
    h: Handle,
    size: impl Fn() -> Res<u64>,
    change: impl FnOnce() -> Res<()>,
) -> Res<()> {
    clearing(h, size, None, change)
}

/// As `resizing`, for a change that may also make `zeroed` (a range, end exclusive) read as
/// zeros: a punched hole or a zeroed range. The backing file reads zeros there too.
pub fn clearing(
    h: Handle,
    size: impl Fn() -> Res<u64>,
    zeroed: Option<(u64, u64)>,
    change: impl FnOnce() -> Res<()>,
) -> Res<()> {
    // Mapped by no process (one load), or inside the shim's own mapping code.
    if reentered() || !session::fs().is_ok_and(|fs| fs.mapped_anywhere(h.ino)) {
        return change();
    }
    let Ok(name) = backing_name(h) else {
        return change();
    };
    // Not there yet: the process that maps the file makes it and fills it from the file,
    // after this change.
    let Some(fd) = open_existing_backing(&name) else {
        return change();
    };
    let r = (|| {
        let _fill = FillLock::exclusive(fd);
        let old = size()?;
        change()?;
        if let Some((from, to)) = zeroed {
            zero_backing_range(fd, from, to);
        }
        zero_backing_from(fd, old.min(size()?));
        Ok(())
    })();
    crate::ownfds::close(fd);
    r
}

/// A descriptor of its own of file `h`'s backing file (see `WriteHold` for why not a
/// mapping's), if some process maps the file and has made it; the caller closes it.
pub(super) fn backing_now(h: Handle) -> Option<c_int> {
    // One load when nobody maps it.
    if !session::fs().is_ok_and(|fs| fs.mapped_anywhere(h.ino)) {
        return None;
    }
    open_existing_backing(&backing_name(h).ok()?)
}

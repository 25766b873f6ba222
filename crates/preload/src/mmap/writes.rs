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
use engram_core::Handle;
use libc::c_int;

/// This process wrote `data` at `off` of `of`'s file without a `WriteHold` (nobody mapped
/// the file when the write began, or its backing file was removed meanwhile): if some
/// process maps that file now, the backing file (which the mappings show) gets the bytes
/// too, as far as it reaches. Under the fill lock the write is first made again, as far
/// as the file reaches: between its commit and now, holding nothing, it could not keep a
/// mapping's `msync` from taking the committed bytes not yet in the backing file for a
/// store of older ones and writing those back over it (`tests/c/mapsync.c`, which remaps
/// while another process writes). Made again only where the file no longer holds the
/// bytes. The call has not returned, so the write taking effect again now is an order
/// Linux allows, unless a reader saw these bytes before a later write of the same range
/// that this undoes (found in review; it needs that write to land in the moment between
/// this one's commit and here, while a first mapping of the file is made).
pub fn written(of: &OpenFile, data: &[u8], off: u64) {
    if data.is_empty() {
        return;
    }
    with_backing(of.handle(), |fd| {
        let _fill = FillLock::shared(fd);
        let within = crate::io::size_of(of).map_or(0, |size| size.saturating_sub(off));
        let again = &data[..data.len().min(within as usize)];
        let mut now = vec![0u8; again.len()];
        let lost = super::load(of, &mut now, off).is_ok() && now != again;
        if lost {
            let _ = of.with_file(|f| f.write_in_place(again, off).map_err(crate::util::en));
        }
        copy_into_backing(of, fd, data, off)
    });
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
    let h = of.handle();
    if reentered() || !session::fs().is_ok_and(|fs| fs.mapped_anywhere(h.ino)) {
        return None;
    }
    let fd = open_existing_backing(&backing_name(h).ok()?)?;
    FillLock::take_shared(fd);
    Some(WriteHold { fd })
}

/// The write that `hold` (if any) was taken for is done: `data` went to `off`. With a
/// hold, its bytes go into the backing file under it; without one, as `written` does (a
/// mapping made since the write began).
pub fn written_held(of: &OpenFile, hold: Option<WriteHold>, data: &[u8], off: u64) {
    match hold {
        // Removed meanwhile (the count reached zero while the write waited at the gate): a
        // mapping made since has a new backing file, which the write must reach.
        Some(h) if backing_stat(h.fd).is_ok_and(|st| st.st_nlink == 0) => {
            drop(h);
            written(of, data, off);
        }
        Some(h) if !data.is_empty() => copy_into_backing(of, h.fd, data, off),
        Some(_) => {}
        None => written(of, data, off),
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
    write: impl FnOnce() -> Res<(usize, u64)>,
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
        let (n, end) = write()?;
        let start = end - n as u64;
        // Removed meanwhile (the count reached zero): a mapping made since has a new
        // backing file, which the bytes must reach.
        if backing_stat(fd).is_ok_and(|st| st.st_nlink == 0) {
            drop(fill);
            written(of, &data[..n], start);
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

/// Run `f` on a descriptor of its own of file `h`'s backing file, if some process maps the
/// file (see `WriteHold` for why not a mapping's).
fn with_backing(h: Handle, f: impl FnOnce(c_int)) {
    if reentered() {
        return;
    }
    // One load when nobody maps it.
    if !session::fs().is_ok_and(|fs| fs.mapped_anywhere(h.ino)) {
        return;
    }
    let Ok(name) = backing_name(h) else {
        return;
    };
    // Not there yet: the process that maps the file makes it and fills it from the file,
    // after this change.
    if let Some(fd) = open_existing_backing(&name) {
        f(fd);
        crate::ownfds::close(fd);
    }
}

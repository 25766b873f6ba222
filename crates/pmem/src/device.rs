//! What backs a pool file: an ordinary file, a block device (its size from
//! `BLKGETSIZE64`), or a device-DAX character device (its size from sysfs).

use std::fmt;
use std::fs::{File, Metadata};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;

use crate::map::PAGE;

/// `_IOR(0x12, 114, size_t)`: the size of a block device in bytes (x86_64 encoding).
const BLKGETSIZE64: libc::c_ulong = 0x8008_1272;

/// What a pool is mapped from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backing {
    /// A regular file (on tmpfs, a DAX file system or any other).
    File,
    /// A block device node, e.g. `/dev/pmem0` or a loop device: mapped through the page
    /// cache (durable with `msync`) unless the kernel grants `MAP_SYNC`.
    BlockDevice,
    /// A device-DAX character device, e.g. `/dev/dax0.0`: always direct access.
    DaxDevice,
    /// Anonymous memory.
    Memory,
}

impl Backing {
    pub fn is_device(self) -> bool {
        matches!(self, Backing::BlockDevice | Backing::DaxDevice)
    }
}

impl fmt::Display for Backing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Backing::File => "file",
            Backing::BlockDevice => "block device",
            Backing::DaxDevice => "device DAX (character device)",
            Backing::Memory => "memory",
        })
    }
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

/// The backing of an open file and, for a device, its usable size (whole pages).
pub(crate) fn probe(file: &File, meta: &Metadata, path: &Path) -> io::Result<(Backing, u64)> {
    let ft = meta.file_type();
    if ft.is_block_device() {
        let mut bytes: u64 = 0;
        // SAFETY: BLKGETSIZE64 writes one u64 through the pointer, which points at `bytes`;
        // the descriptor is open for the duration of the call.
        if unsafe { libc::ioctl(file.as_raw_fd(), BLKGETSIZE64, &mut bytes as *mut u64) } != 0 {
            let e = io::Error::last_os_error();
            return Err(io::Error::new(
                e.kind(),
                format!(
                    "cannot get the size of block device {}: {e}",
                    path.display()
                ),
            ));
        }
        Ok((Backing::BlockDevice, bytes / PAGE * PAGE))
    } else if ft.is_char_device() {
        let (major, minor) = (libc::major(meta.rdev()), libc::minor(meta.rdev()));
        let sys = format!("/sys/dev/char/{major}:{minor}/size");
        let text = std::fs::read_to_string(&sys).map_err(|_| {
            invalid(format!(
                "{} is a character device but not a device-DAX device ({sys} is missing)",
                path.display()
            ))
        })?;
        let bytes: u64 = text
            .trim()
            .parse()
            .map_err(|_| invalid(format!("{sys} does not hold a size: {:?}", text.trim())))?;
        Ok((Backing::DaxDevice, bytes / PAGE * PAGE))
    } else if ft.is_file() {
        Ok((Backing::File, meta.len()))
    } else {
        Err(invalid(format!(
            "{} is neither a file nor a block or DAX device",
            path.display()
        )))
    }
}

/// The usable size of the device at `path` (whole pages), or None if it is a regular file.
pub fn device_size(path: &Path) -> io::Result<Option<u64>> {
    let file = File::open(path)?;
    let meta = file.metadata()?;
    let (backing, size) = probe(&file, &meta, path)?;
    Ok(backing.is_device().then_some(size))
}

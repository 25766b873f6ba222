//! mknod: FIFOs, sockets, character and block devices, and regular files. A node other than
//! a regular file holds nothing but its inode: a device's number is kept in the root word
//! (docs/format.md), which no other use of such an inode has.

use super::Content;
use crate::error::{Error, Result};
use crate::inode::{InodeData, S_IFBLK, S_IFCHR, S_IFDIR, S_IFIFO, S_IFMT, S_IFREG, S_IFSOCK};
use crate::inode::{field, is_device};
use crate::perm::{self, Creds, W, X};
use crate::request::{Handle, Response};
use crate::server::Server;

/// The file type mknod(2) makes of `mode` and `rdev`, refused as Linux refuses it before it
/// looks the name up (`may_mknod`): type 0 is a regular file, a directory is EPERM (mkdir
/// makes those), an unknown type EINVAL; so is a device number wider than the 32 bits the
/// system call takes (glibc's check).
pub fn mknod_kind(mode: u32, rdev: u64) -> Result<u32> {
    if rdev > u64::from(u32::MAX) {
        return Err(Error::EINVAL);
    }
    match mode & S_IFMT {
        0 => Ok(S_IFREG),
        k @ (S_IFREG | S_IFIFO | S_IFCHR | S_IFBLK | S_IFSOCK) => Ok(k),
        S_IFDIR => Err(Error::EPERM),
        _ => Err(Error::EINVAL),
    }
}

impl Server {
    pub(in crate::server) fn mknod(
        &mut self,
        c: &Creds,
        parent: Handle,
        name: &[u8],
        mode: u32,
        rdev: u64,
    ) -> Result<Response> {
        let kind = mknod_kind(mode, rdev)?;
        let mode = kind | (mode & 0o7777);
        if kind == S_IFREG {
            // A regular file as an exclusive create makes it, never opened.
            return self.create(c, parent, name, mode, true);
        }
        let (p, space) = self.parent_of_new(parent, name)?;
        // Linux asks for write and search permission on the directory first, then for
        // CAP_MKNOD: root alone makes devices.
        perm::check(c, &p, W | X)?;
        let content = if is_device(kind) {
            if !c.is_root() {
                return Err(Error::EPERM);
            }
            Content::Device(rdev)
        } else {
            // Linux keeps no number for a FIFO or a socket, whatever the caller passed.
            Content::Empty
        };
        let handle = self.make_node(c, parent, (&p, space), name, mode, (content, None))?;
        Ok(Response::Entry {
            handle,
            created: true,
        })
    }

    /// Write a new (unpublished) device inode's number into its root word.
    pub(super) fn stage_device_number(&mut self, ino: u64, d: &mut InodeData, rdev: u64) {
        d.root = rdev;
        let at = self.geo.inode_addr(ino) + field::ROOT;
        self.pool.write(at, &rdev.to_le_bytes());
        self.pool.flush(at, 8);
    }
}

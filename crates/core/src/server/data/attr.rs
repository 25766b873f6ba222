//! Attributes: setattr (mode, owner, times, and size through truncate).

use super::Staged;
use crate::error::{Error, Result};
use crate::index::MAX_FILE_SIZE;
use crate::inode::field;
use crate::perm::{self, Creds, W};
use crate::request::{Handle, Response, SetAttr, SetTime};
use crate::server::{ClientId, Server};

impl Server {
    /// Before a change of `h`'s data by a client (a write's commit, fallocate, a hole):
    /// clear its set-id bits as Linux does for a writer without CAP_FSETID
    /// (`perm::privs_killed_by_write`), here rather than at the client's asking: a client
    /// is not trusted to (one that skipped it changed a root-owned set-user-ID file and
    /// kept the bit, found in review), and it cost writes a load and a round trip. Nothing
    /// for root's writes; one look at the inode for others'.
    pub(in crate::server) fn kill_privs_for_write(
        &mut self,
        client: ClientId,
        c: &Creds,
        h: Handle,
    ) -> Result<()> {
        if c.is_root() {
            return Ok(());
        }
        let d = self.inode(h)?;
        if perm::privs_killed_by_write(c, &d) == 0 {
            return Ok(());
        }
        let written = SetAttr {
            written: true,
            ..SetAttr::default()
        };
        self.setattr(client, c, h, written).map(drop)
    }

    pub(in crate::server) fn setattr(
        &mut self,
        client: ClientId,
        c: &Creds,
        h: Handle,
        a: SetAttr,
    ) -> Result<Response> {
        let d = self.inode(h)?;
        let now = self.now();
        let mut out = Vec::new();
        let mut staged = Staged::default();
        let mut mode = d.mode;
        if let Some(m) = a.mode {
            // A symlink's mode means nothing: Linux refuses to change it (fchmodat2 with
            // AT_SYMLINK_NOFOLLOW, lchmod), before any permission check.
            if d.mode & libc::S_IFMT == libc::S_IFLNK {
                return Err(Error::with_msg(
                    libc::EOPNOTSUPP,
                    "a symbolic link's mode cannot be changed",
                ));
            }
            if !c.owns(&d) {
                return Err(Error::EPERM);
            }
            mode = (d.mode & libc::S_IFMT) | (m & 0o7777);
            if !c.is_root() && !c.in_group(d.gid) {
                mode &= !libc::S_ISGID;
            }
        }
        if a.uid.is_some() || a.gid.is_some() {
            let uid = a.uid.unwrap_or(d.uid);
            let gid = a.gid.unwrap_or(d.gid);
            if !c.is_root()
                && (uid != d.uid || c.uid != d.uid || (gid != d.gid && !c.in_group(gid)))
            {
                return Err(Error::EPERM);
            }
            if uid != d.uid || gid != d.gid {
                out.push(self.set32(h.ino, field::UID, uid));
                out.push(self.set32(h.ino, field::GID, gid));
            }
        }
        if a.chown || a.uid.is_some() || a.gid.is_some() {
            // As Linux does on every chown, also to the same owner or to -1, -1. That one
            // asks no permission, but a mode change does: someone who does not own a
            // set-id file may not clear its bits with it (EPERM, as Linux).
            let kill = perm::privs_killed_by_chown(c, &d);
            if kill != 0 && !c.owns(&d) {
                return Err(Error::EPERM);
            }
            mode &= !kill;
        }
        if a.written {
            if self.check_writer(client, h).is_err() {
                perm::check(c, &d, W)?;
            }
            mode &= !perm::privs_killed_by_write(c, &d);
        }
        for (t, f) in [(a.atime, field::ATIME), (a.mtime, field::MTIME)] {
            match t {
                None => {}
                Some(SetTime::Now) => {
                    if !c.owns(&d) {
                        perm::check(c, &d, W)?;
                    }
                    out.push(self.set64(h.ino, f, now as u64));
                }
                Some(SetTime::Ns(ns)) => {
                    if !c.owns(&d) {
                        return Err(Error::EPERM);
                    }
                    out.push(self.set64(h.ino, f, ns as u64));
                }
            }
        }
        if let Some(size) = a.size {
            if d.is_dir() {
                return Err(Error::EISDIR);
            }
            if !d.is_reg() {
                return Err(Error::EINVAL);
            }
            if size > MAX_FILE_SIZE {
                return Err(Error::EFBIG);
            }
            // Through a description open for writing (ftruncate), permission was checked
            // when it was opened.
            if !(a.through_open_file && self.check_writer(client, h).is_ok()) {
                perm::check(c, &d, W)?;
            }
            mode &= !perm::privs_killed_by_write(c, &d);
            staged = self.stage_truncate(client, h.ino, &d, size, &mut out)?;
            if a.mtime.is_none() {
                out.push(self.set64(h.ino, field::MTIME, now as u64));
            }
        }
        if mode != d.mode {
            out.push(self.set32(h.ino, field::MODE, mode));
        }
        out.push(self.set64(h.ino, field::CTIME, now as u64));
        if let Err(e) = self.commit(&out, &[h.ino]) {
            self.release_data_pages(&staged.fresh);
            self.release_nodes(&staged.new_nodes);
            return Err(e);
        }
        self.retire(&staged.retired);
        Ok(Response::Done)
    }
}

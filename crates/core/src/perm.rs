//! POSIX permission checks for a caller's credentials.

use crate::error::{Error, Result};
use crate::inode::InodeData;

pub const R: u32 = 4;
pub const W: u32 = 2;
pub const X: u32 = 1;

/// Who is asking.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Creds {
    pub uid: u32,
    pub gid: u32,
    pub groups: Vec<u32>,
}

impl Creds {
    pub fn root() -> Creds {
        Creds {
            uid: 0,
            gid: 0,
            groups: Vec::new(),
        }
    }

    /// The effective credentials of this process.
    pub fn current() -> Creds {
        // SAFETY: these libc calls only read the calling process's credentials.
        let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
        // SAFETY: a zero-length query returns the number of supplementary groups.
        let n = unsafe { libc::getgroups(0, std::ptr::null_mut()) };
        let mut groups = vec![0; n.max(0) as usize];
        if n > 0 {
            // SAFETY: `groups` has room for `n` entries.
            let got = unsafe { libc::getgroups(n, groups.as_mut_ptr()) };
            groups.truncate(got.max(0) as usize);
        }
        Creds { uid, gid, groups }
    }

    pub fn is_root(&self) -> bool {
        self.uid == 0
    }

    pub fn in_group(&self, gid: u32) -> bool {
        self.gid == gid || self.groups.contains(&gid)
    }

    pub fn owns(&self, ino: &InodeData) -> bool {
        self.is_root() || self.uid == ino.uid
    }

    /// The three bits (rwx) of `mode` that apply to this user: the owner's, the group's or
    /// the others', for a file of owner `uid` and group `gid`.
    pub fn class_bits(&self, uid: u32, gid: u32, mode: u32) -> u32 {
        let bits = if self.uid == uid {
            mode >> 6
        } else if self.in_group(gid) {
            mode >> 3
        } else {
            mode
        };
        bits & 7
    }
}

/// Check `want` (a combination of R, W, X) against the inode's mode bits.
pub fn check(c: &Creds, ino: &InodeData, want: u32) -> Result<()> {
    if c.is_root() {
        // Root may read and write anything, and execute what anybody may execute.
        if want & X == 0 || ino.is_dir() || ino.mode & 0o111 != 0 {
            return Ok(());
        }
        return Err(Error::EACCES);
    }
    if c.class_bits(ino.uid, ino.gid, ino.mode) & want == want {
        Ok(())
    } else {
        Err(Error::EACCES)
    }
}

/// Whether the system protects hard links (`fs.protected_hardlinks`, read once per
/// server; taken as set when it cannot be read, the safer answer).
pub fn hardlinks_protected() -> bool {
    std::fs::read_to_string("/proc/sys/fs/protected_hardlinks").map_or(true, |v| v.trim() != "0")
}

/// Linux's `may_linkat` with `fs.protected_hardlinks` set: a user who does not own `t` may
/// link to it only if it is a regular file, neither setuid nor setgid-executable, that
/// they may read and write (EPERM otherwise).
pub fn check_link_source(c: &Creds, t: &InodeData) -> Result<()> {
    if c.owns(t) {
        return Ok(());
    }
    let setgid_exec = libc::S_ISGID | libc::S_IXGRP;
    let safe = t.is_reg()
        && t.mode & libc::S_ISUID == 0
        && t.mode & setgid_exec != setgid_exec
        && check(c, t, R | W).is_ok();
    if safe { Ok(()) } else { Err(Error::EPERM) }
}

/// The set-user-ID and set-group-ID bits of `d` that Linux clears when `c` writes or
/// truncates it (`file_remove_privs`): none for a caller with CAP_FSETID (root here) or a
/// file that is not regular.
pub fn privs_killed_by_write(c: &Creds, d: &InodeData) -> u32 {
    if !d.is_reg() || c.is_root() {
        return 0;
    }
    privs_to_kill(c, d)
}

/// The bits Linux clears on a chown of `d` by `c`, whoever the caller and whatever the new
/// owner (`chown_common`): none for a directory.
pub fn privs_killed_by_chown(c: &Creds, d: &InodeData) -> u32 {
    if d.is_dir() {
        return 0;
    }
    privs_to_kill(c, d)
}

/// Set-user-ID always; set-group-ID with group execute, and without it (a mandatory-lock
/// mark) only for a caller neither in the file's group nor privileged
/// (`setattr_should_drop_sgid`).
fn privs_to_kill(c: &Creds, d: &InodeData) -> u32 {
    let mut kill = d.mode & libc::S_ISUID;
    if d.mode & libc::S_ISGID != 0
        && (d.mode & libc::S_IXGRP != 0 || !(c.is_root() || c.in_group(d.gid)))
    {
        kill |= libc::S_ISGID;
    }
    kill
}

/// The sticky-bit rule for removing or renaming `victim` out of `dir`.
pub fn check_sticky(c: &Creds, dir: &InodeData, victim: &InodeData) -> Result<()> {
    if dir.mode & libc::S_ISVTX != 0 && !c.is_root() && c.uid != dir.uid && c.uid != victim.uid {
        return Err(Error::EPERM);
    }
    Ok(())
}

//! The wake region: one page that every client maps writable, holding the word a client
//! rings when it posts a request while the server sleeps. The server sleeps on this one
//! word: a futex wait on every client's own doorbell instead (`futex_waitv`) takes at most
//! 128 words, which capped the clients of a daemon. A client can wake the server for
//! nothing with it, or put back the value the server noted before it waits, so that the
//! server sleeps through another's ring: a client whose reply is late rings again before
//! each of its sleeps (`Remote::wait_reply`), so another client can delay its request but
//! not stop it.

use super::shm::{Mapping, bad, fd_len, memfd, mmap, seal};
use std::io;
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::sync::atomic::AtomicU32;

const LEN: usize = 4096;

pub struct Wake {
    map: Arc<Mapping>,
}

impl Wake {
    /// A new region (made once by the server) and its memfd, sealed against resizing so
    /// that no client can make the server fault.
    pub fn create() -> io::Result<(Wake, OwnedFd)> {
        let fd = memfd(c"engram-wake", LEN)?;
        seal(
            &fd,
            libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL,
        )?;
        Ok((Wake::attach(&fd)?, fd))
    }

    /// Map a region received from the server.
    pub fn attach(fd: &OwnedFd) -> io::Result<Wake> {
        if fd_len(fd)? != LEN {
            return Err(bad("not an EngramFS wake region"));
        }
        let ptr = mmap(Some(fd), LEN, libc::PROT_READ | libc::PROT_WRITE, None)?;
        Ok(Wake {
            map: Arc::new(Mapping { ptr, len: LEN }),
        })
    }

    pub fn word(&self) -> &AtomicU32 {
        // SAFETY: word 0 of a live page-sized mapping: in bounds and aligned, and only
        // accessed atomically.
        unsafe { &*(self.map.ptr as *const AtomicU32) }
    }
}

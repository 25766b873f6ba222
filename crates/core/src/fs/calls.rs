//! Requests to the server: through the in-process server (refused in a forked child) or
//! the daemon's transport, and the calls whose answers the client reads.

use super::{Fs, IN_PROCESS_CLIENT, Transport, lock};
use crate::error::{Error, Result};
use crate::request::{Handle, Request, Response, WriteCheck};
use crate::server::Server;
use std::sync::atomic::Ordering;
use std::sync::{Mutex, MutexGuard};

impl Fs {
    /// The in-process server, unless this process is a fork of the one that opened the
    /// pool (`forks.rs`): the child's copy of the server's state would write metadata over
    /// the parent's in the pool they share (EIO).
    pub(super) fn server<'a>(&self, m: &'a Mutex<Server>) -> Result<MutexGuard<'a, Server>> {
        self.not_forked()?;
        Ok(lock(m))
    }

    /// Send a request to the server. In-process, with this view's credentials; through the
    /// daemon, the server uses the credentials of the connection.
    pub(crate) fn call(&self, req: Request) -> Result<Response> {
        match &self.core.transport {
            Transport::InProcess(m) => self.server(m)?.handle(IN_PROCESS_CLIENT, &self.creds, req),
            Transport::Remote(r) => r.call(&req),
        }
    }

    /// Commit a write: `Request::CommitWrite`, with no owned copy of the page list when
    /// the server is in this process. Returns whether some process mapped the file shared
    /// when the commit was made (`Response::Committed`).
    pub(crate) fn commit_write(
        &self,
        target: Handle,
        pages: &[(u64, u64)],
        end: u64,
        check: Option<WriteCheck>,
    ) -> Result<bool> {
        match &self.core.transport {
            Transport::InProcess(m) => self.server(m)?.commit_write(
                IN_PROCESS_CLIENT,
                &self.creds,
                target,
                pages,
                end,
                check.as_ref(),
            ),
            Transport::Remote(r) => r
                .call_with(|w| {
                    crate::wire::encode_commit_write(target, pages, end, check.as_ref(), w)
                })
                .and_then(|r| match r {
                    Response::Committed { mapped } => Ok(mapped),
                    _ => Err(Error::EIO),
                }),
        }
    }

    /// Close a handle (straight to the server when it is in this process).
    pub(crate) fn close_handle(&self, target: Handle, write: bool) -> Result<()> {
        // A forked child's copy of its parent's open file: closing it is the parent's to do
        // (posted through the connection they share, it closed the parent's open, whose
        // writes then failed with EBADF; found in review).
        if self.core.forked() {
            return Ok(());
        }
        let last_writer = write && self.core.writers.fetch_sub(1, Ordering::AcqRel) == 1;
        match &self.core.transport {
            Transport::InProcess(m) => self
                .server(m)?
                .close(IN_PROCESS_CLIENT, target, write)
                .map(drop),
            // Nothing waits for a close's answer: it is posted, and the next request waits.
            Transport::Remote(r) => {
                r.post(&Request::Close { target, write })?;
                if last_writer {
                    self.give_back_reservation(r)?;
                }
                Ok(())
            }
        }
    }

    /// This process maps `target` shared (`on`), or gave one such mapping up. While any
    /// process maps a file, `mapped_anywhere` tells every process's writers so (the shim
    /// then writes their bytes into the mappings' backing file too). Giving up is posted.
    pub fn set_mapped(&self, target: Handle, on: bool) -> Result<()> {
        match &self.core.transport {
            // The server's own process makes the backing files: it can always tend them.
            Transport::InProcess(m) => self
                .server(m)?
                .mapped(IN_PROCESS_CLIENT, None, target, on)
                .map(drop),
            Transport::Remote(r) if on => r.call(&Request::Mapped { target, on }).map(drop),
            Transport::Remote(r) => r.post(&Request::Mapped { target, on }),
        }
    }

    /// This process reaped (or saw the exit of) process `pid`: through a daemon, wait until
    /// the daemon has disconnected that process's clients, so that what it does at their
    /// death (their mappings' stores written back, `server/backing.rs`) is done before this
    /// process goes on, as a child's stores are visible on Linux once `waitpid` returns.
    /// Allocates nothing: a wait may run in a signal handler.
    pub fn client_gone(&self, pid: u32) -> Result<()> {
        match &self.core.transport {
            Transport::InProcess(_) => Ok(()),
            Transport::Remote(r) => r.call_unanswered(&crate::wire::encode_gone(pid)),
        }
    }

    /// Whether some process maps inode `ino` shared (see `set_mapped`), or gave its last
    /// mapping up and still holds it open (its count lingers); one load.
    pub fn mapped_anywhere(&self, ino: u64) -> bool {
        self.core.shared.mapped.contains(ino)
    }

    /// Whether the backing file of inode `ino` may hold stores the file has not got: some
    /// mapping of it is live (not lingering), or a dead mapper's stores wait to be written
    /// back. Otherwise a read can read the file itself. One load.
    pub fn mapped_live(&self, ino: u64) -> bool {
        self.core.shared.mapped_live.contains(ino)
    }

    /// Send an unlink; in-process, the name is not copied.
    pub(crate) fn call_unlink(&self, parent: Handle, name: &[u8], dir: bool) -> Result<()> {
        match &self.core.transport {
            Transport::InProcess(m) => self.server(m)?.unlink_named(&self.creds, parent, name, dir),
            Transport::Remote(r) => r.call(&Request::Unlink {
                parent,
                name: name.to_vec(),
                dir,
            }),
        }
        .map(drop)
    }

    /// Send a rename; in-process, the names are not copied.
    pub(crate) fn call_rename(
        &self,
        (from, from_name): (Handle, &[u8]),
        (to, to_name): (Handle, &[u8]),
        flags: u32,
    ) -> Result<()> {
        match &self.core.transport {
            Transport::InProcess(m) => {
                self.server(m)?
                    .rename_named(&self.creds, (from, from_name), (to, to_name), flags)
            }
            Transport::Remote(r) => r.call(&Request::Rename {
                from,
                from_name: from_name.to_vec(),
                to,
                to_name: to_name.to_vec(),
                flags,
            }),
        }
        .map(drop)
    }

    pub(crate) fn call_entry(&self, req: Request) -> Result<(Handle, bool)> {
        entry(self.call(req)?)
    }

    /// Create a regular file: its handle and whether it was made. In-process, the name is
    /// not copied.
    pub(crate) fn call_create(
        &self,
        parent: Handle,
        name: &[u8],
        mode: u32,
        excl: bool,
        open: Option<bool>,
    ) -> Result<(Handle, bool)> {
        entry(match &self.core.transport {
            Transport::InProcess(m) => self.server(m)?.create_named(
                IN_PROCESS_CLIENT,
                &self.creds,
                (parent, name),
                (mode, excl),
                open,
            ),
            Transport::Remote(r) => r.call(&Request::Create {
                parent,
                name: name.to_vec(),
                mode,
                excl,
                open,
            }),
        }?)
    }
}

fn entry(r: Response) -> Result<(Handle, bool)> {
    match r {
        Response::Entry { handle, created } => Ok((handle, created)),
        _ => Err(Error::EIO),
    }
}

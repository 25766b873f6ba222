//! Creates, unlinks and renames with their names borrowed: the in-process transport calls
//! these directly, so such a request copies no name (a `Request` owns its names).

use super::{ClientId, Server};
use crate::error::{Error, Result};
use crate::perm::Creds;
use crate::request::{Handle, Response};

impl Server {
    pub(super) fn running(&self) -> Result<()> {
        match self.closed {
            true => Err(Error::with_msg(libc::EIO, "the pool has been unmounted")),
            false => Ok(()),
        }
    }

    /// `Request::Create`: a regular file, opened for `client` if `open` says so.
    pub(crate) fn create_named(
        &mut self,
        client: ClientId,
        creds: &Creds,
        (parent, name): (Handle, &[u8]),
        (mode, excl): (u32, bool),
        open: Option<bool>,
    ) -> Result<Response> {
        self.running()?;
        let r = self.create(creds, parent, name, mode, excl);
        if let Ok(Response::Entry {
            handle,
            created: true,
        }) = &r
        {
            self.created_by(client, handle.ino, open);
        }
        r
    }

    /// `Request::Unlink`.
    pub(crate) fn unlink_named(
        &mut self,
        creds: &Creds,
        parent: Handle,
        name: &[u8],
        dir: bool,
    ) -> Result<Response> {
        self.running()?;
        self.unlink(creds, parent, name, dir)
    }

    /// `Request::Rename`.
    pub(crate) fn rename_named(
        &mut self,
        creds: &Creds,
        (from, from_name): (Handle, &[u8]),
        (to, to_name): (Handle, &[u8]),
        flags: u32,
    ) -> Result<Response> {
        self.running()?;
        self.rename(creds, from, from_name, to, to_name, flags)
    }
}

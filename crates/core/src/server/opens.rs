//! Open handles: which clients hold which inodes open (and for writing), and the files a
//! client has just created.

use super::{CREATED_TOKENS, ClientId, Server};
use crate::error::{Error, Result};
use crate::inode::field;
use crate::perm::Creds;
use crate::request::{Handle, Response};

impl Server {
    /// `client` has created `ino`: open it (for writing if `Some(true)`) when the create
    /// request asked for that, else remember that the client may open it for writing once.
    pub(super) fn created_by(&mut self, client: ClientId, ino: u64, open: Option<bool>) {
        match open {
            // The creator may write whatever mode it gave the file (open(2)).
            Some(write) => self.count_open(client, ino, write),
            None => {
                let v = self.created.entry(client).or_default();
                if v.len() >= CREATED_TOKENS {
                    v.remove(0);
                }
                v.push(ino);
            }
        }
    }

    /// Open a handle for `client`. An open for writing needs write permission (checked with
    /// the caller's credentials) unless the client has just created the file.
    pub(super) fn open_handle(
        &mut self,
        client: ClientId,
        creds: &Creds,
        h: Handle,
        write: bool,
    ) -> Result<Response> {
        let d = self.inode(h)?;
        let created = match self.created.get_mut(&client) {
            Some(v) => match v.iter().position(|&i| i == h.ino) {
                Some(at) => {
                    v.remove(at);
                    true
                }
                None => false,
            },
            None => false,
        };
        if write {
            if d.is_dir() {
                return Err(Error::EISDIR);
            }
            if !created {
                crate::perm::check(creds, &d, crate::perm::W)?;
            }
        }
        self.count_open(client, h.ino, write);
        Ok(Response::Done)
    }

    /// One more open handle of `ino` held by `client`.
    fn count_open(&mut self, client: ClientId, ino: u64, write: bool) {
        *self.open.entry(ino).or_default() += 1;
        let o = self.opened_by.entry((client, ino)).or_default();
        o.all += 1;
        o.write += write as u32;
    }

    /// Refuse (EBADF) a change of file contents from a client that does not hold the file
    /// open for writing.
    pub(super) fn check_writer(&self, client: ClientId, h: Handle) -> Result<()> {
        let writes = self.opened_by.get(&(client, h.ino)).map_or(0, |o| o.write);
        if writes == 0 {
            return Err(Error::with_msg(
                libc::EBADF,
                "the file is not open for writing by this client",
            ));
        }
        Ok(())
    }

    pub(super) fn close(&mut self, client: ClientId, h: Handle, write: bool) -> Result<Response> {
        self.check_handle(h)?;
        let mine = self
            .opened_by
            .get_mut(&(client, h.ino))
            .ok_or(Error::EBADF)?;
        if write && mine.write == 0 {
            return Err(Error::EBADF);
        }
        mine.all -= 1;
        mine.write -= write as u32;
        if mine.all == 0 {
            self.opened_by.remove(&(client, h.ino));
        }
        self.release_open(h.ino)?;
        Ok(Response::Done)
    }

    /// Drop one open reference; the last one of an inode with no name frees it.
    pub(super) fn release_open(&mut self, ino: u64) -> Result<()> {
        let Some(count) = self.open.get_mut(&ino) else {
            return Ok(());
        };
        *count -= 1;
        if *count == 0 {
            self.open.remove(&ino);
            let (mode, nlink) = (
                self.u32_field(ino, field::MODE),
                self.u32_field(ino, field::NLINK),
            );
            if mode != 0 && nlink == 0 {
                self.free_inode(ino)?;
            }
        }
        Ok(())
    }

    pub(crate) fn is_open(&self, ino: u64) -> bool {
        self.open.contains_key(&ino)
    }
}

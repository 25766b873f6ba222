//! Open handles: which clients hold which inodes open (and for writing), and the files a
//! client has just created.

use super::{CREATED_TOKENS, ClientId, Server};
use crate::error::{Error, Result};
use crate::inode::field;
use crate::perm::Creds;
use crate::request::{Handle, Response};

/// Handles one client holds open on one inode, and how many of them may write.
#[derive(Clone, Copy, Debug, Default)]
struct Holder {
    client: ClientId,
    all: u32,
    write: u32,
}

/// The clients holding one inode open. The first one is kept inline: an open by a single
/// client (the usual case) allocates nothing, and an open or a close hashes once.
#[derive(Debug, Default)]
pub(super) struct Holders {
    /// Empty (`all == 0`) only when `more` is empty too.
    first: Holder,
    more: Vec<Holder>,
}

impl Holders {
    fn is_empty(&self) -> bool {
        self.first.all == 0
    }

    fn find(&mut self, client: ClientId) -> Option<&mut Holder> {
        if self.first.all > 0 && self.first.client == client {
            return Some(&mut self.first);
        }
        self.more.iter_mut().find(|h| h.client == client)
    }

    fn add(&mut self, client: ClientId, write: bool) {
        let h = if self.is_empty() {
            self.first.client = client;
            &mut self.first
        } else if self.first.client == client {
            &mut self.first
        } else {
            match self.more.iter().position(|h| h.client == client) {
                Some(i) => &mut self.more[i],
                None => {
                    self.more.push(Holder {
                        client,
                        ..Holder::default()
                    });
                    self.more.last_mut().expect("just pushed")
                }
            }
        };
        h.all += 1;
        h.write += write as u32;
    }

    /// One handle of `client` closed; EBADF if it holds none (none for writing, if `write`).
    fn release(&mut self, client: ClientId, write: bool) -> Result<()> {
        let mine = self.find(client).ok_or(Error::EBADF)?;
        if write && mine.write == 0 {
            return Err(Error::EBADF);
        }
        mine.all -= 1;
        mine.write -= write as u32;
        if mine.all == 0 {
            self.prune(client);
        }
        Ok(())
    }

    /// How many clients hold the inode open for writing, counting to two at most.
    fn writers(&self) -> usize {
        let first = (self.first.write > 0) as usize;
        first
            + self
                .more
                .iter()
                .filter(|h| h.write > 0)
                .take(2 - first)
                .count()
    }

    /// Whether a client other than `client` holds the inode open for writing.
    fn others_write(&self, client: ClientId) -> bool {
        let other = |h: &Holder| h.client != client && h.write > 0;
        other(&self.first) || self.more.iter().any(other)
    }

    /// Drop `client`'s holder once it holds nothing, keeping `first` filled if any is left.
    fn prune(&mut self, client: ClientId) {
        if self.first.client == client && self.first.all == 0 {
            self.first = self.more.pop().unwrap_or_default();
        } else {
            self.more.retain(|h| h.client != client || h.all > 0);
        }
    }
}

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
        if d.is_special() {
            // The pool holds no data for a FIFO, device or socket: nothing to open here.
            return Err(crate::fs::special_open_error(d.mode));
        }
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
        let holders = self.open.entry(ino).or_default();
        holders.add(client, write);
        if write {
            let several = holders.writers() > 1;
            self.show_writers(ino, several);
        }
    }

    /// Publish whether several clients hold `ino` open for writing (before the reply to the
    /// open that makes them several: that client then copies what it writes beyond the end
    /// of file instead of writing it in place).
    fn show_writers(&self, ino: u64, several: bool) {
        if self.shared.several_writers.contains(ino) != several {
            self.shared.several_writers.set(ino, several);
        }
    }

    /// Whether a client other than `client` holds `ino` open for writing: one of them may
    /// be writing in place beyond the end of file (`zero_beyond_eof`).
    pub(super) fn others_write(&self, client: ClientId, ino: u64) -> bool {
        self.open.get(&ino).is_some_and(|h| h.others_write(client))
    }

    /// Refuse (EBADF) a change of file contents from a client that does not hold the file
    /// open for writing.
    pub(super) fn check_writer(&mut self, client: ClientId, h: Handle) -> Result<()> {
        let writes = self
            .open
            .get_mut(&h.ino)
            .and_then(|o| o.find(client))
            .map_or(0, |o| o.write);
        if writes == 0 {
            return Err(Error::with_msg(
                libc::EBADF,
                "the file is not open for writing by this client",
            ));
        }
        Ok(())
    }

    /// `Request::Close` (the in-process transport calls it directly).
    pub(crate) fn close(&mut self, client: ClientId, h: Handle, write: bool) -> Result<Response> {
        self.running()?;
        self.check_handle(h)?;
        let holders = self.open.get_mut(&h.ino).ok_or(Error::EBADF)?;
        holders.release(client, write)?;
        let (several, empty) = (holders.writers() > 1, holders.is_empty());
        let gone = holders.find(client).is_none();
        if gone {
            self.closed_mapped(client, h.ino);
        }
        if write {
            self.show_writers(h.ino, several);
        }
        if empty {
            self.open.remove(&h.ino);
            self.free_if_unlinked(h.ino)?;
        }
        Ok(Response::Done)
    }

    /// Whether `client` holds `ino` open.
    pub(super) fn holds_open(&mut self, client: ClientId, ino: u64) -> bool {
        self.open
            .get_mut(&ino)
            .is_some_and(|h| h.find(client).is_some())
    }

    /// The last handle of `ino` is closed: free it if it has no name left and is not the
    /// parent of a removed directory still kept.
    fn free_if_unlinked(&mut self, ino: u64) -> Result<()> {
        // Most files closed still have a name: one load tells.
        if self.u32_field(ino, field::NLINK) == 0
            && self.u32_field(ino, field::MODE) != 0
            && !self.kept_parents.contains_key(&ino)
        {
            self.free_kept(ino)?;
        }
        Ok(())
    }

    /// Free `ino`, kept without a name until now. A directory no longer keeps its parent,
    /// which goes too if it was removed meanwhile and nothing else keeps it (and so on up).
    fn free_kept(&mut self, mut ino: u64) -> Result<()> {
        loop {
            let d = self.read_inode(ino);
            self.free_inode(ino)?;
            if !d.is_dir() {
                return Ok(());
            }
            let p = d.parent;
            let Some(n) = self.kept_parents.get_mut(&p) else {
                return Ok(());
            };
            *n -= 1;
            if *n > 0 {
                return Ok(());
            }
            self.kept_parents.remove(&p);
            if self.is_open(p)
                || self.u32_field(p, field::NLINK) != 0
                || self.u32_field(p, field::MODE) == 0
            {
                return Ok(());
            }
            ino = p;
        }
    }

    /// Whether `ino` stays when its last name goes: open, or the parent of a removed
    /// directory that stays (Linux keeps a directory in use, and its `..`, until the last
    /// user lets go: `stat("..")` and `chdir("..")` in a removed current directory).
    pub(crate) fn in_use(&self, ino: u64) -> bool {
        self.is_open(ino) || self.kept_parents.contains_key(&ino)
    }

    /// Directory `ino`, in `parent`, has just been removed: if it stays (in use), it keeps
    /// `parent` until it goes.
    pub(crate) fn removed_dir(&mut self, ino: u64, parent: u64) {
        if self.in_use(ino) {
            *self.kept_parents.entry(parent).or_default() += 1;
        }
    }

    /// A client is gone: drop every handle it held (freeing what no longer has a name or
    /// a handle) and the files it may still open for writing.
    pub(super) fn release_client(&mut self, client: ClientId) {
        self.created.remove(&client);
        let mut closed = Vec::new();
        let several = &self.shared.several_writers;
        self.open.retain(|&ino, holders| {
            if let Some(h) = holders.find(client) {
                h.all = 0;
                holders.prune(client);
                if several.contains(ino) && holders.writers() < 2 {
                    several.set(ino, false);
                }
            }
            if holders.is_empty() {
                closed.push(ino);
            }
            !holders.is_empty()
        });
        for ino in closed {
            let _ = self.free_if_unlinked(ino);
        }
    }

    pub(crate) fn is_open(&self, ino: u64) -> bool {
        self.open.contains_key(&ino)
    }
}

#[cfg(test)]
mod tests {
    use super::Holders;

    fn count(h: &mut Holders, client: u64) -> (u32, u32) {
        h.find(client).map_or((0, 0), |h| (h.all, h.write))
    }

    fn close(h: &mut Holders, client: u64, write: bool) {
        h.release(client, write).unwrap();
    }

    #[test]
    fn holders_count_per_client_and_empty_only_when_all_are_closed() {
        let mut h = Holders::default();
        assert!(h.is_empty());
        h.add(1, true);
        h.add(2, false);
        h.add(3, true);
        h.add(2, true);
        assert_eq!(
            (count(&mut h, 1), count(&mut h, 2), count(&mut h, 3)),
            ((1, 1), (2, 1), (1, 1))
        );
        // The inline holder goes first: another takes its place.
        close(&mut h, 1, true);
        assert_eq!(count(&mut h, 1), (0, 0));
        assert!(!h.is_empty());
        close(&mut h, 2, false);
        assert_eq!(count(&mut h, 2), (1, 1));
        close(&mut h, 3, true);
        assert!(!h.is_empty());
        close(&mut h, 2, true);
        assert!(h.is_empty());
        assert!(h.more.is_empty());
        // Reused once empty.
        h.add(4, false);
        assert_eq!(count(&mut h, 4), (1, 0));
        assert!(h.release(4, true).is_err());
        assert!(h.release(5, false).is_err());
    }
}

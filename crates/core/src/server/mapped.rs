//! Shared mappings: how many each client holds of each inode (`Request::Mapped`), and the
//! bit per inode (`InodeBits`, `mapped`) that tells every client's writes to update the mappings.

use super::backing::Settled;
use super::{ClientId, Server};
use crate::error::{Error, Result};
use crate::fasthash::FastMap;
use crate::perm::Creds;
use crate::request::{Handle, Response};

/// Inodes one client may count as mapped at once (a forged client can only make other
/// clients' writes slower, and not without bound).
const MAPPED_PER_CLIENT: usize = 1 << 16;

/// Mappings of one inode in all (so that no count can wrap round).
const MAPPINGS_PER_INODE: u32 = 1 << 30;

/// Mappings per client and inode, and per inode in all.
#[derive(Default)]
pub(super) struct Mappings {
    by_client: FastMap<ClientId, FastMap<u64, u32>>,
    total: FastMap<u64, u32>,
    /// Inodes a client died mapping since their count was last zero: their backing file
    /// may hold stores never written back (`server/backing.rs`).
    died: crate::fasthash::FastSet<u64>,
}

impl Server {
    /// ENODEV unless this server can tend the backing files of a client running as
    /// `creds`: write them back and remove them (`server/backing.rs`). The client makes
    /// its backing file, 0600 in the sticky /dev/shm: a server of another user (not root)
    /// could neither read nor remove it, and a file left marked current would later be
    /// written back over newer writes. Such a client's shared mappings are refused
    /// instead, before it makes one.
    fn may_tend_backing_of(&self, creds: &Creds) -> Result<()> {
        if self.euid == 0 || creds.uid == self.euid {
            return Ok(());
        }
        Err(Error::with_msg(
            libc::ENODEV,
            format!(
                "shared mappings of files open for writing are refused to uid {}: the daemon \
                 runs as uid {} and could not write back or remove their mapping files \
                 (run the daemon as root or as that user)",
                creds.uid, self.euid
            ),
        ))
    }

    /// `Request::Mapped`: `client` maps `target` shared (it must hold it open), or gave
    /// one such mapping up. `creds`: the client's, when it is another process.
    pub(crate) fn mapped(
        &mut self,
        client: ClientId,
        creds: Option<&Creds>,
        target: Handle,
        on: bool,
    ) -> Result<Response> {
        self.running()?;
        if self.backing_pending() {
            self.retry_backing();
        }
        if on {
            self.check_handle(target)?;
            if let Some(c) = creds {
                self.may_tend_backing_of(c)?;
            }
            if !self.holds_open(client, target.ino) {
                return Err(Error::EBADF);
            }
            let mine = self.mappings.by_client.entry(client).or_default();
            if mine.len() >= MAPPED_PER_CLIENT && !mine.contains_key(&target.ino) {
                return Err(Error::with_msg(
                    libc::ENFILE,
                    "too many files mapped shared by one process",
                ));
            }
            let total = self.mappings.total.entry(target.ino).or_default();
            if *total >= MAPPINGS_PER_INODE {
                return Err(Error::with_msg(
                    libc::ENFILE,
                    "too many shared mappings of one file",
                ));
            }
            *total += 1;
            *mine.entry(target.ino).or_default() += 1;
            if *total == 1 {
                self.shared.mapped.set(target.ino, true);
            }
        } else {
            let mine = self
                .mappings
                .by_client
                .get_mut(&client)
                .ok_or(Error::EINVAL)?;
            let counted = mine.get_mut(&target.ino).ok_or(Error::EINVAL)?;
            *counted -= 1;
            if *counted == 0 {
                mine.remove(&target.ino);
            }
            self.unmap(target.ino, 1);
        }
        Ok(Response::Done)
    }

    /// How many mappings of `ino` are counted.
    pub(super) fn mappings_of(&self, ino: u64) -> u32 {
        self.mappings.total.get(&ino).copied().unwrap_or(0)
    }

    /// Take `n` mappings of `ino` off its total; clear its bit at zero.
    fn unmap(&mut self, ino: u64, n: u32) {
        if let Some(total) = self.mappings.total.get_mut(&ino) {
            *total = total.saturating_sub(n);
            if *total == 0 {
                self.mappings.total.remove(&ino);
                // While the bit is still set: a backing file left behind is current. Its
                // last users gave their mappings up normally, each writing its pages back
                // first, unless one died: only then is it compared with the file.
                let died = self.mappings.died.remove(&ino);
                self.backing_unmapped(ino, died);
            }
        }
    }

    /// A client is gone: its mappings with it. Their stores not written back are in the
    /// backing files (`server/backing.rs`).
    pub(super) fn release_mappings(&mut self, client: ClientId) {
        if let Some(mine) = self.mappings.by_client.remove(&client) {
            for (ino, n) in mine {
                self.mappings.died.insert(ino);
                self.unmap(ino, n);
                if self.mappings.total.contains_key(&ino)
                    && self.write_back_dead_stores(ino) == Settled::Busy
                {
                    self.retry_later(ino);
                }
            }
        }
    }
}

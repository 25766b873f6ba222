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
///
/// A client's count of an inode that falls to zero while the client still holds the inode
/// open stays, at zero, until it closes it (or goes): the inode stays counted as mapped
/// (once, in `total`), so writers keep its backing file current and the client's next
/// mapping joins it instead of filling a new one from the whole file. Programs that map a
/// file again each time it grows (gdbm, TDB, Kyoto Cabinet) filled it anew each time: a
/// fill costs about 1 ms per MiB, and gdbm's 50,000 inserts took 9 minutes.
#[derive(Default)]
pub(super) struct Mappings {
    /// Live mappings per client and inode; 0 for a lingering one (see above).
    by_client: FastMap<ClientId, FastMap<u64, u32>>,
    total: FastMap<u64, u32>,
    /// How many clients' counts of each inode linger (see above).
    lingering: FastMap<u64, u32>,
    /// Inodes a client died mapping since their count was last zero: their backing file
    /// may hold stores never written back (`server/backing.rs`).
    died: crate::fasthash::FastSet<u64>,
    /// Inodes another client changed while a mapping was live (`changed_by`): their
    /// backing file may lack the change, so their lingering counts end with the last live
    /// mapping.
    stale: crate::fasthash::FastSet<u64>,
}

impl Mappings {
    fn one_less_lingering(&mut self, ino: u64) {
        if let Some(k) = self.lingering.get_mut(&ino) {
            *k -= 1;
            if *k == 0 {
                self.lingering.remove(&ino);
            }
        }
    }
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
            // A lingering count (an entry at 0) is already in the total.
            let lingered = mine.get(&target.ino) == Some(&0);
            *mine.entry(target.ino).or_default() += 1;
            if !lingered {
                *total += 1;
            }
            if *total == 1 {
                self.shared.mapped.set(target.ino, true);
            }
            if lingered {
                self.mappings.one_less_lingering(target.ino);
            }
            self.show_live(target.ino);
        } else {
            let holds = self.holds_open(client, target.ino);
            let mine = self
                .mappings
                .by_client
                .get_mut(&client)
                .ok_or(Error::EINVAL)?;
            let counted = mine.get_mut(&target.ino).filter(|n| **n > 0);
            let counted = counted.ok_or(Error::EINVAL)?;
            *counted -= 1;
            // The last one of a file the client holds open lingers, counted once in the
            // total, until the client closes the file.
            let lingers = *counted == 0 && holds;
            if *counted == 0 && !holds {
                mine.remove(&target.ino);
            }
            if lingers {
                *self.mappings.lingering.entry(target.ino).or_default() += 1;
            } else {
                self.unmap(target.ino, 1);
            }
            self.show_live(target.ino);
            self.end_stale_lingering(target.ino);
        }
        Ok(Response::Done)
    }

    /// `client` closed its last handle of `ino`: a count of it left lingering at zero
    /// (see `Mappings`) goes.
    pub(super) fn closed_mapped(&mut self, client: ClientId, ino: u64) {
        let lingers = self.mappings.by_client.get(&client);
        if lingers.is_some_and(|m| m.get(&ino) == Some(&0)) {
            self.stop_lingering(client, ino);
        }
    }

    /// `client` changes the bytes or the size of `ino` (a write, a truncate, fallocate).
    /// Only the shim copies writes into a backing file (a native client or the FUSE mount
    /// does not), so a count left lingering by another client, with no live mapping of
    /// the file anywhere, ends here: the backing file goes, and the next mapping fills a
    /// new one from the file. (A live mapping does not see such a client's writes either:
    /// see architecture.md.) A client's own lingering count stays: its shim copies.
    pub(in crate::server) fn changed_by(&mut self, client: ClientId, ino: u64) {
        self.changed(client, ino, false);
    }

    /// `client` truncates `ino` to zero. Its own lingering count ends too: a refill from an
    /// empty file costs nothing, and a truncate that did not zero the backing file (the
    /// shim zeroes it within `mmap::resizing`; until 2026-11-27 its O_TRUNC open did not)
    /// then leaves no bytes cut off for the client's next mapping to show.
    pub(in crate::server) fn emptied_by(&mut self, client: ClientId, ino: u64) {
        self.changed(client, ino, true);
    }

    /// `changed_by`; with `own_too`, the client's own lingering count ends too.
    fn changed(&mut self, client: ClientId, ino: u64, own_too: bool) {
        if !self.shared.mapped.contains(ino) {
            return;
        }
        let own = self.mappings.by_client.get(&client);
        if !own_too && own.is_some_and(|m| m.contains_key(&ino)) {
            return;
        }
        let lingering = self.mappings.lingering.get(&ino).copied().unwrap_or(0);
        if lingering != self.mappings_of(ino) {
            // A live mapping keeps the backing file, which may miss this change: counts
            // that linger then end with the last live mapping (`end_stale_lingering`).
            self.mappings.stale.insert(ino);
        } else if lingering > 0 {
            self.end_lingering(ino);
        }
    }

    /// A live mapping of `ino` went: if another client changed the file meanwhile
    /// (`changed_by`) and only lingering counts are left, they end (the backing file may
    /// lack the change).
    fn end_stale_lingering(&mut self, ino: u64) {
        if !self.mappings.stale.contains(&ino) {
            return;
        }
        let lingering = self.mappings.lingering.get(&ino).copied().unwrap_or(0);
        if lingering > 0 && lingering == self.mappings_of(ino) {
            self.end_lingering(ino);
        }
    }

    /// End every client's lingering count of `ino`.
    fn end_lingering(&mut self, ino: u64) {
        let lingerers: Vec<ClientId> = (self.mappings.by_client.iter())
            .filter(|(_, m)| m.get(&ino) == Some(&0))
            .map(|(&c, _)| c)
            .collect();
        for c in lingerers {
            self.stop_lingering(c, ino);
        }
    }

    /// End `client`'s lingering count of `ino`.
    fn stop_lingering(&mut self, client: ClientId, ino: u64) {
        if let Some(mine) = self.mappings.by_client.get_mut(&client) {
            mine.remove(&ino);
        }
        self.mappings.one_less_lingering(ino);
        self.unmap(ino, 1);
        self.show_live(ino);
    }

    /// Set or clear `ino`'s live-mapping bit (`Shared::mapped_live`) from its counts.
    pub(super) fn show_live(&mut self, ino: u64) {
        let lingering = self.mappings.lingering.get(&ino).copied().unwrap_or(0);
        let live = self.mappings_of(ino) > lingering
            || self.mappings.died.contains(&ino)
            || self.backing_retry.contains_key(&ino);
        if self.shared.mapped_live.contains(ino) != live {
            self.shared.mapped_live.set(ino, live);
        }
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
                self.mappings.stale.remove(&ino);
                // While the bit is still set: a backing file left behind is current. Its
                // last users gave their mappings up normally, each writing its pages back
                // first, unless one died: only then is it compared with the file.
                let died = self.mappings.died.remove(&ino);
                self.backing_unmapped(ino, died);
            }
        }
    }

    /// Write back the stores of `ino`'s dead mappers while other mappings of it are
    /// counted, or look again later. Written back (the whole backing file compared), they
    /// are the file's: the inode is no longer one whose mapper died, so its live bit can
    /// clear while its counts only linger, and a count reaching zero later removes the
    /// file unread. (Kept marked, a lingering count kept the bit set until the close, and
    /// the compare then made at zero took a native write since, which reaches no backing
    /// file, for an older store and reverted it.)
    pub(super) fn dead_stores_settled(&mut self, ino: u64) {
        if self.write_back_dead_stores(ino) == Settled::Busy {
            self.retry_later(ino);
        } else {
            self.dead_stores_written(ino);
        }
    }

    /// The stores of `ino`'s dead mappers are written back (see `dead_stores_settled`).
    pub(super) fn dead_stores_written(&mut self, ino: u64) {
        self.mappings.died.remove(&ino);
        self.show_live(ino);
    }

    /// A client is gone: its mappings with it. Their stores not written back are in the
    /// backing files (`server/backing.rs`).
    pub(super) fn release_mappings(&mut self, client: ClientId) {
        if let Some(mine) = self.mappings.by_client.remove(&client) {
            for (ino, n) in mine {
                // A lingering count (0) holds no mapping, so no store to write back.
                if n > 0 {
                    self.mappings.died.insert(ino);
                } else {
                    self.mappings.one_less_lingering(ino);
                }
                self.unmap(ino, n.max(1));
                if n > 0 && self.mappings.total.contains_key(&ino) {
                    self.dead_stores_settled(ino);
                }
                self.show_live(ino);
                self.end_stale_lingering(ino);
            }
        }
    }
}

//! The server: the only writer of metadata, the log and the allocator.
//!
//! Requests are applied one at a time (the transport serialises them). Every change is a
//! log record of absolute stores: structures it makes reachable are initialised and
//! persisted first, the record is persisted, then applied in place under the sequence
//! counters of the inodes it touches, so lock-free readers retry instead of seeing half.

mod backing;
mod commit;
mod data;
mod fsck;
pub use fsck::FsckReport;
mod mapped;
mod named;
mod namespace;
mod opens;

use crate::alloc::{Allocator, Item, Reserved};
use crate::dir;
use crate::epoch::{Epochs, SeqTable};
use crate::error::{Error, Result};
use crate::fasthash::FastMap;
use crate::inode::{self, InodeData, field};
use crate::layout::{Geometry, Superblock, now_ns};
use crate::oplog::{self, Entry, Log, LogHead};
use crate::perm::Creds;
use crate::request::{Handle, Request, Response, StatFs};
use engram_pmem::Pool;
use std::cell::RefCell;
use std::sync::Arc;

pub use data::zero_range_beyond_eof;
pub use namespace::{check_name, ftype_of, mknod_kind};

/// Retired items collected before trying to reclaim them.
const RECLAIM_BATCH: usize = 4096;

/// Counters of log activity.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ServerStats {
    pub records: u64,
    pub checkpoints: u64,
    pub log_wraps: u64,
}

/// Identifies a client (a process, or the in-process client) to the server.
pub type ClientId = u64;

/// Files a client created and may open for writing once whatever their mode (open(2) with
/// O_CREAT and a read-only mode still returns a writable descriptor). Bounded per client.
const CREATED_TOKENS: usize = 16;

/// State shared by the server and the clients' lock-free readers.
pub struct Shared {
    pub epochs: Epochs,
    pub seqs: SeqTable,
    pub mapped: crate::inode_bits::InodeBits,
    /// Inodes that more than one client holds open for writing (`crate::inode_bits`).
    pub several_writers: crate::inode_bits::InodeBits,
    /// Inodes whose backing file may hold stores not in the file: some mapping of them is
    /// live (not just lingering, `server/mapped.rs`), or a dead mapper's stores are not
    /// yet written back. Reads of the others read the file.
    pub mapped_live: crate::inode_bits::InodeBits,
}

pub struct Server {
    pool: Arc<Pool>,
    geo: Geometry,
    sb: Superblock,
    log: Log,
    alloc: Allocator,
    shared: Arc<Shared>,
    /// Number of checkpoints taken since the pool was opened.
    checkpoints: u64,
    /// Open handles per inode and client: files stay alive after their last name is
    /// removed, and a client's handles are released when it goes away.
    open: FastMap<u64, opens::Holders>,
    /// Directories removed while in use (open, or themselves kept), counted per parent:
    /// the parent is kept too, as Linux keeps a removed directory's `..` (`opens.rs`).
    kept_parents: FastMap<u64, u32>,
    reservations: FastMap<ClientId, Reserved>,
    /// Reused lists of write commits.
    scratch: Option<Box<data::Scratch>>,
    /// Inodes each client created and has not opened yet (see CREATED_TOKENS).
    created: FastMap<ClientId, Vec<u64>>,
    /// Shared mappings clients hold (see `crate::inode_bits`).
    mappings: mapped::Mappings,
    /// Pending frees at which `retire` next tries to reclaim.
    reclaim_at: usize,
    /// Set by `shutdown`: the pool is marked clean and takes no more requests.
    closed: bool,
    /// Set when writing the pool back failed (an `msync` error on an ordinary file): what
    /// is durable is then unknown, so the pool takes no more changes until it is reopened
    /// (like ext4's `errors=remount-ro`).
    failed: Option<String>,
    /// Records' in-place stores not yet written back (`oplog::Unflushed`).
    unflushed: oplog::Unflushed,
    /// Where names of large directories were last found (prefetch hints only).
    dir_hints: RefCell<dir::Hints>,
    /// Buffers reused across requests (see `take_bufs`).
    spare_entries: Vec<Entry>,
    spare_items: Vec<Item>,
    /// The pool's number in side-file names (`sidefiles::pool_id`), once the opener has
    /// told it (`use_side_files`): backing files left behind are then written back.
    side_files: Option<u64>,
    /// Failures to write a backing file back (`take_backing_errors`).
    backing_errors: Vec<String>,
    /// Backing files whose write-back waits for a write in flight, since when
    /// (`backing.rs`'s `retry_backing`).
    backing_retry: FastMap<u64, std::time::Instant>,
    /// Backing files whose fill-lock gate a waiting write-back holds (`backing.rs`).
    gates: FastMap<u64, (std::fs::File, std::time::Instant)>,
    /// Set by the daemon, whose loop retries waiting write-backs at once.
    retries_driven: bool,
    /// When each file some process maps was last written by a client (`backing.rs`).
    mapped_writes: FastMap<u64, std::time::Instant>,
    /// `fs.protected_hardlinks` (`perm::check_link_source`).
    protected_hardlinks: bool,
    /// The user this process runs as: the owner of the side files it makes, and the one
    /// whose backing files it can write back and remove (any, as root).
    euid: u32,
}

impl Server {
    /// Take over an opened (and, if needed, recovered) pool. Marks it in use.
    pub fn start(
        pool: Arc<Pool>,
        mut sb: Superblock,
        alloc: Allocator,
        head: LogHead,
        shared: Arc<Shared>,
    ) -> Server {
        sb.clean = 0;
        sb.log_head = head.head;
        sb.log_head_seq = head.seq;
        sb.store(&pool);
        let geo = sb.geometry;
        Server {
            log: Log::new(&geo, head),
            pool,
            geo,
            sb,
            alloc,
            shared,
            checkpoints: 0,
            open: FastMap::default(),
            kept_parents: FastMap::default(),
            reservations: FastMap::default(),
            scratch: None,
            created: FastMap::default(),
            mappings: mapped::Mappings::default(),
            reclaim_at: RECLAIM_BATCH,
            closed: false,
            failed: None,
            unflushed: oplog::Unflushed::default(),
            dir_hints: RefCell::default(),
            spare_entries: Vec::with_capacity(16),
            spare_items: Vec::with_capacity(8),
            side_files: None,
            backing_errors: Vec::new(),
            backing_retry: FastMap::default(),
            gates: FastMap::default(),
            retries_driven: false,
            mapped_writes: FastMap::default(),
            protected_hardlinks: crate::perm::hardlinks_protected(),
            // SAFETY: geteuid has no failure.
            euid: unsafe { libc::geteuid() },
        }
    }

    /// See `Fs::write_back_pending`.
    pub fn write_back_pending(&self) -> Vec<(u64, u64)> {
        self.unflushed.ranges().collect()
    }

    /// Log activity since the pool was opened.
    pub fn stats(&self) -> ServerStats {
        ServerStats {
            records: self.log.appended,
            checkpoints: self.checkpoints,
            log_wraps: self.log.wraps,
        }
    }

    pub fn geometry(&self) -> &Geometry {
        &self.geo
    }

    pub fn pool(&self) -> &Arc<Pool> {
        &self.pool
    }

    pub fn allocator(&self) -> &Allocator {
        &self.alloc
    }

    /// Inodes that are open but have no name left (legitimate orphans while mounted).
    pub fn open_inodes(&self) -> impl Iterator<Item = u64> + '_ {
        self.open.keys().copied()
    }

    /// Pages reserved by clients and not yet committed.
    pub fn reserved_pages(&self) -> impl Iterator<Item = u64> + '_ {
        self.reservations.values().flat_map(Reserved::pages)
    }

    pub fn handle(&mut self, client: ClientId, creds: &Creds, req: Request) -> Result<Response> {
        if self.closed {
            return Err(Error::with_msg(libc::EIO, "the pool has been unmounted"));
        }
        // In-process nothing else looks again at a backing file a write held.
        if self.backing_pending() {
            self.retry_backing();
        }
        match req {
            Request::Create {
                parent,
                name,
                mode,
                excl,
                open,
            } => self.create_named(client, creds, (parent, &name), (mode, excl), open),
            Request::Mkdir { parent, name, mode } => self.mkdir(creds, parent, &name, mode),
            Request::Symlink {
                parent,
                name,
                target,
            } => self.symlink(creds, parent, &name, &target),
            Request::Mknod {
                parent,
                name,
                mode,
                rdev,
            } => self.mknod(creds, parent, &name, mode, rdev),
            Request::Link {
                target,
                parent,
                name,
            } => self.link(creds, target, parent, &name),
            Request::Unlink { parent, name, dir } => self.unlink(creds, parent, &name, dir),
            Request::Rename {
                from,
                from_name,
                to,
                to_name,
                flags,
            } => self.rename(creds, from, &from_name, to, &to_name, flags),
            Request::SetAttr { target, attr } => {
                match attr.size {
                    Some(0) => self.emptied_by(client, target.ino),
                    Some(_) => self.changed_by(client, target.ino),
                    None => {}
                }
                self.setattr(client, creds, target, attr)
            }
            Request::Fallocate {
                target,
                offset,
                len,
                keep_size,
            } => {
                self.check_writer(client, target)?;
                self.changed_by(client, target.ino);
                self.kill_privs_for_write(client, creds, target)?;
                self.fallocate(client, target, offset, len, keep_size)
            }
            Request::Clear {
                target,
                offset,
                len,
                how,
            } => {
                self.check_writer(client, target)?;
                self.changed_by(client, target.ino);
                self.kill_privs_for_write(client, creds, target)?;
                self.clear_range(client, target, (offset, len), how)
            }
            Request::Reserve { pages } => self.reserve(client, pages),
            Request::Unreserve { pages } => self.unreserve(client, &pages),
            Request::CommitWrite {
                target,
                pages,
                end,
                check,
            } => self
                .commit_write(client, creds, target, &pages, end, check.as_ref())
                .map(|mapped| Response::Committed { mapped }),
            Request::Open { target, write } => self.open_handle(client, creds, target, write),
            Request::Close { target, write } => self.close(client, target, write),
            Request::Mapped { target, on } => self.mapped(client, Some(creds), target, on),
            Request::Fsck { repair } => Ok(Response::Fsck(self.fsck(repair)?)),
            Request::Stats => Ok(Response::Stats(self.stats())),
            Request::Statfs => Ok(Response::StatFs(self.statfs())),
            Request::Sync => self.sync(),
            // The daemon answers it itself once the process's clients are disconnected;
            // here there are none.
            Request::Gone { .. } => Ok(Response::Done),
            // In-process the `Fs` carries the credentials; the daemon answers this itself
            // (`daemon/serve.rs`).
            Request::CredsChanged => Ok(Response::Done),
        }
    }

    fn statfs(&self) -> StatFs {
        // Retired items are free as soon as readers and the next checkpoint allow.
        let (inodes, meta, data) = self.alloc.pending_by_kind();
        StatFs {
            block_size: crate::layout::PAGE,
            blocks: self.geo.data_pages,
            blocks_free: self.alloc.data.free() + data,
            files: self.geo.inode_count - 1,
            files_free: files_free(
                self.alloc.inodes.free() + inodes,
                self.alloc.meta.free() + meta,
            ),
            name_max: crate::dir::NAME_MAX as u64,
        }
    }

    // ------------------------------------------------------------------ inode helpers

    pub(crate) fn read_inode(&self, ino: u64) -> InodeData {
        inode::read(&self.pool, &self.geo, ino)
    }

    /// Validate a client's handle: in range, live, same generation.
    pub(crate) fn inode(&self, h: Handle) -> Result<InodeData> {
        self.check_in_range(h.ino)?;
        let d = self.read_inode(h.ino);
        if d.is_free() || d.generation != h.generation {
            return Err(Error::ESTALE);
        }
        Ok(d)
    }

    /// `inode`'s checks without reading the whole inode (close needs nothing else).
    pub(crate) fn check_handle(&self, h: Handle) -> Result<()> {
        self.check_in_range(h.ino)?;
        if self.u32_field(h.ino, field::MODE) == 0
            || self.u32_field(h.ino, field::GENERATION) != h.generation
        {
            return Err(Error::ESTALE);
        }
        Ok(())
    }

    fn check_in_range(&self, ino: u64) -> Result<()> {
        if ino == 0 || ino >= self.geo.inode_count {
            return Err(Error::with_msg(
                libc::ESTALE,
                format!("inode {ino} is out of range"),
            ));
        }
        Ok(())
    }

    /// One 32-bit field of an inode, read alone.
    pub(crate) fn u32_field(&self, ino: u64, f: u64) -> u32 {
        self.pool.load_u32(self.field(ino, f))
    }

    pub(crate) fn dir_inode(&self, h: Handle) -> Result<InodeData> {
        let d = self.inode(h)?;
        if !d.is_dir() {
            return Err(Error::ENOTDIR);
        }
        if d.nlink == 0 {
            return Err(Error::ENOENT);
        }
        Ok(d)
    }

    pub(crate) fn field(&self, ino: u64, f: u64) -> u64 {
        self.geo.inode_addr(ino) + f
    }

    pub(crate) fn set32(&self, ino: u64, f: u64, v: u32) -> Entry {
        Entry::set32(self.field(ino, f), v)
    }

    pub(crate) fn set64(&self, ino: u64, f: u64, v: u64) -> Entry {
        Entry::set64(self.field(ino, f), v)
    }

    /// mtime and ctime of a directory (or file) to `now`.
    pub(crate) fn touch(&self, ino: u64, now: i64, out: &mut Vec<Entry>) {
        out.push(Entry::Seq {
            off: self.field(ino, field::MTIME),
            count: 2,
            start: now as u64,
            step: 0,
        });
    }

    /// Everything an inode holds (appended to `items`), for retiring when it is freed.
    pub(crate) fn content_items(&self, d: &InodeData, items: &mut Vec<Item>) -> Result<()> {
        if d.is_reg() {
            let mut pages = Vec::new();
            crate::index::walk(
                &self.pool,
                &self.geo,
                d.root,
                d.height,
                &mut |n| items.push(Item::MetaPage(n)),
                &mut |_, p| pages.push(Item::DataPage(p)),
            )?;
            items.extend(pages);
        } else if d.is_dir() {
            crate::dir::walk(
                &self.pool,
                &self.geo,
                d.root,
                &mut |p| items.push(Item::MetaPage(p)),
                &mut |_| {},
            )?;
        } else if d.is_symlink() && d.size > field::INLINE_LEN && self.geo.is_meta_page(d.root) {
            items.push(Item::MetaPage(d.root));
        }
        Ok(())
    }

    /// Log the slot free of inode `ino` (read as `d`) into `out`, and add what to retire
    /// once that commits to `items`.
    pub(crate) fn stage_free(
        &self,
        (ino, d): (u64, &InodeData),
        out: &mut Vec<Entry>,
        items: &mut Vec<Item>,
    ) -> Result<()> {
        self.content_items(d, items)?;
        items.push(Item::Inode(ino));
        out.push(self.set32(ino, field::MODE, 0));
        Ok(())
    }

    /// Free an inode that has no name and no open handle left.
    pub(crate) fn free_inode(&mut self, ino: u64) -> Result<()> {
        let (mut out, mut items) = self.take_bufs();
        let r = self.stage_free((ino, &self.read_inode(ino)), &mut out, &mut items);
        let r = r.and_then(|()| self.commit(&out, &[ino]));
        if r.is_ok() {
            self.retire(&items);
        }
        self.put_bufs(out, items);
        r
    }

    /// Empty buffers for a request's log entries and items: those of earlier requests, so
    /// that a request allocates none. Give them back with `put_bufs`.
    pub(crate) fn take_bufs(&mut self) -> (Vec<Entry>, Vec<Item>) {
        let mut out = std::mem::take(&mut self.spare_entries);
        let mut items = std::mem::take(&mut self.spare_items);
        out.clear();
        items.clear();
        (out, items)
    }

    pub(crate) fn put_bufs(&mut self, out: Vec<Entry>, items: Vec<Item>) {
        self.spare_entries = out;
        self.spare_items = items;
    }

    /// A client is gone: give back its reservations and its open handles.
    pub fn disconnect(&mut self, client: ClientId) {
        if let Some(pages) = self.reservations.remove(&client) {
            for p in pages.pages() {
                self.alloc.release_now(Item::DataPage(p));
            }
        }
        self.release_mappings(client);
        self.release_client(client);
    }

    /// Unmount: free orphans, return reservations, checkpoint, write the bitmaps, mark clean.
    /// A pool whose write-back failed is not marked clean (EIO): the next open recovers it.
    pub fn shutdown(&mut self) -> Result<()> {
        if self.closed {
            return Ok(());
        }
        if let Err(e) = self.check_synced("unmount") {
            self.closed = true;
            return Err(e);
        }
        // What was kept without a name: open, or the parent of a removed directory kept.
        let mut orphans: Vec<u64> = self.open.drain().map(|(i, _)| i).collect();
        orphans.extend(self.kept_parents.drain().map(|(i, _)| i));
        for ino in orphans {
            let d = self.read_inode(ino);
            if !d.is_free() && d.nlink == 0 {
                self.free_inode(ino)?;
            }
        }
        let clients: Vec<ClientId> = self.reservations.keys().copied().collect();
        for c in clients {
            self.disconnect(c);
        }
        self.checkpoint()?;
        // No reader is left: everything retired is free.
        self.alloc.reclaim(u64::MAX, u64::MAX);
        self.alloc.store(&self.pool);
        self.sync_point("writing the bitmaps at unmount")?;
        self.sb.clean = 1;
        self.sb.store(&self.pool);
        self.closed = true;
        self.check_synced("marking the pool clean")
    }

    pub(crate) fn now(&self) -> i64 {
        now_ns()
    }
}

/// Files free for statfs: the free inodes, unless the metadata pages are nearly gone. A file
/// of more than `index::SMALL` pages takes one for its index, and a directory one for its
/// entries, so once they run out creating files fails with ENOSPC however many inodes are
/// free: files free then counts them instead (`df -i` shows the pool full), rather than
/// most of the pool free. Until then small files, which take none, count as files should.
fn files_free(inodes: u64, meta_pages: u64) -> u64 {
    const FEW_META_PAGES: u64 = 64;
    if meta_pages < FEW_META_PAGES {
        inodes.min(meta_pages)
    } else {
        inodes
    }
}

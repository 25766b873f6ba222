//! What a client asks the server, and what it gets back. Both transports carry these.

/// A reference to an inode that survives reuse of its slot: the generation must match.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Handle {
    pub ino: u64,
    pub generation: u32,
}

/// A time to set: now, or an exact value in nanoseconds since the epoch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SetTime {
    Now,
    Ns(i64),
}

/// Attribute changes; `None` leaves a field alone.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SetAttr {
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub size: Option<u64>,
    pub atime: Option<SetTime>,
    pub mtime: Option<SetTime>,
    /// A chown call, also one that names neither owner nor group (`chown(f, -1, -1)`):
    /// Linux clears set-user-ID and set-group-ID of a non-directory on every one.
    pub chown: bool,
    /// The caller is about to write the file: clear set-user-ID and set-group-ID, as Linux
    /// does for a writer without CAP_FSETID (`file_remove_privs`). Allowed to whoever holds
    /// the file open for writing or may write it. The server does so itself before every
    /// write's commit of a caller who is not root.
    pub written: bool,
    /// A size change through a description open for writing (ftruncate, O_TRUNC): write
    /// permission was checked when it was opened, as Linux checks it, not now.
    pub through_open_file: bool,
}

pub const RENAME_NOREPLACE: u32 = 1;
pub const RENAME_EXCHANGE: u32 = 2;

/// What a client that shares the pool with other processes saw when it prepared a write:
/// the server refuses the commit (EAGAIN, and the client redoes the write) if another
/// process changed those pages or the size meanwhile.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WriteCheck {
    /// The page each updated file page held (0 for a hole), in the order of `pages`; empty
    /// for a write of whole pages (start and end page-aligned), which keeps no old byte.
    pub old_pages: Vec<u64>,
    /// The size the client saw.
    pub size_seen: u64,
    /// Where the write starts; the server zeroes the gap from the end of file to here.
    pub start: u64,
    /// (page number, data page) of the file's pages the write filled in place, beyond the
    /// end of file, page numbers ascending: the client alone held the file open for writing
    /// (`Shared::several_writers`). The commit stands only if they are still the file's.
    pub in_place: Vec<(u64, u64)>,
}

/// Most pages one `Reserve` request is answered with.
pub const MAX_RESERVE: u64 = 4096;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request {
    /// Create a regular file (or return the existing entry unless `excl`). With `open`,
    /// a file this request creates is also opened for the client (for writing if true), so
    /// that creating and opening a file is one round trip; an existing file is not opened.
    Create {
        parent: Handle,
        name: Vec<u8>,
        mode: u32,
        excl: bool,
        open: Option<bool>,
    },
    Mkdir {
        parent: Handle,
        name: Vec<u8>,
        mode: u32,
    },
    Symlink {
        parent: Handle,
        name: Vec<u8>,
        target: Vec<u8>,
    },
    /// mknod(2): a FIFO, socket, character or block device, or regular file (type 0 or
    /// `S_IFREG`, never opened) named by `mode`'s type bits; `rdev` is a device's number
    /// (ignored for the other types, as Linux ignores it).
    Mknod {
        parent: Handle,
        name: Vec<u8>,
        mode: u32,
        rdev: u64,
    },
    Link {
        target: Handle,
        parent: Handle,
        name: Vec<u8>,
    },
    /// Remove a name; `dir` selects rmdir semantics.
    Unlink {
        parent: Handle,
        name: Vec<u8>,
        dir: bool,
    },
    Rename {
        from: Handle,
        from_name: Vec<u8>,
        to: Handle,
        to_name: Vec<u8>,
        flags: u32,
    },
    SetAttr {
        target: Handle,
        attr: SetAttr,
    },
    Fallocate {
        target: Handle,
        offset: u64,
        len: u64,
        keep_size: bool,
    },
    /// fallocate's `FALLOC_FL_PUNCH_HOLE` and `FALLOC_FL_ZERO_RANGE`: `[offset, offset +
    /// len)` reads as zeros afterwards.
    Clear {
        target: Handle,
        offset: u64,
        len: u64,
        how: Clear,
    },
    /// Reserve up to `pages` data pages for this client's copy-on-write.
    Reserve {
        pages: u64,
    },
    /// Give reserved pages back.
    Unreserve {
        pages: Vec<u64>,
    },
    /// Publish pages written by the client: file page number → reserved data page, and the
    /// new end of the written range (the size grows to it if it is larger).
    CommitWrite {
        target: Handle,
        pages: Vec<(u64, u64)>,
        end: u64,
        check: Option<WriteCheck>,
    },
    /// Open a handle; `write` for an open that may write (the server checks write permission
    /// with the caller's credentials, and takes write commits only from a client that holds
    /// the inode open for writing).
    Open {
        target: Handle,
        write: bool,
    },
    /// Close a handle opened with the same `write`.
    Close {
        target: Handle,
        write: bool,
    },
    /// This client maps `target` shared (`on`), or has given one such mapping up: while
    /// any client maps a file, writers of every client also update the mapping's backing
    /// file (see `Fs::set_mapped`).
    Mapped {
        target: Handle,
        on: bool,
    },
    Statfs,
    Sync,
    /// Check (and optionally repair) the pool.
    Fsck {
        repair: bool,
    },
    Stats,
    /// The sender reaped (or saw exit) process `pid`: answered once no client of that
    /// process is still connected, so that what the daemon does at a client's death (a
    /// mapping's stores written back, `server/backing.rs`) is done before the sender goes
    /// on. In-process (no other client) answered at once.
    Gone {
        pid: u32,
    },
    /// The client process changed its credentials (setuid, setgroups, …): the daemon reads
    /// them from the kernel (/proc/PID/status, never from the client) and checks the
    /// client's later requests with them. In-process the `Fs` carries them.
    CredsChanged,
}

/// How `Request::Clear` clears a range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Clear {
    /// Free the pages wholly inside the range (holes); zero the rest of it. The size stays.
    PunchHole,
    /// Give the range fresh zeroed pages, so that writes into it need no more space; with
    /// `keep_size` false the size grows to the range's end if that is larger.
    ZeroRange { keep_size: bool },
}

/// What a fallocate(2) mode asks of a file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fallocate {
    /// Mode 0 (the size grows to the range's end) or `FALLOC_FL_KEEP_SIZE`.
    Allocate {
        keep_size: bool,
    },
    Clear(Clear),
}

impl Fallocate {
    /// The modes EngramFS has; a punch without `KEEP_SIZE` is refused as Linux refuses it,
    /// and collapsing and inserting ranges are not in the engine (EOPNOTSUPP both).
    pub fn from_mode(mode: i32) -> crate::Result<Fallocate> {
        const PUNCH: i32 = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
        const ZERO_KEEP: i32 = libc::FALLOC_FL_ZERO_RANGE | libc::FALLOC_FL_KEEP_SIZE;
        Ok(match mode {
            0 => Fallocate::Allocate { keep_size: false },
            libc::FALLOC_FL_KEEP_SIZE => Fallocate::Allocate { keep_size: true },
            PUNCH => Fallocate::Clear(Clear::PunchHole),
            libc::FALLOC_FL_ZERO_RANGE => Fallocate::Clear(Clear::ZeroRange { keep_size: false }),
            ZERO_KEEP => Fallocate::Clear(Clear::ZeroRange { keep_size: true }),
            _ => return Err(crate::Error::EOPNOTSUPP),
        })
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StatFs {
    pub block_size: u64,
    pub blocks: u64,
    pub blocks_free: u64,
    pub files: u64,
    pub files_free: u64,
    pub name_max: u64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Response {
    Done,
    /// A new or existing inode; `created` says which.
    Entry {
        handle: Handle,
        created: bool,
    },
    Pages(Vec<u64>),
    /// A write committed (`Request::CommitWrite`): `mapped` says whether some process
    /// mapped the file shared when the commit was made (its mapped bit, see
    /// `Fs::set_mapped`). A writer that held no backing file's lock across its commit
    /// learns from it whether a mapping may have missed its bytes (the shim's
    /// `mmap/writes.rs`).
    Committed {
        mapped: bool,
    },
    StatFs(StatFs),
    Fsck(crate::server::FsckReport),
    Stats(crate::server::ServerStats),
}

impl Request {
    /// A short name of the request (for the daemon's log).
    pub fn kind(&self) -> &'static str {
        match self {
            Request::Create { .. } => "create",
            Request::Mkdir { .. } => "mkdir",
            Request::Symlink { .. } => "symlink",
            Request::Mknod { .. } => "mknod",
            Request::Link { .. } => "link",
            Request::Unlink { dir: false, .. } => "unlink",
            Request::Unlink { dir: true, .. } => "rmdir",
            Request::Rename { .. } => "rename",
            Request::SetAttr { .. } => "setattr",
            Request::Fallocate { .. } => "fallocate",
            Request::Clear { .. } => "clear-range",
            Request::Reserve { .. } => "reserve",
            Request::Unreserve { .. } => "unreserve",
            Request::CommitWrite { .. } => "commit-write",
            Request::Open { .. } => "open",
            Request::Close { .. } => "close",
            Request::Mapped { .. } => "mapped",
            Request::Statfs => "statfs",
            Request::Sync => "sync",
            Request::Fsck { .. } => "fsck",
            Request::Stats => "stats",
            Request::Gone { .. } => "gone",
            Request::CredsChanged => "creds-changed",
        }
    }
}

//! The daemon's shared memory, in two kinds of region, so that a client can write only what
//! is its own:
//!
//! - The **common region** (one memfd made by the server): a header (magic, inode count,
//!   the server's `sleeping` flag, the global epoch), the per-inode sequence counters and
//!   the bits per inode that say some client maps it shared (or lingers: see
//!   `server/mapped.rs`), that several clients hold it open for writing, and that some
//!   client maps it shared now (`crate::inode_bits`).
//!   Only the server writes it. Once the server has mapped it, the memfd is sealed against
//!   new writable mappings, writes and resizing (`F_SEAL_FUTURE_WRITE`), so a client can map
//!   it read-only and nothing else: a store into it faults in the client.
//! - One **client region** per client (its own memfd, sealed against resizing so that a
//!   client cannot make the server fault): the client's doorbell, its epoch slots and its
//!   request slots. A client receives only its own. The server maps each into a fixed place
//!   of one reserved area (found by client index) and puts zero pages back when the client
//!   goes, so what a dead client's other processes still write reaches nobody.
//!
//! Everything a client can write is read by the server through atomics and checked: only
//! a slot whose request number differs from its reply's is read, lengths are clamped,
//! epochs only hold reclamation back.

use crate::epoch::{Atomics, LiveGroups, SeqTable};
use crate::inode_bits::InodeBits;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// Its last byte is the layout's version (4: the mapped bits after the counters, then the
/// several-writers bits; 5: then the live-mapping bits).
const COMMON_MAGIC: u64 = u64::from_le_bytes(*b"ENGRSHM5");
/// The client region's layout version is its last byte: a client and a daemon of builds
/// with different slot layouts must refuse each other, not wait for replies in the wrong
/// place (2: request and reply blocks split by writer; 3: the server sleeps on the wake
/// region's word, not on the doorbells; 4: a write commit is answered with
/// `Response::Committed`, which a client of an earlier build takes for a malformed reply,
/// and whose absence one of this build takes for one).
const CLIENT_MAGIC: u64 = u64::from_le_bytes(*b"ENGRCLI4");
const PAGE: usize = 4096;
/// Places for clients (virtual memory only until one connects: about 800 KiB each).
pub const MAX_CLIENTS: usize = 1024;
pub const SLOTS_PER_CLIENT: usize = 8;
pub const EPOCHS_PER_CLIENT: usize = 32;
/// Bytes of request or reply a slot carries (an 8 MiB write commit of scattered pages fits).
pub const SLOT_PAYLOAD: usize = 96 << 10;
const SLOT_HEADER: usize = 3 * BLOCK;
const SLOT_BYTES: usize = SLOT_HEADER + SLOT_PAYLOAD;

// The common region's header words.
const C_INODES: usize = 8;
const C_SLEEPING: usize = 64;
const C_GLOBAL_EPOCH: usize = 128;
const C_SEQS: usize = PAGE;

// A client region: header page (magic, doorbell, epoch slots, slot owners), then the slots.
const R_BELL: usize = 64;
const R_EPOCHS: usize = 128;
/// The slots' owner words, a line each (client threads claim slots; the server never looks).
const R_OWNERS: usize = R_EPOCHS + EPOCHS_PER_CLIENT * 8;
const _: () = assert!(R_OWNERS.is_multiple_of(64) && R_OWNERS + SLOTS_PER_CLIENT * 64 <= R_SLOTS);
const R_SLOTS: usize = PAGE;
/// Bytes of one client region.
pub const CLIENT_BYTES: usize = (R_SLOTS + SLOTS_PER_CLIENT * SLOT_BYTES).div_ceil(PAGE) * PAGE;

pub(super) struct Mapping {
    pub(super) ptr: *mut u8,
    pub(super) len: usize,
}

// SAFETY: the mapping is plain shared memory accessed through atomics and the slot protocol.
unsafe impl Send for Mapping {}
// SAFETY: as above.
unsafe impl Sync for Mapping {}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: ptr/len come from a successful mmap and nothing borrows them any more
        // (every view holds an Arc of this mapping or borrows its owner).
        unsafe { libc::munmap(self.ptr as *mut libc::c_void, self.len) };
    }
}

pub(super) fn mmap(
    fd: Option<&OwnedFd>,
    len: usize,
    prot: i32,
    at: Option<*mut u8>,
) -> io::Result<*mut u8> {
    let (flags, raw) = match fd {
        Some(f) => (libc::MAP_SHARED, f.as_raw_fd()),
        None => (
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
        ),
    };
    let flags = flags | if at.is_some() { libc::MAP_FIXED } else { 0 };
    // SAFETY: a new mapping of `len` bytes of a descriptor we hold (or anonymous memory). With
    // MAP_FIXED, `at` is a range of a mapping the caller owns and that nothing borrows as
    // references (only raw pointers into it, accessed atomically): replacing it is atomic.
    let p = unsafe {
        libc::mmap(
            at.unwrap_or(std::ptr::null_mut()) as *mut libc::c_void,
            len,
            prot,
            flags,
            raw,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    Ok(p as *mut u8)
}

/// A fresh memfd of `len` bytes that can be sealed.
pub(super) fn memfd(name: &std::ffi::CStr, len: usize) -> io::Result<OwnedFd> {
    // SAFETY: memfd_create with a NUL-terminated name.
    let raw =
        unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `raw` is a fresh descriptor we own.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    // SAFETY: resizing our own memfd.
    if unsafe { libc::ftruncate(fd.as_raw_fd(), len as libc::off_t) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(fd)
}

pub(super) fn seal(fd: &OwnedFd, seals: i32) -> io::Result<()> {
    // SAFETY: adding seals to a memfd we own.
    if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, seals) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The size of the file behind `fd`.
pub(super) fn fd_len(fd: &OwnedFd) -> io::Result<usize> {
    // SAFETY: fstat fills a stat buffer.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is a valid buffer for fstat.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(st.st_size as usize)
}

pub(super) fn bad(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_string())
}

/// Where the mapped bits start: after the counters, a page boundary.
fn mapped_off(inodes: usize) -> usize {
    C_SEQS + (inodes * 8).div_ceil(PAGE) * PAGE
}

/// The length of one set of bits per inode, whole pages.
fn bits_len(inodes: usize) -> usize {
    (InodeBits::words(inodes as u64) * 8).div_ceil(PAGE) * PAGE
}

/// Where the several-writers bits start: after the mapped bits.
fn writers_off(inodes: usize) -> usize {
    mapped_off(inodes) + bits_len(inodes)
}

/// Where the live-mapping bits start: after the several-writers bits.
fn live_off(inodes: usize) -> usize {
    writers_off(inodes) + bits_len(inodes)
}

fn common_len(inodes: usize) -> usize {
    live_off(inodes) + bits_len(inodes)
}

/// The common region: read/write in the server, read-only in clients.
#[derive(Clone)]
pub struct Common {
    map: Arc<Mapping>,
    inodes: usize,
}

impl Common {
    /// Create the region for a pool with `inodes` inodes; returns it and its (sealed) memfd.
    pub fn create(inodes: u64) -> io::Result<(Common, OwnedFd)> {
        let inodes = inodes as usize;
        let len = common_len(inodes);
        let fd = memfd(c"engram-common", len)?;
        let ptr = mmap(Some(&fd), len, libc::PROT_READ | libc::PROT_WRITE, None)?;
        let c = Common {
            map: Arc::new(Mapping { ptr, len }),
            inodes,
        };
        c.word(C_INODES).store(inodes as u64, Ordering::Relaxed);
        c.word(C_GLOBAL_EPOCH).store(1, Ordering::Relaxed);
        c.word(0).store(COMMON_MAGIC, Ordering::Release);
        // From now on only this mapping can write: clients map it read-only.
        seal(
            &fd,
            libc::F_SEAL_FUTURE_WRITE | libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL,
        )?;
        Ok((c, fd))
    }

    /// Map a region received from the server, read-only.
    pub fn attach(fd: &OwnedFd) -> io::Result<Common> {
        let size = fd_len(fd)?;
        if size < PAGE {
            return Err(bad("not an EngramFS shared region"));
        }
        // Mapped whole at once (one system call at each connection, not a look at the
        // header first): the server sealed its size.
        let map = Mapping {
            ptr: mmap(Some(fd), size, libc::PROT_READ, None)?,
            len: size,
        };
        // SAFETY: the first page is mapped; words 0 and 1 are u64-aligned.
        let (magic, inodes) = unsafe {
            (
                *(map.ptr as *const u64),
                *(map.ptr as *const u64).add(C_INODES / 8),
            )
        };
        if magic != COMMON_MAGIC || inodes > 1 << 40 || common_len(inodes as usize) > size {
            return Err(bad("not an EngramFS shared region"));
        }
        Ok(Common {
            map: Arc::new(map),
            inodes: inodes as usize,
        })
    }

    fn word(&self, off: usize) -> &AtomicU64 {
        assert!(off + 8 <= self.map.len && off.is_multiple_of(8));
        // SAFETY: in bounds and aligned (checked); the region is only accessed atomically.
        unsafe { &*(self.map.ptr.add(off) as *const AtomicU64) }
    }

    fn atomics(&self, off: usize, n: usize) -> Atomics {
        assert!(off + n * 8 <= self.map.len);
        let owner: Arc<dyn std::any::Any + Send + Sync> = self.map.clone();
        // SAFETY: the range is inside the mapping, 8-aligned, and `owner` keeps it mapped.
        unsafe { Atomics::from_raw(self.map.ptr.add(off) as *const AtomicU64, n, owner) }
    }

    /// The global epoch (one word).
    pub fn global_epoch(&self) -> Atomics {
        self.atomics(C_GLOBAL_EPOCH, 1)
    }

    pub fn seqs(&self) -> SeqTable {
        SeqTable::shared(self.atomics(C_SEQS, self.inodes))
    }

    pub fn mapped(&self) -> InodeBits {
        let words = InodeBits::words(self.inodes as u64);
        InodeBits::shared(self.atomics(mapped_off(self.inodes), words))
    }

    pub fn several_writers(&self) -> InodeBits {
        let words = InodeBits::words(self.inodes as u64);
        InodeBits::shared(self.atomics(writers_off(self.inodes), words))
    }

    pub fn mapped_live(&self) -> InodeBits {
        let words = InodeBits::words(self.inodes as u64);
        InodeBits::shared(self.atomics(live_off(self.inodes), words))
    }

    /// Set while the server sleeps: a client that posts a request then rings its doorbell.
    pub fn sleeping(&self) -> &AtomicU32 {
        // SAFETY: in bounds and 4-aligned; only accessed atomically.
        unsafe { &*(self.map.ptr.add(C_SLEEPING) as *const AtomicU32) }
    }

    /// Start of the mapping (tests check that a client cannot write it).
    pub fn as_ptr(&self) -> *const u8 {
        self.map.ptr
    }
}

/// A view of one client region at some address (the client's own mapping, or its place in
/// the server's area). `'a` borrows whatever keeps the memory mapped.
#[derive(Clone, Copy)]
pub struct Region<'a> {
    base: *mut u8,
    _owner: std::marker::PhantomData<&'a ()>,
}

impl<'a> Region<'a> {
    fn u64_at(&self, off: usize) -> &'a AtomicU64 {
        assert!(off + 8 <= CLIENT_BYTES && off.is_multiple_of(8));
        // SAFETY: in bounds of the region and aligned; the region stays mapped for 'a and
        // is only accessed atomically at these offsets.
        unsafe { &*(self.base.add(off) as *const AtomicU64) }
    }

    fn u32_at(&self, off: usize) -> &'a AtomicU32 {
        assert!(off + 4 <= CLIENT_BYTES && off.is_multiple_of(4));
        // SAFETY: in bounds of the region and aligned; the region stays mapped for 'a and
        // is only accessed atomically at these offsets.
        unsafe { &*(self.base.add(off) as *const AtomicU32) }
    }

    /// The client's doorbell: bumped (and woken if the server sleeps) after each request.
    pub fn bell(&self) -> &'a AtomicU32 {
        self.u32_at(R_BELL)
    }

    pub fn slot(&self, i: usize) -> Slot<'a> {
        assert!(i < SLOTS_PER_CLIENT);
        Slot {
            region: *self,
            off: R_SLOTS + i * SLOT_BYTES,
            index: i,
        }
    }

    /// The client's epoch slots, kept mapped by `owner`.
    fn epochs(&self, owner: Arc<dyn std::any::Any + Send + Sync>) -> Atomics {
        // SAFETY: EPOCHS_PER_CLIENT words at R_EPOCHS are inside the region (header page),
        // 8-aligned, only accessed atomically, and `owner` keeps the region mapped.
        unsafe {
            Atomics::from_raw(
                self.base.add(R_EPOCHS) as *const AtomicU64,
                EPOCHS_PER_CLIENT,
                owner,
            )
        }
    }
}

/// A client's own region, as the client maps it.
pub struct ClientRegion {
    map: Arc<Mapping>,
}

impl ClientRegion {
    /// A new client region's memfd (made by the server at each connection).
    pub fn create() -> io::Result<OwnedFd> {
        let fd = memfd(c"engram-client", CLIENT_BYTES)?;
        let ptr = mmap(Some(&fd), PAGE, libc::PROT_READ | libc::PROT_WRITE, None)?;
        let head = Mapping { ptr, len: PAGE };
        // SAFETY: the first page is mapped read/write and word 0 is aligned.
        unsafe { (*(head.ptr as *const AtomicU64)).store(CLIENT_MAGIC, Ordering::Release) };
        drop(head);
        // The client must not be able to shrink it under the server (SIGBUS) or grow it.
        seal(
            &fd,
            libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL,
        )?;
        Ok(fd)
    }

    /// Map the region received from the server.
    pub fn attach(fd: &OwnedFd) -> io::Result<ClientRegion> {
        if fd_len(fd)? != CLIENT_BYTES {
            return Err(bad("not an EngramFS client region"));
        }
        let ptr = mmap(
            Some(fd),
            CLIENT_BYTES,
            libc::PROT_READ | libc::PROT_WRITE,
            None,
        )?;
        let r = ClientRegion {
            map: Arc::new(Mapping {
                ptr,
                len: CLIENT_BYTES,
            }),
        };
        // SAFETY: word 0 of the mapped region, aligned.
        let magic = unsafe { (*(ptr as *const AtomicU64)).load(Ordering::Acquire) };
        if magic != CLIENT_MAGIC {
            // Same family, another version: a daemon of another build.
            return Err(bad(
                if magic.to_le_bytes()[..7] == CLIENT_MAGIC.to_le_bytes()[..7] {
                    "the daemon is of another EngramFS version: stop it (or let it exit when \
                 idle) and start this version's"
                } else {
                    "not an EngramFS client region"
                },
            ));
        }
        Ok(r)
    }

    pub fn region(&self) -> Region<'_> {
        Region {
            base: self.map.ptr,
            _owner: std::marker::PhantomData,
        }
    }

    pub fn epochs(&self) -> Atomics {
        self.region().epochs(self.map.clone())
    }

    /// Start of the mapping (tests scribble on it).
    pub fn as_mut_ptr(&self) -> *mut u8 {
        self.map.ptr
    }
}

/// The server's view of every client region: one reserved area, MAX_CLIENTS places.
pub struct ClientArea {
    map: Arc<Mapping>,
    /// The places a client's region is installed at: those the epoch scan reads.
    live: Arc<LiveGroups>,
}

impl ClientArea {
    pub fn new() -> io::Result<ClientArea> {
        let len = MAX_CLIENTS * CLIENT_BYTES;
        let ptr = mmap(None, len, libc::PROT_READ | libc::PROT_WRITE, None)?;
        Ok(ClientArea {
            map: Arc::new(Mapping { ptr, len }),
            live: Arc::new(LiveGroups::new(MAX_CLIENTS)),
        })
    }

    /// Which places hold a client's region (see `Epochs::scanning_only`).
    pub fn live(&self) -> Arc<LiveGroups> {
        self.live.clone()
    }

    fn base(&self, index: usize) -> *mut u8 {
        assert!(index < MAX_CLIENTS);
        // SAFETY: index < MAX_CLIENTS: the place is inside the area.
        unsafe { self.map.ptr.add(index * CLIENT_BYTES) }
    }

    /// Map a client's region (checked to be one) at its place.
    pub fn install(&self, index: usize, fd: &OwnedFd) -> io::Result<()> {
        if fd_len(fd)? != CLIENT_BYTES {
            return Err(bad("client region of the wrong size"));
        }
        mmap(
            Some(fd),
            CLIENT_BYTES,
            libc::PROT_READ | libc::PROT_WRITE,
            Some(self.base(index)),
        )?;
        // Before the client can pin an epoch there: it gets the region after this.
        self.live.set(index);
        Ok(())
    }

    /// Put zero pages back at a departed client's place (its epochs read as unpinned).
    pub fn clear(&self, index: usize) -> io::Result<()> {
        mmap(
            None,
            CLIENT_BYTES,
            libc::PROT_READ | libc::PROT_WRITE,
            Some(self.base(index)),
        )?;
        self.live.unset(index);
        Ok(())
    }

    pub fn region(&self, index: usize) -> Region<'_> {
        Region {
            base: self.base(index),
            _owner: std::marker::PhantomData,
        }
    }

    /// Every client's epoch slots, one group per place.
    pub fn epoch_groups(&self) -> Vec<Atomics> {
        (0..MAX_CLIENTS)
            .map(|i| self.region(i).epochs(self.map.clone()))
            .collect()
    }
}

/// One request slot. The client writes only the request line (and, when it goes to sleep,
/// the `waiting` line); the server writes only the reply line. A round trip then moves
/// each line once between the cores: the client's store takes the request line from the
/// server's cache and the server's poll takes it back, and the same for the reply. (When
/// both sides wrote one state word, a round trip moved it, the payload and the resets
/// across about eight times.) A message of up to `INLINE` bytes travels in its block; a
/// longer one in the slot's payload area, which the request and then the reply use in
/// turn. A request is pending while its sequence number differs from the reply's.
pub struct Slot<'a> {
    region: Region<'a>,
    off: usize,
    index: usize,
}

/// A message block, two cache lines: sequence number, length, then up to INLINE bytes of
/// message (a one-page write commit with its check is 70 bytes). The second line is
/// copied right after the first, so both cross at once.
const BLOCK: usize = 128;
pub const INLINE: usize = BLOCK - 8;
// Offsets in a slot: each block in its own 128-byte-aligned pair of lines, so that the
// adjacent-line prefetcher never pulls the other side's lines along.
const S_REQUEST: usize = 0;
const S_WAITING: usize = BLOCK;
const S_REPLY: usize = 2 * BLOCK;

impl<'a> Slot<'a> {
    /// Taken by a client thread for one call, or holding a posted request (threads of one
    /// process share the slots; the client's own encoding). It lives in the header page,
    /// which the server never reads.
    pub fn owner(&self) -> &'a AtomicU64 {
        self.region.u64_at(R_OWNERS + self.index * 64)
    }
    pub fn request_seq(&self) -> &'a AtomicU32 {
        self.region.u32_at(self.off + S_REQUEST)
    }
    /// The reply's sequence number; also the futex word a sleeping client waits on.
    pub fn reply_seq(&self) -> &'a AtomicU32 {
        self.region.u32_at(self.off + S_REPLY)
    }
    /// How many client threads sleep on `reply_seq` (each adds itself before it sleeps and
    /// removes itself after): the server wakes them when it is not 0. A count, since any
    /// number of threads may wait on one slot (`Remote::settle`).
    pub fn waiting(&self) -> &'a AtomicU32 {
        self.region.u32_at(self.off + S_WAITING)
    }
    /// The processor a client thread yields on while it waits for the reply
    /// (`daemon::idle::yielding_mark`, 0 when none): a server that answers it on that
    /// processor then gives it up. Only a hint: threads waiting on one slot overwrite it.
    pub fn yielding_on(&self) -> &'a AtomicU32 {
        self.region.u32_at(self.off + S_WAITING + 4)
    }

    /// Whether a request waits for its reply (read by the server).
    pub fn pending(&self) -> Option<u32> {
        let seq = self.request_seq().load(Ordering::Acquire);
        (seq != self.reply_seq().load(Ordering::Relaxed)).then_some(seq)
    }

    /// Copy a request into the slot (the caller then publishes it through `request_seq`).
    pub fn put_request(&self, data: &[u8]) -> io::Result<()> {
        self.put(S_REQUEST, data)
    }

    /// Copy a reply into the slot (the caller then publishes it through `reply_seq`).
    pub fn put_reply(&self, data: &[u8]) -> io::Result<()> {
        self.put(S_REPLY, data)
    }

    pub fn get_request(&self, out: &mut Vec<u8>) {
        self.get(S_REQUEST, out)
    }

    pub fn get_reply(&self, out: &mut Vec<u8>) {
        self.get(S_REPLY, out)
    }

    fn put(&self, line: usize, data: &[u8]) -> io::Result<()> {
        if data.len() > SLOT_PAYLOAD {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "request too large for a slot",
            ));
        }
        let to = if data.len() <= INLINE {
            self.off + line + 8
        } else {
            self.off + SLOT_HEADER
        };
        // SAFETY: both places are inside the region and large enough (checked above). The
        // other side may scribble on them concurrently (it is shared memory): we only copy
        // bytes, never form references to them.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), self.region.base.add(to), data.len())
        };
        self.region
            .u32_at(self.off + line + 4)
            .store(data.len() as u32, Ordering::Release);
        Ok(())
    }

    /// Copy a message out (replacing what `out` held, reusing its allocation). The length
    /// comes from the other side: clamp it, never trust it.
    fn get(&self, line: usize, out: &mut Vec<u8>) {
        let n = (self
            .region
            .u32_at(self.off + line + 4)
            .load(Ordering::Acquire) as usize)
            .min(SLOT_PAYLOAD);
        let from = if n <= INLINE {
            self.off + line + 8
        } else {
            self.off + SLOT_HEADER
        };
        out.clear();
        out.reserve(n);
        // SAFETY: `n` is clamped to the place it is read from, inside the region, and
        // `out` has room for `n` bytes, all of which are written before the length is set.
        unsafe {
            std::ptr::copy_nonoverlapping(self.region.base.add(from), out.as_mut_ptr(), n);
            out.set_len(n);
        }
    }
}

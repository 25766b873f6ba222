//! The daemon's shared memory: a memfd shared by the server and its clients, holding the
//! epoch table, the per-inode sequence counters and each client's request slots.

use crate::epoch::{Atomics, Epochs, SeqTable};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

const MAGIC: u64 = u64::from_le_bytes(*b"ENGRSHM1");
const PAGE: usize = 4096;
pub const MAX_CLIENTS: usize = 64;
pub const SLOTS_PER_CLIENT: usize = 8;
pub const EPOCHS_PER_CLIENT: usize = 32;
/// Bytes of request or reply a slot carries (an 8 MiB write commit of scattered pages fits).
pub const SLOT_PAYLOAD: usize = 96 << 10;
const SLOT_HEADER: usize = 64;
const SLOT_BYTES: usize = SLOT_HEADER + SLOT_PAYLOAD;

pub const IDLE: u32 = 0;
pub const REQUEST: u32 = 1;
pub const REPLY: u32 = 2;

/// Where things are in the region.
#[derive(Clone, Copy, Debug)]
struct Layout {
    inodes: usize,
    epochs: usize,
    seqs: usize,
    slots: usize,
    len: usize,
}

impl Layout {
    fn new(inodes: usize) -> Layout {
        let round = |v: usize| v.div_ceil(PAGE) * PAGE;
        let epochs = PAGE;
        let seqs = epochs + round(MAX_CLIENTS * EPOCHS_PER_CLIENT * 8);
        let slots = seqs + round(inodes * 8);
        let len = slots + MAX_CLIENTS * SLOTS_PER_CLIENT * SLOT_BYTES;
        Layout {
            inodes,
            epochs,
            seqs,
            slots,
            len,
        }
    }
}

struct Mapping {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the mapping is plain shared memory accessed through atomics and slot protocol.
unsafe impl Send for Mapping {}
// SAFETY: as above.
unsafe impl Sync for Mapping {}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: ptr/len come from a successful mmap and nothing borrows them any more
        // (every view holds an Arc of this mapping).
        unsafe { libc::munmap(self.ptr as *mut libc::c_void, self.len) };
    }
}

/// A mapped shared region.
#[derive(Clone)]
pub struct Shm {
    map: Arc<Mapping>,
    layout: Layout,
}

fn map_fd(fd: &OwnedFd, len: usize) -> io::Result<Mapping> {
    // SAFETY: mapping a memfd we own for `len` bytes, shared and read/write.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd.as_raw_fd(),
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    Ok(Mapping {
        ptr: p as *mut u8,
        len,
    })
}

impl Shm {
    /// Create the region for a pool with `inodes` inodes; returns it and its memfd.
    pub fn create(inodes: u64) -> io::Result<(Shm, OwnedFd)> {
        let layout = Layout::new(inodes as usize);
        // SAFETY: memfd_create with a static NUL-terminated name.
        let raw = unsafe { libc::memfd_create(c"engram-shm".as_ptr(), libc::MFD_CLOEXEC) };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `raw` is a fresh descriptor we own.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: resizing our own memfd.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), layout.len as libc::off_t) } != 0 {
            return Err(io::Error::last_os_error());
        }
        let shm = Shm {
            map: Arc::new(map_fd(&fd, layout.len)?),
            layout,
        };
        shm.word(8).store(inodes, Ordering::Relaxed);
        shm.word(128).store(1, Ordering::Relaxed);
        shm.word(0).store(MAGIC, Ordering::Release);
        Ok((shm, fd))
    }

    /// Map a region received from the server.
    pub fn attach(fd: OwnedFd) -> io::Result<Shm> {
        let head = map_fd(&fd, PAGE)?;
        // SAFETY: the first page is mapped; words 0 and 1 are u64-aligned.
        let (magic, inodes) =
            unsafe { (*(head.ptr as *const u64), *(head.ptr as *const u64).add(1)) };
        drop(head);
        if magic != MAGIC || inodes > 1 << 40 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "not an EngramFS shared region",
            ));
        }
        let layout = Layout::new(inodes as usize);
        Ok(Shm {
            map: Arc::new(map_fd(&fd, layout.len)?),
            layout,
        })
    }

    fn word(&self, off: usize) -> &AtomicU64 {
        assert!(off + 8 <= self.layout.len && off.is_multiple_of(8));
        // SAFETY: in bounds and aligned (checked), and the region is only accessed atomically
        // at these offsets.
        unsafe { &*(self.map.ptr.add(off) as *const AtomicU64) }
    }

    fn atomics(&self, off: usize, n: usize) -> Atomics {
        assert!(off + n * 8 <= self.layout.len);
        let owner: Arc<dyn std::any::Any + Send + Sync> = self.map.clone();
        // SAFETY: the range is inside the mapping, 8-aligned, and `owner` keeps it mapped.
        unsafe { Atomics::from_raw(self.map.ptr.add(off) as *const AtomicU64, n, owner) }
    }

    /// The epoch table; a client pins in the slots of its client index, the server
    /// (index None) in none of them but scans all.
    pub fn epochs(&self, client: Option<usize>) -> Epochs {
        let all = MAX_CLIENTS * EPOCHS_PER_CLIENT;
        let mine = match client {
            Some(i) => i * EPOCHS_PER_CLIENT..(i + 1) * EPOCHS_PER_CLIENT,
            None => 0..0,
        };
        Epochs::shared(
            self.atomics(128, 1),
            self.atomics(self.layout.epochs, all),
            mine,
        )
    }

    pub fn epoch_range(client: usize) -> std::ops::Range<usize> {
        client * EPOCHS_PER_CLIENT..(client + 1) * EPOCHS_PER_CLIENT
    }

    pub fn seqs(&self) -> SeqTable {
        SeqTable::shared(self.atomics(self.layout.seqs, self.layout.inodes))
    }

    /// The server's doorbell: clients bump it after posting a request.
    pub fn doorbell(&self) -> &AtomicU32 {
        self.u32_at(64)
    }

    /// Set while the server sleeps on the doorbell.
    pub fn server_sleeping(&self) -> &AtomicU32 {
        self.u32_at(68)
    }

    fn u32_at(&self, off: usize) -> &AtomicU32 {
        assert!(off + 4 <= self.layout.len && off.is_multiple_of(4));
        // SAFETY: in bounds and aligned, only accessed atomically.
        unsafe { &*(self.map.ptr.add(off) as *const AtomicU32) }
    }

    pub fn slot(&self, client: usize, i: usize) -> Slot<'_> {
        assert!(client < MAX_CLIENTS && i < SLOTS_PER_CLIENT);
        let off = self.layout.slots + (client * SLOTS_PER_CLIENT + i) * SLOT_BYTES;
        Slot { shm: self, off }
    }
}

/// One request slot: `owner` (a client thread holds it), `state` (IDLE, REQUEST, REPLY; a
/// futex word), `waiting` (the client sleeps on `state`), the payload length, the payload.
pub struct Slot<'a> {
    shm: &'a Shm,
    off: usize,
}

impl Slot<'_> {
    pub fn owner(&self) -> &AtomicU32 {
        self.shm.u32_at(self.off)
    }
    pub fn state(&self) -> &AtomicU32 {
        self.shm.u32_at(self.off + 4)
    }
    pub fn waiting(&self) -> &AtomicU32 {
        self.shm.u32_at(self.off + 8)
    }
    fn len(&self) -> &AtomicU32 {
        self.shm.u32_at(self.off + 12)
    }

    /// Copy a message into the payload (the caller then publishes it through `state`).
    pub fn put(&self, data: &[u8]) -> io::Result<()> {
        if data.len() > SLOT_PAYLOAD {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "request too large for a slot",
            ));
        }
        // SAFETY: the payload area is inside the mapping and large enough (checked above); the
        // protocol gives the writer exclusive use of it until `state` is published.
        unsafe {
            std::ptr::copy_nonoverlapping(
                data.as_ptr(),
                self.shm.map.ptr.add(self.off + SLOT_HEADER),
                data.len(),
            )
        };
        self.len().store(data.len() as u32, Ordering::Release);
        Ok(())
    }

    /// Copy the payload out. The length comes from the other side: clamp it, never trust it.
    pub fn get(&self) -> Vec<u8> {
        let n = (self.len().load(Ordering::Acquire) as usize).min(SLOT_PAYLOAD);
        let mut v = vec![0u8; n];
        // SAFETY: `n` is clamped to the payload area inside the mapping.
        unsafe {
            std::ptr::copy_nonoverlapping(
                self.shm.map.ptr.add(self.off + SLOT_HEADER),
                v.as_mut_ptr(),
                n,
            )
        };
        v
    }

    pub fn reset(&self) {
        self.state().store(IDLE, Ordering::Release);
        self.waiting().store(0, Ordering::Release);
        self.owner().store(0, Ordering::Release);
    }
}

/// Sleep while `word` holds `expected` (or until `timeout`).
pub fn futex_wait(word: &AtomicU32, expected: u32, timeout: Duration) {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: a FUTEX_WAIT on a valid, aligned u32 in shared memory with a valid timespec.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            expected,
            &ts as *const libc::timespec,
        );
    }
}

/// Wake every sleeper on `word`.
pub fn futex_wake(word: &AtomicU32) {
    // SAFETY: a FUTEX_WAKE on a valid, aligned u32 in shared memory.
    unsafe {
        libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE, i32::MAX);
    }
}

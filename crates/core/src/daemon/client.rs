//! The client end of the daemon's shared-memory transport.

use super::futex;
use super::handshake::{self, Hello};
use super::idle;
use super::shm::{self, ClientRegion, Common, SLOTS_PER_CLIENT};
use super::wake::Wake;
use crate::epoch::{Epochs, SeqTable};
use crate::error::{Error, Result};
use crate::request::{Request, Response};
use crate::wire::{self, Writer};
use std::cell::RefCell;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// Lowest descriptor number the connection keeps: programs (shells especially) take the
/// small numbers for themselves and may overwrite them with dup2. Each descriptor the
/// connection keeps is moved there as soon as it exists, so that a program's shim need not
/// take every free small number around the connect (120 system calls).
pub const MIN_FD: i32 = 64;

fn above_min(fd: OwnedFd) -> OwnedFd {
    engram_pmem::fd_at_or_above(fd, MIN_FD)
}

/// How long a waiting client busy-waits before it starts yielding the processor: longer
/// than a request takes a daemon on another core, so that there it never pays for a
/// system call (a `sched_yield` costs about 0.5 µs here).
pub(crate) const SPIN_TIME: Duration = Duration::from_micros(3);
/// Then how many times it yields before it sleeps on its slot. A daemon that shares the
/// client's core gets it at once, where spinning would hold it for a whole time slice (an
/// unlink through the daemon with both pinned to one core: 156 µs when the client spun
/// 4,000 steps and the daemon never yielded, 17 µs with both yielding after 3 µs).
const YIELDS: u32 = 64;

/// A slot's owner word: free, claimed by a thread for a call, or holding a posted request
/// whose reply nobody has collected yet: `posted_word(seq)`, the request's number in the word,
/// so that whoever frees it frees that request and not a later one posted in the slot.
const FREE: u64 = 0;
const TAKEN: u64 = 1;
const POSTED_TAG: u64 = 2;

fn posted_word(seq: u32) -> u64 {
    (seq as u64) << 2 | POSTED_TAG
}

const DAEMON_GONE: &str = "the EngramFS daemon has gone away";

fn daemon_gone_error() -> Error {
    Error::with_msg(libc::EIO, DAEMON_GONE)
}

impl Error {
    /// Whether this is the error of a call made after the daemon went away.
    pub fn is_daemon_gone(&self) -> bool {
        self.errno() == libc::EIO && self.message() == Some(DAEMON_GONE)
    }
}

pub struct Remote {
    /// The server's region (header, global epoch, sequence counters), mapped read-only.
    common: Common,
    common_fd: OwnedFd,
    /// This client's own region: doorbell, epoch slots, request slots.
    mine: ClientRegion,
    /// The word to ring when the server sleeps (every client's).
    wake: Wake,
    pub hello: Hello,
    /// Kept open: the server notices the client is gone when it closes.
    stream: UnixStream,
    /// Set once a call found the daemon gone: later calls fail at once, and the slot of
    /// the abandoned request stays taken (were it reused, a server still reading this
    /// region could answer the new request with the old one's number and serve it twice).
    gone: AtomicBool,
    /// How many slots hold a posted request (see `post`) whose reply is not yet collected.
    posted: AtomicU32,
}

impl Remote {
    /// The descriptors the connection keeps open (its socket and the server's region).
    pub fn descriptors(&self) -> [std::os::fd::RawFd; 2] {
        use std::os::fd::AsRawFd;
        [self.stream.as_raw_fd(), self.common_fd.as_raw_fd()]
    }

    pub fn connect(socket: &Path) -> Result<Remote> {
        let stream = UnixStream::connect(socket).map_err(|e| {
            Error::with_msg(
                crate::error::io_errno(&e),
                format!(
                    "cannot reach an EngramFS daemon at {}: {e}",
                    socket.display()
                ),
            )
        })?;
        let stream = UnixStream::from(above_min(OwnedFd::from(stream)));
        let (hello, [common_fd, mine, wake]) = handshake::recv_hello(&stream)
            .map_err(|e| Error::with_msg(libc::EPROTO, format!("daemon handshake failed: {e}")))?;
        let common_fd = above_min(common_fd);
        let common = Common::attach(&common_fd)?;
        let mine = ClientRegion::attach(&mine)?;
        let wake = Wake::attach(&wake)?;
        Ok(Remote {
            common,
            common_fd,
            mine,
            wake,
            hello,
            stream,
            gone: AtomicBool::new(false),
            posted: AtomicU32::new(0),
        })
    }

    /// Epochs: pinned in this client's own slots, against the server's global epoch.
    pub fn epochs(&self) -> Epochs {
        Epochs::shared(self.common.global_epoch(), vec![self.mine.epochs()], 0)
    }

    pub fn seqs(&self) -> SeqTable {
        self.common.seqs()
    }

    pub fn mapped(&self) -> crate::inode_bits::InodeBits {
        self.common.mapped()
    }

    pub fn several_writers(&self) -> crate::inode_bits::InodeBits {
        self.common.several_writers()
    }

    pub fn mapped_live(&self) -> crate::inode_bits::InodeBits {
        self.common.mapped_live()
    }

    /// The descriptor and mapping of the server's region (tests check that a client can
    /// neither write the mapping nor map the descriptor writable).
    pub fn common_region(&self) -> (RawFd, *const u8) {
        (self.common_fd.as_raw_fd(), self.common.as_ptr())
    }

    /// This client's own region (what it may write: doorbell, epochs, slots) and its size.
    pub fn own_region(&self) -> (*mut u8, usize) {
        (self.mine.as_mut_ptr(), shm::CLIENT_BYTES)
    }

    fn daemon_gone(&self) -> bool {
        let mut p = libc::pollfd {
            fd: self.stream.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: polling one valid descriptor without waiting.
        let r = unsafe { libc::poll(&mut p, 1, 0) };
        // POLLNVAL: the program closed the socket (closefrom, close_range): the connection is
        // lost all the same, and waiting on would hang.
        r > 0 && p.revents & (libc::POLLHUP | libc::POLLERR | libc::POLLIN | libc::POLLNVAL) != 0
    }

    pub fn call(&self, req: &Request) -> Result<Response> {
        self.call_with(|w| wire::encode_request(req, w))
    }

    /// Encode a request with `encode` into this thread's buffer, send it and decode the
    /// reply.
    pub fn call_with(&self, encode: impl FnOnce(&mut Writer)) -> Result<Response> {
        with_buffers(|(w, reply)| {
            encode(w);
            self.call_raw_into(&w.0, reply)?;
            wire::decode_reply(reply)
        })
    }

    /// Send a request whose reply nobody needs (a close) without waiting for it: the next
    /// call of any thread of this process first waits until the server has answered it,
    /// so the server still sees this process's requests in the order they were made, and
    /// the round trip overlaps the caller's next work. Errors in the reply are dropped.
    pub fn post(&self, req: &Request) -> Result<()> {
        with_buffers(|(w, _)| {
            wire::encode_request(req, w);
            let slot = self.next_slot()?;
            let seq = match self.send(&slot, &w.0) {
                Ok(seq) => seq,
                Err(e) => {
                    slot.owner().store(FREE, Ordering::Release);
                    return Err(e);
                }
            };
            self.posted.fetch_add(1, Ordering::AcqRel);
            slot.owner().store(posted_word(seq), Ordering::Release);
            Ok(())
        })
    }

    /// How many requests this connection has sent, modulo 2^32 (tests check which calls
    /// reach the server): the sum of the slots' request numbers.
    pub fn requests_sent(&self) -> u32 {
        (0..SLOTS_PER_CLIENT).fold(0u32, |n, i| {
            n.wrapping_add(
                self.mine
                    .region()
                    .slot(i)
                    .request_seq()
                    .load(Ordering::Acquire),
            )
        })
    }

    /// How many posted requests await their answer (tests check that a call collects them).
    pub fn posted(&self) -> u32 {
        self.posted.load(Ordering::Acquire)
    }

    /// Wait until every posted request has been answered, and free its slot. The slot is
    /// waited on without being taken: any number of threads may wait on one (a signal
    /// handler's call inside another call's wait, say), and whoever frees it counts it.
    /// `posted` is only the fast path's hint: one pass finds every request posted by a
    /// `post` that has returned, which is all the order promised.
    fn settle(&self) -> Result<()> {
        if self.posted.load(Ordering::Acquire) == 0 {
            return Ok(());
        }
        for i in 0..SLOTS_PER_CLIENT {
            let s = self.mine.region().slot(i);
            let word = s.owner().load(Ordering::Acquire);
            if word & 3 != POSTED_TAG {
                continue;
            }
            // Freed and reused meanwhile, the slot has answered this request already.
            self.wait_reply(&s, (word >> 2) as u32)?;
            if s.owner()
                .compare_exchange(word, FREE, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
            {
                self.posted.fetch_sub(1, Ordering::AcqRel);
            }
        }
        Ok(())
    }

    /// Send an encoded request and return the encoded reply (tests send forged bytes).
    pub fn call_raw(&self, payload: &[u8]) -> Result<Vec<u8>> {
        let mut reply = Vec::new();
        self.call_raw_into(payload, &mut reply)?;
        Ok(reply)
    }

    /// Send `payload` and wait for its answer, whose contents are dropped: allocates
    /// nothing (a wait in a signal handler sends `Request::Gone` this way).
    pub fn call_unanswered(&self, payload: &[u8]) -> Result<()> {
        let slot = self.next_slot()?;
        let result = self
            .send(&slot, payload)
            .and_then(|seq| self.wait_reply(&slot, seq));
        if !self.gone.load(Ordering::Acquire) {
            slot.owner().store(FREE, Ordering::Release);
        }
        result
    }

    /// `call_raw` into `reply` (replacing what it held).
    fn call_raw_into(&self, payload: &[u8], reply: &mut Vec<u8>) -> Result<()> {
        let slot = self.next_slot()?;
        let result = self
            .send(&slot, payload)
            .and_then(|seq| self.wait_reply(&slot, seq))
            .map(|()| slot.get_reply(reply));
        if !self.gone.load(Ordering::Acquire) {
            slot.owner().store(FREE, Ordering::Release);
        }
        result
    }

    /// Put a request into a slot this thread has claimed and ring the doorbell; returns
    /// the request's number.
    fn send(&self, slot: &shm::Slot<'_>, payload: &[u8]) -> Result<u32> {
        let seq = slot.request_seq().load(Ordering::Relaxed).wrapping_add(1);
        slot.put_request(payload)
            .map_err(|e| Error::with_msg(libc::E2BIG, e.to_string()))?;
        slot.request_seq().store(seq, Ordering::Release);
        // The doorbell's locked add orders the request before the `sleeping` check (a line
        // of this client's own, which the server reads only while the client is idle): a
        // server that announced its sleep after this finds the request in its last scan;
        // one that announced it before sees the wake word change, or is woken.
        self.mine.region().bell().fetch_add(1, Ordering::SeqCst);
        self.wake_if_asleep();
        Ok(seq)
    }

    /// Ring the wake word if the server sleeps. Every client can write that word, so
    /// another could put back the value the server noted before it waits, and the server
    /// would sleep through this ring: `wait_reply` rings again before each of its sleeps
    /// (a wake reaches a server already waiting whatever the word holds).
    fn wake_if_asleep(&self) {
        if self.common.sleeping().load(Ordering::SeqCst) != 0 {
            let word = self.wake.word();
            word.fetch_add(1, Ordering::SeqCst);
            futex::wake(word);
        }
    }

    /// Wait until the server has answered request `seq` in `slot` (or a later one: a slot
    /// `settle` waits on without holding it may have been reused): spin, then yield, then
    /// sleep, checking that the daemon is still there.
    fn wait_reply(&self, slot: &shm::Slot<'_>, seq: u32) -> Result<()> {
        let (mut spins, mut yields) = (0u32, 0u32);
        let mut started: Option<Instant> = None;
        loop {
            let seen = slot.reply_seq().load(Ordering::Acquire);
            if seen.wrapping_sub(seq) as i32 >= 0 {
                break;
            }
            spins += 1;
            // The clock is read every 64 steps, and only once the reply is late.
            if yields == 0
                && (!spins.is_multiple_of(64)
                    || started.get_or_insert_with(Instant::now).elapsed() < SPIN_TIME)
            {
                std::hint::spin_loop();
                continue;
            }
            if yields < YIELDS {
                yields += 1;
                // Tells a server on this processor to give it back once it has answered.
                slot.yielding_on()
                    .store(idle::yielding_mark(), Ordering::Relaxed);
                std::thread::yield_now();
                continue;
            }
            slot.waiting().fetch_add(1, Ordering::SeqCst);
            if slot.reply_seq().load(Ordering::SeqCst) == seen {
                self.wake_if_asleep();
                futex::wait(slot.reply_seq(), seen, Duration::from_millis(200));
            }
            slot.waiting().fetch_sub(1, Ordering::Release);
            let answered = slot.reply_seq().load(Ordering::Acquire).wrapping_sub(seq) as i32 >= 0;
            if !answered && self.daemon_gone() {
                self.gone.store(true, Ordering::Release);
                return Err(daemon_gone_error());
            }
        }
        if yields > 0 {
            slot.yielding_on().store(0, Ordering::Relaxed);
        }
        Ok(())
    }

    /// The slot for this process's next request: none once the daemon has gone, and only
    /// after every posted request has been answered (the order `post` promises).
    fn next_slot(&self) -> Result<shm::Slot<'_>> {
        if self.gone.load(Ordering::Acquire) {
            return Err(daemon_gone_error());
        }
        self.settle()?;
        self.claim()
    }

    /// A free request slot of this client (threads of one process share the client's slots).
    fn claim(&self) -> Result<shm::Slot<'_>> {
        let mut round = 0usize;
        loop {
            for i in 0..SLOTS_PER_CLIENT {
                let s = self.mine.region().slot((i + round) % SLOTS_PER_CLIENT);
                if s.owner()
                    .compare_exchange(FREE, TAKEN, Ordering::AcqRel, Ordering::Relaxed)
                    .is_ok()
                {
                    return Ok(s);
                }
            }
            round += 1;
            // Every slot busy: some may hold posted requests only this wait frees.
            self.settle()?;
            std::thread::yield_now();
        }
    }
}

/// Run `f` with this thread's request and reply buffers, cleared: no allocation per call
/// once they have grown (a nested call, from a signal handler say, uses buffers of its own).
fn with_buffers<T>(f: impl FnOnce(&mut (Writer, Vec<u8>)) -> T) -> T {
    thread_local! {
        static BUFS: RefCell<(Writer, Vec<u8>)> =
            const { RefCell::new((Writer(Vec::new()), Vec::new())) };
    }
    let mut f = Some(f);
    let mut go = |b: &mut (Writer, Vec<u8>)| {
        b.0.0.clear();
        (f.take().expect("one use per call"))(b)
    };
    BUFS.try_with(|b| b.try_borrow_mut().ok().map(|mut b| go(&mut b)))
        .ok()
        .flatten()
        .unwrap_or_else(|| go(&mut (Writer(Vec::new()), Vec::new())))
}

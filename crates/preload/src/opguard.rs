//! The operation guard: every call into EngramFS holds it, and `fork` waits until no thread
//! does, so that no other thread holds EngramFS's locks when the process is copied.
//!
//! Taking it costs no atomic read-modify-write: each thread marks itself in a cache line of
//! its own with plain stores, and the forking thread makes those stores visible with
//! membarrier(2) before it waits for the marks to clear (an asymmetric fence, as user-space
//! RCU does): a thread that marked itself before the fork's announcement is seen marked, one
//! that marks itself later sees the announcement and steps back until the fork is done.
//! Where the kernel has no expedited private membarrier, or every mark is taken, a spin
//! lock's read side (one atomic add each way) serves instead.

use crate::util::{ReadGuard, SpinRw, backoff};
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, Ordering, compiler_fence};

/// Threads that can hold a mark at once; more take the spin lock.
const MARKS: usize = 256;

#[repr(align(64))]
struct Mark {
    /// How many guards this mark's thread holds (guards nest).
    depth: AtomicU32,
    /// Owned by a live thread.
    taken: AtomicBool,
}

static MARK: [Mark; MARKS] = [const {
    Mark {
        depth: AtomicU32::new(0),
        taken: AtomicBool::new(false),
    }
}; MARKS];

/// Set by a fork in progress: threads step back instead of marking themselves.
static FORKING: AtomicBool = AtomicBool::new(false);
/// Whether marks are used: 0 not known yet, 1 yes (membarrier registered), 2 no.
static MODE: AtomicU8 = AtomicU8::new(0);
/// The fallback, and what fork takes for threads that use it.
static LOCK: SpinRw = SpinRw::new();

const MEMBARRIER_CMD_PRIVATE_EXPEDITED: libc::c_int = 1 << 3;
const MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED: libc::c_int = 1 << 4;

fn membarrier(cmd: libc::c_int) -> bool {
    // SAFETY: membarrier takes two integers and touches no memory of ours.
    unsafe { libc::syscall(libc::SYS_membarrier, cmd, 0, 0) == 0 }
}

/// Decide once (at load time, before any thread takes a guard) whether marks are used.
pub fn init() {
    if MODE.load(Ordering::Acquire) == 0 {
        let ok = membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED);
        MODE.store(if ok { 1 } else { 2 }, Ordering::Release);
    }
}

// MINE: this thread's mark, its index plus one (0 before the first guard, `usize::MAX`
// where the thread uses the spin lock). OWNER gives the mark back at thread exit.
thread_local! {
    static MINE: Cell<usize> = const { Cell::new(0) };
    static OWNER: Owner = const { Owner(Cell::new(usize::MAX)) };
}

/// Gives the thread's mark back when the thread exits.
struct Owner(Cell<usize>);

impl Drop for Owner {
    fn drop(&mut self) {
        // A thread-local destructor that runs after this one (a C++ `thread_local` registered
        // earlier, closing a file) must not use the mark another thread may take next.
        let _ = MINE.try_with(|c| c.set(usize::MAX));
        if let Some(m) = MARK.get(self.0.get()) {
            m.depth.store(0, Ordering::Relaxed);
            m.taken.store(false, Ordering::Release);
        }
    }
}

#[cold]
fn take_mark() -> usize {
    if MODE.load(Ordering::Acquire) != 1 {
        return usize::MAX;
    }
    for (i, m) in MARK.iter().enumerate() {
        if !m.taken.load(Ordering::Relaxed)
            && m.taken
                .compare_exchange(false, true, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        {
            // Registering the owner can fail while the thread is exiting: then the mark is
            // given back at once and the thread uses the lock.
            if OWNER.try_with(|o| o.0.set(i)).is_err() {
                m.taken.store(false, Ordering::Release);
                return usize::MAX;
            }
            return i + 1;
        }
    }
    usize::MAX
}

/// Held while a call is inside EngramFS (`session::op`).
pub struct OpGuard(Held);

enum Held {
    Mark(&'static Mark),
    /// Released by its own drop.
    Lock(#[allow(dead_code)] ReadGuard<'static>),
}

/// Take the guard.
#[inline]
pub fn enter() -> OpGuard {
    let mine = MINE.try_with(|c| {
        let v = c.get();
        if v != 0 {
            return v;
        }
        let v = take_mark();
        c.set(v);
        v
    });
    match mine {
        Ok(v) if v != usize::MAX => {
            let m = &MARK[v - 1];
            let d = m.depth.load(Ordering::Relaxed);
            m.depth.store(d + 1, Ordering::Relaxed);
            if d == 0 {
                // Only the compiler must keep the mark before the check: a fork's membarrier
                // orders the processor.
                compiler_fence(Ordering::SeqCst);
                if FORKING.load(Ordering::Relaxed) {
                    wait_for_fork(m);
                }
            }
            OpGuard(Held::Mark(m))
        }
        _ => OpGuard(Held::Lock(LOCK.read())),
    }
}

/// Step back while a fork is in progress, then mark again.
#[cold]
fn wait_for_fork(m: &Mark) {
    loop {
        m.depth.store(0, Ordering::Release);
        let mut spins = 0;
        while FORKING.load(Ordering::Acquire) {
            backoff(&mut spins);
        }
        m.depth.store(1, Ordering::Relaxed);
        compiler_fence(Ordering::SeqCst);
        if !FORKING.load(Ordering::Relaxed) {
            return;
        }
    }
}

impl Drop for OpGuard {
    #[inline]
    fn drop(&mut self) {
        if let Held::Mark(m) = &self.0 {
            let d = m.depth.load(Ordering::Relaxed);
            m.depth.store(d.saturating_sub(1), Ordering::Release);
        }
    }
}

/// Before fork: wait until no thread holds a guard (the forking thread holds none).
pub fn before_fork() {
    LOCK.write_lock();
    if MODE.load(Ordering::Acquire) != 1 {
        return;
    }
    FORKING.store(true, Ordering::SeqCst);
    // Cannot fail: the process registered for it at load time (MODE 1).
    membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED);
    for m in &MARK {
        let mut spins = 0;
        while m.depth.load(Ordering::Acquire) != 0 {
            backoff(&mut spins);
        }
    }
}

pub fn after_fork_parent() {
    FORKING.store(false, Ordering::Release);
    LOCK.write_unlock();
}

/// In the child: only the forking thread exists; every other mark is free again.
pub fn after_fork_child() {
    let mine = MINE.try_with(Cell::get).unwrap_or(usize::MAX);
    // Only marks in use are written: a store to each would copy all of MARK's pages into
    // the child (four page faults in every forked child).
    for (i, m) in MARK.iter().enumerate() {
        if i + 1 != mine
            && (m.taken.load(Ordering::Relaxed) || m.depth.load(Ordering::Relaxed) != 0)
        {
            m.depth.store(0, Ordering::Relaxed);
            m.taken.store(false, Ordering::Relaxed);
        }
    }
    FORKING.store(false, Ordering::Release);
    LOCK.reset_after_fork();
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    fn taken() -> usize {
        MARK.iter()
            .filter(|m| m.taken.load(Ordering::SeqCst))
            .count()
    }

    #[test]
    fn a_thread_gives_its_mark_back_when_it_exits() {
        init();
        if MODE.load(Ordering::SeqCst) != 1 {
            return; // no expedited membarrier here: every thread uses the lock
        }
        // More threads, one after another, than there are marks: each takes one and gives
        // it back (other tests' threads may hold a few meanwhile).
        for _ in 0..MARKS + 20 {
            std::thread::spawn(|| {
                let g = enter();
                assert!(
                    matches!(g.0, Held::Mark(_)),
                    "no mark left for a new thread"
                );
            })
            .join()
            .unwrap();
        }
        assert!(taken() < MARKS / 2, "{} marks still taken", taken());
    }

    #[test]
    fn guards_nest_and_a_fork_waits_for_them() {
        init();
        {
            let _a = enter();
            let _b = enter();
        }
        static INSIDE: AtomicU64 = AtomicU64::new(0);
        static STOP: AtomicBool = AtomicBool::new(false);
        let workers: Vec<_> = (0..3)
            .map(|_| {
                std::thread::spawn(|| {
                    while !STOP.load(Ordering::Relaxed) {
                        let _g = enter();
                        INSIDE.fetch_add(1, Ordering::SeqCst);
                        std::hint::spin_loop();
                        INSIDE.fetch_sub(1, Ordering::SeqCst);
                    }
                })
            })
            .collect();
        for _ in 0..200 {
            before_fork();
            // No thread is inside a guard while the fork holds it.
            assert_eq!(INSIDE.load(Ordering::SeqCst), 0);
            std::thread::yield_now();
            assert_eq!(INSIDE.load(Ordering::SeqCst), 0);
            after_fork_parent();
        }
        STOP.store(true, Ordering::Relaxed);
        for w in workers {
            w.join().unwrap();
        }
    }
}

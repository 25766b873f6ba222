//! Whether this process is a fork of the one that made an `Fs`. A forked child shares its
//! parent's copy of the reserved-page list and, through a daemon, its parent's client:
//! pages it took from that list were the parent's too (both copied data into the same
//! page, and one commit then published the other's bytes), and once the parent exited the
//! daemon handed them to other files while the child still wrote into them (found by
//! fuzzing the daemon: a forked child's write landed in another client's file, and fsck
//! called the pool clean). Such a child writes through an `Fs` of its own (`Fs::connect`
//! or `Fs::open` again, as the shim does on a child's first call).

use std::sync::Once;
use std::sync::atomic::{AtomicU64, Ordering};

/// Forks since the process started, counted by a `pthread_atfork` child handler.
static FORKS: AtomicU64 = AtomicU64::new(0);
static COUNTING: Once = Once::new();

extern "C" fn forked() {
    FORKS.fetch_add(1, Ordering::Relaxed);
}

/// This process's fork generation: what an `Fs` made now records, and compares later
/// (one load). Registers the handler on first use.
pub(crate) fn generation() -> u64 {
    COUNTING.call_once(|| {
        // SAFETY: registering a handler that only bumps an atomic, safe in a forked child.
        unsafe { libc::pthread_atfork(None, None, Some(forked)) };
    });
    FORKS.load(Ordering::Relaxed)
}

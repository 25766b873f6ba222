//! The offset lock of a published description, shared by every process that holds it.
//!
//! Linux serialises read, write and lseek on one open file description (`f_pos_lock`)
//! across every process sharing it, so that the children of `make -j >log` or
//! `xargs -P4 ... >out`, writing through one inherited descriptor, each write their own
//! range of the file. Within a process the description's mutex does that (`OpenFile::pos`);
//! between processes, this word in the description's memfd page does.
//!
//! The word is 0 when free, else the holder's process id, with `WAITERS` set once a process
//! sleeps on it (a shared futex: the page is mapped by every holder). A process killed while
//! it holds the lock leaves its id behind: a waiter whose sleep times out looks the holder
//! up and takes the lock over once no such live process is left.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

const WAITERS: u32 = 1 << 31;
/// How long a waiter sleeps before it checks that the holder still lives.
const CHECK_EVERY: Duration = Duration::from_millis(20);
const SPINS: u32 = 200;

/// The lock, held until dropped.
pub struct Held<'a>(&'a AtomicU32);

impl Drop for Held<'_> {
    fn drop(&mut self) {
        if self.0.swap(0, Ordering::Release) & WAITERS != 0 {
            wake(self.0);
        }
    }
}

/// Take the lock in `word` for this process.
pub fn lock(word: &AtomicU32) -> Held<'_> {
    // SAFETY: getpid has no preconditions.
    let me = unsafe { libc::getpid() } as u32 & !WAITERS;
    // A process that has slept takes the lock with WAITERS set: others may still sleep.
    let mut mine = me;
    let mut spins = 0;
    loop {
        let cur = match word.compare_exchange(0, mine, Ordering::Acquire, Ordering::Relaxed) {
            Ok(_) => return Held(word),
            Err(cur) => cur,
        };
        if spins < SPINS {
            spins += 1;
            std::hint::spin_loop();
            continue;
        }
        let holder = cur & !WAITERS;
        if cur & WAITERS == 0
            && word
                .compare_exchange(cur, cur | WAITERS, Ordering::Relaxed, Ordering::Relaxed)
                .is_err()
        {
            continue;
        }
        mine = me | WAITERS;
        if !sleep(word, cur | WAITERS) && !alive(holder) {
            // Its holder died in the middle of a call: nothing it did is half-done in the
            // file (each write commits whole), only its offset update may be missing.
            if word
                .compare_exchange(cur | WAITERS, mine, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                return Held(word);
            }
        }
    }
}

/// Sleep while `word` holds `expected`; false when the sleep timed out.
fn sleep(word: &AtomicU32, expected: u32) -> bool {
    let ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: CHECK_EVERY.as_nanos() as libc::c_long,
    };
    // SAFETY: a shared FUTEX_WAIT on a valid, aligned u32 with a valid timespec.
    let r = unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            expected,
            &ts as *const libc::timespec,
        )
    };
    !(r != 0 && crate::util::errno() == libc::ETIMEDOUT)
}

fn wake(word: &AtomicU32) {
    // SAFETY: a shared FUTEX_WAKE on a valid, aligned u32.
    unsafe {
        libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE, i32::MAX);
    }
}

/// Whether process `pid` still runs: it exists and is not a zombie (killed, not yet
/// reaped, its lock is as good as released).
fn alive(pid: u32) -> bool {
    let Ok(stat) = std::fs::read(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // "pid (comm) S ...": the state follows the last ')' (comm may hold any byte).
    let state = stat
        .iter()
        .rposition(|&b| b == b')')
        .and_then(|i| stat.get(i + 2));
    !matches!(state, Some(b'Z' | b'X') | None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lock_excludes_and_passes_on() {
        let word = AtomicU32::new(0);
        let held = lock(&word);
        assert_eq!(word.load(Ordering::Relaxed), std::process::id());
        drop(held);
        assert_eq!(word.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn a_dead_holder_lock_is_taken_over() {
        // A process that exits at once: its pid names no live process once reaped.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        let word = AtomicU32::new(pid);
        let held = lock(&word);
        assert_eq!(word.load(Ordering::Relaxed) & !WAITERS, std::process::id());
        drop(held);
        assert_eq!(word.load(Ordering::Relaxed), 0);
        assert!(alive(std::process::id()));
    }
}

//! Futex waits and wakes on words in shared (or private) memory.

use std::sync::atomic::AtomicU32;
use std::time::{Duration, Instant};

/// Sleep while `word` holds `expected` (or until `timeout`). A shared futex: the word may be
/// in memory mapped by other processes.
pub fn wait(word: &AtomicU32, expected: u32, timeout: Duration) {
    wait_op(word, expected, timeout, libc::FUTEX_WAIT);
}

/// `wait` for a word only this process uses (woken with `wake_private`).
pub fn wait_private(word: &AtomicU32, expected: u32, timeout: Duration) {
    wait_op(
        word,
        expected,
        timeout,
        libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
    );
}

fn wait_op(word: &AtomicU32, expected: u32, timeout: Duration, op: libc::c_int) {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: a FUTEX_WAIT (shared or private) on a valid, aligned u32 with a valid
    // timespec.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            op,
            expected,
            &ts as *const libc::timespec,
        );
    }
}

/// Wake every sleeper on `word` (shared futex).
pub fn wake(word: &AtomicU32) {
    // SAFETY: a FUTEX_WAKE on a valid, aligned u32.
    unsafe {
        libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE, i32::MAX);
    }
}

/// Wake every sleeper on `word`, a word only this process uses (async-signal-safe).
pub fn wake_private(word: &AtomicU32) {
    // SAFETY: a FUTEX_WAKE_PRIVATE on a valid, aligned u32.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
            i32::MAX,
        );
    }
}

/// One word `futex_waitv` watches.
pub struct Waiter<'a> {
    pub word: &'a AtomicU32,
    pub expected: u32,
    /// The word is in this process's private memory (woken with `wake_private`).
    pub private: bool,
}

#[repr(C)]
struct FutexWaitv {
    val: u64,
    uaddr: u64,
    flags: u32,
    reserved: u32,
}

const FUTEX2_SIZE_U32: u32 = 0x02;
const FUTEX2_PRIVATE: u32 = 128;
/// The kernel's limit on the words of one futex_waitv.
pub const MAX_WAITERS: usize = 128;

/// Sleep until one of the words no longer holds its expected value or is woken, or until
/// `deadline` (none: no timeout). Returns false if futex_waitv is unavailable (before
/// Linux 5.16, or refused), in which case the caller must fall back to polling.
pub fn wait_any(words: &[Waiter<'_>], deadline: Option<Instant>) -> bool {
    let v: Vec<FutexWaitv> = words
        .iter()
        .take(MAX_WAITERS)
        .map(|w| FutexWaitv {
            val: w.expected as u64,
            uaddr: w.word.as_ptr() as u64,
            flags: FUTEX2_SIZE_U32 | if w.private { FUTEX2_PRIVATE } else { 0 },
            reserved: 0,
        })
        .collect();
    let ts = deadline.map(|d| {
        // futex_waitv takes an absolute CLOCK_MONOTONIC time.
        let mut now = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: clock_gettime writes one timespec.
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
        let left = d.saturating_duration_since(Instant::now());
        let mut sec = now.tv_sec.saturating_add(left.as_secs() as libc::time_t);
        let mut nsec = now.tv_nsec + left.subsec_nanos() as libc::c_long;
        if nsec >= 1_000_000_000 {
            sec = sec.saturating_add(1);
            nsec -= 1_000_000_000;
        }
        libc::timespec {
            tv_sec: sec,
            tv_nsec: nsec,
        }
    });
    let tsp = ts
        .as_ref()
        .map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: `v` is an array of valid futex_waitv entries naming aligned u32 words that
    // outlive the call, and `tsp` is null or points at a valid timespec.
    let r = unsafe {
        libc::syscall(
            libc::SYS_futex_waitv,
            v.as_ptr(),
            v.len() as libc::c_uint,
            0 as libc::c_uint,
            tsp,
            libc::CLOCK_MONOTONIC,
        )
    };
    // Woken, a word changed (EAGAIN), the deadline (ETIMEDOUT) or a signal (EINTR): the
    // caller looks again. Anything else (ENOSYS before 5.16, EPERM from a seccomp filter)
    // would return at once every time, and the caller would spin: it polls instead.
    r >= 0
        || matches!(
            std::io::Error::last_os_error().raw_os_error(),
            Some(libc::EAGAIN | libc::ETIMEDOUT | libc::EINTR)
        )
}

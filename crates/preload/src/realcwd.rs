//! A copy of the real current directory, kept so that a relative path such as "engram/f"
//! from /mnt is recognised as the pool's without a system call or an allocation.

use crate::route::{mount_prefix, strip_prefix};
use libc::c_char;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};

/// The copy: a seqlock over words.
const RCWD_WORDS: usize = 512;
/// Bytes of the copy: a real current directory this long or longer is not kept.
pub const MAX: usize = RCWD_WORDS * 8;
static RCWD: [AtomicU64; RCWD_WORDS] = [const { AtomicU64::new(0) }; RCWD_WORDS];
static RCWD_LEN: AtomicUsize = AtomicUsize::new(0);
static RCWD_SEQ: AtomicU32 = AtomicU32::new(0);
/// Whether the real current directory is an ancestor of the mount prefix.
static RCWD_NEAR: AtomicBool = AtomicBool::new(false);

/// Refresh the copy of the real current directory (after chdir, fchdir and at start).
pub fn refresh() {
    let mut buf = [0u8; MAX];
    // SAFETY: getcwd into a local buffer of the given size.
    let p = unsafe { crate::real::getcwd(buf.as_mut_ptr() as *mut c_char, buf.len()) };
    if p.is_null() {
        RCWD_LEN.store(0, Ordering::Release);
        RCWD_NEAR.store(false, Ordering::Release);
        return;
    }
    let len = buf.iter().position(|&b| b == 0).unwrap_or(0);
    // Writers (chdir calls) are rare; an odd sequence number marks an update in progress.
    let mut s = RCWD_SEQ.load(Ordering::Relaxed);
    loop {
        if s & 1 == 0
            && let Ok(_) =
                RCWD_SEQ.compare_exchange_weak(s, s + 1, Ordering::Acquire, Ordering::Relaxed)
        {
            break;
        }
        std::hint::spin_loop();
        s = RCWD_SEQ.load(Ordering::Relaxed);
    }
    for (i, w) in RCWD.iter().enumerate() {
        let mut b = [0u8; 8];
        b.copy_from_slice(&buf[i * 8..i * 8 + 8]);
        w.store(u64::from_ne_bytes(b), Ordering::Relaxed);
    }
    RCWD_LEN.store(len, Ordering::Relaxed);
    let near = mount_prefix().is_some_and(|m| strip_prefix(&buf[..len], m).is_some());
    RCWD_NEAR.store(near, Ordering::Relaxed);
    RCWD_SEQ.store(s + 2, Ordering::Release);
}

/// Whether the real current directory is an ancestor of the mount prefix.
#[inline]
pub fn near() -> bool {
    RCWD_NEAR.load(Ordering::Relaxed)
}

/// Copy the real current directory into `out`; returns its length (0 if unknown).
pub fn copy(out: &mut [u8; MAX]) -> usize {
    loop {
        let s = RCWD_SEQ.load(Ordering::Acquire);
        if s & 1 != 0 {
            std::hint::spin_loop();
            continue;
        }
        for (i, w) in RCWD.iter().enumerate() {
            out[i * 8..i * 8 + 8].copy_from_slice(&w.load(Ordering::Relaxed).to_ne_bytes());
        }
        let len = RCWD_LEN.load(Ordering::Relaxed);
        std::sync::atomic::fence(Ordering::Acquire);
        if RCWD_SEQ.load(Ordering::Relaxed) == s {
            return len.min(out.len());
        }
    }
}

//! The offset lock of a published description, shared by every process that holds it.
//!
//! Linux serialises read, write and lseek on one open file description (`f_pos_lock`)
//! across every process sharing it, so that the children of `make -j >log` or
//! `xargs -P4 ... >out`, writing through one inherited descriptor, each write their own
//! range of the file. Within a process the description's mutex does that (`OpenFile::pos`);
//! between processes, this lock in the description's memfd page does.
//!
//! It is a process-shared *robust* pthread mutex: a holder that dies in the middle of a call
//! (killed, or a thread ended by another thread's `exec`) is noticed by the kernel, whatever
//! pid namespace the waiters live in, and the next taker gets the lock with `EOWNERDEAD`.
//! Nothing is half-done in the file then (each write commits whole); only the dead holder's
//! offset update may be missing.

use std::cell::UnsafeCell;

/// The lock as it lies in the description's page.
#[repr(C)]
pub struct PosLock(UnsafeCell<libc::pthread_mutex_t>);

/// The lock, held until dropped (None: the mutex could not be taken, see `lock`).
pub struct Held<'a>(Option<&'a PosLock>);

impl Drop for Held<'_> {
    fn drop(&mut self) {
        if let Some(l) = self.0 {
            // SAFETY: this thread locked the mutex in `lock`.
            unsafe { libc::pthread_mutex_unlock(l.0.get()) };
        }
    }
}

impl PosLock {
    /// A lock for a description that is not published (never taken; all zeros is a valid
    /// glibc mutex).
    pub fn unused() -> PosLock {
        // SAFETY: an all-zero pthread_mutex_t is PTHREAD_MUTEX_INITIALIZER on glibc.
        PosLock(UnsafeCell::new(unsafe { std::mem::zeroed() }))
    }

    /// Make `this`, in a fresh page no other process maps yet, a process-shared robust
    /// mutex.
    ///
    /// # Safety
    /// `this` points to writable memory for a `PosLock` that nothing else uses yet.
    pub unsafe fn init(this: *mut PosLock) {
        // SAFETY: a local attribute object, initialised, used once and destroyed; the
        // mutex is the caller's fresh memory.
        unsafe {
            let mut attr: libc::pthread_mutexattr_t = std::mem::zeroed();
            libc::pthread_mutexattr_init(&mut attr);
            libc::pthread_mutexattr_setpshared(&mut attr, libc::PTHREAD_PROCESS_SHARED);
            libc::pthread_mutexattr_setrobust(&mut attr, libc::PTHREAD_MUTEX_ROBUST);
            libc::pthread_mutex_init((*this).0.get(), &attr);
            libc::pthread_mutexattr_destroy(&mut attr);
        }
    }

    /// Take the lock. A holder that died leaves it to us (made consistent again). Should the
    /// mutex be unusable (a page written by a foreign build), the call goes on unlocked, as
    /// before this lock existed, rather than failing or waiting for ever.
    pub fn lock(&self) -> Held<'_> {
        // SAFETY: the mutex lives in a mapped page for as long as `self` does.
        match unsafe { libc::pthread_mutex_lock(self.0.get()) } {
            0 => Held(Some(self)),
            libc::EOWNERDEAD => {
                // SAFETY: we hold the mutex, and mark it usable again.
                unsafe { libc::pthread_mutex_consistent(self.0.get()) };
                Held(Some(self))
            }
            _ => Held(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shared_lock() -> &'static PosLock {
        // SAFETY: a fresh shared anonymous page, kept for the test's life.
        unsafe {
            let p = libc::mmap(
                std::ptr::null_mut(),
                4096,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            assert_ne!(p, libc::MAP_FAILED);
            PosLock::init(p.cast());
            &*(p as *const PosLock)
        }
    }

    #[test]
    fn the_lock_excludes_and_passes_on() {
        let l = shared_lock();
        let held = l.lock();
        assert!(held.0.is_some());
        // SAFETY: probing the mutex this thread holds.
        assert_eq!(
            unsafe { libc::pthread_mutex_trylock(l.0.get()) },
            libc::EBUSY
        );
        drop(held);
        drop(l.lock());
    }

    #[test]
    fn a_holder_that_died_leaves_the_lock_to_the_next() {
        let l = shared_lock();
        // SAFETY: the child only takes the lock and exits without releasing it.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            std::mem::forget(l.lock());
            // SAFETY: leaving the child at once.
            unsafe { libc::_exit(0) };
        }
        let mut status = 0;
        // SAFETY: waiting for our child.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        let held = l.lock();
        assert!(held.0.is_some());
        drop(held);
        drop(l.lock());
    }
}

//! Small pieces every call family uses: errno, the panic guard, a fork-safe lock, C
//! string helpers and the kernel's name of a real directory descriptor.

use libc::{c_char, c_int};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicU32, Ordering};

/// What a shim operation returns: a value, or the errno to fail with.
pub type Res<T> = Result<T, c_int>;

pub fn set_errno(e: c_int) {
    // SAFETY: __errno_location returns this thread's errno slot.
    unsafe { *libc::__errno_location() = e };
}

pub fn errno() -> c_int {
    // SAFETY: as above, read-only.
    unsafe { *libc::__errno_location() }
}

/// Run `f`, turning its error or any panic into `errno` and the C failure value `fail`.
/// A panic must never unwind into C. Inline: `catch_unwind` is only a landing pad, and the
/// export's body then runs in the export's own frame.
#[inline(always)]
pub fn guard<R>(fail: R, f: impl FnOnce() -> Res<R>) -> R {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(v)) => v,
        Ok(Err(e)) => {
            set_errno(e);
            fail
        }
        Err(_) => {
            set_errno(libc::EIO);
            fail
        }
    }
}

/// Like `guard`, for calls that report failure as a returned errno (posix_fallocate).
pub fn guard_errno(f: impl FnOnce() -> Res<()>) -> c_int {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => 0,
        Ok(Err(e)) => e,
        Err(_) => libc::EIO,
    }
}

/// The errno of an EngramFS error.
pub fn en(e: engram_core::Error) -> c_int {
    if e.errno() == libc::EIO {
        said_daemon_gone(&e);
    }
    e.errno()
}

/// The first time a call fails because the daemon has gone, say so once on stderr: the
/// program sees only EIO, for every call under the prefix from then on.
#[cold]
fn said_daemon_gone(e: &engram_core::Error) {
    static SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if e.is_daemon_gone() && !SAID.swap(true, std::sync::atomic::Ordering::Relaxed) {
        warn(&format!(
            "the EngramFS daemon has gone away; calls under {} fail with EIO",
            String::from_utf8_lossy(&crate::route::config().mount)
        ));
    }
}

/// The bytes of a C string (without the NUL). The caller vouches that `p` is valid.
pub unsafe fn cbytes<'a>(p: *const c_char) -> &'a [u8] {
    // SAFETY: the caller passes a valid NUL-terminated string.
    unsafe { std::ffi::CStr::from_ptr(p) }.to_bytes()
}

/// `v` as a NUL-terminated C string (EINVAL if it holds a NUL).
pub fn cstring(v: &[u8]) -> Res<std::ffi::CString> {
    std::ffi::CString::new(v).map_err(|_| libc::EINVAL)
}

/// A readers–writer spin lock with no owner, so that `fork` handlers can take it in the
/// parent and release it in both processes. Readers never wait for a waiting writer, so a
/// thread may take the read side again while holding it.
pub struct SpinRw(AtomicU32);

const WRITER: u32 = 1 << 31;

impl Default for SpinRw {
    fn default() -> SpinRw {
        SpinRw::new()
    }
}

impl SpinRw {
    pub const fn new() -> SpinRw {
        SpinRw(AtomicU32::new(0))
    }

    /// One atomic add when no writer holds the lock; a reader that finds one backs its add
    /// out and waits (so a writer sees only its own bit, or transient reader counts).
    #[inline]
    pub fn read(&self) -> ReadGuard<'_> {
        if self.0.fetch_add(1, Ordering::Acquire) & WRITER != 0 {
            self.read_slow();
        }
        ReadGuard(self)
    }

    #[cold]
    fn read_slow(&self) {
        let mut spins = 0u32;
        loop {
            self.0.fetch_sub(1, Ordering::Relaxed);
            while self.0.load(Ordering::Relaxed) & WRITER != 0 {
                backoff(&mut spins);
            }
            if self.0.fetch_add(1, Ordering::Acquire) & WRITER == 0 {
                return;
            }
        }
    }

    /// Take the write side; release it with `write_unlock`.
    pub fn write_lock(&self) {
        let mut spins = 0u32;
        while self
            .0
            .compare_exchange_weak(0, WRITER, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            backoff(&mut spins);
        }
    }

    /// Release the write side, keeping the counts of readers that are backing out.
    pub fn write_unlock(&self) {
        self.0.fetch_and(!WRITER, Ordering::Release);
    }

    /// In a forked child (one thread): no reader is left, whatever the parent's threads had
    /// counted when the process was copied.
    pub fn reset_after_fork(&self) {
        self.0.store(0, Ordering::Release);
    }

    pub fn write(&self) -> WriteGuard<'_> {
        self.write_lock();
        WriteGuard(self)
    }
}

/// Spin a little, then yield, while waiting for another thread.
pub fn backoff(spins: &mut u32) {
    *spins += 1;
    if *spins < 64 {
        std::hint::spin_loop();
    } else {
        // SAFETY: sched_yield has no preconditions.
        unsafe { libc::sched_yield() };
    }
}

pub struct ReadGuard<'a>(&'a SpinRw);

impl Drop for ReadGuard<'_> {
    fn drop(&mut self) {
        self.0.0.fetch_sub(1, Ordering::Release);
    }
}

pub struct WriteGuard<'a>(&'a SpinRw);

impl Drop for WriteGuard<'_> {
    fn drop(&mut self) {
        self.0.write_unlock();
    }
}

/// Write a message to stderr with the real `write` (the shim may own descriptor 2). Not when
/// descriptor 2 is a pool file: its number holds the shim's placeholder (a published
/// description's memfd page, which the bytes would overwrite).
pub fn warn(msg: &str) {
    if crate::table::is_ours(2) {
        return;
    }
    let line = format!("engram-preload: {msg}\n");
    // SAFETY: writing a local buffer to descriptor 2.
    unsafe { crate::real::write(2, line.as_ptr() as *const libc::c_void, line.len()) };
}

/// Descriptors below this are left to the program (shells use 3–9 and 10+ freely): the
/// shim's own descriptors are kept at or above it, where a daemon connection keeps its own.
pub const HIGH_FD: c_int = engram_core::daemon::MIN_FD;

/// A new open file description (close-on-exec) of the file descriptor `fd` refers to,
/// opened with `flags` through /proc/self/fd (removed files and memfds included).
pub fn reopen(fd: c_int, flags: c_int) -> Res<c_int> {
    let path = format!("/proc/self/fd/{fd}\0");
    // SAFETY: opening a NUL-terminated path with the real call.
    let new = unsafe { crate::real::open(path.as_ptr().cast(), flags | libc::O_CLOEXEC, 0) };
    if new < 0 { Err(errno()) } else { Ok(new) }
}

/// Move one of the shim's own descriptors to `HIGH_FD` or above (close-on-exec), and
/// register it as the shim's own (`ownfds`: close it with `ownfds::close`).
pub fn move_high(fd: c_int) -> c_int {
    let fd = if (0..HIGH_FD).contains(&fd) {
        // SAFETY: duplicating and closing our own descriptor with the real calls.
        unsafe {
            let hi = crate::real::fcntl(fd, libc::F_DUPFD_CLOEXEC, HIGH_FD as libc::c_ulong);
            if hi < 0 {
                fd
            } else {
                crate::real::close(fd);
                hi
            }
        }
    } else {
        fd
    };
    crate::ownfds::own(fd);
    fd
}

/// The kernel's name of real directory descriptor `dirfd` (its `/proc/self/fd` link) in
/// `out`: its length, if it is an absolute path that fits. Allocates nothing.
pub fn real_dir_name(dirfd: c_int, out: &mut [u8]) -> Option<usize> {
    // "/proc/self/fd/<dirfd>\0", formatted without allocating.
    let mut link = [0u8; 32];
    let head = b"/proc/self/fd/";
    link[..head.len()].copy_from_slice(head);
    let mut digits = [0u8; 10];
    let (mut v, mut nd) = (dirfd as u32, 0);
    loop {
        digits[nd] = b'0' + (v % 10) as u8;
        nd += 1;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    for k in 0..nd {
        link[head.len() + k] = digits[nd - 1 - k];
    }
    // SAFETY: readlink of a NUL-terminated path into the caller's buffer of the given size.
    let n = unsafe {
        crate::real::readlink(
            link.as_ptr() as *const c_char,
            out.as_mut_ptr() as *mut c_char,
            out.len(),
        )
    };
    if n <= 0 || n as usize >= out.len() || out[0] != b'/' {
        return None;
    }
    Some(n as usize)
}

#[cfg(test)]
mod tests {
    use super::SpinRw;
    use std::sync::atomic::{AtomicBool, Ordering};

    #[test]
    fn spin_rw_readers_nest_and_wait_for_a_writer() {
        static L: SpinRw = SpinRw::new();
        static READ: AtomicBool = AtomicBool::new(false);
        {
            let _a = L.read();
            let _b = L.read();
        }
        L.write_lock();
        let t = std::thread::spawn(|| {
            let _g = L.read();
            READ.store(true, Ordering::SeqCst);
        });
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert!(
            !READ.load(Ordering::SeqCst),
            "a reader got in under the writer"
        );
        L.write_unlock();
        t.join().unwrap();
        assert!(READ.load(Ordering::SeqCst));
        // Free again: the writer gets in once the readers are gone.
        drop(L.write());
        L.write_lock();
        L.reset_after_fork();
        drop(L.read());
    }
}

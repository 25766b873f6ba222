//! SIGINT, SIGTERM and SIGHUP unmount a blocking mount: the handler only writes the signal
//! number into a pipe (async-signal-safe); a watcher thread reads it and unmounts.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicI32, Ordering};

const SIGNALS: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

/// The write end of the pipe of the installed handlers (-1: none).
static PIPE: AtomicI32 = AtomicI32::new(-1);

extern "C" fn on_signal(sig: libc::c_int) {
    let fd = PIPE.load(Ordering::Relaxed);
    if fd >= 0 {
        let b = sig as u8;
        // SAFETY: write(2) is async-signal-safe; `b` outlives the call. The pipe is
        // non-blocking, so a full pipe drops the byte instead of hanging the handler.
        unsafe { libc::write(fd, (&raw const b).cast(), 1) };
    }
}

/// Installed handlers; dropping restores the previous ones.
pub(crate) struct Signals {
    read: OwnedFd,
    write: OwnedFd,
    old: Vec<(libc::c_int, libc::sigaction)>,
}

impl Signals {
    /// Install the handlers; `None` if another mount in this process already has them.
    pub(crate) fn install() -> io::Result<Option<Signals>> {
        let mut fds = [0 as libc::c_int; 2];
        // SAFETY: `fds` has room for the two descriptors pipe2 returns.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: pipe2 just returned these descriptors and nothing else owns them.
        let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        // SAFETY: F_SETFL on a descriptor we own.
        if unsafe { libc::fcntl(write.as_raw_fd(), libc::F_SETFL, libc::O_NONBLOCK) } != 0 {
            return Err(io::Error::last_os_error());
        }
        if PIPE
            .compare_exchange(-1, write.as_raw_fd(), Ordering::SeqCst, Ordering::SeqCst)
            .is_err()
        {
            return Ok(None);
        }
        let mut s = Signals {
            read,
            write,
            old: Vec::new(),
        };
        for sig in SIGNALS {
            // SAFETY: a zeroed sigaction is a valid value to fill in; sigemptyset
            // initialises its mask; the handler is an `extern "C" fn(c_int)` that only does
            // async-signal-safe work; `old` receives the previous action.
            unsafe {
                let mut act: libc::sigaction = std::mem::zeroed();
                act.sa_sigaction = on_signal as *const () as libc::sighandler_t;
                act.sa_flags = libc::SA_RESTART;
                libc::sigemptyset(&mut act.sa_mask);
                let mut old: libc::sigaction = std::mem::zeroed();
                if libc::sigaction(sig, &act, &mut old) != 0 {
                    return Err(io::Error::last_os_error());
                }
                s.old.push((sig, old));
            }
        }
        Ok(Some(s))
    }

    /// Block until a signal arrives (`Some(signal)`) or `wake` is called (`None`).
    pub(crate) fn wait(&self) -> Option<libc::c_int> {
        let mut b = 0u8;
        loop {
            // SAFETY: reads one byte into `b`, which outlives the call.
            let n = unsafe { libc::read(self.read.as_raw_fd(), (&raw mut b).cast(), 1) };
            if n == 1 {
                return (b != 0).then_some(libc::c_int::from(b));
            }
            if n < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return None;
        }
    }

    /// Make `wait` return `None`.
    pub(crate) fn wake(&self) {
        let b = 0u8;
        // SAFETY: writes one byte from `b`, which outlives the call.
        unsafe { libc::write(self.write.as_raw_fd(), (&raw const b).cast(), 1) };
    }
}

impl Drop for Signals {
    fn drop(&mut self) {
        for (sig, old) in self.old.drain(..) {
            // SAFETY: restores the action sigaction returned when ours was installed.
            unsafe { libc::sigaction(sig, &old, std::ptr::null_mut()) };
        }
        PIPE.store(-1, Ordering::SeqCst);
    }
}

//! What an exec tells the new image about inherited descriptions: an image that holds no
//! EngramFS description puts `ENGRAM_NOTHING_INHERITED=<pid>` in the new image's
//! environment, and the new image then skips its scan of /proc/self/fd for inherited
//! descriptions and stray lock files (about 0.1 ms of system calls per process on a virtual
//! machine). Without the marker (a first process, an exec the shim did not see) it scans.
//!
//! The value is the pid of the image that set it: the new image accepts it only as its own
//! pid (an exec) or its parent's (a spawn), so a marker a program puts in its environment
//! itself, which reaches its children through calls the shim does not see (`system`,
//! `popen`), is not believed.

use libc::c_char;
use std::ffi::CString;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

const NAME: &std::ffi::CStr = c"ENGRAM_NOTHING_INHERITED";

/// Threads between making lock descriptors inheritable for an exec and making them
/// close-on-exec again (`passing_lock_fds`).
static PASSING: AtomicU32 = AtomicU32::new(0);
/// Set in a child forked while another thread was passing lock descriptors: it may hold one
/// that no description of its own keeps, so its execs never carry the marker (the next
/// image scans, and closes the stray, whose flock would otherwise outlive every user).
static MAY_HOLD_STRAYS: AtomicBool = AtomicBool::new(false);

/// Whether the environment entry `entry` is a marker (to be dropped from an exec's
/// environment: only `entry_for_exec` makes one).
pub fn is_marker(entry: &[u8]) -> bool {
    crate::process::is_var(entry, NAME.to_bytes())
}

/// The marker for an exec of this process now, if nothing can be inherited through it.
pub fn entry_for_exec() -> Option<CString> {
    if !crate::table::is_empty() || MAY_HOLD_STRAYS.load(Ordering::Acquire) {
        return None;
    }
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() };
    CString::new(format!("{}={pid}", NAME.to_str().expect("ASCII"))).ok()
}

/// Run an exec with the lock files of the descriptions the new image inherits left open
/// for it (`table::pass_lock_fds`); if it returns (the exec failed, or posix_spawn is back
/// in the parent) they are close-on-exec again, with errno kept.
pub fn passing_lock_fds<T>(exec: impl FnOnce() -> T) -> T {
    PASSING.fetch_add(1, Ordering::SeqCst);
    let passed = crate::table::pass_lock_fds();
    let r = exec();
    if !passed.is_empty() {
        let e = crate::util::errno();
        crate::table::keep_lock_fds(&passed);
        crate::util::set_errno(e);
    }
    PASSING.fetch_sub(1, Ordering::SeqCst);
    r
}

/// In a forked child (its fork handler).
pub fn after_fork_child() {
    if PASSING.load(Ordering::SeqCst) != 0 {
        MAY_HOLD_STRAYS.store(true, Ordering::Release);
    }
    PASSING.store(0, Ordering::Relaxed);
}

/// At start-up: whether the image that exec'd this one said it passed no description on.
/// The marker is taken out of the environment either way.
pub fn nothing_inherited() -> bool {
    // SAFETY: getenv and unsetenv with a NUL-terminated name, at start-up (one thread);
    // the value is read before the unsetenv.
    unsafe {
        let v = libc::getenv(NAME.as_ptr());
        if v.is_null() {
            return false;
        }
        let pid = std::ffi::CStr::from_ptr(v)
            .to_str()
            .ok()
            .and_then(|s| s.parse::<libc::pid_t>().ok());
        libc::unsetenv(NAME.as_ptr());
        pid.is_some_and(|p| p == libc::getpid() || p == libc::getppid())
    }
}

/// An exec's environment: the pointers, and the marker entry they may point to.
pub struct ExecEnv {
    ptrs: Vec<*const c_char>,
    _marker: Option<CString>,
}

impl ExecEnv {
    pub fn new(mut ptrs: Vec<*const c_char>, marker: Option<CString>) -> ExecEnv {
        if let Some(m) = &marker {
            ptrs.push(m.as_ptr());
        }
        ptrs.push(std::ptr::null());
        ExecEnv {
            ptrs,
            _marker: marker,
        }
    }

    /// The NULL-terminated array, valid while `self` lives.
    pub fn as_ptr(&self) -> *const *const c_char {
        self.ptrs.as_ptr()
    }
}

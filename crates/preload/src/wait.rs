//! The wait family. On Linux a child's stores through a shared mapping are the file's once
//! `waitpid` returns; here a child that ended without giving its mapping up (`_exit`, a
//! signal) leaves them for the daemon, which writes them back when it sees the child gone
//! (`server/backing.rs`), a moment after the parent can be told. So once a wait reports a
//! child, a process connected to a daemon asks the daemon to finish with that child's
//! clients first (`Fs::client_gone`: a round trip, answered at once when the child was no
//! client). A process not connected yet has nothing to read through the pool that this
//! could order, and is not connected for it.

use crate::real;
use crate::session;
use crate::util::{errno, set_errno};
use libc::{c_int, c_uint, c_void, pid_t};

/// A wait reported process `pid`: through a daemon, wait until it has disconnected it.
fn reported(pid: pid_t) {
    if pid <= 0 {
        return;
    }
    let Some(fs) = session::daemon_now() else {
        return;
    };
    let saved = errno();
    // No operation guard: a SIGCHLD handler's wait can run inside this thread's own fork,
    // which waits for every guard to be given up; and the call allocates nothing, as the
    // handler may have interrupted malloc. It touches only the connection's slots, which
    // a forked child never uses. A daemon gone or a refused request changes nothing for
    // the caller, whose wait succeeded.
    let _ = crate::util::guard(0, || {
        let _ = fs.client_gone(pid as u32);
        Ok(0)
    });
    set_errno(saved);
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn wait(status: *mut c_int) -> pid_t {
    // SAFETY: forwarding the caller's arguments unchanged.
    let pid = unsafe { real::wait(status) };
    reported(pid);
    pid
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn waitpid(pid: pid_t, status: *mut c_int, options: c_int) -> pid_t {
    // SAFETY: forwarding the caller's arguments unchanged.
    let got = unsafe { real::waitpid(pid, status, options) };
    reported(got);
    got
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn wait3(status: *mut c_int, options: c_int, usage: *mut c_void) -> pid_t {
    // SAFETY: forwarding the caller's arguments unchanged.
    let got = unsafe { real::wait3(status, options, usage) };
    reported(got);
    got
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn wait4(
    pid: pid_t,
    status: *mut c_int,
    options: c_int,
    usage: *mut c_void,
) -> pid_t {
    // SAFETY: forwarding the caller's arguments unchanged.
    let got = unsafe { real::wait4(pid, status, options, usage) };
    reported(got);
    got
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn waitid(
    idtype: c_uint,
    id: c_uint,
    info: *mut libc::siginfo_t,
    options: c_int,
) -> c_int {
    // SAFETY: forwarding the caller's arguments unchanged.
    let r = unsafe { real::waitid(idtype, id, info, options) };
    if r == 0 && !info.is_null() {
        // SAFETY: the kernel filled the caller's siginfo (si_pid 0: nothing to report,
        // WNOHANG with no child changed).
        reported(unsafe { (*info).si_pid() });
    }
    r
}

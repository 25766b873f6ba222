//! setuid and its family. A process that changes its credentials keeps the access of the
//! descriptors it holds (checked when they were opened, as on Linux) and is checked as its
//! new self from then on: the daemon is told (`Fs::with_own_creds`), and reads them from
//! the kernel, never from the client; the connection's `Fs` carries them for the checks
//! the shim makes itself.
//! Before 2026-11-26 the daemon went on with the credentials of the connection: a root
//! process that dropped to `nobody` still read root's 0600 files (found by probing).
//!
//! A process reaches the pool through a connection of its own (a forked child too), made
//! on its first call. One that changes its credentials before that (nginx's workers drop
//! to `nobody` right after the fork, then write to the log their master opened; pjdfstest
//! drops before its one call) connects first, with the credentials it still has, and
//! binds every description it inherited: connected afterwards, the daemon refuses a user
//! who may not write the pool file, and reopened afterwards, an inherited log open for
//! writing by root is refused to `nobody`.

use crate::{real, session, table};
use libc::{c_int, gid_t, size_t, uid_t};

/// Run the real call `change`; when it succeeds, act as the credentials it left.
fn changing(change: impl FnOnce() -> c_int) -> c_int {
    // Nothing here may unwind into the caller; a failure to connect or to tell the daemon
    // leaves the process as it was on the pool's side, and says so
    // (`session::adopt_current_creds`).
    let _ = std::panic::catch_unwind(|| {
        // Under the operation guard first: a fork meanwhile must not find the state locked.
        let _op = session::op();
        if session::uses_or_would_use_daemon() && session::fs().is_ok() {
            table::bind_all();
        }
    });
    let r = change();
    if r == 0 {
        let _ = std::panic::catch_unwind(session::adopt_current_creds);
    }
    r
}

/// The exported wrappers: each forwards to the real call through `changing`.
macro_rules! changing_calls {
    ($($name:ident($($arg:ident: $ty:ty),*);)*) => {$(
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> c_int {
            // SAFETY: forwarding unchanged.
            changing(|| unsafe { real::$name($($arg),*) })
        }
    )*};
}

changing_calls! {
    setuid(uid: uid_t);
    setgid(gid: gid_t);
    seteuid(uid: uid_t);
    setegid(gid: gid_t);
    setreuid(r: uid_t, e: uid_t);
    setregid(r: gid_t, e: gid_t);
    setresuid(r: uid_t, e: uid_t, s: uid_t);
    setresgid(r: gid_t, e: gid_t, s: gid_t);
    setgroups(n: size_t, list: *const gid_t);
}

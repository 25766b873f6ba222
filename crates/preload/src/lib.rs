//! `libengram_preload.so`: the POSIX shim of EngramFS, loaded with `LD_PRELOAD`.
//!
//! Paths under the mount prefix (`ENGRAM_MOUNT`, default `/mnt/engram`) and the descriptors
//! the shim handed out go to EngramFS; everything else goes to libc untouched, without
//! allocating or locking. The pool is reached through an `engram serve` daemon when
//! `ENGRAM_SOCKET` is set (so that every process of a program tree shares it), otherwise it
//! is opened in this process (`ENGRAM_POOL`, default the demo pool), exclusively.
//!
//! One module per call family: `open`, `io`, `stat`, `paths`, `attrs`, `cwd`, `dirs`,
//! `fcntl`, `mmap`, `stdio` (and `wide`, its wide-character functions), `process`, `xfer`,
//! `tempfiles`, `glob`, `ftw`, `exec`, `dlopen`, `syscalls`; the descriptor table is `table`
//! (its descriptions `openfile`, their lock files' descriptors `lockfds`, paths that name
//! descriptors `magicfd`), the operation guard fork waits for `opguard`, the
//! connection `session`, path routing `route` and `resolve`, and `reallinks` for real
//! symlinks that lead into the prefix. `engram_run::run` (re-exported) starts programs
//! under the shim (`engram run`).
//!
//! Every exported function is `unsafe extern "C"` with libc's signature; its whole body
//! runs inside `guarded!` (`ops`), which catches panics and reports failures through errno.

#![allow(clippy::missing_safety_doc)]
// `routed!` and `ours!` forward the caller's own libc call inside their unsafe block.
#![allow(clippy::macro_metavars_in_unsafe)]

pub mod attrs;
pub mod creds;
pub mod cwd;
pub mod cwd_env;
pub mod desc;
pub mod dirs;
pub mod dlopen;
pub mod exec;
pub mod fcntl;
pub mod fifo;
pub mod ftw;
pub mod glob;
pub mod inherit;
pub mod inotify;
pub mod io;
pub mod ioctl;
pub mod lockfds;
pub mod magicfd;
pub mod mmap;
pub mod open;
pub mod openfile;
pub mod opguard;
pub mod ops;
pub mod ownfds;
pub mod paths;
pub mod poslock;
pub mod printf;
pub mod process;
pub mod real;
pub mod realcwd;
pub mod reallinks;
pub mod reclocks;
pub mod removed;
pub mod resolve;
pub mod route;
pub mod session;
pub mod shebang;
pub mod spawn;
pub mod stat;
pub mod stdio;
pub mod syscalls;
pub mod table;
pub mod tempfiles;
pub mod util;
pub mod vcwd;
pub mod wait;
pub mod wide;
pub mod xfer;

pub use engram_run::{find_library, run, socket_for};

/// Runs when the library is loaded (before the program's main).
extern "C" fn init() {
    let _ = std::panic::catch_unwind(|| {
        opguard::init();
        route::config();
        realcwd::refresh();
        process::register_fork_handlers();
        cwd_env::import();
        if !inherit::nothing_inherited() {
            table::adopt_inherited();
            // A process holding pool descriptors connects now, not at its first call: the
            // daemon `engram run` starts leaves once it has no client, and a background job
            // that writes its log later (`nohup cmd > /mnt/engram/log &`, whose parent
            // exits at once) then found none and lost its output (EIO).
            if !table::is_empty() && session::uses_or_would_use_daemon() {
                let _ = session::fs();
            }
        }
        stdio::adopt_std_streams();
    });
}

/// Runs at exit: shared writable mappings are written back, and a pool opened in this
/// process is unmounted cleanly.
extern "C" fn fini() {
    let _ = std::panic::catch_unwind(|| {
        mmap::at_exit();
        session::shutdown();
    });
}

#[used]
#[unsafe(link_section = ".init_array")]
static INIT: extern "C" fn() = init;

#[used]
#[unsafe(link_section = ".fini_array")]
static FINI: extern "C" fn() = fini;

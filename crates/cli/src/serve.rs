//! `engram serve POOL [--socket PATH]`: the daemon that lets several processes share a pool.

use crate::error::{Context, Result};
use engram_core::daemon::{ServeOptions, Stop, serve_until};
use std::path::{Path, PathBuf};
use std::time::Duration;

#[derive(clap::Args)]
pub struct Args {
    /// Pool file
    pub pool: PathBuf,
    /// Unix socket to listen on (default: the pool's path with `.sock` appended)
    #[arg(long)]
    pub socket: Option<PathBuf>,
    /// Exit after this many seconds without any client, once no process maps the pool
    /// either (a client's forked child that has not connected yet: then look again after as
    /// long)
    #[arg(long, value_name = "SECONDS")]
    pub idle_exit: Option<u64>,
    /// Do not log each client's connection and departure (`engram run` starts its daemon
    /// so: a build would add two lines per process)
    #[arg(long)]
    pub quiet_clients: bool,
}

/// The socket a pool's daemon listens on unless told otherwise.
pub fn default_socket(pool: &Path) -> PathBuf {
    let mut s = pool.as_os_str().to_owned();
    s.push(".sock");
    PathBuf::from(s)
}

static STOP: Stop = Stop::new();

extern "C" fn on_signal(_: libc::c_int) {
    STOP.stop();
}

pub fn run(a: &Args) -> Result<()> {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: installing an async-signal-safe handler (an atomic store and a futex wake).
        unsafe { libc::signal(sig, on_signal as *const () as libc::sighandler_t) };
    }
    let opts = ServeOptions {
        socket: a.socket.clone().unwrap_or_else(|| default_socket(&a.pool)),
        idle_exit: a.idle_exit.map(Duration::from_secs),
        log_clients: !a.quiet_clients,
    };
    engram_core::daemon::raise_descriptor_limit();
    // Before any thread starts: they run at the priority of the thread that starts them.
    if !engram_core::daemon::raise_priority() {
        eprintln!(
            "engram serve: running at the ordinary priority (nice {} needs root or \
             CAP_SYS_NICE): on a busy machine each request may wait for a time slice",
            engram_core::daemon::SERVER_NICE
        );
    }
    serve_until(&a.pool, &opts, &STOP, &|line| {
        eprintln!("engram serve: {line}")
    })
    .context(format_args!("{}", a.pool.display()))
}

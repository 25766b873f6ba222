//! `engram`: format, inspect, check and copy files into and out of EngramFS pools, and a
//! self-checking demo. Every failure is reported as `engram: <message>` with exit status 1.

#[macro_use]
mod output;

mod bench;
mod cp;
mod crashtest;
mod demo;
mod error;
mod fsck;
mod info;
mod ls;
mod mkfs;
mod mount;
mod pool;
mod run;
mod serve;
mod size;

use clap::{Parser, Subcommand};
use std::panic::{self, AssertUnwindSafe};
use std::process::ExitCode;

/// EngramFS: a user-space file system for persistent memory.
#[derive(Parser)]
#[command(name = "engram", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Format a new pool file (replacing what the file held)
    Mkfs(mkfs::Args),
    /// Describe a pool: media, recovery, geometry and usage
    Info(info::Args),
    /// Check a pool's consistency (and repair counts and leaks with --repair)
    Fsck(fsck::Args),
    /// Copy files between a pool (POOL:/path) and the local file system
    Cp(cp::Args),
    /// List a directory (or a file) inside a pool
    Ls(ls::Args),
    /// Build, modify, verify, remount and fsck a small tree: a self-checking tour
    Demo(demo::Args),
    /// Serve a pool to several processes (until SIGINT/SIGTERM)
    Serve(serve::Args),
    /// Check every crash state of the crash-consistency workloads
    Crashtest(crashtest::Args),
    /// Benchmark EngramFS against tmpfs and ext4 in the same run
    Bench(bench::Args),
    /// Mount a pool at a directory through FUSE
    Mount(mount::Args),
    /// Unmount a FUSE mount of a pool (the pool is left clean)
    Umount(mount::UmountArgs),
    /// Run a program with the pool under /mnt/engram (LD_PRELOAD shim and a shared daemon)
    Run(run::Args),
}

fn run(command: Command) -> error::Result<()> {
    match command {
        Command::Mkfs(a) => mkfs::run(&a),
        Command::Info(a) => info::run(&a),
        Command::Fsck(a) => fsck::run(&a),
        Command::Cp(a) => cp::run(&a),
        Command::Ls(a) => ls::run(&a),
        Command::Demo(a) => demo::run(&a),
        Command::Serve(a) => serve::run(&a),
        Command::Crashtest(a) => crashtest::run(&a),
        Command::Bench(a) => bench::run(&a),
        Command::Mount(a) => mount::run(&a),
        Command::Umount(a) => mount::umount(&a),
        Command::Run(a) => run::run(&a),
    }
}

/// Report a panic as an internal error in one line, without a backtrace (unless
/// ENGRAM_BACKTRACE=1).
fn install_panic_hook() {
    panic::set_hook(Box::new(|info| {
        let payload = info.payload();
        let msg = payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown cause".into());
        let at = info
            .location()
            .map(|l| format!(" at {}:{}", l.file(), l.line()))
            .unwrap_or_default();
        eprintln!("engram: internal error{at}: {msg} (this is a bug in EngramFS)");
        // Only when asked for: RUST_BACKTRACE is often set globally, so it is not enough.
        if std::env::var_os("ENGRAM_BACKTRACE").is_some_and(|v| v != "0") {
            eprintln!("{}", std::backtrace::Backtrace::force_capture());
        }
    }));
}

fn main() -> ExitCode {
    // `engram bench` starts this executable again as its benchmark client processes.
    if let Some(code) = engram_bench::client_worker() {
        return ExitCode::from(code as u8);
    }
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) if !e.use_stderr() => {
            // --help and --version.
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        Err(e) if e.kind() == clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            eprintln!(
                "engram: no command given: one of mkfs, info, fsck, cp, ls, demo, run, serve, mount, umount, crashtest, bench (see engram --help)"
            );
            return ExitCode::FAILURE;
        }
        Err(e) => {
            let text = e.render().to_string();
            eprintln!("engram: {}", text.trim_start_matches("error: ").trim_end());
            return ExitCode::FAILURE;
        }
    };
    install_panic_hook();
    let code = match panic::catch_unwind(AssertUnwindSafe(|| run(cli.command))) {
        Ok(Ok(())) => ExitCode::SUCCESS,
        Ok(Err(e)) => {
            eprintln!("engram: {e}");
            ExitCode::FAILURE
        }
        // The hook has already said what happened.
        Err(_) => ExitCode::FAILURE,
    };
    match output::status() {
        Ok(()) => code,
        Err(None) => ExitCode::FAILURE,
        Err(Some(msg)) => {
            eprintln!("engram: {msg}");
            ExitCode::FAILURE
        }
    }
}

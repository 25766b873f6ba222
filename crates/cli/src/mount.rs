//! `engram mount POOL DIR` and `engram umount DIR`: EngramFS as a FUSE file system.

use crate::error::{CliError, Result};
use crate::pool;
use crate::serve::default_socket;
use engram_core::Fs;
use engram_fuse::{MountOptions, check_mount_point, mount_with};
use std::io::{Read, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// Pool file
    pub pool: PathBuf,
    /// Mount point (an existing, empty directory)
    pub dir: PathBuf,
    /// Stay in the foreground until unmounted (SIGINT/SIGTERM/SIGHUP unmount); says
    /// `mounted POOL at DIR` once the mount is live
    #[arg(long)]
    pub foreground: bool,
    /// Mount options: allow_other, ro, rw (comma-separated)
    #[arg(short = 'o', value_name = "OPTIONS")]
    pub options: Option<String>,
}

#[derive(clap::Args)]
pub struct UmountArgs {
    /// Mount point
    pub dir: PathBuf,
}

/// A pool a daemon serves is mounted as one more client of it; otherwise it is opened here.
fn open(a: &Args) -> Result<Fs> {
    let socket = default_socket(&a.pool);
    if socket.exists()
        && let Ok(fs) = Fs::connect(&socket)
    {
        return Ok(fs);
    }
    pool::open(&a.pool)
}

pub fn run(a: &Args) -> Result<()> {
    let opts: MountOptions = a
        .options
        .as_deref()
        .unwrap_or("")
        .parse()
        .map_err(CliError::new)?;
    check_mount_point(&a.dir).map_err(|e| CliError::new(e.to_string()))?;
    if a.foreground {
        let fs = open(a)?;
        let live = || out!("mounted {} at {}", a.pool.display(), a.dir.display());
        return mount_with(fs, &a.dir, &opts, live).map_err(|e| CliError::new(e.to_string()));
    }
    background(a, &opts)
}

/// Background: the child opens the pool and serves the mount; the parent returns once the
/// mount is live, or fails with the child's error. The parent never opens the pool: an
/// `Fs` dropped there would mark the pool clean (or, for a daemon's pool, return the
/// reservations) under the child that is still serving it.
fn background(a: &Args, opts: &MountOptions) -> Result<()> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills two descriptors we then own.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(CliError::new(format!(
            "pipe: {}",
            std::io::Error::last_os_error()
        )));
    }
    // SAFETY: both descriptors were just created by pipe2.
    let (read_end, write_end) =
        unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    // SAFETY: no other thread runs in this process yet (nothing before this point starts
    // one), so the child may continue normally.
    match unsafe { libc::fork() } {
        -1 => Err(CliError::new(format!(
            "fork: {}",
            std::io::Error::last_os_error()
        ))),
        0 => {
            drop(read_end);
            // SAFETY: detaching the child from the terminal's session and from the
            // parent's output (errors go back through the pipe).
            unsafe {
                libc::setsid();
                let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
                if null >= 0 {
                    for fd in 0..3 {
                        libc::dup2(null, fd);
                    }
                    libc::close(null);
                }
            }
            let mut w = std::fs::File::from(write_end);
            let r = match open(a) {
                Ok(fs) => mount_with(fs, &a.dir, opts, || {
                    let _ = w.write_all(b"1");
                })
                .map_err(|e| CliError::new(e.to_string())),
                Err(e) => Err(e),
            };
            let code = match r {
                Ok(()) => 0,
                Err(e) => {
                    let _ = w.write_all(format!("0{e}").as_bytes());
                    1
                }
            };
            std::process::exit(code);
        }
        _ => {
            drop(write_end);
            // One byte says whether the mount is live; a failure sends its message after it.
            let mut r = std::fs::File::from(read_end);
            let mut first = [0u8; 1];
            if r.read_exact(&mut first).is_ok() && first[0] == b'1' {
                out!("mounted {} at {}", a.pool.display(), a.dir.display());
                return Ok(());
            }
            let mut msg = String::new();
            let _ = r.read_to_string(&mut msg);
            Err(CliError::new(if msg.is_empty() {
                "the mount process failed".to_string()
            } else {
                msg
            }))
        }
    }
}

pub fn umount(a: &UmountArgs) -> Result<()> {
    // SAFETY: reading our own effective uid.
    let root = unsafe { libc::geteuid() } == 0;
    let status = if root {
        std::process::Command::new("umount").arg(&a.dir).status()
    } else {
        std::process::Command::new("fusermount3")
            .arg("-u")
            .arg(&a.dir)
            .status()
    };
    match status {
        Ok(s) if s.success() => Ok(()),
        Ok(_) => Err(CliError::new(format!(
            "could not unmount {}",
            a.dir.display()
        ))),
        Err(e) => Err(CliError::new(format!("could not run umount: {e}"))),
    }
}

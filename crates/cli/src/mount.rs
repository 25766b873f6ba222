//! `engram mount POOL DIR` and `engram umount DIR`: EngramFS as a FUSE file system.

use crate::error::{CliError, Result};
use crate::pool;
use crate::serve::default_socket;
use engram_core::Fs;
use engram_fuse::{MountOptions, check_mount_point, mount_with};
use std::io::{Read, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStringExt;
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
    // The pool the mount process holds, if it holds one: after the unmount that process
    // still closes the pool (and marks it clean); wait for that, so that the pool can be
    // used as soon as this command returns.
    let pool = std::fs::canonicalize(&a.dir)
        .ok()
        .and_then(|dir| mounted_pool(&dir));
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
        Ok(s) if s.success() => {
            if let Some(pool) = pool {
                wait_for_release(&pool);
            }
            Ok(())
        }
        Ok(_) => Err(CliError::new(format!(
            "could not unmount {}",
            a.dir.display()
        ))),
        Err(e) => Err(CliError::new(format!("could not run umount: {e}"))),
    }
}

/// The pool of the EngramFS mount at `dir`, from the source field of /proc/self/mountinfo
/// (`engram:POOL` for a mount whose process holds the pool itself).
fn mounted_pool(dir: &std::path::Path) -> Option<PathBuf> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    info.lines().rev().find_map(|line| {
        let fields: Vec<&str> = line.split(' ').collect();
        let sep = fields.iter().position(|&f| f == "-")?;
        let (mount_point, source) = (fields.get(4)?, fields.get(sep + 2)?);
        if unescape(mount_point) != dir.as_os_str().as_encoded_bytes() {
            return None;
        }
        let pool = unescape(source).strip_prefix(b"engram:")?.to_vec();
        Some(PathBuf::from(std::ffi::OsString::from_vec(pool)))
    })
}

/// Undo mountinfo's octal escapes (`\040` for a space, and so on).
fn unescape(field: &str) -> Vec<u8> {
    let b = field.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal = b
            .get(i + 1..i + 4)
            .filter(|d| d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match octal {
            Some(d) if b[i] == b'\\' => {
                out.push(d.iter().fold(0u8, |v, c| v.wrapping_mul(8) + (c - b'0')));
                i += 4;
            }
            _ => {
                out.push(b[i]);
                i += 1;
            }
        }
    }
    out
}

/// Wait (at most 30 s) until no process holds `pool` open for use, that is until the
/// unmounted FUSE process has closed it.
fn wait_for_release(pool: &std::path::Path) {
    let until = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while std::time::Instant::now() < until {
        match engram_pmem::Pool::open(pool) {
            Ok(p) if p.try_lock_exclusive().is_ok() => return,
            Ok(_) => {}
            // Gone or unreadable: nothing to wait for.
            Err(_) => return,
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    eprintln!(
        "engram: unmounted, but the mount process still holds {} after 30 s",
        pool.display()
    );
}

#[cfg(test)]
mod tests {
    use super::unescape;

    #[test]
    fn mountinfo_escapes_are_undone() {
        assert_eq!(unescape("/tmp/a\\040b"), b"/tmp/a b");
        assert_eq!(unescape("engram:/p\\134q\\011"), b"engram:/p\\q\t");
        assert_eq!(unescape("plain\\0x"), b"plain\\0x");
    }
}

//! Mounting and unmounting: checks of the mount point, the fuser session, the blocking
//! mount with its signal watcher, and the background mount for tests.

use crate::error::MountError;
use crate::signals::Signals;
use crate::state::{EngramFuse, IO_SIZE, IoCounters, IoStats};
use engram_core::Fs;
use fuser::{BackgroundSession, Config, MountOption, Session, SessionACL};
use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long an unmount retries while the mount point is busy before detaching it lazily.
const BUSY_WAIT: Duration = Duration::from_secs(5);

/// Request loops serving the kernel. Reads and lookups run in parallel in the engine (they
/// take no lock); changes are serialised by its server. Four keeps a slow request (a 1 MiB
/// copy-on-write) from stalling `stat`s on two cores without idle threads piling up.
const THREADS: usize = 4;

/// How to mount.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MountOptions {
    /// Let users other than the one who mounted use the mount (`-o allow_other`; a non-root
    /// user needs `user_allow_other` in /etc/fuse.conf).
    pub allow_other: bool,
    /// Mount read-only (`-o ro`).
    pub read_only: bool,
}

impl std::str::FromStr for MountOptions {
    type Err = String;

    /// The argument of `-o`: comma-separated `allow_other`, `ro`, `rw`.
    fn from_str(s: &str) -> Result<MountOptions, String> {
        let mut o = MountOptions::default();
        for opt in s.split(',').filter(|o| !o.is_empty()) {
            match opt {
                "allow_other" => o.allow_other = true,
                "ro" => o.read_only = true,
                "rw" => o.read_only = false,
                _ => {
                    return Err(format!(
                        "unknown mount option {opt:?} (known: allow_other, ro, rw)"
                    ));
                }
            }
        }
        Ok(o)
    }
}

/// The mount point must exist, be a directory and be empty. Returns it canonicalised.
pub fn check_mount_point(dir: &Path) -> Result<PathBuf, MountError> {
    let meta = match std::fs::metadata(dir) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(MountError::NoMountPoint(dir.to_path_buf()));
        }
        Err(source) => {
            return Err(MountError::Mount {
                dir: dir.to_path_buf(),
                source,
            });
        }
    };
    if !meta.is_dir() {
        return Err(MountError::NotADirectory(dir.to_path_buf()));
    }
    let mount_err = |source| MountError::Mount {
        dir: dir.to_path_buf(),
        source,
    };
    if std::fs::read_dir(dir).map_err(mount_err)?.next().is_some() {
        return Err(MountError::NotEmpty(dir.to_path_buf()));
    }
    let dir = dir.canonicalize().map_err(mount_err)?;
    match std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/fuse")
    {
        Ok(_) => Ok(dir),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Err(MountError::NoFuse(
            "/dev/fuse does not exist (load the fuse module, or give the container the \
             device)"
                .into(),
        )),
        Err(e) => Err(MountError::NoFuse(format!("cannot open /dev/fuse: {e}"))),
    }
}

/// The mount's source as /proc/self/mountinfo shows it: `engram:POOL` when this process
/// holds the pool (so that `engram umount` can wait until it lets go), else `engram`.
pub fn source_name(fs: &Fs) -> String {
    match fs.pool().path() {
        Some(p) if fs.remote().is_none() => format!("engram:{}", p.display()),
        _ => "engram".into(),
    }
}

fn config(fs: &Fs, opts: &MountOptions) -> Config {
    let mut c = Config::default();
    c.mount_options = vec![
        MountOption::FSName(source_name(fs)),
        MountOption::Subtype("engram".into()),
        MountOption::DefaultPermissions,
        if opts.read_only {
            MountOption::RO
        } else {
            MountOption::RW
        },
    ];
    c.acl = if opts.allow_other {
        SessionACL::All
    } else {
        SessionACL::Owner
    };
    c.n_threads = Some(THREADS);
    c
}

fn session(
    fs: &Fs,
    dir: &Path,
    opts: &MountOptions,
    io: Arc<IoCounters>,
) -> Result<Session<EngramFuse>, MountError> {
    let fuse = EngramFuse::new(fs, opts.read_only, io);
    let s = Session::new(fuse, dir, &config(fs, opts)).map_err(|source| MountError::Mount {
        dir: dir.to_path_buf(),
        source,
    })?;
    widen_readahead(dir);
    Ok(s)
}

/// Mount `fs` at `dir` and serve it until it is unmounted (`umount DIR`, `fusermount3 -u
/// DIR`, or SIGINT/SIGTERM/SIGHUP, whose handlers this installs for the duration), then
/// unmount the pool cleanly.
pub fn mount(fs: Fs, dir: &Path, opts: &MountOptions) -> Result<(), MountError> {
    mount_with(fs, dir, opts, || {})
}

/// [`mount`], calling `on_mounted` once the mount is live (for example to tell a parent
/// process that it may exit).
pub fn mount_with(
    fs: Fs,
    dir: &Path,
    opts: &MountOptions,
    on_mounted: impl FnOnce(),
) -> Result<(), MountError> {
    let dir = check_mount_point(dir)?;
    let served = {
        let s = session(&fs, &dir, opts, Arc::default())?;
        let signals = Signals::install()
            .map_err(|source| MountError::Mount {
                dir: dir.clone(),
                source,
            })?
            .map(Arc::new);
        let watcher = signals.clone().map(|sig| {
            let dir = dir.clone();
            std::thread::spawn(move || watch(&sig, &dir))
        });
        on_mounted();
        let served = s.run();
        if let (Some(sig), Some(w)) = (&signals, watcher) {
            sig.wake();
            let _ = w.join();
        }
        served
    };
    let unmounted = fs.unmount();
    served.map_err(|source| MountError::Unmount {
        dir: dir.clone(),
        source,
    })?;
    Ok(unmounted?)
}

/// The watcher: the first signal unmounts (lazily if the mount point stays busy); a second
/// one aborts the FUSE connection, failing whatever still uses it.
fn watch(sig: &Signals, dir: &Path) {
    let conn = connection_id(dir);
    let mut signalled = false;
    while let Some(n) = sig.wait() {
        if !signalled {
            signalled = true;
            eprintln!("engram: signal {n}: unmounting {}", dir.display());
            if let Err(e) = unmount_dir_waiting(dir, Duration::from_millis(500)) {
                eprintln!("engram: cannot unmount {}: {e}", dir.display());
            }
        } else {
            eprintln!("engram: signal {n}: aborting the FUSE connection");
            let abort = conn.map(|c| format!("/sys/fs/fuse/connections/{c}/abort"));
            if let Err(e) = abort.map_or(Err(io::ErrorKind::NotFound.into()), |a| {
                std::fs::write(a, "1")
            }) {
                eprintln!(
                    "engram: cannot abort the connection ({e}; is fusectl mounted?); the \
                     pool closes when the last user of {} leaves",
                    dir.display()
                );
            }
        }
    }
}

/// The device (major, minor) of the mount at `dir`, from /proc/self/mountinfo: a stat of
/// `dir` would ask the mount itself, which may not be serving yet.
fn mount_device(dir: &Path) -> Option<(u64, u64)> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let want = dir.as_os_str().as_bytes();
    // "ID PARENT MAJOR:MINOR ROOT MOUNT_POINT ..."; the last mount at `dir` is on top.
    let line = info
        .lines()
        .rfind(|l| l.split(' ').nth(4).map(unescape_octal).as_deref() == Some(want))?;
    let (major, minor) = line.split(' ').nth(2)?.split_once(':')?;
    Some((major.parse().ok()?, minor.parse().ok()?))
}

/// A mountinfo path: space, tab, newline and backslash appear as `\ooo` octal escapes.
fn unescape_octal(field: &str) -> Vec<u8> {
    let b = field.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let esc = b
            .get(i + 1..i + 4)
            .filter(|d| b[i] == b'\\' && d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match esc {
            Some(d) => {
                out.push(d.iter().fold(0u8, |v, c| v.wrapping_mul(8) + (c - b'0')));
                i += 4;
            }
            None => {
                out.push(b[i]);
                i += 1;
            }
        }
    }
    out
}

/// The number of the FUSE connection mounted at `dir` (its directory in fusectl): the
/// kernel's internal dev_t, major << 20 | minor.
fn connection_id(dir: &Path) -> Option<u64> {
    mount_device(dir).map(|(major, minor)| (major << 20) | minor)
}

/// Let the kernel read ahead 1 MiB at a time, so that sequential reads arrive as 1 MiB
/// requests: FUSE offers only the default window (128 KiB) at INIT, but root may widen
/// the mount's window afterwards. Best effort; files opened later use it.
fn widen_readahead(dir: &Path) {
    if let Some((major, minor)) = mount_device(dir) {
        let knob = format!("/sys/class/bdi/{major}:{minor}/read_ahead_kb");
        let _ = std::fs::write(knob, (IO_SIZE / 1024).to_string());
    }
}

/// Unmount `dir` (lazily with `lazy`): umount(2) as root, else fusermount3. A directory
/// that is not (or no longer) a mount point counts as unmounted.
pub(crate) fn unmount_dir(dir: &Path, lazy: bool) -> io::Result<()> {
    let c = CString::new(dir.as_os_str().as_bytes())?;
    let flags = if lazy { libc::MNT_DETACH } else { 0 };
    // SAFETY: `c` is a NUL-terminated path that lives for the call.
    if unsafe { libc::umount2(c.as_ptr(), flags) } == 0 {
        return Ok(());
    }
    let err = io::Error::last_os_error();
    match err.raw_os_error() {
        Some(libc::EINVAL) | Some(libc::ENOENT) => Ok(()),
        Some(libc::EPERM) => {
            let mut cmd = Command::new("fusermount3");
            cmd.arg("-u");
            if lazy {
                cmd.arg("-z");
            }
            let out = cmd.arg("--").arg(dir).output()?;
            if out.status.success() {
                Ok(())
            } else {
                let msg = String::from_utf8_lossy(&out.stderr);
                let busy = msg.contains("busy");
                Err(io::Error::new(
                    if busy {
                        io::ErrorKind::ResourceBusy
                    } else {
                        io::ErrorKind::Other
                    },
                    format!("fusermount3 -u: {}", msg.trim()),
                ))
            }
        }
        _ => Err(err),
    }
}

/// Unmount, retrying for up to `wait` while the mount point is busy, then lazily.
fn unmount_dir_waiting(dir: &Path, wait: Duration) -> io::Result<()> {
    let deadline = Instant::now() + wait;
    loop {
        match unmount_dir(dir, false) {
            Err(e) if e.kind() == io::ErrorKind::ResourceBusy => {
                if Instant::now() >= deadline {
                    eprintln!(
                        "engram: {} is busy; detaching it (the pool closes when the last \
                         user leaves)",
                        dir.display()
                    );
                    return unmount_dir(dir, true);
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            other => return other,
        }
    }
}

/// Mount in a background thread (for tests and embedding).
pub fn spawn_mount(fs: Fs, dir: &Path, opts: &MountOptions) -> Result<MountHandle, MountError> {
    let dir = check_mount_point(dir)?;
    let io = Arc::new(IoCounters::default());
    let s = session(&fs, &dir, opts, io.clone())?;
    let session = s.spawn().map_err(|source| MountError::Mount {
        dir: dir.clone(),
        source,
    })?;
    Ok(MountHandle {
        dir,
        session: Some(session),
        fs: Some(fs),
        io,
    })
}

/// A mount served by a background thread. Dropping it unmounts the mount and the pool.
pub struct MountHandle {
    dir: PathBuf,
    session: Option<BackgroundSession>,
    fs: Option<Fs>,
    io: Arc<IoCounters>,
}

impl MountHandle {
    /// Where it is mounted (canonical).
    pub fn mount_point(&self) -> &Path {
        &self.dir
    }

    /// Read and write request counts so far.
    pub fn io_stats(&self) -> IoStats {
        self.io.snapshot()
    }

    /// Whether the session still serves requests (false once unmounted from outside).
    pub fn is_mounted(&self) -> bool {
        self.session
            .as_ref()
            .is_some_and(|s| !s.guard.is_finished())
    }

    /// Unmount the directory (retrying for a few seconds while busy, then detaching it) and
    /// wait for the session to end, which a detached mount does when its last open file or
    /// working directory goes.
    fn end_session(&mut self) -> Result<(), MountError> {
        let Some(session) = self.session.take() else {
            return Ok(());
        };
        let err = |source| MountError::Unmount {
            dir: self.dir.clone(),
            source,
        };
        if !session.guard.is_finished() {
            unmount_dir_waiting(&self.dir, BUSY_WAIT).map_err(err)?;
        }
        session.join().map_err(err)
    }

    /// Unmount and hand the still-open pool back (to inspect it, then unmount it).
    pub fn into_fs(mut self) -> Result<Fs, MountError> {
        self.end_session()?;
        Ok(self
            .fs
            .take()
            .expect("the pool is held until the handle goes"))
    }

    /// Unmount the directory, then the pool cleanly.
    pub fn unmount(self) -> Result<(), MountError> {
        Ok(self.into_fs()?.unmount()?)
    }
}

impl Drop for MountHandle {
    fn drop(&mut self) {
        if let Err(e) = self.end_session() {
            eprintln!("engram: {e}");
        }
        if let Some(fs) = self.fs.take()
            && let Err(e) = fs.unmount()
        {
            eprintln!("engram: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::MountOptions;

    #[test]
    fn option_strings() {
        let o: MountOptions = "allow_other,ro".parse().unwrap();
        assert_eq!(
            o,
            MountOptions {
                allow_other: true,
                read_only: true
            }
        );
        assert_eq!(
            "ro,rw".parse::<MountOptions>().unwrap(),
            MountOptions::default()
        );
        let e = "allow_other,noexec".parse::<MountOptions>().unwrap_err();
        assert!(e.contains("noexec"), "{e}");
    }

    #[test]
    fn mountinfo_escapes() {
        assert_eq!(
            super::unescape_octal(r"/tmp/a\040b\134c\011"),
            b"/tmp/a b\\c\t"
        );
        assert_eq!(super::unescape_octal(r"/plain\09"), b"/plain\\09");
    }
}

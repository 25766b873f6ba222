//! A directory reached through ordinary system calls (`openat`, `pread`, `renameat`, …,
//! relative to a descriptor of the directory): tmpfs, ext4 on a loop device, and any
//! mounted directory (an `engram mount` FUSE mount, or a directory under the shim's prefix
//! when this process runs under the `LD_PRELOAD` shim).

use super::{HeldPath, Kind, Open, ProgramDir, Target, TargetFile, relative};
use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// What to undo when the target is dropped.
enum Teardown {
    /// A directory this harness made.
    RemoveDir(PathBuf),
    /// An ext4 image mounted on a loop device: unmount, then remove both (also when the
    /// process is killed: `signals`).
    Ext4 {
        mount: PathBuf,
        image: PathBuf,
        _on_signal: [Option<crate::signals::Registered>; 2],
    },
}

pub struct PosixTarget {
    name: String,
    kind: Kind,
    root: PathBuf,
    /// Closed before the teardown (fields drop in order; an open descriptor would keep
    /// the mount busy).
    dirfd: OwnedFd,
    /// Give freed blocks back to the backing file after each benchmark (ext4 on tmpfs).
    trim: bool,
    _teardown: Teardown,
}

fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

fn cvt_size(r: libc::ssize_t) -> io::Result<usize> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r as usize)
    }
}

/// Run `f` with `path` (without its leading '/') as a C string, relative to the target's
/// directory descriptor. Short paths are copied into a stack buffer, checked for a NUL on
/// the way: no allocation and no separate scan per call (the conversion is part of every
/// target's time, and the shim's calls are short enough for it to show).
fn with_cpath<R>(path: &str, f: impl FnOnce(&CStr) -> io::Result<R>) -> io::Result<R> {
    let bytes = relative(path).as_bytes();
    let invalid = || io::Error::from_raw_os_error(libc::EINVAL);
    let mut buf = [std::mem::MaybeUninit::<u8>::uninit(); 256];
    if bytes.len() < buf.len() {
        let mut nul = false;
        for (d, &b) in buf.iter_mut().zip(bytes) {
            d.write(b);
            nul |= b == 0;
        }
        buf[bytes.len()].write(0);
        if nul {
            return Err(invalid());
        }
        // SAFETY: the first len + 1 bytes were written just above, the last a NUL and no
        // other (checked).
        let c = unsafe {
            CStr::from_bytes_with_nul_unchecked(std::slice::from_raw_parts(
                buf.as_ptr().cast::<u8>(),
                bytes.len() + 1,
            ))
        };
        f(c)
    } else {
        let c = std::ffi::CString::new(bytes).map_err(|_| invalid())?;
        f(&c)
    }
}

/// Remove what runs killed by a signal left in `dir` (`engram-bench-PID-NAME`, for every PID
/// that no longer runs): scratch directories, which the signal handler cannot remove, and,
/// after a `SIGKILL` (the kernel's out-of-memory killer), which no handler sees, the
/// run's mounts (its huge-page pool tmpfs, its ext4 image's mount, detached here) and the
/// image file. Otherwise each killed run would keep its pools' memory until reboot.
fn remove_stale_scratch(dir: &Path) {
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    let mounted = |p: &Path| {
        let p = p.as_os_str().as_bytes();
        mounts
            .lines()
            .any(|l| l.split(' ').nth(1).is_some_and(|m| m.as_bytes() == p))
    };
    let mut stale: Vec<(PathBuf, bool)> = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let name = e.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix("engram-bench-")) else {
            continue;
        };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            stale.push((e.path(), e.file_type().is_ok_and(|t| t.is_dir())));
        }
    }
    // Mounts first: an image is only freed once the mount on it is gone.
    stale.sort_by_key(|(_, is_dir)| !is_dir);
    for (path, is_dir) in stale {
        if is_dir {
            if mounted(&path) {
                let Ok(c) = std::ffi::CString::new(path.as_os_str().as_bytes()) else {
                    continue;
                };
                // SAFETY: a NUL-terminated path; detaching needs no other argument.
                let r =
                    unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH | libc::UMOUNT_NOFOLLOW) };
                if r != 0 {
                    // Still mounted: removing would reach into that file system.
                    continue;
                }
            }
            let _ = std::fs::remove_dir_all(&path);
        } else {
            let _ = std::fs::remove_file(&path);
        }
    }
}

fn open_dir(path: &Path) -> io::Result<OwnedFd> {
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: opening a NUL-terminated path; the descriptor is owned from here on.
    let fd = cvt(unsafe { libc::open(c.as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY) })?;
    // SAFETY: `fd` was just opened and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Check that `path` is a directory that we can write to.
fn probe_dir(path: &Path) -> io::Result<()> {
    let probe = path.join(format!(".engram-bench-probe-{}", std::process::id()));
    std::fs::create_dir(&probe)?;
    std::fs::remove_dir(&probe)
}

/// A benchmark target on a directory that is already mounted (a FUSE mount, or a
/// directory under the shim's prefix). The benchmarks work in a fresh subdirectory that is
/// removed afterwards; the mount itself is left alone.
pub fn mounted_dir(name: &str, dir: &Path, kind: Kind) -> io::Result<PosixTarget> {
    let root = dir.join(format!("engram-bench-{}", std::process::id()));
    probe_dir(dir)
        .map_err(|e| io::Error::new(e.kind(), format!("{} is not writable: {e}", dir.display())))?;
    std::fs::create_dir(&root)?;
    PosixTarget::on(name, kind, &root, Teardown::RemoveDir(root.clone()), false)
}

impl PosixTarget {
    fn on(
        name: &str,
        kind: Kind,
        root: &Path,
        teardown: Teardown,
        trim: bool,
    ) -> io::Result<PosixTarget> {
        // On failure `teardown` is dropped here, undoing what the caller set up.
        let dirfd = open_dir(root)?;
        Ok(PosixTarget {
            name: name.to_string(),
            kind,
            root: root.to_path_buf(),
            dirfd,
            trim,
            _teardown: teardown,
        })
    }

    /// A fresh directory in `dir` (a tmpfs).
    pub fn tmpfs(name: &str, dir: &Path) -> io::Result<PosixTarget> {
        remove_stale_scratch(dir);
        let root = dir.join(format!("engram-bench-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir(&root)?;
        PosixTarget::on(
            name,
            Kind::Baseline,
            &root,
            Teardown::RemoveDir(root.clone()),
            false,
        )
    }

    /// ext4 on a loop device over a (sparse) image file in /dev/shm, with `inodes` inodes.
    /// Needs root; the error says why it could not be set up.
    pub fn ext4_loop(name: &str, image_size: u64, inodes: u64) -> Result<PosixTarget, String> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return Err("needs root to mount a loop device (run the benchmark as root)".into());
        }
        let base = format!("/dev/shm/engram-bench-{}-{name}", std::process::id());
        let image = PathBuf::from(format!("{base}.img"));
        let mount = PathBuf::from(format!("{base}.mnt"));
        let setup = || -> Result<(), String> {
            std::fs::File::create(&image)
                .and_then(|f| f.set_len(image_size))
                .map_err(|e| format!("cannot create the image file: {e}"))?;
            run(Command::new("mkfs.ext4")
                .args(["-q", "-F", "-N", &inodes.to_string()])
                .arg(&image))?;
            std::fs::create_dir_all(&mount)
                .map_err(|e| format!("cannot create the mount point: {e}"))?;
            // noinit_itable: no background zeroing of inode tables during the run.
            run(Command::new("mount")
                .args(["-t", "ext4", "-o", "loop,noinit_itable"])
                .arg(&image)
                .arg(&mount))
        };
        let teardown = Teardown::Ext4 {
            mount: mount.clone(),
            image: image.clone(),
            _on_signal: [crate::signals::mount(&mount), crate::signals::file(&image)],
        };
        if let Err(e) = setup() {
            drop(teardown);
            return Err(e);
        }
        PosixTarget::on(name, Kind::Baseline, &mount, teardown, true)
            .map_err(|e| format!("cannot open the mounted ext4: {e}"))
    }

    /// stat(2) of `path` relative to the root; returns the size.
    fn stat_c(&self, path: &CStr) -> io::Result<u64> {
        let mut st = std::mem::MaybeUninit::<libc::stat64>::uninit();
        // SAFETY: fstatat64 fills `st` on success.
        cvt(unsafe { libc::fstatat64(self.fd(), path.as_ptr(), st.as_mut_ptr(), 0) })?;
        // SAFETY: initialised by the successful call above.
        Ok(unsafe { st.assume_init() }.st_size as u64)
    }

    fn fd(&self) -> libc::c_int {
        self.dirfd.as_raw_fd()
    }

    /// FITRIM: hand freed blocks back to the image file, so that tmpfs memory does not
    /// grow with every benchmark's deleted files.
    fn trim(&self) {
        #[repr(C)]
        struct FstrimRange {
            start: u64,
            len: u64,
            minlen: u64,
        }
        const FITRIM: libc::c_ulong = 0xC018_5879;
        let mut r = FstrimRange {
            start: 0,
            len: u64::MAX,
            minlen: 0,
        };
        // SAFETY: FITRIM reads and writes the range struct passed by pointer.
        unsafe { libc::ioctl(self.fd(), FITRIM, &mut r as *mut FstrimRange) };
    }
}

pub(crate) fn run(cmd: &mut Command) -> Result<(), String> {
    let what = format!("{cmd:?}");
    match cmd.output() {
        Ok(o) if o.status.success() => Ok(()),
        Ok(o) => Err(format!(
            "{what} failed ({}): {}",
            o.status,
            String::from_utf8_lossy(&o.stderr).trim()
        )),
        Err(e) => Err(format!("cannot run {what}: {e}")),
    }
}

impl Drop for Teardown {
    fn drop(&mut self) {
        match self {
            Teardown::RemoveDir(d) => {
                let _ = std::fs::remove_dir_all(d);
            }
            Teardown::Ext4 { mount, image, .. } => {
                if mount.join("lost+found").exists() {
                    // Mounted: unmount (the loop device detaches itself: mount -o loop sets
                    // autoclear).
                    let _ = run(Command::new("umount").arg(&*mount));
                }
                // Fails harmlessly (EBUSY) if the unmount did not happen.
                let _ = std::fs::remove_dir(&*mount);
                let _ = std::fs::remove_file(&*image);
            }
        }
    }
}

struct PosixFile(OwnedFd);

impl TargetFile for PosixFile {
    fn pread(&self, buf: &mut [u8], off: u64) -> io::Result<usize> {
        // SAFETY: reading into a buffer we own, of its length.
        cvt_size(unsafe {
            libc::pread(
                self.0.as_raw_fd(),
                buf.as_mut_ptr().cast(),
                buf.len(),
                off as libc::off_t,
            )
        })
    }
    fn pwrite(&self, buf: &[u8], off: u64) -> io::Result<usize> {
        // SAFETY: writing from a buffer we own, of its length.
        cvt_size(unsafe {
            libc::pwrite(
                self.0.as_raw_fd(),
                buf.as_ptr().cast(),
                buf.len(),
                off as libc::off_t,
            )
        })
    }
    fn append(&self, buf: &[u8]) -> io::Result<usize> {
        // SAFETY: as above; the descriptor was opened with O_APPEND.
        cvt_size(unsafe { libc::write(self.0.as_raw_fd(), buf.as_ptr().cast(), buf.len()) })
    }
    fn fdatasync(&self) -> io::Result<()> {
        // SAFETY: plain system call on an owned descriptor.
        cvt(unsafe { libc::fdatasync(self.0.as_raw_fd()) }).map(|_| ())
    }
}

impl PosixTarget {
    fn open_raw(&self, path: &str, flags: libc::c_int) -> io::Result<OwnedFd> {
        with_cpath(path, |c| {
            // SAFETY: openat on our directory descriptor with a NUL-terminated path.
            let fd = cvt(unsafe { libc::openat(self.fd(), c.as_ptr(), flags, 0o644) })?;
            // SAFETY: `fd` was just opened and is owned by nobody else.
            Ok(unsafe { OwnedFd::from_raw_fd(fd) })
        })
    }

    /// Iterate a directory's entries (other than "." and ".."), with d_type.
    fn each_entry(&self, path: &str, mut f: impl FnMut(&CStr, u8)) -> io::Result<()> {
        let fd = self.open_raw(path, libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC)?;
        let raw = std::os::fd::IntoRawFd::into_raw_fd(fd);
        // SAFETY: fdopendir takes ownership of `raw`; closedir below releases both.
        let dir = unsafe { libc::fdopendir(raw) };
        if dir.is_null() {
            let e = io::Error::last_os_error();
            // SAFETY: fdopendir failed, so `raw` is still ours to close.
            unsafe { libc::close(raw) };
            return Err(e);
        }
        loop {
            // SAFETY: `dir` is a valid DIR stream until closedir.
            let ent = unsafe { libc::readdir64(dir) };
            if ent.is_null() {
                break;
            }
            // SAFETY: readdir returned a valid entry with a NUL-terminated name.
            let (name, ty) = unsafe { (CStr::from_ptr((*ent).d_name.as_ptr()), (*ent).d_type) };
            let b = name.to_bytes();
            if b != b"." && b != b".." {
                f(name, ty);
            }
        }
        // SAFETY: closing the stream opened above.
        unsafe { libc::closedir(dir) };
        Ok(())
    }
}

impl Target for PosixTarget {
    fn name(&self) -> &str {
        &self.name
    }
    fn program_dir(&self, scratch: &str) -> io::Result<ProgramDir> {
        if self.name == "engram-shim" {
            // This process's shim holds that pool open in-process: a child cannot open it.
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "the shim's pool is open in this process (no daemon): programs started \
                 from it cannot share it",
            ));
        }
        Ok(ProgramDir {
            dir: self.root.join(scratch.trim_start_matches('/')),
            env: Vec::new(),
            cleanup: None,
        })
    }
    fn kind(&self) -> Kind {
        self.kind
    }
    fn open(&self, path: &str, how: Open) -> io::Result<Box<dyn TargetFile>> {
        let mut flags = libc::O_CLOEXEC
            | if how.write {
                libc::O_RDWR
            } else {
                libc::O_RDONLY
            };
        if how.create {
            flags |= libc::O_CREAT;
        }
        if how.append {
            flags |= libc::O_APPEND;
        }
        if how.truncate {
            flags |= libc::O_TRUNC;
        }
        Ok(Box::new(PosixFile(self.open_raw(path, flags)?)))
    }
    fn create(&self, path: &str) -> io::Result<()> {
        self.open_raw(
            path,
            libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY | libc::O_CLOEXEC,
        )
        .map(drop)
    }
    fn mkdir(&self, path: &str) -> io::Result<()> {
        // SAFETY: mkdirat with a NUL-terminated path.
        with_cpath(path, |c| {
            cvt(unsafe { libc::mkdirat(self.fd(), c.as_ptr(), 0o755) }).map(drop)
        })
    }
    fn unlink(&self, path: &str) -> io::Result<()> {
        // SAFETY: unlinkat with a NUL-terminated path.
        with_cpath(path, |c| {
            cvt(unsafe { libc::unlinkat(self.fd(), c.as_ptr(), 0) }).map(drop)
        })
    }
    fn rmdir(&self, path: &str) -> io::Result<()> {
        // SAFETY: unlinkat with a NUL-terminated path.
        with_cpath(path, |c| {
            cvt(unsafe { libc::unlinkat(self.fd(), c.as_ptr(), libc::AT_REMOVEDIR) }).map(drop)
        })
    }
    fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        with_cpath(from, |f| {
            with_cpath(to, |t| {
                // SAFETY: renameat within our directory with NUL-terminated paths.
                cvt(unsafe { libc::renameat(self.fd(), f.as_ptr(), self.fd(), t.as_ptr()) })
                    .map(drop)
            })
        })
    }
    fn stat(&self, path: &str) -> io::Result<u64> {
        with_cpath(path, |c| self.stat_c(c))
    }
    fn stat_held(&self, path: &HeldPath) -> io::Result<u64> {
        self.stat_c(&path.relative)
    }
    fn count_dir(&self, path: &str) -> io::Result<usize> {
        let mut n = 0;
        self.each_entry(path, |_, _| n += 1)?;
        Ok(n)
    }
    fn list_dir(&self, path: &str) -> io::Result<Vec<(String, bool)>> {
        let mut out = Vec::new();
        self.each_entry(path, |name, ty| {
            out.push((name.to_string_lossy().into_owned(), ty == libc::DT_DIR))
        })?;
        Ok(out)
    }
    fn remove_tree(&self, path: &str) -> io::Result<()> {
        // The kernel's own tree removal (std) is much faster than a loop of *at calls
        // through this trait, and it is not timed anyway.
        let r = std::fs::remove_dir_all(self.root.join(path.trim_start_matches('/')));
        if self.trim {
            self.trim();
        }
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scratch_of_dead_runs_is_removed_and_live_ones_kept() {
        let dir = std::env::temp_dir().join(format!("engram-stale-test-{}", std::process::id()));
        // Above the kernel's largest pid_max (2^22): no process has it.
        let dead = dir.join("engram-bench-4294967-tmpfs-shm");
        let dead_image = dir.join("engram-bench-4294967-ext4.img");
        let dead_mount = dir.join("engram-bench-4294967-pools.mnt");
        let live = dir.join(format!("engram-bench-{}-tmpfs", std::process::id()));
        let other = dir.join("unrelated-4294967");
        for d in [&dead, &live, &other] {
            std::fs::create_dir_all(d.join("sub")).unwrap();
            std::fs::write(d.join("sub/f"), b"x").unwrap();
        }
        std::fs::write(&dead_image, b"image").unwrap();
        // A killed run's pool mount (as root, which mounts them; skipped otherwise).
        std::fs::create_dir(&dead_mount).unwrap();
        // SAFETY: geteuid has no preconditions.
        let root = unsafe { libc::geteuid() } == 0;
        let mounted = root
            && run(Command::new("mount")
                .args(["-t", "tmpfs", "-o", "size=1m", "engram-stale-test"])
                .arg(&dead_mount))
            .is_ok();
        if mounted {
            std::fs::write(dead_mount.join("pool"), b"pool").unwrap();
        } else {
            eprintln!("not root or no mount: the mount case is not checked");
        }
        remove_stale_scratch(&dir);
        assert!(!dead.exists());
        assert!(!dead_image.exists(), "a dead run's image file is removed");
        assert!(
            !dead_mount.exists(),
            "a dead run's mount is detached and removed"
        );
        let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap();
        assert!(!mounts.contains("engram-bench-4294967-pools.mnt"));
        assert!(live.join("sub/f").exists());
        assert!(other.join("sub/f").exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

//! Why a mount could not be made or ended: one sentence for the command line, and the
//! errno behind it.

use std::fmt;
use std::io;
use std::path::PathBuf;

/// A mount or unmount failure.
#[derive(Debug)]
pub enum MountError {
    /// The mount point does not exist.
    NoMountPoint(PathBuf),
    /// The mount point exists but is not a directory.
    NotADirectory(PathBuf),
    /// The mount point holds entries (or is already a mount point).
    NotEmpty(PathBuf),
    /// `/dev/fuse` is missing or cannot be opened (no FUSE in this kernel or container).
    NoFuse(String),
    /// The kernel or fusermount3 refused the mount.
    Mount { dir: PathBuf, source: io::Error },
    /// Unmounting failed (for example, the mount point stayed busy).
    Unmount { dir: PathBuf, source: io::Error },
    /// The pool reported an error (when it was unmounted at the end).
    Pool(engram_core::Error),
}

impl MountError {
    /// The errno a shell command would exit with.
    pub fn errno(&self) -> i32 {
        match self {
            MountError::NoMountPoint(_) => libc::ENOENT,
            MountError::NotADirectory(_) => libc::ENOTDIR,
            MountError::NotEmpty(_) => libc::ENOTEMPTY,
            MountError::NoFuse(_) => libc::ENODEV,
            MountError::Mount { source, .. } | MountError::Unmount { source, .. } => {
                source.raw_os_error().unwrap_or(libc::EIO)
            }
            MountError::Pool(e) => e.errno(),
        }
    }
}

impl fmt::Display for MountError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MountError::NoMountPoint(d) => {
                write!(f, "mount point {} does not exist", d.display())
            }
            MountError::NotADirectory(d) => {
                write!(f, "mount point {} is not a directory", d.display())
            }
            MountError::NotEmpty(d) => write!(
                f,
                "mount point {} is not empty (or is already mounted)",
                d.display()
            ),
            MountError::NoFuse(why) => write!(f, "FUSE is not available: {why}"),
            MountError::Mount { dir, source } => {
                write!(f, "cannot mount at {}: {source}", dir.display())?;
                if source.raw_os_error() == Some(libc::ENOTCONN) {
                    write!(f, " (a dead mount is still there: fusermount3 -u it first)")?;
                }
                if source.raw_os_error() == Some(libc::EPERM) {
                    write!(
                        f,
                        " (run as root, or install fuse3 so that fusermount3 can mount for \
                         you; allow_other also needs user_allow_other in /etc/fuse.conf)"
                    )?;
                }
                Ok(())
            }
            MountError::Unmount { dir, source } => {
                write!(f, "cannot unmount {}: {source}", dir.display())
            }
            MountError::Pool(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for MountError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            MountError::Mount { source, .. } | MountError::Unmount { source, .. } => Some(source),
            MountError::Pool(e) => Some(e),
            _ => None,
        }
    }
}

impl From<engram_core::Error> for MountError {
    fn from(e: engram_core::Error) -> MountError {
        MountError::Pool(e)
    }
}

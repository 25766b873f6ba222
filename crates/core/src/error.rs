//! Errors: every failure carries the errno a POSIX caller would see, and a sentence for humans.

use std::borrow::Cow;
use std::fmt;
use std::io;

/// An EngramFS error: an errno plus an optional explanation.
#[derive(Clone, PartialEq, Eq)]
pub struct Error {
    errno: i32,
    msg: Option<Cow<'static, str>>,
}

pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    pub const fn from_errno(errno: i32) -> Error {
        Error { errno, msg: None }
    }

    pub fn with_msg(errno: i32, msg: impl Into<Cow<'static, str>>) -> Error {
        Error {
            errno,
            msg: Some(msg.into()),
        }
    }

    /// A pool that cannot be used: corrupt, foreign or truncated.
    pub fn corrupt(msg: impl Into<Cow<'static, str>>) -> Error {
        Error::with_msg(libc::EUCLEAN, msg)
    }

    pub fn errno(&self) -> i32 {
        self.errno
    }

    pub fn message(&self) -> Option<&str> {
        self.msg.as_deref()
    }
}

macro_rules! errnos {
    ($($name:ident),*) => {
        impl Error {
            $(pub const $name: Error = Error::from_errno(libc::$name);)*
        }
    };
}
errnos!(
    ENOENT,
    EEXIST,
    ENOTDIR,
    EISDIR,
    ENOTEMPTY,
    EINVAL,
    ENAMETOOLONG,
    ELOOP,
    EACCES,
    EPERM,
    ENOSPC,
    EBADF,
    EXDEV,
    EMLINK,
    EFBIG,
    EIO,
    EBUSY,
    ESTALE,
    EOPNOTSUPP,
    EFAULT,
    EROFS,
    ENOSYS,
    ENODEV,
    ENXIO
);

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let os = io::Error::from_raw_os_error(self.errno);
        match &self.msg {
            // A message that already ends with the system's words for its error (an
            // io::Error's text) does not say them twice.
            Some(m) if m.ends_with(&format!("(os error {})", self.errno)) => write!(f, "{m}"),
            Some(m) => write!(f, "{m} ({os})"),
            None => write!(f, "{os}"),
        }
    }
}

impl std::error::Error for Error {}

impl From<Error> for io::Error {
    fn from(e: Error) -> io::Error {
        match e.msg {
            None => io::Error::from_raw_os_error(e.errno),
            Some(m) => io::Error::new(io::Error::from_raw_os_error(e.errno).kind(), m.into_owned()),
        }
    }
}

/// EBUSY for a pool whose exclusive lock `Pool::try_lock_exclusive` could not take: in use
/// by another process, or still mapped by a client of a daemon that has stopped.
pub fn pool_busy(path: &std::path::Path, e: &io::Error) -> Error {
    let why = match e.kind() {
        io::ErrorKind::WouldBlock => "is in use by another process".to_string(),
        io::ErrorKind::ResourceBusy => e.to_string().replacen("pool is", "is", 1),
        // Any other failure of the locks (ENOLCK, say) keeps its own errno.
        _ => {
            return Error::with_msg(
                io_errno(e),
                format!("cannot lock pool {}: {e}", path.display()),
            );
        }
    };
    Error::with_msg(libc::EBUSY, format!("pool {} {why}", path.display()))
}

/// The errno an io::Error stands for (by its kind when it carries no OS code).
pub fn io_errno(e: &io::Error) -> i32 {
    e.raw_os_error().unwrap_or(match e.kind() {
        io::ErrorKind::NotFound => libc::ENOENT,
        io::ErrorKind::PermissionDenied => libc::EACCES,
        io::ErrorKind::WouldBlock | io::ErrorKind::ResourceBusy => libc::EBUSY,
        io::ErrorKind::InvalidInput => libc::EINVAL,
        io::ErrorKind::InvalidData => libc::EUCLEAN,
        io::ErrorKind::AlreadyExists => libc::EEXIST,
        _ => libc::EIO,
    })
}

impl From<io::Error> for Error {
    fn from(e: io::Error) -> Error {
        Error::with_msg(io_errno(&e), e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_system_words_for_an_error_are_said_once() {
        let io = io::Error::from_raw_os_error(libc::ENOENT);
        let e = Error::with_msg(libc::ENOENT, format!("cannot create pool file /x/p: {io}"));
        assert_eq!(
            e.to_string(),
            "cannot create pool file /x/p: No such file or directory (os error 2)"
        );
        let e = Error::with_msg(libc::EBUSY, "pool p is in use");
        assert_eq!(
            e.to_string(),
            "pool p is in use (Device or resource busy (os error 16))"
        );
    }
}

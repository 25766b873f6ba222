//! Opening a FIFO, device or socket node of the pool. The pool keeps a FIFO's node only: its
//! pipe is a kernel FIFO in /dev/shm (`sidefiles::fifo_file`, one per node, made by the
//! first open through the shim), which every process that opens the node opens, so that its
//! readers and writers meet there as on Linux. A device is refused as on a `nodev` mount
//! (EACCES), a socket as Linux refuses its open (ENXIO).

use crate::real;
use crate::session;
use crate::util::{Res, errno};
use engram_core::{Handle, Metadata};
use libc::c_int;
use std::ffi::CString;

/// The kernel FIFO of a pool FIFO the engine let the caller open as asked. It is opened once
/// the operation guard is let go: the open waits for the pipe's other end, and a `fork` in
/// another thread waits for the guard.
pub struct Fifo(CString);

/// What an open of special node `h` (of metadata `m`) comes to, once the engine has checked
/// the caller's permissions.
pub fn for_node(h: Handle, m: &Metadata) -> Res<Fifo> {
    if m.is_device() {
        return Err(libc::EACCES);
    }
    if !m.is_fifo() {
        return Err(libc::ENXIO);
    }
    let name = engram_core::sidefiles::fifo_file(session::pool_id()?, h.ino, h.generation);
    Ok(Fifo(CString::new(name).map_err(|_| libc::EINVAL)?))
}

/// Flags of the caller's open that the pool node has answered (it exists; Linux ignores
/// `O_TRUNC` on a FIFO) or that do not apply to the kernel FIFO.
const ANSWERED: c_int = libc::O_CREAT | libc::O_EXCL | libc::O_TRUNC | libc::O_DIRECTORY;

impl Fifo {
    /// Open it with the caller's `flags` (access mode, `O_NONBLOCK`, `O_CLOEXEC`, ...),
    /// making it first if no process has: the program's own descriptor of the kernel's pipe,
    /// which the program's later calls reach directly. `O_NOFOLLOW`: a symlink put in
    /// /dev/shm under its name is not followed.
    pub fn open(self, flags: c_int) -> Res<c_int> {
        let flags = (flags & !ANSWERED) | libc::O_NOFOLLOW;
        // SAFETY: a NUL-terminated path; flags from the caller.
        let mut fd = unsafe { real::open64(self.0.as_ptr(), flags, 0) };
        if fd < 0 && errno() == libc::ENOENT {
            self.make()?;
            // SAFETY: as above.
            fd = unsafe { real::open64(self.0.as_ptr(), flags, 0) };
        }
        if fd < 0 {
            return Err(errno());
        }
        checked(fd)
    }

    /// Make the kernel FIFO, readable and writable by everyone: who may open the pool's
    /// FIFO is its node's mode, which the engine checked (the lock files beside it are open
    /// to all the same way). Another process making it first is no failure.
    fn make(&self) -> Res<()> {
        // SAFETY: a NUL-terminated path.
        if unsafe { real::mknod(self.0.as_ptr(), libc::S_IFIFO | 0o666, 0) } != 0 {
            let e = errno();
            return if e == libc::EEXIST { Ok(()) } else { Err(e) };
        }
        // The umask took bits away; the maker gives them back.
        // SAFETY: as above.
        unsafe { real::chmod(self.0.as_ptr(), 0o666) };
        Ok(())
    }
}

/// `fd`, if it is a FIFO: anyone may put a file in /dev/shm under the kernel FIFO's name,
/// and a regular file there would take what the program writes to the pipe.
fn checked(fd: c_int) -> Res<c_int> {
    // SAFETY: plain data, filled by fstat of our own descriptor.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let fifo =
        unsafe { real::fstat(fd, &mut st) } == 0 && st.st_mode & libc::S_IFMT == libc::S_IFIFO;
    if fifo {
        return Ok(fd);
    }
    // SAFETY: closing the descriptor just opened.
    unsafe { real::close(fd) };
    Err(libc::EACCES)
}

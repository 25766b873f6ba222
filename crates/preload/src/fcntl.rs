//! fcntl (flags, descriptor flags, duplication, record locks and OFD locks), flock and
//! lockf. Locks are the kernel's, taken on a per-inode lock file in /dev/shm, so that they
//! work between processes with Linux's semantics (POSIX locks per process, OFD locks and
//! flocks per description); POSIX locks on a pool opened in this process, which no other
//! process can reach, are answered here (`reclocks`).

use crate::session::op;
use crate::table::{self, OpenFile};
use crate::util::{Res, errno, guard};
use crate::{io, real};
use libc::{c_int, c_ulong, off_t};

/// A lock request with its start made absolute (the lock file has no offset or size).
fn absolute(of: &OpenFile, fl: &libc::flock) -> Res<libc::flock> {
    let mut f = *fl;
    let base: i64 = match fl.l_whence as c_int {
        libc::SEEK_SET => 0,
        libc::SEEK_CUR => of.offset() as i64,
        libc::SEEK_END => io::size_of(of)? as i64,
        _ => return Err(libc::EINVAL),
    };
    f.l_start = fl.l_start.checked_add(base).ok_or(libc::EOVERFLOW)?;
    f.l_whence = libc::SEEK_SET as _;
    if f.l_start < 0 {
        return Err(libc::EINVAL);
    }
    Ok(f)
}

fn lock(of: &OpenFile, cmd: c_int, arg: c_ulong) -> Res<c_int> {
    let p = arg as *mut libc::flock;
    if p.is_null() {
        return Err(libc::EFAULT);
    }
    // SAFETY: the caller passes a struct flock.
    let user = unsafe { &mut *p };
    let mut f = {
        let _op = op();
        match user.l_type as c_int {
            libc::F_RDLCK if !of.readable() && cmd != libc::F_GETLK && cmd != libc::F_OFD_GETLK => {
                return Err(libc::EBADF);
            }
            libc::F_WRLCK if !of.writable() && cmd != libc::F_GETLK && cmd != libc::F_OFD_GETLK => {
                return Err(libc::EBADF);
            }
            _ => {}
        }
        let mut f = absolute(of, user)?;
        match cmd {
            libc::F_SETLK | libc::F_SETLKW | libc::F_GETLK => {
                if let Some(r) = crate::reclocks::posix(of, cmd, &mut f) {
                    let r = r?;
                    if cmd == libc::F_GETLK {
                        // Nothing conflicts: F_UNLCK, the other fields as given.
                        user.l_type = f.l_type;
                    }
                    return Ok(r);
                }
            }
            _ => crate::reclocks::to_kernel(of)?,
        }
        f
    };
    let fd = of.lock_fd()?;
    // Blocking waits happen without the operation guard, so fork is never held up.
    // SAFETY: fcntl on our lock descriptor with a local struct flock.
    let r = unsafe { real::fcntl(fd, cmd, &mut f as *mut libc::flock as c_ulong) };
    if r < 0 {
        return Err(errno());
    }
    if cmd == libc::F_GETLK || cmd == libc::F_OFD_GETLK {
        *user = f;
    }
    Ok(r)
}

/// The O_LARGEFILE bit 64-bit Linux sets on every open file and F_GETFL shows; glibc's (and
/// the libc crate's) `O_LARGEFILE` is 0 there.
#[cfg(target_arch = "x86_64")]
const KERNEL_O_LARGEFILE: c_int = 0o100000;
#[cfg(not(target_arch = "x86_64"))]
const KERNEL_O_LARGEFILE: c_int = libc::O_LARGEFILE;

fn fcntl_of(fd: c_int, of: &OpenFile, cmd: c_int, arg: c_ulong) -> Res<c_int> {
    match cmd {
        // The kernel keeps only O_PATH's own flags on an O_PATH descriptor.
        libc::F_GETFL if of.is_path() => Ok(of.flags()),
        libc::F_GETFL => Ok(of.flags() | KERNEL_O_LARGEFILE),
        libc::F_SETFL => {
            let _op = op();
            of.set_flags(arg as c_int)?;
            Ok(0)
        }
        libc::F_GETFD | libc::F_SETFD => {
            // SAFETY: close-on-exec is the placeholder descriptor's own flag.
            let r = unsafe { real::fcntl(fd, cmd, arg) };
            if r < 0 {
                return Err(errno());
            }
            if cmd == libc::F_SETFD {
                let cloexec = arg as c_int & libc::FD_CLOEXEC != 0;
                crate::table::set_cloexec(fd, cloexec);
                if !cloexec {
                    let _op = op();
                    crate::table::publish_if_inheritable(fd);
                }
            }
            Ok(r)
        }
        libc::F_DUPFD | libc::F_DUPFD_CLOEXEC => {
            let _op = op();
            // SAFETY: duplicating the placeholder reserves the new number.
            let r = unsafe { real::fcntl(fd, cmd, arg) };
            if r < 0 {
                return Err(errno());
            }
            crate::open::mirrored(fd, r);
            Ok(r)
        }
        libc::F_GETLK
        | libc::F_SETLK
        | libc::F_SETLKW
        | libc::F_OFD_GETLK
        | libc::F_OFD_SETLK
        | libc::F_OFD_SETLKW => lock(of, cmd, arg),
        _ => Err(libc::EINVAL),
    }
}

fn fcntl_impl(fd: c_int, cmd: c_int, arg: c_ulong, pass: impl FnOnce() -> c_int) -> c_int {
    let Some(of) = table::get(fd) else {
        if crate::desc::is_spare(fd) {
            // A closed file's number the shim keeps for its next open: closed to the program.
            crate::util::set_errno(libc::EBADF);
            return -1;
        }
        return pass();
    };
    guard(-1, || fcntl_of(fd, &of, cmd, arg))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn fcntl(fd: c_int, cmd: c_int, arg: c_ulong) -> c_int {
    crate::guarded!(-1, {
        // SAFETY: forwarding unchanged.
        fcntl_impl(fd, cmd, arg, || unsafe { real::fcntl(fd, cmd, arg) })
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn fcntl64(fd: c_int, cmd: c_int, arg: c_ulong) -> c_int {
    crate::guarded!(-1, {
        // SAFETY: forwarding unchanged.
        fcntl_impl(fd, cmd, arg, || unsafe { real::fcntl64(fd, cmd, arg) })
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn flock(fd: c_int, op_: c_int) -> c_int {
    crate::guarded!(-1, {
        let Some(of) = table::get(fd) else {
            crate::desc::refuse_spare(fd)?;
            // SAFETY: forwarding unchanged.
            return Ok(unsafe { real::flock(fd, op_) });
        };
        guard(-1, || {
            let lfd = of.lock_fd()?;
            // SAFETY: flock on our lock descriptor (the description's own).
            let r = unsafe { real::flock(lfd, op_) };
            if r < 0 { Err(errno()) } else { Ok(r) }
        })
    })
}

fn lockf_of(of: &OpenFile, cmd: c_int, len: off_t) -> Res<c_int> {
    // SAFETY: struct flock is plain data.
    let mut f: libc::flock = unsafe { std::mem::zeroed() };
    f.l_whence = libc::SEEK_CUR as _;
    f.l_start = 0;
    f.l_len = len;
    let (cmd, ty) = match cmd {
        libc::F_LOCK => (libc::F_SETLKW, libc::F_WRLCK),
        libc::F_TLOCK => (libc::F_SETLK, libc::F_WRLCK),
        libc::F_ULOCK => (libc::F_SETLK, libc::F_UNLCK),
        libc::F_TEST => {
            f.l_type = libc::F_WRLCK as _;
            lock(of, libc::F_GETLK, &mut f as *mut libc::flock as c_ulong)?;
            // SAFETY: getpid has no preconditions.
            if f.l_type as c_int == libc::F_UNLCK || f.l_pid == unsafe { libc::getpid() } {
                return Ok(0);
            }
            return Err(libc::EACCES);
        }
        _ => return Err(libc::EINVAL),
    };
    f.l_type = ty as _;
    lock(of, cmd, &mut f as *mut libc::flock as c_ulong)
}

macro_rules! lockfs {
    ($($name:ident),*) => {$(
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(fd: c_int, cmd: c_int, len: off_t) -> c_int {
    crate::guarded!(-1, {
            let Some(of) = table::get(fd) else {
                crate::desc::refuse_spare(fd)?;
                // SAFETY: forwarding unchanged.
                return Ok(unsafe { real::$name(fd, cmd, len) });
            };
            guard(-1, || lockf_of(&of, cmd, len).map(|_| 0))
        })
}
    )*};
}
lockfs!(lockf, lockf64);

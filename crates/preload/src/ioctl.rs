//! ioctl. On a descriptor of the program's own the kernel answers. On one of the pool's,
//! the kernel would answer for the placeholder behind the number (`/dev/null`, or the
//! memfd of a published description), so the requests a regular file or directory takes
//! are answered here as Linux's own file systems answer them for a file system without
//! reflinks, extents or inode flags (tmpfs), and every other request gives `ENOTTY`. Found
//! by probing Node.js: `copyFile` with `COPYFILE_FICLONE_FORCE` got `EINVAL` (the kernel's
//! answer for a clone into `/dev/null`) where tmpfs and ext4 give `EOPNOTSUPP`; and
//! `FIONREAD` gave `ENOTTY` instead of the bytes left to read.

use crate::session::op;
use crate::table::{self, OpenFile};
use crate::util::{Res, errno};
use libc::{c_int, c_ulong};

/// `FS_IOC32_GETFLAGS` and `FS_IOC32_SETFLAGS`: the same requests with an `int` in their
/// number, which the kernel takes from 64-bit programs too (the flags are an `int` either
/// way).
const FS_IOC32_GETFLAGS: c_ulong = 0x8004_6601;
const FS_IOC32_SETFLAGS: c_ulong = 0x4004_6602;
// Not in the libc crate (values from the kernel's headers).
/// The bytes a file takes, as a `loff_t`.
const FIOQSIZE: c_ulong = 0x5460;
/// The file system's block size, as an `int`.
const FIGETBSZ: c_ulong = 2;
const FIDEDUPERANGE: c_ulong = 0xc018_9436;
const FS_IOC_FIEMAP: c_ulong = 0xc020_660b;
/// The flags argument of `FS_IOC_FSGETXATTR`/`FS_IOC_FSSETXATTR` (`struct fsxattr`).
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct FsXattr {
    xflags: u32,
    extsize: u32,
    nextents: u32,
    projid: u32,
    cowextsize: u32,
    pad: [u8; 8],
}
const FS_IOC_FSGETXATTR: c_ulong = 0x801c_581f;
const FS_IOC_FSSETXATTR: c_ulong = 0x401c_5820;

/// ioctl goes to the kernel unchanged for descriptors that are not the pool's; FIONCLEX
/// (what Python's `os.set_inheritable` uses) makes one of ours survive exec, so its
/// description must be published.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ioctl(fd: c_int, req: c_ulong, arg: c_ulong) -> c_int {
    crate::guarded!(-1, {
        crate::desc::refuse_spare(fd)?;
        if let Some(of) = table::get(fd)
            && !kernel_answers(req)
        {
            let _op = op();
            return pool_ioctl(&of, req, arg);
        }
        if clones_from_the_pool(req, arg) {
            // A clone into a file elsewhere from a pool file: another file system. The
            // kernel checks the destination's number first.
            // SAFETY: F_GETFD on any number is harmless.
            if unsafe { crate::real::fcntl(fd, libc::F_GETFD, 0) } < 0 {
                return Err(errno());
            }
            return Err(libc::EXDEV);
        }
        // SAFETY: forwarding unchanged.
        let r = unsafe { crate::real::ioctl(fd, req, arg) };
        if r == 0 && (req == libc::FIONCLEX || req == libc::FIOCLEX) && table::is_ours(fd) {
            table::set_cloexec(fd, req == libc::FIOCLEX);
            if req == libc::FIONCLEX {
                let _op = op();
                table::publish_if_inheritable(fd);
            }
        }
        r
    })
}

/// The requests the kernel answers for any descriptor, whatever file is behind it: the
/// close-on-exec flag and asynchronous notification are the descriptor's own.
fn kernel_answers(req: c_ulong) -> bool {
    matches!(req, libc::FIOCLEX | libc::FIONCLEX | libc::FIOASYNC)
}

/// Whether `req` clones (`FICLONE`, `FICLONERANGE`) from a descriptor of the pool.
fn clones_from_the_pool(req: c_ulong, arg: c_ulong) -> bool {
    match req {
        libc::FICLONE => table::is_ours(arg as c_int),
        libc::FICLONERANGE => {
            read::<libc::file_clone_range>(arg).is_ok_and(|r| table::is_ours(r.src_fd as c_int))
        }
        _ => false,
    }
}

/// A request on a descriptor of the pool.
fn pool_ioctl(of: &OpenFile, req: c_ulong, arg: c_ulong) -> Res<c_int> {
    // The kernel takes no ioctl on an O_PATH descriptor.
    if of.is_path() {
        return Err(libc::EBADF);
    }
    match req {
        libc::FIONREAD => {
            if of.is_dir() {
                return Err(libc::ENOTTY);
            }
            // Linux's answer, an int: the size less the offset, negative past the end.
            let left = crate::io::size_of(of)?.wrapping_sub(of.offset());
            write(arg, left as c_int)
        }
        FIGETBSZ => write(arg, crate::stat::stat_of(of)?.blksize as c_int),
        FIOQSIZE => {
            let m = crate::stat::stat_of(of)?;
            write(arg, (m.blocks * 512) as i64)
        }
        libc::FIONBIO => {
            let on = read::<c_int>(arg)? != 0;
            let flags = of.flags() & !libc::O_NONBLOCK;
            of.set_flags(if on { flags | libc::O_NONBLOCK } else { flags })?;
            Ok(0)
        }
        libc::FICLONE => clone_into(of, arg as c_int),
        libc::FICLONERANGE => clone_into(of, read::<libc::file_clone_range>(arg)?.src_fd as c_int),
        FIDEDUPERANGE => {
            read::<u64>(arg)?;
            Err(libc::EOPNOTSUPP)
        }
        libc::FS_IOC_GETFLAGS | FS_IOC32_GETFLAGS => write(arg, 0 as c_int),
        libc::FS_IOC_SETFLAGS | FS_IOC32_SETFLAGS => {
            let flags = read::<c_int>(arg)?;
            no_attribute_set(of, flags == 0)
        }
        FS_IOC_FSGETXATTR => write(arg, FsXattr::default()),
        FS_IOC_FSSETXATTR => {
            let x = read::<FsXattr>(arg)?;
            no_attribute_set(
                of,
                x.xflags == 0 && x.extsize == 0 && x.cowextsize == 0 && x.projid == 0,
            )
        }
        // No extent map to give (tmpfs's answer; `filefrag` and `cp` then read the data).
        FS_IOC_FIEMAP => Err(libc::EOPNOTSUPP),
        _ => Err(libc::ENOTTY),
    }
}

/// `FICLONE`/`FICLONERANGE` into `of` from descriptor `src`: Linux's checks in its order,
/// then `EOPNOTSUPP`: the pool shares no pages between files.
fn clone_into(of: &OpenFile, src: c_int) -> Res<c_int> {
    let Some(from) = table::get(src) else {
        // SAFETY: F_GETFD on any number is harmless.
        if unsafe { crate::real::fcntl(src, libc::F_GETFD, 0) } < 0 {
            return Err(libc::EBADF);
        }
        return Err(libc::EXDEV);
    };
    if from.is_path() {
        return Err(libc::EBADF);
    }
    if from.is_dir() || of.is_dir() {
        return Err(libc::EISDIR);
    }
    if !from.readable() || !of.writable() || of.flags() & libc::O_APPEND != 0 {
        return Err(libc::EBADF);
    }
    Err(libc::EOPNOTSUPP)
}

/// Setting inode flags or extended attributes: only the owner or root may; the pool keeps
/// none, so setting none (`none`) changes nothing and any other is `EOPNOTSUPP`.
fn no_attribute_set(of: &OpenFile, none: bool) -> Res<c_int> {
    if !of.owned_by_caller()? {
        return Err(libc::EPERM);
    }
    if none { Ok(0) } else { Err(libc::EOPNOTSUPP) }
}

/// The `T` the caller's argument points to; `EFAULT` for a null pointer.
fn read<T: Copy>(arg: c_ulong) -> Res<T> {
    let p = arg as *const T;
    if p.is_null() {
        return Err(libc::EFAULT);
    }
    // SAFETY: the request's argument points to its structure (the caller's contract with
    // ioctl); unaligned reads allow any address.
    Ok(unsafe { p.read_unaligned() })
}

/// Store `v` where the caller's argument points; `EFAULT` for a null pointer.
fn write<T: Copy>(arg: c_ulong, v: T) -> Res<c_int> {
    let p = arg as *mut T;
    if p.is_null() {
        return Err(libc::EFAULT);
    }
    // SAFETY: as in `read`: the request's argument points to room for its answer.
    unsafe { p.write_unaligned(v) };
    Ok(0)
}

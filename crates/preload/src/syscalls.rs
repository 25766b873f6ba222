//! syscall(2) for the file calls programs make without libc's wrappers: gnulib's own
//! renameat2 (in patch, for one) calls `syscall(SYS_renameat2, …)`, which reached the kernel
//! with a path under the prefix; libuv (Node.js) closes descriptors with
//! `syscall(SYS_close)`, which closed a placeholder behind the shim's back (the number,
//! reused by the kernel for a real file, then read the pool file's data), and stats with
//! `SYS_statx`. Those numbers, and the other descriptor calls a program could make raw,
//! go to the shim's own functions (which pass what is not the pool's to the kernel);
//! every other number goes to libc unchanged.
//!
//! The shim's own `syscall`s (membarrier at load, Rust's futex waits) come here too:
//! libc's is found at load, by the first of them, never later in a signal handler.
//!
//! `syscall` is variadic. On x86-64 a variadic call passes its integer arguments where a
//! call with seven integer parameters does (six in registers, the seventh on the stack), so
//! the export takes seven: the number and the six arguments the kernel takes at most.

use crate::real;
use libc::{c_char, c_int, c_long, c_uint};

#[cfg(target_arch = "x86_64")]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn syscall(
    n: c_long,
    a: c_long,
    b: c_long,
    c: c_long,
    d: c_long,
    e: c_long,
    f: c_long,
) -> c_long {
    match n {
        // The caller's arguments, as renameat2 takes them; its body, not the exported
        // symbol, which the program itself may define (and have call `syscall`).
        libc::SYS_renameat2 => c_long::from(crate::paths::renameat2_inside(
            a as c_int,
            b as *const c_char,
            c as c_int,
            d as *const c_char,
            e as c_uint,
        )),
        // SAFETY: each is the caller's arguments as the kernel takes them, given to the
        // shim's function of the same call (on x86-64 a raw offset is one register: the
        // vectored calls' high word is ignored).
        _ => unsafe {
            use libc::{c_void, iovec, size_t};
            let (fd, n_) = (a as c_int, c as size_t);
            match n {
                libc::SYS_close => c_long::from(crate::open::close(fd)),
                libc::SYS_read => crate::io::read(fd, b as *mut c_void, n_) as c_long,
                libc::SYS_write => crate::io::write(fd, b as *const c_void, n_) as c_long,
                libc::SYS_pread64 => crate::io::pread64(fd, b as *mut c_void, n_, d) as c_long,
                libc::SYS_pwrite64 => crate::io::pwrite64(fd, b as *const c_void, n_, d) as c_long,
                libc::SYS_readv => crate::io::readv(fd, b as *const iovec, c as c_int) as c_long,
                libc::SYS_writev => crate::io::writev(fd, b as *const iovec, c as c_int) as c_long,
                libc::SYS_preadv => {
                    crate::io::preadv64(fd, b as *const iovec, c as c_int, d) as c_long
                }
                libc::SYS_pwritev => {
                    crate::io::pwritev64(fd, b as *const iovec, c as c_int, d) as c_long
                }
                libc::SYS_preadv2 => {
                    crate::io::preadv64v2(fd, b as *const iovec, c as c_int, d, f as c_int)
                        as c_long
                }
                libc::SYS_pwritev2 => {
                    crate::io::pwritev64v2(fd, b as *const iovec, c as c_int, d, f as c_int)
                        as c_long
                }
                libc::SYS_lseek => crate::io::lseek64(fd, b, c as c_int),
                libc::SYS_fstat => c_long::from(crate::stat::fstat64(fd, b as *mut libc::stat)),
                libc::SYS_newfstatat => c_long::from(crate::stat::fstatat64(
                    fd,
                    b as *const c_char,
                    c as *mut libc::stat,
                    d as c_int,
                )),
                libc::SYS_statx => c_long::from(crate::stat::statx(
                    fd,
                    b as *const c_char,
                    c as c_int,
                    d as c_uint,
                    e as *mut libc::statx,
                )),
                libc::SYS_fsync => c_long::from(crate::io::fsync(fd)),
                libc::SYS_fdatasync => c_long::from(crate::io::fdatasync(fd)),
                libc::SYS_ftruncate => c_long::from(crate::io::ftruncate64(fd, b)),
                libc::SYS_open => c_long::from(crate::open::open64(
                    a as *const c_char,
                    b as c_int,
                    c as c_uint,
                )),
                libc::SYS_openat => c_long::from(crate::open::openat64(
                    fd,
                    b as *const c_char,
                    c as c_int,
                    d as c_uint,
                )),
                libc::SYS_dup => c_long::from(crate::open::dup(fd)),
                libc::SYS_dup2 => c_long::from(crate::open::dup2(fd, b as c_int)),
                libc::SYS_dup3 => c_long::from(crate::open::dup3(fd, b as c_int, c as c_int)),
                libc::SYS_getdents64 => crate::dirs::getdents64(fd, b as *mut c_void, n_) as c_long,
                libc::SYS_sendfile => {
                    crate::xfer::sendfile(fd, b as c_int, c as *mut libc::off_t, d as size_t)
                        as c_long
                }
                libc::SYS_copy_file_range => crate::xfer::copy_file_range(
                    fd,
                    b as *mut libc::off_t,
                    c as c_int,
                    d as *mut libc::off_t,
                    e as size_t,
                    f as c_uint,
                ) as c_long,
                _ => real::syscall6(n, [a, b, c, d, e, f]),
            }
        },
    }
}

//! syscall(2) for the file calls programs make without libc's wrappers: gnulib's own
//! renameat2 (in patch, for one) calls `syscall(SYS_renameat2, …)`, which reached the kernel
//! with a path under the prefix. That number goes to the shim's renameat2; every other goes
//! to libc unchanged.
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
        // SAFETY: forwarding the caller's arguments unchanged.
        _ => unsafe { real::syscall6(n, [a, b, c, d, e, f]) },
    }
}

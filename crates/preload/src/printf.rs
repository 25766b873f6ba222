//! dprintf, vdprintf, __dprintf_chk and __vdprintf_chk. glibc's versions write through an
//! internal write on the descriptor itself, which for an EngramFS descriptor is only the
//! placeholder: the data would be lost (or land in the memfd that carries a published
//! description's state). c/printf.c formats into a buffer and writes it with
//! `engram_preload_write_all` below; the exported symbols are naked trampolines that jump
//! to the C functions, because stable Rust cannot define a variadic function (a jump keeps
//! every argument register and the stack exactly as the caller left them).

use crate::util::Res;
use libc::{c_char, c_int, size_t, ssize_t};

/// Whether `fd` is one of the shim's descriptors (one atomic load; for c/printf.c).
#[unsafe(no_mangle)]
pub extern "C" fn engram_preload_is_ours(fd: c_int) -> c_int {
    crate::table::is_ours(fd) as c_int
}

/// Write all `n` bytes at `buf` to `fd` through the shim (for c/printf.c): `n`, or -1 with
/// errno (after a partial write, the bytes written).
///
/// # Safety
/// `buf` points to `n` readable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn engram_preload_write_all(
    fd: c_int,
    buf: *const c_char,
    n: size_t,
) -> ssize_t {
    crate::guarded!(-1, {
        let _op = crate::session::op();
        // SAFETY: as the caller promises.
        let data = unsafe { crate::ops::buf(buf as *const libc::c_void, n) };
        write_all(fd, data)?
    })
}

fn write_all(fd: c_int, data: &[u8]) -> Res<ssize_t> {
    let mut done = 0;
    while done < data.len() {
        match crate::xfer::write_any(fd, &data[done..], None) {
            Ok(0) => break,
            Ok(k) => done += k,
            Err(libc::EINTR) => continue,
            Err(_) if done > 0 => break,
            Err(e) => return Err(e),
        }
    }
    Ok(done as ssize_t)
}

unsafe extern "C" {
    fn engram_c_dprintf();
    fn engram_c_vdprintf();
    fn engram_c_dprintf_chk();
    fn engram_c_vdprintf_chk();
}

crate::c_trampolines! {
    dprintf => engram_c_dprintf,
    vdprintf => engram_c_vdprintf,
    __dprintf_chk => engram_c_dprintf_chk,
    __vdprintf_chk => engram_c_vdprintf_chk,
}

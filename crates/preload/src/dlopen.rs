//! `dlopen` of a library stored in the pool (`ctypes.CDLL("/mnt/engram/lib.so")`, a
//! Python extension module in a virtual environment made in the pool).
//!
//! The dynamic loader opens and maps files with its own system calls, so a pool path meant
//! nothing to it ("cannot open shared object file"). The shim copies such a library into a
//! memfd, once per version of the file (inode, size, modification time), and hands the
//! loader `/proc/self/fd/N` of the copy. The copy stays open: the loader recognises a
//! library it has loaded by the file's device and inode, so a second `dlopen` of the same
//! library finds it instead of loading it twice.
//!
//! The export is a naked tail jump into libc's `dlopen` with only the file replaced: the
//! loader takes its caller's return address to choose the namespace and the RUNPATH a bare
//! name is searched in, and it must see the program's caller there, not the shim.
//!
//! Not covered: the libraries a loaded library needs (`DT_NEEDED`) found in pool
//! directories through `LD_LIBRARY_PATH` or a RUNPATH, and `dlmopen`; the loader looks
//! those up itself.

use crate::util::{Res, errno};
use libc::{c_char, c_int, c_void};
use std::ffi::{CStr, CString};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

/// libc's `dlopen`, which the trampoline jumps to (looked up by `file_for_loader`).
static REAL_DLOPEN: AtomicUsize = AtomicUsize::new(0);

/// The version of a pool file a copy was made from.
#[derive(PartialEq, Eq)]
struct Version {
    ino: u64,
    size: i64,
    mtime: (i64, i64),
}

/// The copies made so far, with their `/proc/self/fd/N` paths (kept for the process's life).
static COPIES: Mutex<Vec<(Version, CString)>> = Mutex::new(Vec::new());

/// `dlopen(file, mode)`: libc's, with `file` replaced by its copy when it is a pool path.
///
/// # Safety
/// As libc's: `file` is null or a valid C string.
#[cfg(target_arch = "x86_64")]
#[unsafe(naked)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dlopen(file: *const c_char, mode: c_int) -> *mut c_void {
    // The arguments are kept across the call (two pushes and 8 bytes keep the stack 16-byte
    // aligned), then the jump leaves the caller's return address where libc looks for it.
    core::arch::naked_asm!(
        "push rsi",
        "push rdi",
        "sub rsp, 8",
        "call {file_for_loader}",
        "add rsp, 8",
        "pop rdi",
        "pop rsi",
        "mov rdi, rax",
        "jmp qword ptr [rip + {real}]",
        file_for_loader = sym file_for_loader,
        real = sym REAL_DLOPEN,
    );
}

/// The file the loader is to open for `file`: its copy when it is a library in the pool,
/// else `file` itself (also when copying failed: the loader then reports the path as it
/// would without the shim). Makes sure `REAL_DLOPEN` is known.
extern "C" fn file_for_loader(file: *const c_char) -> *const c_char {
    if REAL_DLOPEN.load(Ordering::Acquire) == 0 {
        REAL_DLOPEN.store(crate::real::lookup(b"dlopen\0"), Ordering::Release);
    }
    // SAFETY: the caller's C string, or null.
    if file.is_null() || !unsafe { CStr::from_ptr(file) }.to_bytes().contains(&b'/') {
        // A bare name is searched by the loader in real directories.
        return file;
    }
    let saved = errno();
    let copy = crate::util::guard(None, || {
        // SAFETY: the caller's C string.
        if !unsafe { crate::route::is_ours(file) } {
            return Ok(None);
        }
        // SAFETY: as above.
        copy_of(unsafe { CStr::from_ptr(file) }).map(Some)
    });
    crate::util::set_errno(saved);
    copy.unwrap_or(file)
}

/// The `/proc/self/fd/N` path of the copy of the pool library at `path`, made now unless
/// this version of it was copied before.
fn copy_of(path: &CStr) -> Res<*const c_char> {
    // Under the operation guard, as every call of the shim: a fork waits, so no child starts
    // with the copies' lock held by a thread it does not have.
    let _op = crate::session::op();
    // O_NONBLOCK: a FIFO of the pool does not wait for a writer; it is refused below, not
    // being a regular file.
    let flags = libc::O_RDONLY | libc::O_CLOEXEC | libc::O_NONBLOCK;
    // SAFETY: the shim's own open of a pool path.
    let fd = unsafe { crate::open::open(path.as_ptr(), flags, 0) };
    if fd < 0 {
        return Err(errno());
    }
    let copied = copy_open(fd);
    // SAFETY: closing the descriptor opened above.
    unsafe { crate::open::close(fd) };
    copied
}

fn copy_open(fd: c_int) -> Res<*const c_char> {
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: the shim's own fstat into a local buffer.
    if unsafe { crate::stat::fstat64(fd, st.as_mut_ptr()) } != 0 {
        return Err(errno());
    }
    // SAFETY: fstat succeeded.
    let st = unsafe { st.assume_init() };
    if st.st_mode & libc::S_IFMT != libc::S_IFREG {
        return Err(libc::EACCES);
    }
    let version = Version {
        ino: st.st_ino,
        size: st.st_size,
        mtime: (st.st_mtime, st.st_mtime_nsec),
    };
    let mut copies = COPIES.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, p)) = copies.iter().find(|(v, _)| *v == version) {
        return Ok(p.as_ptr());
    }
    // Above the program's numbers, and kept from its closefrom and close_range, as the
    // shim's other descriptors.
    let memfd = crate::util::move_high(crate::exec::copy_to_memfd(fd, c"engram-lib", true)?);
    let p = CString::new(format!("/proc/self/fd/{memfd}")).expect("digits");
    let ptr = p.as_ptr();
    // The CString's buffer does not move when the vector grows.
    copies.push((version, p));
    Ok(ptr)
}

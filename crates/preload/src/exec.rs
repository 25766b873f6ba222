//! Programs stored in the pool, and execl/execlp/execle (c/execl.c), which glibc runs
//! through its own internal execve. The kernel executes only files it can see, so a program
//! under the prefix (or a descriptor of ours) is copied into a memfd, which the kernel can
//! execute (`fexecve`, or `/proc/self/fd/N` for `posix_spawn`). Executing takes the pool
//! file's execute permission (EACCES without it, as for a directory); set-id bits are not
//! honoured. A script named by a path runs its interpreter (`shebang`); one run by its
//! descriptor (`fexecve`) keeps its memfd open in the new program, where its interpreter
//! reads it as `/dev/fd/N` (the kernel runs it so); a binary's memfd closes on exec.

use crate::util::{Res, errno};
use libc::c_int;

/// A program's copy, closed on drop (after an exec that failed, or once spawned).
pub struct Program(c_int);

impl Drop for Program {
    fn drop(&mut self) {
        // SAFETY: the memfd this object owns.
        unsafe { crate::real::close(self.0) };
    }
}

impl Program {
    /// The copy of the program open as `fd` (a descriptor of ours). A descriptor open for
    /// writing gives ETXTBSY, as the kernel refuses to run a file open for writing.
    pub fn of_fd(fd: c_int) -> Res<Program> {
        if crate::table::get(fd).is_some_and(|of| of.writable()) {
            return Err(libc::ETXTBSY);
        }
        Program::copy(fd)
    }

    pub fn fd(&self) -> c_int {
        self.0
    }

    /// `/proc/self/fd/N` of the copy, for calls that take a path.
    pub fn proc_path(&self) -> std::ffi::CString {
        std::ffi::CString::new(format!("/proc/self/fd/{}", self.0)).expect("digits")
    }

    /// The copy of the pool program open as `fd`, which must be an executable regular file.
    pub(crate) fn copy(fd: c_int) -> Res<Program> {
        let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
        // SAFETY: the shim's own fstat into a local buffer, then its pread into local ones.
        unsafe {
            if crate::stat::fstat64(fd, st.as_mut_ptr()) != 0 {
                return Err(errno());
            }
            let st = st.assume_init();
            if st.st_mode & libc::S_IFMT != libc::S_IFREG || st.st_mode & 0o111 == 0 {
                return Err(libc::EACCES);
            }
            let mut head = [0u8; 2];
            let script =
                crate::io::pread64(fd, head.as_mut_ptr().cast(), 2, 0) == 2 && head == *b"#!";
            Program::copied(fd, script)
        }
    }

    /// The copy of `fd`, a program already checked and looked at (`shebang`): a script's
    /// stays open across exec, for its interpreter to read as `/dev/fd/N`.
    pub(crate) fn copied(fd: c_int, script: bool) -> Res<Program> {
        copy_to_memfd(fd, c"engram-exec", !script).map(Program)
    }
}

/// A new memfd named `name` holding the bytes of `fd` (a descriptor of ours), close-on-exec
/// if `cloexec`.
pub fn copy_to_memfd(fd: c_int, name: &std::ffi::CStr, cloexec: bool) -> Res<c_int> {
    let flags = if cloexec { libc::MFD_CLOEXEC } else { 0 };
    // SAFETY: memfd_create with a NUL-terminated name.
    let memfd = unsafe { libc::memfd_create(name.as_ptr(), flags) };
    if memfd < 0 {
        return Err(errno());
    }
    let copied = (|| {
        let mut buf = vec![0u8; 1 << 20];
        let mut off = 0i64;
        loop {
            // SAFETY: the shim's own pread into a local buffer.
            let n = unsafe { crate::io::pread64(fd, buf.as_mut_ptr().cast(), buf.len(), off) };
            if n < 0 {
                return Err(errno());
            }
            if n == 0 {
                return Ok(());
            }
            let mut done = 0usize;
            while done < n as usize {
                // SAFETY: writing bytes of a local buffer to our memfd.
                let w = unsafe {
                    crate::real::write(memfd, buf[done..].as_ptr().cast(), n as usize - done)
                };
                if w < 0 {
                    return Err(errno());
                }
                done += w as usize;
            }
            off += n as i64;
        }
    })();
    match copied {
        Ok(()) => Ok(memfd),
        Err(e) => {
            // SAFETY: closing the memfd made above.
            unsafe { crate::real::close(memfd) };
            Err(e)
        }
    }
}

unsafe extern "C" {
    fn engram_c_execl();
    fn engram_c_execlp();
    fn engram_c_execle();
}

crate::c_trampolines! {
    execl => engram_c_execl,
    execlp => engram_c_execlp,
    execle => engram_c_execle,
}

//! The real libc functions, found once with `dlsym(RTLD_NEXT, …)`: the shim's own exports
//! shadow them, so every call the shim forwards or makes for itself goes through here.
//!
//! Each wrapper loads a cached pointer (one relaxed atomic load); the first call looks the
//! symbol up. Nothing here allocates or locks, so it is safe after `fork`, in a `vfork`
//! child and in signal handlers.

#![allow(clippy::missing_safety_doc, clippy::too_many_arguments)]

use libc::{
    DIR, FILE, c_char, c_int, c_long, c_uint, c_ulong, c_void, dirent64, iovec, mode_t, off_t,
    pid_t, size_t, ssize_t, timespec, wchar_t,
};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Find `name` (NUL-terminated) in the objects loaded after this one.
pub(crate) fn lookup(name: &'static [u8]) -> usize {
    // SAFETY: dlsym with a NUL-terminated name; RTLD_NEXT skips this library.
    let mut p = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr() as *const c_char) };
    if p.is_null() {
        // SAFETY: as above, searching the global scope instead.
        p = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr() as *const c_char) };
    }
    if p.is_null() {
        let msg = b"engram-preload: a libc function is missing; aborting\n";
        // SAFETY: the write system call itself (not `syscall`, which is the shim's and
        // would look up libc's functions again) with a static message, to stderr.
        #[cfg(target_arch = "x86_64")]
        unsafe {
            std::arch::asm!(
                "syscall",
                inlateout("rax") libc::SYS_write => _,
                in("rdi") 2,
                in("rsi") msg.as_ptr(),
                in("rdx") msg.len(),
                lateout("rcx") _,
                lateout("r11") _,
                options(nostack),
            );
        }
        std::process::abort();
    }
    p as usize
}

/// The address `ptr` caches, looked up by `name` on first use.
#[inline]
fn cached(ptr: &AtomicUsize, name: &'static [u8]) -> usize {
    let mut p = ptr.load(Ordering::Relaxed);
    if p == 0 {
        p = lookup(name);
        ptr.store(p, Ordering::Relaxed);
    }
    p
}

macro_rules! reals {
    ($( fn $name:ident ( $($arg:ident : $ty:ty),* ) $([ $va:ident : $vty:ty ])? -> $ret:ty ; )*) => {
        $(
            #[inline]
            pub unsafe fn $name($($arg: $ty),* $(, $va: $vty)?) -> $ret {
                static PTR: AtomicUsize = AtomicUsize::new(0);
                let p = cached(&PTR, concat!(stringify!($name), "\0").as_bytes());
                reals!(@call p, ($($arg: $ty),*) $([ $va: $vty ])? -> $ret)
            }
        )*
    };
    (@call $p:ident, ($($arg:ident : $ty:ty),*) -> $ret:ty) => {{
        // SAFETY: `p` is the address of the libc function of this name and signature.
        let f: unsafe extern "C" fn($($ty),*) -> $ret = unsafe { std::mem::transmute($p) };
        // SAFETY: the caller passes what the C function expects.
        unsafe { f($($arg),*) }
    }};
    (@call $p:ident, ($($arg:ident : $ty:ty),*) [ $va:ident : $vty:ty ] -> $ret:ty) => {{
        // SAFETY: `p` is the address of the variadic libc function of this name.
        let f: unsafe extern "C" fn($($ty),* , ...) -> $ret = unsafe { std::mem::transmute($p) };
        // SAFETY: the caller passes what the C function expects.
        unsafe { f($($arg),* , $va) }
    }};
}

reals! {
    fn open(path: *const c_char, flags: c_int) [mode: c_uint] -> c_int;
    fn open64(path: *const c_char, flags: c_int) [mode: c_uint] -> c_int;
    fn openat(dirfd: c_int, path: *const c_char, flags: c_int) [mode: c_uint] -> c_int;
    fn openat64(dirfd: c_int, path: *const c_char, flags: c_int) [mode: c_uint] -> c_int;
    fn creat(path: *const c_char, mode: mode_t) -> c_int;
    fn creat64(path: *const c_char, mode: mode_t) -> c_int;
    fn __open_2(path: *const c_char, flags: c_int) -> c_int;
    fn __open64_2(path: *const c_char, flags: c_int) -> c_int;
    fn __openat_2(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int;
    fn __openat64_2(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int;
    fn close(fd: c_int) -> c_int;
    fn close_range(first: c_uint, last: c_uint, flags: c_int) -> c_int;
    fn closefrom(low: c_int) -> ();
    fn read(fd: c_int, buf: *mut c_void, n: size_t) -> ssize_t;
    fn write(fd: c_int, buf: *const c_void, n: size_t) -> ssize_t;
    fn pread(fd: c_int, buf: *mut c_void, n: size_t, off: off_t) -> ssize_t;
    fn pread64(fd: c_int, buf: *mut c_void, n: size_t, off: off_t) -> ssize_t;
    fn pwrite(fd: c_int, buf: *const c_void, n: size_t, off: off_t) -> ssize_t;
    fn pwrite64(fd: c_int, buf: *const c_void, n: size_t, off: off_t) -> ssize_t;
    fn readv(fd: c_int, iov: *const iovec, cnt: c_int) -> ssize_t;
    fn writev(fd: c_int, iov: *const iovec, cnt: c_int) -> ssize_t;
    fn preadv(fd: c_int, iov: *const iovec, cnt: c_int, off: off_t) -> ssize_t;
    fn preadv64(fd: c_int, iov: *const iovec, cnt: c_int, off: off_t) -> ssize_t;
    fn pwritev(fd: c_int, iov: *const iovec, cnt: c_int, off: off_t) -> ssize_t;
    fn pwritev64(fd: c_int, iov: *const iovec, cnt: c_int, off: off_t) -> ssize_t;
    fn preadv2(fd: c_int, iov: *const iovec, cnt: c_int, off: off_t, fl: c_int) -> ssize_t;
    fn preadv64v2(fd: c_int, iov: *const iovec, cnt: c_int, off: off_t, fl: c_int) -> ssize_t;
    fn pwritev2(fd: c_int, iov: *const iovec, cnt: c_int, off: off_t, fl: c_int) -> ssize_t;
    fn pwritev64v2(fd: c_int, iov: *const iovec, cnt: c_int, off: off_t, fl: c_int) -> ssize_t;
    fn lseek(fd: c_int, off: off_t, whence: c_int) -> off_t;
    fn lseek64(fd: c_int, off: off_t, whence: c_int) -> off_t;
    fn fsync(fd: c_int) -> c_int;
    fn fdatasync(fd: c_int) -> c_int;
    fn syncfs(fd: c_int) -> c_int;
    fn sync_file_range(fd: c_int, off: off_t, n: off_t, flags: c_uint) -> c_int;
    fn ftruncate(fd: c_int, len: off_t) -> c_int;
    fn ftruncate64(fd: c_int, len: off_t) -> c_int;
    fn truncate(path: *const c_char, len: off_t) -> c_int;
    fn truncate64(path: *const c_char, len: off_t) -> c_int;
    fn fallocate(fd: c_int, mode: c_int, off: off_t, len: off_t) -> c_int;
    fn fallocate64(fd: c_int, mode: c_int, off: off_t, len: off_t) -> c_int;
    fn posix_fallocate(fd: c_int, off: off_t, len: off_t) -> c_int;
    fn posix_fallocate64(fd: c_int, off: off_t, len: off_t) -> c_int;
    fn posix_fadvise(fd: c_int, off: off_t, len: off_t, advice: c_int) -> c_int;
    fn posix_fadvise64(fd: c_int, off: off_t, len: off_t, advice: c_int) -> c_int;
    fn readahead(fd: c_int, off: off_t, n: size_t) -> ssize_t;
    fn copy_file_range(fin: c_int, oin: *mut off_t, fout: c_int, oout: *mut off_t, n: size_t, fl: c_uint) -> ssize_t;
    fn sendfile(out: c_int, inp: c_int, off: *mut off_t, n: size_t) -> ssize_t;
    fn sendfile64(out: c_int, inp: c_int, off: *mut off_t, n: size_t) -> ssize_t;
    fn splice(fin: c_int, oin: *mut off_t, fout: c_int, oout: *mut off_t, n: size_t, fl: c_uint) -> ssize_t;
    fn stat(path: *const c_char, st: *mut libc::stat) -> c_int;
    fn stat64(path: *const c_char, st: *mut libc::stat) -> c_int;
    fn lstat(path: *const c_char, st: *mut libc::stat) -> c_int;
    fn lstat64(path: *const c_char, st: *mut libc::stat) -> c_int;
    fn fstat(fd: c_int, st: *mut libc::stat) -> c_int;
    fn fstat64(fd: c_int, st: *mut libc::stat) -> c_int;
    fn fstatat(dirfd: c_int, path: *const c_char, st: *mut libc::stat, flags: c_int) -> c_int;
    fn fstatat64(dirfd: c_int, path: *const c_char, st: *mut libc::stat, flags: c_int) -> c_int;
    fn __xstat(ver: c_int, path: *const c_char, st: *mut libc::stat) -> c_int;
    fn __xstat64(ver: c_int, path: *const c_char, st: *mut libc::stat) -> c_int;
    fn __lxstat(ver: c_int, path: *const c_char, st: *mut libc::stat) -> c_int;
    fn __lxstat64(ver: c_int, path: *const c_char, st: *mut libc::stat) -> c_int;
    fn __fxstat(ver: c_int, fd: c_int, st: *mut libc::stat) -> c_int;
    fn __fxstat64(ver: c_int, fd: c_int, st: *mut libc::stat) -> c_int;
    fn __fxstatat(ver: c_int, dirfd: c_int, path: *const c_char, st: *mut libc::stat, flags: c_int) -> c_int;
    fn __fxstatat64(ver: c_int, dirfd: c_int, path: *const c_char, st: *mut libc::stat, flags: c_int) -> c_int;
    fn statx(dirfd: c_int, path: *const c_char, flags: c_int, mask: c_uint, st: *mut libc::statx) -> c_int;
    fn statfs(path: *const c_char, st: *mut libc::statfs) -> c_int;
    fn statfs64(path: *const c_char, st: *mut libc::statfs) -> c_int;
    fn fstatfs(fd: c_int, st: *mut libc::statfs) -> c_int;
    fn fstatfs64(fd: c_int, st: *mut libc::statfs) -> c_int;
    fn statvfs(path: *const c_char, st: *mut libc::statvfs) -> c_int;
    fn statvfs64(path: *const c_char, st: *mut libc::statvfs) -> c_int;
    fn fstatvfs(fd: c_int, st: *mut libc::statvfs) -> c_int;
    fn fstatvfs64(fd: c_int, st: *mut libc::statvfs) -> c_int;
    fn pathconf(path: *const c_char, name: c_int) -> c_long;
    fn fpathconf(fd: c_int, name: c_int) -> c_long;
    fn access(path: *const c_char, mode: c_int) -> c_int;
    fn faccessat(dirfd: c_int, path: *const c_char, mode: c_int, flags: c_int) -> c_int;
    fn euidaccess(path: *const c_char, mode: c_int) -> c_int;
    fn eaccess(path: *const c_char, mode: c_int) -> c_int;
    fn mkdir(path: *const c_char, mode: mode_t) -> c_int;
    fn mkstemp(template: *mut c_char) -> c_int;
    fn mkstemp64(template: *mut c_char) -> c_int;
    fn mkostemp(template: *mut c_char, flags: c_int) -> c_int;
    fn mkostemp64(template: *mut c_char, flags: c_int) -> c_int;
    fn mkstemps(template: *mut c_char, suffix: c_int) -> c_int;
    fn mkstemps64(template: *mut c_char, suffix: c_int) -> c_int;
    fn mkostemps(template: *mut c_char, suffix: c_int, flags: c_int) -> c_int;
    fn mkostemps64(template: *mut c_char, suffix: c_int, flags: c_int) -> c_int;
    fn mkdtemp(template: *mut c_char) -> *mut c_char;
    fn mktemp(template: *mut c_char) -> *mut c_char;
    fn mkdirat(dirfd: c_int, path: *const c_char, mode: mode_t) -> c_int;
    fn rmdir(path: *const c_char) -> c_int;
    fn unlink(path: *const c_char) -> c_int;
    fn unlinkat(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int;
    fn remove(path: *const c_char) -> c_int;
    fn rename(from: *const c_char, to: *const c_char) -> c_int;
    fn renameat(fd1: c_int, from: *const c_char, fd2: c_int, to: *const c_char) -> c_int;
    fn renameat2(fd1: c_int, from: *const c_char, fd2: c_int, to: *const c_char, flags: c_uint) -> c_int;
    fn link(from: *const c_char, to: *const c_char) -> c_int;
    fn linkat(fd1: c_int, from: *const c_char, fd2: c_int, to: *const c_char, flags: c_int) -> c_int;
    fn symlink(target: *const c_char, path: *const c_char) -> c_int;
    fn symlinkat(target: *const c_char, dirfd: c_int, path: *const c_char) -> c_int;
    fn readlink(path: *const c_char, buf: *mut c_char, n: size_t) -> ssize_t;
    fn readlinkat(dirfd: c_int, path: *const c_char, buf: *mut c_char, n: size_t) -> ssize_t;
    fn chmod(path: *const c_char, mode: mode_t) -> c_int;
    fn fchmod(fd: c_int, mode: mode_t) -> c_int;
    fn fchmodat(dirfd: c_int, path: *const c_char, mode: mode_t, flags: c_int) -> c_int;
    fn lchmod(path: *const c_char, mode: mode_t) -> c_int;
    fn chown(path: *const c_char, uid: libc::uid_t, gid: libc::gid_t) -> c_int;
    fn fchown(fd: c_int, uid: libc::uid_t, gid: libc::gid_t) -> c_int;
    fn lchown(path: *const c_char, uid: libc::uid_t, gid: libc::gid_t) -> c_int;
    fn fchownat(dirfd: c_int, path: *const c_char, uid: libc::uid_t, gid: libc::gid_t, flags: c_int) -> c_int;
    fn utime(path: *const c_char, t: *const libc::utimbuf) -> c_int;
    fn utimes(path: *const c_char, t: *const libc::timeval) -> c_int;
    fn lutimes(path: *const c_char, t: *const libc::timeval) -> c_int;
    fn futimes(fd: c_int, t: *const libc::timeval) -> c_int;
    fn futimesat(dirfd: c_int, path: *const c_char, t: *const libc::timeval) -> c_int;
    fn utimensat(dirfd: c_int, path: *const c_char, t: *const timespec, flags: c_int) -> c_int;
    fn futimens(fd: c_int, t: *const timespec) -> c_int;
    fn mknod(path: *const c_char, mode: mode_t, dev: libc::dev_t) -> c_int;
    fn mknodat(dirfd: c_int, path: *const c_char, mode: mode_t, dev: libc::dev_t) -> c_int;
    fn mkfifo(path: *const c_char, mode: mode_t) -> c_int;
    fn mkfifoat(dirfd: c_int, path: *const c_char, mode: mode_t) -> c_int;
    fn chdir(path: *const c_char) -> c_int;
    fn fchdir(fd: c_int) -> c_int;
    fn getcwd(buf: *mut c_char, n: size_t) -> *mut c_char;
    fn get_current_dir_name() -> *mut c_char;
    fn getwd(buf: *mut c_char) -> *mut c_char;
    fn realpath(path: *const c_char, out: *mut c_char) -> *mut c_char;
    fn canonicalize_file_name(path: *const c_char) -> *mut c_char;
    fn opendir(path: *const c_char) -> *mut DIR;
    fn fdopendir(fd: c_int) -> *mut DIR;
    fn readdir(d: *mut DIR) -> *mut dirent64;
    fn readdir64(d: *mut DIR) -> *mut dirent64;
    fn readdir_r(d: *mut DIR, e: *mut dirent64, r: *mut *mut dirent64) -> c_int;
    fn readdir64_r(d: *mut DIR, e: *mut dirent64, r: *mut *mut dirent64) -> c_int;
    fn rewinddir(d: *mut DIR) -> ();
    fn seekdir(d: *mut DIR, pos: c_long) -> ();
    fn telldir(d: *mut DIR) -> c_long;
    fn closedir(d: *mut DIR) -> c_int;
    fn dirfd(d: *mut DIR) -> c_int;
    fn getdents64(fd: c_int, buf: *mut c_void, n: size_t) -> ssize_t;
    fn scandir(path: *const c_char, list: *mut *mut *mut dirent64, filter: *const c_void, cmp: *const c_void) -> c_int;
    fn scandir64(path: *const c_char, list: *mut *mut *mut dirent64, filter: *const c_void, cmp: *const c_void) -> c_int;
    fn scandirat(dirfd: c_int, path: *const c_char, list: *mut *mut *mut dirent64, filter: *const c_void, cmp: *const c_void) -> c_int;
    fn scandirat64(dirfd: c_int, path: *const c_char, list: *mut *mut *mut dirent64, filter: *const c_void, cmp: *const c_void) -> c_int;
    fn nftw(dir: *const c_char, f: *const c_void, nopenfd: c_int, flags: c_int) -> c_int;
    fn nftw64(dir: *const c_char, f: *const c_void, nopenfd: c_int, flags: c_int) -> c_int;
    fn ftw(dir: *const c_char, f: *const c_void, nopenfd: c_int) -> c_int;
    fn ftw64(dir: *const c_char, f: *const c_void, nopenfd: c_int) -> c_int;
    fn glob(pattern: *const c_char, flags: c_int, errfunc: *const c_void, pglob: *mut c_void) -> c_int;
    fn glob64(pattern: *const c_char, flags: c_int, errfunc: *const c_void, pglob: *mut c_void) -> c_int;
    fn fcntl(fd: c_int, cmd: c_int) [arg: c_ulong] -> c_int;
    fn fcntl64(fd: c_int, cmd: c_int) [arg: c_ulong] -> c_int;
    fn umask(mask: mode_t) -> mode_t;
    fn ioctl(fd: c_int, req: c_ulong) [arg: c_ulong] -> c_int;
    fn flock(fd: c_int, op: c_int) -> c_int;
    fn lockf(fd: c_int, cmd: c_int, len: off_t) -> c_int;
    fn lockf64(fd: c_int, cmd: c_int, len: off_t) -> c_int;
    fn posix_spawn_file_actions_init(fa: *mut c_void) -> c_int;
    fn posix_spawn_file_actions_destroy(fa: *mut c_void) -> c_int;
    fn posix_spawn_file_actions_addopen(fa: *mut c_void, fd: c_int, path: *const c_char, oflag: c_int, mode: mode_t) -> c_int;
    fn posix_spawn_file_actions_addclose(fa: *mut c_void, fd: c_int) -> c_int;
    fn posix_spawn_file_actions_adddup2(fa: *mut c_void, fd: c_int, newfd: c_int) -> c_int;
    fn posix_spawn_file_actions_addchdir_np(fa: *mut c_void, path: *const c_char) -> c_int;
    fn posix_spawn_file_actions_addfchdir_np(fa: *mut c_void, fd: c_int) -> c_int;
    fn posix_spawn_file_actions_addclosefrom_np(fa: *mut c_void, from: c_int) -> c_int;
    fn posix_spawn_file_actions_addtcsetpgrp_np(fa: *mut c_void, fd: c_int) -> c_int;
    fn dup(fd: c_int) -> c_int;
    fn dup2(old: c_int, new: c_int) -> c_int;
    fn dup3(old: c_int, new: c_int, flags: c_int) -> c_int;
    fn mmap(addr: *mut c_void, len: size_t, prot: c_int, flags: c_int, fd: c_int, off: off_t) -> *mut c_void;
    fn mmap64(addr: *mut c_void, len: size_t, prot: c_int, flags: c_int, fd: c_int, off: off_t) -> *mut c_void;
    fn munmap(addr: *mut c_void, len: size_t) -> c_int;
    fn msync(addr: *mut c_void, len: size_t, flags: c_int) -> c_int;
    fn mprotect(addr: *mut c_void, len: size_t, prot: c_int) -> c_int;
    fn mremap(addr: *mut c_void, old: size_t, new: size_t, flags: c_int) [naddr: *mut c_void] -> *mut c_void;
    fn fopen(path: *const c_char, mode: *const c_char) -> *mut FILE;
    fn fopen64(path: *const c_char, mode: *const c_char) -> *mut FILE;
    fn fdopen(fd: c_int, mode: *const c_char) -> *mut FILE;
    fn freopen(path: *const c_char, mode: *const c_char, f: *mut FILE) -> *mut FILE;
    fn freopen64(path: *const c_char, mode: *const c_char, f: *mut FILE) -> *mut FILE;
    fn fwide(f: *mut FILE, mode: c_int) -> c_int;
    fn perror(s: *const c_char) -> ();
    fn fgetwc(f: *mut FILE) -> c_uint;
    fn getwc(f: *mut FILE) -> c_uint;
    fn fgetwc_unlocked(f: *mut FILE) -> c_uint;
    fn getwc_unlocked(f: *mut FILE) -> c_uint;
    fn __wuflow(f: *mut FILE) -> c_uint;
    fn getwchar() -> c_uint;
    fn getwchar_unlocked() -> c_uint;
    fn fgetws(s: *mut wchar_t, n: c_int, f: *mut FILE) -> *mut wchar_t;
    fn fgetws_unlocked(s: *mut wchar_t, n: c_int, f: *mut FILE) -> *mut wchar_t;
    fn __fgetws_chk(s: *mut wchar_t, size: size_t, n: c_int, f: *mut FILE) -> *mut wchar_t;
    fn __fgetws_unlocked_chk(s: *mut wchar_t, size: size_t, n: c_int, f: *mut FILE) -> *mut wchar_t;
    fn ungetwc(c: c_uint, f: *mut FILE) -> c_uint;
    fn fputwc(c: wchar_t, f: *mut FILE) -> c_uint;
    fn putwc(c: wchar_t, f: *mut FILE) -> c_uint;
    fn fputwc_unlocked(c: wchar_t, f: *mut FILE) -> c_uint;
    fn putwc_unlocked(c: wchar_t, f: *mut FILE) -> c_uint;
    fn __woverflow(f: *mut FILE, c: c_uint) -> c_uint;
    fn putwchar(c: wchar_t) -> c_uint;
    fn putwchar_unlocked(c: wchar_t) -> c_uint;
    fn fputws(s: *const wchar_t, f: *mut FILE) -> c_int;
    fn fputws_unlocked(s: *const wchar_t, f: *mut FILE) -> c_int;
    fn fork() -> pid_t;
    fn inotify_add_watch(fd: c_int, path: *const c_char, mask: u32) -> c_int;
    fn setuid(uid: libc::uid_t) -> c_int;
    fn setgid(gid: libc::gid_t) -> c_int;
    fn seteuid(uid: libc::uid_t) -> c_int;
    fn setegid(gid: libc::gid_t) -> c_int;
    fn setreuid(r: libc::uid_t, e: libc::uid_t) -> c_int;
    fn setregid(r: libc::gid_t, e: libc::gid_t) -> c_int;
    fn setresuid(r: libc::uid_t, e: libc::uid_t, s: libc::uid_t) -> c_int;
    fn setresgid(r: libc::gid_t, e: libc::gid_t, s: libc::gid_t) -> c_int;
    fn setgroups(n: size_t, list: *const libc::gid_t) -> c_int;
    fn wait(status: *mut c_int) -> pid_t;
    fn waitpid(pid: pid_t, status: *mut c_int, options: c_int) -> pid_t;
    fn wait3(status: *mut c_int, options: c_int, usage: *mut c_void) -> pid_t;
    fn wait4(pid: pid_t, status: *mut c_int, options: c_int, usage: *mut c_void) -> pid_t;
    fn waitid(idtype: c_uint, id: c_uint, info: *mut libc::siginfo_t, options: c_int) -> c_int;
    fn execvpe(file: *const c_char, argv: *const *const c_char, envp: *const *const c_char) -> c_int;
    fn execveat(dirfd: c_int, path: *const c_char, argv: *const *const c_char, envp: *const *const c_char, flags: c_int) -> c_int;
    fn posix_spawn(pid: *mut pid_t, path: *const c_char, fa: *const c_void, at: *const c_void, argv: *const *mut c_char, envp: *const *mut c_char) -> c_int;
    fn posix_spawnp(pid: *mut pid_t, path: *const c_char, fa: *const c_void, at: *const c_void, argv: *const *mut c_char, envp: *const *mut c_char) -> c_int;
    fn getxattr(path: *const c_char, name: *const c_char, v: *mut c_void, n: size_t) -> ssize_t;
    fn lgetxattr(path: *const c_char, name: *const c_char, v: *mut c_void, n: size_t) -> ssize_t;
    fn fgetxattr(fd: c_int, name: *const c_char, v: *mut c_void, n: size_t) -> ssize_t;
    fn setxattr(path: *const c_char, name: *const c_char, v: *const c_void, n: size_t, fl: c_int) -> c_int;
    fn lsetxattr(path: *const c_char, name: *const c_char, v: *const c_void, n: size_t, fl: c_int) -> c_int;
    fn fsetxattr(fd: c_int, name: *const c_char, v: *const c_void, n: size_t, fl: c_int) -> c_int;
    fn listxattr(path: *const c_char, list: *mut c_char, n: size_t) -> ssize_t;
    fn llistxattr(path: *const c_char, list: *mut c_char, n: size_t) -> ssize_t;
    fn flistxattr(fd: c_int, list: *mut c_char, n: size_t) -> ssize_t;
    fn removexattr(path: *const c_char, name: *const c_char) -> c_int;
    fn lremovexattr(path: *const c_char, name: *const c_char) -> c_int;
    fn fremovexattr(fd: c_int, name: *const c_char) -> c_int;
}

/// glibc's variadic syscall(2) with the six arguments the kernel takes at most.
pub unsafe fn syscall6(n: libc::c_long, a: [libc::c_long; 6]) -> libc::c_long {
    static PTR: AtomicUsize = AtomicUsize::new(0);
    let mut p = PTR.load(Ordering::Relaxed);
    if p == 0 {
        p = lookup(b"syscall\0");
        PTR.store(p, Ordering::Relaxed);
    }
    // SAFETY: `p` is glibc's syscall, variadic after the number.
    let f: unsafe extern "C" fn(libc::c_long, ...) -> libc::c_long =
        unsafe { std::mem::transmute(p) };
    // SAFETY: the caller passes what the system call expects.
    unsafe { f(n, a[0], a[1], a[2], a[3], a[4], a[5]) }
}

// execve and fexecve are mostly first called in a forked child, which would look them up
// (dlsym, and the page faults of its first run in the child) once per child: `resolve_exec`
// looks them up in the parent before it forks, and every child inherits the answer.
static EXECVE: AtomicUsize = AtomicUsize::new(0);
static FEXECVE: AtomicUsize = AtomicUsize::new(0);

pub fn resolve_exec() {
    cached(&EXECVE, b"execve\0");
    cached(&FEXECVE, b"fexecve\0");
}

pub unsafe fn execve(
    path: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    let p = cached(&EXECVE, b"execve\0");
    reals!(@call p, (path: *const c_char, argv: *const *const c_char, envp: *const *const c_char) -> c_int)
}

pub unsafe fn fexecve(fd: c_int, argv: *const *const c_char, envp: *const *const c_char) -> c_int {
    let p = cached(&FEXECVE, b"fexecve\0");
    reals!(@call p, (fd: c_int, argv: *const *const c_char, envp: *const *const c_char) -> c_int)
}

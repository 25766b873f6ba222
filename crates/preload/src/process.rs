//! Processes: fork handlers (a child reconnects to the daemon on first use and reopens its
//! inherited descriptions), vfork run as fork (a vfork child would share the parent's table),
//! and exec: descriptors survive as memfds (see `desc`; they are published before fork and
//! posix_spawn), the virtual current directory as `ENGRAM_CWD` (`cwd_env`), what the new
//! image need not look for (`inherit`), and programs stored in the pool run from a copy
//! (`exec`).

use crate::exec::Program;
use crate::inherit::ExecEnv;
use crate::real;
use crate::shebang::{self, Launch};
use libc::{c_char, c_int, pid_t};
use std::ffi::CString;

// The fork handlers run inside the program's fork: a panic must not unwind into libc.

extern "C" fn prepare() {
    let _ = std::panic::catch_unwind(crate::session::before_fork);
}

extern "C" fn parent() {
    let _ = std::panic::catch_unwind(crate::session::after_fork_parent);
}

extern "C" fn child() {
    let _ = std::panic::catch_unwind(crate::session::after_fork_child);
}

pub fn register_fork_handlers() {
    // SAFETY: registering plain extern "C" handlers.
    unsafe { libc::pthread_atfork(Some(prepare), Some(parent), Some(child)) };
}

/// `passing_lock_fds` for an exec of this process, which ends its mappings without munmap:
/// shared writable ones are written back first.
fn replacing_image<T>(exec: impl FnOnce() -> T) -> T {
    crate::mmap::write_back_all();
    crate::inherit::passing_lock_fds(exec)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn vfork() -> pid_t {
    crate::guarded!(-1, {
        // SAFETY: fork is a valid implementation of vfork.
        unsafe { real::fork() }
    })
}

/// `envp` with ENGRAM_CWD replaced by this process's (or removed), and the marker that
/// nothing is inherited (`inherit`) set afresh.
///
/// # Safety
/// `envp` is null or a NULL-terminated array of C strings.
unsafe fn fixed_env(envp: *const *const c_char, own: &Option<CString>) -> ExecEnv {
    let mut v = Vec::new();
    if !envp.is_null() {
        let mut i = 0;
        loop {
            // SAFETY: walking the caller's NULL-terminated array.
            let e = unsafe { *envp.add(i) };
            if e.is_null() {
                break;
            }
            // SAFETY: each entry is a C string.
            let b = unsafe { crate::util::cbytes(e) };
            if !is_var(b, crate::cwd_env::VAR) && !crate::inherit::is_marker(b) {
                v.push(e);
            }
            i += 1;
        }
    }
    if let Some(c) = own {
        v.push(c.as_ptr());
    }
    ExecEnv::new(v, crate::inherit::entry_for_exec())
}

/// Whether the environment entry `entry` sets `name`.
pub fn is_var(entry: &[u8], name: &[u8]) -> bool {
    entry.starts_with(name) && entry.get(name.len()) == Some(&b'=')
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn execve(
    path: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    crate::guarded!(-1, {
        // SAFETY: the caller's path, arguments and environment.
        let launch = if unsafe { crate::route::is_ours(path) } {
            unsafe { shebang::launch(libc::AT_FDCWD, path, argv, envp, false) }?
        } else {
            None
        };
        let own = crate::cwd_env::entry();
        // SAFETY: the caller's environment array.
        let env = unsafe { fixed_env(envp, &own) };
        // SAFETY: the real execve with the caller's path and arguments, or what the pool
        // path launches.
        let r = replacing_image(|| unsafe {
            match &launch {
                Some(l) => launched(l, argv, env.as_ptr()),
                None => real::execve(path, argv, env.as_ptr()),
            }
        });
        if launch.is_none() && crate::util::errno() == libc::ENOENT {
            // A program in the pool reached through real symlinks: run by its name under
            // the prefix. Looked at only once the kernel failed.
            // SAFETY: the caller's path.
            if let Some(name) = unsafe { crate::reallinks::program_name(path) }? {
                // SAFETY: the pool path as a C string, the caller's arguments and
                // environment.
                let l =
                    unsafe { shebang::launch(libc::AT_FDCWD, name.as_ptr(), argv, envp, false) }?
                        .ok_or(libc::ENOENT)?;
                // SAFETY: what the pool path launches.
                return Ok(replacing_image(|| unsafe {
                    launched(&l, argv, env.as_ptr())
                }));
            }
            // A script outside the pool whose interpreter is in it, which the kernel could
            // not find: looked at only once the kernel failed, so other execs cost nothing.
            // SAFETY: the caller's path, arguments and environment.
            if let Ok(Some(l)) = unsafe { shebang::outside_script(path, argv, envp) } {
                // SAFETY: what the interpreter in the pool launches.
                return Ok(replacing_image(|| unsafe {
                    launched(&l, argv, env.as_ptr())
                }));
            }
            crate::util::set_errno(libc::ENOENT);
        }
        r
    })
}

/// Execute what a pool path launches: its binary's copy, or a script's interpreter.
///
/// # Safety
/// `argv` and `env` are what execve takes.
unsafe fn launched(l: &Launch, argv: *const *const c_char, env: *const *const c_char) -> c_int {
    // SAFETY: the launch's own arguments or the caller's.
    unsafe {
        match &l.program {
            Some(p) => real::fexecve(p.fd(), l.argv(argv), env),
            None => real::execve(l.path.as_ptr(), l.argv(argv), env),
        }
    }
}

unsafe extern "C" {
    static environ: *const *const c_char;
}

/// glibc's execv calls its own execve, not the exported one: the shim's, for programs in
/// the pool and the virtual current directory.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn execv(path: *const c_char, argv: *const *const c_char) -> c_int {
    // SAFETY: the caller's arguments and the process's environment.
    unsafe { execve(path, argv, environ) }
}

/// As `execv`, with glibc's search of PATH.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn execvp(file: *const c_char, argv: *const *const c_char) -> c_int {
    // SAFETY: as above.
    unsafe { execvpe(file, argv, environ) }
}

/// Run `file` with /bin/sh (`sh file args...`): glibc's execvpe does so for a file the
/// kernel does not recognise as a program.
///
/// # Safety
/// `file`, `argv` and `envp` are what execve takes.
unsafe fn exec_with_shell(
    file: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    let mut args: Vec<*const c_char> = vec![c"/bin/sh".as_ptr(), file];
    // SAFETY: the caller's NULL-terminated argv; its first entry is the program's name.
    unsafe {
        if !argv.is_null() && !(*argv).is_null() {
            let mut p = argv.add(1);
            while !(*p).is_null() {
                args.push(*p);
                p = p.add(1);
            }
        }
        args.push(std::ptr::null());
        execve(c"/bin/sh".as_ptr(), args.as_ptr(), envp)
    }
}

/// Whether `file` names a path (it holds a slash) rather than a program to find in PATH.
///
/// # Safety
/// `file` is null or a valid C string.
unsafe fn has_slash(file: *const c_char) -> bool {
    // SAFETY: the caller's C string.
    !file.is_null()
        && unsafe { std::ffi::CStr::from_ptr(file) }
            .to_bytes()
            .contains(&b'/')
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn execvpe(
    file: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    crate::guarded!(-1, {
        // SAFETY: the caller's file.
        if unsafe { has_slash(file) && crate::route::is_ours(file) } {
            // A path in the pool: no search; its copy runs (`execve`), and a file the kernel
            // cannot run (no `#!`) runs with /bin/sh, as glibc's execvpe does.
            // SAFETY: the caller's arguments.
            unsafe { execve(file, argv, envp) };
            if crate::util::errno() != libc::ENOEXEC {
                return Ok(-1);
            }
            // SAFETY: as above, through the shell.
            return Ok(unsafe { exec_with_shell(file, argv, envp) });
        }
        // SAFETY: the caller's file.
        if unsafe { !has_slash(file) }
            && let Some(dirs) = path_with_pool_dirs()
        {
            // SAFETY: the caller's arguments.
            return Ok(unsafe { search(file, argv, envp, &dirs) });
        }
        let own = crate::cwd_env::entry();
        // SAFETY: the caller's environment array.
        let env = unsafe { fixed_env(envp, &own) };
        // SAFETY: the real execvpe with the caller's file and arguments.
        let r = replacing_image(|| unsafe { real::execvpe(file, argv, env.as_ptr()) });
        // SAFETY: the caller's file.
        if crate::util::errno() == libc::ENOENT && unsafe { has_slash(file) } {
            // SAFETY: the caller's file.
            if let Some(name) = unsafe { crate::reallinks::program_name(file) }? {
                // SAFETY: the pool path, the caller's arguments.
                return Ok(unsafe { execvpe(name.as_ptr(), argv, envp) });
            }
            crate::util::set_errno(libc::ENOENT);
        }
        r
    })
}

/// PATH's directories, when one of them is in the pool: glibc's search would try it with
/// its own execve, which cannot run a program there. None otherwise (glibc searches).
fn path_with_pool_dirs() -> Option<Vec<Vec<u8>>> {
    let path = std::env::var_os("PATH")?;
    let dirs: Vec<Vec<u8>> = path
        .as_encoded_bytes()
        .split(|&b| b == b':')
        .map(|d| {
            if d.is_empty() {
                b".".to_vec()
            } else {
                d.to_vec()
            }
        })
        .collect();
    let in_pool = |d: &Vec<u8>| {
        CString::new(d.clone()).is_ok_and(|c| {
            // SAFETY: a C string of ours.
            unsafe { crate::route::is_ours(c.as_ptr()) }
        })
    };
    dirs.iter().any(in_pool).then_some(dirs)
}

/// glibc's execvpe search of `dirs` for `file`, each candidate through the shim's execve:
/// a file the kernel cannot run (no `#!`) runs with /bin/sh, a directory that refuses
/// access is remembered (EACCES at the end, as glibc gives), and the search goes on past
/// names that are not there.
///
/// # Safety
/// `file`, `argv` and `envp` are what execvpe takes.
unsafe fn search(
    file: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
    dirs: &[Vec<u8>],
) -> c_int {
    // SAFETY: the caller's C string.
    let name = unsafe { std::ffi::CStr::from_ptr(file) }.to_bytes();
    if name.is_empty() {
        crate::util::set_errno(libc::ENOENT);
        return -1;
    }
    let mut last = SearchEnd::default();
    for candidate in candidates(dirs, name) {
        // SAFETY: a C string of ours and the caller's arguments.
        unsafe { execve(candidate.as_ptr(), argv, envp) };
        match crate::util::errno() {
            // SAFETY: as above, through the shell.
            libc::ENOEXEC => return unsafe { exec_with_shell(candidate.as_ptr(), argv, envp) },
            e if last.goes_on(e) => {}
            _ => return -1,
        }
    }
    crate::util::set_errno(last.errno());
    -1
}

/// `dir/name` for each directory of a PATH search (too long ones skipped, as glibc does).
fn candidates<'a>(dirs: &'a [Vec<u8>], name: &'a [u8]) -> impl Iterator<Item = CString> + 'a {
    dirs.iter().filter_map(move |dir| {
        let mut p = dir.clone();
        p.push(b'/');
        p.extend_from_slice(name);
        (p.len() < libc::PATH_MAX as usize)
            .then(|| CString::new(p).ok())
            .flatten()
    })
}

/// Whether `path` is a regular file this process may execute (what execve would check
/// first); the errno execve would give otherwise.
fn runnable(path: &CString) -> Result<(), c_int> {
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: the shim's own stat and access on a C string of ours, into a local buffer.
    unsafe {
        if crate::stat::stat64(path.as_ptr(), st.as_mut_ptr()) != 0 {
            return Err(crate::util::errno());
        }
        if st.assume_init().st_mode & libc::S_IFMT != libc::S_IFREG {
            return Err(libc::EACCES);
        }
        if crate::attrs::access(path.as_ptr(), libc::X_OK) != 0 {
            return Err(crate::util::errno());
        }
    }
    Ok(())
}

/// How a PATH search ends without a program: EACCES if some candidate refused, else the
/// last candidate's error (glibc's execvpe).
#[derive(Default)]
struct SearchEnd {
    refused: bool,
    last: Option<c_int>,
}

impl SearchEnd {
    /// Whether the search goes on after a candidate failed with `e` (remembered).
    fn goes_on(&mut self, e: c_int) -> bool {
        self.last = Some(e);
        match e {
            libc::EACCES => {
                self.refused = true;
                true
            }
            libc::ENOENT | libc::ENOTDIR | libc::ESTALE | libc::ENODEV | libc::ETIMEDOUT => true,
            _ => false,
        }
    }

    fn errno(&self) -> c_int {
        if self.refused {
            libc::EACCES
        } else {
            self.last.unwrap_or(libc::ENOENT)
        }
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn fexecve(
    fd: c_int,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    crate::guarded!(-1, {
        crate::desc::refuse_spare(fd)?;
        // The kernel cannot execute a file it does not see: its copy.
        let program = if crate::table::is_ours(fd) {
            Some(Program::of_fd(fd)?)
        } else {
            None
        };
        let own = crate::cwd_env::entry();
        // SAFETY: the caller's environment array.
        let env = unsafe { fixed_env(envp, &own) };
        // SAFETY: the real fexecve.
        replacing_image(|| unsafe {
            real::fexecve(program.as_ref().map_or(fd, Program::fd), argv, env.as_ptr())
        })
    })
}

/// execveat: a program in the pool, named relative to a directory descriptor (of the pool
/// or a real one) or, with AT_EMPTY_PATH, open as the descriptor itself, runs from a copy
/// as for `execve` and `fexecve`; anything else goes to libc.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn execveat(
    dirfd: c_int,
    path: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
    flags: c_int,
) -> c_int {
    crate::guarded!(-1, {
        if flags & !(libc::AT_EMPTY_PATH | libc::AT_SYMLINK_NOFOLLOW) != 0 {
            return Err(libc::EINVAL);
        }
        // SAFETY: the caller's path (null is left to the kernel).
        let empty = !path.is_null() && unsafe { *path } == 0;
        let launch = if empty && flags & libc::AT_EMPTY_PATH != 0 {
            crate::desc::refuse_spare(dirfd)?;
            if crate::table::is_ours(dirfd) {
                let program = Program::of_fd(dirfd)?;
                Some(Launch::of_program(program, c"".to_owned()))
            } else {
                None
            }
        } else {
            // SAFETY: the caller's path.
            match unsafe { crate::route::route(dirfd, path) } {
                Ok(crate::route::Route::Pass) => None,
                r => {
                    r?;
                    let nofollow = flags & libc::AT_SYMLINK_NOFOLLOW != 0;
                    // SAFETY: the caller's path, arguments and environment.
                    unsafe { shebang::launch(dirfd, path, argv, envp, nofollow) }?
                }
            }
        };
        let own = crate::cwd_env::entry();
        // SAFETY: the caller's environment array.
        let env = unsafe { fixed_env(envp, &own) };
        // SAFETY: what the pool path launches, or the real execveat with the caller's
        // arguments.
        replacing_image(|| unsafe {
            match &launch {
                Some(l) => launched(l, argv, env.as_ptr()),
                None => real::execveat(dirfd, path, argv, env.as_ptr(), flags),
            }
        })
    })
}

/// Before posix_spawn: every description published, with its lock file open (as before
/// fork).
fn publish_all() {
    let _op = crate::session::op();
    crate::table::publish_all();
    crate::table::open_lock_fds();
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn posix_spawn(
    pid: *mut pid_t,
    path: *const c_char,
    fa: *const libc::c_void,
    at: *const libc::c_void,
    argv: *const *mut c_char,
    envp: *const *mut c_char,
) -> c_int {
    crate::guarded!(libc::EIO, {
        // File actions may dup2 a close-on-exec descriptor of ours into the child.
        publish_all();
        // File actions that name pool paths: the shim carries the spawn out.
        // SAFETY: the caller's arguments.
        if let Some(r) =
            unsafe { crate::spawn::spawn_with_pool_actions(pid, path, fa, at, argv, envp, false) }
        {
            return Ok(r);
        }
        // A program in the pool: the child executes its copy (open until spawned), or a
        // script's interpreter. A failure is posix_spawn's answer, not errno.
        let caller_argv = argv as *const *const c_char;
        // SAFETY: the caller's path, arguments and environment.
        let launch = if unsafe { crate::route::is_ours(path) } {
            let env = envp as *const *const c_char;
            match unsafe { shebang::launch(libc::AT_FDCWD, path, caller_argv, env, false) } {
                Ok(l) => l,
                Err(e) => return Ok(e),
            }
        } else {
            None
        };
        let exec_path = launch.as_ref().map(Launch::exec_path);
        let path = exec_path.as_ref().map_or(path, |c| c.as_ptr());
        let argv =
            launch.as_ref().map_or(caller_argv, |l| l.argv(caller_argv)) as *const *mut c_char;
        let own = crate::cwd_env::entry();
        // SAFETY: the caller's environment array.
        let env = unsafe { fixed_env(envp as *const *const c_char, &own) };
        // SAFETY: the real posix_spawn with the caller's arguments, or the launch's.
        let r = crate::inherit::passing_lock_fds(|| unsafe {
            real::posix_spawn(pid, path, fa, at, argv, env.as_ptr() as *const *mut c_char)
        });
        if r == libc::ENOENT && launch.is_none() {
            // SAFETY: the caller's path.
            match unsafe { crate::reallinks::program_name(path) } {
                // SAFETY: the pool path, the caller's other arguments.
                Ok(Some(name)) => {
                    return Ok(unsafe {
                        posix_spawn(pid, name.as_ptr(), fa, at, caller_argv as _, envp)
                    });
                }
                Ok(None) => {}
                Err(e) => return Ok(e),
            }
        }
        r
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn posix_spawnp(
    pid: *mut pid_t,
    path: *const c_char,
    fa: *const libc::c_void,
    at: *const libc::c_void,
    argv: *const *mut c_char,
    envp: *const *mut c_char,
) -> c_int {
    crate::guarded!(libc::EIO, {
        // SAFETY: the caller's file.
        if unsafe { has_slash(path) && crate::route::is_ours(path) } {
            // A path in the pool: no search; its copy runs (`posix_spawn`).
            // SAFETY: the caller's arguments.
            return Ok(unsafe { posix_spawn(pid, path, fa, at, argv, envp) });
        }
        // SAFETY: the caller's file.
        if unsafe { !has_slash(path) }
            && let Some(dirs) = path_with_pool_dirs()
        {
            // PATH names a pool directory: the first candidate that is an executable regular
            // file, as the kernel's search would find it, spawned through the shim.
            // SAFETY: the caller's C string.
            let name = unsafe { std::ffi::CStr::from_ptr(path) }.to_bytes();
            if name.is_empty() {
                return Ok(libc::ENOENT);
            }
            let mut last = SearchEnd::default();
            for candidate in candidates(&dirs, name) {
                let e = match runnable(&candidate) {
                    // SAFETY: the caller's arguments, with the program found.
                    Ok(()) => {
                        match unsafe { posix_spawn(pid, candidate.as_ptr(), fa, at, argv, envp) } {
                            0 => return Ok(0),
                            e => e,
                        }
                    }
                    Err(e) => e,
                };
                if !last.goes_on(e) {
                    return Ok(e);
                }
            }
            return Ok(last.errno());
        }
        // File actions may dup2 a close-on-exec descriptor of ours into the child.
        publish_all();
        // SAFETY: the caller's arguments.
        if let Some(r) =
            unsafe { crate::spawn::spawn_with_pool_actions(pid, path, fa, at, argv, envp, true) }
        {
            return Ok(r);
        }
        let own = crate::cwd_env::entry();
        // SAFETY: the caller's environment array.
        let env = unsafe { fixed_env(envp as *const *const c_char, &own) };
        // SAFETY: the real posix_spawnp with the caller's arguments.
        let r = crate::inherit::passing_lock_fds(|| unsafe {
            real::posix_spawnp(pid, path, fa, at, argv, env.as_ptr() as *const *mut c_char)
        });
        // SAFETY: the caller's file.
        if r == libc::ENOENT && unsafe { has_slash(path) } {
            // SAFETY: the caller's path.
            match unsafe { crate::reallinks::program_name(path) } {
                // SAFETY: the pool path, the caller's other arguments.
                Ok(Some(name)) => {
                    return Ok(unsafe { posix_spawn(pid, name.as_ptr(), fa, at, argv, envp) });
                }
                Ok(None) => {}
                Err(e) => return Ok(e),
            }
        }
        r
    })
}

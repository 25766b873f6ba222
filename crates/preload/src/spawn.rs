//! posix_spawn file actions that name pool paths. glibc carries out a spawn's file actions
//! (`addopen`, `addchdir_np`, ...) in the child with its own internal system calls, which
//! the shim never sees: a path under the prefix then fails with ENOENT (Rust's
//! `Command::current_dir` uses `addchdir_np`, so `cargo test` in the pool could not run its
//! test binaries). Every action is also recorded here, by the address of its actions
//! object; a spawn whose actions name a pool path is carried out by the shim instead: fork,
//! the actions in order through the shim's own calls, the attributes, exec, and an exec
//! failure reported back through a close-on-exec pipe, as posix_spawn reports it.

use crate::real;
use crate::route::is_ours;
use libc::{c_char, c_int, c_void, mode_t, pid_t};
use std::collections::HashMap;
use std::ffi::{CStr, CString};
use std::sync::Mutex;

#[derive(Clone)]
enum Action {
    Open(c_int, CString, c_int, mode_t),
    Close(c_int),
    Dup2(c_int, c_int),
    Chdir(CString),
    Fchdir(c_int),
    CloseFrom(c_int),
    Tcsetpgrp(c_int),
}

/// The actions recorded for each actions object (by address), in order.
static ACTIONS: Mutex<Option<HashMap<usize, Vec<Action>>>> = Mutex::new(None);

fn record(fa: *mut c_void, a: Option<Action>) {
    let mut g = ACTIONS.lock().unwrap_or_else(|e| e.into_inner());
    let map = g.get_or_insert_with(HashMap::new);
    match a {
        Some(a) => map.entry(fa as usize).or_default().push(a),
        None => {
            map.remove(&(fa as usize));
        }
    }
}

/// The actions of `fa` if one names a pool path (then the shim carries the spawn out).
fn pool_actions(fa: *const c_void) -> Option<Vec<Action>> {
    if fa.is_null() {
        return None;
    }
    let g = ACTIONS.lock().unwrap_or_else(|e| e.into_inner());
    let v = g.as_ref()?.get(&(fa as usize))?;
    // SAFETY: the paths are C strings of ours.
    let ours = |p: &CString| unsafe { is_ours(p.as_ptr()) };
    v.iter()
        .any(|a| match a {
            Action::Open(_, p, ..) | Action::Chdir(p) => ours(p),
            Action::Fchdir(fd) => crate::table::is_ours(*fd),
            _ => false,
        })
        .then(|| v.clone())
}

/// # Safety
/// `p` is a valid C string.
unsafe fn owned(p: *const c_char) -> Option<CString> {
    // SAFETY: the caller's C string.
    (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) }.to_owned())
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn posix_spawn_file_actions_init(fa: *mut c_void) -> c_int {
    record(fa, None);
    // SAFETY: forwarding unchanged.
    unsafe { real::posix_spawn_file_actions_init(fa) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn posix_spawn_file_actions_destroy(fa: *mut c_void) -> c_int {
    record(fa, None);
    // SAFETY: forwarding unchanged.
    unsafe { real::posix_spawn_file_actions_destroy(fa) }
}

/// Forward an add, and record the action if libc took it.
fn add(fa: *mut c_void, r: c_int, a: Option<Action>) -> c_int {
    if r == 0 && a.is_some() {
        record(fa, a);
    }
    r
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn posix_spawn_file_actions_addopen(
    fa: *mut c_void,
    fd: c_int,
    path: *const c_char,
    oflag: c_int,
    mode: mode_t,
) -> c_int {
    // SAFETY: forwarding unchanged; the path is the caller's C string.
    unsafe {
        let r = real::posix_spawn_file_actions_addopen(fa, fd, path, oflag, mode);
        add(fa, r, owned(path).map(|p| Action::Open(fd, p, oflag, mode)))
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn posix_spawn_file_actions_addclose(fa: *mut c_void, fd: c_int) -> c_int {
    // SAFETY: forwarding unchanged.
    let r = unsafe { real::posix_spawn_file_actions_addclose(fa, fd) };
    add(fa, r, Some(Action::Close(fd)))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn posix_spawn_file_actions_adddup2(
    fa: *mut c_void,
    fd: c_int,
    newfd: c_int,
) -> c_int {
    // SAFETY: forwarding unchanged.
    let r = unsafe { real::posix_spawn_file_actions_adddup2(fa, fd, newfd) };
    add(fa, r, Some(Action::Dup2(fd, newfd)))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn posix_spawn_file_actions_addchdir_np(
    fa: *mut c_void,
    path: *const c_char,
) -> c_int {
    // SAFETY: forwarding unchanged; the path is the caller's C string.
    unsafe {
        let r = real::posix_spawn_file_actions_addchdir_np(fa, path);
        add(fa, r, owned(path).map(Action::Chdir))
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn posix_spawn_file_actions_addfchdir_np(
    fa: *mut c_void,
    fd: c_int,
) -> c_int {
    // SAFETY: forwarding unchanged.
    let r = unsafe { real::posix_spawn_file_actions_addfchdir_np(fa, fd) };
    add(fa, r, Some(Action::Fchdir(fd)))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn posix_spawn_file_actions_addtcsetpgrp_np(
    fa: *mut c_void,
    fd: c_int,
) -> c_int {
    // SAFETY: forwarding unchanged.
    let r = unsafe { real::posix_spawn_file_actions_addtcsetpgrp_np(fa, fd) };
    add(fa, r, Some(Action::Tcsetpgrp(fd)))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn posix_spawn_file_actions_addclosefrom_np(
    fa: *mut c_void,
    from: c_int,
) -> c_int {
    // SAFETY: forwarding unchanged.
    let r = unsafe { real::posix_spawn_file_actions_addclosefrom_np(fa, from) };
    add(fa, r, Some(Action::CloseFrom(from)))
}

/// Held from the pipe's creation until the parent has closed its write end: another
/// thread's fork waits for it (`before_fork`), so that no other child inherits the write
/// end and keeps the parent waiting for an exec report until it exits.
static WINDOW: crate::util::SpinRw = crate::util::SpinRw::new();

thread_local! {
    /// Set while this thread forks for a spawn (it holds WINDOW itself).
    static SPAWNING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// This thread's fork took WINDOW in `before_fork` (released in `after_fork`).
    static TAKEN: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Before any fork (the fork handler): wait until no spawn is between its pipe and its
/// fork; a spawn's own fork passes.
pub fn before_fork() {
    if !SPAWNING.try_with(|s| s.get()).unwrap_or(false) {
        WINDOW.write_lock();
        let _ = TAKEN.try_with(|t| t.set(true));
    }
}

/// After the fork, in the parent and in the child: the window `before_fork` took, back.
pub fn after_fork() {
    if TAKEN.try_with(|t| t.replace(false)).unwrap_or(false) {
        WINDOW.write_unlock();
    }
}

/// The spawn, by the shim, if `fa` names a pool path: Some(posix_spawn's result).
///
/// # Safety
/// The arguments are posix_spawn's (or posix_spawnp's, with `search`).
pub unsafe fn spawn_with_pool_actions(
    pid: *mut pid_t,
    path: *const c_char,
    fa: *const c_void,
    at: *const c_void,
    argv: *const *mut c_char,
    envp: *const *mut c_char,
    search: bool,
) -> Option<c_int> {
    let actions = pool_actions(fa)?;
    // All signals blocked from before the fork until the child execs (it restores the
    // mask last), as glibc's spawn: no handler of the program runs in the child.
    // SAFETY: sigset manipulation on locals.
    let mut all: libc::sigset_t = unsafe { std::mem::zeroed() };
    let mut old: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    unsafe {
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
    }
    WINDOW.write_lock();
    let mut p = [0 as c_int; 2];
    // SAFETY: a pipe into a local array.
    let piped = unsafe { libc::pipe2(p.as_mut_ptr(), libc::O_CLOEXEC) } == 0;
    let result = if !piped {
        WINDOW.write_unlock();
        crate::util::errno()
    } else {
        // Out of the actions' way: the shim's own numbers, which closefrom passes over.
        let (r, w) = (crate::util::move_high(p[0]), crate::util::move_high(p[1]));
        let _ = SPAWNING.try_with(|s| s.set(true));
        // SAFETY: fork; the child only runs the actions and execs, or reports and _exits.
        let child = unsafe { libc::fork() };
        let _ = SPAWNING.try_with(|s| s.set(false));
        if child == 0 {
            // In the child: the caller's arguments; a panic must not return into the
            // program's code as if this were the parent.
            let e = std::panic::catch_unwind(|| {
                // SAFETY: as above.
                unsafe { run_child(&actions, path, at, argv, envp, search, &old) }
            })
            .unwrap_or(libc::EIO);
            let e = if e == 0 { libc::EIO } else { e };
            // SAFETY: reporting the error through our pipe, leaving without exit handlers.
            unsafe {
                libc::write(w, &e as *const c_int as *const c_void, 4);
                libc::_exit(127);
            }
        }
        crate::ownfds::close(w);
        WINDOW.write_unlock();
        if child < 0 {
            crate::ownfds::close(r);
            crate::util::errno()
        } else {
            let mut e: c_int = 0;
            // EOF: the exec happened; 4 bytes: the errno that stopped the child.
            let n = loop {
                // SAFETY: reading up to 4 bytes into a local.
                let n = unsafe { libc::read(r, &mut e as *mut c_int as *mut c_void, 4) };
                if n >= 0 || crate::util::errno() != libc::EINTR {
                    break n;
                }
            };
            crate::ownfds::close(r);
            if n == 4 {
                // SAFETY: reaping the child that failed before exec.
                unsafe { libc::waitpid(child, std::ptr::null_mut(), 0) };
                e
            } else {
                if !pid.is_null() {
                    // SAFETY: the caller's pid buffer.
                    unsafe { *pid = child };
                }
                0
            }
        }
    };
    // SAFETY: restoring the caller's mask.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut()) };
    Some(result)
}

/// In the child, in glibc's order: signal dispositions, scheduling, session, process
/// group, ids, the file actions, the signal mask, the exec. Returns the errno that stopped
/// it.
///
/// # Safety
/// As `spawn_with_pool_actions`; `old` is the parent's signal mask.
unsafe fn run_child(
    actions: &[Action],
    path: *const c_char,
    at: *const c_void,
    argv: *const *mut c_char,
    envp: *const *mut c_char,
    search: bool,
    old: &libc::sigset_t,
) -> c_int {
    use crate::{cwd, open};
    let fail = || crate::util::errno();
    // SAFETY: the shim's own calls and the system calls posix_spawn makes, with the
    // recorded arguments and the caller's attributes.
    unsafe {
        let mask = match apply_attributes(at) {
            Ok(m) => m.unwrap_or(*old),
            Err(e) => return e,
        };
        for a in actions {
            let ok = match a {
                Action::Open(fd, p, oflag, mode) => {
                    let got = open::open64(p.as_ptr(), *oflag, *mode);
                    got >= 0
                        && (got == *fd || (open::dup2(got, *fd) == *fd && open::close(got) == 0))
                }
                // As glibc: a close's error is not the spawn's.
                Action::Close(fd) => {
                    open::close(*fd);
                    true
                }
                Action::Dup2(fd, newfd) if fd == newfd => {
                    // posix_spawn's dup2 onto itself clears close-on-exec.
                    crate::fcntl::fcntl(*fd, libc::F_SETFD, 0) != -1
                }
                Action::Dup2(fd, newfd) => open::dup2(*fd, *newfd) == *newfd,
                Action::Chdir(p) => cwd::chdir(p.as_ptr()) == 0,
                Action::Fchdir(fd) => cwd::fchdir(*fd) == 0,
                Action::CloseFrom(from) => {
                    open::closefrom(*from);
                    true
                }
                Action::Tcsetpgrp(fd) => libc::tcsetpgrp(*fd, libc::getpgrp()) == 0,
            };
            if !ok {
                return fail();
            }
        }
        libc::sigprocmask(libc::SIG_SETMASK, &mask, std::ptr::null_mut());
        let argv = argv as *const *const c_char;
        let envp = envp as *const *const c_char;
        if search && !CStr::from_ptr(path).to_bytes().contains(&b'/') {
            exec_search(path, argv, envp)
        } else {
            crate::process::execve(path, argv, envp);
            fail()
        }
    }
}

/// posix_spawnp's search of PATH (glibc's `__execvpex`): each candidate through the shim's
/// execve, no `/bin/sh` for a file the kernel cannot run (ENOEXEC is the answer), EACCES
/// remembered, the search going on past names that are not there.
///
/// # Safety
/// `file`, `argv` and `envp` are what execve takes.
unsafe fn exec_search(
    file: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    // SAFETY: the caller's C string, and PATH from the environment (copied).
    let (name, path) = unsafe {
        let p = libc::getenv(c"PATH".as_ptr());
        let path = if p.is_null() {
            b"/bin:/usr/bin".to_vec()
        } else {
            CStr::from_ptr(p).to_bytes().to_vec()
        };
        (CStr::from_ptr(file).to_bytes(), path)
    };
    if name.is_empty() {
        return libc::ENOENT;
    }
    let mut denied = false;
    for dir in path.split(|&b| b == b':') {
        let mut cand = if dir.is_empty() {
            b".".to_vec()
        } else {
            dir.to_vec()
        };
        cand.push(b'/');
        cand.extend_from_slice(name);
        let Ok(c) = CString::new(cand) else { continue };
        // SAFETY: a C string of ours and the caller's arrays.
        unsafe { crate::process::execve(c.as_ptr(), argv, envp) };
        match crate::util::errno() {
            libc::EACCES => denied = true,
            libc::ENOENT | libc::ENOTDIR | libc::ESTALE | libc::ENODEV | libc::ETIMEDOUT => {}
            e => return e,
        }
    }
    if denied { libc::EACCES } else { libc::ENOENT }
}

/// The spawn attributes applied before the file actions (glibc's order): signal
/// dispositions (every caught signal back to its default, and the `sigdefault` set),
/// scheduling, session, process group, ids. Returns the mask to set last, if one is asked.
///
/// # Safety
/// `at` is null or a valid posix_spawnattr_t.
unsafe fn apply_attributes(at: *const c_void) -> Result<Option<libc::sigset_t>, c_int> {
    let ck = |r: c_int| {
        if r == 0 {
            Ok(())
        } else {
            Err(crate::util::errno())
        }
    };
    // SAFETY: sigaction queries and resets in the child; the getters read the caller's
    // attributes into locals; the setters are the system calls posix_spawn makes.
    unsafe {
        let mut def: libc::sigset_t = std::mem::zeroed();
        let mut flags = 0;
        let at = at as *const libc::posix_spawnattr_t;
        if !at.is_null() {
            let mut f: libc::c_short = 0;
            libc::posix_spawnattr_getflags(at, &mut f);
            flags = c_int::from(f);
            if flags & libc::POSIX_SPAWN_SETSIGDEF != 0 {
                libc::posix_spawnattr_getsigdefault(at, &mut def);
            }
        }
        for sig in 1..=libc::SIGRTMAX() {
            let mut sa: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(sig, std::ptr::null(), &mut sa) != 0 {
                continue;
            }
            let caught = sa.sa_sigaction != libc::SIG_DFL && sa.sa_sigaction != libc::SIG_IGN;
            if caught || libc::sigismember(&def, sig) == 1 {
                libc::signal(sig, libc::SIG_DFL);
            }
        }
        if at.is_null() {
            return Ok(None);
        }
        if flags & libc::POSIX_SPAWN_SETSCHEDULER != 0 {
            let mut pol: c_int = 0;
            let mut prm: libc::sched_param = std::mem::zeroed();
            libc::posix_spawnattr_getschedpolicy(at, &mut pol);
            libc::posix_spawnattr_getschedparam(at, &mut prm);
            ck(if libc::sched_setscheduler(0, pol, &prm) >= 0 {
                0
            } else {
                -1
            })?;
        } else if flags & libc::POSIX_SPAWN_SETSCHEDPARAM != 0 {
            let mut prm: libc::sched_param = std::mem::zeroed();
            libc::posix_spawnattr_getschedparam(at, &mut prm);
            ck(libc::sched_setparam(0, &prm))?;
        }
        if flags & c_int::from(libc::POSIX_SPAWN_SETSID) != 0 {
            ck(if libc::setsid() >= 0 { 0 } else { -1 })?;
        }
        if flags & libc::POSIX_SPAWN_SETPGROUP != 0 {
            let mut pg: pid_t = 0;
            libc::posix_spawnattr_getpgroup(at, &mut pg);
            ck(libc::setpgid(0, pg))?;
        }
        if flags & libc::POSIX_SPAWN_RESETIDS != 0 {
            ck(libc::setegid(libc::getgid()))?;
            ck(libc::seteuid(libc::getuid()))?;
        }
        if flags & libc::POSIX_SPAWN_SETSIGMASK != 0 {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::posix_spawnattr_getsigmask(at, &mut set);
            return Ok(Some(set));
        }
    }
    Ok(None)
}

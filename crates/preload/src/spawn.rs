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
        .any(|a| matches!(a, Action::Open(_, p, ..) | Action::Chdir(p) if ours(p)))
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
pub unsafe extern "C" fn posix_spawn_file_actions_addclosefrom_np(
    fa: *mut c_void,
    from: c_int,
) -> c_int {
    // SAFETY: forwarding unchanged.
    let r = unsafe { real::posix_spawn_file_actions_addclosefrom_np(fa, from) };
    add(fa, r, Some(Action::CloseFrom(from)))
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
    let mut p = [0 as c_int; 2];
    // SAFETY: a pipe into a local array.
    if unsafe { libc::pipe2(p.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Some(crate::util::errno());
    }
    // Out of the actions' way: the shim's own numbers, which closefrom passes over.
    let (r, w) = (crate::util::move_high(p[0]), crate::util::move_high(p[1]));
    // SAFETY: fork; the child only runs the actions and execs, or reports and _exits.
    let child = unsafe { libc::fork() };
    if child == 0 {
        // SAFETY: in the child: the caller's arguments.
        let e = unsafe { run_child(&actions, path, at, argv, envp, search) };
        // SAFETY: reporting the error through our pipe and leaving without exit handlers.
        unsafe {
            libc::write(w, &e as *const c_int as *const c_void, 4);
            libc::_exit(127);
        }
    }
    crate::ownfds::close(w);
    if child < 0 {
        crate::ownfds::close(r);
        return Some(crate::util::errno());
    }
    let mut e: c_int = 0;
    // SAFETY: reading up to 4 bytes into a local; EOF means the exec happened.
    let n = loop {
        let n = unsafe { libc::read(r, &mut e as *mut c_int as *mut c_void, 4) };
        if n >= 0 || crate::util::errno() != libc::EINTR {
            break n;
        }
    };
    crate::ownfds::close(r);
    if n == 4 {
        // SAFETY: reaping the child that failed before exec.
        unsafe { libc::waitpid(child, std::ptr::null_mut(), 0) };
        return Some(e);
    }
    if !pid.is_null() {
        // SAFETY: the caller's pid buffer.
        unsafe { *pid = child };
    }
    Some(0)
}

/// In the child: the actions in order, the attributes, the exec; returns the errno that
/// stopped it.
///
/// # Safety
/// As `spawn_with_pool_actions`.
unsafe fn run_child(
    actions: &[Action],
    path: *const c_char,
    at: *const c_void,
    argv: *const *mut c_char,
    envp: *const *mut c_char,
    search: bool,
) -> c_int {
    use crate::{cwd, open};
    let fail = || crate::util::errno();
    // SAFETY: the shim's own calls with the recorded arguments.
    unsafe {
        for a in actions {
            let ok = match a {
                Action::Open(fd, p, oflag, mode) => {
                    let got = open::open64(p.as_ptr(), *oflag, *mode);
                    got >= 0
                        && (got == *fd || (open::dup2(got, *fd) == *fd && open::close(got) == 0))
                }
                Action::Close(fd) => open::close(*fd) == 0 || crate::util::errno() == libc::EBADF,
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
            };
            if !ok {
                return fail();
            }
        }
        if let Err(e) = apply_attributes(at) {
            return e;
        }
        let argv = argv as *const *const c_char;
        let envp = envp as *const *const c_char;
        if search {
            crate::process::execvpe(path, argv, envp);
        } else {
            crate::process::execve(path, argv, envp);
        }
    }
    fail()
}

/// The spawn attributes that apply in the child (signal mask and defaults, process group,
/// session, ids, scheduling), through their public getters.
///
/// # Safety
/// `at` is null or a valid posix_spawnattr_t.
unsafe fn apply_attributes(at: *const c_void) -> Result<(), c_int> {
    if at.is_null() {
        return Ok(());
    }
    let at = at as *const libc::posix_spawnattr_t;
    let ck = |r: c_int| {
        if r == 0 {
            Ok(())
        } else {
            Err(crate::util::errno())
        }
    };
    // SAFETY: the getters read the caller's attributes into locals; the setters are the
    // system calls posix_spawn makes.
    unsafe {
        let mut flags: libc::c_short = 0;
        libc::posix_spawnattr_getflags(at, &mut flags);
        let flags = c_int::from(flags);
        if flags & libc::POSIX_SPAWN_SETSIGMASK != 0 {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::posix_spawnattr_getsigmask(at, &mut set);
            ck(libc::sigprocmask(
                libc::SIG_SETMASK,
                &set,
                std::ptr::null_mut(),
            ))?;
        }
        if flags & libc::POSIX_SPAWN_SETSIGDEF != 0 {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::posix_spawnattr_getsigdefault(at, &mut set);
            for sig in 1..libc::SIGRTMAX() {
                if libc::sigismember(&set, sig) == 1 {
                    libc::signal(sig, libc::SIG_DFL);
                }
            }
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
    }
    Ok(())
}

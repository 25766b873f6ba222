//! What an exec of a pool path runs. The kernel cannot see pool files, so a binary runs
//! from a copy (`exec::Program`). A script (`#!`) is not copied: the shim reads its first
//! line and runs its interpreter with the arguments the kernel would give it
//! (fs/binfmt_script.c: the interpreter, its one optional argument, the script's path, then
//! the caller's arguments after the first). The interpreter may itself be in the pool (a
//! venv's `bin/python` is a symlink there), a binary copied in turn or a script again, up to
//! the kernel's four levels; the script reads itself by the path it was run by, as on
//! Linux, so `$0` and `__file__` are that path.

use crate::exec::Program;
use crate::util::{Res, errno};
use libc::{c_char, c_int};
use std::ffi::{CStr, CString};

/// The kernel's buffer for the first bytes of a program (BINPRM_BUF_SIZE).
const HEAD: usize = 256;
/// How many scripts one exec may pass through, each the interpreter of the one before
/// (exec_binprm's depth limit): a sixth is ELOOP.
const MAX_SCRIPTS: usize = 5;

/// What the kernel is to execute for an exec of a pool path.
pub struct Launch {
    /// A pool binary's copy to run (`fexecve`); None: the kernel runs `path`.
    pub program: Option<Program>,
    /// The file the kernel executes when `program` is None (a script's interpreter
    /// outside the pool).
    pub path: CString,
    /// The arguments, when a script's interpreter takes the program's place; None: the
    /// caller's, unchanged.
    args: Option<Vec<CString>>,
    /// `args` as a NULL-terminated array of pointers into it.
    ptrs: Vec<*const c_char>,
    /// Copies of scripts that their interpreters read as `/dev/fd/N`, open until the exec.
    _scripts: Vec<Program>,
}

impl Launch {
    /// The argument array to execute with: the interpreter's, or the caller's `argv`.
    pub fn argv(&self, caller: *const *const c_char) -> *const *const c_char {
        if self.args.is_some() {
            self.ptrs.as_ptr()
        } else {
            caller
        }
    }

    /// The path to give a call that takes one: the copy's `/proc/self/fd/N`, or `path`.
    pub fn exec_path(&self) -> CString {
        match &self.program {
            Some(p) => p.proc_path(),
            None => self.path.clone(),
        }
    }
}

/// What an exec of `path` (relative to `dirfd`) runs, when the path is the pool's; None
/// when the kernel runs it as usual. A final symlink under `nofollow` is ELOOP. When the
/// new program's environment `envp` does not load the shim, its interpreter could not open
/// a pool path: it reads a copy of the script instead, as `/dev/fd/N`.
///
/// # Safety
/// `path` is a valid C string; `argv` and `envp` are null or the caller's NULL-terminated
/// arrays.
pub unsafe fn launch(
    dirfd: c_int,
    path: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
    nofollow: bool,
) -> Res<Option<Launch>> {
    // SAFETY: the caller's C string, arguments and environment.
    unsafe {
        let start = Start {
            dirfd,
            target: CStr::from_ptr(path).to_owned(),
            nofollow,
            args: None,
            depth: 0,
        };
        resolve(start, argv, loads_shim(envp)).map(Some)
    }
}

/// After the kernel could not run `path`, a file outside the pool (ENOENT: a script's
/// interpreter it did not find): if it is a script whose interpreter is in the pool, what
/// that interpreter launches with the script. None otherwise (the kernel's error stands).
///
/// # Safety
/// As for `launch`.
pub unsafe fn outside_script(
    path: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> Res<Option<Launch>> {
    // SAFETY: the caller's C string.
    let target = unsafe { CStr::from_ptr(path) }.to_owned();
    // SAFETY: a C string of ours.
    let head = unsafe { Opened::program(libc::AT_FDCWD, &target, false) }?.head()?;
    let Some((interpreter, arg)) = head
        .starts_with(b"#!")
        .then(|| interpreter_line(&head))
        .flatten()
    else {
        return Ok(None);
    };
    // SAFETY: a C string of ours.
    if !unsafe { crate::route::is_ours(interpreter.as_ptr()) } {
        return Ok(None);
    }
    // The interpreter reads a real script by its path, with the shim or without.
    // SAFETY: the caller's argument array.
    let args = unsafe { interpreter_args(&interpreter, arg, target, None, argv) };
    let start = Start {
        dirfd: libc::AT_FDCWD,
        target: interpreter,
        nofollow: false,
        args: Some(args),
        depth: 1,
    };
    // SAFETY: the caller's arguments and environment.
    unsafe { resolve(start, argv, loads_shim(envp)).map(Some) }
}

/// Where `resolve` starts: a pool program to open, the arguments scripts before it made,
/// and how many there were.
struct Start {
    dirfd: c_int,
    target: CString,
    nofollow: bool,
    args: Option<Vec<CString>>,
    depth: usize,
}

/// Follow a pool program through its scripts' interpreters to a binary (copied) or an
/// interpreter outside the pool. `shim`: the new program loads the shim.
///
/// # Safety
/// `argv` is null or the caller's NULL-terminated array.
unsafe fn resolve(start: Start, argv: *const *const c_char, shim: bool) -> Res<Launch> {
    let Start {
        mut dirfd,
        mut target,
        mut nofollow,
        mut args,
        mut depth,
    } = start;
    let mut scripts = Vec::new();
    loop {
        // SAFETY: a C string of ours.
        let opened = unsafe { Opened::program(dirfd, &target, nofollow) }?;
        let head = opened.head()?;
        if !head.starts_with(b"#!") {
            // `Opened::program` checked it and `head` looked: copied without a second look.
            let program = Program::copied(opened.0, false)?;
            return Ok(Launch::new(Some(program), target, args, scripts));
        }
        if depth == MAX_SCRIPTS {
            return Err(libc::ELOOP);
        }
        let (interpreter, arg) = interpreter_line(&head).ok_or(libc::ENOEXEC)?;
        let script = if shim {
            script_path(dirfd, target)?
        } else {
            let copy = Program::copied(opened.0, true)?;
            let name = format!("/dev/fd/{}", copy.fd());
            scripts.push(copy);
            CString::new(name).expect("no NUL in digits")
        };
        drop(opened);
        // SAFETY: the caller's argument array.
        args = Some(unsafe { interpreter_args(&interpreter, arg, script, args, argv) });
        (dirfd, target, nofollow) = (libc::AT_FDCWD, interpreter, false);
        // SAFETY: a C string of ours.
        if !unsafe { crate::route::is_ours(target.as_ptr()) } {
            return Ok(Launch::new(None, target, args, scripts));
        }
        depth += 1;
    }
}

/// The arguments the kernel gives a script's interpreter: its name, its optional
/// argument, the script's path, then the arguments after the first of the script's own
/// (`prev`, made by an outer script, or the caller's `argv`).
///
/// # Safety
/// `argv` is null or the caller's NULL-terminated array.
unsafe fn interpreter_args(
    interpreter: &CString,
    arg: Option<CString>,
    script: CString,
    prev: Option<Vec<CString>>,
    argv: *const *const c_char,
) -> Vec<CString> {
    let mut next = vec![interpreter.clone()];
    next.extend(arg);
    next.push(script);
    match prev {
        Some(prev) => next.extend(prev.into_iter().skip(1)),
        // SAFETY: the caller's argument array.
        None => next.extend(unsafe { caller_args_after_first(argv) }),
    }
    next
}

/// The path the interpreter reads a script by: as it was run; relative to a descriptor,
/// the pool path of the descriptor's directory joined with it (the kernel names it
/// `/dev/fd/N/name`, which fails once N is closed on exec: the shim's name does not).
fn script_path(dirfd: c_int, target: CString) -> Res<CString> {
    if dirfd == libc::AT_FDCWD || target.as_bytes().starts_with(b"/") {
        return Ok(target);
    }
    let p = match crate::table::path_joined(dirfd, target.as_bytes()) {
        Some(p) => crate::route::mounted(&p),
        None => {
            let mut p = format!("/dev/fd/{dirfd}/").into_bytes();
            p.extend_from_slice(target.as_bytes());
            p
        }
    };
    CString::new(p).map_err(|_| libc::ENOENT)
}

impl Launch {
    /// A copy to run with the caller's arguments (a program run by its descriptor).
    pub fn of_program(program: Program, path: CString) -> Launch {
        Launch::new(Some(program), path, None, Vec::new())
    }

    fn new(
        program: Option<Program>,
        path: CString,
        args: Option<Vec<CString>>,
        scripts: Vec<Program>,
    ) -> Launch {
        let mut ptrs: Vec<*const c_char> = args.iter().flatten().map(|a| a.as_ptr()).collect();
        ptrs.push(std::ptr::null());
        Launch {
            program,
            path,
            args,
            ptrs,
            _scripts: scripts,
        }
    }
}

/// Whether the environment `envp` loads the shim (`LD_PRELOAD` names it), so that a program
/// run with it reaches pool paths.
///
/// # Safety
/// `envp` is null or a NULL-terminated array of C strings.
unsafe fn loads_shim(envp: *const *const c_char) -> bool {
    if envp.is_null() {
        return false;
    }
    let mut i = 0;
    // SAFETY: walking the caller's NULL-terminated array of C strings.
    unsafe {
        while !(*envp.add(i)).is_null() {
            let e = CStr::from_ptr(*envp.add(i)).to_bytes();
            if let Some(v) = e.strip_prefix(b"LD_PRELOAD=")
                && v.windows(SHIM.len()).any(|w| w == SHIM)
            {
                return true;
            }
            i += 1;
        }
    }
    false
}

/// The shim's file name, as `LD_PRELOAD` names it.
const SHIM: &[u8] = b"libengram_preload";

/// A pool program open for reading, closed on drop.
struct Opened(c_int);

impl Opened {
    /// Open the program at `path` (ours), which must be an executable regular file: opened
    /// first, so that a final symlink under `nofollow` is ELOOP whatever it points to, as the
    /// kernel has it.
    ///
    /// # Safety
    /// `path` is relative to `dirfd`, a descriptor of the caller's.
    unsafe fn program(dirfd: c_int, path: &CStr, nofollow: bool) -> Res<Opened> {
        // O_NONBLOCK: a FIFO of the pool opens without waiting for a writer, and is then
        // refused (EACCES) as the kernel refuses to run one.
        let flags = libc::O_RDONLY
            | libc::O_CLOEXEC
            | libc::O_NONBLOCK
            | if nofollow { libc::O_NOFOLLOW } else { 0 };
        // SAFETY: the shim's own calls on a C string.
        unsafe {
            let fd = crate::open::openat(dirfd, path.as_ptr(), flags, 0);
            if fd < 0 {
                return Err(errno());
            }
            let opened = Opened(fd);
            if crate::attrs::faccessat(dirfd, path.as_ptr(), libc::X_OK, 0) != 0 {
                return Err(errno());
            }
            let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
            if crate::stat::fstat64(fd, st.as_mut_ptr()) != 0 {
                return Err(errno());
            }
            let mode = st.assume_init().st_mode;
            if mode & libc::S_IFMT != libc::S_IFREG || mode & 0o111 == 0 {
                return Err(libc::EACCES);
            }
            Ok(opened)
        }
    }

    /// The program's first bytes, as many as the kernel looks at.
    fn head(&self) -> Res<Vec<u8>> {
        let mut head = vec![0u8; HEAD];
        // SAFETY: the shim's own pread into a local buffer of HEAD bytes.
        let n = unsafe { crate::io::pread64(self.0, head.as_mut_ptr().cast(), HEAD, 0) };
        if n < 0 {
            return Err(errno());
        }
        head.truncate(n as usize);
        Ok(head)
    }
}

impl Drop for Opened {
    fn drop(&mut self) {
        // SAFETY: closing the descriptor this object opened.
        unsafe { crate::open::close(self.0) };
    }
}

/// The caller's arguments after the first (the program's name), copied.
///
/// # Safety
/// `argv` is null or a NULL-terminated array of C strings.
unsafe fn caller_args_after_first(argv: *const *const c_char) -> Vec<CString> {
    let mut out = Vec::new();
    // SAFETY: walking the caller's NULL-terminated array.
    unsafe {
        if argv.is_null() || (*argv).is_null() {
            return out;
        }
        let mut p = argv.add(1);
        while !(*p).is_null() {
            out.push(CStr::from_ptr(*p).to_owned());
            p = p.add(1);
        }
    }
    out
}

fn is_space_or_tab(b: u8) -> bool {
    b == b' ' || b == b'\t'
}

/// The interpreter and its optional argument from a `#!` line, as binfmt_script reads them
/// from the first `HEAD` bytes: the line ends at a newline (or the buffer's end, unless the
/// interpreter's name would be cut); the name ends at a space, tab or NUL; the argument is
/// the rest, blanks trimmed at both ends, up to a NUL. None where the kernel says ENOEXEC.
pub fn interpreter_line(head: &[u8]) -> Option<(CString, Option<CString>)> {
    let body = head.strip_prefix(b"#!")?;
    let mut buf = [0u8; HEAD - 2];
    buf[..body.len().min(HEAD - 2)].copy_from_slice(&body[..body.len().min(HEAD - 2)]);
    // The kernel keeps the buffer's last byte for its NUL.
    let usable = &buf[..HEAD - 3];
    // Looked for as strnchr does, which stops at a NUL.
    let nl = head.iter().take(HEAD).position(|&b| b == b'\n' || b == 0);
    let line = match nl.filter(|&i| head[i] == b'\n') {
        Some(nl) => &buf[..nl - 2],
        None => {
            let start = usable.iter().position(|&b| !is_space_or_tab(b))?;
            // No newline: a name running to the buffer's end may be cut short.
            usable[start..]
                .iter()
                .position(|&b| is_space_or_tab(b) || b == 0)?;
            usable
        }
    };
    let mut end = line.len();
    while end > 0 && is_space_or_tab(line[end - 1]) {
        end -= 1;
    }
    let line = &line[..end];
    let start = line.iter().position(|&b| !is_space_or_tab(b))?;
    let rest = &line[start..];
    let name_len = rest
        .iter()
        .position(|&b| is_space_or_tab(b) || b == 0)
        .unwrap_or(rest.len());
    if name_len == 0 {
        return None;
    }
    let name = CString::new(&rest[..name_len]).ok()?;
    let arg = match rest.get(name_len) {
        Some(&b) if b != 0 => {
            let after = &rest[name_len..];
            after.iter().position(|&b| !is_space_or_tab(b)).map(|s| {
                let a = &after[s..];
                let a = &a[..a.iter().position(|&b| b == 0).unwrap_or(a.len())];
                CString::new(a).expect("cut at the first NUL")
            })
        }
        _ => None,
    };
    Some((name, arg))
}

#[cfg(test)]
mod tests {
    use super::interpreter_line;

    fn parse(line: &[u8]) -> Option<(String, Option<String>)> {
        interpreter_line(line).map(|(n, a)| {
            (
                n.to_string_lossy().into_owned(),
                a.map(|a| a.to_string_lossy().into_owned()),
            )
        })
    }

    #[test]
    fn lines_read_as_binfmt_script_reads_them() {
        let s = |n: &str, a: Option<&str>| Some((n.to_string(), a.map(str::to_string)));
        assert_eq!(parse(b"#!/bin/sh\necho"), s("/bin/sh", None));
        assert_eq!(parse(b"#! /bin/sh \t\n"), s("/bin/sh", None));
        assert_eq!(
            parse(b"#!/usr/bin/env  python3 -u \nx"),
            s("/usr/bin/env", Some("python3 -u"))
        );
        assert_eq!(parse(b"#!/bin/sh"), s("/bin/sh", None));
        assert_eq!(parse(b"#!/a\0b c\n"), s("/a", None));
        assert_eq!(parse(b"#!/a b\0c\n"), s("/a", Some("b")));
        assert_eq!(parse(b"#!\n"), None);
        assert_eq!(parse(b"#!   \t\n"), None);
        assert_eq!(parse(b"echo"), None);
        // No newline in the first 256 bytes: the arguments are cut, the name may not be.
        let mut long = b"#!/bin/sh ".to_vec();
        long.extend(std::iter::repeat_n(b'x', 400));
        let (n, a) = parse(&long[..256]).unwrap();
        assert_eq!((n.as_str(), a.unwrap().len()), ("/bin/sh", 253 - 8));
        let mut name = b"#!/".to_vec();
        name.extend(std::iter::repeat_n(b'y', 400));
        assert_eq!(parse(&name[..256]), None);
    }
}

//! Process start-up: COUNT runs of `/bin/true`, each started and waited for, in µs per
//! process. Run it under the shim (`LD_PRELOAD=target/release/libengram_preload.so`) and
//! without, side by side: the difference is what the shim adds to every process a shell
//! or `make` starts (loading it, its start-up, and its fork handlers with `fork`).
//!
//! `target/release/examples/spawn_loop COUNT [spawn|fork]`: `spawn` (the default) starts
//! each with posix_spawn, `fork` with fork and execve, as a shell does.

use std::ffi::CString;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let count: u32 = args.next().map_or(Ok(1000), |c| c.parse())?;
    let fork = match args.next().as_deref() {
        None | Some("spawn") => false,
        Some("fork") => true,
        Some(other) => return Err(format!("unknown mode {other:?} (spawn or fork)").into()),
    };
    let program = CString::new("/bin/true")?;
    let argv = [program.as_ptr(), std::ptr::null()];
    let started = std::time::Instant::now();
    for _ in 0..count {
        let mut pid: libc::pid_t = 0;
        // SAFETY: posix_spawn/fork+execve of a fixed program with a NULL-terminated argv and
        // the process's own environment; the child of fork calls only execve and _exit.
        unsafe {
            if fork {
                pid = libc::fork();
                if pid == 0 {
                    libc::execve(program.as_ptr(), argv.as_ptr(), environ);
                    libc::_exit(127);
                }
                if pid < 0 {
                    return Err(std::io::Error::last_os_error().into());
                }
            } else {
                let e = libc::posix_spawn(
                    &mut pid,
                    program.as_ptr(),
                    std::ptr::null(),
                    std::ptr::null(),
                    argv.as_ptr() as *const *mut libc::c_char,
                    environ as *const *mut libc::c_char,
                );
                if e != 0 {
                    return Err(std::io::Error::from_raw_os_error(e).into());
                }
            }
        }
        let mut status = 0;
        // SAFETY: waiting for the child just started.
        if unsafe { libc::waitpid(pid, &mut status, 0) } != pid || status != 0 {
            return Err(format!("/bin/true failed (status {status})").into());
        }
    }
    let us = started.elapsed().as_secs_f64() * 1e6 / f64::from(count);
    println!("{us:.1} us per process ({count} runs of /bin/true)");
    Ok(())
}

unsafe extern "C" {
    static environ: *const *const libc::c_char;
}

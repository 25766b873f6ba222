//! `engram mount` / `engram umount` through the binary: background mount, ordinary tools on
//! the mount point, clean pool afterwards, clear errors for bad mount points.

mod common;

use common::{TempDir, TempPool, fails, ok, pattern};
use std::ffi::CString;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// The only reason to skip: no FUSE device on this machine.
fn fuse_available() -> bool {
    if !Path::new("/dev/fuse").exists() {
        eprintln!("SKIPPED: /dev/fuse is absent, so FUSE mounts cannot be tested here");
        return false;
    }
    true
}

/// The pid of the background `engram mount` process serving `pool`, found by its command
/// line (every test uses its own pool file).
fn mount_pid(pool: &str) -> i32 {
    for e in fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(cmd) = fs::read(e.path().join("cmdline")) else {
            continue;
        };
        let args: Vec<&[u8]> = cmd.split(|&b| b == 0).collect();
        if args.len() > 2
            && args[0].ends_with(b"engram")
            && args[1] == b"mount"
            && args.contains(&pool.as_bytes())
        {
            return pid;
        }
    }
    panic!("no `engram mount` process serves {pool}");
}

/// Block until process `pid` (not our child) has exited, so that its files (the pool's
/// lock) are closed: a pidfd turns readable once the process is past closing them.
fn wait_exit(pid: i32) {
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) } as i32;
    if fd < 0 {
        let e = std::io::Error::last_os_error();
        assert_eq!(e.raw_os_error(), Some(libc::ESRCH), "pidfd_open: {e}");
        return;
    }
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    loop {
        // SAFETY: one valid pollfd for the duration of the call.
        let n = unsafe { libc::poll(&mut p, 1, -1) };
        if n == 1 {
            break;
        }
        let e = std::io::Error::last_os_error();
        assert_eq!(e.raw_os_error(), Some(libc::EINTR), "poll: {e}");
    }
    // SAFETY: `fd` is ours and closed once.
    unsafe { libc::close(fd) };
}

/// Send `sig` to `pid`.
fn kill(pid: i32, sig: libc::c_int) {
    // SAFETY: plain system call.
    let r = unsafe { libc::kill(pid, sig) };
    assert_eq!(r, 0, "kill: {}", std::io::Error::last_os_error());
}

/// Detach a mount whose server is gone (umount2 with MNT_DETACH as root, else fusermount3).
fn lazy_unmount(dir: &Path) {
    let c = CString::new(dir.as_os_str().as_bytes()).unwrap();
    // SAFETY: `c` is a NUL-terminated path that lives for the call.
    if unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) } == 0 {
        return;
    }
    let st = std::process::Command::new("fusermount3")
        .arg("-u")
        .arg("-z")
        .arg(dir)
        .status()
        .expect("run fusermount3");
    assert!(st.success(), "fusermount3 -u -z {}: {st}", dir.display());
}

#[test]
fn mount_use_umount_leaves_a_clean_pool() {
    if !fuse_available() {
        return;
    }
    let pool = TempPool::new("mount");
    ok(["mkfs", pool.s(), "--size", "64M"]);
    let dir = TempDir::new("mnt");
    let r = ok(["mount", pool.s(), dir.path().to_str().unwrap()]);
    assert!(r.stdout.contains("mounted"), "{}", r.stdout);
    let pid = mount_pid(pool.s());
    let f = dir.path().join("hello.txt");
    fs::write(&f, b"hello through FUSE").unwrap();
    fs::create_dir(dir.path().join("sub")).unwrap();
    assert_eq!(fs::read(&f).unwrap(), b"hello through FUSE");
    let names: Vec<_> = fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names.len(), 2);
    // Mounting again on a busy mount point or with a pool in use is refused clearly.
    let again = TempDir::new("mnt2");
    let r = fails(["mount", pool.s(), again.path().to_str().unwrap()]);
    assert!(r.stderr.contains("in use"), "{}", r.stderr);
    ok(["umount", dir.path().to_str().unwrap()]);
    // The mount process closes the pool as it exits.
    wait_exit(pid);
    let r = ok(["info", pool.s()]);
    assert!(
        r.stdout.contains("cleanly unmounted") && !r.stdout.contains("not cleanly"),
        "{}",
        r.stdout
    );
    let r = ok(["fsck", pool.s()]);
    assert!(r.stdout.contains("clean"), "{}", r.stdout);
    let r = ok(["ls", &format!("{}:/", pool.s())]);
    assert!(
        r.stdout.contains("hello.txt") && r.stdout.contains("sub"),
        "{}",
        r.stdout
    );
}

#[test]
fn bad_mount_points_get_clear_errors() {
    let pool = TempPool::new("mount-bad");
    ok(["mkfs", pool.s(), "--size", "16M"]);
    let r = fails(["mount", pool.s(), "/nonexistent/engram-mnt"]);
    assert!(r.stderr.contains("does not exist"), "{}", r.stderr);
    let dir = TempDir::new("mnt-full");
    fs::write(dir.path().join("x"), b"x").unwrap();
    let r = fails(["mount", pool.s(), dir.path().to_str().unwrap()]);
    assert!(r.stderr.contains("not empty"), "{}", r.stderr);
}

/// A background mount killed with SIGKILL never marks the pool clean (its parent, which has
/// returned, must not either): the next open recovers it and fsck finds it consistent.
#[test]
fn killed_background_mount_is_recovered_at_next_open() {
    if !fuse_available() {
        return;
    }
    let pool = TempPool::new("mount-kill");
    ok(["mkfs", pool.s(), "--size", "64M"]);
    let dir = TempDir::new("mnt-kill");
    let r = ok(["mount", pool.s(), dir.path().to_str().unwrap()]);
    assert!(r.stdout.contains("mounted"), "{}", r.stdout);
    let pid = mount_pid(pool.s());
    fs::create_dir(dir.path().join("sub")).unwrap();
    for i in 0..16u64 {
        let f = dir.path().join(format!("sub/f{i}"));
        fs::write(&f, pattern(3000 * i as usize + 1, i)).unwrap();
    }
    fs::rename(dir.path().join("sub/f0"), dir.path().join("moved")).unwrap();
    fs::remove_file(dir.path().join("sub/f1")).unwrap();
    kill(pid, libc::SIGKILL);
    wait_exit(pid);
    lazy_unmount(dir.path());
    let r = ok(["info", pool.s()]);
    assert!(r.stdout.contains("not cleanly unmounted"), "{}", r.stdout);
    assert!(
        !r.stdout.contains(" 0 log records replayed"),
        "{}",
        r.stdout
    );
    let r = ok(["fsck", pool.s()]);
    assert!(r.stdout.contains("clean"), "{}", r.stdout);
    // Every operation that returned before the kill is in the pool.
    let r = ok(["ls", &pool.at("/sub")]);
    assert!(
        !r.stdout.contains("f1\n") && r.stdout.contains("f15"),
        "{}",
        r.stdout
    );
    let out = TempDir::new("kill-out");
    let local = out.path().join("f7");
    ok(["cp", &pool.at("/sub/f7"), local.to_str().unwrap()]);
    assert!(fs::read(&local).unwrap() == pattern(3000 * 7 + 1, 7));
    let local = out.path().join("moved");
    ok(["cp", &pool.at("/moved"), local.to_str().unwrap()]);
    assert!(fs::read(&local).unwrap() == pattern(1, 0));
}

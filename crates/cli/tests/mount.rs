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
    // engram umount returns once the mount process has closed the pool: it is clean and
    // free at once, before that process has even exited.
    let r = ok(["info", pool.s()]);
    assert!(
        r.stdout.contains("cleanly unmounted") && !r.stdout.contains("not cleanly"),
        "{}",
        r.stdout
    );
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

/// The mount options of the mount at `dir` (both fields: per mount and per super block).
fn mount_options(dir: &Path) -> String {
    let dir = dir.canonicalize().unwrap();
    let info = fs::read_to_string("/proc/self/mountinfo").unwrap();
    let line = info
        .lines()
        .rfind(|l| l.split(' ').nth(4) == dir.to_str())
        .unwrap_or_else(|| panic!("{} is not mounted", dir.display()));
    let fields: Vec<&str> = line.split(' ').collect();
    format!("{} {}", fields[5], fields.last().unwrap())
}

/// Run `cmd` as user nobody (runuser); its output.
fn as_nobody(cmd: &[&str]) -> std::process::Output {
    std::process::Command::new("runuser")
        .args(["-u", "nobody", "--"])
        .args(cmd)
        .env("LC_ALL", "C")
        .output()
        .expect("run runuser")
}

fn is_root() -> bool {
    // SAFETY: reads this process's effective uid.
    unsafe { libc::geteuid() == 0 }
}

/// Unmount through the binary and wait until the mount process has closed the pool; the
/// pool must then be clean.
fn umount_and_check_clean(pool: &TempPool, dir: &Path, pid: i32) {
    ok(["umount", dir.to_str().unwrap()]);
    wait_exit(pid);
    assert_clean_close(pool);
}

/// `engram info` says the pool was cleanly unmounted, and fsck finds it consistent.
fn assert_clean_close(pool: &TempPool) {
    let r = ok(["info", pool.s()]);
    assert!(
        r.stdout.contains("state:     cleanly unmounted"),
        "{}",
        r.stdout
    );
    let r = ok(["fsck", pool.s()]);
    assert!(r.stdout.contains("clean"), "{}", r.stdout);
}

/// `-o ro,allow_other`: every change fails with EROFS, and another user can read the mount.
#[test]
fn read_only_mount_shared_with_other_users() {
    if !fuse_available() {
        return;
    }
    let pool = TempPool::new("mount-ro");
    ok(["mkfs", pool.s(), "--size", "16M"]);
    let src = TempDir::new("ro-src");
    fs::write(src.path().join("f"), b"read me").unwrap();
    ok(["cp", src.path().join("f").to_str().unwrap(), &pool.at("/f")]);
    let dir = TempDir::new("mnt-ro");
    let d = dir.path();
    ok([
        "mount",
        pool.s(),
        d.to_str().unwrap(),
        "-o",
        "ro,allow_other",
    ]);
    let pid = mount_pid(pool.s());
    let opts = mount_options(d);
    assert!(
        opts.starts_with("ro,") && opts.contains("allow_other"),
        "{opts}"
    );
    assert_eq!(fs::read(d.join("f")).unwrap(), b"read me");
    let erofs = |r: std::io::Result<()>, what: &str| {
        let e = r.expect_err(what);
        assert_eq!(e.raw_os_error(), Some(libc::EROFS), "{what}: {e}");
    };
    erofs(fs::write(d.join("g"), b"x"), "create");
    erofs(
        fs::OpenOptions::new()
            .write(true)
            .open(d.join("f"))
            .map(drop),
        "open for writing",
    );
    erofs(fs::create_dir(d.join("sub")), "mkdir");
    erofs(fs::remove_file(d.join("f")), "unlink");
    erofs(fs::rename(d.join("f"), d.join("h")), "rename");
    erofs(std::os::unix::fs::symlink("f", d.join("l")), "symlink");
    erofs(fs::hard_link(d.join("f"), d.join("h")), "link");
    use std::os::unix::fs::PermissionsExt;
    erofs(
        fs::set_permissions(d.join("f"), fs::Permissions::from_mode(0o600)),
        "chmod",
    );
    if is_root() {
        // allow_other: without it the kernel refuses every other user, root's mount or not.
        let out = as_nobody(&["cat", d.join("f").to_str().unwrap()]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(out.stdout, b"read me");
    } else {
        eprintln!("SKIPPED the other-user part: it needs root to switch users");
    }
    umount_and_check_clean(&pool, d, pid);
    let r = ok(["ls", &pool.at("/")]);
    assert_eq!(r.stdout.trim(), "f", "{}", r.stdout);
}

/// Without allow_other, another user cannot even look at a mount.
#[test]
fn without_allow_other_other_users_are_refused() {
    if !fuse_available() || !is_root() {
        eprintln!("SKIPPED: needs /dev/fuse and root to switch users");
        return;
    }
    let pool = TempPool::new("mount-owner");
    ok(["mkfs", pool.s(), "--size", "16M"]);
    let dir = TempDir::new("mnt-owner");
    let d = dir.path();
    ok(["mount", pool.s(), d.to_str().unwrap()]);
    let pid = mount_pid(pool.s());
    assert!(!mount_options(d).contains("allow_other"));
    fs::write(d.join("f"), b"mine").unwrap();
    let out = as_nobody(&["cat", d.join("f").to_str().unwrap()]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("Permission denied"), "{err}");
    umount_and_check_clean(&pool, d, pid);
}

/// `engram mount --foreground`: says when the mount is live, and SIGTERM or SIGINT unmounts
/// it and leaves the pool clean.
#[test]
fn foreground_mount_ends_cleanly_on_sigterm_and_sigint() {
    use std::io::BufRead;
    if !fuse_available() {
        return;
    }
    let pool = TempPool::new("mount-fg");
    ok(["mkfs", pool.s(), "--size", "16M"]);
    let dir = TempDir::new("mnt-fg");
    let d = dir.path();
    for (sig, name) in [(libc::SIGTERM, "term"), (libc::SIGINT, "int")] {
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_engram"))
            .args(["mount", "--foreground", pool.s(), d.to_str().unwrap()])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
        out.read_line(&mut line).unwrap();
        assert!(line.starts_with("mounted "), "{line:?}");
        fs::write(d.join(name), name.as_bytes()).unwrap();
        let f = dir.path().join(format!("{name}-dir"));
        fs::create_dir(&f).unwrap();
        kill(child.id() as i32, sig);
        let res = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&res.stderr);
        assert!(res.status.success(), "{}: {err}", res.status);
        assert!(err.contains("unmounting"), "{err}");
        assert!(!panicked(&err), "{err}");
        assert_eq!(fs::read_dir(d).unwrap().count(), 0, "still mounted");
        assert_clean_close(&pool);
    }
    let r = ok(["ls", &pool.at("/")]);
    let mut names: Vec<&str> = r.stdout.lines().collect();
    names.sort();
    assert_eq!(
        names,
        ["int", "int-dir", "term", "term-dir"],
        "{}",
        r.stdout
    );
}

/// truncate(2) of a path.
fn truncate_path(p: &Path, len: libc::off_t) -> std::io::Result<()> {
    let c = CString::new(p.as_os_str().as_bytes()).unwrap();
    // SAFETY: `c` is a NUL-terminated path that lives for the call.
    if unsafe { libc::truncate(c.as_ptr(), len) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

fn panicked(s: &str) -> bool {
    s.contains("panicked") || s.contains("RUST_BACKTRACE")
}

/// truncate(2) by path and chown through a mount; as another user, chown is refused.
#[test]
fn truncate_by_path_and_chown() {
    use std::os::unix::fs::MetadataExt;
    if !fuse_available() {
        return;
    }
    let pool = TempPool::new("mount-setattr");
    ok(["mkfs", pool.s(), "--size", "16M"]);
    let dir = TempDir::new("mnt-setattr");
    let d = dir.path();
    ok(["mount", pool.s(), d.to_str().unwrap(), "-o", "allow_other"]);
    let pid = mount_pid(pool.s());
    let f = d.join("f");
    let data = pattern(10_000, 3);
    fs::write(&f, &data).unwrap();
    let truncate = |len| truncate_path(&f, len).unwrap();
    truncate(5000);
    assert_eq!(fs::metadata(&f).unwrap().len(), 5000);
    assert_eq!(fs::read(&f).unwrap(), &data[..5000]);
    truncate(9000);
    let got = fs::read(&f).unwrap();
    assert_eq!(got.len(), 9000);
    assert!(got[..5000] == data[..5000] && got[5000..].iter().all(|&b| b == 0));
    truncate(0);
    assert_eq!(fs::metadata(&f).unwrap().len(), 0);
    let e = truncate_path(d, 0).unwrap_err();
    assert_eq!(
        e.raw_os_error(),
        Some(libc::EISDIR),
        "truncate of a directory: {e}"
    );
    if is_root() {
        std::os::unix::fs::chown(&f, Some(65534), Some(65534)).unwrap();
        let m = fs::metadata(&f).unwrap();
        assert_eq!((m.uid(), m.gid()), (65534, 65534));
        // The new owner may not give the file away, nor may anyone else take it.
        let g = d.join("g");
        fs::write(&g, b"root's").unwrap();
        for (file, to) in [(&f, "root"), (&g, "nobody")] {
            let out = as_nobody(&["chown", to, file.to_str().unwrap()]);
            assert!(!out.status.success(), "chown {to} {}", file.display());
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(err.contains("Operation not permitted"), "{err}");
        }
        assert_eq!(fs::metadata(&f).unwrap().uid(), 65534);
        assert_eq!(fs::metadata(&g).unwrap().uid(), 0);
        // The owner may truncate its own file by path; another user may not.
        fs::write(&f, b"nobody's data").unwrap();
        let out = as_nobody(&["truncate", "-s", "6", f.to_str().unwrap()]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(fs::read(&f).unwrap(), b"nobody");
        let out = as_nobody(&["truncate", "-s", "0", g.to_str().unwrap()]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("Permission denied"), "{err}");
        assert_eq!(fs::read(&g).unwrap(), b"root's");
    } else {
        eprintln!("SKIPPED the chown part: it needs root");
    }
    umount_and_check_clean(&pool, d, pid);
}

//! `engram mount` / `engram umount` through the binary: background mount, ordinary tools on
//! the mount point, clean pool afterwards, clear errors for bad mount points.

mod common;

use common::{TempDir, TempPool, engram, fails, ok};
use std::fs;

fn fuse_available() -> bool {
    if !std::path::Path::new("/dev/fuse").exists() {
        eprintln!("SKIPPED: /dev/fuse is absent");
        return false;
    }
    true
}

#[test]
fn mount_use_umount_leaves_a_clean_pool() {
    if !fuse_available() {
        return;
    }
    let pool = TempPool::new("mount");
    ok(["mkfs", pool.s(), "--size", "64M"]);
    let dir = TempDir::new("mnt");
    let r = engram(["mount", pool.s(), dir.path().to_str().unwrap()]);
    if r.code != 0 && r.stderr.contains("refused") {
        eprintln!("SKIPPED: this process may not mount: {}", r.stderr);
        return;
    }
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.contains("mounted"), "{}", r.stdout);
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
    let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let r = engram(["fsck", pool.s()]);
        if r.code == 0 {
            assert!(r.stdout.contains("clean"), "{}", r.stdout);
            break;
        }
        assert!(
            std::time::Instant::now() < until,
            "pool still busy: {}",
            r.stderr
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
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

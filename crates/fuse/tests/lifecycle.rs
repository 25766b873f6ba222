//! The life of a mount: unmounted from outside, ended by a signal (as `engram mount
//! --foreground` runs it, in a child process), and mounting a pool that a daemon serves.

mod support;

use engram_core::{Fs, Options};
use engram_fuse::MountOptions;
use std::fs::File;
use std::path::Path;
use std::time::{Duration, Instant};
use support::*;

#[test]
fn unmounted_from_outside() {
    let s = Scratch::new("outside");
    let Some(m) = s.mount(&MountOptions::default()) else {
        return;
    };
    let d = m.mount_point().to_path_buf();
    std::fs::write(d.join("f"), b"before umount").unwrap();
    // The mount point stays busy while a file is open in it.
    let busy = File::open(d.join("f")).unwrap();
    sh_fails(Path::new("/"), &format!("umount '{}'", d.display()));
    drop(busy);
    sh(Path::new("/"), &format!("umount '{}'", d.display()));
    let t = Instant::now();
    while m.is_mounted() {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "the session did not end"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let fs = m.into_fs().unwrap();
    assert_eq!(fs.read_file("/f").unwrap(), b"before umount");
    assert_clean(&fs);
    fs.unmount().unwrap();
    assert!(
        Fs::open(&s.pool, &Options::default())
            .unwrap()
            .mount_info()
            .was_clean
    );
}

const CHILD_POOL: &str = "ENGRAM_FUSE_TEST_CHILD_POOL";
const CHILD_DIR: &str = "ENGRAM_FUSE_TEST_CHILD_DIR";

/// The blocking mount as `engram mount --foreground` runs it, in a child process.
#[test]
#[ignore = "run by signals_unmount_a_blocking_mount in a child process"]
fn blocking_mount_child() {
    let (Ok(pool), Ok(dir)) = (std::env::var(CHILD_POOL), std::env::var(CHILD_DIR)) else {
        return;
    };
    let fs = Fs::open(&pool, &Options::default()).unwrap();
    engram_fuse::mount(fs, dir.as_ref(), &MountOptions::default()).unwrap();
}

fn mounted_at(dir: &Path) -> bool {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    info.lines().any(|l| l.split(' ').nth(4) == dir.to_str())
}

#[test]
fn signals_unmount_a_blocking_mount() {
    let s = Scratch::new("signal");
    // Skip where mounting is impossible.
    let Some(m) = s.mount(&MountOptions::default()) else {
        return;
    };
    let dir = m.mount_point().to_path_buf();
    m.unmount().unwrap();
    for sig in [libc::SIGTERM, libc::SIGINT] {
        let mut child = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "blocking_mount_child",
                "--ignored",
                "--nocapture",
            ])
            .env(CHILD_POOL, &s.pool)
            .env(CHILD_DIR, &dir)
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let t = Instant::now();
        while !mounted_at(&dir) {
            assert!(
                t.elapsed() < Duration::from_secs(20),
                "the child did not mount"
            );
            assert!(child.try_wait().unwrap().is_none(), "the child exited");
            std::thread::sleep(Duration::from_millis(20));
        }
        std::fs::write(dir.join(format!("sig{sig}")), b"x").unwrap();
        // SAFETY: signals the child we spawned (by its id).
        assert_eq!(unsafe { libc::kill(child.id() as libc::pid_t, sig) }, 0);
        let status = child.wait().unwrap();
        assert!(status.success(), "the child ended with {status}");
        assert!(!mounted_at(&dir));
        let fs = s.open();
        assert!(fs.mount_info().was_clean, "the pool was left clean");
        assert_eq!(fs.read_file(format!("/sig{sig}")).unwrap(), b"x");
        assert_clean(&fs);
    }
}

/// A pool served by `engram serve`: the mount is one client among others, so what the
/// others change shows through the mount (data at the next open, names within the TTL).
#[test]
fn mount_of_a_pool_shared_through_the_daemon() {
    use engram_core::daemon::{ServeOptions, serve};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    if !fuse_present() {
        return;
    }
    let s = Scratch::new("shared");
    let socket = s.root.join("pool.sock");
    let stop = Arc::new(AtomicBool::new(false));
    let daemon = {
        let (pool, socket, stop) = (s.pool.clone(), socket.clone(), stop.clone());
        std::thread::spawn(move || {
            let opts = ServeOptions {
                socket,
                idle_exit: None,
                log_clients: true,
            };
            serve(&pool, &opts, &stop, &|line| eprintln!("daemon: {line}"))
        })
    };
    let t = Instant::now();
    while !socket.exists() {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "the daemon did not start"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let Some(m) = s.mount_fs(Fs::connect(&socket).unwrap(), &MountOptions::default()) else {
        stop.store(true, Ordering::SeqCst);
        return;
    };
    let d = m.mount_point().to_path_buf();
    let other = Fs::connect(&socket).unwrap();
    std::fs::write(d.join("f"), b"version 1").unwrap();
    assert_eq!(std::fs::read(d.join("f")).unwrap(), b"version 1");
    // Rewritten in place by another client: the next open through the mount sees it.
    let f = other
        .open_file("/f", &engram_core::OpenOptions::new().write(true))
        .unwrap();
    f.write_at(b"VERSION", 0).unwrap();
    drop(f);
    assert_eq!(std::fs::read(d.join("f")).unwrap(), b"VERSION 1");
    // A name created by another client appears within the TTL, even if looked up before.
    assert!(!d.join("g").exists());
    other.write_file("/g", b"from the other client").unwrap();
    let t = Instant::now();
    while !d.join("g").exists() {
        assert!(
            t.elapsed() < Duration::from_secs(3),
            "the new name never appeared"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        std::fs::read(d.join("g")).unwrap(),
        b"from the other client"
    );
    assert_eq!(other.read_file("/f").unwrap(), b"VERSION 1");
    m.unmount().unwrap();
    drop(other);
    stop.store(true, Ordering::SeqCst);
    daemon.join().unwrap().unwrap();
    let fs = s.open();
    assert!(fs.mount_info().was_clean);
    assert_eq!(fs.read_file("/g").unwrap(), b"from the other client");
    assert_clean(&fs);
}

//! `engram mkfs`, `info` and `fsck` on a block device (a loop device; root and `losetup`
//! needed, skipped with a message otherwise), and `mkfs` without a size on a file.

mod common;

use common::{TempPool, fails, ok};
use std::path::PathBuf;
use std::process::Command;
use std::sync::{Mutex, MutexGuard};

/// A file in the temporary directory attached to a loop device; detached and removed on drop.
struct LoopDevice {
    file: PathBuf,
    dev: String,
    /// Released after the device is detached (fields drop after `drop`).
    _serial: MutexGuard<'static, ()>,
}

impl LoopDevice {
    fn new(tag: &str, size: u64) -> Option<LoopDevice> {
        // One device test at a time: `losetup` spawned by one test inherits, between fork
        // and exec, the pool descriptor another test is about to close, and with it that
        // descriptor's flock, so the other test's reopen would see the pool as busy.
        static SERIAL: Mutex<()> = Mutex::new(());
        let serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipped: loop devices need root");
            return None;
        }
        if Command::new("losetup").arg("--version").output().is_err() {
            eprintln!("skipped: losetup is not installed");
            return None;
        }
        let file =
            std::env::temp_dir().join(format!("engram-cli-loop-{}-{tag}", std::process::id()));
        std::fs::write(&file, vec![0xa5u8; size as usize]).unwrap();
        let out = Command::new("losetup")
            .args(["--find", "--show"])
            .arg(&file)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "losetup failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let dev = String::from_utf8(out.stdout).unwrap().trim().to_string();
        Some(LoopDevice {
            file,
            dev,
            _serial: serial,
        })
    }
}

impl Drop for LoopDevice {
    fn drop(&mut self) {
        let _ = Command::new("losetup").args(["-d", &self.dev]).status();
        let _ = std::fs::remove_file(&self.file);
    }
}

#[test]
fn mkfs_info_cp_fsck_on_a_loop_device() {
    let Some(dev) = LoopDevice::new("cli", 16 << 20) else {
        return;
    };
    let r = ok(["mkfs", &dev.dev]);
    assert!(
        r.stdout.contains("(a device of 16 MiB): 16 MiB pool"),
        "{}",
        r.stdout
    );
    let info = ok(["info", &dev.dev]);
    for want in [
        "media:     page cache (msync",
        "device:    block device of 16 MiB",
        "not DAX",
    ] {
        assert!(
            info.stdout.contains(want),
            "info lacks {want:?}:\n{}",
            info.stdout
        );
    }
    let local = std::env::temp_dir().join(format!("engram-cli-loop-{}-src", std::process::id()));
    std::fs::write(&local, b"on a device").unwrap();
    ok(["cp", local.to_str().unwrap(), &format!("{}:/f", dev.dev)]);
    let _ = std::fs::remove_file(&local);
    let r = ok(["ls", &format!("{}:/", dev.dev)]);
    assert!(r.stdout.contains('f'), "{}", r.stdout);
    let r = ok(["fsck", &dev.dev]);
    assert!(r.stdout.contains("clean"), "{}", r.stdout);
    // Larger than the device: refused; smaller: formatted.
    let r = fails(["mkfs", &dev.dev, "--size", "32M"]);
    assert!(r.stderr.contains("less than"), "{}", r.stderr);
    let r = ok(["mkfs", &dev.dev, "--size", "8M"]);
    assert!(
        r.stdout.contains("(a device of 16 MiB): 8 MiB pool"),
        "{}",
        r.stdout
    );
    ok(["fsck", &dev.dev]);
}

#[test]
fn mkfs_of_a_file_needs_a_size() {
    let pool = TempPool::new("nosize");
    let r = fails(["mkfs", pool.s()]);
    assert!(r.stderr.contains("--size is required"), "{}", r.stderr);
    assert!(!pool.path().exists());
}

//! Pools on a block device, through a loop device (root and `losetup` needed; skipped with a
//! message otherwise): formatted in place, the size its own or smaller, durable through the
//! page cache with `msync`.

mod common;

use common::{assert_clean, pattern};
use engram_core::{Fs, OpenOptions, Options};
use engram_pmem::{Backing, Media};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, MutexGuard};

const MIB: u64 = 1 << 20;

/// A file in the temporary directory attached to a loop device; detached and removed on drop.
struct LoopDevice {
    file: PathBuf,
    dev: PathBuf,
    /// Released after the device is detached (fields drop after `drop`).
    _serial: MutexGuard<'static, ()>,
}

impl LoopDevice {
    /// None (with a message) when the test cannot run here: not root, or no `losetup`.
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
        let file = std::env::temp_dir().join(format!("engram-loop-{}-{tag}", std::process::id()));
        // Old bytes everywhere: a device is not zero when it is formatted.
        let f = std::fs::File::create(&file).unwrap();
        let junk = pattern(7, MIB as usize);
        for i in 0..size / MIB {
            f.write_all_at(&junk, i * MIB).unwrap();
        }
        drop(f);
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
        let dev = PathBuf::from(String::from_utf8(out.stdout).unwrap().trim());
        Some(LoopDevice {
            file,
            dev,
            _serial: serial,
        })
    }

    fn path(&self) -> &Path {
        &self.dev
    }
}

impl Drop for LoopDevice {
    fn drop(&mut self) {
        let _ = Command::new("losetup").arg("-d").arg(&self.dev).status();
        let _ = std::fs::remove_file(&self.file);
    }
}

fn open(dev: &Path) -> Fs {
    match Fs::open(dev, &Options::default()) {
        Ok(f) => f,
        Err(e) => {
            // Say who else holds the device, if anyone.
            let locks = std::fs::read_to_string("/proc/locks").unwrap_or_default();
            let out = Command::new("losetup").arg("-a").output().unwrap();
            panic!(
                "cannot open {}: {e}\n/proc/locks:\n{locks}\nlosetup -a:\n{}",
                dev.display(),
                String::from_utf8_lossy(&out.stdout)
            );
        }
    }
}

#[test]
fn pool_on_a_whole_block_device() {
    let Some(dev) = LoopDevice::new("whole", 32 * MIB) else {
        return;
    };
    let size = engram_pmem::device_size(dev.path()).unwrap();
    assert_eq!(size, Some(32 * MIB));
    Fs::mkfs(dev.path(), 32 * MIB).unwrap();
    let fs = open(dev.path());
    assert_eq!(fs.pool().backing(), Backing::BlockDevice);
    assert_eq!(
        fs.mount_info().media,
        Media::File,
        "not DAX: the msync path"
    );
    assert_eq!(fs.mount_info().geometry.pool_size, 32 * MIB);
    // The old bytes of the device are not mistaken for inodes.
    assert_clean(&fs);
    fs.mkdir("/d", 0o755).unwrap();
    let data = pattern(3, 5 * MIB as usize + 77);
    fs.write_file("/d/f", &data).unwrap();
    {
        let f = fs
            .open_file("/d/f", &OpenOptions::new().read(true).write(true))
            .unwrap();
        f.write_at(b"in place", 1000).unwrap();
        f.sync_all().unwrap();
    }
    fs.unmount().unwrap();
    let fs = open(dev.path());
    assert!(fs.mount_info().was_clean);
    let mut want = data;
    want[1000..1008].copy_from_slice(b"in place");
    assert_eq!(fs.read_file("/d/f").unwrap(), want);
    assert_clean(&fs);
    fs.unmount().unwrap();
}

#[test]
fn smaller_pool_on_a_block_device_and_too_large_a_one() {
    let Some(dev) = LoopDevice::new("part", 24 * MIB) else {
        return;
    };
    let e = Fs::mkfs(dev.path(), 32 * MIB).unwrap_err();
    assert!(e.to_string().contains("less than"), "{e}");
    Fs::mkfs(dev.path(), 16 * MIB).unwrap();
    let sb = Fs::superblock(dev.path()).unwrap();
    assert_eq!(sb.geometry.pool_size, 16 * MIB);
    let fs = open(dev.path());
    assert_eq!(fs.pool().len(), 24 * MIB);
    assert_eq!(fs.mount_info().geometry.pool_size, 16 * MIB);
    fs.write_file("/x", b"x").unwrap();
    drop(fs);
    let fs = open(dev.path());
    assert_eq!(fs.read_file("/x").unwrap(), b"x");
    assert_clean(&fs);
}

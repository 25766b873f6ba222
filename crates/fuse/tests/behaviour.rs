//! Linux semantics through the mount that the tools do not reach: renameat2 flags,
//! fallocate, copy_file_range, unlinked open files, O_APPEND, statvfs, errors; other users
//! and permissions; read-only mounts.

mod support;

use engram_fuse::MountOptions;
use std::ffi::CString;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;
use support::*;

fn c(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap()
}

/// The errno of a failed call returning -1, or 0 if it succeeded.
fn err(r: impl Into<i64>) -> i32 {
    if r.into() < 0 {
        std::io::Error::last_os_error().raw_os_error().unwrap()
    } else {
        0
    }
}

fn errno_of<T>(r: std::io::Result<T>) -> i32 {
    r.err().and_then(|e| e.raw_os_error()).unwrap_or(0)
}

fn renameat2(from: &Path, to: &Path, flags: u32) -> i32 {
    let (a, b) = (c(from), c(to));
    // SAFETY: both paths are NUL-terminated and live for the call.
    err(unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            a.as_ptr(),
            libc::AT_FDCWD,
            b.as_ptr(),
            flags,
        )
    })
}

#[test]
fn syscalls_through_the_mount() {
    let s = Scratch::new("syscalls");
    let Some(m) = s.mount(&MountOptions::default()) else {
        return;
    };
    let d = m.mount_point().to_path_buf();
    let (a, b) = (d.join("a"), d.join("b"));
    std::fs::write(&a, b"AAA").unwrap();
    std::fs::write(&b, b"BB").unwrap();

    // renameat2: NOREPLACE refuses, EXCHANGE swaps, WHITEOUT is not supported.
    assert_eq!(renameat2(&a, &b, libc::RENAME_NOREPLACE), libc::EEXIST);
    assert_eq!(renameat2(&a, &d.join("c"), libc::RENAME_NOREPLACE), 0);
    assert_eq!(renameat2(&d.join("c"), &b, libc::RENAME_EXCHANGE), 0);
    assert_eq!(std::fs::read(&b).unwrap(), b"AAA");
    assert_eq!(std::fs::read(d.join("c")).unwrap(), b"BB");
    assert_eq!(
        renameat2(&b, &d.join("c"), libc::RENAME_WHITEOUT),
        libc::EINVAL
    );
    std::fs::create_dir_all(d.join("dir/sub")).unwrap();
    assert_eq!(
        errno_of(std::fs::rename(d.join("dir"), d.join("dir/sub/x"))),
        libc::EINVAL
    );
    assert_eq!(
        errno_of(std::fs::remove_dir(d.join("dir"))),
        libc::ENOTEMPTY
    );
    // A directory moved to another parent: both parents' link counts follow.
    std::fs::create_dir(d.join("other")).unwrap();
    std::fs::write(d.join("dir/sub/f"), b"f").unwrap();
    std::fs::rename(d.join("dir/sub"), d.join("other/sub")).unwrap();
    let nlink = |p: &str| std::fs::metadata(d.join(p)).unwrap().nlink();
    assert_eq!(
        (nlink("dir"), nlink("other"), nlink("other/sub")),
        (2, 3, 2)
    );
    assert_eq!(std::fs::read(d.join("other/sub/../sub/f")).unwrap(), b"f");
    assert_eq!(
        errno_of(std::fs::hard_link(d.join("dir"), d.join("dirlink"))),
        libc::EPERM
    );

    // fallocate: mode 0 extends, KEEP_SIZE only reserves.
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(d.join("alloc"))
        .unwrap();
    // SAFETY: fallocate on a descriptor we own.
    assert_eq!(
        err(unsafe { libc::fallocate(f.as_raw_fd(), 0, 0, 1 << 20) }),
        0
    );
    assert_eq!(f.metadata().unwrap().len(), 1 << 20);
    // SAFETY: as above.
    let keep =
        unsafe { libc::fallocate(f.as_raw_fd(), libc::FALLOC_FL_KEEP_SIZE, 1 << 20, 1 << 20) };
    assert_eq!(err(keep), 0);
    assert_eq!(f.metadata().unwrap().len(), 1 << 20);
    assert!(
        f.metadata().unwrap().blocks() >= 4096,
        "{}",
        f.metadata().unwrap().blocks()
    );
    // A punched hole reads as zeros (the kernel drops its cached pages of the range) and
    // frees its pages; the size stays.
    f.write_all_at(&[7u8; 3 * 4096], 0).unwrap();
    let blocks = f.metadata().unwrap().blocks();
    let punch = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
    // SAFETY: as above.
    assert_eq!(
        err(unsafe { libc::fallocate(f.as_raw_fd(), punch, 4096, 4096 + 10) }),
        0
    );
    let mut got = vec![0u8; 3 * 4096];
    f.read_exact_at(&mut got, 0).unwrap();
    let mut want = vec![7u8; 3 * 4096];
    want[4096..2 * 4096 + 10].fill(0);
    assert!(
        got == want,
        "the punched range reads as zeros, the rest is kept"
    );
    assert_eq!(f.metadata().unwrap().blocks(), blocks - 8);
    assert_eq!(f.metadata().unwrap().len(), 1 << 20);
    // A punch must keep the size, as Linux says.
    // SAFETY: as above.
    assert_eq!(
        err(unsafe { libc::fallocate(f.as_raw_fd(), libc::FALLOC_FL_PUNCH_HOLE, 0, 4096) }),
        libc::EOPNOTSUPP
    );
    // Zeroing a range, growing the file.
    let zero = libc::FALLOC_FL_ZERO_RANGE;
    // SAFETY: as above.
    assert_eq!(
        err(unsafe { libc::fallocate(f.as_raw_fd(), zero, 2 * 4096, 1 << 20) }),
        0
    );
    assert_eq!(f.metadata().unwrap().len(), (1 << 20) + 2 * 4096);
    f.read_exact_at(&mut got, 0).unwrap();
    want[2 * 4096..].fill(0);
    assert!(got == want, "the zeroed range reads as zeros");
    drop(f);

    // SEEK_DATA/SEEK_HOLE: data in pages 0, 4 (stored through a mapping) and 12 of a
    // 100,000-byte file, as on tmpfs.
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(d.join("sparse"))
        .unwrap();
    f.write_all_at(b"head", 0).unwrap();
    f.set_len(100_000).unwrap();
    f.write_all_at(b"z", 50_000).unwrap();
    let seek = |f: &File, off: i64, whence: i32| {
        // SAFETY: lseek on a descriptor we own.
        let r = unsafe { libc::lseek(f.as_raw_fd(), off, whence) };
        if r < 0 { -(err(-1) as i64) } else { r }
    };
    // While a handle may write (a shared mapping keeps one), stores may sit in the
    // kernel's page cache: the whole file is data, as Linux's generic answer.
    // SAFETY: a shared mapping of a descriptor we own, stored into and unmapped below.
    unsafe {
        let m = libc::mmap(
            std::ptr::null_mut(),
            100_000,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            f.as_raw_fd(),
            0,
        );
        assert_ne!(m, libc::MAP_FAILED);
        *(m as *mut u8).add(20_000) = b'x';
        assert_eq!(seek(&f, 5000, libc::SEEK_DATA), 5000);
        assert_eq!(seek(&f, 0, libc::SEEK_HOLE), 100_000);
        assert_eq!(seek(&f, 100_000, libc::SEEK_DATA), -(libc::ENXIO as i64));
        assert_eq!(libc::munmap(m, 100_000), 0);
    }
    drop(f);
    let f = File::open(d.join("sparse")).unwrap();
    assert_eq!(seek(&f, 0, libc::SEEK_HOLE), 4096);
    assert_eq!(
        seek(&f, 5000, libc::SEEK_DATA),
        16384,
        "the store through the mapping"
    );
    assert_eq!(seek(&f, 16384, libc::SEEK_HOLE), 20480);
    assert_eq!(seek(&f, 20480, libc::SEEK_DATA), 49152);
    assert_eq!(seek(&f, 49152, libc::SEEK_HOLE), 53248);
    assert_eq!(seek(&f, 60000, libc::SEEK_DATA), -(libc::ENXIO as i64));
    assert_eq!(seek(&f, 60000, libc::SEEK_HOLE), 60000);
    drop(f);

    // copy_file_range inside the mount, at unaligned offsets.
    let data = bytes(5, 3 << 20);
    std::fs::write(d.join("src"), &data).unwrap();
    let src = File::open(d.join("src")).unwrap();
    let dst = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(d.join("dst"))
        .unwrap();
    let (mut off_in, mut off_out) = (1000i64, 7i64);
    let mut left = data.len() - 1000;
    while left > 0 {
        // SAFETY: both descriptors are open and the offsets live for the call.
        let n = unsafe {
            libc::copy_file_range(
                src.as_raw_fd(),
                &mut off_in,
                dst.as_raw_fd(),
                &mut off_out,
                left,
                0,
            )
        };
        assert!(
            n > 0,
            "copy_file_range: {}",
            std::io::Error::last_os_error()
        );
        left -= n as usize;
    }
    drop((src, dst));
    let got = std::fs::read(d.join("dst")).unwrap();
    assert_eq!(got.len(), 7 + data.len() - 1000);
    assert!(got[..7].iter().all(|&b| b == 0) && got[7..] == data[1000..]);

    // A file unlinked while open keeps working until closed.
    let mut f = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(d.join("tmp"))
        .unwrap();
    f.write_all(&bytes(6, 100_000)).unwrap();
    std::fs::remove_file(d.join("tmp")).unwrap();
    assert!(!d.join("tmp").exists());
    assert_eq!(f.metadata().unwrap().nlink(), 0);
    f.write_all_at(b"still here", 50_000).unwrap();
    let mut back = vec![0u8; 10];
    f.read_exact_at(&mut back, 50_000).unwrap();
    assert_eq!(&back, b"still here");
    f.sync_all().unwrap();
    f.sync_data().unwrap();
    drop(f);

    // O_APPEND from two descriptors interleaves whole writes at the end.
    let mut x = OpenOptions::new()
        .append(true)
        .create(true)
        .open(d.join("log"))
        .unwrap();
    let mut y = OpenOptions::new().append(true).open(d.join("log")).unwrap();
    for i in 0..50 {
        x.write_all(format!("x{i:02}\n").as_bytes()).unwrap();
        y.write_all(format!("y{i:02}\n").as_bytes()).unwrap();
    }
    drop((x, y));
    let log = std::fs::read_to_string(d.join("log")).unwrap();
    assert_eq!(log.len(), 400);
    assert!(log.starts_with("x00\ny00\nx01\n") && log.ends_with("y49\n"));

    // A file created read-only may still be written through its creating descriptor.
    let mut ro = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o444)
        .open(d.join("ro"))
        .unwrap();
    ro.write_all(b"written anyway").unwrap();
    ro.set_len(7).unwrap();
    drop(ro);
    assert_eq!(std::fs::read(d.join("ro")).unwrap(), b"written");
    assert_eq!(
        std::fs::metadata(d.join("ro")).unwrap().mode() & 0o7777,
        0o444
    );

    // Errors.
    let excl = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(d.join("ro"));
    assert_eq!(errno_of(excl), libc::EEXIST);
    assert_eq!(
        errno_of(OpenOptions::new().write(true).open(d.join("dir"))),
        libc::EISDIR
    );
    assert_eq!(
        errno_of(std::fs::write(d.join("n".repeat(256)), b"")),
        libc::ENAMETOOLONG
    );
    assert_eq!(errno_of(std::fs::read(d.join("missing"))), libc::ENOENT);
    let node = c(&d.join("node"));
    // SAFETY: as above; mknod of a regular file.
    assert_eq!(
        err(unsafe { libc::mknod(node.as_ptr(), libc::S_IFREG | 0o600, 0) }),
        0
    );
    assert!(std::fs::metadata(d.join("node")).unwrap().is_file());

    // statvfs reports the pool.
    let root = c(&d);
    // SAFETY: `st` is filled in by statvfs.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: a NUL-terminated path and a statvfs to fill.
    assert_eq!(err(unsafe { libc::statvfs(root.as_ptr(), &mut st) }), 0);
    assert_eq!((st.f_bsize, st.f_namemax), (4096, 255));
    assert!(st.f_blocks > st.f_bfree && st.f_bfree > 0 && st.f_files > st.f_ffree);

    // A listing stays exact while entries are removed under it.
    std::fs::create_dir(d.join("list")).unwrap();
    for i in 0..1000 {
        File::create(d.join(format!("list/{i}"))).unwrap();
    }
    let mut seen = std::collections::BTreeSet::new();
    for (k, e) in std::fs::read_dir(d.join("list")).unwrap().enumerate() {
        let name = e.unwrap().file_name().into_string().unwrap();
        assert!(seen.insert(name.clone()), "{name} listed twice");
        if k % 2 == 0 {
            let victim = format!("{}", 999 - k);
            if !seen.contains(&victim) {
                std::fs::remove_file(d.join("list").join(&victim)).unwrap();
            }
        }
    }
    let left: std::collections::BTreeSet<_> = std::fs::read_dir(d.join("list"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert!(left.is_subset(&seen), "every surviving entry was listed");

    // A 1 MiB read through a descriptor, and seeking.
    let mut f = File::open(d.join("src")).unwrap();
    f.seek(SeekFrom::Start(12345)).unwrap();
    let mut buf = vec![0u8; 1 << 20];
    f.read_exact(&mut buf).unwrap();
    assert!(buf == data[12345..12345 + (1 << 20)]);
    drop(f);

    let fs = m.into_fs().unwrap();
    assert_eq!(fs.read_file("/b").unwrap(), b"AAA");
    assert_eq!(fs.stat("/alloc").unwrap().size, (1 << 20) + 2 * 4096);
    assert_eq!(fs.read_file("/log").unwrap(), log.as_bytes());
    assert_clean(&fs);
    fs.unmount().unwrap();
}

/// Run a shell script as uid/gid 65534 with the given supplementary groups.
fn as_nobody(dir: &Path, groups: &str, script: &str) -> std::process::Output {
    std::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534"])
        .arg(if groups.is_empty() {
            "--clear-groups".to_string()
        } else {
            format!("--groups={groups}")
        })
        .args(["sh", "-c", script])
        .current_dir(dir)
        .env("LC_ALL", "C")
        .output()
        .expect("cannot run setpriv")
}

#[test]
fn other_users_and_permissions() {
    let s = Scratch::new("perms");
    let opts = MountOptions {
        allow_other: true,
        read_only: false,
    };
    let Some(m) = s.mount(&opts) else {
        return;
    };
    let d = m.mount_point().to_path_buf();
    // SAFETY: getuid only reads this process's credentials.
    if unsafe { libc::getuid() } != 0 {
        eprintln!("SKIPPED the other-user part: it needs root to switch users");
        return;
    }
    let mode = |p: &str, m: u32| {
        std::fs::set_permissions(d.join(p), std::fs::Permissions::from_mode(m)).unwrap()
    };
    std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).unwrap();
    for (p, m) in [
        ("open", 0o777),
        ("closed", 0o755),
        ("sticky", 0o1777),
        ("group", 0o770),
    ] {
        std::fs::create_dir(d.join(p)).unwrap();
        mode(p, m);
    }
    std::os::unix::fs::chown(d.join("group"), None, Some(4242)).unwrap();
    std::fs::write(d.join("secret"), b"s").unwrap();
    mode("secret", 0o600);
    std::fs::write(d.join("sticky/roots"), b"r").unwrap();
    mode("sticky/roots", 0o666);

    let denied = |groups: &str, script: &str, what: &str| {
        let out = as_nobody(&d, groups, script);
        let msg = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && msg.contains(what),
            "`{script}`: {msg}"
        );
    };
    denied("", "cat secret", "Permission denied");
    denied("", "touch closed/x", "Permission denied");
    denied("", "chmod 777 closed", "Operation not permitted");
    denied("", "rm -f sticky/roots", "Operation not permitted");
    denied("", "touch group/x", "Permission denied");
    // Writable but not owned: "now" is allowed, an explicit time is not.
    denied(
        "",
        "touch -d 2000-01-01 sticky/roots",
        "Operation not permitted",
    );
    assert!(as_nobody(&d, "", "touch sticky/roots").status.success());
    let ok = as_nobody(
        &d,
        "",
        "touch open/x && mkdir open/d && ln -s x open/l && echo hi >> sticky/roots && stat -c '%u:%g' open/x open/d open/l",
    );
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&ok.stdout),
        "65534:65534\n65534:65534\n65534:65534\n"
    );
    // Group access through a supplementary group (read from /proc by the front end).
    let ok = as_nobody(
        &d,
        "4242",
        "touch group/y && mv group/y group/z && stat -c '%u:%g' group/z && rm group/z",
    );
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&ok.stdout), "65534:65534\n");
    // A set-group-ID directory hands its group down.
    mode("group", 0o2777);
    let ok = as_nobody(
        &d,
        "",
        "touch group/w && mkdir group/sub && stat -c '%g %a' group/w group/sub",
    );
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&ok.stdout), "4242 644\n4242 2755\n");
    // Writing clears set-user-ID, even when the writer does not own the file.
    std::fs::write(d.join("open/suid"), b"").unwrap();
    mode("open/suid", 0o4777);
    let ok = as_nobody(&d, "", "echo x >> open/suid && stat -c %a open/suid");
    assert_eq!(
        String::from_utf8_lossy(&ok.stdout),
        "777\n",
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    let fs = m.into_fs().unwrap();
    let x = fs.stat("/open/x").unwrap();
    assert_eq!((x.uid, x.gid), (65534, 65534));
    assert_eq!(fs.read_file("/sticky/roots").unwrap(), b"rhi\n");
    assert_clean(&fs);
    fs.unmount().unwrap();
}

#[test]
fn read_only_mount() {
    let s = Scratch::new("ro");
    {
        let fs = s.open();
        fs.mkdir("/d", 0o755).unwrap();
        fs.write_file("/d/f", b"data").unwrap();
        fs.unmount().unwrap();
    }
    let opts = MountOptions {
        allow_other: false,
        read_only: true,
    };
    let Some(m) = s.mount(&opts) else {
        return;
    };
    let d = m.mount_point().to_path_buf();
    assert_eq!(sh(&d, "cat d/f && ls d"), "dataf\n");
    for script in [
        "touch d/f",
        "echo x > d/g",
        "mkdir e",
        "rm d/f",
        "chmod 600 d/f",
        "mv d/f d/g",
    ] {
        assert!(
            sh_fails(&d, script).contains("Read-only file system"),
            "{script}"
        );
    }
    let fs = m.into_fs().unwrap();
    assert_eq!(fs.read_file("/d/f").unwrap(), b"data");
    assert_clean(&fs);
}

//! EngramFS on a real FUSE mount, driven by the ordinary tools (coreutils, find, tar, dd,
//! sqlite3, git), then checked through the Rust API after unmounting. Every test skips, with
//! a message, only where /dev/fuse is absent.

mod support;

use engram_fuse::{MountError, MountHandle, MountOptions};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use support::*;

#[test]
fn mount_point_must_exist_be_a_directory_and_be_empty() {
    let s = Scratch::new("checks");
    let opts = MountOptions::default();
    let missing = s.root.join("missing");
    match engram_fuse::spawn_mount(s.open(), &missing, &opts) {
        Err(e @ MountError::NoMountPoint(_)) => {
            assert!(e.to_string().contains("does not exist"), "{e}")
        }
        other => panic!("{:?}", other.err()),
    }
    let file = s.root.join("file");
    std::fs::write(&file, b"x").unwrap();
    match engram_fuse::spawn_mount(s.open(), &file, &opts) {
        Err(e @ MountError::NotADirectory(_)) => {
            assert!(e.to_string().contains("not a directory"), "{e}")
        }
        other => panic!("{:?}", other.err()),
    }
    std::fs::write(s.mnt.join("occupant"), b"x").unwrap();
    match engram_fuse::spawn_mount(s.open(), &s.mnt, &opts) {
        Err(e @ MountError::NotEmpty(_)) => assert!(e.to_string().contains("not empty"), "{e}"),
        other => panic!("{:?}", other.err()),
    }
    // A pool that is in use cannot be opened a second time, so it cannot be mounted twice.
    let fs = s.open();
    let e = engram_core::Fs::open(&s.pool, &Default::default())
        .err()
        .unwrap();
    assert_eq!(e.errno(), libc::EBUSY);
    assert!(e.to_string().contains("in use"), "{e}");
    drop(fs);
}

/// cp -r/-a in and out, ls, find, stat, mv, ln, ln -s, chmod, touch -d, dd, tar; then the
/// tree through the Rust API, and inode numbers across a remount.
#[test]
fn coreutils_find_tar_dd_on_a_mount() {
    let s = Scratch::new("tools");
    let src = s.dir("src");
    // A real tree (this workspace's core crate sources) plus the awkward cases.
    let real = Path::new(env!("CARGO_MANIFEST_DIR")).join("../core");
    sh(
        &src,
        &format!(
            "cp -r '{}/src' '{}/tests' .",
            real.display(),
            real.display()
        ),
    );
    make_awkward_tree(&src.join("awkward"));
    let Some(m) = s.mount(&MountOptions::default()) else {
        return;
    };
    let mnt = m.mount_point().to_path_buf();
    let out = s.dir("out");
    let want = manifest(&src, false);
    let want_modes = manifest(&src, true);

    // cp -r in, cp -a in, cp -a out: identical trees and checksums.
    sh(
        &mnt,
        &format!("cp -r '{}' r && cp -a '{}' a", src.display(), src.display()),
    );
    assert_eq!(manifest(&mnt.join("r"), false), want);
    assert_eq!(manifest(&mnt.join("a"), true), want_modes);
    sh(&out, &format!("cp -a '{}/a' back", mnt.display()));
    assert_eq!(manifest(&out.join("back"), true), want_modes);
    sh(
        &mnt,
        &format!("diff -r --no-dereference '{}' a", src.display()),
    );
    // cp -a kept the timestamps.
    let t = |p: &Path| std::fs::symlink_metadata(p).unwrap().mtime_nsec();
    let st = |p: &Path| std::fs::symlink_metadata(p).unwrap().mtime();
    let f = "awkward/size-4097";
    assert_eq!(
        (st(&mnt.join("a").join(f)), t(&mnt.join("a").join(f))),
        (st(&src.join(f)), t(&src.join(f)))
    );

    // ls -la and find see what was written.
    let ls = sh(&mnt, "ls -la a/awkward");
    for name in [
        "size-4096",
        "link-rel -> size-4096",
        "many",
        "exec.sh",
        "ünïcødé-名前-🦀",
    ] {
        assert!(ls.contains(name), "ls -la lacks {name}:\n{ls}");
    }
    assert!(
        ls.lines()
            .any(|l| l.starts_with("-rwx") && l.ends_with("exec.sh")),
        "{ls}"
    );
    let count = |d: &Path, args: &str| sh(d, &format!("find . {args} | wc -l")).trim().to_string();
    assert_eq!(count(&mnt.join("a"), "-type f"), count(&src, "-type f"));
    assert_eq!(count(&mnt.join("a"), "-type d"), count(&src, "-type d"));
    assert_eq!(count(&mnt.join("a"), "-type l"), count(&src, "-type l"));
    assert_eq!(count(&mnt.join("a/awkward/many"), "-name 'entry-*'"), "700");
    assert_eq!(
        sh(&mnt, "find a -name leaf -path '*d10*'").trim(),
        "a/awkward/d1/d2/d3/d4/d5/d6/d7/d8/d9/d10/leaf"
    );

    // stat, ln, ln -s, mv, chmod, touch -d.
    sh(
        &mnt,
        "mkdir w && echo hello > w/f && ln w/f w/hard && ln -s f w/soft && ln -s ../a w/up",
    );
    assert_eq!(
        sh(&mnt, "stat -c '%h %s %F %a' w/f").trim(),
        "2 6 regular file 644"
    );
    assert_eq!(
        sh(&mnt, "stat -c '%i' w/f"),
        sh(&mnt, "stat -c '%i' w/hard")
    );
    assert_eq!(sh(&mnt, "readlink w/soft && cat w/soft").trim(), "f\nhello");
    assert_eq!(
        sh(&mnt, "stat -L -c '%s' w/up/awkward/size-4097").trim(),
        "4097"
    );
    sh(
        &mnt,
        "mkdir w/sub && mv w/f w/sub/moved && mv w/sub w/sub2 && echo new > w/other && mv w/other w/hard",
    );
    assert_eq!(
        sh(
            &mnt,
            "cat w/sub2/moved && stat -c %h w/sub2/moved && cat w/hard"
        ),
        "hello\n1\nnew\n"
    );
    assert_eq!(
        sh(&mnt, "cat w/soft 2>&1 || echo dangling")
            .trim()
            .lines()
            .last(),
        Some("dangling")
    );
    sh(
        &mnt,
        "chmod 751 w/sub2/moved && chmod u+s,g+s w/sub2 && chmod 1777 w",
    );
    assert_eq!(
        sh(&mnt, "stat -c '%a' w/sub2/moved w/sub2 w"),
        "751\n6755\n1777\n"
    );
    sh(
        &mnt,
        "touch -d '2001-02-03 04:05:06.789012345' w/sub2/moved && touch -a -d '1999-12-31 23:59:59' w/sub2/moved",
    );
    assert_eq!(
        sh(&mnt, "stat -c '%y|%x' w/sub2/moved").trim(),
        "2001-02-03 04:05:06.789012345 +0000|1999-12-31 23:59:59.000000000 +0000"
    );
    sh(&mnt, "touch -m -d '1969-12-31 23:59:59.25' w/hard");
    assert_eq!(sh(&mnt, "stat -c '%Y' w/hard").trim(), "-1");
    sh(&mnt, "touch w/hard");
    assert_ne!(sh(&mnt, "stat -c '%Y' w/hard").trim(), "-1");
    sh(&mnt, "touch -m -d '1969-12-31 23:59:59.25' w/hard");
    sh(&mnt, "rm w/soft");
    assert!(sh_fails(&mnt, "rmdir w/sub2").contains("not empty"));

    // dd: 1 MiB blocks in and out, a partial overwrite in the middle, a sparse extension.
    let big = bytes(99, 24 << 20);
    std::fs::write(out.join("big"), &big).unwrap();
    sh(
        &mnt,
        &format!("dd if='{}/big' of=big bs=1M status=none", out.display()),
    );
    let writes = m.io_stats();
    assert_eq!(
        writes.max_write,
        1 << 20,
        "1 MiB writes arrive whole: {writes:?}"
    );
    sh(
        &out,
        &format!(
            "dd if='{}/big' of=big.out bs=1M status=none && cmp big big.out",
            mnt.display()
        ),
    );
    let patch = "dd if=/dev/zero of=big bs=4096 seek=777 count=3 conv=notrunc status=none";
    sh(&mnt, patch);
    sh(&out, patch);
    sh(
        &mnt,
        "dd if=/dev/zero of=big bs=1 count=1 seek=40M conv=notrunc status=none",
    );
    sh(
        &out,
        "dd if=/dev/zero of=big bs=1 count=1 seek=40M conv=notrunc status=none",
    );
    sh(&out, &format!("cmp big '{}/big'", mnt.display()));
    assert_eq!(
        sh(&mnt, "stat -c %s big").trim(),
        (40 << 20 | 1).to_string()
    );
    let reads = m.io_stats();
    assert!(
        reads.max_read >= 128 << 10,
        "reads come in large requests: {reads:?}"
    );
    if readahead_kb(&mnt).as_deref() == Some("1024") {
        // The front end could widen the kernel's read-ahead (as root): 1 MiB reads.
        assert_eq!(reads.max_read, 1 << 20, "{reads:?}");
    }

    // tar out of the mount and back into it.
    sh(
        &out,
        &format!(
            "tar -C '{}/a' -cf tree.tar . && mkdir untar && tar -C untar -xf tree.tar",
            mnt.display()
        ),
    );
    assert_eq!(manifest(&out.join("untar"), true), want_modes);
    sh(
        &mnt,
        &format!(
            "tar -C '{}' -cf t.tar . && mkdir x && tar -C x -xpf t.tar && mkdir y && tar -C a -cf - . | tar -C y -xpf -",
            src.display()
        ),
    );
    assert_eq!(manifest(&mnt.join("x"), true), want_modes);
    assert_eq!(manifest(&mnt.join("y"), true), want_modes);
    sh(&mnt, "tar -tf t.tar > /dev/null && tar -df t.tar -C x");

    // Inode numbers, to compare through the API and after a remount.
    let inos = sh(
        &mnt,
        "stat -c '%i %n' a/awkward/size-1 a/awkward/many w/hard x/awkward/d1 big",
    );
    let df = sh(&mnt, "df -k . | tail -1");
    assert!(df.starts_with("engram"), "{df}");
    let fs = m.into_fs().expect("unmount");
    assert!(!mnt.join("big").exists(), "unmounted");

    // The same tree through the Rust API.
    let n = check_tree_in_pool(&fs, &src, "/a", true);
    assert!(n > 700, "{n}");
    check_tree_in_pool(&fs, &src, "/r", false);
    check_tree_in_pool(&fs, &src, "/x", true);
    assert_eq!(fs.read_file("/big").unwrap().len(), (40 << 20) + 1);
    assert_eq!(
        fs.read_file("/big").unwrap(),
        std::fs::read(out.join("big")).unwrap()
    );
    let moved = fs.stat("/w/sub2/moved").unwrap();
    assert_eq!(moved.permissions(), 0o751);
    assert_eq!(moved.mtime_ns, 981_173_106_789_012_345);
    assert_eq!(fs.stat("/w/hard").unwrap().mtime_ns, -750_000_000);
    assert_eq!(fs.stat("/w").unwrap().permissions(), 0o1777);
    assert_eq!(fs.readlink("/w/up").unwrap(), b"../a");
    for line in inos.lines() {
        let (ino, path) = line.split_once(' ').unwrap();
        assert_eq!(
            fs.lstat(format!("/{path}")).unwrap().ino.to_string(),
            ino,
            "{path}"
        );
    }
    assert_clean(&fs);
    fs.unmount().unwrap();

    // Remounted: the same inode numbers and contents.
    let Some(m) = s.mount(&MountOptions::default()) else {
        return;
    };
    assert_eq!(
        sh(
            &mnt,
            "stat -c '%i %n' a/awkward/size-1 a/awkward/many w/hard x/awkward/d1 big"
        ),
        inos
    );
    assert_eq!(manifest(&mnt.join("a"), true), want_modes);
    sh(&mnt, "rm -rf a r x y && ls -la");
    let fs = m.into_fs().unwrap();
    assert!(fs.mount_info().was_clean);
    assert_clean(&fs);
    fs.unmount().unwrap();
    let fs = s.open();
    assert!(fs.mount_info().was_clean, "the pool was left clean");
    assert_clean(&fs);
}

#[test]
fn sqlite_database_on_a_mount() {
    let s = Scratch::new("sqlite");
    let Some(m) = s.mount(&MountOptions::default()) else {
        return;
    };
    let mnt = m.mount_point().to_path_buf();
    let script = "
        CREATE TABLE t(id INTEGER PRIMARY KEY, name TEXT, blob BLOB);
        CREATE INDEX t_name ON t(name);
        WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < 20000)
          INSERT INTO t(name, blob) SELECT 'row-' || i, randomblob(i % 700) FROM c;
        BEGIN; UPDATE t SET name = name || '-u' WHERE id % 3 = 0; DELETE FROM t WHERE id % 7 = 0; COMMIT;
        VACUUM;
    ";
    sh(&mnt, &format!("sqlite3 db.sqlite \"{script}\""));
    let check = "PRAGMA integrity_check; SELECT count(*) FROM t; SELECT count(*) FROM t WHERE name LIKE '%-u';";
    let want = "ok\n17143\n5714\n";
    assert_eq!(sh(&mnt, &format!("sqlite3 db.sqlite \"{check}\"")), want);
    // WAL mode: the -shm file is a shared writable mmap.
    sh(
        &mnt,
        "sqlite3 wal.sqlite 'PRAGMA journal_mode=WAL; CREATE TABLE k(v); INSERT INTO k VALUES (1), (2), (3);' > /dev/null",
    );
    sh(
        &mnt,
        "for i in 1 2 3 4 5; do sqlite3 wal.sqlite \"INSERT INTO k SELECT v + 10 * $i FROM k LIMIT 3;\"; done",
    );
    assert_eq!(
        sh(
            &mnt,
            "sqlite3 wal.sqlite 'PRAGMA integrity_check; SELECT count(*) FROM k;'"
        ),
        "ok\n18\n"
    );
    let fs = m.into_fs().unwrap();
    assert_clean(&fs);
    // The database as the pool holds it, copied out, is intact.
    let db = fs.read_file("/db.sqlite").unwrap();
    fs.unmount().unwrap();
    let out = s.dir("out");
    std::fs::write(out.join("db.sqlite"), db).unwrap();
    assert_eq!(sh(&out, &format!("sqlite3 db.sqlite \"{check}\"")), want);
}

#[test]
fn git_repository_on_a_mount() {
    let s = Scratch::new("git");
    let Some(m) = s.mount(&MountOptions::default()) else {
        return;
    };
    let mnt = m.mount_point().to_path_buf();
    let home = s.dir("home");
    let git = format!(
        "export HOME='{}' GIT_CONFIG_NOSYSTEM=1 GIT_AUTHOR_DATE='2020-01-01T00:00:00Z' \
         GIT_COMMITTER_DATE='2020-01-01T00:00:00Z'; git -c init.defaultBranch=main \
         -c user.name=Engram -c user.email=engram@example.com",
        home.display()
    );
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../core/src");
    sh(
        &mnt,
        &format!(
            "mkdir repo && cd repo && {git} init -q . && cp -r '{}' src && echo '# readme' > README \
         && {git} add . && {git} commit -q -m first && echo more >> README && mv src/lib.rs src/lib2.rs \
         && {git} add -A && {git} commit -q -m second && {git} gc -q && {git} fsck --strict 2>&1",
            src.display()
        ),
    );
    let log = sh(&mnt.join("repo"), &format!("{git} log --format=%s"));
    assert_eq!(log, "second\nfirst\n");
    assert_eq!(
        sh(&mnt.join("repo"), &format!("{git} status --porcelain")),
        ""
    );
    let head = sh(&mnt.join("repo"), &format!("{git} rev-parse HEAD"));
    // A clone out of the mount has the same history.
    let out = s.dir("out");
    sh(
        &out,
        &format!("{git} clone -q '{}/repo' clone", mnt.display()),
    );
    assert_eq!(
        sh(&out.join("clone"), &format!("{git} rev-parse HEAD")),
        head
    );
    let fs = m.into_fs().unwrap();
    assert_eq!(
        fs.read_file("/repo/.git/HEAD").unwrap(),
        b"ref: refs/heads/main\n"
    );
    assert_eq!(fs.read_file("/repo/README").unwrap(), b"# readme\nmore\n");
    check_tree_in_pool(&fs, &out.join("clone/src"), "/repo/src", false);
    assert_clean(&fs);
    fs.unmount().unwrap();
}

/// The kernel's read-ahead window of the mount at `dir`, in KiB.
fn readahead_kb(dir: &Path) -> Option<String> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let line = info
        .lines()
        .rfind(|l| l.split(' ').nth(4) == dir.to_str())?;
    let dev = line.split(' ').nth(2)?;
    let kb = std::fs::read_to_string(format!("/sys/class/bdi/{dev}/read_ahead_kb")).ok()?;
    Some(kb.trim().to_string())
}

/// One of the shim's C test programs (crates/preload/tests/c/NAME.c) built into the
/// scratch directory, or None (after saying so) without gcc.
fn shim_test_program(s: &Scratch, name: &str) -> Option<std::path::PathBuf> {
    if std::process::Command::new("gcc")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("skipped: gcc is not installed");
        return None;
    }
    let exe = s.dir("bin").join(name);
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../preload/tests/c/{name}.c"));
    let built = std::process::Command::new("gcc")
        .args(["-O1", "-o"])
        .arg(&exe)
        .arg(&src)
        .status()
        .unwrap();
    assert!(built.success(), "gcc failed on {}", src.display());
    Some(exe)
}

/// `shim_test_program` and a mount that other users may use (allow_other), or None
/// (after saying why).
fn shim_test_on_a_shared_mount(
    s: &Scratch,
    name: &str,
) -> Option<(std::path::PathBuf, MountHandle)> {
    let exe = shim_test_program(s, name)?;
    let opts = MountOptions {
        allow_other: true,
        ..MountOptions::default()
    };
    Some((exe, s.mount(&opts)?))
}

/// The shim's test of set-id bits, O_NOATIME and the times of small changes
/// (crates/preload/tests/c/privs.c) on a mount that other users may use: a truncate by
/// another user through its descriptor cleared no set-group-ID bit, and chown(-1, -1)
/// changed no ctime (the kernel sends an empty request).
#[test]
fn set_id_bits_noatime_and_times_behave_as_linux_on_a_mount() {
    // SAFETY: reading our own effective uid.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: needs root to change credentials");
        return;
    }
    let s = Scratch::new("privs");
    let Some((exe, m)) = shim_test_on_a_shared_mount(&s, "privs") else {
        return;
    };
    sh(
        m.mount_point(),
        &format!("'{e}' \"$PWD\" | grep -q PRIVS-OK", e = exe.display()),
    );
}

/// The shim's ioctl test (crates/preload/tests/c/ioctls.c) on a mount that other users may
/// use: the kernel answers most requests itself; inode flags and extended attributes come
/// to the mount (`FUSE_IOCTL`), which answered none of them (lsattr: "Inappropriate ioctl
/// for device").
#[test]
fn ioctl_answers_as_linux_file_systems_do_on_a_mount() {
    let s = Scratch::new("ioctls");
    let Some((exe, m)) = shim_test_on_a_shared_mount(&s, "ioctls") else {
        return;
    };
    let elsewhere = s.dir("elsewhere");
    sh(
        m.mount_point(),
        &format!(
            "'{e}' \"$PWD\" '{o}' | grep -q IOCTLS-OK",
            e = exe.display(),
            o = elsewhere.display()
        ),
    );
}

/// The fsx-style checker of the shim's tests (crates/preload/tests/c/fsx.c) on a mount:
/// random I/O of every kind against a model of the file, then with a mapping kept open
/// (its stores reach the engine through the kernel's page cache).
#[test]
fn random_io_matches_a_model_of_the_file_on_a_mount() {
    let s = Scratch::new("fsx");
    let Some(exe) = shim_test_program(&s, "fsx") else {
        return;
    };
    let Some(m) = s.mount(&MountOptions::default()) else {
        return;
    };
    sh(
        m.mount_point(),
        &format!(
            "'{e}' -q plain 2 10000 && '{e}' -q -M mapped 32 5000",
            e = exe.display()
        ),
    );
}

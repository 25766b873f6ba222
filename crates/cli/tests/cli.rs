//! End-to-end tests of the `engram` binary.

mod common;

use common::{
    TempDir, TempPool, assert_same_tree, engram, fails, flip_byte, ok, pattern, write_at,
};
use std::fs;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::Path;

/// Superblock copies are at 0 and 4096; the log starts at 8192 (see docs/format.md).
const SB_COPIES: [u64; 2] = [0, 4096];
const SB_BODY: usize = 160;
const SB_CLEAN_OFF: usize = 14 * 8;
const LOG_OFF: u64 = 8192;

fn mkfs(pool: &TempPool, size: &str) {
    let r = ok(["mkfs", pool.s(), "--size", size]);
    assert!(r.stdout.contains("formatted"), "{}", r.stdout);
}

#[test]
fn mkfs_info_fsck_on_a_fresh_pool() {
    let pool = TempPool::new("fresh");
    mkfs(&pool, "64M");
    assert_eq!(fs::metadata(pool.path()).unwrap().len(), 64 << 20);
    let info = ok(["info", pool.s()]);
    for want in [
        "media:",
        "cleanly unmounted",
        "0 log records replayed",
        "pool size:",
        "64 MiB",
        "inodes:",
        "data pages:",
        "free",
    ] {
        assert!(
            info.stdout.contains(want),
            "info lacks {want:?}:\n{}",
            info.stdout
        );
    }
    let r = ok(["fsck", pool.s()]);
    assert!(r.stdout.contains("clean"), "{}", r.stdout);
    assert!(r.stdout.contains("1 directory"), "{}", r.stdout);
    let r = ok(["fsck", "--repair", pool.s()]);
    assert!(r.stdout.contains("clean"), "{}", r.stdout);
    // Every size spelling.
    for size in ["4096K", "8M", "16777216"] {
        mkfs(&pool, size);
        ok(["fsck", pool.s()]);
    }
}

/// `--meta-ratio` sets how many metadata pages a pool gets (one per so many bytes); the
/// pool then holds as many files of two pages as it has metadata pages to index them.
#[test]
fn mkfs_meta_ratio_sets_the_metadata_pages() {
    let pool = TempPool::new("metaratio");
    let r = ok(["mkfs", pool.s(), "--size", "16M", "--meta-ratio", "16K"]);
    assert!(r.stdout.contains(" 1024 metadata pages"), "{}", r.stdout);
    let r = ok(["mkfs", pool.s(), "--size", "16M"]);
    assert!(r.stdout.contains(" 256 metadata pages"), "{}", r.stdout);
    let r = fails(["mkfs", pool.s(), "--size", "16M", "--meta-ratio", "4K"]);
    assert!(
        r.stderr.contains("at most one per 8192 bytes"),
        "{}",
        r.stderr
    );
}

#[test]
fn demo_passes_twice_on_the_same_pool() {
    let pool = TempPool::new("demo");
    let first = ok(["demo", "--pool", pool.s()]);
    assert!(first.stdout.contains("demo OK"), "{}", first.stdout);
    assert!(first.stdout.contains("mkfs"), "{}", first.stdout);
    assert!(first.stdout.contains("media:"), "{}", first.stdout);
    assert!(
        first.stdout.contains("/dev/shm is tmpfs"),
        "{}",
        first.stdout
    );
    let second = ok(["demo", "--pool", pool.s()]);
    assert!(second.stdout.contains("demo OK"), "{}", second.stdout);
    assert!(second.stdout.contains("existing pool"), "{}", second.stdout);
    assert!(second.stdout.contains("/demo-2"), "{}", second.stdout);
    assert!(
        second
            .stdout
            .contains("remove the previous run's tree /demo-1"),
        "{}",
        second.stdout
    );
    let r = ok(["fsck", pool.s()]);
    assert!(r.stdout.contains("clean"), "{}", r.stdout);
    let ls = ok(["ls", pool.s()]);
    assert_eq!(ls.stdout.trim(), "demo-2");
}

#[test]
fn demo_recreates_an_invalid_pool() {
    let pool = TempPool::new("demo-invalid");
    fs::write(pool.path(), vec![0u8; 1 << 20]).unwrap();
    let r = ok(["demo", "--pool", pool.s(), "--size", "64M", "--files", "40"]);
    assert!(r.stdout.contains("not a valid pool"), "{}", r.stdout);
    assert!(r.stdout.contains("demo OK"), "{}", r.stdout);
    ok(["fsck", pool.s()]);
}

/// A local tree with the edge sizes, nested directories, varied modes and a symlink.
fn make_tree(root: &Path) {
    let files: [(&str, usize, u32); 7] = [
        ("empty", 0, 0o644),
        ("one", 1, 0o600),
        ("a/b/c/page-minus-one", 4095, 0o644),
        ("a/page", 4096, 0o640),
        ("a/b/page-plus-one", 4097, 0o755),
        ("big", (1 << 20) + 3, 0o644),
        ("a/b/c/d/e/deep", 100, 0o444),
    ];
    for (i, (name, len, mode)) in files.iter().enumerate() {
        let p = root.join(name);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(&p, pattern(*len, i as u64)).unwrap();
        fs::set_permissions(&p, fs::Permissions::from_mode(*mode)).unwrap();
    }
    fs::create_dir(root.join("emptydir")).unwrap();
    symlink("a/page", root.join("link")).unwrap();
    symlink("/nonexistent/target", root.join("dangling")).unwrap();
    fs::set_permissions(root.join("emptydir"), fs::Permissions::from_mode(0o700)).unwrap();
    fs::set_permissions(root.join("a/b"), fs::Permissions::from_mode(0o750)).unwrap();
}

#[test]
fn cp_recursive_round_trip() {
    let pool = TempPool::new("cp");
    mkfs(&pool, "64M");
    let tmp = TempDir::new("cp");
    let src = tmp.path().join("src");
    make_tree(&src);

    // Into an existing directory of the pool: lands at /src.
    ok(["cp", "-r", src.to_str().unwrap(), &pool.at("/")]);
    // Out to a path that does not exist yet: becomes that directory.
    let back = tmp.path().join("back");
    ok(["cp", "-r", &pool.at("/src"), back.to_str().unwrap()]);
    assert_same_tree(&src, &back);

    // Into a new name, then out into an existing local directory.
    ok(["cp", "-R", src.to_str().unwrap(), &pool.at("/copy2")]);
    let again = tmp.path().join("again");
    fs::create_dir(&again).unwrap();
    ok(["cp", "-r", &pool.at("/copy2"), again.to_str().unwrap()]);
    assert_same_tree(&src, &again.join("copy2"));

    // Copying over an existing tree replaces contents.
    ok(["cp", "-r", src.to_str().unwrap(), &pool.at("/")]);
    let r = ok(["fsck", pool.s()]);
    assert!(r.stdout.contains("clean"), "{}", r.stdout);
}

#[test]
fn cp_single_files() {
    let pool = TempPool::new("cp-file");
    mkfs(&pool, "32M");
    let tmp = TempDir::new("cp-file");
    let f = tmp.path().join("f.bin");
    let data = pattern(3 * 4096 + 5, 9);
    fs::write(&f, &data).unwrap();
    fs::set_permissions(&f, fs::Permissions::from_mode(0o751)).unwrap();
    ok(["cp", f.to_str().unwrap(), &pool.at("/f")]);
    ok(["cp", f.to_str().unwrap(), &pool.at("/")]);
    let out = tmp.path().join("out.bin");
    ok(["cp", &pool.at("/f"), out.to_str().unwrap()]);
    assert_eq!(fs::read(&out).unwrap(), data);
    assert_eq!(
        fs::metadata(&out).unwrap().permissions().mode() & 0o7777,
        0o751
    );
    // Into an existing local directory keeps the name; a shorter file overwrites a longer one.
    let dir = tmp.path().join("d");
    fs::create_dir(&dir).unwrap();
    ok(["cp", &pool.at("/f.bin"), dir.to_str().unwrap()]);
    assert_eq!(fs::read(dir.join("f.bin")).unwrap(), data);
    fs::write(&f, b"short").unwrap();
    ok(["cp", f.to_str().unwrap(), &pool.at("/f")]);
    ok(["cp", &pool.at("/f"), out.to_str().unwrap()]);
    assert_eq!(fs::read(&out).unwrap(), b"short");
    // Zeros come out as holes, with the right size and content.
    let mut sparse = vec![0u8; (3 << 20) + 7];
    sparse[(1 << 20) + 5] = 1;
    fs::write(&f, &sparse).unwrap();
    ok(["cp", f.to_str().unwrap(), &pool.at("/sparse")]);
    ok(["cp", &pool.at("/sparse"), out.to_str().unwrap()]);
    assert!(fs::read(&out).unwrap() == sparse);
    let r = ok(["cp", "-v", f.to_str().unwrap(), &pool.at("/g")]);
    assert!(r.stdout.contains("copied 1 files"), "{}", r.stdout);
}

#[test]
fn cp_errors() {
    let pool = TempPool::new("cp-err");
    mkfs(&pool, "16M");
    let tmp = TempDir::new("cp-err");
    let dir = tmp.path().join("dir");
    fs::create_dir(&dir).unwrap();
    let missing = tmp.path().join("missing");

    let r = fails(["cp", missing.to_str().unwrap(), &pool.at("/x")]);
    assert!(r.stderr.contains("No such file"), "{}", r.stderr);
    let r = fails(["cp", dir.to_str().unwrap(), &pool.at("/x")]);
    assert!(r.stderr.contains("-r"), "{}", r.stderr);
    let r = fails([
        "cp",
        &pool.at("/nothere"),
        tmp.path().join("y").to_str().unwrap(),
    ]);
    assert!(r.stderr.contains("No such file"), "{}", r.stderr);
    ok(["cp", "-r", dir.to_str().unwrap(), &pool.at("/dir")]);
    let r = fails([
        "cp",
        &pool.at("/dir"),
        tmp.path().join("z").to_str().unwrap(),
    ]);
    assert!(r.stderr.contains("directory"), "{}", r.stderr);
    let r = fails(["cp", dir.to_str().unwrap(), missing.to_str().unwrap()]);
    assert!(r.stderr.contains("POOL:/path"), "{}", r.stderr);
    fails(["cp", &pool.at("/a"), &pool.at("/b")]);
    fails([
        "cp",
        missing.to_str().unwrap(),
        &format!("{}:/x", missing.display()),
    ]);
}

#[test]
fn cp_into_a_full_pool() {
    let pool = TempPool::new("full");
    mkfs(&pool, "8M");
    let tmp = TempDir::new("full");
    let f = tmp.path().join("big");
    fs::write(&f, pattern(16 << 20, 3)).unwrap();
    let r = fails(["cp", f.to_str().unwrap(), &pool.at("/big")]);
    assert!(r.stderr.contains("No space left"), "{}", r.stderr);
    let r = ok(["fsck", pool.s()]);
    assert!(r.stdout.contains("clean"), "{}", r.stdout);
}

#[test]
fn ls_lists_names() {
    let pool = TempPool::new("ls");
    mkfs(&pool, "32M");
    let tmp = TempDir::new("ls");
    let src = tmp.path().join("src");
    make_tree(&src);
    ok(["cp", "-r", src.to_str().unwrap(), &pool.at("/t")]);

    let r = ok(["ls", &pool.at("/t")]);
    let names: Vec<&str> = r.stdout.lines().collect();
    assert_eq!(
        names,
        ["a", "big", "dangling", "empty", "emptydir", "link", "one"]
    );
    assert_eq!(ok(["ls", pool.s()]).stdout, "t\n");

    let r = ok(["ls", "-l", &pool.at("/t")]);
    let lines: Vec<&str> = r.stdout.lines().collect();
    assert_eq!(lines.len(), 7, "{}", r.stdout);
    assert!(
        lines[0].starts_with("drwxr-xr-x") && lines[0].ends_with(" a"),
        "{}",
        r.stdout
    );
    assert!(
        lines[1].starts_with("-rw-r--r--") && lines[1].contains(" 1048579 big"),
        "{}",
        r.stdout
    );
    assert!(lines[4].starts_with("drwx------"), "{}", r.stdout);
    assert!(
        lines[5].starts_with("lrwxrwxrwx") && lines[5].ends_with("link -> a/page"),
        "{}",
        r.stdout
    );
    assert!(
        lines[6].starts_with("-rw-------") && lines[6].contains(" 1 one"),
        "{}",
        r.stdout
    );

    // A file lists itself.
    assert_eq!(ok(["ls", &pool.at("/t/a/page")]).stdout, "/t/a/page\n");
    let r = ok(["ls", "-l", &pool.at("/t/a/page")]);
    assert!(
        r.stdout.starts_with("-rw-r----- 1 4096 /t/a/page"),
        "{}",
        r.stdout
    );
    let r = fails(["ls", &pool.at("/t/nothere")]);
    assert!(r.stderr.contains("No such file"), "{}", r.stderr);
}

#[test]
fn not_a_pool() {
    let pool = TempPool::new("zeros");
    fs::write(pool.path(), vec![0u8; 8 << 20]).unwrap();
    for cmd in ["info", "fsck"] {
        let r = fails([cmd, pool.s()]);
        assert!(r.stderr.contains("not an EngramFS pool"), "{}", r.stderr);
    }
    let r = fails(["ls", &pool.at("/")]);
    assert!(r.stderr.contains("not an EngramFS pool"), "{}", r.stderr);
    // Odd sizes and tiny files too.
    for len in [0usize, 100, 4096, 12345] {
        fs::write(pool.path(), vec![0u8; len]).unwrap();
        let r = fails(["info", pool.s()]);
        assert!(
            r.stderr.contains("not an EngramFS pool"),
            "{len}: {}",
            r.stderr
        );
    }
}

#[test]
fn truncated_pool() {
    let pool = TempPool::new("truncated");
    mkfs(&pool, "16M");
    fs::OpenOptions::new()
        .write(true)
        .open(pool.path())
        .unwrap()
        .set_len(8 << 20)
        .unwrap();
    let r = fails(["info", pool.s()]);
    assert!(r.stderr.contains("truncated"), "{}", r.stderr);
    let r = fails(["fsck", pool.s()]);
    assert!(r.stderr.contains("truncated"), "{}", r.stderr);
}

#[test]
fn both_superblocks_corrupt() {
    let pool = TempPool::new("sb-both");
    mkfs(&pool, "16M");
    for at in SB_COPIES {
        flip_byte(pool.path(), at + 100);
    }
    let r = fails(["info", pool.s()]);
    assert!(r.stderr.contains("superblock"), "{}", r.stderr);
    let r = fails(["fsck", pool.s()]);
    assert!(r.stderr.contains("superblock"), "{}", r.stderr);
}

#[test]
fn first_superblock_corrupt_uses_the_second() {
    let pool = TempPool::new("sb-first");
    mkfs(&pool, "16M");
    flip_byte(pool.path(), 100);
    let r = ok(["info", pool.s()]);
    assert!(r.stdout.contains("16 MiB"), "{}", r.stdout);
    flip_byte(pool.path(), 100);
    let r = ok(["fsck", pool.s()]);
    assert!(r.stdout.contains("clean"), "{}", r.stdout);
}

#[test]
fn mkfs_too_small_or_bad_size() {
    let pool = TempPool::new("small");
    let r = fails(["mkfs", pool.s(), "--size", "512K"]);
    assert!(r.stderr.contains("too small"), "{}", r.stderr);
    let r = fails(["mkfs", pool.s(), "--size", "12Q"]);
    assert!(r.stderr.contains("invalid size"), "{}", r.stderr);
    let r = fails(["mkfs", pool.s(), "--size", "10000000"]);
    assert!(r.stderr.contains("multiple of 4096"), "{}", r.stderr);
    fails(["mkfs", "/nonexistent-dir/x.pool", "--size", "8M"]);
}

#[test]
fn missing_pool_and_bad_usage() {
    let r = fails(["info", "/nonexistent/engram.pool"]);
    assert!(r.stderr.contains("No such file"), "{}", r.stderr);
    fails(["fsck", "/nonexistent/engram.pool"]);
    fails(["ls", "/nonexistent/engram.pool:/"]);
    let r = fails(["info", "/tmp"]);
    assert!(r.stderr.contains("directory"), "{}", r.stderr);
    fails(Vec::<&str>::new());
    fails(["frobnicate"]);
    fails(["mkfs"]);
    let r = ok(["--help"]);
    assert!(
        r.stdout.contains("mkfs") && r.stdout.contains("demo"),
        "{}",
        r.stdout
    );
}

#[test]
fn pool_in_use_by_another_process() {
    let pool = TempPool::new("busy");
    mkfs(&pool, "16M");
    let fs = engram_core::Fs::open(pool.path(), &engram_core::Options::default()).unwrap();
    let r = fails(["info", pool.s()]);
    assert!(r.stderr.contains("in use"), "{}", r.stderr);
    let r = fails(["demo", "--pool", pool.s()]);
    assert!(r.stderr.contains("in use"), "{}", r.stderr);
    fs.unmount().unwrap();
    ok(["info", pool.s()]);
}

/// Garbage shaped like a log record at the start of the log of a cleanly unmounted pool.
#[test]
fn garbage_in_the_log_of_a_clean_pool() {
    let pool = TempPool::new("log-clean");
    mkfs(&pool, "16M");
    let mut rec = fake_header(1, 64);
    rec.extend(pattern(32, 5));
    write_at(pool.path(), LOG_OFF, &rec);
    for cmd in ["info", "fsck"] {
        let r = engram([cmd, pool.s()]);
        assert!(
            r.code == 0 || (r.code == 1 && r.stderr.starts_with("engram: ")),
            "{}",
            r.stderr
        );
    }
}

/// A record header: magic, kind 0, length, checksum 0 (filled by `seal`), sequence number.
fn fake_header(seq: u64, len: u32) -> Vec<u8> {
    let mut h = Vec::new();
    h.extend(b"ELOG");
    h.extend(0u32.to_le_bytes());
    h.extend(len.to_le_bytes());
    h.extend(0u32.to_le_bytes());
    h.extend(seq.to_le_bytes());
    h.extend([0u8; 8]);
    h
}

/// Fill in a record's checksum so that recovery takes it for a real one.
fn seal(rec: &mut [u8]) {
    rec[12..16].fill(0);
    let crc = crc32c::crc32c(rec);
    rec[12..16].copy_from_slice(&crc.to_le_bytes());
}

/// Make the pool look like it crashed: clear the clean flag in both superblock copies.
fn mark_unclean(pool: &Path) {
    let image = fs::read(pool).unwrap();
    for at in SB_COPIES {
        let at = at as usize;
        let mut sb = image[at..at + SB_BODY + 4].to_vec();
        sb[SB_CLEAN_OFF..SB_CLEAN_OFF + 8].copy_from_slice(&0u64.to_le_bytes());
        let crc = crc32c::crc32c(&sb[..SB_BODY]);
        sb[SB_BODY..].copy_from_slice(&crc.to_le_bytes());
        write_at(pool, at as u64, &sb);
    }
}

#[test]
fn recovery_with_a_torn_record() {
    let pool = TempPool::new("log-torn");
    mkfs(&pool, "16M");
    mark_unclean(pool.path());
    // Checksum wrong: the end of the log, nothing to replay.
    let mut rec = fake_header(1, 64);
    rec.extend(pattern(32, 6));
    write_at(pool.path(), LOG_OFF, &rec);
    let r = ok(["info", pool.s()]);
    assert!(r.stdout.contains("not cleanly unmounted"), "{}", r.stdout);
    assert!(r.stdout.contains("0 log records replayed"), "{}", r.stdout);
    ok(["fsck", pool.s()]);
}

#[test]
fn recovery_refuses_a_record_that_writes_outside_the_metadata() {
    let pool = TempPool::new("log-outside");
    mkfs(&pool, "16M");
    mark_unclean(pool.path());
    // A valid record whose one entry stores 8 bytes over the superblock.
    let mut rec = fake_header(1, 64);
    rec.extend((1u64 << 56 | 8u64 << 48 | 64).to_le_bytes());
    rec.extend(0xdead_beefu64.to_le_bytes());
    rec.resize(64, 0);
    seal(&mut rec);
    write_at(pool.path(), LOG_OFF, &rec);
    let r = fails(["info", pool.s()]);
    assert!(r.stderr.contains("log record"), "{}", r.stderr);
}

#[test]
fn recovery_refuses_an_undecodable_record() {
    let pool = TempPool::new("log-undecodable");
    mkfs(&pool, "16M");
    mark_unclean(pool.path());
    let mut rec = fake_header(1, 64);
    rec.extend(pattern(32, 7).iter().map(|b| b | 0x80));
    seal(&mut rec);
    write_at(pool.path(), LOG_OFF, &rec);
    let r = fails(["fsck", pool.s()]);
    assert!(r.stderr.contains("log record"), "{}", r.stderr);
}

/// A demo killed halfway leaves a pool that was not cleanly unmounted; the next run recovers
/// it, removes the half-built tree and passes, and fsck finds it clean.
#[test]
fn demo_after_a_killed_demo() {
    let pool = TempPool::new("killed");
    ok(["demo", "--pool", pool.s(), "--size", "64M", "--files", "40"]);
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_engram"))
        .args(["demo", "--pool", pool.s(), "--files", "5000"])
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(30));
    child.kill().unwrap();
    child.wait().unwrap();
    let r = ok(["demo", "--pool", pool.s(), "--files", "40"]);
    assert!(r.stdout.contains("demo OK"), "{}", r.stdout);
    let r = ok(["fsck", pool.s()]);
    assert!(r.stdout.contains("clean"), "{}", r.stdout);
}

#[test]
fn bench_daemon_clients_table_runs() {
    // Only that the client processes run and report; no timing is asserted.
    let r = ok(["bench", "--quick", "--filter", "clients"]);
    assert!(r.stdout.contains("Daemon clients"), "{}", r.stdout);
    for op in ["create", "stat", "write4k"] {
        let line = r
            .stdout
            .lines()
            .find(|l| l.trim_start().starts_with(op))
            .unwrap_or_else(|| panic!("{op}: {}", r.stdout));
        let rates: Vec<f64> = line
            .split_whitespace()
            .filter_map(|w| w.strip_suffix("/s"))
            .filter_map(|w| w.parse().ok())
            .collect();
        assert_eq!(rates.len(), 3, "{line}");
        assert!(rates.iter().all(|&x| x > 0.0), "{line}");
    }
}

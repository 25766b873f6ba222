//! A C program (tests/c/calls.c) compiled with gcc and run under the shim against a
//! daemon-served pool: the calls no real program in the other tests reaches (directory
//! stream positions, readdir_r, getdents64, OFD and POSIX record locks, lockf,
//! sync_file_range, private and shared mappings, freopen, fdopen, dprintf, dup3,
//! posix_spawn with inherited descriptors, threads sharing a descriptor, statfs and
//! statvfs, the __xstat entry points, vectored I/O, truncate, EXDEV across the boundary,
//! relative paths after chdir into the prefix, symlinks into and out of the pool and ".."
//! above its root). Every result is checked in C.

mod common;

use common::{Pool, output, require};
use engram_core::sidefiles;
use std::time::Duration;

#[test]
fn c_program_exercises_the_less_common_calls() {
    if !require("gcc", "gcc") {
        return;
    }
    let p = Pool::new("calls", 64);
    let exe = common::compile_c("calls", &p.scratch);
    let real = p.scratch.join("real");
    std::fs::create_dir_all(&real).unwrap();
    let mut c = p.command(exe.to_str().unwrap());
    c.arg(&real);
    let out = output(c, Duration::from_secs(270));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains("CALLS-OK"),
        "{:?}\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
        out.status
    );
    // The __xstat entry points are there to test with glibc 2.36 (found by dlsym).
    assert!(!stdout.contains("skipped"), "{stdout}");
    // The files the program left are what it wrote, seen from a new connection.
    let fs = engram_core::Fs::connect(&p.socket).unwrap();
    assert_eq!(fs.read_file("/d/rel.txt").unwrap(), b"relative");
    assert_eq!(fs.read_file("/dup.txt").unwrap(), b"abcdefspawned");
    assert_eq!(fs.read_file("/cross2").unwrap(), b"pool");
    assert_eq!(fs.read_file("/fr3.txt").unwrap(), b"pool side");
    assert_eq!(fs.stat("/threads.txt").unwrap().size, 2 * 2000 * 16);
    drop(fs);
    p.fsck();
}

/// Programs stored in the pool run (a script and a copy of /bin/true, through execv,
/// execvp, execve, fexecve, posix_spawn and posix_spawnp), and a file without execute
/// permission gives EACCES (tests/c/exec.c); the children share the pool through the daemon.
#[test]
fn programs_stored_in_the_pool_run() {
    if !require("gcc", "gcc") {
        return;
    }
    let p = Pool::new("exec", 64);
    let exe = common::compile_c("exec", &p.scratch);
    let mut c = p.command(exe.to_str().unwrap());
    c.arg("/mnt/engram");
    let out = output(c, Duration::from_secs(120));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains("EXEC-OK"),
        "{:?}\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
        out.status
    );
    p.fsck();
}

/// Wide-character stdio on pool streams (fgetwc, fgetws, ungetwc, fwide, fputwc, fputws,
/// fwprintf, fwscanf and their forms, also on a freopen'd stdin and stdout), perror on a
/// freopen'd stderr, ftell of an "a" stream and fdopen's access checks give glibc's results
/// on the same files in a real directory (tests/c/stdio.c compares them).
#[test]
fn stdio_on_pool_streams_gives_glibcs_results() {
    if !require("gcc", "gcc") {
        return;
    }
    let p = Pool::new("stdio", 64);
    let exe = common::compile_c("stdio", &p.scratch);
    let mut c = p.command(exe.to_str().unwrap());
    c.arg(common::MOUNT).arg(&p.scratch);
    let out = output(c, Duration::from_secs(120));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains("STDIO-OK"),
        "{:?}\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
        out.status
    );
    p.fsck();
}

/// Compile tests/c/NAME.c and run it through a daemon on a fresh pool, with the mount
/// prefix as its argument (and, with `real_dir`, a directory outside the pool as a second);
/// it prints OK when every check passed.
fn c_program_via_daemon(name: &str, ok: &str, real_dir: bool) {
    c_program_via_daemon_with(name, ok, real_dir, &[]);
}

/// `c_program_via_daemon` with `more` arguments after those.
fn c_program_via_daemon_with(name: &str, ok: &str, real_dir: bool, more: &[&str]) {
    if !require("gcc", "gcc") {
        return;
    }
    c_program_on(&Pool::new(name, 64), name, ok, real_dir, more);
}

/// `c_program_via_daemon_with` on pool `p`.
fn c_program_on(p: &Pool, name: &str, ok: &str, real_dir: bool, more: &[&str]) {
    let exe = common::compile_c(name, &p.scratch);
    let mut c = p.command(exe.to_str().unwrap());
    c.arg(common::MOUNT);
    if real_dir {
        let real = p.scratch.join("real");
        std::fs::create_dir_all(&real).unwrap();
        c.arg(real);
    }
    c.args(more);
    // A guard against a hang, not a time limit (inside nextest's 300 s): the mapping stress
    // programs take 30 s on an idle machine and up to 110 s beside a build (two cores).
    let out = output(c, Duration::from_secs(270));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains(ok),
        "{:?}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    p.fsck();
}

/// Symlinks of a real directory that lead into the pool are followed there, as the kernel
/// follows them into a mounted file system: as an intermediate or last component, chained,
/// relative, to the prefix itself, dangling with O_CREAT, in a loop through both sides
/// (ELOOP), by chdir and opendir and relative to a real directory descriptor; lstat,
/// readlink, O_NOFOLLOW and unlink act on the link itself (tests/c/reallinks.c, whose
/// expectations were checked on ext4 and tmpfs without the shim).
#[test]
fn real_symlinks_into_the_prefix_are_followed() {
    c_program_via_daemon("reallinks", "REALLINKS-OK", true);
}

/// A signal handler may stat a missing path behind a real symlink while the program
/// mallocs: the shim's look at the failed call (does it reach the prefix through the
/// link?) allocates nothing and takes no lock (tests/c/sigstat.c; it aborted in malloc).
#[test]
fn a_signal_handler_may_stat_a_missing_path_behind_a_real_symlink() {
    c_program_via_daemon("sigstat", "SIGSTAT-OK", true);
}

/// tests/c/removedcwd.c through a daemon, where a child process removes the directories
/// ("others") and a forked child works in the removed one too.
#[test]
fn a_removed_current_directory_works_as_in_a_real_directory() {
    c_program_via_daemon_with("removedcwd", "REMOVEDCWD-OK", true, &["others"]);
}

/// posix_spawn file actions that name pool paths (chdir, open) are carried out through the
/// shim (glibc runs them with its own internal calls), and their errors returned; the
/// children share the pool through the daemon.
#[test]
fn posix_spawn_file_actions_reach_the_pool() {
    c_program_via_daemon("spawnfa", "SPAWNFA-OK", false);
}

/// A shared mapping shows what other processes write with write(2), also processes that do
/// not map the file (tests/c/mapshare.c).
#[test]
fn a_shared_mapping_shows_other_processes_writes() {
    c_program_via_daemon("mapshare", "MAPSHARE-OK", false);
}

/// Stores through a shared writable mapping of a client that ends by `_exit` or SIGKILL
/// reach the file once the daemon sees it gone, and its backing file goes; stores a dead
/// child left reach the file at its death while its parent still maps the file (read-only,
/// on a descriptor opened for appending); a parent reads its child's stores as soon as
/// `waitpid` returns, also from a SIGCHLD handler that runs inside `fork`; a parent that
/// unmaps last before the daemon saw its child die writes the child's stores back; bytes
/// cut off by truncate never come back, and a write racing a truncate stays in the
/// mapping (tests/c/mapdeath.c).
#[test]
fn mapped_stores_of_a_client_that_died_reach_the_file() {
    if !require("gcc", "gcc") {
        return;
    }
    let p = Pool::new("mapdeath", 64);
    let exe = common::compile_c("mapdeath", &p.scratch);
    let exe = exe.display();
    let m = common::MOUNT;
    let out = p.sh(&format!(
        "{exe} {m} store exited exit; {exe} {m} check exited 10000; \
         ! {exe} {m} store killed kill; {exe} {m} check killed 10000; \
         {exe} {m} split split -; {exe} {m} check split 0; \
         {exe} {m} waited waited 200; \
         {exe} {m} truncated cut -; {exe} {m} untruncated cut -; \
         {exe} {m} unseen unseen 100; {exe} {m} sigchld sigchld 500; \
         {exe} {m} resize resize 5000; {exe} {m} nofsetid nofsetid -"
    ));
    assert_eq!(out.matches("MAPDEATH-OK").count(), 9, "{out}");
    let id = sidefiles::pool_id(&std::fs::canonicalize(&p.pool).unwrap());
    let left = sidefiles::map_files_of(id);
    assert!(left.is_empty(), "backing files left: {left:?}");
    p.fsck();
}

/// Readers that map a file again and again while another process writes it never see
/// older data, and the file keeps every write (tests/c/mapremap.c; found by probing:
/// a first mapper of a backing file nobody held wrote it back into the file, reverting
/// writes whose copies had not landed yet, 5 runs of 5 before the fix).
#[test]
fn mappings_made_again_never_show_or_bring_back_older_data() {
    c_program_via_daemon_with("mapremap", "MAPREMAP-OK", false, &["40000"]);
}

/// A process that msyncs its writable mapping again and again, while another process
/// writes other pages of the file, never writes those pages' older bytes back over the
/// writes (tests/c/mapsync.c; found in review: msync compared a page whose write had
/// reached the file but not yet the mapping, and wrote the mapping's bytes back; 61-136
/// of 20,000 writes lost in each of 3 runs before the fix).
#[test]
fn msync_never_writes_older_bytes_over_another_process_s_write() {
    c_program_via_daemon_with("mapsync", "MAPSYNC-OK", false, &["8000", "0"]);
}

/// The same with the mapping made again every 50 msyncs: a write whose hold is on a backing
/// file replaced meanwhile, or that found none yet, still ends up in the file and in the
/// mappings made since (found in review: with the mapping made again every 500 msyncs
/// beside two busy loops, one write in 40,000 read back older bytes in 8 of 24 runs; this
/// test failed 3 times of 4 before the commit's answer, on an unloaded machine).
#[test]
fn msync_of_a_mapping_made_again_and_again_never_writes_older_bytes_over_a_write() {
    c_program_via_daemon_with("mapsync", "MAPSYNC-OK", false, &["40000", "50"]);
}

/// mremap of a whole shared writable mapping (tests/c/mapresize.c, checked on tmpfs and
/// ext4): grown after the file (Python's mmap.resize), shrunk, kept, moved; stores reach
/// the file. Before, it failed with ENOMEM (found by probing Python).
#[test]
fn a_shared_mapping_resized_with_mremap_keeps_its_stores() {
    c_program_via_daemon("mapresize", "MAPRESIZE-OK", false);
}

/// msync writes back the pages this process stored to, as the kernel records them, and
/// only those (tests/c/mapdirty.c, checked on tmpfs and ext4 without the white-box parts):
/// stores reach the file after msync, munmap and exit; a page of the backing file changed
/// without a store (written straight into /dev/shm, as another process's write whose copy
/// is late leaves it) is not written back over the file's bytes, as it was before, when
/// msync compared every page; a forked child's stores to its parent's mapping still reach
/// the file through the parent's msync; mappings moved with mremap or whose protection
/// changed write their stores back, and are recorded again after a whole msync; another
/// thread's stores beside an msync loop all reach the file; stores refused for want of
/// space are written at the next msync.
#[test]
fn msync_writes_back_the_pages_this_process_stored_to() {
    c_program_via_daemon_with("mapdirty", "MAPDIRTY-OK", false, &["shim"]);
}

/// Stores through a shared mapping are seen at once by read and pread, through any
/// descriptor and process, also past the mapped part (tests/c/mapread.c, checked on tmpfs
/// and ext4). Before, reads gave the bytes from before the stores until a write-back
/// (Tokyo Cabinet's hash databases broke, found by probing).
#[test]
fn reads_see_stores_through_shared_mappings() {
    c_program_via_daemon("mapread", "MAPREAD-OK", false);
}

/// A file mapped shared, unmapped and mapped again while it stays open (gdbm, TDB and
/// Kyoto Cabinet map their file again each time it grows) shows at each mapping what was
/// written, truncated, punched or stored by another process's mapping meanwhile
/// (tests/c/maplinger.c, checked on tmpfs and ext4); and its backing file stays from one
/// mapping to the next until the file is closed (white-box). Before, each mapping filled
/// a new backing file from the whole file: gdbm's 50,000 inserts took 12 s against 1.3 s.
#[test]
fn a_file_mapped_again_while_open_keeps_its_backing_file() {
    if !require("gcc", "gcc") {
        return;
    }
    let p = Pool::new("maplinger", 64);
    let id = sidefiles::pool_id(&p.pool.canonicalize().unwrap());
    let prefix = sidefiles::map_file(id, 0, 0);
    let prefix = prefix.strip_suffix("0-0").unwrap();
    c_program_on(&p, "maplinger", "MAPLINGER-OK", false, &[prefix]);
}

/// A file mapped and unmapped while open, opened again with O_TRUNC by the same process
/// and written: its next mapping shows zeros past the end of file; and a live mapping
/// shows what another process's O_TRUNC open left, zeros past it (tests/c/maptrunc.c,
/// checked on tmpfs and ext4). An O_TRUNC did not zero the backing file as ftruncate
/// does: the lingering count's next mapping, and the live mapping, showed the bytes cut
/// off.
#[test]
fn a_file_truncated_at_open_shows_zeros_in_its_mappings() {
    c_program_via_daemon("maptrunc", "MAPTRUNC-OK", false);
}

/// An open with O_TRUNC that fails with EMFILE leaves the file whole, as on Linux, and the
/// same open truncates once a descriptor is free (tests/c/emfile.c, checked on tmpfs and
/// ext4). The shim truncated first and took the descriptor after.
#[test]
fn an_open_that_finds_no_descriptor_truncates_nothing() {
    c_program_via_daemon("emfile", "EMFILE-OK", false);
}

/// Reads and writes that bypass libc (Linux AIO, the raw system call instruction; io_uring
/// takes the same path in the kernel) on a private and on a shared pool descriptor fail
/// with EBADF, never succeed without the file's bytes (tests/c/kernelio.c, which succeeds
/// on tmpfs and ext4). Before, a private descriptor's writes reported success and the file
/// stayed empty (MariaDB's io_uring writes left its data files zeros), and a shared one's
/// AIO read returned the shim's page.
#[test]
fn reads_and_writes_that_bypass_libc_fail_instead_of_losing_data() {
    c_program_via_daemon("kernelio", "KERNELIO-OK", false);
}

/// A program that bypasses libc (tests/c/rawio.c built static, as Go programs are) handed a
/// pool descriptor: its writes and reads fail with EBADF (reads found the end of the file
/// until 2026-11-27, when the stand-in was opened read-only), and
/// the shell sharing the descriptor goes on writing the file. Before, they reached the
/// description's state page (found by probing Go): the shell's next write failed with
/// EBADF, 200 bytes aborted it in the offset lock, a forged page sent its writes into
/// another file, and reads gave the page; the page's size is sealed, so that opening
/// /dev/stdout anew with O_TRUNC cannot cut it from under the shell.
#[test]
fn a_program_without_libc_cannot_damage_a_shared_pool_descriptor() {
    if !require("gcc", "gcc") {
        return;
    }
    let p = Pool::new("rawio", 64);
    let exe = common::compile_c_with("rawio", &p.scratch, &["-static"]);
    let (e, m) = (exe.display(), common::MOUNT);
    let long = "x".repeat(300);
    let out = p.sh(&format!(
        "exec 5>{m}/f; echo one >&5; {e} {long} >&5 2>>err; {e} trunc >&5 2>>err; \
         echo two >&5; exec 5>&-; \
         {e} short > {m}/g 2>>err; echo in > {m}/h; {e} read < {m}/h 2>>err; \
         cat {m}/f; cat err"
    ));
    let ebadf = format!("write errno {}", libc::EBADF);
    assert_eq!(out.matches(&ebadf).count(), 2, "{out}");
    assert!(
        out.starts_with("one\ntwo\n") && out.contains(&format!("read errno {}\n", libc::EBADF)),
        "{out}"
    );
    // Opened anew with O_TRUNC, the page would be cut from under the shell (SIGBUS).
    assert!(
        out.contains(&format!("trunc errno {}", libc::EPERM)),
        "{out}"
    );
    assert_eq!(p.sh(&format!("wc -c < {m}/g")).trim(), "0");
    p.fsck();
}

/// ioctl on pool descriptors answers as Linux's file systems do (tests/c/ioctls.c, checked
/// on tmpfs and ext4): FIONREAD, FIGETBSZ, FIOQSIZE, FIONBIO, clones (EOPNOTSUPP after the
/// kernel's checks, EXDEV to or from a real file), inode flags and extended attributes,
/// unknown requests; also on a description shared with a forked child. Before, the kernel
/// answered for the placeholder (Node's FICLONE_FORCE copy got EINVAL, FIONREAD ENOTTY).
#[test]
fn ioctl_on_pool_files_answers_as_linux_file_systems_do() {
    c_program_via_daemon("ioctls", "IOCTLS-OK", true);
}

/// A read-only shared mapping through a descriptor opened read-only shows the file's later
/// writes (the process's own, another descriptor's, a child's, a growing write and a
/// truncate), as on Linux (tests/c/romap.c, checked on tmpfs and ext4); mprotect to
/// writable is EACCES; a user who may not write the file still maps it. Before, such a
/// mapping was a copy taken at mmap time: a read-only SQLite connection or LMDB
/// environment with mmap read stale pages.
#[test]
fn read_only_shared_mappings_show_later_writes() {
    c_program_via_daemon("romap", "ROMAP-OK", false);
}

/// copy_file_range and sendfile refuse what Linux refuses, in its order (tests/c/xfer.c,
/// checked on tmpfs and ext4): an overlapping copy within one file, a pipe, socket or device
/// at either end of copy_file_range and a directory (EISDIR), offsets that wrap
/// (EOVERFLOW), a sendfile input that is not a regular file (EINVAL) or cannot seek with an
/// offset (ESPIPE). Before, the shim copied: an overlapping copy went ahead, a pipe was read
/// (an empty one blocked for ever) or written.
#[test]
fn copy_file_range_and_sendfile_refuse_what_linux_refuses() {
    c_program_via_daemon("xfer", "XFER-OK", true);
}

/// A thread writing a mapped file and another msyncing its mapping, on a pool in an
/// ordinary file (/var/tmp), where the engine makes writes durable with msync: both finish
/// (tests/c/msyncfile.c; found in review: the engine's msync went through the shim's, and
/// the two threads hung for good).
#[test]
fn msync_beside_a_write_on_a_pool_in_an_ordinary_file_finishes() {
    if !require("gcc", "gcc") {
        return;
    }
    let p = Pool::new_in("/var/tmp", "msyncfile", 64);
    c_program_on(&p, "msyncfile", "MSYNCFILE-OK", false, &[]);
}

/// A thread msyncing a mapping in a tight loop, on a pool in an ordinary file, does not
/// keep another thread's writes to that file waiting: no write sees more than a few msyncs
/// finish while it is in its call (tests/c/msyncfair.c; counts, not times. Found in review:
/// the fill lock keeps no queue, and the msyncing thread took it again before the woken
/// writer ran, 1,780 writes in 60 s against 20,000 msyncs.)
#[test]
fn msync_in_a_loop_does_not_starve_a_write_on_a_pool_in_an_ordinary_file() {
    if !require("gcc", "gcc") {
        return;
    }
    let p = Pool::new_in("/var/tmp", "msyncfair", 64);
    c_program_on(&p, "msyncfair", "MSYNCFAIR-OK", false, &["200", "6"]);
}

/// An fsx-style checker (tests/c/fsx.c) keeps a model of a file's bytes and size through
/// random reads, writes, vectored I/O, O_APPEND writes through a second descriptor,
/// truncates, fallocate's modes, copy_file_range, SEEK_DATA/SEEK_HOLE, reopens and
/// mappings, and compares every read (and the whole file every 1,000 operations); then
/// again with a mapping kept open for the whole run, every store through it synced.
#[test]
fn random_io_matches_a_model_of_the_file() {
    if !require("gcc", "gcc") {
        return;
    }
    let p = Pool::new("fsx", 256);
    let exe = common::compile_c("fsx", &p.scratch);
    let exe = exe.display();
    let m = common::MOUNT;
    let out = p.sh(&format!(
        "{exe} -q {m}/plain 1 10000 && echo FSX-PLAIN-OK; \
         {exe} -q -M -Y {m}/mapped 31 5000 && echo FSX-MAPPED-OK"
    ));
    assert!(
        out.contains("FSX-PLAIN-OK") && out.contains("FSX-MAPPED-OK"),
        "{out}"
    );
    p.fsck();
}

/// A process that changes its credentials (setuid, seteuid, setgroups…) keeps its
/// descriptors' access and is checked as its new self: a forked child dropping to nobody
/// writes to its parent's log and cannot read root's file (tests/c/setids.c; found by
/// probing nginx: the daemon went on checking as root, and a worker that dropped before
/// its first call was refused by the daemon).
#[test]
fn a_process_that_changes_its_credentials_is_checked_as_its_new_self() {
    // SAFETY: reading our own effective uid.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: needs root to change credentials");
        return;
    }
    c_program_via_daemon("setids", "SETIDS-OK", false);
}

/// Set-id bits cleared by writes, truncates and chowns, O_NOATIME refused on another's
/// file, ftruncate allowed by the descriptor, the times of fallocate, futimens(OMIT, OMIT)
/// and chown(-1, -1), and a fresh process that drops to nobody before its first call
/// (tests/c/privs.c, checked on ext4 and tmpfs first; found by pjdfstest and by probing:
/// the bits stayed, and the dropped process was refused by the daemon with EPROTO).
#[test]
fn set_id_bits_noatime_and_times_behave_as_linux() {
    // SAFETY: reading our own effective uid.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: needs root to change credentials");
        return;
    }
    c_program_via_daemon("privs", "PRIVS-OK", false);
}

/// Two threads writing past the end of a mapped file at once: the gap the further write
/// leaves is zeroed in the mapping, never over the nearer write (tests/c/mapgap.c).
#[test]
fn a_write_past_the_end_of_a_mapped_file_zeroes_only_its_gap() {
    c_program_via_daemon_with("mapgap", "MAPGAP-OK", false, &["500"]);
}

/// A child forked while another thread spawns (the lock files are inheritable for that
/// moment) gives the flock of a description it closed back when it execs
/// (tests/c/forkrace.c).
#[test]
fn a_child_forked_during_a_spawn_keeps_no_stray_lock() {
    c_program_via_daemon("forkrace", "FORKRACE-OK", false);
}

/// A process's POSIX locks on a file keep excluding other processes (F_SETLK refused,
/// F_GETLK names the process) through other opens of the file, locks, flocks and OFD locks
/// through them, and forked and spawned children and their exits; closing any descriptor of
/// the file, also of a description that never locked, releases them (tests/c/posixlocks.c,
/// in the pool and in a real directory).
#[test]
fn posix_locks_stay_through_other_opens_and_children_until_a_close() {
    c_program_via_daemon("posixlocks", "POSIXLOCKS-OK", true);
}

//! The shim's own guarantees: a pool opened in-process is exclusive (with a clear error for
//! a second process), a pool that cannot be opened fails only calls under the prefix, and
//! a closed number whose placeholder the shim keeps is closed to the program, and record
//! locks answered in the process keep Linux's semantics, and the temporary-file calls and
//! directory walks glibc serves with its own internal calls (mkstemp, mkdtemp, mktemp,
//! nftw, ftw, glob, scandirat) work in the pool, as does a tree deeper than PATH_MAX.

mod common;

use common::{MOUNT, library, output};
use engram_core::Fs;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

fn scratch(name: &str) -> PathBuf {
    let d = PathBuf::from(format!("/tmp/engram-shim-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A scratch directory with a fresh 16 MiB pool in it.
fn fresh_pool(name: &str) -> (PathBuf, PathBuf) {
    let dir = scratch(name);
    let pool = dir.join("p.pool");
    Fs::mkfs(&pool, 16 << 20).unwrap();
    (dir, pool)
}

/// The shell unmounted the pool cleanly at exit, and /f holds `want`.
fn clean_with(dir: PathBuf, pool: &std::path::Path, want: &[u8]) {
    let fs = Fs::open(pool, &Default::default()).unwrap();
    assert!(fs.mount_info().was_clean);
    assert_eq!(fs.read_file("/f").unwrap(), want);
    drop(fs);
    let _ = std::fs::remove_dir_all(&dir);
}

fn in_process(pool: &std::path::Path, script: &str) -> std::process::Output {
    let mut c = Command::new("bash");
    c.args(["-c", script])
        .env("LD_PRELOAD", library())
        .env("ENGRAM_POOL", pool)
        .env("ENGRAM_MOUNT", MOUNT)
        .env_remove("ENGRAM_SOCKET")
        .env_remove("ENGRAM_CWD");
    output(c, Duration::from_secs(60))
}

/// Compile tests/c/NAME.c and run it on a fresh pool opened in its own process, with the
/// mount prefix as its argument (and, with `real_dir`, a directory outside the pool as a
/// second); it prints `OK` (its name in capitals, then "-OK") when every check passed.
fn c_program_in_process(name: &str, ok: &str, real_dir: bool) {
    if !common::require("gcc", "gcc") {
        return;
    }
    let (dir, pool) = fresh_pool(name);
    let exe = common::compile_c(name, &dir);
    let real = if real_dir {
        let d = dir.join("real");
        std::fs::create_dir(&d).unwrap();
        d.display().to_string()
    } else {
        String::new()
    };
    let out = in_process(&pool, &format!("exec {} {MOUNT} {real}", exe.display()));
    common::remove_lock_files(&pool);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains(ok),
        "{:?}\n{stdout}\n{stderr}",
        out.status
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Stores through a shared writable mapping reach the file when the process exits or
/// execs without munmap (tests/c/mapexit.c: each run a process of its own).
#[test]
fn mapped_stores_reach_the_file_at_exit_and_exec_without_munmap() {
    if !common::require("gcc", "gcc") {
        return;
    }
    let (dir, pool) = fresh_pool("mapexit");
    let exe = common::compile_c("mapexit", &dir);
    let exe = exe.display();
    let out = in_process(
        &pool,
        &format!("{exe} {MOUNT} && {exe} {MOUNT} exec && {exe} {MOUNT} check"),
    );
    common::remove_lock_files(&pool);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("MAPEXIT-OK"),
        "{:?}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Stores through a shared writable mapping of a process that ends by `_exit` or SIGKILL
/// (no exit handler runs) reach the file when the pool is next opened, and the mapping's
/// backing file goes (tests/c/mapdeath.c: each run a process of its own).
#[test]
fn mapped_stores_of_a_process_that_died_reach_the_file_at_the_next_open() {
    if !common::require("gcc", "gcc") {
        return;
    }
    let (dir, pool) = fresh_pool("mapdeath");
    let exe = common::compile_c("mapdeath", &dir);
    let exe = exe.display();
    let out = in_process(
        &pool,
        &format!(
            "{exe} {MOUNT} store exited exit; {exe} {MOUNT} store killed kill; \
             {exe} {MOUNT} check exited 0 && {exe} {MOUNT} check killed 0 && \
             {exe} {MOUNT} truncated cut - ; {exe} {MOUNT} untruncated cut -"
        ),
    );
    let left = engram_core::sidefiles::list(&pool);
    common::remove_lock_files(&pool);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.matches("MAPDEATH-OK").count() == 3,
        "{:?}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(left.is_empty(), "side files left: {left:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_closed_number_kept_as_a_spare_is_closed_to_the_program() {
    c_program_in_process("spare", "SPARE-OK", false);
}

#[test]
fn record_locks_of_an_in_process_pool_keep_linux_semantics() {
    c_program_in_process("locks", "LOCKS-OK", false);
}

#[test]
fn mkstemp_mkdtemp_and_mktemp_make_their_files_in_the_pool() {
    c_program_in_process("tempfiles", "TEMPFILES-OK", true);
}

/// nftw, ftw, glob and scandirat: glibc walks with its internal calls; the shim's results
/// on a tree in the pool must be glibc's on the same tree in a real directory.
#[test]
fn nftw_ftw_glob_and_scandirat_give_libcs_results_in_the_pool() {
    c_program_in_process("walks", "WALKS-OK", true);
}

/// Threads moving the current directory between pool and real directories, renaming a pool
/// directory, and making relative calls and asking getcwd meanwhile (tests/c/cwdrace.c):
/// every answer names one of those directories, and nothing hangs or crashes.
#[test]
fn the_current_directory_changed_under_other_threads() {
    c_program_in_process("cwdrace", "CWDRACE-OK", true);
}

/// A tree deeper than PATH_MAX is made, used and removed through directory descriptors and
/// through chdir as in a real directory: only the path strings a program passes are held
/// to PATH_MAX, not the paths the shim joins them to (tests/c/deep.c).
#[test]
fn a_tree_deeper_than_path_max_works_as_in_a_real_directory() {
    c_program_in_process("deep", "DEEP-OK", true);
}

/// A removed current directory (and a descriptor of one) works as Linux's: it lists
/// nothing, takes no names, has no links and no name for getcwd, and `..` leads to the
/// parent it had, also once that was removed too (tests/c/removedcwd.c, on a real
/// directory first; here with the pool opened in the process).
#[test]
fn a_removed_current_directory_works_as_in_a_real_directory() {
    c_program_in_process("removedcwd", "REMOVEDCWD-OK", true);
}

/// syscall(SYS_renameat2, …) under the prefix (gnulib's renameat2 makes it) and the
/// descriptor calls libuv makes raw (close, statx, read, write…) go to the shim; other
/// numbers go to the kernel.
#[test]
fn raw_syscalls_of_file_calls_go_to_the_pool() {
    c_program_in_process("syscall", "SYSCALL-OK", true);
}

/// A program whose own malloc calls readlink while it sets itself up (jemalloc in rustc)
/// is not made to allocate again from inside it, before the shim's constructor.
#[test]
fn a_malloc_that_calls_readlink_while_starting_is_not_reentered() {
    c_program_in_process("earlymalloc", "EARLYMALLOC-OK", false);
}

/// A library's constructor, which runs before the shim's, reaches the pool (the prefix is
/// read from the environment without allocating until the shim's constructor has run).
#[test]
fn a_library_constructor_reaches_the_pool() {
    if !common::require("gcc", "gcc") {
        return;
    }
    let (dir, pool) = fresh_pool("ctor");
    let c = |f: &str| format!("{}/tests/c/{f}", env!("CARGO_MANIFEST_DIR"));
    let lib = dir.join("libctor.so");
    let st = Command::new("gcc")
        .args(["-O1", "-Wall", "-shared", "-fPIC", "-o"])
        .arg(&lib)
        .arg(c("ctorlib.c"))
        .status()
        .expect("run gcc");
    assert!(st.success());
    let exe = dir.join("ctor");
    let st = Command::new("gcc")
        .args(["-O1", "-Wall", "-o"])
        .arg(&exe)
        .arg(c("ctor.c"))
        .arg(format!("-L{}", dir.display()))
        .arg("-lctor")
        .arg(format!("-Wl,-rpath,{}", dir.display()))
        .status()
        .expect("run gcc");
    assert!(st.success());
    let out = in_process(&pool, &format!("exec {} {MOUNT}", exe.display()));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("CTOR-OK"),
        "{:?}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The lock file of a program's flock stays after it exits while its file lives (a process
/// that outlived the program may still hold it), and goes when the pool is next opened
/// once the file is deleted.
#[test]
fn lock_files_of_deleted_files_are_removed_when_the_pool_is_next_opened() {
    if !common::require("flock", "util-linux") {
        return;
    }
    let (dir, pool) = fresh_pool("lockfiles");
    // Each script is one process that opens the pool (flock runs `true` in a child).
    let run = |script: &str| {
        let out = in_process(&pool, &format!("exec {script}"));
        assert!(
            out.status.success(),
            "{script}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        engram_core::sidefiles::list(&pool)
    };
    let first = run(&format!("flock {MOUNT}/f true"));
    assert_eq!(
        first.len(),
        1,
        "one lock file for the locked inode: {first:?}"
    );
    let both = run(&format!("flock {MOUNT}/g true"));
    assert_eq!(both.len(), 2, "f's file stays while f lives: {both:?}");
    assert_eq!(run(&format!("rm {MOUNT}/g")).len(), 2);
    drop(Fs::open(&pool, &Default::default()).unwrap());
    assert_eq!(
        engram_core::sidefiles::list(&pool),
        first,
        "g's file went, f's stayed"
    );
    engram_core::sidefiles::remove_all(&pool);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The pool's file, which a process that opens the pool in-process keeps open (it carries
/// the pool's lock), sits at 64 or above: the shell's own redirections still get the small
/// numbers, and nothing else of the pool's is left open.
#[test]
fn an_in_process_pool_keeps_the_small_descriptor_numbers_free() {
    let (dir, pool) = fresh_pool("inproc-lowfds");
    let out = in_process(
        &pool,
        r#"echo hi > /mnt/engram/f
        ls -l /proc/$$/fd | awk '$11 ~ /engram/ { print ($9 < 64 ? "under64" : "over64"), $11 }'
        exec 3>/mnt/engram/g 4>&3
        echo three >&3
        read x < /mnt/engram/g; echo "$x""#,
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 2, "{stdout}\n{stderr}");
    assert_eq!(lines[0], format!("over64 {}", pool.display()), "{stdout}");
    assert_eq!(lines[1], "three", "{stdout}\n{stderr}");
    clean_with(dir, &pool, b"hi\n");
}

#[test]
fn in_process_pool_is_exclusive_with_a_clear_error() {
    let (dir, pool) = fresh_pool("inproc");
    // One process (the shell's builtins) uses the pool; a child process cannot.
    let out = in_process(
        &pool,
        "echo one > /mnt/engram/f; read x < /mnt/engram/f; echo \"$x\"; \
         /bin/cat /mnt/engram/f; echo \"cat=$?\"; /bin/cat /etc/hostname >/dev/null; echo \"real=$?\"",
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stdout.starts_with("one\ncat=1\nreal=0"),
        "{stdout}\n{stderr}"
    );
    assert!(stderr.contains("in use by another process"), "{stderr}");
    assert!(stderr.contains("engram run"), "{stderr}");
    clean_with(dir, &pool, b"one\n");
}

#[test]
fn a_missing_pool_fails_only_calls_under_the_prefix_and_says_so_once() {
    let dir = scratch("missing");
    let out = in_process(
        &dir.join("nope.pool"),
        "ls /mnt/engram; ls /mnt/engram/a; echo x > /mnt/engram/b; \
         echo fine > /tmp/engram-shim-ok-$$; cat /tmp/engram-shim-ok-$$; rm /tmp/engram-shim-ok-$$",
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stdout.trim(), "fine", "{stderr}");
    // Once per process: ls, ls, and the shell itself.
    assert_eq!(stderr.matches("engram-preload: ").count(), 3, "{stderr}");
    assert!(stderr.contains("nope.pool"), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_forked_child_of_an_in_process_pool_fails_cleanly_and_the_parent_goes_on() {
    let (dir, pool) = fresh_pool("forked");
    // The shell connects (and borrows the connection) before each subshell forks: the
    // child must not use the parent's connection, the parent keeps it.
    let out = in_process(
        &pool,
        "echo one > /mnt/engram/f; [ -e /mnt/engram/f ] && echo exists; \
         ( read x < /mnt/engram/f; echo \"child=$?\" ); \
         ( [ -e /mnt/engram/f ]; echo \"child-test=$?\" ); \
         read y < /mnt/engram/f; echo \"parent=$y\"; echo two >> /mnt/engram/f",
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        stdout, "exists\nchild=1\nchild-test=1\nparent=one\n",
        "{stderr}"
    );
    assert!(stderr.contains("forked child cannot use it"), "{stderr}");
    clean_with(dir, &pool, b"one\ntwo\n");
}

//! FIFOs, sockets and devices in the pool through the shim: the C program tests/c/special.c
//! (run first without the shim in a real directory, where its expectations are Linux's),
//! and the tools: mkfifo with a writer and a reader in two processes, ls, stat, mknod, cat
//! of a device, tar and `cp -a` of a tree holding them, find, rm.

mod common;

use common::{Pool, output, require};
use engram_core::sidefiles;
use std::process::Command;
use std::time::Duration;

/// Whether the pool has a kernel FIFO beside it in /dev/shm.
fn has_kernel_fifo(p: &Pool) -> bool {
    sidefiles::list(&p.pool)
        .iter()
        .any(|f| f.to_string_lossy().contains("/engram-fifo-"))
}

#[test]
fn c_program_gives_linux_answers_in_the_pool() {
    if !require("gcc", "gcc") {
        return;
    }
    let p = Pool::new("special-c", 64);
    let exe = common::compile_c("special", &p.scratch);
    // tmpfs, as the pool's side files.
    let real = std::path::PathBuf::from(format!("/dev/shm/engram-special-{}", std::process::id()));
    std::fs::create_dir_all(&real).unwrap();
    let mut native = Command::new(&exe);
    native.arg(&real);
    let out = output(native, Duration::from_secs(60));
    let _ = std::fs::remove_dir_all(&real);
    let said = |out: &std::process::Output| {
        format!(
            "{:?}\n{}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    };
    assert!(out.status.success(), "without the shim: {}", said(&out));
    let mut c = p.command(exe.to_str().unwrap());
    c.arg(common::MOUNT);
    let out = output(c, Duration::from_secs(60));
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("SPECIAL-OK"),
        "in the pool: {}",
        said(&out)
    );
    assert!(has_kernel_fifo(&p), "no kernel FIFO in /dev/shm");
    p.fsck();
}

#[test]
fn tools_make_use_copy_and_remove_special_files() {
    let p = Pool::new("special-sh", 64);
    let out = p.sh(r#"
        M=/mnt/engram
        umask 022
        export LC_ALL=C
        mkfifo $M/p
        test -p $M/p
        (echo hi > $M/p &)
        test "$(timeout 20 cat $M/p)" = hi
        ls -l $M/p | cut -c1
        mknod $M/n c 1 3
        stat -c '%F %t,%T' $M/n
        cat $M/n 2> err && exit 1
        grep -q 'Permission denied' err
        mkdir -p $M/t/sub
        mkfifo -m 600 $M/t/sub/fifo
        mknod $M/t/blk b 8 1
        echo data > $M/t/f
        tar cf $M/t.tar -C $M t
        tar tvf $M/t.tar | cut -c1 | sort | tr -d '\n'; echo
        mkdir $M/x
        tar xf $M/t.tar -C $M/x
        test -p $M/x/t/sub/fifo
        test -b $M/x/t/blk
        stat -c '%a %t,%T' $M/x/t/sub/fifo $M/x/t/blk
        cp -a $M/t $M/copy
        test -p $M/copy/sub/fifo
        test -b $M/copy/blk
        test "$(cat $M/copy/f)" = data
        stat -c '%a %t,%T' $M/copy/sub/fifo $M/copy/blk
        find $M -type p | sort
        rm $M/p $M/n
        rm -r $M/t $M/x $M/copy $M/t.tar
        ls $M | wc -l
        "#);
    let m = common::MOUNT;
    let want = format!(
        "p\ncharacter special file 1,3\n-bddp\n600 0,0\n644 8,1\n600 0,0\n644 8,1\n\
         {m}/copy/sub/fifo\n{m}/p\n{m}/t/sub/fifo\n{m}/x/t/sub/fifo\n0\n"
    );
    assert_eq!(out, want);
    // The pipe was a kernel FIFO beside the pool; it stays until the pool is next mounted.
    assert!(has_kernel_fifo(&p), "no kernel FIFO in /dev/shm");
    p.fsck();
}

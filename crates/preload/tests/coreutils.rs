//! coreutils, tar, find, git, `sed -i` and a shell script with redirections and pipes, run
//! on EngramFS through the shim; every result is checked.

mod common;

use common::{Pool, make_tree};

#[test]
fn coreutils_round_trip_a_real_tree() {
    let p = Pool::new("coreutils", 128);
    make_tree(&p.scratch.join("src"));
    let out = p.sh(r#"
        M=/mnt/engram
        mkdir -p $M/x/y/z
        test -d $M/x/y/z
        cp -r src $M/tree
        cp -r $M/tree back
        diff -r src back
        (cd src && find . -type f | sort | xargs sha256sum) > sums.real
        (cd $M/tree && find . -type f | sort | xargs sha256sum) > sums.pool
        cmp sums.real sums.pool
        test "$(readlink $M/tree/link)" = a/hello.txt
        test "$(cat $M/tree/link)" = "hello world"
        ls -la $M/tree | grep -q ' link -> a/hello.txt'
        ls -la $M/tree/a/b | grep -c '^-' > count
        test "$(cat count)" = 51
        test "$(find $M/tree -type f | wc -l)" = 53
        test "$(find $M/tree -type d | wc -l)" = 5
        du -s $M/tree | awk '{ exit !($1 >= 2900) }'
        mv $M/tree $M/moved
        test ! -e $M/tree
        mv $M/moved/a/hello.txt $M/moved/hi.txt
        test "$(cat $M/moved/hi.txt)" = "hello world"
        ln -s /mnt/engram/moved/hi.txt $M/abs
        test "$(cat $M/abs)" = "hello world"
        ln -s ../src/a/hello.txt $M/out
        touch -d '2001-02-03 04:05:06' $M/stamp
        test "$(stat -c %Y $M/stamp)" = "$(date -d '2001-02-03 04:05:06' +%s)"
        test "$(stat -c %s $M/moved/a/b/c/big.bin)" = 3000000
        test "$(stat -c %F $M/moved)" = directory
        dd if=src/a/b/c/big.bin of=$M/dd bs=65536 status=none
        dd if=$M/dd of=dd.back bs=4096 skip=1 count=10 status=none
        cmp dd.back <(tail -c +4097 src/a/b/c/big.bin | head -c 40960)
        dd if=/dev/zero of=$M/dd bs=1 count=1 seek=5 conv=notrunc status=none
        test "$(stat -c %s $M/dd)" = 3000000
        tar cf $M/t.tar -C src .
        mkdir $M/untar
        tar xf $M/t.tar -C $M/untar
        diff -r src $M/untar
        tar cf t2.tar -C $M/untar .
        mkdir untar2 && tar xf t2.tar -C untar2 && diff -r src untar2
        rm -rf $M/moved $M/untar
        test ! -e $M/moved
        # cp keeps a sparse file sparse (64 MiB, 8 KiB of it data).
        printf head > $M/sparse && truncate -s 64M $M/sparse && printf tail >> $M/sparse
        cp $M/sparse $M/sparse.copy
        cmp $M/sparse $M/sparse.copy
        test "$(stat -c %b $M/sparse.copy)" -lt 100
        rm $M/sparse $M/sparse.copy
        ls $M | sort | tr '\n' ' '
        "#);
    assert_eq!(out.trim(), "abs dd out stamp t.tar x");
    p.fsck();
}

/// Shell redirections and pipes into the pool, cd into it and relative paths from there,
/// a tree deeper than PATH_MAX made by `mkdir -p`, entered by cd, found by find and removed
/// by `rm -rf`, and a current directory renamed (by the shell, then by a child process) or
/// removed under the shell (`ls` lists nothing there, `..` leads out), all as in a real
/// directory.
#[test]
fn shell_redirections_pipes_and_cd() {
    let p = Pool::new("shell", 64);
    let out = p.sh(r#"
        M=/mnt/engram
        echo one > $M/f
        echo two >> $M/f
        /bin/echo three >> $M/f
        { echo four; /bin/echo five; printf 'six\n'; } >> $M/f
        test "$(wc -l < $M/f)" = 6
        cat $M/f | tr a-z A-Z | sort > $M/sorted
        test "$(head -1 $M/sorted)" = FIVE
        exec 3> $M/fd3
        echo via-3 >&3
        /bin/echo via-3-child >&3
        exec 3>&-
        test "$(cat $M/fd3)" = "via-3
via-3-child"
        sort < $M/f > sorted.real
        cmp sorted.real <(sort $M/f)
        ls -la / > $M/root.txt
        grep -q ' etc' $M/root.txt
        cd $M
        mkdir -p d/e && cd d/e
        test "$(pwd)" = /mnt/engram/d/e
        echo rel > r.txt
        /bin/cat ../../d/e/r.txt > copy
        test "$(cat /mnt/engram/d/e/copy)" = rel
        ls | tr '\n' ' '
        cd /
        test "$(cat mnt/engram/d/e/r.txt)" = rel
        sh -c 'cd /mnt/engram/d && cat e/r.txt && echo sub > sub.txt'
        test "$(cat /mnt/engram/d/sub.txt)" = sub
        n=$(printf 'd%.0s' $(seq 1 200)); deep=$M/deep
        for i in $(seq 1 25); do deep=$deep/$n; done
        mkdir -p "$deep"
        (cd $M/deep && for i in $(seq 1 25); do cd $n; done && echo bottom > f)
        test "$(find $M/deep -name f | wc -l)" = 1
        rm -rf $M/deep
        test ! -e $M/deep
        mkdir -p $M/ren/b
        echo x > $M/ren/b/f
        cd $M/ren/b
        mv $M/ren $M/ren2
        test "$(cat f)" = x
        test "$(/bin/pwd)" = $M/ren2/b
        test "$(ls)" = f
        test "$(sh -c "mv $M/ren2 $M/ren3; cat f; /bin/pwd")" = "x
$M/ren3/b"
        test "$(/bin/pwd)" = $M/ren3/b
        test "$(cat ../b/f)" = x
        mkdir -p $M/sy/sub
        cd $M/sy/sub
        mv $M/sy $M/sz
        ln -s sz $M/sy
        test "$(/bin/pwd)" = $M/sz/sub
        mkdir $M/gone
        cd $M/gone
        rmdir $M/gone
        if /bin/pwd 2>/dev/null || touch h 2>/dev/null; then exit 1; fi
        test -z "$(ls -a)"
        test "$(ls -la)" = "total 0"
        test "$(stat -c %h .)" = 0
        test "$(cd -P .. && /bin/pwd)" = $M
        cd $M
        test "$(sh -c "mkdir g; cd g; rmdir ../g; ls; cd -P ..; /bin/pwd")" = $M
        cd /
        echo done
        "#);
    assert!(out.contains("copy r.txt"), "{out}");
    assert!(out.trim_end().ends_with("rel\ndone"), "{out}");
    p.fsck();
}

/// rev and colrm read their input with glibc's wide-character functions (fgetws, getwc),
/// from a pool file they open and from a pool file as standard input, and write a pool
/// file as standard output: UTF-8 text comes out as from a real file.
#[test]
fn rev_and_colrm_read_wide_characters_from_the_pool() {
    if !common::require("colrm", "bsdextrautils") {
        return;
    }
    let p = Pool::new("wide", 64);
    let out = p.sh(r#"
        M=/mnt/engram
        export LC_ALL=C.UTF-8
        printf 'a\nh\303\251llo w\303\266rld \342\202\254\nno newline' > $M/t
        cp $M/t real.txt
        rev $M/t
        rev < $M/t > $M/rev.out
        cmp $M/rev.out <(rev real.txt)
        colrm 2 3 < $M/t > $M/colrm.out
        cmp $M/colrm.out <(colrm 2 3 < real.txt)
        cat $M/colrm.out
        "#);
    assert_eq!(
        out,
        "a\n\u{20ac} dlr\u{f6}w oll\u{e9}h\nenilwen on\
         a\nhlo w\u{f6}rld \u{20ac}\nnnewline",
        "{out}"
    );
    p.fsck();
}

/// util-linux `fallocate`: holes punched (`-p`), ranges zeroed with and without keeping the
/// size (`-z`, `-n -z`), and zeros found and punched (`-d`, through SEEK_DATA and
/// SEEK_HOLE): the bytes a copy outside the pool gets by writing zeros with `dd` (not by
/// fallocate: tmpfs has no ZERO_RANGE), and the pages freed or given.
#[test]
fn fallocate_punches_holes_and_zeroes_ranges() {
    let p = Pool::new("fallocate", 64);
    let out = p.sh(r#"
        M=/mnt/engram
        head -c 40960 /dev/urandom > real
        cp real $M/f
        zeros() { dd if=/dev/zero of=real bs=1 seek=$1 count=$2 conv=notrunc status=none; }
        for step in "-p 4096 8192" "-z 100 5000" "-n 50000 100" "-z 39000 10000" "-p 20000 1"; do
            set -- $step
            case $1 in
                -n) fallocate -n -z -o $2 -l $3 $M/f ;;  # past the end, the size kept
                *) fallocate $1 -o $2 -l $3 $M/f; zeros $2 $3 ;;
            esac
            cmp real $M/f
            echo "$step: $(stat -c %s $M/f) $(stat -c %b $M/f)"
        done
        head -c 4096 /dev/urandom > $M/g
        head -c 16384 /dev/zero >> $M/g
        head -c 4096 /dev/urandom >> $M/g
        cp $M/g g.real
        fallocate -d $M/g
        cmp g.real $M/g
        echo "dig: $(stat -c %s $M/g) $(stat -c %b $M/g)"
        "#);
    assert_eq!(
        out,
        "-p 4096 8192: 40960 64\n\
         -z 100 5000: 40960 72\n\
         -n 50000 100: 40960 80\n\
         -z 39000 10000: 49000 96\n\
         -p 20000 1: 49000 96\n\
         dig: 24576 16\n",
        "{out}"
    );
    p.fsck();
}

/// More processes than a daemon once served (64), and than one `futex_waitv` can sleep on
/// (128), connected at once: 150 background subshells each write a file and wait (a
/// builtin `test` in a loop, a request each time) until all have written; then each
/// appends a line.
#[test]
fn a_hundred_and_fifty_processes_share_the_daemon_at_once() {
    let p = Pool::new("many", 64);
    let out = p.sh(r#"
        M=/mnt/engram
        n=150
        for i in $(seq $n); do
            (echo $i > $M/f$i; while [ ! -e $M/go ]; do sleep 0.05; done; echo again >> $M/f$i) &
        done
        for t in $(seq 600); do
            [ "$(ls $M | wc -l)" -ge $n ] && break
            sleep 0.05
        done
        touch $M/go
        wait
        rm $M/go
        cat $M/f* | grep -c again
        cat $M/f* | grep -v again | sort -un | wc -l
        ls $M | wc -l
        "#);
    let lines: Vec<&str> = out.lines().map(str::trim).collect();
    assert_eq!(lines, ["150", "150", "150"], "{out}");
    p.fsck();
}

/// git and `sed -i`: they make their files with mkstemp (which glibc serves with its own
/// internal open) and git removes its lock files from exit handlers.
#[test]
fn git_and_sed_in_place_work_in_the_pool() {
    if !common::require("git", "git") {
        return;
    }
    let p = Pool::new("git", 128);
    let out = p.sh(r#"
        M=/mnt/engram
        export HOME=$PWD GIT_CONFIG_NOSYSTEM=1
        git init -q $M/repo
        cd $M/repo
        git config user.email test@example.com
        git config user.name test
        for i in $(seq 1 20); do echo "line $i" > f$i.txt; done
        mkdir -p sub/deep && echo deep > sub/deep/x
        git add -A
        git commit -q -m first
        sed -i 's/line 3/third line/' f3.txt
        test "$(cat f3.txt)" = "third line"
        git commit -q -a -m second
        test "$(git log --oneline | wc -l)" = 2
        test -z "$(git status --porcelain)"
        git show HEAD:f3.txt
        git diff HEAD~1 --stat | tail -1
        test ! -e .git/index.lock
        git clone -q $M/repo $M/clone
        diff -r --exclude=.git $M/repo $M/clone && echo same
        "#);
    assert_eq!(
        out.trim(),
        "third line\n 1 file changed, 1 insertion(+), 1 deletion(-)\nsame",
        "{out}"
    );
    p.fsck();
}

/// make builds a program in the pool with gcc (each a process of its own, sharing the pool
/// through the daemon) and runs it from there; patch (whose gnulib renameat2 calls
/// `syscall`) edits a file in place.
#[test]
fn make_gcc_and_patch_work_in_the_pool() {
    if !(common::require("gcc", "gcc")
        && common::require("make", "make")
        && common::require("patch", "patch"))
    {
        return;
    }
    let p = Pool::new("make", 128);
    let out = p.sh(r#"
        cd /mnt/engram
        mkdir proj && cd proj
        printf '#include <stdio.h>\nint twice(int);\nint main(void) { printf("%%d\\n", twice(21)); return 0; }\n' > main.c
        printf 'int twice(int x) { return 2 * x; }\n' > util.c
        printf 'prog: main.o util.o\n\tgcc -o $@ $^\n%%.o: %%.c\n\tgcc -c -O1 -o $@ $<\n' > Makefile
        make -s
        ./prog
        test "$(make -s 2>&1)" = ""
        touch util.c && make -s && ./prog
        printf '#!/bin/sh\necho script "$@"\n' > run.sh && chmod +x run.sh && ./run.sh ok
        cp util.c old.c && sed -i 's/2 \* x/x + x/' util.c
        diff -u old.c util.c > fix.patch || true
        patch -s old.c fix.patch && cmp old.c util.c && echo patched
        "#);
    assert_eq!(out.trim(), "42\n42\nscript ok\npatched", "{out}");
    p.fsck();
}

/// A flock is the open file description's, wherever the description went: the shell idiom
/// `exec 9>f; flock -x 9` holds the lock after flock(1) has exited (the shell keeps the
/// description), until the shell closes it; a program exec'd straight onto an inherited
/// descriptor (its first call a flock, before it has connected) locks the same file as
/// everyone else; a lock passes through an image that never touches the pool (`sh -c
/// 'exec sleep'`) to the next; a lock taken by a forked child on a shared
/// description stays after the child exits; and a POSIX lock survives the exec of its
/// process. Another open of the file contends with each (`flock -n` / `F_SETLK` refused).
#[test]
fn locks_travel_with_their_description_through_fork_and_exec() {
    if !(common::require("flock", "util-linux") && common::require("python3", "python3")) {
        return;
    }
    let p = Pool::new("flockexec", 64);
    let out = p.sh(r#"
        M=/mnt/engram
        exec 9>$M/lk
        flock -x 9
        flock -n $M/lk true && echo free || echo held
        exec 9>&-
        flock -n $M/lk true && echo free || echo held
        exec 8>$M/sh
        flock -s 8
        flock -n -s $M/sh true && echo shared
        flock -n -x $M/sh true && echo free || echo held
        flock -u 8
        flock -n -x $M/sh true && echo free || echo held
        ( exec 7>$M/direct; exec python3 -c 'import fcntl, time
fcntl.flock(7, fcntl.LOCK_EX)
open("ready", "w").close()
time.sleep(60)' >/dev/null 2>&1 ) &
        holder=$!
        until [ -e ready ]; do sleep 0.05; done
        flock -n $M/direct true && echo free || echo held
        kill $holder; wait $holder || true
        exec 6>$M/twice
        flock 6
        sh -c 'exec sleep 60' >/dev/null 2>&1 &
        holder=$!
        exec 6>&-
        flock -n $M/twice true && echo free || echo held
        kill $holder; wait $holder || true
        python3 - <<'PY'
import fcntl, os, subprocess, sys
M = '/mnt/engram'
def contended(path, cmd):
    fd = os.open(path, os.O_RDWR)
    try:
        cmd(fd)
        return 'free'
    except OSError:
        return 'held'
    finally:
        os.close(fd)
fd = os.open(M + '/forked', os.O_RDWR | os.O_CREAT)
pid = os.fork()
if pid == 0:
    fcntl.flock(fd, fcntl.LOCK_EX)
    os._exit(0)
os.waitpid(pid, 0)
print('forked', contended(M + '/forked', lambda f: fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)))
fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
print('parent converts')
os.close(fd)
print('forked', contended(M + '/forked', lambda f: fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)))
# A POSIX lock of this process survives its exec; the new image tests it from a child.
fd = os.open(M + '/posix', os.O_RDWR | os.O_CREAT)
os.set_inheritable(fd, True)
fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
sys.stdout.flush()
os.execvp('python3', ['python3', '-c', '''
import fcntl, os
M = "/mnt/engram"
pid = os.fork()
if pid == 0:
    fd = os.open(M + "/posix", os.O_RDWR)
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        print("posix after exec free")
    except OSError:
        print("posix after exec held")
    os._exit(0)
os.waitpid(pid, 0)
'''])
PY
        "#);
    assert_eq!(
        out.split_whitespace().collect::<Vec<_>>().join(" "),
        "held free shared held free held held forked held parent converts forked free posix after exec held",
        "{out}"
    );
    p.fsck();
}

/// An image that holds no EngramFS description tells the image it execs so
/// (ENGRAM_NOTHING_INHERITED), which then skips its scan of /proc/self/fd; one that holds
/// any does not, even when the program puts the marker in the environment itself, and its
/// descriptions reach the new image. The marker never stays in a program's environment.
#[test]
fn an_exec_with_nothing_to_inherit_skips_the_scan_for_descriptions() {
    if !(common::require("strace", "strace") && common::require("python3", "python3")) {
        return;
    }
    let p = Pool::new("noinherit", 64);
    let out = p.sh(r#"
        M=/mnt/engram
        scans() { grep -c 'openat(.*"/proc/self/fd"' "$1" || true; }
        strace -f -qq -e trace=openat -o none.trace sh -c 'true'
        echo "nothing open: $(scans none.trace) scans"
        exec 3>$M/f
        strace -f -qq -e trace=openat -o open.trace sh -c 'echo through 3 >&3'
        echo "one open: $(scans open.trace) scans"
        ENGRAM_NOTHING_INHERITED=1 sh -c 'echo forged marker >&3'
        exec 3>&-
        cat $M/f
        # A marker the program sets itself reaches system()'s shell, which the shim does not
        # see: the shell does not believe it (its value is not a pid of its own or its parent's).
        python3 -c 'import os
fd = os.open("/mnt/engram/g", os.O_WRONLY | os.O_CREAT)
os.set_inheritable(fd, True)
os.environ["ENGRAM_NOTHING_INHERITED"] = "1"
os.system("echo through system >&%d" % fd)'
        cat $M/g
        sh -c 'env' | grep -c ENGRAM_NOTHING_INHERITED || true
        "#);
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        [
            "nothing open: 0 scans",
            "one open: 1 scans",
            "through 3",
            "forged marker",
            "through system",
            "0"
        ],
        "{out}"
    );
    p.fsck();
}

/// What a connection to the daemon keeps open (its socket, the server's region, the pool
/// file) sits at 64 and above: a shell that has reached the pool still finds the numbers
/// below free for its own redirections.
#[test]
fn a_connected_shell_keeps_the_small_descriptor_numbers_free() {
    let p = Pool::new("lowfds", 64);
    let out = p.sh(r#"
        echo hi > /mnt/engram/f
        ls -l /proc/$$/fd > listing
        # Below 64: nothing of the connection's (socket, memfd, pool file); at or above: all.
        awk '$9 ~ /^[0-9]+$/ && $11 ~ /socket|memfd|engram/ { print ($9 < 64 ? "under64" : "over64"), $11 }' listing |
            sed 's/socket:.*/socket/' | sort | tr '\n' ' '
        echo
        exec 5>/mnt/engram/g 6>&5
        echo five >&5
        cat /mnt/engram/g
        "#);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2, "{out}");
    assert!(!lines[0].contains("under64"), "small numbers taken: {out}");
    assert!(
        lines[0].contains("over64 socket") && lines[0].contains("over64 /memfd:engram-common"),
        "the connection's descriptors: {out}"
    );
    assert_eq!(lines[1], "five", "{out}");
}

/// A child that opens another pool than its parent's does not take the parent's current
/// directory there by its inode number: `ENGRAM_CWD` names the pool its handle belongs to.
#[test]
fn an_inherited_current_directory_is_not_looked_up_in_another_pool() {
    let p = Pool::new("cwdpool", 64);
    let other = p.scratch.join("other.pool");
    engram_core::Fs::mkfs(&other, 16 << 20).unwrap();
    let q = engram_core::Fs::open(&other, &Default::default()).unwrap();
    q.mkdir("/other", 0o755).unwrap();
    q.write_file("/other/secret", b"not yours").unwrap();
    let q_ino = q.stat("/other").unwrap().ino;
    drop(q);
    let out = p.sh(&format!(
        r#"
        mkdir /mnt/engram/d
        cd /mnt/engram/d
        env -u ENGRAM_SOCKET ENGRAM_POOL={} sh -c 'cat secret 2>/dev/null || echo refused'
        "#,
        other.display()
    ));
    // The test is only meaningful if the two directories share an inode number.
    let fs = engram_core::Fs::connect(&p.socket).unwrap();
    assert_eq!(fs.stat("/d").unwrap().ino, q_ino);
    assert_eq!(out.trim(), "refused");
    common::remove_lock_files(&other);
}

//! Open file descriptions shared between processes through the daemon: every process
//! holding one inherited descriptor moves one offset, one call at a time, as Linux does.

mod common;

use common::{Pool, require};

/// Children writing their output through one inherited descriptor (`xargs -P4 ... > log`,
/// two background subshells, forked Python processes) each write their own range: no line
/// is lost or overwritten. Before the offset lock was shared between processes, about three
/// writes in four landed over another's.
#[test]
fn writers_sharing_one_description_lose_no_line() {
    let p = Pool::new("sharedoff", 64);
    let out = p.sh(r#"
        cd /mnt/engram
        seq 1 4 | xargs -P4 -I{} sh -c 'for i in $(seq 1 300); do echo "{}-$i"; done' > out.log
        wc -l < out.log
        sort out.log | uniq | wc -l
        exec 5> s
        (for i in $(seq 200); do echo X$i >&5; done) &
        (for i in $(seq 200); do echo Y$i >&5; done) &
        wait
        exec 5>&-
        wc -l < s
        grep -c '^X[0-9]*$' s
        grep -c '^Y[0-9]*$' s
    "#);
    let counts: Vec<&str> = out.lines().collect();
    assert_eq!(counts, ["1200", "1200", "400", "200", "200"], "{out}");
    if require("python3", "python3") {
        let out = p.sh(r#"
            cd /mnt/engram
            python3 - <<'EOF'
import os
fd = os.open("py.log", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
kids = []
for k in range(2):
    pid = os.fork()
    if pid == 0:
        for i in range(2000):
            os.write(fd, b"%d-%05d\n" % (k, i))
        os._exit(0)
    kids.append(pid)
for pid in kids:
    os.waitpid(pid, 0)
lines = open("py.log", "rb").read().split(b"\n")[:-1]
print(len(lines), len(set(lines)), all(len(l) == 7 for l in lines))
EOF
        "#);
        assert_eq!(out.trim(), "4000 4000 True");
    }
    p.fsck();
}

/// `/dev/stdin`, `/dev/stdout`, `/dev/fd/N` and `/proc/self/fd/N` of a pool file reach the
/// file, as on a real directory: before, the kernel followed them to the shim's placeholder
/// (`tee /dev/stdout > f` died of SIGBUS, `cat /dev/stdin < f` printed the shim's state).
#[test]
fn paths_naming_descriptors_reach_their_files() {
    let p = Pool::new("magicfd", 64);
    let script = r#"
        cd "$1"
        echo hi | tee /dev/stdout > o1; cat o1
        printf 'abc\n' > in; cat /dev/stdin < in
        exec 7< in; cat /dev/fd/7; cat /proc/self/fd/7; cat /proc/thread-self/fd/7
        readlink /proc/self/fd/7 | sed "s|^$1|DIR|"
        readlink /dev/stdin
        stat -L -c %s /dev/stdin < in
        test -h /dev/stdin && echo stdin-is-a-link
        echo hi | dd of=/dev/stdout status=none > o2; cat o2
        mkdir -p d/e; echo z > d/e/f; exec 8< d
        ls /dev/fd/8/; cat /dev/fd/8/e/f; ls /proc/self/fd/8/e
        echo long content > t; exec 9>>t; : > /dev/fd/9; wc -c < t
        cat /dev/fd/7/x 2>/dev/null || echo not-a-directory
        mv in renamed; cat /dev/fd/7
    "#;
    let real = p.scratch.join("real");
    std::fs::create_dir_all(&real).unwrap();
    let want = p.sh(&format!(
        "bash -c '{}' _ {}",
        script.replace('\'', r"'\''"),
        real.display()
    ));
    let got = p.sh(&format!(
        "bash -c '{}' _ /mnt/engram",
        script.replace('\'', r"'\''")
    ));
    // Short: a placeholder's page read as text would be 8 KiB of zeros.
    let short = |s: &str| s.chars().take(400).collect::<String>();
    assert_eq!(short(&got), short(&want));
    assert!(
        want.contains("/proc/self/fd/0\n4\nstdin-is-a-link\n"),
        "{want}"
    );
    p.fsck();
}

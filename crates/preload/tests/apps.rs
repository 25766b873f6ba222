//! python3 and sqlite3 on EngramFS through the shim.

mod common;

use common::{Pool, make_tree, output, require};
use engram_core::Fs;
use std::time::{Duration, Instant};

const PY: &str = r#"
import os, shutil, hashlib, fcntl, errno, subprocess, sys
M = '/mnt/engram'
root = M + '/py'
os.makedirs(root + '/d/e')
with open(root + '/d/f.txt', 'w') as f:
    f.write('hello\n' * 1000)
with open(root + '/d/f.txt') as f:
    assert f.read() == 'hello\n' * 1000
with open(root + '/d/f.txt', 'a') as f:
    f.write('tail')
with open(root + '/d/f.txt', 'rb') as f:
    f.seek(-4, 2)
    assert f.read() == b'tail'
assert sorted(os.listdir(root + '/d')) == ['e', 'f.txt']
walk = [(p, sorted(d), sorted(f)) for p, d, f in os.walk(root)]
assert walk == [(root, ['d'], []), (root + '/d', ['e'], ['f.txt']), (root + '/d/e', [], [])], walk
assert [e.name for e in os.scandir(root)] == ['d']

def digest(top):
    out = {}
    for p, _, files in os.walk(top):
        for n in files:
            q = os.path.join(p, n)
            out[os.path.relpath(q, top)] = os.readlink(q) if os.path.islink(q) else hashlib.sha256(open(q, 'rb').read()).hexdigest()
    return out

src = sys.argv[1]
shutil.copytree(src, root + '/tree', symlinks=True)
shutil.copytree(root + '/tree', src + '.back', symlinks=True)
assert digest(src) == digest(root + '/tree') == digest(src + '.back')
assert os.stat(root + '/d/f.txt').st_size == 6004

# descriptors: dup2, fcntl flags, locks, fork shares the offset
fd = os.open(root + '/o', os.O_RDWR | os.O_CREAT, 0o600)
assert fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE == os.O_RDWR
os.write(fd, b'abc')
fd2 = os.dup(fd)
os.dup2(fd, 30)
os.write(30, b'def')
assert os.lseek(fd2, 0, os.SEEK_CUR) == 6
fcntl.lockf(fd, fcntl.LOCK_EX)
fcntl.flock(fd, fcntl.LOCK_SH)
pid = os.fork()
if pid == 0:
    os.write(fd, b'child')
    os._exit(0)
os.waitpid(pid, 0)
assert os.lseek(fd, 0, os.SEEK_CUR) == 11
os.write(fd, b'!')
os.lseek(fd, 0, 0)
assert os.read(fd, 100) == b'abcdefchild!'
for x in (fd, fd2, 30):
    os.close(x)
# a close-on-exec description (private to this process until a fork) shares its offset
# with a forked child
h = os.open(root + '/p', os.O_RDWR | os.O_CREAT, 0o600)
os.write(h, b'parent')
pid = os.fork()
if pid == 0:
    os.write(h, b'+child')
    os._exit(0)
os.waitpid(pid, 0)
assert os.lseek(h, 0, os.SEEK_CUR) == 12
# made inheritable with F_SETFD, a descriptor survives an exec with no fork before it
pid = os.fork()
if pid == 0:
    k = os.open(root + '/p', os.O_WRONLY | os.O_APPEND)
    os.set_inheritable(k, True)
    os.execv('/bin/sh', ['sh', '-c', 'printf +exec >&%d' % k])
assert os.waitpid(pid, 0)[1] == 0
os.lseek(h, 0, 0)
assert os.read(h, 100) == b'parent+child+exec'
os.close(h)
# a child process writes through an inherited descriptor
with open(root + '/sub.txt', 'w') as f:
    subprocess.run(['/bin/echo', 'from child'], stdout=f, check=True)
assert open(root + '/sub.txt').read() == 'from child\n'
out = subprocess.run(['cat', root + '/sub.txt'], capture_output=True, check=True).stdout
assert out == b'from child\n'
# crossing the mount boundary
try:
    os.rename(root + '/sub.txt', src + '/x')
    raise AssertionError('rename across the boundary worked')
except OSError as e:
    assert e.errno == errno.EXDEV
try:
    os.link(src + '/a/hello.txt', root + '/x')
    raise AssertionError('link across the boundary worked')
except OSError as e:
    assert e.errno == errno.EXDEV
os.chdir(root)
assert os.getcwd() == root
assert os.path.realpath('d/../d/f.txt') == root + '/d/f.txt'
os.rename('d/f.txt', 'd/g.txt')
os.remove('d/g.txt')
os.rmdir('d/e')
shutil.rmtree(root + '/tree')
print('PY-OK')
"#;

#[test]
fn python_files_walks_copytree_and_descriptors() {
    if !require("python3", "python3") {
        return;
    }
    let p = Pool::new("python", 128);
    let src = p.scratch.join("src");
    make_tree(&src);
    python(&p, PY, src.to_str().unwrap(), "PY-OK");
}

/// Run python3 `script` with `arg` through the shim; it must print `ok`. Then fsck.
fn python(p: &Pool, script: &str, arg: &str, ok: &str) {
    let mut c = p.command("python3");
    c.args(["-c", script, arg]);
    let out = output(c, Duration::from_secs(300));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains(ok),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    p.fsck();
}

/// Node.js (libuv closes descriptors and stats with raw system calls): reads a pool file
/// and then a real one, which the kernel gives the number libuv closed, copies and removes
/// a tree in the pool.
#[test]
fn node_reads_copies_and_removes_in_the_pool() {
    if !require("node", "nodejs") {
        return;
    }
    let p = Pool::new("node", 64);
    let real = p.scratch.join("real.txt");
    std::fs::write(&real, "REAL\n").unwrap();
    let script = format!(
        r#"
const fs = require("fs");
const M = "/mnt/engram";
fs.writeFileSync(M + "/p.txt", "pool\n");
const out = [fs.readFileSync(M + "/p.txt", "utf8"), fs.readFileSync({real:?}, "utf8")];
fs.writeFileSync({real:?}, "again\n");
out.push(fs.readFileSync({real:?}, "utf8"), String(fs.statSync(M + "/p.txt").size));
fs.mkdirSync(M + "/d/e", {{ recursive: true }});
fs.writeFileSync(M + "/d/e/x", "abc");
fs.cpSync(M + "/d", M + "/g", {{ recursive: true }});
out.push(fs.readFileSync(M + "/g/e/x", "utf8"));
fs.rmSync(M + "/g", {{ recursive: true }});
out.push(String(fs.existsSync(M + "/g")));
console.log(JSON.stringify(out));
"#,
        real = real.display().to_string()
    );
    let mut c = p.command("node");
    c.args(["-e", &script]);
    let out = output(c, Duration::from_secs(120));
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        text.trim(),
        r#"["pool\n","REAL\n","again\n","5","abc","false"]"#,
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    p.fsck();
}

const MOUNT_PREFIX: &str = "/mnt/engram";

/// The size of pool file `path` (0 if it does not exist).
fn pool_size(fs: &Fs, path: &str) -> u64 {
    fs.stat(path).map_or(0, |m| m.size)
}

/// Wait until `cond` holds on the pool, while `child` (which writes it) keeps running.
/// Fails if the child exits first; a hang is caught by the generous limit.
fn wait_until(p: &Pool, child: &mut std::process::Child, what: &str, cond: impl Fn(&Fs) -> bool) {
    let fs = Fs::connect(&p.socket).unwrap();
    let t = Instant::now();
    while !cond(&fs) {
        if let Some(st) = child.try_wait().unwrap() {
            panic!("sqlite3 exited ({st}) before {what}");
        }
        if t.elapsed() > Duration::from_secs(300) {
            let _ = child.kill();
            panic!("not {what} after 300 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn sqlite(p: &Pool, db: &str, sql: &str) -> String {
    let mut c = p.command("sqlite3");
    c.arg(db).arg(sql);
    let out = output(c, Duration::from_secs(300));
    assert!(
        out.status.success(),
        "sqlite3 failed: {sql}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// SQLite reading its database through a memory mapping (`mmap_size`) and writing it with
/// pwrite, in WAL mode: each checkpoint writes pages the mapping must then show (a mapping
/// that kept the bytes of mmap time made it report "database disk image is malformed"),
/// and a second process's writes reach the first's mapping of the same file.
#[test]
fn sqlite_reads_through_its_mapping_what_it_wrote() {
    if !require("sqlite3", "sqlite3") {
        return;
    }
    let p = Pool::new("sqlite-mmap", 128);
    let db = "/mnt/engram/m.db";
    let mut sql = String::from(
        "PRAGMA journal_mode=WAL; PRAGMA mmap_size=268435456; \
         CREATE TABLE t(a INTEGER PRIMARY KEY, b TEXT); CREATE INDEX tb ON t(b);",
    );
    for i in 1..=200 {
        sql += "BEGIN; WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c WHERE x<5) \
                INSERT INTO t(b) SELECT hex(randomblob(40)) FROM c; COMMIT;";
        if i % 20 == 0 {
            sql += "PRAGMA wal_checkpoint(TRUNCATE);";
        }
    }
    sql += "SELECT count(*) FROM t; PRAGMA integrity_check;";
    assert_eq!(
        sqlite(&p, db, &sql),
        "wal\n268435456\n0|0|0\n0|0|0\n0|0|0\n0|0|0\n0|0|0\n0|0|0\n0|0|0\n0|0|0\n0|0|0\n0|0|0\n1000\nok"
    );
    let out = sqlite(
        &p,
        db,
        "PRAGMA mmap_size=268435456; INSERT INTO t(b) VALUES ('other'); \
         PRAGMA wal_checkpoint(TRUNCATE); SELECT count(*) FROM t; PRAGMA integrity_check;",
    );
    assert_eq!(out, "268435456\n0|0|0\n1001\nok");
    p.fsck();
}

/// A long-lived connection reading its database through a mapping (python's sqlite3 module,
/// `mmap_size`) and, each round, a new sqlite3 process that does not map it take turns
/// incrementing one counter (the second also rewrites a blob, so pages move): each must
/// see the other's increment. Before writes of processes that do not map a file reached
/// the others' mappings, the connection read stale pages: increments were lost from the
/// second round, and then "database disk image is malformed".
const PINGPONG: &str = r#"
import sqlite3, subprocess, sys
db = sys.argv[1]
subprocess.run(['sqlite3', db, 'PRAGMA journal_mode=DELETE',
    'CREATE TABLE c(id INTEGER PRIMARY KEY, n INT, pad BLOB)',
    'INSERT INTO c VALUES(1, 0, randomblob(3000))', 'CREATE TABLE g(x)'],
    check=True, stdout=subprocess.DEVNULL)
a = sqlite3.connect(db, isolation_level=None, timeout=30)
assert a.execute('PRAGMA mmap_size=268435456').fetchone() == (268435456,)
rounds = 30
for i in range(1, rounds + 1):
    r = subprocess.run(['sqlite3', db, 'PRAGMA busy_timeout=30000',
        f'UPDATE c SET n=n+1, pad=randomblob({3000 + i % 50}) WHERE id=1',
        f'INSERT INTO g VALUES(randomblob({500 + 37 * i}))'], capture_output=True, text=True)
    assert r.returncode == 0 and not r.stderr, r.stderr
    a.execute('BEGIN IMMEDIATE')
    a.execute('UPDATE c SET n=n+1 WHERE id=1')
    n = a.execute('SELECT n FROM c').fetchone()[0]
    a.execute('COMMIT')
    assert n == 2 * i, f'round {i}: the mapping read n={n - 1} before its increment'
a.close()
out = subprocess.run(['sqlite3', db, 'SELECT n FROM c', 'SELECT count(*) FROM g',
    'PRAGMA integrity_check'], capture_output=True, text=True).stdout.split()
assert out == [str(2 * rounds), str(rounds), 'ok'], out
print('PINGPONG-OK')
"#;

#[test]
fn sqlite_mapping_sees_the_writes_of_processes_that_do_not_map_it() {
    if !require("sqlite3", "sqlite3") || !require("python3", "python3") {
        return;
    }
    let p = Pool::new("sqlite-pingpong", 128);
    python(&p, PINGPONG, "/mnt/engram/pp.db", "PINGPONG-OK");
}

#[test]
fn sqlite_wal_and_rollback_journal_survive_reopen_and_kill() {
    if !require("sqlite3", "sqlite3") {
        return;
    }
    let p = Pool::new("sqlite", 256);
    for (mode, db) in [
        ("WAL", "/mnt/engram/wal.db"),
        ("DELETE", "/mnt/engram/rb.db"),
    ] {
        let setup = format!(
            "PRAGMA journal_mode={mode}; PRAGMA synchronous=FULL; \
             CREATE TABLE t(a INTEGER PRIMARY KEY, b TEXT); CREATE INDEX tb ON t(b); \
             WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c WHERE x<20000) \
             INSERT INTO t SELECT x, hex(randomblob(40)) FROM c; \
             SELECT count(*) FROM t; PRAGMA integrity_check;"
        );
        let out = sqlite(&p, db, &setup);
        assert_eq!(out, format!("{}\n20000\nok", mode.to_lowercase()));
        // Reopen: the data is there.
        let out = sqlite(
            &p,
            db,
            "PRAGMA synchronous=FULL; UPDATE t SET b = 'x' || b WHERE a % 2 = 0; DELETE FROM t WHERE a > 15000; SELECT count(*), sum(a) FROM t; PRAGMA integrity_check;",
        );
        assert_eq!(out, "15000|112507500\nok");
        // Killed in the middle of a big transaction: the database reopens intact without it.
        let mut c = p.command("sqlite3");
        c.arg(db)
            .arg("PRAGMA synchronous=FULL; BEGIN; WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c WHERE x<100000000) INSERT INTO t(b) SELECT hex(randomblob(100)) FROM c; COMMIT;")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        let fs = Fs::connect(&p.socket).unwrap();
        let file = db.trim_start_matches(MOUNT_PREFIX).to_string();
        let before = pool_size(&fs, &file);
        let mut child = c.spawn().unwrap();
        // Kill it only once the transaction has reached the files: pages spilled into the
        // WAL; or, with a rollback journal, the database file grown by the new pages while
        // the (hot) journal exists.
        if mode == "WAL" {
            let wal = format!("{file}-wal");
            wait_until(&p, &mut child, "the WAL holds 4 MiB", |fs| {
                pool_size(fs, &wal) >= 4 << 20
            });
        } else {
            let journal = format!("{file}-journal");
            wait_until(&p, &mut child, "the database grew by 4 MiB", |fs| {
                pool_size(fs, &journal) > 0 && pool_size(fs, &file) >= before + (4 << 20)
            });
        }
        child.kill().unwrap();
        child.wait().unwrap();
        let out = sqlite(
            &p,
            db,
            "SELECT count(*), sum(a) FROM t; PRAGMA integrity_check;",
        );
        assert_eq!(out, "15000|112507500\nok", "{mode}");
    }
    // Two processes on one WAL database (with a busy timeout, as concurrent users need):
    // a reader sees the writer's commits, and both succeed.
    let out = p.sh(
        "for i in 1 2 3 4 5; do sqlite3 -cmd '.timeout 10000' /mnt/engram/wal.db 'INSERT INTO t(b) VALUES(1);'; done & w=$!; \
         for i in 1 2 3 4 5; do sqlite3 -cmd '.timeout 10000' /mnt/engram/wal.db 'SELECT count(*) >= 15000 FROM t;'; done; wait $w",
    );
    assert_eq!(out.split_whitespace().collect::<Vec<_>>(), ["1"; 5]);
    assert_eq!(
        sqlite(
            &p,
            "/mnt/engram/wal.db",
            "SELECT count(*) FROM t; PRAGMA integrity_check;"
        ),
        "15005\nok"
    );
    p.fsck();
}

#[test]
fn fio_random_writes_and_reads_verify_with_several_jobs() {
    if !require("fio", "fio") {
        return;
    }
    let p = Pool::new("fio", 512);
    // Two jobs (separate processes) of 8 MiB each: random writes, every block checked as
    // it is read back, then a second process reads and verifies every block again.
    let out = p.sh(
        "mkdir -p /mnt/engram/fio && fio --name=rw --directory=/mnt/engram/fio \
         --ioengine=psync --rw=randwrite --bs=4k --size=8M --numjobs=2 \
         --verify=crc32c --do_verify=1 --verify_fatal=1 --group_reporting \
         --output-format=json",
    );
    let total = 2 * (8 << 20);
    assert_eq!(fio_field(&out, "error"), Some(0), "{out}");
    assert_eq!(
        fio_field(&out, "write\" : {"),
        Some(total),
        "written: {out}"
    );
    assert_eq!(
        fio_field(&out, "read\" : {"),
        Some(total),
        "verified: {out}"
    );
    let out = p.sh(
        "fio --name=rw --directory=/mnt/engram/fio --ioengine=psync --rw=randread --bs=4k \
         --size=8M --numjobs=2 --verify=crc32c --verify_only --verify_fatal=1 \
         --group_reporting --output-format=json",
    );
    assert_eq!(fio_field(&out, "error"), Some(0), "{out}");
    assert_eq!(
        fio_field(&out, "read\" : {"),
        Some(total),
        "verified: {out}"
    );
    let out = p.sh("ls /mnt/engram/fio | wc -l");
    assert_eq!(out.trim(), "2", "two job files");
    p.fsck();
}

/// A number from the first job of fio's JSON output: `"error"`, or the `io_bytes` of the
/// section whose opening is `key` (`read" : {` or `write" : {`).
fn fio_field(json: &str, key: &str) -> Option<u64> {
    let job = &json[json.find("\"jobs\"")?..];
    let (at, field) = match key {
        "error" => (job.find("\"error\" :")?, "\"error\" :"),
        _ => (job.find(&format!("\"{key}"))?, "\"io_bytes\" :"),
    };
    let rest = &job[at..];
    let v = &rest[rest.find(field)? + field.len()..];
    v.trim_start()
        .split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

#[test]
fn rocksdb_db_bench_fills_syncs_reads_and_reopens() {
    if !require("db_bench", "rocksdb-tools") {
        return;
    }
    let p = Pool::new("rocksdb", 512);
    // A fixed seed makes the keys each benchmark draws depend only on its position in the
    // list (db_bench seeds each benchmark's thread with seed + threads started before).
    let bench = |args: &str| {
        p.sh(&format!(
            "db_bench --db=/mnt/engram/rdb --num=20000 --compression_type=none --seed=42 \
             {args} 2>&1"
        ))
    };
    let out = bench("--benchmarks=fillseq,fillrandom,readrandom --sync=1");
    for b in ["fillseq", "fillrandom", "readrandom"] {
        assert!(
            out.lines()
                .any(|l| l.starts_with(b) && l.contains("ops/sec")),
            "{b}: {out}"
        );
    }
    let first = found(&out);
    assert!(first > 10000, "keys found: {out}");
    // A new process opens the existing database: the same reads (third position, so the
    // same keys) find exactly the same keys.
    let out = bench("--use_existing_db=1 --benchmarks=readseq,readseq,readrandom");
    assert_eq!(found(&out), first, "keys found after reopen: {out}");
    p.fsck();
}

/// The `found` count of db_bench's readrandom line ("(F of N found)").
fn found(out: &str) -> u64 {
    let line = out
        .lines()
        .find(|l| l.starts_with("readrandom"))
        .unwrap_or_else(|| panic!("no readrandom line: {out}"));
    line.split('(')
        .nth(1)
        .and_then(|s| s.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no found count: {line}"))
}

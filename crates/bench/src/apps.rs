//! Applications: the real programs (sqlite3, RocksDB's db_bench, fio), started by the
//! harness with their files on each target: on EngramFS through the `LD_PRELOAD` shim
//! (column `engram`: the pool opened in the program's own process; `engram-daemon`: through
//! the daemon of that target), on tmpfs and ext4 through the kernel. Each result is checked
//! (the script's final count, the keys db_bench found, fio's error field) before its rate
//! counts.

use crate::report::Unit;
use crate::targets::{ProgramDir, Target};
use crate::{Bench, Ctx, Group, Scale};
use std::fmt::Write as _;
use std::io;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How much work each program does at a scale.
#[derive(Clone, Debug)]
pub struct AppScale {
    /// Transactions of ten inserts in the sqlite3 script (and as many single-row updates).
    pub sqlite_txns: usize,
    /// Keys written by db_bench's fillseq and fillrandom (and read by readrandom).
    pub db_keys: usize,
    /// Synced writes of db_bench's fillsync.
    pub db_sync_writes: usize,
    /// Processes the shell script starts (one `cat` each).
    pub shell_processes: usize,
    /// Size of fio's file, and how long each fio job runs.
    pub fio_mib: usize,
    pub fio_runtime: Duration,
}

fn failed(what: impl Into<String>) -> io::Error {
    io::Error::other(what.into())
}

/// Run `program` (Debian package `package`) with its environment for `on`, stdin from
/// `stdin` if given; returns its standard output and how long it ran.
fn run(
    on: &ProgramDir,
    program: &str,
    package: &str,
    args: &[String],
    stdin: Option<std::fs::File>,
) -> io::Result<(String, Duration)> {
    let mut cmd = Command::new(program);
    cmd.args(args)
        .envs(on.env.iter().map(|(k, v)| (k, v)))
        .stdin(stdin.map_or_else(Stdio::null, Stdio::from))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let start = Instant::now();
    let child = cmd.spawn().map_err(|e| match e.kind() {
        io::ErrorKind::NotFound => failed(format!(
            "{program} is not installed (apt-get install {package}, or scripts/install-deps.sh)"
        )),
        _ => failed(format!("cannot start {program}: {e}")),
    })?;
    let out = child.wait_with_output()?;
    let took = start.elapsed();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = stderr.lines().rev().take(3).collect();
        return Err(failed(format!(
            "{program} failed ({}): {}",
            out.status,
            tail.into_iter().rev().collect::<Vec<_>>().join(" / ")
        )));
    }
    Ok((stdout, took))
}

/// Run `f` with a program directory of `t` in a fresh scratch directory.
fn on_target(
    ctx: &Ctx,
    t: &dyn Target,
    f: impl FnOnce(&ProgramDir) -> io::Result<f64>,
) -> io::Result<f64> {
    ctx.scratch(t, |dir| {
        let on = t.program_dir(dir)?;
        f(&on)
    })
}

/// A distinct key for each row number below `rows` (a permutation: the multiplier is a
/// prime larger than any row count).
fn key(i: usize, rows: usize) -> usize {
    (i * 1_000_003) % rows
}

/// The fixed sqlite3 script: `txns` transactions of ten inserts into an indexed table,
/// one indexed lookup per row, then `txns` single-row updates, each its own transaction;
/// `synchronous=FULL` with the default (rollback) journal. Returns the script and its
/// number of statements.
fn sqlite_script(txns: usize) -> (String, usize) {
    let rows = txns * 10;
    let mut s = String::from(
        "PRAGMA synchronous=FULL;\n\
         CREATE TABLE t(id INTEGER PRIMARY KEY, k INTEGER NOT NULL, n INTEGER NOT NULL, \
         v TEXT NOT NULL);\n\
         CREATE INDEX t_k ON t(k);\n",
    );
    let text = "x".repeat(100);
    for tx in 0..txns {
        s.push_str("BEGIN;\n");
        for i in tx * 10..tx * 10 + 10 {
            let _ = writeln!(
                s,
                "INSERT INTO t(k, n, v) VALUES({}, 0, '{text}');",
                key(i, rows)
            );
        }
        s.push_str("COMMIT;\n");
    }
    for i in 0..rows {
        let _ = writeln!(s, "SELECT n FROM t WHERE k = {};", key(i * 7 + 3, rows));
    }
    // Distinct rows: 3·i + 5 repeats modulo `rows` only after rows/3 > txns steps.
    for i in 0..txns {
        let _ = writeln!(
            s,
            "UPDATE t SET n = n + 1, v = 'y{i}' WHERE k = {};",
            key(i * 3 + 5, rows)
        );
    }
    s.push_str("SELECT count(*), sum(n) FROM t;\n");
    (s, rows + rows + txns)
}

fn sqlite(ctx: &Ctx, t: &dyn Target) -> io::Result<f64> {
    let txns = ctx.scale.apps.sqlite_txns;
    let (script, statements) = sqlite_script(txns);
    let file = std::env::temp_dir().join(format!("engram-bench-{}-sqlite.sql", std::process::id()));
    std::fs::write(&file, script)?;
    let r = on_target(ctx, t, |on| {
        let db = on.dir.join("bench.db").display().to_string();
        let (out, took) = run(
            on,
            "sqlite3",
            "sqlite3",
            &[db],
            Some(std::fs::File::open(&file)?),
        )?;
        // One "0" per lookup (all run before the updates), then the final count.
        let lines: Vec<&str> = out.lines().collect();
        let expect_last = format!("{}|{txns}", txns * 10);
        let lookups_ok =
            lines.len() == txns * 10 + 1 && lines[..txns * 10].iter().all(|l| *l == "0");
        if !lookups_ok || lines.last() != Some(&expect_last.as_str()) {
            return Err(failed(format!(
                "sqlite3 output is wrong: {} lines, last {:?} (expected {expect_last:?})",
                lines.len(),
                lines.last()
            )));
        }
        Ok(statements as f64 / took.as_secs_f64())
    });
    let _ = std::fs::remove_file(&file);
    r
}

/// A shell script of the kind `make` and build scripts run: bash starts one `cat` per
/// file, each reading a small file on the target and appending it to a file in /tmp (bash
/// itself never touches the target, so that in the `engram` column each `cat` opens the
/// pool in its own process). Processes per second; the output is checked line by line.
/// Through the shim the time includes the shim's start-up in every process and, with the
/// daemon, each process's connection.
fn shell(ctx: &Ctx, t: &dyn Target) -> io::Result<f64> {
    let n = ctx.scale.apps.shell_processes;
    on_target(ctx, t, |on| {
        let dir = on.dir.display().to_string();
        let out =
            std::env::temp_dir().join(format!("engram-bench-{}-shell.out", std::process::id()));
        let _ = std::fs::remove_file(&out);
        // The files are written by processes of their own as well (one per ten files).
        let setup = format!(
            "set -e; for i in $(seq 0 {last}); do \
               sh -c \"for j in 0 1 2 3 4 5 6 7 8 9; do k=\\$(($i * 10 + \\$j)); \
                 echo line-\\$k > '{dir}'/f\\$k; done\"; \
             done",
            last = n.div_ceil(10) - 1
        );
        run(on, "bash", "bash", &["-c".into(), setup], None)?;
        let script = format!(
            "set -e; for i in $(seq 0 {last}); do cat '{dir}'/f$i >> '{out}'; done",
            last = n - 1,
            out = out.display()
        );
        let (_, took) = run(on, "bash", "bash", &["-c".into(), script], None)?;
        let got = std::fs::read_to_string(&out).unwrap_or_default();
        let _ = std::fs::remove_file(&out);
        let want: String = (0..n).map(|i| format!("line-{i}\n")).collect();
        if got != want {
            return Err(failed(format!(
                "the shell script's output is wrong: {} lines, expected {n}",
                got.lines().count()
            )));
        }
        Ok(n as f64 / took.as_secs_f64())
    })
}

/// The rate db_bench printed for `bench` ("fillseq : 1.2 micros/op 833333 ops/sec ...").
fn db_bench_rate(out: &str, bench: &str) -> io::Result<f64> {
    let line = out
        .lines()
        .find(|l| l.split_whitespace().next() == Some(bench) && l.contains("ops/sec"))
        .ok_or_else(|| failed(format!("db_bench printed no result for {bench}")))?;
    let words: Vec<&str> = line.split_whitespace().collect();
    words
        .iter()
        .position(|w| *w == "ops/sec")
        .and_then(|i| words.get(i.checked_sub(1)?))
        .and_then(|w| w.parse().ok())
        .ok_or_else(|| failed(format!("cannot read the rate in {line:?}")))
}

/// The found count of db_bench's readrandom line ("(F of N found)").
fn db_bench_found(out: &str) -> Option<usize> {
    let line = out.lines().find(|l| l.starts_with("readrandom"))?;
    line.split('(').nth(1)?.split(' ').next()?.parse().ok()
}

/// db_bench's rate for `bench` (fillseq, fillrandom, fillsync; readrandom reads, in a
/// process of its own, what a fillseq before it wrote, and must find every key).
fn db_bench(ctx: &Ctx, t: &dyn Target, bench: &'static str) -> io::Result<f64> {
    let a = &ctx.scale.apps;
    on_target(ctx, t, |on| {
        // Every write of fillsync is synced: it writes fewer keys.
        let num = match bench {
            "fillsync" => a.db_sync_writes,
            _ => a.db_keys,
        };
        let run_one = |list: &str, existing: bool| {
            let args = [
                format!("--db={}", on.dir.join("rocksdb").display()),
                format!("--benchmarks={list}"),
                format!("--use_existing_db={}", u8::from(existing)),
                format!("--num={num}"),
                "--value_size=100".into(),
                // 4 MiB memtables (default 64 MiB): the keys land in table files, which
                // readrandom then reads with pread (past the 8 MiB block cache), instead
                // of reading the whole set from memory without touching the file system.
                "--write_buffer_size=4194304".into(),
                "--compression_type=none".into(),
                "--seed=42".into(),
                "--threads=1".into(),
            ];
            run(on, "db_bench", "rocksdb-tools", &args, None).map(|(out, _)| out)
        };
        if bench != "readrandom" {
            return db_bench_rate(&run_one(bench, false)?, bench);
        }
        run_one("fillseq", false)?;
        let out = run_one("readrandom", true)?;
        if db_bench_found(&out) != Some(num) {
            return Err(failed(format!(
                "readrandom found {:?} of {num} keys written by fillseq",
                db_bench_found(&out)
            )));
        }
        db_bench_rate(&out, bench)
    })
}

/// A number of the first job in fio's JSON output: `field` (e.g. `"iops"`) of the section
/// `section` (`read` or `write`), or the job's `error` when `section` is empty.
fn fio_number(json: &str, section: &str, field: &str) -> Option<f64> {
    let mut rest = &json[json.find("\"jobs\"")?..];
    if !section.is_empty() {
        rest = &rest[rest.find(&format!("\"{section}\" : {{"))?..];
    }
    let key = format!("\"{field}\" :");
    let v = &rest[rest.find(&key)? + key.len()..];
    v.trim_start()
        .split(|c: char| !(c.is_ascii_digit() || c == '.'))
        .next()?
        .parse()
        .ok()
}

/// fio's IOPS for 4 KiB random reads or writes with psync on one file (laid out first,
/// not timed). `--invalidate=0`: every target reads from memory (on ext4 fio would
/// otherwise drop the page cache first).
fn fio(ctx: &Ctx, t: &dyn Target, rw: &'static str) -> io::Result<f64> {
    let a = &ctx.scale.apps;
    on_target(ctx, t, |on| {
        let args = [
            "--name=bench".to_string(),
            format!("--directory={}", on.dir.display()),
            "--ioengine=psync".into(),
            format!("--rw={rw}"),
            "--bs=4k".into(),
            format!("--size={}M", a.fio_mib),
            format!("--runtime={}ms", a.fio_runtime.as_millis()),
            "--time_based".into(),
            // In a thread: a process with the pool open in-process cannot fork a user.
            "--thread".into(),
            "--numjobs=1".into(),
            "--invalidate=0".into(),
            "--output-format=json".into(),
        ];
        let (out, _) = run(on, "fio", "fio", &args, None)?;
        if fio_number(&out, "", "error") != Some(0.0) {
            return Err(failed(format!(
                "fio reported an error: {:?}",
                fio_number(&out, "", "error")
            )));
        }
        let section = if rw == "randread" { "read" } else { "write" };
        fio_number(&out, section, "iops").ok_or_else(|| failed("no iops in fio's output"))
    })
}

pub(crate) fn benches(scale: &Scale) -> Vec<Bench> {
    let g = Group::Apps;
    let ops = Unit::OpsPerSec;
    let a = &scale.apps;
    let note = format!(
        "engram = the program through the shim with the pool in its process, engram-daemon = \
         through the shim and the daemon; sqlite3: {} transactions of 10 inserts, {} indexed \
         lookups, {} updates (each its own transaction), synchronous=FULL, rollback journal, \
         op = one statement, process start included; db_bench: {} keys of 100 bytes \
         (fillsync: {} synced writes), its own ops/sec (readrandom: in a new process, on what fillseq wrote), 4 MiB memtables; fio: psync 4 KiB on a {} MiB file \
         for {} s, IOPS (writes are durable only on EngramFS)",
        a.sqlite_txns,
        a.sqlite_txns * 10,
        a.sqlite_txns,
        a.db_keys,
        a.db_sync_writes,
        a.fio_mib,
        a.fio_runtime.as_secs_f64()
    );
    let mut v = vec![
        Bench::new(g, "sqlite3 script", ops)
            .on_targets(|ctx, t, _| sqlite(ctx, t))
            .once()
            .note(note),
    ];
    v.push(
        Bench::new(g, "shell script", ops)
            .on_targets(|ctx, t, _| shell(ctx, t))
            .once()
            .note(format!(
                "shell script: bash starts {} cat processes in turn, each reading a small file \
                 on the target; op = one process",
                a.shell_processes
            )),
    );
    for b in ["fillseq", "fillrandom", "fillsync", "readrandom"] {
        v.push(
            Bench::new(g, format!("db_bench {b}"), ops)
                .on_targets(move |ctx, t, _| db_bench(ctx, t, b))
                .once(),
        );
    }
    for rw in ["randread", "randwrite"] {
        v.push(
            Bench::new(g, format!("fio 4K {rw}"), ops)
                .on_targets(move |ctx, t, _| fio(ctx, t, rw))
                .once(),
        );
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_a_permutation() {
        let rows = 2000;
        let mut seen = vec![false; rows];
        for i in 0..rows {
            assert!(!std::mem::replace(&mut seen[key(i, rows)], true));
        }
    }

    #[test]
    fn parses_db_bench_and_fio_output() {
        let out = "fillseq      :       2.345 micros/op 426417 ops/sec 0.234 seconds 100 operations;\n\
                   readrandom   :       1.000 micros/op 1000000 ops/sec; (100 of 100 found)\n";
        assert_eq!(db_bench_rate(out, "fillseq").unwrap(), 426417.0);
        assert_eq!(db_bench_found(out), Some(100));
        assert!(db_bench_rate(out, "fillsync").is_err());
        let json = r#"{"jobs" : [ { "error" : 0, "read" : { "io_bytes" : 4096, "iops" : 1234.5 },
                      "write" : { "iops" : 0.000000 } } ] }"#;
        assert_eq!(fio_number(json, "", "error"), Some(0.0));
        assert_eq!(fio_number(json, "read", "iops"), Some(1234.5));
        assert_eq!(fio_number(json, "write", "iops"), Some(0.0));
    }
}

//! Filebench-style workload personalities. An op is one flowop (create, delete, read of a
//! whole file, write, append, fsync, stat); opening and closing files are part of the ops
//! that need them and are not counted on their own.
//!
//! - fileserver: files of 128 KiB, I/O in 1 MiB requests, read:write 1:2. Per iteration:
//!   delete a random file, create it again and write it whole, append 16 KiB to a random
//!   file, read a random file whole, stat a random file. As in Filebench, the files deleted
//!   are files of the set, so the appends do not make the set grow without bound.
//! - webserver: files of 16 KiB; ten whole-file reads of random files, then a 16 KiB
//!   append to a log shared by the threads (read:write 10:1). The log is rotated
//!   (truncated) every `LOG_ROTATE` bytes, as a web server's logrotate would, so that a
//!   fast target does not fill its file system with it.
//! - webproxy: files of 16 KiB in one directory; delete a file, create it again with
//!   16 KiB, then five whole-file reads (read:write 5:1).
//! - varmail: files of 16 KiB in one directory; delete, create + append 16 KiB + fsync,
//!   open + read whole + append 16 KiB + fsync, open + read whole.
//!
//! Files that are deleted and created again are picked from the thread's own share of the
//! set, so that no thread opens a file another thread has just deleted.

use crate::measure::{Worker, timed};
use crate::micro::fill;
use crate::targets::{Open, Target, TargetFile};
use crate::{Bench, Ctx, Group, Scale, Unit};
use std::io;
use std::sync::RwLock;
use std::sync::atomic::{AtomicU64, Ordering};

const KIB: usize = 1024;
/// The webserver's log is truncated each time this many bytes have been appended to it.
const LOG_ROTATE: u64 = 64 << 20;
/// Size of the I/O requests (and of each worker's buffer).
const IO: usize = 1 << 20;

/// Create `n` files of `size` bytes, `per_dir` to a directory; returns their paths.
fn file_set(
    t: &dyn Target,
    dir: &str,
    n: usize,
    size: usize,
    per_dir: usize,
) -> io::Result<Vec<String>> {
    let mut set = Vec::with_capacity(n);
    for i in 0..n {
        let d = format!("{dir}/d{}", i / per_dir);
        if i % per_dir == 0 {
            t.mkdir(&d)?;
        }
        let p = format!("{d}/f{i}");
        fill(t, &p, size as u64)?;
        set.push(p);
    }
    Ok(set)
}

/// Read an open file from the start in `IO`-sized requests until its end.
fn read_all(f: &dyn TargetFile, buf: &mut [u8]) -> io::Result<()> {
    let mut off = 0u64;
    loop {
        let n = f.pread(buf, off)?;
        off += n as u64;
        if n < buf.len() {
            return Ok(());
        }
    }
}

fn read_whole(t: &dyn Target, path: &str, w: &mut Worker) -> io::Result<()> {
    read_all(t.open(path, Open::READ)?.as_ref(), &mut w.buf)
}

fn fileserver(ctx: &Ctx, t: &dyn Target, threads: usize) -> io::Result<f64> {
    const SIZE: usize = 128 * KIB;
    ctx.scratch(t, |dir| {
        let set = file_set(t, dir, ctx.scale.fileserver_files, SIZE, 100)?;
        let n = set.len();
        timed(threads, IO, ctx.scale.personality_budget, |w, _| {
            let k = w.rand_own(n);
            t.unlink(&set[k])?;
            t.open(&set[k], Open::CREATE)?.pwrite(&w.buf[..SIZE], 0)?;
            let k = w.rand_own(n);
            t.open(&set[k], Open::APPEND)?.append(&w.buf[..16 * KIB])?;
            let k = w.rand_own(n);
            read_whole(t, &set[k], w)?;
            t.stat(&set[w.rand_own(n)])?;
            Ok(5)
        })
    })
}

fn webserver(ctx: &Ctx, t: &dyn Target, threads: usize) -> io::Result<f64> {
    ctx.scratch(t, |dir| {
        let set = file_set(t, dir, ctx.scale.webserver_files, 16 * KIB, 100)?;
        let log_path = format!("{dir}/access.log");
        let log = RwLock::new(t.open(&log_path, Open::APPEND)?);
        let logged = AtomicU64::new(0);
        let n = set.len();
        timed(threads, IO, ctx.scale.personality_budget, |w, _| {
            for _ in 0..10 {
                let k = w.rand(n);
                read_whole(t, &set[k], w)?;
            }
            let entry = 16 * KIB as u64;
            log.read()
                .unwrap_or_else(|e| e.into_inner())
                .append(&w.buf[..entry as usize])?;
            let before = logged.fetch_add(entry, Ordering::Relaxed);
            if (before + entry) / LOG_ROTATE != before / LOG_ROTATE {
                // Truncate (O_TRUNC) while no thread appends; the O_APPEND handle then
                // writes from the new end of file.
                let _quiet = log.write().unwrap_or_else(|e| e.into_inner());
                t.open(&log_path, Open::CREATE)?;
            }
            Ok(11)
        })
    })
}

fn webproxy(ctx: &Ctx, t: &dyn Target, threads: usize) -> io::Result<f64> {
    let n = ctx.scale.webproxy_files;
    ctx.scratch(t, |dir| {
        let set = file_set(t, dir, n, 16 * KIB, n)?;
        timed(threads, IO, ctx.scale.personality_budget, |w, _| {
            let k = w.rand_own(n);
            t.unlink(&set[k])?;
            t.open(&set[k], Open::CREATE)?
                .pwrite(&w.buf[..16 * KIB], 0)?;
            for _ in 0..5 {
                let k = w.rand_own(n);
                read_whole(t, &set[k], w)?;
            }
            Ok(8)
        })
    })
}

fn varmail(ctx: &Ctx, t: &dyn Target, threads: usize) -> io::Result<f64> {
    let n = ctx.scale.varmail_files;
    ctx.scratch(t, |dir| {
        let set = file_set(t, dir, n, 16 * KIB, n)?;
        timed(threads, IO, ctx.scale.personality_budget, |w, _| {
            let k = w.rand_own(n);
            t.unlink(&set[k])?;
            let f = t.open(&set[k], Open::APPEND)?;
            f.append(&w.buf[..16 * KIB])?;
            f.fdatasync()?;
            drop(f);
            let k = w.rand_own(n);
            let f = t.open(&set[k], Open::APPEND)?;
            read_all(f.as_ref(), &mut w.buf)?;
            f.append(&w.buf[..16 * KIB])?;
            f.fdatasync()?;
            drop(f);
            let k = w.rand_own(n);
            read_whole(t, &set[k], w)?;
            Ok(8)
        })
    })
}

pub(crate) fn benches(scale: &Scale) -> Vec<Bench> {
    let g = Group::Personality;
    let ops = Unit::OpsPerSec;
    let mut note = format!(
        "files: fileserver {} × 128 KiB, webserver {} × 16 KiB, webproxy {} × 16 KiB, \
         varmail {} × 16 KiB; op = one flowop; fsync is fdatasync",
        scale.fileserver_files, scale.webserver_files, scale.webproxy_files, scale.varmail_files
    );
    if scale.name != "full" {
        note.push_str(&format!(
            "; {} scale: file counts reduced (full: 10,000 / 1,000 / 10,000 / 1,000), {} s per row",
            scale.name,
            scale.personality_budget.duration.as_secs_f64()
        ));
    }
    vec![
        Bench::new(g, "fileserver", ops)
            .on_targets(fileserver)
            .note(note),
        Bench::new(g, "webserver", ops).on_targets(webserver),
        Bench::new(g, "webproxy", ops).on_targets(webproxy),
        Bench::new(g, "varmail", ops).on_targets(varmail),
    ]
}

//! Scaling: create latency in one directory as it grows (every target), recovery time
//! against log length and number of files, and mkfs and mount time against pool size
//! (EngramFS only: those make their own pools).

use crate::measure::{Round, Worker, rounds};
use crate::targets::Target;
use crate::targets::engram::{mkfs_sparse, pool_path};
use crate::{Bench, Ctx, Group, Scale, Unit};
use engram_core::{Fs, OpenOptions, Options};
use std::io;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// µs per create of `probe` creates in a directory already holding `entries` files (the
/// median of rounds).
fn create_at(ctx: &Ctx, t: &dyn Target, entries: usize) -> io::Result<f64> {
    let probe = ctx.scale.scaling_probe;
    let run = |t: &dyn Target, dir: &str| -> io::Result<f64> {
        let d = format!("{dir}/big");
        t.mkdir(&d)?;
        for i in 0..entries {
            t.create(&format!("{d}/f{i:07}"))?;
        }
        // The probe's files are removed after each round, so that every round creates in
        // a directory of `entries`.
        let names: Vec<String> = (0..probe).map(|i| format!("{d}/p{i}")).collect();
        let round = Round {
            count: probe,
            setup: |_: &mut Worker| Ok(()),
            op: |_: &mut Worker, _: &mut (), i| t.create(&names[i as usize]).map(|()| 1),
            teardown: |_: &mut Worker, ()| names.iter().try_for_each(|n| t.unlink(n)),
        };
        let rate = rounds(1, 0, ctx.scale.budget, round)?;
        Ok(1e6 / rate)
    };
    match t.fresh((entries + probe) as u64) {
        // A fresh instance is thrown away whole: no need to remove the files one by one.
        Some(fresh) => {
            let fresh = fresh?;
            fresh.mkdir("/scale")?;
            run(fresh.as_ref(), "/scale")
        }
        None => ctx.scratch(t, |dir| run(t, dir)),
    }
}

/// Removes the files on drop.
struct Cleanup(Vec<PathBuf>);

impl Drop for Cleanup {
    fn drop(&mut self) {
        for p in &self.0 {
            let _ = std::fs::remove_file(p);
        }
    }
}

fn create_files(fs: &Fs, dir: &str, n: usize, per_dir: usize) -> io::Result<()> {
    fs.mkdir(dir, 0o755)?;
    let opts = OpenOptions::new().write(true).create_new(true);
    for i in 0..n {
        if i % per_dir == 0 {
            fs.mkdir(format!("{dir}/d{}", i / per_dir), 0o755)?;
        }
        fs.open_file(format!("{dir}/d{}/f{i}", i / per_dir), &opts)?;
    }
    Ok(())
}

/// Copy a (sparse) file, its data extents only.
fn sparse_copy(from: &Path, to: &Path) -> io::Result<()> {
    let src = std::fs::File::open(from)?;
    let dst = std::fs::File::create(to)?;
    let len = src.metadata()?.len();
    dst.set_len(len)?;
    let mut buf = vec![0u8; 1 << 20];
    let mut pos = 0i64;
    use std::os::unix::fs::FileExt;
    while (pos as u64) < len {
        // SAFETY: lseek on an open descriptor.
        let data = unsafe { libc::lseek(src.as_raw_fd(), pos, libc::SEEK_DATA) };
        if data < 0 {
            break; // ENXIO: only a hole is left
        }
        // SAFETY: as above.
        let hole = unsafe { libc::lseek(src.as_raw_fd(), data, libc::SEEK_HOLE) };
        let hole = if hole < 0 { len as i64 } else { hole };
        let mut at = data as u64;
        while at < hole as u64 {
            let n = buf.len().min((hole as u64 - at) as usize);
            src.read_exact_at(&mut buf[..n], at)?;
            dst.write_all_at(&buf[..n], at)?;
            at += n as u64;
        }
        pos = hole;
    }
    Ok(())
}

/// ms to mount the image of a crash that came after `files` files were made and
/// checkpointed, then `log_ops` creates were logged but not checkpointed.
fn recovery(ctx: &Ctx, log_ops: usize, files: usize) -> io::Result<f64> {
    let pool = pool_path("recovery");
    let image = pool_path("crash-image");
    let _cleanup = Cleanup(vec![pool.clone(), image.clone()]);
    mkfs_sparse(&pool, ctx.scale.recovery_pool)?;
    let fs = Fs::open(&pool, &Options::default())?;
    create_files(&fs, "/files", files, 1000)?;
    fs.unmount()?;
    let fs = Fs::open(&pool, &Options::default())?;
    fs.mkdir("/log", 0o755)?;
    let opts = OpenOptions::new().write(true).create_new(true);
    for i in 0..log_ops {
        fs.open_file(format!("/log/x{i}"), &opts)?;
    }
    // Every operation has returned, so it is persisted: a copy of the pool now is what a
    // crash at this instant would leave.
    sparse_copy(&pool, &image)?;
    drop(fs);
    let t0 = Instant::now();
    let crashed = Fs::open(&image, &Options::default())?;
    let ms = t0.elapsed().as_secs_f64() * 1e3;
    let info = crashed.mount_info();
    if info.was_clean {
        return Err(io::Error::other("the crash image was marked clean"));
    }
    if (info.replayed as usize) < log_ops {
        return Err(io::Error::other(format!(
            "only {} of {log_ops} logged operations were replayed: a checkpoint came \
             between (the log of a {} MiB pool is too short)",
            info.replayed,
            ctx.scale.recovery_pool >> 20
        )));
    }
    Ok(ms)
}

/// ms of `engram mkfs` (which reserves the whole pool file).
fn mkfs(size: u64) -> io::Result<f64> {
    let pool = pool_path("mkfs");
    let _cleanup = Cleanup(vec![pool.clone()]);
    let t0 = Instant::now();
    Fs::mkfs(&pool, size)?;
    Ok(t0.elapsed().as_secs_f64() * 1e3)
}

/// ms to mount a clean pool (best of three).
fn mount(size: u64) -> io::Result<f64> {
    let pool = pool_path("mount");
    let _cleanup = Cleanup(vec![pool.clone()]);
    Fs::mkfs(&pool, size)?;
    let mut best = f64::MAX;
    for _ in 0..3 {
        let t0 = Instant::now();
        let fs = Fs::open(&pool, &Options::default())?;
        best = best.min(t0.elapsed().as_secs_f64() * 1e3);
        drop(fs);
    }
    Ok(best)
}

fn count(n: usize) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn size(bytes: u64) -> String {
    if bytes >= 1 << 30 {
        format!("{} GiB", bytes >> 30)
    } else {
        format!("{} MiB", bytes >> 20)
    }
}

pub(crate) fn benches(scale: &Scale) -> Vec<Bench> {
    let mut v = Vec::new();
    let quick = scale.name != "full";
    for &n in &scale.scaling_entries {
        let mut b = Bench::new(
            Group::Scaling,
            format!("create @ {} entries", count(n)),
            Unit::Micros,
        )
        .once()
        .on_targets(move |c, t, _| create_at(c, t, n));
        if v.is_empty() {
            b = b.note(format!(
                "rounds of {} creates (open O_CREAT|O_EXCL + close, removed after each \
                 round) in one directory that already holds that many files, the median \
                 round's mean; EngramFS targets get a fresh pool sized \
                 for it{}",
                count(scale.scaling_probe),
                if quick {
                    format!(
                        "; {} scale: largest directory {} entries (full: 1,000,000)",
                        scale.name,
                        count(*scale.scaling_entries.last().unwrap_or(&0))
                    )
                } else {
                    String::new()
                }
            ));
        }
        v.push(b);
    }
    let g = Group::Recovery;
    let base_files = scale.recovery_files[0];
    let base_log = scale.recovery_log_ops[0];
    let mut rec = Vec::new();
    for &l in &scale.recovery_log_ops {
        rec.push((l, base_files));
    }
    for &f in &scale.recovery_files[1..] {
        rec.push((base_log, f));
    }
    for (i, (l, f)) in rec.into_iter().enumerate() {
        let name = format!("recovery: {} logged ops, {} files", count(l), count(f));
        let mut b = Bench::new(g, name, Unit::Millis)
            .once()
            .with("engram", move |c, _| recovery(c, l, f));
        if i == 0 {
            b = b.note(format!(
                "recovery: mount of a crash image ({} MiB pool) whose log holds that many \
                 creates since the last checkpoint; mkfs reserves the whole pool file \
                 (fallocate); mount: clean pool, best of 3{}",
                scale.recovery_pool >> 20,
                if quick {
                    format!("; {} scale: fewer ops, files and smaller pools", scale.name)
                } else {
                    String::new()
                }
            ));
        }
        v.push(b);
    }
    for &s in &scale.mkfs_sizes {
        v.push(
            Bench::new(g, format!("mkfs {}", size(s)), Unit::Millis)
                .once()
                .with("engram", move |_, _| mkfs(s)),
        );
        v.push(
            Bench::new(g, format!("mount {}", size(s)), Unit::Millis)
                .once()
                .with("engram", move |_, _| mount(s)),
        );
    }
    v
}

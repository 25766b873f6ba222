//! FxMark-style microbenchmarks, each at every thread count: 4 KiB reads and overwrites of
//! a private and a shared file, appends, write + fdatasync, create/unlink/rename in private
//! directories and in one shared directory, stat of a deep path, readdir of a big directory.

use crate::measure::{self, Round, Worker, block, rounds, timed};
use crate::targets::{HeldPath, Open, Target, TargetFile};
use crate::{Bench, Ctx, Group, Scale, Unit};
use std::io;

const BLOCK: usize = 4096;
/// Blocks per file of the read and overwrite benchmarks (1 MiB).
const BLOCKS: u64 = 256;

/// Create `path` holding `len` bytes (written in 64 KiB pieces).
pub(crate) fn fill(t: &dyn Target, path: &str, len: u64) -> io::Result<Box<dyn TargetFile>> {
    let f = t.open(path, Open::CREATE)?;
    let chunk = vec![0xabu8; 64 << 10];
    let mut off = 0;
    while off < len {
        let n = chunk.len().min((len - off) as usize);
        f.pwrite(&chunk[..n], off)?;
        off += n as u64;
    }
    Ok(f)
}

fn check(n: usize, want: usize) -> io::Result<u64> {
    if n == want {
        Ok(1)
    } else {
        Err(io::Error::other(format!(
            "short transfer: {n} of {want} bytes"
        )))
    }
}

/// Private files (one per thread) or one shared file of `BLOCKS` blocks per thread.
fn files(
    t: &dyn Target,
    dir: &str,
    threads: usize,
    shared: bool,
) -> io::Result<Vec<Box<dyn TargetFile>>> {
    if shared {
        Ok(vec![fill(
            t,
            &format!("{dir}/shared"),
            BLOCKS * BLOCK as u64 * threads as u64,
        )?])
    } else {
        (0..threads)
            .map(|i| fill(t, &format!("{dir}/private{i}"), BLOCKS * BLOCK as u64))
            .collect()
    }
}

/// Where thread `tid` does its `i`-th 4 KiB access: private files are its own; in the shared
/// file each thread has its own blocks, interleaved with the others'.
fn place(shared: bool, tid: usize, threads: usize, i: u64) -> (usize, u64) {
    let b = block(i, BLOCKS);
    if shared {
        (0, (b * threads as u64 + tid as u64) * BLOCK as u64)
    } else {
        (tid, b * BLOCK as u64)
    }
}

fn read(ctx: &Ctx, t: &dyn Target, threads: usize, shared: bool) -> io::Result<f64> {
    ctx.scratch(t, |dir| {
        let fs = files(t, dir, threads, shared)?;
        timed(threads, BLOCK, ctx.scale.budget, |w, i| {
            // Readers of the shared file all read the same blocks.
            let (f, off) = if shared {
                (0, block(i, BLOCKS) * BLOCK as u64)
            } else {
                place(false, w.tid, threads, i)
            };
            check(fs[f].pread(&mut w.buf, off)?, BLOCK)
        })
    })
}

fn overwrite(ctx: &Ctx, t: &dyn Target, threads: usize, shared: bool) -> io::Result<f64> {
    ctx.scratch(t, |dir| {
        let fs = files(t, dir, threads, shared)?;
        timed(threads, BLOCK, ctx.scale.budget, |w, i| {
            let (f, off) = place(shared, w.tid, threads, i);
            check(fs[f].pwrite(&w.buf, off)?, BLOCK)
        })
    })
}

fn write_fdatasync(ctx: &Ctx, t: &dyn Target, threads: usize) -> io::Result<f64> {
    ctx.scratch(t, |dir| {
        let fs = files(t, dir, threads, false)?;
        timed(threads, BLOCK, ctx.scale.budget, |w, i| {
            let (f, off) = place(false, w.tid, threads, i);
            check(fs[f].pwrite(&w.buf, off)?, BLOCK)?;
            fs[f].fdatasync()?;
            Ok(1)
        })
    })
}

fn append(ctx: &Ctx, t: &dyn Target, threads: usize) -> io::Result<f64> {
    ctx.scratch(t, |dir| {
        appends(ctx, t, dir, threads, BLOCK, ctx.scale.append_ops)
    })
}

/// Appends per second: `count` appends of `len` bytes per thread, each thread into a new file of its own in
/// `dir`, in rounds (`measure::rounds`): the file is removed after each.
pub(crate) fn appends(
    ctx: &Ctx,
    t: &dyn Target,
    dir: &str,
    threads: usize,
    len: usize,
    count: usize,
) -> io::Result<f64> {
    let path = |w: &Worker| format!("{dir}/log{}", w.tid);
    let round = Round {
        count,
        setup: |w: &mut Worker| t.open(&path(w), Open::APPEND),
        op: |w: &mut Worker, f: &mut Box<dyn TargetFile>, _| check(f.append(&w.buf)?, len),
        teardown: |w: &mut Worker, f: Box<dyn TargetFile>| {
            drop(f);
            t.unlink(&path(w))
        },
    };
    rounds(threads, len, ctx.scale.budget, round)
}

/// Names for the metadata benchmarks: per thread, in its own directory or the shared one.
fn names(dir: &str, threads: usize, count: usize, shared: bool, tag: &str) -> Vec<Vec<String>> {
    (0..threads)
        .map(|t| {
            (0..count)
                .map(|i| {
                    if shared {
                        format!("{dir}/s/{tag}{t}-{i}")
                    } else {
                        format!("{dir}/p{t}/{tag}{i}")
                    }
                })
                .collect()
        })
        .collect()
}

fn meta_dirs(t: &dyn Target, dir: &str, threads: usize, shared: bool) -> io::Result<()> {
    if shared {
        t.mkdir(&format!("{dir}/s"))
    } else {
        (0..threads).try_for_each(|i| t.mkdir(&format!("{dir}/p{i}")))
    }
}

#[derive(Clone, Copy)]
enum MetaOp {
    Create,
    Unlink,
    Rename,
}

/// `meta_ops` creates, unlinks or renames per thread, in rounds (`measure::rounds`): a
/// round's files are made before it (unlink, rename) and removed after it, outside the
/// clock, so that every round runs in directories of the same size.
fn meta(ctx: &Ctx, t: &dyn Target, threads: usize, shared: bool, op: MetaOp) -> io::Result<f64> {
    let n = ctx.scale.meta_ops;
    ctx.scratch(t, |dir| {
        meta_dirs(t, dir, threads, shared)?;
        let from = names(dir, threads, n, shared, "f");
        let to = names(dir, threads, n, shared, "r");
        let round = Round {
            count: n,
            setup: |w: &mut Worker| match op {
                MetaOp::Create => Ok(()),
                MetaOp::Unlink | MetaOp::Rename => from[w.tid].iter().try_for_each(|p| t.create(p)),
            },
            op: |w: &mut Worker, _: &mut (), i| {
                let p = &from[w.tid][i as usize];
                match op {
                    MetaOp::Create => t.create(p)?,
                    MetaOp::Unlink => t.unlink(p)?,
                    MetaOp::Rename => t.rename(p, &to[w.tid][i as usize])?,
                }
                Ok(1)
            },
            teardown: |w: &mut Worker, ()| match op {
                MetaOp::Create => from[w.tid].iter().try_for_each(|p| t.unlink(p)),
                MetaOp::Unlink => Ok(()),
                MetaOp::Rename => to[w.tid].iter().try_for_each(|p| t.unlink(p)),
            },
        };
        rounds(threads, 0, ctx.scale.budget, round)
    })
}

fn stat_deep(ctx: &Ctx, t: &dyn Target, threads: usize) -> io::Result<f64> {
    ctx.scratch(t, |dir| {
        // dir/l2/l3/l4/file: five components from the root.
        let mut p = dir.to_string();
        for l in 2..=4 {
            p = format!("{p}/l{l}");
            t.mkdir(&p)?;
        }
        let file = format!("{p}/file");
        fill(t, &file, 100)?;
        let held = HeldPath::new(&file)?;
        timed(threads, 0, ctx.scale.budget, |_, _| {
            if t.stat_held(&held)? != 100 {
                return Err(io::Error::other("stat returned a wrong size"));
            }
            Ok(1)
        })
    })
}

fn readdir(ctx: &Ctx, t: &dyn Target, threads: usize) -> io::Result<f64> {
    let n = ctx.scale.readdir_entries;
    ctx.scratch(t, |dir| {
        let d = format!("{dir}/big");
        t.mkdir(&d)?;
        for i in 0..n {
            t.create(&format!("{d}/entry-{i:06}"))?;
        }
        timed(threads, 0, ctx.scale.budget, |_, _| {
            let got = t.count_dir(&d)?;
            if got != n {
                return Err(io::Error::other(format!(
                    "readdir saw {got} of {n} entries"
                )));
            }
            Ok(1)
        })
    })
}

pub(crate) fn benches(scale: &Scale) -> Vec<Bench> {
    let g = Group::Micro;
    let ops = Unit::OpsPerSec;
    let memcpy = |ctx: &Ctx, n: usize| measure::memcpy_4k(n, ctx.scale.budget);
    let mut v = vec![
        Bench::new(g, "read 4K private", ops)
            .with("memcpy", memcpy)
            .on_targets(|c, t, n| read(c, t, n, false))
            .note(format!(
                "each value is the median rate of 5 slices of the run, summed over the \
                 threads (append, create, unlink, rename: the median of rounds of {} appends \
                 into a new file or {} files, for the same time); memcpy: 4 KiB copies out of a 1 MiB DRAM buffer in the same \
                 block order",
                scale.append_ops, scale.meta_ops
            )),
        Bench::new(g, "read 4K shared", ops)
            .with("memcpy", memcpy)
            .on_targets(|c, t, n| read(c, t, n, true)),
        Bench::new(g, "overwrite 4K private", ops).on_targets(|c, t, n| overwrite(c, t, n, false)),
        Bench::new(g, "overwrite 4K shared", ops).on_targets(|c, t, n| overwrite(c, t, n, true)),
        Bench::new(g, "append 4K", ops).on_targets(append),
        Bench::new(g, "write 4K + fdatasync", ops).on_targets(write_fdatasync),
    ];
    let metas = [
        ("create", MetaOp::Create),
        ("unlink", MetaOp::Unlink),
        ("rename", MetaOp::Rename),
    ];
    for (name, op) in metas {
        for shared in [false, true] {
            let label = format!("{name} {} dir", if shared { "shared" } else { "private" });
            v.push(Bench::new(g, label, ops).on_targets(move |c, t, n| meta(c, t, n, shared, op)));
        }
    }
    v.push(Bench::new(g, "stat 5-deep path", ops).on_targets(stat_deep));
    v.push(
        Bench::new(g, format!("readdir {} entries", scale.readdir_entries), ops)
            .on_targets(readdir)
            .note("readdir: one op lists the whole directory"),
    );
    if scale.name != "full" {
        let last = v.len() - 1;
        v[last].note = Some(format!(
            "readdir: one op lists the whole directory; {} scale: {} s per time-bounded row, \
             {} ops per thread for create/unlink/rename, {} appends per thread",
            scale.name,
            scale.budget.duration.as_secs_f64(),
            scale.meta_ops,
            scale.append_ops
        ));
    }
    v
}

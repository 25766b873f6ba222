//! Persist bandwidth of large writes (1 MiB: appends to a new file, overwrites of an
//! existing one) against a plain memcpy of the same size into DRAM, the physical limit,
//! measured in the same run.

use crate::measure::{self, timed};
use crate::micro::{appends, fill};
use crate::targets::Target;
use crate::{Bench, Ctx, Group, Scale, Unit};
use std::io;

const CHUNK: usize = 1 << 20;

fn mb(bytes_per_sec: f64) -> f64 {
    bytes_per_sec / 1e6
}

fn append(ctx: &Ctx, t: &dyn Target, threads: usize) -> io::Result<f64> {
    ctx.scratch(t, |dir| {
        appends(ctx, t, dir, threads, CHUNK, ctx.scale.bw_mib).map(|ops| mb(ops * CHUNK as f64))
    })
}

fn overwrite(ctx: &Ctx, t: &dyn Target, threads: usize) -> io::Result<f64> {
    let chunks = ctx.scale.bw_mib as u64;
    ctx.scratch(t, |dir| {
        let fs: Vec<_> = (0..threads)
            .map(|i| fill(t, &format!("{dir}/big{i}"), chunks * CHUNK as u64))
            .collect::<io::Result<_>>()?;
        let rate = timed(threads, CHUNK, ctx.scale.budget, |w, i| {
            let n = fs[w.tid].pwrite(&w.buf, (i % chunks) * CHUNK as u64)?;
            Ok(n as u64)
        })?;
        Ok(mb(rate))
    })
}

pub(crate) fn benches(scale: &Scale) -> Vec<Bench> {
    let g = Group::Bandwidth;
    let memcpy =
        |ctx: &Ctx, n: usize| measure::memcpy_bandwidth(n, CHUNK, ctx.scale.budget).map(mb);
    vec![
        Bench::new(g, "append 1 MiB", Unit::MBPerSec)
            .with("memcpy", memcpy)
            .on_targets(append)
            .note(format!(
                "append: {} MiB per thread into a new file, in rounds; overwrite: 1 MiB writes over a \
                 {} MiB file; memcpy: 1 MiB copies into a 64 MiB DRAM buffer",
                scale.bw_mib, scale.bw_mib
            )),
        Bench::new(g, "overwrite 1 MiB", Unit::MBPerSec)
            .with("memcpy", memcpy)
            .on_targets(overwrite),
    ]
}

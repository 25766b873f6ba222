//! Running one workload under the recording mode and checking every crash state it can
//! leave behind.

use crate::tree::{self, Tree};
use crate::workload::{Op, Rng};
use crate::{Config, Failure, Outcome};
use engram_core::layout::Geometry;
use engram_core::{Creds, Fs, Options};
use engram_pmem::{Event, Pool};
use std::collections::HashSet;

pub const POOL_SIZE: u64 = 1 << 20;
/// A 16 KiB log: checkpoints and wrap-around happen every few dozen operations.
pub const LOG_LEN: u64 = 16 << 10;

fn options() -> Options {
    Options {
        creds: Some(Creds::root()),
        ..Options::default()
    }
}

/// A formatted pool holding the workload's starting tree, cleanly unmounted, as bytes.
pub fn base_image(setup: &dyn Fn(&Fs) -> engram_core::Result<()>) -> Result<Vec<u8>, String> {
    let geo = Geometry::with_log(POOL_SIZE, LOG_LEN).map_err(|e| e.to_string())?;
    let pool = Pool::anonymous(POOL_SIZE).map_err(|e| e.to_string())?;
    engram_core::mkfs::format(&pool, &geo);
    let fs = Fs::open_pool(pool, &options()).map_err(|e| e.to_string())?;
    setup(&fs).map_err(|e| format!("starting tree: {e}"))?;
    let pool = fs.pool().clone();
    fs.unmount().map_err(|e| e.to_string())?;
    Ok(pool.slice(0, pool.len()).to_vec())
}

/// One recorded run: the base image, the persistence events with operation marks, and the
/// oracle state after each completed operation.
struct Run {
    base: Vec<u8>,
    events: Vec<Event>,
    states: Vec<Tree>,
}

fn region(geo: &Geometry, off: u64) -> String {
    if off < 2 * 4096 {
        "superblock".into()
    } else if off < geo.bitmap_off {
        "log".into()
    } else if off < geo.inode_off {
        "bitmaps".into()
    } else if off < geo.meta_off {
        format!(
            "inode {} byte {}",
            (off - geo.inode_off) / 128,
            (off - geo.inode_off) % 128
        )
    } else if off < geo.data_off {
        format!("metadata page {:#x}", off & !4095)
    } else {
        format!("data page {:#x}", off & !4095)
    }
}

/// Byte ranges where `live` and `durable` differ, described, but for the `deferred` ones
/// (records' in-place stores the server has not written back yet: covered by the log until
/// then).
fn unflushed(geo: &Geometry, live: &[u8], durable: &[u8], deferred: &[(u64, u64)]) -> Vec<String> {
    let is_deferred = |i: usize| deferred.iter().any(|&(s, e)| (s..e).contains(&(i as u64)));
    let mut out = Vec::new();
    let mut i = 0;
    while i < live.len() {
        if live[i] != durable[i] && !is_deferred(i) {
            let start = i;
            while i < live.len() && live[i] != durable[i] && !is_deferred(i) {
                i += 1;
            }
            out.push(format!(
                "{} bytes at {start:#x} ({})",
                i - start,
                region(geo, start as u64)
            ));
            if out.len() >= 8 {
                break;
            }
        }
        i += 1;
    }
    out
}

fn apply_line(img: &mut [u8], line: u64, data: &[u8; 64]) {
    let at = line as usize;
    let n = 64.min(img.len().saturating_sub(at));
    img[at..at + n].copy_from_slice(&data[..n]);
}

fn record(name: &str, image: &[u8], ops: &[Op], out: &mut Outcome) -> Result<Run, String> {
    let geo = Geometry::with_log(POOL_SIZE, LOG_LEN).map_err(|e| e.to_string())?;
    let pool = Pool::from_image(image).map_err(|e| e.to_string())?;
    let fs = Fs::open_pool(pool, &options()).map_err(|e| e.to_string())?;
    let pool = fs.pool().clone();
    let mut states = vec![tree::snapshot(&fs).map_err(|e| e.to_string())?];
    let mut events = Vec::new();
    let mut base: Option<Vec<u8>> = None;
    let mut all = Vec::new();
    let mut fs = Some(fs);
    // The last step is a clean unmount, whose crash states must show the final tree.
    for i in 0..=ops.len() {
        let mut deferred = Vec::new();
        pool.start_recording();
        pool.mark(2 * i as u64);
        if let Some(op) = ops.get(i) {
            let f = fs.as_ref().unwrap();
            let _ = op.apply(f);
            deferred = f.write_back_pending();
        } else if let Some(f) = fs.take() {
            let st = f.stats();
            out.checkpoints += st.checkpoints;
            out.log_wraps += st.log_wraps;
            f.unmount().map_err(|e| e.to_string())?;
        }
        pool.mark(2 * i as u64 + 1);
        let seg = pool.stop_recording().ok_or("recording lost")?;
        if base.is_none() {
            all = seg.base.clone();
            base = Some(seg.base);
        }
        for e in &seg.events {
            if let Event::Flush { line, data } = e {
                apply_line(&mut all, *line, data);
            }
        }
        events.extend(seg.events);
        let live = pool.slice(0, pool.len());
        for u in unflushed(&geo, live, &all, &deferred) {
            let what = ops
                .get(i)
                .map_or("unmount".to_string(), |o| format!("{o:?}"));
            out.unflushed.push(format!(
                "{name}: operation {i} ({what}) left a store never flushed: {u}"
            ));
        }
        match &fs {
            Some(f) => states.push(tree::snapshot(f).map_err(|e| e.to_string())?),
            None => states.push(states.last().cloned().unwrap_or_default()),
        }
    }
    Ok(Run {
        base: base.unwrap_or_default(),
        events,
        states,
    })
}

/// Which subsets of the `n` flushes pending before a fence to try (as bit masks over the
/// flush list; the empty and the full set are the fence images either side).
fn subsets(n: usize, cfg: &Config, rng: &mut Rng) -> Vec<Vec<bool>> {
    let (exhaustive, samples) = if cfg.quick { (6, 24) } else { (10, 1024) };
    if n == 0 {
        return Vec::new();
    }
    if n <= exhaustive {
        return (1..(1u64 << n) - 1)
            .map(|m| (0..n).map(|j| m >> j & 1 == 1).collect())
            .collect();
    }
    (0..samples)
        .map(|_| (0..n).map(|_| rng.next_u64() & 1 == 1).collect())
        .collect()
}

struct Checker<'a> {
    name: &'a str,
    cfg: &'a Config,
    seen: HashSet<(u64, usize)>,
    recovery_checks: u64,
}

fn image_key(img: &[u8]) -> u64 {
    let a = crc32c::crc32c(img) as u64;
    let b = crc32c::crc32c_append(0x5bd1_e995, img) as u64;
    a << 32 | b
}

impl Checker<'_> {
    /// Open a crash image, fsck it, and compare its tree with the allowed oracle states.
    /// `oracle` identifies the allowed states (for skipping images already checked).
    fn check(&mut self, img: &[u8], allowed: &[&Tree], oracle: usize, at: &str, out: &mut Outcome) {
        let key = (image_key(img), oracle);
        if !self.seen.insert(key) {
            return;
        }
        out.states += 1;
        match open_and_read(img) {
            Err(e) => self.fail(out, at, e),
            Ok((tree, replayed)) => {
                if !allowed.iter().any(|t| **t == tree) {
                    let d = allowed
                        .iter()
                        .map(|t| tree::diff(&tree, t))
                        .collect::<Vec<_>>()
                        .join(" | or | ");
                    self.fail(out, at, format!("state matches no oracle: {d}"));
                    return;
                }
                // Crash during recovery: every state recovery itself can leave must recover
                // to the same tree.
                self.recovery_checks += 1;
                let every = if self.cfg.quick { 8 } else { 1 };
                if replayed && self.recovery_checks.is_multiple_of(every) {
                    self.check_recovery(img, &tree, at, out);
                }
            }
        }
    }

    fn check_recovery(&mut self, img: &[u8], want: &Tree, at: &str, out: &mut Outcome) {
        let Ok(pool) = Pool::from_image(img) else {
            return;
        };
        pool.start_recording();
        let fs = match Fs::open_pool(pool, &options()) {
            Ok(f) => f,
            Err(e) => return self.fail(out, at, format!("recovery failed on second try: {e}")),
        };
        let Some(rec) = fs.pool().stop_recording() else {
            return;
        };
        drop(fs);
        let mut durable = rec.base.clone();
        let mut fences = 0;
        for e in &rec.events {
            match e {
                Event::Flush { line, data } => apply_line(&mut durable, *line, data),
                Event::Fence => {
                    fences += 1;
                    out.states += 1;
                    match open_and_read(&durable) {
                        Err(e) => self.fail(
                            out,
                            &format!("{at}, then crash in recovery after fence {fences}"),
                            e,
                        ),
                        Ok((t, _)) if t != *want => self.fail(
                            out,
                            &format!("{at}, then crash in recovery after fence {fences}"),
                            format!("second recovery differs: {}", tree::diff(&t, want)),
                        ),
                        Ok(_) => {}
                    }
                }
                Event::Mark(_) => {}
            }
        }
    }

    fn fail(&self, out: &mut Outcome, at: &str, detail: String) {
        out.failures.push(Failure {
            workload: self.name.to_string(),
            crash_point: at.to_string(),
            detail,
        });
    }
}

/// Recover an image, check it with fsck and read the whole tree. Returns the tree and
/// whether recovery had anything to do.
fn open_and_read(img: &[u8]) -> Result<(Tree, bool), String> {
    let pool = Pool::from_image(img).map_err(|e| format!("cannot map image: {e}"))?;
    let fs = Fs::open_pool(pool, &options()).map_err(|e| format!("recovery failed: {e}"))?;
    let info = fs.mount_info().clone();
    if !info.problems.is_empty() {
        return Err(format!("recovery walk found: {}", info.problems.join("; ")));
    }
    let report = fs.fsck(false).map_err(|e| format!("fsck failed: {e}"))?;
    if !report.is_clean() {
        return Err(format!("fsck: {}", report.problems.join("; ")));
    }
    let tree = tree::snapshot(&fs).map_err(|e| format!("reading the tree failed: {e}"))?;
    let touched = !info.was_clean && (info.replayed > 0 || info.orphans_freed > 0);
    drop(fs);
    Ok((tree, touched))
}

/// Record `ops` from `image` and check every crash state.
pub fn explore(name: &str, image: &[u8], ops: &[Op], cfg: &Config, out: &mut Outcome) {
    let run = match record(name, image, ops, out) {
        Ok(r) => r,
        Err(e) => {
            out.failures.push(Failure {
                workload: name.into(),
                crash_point: "recording".into(),
                detail: e,
            });
            return;
        }
    };
    let mut rng = Rng(cfg.seed ^ crc32c::crc32c(name.as_bytes()) as u64);
    let mut ck = Checker {
        name,
        cfg,
        seen: HashSet::new(),
        recovery_checks: 0,
    };
    let mut durable = run.base.clone();
    let mut pending: Vec<(u64, [u8; 64])> = Vec::new();
    let mut completed = 0usize;
    let mut in_flight: Option<usize> = None;
    let mut fence_no = 0;
    for e in &run.events {
        match e {
            Event::Mark(l) if l % 2 == 0 => in_flight = Some((l / 2) as usize),
            Event::Mark(l) => {
                completed = (l / 2) as usize + 1;
                in_flight = None;
            }
            Event::Flush { line, data } => pending.push((*line, *data)),
            Event::Fence => {
                fence_no += 1;
                let oracle = in_flight.map_or(2 * completed, |i| 2 * i + 1);
                let allowed: Vec<&Tree> = match in_flight {
                    Some(i) => vec![&run.states[i], &run.states[i + 1]],
                    None => vec![&run.states[completed]],
                };
                let op = in_flight.map_or(format!("after operation {completed}"), |i| {
                    format!("during operation {i}")
                });
                for mask in subsets(pending.len(), cfg, &mut rng) {
                    let mut img = durable.clone();
                    for (j, (line, data)) in pending.iter().enumerate() {
                        if mask[j] {
                            apply_line(&mut img, *line, data);
                        }
                    }
                    let bits: String = mask.iter().map(|&b| if b { '1' } else { '0' }).collect();
                    ck.check(
                        &img,
                        &allowed,
                        oracle,
                        &format!("{op}, before fence {fence_no} with flushes {bits}"),
                        out,
                    );
                }
                for (line, data) in pending.drain(..) {
                    apply_line(&mut durable, line, &data);
                }
                ck.check(
                    &durable,
                    &allowed,
                    oracle,
                    &format!("{op}, at fence {fence_no}"),
                    out,
                );
            }
        }
    }
    let last = run.states.last().unwrap();
    ck.check(&durable, &[last], usize::MAX, "at the end", out);
}

//! The EngramFS benchmark harness (`engram bench`): FxMark-style microbenchmarks,
//! Filebench-style workload personalities and scaling rows, run against EngramFS and its
//! baselines (tmpfs, ext4 on a loop device) in the same run, with a table per group that
//! gives EngramFS's ratio to each baseline, JSON for machines and PNG charts.
//!
//! Targets are pluggable (`targets::Target`): a FUSE mount or a directory under the
//! `LD_PRELOAD` shim is a `targets::posix::mounted_dir`, passed to `run_with`.

mod apps;
mod bandwidth;
mod chart;
mod clients;
mod goals;
pub mod measure;
mod micro;
mod personalities;
mod pools;
mod progress;
pub mod report;
mod scaling;
mod signals;
pub mod targets;

pub use apps::AppScale;
pub use clients::client_worker;
pub use pools::PoolDir;
pub use report::{Report, Row, Unit};
pub use targets::{HeldPath, Kind, Open, Target, TargetFile};

use measure::Budget;
use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// What to run and where to put the results.
#[derive(Clone, Debug, Default)]
pub struct BenchOptions {
    /// The reduced set (about two minutes).
    pub quick: bool,
    /// Run only benchmarks whose "group/name" contains this (case-insensitive).
    pub filter: Option<String>,
    /// Write the results as JSON here.
    pub json: Option<PathBuf>,
    /// Write one PNG bar chart per group into this directory.
    pub charts: Option<PathBuf>,
    /// Thread counts of the microbenchmarks and personalities (default 1 and 2).
    pub threads: Vec<usize>,
}

/// How much work each benchmark does. `full` is the real run, `quick` the reduced one,
/// `tiny` only keeps the harness working (the test suite).
#[derive(Clone, Debug)]
pub struct Scale {
    pub name: &'static str,
    pub budget: Budget,
    /// Operations per thread of the count-based metadata benchmarks.
    pub meta_ops: usize,
    /// 4 KiB appends per thread.
    pub append_ops: usize,
    pub readdir_entries: usize,
    /// MiB appended per thread in 1 MiB writes, and the size of the overwritten file.
    pub bw_mib: usize,
    pub personality_budget: Budget,
    pub fileserver_files: usize,
    pub webserver_files: usize,
    pub webproxy_files: usize,
    pub varmail_files: usize,
    /// Directory sizes at which create latency is measured, and creates measured there.
    pub scaling_entries: Vec<usize>,
    pub scaling_probe: usize,
    pub recovery_log_ops: Vec<usize>,
    pub recovery_files: Vec<usize>,
    pub recovery_pool: u64,
    pub mkfs_sizes: Vec<u64>,
    /// Size of the EngramFS pools of the shared targets (reserved whole, as `engram mkfs`
    /// does: the native and the daemon target each hold one, see `pools`).
    pub pool_size: u64,
    pub ext4_image: u64,
    pub ext4_inodes: u64,
    pub apps: AppScale,
}

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

impl Scale {
    pub fn full() -> Scale {
        Scale {
            name: "full",
            budget: Budget {
                duration: Duration::from_millis(1000),
                warmup: Duration::from_millis(100),
            },
            meta_ops: 20_000,
            append_ops: 16_384,
            readdir_entries: 10_000,
            bw_mib: 256,
            personality_budget: Budget {
                duration: Duration::from_secs(3),
                warmup: Duration::from_millis(300),
            },
            fileserver_files: 10_000,
            webserver_files: 1_000,
            webproxy_files: 10_000,
            varmail_files: 1_000,
            scaling_entries: vec![10_000, 1_000_000],
            scaling_probe: 5_000,
            recovery_log_ops: vec![1_000, 10_000, 100_000],
            recovery_files: vec![1_000, 10_000, 100_000],
            recovery_pool: 4 * GIB,
            mkfs_sizes: vec![64 * MIB, GIB, 4 * GIB],
            pool_size: 3 * GIB,
            ext4_image: 8 * GIB,
            ext4_inodes: 1_300_000,
            apps: AppScale {
                sqlite_txns: 2_000,
                db_keys: 1_000_000,
                db_sync_writes: 20_000,
                shell_processes: 2_000,
                fio_mib: 256,
                fio_runtime: Duration::from_secs(3),
            },
        }
    }

    pub fn quick() -> Scale {
        Scale {
            name: "quick",
            budget: Budget {
                duration: Duration::from_millis(150),
                warmup: Duration::from_millis(30),
            },
            meta_ops: 3_000,
            append_ops: 2_048,
            readdir_entries: 10_000,
            bw_mib: 64,
            personality_budget: Budget {
                duration: Duration::from_millis(400),
                warmup: Duration::from_millis(50),
            },
            fileserver_files: 1_000,
            webserver_files: 1_000,
            webproxy_files: 2_000,
            varmail_files: 1_000,
            scaling_entries: vec![10_000, 100_000],
            scaling_probe: 2_000,
            recovery_log_ops: vec![1_000, 10_000],
            recovery_files: vec![1_000, 10_000],
            recovery_pool: GIB,
            mkfs_sizes: vec![64 * MIB, 256 * MIB, GIB],
            pool_size: GIB,
            ext4_image: 3 * GIB,
            ext4_inodes: 300_000,
            apps: AppScale {
                sqlite_txns: 300,
                db_keys: 200_000,
                db_sync_writes: 2_000,
                shell_processes: 300,
                fio_mib: 64,
                fio_runtime: Duration::from_millis(500),
            },
        }
    }

    pub fn tiny() -> Scale {
        let b = Budget {
            duration: Duration::from_millis(4),
            warmup: Duration::from_millis(1),
        };
        Scale {
            name: "tiny",
            budget: b,
            meta_ops: 40,
            append_ops: 16,
            readdir_entries: 100,
            bw_mib: 4,
            personality_budget: b,
            fileserver_files: 20,
            webserver_files: 20,
            webproxy_files: 20,
            varmail_files: 20,
            scaling_entries: vec![100, 400],
            scaling_probe: 20,
            recovery_log_ops: vec![10, 100],
            recovery_files: vec![10, 100],
            recovery_pool: 64 * MIB,
            mkfs_sizes: vec![8 * MIB, 16 * MIB],
            pool_size: 128 * MIB,
            ext4_image: 256 * MIB,
            ext4_inodes: 20_000,
            apps: AppScale {
                sqlite_txns: 5,
                db_keys: 500,
                db_sync_writes: 5,
                shell_processes: 20,
                fio_mib: 2,
                fio_runtime: Duration::from_millis(50),
            },
        }
    }
}

/// The groups of the report, in the order they run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Group {
    Micro,
    Bandwidth,
    Personality,
    Apps,
    Scaling,
    Recovery,
}

impl Group {
    pub fn id(self) -> &'static str {
        match self {
            Group::Micro => "micro",
            Group::Bandwidth => "bandwidth",
            Group::Personality => "personality",
            Group::Apps => "apps",
            Group::Scaling => "scaling",
            Group::Recovery => "recovery",
        }
    }

    pub fn title(self) -> &'static str {
        match self {
            Group::Micro => "Microbenchmarks (FxMark style)",
            Group::Bandwidth => "Persist bandwidth of large writes, against DRAM memcpy",
            Group::Personality => "Workload personalities (Filebench style)",
            Group::Apps => "Applications (real programs; EngramFS through the shim)",
            Group::Scaling => "Create latency against directory size",
            Group::Recovery => "Recovery, mkfs and mount time (EngramFS native only)",
        }
    }
}

type RunFn = Box<dyn Fn(&Ctx, &dyn Target, usize) -> io::Result<f64>>;
type StandaloneFn = Box<dyn Fn(&Ctx, usize) -> io::Result<f64>>;

/// One row of the report (per thread count): measured on every target, and/or by
/// standalone measurements that fill named columns (the memcpy reference; EngramFS-only
/// rows that make their own pools).
pub(crate) struct Bench {
    pub group: Group,
    pub name: String,
    pub unit: Unit,
    /// Run at each thread count; otherwise once, with one thread.
    pub per_thread: bool,
    pub run: Option<RunFn>,
    pub standalone: Vec<(&'static str, StandaloneFn)>,
    pub note: Option<String>,
}

impl Bench {
    fn new(group: Group, name: impl Into<String>, unit: Unit) -> Bench {
        Bench {
            group,
            name: name.into(),
            unit,
            per_thread: true,
            run: None,
            standalone: Vec::new(),
            note: None,
        }
    }

    fn on_targets(
        mut self,
        f: impl Fn(&Ctx, &dyn Target, usize) -> io::Result<f64> + 'static,
    ) -> Bench {
        self.run = Some(Box::new(f));
        self
    }

    fn with(
        mut self,
        column: &'static str,
        f: impl Fn(&Ctx, usize) -> io::Result<f64> + 'static,
    ) -> Bench {
        self.standalone.push((column, Box::new(f)));
        self
    }

    fn once(mut self) -> Bench {
        self.per_thread = false;
        self
    }

    fn note(mut self, n: impl Into<String>) -> Bench {
        self.note = Some(n.into());
        self
    }

    fn id(&self) -> String {
        format!("{}/{}", self.group.id(), self.name)
    }
}

/// What every benchmark may use.
pub(crate) struct Ctx {
    pub scale: Scale,
    seq: AtomicUsize,
}

impl Ctx {
    /// Run `f` in a fresh top-level directory of `t`, removed afterwards.
    pub fn scratch(
        &self,
        t: &dyn Target,
        f: impl FnOnce(&str) -> io::Result<f64>,
    ) -> io::Result<f64> {
        let dir = format!("/b{}", self.seq.fetch_add(1, Ordering::Relaxed));
        t.mkdir(&dir)?;
        let r = f(&dir);
        let cleaned = t.remove_tree(&dir);
        let v = r?;
        cleaned?;
        Ok(v)
    }
}

fn all_benches(scale: &Scale) -> Vec<Bench> {
    let mut v = micro::benches(scale);
    v.extend(bandwidth::benches(scale));
    v.extend(personalities::benches(scale));
    v.extend(apps::benches(scale));
    v.extend(scaling::benches(scale));
    v
}

/// Run the benchmarks at `--quick` or full scale on the standard targets.
/// Returns None when only the daemon-clients table was asked for (it is printed, not part
/// of the report).
pub fn run(opts: &BenchOptions) -> Result<Option<Report>, String> {
    let scale = if opts.quick {
        Scale::quick()
    } else {
        Scale::full()
    };
    // Held across both parts of the run: their pools share one directory (one mount).
    let _pools = pools::PoolDir::acquire();
    let clients = opts
        .filter
        .as_ref()
        .is_none_or(|f| "daemon clients".contains(f.to_lowercase().as_str()));
    let report = match run_with(opts, scale, Vec::new()) {
        Err(e) if clients && e.starts_with("no benchmark matches") => None,
        other => Some(other?),
    };
    if clients {
        clients::run(opts.quick)?;
    }
    Ok(report)
}

/// Run at `scale`, with `extra` targets beside the standard ones (a FUSE mount:
/// `targets::posix::mounted_dir("engram-fuse", dir, Kind::Engram)`).
pub fn run_with(
    opts: &BenchOptions,
    scale: Scale,
    extra: Vec<Box<dyn Target>>,
) -> Result<Report, String> {
    let threads: Vec<usize> = if opts.threads.is_empty() {
        vec![1, 2]
    } else {
        opts.threads.clone()
    };
    if threads.contains(&0) {
        return Err("thread counts must be at least 1".into());
    }
    let _pools = pools::PoolDir::acquire();
    let filter = opts.filter.as_ref().map(|f| f.to_lowercase());
    let benches: Vec<Bench> = all_benches(&scale)
        .into_iter()
        .filter(|b| {
            filter
                .as_ref()
                .is_none_or(|f| b.id().to_lowercase().contains(f.as_str()))
        })
        .collect();
    if benches.is_empty() {
        return Err(format!(
            "no benchmark matches the filter {:?}",
            opts.filter.as_deref().unwrap_or("")
        ));
    }
    println!(
        "EngramFS benchmarks ({} scale{}), {} CPUs, threads {:?}",
        scale.name,
        if scale.name == "full" {
            String::new()
        } else {
            ": counts and durations reduced, see each group's notes".into()
        },
        std::thread::available_parallelism().map_or(1, |n| n.get()),
        threads
    );
    let set = targets::standard(&scale, extra);
    let mut report = Report::new(scale.name, &threads, &set);
    report.print_targets();
    let ctx = Ctx {
        scale,
        seq: AtomicUsize::new(0),
    };
    let handoff_start = measure::handoff_ns(HANDOFF_TRIPS);
    let mut progress = progress::Progress::new(count_jobs(&benches, &threads, &set));
    let mut group = None;
    for b in &benches {
        if group.is_some_and(|g| g != b.group) {
            progress.clear();
            report.print_group(group.expect("set"));
        }
        group = Some(b.group);
        let thread_counts: &[usize] = if b.per_thread { &threads } else { &[1] };
        for &n in thread_counts {
            let row = report.row(b.group, &b.name, n, b.unit, b.note.clone());
            for (column, f) in &b.standalone {
                progress.step(&b.id(), column, n);
                let v = f(&ctx, n);
                report.rows[row].set(column, v);
            }
            if let Some(f) = &b.run {
                for t in &set.live {
                    progress.step(&b.id(), t.name(), n);
                    let v = f(&ctx, t.as_ref(), n);
                    report.rows[row].set(t.name(), v);
                }
            }
        }
    }
    progress.clear();
    if let Some(g) = group {
        report.print_group(g);
    }
    report.goals = goals::evaluate(&report);
    report.print_goals();
    let handoff_end = measure::handoff_ns(HANDOFF_TRIPS);
    report.handoff_ns = handoff_start.zip(handoff_end);
    match report.handoff_ns {
        Some((start, end)) => println!(
            "\nCross-core hand-off of one cache line (the host's placement of the CPUs): \
             {start:.0} ns at the start of the run, {end:.0} ns at the end; rows through the \
             daemon slow down with it (docs/performance.md)"
        ),
        None => println!("\nCross-core hand-off: not measured (fewer than two CPUs)"),
    }
    drop(set);
    if let Some(path) = &opts.json {
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            let _ = std::fs::create_dir_all(parent);
        }
        std::fs::write(path, report.to_json())
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        println!("\nJSON written to {}", path.display());
    }
    if let Some(dir) = &opts.charts {
        match chart::write_all(&report, dir) {
            Ok(files) => println!("charts written to {} ({} PNG files)", dir.display(), files),
            Err(e) => println!("charts skipped: {e}"),
        }
    }
    Ok(report)
}

/// Round trips of each cross-core hand-off measurement (about 15-70 ms).
const HANDOFF_TRIPS: u64 = 200_000;

fn count_jobs(benches: &[Bench], threads: &[usize], set: &targets::TargetSet) -> usize {
    benches
        .iter()
        .map(|b| {
            let per = b.standalone.len() + if b.run.is_some() { set.live.len() } else { 0 };
            per * if b.per_thread { threads.len() } else { 1 }
        })
        .sum()
}

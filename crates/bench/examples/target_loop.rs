//! A tight loop of one operation through the benchmark harness's `Target` trait, the very
//! calls `engram bench` times, for profilers (`valgrind --tool=callgrind`, `perf record`):
//! the native API (`EngramTarget`) or, with a directory argument, system calls on that
//! directory (`mounted_dir`: under the LD_PRELOAD shim, the shim's path). Running both
//! with the same operation shows what a front end adds per call.
//!
//! `cargo run --release -p engram-bench --example target_loop -- OP COUNT [DIR|daemon]`, OP
//! one of create, unlink, rename, stat, read, overwrite, append, mixed (an overwrite and a
//! read of another page); `daemon`: the native API
//! through a daemon this process starts; `ENGRAM_LOOP_PREFILL=N`: the creates go into a
//! directory that already holds N files (a pool sized for them); `ENGRAM_LOOP_BYTES=N`: reads
//! and writes of N bytes. The pools go where the
//! bench puts its own (`ENGRAM_BENCH_POOL_DIR` to choose). Under the shim:
//! `engram run --pool P -- target/release/examples/target_loop stat 10000 /mnt/engram`.

use engram_bench::targets::engram::EngramTarget;
use engram_bench::targets::posix::mounted_dir;
use engram_bench::{HeldPath, Kind, Open, Target, TargetFile};
use std::path::Path;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let op = args.next().unwrap_or_else(|| "stat".into());
    let count: u64 = args.next().map_or(Ok(10_000), |c| c.parse())?;
    // The pools where `engram bench` puts them (a huge-page tmpfs mounted for the run, when
    // this runs as root): the same pages, TLB reach and first-touch costs as the bench.
    let _pools = engram_bench::PoolDir::acquire();
    let target: Box<dyn Target> = match args.next() {
        Some(d) if d == "daemon" => Box::new(EngramTarget::daemon("loop", 2 << 30)?),
        Some(dir) => Box::new(mounted_dir("mounted", Path::new(&dir), Kind::Engram)?),
        None => Box::new(EngramTarget::native("loop", 2 << 30)?),
    };
    let prefill: u64 = std::env::var("ENGRAM_LOOP_PREFILL").map_or(Ok(0), |v| v.parse())?;
    // A directory of many files gets a pool sized for it, as the scaling rows do.
    let target = match target.fresh(prefill + count) {
        Some(fresh) if prefill > 0 => fresh?,
        _ => target,
    };
    let t = &*target;
    let started = std::time::Instant::now();
    t.mkdir("/d")?;
    let name = |i: u64| format!("/d/f{i}");
    let renamed = |i: u64| format!("/d/r{i}");
    // ENGRAM_LOOP_BYTES=N: reads and writes of N bytes (4 KiB unless set).
    let bytes: usize = std::env::var("ENGRAM_LOOP_BYTES").map_or(Ok(4096), |v| v.parse())?;
    let page = vec![7u8; bytes];
    // Setup (not in `timed`, which `--toggle-collect=*timed*` limits callgrind to).
    // ENGRAM_LOOP_PREFILL=N: the directory holds N other files before a create loop (the
    // scaling rows' create at 10,000 and at 1,000,000 entries).
    let file = match op.as_str() {
        "create" => {
            for i in 0..prefill {
                t.create(&format!("/d/p{i}"))?;
            }
            None
        }
        "unlink" | "rename" => {
            for i in 0..count {
                t.create(&name(i))?;
            }
            None
        }
        "stat" => {
            for p in ["/d/a", "/d/a/b", "/d/a/b/c"] {
                t.mkdir(p)?;
            }
            t.open("/d/a/b/c/e", Open::CREATE)?.pwrite(b"x", 0)?;
            None
        }
        "read" | "overwrite" | "mixed" => {
            let f = t.open("/d/big", Open::CREATE)?;
            for p in 0..256u64 {
                f.pwrite(&page, p * 4096)?;
            }
            Some(f)
        }
        "append" => Some(t.open("/d/log", Open::APPEND)?),
        other => return Err(format!("unknown operation {other}").into()),
    };
    // Names only for the calls that take one per operation: the others loop without
    // streaming through a vector of them (which would take cache from the call measured).
    let names: Vec<(String, String)> = match op.as_str() {
        "create" | "unlink" | "rename" => (0..count).map(|i| (name(i), renamed(i))).collect(),
        _ => Vec::new(),
    };
    let deep = HeldPath::new("/d/a/b/c/e")?;
    let faults_before = minor_faults();
    let loop_start = std::time::Instant::now();
    timed(t, file.as_deref(), &op, count, &names, &page, &deep)?;
    let per_op = loop_start.elapsed().as_secs_f64() * 1e9 / count.max(1) as f64;
    let faults = minor_faults() - faults_before;
    eprintln!(
        "{op} on {}: {per_op:.0} ns per operation ({count} in {:.3} s with setup; \
         {faults} page faults in the loop)",
        t.name(),
        started.elapsed().as_secs_f64(),
    );
    Ok(())
}

/// Page faults (minor: first touches of pool pages) of this process so far.
fn minor_faults() -> i64 {
    let mut u = std::mem::MaybeUninit::<libc::rusage>::uninit();
    // SAFETY: getrusage fills `u` on success.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, u.as_mut_ptr()) } != 0 {
        return 0;
    }
    // SAFETY: initialised by the successful call above.
    unsafe { u.assume_init() }.ru_minflt
}

/// The loop that is measured: one operation per name.
#[inline(never)]
fn timed(
    t: &dyn Target,
    file: Option<&dyn TargetFile>,
    op: &str,
    count: u64,
    names: &[(String, String)],
    page: &[u8],
    deep: &HeldPath,
) -> std::io::Result<()> {
    let mut buf = vec![0u8; page.len()];
    // ENGRAM_LOOP_LATENCY=1: each operation timed alone, percentiles printed at the end
    // (a clock read per operation, about 20 ns, is added to each).
    let mut latencies =
        std::env::var_os("ENGRAM_LOOP_LATENCY").map(|_| Vec::with_capacity(count as usize));
    for i in 0..count as usize {
        let op_start = latencies.as_ref().map(|_| std::time::Instant::now());
        let off = (i as u64 * 97 % 256) * 4096;
        let (from, to) = names
            .get(i)
            .map_or(("", ""), |(f, t)| (f.as_str(), t.as_str()));
        match (op, file) {
            ("create", _) => t.create(from)?,
            ("unlink", _) => t.unlink(from)?,
            ("rename", _) => t.rename(from, to)?,
            ("stat", _) => drop(t.stat_held(deep)?),
            ("read", Some(f)) => drop(f.pread(&mut buf, off)?),
            ("overwrite", Some(f)) => drop(f.pwrite(page, off)?),
            ("mixed", Some(f)) => {
                f.pwrite(page, off)?;
                f.pread(&mut buf, (off + 4096 * 128) % (256 * 4096))?;
            }
            ("append", Some(f)) => drop(f.append(page)?),
            _ => unreachable!("set up above"),
        }
        if let (Some(l), Some(t0)) = (latencies.as_mut(), op_start) {
            l.push(t0.elapsed().as_nanos() as u64);
        }
    }
    if let Some(mut l) = latencies.filter(|l| !l.is_empty()) {
        l.sort_unstable();
        let at = |q: f64| l[((l.len() - 1) as f64 * q) as usize];
        eprintln!(
            "latency ns: p10 {} p50 {} p90 {} p99 {} p99.9 {} max {}",
            at(0.1),
            at(0.5),
            at(0.9),
            at(0.99),
            at(0.999),
            at(1.0)
        );
    }
    Ok(())
}

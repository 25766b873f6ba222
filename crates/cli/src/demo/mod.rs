//! `engram demo [--pool PATH]`: a self-checking tour on the embedded (in-process) server.
//! Builds a tree, changes it in every way a file system can be changed, checks every byte,
//! remounts, checks again, runs fsck, and prints what each phase cost.

mod model;
mod verify;
mod workload;

use crate::error::{CliError, Context, Result};
use crate::pool::{self, OpenError, show};
use crate::size::{self, duration, human};
use engram_core::Fs;
use std::fmt::Display;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use workload::{Workload, remove_tree};

const DEFAULT_POOL: &str = "/dev/shm/engram-demo.pool";

#[derive(clap::Args)]
pub struct Args {
    /// Pool file: created if missing, reused if it is a valid pool, re-created if not
    #[arg(long, default_value = DEFAULT_POOL)]
    pub pool: PathBuf,
    /// Size of a pool the demo creates
    #[arg(long, default_value = "256M", value_parser = size::parse_size)]
    pub size: u64,
    /// How many files to create
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u64).range(20..=100_000))]
    pub files: u64,
}

/// Numbered, timed lines.
struct Report {
    step: usize,
    total: Duration,
}

impl Report {
    fn step(&mut self, what: impl Display, took: Duration) {
        self.step += 1;
        self.total += took;
        out!(
            "  {:>2}  {:<66} {:>10}",
            self.step,
            what.to_string(),
            duration(took)
        );
    }
}

fn timed<T>(f: impl FnOnce() -> T) -> (T, Duration) {
    let t = Instant::now();
    let r = f();
    (r, t.elapsed())
}

fn create(path: &Path, size: u64, rep: &mut Report) -> Result<Fs> {
    let (r, took) = timed(|| Fs::mkfs(path, size));
    r.context(format_args!("cannot create pool {}", path.display()))?;
    rep.step(format_args!("create a {} pool (mkfs)", human(size)), took);
    open(path, rep)
}

fn open(path: &Path, rep: &mut Report) -> Result<Fs> {
    let (fs, took) = timed(|| pool::open(path));
    let fs = fs?;
    let m = fs.mount_info();
    let state = if m.was_clean {
        "clean"
    } else {
        "recovered after a crash"
    };
    rep.step(
        format_args!(
            "open the pool ({state}, {} log records replayed)",
            m.replayed
        ),
        took,
    );
    Ok(fs)
}

/// Open the pool, creating or re-creating it when needed.
fn open_or_create(a: &Args, rep: &mut Report) -> Result<Fs> {
    if !a.pool.exists() {
        return create(&a.pool, a.size, rep);
    }
    let (fs, took) = timed(|| pool::try_open(&a.pool));
    match fs {
        Ok(fs) => {
            let m = fs.mount_info();
            let state = if m.was_clean {
                "clean"
            } else {
                "recovered after a crash"
            };
            rep.step(
                format_args!(
                    "open the existing pool ({state}, {} log records replayed)",
                    m.replayed
                ),
                took,
            );
            Ok(fs)
        }
        Err(OpenError::Invalid(why)) => {
            out!("  not a valid pool: {why}; re-creating it");
            create(&a.pool, a.size, rep)
        }
        Err(e) => Err(e.into()),
    }
}

/// Remove earlier runs' trees and name this run's: `/demo-<n>`.
fn next_run(fs: &Fs, rep: &mut Report) -> Result<Vec<u8>> {
    let mut last = 0;
    let mut old = Vec::new();
    for e in fs.read_dir("/").context("cannot list the pool's root")? {
        let e = e.context("cannot list the pool's root")?;
        if let Some(n) = e
            .name
            .strip_prefix(b"demo-")
            .and_then(|n| std::str::from_utf8(n).ok()?.parse::<u64>().ok())
        {
            last = last.max(n);
            old.push(e.name);
        }
    }
    for name in old {
        let p = [b"/".as_slice(), &name].concat();
        let (n, took) = timed(|| remove_tree(fs, &p));
        let n = n.context(format_args!(
            "cannot remove the previous demo tree {}",
            show(&p)
        ))?;
        rep.step(
            format_args!("remove the previous run's tree {} ({n} entries)", show(&p)),
            took,
        );
    }
    Ok(format!("/demo-{}", last + 1).into_bytes())
}

fn print_media(fs: &Fs, path: &Path) {
    let media = fs.mount_info().media;
    out!("  media: {media}");
    if path.starts_with("/dev/shm") || media == engram_pmem::Media::Tmpfs {
        out!("  note:  /dev/shm is tmpfs, i.e. DRAM standing in for persistent memory: the same");
        out!(
            "         loads, stores, cache-line flushes and fences run, but nothing survives a reboot."
        );
    }
}

pub fn run(a: &Args) -> Result<()> {
    let shown = a.pool.display();
    out!("EngramFS demo (embedded server, in-process)");
    out!("  pool:  {shown}");
    let mut rep = Report {
        step: 0,
        total: Duration::ZERO,
    };
    let fs = open_or_create(a, &mut rep)?;
    print_media(&fs, &a.pool);
    let root = next_run(&fs, &mut rep)?;

    let mut w = Workload::new(&fs, root.clone());
    let (dirs, took) = timed(|| w.make_dirs());
    rep.step(
        format_args!("make {} directories under {}", dirs?, show(&root)),
        took,
    );
    let (bytes, took) = timed(|| w.write_files(a.files as usize));
    let bytes = bytes?;
    rep.step(
        format_args!(
            "write {} files, 0 B to 300 KiB, {} ({})",
            a.files,
            human(bytes),
            size::rate(bytes, took)
        ),
        took,
    );
    for (what, took) in w.mutate()? {
        rep.step(what, took);
    }
    let model = w.model;
    let (c, took) = timed(|| verify::verify(&fs, &model, &root));
    let c = c?;
    let what = format!(
        "verify {} + {} ({}), {}, {}",
        size::count(c.files, "file"),
        size::count(c.names - c.files, "hard link"),
        human(c.bytes),
        size::count(c.dirs, "dir"),
        size::count(c.symlinks, "symlink")
    );
    rep.step(&what, took);

    let (r, took) = timed(|| fs.unmount());
    r.context(format_args!("cannot unmount {shown}"))?;
    rep.step("unmount", took);
    let (fs, took) = timed(|| pool::open(&a.pool));
    let fs = fs?;
    let m = fs.mount_info();
    if !m.was_clean || m.replayed != 0 {
        return Err(CliError::new(format!(
            "{shown} did not reopen clean after unmount (clean: {}, {} log records replayed)",
            m.was_clean, m.replayed
        )));
    }
    rep.step("reopen: clean, no recovery needed", took);
    let (c2, took) = timed(|| verify::verify(&fs, &model, &root));
    c2?;
    rep.step("verify everything again after reopening", took);

    let (r, took) = timed(|| fs.fsck(false));
    let r = r.context(format_args!("fsck of {shown} failed"))?;
    if !r.is_clean() {
        for p in &r.problems {
            eprintln!("engram: fsck: {p}");
        }
        return Err(CliError::new(format!(
            "fsck found {} problems in {shown}",
            r.problems.len()
        )));
    }
    rep.step(
        format_args!(
            "fsck: clean ({}, {}, {}, {})",
            size::count(r.files, "file"),
            size::count(r.dirs, "dir"),
            size::count(r.symlinks, "symlink"),
            size::count(r.data_pages, "data page")
        ),
        took,
    );
    let (u, took) = timed(|| fs.unmount());
    u.context(format_args!("cannot unmount {shown}"))?;
    rep.step("unmount", took);

    out!(
        "demo OK: {} in {}; see `engram ls -l {shown}:{}` and `engram info {shown}`",
        show(&root),
        duration(rep.total),
        show(&root)
    );
    Ok(())
}

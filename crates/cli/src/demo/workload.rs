//! Building and changing the demo tree, through the public `Fs` API, while keeping the model
//! of what it should contain in step.

use super::model::{Model, Rng};
use crate::error::{CliError, Context, Result};
use crate::pool::{join, show};
use crate::size::human;
use engram_core::{Fs, OpenOptions};
use std::time::{Duration, Instant};

const SEED: u64 = 0x454e_4752_414d_4653; // "ENGRAMFS"

/// Directories created below the run's root, parents first, with their modes.
const DIRS: [(&str, u32); 9] = [
    ("docs", 0o755),
    ("src", 0o755),
    ("src/core", 0o755),
    ("src/cli", 0o750),
    ("data", 0o755),
    ("data/small", 0o755),
    ("data/large", 0o700),
    ("data/large/archive", 0o755),
    ("empty", 0o755),
];

/// Where files go, round robin.
const FILE_DIRS: [&str; 6] = [
    "docs",
    "src/core",
    "src/cli",
    "data/small",
    "data/large",
    "data/large/archive",
];

/// Sizes every run includes: empty, one byte, around a page, a page plus a bit, the maximum.
const EDGE_SIZES: [usize; 8] = [0, 1, 4095, 4096, 4097, 8192, 65536 + 17, 300 << 10];

pub struct Workload<'a> {
    fs: &'a Fs,
    root: Vec<u8>,
    rng: Rng,
    pub model: Model,
}

fn timed<T>(f: impl FnOnce() -> T) -> (T, Duration) {
    let t = Instant::now();
    let r = f();
    (r, t.elapsed())
}

/// A size in 0..=300 KiB: mostly small files, some medium, a few large.
fn pick_size(rng: &mut Rng) -> usize {
    let max = match rng.below(10) {
        0..=4 => 4 << 10,
        5..=7 => 64 << 10,
        _ => 300 << 10,
    };
    rng.below(max + 1) as usize
}

impl<'a> Workload<'a> {
    pub fn new(fs: &'a Fs, root: Vec<u8>) -> Workload<'a> {
        Workload {
            fs,
            root,
            rng: Rng::new(SEED),
            model: Model::default(),
        }
    }

    fn path(&self, rel: &str) -> Vec<u8> {
        join(&self.root, rel.as_bytes())
    }

    /// The run's root and its subdirectories; returns how many were made.
    pub fn make_dirs(&mut self) -> Result<usize> {
        let mut all = vec![(self.root.clone(), 0o755)];
        all.extend(DIRS.iter().map(|&(d, m)| (self.path(d), m)));
        for (p, mode) in &all {
            self.fs
                .mkdir(p, *mode)
                .context(format_args!("mkdir {}", show(p)))?;
            self.model.add_dir(p.clone(), *mode);
        }
        Ok(all.len())
    }

    /// `n` files of varied sizes and modes; returns the bytes written.
    pub fn write_files(&mut self, n: usize) -> Result<u64> {
        let mut total = 0;
        for i in 0..n {
            let size = EDGE_SIZES
                .get(i)
                .copied()
                .unwrap_or_else(|| pick_size(&mut self.rng));
            let content =
                Rng::new(SEED ^ (i as u64 + 1).wrapping_mul(0x2545_f491_4f6c_dd1d)).bytes(size);
            let mode = [0o644, 0o600, 0o755, 0o640][i % 4];
            let p = self.path(&format!("{}/f{i:03}", FILE_DIRS[i % FILE_DIRS.len()]));
            let opts = OpenOptions::new().write(true).create_new(true).mode(mode);
            let f = self
                .fs
                .open_file(&p, &opts)
                .context(format_args!("create {}", show(&p)))?;
            // Larger files go in two writes so that the second extends the first.
            let (a, b) = content.split_at(size / 3);
            f.write_at(a, 0)
                .context(format_args!("write {}", show(&p)))?;
            f.write_at(b, a.len() as u64)
                .context(format_args!("write {}", show(&p)))?;
            self.model.add_file(p, mode, content);
            total += size as u64;
        }
        Ok(total)
    }

    /// The first file (in path order) not yet used by another change whose size is in range.
    fn pick(&self, used: &mut Vec<Vec<u8>>, min: usize, prefix: &str) -> Result<Vec<u8>> {
        let prefix = self.path(prefix);
        let found = self
            .model
            .files()
            .find(|(p, id, size)| {
                *size >= min
                    && p.starts_with(&prefix)
                    && !used.contains(p)
                    && self.model.links(*id) == 1
            })
            .map(|(p, _, _)| p.clone())
            .ok_or_else(|| CliError::new("demo: too few files to pick from (use more --files)"))?;
        used.push(found.clone());
        Ok(found)
    }

    /// Rename, link, unlink, append, overwrite and truncate; returns what was done and how
    /// long each took.
    pub fn mutate(&mut self) -> Result<Vec<(String, Duration)>> {
        let fs = self.fs;
        let mut steps = Vec::new();
        let mut used = Vec::new();

        // A directory rename moves everything below it.
        let (from, to) = (self.path("data/small"), self.path("data/tiny"));
        let (r, d) = timed(|| fs.rename(&from, &to));
        r.context(format_args!("rename {}", show(&from)))?;
        self.model.rename(&from, &to);
        steps.push((
            format!("rename directory {} -> {}", show(&from), show(&to)),
            d,
        ));

        let from = self.pick(&mut used, 1, "src/cli/")?;
        let to = self.path("docs/renamed.txt");
        let (r, d) = timed(|| fs.rename(&from, &to));
        r.context(format_args!("rename {}", show(&from)))?;
        self.model.rename(&from, &to);
        used.push(to.clone());
        steps.push((format!("rename file {} -> {}", show(&from), show(&to)), d));

        let target = self.pick(&mut used, 16 << 10, "data/large/")?;
        let rel = target[self.root.len() + 1..].to_vec();
        let link = self.path("latest");
        let (r, d) = timed(|| fs.symlink(&rel, &link));
        r.context(format_args!("symlink {}", show(&link)))?;
        self.model.add_symlink(link.clone(), rel.clone());
        steps.push((format!("symlink {} -> {}", show(&link), show(&rel)), d));

        let linked = self.pick(&mut used, 64 << 10, "docs/")?;
        let hard = self.path("hardlink");
        let (r, d) = timed(|| fs.link(&linked, &hard));
        r.context(format_args!("link {}", show(&linked)))?;
        self.model.add_hard_link(&linked, hard.clone());
        steps.push((format!("hard link {} -> {}", show(&hard), show(&linked)), d));

        for _ in 0..2 {
            let gone = self.pick(&mut used, 0, "src/core/")?;
            let (r, d) = timed(|| fs.unlink(&gone));
            r.context(format_args!("unlink {}", show(&gone)))?;
            self.model.remove(&gone);
            steps.push((format!("unlink {}", show(&gone)), d));
        }

        let appended = self.pick(&mut used, 1, "data/tiny/")?;
        let extra_len = 10_000 + self.rng.below(5000) as usize;
        let extra = self.rng.bytes(extra_len);
        let (r, d) = timed(|| {
            let f = fs.open_file(&appended, &OpenOptions::new().write(true).append(true))?;
            f.write_next(&extra)
        });
        r.context(format_args!("append to {}", show(&appended)))?;
        self.model.file_mut(&appended).extend_from_slice(&extra);
        steps.push((
            format!(
                "append {} to {}",
                human(extra.len() as u64),
                show(&appended)
            ),
            d,
        ));

        // Through the hard link: the other name must see it.
        let len = self.model.file(&hard).map_or(0, Vec::len);
        let off = len / 2 - 3000;
        let patch = self.rng.bytes(6000);
        let (r, d) = timed(|| {
            fs.open_file(&hard, &OpenOptions::new().write(true))?
                .write_at(&patch, off as u64)
        });
        r.context(format_args!("overwrite {}", show(&hard)))?;
        self.model.file_mut(&hard)[off..off + patch.len()].copy_from_slice(&patch);
        steps.push((
            format!("overwrite 6000 B at offset {off} through {}", show(&hard)),
            d,
        ));

        let shrunk = self.pick(&mut used, 10_000, "src/")?;
        let (r, d) = timed(|| fs.truncate(&shrunk, 5000));
        r.context(format_args!("truncate {}", show(&shrunk)))?;
        self.model.file_mut(&shrunk).truncate(5000);
        steps.push((format!("truncate {} to 5000 bytes", show(&shrunk)), d));

        let grown = self.pick(&mut used, 1, "data/large/f")?;
        let new_len = self.model.file(&grown).map_or(0, Vec::len) + 12_345;
        let (r, d) = timed(|| fs.truncate(&grown, new_len as u64));
        r.context(format_args!("truncate {}", show(&grown)))?;
        self.model.file_mut(&grown).resize(new_len, 0);
        steps.push((
            format!("extend {} to {new_len} bytes (a hole)", show(&grown)),
            d,
        ));
        Ok(steps)
    }
}

/// Remove `path` and everything below it; returns how many entries went.
pub fn remove_tree(fs: &Fs, path: &[u8]) -> engram_core::Result<u64> {
    if !fs.lstat(path)?.is_dir() {
        fs.unlink(path)?;
        return Ok(1);
    }
    let mut names = Vec::new();
    for e in fs.read_dir(path)? {
        let e = e?;
        if e.name != b"." && e.name != b".." {
            names.push(e.name);
        }
    }
    let mut n = 1;
    for name in names {
        n += remove_tree(fs, &join(path, &name))?;
    }
    fs.rmdir(path)?;
    Ok(n)
}

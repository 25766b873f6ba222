//! `engram ls [-l] POOL:/path`

use crate::error::{Context, Result};
use crate::pool::{self, PoolPath, join, mode_string, show};
use engram_core::{Fs, Metadata};
use std::ffi::OsString;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// Long listing: mode, links, size and name
    #[arg(short = 'l')]
    pub long: bool,
    /// What to list: POOL:/path (a bare POOL lists its root directory)
    pub target: OsString,
}

struct Row {
    name: Vec<u8>,
    meta: Metadata,
    link: Option<Vec<u8>>,
}

pub fn run(a: &Args) -> Result<()> {
    let target = PoolPath::parse(&a.target).unwrap_or_else(|| PoolPath {
        pool: PathBuf::from(&a.target),
        path: b"/".to_vec(),
    });
    let fs = pool::open(&target.pool)?;
    let listed = list(&fs, &target, a.long);
    fs.unmount()
        .context(format_args!("cannot unmount {}", target.pool.display()))?;
    let rows = listed?;
    if a.long {
        print_long(&rows);
    } else {
        for r in &rows {
            out!("{}", show(&r.name));
        }
    }
    Ok(())
}

fn row(fs: &Fs, path: &[u8], name: Vec<u8>, at: &PoolPath) -> Result<Row> {
    let meta = fs
        .lstat(path)
        .context(format_args!("cannot stat {}", at.with_path(path.to_vec())))?;
    let link = if meta.is_symlink() {
        Some(fs.readlink(path).context(format_args!(
            "cannot read link {}",
            at.with_path(path.to_vec())
        ))?)
    } else {
        None
    };
    Ok(Row { name, meta, link })
}

/// The entries of a directory sorted by name, or the one file named.
fn list(fs: &Fs, at: &PoolPath, long: bool) -> Result<Vec<Row>> {
    let path = &at.path;
    // Like ls: a symlink to a directory lists the directory, except in a long listing.
    let meta = if long { fs.lstat(path) } else { fs.stat(path) };
    let meta = meta.context(format_args!("cannot access {at}"))?;
    if !meta.is_dir() {
        return Ok(vec![row(fs, path, path.clone(), at)?]);
    }
    let mut names = Vec::new();
    for e in fs
        .read_dir(path)
        .context(format_args!("cannot list {at}"))?
    {
        let e = e.context(format_args!("cannot list {at}"))?;
        if e.name != b"." && e.name != b".." {
            names.push(e.name);
        }
    }
    names.sort();
    if !long {
        return Ok(names
            .into_iter()
            .map(|name| Row {
                name,
                meta,
                link: None,
            })
            .collect());
    }
    names
        .into_iter()
        .map(|name| row(fs, &join(path, &name), name, at))
        .collect()
}

fn print_long(rows: &[Row]) {
    let links = rows
        .iter()
        .map(|r| r.meta.nlink.to_string().len())
        .max()
        .unwrap_or(1);
    let sizes = rows
        .iter()
        .map(|r| r.meta.size.to_string().len())
        .max()
        .unwrap_or(1);
    for r in rows {
        let mut line = format!(
            "{} {:>links$} {:>sizes$} {}",
            mode_string(r.meta.mode),
            r.meta.nlink,
            r.meta.size,
            show(&r.name)
        );
        if let Some(t) = &r.link {
            line.push_str(" -> ");
            line.push_str(&show(t));
        }
        out!("{line}");
    }
}

//! Local → pool.

use super::{CHUNK, Stats};
use crate::error::{CliError, Context, Result};
use crate::pool::{PoolPath, join};
use engram_core::{Fs, OpenOptions};
use std::fs::{self, Metadata};
use std::io::{ErrorKind, Read};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

pub fn copy(fs: &Fs, src: &Path, dst: &PoolPath, recursive: bool) -> Result<Stats> {
    let shown = src.display();
    // Without -r a symlink argument is followed; with -r it is copied as a symlink.
    let meta = if recursive {
        fs::symlink_metadata(src)
    } else {
        fs::metadata(src)
    };
    let meta = meta.context(format_args!("cannot stat '{shown}'"))?;
    if meta.is_dir() && !recursive {
        return Err(CliError::new(format!(
            "'{shown}' is a directory (use -r to copy directories)"
        )));
    }
    let mut target = dst.path.clone();
    if fs.stat(&target).is_ok_and(|m| m.is_dir()) {
        let name = src.file_name().map(|n| n.as_bytes()).unwrap_or_default();
        if !name.is_empty() && name != b".." {
            target = join(&target, name);
        }
    }
    let mut c = CopyIn {
        fs,
        pool: dst,
        stats: Stats::default(),
    };
    c.entry(src, &meta, &target)?;
    Ok(c.stats)
}

struct CopyIn<'a> {
    fs: &'a Fs,
    pool: &'a PoolPath,
    stats: Stats,
}

impl CopyIn<'_> {
    fn at(&self, path: &[u8]) -> PoolPath {
        self.pool.with_path(path.to_vec())
    }

    fn entry(&mut self, src: &Path, meta: &Metadata, dst: &[u8]) -> Result<()> {
        let ft = meta.file_type();
        if ft.is_dir() {
            self.dir(src, meta, dst)
        } else if ft.is_symlink() {
            self.symlink(src, dst)
        } else if ft.is_file() {
            self.file(src, meta, dst)
        } else {
            eprintln!(
                "engram: skipping '{}': not a regular file, directory or symlink",
                src.display()
            );
            self.stats.skipped += 1;
            Ok(())
        }
    }

    fn dir(&mut self, src: &Path, meta: &Metadata, dst: &[u8]) -> Result<()> {
        let mode = meta.permissions().mode() & 0o7777;
        match self.fs.lstat(dst) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => {
                return Err(CliError::new(format!(
                    "cannot overwrite non-directory {} with a directory",
                    self.at(dst)
                )));
            }
            // Writable by us until its content is in; the real mode comes last.
            Err(_) => self
                .fs
                .mkdir(dst, mode | 0o700)
                .context(format_args!("cannot create directory {}", self.at(dst)))?,
        }
        let mut entries = Vec::new();
        for e in fs::read_dir(src).context(format_args!("cannot list '{}'", src.display()))? {
            entries.push(
                e.context(format_args!("cannot list '{}'", src.display()))?
                    .file_name(),
            );
        }
        entries.sort();
        for name in entries {
            let child = src.join(&name);
            let m = fs::symlink_metadata(&child)
                .context(format_args!("cannot stat '{}'", child.display()))?;
            self.entry(&child, &m, &join(dst, name.as_bytes()))?;
        }
        self.fs
            .chmod(dst, mode)
            .context(format_args!("cannot set the mode of {}", self.at(dst)))?;
        self.stats.dirs += 1;
        Ok(())
    }

    fn symlink(&mut self, src: &Path, dst: &[u8]) -> Result<()> {
        let target =
            fs::read_link(src).context(format_args!("cannot read link '{}'", src.display()))?;
        self.remove_non_dir(dst)?;
        self.fs
            .symlink(target.as_os_str().as_bytes(), dst)
            .context(format_args!("cannot create symlink {}", self.at(dst)))?;
        self.stats.symlinks += 1;
        Ok(())
    }

    /// Make room for a symlink: replace a file or symlink, refuse to replace a directory.
    fn remove_non_dir(&self, dst: &[u8]) -> Result<()> {
        match self.fs.lstat(dst) {
            Ok(m) if m.is_dir() => Err(CliError::new(format!(
                "cannot overwrite directory {}",
                self.at(dst)
            ))),
            Ok(_) => self
                .fs
                .unlink(dst)
                .context(format_args!("cannot replace {}", self.at(dst))),
            Err(_) => Ok(()),
        }
    }

    fn file(&mut self, src: &Path, meta: &Metadata, dst: &[u8]) -> Result<()> {
        let mode = meta.permissions().mode() & 0o7777;
        let mut input =
            fs::File::open(src).context(format_args!("cannot open '{}'", src.display()))?;
        let opts = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(mode);
        let out = self
            .fs
            .open_file(dst, &opts)
            .context(format_args!("cannot create {}", self.at(dst)))?;
        let mut buf = vec![0u8; CHUNK];
        let mut off = 0u64;
        loop {
            let n = match input.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => return Err(e).context(format_args!("cannot read '{}'", src.display())),
            };
            let mut done = 0;
            while done < n {
                let w = out
                    .write_at(&buf[done..n], off)
                    .context(format_args!("cannot write {}", self.at(dst)))?;
                if w == 0 {
                    return Err(CliError::new(format!(
                        "cannot write {}: no progress",
                        self.at(dst)
                    )));
                }
                done += w;
                off += w as u64;
            }
        }
        drop(out);
        self.fs
            .chmod(dst, mode)
            .context(format_args!("cannot set the mode of {}", self.at(dst)))?;
        self.stats.files += 1;
        self.stats.bytes += off;
        Ok(())
    }
}

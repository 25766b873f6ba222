//! Pool → local.

use super::{CHUNK, Stats};
use crate::error::{CliError, Context, Result};
use crate::pool::{PoolPath, basename, join};
use engram_core::{Fs, Metadata, OpenOptions};
use std::ffi::OsStr;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, FileExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

pub fn copy(fs: &Fs, src: &PoolPath, dst: &Path, recursive: bool) -> Result<Stats> {
    // Without -r a symlink argument is followed; with -r it is copied as a symlink.
    let meta = if recursive {
        fs.lstat(&src.path)
    } else {
        fs.stat(&src.path)
    };
    let meta = meta.context(format_args!("cannot stat {src}"))?;
    if meta.is_dir() && !recursive {
        return Err(CliError::new(format!(
            "{src} is a directory (use -r to copy directories)"
        )));
    }
    let mut target = dst.to_path_buf();
    if dst.is_dir() {
        let name = basename(&src.path);
        if !name.is_empty() && name != b"." && name != b".." {
            target = dst.join(OsStr::from_bytes(name));
        }
    }
    let mut c = CopyOut {
        fs,
        pool: src,
        stats: Stats::default(),
        ancestors: Vec::new(),
    };
    c.entry(&src.path, &meta, &target)?;
    Ok(c.stats)
}

struct CopyOut<'a> {
    fs: &'a Fs,
    pool: &'a PoolPath,
    stats: Stats,
    /// Inodes of the directories being copied, outermost first: a damaged pool could hold a
    /// directory inside itself.
    ancestors: Vec<u64>,
}

impl CopyOut<'_> {
    fn at(&self, path: &[u8]) -> PoolPath {
        self.pool.with_path(path.to_vec())
    }

    fn entry(&mut self, src: &[u8], meta: &Metadata, dst: &Path) -> Result<()> {
        if meta.is_dir() {
            self.dir(src, meta, dst)
        } else if meta.is_symlink() {
            self.symlink(src, dst)
        } else if meta.is_file() {
            self.file(src, meta, dst)
        } else {
            eprintln!(
                "engram: skipping {}: not a regular file, directory or symlink",
                self.at(src)
            );
            self.stats.skipped += 1;
            Ok(())
        }
    }

    fn dir(&mut self, src: &[u8], meta: &Metadata, dst: &Path) -> Result<()> {
        let shown = dst.display();
        if self.ancestors.contains(&meta.ino) {
            return Err(CliError::new(format!(
                "{} is a directory inside itself: the pool is damaged (run engram fsck)",
                self.at(src)
            )));
        }
        match fs::symlink_metadata(dst) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => {
                return Err(CliError::new(format!(
                    "cannot overwrite non-directory '{shown}' with a directory"
                )));
            }
            // Writable by us until its content is in; the real mode comes last.
            Err(_) => fs::DirBuilder::new()
                .mode(0o700)
                .create(dst)
                .context(format_args!("cannot create directory '{shown}'"))?,
        }
        let mut names = Vec::new();
        for e in self
            .fs
            .read_dir(src)
            .context(format_args!("cannot list {}", self.at(src)))?
        {
            let e = e.context(format_args!("cannot list {}", self.at(src)))?;
            if e.name != b"." && e.name != b".." {
                names.push(e.name);
            }
        }
        names.sort();
        self.ancestors.push(meta.ino);
        for name in names {
            let child = join(src, &name);
            let m = self
                .fs
                .lstat(&child)
                .context(format_args!("cannot stat {}", self.at(&child)))?;
            self.entry(&child, &m, &dst.join(OsStr::from_bytes(&name)))?;
        }
        self.ancestors.pop();
        fs::set_permissions(dst, fs::Permissions::from_mode(meta.permissions()))
            .context(format_args!("cannot set the mode of '{shown}'"))?;
        self.stats.dirs += 1;
        Ok(())
    }

    fn symlink(&mut self, src: &[u8], dst: &Path) -> Result<()> {
        let target = self
            .fs
            .readlink(src)
            .context(format_args!("cannot read link {}", self.at(src)))?;
        match fs::symlink_metadata(dst) {
            Ok(m) if m.is_dir() => {
                return Err(CliError::new(format!(
                    "cannot overwrite directory '{}'",
                    dst.display()
                )));
            }
            Ok(_) => {
                fs::remove_file(dst).context(format_args!("cannot replace '{}'", dst.display()))?
            }
            Err(_) => {}
        }
        std::os::unix::fs::symlink(OsStr::from_bytes(&target), dst)
            .context(format_args!("cannot create symlink '{}'", dst.display()))?;
        self.stats.symlinks += 1;
        Ok(())
    }

    fn file(&mut self, src: &[u8], meta: &Metadata, dst: &Path) -> Result<()> {
        let shown = dst.display();
        let input = self
            .fs
            .open_file(src, &OpenOptions::new().read(true))
            .context(format_args!("cannot open {}", self.at(src)))?;
        let out = fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(meta.permissions())
            .open(dst)
            .context(format_args!("cannot create '{shown}'"))?;
        let mut buf = vec![0u8; CHUNK];
        let mut off = 0u64;
        loop {
            let n = input
                .read_at(&mut buf, off)
                .context(format_args!("cannot read {}", self.at(src)))?;
            if n == 0 {
                break;
            }
            // Zeros become holes, as `cp --sparse=auto` makes them; set_len gives the size.
            if buf[..n].iter().any(|&b| b != 0) {
                out.write_all_at(&buf[..n], off)
                    .context(format_args!("cannot write '{shown}'"))?;
            }
            off += n as u64;
        }
        out.set_len(off)
            .context(format_args!("cannot write '{shown}'"))?;
        fs::set_permissions(dst, fs::Permissions::from_mode(meta.permissions()))
            .context(format_args!("cannot set the mode of '{shown}'"))?;
        self.stats.files += 1;
        self.stats.bytes += off;
        Ok(())
    }
}

//! The EngramFS side: the same operations on a real pool, and its tree walked through handles.

use super::ops::{Op, OpT};
use super::posix_model::{R, join};
use super::tree::{RawTree, Tree, finish_tree};
use super::values::{Bytes, Mode, Outcome, P, StatV, Val, errno_name, pattern};
use super::{Errno, POOL_SIZE};
use engram_core::{File, Fs, Metadata, OpenOptions, Options};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

// ---------------------------------------------------------------------------------------
// EngramFS side
// ---------------------------------------------------------------------------------------

static POOL_COUNTER: AtomicU64 = AtomicU64::new(0);

fn errno(e: engram_core::Error) -> Errno {
    e.errno()
}

fn statv(m: &Metadata) -> StatV {
    let kind = if m.is_dir() {
        'd'
    } else if m.is_symlink() {
        'l'
    } else if m.is_file() {
        'f'
    } else {
        '?'
    };
    StatV {
        kind,
        perm: Mode(m.permissions()),
        nlink: m.nlink,
        size: if m.is_dir() { None } else { Some(m.size) },
    }
}

fn read_all(f: &File) -> R<Vec<u8>> {
    let len = f.metadata().map_err(errno)?.size as usize;
    let mut buf = vec![0u8; len];
    let n = f.read_at(&mut buf, 0).map_err(errno)?;
    buf.truncate(n);
    Ok(buf)
}

pub struct Engine {
    path: PathBuf,
    fs: Option<Fs>,
    handles: BTreeMap<u8, File>,
}

impl Engine {
    pub fn new() -> Engine {
        let n = POOL_COUNTER.fetch_add(1, Ordering::Relaxed);
        let path = PathBuf::from(format!("/dev/shm/engram-model-{}-{n}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        Fs::mkfs(&path, POOL_SIZE).expect("mkfs");
        let fs = Fs::open(&path, &Options::default()).expect("open");
        Engine {
            path,
            fs: Some(fs),
            handles: BTreeMap::new(),
        }
    }

    fn fs(&self) -> &Fs {
        self.fs.as_ref().expect("mounted")
    }

    pub fn remount(&mut self) -> Result<(), String> {
        self.handles.clear();
        let fs = self.fs.take().expect("mounted");
        fs.unmount().map_err(|e| format!("unmount: {e}"))?;
        let fs = Fs::open(&self.path, &Options::default()).map_err(|e| format!("reopen: {e}"))?;
        let info = fs.mount_info();
        if !info.was_clean || !info.problems.is_empty() {
            return Err(format!(
                "reopen after a clean unmount: was_clean {} problems {:?}",
                info.was_clean, info.problems
            ));
        }
        self.fs = Some(fs);
        Ok(())
    }

    pub fn fsck(&self) -> Result<(), String> {
        let r = self
            .fs()
            .fsck(false)
            .map_err(|e| format!("fsck failed: {e}"))?;
        if r.is_clean() {
            Ok(())
        } else {
            Err(format!("fsck problems: {:#?}", r.problems))
        }
    }

    fn open(&self, path: &P, o: OpenOptions) -> R<File> {
        self.fs().open_file(&path.0, &o).map_err(errno)
    }

    pub fn apply(&mut self, op: &Op) -> Outcome {
        let rw = OpenOptions::new().read(true).write(true);
        let unit = |r: engram_core::Result<()>| r.map(|()| Val::Unit).map_err(errno);
        match op {
            OpT::Create {
                path,
                excl,
                trunc,
                write,
                perm,
            } => {
                let o = OpenOptions {
                    read: true,
                    write: *write,
                    create: true,
                    excl: *excl,
                    truncate: *trunc,
                    mode: perm.0,
                    ..rw
                };
                self.open(path, o)?;
                Ok(Val::Unit)
            }
            OpT::Write {
                path,
                off,
                len,
                seed,
            } => {
                let f = self.open(path, OpenOptions::new().write(true))?;
                f.write_at(&pattern(*seed, *len), *off)
                    .map(Val::Len)
                    .map_err(errno)
            }
            OpT::Read { path } => self
                .fs()
                .read_file(&path.0)
                .map(|d| Val::Data(Bytes(d)))
                .map_err(errno),
            OpT::Truncate { path, size } => unit(self.fs().truncate(&path.0, *size)),
            OpT::Mkdir { path, perm } => unit(self.fs().mkdir(&path.0, perm.0)),
            OpT::Rmdir { path } => unit(self.fs().rmdir(&path.0)),
            OpT::Unlink { path } => unit(self.fs().unlink(&path.0)),
            OpT::Rename { from, to, flags } => {
                unit(self.fs().rename_at(None, &from.0, None, &to.0, *flags))
            }
            OpT::Link { from, to } => unit(self.fs().link(&from.0, &to.0)),
            OpT::Symlink { target, path } => unit(self.fs().symlink(&target.0, &path.0)),
            OpT::Readlink { path } => self
                .fs()
                .readlink(&path.0)
                .map(|t| Val::Target(P(t)))
                .map_err(errno),
            OpT::Stat { path } => self
                .fs()
                .stat(&path.0)
                .map(|m| Val::Stat(statv(&m)))
                .map_err(errno),
            OpT::Lstat { path } => self
                .fs()
                .lstat(&path.0)
                .map(|m| Val::Stat(statv(&m)))
                .map_err(errno),
            OpT::Chmod { path, perm } => unit(self.fs().chmod(&path.0, perm.0)),
            OpT::ReadDir { path } => {
                let mut names = Vec::new();
                for e in self.fs().read_dir(&path.0).map_err(errno)? {
                    let e = e.map_err(errno)?;
                    if e.name != b"." && e.name != b".." {
                        names.push(P(e.name));
                    }
                }
                names.sort();
                Ok(Val::Names(names))
            }
            OpT::Open { slot, path, create } => {
                self.handles.remove(slot);
                let f = self.open(path, rw.create(*create))?;
                self.handles.insert(*slot, f);
                Ok(Val::Unit)
            }
            OpT::HWrite {
                slot,
                off,
                len,
                seed,
            } => match self.handles.get(slot) {
                Some(f) => f
                    .write_at(&pattern(*seed, *len), *off)
                    .map(Val::Len)
                    .map_err(errno),
                None => Ok(Val::NoHandle),
            },
            OpT::HRead { slot } => match self.handles.get(slot) {
                Some(f) => read_all(f).map(|d| Val::Data(Bytes(d))),
                None => Ok(Val::NoHandle),
            },
            OpT::HStat { slot } => match self.handles.get(slot) {
                Some(f) => f.metadata().map(|m| Val::Stat(statv(&m))).map_err(errno),
                None => Ok(Val::NoHandle),
            },
            OpT::HTruncate { slot, size } => match self.handles.get(slot) {
                Some(f) => unit(f.set_len(*size)),
                None => Ok(Val::NoHandle),
            },
            OpT::HClear {
                slot,
                off,
                len,
                how,
            } => match self.handles.get(slot) {
                Some(f) if *how == 0 => unit(f.punch_hole(*off, *len)),
                Some(f) => unit(f.zero_range(*off, *len, *how == 2)),
                None => Ok(Val::NoHandle),
            },
            OpT::Close { slot } => Ok(if self.handles.remove(slot).is_some() {
                Val::Unit
            } else {
                Val::NoHandle
            }),
            OpT::UnlinkOpen {
                path,
                off,
                len,
                seed,
            } => {
                let f = self.open(path, rw.create(true))?;
                let out = vec![
                    unit(self.fs().unlink(&path.0)),
                    f.write_at(&pattern(*seed, *len), *off)
                        .map(Val::Len)
                        .map_err(errno),
                    read_all(&f).map(|d| Val::Data(Bytes(d))),
                    f.metadata().map(|m| Val::Stat(statv(&m))).map_err(errno),
                ];
                drop(f);
                Ok(Val::Seq(out))
            }
            OpT::Append { path, len, seed } => {
                let f = self.open(path, OpenOptions::new().write(true).append(true))?;
                f.write_at(&pattern(*seed, *len), 0)
                    .map(Val::Len)
                    .map_err(errno)
            }
            OpT::Bulk { .. } => Ok(Val::Seq(
                op.clone().expand().iter().map(|o| self.apply(o)).collect(),
            )),
            OpT::Remount => match self.remount() {
                Ok(()) => Ok(Val::Unit),
                Err(e) => panic!("{e}"),
            },
        }
    }

    /// Walk the whole tree through directory handles (no long paths), checking that
    /// readdir agrees with lstat on the way.
    pub fn tree(&self) -> Result<Tree, String> {
        let fs = self.fs();
        let dir_opts = OpenOptions::new().read(true).directory(true);
        let root = fs
            .open_file("/", &dir_opts)
            .map_err(|e| format!("open /: {e}"))?;
        let md = root.metadata().map_err(|e| format!("stat /: {e}"))?;
        let mut raw = RawTree::new();
        raw.insert(
            P::new("/"),
            (md.ino, 'd', md.permissions(), md.nlink, Bytes::default()),
        );
        let mut stack = vec![(b"/".to_vec(), root, md.ino)];
        while let Some((path, dir, parent)) = stack.pop() {
            let mut count = 0;
            for e in dir
                .read_dir()
                .map_err(|e| format!("readdir {:?}: {e}", P(path.clone())))?
            {
                let e = e.map_err(|e| format!("readdir {:?}: {e}", P(path.clone())))?;
                let dots = [(&b"."[..], dir.ino()), (&b".."[..], parent)];
                if let Some(&(_, want)) = dots.iter().find(|d| d.0 == e.name) {
                    if e.ino != want {
                        return Err(format!(
                            "{:?} in {:?} is inode {} (want {want})",
                            P(e.name),
                            P(path),
                            e.ino
                        ));
                    }
                    continue;
                }
                count += 1;
                let child = join(&path, &e.name);
                let cp = P(child.clone());
                let md = fs
                    .stat_at(Some(&dir), &e.name, false)
                    .map_err(|err| format!("lstat {cp:?}: {err}"))?;
                let sv = statv(&md);
                let dtype = match sv.kind {
                    'd' => libc::DT_DIR,
                    'l' => libc::DT_LNK,
                    _ => libc::DT_REG,
                };
                if e.ino != md.ino || e.file_type != dtype {
                    return Err(format!(
                        "readdir of {cp:?} says ino {} type {} but lstat says ino {} type {}",
                        e.ino, e.file_type, md.ino, dtype
                    ));
                }
                if raw.contains_key(&cp) {
                    return Err(format!("readdir returned {cp:?} twice"));
                }
                let content = match sv.kind {
                    'f' => {
                        let f = fs
                            .open_at(Some(&dir), &e.name, &OpenOptions::new().read(true))
                            .map_err(|err| format!("open {cp:?}: {err}"))?;
                        read_all(&f).map_err(|err| format!("read {cp:?}: {}", errno_name(err)))?
                    }
                    'l' => fs
                        .readlink_at(Some(&dir), &e.name)
                        .map_err(|err| format!("readlink {cp:?}: {err}"))?,
                    _ => {
                        let sub = fs
                            .open_at(Some(&dir), &e.name, &dir_opts)
                            .map_err(|err| format!("opendir {cp:?}: {err}"))?;
                        stack.push((child, sub, dir.ino()));
                        Vec::new()
                    }
                };
                raw.insert(cp, (md.ino, sv.kind, sv.perm.0, sv.nlink, Bytes(content)));
            }
            let md = dir.metadata().map_err(|e| format!("fstat: {e}"))?;
            if md.size != count {
                return Err(format!(
                    "directory {:?} has {count} entries but its size says {}",
                    P(path),
                    md.size
                ));
            }
        }
        Ok(finish_tree(raw))
    }
}

impl Default for Engine {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.handles.clear();
        self.fs = None;
        let _ = std::fs::remove_file(&self.path);
    }
}

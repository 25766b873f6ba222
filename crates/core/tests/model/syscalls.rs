//! The model's system calls: what each operation does to the tree and what Linux returns.

use super::ops::{Op, OpT};
use super::posix_model::{Kind, Last, Model, R};
use super::values::{Bytes, Mode, Outcome, P, StatV, Val, pattern};
use super::{NAME_MAX, PATH_MAX, TEMP_SLOT};
use engram_core::{RENAME_EXCHANGE, RENAME_NOREPLACE};
use libc::{EBUSY, EEXIST, EINVAL, EISDIR, ENAMETOOLONG, ENOENT, ENOTDIR, ENOTEMPTY, EPERM};
use std::collections::BTreeMap;

impl Model {
    fn file_data(&mut self, ino: u64) -> R<&mut Vec<u8>> {
        match &mut self.node_mut(ino).kind {
            Kind::File(d) => Ok(d),
            Kind::Dir(_) => Err(EISDIR),
            Kind::Symlink(_) => Err(EINVAL),
        }
    }

    fn write(&mut self, ino: u64, off: u64, len: usize, seed: u8) -> Outcome {
        let d = self.file_data(ino)?;
        if len > 0 {
            let off = off as usize;
            if d.len() < off + len {
                d.resize(off + len, 0);
            }
            d[off..off + len].copy_from_slice(&pattern(seed, len));
        }
        Ok(Val::Len(len))
    }

    fn read(&mut self, ino: u64) -> Outcome {
        Ok(Val::Data(Bytes(self.file_data(ino)?.clone())))
    }

    fn set_len(&mut self, ino: u64, size: u64) -> Outcome {
        self.file_data(ino)?.resize(size as usize, 0);
        Ok(Val::Unit)
    }

    /// fallocate: a punch (`how` 0) or a zeroing (1, or 2 keeping the size) reads as zeros
    /// over the range; only zeroing without keeping the size grows the file.
    fn clear(&mut self, ino: u64, off: u64, len: u64, how: u8) -> Outcome {
        if len == 0 {
            return Err(EINVAL);
        }
        let data = self.file_data(ino)?;
        let end = off + len;
        if how == 1 && end > data.len() as u64 {
            data.resize(end as usize, 0);
        }
        let to = end.min(data.len() as u64) as usize;
        if (off as usize) < to {
            data[off as usize..to].fill(0);
        }
        Ok(Val::Unit)
    }

    fn stat_of(&self, ino: u64) -> StatV {
        let n = self.node(ino);
        let (kind, size) = match &n.kind {
            Kind::File(d) => ('f', Some(d.len() as u64)),
            Kind::Dir(_) => ('d', None),
            Kind::Symlink(t) => ('l', Some(t.len() as u64)),
        };
        StatV {
            kind,
            perm: Mode(n.perm),
            nlink: n.nlink,
            size,
        }
    }

    fn unlink(&mut self, path: &[u8]) -> Outcome {
        let p = self.parent_of(path)?;
        let Last::Norm(name) = p.last else {
            return Err(EISDIR);
        };
        if name.len() > NAME_MAX {
            return Err(ENAMETOOLONG);
        }
        let ino = self.lookup(p.dir, &name).ok_or(ENOENT)?;
        if p.trailing {
            return Err(if self.is_dir(ino) { EISDIR } else { ENOTDIR });
        }
        if self.is_dir(ino) {
            return Err(EISDIR);
        }
        self.remove_entry(p.dir, &name);
        Ok(Val::Unit)
    }

    fn rmdir(&mut self, path: &[u8]) -> Outcome {
        let p = self.parent_of(path)?;
        let name = match p.last {
            Last::DotDot => return Err(ENOTEMPTY),
            Last::Dot => return Err(EINVAL),
            Last::Root => return Err(EBUSY),
            Last::Norm(n) => n,
        };
        if name.len() > NAME_MAX {
            return Err(ENAMETOOLONG);
        }
        let ino = self.lookup(p.dir, &name).ok_or(ENOENT)?;
        if !self.is_dir(ino) {
            return Err(ENOTDIR);
        }
        if !self.entries(ino).is_empty() {
            return Err(ENOTEMPTY);
        }
        self.remove_entry(p.dir, &name);
        Ok(Val::Unit)
    }

    /// lock_rename(p1, p2): the child of one directory that is an ancestor of (or is) the
    /// other, if there is one.
    fn trap(&self, p1: u64, p2: u64) -> Option<u64> {
        if p1 == p2 {
            return None;
        }
        for (from, to) in [(p1, p2), (p2, p1)] {
            let mut p = from;
            loop {
                let r = self.parent(p);
                if r == to {
                    return Some(p);
                }
                if r == p {
                    break;
                }
                p = r;
            }
        }
        None
    }

    fn rename(&mut self, from: &[u8], to: &[u8], flags: u32) -> Outcome {
        let exchange = flags & RENAME_EXCHANGE != 0;
        let noreplace = flags & RENAME_NOREPLACE != 0;
        if flags & !(RENAME_EXCHANGE | RENAME_NOREPLACE) != 0 || (exchange && noreplace) {
            return Err(EINVAL);
        }
        let f = self.parent_of(from)?;
        let t = self.parent_of(to)?;
        let Last::Norm(fname) = f.last else {
            return Err(EBUSY);
        };
        let Last::Norm(tname) = t.last else {
            return Err(if noreplace { EEXIST } else { EBUSY });
        };
        if fname.len() > NAME_MAX {
            return Err(ENAMETOOLONG);
        }
        let src = self.lookup(f.dir, &fname).ok_or(ENOENT)?;
        if tname.len() > NAME_MAX {
            return Err(ENAMETOOLONG);
        }
        let dst = self.lookup(t.dir, &tname);
        if noreplace && dst.is_some() {
            return Err(EEXIST);
        }
        if exchange {
            let d = dst.ok_or(ENOENT)?;
            if !self.is_dir(d) && t.trailing {
                return Err(ENOTDIR);
            }
        }
        if !self.is_dir(src) && (f.trailing || (!exchange && t.trailing)) {
            return Err(ENOTDIR);
        }
        let trap = self.trap(t.dir, f.dir);
        if trap == Some(src) {
            return Err(EINVAL);
        }
        if dst.is_some() && trap == dst {
            return Err(if exchange { EINVAL } else { ENOTEMPTY });
        }
        if dst == Some(src) {
            return Ok(Val::Unit);
        }
        let sdir = self.is_dir(src);
        if exchange {
            let d = dst.expect("exchange target");
            let ddir = self.is_dir(d);
            self.entries_mut(f.dir).insert(fname, d);
            self.entries_mut(t.dir).insert(tname, src);
            if sdir {
                self.node_mut(src).parent = t.dir;
                self.node_mut(f.dir).nlink -= 1;
                self.node_mut(t.dir).nlink += 1;
            }
            if ddir {
                self.node_mut(d).parent = f.dir;
                self.node_mut(t.dir).nlink -= 1;
                self.node_mut(f.dir).nlink += 1;
            }
            return Ok(Val::Unit);
        }
        if let Some(d) = dst {
            let ddir = self.is_dir(d);
            if sdir && !ddir {
                return Err(ENOTDIR);
            }
            if !sdir && ddir {
                return Err(EISDIR);
            }
            if ddir && !self.entries(d).is_empty() {
                return Err(ENOTEMPTY);
            }
        }
        if dst.is_some() {
            self.remove_entry(t.dir, &tname);
        }
        self.entries_mut(f.dir).remove(&fname);
        self.entries_mut(t.dir).insert(tname, src);
        if sdir {
            self.node_mut(f.dir).nlink -= 1;
            self.node_mut(t.dir).nlink += 1;
            self.node_mut(src).parent = t.dir;
        }
        Ok(Val::Unit)
    }

    fn link(&mut self, from: &[u8], to: &[u8]) -> Outcome {
        let ino = self.resolve(from, false)?;
        let (dir, name) = self.filename_create(to, false)?;
        if self.is_dir(ino) {
            return Err(EPERM);
        }
        self.add_entry(dir, &name, ino);
        Ok(Val::Unit)
    }

    fn symlink(&mut self, target: &[u8], path: &[u8]) -> Outcome {
        if target.is_empty() {
            return Err(ENOENT);
        }
        if target.len() >= PATH_MAX {
            return Err(ENAMETOOLONG);
        }
        let (dir, name) = self.filename_create(path, false)?;
        let ino = self.alloc(Kind::Symlink(target.to_vec()), 0o777);
        self.add_entry(dir, &name, ino);
        Ok(Val::Unit)
    }

    fn mkdir(&mut self, path: &[u8], perm: u32) -> Outcome {
        let (dir, name) = self.filename_create(path, true)?;
        // vfs_mkdir keeps the permission and sticky bits; a set-group-ID parent passes
        // its S_ISGID on.
        let perm = perm & 0o1777 | self.node(dir).perm & 0o2000;
        let ino = self.alloc(Kind::Dir(BTreeMap::new()), perm);
        self.add_entry(dir, &name, ino);
        Ok(Val::Unit)
    }

    fn close(&mut self, slot: u8) {
        if let Some(ino) = self.handles.remove(&slot) {
            self.release(ino);
        }
    }

    fn handle(&self, slot: u8) -> Option<u64> {
        self.handles.get(&slot).copied()
    }

    /// Apply one operation; returns what Linux would return.
    pub fn apply(&mut self, op: &Op) -> Outcome {
        match op {
            OpT::Create {
                path,
                excl,
                trunc,
                perm,
                ..
            } => {
                self.open_create(&path.0, *excl, *trunc, perm.0)?;
                Ok(Val::Unit)
            }
            OpT::Write {
                path,
                off,
                len,
                seed,
            } => {
                let ino = self.open_existing(&path.0, true)?;
                self.write(ino, *off, *len, *seed)
            }
            OpT::Read { path } => {
                let ino = self.open_existing(&path.0, false)?;
                self.read(ino)
            }
            OpT::Truncate { path, size } => {
                let ino = self.resolve(&path.0, true)?;
                self.set_len(ino, *size)
            }
            OpT::Mkdir { path, perm } => self.mkdir(&path.0, perm.0),
            OpT::Rmdir { path } => self.rmdir(&path.0),
            OpT::Unlink { path } => self.unlink(&path.0),
            OpT::Rename { from, to, flags } => self.rename(&from.0, &to.0, *flags),
            OpT::Link { from, to } => self.link(&from.0, &to.0),
            OpT::Symlink { target, path } => self.symlink(&target.0, &path.0),
            OpT::Readlink { path } => {
                let ino = self.resolve(&path.0, false)?;
                let t = self.link_target(ino).ok_or(EINVAL)?;
                Ok(Val::Target(P::new(t)))
            }
            OpT::Stat { path } => Ok(Val::Stat(self.stat_of(self.resolve(&path.0, true)?))),
            OpT::Lstat { path } => Ok(Val::Stat(self.stat_of(self.resolve(&path.0, false)?))),
            OpT::Chmod { path, perm } => {
                let ino = self.resolve(&path.0, true)?;
                self.node_mut(ino).perm = perm.0 & 0o7777;
                Ok(Val::Unit)
            }
            OpT::ReadDir { path } => {
                let ino = self.resolve(&path.0, true)?;
                if !self.is_dir(ino) {
                    return Err(ENOTDIR);
                }
                Ok(Val::Names(self.entries(ino).keys().map(P::new).collect()))
            }
            OpT::Open { slot, path, create } => {
                self.close(*slot);
                let ino = if *create {
                    self.open_create(&path.0, false, false, 0o644)?
                } else {
                    self.open_existing(&path.0, true)?
                };
                self.handles.insert(*slot, ino);
                Ok(Val::Unit)
            }
            OpT::HWrite {
                slot,
                off,
                len,
                seed,
            } => match self.handle(*slot) {
                Some(ino) => self.write(ino, *off, *len, *seed),
                None => Ok(Val::NoHandle),
            },
            OpT::HRead { slot } => match self.handle(*slot) {
                Some(ino) => self.read(ino),
                None => Ok(Val::NoHandle),
            },
            OpT::HStat { slot } => match self.handle(*slot) {
                Some(ino) => Ok(Val::Stat(self.stat_of(ino))),
                None => Ok(Val::NoHandle),
            },
            OpT::HTruncate { slot, size } => match self.handle(*slot) {
                Some(ino) => self.set_len(ino, *size),
                None => Ok(Val::NoHandle),
            },
            OpT::HClear {
                slot,
                off,
                len,
                how,
            } => match self.handle(*slot) {
                Some(ino) => self.clear(ino, *off, *len, *how),
                None => Ok(Val::NoHandle),
            },
            OpT::Close { slot } => {
                let had = self.handles.contains_key(slot);
                self.close(*slot);
                Ok(if had { Val::Unit } else { Val::NoHandle })
            }
            OpT::UnlinkOpen {
                path,
                off,
                len,
                seed,
            } => {
                let ino = self.open_create(&path.0, false, false, 0o644)?;
                self.handles.insert(TEMP_SLOT, ino);
                let out = vec![
                    self.unlink(&path.0),
                    self.write(ino, *off, *len, *seed),
                    self.read(ino),
                    Ok(Val::Stat(self.stat_of(ino))),
                ];
                self.close(TEMP_SLOT);
                Ok(Val::Seq(out))
            }
            OpT::Append { path, len, seed } => {
                let ino = self.open_existing(&path.0, true)?;
                let end = self.file_data(ino)?.len() as u64;
                self.write(ino, end, *len, *seed)
            }
            OpT::Bulk { .. } => Ok(Val::Seq(
                op.clone().expand().iter().map(|o| self.apply(o)).collect(),
            )),
            OpT::Remount => {
                let slots: Vec<u8> = self.handles.keys().copied().collect();
                for s in slots {
                    self.close(s);
                }
                Ok(Val::Unit)
            }
        }
    }
}

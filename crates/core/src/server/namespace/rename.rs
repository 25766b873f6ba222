//! Rename: moving a name, within a directory or between two, replacing or exchanging
//! what the new name held, as one record.

use super::{LINK_MAX, MAX_STAGED, check_name, ftype_of};
use crate::alloc::Item;
use crate::dir::{self, Found};
use crate::error::{Error, Result};
use crate::inode::{InodeData, field};
use crate::oplog::Entry;
use crate::perm::{self, Creds, W, X};
use crate::request::{Handle, RENAME_EXCHANGE, RENAME_NOREPLACE, Response};
use crate::server::Server;

/// Changes of a counter of up to two directories, kept in inode order.
#[derive(Default)]
struct Deltas {
    d: [(u64, i64); 2],
    n: usize,
}

impl Deltas {
    fn add(&mut self, ino: u64, delta: i64) {
        if let Some(e) = self.d[..self.n].iter_mut().find(|e| e.0 == ino) {
            e.1 += delta;
            return;
        }
        self.d[self.n] = (ino, delta);
        self.n += 1;
        if self.n == 2 && self.d[0].0 > self.d[1].0 {
            self.d.swap(0, 1);
        }
    }

    /// The changes, without those that cancel out (a rename inside one directory): their
    /// store would write the value the field already has.
    fn iter(&self) -> impl Iterator<Item = (u64, i64)> + '_ {
        self.d[..self.n]
            .iter()
            .copied()
            .filter(|&(_, delta)| delta != 0)
    }
}

/// Per-directory counters a namespace operation changes, applied as absolute values.
#[derive(Default)]
struct DirChanges {
    size: Deltas,
    nlink: Deltas,
}

impl Server {
    /// True if `anc` is `ino` or one of its ancestors.
    fn is_ancestor(&self, anc: u64, mut ino: u64) -> bool {
        for _ in 0..self.geo.inode_count {
            if ino == anc {
                return true;
            }
            let parent = self.read_inode(ino).parent;
            if ino == crate::layout::ROOT_INO || parent == ino || parent == 0 {
                return false;
            }
            ino = parent;
        }
        false
    }

    pub(in crate::server) fn rename(
        &mut self,
        c: &Creds,
        from: Handle,
        fname: &[u8],
        to: Handle,
        tname: &[u8],
        flags: u32,
    ) -> Result<Response> {
        let exchange = flags & RENAME_EXCHANGE != 0;
        if flags & !(RENAME_EXCHANGE | RENAME_NOREPLACE) != 0
            || (exchange && flags & RENAME_NOREPLACE != 0)
        {
            return Err(Error::EINVAL);
        }
        // In Linux's order: the old name (valid, then present), then the new one.
        let valid = |n: &[u8]| {
            if n == b"." || n == b".." {
                return Err(Error::EBUSY);
            }
            check_name(n)
        };
        let sp = self.dir_inode(from)?;
        let dp = if to == from { sp } else { self.dir_inode(to)? };
        valid(fname)?;
        let sd = self.lookup(from.ino, &sp, fname)?.ok_or(Error::ENOENT)?;
        valid(tname)?;
        let (dd, tspace) = self.probe(to.ino, &dp, tname)?;
        if exchange && dd.is_none() {
            return Err(Error::ENOENT);
        }
        if flags & RENAME_NOREPLACE != 0 && dd.is_some() {
            return Err(Error::EEXIST);
        }
        perm::check(c, &sp, W | X)?;
        perm::check(c, &dp, W | X)?;
        let s = self.read_inode(sd.ino);
        perm::check_sticky(c, &sp, &s)?;
        if dd.as_ref().is_some_and(|d| d.ino == sd.ino) {
            return Ok(Response::Done);
        }
        let d = dd.as_ref().map(|x| self.read_inode(x.ino));
        if let Some(d) = &d {
            perm::check_sticky(c, &dp, d)?;
        }
        // Linux: a target that is an ancestor of the source is "not empty".
        if let Some(dd) = &dd
            && !exchange
            && self.is_ancestor(dd.ino, from.ino)
        {
            return Err(Error::ENOTEMPTY);
        }
        let moving = from.ino != to.ino;
        if s.is_dir() && moving {
            if self.is_ancestor(sd.ino, to.ino) {
                return Err(Error::EINVAL);
            }
            perm::check(c, &s, W)?;
        }
        if exchange && let (Some(dd), Some(d)) = (&dd, &d) {
            if d.is_dir() && moving {
                if self.is_ancestor(dd.ino, from.ino) {
                    return Err(Error::EINVAL);
                }
                perm::check(c, d, W)?;
            }
        } else if let Some(d) = &d {
            if s.is_dir() && !d.is_dir() {
                return Err(Error::ENOTDIR);
            }
            if !s.is_dir() && d.is_dir() {
                return Err(Error::EISDIR);
            }
            if d.is_dir() && d.size != 0 {
                return Err(Error::ENOTEMPTY);
            }
        }
        if s.is_dir() && moving && !exchange && d.is_none() && dp.nlink >= LINK_MAX {
            return Err(Error::EMLINK);
        }

        let wants = [(to.ino, tname), (from.ino, fname)];
        // Nothing has changed since the probe of the new name.
        let first = Some(tspace);
        let (places, split) = self.find_places(&wants[..1 + exchange as usize], first)?;
        // Splits may have moved entries: look them up again (else nothing has changed).
        let (sd, dd) = if split {
            let sp = self.read_inode(from.ino);
            let dp = self.read_inode(to.ino);
            let sd = self.lookup(from.ino, &sp, fname)?.ok_or(Error::EIO)?;
            (sd, self.lookup(to.ino, &dp, tname)?)
        } else {
            (sd, dd)
        };

        let now = self.now();
        let (mut out, mut fresh) = self.take_bufs();
        let mut staged = [(to.ino, tname, sd.ino, ftype_of(s.mode)); MAX_STAGED];
        let mut nstaged = 1;
        if let (true, Some(dd), Some(d)) = (exchange, &dd, &d) {
            staged[1] = (from.ino, fname, dd.ino, ftype_of(d.mode));
            nstaged = 2;
        }
        if let Err(e) = self.stage(&staged[..nstaged], &places, &mut out, &mut fresh) {
            self.release(&mut fresh);
            self.put_bufs(out, fresh);
            return Err(e);
        }
        self.pool.fence();
        // The fresh pages are now part of the operation; the buffer collects what to retire.
        let mut retired = fresh;
        retired.clear();
        let r = self.rename_record(
            (from, to),
            (&sd, &s),
            (dd.as_ref(), d.as_ref()),
            exchange,
            now,
            (&mut out, &mut retired),
        );
        let r = r.and_then(|()| {
            let inos = [from.ino, to.ino, sd.ino, dd.as_ref().map_or(0, |x| x.ino)];
            self.commit(&out, &inos)
        });
        if r.is_ok() {
            self.retire(&retired);
            // A directory replaced by this rename is removed like one rmdir removes.
            if let (false, Some(dd), Some(d)) = (exchange, &dd, &d)
                && d.is_dir()
            {
                self.removed_dir(dd.ino, to.ino);
            }
        }
        self.put_bufs(out, retired);
        r.map(|()| Response::Done)
    }

    /// The stores of a rename after its new entries are staged: remove the old entries,
    /// update the counters, parents and times (into `out`); what a replaced inode frees goes
    /// to `retired`.
    fn rename_record(
        &self,
        (from, to): (Handle, Handle),
        (sd, s): (&Found, &InodeData),
        (dd, d): (Option<&Found>, Option<&InodeData>),
        exchange: bool,
        now: i64,
        (out, retired): (&mut Vec<Entry>, &mut Vec<Item>),
    ) -> Result<()> {
        let moving = from.ino != to.ino;
        out.push(dir::remove_entry(sd));
        if let Some(dd) = dd {
            out.push(dir::remove_entry(dd));
        }
        let mut ch = DirChanges::default();
        if !exchange {
            ch.size.add(from.ino, -1);
            ch.size.add(to.ino, 1);
            if s.is_dir() && moving {
                ch.nlink.add(from.ino, -1);
                ch.nlink.add(to.ino, 1);
                out.push(self.set64(sd.ino, field::PARENT, to.ino));
            }
            if let (Some(dd), Some(d)) = (dd, d) {
                ch.size.add(to.ino, -1);
                if d.is_dir() {
                    ch.nlink.add(to.ino, -1);
                }
                self.drop_link(dd.ino, d, now, out, retired)?;
            }
        } else if let (Some(dd), Some(d)) = (dd, d) {
            if moving {
                if s.is_dir() {
                    ch.nlink.add(from.ino, -1);
                    ch.nlink.add(to.ino, 1);
                    out.push(self.set64(sd.ino, field::PARENT, to.ino));
                }
                if d.is_dir() {
                    ch.nlink.add(to.ino, -1);
                    ch.nlink.add(from.ino, 1);
                    out.push(self.set64(dd.ino, field::PARENT, from.ino));
                }
            }
            out.push(self.set64(dd.ino, field::CTIME, now as u64));
        }
        for (ino, delta) in ch.size.iter() {
            let cur = self.read_inode(ino).size as i64;
            out.push(self.set64(ino, field::SIZE, (cur + delta) as u64));
        }
        for (ino, delta) in ch.nlink.iter() {
            let cur = self.read_inode(ino).nlink as i64;
            out.push(self.set32(ino, field::NLINK, (cur + delta) as u32));
        }
        self.touch(from.ino, now, out);
        if moving {
            self.touch(to.ino, now, out);
        }
        out.push(self.set64(sd.ino, field::CTIME, now as u64));
        Ok(())
    }
}

//! The byte encoding of requests and replies in the daemon's shared-memory slots.
//!
//! Decoding never trusts the bytes: every length is checked against what is left, and
//! anything malformed is an EINVAL error, never a panic or a huge allocation.

use crate::error::{Error, Result};
use crate::request::{Clear, Handle, Request, Response, SetAttr, SetTime, StatFs, WriteCheck};
use crate::server::{FsckReport, ServerStats};

#[derive(Default)]
pub struct Writer(pub Vec<u8>);

impl Writer {
    fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn bytes(&mut self, b: &[u8]) {
        self.u32(b.len() as u32);
        self.0.extend_from_slice(b);
    }
    fn handle(&mut self, h: Handle) {
        self.u64(h.ino);
        self.u32(h.generation);
    }
    fn opt_u32(&mut self, v: Option<u32>) {
        self.u8(v.is_some() as u8);
        self.u32(v.unwrap_or(0));
    }
    fn time(&mut self, t: Option<SetTime>) {
        match t {
            None => self.u8(0),
            Some(SetTime::Now) => self.u8(1),
            Some(SetTime::Ns(ns)) => {
                self.u8(2);
                self.u64(ns as u64);
            }
        }
    }
    fn words(&mut self, v: &[u64]) {
        self.u32(v.len() as u32);
        for &w in v {
            self.u64(w);
        }
    }
}

pub struct Reader<'a>(&'a [u8]);

fn bad() -> Error {
    Error::with_msg(libc::EINVAL, "malformed request")
}

impl<'a> Reader<'a> {
    pub fn new(b: &'a [u8]) -> Reader<'a> {
        Reader(b)
    }
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        if self.0.len() < n {
            return Err(bad());
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Ok(a)
    }
    fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().unwrap()))
    }
    fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().unwrap()))
    }
    fn bytes(&mut self) -> Result<Vec<u8>> {
        let n = self.u32()? as usize;
        Ok(self.take(n)?.to_vec())
    }
    fn handle(&mut self) -> Result<Handle> {
        Ok(Handle {
            ino: self.u64()?,
            generation: self.u32()?,
        })
    }
    fn opt_u32(&mut self) -> Result<Option<u32>> {
        let some = self.u8()?;
        let v = self.u32()?;
        Ok((some != 0).then_some(v))
    }
    fn time(&mut self) -> Result<Option<SetTime>> {
        Ok(match self.u8()? {
            0 => None,
            1 => Some(SetTime::Now),
            2 => Some(SetTime::Ns(self.u64()? as i64)),
            _ => return Err(bad()),
        })
    }
    fn count(&mut self, each: usize) -> Result<usize> {
        let n = self.u32()? as usize;
        if n.saturating_mul(each) > self.0.len() {
            return Err(bad());
        }
        Ok(n)
    }
    fn words(&mut self) -> Result<Vec<u64>> {
        let n = self.count(8)?;
        (0..n).map(|_| self.u64()).collect()
    }
    fn pairs(&mut self) -> Result<Vec<(u64, u64)>> {
        let n = self.count(16)?;
        (0..n).map(|_| Ok((self.u64()?, self.u64()?))).collect()
    }
    fn done(&self) -> Result<()> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(bad())
        }
    }
}

/// A `Request::CommitWrite` encoded from borrowed parts (a client's write path builds no
/// request to encode it).
pub fn encode_commit_write(
    target: Handle,
    pages: &[(u64, u64)],
    end: u64,
    check: Option<&WriteCheck>,
    w: &mut Writer,
) {
    w.0.reserve(
        1 + 12
            + 4
            + pages.len() * 16
            + 8
            + 1
            + check.map_or(0, |c| {
                4 + c.old_pages.len() * 8 + 16 + 4 + c.in_place.len() * 16
            }),
    );
    w.u8(11);
    w.handle(target);
    w.u32(pages.len() as u32);
    for &(a, b) in pages {
        w.u64(a);
        w.u64(b);
    }
    w.u64(end);
    match check {
        None => w.u8(0),
        Some(c) => {
            w.u8(1);
            w.words(&c.old_pages);
            w.u64(c.size_seen);
            w.u64(c.start);
            w.u32(c.in_place.len() as u32);
            for &(a, b) in &c.in_place {
                w.u64(a);
                w.u64(b);
            }
        }
    }
}

pub fn encode_request(r: &Request, w: &mut Writer) {
    match r {
        Request::Create {
            parent,
            name,
            mode,
            excl,
            open,
        } => {
            w.u8(1);
            w.handle(*parent);
            w.bytes(name);
            w.u32(*mode);
            w.u8(*excl as u8);
            w.u8(open.map_or(0, |write| 1 + write as u8));
        }
        Request::Mkdir { parent, name, mode } => {
            w.u8(2);
            w.handle(*parent);
            w.bytes(name);
            w.u32(*mode);
        }
        Request::Symlink {
            parent,
            name,
            target,
        } => {
            w.u8(3);
            w.handle(*parent);
            w.bytes(name);
            w.bytes(target);
        }
        Request::Link {
            target,
            parent,
            name,
        } => {
            w.u8(4);
            w.handle(*target);
            w.handle(*parent);
            w.bytes(name);
        }
        Request::Unlink { parent, name, dir } => {
            w.u8(5);
            w.handle(*parent);
            w.bytes(name);
            w.u8(*dir as u8);
        }
        Request::Rename {
            from,
            from_name,
            to,
            to_name,
            flags,
        } => {
            w.u8(6);
            w.handle(*from);
            w.bytes(from_name);
            w.handle(*to);
            w.bytes(to_name);
            w.u32(*flags);
        }
        Request::SetAttr { target, attr } => {
            w.u8(7);
            w.handle(*target);
            w.opt_u32(attr.mode);
            w.opt_u32(attr.uid);
            w.opt_u32(attr.gid);
            w.u8(attr.size.is_some() as u8);
            w.u64(attr.size.unwrap_or(0));
            w.time(attr.atime);
            w.time(attr.mtime);
            w.u8(attr.chown as u8
                | (attr.written as u8) << 1
                | (attr.through_open_file as u8) << 2);
        }
        Request::Fallocate {
            target,
            offset,
            len,
            keep_size,
        } => {
            w.u8(8);
            w.handle(*target);
            w.u64(*offset);
            w.u64(*len);
            w.u8(*keep_size as u8);
        }
        Request::Reserve { pages } => {
            w.u8(9);
            w.u64(*pages);
        }
        Request::Unreserve { pages } => {
            w.u8(10);
            w.words(pages);
        }
        Request::CommitWrite {
            target,
            pages,
            end,
            check,
        } => encode_commit_write(*target, pages, *end, check.as_ref(), w),
        Request::Open { target, write } => {
            w.u8(12);
            w.handle(*target);
            w.u8(*write as u8);
        }
        Request::Close { target, write } => {
            w.u8(13);
            w.handle(*target);
            w.u8(*write as u8);
        }
        Request::Statfs => w.u8(14),
        Request::Sync => w.u8(15),
        Request::Fsck { repair } => {
            w.u8(16);
            w.u8(*repair as u8);
        }
        Request::Stats => w.u8(17),
        Request::Mapped { target, on } => {
            w.u8(18);
            w.handle(*target);
            w.u8(*on as u8);
        }
        Request::Gone { pid } => {
            w.u8(19);
            w.u32(*pid);
        }
        Request::CredsChanged => w.u8(22),
        Request::Mknod {
            parent,
            name,
            mode,
            rdev,
        } => {
            w.u8(21);
            w.handle(*parent);
            w.bytes(name);
            w.u32(*mode);
            w.u64(*rdev);
        }
        Request::Clear {
            target,
            offset,
            len,
            how,
        } => {
            w.u8(20);
            w.handle(*target);
            w.u64(*offset);
            w.u64(*len);
            w.u8(match how {
                Clear::PunchHole => 0,
                Clear::ZeroRange { keep_size: false } => 1,
                Clear::ZeroRange { keep_size: true } => 2,
            });
        }
    }
}

pub fn decode_request(b: &[u8]) -> Result<Request> {
    let mut r = Reader::new(b);
    let req = match r.u8()? {
        1 => Request::Create {
            parent: r.handle()?,
            name: r.bytes()?,
            mode: r.u32()?,
            excl: r.u8()? != 0,
            open: match r.u8()? {
                0 => None,
                1 => Some(false),
                2 => Some(true),
                _ => return Err(bad()),
            },
        },
        2 => Request::Mkdir {
            parent: r.handle()?,
            name: r.bytes()?,
            mode: r.u32()?,
        },
        3 => Request::Symlink {
            parent: r.handle()?,
            name: r.bytes()?,
            target: r.bytes()?,
        },
        4 => Request::Link {
            target: r.handle()?,
            parent: r.handle()?,
            name: r.bytes()?,
        },
        5 => Request::Unlink {
            parent: r.handle()?,
            name: r.bytes()?,
            dir: r.u8()? != 0,
        },
        6 => Request::Rename {
            from: r.handle()?,
            from_name: r.bytes()?,
            to: r.handle()?,
            to_name: r.bytes()?,
            flags: r.u32()?,
        },
        7 => {
            let target = r.handle()?;
            let mode = r.opt_u32()?;
            let uid = r.opt_u32()?;
            let gid = r.opt_u32()?;
            let has_size = r.u8()? != 0;
            let size = r.u64()?;
            let (atime, mtime) = (r.time()?, r.time()?);
            let flags = r.u8()?;
            let attr = SetAttr {
                mode,
                uid,
                gid,
                size: has_size.then_some(size),
                atime,
                mtime,
                chown: flags & 1 != 0,
                written: flags & 2 != 0,
                through_open_file: flags & 4 != 0,
            };
            Request::SetAttr { target, attr }
        }
        8 => Request::Fallocate {
            target: r.handle()?,
            offset: r.u64()?,
            len: r.u64()?,
            keep_size: r.u8()? != 0,
        },
        9 => Request::Reserve { pages: r.u64()? },
        10 => Request::Unreserve { pages: r.words()? },
        11 => {
            let target = r.handle()?;
            let pages = r.pairs()?;
            let end = r.u64()?;
            let check = match r.u8()? {
                0 => None,
                1 => Some(WriteCheck {
                    old_pages: r.words()?,
                    size_seen: r.u64()?,
                    start: r.u64()?,
                    in_place: r.pairs()?,
                }),
                _ => return Err(bad()),
            };
            Request::CommitWrite {
                target,
                pages,
                end,
                check,
            }
        }
        12 => Request::Open {
            target: r.handle()?,
            write: r.u8()? != 0,
        },
        13 => Request::Close {
            target: r.handle()?,
            write: r.u8()? != 0,
        },
        14 => Request::Statfs,
        15 => Request::Sync,
        16 => Request::Fsck {
            repair: r.u8()? != 0,
        },
        17 => Request::Stats,
        18 => Request::Mapped {
            target: r.handle()?,
            on: r.u8()? != 0,
        },
        19 => Request::Gone { pid: r.u32()? },
        20 => Request::Clear {
            target: r.handle()?,
            offset: r.u64()?,
            len: r.u64()?,
            how: match r.u8()? {
                0 => Clear::PunchHole,
                1 => Clear::ZeroRange { keep_size: false },
                2 => Clear::ZeroRange { keep_size: true },
                _ => return Err(bad()),
            },
        },
        21 => Request::Mknod {
            parent: r.handle()?,
            name: r.bytes()?,
            mode: r.u32()?,
            rdev: r.u64()?,
        },
        22 => Request::CredsChanged,
        _ => return Err(bad()),
    };
    r.done()?;
    Ok(req)
}

pub fn encode_reply(res: &Result<Response>, w: &mut Writer) {
    match res {
        Err(e) => {
            w.u8(0xFF);
            w.u32(e.errno() as u32);
            w.bytes(e.message().unwrap_or("").as_bytes());
        }
        Ok(Response::Done) => w.u8(0),
        Ok(Response::Entry { handle, created }) => {
            w.u8(1);
            w.handle(*handle);
            w.u8(*created as u8);
        }
        Ok(Response::Pages(p)) => {
            w.u8(2);
            w.words(p);
        }
        Ok(Response::StatFs(s)) => {
            w.u8(3);
            for v in [
                s.block_size,
                s.blocks,
                s.blocks_free,
                s.files,
                s.files_free,
                s.name_max,
            ] {
                w.u64(v);
            }
        }
        Ok(Response::Fsck(f)) => {
            w.u8(4);
            w.u32(f.problems.len() as u32);
            for p in &f.problems {
                w.bytes(p.as_bytes());
            }
            for v in [
                f.repaired as u64,
                f.files,
                f.dirs,
                f.symlinks,
                f.meta_pages,
                f.data_pages,
                f.specials,
            ] {
                w.u64(v);
            }
        }
        Ok(Response::Stats(s)) => {
            w.u8(5);
            w.u64(s.records);
            w.u64(s.checkpoints);
            w.u64(s.log_wraps);
        }
        Ok(Response::Committed { mapped }) => {
            w.u8(6);
            w.u8(*mapped as u8);
        }
    }
}

/// `Request::Gone { pid }` encoded without allocating (a wait in a signal handler sends it).
pub fn encode_gone(pid: u32) -> [u8; 5] {
    let p = pid.to_le_bytes();
    [19, p[0], p[1], p[2], p[3]]
}

pub fn decode_reply(b: &[u8]) -> Result<Response> {
    let mut r = Reader::new(b);
    let res = match r.u8()? {
        0xFF => {
            let errno = r.u32()? as i32;
            let msg = String::from_utf8_lossy(&r.bytes()?).into_owned();
            return Err(if msg.is_empty() {
                Error::from_errno(errno)
            } else {
                Error::with_msg(errno, msg)
            });
        }
        0 => Response::Done,
        1 => Response::Entry {
            handle: r.handle()?,
            created: r.u8()? != 0,
        },
        2 => Response::Pages(r.words()?),
        3 => Response::StatFs(StatFs {
            block_size: r.u64()?,
            blocks: r.u64()?,
            blocks_free: r.u64()?,
            files: r.u64()?,
            files_free: r.u64()?,
            name_max: r.u64()?,
        }),
        4 => {
            let n = r.count(4)?;
            let problems = (0..n)
                .map(|_| Ok(String::from_utf8_lossy(&r.bytes()?).into_owned()))
                .collect::<Result<Vec<_>>>()?;
            Response::Fsck(FsckReport {
                problems,
                repaired: r.u64()? as usize,
                files: r.u64()?,
                dirs: r.u64()?,
                symlinks: r.u64()?,
                meta_pages: r.u64()?,
                data_pages: r.u64()?,
                specials: r.u64()?,
            })
        }
        5 => Response::Stats(ServerStats {
            records: r.u64()?,
            checkpoints: r.u64()?,
            log_wraps: r.u64()?,
        }),
        6 => Response::Committed {
            mapped: match r.u8()? {
                0 => false,
                1 => true,
                _ => return Err(Error::with_msg(libc::EIO, "malformed reply")),
            },
        },
        _ => return Err(Error::with_msg(libc::EIO, "malformed reply")),
    };
    r.done()?;
    Ok(res)
}

#[cfg(test)]
#[path = "wire_tests.rs"]
mod tests;

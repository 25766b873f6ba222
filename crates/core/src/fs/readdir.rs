//! Directory iteration with cursors that stay valid while the directory changes: a cursor
//! is the hash of the last name returned (1 and 2 stand for "." and ".."), entries come in
//! hash order, so an entry that exists throughout the iteration is returned exactly once.

use super::Fs;
use crate::dir;
use crate::error::Result;
use crate::inode;
use crate::request::Handle;
use std::collections::VecDeque;

/// One directory entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirEntry {
    pub name: Vec<u8>,
    pub ino: u64,
    /// `DT_REG`, `DT_DIR`, `DT_LNK`, `DT_FIFO`, `DT_SOCK`, `DT_CHR` or `DT_BLK`.
    pub file_type: u8,
    /// Pass to `ReadDir::seek` to continue after this entry.
    pub cookie: u64,
}

impl DirEntry {
    pub fn name_str(&self) -> std::borrow::Cow<'_, str> {
        String::from_utf8_lossy(&self.name)
    }
}

pub struct ReadDir {
    fs: Fs,
    dir: Handle,
    cursor: u64,
    buf: VecDeque<DirEntry>,
}

impl ReadDir {
    pub(crate) fn new(fs: Fs, dir: Handle) -> ReadDir {
        ReadDir {
            fs,
            dir,
            cursor: 0,
            buf: VecDeque::new(),
        }
    }

    /// The cookie of the position (telldir).
    pub fn tell(&self) -> u64 {
        self.cursor
    }

    /// Continue after the entry whose cookie is given (seekdir); 0 rewinds.
    pub fn seek(&mut self, cookie: u64) {
        self.cursor = cookie;
        self.buf.clear();
    }

    fn fetch(&mut self) -> Result<()> {
        let core = &*self.fs.core;
        let _pin = core.shared.epochs.pin();
        loop {
            let s = core.shared.seqs.read_begin(self.dir.ino);
            let d = inode::read(&core.pool, &core.geo, self.dir.ino);
            let batch = dir::next_batch(&core.pool, &core.geo, d.root, self.cursor.max(2));
            if !core.shared.seqs.read_ok(self.dir.ino, s) {
                continue;
            }
            self.buf = batch?
                .into_iter()
                .map(|e| DirEntry {
                    cookie: e.hash,
                    name: e.name,
                    ino: e.ino,
                    file_type: e.ftype,
                })
                .collect();
            return Ok(());
        }
    }

    fn dot(&mut self, name: &[u8], ino: u64, cookie: u64) -> Option<Result<DirEntry>> {
        self.cursor = cookie;
        Some(Ok(DirEntry {
            name: name.to_vec(),
            ino,
            file_type: libc::DT_DIR,
            cookie,
        }))
    }
}

impl Iterator for ReadDir {
    type Item = Result<DirEntry>;

    fn next(&mut self) -> Option<Result<DirEntry>> {
        match self.cursor {
            0 => return self.dot(b".", self.dir.ino, 1),
            1 => {
                let d = self.fs.read_inode(self.dir.ino);
                return self.dot(b"..", d.parent, 2);
            }
            _ => {}
        }
        if self.buf.is_empty()
            && let Err(e) = self.fetch()
        {
            return Some(Err(e));
        }
        let e = self.buf.pop_front()?;
        self.cursor = e.cookie;
        Some(Ok(e))
    }
}

//! Namespace operations: create, mkdir, symlink, link, unlink, rmdir, rename and mknod (their
//! own modules).

use super::Server;
use crate::alloc::Item;
use crate::dir::{self, Found, Space};
use crate::error::{Error, Result};
use crate::inode::{
    InodeData, S_IFBLK, S_IFCHR, S_IFDIR, S_IFIFO, S_IFLNK, S_IFMT, S_IFREG, S_IFSOCK, field,
};
use crate::oplog::Entry;
use crate::perm::{self, Creds, W, X};
use crate::request::{Handle, Response};

mod mknod;
mod rename;

pub use mknod::mknod_kind;

pub const LINK_MAX: u32 = 65000;

/// Directories from this size make an exclusive create's inode before its lookup.
const EARLY_INODE_ENTRIES: u64 = 4096;

/// A name is one path component: 1..=255 bytes, no '/' or NUL, not "." or "..".
pub fn check_name(name: &[u8]) -> Result<()> {
    if name.len() > dir::NAME_MAX {
        return Err(Error::ENAMETOOLONG);
    }
    // One pass over the name (it is short) instead of a search for each byte.
    if name.is_empty() || name.iter().any(|&b| b == b'/' || b == 0) {
        return Err(Error::with_msg(libc::EINVAL, "invalid file name"));
    }
    if name == b"." || name == b".." {
        return Err(Error::EEXIST);
    }
    Ok(())
}

/// d_type of an inode mode.
pub fn ftype_of(mode: u32) -> u8 {
    match mode & S_IFMT {
        S_IFDIR => libc::DT_DIR,
        S_IFLNK => libc::DT_LNK,
        S_IFIFO => libc::DT_FIFO,
        S_IFCHR => libc::DT_CHR,
        S_IFBLK => libc::DT_BLK,
        S_IFSOCK => libc::DT_SOCK,
        _ => libc::DT_REG,
    }
}

/// Where a staged entry goes.
#[derive(Clone, Copy)]
enum Place {
    Leaf { leaf: u64, slot: u64 },
    NewLeaf,
}

/// What a new inode holds besides its fields (`make_node`).
#[derive(Clone, Copy)]
enum Content<'a> {
    Empty,
    /// A symlink's target.
    Target(&'a [u8]),
    /// A device's number, kept in the root word.
    Device(u64),
}

/// The most names one operation stages (rename's exchange).
const MAX_STAGED: usize = 2;

impl Server {
    /// `name` in directory `dino` (whose inode is `d`).
    fn lookup(&self, dino: u64, d: &InodeData, name: &[u8]) -> Result<Option<Found>> {
        let hash = self.prefetch_leaf(dino, d.root, name);
        let found = dir::find(&self.pool, &self.geo, d.root, name, hash)?;
        if let Some(f) = &found {
            self.dir_hints
                .borrow_mut()
                .learn(dino, d.size, hash, f.leaf);
        }
        Ok(found)
    }

    /// `lookup`, and where a new entry of the name would go (see `dir::probe`).
    fn probe(&self, dino: u64, d: &InodeData, name: &[u8]) -> Result<(Option<Found>, Space)> {
        let hash = self.prefetch_leaf(dino, d.root, name);
        self.probe_hashed(dino, d, name, hash)
    }

    /// `probe` once `prefetch_leaf` gave the name's hash.
    fn probe_hashed(
        &self,
        dino: u64,
        d: &InodeData,
        name: &[u8],
        hash: u64,
    ) -> Result<(Option<Found>, Space)> {
        let (found, space) = dir::probe(&self.pool, &self.geo, d.root, name, hash)?;
        let leaf = match (&found, &space) {
            (Some(f), _) => Some(f.leaf),
            (None, Space::Free { leaf, .. }) => Some(*leaf),
            (None, Space::Full(loc)) => Some(loc.leaf),
            (None, Space::Empty) => None,
        };
        if let Some(leaf) = leaf {
            self.dir_hints.borrow_mut().learn(dino, d.size, hash, leaf);
        }
        Ok((found, space))
    }

    /// The name's hash, after starting to fetch the two lines a large directory's lookup
    /// misses on: the header of the leaf the name was last found in (`dir::Hints`) and the
    /// inner node slot below the root (`dir::prefetch_walk`), so that they arrive together.
    fn prefetch_leaf(&self, dino: u64, root: u64, name: &[u8]) -> u64 {
        let hash = dir::name_hash(name);
        if let Some(leaf) = self.dir_hints.borrow_mut().leaf(dino, hash) {
            self.pool.prefetch(leaf);
        }
        dir::prefetch_walk(&self.pool, &self.geo, root, hash);
        hash
    }

    /// The directory a new name goes in (valid name, live directory, name not taken), and
    /// where its entry would go.
    fn parent_of_new(&self, parent: Handle, name: &[u8]) -> Result<(InodeData, Space)> {
        check_name(name)?;
        let p = self.dir_inode(parent)?;
        match self.probe(parent.ino, &p, name)? {
            (Some(_), _) => Err(Error::EEXIST),
            (None, space) => Ok((p, space)),
        }
    }

    /// Find room for each (directory, name) without staging anything; leaves that are full
    /// are split first (each split is its own atomic record), then the search starts over.
    /// Also says whether anything was split (entries may then have moved). `first` is the
    /// room for the first name if the caller has just found it (`probe`).
    fn find_places(
        &mut self,
        wants: &[(u64, &[u8])],
        mut first: Option<Space>,
    ) -> Result<([Place; MAX_STAGED], bool)> {
        assert!(wants.len() <= MAX_STAGED);
        let mut split_any = false;
        'again: loop {
            let mut claimed = [(0, 0, 0); MAX_STAGED];
            let mut nclaimed = 0;
            let mut places = [Place::NewLeaf; MAX_STAGED];
            for (&(dino, name), place) in wants.iter().zip(&mut places) {
                let space = match first.take() {
                    Some(space) => space,
                    None => {
                        let root = self.read_inode(dino).root;
                        let claimed = &claimed[..nclaimed];
                        dir::find_space(&self.pool, &self.geo, root, name, claimed)?
                    }
                };
                match space {
                    Space::Empty => *place = Place::NewLeaf,
                    Space::Free { leaf, slot } => {
                        claimed[nclaimed] = (leaf, slot, dir::slots_for(name.len()));
                        nclaimed += 1;
                        *place = Place::Leaf { leaf, slot };
                    }
                    Space::Full(loc) => {
                        self.ensure_meta(3)?;
                        let root_field = self.field(dino, field::ROOT);
                        let pool = self.pool.clone();
                        let alloc = &mut self.alloc;
                        let split = dir::split(&pool, loc, root_field, &mut || {
                            alloc.alloc_meta_page().ok_or(Error::ENOSPC)
                        })?;
                        self.pool.fence();
                        self.commit(&split.publish, &[dino])?;
                        self.retire(&[Item::MetaPage(split.old_leaf)]);
                        split_any = true;
                        continue 'again;
                    }
                }
            }
            return Ok((places, split_any));
        }
    }

    /// Write the entries found by `find_places` (unpublished) and return the stores that
    /// publish them, plus fresh pages to release if the operation fails before its commit.
    fn stage(
        &mut self,
        wants: &[(u64, &[u8], u64, u8)],
        places: &[Place],
        out: &mut Vec<Entry>,
        fresh: &mut Vec<Item>,
    ) -> Result<()> {
        for (&(dino, name, ino, ftype), &place) in wants.iter().zip(places) {
            match place {
                Place::Leaf { leaf, slot } => {
                    out.push(dir::stage_entry(&self.pool, leaf, slot, name, ino, ftype))
                }
                Place::NewLeaf => {
                    let page = self.alloc_meta()?;
                    fresh.push(Item::MetaPage(page));
                    dir::init_first_leaf(&self.pool, page, name, ino, ftype);
                    out.push(self.set64(dino, field::ROOT, page | dir::LEAF_TAG));
                }
            }
        }
        Ok(())
    }

    /// Undo the allocations of an operation that failed before its commit. A new inode
    /// was already written to its (unreachable) slot: mark the slot free again.
    ///
    /// Once writing the pool back has failed, the new inode is left as written: the failure
    /// may have come at the operation's log append, whose record can then be durable and
    /// will name the inode after a reopen. The pool takes no more changes either way, and
    /// recovery rebuilds the bitmaps from what names reach.
    fn release(&mut self, fresh: &mut Vec<Item>) {
        for it in fresh.drain(..) {
            if let Item::Inode(ino) = it
                && self.failed.is_none()
            {
                let at = self.geo.inode_addr(ino) + field::MODE;
                self.pool.store_u32(at, 0);
                self.pool.persist(at, 4);
            }
            self.alloc.release_now(it);
        }
    }

    /// Allocate and initialise (unpublished) a new inode.
    fn new_inode(
        &mut self,
        c: &Creds,
        parent: (u64, &InodeData),
        mode: u32,
        now: i64,
    ) -> Result<(Handle, InodeData)> {
        let ino = self.alloc_inode()?;
        let old_generation = self.u32_field(ino, field::GENERATION);
        let (pino, p) = parent;
        let mut mode = mode;
        let gid = if p.mode & libc::S_ISGID != 0 {
            if mode & S_IFMT == S_IFDIR {
                mode |= libc::S_ISGID;
            }
            p.gid
        } else {
            c.gid
        };
        let d = InodeData {
            mode,
            nlink: if mode & S_IFMT == S_IFDIR { 2 } else { 1 },
            uid: c.uid,
            gid,
            size: 0,
            atime: now,
            mtime: now,
            ctime: now,
            root: 0,
            height: 0,
            generation: old_generation.wrapping_add(1),
            blocks: 0,
            parent: pino,
        };
        let mut rec = [0u8; 128];
        rec[..80].copy_from_slice(&d.encode());
        let at = self.geo.inode_addr(ino);
        self.pool.write(at, &rec);
        self.pool.flush(at, 128);
        Ok((
            Handle {
                ino,
                generation: d.generation,
            },
            d,
        ))
    }

    /// Shared body of create, mkdir, symlink and mknod, once `parent_of_new` has accepted the
    /// name (`p` is the parent's inode, `space` where the name's entry would go).
    fn make_node(
        &mut self,
        c: &Creds,
        parent: Handle,
        (p, space): (&InodeData, Space),
        name: &[u8],
        mode: u32,
        (content, early): (Content, Option<(Handle, InodeData)>),
    ) -> Result<Handle> {
        let (mut out, mut fresh) = self.take_bufs();
        if let Some((h, _)) = &early {
            fresh.push(Item::Inode(h.ino));
        }
        let result = (|| {
            perm::check(c, p, W | X)?;
            let is_dir = mode & S_IFMT == S_IFDIR;
            if is_dir && p.nlink >= LINK_MAX {
                return Err(Error::EMLINK);
            }
            let (places, _) = self.find_places(&[(parent.ino, name)], Some(space))?;
            let now = self.now();
            let (h, mut d) = match early {
                Some(made) => made,
                None => {
                    let made = self.new_inode(c, (parent.ino, p), mode, now)?;
                    fresh.push(Item::Inode(made.0.ino));
                    made
                }
            };
            match content {
                Content::Empty => {}
                Content::Target(t) => self.stage_symlink_target(h.ino, &mut d, t, &mut fresh)?,
                Content::Device(rdev) => self.stage_device_number(h.ino, &mut d, rdev),
            }
            self.stage(
                &[(parent.ino, name, h.ino, ftype_of(mode))],
                &places,
                &mut out,
                &mut fresh,
            )?;
            self.pool.fence();
            out.push(self.set64(parent.ino, field::SIZE, p.size + 1));
            if is_dir {
                out.push(self.set32(parent.ino, field::NLINK, p.nlink + 1));
            }
            self.touch(parent.ino, now, &mut out);
            self.commit(&out, &[parent.ino, h.ino])?;
            Ok(h)
        })();
        if result.is_err() {
            self.release(&mut fresh);
        }
        self.put_bufs(out, fresh);
        result
    }

    fn stage_symlink_target(
        &mut self,
        ino: u64,
        d: &mut InodeData,
        t: &[u8],
        fresh: &mut Vec<Item>,
    ) -> Result<()> {
        let at = self.geo.inode_addr(ino);
        d.size = t.len() as u64;
        if t.len() as u64 <= field::INLINE_LEN {
            self.pool.write(at + field::INLINE, t);
        } else {
            let page = self.alloc_meta()?;
            fresh.push(Item::MetaPage(page));
            let mut img = vec![0u8; crate::layout::PAGE as usize];
            img[..t.len()].copy_from_slice(t);
            self.pool.copy_nt(page, &img);
            d.root = page;
        }
        self.pool.write(at, &d.encode());
        self.pool.flush(at, 128);
        Ok(())
    }

    pub(super) fn create(
        &mut self,
        c: &Creds,
        parent: Handle,
        name: &[u8],
        mode: u32,
        excl: bool,
    ) -> Result<Response> {
        check_name(name)?;
        let p = self.dir_inode(parent)?;
        let mode = S_IFREG | (mode & 0o7777);
        let hash = self.prefetch_leaf(parent.ino, p.root, name);
        // In a large directory the lookup waits for memory (an inner node's slot, then the
        // leaf's header: architecture.md item 19): an exclusive create, which almost always
        // makes its inode, makes it now, while those lines arrive.
        let early = if excl && p.size >= EARLY_INODE_ENTRIES {
            let now = self.now();
            Some(self.new_inode(c, (parent.ino, &p), mode, now)?)
        } else {
            None
        };
        let probed = self.probe_hashed(parent.ino, &p, name, hash);
        // Made for nothing (the name exists, or the lookup failed): give it back.
        if let Some((h, _)) = early
            && !matches!(probed, Ok((None, _)))
        {
            self.release(&mut vec![Item::Inode(h.ino)]);
        }
        let (found, space) = probed?;
        if let Some(d) = found {
            if excl {
                return Err(Error::EEXIST);
            }
            let e = self.read_inode(d.ino);
            return Ok(Response::Entry {
                handle: Handle {
                    ino: d.ino,
                    generation: e.generation,
                },
                created: false,
            });
        }
        let handle = self.make_node(c, parent, (&p, space), name, mode, (Content::Empty, early))?;
        Ok(Response::Entry {
            handle,
            created: true,
        })
    }

    pub(super) fn mkdir(
        &mut self,
        c: &Creds,
        parent: Handle,
        name: &[u8],
        mode: u32,
    ) -> Result<Response> {
        let (p, space) = self.parent_of_new(parent, name)?;
        let mode = S_IFDIR | (mode & 0o1777);
        let handle = self.make_node(c, parent, (&p, space), name, mode, (Content::Empty, None))?;
        Ok(Response::Entry {
            handle,
            created: true,
        })
    }

    pub(super) fn symlink(
        &mut self,
        c: &Creds,
        parent: Handle,
        name: &[u8],
        target: &[u8],
    ) -> Result<Response> {
        if target.is_empty() {
            return Err(Error::ENOENT);
        }
        if target.len() >= libc::PATH_MAX as usize || target.contains(&0) {
            return Err(Error::ENAMETOOLONG);
        }
        let (p, space) = self.parent_of_new(parent, name)?;
        let handle = self.make_node(
            c,
            parent,
            (&p, space),
            name,
            S_IFLNK | 0o777,
            (Content::Target(target), None),
        )?;
        Ok(Response::Entry {
            handle,
            created: true,
        })
    }

    pub(super) fn link(
        &mut self,
        c: &Creds,
        target: Handle,
        parent: Handle,
        name: &[u8],
    ) -> Result<Response> {
        check_name(name)?;
        let t = self.inode(target)?;
        let p = self.dir_inode(parent)?;
        if self.lookup(parent.ino, &p, name)?.is_some() {
            return Err(Error::EEXIST);
        }
        if self.protected_hardlinks {
            perm::check_link_source(c, &t)?;
        }
        if t.is_dir() {
            return Err(Error::EPERM);
        }
        perm::check(c, &p, W | X)?;
        if t.nlink == 0 {
            return Err(Error::ENOENT);
        }
        if t.nlink >= LINK_MAX {
            return Err(Error::EMLINK);
        }
        let (places, _) = self.find_places(&[(parent.ino, name)], None)?;
        let now = self.now();
        let (mut out, mut fresh) = self.take_bufs();
        if let Err(e) = self.stage(
            &[(parent.ino, name, target.ino, ftype_of(t.mode))],
            &places,
            &mut out,
            &mut fresh,
        ) {
            self.release(&mut fresh);
            self.put_bufs(out, fresh);
            return Err(e);
        }
        self.pool.fence();
        out.push(self.set32(target.ino, field::NLINK, t.nlink + 1));
        out.push(self.set64(target.ino, field::CTIME, now as u64));
        out.push(self.set64(parent.ino, field::SIZE, p.size + 1));
        self.touch(parent.ino, now, &mut out);
        let r = self.commit(&out, &[parent.ino, target.ino]);
        self.put_bufs(out, fresh);
        r?;
        Ok(Response::Entry {
            handle: target,
            created: true,
        })
    }

    /// Drop one name of `ino`; if that was its last name and nobody has it open, also free
    /// it in the same record and add what to retire after the commit to `retired`.
    fn drop_link(
        &self,
        ino: u64,
        d: &InodeData,
        now: i64,
        out: &mut Vec<Entry>,
        retired: &mut Vec<Item>,
    ) -> Result<()> {
        let nlink = if d.is_dir() {
            0
        } else {
            d.nlink.saturating_sub(1)
        };
        if nlink == 0 && !self.in_use(ino) {
            // The slot is freed by this record: its link count and ctime are dead (every
            // reader tests the mode first; an inode made in the slot gets a whole record).
            return self.stage_free((ino, d), out, retired);
        }
        out.push(self.set32(ino, field::NLINK, nlink));
        out.push(self.set64(ino, field::CTIME, now as u64));
        Ok(())
    }

    pub(super) fn unlink(
        &mut self,
        c: &Creds,
        parent: Handle,
        name: &[u8],
        rmdir: bool,
    ) -> Result<Response> {
        if name == b"." {
            return Err(Error::EINVAL);
        }
        if name == b".." {
            return Err(Error::ENOTEMPTY);
        }
        check_name(name)?;
        let p = self.dir_inode(parent)?;
        let de = self.lookup(parent.ino, &p, name)?.ok_or(Error::ENOENT)?;
        let t = self.read_inode(de.ino);
        if rmdir {
            if !t.is_dir() {
                return Err(Error::ENOTDIR);
            }
            if t.size != 0 {
                return Err(Error::ENOTEMPTY);
            }
        } else if t.is_dir() {
            return Err(Error::EISDIR);
        }
        perm::check(c, &p, W | X)?;
        perm::check_sticky(c, &p, &t)?;
        let now = self.now();
        let (mut out, mut retired) = self.take_bufs();
        out.push(dir::remove_entry(&de));
        out.push(self.set64(parent.ino, field::SIZE, p.size - 1));
        if rmdir {
            out.push(self.set32(parent.ino, field::NLINK, p.nlink - 1));
        }
        self.touch(parent.ino, now, &mut out);
        let r = self
            .drop_link(de.ino, &t, now, &mut out, &mut retired)
            .and_then(|()| self.commit(&out, &[parent.ino, de.ino]));
        if r.is_ok() {
            self.retire(&retired);
            if rmdir {
                // Its number may come back as another directory: no stale hints for it.
                self.dir_hints.borrow_mut().forget(de.ino);
                self.removed_dir(de.ino, parent.ino);
            }
        }
        self.put_bufs(out, retired);
        r.map(|()| Response::Done)
    }
}

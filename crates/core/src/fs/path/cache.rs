//! A per-thread cache of whole path walks, in DRAM, droppable at any time.
//!
//! A walk's result depends only on the path, where it starts, the caller's credentials and
//! the state of each directory it looked a component up in, and each such lookup read that
//! state between two equal readings of the directory's sequence counter. The server makes
//! every change to a directory (an entry added or removed, a rename, a mode or owner
//! change, the directory freed) odd-then-even on that counter. So an entry is still exact
//! while every directory it depends on shows the counter value recorded when the walk read
//! it; a rename, unlink or rmdir committed since, by any handle or process sharing the
//! counters, changed one of them and the entry is not used. The object found is read again
//! (under its own counter, generation checked) on every hit.

use super::walk::{At, Base};
use crate::fs::{Core, Fs};
use crate::perm::Creds;
use std::cell::RefCell;
use std::sync::{Arc, Weak};

/// Directories a cached walk may depend on (deeper walks are not cached).
const MAX_DEPS: usize = 16;
/// Entries per thread (direct-mapped by a hash of the path).
const SLOTS: usize = 64;
/// Longer paths are not cached.
const MAX_PATH: usize = 256;

/// The directories a walk read, with the counter value each lookup was validated with.
pub(crate) struct Deps {
    n: usize,
    deps: [(u64, u64); MAX_DEPS],
}

impl Deps {
    pub(crate) fn new() -> Deps {
        Deps {
            n: 0,
            deps: [(0, 0); MAX_DEPS],
        }
    }

    pub(crate) fn push(&mut self, ino: u64, seq: u64) {
        if let Some(d) = self.deps.get_mut(self.n) {
            *d = (ino, seq);
        }
        self.n += 1;
    }

    fn fits(&self) -> bool {
        self.n <= MAX_DEPS
    }
}

/// What a walk was asked.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct Query {
    pub base: Base,
    pub follow: bool,
    pub stay_inside: bool,
}

struct Slot {
    query: Query,
    path: Vec<u8>,
    deps: Deps,
    found: At,
}

struct Cache {
    /// The pool and credentials the entries were made for. The weak reference keeps the
    /// allocation, so no other pool's `Core` can take its address while this lives.
    core: Weak<Core>,
    creds: Arc<Creds>,
    slots: Vec<Option<Slot>>,
}

thread_local! {
    static CACHE: RefCell<Option<Cache>> = const { RefCell::new(None) };
}

#[inline]
fn slot_of(path: &[u8]) -> usize {
    use std::hash::Hasher;
    // Eight bytes a step; paths are not chosen to collide, and a collision only evicts.
    let mut h = crate::fasthash::FastHasher::default();
    h.write(path);
    h.finish() as usize % SLOTS
}

impl Cache {
    #[inline]
    fn is_for(&self, fs: &Fs) -> bool {
        std::ptr::eq(self.core.as_ptr(), Arc::as_ptr(&fs.core))
            && Arc::ptr_eq(&self.creds, &fs.creds)
    }
}

impl Fs {
    /// The object a walk with `query` of `path` found, if a cached walk is still exact.
    #[inline]
    pub(crate) fn cached_walk(&self, query: Query, path: &[u8]) -> Option<At> {
        let seqs = &self.core.shared.seqs;
        // The lookup answers in two registers: the inode (0, reserved and never a file's:
        // no answer) and the generation plus one (0: none). An `Option<At>` came back
        // through memory, stored field by field and loaded whole, and that load waited for
        // the stores to reach the cache.
        // No answer once the thread's cache is destroyed: exit handlers (git's, removing its
        // lock files) walk after the thread-locals are gone, and `with` panicked there.
        let (ino, generation) = CACHE
            .try_with(|c| -> (u64, u64) {
                let found = (|| {
                    // Busy only if a signal handler walks while this thread was filling it.
                    let c = c.try_borrow().ok()?;
                    let c = c.as_ref().filter(|c| c.is_for(self))?;
                    let s = c.slots[slot_of(path)].as_ref()?;
                    if s.query != query || s.path != path {
                        return None;
                    }
                    let fresh = s.deps.deps[..s.deps.n]
                        .iter()
                        .all(|&(ino, seq)| seqs.read_ok(ino, seq));
                    fresh.then_some(s.found)
                })();
                found.map_or((0, 0), |at| {
                    (at.ino, at.generation.map_or(0, |g| u64::from(g) + 1))
                })
            })
            .unwrap_or((0, 0));
        (ino != 0).then(|| At {
            ino,
            generation: generation.checked_sub(1).map(|g| g as u32),
        })
    }

    /// Remember a successful walk.
    pub(crate) fn cache_walk(&self, query: Query, path: &[u8], deps: Deps, found: At) {
        if !deps.fits() || path.len() > MAX_PATH {
            return;
        }
        // Not remembered once the thread's cache is destroyed (see `cached_walk`).
        let _ = CACHE.try_with(|c| {
            let Ok(mut c) = c.try_borrow_mut() else {
                return;
            };
            if !c.as_ref().is_some_and(|c| c.is_for(self)) {
                *c = Some(Cache {
                    core: Arc::downgrade(&self.core),
                    creds: self.creds.clone(),
                    slots: (0..SLOTS).map(|_| None).collect(),
                });
            }
            let Some(c) = c.as_mut() else { return };
            match &mut c.slots[slot_of(path)] {
                Some(s) => {
                    s.query = query;
                    s.path.clear();
                    s.path.extend_from_slice(path);
                    s.deps = deps;
                    s.found = found;
                }
                empty => {
                    *empty = Some(Slot {
                        query,
                        path: path.to_vec(),
                        deps,
                        found,
                    })
                }
            }
        });
    }
}

//! Files the shim keeps beside a pool in /dev/shm for what the kernel must share between
//! processes: a lock file per inode (record locks and flocks are the kernel's, taken on it),
//! a backing file per inode with a shared writable mapping, and a kernel FIFO per FIFO node
//! of the pool that some process opened (the pipe its readers and writers meet in). Each is
//! named after the pool (a hash of its canonical path), the inode and its generation, so
//! every process that reaches the pool, in-process or through the daemon, finds the same
//! file.
//!
//! The server removes a mapping file when it counts no mapping of the inode any more,
//! having written back what a process killed while mapping left in it
//! (`server/backing.rs`); nobody removes a lock file or a FIFO when its inode goes away
//! (only the server knows when no process still has the inode open, and a FIFO's ends are
//! the kernel's, which the server never sees). All of a path's files go when a pool is made
//! anew there (`Fs::mkfs`). When the pool is mounted (`Fs::open`, `engram serve`), the
//! files of inodes that are no longer live (freed, or the slot reused with another
//! generation) are removed: no process can open such an inode again, so no new holder can
//! come to contend with one still holding the file. A lock file or FIFO of a live inode
//! stays, even with no process using it: a process that outlived the pool's last user (a
//! forked child holding a flock or a pipe's end, a client of a daemon since restarted) may
//! still hold it, and a new file under its name would split that inode's locks, or its
//! pipe, in two.

use crate::inode::{InodeData, field};
use crate::layout::Geometry;
use engram_pmem::Pool;
use std::path::{Path, PathBuf};

/// Where the files are made.
pub const DIR: &str = "/dev/shm";

/// The number naming a pool's files: FNV-1a of its canonical path.
pub fn pool_id(canonical: &Path) -> u64 {
    canonical
        .as_os_str()
        .as_encoded_bytes()
        .iter()
        .fold(0xcbf2_9ce4_8422_2325, |h, &b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        })
}

/// The lock file of inode `ino` (generation `generation`) of pool `pool`.
pub fn lock_file(pool: u64, ino: u64, generation: u32) -> String {
    format!("{DIR}/{}{ino}-{generation}", prefix(LOCK, pool))
}

/// Whether `path` (as /proc/self/fd shows it) names a lock file of some pool.
pub fn is_lock_file(path: &[u8]) -> bool {
    path.strip_prefix(DIR.as_bytes())
        .and_then(|r| r.strip_prefix(b"/"))
        .is_some_and(|name| {
            name.starts_with(LOCK.as_bytes()) && name.get(LOCK.len()) == Some(&b'-')
        })
}

/// The backing file of a shared writable mapping of inode `ino` of pool `pool`.
pub fn map_file(pool: u64, ino: u64, generation: u32) -> String {
    format!("{DIR}/{}{ino}-{generation}", prefix(MAP, pool))
}

/// The kernel FIFO that stands for FIFO node `ino` of pool `pool`: every open of the node
/// through the shim opens it (made by the first), so its readers and writers meet there.
pub fn fifo_file(pool: u64, ino: u64, generation: u32) -> String {
    format!("{DIR}/{}{ino}-{generation}", prefix(FIFO, pool))
}

/// The mode bit of a mapping file that holds the file's contents plus its mappings' stores
/// (set by the shim once it has filled it, cleared by the server when writes may no longer
/// reach it): only such a file is written back when its last holder died
/// (`server/backing.rs`).
pub const MAP_CURRENT: u32 = libc::S_ISVTX;

/// The mode bit of a mapping file whose first mapper finished filling it from the file (set
/// with `MAP_CURRENT`, never cleared but by a refill): one without it was left half filled
/// by a process that died filling it, and no mapping may join it. The owner's execute bit:
/// the kernel clears set-user-ID (tried first) at every write by a process without
/// CAP_FSETID.
pub const MAP_FILLED: u32 = libc::S_IXUSR;

/// `mode` without `MAP_CURRENT`: a mapping file no longer to be written back.
pub fn unmarked(mode: u32) -> u32 {
    mode & 0o7777 & !MAP_CURRENT
}

/// Whether a mapping file of mode `mode` is marked current (`MAP_CURRENT`).
pub fn map_file_is_current(mode: u32) -> bool {
    mode & MAP_CURRENT != 0
}

/// Whether a mapping file may be written back into its file: a regular file with one name,
/// that nobody but its owner may write, made by a user who may write the file (owner
/// `fuid`, group `fgid`, mode `fmode`) itself. /dev/shm is open to every user: a file put
/// there under the right name by one who may not write the file must not reach it. (The
/// maker's supplementary groups are not known: only its file's group stands for them.)
pub fn map_file_trusted(st: &libc::stat, fuid: u32, fgid: u32, fmode: u32) -> bool {
    let regular = st.st_mode & libc::S_IFMT == libc::S_IFREG;
    let private = st.st_mode & 0o022 == 0;
    let maker_may_write = st.st_uid == 0
        || if st.st_uid == fuid {
            fmode & 0o200 != 0
        } else if st.st_gid == fgid {
            fmode & 0o020 != 0
        } else {
            fmode & 0o002 != 0
        };
    regular && st.st_nlink == 1 && private && maker_may_write
}

const LOCK: &str = "engram-lock";
const MAP: &str = "engram-map";
const FIFO: &str = "engram-fifo";

fn prefix(kind: &str, pool: u64) -> String {
    format!("{kind}-{pool:016x}-")
}

/// The lock, mapping and FIFO files in /dev/shm of the pool at `path` (canonical if it no
/// longer exists).
pub fn list(path: &Path) -> Vec<PathBuf> {
    let id = match std::fs::canonicalize(path) {
        Ok(canonical) => pool_id(&canonical),
        Err(_) => pool_id(path),
    };
    list_with(&[prefix(LOCK, id), prefix(MAP, id), prefix(FIFO, id)])
}

/// The inode and generation of each mapping file of pool `id`.
pub fn map_files_of(id: u64) -> Vec<(u64, u32)> {
    list_with(&[prefix(MAP, id)])
        .iter()
        .filter_map(|f| inode_of(f.file_name()?.as_encoded_bytes()))
        .collect()
}

/// The files in `DIR` whose names start with one of `prefixes`.
fn list_with(prefixes: &[String]) -> Vec<PathBuf> {
    let Ok(dir) = std::fs::read_dir(DIR) else {
        return Vec::new();
    };
    dir.flatten()
        .filter(|e| {
            let name = e.file_name();
            prefixes
                .iter()
                .any(|p| name.as_encoded_bytes().starts_with(p.as_bytes()))
        })
        .map(|e| e.path())
        .collect()
}

/// Remove the lock, mapping and FIFO files of pool `id` (mounted as `pool`) whose inode is
/// no longer live; returns the inode of each mapping file left (one listing of the
/// directory for all, at every mount).
pub fn remove_dead(id: u64, pool: &Pool, geo: &Geometry) -> Vec<u64> {
    let map = prefix(MAP, id);
    let mut maps = Vec::new();
    for f in list_with(&[prefix(LOCK, id), map.clone(), prefix(FIFO, id)]) {
        let Some(name) = f.file_name().map(|n| n.as_encoded_bytes()) else {
            continue;
        };
        match inode_of(name) {
            Some((ino, generation)) if is_live(pool, geo, ino, generation) => {
                if name.starts_with(map.as_bytes()) {
                    maps.push(ino);
                }
            }
            _ => {
                let _ = std::fs::remove_file(&f);
            }
        }
    }
    maps
}

/// The inode and generation a side file's name ends with ("...-INO-GEN").
fn inode_of(name: &[u8]) -> Option<(u64, u32)> {
    let text = std::str::from_utf8(name).ok()?;
    let (rest, generation) = text.rsplit_once('-')?;
    let (_, ino) = rest.rsplit_once('-')?;
    Some((ino.parse().ok()?, generation.parse().ok()?))
}

/// Whether inode `ino` of the mounted pool is in use with this generation.
pub(crate) fn is_live(pool: &Pool, geo: &Geometry, ino: u64, generation: u32) -> bool {
    if ino == 0 || ino >= geo.inode_count {
        return false;
    }
    let d = InodeData::decode(pool.slice(geo.inode_addr(ino), field::INLINE));
    !d.is_free() && d.generation == generation
}

/// Remove every lock, mapping and FIFO file of the pool at `path` (`list`); returns how
/// many.
/// Only for a pool that no process uses any more (the benchmark's and the tests' pools,
/// after their programs have exited).
pub fn remove_all(path: &Path) -> usize {
    list(path)
        .iter()
        .filter(|f| std::fs::remove_file(f).is_ok())
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn removes_the_pools_files_and_no_others() {
        let dir = std::env::temp_dir().join(format!("engram-sidefiles-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (ours, theirs) = (dir.join("ours.pool"), dir.join("theirs.pool"));
        for p in [&ours, &theirs] {
            std::fs::write(p, b"").unwrap();
        }
        let id = |p: &Path| pool_id(&std::fs::canonicalize(p).unwrap());
        let mine = [
            lock_file(id(&ours), 5, 1),
            map_file(id(&ours), 7, 2),
            fifo_file(id(&ours), 9, 3),
        ];
        let other = lock_file(id(&theirs), 5, 1);
        for f in mine.iter().chain([&other]) {
            std::fs::write(f, b"").unwrap();
        }
        let removed = remove_all(&ours);
        let left: Vec<bool> = mine.iter().map(|f| Path::new(f).exists()).collect();
        let other_left = Path::new(&other).exists();
        let _ = std::fs::remove_file(&other);
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(left, [false, false, false]);
        assert!(other_left, "another pool's lock file was removed");
        assert!(removed >= 3);
    }

    #[test]
    fn names_give_back_their_inode() {
        assert_eq!(inode_of(lock_file(7, 42, 9).as_bytes()), Some((42, 9)));
        assert_eq!(inode_of(map_file(7, 1, 0).as_bytes()), Some((1, 0)));
        assert_eq!(inode_of(fifo_file(7, 12, 5).as_bytes()), Some((12, 5)));
        assert_eq!(inode_of(b"engram-lock-00ab-x-1"), None);
        assert_eq!(inode_of(b"engram-lock-00ab-5-99999999999"), None);
    }
}

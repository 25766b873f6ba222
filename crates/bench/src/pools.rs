//! Where the EngramFS pools of a run live, and the tmpfs baseline with them: a private
//! tmpfs with 2 MiB pages (`huge=within_size`) mounted for the run, the stand-in for a DAX
//! mapping of persistent memory, which the kernel maps with 2 MiB entries
//! (docs/architecture.md). /dev/shm gives 4 KiB pages, so a pool there pays TLB misses and
//! page faults that neither real persistent memory nor the kernel's own tmpfs metadata
//! (reached through the huge-page direct map) pay. The tmpfs baseline runs on the same
//! mount: its large writes are several times faster on 2 MiB pages. Without root, or if the
//! mount fails, both go to /dev/shm, said in one line.
//!
//! `ENGRAM_BENCH_POOL_DIR=DIR` (a directory on a tmpfs) puts them in DIR instead (e.g.
//! /dev/shm, to compare).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex, Weak};

/// The directory of the run's pools while a `PoolDir` is alive.
static CURRENT: Mutex<Weak<PoolDir>> = Mutex::new(Weak::new());

pub const SHM: &str = "/dev/shm";

pub struct PoolDir {
    dir: PathBuf,
    /// Whether `dir` is a tmpfs this process mounted (unmounted and removed on drop).
    mounted: bool,
    /// Detaches the mount should the process be killed first.
    _on_signal: Option<crate::signals::Registered>,
}

impl PoolDir {
    /// The pool directory of the run in progress, set up (and its line printed) if no run
    /// holds one: every pool of the run goes to the same place; dropping the last handle
    /// unmounts it, on error paths too.
    pub fn acquire() -> Arc<PoolDir> {
        let mut current = CURRENT.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(d) = current.upgrade() {
            return d;
        }
        let d = Arc::new(PoolDir::set_up());
        *current = Arc::downgrade(&d);
        d
    }

    fn set_up() -> PoolDir {
        if let Some(dir) = std::env::var_os("ENGRAM_BENCH_POOL_DIR") {
            let dir = PathBuf::from(dir);
            println!(
                "EngramFS pools and the tmpfs baseline: {} (ENGRAM_BENCH_POOL_DIR)",
                dir.display()
            );
            return PoolDir {
                dir,
                mounted: false,
                _on_signal: None,
            };
        }
        let dir = PathBuf::from(format!(
            "{SHM}/engram-bench-{}-pools.mnt",
            std::process::id()
        ));
        let on_signal = crate::signals::mount(&dir);
        // Free 2 MiB blocks for the pools' pages before they are made (see
        // `targets::engram::mkfs_populated`).
        compact_memory();
        match mount_huge(&dir) {
            Ok(()) => {
                println!(
                    "EngramFS pools and the tmpfs baseline: {} (a tmpfs with 2 MiB pages \
                     mounted for this run, as DAX maps persistent memory)",
                    dir.display()
                );
                PoolDir {
                    dir,
                    mounted: true,
                    _on_signal: on_signal,
                }
            }
            Err(e) => {
                let _ = std::fs::remove_dir(&dir);
                println!(
                    "EngramFS pools and the tmpfs baseline: {SHM} (4 KiB pages; no huge-page \
                     tmpfs: {e})"
                );
                PoolDir {
                    dir: PathBuf::from(SHM),
                    mounted: false,
                    _on_signal: None,
                }
            }
        }
    }
}

/// Whether the pools now go to a huge-page tmpfs this process mounted (not /dev/shm or an
/// `ENGRAM_BENCH_POOL_DIR`).
pub fn huge_pages() -> bool {
    let current = CURRENT.lock().unwrap_or_else(|e| e.into_inner());
    current.upgrade().is_some_and(|d| d.mounted)
}

/// The directory for pools now: the current run's, or /dev/shm outside a run.
pub fn current() -> PathBuf {
    let current = CURRENT.lock().unwrap_or_else(|e| e.into_inner());
    current
        .upgrade()
        .map_or_else(|| PathBuf::from(SHM), |d| d.dir.clone())
}

/// Bytes of the shared file mapping at `addr` (`len` bytes) that are mapped with 4 KiB
/// pages rather than 2 MiB ones, from /proc/self/smaps; None if it cannot tell (no such
/// file, or the mapping is not listed).
pub fn small_page_bytes(addr: *const u8, len: u64) -> Option<u64> {
    let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
    let start = format!("{:x}-", addr as usize);
    let mut lines = smaps.lines().skip_while(|l| !l.starts_with(&start));
    lines.next()?;
    let kib = |name: &str, l: &str| -> Option<u64> {
        let v = l.strip_prefix(name)?.trim().strip_suffix("kB")?;
        v.trim().parse::<u64>().ok().map(|k| k << 10)
    };
    let (mut rss, mut huge) = (None, None);
    // The mapping's fields run up to the next mapping's header (a line without a colon
    // after its first word).
    for l in lines.take_while(|l| {
        l.split_whitespace()
            .next()
            .is_some_and(|w| w.ends_with(':'))
    }) {
        rss = rss.or_else(|| kib("Rss:", l));
        huge = huge.or_else(|| kib("ShmemPmdMapped:", l));
    }
    Some(rss?.min(len).saturating_sub(huge?))
}

/// Ask the kernel to compact free memory into 2 MiB blocks (root only); true if it was
/// asked.
pub fn compact_memory() -> bool {
    std::fs::write("/proc/sys/vm/compact_memory", "1").is_ok()
}

/// Mount a tmpfs with huge pages on `dir` (created), capped at the size of /dev/shm so that
/// whatever fits there fits here. `within_size`: files of at least 2 MiB (every pool: they
/// are sized up front) get 2 MiB pages, small files keep 4 KiB ones.
fn mount_huge(dir: &Path) -> Result<(), String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err("mounting one needs root".into());
    }
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let size = shm_size().unwrap_or(16 << 30);
    crate::targets::posix::run(
        Command::new("mount")
            .args(["-t", "tmpfs", "-o"])
            .arg(format!("huge=within_size,size={size},mode=1777"))
            .arg("engram-bench-pools")
            .arg(dir),
    )
}

/// Bytes /dev/shm may hold.
fn shm_size() -> Option<u64> {
    // SAFETY: statvfs is plain old data; all-zero is a valid value.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: a NUL-terminated path and a valid out-pointer.
    let r = unsafe { libc::statvfs(c"/dev/shm".as_ptr(), &mut st) };
    (r == 0).then(|| st.f_blocks * st.f_frsize)
}

impl Drop for PoolDir {
    fn drop(&mut self) {
        if self.mounted {
            let umount = |lazy: bool| {
                let mut cmd = Command::new("umount");
                if lazy {
                    // Still in use (a pool left open): detach now, freed when closed.
                    cmd.arg("-l");
                }
                crate::targets::posix::run(cmd.arg(&self.dir))
            };
            let _ = umount(false).or_else(|_| umount(true));
            let _ = std::fs::remove_dir(&self.dir);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pool file on /dev/shm (4 KiB pages), faulted in: every byte of it counts as small
    /// pages, and a range of it that is not mapped is not found.
    #[test]
    fn small_pages_of_a_mapping_are_counted() {
        /// Removes the file however the test ends.
        struct Remove(PathBuf);
        impl Drop for Remove {
            fn drop(&mut self) {
                let _ = std::fs::remove_file(&self.0);
            }
        }
        let path = PathBuf::from(format!("{SHM}/engram-bench-smaps-{}", std::process::id()));
        let _remove = Remove(path.clone());
        let len = 4u64 << 20;
        std::fs::File::create(&path).unwrap().set_len(len).unwrap();
        let pool = engram_pmem::Pool::open(&path).unwrap();
        // Written through the mapping: every page faulted in, whatever the kernel offers.
        pool.fill_zero(0, len);
        let forced = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/shmem_enabled")
            .is_ok_and(|s| s.contains("[force]"));
        if !forced {
            // /dev/shm has 4 KiB pages unless the kernel forces huge ones on every tmpfs.
            assert_eq!(small_page_bytes(pool.as_ptr(), len), Some(len));
        }
        assert!(small_page_bytes(pool.as_ptr(), len).is_some_and(|n| n <= len));
        // SAFETY: only the address is formed (one page past the mapping's start), never
        // dereferenced.
        let inside = unsafe { pool.as_ptr().add(4096) };
        assert_eq!(small_page_bytes(inside, len), None);
    }
}

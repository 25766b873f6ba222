//! Tests of where and how pool files are mapped: 2 MiB aligned, the slack of the
//! reservation given back, and PMD-mapped on a tmpfs that has huge pages.

use std::ffi::CString;
use std::path::{Path, PathBuf};

use crate::Pool;
use crate::map::HUGE_PAGE;

/// The (start, end) of every mapping of this process, and its smaps block.
fn smaps() -> Vec<(usize, usize, String)> {
    let text = std::fs::read_to_string("/proc/self/smaps").unwrap();
    let mut out: Vec<(usize, usize, String)> = Vec::new();
    for line in text.lines() {
        let range = line
            .split_whitespace()
            .next()
            .and_then(|r| r.split_once('-'));
        let parsed = range.and_then(|(a, b)| {
            Some((
                usize::from_str_radix(a, 16).ok()?,
                usize::from_str_radix(b, 16).ok()?,
            ))
        });
        match parsed {
            Some((a, b)) => out.push((a, b, String::new())),
            _ => {
                if let Some(last) = out.last_mut() {
                    last.2.push_str(line);
                    last.2.push('\n');
                }
            }
        }
    }
    out
}

/// The smaps block of the mapping that starts at `ptr`; asserts it is exactly `len` long.
fn mapping_of(ptr: *mut u8, len: u64) -> String {
    let start = ptr as usize;
    let (_, end, block) = smaps()
        .into_iter()
        .find(|m| m.0 == start)
        .expect("the pool's mapping is listed");
    assert_eq!(end - start, len as usize, "the mapping is exactly the pool");
    block
}

fn kib(block: &str, field: &str) -> u64 {
    block
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

fn check_aligned(dir: &Path) {
    for size in [4096, (3 << 20) + 4096, 8 << 20] {
        let path = dir.join(format!("engram-pmem-align-{}-{size}", std::process::id()));
        let pools = [
            Pool::create(&path, size).unwrap(),
            Pool::open(&path).unwrap(),
        ];
        for pool in &pools {
            assert_eq!(pool.as_ptr() as usize % HUGE_PAGE, 0, "size {size}");
            mapping_of(pool.as_ptr(), size);
            pool.store_u64(size - 8, 5);
        }
        assert_eq!(pools[1].load_u64(size - 8), 5);
        drop(pools);
        std::fs::remove_file(&path).unwrap();
    }
}

#[test]
fn file_pools_are_mapped_2mib_aligned() {
    check_aligned(Path::new("/dev/shm"));
    check_aligned(&std::env::temp_dir());
}

/// A tmpfs with huge pages mounted on a fresh directory; unmounted and removed on drop.
struct HugeTmpfs(PathBuf);

impl HugeTmpfs {
    /// None when this process may not mount (not root) or the kernel refuses.
    fn mount() -> Option<HugeTmpfs> {
        let dir = std::env::temp_dir().join(format!("engram-pmem-huge-{}", std::process::id()));
        std::fs::create_dir_all(&dir).ok()?;
        let target = CString::new(dir.to_str()?).ok()?;
        // SAFETY: mount(2) with NUL-terminated strings that outlive the call.
        let r = unsafe {
            libc::mount(
                c"tmpfs".as_ptr(),
                target.as_ptr(),
                c"tmpfs".as_ptr(),
                0,
                c"huge=within_size,size=64m".as_ptr().cast(),
            )
        };
        if r != 0 {
            let _ = std::fs::remove_dir(&dir);
            return None;
        }
        Some(HugeTmpfs(dir))
    }
}

impl Drop for HugeTmpfs {
    fn drop(&mut self) {
        let target = CString::new(self.0.to_str().unwrap()).unwrap();
        // SAFETY: unmounting the tmpfs this value mounted (lazily, should a file be open).
        unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) };
        let _ = std::fs::remove_dir(&self.0);
    }
}

#[test]
fn a_pool_on_a_huge_page_tmpfs_is_pmd_mapped() {
    let Some(fs) = HugeTmpfs::mount() else {
        eprintln!("skipped: cannot mount a tmpfs with huge pages here (needs root)");
        return;
    };
    let size = 16 << 20;
    let pool = Pool::create(&fs.0.join("pool"), size).unwrap();
    for off in (0..size).step_by(4096) {
        pool.store_u64(off, off);
    }
    let block = mapping_of(pool.as_ptr(), size);
    let pmd = kib(&block, "ShmemPmdMapped") + kib(&block, "FilePmdMapped");
    assert!(pmd >= 2048, "no 2 MiB entries:\n{block}");
}

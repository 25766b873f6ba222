//! Backing files of shared mappings left in /dev/shm by a process that died mapping a file
//! (server/backing.rs): at the next open of the pool, one marked current that no process
//! holds is written back into its file page by page and removed; one not marked (its fill
//! never finished) is removed without touching the file; one a process still holds is left
//! and unmarked, never to be written back; one made by a user who may not write the file
//! is never written back.

mod common;

use common::{PoolFile, assert_clean};
use engram_core::{Fs, OpenOptions, sidefiles};
use std::os::fd::AsRawFd;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

const PAGE: usize = 4096;
const SIZE: usize = 3 * PAGE + 100;

/// A pool holding /f (SIZE bytes of b'a'), closed; and the name of /f's backing file.
fn pool_with_file(tag: &str) -> (PoolFile, String) {
    let p = PoolFile::new(tag);
    let fs = p.mkfs_open(16 << 20);
    fs.write_file("/f", &[b'a'; SIZE]).unwrap();
    let h = fs.open_file("/f", &OpenOptions::new()).unwrap().handle();
    fs.unmount().unwrap();
    let id = sidefiles::pool_id(&std::fs::canonicalize(p.path()).unwrap());
    (p, sidefiles::map_file(id, h.ino, h.generation))
}

/// A backing file image: the file, with stores in its second page and past its end.
fn image() -> Vec<u8> {
    let mut img = vec![b'a'; 4 * PAGE];
    img[SIZE..].fill(0);
    img[5000..5010].copy_from_slice(b"ZZZZZZZZZZ");
    img[SIZE + 50..SIZE + 60].copy_from_slice(b"QQQQQQQQQQ");
    img
}

fn leave(name: &str, img: &[u8], mode: u32) {
    std::fs::write(name, img).unwrap();
    std::fs::set_permissions(name, std::fs::Permissions::from_mode(mode)).unwrap();
}

#[test]
fn a_current_backing_file_nobody_holds_is_written_back_and_removed() {
    let (p, name) = pool_with_file("current");
    leave(&name, &image(), 0o600 | sidefiles::MAP_CURRENT);
    let fs = p.open();
    let mut want = vec![b'a'; SIZE];
    want[5000..5010].copy_from_slice(b"ZZZZZZZZZZ");
    assert_eq!(fs.read_file("/f").unwrap(), want);
    assert!(!Path::new(&name).exists(), "the backing file was left");
    // Only the changed page was replaced: the file holds four data pages, as before.
    assert_eq!(fs.stat("/f").unwrap().blocks * 512, 4 * PAGE as u64);
    // The store past the end of file did not become file data.
    fs.truncate("/f", 4 * PAGE as u64).unwrap();
    assert!(fs.read_file("/f").unwrap()[SIZE..].iter().all(|&b| b == 0));
    assert_clean(&fs);
}

#[test]
fn a_backing_file_not_marked_current_is_removed_and_not_written_back() {
    let (p, name) = pool_with_file("unmarked");
    leave(&name, &image(), 0o600);
    let fs = p.open();
    assert_eq!(fs.read_file("/f").unwrap(), vec![b'a'; SIZE]);
    assert!(!Path::new(&name).exists(), "the backing file was left");
}

#[test]
fn a_backing_file_a_process_holds_is_left_unmarked_and_not_written_back() {
    let (p, name) = pool_with_file("held");
    leave(&name, &image(), 0o600 | sidefiles::MAP_CURRENT);
    let held = std::fs::File::open(&name).unwrap();
    // SAFETY: flock on a descriptor this test owns.
    assert_eq!(unsafe { libc::flock(held.as_raw_fd(), libc::LOCK_SH) }, 0);
    let fs = p.open();
    assert_eq!(fs.read_file("/f").unwrap(), vec![b'a'; SIZE]);
    let mode = std::fs::metadata(&name).unwrap().permissions().mode();
    assert!(
        !sidefiles::map_file_is_current(mode),
        "still marked: {mode:o}"
    );
    drop(fs);
    drop(held);
    // Once nobody holds it, the next open removes it, still without writing it back.
    let fs = Fs::open(p.path(), &Default::default()).unwrap();
    assert_eq!(fs.read_file("/f").unwrap(), vec![b'a'; SIZE]);
    assert!(!Path::new(&name).exists(), "the backing file was left");
}

/// `pool_with_file`, with a backing file marked current but owned by another user (nobody),
/// who may not write /f; None (the test skipped) unless this runs as root.
fn planted_by_another_user(tag: &str) -> Option<(PoolFile, String)> {
    // SAFETY: geteuid has no failure.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: making a file of another user needs root");
        return None;
    }
    let (p, name) = pool_with_file(tag);
    leave(&name, &image(), 0o600 | sidefiles::MAP_CURRENT);
    std::os::unix::fs::chown(&name, Some(65534), Some(65534)).unwrap();
    Some((p, name))
}

/// A file planted in /dev/shm under the backing file's name by a user who may not write the
/// file is never written back into it; one that others may write is not even touched.
#[test]
fn a_backing_file_made_by_someone_who_may_not_write_the_file_is_not_written_back() {
    let Some((p, name)) = planted_by_another_user("planted") else {
        return;
    };
    let fs = p.open();
    assert_eq!(fs.read_file("/f").unwrap(), vec![b'a'; SIZE]);
    drop(fs);
    leave(&name, &image(), 0o666 | sidefiles::MAP_CURRENT);
    let fs = p.open();
    assert_eq!(fs.read_file("/f").unwrap(), vec![b'a'; SIZE]);
    assert!(
        Path::new(&name).exists(),
        "a file others may write was acted on"
    );
    let _ = std::fs::remove_file(&name);
}

/// What `Fs::open` could not write back is reported through `Options::warn` when one is
/// given (the shim's, which writes with the real `write(2)`), not printed to standard error.
#[test]
fn what_open_could_not_write_back_goes_to_the_warn_option() {
    static WARNED: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    fn record(line: &str) {
        WARNED.lock().unwrap().push(line.to_string());
    }
    let Some((p, name)) = planted_by_another_user("warned") else {
        return;
    };
    let opts = engram_core::Options {
        warn: Some(record),
        ..Default::default()
    };
    let fs = Fs::open(p.path(), &opts).unwrap();
    assert_eq!(fs.read_file("/f").unwrap(), vec![b'a'; SIZE]);
    let warned = WARNED.lock().unwrap().clone();
    assert_eq!(warned.len(), 1, "{warned:?}");
    assert!(
        warned[0].contains(&name) && warned[0].contains("may not write"),
        "{warned:?}"
    );
    drop(fs);
    let _ = std::fs::remove_file(&name);
}

/// The mount says which number names its side files: the canonical path's, whatever path
/// the pool was opened by (the shim takes it from there); a pool opened from memory has none.
#[test]
fn the_mount_names_its_side_files_after_the_canonical_path() {
    let (p, _) = pool_with_file("named");
    let canonical = std::fs::canonicalize(p.path()).unwrap();
    let link = canonical.with_extension("link");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(&canonical, &link).unwrap();
    let fs = Fs::open(&link, &Default::default()).unwrap();
    assert_eq!(
        fs.mount_info().side_files,
        Some(sidefiles::pool_id(&canonical))
    );
    drop(fs);
    std::fs::remove_file(&link).unwrap();
    let memory = engram_pmem::Pool::anonymous(16 << 20).unwrap();
    let geo = engram_core::layout::Geometry::for_size(16 << 20).unwrap();
    engram_core::mkfs::format(&memory, &geo);
    let fs = Fs::open_pool(memory, &Default::default()).unwrap();
    assert_eq!(fs.mount_info().side_files, None);
}

/// A dead process's stores in 64 pages are written back with only a few pages free: in
/// smaller commits once a whole batch finds no room, each freeing the pages it replaced
/// (found by probing LMDB with `writemap` on a full pool: the stores were dropped).
#[test]
fn stores_are_written_back_into_a_nearly_full_pool() {
    let p = PoolFile::new("full");
    let fs = p.mkfs_open(16 << 20);
    fs.write_file("/f", &vec![b'o'; 64 * PAGE]).unwrap();
    let h = fs.open_file("/f", &OpenOptions::new()).unwrap().handle();
    fs.write_file("/small", &vec![b's'; 8 * PAGE]).unwrap();
    let fill = fs
        .open_file("/fill", &OpenOptions::new().write(true).create(true))
        .unwrap();
    let chunk = vec![b'x'; 16 * PAGE];
    let mut at = 0u64;
    while fill.write_at(&chunk, at).is_ok() {
        at += chunk.len() as u64;
    }
    while fill.write_at(&chunk[..PAGE], at).is_ok() {
        at += PAGE as u64;
    }
    drop(fill);
    fs.unlink("/small").unwrap();
    fs.unmount().unwrap();
    let id = sidefiles::pool_id(&std::fs::canonicalize(p.path()).unwrap());
    let name = sidefiles::map_file(id, h.ino, h.generation);
    leave(
        &name,
        &vec![b'N'; 64 * PAGE],
        0o600 | sidefiles::MAP_CURRENT,
    );
    let fs = p.open();
    assert!(
        fs.read_file("/f").unwrap().iter().all(|&b| b == b'N'),
        "the stores did not reach the file"
    );
    assert!(!Path::new(&name).exists(), "the backing file was left");
    assert_clean(&fs);
}

use engram_core::{Fs, OpenOptions, Options};

fn pool_path(name: &str) -> std::path::PathBuf {
    let p = std::path::PathBuf::from(format!(
        "/dev/shm/engram-test-{}-{name}",
        std::process::id()
    ));
    let _ = std::fs::remove_file(&p);
    p
}

#[test]
fn smoke() {
    let p = pool_path("smoke");
    Fs::mkfs(&p, 64 << 20).unwrap();
    let fs = Fs::open(&p, &Options::default()).unwrap();
    fs.mkdir("/a", 0o755).unwrap();
    fs.write_file("/a/f", b"hello world").unwrap();
    assert_eq!(fs.read_file("/a/f").unwrap(), b"hello world");
    let f = fs
        .open_file("/a/f", &OpenOptions::new().write(true))
        .unwrap();
    f.write_at(b"HELLO", 0).unwrap();
    f.write_at(&vec![7u8; 10000], 20000).unwrap();
    drop(f);
    let data = fs.read_file("/a/f").unwrap();
    assert_eq!(data.len(), 30000);
    assert_eq!(&data[..11], b"HELLO world");
    assert!(data[11..20000].iter().all(|&b| b == 0));
    assert!(data[20000..].iter().all(|&b| b == 7));
    for i in 0..500 {
        fs.write_file(format!("/a/n{i}"), format!("{i}").as_bytes())
            .unwrap();
    }
    let names: Vec<_> = fs
        .read_dir("/a")
        .unwrap()
        .map(|e| e.unwrap().name_str().into_owned())
        .collect();
    assert_eq!(names.len(), 503);
    fs.rename("/a/n1", "/a/renamed").unwrap();
    fs.symlink("a/renamed", "/sl").unwrap();
    assert_eq!(fs.read_file("/sl").unwrap(), b"1");
    let r = fs.fsck(false).unwrap();
    assert!(r.is_clean(), "{:?}", r.problems);
    fs.unmount().unwrap();
    let fs = Fs::open(&p, &Options::default()).unwrap();
    assert!(fs.mount_info().was_clean);
    assert_eq!(fs.read_file("/a/n7").unwrap(), b"7");
    assert_eq!(fs.read_file("/sl").unwrap(), b"1");
    let r = fs.fsck(false).unwrap();
    assert!(r.is_clean(), "{:?}", r.problems);
    drop(fs);
    std::fs::remove_file(&p).unwrap();
}

/// A pool made anew at a path takes none of the side files an earlier pool there left in
/// /dev/shm (lock and mapping files of its inodes), and another pool's stay.
#[test]
fn mkfs_removes_the_side_files_an_earlier_pool_at_the_path_left() {
    use engram_core::sidefiles;
    let path = pool_path("sidefiles");
    let other = pool_path("sidefiles-other");
    Fs::mkfs(&path, 16 << 20).unwrap();
    Fs::mkfs(&other, 16 << 20).unwrap();
    let id = |p: &std::path::Path| sidefiles::pool_id(&std::fs::canonicalize(p).unwrap());
    let old = [
        sidefiles::lock_file(id(&path), 2, 1),
        sidefiles::map_file(id(&path), 3, 1),
    ];
    let kept = sidefiles::lock_file(id(&other), 2, 1);
    for f in old.iter().chain([&kept]) {
        std::fs::write(f, b"").unwrap();
    }
    Fs::mkfs(&path, 16 << 20).unwrap();
    let gone = old.iter().all(|f| !std::path::Path::new(f).exists());
    let stays = std::path::Path::new(&kept).exists();
    let _ = std::fs::remove_file(&kept);
    let _ = std::fs::remove_file(&path);
    let _ = std::fs::remove_file(&other);
    assert!(gone, "the earlier pool's side files are gone");
    assert!(stays, "another pool's side file stays");
}

//! Everything a tree holds (data, links, attributes) reads the same after a remount.

use super::{MIB, creat};
use crate::common::{assert_clean, new_fs, pattern, remount};
use engram_core::{Fs, Metadata, OpenOptions, SetTime};
use std::collections::BTreeMap;

#[derive(Debug, PartialEq)]
struct Snap {
    meta: Metadata,
    content: Vec<u8>,
}

fn snapshot(fs: &Fs, dir: &str, out: &mut BTreeMap<String, Snap>) {
    for e in fs.read_dir(if dir.is_empty() { "/" } else { dir }).unwrap() {
        let e = e.unwrap();
        if e.name == b"." || e.name == b".." {
            continue;
        }
        let path = format!("{dir}/{}", e.name_str());
        let mut meta = fs.lstat(&path).unwrap();
        meta.atime_ns = 0;
        let content = if meta.is_symlink() {
            fs.readlink(&path).unwrap()
        } else if meta.is_file() {
            fs.read_file(&path).unwrap()
        } else {
            Vec::new()
        };
        let is_dir = meta.is_dir();
        out.insert(path.clone(), Snap { meta, content });
        if is_dir {
            snapshot(fs, &path, out);
        }
    }
}

#[test]
fn everything_persists_across_remount() {
    let (p, fs) = new_fs("persist", 64);
    fs.mkdir("/a", 0o750).unwrap();
    fs.mkdir("/a/b", 0o700).unwrap();
    fs.mkdir("/a/b/c", 0o755).unwrap();
    for (i, len) in [0usize, 1, 4095, 4096, 4097, (MIB + 17) as usize]
        .into_iter()
        .enumerate()
    {
        fs.write_file(format!("/a/f{i}"), &pattern(100 + i as u64, len))
            .unwrap();
    }
    let f = fs.open_file("/a/b/sparse", &creat()).unwrap();
    f.write_at(b"x", 7 * MIB + 3).unwrap();
    f.allocate(MIB, 8192, true).unwrap();
    drop(f);
    fs.symlink("../f1", "/a/b/link").unwrap();
    fs.symlink("z".repeat(3000), "/a/longlink").unwrap();
    fs.link("/a/f2", "/a/b/c/hard").unwrap();
    fs.chown("/a/f3", Some(5), Some(6)).unwrap();
    fs.chmod("/a/f4", 0o2640).unwrap();
    fs.utimens(
        "/a/f5",
        Some(SetTime::Ns(123_456_789)),
        Some(SetTime::Ns(987_654_321)),
    )
    .unwrap();
    fs.rename("/a/f0", "/a/b/c/renamed").unwrap();
    fs.mkdir("/gone", 0o755).unwrap();
    fs.write_file("/gone/x", b"x").unwrap();
    fs.unlink("/gone/x").unwrap();
    fs.rmdir("/gone").unwrap();
    for i in 0..200 {
        fs.write_file(format!("/a/b/many{i}"), format!("{i}").as_bytes())
            .unwrap();
    }
    for i in (0..200).step_by(3) {
        fs.unlink(format!("/a/b/many{i}")).unwrap();
    }
    let append = fs
        .open_file(
            "/a/appended",
            &OpenOptions::new().write(true).append(true).create(true),
        )
        .unwrap();
    for i in 0..100 {
        append.write_next(format!("line {i}\n").as_bytes()).unwrap();
    }
    drop(append);
    let mut before = BTreeMap::new();
    snapshot(&fs, "", &mut before);
    assert_eq!(before.len(), 3 + 5 + 1 + 1 + 1 + 1 + 1 + 133 + 1);
    assert_clean(&fs);
    let fs = remount(&p, fs);
    let mut after = BTreeMap::new();
    snapshot(&fs, "", &mut after);
    assert_eq!(
        before.keys().collect::<Vec<_>>(),
        after.keys().collect::<Vec<_>>()
    );
    for (k, v) in &before {
        assert!(
            after[k] == *v,
            "{k} differs after remount: {:?} vs {:?}",
            v.meta,
            after[k].meta
        );
    }
    assert_eq!(fs.stat("/").unwrap().nlink, 3);
    assert_clean(&fs);
    // And a second cycle, after changing something.
    fs.write_file("/a/f1", b"changed").unwrap();
    let fs = remount(&p, fs);
    assert_eq!(fs.read_file("/a/b/link").unwrap(), b"changed");
    assert_clean(&fs);
}

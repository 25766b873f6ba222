//! Reading directories: dots first, every name once, changes while iterating, cookies.

use super::names;
use crate::common::{assert_clean, new_fs, remount};
use engram_core::{Fs, OpenOptions};
use std::collections::{BTreeMap, HashSet};

#[test]
fn readdir_dots_first_and_every_name_once() {
    let (p, fs) = new_fs("readdir", 64);
    fs.mkdir("/d", 0o755).unwrap();
    let d_ino = fs.stat("/d").unwrap().ino;
    let root = fs.stat("/").unwrap().ino;
    let all: Vec<_> = fs.read_dir("/d").unwrap().map(|e| e.unwrap()).collect();
    assert_eq!(all.len(), 2);
    assert_eq!(
        (all[0].name.as_slice(), all[0].ino, all[0].file_type),
        (&b"."[..], d_ino, libc::DT_DIR)
    );
    assert_eq!(
        (all[1].name.as_slice(), all[1].ino, all[1].file_type),
        (&b".."[..], root, libc::DT_DIR)
    );
    let r: Vec<_> = fs.read_dir("/").unwrap().map(|e| e.unwrap()).collect();
    assert_eq!((r[0].name.as_slice(), r[0].ino), (&b"."[..], root));
    assert_eq!(
        (r[1].name.as_slice(), r[1].ino),
        (&b".."[..], root),
        "the root is its own parent"
    );

    let mut want = BTreeMap::new();
    for i in 0..5000 {
        let name = format!("entry-{i:05}-{}", "x".repeat(i % 70));
        let path = format!("/d/{name}");
        let t = match i % 10 {
            0 => {
                fs.mkdir(&path, 0o755).unwrap();
                libc::DT_DIR
            }
            1 => {
                fs.symlink("target", &path).unwrap();
                libc::DT_LNK
            }
            _ => {
                drop(
                    fs.open_file(&path, &OpenOptions::new().write(true).create_new(true))
                        .unwrap(),
                );
                libc::DT_REG
            }
        };
        want.insert(name.into_bytes(), t);
    }
    let check = |fs: &Fs| {
        let all: Vec<_> = fs.read_dir("/d").unwrap().map(|e| e.unwrap()).collect();
        assert_eq!(all[0].name, b".");
        assert_eq!(all[1].name, b"..");
        let mut got = BTreeMap::new();
        for e in &all[2..] {
            assert!(
                got.insert(e.name.clone(), e.file_type).is_none(),
                "{} returned twice",
                e.name_str()
            );
            let path = [&b"/d/"[..], &e.name].concat();
            assert_eq!(e.ino, fs.lstat(&path).unwrap().ino);
        }
        assert_eq!(got.len(), want.len());
        assert!(got == want, "readdir differs from what was created");
    };
    check(&fs);
    assert_eq!(fs.stat("/d").unwrap().nlink, 2 + 500);
    let fs = remount(&p, fs);
    check(&fs);
    assert_clean(&fs);
}

#[test]
fn readdir_during_changes() {
    let (_p, fs) = new_fs("readdirchg", 32);
    fs.mkdir("/d", 0o755).unwrap();
    let n = 2000;
    for i in 0..n {
        fs.write_file(format!("/d/k{i}"), b"").unwrap();
    }
    // Even names stay throughout; odd names are removed and new ones added while iterating.
    let mut seen = HashSet::new();
    let mut removed = 0;
    let mut added = 0;
    let mut possible: HashSet<String> = (0..n).map(|i| format!("k{i}")).collect();
    for (count, e) in fs.read_dir("/d").unwrap().enumerate() {
        let name = e.unwrap().name_str().into_owned();
        assert!(seen.insert(name.clone()), "{name} returned twice");
        if name != "." && name != ".." {
            assert!(possible.contains(&name), "{name} never existed");
        }
        if count % 3 == 0 && removed < n {
            fs.unlink(format!("/d/k{}", removed + 1)).unwrap();
            removed += 2;
        }
        if count % 2 == 0 {
            let new = format!("new{added}");
            fs.write_file(format!("/d/{new}"), b"").unwrap();
            possible.insert(new);
            added += 1;
        }
    }
    for i in (0..n).step_by(2) {
        assert!(
            seen.contains(&format!("k{i}")),
            "k{i} existed throughout but was not returned"
        );
    }
    assert!(added > 100 && removed > 100);
    assert_clean(&fs);
}

#[test]
fn readdir_seek_to_cookie() {
    let (_p, fs) = new_fs("readdirseek", 16);
    fs.mkdir("/d", 0o755).unwrap();
    for i in 0..300 {
        fs.write_file(format!("/d/f{i}"), b"").unwrap();
    }
    let all: Vec<_> = fs.read_dir("/d").unwrap().map(|e| e.unwrap()).collect();
    assert_eq!(all.len(), 302);
    for k in [0usize, 1, 2, 57, 150, 300, 301] {
        let mut rd = fs.read_dir("/d").unwrap();
        for _ in 0..=k {
            rd.next().unwrap().unwrap();
        }
        assert_eq!(rd.tell(), all[k].cookie);
        let mut again = fs.read_dir("/d").unwrap();
        again.seek(all[k].cookie);
        let rest: Vec<_> = again.map(|e| e.unwrap().name).collect();
        let want: Vec<_> = all[k + 1..].iter().map(|e| e.name.clone()).collect();
        assert_eq!(rest, want, "continuing after entry {k}");
    }
    // Seeking to 0 rewinds.
    let mut rd = fs.read_dir("/d").unwrap();
    rd.by_ref().take(10).for_each(drop);
    rd.seek(0);
    assert_eq!(rd.next().unwrap().unwrap().name, b".");
    // A saved cookie still works after its entry is removed.
    let mut rd = fs.read_dir("/d").unwrap();
    rd.seek(all[100].cookie);
    let name = String::from_utf8(all[100].name.clone()).unwrap();
    fs.unlink(format!("/d/{name}")).unwrap();
    let rest: Vec<_> = rd.map(|e| e.unwrap().name).collect();
    let want: Vec<_> = all[101..].iter().map(|e| e.name.clone()).collect();
    assert_eq!(rest, want);
    assert_clean(&fs);
}

/// Names whose hashes share their first 9 bits land in one slot of the directory trie's
/// root; enough of them force a second level of inner nodes, which readdir must walk fully.
#[test]
fn readdir_deep_trie_returns_every_name() {
    let (_p, fs) = new_fs("readdirdeep", 32);
    fs.mkdir("/d", 0o755).unwrap();
    let mut want = HashSet::new();
    let mut per_slot = BTreeMap::<u64, usize>::new();
    let mut i = 0u64;
    while per_slot.values().sum::<usize>() < 3 * 150 {
        let name = format!("n{i}");
        i += 1;
        let slot = engram_core::dir::name_hash(name.as_bytes()) >> 54;
        if (7..10).contains(&slot) && per_slot.get(&slot).copied().unwrap_or(0) < 150 {
            *per_slot.entry(slot).or_default() += 1;
            fs.write_file(format!("/d/{name}"), b"").unwrap();
            want.insert(name);
        }
    }
    for j in 0..300 {
        let name = format!("spread{j}");
        fs.write_file(format!("/d/{name}"), b"").unwrap();
        want.insert(name);
    }
    let got = names(&fs, "/d");
    let set: HashSet<_> = got.iter().cloned().collect();
    assert_eq!(set.len(), got.len(), "a name was returned twice");
    let missing: Vec<_> = want.difference(&set).collect();
    assert!(
        missing.is_empty(),
        "{} of {} names missing, e.g. {:?}",
        missing.len(),
        want.len(),
        &missing[..3.min(missing.len())]
    );
    assert_clean(&fs);
}

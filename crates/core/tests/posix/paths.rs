//! Path resolution: odd path forms, name and path length limits, and the `*at` functions.

use super::{creat, dir_opts, names, ro};
use crate::common::{assert_clean, assert_errno, new_fs};
use libc::{EINVAL, EISDIR, ENAMETOOLONG, ENOENT, ENOTDIR};

#[test]
fn path_forms() {
    let (_p, fs) = new_fs("paths", 16);
    fs.mkdir("/a", 0o755).unwrap();
    fs.mkdir("/a/b", 0o755).unwrap();
    fs.write_file("/a/b/f", b"data").unwrap();
    let root = fs.stat("/").unwrap().ino;
    let b = fs.stat("/a/b").unwrap().ino;
    assert_eq!(fs.stat("/.").unwrap().ino, root);
    assert_eq!(fs.stat("/..").unwrap().ino, root);
    assert_eq!(fs.stat("/../../..").unwrap().ino, root);
    assert_eq!(fs.stat(".").unwrap().ino, root);
    assert_eq!(fs.stat("a/b").unwrap().ino, b);
    assert_eq!(fs.stat("//a///b/").unwrap().ino, b);
    assert_eq!(fs.stat("/a/./b/../b/.").unwrap().ino, b);
    assert_eq!(fs.stat("/a/b/../../a/b").unwrap().ino, b);
    assert_eq!(fs.read_file("//a//b//f").unwrap(), b"data");
    assert_eq!(fs.read_file("/../a/b/f").unwrap(), b"data");

    // A trailing slash (or "/.") needs a directory.
    assert_errno(fs.stat("/a/b/f/"), ENOTDIR);
    assert_errno(fs.stat("/a/b/f/."), ENOTDIR);
    assert_errno(fs.stat("/a/b/f/x"), ENOTDIR);
    assert_errno(fs.open_file("/a/b/f/", &ro()), ENOTDIR);
    assert_errno(fs.open_file("/a/b/f/", &creat()), EISDIR);
    assert_errno(fs.stat("/a/b/f/.."), ENOTDIR);

    // Name and path length limits.
    let n255 = "n".repeat(255);
    let n256 = "n".repeat(256);
    fs.write_file(format!("/a/{n255}"), b"long name").unwrap();
    assert_eq!(fs.read_file(format!("/a/{n255}")).unwrap(), b"long name");
    assert!(names(&fs, "/a").contains(&n255));
    assert_errno(fs.open_file(format!("/a/{n256}"), &creat()), ENAMETOOLONG);
    assert_errno(fs.stat(format!("/a/{n256}")), ENAMETOOLONG);
    assert_errno(fs.stat(format!("/a/{n256}/x")), ENAMETOOLONG);
    assert_errno(fs.mkdir(format!("/{n256}"), 0o755), ENAMETOOLONG);
    assert_errno(fs.symlink("x", format!("/{n256}")), ENAMETOOLONG);
    assert_errno(fs.rename("/a/b/f", format!("/a/{n256}")), ENAMETOOLONG);
    assert_errno(fs.link("/a/b/f", format!("/a/{n256}")), ENAMETOOLONG);
    let p4096 = format!("{}a/b/f", "./".repeat(2045));
    assert_eq!(p4096.len(), 4095);
    assert_eq!(
        fs.read_file(&p4096).unwrap(),
        b"data",
        "a path of 4095 bytes resolves"
    );
    let p4096 = format!("/{p4096}");
    assert_eq!(p4096.len(), 4096);
    assert_errno(fs.stat(&p4096), ENAMETOOLONG);
    assert_errno(fs.open_file(&p4096, &creat()), ENAMETOOLONG);
    assert_errno(fs.mkdir(&p4096, 0o755), ENAMETOOLONG);
    assert_errno(fs.unlink(&p4096), ENAMETOOLONG);

    // Empty paths and NUL bytes.
    assert_errno(fs.stat(""), ENOENT);
    assert_errno(fs.open_file("", &creat()), ENOENT);
    assert_errno(fs.mkdir("", 0o755), ENOENT);
    assert_errno(fs.unlink(""), ENOENT);
    assert_errno(fs.rename("", "/x"), ENOENT);
    assert_errno(fs.rename("/a/b/f", ""), ENOENT);
    assert_errno(fs.stat(b"/a/b\0/f"), EINVAL);
    assert_errno(fs.open_file(b"/x\0y", &creat()), EINVAL);
    assert_errno(fs.mkdir(b"/x\0y", 0o755), EINVAL);
    assert_errno(fs.symlink("t", b"/x\0y"), EINVAL);
    assert!(!names(&fs, "/").iter().any(|n| n.starts_with('x')));
    // Arbitrary non-UTF-8 bytes are fine in names.
    let odd: &[u8] = b"/a/\xff\xfe name \x01";
    fs.write_file(odd, b"odd").unwrap();
    assert_eq!(fs.read_file(odd).unwrap(), b"odd");
    assert!(
        fs.read_dir("/a")
            .unwrap()
            .any(|e| e.unwrap().name == b"\xff\xfe name \x01")
    );
    assert_clean(&fs);
}

#[test]
fn at_functions_resolve_against_a_directory_handle() {
    let (_p, fs) = new_fs("at", 16);
    fs.mkdir("/d", 0o755).unwrap();
    fs.mkdir("/e", 0o755).unwrap();
    let d = fs.open_file("/d", &dir_opts()).unwrap();
    let e = fs.open_file("/e", &dir_opts()).unwrap();

    let f = fs.open_at(Some(&d), b"x", &creat()).unwrap();
    f.write_at(b"at", 0).unwrap();
    drop(f);
    assert_eq!(fs.read_file("/d/x").unwrap(), b"at");
    assert_eq!(
        fs.stat_at(Some(&d), b"x", true).unwrap().ino,
        fs.stat("/d/x").unwrap().ino
    );
    assert_eq!(fs.stat_at(Some(&d), b".", true).unwrap().ino, d.ino());
    assert_eq!(
        fs.stat_at(Some(&d), b"..", true).unwrap().ino,
        fs.stat("/").unwrap().ino
    );
    assert_eq!(fs.stat_at(Some(&d), b"../e", true).unwrap().ino, e.ino());
    // An absolute path ignores the handle.
    assert_eq!(fs.stat_at(Some(&d), b"/e", true).unwrap().ino, e.ino());

    fs.mkdir_at(Some(&d), b"sub", 0o700).unwrap();
    assert_eq!(fs.stat("/d/sub").unwrap().permissions(), 0o700);
    fs.symlink_at(b"x", Some(&d), b"sl").unwrap();
    assert_eq!(fs.readlink_at(Some(&d), b"sl").unwrap(), b"x");
    assert_eq!(
        fs.stat_at(Some(&d), b"sl", true).unwrap().ino,
        fs.stat("/d/x").unwrap().ino
    );
    assert!(fs.stat_at(Some(&d), b"sl", false).unwrap().is_symlink());
    fs.link_at(Some(&d), b"x", Some(&e), b"y", false).unwrap();
    assert_eq!(fs.stat("/e/y").unwrap().nlink, 2);
    // link_at with follow (AT_SYMLINK_FOLLOW) links the target.
    fs.link_at(Some(&d), b"sl", Some(&e), b"z", true).unwrap();
    assert_eq!(fs.stat("/e/z").unwrap().nlink, 3);
    assert!(fs.lstat("/e/z").unwrap().is_file());
    fs.rename_at(Some(&d), b"x", Some(&e), b"moved", 0).unwrap();
    assert_eq!(fs.read_file("/e/moved").unwrap(), b"at");
    fs.chmod_at(Some(&e), b"moved", 0o600, true).unwrap();
    assert_eq!(fs.stat("/e/moved").unwrap().permissions(), 0o600);
    fs.access_at(Some(&e), b"moved", 4 | 2, true).unwrap();
    fs.unlink_at(Some(&e), b"moved", false).unwrap();
    fs.unlink_at(Some(&d), b"sub", true).unwrap();
    assert_errno(fs.unlink_at(Some(&d), b"sl", true), ENOTDIR);
    assert_errno(fs.stat("/d/sub"), ENOENT);
    let rd: Vec<_> = d
        .read_dir()
        .unwrap()
        .map(|e| e.unwrap().name_str().into_owned())
        .collect();
    assert_eq!(rd, [".", "..", "sl"]);

    // The handle follows the directory when it is renamed.
    fs.rename("/d", "/d-renamed").unwrap();
    assert_eq!(fs.readlink_at(Some(&d), b"sl").unwrap(), b"x");
    fs.mkdir_at(Some(&d), b"after", 0o755).unwrap();
    assert!(fs.stat("/d-renamed/after").unwrap().is_dir());
    fs.unlink_at(Some(&d), b"after", true).unwrap();

    // A file handle is not a directory.
    let file = fs.open_file("/e/y", &ro()).unwrap();
    assert_errno(fs.stat_at(Some(&file), b"x", true), ENOTDIR);
    assert_errno(fs.open_at(Some(&file), b"x", &creat()), ENOTDIR);
    assert_errno(file.read_dir(), ENOTDIR);

    // A removed directory still open: lookups in it work, creating in it is ENOENT.
    fs.mkdir("/gone", 0o755).unwrap();
    let gone = fs.open_file("/gone", &dir_opts()).unwrap();
    fs.rmdir("/gone").unwrap();
    assert_eq!(fs.stat_at(Some(&gone), b".", true).unwrap().ino, gone.ino());
    assert_errno(fs.open_at(Some(&gone), b"new", &creat()), ENOENT);
    assert_errno(fs.mkdir_at(Some(&gone), b"new", 0o755), ENOENT);
    drop((d, e, file, gone));
    assert_clean(&fs);
}

/// A front end that joins paths itself (the shim: a relative path to its directory's path)
/// walks them at any length through `without_path_limit`; the ordinary view of the same
/// pool refuses a path of PATH_MAX bytes or more, as the kernel refuses such a string.
#[test]
fn paths_past_path_max_walk_without_the_limit() {
    let (_p, fs) = new_fs("longpaths", 16);
    let long = fs.without_path_limit();
    let n255 = "n".repeat(255);
    fs.mkdir("/a", 0o755).unwrap();
    // 17 levels of 255-byte names: 4,354 bytes, made through directory handles.
    let mut at = fs.open_file("/a", &dir_opts()).unwrap();
    for _ in 0..17 {
        fs.mkdir_from(Some(at.handle()), n255.as_bytes(), 0o755)
            .unwrap();
        at = fs
            .open_from(Some(at.handle()), n255.as_bytes(), &dir_opts())
            .unwrap();
    }
    let deep = format!("/a{}", format!("/{n255}").repeat(17));
    assert!(deep.len() > 4096);
    assert_errno(fs.stat(&deep), ENAMETOOLONG);
    assert_errno(fs.mkdir(format!("{deep}/x"), 0o755), ENAMETOOLONG);
    assert!(long.stat(&deep).unwrap().is_dir());
    long.mkdir(format!("{deep}/x"), 0o755).unwrap();
    long.write_file(format!("{deep}/x/f"), b"deep").unwrap();
    let mut f = fs.open_from(Some(at.handle()), b"x/f", &ro()).unwrap();
    let mut got = Vec::new();
    std::io::Read::read_to_end(&mut f, &mut got).unwrap();
    assert_eq!(got, b"deep", "the same file, from the deepest directory");
    drop((f, at));
    // Removed bottom up through the long paths.
    long.unlink(format!("{deep}/x/f")).unwrap();
    long.rmdir(format!("{deep}/x")).unwrap();
    for level in (0..17).rev() {
        let dir = format!("/a{}", format!("/{n255}").repeat(level + 1));
        long.rmdir(&dir).unwrap();
    }
    assert!(names(&fs, "/a").is_empty());
    assert_clean(&fs);
}

//! Permission checks for non-root users: modes, groups, set-group-ID and sticky directories.

use super::{creat, names, ro, rw, user};
use crate::common::{assert_clean, assert_errno, new_fs};
use engram_core::{Creds, OpenOptions, SetTime};
use libc::{EACCES, EPERM};

#[test]
fn permissions_for_a_non_root_user() {
    let (_p, fs) = new_fs("perm", 16);
    let alice = user(&fs, 1000);
    let bob = user(&fs, 1001);
    fs.write_file("/secret", b"s").unwrap();
    fs.chmod("/secret", 0o600).unwrap();
    fs.mkdir("/rootdir", 0o755).unwrap();
    fs.write_file("/rootdir/existing", b"e").unwrap();

    // Reading and writing a root-owned 0600 file.
    assert_errno(alice.open_file("/secret", &ro()), EACCES);
    assert_errno(
        alice.open_file("/secret", &OpenOptions::new().write(true)),
        EACCES,
    );
    assert_errno(alice.read_file("/secret"), EACCES);
    assert_errno(alice.truncate("/secret", 0), EACCES);
    assert_eq!(
        alice.stat("/secret").unwrap().size,
        1,
        "stat needs no permission on the file"
    );
    // Creating in, and removing from, a 0755 root directory.
    assert_errno(alice.open_file("/rootdir/x", &creat()), EACCES);
    assert_errno(alice.mkdir("/rootdir/x", 0o755), EACCES);
    assert_errno(alice.symlink("t", "/rootdir/x"), EACCES);
    assert_errno(alice.unlink("/rootdir/existing"), EACCES);
    assert_errno(alice.rename("/rootdir/existing", "/rootdir/y"), EACCES);
    assert_errno(alice.write_file("/x", b""), EACCES);
    assert_eq!(names(&alice, "/rootdir"), ["existing"]);
    assert_eq!(alice.read_file("/rootdir/existing").unwrap(), b"e");
    // Attributes of someone else's file.
    assert_errno(alice.chmod("/secret", 0o644), EPERM);
    assert_errno(alice.chown("/secret", Some(1000), None), EPERM);
    assert_errno(
        alice.utimens("/secret", Some(SetTime::Ns(1)), Some(SetTime::Ns(1))),
        EPERM,
    );
    assert_errno(
        alice.utimens("/secret", Some(SetTime::Now), Some(SetTime::Now)),
        EACCES,
    );
    assert_eq!(fs.stat("/secret").unwrap().permissions(), 0o600);
    // Search permission on a directory.
    fs.mkdir("/private", 0o700).unwrap();
    fs.write_file("/private/x", b"").unwrap();
    assert_errno(alice.stat("/private/x"), EACCES);
    assert_errno(alice.read_dir("/private"), EACCES);
    let private = fs.stat("/private").unwrap();
    let private = alice.handle_of(private.ino).unwrap();
    assert_errno(alice.lookup_in(private, b"x"), EACCES);
    assert!(
        fs.lookup_in(private, b"x").is_ok(),
        "root may search any directory"
    );
    // Group permission.
    fs.write_file("/group", b"g").unwrap();
    fs.chown("/group", None, Some(1000)).unwrap();
    fs.chmod("/group", 0o640).unwrap();
    assert_eq!(alice.read_file("/group").unwrap(), b"g");
    assert_errno(alice.open_file("/group", &rw()), EACCES);
    assert_errno(bob.read_file("/group"), EACCES);
    let carol = fs.with_creds(Creds {
        uid: 1002,
        gid: 1002,
        groups: vec![1000],
    });
    assert_eq!(carol.read_file("/group").unwrap(), b"g");

    // Root may not execute what nobody may execute, but may write anything.
    fs.write_file("/plain", b"").unwrap();
    fs.chmod("/plain", 0o444).unwrap();
    assert_errno(fs.access_at(None, b"/plain", 1, true), EACCES);
    fs.access_at(None, b"/plain", 2, true).unwrap();
    assert_errno(alice.access_at(None, b"/plain", 2, true), EACCES);
    alice.access_at(None, b"/plain", 4, true).unwrap();

    // Set-group-ID directory: new entries take its group, new directories its bit.
    fs.mkdir("/sg", 0o777).unwrap();
    fs.chown("/sg", None, Some(500)).unwrap();
    fs.chmod("/sg", 0o2777).unwrap();
    let alice_g = fs.with_creds(Creds {
        uid: 1000,
        gid: 1000,
        groups: vec![1000],
    });
    drop(alice_g.open_file("/sg/file", &creat().mode(0o644)).unwrap());
    alice_g.mkdir("/sg/dir", 0o755).unwrap();
    let m = fs.stat("/sg/file").unwrap();
    assert_eq!((m.uid, m.gid, m.permissions()), (1000, 500, 0o644));
    let m = fs.stat("/sg/dir").unwrap();
    assert_eq!((m.uid, m.gid, m.permissions()), (1000, 500, 0o2755));
    // chmod by an owner outside the file's group drops set-group-ID.
    alice_g.chmod("/sg/file", 0o2755).unwrap();
    assert_eq!(fs.stat("/sg/file").unwrap().permissions(), 0o755);
    // chown by the owner: only to a group of theirs, never to another user.
    alice_g.chown("/sg/file", None, Some(1000)).unwrap();
    assert_errno(alice_g.chown("/sg/file", None, Some(5)), EPERM);
    assert_errno(alice_g.chown("/sg/file", Some(1001), None), EPERM);
    alice_g.chown("/sg/file", Some(1000), None).unwrap();
    alice_g.chmod("/sg/file", 0o2755).unwrap();
    assert_eq!(fs.stat("/sg/file").unwrap().permissions(), 0o2755);
    assert_eq!(fs.stat("/sg/file").unwrap().gid, 1000);

    // Sticky world-writable directory.
    fs.mkdir("/tmp", 0o777).unwrap();
    fs.chmod("/tmp", 0o1777).unwrap();
    fs.write_file("/tmp/rootfile", b"r").unwrap();
    assert_errno(alice.unlink("/tmp/rootfile"), EPERM);
    assert_errno(alice.rename("/tmp/rootfile", "/tmp/zz"), EPERM);
    let f = alice.open_file("/tmp/mine", &creat().mode(0o644)).unwrap();
    f.write_at(b"alice", 0).unwrap();
    drop(f);
    let m = fs.stat("/tmp/mine").unwrap();
    assert_eq!((m.uid, m.gid), (1000, 1000));
    assert_errno(bob.unlink("/tmp/mine"), EPERM);
    assert_errno(bob.open_file("/tmp/mine", &rw()), EACCES);
    alice.chmod("/tmp/mine", 0o600).unwrap();
    alice.rename("/tmp/mine", "/tmp/mine2").unwrap();
    assert_errno(alice.rename("/tmp/mine2", "/tmp/rootfile"), EPERM);
    alice.unlink("/tmp/mine2").unwrap();
    alice.mkdir("/tmp/adir", 0o755).unwrap();
    assert_errno(bob.rmdir("/tmp/adir"), EPERM);
    alice.rmdir("/tmp/adir").unwrap();
    fs.unlink("/tmp/rootfile").unwrap(); // root may
    assert!(names(&fs, "/tmp").is_empty());
    assert_clean(&fs);
}

/// With `fs.protected_hardlinks` set (as on this machine's Linux), a user may hard-link only
/// files they own, or regular files that are neither setuid nor setgid-executable and that
/// they may read and write (Linux's `may_linkat`); root links anything. Without it, anything.
#[test]
fn hard_links_to_files_of_others_follow_protected_hardlinks() {
    let (_p, fs) = new_fs("protlink", 16);
    let alice = user(&fs, 1000);
    fs.mkdir("/pub", 0o777).unwrap();
    fs.chmod("/pub", 0o1777).unwrap();
    let file = |name: &str, mode: u32| {
        let p = format!("/pub/{name}");
        fs.write_file(&p, b"x").unwrap();
        fs.chmod(&p, mode).unwrap();
        p
    };
    let read_only = file("ro", 0o444);
    let shared = file("rw", 0o666);
    let setuid = file("suid", 0o4777);
    let setgid_exec = file("sgid", 0o2777);
    let setgid_plain = file("sgid-noexec", 0o2766);
    fs.symlink("rw", "/pub/sym").unwrap();
    alice.write_file("/pub/own", b"a").unwrap();
    alice.chmod("/pub/own", 0o400).unwrap();

    let protected = engram_core::perm::hardlinks_protected();
    for (src, allowed) in [
        (read_only.as_str(), !protected),
        (setuid.as_str(), !protected),
        (setgid_exec.as_str(), !protected),
        ("/pub/sym", !protected),
        (shared.as_str(), true),
        (setgid_plain.as_str(), true),
        ("/pub/own", true),
    ] {
        let to = format!("{src}-link");
        let r = alice.link(src, &to);
        if allowed {
            r.unwrap_or_else(|e| panic!("link of {src}: {e}"));
        } else {
            assert_errno(r, EPERM);
            assert!(fs.lstat(&to).is_err(), "{to} made");
        }
    }
    // Root links anything.
    fs.link(&read_only, "/pub/root-link").unwrap();
    assert_eq!(
        fs.stat(&read_only).unwrap().nlink,
        2 + u32::from(!protected)
    );
    assert_clean(&fs);
}

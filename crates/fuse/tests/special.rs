//! FIFOs, sockets and devices through the mount: made by mknod, reported by stat and
//! readdir, and served by the kernel (a FIFO's pipe, a socket bound on a node) or refused
//! by it (opening a device, the mount being `nodev`; opening a socket).

mod support;

use engram_fuse::MountOptions;
use std::ffi::CString;
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use support::*;

/// mknod(2): 0, or the errno.
fn mknod(p: &Path, mode: u32, rdev: u64) -> i32 {
    let c = CString::new(p.as_os_str().as_bytes()).unwrap();
    // SAFETY: a NUL-terminated path that lives for the call.
    if unsafe { libc::mknod(c.as_ptr(), mode, rdev) } == 0 {
        0
    } else {
        std::io::Error::last_os_error().raw_os_error().unwrap()
    }
}

fn errno_of<T>(r: std::io::Result<T>) -> i32 {
    r.err().and_then(|e| e.raw_os_error()).unwrap_or(0)
}

#[test]
fn fifos_sockets_and_devices_through_the_mount() {
    let s = Scratch::new("special");
    let Some(m) = s.mount(&MountOptions::default()) else {
        return;
    };
    let d = m.mount_point().to_path_buf();
    // SAFETY: reading our own effective uid.
    let root = unsafe { libc::geteuid() } == 0;

    let fifo = d.join("fifo");
    assert_eq!(mknod(&fifo, libc::S_IFIFO | 0o644, 0), 0);
    assert_eq!(mknod(&fifo, libc::S_IFIFO | 0o644, 0), libc::EEXIST);
    let meta = std::fs::symlink_metadata(&fifo).unwrap();
    assert!(meta.file_type().is_fifo());
    assert_eq!(
        (meta.len(), meta.mode() & 0o7777, meta.rdev()),
        (0, 0o644, 0)
    );
    // The kernel serves the pipe: a reader (not waiting for a writer), then a writer.
    let mut reader = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(&fifo)
        .unwrap();
    let mut writer = OpenOptions::new().write(true).open(&fifo).unwrap();
    writer.write_all(b"through the pipe").unwrap();
    drop(writer);
    let mut got = String::new();
    reader.read_to_string(&mut got).unwrap();
    assert_eq!(got, "through the pipe");
    // Held open, it would keep the pipe (and what a writer left in it) for the next reader.
    drop(reader);
    // And between processes, each opening it by name and waiting for the other.
    assert_eq!(sh(&d, "(echo hi > fifo &) ; timeout 20 cat fifo"), "hi\n");

    let sock = d.join("sock");
    assert_eq!(mknod(&sock, libc::S_IFSOCK | 0o755, 0), 0);
    assert!(
        std::fs::symlink_metadata(&sock)
            .unwrap()
            .file_type()
            .is_socket()
    );
    assert_eq!(errno_of(File::open(&sock)), libc::ENXIO);
    // bind makes a socket node through mknod; the kernel connects to the socket bound on
    // the node's inode, which the bound socket keeps.
    let bound = d.join("bound");
    let listener = UnixListener::bind(&bound).unwrap();
    assert!(
        std::fs::symlink_metadata(&bound)
            .unwrap()
            .file_type()
            .is_socket()
    );
    let mut client = UnixStream::connect(&bound).unwrap();
    client.write_all(b"over a socket").unwrap();
    drop(client);
    let mut got = String::new();
    listener
        .accept()
        .unwrap()
        .0
        .read_to_string(&mut got)
        .unwrap();
    assert_eq!(got, "over a socket");
    drop(listener);
    // Left behind, as anywhere: nobody listens there any more.
    assert_eq!(errno_of(UnixStream::connect(&bound)), libc::ECONNREFUSED);
    std::fs::remove_file(&bound).unwrap();

    let null = d.join("null");
    if root {
        assert_eq!(mknod(&null, libc::S_IFCHR | 0o666, libc::makedev(1, 3)), 0);
        assert_eq!(
            mknod(&d.join("sda"), libc::S_IFBLK | 0o660, libc::makedev(8, 0)),
            0
        );
        let meta = std::fs::symlink_metadata(&null).unwrap();
        assert!(meta.file_type().is_char_device());
        assert_eq!(meta.rdev(), libc::makedev(1, 3));
        let sda = std::fs::symlink_metadata(d.join("sda")).unwrap();
        assert!(sda.file_type().is_block_device());
        assert_eq!(sda.rdev(), libc::makedev(8, 0));
        // Every FUSE mount is nodev.
        assert_eq!(errno_of(File::open(&null)), libc::EACCES);
        assert_eq!(sh(&d, "stat -c %t,%T null sda"), "1,3\n8,0\n");
    }

    // readdir's types, and the usual changes of a name.
    let mut types: Vec<(String, char)> = std::fs::read_dir(&d)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            let t = e.file_type().unwrap();
            let c = if t.is_fifo() {
                'p'
            } else if t.is_socket() {
                's'
            } else if t.is_char_device() {
                'c'
            } else if t.is_block_device() {
                'b'
            } else {
                '?'
            };
            (e.file_name().into_string().unwrap(), c)
        })
        .collect();
    types.sort();
    let mut want = vec![("fifo".to_string(), 'p'), ("sock".to_string(), 's')];
    if root {
        want.push(("null".to_string(), 'c'));
        want.push(("sda".to_string(), 'b'));
        want.sort();
    }
    assert_eq!(types, want);
    assert_eq!(
        sh(
            &d,
            "mv fifo p && ln p p2 && chmod 600 p2 && stat -c '%A %h' p && rm p2 && ls -l p | cut -c1"
        ),
        "prw------- 2\np\n"
    );

    let fs = m.into_fs().unwrap();
    assert!(fs.lstat("/p").unwrap().is_fifo());
    assert!(fs.lstat("/sock").unwrap().is_socket());
    if root {
        assert_eq!(fs.lstat("/null").unwrap().rdev, libc::makedev(1, 3));
    }
    assert_clean(&fs);
    fs.unmount().unwrap();
}

//! Forged requests against a live daemon: each gets an error reply and nothing in the pool
//! changes.

use super::{Daemon, check_clean, send};
use engram_core::request::{Clear, Request, Response, WriteCheck};
use engram_core::wire::{Writer, decode_reply, encode_request};
use engram_core::{Fs, Handle, OpenOptions};

#[test]
fn forged_and_random_requests_get_errors_and_change_nothing() {
    let mut d = Daemon::start("forge", 64 << 20);
    let fs = Fs::connect(&d.socket).unwrap();
    fs.mkdir("/d", 0o755).unwrap();
    fs.write_file("/d/f", &[7u8; 10000]).unwrap();
    let before = fs.read_file("/d/f").unwrap();
    let remote = fs.remote().unwrap();
    let geo = fs.mount_info().geometry;
    let f = fs.stat("/d/f").unwrap();
    let good = fs.handle_of(f.ino).unwrap();
    fs.mknod("/d/fifo", libc::S_IFIFO | 0o666, 0).unwrap();
    let fifo = handle_at(&fs, "/d/fifo").unwrap();
    let d_dir = handle_at(&fs, "/d").unwrap();
    let mknod = |parent, name: &[u8], mode, rdev| Request::Mknod {
        parent,
        name: name.to_vec(),
        mode,
        rdev,
    };
    let forged = [
        // A node in a file, a directory, a type that does not exist, a number too wide, an
        // invalid name, a name taken.
        mknod(good, b"n", libc::S_IFIFO | 0o644, 0),
        mknod(d_dir, b"n", libc::S_IFDIR | 0o755, 0),
        mknod(d_dir, b"n", libc::S_IFMT | 0o644, 0),
        mknod(d_dir, b"n", 0o050000 | 0o644, 0),
        mknod(d_dir, b"n", libc::S_IFCHR | 0o644, 1 << 32),
        mknod(d_dir, b"a/b", libc::S_IFSOCK | 0o644, 0),
        mknod(d_dir, b"fifo", libc::S_IFBLK | 0o644, 0),
        // A FIFO opened in the pool: there is nothing to read or write there.
        Request::Open {
            target: fifo,
            write: true,
        },
        Request::Open {
            target: fifo,
            write: false,
        },
        Request::Create {
            parent: Handle {
                ino: 0,
                generation: 1,
            },
            name: b"x".to_vec(),
            mode: 0o644,
            excl: false,
            open: None,
        },
        Request::Create {
            parent: Handle {
                ino: u64::MAX,
                generation: 1,
            },
            name: b"x".to_vec(),
            mode: 0o644,
            excl: false,
            open: None,
        },
        Request::Create {
            parent: Handle {
                ino: 1,
                generation: 999,
            },
            name: b"x".to_vec(),
            mode: 0o644,
            excl: false,
            open: None,
        },
        Request::Create {
            parent: good,
            name: b"x".to_vec(),
            mode: 0o644,
            excl: false,
            open: None,
        },
        Request::Mkdir {
            parent: Handle {
                ino: 1,
                generation: 1,
            },
            name: vec![b'a'; 300],
            mode: 0,
        },
        Request::Unlink {
            parent: Handle {
                ino: 1,
                generation: 1,
            },
            name: b"../d".to_vec(),
            dir: true,
        },
        Request::CommitWrite {
            target: good,
            // The last data page: never in this client's reservation (batches come from
            // the front of the area), so the commit must be refused.
            pages: vec![(0, geo.data_off + (geo.data_pages - 1) * 4096)],
            end: 4096,
            check: None,
        },
        Request::CommitWrite {
            target: good,
            pages: vec![(0, geo.meta_off)],
            end: 4096,
            check: None,
        },
        Request::CommitWrite {
            target: good,
            pages: vec![(u64::MAX / 4096, 12345)],
            end: u64::MAX,
            check: None,
        },
        Request::CommitWrite {
            target: good,
            pages: vec![],
            end: 1,
            check: Some(WriteCheck {
                old_pages: vec![1],
                size_seen: 0,
                start: 0,
                in_place: Vec::new(),
            }),
        },
        Request::Unreserve {
            pages: vec![geo.data_off, 0, u64::MAX],
        },
        Request::Close {
            target: good,
            write: true,
        },
        Request::Fallocate {
            target: good,
            offset: u64::MAX - 10,
            len: 100,
            keep_size: false,
        },
        Request::Clear {
            target: good,
            offset: u64::MAX - 10,
            len: 100,
            how: Clear::ZeroRange { keep_size: false },
        },
        Request::Reserve { pages: u64::MAX },
        // Not held open by this client, or never counted.
        Request::Mapped {
            target: good,
            on: true,
        },
        Request::Mapped {
            target: good,
            on: false,
        },
        Request::Mapped {
            target: Handle {
                ino: u64::MAX,
                generation: 0,
            },
            on: true,
        },
    ];
    for req in &forged {
        let mut w = Writer::default();
        encode_request(req, &mut w);
        let reply = decode_reply(&remote.call_raw(&w.0).unwrap());
        if !matches!(req, Request::Reserve { .. }) {
            assert!(reply.is_err(), "{req:?} was accepted: {reply:?}");
        }
    }
    // Random bytes, and valid requests with random fields.
    let mut x = 0x1234_5678_9abc_def0u64;
    let mut rnd = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for i in 0..3000 {
        let len = (rnd() % 200) as usize;
        let mut bytes: Vec<u8> = (0..len).map(|_| rnd() as u8).collect();
        if i % 2 == 0 && !bytes.is_empty() {
            bytes[0] = (rnd() % 22) as u8; // a real request tag with garbage after it
        }
        let _ = remote.call_raw(&bytes).unwrap();
    }
    assert_eq!(fs.read_file("/d/f").unwrap(), before);
    let mut names: Vec<Vec<u8>> = fs
        .read_dir("/d")
        .unwrap()
        .map(|e| e.unwrap().name)
        .collect();
    names.sort();
    let want: [&[u8]; 4] = [b".", b"..", b"f", b"fifo"];
    assert_eq!(names, want, "no node was made");
    let r = fs.fsck(false).unwrap();
    assert!(r.is_clean(), "{:?}", r.problems);
    drop(fs);
    d.stop();
    check_clean(&d.pool);
}

/// Reserve one data page for this client and fill it with `byte` (as a writer would).
fn reserved_page(fs: &Fs, byte: u8) -> u64 {
    let Ok(Response::Pages(p)) = send(fs, &Request::Reserve { pages: 1 }) else {
        panic!("reserve failed");
    };
    let page = p[0];
    // SAFETY: the page is reserved to this client and lies in the data area, which clients
    // map read/write; nothing else uses it until a commit publishes it.
    unsafe { std::ptr::write_bytes(fs.pool().as_ptr().add(page as usize), byte, 4096) };
    page
}

/// The last data page of the pool: never in a client's reservation (batches come from the
/// front of the area).
fn geo_last_page(fs: &Fs) -> u64 {
    let geo = fs.mount_info().geometry;
    geo.data_off + (geo.data_pages - 1) * 4096
}

/// Whether the file still holds `before`, the pool checks clean, and `why` was refused.
fn unchanged(fs: &Fs, path: &str, before: &[u8], reply: engram_core::Result<Response>, errno: i32) {
    match reply {
        Err(e) => assert_eq!(e.errno(), errno, "{e}"),
        Ok(r) => panic!("a forged request was accepted: {r:?}"),
    }
    assert_eq!(fs.read_file(path).unwrap(), before, "the file changed");
    let r = fs.fsck(false).unwrap();
    assert!(r.is_clean(), "{:?}", r.problems);
}

#[test]
fn write_commits_need_a_write_open_and_a_legitimate_end() {
    let mut d = Daemon::start("commit", 64 << 20);
    let fs = Fs::connect(&d.socket).unwrap();
    fs.write_file("/f", &[7u8; 5000]).unwrap();
    let before = fs.read_file("/f").unwrap();
    let h = fs.handle_of(fs.stat("/f").unwrap().ino).unwrap();
    let page = reserved_page(&fs, 0xEE);
    let commit =
        |pages: Vec<(u64, u64)>, end: u64, check: Option<WriteCheck>| Request::CommitWrite {
            target: h,
            pages,
            end,
            check,
        };
    let checked = |old: u64| WriteCheck {
        old_pages: vec![old],
        size_seen: 5000,
        start: 0,
        in_place: Vec::new(),
    };
    // 1. A commit for a file this client has not opened at all.
    let r = send(&fs, &commit(vec![(0, page)], 4096, None));
    unchanged(&fs, "/f", &before, r, libc::EBADF);
    let r = send(&fs, &commit(vec![], 1 << 30, None));
    unchanged(&fs, "/f", &before, r, libc::EBADF);
    // 2. With the file open read-only (also twice, and via a forged read-only Open).
    let ro = fs.open_file("/f", &OpenOptions::new().read(true)).unwrap();
    let ro2 = ro.try_clone().unwrap();
    let r = send(&fs, &commit(vec![(0, page)], 4096, Some(checked(0))));
    unchanged(&fs, "/f", &before, r, libc::EBADF);
    // 3. fallocate without a write open.
    let fall = Request::Fallocate {
        target: h,
        offset: 0,
        len: 1 << 20,
        keep_size: false,
    };
    let r = send(&fs, &fall);
    unchanged(&fs, "/f", &before, r, libc::EBADF);
    // Nor a punched hole or a zeroed range.
    for how in [Clear::PunchHole, Clear::ZeroRange { keep_size: false }] {
        let clear = Request::Clear {
            target: h,
            offset: 0,
            len: 1 << 20,
            how,
        };
        let r = send(&fs, &clear);
        unchanged(&fs, "/f", &before, r, libc::EBADF);
    }
    // Closing "for writing" what was opened read-only is refused too.
    let r = send(
        &fs,
        &Request::Close {
            target: h,
            write: true,
        },
    );
    unchanged(&fs, "/f", &before, r, libc::EBADF);
    // 4. Open for writing: a bogus end is still refused.
    let rw = fs.open_file("/f", &OpenOptions::new().write(true)).unwrap();
    // No pages, and an end far beyond the last page the file has.
    let r = send(&fs, &commit(vec![], 1 << 30, None));
    unchanged(&fs, "/f", &before, r, libc::EINVAL);
    // A page beyond the end it claims.
    let r = send(&fs, &commit(vec![(3, page)], 4096, None));
    unchanged(&fs, "/f", &before, r, libc::EINVAL);
    // One reserved page for two page numbers: it would be mapped twice.
    let r = send(&fs, &commit(vec![(0, page), (1, page)], 8192, None));
    unchanged(&fs, "/f", &before, r, libc::EINVAL);
    // A reserved page beside one that is not: nothing is taken from the reservation.
    let r = send(
        &fs,
        &commit(vec![(0, page), (1, geo_last_page(&fs))], 8192, None),
    );
    unchanged(&fs, "/f", &before, r, libc::EINVAL);
    // One page, and an end far beyond it.
    let r = send(&fs, &commit(vec![(2, page)], 1 << 30, None));
    unchanged(&fs, "/f", &before, r, libc::EINVAL);
    // A checked commit whose pages do not cover the range it claims to have written.
    let wide = WriteCheck {
        old_pages: vec![0],
        size_seen: 5000,
        start: 5000,
        in_place: Vec::new(),
    };
    let r = send(&fs, &commit(vec![(2, page)], 3 * 4096, Some(wide)));
    unchanged(&fs, "/f", &before, r, libc::EINVAL);
    let empty = WriteCheck {
        old_pages: vec![],
        size_seen: 5000,
        start: 1 << 20,
        in_place: Vec::new(),
    };
    let r = send(&fs, &commit(vec![], 1 << 20, Some(empty)));
    unchanged(&fs, "/f", &before, r, libc::EINVAL);
    // No old pages, which only a write of whole pages may leave out: a start or an end
    // inside a page is refused.
    for (start, end) in [(100, 4096), (0, 4000)] {
        let partial = WriteCheck {
            old_pages: vec![],
            size_seen: 5000,
            start,
            in_place: Vec::new(),
        };
        let r = send(&fs, &commit(vec![(0, page)], end, Some(partial)));
        unchanged(&fs, "/f", &before, r, libc::EINVAL);
    }
    // Pages claimed written in place: each must lie in the range, ascend, not be supplied
    // too, and still be the file's page (a page that is not is refused as changed).
    let past = |in_place: Vec<(u64, u64)>| WriteCheck {
        old_pages: vec![0],
        size_seen: 5000,
        start: 5000,
        in_place,
    };
    let other = fs.mount_info().geometry.data_off; // refused before it is looked at
    for bad in [
        vec![(2, other)],             // also supplied
        vec![(0, other)],             // before the range
        vec![(1, other), (1, other)], // not ascending
        vec![(1, other), (3, other)], // beyond the range
    ] {
        let r = send(&fs, &commit(vec![(2, page)], 3 * 4096, Some(past(bad))));
        unchanged(&fs, "/f", &before, r, libc::EINVAL);
    }
    for not_the_files in [vec![(1, geo_last_page(&fs))], vec![(1, 0)]] {
        let r = send(
            &fs,
            &commit(vec![(2, page)], 3 * 4096, Some(past(not_the_files))),
        );
        unchanged(&fs, "/f", &before, r, libc::EAGAIN);
    }
    // The legitimate paths still work: a write through the write-open, fallocate too.
    rw.write_at(b"ok", 4999).unwrap();
    rw.allocate(0, 8192, true).unwrap();
    let after = fs.read_file("/f").unwrap();
    assert_eq!(after.len(), 5001);
    assert_eq!(&after[4999..], b"ok");
    drop((ro, ro2, rw));
    // Closed: the client no longer holds a write open.
    let r = send(&fs, &fall);
    unchanged(&fs, "/f", &after, r, libc::EBADF);
    // The refused commits left the page reserved: it can still be given back, once.
    let give_back = Request::Unreserve { pages: vec![page] };
    assert!(send(&fs, &give_back).is_ok());
    unchanged(&fs, "/f", &after, send(&fs, &give_back), libc::EINVAL);
    drop(fs);
    d.stop();
    check_clean(&d.pool);
}

/// The handle of what `path` names now, if the caller may reach it.
fn handle_at(fs: &Fs, path: &str) -> Option<Handle> {
    fs.stat(path).ok().and_then(|m| fs.handle_of(m.ino).ok())
}

/// A client that may not write a file cannot open it for writing, even with a forged Open,
/// and so cannot commit to it (run as uid 65534 by `the_daemon_checks_the_client_uid...`).
pub fn nobody_may_not_write(fs: &Fs) -> bool {
    let Some(h) = handle_at(fs, "/rootonly/file") else {
        return false;
    };
    let open = send(
        fs,
        &Request::Open {
            target: h,
            write: true,
        },
    );
    let fall = send(
        fs,
        &Request::Fallocate {
            target: h,
            offset: 0,
            len: 4096,
            keep_size: false,
        },
    );
    let commit = send(
        fs,
        &Request::CommitWrite {
            target: h,
            pages: vec![],
            end: 1 << 20,
            check: None,
        },
    );
    let errno = |r: engram_core::Result<Response>| r.err().map(|e| e.errno());
    errno(open) == Some(libc::EACCES)
        && errno(fall) == Some(libc::EBADF)
        && errno(commit) == Some(libc::EBADF)
}

/// A client that is not root makes no device, not even with a forged request, and makes a
/// FIFO where it may write (run as uid 65534 with `/open` writable by all).
pub fn nobody_makes_fifos_and_no_devices(fs: &Fs) -> bool {
    let Some(open) = handle_at(fs, "/open") else {
        return false;
    };
    let forged = send(
        fs,
        &Request::Mknod {
            parent: open,
            name: b"null".to_vec(),
            mode: libc::S_IFCHR | 0o666,
            rdev: libc::makedev(1, 3),
        },
    );
    let refused = |r: engram_core::Result<()>| r.err().map(|e| e.errno()) == Some(libc::EPERM);
    forged.err().map(|e| e.errno()) == Some(libc::EPERM)
        && refused(fs.mknod("/open/sda", libc::S_IFBLK | 0o660, libc::makedev(8, 0)))
        && fs.lstat("/open/null").is_err()
        && fs.mknod("/open/fifo", libc::S_IFIFO | 0o600, 0).is_ok()
        && fs
            .lstat("/open/fifo")
            .is_ok_and(|m| m.is_fifo() && m.uid == 65534)
}

/// The daemon's log gets a line for a forged request, none for a call's ordinary answers
/// (an existing name, a missing one, a directory moved into itself, a symlink's mode): a
/// `mkdir -p` loop made a line per call.
#[test]
fn the_log_records_forged_requests_not_ordinary_answers() {
    let dir = std::env::temp_dir();
    let pool = std::path::PathBuf::from(format!(
        "/dev/shm/engram-daemon-{}-quietlog.pool",
        std::process::id()
    ));
    let socket = dir.join(format!(
        "engram-daemon-{}-quietlog.sock",
        std::process::id()
    ));
    Fs::mkfs(&pool, 16 << 20).unwrap();
    let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let stop = std::sync::Arc::new(engram_core::daemon::Stop::new());
    let served = {
        let (pool, socket, stop, lines) =
            (pool.clone(), socket.clone(), stop.clone(), lines.clone());
        std::thread::spawn(move || {
            let opts = engram_core::daemon::ServeOptions {
                socket,
                idle_exit: None,
                log_clients: false,
            };
            engram_core::daemon::serve_until(&pool, &opts, &stop, &|l| {
                lines.lock().unwrap().push(l.to_string())
            })
        })
    };
    while Fs::connect(&socket).is_err() {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let fs = Fs::connect(&socket).unwrap();
    fs.mkdir("/d", 0o755).unwrap();
    fs.mkdir("/d/sub", 0o755).unwrap();
    fs.symlink("d", "/l").unwrap();
    for _ in 0..50 {
        assert_eq!(fs.mkdir("/d", 0o755).unwrap_err().errno(), libc::EEXIST);
        assert_eq!(fs.unlink("/missing").unwrap_err().errno(), libc::ENOENT);
        // `mv d d/sub/x`, and `chmod` of a symlink itself.
        assert_eq!(
            fs.rename("/d", "/d/sub/x").unwrap_err().errno(),
            libc::EINVAL
        );
        let lchmod = fs.chmod_at(None, b"/l", 0o700, false);
        assert_eq!(lchmod.unwrap_err().errno(), libc::EOPNOTSUPP);
    }
    // A close for writing of a file this client does not hold open for writing: EBADF.
    fs.write_file("/f", b"x").unwrap();
    let f = fs.handle_of(fs.stat("/f").unwrap().ino).unwrap();
    let r = send(
        &fs,
        &Request::Close {
            target: f,
            write: true,
        },
    );
    assert_eq!(r.unwrap_err().errno(), libc::EBADF);
    drop(fs);
    stop.stop();
    served.join().unwrap().unwrap();
    let failed: Vec<String> = lines
        .lock()
        .unwrap()
        .iter()
        .filter(|l| l.contains("failed"))
        .cloned()
        .collect();
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert!(failed[0].contains("close failed"), "{failed:?}");
    let _ = std::fs::remove_file(&pool);
}

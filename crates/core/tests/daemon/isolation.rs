//! A client can write only its own shared memory: the server's region (sequence counters,
//! global epoch, sleep flag) is read-only to it whatever it tries, other clients' regions
//! are never handed to it, and garbage in its own region harms nobody else.

use super::{Daemon, check_clean, spawn_worker};
use engram_core::request::{Request, Response};
use engram_core::wire::{Writer, decode_reply, encode_request};
use engram_core::{Fs, OpenOptions};

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// Worker role "common-store": a store into the server's region must kill this process.
pub fn store_into_common(fs: &Fs) {
    let (_, p) = fs.remote().unwrap().common_region();
    // SAFETY: deliberately not: the mapping is read-only and this store must fault.
    unsafe { std::ptr::write_volatile(p.add(4096) as *mut u64, 12345) };
    panic!("the store into the server's region did not fault");
}

#[test]
fn the_servers_region_cannot_be_made_writable() {
    use std::os::unix::process::ExitStatusExt;
    let mut d = Daemon::start("iso-common", 64 << 20);
    let fs = Fs::connect(&d.socket).unwrap();
    fs.write_file("/f", b"data").unwrap();
    let (fd, p) = fs.remote().unwrap().common_region();
    // SAFETY: asking for a new writable shared mapping of the descriptor; it must be refused.
    let m = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            4096,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd,
            0,
        )
    };
    assert_eq!(m, libc::MAP_FAILED, "a writable mapping was granted");
    assert_eq!(errno(), libc::EPERM);
    // Reopening the memfd through /proc gives the same (sealed) file.
    let path = std::ffi::CString::new(format!("/proc/self/fd/{fd}")).unwrap();
    // SAFETY: opening a path; the result is checked.
    let fd2 = unsafe { libc::open(path.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
    if fd2 >= 0 {
        // SAFETY: as above, on the reopened descriptor.
        let m = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                4096,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd2,
                0,
            )
        };
        assert_eq!(m, libc::MAP_FAILED, "a writable mapping was granted");
        let buf = [0u8; 8];
        // SAFETY: writing 8 bytes from a local buffer; must be refused.
        let n = unsafe { libc::pwrite(fd2, buf.as_ptr() as *const libc::c_void, 8, 4096) };
        assert_eq!(n, -1, "a write into the server's region was accepted");
        // SAFETY: shrinking must be refused too (the server would fault).
        assert_eq!(unsafe { libc::ftruncate(fd2, 0) }, -1);
        // SAFETY: closing the descriptor opened above.
        unsafe { libc::close(fd2) };
    }
    // The existing read-only mapping cannot be made writable.
    // SAFETY: mprotect of the first page of our own mapping; it must be refused.
    let r = unsafe { libc::mprotect(p as *mut libc::c_void, 4096, libc::PROT_WRITE) };
    assert_eq!(r, -1, "the read-only mapping was made writable");
    // A store faults in that client only.
    let status = spawn_worker("common-store", &d.socket, "").wait().unwrap();
    assert_eq!(status.signal(), Some(libc::SIGSEGV), "{status:?}");
    assert_eq!(fs.read_file("/f").unwrap(), b"data");
    drop(fs);
    d.stop();
    check_clean(&d.pool);
}

#[test]
fn a_client_cannot_act_as_another() {
    let mut d = Daemon::start("iso-other", 64 << 20);
    let a = Fs::connect(&d.socket).unwrap();
    let b = Fs::connect(&d.socket).unwrap();
    b.write_file("/b", &[5u8; 8192]).unwrap();
    // B holds /b open for writing; A forges a commit to it from its own slots.
    let bw = b.open_file("/b", &OpenOptions::new().write(true)).unwrap();
    let send = |fs: &Fs, req: &Request| {
        let mut w = Writer::default();
        encode_request(req, &mut w);
        decode_reply(&fs.remote().unwrap().call_raw(&w.0).unwrap())
    };
    let Ok(Response::Pages(pages)) = send(&a, &Request::Reserve { pages: 1 }) else {
        panic!("reserve failed");
    };
    let h = a.handle_of(a.stat("/b").unwrap().ino).unwrap();
    let r = send(
        &a,
        &Request::CommitWrite {
            target: h,
            pages: vec![(0, pages[0])],
            end: 4096,
            check: None,
        },
    );
    assert_eq!(r.unwrap_err().errno(), libc::EBADF, "A acted as B");
    // The two clients' regions are different memory: A's writes never reach B's slots.
    let (pa, len) = a.remote().unwrap().own_region();
    let (pb, _) = b.remote().unwrap().own_region();
    assert_ne!(pa, pb);
    // Garbage in all of A's region (doorbell, epochs, slots) harms nobody else.
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for i in (0..len).step_by(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        // SAFETY: inside A's own mapped region, 8-aligned (the region is page-aligned).
        unsafe { std::ptr::write_volatile(pa.add(i) as *mut u64, x) };
    }
    bw.write_at(b"still B", 0).unwrap();
    assert_eq!(&b.read_file("/b").unwrap()[..7], b"still B");
    drop(bw);
    // A is unusable now and goes away; its slots are forgotten.
    let a_pool = (a.pool().as_ptr() as usize, a.pool().len() as usize);
    std::mem::forget(a);
    let r = b.fsck(false).unwrap();
    assert!(r.is_clean(), "{:?}", r.problems);
    drop(b);
    d.stop();
    // A's mapping of the pool, leaked with it, marks the pool as mapped by a client (a
    // later opener is refused while it lives): unmapped here as A's exit would.
    // SAFETY: A is forgotten; nothing reads its mapping any more.
    unsafe { libc::munmap(a_pool.0 as *mut libc::c_void, a_pool.1) };
    for e in std::fs::read_dir("/proc/self/fd").unwrap().flatten() {
        if std::fs::read_link(e.path()).is_ok_and(|t| t == d.pool) {
            let fd: i32 = e.file_name().to_str().unwrap().parse().unwrap();
            // SAFETY: closing the leaked client's own descriptor of the pool file.
            unsafe { libc::close(fd) };
        }
    }
    check_clean(&d.pool);
}

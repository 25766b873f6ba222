//! The bit per inode that says some client maps it shared: set while any client counts a
//! mapping of it, cleared when the last is given up or its client goes, and refused for a
//! file the client does not hold open.

use super::{Daemon, spawn_worker};
use engram_core::{Fs, OpenOptions};

#[test]
fn the_mapped_bit_follows_every_clients_mappings() {
    let d = Daemon::start("mapped", 16 << 20);
    let a = Fs::connect(&d.socket).unwrap();
    let b = Fs::connect(&d.socket).unwrap();
    a.write_file("/f", b"x").unwrap();
    let fa = a
        .open_file("/f", &OpenOptions::new().read(true).write(true))
        .unwrap();
    let h = fa.handle();
    // b has not opened it: refused, and nothing set.
    assert_eq!(b.set_mapped(h, true).unwrap_err().errno(), libc::EBADF);
    assert!(!a.mapped_anywhere(h.ino) && !b.mapped_anywhere(h.ino));
    let fb = b.open_file("/f", &OpenOptions::new().read(true)).unwrap();
    a.set_mapped(h, true).unwrap();
    a.set_mapped(h, true).unwrap();
    b.set_mapped(h, true).unwrap();
    assert!(b.mapped_anywhere(h.ino), "seen by another client");
    a.set_mapped(h, false).unwrap();
    a.set_mapped(h, false).unwrap();
    // A give-up a client never counted is refused (it is posted: the next call collects it).
    a.set_mapped(h, false).unwrap();
    assert!(a.statfs().is_ok());
    assert!(a.mapped_anywhere(h.ino), "b still maps it");
    b.set_mapped(h, false).unwrap();
    assert!(b.statfs().is_ok());
    assert!(!a.mapped_anywhere(h.ino), "nobody maps it");
    // Out of range or stale: refused.
    let mut stale = h;
    stale.generation += 1;
    assert!(a.set_mapped(stale, true).is_err());
    drop((fa, fb));
}

/// Worker role "map-and-hang": opens /f, counts a mapping of it, says so, waits forever.
pub fn map_and_hang(fs: &Fs) {
    let f = fs.open_file("/f", &OpenOptions::new().read(true)).unwrap();
    fs.set_mapped(f.handle(), true).unwrap();
    fs.write_file("/ready", b"").unwrap();
    loop {
        std::thread::park();
    }
}

#[test]
fn a_killed_clients_mappings_go_with_it() {
    let d = Daemon::start("mapped-killed", 16 << 20);
    let fs = Fs::connect(&d.socket).unwrap();
    fs.write_file("/f", b"x").unwrap();
    let ino = fs.stat("/f").unwrap().ino;
    let mut child = spawn_worker("map-and-hang", &d.socket, "");
    super::killed::eventually(|| fs.stat("/ready").is_ok());
    assert!(fs.mapped_anywhere(ino));
    // SAFETY: sending SIGKILL to our own child process.
    unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
    assert!(!child.wait().unwrap().success());
    super::killed::eventually(|| !fs.mapped_anywhere(ino));
    assert!(!fs.mapped_anywhere(ino));
}

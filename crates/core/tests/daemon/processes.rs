//! Clients in other processes: sharing a pool, killed or faulting, and their credentials.

use super::{Daemon, check_clean, forged, spawn_worker};
use engram_core::{Fs, OpenOptions};
use std::time::Duration;

/// Creates, renames, writes and reads in a private directory and a shared one.
pub(crate) fn mixed_worker(fs: &Fs, id: &str) {
    let mine = format!("/private-{id}");
    fs.mkdir(&mine, 0o755).unwrap();
    for i in 0..200 {
        let data = format!("{id}:{i}:").repeat(i % 50 + 1);
        fs.write_file(format!("{mine}/f{i}"), data.as_bytes())
            .unwrap();
        if i % 3 == 0 {
            fs.rename(format!("{mine}/f{i}"), format!("{mine}/r{i}"))
                .unwrap();
        }
        fs.write_file(format!("/shared/{id}-{i}"), data.as_bytes())
            .unwrap();
        let back = fs.read_file(format!("/shared/{id}-{i}")).unwrap();
        assert_eq!(back, data.as_bytes());
        // Everybody appends to one shared log file.
        let f = fs
            .open_file("/shared/log", &OpenOptions::new().write(true).append(true))
            .unwrap();
        f.write_next(format!("<{id}:{i:04}>").as_bytes()).unwrap();
    }
}

/// Rewrites a 64 KiB file, each write one generation byte across all of it, forever.
pub(crate) fn pattern_writer(fs: &Fs) {
    let f = fs
        .open_file("/pattern", &OpenOptions::new().write(true))
        .unwrap();
    for g in 0u64.. {
        f.write_at(&[(g % 250) as u8 + 1; 65536], 0).unwrap();
    }
}

#[test]
fn several_processes_share_one_pool() {
    let mut d = Daemon::start("procs", 128 << 20);
    let fs = Fs::connect(&d.socket).unwrap();
    fs.mkdir("/shared", 0o777).unwrap();
    fs.write_file("/shared/log", b"").unwrap();
    let children: Vec<_> = (0..3)
        .map(|i| spawn_worker("mixed", &d.socket, &i.to_string()))
        .collect();
    for mut c in children {
        assert!(c.wait().unwrap().success());
    }
    for id in 0..3 {
        for i in 0..200 {
            let data = format!("{id}:{i}:").repeat(i % 50 + 1);
            let name = if i % 3 == 0 {
                format!("/private-{id}/r{i}")
            } else {
                format!("/private-{id}/f{i}")
            };
            assert_eq!(fs.read_file(&name).unwrap(), data.as_bytes(), "{name}");
            assert_eq!(
                fs.read_file(format!("/shared/{id}-{i}")).unwrap(),
                data.as_bytes()
            );
        }
    }
    // Appends from three processes: every record exactly once, none torn.
    let log = String::from_utf8(fs.read_file("/shared/log").unwrap()).unwrap();
    assert_eq!(log.len(), 3 * 200 * 8);
    let mut records: Vec<&str> = (0..log.len() / 8).map(|i| &log[i * 8..i * 8 + 8]).collect();
    records.sort();
    records.dedup();
    assert_eq!(records.len(), 600, "every append appears once");
    assert!(fs.fsck(false).unwrap().is_clean());
    drop(fs);
    d.stop();
    check_clean(&d.pool);
}

#[test]
fn a_killed_writer_costs_only_its_last_write() {
    let mut d = Daemon::start("kill", 64 << 20);
    let fs = Fs::connect(&d.socket).unwrap();
    fs.write_file("/pattern", &[1u8; 65536]).unwrap();
    for round in 0..4 {
        let mut child = spawn_worker("pattern-writer", &d.socket, "");
        // Readers keep checking while the writer runs, then it is killed mid-write.
        let until = std::time::Instant::now() + Duration::from_millis(150 + 70 * round);
        let mut reads = 0;
        // At least one read, however slowly this process is scheduled.
        loop {
            let data = fs.read_file("/pattern").unwrap();
            assert_eq!(data.len(), 65536);
            assert!(
                data.iter().all(|&b| b == data[0]),
                "torn read while the writer runs"
            );
            reads += 1;
            if std::time::Instant::now() >= until {
                break;
            }
        }
        // SAFETY: sending SIGKILL to our own child process.
        unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
        let status = child.wait().unwrap();
        assert!(!status.success());
        assert!(reads > 0);
        let data = fs.read_file("/pattern").unwrap();
        assert!(
            data.iter().all(|&b| b == data[0]),
            "torn data after the kill"
        );
    }
    // The dead writers' reservations came back: nothing leaked.
    std::thread::sleep(Duration::from_millis(300));
    let r = fs.fsck(false).unwrap();
    assert!(r.is_clean(), "{:?}", r.problems);
    drop(fs);
    d.stop();
    check_clean(&d.pool);
}

#[test]
fn a_stray_store_into_metadata_faults_in_that_client_only() {
    use std::os::unix::process::ExitStatusExt;
    let mut d = Daemon::start("stray", 64 << 20);
    let fs = Fs::connect(&d.socket).unwrap();
    fs.write_file("/keep", b"safe").unwrap();
    let mut child = spawn_worker("stray-store", &d.socket, "");
    let status = child.wait().unwrap();
    assert_eq!(
        status.signal(),
        Some(libc::SIGSEGV),
        "the child must die of SIGSEGV: {status:?}"
    );
    assert_eq!(fs.read_file("/keep").unwrap(), b"safe");
    fs.write_file("/after", b"still serving").unwrap();
    assert!(fs.fsck(false).unwrap().is_clean());
    drop(fs);
    d.stop();
    check_clean(&d.pool);
}

/// Becomes uid/gid 65534, connects, and reports what it could do through its exit code:
/// 10 refused at connect, 20 connected and the permission checks held, other = failure.
pub(crate) fn nobody_worker() {
    // With ENGRAM_ARG=groups: one supplementary group, 4242.
    let groups: &[libc::gid_t] = if std::env::var("ENGRAM_ARG").as_deref() == Ok("groups") {
        &[4242]
    } else {
        &[]
    };
    // SAFETY: dropping privileges in this child process before it does anything else.
    unsafe {
        assert_eq!(libc::setgroups(groups.len(), groups.as_ptr()), 0);
        assert_eq!(libc::setgid(65534), 0);
        assert_eq!(libc::setuid(65534), 0);
    }
    let fs = match Fs::connect(std::env::var("ENGRAM_SOCKET").unwrap()) {
        Ok(fs) => fs,
        Err(e) => {
            eprintln!("nobody: connect refused: {e}");
            std::process::exit(10)
        }
    };
    // The server checks with the credentials of the socket, whatever the client claims.
    if !groups.is_empty() {
        // Files only their group may write: the server, which checks writes with the
        // socket's credentials, knows the supplementary groups.
        let mine = fs.write_file("/grp/mine", b"n").is_ok();
        let other = fs.write_file("/grp/other", b"n").map_err(|e| e.errno()) == Err(libc::EACCES);
        std::process::exit(if mine && other { 30 } else { 1 });
    }
    let denied = fs.mkdir("/rootonly/x", 0o755).map_err(|e| e.errno()) == Err(libc::EACCES);
    let allowed = fs.write_file("/open/mine", b"n").is_ok();
    let owner = fs.stat("/open/mine").map(|m| m.uid).ok();
    let no_write = forged::nobody_may_not_write(&fs);
    let no_devices = forged::nobody_makes_fifos_and_no_devices(&fs);
    // Saying its credentials changed, with root's on the client side, changes nothing:
    // the daemon reads them from the kernel.
    let no_escalation = fs
        .with_own_creds(engram_core::Creds::root())
        .is_ok_and(|claims| {
            claims.mkdir("/rootonly/y", 0o755).map_err(|e| e.errno()) == Err(libc::EACCES)
        });
    std::process::exit(
        if denied && allowed && owner == Some(65534) && no_write && no_devices && no_escalation {
            20
        } else {
            1
        },
    );
}

#[test]
fn the_daemon_takes_the_client_groups_from_the_socket() {
    // SAFETY: reading our own effective uid.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: needs root to run a client as another user");
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    let mut d = Daemon::start("groups", 64 << 20);
    std::fs::set_permissions(&d.pool, std::fs::Permissions::from_mode(0o666)).unwrap();
    let fs = Fs::connect(&d.socket).unwrap();
    fs.mkdir("/grp", 0o755).unwrap();
    for (name, gid) in [("mine", 4242), ("other", 4343)] {
        let path = format!("/grp/{name}");
        fs.write_file(&path, b"group's").unwrap();
        fs.chown(&path, Some(0), Some(gid)).unwrap();
        fs.chmod(&path, 0o020).unwrap();
    }
    let code = spawn_worker("nobody", &d.socket, "groups")
        .wait()
        .unwrap()
        .code();
    assert_eq!(
        code,
        Some(30),
        "a client writes a file of its supplementary group, and not another group's"
    );
    drop(fs);
    d.stop();
    check_clean(&d.pool);
}

#[test]
fn the_daemon_checks_the_client_uid_from_the_socket() {
    use std::os::unix::fs::PermissionsExt;
    // SAFETY: reading our own effective uid.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: needs root to run a client as another user");
        return;
    }
    let mut d = Daemon::start("uid", 64 << 20);
    let fs = Fs::connect(&d.socket).unwrap();
    fs.mkdir("/rootonly", 0o755).unwrap();
    fs.write_file("/rootonly/file", b"root's").unwrap();
    fs.mkdir("/open", 0o777).unwrap();
    std::fs::set_permissions(&d.pool, std::fs::Permissions::from_mode(0o600)).unwrap();
    let code = spawn_worker("nobody", &d.socket, "").wait().unwrap().code();
    assert_eq!(
        code,
        Some(10),
        "a uid that may not use the pool file is refused"
    );
    std::fs::set_permissions(&d.pool, std::fs::Permissions::from_mode(0o666)).unwrap();
    let code = spawn_worker("nobody", &d.socket, "").wait().unwrap().code();
    assert_eq!(
        code,
        Some(20),
        "permission checks use the socket's credentials"
    );
    assert_eq!(fs.read_file("/rootonly/file").unwrap(), b"root's");
    // A root connection whose process drops to nobody is checked as nobody once it says
    // its credentials changed: the daemon reads them from the kernel, whatever it claims.
    let code = spawn_worker("drop-after-connect", &d.socket, "")
        .wait()
        .unwrap()
        .code();
    assert_eq!(
        code,
        Some(40),
        "the daemon checks the credentials the kernel has"
    );
    drop(fs);
    d.stop();
    check_clean(&d.pool);
}

/// Worker role "drop-after-connect": connects as root, drops to uid/gid 65534 for good,
/// says so, and is then refused root's directory even when it claims to be root on its
/// side; exit 40 when so.
pub(crate) fn drop_after_connect() {
    let fs = Fs::connect(std::env::var("ENGRAM_SOCKET").unwrap()).unwrap();
    fs.stat("/rootonly").unwrap();
    // SAFETY: dropping privileges in this child process; nothing else runs in it.
    unsafe {
        assert_eq!(libc::setgroups(0, std::ptr::null()), 0);
        assert_eq!(libc::setresgid(65534, 65534, 65534), 0);
        assert_eq!(libc::setresuid(65534, 65534, 65534), 0);
    }
    let before = fs
        .with_creds(engram_core::Creds::root())
        .mkdir("/rootonly/before", 0o755)
        .is_ok();
    let now = fs.with_own_creds(engram_core::Creds::root()).unwrap();
    let refused = now.mkdir("/rootonly/after", 0o755).map_err(|e| e.errno()) == Err(libc::EACCES);
    std::process::exit(if before && refused { 40 } else { 1 });
}

/// A forked child of a client writes nothing through the `Fs` it inherited: its copy of
/// the reserved-page list is its parent's, so its bytes landed in pages the parent then
/// committed (or, once the parent had exited, in pages the daemon had handed to another
/// client's file; found by fuzzing the daemon). It gets EIO before copying a byte; the
/// parent's writes and file are untouched.
#[test]
fn a_forked_child_does_not_write_through_its_parent_s_pool() {
    let mut d = Daemon::start("fork-writer", 32 << 20);
    let mut w = spawn_worker("fork-writer", &d.socket, "");
    assert!(w.wait().unwrap().success(), "the fork-writer worker failed");
    let fs = Fs::connect(&d.socket).unwrap();
    assert_eq!(fs.read_file("/forked").unwrap(), vec![2u8; 8192]);
    drop(fs);
    d.stop();
    check_clean(&d.pool);
}

/// `a_forked_child_does_not_write_through_its_parent_s_pool`'s worker.
pub(crate) fn fork_writer(fs: &Fs) {
    let f = fs
        .open_file(
            "/forked",
            &OpenOptions::new().read(true).write(true).create(true),
        )
        .unwrap();
    f.write_at(&[1u8; 8192], 0).unwrap();
    // SAFETY: fork; the child makes one write through the inherited `Fs` and leaves with
    // _exit.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        let code = match f.write_at(&[0xEEu8; 8192], 0) {
            Err(e) if e.errno() == libc::EIO => 0,
            Err(_) => 2,
            Ok(_) => 1,
        };
        // Its copy of the open file goes without closing the parent's.
        drop(f);
        // SAFETY: ending the forked child without running the parent's destructors.
        unsafe { libc::_exit(code) };
    }
    let mut status = 0;
    // SAFETY: waiting for our own child.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "the forked child's write was not refused with EIO (status {status:#x})"
    );
    f.write_at(&[2u8; 8192], 0).unwrap();
    let mut back = vec![0u8; 8192];
    assert_eq!(f.read_at(&mut back, 0).unwrap(), 8192);
    assert_eq!(back, vec![2u8; 8192]);
}

/// A write by a client that is not root clears a file's set-user-ID bit even when the
/// client does not ask for it first, as a client may not be trusted to (found in review: a
/// client that skipped the request changed a root-owned 04777 file and kept the bit). The
/// worker drops to nobody and then claims root's credentials on its own side, so its
/// library sends the write's commit alone.
#[test]
fn the_server_clears_set_id_bits_that_a_writing_client_leaves() {
    // SAFETY: reading our own effective uid.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: needs root to change credentials");
        return;
    }
    let mut d = Daemon::start("suid-forger", 32 << 20);
    let fs = Fs::connect(&d.socket).unwrap();
    fs.write_file("/suidw", b"root's").unwrap();
    fs.chmod("/suidw", 0o4777).unwrap();
    let mut w = spawn_worker("suid-forger", &d.socket, "");
    assert!(w.wait().unwrap().success(), "the suid-forger worker failed");
    let m = fs.stat("/suidw").unwrap();
    assert_eq!(m.len(), 4096);
    assert_eq!(m.mode & 0o7777, 0o777, "mode {:o}", m.mode);
    drop(fs);
    d.stop();
    check_clean(&d.pool);
}

/// `the_server_clears_set_id_bits_that_a_writing_client_leaves`'s worker.
pub(crate) fn suid_forger() {
    let fs = Fs::connect(std::env::var("ENGRAM_SOCKET").unwrap()).unwrap();
    // SAFETY: dropping privileges in this child process; nothing else runs in it.
    unsafe {
        assert_eq!(libc::setgroups(0, std::ptr::null()), 0);
        assert_eq!(libc::setresgid(65534, 65534, 65534), 0);
        assert_eq!(libc::setresuid(65534, 65534, 65534), 0);
    }
    let now = fs.with_own_creds(engram_core::Creds::root()).unwrap();
    let forged = now.with_creds(engram_core::Creds::root());
    let f = forged
        .open_file("/suidw", &OpenOptions::new().write(true))
        .unwrap();
    f.write_at(&[9u8; 4096], 0).unwrap();
}

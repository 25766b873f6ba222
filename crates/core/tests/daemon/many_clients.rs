//! Many clients at once: more than the 64 a daemon once took, and more than the 128 futex
//! words one `futex_waitv` can sleep on (the server used to sleep on each client's doorbell).

use super::Daemon;
use engram_core::Fs;
use engram_core::daemon::shm::MAX_CLIENTS;
use std::time::Duration;

/// Raise this process's descriptor limit: the daemon thread and its clients both live here,
/// four descriptors a client.
fn allow_descriptors(n: u64) -> bool {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit on a local struct.
    unsafe {
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut r);
        if r.rlim_cur < n && r.rlim_max >= n {
            r.rlim_cur = n;
            libc::setrlimit(libc::RLIMIT_NOFILE, &r);
        }
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut r);
    }
    r.rlim_cur >= n
}

/// 300 clients each write a file, then ask the server again after it has gone to sleep
/// (their requests ring the wake word), and read every other client's file; clients then
/// connect up to the daemon's limit, and the next one is refused with the reason.
#[test]
fn hundreds_of_clients_share_a_daemon() {
    let full = allow_descriptors(4 * MAX_CLIENTS as u64 + 256);
    let d = Daemon::start("many-clients", 64 << 20);
    let mut clients: Vec<Fs> = (0..300).map(|_| Fs::connect(&d.socket).unwrap()).collect();
    for (i, fs) in clients.iter().enumerate() {
        fs.write_file(format!("/c{i}"), i.to_string().as_bytes())
            .unwrap();
    }
    for (i, fs) in clients.iter().enumerate().rev().step_by(7) {
        // Long enough for the server to stop scanning and sleep.
        std::thread::sleep(Duration::from_millis(5));
        fs.statfs().unwrap();
        fs.mkdir(format!("/d{i}"), 0o755).unwrap();
    }
    let n = clients.len();
    for (i, fs) in clients.iter().enumerate() {
        let j = (i * 7 + 1) % n;
        assert_eq!(
            fs.read_file(format!("/c{j}")).unwrap(),
            j.to_string().as_bytes()
        );
    }
    if !full {
        eprintln!("descriptor limit too low to fill the daemon's {MAX_CLIENTS} places");
        return;
    }
    while clients.len() < MAX_CLIENTS {
        clients.push(Fs::connect(&d.socket).unwrap());
    }
    let last = clients.last().unwrap();
    last.write_file("/last", b"x").unwrap();
    let err = Fs::connect(&d.socket)
        .err()
        .expect("a client past the limit is refused");
    assert!(
        err.to_string()
            .contains(&format!("too many clients ({MAX_CLIENTS})")),
        "{err}"
    );
    // A place comes free when a client leaves.
    clients.truncate(MAX_CLIENTS - 1);
    let again = (0..200)
        .find_map(|_| {
            std::thread::sleep(Duration::from_millis(5));
            Fs::connect(&d.socket).ok()
        })
        .expect("a place came free");
    assert_eq!(again.read_file("/last").unwrap(), b"x");
}

//! A daemon with nothing to do stops using the processor: it scans the slots for a few
//! milliseconds after a request (the next one usually follows within them), then sleeps
//! until a client rings.

use super::Daemon;
use engram_core::Fs;
use std::time::Duration;

/// Processor time this process has used (every thread: the daemon runs in threads here).
fn cpu_time() -> Duration {
    // SAFETY: getrusage fills the rusage struct it is given.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above; RUSAGE_SELF counts every thread of the process.
    assert_eq!(unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) }, 0);
    let t = |v: libc::timeval| Duration::new(v.tv_sec as u64, v.tv_usec as u32 * 1000);
    t(u.ru_utime) + t(u.ru_stime)
}

/// Processor time used while this thread sleeps for `span`.
fn used_during(span: Duration) -> Duration {
    let before = cpu_time();
    std::thread::sleep(span);
    cpu_time() - before
}

#[test]
fn an_idle_daemon_sleeps_with_and_without_clients() {
    let span = Duration::from_millis(500);
    // A server that never slept would use the whole span; a sleeping one next to nothing.
    let most = span / 5;
    let d = Daemon::start("idle", 16 << 20);
    std::thread::sleep(Duration::from_millis(50));
    let alone = used_during(span);
    assert!(
        alone < most,
        "no client: {alone:?} of processor in {span:?}"
    );

    let fs = Fs::connect(&d.socket).unwrap();
    for round in 0..3 {
        fs.statfs().unwrap();
        std::thread::sleep(Duration::from_millis(50));
        let used = used_during(span);
        assert!(
            used < most,
            "round {round}, a client connected and silent: {used:?} of processor in {span:?}"
        );
    }
    // And it still answers at once after sleeping.
    fs.write_file("/after-sleep", b"x").unwrap();
    assert_eq!(fs.read_file("/after-sleep").unwrap(), b"x");
}

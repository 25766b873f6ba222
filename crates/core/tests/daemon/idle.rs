//! A daemon with nothing to do stops using the processor: it scans the slots for a few
//! milliseconds after a request (the next one usually follows within them), then sleeps
//! until a client rings.

use super::Daemon;
use engram_core::Fs;
use std::time::Duration;

/// Processor time the daemon's server loop has used (it runs on the thread `Daemon::start`
/// spawned; other tests' threads in this process are not counted).
fn server_time(d: &Daemon) -> Duration {
    use std::os::unix::thread::JoinHandleExt;
    let thread = d.thread.as_ref().expect("the daemon runs").as_pthread_t();
    let mut clock: libc::clockid_t = 0;
    // SAFETY: the thread is alive (joined only on stop); the call writes one clockid_t.
    assert_eq!(
        unsafe { libc::pthread_getcpuclockid(thread, &mut clock) },
        0
    );
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec.
    assert_eq!(unsafe { libc::clock_gettime(clock, &mut t) }, 0);
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

/// Processor time the server uses while this thread sleeps for `span`.
fn used_during(d: &Daemon, span: Duration) -> Duration {
    let before = server_time(d);
    std::thread::sleep(span);
    server_time(d) - before
}

#[test]
fn an_idle_daemon_sleeps_with_and_without_clients() {
    let span = Duration::from_millis(500);
    // A server that never slept would use the whole span; a sleeping one next to nothing.
    let most = span / 5;
    let d = Daemon::start("idle", 16 << 20);
    std::thread::sleep(Duration::from_millis(50));
    let alone = used_during(&d, span);
    assert!(
        alone < most,
        "no client: {alone:?} of processor in {span:?}"
    );

    let fs = Fs::connect(&d.socket).unwrap();
    for round in 0..3 {
        fs.statfs().unwrap();
        std::thread::sleep(Duration::from_millis(50));
        let used = used_during(&d, span);
        assert!(
            used < most,
            "round {round}, a client connected and silent: {used:?} of processor in {span:?}"
        );
    }
    // And it still answers at once after sleeping.
    fs.write_file("/after-sleep", b"x").unwrap();
    assert_eq!(fs.read_file("/after-sleep").unwrap(), b"x");
}

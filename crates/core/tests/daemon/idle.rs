//! A daemon with nothing to do stops using the processor: it scans the slots for a few
//! milliseconds after a request (the next one usually follows within them), then sleeps
//! until a client rings.

use super::Daemon;
use engram_core::Fs;
use std::time::Duration;

/// The processor-time clock of a thread.
fn thread_clock<T>(thread: &std::thread::JoinHandle<T>) -> libc::clockid_t {
    use std::os::unix::thread::JoinHandleExt;
    let mut clock: libc::clockid_t = 0;
    // SAFETY: the thread has not been joined, so its pthread_t is valid; the call writes
    // one clockid_t.
    assert_eq!(
        unsafe { libc::pthread_getcpuclockid(thread.as_pthread_t(), &mut clock) },
        0
    );
    clock
}

fn cpu_time_of(clock: libc::clockid_t) -> Duration {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec.
    assert_eq!(unsafe { libc::clock_gettime(clock, &mut t) }, 0);
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

/// Processor time the daemon's server loop has used (it runs on the thread `Daemon::start`
/// spawned; other tests' threads in this process are not counted).
fn server_time(d: &Daemon) -> Duration {
    cpu_time_of(thread_clock(d.thread.as_ref().expect("the daemon runs")))
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

/// A daemon stopped by a bare flag (`serve`, for embedders) wakes every 200 ms to look at
/// it; each of those wake-ups finds no request and sleeps again at once, without scanning
/// the slots for the window that follows a request.
#[test]
fn a_daemon_polling_its_stop_flag_sleeps_again_at_once() {
    use engram_core::daemon::{ServeOptions, serve};
    use std::sync::atomic::{AtomicBool, Ordering};
    let pool = std::path::PathBuf::from(format!(
        "/dev/shm/engram-daemon-{}-flag.pool",
        std::process::id()
    ));
    let socket = std::path::PathBuf::from(format!(
        "/tmp/engram-daemon-{}-flag.sock",
        std::process::id()
    ));
    let _ = std::fs::remove_file(&pool);
    let _ = std::fs::remove_file(&socket);
    Fs::mkfs(&pool, 16 << 20).unwrap();
    /// Removes the pool however the test ends.
    struct Remove(std::path::PathBuf);
    impl Drop for Remove {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }
    let _pool_file = Remove(pool.clone());
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    let (p, s, st) = (pool.clone(), socket.clone(), stop.clone());
    let thread = std::thread::spawn(move || {
        let opts = ServeOptions {
            socket: s,
            idle_exit: None,
            log_clients: false,
        };
        serve(&p, &opts, &st, &|_| {})
    });
    for _ in 0..2000 {
        if socket.exists() || thread.is_finished() {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(socket.exists(), "the daemon did not start listening");
    let fs = Fs::connect(&socket).unwrap();
    fs.statfs().unwrap();
    std::thread::sleep(Duration::from_millis(50));
    let clock = thread_clock(&thread);
    let before = cpu_time_of(clock);
    // Five wake-ups to look at the flag.
    std::thread::sleep(Duration::from_millis(1000));
    let used = cpu_time_of(clock) - before;
    assert!(
        used < Duration::from_millis(10),
        "{used:?} of processor in 1 s of polling"
    );
    drop(fs);
    stop.store(true, Ordering::SeqCst);
    thread.join().unwrap().unwrap();
}

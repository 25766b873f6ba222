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

/// Removes a pool file however the test ends.
struct Remove(std::path::PathBuf);

impl Drop for Remove {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// A new 16 MiB pool for test `name` and the path of a socket to serve it on (none there).
fn scratch_pool(name: &str) -> (std::path::PathBuf, std::path::PathBuf, Remove) {
    let id = std::process::id();
    let pool = std::path::PathBuf::from(format!("/dev/shm/engram-daemon-{id}-{name}.pool"));
    let socket = std::path::PathBuf::from(format!("/tmp/engram-daemon-{id}-{name}.sock"));
    let _ = std::fs::remove_file(&pool);
    let _ = std::fs::remove_file(&socket);
    Fs::mkfs(&pool, 16 << 20).unwrap();
    (pool.clone(), socket, Remove(pool))
}

/// A daemon stopped by a bare flag (`serve`, for embedders) wakes every 200 ms to look at
/// it; each of those wake-ups finds no request and sleeps again at once, without scanning
/// the slots for the window that follows a request.
#[test]
fn a_daemon_polling_its_stop_flag_sleeps_again_at_once() {
    use engram_core::daemon::{ServeOptions, serve};
    use std::sync::atomic::{AtomicBool, Ordering};
    let (pool, socket, _pool_file) = scratch_pool("flag");
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

/// A daemon with `idle_exit` (`engram run`'s) stays while a process maps the pool without
/// being connected, as a client's forked child does before its first call of its own (it
/// holds the client lock of the description it inherited), and exits once none does.
/// Before, it exited once the last client left, and such a child's later calls failed with
/// EIO (no daemon) while nobody could open the pool (still mapped by a stopped daemon's
/// client).
#[test]
fn an_idle_daemon_stays_while_a_process_still_maps_the_pool() {
    use engram_core::daemon::{ServeOptions, Stop, serve_until};
    use std::sync::{Arc, Mutex};
    let (pool, socket, _pool_file) = scratch_pool("held");
    let lines = Arc::new(Mutex::new(Vec::<String>::new()));
    let said = |what: &str| lines.lock().unwrap().iter().any(|l| l.contains(what));
    let stop = Arc::new(Stop::new());
    let (p, s, st, l) = (pool.clone(), socket.clone(), stop.clone(), lines.clone());
    let thread = std::thread::spawn(move || {
        let opts = ServeOptions {
            socket: s,
            // Long enough for the connect below on a loaded machine (the idle period runs
            // from the start until a client comes).
            idle_exit: Some(Duration::from_secs(3)),
            log_clients: true,
        };
        serve_until(&p, &opts, &st, &|line| {
            eprintln!("daemon: {line}");
            l.lock().unwrap().push(line.to_owned());
        })
    });
    /// Stops the daemon if the test fails before it exits by itself.
    struct StopOnDrop(Arc<Stop>);
    impl Drop for StopOnDrop {
        fn drop(&mut self) {
            self.0.stop();
        }
    }
    let _stop = StopOnDrop(stop);
    let limit = std::time::Instant::now() + Duration::from_secs(60);
    while !socket.exists() && !thread.is_finished() && std::time::Instant::now() < limit {
        std::thread::sleep(Duration::from_millis(5));
    }
    let fs = Fs::connect(&socket).unwrap();
    fs.write_file("/kept", b"x").unwrap();
    // A second open file description of the pool file with the client lock, as a client's
    // forked child holds it (it shares its parent's description) after the parent left.
    let child = engram_pmem::Pool::open(&pool).unwrap();
    child.hold_as_client().unwrap();
    drop(fs);
    // Past the idle period it stays, and says why.
    let limit = std::time::Instant::now() + Duration::from_secs(60);
    while !said("staying") && !thread.is_finished() && std::time::Instant::now() < limit {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(
        !thread.is_finished() && said("staying"),
        "the daemon left while the pool was mapped: {:?}",
        lines.lock().unwrap()
    );
    // Still serving: a client comes and goes.
    let fs = Fs::connect(&socket).unwrap();
    assert_eq!(fs.read_file("/kept").unwrap(), b"x");
    drop(fs);
    // Once the last mapping goes, the next idle period ends it.
    drop(child);
    let limit = std::time::Instant::now() + Duration::from_secs(60);
    while !thread.is_finished() && std::time::Instant::now() < limit {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(
        thread.is_finished(),
        "the daemon did not exit: {:?}",
        lines.lock().unwrap()
    );
    thread.join().unwrap().unwrap();
    assert!(said("idle with no clients: exiting"));
    // It said it stays once per idle stretch (two: before and after the second client).
    let staying = lines
        .lock()
        .unwrap()
        .iter()
        .filter(|l| l.contains("staying"))
        .count();
    assert!((1..=2).contains(&staying), "{:?}", lines.lock().unwrap());
    // And the pool can be opened again: no client of a stopped daemon maps it.
    let again = engram_pmem::Pool::open(&pool).unwrap();
    again.try_lock_exclusive().unwrap();
}

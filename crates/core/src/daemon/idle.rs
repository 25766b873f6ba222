//! How the server waits for the next request once a scan of the slots finds none: scan on
//! for a while, or sleep until a client rings.
//!
//! A sleeping server costs the next request its wake-up: 16-32 µs on this VM (an idle
//! virtual CPU halted), and milliseconds when the cores are busy and the woken server waits
//! for one. SQLite with eight writer processes (`scripts/sqlite-stress.sh`) sends requests
//! in bursts a few microseconds apart with gaps of 0.1-1 ms between its transactions; a
//! server that slept in those gaps made a fifth of all requests pay a wake-up.
//!
//! - **Several processors:** the server scans for `SPIN_WINDOW` after its last request
//!   without giving its processor up, then sleeps. A yield would hand the processor to
//!   whatever else is runnable there for its whole slice, while the requests come from
//!   the other cores.
//! - **One processor** (the affinity mask or CPU quota allows one): every client shares it,
//!   so the scan yields every `YIELD_EVERY` scans once idle for `SPIN_TIME`, and sleeps
//!   after `ALONE_SPINS` scans, or at once when a yield shows that another thread wanted
//!   the processor. Having answered a client that waits for its reply on the server's
//!   processor (the client says so in its slot), the server yields once: that client
//!   cannot run otherwise.

use super::client::SPIN_TIME;
use std::time::{Duration, Instant};

/// Scanning time after the last request, with several processors.
const SPIN_WINDOW: Duration = Duration::from_millis(5);
/// With one processor: empty scans before the server sleeps, and how often it yields.
const ALONE_SPINS: u32 = 2000;
const YIELD_EVERY: u32 = 64;
/// With one processor, a yield that lasts this long ran another thread (an uncontended
/// one returns in about 0.5 µs here): the server then sleeps at once.
const CONTENDED_YIELD: Duration = Duration::from_micros(20);
/// The clock is read once per this many empty scans.
const CLOCK_EVERY: u32 = 64;

pub(super) struct Idle {
    /// The server has one processor to itself and its clients.
    alone: bool,
    scans: u32,
    since: Option<Instant>,
    /// The server woke from a sleep and has served nothing since (a timeout, a client
    /// connecting): it sleeps again at once rather than scan for a window first.
    woke_idle: bool,
}

impl Idle {
    /// For this thread's processors (its affinity mask and CPU quota).
    pub fn new() -> Idle {
        Idle::with(std::thread::available_parallelism().map_or(true, |n| n.get() == 1))
    }

    fn with(alone: bool) -> Idle {
        Idle {
            alone,
            scans: 0,
            since: None,
            woke_idle: false,
        }
    }

    /// Whether the server yields to the clients that wait on its processor (only when it has
    /// one: with several, the yield handed the processor to whatever else was runnable there,
    /// and two client processes overwriting pages on two cores got half their throughput).
    pub fn yields_to_clients(&self) -> bool {
        self.alone
    }

    /// A scan served requests. `client_here`: one of them was from a client waiting on this
    /// processor (only looked for when `yields_to_clients`), which gets it now.
    pub fn served(&mut self, client_here: bool) {
        self.scans = 0;
        self.since = None;
        self.woke_idle = false;
        if client_here {
            std::thread::yield_now();
        }
    }

    /// The server woke from a sleep.
    pub fn woke(&mut self) {
        self.woke_idle = true;
    }

    /// A scan found no request: true to scan again, false to sleep.
    pub fn scan_again(&mut self) -> bool {
        if self.woke_idle {
            return false;
        }
        self.scans += 1;
        let go_on = if self.alone {
            self.scan_again_alone()
        } else {
            !self.scans.is_multiple_of(CLOCK_EVERY)
                || self.since.get_or_insert_with(Instant::now).elapsed() < SPIN_WINDOW
        };
        if go_on {
            std::hint::spin_loop();
        } else {
            self.scans = 0;
            self.since = None;
        }
        go_on
    }

    fn scan_again_alone(&mut self) -> bool {
        if self.scans >= ALONE_SPINS {
            return false;
        }
        if !self.scans.is_multiple_of(YIELD_EVERY)
            || self.since.get_or_insert_with(Instant::now).elapsed() < SPIN_TIME
        {
            return true;
        }
        let yielded = Instant::now();
        std::thread::yield_now();
        yielded.elapsed() < CONTENDED_YIELD
    }
}

/// The processor this thread runs on, as a slot's `yielding_on` word carries it (never 0).
pub(crate) fn yielding_mark() -> u32 {
    // SAFETY: sched_getcpu takes no arguments (a vDSO call, about 4 ns here).
    let cpu = unsafe { libc::sched_getcpu() };
    cpu.max(0) as u32 + 1
}

/// Whether a `yielding_on` word names this thread's processor.
pub(super) fn yields_here(yielding_on: u32) -> bool {
    yielding_on == yielding_mark()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Scans until the policy says sleep; returns how many and how long that took.
    fn until_sleep(idle: &mut Idle) -> (u64, Duration) {
        let start = Instant::now();
        let mut n = 0u64;
        while idle.scan_again() {
            n += 1;
            assert!(start.elapsed() < Duration::from_secs(60), "never sleeps");
        }
        (n, start.elapsed())
    }

    #[test]
    fn with_several_processors_the_server_scans_through_the_window_then_sleeps() {
        let mut idle = Idle::with(false);
        for _ in 0..3 {
            let (_, took) = until_sleep(&mut idle);
            assert!(took >= SPIN_WINDOW, "slept after {took:?}");
        }
        // A request served starts the window again.
        idle.served(false);
        assert!(until_sleep(&mut idle).1 >= SPIN_WINDOW);
    }

    #[test]
    fn a_server_woken_without_a_request_sleeps_again_at_once() {
        for alone in [false, true] {
            let mut idle = Idle::with(alone);
            idle.woke();
            assert!(!idle.scan_again(), "alone: {alone}");
            assert!(!idle.scan_again(), "alone: {alone}");
            // A request served: the next idle spell scans again.
            idle.served(false);
            assert!(idle.scan_again(), "alone: {alone}");
        }
    }

    #[test]
    fn with_one_processor_the_server_sleeps_after_a_bounded_scan() {
        let mut idle = Idle::with(true);
        for _ in 0..3 {
            let (n, _) = until_sleep(&mut idle);
            assert!(n < ALONE_SPINS as u64, "{n} scans");
        }
    }

    /// The processors this thread may run on.
    fn allowed_cpus() -> Vec<usize> {
        // SAFETY: cpu_set_t is plain data, which sched_getaffinity fills.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            assert_eq!(
                libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set),
                0
            );
            (0..libc::CPU_SETSIZE as usize)
                .filter(|&c| libc::CPU_ISSET(c, &set))
                .collect()
        }
    }

    /// Run `f` with this thread pinned to processor `cpu`, then restore its affinity.
    fn on_cpu<T>(cpu: usize, f: impl FnOnce() -> T) -> T {
        let size = std::mem::size_of::<libc::cpu_set_t>();
        // SAFETY: cpu_set_t is plain data; sched_{get,set}affinity fill or read one.
        unsafe {
            let mut old: libc::cpu_set_t = std::mem::zeroed();
            assert_eq!(libc::sched_getaffinity(0, size, &mut old), 0);
            let mut one: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpu, &mut one);
            assert_eq!(libc::sched_setaffinity(0, size, &one), 0);
            let r = f();
            libc::sched_setaffinity(0, size, &old);
            r
        }
    }

    #[test]
    fn a_yielding_client_is_recognised_on_its_own_processor_only() {
        let cpus = allowed_cpus();
        let marks: Vec<u32> = cpus
            .iter()
            .take(2)
            .map(|&c| {
                on_cpu(c, || {
                    let mark = yielding_mark();
                    assert_eq!(mark, c as u32 + 1);
                    assert!(yields_here(mark));
                    assert!(!yields_here(0));
                    mark
                })
            })
            .collect();
        if let [a, b] = marks[..] {
            on_cpu(cpus[0], || assert!(yields_here(a) && !yields_here(b)));
            on_cpu(cpus[1], || assert!(yields_here(b) && !yields_here(a)));
        }
    }
}

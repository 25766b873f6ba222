//! Running an operation on N threads for a fixed time or in rounds, and the DRAM memcpy
//! references measured the same way.

use std::io;
use std::sync::Barrier;
use std::time::{Duration, Instant};

/// How long a time-bounded measurement runs, after a warm-up of `warmup`.
#[derive(Clone, Copy, Debug)]
pub struct Budget {
    pub duration: Duration,
    pub warmup: Duration,
}

/// A page-aligned byte buffer.
pub struct AlignedBuf {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the buffer is plain owned memory; access goes through &/&mut.
unsafe impl Send for AlignedBuf {}
// SAFETY: as above.
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    pub fn new(len: usize, fill: u8) -> AlignedBuf {
        let layout = std::alloc::Layout::from_size_align(len.max(1), 4096).expect("layout");
        // SAFETY: non-zero size; checked for null below.
        let ptr = unsafe { std::alloc::alloc(layout) };
        if ptr.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        // SAFETY: `ptr` points to `len` writable bytes.
        unsafe { ptr.write_bytes(fill, len) };
        AlignedBuf { ptr, len }
    }
}

impl std::ops::Deref for AlignedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: `ptr` is valid for `len` initialised bytes while self lives.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl std::ops::DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as above, and &mut self gives exclusive access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        let layout = std::alloc::Layout::from_size_align(self.len.max(1), 4096).expect("layout");
        // SAFETY: allocated in `new` with this layout.
        unsafe { std::alloc::dealloc(self.ptr, layout) };
    }
}

/// One thread's state in a measurement.
pub struct Worker {
    pub tid: usize,
    pub threads: usize,
    pub buf: AlignedBuf,
    rng: u64,
}

impl Worker {
    fn new(tid: usize, threads: usize, buf_len: usize) -> Worker {
        Worker {
            tid,
            threads,
            buf: AlignedBuf::new(buf_len, 0x5a ^ tid as u8),
            rng: 0x9e37_79b9_7f4a_7c15 ^ ((tid as u64 + 1) << 32),
        }
    }

    /// A pseudo-random number below `n` (xorshift).
    pub fn rand(&mut self, n: usize) -> usize {
        let mut x = self.rng;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng = x;
        (x % n.max(1) as u64) as usize
    }

    /// A random index in this thread's share of `0..n` (k ≡ tid mod threads), so that
    /// threads that delete and recreate files never pick the same one.
    pub fn rand_own(&mut self, n: usize) -> usize {
        let per = (n / self.threads).max(1);
        (self.rand(per) * self.threads + self.tid).min(n.saturating_sub(1))
    }
}

/// The block a thread touches at step `i` in a file of `blocks` blocks: a stride coprime
/// to the (power-of-two) block count visits every block in a scattered order.
pub fn block(i: u64, blocks: u64) -> u64 {
    (i.wrapping_mul(97)) % blocks
}

/// A measurement is cut into this many slices; each thread reports the median of its
/// slices' rates, so that one slice in which the thread was preempted (the machine is
/// shared) does not decide the result.
pub const SLICES: usize = 5;

fn median(mut rates: Vec<f64>) -> f64 {
    if rates.is_empty() {
        return 0.0;
    }
    rates.sort_by(f64::total_cmp);
    rates[rates.len() / 2]
}

/// The clock of a time-bounded measurement, cut into `SLICES` slices.
struct Slices {
    start: Instant,
    slice: std::time::Duration,
    slice_start: Instant,
    rates: Vec<f64>,
}

impl Slices {
    fn new(duration: Duration) -> Slices {
        let now = Instant::now();
        Slices {
            start: now,
            slice: duration / SLICES as u32,
            slice_start: now,
            rates: Vec::with_capacity(SLICES),
        }
    }

    /// Close the slice if its time is up (taking its units); true when all are done.
    fn tick(&mut self, units: &mut u64) -> bool {
        let now = Instant::now();
        let end = self.start + self.slice * (self.rates.len() as u32 + 1);
        if now >= end {
            let secs = (now - self.slice_start).as_secs_f64().max(1e-9);
            self.rates.push(std::mem::take(units) as f64 / secs);
            self.slice_start = now;
        }
        self.rates.len() >= SLICES
    }

    fn median(self) -> f64 {
        median(self.rates)
    }
}

/// Run `body` on `threads` threads, each with its own `Worker` and all sharing one barrier
/// (each waits on it once, when its measurement starts); returns the sum of their rates.
fn on_threads<F>(threads: usize, buf_len: usize, body: F) -> io::Result<f64>
where
    F: Fn(&mut Worker, &Barrier) -> io::Result<f64> + Sync,
{
    let barrier = Barrier::new(threads);
    let rates = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|tid| {
                let (barrier, body) = (&barrier, &body);
                s.spawn(move || body(&mut Worker::new(tid, threads, buf_len), barrier))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err(io::Error::other("panic"))))
            .collect::<Vec<_>>()
    });
    rates.into_iter().sum()
}

/// Run `op` on `threads` threads for the budget's duration; returns the units it reported
/// per second (the median of its slices, see `SLICES`), summed over the threads.
pub fn timed<F>(threads: usize, buf_len: usize, b: Budget, op: F) -> io::Result<f64>
where
    F: Fn(&mut Worker, u64) -> io::Result<u64> + Sync,
{
    on_threads(threads, buf_len, |w, barrier| {
        let mut i = 0u64;
        let warm_end = Instant::now() + b.warmup;
        let warm = (|| -> io::Result<()> {
            while Instant::now() < warm_end {
                op(w, i)?;
                i += 1;
            }
            Ok(())
        })();
        barrier.wait();
        warm?;
        let mut slices = Slices::new(b.duration);
        let mut units = 0u64;
        loop {
            for _ in 0..4 {
                units += op(w, i)?;
                i += 1;
            }
            if slices.tick(&mut units) {
                break;
            }
        }
        Ok(slices.median())
    })
}

/// What a round of `rounds` does on one thread: `setup` (not timed) makes the state the
/// round's operations need, `op` (timed) is called `count` times with `i` = 0..count, and
/// `teardown` (not timed) undoes what they did.
pub struct Round<Setup, Op, Teardown> {
    pub count: usize,
    pub setup: Setup,
    pub op: Op,
    pub teardown: Teardown,
}

/// An operation that uses up something (an append grows a file, a create grows a
/// directory), so that it cannot simply run for a while, measured in rounds: each thread
/// runs one round to warm up, then rounds for the budget's duration. Returns the units per second (the median of the rounds' rates), summed over the
/// threads.
///
/// These were measured once, a fixed count: on a fast target a few milliseconds (20,000
/// creates, 16,384 appends of 4 KiB, 256 MiB in 1 MiB appends), which the host's pauses of
/// that length decided in one run in five (docs/performance.md).
pub fn rounds<S, Setup, Op, Teardown>(
    threads: usize,
    buf_len: usize,
    b: Budget,
    round: Round<Setup, Op, Teardown>,
) -> io::Result<f64>
where
    Setup: Fn(&mut Worker) -> io::Result<S> + Sync,
    Op: Fn(&mut Worker, &mut S, u64) -> io::Result<u64> + Sync,
    Teardown: Fn(&mut Worker, S) -> io::Result<()> + Sync,
{
    let one = |w: &mut Worker| -> io::Result<f64> {
        let mut state = (round.setup)(w)?;
        let t0 = Instant::now();
        let mut units = 0u64;
        let ran = (|| -> io::Result<()> {
            for i in 0..round.count as u64 {
                units += (round.op)(w, &mut state, i)?;
            }
            Ok(())
        })();
        let secs = t0.elapsed().as_secs_f64().max(1e-9);
        (round.teardown)(w, state)?;
        ran?;
        Ok(units as f64 / secs)
    };
    on_threads(threads, buf_len, |w, barrier| {
        let warm = one(w);
        barrier.wait();
        warm?;
        let mut rates = Vec::new();
        let mut timed = Duration::ZERO;
        while timed < b.duration {
            let t0 = Instant::now();
            rates.push(one(w)?);
            // The setup and teardown count too, so that a slow teardown cannot make a
            // run of many rounds last much longer than the budget.
            timed += t0.elapsed();
        }
        Ok(median(rates))
    })
}

/// 4 KiB copies per second out of a 1 MiB DRAM buffer into a 4 KiB one, in the block order
/// the 4 KiB read benchmarks use: what a read costs with nothing but the copy.
pub fn memcpy_4k(threads: usize, b: Budget) -> io::Result<f64> {
    let src = AlignedBuf::new(1 << 20, 7);
    timed(threads, 4096, b, |w, i| {
        let off = block(i, 256) as usize * 4096;
        w.buf.copy_from_slice(&src[off..off + 4096]);
        std::hint::black_box(&w.buf[..]);
        Ok(1)
    })
}

/// Bytes per second of `chunk`-sized copies into a 64 MiB DRAM buffer per thread (larger
/// than the caches): the machine's memory-copy bandwidth.
pub fn memcpy_bandwidth(threads: usize, chunk: usize, b: Budget) -> io::Result<f64> {
    const DEST: usize = 64 << 20;
    let dests: Vec<std::sync::Mutex<AlignedBuf>> = (0..threads)
        .map(|_| std::sync::Mutex::new(AlignedBuf::new(DEST, 0)))
        .collect();
    timed(threads, chunk, b, |w, i| {
        let mut d = dests[w.tid].lock().unwrap_or_else(|e| e.into_inner());
        let off = (i as usize * chunk) % (DEST - DEST % chunk);
        d[off..off + chunk].copy_from_slice(&w.buf);
        std::hint::black_box(&d[off]);
        Ok(chunk as u64)
    })
}

/// Nanoseconds per one-way hand-off of one cache line between two threads (each spinning
/// until the other has written it), over at most `trips` round trips and at most
/// `HANDOFF_TIME`: the host's cross-core latency. On a virtual machine it moves with where
/// the host places the virtual CPUs, and every commit through the daemon crosses between
/// the cores several times (docs/performance.md), so a run reports it at its start and end.
/// None with fewer than two CPUs (the two threads would take turns on one, each hand-off a
/// scheduler tick).
pub fn handoff_ns(trips: u64) -> Option<f64> {
    /// The line the two threads hand over, alone in its cache line.
    #[repr(align(64))]
    struct Line(std::sync::atomic::AtomicU64);
    use std::sync::atomic::Ordering::{Acquire, Release};
    if std::thread::available_parallelism().map_or(1, |n| n.get()) < 2 {
        return None;
    }
    let line = Line(std::sync::atomic::AtomicU64::new(0));
    let flag = &line.0;
    // Set when the measurement ends; a line of its own, read only while waiting. (A STOP
    // value written into `flag` could be overwritten by a reply already under way, and the
    // other thread then waited for ever.)
    let stop_line = Line(std::sync::atomic::AtomicU64::new(0));
    let stop = &stop_line.0;
    let (took, done) = std::thread::scope(|s| {
        s.spawn(|| {
            let mut want = 1;
            loop {
                match flag.load(Acquire) {
                    v if v == want => {
                        flag.store(v + 1, Release);
                        want += 2;
                    }
                    _ if stop.load(Acquire) != 0 => return,
                    _ => std::hint::spin_loop(),
                }
            }
        });
        let started = Instant::now();
        let mut done = 0;
        'trips: for i in 0..trips {
            flag.store(2 * i + 1, Release);
            let mut spins = 0u32;
            while flag.load(Acquire) != 2 * i + 2 {
                spins = spins.wrapping_add(1);
                // The clock only now and then, and only while waiting: a host that stops
                // the other thread's CPU must not hold the run.
                if spins.is_multiple_of(4096) && started.elapsed() > HANDOFF_TIME {
                    break 'trips;
                }
                std::hint::spin_loop();
            }
            done = i + 1;
        }
        let took = started.elapsed();
        stop.store(1, Release);
        (took, done)
    });
    (done > 0).then(|| took.as_nanos() as f64 / done as f64 / 2.0)
}

/// The longest a `handoff_ns` measurement runs.
pub const HANDOFF_TIME: Duration = Duration::from_millis(200);

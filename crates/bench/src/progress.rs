//! A progress bar on stderr: redrawn in place on a terminal, one line per step otherwise.

use std::io::Write;
use std::time::Instant;

pub struct Progress {
    total: usize,
    done: usize,
    tty: bool,
    start: Instant,
}

impl Progress {
    pub fn new(total: usize) -> Progress {
        // SAFETY: isatty has no preconditions.
        let tty = unsafe { libc::isatty(2) } == 1;
        Progress {
            total,
            done: 0,
            tty,
            start: Instant::now(),
        }
    }

    /// Announce the next measurement.
    pub fn step(&mut self, bench: &str, target: &str, threads: usize) {
        self.done += 1;
        let frac = self.done as f64 / self.total.max(1) as f64;
        const WIDTH: usize = 24;
        let filled = ((frac * WIDTH as f64) as usize).min(WIDTH);
        let bar = format!("{}{}", "#".repeat(filled), "-".repeat(WIDTH - filled));
        let line = format!(
            "[{bar}] {:>4}/{} {:>5.1}s  {bench} · {target} · {threads} thr",
            self.done,
            self.total,
            self.start.elapsed().as_secs_f64()
        );
        let mut e = std::io::stderr().lock();
        if self.tty {
            let _ = write!(e, "\r\x1b[K{line}");
        } else {
            let _ = writeln!(e, "{line}");
        }
        let _ = e.flush();
    }

    /// Erase the bar before printing a table.
    pub fn clear(&mut self) {
        if self.tty {
            let _ = write!(std::io::stderr(), "\r\x1b[K");
        }
    }
}

//! Recording mode: a log of every flush and fence, from which the crash
//! harness builds the images a real machine could leave behind.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::flush::CACHE_LINE;

/// One persistence event, in program order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// A cache line was written back (or written with non-temporal stores):
    /// `line` is the byte offset of the line (a multiple of 64) and `data` its
    /// 64 bytes at flush time.
    Flush { line: u64, data: [u8; 64] },
    /// A store fence: every earlier `Flush` is durable once this completes.
    Fence,
    /// A caller-chosen marker (e.g. operation start or end).
    Mark(u64),
}

/// The base image at the start of recording and the events since.
#[derive(Clone, Debug)]
pub struct Recording {
    pub base: Vec<u8>,
    pub events: Vec<Event>,
}

impl Recording {
    /// Index of the last `Fence` among `events[..upto]`, if any.
    pub fn last_fence_before(&self, upto: usize) -> Option<usize> {
        let upto = upto.min(self.events.len());
        self.events[..upto].iter().rposition(|e| *e == Event::Fence)
    }

    /// The image a crash right before event `upto` would leave if exactly the
    /// lines flushed before the last fence preceding `upto` are durable:
    /// `base` with those `Flush` events applied in order.
    pub fn durable_image_at(&self, upto: usize) -> Vec<u8> {
        let mut image = self.base.clone();
        if let Some(fence) = self.last_fence_before(upto) {
            for event in &self.events[..fence] {
                if let Event::Flush { line, data } = event {
                    apply_line(&mut image, *line, data);
                }
            }
        }
        image
    }
}

/// Copy a recorded line into `image`, clipped to the image's length.
pub(crate) fn apply_line(image: &mut [u8], line: u64, data: &[u8; 64]) {
    let Ok(start) = usize::try_from(line) else {
        return;
    };
    if start >= image.len() {
        return;
    }
    let n = (image.len() - start).min(data.len());
    image[start..start + n].copy_from_slice(&data[..n]);
}

/// The recording state of one pool.
#[derive(Debug, Default)]
pub(crate) struct Recorder {
    on: AtomicBool,
    log: Mutex<Option<Recording>>,
}

impl Recorder {
    /// Cheap gate checked on every flush and fence.
    #[inline]
    pub(crate) fn is_on(&self) -> bool {
        self.on.load(Ordering::Relaxed)
    }

    fn log(&self) -> std::sync::MutexGuard<'_, Option<Recording>> {
        self.log.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn start(&self, base: Vec<u8>) {
        *self.log() = Some(Recording {
            base,
            events: Vec::new(),
        });
        self.on.store(true, Ordering::Relaxed);
    }

    pub(crate) fn stop(&self) -> Option<Recording> {
        let mut log = self.log();
        self.on.store(false, Ordering::Relaxed);
        log.take()
    }

    pub(crate) fn push(&self, event: Event) {
        if let Some(rec) = self.log().as_mut() {
            rec.events.push(event);
        }
    }

    /// Log a `Flush` for every cache line overlapping `[off, off + len)`,
    /// reading each line's current contents through `line_at`.
    pub(crate) fn push_lines(&self, off: u64, len: u64, line_at: impl Fn(u64) -> [u8; 64]) {
        if len == 0 {
            return;
        }
        let mut log = self.log();
        let Some(rec) = log.as_mut() else {
            return;
        };
        let mut line = off & !(CACHE_LINE - 1);
        while line < off + len {
            rec.events.push(Event::Flush {
                line,
                data: line_at(line),
            });
            line += CACHE_LINE;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(line: u64, byte: u8) -> Event {
        Event::Flush {
            line,
            data: [byte; 64],
        }
    }

    #[test]
    fn durable_image_uses_only_fenced_flushes() {
        let rec = Recording {
            base: vec![0; 256],
            events: vec![
                Event::Mark(1),
                line(0, 1),
                line(64, 2),
                Event::Fence,
                line(0, 3),
                Event::Mark(2),
                Event::Fence,
                line(128, 4),
            ],
        };
        assert_eq!(rec.durable_image_at(0), vec![0; 256]);
        assert_eq!(rec.durable_image_at(3), vec![0; 256]);
        let mut want = vec![0; 256];
        want[..64].fill(1);
        want[64..128].fill(2);
        for upto in 4..=6 {
            assert_eq!(rec.durable_image_at(upto), want, "upto {upto}");
        }
        want[..64].fill(3);
        assert_eq!(rec.durable_image_at(7), want);
        assert_eq!(rec.durable_image_at(8), want);
        assert_eq!(rec.durable_image_at(100), want);
        assert_eq!(rec.last_fence_before(100), Some(6));
    }

    #[test]
    fn lines_are_clipped_to_the_image() {
        let mut image = vec![0u8; 100];
        apply_line(&mut image, 64, &[9; 64]);
        apply_line(&mut image, 128, &[9; 64]);
        assert!(image[..64].iter().all(|&b| b == 0));
        assert!(image[64..].iter().all(|&b| b == 9));
    }
}

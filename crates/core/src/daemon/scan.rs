//! Which clients the server loop looks at in a scan. A client that has asked nothing for a
//! while is idle: the loop reads only its doorbell (one line, which the client changes at
//! every request) and looks at its slots again once that has moved. Each slot is a page of
//! its own, so scanning every slot of hundreds of quiet clients (a shell's children, the
//! backends of a database) took each request through thousands of lines and pages.

use crate::fasthash::FastMap;
use crate::perm::Creds;
use crate::server::ClientId;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// A client with no request for this long becomes idle.
const IDLE_AFTER: Duration = Duration::from_millis(2);
/// Scans between two looks at the clock (a scan of an empty slot takes nanoseconds).
const SCANS_PER_CLOCK: u32 = 256;

pub(super) struct Client {
    pub id: ClientId,
    pub index: usize,
    pub creds: Creds,
    /// Its doorbell as last read, while idle.
    idle_at_bell: Option<u32>,
    /// When a scan last found a request of it (to the clock's last look).
    last_request: Instant,
    /// Its failed requests logged so far (`Client::log_failure`).
    failures_logged: u32,
}

/// Failed requests logged per client: a client sending forged or garbled requests by the
/// thousand grew the log by about 60 bytes each (found by fuzzing the daemon).
const FAILURES_LOGGED: u32 = 20;

impl Client {
    /// Whether to log this client's latest failed request: the first `FAILURES_LOGGED`,
    /// and once a line saying the rest are not (`what` is then replaced by that line).
    pub fn log_failure(&mut self, what: String) -> Option<String> {
        self.failures_logged = self.failures_logged.saturating_add(1);
        match self.failures_logged {
            n if n < FAILURES_LOGGED => Some(what),
            FAILURES_LOGGED => Some(format!("{what}; its further failures are not logged")),
            _ => None,
        }
    }

    /// Whether to look at its slots in this scan: always while active; while idle, once
    /// its doorbell has moved (it becomes active).
    pub fn due(&mut self, bell: &AtomicU32) -> bool {
        match self.idle_at_bell {
            None => true,
            Some(b) if bell.load(Ordering::SeqCst) == b => false,
            Some(_) => {
                self.idle_at_bell = None;
                true
            }
        }
    }
}

#[derive(Default)]
pub(super) struct Clients {
    pub list: Vec<Client>,
    scans: u32,
    clock: Option<Instant>,
}

/// What one scan of a client's slots needs to know to end it (`Clients::scanned`).
pub(super) struct Look {
    /// The doorbell, read before the slots if the client may become idle after this scan.
    bell_before: Option<u32>,
}

impl Clients {
    /// The clients connected now (`live`: id, place, credentials); those already known
    /// keep their state, new ones start active.
    pub fn refresh(&mut self, live: impl Iterator<Item = (ClientId, usize, Creds)>) {
        let now = self.clock.unwrap_or_else(Instant::now);
        // By id: with hundreds of clients, a search of the old list for each was quadratic.
        let mut old: FastMap<ClientId, Client> = std::mem::take(&mut self.list)
            .into_iter()
            .map(|c| (c.id, c))
            .collect();
        self.list = live
            .map(|(id, index, creds)| {
                old.remove(&id).unwrap_or(Client {
                    id,
                    index,
                    creds,
                    idle_at_bell: None,
                    last_request: now,
                    failures_logged: 0,
                })
            })
            .collect();
    }

    /// Start a scan: every `SCANS_PER_CLOCK` scans the clock is read, and clients quiet
    /// since `IDLE_AFTER` may become idle in this one.
    pub fn start_scan(&mut self) -> Option<Instant> {
        self.scans = self.scans.wrapping_add(1);
        if !self.scans.is_multiple_of(SCANS_PER_CLOCK) && self.clock.is_some() {
            return None;
        }
        let now = Instant::now();
        self.clock = Some(now);
        Some(now)
    }

    /// Before scanning `c`'s slots: read its doorbell if it may become idle after the scan.
    /// Read first, so that a request posted after the read moves it past the value kept
    /// (and one posted before is in the slots the scan reads).
    pub fn before(c: &Client, clock: Option<Instant>, bell: &AtomicU32) -> Look {
        let quiet = clock.is_some_and(|now| now.duration_since(c.last_request) >= IDLE_AFTER);
        Look {
            bell_before: quiet.then(|| bell.load(Ordering::SeqCst)),
        }
    }

    /// After scanning `c`'s slots: `found` whether a request was there.
    pub fn scanned(&self, c: &mut Client, look: Look, found: bool) {
        if found {
            c.last_request = self.clock.unwrap_or_else(Instant::now);
        } else if let Some(b) = look.bell_before {
            c.idle_at_bell = Some(b);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_s_failures_are_logged_twenty_times_then_no_more() {
        let mut c = Clients {
            list: Vec::new(),
            scans: 0,
            clock: None,
        };
        c.refresh([(7, 0, Creds::root())].into_iter());
        let client = &mut c.list[0];
        let lines: Vec<String> = (0..1000)
            .filter_map(|i| client.log_failure(format!("failure {i}")))
            .collect();
        assert_eq!(lines.len(), FAILURES_LOGGED as usize);
        assert_eq!(lines[0], "failure 0");
        assert!(lines[19].starts_with("failure 19;"), "{}", lines[19]);
        assert!(lines[19].ends_with("not logged"), "{}", lines[19]);
    }
}

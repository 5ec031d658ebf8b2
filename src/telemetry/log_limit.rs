//! Log lines for events that repeat as fast as calls come in a steady failure (every call on a
//! store that fails, every match no game server takes): the first is logged, then at most one
//! line per interval, each counting the events since the line before. The metrics count every
//! event; the log says that it goes on, and how much.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// At most one log line per interval for one kind of event.
pub struct LogLimit {
    every: Duration,
    state: Mutex<Since>,
}

/// The last line, and the events counted since it.
struct Since {
    logged: Option<Instant>,
    events: u64,
}

impl LogLimit {
    /// At most one line per `every`.
    pub const fn new(every: Duration) -> Self {
        Self {
            every,
            state: Mutex::new(Since {
                logged: None,
                events: 0,
            }),
        }
    }

    /// Counts `events` at `now`. When a line is due (the first, or `every` after the last),
    /// the events it reports: these and those since the last line, which were not logged.
    pub fn note(&self, events: u64, now: Instant) -> Option<u64> {
        let mut since = self.state.lock().unwrap_or_else(|p| p.into_inner());
        since.events += events;
        let due = since
            .logged
            .is_none_or(|at| now.saturating_duration_since(at) >= self.every);
        if !due || since.events == 0 {
            return None;
        }
        since.logged = Some(now);
        Some(std::mem::take(&mut since.events))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_event_is_logged_then_one_line_per_interval_counts_the_rest() {
        let limit = LogLimit::new(Duration::from_secs(10));
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        assert_eq!(limit.note(1, at(0)), Some(1), "the first at once");
        assert_eq!(limit.note(1, at(1)), None);
        assert_eq!(limit.note(5, at(9)), None);
        assert_eq!(limit.note(1, at(10)), Some(7), "all since the last line");
        assert_eq!(limit.note(1, at(11)), None);
        // A quiet spell: the next event is logged at once, with the one held back.
        assert_eq!(limit.note(1, at(100)), Some(2));
        // Nothing to report is no line, and does not start an interval.
        assert_eq!(limit.note(0, at(200)), None);
        assert_eq!(limit.note(1, at(200)), Some(1));
        // A clock read before the last line (another thread's) is inside the interval.
        assert_eq!(limit.note(1, at(199)), None);
    }
}

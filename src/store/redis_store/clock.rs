//! Redis's clock as the store reads it: the one clock every node of a cluster shares, for the
//! times another owner compares with its own now (a waiting ticket's entry). Read when the
//! store opens and again by every flush (the flush's script answers Redis's `TIME`), and
//! carried between two readings by this process's monotonic clock, so a node whose own wall
//! clock is off, or steps, still stamps and reads on Redis's.

use std::sync::Mutex;
use std::time::Instant;

/// The latest reading of Redis's clock.
#[derive(Debug)]
pub(super) struct RedisClock {
    reading: Mutex<Reading>,
    /// Seconds added to every answer: tests make Redis's clock differ from this machine's
    /// this way (a test cannot move the clock of the Redis it starts).
    #[cfg(test)]
    shift: Mutex<f64>,
}

#[derive(Clone, Copy, Debug)]
struct Reading {
    /// Redis's Unix seconds.
    unix: f64,
    /// When the request that read them was sent. Redis read its clock after that, so the
    /// answers run ahead of Redis's clock by at most the request's way there.
    sent: Instant,
}

impl RedisClock {
    /// The clock from `TIME`'s answer (seconds, microseconds) to a request sent at `sent`.
    pub(super) fn new(time: (u64, u64), sent: Instant) -> Self {
        Self {
            reading: Mutex::new(Reading {
                unix: unix_of(time),
                sent,
            }),
            #[cfg(test)]
            shift: Mutex::new(0.0),
        }
    }

    /// Takes a newer reading (a flush's); one sent before the current one is ignored.
    pub(super) fn read(&self, time: (u64, u64), sent: Instant) {
        let mut reading = self.reading.lock().unwrap_or_else(|p| p.into_inner());
        if sent >= reading.sent {
            *reading = Reading {
                unix: unix_of(time),
                sent,
            };
        }
    }

    /// Redis's Unix seconds now: the latest reading, plus the monotonic time since it.
    pub(super) fn now_unix(&self) -> f64 {
        let reading = *self.reading.lock().unwrap_or_else(|p| p.into_inner());
        let now = reading.unix + reading.sent.elapsed().as_secs_f64();
        #[cfg(test)]
        let now = now + *self.shift.lock().unwrap_or_else(|p| p.into_inner());
        now
    }

    /// Makes every answer `seconds` later (earlier when negative), as if Redis's clock were.
    #[cfg(test)]
    pub(super) fn shift(&self, seconds: f64) {
        *self.shift.lock().unwrap_or_else(|p| p.into_inner()) += seconds;
    }
}

fn unix_of((seconds, micros): (u64, u64)) -> f64 {
    seconds as f64 + micros as f64 / 1e6
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn the_clock_runs_on_from_its_latest_reading() {
        let sent = Instant::now();
        let clock = RedisClock::new((1_000, 500_000), sent);
        let now = clock.now_unix();
        assert!((1_000.5..1_001.5).contains(&now), "{now}");
        // A later reading replaces it, even one behind (Redis's clock stepped back).
        clock.read((900, 0), sent + Duration::from_millis(1));
        assert!((900.0..901.0).contains(&clock.now_unix()));
        // An older one does not.
        clock.read((5_000, 0), sent);
        assert!(clock.now_unix() < 901.0);
        clock.shift(-100.0);
        assert!((800.0..801.0).contains(&clock.now_unix()));
    }
}

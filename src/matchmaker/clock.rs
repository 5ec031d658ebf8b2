//! The loop's clock: monotonic seconds since start, which tests move forward instead of sleeping.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Monotonic seconds since the server started, plus whatever a test skipped ahead with
/// [`Clock::advance`]: tests inject time this way (ready-check and heartbeat deadlines) instead of
/// sleeping. Clones share the offset.
#[derive(Clone, Debug)]
pub struct Clock {
    start: tokio::time::Instant,
    /// Seconds skipped, as `f64` bits.
    skipped: Arc<AtomicU64>,
}

impl Clock {
    /// Starts the clock now.
    pub fn start() -> Self {
        Self {
            start: tokio::time::Instant::now(),
            skipped: Arc::new(AtomicU64::new(0f64.to_bits())),
        }
    }

    /// Seconds since start.
    pub fn now(&self) -> f64 {
        let skipped = f64::from_bits(self.skipped.load(Ordering::Acquire));
        self.start.elapsed().as_secs_f64() + skipped
    }

    /// Moves the clock forward by `seconds` (tests only need this; the server never calls it).
    pub fn advance(&self, seconds: f64) {
        let _ = self
            .skipped
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |bits| {
                Some((f64::from_bits(bits) + seconds.max(0.0)).to_bits())
            });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_advanced_clock_moves_now_forward_and_clones_share_it() {
        let clock = Clock::start();
        let other = clock.clone();
        let before = clock.now();
        other.advance(30.0);
        assert!(clock.now() >= before + 30.0);
        other.advance(-5.0);
        assert!(clock.now() >= before + 30.0, "advance never goes back");
    }
}

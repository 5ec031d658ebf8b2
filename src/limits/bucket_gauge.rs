//! The [`RATE_LIMIT_BUCKETS`] gauge of a [`super::RateLimiter`]: the buckets it holds, set each
//! time one is added or swept, so a scrape between two sweeps reads what is held and not what
//! the last sweep left.
//!
//! The gauge is labelled with the shard of the limiter's engine ([`crate::telemetry::SHARD`]).
//! A cluster node's engine owns the limiter, and every client call of the cluster about that
//! shard reaches it: when the engine stops, its node zeroes the shard's gauge
//! ([`crate::telemetry::engine_stopped`]) and the limiter, which the engine's last calls may
//! still reach, never sets it again. So a sum over the nodes counts each caller once per shard
//! it called, after a failover too.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio_util::sync::CancellationToken;

use crate::telemetry::{RATE_LIMIT_BUCKETS, engine_gauge};

/// What one limiter holds, and its gauge.
pub(super) struct BucketGauge {
    /// The keyspace of the limiter's engine's shard: the gauge's label.
    shard: String,
    /// Buckets held: each one added counts here, each one swept is taken off.
    held: AtomicUsize,
    /// Held while the gauge is set: whoever sets it last read `held` after every change before
    /// it, so the gauge ends at the count (two setters unordered could leave an older one).
    setting: Mutex<()>,
    /// Cancelled when the limiter's engine stops (`None`: it serves as long as the process).
    stopped: Option<CancellationToken>,
}

impl BucketGauge {
    /// The gauge of a limiter of the engine of `shard`, set as long as the process runs.
    pub(super) fn new(shard: &str) -> Self {
        Self {
            shard: shard.to_string(),
            held: AtomicUsize::new(0),
            setting: Mutex::new(()),
            stopped: None,
        }
    }

    /// This gauge, no longer set once `stopped` is cancelled.
    pub(super) fn until(self, stopped: CancellationToken) -> Self {
        Self {
            stopped: Some(stopped),
            ..self
        }
    }

    /// Buckets held now.
    pub(super) fn held(&self) -> usize {
        self.held.load(Ordering::Acquire)
    }

    /// One bucket added.
    pub(super) fn added(&self) {
        self.held.fetch_add(1, Ordering::AcqRel);
        self.set();
    }

    /// `n` buckets swept.
    pub(super) fn swept(&self, n: usize) {
        if n > 0 {
            self.held.fetch_sub(n, Ordering::AcqRel);
        }
        self.set();
    }

    fn set(&self) {
        let stopped = || self.stopped.as_ref().is_some_and(|t| t.is_cancelled());
        let _one_at_a_time = self.setting.lock().unwrap_or_else(|p| p.into_inner());
        if stopped() {
            return;
        }
        let gauge = engine_gauge(RATE_LIMIT_BUCKETS, &self.shard);
        gauge.set(self.held() as f64);
        // The node cancels the engine's token before it zeroes the gauge: either that zero
        // comes after the value just set, or this sees the token cancelled and zeroes it.
        if stopped() {
            gauge.set(0.0);
        }
    }
}

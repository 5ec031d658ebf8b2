//! Per-queue statistics for `GetQueueStats` and the queue's metric handles.

use std::collections::VecDeque;

use crate::ids::QueueId;
use crate::telemetry as m;

/// Numbers for `GetQueueStats` and the metrics endpoint.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct QueueStats {
    pub queue: String,
    pub tickets_waiting: u64,
    pub players_waiting: u64,
    pub matches_formed: u64,
    pub tickets_expired: u64,
    pub wait_p50_seconds: f64,
    pub wait_p95_seconds: f64,
    pub quality_mean: f64,
    pub last_tick_ms: f64,
    pub tickets_expired_heartbeat: u64,
    pub ready_checks: u64,
    pub ready_checks_passed: u64,
    pub ready_checks_declined: u64,
    pub ready_checks_timed_out: u64,
    /// Tickets of ended ready-checks that accepted, and that declined or let time run out.
    pub ready_tickets_accepted: u64,
    pub ready_tickets_refused: u64,
    pub backfill_requests: u64,
    pub backfill_slots_opened: u64,
    pub backfill_slots_filled: u64,
    pub backfill_requests_expired: u64,
    pub backfill_fill_p50_seconds: f64,
    pub backfill_fill_p95_seconds: f64,
    /// Waiting tickets per value of each `equal` rule: `(attribute, value, tickets)`, sorted.
    pub waiting_by_value: Vec<(String, String, u64)>,
    /// The longest current wait, and the skill window (half-width) a ticket that waited that
    /// long accepts; `starving`: that ticket accepts anyone. Computed when asked (one pass over
    /// the pool), not on every tick.
    pub longest_wait_seconds: f64,
    pub skill_window: f64,
    pub starving: bool,
}

impl QueueStats {
    /// Share of ready-check tickets that accepted (0 before any ready-check ended).
    pub fn accept_rate(&self) -> f64 {
        let answered = self.ready_tickets_accepted + self.ready_tickets_refused;
        if answered == 0 {
            0.0
        } else {
            self.ready_tickets_accepted as f64 / answered as f64
        }
    }
}

/// A queue's metric handles, registered once at start: every ticket and match passes the loop,
/// and `counter!`/`histogram!` with a label allocate the label and look the key up in the
/// registry on each call. With the Prometheus exporter on, metrics were ~15% of the loop
/// thread's CPU under EnterQueue load, about half of it those lookups.
pub(super) struct QueueMetrics {
    pub(super) entered: metrics::Counter,
    pub(super) expired_ttl: metrics::Counter,
    pub(super) wait_seconds: metrics::Histogram,
    pub(super) formed: metrics::Counter,
    pub(super) quality: metrics::Histogram,
    pub(super) tick_seconds: metrics::Histogram,
    pub(super) waiting: metrics::Gauge,
}

impl QueueMetrics {
    /// The handles of `queue`, whose tickets-waiting gauge is that of the engine of `shard`.
    pub(super) fn new(shard: &str, queue: &QueueId) -> Self {
        let label = queue.to_string();
        QueueMetrics {
            entered: metrics::counter!(m::TICKETS_ENTERED, "queue" => label.clone()),
            expired_ttl: metrics::counter!(m::TICKETS_EXPIRED, "queue" => label.clone(), "reason" => "ttl"),
            wait_seconds: metrics::histogram!(m::WAIT_SECONDS, "queue" => label.clone()),
            formed: metrics::counter!(m::MATCHES_FORMED, "queue" => label.clone()),
            quality: metrics::histogram!(m::MATCH_QUALITY, "queue" => label.clone()),
            tick_seconds: metrics::histogram!(m::TICK_SECONDS, "queue" => label.clone()),
            waiting: m::tickets_waiting(shard, &label),
        }
    }
}

pub(super) const RECENT: usize = 1024;

pub(super) fn push_recent(buf: &mut VecDeque<f64>, v: f64) {
    if buf.len() == RECENT {
        buf.pop_front();
    }
    buf.push_back(v);
}

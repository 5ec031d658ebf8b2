//! The matcher benchmark behind `matchmaker bench-matcher` (SPEC §10).

use serde::Serialize;

use super::{MatchingConfig, Shape};

/// What `bench-matcher --json` prints.
#[derive(Clone, Debug, Default, Serialize)]
pub struct BenchReport {
    /// Queue name, as given.
    pub queue: String,
    /// Tickets in the pool.
    pub tickets: usize,
    /// One optimizer tick, milliseconds.
    pub tick_ms: f64,
    /// Sorting `tickets` ratings, milliseconds (the floor).
    pub sort_ms: f64,
    /// The first-come greedy baseline, milliseconds.
    pub fifo_tick_ms: f64,
    /// The baseline's mean match quality.
    pub fifo_quality: f64,
    /// Our mean match quality.
    pub quality_mean: f64,
    /// Players we matched.
    pub matched_players: usize,
    /// Players the baseline matched.
    pub fifo_matched_players: usize,
    /// `tick_ms / sort_ms`.
    pub tick_over_sort: f64,
    /// `tick_ms / fifo_tick_ms`.
    pub tick_over_fifo: f64,
}

/// Runs one benchmark (not yet implemented: returns an empty report).
#[must_use]
pub fn run_bench(
    queue: &str,
    _shape: Shape,
    _config: &MatchingConfig,
    tickets: usize,
    _seed: u64,
) -> BenchReport {
    BenchReport {
        queue: queue.to_string(),
        tickets,
        ..BenchReport::default()
    }
}

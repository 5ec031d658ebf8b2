//! `matchmaker bench-matcher`: one optimizer tick over N waiting tickets, compared in the same
//! process with two baselines, so a noisy shared machine moves all three numbers together:
//! - the sort floor: sorting N ratings;
//! - FIFO: the first-come greedy matcher of [`matching::baseline`], run through the same pool,
//!   expiry and match construction as the optimizer, so the time ratio compares only how
//!   matches are chosen.
//!
//! This is the timing harness: it reads the clock around calls into the pure matching core,
//! which never reads one itself. The pool is [`matching::baseline::bench_pool`], seeded.

use std::cell::Cell;
use std::time::Instant;

use serde::Serialize;

use crate::matching::baseline::{BENCH_NOW, bench_pool, fifo_tick};
use crate::matching::{self, LogisticModel, MatchingConfig, Shape, TickOutcome, Ticket};

const NOW: f64 = BENCH_NOW;
/// Timed repetitions; the minimum is reported (the least disturbed run on a shared machine).
const REPEATS: usize = 5;

/// What `bench-matcher --json` prints.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct BenchReport {
    /// Queue name, as given.
    pub queue: String,
    /// Tickets in the pool.
    pub tickets: usize,
    /// Players in the pool (parties counted).
    pub players: usize,
    /// One optimizer tick, milliseconds (best of 5).
    pub tick_ms: f64,
    /// Of `tick_ms`, the time spent choosing the matches (sorting candidates by rating and the
    /// dynamic programme or window search), without expiry, candidate extraction and moving the
    /// matched tickets out of the pool into `FormedMatch` values.
    pub select_ms: f64,
    /// Sorting `tickets` ratings, milliseconds (the floor; best of 5).
    pub sort_ms: f64,
    /// The first-come greedy baseline's tick, milliseconds (best of 5).
    pub fifo_tick_ms: f64,
    /// The baseline's mean match quality (underdog win probability).
    pub fifo_quality: f64,
    /// Our mean match quality.
    pub quality_mean: f64,
    /// Share of our matches at or above the queue's base `min_quality`.
    pub good_fraction: f64,
    /// Share of the baseline's matches at or above the queue's base `min_quality`.
    pub fifo_good_fraction: f64,
    /// Players we matched.
    pub matched_players: usize,
    /// Players the baseline matched.
    pub fifo_matched_players: usize,
    /// `tick_ms / sort_ms` (target for 1v1 at 100k: ≤ 5).
    pub tick_over_sort: f64,
    /// `select_ms / sort_ms`.
    pub select_over_sort: f64,
    /// `tick_ms / fifo_tick_ms` (target for 5v5 at 50k: ≤ 2).
    pub tick_over_fifo: f64,
}

/// Runs the benchmark: see the module docs. `queue` is only echoed in the report.
#[must_use]
pub fn run_bench(
    queue: &str,
    shape: Shape,
    config: &MatchingConfig,
    tickets: usize,
    seed: u64,
) -> BenchReport {
    let model = LogisticModel {
        scale: config.rating_scale,
    };
    let pool = bench_pool(shape, config, tickets, seed);
    let players = pool.stats(NOW).waiting_players;
    let ratings: Vec<f64> = pool.tickets().map(Ticket::rating).collect();

    let mut sort_ms = f64::INFINITY;
    let mut tick_ms = f64::INFINITY;
    let mut select_ms = f64::INFINITY;
    let mut fifo_ms = f64::INFINITY;
    let mut ours = TickOutcome::default();
    let mut fifo = TickOutcome::default();
    for _ in 0..REPEATS {
        let mut r = ratings.clone();
        let start = Instant::now();
        r.sort_unstable_by(f64::total_cmp);
        sort_ms = sort_ms.min(ms(start));
        std::hint::black_box(&r);

        let mut p = pool.clone();
        let start = Instant::now();
        let out = p.tick(NOW, &model);
        tick_ms = tick_ms.min(ms(start));
        ours = out;

        let mut p = pool.clone();
        let spent = Cell::new(0.0);
        let _ = p.tick_with(NOW, |cands, config, shape, slots, rules| {
            let start = Instant::now();
            let chosen = matching::choose(cands, config, shape, &model, slots, rules);
            spent.set(spent.get() + ms(start));
            chosen
        });
        select_ms = select_ms.min(spent.get());

        let mut p = pool.clone();
        let start = Instant::now();
        let out = fifo_tick(&mut p, NOW, &model);
        fifo_ms = fifo_ms.min(ms(start));
        fifo = out;
    }
    let (quality_mean, good_fraction, matched_players) = summary(&ours, config.min_quality);
    let (fifo_quality, fifo_good_fraction, fifo_matched_players) =
        summary(&fifo, config.min_quality);
    BenchReport {
        queue: queue.to_string(),
        tickets,
        players,
        tick_ms,
        select_ms,
        sort_ms,
        fifo_tick_ms: fifo_ms,
        fifo_quality,
        quality_mean,
        good_fraction,
        fifo_good_fraction,
        matched_players,
        fifo_matched_players,
        tick_over_sort: tick_ms / sort_ms,
        select_over_sort: select_ms / sort_ms,
        tick_over_fifo: tick_ms / fifo_ms,
    }
}

fn ms(start: Instant) -> f64 {
    start.elapsed().as_secs_f64() * 1e3
}

/// Mean quality, share at or above `floor`, players matched.
fn summary(out: &TickOutcome, floor: f64) -> (f64, f64, usize) {
    let n = out.matches.len().max(1) as f64;
    let mean = out.matches.iter().map(|m| m.quality).sum::<f64>() / n;
    let good = out.matches.iter().filter(|m| m.quality >= floor).count() as f64 / n;
    let players = out
        .matches
        .iter()
        .flat_map(|m| m.teams.iter().flatten())
        .map(|t| t.size())
        .sum();
    (mean, good, players)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_bench_runs_and_beats_fifo_quality_for_teams() {
        let shape = Shape {
            teams: 2,
            team_size: 5,
        };
        let config = MatchingConfig::default_for_scale(15.0);
        let r = run_bench("5v5", shape, &config, 2_000, 7);
        assert_eq!(r.tickets, 2_000);
        assert!(r.matched_players > 0 && r.fifo_matched_players > 0);
        assert!(r.quality_mean > r.fifo_quality, "{r:?}");
        assert!(r.tick_ms > 0.0 && r.sort_ms > 0.0 && r.fifo_tick_ms > 0.0);
    }

    #[test]
    fn small_bench_one_v_one_matches_nearly_everyone() {
        let shape = Shape {
            teams: 2,
            team_size: 1,
        };
        let r = run_bench("1v1", shape, &MatchingConfig::default(), 2_000, 3);
        assert!(r.matched_players >= 1_900, "{r:?}");
        assert!(r.quality_mean > 0.45);
        assert_eq!(r.fifo_matched_players, 2_000);
    }
}

//! `matchmaker bench-matcher`: one optimizer tick over N waiting tickets, compared in the same
//! process with two baselines, so a noisy shared machine moves all three numbers together:
//! - the sort floor: sorting N ratings;
//! - FIFO: the first-come greedy matcher of [`matching::baseline`], run through the same pool,
//!   expiry and match construction as the optimizer, so the time ratio compares only how
//!   matches are chosen.
//!
//! With `--rules` the tickets carry a mode, a platform and map preferences and the queue gets
//! [`matching::baseline::bench_rules`] (mode equal, three crossplay groups, a common map); the
//! report then adds the same population's tick without rules (the timing baseline) and, per
//! partition of the rules, the quality the rule-free optimizer reaches on that partition's
//! tickets alone, the quality bar the rules run is held to. FIFO then runs on the rule-free
//! pool (it knows no rules).
//!
//! This is the timing harness: it reads the clock around calls into the pure matching core,
//! which never reads one itself. The pool is [`matching::baseline::bench_pool`], seeded.

use std::collections::BTreeMap;

use std::cell::Cell;
use std::time::Instant;

use serde::Serialize;

use crate::matching::baseline::{
    BENCH_NOW, bench_partition, bench_pool, bench_pool_with, bench_rules, fifo_tick,
};
use crate::matching::{self, LogisticModel, MatchingConfig, Pool, Shape, TickOutcome, Ticket};

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
    /// With `--rules`: the comparison with the same population without rules.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rules: Option<RulesReport>,
}

/// The rules run against the rule-free one (see the module docs).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct RulesReport {
    /// The same tickets without attributes or rules: one tick, milliseconds (best of 5).
    pub free_tick_ms: f64,
    /// `tick_ms / free_tick_ms` (target: ≤ 2).
    pub tick_over_free: f64,
    /// Mean quality of the rule-free tick over the whole pool (partitions mixed).
    pub free_quality: f64,
    /// Players the rule-free tick over the whole pool matched.
    pub free_matched_players: usize,
    /// The lowest `quality_ratio` of any partition (target: ≥ 0.99).
    pub worst_quality_ratio: f64,
    /// Players matched with rules over players matched by the rule-free optimizer run on each
    /// partition alone.
    pub matched_over_partition_free: f64,
    /// Per partition of the `equal` rules, largest first.
    pub partitions: Vec<PartitionReport>,
}

/// One partition (mode and crossplay group) of the rules run.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct PartitionReport {
    /// `mode/group`.
    pub partition: String,
    /// Tickets in the partition.
    pub tickets: usize,
    /// Mean quality of the rules run's matches in the partition.
    pub quality: f64,
    /// Mean quality of the rule-free optimizer run on the partition's tickets alone.
    pub free_quality: f64,
    /// `quality / free_quality`.
    pub quality_ratio: f64,
    /// Players the rules run matched in the partition.
    pub matched_players: usize,
    /// Players the rule-free run on the partition matched.
    pub free_matched_players: usize,
}

/// Runs the benchmark: see the module docs. `queue` is only echoed in the report.
#[must_use]
pub fn run_bench(
    queue: &str,
    shape: Shape,
    config: &MatchingConfig,
    tickets: usize,
    seed: u64,
    with_rules: bool,
) -> BenchReport {
    let model = LogisticModel {
        scale: config.rating_scale,
    };
    let mut free_config = config.clone();
    free_config.rules.clear();
    let mut ruled_config = free_config.clone();
    ruled_config.rules = bench_rules();
    let (pool, free_pool) = if with_rules {
        (
            bench_pool_with(shape, &ruled_config, tickets, seed, true),
            Some(bench_pool(shape, &free_config, tickets, seed)),
        )
    } else {
        (bench_pool(shape, config, tickets, seed), None)
    };
    let config = if with_rules { &ruled_config } else { config };
    let players = pool.stats(NOW).waiting_players;
    let ratings: Vec<f64> = pool.tickets().map(Ticket::rating).collect();

    let mut sort_ms = f64::INFINITY;
    let mut tick_ms = f64::INFINITY;
    let mut select_ms = f64::INFINITY;
    let mut fifo_ms = f64::INFINITY;
    let mut free_ms = f64::INFINITY;
    let mut ours = TickOutcome::default();
    let mut fifo = TickOutcome::default();
    let mut free = TickOutcome::default();
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

        let mut p = free_pool.as_ref().unwrap_or(&pool).clone();
        let start = Instant::now();
        let out = fifo_tick(&mut p, NOW, &model);
        fifo_ms = fifo_ms.min(ms(start));
        fifo = out;

        if let Some(free_pool) = &free_pool {
            let mut p = free_pool.clone();
            let start = Instant::now();
            let out = p.tick(NOW, &model);
            free_ms = free_ms.min(ms(start));
            free = out;
        }
    }
    let rules = free_pool.as_ref().map(|_| RulesReport {
        free_tick_ms: free_ms,
        tick_over_free: tick_ms / free_ms,
        ..compare_partitions(&pool, &ours, &free, shape, &free_config, &model)
    });
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
        rules,
    }
}

/// The quality part of [`RulesReport`]: each partition of `pool` (a rules pool) run through the
/// rule-free optimizer alone, against what `ours` (the rules tick) formed in it.
fn compare_partitions(
    pool: &Pool,
    ours: &TickOutcome,
    free: &TickOutcome,
    shape: Shape,
    free_config: &MatchingConfig,
    model: &LogisticModel,
) -> RulesReport {
    let mut parts: BTreeMap<String, Vec<Ticket>> = BTreeMap::new();
    for t in pool.tickets() {
        parts.entry(bench_partition(t)).or_default().push(t.clone());
    }
    let mut formed: BTreeMap<String, TickOutcome> = BTreeMap::new();
    for m in &ours.matches {
        let first = m.teams.iter().flatten().next();
        if let Some(t) = first {
            formed
                .entry(bench_partition(t))
                .or_default()
                .matches
                .push(m.clone());
        }
    }
    let mut partitions: Vec<PartitionReport> = parts
        .into_iter()
        .map(|(partition, tickets)| {
            let n = tickets.len();
            let mut alone = Pool::new(shape, free_config.clone());
            for t in tickets {
                // Ids are unique and the tickets were admitted once already.
                let _ = alone.insert(t);
            }
            let (free_quality, _, free_matched_players) =
                summary(&alone.tick(NOW, model), free_config.min_quality);
            let (quality, _, matched_players) = formed
                .get(&partition)
                .map_or((0.0, 0.0, 0), |o| summary(o, free_config.min_quality));
            PartitionReport {
                partition,
                tickets: n,
                quality,
                free_quality,
                quality_ratio: quality / free_quality,
                matched_players,
                free_matched_players,
            }
        })
        .collect();
    partitions.sort_by_key(|p| std::cmp::Reverse(p.tickets));
    let (free_quality, _, free_matched_players) = summary(free, free_config.min_quality);
    let matched: usize = partitions.iter().map(|p| p.matched_players).sum();
    let matched_free: usize = partitions.iter().map(|p| p.free_matched_players).sum();
    RulesReport {
        free_tick_ms: 0.0,
        tick_over_free: 0.0,
        free_quality,
        free_matched_players,
        worst_quality_ratio: partitions
            .iter()
            .map(|p| p.quality_ratio)
            .fold(f64::INFINITY, f64::min),
        matched_over_partition_free: matched as f64 / matched_free.max(1) as f64,
        partitions,
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
        let r = run_bench("5v5", shape, &config, 2_000, 7, false);
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
        let r = run_bench("1v1", shape, &MatchingConfig::default(), 2_000, 3, false);
        assert!(r.matched_players >= 1_900, "{r:?}");
        assert!(r.quality_mean > 0.45);
        assert_eq!(r.fifo_matched_players, 2_000);
        assert!(r.rules.is_none());
    }

    #[test]
    fn rules_bench_compares_every_partition_with_the_rule_free_optimizer() {
        let shape = Shape {
            teams: 2,
            team_size: 1,
        };
        let r = run_bench("1v1", shape, &MatchingConfig::default(), 4_000, 5, true);
        let rules = r.rules.expect("a rules report");
        assert_eq!(rules.partitions.len(), 12, "{rules:?}");
        assert_eq!(
            rules.partitions.iter().map(|p| p.tickets).sum::<usize>(),
            4_000
        );
        // Matches never cross partitions, so the per-partition players add up to the total.
        assert_eq!(
            rules
                .partitions
                .iter()
                .map(|p| p.matched_players)
                .sum::<usize>(),
            r.matched_players
        );
        assert!(rules.free_tick_ms > 0.0 && rules.tick_over_free > 0.0);
        for p in &rules.partitions {
            assert!(p.free_quality > 0.0 && p.quality > 0.0, "{p:?}");
        }
        // Most 1v1 pairs share a map: quality stays close to the rule-free one.
        assert!(rules.worst_quality_ratio > 0.9, "{rules:?}");
    }
}

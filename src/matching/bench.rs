//! The matcher benchmark behind `matchmaker bench-matcher` (SPEC §10): one optimizer tick over
//! N waiting tickets, compared in the same process with two baselines, so a noisy shared
//! machine moves all three numbers together:
//! - the sort floor: sorting N ratings;
//! - FIFO: a first-come greedy matcher (tickets in arrival order fill matches and teams in
//!   turn), run through the same pool, expiry and match construction as the optimizer, so the
//!   time ratio compares only how matches are chosen.
//!
//! This is the only place in `matching` that reads a clock, to time the calls; `Pool::tick`
//! never does. The rating population is drawn from a seeded RNG.

use std::cell::Cell;
use std::time::Instant;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, StandardNormal};
use serde::Serialize;

use super::pool::{Cand, Chosen, Slots, choose, score};
use super::{LogisticModel, MatchingConfig, Pool, Shape, TickOutcome, Ticket, WinModel};
use crate::ids::{PlayerId, TicketId};

/// The benchmark's clock reading when the tick runs; [`bench_pool`]'s tickets entered during
/// the 90 s before.
pub const BENCH_NOW: f64 = 10_000.0;
const NOW: f64 = BENCH_NOW;
/// Spread of `entered_at`: under the default 120 s starvation guard, so windows are spread
/// over the expansion schedule but nobody starves.
const ENTRY_SPREAD: f64 = 90.0;
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

/// A seeded pool of `tickets` waiting tickets: means normal around `3.75·scale` with standard
/// deviation `0.75·scale` (1500 ± 300 on the 400 scale), deviations between 7.5% and 30% of the
/// scale, `entered_at` spread over the 90 s before the tick. Where the queue allows parties,
/// 15% of tickets are duos and 5% trios (within the party limit).
#[must_use]
pub fn bench_pool(shape: Shape, config: &MatchingConfig, tickets: usize, seed: u64) -> Pool {
    let scale = config.rating_scale;
    let mut rng = StdRng::seed_from_u64(seed);
    let max_party = config.party_limit(shape);
    let mut pool = Pool::new(shape, config.clone());
    for i in 0..tickets {
        let roll: f64 = rng.random();
        let size = if roll < 0.05 && max_party >= 3 {
            3
        } else if roll < 0.20 && max_party >= 2 {
            2
        } else {
            1
        };
        let z: f64 = StandardNormal.sample(&mut rng);
        let base = scale * (3.75 + 0.75 * z);
        let skills = (0..size)
            .map(|_| {
                let jitter: f64 = rng.random_range(-0.05..0.05);
                let dev: f64 = rng.random_range(0.075..0.3);
                (base + jitter * scale, dev * scale)
            })
            .collect();
        let entered_at = NOW - rng.random_range(0.0..ENTRY_SPREAD);
        let ticket = Ticket {
            id: TicketId::new(format!("b{i}")),
            players: (0..size)
                .map(|k| PlayerId::new(format!("b{i}.{k}")))
                .collect(),
            skills,
            party_skill: None,
            entered_at,
            region_latency_ms: Vec::new(),
            roles: Vec::new(),
        };
        // Ids are unique and values finite, so insertion cannot fail.
        let _ = pool.insert(ticket);
    }
    pool
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
        let _ = p.tick_with(NOW, |cands, config, shape, slots| {
            let start = Instant::now();
            let chosen = choose(cands, config, shape, &model, slots);
            spent.set(ms(start));
            chosen
        });
        select_ms = select_ms.min(spent.get());

        let mut p = pool.clone();
        let start = Instant::now();
        let out = p.tick_with(NOW, |cands, _, shape, slots| {
            fifo_select(cands, shape, slots, &model)
        });
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

/// The first-come greedy baseline: tickets in arrival order go to the first team of the open
/// match with room; a ticket that fits nowhere waits for the next match. No windows, no
/// balancing, no floors.
pub(crate) fn fifo_select(
    cands: &[Cand],
    shape: Shape,
    slots: &Slots,
    model: &dyn WinModel,
) -> Chosen {
    let mut order: Vec<usize> = (0..cands.len()).collect();
    order.sort_unstable_by(|&a, &b| cands[b].wait.total_cmp(&cands[a].wait));
    let t = shape.teams as usize;
    let mut out = Chosen::new(t);
    let mut teams: Vec<Vec<usize>> = vec![Vec::new(); t];
    let mut members = Vec::new();
    let mut ends = Vec::with_capacity(t);
    let mut fill = vec![0u32; t];
    let mut carry: Vec<usize> = Vec::new();
    let mut queue = order.into_iter();
    let mut retry: Vec<usize> = Vec::new();
    let mut scratch = Vec::new();
    loop {
        let c = match retry.pop() {
            Some(c) => c,
            None => match queue.next() {
                Some(c) => c,
                None => break,
            },
        };
        let size = cands[c].size;
        match (0..t).find(|&k| fill[k] + size <= shape.team_size) {
            Some(k) => {
                teams[k].push(c);
                fill[k] += size;
            }
            None => carry.push(c),
        }
        if fill.iter().all(|&f| f == shape.team_size) {
            members.clear();
            ends.clear();
            for team in &mut teams {
                members.append(team);
                ends.push(members.len());
            }
            let scored = score(cands, &members, &ends, slots, model, &mut scratch);
            out.push(&members, &ends, scored);
            fill.iter_mut().for_each(|f| *f = 0);
            // Carried tickets are older than the queue's rest: they go first, once each.
            retry.extend(carry.drain(..).rev());
        }
    }
    out
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

    #[test]
    fn the_pool_is_seeded() {
        let shape = Shape {
            teams: 2,
            team_size: 2,
        };
        let c = MatchingConfig::default();
        let a: Vec<f64> = bench_pool(shape, &c, 50, 1)
            .tickets()
            .map(Ticket::rating)
            .collect();
        let b: Vec<f64> = bench_pool(shape, &c, 50, 1)
            .tickets()
            .map(Ticket::rating)
            .collect();
        assert_eq!(a, b);
    }
}

//! What the matcher benchmark measures against, kept pure: a seeded pool of waiting tickets
//! ([`bench_pool`]) and a first-come greedy matcher ([`fifo_tick`]) that runs through the same
//! pool, expiry and match construction as the optimizer, so comparing the two compares only
//! how matches are chosen.
//!
//! The timing itself (best-of-5 runs, the sort floor, the report) lives in
//! `tools::bench_matcher`, outside the pure core: nothing here reads a clock. The rating
//! population is drawn from a seeded RNG.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, StandardNormal};

use super::candidates::{Cand, Chosen, Slots, score};
use super::{MatchingConfig, Pool, Shape, TickOutcome, Ticket, WinModel};
use crate::ids::{PlayerId, TicketId};

/// The benchmark's clock reading when the tick runs; [`bench_pool`]'s tickets entered during
/// the 90 s before.
pub const BENCH_NOW: f64 = 10_000.0;
/// Spread of `entered_at`: under the default 120 s starvation guard, so windows are spread
/// over the expansion schedule but nobody starves.
const ENTRY_SPREAD: f64 = 90.0;

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
        let entered_at = BENCH_NOW - rng.random_range(0.0..ENTRY_SPREAD);
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
            attributes: Default::default(),
            avoid: Vec::new(),
        };
        // Ids are unique and values finite, so insertion cannot fail.
        let _ = pool.insert(ticket);
    }
    pool
}

/// One tick of `pool` at `now` with the first-come baseline in place of the optimizer: the same
/// expiry and match construction as [`Pool::tick`].
pub fn fifo_tick(pool: &mut Pool, now: f64, model: &dyn WinModel) -> TickOutcome {
    pool.tick_with(now, |cands, _, shape, slots, _| {
        fifo_select(cands, shape, slots, model)
    })
}

/// The first-come greedy baseline: tickets in arrival order go to the first team of the open
/// match with room; a ticket that fits nowhere waits for the next match. No windows, no
/// balancing, no floors.
fn fifo_select(cands: &[Cand], shape: Shape, slots: &Slots, model: &dyn WinModel) -> Chosen {
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

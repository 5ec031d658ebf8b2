//! What the matcher benchmark measures against, kept pure: a seeded pool of waiting tickets
//! ([`bench_pool`]) and a first-come greedy matcher ([`fifo_tick`]) that runs through the same
//! pool, expiry and match construction as the optimizer, so comparing the two compares only
//! how matches are chosen.
//!
//! The timing itself (best-of-5 runs, the sort floor, the report) lives in
//! `tools::bench_matcher`, outside the pure core: nothing here reads a clock. The rating
//! population is drawn from a seeded RNG.
//!
//! With rules ([`bench_rules`], [`bench_attributes`]) the same tickets (same ratings, waits and
//! parties) also carry a game mode, a platform and map preferences, drawn from a second seeded
//! RNG so the rating draws do not move: the rule-free pool is the same population, which is
//! what makes the two ticks comparable.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, StandardNormal};

use super::candidates::{Cand, Chosen, Slots, score};
use super::rules::{AttributeValue, Attributes, MatchRule, RuleKind};
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
    bench_pool_with(shape, config, tickets, seed, false)
}

/// [`bench_pool`], and with `attributes` every ticket also carries [`bench_attributes`]
/// (the pool then needs `config.rules` to keep them: a pool keeps only the attributes its rules
/// read).
#[must_use]
pub fn bench_pool_with(
    shape: Shape,
    config: &MatchingConfig,
    tickets: usize,
    seed: u64,
    attributes: bool,
) -> Pool {
    let scale = config.rating_scale;
    let mut rng = StdRng::seed_from_u64(seed);
    let mut attribute_rng = StdRng::seed_from_u64(seed ^ ATTRIBUTE_SEED);
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
            attributes: if attributes {
                bench_attributes(&mut attribute_rng)
            } else {
                Attributes::new()
            },
            avoid: Vec::new(),
        };
        // Ids are unique and values finite (and attributes fit the bench rules), so insertion
        // cannot fail.
        let _ = pool.insert(ticket);
    }
    pool
}

/// Mixed into the seed of the attribute RNG, so attributes never shift the rating draws.
const ATTRIBUTE_SEED: u64 = 0x6d61_7463_6872_756c;

/// The game modes of the rules benchmark and the share of tickets in each.
pub const BENCH_MODES: [(&str, f64); 4] = [
    ("ranked", 0.40),
    ("casual", 0.30),
    ("arcade", 0.20),
    ("tournament", 0.10),
];
/// Platforms and their shares; [`bench_rules`] puts them in three crossplay groups.
pub const BENCH_PLATFORMS: [(&str, f64); 4] = [
    ("pc", 0.45),
    ("xbox", 0.20),
    ("playstation", 0.25),
    ("switch", 0.10),
];
/// The map pool.
pub const BENCH_MAPS: [&str; 8] = [
    "ancient", "anubis", "dust2", "inferno", "mirage", "nuke", "overpass", "vertigo",
];

/// The rules benchmark's rule set: the mode is equal, the platform is equal up to three
/// crossplay groups (PC alone, the two home consoles together, the handheld alone), and
/// every ticket of a match accepts at least one common map.
#[must_use]
pub fn bench_rules() -> Vec<MatchRule> {
    let mut platform = MatchRule::new(RuleKind::Equal, "platform");
    platform.groups = vec![
        vec!["pc".into()],
        vec!["xbox".into(), "playstation".into()],
        vec!["switch".into()],
    ];
    vec![
        MatchRule::new(RuleKind::Equal, "mode"),
        platform,
        MatchRule::new(RuleKind::Intersect, "maps"),
    ]
}

/// One ticket's attributes for [`bench_rules`]: a mode and a platform by the shares above, and
/// map preferences of two kinds: three tickets in four veto maps (all eight less 0–3 uniformly
/// drawn), the fourth picks its favourites (2–4 uniformly drawn maps). Two veto sets always
/// share a map; favourites often share none, so the rule binds.
pub fn bench_attributes(rng: &mut StdRng) -> Attributes {
    let pick = |rng: &mut StdRng, table: &[(&str, f64)]| {
        let mut roll: f64 = rng.random();
        for &(name, share) in table {
            if roll < share {
                return name.to_string();
            }
            roll -= share;
        }
        table[table.len() - 1].0.to_string()
    };
    let mode = pick(rng, &BENCH_MODES);
    let platform = pick(rng, &BENCH_PLATFORMS);
    let mut maps: Vec<String> = BENCH_MAPS.iter().map(|m| m.to_string()).collect();
    let keep = if rng.random_bool(0.25) {
        rng.random_range(2..=4)
    } else {
        maps.len() - rng.random_range(0..=3)
    };
    while maps.len() > keep {
        let v = rng.random_range(0..maps.len());
        maps.remove(v);
    }
    Attributes::from([
        ("mode".to_string(), AttributeValue::Text(mode)),
        ("platform".to_string(), AttributeValue::Text(platform)),
        ("maps".to_string(), AttributeValue::Tags(maps)),
    ])
}

/// The partition a ticket of [`bench_rules`] falls in: its mode and its platform's crossplay
/// group (the key the optimizer partitions by), as text for reports.
#[must_use]
pub fn bench_partition(t: &Ticket) -> String {
    let text = |name: &str| match t.attributes.get(name) {
        Some(AttributeValue::Text(v)) => v.as_str(),
        _ => "",
    };
    let group = match text("platform") {
        "xbox" | "playstation" => "console",
        other => other,
    };
    format!("{}/{}", text("mode"), group)
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

    #[test]
    fn attributes_keep_the_ratings_and_fit_the_rules() {
        let shape = Shape {
            teams: 2,
            team_size: 5,
        };
        let free = MatchingConfig::default();
        let mut ruled = free.clone();
        ruled.rules = bench_rules();
        let plain = bench_pool(shape, &free, 2_000, 9);
        let with = bench_pool_with(shape, &ruled, 2_000, 9, true);
        // Every ticket was admitted and the population is the same.
        assert_eq!(with.len(), 2_000);
        let ratings = |p: &Pool| {
            let mut r: Vec<(String, f64)> = p
                .tickets()
                .map(|t| (t.id.as_str().to_string(), t.rating()))
                .collect();
            r.sort_by(|a, b| a.0.cmp(&b.0));
            r
        };
        assert_eq!(ratings(&plain), ratings(&with));
        // Twelve partitions at most (4 modes x 3 groups), all populated at this size, with
        // every ticket keeping two to eight maps, and some pairs of tickets sharing none.
        let parts: std::collections::BTreeSet<String> =
            with.tickets().map(bench_partition).collect();
        assert_eq!(parts.len(), 12, "{parts:?}");
        for t in with.tickets() {
            let Some(AttributeValue::Tags(maps)) = t.attributes.get("maps") else {
                panic!("no maps on {t:?}");
            };
            assert!((2..=8).contains(&maps.len()), "{maps:?}");
        }
        let maps = |t: &Ticket| match t.attributes.get("maps") {
            Some(AttributeValue::Tags(m)) => m.clone(),
            _ => Vec::new(),
        };
        let all: Vec<Vec<String>> = with.tickets().take(200).map(maps).collect();
        let disjoint = all
            .iter()
            .enumerate()
            .flat_map(|(i, a)| all[i + 1..].iter().map(move |b| (a, b)))
            .filter(|(a, b)| !a.iter().any(|m| b.contains(m)))
            .count();
        assert!(disjoint > 0);
    }
}

//! Building a leaderboard of a million players, as a start-up or a cluster node taking the
//! queues over does: `RankIndex::rebuild` (sorted on two threads) against collecting the same
//! entries into a `BTreeSet` on one thread, in the same run.
//!
//! Two boards: every player tied on points, rating and wins (a launch-day population, where
//! the order falls to the player ids) and every player with a rating of their own.
//!
//! Run: `cargo bench --bench leaderboard`.

use std::collections::BTreeSet;
use std::hint::black_box;
use std::time::Duration;

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use matchmaker::ids::PlayerId;
use matchmaker::ranking::leaderboard::{LeaderboardEntry, RankIndex};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const PLAYERS: usize = 1_000_000;

fn board(tied: bool) -> Vec<LeaderboardEntry> {
    let mut rng = StdRng::seed_from_u64(7);
    (0..PLAYERS)
        .map(|i| LeaderboardEntry {
            player: PlayerId::new(format!("player-{:x}", rng.random::<u64>() ^ i as u64)),
            rank_points: if tied { 0 } else { rng.random_range(0..5000) },
            conservative_rating: if tied {
                1000.0
            } else {
                rng.random_range(0.0..3000.0)
            },
            wins: if tied { 0 } else { rng.random_range(0..500) },
        })
        .collect()
}

fn bench_rebuild(c: &mut Criterion) {
    for (name, tied) in [("tied", true), ("rated", false)] {
        let entries = board(tied);
        let mut group = c.benchmark_group(format!("leaderboard_1M_{name}"));
        group.bench_function("RankIndex::rebuild (two threads)", |b| {
            b.iter_batched(
                || entries.clone(),
                |e| {
                    let mut index = RankIndex::new();
                    index.rebuild(e);
                    black_box(index.len())
                },
                BatchSize::LargeInput,
            );
        });
        group.bench_function("BTreeSet::from_iter (one thread)", |b| {
            b.iter_batched(
                || entries.clone(),
                |e| black_box(e.into_iter().collect::<BTreeSet<_>>().len()),
                BatchSize::LargeInput,
            );
        });
        group.finish();
    }
}

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(8))
        .sample_size(10)
}

criterion_group! {
    name = benches;
    config = config();
    targets = bench_rebuild
}
criterion_main!(benches);

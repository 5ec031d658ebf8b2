//! Criterion benches of one optimizer tick, next to the sort floor on the same ratings, so a
//! regression shows as a ratio that survives a noisy machine. The `bench-matcher` CLI
//! (`tools::bench_matcher::run_bench`) adds the FIFO baseline and match quality.

use std::hint::black_box;

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use matchmaker::matching::baseline::{BENCH_NOW, bench_pool};
use matchmaker::matching::{LogisticModel, MatchingConfig, Shape};

fn tick(c: &mut Criterion) {
    let mut group = c.benchmark_group("matching");
    group.sample_size(10);
    for (name, shape, scale, tickets) in [
        (
            "1v1",
            Shape {
                teams: 2,
                team_size: 1,
            },
            400.0,
            20_000,
        ),
        (
            "5v5",
            Shape {
                teams: 2,
                team_size: 5,
            },
            15.0,
            20_000,
        ),
    ] {
        let config = MatchingConfig::default_for_scale(scale);
        let model = LogisticModel { scale };
        let pool = bench_pool(shape, &config, tickets, 42);
        let ratings: Vec<f64> = pool.tickets().map(|t| t.rating()).collect();
        group.bench_function(format!("{name}/sort_floor/{tickets}"), |b| {
            b.iter_batched(
                || ratings.clone(),
                |mut r| {
                    r.sort_unstable_by(f64::total_cmp);
                    black_box(r)
                },
                BatchSize::LargeInput,
            )
        });
        group.bench_function(format!("{name}/tick/{tickets}"), |b| {
            b.iter_batched(
                || pool.clone(),
                |mut p| black_box(p.tick(BENCH_NOW, &model)),
                BatchSize::LargeInput,
            )
        });
    }
    group.finish();
}

criterion_group!(benches, tick);
criterion_main!(benches);

//! A tiny driver for `matching::run_bench` until the CLI's `bench-matcher` subcommand is wired:
//! `cargo run --release --example bench_matcher -- 1v1 100000`.

use matchmaker::matching::{MatchingConfig, Shape, run_bench};

fn main() {
    let mut args = std::env::args().skip(1);
    let queue = args.next().unwrap_or_else(|| "1v1".to_string());
    let tickets: usize = args.next().and_then(|n| n.parse().ok()).unwrap_or(100_000);
    let (shape, scale) = match queue.as_str() {
        "2v2" => (
            Shape {
                teams: 2,
                team_size: 2,
            },
            400.0,
        ),
        "5v5" => (
            Shape {
                teams: 2,
                team_size: 5,
            },
            15.0,
        ),
        "10v10" => (
            Shape {
                teams: 2,
                team_size: 10,
            },
            15.0,
        ),
        "ffa8" => (
            Shape {
                teams: 8,
                team_size: 1,
            },
            15.0,
        ),
        _ => (
            Shape {
                teams: 2,
                team_size: 1,
            },
            400.0,
        ),
    };
    let config = MatchingConfig::default_for_scale(scale);
    println!("{:#?}", run_bench(&queue, shape, &config, tickets, 42));
}

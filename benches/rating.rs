//! Rating updates per second, ours side by side with `skillratings` 0.29 on identical inputs
//! (the target: at least as fast for every system both have, same results).
//!
//! Each benchmark rates the same 1,024 pre-generated matches (seeded RNG), so criterion's
//! throughput line reads directly as matches per second. Our side uses the textbook settings that
//! give the same numbers as skillratings (checked in `src/rating/vs_skillratings.rs`): Glicko-2
//! unbounded, Glicko-1 without RD clamp and skillratings' c = 0, Weng-Lin BT with κ = 1e-6, plain
//! Elo (no rounding, no inflation). Plackett-Luce has no skillratings counterpart and is measured
//! next to skillratings' Bradley-Terry on the same inputs, for scale only.
//!
//! The last target, `ratio_report`, prints the comparison table from paired, interleaved A/B
//! rounds (see [`paired_ratio`]): that ratio is the number to quote on a shared, noisy machine.
//!
//! Run: `cargo bench --bench rating` (only the table: `cargo bench --bench rating -- ratio`).

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use matchmaker::rating::{
    MatchInput, PlayerInput, Skill, SystemConfig, elo, glicko, glicko2, weng_lin,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use skillratings::Outcomes;

const N: usize = 1024;

fn outcome(score: f64) -> Outcomes {
    if score == 1.0 {
        Outcomes::WIN
    } else if score == 0.0 {
        Outcomes::LOSS
    } else {
        Outcomes::DRAW
    }
}

struct Pair {
    a: Skill,
    b: Skill,
    score: f64,
}

fn pairs(seed: u64, mean: (f64, f64), dev: (f64, f64), vol: (f64, f64)) -> Vec<Pair> {
    let mut rng = StdRng::seed_from_u64(seed);
    let skill = |rng: &mut StdRng| Skill {
        mean: rng.random_range(mean.0..mean.1),
        deviation: if dev.1 > dev.0 {
            rng.random_range(dev.0..dev.1)
        } else {
            0.0
        },
        volatility: if vol.1 > vol.0 {
            rng.random_range(vol.0..vol.1)
        } else {
            0.0
        },
    };
    (0..N)
        .map(|_| {
            let a = skill(&mut rng);
            let b = skill(&mut rng);
            let score = [0.0, 0.5, 1.0][rng.random_range(0..3)];
            Pair { a, b, score }
        })
        .collect()
}

fn group<'c>(
    c: &'c mut Criterion,
    name: &str,
) -> criterion::BenchmarkGroup<'c, criterion::measurement::WallTime> {
    let mut g = c.benchmark_group(name);
    g.throughput(Throughput::Elements(N as u64));
    g
}

fn bench_glicko2(c: &mut Criterion) {
    use skillratings::glicko2::{Glicko2Config, Glicko2Rating, glicko2 as theirs};
    let input = pairs(1, (800.0, 2200.0), (40.0, 350.0), (0.04, 0.08));
    let ours_cfg = glicko2::Config::unbounded();
    let bounded = glicko2::Config::default();
    let their_cfg = Glicko2Config::new();
    let conv = |s: &Skill| Glicko2Rating {
        rating: s.mean,
        deviation: s.deviation,
        volatility: s.volatility,
    };
    let their_input: Vec<_> = input
        .iter()
        .map(|p| (conv(&p.a), conv(&p.b), outcome(p.score)))
        .collect();
    let mut g = group(c, "glicko2_1v1");
    g.bench_function("ours", |b| {
        b.iter(|| {
            for p in &input {
                black_box(glicko2::rate_1v1(
                    black_box(&p.a),
                    black_box(&p.b),
                    p.score,
                    &ours_cfg,
                ));
            }
        })
    });
    g.bench_function("ours_bounded", |b| {
        b.iter(|| {
            for p in &input {
                black_box(glicko2::rate_1v1(
                    black_box(&p.a),
                    black_box(&p.b),
                    p.score,
                    &bounded,
                ));
            }
        })
    });
    g.bench_function("skillratings", |b| {
        b.iter(|| {
            for (a, bb, o) in &their_input {
                black_box(theirs(black_box(a), black_box(bb), o, &their_cfg));
            }
        })
    });
    g.finish();

    // The generic server path (validation, elapsed-time decay, Vec output) for scale.
    let sys = SystemConfig::Glicko2(bounded);
    let matches: Vec<Vec<Vec<PlayerInput>>> = input
        .iter()
        .map(|p| vec![vec![PlayerInput::new(p.a)], vec![PlayerInput::new(p.b)]])
        .collect();
    let mut g = group(c, "glicko2_1v1_generic");
    g.bench_function("ours_system_config_rate", |b| {
        b.iter(|| {
            for (m, p) in matches.iter().zip(&input) {
                let placements = if p.score == 1.0 {
                    [1, 2]
                } else if p.score == 0.0 {
                    [2, 1]
                } else {
                    [1, 1]
                };
                black_box(
                    sys.rate(&MatchInput {
                        teams: m,
                        placements: &placements,
                    })
                    .ok(),
                );
            }
        })
    });
    g.finish();
}

fn bench_glicko(c: &mut Criterion) {
    use skillratings::glicko::{GlickoConfig, GlickoRating, glicko as theirs};
    let input = pairs(2, (800.0, 2200.0), (40.0, 350.0), (0.0, 0.0));
    let ours_cfg = glicko::Config::unbounded();
    let their_cfg = GlickoConfig { c: 0.0 };
    let conv = |s: &Skill| GlickoRating {
        rating: s.mean,
        deviation: s.deviation,
    };
    let their_input: Vec<_> = input
        .iter()
        .map(|p| (conv(&p.a), conv(&p.b), outcome(p.score)))
        .collect();
    let mut g = group(c, "glicko_1v1");
    g.bench_function("ours", |b| {
        b.iter(|| {
            for p in &input {
                black_box(glicko::rate_1v1(
                    black_box(&p.a),
                    black_box(&p.b),
                    p.score,
                    &ours_cfg,
                ));
            }
        })
    });
    g.bench_function("skillratings", |b| {
        b.iter(|| {
            for (a, bb, o) in &their_input {
                black_box(theirs(black_box(a), black_box(bb), o, &their_cfg));
            }
        })
    });
    g.finish();
}

fn bench_weng_lin(c: &mut Criterion) {
    use skillratings::weng_lin::{
        WengLinConfig, WengLinRating, weng_lin as theirs, weng_lin_two_teams,
    };
    let input = pairs(3, (10.0, 40.0), (1.0, 8.3), (0.0, 0.0));
    let ours_cfg = weng_lin::Config {
        kappa: 0.000_001,
        ..weng_lin::Config::default()
    };
    let their_cfg = WengLinConfig::new();
    let conv = |s: &Skill| WengLinRating {
        rating: s.mean,
        uncertainty: s.deviation,
    };
    let their_input: Vec<_> = input
        .iter()
        .map(|p| (conv(&p.a), conv(&p.b), outcome(p.score)))
        .collect();

    let mut g = group(c, "weng_lin_bt_1v1");
    g.bench_function("ours", |b| {
        b.iter(|| {
            for p in &input {
                black_box(weng_lin::rate_1v1_bt(
                    black_box(&p.a),
                    black_box(&p.b),
                    p.score,
                    &ours_cfg,
                ));
            }
        })
    });
    g.bench_function("skillratings", |b| {
        b.iter(|| {
            for (a, bb, o) in &their_input {
                black_box(theirs(black_box(a), black_box(bb), o, &their_cfg));
            }
        })
    });
    g.finish();

    let mut g = group(c, "weng_lin_pl_1v1");
    g.bench_function("ours_pl", |b| {
        b.iter(|| {
            for p in &input {
                black_box(weng_lin::rate_1v1_pl(
                    black_box(&p.a),
                    black_box(&p.b),
                    p.score,
                    &ours_cfg,
                ));
            }
        })
    });
    g.bench_function("skillratings_bt_for_scale", |b| {
        b.iter(|| {
            for (a, bb, o) in &their_input {
                black_box(theirs(black_box(a), black_box(bb), o, &their_cfg));
            }
        })
    });
    g.finish();

    // 2v2: pairs of pairs from the same inputs.
    let teams: Vec<([Skill; 2], [Skill; 2], f64)> = input
        .chunks_exact(2)
        .map(|w| ([w[0].a, w[1].a], [w[0].b, w[1].b], w[0].score))
        .collect();
    let their_teams: Vec<_> = teams
        .iter()
        .map(|(x, y, s)| {
            (
                [conv(&x[0]), conv(&x[1])],
                [conv(&y[0]), conv(&y[1])],
                outcome(*s),
            )
        })
        .collect();
    let ranks = |s: f64| {
        if s == 1.0 {
            [1, 2]
        } else if s == 0.0 {
            [2, 1]
        } else {
            [1, 1]
        }
    };
    let mut g = c.benchmark_group("weng_lin_2v2");
    g.throughput(Throughput::Elements(teams.len() as u64));
    g.bench_function("ours_bt", |b| {
        b.iter(|| {
            for (x, y, s) in &teams {
                black_box(weng_lin::rate_two_teams(
                    weng_lin::Model::BradleyTerry,
                    x,
                    y,
                    *s,
                    &ours_cfg,
                ));
            }
        })
    });
    g.bench_function("ours_pl", |b| {
        b.iter(|| {
            for (x, y, s) in &teams {
                black_box(weng_lin::rate_two_teams(
                    weng_lin::Model::PlackettLuce,
                    x,
                    y,
                    *s,
                    &ours_cfg,
                ));
            }
        })
    });
    // The any-shape entry point (Vec<Vec> output) on the same matches, for scale.
    g.bench_function("ours_pl_any_shape", |b| {
        b.iter(|| {
            for (x, y, s) in &teams {
                black_box(weng_lin::rate(
                    weng_lin::Model::PlackettLuce,
                    &[x, y],
                    &ranks(*s),
                    &ours_cfg,
                ));
            }
        })
    });
    g.bench_function("skillratings_bt", |b| {
        b.iter(|| {
            for (x, y, o) in &their_teams {
                black_box(weng_lin_two_teams(x, y, o, &their_cfg));
            }
        })
    });
    g.finish();
}

fn bench_elo(c: &mut Criterion) {
    use skillratings::elo::{EloConfig, EloRating, elo as theirs};
    let input = pairs(4, (0.0, 3000.0), (0.0, 0.0), (0.0, 0.0));
    let ours_cfg = elo::Config::plain();
    let their_cfg = EloConfig { k: ours_cfg.k };
    let their_input: Vec<_> = input
        .iter()
        .map(|p| {
            (
                EloRating { rating: p.a.mean },
                EloRating { rating: p.b.mean },
                outcome(p.score),
            )
        })
        .collect();
    let mut g = group(c, "elo_1v1");
    g.bench_function("ours", |b| {
        b.iter(|| {
            for p in &input {
                black_box(elo::rate_1v1(
                    black_box(&p.a),
                    black_box(&p.b),
                    p.score,
                    &ours_cfg,
                ));
            }
        })
    });
    g.bench_function("skillratings", |b| {
        b.iter(|| {
            for (a, bb, o) in &their_input {
                black_box(theirs(black_box(a), black_box(bb), o, &their_cfg));
            }
        })
    });
    g.finish();
}

/// Consumes a result (already passed through `black_box`).
fn sink<T>(_: T) {}

/// Paired, interleaved A/B timing: each round times ours and skillratings back to back on the
/// same 1,024 matches (alternating which goes first), and the reported ratio is the median of the
/// per-round ratios. Background load on a shared machine hits both sides of a round alike, so
/// this ratio is far steadier than comparing two criterion groups measured seconds apart.
fn paired_ratio(
    name: &str,
    mut ours: impl FnMut(),
    mut theirs: impl FnMut(),
    per_round: usize,
) -> String {
    const ROUNDS: usize = 1001;
    let time = |f: &mut dyn FnMut()| {
        let start = Instant::now();
        f();
        start.elapsed().as_secs_f64()
    };
    for _ in 0..50 {
        ours();
        theirs();
    }
    let (mut o, mut t, mut r) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..ROUNDS {
        let (a, b) = if round % 2 == 0 {
            let a = time(&mut ours);
            (a, time(&mut theirs))
        } else {
            let b = time(&mut theirs);
            (time(&mut ours), b)
        };
        o.push(a);
        t.push(b);
        r.push(a / b);
    }
    let median = |v: &[f64]| matchmaker::math::percentile(v, 0.5);
    let (mo, mt, mr) = (median(&o), median(&t), median(&r));
    let n = per_round as f64;
    format!(
        "| {name} | {:.1} | {:.1} | {mr:.2} | {:.2}x |",
        mo / n * 1e9,
        mt / n * 1e9,
        1.0 / mr
    )
}

/// Prints the comparison table: ours vs skillratings, ns per match and the paired time ratio.
fn ratio_report(_c: &mut Criterion) {
    use skillratings::elo::{EloConfig, EloRating};
    use skillratings::glicko::{GlickoConfig, GlickoRating};
    use skillratings::glicko2::{Glicko2Config, Glicko2Rating};
    use skillratings::weng_lin::{WengLinConfig, WengLinRating, weng_lin_two_teams};

    let mut rows = Vec::new();
    let g2 = pairs(1, (800.0, 2200.0), (40.0, 350.0), (0.04, 0.08));
    let g2c = glicko2::Config::unbounded();
    let g2b = glicko2::Config::default();
    let g2t: Vec<_> = g2
        .iter()
        .map(|p| {
            let c = |s: &Skill| Glicko2Rating {
                rating: s.mean,
                deviation: s.deviation,
                volatility: s.volatility,
            };
            (c(&p.a), c(&p.b), outcome(p.score))
        })
        .collect();
    let g2tc = Glicko2Config::new();
    rows.push(paired_ratio(
        "Glicko-2 1v1 (textbook, unbounded)",
        || {
            g2.iter()
                .for_each(|p| sink(black_box(glicko2::rate_1v1(&p.a, &p.b, p.score, &g2c))))
        },
        || {
            g2t.iter().for_each(|(a, b, o)| {
                sink(black_box(skillratings::glicko2::glicko2(a, b, o, &g2tc)))
            })
        },
        N,
    ));
    rows.push(paired_ratio(
        "Glicko-2 1v1 (INVERSUS bounds on)",
        || {
            g2.iter()
                .for_each(|p| sink(black_box(glicko2::rate_1v1(&p.a, &p.b, p.score, &g2b))))
        },
        || {
            g2t.iter().for_each(|(a, b, o)| {
                sink(black_box(skillratings::glicko2::glicko2(a, b, o, &g2tc)))
            })
        },
        N,
    ));

    let g1 = pairs(2, (800.0, 2200.0), (40.0, 350.0), (0.0, 0.0));
    let g1c = glicko::Config::unbounded();
    let g1t: Vec<_> = g1
        .iter()
        .map(|p| {
            let c = |s: &Skill| GlickoRating {
                rating: s.mean,
                deviation: s.deviation,
            };
            (c(&p.a), c(&p.b), outcome(p.score))
        })
        .collect();
    let g1tc = GlickoConfig { c: 0.0 };
    rows.push(paired_ratio(
        "Glicko-1 1v1",
        || {
            g1.iter()
                .for_each(|p| sink(black_box(glicko::rate_1v1(&p.a, &p.b, p.score, &g1c))))
        },
        || {
            g1t.iter()
                .for_each(|(a, b, o)| sink(black_box(skillratings::glicko::glicko(a, b, o, &g1tc))))
        },
        N,
    ));

    let wl = pairs(3, (10.0, 40.0), (1.0, 8.3), (0.0, 0.0));
    let wlc = weng_lin::Config {
        kappa: 0.000_001,
        ..weng_lin::Config::default()
    };
    let conv = |s: &Skill| WengLinRating {
        rating: s.mean,
        uncertainty: s.deviation,
    };
    let wlt: Vec<_> = wl
        .iter()
        .map(|p| (conv(&p.a), conv(&p.b), outcome(p.score)))
        .collect();
    let wltc = WengLinConfig::new();
    rows.push(paired_ratio(
        "Weng-Lin BT 1v1",
        || {
            wl.iter()
                .for_each(|p| sink(black_box(weng_lin::rate_1v1_bt(&p.a, &p.b, p.score, &wlc))))
        },
        || {
            wlt.iter().for_each(|(a, b, o)| {
                sink(black_box(skillratings::weng_lin::weng_lin(a, b, o, &wltc)))
            })
        },
        N,
    ));
    rows.push(paired_ratio(
        "Weng-Lin PL 1v1 (vs skillratings BT: it has no PL)",
        || {
            wl.iter()
                .for_each(|p| sink(black_box(weng_lin::rate_1v1_pl(&p.a, &p.b, p.score, &wlc))))
        },
        || {
            wlt.iter().for_each(|(a, b, o)| {
                sink(black_box(skillratings::weng_lin::weng_lin(a, b, o, &wltc)))
            })
        },
        N,
    ));
    let teams: Vec<([Skill; 2], [Skill; 2], f64)> = wl
        .chunks_exact(2)
        .map(|w| ([w[0].a, w[1].a], [w[0].b, w[1].b], w[0].score))
        .collect();
    let their_teams: Vec<_> = teams
        .iter()
        .map(|(x, y, s)| {
            (
                [conv(&x[0]), conv(&x[1])],
                [conv(&y[0]), conv(&y[1])],
                outcome(*s),
            )
        })
        .collect();
    rows.push(paired_ratio(
        "Weng-Lin BT 2v2",
        || {
            teams.iter().for_each(|(x, y, s)| {
                sink(black_box(weng_lin::rate_two_teams(
                    weng_lin::Model::BradleyTerry,
                    x,
                    y,
                    *s,
                    &wlc,
                )))
            })
        },
        || {
            their_teams
                .iter()
                .for_each(|(x, y, o)| sink(black_box(weng_lin_two_teams(x, y, o, &wltc))))
        },
        teams.len(),
    ));
    rows.push(paired_ratio(
        "Weng-Lin PL 2v2 (vs skillratings BT)",
        || {
            teams.iter().for_each(|(x, y, s)| {
                sink(black_box(weng_lin::rate_two_teams(
                    weng_lin::Model::PlackettLuce,
                    x,
                    y,
                    *s,
                    &wlc,
                )))
            })
        },
        || {
            their_teams
                .iter()
                .for_each(|(x, y, o)| sink(black_box(weng_lin_two_teams(x, y, o, &wltc))))
        },
        teams.len(),
    ));

    let el = pairs(4, (0.0, 3000.0), (0.0, 0.0), (0.0, 0.0));
    let elc = elo::Config::plain();
    let elt: Vec<_> = el
        .iter()
        .map(|p| {
            (
                EloRating { rating: p.a.mean },
                EloRating { rating: p.b.mean },
                outcome(p.score),
            )
        })
        .collect();
    let eltc = EloConfig { k: elc.k };
    rows.push(paired_ratio(
        "Elo 1v1 (plain)",
        || {
            el.iter()
                .for_each(|p| sink(black_box(elo::rate_1v1(&p.a, &p.b, p.score, &elc))))
        },
        || {
            elt.iter()
                .for_each(|(a, b, o)| sink(black_box(skillratings::elo::elo(a, b, o, &eltc))))
        },
        N,
    ));

    println!("\nPaired ratio report (median of 1,001 interleaved rounds):");
    println!(
        "| system | ours ns/match | skillratings ns/match | ours/skillratings time | speed-up |"
    );
    println!("|---|---|---|---|---|");
    for r in rows {
        println!("{r}");
    }
}

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(30)
}

criterion_group! {
    name = benches;
    config = config();
    targets = bench_glicko2, bench_glicko, bench_weng_lin, bench_elo, ratio_report
}
criterion_main!(benches);

//! Cross-checks against the `skillratings` crate (0.29, dev-dependency) on random inputs, where
//! both implement the same formulas: textbook Glicko-2 (unbounded), Glicko-1 (no RD clamp, no
//! per-game c), Weng-Lin Bradley-Terry (κ = skillratings' uncertainty tolerance, τ off), plain Elo.
//! Our formulas are written independently; agreement to 1e-9 says both follow the papers.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use skillratings::{MultiTeamOutcome, Outcomes};

use super::teams::PeriodResult;
use super::test_util::*;
use super::{Skill, elo, glicko, glicko2, weng_lin};

const CASES: usize = 2_000;

fn outcome(score: f64) -> Outcomes {
    if score == 1.0 {
        Outcomes::WIN
    } else if score == 0.0 {
        Outcomes::LOSS
    } else {
        Outcomes::DRAW
    }
}

fn random_score(rng: &mut StdRng) -> f64 {
    [0.0, 0.5, 1.0][rng.random_range(0..3)]
}

fn g2(rng: &mut StdRng) -> (Skill, skillratings::glicko2::Glicko2Rating) {
    let s = Skill {
        mean: rng.random_range(500.0..2500.0),
        deviation: rng.random_range(30.0..350.0),
        volatility: rng.random_range(0.03..0.1),
    };
    (
        s,
        skillratings::glicko2::Glicko2Rating {
            rating: s.mean,
            deviation: s.deviation,
            volatility: s.volatility,
        },
    )
}

fn close(ours: &Skill, rating: f64, deviation: f64, tol: f64) {
    assert_close(ours.mean, rating, tol);
    assert_close(ours.deviation, deviation, tol);
}

#[test]
fn glicko2_1v1_matches_skillratings() {
    let mut rng = StdRng::seed_from_u64(2);
    let ours = glicko2::Config::unbounded();
    let theirs = skillratings::glicko2::Glicko2Config::new();
    for _ in 0..CASES {
        let ((a, ta), (b, tb)) = (g2(&mut rng), g2(&mut rng));
        let score = random_score(&mut rng);
        let (na, nb) = glicko2::rate_1v1(&a, &b, score, &ours);
        let (sa, sb) = skillratings::glicko2::glicko2(&ta, &tb, &outcome(score), &theirs);
        close(&na, sa.rating, sa.deviation, 1e-9);
        close(&nb, sb.rating, sb.deviation, 1e-9);
        assert_close(na.volatility, sa.volatility, 1e-9);
        assert_close(nb.volatility, sb.volatility, 1e-9);
        let (pa, _) = skillratings::glicko2::expected_score(&ta, &tb);
        assert_close(glicko2::expected_score(&a, &b), pa, 1e-12);
    }
}

#[test]
fn glicko2_rating_period_and_decay_match_skillratings() {
    let mut rng = StdRng::seed_from_u64(3);
    let ours = glicko2::Config::unbounded();
    let theirs = skillratings::glicko2::Glicko2Config::new();
    for _ in 0..CASES / 4 {
        let (p, tp) = g2(&mut rng);
        let n = rng.random_range(1..8);
        let mut results = Vec::new();
        let mut their_results = Vec::new();
        for _ in 0..n {
            let (o, to) = g2(&mut rng);
            let score = random_score(&mut rng);
            results.push(PeriodResult {
                opponent: o,
                score,
                weight: 1.0,
            });
            their_results.push((to, outcome(score)));
        }
        let out = glicko2::rate_period(&p, &results, &ours);
        let want = skillratings::glicko2::glicko2_rating_period(&tp, &their_results, &theirs);
        close(&out, want.rating, want.deviation, 1e-9);
        assert_close(out.volatility, want.volatility, 1e-9);
        // One period of inactivity (skillratings caps at RD 350; stay below it).
        let d = glicko2::decay(
            &Skill {
                deviation: p.deviation.min(300.0),
                ..p
            },
            1.0,
            &ours,
        );
        let td = skillratings::glicko2::decay_deviation(&skillratings::glicko2::Glicko2Rating {
            deviation: p.deviation.min(300.0),
            ..tp
        });
        assert_close(d.deviation, td.deviation, 1e-9);
    }
}

#[test]
fn glicko_matches_skillratings() {
    let mut rng = StdRng::seed_from_u64(4);
    let ours = glicko::Config::unbounded();
    // c = 0: skillratings applies one period of decay per game; our continuous decay is by time.
    let theirs = skillratings::glicko::GlickoConfig { c: 0.0 };
    let g1 = |rng: &mut StdRng| {
        let s = Skill {
            mean: rng.random_range(500.0..2500.0),
            deviation: rng.random_range(30.0..350.0),
            volatility: 0.0,
        };
        (
            s,
            skillratings::glicko::GlickoRating {
                rating: s.mean,
                deviation: s.deviation,
            },
        )
    };
    for _ in 0..CASES {
        let ((a, ta), (b, tb)) = (g1(&mut rng), g1(&mut rng));
        let score = random_score(&mut rng);
        let (na, nb) = glicko::rate_1v1(&a, &b, score, &ours);
        let (sa, sb) = skillratings::glicko::glicko(&ta, &tb, &outcome(score), &theirs);
        close(&na, sa.rating, sa.deviation, 1e-9);
        close(&nb, sb.rating, sb.deviation, 1e-9);
        let (pa, _) = skillratings::glicko::expected_score(&ta, &tb);
        assert_close(glicko::expected_score(&a, &b), pa, 1e-12);
    }
    for _ in 0..CASES / 4 {
        let (p, tp) = g1(&mut rng);
        let mut results = Vec::new();
        let mut their_results = Vec::new();
        for _ in 0..rng.random_range(1..8) {
            let (o, to) = g1(&mut rng);
            let score = random_score(&mut rng);
            results.push(PeriodResult {
                opponent: o,
                score,
                weight: 1.0,
            });
            their_results.push((to, outcome(score)));
        }
        let out = glicko::rate_period(&p, &results, &ours);
        let want = skillratings::glicko::glicko_rating_period(&tp, &their_results, &theirs);
        close(&out, want.rating, want.deviation, 1e-9);
    }
}

#[test]
fn weng_lin_bradley_terry_matches_skillratings() {
    let mut rng = StdRng::seed_from_u64(5);
    let ours = weng_lin::Config {
        kappa: 0.000_001,
        ..weng_lin::Config::default()
    };
    let theirs = skillratings::weng_lin::WengLinConfig::new();
    let wl = |rng: &mut StdRng| {
        let s = Skill {
            mean: rng.random_range(0.0..50.0),
            deviation: rng.random_range(0.5..8.4),
            volatility: 0.0,
        };
        (
            s,
            skillratings::weng_lin::WengLinRating {
                rating: s.mean,
                uncertainty: s.deviation,
            },
        )
    };
    for _ in 0..CASES {
        let ((a, ta), (b, tb)) = (wl(&mut rng), wl(&mut rng));
        let score = random_score(&mut rng);
        let (na, nb) = weng_lin::rate_1v1_bt(&a, &b, score, &ours);
        let (sa, sb) = skillratings::weng_lin::weng_lin(&ta, &tb, &outcome(score), &theirs);
        close(&na, sa.rating, sa.uncertainty, 1e-9);
        close(&nb, sb.rating, sb.uncertainty, 1e-9);
    }
    for _ in 0..CASES / 4 {
        let n_teams = rng.random_range(2..5);
        let mut teams = Vec::new();
        let mut their_teams = Vec::new();
        for _ in 0..n_teams {
            let size = rng.random_range(1..5);
            let (t, tt): (Vec<Skill>, Vec<_>) = (0..size).map(|_| wl(&mut rng)).unzip();
            teams.push(t);
            their_teams.push(tt);
        }
        let ranks: Vec<u32> = (0..n_teams).map(|_| rng.random_range(1..4)).collect();
        let refs: Vec<&[Skill]> = teams.iter().map(Vec::as_slice).collect();
        let out = weng_lin::rate(weng_lin::Model::BradleyTerry, &refs, &ranks, &ours);
        let input: Vec<(&[skillratings::weng_lin::WengLinRating], MultiTeamOutcome)> = their_teams
            .iter()
            .zip(&ranks)
            .map(|(t, &r)| (t.as_slice(), MultiTeamOutcome::new(r as usize)))
            .collect();
        let want = skillratings::weng_lin::weng_lin_multi_team(&input, &theirs);
        for (team, wteam) in out.iter().zip(&want) {
            for (p, w) in team.iter().zip(wteam) {
                close(p, w.rating, w.uncertainty, 1e-9);
            }
        }
    }
}

#[test]
fn plain_elo_matches_skillratings() {
    let mut rng = StdRng::seed_from_u64(6);
    let ours = elo::Config::plain();
    for _ in 0..CASES {
        let a = Skill {
            mean: rng.random_range(0.0..3000.0),
            deviation: 0.0,
            volatility: 0.0,
        };
        let b = Skill {
            mean: rng.random_range(0.0..3000.0),
            deviation: 0.0,
            volatility: 0.0,
        };
        let score = random_score(&mut rng);
        let (na, nb) = elo::rate_1v1(&a, &b, score, &ours);
        let (sa, sb) = skillratings::elo::elo(
            &skillratings::elo::EloRating { rating: a.mean },
            &skillratings::elo::EloRating { rating: b.mean },
            &outcome(score),
            &skillratings::elo::EloConfig { k: ours.k },
        );
        assert_close(na.mean, sa.rating, 1e-9);
        assert_close(nb.mean, sb.rating, 1e-9);
    }
}

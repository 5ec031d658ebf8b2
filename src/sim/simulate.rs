//! Population simulation: hidden true skills, play sessions, arrivals and retirements, skill
//! drift and parties, run through the real optimizer ([`Pool`](crate::matching::Pool), with the
//! server's own win model [`SystemModel`](crate::matching::SystemModel)) and the queue's real
//! rating system and ranking on a simulated clock, with outcomes drawn from the true skills.
//! This is the simulation testing of Josh Menke's "Skill, Matchmaking, and Ranking" (GDC 2016):
//! create fake players with known skills, run them through the matchmaker, decide who wins from
//! the same model, and measure.
//!
//! Pure and reproducible: time is the simulated clock, every random draw comes from one
//! `StdRng` seeded with [`SimParams::seed`], and nothing here reads the wall clock or does I/O,
//! so one seed gives the same report bit for bit.
//!
//! The model:
//! - True skill on the 1500 rating scale, normal (mean 1500, sd 300) or uniform with the same
//!   mean and sd; it drifts by a normal step each simulated day (`population`).
//! - In a match each player performs at N(true skill, `performance_sd`²); a team's performance
//!   is the sum of its members'; teams are placed by performance (`truth`).
//! - Ratings are compared with the truth on the true scale ([`to_true_scale`]).
//! - Units (a solo player or a fixed party) start play sessions at random (Poisson,
//!   `sessions_per_day`), play a geometric number of games (mean `games_per_session`),
//!   re-queueing after each match (`match_seconds` long) after a short pause
//!   (`requeue_seconds`); an expired ticket ends the play session (`event_loop`).
//! - A party (fixed members, team queues only) gets its own rating on its first queue and is
//!   matched by it (`party_ratings`); its members' ratings still update as usual (`play`).
//! - Each day new solo players arrive (Poisson, `arrivals_per_day`) and each unit retires with
//!   probability `retire_per_day`.
//!
//! What is measured (`report`): the rating system's prediction accuracy and calibration next
//! to an oracle that knows the true skills, convergence to the truth, waits and match quality,
//! rank points over time per true-skill decile, and how balanced the matches were
//! (`balance`, Samuel White's success measures).

mod balance;
mod event_loop;
mod params;
mod play;
mod population;
mod report;
mod truth;

pub use balance::{BLOWOUT, BalanceSummary, FAIR_CHANCE, GAP_TOLERANCE};
pub use params::{DAY, SimParams, SkillDistribution};
pub use report::SimReport;
pub use truth::to_true_scale;

use crate::matching::{MatchingConfig, Shape};
use crate::ranking::RankingConfig;
use crate::ranking::RankingKind;
use crate::rating::SystemConfig;
use crate::rejection::FieldError;
use event_loop::Sim;

/// The queue a simulation runs: its shape, rating system and optimizer config.
#[derive(Clone, Debug)]
pub struct SimQueue {
    /// Queue name (for the report).
    pub name: String,
    /// Teams × team size.
    pub shape: Shape,
    /// Largest party.
    pub max_party_size: u32,
    /// The queue's rating system.
    pub system: SystemConfig,
    /// The queue's optimizer config.
    pub matching: MatchingConfig,
    /// What players are shown (rank points).
    pub ranking: RankingKind,
    /// The server's ranking settings (ladder, INVERSUS rank points).
    pub ranking_config: RankingConfig,
}

/// Runs one simulation; `on_day` is told each simulated day as it starts (for a progress bar).
/// Pure: the same `params` and `queue` give the same report. The error names the bad field.
pub fn simulate(
    params: &SimParams,
    queue: &SimQueue,
    on_day: &dyn Fn(u64),
) -> Result<SimReport, FieldError> {
    params.validate()?;
    queue.system.validate().map_err(|e| e.under("rating"))?;
    queue
        .matching
        .validate(queue.shape)
        .map_err(|e| e.under("matching"))?;
    let mut sim = Sim::new(params, queue);
    sim.populate();
    sim.run(on_day);
    Ok(sim.report())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::matching::{SystemModel, WinModel};
    use crate::rating::{Skill, glicko, glicko2, weng_lin};

    fn queue_1v1() -> SimQueue {
        SimQueue {
            name: "1v1".into(),
            shape: Shape {
                teams: 2,
                team_size: 1,
            },
            max_party_size: 1,
            system: SystemConfig::Glicko2(glicko2::Config::default()),
            matching: MatchingConfig::default_for_scale(400.0),
            ranking: RankingKind::Inversus,
            ranking_config: RankingConfig::default(),
        }
    }

    fn small(seed: u64) -> SimParams {
        SimParams {
            players: 300,
            days: 1.0,
            seed,
            arrivals_per_day: 10.0,
            sessions_per_day: 3.0,
            match_seconds: 600.0,
            tick_seconds: 5.0,
            ..SimParams::default()
        }
    }

    #[test]
    fn a_fixed_seed_reproduces_the_report_bit_for_bit() {
        let a = simulate(&small(7), &queue_1v1(), &|_| {}).unwrap();
        let b = simulate(&small(7), &queue_1v1(), &|_| {}).unwrap();
        assert!(a.matches > 100, "only {} matches", a.matches);
        let ja = serde_json::to_string(&a).unwrap();
        assert_eq!(ja, serde_json::to_string(&b).unwrap());
        assert_eq!(a.final_ratings, b.final_ratings);
        assert_eq!(a.wait_quality, b.wait_quality);
        let c = simulate(&small(8), &queue_1v1(), &|_| {}).unwrap();
        assert_ne!(ja, serde_json::to_string(&c).unwrap());
    }

    #[test]
    fn team_queues_with_parties_run_and_report_match_balance() {
        let q = SimQueue {
            name: "5v5".into(),
            shape: Shape {
                teams: 2,
                team_size: 5,
            },
            max_party_size: 5,
            system: SystemConfig::WengLinBt(weng_lin::Config::default()),
            matching: MatchingConfig::default_for_scale(15.0),
            ranking: RankingKind::Ladder,
            ranking_config: RankingConfig::default(),
        };
        let r = simulate(&small(3), &q, &|_| {}).unwrap();
        assert!(r.matches > 20, "only {} matches", r.matches);
        let b = r.match_balance;
        assert!((0.0..=1.0).contains(&b.upset_rate));
        assert!((0.0..=1.0).contains(&b.fair_by_true_skill.unwrap()));
        assert!((0.0..=1.0).contains(&b.rating_gap_tracks_skill_gap.unwrap()));
        assert!(r.log_loss.is_finite() && r.ece.is_finite());
        assert_eq!(r.display_by_decile.len(), 10);
        assert_eq!(r.rank_points_by_decile.len(), 10);
    }

    /// An oracle that predicts from the true skills is calibrated by construction: the ECE the
    /// simulation reports for it must be sampling noise, and a converged Glicko-2 on a 1v1 queue
    /// (whose logistic model is close to the simulated probit) must be close to that floor.
    #[test]
    fn a_well_calibrated_system_reports_ece_within_sampling_noise() {
        let params = SimParams {
            players: 400,
            days: 3.0,
            seed: 11,
            arrivals_per_day: 0.0,
            retire_per_day: 0.0,
            drift_sd_per_day: 0.0,
            sessions_per_day: 4.0,
            match_seconds: 600.0,
            tick_seconds: 10.0,
            ..SimParams::default()
        };
        let r = simulate(&params, &queue_1v1(), &|_| {}).unwrap();
        let n = r.n as f64;
        assert!(n > 3000.0, "n = {n}");
        // Sampling noise of ECE over 10 bins with binomial outcomes: about
        // sqrt(10 · 0.25 / n) · sqrt(2/π) in expectation; allow three times that.
        let noise = 3.0 * (10.0 * 0.25 / n).sqrt() * (2.0 / std::f64::consts::PI).sqrt();
        let oracle = r.ece_truth.unwrap();
        assert!(oracle < noise, "oracle ece {oracle} vs noise {noise}");
        assert!(
            r.ece < noise + 0.02,
            "glicko2 ece {} vs noise {noise}",
            r.ece
        );
    }

    #[test]
    fn bad_params_name_the_field() {
        let p = SimParams {
            days: -1.0,
            ..SimParams::default()
        };
        let e = simulate(&p, &queue_1v1(), &|_| {}).unwrap_err();
        assert_eq!(e.field, "days");
        assert!(e.rule.contains("> 0"), "{e}");
    }

    /// The simulator matches with the server's win model, `SystemModel`, which fills every
    /// skill's volatility with the system's initial one. Volatility only steers how Glicko-2's
    /// deviation moves in an update; no system's prediction reads it, so the predictions are
    /// the same whatever the volatility, and `SystemModel`'s allocation-free 1v1 answer for the
    /// Glicko family agrees with the general prediction.
    #[test]
    fn the_servers_win_model_ignores_volatility_and_agrees_with_predict() {
        let systems = [
            SystemConfig::Glicko2(glicko2::Config::default()),
            SystemConfig::Glicko(glicko::Config::default()),
            SystemConfig::WengLinBt(weng_lin::Config::default()),
            SystemConfig::WengLinPl(weng_lin::Config::default()),
            SystemConfig::WengLinTm(weng_lin::Config::default()),
            SystemConfig::Elo(crate::rating::elo::Config::default()),
        ];
        for system in &systems {
            let init = system.initial();
            let pairs = [
                ((init.mean, init.deviation), (init.mean, init.deviation)),
                (
                    (
                        init.mean + 0.3 * init.deviation,
                        0.5 * init.deviation.max(1.0),
                    ),
                    (
                        init.mean - 0.2 * init.deviation,
                        0.9 * init.deviation.max(1.0),
                    ),
                ),
                (
                    (init.mean - init.deviation, 0.3 * init.deviation.max(1.0)),
                    (init.mean + 2.0 * init.deviation, init.deviation.max(1.0)),
                ),
            ];
            for (a, b) in pairs {
                let predict = |volatility: f64| {
                    let skill = |(mean, deviation): (f64, f64)| Skill {
                        mean,
                        deviation,
                        volatility,
                    };
                    let (ta, tb) = ([skill(a)], [skill(b)]);
                    system.predict(&[&ta, &tb]).unwrap().win_probability
                };
                let low = predict(0.04);
                assert_eq!(low, predict(0.08), "{}", system.name());
                assert_eq!(low, predict(init.volatility.max(0.01)), "{}", system.name());
                let model = SystemModel::new(system);
                assert_eq!(
                    model.win_probabilities(&[vec![a], vec![b]]),
                    predict(init.volatility),
                    "{}",
                    system.name()
                );
                let p = model.win_probability_1v1(a, b);
                assert!(
                    (p - low[0]).abs() < 1e-12,
                    "{}: {p} vs {low:?}",
                    system.name()
                );
            }
        }
    }
}

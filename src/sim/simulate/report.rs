//! What a simulation reports: the running tallies the event loop fills, the rating-over-time
//! snapshots per true-skill decile, and the final [`SimReport`].

use serde::Serialize;

use super::balance::{BalanceSummary, MatchBalance};
use super::event_loop::Sim;
use super::params::DAY;
use super::population::Player;
use super::to_true_scale;
use crate::math::percentile;
use crate::ranking::RankingKind;
use crate::sim::measures::{Accumulator, CalibrationBin};

/// Players need this many games before their convergence counts.
const CONVERGENCE_MIN_GAMES: u32 = 10;

/// Everything a simulation reports (the `--json` object, plus series for plots).
#[derive(Clone, Debug, Serialize)]
pub struct SimReport {
    /// Rating system.
    pub system: String,
    /// Queue name.
    pub queue: String,
    /// The seed.
    pub seed: u64,
    /// Predictions scored (one per match).
    pub n: u64,
    /// Mean log loss of the rating system's predictions.
    pub log_loss: f64,
    /// Mean Brier score.
    pub brier: f64,
    /// How often the favourite won.
    pub accuracy: f64,
    /// Expected calibration error (10 bins).
    pub ece: f64,
    /// ECE an oracle that knows the true skills gets on the same matches: the sampling-noise
    /// floor the system's ECE should be compared with (two-team queues; absent for
    /// free-for-all).
    pub ece_truth: Option<f64>,
    /// Log loss of that oracle (the best any system could do).
    pub log_loss_truth: Option<f64>,
    /// Wall-clock seconds (filled in by the caller; 0 from the pure run).
    pub seconds: f64,
    /// Median games until a player's rating came within `convergence_band` of the truth and
    /// stayed there (players with 10+ games whose rating ended inside the band).
    pub games_to_converge: f64,
    /// Fraction of players with at least 10 games whose rating ended inside the band.
    pub converged_fraction: f64,
    /// Median match quality (underdog's predicted win probability).
    pub quality_p50: f64,
    /// Mean match quality.
    pub quality_mean: f64,
    /// Median wait of matched tickets, simulated seconds.
    pub wait_p50_s: f64,
    /// 95th percentile wait.
    pub wait_p95_s: f64,
    /// Matches played.
    pub matches: u64,
    /// Tickets that expired unmatched.
    pub expired_tickets: u64,
    /// Players who ever existed (start + arrivals).
    pub players_total: usize,
    /// Players retired by the end.
    pub players_retired: usize,
    /// How fair the matches were by true skill and by rating, and how well rating gaps tracked
    /// skill gaps (Samuel White's success measures; see `balance`).
    pub match_balance: BalanceSummary,
    /// Predicted vs actual per bucket.
    pub calibration: Vec<CalibrationBin>,
    /// Per true-skill decile (of the starting population, lowest first), mean display rating
    /// over time as (day, rating) points.
    pub display_by_decile: Vec<Vec<(f64, f64)>>,
    /// Per true-skill decile, mean rank points over time (day, RP), computed by the server's own
    /// ranking code: the rank-experience curves of Menke's "Skill, Matchmaking, and Ranking"
    /// (GDC 2016). Empty for `ranking = "none"` queues.
    pub rank_points_by_decile: Vec<Vec<(f64, f64)>>,
    /// Final ratings of active players on the true scale.
    #[serde(skip)]
    pub final_ratings: Vec<f64>,
    /// Final true skills of active players.
    #[serde(skip)]
    pub final_truths: Vec<f64>,
    /// (wait, quality) per matched ticket.
    #[serde(skip)]
    pub wait_quality: Vec<(f64, f64)>,
}

/// Running tallies, filled as the simulation goes.
pub(super) struct Tally {
    /// The rating system's predictions, scored.
    pub(super) predictions: Accumulator,
    /// The true-skill oracle's predictions on the same (two-team) matches.
    pub(super) oracle: Accumulator,
    pub(super) waits: Vec<f64>,
    pub(super) qualities: Vec<f64>,
    pub(super) wait_quality: Vec<(f64, f64)>,
    pub(super) matches: u64,
    pub(super) expired: u64,
    pub(super) balance: MatchBalance,
    pub(super) retired_players: usize,
    /// Per decile, (day, mean display rating) snapshots.
    pub(super) display_by_decile: Vec<Vec<(f64, f64)>>,
    /// Per decile, (day, mean rank points) snapshots.
    pub(super) rank_points_by_decile: Vec<Vec<(f64, f64)>>,
}

impl Default for Tally {
    fn default() -> Self {
        Tally {
            predictions: Accumulator::new(),
            oracle: Accumulator::new(),
            waits: Vec::new(),
            qualities: Vec::new(),
            wait_quality: Vec::new(),
            matches: 0,
            expired: 0,
            balance: MatchBalance::default(),
            retired_players: 0,
            display_by_decile: vec![Vec::new(); 10],
            rank_points_by_decile: vec![Vec::new(); 10],
        }
    }
}

impl Sim<'_> {
    /// Records each decile's mean display rating and rank points at `now`.
    pub(super) fn snapshot(&mut self, now: f64) {
        let mut sums = [(0.0, 0.0, 0u32); 10];
        for pl in &self.players {
            if pl.decile < 10 {
                let d = self.q.system.display(&pl.skill).display;
                sums[pl.decile].0 += d;
                sums[pl.decile].1 += f64::from(pl.rank.rank_points);
                sums[pl.decile].2 += 1;
            }
        }
        for (d, (s, rp, c)) in sums.iter().enumerate() {
            if *c > 0 {
                self.tally.display_by_decile[d].push((now / DAY, s / f64::from(*c)));
                if self.q.ranking != RankingKind::None {
                    self.tally.rank_points_by_decile[d].push((now / DAY, rp / f64::from(*c)));
                }
            }
        }
    }

    /// The final report.
    pub(super) fn report(mut self) -> SimReport {
        let t = std::mem::take(&mut self.tally);
        let s = t.predictions.summary();
        let oracle = t.oracle.summary();
        // Converged = inside the band after the last game and ever since entering it for good:
        // the games needed are one more than the last game that left it outside. Only players
        // with 10+ games count, so one lucky first game does not look like convergence.
        let mut conv: Vec<f64> = Vec::new();
        let mut eligible = 0usize;
        for pl in self
            .players
            .iter()
            .filter(|p| p.games >= CONVERGENCE_MIN_GAMES)
        {
            eligible += 1;
            if pl.last_outside < pl.games {
                conv.push(f64::from(pl.last_outside + 1));
            }
        }
        let active: Vec<&Player> = self
            .units
            .iter()
            .filter(|u| !u.retired)
            .flat_map(|u| u.members.iter().map(|&i| &self.players[i]))
            .filter(|p| p.games > 0)
            .collect();
        // The oracle is defined for two-team matches only.
        let two_team = t.balance.two_team_matches() > 0;
        SimReport {
            system: self.q.system.name().to_string(),
            queue: self.q.name.clone(),
            seed: self.p.seed,
            n: s.n,
            log_loss: s.log_loss,
            brier: s.brier,
            accuracy: s.accuracy,
            ece: s.ece,
            ece_truth: two_team.then_some(oracle.ece),
            log_loss_truth: two_team.then_some(oracle.log_loss),
            seconds: 0.0,
            games_to_converge: percentile(&conv, 0.5),
            converged_fraction: if eligible == 0 {
                0.0
            } else {
                conv.len() as f64 / eligible as f64
            },
            quality_p50: percentile(&t.qualities, 0.5),
            quality_mean: if t.qualities.is_empty() {
                0.0
            } else {
                t.qualities.iter().sum::<f64>() / t.qualities.len() as f64
            },
            wait_p50_s: percentile(&t.waits, 0.5),
            wait_p95_s: percentile(&t.waits, 0.95),
            matches: t.matches,
            expired_tickets: t.expired,
            players_total: self.players.len(),
            players_retired: t.retired_players,
            match_balance: t.balance.summary(),
            calibration: t.predictions.calibration(),
            display_by_decile: t.display_by_decile,
            rank_points_by_decile: t.rank_points_by_decile,
            final_ratings: active
                .iter()
                .map(|p| to_true_scale(&self.q.system, p.skill.mean, self.p))
                .collect(),
            final_truths: active.iter().map(|p| p.truth).collect(),
            wait_quality: t.wait_quality,
        }
    }
}

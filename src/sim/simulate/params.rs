//! The simulated population's parameters: everything `matchmaker simulate --population FILE`
//! accepts, with the documented defaults and a validation that names the field.

use crate::rejection::FieldError;
use serde::{Deserialize, Serialize};

/// Seconds in a simulated day.
pub const DAY: f64 = 86_400.0;

/// How true skills are drawn.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SkillDistribution {
    /// Normal with `skill_mean`, `skill_sd`.
    #[default]
    Normal,
    /// Uniform with the same mean and standard deviation.
    Uniform,
}

/// Everything about the simulated population; `Default` is the documented setting.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SimParams {
    /// Players at the start.
    pub players: usize,
    /// Simulated days.
    pub days: f64,
    /// RNG seed: the whole run is a function of it.
    pub seed: u64,
    /// True-skill distribution.
    pub distribution: SkillDistribution,
    /// Mean true skill (1500 scale).
    pub skill_mean: f64,
    /// Standard deviation of true skill.
    pub skill_sd: f64,
    /// Per-player performance noise in one match: each player performs at N(true skill, this²)
    /// (Menke's "sample from the normal each player has, the higher sample wins").
    pub performance_sd: f64,
    /// Standard deviation of the daily true-skill drift.
    pub drift_sd_per_day: f64,
    /// New solo players per day (Poisson mean).
    pub arrivals_per_day: f64,
    /// Probability that a unit (a solo player or a fixed party) retires on a given day.
    pub retire_per_day: f64,
    /// Fraction of players in pre-made parties (team queues only).
    pub party_fraction: f64,
    /// Give each party its own rating (`rating::party_initial` / `results::rate_party`) and
    /// let the optimizer match the party by it, as the server does.
    pub party_ratings: bool,
    /// Play sessions a unit starts per day (Poisson rate).
    pub sessions_per_day: f64,
    /// Mean games per play session (geometric).
    pub games_per_session: f64,
    /// Length of a match in seconds.
    pub match_seconds: f64,
    /// Mean pause between a match's end and the next queue entry in a play session
    /// (exponential), so a finished match's players do not all re-enter at the same instant.
    pub requeue_seconds: f64,
    /// Simulated seconds between optimizer ticks.
    pub tick_seconds: f64,
    /// A rating within this distance of the truth (true scale) counts as converged.
    pub convergence_band: f64,
    /// Days between snapshots of the rating-over-time curves.
    pub snapshot_days: f64,
}

impl Default for SimParams {
    fn default() -> Self {
        Self {
            players: 2000,
            days: 7.0,
            seed: 1,
            distribution: SkillDistribution::Normal,
            skill_mean: 1500.0,
            skill_sd: 300.0,
            performance_sd: 200.0,
            drift_sd_per_day: 5.0,
            arrivals_per_day: 40.0,
            retire_per_day: 0.01,
            party_fraction: 0.2,
            party_ratings: true,
            sessions_per_day: 2.0,
            games_per_session: 5.0,
            match_seconds: 900.0,
            requeue_seconds: 60.0,
            tick_seconds: 2.0,
            convergence_band: 100.0,
            snapshot_days: 0.25,
        }
    }
}

impl SimParams {
    /// Checks every number; the error names the field and the rule.
    pub fn validate(&self) -> Result<(), FieldError> {
        let pos = |k: &str, v: f64| {
            if v.is_finite() && v > 0.0 {
                Ok(())
            } else {
                Err(FieldError::new(
                    k,
                    format!("must be finite and > 0 (got {v})"),
                ))
            }
        };
        let non_neg = |k: &str, v: f64| {
            if v.is_finite() && v >= 0.0 {
                Ok(())
            } else {
                Err(FieldError::new(
                    k,
                    format!("must be finite and >= 0 (got {v})"),
                ))
            }
        };
        if self.players < 2 {
            return Err(FieldError::new(
                "players",
                format!("need at least 2 (got {})", self.players),
            ));
        }
        pos("days", self.days)?;
        if self.days > 3650.0 {
            return Err(FieldError::new(
                "days",
                format!("at most 3650 (got {})", self.days),
            ));
        }
        pos("skill_sd", self.skill_sd)?;
        pos("performance_sd", self.performance_sd)?;
        non_neg("drift_sd_per_day", self.drift_sd_per_day)?;
        non_neg("arrivals_per_day", self.arrivals_per_day)?;
        if !(0.0..=1.0).contains(&self.retire_per_day) {
            return Err(FieldError::new(
                "retire_per_day",
                format!("must be in [0, 1] (got {})", self.retire_per_day),
            ));
        }
        if !(0.0..=1.0).contains(&self.party_fraction) {
            return Err(FieldError::new(
                "party_fraction",
                format!("must be in [0, 1] (got {})", self.party_fraction),
            ));
        }
        pos("sessions_per_day", self.sessions_per_day)?;
        if !(self.games_per_session >= 1.0 && self.games_per_session.is_finite()) {
            return Err(FieldError::new(
                "games_per_session",
                format!("must be >= 1 (got {})", self.games_per_session),
            ));
        }
        pos("match_seconds", self.match_seconds)?;
        pos("requeue_seconds", self.requeue_seconds)?;
        pos("tick_seconds", self.tick_seconds)?;
        pos("convergence_band", self.convergence_band)?;
        pos("snapshot_days", self.snapshot_days)?;
        if !self.skill_mean.is_finite() {
            return Err(FieldError::new("skill_mean", "must be finite"));
        }
        Ok(())
    }
}

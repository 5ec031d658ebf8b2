//! INVERSUS rank points (SPEC §4.1, seed 000): a slow, one-directional walk toward the lower end
//! of a player's skill interval.
//!
//! The target is the *functional rating* μ − kφ (k = 3: the 99.7% lower bound) on the internal
//! Glicko-2 scale, mapped linearly from `[rating_min, rating_max]` = [−6.045, 6.045] onto
//! `[0, max_rp]` = [0, 10000] and clamped. After each match the player moves `fraction` (½) of the
//! way toward it — only up on a win, only down on a loss — with at least `min_change` (1) and at
//! most `max_change` (500) points, plus an upset bonus for beating a stronger opponent.
//!
//! What this module deliberately does not do: update skill (that is [`crate::rating`]), keep
//! state (the caller stores one [`RankPoints`] and, while a match runs, one [`PendingMatch`]), or
//! read a clock.
//!
//! **Who is "the opponent" in a team or free-for-all match.** The upset bonus compares the
//! player's mean with the opponent's mean. For teams pass the composite-team virtual opponent that
//! seed 000 stores in its pending record and SPEC §3.5 uses by default — own mean + (mean of all
//! opposing players − mean of own team), see [`composite_opponent_mean`] — so the bonus measures
//! how much stronger the *other side* was, not how the player compares with one opponent.
//!
//! **Other skill systems.** The mapping reads display units through `display_center` and
//! `display_scale` (1500 and 173.7178: the Glicko-2 conversion). For a Weng-Lin queue set
//! `display_center = 25` and `display_scale = (25/3)/2.015 ≈ 4.1356`, which sends a new player
//! (μ = 25, σ = 25/3) to the same functional rating −6.045 (0 RP) as a new Glicko-2 player.

use serde::{Deserialize, Serialize};

use super::{Outcome, RankChange, RankPoints, round_rank_points};
use crate::rating::Skill;

/// INVERSUS parameters (`[ranking.inversus]`); `Default` is the SPEC / seed 000 setting.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct InversusConfig {
    /// Share of the distance to the target covered per match (0.5 = "halfway"). Smaller is
    /// smoother; 1 snaps to the target.
    pub fraction: f64,
    /// k in the functional rating μ − kφ and the upper bound μ + kφ (3 = 99.7%).
    pub deviations: f64,
    /// Internal-scale rating mapped to 0 RP (the Glicko-2 lower μ bound, −6.045).
    pub rating_min: f64,
    /// Internal-scale rating mapped to `max_rp` (the Glicko-2 upper μ bound, 6.045).
    pub rating_max: f64,
    /// The most rank points anyone can hold (10000).
    pub max_rp: RankPoints,
    /// Every win earns (every loss costs) at least this much, so each match visibly counts —
    /// unless a win would pass the upper bound μ + kφ or `max_rp`, or a loss would pass 0.
    pub min_change: RankPoints,
    /// Largest change from one match, bonus included (500): early, wild skill estimates
    /// become a steady climb instead of one jump.
    pub max_change: RankPoints,
    /// Upset bonus at the full gap (250 RP); 0 turns it off.
    pub upset_bonus: RankPoints,
    /// Mean gap (internal scale) at which the full upset bonus is paid (12.09 = the μ range).
    pub upset_full_gap: f64,
    /// Display rating of internal μ = 0 (1500 for the Glicko family).
    pub display_center: f64,
    /// Display units per internal unit (173.7178 for the Glicko family).
    pub display_scale: f64,
}

impl Default for InversusConfig {
    fn default() -> Self {
        Self {
            fraction: 0.5,
            deviations: 3.0,
            rating_min: -6.045,
            rating_max: 6.045,
            max_rp: 10_000,
            min_change: 1,
            max_change: 500,
            upset_bonus: 250,
            upset_full_gap: 12.09,
            display_center: crate::rating::glicko2::CENTER,
            display_scale: crate::rating::glicko2::SCALE,
        }
    }
}

impl InversusConfig {
    /// Checks every rule; errors read `ranking.inversus.<key>: <rule>`.
    pub fn validate(&self) -> Result<(), String> {
        let err = |key: &str, rule: String| Err(format!("ranking.inversus.{key}: {rule}"));
        if !(self.fraction > 0.0 && self.fraction <= 1.0) {
            return err(
                "fraction",
                format!("must be in (0, 1] (got {})", self.fraction),
            );
        }
        if !(self.deviations.is_finite() && self.deviations >= 0.0) {
            return err(
                "deviations",
                format!("must be finite and >= 0 (got {})", self.deviations),
            );
        }
        if !self.rating_min.is_finite() {
            return err(
                "rating_min",
                format!("must be finite (got {})", self.rating_min),
            );
        }
        if !(self.rating_max.is_finite() && self.rating_max > self.rating_min) {
            return err(
                "rating_max",
                format!(
                    "must be finite and greater than rating_min (got {} <= {})",
                    self.rating_max, self.rating_min
                ),
            );
        }
        if self.max_rp == 0 {
            return err("max_rp", "must be at least 1".to_owned());
        }
        if self.min_change > self.max_change {
            return err(
                "min_change",
                format!(
                    "must not exceed max_change (got {} > {})",
                    self.min_change, self.max_change
                ),
            );
        }
        if self.max_change == 0 {
            return err("max_change", "must be at least 1".to_owned());
        }
        if !(self.upset_full_gap.is_finite() && self.upset_full_gap > 0.0) {
            return err(
                "upset_full_gap",
                format!("must be finite and > 0 (got {})", self.upset_full_gap),
            );
        }
        if !self.display_center.is_finite() {
            return err(
                "display_center",
                format!("must be finite (got {})", self.display_center),
            );
        }
        if !(self.display_scale.is_finite() && self.display_scale > 0.0) {
            return err(
                "display_scale",
                format!("must be finite and > 0 (got {})", self.display_scale),
            );
        }
        Ok(())
    }

    /// Display rating → internal scale (μ = (r − 1500)/173.7178 by default).
    fn internal(&self, display: f64) -> f64 {
        (display - self.display_center) / self.display_scale
    }

    /// Internal-scale rating → fractional rank points, clamped into `[0, max_rp]`.
    fn map(&self, internal: f64) -> f64 {
        let max = f64::from(self.max_rp);
        let rp = (internal - self.rating_min) / (self.rating_max - self.rating_min) * max;
        if rp.is_nan() { 0.0 } else { rp.clamp(0.0, max) }
    }
}

/// Everything ranking needs about one finished match of one player.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct InversusMatch {
    /// The player's skill after the rating update of this match (display units).
    pub skill_after: Skill,
    /// The player's mean before the match (display units), for the upset bonus.
    pub own_mean_before: f64,
    /// The opponent's mean before the match (display units); for teams the composite virtual
    /// opponent, see [`composite_opponent_mean`].
    pub opponent_mean_before: f64,
    /// Win, draw or loss (see [`Outcome::from_placements`] for more than two teams).
    pub outcome: Outcome,
}

/// The rank points an estimate is worth if the player's rank snapped to it: the functional rating
/// μ − kφ mapped onto `[0, max_rp]`. Unrounded, because it is a target, not a score.
#[must_use]
pub fn target_rp(cfg: &InversusConfig, skill: &Skill) -> f64 {
    let mu = cfg.internal(skill.mean);
    let phi = skill.deviation / cfg.display_scale;
    cfg.map(mu - cfg.deviations * phi)
}

/// The upper end of the player's interval, μ + kφ, mapped like [`target_rp`]: a win never earns the
/// minimum-change point past it, so a player cannot grind above what the system believes possible.
#[must_use]
pub fn upper_rp(cfg: &InversusConfig, skill: &Skill) -> f64 {
    let mu = cfg.internal(skill.mean);
    let phi = skill.deviation / cfg.display_scale;
    cfg.map(mu + cfg.deviations * phi)
}

/// Upset bonus for a winner: `upset_bonus × clamp((μ_opp − μ_self)/upset_full_gap, 0, 1)` with both
/// means before the match, on the internal scale. Beating a stronger side feels like it should
/// pay more than the smoothed target alone would; 0 for an even or weaker opponent.
#[must_use]
pub fn upset_bonus(cfg: &InversusConfig, own_mean_before: f64, opponent_mean_before: f64) -> f64 {
    let gap = (opponent_mean_before - own_mean_before) / cfg.display_scale;
    let share = (gap / cfg.upset_full_gap).clamp(0.0, 1.0);
    if share.is_nan() {
        0.0
    } else {
        f64::from(cfg.upset_bonus) * share
    }
}

/// The opponent a team player is compared with for the upset bonus (display units): own mean
/// shifted by how much stronger the opposing players are on average than the own team
/// (composite team, SPEC §3.5). `opponents` holds every player of every other team, so in a
/// free-for-all it is the field's mean. With an empty slice the player is their own opponent
/// (no bonus).
#[must_use]
pub fn composite_opponent_mean(own_mean: f64, own_team: &[f64], opponents: &[f64]) -> f64 {
    match (mean(own_team), mean(opponents)) {
        (Some(own_team_mean), Some(opponent_mean)) => own_mean + (opponent_mean - own_team_mean),
        _ => own_mean,
    }
}

fn mean(values: &[f64]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    // Lossless for any slice that fits in memory: u32 counts convert exactly, and a team or a
    // match never has more than u32::MAX players.
    let n = u32::try_from(values.len()).ok()?;
    Some(values.iter().sum::<f64>() / f64::from(n))
}

/// New rank points after one match (SPEC §4.1).
///
/// A win moves `fraction` of the way up toward [`target_rp`] (never down, even if inactivity has
/// pushed the target below the current score), adds [`upset_bonus`], is raised to `min_change`
/// unless that passes [`upper_rp`] or `max_rp`, and is capped at `max_change`. A loss mirrors it
/// downward (floor 0, no bonus). A draw changes nothing: INVERSUS only moves on a decision, and
/// neither direction would match what the player expects. `rp_before` above `max_rp` (a corrupt
/// record) is first clamped to `max_rp`.
#[must_use]
pub fn update(cfg: &InversusConfig, rp_before: RankPoints, m: &InversusMatch) -> RankChange {
    let before = rp_before.min(cfg.max_rp);
    let rp = f64::from(before);
    let target = target_rp(cfg, &m.skill_after);
    let min_change = f64::from(cfg.min_change);
    let max_change = f64::from(cfg.max_change);
    let after = match m.outcome {
        Outcome::Draw => before,
        Outcome::Win => {
            let ceiling = upper_rp(cfg, &m.skill_after);
            let mut gain = finite_or_zero(cfg.fraction * (target - rp)).max(0.0)
                + upset_bonus(cfg, m.own_mean_before, m.opponent_mean_before);
            if gain < min_change && rp + min_change <= ceiling {
                gain = min_change;
            }
            round_rank_points(rp + gain.min(max_change), before, cfg.max_rp)
        }
        Outcome::Loss => {
            let mut drop = finite_or_zero(cfg.fraction * (rp - target)).max(0.0);
            if drop < min_change && rp - min_change >= 0.0 {
                drop = min_change;
            }
            round_rank_points(rp - drop.min(max_change), 0, before)
        }
    };
    RankChange { before, after }
}

fn finite_or_zero(x: f64) -> f64 {
    if x.is_finite() { x } else { 0.0 }
}

/// What the server persists for a player while an INVERSUS match runs (seed 000's pending
/// record): the means the upset bonus needs, snapshotted when the match starts.
///
/// Rule (SPEC §4.1): a player who abandons, or starts a new match with one still pending, takes
/// the pending match as a loss; if the opponent quits first it is cancelled — not a win.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct PendingMatch {
    /// The player's mean at match start (display units).
    pub own_mean_before: f64,
    /// The (composite) opponent's mean at match start (display units).
    pub opponent_mean_before: f64,
}

/// How a pending match ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum PendingEnd {
    /// Both sides finished; the reported outcome stands.
    Finished(Outcome),
    /// This player left, or queued into a new match with this one unresolved.
    Abandoned,
    /// The opponent quit first.
    OpponentQuit,
}

impl PendingMatch {
    /// The outcome to rate and rank, or `None` when the match is cancelled (nothing changes).
    #[must_use]
    pub fn resolve(end: PendingEnd) -> Option<Outcome> {
        match end {
            PendingEnd::Finished(outcome) => Some(outcome),
            PendingEnd::Abandoned => Some(Outcome::Loss),
            PendingEnd::OpponentQuit => None,
        }
    }

    /// The ranking input once the rating update for `outcome` has produced `skill_after`.
    #[must_use]
    pub fn into_match(self, skill_after: Skill, outcome: Outcome) -> InversusMatch {
        InversusMatch {
            skill_after,
            own_mean_before: self.own_mean_before,
            opponent_mean_before: self.opponent_mean_before,
            outcome,
        }
    }
}

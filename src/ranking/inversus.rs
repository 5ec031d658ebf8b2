//! INVERSUS rank points (Ryan Juckett, "Adding Online Skill Ranking to INVERSUS Deluxe", 2018):
//! a slow, one-directional walk toward the lower end of a player's skill interval.
//!
//! The target is the *functional rating* μ − kφ (k = 3: the 99.7% lower bound) on the internal
//! Glicko-2 scale, mapped linearly from `[rating_min, rating_max]` = [−6.045, 6.045] onto
//! `[0, max_rp]` = [0, 10000] and clamped. After each match the player moves `fraction` (½) of the
//! way toward it — only up on a win, only down on a loss — with at least `min_change` (1) and at
//! most `max_change` (500) points, plus an upset bonus for beating a stronger opponent.
//!
//! What this module deliberately does not do: update skill (that is [`crate::rating`]), keep
//! state (the caller stores one [`RankPoints`]), or read a clock. INVERSUS's pending-match rule
//! (an abandon is a loss, an opponent's quit cancels the match) is applied where results are
//! computed (`results::compute`).
//!
//! **Who is "the opponent" in a team or free-for-all match.** The upset bonus compares the player's
//! mean with the opponent's mean. For teams pass the composite-team virtual opponent that INVERSUS
//! stores in its pending record and the Glicko team strategy uses by default — own mean + (mean of
//! all opposing players − mean of own team), see [`composite_opponent_mean`] — so the bonus
//! measures how much stronger the *other side* was, not how the player compares with one opponent.
//!
//! **Other skill systems.** The mapping reads display units through `display_center` and
//! `display_scale` (1500 and 173.7178: the Glicko-2 conversion). For a Weng-Lin queue set
//! `display_center = 25` and `display_scale = (25/3)/2.015 ≈ 4.1356`, which sends a new player
//! (μ = 25, σ = 25/3) to the same functional rating −6.045 (0 RP) as a new Glicko-2 player.

use serde::{Deserialize, Serialize};

use super::{Outcome, RankChange, RankPoints, round_rank_points};
use crate::rating::Skill;
use crate::rejection::FieldError;

/// INVERSUS parameters (`[ranking.inversus]`); `Default` is the INVERSUS setting.
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
    /// Checks every rule; the error's field is `ranking.inversus.<key>`, the path in the server
    /// config, so it reads `ranking.inversus.<key>: <rule>`.
    pub fn validate(&self) -> Result<(), FieldError> {
        let err =
            |key: &str, rule: String| Err(FieldError::new(key, rule).under("ranking.inversus"));
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
/// pay more than the smoothed target alone would; 0 for an even or weaker opponent. Both means
/// are snapshots from match start (the pending record), so the winner's own rating jump from
/// this very win cannot shrink the bonus for it.
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
/// shifted by how much stronger the opposing players are on average than the own team (composite
/// team, [`crate::rating::TeamStrategy`]). `opponents` holds every player of every other team, so
/// in a free-for-all it is the field's mean. With an empty slice the player is their own opponent
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

/// New rank points after one match.
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rating::glicko2::SCALE;
    use proptest::prelude::*;

    /// A skill given on the internal scale (μ, φ), the scale the INVERSUS rules are stated on.
    fn internal(mu: f64, phi: f64) -> Skill {
        Skill {
            mean: 1500.0 + SCALE * mu,
            deviation: SCALE * phi,
            volatility: 0.06,
        }
    }

    fn game(skill_after: Skill, outcome: Outcome) -> InversusMatch {
        InversusMatch {
            skill_after,
            own_mean_before: 1500.0,
            opponent_mean_before: 1500.0,
            outcome,
        }
    }

    fn after(rp: RankPoints, m: &InversusMatch) -> RankPoints {
        let change = update(&InversusConfig::default(), rp, m);
        assert_eq!(change.before, rp.min(10_000));
        change.after
    }

    /// μ = 3, φ = 1: functional rating 0 → target 5000; upper bound μ + 3φ = 6 → 9962.78.
    fn settled() -> Skill {
        internal(3.0, 1.0)
    }

    #[test]
    fn targets_map_the_interval_onto_0_to_10000() {
        let cfg = InversusConfig::default();
        assert!((target_rp(&cfg, &settled()) - 5000.0).abs() < 1e-6);
        // (6 + 6.045) / 12.09 · 10000 = 9962.779...
        assert!((upper_rp(&cfg, &settled()) - 9_962.779_156_327_54).abs() < 1e-6);
        // An unrated player (μ 0, φ 2.015) sits exactly on the lower bound: 0 RP.
        assert!(target_rp(&cfg, &internal(0.0, 2.015)).abs() < 1e-6);
        // Below the bound clamps to 0, above to 10000.
        assert_eq!(target_rp(&cfg, &internal(-2.0, 2.015)), 0.0);
        assert_eq!(target_rp(&cfg, &internal(7.0, 0.1)), 10_000.0);
    }

    #[test]
    fn a_win_moves_halfway_up_and_a_loss_halfway_down() {
        // 4200 → target 5000: +400 → 4600.
        assert_eq!(after(4200, &game(settled(), Outcome::Win)), 4600);
        // 5800 → target 5000: −400 → 5400.
        assert_eq!(after(5800, &game(settled(), Outcome::Loss)), 5400);
        // A custom fraction: a quarter of 800 = 200.
        let cfg = InversusConfig {
            fraction: 0.25,
            ..InversusConfig::default()
        };
        assert_eq!(
            update(&cfg, 4200, &game(settled(), Outcome::Win)).after,
            4400
        );
    }

    #[test]
    fn every_decided_match_moves_at_least_one_point() {
        // Half of 1 is 0.5: raised to the minimum 1.
        assert_eq!(after(4999, &game(settled(), Outcome::Win)), 5000);
        // At or above the target a win still earns 1 (never the halfway step down).
        assert_eq!(after(5000, &game(settled(), Outcome::Win)), 5001);
        assert_eq!(after(6000, &game(settled(), Outcome::Win)), 6001);
        // Below the target a loss still costs 1 (never the halfway step up).
        assert_eq!(after(4000, &game(settled(), Outcome::Loss)), 3999);
        // A new player's first win: target 0, but the minimum applies (upper bound is 10000).
        assert_eq!(after(0, &game(internal(0.0, 2.015), Outcome::Win)), 1);
    }

    #[test]
    fn the_minimum_point_stops_at_the_upper_bound_10000_and_0() {
        // Upper bound 9962.78: 9962 + 1 would pass it, so the win earns nothing.
        assert_eq!(after(9962, &game(settled(), Outcome::Win)), 9962);
        assert_eq!(after(9961, &game(settled(), Outcome::Win)), 9962);
        // A certain top player: target 10000, already there.
        let top = internal(6.045, 1e-9);
        assert_eq!(after(10_000, &game(top, Outcome::Win)), 10_000);
        assert_eq!(after(9999, &game(top, Outcome::Win)), 10_000);
        // A loss at 0 stays at 0.
        assert_eq!(after(0, &game(internal(0.0, 2.015), Outcome::Loss)), 0);
    }

    #[test]
    fn changes_are_capped_at_500() {
        // 0 → target 5000 would be +2500.
        assert_eq!(after(0, &game(settled(), Outcome::Win)), 500);
        // 10000 → 5000 would be −2500.
        assert_eq!(after(10_000, &game(settled(), Outcome::Loss)), 9500);
        // A corrupt record above the maximum is clamped first.
        assert_eq!(after(12_000, &game(settled(), Outcome::Loss)), 9500);
    }

    #[test]
    fn the_upset_bonus_scales_with_the_gap_and_counts_toward_the_cap() {
        let cfg = InversusConfig::default();
        // Half the full gap (6.045 internal = 1050.12 display): 125 RP.
        let half_gap = 1500.0 + 6.045 * SCALE;
        assert!((upset_bonus(&cfg, 1500.0, half_gap) - 125.0).abs() < 1e-9);
        assert_eq!(upset_bonus(&cfg, 1500.0, 1500.0 + 20.0 * SCALE), 250.0);
        assert_eq!(upset_bonus(&cfg, 1500.0, 1000.0), 0.0);
        // 4800 → 5000 is +100, plus 125 bonus: 5025.
        let mut m = game(settled(), Outcome::Win);
        m.opponent_mean_before = half_gap;
        assert_eq!(after(4800, &m), 5025);
        // 4200: +400 + 125 = 525 → capped at 500.
        assert_eq!(after(4200, &m), 4700);
        // Past the upper bound the bonus still pays; the 10000 clamp still holds.
        assert_eq!(after(9962, &m), 10_000);
        // The loser gets no bonus.
        let mut lost = m;
        lost.outcome = Outcome::Loss;
        assert_eq!(after(4000, &lost), 3999);
        // Turned off.
        let off = InversusConfig {
            upset_bonus: 0,
            ..InversusConfig::default()
        };
        assert_eq!(update(&off, 4800, &m).after, 4900);
    }

    #[test]
    fn a_draw_changes_nothing() {
        assert_eq!(after(4200, &game(settled(), Outcome::Draw)), 4200);
    }

    #[test]
    fn team_opponent_is_the_composite_team_gap() {
        // Own team averages 1550, opponents 1700: a player at 1500 is compared with 1650.
        let opp = composite_opponent_mean(1500.0, &[1500.0, 1600.0], &[1650.0, 1750.0]);
        assert!((opp - 1650.0).abs() < 1e-9);
        assert_eq!(composite_opponent_mean(1500.0, &[], &[1700.0]), 1500.0);
    }

    #[test]
    fn validation_names_the_key_and_the_rule() {
        let bad = |f: fn(&mut InversusConfig)| {
            let mut c = InversusConfig::default();
            f(&mut c);
            c.validate().unwrap_err().to_string()
        };
        assert_eq!(
            bad(|c| c.fraction = 0.0),
            "ranking.inversus.fraction: must be in (0, 1] (got 0)"
        );
        assert!(bad(|c| c.min_change = 600).starts_with("ranking.inversus.min_change:"));
        assert!(bad(|c| c.rating_max = -7.0).starts_with("ranking.inversus.rating_max:"));
        assert!(bad(|c| c.display_scale = 0.0).starts_with("ranking.inversus.display_scale:"));
        assert!(
            bad(|c| c.upset_full_gap = f64::NAN).starts_with("ranking.inversus.upset_full_gap:")
        );
        assert!(bad(|c| c.max_rp = 0).starts_with("ranking.inversus.max_rp:"));
    }

    fn outcome() -> impl Strategy<Value = Outcome> {
        prop_oneof![Just(Outcome::Win), Just(Outcome::Draw), Just(Outcome::Loss)]
    }

    proptest! {
        #[test]
        fn rank_points_stay_in_bounds_and_move_the_right_way(
            rp in 0u32..=12_000,
            mean in -2000.0f64..5000.0,
            deviation in 0.0f64..2000.0,
            own in 0.0f64..3000.0,
            opponent in 0.0f64..3000.0,
            outcome in outcome(),
        ) {
            let cfg = InversusConfig::default();
            let m = InversusMatch {
                skill_after: Skill { mean, deviation, volatility: 0.06 },
                own_mean_before: own,
                opponent_mean_before: opponent,
                outcome,
            };
            let c = update(&cfg, rp, &m);
            prop_assert!(c.after <= cfg.max_rp);
            prop_assert!(c.delta().abs() <= i64::from(cfg.max_change));
            match outcome {
                Outcome::Win => prop_assert!(c.after >= c.before),
                Outcome::Loss => prop_assert!(c.after <= c.before),
                Outcome::Draw => prop_assert_eq!(c.after, c.before),
            }
        }
    }
}

//! The Skyweaver ladder (Robert Petit, "Ranking Changes White Paper", Skyweaver, 2022): rank points
//! that follow the MMR change of each match, plus a bias for winning and an optional win-streak
//! bonus, over a table of named tiers with hard floors.
//!
//! RP' = round(RP + Δr·F + B·\[win\] + A), where
//! - F = (rp_span / rating_span) · min{1, f_min + (1 − f_min)·(RP − ramp_start_rp)/ramp_width_rp}
//!   (with the defaults (1000/(3000 − 1250))·min{1, f_min + (1 − f_min)(RP − 200)/1000}): the
//!   range transform from the Glicko scale to RP, weighted less at low rank so a new player's
//!   wild early MMR swings barely show;
//! - B = max{b_min, b_max − ((RP − ramp_start_rp)/ramp_width_rp)(b_max − b_min)}, paid to winners
//!   only (not mirrored for losers): the positive bias that makes playing always worth it;
//! - A = `streak_bonus` (a) on a win whose two previous matches were wins, else 0.
//!
//! All of F, B and A are computed at the RP *before* the match. Once a player reaches a tier with
//! a hard floor they never drop below its minimum within the season: the player record keeps
//! that floor ([`LadderState::floor_rp`]); only a season's hard reset clears it.
//!
//! What this module deliberately does not do: touch skill, run season resets (that is
//! [`super::season`]; the tier table carries each tier's soft-reset cap and hard-reset value), or
//! know the leaderboard — the top tier (Grandweaver, "top 100 Masters by RP") takes the player's
//! rank as input; [`super::leaderboard::RankIndex`] computes it.
//!
//! **Δr for other skill systems.** Δr is the MMR change on the Glicko 1500 scale, because the
//! range transform 1000/(3000 − 1250) maps a Glicko population range onto the ladder. A change on
//! another scale is converted by the ratio of the two scales' spreads, measured the same way for
//! both: their new-player deviations, each system's statement of how widely the population may
//! spread. For Weng-Lin (σ₀ = 25/3) that is 350 / (25/3) = 42, so a typical Weng-Lin μ change of
//! 0.2–1 becomes a Glicko-like 8–42 points instead of moving RP by a fraction of a point. Elo
//! ratings share the Glicko scale: 1. The server converts before calling [`update`]
//! (`results::QueueRanker`), so a server's `delta_scale` stays 1; it is an extra multiplier for
//! tuning how far one match moves RP on every ladder queue.
//!
//! **Why these defaults (f_min 0.75, b_min 7, b_max 8, a 0).** The white paper gives no values, so
//! they come from a deterministic simulation (`ladder/simulation.rs`, test
//! `defaults_are_justified_by_simulation`): 200 new players with true skills spread evenly over
//! 1100–1900 on a default continuous Glicko-1 queue, paired by current MMR, 200 games each (a
//! dedicated player's four-week season at 50 a week, one decay period per week), mean of three
//! seeds. What it shows: once matchmaking has calibrated everyone to ~50% wins, the only lasting
//! skill signal in RP is F·(r − 1500) (the Δr terms telescope), about ±200 RP across this
//! population, while B adds ≈ B/2 per game for *everyone*. So a steep B (big at the bottom) is a
//! catch-up mechanic that squeezes skill out of the order, and a low f_min hides the MMR signal
//! where most players are. The rule: at least half of the top fifth reach Master within the season
//! and at most a tenth of the 50% players (middle fifth) do; among settings meeting it, the best
//! Spearman ρ(RP, true skill), keeping f_min < 1 and b_max > b_min so the white paper's
//! rank-dependence survives. Grid: f_min ∈ {0.25, 0.5, …, 1}, b_min ∈ {1…7}, b_max ∈ {7…24}:
//!
//! | f_min | b_min..b_max | ρ | RP bottom/middle/top fifth | top / middle at Master | middle drift |
//! |---|---|---|---|---|---|
//! | **0.75** | **7..8** | **0.736** | 914 / 1053 / 1230 | 62% / 6% | 3.7 RP/game |
//! | 0.75 | 6..10 | 0.710 | 981 / 1091 / 1239 | 67% / 9% | 3.5 |
//! | 0.75 | 2..8 | 0.713 | 771 / 859 / 967 | 0% / 0% | 2.2 |
//! | 0.75 | 7..16 | 0.672 | 1211 / 1308 / 1441 | 100% / 94% | 3.7 |
//! | 0.5 | 4..16 | 0.612 | 1092 / 1158 / 1232 | 68% / 24% | 2.7 |
//! | 0.25 | 2..24 | 0.495 | 1146 / 1179 / 1217 | 67% / 27% | 1.8 |
//! | 1.0 | 7..8 | 0.757 | 949 / 1093 / 1304 | 82% / 15% | 3.7 |
//!
//! A 50% player therefore *drifts* about +3.5 RP a game (B/2: the white paper's deliberate
//! inflation, which the weekly soft-reset caps 100 RP apart absorb in roughly 30 games) rather
//! than climbing with skill; a strong player's extra F·Δr is what carries them into Master. The
//! top fifth leaves Wanderer in about 3 games. Within the rule, f_min 0.7–0.9 with b 7..8 are
//! indistinguishable (over 8 seeds ρ 0.735 at 0.75 vs 0.743 at 0.9, seed-to-seed SD ≈ 0.01);
//! f_min = 1 orders a little better again but drops rank-dependence entirely (a new player's first
//! ±170-point MMR swing would show in full) and lets 15% of the 50% players into Master. 0.75
//! keeps a quarter of the rank-dependence at the bottom for ρ within one seed-to-seed SD.
//! `streak_bonus` stays 0 as in the white paper: any a > 0 rewards streaks, which skill-based
//! matchmaking makes mostly luck.

use serde::{Deserialize, Serialize};

use super::leaderboard::{LeaderboardEntry, RankIndex};
use super::{Outcome, RankChange, RankPoints, round_rank_points};
use crate::rejection::FieldError;

#[cfg(test)]
mod simulation;

/// One rank on the ladder. The table lives in config because a game names its own tiers.
///
/// `name` and `min_rp` are required in TOML (a tier without them is a typo, not a default); the
/// rest default to "no floor, no cap, no reset value, not top-N".
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Tier {
    /// Shown to the player ("Expert II").
    pub name: String,
    /// Lowest RP of the tier. For a `top_n` tier: the RP needed to compete for it.
    pub min_rp: RankPoints,
    /// Once reached, the player's RP never drops below `min_rp` within the season.
    #[serde(default)]
    pub hard_floor: bool,
    /// Weekly soft reset: RP above this is cut to it (Master 1300, Grandweaver 1400).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub soft_reset_cap: Option<RankPoints>,
    /// Monthly hard reset: RP of a player whose season rank was this tier; `None` = unchanged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hard_reset_rp: Option<RankPoints>,
    /// Set on the last tier only: it holds the best `top_n` players with at least `min_rp`, by
    /// leaderboard order (Grandweaver: top 100 Masters), instead of an RP threshold alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_n: Option<usize>,
}

impl Tier {
    fn new(name: &str, min_rp: RankPoints, hard_floor: bool) -> Self {
        Self {
            name: name.to_owned(),
            min_rp,
            hard_floor,
            ..Self::default()
        }
    }

    fn soft_cap(mut self, cap: RankPoints) -> Self {
        self.soft_reset_cap = Some(cap);
        self
    }

    fn hard_reset(mut self, rp: RankPoints) -> Self {
        self.hard_reset_rp = Some(rp);
        self
    }
}

/// The Skyweaver tier table (the white paper's Table 1).
#[must_use]
pub fn default_tiers() -> Vec<Tier> {
    vec![
        Tier::new("Wanderer", 200, true),
        Tier::new("Trainee I", 300, true).hard_reset(300),
        Tier::new("Trainee II", 400, false).hard_reset(350),
        Tier::new("Trainee III", 500, false).hard_reset(400),
        Tier::new("Apprentice I", 600, true).hard_reset(450),
        Tier::new("Apprentice II", 700, false).hard_reset(500),
        Tier::new("Apprentice III", 800, false).hard_reset(550),
        Tier::new("Expert I", 900, true).hard_reset(600),
        Tier::new("Expert II", 1000, false).hard_reset(700),
        Tier::new("Expert III", 1100, false).hard_reset(800),
        Tier::new("Master", 1200, true)
            .soft_cap(1300)
            .hard_reset(900),
        Tier {
            top_n: Some(100),
            ..Tier::new("Grandweaver", 1200, false)
                .soft_cap(1400)
                .hard_reset(1000)
        },
    ]
}

/// Ladder parameters (`[ranking.ladder]`); `Default` is the Skyweaver table with simulated
/// defaults.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LadderConfig {
    /// RP of a new player (200: Wanderer).
    pub start_rp: RankPoints,
    /// Share of the MMR change that counts at `ramp_start_rp`, rising linearly to 1 at
    /// `ramp_start_rp + ramp_width_rp`. Default 0.75, from the simulation (module docs): lower
    /// values hide the only lasting skill signal where most players are (ρ 0.50 at 0.25), while
    /// 1 would show a new player's first ±170-point MMR swings in full.
    pub f_min: f64,
    /// Winner's bias at and above the top of the ramp (Master). Default 7: with it most of the
    /// strongest fifth reach Master in a 200-game season while 50% players drift about +3.5 RP a
    /// game and mostly do not (simulation in the module docs).
    pub b_min: f64,
    /// Winner's bias at the bottom of the ramp (200). Default 8: a gentle slope, because a steep
    /// one is a catch-up mechanic that costs ordering (ρ 0.67 at 7..16, 0.50 at 2..24) and lets
    /// the 50% players reach Master with everyone else.
    pub b_max: f64,
    /// a: bonus for a win that extends a streak of two or more wins. Default 0, as in the white
    /// paper, so the other three parameters can be tuned first.
    pub streak_bonus: f64,
    /// RP where the F and B ramps start (200).
    pub ramp_start_rp: f64,
    /// RP over which F rises to 1 and B falls to `b_min` (1000).
    pub ramp_width_rp: f64,
    /// Numerator of the range transform: the RP span (1000).
    pub rp_span: f64,
    /// Denominator of the range transform: the Glicko span mapped onto it (3000 − 1250 = 1750).
    pub rating_span: f64,
    /// Multiplies the caller's Δr (already on the Glicko scale) before anything else: 1 unless
    /// every ladder queue's RP should move further or less per match (see the module docs).
    pub delta_scale: f64,
    /// The tiers from lowest to highest; only the last may have `top_n`.
    pub tiers: Vec<Tier>,
}

impl Default for LadderConfig {
    fn default() -> Self {
        Self {
            start_rp: 200,
            f_min: 0.75,
            b_min: 7.0,
            b_max: 8.0,
            streak_bonus: 0.0,
            ramp_start_rp: 200.0,
            ramp_width_rp: 1000.0,
            rp_span: 1000.0,
            rating_span: 1750.0,
            delta_scale: 1.0,
            tiers: default_tiers(),
        }
    }
}

impl LadderConfig {
    /// Checks every rule; the error's field is `ranking.ladder.<key>`, the path in the server
    /// config (a tier is named by index: `ranking.ladder.tiers[3].min_rp`).
    pub fn validate(&self) -> Result<(), FieldError> {
        let err = |key: &str, rule: String| Err(FieldError::new(key, rule).under("ranking.ladder"));
        if !(self.f_min.is_finite() && (0.0..=1.0).contains(&self.f_min)) {
            return err("f_min", format!("must be in [0, 1] (got {})", self.f_min));
        }
        if !(self.b_min.is_finite() && self.b_min >= 0.0) {
            return err(
                "b_min",
                format!("must be finite and >= 0 (got {})", self.b_min),
            );
        }
        if !(self.b_max.is_finite() && self.b_max >= self.b_min) {
            return err(
                "b_max",
                format!(
                    "must be finite and >= b_min (got {} < {})",
                    self.b_max, self.b_min
                ),
            );
        }
        if !(self.streak_bonus.is_finite() && self.streak_bonus >= 0.0) {
            return err(
                "streak_bonus",
                format!("must be finite and >= 0 (got {})", self.streak_bonus),
            );
        }
        if !self.ramp_start_rp.is_finite() {
            return err(
                "ramp_start_rp",
                format!("must be finite (got {})", self.ramp_start_rp),
            );
        }
        for (key, value) in [
            ("ramp_width_rp", self.ramp_width_rp),
            ("rp_span", self.rp_span),
            ("rating_span", self.rating_span),
            ("delta_scale", self.delta_scale),
        ] {
            if !(value.is_finite() && value > 0.0) {
                return err(key, format!("must be finite and > 0 (got {value})"));
            }
        }
        self.validate_tiers()
    }

    fn validate_tiers(&self) -> Result<(), FieldError> {
        let err =
            |key: String, rule: String| Err(FieldError::new(key, rule).under("ranking.ladder"));
        let Some(lowest) = self.tiers.first() else {
            return err("tiers".to_owned(), "must list at least one tier".to_owned());
        };
        if self.start_rp < lowest.min_rp {
            return err(
                "start_rp".to_owned(),
                format!(
                    "must be at least the lowest tier's min_rp (got {} < {})",
                    self.start_rp, lowest.min_rp
                ),
            );
        }
        let last = self.tiers.len() - 1;
        for (i, tier) in self.tiers.iter().enumerate() {
            let key = |field: &str| format!("tiers[{i}].{field}");
            if tier.name.trim().is_empty() {
                return err(key("name"), "must not be empty".to_owned());
            }
            if self.tiers[..i].iter().any(|t| t.name == tier.name) {
                return err(
                    key("name"),
                    format!("tier names must be unique ({:?} repeats)", tier.name),
                );
            }
            if let Some(n) = tier.top_n {
                if i != last || i == 0 {
                    return err(
                        key("top_n"),
                        "only the last tier, above at least one other, may be a top-N tier"
                            .to_owned(),
                    );
                }
                if n == 0 {
                    return err(key("top_n"), "must be at least 1".to_owned());
                }
                if tier.hard_floor {
                    return err(
                        key("hard_floor"),
                        "a top-N tier cannot be a hard floor: other players can push you out"
                            .to_owned(),
                    );
                }
            }
            if i > 0 {
                let previous = self.tiers[i - 1].min_rp;
                let ordered = if tier.top_n.is_some() {
                    tier.min_rp >= previous
                } else {
                    tier.min_rp > previous
                };
                if !ordered {
                    return err(
                        key("min_rp"),
                        format!(
                            "tiers must be in increasing order (got {} after {previous})",
                            tier.min_rp
                        ),
                    );
                }
            }
            if let Some(cap) = tier.soft_reset_cap
                && cap < tier.min_rp
            {
                return err(
                    key("soft_reset_cap"),
                    format!(
                        "must be at least the tier's min_rp, or every soft reset demotes (got {cap} < {})",
                        tier.min_rp
                    ),
                );
            }
            if let Some(rp) = tier.hard_reset_rp
                && rp < lowest.min_rp
            {
                return err(
                    key("hard_reset_rp"),
                    format!(
                        "must be at least the lowest tier's min_rp (got {rp} < {})",
                        lowest.min_rp
                    ),
                );
            }
        }
        Ok(())
    }

    /// F at `rp`: how many RP one Glicko point of MMR change is worth there.
    #[must_use]
    pub fn factor(&self, rp: RankPoints) -> f64 {
        let progress = (f64::from(rp) - self.ramp_start_rp) / self.ramp_width_rp;
        self.rp_span / self.rating_span * (self.f_min + (1.0 - self.f_min) * progress).min(1.0)
    }

    /// B at `rp`: the winner's bias there.
    #[must_use]
    pub fn bias(&self, rp: RankPoints) -> f64 {
        let progress = (f64::from(rp) - self.ramp_start_rp) / self.ramp_width_rp;
        self.b_min
            .max(self.b_max - progress * (self.b_max - self.b_min))
    }

    /// The highest hard-floor minimum at or below `rp` (0 if none): the floor reaching `rp` earns.
    #[must_use]
    pub fn floor_for(&self, rp: RankPoints) -> RankPoints {
        self.tiers
            .iter()
            .filter(|t| t.hard_floor && t.min_rp <= rp)
            .map(|t| t.min_rp)
            .max()
            .unwrap_or(0)
    }

    /// The tier a player with `rp` is shown. `rank` is the player's 1-based place on the queue's
    /// leaderboard (see [`RankIndex::rank_within`]); it only matters for a top-N tier, which the
    /// player holds when `rp` reaches its `min_rp` and `rank <= top_n`. Because the leaderboard is
    /// ordered by RP first, a player's overall rank *is* their rank among everyone at or above
    /// the top tier's `min_rp`. Below the lowest tier's minimum the lowest tier is returned.
    ///
    /// # Panics
    /// Never for a validated config (it has at least one tier).
    #[must_use]
    pub fn tier_of(&self, rp: RankPoints, rank: Option<usize>) -> &Tier {
        if let Some(top) = self.tiers.last()
            && let Some(n) = top.top_n
            && rp >= top.min_rp
            && rank.is_some_and(|r| r >= 1 && r <= n)
        {
            return top;
        }
        self.tiers
            .iter()
            .filter(|t| t.top_n.is_none())
            .take_while(|t| t.min_rp <= rp)
            .last()
            .or_else(|| self.tiers.first())
            .expect("validated ladder config has at least one tier")
    }

    /// The tier of the player whose leaderboard entry is `entry`, or `None` if that entry is
    /// not in the queue's index. Costs O(log n + top_n) for the top-N check.
    #[must_use]
    pub fn tier_in(&self, index: &RankIndex, entry: &LeaderboardEntry) -> Option<&Tier> {
        if !index.contains(entry) {
            return None;
        }
        let top_n = self.tiers.last().and_then(|t| t.top_n).unwrap_or(0);
        let rank = index.rank_within(entry, top_n);
        Some(self.tier_of(entry.rank_points, rank))
    }
}

/// What the server persists per player and rating pool for a ladder queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LadderState {
    /// Current rank points.
    pub rp: RankPoints,
    /// The highest hard floor reached this season: RP never drops below it until a hard reset.
    pub floor_rp: RankPoints,
    /// Consecutive wins ending with the last match (0 after a loss or draw); drives A.
    pub win_streak: u32,
}

impl LadderState {
    /// A new player: `start_rp`, the floor that RP already earns, no streak.
    #[must_use]
    pub fn new(cfg: &LadderConfig) -> Self {
        Self::with_rp(cfg, cfg.start_rp)
    }

    /// A record placed at `rp` with only the floor `rp` itself earns and no streak: what a hard
    /// reset or a migration from Elo ([`super::season`]) writes, since floors from the old season
    /// lapse.
    #[must_use]
    pub fn with_rp(cfg: &LadderConfig, rp: RankPoints) -> Self {
        Self {
            rp,
            floor_rp: cfg.floor_for(rp),
            win_streak: 0,
        }
    }
}

/// The result of one ladder match: the displayed change and the record to persist.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LadderUpdate {
    /// RP before and after.
    pub change: RankChange,
    /// The new record.
    pub state: LadderState,
}

/// New ladder state after one match.
///
/// `rating_delta` is this match's MMR change r' − r in the queue's display units (scaled by
/// `delta_scale`). A draw applies Δr·F without B and ends the streak. A win gets B and, when the
/// two previous matches were wins, A: the white paper calls A a *win-streak* bonus, so it is paid
/// on the third consecutive win onward, never on the loss that ends a streak. The result is rounded
/// (halves away from zero) and never below the floor reached before this match; the new floor is
/// the highest hard floor reached including this match. A non-finite `rating_delta` (impossible
/// from the rating module) counts as 0.
#[must_use]
pub fn update(
    cfg: &LadderConfig,
    state: &LadderState,
    rating_delta: f64,
    outcome: Outcome,
) -> LadderUpdate {
    let rp = state.rp;
    let mut change = scaled_delta(cfg, rating_delta) * cfg.factor(rp);
    if outcome == Outcome::Win {
        change += cfg.bias(rp);
        if state.win_streak >= 2 {
            change += cfg.streak_bonus;
        }
    }
    let after = round_rank_points(f64::from(rp) + change, state.floor_rp, RankPoints::MAX);
    let win_streak = if outcome == Outcome::Win {
        state.win_streak.saturating_add(1)
    } else {
        0
    };
    LadderUpdate {
        change: RankChange { before: rp, after },
        state: LadderState {
            rp: after,
            floor_rp: state.floor_rp.max(cfg.floor_for(after)),
            win_streak,
        },
    }
}

/// New ladder state after a rating change that comes with no match: the end of a rating period
/// in a periodic Glicko pool, where each match moved only B and A (its Δr was 0, the results
/// waiting for the period) and the period's whole MMR change Δr arrives at once.
///
/// Applies Δr·F with F at the current RP, rounded and never below the floor reached, exactly as
/// [`update`] does for one match; pays no B or A and leaves the streak alone, since the matches
/// themselves settled those.
#[must_use]
pub fn rating_change(cfg: &LadderConfig, state: &LadderState, rating_delta: f64) -> LadderUpdate {
    let rp = state.rp;
    let change = scaled_delta(cfg, rating_delta) * cfg.factor(rp);
    let after = round_rank_points(f64::from(rp) + change, state.floor_rp, RankPoints::MAX);
    LadderUpdate {
        change: RankChange { before: rp, after },
        state: LadderState {
            rp: after,
            floor_rp: state.floor_rp.max(cfg.floor_for(after)),
            win_streak: state.win_streak,
        },
    }
}

/// Δr times `delta_scale`; a non-finite Δr (impossible from the rating module) counts as 0.
fn scaled_delta(cfg: &LadderConfig, rating_delta: f64) -> f64 {
    if rating_delta.is_finite() {
        rating_delta * cfg.delta_scale
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::PlayerId;
    use proptest::prelude::*;

    /// Round numbers for hand computation: F = (1000/1750)·min{1, 0.5 + 0.5·(RP − 200)/1000},
    /// B = max{5, 20 − 15·(RP − 200)/1000}.
    fn hand() -> LadderConfig {
        LadderConfig {
            f_min: 0.5,
            b_min: 5.0,
            b_max: 20.0,
            ..LadderConfig::default()
        }
    }

    fn state(rp: RankPoints, floor_rp: RankPoints, win_streak: u32) -> LadderState {
        LadderState {
            rp,
            floor_rp,
            win_streak,
        }
    }

    #[test]
    fn a_new_player_starts_at_200_on_the_wanderer_floor() {
        let s = LadderState::new(&LadderConfig::default());
        assert_eq!(s, state(200, 200, 0));
        // A hard reset to Expert II's 700 keeps only the floor 700 earns (Apprentice I).
        let reset = LadderState::with_rp(&LadderConfig::default(), 700);
        assert_eq!(reset, state(700, 600, 0));
    }

    #[test]
    fn a_win_at_200_with_plus_20_by_hand() {
        // Defaults: F = (1000/1750)·0.75 = 0.428571…, Δr·F = 8.571…, B = 8: 216.571… → 217.
        let u = update(
            &LadderConfig::default(),
            &state(200, 200, 0),
            20.0,
            Outcome::Win,
        );
        assert_eq!(
            u.change,
            RankChange {
                before: 200,
                after: 217
            }
        );
        assert_eq!(u.state, state(217, 200, 1));
        // Hand config: F = 0.285714…, Δr·F = 5.714…, B = 20: 225.714… → 226.
        let u = update(&hand(), &state(200, 200, 0), 20.0, Outcome::Win);
        assert_eq!(u.change.after, 226);
    }

    #[test]
    fn mid_ladder_and_master_by_hand() {
        let cfg = hand();
        // RP 700: F = 0.571428…·0.75 = 0.428571…; B = 20 − 7.5 = 12.5.
        assert!((cfg.factor(700) - 0.75 / 1.75).abs() < 1e-12);
        assert_eq!(cfg.bias(700), 12.5);
        // Loss, Δr = −14: −6 → 694 (no bias for the loser).
        assert_eq!(
            update(&cfg, &state(700, 600, 3), -14.0, Outcome::Loss)
                .change
                .after,
            694
        );
        // Win, Δr = 0: 712.5 rounds half away from zero → 713.
        assert_eq!(
            update(&cfg, &state(700, 600, 0), 0.0, Outcome::Win)
                .change
                .after,
            713
        );
        // RP 1300: F capped at 1000/1750, B held at b_min 5: 1300 + 5.714… + 5 → 1311.
        assert_eq!(cfg.bias(1300), 5.0);
        assert_eq!(
            update(&cfg, &state(1300, 1200, 0), 10.0, Outcome::Win)
                .change
                .after,
            1311
        );
        // A draw applies Δr·F only: 1300 + 7·(1000/1750) = 1304.
        assert_eq!(
            update(&cfg, &state(1300, 1200, 0), 7.0, Outcome::Draw)
                .change
                .after,
            1304
        );
    }

    #[test]
    fn weng_lin_deltas_are_scaled_to_the_glicko_range() {
        let cfg = LadderConfig {
            delta_scale: 42.0,
            ..hand()
        };
        // A Weng-Lin μ change of −1 behaves like a Glicko −42 at RP 1300: −24 → 1276.
        assert_eq!(
            update(&cfg, &state(1300, 1200, 0), -1.0, Outcome::Loss)
                .change
                .after,
            1276
        );
    }

    #[test]
    fn a_hard_floor_once_reached_holds_for_the_season() {
        let cfg = hand();
        // 598 + B(598) = 598 + 14.03 → 612: Apprentice I (600, hard floor) reached.
        let up = update(&cfg, &state(598, 300, 0), 0.0, Outcome::Win);
        assert_eq!(up.state, state(612, 600, 1));
        // A heavy loss would give 612 − 20.2 = 591.8, but the floor holds at 600.
        let down = update(&cfg, &up.state, -50.0, Outcome::Loss);
        assert_eq!(down.state, state(600, 600, 0));
        let again = update(&cfg, &down.state, -200.0, Outcome::Loss);
        assert_eq!(again.state.rp, 600);
        // Trainee II (400) is not a floor: from 420 a loss drops below it, not below 300.
        let soft = update(&cfg, &state(420, 300, 0), -100.0, Outcome::Loss);
        assert!(soft.state.rp < 400 && soft.state.rp >= 300, "{soft:?}");
        let deep = update(&cfg, &state(320, 300, 0), -400.0, Outcome::Loss);
        assert_eq!(deep.state.rp, 300);
    }

    #[test]
    fn the_streak_bonus_pays_from_the_third_win_in_a_row() {
        let cfg = LadderConfig {
            streak_bonus: 10.0,
            ..hand()
        };
        let at = |streak, outcome| update(&cfg, &state(700, 600, streak), 0.0, outcome);
        assert_eq!(at(1, Outcome::Win).change.after, 713);
        assert_eq!(at(2, Outcome::Win).change.after, 723);
        assert_eq!(at(2, Outcome::Win).state.win_streak, 3);
        // Not on the loss or draw that ends a streak, and those reset it.
        assert_eq!(at(5, Outcome::Loss).change.after, 700);
        assert_eq!(at(5, Outcome::Loss).state.win_streak, 0);
        assert_eq!(at(5, Outcome::Draw).state.win_streak, 0);
        // The default a = 0 pays nothing.
        let plain = update(&hand(), &state(700, 600, 9), 0.0, Outcome::Win);
        assert_eq!(plain.change.after, 713);
    }

    #[test]
    fn a_period_close_moves_by_its_rating_change_alone() {
        let cfg = hand();
        // RP 700: F = 0.428571…; Δr = −14 over the period: −6 → 694, no B, streak kept.
        let down = rating_change(&cfg, &state(700, 600, 3), -14.0);
        assert_eq!(down.state, state(694, 600, 3));
        // +14: +6 → 706, where a won match would also have paid B = 12.5.
        assert_eq!(
            rating_change(&cfg, &state(700, 600, 0), 14.0).change.after,
            706
        );
        // The floor holds, and a floor reached is kept.
        assert_eq!(
            rating_change(&cfg, &state(610, 600, 0), -200.0).state.rp,
            600
        );
        assert_eq!(
            rating_change(&cfg, &state(590, 300, 0), 50.0).state,
            state(610, 600, 0)
        );
        assert_eq!(
            rating_change(&cfg, &state(700, 600, 1), f64::NAN).state.rp,
            700
        );
    }

    #[test]
    fn non_finite_deltas_count_as_zero() {
        let u = update(&hand(), &state(700, 600, 0), f64::NAN, Outcome::Win);
        assert_eq!(u.change.after, 713);
    }

    #[test]
    fn tiers_by_rp_and_grandweaver_by_rank_among_masters() {
        let cfg = LadderConfig::default();
        let name = |rp, rank| cfg.tier_of(rp, rank).name.as_str();
        assert_eq!(name(0, None), "Wanderer");
        assert_eq!(name(299, None), "Wanderer");
        assert_eq!(name(300, None), "Trainee I");
        assert_eq!(name(650, None), "Apprentice I");
        assert_eq!(name(1199, Some(1)), "Expert III");
        assert_eq!(name(1200, None), "Master");
        assert_eq!(name(1250, Some(1)), "Grandweaver");
        assert_eq!(name(1250, Some(100)), "Grandweaver");
        assert_eq!(name(1250, Some(101)), "Master");
        assert_eq!(name(5000, None), "Master");
        let master = cfg.tier_of(1200, None);
        assert!(master.hard_floor);
        assert_eq!(master.soft_reset_cap, Some(1300));
        assert_eq!(master.hard_reset_rp, Some(900));
        let gw = cfg.tier_of(1300, Some(1));
        assert_eq!(
            (gw.soft_reset_cap, gw.hard_reset_rp, gw.top_n),
            (Some(1400), Some(1000), Some(100))
        );
    }

    #[test]
    fn grandweaver_needs_the_top_100_among_masters_on_the_index() {
        let cfg = LadderConfig::default();
        let mut index = RankIndex::new();
        let entry = |i: u32, rp| LeaderboardEntry {
            player: PlayerId::new(format!("p{i:03}")),
            rank_points: rp,
            conservative_rating: 1500.0,
            wins: 0,
        };
        // 101 Masters at 1300, 1299, …, 1200 and one Expert.
        for i in 0..=100 {
            index.replace(None, entry(i, 1300 - i));
        }
        index.replace(None, entry(500, 1150));
        let tier = |i: u32, rp| cfg.tier_in(&index, &entry(i, rp)).map(|t| t.name.as_str());
        assert_eq!(tier(0, 1300), Some("Grandweaver"));
        assert_eq!(tier(99, 1201), Some("Grandweaver"));
        assert_eq!(tier(100, 1200), Some("Master"));
        assert_eq!(tier(500, 1150), Some("Expert III"));
        assert_eq!(tier(600, 1300), None, "not on the board");
        // With only two Masters, both are Grandweaver: "top 100 Masters" is literal.
        let mut small = RankIndex::new();
        small.replace(None, entry(1, 1210));
        small.replace(None, entry(2, 1205));
        small.replace(None, entry(3, 900));
        assert_eq!(
            cfg.tier_in(&small, &entry(2, 1205)).unwrap().name,
            "Grandweaver"
        );
        assert_eq!(
            cfg.tier_in(&small, &entry(3, 900)).unwrap().name,
            "Expert I"
        );
    }

    #[test]
    fn floors_come_from_the_hard_floor_tiers() {
        let cfg = LadderConfig::default();
        assert_eq!(cfg.floor_for(199), 0);
        assert_eq!(cfg.floor_for(200), 200);
        assert_eq!(cfg.floor_for(599), 300);
        assert_eq!(cfg.floor_for(899), 600);
        assert_eq!(cfg.floor_for(1199), 900);
        assert_eq!(cfg.floor_for(4000), 1200);
    }

    fn invalid(f: impl FnOnce(&mut LadderConfig)) -> String {
        let mut c = LadderConfig::default();
        f(&mut c);
        c.validate().unwrap_err().to_string()
    }

    #[test]
    fn the_error_carries_the_config_path_and_the_rule_apart() {
        let mut c = LadderConfig::default();
        c.tiers[3].min_rp = 350;
        let err = c.validate().unwrap_err();
        assert_eq!(err.field, "ranking.ladder.tiers[3].min_rp");
        assert_eq!(
            err.rule,
            "tiers must be in increasing order (got 350 after 400)"
        );
        let c = LadderConfig {
            b_max: 1.0,
            ..LadderConfig::default()
        };
        let err = c.validate().unwrap_err();
        assert_eq!(
            (err.field.as_str(), err.rule.as_str()),
            (
                "ranking.ladder.b_max",
                "must be finite and >= b_min (got 1 < 7)"
            )
        );
    }

    #[test]
    fn tier_table_validation_names_the_key_and_the_rule() {
        assert_eq!(
            invalid(|c| c.tiers[3].min_rp = 350),
            "ranking.ladder.tiers[3].min_rp: tiers must be in increasing order (got 350 after 400)"
        );
        assert_eq!(
            invalid(|c| c.tiers[2].name = "Trainee I".to_owned()),
            "ranking.ladder.tiers[2].name: tier names must be unique (\"Trainee I\" repeats)"
        );
        assert_eq!(
            invalid(|c| c.tiers.clear()),
            "ranking.ladder.tiers: must list at least one tier"
        );
        assert!(
            invalid(|c| c.tiers[10].top_n = Some(5)).starts_with("ranking.ladder.tiers[10].top_n:")
        );
        assert!(
            invalid(|c| c.tiers[11].top_n = Some(0)).starts_with("ranking.ladder.tiers[11].top_n:")
        );
        assert!(
            invalid(|c| c.tiers[11].hard_floor = true)
                .starts_with("ranking.ladder.tiers[11].hard_floor:")
        );
        assert!(
            invalid(|c| c.tiers[11].min_rp = 1100).starts_with("ranking.ladder.tiers[11].min_rp:")
        );
        assert!(
            invalid(|c| c.tiers[10].soft_reset_cap = Some(1000))
                .starts_with("ranking.ladder.tiers[10].soft_reset_cap:")
        );
        assert!(
            invalid(|c| c.tiers[4].hard_reset_rp = Some(100))
                .starts_with("ranking.ladder.tiers[4].hard_reset_rp:")
        );
        assert!(
            invalid(|c| c.tiers[0].name = " ".to_owned())
                .starts_with("ranking.ladder.tiers[0].name:")
        );
        assert!(invalid(|c| c.start_rp = 100).starts_with("ranking.ladder.start_rp:"));
    }

    #[test]
    fn parameter_validation_names_the_key_and_the_rule() {
        assert_eq!(
            invalid(|c| c.f_min = 1.5),
            "ranking.ladder.f_min: must be in [0, 1] (got 1.5)"
        );
        assert!(invalid(|c| c.b_max = 1.0).starts_with("ranking.ladder.b_max:"));
        assert!(invalid(|c| c.b_min = -1.0).starts_with("ranking.ladder.b_min:"));
        assert!(
            invalid(|c| c.streak_bonus = f64::INFINITY).starts_with("ranking.ladder.streak_bonus:")
        );
        assert!(invalid(|c| c.delta_scale = 0.0).starts_with("ranking.ladder.delta_scale:"));
        assert!(invalid(|c| c.rating_span = -1.0).starts_with("ranking.ladder.rating_span:"));
    }

    #[test]
    fn a_game_names_its_own_tiers_in_toml() {
        #[derive(serde::Deserialize)]
        struct File {
            ranking: crate::ranking::RankingConfig,
        }
        let text = r#"
            [ranking.inversus]
            fraction = 0.25

            [ranking.ladder]
            b_max = 12.0

            [[ranking.ladder.tiers]]
            name = "Bronze"
            min_rp = 0
            hard_floor = true

            [[ranking.ladder.tiers]]
            name = "Silver"
            min_rp = 500
            hard_reset_rp = 250

            [[ranking.ladder.tiers]]
            name = "Champion"
            min_rp = 500
            top_n = 10
            soft_reset_cap = 900
        "#;
        let file: File = toml::from_str(text).unwrap();
        let r = file.ranking;
        r.validate().unwrap();
        assert_eq!(r.inversus.fraction, 0.25);
        assert_eq!(r.inversus.max_change, 500);
        assert_eq!(r.ladder.b_max, 12.0);
        assert_eq!(r.ladder.b_min, 7.0);
        assert_eq!(r.ladder.tiers.len(), 3);
        assert_eq!(r.ladder.tier_of(600, Some(3)).name, "Champion");
        assert_eq!(r.ladder.tier_of(600, Some(11)).name, "Silver");
        let missing = "[ladder]\n[[ladder.tiers]]\nname = \"X\"\n";
        let err = toml::from_str::<crate::ranking::RankingConfig>(missing).unwrap_err();
        assert!(err.to_string().contains("min_rp"), "{err}");
        let typo = "[ladder]\n[[ladder.tiers]]\nname = \"X\"\nmin_rpp = 3\n";
        let err = toml::from_str::<crate::ranking::RankingConfig>(typo).unwrap_err();
        assert!(err.to_string().contains("min_rpp"), "{err}");
    }

    fn outcome() -> impl Strategy<Value = Outcome> {
        prop_oneof![Just(Outcome::Win), Just(Outcome::Draw), Just(Outcome::Loss)]
    }

    proptest! {
        #[test]
        fn the_ladder_never_drops_below_the_reached_floor(
            games in proptest::collection::vec((-400.0f64..400.0, outcome()), 1..200),
            f_min in 0.0f64..=1.0,
            b_min in 0.0f64..20.0,
            extra in 0.0f64..30.0,
            streak_bonus in 0.0f64..10.0,
        ) {
            let cfg = LadderConfig { f_min, b_min, b_max: b_min + extra, streak_bonus, ..LadderConfig::default() };
            let mut s = LadderState::new(&cfg);
            let mut highest_floor = s.floor_rp;
            for (delta, outcome) in games {
                let u = update(&cfg, &s, delta, outcome);
                prop_assert_eq!(u.change.before, s.rp);
                prop_assert!(u.state.rp >= highest_floor, "{:?} dropped below {}", u, highest_floor);
                prop_assert!(u.state.floor_rp >= s.floor_rp);
                prop_assert!(u.state.rp >= u.state.floor_rp);
                prop_assert_eq!(u.state.floor_rp, s.floor_rp.max(cfg.floor_for(u.state.rp)));
                if outcome == Outcome::Win && delta >= 0.0 {
                    prop_assert!(u.state.rp >= s.rp);
                }
                highest_floor = highest_floor.max(cfg.floor_for(u.state.rp));
                s = u.state;
            }
        }
    }
}

//! Ranking: what players are *shown* — rank points, tiers and leaderboard order.
//!
//! This module owns the player-facing numbers and nothing else. It reads skills produced by
//! [`crate::rating`] but never writes them: rank points never feed back into skill, so a bias or
//! bonus tuned here for fun cannot make matchmaking less accurate.
//!
//! Layout:
//! - [`inversus`]: INVERSUS rank points (Juckett, "Adding Online Skill Ranking to INVERSUS
//!   Deluxe", 2018), a smoothed view of the 99.7% lower bound.
//! - [`ladder`]: the Skyweaver ladder (Petit, "Ranking Changes White Paper", Skyweaver, 2022): MMR
//!   change, bias, streak bonus, tiers, floors.
//! - [`leaderboard`]: the display order, paging, and a per-queue rank index (Grandweaver).
//!
//! Architecture invariant: everything here is pure and synchronous — values in, values out, no
//! I/O, no clock, no RNG, no tokio — so a season can be replayed or simulated exactly. Rank points
//! are whole numbers ([`RankPoints`]); fractional intermediate values are rounded in exactly one
//! place ([`round_rank_points`]), never by a scattered `as` cast.

pub mod inversus;
pub mod ladder;
pub mod leaderboard;
pub mod season;

pub use inversus::InversusConfig;
pub use ladder::{LadderConfig, LadderState, Tier};
pub use leaderboard::{LeaderboardEntry, RankIndex};

use serde::{Deserialize, Serialize};

/// Whole rank points as a player sees them. `u32`, because both systems keep RP at or above 0
/// and converting it to `f64` for arithmetic is then exact (`f64::from`).
pub type RankPoints = u32;

/// The ranking settings of a server: `[ranking.inversus]` and `[ranking.ladder]` in TOML.
///
/// A queue picks which one applies with `ranking = "none" | "inversus" | "ladder"`; every key has
/// a default (documented on each config), so an empty (or missing) `[ranking]` table works.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RankingConfig {
    /// INVERSUS rank points.
    pub inversus: InversusConfig,
    /// The Skyweaver ladder.
    pub ladder: LadderConfig,
}

impl RankingConfig {
    /// Checks every rule; the error names the key (`ranking.ladder.tiers[3].min_rp`) and the rule,
    /// so the server can refuse to start with a message the operator can act on.
    pub fn validate(&self) -> Result<(), crate::rejection::FieldError> {
        self.inversus.validate()?;
        self.ladder.validate()
    }
}

/// What players of a queue are shown: no rank points, INVERSUS rank points or the ladder.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RankingKind {
    None,
    Inversus,
    Ladder,
}

/// How one match went for one player, as ranking sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Outcome {
    /// The player's team beat more teams than it lost to.
    Win,
    /// The player's team beat as many teams as it lost to (a tie in a two-team match).
    Draw,
    /// The player's team lost to more teams than it beat.
    Loss,
}

impl Outcome {
    /// The outcome of the team at `team` given every team's placement (1 = first, equal = tie).
    ///
    /// Rank points need one win/draw/loss per player while a match may have many teams; this is the
    /// net of the pairwise results the rating systems use ([`crate::rating::teams`]): in a two-team
    /// match it is the plain result, in an 8-player free-for-all places 1–4 win and 5–8 lose.
    /// Returns `None` if `team` is out of range.
    #[must_use]
    pub fn from_placements(placements: &[u32], team: usize) -> Option<Self> {
        let own = *placements.get(team)?;
        let beaten = placements.iter().filter(|&&p| p > own).count();
        let lost_to = placements.iter().filter(|&&p| p < own).count();
        Some(match beaten.cmp(&lost_to) {
            std::cmp::Ordering::Greater => Self::Win,
            std::cmp::Ordering::Equal => Self::Draw,
            std::cmp::Ordering::Less => Self::Loss,
        })
    }
}

/// Rank points before and after one match: what the client shows as "+23".
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RankChange {
    /// Rank points before the match.
    pub before: RankPoints,
    /// Rank points after the match.
    pub after: RankPoints,
}

impl RankChange {
    /// The signed change, for display (`after − before`).
    #[must_use]
    pub fn delta(&self) -> i64 {
        i64::from(self.after) - i64::from(self.before)
    }
}

/// Rounds a fractional rank-point value to the nearest whole point (halves away from zero),
/// clamped into `[low, high]`; a non-finite value (impossible for validated input) becomes `low`.
///
/// This is the one place a float becomes rank points. The cast below cannot lose anything: the
/// value is finite, already whole (`round`), and inside the `u32` range because of the clamp.
#[must_use]
pub fn round_rank_points(value: f64, low: RankPoints, high: RankPoints) -> RankPoints {
    if !value.is_finite() {
        return low;
    }
    let clamped = value.round().clamp(f64::from(low), f64::from(high));
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        reason = "finite, whole and clamped into u32 range just above"
    )]
    let whole = clamped as RankPoints;
    whole
}

/// What the operator should hear about queue `queue` ranking with `ranking` on a pool that is
/// `periodic` (classic Glicko rating periods of `period_days`), or `None` when they fit.
///
/// INVERSUS on a periodic pool works but lags: each match moves rank points toward the skill as
/// it then is (up on a win, down on a loss), and a periodic pool moves the skill only when the
/// period closes, so rank points chase a skill up to a period old. It is a warning, not a
/// refusal: a server already running the combination keeps starting with its players' rank
/// points, and the message names the keys that remove the lag. The ladder has no lag (the
/// close applies the period's Δr·F), and `none` shows nothing.
#[must_use]
pub fn lag_warning(
    queue: &str,
    ranking: RankingKind,
    periodic: bool,
    period_days: f64,
) -> Option<String> {
    (ranking == RankingKind::Inversus && periodic).then(|| {
        format!(
            "queues.{queue}: ranking = \"inversus\" with rating.mode = \"periodic\": INVERSUS \
             moves rank points after each match toward the skill, which this pool moves only when \
             a rating period ({period_days} days) closes, so rank points lag the skill by up to a \
             period; for rank points that follow every match set queues.{queue}.rating.mode = \
             \"streaming\", or queues.{queue}.ranking = \"ladder\" (docs/ratings.md, 7.1)"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inversus_on_a_periodic_pool_is_a_warning_naming_the_queue_and_keys() {
        let w = lag_warning("duel", RankingKind::Inversus, true, 14.0).unwrap();
        for part in [
            "queues.duel:",
            "ranking = \"inversus\"",
            "rating.mode = \"periodic\"",
            "(14 days)",
            "queues.duel.rating.mode = \"streaming\"",
            "queues.duel.ranking = \"ladder\"",
        ] {
            assert!(w.contains(part), "{part:?} missing from {w}");
        }
        assert_eq!(
            lag_warning("duel", RankingKind::Inversus, false, 14.0),
            None
        );
        assert_eq!(lag_warning("duel", RankingKind::Ladder, true, 7.0), None);
        assert_eq!(lag_warning("duel", RankingKind::None, true, 7.0), None);
    }

    #[test]
    fn outcome_from_placements_is_the_net_pairwise_result() {
        assert_eq!(Outcome::from_placements(&[1, 2], 0), Some(Outcome::Win));
        assert_eq!(Outcome::from_placements(&[1, 2], 1), Some(Outcome::Loss));
        assert_eq!(Outcome::from_placements(&[1, 1], 1), Some(Outcome::Draw));
        let ffa = [1, 2, 3, 4, 5, 6, 7, 8];
        assert_eq!(Outcome::from_placements(&ffa, 3), Some(Outcome::Win));
        assert_eq!(Outcome::from_placements(&ffa, 4), Some(Outcome::Loss));
        assert_eq!(Outcome::from_placements(&[1, 2, 3], 1), Some(Outcome::Draw));
        assert_eq!(Outcome::from_placements(&[1, 2], 2), None);
    }

    #[test]
    fn rounding_is_half_away_from_zero_and_clamped() {
        assert_eq!(round_rank_points(2.5, 0, 10), 3);
        assert_eq!(round_rank_points(2.49, 0, 10), 2);
        assert_eq!(round_rank_points(-3.0, 0, 10), 0);
        assert_eq!(round_rank_points(11.0, 0, 10), 10);
        assert_eq!(round_rank_points(f64::NAN, 4, 10), 4);
        assert_eq!(round_rank_points(1e300, 0, u32::MAX), u32::MAX);
    }

    #[test]
    fn an_inversus_error_keeps_its_field_through_the_ranking_table() {
        let mut c = RankingConfig::default();
        c.inversus.max_rp = 0;
        let err = c.validate().unwrap_err();
        assert_eq!(err.field, "ranking.inversus.max_rp");
        assert_eq!(err.rule, "must be at least 1");
    }

    #[test]
    fn default_config_is_valid_and_round_trips_through_toml() {
        let c = RankingConfig::default();
        c.validate().unwrap();
        let text = toml::to_string(&c).unwrap();
        let back: RankingConfig = toml::from_str(&text).unwrap();
        assert_eq!(back, c);
        let empty: RankingConfig = toml::from_str("").unwrap();
        assert_eq!(empty, c);
    }

    #[test]
    fn unknown_keys_are_refused() {
        let err = toml::from_str::<RankingConfig>("[inversus]\nfractoin = 0.5\n").unwrap_err();
        assert!(err.to_string().contains("fractoin"), "{err}");
    }
}

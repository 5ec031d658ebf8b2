//! Margin of victory: what a match's score line (rounds, kills, games: `team_scores`) adds to
//! who won.
//!
//! Every system rates a pair of teams from an outcome `s` (1 win, ½ draw, 0 loss) and a
//! residual `s − E`. A margin option changes that pair's outcome or scales its residual, and
//! nothing else: the systems' variances, bounds and team rules are untouched. With
//! `kind = "none"` (the default) or without scores, every system rates exactly as before.
//!
//! - `weighted`: the residual is multiplied by the winner's share of the points,
//!   `f = score_winner / (score_a + score_b)`, for both sides: the weighted Elo of Angelini,
//!   Candila and De Angelis, "Weighted Elo rating for tennis match predictions" (European
//!   Journal of Operational Research 297(1), 2022), where `f` is the share of games won by the
//!   match's winner. A dominant win moves ratings more than a narrow one.
//! - `multiplier`: the residual is multiplied by FiveThirtyEight's margin-of-victory
//!   multiplier with its autocorrelation correction (the NFL Elo methodology),
//!   `ln(|score_a − score_b| + 1) · 2.2 / (0.001 · gap + 2.2)`, where `gap` is the winner's
//!   rating minus the loser's before the match, in Elo points (400 per 10:1 odds). The
//!   correction keeps favourites, who win by more, from inflating.
//! - `partial`: the outcome itself becomes partial, `s = (1 − λ)·y + λ·σ(κ·logit(share_a))`,
//!   with `y` the placement outcome, `share_a` team a's share of the points (kept within
//!   [0.001, 0.999]), `λ` = `weight` and `κ` = `scale`. `κ` turns a share of points into a
//!   win-like number (in tennis, winning 60% of the games is close to a sure match win), `λ`
//!   says how much to trust it over the result. This is the "partial outcome" of Bayesian
//!   rating systems (Weng and Lin's update takes any `s` in [0, 1]).
//!
//! Draws keep the placement outcome under `weighted` and `multiplier` (those published forms
//! scale wins); `partial` applies to every pair. A pair whose scores sum to 0 says nothing
//! about the margin and is rated from its placements.

use serde::{Deserialize, Serialize};

use crate::rejection::FieldError;

/// Which margin-of-victory rule a system applies (see the module docs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MarginKind {
    /// Placements only (the default).
    #[default]
    None,
    /// Residual × the winner's share of the points (Angelini et al. 2022).
    Weighted,
    /// Residual × FiveThirtyEight's `ln(|MOV| + 1)` multiplier with autocorrelation
    /// correction.
    Multiplier,
    /// A partial outcome from the share of the points.
    Partial,
}

/// A system's margin option: `[queues.NAME.rating.margin]` (or `margin = { kind = "partial",
/// scale = 3.0, weight = 0.8 }`).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Margin {
    /// The rule.
    pub kind: MarginKind,
    /// `partial`: κ, how steeply a share of the points maps to a win-like outcome.
    pub scale: f64,
    /// `partial`: λ in [0, 1], the weight of the points' outcome against the placement's.
    pub weight: f64,
}

impl Default for Margin {
    fn default() -> Self {
        Self {
            kind: MarginKind::None,
            scale: 3.0,
            weight: 0.5,
        }
    }
}

/// One pair's outcome after the margin rule: the outcome for team a and the factor on its
/// residual (the same factor applies to team b, whose outcome is `1 − s`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PairOutcome {
    /// Team a's outcome in [0, 1].
    pub s: f64,
    /// The factor on both teams' residual `s − E`.
    pub w: f64,
}

/// Share of the points kept away from 0 and 1 so a shut-out stays finite under the logit.
const SHARE_LIMIT: f64 = 1e-3;

impl Margin {
    /// True when scores change anything.
    #[must_use]
    #[inline]
    pub fn is_active(&self) -> bool {
        self.kind != MarginKind::None
    }

    /// Checks the parameters; errors name `margin.scale` / `margin.weight`.
    pub fn validate(&self) -> Result<(), FieldError> {
        if !(self.scale.is_finite() && self.scale > 0.0 && self.scale <= 100.0) {
            return Err(FieldError::new(
                "margin.scale",
                format!("must be finite and in (0, 100] (got {})", self.scale),
            ));
        }
        if !(self.weight.is_finite() && (0.0..=1.0).contains(&self.weight)) {
            return Err(FieldError::new(
                "margin.weight",
                format!("must be in [0, 1] (got {})", self.weight),
            ));
        }
        Ok(())
    }

    /// The outcome of team a against team b: `y` from their placements (1, ½, 0), their scores,
    /// and `gap_a` = a's rating minus b's before the match in Elo points (read only by
    /// `multiplier`). Scores must be finite and non-negative (validated by the caller).
    #[must_use]
    #[inline]
    pub fn pair(&self, y: f64, score_a: f64, score_b: f64, gap_a: f64) -> PairOutcome {
        let plain = PairOutcome { s: y, w: 1.0 };
        let total = score_a + score_b;
        if self.kind == MarginKind::None || total.is_nan() || total <= 0.0 {
            return plain;
        }
        let won = y > 0.5;
        let lost = y < 0.5;
        match self.kind {
            MarginKind::None => plain,
            MarginKind::Weighted if won => PairOutcome {
                s: y,
                w: score_a / total,
            },
            MarginKind::Weighted if lost => PairOutcome {
                s: y,
                w: score_b / total,
            },
            MarginKind::Multiplier if won || lost => {
                let winner_gap = if won { gap_a } else { -gap_a };
                // Kept off the pole at gap = −2200: an underdog that far behind gets the
                // largest multiplier the formula gives at a gap of −2000.
                let correction = 2.2 / (0.001 * winner_gap.max(-2000.0) + 2.2);
                PairOutcome {
                    s: y,
                    w: ((score_a - score_b).abs() + 1.0).ln() * correction,
                }
            }
            MarginKind::Weighted | MarginKind::Multiplier => plain,
            MarginKind::Partial => {
                let share = (score_a / total).clamp(SHARE_LIMIT, 1.0 - SHARE_LIMIT);
                let from_points = 1.0 / (1.0 + (-self.scale * (share / (1.0 - share)).ln()).exp());
                PairOutcome {
                    s: (1.0 - self.weight) * y + self.weight * from_points,
                    w: 1.0,
                }
            }
        }
    }
}

/// Checks a match's team scores for the rating systems: none, or one finite, non-negative
/// number per team. Errors name `team_scores` or `team_scores[i]`.
pub fn validate_scores(scores: &[f64], teams: usize) -> Result<(), super::RatingError> {
    if scores.is_empty() {
        return Ok(());
    }
    if scores.len() != teams {
        return Err(super::RatingError::InvalidShape {
            field: "team_scores".into(),
            rule: format!(
                "need one score per team or none ({teams} teams, {} scores)",
                scores.len()
            ),
        });
    }
    for (i, &s) in scores.iter().enumerate() {
        if !(s.is_finite() && (0.0..=super::MAX_ABS_MEAN).contains(&s)) {
            return Err(super::invalid(
                format!("team_scores[{i}]"),
                "must be finite and in [0, 1e9]",
                s,
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rating::test_util::assert_close;

    fn margin(kind: MarginKind) -> Margin {
        Margin {
            kind,
            scale: 3.0,
            weight: 0.8,
        }
    }

    #[test]
    fn none_and_missing_scores_keep_the_placement_outcome() {
        let plain = PairOutcome { s: 1.0, w: 1.0 };
        assert_eq!(margin(MarginKind::None).pair(1.0, 12.0, 5.0, 0.0), plain);
        for kind in [
            MarginKind::Weighted,
            MarginKind::Multiplier,
            MarginKind::Partial,
        ] {
            assert_eq!(margin(kind).pair(1.0, 0.0, 0.0, 0.0), plain, "{kind:?}");
        }
    }

    /// Angelini et al.: both players' updates are weighted by the winner's share of games.
    #[test]
    fn weighted_uses_the_winners_share_for_both_sides() {
        let m = margin(MarginKind::Weighted);
        // 12 games to 5 (6-3 6-2): f = 12/17 whichever side is asked.
        assert_eq!(
            m.pair(1.0, 12.0, 5.0, 0.0),
            PairOutcome {
                s: 1.0,
                w: 12.0 / 17.0
            }
        );
        assert_eq!(
            m.pair(0.0, 5.0, 12.0, 0.0),
            PairOutcome {
                s: 0.0,
                w: 12.0 / 17.0
            }
        );
        // A draw keeps its placement outcome.
        assert_eq!(m.pair(0.5, 7.0, 3.0, 0.0), PairOutcome { s: 0.5, w: 1.0 });
    }

    /// FiveThirtyEight: ln(|MOV| + 1) · 2.2 / (0.001 · winner's Elo gap + 2.2).
    #[test]
    fn multiplier_is_fivethirtyeights_with_its_autocorrelation_correction() {
        let m = margin(MarginKind::Multiplier);
        // Won by 7, as a 100-point favourite: ln 8 · 2.2/2.3 = 2.079442 · 0.956522 = 1.989031.
        let w = m.pair(1.0, 21.0, 14.0, 100.0).w;
        assert_close(w, 8f64.ln() * 2.2 / 2.3, 1e-15);
        assert_close(w, 1.989_031, 1e-6);
        // The same margin for a 100-point underdog (a's gap −100, a won) pays more: 2.2/2.1.
        assert_close(
            m.pair(1.0, 21.0, 14.0, -100.0).w,
            8f64.ln() * 2.2 / 2.1,
            1e-15,
        );
        // Team a lost by 7 as a 100-point underdog: the winner was 100 points ahead.
        assert_close(
            m.pair(0.0, 14.0, 21.0, -100.0).w,
            8f64.ln() * 2.2 / 2.3,
            1e-15,
        );
        // Far beyond the pole the correction stays finite and positive.
        assert!(m.pair(1.0, 3.0, 0.0, -1e6).w.is_finite());
    }

    /// s = (1 − λ)·y + λ·σ(κ·logit(share)), by hand for 12 games to 5, κ = 3, λ = 0.8.
    #[test]
    fn partial_blends_the_result_with_the_share_of_points() {
        let m = margin(MarginKind::Partial);
        // logit(12/17) = ln(12/5) = 0.875469; σ(3 · 0.875469) = σ(2.626406) = 0.932542;
        // s = 0.2 · 1 + 0.8 · 0.932542 = 0.946033.
        let from_points = 1.0 / (1.0 + (-3.0 * (12.0f64 / 5.0).ln()).exp());
        assert_close(from_points, 0.932_542, 1e-6);
        let o = m.pair(1.0, 12.0, 5.0, 0.0);
        assert_close(o.s, 0.2 + 0.8 * from_points, 1e-15);
        assert_close(o.s, 0.946_033, 1e-6);
        assert_eq!(o.w, 1.0);
        // The other side gets the complement.
        assert_close(m.pair(0.0, 5.0, 12.0, 0.0).s, 1.0 - o.s, 1e-15);
        // A shut-out is finite; a tie on points in a draw is ½.
        assert!(m.pair(1.0, 12.0, 0.0, 0.0).s < 1.0);
        assert_close(m.pair(0.5, 6.0, 6.0, 0.0).s, 0.5, 1e-15);
    }

    #[test]
    fn bad_parameters_and_scores_are_named() {
        let bad = Margin {
            weight: 1.5,
            ..Margin::default()
        };
        assert_eq!(bad.validate().unwrap_err().field, "margin.weight");
        let bad = Margin {
            scale: f64::NAN,
            ..Margin::default()
        };
        assert_eq!(bad.validate().unwrap_err().field, "margin.scale");
        assert!(validate_scores(&[], 2).is_ok());
        assert!(validate_scores(&[3.0, 0.0], 2).is_ok());
        let e = validate_scores(&[3.0], 2).unwrap_err().to_string();
        assert!(e.starts_with("team_scores:"), "{e}");
        let e = validate_scores(&[3.0, -1.0], 2).unwrap_err().to_string();
        assert!(e.starts_with("team_scores[1]"), "{e}");
        let e = validate_scores(&[f64::NAN, 1.0], 2)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("team_scores[0]"), "{e}");
    }
}

//! How good the simulated matches were, judged against the hidden true skills: the success
//! measures of Samuel White's matchmaking simulation ("Rated Multiplayer Competitions", 2011,
//! §11 "Measures of Success" and the counter report of §13), named here by what they measure.
//!
//! | here | White's counter | passes when |
//! |---|---|---|
//! | `upset_rate` | RandomBeatSkill | the team with the lower true skill total won (luck beat skill) |
//! | `fair_by_true_skill` | GoodSkillMatch | the true underdog had at least a 25% chance |
//! | `fair_by_rating` | GoodRatedMatch | the predicted underdog had at least a 25% chance |
//! | `rating_gap_tracks_skill_gap` | RatingsPredictedSkillWell | the teams' rating gap was within 200 of their true skill gap |
//!
//! Team totals are normalised by dividing by sqrt(team size) (White §9), and everything is on the
//! true-skill scale, where White's skill is ten times his rating: his 2000-skill threshold is 200
//! here and his ±400-rating / ±4000-skill blowout bounds are ±400 on both. A match predicted to
//! be a blowout by both the ratings and the truth (both gaps beyond 400 on the same side) is not
//! counted for the rating-gap measure. White's targets: upsets over 20%, fair by true skill over
//! 65%, rating gap within 200 in at least 50% of matches (70% "highly useful").
//!
//! The upset rate counts every match (a free-for-all is an upset when the winner was not the
//! strongest team); the other true-skill measures are defined for two-team matches only.

use serde::Serialize;

/// An underdog with at least this chance makes a fair match (White's 25%).
pub const FAIR_CHANCE: f64 = 0.25;

/// Largest gap between the normalised rating and true-skill differences that counts as the
/// ratings tracking the truth (White's 2000 skill, on the true scale).
pub const GAP_TOLERANCE: f64 = 200.0;

/// A normalised gap beyond this on both the rating and the true-skill side is a predicted
/// blowout (White's ±400).
pub const BLOWOUT: f64 = 400.0;

/// Running counts of the measures; [`MatchBalance::summary`] turns them into fractions.
#[derive(Clone, Debug, Default)]
pub(super) struct MatchBalance {
    matches: u64,
    two_team: u64,
    upsets: u64,
    fair_by_true_skill: u64,
    fair_by_rating: u64,
    gap_counted: u64,
    gap_tracked: u64,
    blowouts: u64,
}

/// The measures as fractions of the matches they apply to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct BalanceSummary {
    /// Fraction of matches won by a team other than the strongest by true skill.
    pub upset_rate: f64,
    /// Fraction of two-team matches whose true underdog had at least a 25% chance (absent when
    /// there were none).
    pub fair_by_true_skill: Option<f64>,
    /// Fraction of matches whose predicted underdog had at least a 25% chance (the optimizer's
    /// match quality).
    pub fair_by_rating: f64,
    /// Fraction of counted two-team matches whose normalised rating gap was within 200 of the
    /// normalised true-skill gap (absent when none was counted).
    pub rating_gap_tracks_skill_gap: Option<f64>,
    /// Two-team matches left out of the rating-gap measure as predicted blowouts.
    pub blowouts_excluded: u64,
}

fn fraction(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 / whole as f64
    }
}

fn normalised_total(team: &[f64]) -> f64 {
    team.iter().sum::<f64>() / (team.len().max(1) as f64).sqrt()
}

impl MatchBalance {
    /// Records one match. `quality` is the optimizer's predicted underdog chance, `truths` and
    /// `ratings` the players' true skills and ratings (true scale) per team, `placements` the
    /// result (1 = first), and `oracle_p0` team 0's true chance in a two-team match.
    pub(super) fn record(
        &mut self,
        quality: f64,
        truths: &[Vec<f64>],
        ratings: &[Vec<f64>],
        placements: &[u32],
        oracle_p0: Option<f64>,
    ) {
        self.matches += 1;
        if quality >= FAIR_CHANCE {
            self.fair_by_rating += 1;
        }
        let totals: Vec<f64> = truths.iter().map(|t| t.iter().sum()).collect();
        let winner = placements.iter().position(|&p| p == 1).unwrap_or(0);
        let strongest = (0..totals.len())
            .max_by(|&a, &b| totals[a].total_cmp(&totals[b]))
            .unwrap_or(0);
        if winner != strongest {
            self.upsets += 1;
        }
        let (Some(p0), [truth0, truth1], [rating0, rating1]) = (oracle_p0, truths, ratings) else {
            return;
        };
        self.two_team += 1;
        if p0.min(1.0 - p0) >= FAIR_CHANCE {
            self.fair_by_true_skill += 1;
        }
        let rating_gap = normalised_total(rating0) - normalised_total(rating1);
        let skill_gap = normalised_total(truth0) - normalised_total(truth1);
        if (rating_gap < -BLOWOUT && skill_gap < -BLOWOUT)
            || (rating_gap > BLOWOUT && skill_gap > BLOWOUT)
        {
            self.blowouts += 1;
        } else {
            self.gap_counted += 1;
            if (rating_gap - skill_gap).abs() < GAP_TOLERANCE {
                self.gap_tracked += 1;
            }
        }
    }

    /// Matches with two teams recorded so far.
    pub(super) fn two_team_matches(&self) -> u64 {
        self.two_team
    }

    /// The fractions.
    pub(super) fn summary(&self) -> BalanceSummary {
        BalanceSummary {
            upset_rate: fraction(self.upsets, self.matches),
            fair_by_true_skill: (self.two_team > 0)
                .then(|| fraction(self.fair_by_true_skill, self.two_team)),
            fair_by_rating: fraction(self.fair_by_rating, self.matches),
            rating_gap_tracks_skill_gap: (self.gap_counted > 0)
                .then(|| fraction(self.gap_tracked, self.gap_counted)),
            blowouts_excluded: self.blowouts,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_measure_counts_what_it_names() {
        let mut b = MatchBalance::default();
        // Even teams, accurate ratings, the favourite by a hair lost: an upset, fair both ways.
        b.record(
            0.49,
            &[vec![1510.0], vec![1500.0]],
            &[vec![1505.0], vec![1500.0]],
            &[2, 1],
            Some(0.51),
        );
        // A true blowout the ratings saw coming: not an upset, unfair, left out of the gap.
        b.record(
            0.1,
            &[vec![2200.0], vec![1500.0]],
            &[vec![2100.0], vec![1500.0]],
            &[1, 2],
            Some(0.99),
        );
        // Ratings wrong by 300: counted, not tracked.
        b.record(
            0.4,
            &[vec![1800.0], vec![1500.0]],
            &[vec![1500.0], vec![1500.0]],
            &[1, 2],
            Some(0.86),
        );
        // A free-for-all won by the third-strongest: an upset; the two-team measures skip it.
        b.record(
            0.3,
            &[vec![1700.0], vec![1600.0], vec![1500.0]],
            &[vec![1500.0], vec![1500.0], vec![1500.0]],
            &[3, 2, 1],
            None,
        );
        let s = b.summary();
        assert_eq!(s.upset_rate, 0.5);
        assert_eq!(s.fair_by_true_skill, Some(1.0 / 3.0));
        assert_eq!(s.fair_by_rating, 0.75);
        assert_eq!(s.rating_gap_tracks_skill_gap, Some(0.5));
        assert_eq!(s.blowouts_excluded, 1);
        assert_eq!(b.two_team_matches(), 3);
    }

    #[test]
    fn team_totals_are_normalised_by_the_root_of_the_team_size() {
        let mut b = MatchBalance::default();
        // 2v2: true totals differ by 400 → normalised gap 400/√2 ≈ 283; ratings even. Off by
        // 283 > 200: not tracked, and not a blowout (the rating gap is 0).
        b.record(
            0.5,
            &[vec![1700.0, 1700.0], vec![1500.0, 1500.0]],
            &[vec![1500.0, 1500.0], vec![1500.0, 1500.0]],
            &[1, 2],
            Some(0.9),
        );
        assert_eq!(b.summary().rating_gap_tracks_skill_gap, Some(0.0));
        assert_eq!(b.summary().fair_by_true_skill, Some(0.0));
    }

    #[test]
    fn nothing_recorded_reports_zeros_and_absences() {
        let s = MatchBalance::default().summary();
        assert_eq!(s, BalanceSummary::default());
    }
}

//! Team strategies and free-for-all for the Glicko family, as Ryan Juckett describes them in
//! "Adding Online Skill Ranking to INVERSUS Deluxe" (2018).
//!
//! Glicko-1 and Glicko-2 rate one player against opponents. A team match becomes, for each
//! player, a list of (opponent, score) results by one of three strategies, and a multi-team match
//! becomes pairwise results by placement (ahead = 1, tie = ½, behind = 0). Every player then gets
//! one rating-period update from all of their results together.
//!
//! The strategies work on display-unit means and deviations; both Glicko scales are linear in
//! them, so averaging here equals averaging on Glicko-2's internal μ/φ scale.

use serde::{Deserialize, Serialize};

use super::margin::Margin;
use super::{MatchInput, Skill, pair_score};

/// How a team match becomes per-player results.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TeamStrategy {
    /// Each player against each opposing player, all in one period.
    Individual,
    /// Each player against a virtual opponent with the mean rating and mean deviation of the
    /// opposing team (best in the SoccerBots 5v5 evaluation the INVERSUS write-up cites).
    CompositeOpponent,
    /// Default (INVERSUS): each member against a virtual opponent at own rating + (opposing team
    /// mean − own team mean), deviation = opposing team's mean deviation, so a weak teammate
    /// lowers the expectation and softens a loss.
    #[default]
    CompositeTeam,
}

/// One result inside a rating period: the (possibly virtual) opponent and the score against it.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct PeriodResult {
    /// The opponent in display units (only mean and deviation are read).
    pub opponent: Skill,
    /// 1 win, ½ draw, 0 loss; a partial outcome under a `partial` margin option.
    pub score: f64,
    /// Factor on this result's residual `score − E` from a margin option (1 without one;
    /// records written before margins existed read as 1).
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub weight: f64,
}

fn one() -> f64 {
    1.0
}

#[allow(clippy::trivially_copy_pass_by_ref)]
fn is_one(w: &f64) -> bool {
    *w == 1.0
}

/// Mean rating and mean deviation of a team: the virtual player of the composite strategies.
#[must_use]
pub fn team_average(team: &[Skill]) -> (f64, f64) {
    let n = team.len().max(1) as f64;
    let (m, d) = team
        .iter()
        .fold((0.0, 0.0), |(m, d), s| (m + s.mean, d + s.deviation));
    (m / n, d / n)
}

/// Results for every player of a match whose skills have already been prepared (decayed), by
/// `strategy`, pairwise by placement. Same shape as `teams`.
#[must_use]
pub fn pairwise(
    teams: &[Vec<Skill>],
    placements: &[u32],
    strategy: TeamStrategy,
) -> Vec<Vec<Vec<PeriodResult>>> {
    pairwise_scored(teams, placements, &[], &Margin::default(), strategy)
}

/// [`pairwise`] with the teams' scores (one per team, or none) read by `margin`: each pair's
/// score and weight come from [`Margin::pair`], with the teams' mean ratings as the gap.
#[must_use]
pub fn pairwise_scored(
    teams: &[Vec<Skill>],
    placements: &[u32],
    scores: &[f64],
    margin: &Margin,
    strategy: TeamStrategy,
) -> Vec<Vec<Vec<PeriodResult>>> {
    let averages: Vec<(f64, f64)> = teams.iter().map(|t| team_average(t)).collect();
    let scored = margin.is_active() && scores.len() == teams.len();
    teams
        .iter()
        .enumerate()
        .map(|(i, team)| {
            team.iter()
                .map(|me| {
                    let mut results = Vec::new();
                    for (j, other) in teams.iter().enumerate() {
                        if j == i {
                            continue;
                        }
                        let y = pair_score(placements[i], placements[j]);
                        let (score, weight) = if scored {
                            let o =
                                margin.pair(y, scores[i], scores[j], averages[i].0 - averages[j].0);
                            (o.s, o.w)
                        } else {
                            (y, 1.0)
                        };
                        match strategy {
                            TeamStrategy::Individual => {
                                results.extend(other.iter().map(|o| PeriodResult {
                                    opponent: *o,
                                    score,
                                    weight,
                                }));
                            }
                            TeamStrategy::CompositeOpponent => {
                                let (mean, deviation) = averages[j];
                                results.push(PeriodResult {
                                    opponent: Skill {
                                        mean,
                                        deviation,
                                        volatility: 0.0,
                                    },
                                    score,
                                    weight,
                                });
                            }
                            TeamStrategy::CompositeTeam => {
                                let (own_mean, _) = averages[i];
                                let (opp_mean, opp_dev) = averages[j];
                                results.push(PeriodResult {
                                    opponent: Skill {
                                        mean: me.mean + (opp_mean - own_mean),
                                        deviation: opp_dev,
                                        volatility: 0.0,
                                    },
                                    score,
                                    weight,
                                });
                            }
                        }
                    }
                    results
                })
                .collect()
        })
        .collect()
}

/// [`pairwise_scored`] on the skills of a match as reported (no decay): what a periodic queue
/// stores.
#[must_use]
pub fn pairwise_results(
    m: &MatchInput<'_>,
    scores: &[f64],
    margin: &Margin,
    strategy: TeamStrategy,
) -> Vec<Vec<Vec<PeriodResult>>> {
    let skills: Vec<Vec<Skill>> = m
        .teams
        .iter()
        .map(|t| t.iter().map(|p| p.skill).collect())
        .collect();
    pairwise_scored(&skills, m.placements, scores, margin, strategy)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(mean: f64, deviation: f64) -> Skill {
        Skill {
            mean,
            deviation,
            volatility: 0.06,
        }
    }

    #[test]
    fn composite_team_places_virtual_opponent_at_own_rating_plus_team_gap() {
        let teams = vec![
            vec![s(1600.0, 100.0), s(1400.0, 200.0)],
            vec![s(1550.0, 50.0), s(1550.0, 150.0)],
        ];
        let r = pairwise(&teams, &[1, 2], TeamStrategy::CompositeTeam);
        // Own team mean 1500, opposing mean 1550: +50 on own rating; opposing mean RD 100.
        assert_eq!(
            r[0][0],
            vec![PeriodResult {
                opponent: Skill {
                    mean: 1650.0,
                    deviation: 100.0,
                    volatility: 0.0
                },
                score: 1.0,
                weight: 1.0
            }]
        );
        assert_eq!(r[0][1][0].opponent.mean, 1450.0);
        assert_eq!(r[1][0][0].opponent.mean, 1500.0);
        assert_eq!(r[1][0][0].opponent.deviation, 150.0);
        assert_eq!(r[1][0][0].score, 0.0);
    }

    #[test]
    fn individual_and_composite_opponent_shapes() {
        let teams = vec![
            vec![s(1600.0, 100.0), s(1400.0, 200.0)],
            vec![s(1550.0, 50.0), s(1450.0, 150.0)],
        ];
        let ind = pairwise(&teams, &[2, 1], TeamStrategy::Individual);
        assert_eq!(ind[0][0].len(), 2);
        assert_eq!(ind[0][0][1].opponent.mean, 1450.0);
        assert_eq!(ind[0][0][1].score, 0.0);
        let co = pairwise(&teams, &[1, 1], TeamStrategy::CompositeOpponent);
        assert_eq!(
            co[0][1],
            vec![PeriodResult {
                opponent: Skill {
                    mean: 1500.0,
                    deviation: 100.0,
                    volatility: 0.0
                },
                score: 0.5,
                weight: 1.0
            }]
        );
    }

    #[test]
    fn free_for_all_is_pairwise_by_placement() {
        let teams = vec![
            vec![s(1500.0, 100.0)],
            vec![s(1500.0, 100.0)],
            vec![s(1500.0, 100.0)],
        ];
        let r = pairwise(&teams, &[2, 1, 2], TeamStrategy::CompositeTeam);
        let scores: Vec<f64> = r[0][0].iter().map(|x| x.score).collect();
        assert_eq!(scores, vec![0.0, 0.5]);
        let scores: Vec<f64> = r[1][0].iter().map(|x| x.score).collect();
        assert_eq!(scores, vec![1.0, 1.0]);
    }
}

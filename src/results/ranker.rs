//! Rank points after a result: the queue's ranking kind (INVERSUS, the ladder, or none) applied
//! to one player's record, given the new skill and how the match went for that player.

use crate::ranking::{LadderState, Outcome, RankingConfig, RankingKind, inversus, ladder};
use crate::rating::{Skill, SystemConfig};
use crate::records::PoolRecord;

/// Rank points after a match: the record before, the new skill, the player's outcome, and the
/// means (display units, before the match) of the player's own team and of every opponent.
pub trait Ranker {
    /// The new record: `skill` replaced and rank points (and ranking state) moved.
    fn update(
        &self,
        before: &PoolRecord,
        after_skill: &Skill,
        outcome: Outcome,
        own_team_means: &[f64],
        opponent_means: &[f64],
    ) -> PoolRecord;

    /// The record after its rating period closed (periodic Glicko pools, [`super::close_period`]):
    /// `skill` replaced by the period's batch update, and rank points that follow the rating
    /// change moved by the whole period's change. Each match of the period already moved what
    /// its outcome decides (its own Δr was 0, the result waiting for the close).
    fn period_closed(&self, before: &PoolRecord, closed_skill: &Skill) -> PoolRecord {
        PoolRecord {
            skill: *closed_skill,
            ..before.clone()
        }
    }
}

/// Leaves rank points unchanged (queues with `ranking = "none"`, and tests).
pub struct NoRanking;

impl Ranker for NoRanking {
    fn update(
        &self,
        before: &PoolRecord,
        after: &Skill,
        _: Outcome,
        _: &[f64],
        _: &[f64],
    ) -> PoolRecord {
        PoolRecord {
            skill: *after,
            ..before.clone()
        }
    }
}

/// A queue's ranking kind applied with the server's ranking settings.
pub struct QueueRanker<'a> {
    kind: RankingKind,
    config: &'a RankingConfig,
    /// Multiplies a rating change into Glicko units for the ladder's range transform: 1 for the
    /// Glicko family and Elo, 350 / σ₀ (= 42 with σ₀ = 25/3) for Weng-Lin, so one win moves a
    /// new Weng-Lin player about as many rank points as it moves a new Glicko player.
    to_glicko_units: f64,
}

impl<'a> QueueRanker<'a> {
    /// The ranker for a queue of `kind` rated by `system`.
    pub fn new(kind: RankingKind, config: &'a RankingConfig, system: &SystemConfig) -> Self {
        let initial_deviation = system.initial().deviation;
        let to_glicko_units = match system {
            SystemConfig::Glicko2(_) | SystemConfig::Glicko(_) | SystemConfig::Elo(_) => 1.0,
            _ if initial_deviation > 0.0 => 350.0 / initial_deviation,
            _ => 1.0,
        };
        Self {
            kind,
            config,
            to_glicko_units,
        }
    }
}

impl Ranker for QueueRanker<'_> {
    fn update(
        &self,
        before: &PoolRecord,
        after: &Skill,
        outcome: Outcome,
        own_team_means: &[f64],
        opponent_means: &[f64],
    ) -> PoolRecord {
        let mut next = PoolRecord {
            skill: *after,
            ..before.clone()
        };
        match self.kind {
            RankingKind::None => {}
            RankingKind::Inversus => {
                let m = inversus::InversusMatch {
                    skill_after: *after,
                    own_mean_before: before.skill.mean,
                    opponent_mean_before: inversus::composite_opponent_mean(
                        before.skill.mean,
                        own_team_means,
                        opponent_means,
                    ),
                    outcome,
                };
                next.rank_points =
                    inversus::update(&self.config.inversus, before.rank_points, &m).after;
            }
            RankingKind::Ladder => {
                let state = LadderState {
                    rp: before.rank_points,
                    floor_rp: before.ladder_floor,
                    win_streak: before.win_streak,
                };
                let delta = (after.mean - before.skill.mean) * self.to_glicko_units;
                let u = ladder::update(&self.config.ladder, &state, delta, outcome);
                next.rank_points = u.state.rp;
                next.ladder_floor = u.state.floor_rp;
                next.win_streak = u.state.win_streak;
            }
        }
        next
    }

    fn period_closed(&self, before: &PoolRecord, closed_skill: &Skill) -> PoolRecord {
        let mut next = PoolRecord {
            skill: *closed_skill,
            ..before.clone()
        };
        // The ladder's Δr·F, at the rank points held at the close, with its floors: without it
        // a periodic ladder would pay B for every win and never take anything for a loss.
        // INVERSUS moves only with a match's outcome (toward the skill as it then is).
        if self.kind == RankingKind::Ladder {
            let state = LadderState {
                rp: before.rank_points,
                floor_rp: before.ladder_floor,
                win_streak: before.win_streak,
            };
            let delta = (closed_skill.mean - before.skill.mean) * self.to_glicko_units;
            let u = ladder::rating_change(&self.config.ladder, &state, delta);
            next.rank_points = u.state.rp;
            next.ladder_floor = u.state.floor_rp;
        }
        next
    }
}

//! What one match result does to its players, computed purely: validated input in, every
//! player's new pool record and the acknowledgement out. The shell journals the outcome and only
//! then applies it (see `state`), so this function is the single definition of a result.
//!
//! Abandonment (SPEC §4.1, INVERSUS): an abandoning player takes a loss — they are rated as if
//! their team had placed last. If every player of a team abandoned, the match is cancelled for
//! everyone who stayed: their ratings and rank points do not move (a quit is not a win). In a
//! team game where only some players left, the rest are rated by the reported placements.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::config::RankingKind;
use crate::ids::PlayerId;
use crate::ranking::{self, LadderState, RankPoints, RankingConfig, inversus, ladder};
use crate::rating::{MatchInput, PlayerInput, Skill, SystemConfig};
use crate::state::{PartyRecord, PendingPeriod, PoolRecord, Rejection};

/// A validated report.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ResultInput {
    /// One per team, 1 = first, equal = tie.
    pub placements: Vec<u32>,
    /// Optional per-player productivity (Elo margin multipliers).
    pub performance: BTreeMap<PlayerId, f64>,
    /// Players who left before the end.
    pub abandoned: BTreeSet<PlayerId>,
}

/// One player's change, as acknowledged.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PlayerChange {
    pub player_id: PlayerId,
    pub before: Skill,
    pub after: Skill,
    pub rank_points_before: RankPoints,
    pub rank_points_after: RankPoints,
}

/// The acknowledgement of a result; journaled and returned again to duplicate reports.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ResultAck {
    pub queue: String,
    pub changes: Vec<PlayerChange>,
}

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
}

/// How a player's match ended, for counters and ranking.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Win,
    Loss,
    Draw,
    /// Cancelled for this player (an opponent team quit entirely): nothing moves.
    Void,
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
        let shown = match outcome {
            Outcome::Win => ranking::Outcome::Win,
            Outcome::Loss => ranking::Outcome::Loss,
            Outcome::Draw => ranking::Outcome::Draw,
            Outcome::Void => return before.clone(),
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
                    outcome: shown,
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
                let u = ladder::update(&self.config.ladder, &state, delta, shown);
                next.rank_points = u.state.rp;
                next.ladder_floor = u.state.floor_rp;
                next.win_streak = u.state.win_streak;
            }
        }
        next
    }
}

/// Checks a report against the match's teams; every error names the field and the rule.
pub fn validate(
    teams: &[Vec<PlayerId>],
    placements: &[u32],
    performance: &BTreeMap<String, f64>,
    abandoned: &[String],
) -> Result<ResultInput, Rejection> {
    if placements.len() != teams.len() {
        return Err(Rejection::invalid(
            "placements",
            format!(
                "must have one entry per team: the match has {} teams (got {})",
                teams.len(),
                placements.len()
            ),
        ));
    }
    for (i, &p) in placements.iter().enumerate() {
        if p == 0 || p as usize > teams.len() {
            return Err(Rejection::invalid(
                format!("placements[{i}]"),
                format!("must be in 1..={} (got {p})", teams.len()),
            ));
        }
    }
    let in_match = |id: &str| teams.iter().flatten().any(|p| p.as_str() == id);
    let mut perf = BTreeMap::new();
    for (id, &value) in performance {
        if !in_match(id) {
            return Err(Rejection::invalid(
                format!("performance[{id:?}]"),
                "player is not in this match",
            ));
        }
        // The rating systems' own bound (±1e9), checked here so the error names this field.
        if !value.is_finite() || value.abs() > 1e9 {
            return Err(Rejection::invalid(
                format!("performance[{id:?}]"),
                format!("must be finite and within ±1e9 (got {value})"),
            ));
        }
        perf.insert(PlayerId::new(id.as_str()), value);
    }
    let mut gone = BTreeSet::new();
    for (i, id) in abandoned.iter().enumerate() {
        if !in_match(id) {
            return Err(Rejection::invalid(
                format!("abandoned_player_ids[{i}]"),
                format!("player {id:?} is not in this match"),
            ));
        }
        if !gone.insert(PlayerId::new(id.as_str())) {
            return Err(Rejection::invalid(
                format!("abandoned_player_ids[{i}]"),
                format!("duplicate player {id:?}"),
            ));
        }
    }
    Ok(ResultInput {
        placements: placements.to_vec(),
        performance: perf,
        abandoned: gone,
    })
}

/// What the rating system gets for each player (same shape as `teams`): the skill before the
/// match, the time since the player's last game (inactivity decay), the reported productivity
/// and the win count.
pub fn player_inputs(
    teams: &[Vec<PlayerId>],
    before: &[Vec<PoolRecord>],
    input: &ResultInput,
    now_unix: f64,
) -> Vec<Vec<PlayerInput>> {
    teams
        .iter()
        .zip(before)
        .map(|(team, records)| {
            team.iter()
                .zip(records)
                .map(|(id, r)| PlayerInput {
                    skill: r.skill,
                    elapsed_seconds: since(r.last_played_unix, now_unix),
                    performance: input.performance.get(id).copied(),
                    wins: r.wins,
                })
                .collect()
        })
        .collect()
}

fn since(last_played_unix: Option<i64>, now_unix: f64) -> f64 {
    last_played_unix.map_or(0.0, |t| (now_unix - t as f64).max(0.0))
}

/// Periodic systems: the rating period `now_unix` falls in, ⌊now / period length⌋.
#[must_use]
pub fn period_index(system: &SystemConfig, now_unix: f64) -> u64 {
    (now_unix / system.rating_period_seconds()).floor().max(0.0) as u64
}

/// Closes `record`'s pending rating period if it ended before period `current`: the skill
/// becomes Glickman's batch update from the period's results (after the deviation growth of
/// any idle periods since the previous one), nothing is pending, and `last_played_unix` is
/// the period's end (so the next close counts idle periods from there). Returns whether the
/// record changed.
pub fn close_period(
    system: &SystemConfig,
    record: &mut PoolRecord,
    current: u64,
) -> Result<bool, crate::rating::RatingError> {
    let Some(pending) = record.period.as_deref() else {
        return Ok(false);
    };
    if pending.index >= current {
        return Ok(false);
    }
    let length = system.rating_period_seconds();
    let start = pending.index as f64 * length;
    let idle = record
        .last_played_unix
        .map_or(0.0, |t| (start - t as f64).max(0.0));
    record.skill = system.rate_period(&record.skill, &pending.results, idle)?;
    record.last_played_unix = Some(((pending.index + 1) as f64 * length).floor() as i64);
    record.period = None;
    Ok(true)
}

/// The new records of every player (same shape as `teams`) and the acknowledgement.
///
/// `before[t][i]` is the record of `teams[t][i]` before the match (the system's initial skill for
/// unrated players); `now_unix` feeds inactivity decay through each player's last game.
pub fn compute(
    queue: &str,
    system: &SystemConfig,
    ranking: &dyn Ranker,
    teams: &[Vec<PlayerId>],
    before: &[Vec<PoolRecord>],
    input: &ResultInput,
    now_unix: f64,
) -> Result<(Vec<Vec<PoolRecord>>, ResultAck), Rejection> {
    // Periodic Glicko: a player's period that ended before this match is closed first, so the
    // match is rated from (and its result joins the period after) the updated skill.
    let current_period = system.is_periodic().then(|| period_index(system, now_unix));
    let closed: Vec<Vec<PoolRecord>>;
    let before = match current_period {
        Some(current) => {
            let mut records = before.to_vec();
            for r in records.iter_mut().flatten() {
                close_period(system, r, current)
                    .map_err(|e| Rejection::invalid("result", e.to_string()))?;
            }
            closed = records;
            &closed[..]
        }
        None => before,
    };
    let inputs = player_inputs(teams, before, input, now_unix);
    let rated = system
        .rate(&MatchInput {
            teams: &inputs,
            placements: &input.placements,
        })
        .map_err(|e| Rejection::invalid("result", e.to_string()))?;

    // Abandoners are rated as if their team had placed last.
    let abandoned_placements = (!input.abandoned.is_empty()).then(|| {
        let last = input.placements.iter().copied().max().unwrap_or(1) + 1;
        teams
            .iter()
            .zip(&input.placements)
            .map(|(team, &p)| {
                if team.iter().any(|id| input.abandoned.contains(id)) {
                    last
                } else {
                    p
                }
            })
            .collect::<Vec<u32>>()
    });
    let abandoned_as_last = abandoned_placements
        .as_ref()
        .map(|placements| {
            system.rate(&MatchInput {
                teams: &inputs,
                placements,
            })
        })
        .transpose()
        .map_err(|e| Rejection::invalid("abandoned_player_ids", e.to_string()))?;
    // Periodic Glicko: each player's results of this match, kept until the period ends.
    let period_results = match current_period {
        Some(_) => {
            let results = |placements: &[u32]| {
                system
                    .period_results(&MatchInput {
                        teams: &inputs,
                        placements,
                    })
                    .map_err(|e| Rejection::invalid("result", e.to_string()))
            };
            let quit = abandoned_placements.as_deref().map(results).transpose()?;
            Some((results(&input.placements)?, quit))
        }
        None => None,
    };
    let team_quit: Vec<bool> = teams
        .iter()
        .map(|t| t.iter().all(|id| input.abandoned.contains(id)))
        .collect();
    let best = input.placements.iter().copied().min().unwrap_or(1);
    let best_is_shared = input.placements.iter().filter(|&&p| p == best).count() > 1;
    let team_means: Vec<Vec<f64>> = before
        .iter()
        .map(|rs| rs.iter().map(|r| r.skill.mean).collect())
        .collect();

    let mut after = Vec::with_capacity(teams.len());
    let mut changes = Vec::new();
    for (t, team) in teams.iter().enumerate() {
        let opponents: Vec<f64> = team_means
            .iter()
            .enumerate()
            .filter(|&(o, _)| o != t)
            .flat_map(|(_, means)| means.iter().copied())
            .collect();
        let someone_else_quit = team_quit.iter().enumerate().any(|(o, &q)| q && o != t);
        let mut records = Vec::with_capacity(team.len());
        for (i, id) in team.iter().enumerate() {
            let prev = &before[t][i];
            let (outcome, skill) = if input.abandoned.contains(id) {
                let s = abandoned_as_last.as_ref().map_or(rated[t][i], |r| r[t][i]);
                (Outcome::Loss, s)
            } else if someone_else_quit {
                (Outcome::Void, prev.skill)
            } else {
                // Rank points follow the net of the pairwise results (in an 8-player free-for-all
                // places 1-4 gain); the wins counter counts outright first places only.
                let outcome = match ranking::Outcome::from_placements(&input.placements, t) {
                    Some(ranking::Outcome::Win) => Outcome::Win,
                    Some(ranking::Outcome::Draw) => Outcome::Draw,
                    _ => Outcome::Loss,
                };
                (outcome, rated[t][i])
            };
            let mut next = if outcome == Outcome::Void {
                prev.clone()
            } else {
                ranking.update(prev, &skill, outcome, &team_means[t], &opponents)
            };
            if let (Some(index), Some((results, quit)), false) =
                (current_period, &period_results, outcome == Outcome::Void)
            {
                let mine = match quit {
                    Some(q) if input.abandoned.contains(id) => &q[t][i],
                    _ => &results[t][i],
                };
                next.period
                    .get_or_insert_with(|| {
                        Box::new(PendingPeriod {
                            index,
                            results: Vec::new(),
                        })
                    })
                    .results
                    .extend_from_slice(mine);
            }
            if outcome != Outcome::Void {
                let first_outright = input.placements[t] == best && !best_is_shared;
                next.games = prev.games.saturating_add(1);
                next.wins = prev
                    .wins
                    .saturating_add(u32::from(first_outright && !input.abandoned.contains(id)));
                if current_period.is_none() {
                    // Periodic pools keep the end of the last closed period here instead.
                    next.last_played_unix = Some(now_unix.floor() as i64);
                }
            }
            changes.push(PlayerChange {
                player_id: id.clone(),
                before: prev.skill,
                after: next.skill,
                rank_points_before: prev.rank_points,
                rank_points_after: next.rank_points,
            });
            records.push(next);
        }
        after.push(records);
    }
    Ok((
        after,
        ResultAck {
            queue: queue.to_owned(),
            changes,
        },
    ))
}

/// A party's new skill (SPEC §3.6): the match rated with the inputs the players' own update
/// used ([`player_inputs`]), except that the party's members (`members`, indices into `team`)
/// play at the party's skill and with the time since the party last played; the party's new
/// skill is the mean of its members' new skills. Each member keeps its own productivity and
/// win count. Works for a party that fills a team and for one that shares a team with solo
/// players.
pub fn rate_party(
    system: &SystemConfig,
    inputs: &[Vec<PlayerInput>],
    placements: &[u32],
    team: usize,
    members: &[usize],
    party: &PartyRecord,
    now_unix: f64,
) -> Result<Skill, Rejection> {
    let mut inputs = inputs.to_vec();
    for &i in members {
        if let Some(p) = inputs.get_mut(team).and_then(|t| t.get_mut(i)) {
            p.skill = party.skill;
            p.elapsed_seconds = since(party.last_played_unix, now_unix);
        }
    }
    let rated = system
        .rate(&MatchInput {
            teams: &inputs,
            placements,
        })
        .map_err(|e| Rejection::invalid("result", e.to_string()))?;
    let n = members.len().max(1) as f64;
    let mean = |f: fn(&Skill) -> f64| members.iter().map(|&i| f(&rated[team][i])).sum::<f64>() / n;
    Ok(Skill {
        mean: mean(|s| s.mean),
        deviation: mean(|s| s.deviation),
        volatility: mean(|s| s.volatility),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rating::glicko2;

    fn record(mean: f64, deviation: f64) -> PoolRecord {
        PoolRecord {
            skill: Skill {
                mean,
                deviation,
                volatility: 0.06,
            },
            rank_points: 0,
            games: 0,
            wins: 0,
            last_played_unix: None,
            ladder_floor: 0,
            win_streak: 0,
            period: None,
        }
    }

    fn ids(names: &[&[&str]]) -> Vec<Vec<PlayerId>> {
        names
            .iter()
            .map(|t| t.iter().map(|&n| PlayerId::from(n)).collect())
            .collect()
    }

    fn input(placements: &[u32], abandoned: &[&str]) -> ResultInput {
        ResultInput {
            placements: placements.to_vec(),
            performance: BTreeMap::new(),
            abandoned: abandoned.iter().map(|&a| PlayerId::from(a)).collect(),
        }
    }

    #[test]
    fn a_1v1_result_equals_the_rating_library_on_the_same_inputs() {
        let system = SystemConfig::Glicko2(glicko2::Config::default());
        let teams = ids(&[&["a"], &["b"]]);
        let before = vec![vec![record(1600.0, 120.0)], vec![record(1500.0, 200.0)]];
        let (after, ack) = compute(
            "1v1",
            &system,
            &NoRanking,
            &teams,
            &before,
            &input(&[2, 1], &[]),
            1e9,
        )
        .unwrap();
        let expected = system
            .rate(&MatchInput {
                teams: &[
                    vec![PlayerInput::new(before[0][0].skill)],
                    vec![PlayerInput::new(before[1][0].skill)],
                ],
                placements: &[2, 1],
            })
            .unwrap();
        assert_eq!(after[0][0].skill, expected[0][0]);
        assert_eq!(after[1][0].skill, expected[1][0]);
        assert!(after[1][0].skill.mean > 1500.0 && after[0][0].skill.mean < 1600.0);
        assert_eq!((after[1][0].wins, after[1][0].games), (1, 1));
        assert_eq!((after[0][0].wins, after[0][0].games), (0, 1));
        assert_eq!(after[0][0].last_played_unix, Some(1_000_000_000));
        assert_eq!(ack.changes.len(), 2);
        assert_eq!(ack.changes[0].before, before[0][0].skill);
    }

    #[test]
    fn inactivity_since_the_last_game_widens_the_deviation_first() {
        let system = SystemConfig::Glicko2(glicko2::Config::default());
        let teams = ids(&[&["a"], &["b"]]);
        let mut fresh = vec![vec![record(1500.0, 60.0)], vec![record(1500.0, 60.0)]];
        let (recent, _) = compute(
            "q",
            &system,
            &NoRanking,
            &teams,
            &fresh,
            &input(&[1, 2], &[]),
            0.0,
        )
        .unwrap();
        fresh[0][0].last_played_unix = Some(0);
        let a_year = 365.0 * 86400.0;
        let (idle, _) = compute(
            "q",
            &system,
            &NoRanking,
            &teams,
            &fresh,
            &input(&[1, 2], &[]),
            a_year,
        )
        .unwrap();
        // The idle winner was less certain, so it moves further.
        assert!(idle[0][0].skill.mean - 1500.0 > recent[0][0].skill.mean - 1500.0);
    }

    #[test]
    fn an_abandoner_takes_a_loss_and_the_one_who_stayed_is_unchanged() {
        let system = SystemConfig::Glicko2(glicko2::Config::default());
        let teams = ids(&[&["quitter"], &["stayer"]]);
        let before = vec![vec![record(1500.0, 100.0)], vec![record(1500.0, 100.0)]];
        // Even if the report says the quitter won, they lose.
        let (after, ack) = compute(
            "1v1",
            &system,
            &NoRanking,
            &teams,
            &before,
            &input(&[1, 2], &["quitter"]),
            0.0,
        )
        .unwrap();
        assert!(after[0][0].skill.mean < 1500.0);
        assert_eq!(after[0][0].wins, 0);
        assert_eq!(
            after[1][0], before[1][0],
            "a quit is not a win for the stayer"
        );
        assert_eq!(ack.changes[1].before, ack.changes[1].after);
    }

    #[test]
    fn validation_names_the_field() {
        let teams = ids(&[&["a"], &["b"]]);
        let none = BTreeMap::new();
        let e = validate(&teams, &[1], &none, &[]).unwrap_err().to_string();
        assert!(e.starts_with("placements:"), "{e}");
        let e = validate(&teams, &[1, 3], &none, &[])
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("placements[1]:"), "{e}");
        let e = validate(&teams, &[1, 0], &none, &[])
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("placements[1]:"), "{e}");
        let perf = BTreeMap::from([("zed".to_string(), 1.0)]);
        let e = validate(&teams, &[1, 2], &perf, &[])
            .unwrap_err()
            .to_string();
        assert!(e.contains("performance[\"zed\"]"), "{e}");
        let perf = BTreeMap::from([("a".to_string(), f64::NAN)]);
        let e = validate(&teams, &[1, 2], &perf, &[])
            .unwrap_err()
            .to_string();
        assert!(e.contains("finite"), "{e}");
        let perf = BTreeMap::from([("a".to_string(), 2e9)]);
        let e = validate(&teams, &[1, 2], &perf, &[])
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("performance[\"a\"]") && e.contains("1e9"),
            "{e}"
        );
        let e = validate(&teams, &[1, 2], &none, &["a".into(), "a".into()])
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("abandoned_player_ids[1]"), "{e}");
        let ok = validate(&teams, &[1, 1], &none, &[]).unwrap();
        assert_eq!(ok.placements, vec![1, 1]);
    }

    #[test]
    fn a_party_that_wins_rises_as_a_unit_and_its_mates_are_untouched() {
        let system = SystemConfig::WengLinBt(crate::rating::weng_lin::Config::default());
        let wl = |mean| PoolRecord {
            skill: Skill {
                mean,
                deviation: 25.0 / 3.0,
                volatility: 0.0,
            },
            ..record(0.0, 1.0)
        };
        let before = vec![
            vec![wl(25.0), wl(25.0), wl(25.0)],
            vec![wl(25.0), wl(25.0), wl(25.0)],
        ];
        let party = PartyRecord {
            skill: Skill {
                mean: 20.0,
                deviation: 6.0,
                volatility: 0.0,
            },
            games: 3,
            last_played_unix: None,
        };
        let teams = ids(&[&["a", "b", "c"], &["d", "e", "f"]]);
        let inputs = player_inputs(&teams, &before, &input(&[1, 2], &[]), 0.0);
        let won = rate_party(&system, &inputs, &[1, 2], 0, &[0, 1], &party, 0.0).unwrap();
        let lost = rate_party(&system, &inputs, &[2, 1], 0, &[0, 1], &party, 0.0).unwrap();
        assert!(won.mean > party.skill.mean && lost.mean < party.skill.mean);
        assert!(won.deviation < party.skill.deviation);
        let e = rate_party(&system, &inputs, &[1], 0, &[0], &party, 0.0).unwrap_err();
        assert!(e.to_string().contains("placements"), "{e}");
    }

    #[test]
    fn a_party_is_rated_with_its_own_inactivity_and_its_members_productivity() {
        // Glicko-2: a party idle for a year is less certain going in, so it moves further.
        let system = SystemConfig::Glicko2(glicko2::Config::default());
        let before = vec![
            vec![record(1500.0, 80.0), record(1500.0, 80.0)],
            vec![record(1500.0, 80.0), record(1500.0, 80.0)],
        ];
        let teams = ids(&[&["a", "b"], &["c", "d"]]);
        let now = 400.0 * 86_400.0;
        let inputs = player_inputs(&teams, &before, &input(&[1, 2], &[]), now);
        let party = |last_played_unix| PartyRecord {
            skill: Skill {
                mean: 1500.0,
                deviation: 80.0,
                volatility: 0.06,
            },
            games: 10,
            last_played_unix,
        };
        let fresh = rate_party(
            &system,
            &inputs,
            &[1, 2],
            0,
            &[0, 1],
            &party(Some(now as i64)),
            now,
        )
        .unwrap();
        let idle = rate_party(
            &system,
            &inputs,
            &[1, 2],
            0,
            &[0, 1],
            &party(Some((now - 365.0 * 86_400.0) as i64)),
            now,
        )
        .unwrap();
        assert!(idle.deviation > fresh.deviation, "{idle:?} vs {fresh:?}");
        assert!(
            idle.mean - 1500.0 > fresh.mean - 1500.0,
            "{idle:?} vs {fresh:?}"
        );

        // Elo: the members' productivity counts, as in their own update (SPEC §3.4).
        let elo = SystemConfig::Elo(crate::rating::elo::Config::default());
        let before = vec![
            vec![record(1500.0, 0.0), record(1500.0, 0.0)],
            vec![record(1500.0, 0.0), record(1500.0, 0.0)],
        ];
        let party = PartyRecord {
            skill: Skill {
                mean: 1500.0,
                deviation: 0.0,
                volatility: 0.0,
            },
            games: 10,
            last_played_unix: None,
        };
        let mut productive = input(&[1, 2], &[]);
        let mut idle = input(&[1, 2], &[]);
        for (p, perf) in [("a", 1500.0), ("b", 1500.0), ("c", 1000.0), ("d", 1000.0)] {
            productive.performance.insert(PlayerId::from(p), perf);
            idle.performance.insert(PlayerId::from(p), 1500.0);
        }
        let gain = |input: &ResultInput| {
            let inputs = player_inputs(&teams, &before, input, 0.0);
            rate_party(&elo, &inputs, &[1, 2], 0, &[0, 1], &party, 0.0)
                .unwrap()
                .mean
                - 1500.0
        };
        assert!(
            gain(&productive) > gain(&idle),
            "losers far below their expected productivity: {} vs {}",
            gain(&productive),
            gain(&idle)
        );
    }

    #[test]
    fn a_periodic_pool_keeps_results_until_the_period_ends_then_applies_them_in_one_batch() {
        let config = glicko2::Config {
            mode: crate::rating::Mode::Periodic,
            inactivity_granularity_seconds: 0.0,
            ..glicko2::Config::default()
        };
        let system = SystemConfig::Glicko2(config);
        let period = system.rating_period_seconds();
        let teams = ids(&[&["a"], &["b"]]);
        let fresh = vec![vec![record(1500.0, 200.0)], vec![record(1500.0, 200.0)]];
        // Two wins for `a` in period 10: ratings stay, results pile up.
        let t1 = 10.0 * period + 60.0;
        let (after1, ack) = compute(
            "q",
            &system,
            &NoRanking,
            &teams,
            &fresh,
            &input(&[1, 2], &[]),
            t1,
        )
        .unwrap();
        assert_eq!(after1[0][0].skill, fresh[0][0].skill);
        assert_eq!(ack.changes[0].before, ack.changes[0].after);
        let (after2, _) = compute(
            "q",
            &system,
            &NoRanking,
            &teams,
            &after1,
            &input(&[1, 2], &[]),
            t1 + 60.0,
        )
        .unwrap();
        let pending = after2[0][0].period.as_deref().unwrap();
        assert_eq!((pending.index, pending.results.len()), (10, 2));
        assert!(pending.results.iter().all(|r| r.score == 1.0));
        assert_eq!(
            after2[1][0].period.as_deref().unwrap().results[0].score,
            0.0
        );
        assert_eq!(after2[0][0].games, 2);

        // Closing period 10 is Glickman's batch update of both results.
        let expected = system
            .rate_period(&fresh[0][0].skill, &pending.results, 0.0)
            .unwrap();
        let mut closed = after2[0][0].clone();
        assert!(close_period(&system, &mut closed, 11).unwrap());
        assert_eq!(closed.skill, expected);
        assert!(closed.skill.mean > 1500.0 && closed.period.is_none());
        assert_eq!(closed.last_played_unix, Some((11.0 * period) as i64));
        assert!(
            !close_period(&system, &mut closed, 12).unwrap(),
            "nothing pending"
        );

        // A match in period 13 closes period 10 first (after two idle periods) and starts 13.
        let (after3, ack) = compute(
            "q",
            &system,
            &NoRanking,
            &teams,
            &after2,
            &input(&[2, 1], &[]),
            13.0 * period + 5.0,
        )
        .unwrap();
        assert_eq!(
            ack.changes[0].before, expected,
            "the ack starts from the closed period"
        );
        assert_eq!(
            after3[0][0].skill, expected,
            "and the new result waits for period 13"
        );
        let p13 = after3[0][0].period.as_deref().unwrap();
        assert_eq!((p13.index, p13.results.len()), (13, 1));
        assert_eq!(p13.results[0].score, 0.0);
        // Closing 13 first grows the deviation for the idle periods 11 and 12.
        let mut closed13 = after3[0][0].clone();
        assert!(close_period(&system, &mut closed13, 14).unwrap());
        let idle = system
            .rate_period(&expected, &p13.results, 2.0 * period)
            .unwrap();
        assert_eq!(closed13.skill, idle);
        let no_idle = system.rate_period(&expected, &p13.results, 0.0).unwrap();
        assert!(idle.deviation > no_idle.deviation);
    }

    #[test]
    fn a_tie_is_a_draw_for_counters() {
        let system = SystemConfig::Glicko2(glicko2::Config::default());
        let teams = ids(&[&["a"], &["b"]]);
        let before = vec![vec![record(1500.0, 100.0)], vec![record(1500.0, 100.0)]];
        let (after, _) = compute(
            "q",
            &system,
            &NoRanking,
            &teams,
            &before,
            &input(&[1, 1], &[]),
            0.0,
        )
        .unwrap();
        assert_eq!(after[0][0].wins + after[1][0].wins, 0);
        assert_eq!(after[0][0].games, 1);
    }
}

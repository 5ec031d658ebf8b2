//! What one match result does, computed purely: the match, the game server's report, the
//! records before and the time in; every player's and party's new record and the acknowledgement
//! out. [`compute`] is the single definition of a result: the state gathers its inputs and
//! journals its output, and applies it only once that is durable.
//!
//! Abandonment (as in INVERSUS's rank points, Juckett 2018): an abandoning player takes a loss —
//! they are rated as if their team had placed last. Players who left a running match (named by a
//! backfill request) are abandons whatever the report says. If every player of a team abandoned,
//! the match is void for everyone who stayed: their ratings and rank points do not move (a quit
//! is not a win). In a team game where only some players left, the rest are rated by the
//! reported placements.

mod party;
mod period;
mod ranker;
mod repeat;

pub use party::rate_party;
pub use period::{
    PeriodClose, close_ended_periods, close_period, close_period_now, period_close, period_index,
};
pub use ranker::{NoRanking, QueueRanker, Ranker};
pub use repeat::check_repeat;

use std::collections::{BTreeMap, BTreeSet};

use crate::ids::PlayerId;
use crate::ranking::Outcome;
use crate::rating::calibration::Observation;
use crate::rating::{MatchInput, PlayerInput, RatingError, Skill, SystemConfig};
use crate::records::{
    PartyRecord, PendingPeriod, PlayerChange, PoolRecord, ReportDigest, ResultAck,
};
use crate::rejection::Rejection;

/// A match as its result sees it.
#[derive(Clone, Copy, Debug)]
pub struct MatchFacts<'a> {
    /// The queue's name, echoed in the acknowledgement.
    pub queue: &'a str,
    pub teams: &'a [Vec<PlayerId>],
    /// Pre-made parties (two or more players who queued together).
    pub parties: &'a [Vec<PlayerId>],
    /// Players who left the running match: rated as abandons whatever the report says.
    pub left: &'a [PlayerId],
}

/// A game server's report, as received.
#[derive(Clone, Copy, Debug)]
pub struct Report<'a> {
    /// One per team, 1 = first, equal = tie.
    pub placements: &'a [u32],
    /// Optional per-player productivity, by player id.
    pub performance: &'a BTreeMap<String, f64>,
    /// Players the server says abandoned.
    pub abandoned: &'a [String],
    /// Optional per-team scores (rounds, kills, games), same order as `placements`; empty when
    /// the server reported none. Read by the queue's margin-of-victory option.
    pub team_scores: &'a [f64],
}

/// The records a result starts from.
#[derive(Clone, Debug, PartialEq)]
pub struct Before {
    /// Each player's record, same shape as the teams (a fresh record for a player new to the
    /// pool).
    pub players: Vec<Vec<PoolRecord>>,
    /// Each party's record, parallel to [`MatchFacts::parties`] (`None`: new to the pool).
    pub parties: Vec<Option<PartyRecord>>,
}

/// Everything a result changes: absolute after-records (so applying them twice is harmless)
/// and what the reporter is told.
#[derive(Clone, Debug, PartialEq)]
pub struct Computed {
    pub records: Vec<(PlayerId, PoolRecord)>,
    pub parties: Vec<(String, PartyRecord)>,
    pub ack: ResultAck,
    /// What the pool's calibration learns from this result ([`calibration_observation`]):
    /// present when the queue calibrates and the match was played out.
    pub calibration: Option<Observation>,
    /// Periodic Glicko pools: the players' rating periods that had ended and that this result
    /// closed before it rated the match, in team order. The acknowledgement's "before" is the
    /// closed record, so without these the close's own change would be reported by no one.
    pub period_closes: Vec<PeriodClose>,
    /// Players for whom the match was void (an opponent team quit entirely): their records do
    /// not move, and in a periodic pool nothing joins their open period.
    pub void: Vec<PlayerId>,
}

/// The result of `report` for the match: validation (every error names the field), the
/// queue's rating system, abandonment, parties and rank points. `now_unix` feeds inactivity
/// decay and rating periods.
pub fn compute(
    system: &SystemConfig,
    ranker: &dyn Ranker,
    m: &MatchFacts<'_>,
    report: &Report<'_>,
    before: &Before,
    now_unix: f64,
) -> Result<Computed, Rejection> {
    let mut abandoned = report.abandoned.to_vec();
    for p in m.left {
        if !abandoned.iter().any(|a| a == p.as_str()) {
            abandoned.push(p.to_string());
        }
    }
    let input = validate_scored(
        m.teams,
        report.placements,
        report.team_scores,
        report.performance,
        &abandoned,
    )?;
    let calibration = calibration_observation(system, &before.players, &input);
    // Periodic Glicko: ended periods are closed here, where each close can be told apart,
    // and `rate_players` finds nothing ended left to close.
    let closed = system
        .is_periodic()
        .then(|| {
            close_ended_periods(
                system,
                ranker,
                m.teams,
                &before.players,
                period_index(system, now_unix),
            )
        })
        .transpose()
        .map_err(rating_refusal)?;
    let (closed_records, period_closes) = closed.unzip();
    let players = closed_records.as_deref().unwrap_or(&before.players);
    let period_closes = period_closes.unwrap_or_default();
    let (after, ack) = rate_players(m.queue, system, ranker, m.teams, players, &input, now_unix)?;
    let void = void_players(m.teams, &input.abandoned);
    let parties = party::rate_parties(
        system,
        m.teams,
        m.parties,
        &before.parties,
        &before.players,
        &input,
        &void,
        now_unix,
    )?;
    let records = m
        .teams
        .iter()
        .flatten()
        .cloned()
        .zip(after.into_iter().flatten())
        .collect();
    Ok(Computed {
        records,
        parties,
        ack,
        calibration,
        period_closes,
        void,
    })
}

/// The players a result leaves as they were: everyone who stayed, in a match where another
/// team quit entirely (a quit is not a win).
#[must_use]
pub fn void_players(teams: &[Vec<PlayerId>], abandoned: &BTreeSet<PlayerId>) -> Vec<PlayerId> {
    let team_quit: Vec<bool> = teams
        .iter()
        .map(|t| t.iter().all(|id| abandoned.contains(id)))
        .collect();
    teams
        .iter()
        .enumerate()
        .filter(|&(t, _)| team_quit.iter().enumerate().any(|(o, &q)| q && o != t))
        .flat_map(|(_, team)| team.iter().filter(|id| !abandoned.contains(*id)))
        .cloned()
        .collect()
}

/// What a calibrating pool learns from a result: the system's uncalibrated win probabilities
/// from the players' skills before the match (what `PredictMatch` and the matchmaker showed,
/// before calibration) and the placements. `None` when the pool does not calibrate, when
/// anyone abandoned (the match was not played out) or when the prediction cannot be made.
#[must_use]
pub fn calibration_observation(
    system: &SystemConfig,
    before: &[Vec<PoolRecord>],
    input: &ResultInput,
) -> Option<Observation> {
    if !system.calibration().enabled || !input.abandoned.is_empty() {
        return None;
    }
    let skills: Vec<Vec<Skill>> = before
        .iter()
        .map(|team| team.iter().map(|r| r.skill).collect())
        .collect();
    let refs: Vec<&[Skill]> = skills.iter().map(Vec::as_slice).collect();
    let p = system.predict(&refs).ok()?;
    Observation::new(&p.win_probability, &input.placements)
}

/// A validated report.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ResultInput {
    /// One per team, 1 = first, equal = tie.
    pub placements: Vec<u32>,
    /// Optional per-player productivity (Elo margin multipliers).
    pub performance: BTreeMap<PlayerId, f64>,
    /// Players who left before the end.
    pub abandoned: BTreeSet<PlayerId>,
    /// Per-team scores, same order as `placements`, or empty.
    pub team_scores: Vec<f64>,
}

/// Checks a report against the match's teams; every error names the field and the rule.
pub fn validate(
    teams: &[Vec<PlayerId>],
    placements: &[u32],
    performance: &BTreeMap<String, f64>,
    abandoned: &[String],
) -> Result<ResultInput, Rejection> {
    validate_scored(teams, placements, &[], performance, abandoned)
}

/// [`validate`] with the report's `team_scores`: none, or one finite, non-negative score per
/// team (errors name `team_scores` or `team_scores[i]`).
pub fn validate_scored(
    teams: &[Vec<PlayerId>],
    placements: &[u32],
    team_scores: &[f64],
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
    if !team_scores.is_empty() && team_scores.len() != teams.len() {
        return Err(Rejection::invalid(
            "team_scores",
            format!(
                "must be empty or have one entry per team: the match has {} teams (got {})",
                teams.len(),
                team_scores.len()
            ),
        ));
    }
    for (i, &score) in team_scores.iter().enumerate() {
        // The rating systems' own rule, checked here so the error names this field.
        if !(score.is_finite() && (0.0..=1e9).contains(&score)) {
            return Err(Rejection::invalid(
                format!("team_scores[{i}]"),
                format!("must be finite and in [0, 1e9] (got {score})"),
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
        team_scores: team_scores.to_vec(),
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

/// A rating system's refusal of a result, under the request field it concerns: its own field
/// when that is one (`placements[2]`, `team_scores`), else `placements`, which the rating is
/// computed from (a stored skill outside the system's domain, a rating that is not finite; the
/// rule names the inner path).
pub(crate) fn rating_refusal(e: RatingError) -> Rejection {
    match e {
        RatingError::InvalidShape { field, rule } if is_report_field(&field) => {
            Rejection::invalid(field, rule)
        }
        RatingError::InvalidValue { field, rule, value } if is_report_field(&field) => {
            Rejection::invalid(field, format!("{rule} (got {value})"))
        }
        e => Rejection::invalid("placements", e.to_string()),
    }
}

/// Whether a rating error's field is a field of `ReportMatchResult` itself.
fn is_report_field(field: &str) -> bool {
    ["placements", "team_scores"].iter().any(|f| {
        field
            .strip_prefix(f)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('['))
    })
}

pub(crate) fn since(last_played_unix: Option<i64>, now_unix: f64) -> f64 {
    last_played_unix.map_or(0.0, |t| (now_unix - t as f64).max(0.0))
}

/// The new records of every player (same shape as `teams`) and the acknowledgement: the
/// players' part of [`compute`], without parties.
///
/// `before[t][i]` is the record of `teams[t][i]` before the match (the system's initial skill for
/// unrated players); `now_unix` feeds inactivity decay through each player's last game.
pub fn rate_players(
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
            closed = close_ended_periods(system, ranking, teams, before, current)
                .map_err(rating_refusal)?
                .0;
            &closed[..]
        }
        None => before,
    };
    let inputs = player_inputs(teams, before, input, now_unix);
    let rated = system
        .rate_scored(
            &MatchInput {
                teams: &inputs,
                placements: &input.placements,
            },
            &input.team_scores,
        )
        .map_err(rating_refusal)?;

    // Abandoners are rated as if their team had placed last, from placements alone (the
    // scores of a match someone left say nothing about the margin): each team with an
    // abandoner in a run of its own, where it alone is moved to last, so two teams that both
    // lost a player are each rated a loss against the others, not a draw with each other.
    let last = input.placements.iter().copied().max().unwrap_or(1) + 1;
    let quit_placements: Vec<Option<Vec<u32>>> = teams
        .iter()
        .enumerate()
        .map(|(t, team)| {
            team.iter().any(|id| input.abandoned.contains(id)).then(|| {
                let mut placements = input.placements.clone();
                placements[t] = last;
                placements
            })
        })
        .collect();
    let abandoned_as_last: Vec<Option<Vec<Vec<Skill>>>> = quit_placements
        .iter()
        .map(|placements| {
            placements
                .as_ref()
                .map(|placements| {
                    system.rate(&MatchInput {
                        teams: &inputs,
                        placements,
                    })
                })
                .transpose()
        })
        .collect::<Result<_, _>>()
        .map_err(|e| Rejection::invalid("abandoned_player_ids", e.to_string()))?;
    // Periodic Glicko: each player's results of this match, kept until the period ends.
    let period_results = match current_period {
        Some(_) => {
            let results = |placements: &[u32], scores: &[f64]| {
                system
                    .period_results(
                        &MatchInput {
                            teams: &inputs,
                            placements,
                        },
                        scores,
                    )
                    .map_err(rating_refusal)
            };
            let quit = quit_placements
                .iter()
                .map(|p| p.as_deref().map(|p| results(p, &[])).transpose())
                .collect::<Result<Vec<_>, _>>()?;
            Some((results(&input.placements, &input.team_scores)?, quit))
        }
        None => None,
    };
    let void = void_players(teams, &input.abandoned);
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
        let mut records = Vec::with_capacity(team.len());
        for (i, id) in team.iter().enumerate() {
            let prev = &before[t][i];
            // `None`: void for this player (an opponent team quit entirely), nothing moves.
            let (outcome, skill) = if input.abandoned.contains(id) {
                let s = abandoned_as_last[t]
                    .as_ref()
                    .map_or(rated[t][i], |r| r[t][i]);
                (Some(Outcome::Loss), s)
            } else if void.contains(id) {
                (None, prev.skill)
            } else {
                // Rank points follow the net of the pairwise results (in an 8-player free-for-all
                // places 1-4 gain); the wins counter counts outright first places only.
                let outcome = match Outcome::from_placements(&input.placements, t) {
                    Some(o @ (Outcome::Win | Outcome::Draw)) => o,
                    _ => Outcome::Loss,
                };
                (Some(outcome), rated[t][i])
            };
            let mut next = match outcome {
                None => prev.clone(),
                Some(o) => ranking.update(prev, &skill, o, &team_means[t], &opponents),
            };
            if let (Some(_), Some((results, quit)), false) =
                (current_period, &period_results, outcome.is_none())
            {
                let mine = match &quit[t] {
                    Some(q) if input.abandoned.contains(id) => &q[t][i],
                    _ => &results[t][i],
                };
                next.period
                    .get_or_insert_with(|| {
                        Box::new(PendingPeriod {
                            index: period::period_to_open(system, prev, now_unix),
                            results: Vec::new(),
                        })
                    })
                    .results
                    .extend_from_slice(mine);
            }
            if outcome.is_some() {
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
            report: Some(ReportDigest {
                placements: input.placements.clone(),
                team_scores: input.team_scores.clone(),
            }),
        },
    ))
}

#[cfg(test)]
mod tests;

//! Pre-made parties keep a skill of their own in each pool, rated from the same match as their
//! members: a party that wins together rises as a unit without moving its members' own ratings
//! twice. A party that broke up mid-match (a member abandoned) is not rated.

use crate::ids::PlayerId;
use crate::rating::{MatchInput, PlayerInput, Skill, SystemConfig, party_initial};
use crate::records::{PartyRecord, PoolRecord, party_key};
use crate::rejection::Rejection;

use super::{ResultInput, player_inputs, since};

/// The new record of every party of the match that stayed together, keyed by [`party_key`].
/// `before[k]` is the record of `parties[k]` (`None`: new to the pool, so it starts from its
/// members' skills); `records` are the players' records before the match (same shape as
/// `teams`).
#[allow(clippy::too_many_arguments)]
pub(super) fn rate_parties(
    system: &SystemConfig,
    teams: &[Vec<PlayerId>],
    parties: &[Vec<PlayerId>],
    before: &[Option<PartyRecord>],
    records: &[Vec<PoolRecord>],
    input: &ResultInput,
    void: &[PlayerId],
    now_unix: f64,
) -> Result<Vec<(String, PartyRecord)>, Rejection> {
    if parties.is_empty() {
        return Ok(Vec::new());
    }
    let inputs = player_inputs(teams, records, input, now_unix);
    let mut out = Vec::new();
    for (k, members) in parties.iter().enumerate() {
        let Some(team) = teams
            .iter()
            .position(|t| members.iter().all(|p| t.contains(p)))
        else {
            continue;
        };
        if members.iter().any(|p| input.abandoned.contains(p)) {
            continue; // a party that broke up mid-match says nothing about the party
        }
        if members.iter().any(|p| void.contains(p)) {
            continue; // its opponents all quit: void for it, as for its members
        }
        let indices: Vec<usize> = members
            .iter()
            .filter_map(|p| teams[team].iter().position(|q| q == p))
            .collect();
        let party = match before.get(k).cloned().flatten() {
            Some(record) => record,
            None => PartyRecord {
                skill: party_initial(
                    system,
                    &indices
                        .iter()
                        .map(|&i| records[team][i].skill)
                        .collect::<Vec<_>>(),
                ),
                games: 0,
                last_played_unix: None,
            },
        };
        let skill = rate_party(
            system,
            &inputs,
            &input.placements,
            &input.team_scores,
            team,
            &indices,
            &party,
            now_unix,
        )?;
        out.push((
            party_key(members),
            PartyRecord {
                skill,
                games: party.games.saturating_add(1),
                last_played_unix: Some(now_unix.floor() as i64),
            },
        ));
    }
    Ok(out)
}

/// A party's new skill: the match rated with the inputs the players' own update
/// used ([`player_inputs`]), except that the party's members (`members`, indices into `team`)
/// play at the party's skill and with the time since the party last played; the party's new
/// skill is the mean of its members' new skills; `team_scores` are the match's (or empty). Each member keeps its own productivity and
/// win count. Works for a party that fills a team and for one that shares a team with solo
/// players.
#[allow(clippy::too_many_arguments)]
pub fn rate_party(
    system: &SystemConfig,
    inputs: &[Vec<PlayerInput>],
    placements: &[u32],
    team_scores: &[f64],
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
        .rate_scored(
            &MatchInput {
                teams: &inputs,
                placements,
            },
            team_scores,
        )
        .map_err(super::rating_refusal)?;
    let n = members.len().max(1) as f64;
    let mean = |f: fn(&Skill) -> f64| members.iter().map(|&i| f(&rated[team][i])).sum::<f64>() / n;
    Ok(Skill {
        mean: mean(|s| s.mean),
        deviation: mean(|s| s.deviation),
        volatility: mean(|s| s.volatility),
    })
}

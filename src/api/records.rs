//! Records on the wire: `GetActiveTicket`, `GetMatch`, `ListPlayerMatches` (their bodies,
//! called from `ClientService`), match records and parties as the proto spells them.

use std::collections::HashMap;

use tonic::Status;

use super::convert;
use crate::auth::{Identity, MayAct};
use crate::ids::{MatchId, PlayerId, QueueId};
use crate::proto;
use crate::records::{EndedPhase, MatchRecord, PartyRoster};
use crate::rejection::Rejection;
use crate::state::{LiveMatch, MatchPhase, State};

/// `ListPlayerMatches` page size when the request says 0, and the most it may ask for.
pub const DEFAULT_PAGE: usize = 20;
pub const MAX_PAGE: usize = 100;

fn unix(t: f64) -> i64 {
    t as i64
}

/// A live match's phase on the wire (a ready-check is FORMED; a result being journaled is
/// still STARTED or ALLOCATED until it is applied).
fn live_phase(phase: MatchPhase, started: bool) -> proto::MatchPhase {
    match phase {
        MatchPhase::ReadyCheck | MatchPhase::Formed => proto::MatchPhase::Formed,
        MatchPhase::Allocated => proto::MatchPhase::Allocated,
        MatchPhase::Started => proto::MatchPhase::Started,
        MatchPhase::Completing if started => proto::MatchPhase::Started,
        MatchPhase::Completing => proto::MatchPhase::Allocated,
        MatchPhase::Completed => proto::MatchPhase::Completed,
        MatchPhase::Cancelled => proto::MatchPhase::Cancelled,
    }
}

fn teams(teams: &[Vec<PlayerId>]) -> Vec<proto::Team> {
    teams
        .iter()
        .map(|t| proto::Team {
            player_ids: t.iter().map(ToString::to_string).collect(),
        })
        .collect()
}

/// A live match on the wire.
pub fn live_match(m: &LiveMatch) -> proto::MatchRecord {
    let a = &m.assignment;
    proto::MatchRecord {
        match_id: a.match_id.to_string(),
        queue: a.queue.to_string(),
        phase: live_phase(m.phase, m.started_unix.is_some()) as i32,
        teams: teams(&a.teams),
        placements: Vec::new(),
        changes: Vec::new(),
        server_address: a.server_address.clone(),
        formed_unix: unix(m.formed_unix),
        started_unix: m.started_unix.map_or(0, unix),
        ended_unix: 0,
        win_probability: a.win_probability.clone(),
    }
}

/// An ended match on the wire; ratings in its queue system's display units (as stored, when
/// the queue is no longer configured).
pub fn match_record(state: &State, r: &MatchRecord) -> proto::MatchRecord {
    let queue = state.queue_of(&QueueId::new(r.queue.as_str()));
    proto::MatchRecord {
        match_id: r.match_id.to_string(),
        queue: r.queue.clone(),
        phase: match r.phase {
            EndedPhase::Completed => proto::MatchPhase::Completed,
            EndedPhase::Cancelled => proto::MatchPhase::Cancelled,
        } as i32,
        teams: teams(&r.teams),
        placements: r.placements.clone(),
        changes: convert::player_changes(queue.as_ref().map(|q| &q.config.rating), &r.changes),
        server_address: r.server_address.clone(),
        win_probability: r.win_probability.clone(),
        formed_unix: unix(r.formed_unix),
        started_unix: r.started_unix.map_or(0, unix),
        ended_unix: unix(r.ended_unix),
    }
}

/// A party on the wire.
pub fn party(r: &PartyRoster) -> proto::Party {
    proto::Party {
        party_id: r.party_id.to_string(),
        invite_code: r.invite_code.clone(),
        member_ids: r.members.iter().map(ToString::to_string).collect(),
        leader_id: r.leader.to_string(),
    }
}

/// `GetActiveTicket`.
pub fn get_active_ticket(
    state: &State,
    identity: &Option<Identity>,
    req: &proto::GetActiveTicketRequest,
    now: f64,
) -> Result<proto::TicketUpdate, Status> {
    convert::id("player_id", &req.player_id)?;
    identity.may_be(&req.player_id, "ask for the active ticket")?;
    let (ticket_id, view) = state
        .active_ticket(&PlayerId::new(req.player_id.as_str()), now)
        .ok_or_else(|| Rejection::NotFound {
            what: "active ticket or match of player",
            id: req.player_id.clone(),
        })?;
    Ok(convert::ticket_update(&ticket_id, &view))
}

/// `GetMatch`.
pub async fn get_match(
    state: &State,
    identity: &Option<Identity>,
    req: &proto::GetMatchRequest,
) -> Result<proto::MatchRecord, Status> {
    convert::id("match_id", &req.match_id)?;
    let id = MatchId::new(req.match_id.as_str());
    match state.match_view(&id).await? {
        Some(Ok(live)) => {
            let a = &live.assignment;
            let players: Vec<PlayerId> = a.teams.iter().flatten().cloned().collect();
            identity.may_read_match(&players, &a.server_address)?;
            Ok(live_match(&live))
        }
        Some(Err(ended)) => {
            identity.may_read_match(&ended.players(), &ended.server_address)?;
            Ok(match_record(state, &ended))
        }
        None => Err(Rejection::NotFound {
            what: "match",
            id: req.match_id.clone(),
        }
        .into()),
    }
}

/// `ListPlayerMatches`: the player's history after the page token, filtered by queue (and, for
/// a server token, to the matches that server hosted), read a page's worth of records at a time.
pub async fn list_player_matches(
    state: &State,
    identity: &Option<Identity>,
    req: &proto::ListPlayerMatchesRequest,
) -> Result<proto::ListPlayerMatchesResponse, Status> {
    convert::id("player_id", &req.player_id)?;
    if !req.queue.is_empty() {
        // A queue the config does not define is refused, as in every other request.
        state.queue("queue", &req.queue)?;
    }
    let after = if req.page_token.is_empty() {
        None
    } else {
        convert::id("page_token", &req.page_token)?;
        Some(MatchId::new(req.page_token.as_str()))
    };
    let server = identity.history_reader(&req.player_id)?;
    let limit = match req.limit {
        0 => DEFAULT_PAGE,
        n if n as usize > MAX_PAGE => {
            return Err(Rejection::invalid(
                "limit",
                format!("must be at most {MAX_PAGE} (got {n})"),
            )
            .into());
        }
        n => n as usize,
    };
    let ids = state
        .store()
        .player_matches(&PlayerId::new(req.player_id.as_str()))
        .await?;
    let rest = crate::store::page_after(&ids, after.as_ref()).ok_or_else(|| {
        Rejection::invalid(
            "page_token",
            "is not in this player's match history (its match was dropped since); start again \
             without a token",
        )
    })?;
    let mut matches = Vec::new();
    let mut next_page_token = String::new();
    let mut at = 0;
    'pages: while at < rest.len() {
        let chunk = &rest[at..(at + limit).min(rest.len())];
        let mut found: HashMap<MatchId, MatchRecord> = state
            .store()
            .match_records(chunk)
            .await?
            .into_iter()
            .map(|r| (r.match_id.clone(), r))
            .collect();
        for (i, id) in chunk.iter().enumerate() {
            let Some(r) = found.remove(id) else {
                continue;
            };
            let wanted = (req.queue.is_empty() || r.queue == req.queue)
                && server.as_ref().is_none_or(|s| *s == r.server_address);
            if !wanted {
                continue;
            }
            matches.push(match_record(state, &r));
            if matches.len() == limit {
                if at + i + 1 < rest.len() {
                    next_page_token = id.to_string();
                }
                break 'pages;
            }
        }
        at += chunk.len();
    }
    Ok(proto::ListPlayerMatchesResponse {
        matches,
        next_page_token,
    })
}

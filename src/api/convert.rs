//! Proto ↔ domain conversions and input validation shared by the services.

use crate::ids::PlayerId;
use crate::proto;
use crate::ranking::Tier;
use crate::ranking::season::SeasonState;
use crate::rating::{Skill, SystemConfig};
use crate::records::PoolRecord;
use crate::rejection::{FieldError, Rejection};
use crate::state::{Assignment, PlayerStatus, QueueInfo, TicketState, TicketView};

/// Longest accepted id (player, ticket, match).
pub const MAX_ID_LEN: usize = 128;

/// Validates one id field: non-empty, bounded, printable.
pub fn id(field: &str, value: &str) -> Result<(), Rejection> {
    id_rule(|| field.to_owned(), value).map_err(Rejection::Invalid)
}

/// Validates the `index`th id of a list field. The field name (`field[index]`) is formatted only
/// when the id is invalid: EnterQueue checks every player id, and a valid one allocates nothing.
pub fn id_at(field: &str, index: impl std::fmt::Display, value: &str) -> Result<(), Rejection> {
    id_rule(|| format!("{field}[{index}]"), value).map_err(Rejection::Invalid)
}

/// The rule an id breaks, if any, against the field `field()` names (called only on failure).
fn id_rule(field: impl FnOnce() -> String, value: &str) -> Result<(), FieldError> {
    let rule = if value.is_empty() {
        "must not be empty".to_owned()
    } else if value.len() > MAX_ID_LEN {
        format!("must be at most {MAX_ID_LEN} bytes (got {})", value.len())
    } else if value.chars().any(char::is_control) {
        "must not contain control characters".to_owned()
    } else {
        return Ok(());
    };
    Err(FieldError::new(field(), rule))
}

/// Validates a list of player ids: each valid, no duplicates. Linear time at any length (a
/// message at the size limit holds ~200k short ids); short lists, the common case, are checked
/// without a set.
pub fn player_ids(field: &str, ids: &[String]) -> Result<Vec<PlayerId>, Rejection> {
    const SCAN: usize = 16;
    let mut seen: std::collections::HashSet<&str> = std::collections::HashSet::new();
    let mut out = Vec::with_capacity(ids.len());
    for (i, p) in ids.iter().enumerate() {
        id_at(field, i, p)?;
        let duplicate = if ids.len() <= SCAN {
            ids[..i].contains(p)
        } else {
            !seen.insert(p.as_str())
        };
        if duplicate {
            return Err(Rejection::invalid(
                format!("{field}[{i}]"),
                format!("duplicate player {p:?}"),
            ));
        }
        out.push(PlayerId::new(p.as_str()));
    }
    Ok(out)
}

/// A domain ticket state on the wire.
pub fn ticket_state(s: TicketState) -> proto::TicketState {
    match s {
        TicketState::Searching => proto::TicketState::Searching,
        TicketState::Matched => proto::TicketState::Matched,
        TicketState::Cancelled => proto::TicketState::Cancelled,
        TicketState::Expired => proto::TicketState::Expired,
    }
}

/// A domain assignment on the wire.
pub fn assignment(a: &Assignment) -> proto::MatchAssignment {
    proto::MatchAssignment {
        match_id: a.match_id.to_string(),
        queue: a.queue.to_string(),
        teams: a
            .teams
            .iter()
            .map(|t| proto::Team {
                player_ids: t
                    .iter()
                    .filter(|p| !a.left.contains(p))
                    .map(ToString::to_string)
                    .collect(),
            })
            .collect(),
        win_probability: a.win_probability.clone(),
        server_address: a.server_address.clone(),
        region: a.region.clone().unwrap_or_default(),
        backfill: a
            .backfill
            .iter()
            .map(|t| proto::Team {
                player_ids: t.iter().map(ToString::to_string).collect(),
            })
            .collect(),
        left_player_ids: a.left.iter().map(ToString::to_string).collect(),
    }
}

/// A ticket view on the wire.
pub fn ticket_update(ticket_id: &str, v: &TicketView) -> proto::TicketUpdate {
    let (window_low, window_high) = v.window.unwrap_or((0.0, 0.0));
    proto::TicketUpdate {
        ticket_id: ticket_id.to_owned(),
        state: ticket_state(v.state) as i32,
        wait_seconds: v.wait_seconds,
        assignment: v.assignment.as_deref().map(assignment),
        window_low,
        window_high,
        reason: v.reason.clone(),
        ready_check: v.ready.map(|r| proto::ReadyCheck {
            seconds_left: r.seconds_left,
            accepted: r.accepted,
            required: r.required,
            accepted_by_ticket: r.accepted_by_ticket,
        }),
    }
}

/// A skill in the queue system's display units on the wire.
pub fn rating(system: &SystemConfig, s: &Skill) -> proto::Rating {
    let d = system.display(s);
    proto::Rating {
        mean: s.mean,
        deviation: s.deviation,
        volatility: s.volatility,
        display: d.display,
        display_low: d.low,
        display_high: d.high,
    }
}

/// The player view of one queue (`record` is the system's initial one for unrated players).
pub fn player_view(
    player_id: &str,
    queue: &QueueInfo,
    status: &PlayerStatus,
    record: &PoolRecord,
    tier: Option<&Tier>,
    season: SeasonState,
) -> proto::PlayerView {
    proto::PlayerView {
        player_id: player_id.to_owned(),
        queue: queue.id.to_string(),
        rating: Some(rating(&queue.config.rating, &record.skill)),
        rank_points: i64::from(record.rank_points),
        tier: tier.map(|t| t.name.clone()).unwrap_or_default(),
        games: record.games,
        wins: record.wins,
        status: status.name().to_owned(),
        season: season.season,
        week: season.week,
        week_history: Vec::new(),
        season_history: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_id_is_refused_naming_its_field_and_index() {
        assert_eq!(id("match_id", "m-1"), Ok(()));
        assert_eq!(
            id("match_id", ""),
            Err(Rejection::Invalid(FieldError::new(
                "match_id",
                "must not be empty"
            )))
        );
        assert_eq!(
            id_at("player_ids", 2, "a\nb"),
            Err(Rejection::Invalid(FieldError::new(
                "player_ids[2]",
                "must not contain control characters"
            )))
        );
        let long = "x".repeat(MAX_ID_LEN + 1);
        assert_eq!(
            id_at("player_ids", 0, &long).unwrap_err().to_string(),
            format!("player_ids[0]: must be at most {MAX_ID_LEN} bytes (got 129)")
        );
    }

    #[test]
    fn duplicate_players_are_found_at_any_length_and_named_by_index() {
        for n in [2usize, 16, 17, 200_000] {
            let mut ids: Vec<String> = (0..n).map(|i| format!("p{i}")).collect();
            assert_eq!(player_ids("teams[0].player_ids", &ids).unwrap().len(), n);
            ids[n - 1] = "p0".into();
            let err = player_ids("teams[0].player_ids", &ids)
                .unwrap_err()
                .to_string();
            assert!(
                err.contains(&format!("teams[0].player_ids[{}]", n - 1)) && err.contains("p0"),
                "n = {n}: {err}"
            );
        }
    }
}

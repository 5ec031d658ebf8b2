//! Proto ↔ domain conversions and input validation shared by the services.

use crate::ids::PlayerId;
use crate::matching::rules::{self, AttributeValue, Attributes, MatchRule};
use crate::proto;
use crate::ranking::Tier;
use crate::ranking::season::SeasonState;
use crate::rating::{Skill, SystemConfig};
use crate::records::PoolRecord;
use crate::rejection::{FieldError, Rejection};
use crate::state::{Assignment, PlayerStatus, QueueInfo, TicketState, TicketView};

/// Longest accepted id (player, ticket, match).
pub const MAX_ID_LEN: usize = 128;

/// Validates one id field: non-empty, bounded, printable, with no leading or trailing
/// whitespace and no invisible format characters, so that two ids that look the same are the
/// same id.
pub fn id(field: &str, value: &str) -> Result<(), Rejection> {
    id_rule(|| field.to_owned(), value).map_err(Rejection::Invalid)
}

/// Validates the id of a player to erase: [`id`]'s rules before ids were refused for
/// whitespace at their ends or invisible format characters (non-empty, bounded, no control
/// characters), so that a player who entered under such an id can still be erased.
pub fn erasable_id(field: &str, value: &str) -> Result<(), Rejection> {
    match id_rule(|| field.to_owned(), value) {
        Err(_)
            if !value.is_empty()
                && value.len() <= MAX_ID_LEN
                && !value.chars().any(char::is_control) =>
        {
            Ok(())
        }
        checked => checked.map_err(Rejection::Invalid),
    }
}

/// Validates the id of a player a call may create (EnterQueue, the party calls, SetRating,
/// MigrateFromElo): an id, and not of the form an erased player's records name in their place
/// (`erased:…`), which a new player taking would appear in the erased player's matches. Reads
/// and erasure take any id.
pub fn new_player_id(field: &str, value: &str) -> Result<(), Rejection> {
    id(field, value)?;
    unreserved(|| field.to_owned(), value)
}

/// [`new_player_id`]'s rule for each of a list's ids (already valid ids).
pub fn new_player_ids(field: &str, ids: &[PlayerId]) -> Result<(), Rejection> {
    for (i, p) in ids.iter().enumerate() {
        unreserved(|| format!("{field}[{i}]"), p.as_str())?;
    }
    Ok(())
}

fn unreserved(field: impl FnOnce() -> String, value: &str) -> Result<(), Rejection> {
    if value.starts_with(crate::records::ERASED_PREFIX) {
        return Err(Rejection::Invalid(FieldError::new(
            field(),
            format!(
                "must not start with {:?} (reserved for erased players)",
                crate::records::ERASED_PREFIX
            ),
        )));
    }
    Ok(())
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
    } else if value.starts_with(char::is_whitespace) || value.ends_with(char::is_whitespace) {
        if value.chars().all(char::is_whitespace) {
            "must not be only whitespace".to_owned()
        } else {
            "must not start or end with whitespace".to_owned()
        }
    } else if value.is_ascii() {
        // The common case, one pass over bytes: ASCII has control characters, no format ones.
        if value.bytes().any(|b| b.is_ascii_control()) {
            "must not contain control characters".to_owned()
        } else {
            return Ok(());
        }
    } else if value.chars().any(char::is_control) {
        "must not contain control characters".to_owned()
    } else if let Some(c) = value.chars().find(|&c| is_format_char(c)) {
        format!(
            "must not contain invisible format characters (zero-width, bidi controls; got \
             U+{:04X})",
            u32::from(c)
        )
    } else {
        return Ok(());
    };
    Err(FieldError::new(field(), rule))
}

/// Unicode format characters (category Cf) that make two ids look alike or reorder what is
/// shown: the soft hyphen, zero-width characters and joiners, bidi marks, embeddings,
/// overrides and isolates, invisible operators, the byte order mark, tag characters.
fn is_format_char(c: char) -> bool {
    matches!(
        c,
        '\u{00AD}'
            | '\u{061C}'
            | '\u{180E}'
            | '\u{200B}'..='\u{200F}'
            | '\u{202A}'..='\u{202E}'
            | '\u{2060}'..='\u{2064}'
            | '\u{2066}'..='\u{206F}'
            | '\u{FEFF}'
            | '\u{FFF9}'..='\u{FFFB}'
            | '\u{E0001}'
            | '\u{E0020}'..='\u{E007F}'
    )
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

/// A ticket's `attributes` and `avoid_player_ids`, validated into domain values and admitted to
/// a queue with `rules` (see [`rules::admit`]): every error names the key
/// (`attributes["maps"]`, `avoid_player_ids[3]`).
pub fn ticket_rules(
    attributes: &std::collections::HashMap<String, proto::AttributeValue>,
    avoid_player_ids: &[String],
    queue_rules: &[MatchRule],
    players: &[PlayerId],
) -> Result<(Attributes, Vec<PlayerId>), Rejection> {
    if attributes.len() > rules::MAX_ATTRIBUTES {
        return Err(Rejection::invalid(
            "attributes",
            format!(
                "at most {} attributes (got {})",
                rules::MAX_ATTRIBUTES,
                attributes.len()
            ),
        ));
    }
    let mut out = Attributes::new();
    for (key, value) in attributes {
        let value = match &value.value {
            Some(proto::attribute_value::Value::Text(t)) => AttributeValue::Text(t.clone()),
            Some(proto::attribute_value::Value::Number(x)) => AttributeValue::Number(*x),
            Some(proto::attribute_value::Value::Tags(list)) => {
                AttributeValue::Tags(list.values.clone())
            }
            None => {
                return Err(Rejection::invalid(
                    format!("attributes[{key:?}]"),
                    "must set text, number or tags",
                ));
            }
        };
        out.insert(key.clone(), value);
    }
    rules::normalize_attributes(&mut out)?;
    if avoid_player_ids.len() > rules::MAX_AVOID {
        return Err(Rejection::invalid(
            "avoid_player_ids",
            format!(
                "at most {} players (got {})",
                rules::MAX_AVOID,
                avoid_player_ids.len()
            ),
        ));
    }
    let avoid = player_ids("avoid_player_ids", avoid_player_ids)?;
    rules::admit(queue_rules, &mut out, &avoid, players)?;
    Ok((out, avoid))
}

/// A domain attribute value on the wire.
pub fn attribute(value: &AttributeValue) -> proto::AttributeValue {
    use proto::attribute_value::Value;
    proto::AttributeValue {
        value: Some(match value {
            AttributeValue::Text(t) => Value::Text(t.clone()),
            AttributeValue::Number(x) => Value::Number(*x),
            AttributeValue::Tags(tags) => Value::Tags(proto::StringList {
                values: tags.clone(),
            }),
        }),
    }
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
        attributes: a
            .attributes
            .iter()
            .map(|(k, v)| (k.clone(), attribute(v)))
            .collect(),
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

/// Rating changes on the wire: in `system`'s display units, or as stored (`None`: the queue of a
/// record or acknowledgement is no longer configured).
pub fn player_changes(
    system: Option<&SystemConfig>,
    changes: &[crate::records::PlayerChange],
) -> Vec<proto::PlayerChange> {
    let shown = |s: &Skill| match system {
        Some(system) => rating(system, s),
        None => proto::Rating {
            mean: s.mean,
            deviation: s.deviation,
            volatility: s.volatility,
            display: s.mean,
            display_low: s.mean,
            display_high: s.mean,
        },
    };
    changes
        .iter()
        .map(|c| proto::PlayerChange {
            player_id: c.player_id.to_string(),
            before: Some(shown(&c.before)),
            after: Some(shown(&c.after)),
            rank_points_before: i64::from(c.rank_points_before),
            rank_points_after: i64::from(c.rank_points_after),
        })
        .collect()
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
        // A marker is an id to read and erase, not one a new player may take.
        assert_eq!(id("player_id", "erased:0123456789ab"), Ok(()));
        let taken = new_player_ids(
            "player_ids",
            &[PlayerId::new("a"), PlayerId::new("erased:1")],
        )
        .unwrap_err()
        .to_string();
        assert!(
            taken.starts_with("player_ids[1]: must not start with \"erased:\""),
            "{taken}"
        );
        assert!(new_player_id("player_id", "erased:1").is_err());
        assert_eq!(new_player_id("player_id", "p1"), Ok(()));
    }

    #[test]
    fn ids_that_look_alike_are_refused_naming_the_field_and_the_rule() {
        for ok in ["p1", "p 1", "joão", "名前", "a\u{00A0}b", "🙂"] {
            assert_eq!(id("player_id", ok), Ok(()), "{ok:?}");
        }
        for (bad, rule) in [
            (" ", "must not be only whitespace"),
            ("\u{3000}\u{00A0}", "must not be only whitespace"),
            ("p1 ", "must not start or end with whitespace"),
            ("\u{00A0}p1", "must not start or end with whitespace"),
            ("p\u{0085}1", "must not contain control characters"),
            ("p1\u{200B}", "must not contain invisible format characters"),
            ("p\u{202E}1", "must not contain invisible format characters"),
            ("p\u{2066}1", "must not contain invisible format characters"),
            ("\u{FEFF}p1", "must not contain invisible format characters"),
            ("p\u{00AD}1", "must not contain invisible format characters"),
            (
                "p\u{E0041}1",
                "must not contain invisible format characters",
            ),
        ] {
            let refused = id_at("player_ids", 3, bad).unwrap_err().to_string();
            assert!(
                refused.starts_with(&format!("player_ids[3]: {rule}")),
                "{bad:?}: {refused}"
            );
        }
        assert!(
            id("server_address", "gs-1:7777\u{200D}")
                .unwrap_err()
                .to_string()
                .contains("U+200D")
        );
        // A player who entered under such an id before it was refused can still be erased.
        assert_eq!(erasable_id("player_id", "p1 "), Ok(()));
        assert_eq!(erasable_id("player_id", "p\u{200B}1"), Ok(()));
        assert!(erasable_id("player_id", "").is_err());
        assert!(erasable_id("player_id", "a\nb").is_err());
    }

    fn text(t: &str) -> proto::AttributeValue {
        proto::AttributeValue {
            value: Some(proto::attribute_value::Value::Text(t.into())),
        }
    }

    #[test]
    fn bad_attributes_and_avoid_lists_name_the_key() {
        use crate::matching::RuleKind;
        let rules = vec![
            MatchRule::new(RuleKind::Equal, "mode"),
            MatchRule::new(RuleKind::Avoid, ""),
        ];
        let me = [PlayerId::new("me")];
        let ok: std::collections::HashMap<String, proto::AttributeValue> =
            [("mode".to_string(), text("ranked"))].into();
        let (attrs, avoid) = ticket_rules(&ok, &["you".into()], &rules, &me).unwrap();
        assert_eq!(attrs["mode"], AttributeValue::Text("ranked".into()));
        assert_eq!(avoid, vec![PlayerId::new("you")]);
        let nan = proto::AttributeValue {
            value: Some(proto::attribute_value::Value::Number(f64::NAN)),
        };
        let unset = proto::AttributeValue { value: None };
        let many: Vec<String> = (0..=rules::MAX_AVOID).map(|i| format!("p{i}")).collect();
        for (attributes, avoid, field) in [
            (vec![("mode", nan)], vec![], "attributes[\"mode\"]"),
            (vec![("mode", unset)], vec![], "attributes[\"mode\"]"),
            (vec![("mode", text("ranked"))], many, "avoid_player_ids"),
            (
                vec![("mode", text("ranked"))],
                vec!["x".to_string(), "x".to_string()],
                "avoid_player_ids[1]",
            ),
            (vec![("level", text("1"))], vec![], "attributes[\"mode\"]"),
        ] {
            let attributes = attributes
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect();
            let err = ticket_rules(&attributes, &avoid, &rules, &me).unwrap_err();
            match err {
                Rejection::Invalid(e) => assert_eq!(e.field, field, "{e}"),
                other => panic!("{other}"),
            }
        }
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

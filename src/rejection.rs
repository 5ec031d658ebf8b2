//! Why a request could not be carried out: the expected refusals, each of which maps to one gRPC
//! code in `api::error`. Storage failures are a different type (`store::StoreError`): a refusal
//! changes nothing and the caller can fix its request; a storage failure is the server's.

use crate::ids::{MatchId, PartyId, PlayerId, TicketId};

/// A field of a request (or a config key) and the rule its value broke.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {rule}")]
pub struct FieldError {
    /// The field as the caller spelled it (`placements[1]`, `queues.1v1.rating.tau`).
    pub field: String,
    /// What the value must be, with the value given.
    pub rule: String,
}

impl FieldError {
    /// `field` broke `rule`.
    pub fn new(field: impl Into<String>, rule: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            rule: rule.into(),
        }
    }

    /// The same rule under a longer path: `prefix.field`.
    #[must_use]
    pub fn under(self, prefix: &str) -> Self {
        Self {
            field: format!("{prefix}.{}", self.field),
            rule: self.rule,
        }
    }
}

/// A refused request.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Rejection {
    /// Bad input (INVALID_ARGUMENT).
    #[error(transparent)]
    Invalid(#[from] FieldError),
    /// The named thing does not exist (NOT_FOUND).
    #[error("{what} {id:?} not found")]
    NotFound { what: &'static str, id: String },
    /// A player named by the request is waiting in a queue (FAILED_PRECONDITION).
    #[error("player {player} is already queued (ticket {ticket})")]
    AlreadyQueued { player: PlayerId, ticket: TicketId },
    /// A player named by the request waits or plays in another shard's queue
    /// (FAILED_PRECONDITION).
    #[error("player {player} is queued or in a live match in shard {keyspace}")]
    BusyElsewhere { player: PlayerId, keyspace: String },
    /// A player named by the request is in a live match (FAILED_PRECONDITION).
    #[error("player {player} is in live match {match_id}")]
    InMatch { player: PlayerId, match_id: MatchId },
    /// The match's phase does not allow the request (FAILED_PRECONDITION).
    #[error("match {match_id} {refusal}")]
    Match {
        match_id: MatchId,
        refusal: MatchRefusal,
    },
    /// The ticket's state does not allow the request (FAILED_PRECONDITION).
    #[error("ticket {ticket} {refusal}")]
    Ticket {
        ticket: TicketId,
        refusal: TicketRefusal,
    },
    /// The queue cannot do what was asked (FAILED_PRECONDITION).
    #[error("queue {queue} {reason}")]
    Unsupported { queue: String, reason: &'static str },
    /// An admin change would take a rating outside its system's domain (FAILED_PRECONDITION).
    #[error("player {player} in pool {pool}: {detail}")]
    Rating {
        player: PlayerId,
        pool: String,
        detail: String,
    },
    /// The queue holds as many waiting tickets as it may (RESOURCE_EXHAUSTED).
    #[error("queue {queue:?} is full ({max} waiting tickets, server.max_tickets_per_queue)")]
    QueueFull { queue: String, max: usize },
    // --- Records ---
    /// The party, or the player's membership of another, does not allow the request
    /// (FAILED_PRECONDITION).
    #[error("party {party} {refusal}")]
    Party {
        party: PartyId,
        refusal: PartyRefusal,
    },
    /// A player named by the request is banned (PERMISSION_DENIED): the reason and the end
    /// (unix seconds; 0 means for good).
    #[error("player {player} is banned {}: {reason}", until_text(*until_unix))]
    Banned {
        player: PlayerId,
        until_unix: i64,
        reason: String,
    },
}

/// "until <unix> (<UTC time>)", or "for good" for 0.
fn until_text(until_unix: i64) -> String {
    if until_unix == 0 {
        return "for good".into();
    }
    let days = until_unix.div_euclid(86_400);
    let secs = until_unix.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "until {until_unix} ({y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z)",
        secs / 3600,
        secs % 3600 / 60,
        secs % 60
    )
}

/// The proleptic Gregorian date of a day count since 1970-01-01 (Howard Hinnant's
/// `civil_from_days`, <https://howardhinnant.github.io/date_algorithms.html>).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = u32::try_from(doy - (153 * mp + 2) / 5 + 1).unwrap_or(1);
    let m = u32::try_from(if mp < 10 { mp + 3 } else { mp - 9 }).unwrap_or(1);
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

impl Rejection {
    /// Bad input: names the field and the rule.
    pub fn invalid(field: impl Into<String>, rule: impl Into<String>) -> Self {
        Self::Invalid(FieldError::new(field, rule))
    }

    /// A refusal for `match_id`.
    pub fn for_match(match_id: &MatchId, refusal: MatchRefusal) -> Self {
        Self::Match {
            match_id: match_id.clone(),
            refusal,
        }
    }
}

/// Why a match refused a request.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MatchRefusal {
    #[error("has a result being applied")]
    ResultInFlight,
    #[error("is already completed")]
    Completed,
    /// A repeated report of a match whose acknowledgement was trimmed: the result stays
    /// applied once.
    #[error(
        "was completed and its result applied; its acknowledgement is older than [results] \
         ack_retention_seconds and no longer kept, so this report is refused"
    )]
    AckTrimmed,
    /// A report of a match that is not live, formed longer ago than the acknowledgement
    /// retention: any result it had was applied once and its acknowledgement is gone.
    #[error(
        "is not live and formed longer ago than [results] ack_retention_seconds: if it was \
         completed, its result was applied and its acknowledgement is no longer kept"
    )]
    PastAckRetention,
    #[error("was cancelled; it has no result")]
    Cancelled,
    #[error("is waiting for its players to accept; it has not started")]
    AwaitingReadyCheck,
    #[error("passed its ready-check; only its game server can cancel it now")]
    PassedReadyCheck,
    #[error("is not running on a game server (it is {0})")]
    NotRunning(&'static str),
    #[error("kept changing while its result was computed; report it again")]
    KeptChanging,
    #[error("belongs to a queue that is no longer configured")]
    QueueGone,
    /// A repeated report that gives another outcome than the one applied: the result stays as
    /// first applied. `field` is the one that differs; `applied` what the applied report said.
    #[error(
        "was completed with {applied}; this report's {field} differ, and a result is applied \
         once: a repeat must report the same"
    )]
    OtherReport {
        field: &'static str,
        applied: String,
    },
}

/// Why a ticket refused a request.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TicketRefusal {
    #[error("is already MATCHED; cancel the match instead")]
    AlreadyMatched,
    #[error("has no ready-check for match {match_id} (the ticket is {state})")]
    NoReadyCheck {
        match_id: MatchId,
        state: &'static str,
    },
}

/// Why a party refused a request.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PartyRefusal {
    #[error("already has player {0}, who must leave it first")]
    HasPlayer(PlayerId),
    #[error("is full ({0} members, [parties] max_members)")]
    Full(u32),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ban_names_its_end_in_unix_seconds_and_utc() {
        assert_eq!(until_text(0), "for good");
        assert_eq!(until_text(1), "until 1 (1970-01-01T00:00:01Z)");
        // 2000-02-29 is a leap day; 951782400 is its midnight (date -d 2000-02-29 +%s, UTC).
        assert_eq!(
            until_text(951_782_400 + 3_661),
            "until 951786061 (2000-02-29T01:01:01Z)"
        );
        assert_eq!(
            until_text(4_102_444_800),
            "until 4102444800 (2100-01-01T00:00:00Z)"
        );
        let r = Rejection::Banned {
            player: PlayerId::new("p1"),
            until_unix: 0,
            reason: "cheating".into(),
        };
        assert_eq!(r.to_string(), "player p1 is banned for good: cheating");
    }
}

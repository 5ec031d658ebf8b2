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

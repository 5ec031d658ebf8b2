//! Ticket builders shared by the matching tests.

use super::Ticket;
use crate::ids::{PlayerId, TicketId};

/// A solo ticket rated `rating` (deviation 50) that entered at `entered_at`.
pub(crate) fn solo(id: &str, rating: f64, entered_at: f64) -> Ticket {
    party(id, &[rating], entered_at)
}

/// A party ticket with one member per rating.
pub(crate) fn party(id: &str, ratings: &[f64], entered_at: f64) -> Ticket {
    Ticket {
        id: TicketId::new(id),
        players: (0..ratings.len())
            .map(|i| PlayerId::new(format!("{id}.{i}")))
            .collect(),
        skills: ratings.iter().map(|&r| (r, 50.0)).collect(),
        party_skill: None,
        entered_at,
        region_latency_ms: Vec::new(),
        roles: Vec::new(),
        attributes: Default::default(),
        avoid: Vec::new(),
    }
}

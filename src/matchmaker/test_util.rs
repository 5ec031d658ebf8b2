//! What the loop's tests share: tickets entered the way `EnterQueue` enters them.

use super::{Command, Loop};
use crate::ids::{PlayerId, TicketId};
use crate::matching;
use crate::state::State;

/// Enters a solo ticket for `player` in 1v1 as `EnterQueue` enters a solo player's (no party
/// record or party clock to keep): created, stored, then sent to the loop.
pub(super) async fn enter(lp: &mut Loop, player: &str) -> TicketId {
    enter_in(lp, "1v1", player).await
}

/// As [`enter`], in `queue`.
pub(super) async fn enter_in(lp: &mut Loop, queue: &str, player: &str) -> TicketId {
    let state = lp.state.clone();
    let queue = state.queue("queue", queue).unwrap();
    let id = TicketId::new(format!("t-{player}"));
    let now = lp.clock.now();
    let players = vec![PlayerId::new(player)];
    let (slot, skills) = state
        .create_ticket(&queue, players.clone(), id.clone(), now)
        .unwrap();
    let entry = matching::Ticket {
        id: id.clone(),
        players,
        skills: skills.iter().map(|s| (s.mean, s.deviation)).collect(),
        party_skill: None,
        entered_at: now,
        region_latency_ms: Vec::new(),
        roles: Vec::new(),
        attributes: Default::default(),
        avoid: Vec::new(),
    };
    state.persist_ticket(&slot, &entry, now).await.unwrap();
    lp.handle(Command::Enter {
        ticket: slot,
        entry,
    });
    id
}

/// The ids of the tickets the store holds as waiting.
pub(super) fn stored(state: &State) -> Vec<TicketId> {
    let tickets = state.store().load_tickets().unwrap();
    tickets.into_iter().map(|t| t.ticket_id).collect()
}

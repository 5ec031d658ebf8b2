//! What the state's tests share: a state on an in-memory store, and a 1v1 match formed in it.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::{Assignment, MatchSlot, State, TicketSlot};
use crate::ids::{MatchId, PlayerId, TicketId};

/// A state on an in-memory store with the default queues.
pub(crate) fn state() -> State {
    state_with("")
}

/// A state on an in-memory store with the default config and `toml` over it.
pub(crate) fn state_with(toml: &str) -> State {
    let config = Arc::new(crate::config::Config::from_toml_str(toml).unwrap());
    let store: crate::store::Store = Arc::new(crate::store::MemoryStore::default());
    State::load(config, store).unwrap()
}

/// A FORMED 1v1 match `match_id` between `a` and `b` (tickets `t-a`, `t-b`), on `server`.
pub(crate) fn formed_1v1(
    state: &State,
    match_id: &str,
    a: &str,
    b: &str,
    server: &str,
) -> Arc<MatchSlot> {
    form_1v1(state, match_id, a, b, server, None)
}

/// As [`formed_1v1`], in its ready-check of `ready_check` seconds when that is given.
pub(crate) fn form_1v1(
    state: &State,
    match_id: &str,
    a: &str,
    b: &str,
    server: &str,
    ready_check: Option<f64>,
) -> Arc<MatchSlot> {
    let queue = state.queue("queue", "1v1").unwrap();
    let tickets: Vec<Arc<TicketSlot>> = [a, b]
        .iter()
        .map(|p| {
            let id = TicketId::new(format!("t-{p}"));
            state
                .create_ticket(&queue, vec![PlayerId::new(*p)], id, 0.0)
                .unwrap()
                .0
        })
        .collect();
    state.form_match(
        &tickets,
        Assignment {
            match_id: MatchId::new(match_id),
            queue: queue.id.clone(),
            teams: vec![vec![PlayerId::new(a)], vec![PlayerId::new(b)]],
            win_probability: vec![0.5, 0.5],
            region: None,
            server_address: server.into(),
            parties: vec![],
            backfill: vec![vec![], vec![]],
            left: vec![],
            attributes: Default::default(),
        },
        1.0,
        0.0,
        ready_check,
        BTreeMap::new(),
    )
}

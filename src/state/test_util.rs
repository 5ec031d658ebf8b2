//! What the state's tests share: a state on an in-memory store, a 1v1 match formed in it, and
//! hooks that run a test's code at fixed points of the state's methods.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

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

/// A state with the default config on `store`.
pub(crate) fn state_on(store: crate::store::Store) -> State {
    let config = Arc::new(crate::config::Config::from_toml_str("").unwrap());
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

/// The first team of `m` wins it: journaled as entry 1, then applied.
pub(crate) fn win(state: &State, m: &MatchSlot) {
    let entry = state
        .prepare_result(m, &[1, 2], &[], &BTreeMap::new(), &[])
        .unwrap()
        .entry;
    state
        .store()
        .append_journal(1, std::slice::from_ref(&entry))
        .unwrap();
    state.apply_result(m, &entry);
}

/// Code a test runs once, at a fixed point of a state method: another call made there lands
/// between two steps of the first, the interleaving a concurrent caller could produce.
#[derive(Default)]
pub(crate) struct Hook(Mutex<Option<Box<dyn FnOnce() + Send>>>);

impl Hook {
    /// Runs `f` the next time the point is reached.
    pub(crate) fn set(&self, f: impl FnOnce() + Send + 'static) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = Some(Box::new(f));
    }

    /// Runs what was set, if anything (with the hook's own lock let go first).
    pub(crate) fn run(&self) {
        let f = self.0.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(f) = f {
            f();
        }
    }
}

/// The points of the state a test can hook.
#[derive(Default)]
pub(crate) struct Hooks {
    /// [`State::try_allocate`], once it has let go of the server registry.
    pub(crate) allocated: Hook,
    /// [`State::register_server`], just before it takes the server registry.
    pub(crate) registering: Hook,
    /// [`State::export_ids`], between the walk that builds a pool's id order and its install.
    pub(crate) export_walked: Hook,
}

/// A state loaded, with `toml` over the default config, from a store that holds 1v1 matches,
/// one per `(match_id, formed_unix)`, FORMED (no game server took them yet) when `server` is
/// empty, else ALLOCATED to it, as a restart or a new owner of the queues finds them; and the
/// matches its recovery restored at `now` on the loop's clock.
pub(crate) fn restored_1v1s(
    toml: &str,
    server: &str,
    matches: &[(&str, f64)],
    now: f64,
) -> (State, Vec<Arc<MatchSlot>>) {
    let config = Arc::new(crate::config::Config::from_toml_str(toml).unwrap());
    let store: crate::store::Store = Arc::new(crate::store::MemoryStore::default());
    let before = State::load(config.clone(), store.clone()).unwrap();
    let encoded: Vec<Vec<u8>> = matches
        .iter()
        .enumerate()
        .map(|(i, &(match_id, formed_unix))| {
            let (a, b) = (format!("a{i}"), format!("b{i}"));
            let m = formed_1v1(&before, match_id, &a, &b, server);
            let (_, mut stored) = before.stored_match(&m);
            stored.formed_unix = formed_unix;
            crate::store::encode_match(&stored).unwrap()
        })
        .collect();
    store.put_segments(&[(1, &encoded)], &[]).unwrap();
    let state = State::load(config, store).unwrap();
    let (_, restored, _) = state.recover(now).unwrap();
    (state, restored)
}

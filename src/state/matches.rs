//! Matches from formed to ended: allocation to a game server, cancel, the allocation timeout,
//! and releasing their players.

use std::collections::BTreeMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, MutexGuard};

use super::{
    Placement, PlayerStatus, ReadyView, Release, ServerHandle, State, TicketSlot, TicketState,
    TicketView, segments, unix_now,
};
use crate::ids::{MatchId, PlayerId, QueueId, TicketId};
use crate::records::ResultAck;
use crate::rejection::{MatchRefusal, Rejection};

/// A formed match as clients and servers see it.
#[derive(Clone, Debug, PartialEq)]
pub struct Assignment {
    pub match_id: MatchId,
    pub queue: QueueId,
    pub teams: Vec<Vec<PlayerId>>,
    pub win_probability: Vec<f64>,
    pub region: Option<String>,
    /// Empty until a game server took the match.
    pub server_address: String,
    /// Pre-made parties (2+ players who queued together), for party skill.
    pub parties: Vec<Vec<PlayerId>>,
    /// Per team, the players added by backfill so far (empty teams for a new match). They are
    /// also in `teams`.
    pub backfill: Vec<Vec<PlayerId>>,
    /// Players who left (named by `RequestBackfill`); still in `teams`, rated as abandons.
    pub left: Vec<PlayerId>,
    /// The values the match was formed under (its queue's match rules); empty without rules.
    pub attributes: std::sync::Arc<crate::matching::Attributes>,
}

/// Match lifecycle: ready-check (if the queue has one) → formed → allocated → completing →
/// completed, or cancelled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MatchPhase {
    /// Formed in a queue with a ready-check; waits for every ticket to accept before it goes to
    /// a game server (not persisted: a restart ends it, its players are idle again).
    ReadyCheck,
    Formed,
    Allocated,
    Started,
    /// A result passed validation and is being journaled: nothing else may change the match
    /// (backfill, cancel, dissolve) until it lands, or fails and the phase goes back.
    Completing,
    Completed,
    Cancelled,
}

impl MatchPhase {
    /// The phase's name as the proto spells it.
    pub fn name(self) -> &'static str {
        match self {
            Self::ReadyCheck => "READY_CHECK",
            Self::Formed => "FORMED",
            Self::Allocated => "ALLOCATED",
            Self::Started => "STARTED",
            Self::Completing => "COMPLETING",
            Self::Completed => "COMPLETED",
            Self::Cancelled => "CANCELLED",
        }
    }
}

/// What [`State::try_allocate`] did with a formed match.
#[derive(Debug)]
pub enum Allocation {
    /// Placed on a server: persist the match, then deliver the placement.
    Placed(Placement),
    /// No longer waiting for a server (a result, a cancel or a timeout ended it).
    Ended,
    /// No connected server has room; try again next tick.
    NoServer,
}

/// A formed match.
#[derive(Debug)]
pub struct MatchSlot {
    pub id: MatchId,
    pub queue: QueueId,
    pub quality: f64,
    /// Seconds on the matchmaker clock when it formed (for a restored match, as long before its
    /// restore as its wall-clock age then): the match timeout counts from here.
    pub formed_at: f64,
    /// Unix seconds when it formed: what is stored and reported, never compared with a timeout.
    pub formed_unix: f64,
    pub(super) inner: Mutex<MatchInner>,
    /// The store segment holding its newest copy ([`segments::NOT_STORED`] before a server took
    /// it, [`segments::ENDED`] after). Changed only under `Inner::segments`.
    pub(super) segment: AtomicU64,
    /// The number of the newest copy written ([`MatchInner::copies`]); changed only under
    /// `Inner::segments`, so an older copy that reaches the store later is not written.
    pub(super) written: AtomicU64,
    /// Set once, by the one report that applies the result; duplicates wait on it and get the
    /// same acknowledgement.
    pub result: tokio::sync::OnceCell<Arc<ResultAck>>,
}

#[derive(Debug)]
pub(super) struct MatchInner {
    pub(super) phase: MatchPhase,
    pub(super) assignment: Arc<Assignment>,
    /// The tickets whose players are in the match (backfill adds more).
    pub(super) tickets: Vec<TicketId>,
    /// Roles each player declared, for backfill under role rules (empty in queues without
    /// roles; a player who declared none counts as "any role"). Stored with the match.
    pub(super) roles: BTreeMap<PlayerId, Vec<String>>,
    /// Unix seconds of its game server's `StartMatch` (stored with the match).
    pub(super) started_unix: Option<f64>,
    /// Unix seconds (store's clock) when a backfill request last opened slots (stored with the
    /// match, so a restore opens them again).
    pub(super) backfill_opened_unix: Option<f64>,
    /// Copies of it taken for the store so far ([`State::stored_match`] numbers each).
    pub(super) copies: u64,
}

impl MatchSlot {
    pub(super) fn lock(&self) -> MutexGuard<'_, MatchInner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Current phase.
    pub fn phase(&self) -> MatchPhase {
        self.lock().phase
    }

    /// Current assignment (teams, probabilities, server once allocated).
    pub fn assignment(&self) -> Arc<Assignment> {
        self.lock().assignment.clone()
    }

    /// The tickets whose players are in the match.
    pub fn tickets(&self) -> Vec<TicketId> {
        self.lock().tickets.clone()
    }

    /// Unix seconds (the store's clock) when a backfill request last opened slots of it.
    pub fn backfill_opened_unix(&self) -> Option<f64> {
        self.lock().backfill_opened_unix
    }
}

impl State {
    /// Records a formed match: its players move from queued to in-match and its tickets to
    /// MATCHED, all under the players' locks. Called only by the matchmaker loop.
    /// With `ready_check` the match starts in [`MatchPhase::ReadyCheck`] and its tickets show
    /// that progress; `roles` are the players' declared roles (for backfill).
    pub fn form_match(
        &self,
        tickets: &[Arc<TicketSlot>],
        assignment: Assignment,
        quality: f64,
        now: f64,
        ready_check: Option<f64>,
        roles: BTreeMap<PlayerId, Vec<String>>,
    ) -> Arc<MatchSlot> {
        let assignment = Arc::new(assignment);
        let slot = Arc::new(MatchSlot {
            id: assignment.match_id.clone(),
            queue: assignment.queue.clone(),
            quality,
            formed_at: now,
            // The store's clock (Redis's in a cluster): a restore, possibly on another node,
            // dates the match by it.
            formed_unix: self.inner.store.now_unix(),
            inner: Mutex::new(MatchInner {
                phase: if ready_check.is_some() {
                    MatchPhase::ReadyCheck
                } else {
                    MatchPhase::Formed
                },
                assignment: assignment.clone(),
                tickets: tickets.iter().map(|t| t.id.clone()).collect(),
                roles,
                started_unix: None,
                backfill_opened_unix: None,
                copies: 0,
            }),
            segment: AtomicU64::new(segments::NOT_STORED),
            written: AtomicU64::new(0),
            result: tokio::sync::OnceCell::new(),
        });
        let ids: Vec<PlayerId> = tickets
            .iter()
            .flat_map(|t| t.players.iter().cloned())
            .collect();
        let slots = self.sorted_slots(&ids);
        let mut guards = Self::lock_players(&slots);
        self.inner.matches.insert(slot.id.clone(), slot.clone());
        for guard in &mut guards {
            guard.status = PlayerStatus::InMatch(slot.id.clone());
        }
        drop(guards);
        self.emit([super::match_event(
            crate::store::EventKind::MatchFormed,
            &assignment,
            slot.formed_unix,
            "",
        )]);
        let required = tickets.len() as u32;
        for ticket in tickets {
            ticket.publish(TicketView {
                state: TicketState::Matched,
                assignment: Some(assignment.clone()),
                ready: ready_check.map(|seconds_left| ReadyView {
                    seconds_left,
                    accepted: 0,
                    required,
                    accepted_by_ticket: false,
                }),
                ..TicketView::searching(now - ticket.entered_at, String::new())
            });
        }
        slot
    }

    /// A match by id.
    pub fn match_slot(&self, id: &MatchId) -> Result<Arc<MatchSlot>, Rejection> {
        self.inner
            .matches
            .get(id)
            .map(|r| r.value().clone())
            .ok_or_else(|| Rejection::NotFound {
                what: "match",
                id: id.to_string(),
            })
    }

    /// The matches the server holds now (ready-check to completing), newest first: `(how many
    /// there are, the newest `limit` of `queue` or of every queue)`. One pass over the map, for
    /// the operator console.
    pub fn live_matches(&self, queue: Option<&str>, limit: usize) -> (usize, Vec<Arc<MatchSlot>>) {
        let mut all: Vec<Arc<MatchSlot>> = self
            .inner
            .matches
            .iter()
            .filter(|e| queue.is_none_or(|q| e.value().queue.as_str() == q))
            .map(|e| e.value().clone())
            .collect();
        let total = all.len();
        all.sort_by(|a, b| b.formed_unix.total_cmp(&a.formed_unix));
        all.truncate(limit);
        (total, all)
    }

    /// Places a FORMED match on a registered server of its region (round-robin), reserving room
    /// in the server's stream. The caller persists the allocation ([`State::persist_matches`])
    /// and then delivers it ([`State::deliver_when_durable`]).
    pub fn try_allocate(&self, m: &Arc<MatchSlot>) -> Allocation {
        let assignment = {
            let inner = m.lock();
            if inner.phase != MatchPhase::Formed {
                return Allocation::Ended;
            }
            inner.assignment.clone()
        };
        // The match is marked allocated before the registry is let go: a server registering
        // again under the same address (`register_server`, which looks for the matches to send
        // again while it holds the registry) either finds it allocated to the stream it
        // replaces, or is the stream it is placed on. Lock order: the registry, then a match.
        let placement = {
            let mut registry = self.inner.servers.lock().unwrap_or_else(|p| p.into_inner());
            let before = registry.len();
            let chosen = registry.offer(&assignment);
            // `offer` drops disconnected servers first; the gauge follows when it did (a lookup
            // in the metrics registry per allocated match otherwise).
            if registry.len() != before {
                self.servers_connected_gauge().set(registry.len() as f64);
            }
            let Some(placement) = chosen else {
                return Allocation::NoServer;
            };
            let mut inner = m.lock();
            if inner.phase != MatchPhase::Formed {
                // A result or a cancel came in meanwhile: nothing to send, room given back.
                drop(inner);
                registry.release(&placement.assignment.server_address);
                return Allocation::Ended;
            }
            inner.phase = MatchPhase::Allocated;
            inner.assignment = placement.assignment.clone();
            drop(inner);
            let address = &placement.assignment.server_address;
            registry.placed.add(address, m.clone(), |m| self.is_live(m));
            placement
        };
        #[cfg(test)]
        self.inner.hooks.allocated.run();
        let allocated = placement.assignment.clone();
        self.emit([super::match_event(
            crate::store::EventKind::MatchAllocated,
            &allocated,
            unix_now(),
            "",
        )]);
        // The tickets learn their server with it, once the match is durable
        // (`deliver_when_durable`).
        Allocation::Placed(placement)
    }

    /// Tells a placed match's tickets their server: their last update, sent once the match is
    /// durable, so a player never goes to a server that a crash kept from getting the match. A
    /// ticket that is no longer in the match (put back in its queue meanwhile) is left alone.
    fn publish_placed(&self, allocated: &Arc<Assignment>) {
        let Ok(m) = self.match_slot(&allocated.match_id) else {
            return;
        };
        for id in m.tickets() {
            if let Ok(ticket) = self.ticket(&id) {
                let mut view = ticket.view();
                view.assignment = Some(allocated.clone());
                view.ready = None;
                ticket.publish_over(view, |now| {
                    now.state == TicketState::Matched
                        && now
                            .assignment
                            .as_ref()
                            .is_some_and(|a| a.match_id == allocated.match_id)
                });
            }
        }
    }

    /// Hands this tick's placements to their servers once everything written so far (their
    /// matches among it) is durable: a game server never gets a match a crash could lose. The
    /// events emitted so far (these matches formed and allocated among them) are written first,
    /// so they are in the same flush: a match a server got never loses its events either. The
    /// flush runs on the runtime, so the loop does not wait for the disk.
    ///
    /// When the flush fails, no server gets them and no ticket learns its server: the room
    /// they took in their servers' streams is given back, and their ids go to `undelivered`,
    /// for the matchmaker to dissolve them and requeue their tickets. A fenced flush (another
    /// node owns the queues now, and never saw these matches) sends nothing there: this engine
    /// is stopping, and the next owner matches the tickets again.
    pub fn deliver_when_durable(
        &self,
        placements: Vec<Placement>,
        runtime: &tokio::runtime::Handle,
        undelivered: tokio::sync::mpsc::UnboundedSender<Vec<MatchId>>,
    ) {
        if placements.is_empty() {
            return;
        }
        let store = self.inner.store.clone();
        let (events, taken) = self.take_emitted();
        let written = match store.append_events(&events) {
            Ok(last) => Some(last),
            Err(e) => {
                // Left to the writer task, which tries them once more.
                tracing::error!(error = %e, "could not write the events of allocated matches");
                self.emit(events);
                None
            }
        };
        let state = self.clone();
        runtime.spawn(async move {
            let flushed = store.flush_async().await;
            if let (Ok(()), Some(last)) = (&flushed, written) {
                state.events_durable(last);
            }
            drop(taken);
            match flushed {
                Ok(()) => {
                    for p in placements {
                        state.publish_placed(&p.assignment);
                        p.deliver();
                    }
                }
                Err(e) => {
                    let ids = state.undeliverable(placements, &e);
                    if !matches!(e, crate::store::StoreError::Fenced) {
                        let _ = undelivered.send(ids);
                    }
                }
            }
        });
    }

    /// Gives back the room `placements` took (their flush failed with `e`); their match ids.
    /// A fenced flush is no store failure: another node owns the queues now. Otherwise the
    /// server capacity is given back when the matchmaker dissolves the match
    /// ([`State::requeue_match`]).
    fn undeliverable(
        &self,
        placements: Vec<Placement>,
        e: &crate::store::StoreError,
    ) -> Vec<MatchId> {
        let ids: Vec<MatchId> = placements
            .iter()
            .map(|p| p.assignment.match_id.clone())
            .collect();
        if matches!(e, crate::store::StoreError::Fenced) {
            tracing::warn!(error = %e, matches = ids.len(), "allocated matches not stored: another node owns the queues; not sent to their servers");
            let mut registry = self.inner.servers.lock().unwrap_or_else(|p| p.into_inner());
            for p in &placements {
                registry.release(&p.assignment.server_address);
            }
        } else {
            tracing::error!(error = %e, matches = ids.len(), "could not flush allocated matches; not sent to their servers, their tickets go back to their queues");
            crate::telemetry::store_error("persist_matches");
        }
        // Dropping a placement frees its room in the stream, unsent.
        drop(placements);
        ids
    }

    /// Whether matches allocated to `address` wait unstarted: what registering it would send
    /// again.
    pub fn has_unstarted_on(&self, address: &str) -> bool {
        let mut registry = self.inner.servers.lock().unwrap_or_else(|p| p.into_inner());
        registry
            .placed
            .live_on(address, |m| self.is_live(m))
            .iter()
            .any(|m| {
                let inner = m.lock();
                inner.phase == MatchPhase::Allocated && inner.assignment.server_address == address
            })
    }

    /// Registers a game server; matches flow into the returned receiver. Returned with it:
    /// the matches allocated to this address that have not started, to be sent again (the
    /// server connecting again may have lost them with its earlier stream, or with a cluster
    /// owner that stopped). The live matches it holds count against its capacity from the
    /// start: the stream may be new, its matches are not.
    pub fn register_server(
        &self,
        address: String,
        region: String,
        capacity: u32,
    ) -> (
        tokio::sync::mpsc::Receiver<Arc<Assignment>>,
        Vec<Arc<Assignment>>,
    ) {
        let (tx, rx) = tokio::sync::mpsc::channel(self.inner.config.server.serve_matches_buffer);
        #[cfg(test)]
        self.inner.hooks.registering.run();
        // The matches to send again are looked for holding the registry, which `try_allocate`
        // holds until the match it places is marked allocated: every match placed on the
        // stream replaced here is found, and every later one goes to the new stream.
        let mut registry = self.inner.servers.lock().unwrap_or_else(|p| p.into_inner());
        let mut held = 0u32;
        let mut unstarted = Vec::new();
        for m in registry.placed.live_on(&address, |m| self.is_live(m)) {
            let (phase, assignment) = {
                let inner = m.lock();
                (inner.phase, inner.assignment.clone())
            };
            if assignment.server_address != address {
                continue;
            }
            match phase {
                MatchPhase::Allocated => {
                    held += 1;
                    unstarted.push(assignment);
                }
                MatchPhase::Started | MatchPhase::Completing => held += 1,
                _ => {}
            }
        }
        let mut server = ServerHandle::new(address, region, capacity, tx);
        server.assigned = held;
        registry.register(server);
        self.servers_connected_gauge().set(registry.len() as f64);
        (rx, unstarted)
    }

    /// A `ServeMatches` stream ended (its game server went, or the engine closed it): the
    /// gauge of connected servers counts the streams still open. Not on a cluster engine whose
    /// lease ran out: its node zeroes the engine's gauges, and the next owner counts.
    pub fn server_stream_ended(&self) {
        if !self.may_act() {
            return;
        }
        let mut registry = self.inner.servers.lock().unwrap_or_else(|p| p.into_inner());
        let connected = registry.prune_closed();
        self.servers_connected_gauge().set(connected as f64);
    }

    /// The gauge of this engine's open `ServeMatches` streams.
    fn servers_connected_gauge(&self) -> metrics::Gauge {
        crate::telemetry::engine_gauge(crate::telemetry::SERVERS_CONNECTED, self.shard())
    }

    /// Whether `m` is still live (not ended and forgotten).
    fn is_live(&self, m: &Arc<MatchSlot>) -> bool {
        self.inner
            .matches
            .get(&m.id)
            .is_some_and(|e| Arc::ptr_eq(e.value(), m))
    }

    /// Notes a restored match placed on a server before (a new owner of the queues): the
    /// server finds it when it registers again.
    pub(super) fn note_placed(&self, m: &Arc<MatchSlot>, address: &str) {
        if address.is_empty() {
            return;
        }
        let mut registry = self.inner.servers.lock().unwrap_or_else(|p| p.into_inner());
        registry.placed.add(address, m.clone(), |m| self.is_live(m));
    }

    /// Forgets the ended matches noted on addresses whose server is gone (the sweep): a server
    /// that never comes back leaves nothing.
    pub fn prune_placed(&self) {
        let mut registry = self.inner.servers.lock().unwrap_or_else(|p| p.into_inner());
        registry.prune_placed(|m| self.is_live(m));
    }

    /// Drops every server stream (graceful shutdown closes them this way).
    pub fn close_server_streams(&self) {
        self.inner.closing.cancel();
        self.inner
            .servers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
    }

    /// Cancels every live match formed more than `timeout` seconds before `now` (on the
    /// matchmaker clock, so a step of the wall clock cancels nothing) that has no result.
    /// Returns how many. A match in its ready-check is left to the matchmaker, whose
    /// ready-check deadline ends it (requeueing the tickets that accepted).
    pub fn cancel_stale_matches(&self, now: f64, timeout: f64) -> usize {
        let stale: Vec<Arc<MatchSlot>> = self
            .inner
            .matches
            .iter()
            .filter(|e| now - e.value().formed_at > timeout)
            .filter(|e| e.value().phase() != MatchPhase::ReadyCheck)
            .map(|e| e.value().clone())
            .collect();
        stale
            .iter()
            .filter(|m| {
                self.end_live_match(m, "match timeout: no result", Canceller::MatchTimeout)
                    .is_ok()
            })
            .count()
    }

    /// Cancels a live match (a game server's `CancelMatch`): no result, players free again.
    /// Refuses a match in its ready-check: only the matchmaker ends one (a decline, its
    /// deadline, or [`State::requeue_match`]), since it holds the ready-check and the tickets'
    /// queue entries and must finish or requeue every ticket.
    pub fn cancel_match(&self, m: &MatchSlot, reason: &str) -> Result<(), Rejection> {
        self.end_live_match(m, reason, Canceller::GameServer)
    }

    /// Ends a live match with no result, its tickets CANCELLED with `by`'s reason.
    fn end_live_match(&self, m: &MatchSlot, reason: &str, by: Canceller) -> Result<(), Rejection> {
        let assignment = {
            let mut inner = m.lock();
            match inner.phase {
                MatchPhase::ReadyCheck => {
                    return Err(Rejection::for_match(
                        &m.id,
                        MatchRefusal::AwaitingReadyCheck,
                    ));
                }
                MatchPhase::Completed => {
                    return Err(Rejection::for_match(&m.id, MatchRefusal::Completed));
                }
                MatchPhase::Completing => {
                    return Err(Rejection::for_match(&m.id, MatchRefusal::ResultInFlight));
                }
                MatchPhase::Cancelled => return Ok(()),
                _ => {}
            }
            inner.phase = MatchPhase::Cancelled;
            inner.assignment.clone()
        };
        // In the players' histories and the event log before they are free: a player's
        // erasure waits for them to be, and must find the record and the event to take them
        // out.
        self.record_cancelled(m, &assignment);
        self.emit([super::match_event(
            crate::store::EventKind::MatchCancelled,
            &assignment,
            unix_now(),
            reason,
        )]);
        self.release_players(m, &assignment, |t| Release::End {
            state: TicketState::Cancelled,
            reason: by.ticket_reason().into(),
            wait_seconds: t.view().wait_seconds,
        });
        if !assignment.server_address.is_empty() {
            self.inner
                .servers
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .release(&assignment.server_address);
        }
        self.forget_stored_match(m, false);
        self.inner.matches.remove(&m.id);
        tracing::info!(match_id = %m.id, reason, "match cancelled");
        metrics::counter!(crate::telemetry::MATCHES_CANCELLED, "queue" => m.queue.to_string(), "reason" => by.label())
            .increment(1);
        Ok(())
    }

    /// Dissolves a match no server took in time. Its tickets go back to SEARCHING (the caller
    /// puts them at the front of their pool); players of tickets no longer known go idle.
    /// Returns false if the match was allocated meanwhile.
    pub fn dissolve_unallocated(&self, m: &MatchSlot, now: f64) -> bool {
        let assignment = {
            let mut inner = m.lock();
            if inner.phase != MatchPhase::Formed {
                return false;
            }
            inner.phase = MatchPhase::Cancelled;
            inner.assignment.clone()
        };
        // Emitted before the players are free (see `cancel_match`).
        self.emit([super::match_event(
            crate::store::EventKind::MatchCancelled,
            &assignment,
            unix_now(),
            "no game server took the match in time",
        )]);
        self.release_players(m, &assignment, |t| Release::Requeue {
            reason: "no game server took the match in time; back at the front of the queue".into(),
            wait_seconds: now - t.entered_at,
        });
        self.forget_stored_match(m, false);
        self.inner.matches.remove(&m.id);
        metrics::counter!(crate::telemetry::MATCHES_CANCELLED, "queue" => m.queue.to_string(), "reason" => "allocation_timeout")
            .increment(1);
        true
    }

    /// Frees a match's players, ticket by ticket as `decide` says: back to SEARCHING on their
    /// ticket (the caller puts the ticket back in its pool) or ended, players idle.
    pub(super) fn release_players(
        &self,
        m: &MatchSlot,
        a: &Assignment,
        decide: impl Fn(&TicketSlot) -> Release,
    ) {
        let tickets: Vec<(Arc<TicketSlot>, Release)> = m
            .tickets()
            .iter()
            .filter_map(|t| self.ticket(t).ok())
            .map(|t| {
                let r = decide(&t);
                (t, r)
            })
            .collect();
        let ids: Vec<PlayerId> = a.teams.iter().flatten().cloned().collect();
        let slots = self.sorted_slots(&ids);
        let mut guards = Self::lock_players(&slots);
        for (slot, guard) in slots.iter().zip(&mut guards) {
            if guard.status != PlayerStatus::InMatch(m.id.clone()) {
                continue;
            }
            let own_ticket = tickets.iter().find(|(t, _)| t.players.contains(&slot.id));
            guard.status = match own_ticket {
                Some((t, Release::Requeue { .. })) => PlayerStatus::Queued(t.id.clone()),
                _ => PlayerStatus::Idle,
            };
        }
        drop(guards);
        self.note_idle(&ids);
        for (t, release) in tickets {
            t.publish(match release {
                Release::Requeue {
                    reason,
                    wait_seconds,
                } => TicketView::searching(wait_seconds, reason),
                Release::End {
                    state,
                    reason,
                    wait_seconds,
                } => TicketView {
                    state,
                    reason,
                    ..TicketView::searching(wait_seconds, String::new())
                },
            });
        }
    }
}

/// Who ended a live match without a result: its tickets' reason and the metric's label say so.
#[derive(Clone, Copy)]
enum Canceller {
    /// Its game server or an admin (`CancelMatch`).
    GameServer,
    /// `server.match_timeout_seconds` passed with no result.
    MatchTimeout,
}

impl Canceller {
    fn ticket_reason(self) -> &'static str {
        match self {
            Self::GameServer => "the match was cancelled by its game server",
            Self::MatchTimeout => "the match timed out with no result",
        }
    }

    /// The `reason` label of `matchmaker_matches_cancelled_total`.
    fn label(self) -> &'static str {
        match self {
            Self::GameServer => "server",
            Self::MatchTimeout => "match_timeout",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::TicketId;

    type Registered = (
        tokio::sync::mpsc::Receiver<Arc<Assignment>>,
        Vec<Arc<Assignment>>,
    );

    /// The matches a stream registered as `registered` gets: those sent again with it, then
    /// what was delivered to it.
    fn received((mut stream, again): Registered) -> Vec<MatchId> {
        let mut ids: Vec<MatchId> = again.iter().map(|a| a.match_id.clone()).collect();
        while let Ok(a) = stream.try_recv() {
            ids.push(a.match_id.clone());
        }
        ids
    }

    /// A game server connecting again while the server still holds its old stream (the old
    /// connection is dead but not torn down yet), and a match allocated just as it registers:
    /// placed on the old stream right before the registration takes the registry.
    #[test]
    fn a_match_placed_on_the_old_stream_as_its_server_registers_again_is_sent_again() {
        let state = crate::state::test_util::state();
        let m = crate::state::test_util::formed_1v1(&state, "m-1", "a", "b", "");
        let _old = state.register_server("gs-1:7777".into(), String::new(), 1);
        let placed = Arc::new(Mutex::new(None));
        state.hooks().registering.set({
            let (state, m, placed) = (state.clone(), m.clone(), placed.clone());
            move || *placed.lock().unwrap() = Some(state.try_allocate(&m))
        });
        let new = state.register_server("gs-1:7777".into(), String::new(), 1);
        let Some(Allocation::Placed(placement)) = placed.lock().unwrap().take() else {
            panic!("the old stream had room");
        };
        assert_eq!(placement.assignment.server_address, "gs-1:7777");
        placement.deliver();
        assert_eq!(
            received(new),
            std::slice::from_ref(&m.id),
            "the new stream gets the match"
        );
        // It counts against the new stream's capacity of one.
        let other = crate::state::test_util::formed_1v1(&state, "m-2", "c", "d", "");
        assert!(matches!(state.try_allocate(&other), Allocation::NoServer));
    }

    /// As above, with the registration landing after the match was placed on the old stream
    /// and the registry let go, before anything else of the allocation.
    #[test]
    fn a_server_registering_again_as_a_match_is_placed_on_its_old_stream_gets_it_again() {
        let state = crate::state::test_util::state();
        let m = crate::state::test_util::formed_1v1(&state, "m-1", "a", "b", "");
        let _old = state.register_server("gs-1:7777".into(), String::new(), 0);
        let registered = Arc::new(Mutex::new(None));
        state.hooks().allocated.set({
            let (state, registered) = (state.clone(), registered.clone());
            move || {
                *registered.lock().unwrap() =
                    Some(state.register_server("gs-1:7777".into(), String::new(), 0));
            }
        });
        let Allocation::Placed(placement) = state.try_allocate(&m) else {
            panic!("the old stream had room");
        };
        placement.deliver();
        let new = registered
            .lock()
            .unwrap()
            .take()
            .expect("registered meanwhile");
        assert_eq!(m.phase(), MatchPhase::Allocated);
        assert_eq!(
            received(new),
            std::slice::from_ref(&m.id),
            "the new stream gets the match"
        );
    }

    #[tokio::test]
    async fn a_ticket_learns_its_server_only_once_its_match_is_durable() {
        let state = crate::state::test_util::state();
        let m = crate::state::test_util::formed_1v1(&state, "m-1", "a", "b", "");
        let (_matches, _again) = state.register_server("gs-1:7777".into(), String::new(), 0);
        let Allocation::Placed(placement) = state.try_allocate(&m) else {
            panic!("a server has room");
        };
        let ticket = state.ticket(&TicketId::new("t-a")).unwrap();
        let view = ticket.view();
        assert!(
            !view.is_final() && view.assignment.unwrap().server_address.is_empty(),
            "no server before the match is written"
        );
        let polled = state.active_ticket(&PlayerId::new("a"), 0.0).unwrap().1;
        assert!(
            polled.assignment.unwrap().server_address.is_empty(),
            "nor to a poll"
        );
        let (undelivered, mut requeue) = tokio::sync::mpsc::unbounded_channel();
        state.deliver_when_durable(
            vec![placement],
            &tokio::runtime::Handle::current(),
            undelivered,
        );
        assert!(
            requeue.recv().await.is_none(),
            "delivered, nothing to requeue"
        );
        assert!(ticket.view().is_final());
        let told = ticket.view().assignment.unwrap();
        assert_eq!(told.server_address, "gs-1:7777");
        let polled = state.active_ticket(&PlayerId::new("a"), 0.0).unwrap().1;
        assert_eq!(polled.assignment.unwrap().server_address, "gs-1:7777");
    }

    /// A match allocated on the only server (room for one), whose write then fails to flush
    /// as `how` says: what the server's stream got, and the ids sent to requeue.
    async fn allocated_unflushed(
        how: crate::store::FlushFailure,
    ) -> (State, Vec<MatchId>, Registered) {
        let memory = Arc::new(crate::store::MemoryStore::default());
        let state = crate::state::test_util::state_on(memory.clone());
        let m = crate::state::test_util::formed_1v1(&state, "m-1", "a", "b", "");
        let registered = state.register_server("gs-1:7777".into(), String::new(), 1);
        let Allocation::Placed(placement) = state.try_allocate(&m) else {
            panic!("the server has room");
        };
        memory.fail_flushes(Some(how));
        let (undelivered, mut requeue) = tokio::sync::mpsc::unbounded_channel();
        state.deliver_when_durable(
            vec![placement],
            &tokio::runtime::Handle::current(),
            undelivered,
        );
        let mut ids = Vec::new();
        while let Some(mut sent) = requeue.recv().await {
            ids.append(&mut sent);
        }
        memory.fail_flushes(None);
        (state, ids, registered)
    }

    #[tokio::test]
    async fn a_match_whose_write_does_not_flush_goes_to_no_server_and_no_ticket() {
        let (state, ids, registered) = allocated_unflushed(crate::store::FlushFailure::Disk).await;
        assert!(received(registered).is_empty(), "no server got it");
        for t in ["t-a", "t-b"] {
            let view = state.ticket(&TicketId::new(t)).unwrap().view();
            assert!(
                view.assignment.unwrap().server_address.is_empty(),
                "{t} was told no server"
            );
        }
        assert_eq!(ids, [MatchId::new("m-1")], "the matchmaker requeues it");
    }

    #[tokio::test]
    async fn a_match_the_store_fenced_goes_to_no_server_and_frees_its_room() {
        let (state, ids, (mut stream, again)) =
            allocated_unflushed(crate::store::FlushFailure::Fenced).await;
        assert!(
            again.is_empty() && stream.try_recv().is_err(),
            "no server got it"
        );
        let view = state.ticket(&TicketId::new("t-a")).unwrap().view();
        assert!(view.assignment.unwrap().server_address.is_empty());
        assert!(
            ids.is_empty(),
            "nothing to requeue: the engine stops, and the next owner has the tickets"
        );
        // The server's room for one match is free again.
        let other = crate::state::test_util::formed_1v1(&state, "m-2", "c", "d", "");
        assert!(matches!(state.try_allocate(&other), Allocation::Placed(_)));
    }

    #[test]
    fn a_match_the_match_timeout_cancels_tells_its_tickets_it_timed_out() {
        let state = crate::state::test_util::state();
        let late = crate::state::test_util::formed_1v1(&state, "m-late", "a", "b", "");
        let timeout = state.config().server.match_timeout_seconds;
        assert_eq!(
            state.cancel_stale_matches(late.formed_at + timeout + 1.0, timeout),
            1
        );
        for t in ["t-a", "t-b"] {
            let view = state.ticket(&TicketId::new(t)).unwrap().view();
            assert_eq!(view.state, TicketState::Cancelled, "{t}");
            assert_eq!(view.reason, "the match timed out with no result", "{t}");
        }
        assert_eq!(Canceller::MatchTimeout.label(), "match_timeout");
        // A game server's cancel keeps its own reason and label.
        let voided = crate::state::test_util::formed_1v1(&state, "m-void", "c", "d", "");
        state.cancel_match(&voided, "the map did not load").unwrap();
        let view = state.ticket(&TicketId::new("t-c")).unwrap().view();
        assert_eq!(view.reason, "the match was cancelled by its game server");
        assert_eq!(Canceller::GameServer.label(), "server");
    }

    #[test]
    fn the_match_timeout_cancels_a_late_match_but_leaves_one_in_its_ready_check() {
        let state = crate::state::test_util::state();
        let late = crate::state::test_util::formed_1v1(&state, "m-late", "a", "b", "");
        let checking =
            crate::state::test_util::form_1v1(&state, "m-ready", "c", "d", "", Some(30.0));
        let timeout = state.config().server.match_timeout_seconds;
        let now = late.formed_at.max(checking.formed_at) + timeout + 1.0;
        assert_eq!(state.cancel_stale_matches(now, timeout), 1);
        assert_eq!(
            state.ticket(&TicketId::new("t-a")).unwrap().view().state,
            TicketState::Cancelled
        );
        assert!(state.match_slot(&late.id).is_err());
        let still = state
            .match_slot(&checking.id)
            .expect("its ready-check ends it, at its own deadline");
        assert_eq!(still.phase(), MatchPhase::ReadyCheck);
        for t in ["t-c", "t-d"] {
            let view = state.ticket(&TicketId::new(t)).unwrap().view();
            assert_eq!(view.state, TicketState::Matched, "{t}");
            assert!(view.ready.is_some(), "{t} still shows its ready-check");
        }
        assert_eq!(
            state.cancel_match(&checking, "test").unwrap_err(),
            Rejection::for_match(&checking.id, MatchRefusal::AwaitingReadyCheck),
            "only the matchmaker's ready-check ends a match in its ready-check"
        );
        assert_eq!(still.phase(), MatchPhase::ReadyCheck);
    }
}

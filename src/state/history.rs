//! Match records: `StartMatch`, a cancel before the start that puts the tickets back in their
//! queues, the match history's records (written through the store with the result's journal
//! entry, or when a match a game server took is cancelled), and what `GetMatch` and
//! `GetActiveTicket` read.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use super::tickets::ViewCell;
use super::{
    Assignment, MatchPhase, MatchSlot, PlayerStatus, Release, State, TicketSlot, TicketState,
    TicketView, unix_now,
};
use crate::ids::{MatchId, PlayerId, QueueId, TicketId};
use crate::records::{EndedPhase, MatchRecord, PlayerChange};
use crate::rejection::{MatchRefusal, Rejection};
use crate::store::{HistoryWrite, StoreError};

/// A live match as `GetMatch` shows it.
#[derive(Clone, Debug)]
pub struct LiveMatch {
    pub phase: MatchPhase,
    pub assignment: Arc<Assignment>,
    pub formed_unix: f64,
    pub started_unix: Option<f64>,
}

impl MatchSlot {
    /// Unix seconds of its game server's `StartMatch`.
    pub fn started_unix(&self) -> Option<f64> {
        self.lock().started_unix
    }

    /// The match as it is now.
    pub fn live(&self) -> LiveMatch {
        let inner = self.lock();
        LiveMatch {
            phase: inner.phase,
            assignment: inner.assignment.clone(),
            formed_unix: self.formed_unix,
            started_unix: inner.started_unix,
        }
    }
}

impl State {
    /// The history write of a match that ended now.
    pub(super) fn history_write(
        &self,
        m: &MatchSlot,
        a: &Assignment,
        phase: EndedPhase,
        placements: &[u32],
        changes: &[PlayerChange],
        ended_unix: f64,
    ) -> HistoryWrite {
        HistoryWrite {
            record: MatchRecord {
                match_id: m.id.clone(),
                queue: m.queue.to_string(),
                phase,
                teams: a.teams.clone(),
                placements: placements.to_vec(),
                changes: changes.to_vec(),
                server_address: a.server_address.clone(),
                win_probability: a.win_probability.clone(),
                formed_unix: m.formed_unix,
                started_unix: m.started_unix(),
                ended_unix,
            },
            keep: self.inner.config.history.matches_per_player,
        }
    }

    /// Adds a cancelled match to the history if a game server had taken it (a match no server
    /// took never reached the players' games). Durable with the store's next flush.
    pub(super) fn record_cancelled(&self, m: &MatchSlot, a: &Assignment) {
        if a.server_address.is_empty() {
            return;
        }
        let write = self.history_write(m, a, EndedPhase::Cancelled, &[], &[], unix_now());
        if let Err(e) = self.inner.store.append_history(&[write]) {
            crate::store::write_failures::log_store_write_failure!(
                "history",
                e,
                match_id = %m.id,
                "could not record a cancelled match"
            );
        }
    }

    /// `StartMatch`: an ALLOCATED match becomes STARTED, and is written through the store with
    /// its start, so a restart keeps it STARTED (a cancel then voids it instead of requeueing
    /// the players of a running game). Returns when it started; durable with the caller's
    /// flush. Starting a started match again changes nothing but writes it again: the write of
    /// the call that started it may have failed, and a retry must leave the start durable.
    pub fn start_match(&self, m: &Arc<MatchSlot>) -> Result<Result<f64, Rejection>, StoreError> {
        let (started, now) = match Self::mark_started(m) {
            Ok(started) => started,
            Err(refused) => return Ok(Err(refused)),
        };
        if now {
            tracing::info!(match_id = %m.id, "match started");
        }
        self.write_matches(std::slice::from_ref(m))?;
        Ok(Ok(started))
    }

    /// An ALLOCATED match becomes STARTED. Returns when it started and whether this call
    /// started it.
    fn mark_started(m: &MatchSlot) -> Result<(f64, bool), Rejection> {
        let mut inner = m.lock();
        match inner.phase {
            MatchPhase::Allocated => {
                let now = unix_now();
                inner.phase = MatchPhase::Started;
                inner.started_unix = Some(now);
                Ok((now, true))
            }
            MatchPhase::Started => Ok((inner.started_unix.unwrap_or(0.0), false)),
            MatchPhase::Completing => {
                Err(Rejection::for_match(&m.id, MatchRefusal::ResultInFlight))
            }
            MatchPhase::Completed => Err(Rejection::for_match(&m.id, MatchRefusal::Completed)),
            MatchPhase::Cancelled => Err(Rejection::for_match(&m.id, MatchRefusal::Cancelled)),
            phase @ (MatchPhase::ReadyCheck | MatchPhase::Formed) => Err(Rejection::for_match(
                &m.id,
                MatchRefusal::NotRunning(phase.name()),
            )),
        }
    }

    /// Cancels a match that has not started (ready-check, FORMED or ALLOCATED) and puts
    /// `tickets` (each with its queue) back to SEARCHING under their ids, wait kept: the caller
    /// returns them to their pools. A ticket whose slot was already final or forgotten gets a
    /// fresh slot. Players of the match's other tickets go idle. `label` is the cancel's reason
    /// on `matchmaker_matches_cancelled_total`. `None` (and nothing changed) when the match has
    /// started or ended meanwhile.
    pub fn requeue_match(
        &self,
        m: &MatchSlot,
        tickets: &[(QueueId, &crate::matching::Ticket)],
        now: f64,
        reason: &str,
        label: &'static str,
    ) -> Option<Vec<Arc<TicketSlot>>> {
        let assignment = {
            let mut inner = m.lock();
            if !matches!(
                inner.phase,
                MatchPhase::ReadyCheck | MatchPhase::Formed | MatchPhase::Allocated
            ) {
                return None;
            }
            inner.phase = MatchPhase::Cancelled;
            inner.assignment.clone()
        };
        let back = format!("{reason}; back at the front of the queue");
        let slots: Vec<Arc<TicketSlot>> = tickets
            .iter()
            .map(|(queue, t)| self.reopen_ticket(queue, t, now, &back))
            .collect();
        let requeued: Vec<&TicketId> = slots.iter().map(|t| &t.id).collect();
        // In the players' histories and the event log before they are free (see
        // `cancel_match`).
        self.record_cancelled(m, &assignment);
        self.emit([super::match_event(
            crate::store::EventKind::MatchCancelled,
            &assignment,
            super::unix_now(),
            reason,
        )]);
        self.release_players(m, &assignment, |t| {
            if requeued.contains(&&t.id) {
                Release::Requeue {
                    reason: back.clone(),
                    wait_seconds: now - t.entered_at,
                }
            } else {
                Release::End {
                    state: TicketState::Cancelled,
                    reason: reason.to_string(),
                    wait_seconds: t.view().wait_seconds,
                }
            }
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
        tracing::info!(match_id = %m.id, tickets = slots.len(), reason, "match cancelled before it started; tickets requeued");
        metrics::counter!(crate::telemetry::MATCHES_CANCELLED, "queue" => m.queue.to_string(), "reason" => label)
            .increment(1);
        Some(slots)
    }

    /// The slot a requeued ticket continues in: its own while its view is not final (its
    /// watchers keep watching), else a fresh one under the same id.
    fn reopen_ticket(
        &self,
        queue: &QueueId,
        t: &crate::matching::Ticket,
        now: f64,
        reason: &str,
    ) -> Arc<TicketSlot> {
        if let Ok(slot) = self.ticket(&t.id)
            && !slot.view().is_final()
        {
            return slot;
        }
        let slot = Arc::new(TicketSlot {
            id: t.id.clone(),
            queue: queue.clone(),
            players: t.players.clone(),
            entered_at: t.entered_at,
            last_seen: AtomicU64::new(now.max(0.0).to_bits()),
            view: std::sync::Mutex::new(ViewCell {
                current: TicketView::searching(now - t.entered_at, reason.to_string()),
                watchers: None,
            }),
        });
        self.inner.tickets.insert(t.id.clone(), slot.clone());
        slot
    }

    /// Writes a requeued ticket again to a store that keeps tickets (it left the store when its
    /// match was allocated); durable with the next flush. `now` is the matchmaker clock's.
    pub fn store_ticket_again(&self, slot: &TicketSlot, entry: &crate::matching::Ticket, now: f64) {
        let store = &self.inner.store;
        if !store.keeps_tickets() {
            return;
        }
        let stored = super::tickets::stored_ticket(store.as_ref(), slot, entry, now);
        if let Err(e) = store.put_ticket(&stored) {
            tracing::warn!(ticket = %slot.id, error = %e, "could not store a requeued ticket");
        }
    }

    /// `GetActiveTicket`: the player's live ticket (its id and view), or the match it is in as
    /// MATCHED with the match's current assignment. `None` when idle.
    pub fn active_ticket(&self, player: &PlayerId, now: f64) -> Option<(String, TicketView)> {
        let status = self.slot_if_known(player)?.lock().status.clone();
        match status {
            PlayerStatus::Idle => None,
            PlayerStatus::Queued(id) => {
                let t = self.ticket(&id).ok()?;
                t.touch(now);
                Some((id.to_string(), t.view()))
            }
            PlayerStatus::InMatch(match_id) => {
                let m = self.match_slot(&match_id).ok()?;
                let assignment = m.assignment();
                let own = m
                    .tickets()
                    .iter()
                    .filter_map(|t| self.ticket(t).ok())
                    .find(|t| t.players.contains(player));
                Some(match own {
                    Some(t) => {
                        let mut view = t.view();
                        view.state = TicketState::Matched;
                        // The server only once the ticket's watchers were told it, when the
                        // match is durable (`publish_placed`).
                        let told = view
                            .assignment
                            .as_ref()
                            .is_some_and(|a| !a.server_address.is_empty());
                        if told || m.phase() != super::MatchPhase::Allocated {
                            view.assignment = Some(assignment);
                        }
                        (t.id.to_string(), view)
                    }
                    // A match restored after a restart, or its ticket was forgotten.
                    None => (
                        String::new(),
                        TicketView {
                            state: TicketState::Matched,
                            assignment: Some(assignment),
                            ..TicketView::searching(0.0, String::new())
                        },
                    ),
                })
            }
        }
    }

    /// A match by id for `GetMatch`: live in memory, else ended in the history.
    pub async fn match_view(
        &self,
        id: &MatchId,
    ) -> Result<Option<Result<LiveMatch, MatchRecord>>, StoreError> {
        if let Ok(m) = self.match_slot(id) {
            return Ok(Some(Ok(m.live())));
        }
        Ok(self.inner.store.match_record(id).await?.map(Err))
    }
}

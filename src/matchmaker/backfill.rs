//! Backfill: open slots of a running match, filled from its queue's pool each tick.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc::error::SendTimeoutError;

use super::{Loop, push_recent};
use crate::ids::{PlayerId, new_id};
use crate::matching::{self, BackfillConfig, SystemModel};
use crate::state::{Assignment, BackfillError, MatchSlot, TicketSlot, TicketState, TicketView};
use crate::store::StoreError;
use crate::telemetry as m;

/// Open slots of a running match, filled from its queue's pool each tick.
pub(super) struct BackfillJob {
    pub(super) id: String,
    pub(super) slot: Arc<MatchSlot>,
    pub(super) queue: usize,
    pub(super) open: Vec<u32>,
    /// The leavers whose slots this request opened.
    pub(super) asked: Vec<PlayerId>,
    pub(super) requested_at: f64,
}

/// A ticket a backfill put in a running match.
pub(super) struct Joined {
    pub(super) ticket: Arc<TicketSlot>,
    pub(super) entry: matching::Ticket,
    pub(super) team: usize,
    /// How long it had waited when it joined (its MATCHED view says so).
    pub(super) wait_seconds: f64,
}

/// What became of a fill's write ([`Loop::deliver_backfill`]), handed back to the loop.
pub(super) enum FillOutcome {
    /// Flushed: its tickets read MATCHED and its update went to the server. Per ticket, its
    /// players and how long it had waited.
    Stored {
        queue: usize,
        joined: Vec<(u32, f64)>,
        /// When the fill completed its request: the seconds from request to last slot filled.
        completed: Option<f64>,
    },
    /// Not stored: taken back ([`Loop::take_back_backfill`]).
    NotStored(Filled),
}

/// One tick's additions to one running match: sent to its game server, and shown to their
/// tickets, once the match's new roster is durable; taken back if it cannot be stored
/// ([`Loop::take_back_backfill`]).
pub(super) struct Filled {
    pub(super) slot: Arc<MatchSlot>,
    pub(super) queue: usize,
    /// The match with every addition.
    pub(super) assignment: Arc<Assignment>,
    /// Per team, the players added.
    pub(super) added: Vec<Vec<PlayerId>>,
    pub(super) joined: Vec<Joined>,
    /// The request's leavers and when it was made, to open its slots again.
    pub(super) asked: Vec<PlayerId>,
    pub(super) requested_at: f64,
    /// The seconds from request to last slot filled, when this fill completed its request:
    /// recorded once the fill is stored (a fill taken back and made again records it once).
    pub(super) completes: Option<f64>,
}

impl Loop {
    /// Fills open slots of queue `qi`'s running matches from its pool, oldest request first,
    /// and sends each match's additions to its game server.
    pub(super) fn run_backfills(&mut self, qi: usize, now: f64) {
        if self.backfills.is_empty() {
            return;
        }
        let Ok(queue) = self.state.queue("queue", self.queues[qi].id.as_str()) else {
            return;
        };
        let timeout = self.queues[qi].backfill.timeout_seconds;
        let mut jobs = std::mem::take(&mut self.backfills);
        // The pool by rating, sorted once for all of this queue's requests (the first that
        // gets to fill builds it).
        let mut order: Option<matching::FillOrder> = None;
        jobs.retain_mut(|job| {
            if job.queue != qi {
                return true;
            }
            let Some((assignment, roster)) = self.state.running_roster(&job.slot) else {
                self.seated.remove(&job.slot.id);
                return false; // the match ended
            };
            if now - job.requested_at > timeout {
                self.queues[qi].stats.backfill_requests_expired += 1;
                return false;
            }
            if self.queues[qi].pool.is_empty() {
                return true;
            }
            let open = matching::OpenMatch {
                teams: roster
                    .iter()
                    .map(|team| {
                        team.iter()
                            .map(|p| {
                                let s = self.state.skill_for_matching(p, &queue);
                                (s.mean, s.deviation)
                            })
                            .collect()
                    })
                    .collect(),
                open: job.open.clone(),
                roles: roster
                    .iter()
                    .map(|team| self.state.roles_in(&job.slot, team))
                    .collect(),
                region: assignment.region.clone(),
                // Tickets whose players all left count no more: their tags and avoid lists
                // do not bind the newcomers.
                seated: self.seated.get(&job.slot.id).map(|teams| {
                    teams
                        .iter()
                        .map(|team| {
                            team.iter()
                                .filter(|s| !s.players.iter().all(|p| assignment.left.contains(p)))
                                .cloned()
                                .collect()
                        })
                        .collect()
                }),
            };
            let q = &mut self.queues[qi];
            let calibration = self.state.queue_calibration(&q.id);
            let order = order.get_or_insert_with(|| q.pool.fill_order(now));
            let fills = q.pool.fill_from(
                order,
                &open,
                &SystemModel::calibrated(&q.system, calibration),
            );
            let mut additions: Vec<Vec<PlayerId>> = vec![Vec::new(); job.open.len()];
            let mut joined = Vec::new();
            let mut latest = None;
            let mut ended = false;
            for fill in fills {
                let Some(w) = self.waiting.remove(&fill.ticket.id) else {
                    continue;
                };
                if ended {
                    self.requeue(qi, w.slot, fill.ticket);
                    continue;
                }
                match self
                    .state
                    .add_backfill(&job.slot, fill.team, &w.slot, &fill.ticket.roles)
                {
                    Ok(a) => {
                        let n = fill.ticket.players.len() as u32;
                        job.open[fill.team] = job.open[fill.team].saturating_sub(n);
                        additions[fill.team].extend(fill.ticket.players.iter().cloned());
                        if let Some(team) = self
                            .seated
                            .get_mut(&job.slot.id)
                            .and_then(|teams| teams.get_mut(fill.team))
                        {
                            team.push(matching::Seated::of(&fill.ticket));
                        }
                        // Counted once stored ([`Loop::count_stored_fill`]).
                        // In the match's roster now, written with the addition.
                        self.state
                            .forget_stored_tickets(std::slice::from_ref(&w.slot.id));
                        self.finished.push_back((now, w.slot.id.clone()));
                        latest = Some(a);
                        joined.push(Joined {
                            wait_seconds: now - w.slot.entered_at,
                            ticket: w.slot,
                            entry: fill.ticket,
                            team: fill.team,
                        });
                    }
                    Err(BackfillError::NotRunning) => {
                        ended = true;
                        self.requeue(qi, w.slot, fill.ticket);
                    }
                    Err(BackfillError::TicketGone) => {}
                }
            }
            let done = !ended && job.open.iter().all(|&o| o == 0);
            if let Some(assignment) = latest {
                self.deliver_backfill(Filled {
                    slot: job.slot.clone(),
                    queue: qi,
                    assignment,
                    added: additions,
                    joined,
                    asked: job.asked.clone(),
                    requested_at: job.requested_at,
                    completes: done.then_some(now - job.requested_at),
                });
            }
            !(ended || done)
        });
        jobs.append(&mut self.backfills);
        self.backfills = jobs;
    }

    /// Records a running match's new players, and once that is durable shows their tickets
    /// MATCHED and sends the additions to its game server: as for a new match, no server and
    /// no player learns of what a crash could lose. If the write or its flush fails, nothing
    /// is sent and the additions come back to the loop ([`Loop::take_back_backfill`]); a
    /// fenced one (another node owns the queues now) sends nothing either, and the next owner
    /// carries on from what the store holds.
    ///
    /// The stream's buffer is bounded, so the send waits for room in its own task: at most the
    /// queue's backfill timeout (by then the server may have asked again), and never past the
    /// closing of the engine's streams. A server that stays connected but stops reading holds
    /// no task past that; the update is dropped, with a warning.
    pub(super) fn deliver_backfill(&self, filled: Filled) {
        let match_id = filled.slot.id.clone();
        match self.state.write_matches(std::slice::from_ref(&filled.slot)) {
            Ok(()) => {}
            Err(StoreError::Fenced) => {
                tracing::warn!(%match_id, "backfill players not stored: another node owns the queues; not sent to the game server");
                return;
            }
            Err(_) => {
                // Logged and counted by the write.
                let _ = self.fill_outcomes_tx.send(FillOutcome::NotStored(filled));
                return;
            }
        }
        let wait = self
            .queue_index
            .get(&filled.slot.queue)
            .map_or(BackfillConfig::default().timeout_seconds, |&qi| {
                self.queues[qi].backfill.timeout_seconds
            });
        let wait = Duration::from_secs_f64(wait);
        let closed = self.state.streams_closed();
        let server = filled.assignment.server_address.clone();
        let stream = self.state.server_stream(&server);
        let state = self.state.clone();
        let outcome = self.fill_outcomes_tx.clone();
        self.runtime.spawn(async move {
            if let Err(e) = state.store().flush_async().await {
                crate::store::write_failures::log_store_write_failure!(
                    "persist_matches",
                    e,
                    %match_id,
                    "could not flush a backfilled match; the update is not sent to its game server"
                );
                if !matches!(e, StoreError::Fenced) {
                    let _ = outcome.send(FillOutcome::NotStored(filled));
                }
                return;
            }
            // Counted before anyone is told, so a `GetQueueStats` after a MATCHED view (the
            // loop takes outcomes before commands) counts it.
            let joined = filled.joined.iter();
            let _ = outcome.send(FillOutcome::Stored {
                queue: filled.queue,
                joined: joined
                    .map(|j| (j.entry.players.len() as u32, j.wait_seconds))
                    .collect(),
                completed: filled.completes,
            });
            for j in &filled.joined {
                state.publish_backfilled(&j.ticket, &filled.assignment, j.wait_seconds);
            }
            let a = &filled.assignment;
            let update = Arc::new(Assignment {
                backfill: filled.added,
                ..(**a).clone()
            });
            let Some(tx) = stream else {
                tracing::warn!(
                    %match_id,
                    %server,
                    "backfill players added to a match whose game server is not connected"
                );
                return;
            };
            let dropped = tokio::select! {
                biased;
                () = closed.cancelled() => Some("the engine's streams closed"),
                sent = tx.send_timeout(update, wait) => match sent {
                    Ok(()) => None,
                    Err(SendTimeoutError::Closed(_)) => Some("its stream closed"),
                    Err(SendTimeoutError::Timeout(_)) => {
                        Some("the game server did not read its stream within the backfill timeout")
                    }
                },
            };
            if let Some(why) = dropped {
                tracing::warn!(%match_id, %server, why, "backfill update not delivered");
            }
        });
    }

    /// What became of a fill's write: a stored one counts its slots and its tickets' waits
    /// now (a fill taken back counts nothing, and counts when it is filled again and stored);
    /// one not stored is taken back.
    pub(super) fn fill_outcome(&mut self, outcome: FillOutcome) {
        match outcome {
            FillOutcome::Stored {
                queue,
                joined,
                completed,
            } => {
                let Some(q) = self.queues.get_mut(queue) else {
                    return;
                };
                if let Some(seconds) = completed {
                    push_recent(&mut q.recent_fill_seconds, seconds);
                    metrics::histogram!(m::BACKFILL_FILL_SECONDS, "queue" => q.id.to_string())
                        .record(seconds);
                }
                for (players, waited) in joined {
                    q.stats.backfill_slots_filled += u64::from(players);
                    push_recent(&mut q.recent_waits, waited);
                    q.metrics.wait_seconds.record(waited);
                    metrics::counter!(m::BACKFILL_SLOTS_FILLED, "queue" => q.id.to_string())
                        .increment(u64::from(players));
                }
            }
            FillOutcome::NotStored(filled) => self.take_back_backfill(filled),
        }
    }

    /// Takes back additions whose write did not flush (no server and no ticket learned of
    /// them; see [`Loop::deliver_backfill`]): their players leave the match, their tickets go
    /// back to the front of their queue, and the slots they filled open again, in the request
    /// still open or in one made again with the first's leavers and time. Left alone on a
    /// cluster node whose lease ran out: the write may have landed, and the next owner
    /// carries on from what the store holds.
    pub(super) fn take_back_backfill(&mut self, filled: Filled) {
        if !self.state.may_act() {
            return;
        }
        let now = self.clock.now();
        let slot = filled.slot;
        let mut reopened = vec![0u32; filled.added.len()];
        let mut requeued = 0usize;
        for j in filled.joined {
            if self
                .state
                .take_back_backfill(&slot, j.team, &j.ticket)
                .is_none()
            {
                // The match ended meanwhile: a cancel ended the ticket; otherwise nothing will.
                if !j.ticket.view().is_final() {
                    let reason = "its match ended before the backfill that added it was stored";
                    self.state
                        .end_ticket(&j.ticket, TicketState::Cancelled, now, reason.into());
                    self.finished.push_back((now, j.ticket.id.clone()));
                }
                continue;
            }
            if let Some(team) = self
                .seated
                .get_mut(&slot.id)
                .and_then(|teams| teams.get_mut(j.team))
            {
                team.retain(|s| s.players != j.entry.players);
            }
            if let Some(n) = reopened.get_mut(j.team) {
                *n += j.entry.players.len() as u32;
            }
            j.ticket.publish(TicketView::searching(
                now - j.ticket.entered_at,
                "the backfill could not be stored, so its game server did not get it; back at \
                 the front of the queue"
                    .into(),
            ));
            self.state.store_ticket_again(&j.ticket, &j.entry, now);
            self.requeue(filled.queue, j.ticket, j.entry);
            requeued += 1;
        }
        if requeued == 0 {
            return;
        }
        self.state.persist_matches(std::slice::from_ref(&slot));
        tracing::warn!(match_id = %slot.id, tickets = requeued, "backfill players could not be stored, so their game server did not get them; tickets requeued and slots open again");
        match self.backfills.iter_mut().find(|j| j.slot.id == slot.id) {
            Some(job) => {
                for (o, n) in job.open.iter_mut().zip(&reopened) {
                    *o += n;
                }
            }
            None => self.backfills.push(BackfillJob {
                id: new_id("b"),
                slot,
                queue: filled.queue,
                open: reopened,
                asked: filled.asked,
                requested_at: filled.requested_at,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::test_util::enter_in;
    use super::super::{Clock, Loop};
    use crate::ids::{MatchId, PlayerId};
    use crate::state::TicketState;

    /// A game server that stays connected but never reads its stream, with room for one match
    /// in it, and `updates` backfill updates of one of its matches delivered.
    fn stuck_server(
        updates: usize,
    ) -> (
        crate::state::State,
        tokio::sync::mpsc::Receiver<std::sync::Arc<crate::state::Assignment>>,
    ) {
        let state = crate::state::test_util::state_with("[server]\nserve_matches_buffer = 1\n");
        let (stream, _) = state.register_server("gs-1:7777".into(), String::new(), 0);
        let m = crate::state::test_util::formed_1v1(&state, "m-1", "a", "b", "gs-1:7777");
        let lp = Loop::new(state.clone(), Clock::start(), Vec::new());
        for _ in 0..updates {
            lp.deliver_backfill(super::Filled {
                slot: m.clone(),
                queue: 0,
                assignment: m.assignment(),
                added: vec![Vec::new(), Vec::new()],
                joined: Vec::new(),
                asked: Vec::new(),
                requested_at: 0.0,
                completes: None,
            });
        }
        (state, stream)
    }

    /// Waits (on the paused clock) until only the registry holds the stream's sending side:
    /// every delivery task has ended.
    async fn deliveries_ended(
        stream: &tokio::sync::mpsc::Receiver<std::sync::Arc<crate::state::Assignment>>,
        within: Duration,
    ) -> bool {
        let ended = async {
            while stream.sender_strong_count() > 1 {
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        };
        tokio::time::timeout(within, ended).await.is_ok()
    }

    #[tokio::test(start_paused = true)]
    async fn updates_a_server_does_not_read_are_dropped_after_the_backfill_timeout() {
        let (state, stream) = stuck_server(50);
        let wait = state
            .queue("queue", "1v1")
            .unwrap()
            .config
            .backfill
            .timeout_seconds;
        assert!(
            deliveries_ended(&stream, Duration::from_secs_f64(wait + 10.0)).await,
            "every delivery gave up"
        );
        assert_eq!(stream.len(), 1, "the first took the stream's one place");
    }

    /// A running 2v2 match on `gs-1:7777` formed by the loop, whose first team's first player
    /// left, with a backfill request open for the slot; and `e` waiting in 2v2. Returns the
    /// stream (the match already read from it), the match and `e`'s ticket.
    async fn an_open_slot_and_a_ticket_for_it(
        lp: &mut Loop,
    ) -> (
        tokio::sync::mpsc::Receiver<std::sync::Arc<crate::state::Assignment>>,
        crate::ids::MatchId,
        crate::ids::TicketId,
    ) {
        let state = lp.state.clone();
        let (mut stream, _) = state.register_server("gs-1:7777".into(), String::new(), 1);
        for p in ["a", "b", "c", "d"] {
            enter_in(lp, "2v2", p).await;
        }
        lp.tick();
        let formed = stream.recv().await.expect("a, b, c and d meet");
        let leaver = formed.teams[0][0].clone();
        super::super::backfill_request::request(lp, &formed.match_id, &[vec![leaver], Vec::new()])
            .await
            .unwrap()
            .unwrap();
        let e = enter_in(lp, "2v2", "e").await;
        (stream, formed.match_id.clone(), e)
    }

    /// Players of `match_id` per team, as the state and as the store hold them.
    fn rosters(state: &crate::state::State, match_id: &MatchId) -> [Vec<Vec<PlayerId>>; 2] {
        let live = state
            .match_slot(match_id)
            .unwrap()
            .assignment()
            .teams
            .clone();
        let (stored, _) = state.store().load_matches().unwrap();
        let stored = stored
            .into_iter()
            .find(|m| m.match_id == *match_id)
            .unwrap()
            .teams;
        [live, stored]
    }

    #[tokio::test]
    async fn a_backfill_whose_write_does_not_flush_is_not_sent_and_its_ticket_waits_again() {
        let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
        let _local = metrics::set_default_local_recorder(&recorder);
        let memory = std::sync::Arc::new(crate::store::MemoryStore::default());
        let state = crate::state::test_util::state_on(memory.clone());
        let clock = Clock::start();
        let mut lp = Loop::new(state.clone(), clock.clone(), Vec::new());
        let (mut stream, match_id, e) = an_open_slot_and_a_ticket_for_it(&mut lp).await;
        let [before, _] = rosters(&state, &match_id);

        memory.fail_flushes(Some(crate::store::FlushFailure::Disk));
        clock.advance(1.0);
        lp.tick();
        let joined = state.match_slot(&match_id).unwrap().assignment();
        assert!(
            joined.teams[0].contains(&PlayerId::new("e")),
            "e fills the slot"
        );
        assert_eq!(
            state.ticket(&e).unwrap().view().state,
            TicketState::Searching,
            "not told before the roster is durable"
        );
        // Bounded, so that a flush failure that is never reported fails the test.
        let reported = Duration::from_secs(10);
        let outcome = tokio::time::timeout(reported, lp.fill_outcomes.recv())
            .await
            .expect("the failed flush reports its backfill")
            .unwrap();
        assert!(matches!(outcome, super::FillOutcome::NotStored(_)));
        memory.fail_flushes(None);
        lp.fill_outcome(outcome);
        assert_eq!(
            filled_2v2(&lp, &recorder),
            (0, 0),
            "taken back: not counted"
        );
        assert_eq!(fill_times_2v2(&lp), 0, "nor its request's fill time");

        assert!(stream.try_recv().is_err(), "the game server got nothing");
        let view = state.ticket(&e).unwrap().view();
        assert_eq!(view.state, TicketState::Searching, "{view:?}");
        assert!(view.reason.contains("could not be stored"), "{view:?}");
        assert!(lp.waiting.contains_key(&e), "back in the queue");
        assert_eq!(
            state.player(&PlayerId::new("e"), "2v2").0,
            crate::state::PlayerStatus::Queued(e.clone())
        );
        assert_eq!(rosters(&state, &match_id), [before.clone(), before]);
        let job = lp.backfills.iter().find(|j| j.slot.id == match_id);
        assert_eq!(job.map(|j| j.open.clone()), Some(vec![1, 0]), "open again");

        // It fills the slot again, and this time its server gets it.
        clock.advance(1.0);
        lp.tick();
        let update = tokio::time::timeout(reported, stream.recv())
            .await
            .expect("the update is sent once durable")
            .unwrap();
        assert_eq!(update.match_id, match_id);
        assert_eq!(update.backfill[0], [PlayerId::new("e")]);
        let [live, stored] = rosters(&state, &match_id);
        assert!(live[0].contains(&PlayerId::new("e")));
        assert_eq!(live, stored);
        let view = state.ticket(&e).unwrap().view();
        assert_eq!(view.state, TicketState::Matched, "{view:?}");
        assert_eq!(view.assignment.unwrap().server_address, "gs-1:7777");
        // Counted once, now that it is stored.
        let outcome = lp
            .fill_outcomes
            .try_recv()
            .expect("reported before the update");
        lp.fill_outcome(outcome);
        assert_eq!(filled_2v2(&lp, &recorder), (1, 1));
        assert_eq!(fill_times_2v2(&lp), 1, "the request's fill time, once");
    }

    /// How many fill times of whole requests the 2v2 queue's stats hold.
    fn fill_times_2v2(lp: &Loop) -> usize {
        let q = lp.queues.iter().find(|q| q.id.as_str() == "2v2").unwrap();
        q.recent_fill_seconds.len()
    }

    /// The 2v2 queue's backfilled slots, as `GetQueueStats` and as the metric count them.
    fn filled_2v2(
        lp: &Loop,
        recorder: &metrics_exporter_prometheus::PrometheusRecorder,
    ) -> (u64, u64) {
        let q = lp.queues.iter().find(|q| q.id.as_str() == "2v2").unwrap();
        let page = recorder.handle().render();
        let metric = page
            .lines()
            .filter(|l| l.starts_with(crate::telemetry::BACKFILL_SLOTS_FILLED))
            .filter(|l| l.contains("queue=\"2v2\""))
            .find_map(|l| l.rsplit(' ').next()?.parse().ok())
            .unwrap_or(0);
        (q.stats.backfill_slots_filled, metric)
    }

    #[tokio::test(start_paused = true)]
    async fn updates_waiting_for_room_end_when_the_streams_close() {
        let (state, stream) = stuck_server(50);
        state.close_server_streams();
        assert!(
            deliveries_ended(&stream, Duration::from_secs(5)).await,
            "the deliveries ended with the streams, before their timeout"
        );
        assert_eq!(stream.sender_strong_count(), 0);
    }
}

//! Backfill: open slots of a running match, filled from its queue's pool each tick.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc::error::SendTimeoutError;

use super::{Loop, push_recent};
use crate::ids::{MatchId, PlayerId, new_id};
use crate::matching::{self, BackfillConfig, SystemModel};
use crate::rejection::{MatchRefusal, Rejection};
use crate::state::{Assignment, BackfillError, MatchSlot};
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

impl Loop {
    /// RequestBackfill: marks the leavers and opens their slots (merged into the match's open
    /// request, if any).
    pub(super) fn open_backfill(
        &mut self,
        match_id: &MatchId,
        leavers: &[Vec<PlayerId>],
    ) -> Result<String, Rejection> {
        let slot = self.state.match_slot(match_id)?;
        let Some(&qi) = self.queue_index.get(&slot.queue) else {
            return Err(Rejection::for_match(match_id, MatchRefusal::QueueGone));
        };
        if self.queues[qi].team_size < 2 {
            return Err(Rejection::Unsupported {
                queue: slot.queue.to_string(),
                reason: "has teams of one player; backfill needs teams of two or more",
            });
        }
        let capacity = self.queues[qi].team_size as usize;
        // A request past its timeout that the next tick has not dropped yet is dropped now: a
        // server asking again as it times out opens its slots anew.
        let timeout = self.queues[qi].backfill.timeout_seconds;
        let now = self.clock.now();
        if let Some(at) = self
            .backfills
            .iter()
            .position(|j| j.slot.id == *match_id && now - j.requested_at > timeout)
        {
            self.backfills.remove(at);
            self.queues[qi].stats.backfill_requests_expired += 1;
        }
        let (_, open) = match self.backfills.iter().find(|j| j.slot.id == *match_id) {
            Some(job) => self
                .state
                .mark_left(&slot, leavers, capacity, (&job.open, &job.asked))?,
            None => self.state.mark_left(&slot, leavers, capacity, (&[], &[]))?,
        };
        let named = leavers.iter().flatten();
        self.state.persist_matches(std::slice::from_ref(&slot));
        let q = &mut self.queues[qi];
        let opened: u32 = open.iter().sum();
        q.stats.backfill_requests += 1;
        q.stats.backfill_slots_opened += u64::from(opened);
        metrics::counter!(m::BACKFILL_REQUESTS, "queue" => q.id.to_string()).increment(1);
        if let Some(job) = self.backfills.iter_mut().find(|j| j.slot.id == *match_id) {
            for (o, n) in job.open.iter_mut().zip(&open) {
                *o += n;
            }
            for p in named {
                if !job.asked.contains(p) {
                    job.asked.push(p.clone());
                }
            }
            // The new slots get the whole timeout, as a request of their own would (a request
            // sent again opens nothing new and leaves the timeout as it was).
            if opened > 0 {
                job.requested_at = self.clock.now();
            }
            return Ok(job.id.clone());
        }
        let id = new_id("b");
        self.backfills.push(BackfillJob {
            id: id.clone(),
            slot,
            queue: qi,
            open,
            asked: named.cloned().collect(),
            requested_at: self.clock.now(),
        });
        Ok(id)
    }

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
                match self.state.add_backfill(
                    &job.slot,
                    fill.team,
                    &w.slot,
                    &fill.ticket.roles,
                    now,
                ) {
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
                        let q = &mut self.queues[qi];
                        q.stats.backfill_slots_filled += u64::from(n);
                        push_recent(&mut q.recent_waits, now - w.slot.entered_at);
                        q.metrics.wait_seconds.record(now - w.slot.entered_at);
                        metrics::counter!(m::BACKFILL_SLOTS_FILLED, "queue" => q.id.to_string())
                            .increment(u64::from(n));
                        // In the match's roster now, written with the addition.
                        self.state
                            .forget_stored_tickets(std::slice::from_ref(&w.slot.id));
                        self.finished.push_back((now, w.slot.id.clone()));
                        latest = Some(a);
                    }
                    Err(BackfillError::NotRunning) => {
                        ended = true;
                        self.requeue(qi, w.slot, fill.ticket);
                    }
                    Err(BackfillError::TicketGone) => {}
                }
            }
            if let Some(a) = latest {
                self.deliver_backfill(&job.slot, &a, additions);
            }
            if ended {
                return false;
            }
            if job.open.iter().all(|&o| o == 0) {
                let seconds = now - job.requested_at;
                let q = &mut self.queues[qi];
                push_recent(&mut q.recent_fill_seconds, seconds);
                metrics::histogram!(m::BACKFILL_FILL_SECONDS, "queue" => q.id.to_string())
                    .record(seconds);
                return false;
            }
            true
        });
        jobs.append(&mut self.backfills);
        self.backfills = jobs;
    }

    /// Sends a running match's new players to its game server and records the match. The
    /// stream's buffer is bounded, so the send waits for room in its own task: at most the
    /// queue's backfill timeout (by then the server may have asked again), and never past the
    /// closing of the engine's streams. A server that stays connected but stops reading holds
    /// no task past that; the update is dropped, with a warning.
    pub(super) fn deliver_backfill(
        &self,
        slot: &Arc<MatchSlot>,
        a: &Assignment,
        added: Vec<Vec<PlayerId>>,
    ) {
        self.state.persist_matches(std::slice::from_ref(slot));
        let update = Arc::new(Assignment {
            backfill: added,
            ..a.clone()
        });
        let Some(tx) = self.state.server_stream(&a.server_address) else {
            tracing::warn!(
                match_id = %a.match_id,
                server = %a.server_address,
                "backfill players added to a match whose game server is not connected"
            );
            return;
        };
        let wait = self
            .queue_index
            .get(&slot.queue)
            .map_or(BackfillConfig::default().timeout_seconds, |&qi| {
                self.queues[qi].backfill.timeout_seconds
            });
        let wait = Duration::from_secs_f64(wait);
        let closed = self.state.streams_closed();
        // Like a new match, the update goes out once the match's new roster is durable.
        let store = self.state.store().clone();
        self.runtime.spawn(async move {
            if let Err(e) = store.flush_async().await {
                crate::store::write_failures::log_store_write_failure!(
                    "persist_matches",
                    e,
                    "could not flush a backfilled match"
                );
            }
            let (match_id, server) = (update.match_id.clone(), update.server_address.clone());
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
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::{Clock, Loop};

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
        let a = m.assignment();
        for _ in 0..updates {
            lp.deliver_backfill(&m, &a, vec![Vec::new(), Vec::new()]);
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

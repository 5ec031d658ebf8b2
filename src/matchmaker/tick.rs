//! One loop tick: expire ready-checks, run each due queue's optimizer, turn formed matches into
//! state transitions, allocate, publish SEARCHING updates and forget finished tickets.

use std::time::Instant;

use tracing::{debug, info_span};

use super::{
    Loop, ReadyCheck, SEARCHING_UPDATE_SECONDS, STALE_SWEEP_SECONDS, Unallocated, due, push_recent,
};
use crate::ids::MatchId;
use crate::matching::{self, SystemModel};
use crate::state::{Assignment, TicketState, TicketView};
use crate::telemetry as m;

impl Loop {
    /// A formed match with a banned player is not formed: each ticket goes back to its pool
    /// ([`Loop::requeue`], which ends a banned player's ticket CANCELLED with the ban), its
    /// wait kept.
    fn return_with_bans(&mut self, qi: usize, formed: matching::FormedMatch) {
        for t in formed.teams.into_tickets() {
            if let Some(w) = self.waiting.remove(&t.id) {
                self.requeue(qi, w.slot, *t);
            }
        }
    }

    pub(super) fn tick(&mut self) {
        // A cluster node whose lease ran out forms nothing (the store would refuse it anyway).
        if !self.state.may_act() {
            return;
        }
        let now = self.clock.now();
        self.expire_ready_checks(now);
        for qi in 0..self.queues.len() {
            let q = &mut self.queues[qi];
            if !due(q.last_run, q.tick_every, self.tick_seconds, now) {
                continue;
            }
            q.last_run = now;
            let started = Instant::now();
            let backfill_first = self.queues[qi].backfill.prefer_backfill;
            if backfill_first {
                self.run_backfills(qi, now);
            }
            let q = &mut self.queues[qi];
            let span = info_span!(
                "tick",
                otel.name = "matchmaker.tick",
                queue = %q.id,
                waiting = q.pool.len()
            );
            let _enter = span.enter();
            let calibration = self.state.queue_calibration(&q.id);
            let outcome = q
                .pool
                .tick(now, &SystemModel::calibrated(&q.system, calibration));
            for expired in outcome.expired {
                if let Some(w) = self.waiting.remove(&expired.id) {
                    self.state.end_ticket(
                        &w.slot,
                        TicketState::Expired,
                        now,
                        "ticket ttl reached".into(),
                    );
                    self.finished.push_back((now, expired.id.clone()));
                    q.stats.tickets_expired += 1;
                    q.metrics.expired_ttl.increment(1);
                }
            }
            // A player banned while waiting plays no match, even if `BanPlayer` could not
            // cancel the ticket (a matchmaker closing, a ticket restored by a new owner).
            let bans = self.state.any_bans().then(crate::state::unix_now);
            for formed in outcome.matches {
                if let Some(wall) = bans
                    && formed
                        .teams
                        .iter()
                        .flatten()
                        .any(|t| self.state.check_bans(&t.players, wall).is_err())
                {
                    self.return_with_bans(qi, formed);
                    continue;
                }
                let q = &mut self.queues[qi];
                let mut slots = Vec::new();
                let mut teams = Vec::with_capacity(formed.teams.len());
                for team in &formed.teams {
                    let mut players = Vec::new();
                    for t in team {
                        if let Some(w) = self.waiting.remove(&t.id) {
                            push_recent(&mut q.recent_waits, now - w.slot.entered_at);
                            q.metrics.wait_seconds.record(now - w.slot.entered_at);
                            slots.push(w.slot);
                        }
                        players.extend(t.players.iter().cloned());
                    }
                    teams.push(players);
                }
                let assignment = Assignment {
                    match_id: MatchId::new(self.state.new_id("m")),
                    queue: q.id.clone(),
                    teams,
                    win_probability: formed.win_probability.to_vec(),
                    region: formed.region.clone(),
                    server_address: String::new(),
                    parties: formed
                        .teams
                        .iter()
                        .flatten()
                        .filter(|t| t.players.len() > 1)
                        .map(|t| t.players.clone())
                        .collect(),
                    backfill: Vec::new(),
                    left: Vec::new(),
                    attributes: formed.attributes.clone(),
                };
                if !q.pool.config().rules.is_empty() {
                    let seated = formed
                        .teams
                        .iter()
                        .map(|team| team.iter().map(|t| matching::Seated::of(t)).collect())
                        .collect();
                    self.seated.insert(assignment.match_id.clone(), seated);
                }
                debug!(match_id = %assignment.match_id, quality = formed.quality, "match formed");
                let roles = if q.pool.config().roles.is_empty() {
                    std::collections::BTreeMap::new()
                } else {
                    formed
                        .teams
                        .iter()
                        .flatten()
                        .flat_map(|t| crate::state::roles_map(&t.players, &t.roles))
                        .collect()
                };
                let ready_check = (q.ready_check_seconds > 0.0).then_some(q.ready_check_seconds);
                let region = formed.region.clone();
                // Kept (moved, not copied) to put back in the queue if the match dissolves.
                let returnable: Vec<(usize, matching::Ticket)> = formed
                    .teams
                    .into_tickets()
                    .into_iter()
                    .map(|t| (qi, *t))
                    .collect();
                let slot = self.state.form_match(
                    &slots,
                    assignment,
                    formed.quality,
                    now,
                    ready_check,
                    roles,
                );
                q.stats.matches_formed += 1;
                push_recent(&mut q.recent_quality, formed.quality);
                q.metrics.formed.increment(1);
                q.metrics.quality.record(formed.quality);
                if let Some(seconds) = ready_check {
                    // Not offered to servers (nor persisted) until every ticket accepted.
                    q.stats.ready_checks += 1;
                    for t in &slots {
                        self.ready_by_ticket.insert(t.id.clone(), slot.id.clone());
                    }
                    let tickets = slots
                        .into_iter()
                        .zip(returnable)
                        .map(|(s, (_, t))| (s, t, false))
                        .collect();
                    self.ready.insert(
                        slot.id.clone(),
                        ReadyCheck {
                            slot,
                            queue: qi,
                            tickets,
                            deadline: now + seconds,
                        },
                    );
                    continue;
                }
                self.unallocated.push_back(Unallocated {
                    since: now,
                    region,
                    slot,
                    tickets: returnable,
                });
            }
            let q = &mut self.queues[qi];
            q.stats.tickets_waiting = q.pool.len() as u64;
            q.stats.wait_p50_seconds = crate::math::percentile(&q.recent_waits, 0.5);
            q.stats.wait_p95_seconds = crate::math::percentile(&q.recent_waits, 0.95);
            q.stats.quality_mean = if q.recent_quality.is_empty() {
                0.0
            } else {
                q.recent_quality.iter().sum::<f64>() / q.recent_quality.len() as f64
            };
            q.stats.backfill_fill_p50_seconds =
                crate::math::percentile(&q.recent_fill_seconds, 0.5);
            q.stats.backfill_fill_p95_seconds =
                crate::math::percentile(&q.recent_fill_seconds, 0.95);
            if !backfill_first {
                self.run_backfills(qi, now);
            }
            let q = &mut self.queues[qi];
            let elapsed = started.elapsed();
            q.stats.last_tick_ms = elapsed.as_secs_f64() * 1e3;
            q.metrics.tick_seconds.record(elapsed.as_secs_f64());
            q.metrics.waiting.set(q.pool.len() as f64);
        }
        // A match goes to the store when a game server takes it, in one batch per tick, and the
        // server gets it only once that batch is flushed: a server never holds a match a crash
        // could lose. Until then it is like a waiting ticket: no server can report it (under
        // auth), and a crash that loses it frees its players to queue again at once instead of
        // binding them to a match nobody runs until the allocation timeout. Graceful shutdown
        // still writes the unallocated ones ([`Loop::persist_unallocated`]).
        let (allocated, placements) = self.allocate(now);
        self.state.persist_matches(&allocated);
        self.state
            .deliver_when_durable(placements, &self.runtime, self.undelivered_tx.clone());
        if now - self.last_stale_sweep >= STALE_SWEEP_SECONDS {
            self.last_stale_sweep = now;
            self.sweep_stale(now);
        }
        self.publish_searching(now);
        self.forget_finished(now);
        let mut players_waiting = vec![0u64; self.queues.len()];
        for w in self.waiting.values() {
            players_waiting[w.queue] += w.slot.players.len() as u64;
        }
        for (q, n) in self.queues.iter_mut().zip(players_waiting) {
            q.stats.players_waiting = n;
        }
    }

    /// Drops the loop's notes on matches that moved on, expires the parties idle and cancels the
    /// matches with no result after the match timeout at `now` (the loop's clock: a step of the
    /// system clock ends neither), and forgets the players who are idle with no record. Matches
    /// in their ready-check are not touched: the ready-check's own deadline ends them
    /// ([`Loop::expire_ready_checks`]).
    pub(super) fn sweep_stale(&mut self, now: f64) {
        let state = &self.state;
        self.seated.retain(|id, _| state.match_slot(id).is_ok());
        self.unstarted.retain(|id, _| {
            state
                .match_slot(id)
                .is_ok_and(|m| m.phase() == crate::state::MatchPhase::Allocated)
        });
        if let Err(e) = state.expire_parties(now) {
            crate::store::write_failures::log_store_write_failure!(
                "parties",
                e,
                "could not expire idle parties"
            );
        }
        let timeout = state.config().server.match_timeout_seconds;
        let n = state.cancel_stale_matches(now, timeout);
        if n > 0 {
            tracing::warn!(
                matches = n,
                "cancelled matches with no result after the match timeout"
            );
        }
        state.prune_placed();
        state.drop_idle_export_orders();
        // After the cancels, which free players.
        let forgotten = state.forget_idle_unrated_players();
        if forgotten > 0 {
            tracing::debug!(players = forgotten, "forgot idle players with no record");
        }
    }

    /// SEARCHING updates for watched tickets; tickets nobody watched or named for the heartbeat
    /// time expire.
    pub(super) fn publish_searching(&mut self, now: f64) {
        let heartbeat = self.state.config().server.ticket_heartbeat_seconds;
        let mut unattended = Vec::new();
        for (id, w) in &mut self.waiting {
            if heartbeat > 0.0 && w.slot.unattended_for(now) > heartbeat {
                unattended.push(id.clone());
                continue;
            }
            if !w.slot.watched() || now - w.last_published < SEARCHING_UPDATE_SECONDS {
                continue;
            }
            w.last_published = now;
            let window = self.queues[w.queue].pool.window(id, now);
            // A requeued ticket keeps saying why it is searching again.
            let reason = w.slot.view().reason;
            w.slot.publish(TicketView {
                window,
                ..TicketView::searching(now - w.slot.entered_at, reason)
            });
        }
        for id in unattended {
            let Some(w) = self.waiting.remove(&id) else {
                continue;
            };
            let q = &mut self.queues[w.queue];
            q.pool.remove(&id);
            q.stats.tickets_waiting = q.pool.len() as u64;
            q.stats.tickets_expired += 1;
            q.stats.tickets_expired_heartbeat += 1;
            metrics::counter!(m::TICKETS_EXPIRED, "queue" => q.id.to_string(), "reason" => "heartbeat")
                .increment(1);
            self.state.end_ticket(
                &w.slot,
                TicketState::Expired,
                now,
                format!(
                    "heartbeat: no WatchTicket stream or call named the ticket for {heartbeat} s"
                ),
            );
            self.finished.push_back((now, id));
        }
    }

    pub(super) fn finish_tickets(&mut self, tickets: &[(usize, matching::Ticket)], now: f64) {
        // Their match is written in the same batch (or ended): no longer waiting in the store.
        let ids: Vec<_> = tickets.iter().map(|(_, t)| t.id.clone()).collect();
        self.state.forget_stored_tickets(&ids);
        self.finished
            .extend(tickets.iter().map(|(_, t)| (now, t.id.clone())));
    }

    pub(super) fn forget_finished(&mut self, now: f64) {
        let retention = self.state.config().server.finished_ticket_retention_seconds;
        for id in self.finished.due(now, retention) {
            // A ticket waiting again, or in a match not settled yet, finishes again later.
            let settled = self.state.ticket(&id).is_ok_and(|t| t.view().is_final());
            if settled && !self.waiting.contains_key(&id) {
                self.state.forget_ticket(&id);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_util::enter;
    use super::super::{Clock, Loop};
    use crate::ids::MatchId;
    use crate::ids::PlayerId;
    use crate::state::{MatchPhase, TicketState, unix_now};

    #[tokio::test]
    async fn a_player_banned_while_waiting_plays_no_match_and_the_other_waits_on() {
        let state = crate::state::test_util::state();
        let clock = Clock::start();
        let mut lp = Loop::new(state.clone(), clock.clone(), Vec::new());
        let a = enter(&mut lp, "a").await;
        let b = enter(&mut lp, "b").await;
        // Banned with the ticket still waiting (BanPlayer's cancel did not reach the loop).
        state
            .ban(crate::store::Ban {
                player: PlayerId::new("a"),
                until_unix: 0,
                reason: "cheating".into(),
                since_unix: unix_now(),
            })
            .unwrap();
        lp.tick();
        let view_a = state.ticket(&a).unwrap().view();
        assert_eq!(view_a.state, TicketState::Cancelled, "{view_a:?}");
        assert!(view_a.reason.contains("banned"), "{view_a:?}");
        assert!(view_a.assignment.is_none(), "{view_a:?}");
        let view_b = state.ticket(&b).unwrap().view();
        assert_eq!(view_b.state, TicketState::Searching, "{view_b:?}");
        assert!(lp.waiting.contains_key(&b) && !lp.waiting.contains_key(&a));

        // b is still in its pool: the next player meets it.
        let c = enter(&mut lp, "c").await;
        clock.advance(1.0);
        lp.tick();
        for t in [&b, &c] {
            let view = state.ticket(t).unwrap().view();
            assert_eq!(view.state, TicketState::Matched, "{view:?}");
        }
    }

    #[tokio::test]
    async fn a_cancel_before_the_start_names_only_the_tickets_back_in_a_pool() {
        let state = crate::state::test_util::state();
        let clock = Clock::start();
        let mut lp = Loop::new(state.clone(), clock.clone(), Vec::new());
        let a = enter(&mut lp, "a").await;
        let b = enter(&mut lp, "b").await;
        lp.tick();
        let view = state.ticket(&a).unwrap().view();
        let match_id = view.assignment.as_ref().unwrap().match_id.clone();
        // Banned while the match waits for a server: a's ticket does not wait again.
        state
            .ban(crate::store::Ban {
                player: PlayerId::new("a"),
                until_unix: 0,
                reason: "cheating".into(),
                since_unix: unix_now(),
            })
            .unwrap();
        let requeued = lp.cancel_match(&match_id, "").unwrap();
        assert_eq!(requeued, vec![b.clone()]);
        assert_eq!(
            state.ticket(&a).unwrap().view().state,
            TicketState::Cancelled
        );
        assert!(lp.waiting.contains_key(&b) && !lp.waiting.contains_key(&a));
    }

    #[tokio::test]
    async fn players_who_only_queued_are_forgotten_and_rated_ones_kept() {
        let state = crate::state::test_util::state();
        let clock = Clock::start();
        let mut lp = Loop::new(state.clone(), clock.clone(), Vec::new());
        // Two players meet and play: they have ratings from then on.
        enter(&mut lp, "rated-1").await;
        enter(&mut lp, "rated-2").await;
        lp.tick();
        let m = lp.unallocated.pop_front().expect("the two meet").slot;
        crate::state::test_util::win(&state, &m);
        // Players who only queue and cancel, each under a new id.
        for i in 0..1000 {
            let ticket = enter(&mut lp, &format!("p-{i}")).await;
            lp.cancel(&ticket);
        }
        assert_eq!(state.player_count(), 1002);

        // Past the finished tickets' retention: the tick forgets them and sweeps.
        clock.advance(state.config().server.finished_ticket_retention_seconds + 1.0);
        lp.tick();
        assert_eq!(state.player_count(), 2, "only the rated players are left");
        let queue = state.queue("queue", "1v1").unwrap();
        for p in ["rated-1", "rated-2"] {
            let (_, record) = state.player(&PlayerId::new(p), &queue.pool);
            assert_eq!(record.map(|r| r.games), Some(1), "{p}");
        }
    }

    #[tokio::test]
    async fn the_match_timeout_runs_on_the_loops_clock() {
        let state = crate::state::test_util::state();
        let (_matches, _) = state.register_server("gs-1:7777".into(), String::new(), 0);
        let clock = Clock::start();
        let mut lp = Loop::new(state.clone(), clock.clone(), Vec::new());
        let a = enter(&mut lp, "a").await;
        enter(&mut lp, "b").await;
        lp.tick();
        let view = state.ticket(&a).unwrap().view();
        let match_id = view.assignment.expect("a and b meet").match_id.clone();
        let m = state.match_slot(&match_id).unwrap();
        assert_eq!(m.phase(), MatchPhase::Allocated);
        state.start_match(&m).unwrap().unwrap();

        // A second later on the loop's clock (the sweep reads no other: a step of the system
        // clock, however large, cancels nothing).
        let timeout = state.config().server.match_timeout_seconds;
        clock.advance(1.0);
        lp.sweep_stale(clock.now());
        assert_eq!(
            state.match_slot(&match_id).map(|m| m.phase()),
            Ok(MatchPhase::Started),
            "a match inside its timeout stays"
        );

        clock.advance(timeout);
        lp.sweep_stale(clock.now());
        assert!(state.match_slot(&match_id).is_err(), "timed out");
        let view = state.ticket(&a).unwrap().view();
        assert_eq!(view.state, TicketState::Cancelled, "{view:?}");
        assert_eq!(view.reason, "the match timed out with no result");
    }

    #[tokio::test]
    async fn a_restored_match_counts_its_age_off_the_wall_clock_once_then_off_the_loops_clock() {
        let clock = Clock::start();
        let unix = unix_now();
        let (state, restored) = crate::state::test_util::restored_1v1s(
            "[server]\nmatch_timeout_seconds = 600.0\n",
            "gs-1:7777",
            &[
                ("m-late", unix - 590.0),
                // Written by an owner whose clock was an hour ahead of this node's.
                ("m-ahead", unix + 3600.0),
            ],
            clock.now(),
        );
        assert_eq!(restored.len(), 2);
        let mut lp = Loop::new(state.clone(), clock.clone(), restored);
        let phase = |id: &str| state.match_slot(&MatchId::new(id)).map(|m| m.phase());

        lp.sweep_stale(clock.now());
        assert_eq!(phase("m-late"), Ok(MatchPhase::Allocated));
        assert_eq!(phase("m-ahead"), Ok(MatchPhase::Allocated));

        clock.advance(11.0);
        lp.sweep_stale(clock.now());
        assert!(
            phase("m-late").is_err(),
            "590 s before the restore and 11 s since"
        );
        assert_eq!(phase("m-ahead"), Ok(MatchPhase::Allocated));

        clock.advance(590.0);
        lp.sweep_stale(clock.now());
        assert!(
            phase("m-ahead").is_err(),
            "a stored time ahead of the clock counts as formed at the restore"
        );
    }

    /// The sweep ends the parties idle past their expiry at the loop's `now`, and only those
    /// (read from the store, which only the sweep changes here).
    #[tokio::test]
    async fn the_sweep_ends_the_parties_idle_past_their_expiry_on_the_loops_clock() {
        let state = crate::state::test_util::state_with("[parties]\nidle_expiry_seconds = 3600\n");
        let clock = Clock::start();
        let mut lp = Loop::new(state.clone(), clock.clone(), Vec::new());
        let old = state.create_party(&"a".into(), clock.now()).unwrap();
        clock.advance(3000.0);
        let fresh = state.create_party(&"b".into(), clock.now()).unwrap();
        clock.advance(599.0);
        let stored = || {
            let mut ids: Vec<String> = (state.store().load_rosters().unwrap().into_iter())
                .map(|r| r.party_id.to_string())
                .collect();
            ids.sort();
            ids
        };
        let both = {
            let mut ids = vec![old.party_id.to_string(), fresh.party_id.to_string()];
            ids.sort();
            ids
        };

        // Half a second later on the loop's clock, which is all the sweep reads.
        clock.advance(0.5);
        lp.sweep_stale(clock.now());
        assert_eq!(stored(), both, "idle 3599.5 s and 599.5 s");

        // Past the expiry on the loop's clock, only the party idle that long ends.
        clock.advance(1.0);
        lp.sweep_stale(clock.now());
        assert_eq!(
            stored(),
            vec![fresh.party_id.to_string()],
            "only the party idle 3600.5 s ends"
        );
        state
            .create_party(&"a".into(), clock.now())
            .expect("a is in no party any more");
    }
}

//! Allocation: formed matches wait here for a game server of their region, and go back to the
//! queue when none takes them in time.

use std::collections::VecDeque;
use std::sync::Arc;

use super::Loop;
use crate::ids::MatchId;
use crate::matching::{self};
use crate::state::MatchSlot;
use crate::telemetry as m;

/// A formed match waiting for a game server, with its tickets so they can return to the queue.
pub(super) struct Unallocated {
    pub(super) slot: Arc<MatchSlot>,
    pub(super) tickets: Vec<(usize, matching::Ticket)>,
    /// Seconds on the loop's clock since when a server may take it (formed, or passed its
    /// ready-check): the allocation timeout counts from here, so a step of the wall clock
    /// neither dissolves waiting matches early nor keeps them waiting late.
    pub(super) since: f64,
    /// The match's region (fixed when it formed).
    pub(super) region: Option<String>,
}

/// When a match restored at start-up or by a new owner of the queues started to wait, on the
/// loop's clock at `now`: when it formed, as the restore dated it on the loop's clock
/// ([`crate::state::State::recover`], from the store's clock), at most `timeout` ago (an age past
/// the timeout dissolves it on the first tick either way).
pub(super) fn restored_since(now: f64, formed_at: f64, timeout: f64) -> f64 {
    formed_at.max(now - timeout)
}

impl Loop {
    /// Offers waiting matches to servers; returns the ones allocated now (to be persisted).
    pub(super) fn allocate(
        &mut self,
        now: f64,
    ) -> (Vec<Arc<MatchSlot>>, Vec<crate::state::Placement>) {
        let mut allocated = Vec::new();
        let mut placements = Vec::new();
        let timeout = self.state.config().server.allocation_timeout_seconds;
        let pending = self.unallocated.len();
        // Once a match finds no server with room, later matches of the same region (or any
        // match, if a region-less one failed: it could have gone anywhere) would fail too; don't
        // retry them all every tick while no server is serving. The queue is in `since`
        // order, so once nothing can be placed, the first match still inside its timeout ends the
        // pass: every match behind it is younger. (Walking the whole backlog each tick, locking
        // each match, was the largest cost of a server taking tickets with no game server
        // connected.)
        let mut nowhere = false;
        let mut full_regions: Vec<Option<String>> = Vec::new();
        // Matches that stay, in their order; they go back in front of the ones not visited.
        let mut kept: VecDeque<Unallocated> = VecDeque::new();
        // Matches no server took in time this pass, and the last of them.
        let mut dissolved = 0u64;
        let mut last_dissolved = None;
        for _ in 0..pending {
            let Some(front) = self.unallocated.front() else {
                break;
            };
            if nowhere && now - front.since < timeout {
                break;
            }
            let Some(u) = self.unallocated.pop_front() else {
                break;
            };
            let region = u.region.clone();
            let hopeless = nowhere || full_regions.contains(&region);
            if !hopeless {
                match self.state.try_allocate(&u.slot) {
                    crate::state::Allocation::Placed(placement) => {
                        // Its tickets are finished from here: their retention counts from now,
                        // not from when the match formed, so a match that waits for a server
                        // longer than the retention still finds its tickets to requeue.
                        self.finish_tickets(&u.tickets, now);
                        // Kept until it starts: a cancel before then requeues them.
                        self.unstarted.insert(u.slot.id.clone(), u.tickets);
                        allocated.push(u.slot);
                        placements.push(placement);
                        continue;
                    }
                    crate::state::Allocation::Ended => {
                        self.finish_tickets(&u.tickets, now);
                        continue;
                    }
                    crate::state::Allocation::NoServer => {}
                }
            }
            if !hopeless {
                match region {
                    None => nowhere = true,
                    r => full_regions.push(r),
                }
            }
            if now - u.since < timeout {
                kept.push_back(u);
                continue;
            }
            if !self.state.dissolve_unallocated(&u.slot, now) {
                // Ended meanwhile (a result or a cancel): its tickets are done.
                self.finish_tickets(&u.tickets, now);
                continue;
            }
            dissolved += 1;
            last_dissolved = Some(u.slot.id.clone());
            for (qi, ticket) in u.tickets {
                if let Ok(slot) = self.state.ticket(&ticket.id) {
                    self.requeue(qi, slot, ticket);
                }
            }
        }
        while let Some(u) = kept.pop_back() {
            self.unallocated.push_front(u);
        }
        // With no game server connected this happens every tick: one line per interval.
        static DISSOLVED: m::LogLimit = m::LogLimit::new(std::time::Duration::from_secs(10));
        if let Some(matches) = DISSOLVED.note(dissolved, std::time::Instant::now()) {
            tracing::info!(
                matches,
                last_match_id = %last_dissolved.map(|id| id.to_string()).unwrap_or_default(),
                "no game server took matches in time; their tickets were requeued"
            );
        }
        m::engine_gauge(m::MATCHES_UNALLOCATED, self.state.shard())
            .set(self.unallocated.len() as f64);
        (allocated, placements)
    }

    /// Dissolves the allocated matches whose write did not flush (no server got them; see
    /// [`crate::state::State::deliver_when_durable`]), their tickets back at the front of their
    /// queues. One that started or ended meanwhile is left alone, and so is every one on a
    /// cluster node whose lease ran out: the write may have landed, and the next owner carries
    /// on from what the store holds.
    pub(super) fn requeue_undelivered(&mut self, ids: &[MatchId]) {
        if !self.state.may_act() {
            return;
        }
        for id in ids {
            let Ok(slot) = self.state.match_slot(id) else {
                continue;
            };
            if slot.phase() != crate::state::MatchPhase::Allocated {
                continue;
            }
            let reason = "the match could not be stored, so no game server got it";
            if let Some(tickets) = self.requeue_unstarted(&slot, reason, "store_failure") {
                tracing::warn!(match_id = %id, tickets = tickets.len(), "a match that could not be stored was dissolved; tickets requeued");
            }
        }
    }

    /// Writes the matches no server has taken yet, so a graceful restart keeps them (and a
    /// result reported for one without auth still applies after it). Ready-checks in progress
    /// are not matches yet and are not written.
    pub(super) fn persist_unallocated(&self) {
        let formed: Vec<Arc<MatchSlot>> = self
            .unallocated
            .iter()
            .filter(|u| u.slot.phase() == crate::state::MatchPhase::Formed)
            .map(|u| u.slot.clone())
            .collect();
        self.state.persist_matches(&formed);
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_util::enter;
    use super::super::{Clock, Loop};
    use crate::ids::{MatchId, PlayerId};
    use crate::state::{MatchPhase, PlayerStatus, TicketState};

    #[tokio::test]
    async fn the_allocation_timeout_runs_on_the_loops_clock() {
        let state = crate::state::test_util::state();
        let clock = Clock::start();
        let mut lp = Loop::new(state.clone(), clock.clone(), Vec::new());
        let a = enter(&mut lp, "a").await;
        let b = enter(&mut lp, "b").await;
        lp.tick();
        assert_eq!(
            lp.unallocated.len(),
            1,
            "a and b meet; no game server serves"
        );
        let match_id = lp.unallocated[0].slot.id.clone();

        // The wall clock does not move the timeout: only the loop's clock does.
        let timeout = state.config().server.allocation_timeout_seconds;
        clock.advance(timeout - 1.0);
        lp.tick();
        assert_eq!(
            state.match_slot(&match_id).map(|m| m.phase()),
            Ok(MatchPhase::Formed),
            "still inside the allocation timeout"
        );

        clock.advance(2.0);
        lp.tick();
        assert!(state.match_slot(&match_id).is_err(), "dissolved");
        assert!(lp.unallocated.is_empty());
        for t in [&a, &b] {
            let view = state.ticket(t).unwrap().view();
            assert_eq!(view.state, TicketState::Searching, "{t}: {view:?}");
            assert!(
                view.reason
                    .contains("no game server took the match in time"),
                "{t}: {view:?}"
            );
            assert!(lp.waiting.contains_key(t), "{t} is back in the queue");
        }
    }

    #[tokio::test]
    async fn a_match_whose_write_does_not_flush_is_dissolved_and_its_tickets_wait_again() {
        let memory = std::sync::Arc::new(crate::store::MemoryStore::default());
        let state = crate::state::test_util::state_on(memory.clone());
        // Room for one match.
        let (mut stream, _) = state.register_server("gs-1:7777".into(), String::new(), 1);
        let clock = Clock::start();
        let mut lp = Loop::new(state.clone(), clock.clone(), Vec::new());
        let a = enter(&mut lp, "a").await;
        let b = enter(&mut lp, "b").await;
        memory.fail_flushes(Some(crate::store::FlushFailure::Disk));
        lp.tick();
        let view = state.ticket(&a).unwrap().view();
        let match_id = view.assignment.expect("a and b meet").match_id.clone();
        // Bounded, so that a flush failure that is never reported fails the test.
        let reported = std::time::Duration::from_secs(10);
        let undelivered = tokio::time::timeout(reported, lp.undelivered.recv())
            .await
            .expect("the failed flush reports its match")
            .unwrap();
        assert_eq!(undelivered, std::slice::from_ref(&match_id));
        memory.fail_flushes(None);
        lp.requeue_undelivered(&undelivered);

        assert!(stream.try_recv().is_err(), "no server got it");
        assert!(state.match_slot(&match_id).is_err(), "dissolved");
        for t in [&a, &b] {
            let view = state.ticket(t).unwrap().view();
            assert_eq!(view.state, TicketState::Searching, "{t}: {view:?}");
            assert!(view.reason.contains("could not be stored"), "{t}: {view:?}");
            assert!(lp.waiting.contains_key(t), "{t} is back in the queue");
        }
        // They meet again, on the server whose room the dissolved match gave back.
        clock.advance(1.0);
        lp.tick();
        let view = state.ticket(&a).unwrap().view();
        let again = view
            .assignment
            .expect("a and b meet again")
            .match_id
            .clone();
        assert_ne!(again, match_id);
        assert_eq!(
            state.match_slot(&again).map(|m| m.phase()),
            Ok(MatchPhase::Allocated)
        );
        assert_eq!(stream.recv().await.unwrap().match_id, again);
    }

    #[tokio::test]
    async fn a_restored_match_waits_for_a_server_at_most_the_allocation_timeout_from_its_restore() {
        let clock = Clock::start();
        let unix = crate::state::unix_now();
        let (state, restored) = crate::state::test_util::restored_1v1s(
            "",
            "",
            &[
                // Written by an owner whose clock was an hour behind this node's.
                ("m-old", unix - 3600.0),
                ("m-recent", unix - 20.0),
                // Written by an owner whose clock was an hour ahead of this node's.
                ("m-ahead", unix + 3600.0),
            ],
            clock.now(),
        );
        assert_eq!(restored.len(), 3);
        let mut lp = Loop::new(state.clone(), clock.clone(), restored);
        let phase = |id: &str| state.match_slot(&MatchId::new(id)).map(|m| m.phase());

        lp.tick();
        assert!(
            phase("m-old").is_err(),
            "past its timeout: dissolved at once"
        );
        assert_eq!(
            state.player(&PlayerId::new("a0"), "1v1").0,
            PlayerStatus::Idle
        );
        assert_eq!(phase("m-recent"), Ok(MatchPhase::Formed));
        assert_eq!(phase("m-ahead"), Ok(MatchPhase::Formed));

        // The recent one had 20 s of its timeout behind it; the one from the future none.
        let timeout = state.config().server.allocation_timeout_seconds;
        clock.advance(timeout - 19.0);
        lp.tick();
        assert!(phase("m-recent").is_err(), "its timeout is up");
        assert_eq!(phase("m-ahead"), Ok(MatchPhase::Formed));

        clock.advance(20.0);
        lp.tick();
        assert!(
            phase("m-ahead").is_err(),
            "a stored time ahead of the clock counts as formed now, not an hour from now"
        );
        assert!(lp.unallocated.is_empty());
    }
}

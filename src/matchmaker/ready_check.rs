//! Ready-checks: a formed match waits for every ticket to accept; a decline or the deadline
//! dissolves it, requeueing those who accepted.

use std::sync::Arc;

use super::{Loop, Unallocated};
use crate::ids::{MatchId, TicketId};
use crate::matching::{self};
use crate::rejection::{MatchRefusal, Rejection, TicketRefusal};
use crate::state::{MatchSlot, Release, TicketSlot, TicketState};
use crate::telemetry as m;

/// A formed match waiting for every ticket to accept.
pub(super) struct ReadyCheck {
    pub(super) slot: Arc<MatchSlot>,
    pub(super) queue: usize,
    /// Each ticket, its optimizer entry (to return it to the pool) and whether it accepted.
    pub(super) tickets: Vec<(Arc<TicketSlot>, matching::Ticket, bool)>,
    pub(super) deadline: f64,
}

impl ReadyCheck {
    fn progress(&self) -> Vec<(Arc<TicketSlot>, bool)> {
        self.tickets
            .iter()
            .map(|(t, _, accepted)| (t.clone(), *accepted))
            .collect()
    }
}

impl Loop {
    /// A ticket's AcceptMatch. Accepting is idempotent; declining (or cancelling the ticket)
    /// dissolves the match.
    pub(super) fn answer_ready_check(
        &mut self,
        ticket: &TicketId,
        match_id: &MatchId,
        accept: bool,
    ) -> Result<TicketState, Rejection> {
        let slot = self.state.ticket(ticket)?;
        // A ticket answers only its own match's ready-check: another match's, running or not,
        // gets the same refusal, so the answer never tells that some other match exists.
        let in_ready_check = self.ready.get_mut(match_id).and_then(|rc| {
            let i = rc.tickets.iter().position(|(t, _, _)| t.id == *ticket)?;
            Some((rc, i))
        });
        let Some((rc, i)) = in_ready_check else {
            // No ready-check of this ticket's: tell the ticket where it stands.
            let view = slot.view();
            let in_it = view
                .assignment
                .as_ref()
                .is_some_and(|a| a.match_id == *match_id);
            return match (in_it, view.state, accept) {
                (true, TicketState::Matched, true) => Ok(TicketState::Matched),
                (true, TicketState::Matched, false) => Err(Rejection::for_match(
                    match_id,
                    MatchRefusal::PassedReadyCheck,
                )),
                _ => Err(Rejection::Ticket {
                    ticket: ticket.clone(),
                    refusal: TicketRefusal::NoReadyCheck {
                        match_id: match_id.clone(),
                        state: view.state.name(),
                    },
                }),
            };
        };
        if !accept {
            self.decline(match_id, ticket);
            return Ok(TicketState::Cancelled);
        }
        rc.tickets[i].2 = true;
        if !rc.tickets.iter().all(|(_, _, a)| *a) {
            let left = rc.deadline - self.clock.now();
            self.state.publish_ready(&rc.progress(), left);
            return Ok(TicketState::Matched);
        }
        let rc = self.remove_ready(match_id).expect("present above");
        let q = &mut self.queues[rc.queue];
        q.stats.ready_checks_passed += 1;
        q.stats.ready_tickets_accepted += rc.tickets.len() as u64;
        metrics::counter!(m::READY_CHECKS, "queue" => q.id.to_string(), "outcome" => "passed")
            .increment(1);
        if self.state.pass_ready_check(&rc.slot) {
            let now = self.clock.now();
            self.state.publish_ready(&rc.progress(), rc.deadline - now);
            let queue = rc.queue;
            self.unallocated.push_back(Unallocated {
                region: rc.slot.assignment().region.clone(),
                slot: rc.slot,
                tickets: rc.tickets.into_iter().map(|(_, t, _)| (queue, t)).collect(),
                since: now,
            });
        }
        Ok(TicketState::Matched)
    }

    pub(super) fn remove_ready(&mut self, match_id: &MatchId) -> Option<ReadyCheck> {
        let rc = self.ready.remove(match_id)?;
        for (t, _, _) in &rc.tickets {
            self.ready_by_ticket.remove(&t.id);
        }
        Some(rc)
    }

    /// `decliner` declined (or cancelled its ticket): the match dissolves, the decliner's
    /// ticket is CANCELLED, every other ticket goes back to the front of its queue.
    pub(super) fn decline(&mut self, match_id: &MatchId, decliner: &TicketId) {
        let Some(rc) = self.remove_ready(match_id) else {
            return;
        };
        let now = self.clock.now();
        let q = &mut self.queues[rc.queue];
        q.stats.ready_checks_declined += 1;
        q.stats.ready_tickets_accepted += rc.tickets.iter().filter(|t| t.2).count() as u64;
        q.stats.ready_tickets_refused += rc.tickets.iter().filter(|t| !t.2).count() as u64;
        metrics::counter!(m::READY_CHECKS, "queue" => q.id.to_string(), "outcome" => "declined")
            .increment(1);
        let dissolved = self.state.dissolve_ready_check(&rc.slot, |t| {
            if t.id == *decliner {
                Release::End {
                    state: TicketState::Cancelled,
                    reason: "declined the match".into(),
                    wait_seconds: now - t.entered_at,
                }
            } else {
                Release::Requeue {
                    reason: "another player declined the match; back at the front of the queue"
                        .into(),
                    wait_seconds: now - t.entered_at,
                }
            }
        });
        if dissolved {
            for (slot, entry, _) in rc.tickets {
                if slot.id == *decliner {
                    // Stored while it waited (a ready-check writes no match): gone with it.
                    self.state
                        .forget_stored_tickets(std::slice::from_ref(&slot.id));
                    self.finished.push_back((now, slot.id.clone()));
                } else {
                    self.requeue(rc.queue, slot, entry);
                }
            }
        }
    }

    /// Ready-checks past their deadline: tickets that accepted go back to the front of the
    /// queue, the others EXPIRE.
    pub(super) fn expire_ready_checks(&mut self, now: f64) {
        let due: Vec<MatchId> = self
            .ready
            .iter()
            .filter(|(_, rc)| now >= rc.deadline)
            .map(|(id, _)| id.clone())
            .collect();
        for id in due {
            let Some(rc) = self.remove_ready(&id) else {
                continue;
            };
            let q = &mut self.queues[rc.queue];
            let label = q.id.to_string();
            let refused = rc.tickets.iter().filter(|t| !t.2).count() as u64;
            q.stats.ready_checks_timed_out += 1;
            q.stats.ready_tickets_accepted += rc.tickets.len() as u64 - refused;
            q.stats.ready_tickets_refused += refused;
            q.stats.tickets_expired += refused;
            metrics::counter!(m::READY_CHECKS, "queue" => label.clone(), "outcome" => "timed_out")
                .increment(1);
            metrics::counter!(m::TICKETS_EXPIRED, "queue" => label, "reason" => "ready_check")
                .increment(refused);
            let seconds = q.ready_check_seconds;
            let accepted: Vec<TicketId> = rc
                .tickets
                .iter()
                .filter(|t| t.2)
                .map(|t| t.0.id.clone())
                .collect();
            let dissolved = self.state.dissolve_ready_check(&rc.slot, |t| {
                if accepted.contains(&t.id) {
                    Release::Requeue {
                        reason: "another player did not accept the match in time; back at the front of the queue".into(),
                        wait_seconds: now - t.entered_at,
                    }
                } else {
                    Release::End {
                        state: TicketState::Expired,
                        reason: format!("did not accept the match within {seconds} s"),
                        wait_seconds: now - t.entered_at,
                    }
                }
            });
            if dissolved {
                for (slot, entry, ok) in rc.tickets {
                    if ok {
                        self.requeue(rc.queue, slot, entry);
                    } else {
                        self.state
                            .forget_stored_tickets(std::slice::from_ref(&slot.id));
                        self.finished.push_back((now, slot.id.clone()));
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_util::{enter, stored};
    use super::super::{Clock, Loop};
    use crate::state::{MatchPhase, TicketState};

    #[tokio::test]
    async fn answering_another_matchs_ready_check_is_refused_as_if_it_had_none() {
        let state =
            crate::state::test_util::state_with("[queues.1v1]\nready_check_seconds = 30.0\n");
        let clock = Clock::start();
        let mut lp = Loop::new(state.clone(), clock.clone(), Vec::new());
        let a = enter(&mut lp, "a").await;
        enter(&mut lp, "b").await;
        lp.tick();
        let theirs = lp.ready_by_ticket.get(&a).expect("a and b meet").clone();
        let mine = enter(&mut lp, "c").await;
        let none = crate::ids::MatchId::new("m-none");
        for accept in [true, false] {
            let refusal = |m: &crate::ids::MatchId| crate::rejection::Rejection::Ticket {
                ticket: mine.clone(),
                refusal: crate::rejection::TicketRefusal::NoReadyCheck {
                    match_id: m.clone(),
                    state: "SEARCHING",
                },
            };
            assert_eq!(
                lp.answer_ready_check(&mine, &none, accept),
                Err(refusal(&none))
            );
            assert_eq!(
                lp.answer_ready_check(&mine, &theirs, accept),
                Err(refusal(&theirs)),
                "the same answer as for a match with no ready-check"
            );
        }
        assert!(lp.ready.contains_key(&theirs), "their ready-check goes on");
    }

    #[tokio::test]
    async fn a_ready_check_older_than_the_match_timeout_still_ends_at_its_own_deadline() {
        let state =
            crate::state::test_util::state_with("[queues.1v1]\nready_check_seconds = 30.0\n");
        let clock = Clock::start();
        let mut lp = Loop::new(state.clone(), clock.clone(), Vec::new());
        let a = enter(&mut lp, "a").await;
        let b = enter(&mut lp, "b").await;
        lp.tick();
        let match_id = lp.ready_by_ticket.get(&a).expect("a and b meet").clone();
        assert_eq!(
            lp.answer_ready_check(&a, &match_id, true),
            Ok(TicketState::Matched)
        );

        // A sweep as if the match were past the match timeout (a match could be, with a
        // ready-check longer than that timeout) before its ready-check's deadline.
        let timeout = state.config().server.match_timeout_seconds;
        lp.sweep_stale(clock.now() + timeout + 1.0);
        assert_eq!(
            state.match_slot(&match_id).map(|m| m.phase()),
            Ok(MatchPhase::ReadyCheck),
            "the match timeout leaves a match in its ready-check alone"
        );

        clock.advance(30.0);
        lp.tick();
        assert!(lp.ready.is_empty() && lp.ready_by_ticket.is_empty());
        assert!(state.match_slot(&match_id).is_err());
        let stats = &lp.queues[lp.queue_index[&state.queue("queue", "1v1").unwrap().id]].stats;
        assert_eq!(
            (stats.ready_checks_timed_out, stats.tickets_expired),
            (1, 1)
        );
        let view_a = state.ticket(&a).unwrap().view();
        assert_eq!(view_a.state, TicketState::Searching, "{view_a:?}");
        assert!(lp.waiting.contains_key(&a), "a accepted: back in the queue");
        let view_b = state.ticket(&b).unwrap().view();
        assert_eq!(view_b.state, TicketState::Expired, "{view_b:?}");
        assert!(
            view_b.reason.contains("did not accept the match"),
            "{view_b:?}"
        );
        assert_eq!(
            stored(&state),
            std::slice::from_ref(&a),
            "b stopped waiting: no new owner puts it back in the queue"
        );

        let retention = state.config().server.finished_ticket_retention_seconds;
        clock.advance(retention);
        lp.tick();
        assert!(
            state.ticket(&b).is_err(),
            "b is forgotten after the retention"
        );
    }
}

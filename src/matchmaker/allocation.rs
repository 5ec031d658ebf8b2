//! Allocation: formed matches wait here for a game server of their region, and go back to the
//! queue when none takes them in time.

use std::collections::VecDeque;
use std::sync::Arc;

use super::Loop;
use crate::matching::{self};
use crate::state::MatchSlot;
use crate::telemetry as m;

/// A formed match waiting for a game server, with its tickets so they can return to the queue.
pub(super) struct Unallocated {
    pub(super) slot: Arc<MatchSlot>,
    pub(super) tickets: Vec<(usize, matching::Ticket)>,
    /// Unix seconds since when a server may take it (formed, or passed its ready-check): the
    /// allocation timeout counts from here.
    pub(super) since_unix: f64,
    /// The match's region (fixed when it formed).
    pub(super) region: Option<String>,
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
        let unix = crate::state::unix_now();
        let pending = self.unallocated.len();
        // Once a match finds no server with room, later matches of the same region (or any
        // match, if a region-less one failed: it could have gone anywhere) would fail too; don't
        // retry them all every tick while no server is serving. The queue is in `since_unix`
        // order, so once nothing can be placed, the first match still inside its timeout ends the
        // pass: every match behind it is younger. (Walking the whole backlog each tick, locking
        // each match, was the largest cost of a server taking tickets with no game server
        // connected.)
        let mut nowhere = false;
        let mut full_regions: Vec<Option<String>> = Vec::new();
        // Matches that stay, in their order; they go back in front of the ones not visited.
        let mut kept: VecDeque<Unallocated> = VecDeque::new();
        for _ in 0..pending {
            let Some(front) = self.unallocated.front() else {
                break;
            };
            if nowhere && unix - front.since_unix < timeout {
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
            if unix - u.since_unix < timeout {
                kept.push_back(u);
                continue;
            }
            if !self.state.dissolve_unallocated(&u.slot, now) {
                // Ended meanwhile (a result or a cancel): its tickets are done.
                self.finish_tickets(&u.tickets, now);
                continue;
            }
            tracing::info!(match_id = %u.slot.id, "no game server took the match in time; tickets requeued");
            for (qi, ticket) in u.tickets {
                if let Ok(slot) = self.state.ticket(&ticket.id) {
                    self.requeue(qi, slot, ticket);
                }
            }
        }
        while let Some(u) = kept.pop_back() {
            self.unallocated.push_front(u);
        }
        metrics::gauge!(m::MATCHES_UNALLOCATED).set(self.unallocated.len() as f64);
        (allocated, placements)
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

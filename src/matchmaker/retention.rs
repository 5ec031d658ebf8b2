//! Finished tickets are kept (readable by `WatchTicket`, `GetActiveTicket`) for
//! `server.finished_ticket_retention_seconds` after they last finished. A ticket can finish
//! more than once: a match cancelled before it started puts its tickets back in their queues,
//! and they finish again later. Only the last finish counts, so a ticket is never forgotten
//! while it waits or plays again.

use std::collections::{HashMap, VecDeque};

use crate::ids::TicketId;
use crate::matching::IdHash;

/// Finished tickets in the order they finished, with each one's last finish. Every matched
/// ticket passes through here, and the map holds the whole retention's worth of them (minutes
/// of tickets): keyed by server-minted ids, it takes the fast id hasher.
#[derive(Default)]
pub(super) struct Retained {
    order: VecDeque<(f64, TicketId)>,
    latest: HashMap<TicketId, f64, IdHash>,
}

impl Retained {
    /// Ticket `id` finished at `at` (clock seconds, never decreasing).
    pub fn push_back(&mut self, (at, id): (f64, TicketId)) {
        self.latest.insert(id.clone(), at);
        self.order.push_back((at, id));
    }

    /// The tickets whose last finish is at least `retention` old at `now`, each once.
    pub fn due(&mut self, now: f64, retention: f64) -> Vec<TicketId> {
        let mut due = Vec::new();
        while let Some((at, _)) = self.order.front() {
            if now - at < retention {
                break;
            }
            let Some((at, id)) = self.order.pop_front() else {
                break;
            };
            if self.latest.get(&id) == Some(&at) {
                self.latest.remove(&id);
                due.push(id);
            }
        }
        due
    }
}

impl Extend<(f64, TicketId)> for Retained {
    fn extend<I: IntoIterator<Item = (f64, TicketId)>>(&mut self, items: I) {
        for item in items {
            self.push_back(item);
        }
    }
}

impl FromIterator<(f64, TicketId)> for Retained {
    fn from_iter<I: IntoIterator<Item = (f64, TicketId)>>(items: I) -> Self {
        let mut retained = Self::default();
        retained.extend(items);
        retained
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(s: &str) -> TicketId {
        TicketId::new(s)
    }

    #[test]
    fn a_ticket_that_finished_again_is_kept_for_the_retention_after_its_last_finish() {
        let mut r = Retained::default();
        // Matched at 0; its match cancelled before it started, matched again at 91.
        r.push_back((0.0, id("t-1")));
        r.push_back((10.0, id("t-2")));
        r.push_back((91.0, id("t-1")));
        assert!(r.due(119.0, 120.0).is_empty());
        assert_eq!(
            r.due(130.0, 120.0),
            [id("t-2")],
            "t-1's first finish no longer counts"
        );
        assert!(r.due(210.0, 120.0).is_empty());
        assert_eq!(r.due(211.0, 120.0), [id("t-1")]);
        assert!(r.due(1e9, 120.0).is_empty(), "each ticket is due once");
    }
}

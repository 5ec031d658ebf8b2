//! Registered game servers (`ServeMatches` streams) and the round-robin choice among them.

use std::collections::BTreeMap;
use std::sync::Arc;

use tokio::sync::mpsc;

use super::Assignment;

/// One `ServeMatches` stream.
#[derive(Debug)]
pub struct ServerHandle {
    pub address: String,
    pub region: String,
    /// Matches it can host at once; 0 = unlimited.
    pub capacity: u32,
    /// Matches handed to it (completion frees capacity once results land).
    pub assigned: u32,
    tx: mpsc::Sender<Arc<Assignment>>,
}

/// A match placed on a server, with room reserved in the server's stream, not yet sent: the
/// loop sends it once the match is durable, so a game server never holds a match that a crash
/// could lose (and then refuse its result).
pub struct Placement {
    pub assignment: Arc<Assignment>,
    permit: mpsc::OwnedPermit<Arc<Assignment>>,
}

impl Placement {
    /// Hands the match to the server's stream (room was reserved when it was placed).
    pub fn deliver(self) {
        self.permit.send(self.assignment);
    }
}

impl std::fmt::Debug for Placement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Placement")
            .field("match_id", &self.assignment.match_id)
            .field("server", &self.assignment.server_address)
            .finish()
    }
}

impl ServerHandle {
    /// Wraps the sending side of a server's stream.
    pub fn new(
        address: String,
        region: String,
        capacity: u32,
        tx: mpsc::Sender<Arc<Assignment>>,
    ) -> Self {
        Self {
            address,
            region,
            capacity,
            assigned: 0,
            tx,
        }
    }

    fn has_room(&self) -> bool {
        self.capacity == 0 || self.assigned < self.capacity
    }
}

/// Servers grouped by region, with a round-robin cursor per region.
#[derive(Debug, Default)]
pub struct ServerRegistry {
    servers: Vec<ServerHandle>,
    cursor: BTreeMap<String, usize>,
}

impl ServerRegistry {
    /// Adds a server; a re-registration of the same address replaces the old stream. Streams
    /// that closed since are dropped too: a server that comes and goes under fresh addresses
    /// while no match is allocated (when [`ServerRegistry::offer`] drops them) leaves nothing.
    pub fn register(&mut self, server: ServerHandle) {
        self.servers
            .retain(|s| s.address != server.address && !s.tx.is_closed());
        self.servers.push(server);
    }

    /// Removes every server (their streams end).
    pub fn clear(&mut self) {
        self.servers.clear();
    }

    /// Frees one unit of capacity on a server (a match it hosted completed or was cancelled).
    pub fn release(&mut self, address: &str) {
        if let Some(s) = self.servers.iter_mut().find(|s| s.address == address) {
            s.assigned = s.assigned.saturating_sub(1);
        }
    }

    /// The stream of the connected server at `address`.
    pub fn sender(&self, address: &str) -> Option<mpsc::Sender<Arc<Assignment>>> {
        self.servers
            .iter()
            .find(|s| s.address == address && !s.tx.is_closed())
            .map(|s| s.tx.clone())
    }

    /// Connected servers.
    pub fn len(&self) -> usize {
        self.servers.len()
    }

    /// No connected server.
    pub fn is_empty(&self) -> bool {
        self.servers.is_empty()
    }

    /// Sends `assignment` to the next server of its region (any region when the match has none)
    /// that is connected, has room and has buffer space; returns the server's copy (with its
    /// address), which is the match's assignment from now on.
    pub fn offer(&mut self, assignment: &Arc<Assignment>) -> Option<Placement> {
        self.servers.retain(|s| !s.tx.is_closed());
        let region = assignment.region.clone().unwrap_or_default();
        let candidates: Vec<usize> = (0..self.servers.len())
            .filter(|&i| region.is_empty() || self.servers[i].region == region)
            .collect();
        if candidates.is_empty() {
            return None;
        }
        let cursor = self.cursor.entry(region).or_insert(0);
        for step in 0..candidates.len() {
            let i = candidates[(*cursor + step) % candidates.len()];
            let server = &mut self.servers[i];
            // Check room and buffer before building the server's copy of the assignment.
            if !server.has_room() || server.tx.capacity() == 0 {
                continue;
            }
            let allocated = Arc::new(Assignment {
                server_address: server.address.clone(),
                ..(**assignment).clone()
            });
            if let Ok(permit) = server.tx.clone().try_reserve_owned() {
                server.assigned += 1;
                *cursor = (*cursor + step + 1) % candidates.len();
                return Some(Placement {
                    assignment: allocated,
                    permit,
                });
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::{MatchId, QueueId};

    fn assignment(region: Option<&str>) -> Arc<Assignment> {
        Arc::new(Assignment {
            match_id: MatchId::from("m"),
            queue: QueueId::from("1v1"),
            teams: vec![],
            win_probability: vec![],
            region: region.map(str::to_owned),
            server_address: String::new(),
            parties: vec![],
            backfill: vec![],
            left: vec![],
            attributes: Default::default(),
        })
    }

    fn server(
        registry: &mut ServerRegistry,
        address: &str,
        region: &str,
        capacity: u32,
    ) -> mpsc::Receiver<Arc<Assignment>> {
        let (tx, rx) = mpsc::channel(4);
        registry.register(ServerHandle::new(
            address.into(),
            region.into(),
            capacity,
            tx,
        ));
        rx
    }

    #[test]
    fn round_robin_within_the_region() {
        let mut r = ServerRegistry::default();
        let mut a = server(&mut r, "a:1", "eu", 0);
        let mut b = server(&mut r, "b:1", "eu", 0);
        let _us = server(&mut r, "c:1", "us", 0);
        let placed: Vec<Placement> = (0..4)
            .map(|_| r.offer(&assignment(Some("eu"))).unwrap())
            .collect();
        let picks: Vec<_> = placed
            .iter()
            .map(|p| p.assignment.server_address.clone())
            .collect();
        assert_eq!(picks, ["a:1", "b:1", "a:1", "b:1"]);
        assert!(
            a.try_recv().is_err(),
            "nothing is sent before it is delivered"
        );
        placed.into_iter().for_each(Placement::deliver);
        assert_eq!(a.try_recv().unwrap().server_address, "a:1");
        assert_eq!(b.try_recv().unwrap().server_address, "b:1");
        assert!(r.offer(&assignment(Some("asia"))).is_none());
    }

    #[test]
    fn full_or_disconnected_servers_are_skipped() {
        let mut r = ServerRegistry::default();
        let _a = server(&mut r, "a:1", "eu", 1);
        let b = server(&mut r, "b:1", "eu", 0);
        drop(b);
        assert_eq!(
            r.offer(&assignment(None))
                .map(|p| p.assignment.server_address.clone()),
            Some("a:1".to_string())
        );
        // a is at capacity and b's stream is gone.
        assert!(r.offer(&assignment(None)).is_none());
    }

    #[test]
    fn a_registration_drops_the_streams_that_closed_before_it() {
        let mut r = ServerRegistry::default();
        // Game servers that connected under fresh addresses and went away, with no match
        // allocated meanwhile (only allocation looked for closed streams).
        for i in 0..1000 {
            drop(server(&mut r, &format!("gone-{i}:7777"), "eu", 0));
        }
        let _live = server(&mut r, "live:7777", "eu", 0);
        assert_eq!(r.len(), 1, "only the open stream is registered");
    }
}

//! Registered game servers (`ServeMatches` streams) and the round-robin choice among them.

use std::collections::{BTreeMap, HashMap};
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
    /// The live matches placed on each address, so that a server registering again finds its
    /// own without a look at every live match (all game servers register again after a
    /// failover, each holding the registry meanwhile).
    pub placed: PlacedIndex<Arc<super::MatchSlot>>,
}

/// Items kept per address, pruned of the ones no longer live. An address keeps its items
/// while its server is away (it may come back); a list is pruned when it has doubled since its
/// last pruning, when its items are taken, and by [`PlacedIndex::prune_away`] for addresses
/// whose server is gone, so that neither a busy address nor one that never comes back grows
/// without bound.
#[derive(Debug)]
pub struct PlacedIndex<T> {
    by_address: HashMap<String, Placed<T>>,
}

#[derive(Debug)]
struct Placed<T> {
    items: Vec<T>,
    /// Items left after the last pruning.
    kept: usize,
}

impl<T> Default for PlacedIndex<T> {
    fn default() -> Self {
        Self {
            by_address: HashMap::new(),
        }
    }
}

/// A list is pruned when it reaches twice what its last pruning kept (and at least this).
const PRUNE_AT_LEAST: usize = 32;

impl<T: Clone> PlacedIndex<T> {
    /// Notes `item` on `address`; `live` tells the items to keep when the list is pruned.
    pub fn add(&mut self, address: &str, item: T, live: impl Fn(&T) -> bool) {
        let placed = self
            .by_address
            .entry(address.to_owned())
            .or_insert_with(|| Placed {
                items: Vec::new(),
                kept: 0,
            });
        placed.items.push(item);
        if placed.items.len() >= (2 * placed.kept).max(PRUNE_AT_LEAST) {
            placed.items.retain(|i| live(i));
            placed.kept = placed.items.len();
        }
    }

    /// The live items of `address` (the others are dropped).
    pub fn live_on(&mut self, address: &str, live: impl Fn(&T) -> bool) -> Vec<T> {
        let Some(placed) = self.by_address.get_mut(address) else {
            return Vec::new();
        };
        placed.items.retain(|i| live(i));
        placed.kept = placed.items.len();
        if placed.items.is_empty() {
            self.by_address.remove(address);
            return Vec::new();
        }
        placed.items.clone()
    }

    /// Prunes the lists of the addresses `away` says have no server now, and drops the empty
    /// ones: their items are pruned by nothing else. Returns the items kept on them.
    pub fn prune_away(&mut self, away: impl Fn(&str) -> bool, live: impl Fn(&T) -> bool) -> usize {
        let mut kept = 0;
        self.by_address.retain(|address, placed| {
            if away(address) {
                placed.items.retain(|i| live(i));
                placed.kept = placed.items.len();
                kept += placed.kept;
            }
            !placed.items.is_empty()
        });
        kept
    }

    /// Addresses with a list.
    pub fn addresses(&self) -> usize {
        self.by_address.len()
    }
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

    /// Prunes the matches noted on addresses with no connected server
    /// ([`PlacedIndex::prune_away`]).
    pub fn prune_placed(&mut self, live: impl Fn(&Arc<super::MatchSlot>) -> bool) {
        let servers = &self.servers;
        self.placed.prune_away(
            |address| {
                !servers
                    .iter()
                    .any(|s| s.address == address && !s.tx.is_closed())
            },
            live,
        );
    }

    /// Drops the servers whose stream closed; how many are left.
    pub fn prune_closed(&mut self) -> usize {
        self.servers.retain(|s| !s.tx.is_closed());
        self.servers.len()
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

    #[test]
    fn an_address_keeps_its_live_items_and_its_list_stays_within_twice_them() {
        let live = |i: &u32| i.is_multiple_of(10);
        let mut index = PlacedIndex::default();
        for i in 0..10_000u32 {
            index.add("a", i, live);
            index.add("b", i, |_| true);
        }
        // "a" keeps one item in ten: pruned as it doubles, it never holds many more.
        let a = index.by_address["a"].items.len();
        assert!(a <= 2 * 1_000 + PRUNE_AT_LEAST, "{a}");
        assert_eq!(
            index.live_on("a", live),
            (0..10_000).step_by(10).collect::<Vec<_>>()
        );
        assert_eq!(index.live_on("b", |_| true).len(), 10_000);
        assert!(index.live_on("nobody", live).is_empty());
        // Taking an address's items when none is live forgets the address.
        assert!(index.live_on("a", |_| false).is_empty());
        assert_eq!(index.addresses(), 1);
    }

    #[test]
    fn an_address_whose_server_is_away_is_pruned_and_forgotten_once_empty() {
        let mut index = PlacedIndex::default();
        for i in 0..5u32 {
            index.add("away", i, |_| true);
            index.add("here", i, |_| true);
        }
        // Only the addresses said to be away are pruned.
        assert_eq!(index.prune_away(|a| a == "away", |i| *i < 2), 2);
        assert_eq!(index.live_on("away", |_| true), vec![0, 1]);
        assert_eq!(index.live_on("here", |_| true).len(), 5);
        assert_eq!(index.prune_away(|a| a == "away", |_| false), 0);
        assert_eq!(index.addresses(), 1);
    }
}

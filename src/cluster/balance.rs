//! Spreading the shards over the nodes. Each node says every lease that it runs (the home
//! keyspace's node set) and reads who holds each shard's lease; a node that holds two shards
//! more than some running node hands one over: it stops that shard's engine, releases its
//! lease, and lets the lease pass for a while, so the node with the fewest takes it (a node
//! waits one more try for each shard it holds before taking a free lease; see
//! `Member::hold_back`). With one shard nothing here runs.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::lease::LeaseClient;
use super::member::Member;

/// The shard `me` should hand over, if any: one of its own (the last in order) when it holds
/// at least two more than some running node. `owners` lists, by node, the shards each holds;
/// `alive` the nodes that said they run.
pub fn surplus(
    owners: &BTreeMap<String, Vec<usize>>,
    alive: &BTreeSet<String>,
    me: &str,
) -> Option<usize> {
    let mine = owners.get(me)?;
    let fewest = alive
        .iter()
        .filter(|n| n.as_str() != me)
        .map(|n| owners.get(n).map_or(0, Vec::len))
        .min()?;
    (mine.len() >= fewest + 2).then(|| *mine.iter().max().expect("two or more"))
}

/// Runs the node's part of the spreading until `stop`: says every lease that it runs, and
/// hands a shard over when [`surplus`] says so (at most one per two leases, so the last one
/// is taken before the next is counted).
pub(super) async fn spread(
    members: Vec<Arc<Member>>,
    home: LeaseClient,
    node_id: String,
    lease_time: Duration,
    stop: CancellationToken,
) {
    if members.len() < 2 {
        return;
    }
    let mut ticker = tokio::time::interval(lease_time);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_handover: Option<Instant> = None;
    loop {
        tokio::select! {
            () = stop.cancelled() => break,
            _ = ticker.tick() => {}
        }
        let alive = match home.heartbeat(&node_id, lease_time * 3).await {
            Ok(alive) => alive.into_iter().collect::<BTreeSet<_>>(),
            Err(e) => {
                warn!(error = %e, "cannot say in Redis that this node runs");
                continue;
            }
        };
        if last_handover.is_some_and(|at| at.elapsed() < lease_time * 2) {
            continue;
        }
        let mut owners: BTreeMap<String, Vec<usize>> = BTreeMap::new();
        for (shard, member) in members.iter().enumerate() {
            match member.lease.peek().await {
                Ok((Some(owner), _, _)) => owners.entry(owner.node_id).or_default().push(shard),
                Ok(_) => {}
                // Nothing is decided on a partial picture.
                Err(_) => {
                    owners.clear();
                    break;
                }
            }
        }
        if let Some(shard) = surplus(&owners, &alive, &node_id) {
            info!(
                keyspace = %members[shard].config.cluster.keyspace,
                "this node holds two shards more than another: handing one over"
            );
            members[shard].hand_over();
            last_handover = Some(Instant::now());
        }
    }
    if let Err(e) = home.sign_off(&node_id).await {
        warn!(error = %e, "cannot say in Redis that this node stopped; its word lapses on its own");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owners(of: &[(&str, &[usize])]) -> BTreeMap<String, Vec<usize>> {
        of.iter()
            .map(|(n, s)| (n.to_string(), s.to_vec()))
            .collect()
    }

    fn alive(nodes: &[&str]) -> BTreeSet<String> {
        nodes.iter().map(|n| n.to_string()).collect()
    }

    #[test]
    fn a_node_hands_over_only_when_it_holds_two_more_than_a_running_node() {
        let two = owners(&[("a", &[0, 1])]);
        assert_eq!(surplus(&two, &alive(&["a", "b"]), "a"), Some(1));
        assert_eq!(surplus(&two, &alive(&["a"]), "a"), None, "alone");
        assert_eq!(
            surplus(&two, &alive(&["a", "b"]), "b"),
            None,
            "b holds none"
        );
        let spread = owners(&[("a", &[0, 2]), ("b", &[1])]);
        assert_eq!(
            surplus(&spread, &alive(&["a", "b"]), "a"),
            None,
            "2 against 1"
        );
        assert_eq!(
            surplus(&spread, &alive(&["a", "b", "c"]), "a"),
            Some(2),
            "c runs and holds none"
        );
        let three = owners(&[("a", &[0, 1, 2])]);
        assert_eq!(surplus(&three, &alive(&["a", "b"]), "a"), Some(2));
        // A node that holds a lease but no longer says it runs is not counted as running.
        let dead = owners(&[("a", &[0, 1]), ("gone", &[2])]);
        assert_eq!(surplus(&dead, &alive(&["a"]), "a"), None);
    }
}

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

/// The shard `me` should hand over, if any: one of its own (the last in order) that some
/// running node which runs that shard too, and holds at least two fewer than `me`, could take.
/// `owners` lists, by node, the shards each holds; `alive` the nodes that said they run, with
/// the shards each runs (nodes of another config may run others).
pub fn surplus(
    owners: &BTreeMap<String, Vec<usize>>,
    alive: &BTreeMap<String, BTreeSet<usize>>,
    me: &str,
) -> Option<usize> {
    let mine = owners.get(me)?;
    let held = |n: &str| owners.get(n).map_or(0, Vec::len);
    mine.iter().rev().copied().find(|shard| {
        alive
            .iter()
            .any(|(n, runs)| n != me && runs.contains(shard) && held(n) + 2 <= mine.len())
    })
}

/// Since when this node holds each shard's lease, by the lease's token. A node that took a
/// shard over hands none over until it has held every shard long enough for the word of a
/// node that died to have lapsed ([`Settling::settled`]): until then the dead node, holding
/// nothing, looks like the node with the fewest shards.
#[derive(Debug, Default)]
pub struct Settling {
    held: BTreeMap<usize, (u64, Instant)>,
}

impl Settling {
    /// Notes who holds `shard` now: this node under `token` (`Some`), or not (`None`).
    pub fn saw(&mut self, shard: usize, token: Option<u64>, now: Instant) {
        match token {
            Some(token) if self.held.get(&shard).is_some_and(|(t, _)| *t == token) => {}
            Some(token) => {
                self.held.insert(shard, (token, now));
            }
            None => {
                self.held.remove(&shard);
            }
        }
    }

    /// Whether this node has held each shard it holds for `settle` at `now`.
    pub fn settled(&self, settle: Duration, now: Instant) -> bool {
        self.held
            .values()
            .all(|(_, since)| now.saturating_duration_since(*since) >= settle)
    }
}

/// How a node says that it runs, in the home keyspace's node set: its id and the keyspaces
/// of the shards it runs (`NODE|KS,KS,...`; neither holds `|` or `,`).
fn word(node_id: &str, keyspaces: &[&str]) -> String {
    format!("{node_id}|{}", keyspaces.join(","))
}

/// The running nodes and, by their words, the shards of `keyspaces` each runs.
fn running(words: Vec<String>, keyspaces: &[&str]) -> BTreeMap<String, BTreeSet<usize>> {
    words
        .iter()
        .filter_map(|w| {
            let (node, runs) = w.split_once('|')?;
            let runs = runs
                .split(',')
                .filter_map(|k| keyspaces.iter().position(|own| own == &k))
                .collect();
            Some((node.to_string(), runs))
        })
        .collect()
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
    let mut settling = Settling::default();
    let keyspaces: Vec<&str> = members
        .iter()
        .map(|m| m.config.cluster.keyspace.as_str())
        .collect();
    let said = word(&node_id, &keyspaces);
    loop {
        tokio::select! {
            () = stop.cancelled() => break,
            _ = ticker.tick() => {}
        }
        let alive = match home.heartbeat(&said, lease_time * 3).await {
            Ok(words) => running(words, &keyspaces),
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
                Ok((Some(owner), _, _)) => {
                    let mine = (owner.node_id == node_id).then_some(owner.token);
                    settling.saw(shard, mine, Instant::now());
                    owners.entry(owner.node_id).or_default().push(shard);
                }
                Ok(_) => settling.saw(shard, None, Instant::now()),
                // Nothing is decided on a partial picture.
                Err(_) => {
                    owners.clear();
                    break;
                }
            }
        }
        // A word lapses three leases after the node's last: a node that took a shard over
        // waits that long, so it hands nothing to the node it took it from.
        if !settling.settled(lease_time * 3, Instant::now()) {
            continue;
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
    if let Err(e) = home.sign_off(&said).await {
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

    /// Nodes that each run all three shards.
    fn alive(nodes: &[&str]) -> BTreeMap<String, BTreeSet<usize>> {
        nodes
            .iter()
            .map(|n| (n.to_string(), [0, 1, 2].into()))
            .collect()
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

    #[test]
    fn a_node_that_took_a_shard_over_hands_none_over_until_a_dead_node_s_word_lapsed() {
        let (start, settle) = (Instant::now(), Duration::from_secs(3));
        let mut settling = Settling::default();
        assert!(settling.settled(settle, start), "nothing held");
        settling.saw(0, Some(1), start);
        settling.saw(1, Some(7), start);
        assert!(!settling.settled(settle, start + Duration::from_secs(2)));
        settling.saw(1, Some(7), start + Duration::from_secs(2));
        assert!(
            settling.settled(settle, start + settle),
            "held since the first sight"
        );
        // The survivor of a kill takes shard 1 again under a newer token: until its word
        // lapsed, the dead node counts as running and holding none, so nothing moves, not
        // even the shard held all along.
        settling.saw(1, Some(9), start + settle);
        assert!(!settling.settled(settle, start + settle + Duration::from_secs(1)));
        assert!(settling.settled(settle, start + settle * 2));
        // A shard no longer held counts no more.
        settling.saw(2, Some(3), start + settle * 2);
        settling.saw(2, None, start + settle * 2);
        assert!(settling.settled(settle, start + settle * 2));
    }

    #[test]
    fn a_shard_goes_only_to_a_node_that_runs_it() {
        let keyspaces = ["mm", "eu", "na"];
        // b runs an older config without shard na.
        let words = vec![word("a", &keyspaces), word("b", &["mm", "eu"])];
        let alive = running(words, &keyspaces);
        assert_eq!(alive["b"], [0, 1].into());
        let three = owners(&[("a", &[0, 1, 2])]);
        assert_eq!(surplus(&three, &alive, "a"), Some(1), "eu, not na");
        let two = owners(&[("a", &[0, 2])]);
        assert_eq!(surplus(&two, &alive, "a"), Some(0));
        let only_na = owners(&[("a", &[2]), ("c", &[])]);
        assert_eq!(surplus(&only_na, &alive, "a"), None);
    }
}

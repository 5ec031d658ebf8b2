//! `matchmaker admin cluster-status` as text or JSON: one line per thing an operator asks about
//! a cluster (who owns the queues, who could take them over from a copy, how far the writes
//! have gone, what Redis keeps across a crash), one block of them per shard, the home shard's
//! first.

use crate::cluster::status::ClusterStatus;
use crate::config::Config;
use crate::store::{ClusterConfig, Keys, RedisTls, StoreError};

/// One shard's status, and its queues when a node's config named them.
#[derive(Clone, Debug, PartialEq)]
pub struct ShardStatus {
    pub status: ClusterStatus,
    /// Empty without a config.
    pub queues: Vec<String>,
}

/// The shards to read (pure): each keyspace of `cluster` (the home shard's first, then each
/// `[[cluster.shards]]` in order) with its queues in `node`, the config it came from (none
/// without one).
pub fn shards(cluster: &ClusterConfig, node: Option<&Config>) -> Vec<(String, Vec<String>)> {
    cluster
        .keyspaces()
        .into_iter()
        .map(|keyspace| {
            let queues = node
                .map(|node| {
                    node.queues
                        .keys()
                        .filter(|q| cluster.keyspace_of(q) == keyspace)
                        .cloned()
                        .collect()
                })
                .unwrap_or_default();
            (keyspace.to_string(), queues)
        })
        .collect()
}

/// Reads the status of each of `shards` (see [`shards`]) on the Redis at `url`, in order.
pub async fn read(
    url: &str,
    tls: Option<&RedisTls>,
    shards: Vec<(String, Vec<String>)>,
) -> Result<Vec<ShardStatus>, StoreError> {
    let mut read = Vec::with_capacity(shards.len());
    for (keyspace, queues) in shards {
        let status = crate::cluster::status::read(url, tls, &Keys::new(&keyspace)).await?;
        read.push(ShardStatus { status, queues });
    }
    Ok(read)
}

/// The statuses as one JSON object: the home shard's status (its fields as they always were,
/// and its `queues` when known), and the further shards' in `shards`, each such an object.
pub fn json(statuses: &[ShardStatus]) -> serde_json::Value {
    let one = |s: &ShardStatus| {
        let mut value = serde_json::json!(s.status);
        if !s.queues.is_empty() {
            value["queues"] = serde_json::json!(s.queues);
        }
        value
    };
    let Some((home, further)) = statuses.split_first() else {
        return serde_json::Value::Null;
    };
    let mut value = one(home);
    if !further.is_empty() {
        value["shards"] = further.iter().map(one).collect();
    }
    value
}

/// The statuses as blocks of lines, one per shard, a blank line between them.
pub fn text(statuses: &[ShardStatus]) -> String {
    let several = statuses.len() > 1;
    statuses
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let about = match (several && i == 0, s.queues.is_empty()) {
                (false, true) => String::new(),
                (true, true) => " (home shard)".into(),
                (false, false) => format!(" (queues {})", s.queues.join(", ")),
                (true, false) => format!(" (home shard; queues {})", s.queues.join(", ")),
            };
            one_text(&s.status, &about)
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Seconds, from milliseconds, as the lines print them.
fn seconds(ms: i64) -> String {
    format!("{:.1} s", ms as f64 / 1000.0)
}

/// One shard's status as lines of text; `about` follows its keyspace.
fn one_text(status: &ClusterStatus, about: &str) -> String {
    let owner = match &status.owner {
        Some(o) => format!(
            "{} at {}, token {}, lease expires in {} unless renewed",
            o.node_id,
            o.addr,
            o.token,
            seconds(o.expires_in_ms)
        ),
        None => "none: the lease is free".into(),
    };
    let standbys = if status.standbys.is_empty() {
        "none (a takeover reads everything from Redis)".into()
    } else {
        status
            .standbys
            .iter()
            .map(|s| format!("{} (listed for {})", s.node_id, seconds(s.listed_for_ms)))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let d = &status.durability;
    let redis = format!(
        "appendonly {}{}, {} replica{}",
        if d.aof { "yes" } else { "no" },
        d.appendfsync
            .as_ref()
            .map(|f| format!(" (appendfsync {f})"))
            .unwrap_or_default(),
        d.replicas,
        if d.replicas == 1 { "" } else { "s" }
    );
    let large = match status.large_write {
        None => String::new(),
        Some(w) => format!(
            "large      a write in parts, {} fields staged, {}\n",
            w.staged_fields,
            if w.committed {
                "committed: being applied (or left to the next owner to apply)"
            } else {
                "not committed yet"
            }
        ),
    };
    format!(
        "keyspace   {}{about}\nowner      {owner}\nstandbys   {standbys}\nwrites     {} flushes, \
         fencing token {}, change log {} entries\nstored     {} players, {} waiting tickets\n\
         {large}redis      {redis}\n",
        status.keyspace,
        status.flushes,
        status.fencing_token,
        status.change_log_entries,
        status.players,
        status.waiting_tickets,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::status::{OwnerStatus, StandbyStatus};
    use crate::store::Durability;

    /// A status of `keyspace`, owned by `owner`.
    fn status_of(keyspace: &str, owner: &str) -> ClusterStatus {
        ClusterStatus {
            keyspace: keyspace.into(),
            owner: Some(OwnerStatus {
                node_id: owner.into(),
                addr: "10.0.0.7:50051".into(),
                token: 3,
                expires_in_ms: 900,
            }),
            standbys: Vec::new(),
            fencing_token: 3,
            flushes: 10,
            change_log_entries: 10,
            players: 5,
            waiting_tickets: 1,
            large_write: None,
            durability: Durability {
                aof: true,
                appendfsync: None,
                replicas: 0,
            },
        }
    }

    fn node_config() -> Config {
        Config::from_toml_str(
            r#"
            [cluster]
            redis_url = "redis://127.0.0.1:6379/0"
            keyspace = "home"
            [[cluster.shards]]
            keyspace = "eu"
            queues = ["5v5"]
            [[cluster.shards]]
            keyspace = "na"
            queues = ["ffa8"]
            "#,
        )
        .unwrap()
    }

    #[test]
    fn the_shards_are_the_home_keyspace_then_each_shard_with_its_queues() {
        let node = node_config();
        let with_queues = |q: &[&str]| q.iter().map(|q| q.to_string()).collect::<Vec<_>>();
        assert_eq!(
            shards(&node.cluster, Some(&node)),
            vec![
                ("home".to_string(), with_queues(&["1v1", "2v2"])),
                ("eu".to_string(), with_queues(&["5v5"])),
                ("na".to_string(), with_queues(&["ffa8"])),
            ]
        );
        // Flags only: the one keyspace, its queues unknown.
        let flags = ClusterConfig::default();
        assert_eq!(shards(&flags, None), vec![("mm".to_string(), Vec::new())]);
    }

    #[test]
    fn each_shard_gets_its_block_the_home_shard_first() {
        let node = node_config();
        let statuses: Vec<ShardStatus> = shards(&node.cluster, Some(&node))
            .into_iter()
            .zip(["n1", "n2", "n1"])
            .map(|((keyspace, queues), owner)| ShardStatus {
                status: status_of(&keyspace, owner),
                queues,
            })
            .collect();
        let text = text(&statuses);
        let blocks: Vec<&str> = text.split("\n\n").collect();
        assert_eq!(blocks.len(), 3, "{text}");
        for (block, (keyspace, owner)) in blocks.iter().zip([
            ("home (home shard; queues 1v1, 2v2)", "n1"),
            ("eu (queues 5v5)", "n2"),
            ("na (queues ffa8)", "n1"),
        ]) {
            assert!(
                block.starts_with(&format!("keyspace   {keyspace}\nowner      {owner} at ")),
                "{block}"
            );
        }

        // JSON: the home shard's object as without shards, the others in `shards`.
        let json = json(&statuses);
        assert_eq!(json["keyspace"], "home", "{json}");
        assert_eq!(json["owner"]["node_id"], "n1", "{json}");
        assert_eq!(json["queues"], serde_json::json!(["1v1", "2v2"]), "{json}");
        let further: Vec<(&str, &str)> = json["shards"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| {
                (
                    s["keyspace"].as_str().unwrap(),
                    s["owner"]["node_id"].as_str().unwrap(),
                )
            })
            .collect();
        assert_eq!(further, [("eu", "n2"), ("na", "n1")]);

        // One keyspace read from flags: the block and the object as they always were.
        let alone = [ShardStatus {
            status: status_of("mm", "n1"),
            queues: Vec::new(),
        }];
        let text = super::text(&alone);
        assert!(text.starts_with("keyspace   mm\nowner"), "{text}");
        let json = super::json(&alone);
        assert!(
            json.get("shards").is_none() && json.get("queues").is_none(),
            "{json}"
        );
    }

    #[test]
    fn the_text_names_the_owner_the_standbys_and_what_redis_keeps() {
        let mut status = ClusterStatus {
            keyspace: "eu".into(),
            owner: Some(OwnerStatus {
                node_id: "mm-0".into(),
                addr: "10.0.0.7:50051".into(),
                token: 42,
                expires_in_ms: 2640,
            }),
            standbys: vec![StandbyStatus {
                node_id: "mm-1".into(),
                listed_for_ms: 2900,
            }],
            fencing_token: 42,
            flushes: 1234,
            change_log_entries: 1200,
            players: 1_000_000,
            waiting_tickets: 52,
            large_write: None,
            durability: Durability {
                aof: true,
                appendfsync: Some("everysec".into()),
                replicas: 1,
            },
        };
        let text = one_text(&status, "");
        for line in [
            "keyspace   eu\n",
            "owner      mm-0 at 10.0.0.7:50051, token 42, lease expires in 2.6 s unless renewed\n",
            "standbys   mm-1 (listed for 2.9 s)\n",
            "writes     1234 flushes, fencing token 42, change log 1200 entries\n",
            "stored     1000000 players, 52 waiting tickets\n",
            "redis      appendonly yes (appendfsync everysec), 1 replica\n",
        ] {
            assert!(text.contains(line), "{line:?} in\n{text}");
        }
        status.owner = None;
        status.standbys.clear();
        let text = one_text(&status, "");
        assert!(
            text.contains("owner      none: the lease is free"),
            "{text}"
        );
        assert!(text.contains("standbys   none"), "{text}");
        assert!(
            !text.contains("large"),
            "no write in parts: no line\n{text}"
        );
        status.large_write = Some(crate::cluster::status::LargeWrite {
            staged_fields: 1_001_004,
            committed: true,
        });
        let text = one_text(&status, "");
        assert!(
            text.contains("large      a write in parts, 1001004 fields staged, committed"),
            "{text}"
        );
    }
}

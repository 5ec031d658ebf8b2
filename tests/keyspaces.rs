//! Several clusters on one Redis, each in its own keyspace (`cluster.keyspace`): every key of
//! a cluster carries its keyspace's hash tag, so clusters share a Redis without seeing each
//! other, and on a Redis Cluster each keyspace is one slot, placed on a primary of its own.
//! Against a real `redis-server` started on 127.0.0.1 on a free port; a machine without it
//! fails these tests with the command that installs it.
#![cfg(unix)]

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use common::ServerProcess;
use matchmaker::proto;
use matchmaker::proto::admin_service_client::AdminServiceClient;
use matchmaker::proto::client_service_client::ClientServiceClient;
use matchmaker::proto::game_server_service_client::GameServerServiceClient;
use matchmaker::store::{RedisCluster, RedisServer};
use tonic::transport::Channel;

/// A node config on `url` in `keyspace` (none: the default).
fn config(dir: &Path, name: &str, url: &str, keyspace: Option<&str>) -> PathBuf {
    let path = dir.join(format!("{name}.toml"));
    let keyspace = keyspace.map_or(String::new(), |k| format!("keyspace = \"{k}\"\n"));
    std::fs::write(
        &path,
        format!(
            "[server]\ntick_interval_ms = 20\n[cluster]\nredis_url = \"{url}\"\nlease_ms = 1000\n{keyspace}"
        ),
    )
    .unwrap();
    path
}

fn get(url: &str, key: &str) -> Option<String> {
    let mut conn = redis::Client::open(url).unwrap().get_connection().unwrap();
    redis::cmd("GET").arg(key).query(&mut conn).unwrap()
}

fn hlen(url: &str, key: &str) -> usize {
    let mut conn = redis::Client::open(url).unwrap().get_connection().unwrap();
    redis::cmd("HLEN").arg(key).query(&mut conn).unwrap()
}

/// Waits until the cluster behind `channel` answers, and returns its waiting tickets.
async fn waiting(channel: &Channel) -> u64 {
    let stats = common::poll_until("the cluster answers", || {
        let mut admin = AdminServiceClient::new(channel.clone());
        async move {
            admin
                .get_queue_stats(proto::GetQueueStatsRequest {
                    queue: "1v1".into(),
                })
                .await
        }
    })
    .await
    .into_inner();
    stats.queues.iter().map(|q| q.tickets_waiting).sum()
}

async fn games(channel: &Channel, player: &str) -> u32 {
    common::player_on(channel, player, "1v1").await.games
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clusters_in_two_keyspaces_share_one_redis_without_seeing_each_other() {
    let redis = RedisServer::start().unwrap_or_else(|e| panic!("{e}"));
    let url = redis.url();
    let dir = tempfile::tempdir().unwrap();
    let eu_config = config(dir.path(), "eu", &url, Some("eu"));
    let na_config = config(dir.path(), "na", &url, Some("na"));
    let mut nodes: BTreeMap<&str, ServerProcess> = BTreeMap::new();
    nodes.insert("eu1", common::cluster_node(&eu_config, "eu1", None));
    nodes.insert("eu2", common::cluster_node(&eu_config, "eu2", None));
    nodes.insert("na1", common::cluster_node(&na_config, "na1", None));
    let eu1 = nodes["eu1"].channel().await;
    let eu2 = nodes["eu2"].channel().await;
    let na = nodes["na1"].channel().await;
    assert_eq!(waiting(&eu2).await, 0);
    assert_eq!(waiting(&na).await, 0);

    // Each cluster holds a lease of its own; nothing is written under the default keyspace.
    let holder = |key: &str| get(&url, key).and_then(|v| v.split('|').nth(1).map(String::from));
    assert!(
        matches!(holder("{eu}:lease").as_deref(), Some("eu1" | "eu2")),
        "{:?}",
        holder("{eu}:lease")
    );
    assert_eq!(holder("{na}:lease").as_deref(), Some("na1"));
    assert_eq!(get(&url, "{mm}:lease"), None);

    // The same player id waits in both: two clusters, two players.
    let mut eu_client = ClientServiceClient::new(eu2.clone());
    common::enter(&mut eu_client, "1v1", &["ann"]).await;
    common::enter(&mut ClientServiceClient::new(na.clone()), "1v1", &["ann"]).await;
    assert_eq!(waiting(&eu1).await, 1);
    assert_eq!(waiting(&na).await, 1);
    assert_eq!(hlen(&url, "{eu}:tickets"), 1);
    assert_eq!(hlen(&url, "{na}:tickets"), 1);
    assert_eq!(hlen(&url, "{mm}:tickets"), 0);

    // A match and its result in one keyspace move nothing in the other.
    let mut offers = common::serve(&mut GameServerServiceClient::new(eu1.clone()), "gs:1").await;
    common::enter(&mut eu_client, "1v1", &["ben"]).await;
    let m = common::next(&mut offers).await;
    common::report_winner_on(&eu2, &m, "ann").await;
    assert_eq!(games(&eu1, "ann").await, 1);
    assert_eq!(games(&na, "ann").await, 0);
    assert_eq!(hlen(&url, "{eu}:players"), 2);
    assert_eq!(hlen(&url, "{na}:players"), 0);
    assert_eq!(waiting(&na).await, 1, "na's ann still waits");
}

/// The primaries of a Redis Cluster and the slot ranges each serves, from `CLUSTER NODES`.
fn primaries(url: &str) -> Vec<(String, Vec<(u16, u16)>)> {
    let mut conn = redis::Client::open(url).unwrap().get_connection().unwrap();
    let nodes: String = redis::cmd("CLUSTER").arg("NODES").query(&mut conn).unwrap();
    nodes
        .lines()
        .filter(|line| line.split(' ').nth(2).is_some_and(|f| f.contains("master")))
        .map(|line| {
            let fields: Vec<&str> = line.split(' ').collect();
            let addr = fields[1].split('@').next().unwrap();
            let ranges = fields[8..]
                .iter()
                .filter_map(|r| {
                    let (a, b) = r.split_once('-').unwrap_or((r, r));
                    Some((a.parse().ok()?, b.parse().ok()?))
                })
                .collect();
            (format!("redis://{addr}/0"), ranges)
        })
        .collect()
}

fn slot(url: &str, key: &str) -> u16 {
    let mut conn = redis::Client::open(url).unwrap().get_connection().unwrap();
    redis::cmd("CLUSTER")
        .arg("KEYSLOT")
        .arg(key)
        .query(&mut conn)
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_redis_cluster_each_keyspace_lives_on_the_primary_of_its_slot() {
    let redis = RedisCluster::start().unwrap_or_else(|e| panic!("{e}"));
    let primaries = primaries(&redis.url(0));
    assert_eq!(primaries.len(), 3);
    let serving = |slot: u16| {
        primaries
            .iter()
            .position(|(_, ranges)| ranges.iter().any(|(a, b)| (*a..=*b).contains(&slot)))
            .unwrap()
    };
    // Two keyspaces whose slots two different primaries serve.
    let mut chosen: Vec<(String, u16, usize)> = Vec::new();
    for i in 0.. {
        let name = format!("region{i}");
        let s = slot(&redis.url(0), &format!("{{{name}}}:lease"));
        let at = serving(s);
        if chosen.iter().all(|(_, _, p)| *p != at) {
            chosen.push((name, s, at));
        }
        if chosen.len() == 2 {
            break;
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let mut nodes = Vec::new();
    for (i, (name, _, _)) in chosen.iter().enumerate() {
        // Each node is pointed at a primary that is not its keyspace's, so it follows the
        // cluster's redirections.
        let other = (chosen[i].2 + 1) % 3;
        let path = config(dir.path(), name, &primaries[other].0, Some(name));
        nodes.push(common::cluster_node(&path, name, None));
    }
    for (node, (name, _, _)) in nodes.iter().zip(&chosen) {
        let channel = node.channel().await;
        assert_eq!(waiting(&channel).await, 0);
        let player = format!("p-{name}");
        common::enter(
            &mut ClientServiceClient::new(channel.clone()),
            "1v1",
            &[&player],
        )
        .await;
        assert_eq!(waiting(&channel).await, 1);
    }
    // Each keyspace's keys are on the primary serving its slot, and only there.
    for (name, s, at) in &chosen {
        for (p, (url, _)) in primaries.iter().enumerate() {
            let mut conn = redis::Client::open(url.as_str())
                .unwrap()
                .get_connection()
                .unwrap();
            let keys: u64 = redis::cmd("CLUSTER")
                .arg("COUNTKEYSINSLOT")
                .arg(*s)
                .query(&mut conn)
                .unwrap();
            if p == *at {
                // The lease, the fencing counter, the node key and the ticket at least.
                assert!(keys >= 4, "{name}: {keys} keys on its primary");
            } else {
                assert_eq!(keys, 0, "{name}: keys on primary {p}");
            }
        }
    }
}

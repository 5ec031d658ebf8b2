//! Standby copies in cluster mode, against a real `redis-server` on 127.0.0.1 on a free port:
//! a node that does not own the queues follows the owner's change log, and when the owner is
//! killed it takes over from its copy, with every write the owner made up to its death. A
//! machine without `redis-server` fails these tests with the command that installs it.
#![cfg(unix)]

mod common;

use common::lease_holder;
use common::queues_answer as ready;

use std::collections::BTreeMap;

use matchmaker::proto;
use matchmaker::proto::admin_service_client::AdminServiceClient;
use matchmaker::proto::client_service_client::ClientServiceClient;
use matchmaker::proto::game_server_service_client::GameServerServiceClient;
use matchmaker::store::RedisServer;
use tonic::transport::Channel;

fn config(dir: &std::path::Path, redis: &RedisServer, extra: &str) -> std::path::PathBuf {
    common::cluster_config(dir, &redis.url(), 1000, extra)
}

fn redis_get(redis: &RedisServer, args: &[&str]) -> redis::Value {
    let client = redis::Client::open(redis.url()).unwrap();
    let mut conn = client.get_connection().unwrap();
    let mut cmd = redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    cmd.query(&mut conn).unwrap()
}

async fn set_rating(channel: &Channel, player: &str, mean: f64) {
    AdminServiceClient::new(channel.clone())
        .set_rating(proto::SetRatingRequest {
            player_id: player.into(),
            queue: "1v1".into(),
            rating: Some(proto::Rating {
                mean,
                deviation: 80.0,
                ..Default::default()
            }),
            rank_points: None,
        })
        .await
        .expect("set_rating");
}

/// The node's `standby` health status: SERVING while it owns the queues or holds a current
/// copy.
async fn standby_status(channel: &Channel) -> Result<i32, tonic::Status> {
    tonic_health::pb::health_client::HealthClient::new(channel.clone())
        .check(tonic_health::pb::HealthCheckRequest {
            service: "standby".into(),
        })
        .await
        .map(|r| r.into_inner().status)
}

const SERVING: i32 = tonic_health::pb::health_check_response::ServingStatus::Serving as i32;

/// Waits until the node behind `channel` holds a current standby copy.
async fn copy_loaded(channel: &Channel) {
    copy_loaded_within(channel, common::EVENT_TIMEOUT).await;
}

/// [`copy_loaded`] waiting up to `timeout` (a node reads its copy a lease after it starts).
async fn copy_loaded_within(channel: &Channel, timeout: std::time::Duration) {
    common::poll_until_within("the standby's copy is loaded", timeout, || {
        let channel = channel.clone();
        async move {
            match standby_status(&channel).await {
                Ok(SERVING) => Ok(()),
                other => Err(format!("{other:?}")),
            }
        }
    })
    .await;
}

/// `matchmaker admin cluster-status --json` on `redis`.
fn cluster_status(redis: &RedisServer) -> serde_json::Value {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_matchmaker"))
        .args(["admin", "--json", "cluster-status", "--redis", &redis.url()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_takes_over_from_its_copy_with_every_write_of_the_killed_owner() {
    let redis = RedisServer::start().unwrap_or_else(|e| panic!("{e}"));
    let dir = tempfile::tempdir().unwrap();
    // A lease a loaded machine does not lapse: the owner is asserted before the kill, and the
    // standby list names only nodes that renewed their entry within a lease.
    let config = common::cluster_config(dir.path(), &redis.url(), 3000, "");
    let mut owner = common::cluster_node(&config, "n1", None);
    ready(&owner.channel().await).await;
    let standby = common::cluster_node(&config, "n2", None);
    let channel = standby.channel().await;
    ready(&channel).await;
    assert_eq!(lease_holder(&redis).as_deref(), Some("n1"));
    // Written before the standby's copy is read, and after.
    set_rating(&channel, "early", 1800.0).await;
    copy_loaded(&channel).await;
    standby.wait_logged("standby copy loaded").await;
    assert_eq!(
        standby_status(&owner.channel().await).await.unwrap(),
        SERVING,
        "the owner needs no copy to carry on"
    );
    set_rating(&channel, "late", 2100.0).await;
    // Tickets wait (no game server: their matches form but stay unallocated, so the tickets
    // stay in the store).
    let players: Vec<String> = (0..6).map(|i| format!("w{i}")).collect();
    let mut client = ClientServiceClient::new(channel.clone());
    for p in &players {
        common::enter(&mut client, "1v1", &[p.as_str()]).await;
    }
    let redis::Value::Int(logged) = redis_get(&redis, &["XLEN", "{mm}:changes"]) else {
        panic!("no change log");
    };
    assert!(logged > 0, "the owner logs its flushes");
    // What an operator sees: the owner, the node with a copy, the tickets waiting.
    let status = cluster_status(&redis);
    assert_eq!(status["owner"]["node_id"], "n1", "{status}");
    assert_eq!(status["standbys"][0]["node_id"], "n2", "{status}");
    assert_eq!(status["waiting_tickets"], players.len(), "{status}");
    assert_eq!(status["players"], 2, "{status}");
    assert_eq!(status["durability"]["aof"], true, "{status}");

    owner.child.kill().unwrap();
    let _ = owner.child.wait();
    common::poll_until("n2 owns the queues", || {
        let holder = lease_holder(&redis);
        async move {
            match holder.as_deref() {
                Some("n2") => Ok(()),
                other => Err(format!("{other:?}")),
            }
        }
    })
    .await;
    ready(&channel).await;
    standby.wait_logged("took over from the standby copy").await;
    assert_eq!(standby_status(&channel).await.unwrap(), SERVING);
    let status = cluster_status(&redis);
    assert_eq!(status["owner"]["node_id"], "n2", "{status}");
    assert!(
        status["owner"]["token"].as_u64() > Some(1),
        "a new token: {status}"
    );
    // Every write the dead owner made is there: both ratings, and each waiting ticket,
    // matched exactly once.
    assert_eq!(
        common::player_on(&channel, "early", "1v1")
            .await
            .rating
            .unwrap()
            .mean,
        1800.0
    );
    assert_eq!(
        common::player_on(&channel, "late", "1v1")
            .await
            .rating
            .unwrap()
            .mean,
        2100.0
    );
    let mut gs = GameServerServiceClient::new(channel.clone());
    let mut offers = common::serve(&mut gs, "gs-1:7777").await;
    let mut matched: BTreeMap<String, String> = BTreeMap::new();
    while matched.len() < players.len() {
        let m = common::next(&mut offers).await;
        for p in m.teams.iter().flat_map(|t| t.player_ids.clone()) {
            assert!(
                matched.insert(p.clone(), m.match_id.clone()).is_none(),
                "{p} was matched twice"
            );
        }
    }
    assert_eq!(matched.into_keys().collect::<Vec<_>>(), players);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_standby_off_nodes_keep_no_copy_and_owners_log_nothing() {
    let redis = RedisServer::start().unwrap_or_else(|e| panic!("{e}"));
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path(), &redis, "standby = false\n");
    let mut owner = common::cluster_node(&config, "n1", None);
    ready(&owner.channel().await).await;
    let other = common::cluster_node(&config, "n2", None);
    let channel = other.channel().await;
    ready(&channel).await;
    set_rating(&channel, "p1", 1700.0).await;
    assert_eq!(
        redis_get(&redis, &["EXISTS", "{mm}:changes"]),
        redis::Value::Int(0)
    );
    owner.child.kill().unwrap();
    let _ = owner.child.wait();
    let view = common::poll_until("n2 answers as the owner", || {
        let holder = lease_holder(&redis);
        let mut client = ClientServiceClient::new(channel.clone());
        async move {
            if holder.as_deref() != Some("n2") {
                return Err(format!("the lease names {holder:?}"));
            }
            client
                .get_player(proto::GetPlayerRequest {
                    player_id: "p1".into(),
                    queue: "1v1".into(),
                })
                .await
                .map(tonic::Response::into_inner)
                .map_err(|e| format!("{e}"))
        }
    })
    .await;
    assert_eq!(view.rating.unwrap().mean, 1700.0);
    assert!(!other.logged("standby copy"), "{:?}", other.log_lines());
    assert_eq!(standby_status(&channel).await.unwrap(), SERVING);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_standby_off_a_node_that_does_not_own_the_queues_is_serving_on_standby() {
    let redis = RedisServer::start().unwrap_or_else(|e| panic!("{e}"));
    let dir = tempfile::tempdir().unwrap();
    // A lease a loaded machine does not lapse: the owner is checked once.
    let config = common::cluster_config(dir.path(), &redis.url(), 3000, "standby = false\n");
    let owner = common::cluster_node(&config, "n1", None);
    ready(&owner.channel().await).await;
    let other = common::cluster_node(&config, "n2", None);
    let channel = other.channel().await;
    ready(&channel).await;
    assert_eq!(lease_holder(&redis).as_deref(), Some("n1"));
    // A startup probe on `standby` must pass: the node keeps no copy, so none is to wait for.
    assert_eq!(
        standby_status(&channel).await.unwrap(),
        SERVING,
        "a node that keeps no copy is as ready for a takeover as it will ever be"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_with_a_standby_copy_takes_the_queues_before_nodes_without_one() {
    let redis = RedisServer::start().unwrap_or_else(|e| panic!("{e}"));
    let dir = tempfile::tempdir().unwrap();
    // A node reads no copy in its first lease: with a 20 s lease, the two started last still
    // hold none when the owner stops a few seconds later, on a loaded machine too.
    let lease = std::time::Duration::from_secs(20);
    let config = common::cluster_config(dir.path(), &redis.url(), lease.as_millis() as u64, "");
    let owner = common::cluster_node(&config, "n1", None);
    ready(&owner.channel().await).await;
    let warm = common::cluster_node(&config, "n2", None);
    let channel = warm.channel().await;
    copy_loaded_within(&channel, lease + common::EVENT_TIMEOUT).await;
    let listed = |node: &'static str| {
        let redis = &redis;
        move || {
            let score = redis_get(redis, &["ZSCORE", "{mm}:standbys", node]);
            async move {
                match score {
                    redis::Value::Nil => Err("not listed"),
                    _ => Ok(()),
                }
            }
        }
    };
    common::poll_until("n2 is listed as holding a copy", listed("n2")).await;
    let cold: Vec<_> = ["n3", "n4"]
        .iter()
        .map(|n| common::cluster_node(&config, n, None))
        .collect();
    let mut cold_channels = Vec::new();
    for node in &cold {
        let channel = node.channel().await;
        ready(&channel).await;
        cold_channels.push(channel);
    }
    for (node, channel) in ["n3", "n4"].iter().zip(&cold_channels) {
        assert_ne!(
            standby_status(channel).await.unwrap(),
            SERVING,
            "{node} holds no copy yet when the owner stops"
        );
    }
    // A graceful stop gives the lease up: every other node finds it free at its next try (or,
    // should the release fail, once the lease expires).
    owner.signal("TERM");
    let holder = common::poll_until_within(
        "another node owns the queues",
        lease + common::EVENT_TIMEOUT,
        || {
            let holder = lease_holder(&redis);
            async move {
                match holder {
                    Some(h) if h != "n1" => Ok(h),
                    other => Err(format!("{other:?}")),
                }
            }
        },
    )
    .await;
    assert_eq!(holder, "n2", "a node without a copy took the queues");
    ready(&channel).await;
    warm.wait_logged("took over from the standby copy").await;
    for node in &cold {
        assert!(!node.logged("this node owns the queues"));
    }
    // The owner holds no copy, so it is no longer listed.
    common::poll_until("n2 is no longer listed", || {
        let score = redis_get(&redis, &["ZSCORE", "{mm}:standbys", "n2"]);
        async move {
            match score {
                redis::Value::Nil => Ok(()),
                other => Err(format!("{other:?}")),
            }
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_without_a_copy_finding_the_lease_free_lets_a_node_with_one_try_first() {
    let redis = RedisServer::start().unwrap_or_else(|e| panic!("{e}"));
    let dir = tempfile::tempdir().unwrap();
    // A node that says it holds a copy (for the next hour) but never takes the lease.
    let in_an_hour = (std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis()
        + 3_600_000)
        .to_string();
    redis_get(&redis, &["ZADD", "{mm}:standbys", &in_an_hour, "ghost"]);
    let config = config(dir.path(), &redis, "");
    let node = common::cluster_node(&config, "n1", None);
    // It starts without a copy: it finds the lease free, waits a try, then takes it.
    ready(&node.channel().await).await;
    assert_eq!(lease_holder(&redis).as_deref(), Some("n1"));
    // It may look more than once (a try that Redis answered too late is made again), but it
    // let the others try before it took the queues.
    node.wait_logged("this node owns the queues now").await;
    let lines = node.log_lines();
    let first = |text: &str| lines.iter().position(|l| l.contains(text));
    let waited = first("a node with a standby copy may take it first");
    assert!(
        waited.is_some() && waited < first("this node owns the queues now"),
        "{lines:?}"
    );
}

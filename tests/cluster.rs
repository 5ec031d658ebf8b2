//! Cluster mode against a real `redis-server` started by each test on 127.0.0.1 on a free port,
//! in a temporary directory, with the append-only file on; the nodes are the real binary, so
//! they can be killed with SIGKILL and stopped with SIGSTOP. A machine without `redis-server`
//! fails these tests with the command that installs it.
#![cfg(unix)]

mod common;

use common::lease_holder;
use common::queues_answer as ready;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::ServerProcess;
use matchmaker::proto;
use matchmaker::proto::admin_service_client::AdminServiceClient;
use matchmaker::proto::client_service_client::ClientServiceClient;
use matchmaker::proto::game_server_service_client::GameServerServiceClient;
use matchmaker::proto::party_service_client::PartyServiceClient;
use matchmaker::store::RedisServer;
use tonic::transport::Channel;

/// The lease the tests run with: failovers take about a second.
const LEASE_MS: u64 = 1000;

/// The lease of tests that need one owner from start to end and measure no failover: long
/// enough that a loaded machine's scheduling does not lapse it (each renewal gets a quarter
/// lease to be answered, and the owner stops a tenth of a lease before it runs out).
const STEADY_LEASE_MS: u64 = 3000;

/// A config file for nodes on `redis`, with `extra` TOML after it.
fn config(dir: &Path, redis: &RedisServer, extra: &str) -> std::path::PathBuf {
    config_with_lease(dir, redis, LEASE_MS, extra)
}

fn config_with_lease(
    dir: &Path,
    redis: &RedisServer,
    lease_ms: u64,
    extra: &str,
) -> std::path::PathBuf {
    common::cluster_config(dir, &redis.url(), lease_ms, extra)
}

/// Starts node `name` of the cluster.
fn node(config: &Path, name: &str) -> ServerProcess {
    common::cluster_node(config, name, None)
}

fn redis() -> RedisServer {
    RedisServer::start().unwrap_or_else(|e| panic!("{e}"))
}

/// Kills the node `owner` (SIGKILL) and waits until `next` holds the queues' lease.
async fn kill_owner_until(
    nodes: &mut BTreeMap<String, ServerProcess>,
    owner: &str,
    redis: &RedisServer,
    next: &str,
) {
    let mut dead = nodes.remove(owner).unwrap();
    dead.child.kill().unwrap();
    let _ = dead.child.wait();
    holder_becomes(redis, next).await;
}

/// Waits until the node `next` holds the queues' lease.
async fn holder_becomes(redis: &RedisServer, next: &str) {
    common::poll_until(&format!("{next} owns the queues"), || {
        let holder = lease_holder(redis);
        let next = next.to_string();
        async move {
            match holder {
                Some(h) if h == next => Ok(()),
                seen => Err(format!("{seen:?}")),
            }
        }
    })
    .await;
}

/// Waits until a line of `node`'s log contains `text`: a thread of the test reads the log from
/// the node's pipe, so a line the node wrote before it answered a call may come after the answer.
async fn logs(node: &ServerProcess, text: &str) {
    common::poll_until(&format!("{text:?} in the log"), || {
        let seen = node.logged(text);
        async move { if seen { Ok(()) } else { Err("not yet") } }
    })
    .await;
}

async fn rating(channel: &Channel, player: &str) -> proto::PlayerView {
    common::player_on(channel, player, "1v1").await
}

/// Next match offered on `stream` in `queue`.
async fn next_match(
    stream: &mut tonic::Streaming<proto::MatchAssignment>,
) -> proto::MatchAssignment {
    common::next(stream).await
}

fn players_of(m: &proto::MatchAssignment) -> BTreeSet<String> {
    m.teams.iter().flat_map(|t| t.player_ids.clone()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn any_node_serves_any_call_and_a_result_is_seen_from_every_node() {
    let redis = redis();
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path(), &redis, "");
    let nodes: Vec<ServerProcess> = ["n1", "n2", "n3"]
        .iter()
        .map(|n| node(&config, n))
        .collect();
    let mut channels = Vec::new();
    for n in &nodes {
        channels.push(n.channel().await);
    }
    ready(&channels[2]).await;
    // The game server's stream is on the third node; the players enter through the first two.
    let mut gs = GameServerServiceClient::new(channels[2].clone());
    let mut offers = common::serve(&mut gs, "gs-3:7777").await;
    let alice = common::enter(
        &mut ClientServiceClient::new(channels[0].clone()),
        "1v1",
        &["alice"],
    )
    .await;
    let bob = common::enter(
        &mut ClientServiceClient::new(channels[1].clone()),
        "1v1",
        &["bob"],
    )
    .await;
    let m = next_match(&mut offers).await;
    assert_eq!(
        players_of(&m),
        BTreeSet::from(["alice".into(), "bob".into()])
    );
    // Each ticket's watcher, on a node it was not entered through, sees the same match.
    for (ticket, channel) in [(&alice, &channels[1]), (&bob, &channels[2])] {
        let updates =
            common::watch_to_end(&mut ClientServiceClient::new(channel.clone()), ticket).await;
        let last = updates.last().expect("an update");
        assert_eq!(last.state, proto::TicketState::Matched as i32);
        assert_eq!(last.assignment.as_ref().unwrap().match_id, m.match_id);
        assert_eq!(
            last.assignment.as_ref().unwrap().server_address,
            "gs-3:7777"
        );
    }
    // The result goes in through the first node; every node sees the new ratings.
    let ack = GameServerServiceClient::new(channels[0].clone())
        .report_match_result(proto::MatchResult {
            match_id: m.match_id.clone(),
            placements: common::placements_with_winner(&m, "alice"),
            ..Default::default()
        })
        .await
        .expect("report through a node that does not own the queues")
        .into_inner();
    assert!(!ack.duplicate);
    // Reported again through another node: the same acknowledgement, applied once.
    let again = GameServerServiceClient::new(channels[1].clone())
        .report_match_result(proto::MatchResult {
            match_id: m.match_id.clone(),
            placements: common::placements_with_winner(&m, "alice"),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(again.duplicate);
    let mut seen = Vec::new();
    for channel in &channels {
        let view = rating(channel, "alice").await;
        assert_eq!(view.games, 1);
        assert_eq!(view.wins, 1);
        seen.push(view.rating.unwrap().mean);
    }
    assert!(seen[0] > 1500.0, "the winner gained: {seen:?}");
    assert!(seen.iter().all(|m| *m == seen[0]), "{seen:?}");
    let board = ClientServiceClient::new(channels[1].clone())
        .get_leaderboard(proto::GetLeaderboardRequest {
            queue: "1v1".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        board.entries.first().map(|e| e.player_id.as_str()),
        Some("alice")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_the_owner_hands_its_waiting_tickets_to_another_node() {
    let redis = redis();
    let dir = tempfile::tempdir().unwrap();
    // A longer lease than the other tests': the bound checked below is twice it, of which
    // the design takes up to one and a half (expiry, a quarter lease to the next try, a
    // quarter left to a node with a standby copy), and a loaded machine delays a takeover by
    // scheduling, not in proportion to the lease.
    let lease_ms = 4000;
    let config = config_with_lease(dir.path(), &redis, lease_ms, "");
    let mut nodes: BTreeMap<String, ServerProcess> = ["n1", "n2", "n3"]
        .iter()
        .map(|n| (n.to_string(), node(&config, n)))
        .collect();
    let first = nodes["n1"].channel().await;
    ready(&first).await;
    let owner = lease_holder(&redis).expect("an owner");
    let survivor = nodes.keys().find(|n| **n != owner).unwrap().clone();
    let survivor_channel = nodes[&survivor].channel().await;
    // Tickets wait (no game server: their matches form but stay unallocated, so the tickets
    // stay waiting in the store), entered through every node.
    let players: Vec<String> = (0..10).map(|i| format!("w{i}")).collect();
    let mut tickets = BTreeMap::new();
    for (i, p) in players.iter().enumerate() {
        let name = ["n1", "n2", "n3"][i % 3];
        let ch = nodes[name].channel().await;
        let t = common::enter(&mut ClientServiceClient::new(ch), "1v1", &[p.as_str()]).await;
        tickets.insert(p.clone(), t);
    }
    let killed = Instant::now();
    let mut dead = nodes.remove(&owner).unwrap();
    dead.child.kill().unwrap();
    let _ = dead.child.wait();
    // Another node holds the lease within two lease periods.
    let new_owner = common::poll_until("a new owner", || {
        let holder = lease_holder(&redis);
        let owner = owner.clone();
        async move {
            match holder {
                Some(h) if h != owner => Ok(h),
                other => Err(format!("{other:?}")),
            }
        }
    })
    .await;
    let failover = killed.elapsed();
    assert!(
        failover <= Duration::from_millis(2 * lease_ms),
        "{new_owner} took over after {failover:?}"
    );
    // The same tickets are matched once a game server connects, each exactly once.
    let mut gs = GameServerServiceClient::new(survivor_channel.clone());
    let mut offers = common::serve(&mut gs, "gs-1:7777").await;
    let mut matched: BTreeMap<String, String> = BTreeMap::new();
    while matched.len() < players.len() {
        let m = next_match(&mut offers).await;
        for p in players_of(&m) {
            assert!(
                matched.insert(p.clone(), m.match_id.clone()).is_none(),
                "{p} was matched twice"
            );
        }
    }
    assert_eq!(matched.keys().cloned().collect::<Vec<_>>(), {
        let mut p = players.clone();
        p.sort();
        p
    });
    // A watcher on a surviving node follows a ticket entered through the dead one.
    let mut client = ClientServiceClient::new(survivor_channel);
    for (p, t) in &tickets {
        let updates = common::watch_to_end(&mut client, t).await;
        let last = updates.last().unwrap();
        assert_eq!(last.state, proto::TicketState::Matched as i32, "{p}");
        assert_eq!(last.assignment.as_ref().unwrap().match_id, matched[p]);
    }
    eprintln!("failover: {failover:?} to {new_owner}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_owner_forms_no_match_after_losing_its_lease() {
    let redis = redis();
    let dir = tempfile::tempdir().unwrap();
    // Two far-apart players become matchable only after four seconds of waiting.
    let config = config(
        dir.path(),
        &redis,
        "[queues.1v1.matching]\nexpansion = [{ after_seconds = 4.0, window = 100000.0, min_quality = 0.0, max_latency_ms = 100000 }]\n",
    );
    // "match formed" is a debug line of the optimizer's tick.
    let debug_ticks = |name: &str| {
        common::cluster_node(
            &config,
            name,
            Some("info,matchmaker::matchmaker::tick=debug"),
        )
    };
    let a = debug_ticks("a");
    let a_channel = a.channel().await;
    ready(&a_channel).await;
    assert_eq!(lease_holder(&redis).as_deref(), Some("a"));
    let b = debug_ticks("b");
    let b_channel = b.channel().await;
    let mut admin = AdminServiceClient::new(b_channel.clone());
    for (p, mean) in [("low", 1000.0), ("high", 2500.0)] {
        admin
            .set_rating(proto::SetRatingRequest {
                player_id: p.into(),
                queue: "1v1".into(),
                rating: Some(proto::Rating {
                    mean,
                    deviation: 50.0,
                    volatility: 0.06,
                    ..Default::default()
                }),
                ..Default::default()
            })
            .await
            .unwrap();
    }
    let mut client = ClientServiceClient::new(a_channel.clone());
    let low = common::enter(&mut client, "1v1", &["low"]).await;
    common::enter(&mut client, "1v1", &["high"]).await;
    // Stall the owner while both wait; past its lease, b takes over with the same tickets.
    // The game server registers once b owns the queues and answers: a call through b waits
    // for an owner only so long (twice the lease and a second), less than b may take to see
    // the lease lapse, take it and load the state on a loaded machine.
    a.signal("STOP");
    holder_becomes(&redis, "b").await;
    ready(&b_channel).await;
    let mut gs = GameServerServiceClient::new(b_channel.clone());
    let mut offers = common::serve(&mut gs, "gs-b:7777").await;
    let m = next_match(&mut offers).await;
    assert_eq!(
        players_of(&m),
        BTreeSet::from(["low".into(), "high".into()])
    );
    assert_eq!(lease_holder(&redis).as_deref(), Some("b"));
    // The debug line the check below relies on.
    logs(&b, "match formed").await;
    // The stalled owner wakes with both tickets ripe in its own pool; it forms nothing.
    a.signal("CONT");
    common::poll_until("a notices it lost the lease", || {
        let lost = a.logged("the lease passed to another node") || a.logged("lease not renewed");
        async move {
            if lost {
                Ok(())
            } else {
                Err("still acting as owner")
            }
        }
    })
    .await;
    assert!(
        !a.logged("match formed"),
        "the stale owner formed a match: {:?}",
        a.log_lines()
    );
    // Nothing more reaches the game server, and the ticket stays in b's one match.
    let extra = tokio::time::timeout(Duration::from_millis(3 * LEASE_MS), offers.message()).await;
    assert!(extra.is_err(), "a second match was offered: {extra:?}");
    let view = common::watch_to_end(&mut ClientServiceClient::new(a_channel), &low).await;
    assert_eq!(
        view.last().unwrap().assignment.as_ref().unwrap().match_id,
        m.match_id
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn more_streams_than_one_connection_carries_pass_through_a_forwarding_node() {
    let redis = redis();
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path(), &redis, "");
    let owner = node(&config, "owner");
    ready(&owner.channel().await).await;
    let forwarder = node(&config, "forwarder");
    // 2 × 200 watchers, each connection under the per-connection limit (256), all open at once
    // through the forwarding node: more than one connection between the nodes could carry.
    let mut streams = Vec::new();
    for c in 0..2 {
        let channel = forwarder.channel().await;
        let mut client = ClientServiceClient::new(channel);
        for i in 0..200 {
            let player = format!("s{c}-{i}");
            let ticket = common::enter(&mut client, "5v5", &[player.as_str()]).await;
            let mut stream = client
                .watch_ticket(proto::WatchTicketRequest { ticket_id: ticket })
                .await
                .expect("watch_ticket")
                .into_inner();
            // The first update arrives while every earlier stream is still open.
            common::next(&mut stream).await;
            streams.push(stream);
        }
    }
    assert_eq!(streams.len(), 400);
}

/// Sends `calls` EnterQueue calls at once on `channel`, each with `headers`, players named
/// after `prefix`; the first refusal, if any.
async fn enter_many(
    channel: &Channel,
    prefix: &str,
    calls: usize,
    headers: &[(&'static str, String)],
) -> Option<tonic::Status> {
    let mut client = ClientServiceClient::new(channel.clone());
    let mut refused = None;
    for i in 0..calls {
        let mut request = tonic::Request::new(proto::EnterQueueRequest {
            queue: "1v1".into(),
            player_ids: vec![format!("{prefix}{i}")],
            ..Default::default()
        });
        for (name, value) in headers {
            let value = value.replace("{i}", &i.to_string());
            request.metadata_mut().insert(*name, value.parse().unwrap());
        }
        if let Err(e) = client.enter_queue(request).await {
            refused.get_or_insert(e);
        }
    }
    refused
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_per_address_rate_limit_counts_the_client_of_a_forwarded_call_not_what_it_claims() {
    let redis = redis();
    let dir = tempfile::tempdir().unwrap();
    let config = config_with_lease(
        dir.path(),
        &redis,
        STEADY_LEASE_MS,
        // A bucket of 2 calls refilled one every 8 s: 8 calls pass only if they span 48 s.
        "[rate_limit]\nanonymous = 0.125\nburst_seconds = 16.0\n",
    );
    let owner = node(&config, "owner");
    ready(&owner.channel().await).await;
    let forwarder = node(&config, "forwarder");
    let refused_as_the_client = |refused: Option<tonic::Status>, how: &str| {
        let e =
            refused.unwrap_or_else(|| panic!("{how}: 8 calls at once must exceed a burst of 2"));
        assert_eq!(e.code(), tonic::Code::ResourceExhausted, "{how}: {e:?}");
        assert!(
            e.message()
                .starts_with("rate limit: 127.0.0.1 exceeded rate_limit.anonymous"),
            "{how}: {e:?}"
        );
    };
    // Through the forwarding node, each call claiming another address and a made-up node key:
    // the owner counts the address the forwarding node saw.
    let claims = [
        ("x-matchmaker-client-addr", "10.0.0.{i}".to_string()),
        ("x-matchmaker-node-key", "guess".to_string()),
    ];
    let channel = forwarder.channel().await;
    refused_as_the_client(
        enter_many(&channel, "f", 8, &claims).await,
        "through the forwarding node",
    );
    // Straight to the owner, dressed as a forwarded call without the cluster's node key.
    let mut forged = claims.to_vec();
    forged.push(("x-matchmaker-forwarded-by", "forwarder".to_string()));
    refused_as_the_client(
        enter_many(&owner.channel().await, "o", 8, &forged).await,
        "a forged forwarded call",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_load_generator_spreads_over_every_node_without_errors() {
    let redis = redis();
    let dir = tempfile::tempdir().unwrap();
    // No failover is measured here: a lease that lapsed under the load itself would answer
    // the calls in flight "maybe served".
    let config = config_with_lease(dir.path(), &redis, STEADY_LEASE_MS, "");
    let nodes: Vec<ServerProcess> = ["l1", "l2"].iter().map(|n| node(&config, n)).collect();
    ready(&nodes[0].channel().await).await;
    let addrs = format!("{},{}", nodes[0].addr, nodes[1].addr);
    let report = matchmaker::tools::loadgen::run(matchmaker::tools::loadgen::Options {
        seconds: 1.0,
        rounds: 1,
        concurrency: 8,
        ..matchmaker::tools::loadgen::Options::new(
            addrs,
            matchmaker::tools::loadgen::Rpc::EnterQueue,
        )
    })
    .await
    .unwrap();
    assert_eq!(report.errors, 0, "{report:?}");
    assert!(report.rps > 0.0, "{report:?}");
    assert!(
        report.matches_served > 0,
        "game servers on both nodes took matches: {report:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_cluster_backs_the_nodes_the_same_way() {
    let redis = matchmaker::store::RedisCluster::start().unwrap_or_else(|e| panic!("{e}"));
    let dir = tempfile::tempdir().unwrap();
    // Each node is pointed at a different primary: at most one of them owns the slot of the
    // `{mm}` keys, so the others must follow the cluster's redirections.
    let nodes: Vec<ServerProcess> = (0..2)
        .map(|i| {
            let path = dir.path().join(format!("node{i}.toml"));
            std::fs::write(
                &path,
                format!(
                    "[server]\ntick_interval_ms = 20\n[cluster]\nredis_url = \"{}\"\nlease_ms = {LEASE_MS}\n",
                    redis.url(i)
                ),
            )
            .unwrap();
            node(&path, &format!("c{i}"))
        })
        .collect();
    let first = nodes[0].channel().await;
    let second = nodes[1].channel().await;
    ready(&second).await;
    let mut gs = GameServerServiceClient::new(second.clone());
    let mut offers = common::serve(&mut gs, "gs-c:7777").await;
    common::enter(
        &mut ClientServiceClient::new(first.clone()),
        "1v1",
        &["ann"],
    )
    .await;
    common::enter(
        &mut ClientServiceClient::new(second.clone()),
        "1v1",
        &["ben"],
    )
    .await;
    let m = next_match(&mut offers).await;
    assert_eq!(players_of(&m), BTreeSet::from(["ann".into(), "ben".into()]));
    let ack = GameServerServiceClient::new(first.clone())
        .report_match_result(proto::MatchResult {
            match_id: m.match_id.clone(),
            placements: common::placements_with_winner(&m, "ann"),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(!ack.duplicate);
    let (a, b) = (rating(&first, "ann").await, rating(&second, "ann").await);
    assert_eq!((a.games, a.wins), (1, 1));
    assert_eq!(a.rating, b.rating);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_finding_the_lease_in_its_own_name_gives_it_up_rather_than_wait_for_it() {
    let redis = redis();
    // A lease in this node's name that it does not know of: from an earlier run with the
    // same node id (a StatefulSet pod restarted within the lease), or an acquisition whose
    // reply came too late. It would last another minute.
    let client = redis::Client::open(redis.url()).unwrap();
    let mut conn = client.get_connection().unwrap();
    let () = redis::cmd("SET")
        .arg("{mm}:lease")
        .arg("5|r1|127.0.0.1:1")
        .arg("PX")
        .arg(60_000)
        .query(&mut conn)
        .unwrap();
    let () = redis::cmd("SET")
        .arg("{mm}:fence")
        .arg(5)
        .query(&mut conn)
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = config_with_lease(dir.path(), &redis, STEADY_LEASE_MS, "");
    let node = node(&config, "r1");
    ready(&node.channel().await).await;
    let value: String = redis::cmd("GET")
        .arg("{mm}:lease")
        .query(&mut conn)
        .unwrap();
    assert!(value.starts_with("6|r1|"), "a new token: {value}");
    logs(
        &node,
        "the lease names this node, which runs no engine under it",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_matched_ticket_still_reads_as_matched_to_its_server_after_the_owner_died() {
    let redis = redis();
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path(), &redis, "");
    let (mut nodes, owner, other) = owner_and_other(&config, &redis).await;
    let channel = nodes[&other].channel().await;
    let mut gs = GameServerServiceClient::new(channel.clone());
    let mut offers = common::serve(&mut gs, "gs-t:7777").await;
    let mut client = ClientServiceClient::new(channel.clone());
    let ticket = common::enter(&mut client, "1v1", &["tia"]).await;
    common::enter(&mut client, "1v1", &["tom"]).await;
    let m = next_match(&mut offers).await;
    let views = common::watch_to_end(&mut client, &ticket).await;
    assert_eq!(
        views.last().map(|v| v.state),
        Some(proto::TicketState::Matched as i32)
    );

    let mut dead = nodes.remove(&owner).unwrap();
    dead.child.kill().unwrap();
    let _ = dead.child.wait();
    holder_becomes(&redis, &other).await;
    // Through the surviving node, from the new owner: the ticket, matched to its server.
    let after = common::poll_until("the ticket is read from the new owner", || {
        let mut client = client.clone();
        let ticket = ticket.clone();
        async move {
            let mut stream = client
                .watch_ticket(proto::WatchTicketRequest { ticket_id: ticket })
                .await?
                .into_inner();
            stream
                .message()
                .await?
                .ok_or_else(|| tonic::Status::unknown("the stream ended empty"))
        }
    })
    .await;
    assert_eq!(after.state, proto::TicketState::Matched as i32);
    let assignment = after.assignment.expect("an assignment");
    assert_eq!(assignment.server_address, "gs-t:7777");
    assert_eq!(assignment.match_id, m.match_id);
}

/// One node owning the queues with a game server serving its matches, the moment its Redis
/// starts holding every write (`CLIENT PAUSE ... WRITE`) for a second or until [`unpause`]: long
/// enough for a call made next to reach Redis within it on a loaded machine, shorter than the
/// node's store waits for a reply (half a second more than `wait_timeout_ms`), so no write fails.
/// The lease is long enough that the renewals held meanwhile do not lose it.
async fn one_node_with_a_game_server() -> (
    RedisServer,
    tempfile::TempDir,
    ServerProcess,
    Channel,
    tonic::Streaming<proto::MatchAssignment>,
) {
    let redis = redis();
    let dir = tempfile::tempdir().unwrap();
    let config = config_with_lease(dir.path(), &redis, 5000, "");
    let node = node(&config, "n1");
    let channel = node.channel().await;
    ready(&channel).await;
    let mut gs = GameServerServiceClient::new(channel.clone());
    let offers = common::serve(&mut gs, "gs-p:7777").await;
    let mut conn = redis::Client::open(redis.url())
        .unwrap()
        .get_connection()
        .unwrap();
    let () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(1000)
        .arg("WRITE")
        .query(&mut conn)
        .unwrap();
    (redis, dir, node, channel, offers)
}

/// Ends the `CLIENT PAUSE` of [`one_node_with_a_game_server`] before its time.
fn unpause(redis: &RedisServer) {
    let mut conn = redis::Client::open(redis.url())
        .unwrap()
        .get_connection()
        .unwrap();
    let () = redis::cmd("CLIENT")
        .arg("UNPAUSE")
        .query(&mut conn)
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ticket_whose_caller_gave_up_while_it_was_written_still_waits_in_its_queue() {
    let (redis, _dir, _node, channel, mut offers) = one_node_with_a_game_server().await;
    // Redis holds every write: the ticket's write outlasts its caller's 100 ms.
    let mut client = ClientServiceClient::new(channel.clone());
    let mut request = tonic::Request::new(proto::EnterQueueRequest {
        queue: "1v1".into(),
        player_ids: vec!["pia".into()],
        ..Default::default()
    });
    request.set_timeout(Duration::from_millis(100));
    let gave_up = client.enter_queue(request).await;
    assert!(
        gave_up.is_err(),
        "answered before Redis took the write: {gave_up:?}"
    );
    unpause(&redis);
    // The ticket was written once Redis took writes again, and waits in its queue: the next
    // player is matched with it.
    common::enter(&mut client, "1v1", &["pat"]).await;
    let m = next_match(&mut offers).await;
    assert_eq!(players_of(&m), BTreeSet::from(["pia".into(), "pat".into()]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ticket_cancelled_while_it_was_written_is_in_no_match() {
    let (_redis, _dir, _node, channel, mut offers) = one_node_with_a_game_server().await;
    let mut client = ClientServiceClient::new(channel.clone());
    let entering = tokio::spawn({
        let mut client = client.clone();
        async move { common::enter(&mut client, "1v1", &["cia"]).await }
    });
    // The ticket is known (its id readable) while its write waits for Redis: cancel it then.
    let ticket = common::poll_until("the ticket is known", || {
        let mut client = client.clone();
        async move {
            client
                .get_active_ticket(proto::GetActiveTicketRequest {
                    player_id: "cia".into(),
                })
                .await
                .map(|t| t.into_inner().ticket_id)
        }
    })
    .await;
    let cancelled = client
        .cancel_ticket(proto::CancelTicketRequest {
            ticket_id: ticket.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(cancelled.state, proto::TicketState::Cancelled as i32);
    assert_eq!(entering.await.unwrap(), ticket);
    // A cancel answered OK came before any match: the next two players are matched together.
    common::enter(&mut client, "1v1", &["cob"]).await;
    common::enter(&mut client, "1v1", &["cid"]).await;
    let m = next_match(&mut offers).await;
    assert_eq!(players_of(&m), BTreeSet::from(["cob".into(), "cid".into()]));
}

/// Nodes `n1` and `n2` on `config` once one owns the queues: the nodes, the owner's name and
/// the other's.
async fn owner_and_other(
    config: &Path,
    redis: &RedisServer,
) -> (BTreeMap<String, ServerProcess>, String, String) {
    let nodes: BTreeMap<String, ServerProcess> = ["n1", "n2"]
        .iter()
        .map(|n| (n.to_string(), node(config, n)))
        .collect();
    ready(&nodes["n1"].channel().await).await;
    let owner = lease_holder(redis).expect("an owner");
    let other = nodes.keys().find(|n| **n != owner).unwrap().clone();
    (nodes, owner, other)
}

/// A node of a cluster on the Redis Cluster node at `url`, with `extra` in `[cluster]`.
fn node_on(dir: &Path, url: &str, name: &str, extra: &str) -> ServerProcess {
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(
        &path,
        format!(
            "[server]\ntick_interval_ms = 20\n[cluster]\nredis_url = \"{url}\"\nlease_ms = {LEASE_MS}\n{extra}"
        ),
    )
    .unwrap();
    node(&path, name)
}

/// Enters `a` through `first` and `b` through `second`, takes their match from `offers` and
/// reports `a` the winner through `first`: the result and its (first) acknowledgement.
async fn play(
    first: &Channel,
    second: &Channel,
    offers: &mut tonic::Streaming<proto::MatchAssignment>,
    a: &str,
    b: &str,
) -> (proto::MatchResult, proto::MatchResultAck) {
    common::enter(&mut ClientServiceClient::new(first.clone()), "1v1", &[a]).await;
    common::enter(&mut ClientServiceClient::new(second.clone()), "1v1", &[b]).await;
    let m = next_match(offers).await;
    assert_eq!(players_of(&m), BTreeSet::from([a.into(), b.into()]));
    let result = proto::MatchResult {
        match_id: m.match_id.clone(),
        placements: common::placements_with_winner(&m, a),
        ..Default::default()
    };
    let ack = GameServerServiceClient::new(first.clone())
        .report_match_result(result.clone())
        .await
        .unwrap()
        .into_inner();
    assert!(!ack.duplicate);
    (result, ack)
}

/// Reports `result` again through `channel` until a node answers (the queues may be moving):
/// its acknowledgement must be the first one, marked as a duplicate.
async fn reported_before(
    channel: &Channel,
    result: &proto::MatchResult,
    ack: &proto::MatchResultAck,
) {
    let again = common::poll_until("the result is read back", || {
        let result = result.clone();
        let mut gs = GameServerServiceClient::new(channel.clone());
        async move { gs.report_match_result(result).await.map(|r| r.into_inner()) }
    })
    .await;
    assert!(again.duplicate);
    assert!(common::same_changes(&again.changes, &ack.changes));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keyspace_whose_slot_moves_to_another_redis_cluster_primary_loses_nothing() {
    let redis = matchmaker::store::RedisCluster::start().unwrap_or_else(|e| panic!("{e}"));
    let from = redis.primary_of("{mm}:lease").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let nodes = [
        node_on(dir.path(), &redis.url(from + 1), "m1", ""),
        node_on(dir.path(), &redis.url(from + 2), "m2", ""),
    ];
    let (first, second) = (nodes[0].channel().await, nodes[1].channel().await);
    ready(&second).await;
    let mut offers = common::serve(
        &mut GameServerServiceClient::new(second.clone()),
        "gs-m:7777",
    )
    .await;
    let (result, ack) = play(&first, &second, &mut offers, "ann", "ben").await;
    // A ticket waits through the move.
    common::enter(
        &mut ClientServiceClient::new(first.clone()),
        "1v1",
        &["cat"],
    )
    .await;
    // A resharding moves the keyspace's slot, its keys a hundred at a time, while the owner
    // renews its lease and the other node follows it.
    let to = (from + 1) % 3;
    tokio::task::block_in_place(|| redis.move_slot("{mm}:lease", to)).unwrap();
    assert_eq!(redis.primary_of("{mm}:lease").unwrap(), to);
    reported_before(&second, &result, &ack).await;
    common::enter(
        &mut ClientServiceClient::new(second.clone()),
        "1v1",
        &["dan"],
    )
    .await;
    let m = next_match(&mut offers).await;
    assert_eq!(players_of(&m), BTreeSet::from(["cat".into(), "dan".into()]));
    for channel in [&first, &second] {
        let ann = rating(channel, "ann").await;
        assert_eq!((ann.games, ann.wins), (1, 1));
    }
}

/// On a Redis Cluster with replicas and `wait_replicas = 1`, a result is acknowledged once the
/// replica of the keyspace's primary has it: when that primary dies, its replica takes over and
/// the nodes carry on with every acknowledged result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_results_survive_the_death_of_the_redis_cluster_primary_holding_them() {
    let mut redis =
        matchmaker::store::RedisCluster::start_with_replicas(1).unwrap_or_else(|e| panic!("{e}"));
    let primary = redis.primary_of("{mm}:lease").unwrap();
    let dir = tempfile::tempdir().unwrap();
    // Each node starts from a primary that does not hold the keyspace.
    let nodes = [
        node_on(
            dir.path(),
            &redis.url((primary + 1) % 3),
            "c1",
            "wait_replicas = 1\n",
        ),
        node_on(
            dir.path(),
            &redis.url((primary + 2) % 3),
            "c2",
            "wait_replicas = 1\n",
        ),
    ];
    let (first, second) = (nodes[0].channel().await, nodes[1].channel().await);
    ready(&second).await;
    let mut offers = common::serve(
        &mut GameServerServiceClient::new(second.clone()),
        "gs-r:7777",
    )
    .await;
    let (result, ack) = play(&first, &second, &mut offers, "ann", "ben").await;

    redis.node(primary).kill();
    // The replica takes the slots over (the nodes time out after a second) with the result.
    common::poll_until("the replica takes over", || {
        let now = redis.primary_of("{mm}:lease");
        async move {
            match now {
                Ok(now) if now != primary => Ok(now),
                other => Err(format!("{other:?}")),
            }
        }
    })
    .await;
    let mut conn = redis::cluster::ClusterClient::new(vec![redis.url(primary + 1)])
        .unwrap()
        .get_connection()
        .unwrap();
    let kept: bool = redis::cmd("HEXISTS")
        .arg("{mm}:acks")
        .arg(&result.match_id)
        .query(&mut conn)
        .unwrap();
    assert!(kept, "the acknowledged result was lost with the primary");
    // The old primary comes back, as the new one's replica: results are acknowledged again.
    redis.node(primary).restart().unwrap();
    redis.wait_in_step().unwrap();
    // Meanwhile calls failed or waited; the nodes carry on from what the replica holds.
    reported_before(&second, &result, &ack).await;
    for channel in [&first, &second] {
        let ann = rating(channel, "ann").await;
        assert_eq!((ann.games, ann.wins), (1, 1));
    }
    let (_, ack) = play(&first, &second, &mut offers, "cat", "dan").await;
    assert!(!ack.changes.is_empty());
}

/// Records written through the node that owns the queues are read through the other node, by
/// forwarding while the writer owns them, and from Redis once the writer is killed and the
/// other node took over: party rosters, completed and cancelled matches in the match history,
/// and a started match.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_written_through_one_node_are_read_through_the_other_after_it_died() {
    let redis = redis();
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path(), &redis, "");
    let (mut nodes, owner, other) = owner_and_other(&config, &redis).await;
    let writer = nodes[&owner].channel().await;
    let reader = nodes[&other].channel().await;

    let mut parties = PartyServiceClient::new(writer.clone());
    let party = parties
        .create_party(proto::CreatePartyRequest {
            player_id: "cr-lead".into(),
        })
        .await
        .unwrap()
        .into_inner();
    let party = parties
        .join_party(proto::JoinPartyRequest {
            invite_code: party.invite_code,
            player_id: "cr-mate".into(),
        })
        .await
        .unwrap()
        .into_inner();
    let mut gs = GameServerServiceClient::new(writer.clone());
    let mut offers = common::serve(&mut gs, "gs-cr:7777").await;
    let mut client = ClientServiceClient::new(writer.clone());
    let mut served = Vec::new();
    for pair in [["cr-a", "cr-b"], ["cr-c", "cr-d"], ["cr-e", "cr-f"]] {
        for p in pair {
            common::enter(&mut client, "1v1", &[p]).await;
        }
        served.push(next_match(&mut offers).await);
    }
    let start = |id: &str| proto::StartMatchRequest {
        match_id: id.into(),
    };
    let ack = gs
        .report_match_result(proto::MatchResult {
            match_id: served[0].match_id.clone(),
            placements: common::placements_with_winner(&served[0], "cr-a"),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let started = gs
        .start_match(start(&served[1].match_id))
        .await
        .unwrap()
        .into_inner()
        .started_unix;
    gs.start_match(start(&served[2].match_id)).await.unwrap();
    let requeued = gs
        .cancel_match(proto::CancelMatchRequest {
            match_id: served[2].match_id.clone(),
            reason: "crashed".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .requeued_ticket_ids;
    assert!(requeued.is_empty(), "a started match ends");

    // What the reader must see, first forwarded to the writer, then from Redis.
    let check = |channel: Channel| {
        let (party, ack, served) = (party.clone(), ack.clone(), served.clone());
        async move {
            let mut client = ClientServiceClient::new(channel.clone());
            let get = |id: &str| proto::GetMatchRequest {
                match_id: id.into(),
            };
            let done = client
                .get_match(get(&served[0].match_id))
                .await
                .expect("the completed match")
                .into_inner();
            assert_eq!(done.phase, proto::MatchPhase::Completed as i32);
            assert!(common::same_changes(&done.changes, &ack.changes));
            let history = client
                .list_player_matches(proto::ListPlayerMatchesRequest {
                    player_id: "cr-a".into(),
                    ..Default::default()
                })
                .await
                .unwrap()
                .into_inner();
            assert_eq!(history.matches, vec![done]);
            let live = client
                .get_match(get(&served[1].match_id))
                .await
                .unwrap()
                .into_inner();
            assert_eq!(
                (live.phase, live.started_unix),
                (proto::MatchPhase::Started as i32, started)
            );
            let u = client
                .get_active_ticket(proto::GetActiveTicketRequest {
                    player_id: "cr-c".into(),
                })
                .await
                .unwrap()
                .into_inner();
            assert_eq!(u.assignment.unwrap().match_id, served[1].match_id);
            let cancelled = client
                .get_match(get(&served[2].match_id))
                .await
                .unwrap()
                .into_inner();
            assert_eq!(cancelled.phase, proto::MatchPhase::Cancelled as i32);
            let again = PartyServiceClient::new(channel)
                .get_party(proto::GetPartyRequest {
                    party_id: party.party_id.clone(),
                })
                .await
                .unwrap()
                .into_inner();
            assert_eq!(again, party);
        }
    };
    check(reader.clone()).await;

    kill_owner_until(&mut nodes, &owner, &redis, &other).await;
    ready(&reader).await;
    check(reader).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bans_audit_entries_and_one_event_stream_hold_on_every_node_and_across_a_failover() {
    let redis = redis();
    let dir = tempfile::tempdir().unwrap();
    let config = config_with_lease(dir.path(), &redis, 2000, "");
    let mut nodes: BTreeMap<String, ServerProcess> = ["n1", "n2"]
        .iter()
        .map(|n| (n.to_string(), node(&config, n)))
        .collect();
    let n1 = nodes["n1"].channel().await;
    let n2 = nodes["n2"].channel().await;
    ready(&n1).await;
    // SIGHUP on the node that does not own the queues is harmless (it runs no engine to reload).
    let owner = lease_holder(&redis).expect("an owner");
    let survivor = if owner == "n1" { "n2" } else { "n1" };
    let status = Command::new("kill")
        .args(["-HUP", &nodes[survivor].child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    AdminServiceClient::new(n1.clone())
        .ban_player(proto::BanPlayerRequest {
            player_id: "cheat".into(),
            until_unix: 0,
            reason: "wallhack".into(),
        })
        .await
        .unwrap();
    for ch in [&n1, &n2] {
        let e = ClientServiceClient::new(ch.clone())
            .enter_queue(proto::EnterQueueRequest {
                queue: "1v1".into(),
                player_ids: vec!["cheat".into()],
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_eq!(e.code(), tonic::Code::PermissionDenied);
        assert!(e.message().contains("wallhack"), "{e:?}");
    }
    let before = common::watch_events(&n2, 0, &[], 1).await;
    assert_eq!(before[0].kind, proto::EventKind::PlayerBanned as i32);

    // The owner dies; the survivor owns the queues with the same records.
    assert_eq!(lease_holder(&redis).as_deref(), Some(owner.as_str()));
    let survivor_channel = nodes[survivor].channel().await;
    kill_owner_until(&mut nodes, &owner, &redis, survivor).await;
    ready(&survivor_channel).await;
    let e = ClientServiceClient::new(survivor_channel.clone())
        .enter_queue(proto::EnterQueueRequest {
            queue: "1v1".into(),
            player_ids: vec!["cheat".into()],
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(
        e.code(),
        tonic::Code::PermissionDenied,
        "the ban outlived its node"
    );
    let mut admin = AdminServiceClient::new(survivor_channel.clone());
    admin
        .delete_player(proto::DeletePlayerRequest {
            player_id: "cheat".into(),
        })
        .await
        .unwrap();
    // One stream across owners: the same first event (the erasure put its marker in the
    // banned player's place), then the new owner's, after it, naming the erased id.
    let after = common::watch_events(&survivor_channel, 0, &[], 2).await;
    assert!(after[0].player_id.starts_with("erased:"), "{:?}", after[0]);
    assert_eq!(
        proto::Event {
            player_id: before[0].player_id.clone(),
            ..after[0].clone()
        },
        before[0]
    );
    assert_eq!(after[1].kind, proto::EventKind::PlayerDeleted as i32);
    assert_eq!(after[1].player_id, "cheat");
    assert!(after[1].cursor > after[0].cursor);
    let audit = admin
        .list_audit_log(proto::ListAuditLogRequest::default())
        .await
        .unwrap()
        .into_inner()
        .entries;
    // Both owners wrote to the one log (`ready` polls GetQueueStats, left out here).
    let actions: Vec<&str> = audit
        .iter()
        .map(|e| e.action.as_str())
        .filter(|a| *a != "GetQueueStats")
        .collect();
    assert_eq!(
        actions,
        vec!["BanPlayer", "WatchEvents", "DeletePlayer", "WatchEvents"]
    );
    // The erasure took the ban with it: the id starts again.
    common::enter(
        &mut ClientServiceClient::new(survivor_channel),
        "1v1",
        &["cheat"],
    )
    .await;
}

/// `DeletePlayer` through a node that does not own the queues erases the player's match history
/// in Redis: their list is empty, the match the other player keeps names a marker in their
/// place (and so does a repeated report's answer), through either node and after the owner was
/// killed and the other node took over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_erasure_through_any_node_takes_the_match_history_in_redis_with_it() {
    let redis = redis();
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path(), &redis, "");
    let (mut nodes, owner, other) = owner_and_other(&config, &redis).await;
    let writer = nodes[&owner].channel().await;
    let reader = nodes[&other].channel().await;
    let mut gs = GameServerServiceClient::new(writer.clone());
    let mut offers = common::serve(&mut gs, "gs-er:7777").await;
    let mut client = ClientServiceClient::new(writer.clone());
    for p in ["er-gone", "er-keeps"] {
        common::enter(&mut client, "1v1", &[p]).await;
    }
    let m = next_match(&mut offers).await;
    gs.report_match_result(proto::MatchResult {
        match_id: m.match_id.clone(),
        placements: common::placements_with_winner(&m, "er-gone"),
        ..Default::default()
    })
    .await
    .unwrap();
    AdminServiceClient::new(reader.clone())
        .delete_player(proto::DeletePlayerRequest {
            player_id: "er-gone".into(),
        })
        .await
        .unwrap();

    let check = |channel: Channel| {
        let id = m.match_id.clone();
        async move {
            let mut client = ClientServiceClient::new(channel.clone());
            let list = |player: &str| proto::ListPlayerMatchesRequest {
                player_id: player.into(),
                ..Default::default()
            };
            let mine = client.list_player_matches(list("er-gone")).await.unwrap();
            assert!(mine.into_inner().matches.is_empty());
            let theirs = client.list_player_matches(list("er-keeps")).await.unwrap();
            let record = theirs.into_inner().matches.remove(0);
            assert_eq!(record.match_id, id);
            let named: Vec<String> = record
                .teams
                .iter()
                .flat_map(|t| t.player_ids.clone())
                .chain(record.changes.iter().map(|c| c.player_id.clone()))
                .collect();
            assert!(!named.contains(&"er-gone".to_string()), "{named:?}");
            assert_eq!(
                named.iter().filter(|p| p.starts_with("erased:")).count(),
                2,
                "{named:?}"
            );
            let again = GameServerServiceClient::new(channel)
                .report_match_result(proto::MatchResult {
                    match_id: id,
                    placements: record.placements.clone(),
                    ..Default::default()
                })
                .await
                .unwrap()
                .into_inner();
            assert!(again.duplicate);
            assert!(again.changes.iter().all(|c| c.player_id != "er-gone"));
        }
    };
    check(reader.clone()).await;
    check(writer).await;

    kill_owner_until(&mut nodes, &owner, &redis, &other).await;
    ready(&reader).await;
    check(reader).await;
}

/// A reload the owner accepted is kept in Redis: when the owner dies, the node that takes the
/// queues over applies the same queue settings though its own file never changed (here a
/// ready-check on 2v2, which its file does not have).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_on_the_owner_outlives_it_on_a_node_whose_file_never_had_it() {
    let redis = redis();
    let dir = tempfile::tempdir().unwrap();
    let mut files = BTreeMap::new();
    let mut nodes: BTreeMap<String, ServerProcess> = BTreeMap::new();
    for n in ["n1", "n2"] {
        let own = dir.path().join(n);
        std::fs::create_dir_all(&own).unwrap();
        let file = config(&own, &redis, "");
        nodes.insert(n.to_string(), node(&file, n));
        files.insert(n.to_string(), file);
    }
    ready(&nodes["n1"].channel().await).await;
    let owner = lease_holder(&redis).expect("an owner");
    let other = nodes.keys().find(|n| **n != owner).unwrap().clone();
    let reader = nodes[&other].channel().await;
    // The owner's file gains the ready-check; the reload goes through the other node to it.
    let base = std::fs::read_to_string(&files[&owner]).unwrap();
    std::fs::write(
        &files[&owner],
        format!("{base}\n[queues.2v2]\nready_check_seconds = 12.0\n"),
    )
    .unwrap();
    let changed = AdminServiceClient::new(reader.clone())
        .reload_config(proto::ReloadConfigRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(changed.changed_queues, vec!["2v2"]);

    kill_owner_until(&mut nodes, &owner, &redis, &other).await;
    ready(&reader).await;
    let mut client = ClientServiceClient::new(reader);
    let mut tickets = Vec::new();
    for p in ["rl-1", "rl-2", "rl-3", "rl-4"] {
        tickets.push(common::enter(&mut client, "2v2", &[p]).await);
    }
    let mut watch = common::watch(&mut client, &tickets[0]).await;
    let matched = loop {
        let u = common::next(&mut watch).await;
        if u.state == proto::TicketState::Matched as i32 {
            break u;
        }
    };
    let ready = matched
        .ready_check
        .expect("the new owner applies the reload's ready-check");
    assert!(
        ready.seconds_left > 0.0 && ready.seconds_left <= 12.0,
        "{ready:?}"
    );
}

/// Waits until each count of `answered` (calls answered, one count per caller) is past its
/// `floor`.
async fn answered_past(
    what: &str,
    answered: &[std::sync::Arc<std::sync::atomic::AtomicU32>],
    floor: &[u32],
) {
    common::poll_until(what, || {
        let now: Vec<u32> = answered
            .iter()
            .map(|n| n.load(std::sync::atomic::Ordering::Relaxed))
            .collect();
        let past = now.iter().zip(floor).all(|(n, f)| n > f);
        async move { if past { Ok(()) } else { Err(now) } }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopping_owner_ends_its_links_and_hands_its_queues_over_at_once() {
    let redis = redis();
    let dir = tempfile::tempdir().unwrap();
    // A long lease: an owner that stopped gracefully gives it up before its process ends, so
    // the next node takes the queues at its next try (a quarter lease after the exit at most),
    // long before the lease would have expired (it was renewed a quarter lease before the
    // release at most, so it would last three quarters of a lease after the exit).
    let lease_ms = 12_000;
    let config = config_with_lease(dir.path(), &redis, lease_ms, "");
    let (mut nodes, owner, other) = owner_and_other(&config, &redis).await;
    let channel = nodes[&other].channel().await;
    // Calls through the other node open its links to the owner; tickets wait (six players
    // never fill a 5v5 match).
    let mut client = ClientServiceClient::new(channel.clone());
    let mut tickets = Vec::new();
    for i in 0..6 {
        tickets.push(common::enter(&mut client, "5v5", &[format!("s{i}").as_str()]).await);
    }
    // A game server and a watcher connected to the other node: their streams go on through
    // the hand-over (the stopping owner ends them marked as no longer its own).
    let mut gs = GameServerServiceClient::new(channel.clone());
    let mut offers = common::serve(&mut gs, "stays:1").await;
    let mut watch = common::watch(&mut client, &tickets[0]).await;
    assert_eq!(
        common::next(&mut watch).await.state,
        proto::TicketState::Searching as i32
    );
    // An event watcher on the other node too: its stream does not outlive owners, and must
    // not hold the stopping owner open either.
    let mut events = AdminServiceClient::new(channel.clone())
        .watch_events(proto::WatchEventsRequest::default())
        .await
        .unwrap()
        .into_inner();
    let waiting = |channel: Channel| async move {
        let stats = AdminServiceClient::new(channel)
            .get_queue_stats(proto::GetQueueStatsRequest::default())
            .await
            .unwrap()
            .into_inner();
        let waiting: u64 = stats.queues.iter().map(|q| q.tickets_waiting).sum();
        waiting
    };
    let before = waiting(channel.clone()).await;
    assert_eq!(before, 6);
    // Calls keep coming through the other node while the owner stops. Each caller counts the
    // calls answered: the stats caller's count first, then each party caller's.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let answered: Vec<std::sync::Arc<std::sync::atomic::AtomicU32>> =
        (0..5).map(|_| Default::default()).collect();
    let caller = tokio::spawn({
        let stop = stop.clone();
        let answered = answered[0].clone();
        let mut admin = AdminServiceClient::new(channel.clone());
        async move {
            let (mut ok, mut failed) = (0u32, Vec::new());
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let mut request = tonic::Request::new(proto::GetQueueStatsRequest::default());
                request.set_timeout(Duration::from_secs(20));
                match admin.get_queue_stats(request).await {
                    Ok(_) => {
                        ok += 1;
                        answered.store(ok, std::sync::atomic::Ordering::Relaxed);
                    }
                    Err(e) => failed.push(e.to_string()),
                }
            }
            (ok, failed)
        }
    });
    // And calls that are sent only once (CreateParty): those on their way to the owner as it
    // stops are sent to the next owner, not failed as possibly served.
    let party_callers: Vec<_> = (0..4)
        .map(|k| {
            let stop = stop.clone();
            let answered = answered[k + 1].clone();
            let mut parties = PartyServiceClient::new(channel.clone());
            tokio::spawn(async move {
                let (mut ok, mut failed) = (0u32, Vec::new());
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let mut request = tonic::Request::new(proto::CreatePartyRequest {
                        player_id: format!("party-{k}-{ok}-{}", failed.len()),
                    });
                    request.set_timeout(Duration::from_secs(20));
                    match parties.create_party(request).await {
                        Ok(_) => {
                            ok += 1;
                            answered.store(ok, std::sync::atomic::Ordering::Relaxed);
                        }
                        Err(e) => failed.push(e.to_string()),
                    }
                }
                (ok, failed)
            })
        })
        .collect();
    // Every caller's calls reach the owner before it is asked to stop.
    answered_past("every caller answered by the owner", &answered, &[0; 5]).await;
    let stopping = Instant::now();
    nodes[&owner].signal("TERM");
    // The owner's process ends: the links the other node holds to it do not keep it open.
    let mut stopped = nodes.remove(&owner).unwrap();
    common::poll_until_blocking("the owner's process ends", || {
        match stopped.child.try_wait() {
            Ok(Some(status)) => Ok(status),
            other => Err(format!("{other:?}")),
        }
    });
    let exited = stopping.elapsed();
    // The event stream ends UNAVAILABLE (its client resumes after its last cursor elsewhere).
    let ended = loop {
        match tokio::time::timeout(common::EVENT_TIMEOUT, events.message()).await {
            Ok(Ok(Some(_))) => {}
            Ok(other) => break other,
            Err(_) => panic!("the event stream outlived its owner"),
        }
    };
    assert_eq!(
        ended.map(|_| ()).unwrap_err().code(),
        tonic::Code::Unavailable
    );
    holder_becomes(&redis, &other).await;
    let handed_over = stopping.elapsed();
    // Measured from the exit, not the signal: how long the owner takes to stop (its streams'
    // grace time, a loaded machine) is not what this checks.
    assert!(
        handed_over < exited + Duration::from_millis(lease_ms / 2),
        "the queues moved after {handed_over:?} (exit after {exited:?}): the lease was not given up"
    );
    // Every caller goes on with the next owner; the calls made meanwhile were answered, by one
    // owner or the next.
    let so_far: Vec<u32> = answered
        .iter()
        .map(|n| n.load(std::sync::atomic::Ordering::Relaxed))
        .collect();
    answered_past(
        "every caller answered by the next owner",
        &answered,
        &so_far,
    )
    .await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (ok, failed) = caller.await.unwrap();
    assert!(failed.is_empty(), "{ok} answered, failed: {failed:?}");
    for party_caller in party_callers {
        let (ok, failed) = party_caller.await.unwrap();
        assert!(
            failed.is_empty(),
            "{ok} parties created, failed: {failed:?}"
        );
    }
    assert_eq!(
        waiting(channel).await,
        before,
        "the waiting tickets moved with the queues"
    );
    client
        .cancel_ticket(proto::CancelTicketRequest {
            ticket_id: tickets[0].clone(),
        })
        .await
        .unwrap();
    // The next owner sends the ticket's state again, then the cancel.
    let mut update = common::next(&mut watch).await;
    while update.state == proto::TicketState::Searching as i32 {
        update = common::next(&mut watch).await;
    }
    assert_eq!(update.state, proto::TicketState::Cancelled as i32);
    for p in ["g1", "g2"] {
        common::enter(&mut client, "1v1", &[p]).await;
    }
    let m = common::next(&mut offers).await;
    assert_eq!(m.queue, "1v1", "the game server is still registered");
    eprintln!("owner exited after {exited:?}; queues handed over after {handed_over:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopping_owner_exits_within_its_grace_time_though_a_stream_consumer_reads_nothing() {
    let redis = redis();
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path(), &redis, "");
    let grace = Duration::from_millis(1500);
    let start = |name: &str| {
        let mut command = common::serve_command(&config, "");
        command
            .env("MATCHMAKER_CLUSTER__NODE_ID", name)
            .env("MATCHMAKER_SERVER__DRAIN_MS", "0")
            .env(
                "MATCHMAKER_SERVER__SHUTDOWN_GRACE_MS",
                grace.as_millis().to_string(),
            );
        (name.to_string(), ServerProcess::spawn(command))
    };
    let mut nodes: BTreeMap<String, ServerProcess> = [start("n1"), start("n2")].into();
    ready(&nodes["n1"].channel().await).await;
    let owner = lease_holder(&redis).expect("an owner");
    let other = nodes.keys().find(|n| **n != owner).unwrap().clone();
    // An event watcher on the owner that never reads: its stream's flow-control window (a few
    // bytes) fills, then everything the owner holds for it.
    let stalled = Channel::from_shared(format!("http://{}", nodes[&owner].addr))
        .unwrap()
        .initial_stream_window_size(Some(64))
        .connect()
        .await
        .unwrap();
    let _unread = AdminServiceClient::new(stalled)
        .watch_events(proto::WatchEventsRequest::default())
        .await
        .unwrap()
        .into_inner();
    let mut admin = AdminServiceClient::new(nodes[&owner].channel().await);
    for i in 0..200 {
        admin
            .ban_player(proto::BanPlayerRequest {
                player_id: format!("p{i}"),
                until_unix: 0,
                reason: "a test ban".into(),
            })
            .await
            .unwrap();
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let stopping = Instant::now();
    nodes[&owner].signal("TERM");
    let mut stopped = nodes.remove(&owner).unwrap();
    // Not a hang: its drain, engine and journal each wait at most the grace time, then the
    // last flush and the lease's release; a loaded machine adds its scheduling.
    let bound = 3 * grace + common::EVENT_TIMEOUT;
    loop {
        if stopped.child.try_wait().unwrap().is_some() {
            break;
        }
        assert!(
            stopping.elapsed() < bound,
            "the owner still runs {bound:?} after SIGTERM, with a grace time of {grace:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    holder_becomes(&redis, &other).await;
    ready(&nodes[&other].channel().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_reflection_answers_through_every_node_while_its_client_keeps_its_side_open() {
    use tokio_stream::StreamExt;
    use tonic_reflection::pb::v1::ServerReflectionRequest;
    use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
    use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
    use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;
    let redis = redis();
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path(), &redis, "");
    let (nodes, owner, other) = owner_and_other(&config, &redis).await;
    for name in [&other, &owner] {
        let mut reflection = ServerReflectionClient::new(nodes[name].channel().await);
        let request = ServerReflectionRequest {
            host: String::new(),
            message_request: Some(MessageRequest::ListServices(String::new())),
        };
        // As grpcurl does: one request, and the request side stays open.
        let requests = tokio_stream::iter([request]).chain(tokio_stream::pending());
        let mut responses = tokio::time::timeout(
            common::EVENT_TIMEOUT,
            reflection.server_reflection_info(requests),
        )
        .await
        .unwrap_or_else(|_| panic!("{name}: no reflection answer"))
        .unwrap()
        .into_inner();
        let response = common::next(&mut responses).await;
        let Some(MessageResponse::ListServicesResponse(list)) = response.message_response else {
            panic!("unexpected reflection response {response:?}");
        };
        assert!(
            list.service
                .iter()
                .any(|s| s.name == "matchmaker.v1.ClientService"),
            "{name}: {list:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_keep_their_state_in_a_redis_that_takes_only_tls_with_client_certificates() {
    let dir = tempfile::tempdir().unwrap();
    let (redis, cert_file, key_file, tls) = common::tls_redis(dir.path());
    assert!(redis.url().starts_with("rediss://"));
    let files = format!(
        "redis_ca_file = {:?}\nredis_cert_file = {:?}\nredis_key_file = {:?}\n",
        cert_file.display().to_string(),
        cert_file.display().to_string(),
        key_file.display().to_string()
    );
    let config = config(dir.path(), &redis, &files);
    let owner = node(&config, "owner");
    ready(&owner.channel().await).await;
    let other = node(&config, "other");
    let mut client = ClientServiceClient::new(other.channel().await);
    let ticket = common::enter(&mut client, "1v1", &["tls-player"]).await;
    // The owner wrote the ticket to Redis, over TLS.
    let redis_client = redis::Client::build_with_tls(
        redis.url(),
        redis::TlsCertificates {
            client_tls: tls
                .client
                .clone()
                .map(|(cert, key)| redis::ClientTlsConfig {
                    client_cert: cert,
                    client_key: key,
                }),
            root_cert: tls.ca_pem.clone(),
        },
    )
    .unwrap();
    let mut conn = redis_client.get_connection().unwrap();
    let stored: bool = redis::cmd("HEXISTS")
        .arg("{mm}:tickets")
        .arg(&ticket)
        .query(&mut conn)
        .unwrap();
    assert!(stored, "ticket {ticket} is in Redis");

    // A node without the client certificate is refused by Redis, and stops saying where.
    let bare_dir = dir.path().join("bare");
    std::fs::create_dir(&bare_dir).unwrap();
    let bare = config_with_lease(
        &bare_dir,
        &redis,
        LEASE_MS,
        &format!("redis_ca_file = {:?}\n", cert_file.display().to_string()),
    );
    let mut refused = common::serve_command(&bare, "")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = refused.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "the node without a client certificate kept running"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut refused.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(!status.success());
    assert!(
        stderr.contains(&format!("cluster.redis_url {}", redis.url())),
        "{stderr}"
    );
}

/// Writes `n` rated 1v1 players straight into `redis`, under a lease of the writer's own that it
/// gives up at the end (no node runs yet).
async fn store_players(redis: &RedisServer, n: usize) {
    use matchmaker::store::Storage;
    let client = redis::Client::open(redis.url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let () = redis::cmd("SET")
        .arg("{mm}:lease")
        .arg("1|seed|-")
        .query_async(&mut conn)
        .await
        .unwrap();
    let store = matchmaker::store::RedisStore::open(
        &redis.url(),
        1,
        &matchmaker::store::RedisOptions::default(),
    )
    .await
    .unwrap();
    let config = matchmaker::config::Config::from_toml_str("").unwrap();
    let q = &config.queues["1v1"];
    let pools = BTreeMap::from([("1v1".to_string(), {
        // Rated a while ago: a soft reset grows the deviation of every one of them.
        let mut r = matchmaker::records::PoolRecord::initial(&q.rating, q.ranking, &config.ranking);
        r.skill.deviation = 100.0;
        r
    })]);
    for chunk in (0..n).collect::<Vec<_>>().chunks(10_000) {
        let ids: Vec<matchmaker::ids::PlayerId> = chunk
            .iter()
            .map(|i| matchmaker::ids::PlayerId::new(format!("stored-{i}").as_str()))
            .collect();
        let rows: Vec<_> = ids.iter().map(|id| (id, &pools)).collect();
        store.put_players(&rows).unwrap();
        store.flush_async().await.unwrap();
    }
    drop(store);
    let _: i64 = redis::cmd("DEL")
        .arg("{mm}:lease")
        .query_async(&mut conn)
        .await
        .unwrap();
}

/// A node that takes the queues over a large state loads it on threads of its own: its lease
/// renewals go on meanwhile, so it keeps the lease it took (before, a load longer than the
/// lease starved them, the lease lapsed, and the queues passed from node to node as each one
/// loaded).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_owner_keeps_its_lease_while_it_loads_a_large_state() {
    // Enough players that loading them (about 3.5 s in a debug build on two idle cores, three
    // times that on a busy machine) outlasts the lease on any machine this runs on; a lease
    // long enough that the machine's scheduling does not lapse it (its renewals get a quarter
    // lease each to be answered).
    const PLAYERS: usize = 400_000;
    let lease_ms = 1500;
    let redis = redis();
    store_players(&redis, PLAYERS).await;
    let dir = tempfile::tempdir().unwrap();
    let config = config_with_lease(dir.path(), &redis, lease_ms, "");
    let owner = node(&config, "loader");
    let started = Instant::now();
    let channel = owner.channel().await;
    common::poll_until_within("the loader answers", Duration::from_secs(90), || {
        let mut admin = AdminServiceClient::new(channel.clone());
        async move {
            admin
                .get_queue_stats(proto::GetQueueStatsRequest::default())
                .await
                .map(drop)
        }
    })
    .await;
    let loaded = started.elapsed();
    logs(&owner, &format!("cluster store loaded players={PLAYERS}")).await;
    // The lease it took first is still its own: renewed all along, since it would have
    // lapsed during the load otherwise (and been taken again under a new token).
    let held = lease_value(&redis).unwrap_or_default();
    assert!(
        held.starts_with("1|loader|"),
        "the lease after {loaded:?} of loading: {held:?}; {:?}",
        owner.log_lines()
    );
    let client = redis::Client::open(redis.url()).unwrap();
    let mut conn = client.get_connection().unwrap();
    let tokens: u64 = redis::cmd("GET")
        .arg("{mm}:fence")
        .query(&mut conn)
        .unwrap();
    assert_eq!(
        tokens,
        1,
        "the lease was taken {tokens} times in {loaded:?} of loading: {:?}",
        owner.log_lines()
    );
    // Without its renewals the lease would have lapsed during the load.
    assert!(
        loaded > Duration::from_millis(lease_ms),
        "the load ({loaded:?}) must outlast the lease ({lease_ms} ms) for this test to mean anything"
    );
    eprintln!("loaded {PLAYERS} players in {loaded:?} on a {lease_ms} ms lease");
}

/// A season reset of a pool too large for one Redis script (Redis would run it for seconds
/// and nothing else meanwhile, and past the owner's reply time cut it off) is written in parts
/// and committed whole: every player is reset, as read through either node, and as the next
/// owner loads it after the writer is killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_season_reset_of_a_large_pool_is_written_in_parts_and_seen_whole_from_every_node() {
    const PLAYERS: u64 = 12_000;
    let redis = redis();
    store_players(&redis, PLAYERS as usize).await;
    let dir = tempfile::tempdir().unwrap();
    // The reset must be written by the owner found here, so a lease the staging does not lapse.
    let config = config_with_lease(dir.path(), &redis, STEADY_LEASE_MS, "");
    let (mut nodes, owner, other) = owner_and_other(&config, &redis).await;
    let through = nodes[&other].channel().await;
    let mut admin = AdminServiceClient::new(through.clone());
    admin
        .set_rating(proto::SetRatingRequest {
            player_id: "stored-7".into(),
            queue: "1v1".into(),
            rating: Some(proto::Rating {
                mean: 1700.0,
                deviation: 50.0,
                volatility: 0.06,
                ..Default::default()
            }),
            ..Default::default()
        })
        .await
        .unwrap();
    let before = rating(&through, "stored-7").await;
    let out = admin
        .season_reset(proto::SeasonResetRequest {
            kind: proto::SeasonResetKind::Soft as i32,
            queue: "1v1".into(),
            dry_run: false,
        })
        .await
        .expect("season_reset")
        .into_inner();
    assert_eq!(out.players_changed, PLAYERS);
    assert_eq!(out.week, before.week + 1);
    logs(&nodes[&owner], "wrote a large batch in parts").await;
    let mut conn = redis::Client::open(redis.url())
        .unwrap()
        .get_connection()
        .unwrap();
    let staged: bool = redis::cmd("EXISTS")
        .arg("{mm}:staged")
        .query(&mut conn)
        .unwrap();
    assert!(!staged, "the stage is gone once applied");
    let deviation = |view: &proto::PlayerView| view.rating.as_ref().unwrap().deviation;
    let after = rating(&through, "stored-7").await;
    assert_eq!(after.week, before.week + 1);
    assert!(
        deviation(&after) > deviation(&before),
        "a soft reset grows the deviation: {after:?}"
    );
    // The next owner loads the reset whole.
    kill_owner_until(&mut nodes, &owner, &redis, &other).await;
    ready(&through).await;
    let last = rating(&through, "stored-11999").await;
    assert_eq!(last.week, before.week + 1);
    let again = rating(&through, "stored-7").await;
    assert_eq!(again.rating, after.rating);
    assert_eq!(again.rank_points, after.rank_points);
}

/// A self-signed certificate for `localhost` and 127.0.0.1, written to `dir`: its PEM, and the
/// `[tls]` section that serves it.
fn certificate(dir: &Path) -> (String, String) {
    let cert =
        rcgen::generate_simple_self_signed(vec!["localhost".into(), "127.0.0.1".into()]).unwrap();
    let pem = cert.cert.pem();
    let cert_file = dir.join("cert.pem");
    let key_file = dir.join("key.pem");
    std::fs::write(&cert_file, &pem).unwrap();
    std::fs::write(&key_file, cert.signing_key.serialize_pem()).unwrap();
    let section = format!(
        "[tls]\nenabled = true\ncert_file = {:?}\nkey_file = {:?}\n",
        cert_file.display().to_string(),
        key_file.display().to_string()
    );
    (pem, section)
}

async fn tls_channel(node: &ServerProcess, ca_pem: &str) -> Channel {
    let tls = tonic::transport::ClientTlsConfig::new()
        .ca_certificate(tonic::transport::Certificate::from_pem(ca_pem))
        .domain_name("localhost");
    Channel::from_shared(format!("https://{}", node.addr))
        .unwrap()
        .tls_config(tls)
        .unwrap()
        .connect()
        .await
        .expect("TLS connect")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_tls_on_nodes_forward_over_tls_and_check_each_others_certificate() {
    let redis = redis();
    let dir = tempfile::tempdir().unwrap();
    let (pem, tls) = certificate(dir.path());
    let trusting = config_with_lease(dir.path(), &redis, STEADY_LEASE_MS, &tls);
    let n1 = node(&trusting, "n1");
    let first = tls_channel(&n1, &pem).await;
    ready(&first).await;
    let n2 = node(&trusting, "n2");
    let second = tls_channel(&n2, &pem).await;
    ready(&second).await;
    assert_eq!(lease_holder(&redis).as_deref(), Some("n1"));
    // Through the node that forwards: unary calls (on its links) and streams (each on its own
    // call), both over TLS to the owner.
    let mut client = ClientServiceClient::new(second.clone());
    let a = common::enter(&mut client, "1v1", &["tls-a"]).await;
    common::enter(&mut client, "1v1", &["tls-b"]).await;
    let mut gs = GameServerServiceClient::new(second.clone());
    let mut offers = common::serve(&mut gs, "gs-tls:7777").await;
    let m = next_match(&mut offers).await;
    assert_eq!(
        players_of(&m),
        BTreeSet::from(["tls-a".to_string(), "tls-b".to_string()])
    );
    let updates = common::watch_to_end(&mut client, &a).await;
    assert_eq!(
        updates.last().unwrap().state,
        proto::TicketState::Matched as i32
    );

    // A node that trusts another authority does not forward to the owner: its calls wait for
    // an owner it can trust, then fail, and never reach the engine.
    let other_dir = tempfile::tempdir().unwrap();
    certificate(other_dir.path());
    let stranger_ca = other_dir.path().join("cert.pem");
    let mistrusting = config_with_lease(
        other_dir.path(),
        &redis,
        STEADY_LEASE_MS,
        &format!(
            "peer_ca_file = {:?}\n{tls}",
            stranger_ca.display().to_string()
        ),
    );
    let n3 = node(&mistrusting, "n3");
    let third = tls_channel(&n3, &pem).await;
    let mut request = tonic::Request::new(proto::GetQueueStatsRequest::default());
    request.set_timeout(Duration::from_secs(2));
    let refused = AdminServiceClient::new(third)
        .get_queue_stats(request)
        .await
        .unwrap_err();
    // The node answers UNAVAILABLE 100 ms before the deadline; only on a machine stalled for
    // longer does the client's own timer fire first (tonic: CANCELLED, "Timeout expired").
    let own_deadline =
        refused.code() == tonic::Code::Cancelled && refused.message() == "Timeout expired";
    assert!(
        own_deadline
            || matches!(
                refused.code(),
                tonic::Code::Unavailable | tonic::Code::DeadlineExceeded
            ),
        "{refused:?}"
    );
    // The nodes that trust the owner's certificate still answer.
    AdminServiceClient::new(second)
        .get_queue_stats(proto::GetQueueStatsRequest::default())
        .await
        .expect("a trusting node forwards");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_browser_calls_a_forwarding_node_over_grpc_web_and_gets_the_owners_answer_and_status() {
    let redis = redis();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cluster.toml");
    std::fs::write(
        &path,
        format!(
            "[server]\ntick_interval_ms = 20\ngrpc_web = true\n[cluster]\nredis_url = \"{}\"\nlease_ms = {STEADY_LEASE_MS}\n",
            redis.url()
        ),
    )
    .unwrap();
    let n1 = node(&path, "n1");
    ready(&n1.channel().await).await;
    let n2 = node(&path, "n2");
    ready(&n2.channel().await).await;
    assert_eq!(lease_holder(&redis).as_deref(), Some("n1"));
    let _ = rustls::crypto::ring::default_provider().install_default();
    let http = reqwest::Client::new();
    let url = format!("http://{}/matchmaker.v1.ClientService/EnterQueue", n2.addr);
    let post = |request: proto::EnterQueueRequest| {
        http.post(&url)
            .header("content-type", "application/grpc-web+proto")
            .header("x-grpc-web", "1")
            .body(common::grpc_web_frame(&request))
            .send()
    };
    // The answer's message and its trailers come back through the forwarding node.
    let answer = post(proto::EnterQueueRequest {
        queue: "1v1".into(),
        player_ids: vec!["web-a".into()],
        ..Default::default()
    })
    .await
    .unwrap();
    assert_eq!(answer.version(), reqwest::Version::HTTP_11);
    let body = answer.bytes().await.unwrap();
    let len = u32::from_be_bytes([body[1], body[2], body[3], body[4]]) as usize;
    assert_eq!(body[0], 0, "a message first");
    let ticket = <proto::EnterQueueResponse as prost::Message>::decode(&body[5..5 + len]).unwrap();
    assert!(!ticket.ticket_id.is_empty());
    let trailer = &body[5 + len..];
    assert_eq!(trailer[0], 0x80, "then the trailer frame");
    let trailer = String::from_utf8_lossy(&trailer[5..]).to_lowercase();
    assert!(trailer.contains("grpc-status:0"), "{trailer}");
    // The owner holds the ticket.
    let stats = AdminServiceClient::new(n1.channel().await)
        .get_queue_stats(proto::GetQueueStatsRequest::default())
        .await
        .unwrap()
        .into_inner();
    let waiting: u64 = stats
        .queues
        .iter()
        .filter(|q| q.queue == "1v1")
        .map(|q| q.tickets_waiting)
        .sum();
    assert_eq!(waiting, 1);
    // A refusal's status and message, naming the field, reach the browser too.
    let answer = post(proto::EnterQueueRequest {
        queue: "no-such-queue".into(),
        player_ids: vec!["web-b".into()],
        ..Default::default()
    })
    .await
    .unwrap();
    let header = answer
        .headers()
        .get("grpc-status")
        .map(|v| v.to_str().unwrap().to_string());
    let message = answer
        .headers()
        .get("grpc-message")
        .map(|v| v.to_str().unwrap().to_string());
    let body = String::from_utf8_lossy(&answer.bytes().await.unwrap()).to_lowercase();
    assert!(
        header.as_deref() == Some("3") || body.contains("grpc-status:3"),
        "INVALID_ARGUMENT expected: {header:?} {body}"
    );
    let said = message.unwrap_or_default() + &body;
    assert!(
        said.contains("queue"),
        "the message names the field: {said}"
    );
}

/// A metric's value in a Prometheus text page: the first sample whose name and labels start
/// with `series`.
fn sample(page: &str, series: &str) -> Option<f64> {
    page.lines()
        .filter(|l| !l.starts_with('#'))
        .find(|l| l.starts_with(series))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_node_exports_its_cluster_metrics() {
    let redis = redis();
    let dir = tempfile::tempdir().unwrap();
    let config = config_with_lease(dir.path(), &redis, STEADY_LEASE_MS, "");
    let node = |name: &str| {
        let node = common::cluster_node_with_metrics(&config, name, None, "127.0.0.1:0");
        let metrics = node.metrics_addr();
        (node, metrics)
    };
    let (owner, owner_metrics) = node("n1");
    ready(&owner.channel().await).await;
    let (other, other_metrics) = node("n2");
    let channel = other.channel().await;
    ready(&channel).await;
    assert_eq!(lease_holder(&redis).as_deref(), Some("n1"));
    let mut client = ClientServiceClient::new(channel);
    for i in 0..5 {
        common::enter(&mut client, "1v1", &[format!("m{i}").as_str()]).await;
    }
    let _ = rustls::crypto::ring::default_provider().install_default();
    let http = reqwest::Client::new();
    let scrape = |addr: String| {
        let http = http.clone();
        async move {
            http.get(format!("http://{addr}/metrics"))
                .send()
                .await
                .unwrap()
                .text()
                .await
                .unwrap()
        }
    };
    // The owner renews its lease four times per lease.
    let owner_page = common::poll_until("a lease renewal counted", || {
        let page = scrape(owner_metrics.clone());
        async move {
            let page = page.await;
            match sample(&page, "matchmaker_cluster_lease_renewals_total") {
                Some(n) if n >= 1.0 => Ok(page),
                other => Err(format!("{other:?}")),
            }
        }
    })
    .await;
    // The other node keeps a standby copy: it reads the owner's change log, timed.
    let other_page = common::poll_until("the standby's reading of the log timed", || {
        let page = scrape(other_metrics.clone());
        async move {
            let page = page.await;
            match sample(
                &page,
                "matchmaker_cluster_redis_round_trip_seconds_count{op=\"follow\"}",
            ) {
                Some(n) if n >= 1.0 => Ok(page),
                other => Err(format!("{other:?}")),
            }
        }
    })
    .await;
    assert!(
        sample(&other_page, "matchmaker_cluster_standby_players").is_some(),
        "{other_page}"
    );
    let owned = |page: &str| sample(page, "matchmaker_cluster_queues_owned").unwrap_or(0.0);
    assert!(owned(&owner_page) >= 1.0, "{owner_page}");
    assert_eq!(owned(&other_page), 0.0);
    assert!(sample(&owner_page, "matchmaker_cluster_lease_acquired_total").unwrap_or(0.0) >= 1.0);
    assert!(
        sample(
            &owner_page,
            "matchmaker_cluster_redis_round_trip_seconds_count{op=\"flush\"}"
        )
        .unwrap_or(0.0)
            >= 1.0,
        "the owner's writes to Redis are timed"
    );
    // The calls entered through the other node were forwarded on its link, and timed.
    let forwarded = sample(&other_page, "matchmaker_cluster_forwarded_calls_total").unwrap_or(0.0);
    assert!(forwarded >= 5.0, "{other_page}");
    let timed = sample(
        &other_page,
        "matchmaker_cluster_forwarded_call_seconds_count",
    )
    .unwrap_or(0.0);
    assert!(timed >= 5.0, "{other_page}");
    assert_eq!(
        sample(&owner_page, "matchmaker_cluster_forwarded_calls_total").unwrap_or(0.0),
        0.0,
        "the owner forwards nothing"
    );
    // Each node counts, by method, the calls its own clients made; the owner's engine counts
    // every call it answered.
    let enter = "grpc_service=\"matchmaker.v1.ClientService\",grpc_method=\"EnterQueue\"";
    let handled = |page: &str, family: &str| {
        sample(page, &format!("{family}{{{enter},grpc_code=\"OK\"}}")).unwrap_or(0.0)
    };
    assert_eq!(
        handled(&other_page, "matchmaker_cluster_front_handled_total"),
        5.0,
        "{other_page}"
    );
    assert_eq!(
        sample(
            &other_page,
            &format!("matchmaker_cluster_front_handling_seconds_count{{{enter}}}")
        ),
        Some(5.0),
        "{other_page}"
    );
    assert_eq!(
        handled(&owner_page, "matchmaker_cluster_front_handled_total"),
        0.0,
        "a forwarded call counts on the node its client called, not again on the owner"
    );
    assert_eq!(
        handled(&owner_page, "grpc_server_handled_total"),
        5.0,
        "{owner_page}"
    );
}

/// An owner that loses its lease leaves the gauges of its engine at zero: the next owner
/// counts the tickets, game servers and rate-limited callers now, and a sum over the nodes
/// counts them once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_that_loses_its_lease_leaves_its_engine_gauges_at_zero() {
    let redis = redis();
    let dir = tempfile::tempdir().unwrap();
    // A rate limit on every call, each from 127.0.0.1: one bucket, the owner's.
    let config = config(
        dir.path(),
        &redis,
        "[rate_limit]\nanonymous = 1000.0\nburst_seconds = 600.0\n",
    );
    let owner = common::cluster_node_with_metrics(&config, "n1", None, "127.0.0.1:0");
    let channel = owner.channel().await;
    let metrics = owner.metrics_addr();
    ready(&channel).await;
    let mut game_server = GameServerServiceClient::new(channel.clone());
    let _offers = common::serve(&mut game_server, "gs-1:7777").await;
    common::enter(&mut ClientServiceClient::new(channel), "1v1", &["alone"]).await;
    let _ = rustls::crypto::ring::default_provider().install_default();
    let http = reqwest::Client::new();
    let gauges = |want: f64| {
        let (http, metrics) = (http.clone(), metrics.clone());
        move || {
            let page = http.get(format!("http://{metrics}/metrics")).send();
            async move {
                let page = page.await.unwrap().text().await.unwrap();
                let seen: Vec<Option<f64>> = [
                    "matchmaker_cluster_queues_owned ",
                    "matchmaker_tickets_waiting{shard=\"mm\",queue=\"1v1\"}",
                    "matchmaker_servers_connected{shard=\"mm\"}",
                    "matchmaker_rate_limit_buckets{shard=\"mm\"}",
                ]
                .iter()
                .map(|series| sample(&page, series))
                .collect();
                if seen[1..].iter().all(|v| *v == Some(want))
                    && seen[0].is_some_and(|owned| (owned > 0.0) == (want > 0.0))
                {
                    Ok(page)
                } else {
                    Err(seen)
                }
            }
        }
    };
    common::poll_until(
        "the owner counts its ticket, its game server and its one caller",
        gauges(1.0),
    )
    .await;

    // Another node takes the lease, under a newer fencing token: n1's next renewal finds it
    // gone, and its writes are refused.
    common::take_lease(&redis, "mm");
    let page = common::poll_until("n1's engine gauges at zero", gauges(0.0)).await;
    assert_eq!(
        sample(&page, "matchmaker_matches_unallocated{shard=\"mm\"}"),
        Some(0.0),
        "{page}"
    );
}

/// The ids of the waiting tickets Redis holds.
fn stored_tickets(redis: &RedisServer) -> BTreeSet<String> {
    let mut conn = redis::Client::open(redis.url())
        .unwrap()
        .get_connection()
        .unwrap();
    redis::cmd("HKEYS")
        .arg("{mm}:tickets")
        .query(&mut conn)
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ticket_a_ready_check_ended_or_a_backfill_took_leaves_the_stored_queue() {
    let redis = redis();
    let dir = tempfile::tempdir().unwrap();
    let config = config(
        dir.path(),
        &redis,
        "[queues.1v1]\nready_check_seconds = 30.0\n",
    );
    let node = node(&config, "n1");
    let channel = node.channel().await;
    ready(&channel).await;
    let mut client = ClientServiceClient::new(channel.clone());

    // A ready-check: one player declines. Their ticket ends, the other waits again; only the
    // one waiting stays stored (a new owner would put the declined one back in the queue).
    let ta = common::enter(&mut client, "1v1", &["rca"]).await;
    let tb = common::enter(&mut client, "1v1", &["rcb"]).await;
    assert_eq!(
        stored_tickets(&redis),
        BTreeSet::from([ta.clone(), tb.clone()])
    );
    let mut watch = common::watch(&mut client, &tb).await;
    let match_id = loop {
        let update = common::next(&mut watch).await;
        if let Some(a) = update.assignment {
            break a.match_id;
        }
    };
    let declined = client
        .accept_match(proto::AcceptMatchRequest {
            ticket_id: tb.clone(),
            match_id,
            accept: false,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(declined.state, proto::TicketState::Cancelled as i32);
    common::poll_until_blocking("the declined ticket to leave Redis", || {
        let stored = stored_tickets(&redis);
        if stored == BTreeSet::from([ta.clone()]) {
            Ok(())
        } else {
            Err(stored)
        }
    });

    // A backfill: the ticket that fills the slot is in the match, not waiting.
    let mut gs = GameServerServiceClient::new(channel.clone());
    let mut offers = common::serve(&mut gs, "gs-b:7777").await;
    let players: Vec<String> = (0..10).map(|i| format!("bf{i}")).collect();
    for p in &players {
        common::enter(&mut client, "5v5", &[p]).await;
    }
    let first = next_match(&mut offers).await;
    let leaver = first.teams[0].player_ids[0].clone();
    gs.request_backfill(proto::BackfillRequest {
        match_id: first.match_id.clone(),
        open_slots: vec![
            proto::Team {
                player_ids: vec![leaver],
            },
            proto::Team::default(),
        ],
    })
    .await
    .expect("backfill accepted");
    let late = common::enter(&mut client, "5v5", &["bf-late"]).await;
    let update = next_match(&mut offers).await;
    assert_eq!(update.match_id, first.match_id);
    assert_eq!(update.backfill[0].player_ids, ["bf-late"]);
    let stored = stored_tickets(&redis);
    assert!(!stored.contains(&late), "{stored:?}");
    assert_eq!(stored, BTreeSet::from([ta]), "only the 1v1 ticket waits");
}

/// The lease's value as Redis holds it (`token|node|address`), if any.
fn lease_value(redis: &RedisServer) -> Option<String> {
    let mut conn = redis::Client::open(redis.url())
        .unwrap()
        .get_connection()
        .unwrap();
    redis::cmd("GET")
        .arg("{mm}:lease")
        .query(&mut conn)
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_whose_writes_fail_gives_the_lease_up_before_its_engine_winds_down() {
    // Each write waits for one replica, up to 6 s; the replica then dies, so every flush fails
    // while the lease (which waits for no replica) still renews.
    let redis = redis();
    let mut replica = RedisServer::start().unwrap_or_else(|e| panic!("{e}"));
    let port = redis
        .url()
        .rsplit(':')
        .next()
        .unwrap()
        .trim_end_matches("/0")
        .to_string();
    let mut follow = redis::Client::open(replica.url())
        .unwrap()
        .get_connection()
        .unwrap();
    let () = redis::cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg(&port)
        .query(&mut follow)
        .unwrap();
    common::poll_until_blocking("the replica follows", || {
        let info: String = redis::cmd("INFO")
            .arg("replication")
            .query(&mut follow)
            .unwrap();
        if info.contains("master_link_status:up") {
            Ok(())
        } else {
            Err(info)
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let config = config(
        dir.path(),
        &redis,
        "wait_replicas = 1\nwait_timeout_ms = 6000\n",
    );
    let node = node(&config, "n1");
    let channel = node.channel().await;
    ready(&channel).await;
    let held = lease_value(&redis).expect("n1 holds the lease");
    assert!(held.contains("|n1|"), "{held}");

    replica.kill();
    // A rating change is journaled: its flush fails, and with it the engine's store.
    let failing = tokio::spawn({
        let mut admin = AdminServiceClient::new(channel.clone());
        async move {
            admin
                .set_rating(proto::SetRatingRequest {
                    player_id: "w1".into(),
                    queue: "1v1".into(),
                    rating: Some(proto::Rating {
                        mean: 1600.0,
                        deviation: 100.0,
                        ..Default::default()
                    }),
                    rank_points: None,
                })
                .await
        }
    });
    // The engine's wind-down flushes again (a snapshot, the last writes), each waiting 6 s for
    // the replica; the node gives the lease up before that, within a renewal or two. Measured
    // from the failure as the node logs it: the call's own answer may come later. The bound is
    // that wind-down, less a second to tell the two apart, not how soon a loaded machine gets
    // to the renewal.
    logs(&node, "the store failed: the engine stops").await;
    let given_up = Instant::now();
    common::poll_until("the lease given up", || {
        let now = lease_value(&redis);
        let held = held.clone();
        async move {
            if now.as_deref() == Some(held.as_str()) {
                Err(now)
            } else {
                Ok(())
            }
        }
    })
    .await;
    let held_for = given_up.elapsed();
    assert!(
        held_for < Duration::from_secs(5),
        "the lease was held {held_for:?} after the store failed"
    );
    let failed = failing.await.unwrap();
    let answered_after = given_up.elapsed();
    let status = failed.expect_err("acknowledged without its replica");
    // Answered as the store failure it is, not held until the call's deadline by an audit
    // entry written to the failed store.
    assert_eq!(status.code(), tonic::Code::Internal, "{status:?}");
    assert!(status.message().contains("storage failure"), "{status:?}");
    eprintln!(
        "the lease was given up {held_for:?} after the store failed; the call was answered {answered_after:?} after"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_asked_to_stop_takes_no_lease_while_it_drains() {
    let redis = redis();
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path(), &redis, "");
    let mut owner = node(&config, "n1");
    ready(&owner.channel().await).await;
    holder_becomes(&redis, "n1").await;
    // n2 drains for 5 s once asked to stop: long enough for n1's lease to lapse meanwhile.
    let mut command = common::serve_command(&config, "");
    command
        .env("MATCHMAKER_CLUSTER__NODE_ID", "n2")
        .env("MATCHMAKER_SERVER__DRAIN_MS", "5000");
    let mut leaving = ServerProcess::spawn(command);
    ready(&leaving.channel().await).await;
    leaving.signal("TERM");
    // The owner dies once n2 has taken the signal in (it drains from then on): a signal not
    // handled yet would leave n2 a node that stays, free to take the queues.
    logs(&leaving, "draining: health is NOT_SERVING").await;
    owner.child.kill().unwrap();
    let _ = owner.child.wait();
    // The lease lapses within a lease (1 s); a node taking it would within a quarter more.
    let watched = Instant::now();
    while watched.elapsed() < Duration::from_millis(2500) {
        let holder = lease_holder(&redis);
        assert_ne!(
            holder.as_deref(),
            Some("n2"),
            "a stopping node took the queues"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let status = leaving.child.wait().unwrap();
    assert!(status.success(), "{status:?}");
}

/// The pause a node whose store failed set on the lease (`STOPS|UNTIL_MS`), if any.
fn lease_pause(redis: &RedisServer) -> Option<String> {
    let mut conn = redis::Client::open(redis.url())
        .unwrap()
        .get_connection()
        .unwrap();
    redis::cmd("GET")
        .arg("{mm}:lease_pause")
        .query(&mut conn)
        .unwrap()
}

/// Sets a rating through `channel`: a journaled write, which fails while no replica
/// acknowledges it.
async fn set_rating(channel: &Channel, player: &str) -> Result<(), tonic::Status> {
    AdminServiceClient::new(channel.clone())
        .set_rating(proto::SetRatingRequest {
            player_id: player.into(),
            queue: "1v1".into(),
            rating: Some(proto::Rating {
                mean: 1600.0,
                deviation: 100.0,
                ..Default::default()
            }),
            rank_points: None,
        })
        .await
        .map(|_| ())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn owners_whose_writes_fail_in_a_row_leave_the_queues_paused_for_every_node() {
    // Each write waits for a replica there is none of: every journaled write fails, on every
    // owner, while the lease (which waits for no replica) holds.
    let redis = redis();
    let dir = tempfile::tempdir().unwrap();
    let config = config(
        dir.path(),
        &redis,
        "wait_replicas = 1\nwait_timeout_ms = 100\n",
    );
    let n1 = node(&config, "n1");
    let channel = n1.channel().await;
    // (Not `ready`: an admin call's audit entry is a write, which fails here.)
    holder_becomes(&redis, "n1").await;
    let _n2 = node(&config, "n2");
    let token = |value: Option<String>| -> Option<u64> { value?.split('|').next()?.parse().ok() };
    let first = token(lease_value(&redis)).expect("n1 owns the queues");

    // A first failure hands the queues over at once.
    assert!(set_rating(&channel, "w1").await.is_err());
    common::poll_until("a first store failure is counted", || {
        let pause = lease_pause(&redis);
        async move {
            match pause {
                Some(p) if p.starts_with("1|") => Ok(()),
                other => Err(other),
            }
        }
    })
    .await;
    common::poll_until("the next owner takes the queues", || {
        let now = token(lease_value(&redis));
        async move {
            match now {
                Some(t) if t > first => Ok(()),
                other => Err(other),
            }
        }
    })
    .await;

    // A second in a row pauses the lease, for every node, half a lease to a lease.
    assert!(set_rating(&channel, "w2").await.is_err());
    let pause = common::poll_until("a second store failure is counted", || {
        let pause = lease_pause(&redis);
        async move {
            match pause {
                Some(p) if p.starts_with("2|") => Ok(p),
                other => Err(other),
            }
        }
    })
    .await;
    let until: u64 = pause.split('|').nth(1).unwrap().parse().unwrap();
    // The lease and Redis' clock, read in one step.
    let look = redis::Script::new(
        "local t = redis.call('TIME') \
         return {redis.call('GET', KEYS[1]) or '', t[1] * 1000 + math.floor(t[2] / 1000)}",
    );
    let mut conn = redis::Client::open(redis.url())
        .unwrap()
        .get_connection()
        .unwrap();
    let mut paused_looks = 0;
    let taken_at = loop {
        let (lease, now): (String, u64) = look.key("{mm}:lease").invoke(&mut conn).unwrap();
        if !lease.is_empty() {
            assert!(
                now >= until,
                "{lease} took the queues {} ms into the pause",
                until - now
            );
            break now;
        }
        if now < until {
            paused_looks += 1;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(paused_looks > 0, "the lease was seen free during the pause");
    eprintln!(
        "the queues moved on {} ms after the pause",
        taken_at - until
    );
}

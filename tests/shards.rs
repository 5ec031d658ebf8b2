//! Shards (`[[cluster.shards]]`): the queues split over several leases, spread over the nodes,
//! each failing over on its own. Against a real `redis-server` started by each test on
//! 127.0.0.1 on a free port; the nodes are the real binary. A machine without `redis-server`
//! fails these tests with the command that installs it.
#![cfg(unix)]

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::ServerProcess;
use matchmaker::proto;
use matchmaker::proto::admin_service_client::AdminServiceClient;
use matchmaker::proto::client_service_client::ClientServiceClient;
use matchmaker::proto::game_server_service_client::GameServerServiceClient;
use matchmaker::proto::party_service_client::PartyServiceClient;
use matchmaker::store::RedisServer;
use tonic::transport::Channel;

const LEASE_MS: u64 = 1000;

/// 2v2 in shard `eu`; 1v1, 5v5 and ffa8 stay in the home shard (`mm`).
const SHARDS: &str = "[[cluster.shards]]\nkeyspace = \"eu\"\nqueues = [\"2v2\"]\n";

fn redis() -> RedisServer {
    RedisServer::start().unwrap_or_else(|e| panic!("{e}"))
}

use common::lease_holder_of as holder;

/// Waits, up to `within`, until `node` holds `keyspace`'s lease.
async fn holds(redis: &RedisServer, keyspace: &str, node: &str, within: Duration) {
    common::poll_until_within(&format!("{node} holds shard {keyspace}"), within, || {
        let seen = holder(redis, keyspace);
        async move {
            if seen.as_deref() == Some(node) {
                Ok(())
            } else {
                Err(seen)
            }
        }
    })
    .await;
}

/// Waits until the home shard and `eu` are held by two different nodes; returns them.
async fn spread_over_two(redis: &RedisServer, lease_ms: u64) -> (String, String) {
    common::poll_until_within(
        "the two shards are held by two nodes",
        Duration::from_millis(lease_ms * 8) + common::EVENT_TIMEOUT,
        || {
            let seen = (holder(redis, "mm"), holder(redis, "eu"));
            async move {
                match seen {
                    (Some(home), Some(eu)) if home != eu => Ok((home, eu)),
                    other => Err(other),
                }
            }
        },
    )
    .await
}

/// Two nodes of [`SHARDS`] on a Redis of their own, once each holds one shard and the cluster
/// answers.
struct TwoNodes {
    /// Kept for the nodes' life, as are the nodes.
    _redis: RedisServer,
    _dir: tempfile::TempDir,
    _nodes: Vec<ServerProcess>,
    n1: Channel,
    n2: Channel,
}

async fn two_nodes() -> TwoNodes {
    let redis = redis();
    let dir = tempfile::tempdir().unwrap();
    let config = common::cluster_config(dir.path(), &redis.url(), LEASE_MS, SHARDS);
    let nodes: Vec<ServerProcess> = ["n1", "n2"]
        .into_iter()
        .map(|n| common::cluster_node(&config, n, None))
        .collect();
    spread_over_two(&redis, LEASE_MS).await;
    let n1 = nodes[0].channel().await;
    let n2 = nodes[1].channel().await;
    common::queues_answer(&n1).await;
    TwoNodes {
        _redis: redis,
        _dir: dir,
        _nodes: nodes,
        n1,
        n2,
    }
}

/// Two nodes of [`SHARDS`], by name, once each holds one shard: for tests that kill one.
struct Spread {
    redis: RedisServer,
    _dir: tempfile::TempDir,
    nodes: BTreeMap<String, ServerProcess>,
    home_owner: String,
    eu_owner: String,
    /// The home shard's owner, answering.
    survivor: Channel,
}

async fn spread(lease_ms: u64) -> Spread {
    let redis = redis();
    let dir = tempfile::tempdir().unwrap();
    let config = common::cluster_config(dir.path(), &redis.url(), lease_ms, SHARDS);
    let nodes: BTreeMap<String, ServerProcess> = ["n1", "n2"]
        .into_iter()
        .map(|n| (n.to_string(), common::cluster_node(&config, n, None)))
        .collect();
    let (home_owner, eu_owner) = spread_over_two(&redis, lease_ms).await;
    let survivor = nodes[&home_owner].channel().await;
    common::queues_answer(&survivor).await;
    Spread {
        redis,
        _dir: dir,
        nodes,
        home_owner,
        eu_owner,
        survivor,
    }
}

/// Sets `player`'s rating in `queue` (an admin change served by the queue's shard).
async fn set_rating(admin: &mut AdminServiceClient<Channel>, player: &str, queue: &str) {
    admin
        .set_rating(proto::SetRatingRequest {
            player_id: player.into(),
            queue: queue.into(),
            rating: Some(proto::Rating {
                mean: 1600.0,
                deviation: 100.0,
                ..Default::default()
            }),
            rank_points: None,
        })
        .await
        .unwrap();
}

async fn stats(channel: &Channel, queue: &str) -> proto::QueueStat {
    AdminServiceClient::new(channel.clone())
        .get_queue_stats(proto::GetQueueStatsRequest {
            queue: queue.into(),
        })
        .await
        .expect("get_queue_stats")
        .into_inner()
        .queues
        .into_iter()
        .find(|q| q.queue == queue)
        .expect("the queue's stats")
}

/// Waits until `ticket` (through `channel`) is MATCHED; returns its match id.
async fn matched(channel: &Channel, ticket: &str) -> String {
    common::poll_until(&format!("{ticket} is matched"), || {
        let mut client = ClientServiceClient::new(channel.clone());
        let ticket = ticket.to_string();
        async move {
            let mut stream = client
                .watch_ticket(proto::WatchTicketRequest { ticket_id: ticket })
                .await
                .map_err(|s| s.to_string())?
                .into_inner();
            let update = stream
                .message()
                .await
                .map_err(|s| s.to_string())?
                .ok_or("no update")?;
            if update.state == proto::TicketState::Matched as i32 {
                Ok(update.assignment.map(|a| a.match_id).unwrap_or_default())
            } else {
                Err(format!("{:?}", update.state))
            }
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_nodes_each_own_a_shard_and_every_call_reaches_its_queues_owner() {
    let redis = redis();
    let dir = tempfile::tempdir().unwrap();
    let config = common::cluster_config(dir.path(), &redis.url(), LEASE_MS, SHARDS);
    let nodes: BTreeMap<&str, ServerProcess> = ["n1", "n2"]
        .into_iter()
        .map(|n| (n, common::cluster_node(&config, n, None)))
        .collect();
    let (home_owner, eu_owner) = spread_over_two(&redis, LEASE_MS).await;
    assert_ne!(home_owner, eu_owner);
    let n1 = nodes["n1"].channel().await;
    let n2 = nodes["n2"].channel().await;
    common::queues_answer(&n1).await;

    // 1v1 (the home shard): players through both nodes, the game server's stream on n2.
    let mut offers = common::serve(&mut GameServerServiceClient::new(n2.clone()), "gs:1").await;
    common::enter(&mut ClientServiceClient::new(n1.clone()), "1v1", &["alice"]).await;
    common::enter(&mut ClientServiceClient::new(n2.clone()), "1v1", &["bob"]).await;
    let m = common::next(&mut offers).await;
    assert!(
        m.match_id.starts_with("m-"),
        "a home-shard id: {}",
        m.match_id
    );
    common::report_winner_on(&n1, &m, "alice").await;
    assert_eq!(common::player_on(&n2, "alice", "1v1").await.games, 1);

    // 2v2 (shard eu): its tickets and matches carry the shard, whichever node they came through.
    let mut tickets = Vec::new();
    for (i, player) in ["p1", "p2", "p3", "p4"].iter().enumerate() {
        let through = if i % 2 == 0 { &n1 } else { &n2 };
        let ticket = common::enter(
            &mut ClientServiceClient::new(through.clone()),
            "2v2",
            &[player],
        )
        .await;
        assert!(ticket.starts_with("t.eu-"), "{ticket}");
        tickets.push(ticket);
    }
    let mut matches = Vec::new();
    for (i, ticket) in tickets.iter().enumerate() {
        let through = if i % 2 == 0 { &n2 } else { &n1 };
        matches.push(matched(through, ticket).await);
    }
    assert!(matches[0].starts_with("m.eu-"), "{}", matches[0]);
    assert!(matches.iter().all(|m| *m == matches[0]), "{matches:?}");
    for channel in [&n1, &n2] {
        assert_eq!(stats(channel, "2v2").await.matches_formed, 1);
        assert_eq!(stats(channel, "1v1").await.matches_formed, 1);
    }
    // Each shard's queues are only its own: the engine of the home shard never saw 2v2.
    let home_log = &nodes[home_owner.as_str()];
    let eu_log = &nodes[eu_owner.as_str()];
    assert!(home_log.logged("this node owns the queues now"));
    assert!(eu_log.logged("this node owns the queues now"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_shard_owner_s_queues_move_with_their_waiting_tickets_and_the_other_shard_carries_on()
 {
    // A failover is measured: a lease long enough that a loaded machine's scheduling does not
    // add to it.
    let lease_ms = 2000;
    let Spread {
        redis,
        _dir,
        mut nodes,
        home_owner,
        eu_owner,
        survivor,
    } = spread(lease_ms).await;
    let mut waiting = Vec::new();
    for player in ["w1", "w2", "w3"] {
        waiting.push(
            common::enter(
                &mut ClientServiceClient::new(survivor.clone()),
                "2v2",
                &[player],
            )
            .await,
        );
    }
    assert_eq!(stats(&survivor, "2v2").await.tickets_waiting, 3);

    let mut dead = nodes.remove(&eu_owner).unwrap();
    dead.child.kill().unwrap();
    let _ = dead.child.wait();
    let killed = std::time::Instant::now();
    holds(
        &redis,
        "eu",
        &home_owner,
        Duration::from_millis(lease_ms * 2) + common::EVENT_TIMEOUT,
    )
    .await;
    let took = killed.elapsed();
    assert!(
        took <= Duration::from_millis(lease_ms * 2),
        "took over in {took:?}"
    );
    // The home shard never moved, and the waiting tickets are there, waits kept.
    assert_eq!(holder(&redis, "mm").as_deref(), Some(home_owner.as_str()));
    let kept = common::poll_until("the waiting tickets are back", || {
        let survivor = survivor.clone();
        async move {
            let waiting = stats(&survivor, "2v2").await.tickets_waiting;
            if waiting == 3 {
                Ok(waiting)
            } else {
                Err(waiting)
            }
        }
    })
    .await;
    assert_eq!(kept, 3);
    // Their players are still held by shard eu: the home shard does not queue them.
    assert_eq!(
        refused_code(&survivor, "1v1", "w1").await,
        tonic::Code::FailedPrecondition
    );
    common::enter(
        &mut ClientServiceClient::new(survivor.clone()),
        "2v2",
        &["w4"],
    )
    .await;
    let mut ids = Vec::new();
    for ticket in &waiting {
        ids.push(matched(&survivor, ticket).await);
    }
    assert!(ids.iter().all(|m| *m == ids[0]), "{ids:?}");
    assert_eq!(stats(&survivor, "2v2").await.matches_formed, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_about_no_one_queue_are_asked_of_every_shard_and_answered_as_one_node() {
    let cluster = two_nodes().await;
    let mut client = ClientServiceClient::new(cluster.n1.clone());
    let mut admin = AdminServiceClient::new(cluster.n2.clone());
    let solo = common::enter(&mut client, "1v1", &["solo"]).await;
    let duo = common::enter(&mut client, "2v2", &["duo"]).await;
    common::enter(&mut client, "2v2", &["banned"]).await;

    // Every queue's stats, from both shards, in name order.
    let all = admin
        .get_queue_stats(proto::GetQueueStatsRequest::default())
        .await
        .unwrap()
        .into_inner();
    let names: Vec<&str> = all.queues.iter().map(|q| q.queue.as_str()).collect();
    assert_eq!(names, ["1v1", "2v2", "5v5", "ffa8"]);
    let waiting: Vec<u64> = all.queues.iter().map(|q| q.tickets_waiting).collect();
    assert_eq!(waiting, [1, 2, 0, 0]);

    // A player's active ticket, wherever its shard is.
    for (player, ticket) in [("solo", &solo), ("duo", &duo)] {
        let active = client
            .get_active_ticket(proto::GetActiveTicketRequest {
                player_id: player.into(),
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(&active.ticket_id, ticket);
    }
    let none = client
        .get_active_ticket(proto::GetActiveTicketRequest {
            player_id: "nobody".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(none.code(), tonic::Code::NotFound);

    // A ban reaches the shard holding the player's ticket, and every other.
    let banned = admin
        .ban_player(proto::BanPlayerRequest {
            player_id: "banned".into(),
            reason: "test".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(banned.ticket_cancelled);
    assert_eq!(
        refused_code(&cluster.n1, "1v1", "banned").await,
        tonic::Code::PermissionDenied
    );
    assert_eq!(
        refused_code(&cluster.n1, "2v2", "banned").await,
        tonic::Code::PermissionDenied
    );
    let unbanned = admin
        .unban_player(proto::UnbanPlayerRequest {
            player_id: "banned".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(unbanned.was_banned);

    // A snapshot of every shard's players, and the reload of every shard's queues.
    let before = admin
        .snapshot(proto::SnapshotRequest {})
        .await
        .unwrap()
        .into_inner()
        .players;
    for (player, queue) in [("rated-home", "1v1"), ("rated-eu", "2v2")] {
        set_rating(&mut admin, player, queue).await;
    }
    let snapshot = admin
        .snapshot(proto::SnapshotRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(snapshot.players, before + 2, "one new record in each shard");
    let reloaded = admin
        .reload_config(proto::ReloadConfigRequest {})
        .await
        .unwrap()
        .into_inner();
    assert!(reloaded.changed_queues.is_empty(), "{reloaded:?}");
}

/// `matchmaker admin cluster-status` with `args`; its output, after checking it succeeded.
fn cluster_status(args: &[&str]) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_matchmaker"))
        .args(["admin", "cluster-status"])
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Given a node's config, `cluster-status` shows every shard's keyspace with its owner, the
/// home shard's first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_status_shows_each_shard_and_its_owner() {
    let redis = redis();
    let dir = tempfile::tempdir().unwrap();
    let config = common::cluster_config(dir.path(), &redis.url(), LEASE_MS, SHARDS);
    let _nodes: Vec<ServerProcess> = ["n1", "n2"]
        .into_iter()
        .map(|n| common::cluster_node(&config, n, None))
        .collect();
    let (home_owner, eu_owner) = spread_over_two(&redis, LEASE_MS).await;
    let config = config.to_str().unwrap();

    let status: serde_json::Value =
        serde_json::from_str(&cluster_status(&["--json", "--config", config])).unwrap();
    assert_eq!(status["keyspace"], "mm", "{status}");
    assert_eq!(status["owner"]["node_id"], home_owner.as_str(), "{status}");
    assert_eq!(
        status["queues"],
        serde_json::json!(["1v1", "5v5", "ffa8"]),
        "{status}"
    );
    let shards = status["shards"].as_array().expect("the further shards");
    assert_eq!(shards.len(), 1, "{status}");
    assert_eq!(shards[0]["keyspace"], "eu", "{status}");
    assert_eq!(shards[0]["owner"]["node_id"], eu_owner.as_str(), "{status}");
    assert_eq!(shards[0]["queues"], serde_json::json!(["2v2"]), "{status}");

    let text = cluster_status(&["--config", config]);
    let home = text.find("keyspace   mm (home shard; queues 1v1, 5v5, ffa8)\n");
    let eu = text.find("keyspace   eu (queues 2v2)\n");
    assert!(home.is_some() && home < eu, "the home shard first:\n{text}");
    for owner in [&home_owner, &eu_owner] {
        assert!(text.contains(&format!("owner      {owner} at ")), "{text}");
    }

    // One keyspace by its flags, as without shards.
    let eu_only = cluster_status(&["--redis", &redis.url(), "--keyspace", "eu"]);
    assert!(
        eu_only.starts_with(&format!("keyspace   eu\nowner      {eu_owner} at ")),
        "{eu_only}"
    );

    // A keyspace besides the config's, or a config naming no Redis, is refused by its flag.
    let embedded = dir.path().join("embedded.toml");
    std::fs::write(&embedded, "[server]\ntick_interval_ms = 20\n").unwrap();
    for (args, flag) in [
        (vec!["--config", config, "--keyspace", "eu"], "--keyspace:"),
        (vec!["--config", embedded.to_str().unwrap()], "--redis:"),
    ] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_matchmaker"))
            .args(["admin", "cluster-status"])
            .args(&args)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && stderr.contains(flag),
            "{args:?}: {stderr}"
        );
    }
}

/// The code EnterQueue of `player` in `queue` through `channel` is refused with.
async fn refused_code(channel: &Channel, queue: &str, player: &str) -> tonic::Code {
    ClientServiceClient::new(channel.clone())
        .enter_queue(proto::EnterQueueRequest {
            queue: queue.into(),
            player_ids: vec![player.into()],
            ..Default::default()
        })
        .await
        .expect_err("refused")
        .code()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_player_waits_or_plays_in_one_shard_at_a_time() {
    let cluster = two_nodes().await;
    let (n1, n2) = (cluster.n1.clone(), cluster.n2.clone());

    // Queued in the home shard: refused by shard eu, naming the shard that holds the player.
    let ticket = common::enter(&mut ClientServiceClient::new(n1.clone()), "1v1", &["ana"]).await;
    let refused = ClientServiceClient::new(n2.clone())
        .enter_queue(proto::EnterQueueRequest {
            queue: "2v2".into(),
            player_ids: vec!["ana".into()],
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::FailedPrecondition);
    assert!(
        refused.message().contains("shard mm"),
        "{}",
        refused.message()
    );
    // Once the ticket is cancelled, the claim goes and shard eu queues her.
    ClientServiceClient::new(n2.clone())
        .cancel_ticket(proto::CancelTicketRequest { ticket_id: ticket })
        .await
        .unwrap();
    let moved = common::poll_until("ana enters 2v2", || {
        let mut client = ClientServiceClient::new(n2.clone());
        async move {
            client
                .enter_queue(proto::EnterQueueRequest {
                    queue: "2v2".into(),
                    player_ids: vec!["ana".into()],
                    ..Default::default()
                })
                .await
                .map(|r| r.into_inner().ticket_id)
        }
    })
    .await;
    assert!(moved.starts_with("t.eu-"), "{moved}");

    // In a live match of shard eu: refused by the home shard until the match ends.
    let mut eu_tickets = vec![moved];
    for player in ["ben", "cy", "di"] {
        eu_tickets
            .push(common::enter(&mut ClientServiceClient::new(n1.clone()), "2v2", &[player]).await);
    }
    let match_id = matched(&n1, &eu_tickets[0]).await;
    assert_eq!(
        refused_code(&n1, "1v1", "ana").await,
        tonic::Code::FailedPrecondition
    );
    GameServerServiceClient::new(n2.clone())
        .cancel_match(proto::CancelMatchRequest {
            match_id,
            reason: "test".into(),
        })
        .await
        .unwrap();
    // Cancelled before it started: the tickets are back in the 2v2 pool, still held by eu.
    assert_eq!(
        refused_code(&n2, "1v1", "ana").await,
        tonic::Code::FailedPrecondition
    );

    // Many entries of one player into both shards at once: exactly one is taken.
    let racers: Vec<_> = (0..16)
        .map(|i| {
            let channel = if i % 2 == 0 { n1.clone() } else { n2.clone() };
            let queue = if i % 4 < 2 { "1v1" } else { "2v2" };
            tokio::spawn(async move {
                ClientServiceClient::new(channel)
                    .enter_queue(proto::EnterQueueRequest {
                        queue: queue.into(),
                        player_ids: vec!["racer".into()],
                        ..Default::default()
                    })
                    .await
            })
        })
        .collect();
    let mut entered = 0;
    for racer in racers {
        match racer.await.unwrap() {
            Ok(_) => entered += 1,
            Err(status) => assert_eq!(status.code(), tonic::Code::FailedPrecondition, "{status}"),
        }
    }
    assert_eq!(entered, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_game_server_stream_gets_the_matches_of_every_shard() {
    let cluster = two_nodes().await;
    let (n1, n2) = (cluster.n1.clone(), cluster.n2.clone());

    // Capacity 0 (unlimited): registered with both shards through n1, whichever owns them.
    let mut offers = common::serve(&mut GameServerServiceClient::new(n1.clone()), "gs:all").await;
    let mut client = ClientServiceClient::new(n2.clone());
    for player in ["alice", "bob"] {
        common::enter(&mut client, "1v1", &[player]).await;
    }
    for player in ["p1", "p2", "p3", "p4"] {
        common::enter(&mut client, "2v2", &[player]).await;
    }
    let mut got = [
        common::next(&mut offers).await,
        common::next(&mut offers).await,
    ];
    got.sort_by(|a, b| a.queue.cmp(&b.queue));
    let [home, eu] = got;
    assert_eq!(home.queue, "1v1");
    assert!(home.match_id.starts_with("m-"), "{}", home.match_id);
    assert_eq!(eu.queue, "2v2");
    assert!(eu.match_id.starts_with("m.eu-"), "{}", eu.match_id);
    assert!([&home, &eu].iter().all(|m| m.server_address == "gs:all"));

    // The eu match's result, reported through the other node, moves the 2v2 ratings.
    let winner = eu.teams[0].player_ids[0].clone();
    let before = common::player_on(&n1, &winner, "2v2").await;
    common::report_winner_on(&n2, &eu, &winner).await;
    let after = common::player_on(&n1, &winner, "2v2").await;
    assert_eq!((before.games, after.games), (0, 1));
    let mean = |view: &proto::PlayerView| view.rating.as_ref().map_or(0.0, |r| r.mean);
    assert!(mean(&after) > mean(&before), "{before:?} then {after:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_capacity_smaller_than_the_shards_reaches_only_the_first_shards() {
    let cluster = two_nodes().await;
    let (n1, n2) = (cluster.n1.clone(), cluster.n2.clone());

    // Capacity 1 over two shards: the home shard's share is 1, eu's 0, so eu is not asked.
    // Its stream is open (every shard asked has registered it) before any match forms.
    let mut small = GameServerServiceClient::new(n2.clone())
        .serve_matches(proto::ServeMatchesRequest {
            server_address: "gs:small".into(),
            capacity: 1,
            ..Default::default()
        })
        .await
        .expect("serve_matches")
        .into_inner();
    let mut client = ClientServiceClient::new(n1.clone());
    let mut tickets = Vec::new();
    for player in ["p1", "p2", "p3", "p4"] {
        tickets.push(common::enter(&mut client, "2v2", &[player]).await);
    }
    let eu_match = matched(&n1, &tickets[0]).await;
    assert!(eu_match.starts_with("m.eu-"), "{eu_match}");
    for player in ["alice", "bob"] {
        common::enter(&mut client, "1v1", &[player]).await;
    }
    // The first match it gets is the home shard's, formed after eu's.
    let home = common::next(&mut small).await;
    assert_eq!(home.queue, "1v1");
    assert!(home.match_id.starts_with("m-"), "{}", home.match_id);
    // eu's match waited for a server all along: the next server to come takes it.
    let mut big = common::serve(&mut GameServerServiceClient::new(n1.clone()), "gs:big").await;
    let eu = common::next(&mut big).await;
    assert_eq!(eu.match_id, eu_match);
    assert_eq!(eu.server_address, "gs:big");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_player_s_matches_and_the_audit_log_page_through_every_shard_as_one_list() {
    let cluster = two_nodes().await;
    let (n1, n2) = (cluster.n1.clone(), cluster.n2.clone());

    // An admin change served by each shard, read back through the other node, two at a time.
    let mut admin = AdminServiceClient::new(n2.clone());
    for (player, queue) in [("rated-home", "1v1"), ("rated-eu", "2v2")] {
        set_rating(&mut admin, player, queue).await;
    }
    let mut audit = AdminServiceClient::new(n1.clone());
    let mut entries: Vec<proto::AuditEntry> = Vec::new();
    let mut page_token = String::new();
    let rated = |entries: &[proto::AuditEntry], player: &str| {
        entries
            .iter()
            .filter(|e| e.action == "SetRating" && e.detail.contains(player))
            .count()
    };
    // Every call of the audit log adds an entry to each shard's, so the listing never runs
    // out: it is read until both changes are in, within a bound.
    for _ in 0..200 {
        if rated(&entries, "rated-home") > 0 && rated(&entries, "rated-eu") > 0 {
            break;
        }
        let page = audit
            .list_audit_log(proto::ListAuditLogRequest {
                page_token,
                limit: 2,
            })
            .await
            .expect("list_audit_log")
            .into_inner();
        assert!(page.entries.len() <= 2, "{page:?}");
        assert!(!page.next_page_token.is_empty(), "a full page: {page:?}");
        entries.extend(page.entries);
        page_token = page.next_page_token;
    }
    assert_eq!(rated(&entries, "rated-home"), 1, "{entries:?}");
    assert_eq!(rated(&entries, "rated-eu"), 1, "{entries:?}");
    let at = |player: &str| {
        entries
            .iter()
            .position(|e| e.action == "SetRating" && e.detail.contains(player))
    };
    assert!(
        at("rated-home") < at("rated-eu"),
        "oldest first: {entries:?}"
    );
    assert!(
        entries.windows(2).all(|w| w[0].unix <= w[1].unix),
        "oldest first: {entries:?}"
    );
    let mut distinct: Vec<_> = entries
        .iter()
        .map(|e| (e.unix.to_bits(), &e.action, &e.detail))
        .collect();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), entries.len(), "each once: {entries:?}");
    let bad = audit
        .list_audit_log(proto::ListAuditLogRequest {
            page_token: "s1.!".into(),
            limit: 2,
        })
        .await
        .unwrap_err();
    assert_eq!(bad.code(), tonic::Code::InvalidArgument);
    assert!(bad.message().contains("page_token"), "{}", bad.message());

    // alice plays 1v1 (the home shard), then 2v2 (shard eu), then 1v1 again.
    let mut offers = common::serve(&mut GameServerServiceClient::new(n2.clone()), "gs:1").await;
    let mut played = Vec::new();
    for round in 0..2 {
        let mut client = ClientServiceClient::new(n1.clone());
        common::enter(&mut client, "1v1", &["alice"]).await;
        common::enter(&mut client, "1v1", &["bob"]).await;
        // The stream carries every shard's matches: the 2v2 one of the round before too.
        let m = loop {
            let m = common::next(&mut offers).await;
            if m.queue == "1v1" {
                break m;
            }
        };
        // A draw: the two stay close enough to be matched again at once.
        GameServerServiceClient::new(n2.clone())
            .report_match_result(proto::MatchResult {
                match_id: m.match_id.clone(),
                placements: vec![1, 1],
                ..Default::default()
            })
            .await
            .expect("report");
        played.push(m.match_id);
        if round == 0 {
            played.push(play(&n2, "2v2", &["alice", "p2", "p3", "p4"], "alice").await);
        }
    }
    assert!(played[1].starts_with("m.eu-"), "{played:?}");

    let all = common::poll_until("alice's three matches are in her history", || {
        let n1 = n1.clone();
        async move {
            let pages = pages_of_matches(&n1, "alice", 0).await;
            match pages.as_slice() {
                [all] if all.len() == 3 => Ok(all.clone()),
                other => Err(format!("{other:?}")),
            }
        }
    })
    .await;
    let mut ids: Vec<&str> = all.iter().map(|m| m.match_id.as_str()).collect();
    ids.sort_unstable();
    let mut expected: Vec<&str> = played.iter().map(String::as_str).collect();
    expected.sort_unstable();
    assert_eq!(ids, expected);
    // Most recently ended first; within a second, the greater id first.
    assert!(
        all.windows(2)
            .all(|w| (w[0].ended_unix, &w[0].match_id) > (w[1].ended_unix, &w[1].match_id)),
        "{all:?}"
    );
    // One at a time through the other node: the same list, each once, then the end.
    let pages = pages_of_matches(&n2, "alice", 1).await;
    assert_eq!(pages.len(), 3, "{pages:?}");
    assert!(pages.iter().all(|p| p.len() == 1), "{pages:?}");
    let one_by_one: Vec<&proto::MatchRecord> = pages.iter().flatten().collect();
    assert_eq!(one_by_one, all.iter().collect::<Vec<_>>());
    let bad = ClientServiceClient::new(n1.clone())
        .list_player_matches(proto::ListPlayerMatchesRequest {
            player_id: "alice".into(),
            page_token: "s1.not-a-token".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(bad.code(), tonic::Code::InvalidArgument);
    assert!(bad.message().contains("page_token"), "{}", bad.message());
}

/// `player`'s matches of every queue through `channel`, `limit` at a time: every page's.
async fn pages_of_matches(
    channel: &Channel,
    player: &str,
    limit: u32,
) -> Vec<Vec<proto::MatchRecord>> {
    let mut client = ClientServiceClient::new(channel.clone());
    let mut pages = Vec::new();
    let mut page_token = String::new();
    while pages.len() < 20 {
        let page = client
            .list_player_matches(proto::ListPlayerMatchesRequest {
                player_id: player.into(),
                queue: String::new(),
                page_token,
                limit,
            })
            .await
            .expect("list_player_matches")
            .into_inner();
        pages.push(page.matches);
        if page.next_page_token.is_empty() {
            break;
        }
        page_token = page.next_page_token;
    }
    pages
}

/// Makes `players` (one solo ticket each) play one match of `queue` through `channel`, the
/// team with `winner` first; returns the match id once its result is in.
async fn play(channel: &Channel, queue: &str, players: &[&str], winner: &str) -> String {
    let mut client = ClientServiceClient::new(channel.clone());
    let mut tickets = Vec::new();
    for player in players {
        tickets.push(common::enter(&mut client, queue, &[player]).await);
    }
    let match_id = matched(channel, &tickets[0]).await;
    let record = client
        .get_match(proto::GetMatchRequest {
            match_id: match_id.clone(),
        })
        .await
        .expect("get_match")
        .into_inner();
    let placements = record
        .teams
        .iter()
        .map(|t| {
            if t.player_ids.iter().any(|p| p == winner) {
                1
            } else {
                2
            }
        })
        .collect();
    GameServerServiceClient::new(channel.clone())
        .report_match_result(proto::MatchResult {
            match_id: match_id.clone(),
            placements,
            ..Default::default()
        })
        .await
        .expect("report");
    match_id
}

/// A node runs one engine per shard it owns, and each keeps its own gauges, labelled with its
/// keyspace: when the node loses one shard's lease, that shard's gauges go to zero (the next
/// owner counts its tickets and callers) while the other shard's engine on the same node keeps
/// counting its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_loses_one_shard_zeroes_that_shard_s_gauges_only() {
    let redis = redis();
    let dir = tempfile::tempdir().unwrap();
    // A rate limit on every call, each from 127.0.0.1: one bucket in each engine it reaches.
    let config = common::cluster_config(
        dir.path(),
        &redis.url(),
        LEASE_MS,
        &format!("{SHARDS}[rate_limit]\nanonymous = 1000.0\nburst_seconds = 600.0\n"),
    );
    let node = common::cluster_node_with_metrics(&config, "n1", None, "127.0.0.1:0");
    let metrics = node.metrics_addr();
    common::poll_until("n1 holds both shards", || {
        let seen = (holder(&redis, "mm"), holder(&redis, "eu"));
        async move {
            match &seen {
                (Some(home), Some(eu)) if home == "n1" && eu == "n1" => Ok(()),
                _ => Err(seen),
            }
        }
    })
    .await;
    let channel = node.channel().await;
    common::queues_answer(&channel).await;
    let mut client = ClientServiceClient::new(channel);
    common::enter(&mut client, "1v1", &["home-player"]).await;
    common::enter(&mut client, "2v2", &["eu-player"]).await;

    let _ = rustls::crypto::ring::default_provider().install_default();
    let http = reqwest::Client::new();
    // Tickets waiting, rate-limit buckets and players claimed of each shard, and the queues
    // owned.
    let gauges = |want: [f64; 7]| {
        let (http, metrics) = (http.clone(), metrics.clone());
        move || {
            let page = http.get(format!("http://{metrics}/metrics")).send();
            async move {
                let page = page.await.unwrap().text().await.unwrap();
                let seen = [
                    "matchmaker_tickets_waiting{shard=\"mm\",queue=\"1v1\"}",
                    "matchmaker_rate_limit_buckets{shard=\"mm\"}",
                    "matchmaker_tickets_waiting{shard=\"eu\",queue=\"2v2\"}",
                    "matchmaker_rate_limit_buckets{shard=\"eu\"}",
                    "matchmaker_cluster_queues_owned",
                    "matchmaker_cluster_claims_held{shard=\"mm\"}",
                    "matchmaker_cluster_claims_held{shard=\"eu\"}",
                ]
                .map(|series| sample(&page, series));
                if seen == want.map(Some) {
                    Ok(page)
                } else {
                    Err(seen)
                }
            }
        }
    };
    // 1v1, 5v5 and ffa8 in the home shard, 2v2 in eu: four queues owned.
    common::poll_until(
        "each shard's engine counts its ticket and its caller",
        gauges([1.0, 1.0, 1.0, 1.0, 4.0, 1.0, 1.0]),
    )
    .await;

    // Another node takes eu's lease under a newer fencing token: n1's next renewal finds it
    // gone, and its eu engine stops.
    common::take_lease(&redis, "eu");
    let page = common::poll_until(
        "eu's gauges at zero, the home shard's still counting",
        gauges([1.0, 1.0, 0.0, 0.0, 3.0, 1.0, 0.0]),
    )
    .await;
    for gauge in ["matches_unallocated", "servers_connected", "store_bytes"] {
        assert_eq!(
            sample(&page, &format!("matchmaker_{gauge}{{shard=\"eu\"}}")),
            Some(0.0),
            "{page}"
        );
    }
}

/// The value of the sample `series` (name and labels, as the page writes them) in `page`.
fn sample(page: &str, series: &str) -> Option<f64> {
    page.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

/// The events of every shard reach one watcher through any node, in one order of cursors that
/// only grow: a watcher resuming after any of them gets exactly the rest, and a cursor past
/// every shard's last event is refused as one node refuses it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_watcher_gets_every_shard_s_events_in_one_order_and_resumes_anywhere_in_it() {
    let cluster = two_nodes().await;
    let rated = [proto::EventKind::RatingChanged];
    let mut watcher = AdminServiceClient::new(cluster.n1.clone())
        .watch_events(proto::WatchEventsRequest {
            after_cursor: 0,
            kinds: rated.iter().map(|&k| k as i32).collect(),
        })
        .await
        .expect("watch_events")
        .into_inner();
    // Rating changes in either shard, through either node, in turn.
    let mut made = Vec::new();
    for i in 0..6 {
        let (queue, through) = if i % 2 == 0 {
            ("1v1", &cluster.n1)
        } else {
            ("2v2", &cluster.n2)
        };
        let player = format!("p{i}");
        set_rating(
            &mut AdminServiceClient::new(through.clone()),
            &player,
            queue,
        )
        .await;
        made.push(player);
    }
    let mut seen = Vec::new();
    while seen.len() < made.len() {
        seen.push(common::next(&mut watcher).await);
    }
    let cursors: Vec<u64> = seen.iter().map(|e| e.cursor).collect();
    assert!(
        cursors.windows(2).all(|w| w[0] < w[1]),
        "cursors only grow: {cursors:?}"
    );
    let mut players: Vec<&str> = seen.iter().map(|e| e.player_id.as_str()).collect();
    // Each shard's own events keep their order.
    for shard in [["p0", "p2", "p4"], ["p1", "p3", "p5"]] {
        let order: Vec<&str> = players
            .iter()
            .copied()
            .filter(|p| shard.contains(p))
            .collect();
        assert_eq!(order, shard);
    }
    players.sort_unstable();
    assert_eq!(players, made);
    assert!(
        seen.iter()
            .all(|e| e.kind == proto::EventKind::RatingChanged as i32 && e.unix > 0.0),
        "no closing mark reaches the watcher: {seen:?}"
    );

    // Through the other node, after the third: exactly the last three.
    let rest = common::watch_events(&cluster.n2, cursors[2], &rated, 3).await;
    assert_eq!(
        rest.iter().map(|e| e.cursor).collect::<Vec<_>>(),
        cursors[3..]
    );
    // And nothing more comes while nothing happens.
    assert!(
        tokio::time::timeout(Duration::from_millis(500), watcher.message())
            .await
            .is_err(),
        "a closing mark is not an event"
    );

    let past = AdminServiceClient::new(cluster.n2.clone())
        .watch_events(proto::WatchEventsRequest {
            after_cursor: cursors[5] + 1,
            kinds: Vec::new(),
        })
        .await;
    let refused = match past {
        Err(status) => status,
        Ok(stream) => stream
            .into_inner()
            .message()
            .await
            .expect_err("a cursor past every shard's last event is refused"),
    };
    assert_eq!(refused.code(), tonic::Code::OutOfRange, "{refused:?}");
    assert!(
        refused.message().contains("after_cursor"),
        "{}",
        refused.message()
    );
}

/// A watcher whose stream ends with a shard's owner (`kill -9`) resumes after the last cursor
/// it got: the next owner's events come after it, and nothing is sent twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watcher_resumes_after_a_shard_s_failover_with_nothing_lost_or_repeated() {
    let Spread {
        redis,
        _dir,
        mut nodes,
        home_owner,
        eu_owner,
        survivor,
    } = spread(LEASE_MS).await;
    let rated = [proto::EventKind::RatingChanged];
    let mut admin = AdminServiceClient::new(survivor.clone());
    let mut watcher = admin
        .watch_events(proto::WatchEventsRequest {
            after_cursor: 0,
            kinds: rated.iter().map(|&k| k as i32).collect(),
        })
        .await
        .expect("watch_events")
        .into_inner();
    set_rating(&mut admin, "a0", "1v1").await;
    set_rating(&mut admin, "b0", "2v2").await;
    let before = [
        common::next(&mut watcher).await,
        common::next(&mut watcher).await,
    ];
    let last = before[1].cursor;

    let mut dead = nodes.remove(&eu_owner).unwrap();
    dead.child.kill().unwrap();
    let _ = dead.child.wait();
    // The watcher's stream ends with the shard's owner, as on one node.
    let ended = match tokio::time::timeout(common::EVENT_TIMEOUT, watcher.message())
        .await
        .expect("the stream ends")
    {
        Ok(Some(event)) => panic!("no event was made meanwhile: {event:?}"),
        Ok(None) => None,
        Err(status) => Some(status.code()),
    };
    assert_eq!(ended, Some(tonic::Code::Unavailable));
    holds(&redis, "eu", &home_owner, common::EVENT_TIMEOUT).await;
    set_rating(&mut admin, "b1", "2v2").await;
    set_rating(&mut admin, "a1", "1v1").await;
    let mut resumed = admin
        .watch_events(proto::WatchEventsRequest {
            after_cursor: last,
            kinds: rated.iter().map(|&k| k as i32).collect(),
        })
        .await
        .expect("watch_events")
        .into_inner();
    let after = [
        common::next(&mut resumed).await,
        common::next(&mut resumed).await,
    ];
    // Each shard's in its order; across shards a new owner's events may come up to its lead
    // later than those another shard made at the same time.
    let mut players: Vec<&str> = after.iter().map(|e| e.player_id.as_str()).collect();
    players.sort_unstable();
    assert_eq!(players, ["a1", "b1"]);
    assert!(last < after[0].cursor && after[0].cursor < after[1].cursor);
    let more = tokio::time::timeout(Duration::from_millis(500), resumed.message()).await;
    assert!(
        more.is_err(),
        "nothing is sent twice: {more:?} after {before:?}"
    );
}

/// Two nodes of [`SHARDS`] with `extra` TOML after it, once each holds one shard (the
/// cluster may not answer yet: with auth on, only a token's call would).
async fn two_nodes_with(extra: &str) -> TwoNodes {
    let redis = redis();
    let dir = tempfile::tempdir().unwrap();
    let config = common::cluster_config(
        dir.path(),
        &redis.url(),
        LEASE_MS,
        &format!("{SHARDS}{extra}"),
    );
    let nodes: Vec<ServerProcess> = ["n1", "n2"]
        .into_iter()
        .map(|n| common::cluster_node(&config, n, None))
        .collect();
    spread_over_two(&redis, LEASE_MS).await;
    let n1 = nodes[0].channel().await;
    let n2 = nodes[1].channel().await;
    TwoNodes {
        _redis: redis,
        _dir: dir,
        _nodes: nodes,
        n1,
        n2,
    }
}

const PARTY_SECRET: &str = "shards-party-secret-0123456789abcdef";

/// `message` with a bearer token of `sub` in `role`.
fn as_caller<T>(message: T, sub: &str, role: &str) -> tonic::Request<T> {
    let exp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 3600;
    let token = jsonwebtoken::encode(
        &jsonwebtoken::Header::default(),
        &serde_json::json!({ "sub": sub, "role": role, "exp": exp }),
        &jsonwebtoken::EncodingKey::from_secret(PARTY_SECRET.as_bytes()),
    )
    .unwrap();
    let mut request = tonic::Request::new(message);
    request
        .metadata_mut()
        .insert("authorization", format!("Bearer {token}").parse().unwrap());
    request
}

/// The players of waiting ticket `ticket` as shard `keyspace` keeps it in Redis, in order.
fn stored_ticket_players(redis_url: &str, keyspace: &str, ticket: &str) -> Vec<String> {
    let mut conn = redis::Client::open(redis_url)
        .unwrap()
        .get_connection()
        .unwrap();
    let stored: String = redis::cmd("HGET")
        .arg(format!("{{{keyspace}}}:tickets"))
        .arg(ticket)
        .query(&mut conn)
        .unwrap();
    let stored: serde_json::Value = serde_json::from_str(&stored).unwrap();
    stored["players"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap().to_string())
        .collect()
}

/// A party made in the home shard enters a queue of shard eu by id, through either node, as
/// on one node: its leader enters the whole party, leader first; a member who does not lead
/// it is refused; a player outside it is told what a party that does not exist answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_party_made_in_the_home_shard_enters_a_queue_of_another_shard_by_id() {
    let cluster = two_nodes_with(&format!(
        "[auth]\nenabled = true\njwt_secret = \"{PARTY_SECRET}\"\n"
    ))
    .await;
    let (n1, n2) = (cluster.n1.clone(), cluster.n2.clone());
    common::poll_until("the cluster answers an admin", || {
        let mut admin = AdminServiceClient::new(n1.clone());
        async move {
            admin
                .get_queue_stats(as_caller(
                    proto::GetQueueStatsRequest::default(),
                    "ops",
                    "admin",
                ))
                .await
                .map(drop)
        }
    })
    .await;
    let mut parties = PartyServiceClient::new(n1.clone());
    let party = parties
        .create_party(as_caller(
            proto::CreatePartyRequest {
                player_id: "lead".into(),
            },
            "lead",
            "player",
        ))
        .await
        .unwrap()
        .into_inner();
    PartyServiceClient::new(n2.clone())
        .join_party(as_caller(
            proto::JoinPartyRequest {
                invite_code: party.invite_code.clone(),
                player_id: "mate".into(),
            },
            "mate",
            "player",
        ))
        .await
        .unwrap();

    let enter = |party_id: &str, caller: &str| {
        let mut client = ClientServiceClient::new(n2.clone());
        let request = as_caller(
            proto::EnterQueueRequest {
                queue: "2v2".into(),
                party_id: party_id.into(),
                ..Default::default()
            },
            caller,
            "player",
        );
        async move { client.enter_queue(request).await }
    };
    let unknown = enter("party-none", "lead").await.unwrap_err();
    assert_eq!(
        (unknown.code(), unknown.message()),
        (tonic::Code::NotFound, "party \"party-none\" not found")
    );
    let outsider = enter(&party.party_id, "stranger").await.unwrap_err();
    assert_eq!(
        (outsider.code(), outsider.message()),
        (
            tonic::Code::NotFound,
            format!("party {:?} not found", party.party_id).as_str()
        ),
        "as for a party that does not exist"
    );
    let member = enter(&party.party_id, "mate").await.unwrap_err();
    assert_eq!(member.code(), tonic::Code::PermissionDenied, "{member:?}");

    let ticket = enter(&party.party_id, "lead")
        .await
        .expect("the leader enters the party")
        .into_inner()
        .ticket_id;
    assert!(ticket.starts_with("t.eu-"), "{ticket}");
    assert_eq!(
        stored_ticket_players(&cluster._redis.url(), "eu", &ticket),
        ["lead", "mate"]
    );
    let active = ClientServiceClient::new(n1.clone())
        .get_active_ticket(as_caller(
            proto::GetActiveTicketRequest {
                player_id: "mate".into(),
            },
            "mate",
            "player",
        ))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(active.ticket_id, ticket, "one ticket for the party");
    // The home shard's queues refuse its members meanwhile: shard eu holds them.
    let home = ClientServiceClient::new(n1.clone())
        .enter_queue(as_caller(
            proto::EnterQueueRequest {
                queue: "1v1".into(),
                player_ids: vec!["mate".into()],
                ..Default::default()
            },
            "mate",
            "player",
        ))
        .await
        .unwrap_err();
    assert_eq!(home.code(), tonic::Code::FailedPrecondition, "{home:?}");
}

/// The home shard keeps a party whose members wait in another shard from expiring, while a
/// party idle everywhere expires; once its members are idle, that party expires too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_party_whose_members_wait_in_another_shard_does_not_expire_in_the_home_shard() {
    const EXPIRY_SECONDS: u64 = 6;
    let cluster = two_nodes_with(&format!(
        "[parties]\nidle_expiry_seconds = {EXPIRY_SECONDS}\n"
    ))
    .await;
    let (n1, n2) = (cluster.n1.clone(), cluster.n2.clone());
    common::queues_answer(&n1).await;
    let mut parties = PartyServiceClient::new(n1.clone());
    let create = |player: &str| proto::CreatePartyRequest {
        player_id: player.into(),
    };
    let away = parties
        .create_party(create("away"))
        .await
        .unwrap()
        .into_inner();
    parties
        .join_party(proto::JoinPartyRequest {
            invite_code: away.invite_code.clone(),
            player_id: "away-mate".into(),
        })
        .await
        .unwrap();
    // Two of 2v2's four players: the ticket waits in shard eu.
    let ticket = ClientServiceClient::new(n2.clone())
        .enter_queue(proto::EnterQueueRequest {
            queue: "2v2".into(),
            party_id: away.party_id.clone(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .ticket_id;
    // Made after the other, and touched by no call since, as the other in the home shard.
    let idle = parties
        .create_party(create("idle"))
        .await
        .unwrap()
        .into_inner();

    // Asked by a player outside it, a party is read without being touched.
    let live = |party_id: String| {
        let mut parties = PartyServiceClient::new(n2.clone());
        async move {
            parties
                .leave_party(proto::LeavePartyRequest {
                    party_id,
                    player_id: "nobody".into(),
                })
                .await
                .map(drop)
                .map_err(|s| s.code())
        }
    };
    let gone = |party_id: String| {
        common::poll_until_within(
            "the party expires",
            Duration::from_secs(EXPIRY_SECONDS) + common::EVENT_TIMEOUT,
            move || {
                let probe = live(party_id.clone());
                async move {
                    match probe.await {
                        Err(tonic::Code::NotFound) => Ok(()),
                        other => Err(other),
                    }
                }
            },
        )
    };
    gone(idle.party_id.clone()).await;
    assert_eq!(
        live(away.party_id.clone()).await,
        Ok(()),
        "idle longer in the home shard, but its members wait in shard eu"
    );

    // Its members idle again, the party's time runs out in the home shard too.
    ClientServiceClient::new(n1.clone())
        .cancel_ticket(proto::CancelTicketRequest { ticket_id: ticket })
        .await
        .unwrap();
    gone(away.party_id.clone()).await;
}

/// A party's entry into another shard's queue counts as its activity in the home shard, as on
/// one node: one entered early in its idle time, whose ticket ended before the home shard
/// looked, and one entered just before it would have expired.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_party_s_entry_in_another_shard_restarts_its_idle_time_in_the_home_shard() {
    const EXPIRY: Duration = Duration::from_secs(10);
    let cluster = two_nodes_with(&format!(
        "[parties]\nidle_expiry_seconds = {}\n",
        EXPIRY.as_secs()
    ))
    .await;
    let (n1, n2) = (cluster.n1.clone(), cluster.n2.clone());
    common::queues_answer(&n1).await;
    let mut parties = PartyServiceClient::new(n1.clone());
    let mut made = Vec::new();
    for leader in ["early", "late"] {
        made.push(
            parties
                .create_party(proto::CreatePartyRequest {
                    player_id: leader.into(),
                })
                .await
                .unwrap()
                .into_inner()
                .party_id,
        );
    }
    let start = std::time::Instant::now();
    let mut client = ClientServiceClient::new(n2.clone());
    // Within the first half of its expiry (the home shard does not look at it before then),
    // and at nine tenths of it.
    for (party, at) in made.iter().zip([EXPIRY * 2 / 5, EXPIRY * 9 / 10]) {
        tokio::time::sleep(at.saturating_sub(start.elapsed())).await;
        let ticket = client
            .enter_queue(proto::EnterQueueRequest {
                queue: "2v2".into(),
                party_id: party.clone(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner()
            .ticket_id;
        client
            .cancel_ticket(proto::CancelTicketRequest { ticket_id: ticket })
            .await
            .unwrap();
    }
    // Past their expiry counted from their creation, within it counted from their entry.
    tokio::time::sleep((EXPIRY + Duration::from_millis(500)).saturating_sub(start.elapsed())).await;
    for party in made {
        let asked = PartyServiceClient::new(n2.clone())
            .leave_party(proto::LeavePartyRequest {
                party_id: party.clone(),
                player_id: "nobody".into(),
            })
            .await
            .map(drop)
            .map_err(|s| s.code());
        assert_eq!(asked, Ok(()), "{party} lives on from its entry");
    }
}

/// A queue moved to another shard in the config would start there without its records (its
/// players' ratings back at the start): a node with such a config refuses to start, naming
/// the queue, while a queue new to the deployment goes to any shard.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_refuses_a_config_that_moves_a_queue_to_another_shard() {
    let redis = redis();
    let dir = tempfile::tempdir().unwrap();
    // First without shards: every queue runs in the home shard.
    let unsharded = common::cluster_config(dir.path(), &redis.url(), LEASE_MS, "");
    let node = common::cluster_node(&unsharded, "n1", None);
    let channel = node.channel().await;
    common::queues_answer(&channel).await;
    set_rating(&mut AdminServiceClient::new(channel), "kept", "2v2").await;
    drop(node);

    let moved_dir = tempfile::tempdir().unwrap();
    let moved = common::cluster_config(moved_dir.path(), &redis.url(), LEASE_MS, SHARDS);
    let mut command = common::serve_command(&moved, "");
    command.env("MATCHMAKER_CLUSTER__NODE_ID", "n2");
    let out = tokio::time::timeout(
        common::EVENT_TIMEOUT,
        tokio::task::spawn_blocking(move || command.output().unwrap()),
    )
    .await
    .expect("the node stops at once")
    .unwrap();
    let said =
        String::from_utf8_lossy(&out.stderr).to_string() + &String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "{said}");
    assert!(
        said.contains("queues.2v2: the config puts it in shard \"eu\"")
            && said.contains("keyspace \"mm\"")
            && said.contains("delete fields queue:2v2, pool:2v2 of Redis hash {mm}:placement"),
        "{said}"
    );
    assert_eq!(holder(&redis, "eu"), None, "it ran no shard");
}

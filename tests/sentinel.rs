//! Cluster mode behind Redis Sentinel, against real servers on 127.0.0.1 on free ports (a
//! primary, two replicas and a sentinel): the nodes find the primary through the sentinel,
//! follow it when Sentinel moves it (a switch-over, then a crash of the primary), and every
//! result acknowledged with `wait_replicas = 1` is there afterwards. A machine without
//! `redis-server` fails this test with the command that installs it.
#![cfg(unix)]

mod common;

use common::queues_answer as ready;

use matchmaker::proto;
use matchmaker::proto::client_service_client::ClientServiceClient;
use matchmaker::proto::game_server_service_client::GameServerServiceClient;
use matchmaker::store::RedisSentinels;
use tokio_stream::StreamExt;
use tonic::transport::Channel;

/// Any two waiting players pair at once.
const PAIR_AT_ONCE: &str = "wait_replicas = 1\n\
    [queues.1v1.matching]\nwindow = 100000.0\nmin_quality = 0.0\nmax_latency_ms = 100000\nexpansion = []\n";

/// Enters `player` through `channel`, again while the cluster changes owner.
async fn enter(channel: &Channel, player: &str) {
    common::poll_until(&format!("{player} queues"), || {
        let mut client = ClientServiceClient::new(channel.clone());
        let player = player.to_string();
        async move {
            client
                .enter_queue(proto::EnterQueueRequest {
                    queue: "1v1".into(),
                    player_ids: vec![player],
                    ..Default::default()
                })
                .await
        }
    })
    .await;
}

/// Reports `m` won by its first team through `channel`, again while the cluster has no owner
/// or its owner cannot write.
async fn report(channel: &Channel, m: &proto::MatchAssignment) -> proto::MatchResultAck {
    let winner = m.teams[0].player_ids[0].clone();
    common::poll_until(&format!("the result of {}", m.match_id), || {
        let mut gs = GameServerServiceClient::new(channel.clone());
        let req = proto::MatchResult {
            match_id: m.match_id.clone(),
            placements: common::placements_with_winner(m, &winner),
            ..Default::default()
        };
        async move {
            gs.report_match_result(req)
                .await
                .map(tonic::Response::into_inner)
        }
    })
    .await
}

/// A game server registered as `sentinel:1` through one node.
struct GameServer {
    channel: Channel,
    offers: tonic::Streaming<proto::MatchAssignment>,
}

impl GameServer {
    async fn register(channel: &Channel) -> Self {
        Self {
            channel: channel.clone(),
            offers: Self::serve(channel).await,
        }
    }

    /// Its match stream, opened again while the cluster changes owner.
    async fn serve(channel: &Channel) -> tonic::Streaming<proto::MatchAssignment> {
        common::poll_until("the game server registers", || {
            let mut gs = GameServerServiceClient::new(channel.clone());
            async move {
                gs.serve_matches(proto::ServeMatchesRequest {
                    server_address: "sentinel:1".into(),
                    ..Default::default()
                })
                .await
                .map(tonic::Response::into_inner)
            }
        })
        .await
    }

    /// The next match offered. The node relays the stream to the next owner only while one
    /// comes within twice the lease and a second, which a Sentinel failover can exceed: the
    /// stream then ends UNAVAILABLE, and the game server registers again, which sends it the
    /// matches allocated to it and not started.
    async fn next(&mut self) -> proto::MatchAssignment {
        for _ in 0..3 {
            let offered = tokio::time::timeout(common::EVENT_TIMEOUT, self.offers.next())
                .await
                .expect("a match offered within the timeout");
            match offered {
                Some(Ok(m)) => return m,
                Some(Err(e)) if e.code() != tonic::Code::Unavailable => {
                    panic!("the match stream failed: {e}")
                }
                ended => {
                    eprintln!("the match stream ended ({ended:?}); registering again");
                    self.offers = Self::serve(&self.channel).await;
                }
            }
        }
        panic!("the match stream ended three times over");
    }
}

/// The next match offered in `1v1`, entered as `players` through `channel`.
async fn play(
    channel: &Channel,
    game_server: &mut GameServer,
    players: [&str; 2],
) -> proto::MatchAssignment {
    for p in players {
        enter(channel, p).await;
    }
    let m = game_server.next().await;
    let mut got: Vec<_> = m.teams.iter().map(|t| t.player_ids[0].clone()).collect();
    got.sort();
    assert_eq!(got, players, "the match of the players just queued");
    m
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cluster_follows_sentinel_failovers_and_keeps_every_acknowledged_result() {
    let mut redis = RedisSentinels::start().unwrap_or_else(|e| panic!("{e}"));
    // The first sentinel the URL names is down (nothing listens on port 1): the nodes ask
    // the next.
    let url = redis
        .url()
        .replacen("redis+sentinel://", "redis+sentinel://127.0.0.1:1,", 1);
    let dir = tempfile::tempdir().unwrap();
    let config = common::cluster_config(dir.path(), &url, 1000, PAIR_AT_ONCE);
    let nodes = [
        common::cluster_node(&config, "n1", None),
        common::cluster_node(&config, "n2", None),
    ];
    let (first, second) = (nodes[0].channel().await, nodes[1].channel().await);
    ready(&first).await;
    let mut game_server = GameServer::register(&second).await;
    let m1 = play(&first, &mut game_server, ["a1", "b1"]).await;
    let ack1 = report(&second, &m1).await;
    assert!(!ack1.duplicate);

    // A switch-over: a replica becomes primary, the old primary a replica (it takes writes
    // until Sentinel reconfigures it, which the nodes must not wait for).
    assert_eq!(redis.primary().unwrap(), 0);
    redis.failover().unwrap();
    let promoted = redis.wait_for_new_primary(0).unwrap();
    let switched = std::time::Instant::now();
    let again = report(&first, &m1).await;
    assert!(again.duplicate, "the result survived the switch-over");
    assert!(common::same_changes(&again.changes, &ack1.changes));
    let m2 = play(&second, &mut game_server, ["a2", "b2"]).await;
    let ack2 = report(&first, &m2).await;
    let switch_over = switched.elapsed();
    assert!(!ack2.duplicate, "results are written on the new primary");

    // A crash of the primary: Sentinel promotes the replica furthest along, which has every
    // write the cluster acknowledged.
    redis.servers[promoted].kill();
    redis.wait_for_new_primary(promoted).unwrap();
    let crashed = std::time::Instant::now();
    for (m, ack) in [(&m1, &ack1), (&m2, &ack2)] {
        let again = report(&second, m).await;
        assert!(again.duplicate, "{} survived the crash", m.match_id);
        assert!(common::same_changes(&again.changes, &ack.changes));
    }
    let view = common::player_on(&first, "a2", "1v1").await;
    assert_eq!(view.games, 1);
    let m3 = play(&first, &mut game_server, ["a3", "b3"]).await;
    let ack3 = report(&second, &m3).await;
    eprintln!(
        "once Sentinel's new primary had its replicas: a match played and its result \
         acknowledged {switch_over:?} after a switch-over, {:?} after a crash",
        crashed.elapsed()
    );
    assert!(!ack3.duplicate, "results are written on the third primary");
    for node in &nodes {
        assert!(
            !node.logged("panicked"),
            "a node panicked: {:?}",
            node.log.lock().unwrap()
        );
    }
}

//! Cluster chaos against a real `redis-server` (started by the test on a free loopback port, in
//! a temporary directory, with the append-only file on, synced before each answer where Redis
//! itself is killed): repeated `kill -9` of random nodes, a crash of Redis itself, and the death
//! of the Redis Cluster primary holding the keyspace (with `wait_replicas`), while results are
//! reported and players queue. Every acknowledged result is there exactly once afterwards, and
//! every rating equals a replay of the applied results through the rating library.
#![cfg(unix)]

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::{ServerProcess, same_changes, same_skill, skill};
use matchmaker::config::Config;
use matchmaker::proto;
use matchmaker::proto::client_service_client::ClientServiceClient;
use matchmaker::proto::game_server_service_client::GameServerServiceClient;
use matchmaker::rating::{MatchInput, PlayerInput, Skill};
use matchmaker::store::RedisServer;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::sync::{Mutex, Notify};
use tonic::Code;
use tonic::transport::Channel;

const PLAYERS: usize = 12;
/// The nodes' lease.
const LEASE_MS: u64 = 1000;
/// Kill once this many results of the round are acknowledged (the rest are in flight).
const KILL_AFTER_ACKS: usize = 2;

fn config(dir: &Path, redis: &RedisServer) -> std::path::PathBuf {
    config_on(dir, &redis.url(), "")
}

/// The chaos config on the Redis at `url`, with `extra` in `[cluster]`.
fn config_on(dir: &Path, url: &str, extra: &str) -> std::path::PathBuf {
    let path = dir.join("chaos.toml");
    // Any two waiting players pair at once; frequent snapshots so kills land around them.
    std::fs::write(
        &path,
        format!(
            "[server]\ntick_interval_ms = 10\n[store]\nsnapshot_interval_seconds = 1\n\
             [cluster]\nredis_url = \"{url}\"\nlease_ms = {LEASE_MS}\n{extra}\
             [queues.1v1.matching]\nwindow = 100000.0\nmin_quality = 0.0\nmax_latency_ms = 100000\nexpansion = []\n",
        ),
    )
    .unwrap();
    path
}

fn node(config: &Path, name: &str) -> ServerProcess {
    common::cluster_node(config, name, None)
}

/// A result known to be applied: its players (one per team) and placements.
struct Applied {
    teams: Vec<String>,
    placements: Vec<u32>,
}

/// What a round leaves.
struct Round {
    matches: Vec<proto::MatchAssignment>,
    /// Each match's placements, as reported.
    placements: BTreeMap<String, Vec<u32>>,
    /// The acknowledgements the reports got (a report the crash failed has none).
    acked: BTreeMap<String, proto::MatchResultAck>,
    /// How many results were acknowledged when the crash struck.
    acked_at_crash: usize,
}

/// One round: every player queues through some node, a game server takes the matches, every
/// match is reported concurrently through random nodes, and `crash` strikes once a few results
/// are acknowledged.
async fn round(
    channels: &[Channel],
    players: &[String],
    reporters: usize,
    rng: &mut StdRng,
    crash: impl FnOnce(),
) -> Round {
    for p in players {
        let ch = channels[rng.random_range(0..channels.len())].clone();
        common::poll_until(&format!("{p} queues"), || {
            let mut c = ClientServiceClient::new(ch.clone());
            let p = p.clone();
            async move {
                c.enter_queue(proto::EnterQueueRequest {
                    queue: "1v1".into(),
                    player_ids: vec![p],
                    ..Default::default()
                })
                .await
            }
        })
        .await;
    }
    let mut gs = GameServerServiceClient::new(channels[0].clone());
    let mut offers = common::serve(&mut gs, "chaos:1").await;
    let mut matches = Vec::new();
    while matches.len() < players.len() / 2 {
        let m = common::next(&mut offers).await;
        if m.queue == "1v1" {
            matches.push(m);
        }
    }
    // Load beside the reports: fresh players queueing in 5v5 through every node.
    let noise: Vec<_> = channels
        .iter()
        .enumerate()
        .map(|(n, ch)| {
            let mut c = ClientServiceClient::new(ch.clone());
            let tag = rng.random::<u32>();
            tokio::spawn(async move {
                for i in 0..300 {
                    let _ = c
                        .enter_queue(proto::EnterQueueRequest {
                            queue: "5v5".into(),
                            player_ids: vec![format!("noise-{tag}-{n}-{i}")],
                            ..Default::default()
                        })
                        .await;
                }
            })
        })
        .collect();
    let acked: Arc<Mutex<BTreeMap<String, proto::MatchResultAck>>> = Arc::default();
    let count = Arc::new(AtomicUsize::new(0));
    let notify = Arc::new(Notify::new());
    let mut placements_of = BTreeMap::new();
    // `reporters` game servers, each reporting its share of the matches one after another, so
    // the crash lands in the middle of the stream of reports.
    let mut shares: Vec<Vec<(String, Vec<u32>)>> = vec![Vec::new(); reporters];
    for (i, m) in matches.iter().enumerate() {
        let placements = if rng.random() { vec![1, 2] } else { vec![2, 1] };
        placements_of.insert(m.match_id.clone(), placements.clone());
        shares[i % reporters].push((m.match_id.clone(), placements));
    }
    let mut tasks = Vec::new();
    for share in shares {
        let mut gs =
            GameServerServiceClient::new(channels[rng.random_range(0..channels.len())].clone());
        let (acked, count, notify) = (acked.clone(), count.clone(), notify.clone());
        tasks.push(tokio::spawn(async move {
            for (id, placements) in share {
                let r = gs
                    .report_match_result(proto::MatchResult {
                        match_id: id.clone(),
                        placements,
                        ..Default::default()
                    })
                    .await;
                if let Ok(ack) = r {
                    acked.lock().await.insert(id, ack.into_inner());
                    count.fetch_add(1, Ordering::SeqCst);
                }
                notify.notify_one();
            }
        }));
    }
    tokio::time::timeout(common::EVENT_TIMEOUT, async {
        while count.load(Ordering::SeqCst) < KILL_AFTER_ACKS {
            notify.notified().await;
        }
    })
    .await
    .expect("some results acknowledged");
    let acked_at_crash = count.load(Ordering::SeqCst);
    crash();
    for t in tasks {
        t.await.unwrap();
    }
    for n in noise {
        n.abort();
    }
    let acked = acked.lock().await.clone();
    Round {
        matches,
        placements: placements_of,
        acked,
        acked_at_crash,
    }
}

/// After a crash: every acknowledged result is there once (a report again is a duplicate with
/// the same changes); an unacknowledged one is applied now or was already. Returns the applied.
async fn settle(
    channel: &Channel,
    matches: &[proto::MatchAssignment],
    placements_of: &BTreeMap<String, Vec<u32>>,
    acked: &BTreeMap<String, proto::MatchResultAck>,
) -> Vec<Applied> {
    let mut applied = Vec::new();
    for m in matches {
        let placements = placements_of[&m.match_id].clone();
        let again = common::poll_until(&format!("{} answers", m.match_id), || {
            let mut gs = GameServerServiceClient::new(channel.clone());
            let req = proto::MatchResult {
                match_id: m.match_id.clone(),
                placements: placements.clone(),
                ..Default::default()
            };
            async move {
                match gs.report_match_result(req).await {
                    Err(e) if e.code() == Code::Unavailable => Err(e),
                    other => Ok(other),
                }
            }
        })
        .await;
        match (acked.get(&m.match_id), again) {
            (Some(first), Ok(ack)) => {
                let ack = ack.into_inner();
                assert!(ack.duplicate, "{} applied twice", m.match_id);
                assert!(same_changes(&ack.changes, &first.changes), "{}", m.match_id);
            }
            (Some(_), Err(e)) => panic!("acknowledged result of {} lost: {e}", m.match_id),
            (None, Ok(_)) => {}
            (None, Err(e)) => panic!("a served match of {} is gone: {e}", m.match_id),
        }
        applied.push(Applied {
            teams: m.teams.iter().map(|t| t.player_ids[0].clone()).collect(),
            placements,
        });
    }
    applied
}

/// What a round with one crash in it ([`round`]) leaves: settled through one node, ratings
/// equal a replay through the other, and the crash struck while results were still to be
/// acknowledged (the nodes send a report again through a failover, so each may end
/// acknowledged all the same).
async fn after_the_crash(what: &str, channels: &[Channel], players: &[String], round: &Round) {
    let applied = settle(
        &channels[1],
        &round.matches,
        &round.placements,
        &round.acked,
    )
    .await;
    ratings_equal_a_replay(&channels[0], players, &applied).await;
    eprintln!(
        "{what}: {} of {} acknowledged ({} before the crash), {} applied",
        round.acked.len(),
        round.matches.len(),
        round.acked_at_crash,
        applied.len()
    );
    assert!(
        round.acked_at_crash < round.matches.len(),
        "every result was acknowledged before the crash; the test proved nothing"
    );
}

/// Every player's rating through `channel` equals the replay of `applied` in order.
async fn ratings_equal_a_replay(channel: &Channel, players: &[String], applied: &[Applied]) {
    let system = Config::from_toml_str("").unwrap().queues["1v1"]
        .rating
        .clone();
    let mut skills: BTreeMap<String, Skill> = players
        .iter()
        .map(|p| (p.clone(), system.initial()))
        .collect();
    let mut games: BTreeMap<String, u32> = BTreeMap::new();
    for a in applied {
        let teams: Vec<Vec<PlayerInput>> = a
            .teams
            .iter()
            .map(|p| vec![PlayerInput::new(skills[p])])
            .collect();
        let rated = system
            .rate(&MatchInput {
                teams: &teams,
                placements: &a.placements,
            })
            .unwrap();
        for (p, after) in a.teams.iter().zip(&rated) {
            skills.insert(p.clone(), after[0]);
            *games.entry(p.clone()).or_default() += 1;
        }
    }
    let mut client = ClientServiceClient::new(channel.clone());
    for p in players {
        let view = client
            .get_player(proto::GetPlayerRequest {
                player_id: p.clone(),
                queue: "1v1".into(),
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(view.games, games.get(p).copied().unwrap_or(0), "{p}");
        let got = skill(view.rating.as_ref().unwrap());
        assert!(
            same_skill(&got, &skills[p]),
            "{p}: {got:?} != {:?}",
            skills[p]
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_results_survive_repeated_kill_9_of_random_nodes() {
    let redis = RedisServer::start().unwrap_or_else(|e| panic!("{e}"));
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path(), &redis);
    let names = ["n1", "n2", "n3"];
    let mut nodes: Vec<ServerProcess> = names.iter().map(|n| node(&config, n)).collect();
    let players: Vec<String> = (0..PLAYERS).map(|i| format!("c{i}")).collect();
    let mut rng = StdRng::seed_from_u64(19);
    let killed = kill_rounds(
        &redis,
        &config,
        &names,
        &mut nodes,
        &players,
        &mut rng,
        "mm",
        |_| {},
    )
    .await;
    let channel = nodes[rng.random_range(0..nodes.len())].channel().await;
    ratings_equal_a_replay(&channel, &players, &killed.applied).await;
    eprintln!(
        "cluster chaos: {} kill -9s, {} acknowledged, {} applied",
        killed.kills,
        killed.acked,
        killed.applied.len()
    );
    assert!(killed.acked >= 4 * KILL_AFTER_ACKS);
}

/// What [`kill_rounds`] leaves.
struct Killed {
    kills: usize,
    /// Results acknowledged.
    acked: usize,
    /// Every served match's result, applied by the end.
    applied: Vec<Applied>,
    /// Their match ids, in order.
    match_ids: Vec<String>,
}

/// Four [`round`]s, each with a `kill -9`: of `keyspace`'s owner every other round (once some
/// node owns it: the first round starts with nodes just started), of a random node the others;
/// the node is started again, `restarted` is given every node's channel, and the round is
/// settled through another node.
#[allow(clippy::too_many_arguments)]
async fn kill_rounds(
    redis: &RedisServer,
    config: &Path,
    names: &[&str],
    nodes: &mut [ServerProcess],
    players: &[String],
    rng: &mut StdRng,
    keyspace: &str,
    mut restarted: impl FnMut(Vec<Channel>),
) -> Killed {
    let mut killed = Killed {
        kills: 0,
        acked: 0,
        applied: Vec::new(),
        match_ids: Vec::new(),
    };
    for r in 0..4 {
        let mut channels = Vec::new();
        for n in nodes.iter() {
            channels.push(n.channel().await);
        }
        let victim = if r % 2 == 0 {
            common::queues_answer(&channels[0]).await;
            let owner = common::poll_until(&format!("{keyspace}'s lease names a node"), || {
                let owner = common::lease_holder_of(redis, keyspace);
                async move { owner.ok_or("no owner") }
            })
            .await;
            names
                .iter()
                .position(|n| *n == owner)
                .unwrap_or_else(|| panic!("the lease names {owner}, no node of the test"))
        } else {
            rng.random_range(0..nodes.len())
        };
        let pid = nodes[victim].child.id();
        let played = round(&channels, players, 3, rng, || {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
        })
        .await;
        killed.kills += 1;
        killed.acked += played.acked.len();
        let _ = nodes[victim].child.wait();
        nodes[victim] = node(config, names[victim]);
        let mut now = Vec::new();
        for n in nodes.iter() {
            now.push(n.channel().await);
        }
        restarted(now.clone());
        let survivor = now[(victim + 1) % now.len()].clone();
        killed.applied.extend(
            settle(
                &survivor,
                &played.matches,
                &played.placements,
                &played.acked,
            )
            .await,
        );
        killed
            .match_ids
            .extend(played.matches.iter().map(|m| m.match_id.clone()));
    }
    killed
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_results_survive_a_redis_crash_under_load() {
    // `appendfsync always`: Redis writes its AOF before it answers. Under `everysec` it puts the
    // write off while a slow background sync runs, and a SIGKILL then takes results it has
    // acknowledged (the durability table in docs/cluster.md).
    let redis = RedisServer::start_fsync_always().unwrap_or_else(|e| panic!("{e}"));
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path(), &redis);
    let nodes: Vec<ServerProcess> = ["n1", "n2"].iter().map(|n| node(&config, n)).collect();
    let mut channels = Vec::new();
    for n in &nodes {
        channels.push(n.channel().await);
    }
    let players: Vec<String> = (0..60).map(|i| format!("r{i}")).collect();
    let mut rng = StdRng::seed_from_u64(20);
    let pid = redis.pid().expect("redis runs");
    let redis = Arc::new(std::sync::Mutex::new(redis));
    let mut restarted = None;
    let played = round(&channels, &players, 2, &mut rng, || {
        // SIGKILL Redis with reports in flight; it starts again on its AOF a lease later,
        // while the reports go on.
        let _ = Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status();
        let redis = redis.clone();
        restarted = Some(tokio::spawn(async move {
            tokio::time::sleep(std::time::Duration::from_millis(LEASE_MS)).await;
            tokio::task::spawn_blocking(move || redis.lock().unwrap().restart())
                .await
                .unwrap()
        }));
    })
    .await;
    restarted
        .expect("the crash ran")
        .await
        .unwrap()
        .expect("redis restarts");
    after_the_crash("redis crash", &channels, &players, &played).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_results_survive_the_death_of_a_redis_cluster_primary_under_load() {
    let redis =
        matchmaker::store::RedisCluster::start_with_replicas(1).unwrap_or_else(|e| panic!("{e}"));
    let primary = redis.primary_of("{mm}:lease").unwrap();
    let dir = tempfile::tempdir().unwrap();
    // A result is acknowledged once the primary's replica holds it.
    let config = config_on(
        dir.path(),
        &redis.url((primary + 1) % 3),
        "wait_replicas = 1\n",
    );
    let nodes: Vec<ServerProcess> = ["n1", "n2"].iter().map(|n| node(&config, n)).collect();
    let mut channels = Vec::new();
    for n in &nodes {
        channels.push(n.channel().await);
    }
    let players: Vec<String> = (0..60).map(|i| format!("c{i}")).collect();
    let mut rng = StdRng::seed_from_u64(21);
    let redis = Arc::new(std::sync::Mutex::new(redis));
    let mut recovered = None;
    let played = round(&channels, &players, 2, &mut rng, || {
        // SIGKILL the primary holding the keyspace with reports in flight: its replica takes
        // over; the old primary comes back as the new one's replica, so that results are
        // acknowledged again.
        redis.lock().unwrap().node(primary).kill();
        let redis = redis.clone();
        recovered = Some(tokio::task::spawn_blocking(move || {
            // Until another node is the keyspace's primary: while the cluster only suspects
            // the dead one (`fail?`), no primary of the slot is listed at all.
            common::poll_until_blocking("a replica takes over", || {
                match redis.lock().unwrap().primary_of("{mm}:lease") {
                    Ok(p) if p != primary => Ok(()),
                    other => Err(format!("{other:?}")),
                }
            });
            let mut redis = redis.lock().unwrap();
            redis.node(primary).restart()?;
            redis.wait_in_step()
        }));
    })
    .await;
    recovered
        .expect("the crash ran")
        .await
        .unwrap()
        .expect("the old primary comes back as a replica");
    after_the_crash("redis cluster failover", &channels, &players, &played).await;
}

/// Follows `WatchEvents` (match completions) through whichever node `nodes` names, resuming
/// after the last cursor it got whenever its stream ends, into `seen`; asserts that cursors
/// only grow across every resumption.
async fn follow_completions(
    nodes: tokio::sync::watch::Receiver<Vec<Channel>>,
    seen: Arc<Mutex<Vec<proto::Event>>>,
) {
    let mut last = 0;
    let mut turn = 0usize;
    loop {
        let channels = nodes.borrow().clone();
        turn += 1;
        let channel = channels[turn % channels.len()].clone();
        let opened = matchmaker::proto::admin_service_client::AdminServiceClient::new(channel)
            .watch_events(proto::WatchEventsRequest {
                after_cursor: last,
                kinds: vec![proto::EventKind::MatchCompleted as i32],
            })
            .await;
        if let Ok(stream) = opened {
            let mut stream = stream.into_inner();
            while let Ok(Some(event)) = stream.message().await {
                assert!(event.cursor > last, "{} after {last}", event.cursor);
                last = event.cursor;
                seen.lock().await.push(event);
            }
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// With the queues split over shards (1v1 in shard `eu`, the 5v5 load in the home shard):
/// repeated `kill -9` of random nodes and of shard `eu`'s owner under load. Every acknowledged
/// result is there exactly once and ratings equal a replay, and a watcher that resumes after
/// its last cursor through any node sees every applied result's completion exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sharded_results_and_their_events_survive_repeated_kill_9_of_random_nodes() {
    let redis = RedisServer::start().unwrap_or_else(|e| panic!("{e}"));
    let dir = tempfile::tempdir().unwrap();
    let config = config_on(
        dir.path(),
        &redis.url(),
        "[[cluster.shards]]\nkeyspace = \"eu\"\nqueues = [\"1v1\"]\n",
    );
    let names = ["n1", "n2", "n3"];
    let mut nodes: Vec<ServerProcess> = names.iter().map(|n| node(&config, n)).collect();
    let players: Vec<String> = (0..PLAYERS).map(|i| format!("s{i}")).collect();
    let mut rng = StdRng::seed_from_u64(27);
    let mut channels = Vec::new();
    for n in &nodes {
        channels.push(n.channel().await);
    }
    common::queues_answer(&channels[0]).await;
    let (current, following) = tokio::sync::watch::channel(channels);
    let seen: Arc<Mutex<Vec<proto::Event>>> = Arc::default();
    let watcher = tokio::spawn(follow_completions(following, seen.clone()));
    let killed = kill_rounds(
        &redis,
        &config,
        &names,
        &mut nodes,
        &players,
        &mut rng,
        "eu",
        |channels| {
            current.send_replace(channels);
        },
    )
    .await;
    let (applied, mut applied_ids) = (killed.applied, killed.match_ids);
    let channel = nodes[rng.random_range(0..nodes.len())].channel().await;
    ratings_equal_a_replay(&channel, &players, &applied).await;
    // Every applied result's completion reaches the watcher, once.
    applied_ids.sort();
    let completed = common::poll_until("the watcher saw every completion", || {
        let seen = seen.clone();
        let want = applied_ids.clone();
        async move {
            let mut ids: Vec<String> = seen
                .lock()
                .await
                .iter()
                .filter(|e| e.detail_json.contains("\"1v1\""))
                .map(|e| e.match_id.clone())
                .collect();
            ids.sort();
            if ids.len() >= want.len() {
                Ok(ids)
            } else {
                Err(ids.len())
            }
        }
    })
    .await;
    // It follows for good: ended, it failed an assertion (a cursor that did not grow).
    assert!(!watcher.is_finished(), "{:?}", watcher.await);
    watcher.abort();
    assert_eq!(completed, applied_ids, "each applied result completed once");
    eprintln!(
        "sharded chaos: {} kill -9s, {} acknowledged, {} applied, {} events",
        killed.kills,
        killed.acked,
        applied.len(),
        seen.lock().await.len()
    );
    assert!(killed.acked >= 4 * KILL_AFTER_ACKS);
}

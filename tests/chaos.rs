//! Chaos: several rounds of play, each ended by `kill -9` while results are being reported and
//! other clients keep queueing; the binary restarts on the same data dir every time. Players
//! play a match per round, so ratings depend on the whole history. At the end every
//! acknowledged result is there exactly once, and every rating equals a replay of the applied
//! results through the rating library.
#![cfg(unix)]

mod common;

use common::ServerProcess;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use matchmaker::config::Config;
use matchmaker::proto;
use matchmaker::proto::client_service_client::ClientServiceClient;
use matchmaker::proto::game_server_service_client::GameServerServiceClient;
use matchmaker::rating::{MatchInput, PlayerInput, Skill};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::sync::{Mutex, Notify};
use tonic::Code;

const PLAYERS: usize = 12;
const ROUNDS: usize = 4;
/// Kill once this many results of the round are acknowledged (the rest are in flight).
const KILL_AFTER_ACKS: usize = 3;
/// Background EnterQueue calls per round, at most (they stop when the server dies).
const NOISE_CALLS: usize = 5_000;

use common::{same_changes, same_skill, skill};

/// A result known to be applied: its match and placements.
struct Applied {
    teams: Vec<String>,
    placements: Vec<u32>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_results_survive_repeated_kill_9_under_load() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("chaos.toml");
    // Any two waiting players pair at once, so every round is quick whatever the ratings;
    // frequent snapshots so kills land around snapshots and journal trims too.
    std::fs::write(
        &config,
        "[server]\ntick_interval_ms = 10\n[store]\nsnapshot_interval_seconds = 1\n\
         [queues.1v1.matching]\nwindow = 100000.0\nmin_quality = 0.0\nmax_latency_ms = 100000\nexpansion = []\n",
    )
    .unwrap();
    let data = dir.path().join("data");
    let players: Vec<String> = (0..PLAYERS).map(|i| format!("c{i}")).collect();
    let mut rng = StdRng::seed_from_u64(8);
    let mut applied: Vec<Applied> = Vec::new();
    let mut acked_total = 0;
    let mut in_flight_at_kill = 0;

    for round in 0..ROUNDS {
        let mut server = ServerProcess::start(&data, &config);
        let ch = server.channel().await;
        let mut client = ClientServiceClient::new(ch.clone());
        let mut gs = GameServerServiceClient::new(ch.clone());
        let mut assignments = gs
            .serve_matches(proto::ServeMatchesRequest {
                server_address: "chaos:1".into(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        for p in &players {
            client
                .enter_queue(proto::EnterQueueRequest {
                    queue: "1v1".into(),
                    player_ids: vec![p.clone()],
                    ..Default::default()
                })
                .await
                .unwrap_or_else(|e| panic!("round {round}: {p} cannot queue: {e}"));
        }
        let mut matches = Vec::new();
        while matches.len() < PLAYERS / 2 {
            // Restored 5v5 noise matches may be offered too; only the 1v1 ones are ours.
            let a = common::next(&mut assignments).await;
            if a.queue == "1v1" {
                matches.push(a);
            }
        }

        // Load beside the reports: fresh players queueing in 5v5 until the server dies.
        let noise = {
            let mut c = ClientServiceClient::new(ch.clone());
            tokio::spawn(async move {
                for i in 0..NOISE_CALLS {
                    let r = c
                        .enter_queue(proto::EnterQueueRequest {
                            queue: "5v5".into(),
                            player_ids: vec![format!("noise-{round}-{i}")],
                            ..Default::default()
                        })
                        .await;
                    if r.is_err() {
                        return;
                    }
                }
            })
        };

        // Report every match concurrently; kill -9 once a few are acknowledged.
        let acked: Arc<Mutex<BTreeMap<String, proto::MatchResultAck>>> = Arc::default();
        let count = Arc::new(AtomicUsize::new(0));
        let notify = Arc::new(Notify::new());
        let mut placements_of = BTreeMap::new();
        let mut tasks = Vec::new();
        for m in &matches {
            let placements = if rng.random() { vec![1, 2] } else { vec![2, 1] };
            placements_of.insert(m.match_id.clone(), placements.clone());
            let mut gs = GameServerServiceClient::new(ch.clone());
            let (acked, count, notify, id) = (
                acked.clone(),
                count.clone(),
                notify.clone(),
                m.match_id.clone(),
            );
            tasks.push(tokio::spawn(async move {
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
        server.child.kill().unwrap(); // SIGKILL, with reports and queueing in flight
        let _ = server.child.wait();
        for t in tasks {
            t.await.unwrap();
        }
        noise.await.unwrap();
        let acked = acked.lock().await.clone();
        acked_total += acked.len();
        in_flight_at_kill += matches.len() - acked.len();

        // Restart and settle the round: every acknowledged result is there exactly once; an
        // unacknowledged one was journaled (duplicate), is still live (applied now), or was lost
        // with an unflushed match record (NOT_FOUND, its players free).
        let server = ServerProcess::start(&data, &config);
        let ch = server.channel().await;
        let mut gs = GameServerServiceClient::new(ch);
        for m in &matches {
            let placements = placements_of[&m.match_id].clone();
            let again = gs
                .report_match_result(proto::MatchResult {
                    match_id: m.match_id.clone(),
                    placements: placements.clone(),
                    ..Default::default()
                })
                .await;
            let was_applied = match (acked.get(&m.match_id), again) {
                (Some(first), Ok(ack)) => {
                    let ack = ack.into_inner();
                    assert!(ack.duplicate, "{} applied twice", m.match_id);
                    assert!(
                        same_changes(&ack.changes, &first.changes),
                        "{}: {:?} != {:?}",
                        m.match_id,
                        ack.changes,
                        first.changes
                    );
                    true
                }
                (Some(_), Err(e)) => panic!("acknowledged result of {} lost: {e}", m.match_id),
                (None, Ok(_)) => true,
                (None, Err(e)) => {
                    assert_eq!(e.code(), Code::NotFound, "{e}");
                    false
                }
            };
            if was_applied {
                applied.push(Applied {
                    teams: m.teams.iter().map(|t| t.player_ids[0].clone()).collect(),
                    placements,
                });
            }
        }
        // A graceful stop between rounds is not the point; the next round starts on a kill too.
        drop(server);
    }

    // Replay every applied result in order through the rating library.
    let system = Config::from_toml_str("").unwrap().queues["1v1"]
        .rating
        .clone();
    let mut skills: BTreeMap<String, Skill> = players
        .iter()
        .map(|p| (p.clone(), system.initial()))
        .collect();
    let mut games: BTreeMap<String, u32> = BTreeMap::new();
    for a in &applied {
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

    let mut server = ServerProcess::start(&data, &config);
    let mut client = ClientServiceClient::new(server.channel().await);
    for p in &players {
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
    eprintln!(
        "chaos: {ROUNDS} rounds, {} kill -9s, {acked_total} acknowledged, {} applied, {in_flight_at_kill} unacknowledged at a kill",
        2 * ROUNDS,
        applied.len()
    );
    assert!(acked_total >= ROUNDS * KILL_AFTER_ACKS);
    server.signal("TERM");
    assert!(server.child.wait().unwrap().success());
}

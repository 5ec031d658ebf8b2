//! `kill -9` in the middle of concurrent result reports: after a restart on the same data dir,
//! every acknowledged result is there, none is applied twice, and ratings equal a replay of the
//! acknowledged results through the rating library, with their events. And a match a game
//! server received is never lost to a crash.
#![cfg(unix)]

mod common;

use common::ServerProcess;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use matchmaker::config::Config;
use matchmaker::proto;
use matchmaker::proto::admin_service_client::AdminServiceClient;
use matchmaker::proto::client_service_client::ClientServiceClient;
use matchmaker::proto::game_server_service_client::GameServerServiceClient;
use matchmaker::rating::{MatchInput, PlayerInput, Skill};
use tokio::sync::Mutex;

const PAIRS: usize = 80;
const KILL_AFTER_ACKS: usize = 24;

fn skill(r: &proto::Rating) -> Skill {
    Skill {
        mean: r.mean,
        deviation: r.deviation,
        volatility: r.volatility,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_acknowledged_result_survives_kill_9_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("crash.toml");
    // Frequent snapshots so the kill can land between snapshot and journal trim too.
    std::fs::write(
        &config,
        "[server]\ntick_interval_ms = 10\n[store]\nsnapshot_interval_seconds = 1\n",
    )
    .unwrap();
    let data = dir.path().join("data");
    let mut server = ServerProcess::start(&data, &config);
    let ch = server.channel().await;
    let mut client = ClientServiceClient::new(ch.clone());
    let mut assignments = serve_as_gs1(&ch).await;
    for i in 0..PAIRS {
        for side in ["a", "b"] {
            client
                .enter_queue(proto::EnterQueueRequest {
                    queue: "1v1".into(),
                    player_ids: vec![format!("{side}{i}")],
                    ..Default::default()
                })
                .await
                .unwrap();
        }
    }
    let mut matches = Vec::new();
    while matches.len() < PAIRS {
        matches.push(common::next(&mut assignments).await);
    }

    // Report in concurrent chunks; once enough are acknowledged, fire the next chunk and
    // kill -9 while it is in flight. Later chunks meet a dead server.
    const CHUNK: usize = 8;
    let acked: Arc<Mutex<BTreeMap<String, proto::MatchResultAck>>> = Arc::default();
    let count = Arc::new(AtomicUsize::new(0));
    let mut killed = false;
    let mut tasks = Vec::new();
    for chunk in matches.chunks(CHUNK) {
        let mut chunk_tasks = Vec::new();
        for m in chunk {
            let mut gs = GameServerServiceClient::new(ch.clone());
            let (acked, count, id) = (acked.clone(), count.clone(), m.match_id.clone());
            chunk_tasks.push(tokio::spawn(async move {
                let r = gs
                    .report_match_result(proto::MatchResult {
                        match_id: id.clone(),
                        placements: vec![1, 2],
                        ..Default::default()
                    })
                    .await;
                if let Ok(ack) = r {
                    acked.lock().await.insert(id, ack.into_inner());
                    count.fetch_add(1, Ordering::SeqCst);
                }
            }));
        }
        if !killed && count.load(Ordering::SeqCst) >= KILL_AFTER_ACKS {
            server.child.kill().unwrap(); // SIGKILL, with this chunk in flight
            killed = true;
        }
        if killed {
            tasks.extend(chunk_tasks);
        } else {
            for t in chunk_tasks {
                t.await.unwrap();
            }
        }
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert!(killed);
    let _ = server.child.wait();
    let acked = acked.lock().await.clone();
    assert!(
        acked.len() >= KILL_AFTER_ACKS,
        "only {} acknowledged",
        acked.len()
    );
    // Usually the kill lands with reports in flight; when the last acks win the race, the
    // run still checks that every acknowledged result survived the kill.

    // Restart on the same data dir.
    server = ServerProcess::start(&data, &config);
    let ch = server.channel().await;
    let mut client = ClientServiceClient::new(ch.clone());
    let mut gs = GameServerServiceClient::new(ch);
    let system = Config::from_toml_str("").unwrap().queues["1v1"]
        .rating
        .clone();
    let initial = system.initial();
    let replay = system
        .rate(&MatchInput {
            teams: &[
                vec![PlayerInput::new(initial)],
                vec![PlayerInput::new(initial)],
            ],
            placements: &[1, 2],
        })
        .unwrap();
    let mut applied_after_restart = 0;
    for m in &matches {
        let again = gs
            .report_match_result(proto::MatchResult {
                match_id: m.match_id.clone(),
                placements: vec![1, 2],
                ..Default::default()
            })
            .await;
        match (acked.get(&m.match_id), again) {
            (Some(first), Ok(ack)) => {
                let ack = ack.into_inner();
                assert!(ack.duplicate, "{} was applied twice", m.match_id);
                assert_eq!(ack.changes, first.changes);
            }
            (Some(_), Err(e)) => panic!("acknowledged result of {} lost: {e}", m.match_id),
            // Not acknowledged: it may have been journaled before the kill (duplicate) or still
            // be a live match (applied now). It is never lost: the game server got it only
            // once it was durable.
            (None, Ok(ack)) => applied_after_restart += usize::from(!ack.into_inner().duplicate),
            (None, Err(e)) => panic!("match {} the game server held was lost: {e}", m.match_id),
        }
        for (t, team) in m.teams.iter().enumerate() {
            let p = &team.player_ids[0];
            let view = client
                .get_player(proto::GetPlayerRequest {
                    player_id: p.clone(),
                    queue: "1v1".into(),
                })
                .await
                .unwrap()
                .into_inner();
            if view.games > 0 {
                assert_eq!(view.games, 1, "{p} rated twice");
                assert_eq!(skill(view.rating.as_ref().unwrap()), replay[t][0], "{p}");
            }
            if acked.contains_key(&m.match_id) {
                assert_eq!(view.games, 1, "{p} lost an acknowledged result");
            }
        }
    }
    eprintln!(
        "acknowledged before kill: {}, applied after restart: {applied_after_restart}",
        acked.len()
    );
    // The event log has every match completed once and every rating change once: an
    // acknowledged result's events were durable with it, so the kill took none of them.
    let ch = server.channel().await;
    let kinds = [
        proto::EventKind::MatchCompleted,
        proto::EventKind::RatingChanged,
    ];
    let events = tokio::time::timeout(
        std::time::Duration::from_secs(30),
        common::watch_events(&ch, 0, &kinds, 3 * PAIRS),
    )
    .await
    .expect("a result's events were lost to the kill");
    let mut completed: Vec<&str> = events
        .iter()
        .filter(|e| e.kind == proto::EventKind::MatchCompleted as i32)
        .map(|e| e.match_id.as_str())
        .collect();
    completed.sort_unstable();
    let mut all: Vec<&str> = matches.iter().map(|m| m.match_id.as_str()).collect();
    all.sort_unstable();
    assert_eq!(completed, all, "each match completed exactly once");
    server.signal("TERM");
    assert!(server.child.wait().unwrap().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_journal_for_a_pool_no_queue_uses_any_more_replays_after_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("before.toml");
    std::fs::write(&config, "[server]\ntick_interval_ms = 10\n").unwrap();
    let data = dir.path().join("data");
    let mut server = ServerProcess::start(&data, &config);
    let ch = server.channel().await;
    let m = one_match_served(&ch, ["old1", "old2"]).await;
    GameServerServiceClient::new(ch)
        .report_match_result(proto::MatchResult {
            match_id: m.match_id,
            placements: vec![1, 2],
            ..Default::default()
        })
        .await
        .unwrap();
    // Crash: the result is only in the journal (no final snapshot).
    server.child.kill().unwrap();
    server.child.wait().unwrap();

    // The operator moves 1v1 to a fresh rating pool; the old pool's journal must still replay.
    let moved = dir.path().join("after.toml");
    std::fs::write(
        &moved,
        "[server]\ntick_interval_ms = 10\n[queues.1v1]\nrating_pool = \"season2\"\n",
    )
    .unwrap();
    let mut server = ServerProcess::start(&data, &moved);
    let ch = server.channel().await;
    let view = ClientServiceClient::new(ch.clone())
        .get_player(proto::GetPlayerRequest {
            player_id: "old1".into(),
            queue: "1v1".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(view.games, 0, "the new pool starts fresh");
    let board = ClientServiceClient::new(ch)
        .get_leaderboard(proto::GetLeaderboardRequest {
            queue: "1v1".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(board.total, 0);
    server.signal("TERM");
    assert!(server.child.wait().unwrap().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_match_a_game_server_received_survives_kill_9_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("now.toml");
    std::fs::write(&config, "[server]\ntick_interval_ms = 10\n").unwrap();
    let data = dir.path().join("data");
    let kinds = [
        proto::EventKind::MatchFormed,
        proto::EventKind::MatchAllocated,
    ];
    for round in 0..6 {
        let mut server = ServerProcess::start(&data, &config);
        let ch = server.channel().await;
        let (a, b) = (format!("now{round}a"), format!("now{round}b"));
        // kill -9 the moment the match arrives: well inside sled's 500 ms background flush.
        let m = one_match_served(&ch, [&a, &b]).await;
        server.child.kill().unwrap();
        server.child.wait().unwrap();

        let server = ServerProcess::start(&data, &config);
        let ch = server.channel().await;
        // Its formed and allocated events were flushed with it, before the server got it.
        let events = tokio::time::timeout(
            std::time::Duration::from_secs(8),
            common::watch_events(&ch, 0, &kinds, 2 * (round + 1)),
        )
        .await
        .unwrap_or_else(|_| panic!("round {round}: the events of a delivered match were lost"));
        let last: Vec<&str> = events[2 * round..]
            .iter()
            .map(|e| e.match_id.as_str())
            .collect();
        assert_eq!(last, [m.match_id.as_str(); 2], "round {round}");
        let ack = GameServerServiceClient::new(ch)
            .report_match_result(proto::MatchResult {
                match_id: m.match_id.clone(),
                placements: vec![1, 2],
                ..Default::default()
            })
            .await
            .unwrap_or_else(|e| panic!("round {round}: match {} lost: {e}", m.match_id))
            .into_inner();
        assert_eq!(ack.changes.len(), 2, "round {round}");
        drop(server);
    }
}

/// OK from `ReportMatchResult` means the result's events are durable too: the process is
/// killed the moment the acknowledgement arrives, and the restarted server's event log has the
/// match completed and both rating changes, round after round.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_results_events_survive_kill_9_right_after_its_ack() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("events.toml");
    std::fs::write(&config, "[server]\ntick_interval_ms = 10\n").unwrap();
    let data = dir.path().join("data");
    let kinds = [
        proto::EventKind::MatchCompleted,
        proto::EventKind::RatingChanged,
    ];
    let mut completed: Vec<String> = Vec::new();
    for round in 0..8 {
        let mut server = ServerProcess::start(&data, &config);
        let ch = server.channel().await;
        let (a, b) = (format!("ev{round}a"), format!("ev{round}b"));
        let m = one_match_served(&ch, [&a, &b]).await;
        GameServerServiceClient::new(ch)
            .report_match_result(proto::MatchResult {
                match_id: m.match_id.clone(),
                placements: vec![1, 2],
                ..Default::default()
            })
            .await
            .unwrap();
        server.child.kill().unwrap();
        server.child.wait().unwrap();
        completed.push(m.match_id);

        let server = ServerProcess::start(&data, &config);
        let ch = server.channel().await;
        let events = tokio::time::timeout(
            std::time::Duration::from_secs(8),
            common::watch_events(&ch, 0, &kinds, 3 * completed.len()),
        )
        .await
        .unwrap_or_else(|_| panic!("round {round}: an acknowledged result's events were lost"));
        let ids: Vec<&str> = events
            .iter()
            .filter(|e| e.kind == proto::EventKind::MatchCompleted as i32)
            .map(|e| e.match_id.as_str())
            .collect();
        assert_eq!(ids, completed, "round {round}");
        drop(server);
    }
}

/// Serves matches as game server `gs:1`, queues two solo 1v1 players and returns their match as
/// the game server received it.
async fn one_match_served(
    ch: &tonic::transport::Channel,
    players: [&str; 2],
) -> proto::MatchAssignment {
    let mut assignments = serve_as_gs1(ch).await;
    let mut client = ClientServiceClient::new(ch.clone());
    for p in players {
        client
            .enter_queue(proto::EnterQueueRequest {
                queue: "1v1".into(),
                player_ids: vec![p.into()],
                ..Default::default()
            })
            .await
            .unwrap();
    }
    common::next(&mut assignments).await
}

/// The match stream of game server `gs:1`.
async fn serve_as_gs1(ch: &tonic::transport::Channel) -> tonic::Streaming<proto::MatchAssignment> {
    GameServerServiceClient::new(ch.clone())
        .serve_matches(proto::ServeMatchesRequest {
            server_address: "gs:1".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
}

/// `kill -9` right after acknowledged records changes: party rosters (made, joined, ended) and
/// match records (completed with its changes, started, cancelled) are all there after the
/// restart, exactly as acknowledged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn party_rosters_and_match_records_survive_kill_9() {
    use matchmaker::proto::party_service_client::PartyServiceClient;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("records.toml");
    std::fs::write(&config, "[server]\ntick_interval_ms = 10\n").unwrap();
    let data = dir.path().join("data");
    let mut server = ServerProcess::start(&data, &config);
    let ch = server.channel().await;
    let mut parties = PartyServiceClient::new(ch.clone());
    let party = parties
        .create_party(proto::CreatePartyRequest {
            player_id: "kp-lead".into(),
        })
        .await
        .unwrap()
        .into_inner();
    let party = parties
        .join_party(proto::JoinPartyRequest {
            invite_code: party.invite_code,
            player_id: "kp-mate".into(),
        })
        .await
        .unwrap()
        .into_inner();
    let ended = parties
        .create_party(proto::CreatePartyRequest {
            player_id: "kp-solo".into(),
        })
        .await
        .unwrap()
        .into_inner();
    parties
        .leave_party(proto::LeavePartyRequest {
            party_id: ended.party_id.clone(),
            player_id: "kp-solo".into(),
        })
        .await
        .unwrap();

    let mut offers = serve_as_gs1(&ch).await;
    let mut client = ClientServiceClient::new(ch.clone());
    let mut gs = GameServerServiceClient::new(ch.clone());
    let mut served = Vec::new();
    for pair in [["kr-a", "kr-b"], ["kr-c", "kr-d"], ["kr-e", "kr-f"]] {
        for p in pair {
            client
                .enter_queue(proto::EnterQueueRequest {
                    queue: "1v1".into(),
                    player_ids: vec![p.into()],
                    ..Default::default()
                })
                .await
                .unwrap();
        }
        served.push(common::next(&mut offers).await);
    }
    let start = |id: &str| proto::StartMatchRequest {
        match_id: id.into(),
    };
    let ack = gs
        .report_match_result(proto::MatchResult {
            match_id: served[0].match_id.clone(),
            placements: vec![1, 2],
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
    gs.cancel_match(proto::CancelMatchRequest {
        match_id: served[2].match_id.clone(),
        reason: "crashed".into(),
    })
    .await
    .unwrap();
    server.child.kill().unwrap(); // SIGKILL right after the last acknowledgement
    server.child.wait().unwrap();

    let server = ServerProcess::start(&data, &config);
    let ch = server.channel().await;
    // The cancel's event was durable with its answer.
    let cancelled = tokio::time::timeout(
        std::time::Duration::from_secs(8),
        common::watch_events(&ch, 0, &[proto::EventKind::MatchCancelled], 1),
    )
    .await
    .expect("the cancelled match's event was lost");
    assert_eq!(cancelled[0].match_id, served[2].match_id);
    let mut parties = PartyServiceClient::new(ch.clone());
    let again = parties
        .get_party(proto::GetPartyRequest {
            party_id: party.party_id.clone(),
        })
        .await
        .expect("the party survived")
        .into_inner();
    assert_eq!(again, party);
    let joined = parties
        .join_party(proto::JoinPartyRequest {
            invite_code: party.invite_code.clone(),
            player_id: "kp-third".into(),
        })
        .await
        .expect("its invite code still works")
        .into_inner();
    assert_eq!(joined.member_ids, ["kp-lead", "kp-mate", "kp-third"]);
    let gone = parties
        .get_party(proto::GetPartyRequest {
            party_id: ended.party_id,
        })
        .await
        .unwrap_err();
    assert_eq!(
        gone.code(),
        tonic::Code::NotFound,
        "an ended party stays ended"
    );

    let mut client = ClientServiceClient::new(ch.clone());
    let get = |id: &str| proto::GetMatchRequest {
        match_id: id.into(),
    };
    let done = client
        .get_match(get(&served[0].match_id))
        .await
        .expect("the completed match is in the history")
        .into_inner();
    assert_eq!(done.phase, proto::MatchPhase::Completed as i32);
    assert!(common::same_changes(&done.changes, &ack.changes));
    let history = client
        .list_player_matches(proto::ListPlayerMatchesRequest {
            player_id: "kr-a".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(history.matches.len(), 1);
    assert_eq!(history.matches[0], done);
    let live = client
        .get_match(get(&served[1].match_id))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        (live.phase, live.started_unix),
        (proto::MatchPhase::Started as i32, started),
        "restored STARTED"
    );
    let cancelled = client
        .get_match(get(&served[2].match_id))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(cancelled.phase, proto::MatchPhase::Cancelled as i32);
    // Still started after the restart: a cancel ends it, requeueing nothing.
    let after = GameServerServiceClient::new(ch)
        .cancel_match(proto::CancelMatchRequest {
            match_id: served[1].match_id.clone(),
            reason: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(after.requeued_ticket_ids.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bans_the_audit_log_and_event_cursors_survive_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("crash.toml");
    std::fs::write(&config, "[server]\ntick_interval_ms = 10\n").unwrap();
    let data = dir.path().join("data");
    let mut server = ServerProcess::start(&data, &config);
    let ch = server.channel().await;
    let mut admin = AdminServiceClient::new(ch.clone());
    let ban = |p: &str| proto::BanPlayerRequest {
        player_id: p.into(),
        until_unix: 0,
        reason: format!("banned {p}"),
    };
    admin.ban_player(ban("b1")).await.unwrap();
    admin.ban_player(ban("b2")).await.unwrap();
    admin
        .unban_player(proto::UnbanPlayerRequest {
            player_id: "b2".into(),
        })
        .await
        .unwrap();
    let m = one_match_served(&ch, ["c1", "c2"]).await;
    let mut gs = GameServerServiceClient::new(ch.clone());
    gs.report_match_result(proto::MatchResult {
        match_id: m.match_id.clone(),
        placements: vec![1, 2],
        ..Default::default()
    })
    .await
    .unwrap();
    let (gone, kept) = (
        m.teams[0].player_ids[0].clone(),
        m.teams[1].player_ids[0].clone(),
    );
    admin
        .delete_player(proto::DeletePlayerRequest {
            player_id: gone.clone(),
        })
        .await
        .unwrap();
    // Banned, banned, unbanned, formed, allocated, completed, two rating changes, deleted.
    let seen = common::watch_events(&ch, 0, &[], 9).await;
    let audited = admin
        .list_audit_log(proto::ListAuditLogRequest::default())
        .await
        .unwrap()
        .into_inner()
        .entries;
    server.child.kill().unwrap();
    let _ = server.child.wait();

    server = ServerProcess::start(&data, &config);
    let ch = server.channel().await;
    let mut admin = AdminServiceClient::new(ch.clone());
    let mut client = ClientServiceClient::new(ch.clone());
    let refused = client
        .enter_queue(proto::EnterQueueRequest {
            queue: "1v1".into(),
            player_ids: vec!["b1".into()],
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::PermissionDenied);
    assert!(refused.message().contains("banned b1"), "{refused:?}");
    client
        .enter_queue(proto::EnterQueueRequest {
            queue: "1v1".into(),
            player_ids: vec!["b2".into()],
            ..Default::default()
        })
        .await
        .expect("the unban survived too");
    let after = admin
        .list_audit_log(proto::ListAuditLogRequest::default())
        .await
        .unwrap()
        .into_inner()
        .entries;
    assert_eq!(after[..audited.len()], audited[..]);
    let actions: Vec<&str> = audited.iter().map(|e| e.action.as_str()).collect();
    assert_eq!(
        actions,
        vec![
            "BanPlayer",
            "BanPlayer",
            "UnbanPlayer",
            "DeletePlayer",
            "WatchEvents"
        ]
    );
    // The same events under the same cursors, and resuming after the fourth gives the rest.
    let again = common::watch_events(&ch, 0, &[], seen.len()).await;
    assert_eq!(again, seen);
    let rest = common::watch_events(&ch, seen[3].cursor, &[], seen.len() - 4).await;
    assert_eq!(rest[..], seen[4..]);
    admin.ban_player(ban("b3")).await.unwrap();
    let next = common::watch_events(&ch, seen.last().unwrap().cursor, &[], 1).await;
    assert!(next[0].cursor > seen.last().unwrap().cursor);
    assert_eq!(next[0].player_id, "b3");
    // The erasure took the player's match history with it: their list is empty, and the
    // match the other player keeps names a marker in their place.
    let list = |player: &str| proto::ListPlayerMatchesRequest {
        player_id: player.into(),
        ..Default::default()
    };
    let mine = client.list_player_matches(list(&gone)).await.unwrap();
    assert!(mine.into_inner().matches.is_empty());
    let theirs = client.list_player_matches(list(&kept)).await.unwrap();
    let record = &theirs.into_inner().matches[0];
    assert_eq!(record.match_id, m.match_id);
    let named: Vec<&str> = record
        .teams
        .iter()
        .flat_map(|t| t.player_ids.iter().map(String::as_str))
        .chain(record.changes.iter().map(|c| c.player_id.as_str()))
        .collect();
    assert!(!named.contains(&gone.as_str()), "{named:?}");
    assert!(named.iter().any(|p| p.starts_with("erased:")), "{named:?}");
    assert!(named.contains(&kept.as_str()), "{named:?}");
}

//! Backfill of a running 5v5 over real gRPC: a player leaves, the game
//! server asks for a replacement, a waiting ticket fills the slot, the server's stream receives
//! the addition, and the result rates the newcomer like the rest and the leaver as an abandon.

mod common;

use common::{TestServer, enter, next, poll_until};
use matchmaker::proto::{self, TicketState};
use tonic::Code;

fn team_of(a: &proto::MatchAssignment, player: &str) -> usize {
    a.teams
        .iter()
        .position(|t| t.player_ids.iter().any(|p| p == player))
        .expect("player is on a team")
}

/// The 5v5 queue's statistics.
async fn stats_5v5(server: &TestServer) -> proto::QueueStat {
    server
        .admin()
        .await
        .get_queue_stats(proto::GetQueueStatsRequest {
            queue: "5v5".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .queues
        .remove(0)
}

#[tokio::test]
async fn a_leaver_is_replaced_from_the_queue_and_the_result_rates_both() {
    let server = TestServer::start("").await;
    let mut game_server = server.game_server().await;
    let mut matches = common::serve(&mut game_server, "gs-5v5:7777").await;
    let mut client = server.client().await;
    let players: Vec<String> = (0..10).map(|i| format!("p{i}")).collect();
    for p in &players {
        enter(&mut client, "5v5", &[p]).await;
    }
    let first = next(&mut matches).await;
    assert_eq!(first.teams.len(), 2);
    assert!(first.backfill.is_empty(), "a new match has no backfill");
    let leaver = first.teams[0].player_ids[0].clone();
    let stayer = first.teams[0].player_ids[1].clone();

    // Bad requests first: nothing changes.
    let err = game_server
        .request_backfill(proto::BackfillRequest {
            match_id: first.match_id.clone(),
            open_slots: vec![
                proto::Team { player_ids: vec![] },
                proto::Team {
                    player_ids: vec![leaver.clone()],
                },
            ],
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    // The element itself: team 0's player named as a leaver of team 1.
    assert!(
        err.message().starts_with("open_slots[1].player_ids[0]:"),
        "{}",
        err.message()
    );
    let err = game_server
        .request_backfill(proto::BackfillRequest {
            match_id: first.match_id.clone(),
            open_slots: vec![proto::Team {
                player_ids: vec![leaver.clone()],
            }],
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().contains("open_slots"), "{}", err.message());

    let backfill_id = game_server
        .request_backfill(proto::BackfillRequest {
            match_id: first.match_id.clone(),
            open_slots: vec![
                proto::Team {
                    player_ids: vec![leaver.clone()],
                },
                proto::Team::default(),
            ],
        })
        .await
        .expect("backfill accepted")
        .into_inner()
        .backfill_id;
    assert!(!backfill_id.is_empty());
    // The leaver is still bound to the match (rated as an abandon with it), so cannot queue.
    let err = client
        .enter_queue(proto::EnterQueueRequest {
            queue: "5v5".into(),
            player_ids: vec![leaver.clone()],
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition);

    let late = enter(&mut client, "5v5", &["late"]).await;
    let update = next(&mut matches).await;
    assert_eq!(update.match_id, first.match_id);
    assert_eq!(update.backfill[0].player_ids, ["late"]);
    assert!(update.backfill[1].player_ids.is_empty());
    assert_eq!(update.left_player_ids, std::slice::from_ref(&leaver));
    assert_eq!(team_of(&update, "late"), 0);
    assert!(!update.teams[0].player_ids.contains(&leaver));
    assert_eq!(update.teams[0].player_ids.len(), 5);
    assert_eq!(update.teams[1].player_ids.len(), 5);
    let seen = common::watch_to_end(&mut client, &late).await;
    let last = seen.last().unwrap();
    assert_eq!(last.state, TicketState::Matched as i32);
    let a = last.assignment.as_ref().unwrap();
    assert_eq!(a.match_id, first.match_id);
    assert_eq!(a.server_address, "gs-5v5:7777");

    let stats = stats_5v5(&server).await;
    assert_eq!(stats.backfill_requests, 1);
    assert_eq!(stats.backfill_slots_opened, 1);
    assert_eq!(stats.backfill_slots_filled, 1);
    assert!(stats.backfill_fill_p50_seconds >= 0.0);

    // Team 0 wins: the newcomer and the stayer gain, the leaver is rated as an abandon (loses).
    let ack = game_server
        .report_match_result(proto::MatchResult {
            match_id: first.match_id.clone(),
            placements: vec![1, 2],
            ..Default::default()
        })
        .await
        .expect("result")
        .into_inner();
    let change = |p: &str| {
        let c = ack
            .changes
            .iter()
            .find(|c| c.player_id == p)
            .unwrap_or_else(|| panic!("{p} is rated"));
        c.after.as_ref().unwrap().mean - c.before.as_ref().unwrap().mean
    };
    assert_eq!(
        ack.changes.len(),
        11,
        "ten who played to the end plus the leaver"
    );
    assert!(change("late") > 0.0);
    assert!(change(&stayer) > 0.0);
    assert!(change(&leaver) < 0.0, "the leaver is an abandon");
    // Everyone is free again, the leaver included.
    for p in ["late", leaver.as_str()] {
        let view = common::player(&server, p, "5v5").await;
        assert_eq!(view.status, "idle", "{p}");
    }
}

#[tokio::test]
async fn backfill_needs_a_running_team_match() {
    let server = TestServer::start("").await;
    let mut client = server.client().await;
    let mut game_server = server.game_server().await;
    // Formed but no server took it: not running.
    let a = common::form_match(&mut client, "1v1", &[&["b-a"], &["b-b"]]).await;
    let err = game_server
        .request_backfill(proto::BackfillRequest {
            match_id: a.match_id.clone(),
            open_slots: vec![
                proto::Team {
                    player_ids: vec!["b-a".into()],
                },
                proto::Team::default(),
            ],
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition, "{}", err.message());
    assert!(err.message().contains("teams of one"), "{}", err.message());

    let tickets: Vec<Vec<String>> = (0..10).map(|i| vec![format!("n{i}")]).collect();
    let refs: Vec<Vec<&str>> = tickets
        .iter()
        .map(|t| t.iter().map(String::as_str).collect())
        .collect();
    let slices: Vec<&[&str]> = refs.iter().map(Vec::as_slice).collect();
    let m = common::form_match(&mut client, "5v5", &slices).await;
    let err = game_server
        .request_backfill(proto::BackfillRequest {
            match_id: m.match_id.clone(),
            open_slots: vec![
                proto::Team {
                    player_ids: vec![m.teams[0].player_ids[0].clone()],
                },
                proto::Team::default(),
            ],
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition, "{}", err.message());
    assert!(err.message().contains("not running"), "{}", err.message());
}

/// A match that ended is not running: backfilling it is FAILED_PRECONDITION naming how it
/// ended, as StartMatch answers; only an id the server never formed is NOT_FOUND.
#[tokio::test]
async fn backfilling_an_ended_match_names_how_it_ended() {
    let server = TestServer::start("").await;
    let mut client = server.client().await;
    let mut game_server = server.game_server().await;
    let mut offers = common::serve(&mut game_server, "gs-ended:1").await;
    enter(&mut client, "1v1", &["e-a"]).await;
    enter(&mut client, "1v1", &["e-b"]).await;
    let completed = next(&mut offers).await;
    common::report_winner(&server, &completed, "e-a").await;
    enter(&mut client, "1v1", &["e-c"]).await;
    enter(&mut client, "1v1", &["e-d"]).await;
    let cancelled = next(&mut offers).await;
    game_server
        .cancel_match(proto::CancelMatchRequest {
            match_id: cancelled.match_id.clone(),
            reason: "the map did not load".into(),
        })
        .await
        .unwrap();

    let backfill = |m: &proto::MatchAssignment| proto::BackfillRequest {
        match_id: m.match_id.clone(),
        open_slots: vec![
            proto::Team {
                player_ids: vec![m.teams[0].player_ids[0].clone()],
            },
            proto::Team::default(),
        ],
    };
    for (m, end) in [(&completed, "completed"), (&cancelled, "cancelled")] {
        let err = game_server.request_backfill(backfill(m)).await.unwrap_err();
        assert_eq!(err.code(), Code::FailedPrecondition, "{end}: {err:?}");
        assert!(err.message().contains(end), "{end}: {err:?}");
    }
    let mut unknown = backfill(&completed);
    unknown.match_id = "m-never-formed".into();
    let err = game_server.request_backfill(unknown).await.unwrap_err();
    assert_eq!(err.code(), Code::NotFound, "{err:?}");
}

/// The leavers and newcomers of a running match are stored with it: after a restart the
/// result still rates the newcomer and counts the leaver as an abandon.
#[tokio::test]
async fn a_backfilled_match_keeps_its_roster_across_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = TestServer::start_in(dir.path(), "").await;
    let mut game_server = server.game_server().await;
    let mut matches = common::serve(&mut game_server, "gs-r:1").await;
    let mut client = server.client().await;
    for i in 0..10 {
        enter(&mut client, "5v5", &[&format!("r{i}")]).await;
    }
    let first = next(&mut matches).await;
    let leaver = first.teams[1].player_ids[2].clone();
    game_server
        .request_backfill(proto::BackfillRequest {
            match_id: first.match_id.clone(),
            open_slots: vec![
                proto::Team::default(),
                proto::Team {
                    player_ids: vec![leaver.clone()],
                },
            ],
        })
        .await
        .expect("backfill accepted");
    enter(&mut client, "5v5", &["r-late"]).await;
    let update = next(&mut matches).await;
    assert_eq!(update.backfill[1].player_ids, ["r-late"]);
    drop((client, game_server, matches));
    server.stop().await.expect("clean stop");

    let server = TestServer::start_in(dir.path(), "").await;
    let mut game_server = server.game_server().await;
    let ack = game_server
        .report_match_result(proto::MatchResult {
            match_id: first.match_id.clone(),
            placements: vec![2, 1],
            ..Default::default()
        })
        .await
        .expect("the restored match takes its result")
        .into_inner();
    assert_eq!(ack.changes.len(), 11);
    let delta = |p: &str| {
        let c = ack.changes.iter().find(|c| c.player_id == p).unwrap();
        c.after.as_ref().unwrap().mean - c.before.as_ref().unwrap().mean
    };
    assert!(delta("r-late") > 0.0, "the newcomer won with team 1");
    assert!(delta(&leaver) < 0.0, "the leaver is still an abandon");
}

/// Declared roles are stored with the match: after a restart a backfill still keeps the team's
/// role minimums (rather than counting everyone as "any role").
#[tokio::test]
async fn a_restarted_match_keeps_its_roles_for_backfill() {
    let config = "[server]\ntick_interval_ms = 10\n[queues.2v2.matching]\n\
                  roles = [{ name = \"healer\", min_per_team = 1 }, { name = \"dps\", min_per_team = 1 }]\n";
    let dir = tempfile::tempdir().unwrap();
    async fn enter_as(
        client: &mut proto::client_service_client::ClientServiceClient<tonic::transport::Channel>,
        player: &str,
        role: &str,
    ) -> String {
        client
            .enter_queue(proto::EnterQueueRequest {
                queue: "2v2".into(),
                player_ids: vec![player.into()],
                roles: vec![role.into()],
                ..Default::default()
            })
            .await
            .unwrap_or_else(|e| panic!("{player} cannot queue: {e}"))
            .into_inner()
            .ticket_id
    }
    let first = {
        let mut server = TestServer::start_in(dir.path(), config).await;
        let mut game_server = server.game_server().await;
        let mut matches = common::serve(&mut game_server, "gs-roles:1").await;
        let mut client = server.client().await;
        for (p, role) in [
            ("h1", "healer"),
            ("h2", "healer"),
            ("d1", "dps"),
            ("d2", "dps"),
        ] {
            enter_as(&mut client, p, role).await;
        }
        let first = next(&mut matches).await;
        drop((client, game_server, matches));
        server.stop().await.expect("clean stop");
        first
    };

    let server = TestServer::start_in(dir.path(), config).await;
    let mut game_server = server.game_server().await;
    let mut matches = common::serve(&mut game_server, "gs-roles:1").await;
    // Not started before the restart: the match comes to its server again first.
    assert_eq!(next(&mut matches).await.match_id, first.match_id);
    let mut client = server.client().await;
    // The healer of team 1 leaves: only another healer may take the slot.
    let team = team_of(&first, "h1");
    let mut open_slots = vec![proto::Team::default(), proto::Team::default()];
    open_slots[team].player_ids = vec!["h1".into()];
    game_server
        .request_backfill(proto::BackfillRequest {
            match_id: first.match_id.clone(),
            open_slots,
        })
        .await
        .expect("backfill accepted");
    let d3_ticket = enter_as(&mut client, "d3", "dps").await;
    // Only a tick tells a watched ticket its skill window, and it does so after that tick's
    // backfill pass, which had d3 waiting and the slot open: once d3's stream shows a window,
    // a backfill pass saw both. Had the roles been forgotten, d3 would be in the match.
    let mut d3_updates = common::watch(&mut client, &d3_ticket).await;
    loop {
        let update = next(&mut d3_updates).await;
        assert_eq!(update.state, TicketState::Searching as i32, "{update:?}");
        if update.window_high > 0.0 {
            break;
        }
    }
    let stat = server
        .admin()
        .await
        .get_queue_stats(proto::GetQueueStatsRequest {
            queue: "2v2".into(),
        })
        .await
        .expect("get_queue_stats")
        .into_inner()
        .queues
        .remove(0);
    assert_eq!(
        (stat.tickets_waiting, stat.backfill_slots_filled),
        (1, 0),
        "a dps player must not fill the healer's slot"
    );
    let d3 = client
        .get_player(proto::GetPlayerRequest {
            player_id: "d3".into(),
            queue: "2v2".into(),
        })
        .await
        .expect("get_player")
        .into_inner();
    assert_eq!(d3.status, "queued", "{d3:?}");
    enter_as(&mut client, "h3", "healer").await;
    let update = next(&mut matches).await;
    assert_eq!(update.backfill[team].player_ids, ["h3"]);
}

/// A request whose slots stayed open past the queue's backfill timeout is dropped; the server
/// asks again by naming the same leavers, and only the slots still empty open again.
#[tokio::test]
async fn slots_left_empty_by_a_timed_out_request_can_be_asked_for_again() {
    // Requests expire by the matchmaker's clock, which the test moves: the reopened slot
    // stays open however long a loaded machine takes over the calls that fill it.
    let server = TestServer::start("[queues.5v5.backfill]\ntimeout_seconds = 60.0\n").await;
    let mut game_server = server.game_server().await;
    let mut matches = common::serve(&mut game_server, "gs-5v5:7777").await;
    let mut client = server.client().await;
    for i in 0..10 {
        enter(&mut client, "5v5", &[&format!("t{i}")]).await;
    }
    let first = next(&mut matches).await;
    let team: Vec<String> = first.teams[0].player_ids.clone();
    let ask = |leavers: Vec<String>| proto::BackfillRequest {
        match_id: first.match_id.clone(),
        open_slots: vec![
            proto::Team {
                player_ids: leavers,
            },
            proto::Team::default(),
        ],
    };
    game_server
        .request_backfill(ask(vec![team[0].clone(), team[1].clone()]))
        .await
        .expect("first request");
    // Nobody waits: the request times out with both slots open.
    server.clock.advance(61.0);
    poll_until("the request expires", || async {
        let expired = stats_5v5(&server).await.backfill_requests_expired;
        if expired == 1 { Ok(()) } else { Err(expired) }
    })
    .await;

    // Asking again for one of them opens one slot: one newcomer of two joins.
    game_server
        .request_backfill(ask(vec![team[0].clone()]))
        .await
        .expect("a leaver named again reopens the slot");
    // The same request sent twice (a retry) opens nothing more.
    game_server
        .request_backfill(ask(vec![team[0].clone()]))
        .await
        .expect("a retry is accepted");
    enter(&mut client, "5v5", &["again-1"]).await;
    enter(&mut client, "5v5", &["again-2"]).await;
    let update = next(&mut matches).await;
    assert_eq!(update.match_id, first.match_id);
    assert_eq!(update.backfill[0].player_ids.len(), 1, "{update:?}");
    assert_eq!(update.teams[0].player_ids.len(), 4);
    let stats = stats_5v5(&server).await;
    assert_eq!(stats.backfill_slots_opened, 3, "2 + 1 + 0");
    assert_eq!(stats.backfill_slots_filled, 1);

    // Now one slot is empty: naming both leavers asks for more than there is.
    let err = game_server
        .request_backfill(ask(vec![team[0].clone(), team[1].clone()]))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{}", err.message());
    assert!(
        err.message().contains("open_slots[0].player_ids") && err.message().contains("filled"),
        "{}",
        err.message()
    );
    // Naming one of them fills the last slot with the one still waiting.
    game_server
        .request_backfill(ask(vec![team[1].clone()]))
        .await
        .expect("the last empty slot");
    let update = next(&mut matches).await;
    assert_eq!(update.backfill[0].player_ids.len(), 1, "{update:?}");
    assert_eq!(update.teams[0].player_ids.len(), 5);
}

/// OK from `RequestBackfill` means its leavers are durable: the server is killed (`kill -9`)
/// the moment the answer arrives, well inside the embedded store's background flush, and after
/// the restart the match still has the leaver, who is rated as an abandon, and the request is
/// still open: a newcomer fills the slot without the server asking again.
#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acknowledged_leaver_survives_kill_9_right_after_the_answer() {
    use matchmaker::proto::client_service_client::ClientServiceClient;
    use matchmaker::proto::game_server_service_client::GameServerServiceClient;

    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("fast.toml");
    std::fs::write(&config, "[server]\ntick_interval_ms = 10\n").unwrap();
    let data = dir.path().join("data");
    let mut server = common::ServerProcess::start(&data, &config);
    let ch = server.channel().await;
    let mut game_server = GameServerServiceClient::new(ch.clone());
    let mut matches = common::serve(&mut game_server, "gs-k:1").await;
    let mut client = ClientServiceClient::new(ch);
    for p in ["k0", "k1", "k2", "k3"] {
        enter(&mut client, "2v2", &[p]).await;
    }
    let m = next(&mut matches).await;
    let leaver = m.teams[0].player_ids[0].clone();
    let stayer = m.teams[0].player_ids[1].clone();
    game_server
        .request_backfill(proto::BackfillRequest {
            match_id: m.match_id.clone(),
            open_slots: vec![
                proto::Team {
                    player_ids: vec![leaver.clone()],
                },
                proto::Team::default(),
            ],
        })
        .await
        .expect("backfill accepted");
    server.child.kill().unwrap(); // SIGKILL the moment the answer arrives
    server.child.wait().unwrap();

    let server = common::ServerProcess::start(&data, &config);
    let mut game_server = GameServerServiceClient::new(server.channel().await);
    // The match had not started, so its server gets it again, with the leaver.
    let mut matches = common::serve(&mut game_server, "gs-k:1").await;
    let again = next(&mut matches).await;
    assert_eq!(again.match_id, m.match_id);
    assert_eq!(again.left_player_ids, std::slice::from_ref(&leaver));
    let mut client = ClientServiceClient::new(server.channel().await);
    enter(&mut client, "2v2", &["k-late"]).await;
    let update = next(&mut matches).await;
    assert_eq!(update.match_id, m.match_id);
    assert_eq!(update.backfill[0].player_ids, ["k-late"]);
    // Team 0 wins: the stayer gains, the leaver is rated as an abandon.
    let ack = game_server
        .report_match_result(proto::MatchResult {
            match_id: m.match_id.clone(),
            placements: vec![1, 2],
            ..Default::default()
        })
        .await
        .expect("the restored match takes its result")
        .into_inner();
    let delta = |p: &str| {
        let c = ack.changes.iter().find(|c| c.player_id == p).unwrap();
        c.after.as_ref().unwrap().mean - c.before.as_ref().unwrap().mean
    };
    assert!(delta(&stayer) > 0.0, "the stayer won with team 0");
    assert!(delta("k-late") > 0.0, "so did the newcomer");
    assert!(
        delta(&leaver) < 0.0,
        "the leaver is an abandon after the crash"
    );
}

//! The admin service's player and match records over real gRPC: bans (alone and in a party,
//! lifted, ending, cancelling a waiting ticket), the audit log and its pages, the erasure of a
//! player across a restart, the event stream resumed from a cursor across a restart, config
//! reloads that keep waiting tickets or are refused whole, and who may call them.

mod common;

use std::time::{SystemTime, UNIX_EPOCH};

use common::{TestServer, enter, form_match, next};
use matchmaker::config::{Config, Overrides};
use matchmaker::proto;
use tonic::{Code, Request};

fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

fn ban(player: &str, until_unix: i64, reason: &str) -> proto::BanPlayerRequest {
    proto::BanPlayerRequest {
        player_id: player.into(),
        until_unix,
        reason: reason.into(),
    }
}

fn enter_req(queue: &str, players: &[&str]) -> proto::EnterQueueRequest {
    proto::EnterQueueRequest {
        queue: queue.into(),
        player_ids: players.iter().map(|p| p.to_string()).collect(),
        ..Default::default()
    }
}

async fn audit(server: &TestServer) -> Vec<proto::AuditEntry> {
    server
        .admin()
        .await
        .list_audit_log(proto::ListAuditLogRequest {
            page_token: String::new(),
            limit: 1000,
        })
        .await
        .unwrap()
        .into_inner()
        .entries
}

/// Plays one 1v1 match between `a` and `b` and reports `winner` first.
async fn play(server: &TestServer, a: &str, b: &str, winner: &str) -> String {
    let mut client = server.client().await;
    let m = form_match(&mut client, "1v1", &[&[a], &[b]]).await;
    common::report_winner(server, &m, winner).await;
    m.match_id
}

#[tokio::test]
async fn a_banned_player_is_refused_alone_and_in_a_party_until_unbanned() {
    let server = TestServer::start("").await;
    let mut admin = server.admin().await;
    let mut client = server.client().await;
    let until = now() + 86_400;
    admin
        .ban_player(ban("cheater", until, "aimbot detected"))
        .await
        .unwrap();
    for (queue, players) in [("1v1", vec!["cheater"]), ("2v2", vec!["friend", "cheater"])] {
        let e = client
            .enter_queue(enter_req(queue, &players))
            .await
            .unwrap_err();
        assert_eq!(e.code(), Code::PermissionDenied, "{queue}: {e:?}");
        assert!(e.message().contains("aimbot detected"), "{e:?}");
        assert!(e.message().contains(&until.to_string()), "{e:?}");
        assert!(e.message().contains("player cheater"), "{e:?}");
    }
    // The friend alone is not banned.
    enter(&mut client, "1v1", &["friend"]).await;
    let lifted = admin
        .unban_player(proto::UnbanPlayerRequest {
            player_id: "cheater".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(lifted.was_banned);
    enter(&mut client, "2v2", &["cheater", "other"]).await;
    let again = admin
        .unban_player(proto::UnbanPlayerRequest {
            player_id: "cheater".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(!again.was_banned);

    // A ban for good says so; a ban that ends lets the player in once it ended.
    admin.ban_player(ban("forever", 0, "fraud")).await.unwrap();
    let e = client
        .enter_queue(enter_req("1v1", &["forever"]))
        .await
        .unwrap_err();
    assert!(e.message().contains("for good: fraud"), "{e:?}");
    // Long enough to be still in force at the next call however slow the machine is (whole
    // seconds: it may end a second sooner), short enough to end within the poll below.
    admin
        .ban_player(ban("brief", now() + 5, "cool down"))
        .await
        .unwrap();
    let e = client
        .enter_queue(enter_req("1v1", &["brief"]))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied);
    common::poll_until("the short ban ends", || {
        let mut client = client.clone();
        async move { client.enter_queue(enter_req("1v1", &["brief"])).await }
    })
    .await;
}

#[tokio::test]
async fn banning_a_waiting_player_cancels_the_ticket() {
    let server = TestServer::start("").await;
    let mut client = server.client().await;
    let ticket = enter(&mut client, "2v2", &["p1", "p2"]).await;
    let answer = server
        .admin()
        .await
        .ban_player(ban("p2", 0, "smurfing"))
        .await
        .unwrap()
        .into_inner();
    assert!(answer.ticket_cancelled);
    let updates = common::watch_to_end(&mut client, &ticket).await;
    assert_eq!(
        updates.last().map(|u| u.state),
        Some(proto::TicketState::Cancelled as i32)
    );
    // p1 is free to queue again without p2.
    enter(&mut client, "1v1", &["p1"]).await;
}

fn ban_of(player: &str) -> proto::GetPlayerBanRequest {
    proto::GetPlayerBanRequest {
        player_id: player.into(),
    }
}

#[tokio::test]
async fn get_player_ban_reads_the_stored_ban_across_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = TestServer::start_in(dir.path(), "").await;
    let mut admin = server.admin().await;
    let until = now() + 3600;
    admin
        .ban_player(ban("b1", until, "smurfing"))
        .await
        .unwrap();
    admin.ban_player(ban("b2", 0, "cheating")).await.unwrap();
    admin
        .unban_player(proto::UnbanPlayerRequest {
            player_id: "b2".into(),
        })
        .await
        .unwrap();
    // A bad id names the field.
    let e = admin.get_player_ban(ban_of("")).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.message().contains("player_id"), "{e:?}");
    server.stop().await.unwrap();

    let server = TestServer::start_in(dir.path(), "").await;
    let mut admin = server.admin().await;
    let b1 = admin
        .get_player_ban(ban_of("b1"))
        .await
        .unwrap()
        .into_inner()
        .ban
        .expect("b1's ban survived the restart");
    assert_eq!(
        (b1.until_unix, b1.reason.as_str(), b1.active),
        (until, "smurfing", true)
    );
    assert!(
        b1.since_unix > 0.0 && b1.since_unix <= now() as f64 + 1.0,
        "{b1:?}"
    );
    // Lifted, and never banned: no ban, and no error.
    for player in ["b2", "nobody"] {
        let answer = admin.get_player_ban(ban_of(player)).await.unwrap();
        assert_eq!(answer.into_inner().ban, None, "{player}");
    }
    // The reads are admin calls like any other: in the audit log, naming the player.
    let reads: Vec<String> = audit(&server)
        .await
        .into_iter()
        .filter(|e| e.action == "GetPlayerBan")
        .map(|e| e.detail)
        .collect();
    assert_eq!(reads.len(), 4, "{reads:?}");
    assert!(
        reads[0].starts_with("player_id=\"\": InvalidArgument"),
        "{reads:?}"
    );
    assert_eq!(
        reads[1..],
        [
            "player_id=\"b1\": OK",
            "player_id=\"b2\": OK",
            "player_id=\"nobody\": OK",
        ],
    );
}

#[tokio::test]
async fn bad_record_requests_name_the_field() {
    let server = TestServer::start("").await;
    let mut admin = server.admin().await;
    let check = |e: tonic::Status, field: &str| {
        assert_eq!(e.code(), Code::InvalidArgument, "{field}: {e:?}");
        assert!(e.message().contains(field), "{field}: {e:?}");
    };
    check(
        admin.ban_player(ban("", 0, "x")).await.unwrap_err(),
        "player_id",
    );
    check(
        admin.ban_player(ban("p", 0, " ")).await.unwrap_err(),
        "reason",
    );
    check(
        admin
            .ban_player(ban("p", now() - 10, "x"))
            .await
            .unwrap_err(),
        "until_unix",
    );
    check(
        admin
            .delete_player(proto::DeletePlayerRequest {
                player_id: String::new(),
            })
            .await
            .unwrap_err(),
        "player_id",
    );
    check(
        admin
            .unban_player(proto::UnbanPlayerRequest {
                player_id: "a\u{7}b".into(),
            })
            .await
            .unwrap_err(),
        "player_id",
    );
    check(
        admin
            .list_audit_log(proto::ListAuditLogRequest {
                page_token: "not-a-token".into(),
                limit: 0,
            })
            .await
            .unwrap_err(),
        "page_token",
    );
    check(
        admin
            .list_audit_log(proto::ListAuditLogRequest {
                page_token: String::new(),
                limit: 5000,
            })
            .await
            .unwrap_err(),
        "limit",
    );
    check(
        admin
            .watch_events(proto::WatchEventsRequest {
                after_cursor: 0,
                kinds: vec![0],
            })
            .await
            .unwrap_err(),
        "kinds[0]",
    );
    let e = admin
        .watch_events(proto::WatchEventsRequest {
            after_cursor: 1_000_000,
            kinds: Vec::new(),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::OutOfRange, "{e:?}");
    assert!(e.message().contains("after_cursor"), "{e:?}");
    // Nothing was banned by the refused calls.
    enter(&mut server.client().await, "1v1", &["p"]).await;
}

#[tokio::test]
async fn every_admin_call_is_audited_in_order_and_the_log_pages() {
    let server = TestServer::start("").await;
    let mut admin = server.admin().await;
    admin.ban_player(ban("p1", 0, "spam")).await.unwrap();
    admin.ban_player(ban("", 0, "spam")).await.unwrap_err();
    admin
        .get_queue_stats(proto::GetQueueStatsRequest::default())
        .await
        .unwrap();
    admin
        .unban_player(proto::UnbanPlayerRequest {
            player_id: "p1".into(),
        })
        .await
        .unwrap();
    let entries = audit(&server).await;
    let actions: Vec<&str> = entries.iter().map(|e| e.action.as_str()).collect();
    assert_eq!(
        actions,
        vec!["BanPlayer", "BanPlayer", "GetQueueStats", "UnbanPlayer"]
    );
    assert!(entries.iter().all(|e| e.actor == "anonymous"));
    assert!(
        entries[0].detail.contains("player_id=\"p1\"") && entries[0].detail.ends_with(": OK"),
        "{:?}",
        entries[0]
    );
    assert!(
        entries[1].detail.contains("InvalidArgument") && entries[1].detail.contains("player_id"),
        "{:?}",
        entries[1]
    );
    assert!(entries.windows(2).all(|w| w[0].unix <= w[1].unix));
    // Pages of two: the first ListAuditLog call itself was audited, so there are five now.
    let mut token = String::new();
    let mut paged = Vec::new();
    for _ in 0..10 {
        let page = admin
            .list_audit_log(proto::ListAuditLogRequest {
                page_token: token.clone(),
                limit: 2,
            })
            .await
            .unwrap()
            .into_inner();
        assert!(page.entries.len() <= 2);
        paged.extend(page.entries);
        if page.next_page_token.is_empty() {
            break;
        }
        token = page.next_page_token;
    }
    let paged: Vec<String> = paged.into_iter().map(|e| e.action).collect();
    let mut expected: Vec<String> = actions.iter().map(|a| a.to_string()).collect();
    expected.push("ListAuditLog".into());
    assert_eq!(paged[..5], expected[..]);
}

#[tokio::test]
async fn deleting_a_player_erases_ratings_and_leaderboard_across_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = TestServer::start_in(dir.path(), "").await;
    play(&server, "gone", "stays", "gone").await;
    let view = common::player(&server, "gone", "1v1").await;
    assert_eq!(view.games, 1);
    let answer = server
        .admin()
        .await
        .delete_player(proto::DeletePlayerRequest {
            player_id: "gone".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(answer.pools, vec!["1v1".to_string()]);
    assert!(!answer.ticket_cancelled);
    let check = |server: &TestServer| {
        let server_addr = server.addr;
        async move {
            let ch = tonic::transport::Channel::from_shared(format!("http://{server_addr}"))
                .unwrap()
                .connect()
                .await
                .unwrap();
            let mut client = proto::client_service_client::ClientServiceClient::new(ch);
            let gone = client
                .get_player(proto::GetPlayerRequest {
                    player_id: "gone".into(),
                    queue: "1v1".into(),
                })
                .await
                .unwrap()
                .into_inner();
            assert_eq!(gone.games, 0, "{gone:?}");
            let board = client
                .get_leaderboard(proto::GetLeaderboardRequest {
                    queue: "1v1".into(),
                    ..Default::default()
                })
                .await
                .unwrap()
                .into_inner();
            let ids: Vec<&str> = board.entries.iter().map(|e| e.player_id.as_str()).collect();
            assert_eq!(ids, vec!["stays"]);
            let stays = client
                .get_player(proto::GetPlayerRequest {
                    player_id: "stays".into(),
                    queue: "1v1".into(),
                })
                .await
                .unwrap()
                .into_inner();
            assert_eq!(stays.games, 1);
        }
    };
    check(&server).await;
    // No snapshot ran: the result is still in the journal, and a restart must not replay it.
    server.stop().await.unwrap();
    drop(server);
    let server = TestServer::start_in(dir.path(), "").await;
    check(&server).await;
    // The id starts again as a new player (against another new one: same rating, no wait).
    play(&server, "gone", "fresh", "fresh").await;
    assert_eq!(common::player(&server, "gone", "1v1").await.games, 1);
}

#[tokio::test]
async fn a_waiting_player_is_dequeued_and_a_playing_one_is_refused() {
    let server = TestServer::start("").await;
    let mut client = server.client().await;
    let mut admin = server.admin().await;
    let ticket = enter(&mut client, "2v2", &["w1", "w2"]).await;
    let answer = admin
        .delete_player(proto::DeletePlayerRequest {
            player_id: "w1".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(answer.ticket_cancelled);
    let updates = common::watch_to_end(&mut client, &ticket).await;
    assert_eq!(
        updates.last().map(|u| u.state),
        Some(proto::TicketState::Cancelled as i32)
    );
    let m = form_match(&mut client, "1v1", &[&["m1"], &["m2"]]).await;
    let e = admin
        .delete_player(proto::DeletePlayerRequest {
            player_id: "m1".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition, "{e:?}");
    assert!(e.message().contains(&m.match_id), "{e:?}");
}

#[tokio::test]
async fn events_cover_matches_ratings_and_admin_changes_and_resume_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = TestServer::start_in(dir.path(), "").await;
    let match_id = play(&server, "e1", "e2", "e1").await;
    server
        .admin()
        .await
        .ban_player(ban("e2", 0, "abuse"))
        .await
        .unwrap();
    // formed, completed, two rating changes, banned (no server took the match).
    let events = common::watch_events(&server.channel().await, 0, &[], 5).await;
    let kinds: Vec<i32> = events.iter().map(|e| e.kind).collect();
    use proto::EventKind as K;
    assert_eq!(
        kinds,
        vec![
            K::MatchFormed as i32,
            K::MatchCompleted as i32,
            K::RatingChanged as i32,
            K::RatingChanged as i32,
            K::PlayerBanned as i32,
        ]
    );
    assert!(events.windows(2).all(|w| w[0].cursor < w[1].cursor));
    assert!(events[..4].iter().all(|e| e.match_id == match_id));
    let mut rated: Vec<&str> = events[2..4].iter().map(|e| e.player_id.as_str()).collect();
    rated.sort_unstable();
    assert_eq!(rated, vec!["e1", "e2"]);
    let detail: serde_json::Value = serde_json::from_str(&events[4].detail_json).unwrap();
    assert_eq!(detail["reason"], "abuse");
    // A filter keeps only the asked kinds.
    let bans = common::watch_events(&server.channel().await, 0, &[K::PlayerBanned], 1).await;
    assert_eq!(bans[0].cursor, events[4].cursor);

    server.stop().await.unwrap();
    drop(server);
    let server = TestServer::start_in(dir.path(), "").await;
    // Resuming after the second event gives exactly the rest, then what happens next.
    let mut stream = server
        .admin()
        .await
        .watch_events(proto::WatchEventsRequest {
            after_cursor: events[1].cursor,
            kinds: Vec::new(),
        })
        .await
        .unwrap()
        .into_inner();
    for e in &events[2..] {
        assert_eq!(next(&mut stream).await.cursor, e.cursor);
    }
    server
        .admin()
        .await
        .delete_player(proto::DeletePlayerRequest {
            player_id: "e1".into(),
        })
        .await
        .unwrap();
    let deleted = next(&mut stream).await;
    assert_eq!(deleted.kind, K::PlayerDeleted as i32);
    assert_eq!(deleted.player_id, "e1");
    assert!(deleted.cursor > events[4].cursor);
}

/// The first MATCHED update on a `WatchTicket` stream.
async fn first_matched(watch: &mut tonic::Streaming<proto::TicketUpdate>) -> proto::TicketUpdate {
    loop {
        let u = next(watch).await;
        if u.state == proto::TicketState::Matched as i32 {
            return u;
        }
    }
}

const RELOADABLE: &str = "[queues.1v1.matching]\nwindow = 50.0\n";

#[tokio::test]
async fn a_reload_changes_queue_settings_keeps_tickets_and_refuses_bad_files_whole() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("matchmaker.toml");
    std::fs::write(&file, RELOADABLE).unwrap();
    let config = Config::load(Some(&file), &Overrides::default()).unwrap();
    let server = TestServer::start_with(&dir.path().join("data"), config).await;
    let mut admin = server.admin().await;
    let mut client = server.client().await;
    let ticket = enter(&mut client, "1v1", &["waiting"]).await;
    let reload = |admin: &mut proto::admin_service_client::AdminServiceClient<_>| {
        let mut admin = admin.clone();
        async move { admin.reload_config(proto::ReloadConfigRequest {}).await }
    };
    let unchanged = reload(&mut admin).await.unwrap().into_inner();
    assert!(unchanged.changed_queues.is_empty());

    std::fs::write(
        &file,
        "[queues.1v1.matching]\nwindow = 80.0\n[queues.2v2]\nready_check_seconds = 12.0\n",
    )
    .unwrap();
    let changed = reload(&mut admin).await.unwrap().into_inner();
    assert_eq!(changed.changed_queues, vec!["1v1", "2v2"]);
    // The new ready-check applies to 2v2's next match (it had none).
    let mut firsts = Vec::new();
    for p in ["r1", "r2", "r3", "r4"] {
        firsts.push(enter(&mut client, "2v2", &[p]).await);
    }
    let mut watch = client
        .watch_ticket(proto::WatchTicketRequest {
            ticket_id: firsts[0].clone(),
        })
        .await
        .unwrap()
        .into_inner();
    let matched = first_matched(&mut watch).await;
    let ready = matched.ready_check.expect("a ready-check after the reload");
    assert!(
        ready.seconds_left > 0.0 && ready.seconds_left <= 12.0,
        "{ready:?}"
    );
    // Declining it dissolves the match, and the event stream says so.
    let match_id = matched.assignment.unwrap().match_id;
    client
        .accept_match(proto::AcceptMatchRequest {
            ticket_id: firsts[0].clone(),
            match_id: match_id.clone(),
            accept: false,
        })
        .await
        .unwrap();
    let cancelled = common::watch_events(
        &server.channel().await,
        0,
        &[proto::EventKind::MatchCancelled],
        1,
    )
    .await;
    assert_eq!(cancelled[0].match_id, match_id);
    assert!(
        cancelled[0].detail_json.contains("ready-check failed"),
        "{:?}",
        cancelled[0]
    );

    for (body, says) in [
        (
            "[queues.1v1.matching]\nwindow = -1.0\n",
            "queues.1v1.matching.window",
        ),
        (
            "[queues.duo]\nteams = 2\nteam_size = 1\nmax_party_size = 1\nranking = \"none\"\n",
            "added: [duo]",
        ),
        (
            "[queues.1v1.rating]\nsystem = \"elo\"\n",
            "queues.1v1.rating",
        ),
        ("not toml at all [", "config"),
    ] {
        std::fs::write(&file, body).unwrap();
        let e = reload(&mut admin).await.unwrap_err();
        assert_eq!(e.code(), Code::FailedPrecondition, "{body}: {e:?}");
        assert!(e.message().contains(says), "{body}: {e:?}");
    }
    // The ticket waited through all of it, and the accepted change is what runs: going back to
    // the first file changes both queues again.
    let view = client
        .watch_ticket(proto::WatchTicketRequest {
            ticket_id: ticket.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    let mut view = view;
    assert_eq!(
        next(&mut view).await.state,
        proto::TicketState::Searching as i32
    );
    let stats = admin
        .get_queue_stats(proto::GetQueueStatsRequest {
            queue: "1v1".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(stats.queues[0].tickets_waiting, 1);
    std::fs::write(&file, RELOADABLE).unwrap();
    let back = reload(&mut admin).await.unwrap().into_inner();
    assert_eq!(back.changed_queues, vec!["1v1", "2v2"]);
    let actions: Vec<String> = audit(&server).await.into_iter().map(|e| e.action).collect();
    assert_eq!(actions.iter().filter(|a| *a == "ReloadConfig").count(), 7);
}

#[tokio::test]
async fn a_ticket_that_no_longer_fits_its_reloaded_queue_when_its_match_breaks_up_ends() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("matchmaker.toml");
    std::fs::write(&file, "[queues.2v2]\nready_check_seconds = 30.0\n").unwrap();
    let config = Config::load(Some(&file), &Overrides::default()).unwrap();
    let server = TestServer::start_with(&dir.path().join("data"), config).await;
    let mut client = server.client().await;
    let duo = enter(&mut client, "2v2", &["duo-a", "duo-b"]).await;
    let solo = enter(&mut client, "2v2", &["solo-a"]).await;
    enter(&mut client, "2v2", &["solo-b"]).await;
    let mut watch = client
        .watch_ticket(proto::WatchTicketRequest {
            ticket_id: duo.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    let matched = first_matched(&mut watch).await;
    // While the match waits for its ready-check, parties of two leave the queue's settings.
    std::fs::write(
        &file,
        "[queues.2v2]\nready_check_seconds = 30.0\nmax_party_size = 1\n",
    )
    .unwrap();
    server
        .admin()
        .await
        .reload_config(proto::ReloadConfigRequest {})
        .await
        .expect("no waiting ticket is a party");
    // A solo declines: the duo goes back to a queue it no longer fits, and ends.
    client
        .accept_match(proto::AcceptMatchRequest {
            ticket_id: solo,
            match_id: matched.assignment.unwrap().match_id,
            accept: false,
        })
        .await
        .unwrap();
    let last = loop {
        let u = next(&mut watch).await;
        if u.state != proto::TicketState::Searching as i32 {
            break u;
        }
    };
    assert_eq!(last.state, proto::TicketState::Cancelled as i32, "{last:?}");
    assert!(last.reason.contains("no longer fits"), "{last:?}");
    // Its players are free: each may queue alone.
    enter(&mut client, "2v2", &["duo-a"]).await;
}

#[tokio::test]
async fn a_server_started_without_a_file_has_nothing_to_reload() {
    let server = TestServer::start("").await;
    let e = server
        .admin()
        .await
        .reload_config(proto::ReloadConfigRequest {})
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition);
    assert!(e.message().contains("--config"), "{e:?}");
}

const SECRET: &str = "test-secret-0123456789abcdef0123";
const AUTH_ON: &str = "[auth]\nenabled = true\njwt_secret = \"test-secret-0123456789abcdef0123\"\n";

fn token(sub: &str, role: &str) -> String {
    let claims = serde_json::json!({ "sub": sub, "role": role, "exp": now() + 3600 });
    jsonwebtoken::encode(
        &jsonwebtoken::Header::default(),
        &claims,
        &jsonwebtoken::EncodingKey::from_secret(SECRET.as_bytes()),
    )
    .unwrap()
}

fn with<T>(msg: T, token: &str) -> Request<T> {
    let mut r = Request::new(msg);
    r.metadata_mut()
        .insert("authorization", format!("Bearer {token}").parse().unwrap());
    r
}

#[tokio::test]
async fn only_admins_may_call_the_record_calls_and_the_audit_names_them() {
    let server = TestServer::start(AUTH_ON).await;
    let mut admin = server.admin().await;
    for role in ["player", "server"] {
        let t = token("mallory", role);
        let refused = [
            admin
                .ban_player(with(ban("p1", 0, "x"), &t))
                .await
                .map(|_| ()),
            admin
                .unban_player(with(
                    proto::UnbanPlayerRequest {
                        player_id: "p1".into(),
                    },
                    &t,
                ))
                .await
                .map(|_| ()),
            admin
                .delete_player(with(
                    proto::DeletePlayerRequest {
                        player_id: "p1".into(),
                    },
                    &t,
                ))
                .await
                .map(|_| ()),
            admin
                .list_audit_log(with(proto::ListAuditLogRequest::default(), &t))
                .await
                .map(|_| ()),
            admin
                .get_player_ban(with(
                    proto::GetPlayerBanRequest {
                        player_id: "p1".into(),
                    },
                    &t,
                ))
                .await
                .map(|_| ()),
            admin
                .watch_events(with(proto::WatchEventsRequest::default(), &t))
                .await
                .map(|_| ()),
            admin
                .reload_config(with(proto::ReloadConfigRequest {}, &t))
                .await
                .map(|_| ()),
        ];
        for (i, r) in refused.into_iter().enumerate() {
            let e = r.unwrap_err();
            assert_eq!(e.code(), Code::PermissionDenied, "{role} call {i}: {e:?}");
        }
    }
    let root = token("root-ops", "admin");
    admin
        .ban_player(with(ban("p1", 0, "x"), &root))
        .await
        .unwrap();
    let entries = admin
        .list_audit_log(with(proto::ListAuditLogRequest::default(), &root))
        .await
        .unwrap()
        .into_inner()
        .entries;
    // Refused callers never reached the service: only the admin's call is there.
    assert_eq!(entries.len(), 1, "{entries:?}");
    assert_eq!(entries[0].actor, "root-ops");
    assert_eq!(entries[0].action, "BanPlayer");
    // And the ban holds for the player's own token.
    let e = server
        .client()
        .await
        .enter_queue(with(enter_req("1v1", &["p1"]), &token("p1", "player")))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied);
}

async fn cli(server: &TestServer, args: &[&str]) -> (bool, String, String) {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_matchmaker"))
        .arg("admin")
        .args(args)
        .args(["--addr", &format!("http://{}", server.addr), "--json"])
        .output()
        .await
        .expect("run matchmaker admin");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn json(stdout: &str) -> serde_json::Value {
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}"))
}

#[tokio::test]
async fn the_admin_cli_runs_every_record_command_with_json() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("matchmaker.toml");
    std::fs::write(&file, RELOADABLE).unwrap();
    let config = Config::load(Some(&file), &Overrides::default()).unwrap();
    let server = TestServer::start_with(&dir.path().join("data"), config).await;
    play(&server, "c1", "c2", "c1").await;

    let (ok, out, err) = cli(&server, &["ban", "--player", "c2", "--reason", "griefing"]).await;
    assert!(ok, "{err}");
    assert_eq!(
        json(&out),
        serde_json::json!({"player_id": "c2", "until_unix": 0, "ticket_cancelled": false})
    );
    let (ok, out, _) = cli(&server, &["unban", "--player", "c2"]).await;
    assert!(ok);
    assert_eq!(json(&out)["was_banned"], true);
    let (ok, out, err) = cli(&server, &["delete-player", "--player", "c1"]).await;
    assert!(ok, "{err}");
    assert_eq!(json(&out)["pools"], serde_json::json!(["1v1"]));
    let (ok, out, _) = cli(&server, &["reload-config"]).await;
    assert!(ok);
    assert_eq!(json(&out), serde_json::json!({"changed_queues": []}));

    let (ok, out, _) = cli(&server, &["audit-log", "--limit", "2"]).await;
    assert!(ok);
    let page = json(&out);
    let actions: Vec<&str> = page["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["action"].as_str().unwrap())
        .collect();
    assert_eq!(actions, vec!["BanPlayer", "UnbanPlayer"]);
    let token = page["next_page_token"].as_str().unwrap().to_string();
    let (ok, out, _) = cli(&server, &["audit-log", "--page-token", &token]).await;
    assert!(ok);
    let rest: Vec<String> = json(&out)["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["action"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(rest, vec!["DeletePlayer", "ReloadConfig", "ListAuditLog"]);

    // One JSON object per event line; the kind filter and the count both apply.
    let (ok, out, err) = cli(
        &server,
        &[
            "events",
            "--kind",
            "player-banned",
            "--kind",
            "player-deleted",
            "--count",
            "2",
        ],
    )
    .await;
    assert!(ok, "{err}");
    let lines: Vec<serde_json::Value> = out.lines().map(json).collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[0]["kind"], "PLAYER_BANNED");
    assert_eq!(lines[0]["detail"]["reason"], "griefing");
    assert_eq!(lines[1]["kind"], "PLAYER_DELETED");
    assert_eq!(lines[1]["player_id"], "c1");

    // A refusal exits non-zero with the server's message.
    let (ok, _, err) = cli(&server, &["ban", "--player", "c2", "--reason", " "]).await;
    assert!(!ok);
    assert!(err.contains("reason"), "{err}");

    // A player's stored ban, and none for a player without one.
    let until = (now() + 3600).to_string();
    let (ok, _, err) = cli(
        &server,
        &[
            "ban", "--player", "c2", "--until", &until, "--reason", "spam",
        ],
    )
    .await;
    assert!(ok, "{err}");
    let (ok, out, err) = cli(&server, &["player-ban", "--player", "c2"]).await;
    assert!(ok, "{err}");
    let shown = json(&out);
    assert_eq!(shown["player_id"], "c2");
    assert_eq!(shown["ban"]["until_unix"], until.parse::<i64>().unwrap());
    assert_eq!(shown["ban"]["reason"], "spam");
    assert_eq!(shown["ban"]["active"], true);
    assert!(
        shown["ban"]["since_unix"].as_f64().unwrap() > 0.0,
        "{shown}"
    );
    let (ok, out, _) = cli(&server, &["player-ban", "--player", "c3"]).await;
    assert!(ok);
    assert_eq!(
        json(&out),
        serde_json::json!({"player_id": "c3", "ban": null})
    );
    // A match waiting for its result is live; the one played is not.
    let live = common::form_match(&mut server.client().await, "1v1", &[&["c5"], &["c6"]]).await;
    let (ok, out, err) = cli(&server, &["live-matches", "--queue", "1v1"]).await;
    assert!(ok, "{err}");
    let listed = json(&out);
    assert_eq!(listed["total"], 1, "{listed}");
    assert_eq!(listed["matches"][0]["match_id"], live.match_id.as_str());
    assert_eq!(listed["matches"][0]["phase"], "formed");
    let (ok, _, err) = cli(&server, &["live-matches", "--limit", "5000"]).await;
    assert!(!ok && err.contains("limit"), "{err}");
    // The match played is the one recent result, with the erased player's marker in it.
    let (ok, out, err) = cli(&server, &["recent-results", "--queue", "1v1"]).await;
    assert!(ok, "{err}");
    let listed = json(&out);
    let matches = listed["matches"].as_array().unwrap();
    assert_eq!(matches.len(), 1, "{listed}");
    let players: Vec<&str> = matches[0]["teams"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|t| t.as_array().unwrap().iter().map(|p| p.as_str().unwrap()))
        .collect();
    assert!(
        players.contains(&"c2") && !players.contains(&"c1"),
        "{listed}"
    );
    assert_eq!(
        matches[0]["changes"].as_array().unwrap().len(),
        2,
        "{listed}"
    );
    assert!(matches[0]["ended_unix"].as_i64().unwrap() > 0, "{listed}");
    let (ok, _, err) = cli(&server, &["recent-results", "--limit", "5000"]).await;
    assert!(!ok && err.contains("limit"), "{err}");
}

/// An erased player leaves their `PartyService` party: the lead passes to the other member,
/// and the party goes on without them.
#[tokio::test]
async fn deleting_a_player_takes_them_out_of_their_party() {
    use matchmaker::proto::party_service_client::PartyServiceClient;
    let server = TestServer::start("").await;
    let mut parties = PartyServiceClient::new(server.channel().await);
    let party = parties
        .create_party(proto::CreatePartyRequest {
            player_id: "dp-lead".into(),
        })
        .await
        .unwrap()
        .into_inner();
    parties
        .join_party(proto::JoinPartyRequest {
            invite_code: party.invite_code.clone(),
            player_id: "dp-mate".into(),
        })
        .await
        .unwrap();
    server
        .admin()
        .await
        .delete_player(proto::DeletePlayerRequest {
            player_id: "dp-lead".into(),
        })
        .await
        .unwrap();
    let after = parties
        .get_party(proto::GetPartyRequest {
            party_id: party.party_id.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(after.member_ids, ["dp-mate"]);
    assert_eq!(after.leader_id, "dp-mate");
    // The erased id may start a party of its own again.
    parties
        .create_party(proto::CreatePartyRequest {
            player_id: "dp-lead".into(),
        })
        .await
        .expect("the erased id is in no party");
}

/// The erased player's match history goes with them: their list is empty, a match only their
/// history held is gone, and the matches other players keep name a marker in their place (in
/// the teams, the changes and a repeated report's acknowledgement), across a restart.
#[tokio::test]
async fn deleting_a_player_erases_their_history_and_marks_them_in_the_others() {
    let dir = tempfile::tempdir().unwrap();
    // A window wide enough that players with a game behind them pair at once.
    let config = "[history]\nmatches_per_player = 2\n\
                  [queues.1v1.matching]\nwindow = 2000.0\nmin_quality = 0.01\nexpansion = []\n";
    let mut server = TestServer::start_in(dir.path(), config).await;
    let shared = play(&server, "h-gone", "h-keeps", "h-gone").await;
    let alone = play(&server, "h-gone", "h-other", "h-other").await;
    // h-other's two newer matches push `alone` out of its list: only h-gone's holds it.
    play(&server, "h-other", "h-x", "h-x").await;
    play(&server, "h-other", "h-y", "h-y").await;
    let mut client = server.client().await;
    let list = |player: &str| proto::ListPlayerMatchesRequest {
        player_id: player.into(),
        ..Default::default()
    };
    let before = client.list_player_matches(list("h-gone")).await.unwrap();
    assert_eq!(before.into_inner().matches.len(), 2);
    server
        .admin()
        .await
        .delete_player(proto::DeletePlayerRequest {
            player_id: "h-gone".into(),
        })
        .await
        .unwrap();
    let check = |addr: std::net::SocketAddr| {
        let (shared, alone) = (shared.clone(), alone.clone());
        async move {
            let ch = tonic::transport::Channel::from_shared(format!("http://{addr}"))
                .unwrap()
                .connect()
                .await
                .unwrap();
            let mut client = proto::client_service_client::ClientServiceClient::new(ch.clone());
            let mut gs = proto::game_server_service_client::GameServerServiceClient::new(ch);
            let mine = client.list_player_matches(list("h-gone")).await.unwrap();
            assert!(mine.into_inner().matches.is_empty());
            let gone = client
                .get_match(proto::GetMatchRequest { match_id: alone })
                .await
                .unwrap_err();
            assert_eq!(gone.code(), Code::NotFound, "{gone:?}");
            let theirs = client.list_player_matches(list("h-keeps")).await.unwrap();
            let theirs = theirs.into_inner().matches;
            assert_eq!(theirs.len(), 1);
            let record = &theirs[0];
            assert_eq!(record.match_id, shared);
            let named: Vec<&str> = record
                .teams
                .iter()
                .flat_map(|t| t.player_ids.iter().map(String::as_str))
                .collect();
            let marker = named.iter().find(|p| **p != "h-keeps").unwrap().to_string();
            assert!(marker.starts_with("erased:"), "{named:?}");
            assert!(!marker.contains("h-gone"), "{marker}");
            let changed: Vec<&str> = record
                .changes
                .iter()
                .map(|c| c.player_id.as_str())
                .collect();
            assert!(changed.contains(&marker.as_str()) && changed.contains(&"h-keeps"));
            // A repeated report is still a duplicate, and its answer names the marker.
            let again = gs
                .report_match_result(proto::MatchResult {
                    match_id: shared.clone(),
                    placements: record.placements.clone(),
                    ..Default::default()
                })
                .await
                .unwrap()
                .into_inner();
            assert!(again.duplicate);
            let acked: Vec<&str> = again.changes.iter().map(|c| c.player_id.as_str()).collect();
            assert!(acked.contains(&marker.as_str()), "{acked:?}");
            assert!(!acked.contains(&"h-gone"), "{acked:?}");
        }
    };
    check(server.addr).await;
    server.stop().await.unwrap();
    drop(server);
    let server = TestServer::start_in(dir.path(), config).await;
    check(server.addr).await;
    // The id starts again with a history of its own.
    let fresh = play(&server, "h-gone", "h-new", "h-new").await;
    let mut client = server.client().await;
    let mine = client.list_player_matches(list("h-gone")).await.unwrap();
    let ids: Vec<String> = mine
        .into_inner()
        .matches
        .into_iter()
        .map(|m| m.match_id)
        .collect();
    assert_eq!(ids, vec![fresh]);
}

/// The sequence number of the oldest audit entry kept (a page of one names it as its token).
async fn oldest_audit_entry(server: &TestServer) -> u64 {
    server
        .admin()
        .await
        .list_audit_log(proto::ListAuditLogRequest {
            page_token: String::new(),
            limit: 1,
        })
        .await
        .unwrap()
        .into_inner()
        .next_page_token
        .parse::<u64>()
        .unwrap()
}

/// The audit log keeps at most `[audit] max_entries`: a server trims it when it starts (and
/// every minute after), oldest first, so an open console's polling cannot grow it for good.
#[tokio::test]
async fn the_audit_log_is_trimmed_to_its_bound_oldest_first() {
    const BOUND: &str = "[audit]\nmax_entries = 1000\n";
    let mut server = TestServer::start(BOUND).await;
    let mut admin = server.admin().await;
    for _ in 0..1010 {
        admin
            .get_queue_stats(proto::GetQueueStatsRequest::default())
            .await
            .unwrap();
    }
    assert_eq!(
        oldest_audit_entry(&server).await,
        1,
        "nothing is trimmed before the next check"
    );
    server.stop().await.unwrap();
    let dir = server.data_dir.clone();
    let restarted = TestServer::start_in(&dir, BOUND).await;
    // 1011 entries were written before the restart: the oldest 11 or more go.
    common::poll_until("the audit log trimmed at start", || {
        let oldest = oldest_audit_entry(&restarted);
        async move {
            match oldest.await {
                n if n >= 12 => Ok(n),
                n => Err(format!("oldest entry kept: {n}")),
            }
        }
    })
    .await;
    drop(server);
}

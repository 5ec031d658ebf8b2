//! Auth and limits through the real server: tokens, roles, ownership of
//! tickets and matches, message size, queue capacity, and TLS with a certificate generated here.

mod common;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::{EVENT_TIMEOUT, TestServer, next, poll_until};
use jsonwebtoken::{EncodingKey, Header};
use matchmaker::proto;
use matchmaker::proto::client_service_client::ClientServiceClient;
use matchmaker::proto::game_server_service_client::GameServerServiceClient;
use tonic::transport::Channel;
use tonic::{Code, Request};

const SECRET: &str = "test-secret-0123456789abcdef0123";
const AUTH_ON: &str = "[auth]\nenabled = true\njwt_secret = \"test-secret-0123456789abcdef0123\"\n";

fn token_with(secret: &str, sub: &str, role: &str, exp_offset: i64) -> String {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let claims = serde_json::json!({ "sub": sub, "role": role, "exp": now + exp_offset });
    jsonwebtoken::encode(
        &Header::default(),
        &claims,
        &EncodingKey::from_secret(secret.as_bytes()),
    )
    .unwrap()
}

fn token(sub: &str, role: &str) -> String {
    token_with(SECRET, sub, role, 3600)
}

fn with<T>(msg: T, token: &str) -> Request<T> {
    let mut r = Request::new(msg);
    r.metadata_mut()
        .insert("authorization", format!("Bearer {token}").parse().unwrap());
    r
}

fn enter_req(queue: &str, players: &[&str]) -> proto::EnterQueueRequest {
    proto::EnterQueueRequest {
        queue: queue.into(),
        player_ids: players.iter().map(|p| p.to_string()).collect(),
        ..Default::default()
    }
}

async fn enter_as(
    client: &mut ClientServiceClient<Channel>,
    tok: &str,
    queue: &str,
    players: &[&str],
) -> Result<String, tonic::Status> {
    client
        .enter_queue(with(enter_req(queue, players), tok))
        .await
        .map(|r| r.into_inner().ticket_id)
}

#[tokio::test]
async fn missing_malformed_expired_or_forged_tokens_are_unauthenticated() {
    let server = TestServer::start(AUTH_ON).await;
    let mut client = server.client().await;
    let no_token = client
        .enter_queue(enter_req("1v1", &["alice"]))
        .await
        .unwrap_err();
    assert_eq!(no_token.code(), Code::Unauthenticated, "{no_token:?}");
    for bad in [
        "not-a-jwt".to_string(),
        token_with(SECRET, "alice", "player", -3600),
        token_with("another-secret-0123456789", "alice", "player", 3600),
        token_with(SECRET, "alice", "emperor", 3600),
    ] {
        let e = enter_as(&mut client, &bad, "1v1", &["alice"])
            .await
            .unwrap_err();
        assert_eq!(e.code(), Code::Unauthenticated, "{bad}: {e:?}");
    }
    let mut r = Request::new(enter_req("1v1", &["alice"]));
    r.metadata_mut()
        .insert("authorization", "Basic abc".parse().unwrap());
    let e = client.enter_queue(r).await.unwrap_err();
    assert_eq!(e.code(), Code::Unauthenticated);

    // Health stays open.
    let mut health = tonic_health::pb::health_client::HealthClient::new(server.channel().await);
    let status = health
        .check(tonic_health::pb::HealthCheckRequest {
            service: String::new(),
        })
        .await
        .expect("health needs no token")
        .into_inner();
    assert_eq!(
        status.status,
        tonic_health::pb::health_check_response::ServingStatus::Serving as i32
    );
}

#[tokio::test]
async fn roles_reach_only_their_services() {
    let server = TestServer::start(AUTH_ON).await;
    let mut admin = server.admin().await;
    let stats = || proto::GetQueueStatsRequest {
        queue: String::new(),
    };
    for role in ["player", "server"] {
        let e = admin
            .get_queue_stats(with(stats(), &token("x", role)))
            .await
            .unwrap_err();
        assert_eq!(e.code(), Code::PermissionDenied, "{role}: {e:?}");
    }
    admin
        .get_queue_stats(with(stats(), &token("root", "admin")))
        .await
        .expect("admin reaches AdminService");

    let mut game_server = server.game_server().await;
    let e = game_server
        .cancel_match(with(
            proto::CancelMatchRequest {
                match_id: "m-1".into(),
                reason: String::new(),
            },
            &token("alice", "player"),
        ))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied);

    let mut client = server.client().await;
    let e = enter_as(&mut client, &token("gs-1", "server"), "1v1", &["gs-1"])
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied, "a server cannot queue");
    // Read-only client methods take any valid role.
    client
        .get_player(with(
            proto::GetPlayerRequest {
                player_id: "alice".into(),
                queue: "1v1".into(),
            },
            &token("gs-1", "server"),
        ))
        .await
        .expect("GetPlayer with a server token");
}

#[tokio::test]
async fn a_player_acts_only_on_tickets_that_contain_it() {
    let server = TestServer::start(AUTH_ON).await;
    let mut client = server.client().await;
    let alice = token("alice", "player");
    let bob = token("bob", "player");

    let e = enter_as(&mut client, &alice, "1v1", &["bob"])
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
    // A player names only itself: a party ticket is a PartyService party, entered by its leader.
    let e = enter_as(&mut client, &alice, "2v2", &["alice", "carol"])
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
    let mut parties =
        matchmaker::proto::party_service_client::PartyServiceClient::new(server.channel().await);
    let made = parties
        .create_party(with(
            proto::CreatePartyRequest {
                player_id: "alice".into(),
            },
            &alice,
        ))
        .await
        .expect("alice makes a party")
        .into_inner();
    parties
        .join_party(with(
            proto::JoinPartyRequest {
                invite_code: made.invite_code,
                player_id: "carol".into(),
            },
            &token("carol", "player"),
        ))
        .await
        .expect("carol joins it");
    let party = client
        .enter_queue(with(
            proto::EnterQueueRequest {
                queue: "2v2".into(),
                party_id: made.party_id,
                ..Default::default()
            },
            &alice,
        ))
        .await
        .expect("alice enters her party")
        .into_inner()
        .ticket_id;

    for tok in [&bob, &token("carolyn", "player")] {
        let e = client
            .watch_ticket(with(
                proto::WatchTicketRequest {
                    ticket_id: party.clone(),
                },
                tok,
            ))
            .await
            .unwrap_err();
        assert_eq!(e.code(), Code::PermissionDenied);
        let e = client
            .cancel_ticket(with(
                proto::CancelTicketRequest {
                    ticket_id: party.clone(),
                },
                tok,
            ))
            .await
            .unwrap_err();
        assert_eq!(e.code(), Code::PermissionDenied);
        let e = client
            .accept_match(with(
                proto::AcceptMatchRequest {
                    ticket_id: party.clone(),
                    match_id: "m-any".into(),
                    accept: false,
                },
                tok,
            ))
            .await
            .unwrap_err();
        assert_eq!(e.code(), Code::PermissionDenied, "ready-check answers too");
    }
    // Carol is in the party, so she may watch and cancel it.
    let carol = token("carol", "player");
    let mut stream = client
        .watch_ticket(with(
            proto::WatchTicketRequest {
                ticket_id: party.clone(),
            },
            &carol,
        ))
        .await
        .expect("a member watches")
        .into_inner();
    assert_eq!(
        next(&mut stream).await.state,
        proto::TicketState::Searching as i32
    );
    let cancelled = client
        .cancel_ticket(with(
            proto::CancelTicketRequest {
                ticket_id: party.clone(),
            },
            &carol,
        ))
        .await
        .expect("a member cancels")
        .into_inner();
    assert_eq!(cancelled.state, proto::TicketState::Cancelled as i32);
}

#[tokio::test]
async fn a_server_reports_and_cancels_only_its_own_matches() {
    let server = TestServer::start(AUTH_ON).await;
    let gs1 = token("gs-1", "server");
    let gs2 = token("gs-2", "server");
    let mut game_server = server.game_server().await;
    let serve = |addr: &str| proto::ServeMatchesRequest {
        server_address: addr.into(),
        region: String::new(),
        capacity: 0,
    };
    let e = game_server
        .serve_matches(with(serve("gs-1"), &gs2))
        .await
        .unwrap_err();
    assert_eq!(
        e.code(),
        Code::PermissionDenied,
        "a server registers only as itself"
    );
    let mut assignments = game_server
        .serve_matches(with(serve("gs-1"), &gs1))
        .await
        .unwrap()
        .into_inner();

    let mut client = server.client().await;
    enter_as(&mut client, &token("alice", "player"), "1v1", &["alice"])
        .await
        .unwrap();
    enter_as(&mut client, &token("bob", "player"), "1v1", &["bob"])
        .await
        .unwrap();
    let a = next(&mut assignments).await;
    assert_eq!(a.server_address, "gs-1");

    let placements = common::placements_with_winner(&a, "alice");
    let report = |tok: &str| {
        with(
            proto::MatchResult {
                match_id: a.match_id.clone(),
                placements: placements.clone(),
                ..Default::default()
            },
            tok,
        )
    };
    let e = game_server
        .report_match_result(report(&gs2))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
    let e = game_server
        .cancel_match(with(
            proto::CancelMatchRequest {
                match_id: a.match_id.clone(),
                reason: "not mine".into(),
            },
            &gs2,
        ))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied);
    let e = game_server
        .request_backfill(with(
            proto::BackfillRequest {
                match_id: a.match_id.clone(),
                open_slots: vec![
                    proto::Team {
                        player_ids: vec!["alice".into()],
                    },
                    proto::Team::default(),
                ],
            },
            &gs2,
        ))
        .await
        .unwrap_err();
    assert_eq!(
        e.code(),
        Code::PermissionDenied,
        "backfill only for its own matches"
    );
    let ack = game_server
        .report_match_result(report(&gs1))
        .await
        .expect("the assigned server reports")
        .into_inner();
    assert!(!ack.duplicate);
    assert_eq!(ack.changes.len(), 2);
    // Once reported, the stored acknowledgement (every player's ratings) goes to the match's
    // own server only.
    let e = game_server
        .report_match_result(report(&gs2))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
    let again = game_server
        .report_match_result(report(&gs1))
        .await
        .expect("the assigned server reports again")
        .into_inner();
    assert!(again.duplicate);
    assert_eq!(again.changes, ack.changes);
}

#[tokio::test]
async fn a_result_whose_match_record_is_gone_is_told_to_an_admin_only() {
    let server = TestServer::start(AUTH_ON).await;
    let gs1 = token("gs-1", "server");
    let admin_token = token("ops", "admin");
    let mut game_server = server.game_server().await;
    let mut assignments = game_server
        .serve_matches(with(
            proto::ServeMatchesRequest {
                server_address: "gs-1".into(),
                region: String::new(),
                capacity: 0,
            },
            &gs1,
        ))
        .await
        .unwrap()
        .into_inner();
    let mut client = server.client().await;
    for p in ["carol", "dave"] {
        enter_as(&mut client, &token(p, "player"), "1v1", &[p])
            .await
            .unwrap();
    }
    let a = next(&mut assignments).await;
    let report = |tok: &str| {
        with(
            proto::MatchResult {
                match_id: a.match_id.clone(),
                placements: common::placements_with_winner(&a, "carol"),
                ..Default::default()
            },
            tok,
        )
    };
    let ack = game_server
        .report_match_result(report(&gs1))
        .await
        .unwrap()
        .into_inner();
    // Both players erased: the match record goes with their histories, its acknowledgement
    // stays (what a repeated report answers).
    let mut admin = server.admin().await;
    for p in ["carol", "dave"] {
        admin
            .delete_player(with(
                proto::DeletePlayerRequest {
                    player_id: p.into(),
                },
                &admin_token,
            ))
            .await
            .unwrap();
    }
    let gone = client
        .get_match(with(
            proto::GetMatchRequest {
                match_id: a.match_id.clone(),
            },
            &admin_token,
        ))
        .await
        .unwrap_err();
    assert_eq!(gone.code(), Code::NotFound, "{gone:?}");
    // No record says which server the match was assigned to: another server's token is refused.
    let e = game_server
        .report_match_result(report(&token("gs-2", "server")))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
    assert!(e.message().contains("record"), "{e:?}");
    let again = game_server
        .report_match_result(report(&admin_token))
        .await
        .expect("an admin reads the acknowledgement")
        .into_inner();
    assert!(again.duplicate);
    assert_eq!(again.changes.len(), ack.changes.len());
    // A match nobody knows is still NOT_FOUND.
    let e = game_server
        .report_match_result(with(
            proto::MatchResult {
                match_id: "no-such-match".into(),
                placements: vec![1, 2],
                ..Default::default()
            },
            &gs1,
        ))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::NotFound, "{e:?}");
}

#[tokio::test]
async fn only_an_admin_pages_the_leaderboard_past_the_offset_limit() {
    let server = TestServer::start(AUTH_ON).await;
    let mut client = server.client().await;
    let page = |offset: u32, tok: &str| {
        with(
            proto::GetLeaderboardRequest {
                queue: "1v1".into(),
                offset,
                limit: 10,
            },
            tok,
        )
    };
    let deepest = matchmaker::ranking::leaderboard::MAX_OFFSET as u32;
    for tok in [token("p1", "player"), token("gs-1", "server")] {
        client
            .get_leaderboard(page(deepest, &tok))
            .await
            .expect("the deepest page any role may read");
        let e = client
            .get_leaderboard(page(deepest + 1, &tok))
            .await
            .unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
        assert!(e.message().starts_with("offset: "), "{e:?}");
    }
    client
        .get_leaderboard(page(u32::MAX, &token("ops", "admin")))
        .await
        .expect("an admin pages as deep as the board goes");
}

#[tokio::test]
async fn oversized_messages_are_refused_before_decoding() {
    let server = TestServer::start("[server]\nmax_message_bytes = 4096\n").await;
    let mut client = server.client().await;
    let players: Vec<String> = (0..2000).map(|i| format!("p{i}")).collect();
    let e = client
        .enter_queue(proto::EnterQueueRequest {
            queue: "1v1".into(),
            player_ids: players,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::ResourceExhausted, "{e:?}");
    assert!(
        e.message()
            .contains("server.max_message_bytes (4096 bytes)"),
        "{e:?}"
    );
    // A streaming call's request is checked the same way.
    let e = client
        .watch_ticket(proto::WatchTicketRequest {
            ticket_id: "t".repeat(5000),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::ResourceExhausted, "{e:?}");
    // The server is still fine.
    common::enter(&mut client, "1v1", &["alice"]).await;
}

#[tokio::test]
async fn a_player_over_its_rate_is_refused_and_others_are_not() {
    let server = TestServer::start(&format!(
        "{AUTH_ON}[rate_limit]\nplayer = 0.125\nburst_seconds = 40.0\n"
    ))
    .await;
    let mut client = server.client().await;
    let (p1, p2) = (token("p1", "player"), token("p2", "player"));
    let get = |tok: &str, who: &str| {
        with(
            proto::GetPlayerRequest {
                player_id: who.into(),
                queue: "1v1".into(),
            },
            tok,
        )
    };
    // The bucket starts with 5 calls, so the first 5 always pass (their answer does not matter
    // here, only that the limit let them through). It refills one every 8 s, so calls 6 to 8
    // are refused; only a machine taking 24 s over them would see none refused, and a slow one
    // could only make that fewer, never more: at least one must be refused, and every refusal
    // names the limit.
    let mut answers = Vec::new();
    for _ in 0..8 {
        answers.push(client.get_player(get(&p1, "p1")).await);
    }
    let limited =
        |r: &Result<_, tonic::Status>| matches!(r, Err(e) if e.code() == Code::ResourceExhausted);
    assert!(!answers[..5].iter().any(limited), "{answers:?}");
    let refused: Vec<_> = answers[5..].iter().filter(|r| limited(r)).collect();
    assert!(
        !refused.is_empty(),
        "8 calls at once must exceed a burst of 5"
    );
    for r in refused {
        let e = r.as_ref().unwrap_err();
        assert!(
            e.message().starts_with(
                "rate limit: player p1 exceeded rate_limit.player (0.125 requests/s, burst 5)"
            ),
            "{e:?}"
        );
        // google.rpc.RetryInfo says when the bucket holds a call again: at most one refill.
        use tonic_types::StatusExt;
        let retry = e
            .get_details_retry_info()
            .and_then(|info| info.retry_delay)
            .expect("a RetryInfo detail");
        assert!(
            retry > std::time::Duration::ZERO && retry <= std::time::Duration::from_secs(8),
            "{retry:?}"
        );
    }
    // Buckets are per caller: p2 still gets through, and health stays open.
    for _ in 0..5 {
        let answer = client.get_player(get(&p2, "p2")).await;
        assert!(!limited(&answer), "{answer:?}");
    }
    let mut health = tonic_health::pb::health_client::HealthClient::new(server.channel().await);
    for _ in 0..10 {
        health
            .check(tonic_health::pb::HealthCheckRequest {
                service: String::new(),
            })
            .await
            .expect("health is not rate limited");
    }
}

#[tokio::test]
async fn callers_without_a_token_are_limited_per_address_when_configured() {
    // A bucket of 2 calls that refills one every 8 s: of the 6 calls at least one is refused
    // unless the machine took 32 s over them.
    let server = TestServer::start("[rate_limit]\nanonymous = 0.125\nburst_seconds = 16.0\n").await;
    let mut client = server.client().await;
    for i in 0..2 {
        common::enter(&mut client, "1v1", &[&format!("a{i}")]).await;
    }
    let mut refused = None;
    for i in 2..6 {
        if let Err(e) = client
            .enter_queue(enter_req("1v1", &[&format!("a{i}")]))
            .await
        {
            refused = Some(e);
        }
    }
    let e = refused.expect("6 calls at once must exceed a burst of 2");
    assert_eq!(e.code(), Code::ResourceExhausted, "{e:?}");
    assert!(
        e.message()
            .starts_with("rate limit: 127.0.0.1 exceeded rate_limit.anonymous (0.125 requests/s"),
        "{e:?}"
    );
}

#[tokio::test]
async fn a_full_queue_answers_resource_exhausted() {
    let server = TestServer::start("[server]\nmax_tickets_per_queue = 3\n").await;
    let mut client = server.client().await;
    for p in ["a", "b", "c"] {
        // Right after an entry the count errs on the full side (the loop's own count plus the
        // entries of the last fetch windows): a refusal then is retried, as a client would.
        common::poll_until(&format!("{p} enters"), || {
            let mut client = client.clone();
            async move { client.enter_queue(enter_req("5v5", &[p])).await.map(drop) }
        })
        .await;
    }
    // It never errs on the empty side: with three waiting the fourth is refused.
    let e = client
        .enter_queue(enter_req("5v5", &["d"]))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::ResourceExhausted, "{e:?}");
    assert!(e.message().contains("max_tickets_per_queue"), "{e:?}");
    // Other queues are not affected.
    common::enter(&mut client, "ffa8", &["d"]).await;
}

#[tokio::test]
async fn tls_serves_with_a_generated_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    let cert_pem = cert.cert.pem();
    let cert_file = dir.path().join("cert.pem");
    let key_file = dir.path().join("key.pem");
    std::fs::write(&cert_file, &cert_pem).unwrap();
    std::fs::write(&key_file, cert.signing_key.serialize_pem()).unwrap();
    let server = TestServer::start(&format!(
        "[tls]\nenabled = true\ncert_file = {:?}\nkey_file = {:?}\n",
        cert_file.display().to_string(),
        key_file.display().to_string()
    ))
    .await;

    let tls = tonic::transport::ClientTlsConfig::new()
        .ca_certificate(tonic::transport::Certificate::from_pem(&cert_pem))
        .domain_name("localhost");
    let channel = Channel::from_shared(format!("https://{}", server.addr))
        .unwrap()
        .tls_config(tls)
        .unwrap()
        .connect_timeout(EVENT_TIMEOUT)
        .connect()
        .await
        .expect("TLS connect");
    let mut client = ClientServiceClient::new(channel);
    let ticket = common::enter(&mut client, "1v1", &["alice"]).await;
    assert!(!ticket.is_empty());

    // Plain text against the TLS port fails.
    let plain = Channel::from_shared(format!("http://{}", server.addr))
        .unwrap()
        .connect_timeout(EVENT_TIMEOUT)
        .connect()
        .await;
    if let Ok(plain) = plain {
        let e = GameServerServiceClient::new(plain)
            .cancel_match(proto::CancelMatchRequest {
                match_id: "m".into(),
                reason: String::new(),
            })
            .await
            .unwrap_err();
        assert_ne!(
            e.code(),
            Code::NotFound,
            "plain text must not reach the service"
        );
    }
}

// Two worker threads, so the server really runs calls side by side: on one thread a call that
// completes in its first poll never overlaps another, and whether any is shed is luck.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loadgen_measures_target_and_baseline_and_overload_is_shed_fast() {
    let server = TestServer::start("").await;
    let opts = |rpc, concurrency| matchmaker::tools::loadgen::Options {
        seconds: 0.3,
        concurrency,
        rounds: 2,
        max_in_flight: 1,
        ..matchmaker::tools::loadgen::Options::new(server.addr.to_string(), rpc)
    };
    for rpc in [
        matchmaker::tools::loadgen::Rpc::EnterQueue,
        matchmaker::tools::loadgen::Rpc::Watch,
    ] {
        let report = matchmaker::tools::loadgen::run(opts(rpc, 4)).await.unwrap();
        assert_eq!(report.errors, 0, "{report:?}");
        assert!(report.rps > 0.0 && report.baseline.rps > 0.0, "{report:?}");
        assert!(report.p99_ms >= report.p50_ms, "{report:?}");
    }
    // --queue: team matching under load; the generator's game servers take its matches too.
    // (A server of its own: the watch run above left tickets waiting in 5v5.)
    let fresh = TestServer::start("").await;
    let team = matchmaker::tools::loadgen::Options {
        addr: fresh.addr.to_string(),
        seconds: 2.0,
        queue: "5v5".into(),
        ..opts(matchmaker::tools::loadgen::Rpc::EnterQueue, 8)
    };
    let report = matchmaker::tools::loadgen::run(team).await.unwrap();
    assert_eq!(report.errors, 0, "{report:?}");
    assert!(report.matches_served > 0, "{report:?}");
    assert!(
        report.matches_served * 10 <= report.target.requests,
        "a 5v5 match takes ten tickets: {report:?}"
    );
    let unknown = matchmaker::tools::loadgen::Options {
        queue: "no-such-queue".into(),
        ..opts(matchmaker::tools::loadgen::Rpc::EnterQueue, 2)
    };
    let report = matchmaker::tools::loadgen::run(unknown).await.unwrap();
    assert!(
        report.target.requests > 0 && report.errors == report.target.requests,
        "{report:?}"
    );

    // One in flight server-wide, 64 callers: the rest are shed with RESOURCE_EXHAUSTED at once
    // rather than queued, and the server keeps answering.
    let small = TestServer::start("[server]\nmax_concurrent_requests = 1\n").await;
    let mut o = opts(matchmaker::tools::loadgen::Rpc::EnterQueue, 64);
    o.addr = small.addr.to_string();
    let report = matchmaker::tools::loadgen::run(o).await.unwrap();
    assert!(report.rps > 0.0, "{report:?}");
    let shed = common::resource_exhausted(&report);
    assert!(shed > 0, "{report:?}");
    assert!(report.p99_ms < 5_000.0, "{report:?}");
    // The refusals' own latency is reported apart from the successes'.
    let refused = if report.target.errors > 0 {
        &report.target
    } else {
        &report.baseline
    };
    assert!(refused.errors_p50_ms > 0.0, "{report:?}");
    assert!(refused.errors_p99_ms >= refused.errors_p50_ms, "{report:?}");
}

/// Connections waiting in the accept queue of the socket listening on 127.0.0.1:`port`, from
/// the kernel's socket table (for a listening socket, `rx_queue` is its accept backlog).
#[cfg(target_os = "linux")]
fn accept_queue(port: u16) -> Option<u64> {
    let table = std::fs::read_to_string("/proc/net/tcp").ok()?;
    table.lines().skip(1).find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let (local, state, queues) = (fields.get(1)?, fields.get(3)?, fields.get(4)?);
        let local_port = u16::from_str_radix(local.rsplit(':').next()?, 16).ok()?;
        if *state != "0A" || local_port != port {
            return None; // 0A: LISTEN
        }
        u64::from_str_radix(queues.split(':').nth(1)?, 16).ok()
    })
}

/// Past `server.max_connections` a new connection is not accepted (it waits in the kernel's
/// backlog, costing the server nothing) and is served as soon as an open one closes. Linux
/// only: the waiting connection is observed in the kernel's socket table.
#[cfg(target_os = "linux")]
#[tokio::test]
async fn connections_past_the_limit_wait_until_one_closes() {
    use tonic_health::pb::HealthCheckRequest;
    use tonic_health::pb::health_client::HealthClient;
    let server = TestServer::start("[server]\nmax_connections = 2\n").await;
    let endpoint = Channel::from_shared(format!("http://{}", server.addr)).unwrap();
    let check = |channel: Channel| async move {
        HealthClient::new(channel)
            .check(HealthCheckRequest {
                service: String::new(),
            })
            .await
    };
    let first = endpoint.connect().await.unwrap();
    let second = endpoint.connect().await.unwrap();
    check(first.clone()).await.expect("first connection served");
    check(second.clone())
        .await
        .expect("second connection served");

    let third = endpoint.connect_lazy();
    let waiting = tokio::spawn(check(third));
    // The kernel completes the third connection's handshake and holds it in the listening
    // socket's accept queue, where the server at its limit leaves it (a server that accepted
    // it would empty the queue within microseconds).
    let port = server.addr.port();
    poll_until(
        "the third connection waiting in the accept queue",
        || async move {
            match accept_queue(port) {
                Some(1) => Ok(()),
                other => Err(other),
            }
        },
    )
    .await;
    assert!(
        !waiting.is_finished(),
        "a third connection was served while two were open"
    );
    // The second connection still works: the limit holds new connections, not open ones.
    check(second.clone())
        .await
        .expect("open connection keeps working");
    assert_eq!(
        accept_queue(port),
        Some(1),
        "the third connection was taken"
    );
    assert!(!waiting.is_finished());

    drop(first);
    let answered = tokio::time::timeout(EVENT_TIMEOUT, waiting)
        .await
        .expect("the waiting connection is served once one closes")
        .unwrap();
    answered.expect("health check on the third connection");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loadgen_open_loop_starts_every_due_call_and_counts_refusals_apart() {
    let server = TestServer::start("").await;
    let opts = |addr: String, rate: f64| matchmaker::tools::loadgen::Options {
        seconds: 0.5,
        concurrency: 16,
        rounds: 1,
        rate: Some(rate),
        max_in_flight: 10_000,
        ..matchmaker::tools::loadgen::Options::new(
            addr,
            matchmaker::tools::loadgen::Rpc::EnterQueue,
        )
    };
    // 400 calls/s for 0.5 s per side: 200 due calls each, all sent and answered.
    let report = matchmaker::tools::loadgen::run(opts(server.addr.to_string(), 400.0))
        .await
        .unwrap();
    assert_eq!(report.offered_rps, Some(400.0), "{report:?}");
    for phase in [&report.target, &report.baseline] {
        assert_eq!(phase.requests, 200, "{report:?}");
        assert_eq!((phase.errors, phase.not_sent), (0, 0), "{report:?}");
        assert!(
            phase.p99_ms >= phase.p50_ms && phase.p50_ms > 0.0,
            "{report:?}"
        );
    }
    assert!(report.matches_served > 0, "{report:?}");

    // Far more arrivals than one call in flight server-wide: the excess is refused with
    // RESOURCE_EXHAUSTED, counted apart, and every due call is either answered or not sent.
    let small = TestServer::start("[server]\nmax_concurrent_requests = 1\n").await;
    let report = matchmaker::tools::loadgen::run(opts(small.addr.to_string(), 8000.0))
        .await
        .unwrap();
    let t = &report.target;
    assert_eq!(t.requests + t.not_sent, 4000, "{report:?}");
    assert!(
        t.error_codes.get("ResourceExhausted").copied().unwrap_or(0) > 0,
        "{report:?}"
    );
    assert!(
        t.rps > 0.0 && t.errors_p99_ms >= t.errors_p50_ms,
        "{report:?}"
    );
    let bad = matchmaker::tools::loadgen::Options {
        rpc: matchmaker::tools::loadgen::Rpc::Watch,
        ..opts(small.addr.to_string(), 10.0)
    };
    let e = matchmaker::tools::loadgen::run(bad).await.unwrap_err();
    assert!(e.to_string().contains("--rate"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loadgen_open_loop_deadlines_count_from_when_a_call_was_due() {
    // One stream per connection and one connection: calls due every 0.25 ms wait for each
    // other in the client, so with a 1 ms deadline the later ones miss it.
    let server = TestServer::start(
        "[server]
max_concurrent_requests_per_connection = 1
",
    )
    .await;
    let opts = |deadline_ms: Option<u64>| matchmaker::tools::loadgen::Options {
        seconds: 0.5,
        concurrency: 1,
        rounds: 1,
        rate: Some(4000.0),
        max_in_flight: 10_000,
        deadline: deadline_ms.map(Duration::from_millis),
        ..matchmaker::tools::loadgen::Options::new(
            server.addr.to_string(),
            matchmaker::tools::loadgen::Rpc::HealthCheck,
        )
    };
    let late = matchmaker::tools::loadgen::run(opts(Some(1)))
        .await
        .unwrap();
    for phase in [&late.target, &late.baseline] {
        let missed = phase
            .error_codes
            .get("DeadlineExceeded")
            .copied()
            .unwrap_or(0);
        assert!(missed > 0, "{late:?}");
        // Nearly every call is cancelled at its deadline, so on a loaded machine the server's
        // HTTP/2 rapid-reset guard (CVE-2023-44487) may count more cancelled streams waiting
        // to be accepted than it allows and close the connection (GOAWAY "too_many_resets"):
        // the calls on it then fail with RESOURCE_EXHAUSTED, and the next while the channel
        // reconnects with UNAVAILABLE. Those are a few per closed connection; every other error
        // is a miss.
        let dropped = phase.errors - missed;
        assert!(
            phase.error_codes.keys().all(|code| [
                "DeadlineExceeded",
                "ResourceExhausted",
                "Unavailable"
            ]
            .contains(&code.as_str())),
            "only deadlines were missed: {late:?}"
        );
        assert!(
            // Each closing takes more than 20 cancelled calls (hyper's default guard).
            dropped < missed,
            "only deadlines were missed: {late:?}"
        );
        // Answered or not, no call is counted long after its deadline (without a deadline a
        // waiting call would count up to the 10 s call timeout); how long after is the timer's
        // granularity plus however long a loaded machine keeps the generator from running.
        assert!(phase.errors_p99_ms < 2000.0, "{late:?}");
        assert_eq!(phase.requests, 2000, "{late:?}");
        assert!(
            phase.p99_ms <= 1.0,
            "an answer after the deadline is a miss: {late:?}"
        );
    }
    // With the longest deadline a generator sets, none is missed: 200 calls one after another
    // on the one stream, where 2,000 could take more than 10 s on a loaded debug build.
    let patient = matchmaker::tools::loadgen::run(matchmaker::tools::loadgen::Options {
        rate: Some(400.0),
        ..opts(Some(10_000))
    })
    .await
    .unwrap();
    assert_eq!(patient.target.requests, 200, "{patient:?}");
    assert_eq!(patient.errors, 0, "{patient:?}");

    let closed_loop = matchmaker::tools::loadgen::Options {
        rate: None,
        ..opts(Some(100))
    };
    let e = matchmaker::tools::loadgen::run(closed_loop)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("--deadline-ms"), "{e}");
    let e = matchmaker::tools::loadgen::run(opts(Some(0)))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("--deadline-ms"), "{e}");
}

#[tokio::test]
async fn an_eddsa_public_key_verifies_tokens_signed_by_its_private_key() {
    let dir = tempfile::tempdir().unwrap();
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ED25519).unwrap();
    let public = dir.path().join("jwt-public.pem");
    std::fs::write(&public, key.public_key_pem()).unwrap();
    let server = TestServer::start(&format!(
        "[auth]\nenabled = true\njwt_secret = \"\"\npublic_key_file = {:?}\npublic_key_algorithm = \"EdDSA\"\n",
        public.display().to_string()
    ))
    .await;
    let sign = |secret_key: &EncodingKey| {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs();
        let claims = serde_json::json!({ "sub": "alice", "role": "player", "exp": now + 600 });
        jsonwebtoken::encode(
            &Header::new(jsonwebtoken::Algorithm::EdDSA),
            &claims,
            secret_key,
        )
        .unwrap()
    };
    let good = sign(&EncodingKey::from_ed_pem(key.serialize_pem().as_bytes()).unwrap());
    let mut client = server.client().await;
    enter_as(&mut client, &good, "1v1", &["alice"])
        .await
        .expect("EdDSA token accepted");
    let other = rcgen::KeyPair::generate_for(&rcgen::PKCS_ED25519).unwrap();
    let forged = sign(&EncodingKey::from_ed_pem(other.serialize_pem().as_bytes()).unwrap());
    let e = enter_as(&mut client, &forged, "1v1", &["alice"])
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::Unauthenticated);
    // HS256 tokens are not accepted when no secret is configured.
    let e = enter_as(&mut client, &token("alice", "player"), "1v1", &["alice"])
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::Unauthenticated);
}

#[tokio::test]
async fn refused_requests_do_not_keep_a_concurrency_slot() {
    let server =
        TestServer::start(&format!("{AUTH_ON}[server]\nmax_concurrent_requests = 1\n")).await;
    // Several connections each get one refusal and stay open.
    let mut open = Vec::new();
    for _ in 0..5 {
        let mut c = server.client().await;
        let e = c
            .enter_queue(enter_req("1v1", &["alice"]))
            .await
            .unwrap_err();
        assert_eq!(e.code(), Code::Unauthenticated);
        open.push(c);
    }
    let mut c = server.client().await;
    enter_as(&mut c, &token("alice", "player"), "1v1", &["alice"])
        .await
        .expect("the one slot is free again");
}

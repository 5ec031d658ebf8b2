//! The service foundation over real gRPC: health, reflection, queueing, matching, cancel,
//! validation, persistence and graceful shutdown.

mod common;

use common::{EVENT_TIMEOUT, TestServer, enter, next, poll_until, watch_to_end};
use matchmaker::proto::{self, TicketState};
use tokio_stream::StreamExt;
use tonic::Code;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_reflection::pb::v1::ServerReflectionRequest;
use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;

#[tokio::test]
async fn health_reports_serving_for_the_server_and_each_service() {
    let server = TestServer::start("").await;
    let mut health = HealthClient::new(server.channel().await);
    for service in [
        "",
        "matchmaker.v1.ClientService",
        "matchmaker.v1.GameServerService",
        "matchmaker.v1.AdminService",
    ] {
        let status = health
            .check(tonic_health::pb::HealthCheckRequest {
                service: service.into(),
            })
            .await
            .unwrap()
            .into_inner()
            .status;
        assert_eq!(status, ServingStatus::Serving as i32, "service {service:?}");
    }
}

#[tokio::test]
async fn a_health_or_reflection_request_past_a_few_kilobytes_is_refused() {
    // Open to everyone and outside the concurrency limit: a request claiming a large message
    // must not get memory set aside for it.
    let server = TestServer::start("").await;
    let mut health = tonic_health::pb::health_client::HealthClient::new(server.channel().await);
    let e = health
        .check(tonic_health::pb::HealthCheckRequest {
            service: "x".repeat(8 * 1024),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::ResourceExhausted, "{e:?}");
    let mut reflection = ServerReflectionClient::new(server.channel().await);
    let request = ServerReflectionRequest {
        host: "h".repeat(8 * 1024),
        message_request: Some(MessageRequest::ListServices(String::new())),
    };
    // Refused as it is read: the reflection service ends its stream without an answer (it
    // takes a broken request stream for a closed one), or the call fails saying why.
    match reflection
        .server_reflection_info(tokio_stream::iter([request]))
        .await
    {
        Ok(answer) => match answer.into_inner().message().await {
            Ok(None) => {}
            Err(e) => assert_eq!(e.code(), tonic::Code::ResourceExhausted, "{e:?}"),
            Ok(Some(answered)) => panic!("answered: {answered:?}"),
        },
        Err(e) => assert_eq!(e.code(), tonic::Code::ResourceExhausted, "{e:?}"),
    }
}

#[tokio::test]
async fn reflection_lists_the_three_services_and_health() {
    let server = TestServer::start("").await;
    let mut reflection = ServerReflectionClient::new(server.channel().await);
    let request = ServerReflectionRequest {
        host: String::new(),
        message_request: Some(MessageRequest::ListServices(String::new())),
    };
    let mut responses = reflection
        .server_reflection_info(tokio_stream::iter([request]))
        .await
        .unwrap()
        .into_inner();
    let response = next(&mut responses).await;
    let Some(MessageResponse::ListServicesResponse(list)) = response.message_response else {
        panic!("unexpected reflection response {response:?}");
    };
    let names: Vec<String> = list.service.into_iter().map(|s| s.name).collect();
    for expected in [
        "matchmaker.v1.ClientService",
        "matchmaker.v1.GameServerService",
        "matchmaker.v1.AdminService",
        "grpc.health.v1.Health",
    ] {
        assert!(
            names.iter().any(|n| n == expected),
            "{expected} missing from {names:?}"
        );
    }
}

#[tokio::test]
async fn two_players_in_1v1_are_matched_and_a_serving_server_receives_the_match() {
    let server = TestServer::start("").await;
    let mut game_server = server.game_server().await;
    let mut assignments = game_server
        .serve_matches(proto::ServeMatchesRequest {
            server_address: "10.0.0.7:7777".into(),
            region: String::new(),
            capacity: 0,
        })
        .await
        .unwrap()
        .into_inner();
    let mut client = server.client().await;
    let t1 = enter(&mut client, "1v1", &["alice"]).await;
    let t2 = enter(&mut client, "1v1", &["bob"]).await;
    assert_ne!(t1, t2);

    let assignment = next(&mut assignments).await;
    assert_eq!(assignment.queue, "1v1");
    assert_eq!(assignment.server_address, "10.0.0.7:7777");
    let mut players: Vec<String> = assignment
        .teams
        .iter()
        .flat_map(|t| t.player_ids.clone())
        .collect();
    players.sort();
    assert_eq!(players, ["alice", "bob"]);
    assert_eq!(assignment.teams.len(), 2);
    let total: f64 = assignment.win_probability.iter().sum();
    assert!(
        (total - 1.0).abs() < 1e-6,
        "win probabilities sum to {total}"
    );

    for ticket in [&t1, &t2] {
        let updates = watch_to_end(&mut client, ticket).await;
        let last = updates.last().unwrap();
        assert_eq!(last.state, TicketState::Matched as i32);
        let a = last.assignment.as_ref().unwrap();
        assert_eq!(a.match_id, assignment.match_id);
        assert_eq!(a.server_address, "10.0.0.7:7777");
    }

    // Players in a live match cannot queue again.
    let err = client
        .enter_queue(proto::EnterQueueRequest {
            queue: "1v1".into(),
            player_ids: vec!["alice".into()],
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition);
    assert!(
        err.message().contains("alice") && err.message().contains("match"),
        "{}",
        err.message()
    );

    let view = client
        .get_player(proto::GetPlayerRequest {
            player_id: "alice".into(),
            queue: "1v1".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(view.status, "in_match");
}

#[tokio::test]
async fn a_watcher_sees_searching_then_matched_before_a_server_exists() {
    let server = TestServer::start("").await;
    let mut client = server.client().await;
    let t1 = enter(&mut client, "1v1", &["p1"]).await;
    let mut stream = client
        .watch_ticket(proto::WatchTicketRequest {
            ticket_id: t1.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    let first = next(&mut stream).await;
    assert_eq!(first.state, TicketState::Searching as i32);
    assert_eq!(first.ticket_id, t1);
    enter(&mut client, "1v1", &["p2"]).await;
    let matched = loop {
        let u = next(&mut stream).await;
        if u.state != TicketState::Searching as i32 {
            break u;
        }
        assert!(u.wait_seconds >= 0.0);
    };
    assert_eq!(matched.state, TicketState::Matched as i32);
    let a = matched.assignment.unwrap();
    assert!(a.server_address.is_empty(), "no server has taken it yet");
    assert!(a.match_id.starts_with("m-"));
}

#[tokio::test]
async fn cancel_ends_the_ticket_and_frees_the_player() {
    let server = TestServer::start("").await;
    let mut client = server.client().await;
    let ticket = enter(&mut client, "5v5", &["solo"]).await;
    let response = client
        .cancel_ticket(proto::CancelTicketRequest {
            ticket_id: ticket.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(response.state, TicketState::Cancelled as i32);
    let updates = watch_to_end(&mut client, &ticket).await;
    assert_eq!(
        updates.len(),
        1,
        "a finished ticket answers its final state and ends"
    );
    assert_eq!(updates[0].state, TicketState::Cancelled as i32);
    // Cancelling again is idempotent.
    let again = client
        .cancel_ticket(proto::CancelTicketRequest { ticket_id: ticket })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(again.state, TicketState::Cancelled as i32);
    // The player may queue again.
    enter(&mut client, "5v5", &["solo"]).await;
}

#[tokio::test]
async fn a_player_already_queued_is_refused_alone_or_in_a_party() {
    let server = TestServer::start("").await;
    let mut client = server.client().await;
    enter(&mut client, "5v5", &["dup"]).await;
    // One live ticket per player across all queues.
    for (queue, players) in [
        ("5v5", vec!["dup"]),
        ("5v5", vec!["friend", "dup"]),
        ("1v1", vec!["dup"]),
        ("2v2", vec!["friend", "dup"]),
    ] {
        let err = client
            .enter_queue(proto::EnterQueueRequest {
                queue: queue.into(),
                player_ids: players.iter().map(|p| p.to_string()).collect(),
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_eq!(err.code(), Code::FailedPrecondition, "{queue} {players:?}");
        assert!(err.message().contains("dup") && err.message().contains("queued"));
    }
    // The refused party changed nothing: its other member is still free.
    enter(&mut client, "5v5", &["friend"]).await;
}

#[tokio::test]
async fn bad_input_is_invalid_argument_naming_the_field() {
    let server = TestServer::start("").await;
    let mut client = server.client().await;
    let mut cases: Vec<(proto::EnterQueueRequest, &str)> = vec![
        (
            proto::EnterQueueRequest {
                queue: "chess".into(),
                player_ids: vec!["a".into()],
                ..Default::default()
            },
            "queue",
        ),
        (
            proto::EnterQueueRequest {
                queue: "1v1".into(),
                ..Default::default()
            },
            "player_ids",
        ),
        (
            proto::EnterQueueRequest {
                queue: "5v5".into(),
                player_ids: vec!["a".into(), "a".into()],
                ..Default::default()
            },
            "player_ids[1]",
        ),
        (
            proto::EnterQueueRequest {
                queue: "1v1".into(),
                player_ids: vec!["a".into(), "b".into()],
                ..Default::default()
            },
            "max_party_size",
        ),
        (
            proto::EnterQueueRequest {
                queue: "5v5".into(),
                player_ids: vec![String::new()],
                ..Default::default()
            },
            "player_ids[0]",
        ),
        (
            proto::EnterQueueRequest {
                queue: "5v5".into(),
                player_ids: vec!["x".repeat(500)],
                ..Default::default()
            },
            "player_ids[0]",
        ),
        (
            proto::EnterQueueRequest {
                queue: "5v5".into(),
                player_ids: vec!["a".into(), "b".into()],
                roles: vec!["tank".into()],
                ..Default::default()
            },
            "roles",
        ),
    ];
    cases.push((
        proto::EnterQueueRequest {
            queue: "1v1".into(),
            player_ids: vec!["a".into()],
            roles: vec!["healer".into()],
            ..Default::default()
        },
        "roles[0]",
    ));
    for (request, field) in cases {
        let err = client.enter_queue(request.clone()).await.unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument, "{request:?}");
        assert!(
            err.message().contains(field),
            "{field:?} not in {:?}",
            err.message()
        );
    }
    let err = client
        .cancel_ticket(proto::CancelTicketRequest::default())
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().contains("ticket_id"));
    let err = client
        .cancel_ticket(proto::CancelTicketRequest {
            ticket_id: "t-nope".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
    let err = client
        .watch_ticket(proto::WatchTicketRequest {
            ticket_id: "t-nope".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
    let err = client
        .get_player(proto::GetPlayerRequest {
            player_id: "a".into(),
            queue: String::new(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().contains("queue"));
}

#[tokio::test]
async fn unrated_players_get_the_queue_systems_initial_rating() {
    let server = TestServer::start("").await;
    let mut client = server.client().await;
    let glicko = client
        .get_player(proto::GetPlayerRequest {
            player_id: "newcomer".into(),
            queue: "1v1".into(),
        })
        .await
        .unwrap()
        .into_inner();
    let r = glicko.rating.unwrap();
    assert!((r.mean - 1500.0).abs() < 1e-9);
    assert!(
        r.deviation > 300.0,
        "unrated Glicko-2 RD is wide: {}",
        r.deviation
    );
    assert!(r.display_low < r.display && r.display < r.display_high);
    assert_eq!(glicko.games, 0);
    assert_eq!(glicko.status, "idle");
    let weng_lin = client
        .get_player(proto::GetPlayerRequest {
            player_id: "newcomer".into(),
            queue: "5v5".into(),
        })
        .await
        .unwrap()
        .into_inner();
    let r = weng_lin.rating.unwrap();
    assert!((r.mean - 25.0).abs() < 1e-9);
    assert!((r.deviation - 25.0 / 3.0).abs() < 1e-9);
    assert_eq!(weng_lin.rank_points, 200, "the ladder starts at 200 RP");
}

#[tokio::test]
async fn predict_match_uses_the_queue_system() {
    let server = TestServer::start("").await;
    let mut client = server.client().await;
    let p = client
        .predict_match(proto::PredictMatchRequest {
            queue: "1v1".into(),
            teams: vec![
                proto::Team {
                    player_ids: vec!["a".into()],
                },
                proto::Team {
                    player_ids: vec!["b".into()],
                },
            ],
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(p.win_probability.len(), 2);
    assert!(
        (p.win_probability[0] - 0.5).abs() < 1e-9,
        "equal players: {p:?}"
    );
    let err = client
        .predict_match(proto::PredictMatchRequest {
            queue: "1v1".into(),
            teams: vec![
                proto::Team {
                    player_ids: vec!["a".into()],
                },
                proto::Team {
                    player_ids: vec!["a".into()],
                },
            ],
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    // The element itself: the second naming of "a".
    assert!(
        err.message().starts_with("teams[1].player_ids[0]:"),
        "{}",
        err.message()
    );

    // Teams that don't fit the queue: a third team, or two players on a 1v1 side.
    let team = |ids: &[&str]| proto::Team {
        player_ids: ids.iter().map(|s| s.to_string()).collect(),
    };
    for (teams, field) in [
        (vec![team(&["a"]), team(&["b"]), team(&["c"])], "teams"),
        (vec![team(&["a"]), team(&["b", "c"])], "teams[1].player_ids"),
    ] {
        let err = client
            .predict_match(proto::PredictMatchRequest {
                queue: "1v1".into(),
                teams,
            })
            .await
            .unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument);
        assert!(err.message().contains(field), "{}", err.message());
    }
}

#[tokio::test]
async fn ready_check_and_backfill_calls_name_the_bad_field() {
    let server = TestServer::start("").await;
    let mut game_server = server.game_server().await;
    let err = game_server
        .request_backfill(proto::BackfillRequest::default())
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().contains("match_id"), "{}", err.message());
    let err = game_server
        .request_backfill(proto::BackfillRequest {
            match_id: "m-nope".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound, "{}", err.message());
    let mut client = server.client().await;
    let err = client
        .accept_match(proto::AcceptMatchRequest {
            ticket_id: "t-nope".into(),
            match_id: String::new(),
            accept: true,
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().contains("match_id"), "{}", err.message());
    let err = client
        .accept_match(proto::AcceptMatchRequest {
            ticket_id: "t-nope".into(),
            match_id: "m-nope".into(),
            accept: true,
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound, "{}", err.message());
}

#[tokio::test]
async fn queue_stats_count_waiting_tickets_and_formed_matches() {
    let server = TestServer::start("").await;
    let mut client = server.client().await;
    let t1 = enter(&mut client, "1v1", &["s1"]).await;
    enter(&mut client, "1v1", &["s2"]).await;
    watch_to_end_or_matched(&mut client, &t1).await;
    enter(&mut client, "5v5", &["w1"]).await;
    let admin = server.admin().await;
    // The next tick publishes the 5v5 count; poll the loop's answer.
    let stats = poll_until("the tick's stats", || {
        let mut admin = admin.clone();
        async move {
            let stats = admin
                .get_queue_stats(proto::GetQueueStatsRequest::default())
                .await
                .unwrap()
                .into_inner();
            let one = stats.queues.iter().find(|q| q.queue == "1v1").unwrap();
            let five = stats.queues.iter().find(|q| q.queue == "5v5").unwrap();
            if one.matches_formed == 1 && five.tickets_waiting == 1 {
                Ok(stats)
            } else {
                Err(stats)
            }
        }
    })
    .await;
    let five = stats.queues.iter().find(|q| q.queue == "5v5").unwrap();
    assert_eq!(five.players_waiting, 1);
    assert_eq!(stats.queues.len(), 4);
}

async fn watch_to_end_or_matched(
    client: &mut matchmaker::proto::client_service_client::ClientServiceClient<
        tonic::transport::Channel,
    >,
    ticket: &str,
) {
    let mut stream = client
        .watch_ticket(proto::WatchTicketRequest {
            ticket_id: ticket.into(),
        })
        .await
        .unwrap()
        .into_inner();
    loop {
        let u = next(&mut stream).await;
        if u.state == TicketState::Matched as i32 {
            return;
        }
    }
}

#[tokio::test]
async fn graceful_shutdown_ends_streams_and_persists_players() {
    let dir = tempfile::tempdir().unwrap();
    {
        let mut server = TestServer::start_in(dir.path(), "").await;
        let mut client = server.client().await;
        let ticket = enter(&mut client, "5v5", &["keeper"]).await;
        server
            .admin()
            .await
            .set_rating(proto::SetRatingRequest {
                player_id: "rated".into(),
                queue: "5v5".into(),
                rating: Some(proto::Rating {
                    mean: 1700.0,
                    deviation: 120.0,
                    ..Default::default()
                }),
                rank_points: None,
            })
            .await
            .expect("set_rating");
        let mut stream = client
            .watch_ticket(proto::WatchTicketRequest { ticket_id: ticket })
            .await
            .unwrap()
            .into_inner();
        next(&mut stream).await;
        server.stop().await.expect("clean shutdown");
        let rest = tokio::time::timeout(EVENT_TIMEOUT, async {
            let mut n = 0;
            while let Some(item) = stream.next().await {
                if item.is_err() {
                    break;
                }
                n += 1;
            }
            n
        })
        .await
        .expect("the watch stream ends at shutdown");
        assert!(rest <= 1);
    }
    let config = matchmaker::config::Config::from_toml_str("").unwrap();
    let store = matchmaker::store::open(dir.path(), &config.store).unwrap();
    let players: Vec<_> = store.load_players().unwrap().map(Result::unwrap).collect();
    // The rated player is kept; the one who only queued has no record to keep.
    assert_eq!(players.len(), 1);
    assert_eq!(players[0].0.as_str(), "rated");
    assert_eq!(players[0].1["5v5"].skill.mean, 1700.0);
}

#[tokio::test]
async fn a_foreign_data_dir_stops_the_server_with_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("important.txt"), "not ours").unwrap();
    let mut server = TestServer::start_in(dir.path(), "").await;
    let err = server.stop().await.unwrap_err().to_string();
    assert!(err.contains("not a matchmaker store"), "{err}");
}

#[tokio::test]
async fn roles_must_be_the_queues_roles() {
    let server = TestServer::start(
        "[queues.5v5.matching]\nroles = [{ name = \"healer\", min_per_team = 1 }]\n",
    )
    .await;
    let mut client = server.client().await;
    let ok = client
        .enter_queue(proto::EnterQueueRequest {
            queue: "5v5".into(),
            player_ids: vec!["medic".into()],
            roles: vec!["healer".into()],
            ..Default::default()
        })
        .await;
    assert!(ok.is_ok(), "{ok:?}");
    let err = client
        .enter_queue(proto::EnterQueueRequest {
            queue: "5v5".into(),
            player_ids: vec!["tanky".into()],
            roles: vec!["healer".into(), "tank".into()],
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(
        err.message().contains("roles[1]") && err.message().contains("healer"),
        "{}",
        err.message()
    );
}

#[tokio::test]
async fn a_queue_with_its_own_tick_interval_forms_matches_at_that_pace() {
    // The server ticks every 10 ms; 1v1's optimizer runs every 700 ms. A pair entered right
    // after one 1v1 match formed waits for the next 1v1 run.
    let server = TestServer::start(
        "[server]\ntick_interval_ms = 10\n[queues.1v1]\ntick_interval_ms = 700\n",
    )
    .await;
    let mut client = server.client().await;
    for round in 0..2 {
        let (a, b) = (format!("tick{round}a"), format!("tick{round}b"));
        let ticket = enter(&mut client, "1v1", &[&a]).await;
        enter(&mut client, "1v1", &[&b]).await;
        let mut stream = client
            .watch_ticket(proto::WatchTicketRequest { ticket_id: ticket })
            .await
            .unwrap()
            .into_inner();
        while next(&mut stream).await.state != TicketState::Matched as i32 {}
    }
    // When the server formed them, as it dated them: when this client heard of each depends on
    // how soon it was scheduled, and a late first answer would shorten the gap seen here.
    let formed = common::watch_events(
        &server.channel().await,
        0,
        &[proto::EventKind::MatchFormed],
        2,
    )
    .await;
    let gap = formed[1].unix - formed[0].unix;
    // Runs 700 ms apart (less half a 10 ms tick); the margin is for the loop being held up
    // between a run's start and dating its match, and still far from a 10 ms pace.
    assert!(
        gap >= 0.5,
        "the second 1v1 match formed {gap} s after the first"
    );
}

/// After the stop signal, a server with `drain_ms` says NOT_SERVING (readiness) while it still
/// serves calls and stays alive (liveness).
#[tokio::test]
async fn a_draining_server_is_not_ready_but_alive_and_still_serves() {
    use tonic_health::pb::HealthCheckRequest;

    let server = TestServer::start("[server]\ndrain_ms = 60000\n").await;
    let mut health = HealthClient::new(server.channel().await);
    let check = |service: &str| HealthCheckRequest {
        service: service.into(),
    };
    let status = health.check(check("")).await.unwrap().into_inner().status();
    assert_eq!(status, ServingStatus::Serving);
    server.shutdown.cancel();
    poll_until("readiness NOT_SERVING after the signal", || {
        let mut health = health.clone();
        async move {
            match health.check(check("")).await.unwrap().into_inner().status() {
                ServingStatus::NotServing => Ok(()),
                other => Err(other),
            }
        }
    })
    .await;
    let alive = health.check(check("liveness")).await.unwrap().into_inner();
    assert_eq!(alive.status(), ServingStatus::Serving);
    // Calls are still served while draining.
    let ticket = server
        .client()
        .await
        .enter_queue(proto::EnterQueueRequest {
            queue: "1v1".into(),
            player_ids: vec!["drainer".into()],
            ..Default::default()
        })
        .await
        .expect("EnterQueue while draining")
        .into_inner();
    assert!(!ticket.ticket_id.is_empty());
    assert!(
        !server.task.as_ref().unwrap().is_finished(),
        "the server drains for drain_ms before it stops"
    );
}

#[tokio::test]
async fn a_ticket_naming_none_of_a_regional_queues_regions_is_refused() {
    let server = TestServer::start("[queues.1v1.matching]\nregions = [\"eu\", \"us\"]\n").await;
    let mut client = server.client().await;
    let enter = |player: &str, latency: &[(&str, u32)]| proto::EnterQueueRequest {
        queue: "1v1".into(),
        player_ids: vec![player.into()],
        region_latency_ms: latency.iter().map(|(r, ms)| (r.to_string(), *ms)).collect(),
        ..Default::default()
    };
    // It could play in no region of the queue and would wait until it expired.
    let err = client
        .enter_queue(enter("r-1", &[("euw", 30)]))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(
        err.message().contains("region_latency_ms") && err.message().contains("eu, us"),
        "{}",
        err.message()
    );
    // One of them is enough; no latencies at all means any region.
    client
        .enter_queue(enter("r-1", &[("euw", 30), ("us", 90)]))
        .await
        .expect("a region of the queue");
    client
        .enter_queue(enter("r-2", &[]))
        .await
        .expect("any region");
}

#[tokio::test]
async fn enter_queue_works_with_a_loop_channel_of_one_place() {
    let server = TestServer::start("[server]\ncommand_buffer = 1\n").await;
    let mut client = server.client().await;
    for player in ["one-place-a", "one-place-b"] {
        let mut request = tonic::Request::new(proto::EnterQueueRequest {
            queue: "1v1".into(),
            player_ids: vec![player.into()],
            ..Default::default()
        });
        request.set_timeout(EVENT_TIMEOUT);
        client.enter_queue(request).await.expect("EnterQueue");
    }
}

#[tokio::test]
async fn game_server_text_that_is_copied_into_tickets_and_events_names_the_field() {
    let server = TestServer::start("").await;
    let mut gs = server.game_server().await;
    let err = gs
        .serve_matches(proto::ServeMatchesRequest {
            server_address: "gs-text:1".into(),
            region: "eu\u{7}".into(),
            capacity: 0,
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().starts_with("region"), "{}", err.message());
    let err = gs
        .cancel_match(proto::CancelMatchRequest {
            match_id: "m-any".into(),
            reason: "crashed\u{1b}[2J".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().starts_with("reason"), "{}", err.message());
}

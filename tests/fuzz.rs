//! Malformed and random requests through the real service: huge repeated
//! fields, NaN/inf, unknown ids, duplicate players across teams, empty teams, placements out of
//! range, and every records request (active ticket, match, history, start, parties). Each gets the status its malformation calls for; the server never panics, stays
//! healthy, and its state is consistent afterwards (every rejected report changed nothing, the
//! real matches still take exactly one valid result). The admin record calls (bans, erasure,
//! audit log, events, reload) are fuzzed the same way: a refused ban bans nobody.

mod common;

use common::{TestServer, next};
use matchmaker::proto;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tonic::Code;

/// Malformed requests sent per worker; four workers.
const PER_WORKER: usize = 600;
const WORKERS: usize = 4;

fn junk_id(rng: &mut StdRng) -> String {
    match rng.random_range(0..4) {
        0 => String::new(),
        1 => "x".repeat(rng.random_range(129..2000)),
        2 => format!("bad\u{0}id-{}", rng.random::<u32>()),
        _ => "é".repeat(rng.random_range(65..200)),
    }
}

/// A malformed id that is not empty (an empty one means "none" in optional fields).
fn junk_filled(rng: &mut StdRng) -> String {
    loop {
        let id = junk_id(rng);
        if !id.is_empty() {
            return id;
        }
    }
}

fn bad_number(rng: &mut StdRng) -> f64 {
    [f64::NAN, f64::INFINITY, f64::NEG_INFINITY][rng.random_range(0..3)]
}

fn drop_ok<T>(r: Result<T, tonic::Status>) -> Result<(), tonic::Status> {
    r.map(drop)
}

struct Case {
    what: &'static str,
    expect: &'static [Code],
    got: Result<(), tonic::Status>,
}

/// Sends one random malformed request; `matches` are real, allocated 1v1 matches.
async fn one(
    rng: &mut StdRng,
    channel: &tonic::transport::Channel,
    matches: &[proto::MatchAssignment],
) -> Case {
    use matchmaker::proto::client_service_client::ClientServiceClient;
    use matchmaker::proto::game_server_service_client::GameServerServiceClient;
    let mut client = ClientServiceClient::new(channel.clone());
    let mut gs = GameServerServiceClient::new(channel.clone());
    let mut parties =
        matchmaker::proto::party_service_client::PartyServiceClient::new(channel.clone());
    let mut admin =
        matchmaker::proto::admin_service_client::AdminServiceClient::new(channel.clone());
    let invalid: &'static [Code] = &[Code::InvalidArgument];
    let not_found: &'static [Code] = &[Code::NotFound];
    let enter =
        |queue: String, player_ids: Vec<String>, roles: Vec<String>| proto::EnterQueueRequest {
            queue,
            player_ids,
            roles,
            ..Default::default()
        };
    let m = &matches[rng.random_range(0..matches.len())];
    let players: Vec<String> = m.teams.iter().flat_map(|t| t.player_ids.clone()).collect();
    let report = |placements: Vec<u32>, performance: Vec<(String, f64)>, abandoned: Vec<String>| {
        proto::MatchResult {
            match_id: m.match_id.clone(),
            placements,
            performance: performance.into_iter().collect(),
            abandoned_player_ids: abandoned,
            team_scores: Vec::new(),
        }
    };
    match rng.random_range(0..38) {
        0 => Case {
            what: "enter: no players",
            expect: invalid,
            got: drop_ok(
                client
                    .enter_queue(enter("1v1".into(), vec![], vec![]))
                    .await,
            ),
        },
        1 => {
            let n = rng.random_range(100..20_000);
            let ids = (0..n).map(|i| format!("huge-{i}")).collect();
            Case {
                what: "enter: huge party",
                expect: invalid,
                got: drop_ok(client.enter_queue(enter("5v5".into(), ids, vec![])).await),
            }
        }
        2 => Case {
            what: "enter: unknown or bad queue",
            expect: invalid,
            got: drop_ok(
                client
                    .enter_queue(enter(
                        format!("q-{}", junk_id(rng)),
                        vec!["fz-u".into()],
                        vec![],
                    ))
                    .await,
            ),
        },
        3 => Case {
            what: "enter: duplicate player in a party",
            expect: invalid,
            got: drop_ok(
                client
                    .enter_queue(enter(
                        "2v2".into(),
                        vec!["fz-dup".into(), "fz-dup".into()],
                        vec![],
                    ))
                    .await,
            ),
        },
        4 => Case {
            what: "enter: malformed player id",
            expect: invalid,
            got: drop_ok(
                client
                    .enter_queue(enter("1v1".into(), vec![junk_id(rng)], vec![]))
                    .await,
            ),
        },
        5 => {
            let roles = (0..rng.random_range(1..5000))
                .map(|i| format!("role-{i}"))
                .collect();
            Case {
                what: "enter: unknown roles (many)",
                expect: invalid,
                got: drop_ok(
                    client
                        .enter_queue(enter("1v1".into(), vec!["fz-r".into()], roles))
                        .await,
                ),
            }
        }
        6 => Case {
            what: "cancel: unknown ticket",
            expect: not_found,
            got: drop_ok(
                client
                    .cancel_ticket(proto::CancelTicketRequest {
                        ticket_id: format!("t-nope-{}", rng.random::<u64>()),
                    })
                    .await,
            ),
        },
        7 => Case {
            what: "watch: malformed ticket id",
            expect: invalid,
            got: drop_ok(
                client
                    .watch_ticket(proto::WatchTicketRequest {
                        ticket_id: junk_id(rng),
                    })
                    .await,
            ),
        },
        8 => Case {
            what: "report: unknown match",
            expect: not_found,
            got: drop_ok(
                gs.report_match_result(proto::MatchResult {
                    match_id: format!("m-nope-{}", rng.random::<u64>()),
                    placements: vec![1, 2],
                    ..Default::default()
                })
                .await,
            ),
        },
        9 => {
            let n = [0usize, 1, 3, 50_000][rng.random_range(0..4)];
            Case {
                what: "report: placement count mismatch",
                expect: invalid,
                got: drop_ok(
                    gs.report_match_result(report(vec![1; n], vec![], vec![]))
                        .await,
                ),
            }
        }
        10 => {
            let bad = [0u32, 3, 99, u32::MAX][rng.random_range(0..4)];
            let placements = if rng.random() {
                vec![bad, 1]
            } else {
                vec![1, bad]
            };
            Case {
                what: "report: placement out of range",
                expect: invalid,
                got: drop_ok(
                    gs.report_match_result(report(placements, vec![], vec![]))
                        .await,
                ),
            }
        }
        11 => {
            let p = players[rng.random_range(0..players.len())].clone();
            Case {
                what: "report: NaN/inf performance",
                expect: invalid,
                got: drop_ok(
                    gs.report_match_result(report(vec![1, 2], vec![(p, bad_number(rng))], vec![]))
                        .await,
                ),
            }
        }
        12 => Case {
            what: "report: abandoned player not in the match",
            expect: invalid,
            got: drop_ok(
                gs.report_match_result(report(
                    vec![2, 1],
                    vec![],
                    vec![format!("stranger-{}", rng.random::<u32>())],
                ))
                .await,
            ),
        },
        13 => {
            let n = rng.random_range(1..5000);
            let perf = (0..n).map(|i| (format!("ghost-{i}"), 1.0)).collect();
            Case {
                what: "report: performance for players not in the match",
                expect: invalid,
                got: drop_ok(
                    gs.report_match_result(report(vec![1, 2], perf, vec![]))
                        .await,
                ),
            }
        }
        14 => {
            let team = |ids: &[&str]| proto::Team {
                player_ids: ids.iter().map(|s| s.to_string()).collect(),
            };
            let teams = match rng.random_range(0..4) {
                0 => vec![team(&["a"])],
                1 => vec![team(&["a"]), team(&[])],
                2 => vec![team(&["a", "b"]), team(&["c", "a"])],
                _ => vec![],
            };
            Case {
                what: "predict: one team, empty team or a player on two teams",
                expect: invalid,
                got: drop_ok(
                    client
                        .predict_match(proto::PredictMatchRequest {
                            queue: "2v2".into(),
                            teams,
                        })
                        .await,
                ),
            }
        }
        15 => Case {
            what: "accept: malformed ticket or match id",
            expect: invalid,
            got: drop_ok(
                client
                    .accept_match(proto::AcceptMatchRequest {
                        ticket_id: junk_id(rng),
                        match_id: m.match_id.clone(),
                        accept: rng.random(),
                    })
                    .await,
            ),
        },
        16 => Case {
            what: "accept: unknown ticket",
            expect: not_found,
            got: drop_ok(
                client
                    .accept_match(proto::AcceptMatchRequest {
                        ticket_id: format!("t-nope-{}", rng.random::<u64>()),
                        match_id: m.match_id.clone(),
                        accept: rng.random(),
                    })
                    .await,
            ),
        },
        17 => Case {
            what: "backfill: malformed player ids in open_slots",
            expect: invalid,
            got: drop_ok(
                gs.request_backfill(proto::BackfillRequest {
                    match_id: m.match_id.clone(),
                    open_slots: vec![
                        proto::Team {
                            player_ids: vec![junk_id(rng)],
                        },
                        proto::Team::default(),
                    ],
                })
                .await,
            ),
        },
        18 => Case {
            what: "backfill: a match with teams of one",
            expect: &[Code::FailedPrecondition],
            got: drop_ok(
                gs.request_backfill(proto::BackfillRequest {
                    match_id: m.match_id.clone(),
                    open_slots: vec![
                        proto::Team {
                            player_ids: vec![players[0].clone()],
                        },
                        proto::Team::default(),
                    ],
                })
                .await,
            ),
        },
        // --- Records ---
        19 => Case {
            what: "active ticket: malformed player id",
            expect: invalid,
            got: drop_ok(
                client
                    .get_active_ticket(proto::GetActiveTicketRequest {
                        player_id: junk_id(rng),
                    })
                    .await,
            ),
        },
        20 => Case {
            what: "active ticket: an idle player",
            expect: not_found,
            got: drop_ok(
                client
                    .get_active_ticket(proto::GetActiveTicketRequest {
                        player_id: format!("fz-idle-{}", rng.random::<u32>()),
                    })
                    .await,
            ),
        },
        21 => Case {
            what: "get match: malformed or unknown id",
            expect: &[Code::InvalidArgument, Code::NotFound],
            got: drop_ok(
                client
                    .get_match(proto::GetMatchRequest {
                        match_id: if rng.random() {
                            junk_id(rng)
                        } else {
                            format!("m-nope-{}", rng.random::<u64>())
                        },
                    })
                    .await,
            ),
        },
        22 => {
            let (player_id, queue, page_token) = match rng.random_range(0..3) {
                0 => (junk_id(rng), String::new(), String::new()),
                1 => ("fz-h".to_string(), junk_filled(rng), String::new()),
                _ => (
                    "fz-h".to_string(),
                    String::new(),
                    if rng.random() {
                        junk_filled(rng)
                    } else {
                        format!("m-nope-{}", rng.random::<u64>())
                    },
                ),
            };
            Case {
                what: "list matches: malformed player, queue or page token",
                expect: invalid,
                got: drop_ok(
                    client
                        .list_player_matches(proto::ListPlayerMatchesRequest {
                            player_id,
                            queue,
                            page_token,
                            limit: rng.random(),
                        })
                        .await,
                ),
            }
        }
        23 => Case {
            what: "start match: malformed or unknown id",
            expect: &[Code::InvalidArgument, Code::NotFound],
            got: drop_ok(
                gs.start_match(proto::StartMatchRequest {
                    match_id: if rng.random() {
                        junk_id(rng)
                    } else {
                        format!("m-nope-{}", rng.random::<u64>())
                    },
                })
                .await,
            ),
        },
        24 => Case {
            what: "create party: malformed player id",
            expect: invalid,
            got: drop_ok(
                parties
                    .create_party(proto::CreatePartyRequest {
                        player_id: junk_id(rng),
                    })
                    .await,
            ),
        },
        25 => {
            let (invite_code, player_id, expect): (String, String, &'static [Code]) =
                match rng.random_range(0..3) {
                    0 => (junk_id(rng), "fz-p".into(), invalid),
                    1 => ("ABCD2345".into(), junk_id(rng), invalid),
                    _ => ("ZZZZZZZZ".into(), "fz-p".into(), not_found),
                };
            Case {
                what: "join party: malformed or unknown code, malformed player",
                expect,
                got: drop_ok(
                    parties
                        .join_party(proto::JoinPartyRequest {
                            invite_code,
                            player_id,
                        })
                        .await,
                ),
            }
        }
        26 => {
            let (party_id, expect) = if rng.random() {
                (junk_id(rng), invalid)
            } else {
                (format!("party-nope-{}", rng.random::<u64>()), not_found)
            };
            Case {
                what: "leave party: malformed or unknown party",
                expect,
                got: drop_ok(
                    parties
                        .leave_party(proto::LeavePartyRequest {
                            party_id,
                            player_id: "fz-p".into(),
                        })
                        .await,
                ),
            }
        }
        27 => Case {
            what: "get party: malformed or unknown party",
            expect: &[Code::InvalidArgument, Code::NotFound],
            got: drop_ok(
                parties
                    .get_party(proto::GetPartyRequest {
                        party_id: if rng.random() {
                            junk_id(rng)
                        } else {
                            format!("party-nope-{}", rng.random::<u64>())
                        },
                    })
                    .await,
            ),
        },
        28 => {
            let (party_id, player_ids, expect): (String, Vec<String>, &'static [Code]) =
                match rng.random_range(0..3) {
                    0 => (junk_id(rng), Vec::new(), invalid),
                    1 => ("party-any".into(), vec!["fz-u".into()], invalid),
                    _ => (
                        format!("party-nope-{}", rng.random::<u64>()),
                        Vec::new(),
                        not_found,
                    ),
                };
            Case {
                what: "enter by party id: malformed, with player ids too, or unknown",
                expect,
                got: drop_ok(
                    client
                        .enter_queue(proto::EnterQueueRequest {
                            queue: "2v2".into(),
                            player_ids,
                            party_id,
                            ..Default::default()
                        })
                        .await,
                ),
            }
        }
        29 => Case {
            what: "ban: malformed player id",
            expect: invalid,
            got: drop_ok(
                admin
                    .ban_player(proto::BanPlayerRequest {
                        player_id: junk_id(rng),
                        until_unix: 0,
                        reason: "fuzz".into(),
                    })
                    .await,
            ),
        },
        30 => Case {
            what: "ban: an end in the past",
            expect: invalid,
            got: drop_ok(
                admin
                    .ban_player(proto::BanPlayerRequest {
                        player_id: "fz-ban".into(),
                        until_unix: if rng.random() {
                            -rng.random_range(1..i64::MAX)
                        } else {
                            rng.random_range(1..1_000_000_000)
                        },
                        reason: "fuzz".into(),
                    })
                    .await,
            ),
        },
        31 => Case {
            what: "ban: empty, huge or control-character reason",
            expect: invalid,
            got: drop_ok(
                admin
                    .ban_player(proto::BanPlayerRequest {
                        player_id: "fz-ban".into(),
                        until_unix: 0,
                        reason: match rng.random_range(0..3) {
                            0 => " \t ".repeat(rng.random_range(0..10)),
                            1 => "r".repeat(rng.random_range(501..5000)),
                            _ => format!("bad\u{0}reason{}", rng.random::<u32>()),
                        },
                    })
                    .await,
            ),
        },
        32 => Case {
            what: "delete player: malformed id",
            expect: invalid,
            got: drop_ok(
                admin
                    .delete_player(proto::DeletePlayerRequest {
                        player_id: junk_id(rng),
                    })
                    .await,
            ),
        },
        33 => Case {
            what: "unban: malformed id",
            expect: invalid,
            got: drop_ok(
                admin
                    .unban_player(proto::UnbanPlayerRequest {
                        player_id: junk_id(rng),
                    })
                    .await,
            ),
        },
        34 => Case {
            what: "audit log: bad page token or limit",
            expect: invalid,
            got: drop_ok(
                admin
                    .list_audit_log(if rng.random() {
                        proto::ListAuditLogRequest {
                            page_token: format!("t{}", rng.random::<u64>()),
                            limit: 0,
                        }
                    } else {
                        proto::ListAuditLogRequest {
                            page_token: String::new(),
                            limit: rng.random_range(1001..=u32::MAX),
                        }
                    })
                    .await,
            ),
        },
        35 => Case {
            what: "watch events: unknown or unspecified kinds",
            expect: invalid,
            got: drop_ok(
                admin
                    .watch_events(proto::WatchEventsRequest {
                        after_cursor: rng.random(),
                        kinds: vec![
                            1,
                            if rng.random() {
                                0
                            } else {
                                rng.random_range(11..i32::MAX)
                            },
                        ],
                    })
                    .await,
            ),
        },
        36 => Case {
            what: "reload: a server started without a file",
            expect: &[Code::FailedPrecondition],
            got: drop_ok(admin.reload_config(proto::ReloadConfigRequest {}).await),
        },
        _ => Case {
            what: "cancel match: unknown",
            expect: not_found,
            got: drop_ok(
                gs.cancel_match(proto::CancelMatchRequest {
                    match_id: format!("m-nope-{}", rng.random::<u64>()),
                    reason: String::new(),
                })
                .await,
            ),
        },
    }
}

#[tokio::test]
async fn malformed_requests_get_the_right_status_and_change_nothing() {
    let server = TestServer::start("").await;
    let mut gs = server.game_server().await;
    let mut assignments = gs
        .serve_matches(proto::ServeMatchesRequest {
            server_address: "fz:1".into(),
            region: String::new(),
            capacity: 0,
        })
        .await
        .unwrap()
        .into_inner();
    let mut client = server.client().await;
    let mut matches = Vec::new();
    for i in 0..4 {
        common::enter(&mut client, "1v1", &[&format!("fz-a{i}")]).await;
        common::enter(&mut client, "1v1", &[&format!("fz-b{i}")]).await;
        matches.push(next(&mut assignments).await);
    }
    let matches = std::sync::Arc::new(matches);

    let mut workers = Vec::new();
    for w in 0..WORKERS {
        let channel = server.channel().await;
        let matches = matches.clone();
        workers.push(tokio::spawn(async move {
            let mut rng = StdRng::seed_from_u64(0xF022 + w as u64);
            let mut sent = 0usize;
            let mut wrong = Vec::new();
            for _ in 0..PER_WORKER {
                let case = one(&mut rng, &channel, &matches).await;
                sent += 1;
                let code = match &case.got {
                    Ok(()) => Code::Ok,
                    Err(s) => s.code(),
                };
                if !case.expect.contains(&code) {
                    wrong.push(format!(
                        "{}: expected {:?}, got {:?}",
                        case.what, case.expect, case.got
                    ));
                }
            }
            (sent, wrong)
        }));
    }
    let mut sent = 0;
    let mut wrong = Vec::new();
    for w in workers {
        let (n, e) = w.await.expect("worker did not panic");
        sent += n;
        wrong.extend(e);
    }
    eprintln!("fuzz: {sent} malformed requests sent");
    assert!(
        wrong.is_empty(),
        "{} wrong answers, e.g. {:?}",
        wrong.len(),
        &wrong[..wrong.len().min(5)]
    );
    assert!(
        !server.task.as_ref().unwrap().is_finished(),
        "the server is still running"
    );

    // Nothing was half-applied: every player is still unrated, and each real match takes exactly
    // one valid result.
    for m in matches.iter() {
        for p in m.teams.iter().flat_map(|t| &t.player_ids) {
            assert_eq!(common::player(&server, p, "1v1").await.games, 0, "{p}");
        }
        let winner = &m.teams[0].player_ids[0];
        let ack = gs
            .report_match_result(proto::MatchResult {
                match_id: m.match_id.clone(),
                placements: common::placements_with_winner(m, winner),
                ..Default::default()
            })
            .await
            .expect("a valid report after the fuzz run")
            .into_inner();
        assert!(!ack.duplicate);
        assert_eq!(ack.changes.len(), 2);
        for p in m.teams.iter().flat_map(|t| &t.player_ids) {
            assert_eq!(common::player(&server, p, "1v1").await.games, 1, "{p}");
        }
    }
    // Players never queued by a rejected request: the fuzz ids are all idle, and none is in a
    // party.
    for p in ["fz-u", "fz-dup", "fz-r", "fz-p", "fz-ban"] {
        common::enter(&mut client, "5v5", &[p]).await;
    }
    let mut parties =
        matchmaker::proto::party_service_client::PartyServiceClient::new(server.channel().await);
    parties
        .create_party(proto::CreatePartyRequest {
            player_id: "fz-p".into(),
        })
        .await
        .expect("fz-p joined no party");
    // Each real match is in its players' history once, completed.
    for m in matches.iter() {
        let record = client
            .get_match(proto::GetMatchRequest {
                match_id: m.match_id.clone(),
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(record.phase, proto::MatchPhase::Completed as i32);
    }
}

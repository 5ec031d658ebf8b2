//! Match results over real gRPC: ratings equal the library's on the same inputs, duplicates are
//! idempotent, bad reports change nothing, abandonment, cancellation, and survival of restarts.

mod common;

use std::collections::BTreeMap;

use common::{TestServer, form_match, placements_with_winner, player as rating_of, poll_until};
use matchmaker::config::Config;
use matchmaker::proto;
use matchmaker::rating::{MatchInput, PlayerInput, Skill};
use tonic::Code;

fn skill(r: &proto::Rating) -> Skill {
    Skill {
        mean: r.mean,
        deviation: r.deviation,
        volatility: r.volatility,
    }
}

fn report(match_id: &str, placements: Vec<u32>) -> proto::MatchResult {
    proto::MatchResult {
        match_id: match_id.into(),
        placements,
        ..Default::default()
    }
}

#[tokio::test]
async fn a_1v1_cycle_moves_ratings_exactly_as_the_glicko2_library_does() {
    let server = TestServer::start("").await;
    let mut client = server.client().await;
    let a = form_match(&mut client, "1v1", &[&["ann"], &["ben"]]).await;
    let placements = placements_with_winner(&a, "ann");
    let ack = server
        .game_server()
        .await
        .report_match_result(report(&a.match_id, placements.clone()))
        .await
        .unwrap()
        .into_inner();
    assert!(!ack.duplicate);
    assert_eq!(ack.changes.len(), 2);

    let system = Config::from_toml_str("").unwrap().queues["1v1"]
        .rating
        .clone();
    let initial = system.initial();
    let expected = system
        .rate(&MatchInput {
            teams: &[
                vec![PlayerInput::new(initial)],
                vec![PlayerInput::new(initial)],
            ],
            placements: &placements,
        })
        .unwrap();
    for (t, team) in a.teams.iter().enumerate() {
        let player = &team.player_ids[0];
        let change = ack.changes.iter().find(|c| &c.player_id == player).unwrap();
        assert_eq!(skill(change.before.as_ref().unwrap()), initial);
        assert_eq!(skill(change.after.as_ref().unwrap()), expected[t][0]);
        let view = rating_of(&server, player, "1v1").await;
        assert_eq!(skill(view.rating.as_ref().unwrap()), expected[t][0]);
        assert_eq!(view.games, 1);
        assert_eq!(view.wins, u32::from(player == "ann"));
        assert_eq!(view.status, "idle");
    }
    let ann = rating_of(&server, "ann", "1v1").await.rating.unwrap();
    assert!(ann.mean > 1500.0);
    // Both may queue again.
    common::enter(&mut client, "1v1", &["ann"]).await;
}

#[tokio::test]
async fn a_5v5_weng_lin_cycle_with_parties_matches_the_library() {
    let server = TestServer::start("").await;
    let mut client = server.client().await;
    let tickets: Vec<Vec<String>> = vec![
        vec!["p0".into(), "p1".into()],
        vec!["p2".into(), "p3".into(), "p4".into()],
        vec!["p5".into()],
        vec!["p6".into()],
        vec!["p7".into(), "p8".into()],
        vec!["p9".into()],
    ];
    let refs: Vec<Vec<&str>> = tickets
        .iter()
        .map(|t| t.iter().map(String::as_str).collect())
        .collect();
    let refs: Vec<&[&str]> = refs.iter().map(Vec::as_slice).collect();
    let a = form_match(&mut client, "5v5", &refs).await;
    assert_eq!(a.teams.len(), 2);
    for team in &a.teams {
        assert_eq!(team.player_ids.len(), 5);
    }
    // Parties stay whole.
    for party in tickets.iter().filter(|t| t.len() > 1) {
        assert!(
            a.teams
                .iter()
                .any(|team| party.iter().all(|p| team.player_ids.contains(p))),
            "party {party:?} split across {:?}",
            a.teams
        );
    }
    let placements = vec![2, 1];
    let ack = server
        .game_server()
        .await
        .report_match_result(report(&a.match_id, placements.clone()))
        .await
        .unwrap()
        .into_inner();
    let system = Config::from_toml_str("").unwrap().queues["5v5"]
        .rating
        .clone();
    let initial = system.initial();
    let inputs: Vec<Vec<PlayerInput>> = a
        .teams
        .iter()
        .map(|t| {
            t.player_ids
                .iter()
                .map(|_| PlayerInput::new(initial))
                .collect()
        })
        .collect();
    let expected = system
        .rate(&MatchInput {
            teams: &inputs,
            placements: &placements,
        })
        .unwrap();
    for (t, team) in a.teams.iter().enumerate() {
        for (i, p) in team.player_ids.iter().enumerate() {
            let change = ack.changes.iter().find(|c| &c.player_id == p).unwrap();
            assert_eq!(skill(change.after.as_ref().unwrap()), expected[t][i], "{p}");
        }
    }
    let winner = &a.teams[1].player_ids[0];
    assert!(rating_of(&server, winner, "5v5").await.rating.unwrap().mean > 25.0);
}

#[tokio::test]
async fn a_duplicate_report_returns_the_first_outcome_and_applies_nothing() {
    let server = TestServer::start("").await;
    let mut client = server.client().await;
    let a = form_match(&mut client, "1v1", &[&["d1"], &["d2"]]).await;
    let mut gs = server.game_server().await;
    let won_by_d1 = placements_with_winner(&a, "d1");
    let first = gs
        .report_match_result(report(&a.match_id, won_by_d1.clone()))
        .await
        .unwrap()
        .into_inner();
    let second = gs
        .report_match_result(report(&a.match_id, won_by_d1.clone()))
        .await
        .unwrap()
        .into_inner();
    assert!(second.duplicate);
    assert_eq!(first.changes, second.changes);
    // A repeat with another outcome is refused, naming the field; one malformed is refused as
    // a first report would be. Neither changes anything.
    let flipped = gs
        .report_match_result(report(&a.match_id, placements_with_winner(&a, "d2")))
        .await
        .unwrap_err();
    assert_eq!(flipped.code(), Code::FailedPrecondition, "{flipped:?}");
    assert!(flipped.message().contains("placements"), "{flipped:?}");
    let empty = gs
        .report_match_result(report(&a.match_id, Vec::new()))
        .await
        .unwrap_err();
    assert_eq!(empty.code(), Code::InvalidArgument, "{empty:?}");
    assert!(empty.message().contains("placements"), "{empty:?}");
    let scored = gs
        .report_match_result(proto::MatchResult {
            team_scores: vec![16.0, 3.0],
            ..report(&a.match_id, won_by_d1.clone())
        })
        .await
        .unwrap_err();
    assert_eq!(scored.code(), Code::FailedPrecondition, "{scored:?}");
    assert!(scored.message().contains("team_scores"), "{scored:?}");
    assert_eq!(rating_of(&server, "d1", "1v1").await.games, 1);
    // Many concurrent duplicates: exactly the same answer, applied once.
    let mut tasks = Vec::new();
    for _ in 0..16 {
        let mut gs = server.game_server().await;
        let (id, placements) = (a.match_id.clone(), won_by_d1.clone());
        tasks.push(tokio::spawn(async move {
            gs.report_match_result(report(&id, placements))
                .await
                .unwrap()
                .into_inner()
        }));
    }
    for t in tasks {
        let ack = t.await.unwrap();
        assert!(ack.duplicate);
        assert_eq!(ack.changes, first.changes);
    }
    assert_eq!(rating_of(&server, "d2", "1v1").await.games, 1);
}

#[tokio::test]
async fn concurrent_first_reports_of_one_match_apply_it_once() {
    let server = TestServer::start("").await;
    let mut client = server.client().await;
    let a = form_match(&mut client, "1v1", &[&["c1"], &["c2"]]).await;
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let mut gs = server.game_server().await;
        let id = a.match_id.clone();
        tasks.push(tokio::spawn(async move {
            gs.report_match_result(report(&id, vec![1, 2]))
                .await
                .unwrap()
                .into_inner()
        }));
    }
    let mut fresh = 0;
    let mut changes = None;
    for t in tasks {
        let ack = t.await.unwrap();
        fresh += usize::from(!ack.duplicate);
        let c = changes.get_or_insert_with(|| ack.changes.clone());
        assert_eq!(*c, ack.changes);
    }
    assert_eq!(fresh, 1, "exactly one report applies the result");
    assert_eq!(rating_of(&server, "c1", "1v1").await.games, 1);
}

#[tokio::test]
async fn bad_reports_are_rejected_with_the_field_named_and_change_nothing() {
    let server = TestServer::start("").await;
    let mut client = server.client().await;
    let a = form_match(&mut client, "1v1", &[&["b1"], &["b2"]]).await;
    let mut gs = server.game_server().await;
    let cases = vec![
        (
            report(&a.match_id, vec![1]),
            Code::InvalidArgument,
            "placements",
        ),
        (
            report(&a.match_id, vec![1, 3]),
            Code::InvalidArgument,
            "placements[1]",
        ),
        (
            report(&a.match_id, vec![0, 1]),
            Code::InvalidArgument,
            "placements[0]",
        ),
        (
            proto::MatchResult {
                performance: BTreeMap::from([("b1".to_string(), f64::NAN)])
                    .into_iter()
                    .collect(),
                ..report(&a.match_id, vec![1, 2])
            },
            Code::InvalidArgument,
            "performance",
        ),
        (
            proto::MatchResult {
                performance: BTreeMap::from([("stranger".to_string(), 1.0)])
                    .into_iter()
                    .collect(),
                ..report(&a.match_id, vec![1, 2])
            },
            Code::InvalidArgument,
            "performance",
        ),
        (
            proto::MatchResult {
                abandoned_player_ids: vec!["stranger".into()],
                ..report(&a.match_id, vec![1, 2])
            },
            Code::InvalidArgument,
            "abandoned_player_ids[0]",
        ),
        (report("", vec![1, 2]), Code::InvalidArgument, "match_id"),
        (report("m-unknown", vec![1, 2]), Code::NotFound, "m-unknown"),
    ];
    for (request, code, needle) in cases {
        let err = gs.report_match_result(request.clone()).await.unwrap_err();
        assert_eq!(err.code(), code, "{request:?}: {}", err.message());
        assert!(
            err.message().contains(needle),
            "{needle:?} not in {:?}",
            err.message()
        );
    }
    assert_eq!(rating_of(&server, "b1", "1v1").await.games, 0);
    assert_eq!(rating_of(&server, "b1", "1v1").await.status, "in_match");
    // The match still takes a valid report afterwards.
    let ack = gs
        .report_match_result(report(&a.match_id, vec![1, 2]))
        .await
        .unwrap()
        .into_inner();
    assert!(!ack.duplicate);
}

#[tokio::test]
async fn an_abandoner_takes_a_loss_and_the_player_who_stayed_does_not_move() {
    let server = TestServer::start("").await;
    let mut client = server.client().await;
    let a = form_match(&mut client, "1v1", &[&["quits"], &["stays"]]).await;
    let ack = server
        .game_server()
        .await
        .report_match_result(proto::MatchResult {
            abandoned_player_ids: vec!["quits".into()],
            ..report(&a.match_id, placements_with_winner(&a, "quits"))
        })
        .await
        .unwrap()
        .into_inner();
    let quits = ack.changes.iter().find(|c| c.player_id == "quits").unwrap();
    assert!(quits.after.as_ref().unwrap().mean < quits.before.as_ref().unwrap().mean);
    let stays = ack.changes.iter().find(|c| c.player_id == "stays").unwrap();
    assert_eq!(stays.after, stays.before);
    let view = rating_of(&server, "stays", "1v1").await;
    assert_eq!((view.games, view.wins), (0, 0), "a quit is not a win");
    assert_eq!(view.status, "idle");
}

#[tokio::test]
async fn cancel_match_frees_the_players_and_refuses_a_result() {
    let server = TestServer::start("").await;
    let mut client = server.client().await;
    let mut gs = server.game_server().await;
    let mut offers = common::serve(&mut gs, "gs-x:1").await;
    common::enter(&mut client, "1v1", &["x1"]).await;
    common::enter(&mut client, "1v1", &["x2"]).await;
    let a = common::next(&mut offers).await;
    // Once started, a cancel ends the match (before, it would requeue its tickets).
    gs.start_match(proto::StartMatchRequest {
        match_id: a.match_id.clone(),
    })
    .await
    .unwrap();
    let cancelled = gs
        .cancel_match(proto::CancelMatchRequest {
            match_id: a.match_id.clone(),
            reason: "server crashed".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(cancelled.requeued_ticket_ids.is_empty());
    assert_eq!(rating_of(&server, "x1", "1v1").await.status, "idle");
    let err = gs
        .report_match_result(report(&a.match_id, vec![1, 2]))
        .await
        .unwrap_err();
    // As StartMatch answers it: the match is known, and ended cancelled.
    assert_eq!(err.code(), Code::FailedPrecondition, "{err:?}");
    assert!(err.message().contains("cancelled"), "{err:?}");
    common::enter(&mut client, "1v1", &["x1"]).await;
}

#[tokio::test]
async fn results_and_live_matches_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let (reported, live, after) = {
        let mut server = TestServer::start_in(dir.path(), "").await;
        let mut client = server.client().await;
        let reported = form_match(&mut client, "1v1", &[&["r1"], &["r2"]]).await;
        let ack = server
            .game_server()
            .await
            .report_match_result(report(&reported.match_id, vec![1, 2]))
            .await
            .unwrap()
            .into_inner();
        let live = form_match(&mut client, "1v1", &[&["l1"], &["l2"]]).await;
        server.stop().await.unwrap();
        (reported, live, ack)
    };
    let server = TestServer::start_in(dir.path(), "").await;
    for change in &after.changes {
        let view = rating_of(&server, &change.player_id, "1v1").await;
        assert_eq!(view.rating, change.after, "{}", change.player_id);
        assert_eq!(view.games, 1);
    }
    let mut gs = server.game_server().await;
    let again = gs
        .report_match_result(report(&reported.match_id, vec![1, 2]))
        .await
        .unwrap()
        .into_inner();
    assert!(
        again.duplicate,
        "a result is never applied twice, across restarts too"
    );
    assert_eq!(again.changes, after.changes);
    // The match formed before the restart can still be reported.
    assert_eq!(rating_of(&server, "l1", "1v1").await.status, "in_match");
    let ack = gs
        .report_match_result(report(&live.match_id, vec![1, 2]))
        .await
        .unwrap()
        .into_inner();
    assert!(!ack.duplicate);
    assert_eq!(rating_of(&server, "l1", "1v1").await.games, 1);
}

/// A report repeated after a restart whose config dropped the match's queue is answered from
/// its stored acknowledgement (ratings as stored): the request names no queue, and the result
/// was applied.
#[tokio::test]
async fn a_report_repeated_after_its_queue_was_dropped_gets_its_acknowledgement() {
    let dir = tempfile::tempdir().unwrap();
    let duel = "[queues.duel]\nteams = 2\nteam_size = 1\nmax_party_size = 1\nranking = \"none\"\n";
    let (m, first) = {
        let mut server = TestServer::start_in(dir.path(), duel).await;
        let mut client = server.client().await;
        let m = form_match(&mut client, "duel", &[&["q1"], &["q2"]]).await;
        let first = server
            .game_server()
            .await
            .report_match_result(report(&m.match_id, placements_with_winner(&m, "q1")))
            .await
            .unwrap()
            .into_inner();
        server.stop().await.unwrap();
        (m, first)
    };
    let server = TestServer::start_in(dir.path(), "").await;
    let again = server
        .game_server()
        .await
        .report_match_result(report(&m.match_id, placements_with_winner(&m, "q1")))
        .await
        .unwrap()
        .into_inner();
    assert!(again.duplicate);
    let means = |ack: &proto::MatchResultAck| -> Vec<(String, f64)> {
        ack.changes
            .iter()
            .map(|c| (c.player_id.clone(), c.after.as_ref().unwrap().mean))
            .collect()
    };
    assert_eq!(means(&again), means(&first));
}

/// 1v1 as classic periodic Glicko-2 with two-second rating periods.
const PERIODIC: &str = r#"
[queues.1v1.rating]
system = "glicko2"
mode = "periodic"
rating_period_days = 0.000023148148148148148
inactivity_granularity_seconds = 0.0
"#;

#[tokio::test]
async fn a_periodic_queue_moves_ratings_when_the_period_ends_and_keeps_them() {
    let dir = tempfile::tempdir().unwrap();
    let system = Config::from_toml_str(PERIODIC).unwrap().queues["1v1"]
        .rating
        .clone();
    let initial = system.initial();
    let expected = system
        .rate_period(
            &initial,
            &[matchmaker::rating::teams::PeriodResult {
                opponent: initial,
                score: 1.0,
                weight: 1.0,
            }],
            0.0,
        )
        .unwrap();
    {
        let mut server = TestServer::start_in(dir.path(), PERIODIC).await;
        let mut client = server.client().await;
        let m = form_match(&mut client, "1v1", &[&["pa"], &["pb"]]).await;
        let ack = server
            .game_server()
            .await
            .report_match_result(report(&m.match_id, placements_with_winner(&m, "pa")))
            .await
            .unwrap()
            .into_inner();
        // Within the period nothing moves but the games count.
        let change = ack.changes.iter().find(|c| c.player_id == "pa").unwrap();
        assert_eq!(change.before, change.after, "{ack:?}");
        // Read back, the games count at once; the rating is still the initial one unless the
        // two-second period closed since the answer, and then it is the period's.
        let now = rating_of(&server, "pa", "1v1").await;
        assert_eq!(now.games, 1, "{now:?}");
        let mean = now.rating.unwrap().mean;
        assert!(
            mean == initial.mean || (mean - expected.mean).abs() < 1e-9,
            "{now:?}"
        );

        // The period closes on its own, though neither player plays again.
        let watched = &server;
        let closed = poll_until("the period to close", || async move {
            let r = rating_of(watched, "pa", "1v1").await.rating.unwrap();
            if r.mean != initial.mean {
                Ok(r)
            } else {
                Err(r)
            }
        })
        .await;
        assert!(
            (closed.mean - expected.mean).abs() < 1e-9,
            "{closed:?} vs {expected:?}"
        );
        assert!((closed.deviation - expected.deviation).abs() < 1e-9);
        let loser = rating_of(&server, "pb", "1v1").await.rating.unwrap();
        assert!(loser.mean < initial.mean, "{loser:?}");
        server.stop().await.unwrap();
    }
    // Journaled: the closed period survives a restart.
    let server = TestServer::start_in(dir.path(), PERIODIC).await;
    let r = rating_of(&server, "pa", "1v1").await.rating.unwrap();
    assert!((r.mean - expected.mean).abs() < 1e-9, "{r:?}");
}

/// [`PERIODIC`] as a ladder: rank points move at the match (the winner's bias) and again at
/// the period's close (Δr·F).
const PERIODIC_LADDER: &str = r#"
[queues.1v1]
ranking = "ladder"

[queues.1v1.rating]
system = "glicko2"
mode = "periodic"
rating_period_days = 0.000023148148148148148
inactivity_granularity_seconds = 0.0
"#;

#[tokio::test]
async fn a_period_close_reports_each_players_rating_change_to_event_watchers() {
    let server = TestServer::start(PERIODIC_LADDER).await;
    let mut client = server.client().await;
    let m = form_match(&mut client, "1v1", &[&["pa"], &["pb"]]).await;
    let ack = server
        .game_server()
        .await
        .report_match_result(report(&m.match_id, placements_with_winner(&m, "pa")))
        .await
        .unwrap()
        .into_inner();
    // The match's two changes, then the close's two, which the server's own pass makes when
    // the two-second period ends though no one plays again.
    let events = common::watch_events(
        &server.channel().await,
        0,
        &[proto::EventKind::RatingChanged],
        4,
    )
    .await;
    let detail =
        |e: &proto::Event| -> serde_json::Value { serde_json::from_str(&e.detail_json).unwrap() };
    for e in &events[..2] {
        let d = detail(e);
        assert_eq!(e.match_id, m.match_id);
        assert_eq!(d["pending_period"], true, "{d}");
        assert_eq!(d["mean_before"], d["mean_after"], "the rating waits: {d}");
    }
    for e in &events[2..] {
        let d = detail(e);
        assert_eq!(e.match_id, "", "a close is no match's change");
        assert_eq!(d["period_close"], true, "{d}");
        let acked = ack
            .changes
            .iter()
            .find(|c| c.player_id == e.player_id)
            .unwrap();
        // Before: where the match left the player; after: what the player holds now.
        assert_eq!(d["rank_points_before"], acked.rank_points_after, "{d}");
        assert_eq!(d["mean_before"], acked.after.as_ref().unwrap().mean, "{d}");
        let now = rating_of(&server, &e.player_id, "1v1").await;
        assert_eq!(d["rank_points_after"], now.rank_points, "{d}");
        assert_eq!(d["mean_after"], now.rating.unwrap().mean, "{d}");
    }
    let closed: BTreeMap<String, serde_json::Value> = events[2..]
        .iter()
        .map(|e| (e.player_id.clone(), detail(e)))
        .collect();
    assert_eq!(closed.len(), 2, "one close per player: {closed:?}");
    // The winner's period moves rank points up by its Δr·F.
    let won = &closed["pa"];
    assert!(
        won["rank_points_after"].as_i64() > won["rank_points_before"].as_i64(),
        "{won}"
    );
}

#[tokio::test]
async fn an_unallocated_match_times_out_and_its_tickets_return_to_the_queue() {
    unallocated_match_times_out("[server]\nallocation_timeout_seconds = 0.05\n").await;
}

#[tokio::test]
async fn tickets_outlive_their_retention_while_their_match_waits_for_a_server() {
    // Finished tickets are forgotten at once, yet the match's tickets still go back to the
    // queue when it times out: they are not finished until a server takes the match.
    unallocated_match_times_out(
        "[server]\nallocation_timeout_seconds = 0.05\nfinished_ticket_retention_seconds = 0.0\n",
    )
    .await;
}

async fn unallocated_match_times_out(config: &str) {
    let server = TestServer::start(config).await;
    let mut client = server.client().await;
    let t1 = common::enter(&mut client, "1v1", &["u1"]).await;
    common::enter(&mut client, "1v1", &["u2"]).await;
    let mut stream = client
        .watch_ticket(proto::WatchTicketRequest { ticket_id: t1 })
        .await
        .unwrap()
        .into_inner();
    // No game server ever serves: MATCHED, then back to SEARCHING with the wait kept, then
    // MATCHED again into a new match.
    let mut seen = Vec::new();
    let mut first_match = None;
    loop {
        let u = common::next(&mut stream).await;
        let state = proto::TicketState::try_from(u.state).unwrap();
        seen.push(state);
        match (state, &first_match) {
            (proto::TicketState::Matched, None) => {
                first_match = Some(u.assignment.unwrap().match_id);
            }
            (proto::TicketState::Searching, Some(_)) => {
                assert!(u.reason.contains("front of the queue"), "{}", u.reason);
                assert!(u.wait_seconds > 0.0);
            }
            (proto::TicketState::Matched, Some(first)) => {
                assert_ne!(&u.assignment.unwrap().match_id, first);
                assert!(seen.contains(&proto::TicketState::Searching));
                break;
            }
            _ => {}
        }
    }
    let err = server
        .game_server()
        .await
        .report_match_result(report(&first_match.unwrap(), vec![1, 2]))
        .await
        .unwrap_err();
    assert_eq!(
        err.code(),
        Code::NotFound,
        "the dissolved match takes no result"
    );
}

#[tokio::test]
async fn a_party_gets_its_own_rating_updated_by_its_results_and_persisted() {
    let dir = tempfile::tempdir().unwrap();
    {
        let mut server = TestServer::start_in(dir.path(), "").await;
        let mut client = server.client().await;
        let a = form_match(&mut client, "2v2", &[&["pa", "pb"], &["s1"], &["s2"]]).await;
        assert!(
            a.teams
                .iter()
                .any(|t| t.player_ids.contains(&"pa".to_string())
                    && t.player_ids.contains(&"pb".to_string())),
            "the party plays on one team: {:?}",
            a.teams
        );
        server
            .game_server()
            .await
            .report_match_result(report(&a.match_id, placements_with_winner(&a, "pa")))
            .await
            .unwrap();
        server.stop().await.unwrap();
    }
    let config = matchmaker::config::Config::from_toml_str("").unwrap();
    let store = matchmaker::store::open(dir.path(), &config.store).unwrap();
    let parties = store.load_parties().unwrap();
    assert_eq!(parties.len(), 1);
    let record = &parties[0].1["2v2"];
    assert_eq!(record.games, 1);
    assert!(
        record.skill.mean > 1500.0,
        "a winning party rises: {record:?}"
    );
}

#[tokio::test]
async fn a_match_without_a_result_past_the_match_timeout_frees_its_players() {
    let dir = tempfile::tempdir().unwrap();
    let config = "[server]\nallocation_timeout_seconds = 0.01\nmatch_timeout_seconds = 0.02\n";
    let a = {
        let mut server = TestServer::start_in(dir.path(), "").await;
        let mut client = server.client().await;
        let a = form_match(&mut client, "1v1", &[&["stuck1"], &["stuck2"]]).await;
        server.stop().await.unwrap();
        a
    };
    // After the restart the restored match is long past the (tiny) timeout; the first sweep
    // (at the loop's start) voids it.
    let server = TestServer::start_in(dir.path(), config).await;
    let watched = &server;
    poll_until("the stale match to be cancelled", || async move {
        let v = rating_of(watched, "stuck1", "1v1").await;
        if v.status == "idle" { Ok(()) } else { Err(v) }
    })
    .await;
    // The sweep frees the players before it forgets the match: a report in between finds it
    // cancelled (FAILED_PRECONDITION, nothing applied), then not at all.
    let id = &a.match_id;
    let err = poll_until("the cancelled match to be forgotten", || async move {
        let err = watched
            .game_server()
            .await
            .report_match_result(report(id, vec![1, 2]))
            .await
            .unwrap_err();
        if err.code() == Code::FailedPrecondition {
            Err(err)
        } else {
            Ok(err)
        }
    })
    .await;
    assert_eq!(err.code(), Code::NotFound);
    let v = rating_of(&server, "stuck2", "1v1").await;
    assert_eq!((v.status.as_str(), v.games), ("idle", 0));
}

/// A repeated report whose acknowledgement the retention trimmed is refused over gRPC as past
/// the retention, and changes nothing: the result stays applied once. So is a report of an id
/// minted before the retention.
#[tokio::test]
async fn a_report_past_the_acknowledgement_retention_is_refused_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let mut server = TestServer::start_in(&data, "").await;
    let mut client = server.client().await;
    let m = form_match(&mut client, "1v1", &[&["kept-a"], &["kept-b"]]).await;
    let placements = placements_with_winner(&m, "kept-a");
    server
        .game_server()
        .await
        .report_match_result(report(&m.match_id, placements.clone()))
        .await
        .unwrap();
    let applied = rating_of(&server, "kept-a", "1v1").await;
    server.stop().await.unwrap();
    // Days later the trim (every minute, on every backend) has taken the acknowledgement.
    {
        let store =
            matchmaker::store::open(&data, &Config::from_toml_str("").unwrap().store).unwrap();
        let later = store.now_unix() + 3.0 * 86_400.0;
        assert_eq!(store.trim_acks(later, usize::MAX).unwrap(), 1);
        store.flush().unwrap();
    }
    let server = TestServer::start_in(&data, "").await;
    let gs = server.game_server().await;
    let refused = gs
        .clone()
        .report_match_result(report(&m.match_id, placements))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::FailedPrecondition, "{refused:?}");
    assert!(
        refused.message().contains(&m.match_id)
            && refused
                .message()
                .contains("was completed and its result applied")
            && refused.message().contains("ack_retention_seconds"),
        "{refused:?}"
    );
    assert_eq!(rating_of(&server, "kept-a", "1v1").await, applied);
    // Minted at 1 s past the epoch: neither live nor in the history, long past any retention.
    let ancient = "m-0000000003e8ffffffffffffffffffff";
    let refused = gs
        .clone()
        .report_match_result(report(ancient, vec![1, 2]))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::FailedPrecondition, "{refused:?}");
    assert!(
        refused.message().contains(ancient) && refused.message().contains("formed longer ago"),
        "{refused:?}"
    );
}

//! Rank points over real gRPC: INVERSUS for 1v1, the Skyweaver ladder with a hard floor for 5v5,
//! and the leaderboard.

mod common;

use std::collections::BTreeMap;

use common::{TestServer, form_match, placements_with_winner, player as view};
use matchmaker::config::Config;
use matchmaker::ids::PlayerId;
use matchmaker::proto;
use matchmaker::ranking::{self, inversus};
use matchmaker::rating::Skill;
use matchmaker::records::PoolRecord;
use tonic::Code;

async fn play(
    server: &TestServer,
    queue: &str,
    tickets: &[&[&str]],
    winner: &str,
) -> proto::MatchResultAck {
    let mut client = server.client().await;
    let a = form_match(&mut client, queue, tickets).await;
    server
        .game_server()
        .await
        .report_match_result(proto::MatchResult {
            match_id: a.match_id.clone(),
            placements: placements_with_winner(&a, winner),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
}

#[tokio::test]
async fn inversus_rank_points_follow_the_ranking_library() {
    let server = TestServer::start("").await;
    let ack = play(&server, "1v1", &[&["win"], &["lose"]], "win").await;
    let cfg = Config::from_toml_str("").unwrap().ranking.inversus;
    let change = |p: &str| {
        ack.changes
            .iter()
            .find(|c| c.player_id == p)
            .unwrap()
            .clone()
    };
    let (w, l) = (change("win"), change("lose"));
    let after = w.after.as_ref().unwrap();
    let expected = inversus::update(
        &cfg,
        0,
        &inversus::InversusMatch {
            skill_after: Skill {
                mean: after.mean,
                deviation: after.deviation,
                volatility: after.volatility,
            },
            own_mean_before: 1500.0,
            opponent_mean_before: 1500.0,
            outcome: ranking::Outcome::Win,
        },
    );
    assert_eq!(
        (w.rank_points_before, w.rank_points_after),
        (0, i64::from(expected.after))
    );
    assert!(w.rank_points_after >= 1, "a win is worth at least 1 RP");
    assert_eq!(
        (l.rank_points_before, l.rank_points_after),
        (0, 0),
        "clamped at 0"
    );
    assert_eq!(
        view(&server, "win", "1v1").await.rank_points,
        w.rank_points_after
    );
}

fn seed(dir: &std::path::Path, players: &[(&str, u32, u32)]) {
    let config = Config::from_toml_str("").unwrap();
    let store = matchmaker::store::open(dir, &config.store).unwrap();
    for &(id, rp, floor) in players {
        let record = PoolRecord {
            skill: Skill {
                mean: 25.0,
                deviation: 25.0 / 3.0,
                volatility: 0.0,
            },
            rank_points: rp,
            games: 10,
            wins: 5,
            last_played_unix: None,
            ladder_floor: floor,
            win_streak: 0,
            period: None,
        };
        store
            .put_players(&[(
                &PlayerId::from(id),
                &BTreeMap::from([("5v5".to_string(), record)]),
            )])
            .unwrap();
    }
    store.flush().unwrap();
}

#[tokio::test]
async fn a_ladder_player_crossing_a_hard_floor_never_drops_below_it() {
    let dir = tempfile::tempdir().unwrap();
    let climbers = ["c0", "c1", "c2", "c3", "c4"];
    let others = ["o0", "o1", "o2", "o3", "o4"];
    let mut seeded: Vec<(&str, u32, u32)> = climbers.iter().map(|&c| (c, 590, 200)).collect();
    seeded.extend(others.iter().map(|&o| (o, 300, 200)));
    seed(dir.path(), &seeded);
    // This test is about rank points, not matchmaking: let any two parties match at once.
    let server = TestServer::start_in(
        dir.path(),
        "[queues.5v5.matching]\nwindow = 1000.0\nmin_quality = 0.0\nexpansion = []\n",
    )
    .await;
    assert_eq!(view(&server, "c0", "5v5").await.tier, "Trainee III");

    // One win takes the climbers past 600: Apprentice I, a hard floor.
    play(&server, "5v5", &[&climbers, &others], "c0").await;
    let up = view(&server, "c0", "5v5").await;
    assert!(up.rank_points >= 600, "{up:?}");
    assert!(up.tier.starts_with("Apprentice"), "{up:?}");

    // Losses pull them down, but never below the floor they reached.
    let mut lowest = up.rank_points;
    for _ in 0..6 {
        let ack = play(&server, "5v5", &[&climbers, &others], "o0").await;
        let c = ack.changes.iter().find(|c| c.player_id == "c0").unwrap();
        assert!(c.rank_points_after <= c.rank_points_before);
        lowest = lowest.min(c.rank_points_after);
        assert!(c.rank_points_after >= 600, "dropped below the floor: {c:?}");
    }
    assert_eq!(lowest, 600, "six losses reach the floor and stop there");
}

#[tokio::test]
async fn the_leaderboard_orders_by_rank_points_and_pages() {
    let server = TestServer::start("").await;
    for i in 0..4 {
        let (a, b) = (format!("a{i}"), format!("b{i}"));
        play(&server, "1v1", &[&[a.as_str()], &[b.as_str()]], &a).await;
    }
    let mut client = server.client().await;
    let full = client
        .get_leaderboard(proto::GetLeaderboardRequest {
            queue: "1v1".into(),
            offset: 0,
            limit: 100,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(full.total, 8);
    assert_eq!(full.entries.len(), 8);
    assert!(
        full.entries
            .windows(2)
            .all(|w| w[0].rank_points >= w[1].rank_points)
    );
    assert!(
        full.entries[..4]
            .iter()
            .all(|e| e.player_id.starts_with('a'))
    );
    let mut paged = Vec::new();
    for offset in (0..8).step_by(3) {
        let page = client
            .get_leaderboard(proto::GetLeaderboardRequest {
                queue: "1v1".into(),
                offset,
                limit: 3,
            })
            .await
            .unwrap()
            .into_inner();
        paged.extend(page.entries);
    }
    assert_eq!(paged, full.entries);
    let err = client
        .get_leaderboard(proto::GetLeaderboardRequest {
            queue: "nope".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
}

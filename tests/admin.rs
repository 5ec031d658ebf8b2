//! AdminService over real gRPC and through `matchmaker admin`: rating edits, soft and hard season
//! resets checked number by number, the end of a season, migration from Elo with bad rows, the
//! resumable export, and a reset racing with result reports.

mod common;

use std::collections::BTreeMap;

use common::{TestServer, form_match, placements_with_winner, player as view_of};
use matchmaker::config::Config;
use matchmaker::proto;
use matchmaker::rating::Skill;
use tokio_stream::StreamExt;
use tonic::Code;

/// A 1v1 ladder queue rated with Glicko-2, so both the RP table and the MMR rescale apply.
const LADDER: &str = r#"
[queues.lad]
teams = 2
team_size = 1
max_party_size = 1
ranking = "ladder"

[queues.lad.rating]
system = "glicko2"
"#;

fn skill(r: &proto::Rating) -> Skill {
    Skill {
        mean: r.mean,
        deviation: r.deviation,
        volatility: r.volatility,
    }
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

async fn set(
    server: &TestServer,
    player: &str,
    queue: &str,
    mean: f64,
    deviation: f64,
    rp: Option<i64>,
) -> proto::PlayerView {
    server
        .admin()
        .await
        .set_rating(proto::SetRatingRequest {
            player_id: player.into(),
            queue: queue.into(),
            rating: Some(proto::Rating {
                mean,
                deviation,
                ..Default::default()
            }),
            rank_points: rp,
        })
        .await
        .expect("set_rating")
        .into_inner()
}

async fn reset(
    server: &TestServer,
    kind: proto::SeasonResetKind,
    queue: &str,
) -> proto::SeasonResetResponse {
    server
        .admin()
        .await
        .season_reset(proto::SeasonResetRequest {
            kind: kind as i32,
            queue: queue.into(),
            dry_run: false,
        })
        .await
        .expect("season_reset")
        .into_inner()
}

#[tokio::test]
async fn set_rating_is_read_back_and_bad_input_names_the_field() {
    let server = TestServer::start("").await;
    let v = set(&server, "ann", "1v1", 1712.5, 80.0, Some(4321)).await;
    assert_eq!((v.rank_points, v.player_id.as_str()), (4321, "ann"));
    let read = view_of(&server, "ann", "1v1").await;
    let r = read.rating.unwrap();
    assert_eq!((r.mean, r.deviation), (1712.5, 80.0));
    assert!(r.volatility > 0.0, "zero volatility keeps the system's");
    assert_eq!(read.rank_points, 4321);

    let mut admin = server.admin().await;
    for (req, field) in [
        (
            proto::SetRatingRequest {
                player_id: "ann".into(),
                queue: "1v1".into(),
                rating: Some(proto::Rating {
                    mean: f64::NAN,
                    deviation: 80.0,
                    ..Default::default()
                }),
                rank_points: None,
            },
            "rating.mean",
        ),
        (
            proto::SetRatingRequest {
                player_id: "ann".into(),
                queue: "1v1".into(),
                rating: None,
                rank_points: None,
            },
            "rating",
        ),
        (
            proto::SetRatingRequest {
                player_id: "ann".into(),
                queue: "1v1".into(),
                rating: Some(proto::Rating {
                    mean: 1500.0,
                    deviation: 80.0,
                    ..Default::default()
                }),
                rank_points: Some(-1),
            },
            "rank_points",
        ),
        // Finite but outside the system's domain: every later result would refuse it.
        (
            proto::SetRatingRequest {
                player_id: "ann".into(),
                queue: "1v1".into(),
                rating: Some(proto::Rating {
                    mean: 1500.0,
                    deviation: 80.0,
                    volatility: 20.0,
                    ..Default::default()
                }),
                rank_points: None,
            },
            "rating.volatility",
        ),
        (
            proto::SetRatingRequest {
                player_id: "ann".into(),
                queue: "1v1".into(),
                rating: Some(proto::Rating {
                    mean: 1500.0,
                    deviation: 1e12,
                    ..Default::default()
                }),
                rank_points: None,
            },
            "rating.deviation",
        ),
        (
            proto::SetRatingRequest {
                player_id: "ann".into(),
                queue: "nope".into(),
                rating: None,
                rank_points: None,
            },
            "queue",
        ),
        (
            proto::SetRatingRequest {
                player_id: "ann".into(),
                queue: "1v1".into(),
                rating: Some(proto::Rating {
                    mean: 1500.0,
                    deviation: 80.0,
                    ..Default::default()
                }),
                rank_points: Some(50_000),
            },
            "rank_points",
        ),
    ] {
        let e = admin.set_rating(req).await.unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
        assert!(e.message().starts_with(field), "{field}: {}", e.message());
    }
    // Nothing a refused call carried was written.
    let r = view_of(&server, "ann", "1v1").await.rating.unwrap();
    assert_eq!((r.mean, r.deviation), (1712.5, 80.0));
    // A rating past Glicko-2's bounds (6.045 internal units from 1500) is kept within them,
    // as every result keeps it.
    let bounded = set(&server, "bea", "1v1", 3000.0, 80.0, None).await;
    let mean = bounded.rating.unwrap().mean;
    assert!((mean - (1500.0 + 6.045 * 173.7178)).abs() < 0.1, "{mean}");
    let e = admin
        .season_reset(proto::SeasonResetRequest {
            kind: 0,
            queue: String::new(),
            dry_run: false,
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.message().starts_with("kind"), "{}", e.message());
}

#[tokio::test]
async fn hard_reset_rescales_mmr_and_sets_rp_from_the_tier_table_number_by_number() {
    let mut server = TestServer::start(LADDER).await;
    // (player, r, RD, RP): tiers Wanderer, Expert I, Expert III, Grandweaver (top 100 of RP >= 1200).
    let players = [
        ("w", 1200.0, 60.0, 250),
        ("e1", 1600.0, 70.0, 950),
        ("e3", 1800.0, 80.0, 1150),
        ("gw", 2000.0, 90.0, 1350),
    ];
    for (p, r, rd, rp) in players {
        set(&server, p, "lad", r, rd, Some(rp)).await;
    }
    assert_eq!(view_of(&server, "gw", "lad").await.tier, "Grandweaver");
    let out = reset(&server, proto::SeasonResetKind::Hard, "lad").await;
    assert_eq!((out.season, out.week, out.players_changed), (2, 0, 4));

    // r' = 1500 + (r - 1200) / (2000 - 1200) * 750; RD' = 350; RP' = the tier's hard-reset value.
    let expected = [
        ("w", 1500.0, 250, "Wanderer"),
        ("e1", 1875.0, 600, "Apprentice I"),
        ("e3", 2062.5, 800, "Apprentice III"),
        ("gw", 2250.0, 1000, "Expert II"),
    ];
    let initial_volatility = Config::from_toml_str(LADDER).unwrap().queues["lad"]
        .rating
        .initial()
        .volatility;
    for (p, r, rp, tier) in expected {
        let v = view_of(&server, p, "lad").await;
        let rating = v.rating.unwrap();
        assert!(close(rating.mean, r), "{p}: {} vs {r}", rating.mean);
        assert!(close(rating.deviation, 350.0), "{p}: {}", rating.deviation);
        assert!(close(rating.volatility, initial_volatility), "{p}");
        assert_eq!(v.rank_points, rp, "{p}");
        assert_eq!(v.tier, tier, "{p}");
    }
    // No EndSeason came first, so the reset recorded the season's ranks itself.
    for (p, tier) in [("w", "Wanderer"), ("e1", "Expert I"), ("gw", "Grandweaver")] {
        let history = view_of(&server, p, "lad").await.season_history;
        assert_eq!(history.len(), 1, "{p}: {history:?}");
        assert_eq!((history[0].season, history[0].tier.as_str()), (1, tier));
    }
    // Other pools were not touched (the reset named one queue).
    let untouched = view_of(&server, "w", "1v1").await;
    assert_eq!(untouched.games, 0);

    // The new season and the reset survive a restart.
    server.stop().await.unwrap();
    let dir = server.data_dir.clone();
    let server2 = TestServer::start_in(&dir, LADDER).await;
    let v = view_of(&server2, "e3", "lad").await;
    assert!(close(v.rating.unwrap().mean, 2062.5));
    assert_eq!(v.rank_points, 800);
    let out = reset(&server2, proto::SeasonResetKind::Soft, "lad").await;
    assert_eq!((out.season, out.week), (2, 1));
    drop(server);
}

#[tokio::test]
async fn hard_reset_of_a_weng_lin_pool_rescales_on_its_own_scale() {
    // The default 5v5 ladder is Weng-Lin (μ₀ 25, σ₀ 25/3): the Glicko rule read in initial
    // deviations, so μ' spans 25 to 25 + 750/350 · σ₀ and σ' = σ₀.
    let server = TestServer::start("").await;
    set(&server, "low", "5v5", 20.0, 3.0, None).await;
    set(&server, "mid", "5v5", 25.0, 4.0, None).await;
    set(&server, "high", "5v5", 30.0, 5.0, None).await;
    let out = reset(&server, proto::SeasonResetKind::Hard, "5v5").await;
    assert_eq!(out.players_changed, 3);
    let sigma0 = 25.0 / 3.0;
    let top = 25.0 + 750.0 / 350.0 * sigma0;
    for (p, mean) in [("low", 25.0), ("mid", (25.0 + top) / 2.0), ("high", top)] {
        let r = view_of(&server, p, "5v5").await.rating.unwrap();
        assert!(close(r.mean, mean), "{p}: {} vs {mean}", r.mean);
        assert!(close(r.deviation, sigma0), "{p}: {}", r.deviation);
    }
}

#[tokio::test]
async fn soft_reset_cuts_rp_at_the_tier_caps_and_grows_deviation_one_period() {
    let server = TestServer::start(LADDER).await;
    // 100 Grandweavers at 1500, then a Master (rank 101) above its cap, one below, an Expert.
    for i in 0..100 {
        set(
            &server,
            &format!("gw{i:03}"),
            "lad",
            1900.0,
            60.0,
            Some(1500),
        )
        .await;
    }
    set(&server, "m-high", "lad", 1800.0, 60.0, Some(1350)).await;
    set(&server, "m-low", "lad", 1750.0, 60.0, Some(1250)).await;
    set(&server, "expert", "lad", 1700.0, 60.0, Some(1150)).await;
    assert_eq!(view_of(&server, "m-high", "lad").await.tier, "Master");
    assert_eq!(view_of(&server, "gw000", "lad").await.tier, "Grandweaver");
    let before = skill(
        view_of(&server, "m-high", "lad")
            .await
            .rating
            .as_ref()
            .unwrap(),
    );

    let fresh = view_of(&server, "expert", "lad").await;
    assert_eq!((fresh.season, fresh.week), (1, 0));
    let out = reset(&server, proto::SeasonResetKind::Soft, "lad").await;
    assert_eq!((out.season, out.week, out.players_changed), (1, 1, 103));
    let after = view_of(&server, "expert", "lad").await;
    assert_eq!(
        (after.season, after.week),
        (1, 1),
        "GetPlayer shows the season clock"
    );

    let system = Config::from_toml_str(LADDER).unwrap().queues["lad"]
        .rating
        .clone();
    let decayed = system
        .decay(&before, system.rating_period_seconds())
        .unwrap();
    assert!(decayed.deviation > before.deviation);
    for (p, rp) in [
        ("gw000", 1400),
        ("gw099", 1400),
        ("m-high", 1300),
        ("m-low", 1250),
        ("expert", 1150),
    ] {
        let v = view_of(&server, p, "lad").await;
        assert_eq!(v.rank_points, rp, "{p}");
        let r = v.rating.unwrap();
        assert!(
            close(r.deviation, decayed.deviation),
            "{p}: {}",
            r.deviation
        );
    }
    assert_eq!(
        skill(
            view_of(&server, "m-high", "lad")
                .await
                .rating
                .as_ref()
                .unwrap()
        ),
        decayed
    );

    // End of season: end-of-week RP (before the cut) is the Master+ ranking key.
    let mut admin = server.admin().await;
    let ended = admin
        .end_season(proto::EndSeasonRequest {
            queue: "lad".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!((ended.season, ended.players_ranked), (1, 103));

    // GetPlayer shows the player's own history: the week's RP before the cut, the season rank.
    let m = view_of(&server, "m-high", "lad").await;
    assert_eq!(m.week_history.len(), 1, "{:?}", m.week_history);
    assert_eq!(
        (m.week_history[0].season, m.week_history[0].rank_points),
        (1, 1350)
    );
    assert_eq!(m.season_history.len(), 1, "{:?}", m.season_history);
    assert_eq!(m.season_history[0].season, 1);
    assert_eq!(m.season_history[0].tier, "Master");
    assert!(m.season_history[0].place > 0, "Masters get a place");
    let expert = view_of(&server, "expert", "lad").await;
    assert_eq!(expert.season_history[0].place, 0, "below Master: no place");
    assert!(
        view_of(&server, "nobody", "lad")
            .await
            .week_history
            .is_empty()
    );
    let e = admin
        .end_season(proto::EndSeasonRequest {
            queue: "1v1".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.message().starts_with("queue"), "{}", e.message());
}

#[tokio::test]
async fn migration_reports_bad_rows_with_reasons_and_is_idempotent_per_player() {
    let server = TestServer::start("").await;
    let row = |p: &str, elo: f64, rank: &str| proto::EloRow {
        player_id: p.into(),
        elo,
        legacy_rank: rank.into(),
    };
    let rows = vec![
        row("m-a", 1700.0, "Gold"),
        row("m-bad-elo", f64::NAN, "Gold"),
        row("m-bad-rank", 1500.0, "Tin"),
        row("", 1500.0, "Gold"),
        row("m-a", 1800.0, "Gold"),
        row("m-b", 1400.0, "Silver"),
    ];
    let mut admin = server.admin().await;
    let out = admin
        .migrate_from_elo(proto::MigrateFromEloRequest {
            queue: "1v1".into(),
            rows: rows.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!((out.migrated, out.unchanged), (2, 0));
    let rejected: Vec<(u32, &str)> = out
        .rejected
        .iter()
        .map(|r| (r.index, r.reason.as_str()))
        .collect();
    assert_eq!(
        rejected.iter().map(|r| r.0).collect::<Vec<_>>(),
        vec![1, 2, 3, 4]
    );
    assert!(rejected[0].1.starts_with("elo"), "{}", rejected[0].1);
    assert!(
        rejected[1].1.contains("unknown legacy rank \"Tin\""),
        "{}",
        rejected[1].1
    );
    assert!(rejected[2].1.starts_with("player_id"), "{}", rejected[2].1);
    assert!(rejected[3].1.contains("earlier"), "{}", rejected[3].1);

    let a = view_of(&server, "m-a", "1v1").await;
    let r = a.rating.unwrap();
    assert_eq!((r.mean, r.deviation, a.rank_points), (1700.0, 350.0, 600));
    let b = view_of(&server, "m-b", "1v1").await;
    assert_eq!((b.rating.unwrap().mean, b.rank_points), (1400.0, 400));

    // Again: nothing changes, the migrated players count as unchanged.
    let again = admin
        .migrate_from_elo(proto::MigrateFromEloRequest {
            queue: "1v1".into(),
            rows: vec![rows[0].clone(), rows[5].clone()],
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        (again.migrated, again.unchanged, again.rejected.len()),
        (0, 2, 0)
    );
    // Different values for a player who has a record are refused, not applied.
    let other = admin
        .migrate_from_elo(proto::MigrateFromEloRequest {
            queue: "1v1".into(),
            rows: vec![row("m-b", 1450.0, "Silver")],
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!((other.migrated, other.unchanged), (0, 0));
    assert!(
        other.rejected[0].reason.contains("never overwrites"),
        "{}",
        other.rejected[0].reason
    );
    assert_eq!(
        view_of(&server, "m-b", "1v1").await.rating.unwrap().mean,
        1400.0
    );

    // Weng-Lin queues do not take Elo.
    let e = admin
        .migrate_from_elo(proto::MigrateFromEloRequest {
            queue: "5v5".into(),
            rows: vec![row("x", 1500.0, "Gold")],
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.message().starts_with("queue"), "{}", e.message());
}

#[tokio::test]
async fn export_streams_in_id_order_and_resumes_after_a_cursor() {
    let server = TestServer::start("").await;
    for p in ["p3", "p1", "p2", "p5", "p4"] {
        set(&server, p, "1v1", 1500.0, 100.0, None).await;
    }
    let mut admin = server.admin().await;
    let page = |after: &str, limit: u32| proto::ExportPlayersRequest {
        queue: "1v1".into(),
        after_player_id: after.into(),
        limit,
    };
    let ids = |s: Vec<proto::PlayerView>| s.into_iter().map(|v| v.player_id).collect::<Vec<_>>();
    let first: Vec<_> = admin
        .export_players(page("", 2))
        .await
        .unwrap()
        .into_inner()
        .map(Result::unwrap)
        .collect()
        .await;
    assert_eq!(ids(first), ["p1", "p2"]);
    let rest: Vec<_> = admin
        .export_players(page("p2", 0))
        .await
        .unwrap()
        .into_inner()
        .map(Result::unwrap)
        .collect()
        .await;
    assert_eq!(ids(rest), ["p3", "p4", "p5"]);
}

/// Paging an export through more players than a page holds gives each player once, in id
/// order, with players rated and erased between pages: one ahead of the cursor shows as it is
/// when its page is read, one behind it was already given.
#[tokio::test]
async fn an_export_paged_while_players_come_and_go_gives_each_once() {
    let server = TestServer::start("").await;
    let players: Vec<String> = (0..20).map(|i| format!("e{i:02}")).collect();
    for p in &players {
        set(&server, p, "1v1", 1500.0, 100.0, None).await;
    }
    let mut admin = server.admin().await;
    let mut seen: Vec<String> = Vec::new();
    let mut after = String::new();
    for page in 0.. {
        match page {
            1 => {
                // Ahead of the cursor (e02): one new, one erased. Behind it: one erased.
                set(&server, "e105", "1v1", 1500.0, 100.0, None).await;
                for gone in ["e12", "e01"] {
                    admin
                        .delete_player(proto::DeletePlayerRequest {
                            player_id: gone.into(),
                        })
                        .await
                        .unwrap();
                }
            }
            3 => {
                set(&server, "zz", "1v1", 1500.0, 100.0, None).await;
            }
            _ => {}
        }
        let ids: Vec<String> = admin
            .export_players(proto::ExportPlayersRequest {
                queue: "1v1".into(),
                after_player_id: after.clone(),
                limit: 3,
            })
            .await
            .unwrap()
            .into_inner()
            .map(|v| v.unwrap().player_id)
            .collect()
            .await;
        let Some(last) = ids.last() else { break };
        assert!(ids.len() <= 3, "{ids:?}");
        after = last.clone();
        seen.extend(ids);
    }
    let mut want: Vec<String> = players.into_iter().filter(|p| p != "e12").collect();
    want.extend(["e105".to_string(), "zz".to_string()]);
    want.sort();
    assert_eq!(
        seen, want,
        "e01 was given before its erasure; e12 after it, not at all"
    );
}

/// Results and a soft reset race. Every player plays one match from RD 100. A result applied
/// before the reset is decayed by it (final RD = decay(after)); one applied after it started from
/// the decayed record (before RD = decay(100)) and is final as reported. A result computed before
/// the reset and applied after it would show before RD = 100 and final = after: the reset lost.
#[tokio::test]
async fn a_soft_reset_racing_with_results_is_never_half_applied() {
    let server = TestServer::start("").await;
    let system = Config::from_toml_str("").unwrap().queues["1v1"]
        .rating
        .clone();
    let mut client = server.client().await;
    let mut matches = Vec::new();
    for i in 0..24 {
        let (a, b) = (format!("r{i:02}a"), format!("r{i:02}b"));
        set(&server, &a, "1v1", 1500.0, 100.0, None).await;
        set(&server, &b, "1v1", 1500.0, 100.0, None).await;
        matches.push(form_match(&mut client, "1v1", &[&[&a], &[&b]]).await);
    }
    let start = skill(
        view_of(&server, "r00a", "1v1")
            .await
            .rating
            .as_ref()
            .unwrap(),
    );
    let decayed_start = system
        .decay(&start, system.rating_period_seconds())
        .unwrap();

    let mut tasks = Vec::new();
    for (i, m) in matches.iter().enumerate() {
        let mut gs = server.game_server().await;
        let m = m.clone();
        tasks.push(tokio::spawn(async move {
            let winner = m.teams[i % 2].player_ids[0].clone();
            gs.report_match_result(proto::MatchResult {
                match_id: m.match_id.clone(),
                placements: placements_with_winner(&m, &winner),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner()
        }));
        if i == matches.len() / 2 {
            let mut admin = server.admin().await;
            tasks.push(tokio::spawn(async move {
                admin
                    .season_reset(proto::SeasonResetRequest {
                        kind: proto::SeasonResetKind::Soft as i32,
                        queue: "1v1".into(),
                        dry_run: false,
                    })
                    .await
                    .unwrap();
                proto::MatchResultAck::default()
            }));
        }
    }
    let mut changes = BTreeMap::new();
    for t in tasks {
        for c in t.await.unwrap().changes {
            changes.insert(c.player_id.clone(), c);
        }
    }
    assert_eq!(changes.len(), 48);
    let mut applied_before_reset = BTreeMap::new();
    for (p, c) in &changes {
        let before = skill(c.before.as_ref().unwrap());
        let after = skill(c.after.as_ref().unwrap());
        let now = skill(view_of(&server, p, "1v1").await.rating.as_ref().unwrap());
        if before == start {
            let expected = system
                .decay(&after, system.rating_period_seconds())
                .unwrap();
            assert_eq!(
                now, expected,
                "{p}: applied before the reset, so the reset decays it"
            );
        } else {
            assert_eq!(before, decayed_start, "{p}: started from the reset record");
            assert_eq!(now, after, "{p}");
        }
        applied_before_reset.insert(p.clone(), before == start);
    }
    // A result is one atomic change: both players of a match are on the same side of the reset.
    for i in 0..24 {
        let (a, b) = (format!("r{i:02}a"), format!("r{i:02}b"));
        assert_eq!(
            applied_before_reset[&a], applied_before_reset[&b],
            "match {i}: one player's result applied before the reset, the other's after"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// The command line against a running server.

async fn cli(server: &TestServer, args: &[&str]) -> (bool, String, String) {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_matchmaker"))
        .arg("admin")
        .args(args)
        .args(["--addr", &format!("http://{}", server.addr)])
        .args(["--token", "test.jwt.token"])
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
async fn the_admin_cli_runs_every_command() {
    let server = TestServer::start(LADDER).await;

    let (ok, out, err) = cli(
        &server,
        &[
            "set-rating",
            "--player",
            "cli-a",
            "--queue",
            "lad",
            "--mean",
            "1800",
            "--deviation",
            "90",
            "--rank-points",
            "1350",
            "--json",
        ],
    )
    .await;
    assert!(ok, "{err}");
    let v = json(&out);
    assert_eq!(
        (v["rank_points"].as_i64(), v["rating"]["mean"].as_f64()),
        (Some(1350), Some(1800.0))
    );
    let (ok, out, _) = cli(
        &server,
        &[
            "set-rating",
            "--player",
            "cli-b",
            "--queue",
            "lad",
            "--mean",
            "1600",
            "--deviation",
            "90",
            "--rank-points",
            "950",
        ],
    )
    .await;
    assert!(ok);
    assert!(out.starts_with("set cli-b\tlad"), "{out}");

    let (ok, out, err) = cli(
        &server,
        &["season-reset", "--kind", "soft", "--queue", "lad", "--json"],
    )
    .await;
    assert!(ok, "{err}");
    let v = json(&out);
    assert_eq!(
        (
            v["season"].as_u64(),
            v["week"].as_u64(),
            v["players_changed"].as_u64()
        ),
        (Some(1), Some(1), Some(2))
    );
    assert_eq!(
        view_of(&server, "cli-a", "lad").await.rank_points,
        1350,
        "Grandweaver cap is 1400"
    );

    let (ok, out, err) = cli(&server, &["end-season", "--queue", "lad"]).await;
    assert!(ok, "{err}");
    assert_eq!(out.trim(), "season 1 ended: 2 players ranked");

    // A dry run says what the reset would do, per tier, and changes nothing.
    let (ok, out, err) = cli(
        &server,
        &[
            "season-reset",
            "--kind",
            "hard",
            "--queue",
            "lad",
            "--dry-run",
        ],
    )
    .await;
    assert!(ok, "{err}");
    assert_eq!(
        out.trim(),
        "hard reset dry run (nothing changed): season 2 week 0, 2 players changed\n  \
         lad Apprentice I: 0 -> 1\n  lad Expert I: 1 -> 0\n  lad Expert II: 0 -> 1\n  \
         lad Grandweaver: 1 -> 0"
    );
    assert_eq!(view_of(&server, "cli-a", "lad").await.rank_points, 1350);

    let (ok, out, err) = cli(
        &server,
        &["season-reset", "--kind", "hard", "--queue", "lad"],
    )
    .await;
    assert!(ok, "{err}");
    assert_eq!(
        out.trim(),
        "hard reset done: season 2 week 0, 2 players changed"
    );
    assert_eq!(view_of(&server, "cli-a", "lad").await.rank_points, 1000);
    assert_eq!(view_of(&server, "cli-b", "lad").await.rank_points, 600);

    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("legacy.csv");
    std::fs::write(
        &csv,
        "player_id,elo,legacy_rank\nold-1,1650,Gold\nold-2,abc,Gold\nold-3,1500,Tin\nold-4,1550,\"Silver\"\ntoo,many,fields,here\n",
    )
    .unwrap();
    let csv_arg = csv.to_str().unwrap();
    let (ok, out, err) = cli(
        &server,
        &[
            "migrate", "--queue", "lad", "--file", csv_arg, "--batch", "2", "--json",
        ],
    )
    .await;
    assert!(ok, "{err}");
    let v = json(&out);
    assert_eq!(
        (
            v["migrated"].as_u64(),
            v["unchanged"].as_u64(),
            v["rows"].as_u64()
        ),
        (Some(2), Some(0), Some(5))
    );
    let lines: Vec<u64> = v["rejected"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["line"].as_u64().unwrap())
        .collect();
    assert_eq!(lines, [3, 4, 6]);
    assert_eq!(view_of(&server, "old-4", "lad").await.rank_points, 400);
    let (ok, out, _) = cli(&server, &["migrate", "--queue", "lad", "--file", csv_arg]).await;
    assert!(ok);
    assert!(
        out.starts_with("migrated 0, unchanged 2, rejected 3"),
        "{out}"
    );
    assert!(out.contains("line 4: old-3: unknown legacy rank"), "{out}");
    // A file whose every row is refused (another separator) migrates nothing: a failure.
    let semicolons = dir.path().join("semicolons.csv");
    std::fs::write(
        &semicolons,
        "old-5;1650;Gold
old-6;1500;Gold
",
    )
    .unwrap();
    let (ok, out, err) = cli(
        &server,
        &[
            "migrate",
            "--queue",
            "lad",
            "--file",
            semicolons.to_str().unwrap(),
        ],
    )
    .await;
    assert!(!ok, "{out}");
    assert!(
        out.starts_with("migrated 0, unchanged 0, rejected 2"),
        "{out}"
    );
    assert!(err.contains("every row was rejected"), "{err}");

    let (ok, out, err) = cli(
        &server,
        &["export", "--queue", "lad", "--limit", "2", "--json"],
    )
    .await;
    assert!(ok, "{err}");
    let ids: Vec<String> = out
        .lines()
        .map(|l| json(l)["player_id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(ids, ["cli-a", "cli-b"]);
    let (ok, out, _) = cli(&server, &["export", "--queue", "lad", "--after", "cli-b"]).await;
    assert!(ok);
    assert!(
        out.contains("old-1\tlad") && out.contains("old-4\tlad"),
        "{out}"
    );
    assert!(
        out.trim_end()
            .ends_with("2 players exported; next page: --after old-4"),
        "{out}"
    );

    let (ok, out, err) = cli(&server, &["queue-stats", "--json"]).await;
    assert!(ok, "{err}");
    assert!(
        json(&out)["queues"]
            .as_array()
            .unwrap()
            .iter()
            .any(|q| q["queue"] == "lad")
    );
    let (ok, out, err) = cli(&server, &["snapshot"]).await;
    assert!(ok, "{err}");
    assert!(out.starts_with("snapshot: "), "{out}");

    let (ok, _, err) = cli(
        &server,
        &["season-reset", "--kind", "soft", "--queue", "nope"],
    )
    .await;
    assert!(!ok);
    assert!(
        err.contains("InvalidArgument") || err.contains("queue: unknown queue"),
        "{err}"
    );
}

// ---------------------------------------------------------------------------------------------
// kill -9: an acknowledged reset is in the journal, and replay restores it.

#[cfg(unix)]
async fn cli_at(addr: &str, args: &[&str]) -> String {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_matchmaker"))
        .arg("admin")
        .args(args)
        .args(["--addr", addr, "--json"])
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acknowledged_hard_reset_survives_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("seasons.toml");
    // No periodic snapshot before the kill: recovery must come from the journal.
    std::fs::write(
        &config,
        format!("[store]\nsnapshot_interval_seconds = 3600\n{LADDER}"),
    )
    .unwrap();
    let data = dir.path().join("data");
    let child = common::ServerProcess::start(&data, &config);
    let addr = child.addr.clone();
    for (p, r, rp) in [("k-lo", "1300", "450"), ("k-hi", "1900", "1150")] {
        cli_at(
            &addr,
            &[
                "set-rating",
                "--player",
                p,
                "--queue",
                "lad",
                "--mean",
                r,
                "--deviation",
                "70",
                "--rank-points",
                rp,
            ],
        )
        .await;
    }
    let out = json(&cli_at(&addr, &["season-reset", "--kind", "hard", "--queue", "lad"]).await);
    assert_eq!(out["season"], 2);
    drop(child); // SIGKILL

    let child = common::ServerProcess::start(&data, &config);
    let addr = child.addr.clone();
    let export = cli_at(&addr, &["export", "--queue", "lad"]).await;
    let views: BTreeMap<String, serde_json::Value> = export
        .lines()
        .map(|l| {
            let v = json(l);
            (v["player_id"].as_str().unwrap().to_owned(), v)
        })
        .collect();
    // k-lo: Trainee II (450 RP) -> 350 RP, r -> 1500; k-hi: Expert III -> 800 RP, r -> 2250.
    assert_eq!(views["k-lo"]["rank_points"], 350);
    assert_eq!(views["k-hi"]["rank_points"], 800);
    assert!(close(
        views["k-lo"]["rating"]["mean"].as_f64().unwrap(),
        1500.0
    ));
    assert!(close(
        views["k-hi"]["rating"]["mean"].as_f64().unwrap(),
        2250.0
    ));
    assert!(close(
        views["k-hi"]["rating"]["deviation"].as_f64().unwrap(),
        350.0
    ));
    // The season clock came back with it.
    let out = json(&cli_at(&addr, &["season-reset", "--kind", "soft", "--queue", "lad"]).await);
    assert_eq!(
        (out["season"].as_u64(), out["week"].as_u64()),
        (Some(2), Some(1))
    );
}

#[tokio::test]
async fn queue_stats_carry_each_ranked_queues_season_clock() {
    let server = TestServer::start("").await;
    let clock = |stats: &proto::QueueStats, queue: &str| {
        let q = stats.queues.iter().find(|q| q.queue == queue).unwrap();
        (q.season, q.week)
    };
    let stats = || async {
        server
            .admin()
            .await
            .get_queue_stats(proto::GetQueueStatsRequest::default())
            .await
            .unwrap()
            .into_inner()
    };
    let before = stats().await;
    assert_eq!(clock(&before, "1v1"), (1, 0));
    assert_eq!(
        clock(&before, "2v2"),
        (0, 0),
        "an unranked queue has no clock"
    );
    reset(&server, proto::SeasonResetKind::Soft, "1v1").await;
    assert_eq!(clock(&stats().await, "1v1"), (1, 1));
    reset(&server, proto::SeasonResetKind::Hard, "1v1").await;
    let after = stats().await;
    assert_eq!(clock(&after, "1v1"), (2, 0));
    assert_eq!(
        clock(&after, "5v5"),
        clock(&before, "5v5"),
        "another pool keeps its clock"
    );
}

#[tokio::test]
async fn live_matches_are_listed_newest_first_until_their_result_and_bad_input_names_the_field() {
    let server = TestServer::start("").await;
    let mut client = server.client().await;
    let first = form_match(&mut client, "1v1", &[&["lm-a"], &["lm-b"]]).await;
    let second = form_match(&mut client, "1v1", &[&["lm-c"], &["lm-d"]]).await;
    let list = |queue: &str, limit: u32| {
        let server = &server;
        let queue = queue.to_string();
        async move {
            server
                .admin()
                .await
                .list_live_matches(proto::ListLiveMatchesRequest { queue, limit })
                .await
        }
    };
    let all = list("", 0).await.unwrap().into_inner();
    assert_eq!(all.total, 2);
    let ids: Vec<&str> = all.matches.iter().map(|m| m.match_id.as_str()).collect();
    assert_eq!(ids, [second.match_id.as_str(), first.match_id.as_str()]);
    let newest = &all.matches[0];
    assert_eq!(newest.queue, "1v1");
    assert_eq!(newest.phase, proto::MatchPhase::Formed as i32);
    let mut players: Vec<&str> = newest
        .teams
        .iter()
        .flat_map(|t| t.player_ids.iter().map(String::as_str))
        .collect();
    players.sort_unstable();
    assert_eq!(players, ["lm-c", "lm-d"]);
    assert_eq!(newest.win_probability.len(), 2);
    // The limit keeps the newest; the total counts them all; another queue has none.
    let one = list("1v1", 1).await.unwrap().into_inner();
    assert_eq!((one.total, one.matches.len()), (2, 1));
    assert_eq!(one.matches[0].match_id, second.match_id);
    assert_eq!(list("2v2", 0).await.unwrap().into_inner().total, 0);
    // A match whose result is applied is no longer live.
    server
        .game_server()
        .await
        .report_match_result(proto::MatchResult {
            match_id: first.match_id.clone(),
            placements: placements_with_winner(&first, "lm-a"),
            ..Default::default()
        })
        .await
        .expect("result");
    let after = list("", 0).await.unwrap().into_inner();
    assert_eq!(after.total, 1);
    assert_eq!(after.matches[0].match_id, second.match_id);
    // Bad input names its field.
    for (queue, limit, field) in [("no-such-queue", 0, "queue"), ("", 1001, "limit")] {
        let e = list(queue, limit).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
        assert!(e.message().contains(field), "{e:?}");
    }
}

async fn recent_results(
    server: &TestServer,
    queue: &str,
    limit: u32,
) -> Result<proto::ListRecentResultsResponse, tonic::Status> {
    let queue = queue.to_string();
    server
        .admin()
        .await
        .list_recent_results(proto::ListRecentResultsRequest { queue, limit })
        .await
        .map(tonic::Response::into_inner)
}

#[tokio::test]
async fn recent_results_are_listed_newest_first_from_the_durable_log_across_a_restart() {
    let mut server = TestServer::start("").await;
    let mut client = server.client().await;
    let mut played = Vec::new();
    for (queue, teams, winner) in [
        ("1v1", [vec!["rr-a"], vec!["rr-b"]], "rr-a"),
        ("2v2", [vec!["rr-c", "rr-d"], vec!["rr-e", "rr-f"]], "rr-e"),
        ("1v1", [vec!["rr-g"], vec!["rr-h"]], "rr-h"),
    ] {
        let m = form_match(&mut client, queue, &[&teams[0], &teams[1]]).await;
        common::report_winner(&server, &m, winner).await;
        played.push(m.match_id);
    }
    // A match without a result is not listed.
    form_match(&mut client, "1v1", &[&["rr-i"], &["rr-j"]]).await;
    let ids = |r: &proto::ListRecentResultsResponse| {
        r.matches
            .iter()
            .map(|m| m.match_id.clone())
            .collect::<Vec<_>>()
    };
    let newest_first: Vec<String> = played.iter().rev().cloned().collect();
    let all = recent_results(&server, "", 0).await.unwrap();
    assert_eq!(ids(&all), newest_first);
    let newest = &all.matches[0];
    assert_eq!(newest.phase, proto::MatchPhase::Completed as i32);
    assert_eq!(newest.queue, "1v1");
    assert_eq!(
        newest.changes.len(),
        2,
        "each player's change, as acknowledged"
    );
    assert!(newest.ended_unix > 0);
    let winner = newest.teams.iter().position(|t| t.player_ids == ["rr-h"]);
    assert_eq!(newest.placements[winner.unwrap()], 1);
    // By queue, and the newest `limit`.
    let ones = recent_results(&server, "1v1", 0).await.unwrap();
    assert_eq!(ids(&ones), [played[2].clone(), played[0].clone()]);
    assert_eq!(
        ids(&recent_results(&server, "", 1).await.unwrap()),
        [played[2].clone()]
    );
    assert!(
        recent_results(&server, "5v5", 0)
            .await
            .unwrap()
            .matches
            .is_empty()
    );
    // Bad input names its field.
    for (queue, limit, field) in [("no-such-queue", 0, "queue"), ("", 1001, "limit")] {
        let e = recent_results(&server, queue, limit).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
        assert!(e.message().contains(field), "{e:?}");
    }
    // The list is durable: a restarted server lists the same results.
    server.stop().await.unwrap();
    let dir = server.data_dir.clone();
    let restarted = TestServer::start_in(&dir, "").await;
    let again = recent_results(&restarted, "", 0).await.unwrap();
    assert_eq!(ids(&again), newest_first);
    drop(server);
}

#[tokio::test]
async fn a_dry_run_season_reset_tells_event_watchers_nothing() {
    let server = TestServer::start("").await;
    set(&server, "dry", "1v1", 1800.0, 60.0, Some(900)).await;
    let dry = server
        .admin()
        .await
        .season_reset(proto::SeasonResetRequest {
            kind: proto::SeasonResetKind::Soft as i32,
            queue: "1v1".into(),
            dry_run: true,
        })
        .await
        .expect("dry run")
        .into_inner();
    assert_eq!(dry.players_changed, 1);
    reset(&server, proto::SeasonResetKind::Soft, "1v1").await;
    // The first reset event a watcher sees is the real one, the dry run's season and all.
    let events = common::watch_events(
        &server.channel().await,
        0,
        &[proto::EventKind::SeasonReset],
        1,
    )
    .await;
    let detail: serde_json::Value = serde_json::from_str(&events[0].detail_json).unwrap();
    assert_eq!(detail["season"], dry.season);
    let mut stream = server
        .admin()
        .await
        .watch_events(proto::WatchEventsRequest {
            after_cursor: events[0].cursor,
            kinds: vec![proto::EventKind::SeasonReset as i32],
        })
        .await
        .unwrap()
        .into_inner();
    let more = tokio::time::timeout(std::time::Duration::from_millis(300), stream.message()).await;
    assert!(more.is_err(), "one reset, one event: {more:?}");
}

//! The result computation against the rating systems it calls.

use super::party::rate_party;
use super::*;
use crate::rating::Skill;
use crate::rating::glicko2;

fn record(mean: f64, deviation: f64) -> PoolRecord {
    PoolRecord {
        skill: Skill {
            mean,
            deviation,
            volatility: 0.06,
        },
        rank_points: 0,
        games: 0,
        wins: 0,
        last_played_unix: None,
        ladder_floor: 0,
        win_streak: 0,
        period: None,
    }
}

fn ids(names: &[&[&str]]) -> Vec<Vec<PlayerId>> {
    names
        .iter()
        .map(|t| t.iter().map(|&n| PlayerId::from(n)).collect())
        .collect()
}

fn input(placements: &[u32], abandoned: &[&str]) -> ResultInput {
    ResultInput {
        placements: placements.to_vec(),
        performance: BTreeMap::new(),
        abandoned: abandoned.iter().map(|&a| PlayerId::from(a)).collect(),
        team_scores: Vec::new(),
    }
}

#[test]
fn a_1v1_result_equals_the_rating_library_on_the_same_inputs() {
    let system = SystemConfig::Glicko2(glicko2::Config::default());
    let teams = ids(&[&["a"], &["b"]]);
    let before = vec![vec![record(1600.0, 120.0)], vec![record(1500.0, 200.0)]];
    let (after, ack) = rate_players(
        "1v1",
        &system,
        &NoRanking,
        &teams,
        &before,
        &input(&[2, 1], &[]),
        1e9,
    )
    .unwrap();
    let expected = system
        .rate(&MatchInput {
            teams: &[
                vec![PlayerInput::new(before[0][0].skill)],
                vec![PlayerInput::new(before[1][0].skill)],
            ],
            placements: &[2, 1],
        })
        .unwrap();
    assert_eq!(after[0][0].skill, expected[0][0]);
    assert_eq!(after[1][0].skill, expected[1][0]);
    assert!(after[1][0].skill.mean > 1500.0 && after[0][0].skill.mean < 1600.0);
    assert_eq!((after[1][0].wins, after[1][0].games), (1, 1));
    assert_eq!((after[0][0].wins, after[0][0].games), (0, 1));
    assert_eq!(after[0][0].last_played_unix, Some(1_000_000_000));
    assert_eq!(ack.changes.len(), 2);
    assert_eq!(ack.changes[0].before, before[0][0].skill);
}

#[test]
fn inactivity_since_the_last_game_widens_the_deviation_first() {
    let system = SystemConfig::Glicko2(glicko2::Config::default());
    let teams = ids(&[&["a"], &["b"]]);
    let mut fresh = vec![vec![record(1500.0, 60.0)], vec![record(1500.0, 60.0)]];
    let (recent, _) = rate_players(
        "q",
        &system,
        &NoRanking,
        &teams,
        &fresh,
        &input(&[1, 2], &[]),
        0.0,
    )
    .unwrap();
    fresh[0][0].last_played_unix = Some(0);
    let a_year = 365.0 * 86400.0;
    let (idle, _) = rate_players(
        "q",
        &system,
        &NoRanking,
        &teams,
        &fresh,
        &input(&[1, 2], &[]),
        a_year,
    )
    .unwrap();
    // The idle winner was less certain, so it moves further.
    assert!(idle[0][0].skill.mean - 1500.0 > recent[0][0].skill.mean - 1500.0);
}

#[test]
fn an_abandoner_takes_a_loss_and_the_one_who_stayed_is_unchanged() {
    let system = SystemConfig::Glicko2(glicko2::Config::default());
    let teams = ids(&[&["quitter"], &["stayer"]]);
    let before = vec![vec![record(1500.0, 100.0)], vec![record(1500.0, 100.0)]];
    // Even if the report says the quitter won, they lose.
    let (after, ack) = rate_players(
        "1v1",
        &system,
        &NoRanking,
        &teams,
        &before,
        &input(&[1, 2], &["quitter"]),
        0.0,
    )
    .unwrap();
    assert!(after[0][0].skill.mean < 1500.0);
    assert_eq!(after[0][0].wins, 0);
    assert_eq!(
        after[1][0], before[1][0],
        "a quit is not a win for the stayer"
    );
    assert_eq!(ack.changes[1].before, ack.changes[1].after);
}

#[test]
fn validation_names_the_field() {
    let teams = ids(&[&["a"], &["b"]]);
    let none = BTreeMap::new();
    let e = validate(&teams, &[1], &none, &[]).unwrap_err().to_string();
    assert!(e.starts_with("placements:"), "{e}");
    let e = validate(&teams, &[1, 3], &none, &[])
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("placements[1]:"), "{e}");
    let e = validate(&teams, &[1, 0], &none, &[])
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("placements[1]:"), "{e}");
    let perf = BTreeMap::from([("zed".to_string(), 1.0)]);
    let e = validate(&teams, &[1, 2], &perf, &[])
        .unwrap_err()
        .to_string();
    assert!(e.contains("performance[\"zed\"]"), "{e}");
    let perf = BTreeMap::from([("a".to_string(), f64::NAN)]);
    let e = validate(&teams, &[1, 2], &perf, &[])
        .unwrap_err()
        .to_string();
    assert!(e.contains("finite"), "{e}");
    let perf = BTreeMap::from([("a".to_string(), 2e9)]);
    let e = validate(&teams, &[1, 2], &perf, &[])
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("performance[\"a\"]") && e.contains("1e9"),
        "{e}"
    );
    let e = validate(&teams, &[1, 2], &none, &["a".into(), "a".into()])
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("abandoned_player_ids[1]"), "{e}");
    let ok = validate(&teams, &[1, 1], &none, &[]).unwrap();
    assert_eq!(ok.placements, vec![1, 1]);
}

#[test]
fn a_party_that_wins_rises_as_a_unit_and_its_mates_are_untouched() {
    let system = SystemConfig::WengLinBt(crate::rating::weng_lin::Config::default());
    let wl = |mean| PoolRecord {
        skill: Skill {
            mean,
            deviation: 25.0 / 3.0,
            volatility: 0.0,
        },
        ..record(0.0, 1.0)
    };
    let before = vec![
        vec![wl(25.0), wl(25.0), wl(25.0)],
        vec![wl(25.0), wl(25.0), wl(25.0)],
    ];
    let party = PartyRecord {
        skill: Skill {
            mean: 20.0,
            deviation: 6.0,
            volatility: 0.0,
        },
        games: 3,
        last_played_unix: None,
    };
    let teams = ids(&[&["a", "b", "c"], &["d", "e", "f"]]);
    let inputs = player_inputs(&teams, &before, &input(&[1, 2], &[]), 0.0);
    let won = rate_party(&system, &inputs, &[1, 2], &[], 0, &[0, 1], &party, 0.0).unwrap();
    let lost = rate_party(&system, &inputs, &[2, 1], &[], 0, &[0, 1], &party, 0.0).unwrap();
    assert!(won.mean > party.skill.mean && lost.mean < party.skill.mean);
    assert!(won.deviation < party.skill.deviation);
    let e = rate_party(&system, &inputs, &[1], &[], 0, &[0], &party, 0.0).unwrap_err();
    assert!(e.to_string().contains("placements"), "{e}");
}

#[test]
fn a_party_is_rated_with_its_own_inactivity_and_its_members_productivity() {
    // Glicko-2: a party idle for a year is less certain going in, so it moves further.
    let system = SystemConfig::Glicko2(glicko2::Config::default());
    let before = vec![
        vec![record(1500.0, 80.0), record(1500.0, 80.0)],
        vec![record(1500.0, 80.0), record(1500.0, 80.0)],
    ];
    let teams = ids(&[&["a", "b"], &["c", "d"]]);
    let now = 400.0 * 86_400.0;
    let inputs = player_inputs(&teams, &before, &input(&[1, 2], &[]), now);
    let party = |last_played_unix| PartyRecord {
        skill: Skill {
            mean: 1500.0,
            deviation: 80.0,
            volatility: 0.06,
        },
        games: 10,
        last_played_unix,
    };
    let fresh = rate_party(
        &system,
        &inputs,
        &[1, 2],
        &[],
        0,
        &[0, 1],
        &party(Some(now as i64)),
        now,
    )
    .unwrap();
    let idle = rate_party(
        &system,
        &inputs,
        &[1, 2],
        &[],
        0,
        &[0, 1],
        &party(Some((now - 365.0 * 86_400.0) as i64)),
        now,
    )
    .unwrap();
    assert!(idle.deviation > fresh.deviation, "{idle:?} vs {fresh:?}");
    assert!(
        idle.mean - 1500.0 > fresh.mean - 1500.0,
        "{idle:?} vs {fresh:?}"
    );

    // Elo: the members' productivity counts, as in their own update.
    let elo = SystemConfig::Elo(crate::rating::elo::Config::default());
    let before = vec![
        vec![record(1500.0, 0.0), record(1500.0, 0.0)],
        vec![record(1500.0, 0.0), record(1500.0, 0.0)],
    ];
    let party = PartyRecord {
        skill: Skill {
            mean: 1500.0,
            deviation: 0.0,
            volatility: 0.0,
        },
        games: 10,
        last_played_unix: None,
    };
    let mut productive = input(&[1, 2], &[]);
    let mut idle = input(&[1, 2], &[]);
    for (p, perf) in [("a", 1500.0), ("b", 1500.0), ("c", 1000.0), ("d", 1000.0)] {
        productive.performance.insert(PlayerId::from(p), perf);
        idle.performance.insert(PlayerId::from(p), 1500.0);
    }
    let gain = |input: &ResultInput| {
        let inputs = player_inputs(&teams, &before, input, 0.0);
        rate_party(&elo, &inputs, &[1, 2], &[], 0, &[0, 1], &party, 0.0)
            .unwrap()
            .mean
            - 1500.0
    };
    assert!(
        gain(&productive) > gain(&idle),
        "losers far below their expected productivity: {} vs {}",
        gain(&productive),
        gain(&idle)
    );
}

#[test]
fn a_periodic_pool_keeps_results_until_the_period_ends_then_applies_them_in_one_batch() {
    let config = glicko2::Config {
        mode: crate::rating::Mode::Periodic,
        inactivity_granularity_seconds: 0.0,
        ..glicko2::Config::default()
    };
    let system = SystemConfig::Glicko2(config);
    let period = system.rating_period_seconds();
    let teams = ids(&[&["a"], &["b"]]);
    let fresh = vec![vec![record(1500.0, 200.0)], vec![record(1500.0, 200.0)]];
    // Two wins for `a` in period 10: ratings stay, results pile up.
    let t1 = 10.0 * period + 60.0;
    let (after1, ack) = rate_players(
        "q",
        &system,
        &NoRanking,
        &teams,
        &fresh,
        &input(&[1, 2], &[]),
        t1,
    )
    .unwrap();
    assert_eq!(after1[0][0].skill, fresh[0][0].skill);
    assert_eq!(ack.changes[0].before, ack.changes[0].after);
    let (after2, _) = rate_players(
        "q",
        &system,
        &NoRanking,
        &teams,
        &after1,
        &input(&[1, 2], &[]),
        t1 + 60.0,
    )
    .unwrap();
    let pending = after2[0][0].period.as_deref().unwrap();
    assert_eq!((pending.index, pending.results.len()), (10, 2));
    assert!(pending.results.iter().all(|r| r.score == 1.0));
    assert_eq!(
        after2[1][0].period.as_deref().unwrap().results[0].score,
        0.0
    );
    assert_eq!(after2[0][0].games, 2);

    // Closing period 10 is Glickman's batch update of both results.
    let expected = system
        .rate_period(&fresh[0][0].skill, &pending.results, 0.0)
        .unwrap();
    let mut closed = after2[0][0].clone();
    assert!(close_period(&system, &NoRanking, &mut closed, 11).unwrap());
    assert_eq!(closed.skill, expected);
    assert!(closed.skill.mean > 1500.0 && closed.period.is_none());
    assert_eq!(closed.last_played_unix, Some((11.0 * period) as i64));
    assert!(
        !close_period(&system, &NoRanking, &mut closed, 12).unwrap(),
        "nothing pending"
    );

    // A match in period 13 closes period 10 first (after two idle periods) and starts 13.
    let (after3, ack) = rate_players(
        "q",
        &system,
        &NoRanking,
        &teams,
        &after2,
        &input(&[2, 1], &[]),
        13.0 * period + 5.0,
    )
    .unwrap();
    assert_eq!(
        ack.changes[0].before, expected,
        "the ack starts from the closed period"
    );
    assert_eq!(
        after3[0][0].skill, expected,
        "and the new result waits for period 13"
    );
    let p13 = after3[0][0].period.as_deref().unwrap();
    assert_eq!((p13.index, p13.results.len()), (13, 1));
    assert_eq!(p13.results[0].score, 0.0);
    // Closing 13 first grows the deviation for the idle periods 11 and 12.
    let mut closed13 = after3[0][0].clone();
    assert!(close_period(&system, &NoRanking, &mut closed13, 14).unwrap());
    let idle = system
        .rate_period(&expected, &p13.results, 2.0 * period)
        .unwrap();
    assert_eq!(closed13.skill, idle);
    let no_idle = system.rate_period(&expected, &p13.results, 0.0).unwrap();
    assert!(idle.deviation > no_idle.deviation);
}

#[test]
fn a_tie_is_a_draw_for_counters() {
    let system = SystemConfig::Glicko2(glicko2::Config::default());
    let teams = ids(&[&["a"], &["b"]]);
    let before = vec![vec![record(1500.0, 100.0)], vec![record(1500.0, 100.0)]];
    let (after, _) = rate_players(
        "q",
        &system,
        &NoRanking,
        &teams,
        &before,
        &input(&[1, 1], &[]),
        0.0,
    )
    .unwrap();
    assert_eq!(after[0][0].wins + after[1][0].wins, 0);
    assert_eq!(after[0][0].games, 1);
}

#[test]
fn compute_rates_leavers_as_abandons_and_a_new_party_from_its_members() {
    let system = SystemConfig::Glicko2(glicko2::Config::default());
    let teams = ids(&[&["a", "b"], &["c", "d"]]);
    let parties = ids(&[&["a", "b"]]);
    let left = [PlayerId::from("d")];
    let before = Before {
        players: vec![
            vec![record(1500.0, 100.0), record(1600.0, 100.0)],
            vec![record(1500.0, 100.0), record(1500.0, 100.0)],
        ],
        parties: vec![None],
    };
    let none = BTreeMap::new();
    let facts = MatchFacts {
        queue: "2v2",
        teams: &teams,
        parties: &parties,
        left: &left,
    };
    // The report says team 2 won, but `d` left: team 2 is rated as last.
    let report = Report {
        placements: &[2, 1],
        performance: &none,
        abandoned: &[],
        team_scores: &[],
    };
    let out = compute(&system, &NoRanking, &facts, &report, &before, 0.0).unwrap();
    let after: BTreeMap<&str, &PoolRecord> =
        out.records.iter().map(|(p, r)| (p.as_str(), r)).collect();
    assert!(after["d"].skill.mean < 1500.0, "the leaver lost");
    assert_eq!(after["d"].wins, 0);
    assert_eq!(out.ack.queue, "2v2");
    assert_eq!(out.ack.changes.len(), 4);
    // The party starts from its members' skills and is rated as a unit.
    assert_eq!(out.parties.len(), 1);
    let (key, party) = &out.parties[0];
    assert_eq!(key, &crate::records::party_key(&parties[0]));
    assert_eq!(party.games, 1);
    let start = crate::rating::party_initial(
        &system,
        &[before.players[0][0].skill, before.players[0][1].skill],
    );
    assert_ne!(party.skill, start, "the party was rated");
    // A report naming a player outside the match is refused before anything is computed.
    let bad = Report {
        abandoned: &["zed".to_string()],
        ..report
    };
    let e = compute(&system, &NoRanking, &facts, &bad, &before, 0.0).unwrap_err();
    assert!(e.to_string().starts_with("abandoned_player_ids[0]"), "{e}");
    // Both opponents quit: void for the party as for its members, whose records do not move.
    let void = Report {
        placements: &[1, 2],
        abandoned: &["c".to_string(), "d".to_string()],
        ..report
    };
    let facts = MatchFacts { left: &[], ..facts };
    let out = compute(&system, &NoRanking, &facts, &void, &before, 0.0).unwrap();
    assert_eq!(out.void.len(), 2, "{:?}", out.void);
    assert!(
        out.parties.is_empty(),
        "the party's rating moved: {:?}",
        out.parties
    );
}

/// Abandoners on two teams each take a loss against the other team's reported place, not a
/// draw with each other.
#[test]
fn abandoners_on_two_teams_each_lose() {
    let system = SystemConfig::Glicko2(glicko2::Config::default());
    let teams = ids(&[&["a"], &["b"]]);
    let before = Before {
        players: vec![vec![record(1500.0, 100.0)], vec![record(1500.0, 100.0)]],
        parties: vec![],
    };
    let none = BTreeMap::new();
    let facts = MatchFacts {
        queue: "1v1",
        teams: &teams,
        parties: &[],
        left: &[],
    };
    let both = ["a".to_string(), "b".to_string()];
    let report = Report {
        placements: &[1, 2],
        performance: &none,
        abandoned: &both,
        team_scores: &[],
    };
    let out = compute(&system, &NoRanking, &facts, &report, &before, 0.0).unwrap();
    for (player, record) in &out.records {
        assert!(
            record.skill.mean < 1500.0,
            "{player} did not lose: {record:?}"
        );
        assert_eq!(record.wins, 0);
    }
}

/// Scores reach the rating system (a margin option changes the result), are validated naming
/// the field, and a calibrating pool gets the result's observation from the skills before the
/// match; an abandoned match teaches the calibration nothing.
#[test]
fn team_scores_and_the_calibration_observation() {
    use crate::rating::calibration::CalibrationConfig;
    use crate::rating::margin::{Margin, MarginKind};
    let teams = ids(&[&["a"], &["b"]]);
    let before = Before {
        players: vec![vec![record(1600.0, 80.0)], vec![record(1500.0, 80.0)]],
        parties: Vec::new(),
    };
    let none = BTreeMap::new();
    let facts = MatchFacts {
        queue: "1v1",
        teams: &teams,
        parties: &[],
        left: &[],
    };
    let report = |scores: &'static [f64]| Report {
        placements: &[1, 2],
        performance: &none,
        abandoned: &[],
        team_scores: scores,
    };
    let plain = SystemConfig::Glicko2(glicko2::Config::default());
    let margin = SystemConfig::Glicko2(glicko2::Config {
        margin: Margin {
            kind: MarginKind::Weighted,
            ..Margin::default()
        },
        calibration: CalibrationConfig {
            enabled: true,
            ..CalibrationConfig::default()
        },
        ..glicko2::Config::default()
    });
    let a_after = |system: &SystemConfig, scores: &'static [f64]| {
        compute(system, &NoRanking, &facts, &report(scores), &before, 0.0)
            .unwrap()
            .records[0]
            .1
            .skill
            .mean
    };
    // Without a margin option the scores change nothing; with one, a narrow win moves less.
    assert_eq!(a_after(&plain, &[12.0, 10.0]), a_after(&plain, &[]));
    assert!(a_after(&margin, &[12.0, 10.0]) < a_after(&margin, &[]));
    // The observation: the system's own probability of the match before it, and who won.
    let out = compute(
        &margin,
        &NoRanking,
        &facts,
        &report(&[12.0, 10.0]),
        &before,
        0.0,
    )
    .unwrap();
    let o = out.calibration.unwrap();
    let p = margin
        .predict(&[&[before.players[0][0].skill], &[before.players[1][0].skill]])
        .unwrap();
    assert_eq!(o.p, p.win_probability);
    assert_eq!(o.y, vec![1.0, 0.0]);
    let out = compute(&plain, &NoRanking, &facts, &report(&[]), &before, 0.0).unwrap();
    assert_eq!(out.calibration, None, "the pool does not calibrate");
    let quit = Report {
        abandoned: &["b".to_string()],
        ..report(&[])
    };
    let out = compute(&margin, &NoRanking, &facts, &quit, &before, 0.0).unwrap();
    assert_eq!(
        out.calibration, None,
        "an abandoned match is not a result to learn from"
    );
    // Bad scores are refused naming the field.
    for (scores, field) in [
        (&[1.0][..], "team_scores"),
        (&[1.0, f64::INFINITY][..], "team_scores[1]"),
        (&[-2.0, 1.0][..], "team_scores[0]"),
    ] {
        let bad = Report {
            team_scores: scores,
            ..report(&[])
        };
        let e = compute(&plain, &NoRanking, &facts, &bad, &before, 0.0).unwrap_err();
        assert!(e.to_string().starts_with(field), "{e}");
    }
}

/// A periodic Glicko ladder: each match pays the winner's bias at once (its own Δr is 0, the
/// result waits for the period), and the period's close moves rank points by the whole
/// period's Δr·F, at the rank points held then, within the floors. Without the close's term a
/// loser would never lose rank points.
#[test]
fn a_periodic_ladder_moves_rank_points_by_the_period_rating_change_at_the_close() {
    use crate::ranking::{LadderState, RankingConfig, RankingKind, ladder};
    let system = SystemConfig::Glicko2(glicko2::Config {
        mode: crate::rating::Mode::Periodic,
        inactivity_granularity_seconds: 0.0,
        ..glicko2::Config::default()
    });
    let ranking = RankingConfig::default();
    let ranker = QueueRanker::new(RankingKind::Ladder, &ranking, &system);
    let cfg = &ranking.ladder;
    let period = system.rating_period_seconds();
    let teams = ids(&[&["a"], &["b"]]);
    // Both in Apprentice II, above the Apprentice I floor (600).
    let at = |rp| PoolRecord {
        rank_points: rp,
        ladder_floor: 600,
        ..record(1500.0, 200.0)
    };
    let start = vec![vec![at(700)], vec![at(700)]];
    let t = 10.0 * period + 60.0;
    let (one, _) = rate_players(
        "q",
        &system,
        &ranker,
        &teams,
        &start,
        &input(&[1, 2], &[]),
        t,
    )
    .unwrap();
    let (two, _) = rate_players(
        "q",
        &system,
        &ranker,
        &teams,
        &one,
        &input(&[1, 2], &[]),
        t + 60.0,
    )
    .unwrap();
    // Within the period: the winner has B twice, the loser has not moved.
    // B(700) = 7.5 → 708 (halves away from zero), then B(708) ≈ 7.49 → 715.
    let won = 715;
    assert_eq!(two[0][0].rank_points, won);
    assert_eq!(two[1][0].rank_points, 700);
    assert_eq!(two[0][0].win_streak, 2);

    let close = |r: &PoolRecord| {
        let mut closed = r.clone();
        assert!(close_period(&system, &ranker, &mut closed, 11).unwrap());
        closed
    };
    let (winner, loser) = (close(&two[0][0]), close(&two[1][0]));
    assert!(winner.skill.mean > 1500.0 && loser.skill.mean < 1500.0);
    // Δr·F over the whole period, F at the rank points held at the close.
    let expect = |before: &PoolRecord, after: &PoolRecord| {
        let state = LadderState {
            rp: before.rank_points,
            floor_rp: before.ladder_floor,
            win_streak: before.win_streak,
        };
        ladder::rating_change(cfg, &state, after.skill.mean - before.skill.mean).state
    };
    let lost = expect(&two[1][0], &loser);
    assert!(lost.rp < 700, "two losses cost rank points: {lost:?}");
    assert_eq!(
        (loser.rank_points, loser.ladder_floor, loser.win_streak),
        (lost.rp, lost.floor_rp, 0)
    );
    let gained = expect(&two[0][0], &winner);
    assert!(gained.rp > won);
    assert_eq!(
        (winner.rank_points, winner.win_streak),
        (gained.rp, 2),
        "the streak is the matches', not the close's"
    );

    // A match in a later period closes the ended one first, the same way.
    let (three, ack) = rate_players(
        "q",
        &system,
        &ranker,
        &teams,
        &two,
        &input(&[1, 2], &[]),
        12.0 * period,
    )
    .unwrap();
    assert_eq!(ack.changes[1].rank_points_before, lost.rp);
    assert_eq!(three[1][0].rank_points, lost.rp);

    // The floor holds at the close: a heavy period costs no more than down to 600.
    let mut floored = PoolRecord {
        rank_points: 605,
        ..two[1][0].clone()
    };
    assert!(close_period(&system, &ranker, &mut floored, 11).unwrap());
    assert_eq!(floored.rank_points, 600);
}

/// A period closed before its end (a season command's close) dates the player's last game no
/// later than the close itself; a period that has ended dates it at the period's end, as the
/// regular close does.
#[test]
fn closing_a_period_early_never_dates_the_last_game_in_the_future() {
    let system = SystemConfig::Glicko2(glicko2::Config {
        mode: crate::rating::Mode::Periodic,
        inactivity_granularity_seconds: 0.0,
        ..glicko2::Config::default()
    });
    let period = system.rating_period_seconds();
    let win = crate::rating::teams::PeriodResult {
        opponent: record(1500.0, 200.0).skill,
        score: 1.0,
        weight: 1.0,
    };
    let pending_in = |index: u64| PoolRecord {
        last_played_unix: Some((index as f64 * period) as i64),
        period: Some(Box::new(crate::records::PendingPeriod {
            index,
            results: vec![win],
        })),
        ..record(1500.0, 200.0)
    };
    let expected = system
        .rate_period(&record(1500.0, 200.0).skill, &[win], 0.0)
        .unwrap();

    // A day into period 10.
    let now = 10.0 * period + 86_400.5;
    let mut open = pending_in(10);
    assert!(close_period_now(&system, &NoRanking, &mut open, now).unwrap());
    assert_eq!((open.skill, open.period.as_deref()), (expected, None));
    assert_eq!(open.last_played_unix, Some(now.floor() as i64));

    let mut ended = pending_in(9);
    assert!(close_period_now(&system, &NoRanking, &mut ended, now).unwrap());
    assert_eq!(ended.last_played_unix, Some((10.0 * period) as i64));

    let mut idle = record(1500.0, 200.0);
    assert!(!close_period_now(&system, &NoRanking, &mut idle, now).unwrap());
    assert_eq!(idle, record(1500.0, 200.0));
}

/// A period closed at its end by a wall clock that had stepped past it is not opened again
/// when the clock steps back: the results played then wait for the next period, so no period
/// is rated twice. A player who closed nothing joins the period of the clock as before.
#[test]
fn a_result_never_reopens_a_rating_period_already_closed() {
    let system = SystemConfig::Glicko2(glicko2::Config {
        mode: crate::rating::Mode::Periodic,
        inactivity_granularity_seconds: 0.0,
        ..glicko2::Config::default()
    });
    let period = system.rating_period_seconds();
    let teams = ids(&[&["a"], &["b"]]);
    // `a`'s period 10 closed: its end is `a`'s last game, nothing is pending.
    let end = 11.0 * period;
    let closed = PoolRecord {
        last_played_unix: Some(end as i64),
        ..record(1500.0, 200.0)
    };
    let before = vec![vec![closed], vec![record(1500.0, 200.0)]];
    let (after, _) = rate_players(
        "q",
        &system,
        &NoRanking,
        &teams,
        &before,
        &input(&[1, 2], &[]),
        end - 1800.0,
    )
    .unwrap();
    let pending = |r: &PoolRecord| r.period.as_deref().map(|p| p.index);
    assert_eq!(
        pending(&after[0][0]),
        Some(11),
        "period 10 is closed already"
    );
    assert_eq!(pending(&after[1][0]), Some(10));
    // Period 10's close at its real end leaves `a`'s result waiting for period 11's.
    let mut at_the_end = after[0][0].clone();
    assert!(!close_period(&system, &NoRanking, &mut at_the_end, 11).unwrap());
    assert!(close_period(&system, &NoRanking, &mut at_the_end, 12).unwrap());
}

/// A result in a periodic pool that first closes a player's ended rating period reports that
/// close apart: before is the record with the period open, after the closed record the
/// acknowledgement starts from. A player with nothing ended pending has no close.
#[test]
fn a_result_reports_the_ended_period_it_closes_before_it_rates_the_match() {
    use crate::ranking::{RankingConfig, RankingKind};
    let system = SystemConfig::Glicko2(glicko2::Config {
        mode: crate::rating::Mode::Periodic,
        inactivity_granularity_seconds: 0.0,
        ..glicko2::Config::default()
    });
    let ranking = RankingConfig::default();
    let ranker = QueueRanker::new(RankingKind::Ladder, &ranking, &system);
    let period = system.rating_period_seconds();
    let teams = ids(&[&["a"], &["b"]]);
    // `a` lost three times in period 10 and has not played since; `b` is new.
    let loss = crate::rating::teams::PeriodResult {
        opponent: record(1500.0, 200.0).skill,
        score: 0.0,
        weight: 1.0,
    };
    let a = PoolRecord {
        rank_points: 700,
        ladder_floor: 600,
        period: Some(Box::new(crate::records::PendingPeriod {
            index: 10,
            results: vec![loss; 3],
        })),
        ..record(1500.0, 200.0)
    };
    let before = Before {
        players: vec![vec![a.clone()], vec![record(1500.0, 200.0)]],
        parties: Vec::new(),
    };
    let none = BTreeMap::new();
    let facts = MatchFacts {
        queue: "1v1",
        teams: &teams,
        parties: &[],
        left: &[],
    };
    let report = Report {
        placements: &[1, 2],
        performance: &none,
        abandoned: &[],
        team_scores: &[],
    };
    let out = compute(&system, &ranker, &facts, &report, &before, 12.0 * period).unwrap();

    let mut closed = a.clone();
    assert!(close_period(&system, &ranker, &mut closed, 12).unwrap());
    assert!(closed.rank_points < 700, "three losses cost rank points");
    assert_eq!(
        out.period_closes,
        vec![PeriodClose {
            period: 10,
            change: PlayerChange {
                player_id: PlayerId::from("a"),
                before: a.skill,
                after: closed.skill,
                rank_points_before: 700,
                rank_points_after: closed.rank_points,
            },
        }]
    );
    // The acknowledgement starts where the close left off, so between them nothing is lost.
    let change = &out.ack.changes[0];
    assert_eq!(
        (change.before, change.rank_points_before),
        (closed.skill, closed.rank_points)
    );

    // Within the period (or in a streaming pool) there is nothing to close.
    let now = 10.0 * period + 60.0;
    let within = compute(&system, &ranker, &facts, &report, &before, now).unwrap();
    assert!(within.period_closes.is_empty());
}

#[test]
fn a_period_close_is_reported_only_when_a_pending_period_closed() {
    let system = SystemConfig::Glicko2(glicko2::Config {
        mode: crate::rating::Mode::Periodic,
        ..glicko2::Config::default()
    });
    let player = PlayerId::from("a");
    let win = crate::rating::teams::PeriodResult {
        opponent: record(1500.0, 200.0).skill,
        score: 1.0,
        weight: 1.0,
    };
    let open = PoolRecord {
        rank_points: 40,
        period: Some(Box::new(crate::records::PendingPeriod {
            index: 3,
            results: vec![win],
        })),
        ..record(1500.0, 200.0)
    };
    let mut closed = open.clone();
    assert!(close_period(&system, &NoRanking, &mut closed, 4).unwrap());
    let close = period_close(&player, &open, &closed).expect("a close");
    assert_eq!(close.period, 3);
    assert_eq!(
        (close.change.before, close.change.after),
        (open.skill, closed.skill)
    );
    assert_eq!(
        (
            close.change.rank_points_before,
            close.change.rank_points_after
        ),
        (40, 40)
    );
    // Nothing pending before, or the same period still open after: no close.
    assert_eq!(period_close(&player, &closed, &closed), None);
    assert_eq!(period_close(&player, &open, &open), None);
}

/// A match is void only for those who stayed while a whole other team quit: the quitters lose,
/// a team that lost only some players is rated, and with nobody quitting nobody is void.
#[test]
fn the_void_players_are_those_who_stayed_against_a_team_that_quit_entirely() {
    let teams = ids(&[&["a1", "a2"], &["b1", "b2"], &["c1", "c2"]]);
    let quit = |names: &[&str]| names.iter().map(|&n| PlayerId::from(n)).collect();
    let void = |names: &[&str]| void_players(&teams, &quit(names));
    assert!(void(&[]).is_empty());
    assert!(void(&["b1"]).is_empty());
    assert_eq!(
        void(&["b1", "b2"]),
        ids(&[&["a1", "a2", "c1", "c2"]]).concat()
    );
    assert_eq!(
        void(&["b1", "b2", "a1"]),
        ids(&[&["a2", "c1", "c2"]]).concat()
    );
}

#[test]
fn a_rating_refusal_names_a_field_of_the_report() {
    let system = SystemConfig::Glicko2(glicko2::Config::default());
    let teams = ids(&[&["a"], &["b"]]);
    // A stored skill outside the system's domain: the rating of these placements fails.
    let before = vec![vec![record(1500.0, f64::NAN)], vec![record(1500.0, 200.0)]];
    let refused = rate_players(
        "1v1",
        &system,
        &NoRanking,
        &teams,
        &before,
        &input(&[1, 2], &[]),
        1e9,
    )
    .unwrap_err();
    let Rejection::Invalid(e) = refused else {
        panic!("not invalid input: {refused}");
    };
    assert_eq!(e.field, "placements", "{e}");
    assert!(e.rule.contains("teams[0][0]"), "the inner path stays: {e}");

    // A rating error about a field of the report keeps that field.
    for (field, kept) in [
        ("team_scores", "team_scores"),
        ("placements[1]", "placements[1]"),
        ("placements", "placements"),
        ("teams[1]", "placements"),
        ("placements_extra", "placements"),
    ] {
        let e = rating_refusal(crate::rating::RatingError::InvalidShape {
            field: field.into(),
            rule: "a rule".into(),
        });
        let Rejection::Invalid(e) = e else {
            panic!("not invalid input: {e}");
        };
        assert_eq!(e.field, kept, "{field}");
    }
}

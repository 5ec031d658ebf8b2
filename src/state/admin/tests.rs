//! Season resets and period closes against a state on an in-memory store.

use super::*;
use crate::rating::Skill;
use crate::records::party_key;

/// A prepared admin change's journal entries, and every event that reports it in entry order
/// but a reset's own `SEASON_RESET` (checked to be the last, in the last entry).
fn split(prepared: Vec<EntryWithEvents>) -> (Vec<JournalEntry>, Vec<EventRecord>) {
    let mut events: Vec<EventRecord> = prepared.iter().flat_map(|e| e.events.clone()).collect();
    let reset = crate::store::EventKind::SeasonReset;
    if events.last().is_some_and(|e| e.kind == reset) {
        events.pop();
    }
    assert!(events.iter().all(|e| e.kind != reset), "{events:?}");
    (prepared.into_iter().map(|e| e.entry).collect(), events)
}

/// Each event's player and detail, each checked to be a period close's `RATING_CHANGED`.
fn period_closes(events: &[EventRecord]) -> Vec<(String, serde_json::Value)> {
    events
        .iter()
        .map(|e| {
            assert_eq!(e.kind, crate::store::EventKind::RatingChanged, "{e:?}");
            assert_eq!(e.match_id, "", "a close is no match's: {e:?}");
            let detail: serde_json::Value = serde_json::from_str(&e.detail_json).unwrap();
            assert_eq!(detail["period_close"], true, "{detail}");
            (e.player_id.clone(), detail)
        })
        .collect()
}

#[test]
fn a_hard_reset_takes_the_parties_ratings_along_with_the_players() {
    let state = crate::state::test_util::state();
    let skill = |mean, deviation| Skill {
        mean,
        deviation,
        volatility: 0.06,
    };
    let player = |mean| PoolRecord {
        skill: skill(mean, 60.0),
        ..state.initial_record(&state.queue("queue", "2v2").unwrap())
    };
    let (a, b) = (PlayerId::new("a"), PlayerId::new("b"));
    let mut entry = State::admin_entry(
        "test:setup".into(),
        "2v2",
        vec![(a.clone(), player(1400.0)), (b.clone(), player(1800.0))],
    );
    // The duo is rated below both its members: settled, with a small deviation.
    let duo = party_key(&[a, b]);
    entry.parties = vec![(
        duo.clone(),
        PartyRecord {
            skill: skill(1300.0, 40.0),
            games: 12,
            last_played_unix: None,
        },
    )];
    state.apply_admin(&entry);

    let queues = vec![state.queue("queue", "2v2").unwrap()];
    let (entries, _) = state
        .prepare_season_reset(ResetKind::Hard, &queues)
        .unwrap()
        .unwrap();
    let reported = entries[0].events.clone();
    let (entries, events) = split(entries);
    let cfg = &state.config().season;
    let reset = entries[0]
        .parties
        .iter()
        .find(|(key, _)| *key == duo)
        .map(|(_, r)| r.skill)
        .expect("the duo's rating is reset too");
    // On the players' new scale, as a player at the lowest rating is, with the reset's
    // deviation.
    assert_eq!(reset.mean, cfg.rescale_base);
    assert_eq!(reset.deviation, cfg.reset_deviation);
    assert!(events.is_empty(), "no rating period in a streaming pool");
    // The reset reports itself in its own entry's batch.
    assert_eq!(reported.len(), 1);
    assert_eq!(reported[0].kind, crate::store::EventKind::SeasonReset);
    let detail: serde_json::Value = serde_json::from_str(&reported[0].detail_json).unwrap();
    assert_eq!(detail["kind"], "hard");
    assert_eq!(detail["queues"], serde_json::json!(["2v2"]));
    assert_eq!(detail["players_changed"], 2);
}

/// A party rating the soft reset's decay refuses refuses the reset, as a player's does: it is
/// not left out of the reset to keep its old rating into the new week.
#[test]
fn a_soft_reset_is_refused_by_a_party_rating_its_decay_refuses() {
    let state = crate::state::test_util::state();
    let queue = state.queue("queue", "2v2").unwrap();
    let (a, b) = (PlayerId::new("a"), PlayerId::new("b"));
    let record = state.initial_record(&queue);
    let mut entry = State::admin_entry(
        "test:setup".into(),
        "2v2",
        vec![(a.clone(), record.clone()), (b.clone(), record.clone())],
    );
    let broken = Skill {
        deviation: -1.0,
        ..record.skill
    };
    entry.parties = vec![(
        party_key(&[a, b]),
        PartyRecord {
            skill: broken,
            games: 3,
            last_played_unix: None,
        },
    )];
    state.apply_admin(&entry);
    let refused = state
        .prepare_season_reset(ResetKind::Soft, &[queue])
        .unwrap();
    match refused {
        Err(Rejection::Rating {
            player,
            pool,
            detail,
        }) => {
            assert_eq!((player.as_str(), pool.as_str()), ("a", "2v2"));
            assert!(detail.contains("party (a, b)"), "{detail}");
        }
        other => panic!("expected the party's rating to refuse the reset: {other:?}"),
    }
}

/// 1v1 as a periodic Glicko-2 ladder, idle periods counted exactly.
const PERIODIC_LADDER: &str = r#"
[queues.1v1]
ranking = "ladder"

[queues.1v1.rating]
system = "glicko2"
mode = "periodic"
inactivity_granularity_seconds = 0.0
"#;

fn glicko(mean: f64, deviation: f64) -> Skill {
    Skill {
        mean,
        deviation,
        volatility: 0.06,
    }
}

/// A record in `queue`'s pool at `mean` (deviation 150) with `rank_points` and the floor they
/// earn, and `results` pending in rating period `index`.
fn pending(
    state: &State,
    queue: &QueueInfo,
    mean: f64,
    rank_points: RankPoints,
    index: u64,
    results: Vec<crate::rating::teams::PeriodResult>,
) -> PoolRecord {
    let ladder = LadderState::with_rp(&state.config().ranking.ladder, rank_points);
    PoolRecord {
        skill: glicko(mean, 150.0),
        rank_points: ladder.rp,
        ladder_floor: ladder.floor_rp,
        period: (!results.is_empty())
            .then(|| Box::new(crate::records::PendingPeriod { index, results })),
        ..state.initial_record(queue)
    }
}

fn result(opponent: Skill, score: f64) -> crate::rating::teams::PeriodResult {
    crate::rating::teams::PeriodResult {
        opponent,
        score,
        weight: 1.0,
    }
}

#[test]
fn the_period_close_pass_journals_the_ladder_rank_points_with_the_skill() {
    let state = crate::state::test_util::state_with(PERIODIC_LADDER);
    let queue = state.queue("queue", "1v1").unwrap();
    let system = &queue.config.rating;
    let losses = vec![result(glicko(1500.0, 150.0), 0.0); 3];
    let a = PlayerId::new("a");
    let before = pending(&state, &queue, 1500.0, 700, 0, losses.clone());
    state.apply_admin(&State::admin_entry(
        "test:setup".into(),
        "1v1",
        vec![(a.clone(), before.clone())],
    ));

    let now = 3.0 * system.rating_period_seconds();
    let (entries, closed) = state.prepare_period_close(now).unwrap().unwrap();
    let (entries, events) = split(entries);
    assert_eq!((entries.len(), closed), (1, 1));
    let (who, after) = &entries[0].records[0];
    assert_eq!(who, &a);
    let skill = system.rate_period(&before.skill, &losses, 0.0).unwrap();
    assert_eq!(after.skill, skill);
    // In the same absolute record, so the entry applies (or replays) all of it or none.
    let ladder = crate::ranking::ladder::rating_change(
        &state.config().ranking.ladder,
        &LadderState {
            rp: 700,
            floor_rp: before.ladder_floor,
            win_streak: 0,
        },
        skill.mean - before.skill.mean,
    );
    assert!(ladder.state.rp < 700, "{ladder:?}");
    assert_eq!(after.rank_points, ladder.state.rp);
    assert_eq!(after.period, None);
    // Reported, in the same entry's batch: before as it stood open, after as it closed.
    let closes = period_closes(&events);
    assert_eq!(closes.len(), 1, "{closes:?}");
    let (who, detail) = &closes[0];
    assert_eq!(who, "a");
    assert_eq!(
        (
            &detail["queue"],
            &detail["pool"],
            &detail["period"],
            &detail["rank_points_before"],
            &detail["rank_points_after"],
        ),
        (
            &serde_json::json!("1v1"),
            &serde_json::json!("1v1"),
            &serde_json::json!(0),
            &serde_json::json!(700),
            &serde_json::json!(after.rank_points),
        )
    );
    assert_eq!(detail["mean_before"], before.skill.mean);
    assert_eq!(detail["mean_after"], skill.mean);
    assert_eq!(detail["deviation_before"], before.skill.deviation);
    assert_eq!(detail["deviation_after"], skill.deviation);
}

#[test]
fn a_hard_reset_rates_the_open_period_on_the_old_scale_before_it_rescales() {
    let state = crate::state::test_util::state_with(PERIODIC_LADDER);
    let queue = state.queue("queue", "1v1").unwrap();
    let system = &queue.config.rating;
    let open = crate::results::period_index(system, super::unix_now());
    // `a` has beaten a 1800 player this period, not yet applied; 5 RP short of 1200.
    let upset = vec![result(glicko(1800.0, 60.0), 1.0)];
    let a = pending(&state, &queue, 1400.0, 1195, open, upset.clone());
    let rows = vec![
        (PlayerId::new("a"), a.clone()),
        (
            PlayerId::new("b"),
            pending(&state, &queue, 1800.0, 700, 0, vec![]),
        ),
        (
            PlayerId::new("c"),
            pending(&state, &queue, 1600.0, 700, 0, vec![]),
        ),
        (
            PlayerId::new("d"),
            pending(&state, &queue, 1300.0, 700, 0, vec![]),
        ),
    ];
    state.apply_admin(&State::admin_entry("test:setup".into(), "1v1", rows));

    let (entries, _) = state
        .prepare_season_reset(ResetKind::Hard, std::slice::from_ref(&queue))
        .unwrap()
        .unwrap();
    let (entries, events) = split(entries);
    let after = |id: &str| {
        entries[0]
            .records
            .iter()
            .find(|(p, _)| p.as_str() == id)
            .map(|(_, r)| r.clone())
            .unwrap()
    };
    // The upset is rated against the 1800 player as they were, then the rescale maps the
    // result onto the new season's scale (d, the lowest, at 1500; b, the highest, at 2250).
    let closed = system.rate_period(&a.skill, &upset, 0.0).unwrap();
    assert!(closed.mean > 1400.0);
    let cfg = &state.config().season;
    let expected = cfg.rescale_base + (closed.mean - 1300.0) / 500.0 * cfg.rescale_span;
    let reset = after("a");
    assert!(
        (reset.skill.mean - expected).abs() < 1e-9,
        "{} vs {expected}",
        reset.skill.mean
    );
    assert_eq!(reset.skill.deviation, cfg.reset_deviation);
    assert_eq!(
        reset.period, None,
        "nothing of the old season is left pending"
    );
    // Closed before its period ended: the last game is dated by the reset, not the period's end.
    let now = super::unix_now() as i64;
    assert!(
        reset.last_played_unix.is_some_and(|t| t <= now),
        "{:?} is later than {now}",
        reset.last_played_unix
    );
    // Its rank points moved with it in the old season: past 1200 and first on the board, so
    // the season ends in the top tier and the new one starts from its hard-reset value.
    let top = state.config().ranking.ladder.tiers.last().unwrap().clone();
    assert_eq!(reset.rank_points, top.hard_reset_rp.unwrap());
    assert_eq!(after("d").skill.mean, cfg.rescale_base);
    // The close is reported as the close left `a`, on the old scale: the reset's own change
    // is the SEASON_RESET event's. Those with nothing pending had no close.
    let closes = period_closes(&events);
    assert_eq!(closes.len(), 1, "{closes:?}");
    let (who, detail) = &closes[0];
    assert_eq!(who, "a");
    assert_eq!(detail["period"], open);
    assert_eq!(detail["mean_before"], 1400.0);
    assert_eq!(detail["mean_after"], closed.mean);
    assert_eq!(detail["rank_points_before"], 1195);
    let crossed = detail["rank_points_after"].as_u64().unwrap();
    assert!(crossed >= 1200, "the upset's Δr·F: {detail}");
    assert_ne!(crossed, u64::from(reset.rank_points));

    // Applied, a later close has nothing left to add.
    for entry in &entries {
        state.apply_admin(entry);
    }
    let later = (open + 2) as f64 * system.rating_period_seconds();
    let (closes, n) = state.prepare_period_close(later).unwrap().unwrap();
    assert_eq!((closes.len(), n), (0, 0), "{closes:?}");
}

/// `state` with `rows` in the 1v1 pool: `a` at 1400 (deviation 150, 1195 RP, 5 short of
/// Master) with an upset win over an 1800 player pending in the open period, and three players
/// with nothing pending.
fn with_an_upset_pending(state: &State) -> (PoolRecord, Vec<crate::rating::teams::PeriodResult>) {
    let queue = state.queue("queue", "1v1").unwrap();
    let open = crate::results::period_index(&queue.config.rating, super::unix_now());
    let upset = vec![result(glicko(1800.0, 60.0), 1.0)];
    let a = pending(state, &queue, 1400.0, 1195, open, upset.clone());
    let mut rows = vec![(PlayerId::new("a"), a.clone())];
    for (id, mean) in [("b", 1800.0), ("c", 1600.0), ("d", 1300.0)] {
        rows.push((
            PlayerId::new(id),
            pending(state, &queue, mean, 700, 0, vec![]),
        ));
    }
    state.apply_admin(&State::admin_entry("test:setup".into(), "1v1", rows));
    (a, upset)
}

fn record_of(entry: &JournalEntry, id: &str) -> Option<PoolRecord> {
    entry
        .records
        .iter()
        .find(|(p, _)| p.as_str() == id)
        .map(|(_, r)| r.clone())
}

#[test]
fn a_soft_reset_closes_the_open_period_then_grows_the_deviation_once() {
    let state = crate::state::test_util::state_with(PERIODIC_LADDER);
    let queue = state.queue("queue", "1v1").unwrap();
    let system = &queue.config.rating;
    let period = system.rating_period_seconds();
    let (a, upset) = with_an_upset_pending(&state);

    let (entries, _) = state
        .prepare_season_reset(ResetKind::Soft, std::slice::from_ref(&queue))
        .unwrap()
        .unwrap();
    let (entries, events) = split(entries);
    let after = record_of(&entries[0], "a").unwrap();
    // The upset is rated with the deviation the games were played on, then the week's one
    // period of growth: not the growth first and the period's own on top.
    let closed = system.rate_period(&a.skill, &upset, 0.0).unwrap();
    assert_eq!(after.skill, system.decay(&closed, period).unwrap());
    assert_eq!(after.period, None, "nothing of the week is left pending");
    let now = super::unix_now() as i64;
    assert!(after.last_played_unix.is_some_and(|t| t <= now));

    // The week's RP holds the period's Δr·F: past 1200, so Master, below its 1300 cap.
    let ladder = &state.config().ranking.ladder;
    let moved = crate::ranking::ladder::rating_change(
        ladder,
        &LadderState {
            rp: 1195,
            floor_rp: a.ladder_floor,
            win_streak: 0,
        },
        closed.mean - a.skill.mean,
    );
    assert!((1200..=1300).contains(&moved.state.rp), "{moved:?}");
    assert_eq!(after.rank_points, moved.state.rp);
    let closes = period_closes(&events);
    assert_eq!(closes.len(), 1, "{closes:?}");
    let (who, detail) = &closes[0];
    assert_eq!(who, "a");
    assert_eq!(
        (&detail["rank_points_before"], &detail["rank_points_after"]),
        (&serde_json::json!(1195), &serde_json::json!(moved.state.rp))
    );
    assert_eq!(detail["mean_after"], closed.mean);
    assert_eq!(detail["deviation_after"], closed.deviation);
    let (_, _, week) = entries[0]
        .season
        .as_ref()
        .and_then(|s| s.week_rp.clone())
        .unwrap();
    let week_a = week.iter().find(|(p, _)| p.as_str() == "a").unwrap().1;
    assert_eq!(week_a, moved.state.rp);

    // A player with nothing pending grows by the one period, as before.
    let d = record_of(&entries[0], "d").unwrap();
    assert_eq!(
        d.skill,
        system.decay(&glicko(1300.0, 150.0), period).unwrap()
    );

    // Applied, a later close has nothing left to add.
    for entry in &entries {
        state.apply_admin(entry);
    }
    let open = crate::results::period_index(system, super::unix_now());
    let later = (open + 2) as f64 * period;
    let (closes, n) = state.prepare_period_close(later).unwrap().unwrap();
    assert_eq!((closes.len(), n), (0, 0), "{closes:?}");
}

#[test]
fn the_end_of_a_season_closes_the_open_period_before_it_ranks() {
    let state = crate::state::test_util::state_with(PERIODIC_LADDER);
    let queue = state.queue("queue", "1v1").unwrap();
    let system = &queue.config.rating;
    let (a, upset) = with_an_upset_pending(&state);

    let (entries, outcome) = state
        .prepare_end_season(std::slice::from_ref(&queue))
        .unwrap()
        .unwrap();
    let (entries, events) = split(entries);
    assert_eq!(outcome.players, 4);
    let ranks = &entries[0]
        .season
        .as_ref()
        .unwrap()
        .ranks
        .as_ref()
        .unwrap()
        .1;
    let rank_a = ranks.iter().find(|r| r.player == "a").unwrap();
    // The upset's Δr·F takes `a` past 1200, first on the board: the season ends in the top
    // tier, not in Expert III where the rank points stood before the close.
    let top = state.config().ranking.ladder.tiers.last().unwrap();
    assert_eq!(rank_a.tier, top.name);
    assert!(rank_a.rank_points >= 1200, "{rank_a:?}");

    // The closed record goes into the same entry as the ranks, and only it.
    let closed = system.rate_period(&a.skill, &upset, 0.0).unwrap();
    let after = record_of(&entries[0], "a").unwrap();
    assert_eq!((after.skill, after.period), (closed, None));
    assert_eq!(after.rank_points, rank_a.rank_points);
    assert_eq!(entries[0].records.len(), 1);
    let closes = period_closes(&events);
    assert_eq!(closes.len(), 1, "{closes:?}");
    let (who, detail) = &closes[0];
    assert_eq!(who, "a");
    assert_eq!(detail["rank_points_before"], 1195);
    assert_eq!(detail["rank_points_after"], rank_a.rank_points);
    assert_eq!(detail["mean_after"], closed.mean);

    for entry in &entries {
        state.apply_admin(entry);
    }
    let open = crate::results::period_index(system, super::unix_now());
    let later = (open + 2) as f64 * system.rating_period_seconds();
    let (closes, n) = state.prepare_period_close(later).unwrap().unwrap();
    assert_eq!((closes.len(), n), (0, 0), "{closes:?}");
}

#[test]
fn an_admins_rating_change_is_reported_with_the_record_before_and_after() {
    let state = crate::state::test_util::state();
    let queue = state.queue("queue", "1v1").unwrap();
    let p = PlayerId::new("edited");
    let set = |mean: f64, rp: Option<RankPoints>| {
        let prepared = state
            .prepare_set_rating(
                &queue,
                &p,
                Skill {
                    mean,
                    deviation: 90.0,
                    volatility: 0.06,
                },
                rp,
            )
            .unwrap();
        state.apply_admin(&prepared.entry);
        prepared.events
    };
    let initial = state.initial_record(&queue);
    // A player with no record yet: before is where every new player starts.
    let events = set(1700.0, None);
    assert_eq!(events.len(), 1);
    let e = &events[0];
    assert_eq!(
        (e.kind, e.player_id.as_str(), e.match_id.as_str()),
        (crate::store::EventKind::RatingChanged, "edited", "")
    );
    let detail: serde_json::Value = serde_json::from_str(&e.detail_json).unwrap();
    assert_eq!(detail["admin"], "set_rating");
    assert_eq!(detail["pool"], queue.pool.as_str());
    assert_eq!(detail["mean_before"], initial.skill.mean);
    assert_eq!(detail["mean_after"], 1700.0);
    assert_eq!(detail["deviation_after"], 90.0);
    // The next edit starts from the first one's record.
    let events = set(1650.0, None);
    let detail: serde_json::Value = serde_json::from_str(&events[0].detail_json).unwrap();
    assert_eq!(
        (
            detail["mean_before"].as_f64(),
            detail["mean_after"].as_f64()
        ),
        (Some(1700.0), Some(1650.0))
    );
    assert_eq!(detail["rank_points_before"], detail["rank_points_after"]);
}

#[test]
fn an_admins_rating_drops_the_games_of_the_open_period() {
    let state = crate::state::test_util::state_with(PERIODIC_LADDER);
    let queue = state.queue("queue", "1v1").unwrap();
    let (a, _) = with_an_upset_pending(&state);
    assert!(a.period.is_some(), "an upset waits for the period's close");
    let set = Skill {
        mean: 1500.0,
        deviation: 100.0,
        volatility: 0.06,
    };
    let prepared = state
        .prepare_set_rating(&queue, &PlayerId::new("a"), set, None)
        .unwrap();
    let after = record_of(&prepared.entry, "a").unwrap();
    assert_eq!(after.skill.mean, 1500.0);
    assert!(
        after.period.is_none(),
        "the upset would move the set rating at the close"
    );
}

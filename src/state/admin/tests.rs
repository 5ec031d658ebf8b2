//! Season resets and period closes against a state on an in-memory store.

use super::*;
use crate::rating::Skill;
use crate::records::party_key;

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
}

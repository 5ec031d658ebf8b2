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

//! The retention of result acknowledgements on every backend: a trim drops the oldest first,
//! within its bound, keeps the newer ones, and what it dropped stays dropped in a fresh handle
//! (in cluster mode: a store loaded again from Redis), while the journal keeps every entry.

use super::{Reopen, entry, memory_reopen, redis_reopen, sled_reopen, with_redis};
use crate::ids::{MatchId, PlayerId};
use crate::records::PlayerChange;
use crate::store::{AckRecord, History, JournalEntry};

/// A result of match `id` applied at `applied_unix`, naming `player` in its acknowledgement.
fn applied(id: &str, player: &str, applied_unix: f64) -> JournalEntry {
    let mut e = JournalEntry {
        applied_unix,
        ..entry(id, player, 1510.0)
    };
    let skill = e.records[0].1.skill;
    e.ack.changes = vec![PlayerChange {
        player_id: PlayerId::from(player),
        before: skill,
        after: skill,
        rank_points_before: 0,
        rank_points_after: 10,
    }];
    e
}

/// Match `id`'s acknowledgement as [`entry`] makes it, applied at 1 s.
pub(super) fn acked(id: &str) -> (MatchId, AckRecord) {
    let ack = entry(id, "p1", 1.0).ack;
    (MatchId::from(id), AckRecord::applied(ack, 1.0))
}

/// Which of `ids` a store still acknowledges.
fn still_acked(store: &crate::store::Store, ids: &[&str]) -> Vec<String> {
    ids.iter()
        .filter(|id| store.result_of(&MatchId::from(**id)).unwrap().is_some())
        .map(|id| (*id).to_string())
        .collect()
}

const MATCHES: [&str; 4] = ["m-a", "m-b", "m-c", "m-d"];

fn acknowledgements_go_oldest_first_within_the_bound_and_stay_gone(reopen: Reopen<'_>) {
    {
        let store = reopen();
        // Journaled out of time order: the trim goes by the time, not the order written.
        store
            .append_journal(
                1,
                &[applied("m-c", "p1", 300.0), applied("m-a", "p1", 100.0)],
            )
            .unwrap();
        store
            .append_journal(
                3,
                &[applied("m-d", "p2", 400.0), applied("m-b", "p2", 200.0)],
            )
            .unwrap();
        assert_eq!(store.trim_acks(250.0, 1).unwrap(), 1, "at most one");
        assert_eq!(still_acked(&store, &MATCHES), ["m-b", "m-c", "m-d"]);
        assert_eq!(store.trim_acks(250.0, 10).unwrap(), 1);
        assert_eq!(store.trim_acks(250.0, 10).unwrap(), 0, "nothing older left");
        assert_eq!(still_acked(&store, &MATCHES), ["m-c", "m-d"]);
        store.flush().unwrap();
    }
    let store = reopen();
    assert_eq!(still_acked(&store, &MATCHES), ["m-c", "m-d"]);
    // The journal (not yet in a snapshot) keeps every entry: a replay is unchanged.
    let replayed: Vec<String> = store
        .journal_after(0)
        .map(|e| e.unwrap().1.match_id.to_string())
        .collect();
    assert_eq!(replayed, ["m-c", "m-a", "m-d", "m-b"]);
    // The times came back with the store.
    assert_eq!(store.trim_acks(350.0, 10).unwrap(), 1);
    assert_eq!(still_acked(&store, &MATCHES), ["m-d"]);
    let kept = store.export_history().unwrap().results;
    assert_eq!(kept.len(), 1);
    assert_eq!(kept[0].1.applied_unix, Some(400.0));
    store.flush().unwrap();
    drop(store);
    assert_eq!(still_acked(&reopen(), &MATCHES), ["m-d"]);
}

fn an_acknowledgement_without_its_time_counts_from_its_matchs_formation(reopen: Reopen<'_>) {
    // Formed at 1,000 s and at 2,000 s (the time in the id), and an id without a time.
    let (old, newer, untimed) = (
        "m-0000000f4240ffffffffffffffffffff",
        "m-0000001e8480ffffffffffffffffffff",
        "custom-7",
    );
    {
        let store = reopen();
        let bare = |id: &str| {
            let ack = applied(id, "p1", 0.0).ack;
            let record = AckRecord {
                ack,
                applied_unix: None,
            };
            (MatchId::from(id), record)
        };
        store
            .import_history(&History {
                results: vec![bare(old), bare(newer), bare(untimed)],
                ..History::default()
            })
            .unwrap();
        store.flush().unwrap();
    }
    let store = reopen();
    assert_eq!(store.trim_acks(1_500.0, 10).unwrap(), 1);
    assert_eq!(
        still_acked(&store, &[old, newer, untimed]),
        [newer, untimed]
    );
    assert_eq!(store.trim_acks(1e12, 10).unwrap(), 1);
    assert_eq!(
        still_acked(&store, &[untimed]),
        [untimed],
        "kept: no time is known"
    );
}

fn an_erased_players_acknowledgements_keep_their_time(reopen: Reopen<'_>) {
    let marker = PlayerId::from("erased:0123456789ab");
    {
        let store = reopen();
        store
            .append_journal(
                1,
                &[applied("m-a", "gone", 100.0), applied("m-b", "gone", 300.0)],
            )
            .unwrap();
        store.finish_snapshot(2).unwrap();
        store
            .erase_player(&PlayerId::from("gone"), &marker)
            .unwrap();
        store.flush().unwrap();
    }
    let store = reopen();
    let ack = store.result_of(&MatchId::from("m-b")).unwrap().unwrap();
    assert_eq!(ack.changes[0].player_id, marker);
    assert_eq!(store.trim_acks(200.0, 10).unwrap(), 1);
    assert_eq!(still_acked(&store, &["m-a", "m-b"]), ["m-b"]);
}

// `on_every_backend!` is the parent module's.
on_every_backend!(
    acknowledgements_go_oldest_first_within_the_bound_and_stay_gone,
    an_acknowledgement_without_its_time_counts_from_its_matchs_formation,
    an_erased_players_acknowledgements_keep_their_time,
);

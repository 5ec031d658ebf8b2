//! The match history's past indexes on every backend: a record that left a player's list
//! while other lists held it still names the player, and their erasure must rewrite it.

use super::{
    Reopen, Store, entry, history, ids, memory_reopen, past, record, redis_reopen, sled_reopen,
    wait, with_redis,
};
use crate::ids::{MatchId, PlayerId};
use crate::records::{MatchRecord, PlayerChange};
use crate::store::{HistoryWrite, JournalEntry};

const EVERYONE: [&str; 6] = ["gone", "o0", "o1", "o2", "o3", "o4"];
const MATCHES: [&str; 9] = ["m0", "m1", "m2", "m3", "m4", "x1", "x2", "y1", "y2"];

fn change(player: &str) -> PlayerChange {
    PlayerChange {
        player_id: PlayerId::from(player),
        before: record(1500.0)["1v1"].skill,
        after: record(1510.0)["1v1"].skill,
        rank_points_before: 0,
        rank_points_after: 10,
    }
}

/// A result between `a` and `b` whose record rides in its journal entry and names both in
/// its rating changes.
fn result(id: &str, a: &str, b: &str) -> JournalEntry {
    let mut e = entry(id, a, 1510.0);
    let mut h = history(id, &[&[a], &[b]], 2);
    h.record.changes = vec![change(a), change(b)];
    e.ack.changes = h.record.changes.clone();
    e.history = Some(h);
    e
}

fn solo(id: &str, player: &str) -> HistoryWrite {
    history(id, &[&[player]], 2)
}

/// Whether a record names `player` anywhere (teams, rating changes).
fn names(record: &MatchRecord, player: &str) -> bool {
    let text = serde_json::to_string(record).unwrap();
    text.contains(&serde_json::to_string(player).unwrap())
}

/// Every record readable through any read: by id, and through every player's list and past
/// index.
fn readable(store: &Store) -> Vec<MatchRecord> {
    let mut found = Vec::new();
    for id in MATCHES {
        found.extend(wait(store.match_record(&MatchId::from(id))));
    }
    for player in EVERYONE {
        let player = PlayerId::from(player);
        for list in [
            wait(store.player_matches(&player)),
            wait(store.past_matches(&player)),
        ] {
            found.extend(wait(store.match_records(&list)));
        }
    }
    found
}

fn erasing_a_player_rewrites_the_records_that_left_their_history(reopen: Reopen<'_>) {
    let (gone, marker) = (
        PlayerId::from("gone"),
        PlayerId::from("erased:0123456789ab"),
    );
    {
        let store = reopen();
        // Each list keeps 2. o0's own matches cut m0 off o0's list (gone still holds it)...
        store
            .append_history(&[history("m0", &[&["gone"], &["o0"]], 2)])
            .unwrap();
        store
            .append_history(&[solo("x1", "o0"), solo("x2", "o0")])
            .unwrap();
        assert_eq!(past(&store, "o0"), ["m0"]);
        store
            .append_journal(1, &[result("m1", "gone", "o1")])
            .unwrap();
        // ... then gone's cut it too: dropped, it leaves o0's index.
        store
            .append_journal(2, &[result("m2", "gone", "o2")])
            .unwrap();
        assert_eq!(wait(store.match_record(&MatchId::from("m0"))), None);
        assert!(past(&store, "o0").is_empty());
        // m3: o3's own matches cut it off o3's list, gone keeps it.
        store
            .append_journal(3, &[result("m3", "gone", "o3")])
            .unwrap();
        store
            .append_history(&[solo("y1", "o3"), solo("y2", "o3")])
            .unwrap();
        store.append_history(&[solo("m4", "gone")]).unwrap();
        store.flush().unwrap();
        assert_eq!(ids(&store, "gone"), ["m4", "m3"]);
        // m1 and m2 left gone's list; o1 and o2 keep them, still naming gone.
        assert_eq!(past(&store, "gone"), ["m1", "m2"]);
        assert_eq!(past(&store, "o3"), ["m3"]);
        let m1 = wait(store.match_record(&MatchId::from("m1"))).expect("o1 holds m1");
        assert!(names(&m1, "gone"));
    }
    {
        let store = reopen();
        assert_eq!(
            past(&store, "gone"),
            ["m1", "m2"],
            "the index survives a reopen"
        );
        store.erase_player(&gone, &marker).unwrap();
        store.flush().unwrap();
    }
    let store = reopen();
    let readable = readable(&store);
    for r in &readable {
        assert!(
            !names(r, "gone"),
            "{} still names the player: {r:?}",
            r.match_id
        );
    }
    // The records others keep name the marker instead, in the teams and the changes.
    for (id, other) in [("m1", "o1"), ("m2", "o2")] {
        let r = wait(store.match_record(&MatchId::from(id))).expect(other);
        assert_eq!(
            r.teams,
            vec![vec![marker.clone()], vec![PlayerId::from(other)]]
        );
        let named: Vec<&str> = r.changes.iter().map(|c| c.player_id.as_str()).collect();
        assert_eq!(named, [marker.as_str(), other], "{id}");
        assert_eq!(ids(&store, other), [id], "{other} keeps it");
    }
    // m3 and m4 only gone's list held: dropped, and m3 left o3's index with it.
    for id in ["m3", "m4"] {
        assert_eq!(wait(store.match_record(&MatchId::from(id))), None, "{id}");
    }
    assert!(ids(&store, "gone").is_empty());
    assert!(past(&store, "gone").is_empty());
    assert!(past(&store, "o3").is_empty());
    // Bounded: once o1 and o2 play on, m1 and m2 go and no index names any record.
    store
        .append_history(&[
            solo("z1", "o1"),
            solo("z2", "o1"),
            solo("z3", "o2"),
            solo("z4", "o2"),
        ])
        .unwrap();
    for id in ["m1", "m2"] {
        assert_eq!(wait(store.match_record(&MatchId::from(id))), None, "{id}");
    }
    for player in EVERYONE.iter().chain(&[marker.as_str()]) {
        assert!(past(&store, player).is_empty(), "{player}'s index");
    }
}

// `on_every_backend!` is the parent module's.
on_every_backend!(erasing_a_player_rewrites_the_records_that_left_their_history);

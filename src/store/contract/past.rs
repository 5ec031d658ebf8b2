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

/// No record any read reaches names "gone".
fn assert_forgotten(store: &Store) {
    for r in &readable(store) {
        assert!(
            !names(r, "gone"),
            "{} still names the player: {r:?}",
            r.match_id
        );
    }
}

/// The history both tests start from: records that left "gone"'s list (m1, m2) and o3's (m3)
/// while other lists keep them, and one (m0) that left o0's and was dropped since.
fn play(store: &Store) {
    // Each list keeps 2. o0's own matches cut m0 off o0's list (gone still holds it)...
    store
        .append_history(&[history("m0", &[&["gone"], &["o0"]], 2)])
        .unwrap();
    store
        .append_history(&[solo("x1", "o0"), solo("x2", "o0")])
        .unwrap();
    assert_eq!(past(store, "o0"), ["m0"]);
    store
        .append_journal(1, &[result("m1", "gone", "o1")])
        .unwrap();
    // ... then gone's cut it too: dropped, it leaves o0's index.
    store
        .append_journal(2, &[result("m2", "gone", "o2")])
        .unwrap();
    assert_eq!(wait(store.match_record(&MatchId::from("m0"))), None);
    assert!(past(store, "o0").is_empty());
    // m3: o3's own matches cut it off o3's list, gone keeps it.
    store
        .append_journal(3, &[result("m3", "gone", "o3")])
        .unwrap();
    store
        .append_history(&[solo("y1", "o3"), solo("y2", "o3")])
        .unwrap();
    store.append_history(&[solo("m4", "gone")]).unwrap();
    store.flush().unwrap();
    assert_eq!(ids(store, "gone"), ["m4", "m3"]);
    // m1 and m2 left gone's list; o1 and o2 keep them, still naming gone.
    assert_eq!(past(store, "gone"), ["m1", "m2"]);
    assert_eq!(past(store, "o3"), ["m3"]);
    let m1 = wait(store.match_record(&MatchId::from("m1"))).expect("o1 holds m1");
    assert!(names(&m1, "gone"));
}

fn erasing_a_player_rewrites_the_records_that_left_their_history(reopen: Reopen<'_>) {
    let (gone, marker) = (
        PlayerId::from("gone"),
        PlayerId::from("erased:0123456789ab"),
    );
    play(&reopen());
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
    assert_forgotten(&store);
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

/// The marker of an erasure made before the past indexes were taken out.
const EARLIER_MARKER: &str = "erased:aaaaaaaaaaaa";

/// The past index of every player the history names, and of the earlier erasure's marker.
fn indexes(store: &Store) -> Vec<Vec<String>> {
    EVERYONE
        .iter()
        .chain(&[EARLIER_MARKER])
        .map(|p| past(store, p))
        .collect()
}

/// A store of an earlier release: the history written (with an erasure of o4, so a record
/// another list keeps names a marker, which has no list), then every past index and the mark
/// taken out by `forget`. The next open (`reopen`) builds the indexes the writes had built,
/// and an erasure of "gone" then leaves no record naming them.
fn a_store_from_before_past_indexes_gets_them_built(reopen: Reopen<'_>, forget: &mut dyn FnMut()) {
    let built = {
        let store = reopen();
        play(&store);
        store
            .append_history(&[history("w1", &[&["o4"], &["o1"]], 2)])
            .unwrap();
        store
            .erase_player(&PlayerId::from("o4"), &PlayerId::from(EARLIER_MARKER))
            .unwrap();
        store.flush().unwrap();
        indexes(&store)
    };
    forget();
    {
        let store = reopen();
        assert_eq!(indexes(&store), built, "the indexes the writes built");
        store
            .erase_player(
                &PlayerId::from("gone"),
                &PlayerId::from("erased:0123456789ab"),
            )
            .unwrap();
        store.flush().unwrap();
    }
    let store = reopen();
    assert_forgotten(&store);
    assert!(past(&store, "gone").is_empty());
    assert!(ids(&store, "gone").is_empty());
}

mod sled_build {
    use crate::store::sled::SledStore;

    fn built(keep_every: usize) {
        let dir = tempfile::tempdir().unwrap();
        let mut forget = || {
            let store = SledStore::open(dir.path(), 1 << 20).unwrap();
            assert!(store.forget_past_indexes(keep_every) > 0);
        };
        super::a_store_from_before_past_indexes_gets_them_built(
            &mut super::sled_reopen(dir.path()),
            &mut forget,
        );
    }

    #[test]
    fn a_store_from_before_past_indexes_gets_them_built_on_open() {
        built(0);
    }

    /// Some entries written and no mark: a build stopped midway.
    #[test]
    fn a_build_stopped_midway_is_finished_by_the_next_open() {
        built(2);
    }

    /// The indexes incomplete but marked complete, in a store of the older format: an older
    /// build wrote to it after a later one had marked it.
    #[test]
    fn a_store_of_the_older_format_gets_them_built_again_whatever_its_mark_says() {
        let dir = tempfile::tempdir().unwrap();
        let mut forget = || {
            let store = SledStore::open(dir.path(), 1 << 20).unwrap();
            assert!(store.forget_past_indexes(0) > 0);
            store.mark_as_older_build_left_it();
        };
        super::a_store_from_before_past_indexes_gets_them_built(
            &mut super::sled_reopen(dir.path()),
            &mut forget,
        );
    }
}

pub(in crate::store) mod redis_build {
    use std::sync::Arc;

    use crate::store::{RedisOptions, RedisStore, Store};

    /// Takes every past index and the mark out of the default keyspace.
    pub(in crate::store) fn forget(url: &str) -> usize {
        let client = ::redis::Client::open(url).unwrap();
        let mut conn = client.get_connection().unwrap();
        let keys: Vec<String> = ::redis::cmd("KEYS")
            .arg("{mm}:past:*")
            .query(&mut conn)
            .unwrap();
        for key in &keys {
            let () = ::redis::cmd("DEL").arg(key).query(&mut conn).unwrap();
        }
        let () = ::redis::cmd("HDEL")
            .arg("{mm}:meta")
            .arg("past_index")
            .arg("past_index_cursor")
            .query(&mut conn)
            .unwrap();
        keys.len()
    }

    #[test]
    fn a_keyspace_from_before_past_indexes_gets_them_built_by_the_node_taking_over() {
        super::super::with_redis(|server, runtime| {
            let url = server.url();
            let client = ::redis::Client::open(url.as_str()).unwrap();
            let () = ::redis::cmd("SET")
                .arg("{mm}:lease")
                .arg("1|contract|127.0.0.1:1")
                .query(&mut client.get_connection().unwrap())
                .unwrap();
            // What a node does when it takes the queues: open the store, then build.
            let mut takeover = || {
                let store = runtime
                    .block_on(RedisStore::open(&url, 1, &RedisOptions::default()))
                    .unwrap();
                runtime.block_on(store.build_past_indexes()).unwrap();
                Arc::new(store) as Store
            };
            super::a_store_from_before_past_indexes_gets_them_built(&mut takeover, &mut || {
                assert!(forget(&url) > 0);
            });
        });
    }
}

// `on_every_backend!` is the parent module's.
on_every_backend!(erasing_a_player_rewrites_the_records_that_left_their_history);

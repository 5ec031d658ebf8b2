//! The standby copy against a real `redis-server`: following the owner's change log, and the
//! checks that decide at takeover whether the copy is used or everything is read again.

use super::*;
use crate::ids::TicketId;
use crate::store::contract::{history, record, ticket, with_redis};
use crate::store::{RecordStorage, RedisOptions, RedisStore, Storage};

fn lease(url: &str, value: &str) {
    let mut conn = ::redis::Client::open(url)
        .unwrap()
        .get_connection()
        .unwrap();
    let () = ::redis::cmd("SET")
        .arg(Keys::default().lease())
        .arg(value)
        .query(&mut conn)
        .unwrap();
}

fn options(change_log: bool) -> RedisOptions {
    RedisOptions {
        change_log,
        ..RedisOptions::default()
    }
}

/// The store of the node holding the lease (token 1), logging its changes.
fn owner(url: &str, runtime: &tokio::runtime::Handle) -> RedisStore {
    lease(url, "1|a|127.0.0.1:1");
    runtime
        .block_on(RedisStore::open(url, 1, &options(true)))
        .unwrap()
}

fn player(i: usize) -> PlayerId {
    PlayerId::new(format!("p{i}").as_str())
}

/// A connection as the new owner's store opens one.
fn store_conn(url: &str, runtime: &tokio::runtime::Handle) -> RedisConn {
    runtime
        .block_on(RedisConn::connect(url, None, Patience::default()))
        .unwrap()
}

/// What a takeover reads: players, tickets, rosters and the journal's position.
fn dump(store: &dyn Storage) -> String {
    let mut players: Vec<_> = store.load_players().unwrap().map(Result::unwrap).collect();
    players.sort_by(|a, b| a.0.cmp(&b.0));
    let mut tickets = store.load_tickets().unwrap();
    tickets.sort_by(|a, b| a.ticket_id.cmp(&b.ticket_id));
    format!(
        "{players:?}\n{tickets:?}\n{:?}\n{}",
        store.load_rosters().unwrap(),
        store.snapshot_seq().unwrap()
    )
}

#[test]
fn the_change_log_names_the_fields_a_copy_keeps_and_not_the_match_history() {
    with_redis(|server, runtime| {
        let url = server.url();
        let owner = owner(&url, &runtime);
        let (a, b) = (player(1), player(2));
        owner
            .put_players(&[(&a, &record(1500.0)), (&b, &record(1400.0))])
            .unwrap();
        owner
            .append_history(&[history("m1", &[&["p1"], &["p2"]], 10)])
            .unwrap();
        owner.flush().unwrap();
        let mut conn = ::redis::Client::open(url.as_str())
            .unwrap()
            .get_connection()
            .unwrap();
        // Each entry: its id, then its fields and values.
        type Entry = (String, Vec<(String, Vec<u8>)>);
        let entries: Vec<Entry> = ::redis::cmd("XRANGE")
            .arg(Keys::default().changes())
            .arg("-")
            .arg("+")
            .query(&mut conn)
            .unwrap();
        let logged: Vec<(Option<Hash>, String)> = entries
            .iter()
            .flat_map(|(_, fields)| fields.iter().filter(|(k, _)| k == "c"))
            .flat_map(|(_, changes)| changed(changes).unwrap())
            .map(|(index, field)| {
                let index = parse(index).unwrap();
                let hash = HASHES.iter().map(|(h, _)| *h).find(|h| *h as u64 == index);
                (hash, String::from_utf8_lossy(field).into_owned())
            })
            .collect();
        assert!(
            logged.contains(&(Some(Hash::Players), "p1".into())),
            "{logged:?}"
        );
        assert!(
            logged.contains(&(Some(Hash::Players), "p2".into())),
            "{logged:?}"
        );
        assert!(
            logged.iter().all(|(h, _)| h.is_some_and(loaded_hash)),
            "only what a copy keeps is logged: {logged:?}"
        );
        // The history itself was written.
        let held: usize = ::redis::cmd("HLEN")
            .arg(Keys::default().hash(Hash::MatchRecords))
            .query(&mut conn)
            .unwrap();
        assert_eq!(held, 1);
    });
}

#[test]
fn a_standby_copy_follows_the_owner_and_equals_a_full_read_at_takeover() {
    with_redis(|server, runtime| {
        let url = server.url();
        let owner = owner(&url, &runtime);
        let ids: Vec<PlayerId> = (0..100).map(player).collect();
        let records: Vec<_> = ids.iter().map(|p| (p, record(1500.0))).collect();
        let refs: Vec<_> = records.iter().map(|(p, r)| (*p, r)).collect();
        owner.put_players(&refs).unwrap();
        owner.put_ticket(&ticket("t1", 10.0)).unwrap();
        owner.put_ticket(&ticket("t2", 11.0)).unwrap();
        owner.flush().unwrap();

        let mut standby = runtime
            .block_on(Standby::load(
                &url,
                None,
                &Keys::default(),
                Patience::default(),
            ))
            .unwrap();
        assert_eq!(standby.player_count(), 100);
        // The owner goes on: a changed player, a new one, a ticket gone and one new.
        owner
            .put_players(&[
                (&player(1), &record(1700.0)),
                (&player(200), &record(1400.0)),
            ])
            .unwrap();
        owner.remove_tickets(&[TicketId::new("t1")]).unwrap();
        owner.put_ticket(&ticket("t3", 12.0)).unwrap();
        owner.flush().unwrap();
        assert_eq!(
            runtime.block_on(standby.follow()).unwrap(),
            Followed::InStep
        );
        assert_eq!(standby.player_count(), 101);
        // Written after the last follow, before the owner lost the lease.
        owner.remove_tickets(&[TicketId::new("t2")]).unwrap();
        owner.put_players(&[(&player(2), &record(1234.5))]).unwrap();
        owner.flush().unwrap();

        // The lease passes to the standby's node: its copy is what Redis holds.
        lease(&url, "2|b|127.0.0.1:2");
        let copy = runtime
            .block_on(standby.into_mirror(&mut store_conn(&url, &runtime)))
            .unwrap()
            .expect("the copy followed every flush");
        let full = runtime
            .block_on(RedisStore::open(&url, 2, &options(true)))
            .unwrap();
        assert_eq!(dump(&copy), dump(&full));
        assert!(
            dump(&copy).contains("1234.5"),
            "the last write is in the copy"
        );
        assert_eq!(copy.load_tickets().unwrap().len(), 1, "only t3 still waits");
    });
}

#[test]
fn a_flush_the_log_does_not_name_puts_a_standby_copy_out_of_step() {
    with_redis(|server, runtime| {
        let url = server.url();
        lease(&url, "1|a|127.0.0.1:1");
        let mut logging = runtime
            .block_on(RedisStore::open(&url, 1, &patient(options(true))))
            .unwrap();
        // Every batch in one script, however large (a batch of whole-field writes past a
        // bound is otherwise written in parts, each logged).
        logging.stage.above_args = usize::MAX;
        logging
            .put_players(&[(&player(1), &record(1500.0))])
            .unwrap();
        logging.flush().unwrap();
        let load = || {
            runtime
                .block_on(Standby::load(&url, None, &Keys::default(), PATIENT))
                .unwrap()
        };

        // An owner that does not log (standby off in its config).
        let mut standby = load();
        // (Another store under the same lease: each numbers its own calls.)
        let silent_options = RedisOptions {
            node: "a".into(),
            ..patient(options(false))
        };
        let silent = runtime
            .block_on(RedisStore::open(&url, 1, &silent_options))
            .unwrap();
        silent
            .put_players(&[(&player(2), &record(1500.0))])
            .unwrap();
        silent.flush().unwrap();
        assert_eq!(runtime.block_on(standby.follow()).unwrap(), Followed::Gap);

        // A flush naming more fields than an entry holds (a batch that is not only whole-field
        // writes and sent alone).
        let mut standby = load();
        let ids: Vec<PlayerId> = (0..LOGGED_FIELDS_IN_TEST + 1).map(player).collect();
        let records: Vec<_> = ids.iter().map(|p| (p, record(1600.0))).collect();
        let refs: Vec<_> = records.iter().map(|(p, r)| (*p, r)).collect();
        logging.put_players(&refs).unwrap();
        logging.flush().unwrap();
        assert_eq!(runtime.block_on(standby.follow()).unwrap(), Followed::Gap);

        // A copy that did not follow to the end before the takeover still reads to it.
        let standby = load();
        logging
            .put_players(&[(&player(3), &record(1500.0))])
            .unwrap();
        logging.flush().unwrap();
        logging
            .put_players(&[(&player(1_000_000), &record(1500.0))])
            .unwrap();
        logging.flush().unwrap();
        let copy = runtime
            .block_on(standby.into_mirror(&mut patient_conn(&url, &runtime)))
            .unwrap();
        // p0 to p100000 (p1, p2 and p3 among them), then p1000000.
        assert_eq!(
            copy.map(|m| m.player_count()),
            Some(LOGGED_FIELDS_IN_TEST + 2)
        );
        // And one that missed a flush is refused there.
        let standby = load();
        silent
            .put_players(&[(&player(4), &record(1500.0))])
            .unwrap();
        silent.flush().unwrap();
        assert!(
            runtime
                .block_on(standby.into_mirror(&mut patient_conn(&url, &runtime)))
                .unwrap()
                .is_none()
        );
    });
}

/// Calls waiting long enough for a flush of [`LOGGED_FIELDS_IN_TEST`] records on a slow
/// machine (the default reply wait is half a second).
const PATIENT: Patience = Patience {
    reply: std::time::Duration::from_secs(30),
    connect: std::time::Duration::from_secs(1),
    retries: 3,
};

fn patient(options: RedisOptions) -> RedisOptions {
    RedisOptions {
        patience: PATIENT,
        ..options
    }
}

fn patient_conn(url: &str, runtime: &tokio::runtime::Handle) -> RedisConn {
    runtime
        .block_on(RedisConn::connect(url, None, PATIENT))
        .unwrap()
}

const LOGGED_FIELDS_IN_TEST: usize = super::super::script::LOGGED_FIELDS;

#[test]
fn a_copy_holding_values_of_a_flush_redis_lost_is_not_used() {
    with_redis(|server, runtime| {
        let url = server.url();
        let owner = owner(&url, &runtime);
        owner.put_players(&[(&player(1), &record(1500.0))]).unwrap();
        owner.flush().unwrap();
        let mut standby = runtime
            .block_on(Standby::load(
                &url,
                None,
                &Keys::default(),
                Patience::default(),
            ))
            .unwrap();
        let mut conn = ::redis::Client::open(url.as_str())
            .unwrap()
            .get_connection()
            .unwrap();
        let players = Keys::default().players().to_string();
        let before: Vec<u8> = ::redis::cmd("HGET")
            .arg(&players)
            .arg("p1")
            .query(&mut conn)
            .unwrap();
        // The next flush; the standby reads its value before its log entry, as when the
        // flush lands between reading the log and reading the fields it named.
        owner.put_players(&[(&player(1), &record(1600.0))]).unwrap();
        owner.flush().unwrap();
        runtime
            .block_on(standby.read_again(Hash::Players, &[b"p1".to_vec()]))
            .unwrap();
        runtime.block_on(standby.note_seen()).unwrap();
        // Redis loses that flush (a replica that had not got it is promoted): the
        // counter, the log entry and the value are as before it.
        type Entry = (String, Vec<(String, Vec<u8>)>);
        let entries: Vec<Entry> = ::redis::cmd("XREVRANGE")
            .arg(Keys::default().changes())
            .arg("+")
            .arg("-")
            .arg("COUNT")
            .arg(1)
            .query(&mut conn)
            .unwrap();
        let last = &entries[0].0;
        let _: i64 = ::redis::cmd("XDEL")
            .arg(Keys::default().changes())
            .arg(last)
            .query(&mut conn)
            .unwrap();
        let _: i64 = ::redis::cmd("DECR")
            .arg(Keys::default().change_seq())
            .query(&mut conn)
            .unwrap();
        let _: i64 = ::redis::cmd("HSET")
            .arg(&players)
            .arg("p1")
            .arg(&before)
            .query(&mut conn)
            .unwrap();
        lease(&url, "2|b|127.0.0.1:2");
        assert!(
            runtime
                .block_on(standby.into_mirror(&mut store_conn(&url, &runtime)))
                .unwrap()
                .is_none(),
            "a copy with a value Redis no longer holds was used"
        );
    });
}

#[test]
fn a_copy_whose_last_entry_a_failover_replaced_under_the_same_counter_is_not_used() {
    with_redis(|server, runtime| {
        let url = server.url();
        let owner = owner(&url, &runtime);
        owner.put_players(&[(&player(1), &record(1500.0))]).unwrap();
        owner.flush().unwrap();
        let load = || {
            runtime
                .block_on(Standby::load(
                    &url,
                    None,
                    &Keys::default(),
                    Patience::default(),
                ))
                .unwrap()
        };
        let (mut in_step, mut replaced) = (load(), load());
        owner.put_players(&[(&player(1), &record(1600.0))]).unwrap();
        owner.flush().unwrap();
        for standby in [&mut in_step, &mut replaced] {
            assert_eq!(
                runtime.block_on(standby.follow()).unwrap(),
                Followed::InStep
            );
        }
        lease(&url, "2|b|127.0.0.1:2");
        let copy = runtime
            .block_on(in_step.into_mirror(&mut store_conn(&url, &runtime)))
            .unwrap()
            .expect("a copy in step with the log is used");
        assert!(dump(&copy).contains("1600"), "{}", dump(&copy));

        // Redis loses that flush and the owner writes p1 again as the same flush number,
        // logged under an older id (a promoted replica whose clock is behind): the counter
        // names the copy's flush, but not the entry the copy applied.
        let mut conn = ::redis::Client::open(url.as_str())
            .unwrap()
            .get_connection()
            .unwrap();
        let changes = Keys::default().changes().to_string();
        type Entry = (String, Vec<(String, Vec<u8>)>);
        let entries: Vec<Entry> = ::redis::cmd("XREVRANGE")
            .arg(&changes)
            .arg("+")
            .arg("-")
            .arg("COUNT")
            .arg(1)
            .query(&mut conn)
            .unwrap();
        let (applied, fields) = &entries[0];
        assert_eq!(fields[0], ("q".to_string(), b"2".to_vec()));
        let () = ::redis::cmd("DEL").arg(&changes).query(&mut conn).unwrap();
        let mut rewrite = ::redis::cmd("XADD");
        rewrite.arg(&changes).arg("1-1");
        for (field, value) in fields {
            rewrite.arg(field).arg(value);
        }
        let rewritten: String = rewrite.query(&mut conn).unwrap();
        assert_ne!(&rewritten, applied);
        let rewritten_value = serde_json::to_vec(&record(1700.0)).unwrap();
        let _: i64 = ::redis::cmd("HSET")
            .arg(Keys::default().players())
            .arg("p1")
            .arg(&rewritten_value)
            .query(&mut conn)
            .unwrap();
        let seq: u64 = ::redis::cmd("GET")
            .arg(Keys::default().change_seq())
            .query(&mut conn)
            .unwrap();
        assert_eq!(seq, 2, "the counter names the copy's last flush");
        assert!(
            runtime
                .block_on(replaced.into_mirror(&mut store_conn(&url, &runtime)))
                .unwrap()
                .is_none(),
            "a copy whose last entry is no longer in the log was used"
        );
    });
}

#[test]
fn a_standby_copy_drops_the_acknowledgements_the_owner_trims() {
    use crate::ids::MatchId;
    use crate::store::JournalEntry;
    use crate::store::contract::entry;
    with_redis(|server, runtime| {
        let url = server.url();
        let owner = owner(&url, &runtime);
        let applied = |id: &str, unix: f64| JournalEntry {
            applied_unix: unix,
            ..entry(id, "p1", 1510.0)
        };
        owner
            .append_journal(1, &[applied("m-a", 100.0), applied("m-b", 300.0)])
            .unwrap();
        owner.flush().unwrap();
        let mut standby = runtime
            .block_on(Standby::load(
                &url,
                None,
                &Keys::default(),
                Patience::default(),
            ))
            .unwrap();
        assert_eq!(owner.trim_acks(200.0, 10).unwrap(), 1);
        owner.flush().unwrap();
        assert_eq!(
            runtime.block_on(standby.follow()).unwrap(),
            Followed::InStep
        );

        lease(&url, "2|b|127.0.0.1:2");
        let copy = runtime
            .block_on(standby.into_mirror(&mut store_conn(&url, &runtime)))
            .unwrap()
            .expect("the copy followed every flush");
        assert_eq!(copy.result_of(&MatchId::from("m-a")).unwrap(), None);
        assert!(copy.result_of(&MatchId::from("m-b")).unwrap().is_some());
        // The copy kept the time of what it holds: the next owner trims it in turn.
        assert_eq!(copy.trim_acks(400.0, 10).unwrap(), 1);
    });
}

//! What the Redis backend adds to the contract every backend passes (`store::contract`):
//! fencing, group commit, Redis restarts and the durability check, against a real server.

use std::sync::Arc;

use super::script::{Run, runs};
use super::*;
use crate::store::contract::{entry, record, with_redis};

fn set_lease(url: &str, value: &str) {
    let client = ::redis::Client::open(url).unwrap();
    let mut conn = client.get_connection().unwrap();
    let () = ::redis::cmd("SET")
        .arg(Keys::default().lease())
        .arg(value)
        .query(&mut conn)
        .unwrap();
}

fn hlen(url: &str, key: &str) -> usize {
    let client = ::redis::Client::open(url).unwrap();
    let mut conn = client.get_connection().unwrap();
    ::redis::cmd("HLEN").arg(key).query(&mut conn).unwrap()
}

/// A store of node `a` under token 7, the lease set to name it.
fn node_a_store(runtime: &tokio::runtime::Handle, url: &str) -> RedisStore {
    set_lease(url, "7|a|127.0.0.1:1");
    let options = RedisOptions {
        node: "a".into(),
        ..RedisOptions::default()
    };
    runtime
        .block_on(RedisStore::open(url, 7, &options))
        .unwrap()
}

fn open(runtime: &tokio::runtime::Handle, url: &str, token: u64) -> RedisStore {
    runtime
        .block_on(RedisStore::open(url, token, &RedisOptions::default()))
        .unwrap()
}

#[test]
fn a_store_whose_token_lost_the_lease_writes_nothing_ever_again() {
    with_redis(|server, runtime| {
        let url = server.url();
        set_lease(&url, "7|a|127.0.0.1:1");
        let old = open(&runtime, &url, 7);
        let p1 = PlayerId::new("p1");
        old.put_players(&[(&p1, &record(1500.0))]).unwrap();
        old.flush().unwrap();
        assert_eq!(hlen(&url, "{mm}:players"), 1);
        // Another node takes the lease with a larger token.
        set_lease(&url, "8|b|127.0.0.1:2");
        let p2 = PlayerId::new("p2");
        old.put_players(&[(&p2, &record(1600.0))]).unwrap();
        assert!(matches!(old.flush(), Err(StoreError::Fenced)));
        assert_eq!(
            hlen(&url, "{mm}:players"),
            1,
            "nothing of the refused batch landed"
        );
        // Fenced for good: later writes and flushes fail at once.
        assert!(matches!(
            old.put_players(&[(&p2, &record(1700.0))]),
            Err(StoreError::Fenced)
        ));
        assert!(matches!(old.flush(), Err(StoreError::Fenced)));
        // A token that merely starts with the same digits is not the same token.
        set_lease(&url, "70|c|127.0.0.1:3");
        let stale = runtime.block_on(RedisStore::open(&url, 7, &RedisOptions::default()));
        assert!(
            matches!(stale, Err(StoreError::Fenced)),
            "a store opens only under the lease"
        );
        // The new owner writes.
        let new = open(&runtime, &url, 70);
        new.put_players(&[(&p2, &record(1900.0))]).unwrap();
        new.flush().unwrap();
        assert_eq!(hlen(&url, "{mm}:players"), 2);
    });
}

#[test]
fn concurrent_flushes_share_round_trips_and_all_succeed() {
    with_redis(|server, runtime| {
        let url = server.url();
        set_lease(&url, "1|a|127.0.0.1:1");
        let store = Arc::new(open(&runtime, &url, 1));
        let calls_before = script_calls(&url);
        const FLUSHES: usize = 400;
        let tasks: Vec<_> = (0..FLUSHES)
            .map(|i| {
                let store = store.clone();
                runtime.spawn(async move {
                    let id = PlayerId::new(format!("p{i}").as_str());
                    store.put_players(&[(&id, &record(1000.0 + i as f64))])?;
                    store.flush_async().await
                })
            })
            .collect();
        for t in tasks {
            runtime.block_on(t).unwrap().unwrap();
        }
        assert_eq!(hlen(&url, "{mm}:players"), FLUSHES);
        let calls = script_calls(&url) - calls_before;
        assert!(
            calls < FLUSHES as u64 / 2,
            "{calls} scripts for {FLUSHES} flushes: no group commit"
        );
    });
}

/// Scripts Redis ran so far (EVAL and EVALSHA).
fn script_calls(url: &str) -> u64 {
    let client = ::redis::Client::open(url).unwrap();
    let mut conn = client.get_connection().unwrap();
    let stats: String = ::redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut conn)
        .unwrap();
    stats
        .lines()
        .filter(|l| l.starts_with("cmdstat_eval:") || l.starts_with("cmdstat_evalsha:"))
        .filter_map(|l| {
            l.split([':', ','])
                .find_map(|kv| kv.strip_prefix("calls="))
                .and_then(|n| n.parse::<u64>().ok())
        })
        .sum()
}

#[test]
fn flushed_writes_survive_a_redis_crash_and_restart() {
    with_redis(|server, runtime| {
        let url = server.url();
        // `always`: Redis writes its AOF before it answers, so a process crash right after the
        // flush loses nothing. (`everysec` puts the write off while a slow background sync
        // runs, answering meanwhile.)
        let client = ::redis::Client::open(url.as_str()).unwrap();
        let () = ::redis::cmd("CONFIG")
            .arg("SET")
            .arg("appendfsync")
            .arg("always")
            .query(&mut client.get_connection().unwrap())
            .unwrap();
        set_lease(&url, "1|a|127.0.0.1:1");
        let store = open(&runtime, &url, 1);
        let p1 = PlayerId::new("p1");
        store.put_players(&[(&p1, &record(1234.5))]).unwrap();
        store.flush().unwrap();
        drop(store);
        server.kill();
        server.restart().unwrap();
        let back = open(&runtime, &url, 1);
        let players: Vec<_> = back.load_players().unwrap().map(|p| p.unwrap()).collect();
        assert_eq!(players, vec![(p1, record(1234.5))]);
    });
}

#[test]
fn a_volatile_redis_is_refused_unless_allowed() {
    with_redis(|server, runtime| {
        let url = server.url();
        let found = runtime
            .block_on(check_durability(&url, None, &Keys::default(), 0, false))
            .unwrap();
        assert!(found.aof, "the test server runs with appendonly yes");
        assert_eq!(found.appendfsync.as_deref(), Some("everysec"));
        let client = ::redis::Client::open(url.as_str()).unwrap();
        let mut conn = client.get_connection().unwrap();
        let () = ::redis::cmd("CONFIG")
            .arg("SET")
            .arg("appendonly")
            .arg("no")
            .query(&mut conn)
            .unwrap();
        let refused = runtime
            .block_on(check_durability(&url, None, &Keys::default(), 0, false))
            .unwrap_err();
        assert!(refused.to_string().contains("appendonly yes"), "{refused}");
        let allowed = runtime
            .block_on(check_durability(&url, None, &Keys::default(), 0, true))
            .unwrap();
        assert!(!allowed.aof);
    });
}

#[test]
fn a_flush_given_up_by_its_caller_loses_no_write() {
    with_redis(|server, runtime| {
        let url = server.url();
        set_lease(&url, "1|a|127.0.0.1:1");
        let store = open(&runtime, &url, 1);
        for round in 0..20 {
            let id = PlayerId::new(format!("p{round}").as_str());
            store.put_players(&[(&id, &record(1500.0))]).unwrap();
            // The caller gives up at once, most likely while the script is on the wire.
            let _ = runtime.block_on(tokio::time::timeout(
                std::time::Duration::from_micros(1),
                store.flush_async(),
            ));
        }
        store.flush().unwrap();
        assert_eq!(hlen(&url, "{mm}:players"), 20);
    });
}

#[test]
fn a_large_state_loads_page_by_page_and_a_record_that_does_not_decode_is_named() {
    with_redis(|server, runtime| {
        let url = server.url();
        set_lease(&url, "3|a|127.0.0.1:1");
        let writer = open(&runtime, &url, 3);
        // Several HSCAN pages of players.
        let ids: Vec<PlayerId> = (0..25_000)
            .map(|i| PlayerId::new(format!("p{i}").as_str()))
            .collect();
        let rating = record(1500.0);
        let rows: Vec<_> = ids.iter().map(|id| (id, &rating)).collect();
        writer.put_players(&rows).unwrap();
        writer.flush().unwrap();
        drop(writer);
        let loaded = open(&runtime, &url, 3);
        assert_eq!(loaded.player_count(), 25_000);
        drop(loaded);
        // One record among them that is not a player's: the load fails, naming it.
        let client = ::redis::Client::open(url.as_str()).unwrap();
        let mut conn = client.get_connection().unwrap();
        let () = ::redis::cmd("HSET")
            .arg("{mm}:players")
            .arg("broken")
            .arg("not json")
            .query(&mut conn)
            .unwrap();
        let refused = runtime.block_on(RedisStore::open(&url, 3, &RedisOptions::default()));
        match refused {
            Err(StoreError::Decode { key, .. }) => assert_eq!(key, "player broken"),
            Err(other) => panic!("{other}"),
            Ok(_) => panic!("a record that does not decode was loaded"),
        }
    });
}

#[test]
fn consecutive_writes_to_one_hash_go_as_one_command_in_their_order() {
    let set = |h, f: &str| Op::Set(h, f.to_string(), f.as_bytes().to_vec());
    let del = |h, f: &str| Op::Del(h, f.to_string());
    let ops = [
        set(Hash::Tickets, "t1"),
        set(Hash::Tickets, "t2"),
        set(Hash::Players, "p1"),
        del(Hash::Tickets, "t1"),
        del(Hash::Tickets, "t2"),
        Op::Clear(Hash::Ended),
        set(Hash::Tickets, "t3"),
        del(Hash::Players, "p1"),
        set(Hash::Tickets, "t4"),
    ];
    let got = runs(ops.iter());
    assert_eq!(
        got,
        vec![
            Run::Set(Hash::Tickets, vec![("t1", &b"t1"[..]), ("t2", &b"t2"[..])]),
            Run::Set(Hash::Players, vec![("p1", &b"p1"[..])]),
            Run::Del(Hash::Tickets, vec!["t1", "t2"]),
            Run::One(&Op::Clear(Hash::Ended)),
            Run::Set(Hash::Tickets, vec![("t3", &b"t3"[..])]),
            Run::Del(Hash::Players, vec!["p1"]),
            Run::Set(Hash::Tickets, vec![("t4", &b"t4"[..])]),
        ]
    );
    // A run stops at MAX_RUN fields, so one command's arguments stay within what Lua unpacks.
    let many: Vec<Op> = (0..2 * MAX_RUN + 1)
        .map(|i| set(Hash::Players, &format!("p{i}")))
        .collect();
    let sizes: Vec<usize> = runs(many.iter())
        .iter()
        .map(|r| match r {
            Run::Set(_, fields) => fields.len(),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(sizes, [MAX_RUN, MAX_RUN, 1]);
}

#[test]
fn a_flush_of_more_writes_to_one_hash_than_a_run_holds_lands_whole() {
    with_redis(|server, runtime| {
        let url = server.url();
        set_lease(&url, "4|n|a");
        let store = open(&runtime, &url, 4);
        let n = 2 * MAX_RUN + 7;
        let pools = record(1500.0);
        let ids: Vec<PlayerId> = (0..n)
            .map(|i| PlayerId::new(format!("run-{i}").as_str()))
            .collect();
        let rows: Vec<_> = ids.iter().map(|id| (id, &pools)).collect();
        store.put_players(&rows).unwrap();
        // And a run of deletes as long, in the same flush.
        let gone = &ids[..MAX_RUN + 3];
        store.queue(
            gone.iter()
                .map(|id| Op::Del(Hash::Players, id.to_string()))
                .collect(),
        );
        store.flush().unwrap();
        assert_eq!(hlen(&url, "{mm}:players"), n - gone.len());
        let back = open(&runtime, &url, 4);
        assert_eq!(back.player_count(), n - gone.len());
    });
}

#[test]
fn calls_to_a_redis_that_went_away_fail_within_about_a_lease_and_work_once_it_is_back() {
    with_redis(|server, runtime| {
        let lease = std::time::Duration::from_secs(3);
        let mut conn = runtime
            .block_on(RedisConn::connect(
                &server.url(),
                None,
                Patience::for_lease(lease),
            ))
            .unwrap();
        let mut ping = || {
            let started = std::time::Instant::now();
            let pong: Result<String, _> =
                runtime.block_on(::redis::cmd("PING").query_async(&mut conn));
            (pong, started.elapsed())
        };
        assert_eq!(ping().0.unwrap(), "PONG");
        server.kill();
        // The call in flight when the connection broke fails at once; the next waits for the
        // reconnection attempts, which the client library's defaults would go on with for 6
        // to 13 s.
        let (broken, _) = ping();
        assert!(broken.is_err());
        let (refused, waited) = ping();
        assert!(refused.is_err());
        assert!(waited < lease + lease / 3, "a call waited {waited:?}");
        server.restart().unwrap();
        let back = (0..50).find_map(|_| match ping().0 {
            Ok(pong) => Some(pong),
            Err(_) => {
                std::thread::sleep(std::time::Duration::from_millis(100));
                None
            }
        });
        assert_eq!(back.as_deref(), Some("PONG"));
    });
}

#[test]
fn a_token_given_twice_still_fences_the_node_that_lost_the_lease() {
    with_redis(|server, runtime| {
        let url = server.url();
        // A Redis failover lost the counter's last increment: the next node got token 7 again.
        set_lease(&url, "7|a|127.0.0.1:1");
        let options = |node: &str| RedisOptions {
            node: node.into(),
            ..RedisOptions::default()
        };
        let a = runtime
            .block_on(RedisStore::open(&url, 7, &options("a")))
            .unwrap();
        set_lease(&url, "7|b|127.0.0.1:2");
        let p1 = PlayerId::new("p1");
        a.put_players(&[(&p1, &record(1500.0))]).unwrap();
        assert!(matches!(a.flush(), Err(StoreError::Fenced)));
        assert!(matches!(
            runtime.block_on(RedisStore::open(&url, 7, &options("a"))),
            Err(StoreError::Fenced)
        ));
        let b = runtime
            .block_on(RedisStore::open(&url, 7, &options("b")))
            .unwrap();
        b.put_players(&[(&p1, &record(1600.0))]).unwrap();
        b.flush().unwrap();
        assert_eq!(hlen(&url, "{mm}:players"), 1);
    });
}

#[test]
fn on_a_redis_cluster_a_flush_waits_for_the_replica_of_its_keyspaces_primary() {
    let cluster = RedisCluster::start_with_replicas(1).unwrap_or_else(|e| panic!("{e}"));
    let keys = Keys::default();
    let primary = cluster.primary_of(keys.lease()).unwrap();
    let replica = cluster.replica_of(primary).unwrap();
    let url = cluster.url((primary + 1) % 3);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let handle = runtime.handle().clone();
    let mut cluster = cluster;
    let task = runtime.spawn_blocking(move || {
        let client = ::redis::cluster::ClusterClient::new(vec![url.clone()]).unwrap();
        let mut conn = client.get_connection().unwrap();
        let () = ::redis::cmd("SET")
            .arg(keys.lease())
            .arg("7|a|127.0.0.1:1")
            .query(&mut conn)
            .unwrap();
        let options = RedisOptions {
            node: "a".into(),
            wait_replicas: 1,
            wait_timeout_ms: 300,
            ..RedisOptions::default()
        };
        let store = handle
            .block_on(RedisStore::open(&url, 7, &options))
            .unwrap();
        let p1 = PlayerId::new("p1");
        store.put_players(&[(&p1, &record(1500.0))]).unwrap();
        store.flush().unwrap();
        // The replica of the keyspace's primary stops: a flush is no longer acknowledged, as
        // WAIT on that primary says.
        let signal = |sig: &str, pid: u32| {
            assert!(
                std::process::Command::new("kill")
                    .args([sig, &pid.to_string()])
                    .status()
                    .unwrap()
                    .success()
            );
        };
        // Another primary's replica stops: flushes still need only their own primary's.
        let other = cluster.replica_of((primary + 1) % 3).unwrap();
        let pid = cluster.node(other).pid().unwrap();
        signal("-STOP", pid);
        store.put_players(&[(&p1, &record(1550.0))]).unwrap();
        let flushed = store.flush();
        signal("-CONT", pid);
        flushed.unwrap();
        let pid = cluster.node(replica).pid().unwrap();
        signal("-STOP", pid);
        let p2 = PlayerId::new("p2");
        store.put_players(&[(&p2, &record(1600.0))]).unwrap();
        let refused = store.flush();
        signal("-CONT", pid);
        match refused {
            Err(StoreError::Redis(e)) => assert!(e.contains("0 of 1 replicas"), "{e}"),
            other => panic!("a flush no replica acknowledged: {other:?}"),
        }
        // A primary that lost the script (restarted, or newly promoted) gets it again.
        let () = ::redis::cmd("SCRIPT")
            .arg("FLUSH")
            .query(
                &mut ::redis::Client::open(cluster.url(primary))
                    .unwrap()
                    .get_connection()
                    .unwrap(),
            )
            .unwrap();
        store.flush().unwrap();
        // The fence still refuses the flush and its WAIT whole.
        let () = ::redis::cmd("SET")
            .arg(keys.lease())
            .arg("8|b|127.0.0.1:2")
            .query(&mut conn)
            .unwrap();
        store.put_players(&[(&p2, &record(1700.0))]).unwrap();
        assert!(matches!(store.flush(), Err(StoreError::Fenced)));
    });
    runtime.block_on(task).unwrap();
}

#[test]
fn a_flush_call_that_lands_after_a_later_one_changes_nothing() {
    with_redis(|server, runtime| {
        let url = server.url();
        let store = node_a_store(&runtime, &url);
        let probe = |value: &str| vec![vec![Op::Set(Hash::Meta, "probe".into(), value.into())]];
        let read = || -> String {
            let client = ::redis::Client::open(url.as_str()).unwrap();
            let mut conn = client.get_connection().unwrap();
            ::redis::cmd("HGET")
                .arg(Keys::default().hash(Hash::Meta))
                .arg("probe")
                .query(&mut conn)
                .unwrap()
        };
        // Call 1 timed out; its writes went again in call 2, which landed first (on a new
        // connection). Call 1 arriving now must not put back what call 2 changed.
        runtime.block_on(store.send_call(&probe("new"), 2)).unwrap();
        runtime.block_on(store.send_call(&probe("old"), 1)).unwrap();
        assert_eq!(read(), "new");
        // A store opened again under the same token and node numbers its calls after the
        // last one applied, so its writes land.
        let again = node_a_store(&runtime, &url);
        runtime
            .block_on(again.send_script(&probe("newer")))
            .unwrap();
        assert_eq!(read(), "newer");
    });
}

/// A write's change of the mirror and its queued batch are one step: while its batch waits
/// for the queue, nobody can take the mirror's lock (a second writer of the same record would
/// otherwise change the mirror after it and queue before it, and Redis would end at the value
/// the mirror had replaced). Each write here is stopped at the queue, held by the test.
#[test]
fn no_one_sees_a_mirror_change_before_its_batch_is_queued() {
    with_redis(|server, runtime| {
        let url = server.url();
        set_lease(&url, "1|a|127.0.0.1:1");
        let store = Arc::new(open(&runtime, &url, 1));
        type Write = fn(&RedisStore);
        type Seen = fn(&Data) -> bool;
        let writes: [(&str, Write, Seen); 4] = [
            (
                "put_players",
                |s| {
                    s.put_players(&[(&PlayerId::new("p"), &record(1600.0))])
                        .unwrap()
                },
                |d| d.players.contains_key(&PlayerId::new("p")),
            ),
            (
                "append_journal",
                |s| s.append_journal(1, &[entry("m1", "j", 1700.0)]).unwrap(),
                |d| d.players.contains_key(&PlayerId::new("j")),
            ),
            (
                "put_parties",
                |s| {
                    let pools = BTreeMap::from([(
                        "1v1".to_string(),
                        PartyRecord {
                            skill: record(1400.0)["1v1"].skill,
                            games: 2,
                            last_played_unix: None,
                        },
                    )]);
                    s.put_parties(&[("a\u{1f}b", &pools)]).unwrap()
                },
                |d| d.parties.contains_key("a\u{1f}b"),
            ),
            (
                "put_rosters",
                |s| {
                    use crate::store::RecordStorage;
                    let roster = crate::records::PartyRoster {
                        party_id: crate::ids::PartyId::from("x1"),
                        invite_code: "CODEX1".into(),
                        members: vec![PlayerId::from("a")],
                        leader: PlayerId::from("a"),
                        created_unix: 1.0,
                        active_unix: 2.0,
                    };
                    s.put_rosters(&[&roster]).unwrap()
                },
                |d| !d.rosters.is_empty(),
            ),
        ];
        for (name, write, seen) in writes {
            let held = store.pending.lock().unwrap();
            let writer = std::thread::spawn({
                let store = store.clone();
                move || write(&store)
            });
            std::thread::sleep(Duration::from_millis(100));
            let (tx, rx) = std::sync::mpsc::channel();
            let reader = std::thread::spawn({
                let store = store.clone();
                move || {
                    let _ = tx.send(seen(&store.mirror.data()));
                }
            });
            let early = rx.recv_timeout(Duration::from_millis(300));
            drop(held);
            writer.join().unwrap();
            reader.join().unwrap();
            assert_ne!(
                early,
                Ok(true),
                "{name}: the mirror showed a write whose batch was not queued yet"
            );
            store.flush().unwrap();
        }
        assert_eq!(hlen(&url, "{mm}:players"), 2);
        assert_eq!(hlen(&url, "{mm}:parties"), 1);
        assert_eq!(hlen(&url, "{mm}:rosters"), 1);
    });
}

/// The match history as Redis holds it: every list, past index, record and holder count.
fn history_dump(url: &str) -> BTreeMap<String, Vec<String>> {
    let client = ::redis::Client::open(url).unwrap();
    let mut conn = client.get_connection().unwrap();
    let mut dump = BTreeMap::new();
    for pattern in ["{mm}:history:*", "{mm}:past:*"] {
        let keys: Vec<String> = ::redis::cmd("KEYS").arg(pattern).query(&mut conn).unwrap();
        for key in keys {
            let members: Vec<String> = if pattern.contains("history") {
                ::redis::cmd("LRANGE")
                    .arg(&key)
                    .arg(0)
                    .arg(-1)
                    .query(&mut conn)
            } else {
                ::redis::cmd("SMEMBERS").arg(&key).query(&mut conn)
            }
            .unwrap();
            let mut members = members;
            if !pattern.contains("history") {
                members.sort();
            }
            dump.insert(key, members);
        }
    }
    for hash in [Hash::MatchRecords, Hash::MatchRefs] {
        let key = Keys::default().hash(hash).to_string();
        let fields: BTreeMap<String, String> =
            ::redis::cmd("HGETALL").arg(&key).query(&mut conn).unwrap();
        dump.insert(
            key,
            fields
                .into_iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect(),
        );
    }
    dump
}

/// A flight whose answer was lost goes again, whole and in order, after it landed: the
/// history's lists, holder counts, records and past indexes end the same, for history writes
/// (records cut off lists, joining and leaving past indexes) and for an erasure.
#[test]
fn a_history_flight_sent_twice_leaves_the_same_history_and_past_indexes() {
    use crate::store::contract::history;
    use crate::store::{AdminRecords, RecordStorage};
    with_redis(|server, runtime| {
        let url = server.url();
        set_lease(&url, "1|a|127.0.0.1:1");
        let store = open(&runtime, &url, 1);
        let take = |store: &RedisStore| std::mem::take(&mut store.pending.lock().unwrap().batches);
        let twice = |batches: &[Vec<Op>]| {
            runtime.block_on(store.send_script(batches)).unwrap();
            let once = history_dump(&url);
            runtime.block_on(store.send_script(batches)).unwrap();
            assert_eq!(history_dump(&url), once);
            once
        };
        let solo = |id: &str, p: &str| history(id, &[&[p]], 2);
        for writes in [
            vec![history("m0", &[&["gone"], &["o0"]], 2)],
            vec![solo("x1", "o0"), solo("x2", "o0")],
            vec![history("m1", &[&["gone"], &["o1"]], 2)],
            vec![history("m2", &[&["gone"], &["o2"]], 2)],
            vec![history("m3", &[&["gone"], &["o3"]], 2)],
            vec![solo("y1", "o3")],
            vec![solo("y2", "o3"), solo("m4", "gone")],
        ] {
            store.append_history(&writes).unwrap();
        }
        let written = twice(&take(&store));
        let set =
            |members: &[&str]| -> Vec<String> { members.iter().map(ToString::to_string).collect() };
        assert_eq!(written["{mm}:past:gone"], set(&["m1", "m2"]));
        assert_eq!(written["{mm}:past:o3"], set(&["m3"]));
        assert!(!written.contains_key("{mm}:past:o0"), "m0 was dropped");
        store
            .erase_player(&PlayerId::from("gone"), &PlayerId::from("erased:x"))
            .unwrap();
        let erased = twice(&take(&store));
        for gone in ["{mm}:history:gone", "{mm}:past:gone", "{mm}:past:o3"] {
            assert!(!erased.contains_key(gone), "{gone}: {erased:?}");
        }
        let records = &erased["{mm}:match_records"];
        assert!(
            records.iter().all(|r| !r.contains("\"gone\"")),
            "{records:?}"
        );
        assert_eq!(records.len(), 6, "m1, m2 and the solo matches of o0 and o3");
    });
}

/// A migration writes a player's past index and list whole, however long: Lua's `unpack`
/// takes at most about 8,000 values, so the script adds them a thousand at a time.
#[test]
fn a_past_index_and_a_list_longer_than_one_lua_unpack_are_written_whole() {
    use crate::store::RecordStorage;
    with_redis(|server, runtime| {
        let url = server.url();
        set_lease(&url, "1|a|127.0.0.1:1");
        let store = open(&runtime, &url, 1);
        let ids = |prefix: &str, n: usize| -> Vec<MatchId> {
            (0..n)
                .map(|i| MatchId::new(format!("{prefix}{i}")))
                .collect()
        };
        let veteran = PlayerId::new("veteran");
        store
            .import_match_history(
                &[(veteran.clone(), ids("l", 9_000))],
                &[(veteran.clone(), ids("p", 12_345))],
                &[],
            )
            .unwrap();
        store.flush().unwrap();
        let client = ::redis::Client::open(url.as_str()).unwrap();
        let mut conn = client.get_connection().unwrap();
        let listed: usize = ::redis::cmd("LLEN")
            .arg("{mm}:history:veteran")
            .query(&mut conn)
            .unwrap();
        let indexed: usize = ::redis::cmd("SCARD")
            .arg("{mm}:past:veteran")
            .query(&mut conn)
            .unwrap();
        assert_eq!((listed, indexed), (9_000, 12_345));
        let last: String = ::redis::cmd("LINDEX")
            .arg("{mm}:history:veteran")
            .arg(-1)
            .query(&mut conn)
            .unwrap();
        assert_eq!(last, "l8999", "in order");
    });
}

/// Redis does not roll a script back: a flush call that fails midway keeps the writes before
/// the failure, and the change log names them all the same, so a standby copy reads them.
#[test]
fn a_flush_call_that_fails_midway_still_logs_the_fields_it_names() {
    use crate::store::RecordStorage;
    use crate::store::contract::history;
    with_redis(|server, runtime| {
        let url = server.url();
        set_lease(&url, "1|a|127.0.0.1:1");
        let options = RedisOptions {
            change_log: true,
            ..RedisOptions::default()
        };
        let store = runtime
            .block_on(RedisStore::open(&url, 1, &options))
            .unwrap();
        let client = ::redis::Client::open(url.as_str()).unwrap();
        let mut conn = client.get_connection().unwrap();
        // Player "x"'s history list is a string: pushing a match onto it fails.
        let () = ::redis::cmd("SET")
            .arg("{mm}:history:x")
            .arg("not a list")
            .query(&mut conn)
            .unwrap();
        let seq = |conn: &mut ::redis::Connection| -> Option<u64> {
            ::redis::cmd("GET")
                .arg("{mm}:change_seq")
                .query(conn)
                .unwrap()
        };
        let before = seq(&mut conn).unwrap_or(0);
        let p1 = PlayerId::new("p1");
        store.put_players(&[(&p1, &record(1500.0))]).unwrap();
        store
            .append_history(&[history("m1", &[&["x"], &["y"]], 2)])
            .unwrap();
        assert!(store.flush().is_err(), "the push onto a string fails");
        // The player's write before the failure landed, and is counted and logged.
        assert_eq!(hlen(&url, "{mm}:players"), 1);
        assert_eq!(seq(&mut conn), Some(before + 1));
        // Every bulk string of the change log's last entry.
        fn strings(value: &::redis::Value, out: &mut Vec<Vec<u8>>) {
            match value {
                ::redis::Value::BulkString(b) => out.push(b.clone()),
                ::redis::Value::Array(items) => items.iter().for_each(|v| strings(v, out)),
                _ => {}
            }
        }
        let last: ::redis::Value = ::redis::cmd("XREVRANGE")
            .arg("{mm}:changes")
            .arg("+")
            .arg("-")
            .arg("COUNT")
            .arg(1)
            .query(&mut conn)
            .unwrap();
        let mut named = Vec::new();
        strings(&last, &mut named);
        assert!(
            named.iter().any(|v| v.windows(2).any(|w| w == b"p1")),
            "the entry names the player's field: {last:?}"
        );
    });
}

/// A store whose node lost the lease writes nothing more, even under a lease that names its
/// token and node again (a Redis failover lost the counter's increment and the node took the
/// lease again, with a store of its own).
#[test]
fn a_store_told_to_stop_writing_refuses_every_later_write() {
    with_redis(|server, runtime| {
        let url = server.url();
        let old = node_a_store(&runtime, &url);
        let p1 = PlayerId::new("p1");
        old.put_players(&[(&p1, &record(1500.0))]).unwrap();
        old.stop_writing();
        assert!(matches!(old.flush(), Err(StoreError::Fenced)));
        assert!(matches!(
            old.put_players(&[(&p1, &record(1600.0))]),
            Err(StoreError::Fenced)
        ));
        assert_eq!(hlen(&url, "{mm}:players"), 0, "nothing pending was sent");
        // The node's new store under the same token and node writes.
        let new = node_a_store(&runtime, &url);
        new.put_players(&[(&p1, &record(1700.0))]).unwrap();
        new.flush().unwrap();
        assert_eq!(hlen(&url, "{mm}:players"), 1);
    });
}

//! The past indexes of a keyspace written before they existed. Releases before them kept no
//! `past:<player>` sets, so a record that had already left a player's list while an opponent's
//! list still held it would stay out of the player's index, and erasing the player would leave
//! their id in it. The node that takes the queues builds the indexes from the records before
//! its engine serves, unless `meta` says the keyspace is indexed: a chunk of records at a time
//! (`HSCAN`), each chunk's entries sent in one fenced flush with the scan's cursor, so Redis is
//! never held for long and a node taking over midway carries on from the cursor. Each entry is
//! added by the flush's script only if the record is still stored and the player's list still
//! leaves it out (`APPLY`'s `a` op), so it holds whatever flushes ran between the chunk's reads
//! and its own; adding an entry twice changes nothing.

use std::collections::HashMap;

use super::{Hash, Op, RedisStore, decode, redis_error, text};
use crate::ids::{MatchId, PlayerId};
use crate::records::MatchRecord;
use crate::store::StoreError;

/// `meta` field: present once every stored record that left a player's list is in their past
/// index.
pub(super) const PAST_INDEX: &str = "past_index";
/// `meta` field while a build is under way: `RUN_ID:CURSOR`, the `HSCAN` cursor of
/// `match_records` it reached and the run id of the Redis process that gave it. A cursor
/// means nothing to another process (one restarted, or a replica promoted, lays its hash table
/// out anew, with its own hash seed): the scan starts over there, which adds nothing twice.
pub(super) const PAST_INDEX_CURSOR: &str = "past_index_cursor";
/// Records a chunk asks `HSCAN` for.
const CHUNK: usize = 500;

impl RedisStore {
    /// Builds the past indexes unless `meta` marks the keyspace indexed, then marks it; the
    /// number of entries added. Each stored record joins the index of every player it names
    /// who has a list that does not hold it (a player named without a list is an erasure's
    /// marker: whoever played a match has a list). A keyspace nothing wrote yet is marked at
    /// once.
    pub async fn build_past_indexes(&self) -> Result<Option<usize>, StoreError> {
        self.build_past(CHUNK, None).await
    }

    /// [`RedisStore::build_past_indexes`], `count` records a chunk, stopping after
    /// `max_chunks` chunks if given (a node that lost the lease midway).
    pub(super) async fn build_past(
        &self,
        count: usize,
        max_chunks: Option<usize>,
    ) -> Result<Option<usize>, StoreError> {
        let err = redis_error(&self.url);
        let mut conn = self.conn.clone();
        let (mark, cursor): (Option<Vec<u8>>, Option<Vec<u8>>) = ::redis::cmd("HMGET")
            .arg(self.keys.meta())
            .arg(PAST_INDEX)
            .arg(PAST_INDEX_CURSOR)
            .query_async(&mut conn)
            .await
            .map_err(&err)?;
        if mark.is_some() {
            self.past_ready
                .store(true, std::sync::atomic::Ordering::Relaxed);
            return Ok(None);
        }
        let (mut run, mut cursor): (String, u64) = match cursor {
            None => (String::new(), 0),
            Some(v) => {
                let v = text(&v);
                let bad = || StoreError::Decode {
                    key: format!("meta {PAST_INDEX_CURSOR}"),
                    detail: format!("{v:?} is not RUN_ID:CURSOR"),
                };
                match v.rsplit_once(':') {
                    Some((run, at)) => (run.to_string(), at.parse().map_err(|_| bad())?),
                    // A bare cursor (a release before run ids) names no process: start over.
                    None => {
                        v.parse::<u64>().map_err(|_| bad())?;
                        (String::new(), 0)
                    }
                }
            }
        };
        let mut added = 0;
        let mut chunks = 0;
        loop {
            // Reads after every queued write, so the entries checked are the current ones.
            self.flush_pending().await?;
            let now = self.run_id().await?;
            if now != run {
                cursor = 0;
                run = now;
            }
            let (next, fields): (u64, Vec<(String, Vec<u8>)>) = ::redis::cmd("HSCAN")
                .arg(self.keys.hash(Hash::MatchRecords))
                .arg(cursor)
                .arg("COUNT")
                .arg(count)
                .query_async(&mut conn)
                .await
                .map_err(&err)?;
            let mut named = Vec::new();
            for (id, value) in &fields {
                let record: MatchRecord = decode(value, &format!("match record {id}"))?;
                let id = MatchId::new(id.as_str());
                named.extend(record.players().into_iter().map(|p| (p, id.clone())));
            }
            let mut batch = self.missing_entries(&named).await?;
            added += batch.len();
            if next == 0 {
                batch.push(Op::Set(Hash::Meta, PAST_INDEX.into(), b"1".to_vec()));
                batch.push(Op::Del(Hash::Meta, PAST_INDEX_CURSOR.into()));
            } else {
                let at = format!("{run}:{next}").into_bytes();
                batch.push(Op::Set(Hash::Meta, PAST_INDEX_CURSOR.into(), at));
            }
            self.check_fence()?;
            self.queue(batch);
            self.flush_pending().await?;
            cursor = next;
            chunks += 1;
            if cursor == 0 {
                self.past_ready
                    .store(true, std::sync::atomic::Ordering::Relaxed);
                return Ok(Some(added));
            }
            if max_chunks.is_some_and(|max| chunks >= max) {
                return Ok(None);
            }
        }
    }

    /// The run id of the Redis process holding the keyspace (`INFO server`).
    async fn run_id(&self) -> Result<String, StoreError> {
        let mut conn = self.conn.clone();
        let info: String = conn
            .on_primary_of(
                self.keys.lease(),
                ::redis::cmd("INFO").arg("server").clone(),
            )
            .await
            .map_err(redis_error(&self.url))?;
        info.lines()
            .find_map(|l| l.strip_prefix("run_id:"))
            .map(|id| id.trim().to_string())
            .ok_or_else(|| {
                StoreError::Redis(format!(
                    "{}: INFO server names no run_id",
                    super::redact(&self.url)
                ))
            })
    }

    /// The entries of `named` (player, record) missing from their past index whose player has
    /// a list that does not hold the record, as ops that add them.
    async fn missing_entries(&self, named: &[(PlayerId, MatchId)]) -> Result<Vec<Op>, StoreError> {
        let err = redis_error(&self.url);
        let mut conn = self.conn.clone();
        let mut lists: HashMap<&PlayerId, Vec<String>> = HashMap::new();
        let players: Vec<&PlayerId> = {
            let mut seen = std::collections::HashSet::new();
            named
                .iter()
                .map(|(p, _)| p)
                .filter(|p| seen.insert(*p))
                .collect()
        };
        if players.is_empty() {
            return Ok(Vec::new());
        }
        let mut pipe = ::redis::pipe();
        for p in &players {
            pipe.cmd("LRANGE").arg(self.keys.history(p)).arg(0).arg(-1);
        }
        let replies = conn
            .pipeline_on_primary_of(self.keys.lease(), &pipe, players.len())
            .await
            .map_err(&err)?;
        for (p, reply) in players.iter().zip(replies) {
            let reply = reply.extract_error().map_err(&err)?;
            let list: Vec<String> = ::redis::from_redis_value(reply).map_err(|e| err(e.into()))?;
            lists.insert(p, list);
        }
        let left: Vec<&(PlayerId, MatchId)> = named
            .iter()
            .filter(|(p, id)| {
                lists
                    .get(p)
                    .is_some_and(|l| !l.is_empty() && !l.iter().any(|m| m == id.as_str()))
            })
            .collect();
        if left.is_empty() {
            return Ok(Vec::new());
        }
        let mut pipe = ::redis::pipe();
        for (p, id) in &left {
            pipe.cmd("SISMEMBER")
                .arg(self.keys.past(p))
                .arg(id.as_str());
        }
        let replies = conn
            .pipeline_on_primary_of(self.keys.lease(), &pipe, left.len())
            .await
            .map_err(&err)?;
        let mut ops = Vec::new();
        for ((p, id), reply) in left.into_iter().zip(replies) {
            let reply = reply.extract_error().map_err(&err)?;
            let indexed: bool = ::redis::from_redis_value(reply).map_err(|e| err(e.into()))?;
            if !indexed {
                ops.push(Op::Index {
                    past: self.keys.past(p),
                    list: self.keys.history(p),
                    member: id.to_string(),
                });
            }
        }
        Ok(ops)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::contract::{history, wait, with_redis};
    use crate::store::{AdminRecords, RecordStorage, RedisOptions, Storage};

    fn lease(url: &str) -> ::redis::Connection {
        let mut conn = ::redis::Client::open(url)
            .unwrap()
            .get_connection()
            .unwrap();
        let () = ::redis::cmd("SET")
            .arg("{mm}:lease")
            .arg("1|past|127.0.0.1:1")
            .query(&mut conn)
            .unwrap();
        conn
    }

    fn meta(conn: &mut ::redis::Connection, field: &str) -> Option<String> {
        ::redis::cmd("HGET")
            .arg("{mm}:meta")
            .arg(field)
            .query(conn)
            .unwrap()
    }

    /// 300 records in the hash (past its compact encoding, so `HSCAN` goes a chunk at a
    /// time), 150 of them out of their first player's list: `a{i}` played `m{i}` against
    /// `b{i}`, then `n{i}` alone, keeping one match.
    fn write_history(store: &RedisStore) {
        for i in 0..150 {
            let (a, b) = (format!("a{i}"), format!("b{i}"));
            store
                .append_history(&[
                    history(&format!("m{i}"), &[&[a.as_str()], &[b.as_str()]], 1),
                    history(&format!("n{i}"), &[&[a.as_str()]], 1),
                ])
                .unwrap();
        }
        store.flush().unwrap();
    }

    #[test]
    fn a_build_stopped_after_a_chunk_carries_on_from_its_cursor() {
        with_redis(|server, runtime| {
            let url = server.url();
            let mut conn = lease(&url);
            let open = || {
                runtime
                    .block_on(RedisStore::open(&url, 1, &RedisOptions::default()))
                    .unwrap()
            };
            let store = open();
            write_history(&store);
            let indexed = |store: &RedisStore| -> Vec<usize> {
                (0..150)
                    .map(|i| wait(store.past_matches(&PlayerId::new(format!("a{i}")))).len())
                    .collect()
            };
            assert_eq!(indexed(&store), vec![1; 150]);
            drop(store);
            assert_eq!(crate::store::contract::past::redis_build::forget(&url), 150);

            let store = open();
            // Until the indexes are complete, an erasure could miss records: it is refused.
            let early = store.erase_player(&PlayerId::new("a0"), &PlayerId::new("erased:a0"));
            assert!(matches!(early, Err(StoreError::NotYet(_))), "{early:?}");
            assert_eq!(
                runtime.block_on(store.build_past(20, Some(2))).unwrap(),
                None
            );
            let partly = indexed(&store).iter().sum::<usize>();
            assert!(
                partly > 0 && partly < 150,
                "{partly} built after two chunks"
            );
            assert!(meta(&mut conn, PAST_INDEX_CURSOR).is_some());
            assert_eq!(meta(&mut conn, PAST_INDEX), None);
            drop(store);

            // The next owner carries on: every entry, each once, then the mark.
            let store = open();
            let added = runtime.block_on(store.build_past(20, None)).unwrap();
            assert_eq!(added, Some(150 - partly));
            assert_eq!(indexed(&store), vec![1; 150]);
            assert_eq!(meta(&mut conn, PAST_INDEX).as_deref(), Some("1"));
            store
                .erase_player(&PlayerId::new("a0"), &PlayerId::new("erased:a0"))
                .expect("an erasure once the indexes are complete");
            assert_eq!(meta(&mut conn, PAST_INDEX_CURSOR), None);
            assert_eq!(runtime.block_on(store.build_past_indexes()).unwrap(), None);
        });
    }

    #[test]
    fn a_build_carries_on_from_a_cursor_of_the_same_redis_process_and_starts_over_on_another() {
        with_redis(|server, runtime| {
            let url = server.url();
            let mut conn = lease(&url);
            let open = || {
                runtime
                    .block_on(RedisStore::open(&url, 1, &RedisOptions::default()))
                    .unwrap()
            };
            let store = open();
            write_history(&store);
            drop(store);
            let indexed = |store: &RedisStore| -> usize {
                (0..150)
                    .map(|i| wait(store.past_matches(&PlayerId::new(format!("a{i}")))).len())
                    .sum()
            };
            crate::store::contract::past::redis_build::forget(&url);
            let store = open();
            assert_eq!(
                runtime.block_on(store.build_past(20, Some(3))).unwrap(),
                None
            );
            let reached = meta(&mut conn, PAST_INDEX_CURSOR).expect("a cursor");
            let (run, at) = reached.rsplit_once(':').expect("RUN_ID:CURSOR");
            assert_eq!(run.len(), 40, "a run id: {reached}");
            drop(store);
            // Its entries gone, the scan resumed by the same process skips what it had read.
            let resume = |cursor: String| {
                crate::store::contract::past::redis_build::forget(&url);
                let () = ::redis::cmd("HSET")
                    .arg("{mm}:meta")
                    .arg(PAST_INDEX_CURSOR)
                    .arg(cursor)
                    .query(&mut lease(&url))
                    .unwrap();
                let store = open();
                runtime.block_on(store.build_past(20, None)).unwrap();
                indexed(&store)
            };
            let skipped = resume(reached.clone());
            assert!(skipped < 150, "{skipped} entries after resuming");
            // A cursor another process gave means nothing here: the scan starts over.
            assert_eq!(
                resume(format!("0123456789abcdef0123456789abcdef01234567:{at}")),
                150
            );
        });
    }

    #[test]
    fn a_corrupt_record_or_cursor_is_an_error_naming_it() {
        with_redis(|server, runtime| {
            let url = server.url();
            let mut conn = lease(&url);
            // A history an earlier release wrote (a keyspace with none is marked at open).
            let () = ::redis::cmd("HSET")
                .arg("{mm}:match_records")
                .arg("bad")
                .arg("{")
                .query(&mut conn)
                .unwrap();
            let store = runtime
                .block_on(RedisStore::open(&url, 1, &RedisOptions::default()))
                .unwrap();
            let () = ::redis::cmd("HSET")
                .arg("{mm}:meta")
                .arg(PAST_INDEX_CURSOR)
                .arg("x")
                .query(&mut conn)
                .unwrap();
            match runtime.block_on(store.build_past_indexes()) {
                Err(StoreError::Decode { key, .. }) => assert_eq!(key, "meta past_index_cursor"),
                other => panic!("{other:?}"),
            }
            let () = ::redis::cmd("HDEL")
                .arg("{mm}:meta")
                .arg(PAST_INDEX_CURSOR)
                .query(&mut conn)
                .unwrap();
            match runtime.block_on(store.build_past_indexes()) {
                Err(StoreError::Decode { key, .. }) => assert_eq!(key, "match record bad"),
                other => panic!("{other:?}"),
            }
            assert_eq!(meta(&mut conn, PAST_INDEX), None);
        });
    }

    /// An entry checked missing whose record was dropped, or whose player's list took the
    /// record back or went (an erasure), before its flush is not added.
    #[test]
    fn the_script_adds_an_entry_only_while_it_still_holds() {
        with_redis(|server, runtime| {
            let url = server.url();
            let mut conn = lease(&url);
            let store = runtime
                .block_on(RedisStore::open(&url, 1, &RedisOptions::default()))
                .unwrap();
            store
                .append_history(&[
                    history("kept", &[&["p"], &["q"]], 1),
                    history("held", &[&["p"], &["r"]], 1),
                ])
                .unwrap();
            store.flush().unwrap();
            // As before the index: "kept" left p's list (q keeps it) but is in no index.
            let () = ::redis::cmd("DEL")
                .arg("{mm}:past:p")
                .query(&mut conn)
                .unwrap();
            let index = |player: &str, id: &str| Op::Index {
                past: store.keys.past(&PlayerId::new(player)),
                list: store.keys.history(&PlayerId::new(player)),
                member: id.to_string(),
            };
            store.queue(vec![
                // Not stored.
                index("p", "gone"),
                // p's list holds it.
                index("p", "held"),
                // No list: an erasure's marker.
                index("erased:000000000000", "kept"),
                // Stored, out of p's list: the one entry added.
                index("p", "kept"),
            ]);
            store.flush().unwrap();
            let past = |player: &str| wait(store.past_matches(&PlayerId::new(player)));
            assert_eq!(past("p"), [MatchId::from("kept")]);
            assert!(past("erased:000000000000").is_empty());
        });
    }
}

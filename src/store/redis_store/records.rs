//! The cluster store's records: `PartyService` rosters in the `rosters` hash (mirrored, like
//! everything else; another shard's store reads the home shard's hash from Redis to enter a
//! party by id) and the match history, which stays in Redis and is read from there:
//! `match_records` (match id → record), `match_refs` (match id → how many players' lists hold
//! it), one list per player, `history:<player>`, most recently ended first, and one set per
//! player, `past:<player>`, of the stored records that left their list while other lists held
//! them (each key in the cluster's keyspace, see [`super::Keys`]).
//! The script's `p` op keeps the lists, counts and past indexes (see `APPLY`).

use std::time::Duration;

use super::{Hash, Keys, Op, RedisStore, decode, json, redis_error};
use crate::ids::{MatchId, PartyId, PlayerId};
use crate::records::{MatchRecord, PartyRoster};
use crate::store::{HistoryWrite, RecordStorage, StoreError, StoreFuture};

/// The history entries an erasure rewrites: each match id with its record if still stored.
pub(super) type Held = Vec<(MatchId, Option<MatchRecord>)>;

impl RedisStore {
    /// The matches a player's history list holds and those of their past index, each with its
    /// record if still stored.
    pub(super) async fn history_held(&self, player: &PlayerId) -> Result<(Held, Held), StoreError> {
        let ids = self.player_matches(player).await?;
        let past = self.past_matches(player).await?;
        let wanted: Vec<MatchId> = ids.iter().chain(&past).cloned().collect();
        let records: std::collections::HashMap<MatchId, MatchRecord> = self
            .match_records(&wanted)
            .await?
            .into_iter()
            .map(|r| (r.match_id.clone(), r))
            .collect();
        let with_records = |ids: Vec<MatchId>| -> Held {
            ids.into_iter()
                .map(|id| {
                    let record = records.get(&id).cloned();
                    (id, record)
                })
                .collect()
        };
        Ok((with_records(ids), with_records(past)))
    }
}

impl RedisStore {
    /// Party `id`'s roster in the home shard's `rosters` hash, for the store of another shard
    /// (see [`crate::store::Storage::home_roster`]): written there in the format
    /// `put_rosters` writes, and flushed before `PartyService` answers.
    pub(super) async fn home_party(&self, id: &PartyId) -> Result<Option<PartyRoster>, StoreError> {
        let Some(home) = self.claims.get().and_then(|k| k.first()) else {
            return Ok(None);
        };
        if home == self.keys.keyspace() {
            return Ok(None);
        }
        let value: Option<Vec<u8>> = ::redis::cmd("HGET")
            .arg(Keys::new(home).hash(Hash::Rosters))
            .arg(id.as_str())
            .query_async(&mut self.conn.clone())
            .await
            .map_err(redis_error(&self.url))?;
        value
            .map(|v| decode(&v, &format!("party roster {id} of shard {home}")))
            .transpose()
    }

    /// Notes in the home shard's keyspace that party `id` entered a queue of this shard now,
    /// for `keep` (see [`crate::store::Storage::note_party_entry`]).
    pub(super) async fn note_entry(&self, id: &PartyId, keep: Duration) -> Result<(), StoreError> {
        let Some(home) = self.claims.get().and_then(|k| k.first()) else {
            return Ok(());
        };
        if home == self.keys.keyspace() {
            return Ok(());
        }
        let () = ::redis::cmd("SET")
            .arg(Keys::new(home).party_entered(id))
            .arg(self.clock.now_unix())
            .arg("PX")
            .arg(u64::try_from(keep.as_millis()).unwrap_or(u64::MAX).max(1))
            .query_async(&mut self.conn.clone())
            .await
            .map_err(redis_error(&self.url))?;
        Ok(())
    }

    /// When each of `ids` last entered a queue of another shard, as noted there (see
    /// [`crate::store::Storage::parties_entered`]); one `MGET` per 512, the keys sharing the
    /// home shard's slot.
    pub(super) async fn entered(&self, ids: &[PartyId]) -> Result<Vec<Option<f64>>, StoreError> {
        if self.claims.get().is_none() {
            return Ok(vec![None; ids.len()]);
        }
        let mut entered = Vec::with_capacity(ids.len());
        for chunk in ids.chunks(512) {
            let mut mget = ::redis::cmd("MGET");
            for id in chunk {
                mget.arg(self.keys.party_entered(id));
            }
            let values: Vec<Option<String>> = mget
                .query_async(&mut self.conn.clone())
                .await
                .map_err(redis_error(&self.url))?;
            entered.extend(values.into_iter().map(|v| v?.parse().ok()));
        }
        Ok(entered)
    }
}

/// The ops that add `writes` to the history: each record and its holder count, then its
/// players' pushes.
pub(super) fn history_ops<'a>(
    keys: &Keys,
    writes: impl IntoIterator<Item = &'a HistoryWrite>,
) -> Result<Vec<Op>, StoreError> {
    let mut ops = Vec::new();
    for w in writes {
        let id = w.record.match_id.to_string();
        let players = w.record.players();
        ops.push(Op::Set(Hash::MatchRecords, id.clone(), json(&w.record)?));
        ops.push(Op::Set(
            Hash::MatchRefs,
            id.clone(),
            players.len().to_string().into(),
        ));
        for p in &players {
            ops.push(Op::Push {
                list: keys.history(p),
                past: keys.past(p),
                member: id.clone(),
                keep: w.keep.max(1),
            });
        }
    }
    Ok(ops)
}

impl RecordStorage for RedisStore {
    fn append_history(&self, writes: &[HistoryWrite]) -> Result<(), StoreError> {
        let _order = self.write_order();
        self.check_fence()?;
        self.queue(history_ops(&self.keys, writes)?);
        Ok(())
    }

    fn match_record<'a>(&'a self, id: &'a MatchId) -> StoreFuture<'a, Option<MatchRecord>> {
        Box::pin(async move {
            self.flush_pending().await?;
            let value: Option<Vec<u8>> = ::redis::cmd("HGET")
                .arg(self.keys.hash(Hash::MatchRecords))
                .arg(id.as_str())
                .query_async(&mut self.conn.clone())
                .await
                .map_err(redis_error(&self.url))?;
            value
                .map(|v| decode(&v, &format!("match record {id}")))
                .transpose()
        })
    }

    fn player_matches<'a>(&'a self, player: &'a PlayerId) -> StoreFuture<'a, Vec<MatchId>> {
        Box::pin(async move {
            self.flush_pending().await?;
            let ids: Vec<String> = ::redis::cmd("LRANGE")
                .arg(self.keys.history(player))
                .arg(0)
                .arg(-1)
                .query_async(&mut self.conn.clone())
                .await
                .map_err(redis_error(&self.url))?;
            Ok(ids.iter().map(|m| MatchId::new(m.as_str())).collect())
        })
    }

    fn past_matches<'a>(&'a self, player: &'a PlayerId) -> StoreFuture<'a, Vec<MatchId>> {
        Box::pin(async move {
            self.flush_pending().await?;
            let mut ids: Vec<String> = ::redis::cmd("SMEMBERS")
                .arg(self.keys.past(player))
                .query_async(&mut self.conn.clone())
                .await
                .map_err(redis_error(&self.url))?;
            ids.sort();
            Ok(ids.iter().map(|m| MatchId::new(m.as_str())).collect())
        })
    }

    fn match_records<'a>(&'a self, ids: &'a [MatchId]) -> StoreFuture<'a, Vec<MatchRecord>> {
        Box::pin(async move {
            if ids.is_empty() {
                return Ok(Vec::new());
            }
            self.flush_pending().await?;
            let mut cmd = ::redis::cmd("HMGET");
            cmd.arg(self.keys.hash(Hash::MatchRecords));
            for id in ids {
                cmd.arg(id.as_str());
            }
            let values: Vec<Option<Vec<u8>>> = cmd
                .query_async(&mut self.conn.clone())
                .await
                .map_err(redis_error(&self.url))?;
            values
                .iter()
                .zip(ids)
                .filter_map(|(v, id)| v.as_ref().map(|v| decode(v, &format!("match record {id}"))))
                .collect()
        })
    }

    fn put_rosters(&self, rosters: &[&PartyRoster]) -> Result<(), StoreError> {
        let _order = self.write_order();
        self.check_fence()?;
        let mut batch = Vec::new();
        {
            let mut data = self.mirror.data();
            for r in rosters {
                // Snapshots write every party: only what changed goes out.
                if data.rosters.get(&r.party_id) == Some(*r) {
                    continue;
                }
                batch.push(Op::Set(Hash::Rosters, r.party_id.to_string(), json(r)?));
                data.rosters.insert(r.party_id.clone(), (*r).clone());
            }
            // Queued under the mirror's lock (see `RedisStore::queue`).
            self.queue(batch);
        }
        Ok(())
    }

    fn remove_rosters(&self, ids: &[PartyId]) -> Result<(), StoreError> {
        let _order = self.write_order();
        self.check_fence()?;
        let batch = ids
            .iter()
            .map(|id| Op::Del(Hash::Rosters, id.to_string()))
            .collect();
        self.mirror.remove_rosters(ids)?;
        self.queue(batch);
        Ok(())
    }

    fn load_rosters(&self) -> Result<Vec<PartyRoster>, StoreError> {
        self.mirror.load_rosters()
    }

    fn history_players(&self) -> Result<Vec<PlayerId>, StoreError> {
        Err(StoreError::Redis(format!(
            "{}: a cluster store does not list its match history's players",
            crate::store::redact(&self.url)
        )))
    }

    fn import_match_history(
        &self,
        lists: &[(PlayerId, Vec<MatchId>)],
        past: &[(PlayerId, Vec<MatchId>)],
        records: &[(MatchRecord, u32)],
    ) -> Result<(), StoreError> {
        let _order = self.write_order();
        self.check_fence()?;
        let mut batch = Vec::new();
        for (player, list) in lists {
            let ids = list.iter().map(ToString::to_string).collect();
            batch.push(Op::List(self.keys.history(player), ids));
        }
        for (player, ids) in past {
            let ids = ids.iter().map(ToString::to_string).collect();
            batch.push(Op::Past(self.keys.past(player), ids));
        }
        for (record, holders) in records {
            let id = record.match_id.to_string();
            batch.push(Op::Set(Hash::MatchRecords, id.clone(), json(record)?));
            batch.push(Op::Set(Hash::MatchRefs, id, holders.to_string().into()));
        }
        self.queue(batch);
        Ok(())
    }
}

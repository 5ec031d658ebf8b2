//! The embedded store's records: the match history in the journal tree (so a result's record
//! is in its entry's atomic batch) and `PartyService` rosters in their own tree.

use super::{SledStore, decode, decode_seq, encode};
use crate::ids::{MatchId, PartyId, PlayerId};
use crate::records::{MatchRecord, PartyRoster};
use crate::store::history::HistoryPlan;
use crate::store::{HistoryWrite, RecordStorage, StoreError, StoreFuture};

impl SledStore {
    /// The lock every history write holds from planning to applying its batch: the plan reads
    /// lists and holder counts and the batch writes them whole, so two writes planned against
    /// the same list (a cancelled match's record and a result's journal batch) would each drop
    /// the other's push, or count a record's holders wrong and keep it for good.
    pub(super) fn history_lock(&self) -> std::sync::MutexGuard<'_, ()> {
        self.history.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Adds history writes to a journal-tree batch (keys `h/…`, see [`history_key`]), planned
    /// against what the tree holds now: the caller holds [`SledStore::history_lock`] until it
    /// applies the batch.
    pub(super) fn history_into(
        &self,
        batch: &mut sled::Batch,
        writes: &[&HistoryWrite],
    ) -> Result<(), StoreError> {
        let mut plan = HistoryPlan::default();
        for w in writes {
            plan.add(
                w,
                &mut |p| {
                    let key = history_key(b'p', p.as_str());
                    self.journal
                        .get(&key)?
                        .map_or(Ok(Vec::new()), |v| decode(&v, &history_name(&key)))
                },
                &mut |m| {
                    let key = history_key(b'c', m.as_str());
                    Ok(self.journal.get(&key)?.map_or(0, |v| decode_seq(&v) as u32))
                },
            )?;
        }
        let past = plan.past(&mut |m| {
            let key = history_key(b'm', m.as_str());
            self.journal
                .get(&key)?
                .map(|v| decode(&v, &history_name(&key)))
                .transpose()
        })?;
        // Disjoint: a record cut off a list and dropped in the same batch is only removed.
        for (player, id) in &past.removed {
            batch.remove(past_key(player, id));
        }
        for (player, id) in &past.added {
            batch.insert(past_key(player, id), &[]);
        }
        for r in &plan.records {
            batch.insert(history_key(b'm', r.match_id.as_str()), encode(r)?);
        }
        for (player, list) in &plan.lists {
            batch.insert(history_key(b'p', player.as_str()), encode(list)?);
        }
        for (id, n) in &plan.refs {
            let count = history_key(b'c', id.as_str());
            if *n == 0 {
                batch.remove(count);
                batch.remove(history_key(b'm', id.as_str()));
            } else {
                batch.insert(count, &u64::from(*n).to_be_bytes());
            }
        }
        Ok(())
    }
}

impl RecordStorage for SledStore {
    fn append_history(&self, writes: &[HistoryWrite]) -> Result<(), StoreError> {
        let mut batch = sled::Batch::default();
        let writes: Vec<&HistoryWrite> = writes.iter().collect();
        let _history = self.history_lock();
        self.history_into(&mut batch, &writes)?;
        self.journal.apply_batch(batch)?;
        Ok(())
    }

    fn match_record<'a>(&'a self, id: &'a MatchId) -> StoreFuture<'a, Option<MatchRecord>> {
        let key = history_key(b'm', id.as_str());
        let found = self
            .journal
            .get(&key)
            .map_err(StoreError::from)
            .and_then(|v| v.map(|v| decode(&v, &history_name(&key))).transpose());
        Box::pin(std::future::ready(found))
    }

    fn player_matches<'a>(&'a self, player: &'a PlayerId) -> StoreFuture<'a, Vec<MatchId>> {
        let key = history_key(b'p', player.as_str());
        let found = self
            .journal
            .get(&key)
            .map_err(StoreError::from)
            .and_then(|v| v.map_or(Ok(Vec::new()), |v| decode(&v, &history_name(&key))));
        Box::pin(std::future::ready(found))
    }

    fn past_matches<'a>(&'a self, player: &'a PlayerId) -> StoreFuture<'a, Vec<MatchId>> {
        Box::pin(std::future::ready(self.past_of(player)))
    }

    fn match_records<'a>(&'a self, ids: &'a [MatchId]) -> StoreFuture<'a, Vec<MatchRecord>> {
        let found = ids
            .iter()
            .filter_map(|id| {
                let key = history_key(b'm', id.as_str());
                match self.journal.get(&key) {
                    Ok(Some(v)) => Some(decode(&v, &history_name(&key))),
                    Ok(None) => None,
                    Err(e) => Some(Err(e.into())),
                }
            })
            .collect();
        Box::pin(std::future::ready(found))
    }

    fn put_rosters(&self, rosters: &[&PartyRoster]) -> Result<(), StoreError> {
        let mut batch = sled::Batch::default();
        for r in rosters {
            batch.insert(r.party_id.as_str().as_bytes(), encode(r)?);
        }
        self.rosters.apply_batch(batch)?;
        Ok(())
    }

    fn remove_rosters(&self, ids: &[PartyId]) -> Result<(), StoreError> {
        let mut batch = sled::Batch::default();
        for id in ids {
            batch.remove(id.as_str().as_bytes());
        }
        self.rosters.apply_batch(batch)?;
        Ok(())
    }

    fn history_players(&self) -> Result<Vec<PlayerId>, StoreError> {
        self.journal
            .scan_prefix(b"h/p/")
            .keys()
            .map(|k| Ok(PlayerId::new(String::from_utf8_lossy(&k?[4..]).as_ref())))
            .collect()
    }

    fn import_match_history(
        &self,
        lists: &[(PlayerId, Vec<MatchId>)],
        past: &[(PlayerId, Vec<MatchId>)],
        records: &[(MatchRecord, u32)],
    ) -> Result<(), StoreError> {
        let mut batch = sled::Batch::default();
        for (player, list) in lists {
            batch.insert(history_key(b'p', player.as_str()), encode(list)?);
        }
        let _history = self.history_lock();
        for (player, ids) in past {
            for old in self.past_of(player)? {
                batch.remove(past_key(player, &old));
            }
            for id in ids {
                batch.insert(past_key(player, id), &[]);
            }
        }
        for (record, holders) in records {
            let id = record.match_id.as_str();
            batch.insert(history_key(b'm', id), encode(record)?);
            batch.insert(history_key(b'c', id), &u64::from(*holders).to_be_bytes());
        }
        self.journal.apply_batch(batch)?;
        Ok(())
    }

    fn load_rosters(&self) -> Result<Vec<PartyRoster>, StoreError> {
        self.rosters
            .iter()
            .map(|item| {
                let (k, v) = item?;
                decode(&v, &format!("rosters/{}", String::from_utf8_lossy(&k)))
            })
            .collect()
    }
}

impl SledStore {
    /// A player's past index, in id order.
    pub(super) fn past_of(&self, player: &PlayerId) -> Result<Vec<MatchId>, StoreError> {
        let prefix = past_key(player, &MatchId::from(""));
        self.journal
            .scan_prefix(&prefix)
            .keys()
            .map(|k| {
                Ok(MatchId::new(
                    String::from_utf8_lossy(&k?[prefix.len()..]).as_ref(),
                ))
            })
            .collect()
    }
}

/// A record in a player's past index: `h/x/<player>␟<match id>` → empty (ids hold no control
/// character, so one player's keys are exactly those under `h/x/<player>␟`).
pub(super) fn past_key(player: &PlayerId, id: &MatchId) -> Vec<u8> {
    history_key(b'x', &format!("{player}\u{1f}{id}"))
}

/// Match history in the journal tree (so a result's record is in its entry's batch):
/// `h/m/<match id>` → [`MatchRecord`], `h/c/<match id>` → how many lists hold it (big-endian
/// u64), `h/p/<player>` → JSON list of match ids, most recently ended first, and the past
/// indexes under `h/x/` (see [`past_key`]).
pub(super) fn history_key(kind: u8, id: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(4 + id.len());
    k.extend_from_slice(b"h/");
    k.push(kind);
    k.push(b'/');
    k.extend_from_slice(id.as_bytes());
    k
}

pub(super) fn history_name(key: &[u8]) -> String {
    format!("history/{}", String::from_utf8_lossy(key))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::store::Storage;
    use crate::store::contract::{entry, history, wait};

    /// A cancelled match's record (`append_history`) and results' journal batches, written at
    /// once for the same player: every match lands in the list and each record keeps both
    /// holders.
    #[test]
    fn concurrent_history_writes_for_one_player_lose_nothing() {
        const EACH: usize = 150;
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(SledStore::open(dir.path(), 1 << 20).unwrap());
        let cancelled = std::thread::spawn({
            let store = store.clone();
            move || {
                for i in 0..EACH {
                    let id = format!("c{i}");
                    let other = format!("x{i}");
                    let write = history(&id, &[&["p"], &[other.as_str()]], 10_000);
                    store.append_history(&[write]).unwrap();
                }
            }
        });
        for i in 0..EACH {
            let id = format!("r{i}");
            let other = format!("y{i}");
            let mut result = entry(&id, "p", 1500.0);
            result.history = Some(history(&id, &[&["p"], &[other.as_str()]], 10_000));
            store.append_journal(i as u64 + 1, &[result]).unwrap();
        }
        cancelled.join().unwrap();
        let list = wait(store.player_matches(&PlayerId::from("p")));
        assert_eq!(list.len(), 2 * EACH, "pushes were lost");
        for id in &list {
            let count = store
                .journal
                .get(history_key(b'c', id.as_str()))
                .unwrap()
                .map(|v| decode_seq(&v));
            assert_eq!(count, Some(2), "holders of {id}");
        }
    }
}

//! The past indexes of a store written before they existed. Releases before them kept no
//! index, so a record that had already left a player's list while an opponent's list still
//! held it would stay out of the player's index, and erasing the player would leave their id
//! in it. The first open of such a store builds the index from the records; a `meta` key marks
//! the store as indexed, and every later write keeps the index (see `records.rs`).

use super::records::{history_key, history_name, past_key};
use super::{SledStore, decode};
use crate::ids::{MatchId, PlayerId};
use crate::records::MatchRecord;
use crate::store::StoreError;

/// `meta` key: present once every record that left a player's list is in their past index.
pub(super) const PAST_INDEX: &str = "past_index";
const PAST_INDEX_VERSION: &[u8] = b"1";
/// Index entries per batch while building: the batch stays small, and each one applied is
/// kept by a build that starts over.
const BATCH: usize = 10_000;

impl SledStore {
    /// Marks a new store as indexed: every write keeps its past indexes from the start.
    pub(super) fn mark_past_indexed(meta: &sled::Tree) -> Result<(), StoreError> {
        meta.insert(PAST_INDEX, PAST_INDEX_VERSION)?;
        Ok(())
    }

    /// Builds the past indexes unless the store is marked indexed, then marks it; the number
    /// of entries added. Each stored record joins the index of every player it names who has
    /// a list that does not hold it: the records that left that list while others held it. A
    /// player named without a list is an erasure's marker (a record leaves a list only for a
    /// newer one, so whoever played it has a list). Entries go in batches and the mark only
    /// after they are flushed: a build stopped midway (`kill -9`) leaves the store unmarked,
    /// and the next open builds again, adding what is missing.
    pub(super) fn build_past_indexes(&self) -> Result<Option<usize>, StoreError> {
        if self.meta.get(PAST_INDEX)?.is_some() {
            return Ok(None);
        }
        let _history = self.history_lock();
        let mut added = 0;
        let mut batch = sled::Batch::default();
        let mut in_batch = 0;
        for item in self.journal.scan_prefix(history_key(b'm', "")) {
            let (key, value) = item?;
            let record: MatchRecord = decode(&value, &history_name(&key))?;
            for player in record.players() {
                if !self.left_list_of(&player, &record.match_id)? {
                    continue;
                }
                let entry = past_key(&player, &record.match_id);
                if self.journal.contains_key(&entry)? {
                    continue;
                }
                batch.insert(entry, &[]);
                added += 1;
                in_batch += 1;
                if in_batch == BATCH {
                    self.journal.apply_batch(std::mem::take(&mut batch))?;
                    in_batch = 0;
                }
            }
        }
        self.journal.apply_batch(batch)?;
        self.db.flush()?;
        self.meta.insert(PAST_INDEX, PAST_INDEX_VERSION)?;
        self.db.flush()?;
        Ok(Some(added))
    }

    /// Whether `player` has a history list and it does not hold `id`.
    fn left_list_of(&self, player: &PlayerId, id: &MatchId) -> Result<bool, StoreError> {
        let key = history_key(b'p', player.as_str());
        match self.journal.get(&key)? {
            None => Ok(false),
            Some(v) => {
                let list: Vec<MatchId> = decode(&v, &history_name(&key))?;
                Ok(!list.contains(id))
            }
        }
    }

    /// Takes the past indexes and their mark out, as in a store of an earlier release.
    #[cfg(test)]
    pub(in crate::store) fn forget_past_indexes(&self, keep_every: usize) -> usize {
        let keys: Vec<_> = self
            .journal
            .scan_prefix(history_key(b'x', ""))
            .keys()
            .map(Result::unwrap)
            .collect();
        let mut removed = 0;
        for (i, key) in keys.into_iter().enumerate() {
            if keep_every == 0 || i % keep_every != 0 {
                self.journal.remove(key).unwrap();
                removed += 1;
            }
        }
        self.meta.remove(PAST_INDEX).unwrap();
        self.db.flush().unwrap();
        removed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_corrupt_record_met_while_building_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        {
            let store = SledStore::open(dir.path(), 1 << 20).unwrap();
            store
                .journal
                .insert(history_key(b'm', "bad"), b"{")
                .unwrap();
            store.forget_past_indexes(0);
        }
        match SledStore::open(dir.path(), 1 << 20) {
            Err(StoreError::Decode { key, .. }) => assert_eq!(key, "history/h/m/bad"),
            Err(e) => panic!("{e}"),
            Ok(_) => panic!("a corrupt record was indexed"),
        }
    }

    #[test]
    fn a_new_store_is_marked_indexed_and_an_indexed_one_is_not_scanned_again() {
        let dir = tempfile::tempdir().unwrap();
        {
            let store = SledStore::open(dir.path(), 1 << 20).unwrap();
            assert!(store.meta.get(PAST_INDEX).unwrap().is_some());
            // Were the store scanned, this record would fail the open.
            store
                .journal
                .insert(history_key(b'm', "bad"), b"{")
                .unwrap();
            store.db.flush().unwrap();
        }
        let store = SledStore::open(dir.path(), 1 << 20).unwrap();
        assert_eq!(store.build_past_indexes().unwrap(), None);
    }
}

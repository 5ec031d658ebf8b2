//! The embedded store's acknowledgements, in the journal tree:
//! - `r/<match id>` → JSON [`AckRecord`] (the idempotency index);
//! - `t/<milliseconds be64><match id>` → empty: the same acknowledgement by the time its
//!   retention counts from ([`AckRecord::kept_since`]), so a trim reads the oldest first and
//!   stops at the first one kept.
//!
//! Both keys are written in the batch that journals the result, and a trim removes both in one
//! batch. A store written by a release without the time index gets it built once at open,
//! from the time in each match id; a `meta` key marks the store as indexed.

use super::{SledStore, decode, encode, result_key};
use crate::ids::MatchId;
use crate::store::acks::millis;
use crate::store::{AckRecord, StoreError};

/// `meta` key: present once every acknowledgement with a time is in the time index.
pub(super) const ACK_INDEX: &str = "ack_index";
const ACK_INDEX_VERSION: &[u8] = b"1";
/// Index entries per batch while building.
const BATCH: usize = 10_000;

/// `t/<milliseconds be64><match id>`.
fn time_key(since: f64, id: &MatchId) -> Vec<u8> {
    let mut k = Vec::with_capacity(10 + id.as_str().len());
    k.extend_from_slice(b"t/");
    k.extend_from_slice(&millis(since).to_be_bytes());
    k.extend_from_slice(id.as_str().as_bytes());
    k
}

impl SledStore {
    /// Marks a new store as indexed: every acknowledgement gets its index entry from the start.
    pub(super) fn mark_ack_indexed(meta: &sled::Tree) -> Result<(), StoreError> {
        meta.insert(ACK_INDEX, ACK_INDEX_VERSION)?;
        Ok(())
    }

    /// Writes `record` as the acknowledgement of `id`, with its time index entry, into `batch`.
    pub(super) fn ack_into(
        batch: &mut sled::Batch,
        id: &MatchId,
        record: &AckRecord,
    ) -> Result<(), StoreError> {
        batch.insert(result_key(id), encode(record)?);
        if let Some(since) = record.kept_since(id) {
            batch.insert(time_key(since, id), &[]);
        }
        Ok(())
    }

    /// [`SledStore::ack_into`] for an acknowledgement that may replace one stored for `id`
    /// (an import): the stored one's index entry goes in the same batch.
    pub(super) fn ack_replacing(
        &self,
        batch: &mut sled::Batch,
        id: &MatchId,
        record: &AckRecord,
    ) -> Result<(), StoreError> {
        if let Some(v) = self.journal.get(result_key(id))? {
            let stored: AckRecord = decode(&v, &format!("result/{id}"))?;
            if let Some(since) = stored.kept_since(id) {
                batch.remove(time_key(since, id));
            }
        }
        Self::ack_into(batch, id, record)
    }

    /// Indexes every acknowledgement by time unless the store is marked indexed, then marks
    /// it; the entries added. Only acknowledgements written before the index existed are
    /// found here, and they carry no time of their own: each is indexed at its match's
    /// formation ([`AckRecord::kept_since`]). Entries go in batches and the mark only after
    /// they are flushed: a build stopped midway leaves the store unmarked, and the next open
    /// builds again (each entry's key is the same the second time).
    pub(super) fn build_ack_index(&self) -> Result<Option<usize>, StoreError> {
        if self.meta.get(ACK_INDEX)?.is_some() {
            return Ok(None);
        }
        let mut added = 0;
        let mut batch = sled::Batch::default();
        let mut in_batch = 0;
        for item in self.journal.scan_prefix(b"r/") {
            let (k, v) = item?;
            let id = MatchId::new(String::from_utf8_lossy(&k[2..]).as_ref());
            let record: AckRecord = decode(&v, &format!("result/{id}"))?;
            let Some(since) = record.kept_since(&id) else {
                continue;
            };
            batch.insert(time_key(since, &id), &[]);
            added += 1;
            in_batch += 1;
            if in_batch == BATCH {
                self.journal.apply_batch(std::mem::take(&mut batch))?;
                in_batch = 0;
            }
        }
        self.journal.apply_batch(batch)?;
        self.db.flush()?;
        Self::mark_ack_indexed(&self.meta)?;
        self.db.flush()?;
        Ok(Some(added))
    }

    /// Removes the acknowledgements kept since before `before_unix`, oldest first, at most
    /// `at_most`, with their index entries, in one batch; how many.
    pub(super) fn trim_ack_batch(
        &self,
        before_unix: f64,
        at_most: usize,
    ) -> Result<usize, StoreError> {
        let until = millis(before_unix).to_be_bytes();
        let mut batch = sled::Batch::default();
        let mut n = 0;
        for item in self
            .journal
            .range(b"t/".to_vec()..[b"t/".as_slice(), &until].concat())
        {
            if n == at_most {
                break;
            }
            let (k, _) = item?;
            let id = MatchId::new(String::from_utf8_lossy(&k[10..]).as_ref());
            batch.remove(result_key(&id));
            batch.remove(k);
            n += 1;
        }
        self.journal.apply_batch(batch)?;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::ResultAck;
    use crate::store::Storage;

    #[test]
    fn acknowledgements_of_an_earlier_release_get_their_matchs_time_at_the_first_open() {
        let dir = tempfile::tempdir().unwrap();
        let bare = ResultAck {
            queue: "1v1".into(),
            changes: Vec::new(),
            report: None,
        };
        // Formed at 1,000 s and at 2,000 s; and one whose id carries no time.
        let old = MatchId::new("m-0000000f4240ffffffffffffffffffff");
        let newer = MatchId::new("m-0000001e8480ffffffffffffffffffff");
        let untimed = MatchId::new("custom-7");
        {
            // The layout before the index: bare acknowledgements, no index, no mark.
            let store = SledStore::open(dir.path(), 1 << 20).unwrap();
            for id in [&old, &newer, &untimed] {
                store
                    .journal
                    .insert(result_key(id), encode(&bare).unwrap())
                    .unwrap();
            }
            store.meta.remove(ACK_INDEX).unwrap();
            store.db.flush().unwrap();
        }
        let store = SledStore::open(dir.path(), 1 << 20).unwrap();
        assert_eq!(
            store.build_ack_index().unwrap(),
            None,
            "built at open, once"
        );
        assert_eq!(store.trim_acks(1_500.0, 10).unwrap(), 1);
        assert_eq!(store.result_of(&old).unwrap(), None);
        assert_eq!(store.result_of(&newer).unwrap(), Some(bare.clone()));
        assert_eq!(store.trim_acks(1e12, 10).unwrap(), 1);
        assert_eq!(
            store.result_of(&untimed).unwrap(),
            Some(bare),
            "kept: no time is known"
        );
        assert_eq!(store.journal.scan_prefix(b"t/").count(), 0);
    }
}

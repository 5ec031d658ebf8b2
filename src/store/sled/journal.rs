//! The embedded store's journal batch: entries, their acknowledgements (the idempotency index,
//! with its time index),
//! their season writes and their match history records, one atomic batch of the journal tree.

use super::{
    SledStore, encode, journal_key, player_rank_key, player_week_key, ranks_key, state_key,
    week_key,
};
use crate::store::{AckRecord, EntryKind, HistoryWrite, JournalEntry, StoreError};

impl SledStore {
    /// The batch that journals `entries` from `first_seq` (not yet applied).
    pub(super) fn journal_batch(
        &self,
        first_seq: u64,
        entries: &[JournalEntry],
    ) -> Result<sled::Batch, StoreError> {
        let mut batch = sled::Batch::default();
        let history: Vec<&HistoryWrite> =
            entries.iter().filter_map(|e| e.history.as_ref()).collect();
        self.history_into(&mut batch, &history)?;
        for (i, entry) in entries.iter().enumerate() {
            batch.insert(journal_key(first_seq + i as u64), encode(entry)?);
            if entry.kind == EntryKind::Result {
                let ack = AckRecord::of_entry(entry);
                Self::ack_into(&mut batch, &entry.match_id, &ack)?;
            }
            if let Some(season) = &entry.season {
                batch.insert(state_key(&entry.pool), encode(&season.state)?);
                if let Some((n, week, rp)) = &season.week_rp {
                    batch.insert(week_key(&entry.pool, *n, *week), encode(rp)?);
                    // Per-player index, same batch: GetPlayer reads one player's weeks by prefix.
                    for (player, points) in rp {
                        batch.insert(
                            player_week_key(&entry.pool, player, *n, *week),
                            &points.to_be_bytes(),
                        );
                    }
                }
                if let Some((n, ranks)) = &season.ranks {
                    batch.insert(ranks_key(&entry.pool, *n), encode(ranks)?);
                    for rank in ranks {
                        batch.insert(
                            player_rank_key(&entry.pool, &rank.player, *n),
                            encode(rank)?,
                        );
                    }
                }
            }
        }
        Ok(batch)
    }
}

//! The cluster store's journal batch: entries, their acknowledgements, season writes, match
//! history and the players' and parties' whole records, as one batch (one script); with a
//! result's events when the committer asks for them.

use super::records::history_ops;
use super::{Hash, Op, RedisStore, json, ranks_field, week_field};
use crate::store::{EntryKind, EventRecord, JournalEntry, Storage, StoreError};

impl RedisStore {
    /// Queues the batch that journals `entries` from `first_seq`, with `events` appended to it
    /// (one batch, so one script: all or none); the mirror takes them at once. The last event
    /// cursor.
    pub(super) fn queue_journal(
        &self,
        first_seq: u64,
        entries: &[JournalEntry],
        events: &[EventRecord],
    ) -> Result<u64, StoreError> {
        self.check_fence()?;
        let mut batch = Vec::new();
        for (i, entry) in entries.iter().enumerate() {
            let seq = first_seq + i as u64;
            batch.push(Op::Set(Hash::Journal, seq.to_string(), json(entry)?));
            batch.push(Op::Set(
                Hash::Meta,
                "last_seq".into(),
                seq.to_string().into(),
            ));
            if entry.kind == EntryKind::Result {
                batch.push(Op::Set(
                    Hash::Acks,
                    entry.match_id.to_string(),
                    json(&entry.ack)?,
                ));
            }
            if let Some(season) = &entry.season {
                batch.push(Op::Set(
                    Hash::Seasons,
                    entry.pool.clone(),
                    json(&season.state)?,
                ));
                if let Some((n, week, rp)) = &season.week_rp {
                    batch.push(Op::Set(
                        Hash::Weeks,
                        week_field(&entry.pool, *n, *week),
                        json(rp)?,
                    ));
                }
                if let Some((n, ranks)) = &season.ranks {
                    batch.push(Op::Set(
                        Hash::Ranks,
                        ranks_field(&entry.pool, *n),
                        json(ranks)?,
                    ));
                }
            }
        }
        batch.extend(history_ops(
            &self.keys,
            entries.iter().filter_map(|e| e.history.as_ref()),
        )?);
        let values = events.iter().map(json).collect::<Result<Vec<_>, _>>()?;
        self.mirror.append_journal(first_seq, entries)?;
        // The players' and parties' whole records, current in the `players` hash at once.
        let mut data = self.mirror.data();
        for entry in entries {
            for (player, record) in &entry.records {
                let pools = data.players.entry(player.clone()).or_default();
                pools.insert(entry.pool.clone(), record.clone());
                batch.push(Op::Set(Hash::Players, player.to_string(), json(pools)?));
            }
            for (party, record) in &entry.parties {
                let pools = data.parties.entry(party.clone()).or_default();
                pools.insert(entry.pool.clone(), record.clone());
                batch.push(Op::Set(Hash::Parties, party.clone(), json(pools)?));
            }
        }
        let first = data.append_events(events);
        let last = data.admin.last_event;
        if !events.is_empty() {
            batch.extend(
                values
                    .into_iter()
                    .zip(first..)
                    .map(|(v, seq)| Op::Set(Hash::Admin, super::admin::seq_field('e', seq), v)),
            );
            batch.push(Op::Set(
                Hash::Admin,
                "n/e".into(),
                last.to_string().into_bytes(),
            ));
        }
        // Queued under the mirror's lock, so the players' records reach Redis in the order the
        // mirror took them (see `RedisStore::queue`) and events in cursor order.
        self.queue(batch);
        Ok(last)
    }
}

//! The cluster store's journal batch: entries, their acknowledgements, season writes, match
//! history and the players' and parties' whole records, as one batch (one script); with a
//! result's events when the committer asks for them.

use super::records::history_ops;
use serde::{Deserialize, Serialize};

use super::{Hash, Op, RedisStore, json, ranks_field, week_field};
use crate::ids::PlayerId;
use crate::records::{PartyRecord, PoolRecord};
use crate::store::{AckRecord, EntryKind, EventRecord, JournalEntry, Storage, StoreError};

/// Records (and party records) past which an entry is kept in parts of this many.
pub(super) const PART_RECORDS: usize = 1_000;

/// A part of a large entry's records.
#[derive(Serialize)]
struct PartOut<'a> {
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    records: &'a [(PlayerId, PoolRecord)],
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    parties: &'a [(String, PartyRecord)],
}

/// The field of a large entry: the entry without its records, and how many parts hold them.
#[derive(Serialize)]
struct HeadOut<'a> {
    parts: usize,
    entry: &'a JournalEntry,
}

/// An entry's own field as read back: whole, or the head of an entry kept in parts.
#[derive(Deserialize)]
#[serde(untagged)]
pub(super) enum Head {
    Parted { parts: usize, entry: JournalEntry },
    Whole(JournalEntry),
}

/// A part as read back.
#[derive(Deserialize)]
pub(super) struct Part {
    #[serde(default)]
    pub records: Vec<(PlayerId, PoolRecord)>,
    #[serde(default)]
    pub parties: Vec<(String, PartyRecord)>,
}

/// How many parts the journal hash keeps `entry` in besides its own field: none up to
/// [`PART_RECORDS`] records and party records.
pub(super) fn parts(entry: &JournalEntry) -> usize {
    if entry.records.len() + entry.parties.len() <= PART_RECORDS {
        return 0;
    }
    entry.records.len().div_ceil(PART_RECORDS) + entry.parties.len().div_ceil(PART_RECORDS)
}

/// The field of part `k` (from 1) of entry `seq`.
fn part_field(seq: u64, k: usize) -> String {
    format!("{seq}/{k}")
}

/// The journal hash's writes for entry `seq`: the entry in its field, or past
/// [`PART_RECORDS`] records (a season reset of a large pool) the entry without its records in
/// its field, with their count of parts, and the records in parts `SEQ/1`, `SEQ/2`, ... (read
/// back whole by [`assemble`]), so that no value is as large as the pool. `held`: how many parts
/// an earlier version of the entry had (a rewrite by an erasure), whose extra parts go.
pub(super) fn journal_ops(
    seq: u64,
    entry: &JournalEntry,
    held: usize,
) -> Result<Vec<Op>, StoreError> {
    let n = parts(entry);
    let mut ops = Vec::with_capacity(n + 1 + held.saturating_sub(n));
    if n == 0 {
        ops.push(Op::Set(Hash::Journal, seq.to_string(), json(entry)?));
    } else {
        let head = JournalEntry {
            match_id: entry.match_id.clone(),
            applied_unix: entry.applied_unix,
            pool: entry.pool.clone(),
            records: Vec::new(),
            parties: Vec::new(),
            ack: entry.ack.clone(),
            kind: entry.kind,
            season: entry.season.clone(),
            calibration: entry.calibration.clone(),
            history: entry.history.clone(),
        };
        ops.push(Op::Set(
            Hash::Journal,
            seq.to_string(),
            json(&HeadOut {
                parts: n,
                entry: &head,
            })?,
        ));
        let records = entry.records.chunks(PART_RECORDS).map(|records| PartOut {
            records,
            parties: &[],
        });
        let parties = entry.parties.chunks(PART_RECORDS).map(|parties| PartOut {
            records: &[],
            parties,
        });
        for (k, part) in records.chain(parties).enumerate() {
            ops.push(Op::Set(Hash::Journal, part_field(seq, k + 1), json(&part)?));
        }
    }
    ops.extend((n + 1..=held).map(|k| Op::Del(Hash::Journal, part_field(seq, k))));
    Ok(ops)
}

/// The journal hash's deletes that trim entry `seq`.
pub(super) fn journal_dels(seq: u64, entry: &JournalEntry) -> Vec<Op> {
    std::iter::once(Op::Del(Hash::Journal, seq.to_string()))
        .chain((1..=parts(entry)).map(|k| Op::Del(Hash::Journal, part_field(seq, k))))
        .collect()
}

/// Whether a journal field is a part (`SEQ/K`): its entry's sequence and its number.
pub(super) fn part_of(field: &str) -> Option<(&str, &str)> {
    field.split_once('/')
}

/// Puts each entry's parts (by sequence, then number) back into it, in order; `expected`: how
/// many parts each entry kept in parts has. A part of no such entry, or a part missing, is an
/// error naming it.
pub(super) fn assemble(
    journal: &mut std::collections::BTreeMap<u64, JournalEntry>,
    expected: &std::collections::BTreeMap<u64, usize>,
    parts: std::collections::BTreeMap<(u64, usize), Part>,
) -> Result<(), StoreError> {
    let mut found: std::collections::BTreeMap<u64, usize> = std::collections::BTreeMap::new();
    for ((seq, k), part) in parts {
        let next = found.get(&seq).map_or(1, |k| k + 1);
        let entry = journal
            .get_mut(&seq)
            .filter(|_| k == next && expected.get(&seq).is_some_and(|n| k <= *n));
        let Some(entry) = entry else {
            return Err(StoreError::Decode {
                key: format!("journal {}", part_field(seq, k)),
                detail: "a part of no entry kept in parts, or one after a missing part".into(),
            });
        };
        entry.records.extend(part.records);
        entry.parties.extend(part.parties);
        found.insert(seq, k);
    }
    for (seq, n) in expected {
        let got = found.get(seq).copied().unwrap_or(0);
        if got != *n {
            return Err(StoreError::Decode {
                key: format!("journal {seq}"),
                detail: format!("kept in {n} parts, of which {got} were found"),
            });
        }
    }
    Ok(())
}

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
        let _order = self.write_order();
        self.check_fence()?;
        let mut batch = Vec::new();
        for (i, entry) in entries.iter().enumerate() {
            let seq = first_seq + i as u64;
            batch.extend(journal_ops(seq, entry, 0)?);
            batch.push(Op::Set(
                Hash::Meta,
                "last_seq".into(),
                seq.to_string().into(),
            ));
            if entry.kind == EntryKind::Result {
                let record = AckRecord::of_entry(entry);
                batch.push(Op::Set(
                    Hash::Acks,
                    entry.match_id.to_string(),
                    json(&record)?,
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
        let now_ms = self.event_ms();
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
        batch.extend(super::admin::append_events(
            &mut data, events, values, now_ms,
        ));
        let last = data.admin.last_event;
        // Queued under the mirror's lock, so the players' records reach Redis in the order the
        // mirror took them (see `RedisStore::queue`) and events in cursor order.
        self.queue(batch);
        Ok(last)
    }
}

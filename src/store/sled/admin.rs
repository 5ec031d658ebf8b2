//! The embedded backend's admin records, in their own tree `admin`:
//! - `b/<player>` → JSON [`Ban`];
//! - `a/<seq be64>` → JSON [`AuditRecord`];
//! - `n/a` → the last audit sequence number handed out (be64), kept past trimming.
//!
//! The event log lives in the journal tree, so a result's events go in the result's own plain
//! batch (one tree, no transaction): `e/<seq be64>` → JSON [`EventRecord`], `n/e` → the last
//! event sequence number, kept past trimming so a cursor is never reused. Stores written when
//! the log was in the admin tree have it moved at open.
//!
//! Appends take a lock so two appends never pick the same number and the numbers become
//! visible in order. The erasure of a player is one sled transaction over the players, journal,
//! parties and admin trees: its changes are computed first (the caller holds the ledger's admin
//! gate, so no journal entry is written meanwhile) and applied all together; the match history
//! part is read inside the transaction, since a cancelled match's history write can change a
//! shared record's holder count at any time.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use sled::Transactional;
use sled::transaction::{ConflictableTransactionError, TransactionError, TransactionalTree};

use super::super::admin_records::{
    entry_without, event_without, party_names, ranks_without, week_without,
};
use super::super::history::HistoryErasure;
use super::super::{AdminRecords, AuditRecord, Ban, EventRecord, JournalEntry, StoreError};
use super::records::{history_key, history_name, past_key};
use super::{SledStore, decode, decode_seq, encode, journal_key};
use crate::ids::{MatchId, PlayerId};
use crate::ranking::RankPoints;
use crate::ranking::season::SeasonRank;
use crate::records::MatchRecord;
use crate::store::AckRecord;

const ADMIN_TREE: &str = "admin";
const LAST_AUDIT: &[u8] = b"n/a";
const LAST_EVENT: &[u8] = b"n/e";

/// The admin tree, the tree holding the event log (the journal tree) and the lock appends take.
#[derive(Clone)]
pub(super) struct AdminTree {
    tree: sled::Tree,
    events: sled::Tree,
    lock: Arc<Mutex<()>>,
}

impl AdminTree {
    pub(super) fn open(db: &sled::Db, journal: &sled::Tree) -> Result<Self, StoreError> {
        let admin = Self {
            tree: db.open_tree(ADMIN_TREE)?,
            events: journal.clone(),
            lock: Arc::default(),
        };
        admin.move_legacy_events(db)?;
        Ok(admin)
    }

    /// Moves an event log kept in the admin tree (stores written before it moved) to the
    /// journal tree: copied and flushed first, then removed, so a crash in between only
    /// repeats the copy at the next open. When the journal tree holds an event log already (an
    /// older build wrote to a store a later one had moved), the old log's events go after both
    /// logs' last numbers instead (see [`AdminTree::append_legacy_events`]).
    fn move_legacy_events(&self, db: &sled::Db) -> Result<(), StoreError> {
        let old_last = self.last(LAST_EVENT)?;
        if self.last_event()? > 0 {
            return self.append_legacy_events(db, old_last);
        }
        let mut copy = sled::Batch::default();
        let mut remove = sled::Batch::default();
        let mut any = old_last > 0;
        for item in self.tree.scan_prefix(b"e/") {
            let (k, v) = item?;
            copy.insert(k.clone(), v);
            remove.remove(k);
            any = true;
        }
        if !any {
            return Ok(());
        }
        let last = old_last.max(self.last_event()?);
        copy.insert(LAST_EVENT, &last.to_be_bytes());
        remove.remove(LAST_EVENT);
        self.events.apply_batch(copy)?;
        db.flush()?;
        self.tree.apply_batch(remove)?;
        db.flush()?;
        Ok(())
    }

    /// Appends the admin tree's event log to the journal tree's, numbered after the last of
    /// either (`old_last` is the admin tree's), and removes it, in one transaction: both logs
    /// hold events the other lacks, and their numbers overlap. A watcher's cursor comes from
    /// either log and is below every new number, so it misses none of the moved events (it may
    /// see some twice).
    fn append_legacy_events(&self, db: &sled::Db, old_last: u64) -> Result<(), StoreError> {
        let legacy: Vec<(sled::IVec, sled::IVec)> =
            self.tree.scan_prefix(b"e/").collect::<Result<_, _>>()?;
        if legacy.is_empty() && old_last == 0 {
            return Ok(());
        }
        let first = self.last_event()?.max(old_last) + 1;
        let last = first + legacy.len() as u64 - 1;
        (&self.events, &self.tree)
            .transaction(|(events, admin)| {
                for (i, (k, v)) in legacy.iter().enumerate() {
                    events.insert(seq_key(b'e', first + i as u64), v)?;
                    admin.remove(k)?;
                }
                events.insert(LAST_EVENT, &last.max(first - 1).to_be_bytes())?;
                admin.remove(LAST_EVENT)?;
                Ok::<(), ConflictableTransactionError<StoreError>>(())
            })
            .map_err(|e| match e {
                TransactionError::Storage(e) => StoreError::Engine(e),
                TransactionError::Abort(e) => e,
            })?;
        db.flush()?;
        tracing::warn!(
            events = legacy.len(),
            from = first,
            "the store held two event logs (an older build wrote to it after a later one): \
             the older build's events were appended after both"
        );
        Ok(())
    }

    fn lock(&self) -> MutexGuard<'_, ()> {
        self.lock.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn last(&self, key: &[u8]) -> Result<u64, StoreError> {
        Ok(self.tree.get(key)?.map_or(0, |v| super::decode_seq(&v)))
    }

    fn last_event(&self) -> Result<u64, StoreError> {
        Ok(self
            .events
            .get(LAST_EVENT)?
            .map_or(0, |v| super::decode_seq(&v)))
    }

    /// The tree holding the audit log (`a`) or the event log (`e`).
    fn log_tree(&self, prefix: u8) -> &sled::Tree {
        if prefix == b'e' {
            &self.events
        } else {
            &self.tree
        }
    }

    /// Removes the entries of the audit log (`a`) or the event log (`e`) up to sequence
    /// `floor` or older than `before_unix`; how many. Both logs are appended in time order, so
    /// the old entries are a prefix: read one at a time and stop at the first one kept.
    fn trim(&self, prefix: u8, floor: u64, before_unix: f64) -> Result<usize, StoreError> {
        /// What both logs' entries carry: their time.
        #[derive(serde::Deserialize)]
        struct Stamped {
            unix: f64,
        }
        let tree = self.log_tree(prefix);
        let mut batch = sled::Batch::default();
        let mut n = 0;
        for item in tree.range(seq_key(prefix, 0)..=seq_key(prefix, u64::MAX)) {
            let (k, v) = item?;
            let seq = super::decode_seq(&k[2..]);
            if seq > floor {
                let entry: Stamped = decode(&v, &format!("admin {}/{seq}", prefix as char))?;
                if entry.unix >= before_unix {
                    break;
                }
            }
            batch.remove(k);
            n += 1;
        }
        tree.apply_batch(batch)?;
        Ok(n)
    }

    /// A page of the audit log (`a`, admin tree) or the event log (`e`, journal tree).
    fn page<T: serde::de::DeserializeOwned>(
        &self,
        prefix: u8,
        after: u64,
        limit: usize,
    ) -> Result<Vec<(u64, T)>, StoreError> {
        self.log_tree(prefix)
            .range(seq_key(prefix, after.saturating_add(1))..=seq_key(prefix, u64::MAX))
            .take(limit)
            .map(|item| {
                let (k, v) = item?;
                let seq = super::decode_seq(&k[2..]);
                Ok((seq, decode(&v, &format!("admin {}/{seq}", prefix as char))?))
            })
            .collect()
    }
}

impl SledStore {
    /// Applies a journal batch with `events` appended to the event log in the same batch (one
    /// tree), so a result's events are durable exactly when its entry is; the last event
    /// cursor.
    pub(super) fn journal_and_events(
        &self,
        mut journal_batch: sled::Batch,
        events: &[EventRecord],
    ) -> Result<u64, StoreError> {
        if events.is_empty() {
            self.journal.apply_batch(journal_batch)?;
            return self.admin.last_event();
        }
        let _guard = self.admin.lock();
        let mut seq = self.admin.last_event()?;
        for event in events {
            seq += 1;
            journal_batch.insert(seq_key(b'e', seq), encode(event)?);
        }
        journal_batch.insert(LAST_EVENT, &seq.to_be_bytes());
        self.journal.apply_batch(journal_batch)?;
        Ok(seq)
    }
}

fn seq_key(prefix: u8, seq: u64) -> Vec<u8> {
    let mut k = vec![prefix, b'/'];
    k.extend_from_slice(&seq.to_be_bytes());
    k
}

fn ban_key(player: &PlayerId) -> Vec<u8> {
    format!("b/{player}").into_bytes()
}

impl AdminRecords for SledStore {
    fn put_ban(&self, ban: &Ban) -> Result<(), StoreError> {
        self.admin.tree.insert(ban_key(&ban.player), encode(ban)?)?;
        Ok(())
    }

    fn remove_ban(&self, player: &PlayerId) -> Result<bool, StoreError> {
        Ok(self.admin.tree.remove(ban_key(player))?.is_some())
    }

    fn load_bans(&self) -> Result<Vec<Ban>, StoreError> {
        self.admin
            .tree
            .scan_prefix(b"b/")
            .map(|item| {
                let (k, v) = item?;
                decode(&v, &String::from_utf8_lossy(&k))
            })
            .collect()
    }

    fn append_audit(&self, entry: &AuditRecord) -> Result<u64, StoreError> {
        let _guard = self.admin.lock();
        let seq = self.admin.last(LAST_AUDIT)? + 1;
        let mut batch = sled::Batch::default();
        batch.insert(seq_key(b'a', seq), encode(entry)?);
        batch.insert(LAST_AUDIT, &seq.to_be_bytes());
        self.admin.tree.apply_batch(batch)?;
        Ok(seq)
    }

    fn audit_after(&self, after: u64, limit: usize) -> Result<Vec<(u64, AuditRecord)>, StoreError> {
        self.admin.page(b'a', after, limit)
    }

    fn last_audit(&self) -> Result<u64, StoreError> {
        self.admin.last(LAST_AUDIT)
    }

    fn append_events(&self, events: &[EventRecord]) -> Result<u64, StoreError> {
        let _guard = self.admin.lock();
        let mut seq = self.admin.last_event()?;
        if events.is_empty() {
            return Ok(seq);
        }
        let mut batch = sled::Batch::default();
        for event in events {
            seq += 1;
            batch.insert(seq_key(b'e', seq), encode(event)?);
        }
        batch.insert(LAST_EVENT, &seq.to_be_bytes());
        self.admin.events.apply_batch(batch)?;
        Ok(seq)
    }

    fn events_after(
        &self,
        after: u64,
        limit: usize,
    ) -> Result<Vec<(u64, EventRecord)>, StoreError> {
        self.admin.page(b'e', after, limit)
    }

    fn events_before(
        &self,
        before: u64,
        limit: usize,
    ) -> Result<Vec<(u64, EventRecord)>, StoreError> {
        self.admin
            .log_tree(b'e')
            .range(seq_key(b'e', 0)..seq_key(b'e', before))
            .rev()
            .take(limit)
            .map(|item| {
                let (k, v) = item?;
                let seq = super::decode_seq(&k[2..]);
                Ok((seq, decode(&v, &format!("admin e/{seq}"))?))
            })
            .collect()
    }

    fn trim_events(&self, before_unix: f64, keep_at_most: u64) -> Result<usize, StoreError> {
        let floor = self.admin.last_event()?.saturating_sub(keep_at_most);
        self.admin.trim(b'e', floor, before_unix)
    }

    fn trim_audit(&self, before_unix: f64, keep_at_most: u64) -> Result<usize, StoreError> {
        let floor = self.admin.last(LAST_AUDIT)?.saturating_sub(keep_at_most);
        self.admin.trim(b'a', floor, before_unix)
    }

    fn import_log(
        &self,
        audit: &[(u64, AuditRecord)],
        events: &[(u64, EventRecord)],
        last_audit: u64,
        last_event: u64,
    ) -> Result<(), StoreError> {
        let _guard = self.admin.lock();
        let mut batch = sled::Batch::default();
        let mut last_audit = self.admin.last(LAST_AUDIT)?.max(last_audit);
        for (seq, entry) in audit {
            batch.insert(seq_key(b'a', *seq), encode(entry)?);
            last_audit = last_audit.max(*seq);
        }
        batch.insert(LAST_AUDIT, &last_audit.to_be_bytes());
        self.admin.tree.apply_batch(batch)?;
        let mut batch = sled::Batch::default();
        let mut last = self.admin.last_event()?.max(last_event);
        for (seq, event) in events {
            batch.insert(seq_key(b'e', *seq), encode(event)?);
            last = last.max(*seq);
        }
        batch.insert(LAST_EVENT, &last.to_be_bytes());
        self.admin.events.apply_batch(batch)?;
        Ok(())
    }

    fn erase_player(&self, player: &PlayerId, marker: &PlayerId) -> Result<(), StoreError> {
        // The scans run without the locks (they can take seconds on a large store, and the
        // matchmaker loop writes history): the caller holds the ledger's gate, so no result or
        // season change writes meanwhile, and the player is in no match; the transaction
        // rewrites only what is still there.
        let parties: Vec<sled::IVec> = self
            .parties
            .iter()
            .keys()
            .filter_map(|k| {
                k.map(|k| party_names(&String::from_utf8_lossy(&k), player).then_some(k))
                    .transpose()
            })
            .collect::<Result<_, _>>()?;
        let mut journal_set: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        let mut journal_remove: Vec<Vec<u8>> = Vec::new();
        for item in self.journal.range(journal_key(0)..=journal_key(u64::MAX)) {
            let (k, v) = item?;
            let mut entry: JournalEntry = decode(&v, "journal entry")?;
            if entry_without(&mut entry, player, marker) {
                journal_set.push((k.to_vec(), encode(&entry)?));
            }
        }
        // Every result's acknowledgement still kept: only those whose bytes hold the id as a
        // JSON string can name the player, so the rest are not decoded. Their times stay.
        let quoted = encode(player.as_str())?;
        for item in self.journal.scan_prefix(b"r/") {
            let (k, v) = item?;
            if !v.windows(quoted.len()).any(|w| w == quoted.as_slice()) {
                continue;
            }
            let mut record: AckRecord = decode(&v, &String::from_utf8_lossy(&k))?;
            if record.ack.erase(player, marker) {
                journal_set.push((k.to_vec(), encode(&record)?));
            }
        }
        // The event log: only events whose bytes hold the id can name the player (an id with a
        // quote or a backslash is escaped in them: every event is read then).
        let raw = player.as_str().as_bytes();
        let escaped = raw.iter().any(|b| matches!(b, b'"' | b'\\'));
        for item in self
            .journal
            .range(seq_key(b'e', 0)..=seq_key(b'e', u64::MAX))
        {
            let (k, v) = item?;
            if !escaped && !v.windows(raw.len()).any(|w| w == raw) {
                continue;
            }
            let mut event: EventRecord = decode(&v, &String::from_utf8_lossy(&k))?;
            if event_without(&mut event, player, marker) {
                journal_set.push((k.to_vec(), encode(&event)?));
            }
        }
        for item in self.journal.scan_prefix(b"s/w/") {
            let (k, v) = item?;
            let rp: Vec<(PlayerId, RankPoints)> = decode(&v, &String::from_utf8_lossy(&k))?;
            if let Some(kept) = week_without(&rp, player) {
                journal_set.push((k.to_vec(), encode(&kept)?));
            }
        }
        for item in self.journal.scan_prefix(b"s/r/") {
            let (k, v) = item?;
            let ranks: Vec<SeasonRank> = decode(&v, &String::from_utf8_lossy(&k))?;
            if let Some(kept) = ranks_without(&ranks, player) {
                journal_set.push((k.to_vec(), encode(&kept)?));
            }
        }
        // The per-player indexes, pool by pool (every pool with season records has a clock).
        let pools: Vec<String> = self
            .journal
            .scan_prefix(b"s/s/")
            .keys()
            .map(|k| k.map(|k| String::from_utf8_lossy(&k[4..]).into_owned()))
            .collect::<Result<_, _>>()?;
        for pool in &pools {
            for index in ["pw", "pr"] {
                let prefix = format!("s/{index}/{pool}\u{1f}{player}\u{1f}");
                for k in self.journal.scan_prefix(prefix.as_bytes()).keys() {
                    journal_remove.push(k?.to_vec());
                }
            }
        }
        let player_key = player.as_str().as_bytes();
        let ban = ban_key(player);
        // No history write plans against the lists this erasure changes.
        let _history = self.history_lock();
        let _guard = self.admin.lock();
        // Only the player's own pushes add to their past index (and they are in no match);
        // the records other batches drop meanwhile leave it, which the transaction sees.
        let past = self.past_of(player)?;
        (
            &self.players,
            &self.journal,
            &self.parties,
            &self.admin.tree,
        )
            .transaction(|(players, journal, parties_tree, admin)| {
                // The history is read inside the transaction, which holds sled's write lock:
                // no batch changes a holder count between this read and the write.
                erase_history(journal, player, marker, &past)?;
                players.remove(player_key)?;
                for k in &parties {
                    parties_tree.remove(k)?;
                }
                for (k, v) in &journal_set {
                    // An entry or event trimmed since the scan stays gone.
                    if journal.get(k.as_slice())?.is_some() {
                        journal.insert(k.as_slice(), v.as_slice())?;
                    }
                }
                for k in &journal_remove {
                    journal.remove(k.as_slice())?;
                }
                admin.remove(ban.as_slice())?;
                Ok::<(), ConflictableTransactionError<StoreError>>(())
            })
            .map_err(|e| match e {
                TransactionError::Storage(e) => StoreError::Engine(e),
                TransactionError::Abort(e) => e,
            })
    }
}

/// Erases `player` from the match history in the journal tree, within the erasure's
/// transaction (see [`HistoryErasure`]); `past` is their past index as read before it.
fn erase_history(
    journal: &TransactionalTree,
    player: &PlayerId,
    marker: &PlayerId,
    past: &[MatchId],
) -> Result<(), ConflictableTransactionError<StoreError>> {
    let abort = ConflictableTransactionError::Abort;
    let list_key = history_key(b'p', player.as_str());
    let list: Vec<MatchId> = match journal.get(&list_key)? {
        Some(v) => decode(&v, &history_name(&list_key)).map_err(abort)?,
        None => Vec::new(),
    };
    let mut indexed = Vec::with_capacity(past.len());
    for id in past {
        let key = past_key(player, id);
        if journal.get(&key)?.is_some() {
            journal.remove(key)?;
            indexed.push(id.clone());
        }
    }
    let mut refs = HashMap::new();
    let mut records = HashMap::new();
    for id in list.iter().chain(&indexed) {
        let count = journal.get(history_key(b'c', id.as_str()))?;
        refs.insert(id.clone(), count.map_or(0, |c| decode_seq(&c) as u32));
        let key = history_key(b'm', id.as_str());
        if let Some(r) = journal.get(&key)? {
            let r: MatchRecord = decode(&r, &history_name(&key)).map_err(abort)?;
            records.insert(id.clone(), r);
        }
    }
    let plan = HistoryErasure::plan(
        player,
        marker,
        &list,
        &indexed,
        &mut |m| Ok(refs.get(m).copied().unwrap_or(0)),
        &mut |m| Ok(records.get(m).cloned()),
    )
    .map_err(abort)?;
    journal.remove(list_key)?;
    for (other, id) in &plan.unindexed {
        journal.remove(past_key(other, id))?;
    }
    for id in &plan.dropped {
        journal.remove(history_key(b'c', id.as_str()))?;
        journal.remove(history_key(b'm', id.as_str()))?;
    }
    for (id, n) in &plan.refs {
        journal.insert(history_key(b'c', id.as_str()), &u64::from(*n).to_be_bytes())?;
    }
    for r in &plan.rewritten {
        let value = encode(r).map_err(abort)?;
        journal.insert(history_key(b'm', r.match_id.as_str()), value)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::EventKind;

    fn event(n: u64) -> EventRecord {
        EventRecord {
            kind: EventKind::MatchCompleted,
            unix: n as f64,
            match_id: format!("m{n}"),
            player_id: String::new(),
            detail_json: String::new(),
        }
    }

    #[test]
    fn an_event_log_kept_in_the_admin_tree_moves_to_the_journal_tree_at_open() {
        let dir = tempfile::tempdir().unwrap();
        {
            // The layout before the log moved: events and their counter in the admin tree.
            let store = SledStore::open(dir.path(), 1 << 20).unwrap();
            let mut old = sled::Batch::default();
            for n in 1..=3 {
                old.insert(seq_key(b'e', n), encode(&event(n)).unwrap());
            }
            old.insert(LAST_EVENT, &5u64.to_be_bytes());
            store.admin.tree.apply_batch(old).unwrap();
            store.db.flush().unwrap();
        }
        let store = SledStore::open(dir.path(), 1 << 20).unwrap();
        let moved = store.events_after(0, 10).unwrap();
        assert_eq!(moved, (1..=3).map(|n| (n, event(n))).collect::<Vec<_>>());
        assert!(store.admin.tree.scan_prefix(b"e/").next().is_none());
        assert!(store.admin.tree.get(LAST_EVENT).unwrap().is_none());
        // Numbering goes on past the old counter (a trimmed cursor is never reused), and a
        // result's events land in its journal batch.
        let next = store
            .journal_and_events(sled::Batch::default(), &[event(6)])
            .unwrap();
        assert_eq!(next, 6);
        assert_eq!(store.events_after(5, 10).unwrap(), vec![(6, event(6))]);
        drop(store);
        let store = SledStore::open(dir.path(), 1 << 20).unwrap();
        assert_eq!(store.events_after(0, 10).unwrap().len(), 4);
    }

    #[test]
    fn an_older_builds_event_log_beside_the_moved_one_goes_after_it_and_overwrites_nothing() {
        let dir = tempfile::tempdir().unwrap();
        {
            let store = SledStore::open(dir.path(), 1 << 20).unwrap();
            // This build's log: events 1 and 2.
            store.append_events(&[event(1), event(2)]).unwrap();
            // An older build then wrote its own log in the admin tree, numbered from 1 again.
            let mut old = sled::Batch::default();
            for n in 1..=3 {
                old.insert(seq_key(b'e', n), encode(&event(10 + n)).unwrap());
            }
            old.insert(LAST_EVENT, &3u64.to_be_bytes());
            store.admin.tree.apply_batch(old).unwrap();
            store.db.flush().unwrap();
        }
        let store = SledStore::open(dir.path(), 1 << 20).unwrap();
        let events = store.events_after(0, 10).unwrap();
        let expected = vec![
            (1, event(1)),
            (2, event(2)),
            (4, event(11)),
            (5, event(12)),
            (6, event(13)),
        ];
        assert_eq!(
            events, expected,
            "both logs kept, the older build's after both counters"
        );
        assert!(store.admin.tree.scan_prefix(b"e/").next().is_none());
        assert!(store.admin.tree.get(LAST_EVENT).unwrap().is_none());
        assert_eq!(store.append_events(&[event(7)]).unwrap(), 7);
        drop(store);
        // Moved once: a later open changes nothing.
        let store = SledStore::open(dir.path(), 1 << 20).unwrap();
        assert_eq!(store.events_after(0, 10).unwrap().len(), 6);
    }
}

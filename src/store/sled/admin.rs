//! The embedded backend's admin records, in their own tree `admin`:
//! - `b/<player>` → JSON [`Ban`];
//! - `a/<seq be64>` → JSON [`AuditRecord`], `e/<seq be64>` → JSON [`EventRecord`];
//! - `n/a`, `n/e` → the last sequence number handed out (be64), kept past trimming so a cursor
//!   is never reused.
//!
//! Appends take a lock so two appends never pick the same number and the numbers become
//! visible in order. The erasure of a player is one sled transaction over the players, journal,
//! parties and admin trees: its changes are computed first (the caller holds the ledger's admin
//! gate, so no journal entry is written meanwhile) and applied all together.

use std::sync::{Arc, Mutex, MutexGuard};

use sled::Transactional;
use sled::transaction::{ConflictableTransactionError, TransactionError};

use super::super::admin_records::{party_names, ranks_without, week_without};
use super::super::{AdminRecords, AuditRecord, Ban, EventRecord, JournalEntry, StoreError};
use super::{SledStore, decode, encode, journal_key};
use crate::ids::PlayerId;
use crate::ranking::RankPoints;
use crate::ranking::season::SeasonRank;

const ADMIN_TREE: &str = "admin";
const LAST_AUDIT: &[u8] = b"n/a";
const LAST_EVENT: &[u8] = b"n/e";

/// The admin tree and the lock appends take.
#[derive(Clone)]
pub(super) struct AdminTree {
    tree: sled::Tree,
    lock: Arc<Mutex<()>>,
}

impl AdminTree {
    pub(super) fn open(db: &sled::Db) -> Result<Self, StoreError> {
        Ok(Self {
            tree: db.open_tree(ADMIN_TREE)?,
            lock: Arc::default(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, ()> {
        self.lock.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn last(&self, key: &[u8]) -> Result<u64, StoreError> {
        Ok(self.tree.get(key)?.map_or(0, |v| super::decode_seq(&v)))
    }

    fn page<T: serde::de::DeserializeOwned>(
        &self,
        prefix: u8,
        after: u64,
        limit: usize,
    ) -> Result<Vec<(u64, T)>, StoreError> {
        self.tree
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

    fn append_events(&self, events: &[EventRecord]) -> Result<u64, StoreError> {
        let _guard = self.admin.lock();
        let mut seq = self.admin.last(LAST_EVENT)?;
        if events.is_empty() {
            return Ok(seq);
        }
        let mut batch = sled::Batch::default();
        for event in events {
            seq += 1;
            batch.insert(seq_key(b'e', seq), encode(event)?);
        }
        batch.insert(LAST_EVENT, &seq.to_be_bytes());
        self.admin.tree.apply_batch(batch)?;
        Ok(seq)
    }

    fn events_after(
        &self,
        after: u64,
        limit: usize,
    ) -> Result<Vec<(u64, EventRecord)>, StoreError> {
        self.admin.page(b'e', after, limit)
    }

    fn trim_events(&self, before_unix: f64, keep_at_most: u64) -> Result<usize, StoreError> {
        // Events are appended in time order, so the old ones are a prefix: read one at a time
        // and stop at the first one kept.
        let floor = self.admin.last(LAST_EVENT)?.saturating_sub(keep_at_most);
        let mut batch = sled::Batch::default();
        let mut n = 0;
        for item in self
            .admin
            .tree
            .range(seq_key(b'e', 0)..=seq_key(b'e', u64::MAX))
        {
            let (k, v) = item?;
            let seq = super::decode_seq(&k[2..]);
            if seq > floor {
                let event: EventRecord = decode(&v, &format!("admin e/{seq}"))?;
                if event.unix >= before_unix {
                    break;
                }
            }
            batch.remove(k);
            n += 1;
        }
        self.admin.tree.apply_batch(batch)?;
        Ok(n)
    }

    fn erase_player(&self, player: &PlayerId) -> Result<(), StoreError> {
        let _guard = self.admin.lock();
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
            let before = entry.records.len() + entry.parties.len();
            entry.records.retain(|(p, _)| p != player);
            entry.parties.retain(|(k, _)| !party_names(k, player));
            if entry.records.len() + entry.parties.len() != before {
                journal_set.push((k.to_vec(), encode(&entry)?));
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
        (
            &self.players,
            &self.journal,
            &self.parties,
            &self.admin.tree,
        )
            .transaction(|(players, journal, parties_tree, admin)| {
                players.remove(player_key)?;
                for k in &parties {
                    parties_tree.remove(k)?;
                }
                for (k, v) in &journal_set {
                    journal.insert(k.as_slice(), v.as_slice())?;
                }
                for k in &journal_remove {
                    journal.remove(k.as_slice())?;
                }
                admin.remove(ban.as_slice())?;
                Ok::<(), ConflictableTransactionError<()>>(())
            })
            .map_err(|e| match e {
                TransactionError::Storage(e) => StoreError::Engine(e),
                TransactionError::Abort(()) => {
                    StoreError::Engine(sled::Error::Unsupported("player erasure aborted".into()))
                }
            })
    }
}

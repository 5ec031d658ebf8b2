//! The embedded backend: sled 0.34.7, the last stable release (its 1.0 alphas change the API
//! and drop transactions). Every batch method is one atomic sled batch of one tree. A flush is
//! sled's flush followed by `fdatasync` of its data file: on Linux sled makes a flush durable with
//! `sync_file_range`, which survives `kill -9` but not power loss.
//!
//! Known sled issues this module guards against: corruption reported after abrupt container
//! stops and snapshot checksum mismatches (a corrupt directory is refused with a message naming
//! it, never panicked on), and page-cache memory above `cache_capacity` (bounded by config).

mod acks;
mod admin;
mod blobs;
mod export;
mod format;
mod journal;
mod past;
mod sync;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::{
    EventRecord, History, JournalEntry, Segment, Storage, StoreError, StoreFuture, StoredMatch,
    StoredParty, StoredPlayer,
};
use crate::ids::{MatchId, PlayerId};
use crate::ranking::RankPoints;
use crate::ranking::season::{SeasonRank, SeasonState};
use crate::rating::calibration::Calibration;
use crate::records::{PartyRecord, PoolRecord, ResultAck};

mod records;

const META_TREE: &str = "meta";
const PLAYERS_TREE: &str = "players";
/// Result journal: `j/<seq be64>` → entry, and `r/<match id>` → its acknowledgement with its
/// time index (see `acks.rs`), written together in one atomic batch of one tree.
const JOURNAL_TREE: &str = "journal";
/// Live matches, so a game server can report a match formed before a restart. Written in
/// segments of up to [`SEGMENT_BYTES`] per sled value (see `super::segment_bounds`), so a tick that
/// hands thousands of matches to servers is a few hundred inserts, not thousands:
/// - `0x00 ++ <segment id be64>` → JSON array of [`StoredMatch`]; a later segment's copy of a
///   match supersedes an earlier one (a backfill rewrites its match);
/// - `0x01 ++ <match id>` → empty: the match ended without a result (cancelled). One that ended
///   with a result needs no mark: its result stays in the journal tree ([`Storage::result_of`]).
///
/// The server drops a segment once none of its matches is live, and rewrites the survivors into
/// fresh segments at start ([`Storage::compact_matches`]), which also clears the marks. Keys that are
/// bare match ids (one match per key, before segments) still load.
const MATCHES_TREE: &str = "matches";
const SEGMENT_PREFIX: u8 = 0x00;
const ENDED_PREFIX: u8 = 0x01;
/// Party skills: party key → pool → record.
const PARTIES_TREE: &str = "parties";
/// `PartyService` parties: party id → [`PartyRoster`].
const ROSTERS_TREE: &str = "rosters";
/// `meta` key: the journal sequence number the players tree is known to include.
const SNAPSHOT_SEQ: &str = "snapshot_seq";
/// `meta` keys `calibration/<pool>` → JSON [`Calibration`]: each rating pool's calibration.
const CALIBRATION_PREFIX: &str = "calibration/";

/// The open sled store. Cheap to clone (sled handles are reference counted).
#[derive(Clone)]
pub struct SledStore {
    path: PathBuf,
    db: sled::Db,
    meta: sled::Tree,
    players: sled::Tree,
    journal: sled::Tree,
    matches: sled::Tree,
    parties: sled::Tree,
    rosters: sled::Tree,
    /// Bans, the audit log and the event log (see `admin.rs`).
    admin: admin::AdminTree,
    /// sled's data file, to fsync after sled's flush. On Linux sled makes a flush durable with
    /// `sync_file_range`, which writes the pages and waits for them but neither commits the
    /// file's metadata (its grown size) nor flushes the disk's write cache: enough for
    /// `kill -9`, not for power loss. `fdatasync` on any descriptor of the file does both.
    data_file: Arc<std::fs::File>,
    /// The first flush failure, returned by every later flush (see `sync.rs`).
    flush_health: Arc<sync::FlushHealth>,
    /// Our own lock on the directory, held while the store is open (see [`lock_dir`]).
    _lock: Arc<std::fs::File>,
    /// Held by every write of the match history from reading the lists and holder counts it
    /// plans against until its batch is applied (see `records.rs`); taken before the admin
    /// tree's lock.
    history: Arc<std::sync::Mutex<()>>,
    /// The value files sled keeps apart, synced by each flush (see `blobs.rs`).
    blobs: Arc<blobs::SyncedBlobs>,
}

impl SledStore {
    /// Opens (or creates) the store in `dir`, refusing corrupt or foreign directories.
    pub fn open(dir: &Path, cache_capacity_bytes: u64) -> Result<Self, StoreError> {
        let path = dir.to_path_buf();
        if dir.exists() {
            let mut entries = std::fs::read_dir(dir).map_err(|source| StoreError::Io {
                path: path.clone(),
                source,
            })?;
            let non_empty = entries.any(|e| e.is_ok_and(|e| e.file_name() != LOCK_FILE));
            if non_empty && !dir.join("db").exists() {
                return Err(StoreError::Foreign {
                    path,
                    detail: "the directory is not empty and holds no sled database".into(),
                });
            }
        } else {
            std::fs::create_dir_all(dir).map_err(|source| StoreError::Io {
                path: path.clone(),
                source,
            })?;
        }
        let lock = lock_dir(dir)?;
        let db = open_sled(dir, cache_capacity_bytes).map_err(|e| match e {
            sled::Error::Corruption { .. } => StoreError::Corrupt {
                path: path.clone(),
                detail: e.to_string(),
            },
            sled::Error::Io(source) => StoreError::Io {
                path: path.clone(),
                source,
            },
            other => StoreError::Engine(other),
        })?;
        let meta = db.open_tree(META_TREE)?;
        let has_data = || {
            db.tree_names().iter().any(|name| {
                name.as_ref() != META_TREE.as_bytes()
                    && db.open_tree(name).map(|t| !t.is_empty()).unwrap_or(true)
            }) || !db.is_empty()
        };
        let found = format::check(&meta, has_data, &path)?;
        if found == format::Found::New {
            meta.insert(format::KEY, format::marker(format::CURRENT))?;
            Self::mark_past_indexed(&meta)?;
            Self::mark_ack_indexed(&meta)?;
            db.flush()?;
        } else if found == format::Found::Readable(1) {
            format::forget_index_marks(&meta)?;
        }
        let players = db.open_tree(PLAYERS_TREE)?;
        let journal = db.open_tree(JOURNAL_TREE)?;
        let matches = db.open_tree(MATCHES_TREE)?;
        let parties = db.open_tree(PARTIES_TREE)?;
        let rosters = db.open_tree(ROSTERS_TREE)?;
        let admin = admin::AdminTree::open(&db, &journal)?;
        let data_file = std::fs::File::open(dir.join("db")).map_err(|source| StoreError::Io {
            path: dir.join("db"),
            source,
        })?;
        let store = Self {
            data_file: Arc::new(data_file),
            flush_health: Arc::default(),
            blobs: Arc::default(),
            _lock: Arc::new(lock),
            path,
            db,
            meta,
            players,
            journal,
            matches,
            parties,
            rosters,
            admin,
            history: Arc::default(),
        };
        if let Some(added) = store.build_past_indexes()? {
            tracing::info!(
                path = %store.path.display(),
                entries = added,
                "built the match history's past indexes (a store of an earlier release)"
            );
        }
        if let Some(added) = store.build_ack_index()? {
            tracing::info!(path = %store.path.display(), entries = added, "indexed the result acknowledgements by time (a store of an earlier release)");
        }
        if let format::Found::Readable(old) = found
            && old < format::CURRENT
        {
            format::upgrade(&store.db, &store.meta)?;
            tracing::info!(
                path = %store.path.display(),
                from = old,
                to = format::CURRENT,
                "upgraded the store's format marker: an older build now refuses this data dir"
            );
        }
        Ok(store)
    }

    /// Writes one player's pool records (durable after the next flush).
    #[cfg(test)]
    fn put_player(
        &self,
        id: &PlayerId,
        pools: &BTreeMap<String, PoolRecord>,
    ) -> Result<(), StoreError> {
        self.players.insert(id.as_str(), encode(pools)?)?;
        Ok(())
    }

    /// `fdatasync` of the data file and the new blob files; a failure is kept (see `sync.rs`).
    fn sync_data_file(&self) -> Result<(), StoreError> {
        self.flush_health.sync(&self.path, || {
            self.data_file
                .sync_data()
                .map_err(|source| StoreError::Io {
                    path: self.path.join("db"),
                    source,
                })?;
            self.blobs.sync_new(&self.path).map(|_| ())
        })
    }

    /// Writes one raw value (tests of what sled does with large values).
    #[cfg(test)]
    fn put_raw(&self, key: &[u8], value: &[u8]) -> Result<(), StoreError> {
        self.meta.insert(key, value)?;
        Ok(())
    }
}

impl Storage for SledStore {
    fn location(&self) -> String {
        self.path.display().to_string()
    }

    fn player_count(&self) -> usize {
        self.players.len()
    }

    /// Every stored player, in id order.
    fn load_players(&self) -> Result<Box<dyn Iterator<Item = StoredPlayer> + '_>, StoreError> {
        Ok(Box::new(self.players.iter().map(|item| {
            let (k, v) = item?;
            let key = String::from_utf8_lossy(&k).into_owned();
            let pools = serde_json::from_slice(&v).map_err(|e| StoreError::Decode {
                key: key.clone(),
                detail: e.to_string(),
            })?;
            Ok((PlayerId::new(key), pools))
        })))
    }

    /// Writes several players' records in one atomic batch (snapshots).
    fn put_players(
        &self,
        records: &[(&PlayerId, &BTreeMap<String, PoolRecord>)],
    ) -> Result<(), StoreError> {
        let mut batch = sled::Batch::default();
        for (id, pools) in records {
            batch.insert(id.as_str(), encode(pools)?);
        }
        self.players.apply_batch(batch)?;
        Ok(())
    }

    /// Writes party records in one atomic batch.
    fn put_parties(
        &self,
        records: &[(&str, &BTreeMap<String, PartyRecord>)],
    ) -> Result<(), StoreError> {
        let mut batch = sled::Batch::default();
        for (key, pools) in records {
            batch.insert(key.as_bytes(), encode(pools)?);
        }
        self.parties.apply_batch(batch)?;
        Ok(())
    }

    /// Every stored party.
    fn load_parties(&self) -> Result<Vec<StoredParty>, StoreError> {
        self.parties
            .iter()
            .map(|item| {
                let (k, v) = item?;
                let key = String::from_utf8_lossy(&k).into_owned();
                let pools = serde_json::from_slice(&v).map_err(|e| StoreError::Decode {
                    key: format!("parties/{key}"),
                    detail: e.to_string(),
                })?;
                Ok((key, pools))
            })
            .collect()
    }

    /// The journal sequence number the players tree includes (0 = none).
    fn snapshot_seq(&self) -> Result<u64, StoreError> {
        Ok(self.meta.get(SNAPSHOT_SEQ)?.map_or(0, |v| decode_seq(&v)))
    }

    /// Records that the players tree now includes every journal entry up to `seq`, flushes, and
    /// trims those entries from the journal (their idempotency index stays).
    fn finish_snapshot(&self, seq: u64) -> Result<(), StoreError> {
        self.finish_snapshot_with(seq, &[])
    }

    fn finish_snapshot_with(
        &self,
        seq: u64,
        calibrations: &[(&str, &Calibration)],
    ) -> Result<(), StoreError> {
        // One batch: the mark and the calibrations it goes with are durable together.
        let mut marked = calibration_batch(calibrations)?;
        marked.insert(SNAPSHOT_SEQ, &seq.to_be_bytes());
        self.meta.apply_batch(marked)?;
        Storage::flush(self)?;
        let mut batch = sled::Batch::default();
        for item in self.journal.range(journal_key(0)..=journal_key(seq)) {
            let (k, _) = item?;
            batch.remove(k);
        }
        self.journal.apply_batch(batch)?;
        Storage::flush(self)?;
        Ok(())
    }

    /// The highest journal sequence number ever written (0 = none).
    fn last_seq(&self) -> Result<u64, StoreError> {
        let from_journal = self
            .journal
            .range(journal_key(0)..=journal_key(u64::MAX))
            .next_back()
            .transpose()?
            .map_or(0, |(k, _)| decode_seq(&k[2..]));
        Ok(from_journal.max(self.snapshot_seq()?))
    }

    /// Journal entries after `seq`, in order (start-up replay).
    fn journal_after(
        &self,
        seq: u64,
    ) -> Box<dyn Iterator<Item = Result<(u64, JournalEntry), StoreError>> + '_> {
        Box::new(
            self.journal
                .range(journal_key(seq.saturating_add(1))..=journal_key(u64::MAX))
                .map(|item| {
                    let (k, v) = item?;
                    let seq = decode_seq(&k[2..]);
                    let entry = serde_json::from_slice(&v).map_err(|e| StoreError::Decode {
                        key: format!("journal/{seq}"),
                        detail: e.to_string(),
                    })?;
                    Ok((seq, entry))
                }),
        )
    }

    /// The acknowledgement journaled for a match, if its result was ever applied.
    fn result_of(&self, match_id: &MatchId) -> Result<Option<ResultAck>, StoreError> {
        let Some(v) = self.journal.get(result_key(match_id))? else {
            return Ok(None);
        };
        let record: super::AckRecord = decode(&v, &format!("result/{match_id}"))?;
        Ok(Some(record.ack))
    }

    fn trim_acks(&self, before_unix: f64, at_most: usize) -> Result<usize, StoreError> {
        self.trim_ack_batch(before_unix, at_most)
    }

    /// Writes journal entries with consecutive sequence numbers from `first_seq` in one atomic
    /// batch. Not durable until a flush. (Their matches leave the live-match tree when the
    /// state drops their segments; a stale copy is ignored at start because its result is here.)
    fn append_journal(&self, first_seq: u64, entries: &[JournalEntry]) -> Result<(), StoreError> {
        let _history = self.history_lock();
        let batch = self.journal_batch(first_seq, entries)?;
        self.journal.apply_batch(batch)?;
        Ok(())
    }

    fn append_journal_with_events(
        &self,
        first_seq: u64,
        entries: &[JournalEntry],
        events: &[EventRecord],
    ) -> Result<u64, StoreError> {
        let _history = self.history_lock();
        let batch = self.journal_batch(first_seq, entries)?;
        self.journal_and_events(batch, events)
    }

    /// Writes each `(id, matches)` as a segment and drops the segments in `dropped` (no live
    /// match left in them), in one atomic batch. Durable with the next flush (sled flushes every
    /// 500 ms). The matches are [`encode_match`]'s output; split them with [`segment_bounds`].
    fn put_calibrations(&self, states: &[(&str, &Calibration)]) -> Result<(), StoreError> {
        self.meta.apply_batch(calibration_batch(states)?)?;
        Ok(())
    }

    fn load_calibrations(&self) -> Result<Vec<(String, Calibration)>, StoreError> {
        self.meta
            .scan_prefix(CALIBRATION_PREFIX)
            .map(|item| {
                let (k, v) = item?;
                let key = String::from_utf8_lossy(&k).into_owned();
                let pool = key[CALIBRATION_PREFIX.len()..].to_string();
                Ok((pool, decode(&v, &key)?))
            })
            .collect()
    }

    fn put_segments(&self, segments: &[Segment<'_>], dropped: &[u64]) -> Result<(), StoreError> {
        let mut batch = sled::Batch::default();
        for (id, matches) in segments {
            batch.insert(&segment_key(*id), segment_value(matches));
        }
        for d in dropped {
            batch.remove(&segment_key(*d));
        }
        self.matches.apply_batch(batch)?;
        Ok(())
    }

    /// Records matches that ended without a result (so no older copy of them is restored) and
    /// drops the segments in `dropped`, in one atomic batch.
    fn end_matches(&self, ended: &[MatchId], dropped: &[u64]) -> Result<(), StoreError> {
        let mut batch = sled::Batch::default();
        for id in ended {
            batch.insert(ended_key(id), &[]);
        }
        for d in dropped {
            batch.remove(&segment_key(*d));
        }
        self.matches.apply_batch(batch)?;
        Ok(())
    }

    /// Every stored live match, newest copy of each, oldest formed first; without the
    /// ones marked as ended. The caller filters those whose result is journaled. Also returns
    /// the highest segment id seen (0 for none).
    fn load_matches(&self) -> Result<(Vec<StoredMatch>, u64), StoreError> {
        let mut ended = std::collections::HashSet::new();
        let mut newest: Vec<StoredMatch> = Vec::new();
        let mut index: HashMap<MatchId, usize> = HashMap::new();
        let mut last_segment = 0;
        let mut keep = |m: StoredMatch| match index.get(&m.match_id) {
            Some(&i) => newest[i] = m,
            None => {
                index.insert(m.match_id.clone(), newest.len());
                newest.push(m);
            }
        };
        for item in self.matches.iter() {
            let (k, v) = item?;
            let key = || format!("matches/{}", String::from_utf8_lossy(&k));
            match k.first() {
                Some(&SEGMENT_PREFIX) => {
                    let id = k
                        .get(1..9)
                        .and_then(|b| b.try_into().ok())
                        .map(u64::from_be_bytes)
                        .ok_or_else(|| StoreError::Decode {
                            key: key(),
                            detail: "segment key is not 0x00 + 8 bytes".into(),
                        })?;
                    last_segment = last_segment.max(id);
                    let matches: Vec<StoredMatch> = decode(&v, &key())?;
                    matches.into_iter().for_each(&mut keep);
                }
                Some(&ENDED_PREFIX) => {
                    ended.insert(MatchId::from(String::from_utf8_lossy(&k[1..]).as_ref()));
                }
                // A match written one per key, before segments.
                _ => keep(decode(&v, &key())?),
            }
        }
        newest.retain(|m| !ended.contains(&m.match_id));
        newest.sort_by(|a, b| a.formed_unix.total_cmp(&b.formed_unix));
        Ok((newest, last_segment))
    }

    /// Replaces everything in the live-match tree with `segments` (at start, after recovery
    /// decided which matches are still live), in one atomic batch.
    fn compact_matches(&self, segments: &[Segment<'_>]) -> Result<(), StoreError> {
        let mut batch = sled::Batch::default();
        for key in self.matches.iter().keys() {
            batch.remove(key?);
        }
        for (id, matches) in segments {
            batch.insert(&segment_key(*id), segment_value(matches));
        }
        self.matches.apply_batch(batch)?;
        Ok(())
    }

    /// Bytes sled uses on disk.
    fn size_on_disk(&self) -> u64 {
        self.db.size_on_disk().unwrap_or(0)
    }

    /// The season clock of a rating pool (season 1, week 0 before its first reset).
    fn season_state(&self, pool: &str) -> Result<SeasonState, StoreError> {
        self.journal
            .get(state_key(pool))?
            .map_or(Ok(SeasonState::default()), |v| {
                decode(&v, &format!("season state {pool}"))
            })
    }

    /// End-of-week rank points of `pool` recorded in `season`, week by week (player → RP).
    fn week_rp(
        &self,
        pool: &str,
        season: u32,
    ) -> Result<Vec<Vec<(PlayerId, RankPoints)>>, StoreError> {
        let prefix = format!("s/w/{pool}\u{1f}{season:010}/");
        self.journal
            .scan_prefix(prefix.as_bytes())
            .map(|item| {
                let (k, v) = item?;
                decode(&v, &String::from_utf8_lossy(&k))
            })
            .collect()
    }

    /// One player's end-of-week rank points in a pool, oldest first: (season, week, RP).
    fn player_weeks(
        &self,
        pool: &str,
        player: &PlayerId,
    ) -> Result<Vec<(u32, u32, RankPoints)>, StoreError> {
        let prefix = format!("s/pw/{pool}\u{1f}{player}\u{1f}");
        self.journal
            .scan_prefix(prefix.as_bytes())
            .map(|item| {
                let (k, v) = item?;
                let at = parse_suffix_u32s(&k, prefix.len());
                let rp: [u8; 4] = v.as_ref().try_into().map_err(|_| StoreError::Corrupt {
                    path: self.path.clone(),
                    detail: format!(
                        "end-of-week rank points at {:?} are {} bytes, not 4",
                        String::from_utf8_lossy(&k),
                        v.len()
                    ),
                })?;
                Ok((
                    at.first().copied().unwrap_or(0),
                    at.get(1).copied().unwrap_or(0),
                    RankPoints::from_be_bytes(rp),
                ))
            })
            .collect()
    }

    /// One player's season ranks in a pool, oldest season first.
    fn player_season_ranks(
        &self,
        pool: &str,
        player: &PlayerId,
    ) -> Result<Vec<(u32, SeasonRank)>, StoreError> {
        let prefix = format!("s/pr/{pool}\u{1f}{player}\u{1f}");
        self.journal
            .scan_prefix(prefix.as_bytes())
            .map(|item| {
                let (k, v) = item?;
                let season = parse_suffix_u32s(&k, prefix.len())
                    .first()
                    .copied()
                    .unwrap_or(0);
                Ok((season, decode(&v, &String::from_utf8_lossy(&k))?))
            })
            .collect()
    }

    /// Season ranks of `pool` recorded by `EndSeason` for `season`, if any.
    fn season_ranks(&self, pool: &str, season: u32) -> Result<Option<Vec<SeasonRank>>, StoreError> {
        self.journal
            .get(ranks_key(pool, season))?
            .map(|v| decode(&v, &format!("season ranks {pool}/{season}")))
            .transpose()
    }

    fn export_history(&self) -> Result<History, StoreError> {
        self.export_all()
    }

    fn import_history(&self, history: &History) -> Result<(), StoreError> {
        self.import_all(history)
    }

    fn flush(&self) -> Result<(), StoreError> {
        self.flush_health.check(&self.path)?;
        self.db
            .flush()
            .map_err(|e| self.flush_health.failed(e.into()))?;
        self.sync_data_file()
    }

    fn flush_async(&self) -> StoreFuture<'_, ()> {
        Box::pin(async move {
            self.flush_health.check(&self.path)?;
            self.db
                .flush_async()
                .await
                .map_err(|e| self.flush_health.failed(e.into()))?;
            let store = self.clone();
            tokio::task::spawn_blocking(move || store.sync_data_file()).await??;
            Ok(())
        })
    }
}

/// A `meta` batch writing each pool's calibration.
fn calibration_batch(states: &[(&str, &Calibration)]) -> Result<sled::Batch, StoreError> {
    let mut batch = sled::Batch::default();
    for (pool, state) in states {
        batch.insert(
            format!("{CALIBRATION_PREFIX}{pool}").as_bytes(),
            encode(state)?,
        );
    }
    Ok(batch)
}

/// `s/pw/<pool>␟<player>␟<season>/<week>` → that player's end-of-week RP (big-endian u32).
fn player_week_key(pool: &str, player: &PlayerId, season: u32, week: u32) -> Vec<u8> {
    format!("s/pw/{pool}\u{1f}{player}\u{1f}{season:010}/{week:010}").into_bytes()
}

/// `s/pr/<pool>␟<player>␟<season>` → that player's season rank.
fn player_rank_key(pool: &str, player: &str, season: u32) -> Vec<u8> {
    format!("s/pr/{pool}\u{1f}{player}\u{1f}{season:010}").into_bytes()
}

fn parse_suffix_u32s(key: &[u8], prefix_len: usize) -> Vec<u32> {
    String::from_utf8_lossy(&key[prefix_len..])
        .split('/')
        .filter_map(|n| n.parse().ok())
        .collect()
}

fn state_key(pool: &str) -> Vec<u8> {
    format!("s/s/{pool}").into_bytes()
}

fn week_key(pool: &str, season: u32, week: u32) -> Vec<u8> {
    format!("s/w/{pool}\u{1f}{season:010}/{week:010}").into_bytes()
}

fn ranks_key(pool: &str, season: u32) -> Vec<u8> {
    format!("s/r/{pool}\u{1f}{season:010}").into_bytes()
}

fn decode<T: serde::de::DeserializeOwned>(bytes: &[u8], key: &str) -> Result<T, StoreError> {
    serde_json::from_slice(bytes).map_err(|e| StoreError::Decode {
        key: key.to_owned(),
        detail: e.to_string(),
    })
}

/// JSON encoding of a value a journal batch holds.
fn encode<T: serde::Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, StoreError> {
    Ok(serde_json::to_vec(value)?)
}

/// The file in the data dir that [`lock_dir`] locks.
const LOCK_FILE: &str = "matchmaker.lock";
/// How long opening waits for a lock a closing handle still holds: 200 × 50 ms. A handle
/// released in a loaded machine's time, or a server that exits as this one starts, is waited
/// for; only a directory really in use is refused, 10 s later.
const LOCK_ATTEMPTS: u32 = 200;
const LOCK_RETRY: std::time::Duration = std::time::Duration::from_millis(50);

/// Takes the data dir's advisory lock, so a second server on the same directory is refused
/// with a clear error. Waits up to 10 s: a server just stopped (or a handle this process just
/// dropped) releases it a moment later.
fn lock_dir(dir: &Path) -> Result<std::fs::File, StoreError> {
    let path = dir.join(LOCK_FILE);
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|source| StoreError::Io {
            path: path.clone(),
            source,
        })?;
    for attempt in 1..=LOCK_ATTEMPTS {
        match file.try_lock() {
            Ok(()) => return Ok(file),
            Err(std::fs::TryLockError::WouldBlock) if attempt < LOCK_ATTEMPTS => {
                std::thread::sleep(LOCK_RETRY);
            }
            Err(std::fs::TryLockError::WouldBlock) => break,
            Err(std::fs::TryLockError::Error(source)) => {
                return Err(StoreError::Io { path, source });
            }
        }
    }
    Err(StoreError::Locked {
        path: dir.to_path_buf(),
    })
}

/// Opens sled. We hold the directory's lock, so sled's own lock can only be held by a handle of
/// this process that is closing: sled releases it from its flusher thread a moment after the
/// handle is dropped, and reports it as an I/O error of kind `Other`. Such an error is retried
/// for up to 10 s.
fn open_sled(dir: &Path, cache_capacity_bytes: u64) -> sled::Result<sled::Db> {
    let mut attempt = 1;
    loop {
        match sled::Config::new()
            .path(dir)
            .cache_capacity(cache_capacity_bytes)
            .open()
        {
            Err(sled::Error::Io(e))
                if e.kind() == std::io::ErrorKind::Other && attempt < LOCK_ATTEMPTS =>
            {
                attempt += 1;
                std::thread::sleep(LOCK_RETRY);
            }
            other => return other,
        }
    }
}

/// One small write and one flush at a time on a scratch sled database in `dir`: the rate of
/// durable writes without batching.
pub(super) async fn single_write_flush_rate(dir: &Path, writes: usize) -> Result<f64, StoreError> {
    let db = sled::open(dir)?;
    let started = std::time::Instant::now();
    for i in 0..writes {
        db.insert((i as u64).to_be_bytes(), &[0u8; 256][..])?;
        db.flush_async().await?;
    }
    Ok(writes as f64 / started.elapsed().as_secs_f64())
}

/// A segment's value: the JSON array of its encoded matches.
fn segment_value(matches: &[Vec<u8>]) -> Vec<u8> {
    let mut value = Vec::with_capacity(2 + matches.iter().map(|m| m.len() + 1).sum::<usize>());
    value.push(b'[');
    for (i, m) in matches.iter().enumerate() {
        if i > 0 {
            value.push(b',');
        }
        value.extend_from_slice(m);
    }
    value.push(b']');
    value
}

fn segment_key(id: u64) -> [u8; 9] {
    let mut key = [SEGMENT_PREFIX; 9];
    key[1..].copy_from_slice(&id.to_be_bytes());
    key
}

fn ended_key(id: &MatchId) -> Vec<u8> {
    let mut key = Vec::with_capacity(1 + id.as_str().len());
    key.push(ENDED_PREFIX);
    key.extend_from_slice(id.as_str().as_bytes());
    key
}

fn journal_key(seq: u64) -> Vec<u8> {
    let mut k = Vec::with_capacity(10);
    k.extend_from_slice(b"j/");
    k.extend_from_slice(&seq.to_be_bytes());
    k
}

fn result_key(match_id: &MatchId) -> Vec<u8> {
    let mut k = b"r/".to_vec();
    k.extend_from_slice(match_id.as_str().as_bytes());
    k
}

fn decode_seq(bytes: &[u8]) -> u64 {
    let mut buf = [0u8; 8];
    let n = bytes.len().min(8);
    buf[..n].copy_from_slice(&bytes[..n]);
    u64::from_be_bytes(buf)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::contract::{encoded, record, stored};
    use crate::store::{SEGMENT_BYTES, encode_match, segment_bounds};

    #[test]
    fn a_match_stored_one_per_key_before_segments_still_loads_and_compacts_away() {
        let dir = tempfile::tempdir().unwrap();
        {
            let store = SledStore::open(dir.path(), 1 << 20).unwrap();
            store
                .matches
                .insert("m0", serde_json::to_vec(&stored("m0", "old", 0.5)).unwrap())
                .unwrap();
            store
                .put_segments(&[(1, &encoded(&[stored("m1", "s1", 1.0)]))], &[])
                .unwrap();
            Storage::flush(&store).unwrap();
        }
        let store = SledStore::open(dir.path(), 1 << 20).unwrap();
        let (live, last) = store.load_matches().unwrap();
        let ids: Vec<&str> = live.iter().map(|m| m.match_id.as_str()).collect();
        assert_eq!(ids, ["m0", "m1"]);
        assert_eq!(last, 1);
        store.compact_matches(&[(2, &encoded(&live))]).unwrap();
        assert_eq!(store.matches.len(), 1, "one segment, no per-match key");
        assert_eq!(store.load_matches().unwrap(), (live, 2));
    }

    #[test]
    fn a_segment_value_is_exactly_the_json_array_of_its_matches() {
        let ms = [stored("m1", "a", 1.0), stored("m2", "b", 1.0)];
        assert_eq!(
            segment_value(&encoded(&ms)),
            serde_json::to_vec(&ms[..]).unwrap()
        );
        let sizes: Vec<usize> = encoded(&ms).iter().map(Vec::len).collect();
        for r in segment_bounds(&sizes) {
            assert!(segment_value(&encoded(&ms[r])).len() <= SEGMENT_BYTES);
        }
    }

    #[test]
    fn a_second_open_of_a_directory_in_use_is_refused_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let _first = SledStore::open(dir.path(), 1 << 20).unwrap();
        let e = SledStore::open(dir.path(), 1 << 20).err().unwrap();
        assert!(matches!(e, StoreError::Locked { .. }), "{e}");
        assert!(e.to_string().contains("another matchmaker"), "{e}");
    }

    #[test]
    fn a_directory_is_free_again_once_its_store_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let store = SledStore::open(dir.path(), 1 << 20).unwrap();
        store
            .put_player(&PlayerId::from("p1"), &record(1612.5))
            .unwrap();
        Storage::flush(&store).unwrap();
        drop(store);
        let again = SledStore::open(dir.path(), 1 << 20).unwrap();
        assert_eq!(again.player_count(), 1);
    }

    /// sled writes a page over 128 KB to a file of its own. Segments within the budget keep every
    /// leaf page in the log, even for 5v5 matches (~1 KB each) written a tick's worth at a time
    /// and dropped as results come in.
    #[test]
    fn live_match_segments_never_become_sled_blob_files() {
        let dir = tempfile::tempdir().unwrap();
        let store = SledStore::open(dir.path(), 1 << 20).unwrap();
        let big = |i: usize| StoredMatch {
            teams: (0..2)
                .map(|t| {
                    (0..5)
                        .map(|p| {
                            PlayerId::from(
                                format!("player-{i:08}-{t}-{p}-{}", "x".repeat(60)).as_str(),
                            )
                        })
                        .collect()
                })
                .collect(),
            ..stored(&format!("m-{i:08}"), "10.0.0.1:7777", 1.0)
        };
        let mut next_segment = 1u64;
        // (segment, matches in it), oldest first.
        let mut live: std::collections::VecDeque<(u64, usize)> = Default::default();
        for tick in 0..40 {
            let matches: Vec<Vec<u8>> = (0..250)
                .map(|i| encode_match(&big(tick * 250 + i)).unwrap())
                .collect();
            assert!(matches[0].len() > 900, "a 5v5 match: {}", matches[0].len());
            let sizes: Vec<usize> = matches.iter().map(Vec::len).collect();
            let segments: Vec<Segment<'_>> = segment_bounds(&sizes)
                .into_iter()
                .map(|r| {
                    next_segment += 1;
                    live.push_back((next_segment, r.len()));
                    (next_segment, &matches[r])
                })
                .collect();
            // Results end the oldest matches as new ones come in.
            let dropped: Vec<u64> = (0..segments.len().min(live.len().saturating_sub(400)))
                .filter_map(|_| live.pop_front().map(|(id, _)| id))
                .collect();
            store.put_segments(&segments, &dropped).unwrap();
        }
        Storage::flush(&store).unwrap();
        let blobs = std::fs::read_dir(dir.path().join("blobs"))
            .map(|d| d.count())
            .unwrap_or(0);
        assert_eq!(blobs, 0, "sled blob files written for match segments");
        let (loaded, _) = store.load_matches().unwrap();
        assert_eq!(loaded.len(), live.iter().map(|(_, n)| n).sum::<usize>());
    }

    #[test]
    fn a_foreign_directory_is_refused_with_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("notes.txt"), "hello").unwrap();
        let e = SledStore::open(dir.path(), 1 << 20)
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("not a matchmaker store"), "{e}");
    }

    #[test]
    fn a_sled_database_of_another_program_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        {
            let db = sled::open(dir.path()).unwrap();
            db.insert("k", "v").unwrap();
            db.flush().unwrap();
        }
        let e = SledStore::open(dir.path(), 1 << 20)
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("format marker"), "{e}");
    }

    #[test]
    fn a_short_end_of_week_value_is_an_error_not_a_panic() {
        let dir = tempfile::tempdir().unwrap();
        let store = SledStore::open(dir.path(), 1 << 20).unwrap();
        let p = PlayerId::from("p");
        store
            .journal
            .insert(player_week_key("1v1", &p, 1, 0), &700u32.to_be_bytes())
            .unwrap();
        assert_eq!(store.player_weeks("1v1", &p).unwrap(), vec![(1, 0, 700)]);
        store
            .journal
            .insert(player_week_key("1v1", &p, 1, 1), &[1u8, 2][..])
            .unwrap();
        let e = store.player_weeks("1v1", &p).unwrap_err().to_string();
        assert!(e.contains("2 bytes, not 4"), "{e}");
    }

    #[test]
    fn a_corrupt_database_is_refused_not_panicked_on() {
        let dir = tempfile::tempdir().unwrap();
        {
            let store = SledStore::open(dir.path(), 1 << 20).unwrap();
            store
                .put_player(&PlayerId::from("p1"), &record(1612.5))
                .unwrap();
            Storage::flush(&store).unwrap();
        }
        // Overwrite the middle of the data file with garbage.
        let db_file = dir.path().join("db");
        let mut bytes = std::fs::read(&db_file).unwrap();
        for b in bytes.iter_mut().skip(16) {
            *b = 0xA5;
        }
        std::fs::write(&db_file, bytes).unwrap();
        for entry in std::fs::read_dir(dir.path()).unwrap() {
            let p = entry.unwrap().path();
            if p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("snap.")
            {
                std::fs::remove_file(p).unwrap();
            }
        }
        match SledStore::open(dir.path(), 1 << 20) {
            Err(e) => {
                let msg = e.to_string();
                assert!(msg.contains("data dir") || msg.contains("store"), "{msg}");
            }
            Ok(store) => {
                // sled may recover to an empty prefix; then the record must not be half-read.
                assert!(
                    store.load_players().map(|it| it.count()).unwrap_or(0) <= 1,
                    "a recovered store holds at most the one record"
                );
            }
        }
    }
}

//! Durable storage behind one narrow interface, [`Storage`]: player and party records, the
//! result journal with its idempotency index and season bookkeeping, and live matches. The
//! in-memory state reaches the disk only through it, so a second backend (a networked store for
//! several nodes) implements this trait and nothing above it changes.
//!
//! The embedded backend is sled 0.34 (`sled.rs`); nothing outside this module names it.
//!
//! What every backend must guarantee (checked by the contract tests in `contract.rs`, which run
//! against every backend):
//! - a write is durable once a later [`Storage::flush`] or [`Storage::flush_async`] returned;
//! - each batch method is atomic: all of it is durable or none;
//! - journal entries and their acknowledgements (`r/<match>`) and season writes are one batch;
//! - an acknowledgement is kept until [`Storage::trim_acks`] drops it (see `acks.rs`);
//! - reads see every write made before them, flushed or not.

mod acks;
mod admin_records;
mod cluster_config;
mod committer;
#[cfg(test)]
mod contract;
pub mod event_clock;
mod history;
mod memory;
mod redis_store;
mod sled;
pub mod write_failures;

use std::collections::BTreeMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use acks::{ACK_TRIM_BATCH, AckRecord, MIN_ACK_RETENTION_SECONDS, ResultsConfig};
pub use admin_records::{
    AdminRecords, AuditConfig, AuditRecord, Ban, EventKind, EventRecord, EventsConfig, party_names,
};
pub use cluster_config::{ClusterConfig, ShardConfig, redact};
pub use committer::{CommitError, Committed, Committer, JournalStopped};
pub use history::page_after;
pub use memory::MemoryStore;
#[cfg(test)]
pub(crate) use memory::{FailingWrite, FlushFailure};
pub use redis_store::{
    DEFAULT_KEYSPACE, Durability, Followed, Keys, Moved, Patience, RedisCluster, RedisConn,
    RedisOptions, RedisSentinels, RedisServer, RedisStore, RedisTls, SENTINEL_SERVICE, Standby,
    check_durability, check_keyspace, check_placement,
};

use crate::ids::{MatchId, PartyId, PlayerId, TicketId};
use crate::ranking::RankPoints;
use crate::ranking::season::{SeasonRank, SeasonState};
use crate::rating::calibration::{Calibration, Observation};
use crate::records::{MatchRecord, PartyRecord, PartyRoster, PoolRecord, ResultAck};

/// `[store]`: the embedded store's settings.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoreConfig {
    /// sled's page cache in bytes (its resident memory can reach a few times this).
    pub cache_capacity_bytes: u64,
    /// Seconds between snapshots of every player record (each trims the journal).
    pub snapshot_interval_seconds: u64,
    /// Results waiting for the group-commit task before `ReportMatchResult` waits.
    pub journal_buffer: usize,
}

/// A fail-stop storage problem (disk, corruption, a data dir that is not ours).
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("data dir {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "data dir {path} is corrupt ({detail}); restore it from a backup or move it away to start empty"
    )]
    Corrupt { path: PathBuf, detail: String },
    #[error("data dir {path} is not a matchmaker store ({detail}); point --data-dir elsewhere")]
    Foreign { path: PathBuf, detail: String },
    /// The data was written by a later release, in a format this build does not read.
    #[error(
        "{location} was written by a later release (format {found}; this build reads {reads} and older): run that release or a later one, or restore the backup taken before upgrading"
    )]
    Newer {
        location: String,
        found: String,
        reads: String,
    },
    #[error("data dir {path} is in use: is another matchmaker running on it?")]
    Locked { path: PathBuf },
    #[error("store: {0}")]
    Engine(#[from] ::sled::Error),
    #[error("store: cannot encode a record: {0}")]
    Encode(#[from] serde_json::Error),
    #[error("store record {key:?} cannot be decoded: {detail}")]
    Decode { key: String, detail: String },
    #[error("store: a background write failed: {0}")]
    Task(#[from] tokio::task::JoinError),
    /// Redis unreachable, refusing, or misconfigured (the message names the URL, no password).
    #[error("redis {0}")]
    Redis(String),
    /// Another node holds the queues' lease now: this node's writes are refused for good.
    #[error("store fenced: another node owns the queues now, so this node's writes are refused")]
    Fenced,
    /// The store cannot do this yet (it is still building what it needs): retry later.
    #[error("{0}")]
    NotYet(String),
}

/// One decoded player record: its id and its per-pool standing.
/// Visits one player's records (see [`Storage::visit_players`]): their id, and each
/// (pool, record) in pool-name order.
pub type PlayerVisit<'a> = dyn FnMut(&PlayerId, &[(String, PoolRecord)]) + 'a;
pub type StoredPlayer = Result<(PlayerId, BTreeMap<String, PoolRecord>), StoreError>;

/// One party's records: its key and its per-pool record.
pub type StoredParty = (String, BTreeMap<String, PartyRecord>);

/// A boxed future, for the one asynchronous method of [`Storage`].
/// What claiming players across shards found ([`Storage::claim_players`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Claim {
    /// Every player is this shard's now: these were newly claimed (the others were already).
    Claimed(Vec<PlayerId>),
    /// `player` is held by the shard in `keyspace`: queued or in a match there.
    Elsewhere { player: PlayerId, keyspace: String },
}

pub type StoreFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send + 'a>>;

/// Most bytes of encoded matches in one segment (one match bigger than this gets a segment of
/// its own). sled writes any page over 128 KB (a quarter of its 512 KB log segment) to a blob
/// file of its own, and a leaf page holds up to 17 values before it splits, so values must stay
/// under ~7.5 KB for a leaf to stay in the log. With 64 matches per segment (~16 KB of 1v1, ~64
/// KB of 5v5) nearly every leaf rewrite and split created, wrote and later deleted a file: 7.5%
/// of the matchmaker loop's CPU under EnterQueue load.
pub const SEGMENT_BYTES: usize = 6 * 1024;
/// A segment to write: its id and its matches, each encoded by [`encode_match`].
pub type Segment<'a> = (u64, &'a [Vec<u8>]);

/// The storage interface. Methods are synchronous and short (the embedded backend answers from
/// its page cache); [`Storage::flush_async`] is the one wait for the disk. The records clients
/// read back (match history, party rosters) are [`RecordStorage`]'s, the admin side's (bans,
/// audit log, events, erasure) [`AdminRecords`]'.
pub trait Storage: RecordStorage + AdminRecords + Send + Sync + 'static {
    /// Where the data lives, for messages (a directory, a URL).
    fn location(&self) -> String;

    /// Unix seconds now on the clock this store's times are stamped with, wherever another
    /// process may compare them with its own now (a waiting ticket's entry, read back by the
    /// next owner of a cluster's queues). A cluster store answers Redis's clock, which every
    /// node shares, so a node whose own clock is off or steps stamps and reads the same times
    /// as the others; the embedded stores answer this machine's wall clock.
    fn now_unix(&self) -> f64 {
        wall_clock_unix()
    }

    // Players and parties.

    /// Every stored player, in id order.
    fn load_players(&self) -> Result<Box<dyn Iterator<Item = StoredPlayer> + '_>, StoreError>;
    /// Hands every stored player to `visit`, in id order, with their records in pool-name
    /// order: [`Self::load_players`] without a copy of each record where the store holds them
    /// in memory (a server's start-up loads millions).
    fn visit_players(&self, visit: &mut PlayerVisit<'_>) -> Result<(), StoreError> {
        for player in self.load_players()? {
            let (id, pools) = player?;
            let pools: Vec<(String, PoolRecord)> = pools.into_iter().collect();
            visit(&id, &pools);
        }
        Ok(())
    }
    /// Writes several players' records in one atomic batch (snapshots).
    fn put_players(
        &self,
        records: &[(&PlayerId, &BTreeMap<String, PoolRecord>)],
    ) -> Result<(), StoreError>;
    /// Number of stored players.
    fn player_count(&self) -> usize;
    /// Every stored party.
    fn load_parties(&self) -> Result<Vec<StoredParty>, StoreError>;
    /// Writes party records in one atomic batch.
    fn put_parties(
        &self,
        records: &[(&str, &BTreeMap<String, PartyRecord>)],
    ) -> Result<(), StoreError>;

    // The result journal.

    /// Writes journal entries with consecutive sequence numbers from `first_seq` in one atomic
    /// batch, with each result's acknowledgement (the idempotency index) and each entry's
    /// season writes. Not durable until a flush.
    fn append_journal(&self, first_seq: u64, entries: &[JournalEntry]) -> Result<(), StoreError>;
    /// [`Storage::append_journal`] and [`AdminRecords::append_events`] in one atomic batch, so
    /// a result's events are durable exactly when its entry is (a crash never keeps a result
    /// and loses its events). Returns the last event cursor. Not durable until a flush.
    fn append_journal_with_events(
        &self,
        first_seq: u64,
        entries: &[JournalEntry],
        events: &[EventRecord],
    ) -> Result<u64, StoreError> {
        self.append_journal(first_seq, entries)?;
        self.append_events(events)
    }
    /// Journal entries after `seq`, in order (start-up replay).
    fn journal_after(
        &self,
        seq: u64,
    ) -> Box<dyn Iterator<Item = Result<(u64, JournalEntry), StoreError>> + '_>;
    /// The highest journal sequence number ever written (0 = none).
    fn last_seq(&self) -> Result<u64, StoreError>;
    /// The journal sequence number the players' records include (0 = none).
    fn snapshot_seq(&self) -> Result<u64, StoreError>;
    /// Records that the players' records now include every journal entry up to `seq`, makes
    /// that durable, then trims those entries (their acknowledgements and season writes stay).
    fn finish_snapshot(&self, seq: u64) -> Result<(), StoreError>;
    /// [`Storage::finish_snapshot`], with the pools' calibrations as of `seq` written in the
    /// same atomic step as the mark: a calibration is folded result by result, so one that
    /// already counted the entries up to `seq` while the mark still named an earlier one
    /// would count them again when they are replayed. Backends that cannot crash may write
    /// them one after the other.
    fn finish_snapshot_with(
        &self,
        seq: u64,
        calibrations: &[(&str, &Calibration)],
    ) -> Result<(), StoreError> {
        self.put_calibrations(calibrations)?;
        self.finish_snapshot(seq)
    }
    /// The acknowledgement journaled for a match, if its result was applied and the
    /// acknowledgement is not trimmed yet.
    fn result_of(&self, match_id: &MatchId) -> Result<Option<ResultAck>, StoreError>;
    /// Drops the acknowledgements kept since before `before_unix` (see
    /// [`AckRecord::kept_since`]: when their result was applied), oldest first, at most
    /// `at_most` of them, in one atomic batch; how many. Not durable until a flush.
    fn trim_acks(&self, before_unix: f64, at_most: usize) -> Result<usize, StoreError>;

    // Seasons (written by admin entries of the journal).

    /// The season clock of a rating pool (season 1, week 0 before its first reset).
    fn season_state(&self, pool: &str) -> Result<SeasonState, StoreError>;
    /// End-of-week rank points of `pool` recorded in `season`, week by week.
    fn week_rp(
        &self,
        pool: &str,
        season: u32,
    ) -> Result<Vec<Vec<(PlayerId, RankPoints)>>, StoreError>;
    /// One player's end-of-week rank points in a pool, oldest first: (season, week, RP).
    fn player_weeks(
        &self,
        pool: &str,
        player: &PlayerId,
    ) -> Result<Vec<(u32, u32, RankPoints)>, StoreError>;
    /// One player's season ranks in a pool, oldest season first.
    fn player_season_ranks(
        &self,
        pool: &str,
        player: &PlayerId,
    ) -> Result<Vec<(u32, SeasonRank)>, StoreError>;
    /// Season ranks of `pool` recorded by `EndSeason` for `season`, if any.
    fn season_ranks(&self, pool: &str, season: u32) -> Result<Option<Vec<SeasonRank>>, StoreError>;

    // Calibration: one value per rating pool.

    /// Writes each pool's calibration state in one atomic batch (snapshots), replacing the
    /// pool's previous value.
    fn put_calibrations(&self, states: &[(&str, &Calibration)]) -> Result<(), StoreError>;
    /// Every stored pool calibration, in pool order.
    fn load_calibrations(&self) -> Result<Vec<(String, Calibration)>, StoreError>;

    // Live matches, in segments (see [`segment_bounds`]).

    /// Writes each `(id, matches)` as a segment and drops the segments in `dropped`, in one
    /// atomic batch. A later segment's copy of a match supersedes an earlier one.
    fn put_segments(&self, segments: &[Segment<'_>], dropped: &[u64]) -> Result<(), StoreError>;
    /// Marks matches that ended without a result (so no older copy of them is restored) and
    /// drops the segments in `dropped`, in one atomic batch.
    fn end_matches(&self, ended: &[MatchId], dropped: &[u64]) -> Result<(), StoreError>;
    /// Every stored live match, newest copy of each, oldest formed first, without the ones
    /// marked as ended; and the highest segment id seen (0 for none). The caller filters those
    /// whose result is journaled.
    fn load_matches(&self) -> Result<(Vec<StoredMatch>, u64), StoreError>;
    /// Replaces every live match and mark with `segments`, in one atomic batch.
    fn compact_matches(&self, segments: &[Segment<'_>]) -> Result<(), StoreError>;

    // Waiting tickets (cluster stores only: the embedded server keeps them in memory, and a
    // restart ends them).

    /// Whether this backend keeps waiting tickets. When it does, `EnterQueue` answers only once
    /// the ticket is durable, and a new owner of the queues continues with the stored tickets.
    fn keeps_tickets(&self) -> bool {
        false
    }
    /// Writes a waiting ticket (replacing one with the same id). Not durable until a flush.
    fn put_ticket(&self, _ticket: &StoredTicket) -> Result<(), StoreError> {
        Ok(())
    }
    /// Drops tickets that stopped waiting (matched, cancelled, expired), in one atomic batch.
    fn remove_tickets(&self, _ids: &[TicketId]) -> Result<(), StoreError> {
        Ok(())
    }
    /// Every stored waiting ticket, oldest first.
    fn load_tickets(&self) -> Result<Vec<StoredTicket>, StoreError> {
        Ok(Vec::new())
    }

    // Claims on players across shards (a cluster whose queues are split over shards: each
    // shard's store claims the players it queues, so no other shard queues them meanwhile).

    /// Whether this store claims players across shards.
    fn claims_players(&self) -> bool {
        false
    }
    /// Claims `players` for this store's shard, each unless another shard holds it: the
    /// players newly claimed, or the first held elsewhere (those claimed before it stay
    /// claimed until [`Storage::release_claims`]).
    fn claim_players<'a>(&'a self, _players: &'a [PlayerId]) -> StoreFuture<'a, Claim> {
        Box::pin(async { Ok(Claim::Claimed(Vec::new())) })
    }
    /// Gives up this shard's claims on `players` (idle here now).
    fn release_claims<'a>(&'a self, _players: &'a [PlayerId]) -> StoreFuture<'a, ()> {
        Box::pin(async { Ok(()) })
    }
    /// Every player this shard may hold a claim on (the index its claims keep, which a claim
    /// joins before it is made and leaves after it is given up).
    fn claimed_players(&self) -> StoreFuture<'_, Vec<PlayerId>> {
        Box::pin(async { Ok(Vec::new()) })
    }
    /// Those of `players` that some shard of the deployment holds a claim on (queued or
    /// playing there, or idle there and about to be given up), in `players`' order: the home
    /// shard keeps a party whose members wait or play in another shard from expiring. Empty
    /// for a store that does not claim players.
    fn players_held<'a>(&'a self, _players: &'a [PlayerId]) -> StoreFuture<'a, Vec<PlayerId>> {
        Box::pin(async { Ok(Vec::new()) })
    }
    /// Party `id`'s roster as the home shard keeps it durably, for the store of another shard
    /// (which keeps no rosters: `PartyService` is the home shard's, and answers only once a
    /// change is durable). `None` when the home shard has no such party, and always for the
    /// home shard's own store and for a store that does not claim players: their rosters are
    /// the state's own.
    fn home_roster<'a>(&'a self, _id: &'a PartyId) -> StoreFuture<'a, Option<PartyRoster>> {
        Box::pin(async { Ok(None) })
    }
    /// Notes, in the home shard's keyspace and for `keep`, that party `id` entered a queue of
    /// this shard now: the home shard counts it as the party's activity, as one node counts its
    /// entry ([`Storage::parties_entered`]). Nothing for the home shard's own store and for a
    /// store that does not claim players.
    fn note_party_entry<'a>(&'a self, _id: &'a PartyId, _keep: Duration) -> StoreFuture<'a, ()> {
        Box::pin(async { Ok(()) })
    }
    /// For the home shard's store: when each of `ids` last entered a queue of another shard
    /// (this store's clock, Unix seconds), as [`Storage::note_party_entry`] noted it within its
    /// time to live; `None` where none did.
    fn parties_entered<'a>(&'a self, ids: &'a [PartyId]) -> StoreFuture<'a, Vec<Option<f64>>> {
        Box::pin(async move { Ok(vec![None; ids.len()]) })
    }

    // Queue settings a reload applied (cluster stores only: an embedded server's config file is
    // the only one there is).

    /// Keeps the queue settings an accepted reload applied, so the next owner of the queues
    /// starts with them. Not durable until a flush.
    fn put_reloaded_queues(&self, _reload: &ReloadedQueues) -> Result<(), StoreError> {
        Ok(())
    }
    /// The queue settings the last accepted reload applied, if this store keeps them.
    fn reloaded_queues(&self) -> Option<ReloadedQueues> {
        None
    }

    // Moving a deployment (`admin migrate-store`).

    /// Every acknowledgement kept and every season record: what the journal keeps after
    /// snapshots trimmed its entries.
    fn export_history(&self) -> Result<History, StoreError>;
    /// Writes `history` (results' acknowledgements, season clocks, end-of-week rank points,
    /// season ranks with their per-player indexes) in one atomic batch. Not durable until a flush.
    fn import_history(&self, history: &History) -> Result<(), StoreError>;

    // Durability.

    /// Makes every write so far durable, through power loss (blocking).
    fn flush(&self) -> Result<(), StoreError>;
    /// Makes every write so far durable, through power loss, without blocking the runtime.
    fn flush_async(&self) -> StoreFuture<'_, ()>;
    /// Bytes the store uses on disk.
    fn size_on_disk(&self) -> u64;
    /// Cancelled once the store fails for good (the cluster's, whose writes kept failing
    /// until more waited than it holds): an engine on it stops, as when its result journal
    /// fails. `None` for a store that never does.
    fn failure(&self) -> Option<tokio_util::sync::CancellationToken> {
        None
    }
}

// --- Records: match history and party rosters ---

/// The part of [`Storage`] that keeps the records clients read back: the match history (each
/// player's newest ended matches and the records they name) and `PartyService` rosters. Same
/// guarantees as the rest: each batch method is atomic, durable once a later flush returned,
/// and reads see every write made before them. History reads are asynchronous: a cluster store
/// answers them from Redis, not from memory.
pub trait RecordStorage {
    /// Adds ended matches to the match history in one atomic batch: each record goes at the
    /// head of each of its players' lists, each list is cut to its write's `keep` newest, and a
    /// record no list holds any more is dropped. A result's record goes with its journal entry
    /// instead ([`JournalEntry::history`], same rules). Not durable until a flush.
    fn append_history(&self, writes: &[HistoryWrite]) -> Result<(), StoreError>;
    /// One ended match, while some player's history still holds it.
    fn match_record<'a>(&'a self, id: &'a MatchId) -> StoreFuture<'a, Option<MatchRecord>>;
    /// The matches a player's history holds, most recently ended first.
    fn player_matches<'a>(&'a self, player: &'a PlayerId) -> StoreFuture<'a, Vec<MatchId>>;
    /// A player's past index: the stored records that left their list while other players'
    /// lists still held them, in id order. They still name the player, so an erasure rewrites
    /// them; a record leaves every index once it is dropped.
    fn past_matches<'a>(&'a self, player: &'a PlayerId) -> StoreFuture<'a, Vec<MatchId>>;
    /// The records of `ids` that are still held, in `ids`' order.
    fn match_records<'a>(&'a self, ids: &'a [MatchId]) -> StoreFuture<'a, Vec<MatchRecord>>;
    /// Writes party rosters (replacing those with the same id) in one atomic batch. Not durable
    /// until a flush.
    fn put_rosters(&self, rosters: &[&PartyRoster]) -> Result<(), StoreError>;
    /// Drops party rosters in one atomic batch. Not durable until a flush.
    fn remove_rosters(&self, ids: &[PartyId]) -> Result<(), StoreError>;
    /// Every stored party roster, in party id order.
    fn load_rosters(&self) -> Result<Vec<PartyRoster>, StoreError>;

    // Moving a deployment (`admin migrate-store`).

    /// Every player with a match history, in id order (a player with a past index has a list:
    /// a record leaves a list only for a newer one). A cluster store keeps each list as a key
    /// of its own and does not list them: it answers an error (nothing migrates out of it).
    fn history_players(&self) -> Result<Vec<PlayerId>, StoreError>;
    /// Writes players' history lists and past indexes as given (replacing theirs) and records
    /// with their holder counts, in one atomic batch. Not durable until a flush.
    fn import_match_history(
        &self,
        lists: &[(PlayerId, Vec<MatchId>)],
        past: &[(PlayerId, Vec<MatchId>)],
        records: &[(MatchRecord, u32)],
    ) -> Result<(), StoreError>;
}

/// The shared handle the server holds.
pub type Store = Arc<dyn Storage>;

/// Opens the embedded store in `dir`, refusing corrupt, foreign or locked directories.
pub fn open(dir: &Path, config: &StoreConfig) -> Result<Store, StoreError> {
    Ok(Arc::new(sled::SledStore::open(
        dir,
        config.cache_capacity_bytes,
    )?))
}

/// The embedded store's durable-write rate without batching: one small write and one flush at
/// a time, per second, on a scratch store in `dir`. The baseline `bench-results` compares group
/// commit against.
pub async fn single_write_flush_rate(dir: &Path, writes: usize) -> Result<f64, StoreError> {
    sled::single_write_flush_rate(dir, writes).await
}

/// One applied match result, as journaled: the absolute after-state of every player it touched
/// (a redo record, so replaying it twice is harmless) and the acknowledgement that was sent.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JournalEntry {
    pub match_id: MatchId,
    /// Unix seconds when it was applied.
    pub applied_unix: f64,
    /// The rating pool the records belong to.
    pub pool: String,
    /// Each player's full pool record after the result.
    pub records: Vec<(PlayerId, PoolRecord)>,
    /// Each party's record after the result (party key, record).
    #[serde(default)]
    pub parties: Vec<(String, PartyRecord)>,
    /// What the reporter was told, returned again to duplicate reports.
    pub ack: ResultAck,
    /// A match result (the default, so entries written before admin tools still decode) or an
    /// admin change (reset, rating edit, migration) which has no match and no acknowledgement.
    #[serde(default)]
    pub kind: EntryKind,
    /// Season bookkeeping written in the same atomic batch as the entry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub season: Option<SeasonWrite>,
    /// What the pool's calibration learns from this result (calibrating pools only), folded
    /// into the pool's calibration when the entry is applied or replayed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calibration: Option<Observation>,
    /// The match's record for the match history, written in the entry's own atomic batch (as
    /// [`Storage::append_history`] writes it). Replaying the entry does not write it again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history: Option<HistoryWrite>,
}

/// One ended match to add to the match history, and how many matches each player's history
/// keeps (`[history] matches_per_player`, at least 1).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HistoryWrite {
    pub record: MatchRecord,
    pub keep: u32,
}

/// What a journal entry is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EntryKind {
    #[default]
    Result,
    /// `SetRating`, `SeasonReset`, `EndSeason`, `MigrateFromElo`: `match_id` is a label only,
    /// nothing is written to the idempotency index and no live match is removed.
    Admin,
}

/// End-of-week rank points: (season, week, player → RP).
pub type WeekRp = (u32, u32, Vec<(PlayerId, RankPoints)>);

/// Season state an admin entry changes for the entry's pool, kept in the journal tree under `s/`
/// (never trimmed by snapshots) and written in the entry's own atomic batch: a reset and its season counter are
/// durable together or not at all.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SeasonWrite {
    /// The season clock after this entry.
    pub state: SeasonState,
    /// End-of-week rank points recorded by a soft reset: (season, week, player → RP) of the
    /// entry's pool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub week_rp: Option<WeekRp>,
    /// Season ranks recorded by `EndSeason`: (season, ranks) of the entry's pool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ranks: Option<(u32, Vec<SeasonRank>)>,
}

/// A live match as persisted (formed or allocated, not yet completed or cancelled).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StoredMatch {
    pub match_id: MatchId,
    pub queue: String,
    pub teams: Vec<Vec<PlayerId>>,
    pub win_probability: Vec<f64>,
    pub region: Option<String>,
    pub server_address: String,
    pub formed_unix: f64,
    #[serde(default)]
    pub parties: Vec<Vec<PlayerId>>,
    /// Per team, players added by backfill (also in `teams`).
    #[serde(default)]
    pub backfill: Vec<Vec<PlayerId>>,
    /// Players who left the running match (rated as abandons).
    #[serde(default)]
    pub left: Vec<PlayerId>,
    /// Roles each player declared (players who declared none are absent), so a backfill after
    /// a restart still keeps every team's role minimums.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub roles: BTreeMap<PlayerId, Vec<String>>,
    /// The values the match was formed under (its queue's match rules), sent again with it.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub attributes: crate::matching::Attributes,
    /// Unix seconds when its game server called `StartMatch` (absent before).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_unix: Option<f64>,
    /// The tickets in the match and each one's players, so that after a restart (or on the
    /// next owner of a cluster's queues) a ticket still reads as matched to its server.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tickets: Vec<(crate::ids::TicketId, Vec<PlayerId>)>,
    /// Unix seconds (on the store's clock) since when a node whose config lacked the match's
    /// queue has kept it in the store unrestored, its players free (absent: live when written).
    /// A later claim on one of its players (a live match, a waiting ticket, a match kept since
    /// later) supersedes it at the next restore.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kept_unix: Option<f64>,
    /// Unix seconds (on the store's clock) when a `RequestBackfill` last opened slots of the
    /// match: a restore within the queue's backfill timeout opens its empty slots again, so an
    /// acknowledged request outlives a crash.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backfill_opened_unix: Option<f64>,
}

/// One pool's end-of-week rank points: (pool, season, week, player → RP).
pub type PoolWeek = (String, u32, u32, Vec<(PlayerId, RankPoints)>);

/// What a store keeps besides players, parties, journal entries and live matches: the results'
/// acknowledgements it keeps, with their times, and the season records, in key order.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct History {
    pub results: Vec<(MatchId, AckRecord)>,
    /// Each pool's season clock.
    pub seasons: Vec<(String, SeasonState)>,
    /// End-of-week rank points: (pool, season, week, player → RP).
    pub weeks: Vec<PoolWeek>,
    /// Season ranks: (pool, season, ranks).
    pub ranks: Vec<(String, u32, Vec<SeasonRank>)>,
}

/// The queue settings an accepted reload applied (the `[queues]` table as JSON: the store does
/// not read config), and when.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReloadedQueues {
    /// When the reload was applied, in Unix seconds on the store's clock
    /// ([`Storage::now_unix`]: Redis's), so every node reads it on the same clock.
    pub unix: f64,
    pub queues: serde_json::Value,
}

/// A waiting ticket as a cluster store keeps it: what the queue's next owner needs to put it
/// back in its pool with its wait kept.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StoredTicket {
    pub ticket_id: TicketId,
    pub queue: String,
    pub players: Vec<PlayerId>,
    /// When it entered, in Unix seconds on the store's clock ([`Storage::now_unix`]: Redis's
    /// in a cluster): the wait survives a change of owner, whatever the owners' own clocks say.
    pub entered_unix: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub party_skill: Option<(f64, f64)>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub region_latency_ms: Vec<(String, u32)>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub roles: Vec<Vec<String>>,
    /// The values the queue's match rules read.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub attributes: crate::matching::Attributes,
    /// Players this ticket is never matched with or against.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub avoid: Vec<PlayerId>,
}

/// One live match as a segment holds it (JSON, as [`Storage::load_matches`] reads it).
pub fn encode_match(m: &StoredMatch) -> Result<Vec<u8>, StoreError> {
    Ok(serde_json::to_vec(m)?)
}

/// Splits encoded matches (given by their sizes, in order) into consecutive segments of at most
/// [`SEGMENT_BYTES`] each, or of one match when a match alone is bigger.
pub fn segment_bounds(sizes: &[usize]) -> Vec<std::ops::Range<usize>> {
    let mut bounds = Vec::new();
    let mut start = 0;
    // The brackets and separators of the JSON array.
    let mut bytes = 1;
    for (i, &size) in sizes.iter().enumerate() {
        if i > start && bytes + size + 1 > SEGMENT_BYTES {
            bounds.push(start..i);
            start = i;
            bytes = 1;
        }
        bytes += size + 1;
    }
    if start < sizes.len() {
        bounds.push(start..sizes.len());
    }
    bounds
}

/// This machine's wall clock, in Unix seconds (0 before the epoch).
pub fn wall_clock_unix() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// Records past which a batch's synchronous work (encoding, applying) is [`heavy`].
pub const HEAVY_RECORDS: usize = 10_000;

/// Runs CPU-heavy synchronous work (a whole pool's journal batch: preparing, encoding, applying
/// it) from async code without holding up the runtime's other tasks: on a multi-threaded
/// runtime the worker first hands them to another thread (`block_in_place`), so the node's
/// lease renewals and its calls go on meanwhile; elsewhere (tests, tools) it just runs.
pub fn heavy<T>(work: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current() {
        Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(work)
        }
        _ => work(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_journal_entry_written_before_admin_tools_still_decodes_as_a_result() {
        let old = r#"{"match_id":"m1","applied_unix":1.0,"pool":"1v1","records":[],
                      "ack":{"queue":"1v1","changes":[]}}"#;
        let entry: JournalEntry = serde_json::from_str(old).unwrap();
        assert_eq!((entry.kind, entry.season), (EntryKind::Result, None));
        assert_eq!(entry.calibration, None);
    }

    #[test]
    fn segment_bounds_fill_segments_up_to_the_byte_budget_in_order() {
        assert!(segment_bounds(&[]).is_empty());
        // 1 + (n + 1) per match: 1,000-byte matches, six to a segment (6,007 bytes).
        let bounds = segment_bounds(&[1000; 13]);
        assert_eq!(bounds, vec![0..6, 6..12, 12..13]);
        // A match over the budget goes alone; small ones around it still share.
        let bounds = segment_bounds(&[10, SEGMENT_BYTES * 3, 10, 10]);
        assert_eq!(bounds, vec![0..1, 1..2, 2..4]);
        let ms = [
            contract::stored("m1", "s", 1.0),
            contract::stored("m2", "s", 1.0),
        ];
        let encoded = contract::encoded(&ms);
        let sizes: Vec<usize> = encoded.iter().map(Vec::len).collect();
        assert_eq!(segment_bounds(&sizes), vec![0..2]);
    }

    /// Ratings must come back from disk bit for bit (serde_json's default parser can be off in
    /// the last place; the `float_roundtrip` feature makes it exact).
    #[test]
    fn floats_round_trip_exactly_through_the_record_encoding() {
        let mut x = 0.1f64;
        for i in 0..10_000 {
            x = (x * 1.000_123_456_789 + f64::from(i) * 1e-7).fract() * 3000.0 + 1e-9;
            let back: f64 = serde_json::from_slice(&serde_json::to_vec(&x).unwrap()).unwrap();
            assert_eq!(back.to_bits(), x.to_bits(), "{x:?}");
        }
    }
}

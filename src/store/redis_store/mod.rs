//! The cluster backend: everything in Redis (≥ 7) or Valkey (≥ 7.2), written only by the holder
//! of the queues' lease.
//!
//! - **Reads** are answered by an in-memory mirror ([`MemoryStore`]) loaded from Redis when the
//!   store opens ([`load`]): the owner is the only writer, so the mirror is exactly what Redis holds plus
//!   what is waiting for the next flush.
//! - **Writes** update the mirror and queue the equivalent Redis commands as one batch per
//!   trait call. A flush sends every queued batch in **one Lua script** that first checks that
//!   the lease still carries this store's fencing token: all of it is applied, in order, or none
//!   (Redis runs a script alone). Concurrent flushes coalesce: one is in flight at a time and
//!   takes everything queued, and a flush whose batches are already in flight waits for that
//!   flight (group commit).
//! - **Failing flushes**: a failed flight's batches go back in front of the queue; the next
//!   flight waits a little longer after each failure, and past a bound on what waits the store
//!   gives up and stops its engine (see `backlog.rs`).
//! - **Fencing**: a refused script means another node owns the queues now; the store is then
//!   fenced for good and every later write and flush fails with [`StoreError::Fenced`].
//! - **Durable** means what Redis' own persistence makes of an executed script (see
//!   docs/cluster.md), plus `WAIT` for `wait_replicas` replicas when configured.
//! - **One hash tag** on every key, the cluster's keyspace (`{mm}` by default, see [`Keys`]): a
//!   script may only touch keys of one slot in Redis Cluster, and each flush touches several.
//!
//! A journal entry also writes the players' and parties' full records (they are absolute redo
//! records), so the `players` hash is always current and snapshots rewrite nothing that did not
//! change since the last write.

mod admin;
mod backlog;
mod blocking;
mod claims;
mod clock;
mod conn;
mod durability;
mod flush;
mod format;
mod journal;
mod keys;
mod load;
mod past;
mod placement;
mod records;
mod script;
mod sentinel;
mod server;
mod stage;
mod standby;

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use ::redis::Script;

pub use conn::{Patience, RedisConn, RedisTls};
pub use durability::{Durability, check_durability};
pub use keys::{DEFAULT_KEYSPACE, Keys, check_keyspace};
use load::text;
pub use placement::{Moved, check_placement};
pub use script::CHANGE_LOG_ENTRIES;
#[cfg(test)]
use script::MAX_RUN;
use script::{Op, apply_script};
pub use sentinel::{SentinelUrl, is_sentinel_url};
pub use server::{RedisCluster, RedisSentinels, RedisServer, SENTINEL_SERVICE};
pub use standby::{Followed, Standby};

use super::memory::{Data, MemoryStore, Pools};
use super::{
    Claim, History, JournalEntry, Segment, Storage, StoreError, StoreFuture, StoredMatch,
    StoredParty, StoredPlayer, StoredTicket, redact,
};
use crate::ids::{MatchId, PlayerId, TicketId};
use crate::ranking::RankPoints;
use crate::ranking::season::{SeasonRank, SeasonState};
use crate::rating::calibration::Calibration;
use crate::records::{PartyRecord, PoolRecord, ResultAck};

/// The hashes, in the order the script receives them (`KEYS[2..]`; `KEYS[1]` is the lease).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Hash {
    Players = 2,
    Parties,
    Journal,
    Acks,
    Meta,
    Seasons,
    Weeks,
    Ranks,
    Segments,
    Ended,
    Calibrations,
    Tickets,
    // --- Records ---
    Rosters,
    /// Match history records (read from Redis, never loaded into the mirror).
    MatchRecords,
    /// How many players' history lists hold each record (likewise never loaded).
    MatchRefs,
    /// Bans, the audit log and the event log (see `admin.rs`).
    Admin,
}

/// The hashes and their names in the keyspace (see [`Keys`]).
const HASHES: [(Hash, &str); 16] = [
    (Hash::Players, "players"),
    (Hash::Parties, "parties"),
    (Hash::Journal, "journal"),
    (Hash::Acks, "acks"),
    (Hash::Meta, "meta"),
    (Hash::Seasons, "seasons"),
    (Hash::Weeks, "weeks"),
    (Hash::Ranks, "ranks"),
    (Hash::Segments, "segments"),
    (Hash::Ended, "ended"),
    (Hash::Calibrations, "calibrations"),
    (Hash::Tickets, "tickets"),
    (Hash::Rosters, "rosters"),
    (Hash::MatchRecords, "match_records"),
    (Hash::MatchRefs, "match_refs"),
    (Hash::Admin, "admin"),
];

/// Hashes read into the mirror when the store opens: all but the match history, which can
/// grow to every player's `[history] matches_per_player` matches and is read from Redis.
fn loaded_hash(h: Hash) -> bool {
    !matches!(h, Hash::MatchRecords | Hash::MatchRefs)
}

/// Writes not yet sent, as batches (one per trait call), and the sequence of the last one.
#[derive(Default)]
struct Pending {
    batches: Vec<Vec<Op>>,
    /// About how many bytes they hold.
    bytes: usize,
    /// Batches queued since the store opened.
    queued: u64,
    /// The flights that failed since the last that landed (see `backlog.rs`).
    failures: backlog::Failures,
}

/// Options of the Redis store.
#[derive(Clone, Debug, Default)]
pub struct RedisOptions {
    /// Replicas that must acknowledge each flush (`WAIT`); 0: none.
    pub wait_replicas: u32,
    /// How long a flush waits for them (milliseconds).
    pub wait_timeout_ms: u64,
    /// For a `rediss://` URL: what to trust and present beyond the defaults.
    pub tls: Option<RedisTls>,
    /// The cluster's keys.
    pub keys: Keys,
    /// Whether flushes append to the change log standby nodes follow.
    pub change_log: bool,
    /// How long calls wait on Redis (a flush's reply also waits `wait_timeout_ms` longer).
    pub patience: Patience,
    /// The node the lease names with the token; empty: the token alone is checked. With it,
    /// a token given twice (a Redis failover that lost the counter's last increment before a
    /// replica had it) still fences the node that no longer holds the lease.
    pub node: String,
}

/// What the flush script finds at the start of the lease's value while this store holds it:
/// `TOKEN` or `TOKEN|NODE`.
fn fence(token: u64, node: &str) -> String {
    if node.is_empty() {
        token.to_string()
    } else {
        format!("{token}|{node}")
    }
}

/// The Redis backend. See the module documentation.
pub struct RedisStore {
    url: String,
    token: u64,
    options: RedisOptions,
    keys: Keys,
    mirror: MemoryStore,
    conn: RedisConn,
    pending: Mutex<Pending>,
    /// Batches known durable (a prefix of `queued`).
    flushed: AtomicU64,
    /// One flight at a time.
    flight: tokio::sync::Mutex<()>,
    fenced: AtomicBool,
    apply: Script,
    /// The next number a flush call carries (see the flush's script): above any an earlier
    /// store of the same token and node had applied.
    calls: AtomicU64,
    /// Whether the match history's past indexes are complete (see `past.rs`): until then an
    /// erasure could miss records, so it is refused.
    past_ready: AtomicBool,
    /// When a batch is written in parts, and how large they are (see `stage.rs`).
    stage: stage::Bounds,
    /// Held by every write from its change to the mirror until its batch is queued (see
    /// [`RedisStore::write_order`]).
    order: Mutex<()>,
    /// Redis's clock, which [`Storage::now_unix`] answers.
    clock: clock::RedisClock,
    /// How much may wait unsent while flushes fail (see `backlog.rs`).
    bound: backlog::Bound,
    /// Why the store gave up, once it did: every later write and flush fails with it.
    gave_up: std::sync::OnceLock<String>,
    /// Cancelled when it gave up.
    failure: tokio_util::sync::CancellationToken,
    /// The home shard's keyspace, when this store claims the players it queues (see
    /// `claims.rs`).
    claims: std::sync::OnceLock<Vec<String>>,
}

fn redis_error(url: &str) -> impl Fn(::redis::RedisError) -> StoreError + '_ {
    move |e| StoreError::Redis(format!("{}: {e}", redact(url)))
}

fn json<T: serde::Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, StoreError> {
    Ok(serde_json::to_vec(value)?)
}

fn decode<T: serde::de::DeserializeOwned>(bytes: &[u8], key: &str) -> Result<T, StoreError> {
    serde_json::from_slice(bytes).map_err(|e| StoreError::Decode {
        key: key.to_owned(),
        detail: e.to_string(),
    })
}

/// `pool␟season␟week` and `pool␟season`: fields of the weeks and ranks hashes.
fn week_field(pool: &str, season: u32, week: u32) -> String {
    format!("{pool}\u{1f}{season}\u{1f}{week}")
}

fn ranks_field(pool: &str, season: u32) -> String {
    format!("{pool}\u{1f}{season}")
}

impl RedisStore {
    /// Connects to `url` and loads everything into the mirror; writes will carry `token`.
    pub async fn open(url: &str, token: u64, options: &RedisOptions) -> Result<Self, StoreError> {
        Self::open_from(url, token, options, None).await
    }

    /// [`RedisStore::open`], starting from a standby's copy of the state when there is one
    /// and the change log shows it current (and reading everything otherwise).
    pub async fn open_from(
        url: &str,
        token: u64,
        options: &RedisOptions,
        standby: Option<Standby>,
    ) -> Result<Self, StoreError> {
        let err = redis_error(url);
        let patience = options
            .patience
            .reply_within(options.patience.reply + Duration::from_millis(options.wait_timeout_ms));
        let mut conn = RedisConn::connect(url, options.tls.as_ref(), patience)
            .await
            .map_err(&err)?;
        let lease: Option<String> = ::redis::cmd("GET")
            .arg(options.keys.lease())
            .query_async(&mut conn)
            .await
            .map_err(&err)?;
        if !lease.is_some_and(|v| v.starts_with(&format!("{}|", fence(token, &options.node)))) {
            return Err(StoreError::Fenced);
        }
        let landed: Option<String> = ::redis::cmd("GET")
            .arg(options.keys.flight())
            .query_async(&mut conn)
            .await
            .map_err(&err)?;
        let prefix = format!("{}|", fence(token, &options.node));
        let calls = landed
            .and_then(|v| v.strip_prefix(&prefix).and_then(|n| n.parse::<u64>().ok()))
            .unwrap_or(0)
            + 1;
        // The clock of the primary that runs the flushes (on a Redis Cluster, the keyspace's).
        let sent = std::time::Instant::now();
        let time: (u64, u64) = conn
            .on_primary_of(options.keys.lease(), ::redis::cmd("TIME"))
            .await
            .map_err(&err)?;
        let mut store = Self {
            url: url.to_string(),
            token,
            options: options.clone(),
            keys: options.keys.clone(),
            mirror: MemoryStore::mirror(),
            conn,
            pending: Mutex::new(Pending::default()),
            flushed: AtomicU64::new(0),
            flight: tokio::sync::Mutex::new(()),
            fenced: AtomicBool::new(false),
            claims: std::sync::OnceLock::new(),
            apply: apply_script(),
            calls: AtomicU64::new(calls),
            past_ready: AtomicBool::new(false),
            stage: stage::Bounds::default(),
            order: Mutex::new(()),
            clock: clock::RedisClock::new(time, sent),
            bound: backlog::Bound::default(),
            gave_up: std::sync::OnceLock::new(),
            failure: tokio_util::sync::CancellationToken::new(),
        };
        format::check(&store).await?;
        // A batch the last owner committed but did not finish applying is applied first, so
        // what loads (and what a standby copy follows to) is all of it.
        store.finish_staged().await?;
        let mut conn = store.conn.clone();
        store.mirror = standby::mirror(standby, &mut conn, url, &options.keys).await?;
        // The past indexes are complete when marked, or when there is no history to index.
        let (marked, records): (bool, u64) = ::redis::pipe()
            .cmd("HEXISTS")
            .arg(options.keys.meta())
            .arg(past::PAST_INDEX)
            .cmd("HLEN")
            .arg(options.keys.hash(Hash::MatchRecords))
            .query_async(&mut conn)
            .await
            .map_err(&err)?;
        store
            .past_ready
            .store(marked || records == 0, Ordering::Release);
        if !marked && records == 0 {
            // Nothing to index: marked with the first flush, so a later open (with a history
            // by then) knows its indexes are complete.
            store.queue(vec![Op::Set(
                Hash::Meta,
                past::PAST_INDEX.into(),
                b"1".to_vec(),
            )]);
        }
        Ok(store)
    }

    /// Sends what is queued, so a read from Redis sees every write made before it (reads that
    /// go to Redis rather than the mirror: the match history).
    async fn flush_pending(&self) -> Result<(), StoreError> {
        self.flush_through(self.queued()).await
    }

    /// The fencing token this store writes with.
    pub fn token(&self) -> u64 {
        self.token
    }

    /// Makes [`Storage::now_unix`] answer `seconds` later (earlier when negative), as if
    /// Redis's clock were off by that much from this machine's.
    #[cfg(test)]
    pub fn shift_clock(&self, seconds: f64) {
        self.clock.shift(seconds);
    }

    /// Refuses every later write and flush, as after one the fence refused: its node lost the
    /// lease. A Redis failover can hand the same token to the same node again, which the
    /// script's check cannot tell from this store's; this store must not write under it then.
    pub fn stop_writing(&self) {
        self.fenced.store(true, Ordering::Release);
    }

    fn check_fence(&self) -> Result<(), StoreError> {
        if self.fenced.load(Ordering::Acquire) {
            return Err(StoreError::Fenced);
        }
        if let Some(why) = self.gave_up.get() {
            return Err(StoreError::Redis(why.clone()));
        }
        Ok(())
    }

    /// Taken by every write for as long as it changes the mirror and queues its batch: two
    /// writers of one key (a ticket put and removed, a ban set and lifted, a player's record
    /// by a snapshot and by a result) then queue in the order they changed the mirror, so Redis
    /// ends at the mirror's value (see [`RedisStore::queue`]).
    fn write_order(&self) -> std::sync::MutexGuard<'_, ()> {
        self.order.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues a batch. A write that changes the mirror queues its batch before it lets the
    /// mirror's lock go: two writers of one record (a snapshot's `put_players` and the
    /// committer's journal batch, say) then queue in the order they changed the mirror, so
    /// Redis ends at the mirror's value. Queued after the lock, the older value could land
    /// last, and later writes of the same value would be skipped as already there.
    ///
    /// While flushes fail, a batch that takes the backlog past its bound makes the store give
    /// up (see `backlog.rs`).
    fn queue(&self, batch: Vec<Op>) {
        if batch.is_empty() || self.gave_up.get().is_some() {
            return;
        }
        let over = {
            let mut pending = self.pending();
            pending.bytes += backlog::batch_bytes(&batch);
            pending.batches.push(batch);
            pending.queued += 1;
            self.over_bound(&pending)
        };
        if let Some(why) = over {
            self.give_up(why);
        }
    }

    fn queued(&self) -> u64 {
        self.pending().queued
    }
}

/// The writes of each pool's calibration.
fn calibration_ops(states: &[(&str, &Calibration)]) -> Result<Vec<Op>, StoreError> {
    states
        .iter()
        .map(|(pool, c)| Ok(Op::Set(Hash::Calibrations, (*pool).to_string(), json(c)?)))
        .collect()
}

/// A hash's fields and values as Redis returns them.
type Fields = Vec<(Vec<u8>, Vec<u8>)>;

/// The JSON array of a segment's matches, from their encodings.
fn segment_value(matches: &[Vec<u8>]) -> Vec<u8> {
    let mut v = Vec::with_capacity(matches.iter().map(|m| m.len() + 1).sum::<usize>() + 2);
    v.push(b'[');
    for (i, m) in matches.iter().enumerate() {
        if i > 0 {
            v.push(b',');
        }
        v.extend_from_slice(m);
    }
    v.push(b']');
    v
}

impl Storage for RedisStore {
    fn location(&self) -> String {
        redact(&self.url)
    }

    /// Redis's clock: read at open and by every flush, carried between readings by this
    /// process's monotonic clock.
    fn now_unix(&self) -> f64 {
        self.clock.now_unix()
    }

    fn load_players(&self) -> Result<Box<dyn Iterator<Item = StoredPlayer> + '_>, StoreError> {
        self.mirror.load_players()
    }

    fn visit_players(&self, visit: &mut crate::store::PlayerVisit<'_>) -> Result<(), StoreError> {
        self.mirror.visit_players(visit)
    }

    fn put_players(
        &self,
        records: &[(&PlayerId, &BTreeMap<String, PoolRecord>)],
    ) -> Result<(), StoreError> {
        let _order = self.write_order();
        self.check_fence()?;
        let mut batch = Vec::new();
        {
            let mut data = self.mirror.data();
            for (id, pools) in records {
                // Journal entries already wrote changed records: only what differs goes out.
                if data.players.get(*id).is_some_and(|p| p.same_as(pools)) {
                    continue;
                }
                batch.push(Op::Set(Hash::Players, id.to_string(), json(pools)?));
                data.players.insert((*id).clone(), Pools::copy_of(pools));
            }
            // Queued under the mirror's lock (see `queue`).
            self.queue(batch);
        }
        Ok(())
    }

    fn player_count(&self) -> usize {
        self.mirror.player_count()
    }

    fn load_parties(&self) -> Result<Vec<StoredParty>, StoreError> {
        self.mirror.load_parties()
    }

    fn put_parties(
        &self,
        records: &[(&str, &BTreeMap<String, PartyRecord>)],
    ) -> Result<(), StoreError> {
        let _order = self.write_order();
        self.check_fence()?;
        let mut batch = Vec::new();
        {
            let mut data = self.mirror.data();
            for (key, pools) in records {
                if data.parties.get(*key) == Some(*pools) {
                    continue;
                }
                batch.push(Op::Set(Hash::Parties, (*key).to_string(), json(pools)?));
                data.parties.insert((*key).to_string(), (*pools).clone());
            }
            self.queue(batch);
        }
        Ok(())
    }

    fn append_journal(&self, first_seq: u64, entries: &[JournalEntry]) -> Result<(), StoreError> {
        self.queue_journal(first_seq, entries, &[]).map(|_| ())
    }

    fn append_journal_with_events(
        &self,
        first_seq: u64,
        entries: &[JournalEntry],
        events: &[super::EventRecord],
    ) -> Result<u64, StoreError> {
        self.queue_journal(first_seq, entries, events)
    }

    fn journal_after(
        &self,
        seq: u64,
    ) -> Box<dyn Iterator<Item = Result<(u64, JournalEntry), StoreError>> + '_> {
        self.mirror.journal_after(seq)
    }

    fn last_seq(&self) -> Result<u64, StoreError> {
        self.mirror.last_seq()
    }

    fn snapshot_seq(&self) -> Result<u64, StoreError> {
        self.mirror.snapshot_seq()
    }

    fn finish_snapshot(&self, seq: u64) -> Result<(), StoreError> {
        self.finish_snapshot_with(seq, &[])
    }

    fn finish_snapshot_with(
        &self,
        seq: u64,
        calibrations: &[(&str, &Calibration)],
    ) -> Result<(), StoreError> {
        self.check_fence()?;
        {
            let _order = self.write_order();
            // One batch, so one script: the calibrations land with the mark.
            let mut batch = calibration_ops(calibrations)?;
            self.mirror.put_calibrations(calibrations)?;
            batch.push(Op::Set(
                Hash::Meta,
                "snapshot_seq".into(),
                seq.to_string().into(),
            ));
            batch.extend(
                self.mirror
                    .data()
                    .journal
                    .range(..=seq)
                    .flat_map(|(s, entry)| journal::journal_dels(*s, entry)),
            );
            self.queue(batch);
        }
        // The mark is durable first; trimming the mirror after cannot lose an entry.
        self.flush()?;
        self.mirror.finish_snapshot(seq)
    }

    fn result_of(&self, match_id: &MatchId) -> Result<Option<ResultAck>, StoreError> {
        self.mirror.result_of(match_id)
    }

    /// The mirror holds every acknowledgement with its time, so it picks the old ones; their
    /// deletes go as one batch, so one fenced script with the next flush, which names them in
    /// the change log: standby copies drop them too.
    fn trim_acks(&self, before_unix: f64, at_most: usize) -> Result<usize, StoreError> {
        let _order = self.write_order();
        self.check_fence()?;
        let mut data = self.mirror.data();
        let old = data.acks.trim(before_unix, at_most);
        self.queue(
            old.iter()
                .map(|id| Op::Del(Hash::Acks, id.to_string()))
                .collect(),
        );
        Ok(old.len())
    }

    fn season_state(&self, pool: &str) -> Result<SeasonState, StoreError> {
        self.mirror.season_state(pool)
    }

    fn week_rp(
        &self,
        pool: &str,
        season: u32,
    ) -> Result<Vec<Vec<(PlayerId, RankPoints)>>, StoreError> {
        self.mirror.week_rp(pool, season)
    }

    fn player_weeks(
        &self,
        pool: &str,
        player: &PlayerId,
    ) -> Result<Vec<(u32, u32, RankPoints)>, StoreError> {
        self.mirror.player_weeks(pool, player)
    }

    fn player_season_ranks(
        &self,
        pool: &str,
        player: &PlayerId,
    ) -> Result<Vec<(u32, SeasonRank)>, StoreError> {
        self.mirror.player_season_ranks(pool, player)
    }

    fn season_ranks(&self, pool: &str, season: u32) -> Result<Option<Vec<SeasonRank>>, StoreError> {
        self.mirror.season_ranks(pool, season)
    }

    fn put_calibrations(&self, states: &[(&str, &Calibration)]) -> Result<(), StoreError> {
        let _order = self.write_order();
        self.check_fence()?;
        let batch = calibration_ops(states)?;
        self.mirror.put_calibrations(states)?;
        self.queue(batch);
        Ok(())
    }

    fn load_calibrations(&self) -> Result<Vec<(String, Calibration)>, StoreError> {
        self.mirror.load_calibrations()
    }

    fn put_segments(&self, segments: &[Segment<'_>], dropped: &[u64]) -> Result<(), StoreError> {
        let _order = self.write_order();
        self.check_fence()?;
        let mut batch: Vec<Op> = segments
            .iter()
            .map(|(id, m)| Op::Set(Hash::Segments, id.to_string(), segment_value(m)))
            .collect();
        batch.extend(
            dropped
                .iter()
                .map(|d| Op::Del(Hash::Segments, d.to_string())),
        );
        self.mirror.put_segments(segments, dropped)?;
        self.queue(batch);
        Ok(())
    }

    fn end_matches(&self, ended: &[MatchId], dropped: &[u64]) -> Result<(), StoreError> {
        let _order = self.write_order();
        self.check_fence()?;
        let mut batch: Vec<Op> = ended
            .iter()
            .map(|m| Op::Set(Hash::Ended, m.to_string(), b"1".to_vec()))
            .collect();
        batch.extend(
            dropped
                .iter()
                .map(|d| Op::Del(Hash::Segments, d.to_string())),
        );
        self.mirror.end_matches(ended, dropped)?;
        self.queue(batch);
        Ok(())
    }

    fn load_matches(&self) -> Result<(Vec<StoredMatch>, u64), StoreError> {
        self.mirror.load_matches()
    }

    fn compact_matches(&self, segments: &[Segment<'_>]) -> Result<(), StoreError> {
        let _order = self.write_order();
        self.check_fence()?;
        let mut batch = vec![Op::Clear(Hash::Segments), Op::Clear(Hash::Ended)];
        batch.extend(
            segments
                .iter()
                .map(|(id, m)| Op::Set(Hash::Segments, id.to_string(), segment_value(m))),
        );
        self.mirror.compact_matches(segments)?;
        self.queue(batch);
        Ok(())
    }

    fn keeps_tickets(&self) -> bool {
        true
    }

    fn claims_players(&self) -> bool {
        self.claims.get().is_some()
    }

    fn claim_players<'a>(&'a self, players: &'a [PlayerId]) -> StoreFuture<'a, Claim> {
        Box::pin(self.claim(players))
    }

    fn release_claims<'a>(&'a self, players: &'a [PlayerId]) -> StoreFuture<'a, ()> {
        Box::pin(self.release(players))
    }

    fn claimed_players(&self) -> StoreFuture<'_, Vec<PlayerId>> {
        Box::pin(self.claimed())
    }

    fn players_held<'a>(&'a self, players: &'a [PlayerId]) -> StoreFuture<'a, Vec<PlayerId>> {
        Box::pin(self.held(players))
    }

    fn home_roster<'a>(
        &'a self,
        id: &'a crate::ids::PartyId,
    ) -> StoreFuture<'a, Option<crate::records::PartyRoster>> {
        Box::pin(self.home_party(id))
    }

    fn note_party_entry<'a>(
        &'a self,
        id: &'a crate::ids::PartyId,
        keep: std::time::Duration,
    ) -> StoreFuture<'a, ()> {
        Box::pin(self.note_entry(id, keep))
    }

    fn parties_entered<'a>(
        &'a self,
        ids: &'a [crate::ids::PartyId],
    ) -> StoreFuture<'a, Vec<Option<f64>>> {
        Box::pin(self.entered(ids))
    }

    fn put_ticket(&self, ticket: &StoredTicket) -> Result<(), StoreError> {
        let _order = self.write_order();
        self.check_fence()?;
        let batch = vec![Op::Set(
            Hash::Tickets,
            ticket.ticket_id.to_string(),
            json(ticket)?,
        )];
        self.mirror.put_ticket(ticket)?;
        self.queue(batch);
        Ok(())
    }

    fn remove_tickets(&self, ids: &[TicketId]) -> Result<(), StoreError> {
        let _order = self.write_order();
        self.check_fence()?;
        let batch = ids
            .iter()
            .map(|id| Op::Del(Hash::Tickets, id.to_string()))
            .collect();
        self.mirror.remove_tickets(ids)?;
        self.queue(batch);
        Ok(())
    }

    fn load_tickets(&self) -> Result<Vec<StoredTicket>, StoreError> {
        self.mirror.load_tickets()
    }

    fn put_reloaded_queues(&self, reload: &super::ReloadedQueues) -> Result<(), StoreError> {
        let _order = self.write_order();
        self.check_fence()?;
        self.mirror.data().reloaded = Some(reload.clone());
        self.queue(vec![Op::Set(
            Hash::Meta,
            "reloaded_queues".into(),
            json(reload)?,
        )]);
        Ok(())
    }

    fn reloaded_queues(&self) -> Option<super::ReloadedQueues> {
        self.mirror.data().reloaded.clone()
    }

    fn export_history(&self) -> Result<History, StoreError> {
        self.mirror.export_history()
    }

    fn import_history(&self, history: &History) -> Result<(), StoreError> {
        let _order = self.write_order();
        self.check_fence()?;
        let mut batch = Vec::new();
        for (match_id, record) in &history.results {
            batch.push(Op::Set(Hash::Acks, match_id.to_string(), json(record)?));
        }
        for (pool, state) in &history.seasons {
            batch.push(Op::Set(Hash::Seasons, pool.clone(), json(state)?));
        }
        for (pool, season, week, rp) in &history.weeks {
            batch.push(Op::Set(
                Hash::Weeks,
                week_field(pool, *season, *week),
                json(rp)?,
            ));
        }
        for (pool, season, ranks) in &history.ranks {
            batch.push(Op::Set(
                Hash::Ranks,
                ranks_field(pool, *season),
                json(ranks)?,
            ));
        }
        self.mirror.import_history(history)?;
        self.queue(batch);
        Ok(())
    }

    fn flush(&self) -> Result<(), StoreError> {
        let target = self.queued();
        blocking::run(self.flush_through(target))
    }

    fn flush_async(&self) -> StoreFuture<'_, ()> {
        let target = self.queued();
        Box::pin(self.flush_through(target))
    }

    fn size_on_disk(&self) -> u64 {
        0
    }

    fn failure(&self) -> Option<tokio_util::sync::CancellationToken> {
        Some(RedisStore::failure(self))
    }
}

#[cfg(test)]
mod tests;

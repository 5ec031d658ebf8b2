//! Sharded in-memory state behind one cheap, cloneable handle: players, tickets, matches and the
//! registry of game servers. Methods are synchronous and lock only inside.
//!
//! Architecture invariant: a player's whereabouts (idle / queued / in a match) live in exactly one
//! place, its [`PlayerSlot`]. Every transition that touches several players locks their slots in
//! ascending id order, checks, then writes all of them, so a transition is all-or-nothing and two
//! transitions can never deadlock. No lock here is ever held across an `.await`.

mod admin;
mod calibration;
mod claims;
mod events;
mod export;
mod history;
mod leaderboard;
mod live;
mod matches;
mod ownership;
mod persistence;
mod players;
mod records;
mod reports;
mod rosters;
mod segments;
mod servers;
mod shard_parties;
mod superseded;
#[cfg(test)]
pub(crate) mod test_util;
mod tickets;
mod unrestored;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use dashmap::DashMap;

use crate::config::{Config, QueueConfig};
use crate::ids::{MatchId, PlayerId, QueueId, TicketId};
use crate::ranking::RankIndex;
use crate::records::{PartyRecord, PoolRecord};
use crate::rejection::Rejection;
use crate::store::{Store, StoreError};

pub use admin::{
    EntryWithEvents, MigrationOutcome, MigrationRow, PoolReset, ResetKind, SeasonOutcome,
};
pub use calibration::Calibrations;
pub use events::{
    EventsTrimmed, Kept, Taken, WatchError, Watched, match_event, period_close_events,
    result_events,
};
pub use history::LiveMatch;
pub use live::{BackfillError, Release, roles_map};
pub use matches::{Allocation, Assignment, MatchPhase, MatchSlot};
pub use ownership::Ownership;
pub use players::{PlayerSlot, PlayerState, PlayerStatus, PoolRecords};
pub use records::Erased;
pub use reports::PreparedResult;
pub use rosters::{INVITE_CODE_LEN, PartyError};
pub use servers::{Placement, ServerHandle, ServerRegistry};
pub use tickets::{Entered, ReadyView, TicketSlot, TicketState, TicketView};

use players::PoolNames;

/// A queue as the state layer needs it.
#[derive(Debug)]
pub struct QueueInfo {
    pub id: QueueId,
    pub pool: String,
    pub config: QueueConfig,
}

/// The handle. Clone it freely.
#[derive(Clone)]
pub struct State {
    inner: Arc<Inner>,
}

struct Inner {
    config: Arc<Config>,
    /// Replaced whole by a config reload (queue settings only; the set of queues and their
    /// pools and rating systems never change while running).
    queues: std::sync::RwLock<BTreeMap<QueueId, Arc<QueueInfo>>>,
    players: DashMap<PlayerId, Arc<PlayerSlot>>,
    /// The slots that may hold no record (made since start-up, or erased): the only slots the
    /// sweep of idle players looks at. Weak, so that listing a slot does not hold it.
    unrated_slots: Mutex<Vec<std::sync::Weak<PlayerSlot>>>,
    /// Server-minted keys, so the fast id hasher (players keep SipHash: clients choose those).
    tickets: DashMap<TicketId, Arc<TicketSlot>, crate::matching::IdHash>,
    matches: DashMap<MatchId, Arc<MatchSlot>, crate::matching::IdHash>,
    servers: Mutex<ServerRegistry>,
    store: Store,
    /// Live matches per store segment; held while a segment write is decided and made.
    segments: Mutex<segments::Segments>,
    /// Party skills: party key → pool → record.
    parties: DashMap<String, BTreeMap<String, PartyRecord>>,
    /// Leaderboard order per rating pool (players with at least one record there).
    ranks: BTreeMap<String, Mutex<RankIndex>>,
    /// Id order per rating pool, while exports run (see `export.rs`).
    exports: export::ExportIndexes,
    /// The rating system of each pool (validated equal across the pool's queues).
    pool_systems: BTreeMap<String, crate::rating::SystemConfig>,
    pool_names: PoolNames,
    /// The calibration of each pool that calibrates its predictions.
    calibrations: BTreeMap<String, Mutex<crate::rating::calibration::Calibration>>,
    /// Set on a cluster node: the queues' lease, without which the optimizer does not run.
    ownership: std::sync::OnceLock<Arc<Ownership>>,
    // --- Records ---
    /// `PartyService` parties.
    rosters: Mutex<rosters::Rosters>,
    /// Banned players (loaded from the store; written through it).
    bans: DashMap<PlayerId, crate::store::Ban>,
    /// The event log's hub (see `events.rs`).
    events: events::Events,
    /// Each erasure as `(player, marker)`, for views that keep copies of records in memory
    /// (the console's recent results) to erase them too.
    erasures: tokio::sync::broadcast::Sender<(PlayerId, PlayerId)>,
    /// Cancelled when the engine's streams are closed (it or its node is stopping).
    closing: tokio_util::sync::CancellationToken,
    /// Set when a stored ticket was dropped and no flush has been asked for since (see
    /// [`State::flush_dropped_tickets`]).
    tickets_dropped: std::sync::atomic::AtomicBool,
    /// Set while the flush [`State::flush_dropped_tickets`] asked for is on its way.
    dropped_flushing: Arc<std::sync::atomic::AtomicBool>,
    /// The players this shard claims across shards (see `claims.rs`).
    claims: claims::Claims,
    /// Points where a test runs its own code (see `test_util::Hooks`).
    #[cfg(test)]
    hooks: test_util::Hooks,
}

impl State {
    /// Builds the state from config and loads persisted players from the store.
    pub fn load(config: Arc<Config>, store: Store) -> Result<Self, StoreError> {
        let queues = config
            .queues
            .iter()
            .map(|(name, q)| {
                let id = QueueId::new(name.as_str());
                let info = QueueInfo {
                    id: id.clone(),
                    pool: q.rating_pool.clone().unwrap_or_else(|| name.clone()),
                    config: q.clone(),
                };
                (id, Arc::new(info))
            })
            .collect();
        let pool_systems: BTreeMap<String, crate::rating::SystemConfig> = config
            .queues
            .iter()
            .map(|(name, q)| {
                (
                    q.rating_pool.clone().unwrap_or_else(|| name.clone()),
                    q.rating.clone(),
                )
            })
            .collect();
        let ranks = pool_systems
            .keys()
            .map(|p| (p.clone(), Mutex::new(RankIndex::new())))
            .collect();
        let pool_names = PoolNames(
            pool_systems
                .keys()
                .map(|p| (p.clone(), Arc::from(p.as_str())))
                .collect(),
        );
        let players = DashMap::new();
        let mut unrated_slots = Vec::new();
        store.visit_players(&mut |id, pools| {
            let pools = PoolRecords::from_pairs(pools, &pool_names);
            let unrated = pools.is_empty();
            let slot = Arc::new(PlayerSlot {
                id: id.clone(),
                state: Mutex::new(PlayerState {
                    status: PlayerStatus::Idle,
                    pools,
                }),
            });
            if unrated {
                unrated_slots.push(Arc::downgrade(&slot));
            }
            players.insert(id.clone(), slot);
        })?;
        let calibrations = calibration::load(&pool_systems, &store)?;
        let events = events::Events::new(store.append_events(&[])?);
        let bans = store
            .load_bans()?
            .into_iter()
            .map(|b| (b.player.clone(), b))
            .collect();
        Ok(Self {
            inner: Arc::new(Inner {
                config,
                queues: std::sync::RwLock::new(queues),
                players,
                unrated_slots: Mutex::new(unrated_slots),
                tickets: DashMap::default(),
                matches: DashMap::default(),
                servers: Mutex::new(ServerRegistry::default()),
                parties: store.load_parties()?.into_iter().collect(),
                rosters: Mutex::new(rosters::Rosters::load(store.load_rosters()?)),
                store,
                segments: Mutex::new(segments::Segments::after(0)),
                ranks,
                exports: export::ExportIndexes::new(pool_systems.keys()),
                pool_systems,
                pool_names,
                calibrations,
                ownership: std::sync::OnceLock::new(),
                bans,
                events,
                erasures: tokio::sync::broadcast::Sender::new(64),
                closing: tokio_util::sync::CancellationToken::new(),
                tickets_dropped: std::sync::atomic::AtomicBool::new(false),
                dropped_flushing: Arc::new(std::sync::atomic::AtomicBool::new(false)),
                claims: claims::Claims::default(),
                #[cfg(test)]
                hooks: test_util::Hooks::default(),
            }),
        })
    }

    /// The validated config the server runs on.
    pub fn config(&self) -> &Config {
        &self.inner.config
    }

    /// The keyspace of this engine's shard: the `shard` label of the gauges it keeps
    /// ([`crate::telemetry::SHARD`]).
    pub fn shard(&self) -> &str {
        &self.inner.config.cluster.keyspace
    }

    /// A new ticket or match id (`prefix` `t` or `m`), naming this engine's shard when it is
    /// not the home shard (see [`crate::ids::new_tagged_id`]).
    pub fn new_id(&self, prefix: &str) -> String {
        crate::ids::new_tagged_id(prefix, &self.inner.config.cluster.id_tag)
    }

    /// Makes the optimizer depend on `lease` (cluster nodes; set once, before the loop starts).
    pub fn set_ownership(&self, lease: Arc<Ownership>) {
        let _ = self.inner.ownership.set(lease);
    }

    /// Whether this is a cluster node's engine, which serves the queues while its lease holds.
    pub fn is_cluster_engine(&self) -> bool {
        self.inner.ownership.get().is_some()
    }

    /// Whether the engine's streams are closed ([`State::close_server_streams`] ran): it or
    /// its node is stopping, and it opens no new ones.
    pub fn closing(&self) -> bool {
        self.inner.closing.is_cancelled()
    }

    /// Cancelled when the engine's streams are closed.
    pub fn streams_closed(&self) -> tokio_util::sync::CancellationToken {
        self.inner.closing.clone()
    }

    /// Returns when this cluster engine's node starts stopping; never on an embedded server.
    pub async fn node_stopping(&self) {
        match self.inner.ownership.get() {
            Some(o) => o.node_stopping().cancelled().await,
            None => std::future::pending().await,
        }
    }

    /// Whether this process may form matches now: always on an embedded server, while the
    /// lease holds on a cluster node.
    pub fn may_act(&self) -> bool {
        self.inner.ownership.get().is_none_or(|o| o.holds())
    }

    /// Every erasure from now on, as `(player, marker)`.
    pub fn subscribe_erasures(&self) -> tokio::sync::broadcast::Receiver<(PlayerId, PlayerId)> {
        self.inner.erasures.subscribe()
    }

    /// The points where a test runs its own code.
    #[cfg(test)]
    pub(crate) fn hooks(&self) -> &test_util::Hooks {
        &self.inner.hooks
    }

    /// The durable store.
    pub fn store(&self) -> &Store {
        &self.inner.store
    }

    /// A configured queue, or INVALID_ARGUMENT naming the known ones.
    pub fn queue(&self, field: &str, name: &str) -> Result<Arc<QueueInfo>, Rejection> {
        if name.is_empty() {
            return Err(Rejection::invalid(field, "must name a queue"));
        }
        let queues = self.queue_map();
        queues.get(&QueueId::from(name)).cloned().ok_or_else(|| {
            let known: Vec<&str> = queues.keys().map(QueueId::as_str).collect();
            Rejection::invalid(
                field,
                format!("unknown queue {name:?} (configured: {})", known.join(", ")),
            )
        })
    }

    /// A configured queue by id.
    pub fn queue_of(&self, id: &QueueId) -> Option<Arc<QueueInfo>> {
        self.queue_map().get(id).cloned()
    }

    /// All configured queues in name order (as configured now).
    pub fn queues(&self) -> Vec<Arc<QueueInfo>> {
        self.queue_map().values().cloned().collect()
    }

    fn queue_map(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<QueueId, Arc<QueueInfo>>> {
        self.inner.queues.read().unwrap_or_else(|p| p.into_inner())
    }

    /// Replaces the settings of the named queues (a config reload; the caller checked that
    /// neither the set of queues nor any pool or rating system changes). Requests that already
    /// hold a queue keep its old settings until they finish.
    pub fn replace_queue_configs(&self, configs: &[(QueueId, QueueConfig)]) {
        let mut queues = self.inner.queues.write().unwrap_or_else(|p| p.into_inner());
        for (id, config) in configs {
            if let Some(old) = queues.get(id) {
                let info = QueueInfo {
                    id: old.id.clone(),
                    pool: old.pool.clone(),
                    config: config.clone(),
                };
                queues.insert(id.clone(), Arc::new(info));
            }
        }
    }
}

/// Unix seconds now (wall clock; used for persisted times and inactivity).
pub fn unix_now() -> f64 {
    crate::store::wall_clock_unix()
}

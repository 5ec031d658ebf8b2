//! Sharded in-memory state behind one cheap, cloneable handle: players, tickets, matches and the
//! registry of game servers. Methods are synchronous and lock only inside.
//!
//! Architecture invariant: a player's whereabouts (idle / queued / in a match) live in exactly one
//! place, its [`PlayerSlot`]. Every transition that touches several players locks their slots in
//! ascending id order, checks, then writes all of them, so a transition is all-or-nothing and two
//! transitions can never deadlock. No lock here is ever held across an `.await`.

mod admin;
mod live;
mod segments;
mod servers;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use dashmap::DashMap;
use tokio::sync::watch;

use crate::config::{Config, QueueConfig};
use crate::ids::{MatchId, PlayerId, QueueId, TicketId};
use crate::ranking::RankingKind;
use crate::ranking::{LadderState, LeaderboardEntry, RankIndex, Tier};
use crate::rating::Skill;
use crate::records::ResultAck;
pub use crate::records::{PartyRecord, PendingPeriod, PoolRecord, party_key};
use crate::rejection::MatchRefusal;
pub use crate::rejection::Rejection;
use crate::results::{self, QueueRanker};
use crate::store::{JournalEntry, Store, StoreError, StoredMatch};

pub use admin::{MigrationOutcome, MigrationRow, ResetKind, SeasonOutcome};
pub use live::{BackfillError, Release, roles_map};
pub use servers::{Placement, ServerHandle, ServerRegistry};

/// Where a player is right now. Owned by the player's slot and nowhere else.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PlayerStatus {
    Idle,
    Queued(TicketId),
    InMatch(MatchId),
}

impl PlayerStatus {
    /// The name shown in `PlayerView.status`.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Idle => "idle",
            Self::Queued(_) => "queued",
            Self::InMatch(_) => "in_match",
        }
    }
}

/// A player's records per rating pool, in pool-name order. Not a map: most players are in one
/// or two pools, and a `BTreeMap` node for one entry is ~1 KB, which alone put a million players
/// over SPEC §10's 512 MiB (`matchmaker bench-memory`). The common single record is stored inline
/// in the player's slot (no allocation of its own); pool names are shared `Arc<str>`s.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PoolRecords(Records);

#[derive(Clone, Debug, Default, PartialEq)]
enum Records {
    #[default]
    None,
    One((Arc<str>, PoolRecord)),
    /// Two or more, sorted by pool name.
    Many(Vec<(Arc<str>, PoolRecord)>),
}

impl PoolRecords {
    /// The record in `pool`.
    pub fn get(&self, pool: &str) -> Option<&PoolRecord> {
        self.iter().find(|(p, _)| *p == pool).map(|(_, r)| r)
    }

    /// Whether the player has a record in `pool`.
    pub fn contains_key(&self, pool: &str) -> bool {
        self.get(pool).is_some()
    }

    /// Sets the record in `pool`.
    pub fn insert(&mut self, pool: Arc<str>, record: PoolRecord) {
        match &mut self.0 {
            Records::None => self.0 = Records::One((pool, record)),
            Records::One((p, r)) if *p == pool => *r = record,
            Records::One(_) => {
                let Records::One(first) = std::mem::take(&mut self.0) else {
                    unreachable!("matched One above");
                };
                let mut v = vec![first, (pool, record)];
                v.sort_by(|a, b| a.0.cmp(&b.0));
                self.0 = Records::Many(v);
            }
            Records::Many(v) => match v.binary_search_by(|(p, _)| p.cmp(&pool)) {
                Ok(i) => v[i].1 = record,
                Err(i) => v.insert(i, (pool, record)),
            },
        }
    }

    /// (pool, record) in pool-name order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &PoolRecord)> {
        let slice: &[(Arc<str>, PoolRecord)] = match &self.0 {
            Records::None => &[],
            Records::One(pair) => std::slice::from_ref(pair),
            Records::Many(v) => v,
        };
        slice.iter().map(|(p, r)| (&**p, r))
    }

    /// The persisted form.
    pub fn to_map(&self) -> BTreeMap<String, PoolRecord> {
        self.iter()
            .map(|(p, r)| (p.to_string(), r.clone()))
            .collect()
    }

    /// From the persisted form, with pool names taken from `names` when known.
    fn from_map(map: BTreeMap<String, PoolRecord>, names: &PoolNames) -> Self {
        let mut records = Self::default();
        for (p, r) in map {
            records.insert(names.get(&p), r);
        }
        records
    }
}

/// The shared name of every configured rating pool.
#[derive(Debug, Default)]
struct PoolNames(BTreeMap<String, Arc<str>>);

impl PoolNames {
    /// The shared name (a fresh one for a pool no queue uses any more).
    fn get(&self, pool: &str) -> Arc<str> {
        self.0.get(pool).cloned().unwrap_or_else(|| Arc::from(pool))
    }
}

/// Everything the server knows about a player. The persisted part is `pools`.
#[derive(Debug)]
pub struct PlayerState {
    pub status: PlayerStatus,
    pub pools: PoolRecords,
}

/// One player's lock. See the module invariant.
#[derive(Debug)]
pub struct PlayerSlot {
    pub id: PlayerId,
    state: Mutex<PlayerState>,
}

impl PlayerSlot {
    fn lock(&self) -> MutexGuard<'_, PlayerState> {
        // A panic while holding the lock cannot leave a half-written state (every writer checks
        // first and then assigns plain values), so a poisoned lock is still consistent.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The lifecycle of a ticket as clients see it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TicketState {
    Searching,
    Matched,
    Cancelled,
    Expired,
}

impl TicketState {
    /// The state's name as the proto spells it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Searching => "SEARCHING",
            Self::Matched => "MATCHED",
            Self::Cancelled => "CANCELLED",
            Self::Expired => "EXPIRED",
        }
    }
}

/// A formed match as clients and servers see it.
#[derive(Clone, Debug, PartialEq)]
pub struct Assignment {
    pub match_id: MatchId,
    pub queue: QueueId,
    pub teams: Vec<Vec<PlayerId>>,
    pub win_probability: Vec<f64>,
    pub region: Option<String>,
    /// Empty until a game server took the match.
    pub server_address: String,
    /// Pre-made parties (2+ players who queued together), for party skill (SPEC §3.6).
    pub parties: Vec<Vec<PlayerId>>,
    /// Per team, the players added by backfill so far (empty teams for a new match). They are
    /// also in `teams`.
    pub backfill: Vec<Vec<PlayerId>>,
    /// Players who left (named by `RequestBackfill`); still in `teams`, rated as abandons.
    pub left: Vec<PlayerId>,
}

/// The latest state of a ticket, published to its watchers.
#[derive(Clone, Debug, PartialEq)]
pub struct TicketView {
    pub state: TicketState,
    pub wait_seconds: f64,
    pub window: Option<(f64, f64)>,
    pub assignment: Option<Arc<Assignment>>,
    pub reason: String,
    /// While the ticket's match waits for every ticket to accept.
    pub ready: Option<ReadyView>,
}

/// A ready-check's progress as one ticket sees it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ReadyView {
    pub seconds_left: f64,
    pub accepted: u32,
    pub required: u32,
    pub accepted_by_ticket: bool,
}

impl TicketView {
    /// A SEARCHING view with nothing else set.
    pub fn searching(wait_seconds: f64, reason: String) -> Self {
        Self {
            state: TicketState::Searching,
            wait_seconds,
            window: None,
            assignment: None,
            reason,
            ready: None,
        }
    }
}

impl TicketView {
    /// A watcher's stream ends after this update: cancelled, expired, or matched onto a server.
    pub fn is_final(&self) -> bool {
        match self.state {
            TicketState::Searching => false,
            TicketState::Cancelled | TicketState::Expired => true,
            TicketState::Matched => self
                .assignment
                .as_ref()
                .is_some_and(|a| !a.server_address.is_empty()),
        }
    }
}

/// A ticket, its latest view, and the channel its watchers subscribe to. The channel holds only
/// the latest view, so a slow watcher never grows memory.
#[derive(Debug)]
pub struct TicketSlot {
    pub id: TicketId,
    pub queue: QueueId,
    pub players: Vec<PlayerId>,
    /// Seconds on the matchmaker clock.
    pub entered_at: f64,
    /// Matchmaker-clock seconds (as `f64` bits) of the last call that named the ticket, for the
    /// heartbeat (SPEC §5.4).
    last_seen: AtomicU64,
    view: Mutex<ViewCell>,
}

/// A ticket's latest view and, once someone has watched it, the channel that publishes it.
/// Most tickets are never watched, and a watch channel (its eight waker lists) cost ~310 bytes
/// of resident memory per ticket, live or retained after it finished (measured under
/// `loadgen --rate`); so the channel is made on first subscribe.
#[derive(Debug)]
struct ViewCell {
    current: TicketView,
    watchers: Option<watch::Sender<TicketView>>,
}

impl TicketSlot {
    fn cell(&self) -> MutexGuard<'_, ViewCell> {
        self.view.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The current view.
    pub fn view(&self) -> TicketView {
        self.cell().current.clone()
    }

    /// A receiver for `WatchTicket`, holding the current view.
    pub fn subscribe(&self) -> watch::Receiver<TicketView> {
        let mut cell = self.cell();
        let ViewCell { current, watchers } = &mut *cell;
        watchers
            .get_or_insert_with(|| watch::Sender::new(current.clone()))
            .subscribe()
    }

    /// Whether anyone is watching (SEARCHING updates are skipped when not).
    pub fn watched(&self) -> bool {
        self.cell()
            .watchers
            .as_ref()
            .is_some_and(|w| w.receiver_count() > 0)
    }

    /// Records a call naming this ticket at matchmaker time `now` (the heartbeat).
    pub fn touch(&self, now: f64) {
        self.last_seen
            .fetch_max(now.max(0.0).to_bits(), Ordering::AcqRel);
    }

    /// Seconds since anyone watched or named the ticket (0 while a watcher is connected).
    pub fn unattended_for(&self, now: f64) -> f64 {
        if self.watched() {
            return 0.0;
        }
        now - f64::from_bits(self.last_seen.load(Ordering::Acquire))
    }

    /// Replaces the view; a final view is never replaced by a non-final one.
    pub fn publish(&self, next: TicketView) {
        let mut cell = self.cell();
        if cell.current.is_final() || cell.current == next {
            return;
        }
        if let Some(watchers) = &cell.watchers {
            // Under the cell's lock, so a subscriber sees either the old view then this one,
            // or this one first; never a view older than `current`.
            watchers.send_replace(next.clone());
        }
        cell.current = next;
    }
}

/// Match lifecycle (SPEC §5.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MatchPhase {
    /// Formed in a queue with a ready-check; waits for every ticket to accept before it goes to
    /// a game server (not persisted: a restart ends it, its players are idle again).
    ReadyCheck,
    Formed,
    Allocated,
    Started,
    /// A result passed validation and is being journaled: nothing else may change the match
    /// (backfill, cancel, dissolve) until it lands, or fails and the phase goes back.
    Completing,
    Completed,
    Cancelled,
}

impl MatchPhase {
    /// The phase's name as the proto spells it.
    pub fn name(self) -> &'static str {
        match self {
            Self::ReadyCheck => "READY_CHECK",
            Self::Formed => "FORMED",
            Self::Allocated => "ALLOCATED",
            Self::Started => "STARTED",
            Self::Completing => "COMPLETING",
            Self::Completed => "COMPLETED",
            Self::Cancelled => "CANCELLED",
        }
    }
}

/// What [`State::try_allocate`] did with a formed match.
#[derive(Debug)]
pub enum Allocation {
    /// Placed on a server: persist the match, then deliver the placement.
    Placed(Placement),
    /// No longer waiting for a server (a result, a cancel or a timeout ended it).
    Ended,
    /// No connected server has room; try again next tick.
    NoServer,
}

/// A formed match.
#[derive(Debug)]
pub struct MatchSlot {
    pub id: MatchId,
    pub queue: QueueId,
    pub quality: f64,
    /// Seconds on the matchmaker clock.
    pub formed_at: f64,
    /// Unix seconds when it formed (persisted).
    pub formed_unix: f64,
    inner: Mutex<MatchInner>,
    /// The sled segment holding its newest copy ([`segments::NOT_STORED`] before a server took
    /// it, [`segments::ENDED`] after). Changed only under `Inner::segments`.
    segment: AtomicU64,
    /// Set once, by the one report that applies the result; duplicates wait on it and get the
    /// same acknowledgement.
    pub result: tokio::sync::OnceCell<Arc<ResultAck>>,
}

#[derive(Debug)]
struct MatchInner {
    phase: MatchPhase,
    assignment: Arc<Assignment>,
    /// The tickets whose players are in the match (backfill adds more).
    tickets: Vec<TicketId>,
    /// Roles each player declared, for backfill under role rules (empty in queues without
    /// roles; a player who declared none counts as "any role"). Stored with the match.
    roles: BTreeMap<PlayerId, Vec<String>>,
}

impl MatchSlot {
    fn lock(&self) -> MutexGuard<'_, MatchInner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Current phase.
    pub fn phase(&self) -> MatchPhase {
        self.lock().phase
    }

    /// Current assignment (teams, probabilities, server once allocated).
    pub fn assignment(&self) -> Arc<Assignment> {
        self.lock().assignment.clone()
    }

    /// The tickets whose players are in the match.
    pub fn tickets(&self) -> Vec<TicketId> {
        self.lock().tickets.clone()
    }
}

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
    queues: BTreeMap<QueueId, Arc<QueueInfo>>,
    players: DashMap<PlayerId, Arc<PlayerSlot>>,
    /// Server-minted keys, so the fast id hasher (players keep SipHash: clients choose those).
    tickets: DashMap<TicketId, Arc<TicketSlot>, crate::matching::IdHash>,
    matches: DashMap<MatchId, Arc<MatchSlot>, crate::matching::IdHash>,
    servers: Mutex<ServerRegistry>,
    store: Store,
    /// Live matches per sled segment; held while a segment write is decided and made.
    segments: Mutex<segments::Segments>,
    /// Party skills: party key → pool → record.
    parties: DashMap<String, BTreeMap<String, PartyRecord>>,
    /// Leaderboard order per rating pool (players with at least one record there).
    ranks: BTreeMap<String, Mutex<RankIndex>>,
    /// The rating system of each pool (validated equal across the pool's queues).
    pool_systems: BTreeMap<String, crate::rating::SystemConfig>,
    pool_names: PoolNames,
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
        for record in store.load_players()? {
            let (id, pools) = record?;
            let pools = PoolRecords::from_map(pools, &pool_names);
            players.insert(
                id.clone(),
                Arc::new(PlayerSlot {
                    id,
                    state: Mutex::new(PlayerState {
                        status: PlayerStatus::Idle,
                        pools,
                    }),
                }),
            );
        }
        Ok(Self {
            inner: Arc::new(Inner {
                config,
                queues,
                players,
                tickets: DashMap::default(),
                matches: DashMap::default(),
                servers: Mutex::new(ServerRegistry::default()),
                parties: store.load_parties()?.into_iter().collect(),
                store,
                segments: Mutex::new(segments::Segments::after(0)),
                ranks,
                pool_systems,
                pool_names,
            }),
        })
    }

    /// Rebuilds every pool's leaderboard from the players in memory (after recovery).
    pub fn rebuild_rank_indexes(&self) {
        let mut rows: Vec<(String, LeaderboardEntry)> = Vec::new();
        for entry in self.inner.players.iter() {
            let state = entry.value().lock();
            for (pool, r) in state.pools.iter() {
                if let Some(row) = self.leaderboard_entry(entry.key(), pool, r) {
                    rows.push((pool.to_string(), row));
                }
            }
        }
        for (pool, row) in rows {
            self.rank_index(&pool).replace(None, row);
        }
    }

    /// The validated config the server runs on.
    pub fn config(&self) -> &Config {
        &self.inner.config
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
        self.inner
            .queues
            .get(&QueueId::from(name))
            .cloned()
            .ok_or_else(|| {
                let known: Vec<&str> = self.inner.queues.keys().map(QueueId::as_str).collect();
                Rejection::invalid(
                    field,
                    format!("unknown queue {name:?} (configured: {})", known.join(", ")),
                )
            })
    }

    /// A configured queue by id.
    pub fn queue_of(&self, id: &QueueId) -> Option<Arc<QueueInfo>> {
        self.inner.queues.get(id).cloned()
    }

    /// All configured queues in name order.
    pub fn queues(&self) -> impl Iterator<Item = &Arc<QueueInfo>> {
        self.inner.queues.values()
    }

    /// Number of known players.
    pub fn player_count(&self) -> usize {
        self.inner.players.len()
    }

    /// The player's status and pool record (`None` when never rated in that pool).
    pub fn player(&self, id: &PlayerId, pool: &str) -> (PlayerStatus, Option<PoolRecord>) {
        let Some(slot) = self.slot_if_known(id) else {
            return (PlayerStatus::Idle, None);
        };
        let state = slot.lock();
        (state.status.clone(), state.pools.get(pool).cloned())
    }

    /// The rating the matcher uses for a player in a queue: the stored one, or the system's initial.
    pub fn skill_for_matching(&self, id: &PlayerId, queue: &QueueInfo) -> Skill {
        self.player(id, &queue.pool)
            .1
            .map_or_else(|| queue.config.rating.initial(), |r| r.skill)
    }

    fn slot_if_known(&self, id: &PlayerId) -> Option<Arc<PlayerSlot>> {
        self.inner.players.get(id).map(|r| r.value().clone())
    }

    fn slot(&self, id: &PlayerId) -> Arc<PlayerSlot> {
        // A read lock for a player seen before (every player of a match being formed, and most
        // players entering a queue); the shard's write lock only to add one.
        if let Some(slot) = self.inner.players.get(id) {
            return slot.value().clone();
        }
        self.inner
            .players
            .entry(id.clone())
            .or_insert_with(|| {
                Arc::new(PlayerSlot {
                    id: id.clone(),
                    state: Mutex::new(PlayerState {
                        status: PlayerStatus::Idle,
                        pools: PoolRecords::default(),
                    }),
                })
            })
            .clone()
    }

    /// Locks the slots of `ids` in ascending id order (the deadlock-free order).
    fn lock_players<'a>(slots: &'a [Arc<PlayerSlot>]) -> Vec<MutexGuard<'a, PlayerState>> {
        debug_assert!(slots.windows(2).all(|w| w[0].id < w[1].id));
        slots.iter().map(|s| s.lock()).collect()
    }

    fn sorted_slots(&self, ids: &[PlayerId]) -> Vec<Arc<PlayerSlot>> {
        let mut slots: Vec<_> = ids.iter().map(|id| self.slot(id)).collect();
        slots.sort_by(|a, b| a.id.cmp(&b.id));
        slots
    }

    /// Creates a SEARCHING ticket for `players` if every one of them is idle; otherwise nothing
    /// changes and the first busy player is named.
    ///
    /// Also returns each player's skill for matching in `queue` (in `players`' order), read
    /// under the same locks: one map lookup per player instead of two.
    pub fn create_ticket(
        &self,
        queue: &QueueInfo,
        players: Vec<PlayerId>,
        ticket_id: TicketId,
        entered_at: f64,
    ) -> Result<(Arc<TicketSlot>, Vec<Skill>), Rejection> {
        let slots = self.sorted_slots(&players);
        let mut guards = Self::lock_players(&slots);
        for (slot, guard) in slots.iter().zip(&guards) {
            match &guard.status {
                PlayerStatus::Idle => {}
                PlayerStatus::Queued(t) => {
                    return Err(Rejection::AlreadyQueued {
                        player: slot.id.clone(),
                        ticket: t.clone(),
                    });
                }
                PlayerStatus::InMatch(m) => {
                    return Err(Rejection::InMatch {
                        player: slot.id.clone(),
                        match_id: m.clone(),
                    });
                }
            }
        }
        let skills = players
            .iter()
            .map(|p| {
                let at = slots
                    .binary_search_by(|s| s.id.cmp(p))
                    .expect("every player has a slot");
                guards[at]
                    .pools
                    .get(&queue.pool)
                    .map_or_else(|| queue.config.rating.initial(), |r| r.skill)
            })
            .collect();
        let view = Mutex::new(ViewCell {
            current: TicketView::searching(0.0, String::new()),
            watchers: None,
        });
        let ticket = Arc::new(TicketSlot {
            id: ticket_id.clone(),
            queue: queue.id.clone(),
            players,
            entered_at,
            last_seen: AtomicU64::new(entered_at.max(0.0).to_bits()),
            view,
        });
        self.inner.tickets.insert(ticket_id.clone(), ticket.clone());
        for guard in &mut guards {
            guard.status = PlayerStatus::Queued(ticket_id.clone());
        }
        Ok((ticket, skills))
    }

    /// A ticket by id.
    pub fn ticket(&self, id: &TicketId) -> Result<Arc<TicketSlot>, Rejection> {
        self.inner
            .tickets
            .get(id)
            .map(|r| r.value().clone())
            .ok_or_else(|| Rejection::NotFound {
                what: "ticket",
                id: id.to_string(),
            })
    }

    /// Ends a waiting ticket (cancelled or expired): its players become idle, watchers get the
    /// final update. Called only by the matchmaker loop, after removing the ticket from its pool.
    pub fn end_ticket(&self, ticket: &TicketSlot, state: TicketState, now: f64, reason: String) {
        let slots: Vec<_> = {
            let mut s: Vec<_> = ticket
                .players
                .iter()
                .filter_map(|p| self.slot_if_known(p))
                .collect();
            s.sort_by(|a, b| a.id.cmp(&b.id));
            s
        };
        let mut guards = Self::lock_players(&slots);
        for guard in &mut guards {
            if guard.status == PlayerStatus::Queued(ticket.id.clone()) {
                guard.status = PlayerStatus::Idle;
            }
        }
        ticket.publish(TicketView {
            state,
            reason,
            ..TicketView::searching(now - ticket.entered_at, String::new())
        });
    }

    /// Records a formed match: its players move from queued to in-match and its tickets to
    /// MATCHED, all under the players' locks. Called only by the matchmaker loop.
    /// With `ready_check` the match starts in [`MatchPhase::ReadyCheck`] and its tickets show
    /// that progress; `roles` are the players' declared roles (for backfill).
    pub fn form_match(
        &self,
        tickets: &[Arc<TicketSlot>],
        assignment: Assignment,
        quality: f64,
        now: f64,
        ready_check: Option<f64>,
        roles: BTreeMap<PlayerId, Vec<String>>,
    ) -> Arc<MatchSlot> {
        let assignment = Arc::new(assignment);
        let slot = Arc::new(MatchSlot {
            id: assignment.match_id.clone(),
            queue: assignment.queue.clone(),
            quality,
            formed_at: now,
            formed_unix: unix_now(),
            inner: Mutex::new(MatchInner {
                phase: if ready_check.is_some() {
                    MatchPhase::ReadyCheck
                } else {
                    MatchPhase::Formed
                },
                assignment: assignment.clone(),
                tickets: tickets.iter().map(|t| t.id.clone()).collect(),
                roles,
            }),
            segment: AtomicU64::new(segments::NOT_STORED),
            result: tokio::sync::OnceCell::new(),
        });
        let ids: Vec<PlayerId> = tickets
            .iter()
            .flat_map(|t| t.players.iter().cloned())
            .collect();
        let slots = self.sorted_slots(&ids);
        let mut guards = Self::lock_players(&slots);
        self.inner.matches.insert(slot.id.clone(), slot.clone());
        for guard in &mut guards {
            guard.status = PlayerStatus::InMatch(slot.id.clone());
        }
        drop(guards);
        let required = tickets.len() as u32;
        for ticket in tickets {
            ticket.publish(TicketView {
                state: TicketState::Matched,
                assignment: Some(assignment.clone()),
                ready: ready_check.map(|seconds_left| ReadyView {
                    seconds_left,
                    accepted: 0,
                    required,
                    accepted_by_ticket: false,
                }),
                ..TicketView::searching(now - ticket.entered_at, String::new())
            });
        }
        slot
    }

    /// A match by id.
    pub fn match_slot(&self, id: &MatchId) -> Result<Arc<MatchSlot>, Rejection> {
        self.inner
            .matches
            .get(id)
            .map(|r| r.value().clone())
            .ok_or_else(|| Rejection::NotFound {
                what: "match",
                id: id.to_string(),
            })
    }

    /// Places a FORMED match on a registered server of its region (round-robin), reserving room
    /// in the server's stream. The caller persists the allocation ([`State::persist_matches`])
    /// and then delivers it ([`State::deliver_when_durable`]).
    pub fn try_allocate(&self, m: &MatchSlot) -> Allocation {
        let assignment = {
            let inner = m.lock();
            if inner.phase != MatchPhase::Formed {
                return Allocation::Ended;
            }
            inner.assignment.clone()
        };
        let placed = {
            let mut registry = self.inner.servers.lock().unwrap_or_else(|p| p.into_inner());
            let before = registry.len();
            let chosen = registry.offer(&assignment);
            // `offer` drops disconnected servers first; the gauge follows when it did (a lookup
            // in the metrics registry per allocated match otherwise).
            if registry.len() != before {
                metrics::gauge!(crate::telemetry::SERVERS_CONNECTED).set(registry.len() as f64);
            }
            chosen
        };
        let Some(placement) = placed else {
            return Allocation::NoServer;
        };
        let allocated = placement.assignment.clone();
        {
            let mut inner = m.lock();
            if inner.phase != MatchPhase::Formed {
                // A result or a cancel came in meanwhile: nothing to send, room given back.
                drop(inner);
                drop(placement);
                self.inner
                    .servers
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .release(&allocated.server_address);
                return Allocation::Ended;
            }
            inner.phase = MatchPhase::Allocated;
            inner.assignment = allocated.clone();
        }
        for id in m.tickets() {
            if let Ok(ticket) = self.ticket(&id) {
                let mut view = ticket.view();
                view.assignment = Some(allocated.clone());
                view.ready = None;
                ticket.publish(view);
            }
        }
        Allocation::Placed(placement)
    }

    /// Hands this tick's placements to their servers once everything written so far (their
    /// matches among it) is durable: a game server never gets a match a crash could lose. The
    /// flush runs on the runtime, so the loop does not wait for the disk.
    pub fn deliver_when_durable(
        &self,
        placements: Vec<Placement>,
        runtime: &tokio::runtime::Handle,
    ) {
        if placements.is_empty() {
            return;
        }
        let store = self.inner.store.clone();
        runtime.spawn(async move {
            if let Err(e) = store.flush_async().await {
                // The store is failing; the server still gets its matches (their results may
                // be refused after a crash, which the store error already warns about).
                tracing::error!(error = %e, matches = placements.len(), "could not flush allocated matches");
                crate::telemetry::store_error("persist_matches");
            }
            for p in placements {
                p.deliver();
            }
        });
    }

    /// Registers a game server; matches flow into the returned receiver.
    pub fn register_server(
        &self,
        address: String,
        region: String,
        capacity: u32,
    ) -> tokio::sync::mpsc::Receiver<Arc<Assignment>> {
        let (tx, rx) = tokio::sync::mpsc::channel(self.inner.config.server.serve_matches_buffer);
        let mut registry = self.inner.servers.lock().unwrap_or_else(|p| p.into_inner());
        registry.register(ServerHandle::new(address, region, capacity, tx));
        metrics::gauge!(crate::telemetry::SERVERS_CONNECTED).set(registry.len() as f64);
        rx
    }

    /// Drops every server stream (graceful shutdown closes them this way).
    pub fn close_server_streams(&self) {
        self.inner
            .servers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
    }

    /// Bytes the store uses on disk.
    pub fn store_bytes(&self) -> u64 {
        self.inner.store.size_on_disk()
    }

    /// Forgets a finished ticket (called by the loop after the retention time).
    pub fn forget_ticket(&self, id: &TicketId) {
        self.inner.tickets.remove(id);
    }

    /// Records live matches (newly formed, or newly allocated to a server) in one sled batch;
    /// the loop calls this once per tick. Durable with sled's next flush (at most 500 ms, or the
    /// next result's flush): a match lost to a crash in that window only means its players
    /// re-queue.
    pub fn persist_matches(&self, matches: &[Arc<MatchSlot>]) {
        if matches.is_empty() {
            return;
        }
        // Encoded before the segments lock, which result handlers also take.
        let encoded: Result<Vec<Vec<u8>>, _> = matches
            .iter()
            .map(|m| crate::store::encode_match(&Self::stored_match(m)))
            .collect();
        let encoded = match encoded {
            Ok(encoded) => encoded,
            Err(e) => {
                tracing::error!(matches = matches.len(), error = %e, "could not persist matches");
                crate::telemetry::store_error("persist_matches");
                return;
            }
        };
        let mut segments = self.lock_segments();
        // A match whose result (or cancel) came in meanwhile is not written again.
        let (live, encoded): (Vec<&Arc<MatchSlot>>, Vec<Vec<u8>>) = matches
            .iter()
            .zip(encoded)
            .filter(|(m, _)| m.segment.load(Ordering::Relaxed) != segments::ENDED)
            .unzip();
        let (written, dropped) = Self::place_in_segments(&mut segments, &live, &encoded);
        if written.is_empty() {
            return;
        }
        if let Err(e) = self.inner.store.put_segments(&written, &dropped) {
            tracing::error!(matches = encoded.len(), error = %e, "could not persist matches");
            crate::telemetry::store_error("persist_matches");
        }
    }

    /// A live match ended: it is never written again, and its segment goes once no match in it
    /// is live. A match that ended without a result is marked, so no older copy of it comes back
    /// at start (one with a result is recognised by its journaled result).
    fn forget_stored_match(&self, m: &MatchSlot, with_result: bool) {
        let mut segments = self.lock_segments();
        let previous = m.segment.swap(segments::ENDED, Ordering::Relaxed);
        if previous == segments::NOT_STORED || previous == segments::ENDED {
            return;
        }
        let dropped: Vec<u64> = segments.release(previous).into_iter().collect();
        let ended = if with_result {
            Vec::new()
        } else {
            vec![m.id.clone()]
        };
        if ended.is_empty() && dropped.is_empty() {
            return;
        }
        if let Err(e) = self.inner.store.end_matches(&ended, &dropped) {
            tracing::error!(match_id = %m.id, error = %e, "could not forget a finished match");
            crate::telemetry::store_error("end_match");
        }
    }

    /// Splits `encoded` (parallel to `slots`) into segments ([`crate::store::segment_bounds`]),
    /// moves each slot to its new segment, and returns the segments to write and those left
    /// with no live match. Call with the segments lock held, and write what it returns under it.
    fn place_in_segments<'a, M: AsRef<MatchSlot>>(
        segments: &mut segments::Segments,
        slots: &[M],
        encoded: &'a [Vec<u8>],
    ) -> (Vec<crate::store::Segment<'a>>, Vec<u64>) {
        let mut written = Vec::new();
        let mut dropped = Vec::new();
        let sizes: Vec<usize> = encoded.iter().map(Vec::len).collect();
        for range in crate::store::segment_bounds(&sizes) {
            let (slots, chunk) = (&slots[range.clone()], &encoded[range]);
            let previous: Vec<u64> = slots
                .iter()
                .map(|m| m.as_ref().segment.load(Ordering::Relaxed))
                .collect();
            let (id, emptied) = segments.write(&previous);
            for m in slots {
                m.as_ref().segment.store(id, Ordering::Relaxed);
            }
            written.push((id, chunk));
            dropped.extend(emptied);
        }
        (written, dropped)
    }

    fn lock_segments(&self) -> MutexGuard<'_, segments::Segments> {
        self.inner
            .segments
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    fn stored_match(m: &MatchSlot) -> StoredMatch {
        let inner = m.lock();
        let a = &inner.assignment;
        StoredMatch {
            match_id: m.id.clone(),
            queue: m.queue.to_string(),
            teams: a.teams.clone(),
            win_probability: a.win_probability.clone(),
            region: a.region.clone(),
            server_address: a.server_address.clone(),
            formed_unix: m.formed_unix,
            parties: a.parties.clone(),
            backfill: a.backfill.clone(),
            left: a.left.clone(),
            roles: inner.roles.clone(),
        }
    }

    /// Cancels every live match formed more than `timeout` seconds ago that has no result.
    /// Returns how many.
    pub fn cancel_stale_matches(&self, now_unix: f64, timeout: f64) -> usize {
        let stale: Vec<Arc<MatchSlot>> = self
            .inner
            .matches
            .iter()
            .filter(|e| now_unix - e.value().formed_unix > timeout)
            .map(|e| e.value().clone())
            .collect();
        stale
            .iter()
            .filter(|m| self.cancel_match(m, "match timeout: no result").is_ok())
            .count()
    }

    /// Cancels a live match (a game server's `CancelMatch`): no result, players free again.
    pub fn cancel_match(&self, m: &MatchSlot, reason: &str) -> Result<(), Rejection> {
        let assignment = {
            let mut inner = m.lock();
            match inner.phase {
                MatchPhase::Completed => {
                    return Err(Rejection::for_match(&m.id, MatchRefusal::Completed));
                }
                MatchPhase::Completing => {
                    return Err(Rejection::for_match(&m.id, MatchRefusal::ResultInFlight));
                }
                MatchPhase::Cancelled => return Ok(()),
                _ => {}
            }
            inner.phase = MatchPhase::Cancelled;
            inner.assignment.clone()
        };
        self.release_players(m, &assignment, |t| Release::End {
            state: TicketState::Cancelled,
            reason: "the match was cancelled by its game server".into(),
            wait_seconds: t.view().wait_seconds,
        });
        if !assignment.server_address.is_empty() {
            self.inner
                .servers
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .release(&assignment.server_address);
        }
        self.forget_stored_match(m, false);
        self.inner.matches.remove(&m.id);
        tracing::info!(match_id = %m.id, reason, "match cancelled");
        metrics::counter!(crate::telemetry::MATCHES_CANCELLED, "queue" => m.queue.to_string(), "reason" => "server")
            .increment(1);
        Ok(())
    }

    /// Dissolves a match no server took in time. Its tickets go back to SEARCHING (the caller
    /// puts them at the front of their pool); players of tickets no longer known go idle.
    /// Returns false if the match was allocated meanwhile.
    pub fn dissolve_unallocated(&self, m: &MatchSlot, now: f64) -> bool {
        let assignment = {
            let mut inner = m.lock();
            if inner.phase != MatchPhase::Formed {
                return false;
            }
            inner.phase = MatchPhase::Cancelled;
            inner.assignment.clone()
        };
        self.release_players(m, &assignment, |t| Release::Requeue {
            reason: "no game server took the match in time; back at the front of the queue".into(),
            wait_seconds: now - t.entered_at,
        });
        self.forget_stored_match(m, false);
        self.inner.matches.remove(&m.id);
        metrics::counter!(crate::telemetry::MATCHES_CANCELLED, "queue" => m.queue.to_string(), "reason" => "allocation_timeout")
            .increment(1);
        true
    }

    /// Frees a match's players, ticket by ticket as `decide` says: back to SEARCHING on their
    /// ticket (the caller puts the ticket back in its pool) or ended, players idle.
    fn release_players(
        &self,
        m: &MatchSlot,
        a: &Assignment,
        decide: impl Fn(&TicketSlot) -> Release,
    ) {
        let tickets: Vec<(Arc<TicketSlot>, Release)> = m
            .tickets()
            .iter()
            .filter_map(|t| self.ticket(t).ok())
            .map(|t| {
                let r = decide(&t);
                (t, r)
            })
            .collect();
        let ids: Vec<PlayerId> = a.teams.iter().flatten().cloned().collect();
        let slots = self.sorted_slots(&ids);
        let mut guards = Self::lock_players(&slots);
        for (slot, guard) in slots.iter().zip(&mut guards) {
            if guard.status != PlayerStatus::InMatch(m.id.clone()) {
                continue;
            }
            let own_ticket = tickets.iter().find(|(t, _)| t.players.contains(&slot.id));
            guard.status = match own_ticket {
                Some((t, Release::Requeue { .. })) => PlayerStatus::Queued(t.id.clone()),
                _ => PlayerStatus::Idle,
            };
        }
        drop(guards);
        for (t, release) in tickets {
            t.publish(match release {
                Release::Requeue {
                    reason,
                    wait_seconds,
                } => TicketView::searching(wait_seconds, reason),
                Release::End {
                    state,
                    reason,
                    wait_seconds,
                } => TicketView {
                    state,
                    reason,
                    ..TicketView::searching(wait_seconds, String::new())
                },
            });
        }
    }

    /// The party's skill in the queue's pool, created from its members' skills on first use
    /// (and persisted then).
    pub fn party_skill(
        &self,
        queue: &QueueInfo,
        members: &[PlayerId],
    ) -> Result<Skill, StoreError> {
        let key = party_key(members);
        if let Some(r) = self
            .inner
            .parties
            .get(&key)
            .and_then(|p| p.get(&queue.pool).cloned())
        {
            return Ok(r.skill);
        }
        let skills: Vec<Skill> = members
            .iter()
            .map(|p| self.skill_for_matching(p, queue))
            .collect();
        let record = PartyRecord {
            skill: crate::rating::party_initial(&queue.config.rating, &skills),
            games: 0,
            last_played_unix: None,
        };
        let pools = {
            let mut entry = self.inner.parties.entry(key.clone()).or_default();
            entry.entry(queue.pool.clone()).or_insert(record.clone());
            entry.clone()
        };
        self.inner.store.put_parties(&[(&key, &pools)])?;
        Ok(pools[&queue.pool].skill)
    }

    /// A party's record in a pool, if it has one.
    pub fn party(&self, pool: &str, members: &[PlayerId]) -> Option<PartyRecord> {
        self.inner
            .parties
            .get(&party_key(members))
            .and_then(|p| p.get(pool).cloned())
    }

    /// A pool record for a player never rated in the pool.
    pub fn initial_record(&self, queue: &QueueInfo) -> PoolRecord {
        let ladder = LadderState::new(&self.inner.config.ranking.ladder);
        let (rank_points, ladder_floor) = match queue.config.ranking {
            RankingKind::None | RankingKind::Inversus => (0, 0),
            RankingKind::Ladder => (ladder.rp, ladder.floor_rp),
        };
        PoolRecord {
            skill: queue.config.rating.initial(),
            rank_points,
            games: 0,
            wins: 0,
            last_played_unix: None,
            ladder_floor,
            win_streak: 0,
            period: None,
        }
    }

    /// The leaderboard row of a record; `None` for a pool no queue uses any more (records of a
    /// removed queue are kept, not ranked).
    fn leaderboard_entry(
        &self,
        player: &PlayerId,
        pool: &str,
        r: &PoolRecord,
    ) -> Option<LeaderboardEntry> {
        let system = self.inner.pool_systems.get(pool)?;
        Some(LeaderboardEntry {
            player: player.clone(),
            rank_points: r.rank_points,
            conservative_rating: system.display(&r.skill).low,
            wins: r.wins,
        })
    }

    /// Players of a queue's pool in leaderboard order: (total ranked, the requested page).
    pub fn leaderboard(
        &self,
        queue: &QueueInfo,
        offset: usize,
        limit: usize,
    ) -> (usize, Vec<(PlayerId, PoolRecord)>) {
        let (total, ids): (usize, Vec<PlayerId>) = {
            let index = self.rank_index(&queue.pool);
            let ids = index
                .page(offset, limit)
                .into_iter()
                .map(|e| e.player.clone())
                .collect();
            (index.len(), ids)
        };
        let page = ids
            .into_iter()
            .filter_map(|p| {
                let record = self.player(&p, &queue.pool).1?;
                Some((p, record))
            })
            .collect();
        (total, page)
    }

    /// The ladder tier of a player (Grandweaver needs the player's rank among Masters).
    pub fn tier(&self, queue: &QueueInfo, player: &PlayerId, record: &PoolRecord) -> Option<Tier> {
        if queue.config.ranking != RankingKind::Ladder {
            return None;
        }
        let ladder = &self.inner.config.ranking.ladder;
        let entry = self.leaderboard_entry(player, &queue.pool, record)?;
        let index = self.rank_index(&queue.pool);
        Some(
            ladder
                .tier_in(&index, &entry)
                .unwrap_or_else(|| ladder.tier_of(record.rank_points, None))
                .clone(),
        )
    }

    fn rank_index(&self, pool: &str) -> MutexGuard<'_, RankIndex> {
        self.inner
            .ranks
            .get(pool)
            .expect("every pool has a rank index")
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// Validates a report, computes its journal entry from the players' current records and
    /// claims the match for it: the match is [`MatchPhase::Completing`] until
    /// [`State::apply_result`] applies the entry once it is durable, or [`State::unclaim`] gives
    /// the match back if journaling failed. Changes nothing else. Returns the phase to give back.
    ///
    /// The claim is what keeps the entry true: a backfill, cancel or allocation timeout that
    /// landed between computing the entry and applying it would leave players in a match that no
    /// longer exists, or end a match twice. If the roster changed while the entry was computed,
    /// it is computed again.
    pub fn prepare_result(
        &self,
        m: &MatchSlot,
        placements: &[u32],
        performance: &BTreeMap<String, f64>,
        abandoned: &[String],
    ) -> Result<(JournalEntry, MatchPhase), Rejection> {
        const ATTEMPTS: usize = 8;
        for _ in 0..ATTEMPTS {
            let assignment = Self::resultable(m)?;
            let entry = self.compute_result(m, &assignment, placements, performance, abandoned)?;
            let mut inner = m.lock();
            if Arc::ptr_eq(&inner.assignment, &assignment)
                && matches!(
                    inner.phase,
                    MatchPhase::Formed | MatchPhase::Allocated | MatchPhase::Started
                )
            {
                let previous = std::mem::replace(&mut inner.phase, MatchPhase::Completing);
                return Ok((entry, previous));
            }
        }
        Err(Rejection::for_match(&m.id, MatchRefusal::KeptChanging))
    }

    /// Gives a claimed match back after its result could not be journaled.
    pub fn unclaim(&self, m: &MatchSlot, previous: MatchPhase) {
        let mut inner = m.lock();
        if inner.phase == MatchPhase::Completing {
            inner.phase = previous;
        }
    }

    /// The assignment of a match that can take a result, or why it cannot.
    fn resultable(m: &MatchSlot) -> Result<Arc<Assignment>, Rejection> {
        let inner = m.lock();
        match inner.phase {
            MatchPhase::Formed | MatchPhase::Allocated | MatchPhase::Started => {}
            MatchPhase::Completing => {
                return Err(Rejection::for_match(&m.id, MatchRefusal::ResultInFlight));
            }
            MatchPhase::ReadyCheck => {
                return Err(Rejection::for_match(
                    &m.id,
                    MatchRefusal::AwaitingReadyCheck,
                ));
            }
            MatchPhase::Cancelled => {
                return Err(Rejection::for_match(&m.id, MatchRefusal::Cancelled));
            }
            MatchPhase::Completed => {
                return Err(Rejection::for_match(&m.id, MatchRefusal::Completed));
            }
        }
        Ok(inner.assignment.clone())
    }

    /// The journal entry of a result for `assignment`, from the players' and parties' current
    /// records: [`results::compute`] at the wall clock's time.
    fn compute_result(
        &self,
        m: &MatchSlot,
        assignment: &Assignment,
        placements: &[u32],
        performance: &BTreeMap<String, f64>,
        abandoned: &[String],
    ) -> Result<JournalEntry, Rejection> {
        let queue = self
            .queue_of(&m.queue)
            .ok_or_else(|| Rejection::for_match(&m.id, MatchRefusal::QueueGone))?;
        let before = results::Before {
            players: assignment
                .teams
                .iter()
                .map(|team| {
                    team.iter()
                        .map(|p| {
                            self.player(p, &queue.pool)
                                .1
                                .unwrap_or_else(|| self.initial_record(&queue))
                        })
                        .collect()
                })
                .collect(),
            parties: assignment
                .parties
                .iter()
                .map(|members| self.party(&queue.pool, members))
                .collect(),
        };
        let ranker = QueueRanker::new(
            queue.config.ranking,
            &self.inner.config.ranking,
            &queue.config.rating,
        );
        let now = unix_now();
        let computed = results::compute(
            &queue.config.rating,
            &ranker,
            &results::MatchFacts {
                queue: queue.id.as_str(),
                teams: &assignment.teams,
                parties: &assignment.parties,
                left: &assignment.left,
            },
            &results::Report {
                placements,
                performance,
                abandoned,
            },
            &before,
            now,
        )?;
        Ok(JournalEntry {
            match_id: m.id.clone(),
            applied_unix: now,
            pool: queue.pool.clone(),
            records: computed.records,
            parties: computed.parties,
            ack: computed.ack,
            kind: crate::store::EntryKind::Result,
            season: None,
        })
    }

    /// Applies a durable journal entry: every player's record at once, players free again, the
    /// match completed and forgotten (its acknowledgement stays in the store for duplicates).
    pub fn apply_result(&self, m: &MatchSlot, entry: &JournalEntry) {
        self.apply_records(entry);
        let ids: Vec<PlayerId> = entry.records.iter().map(|(p, _)| p.clone()).collect();
        let slots = self.sorted_slots(&ids);
        let mut guards = Self::lock_players(&slots);
        for guard in &mut guards {
            if guard.status == PlayerStatus::InMatch(m.id.clone()) {
                guard.status = PlayerStatus::Idle;
            }
        }
        drop(guards);
        let server = {
            let mut inner = m.lock();
            inner.phase = MatchPhase::Completed;
            inner.assignment.server_address.clone()
        };
        if !server.is_empty() {
            self.inner
                .servers
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .release(&server);
        }
        self.forget_stored_match(m, true);
        self.inner.matches.remove(&m.id);
    }

    /// Writes an entry's records into memory (all players under their locks).
    fn apply_records(&self, entry: &JournalEntry) {
        let ids: Vec<PlayerId> = entry.records.iter().map(|(p, _)| p.clone()).collect();
        let slots = self.sorted_slots(&ids);
        let by_id: BTreeMap<&PlayerId, &PoolRecord> =
            entry.records.iter().map(|(p, r)| (p, r)).collect();
        let pool = self.inner.pool_names.get(&entry.pool);
        let mut guards = Self::lock_players(&slots);
        // The leaderboard changes under the same player locks (lock order: players, then the
        // pool's index), so a player's board entry always matches its record.
        let mut index = self
            .inner
            .pool_systems
            .contains_key(&entry.pool)
            .then(|| self.rank_index(&entry.pool));
        for (slot, guard) in slots.iter().zip(&mut guards) {
            let Some(r) = by_id.get(&slot.id) else {
                continue;
            };
            if let Some(index) = index.as_mut() {
                let old = guard
                    .pools
                    .get(&entry.pool)
                    .and_then(|old| self.leaderboard_entry(&slot.id, &entry.pool, old));
                if let Some(new) = self.leaderboard_entry(&slot.id, &entry.pool, r) {
                    index.replace(old.as_ref(), new);
                }
            }
            guard.pools.insert(pool.clone(), (*r).clone());
        }
        drop(index);
        drop(guards);
        for (key, record) in &entry.parties {
            self.inner
                .parties
                .entry(key.clone())
                .or_default()
                .insert(entry.pool.clone(), record.clone());
        }
    }

    /// Start-up recovery after [`State::load`]: replays the journal after the snapshot, then
    /// restores live matches (their players are in a match again). Returns (replayed entries,
    /// restored matches, the highest journal sequence number).
    pub fn recover(&self) -> Result<(usize, Vec<Arc<MatchSlot>>, u64), StoreError> {
        let store = &self.inner.store;
        let from = store.snapshot_seq()?;
        let mut replayed = 0;
        let mut last = from;
        for item in store.journal_after(from) {
            let (seq, entry) = item?;
            self.apply_records(&entry);
            replayed += 1;
            last = seq;
        }
        let mut restored = Vec::new();
        let mut live = Vec::new();
        let (stored, last_segment) = store.load_matches()?;
        for m in stored {
            if store.result_of(&m.match_id)?.is_some() {
                continue;
            }
            let Some(queue) = self.inner.queues.get(&QueueId::new(m.queue.as_str())) else {
                tracing::warn!(match_id = %m.match_id, queue = %m.queue, "dropping a live match of a queue no longer configured");
                continue;
            };
            let phase = if m.server_address.is_empty() {
                MatchPhase::Formed
            } else {
                MatchPhase::Allocated
            };
            let assignment = Arc::new(Assignment {
                match_id: m.match_id.clone(),
                queue: queue.id.clone(),
                teams: m.teams.clone(),
                win_probability: m.win_probability.clone(),
                region: m.region.clone(),
                server_address: m.server_address.clone(),
                parties: m.parties.clone(),
                backfill: m.backfill.clone(),
                left: m.left.clone(),
            });
            let slot = Arc::new(MatchSlot {
                id: m.match_id.clone(),
                queue: queue.id.clone(),
                quality: crate::matching::quality_of(&m.win_probability),
                formed_at: 0.0,
                formed_unix: m.formed_unix,
                inner: Mutex::new(MatchInner {
                    phase,
                    assignment,
                    tickets: Vec::new(),
                    roles: m.roles.clone(),
                }),
                segment: AtomicU64::new(segments::NOT_STORED),
                result: tokio::sync::OnceCell::new(),
            });
            let ids: Vec<PlayerId> = m.teams.iter().flatten().cloned().collect();
            let slots = self.sorted_slots(&ids);
            let mut guards = Self::lock_players(&slots);
            for guard in &mut guards {
                guard.status = PlayerStatus::InMatch(slot.id.clone());
            }
            drop(guards);
            self.inner.matches.insert(slot.id.clone(), slot.clone());
            restored.push(slot);
            live.push(m);
        }
        // The survivors are rewritten in fresh segments; stale copies, ended marks and empty
        // segments go.
        let mut segments = segments::Segments::after(last_segment);
        let live = live
            .iter()
            .map(crate::store::encode_match)
            .collect::<Result<Vec<_>, _>>()?;
        let (written, _) = Self::place_in_segments(&mut segments, &restored, &live);
        store.compact_matches(&written)?;
        *self.lock_segments() = segments;
        Ok((replayed, restored, store.last_seq()?.max(last)))
    }

    /// Writes every player's records and marks the journal up to `horizon` as included, then
    /// trims it. `horizon` must come from `Committer::horizon` taken *before* this call, so every
    /// entry up to it is already in memory and so in what is written here.
    ///
    /// Players are written in batches of [`SNAPSHOT_BATCH`] so a million players never sit in
    /// memory twice. A crash between batches is harmless: the snapshot mark is not moved, so
    /// start-up replays the journal from the previous mark, and its entries are absolute records,
    /// so every player ends on its latest record whichever batches landed.
    pub fn snapshot(&self, horizon: u64) -> Result<usize, StoreError> {
        let slots: Vec<Arc<PlayerSlot>> = self
            .inner
            .players
            .iter()
            .map(|e| e.value().clone())
            .collect();
        for batch in slots.chunks(SNAPSHOT_BATCH) {
            let records: Vec<(&PlayerId, BTreeMap<String, PoolRecord>)> = batch
                .iter()
                .map(|slot| (&slot.id, slot.lock().pools.to_map()))
                .collect();
            let refs: Vec<_> = records.iter().map(|(id, pools)| (*id, pools)).collect();
            self.inner.store.put_players(&refs)?;
        }
        let parties: Vec<(String, BTreeMap<String, PartyRecord>)> = self
            .inner
            .parties
            .iter()
            .map(|e| (e.key().clone(), e.value().clone()))
            .collect();
        self.inner.store.put_parties(
            &parties
                .iter()
                .map(|(k, v)| (k.as_str(), v))
                .collect::<Vec<_>>(),
        )?;
        self.inner.store.finish_snapshot(horizon)?;
        Ok(slots.len())
    }
}

/// Players per sled batch when snapshotting.
const SNAPSHOT_BATCH: usize = 10_000;

/// Unix seconds now (wall clock; used for persisted times and inactivity).
pub fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(mean: f64) -> PoolRecord {
        PoolRecord {
            skill: Skill {
                mean,
                deviation: 50.0,
                volatility: 0.06,
            },
            rank_points: 0,
            games: 1,
            wins: 0,
            last_played_unix: None,
            ladder_floor: 0,
            win_streak: 0,
            period: None,
        }
    }

    #[test]
    fn pool_records_keep_one_record_per_pool_in_name_order() {
        let mut r = PoolRecords::default();
        assert!(r.get("5v5").is_none());
        r.insert("5v5".into(), record(1.0));
        r.insert("5v5".into(), record(2.0));
        assert_eq!(r.iter().count(), 1, "replaced, not added");
        r.insert("1v1".into(), record(3.0));
        r.insert("ffa".into(), record(4.0));
        r.insert("1v1".into(), record(5.0));
        let pools: Vec<(&str, f64)> = r.iter().map(|(p, x)| (p, x.skill.mean)).collect();
        assert_eq!(pools, [("1v1", 5.0), ("5v5", 2.0), ("ffa", 4.0)]);
        assert!(r.contains_key("ffa") && !r.contains_key("2v2"));
        let names = PoolNames::default();
        assert_eq!(PoolRecords::from_map(r.to_map(), &names), r);
    }

    #[test]
    fn a_single_record_needs_no_allocation_of_its_own() {
        // The inline variant is what keeps a million players within SPEC §10's budget.
        assert!(std::mem::size_of::<PoolRecords>() <= 96);
        let mut r = PoolRecords::default();
        r.insert("1v1".into(), record(1.0));
        assert!(matches!(r.0, Records::One(_)));
    }

    /// A state on an in-memory store with one FORMED 1v1 match between `a` and `b`.
    fn state_with_a_match() -> (State, Arc<MatchSlot>) {
        let config = Arc::new(crate::config::Config::from_toml_str("").unwrap());
        let store: Store = Arc::new(crate::store::MemoryStore::default());
        let state = State::load(config, store).unwrap();
        let queue = state.queue("queue", "1v1").unwrap();
        let tickets: Vec<Arc<TicketSlot>> = ["a", "b"]
            .iter()
            .map(|p| {
                let (t, _) = state
                    .create_ticket(
                        &queue,
                        vec![PlayerId::new(*p)],
                        TicketId::new(format!("t-{p}")),
                        0.0,
                    )
                    .unwrap();
                t
            })
            .collect();
        let m = state.form_match(
            &tickets,
            Assignment {
                match_id: MatchId::new("m-1"),
                queue: queue.id.clone(),
                teams: vec![vec![PlayerId::new("a")], vec![PlayerId::new("b")]],
                win_probability: vec![0.5, 0.5],
                region: None,
                server_address: String::new(),
                parties: vec![],
                backfill: vec![vec![], vec![]],
                left: vec![],
            },
            1.0,
            0.0,
            None,
            BTreeMap::new(),
        );
        (state, m)
    }

    #[test]
    fn a_result_being_journaled_holds_its_match_until_applied_or_given_back() {
        let (state, m) = state_with_a_match();
        let none = BTreeMap::new();
        let (entry, previous) = state.prepare_result(&m, &[1, 2], &none, &[]).unwrap();
        assert_eq!(previous, MatchPhase::Formed);
        assert_eq!(m.phase(), MatchPhase::Completing);
        // While it is journaled: no cancel, no second result, no dissolving it.
        let cancel = state.cancel_match(&m, "test").unwrap_err().to_string();
        assert!(cancel.contains("result being applied"), "{cancel}");
        let again = state
            .prepare_result(&m, &[2, 1], &none, &[])
            .unwrap_err()
            .to_string();
        assert!(again.contains("result being applied"), "{again}");
        assert!(!state.dissolve_unallocated(&m, 100.0));
        assert_eq!(
            state.player(&PlayerId::new("a"), "1v1").0,
            PlayerStatus::InMatch(m.id.clone())
        );

        // Journaling failed: the match is as it was and can be cancelled.
        state.unclaim(&m, previous);
        assert_eq!(m.phase(), MatchPhase::Formed);
        let (entry2, previous) = state.prepare_result(&m, &[1, 2], &none, &[]).unwrap();
        assert_eq!(
            entry2.records, entry.records,
            "same records from the same state"
        );
        state.apply_result(&m, &entry2);
        assert_eq!(m.phase(), MatchPhase::Completed);
        assert_eq!(previous, MatchPhase::Formed);
        assert_eq!(
            state.player(&PlayerId::new("a"), "1v1").0,
            PlayerStatus::Idle
        );
        let cancel = state.cancel_match(&m, "test").unwrap_err().to_string();
        assert!(cancel.contains("already completed"), "{cancel}");
    }

    fn slot() -> TicketSlot {
        TicketSlot {
            id: TicketId::new("t1"),
            queue: QueueId::new("1v1"),
            players: vec![PlayerId::new("p1")],
            entered_at: 0.0,
            last_seen: AtomicU64::new(0),
            view: Mutex::new(ViewCell {
                current: TicketView::searching(0.0, String::new()),
                watchers: None,
            }),
        }
    }

    #[test]
    fn a_ticket_makes_its_watch_channel_on_first_subscribe_and_watchers_see_every_later_view() {
        let t = slot();
        assert!(!t.watched());
        // Published before anyone watched: kept, and the first watcher starts from it.
        t.publish(TicketView::searching(3.0, "widened".into()));
        assert!(
            t.cell().watchers.is_none(),
            "no channel until someone watches"
        );
        let mut rx = t.subscribe();
        assert!(t.watched());
        assert_eq!(rx.borrow_and_update().wait_seconds, 3.0);
        // Published while watched: the watcher is told.
        t.publish(TicketView::searching(4.0, String::new()));
        assert!(rx.has_changed().unwrap());
        assert_eq!(rx.borrow_and_update().wait_seconds, 4.0);
        // A second watcher shares the channel and starts from the latest view.
        let rx2 = t.subscribe();
        assert_eq!(rx2.borrow().wait_seconds, 4.0);
        drop((rx, rx2));
        assert!(!t.watched(), "a channel with no receivers is not watched");
        // A final view is never replaced, watched or not.
        t.publish(TicketView {
            state: TicketState::Cancelled,
            ..TicketView::searching(5.0, "cancelled".into())
        });
        t.publish(TicketView::searching(6.0, String::new()));
        assert_eq!(t.view().state, TicketState::Cancelled);
        assert_eq!(t.subscribe().borrow().state, TicketState::Cancelled);
    }
}

//! Players: where each one is (its slot, the only place that says so), its records per rating
//! pool, and the lock order every multi-player transition follows.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, TryLockError};

use dashmap::mapref::entry::Entry;

use super::{QueueInfo, State};
use crate::ids::{MatchId, PlayerId, TicketId};
use crate::rating::Skill;
use crate::records::{PartyRecord, PoolRecord, party_key};
use crate::store::StoreError;

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
/// over the 512 MiB budget (`matchmaker bench-memory`). The common single record is stored inline
/// in the player's slot (no allocation of its own); pool names are shared `Arc<str>`s.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PoolRecords(Records);

#[derive(Clone, Debug, Default, PartialEq)]
pub(super) enum Records {
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

    /// Whether the player has no record in any pool.
    pub fn is_empty(&self) -> bool {
        matches!(self.0, Records::None)
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
    pub(super) fn from_pairs(pairs: &[(String, PoolRecord)], names: &PoolNames) -> Self {
        let mut records = Self::default();
        for (p, r) in pairs {
            records.insert(names.get(p), r.clone());
        }
        records
    }
}

/// The shared name of every configured rating pool.
#[derive(Debug, Default)]
pub(super) struct PoolNames(pub(super) BTreeMap<String, Arc<str>>);

impl PoolNames {
    /// The shared name (a fresh one for a pool no queue uses any more).
    pub(super) fn get(&self, pool: &str) -> Arc<str> {
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
    pub(super) state: Mutex<PlayerState>,
}

impl PlayerSlot {
    /// The slot of a player not seen before: idle, with no record.
    pub(super) fn new(id: &PlayerId) -> Self {
        Self {
            id: id.clone(),
            state: Mutex::new(PlayerState {
                status: PlayerStatus::Idle,
                pools: PoolRecords::default(),
            }),
        }
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, PlayerState> {
        // A panic while holding the lock cannot leave a half-written state (every writer checks
        // first and then assigns plain values), so a poisoned lock is still consistent.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// What the sweep may do with the slot. Called holding the map's shard that holds it, so
    /// nobody can take the slot meanwhile: a count of two (the map's and the sweep's) means
    /// nobody else holds it now.
    fn sweep(slot: &Arc<Self>) -> Sweep {
        if Arc::strong_count(slot) > 2 {
            return Sweep::Busy;
        }
        let state = match slot.state.try_lock() {
            Ok(state) => state,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            Err(TryLockError::WouldBlock) => return Sweep::Busy,
        };
        if !state.pools.is_empty() {
            Sweep::Rated
        } else if state.status != PlayerStatus::Idle {
            Sweep::Busy
        } else {
            Sweep::Forget
        }
    }
}

/// A slot the sweep looks at.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Sweep {
    /// Idle, no record, held by nobody: forgotten.
    Forget,
    /// Queued, in a match, or held by a call: looked at again next time.
    Busy,
    /// Has a record: kept, and not looked at again unless erased.
    Rated,
    /// Not in the map (forgotten already).
    Gone,
}

impl State {
    /// Number of known players: those with a record, and those queued, in a match or idle
    /// since the last sweep ([`State::forget_idle_unrated_players`]).
    pub fn player_count(&self) -> usize {
        self.inner.players.len()
    }

    /// Forgets the slots of players who are idle with no record and that no call holds: a
    /// player who only queued and left, or was erased, leaves nothing behind. For such a player
    /// no slot says what a fresh one would (idle, no record), so nothing else changes. Looks
    /// only at the slots that may have no record (made since start-up, or erased), so it costs
    /// nothing per rated player. Returns how many it forgot.
    pub fn forget_idle_unrated_players(&self) -> usize {
        let candidates = std::mem::take(&mut *self.unrated_slots());
        let mut busy = Vec::new();
        let mut forgotten = 0;
        for weak in candidates {
            // A slot no longer upgradable was forgotten (only this sweep takes slots out of the
            // map, and only slots nobody else holds), so nothing is left to look at.
            let Some(held) = weak.upgrade() else {
                continue;
            };
            let mut seen = Sweep::Gone;
            // `remove_if` decides holding the slot's shard, so no `slot()` can take it meanwhile.
            self.inner.players.remove_if(&held.id, |_, slot| {
                if !Arc::ptr_eq(slot, &held) {
                    return false;
                }
                seen = PlayerSlot::sweep(slot);
                seen == Sweep::Forget
            });
            drop(held);
            match seen {
                Sweep::Forget => forgotten += 1,
                Sweep::Busy => busy.push(weak),
                Sweep::Rated | Sweep::Gone => {}
            }
        }
        self.unrated_slots().extend(busy);
        forgotten
    }

    /// Marks a player's slot as one that may hold no record (see
    /// [`State::forget_idle_unrated_players`]). Every new player passes here, so it is a push of
    /// a weak reference (no hashing, no copy of the id, and it does not count as a holder). A
    /// slot listed twice (an erasure of a player made since start-up) is looked at twice, and
    /// both go once it is forgotten, so the list holds at most one entry per slot plus one
    /// per erasure of a slot still held.
    pub(super) fn may_be_unrated(&self, slot: &Arc<PlayerSlot>) {
        self.unrated_slots().push(Arc::downgrade(slot));
    }

    fn unrated_slots(&self) -> MutexGuard<'_, Vec<std::sync::Weak<PlayerSlot>>> {
        self.inner
            .unrated_slots
            .lock()
            .unwrap_or_else(|p| p.into_inner())
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

    pub(super) fn slot_if_known(&self, id: &PlayerId) -> Option<Arc<PlayerSlot>> {
        self.inner.players.get(id).map(|r| r.value().clone())
    }

    pub(super) fn slot(&self, id: &PlayerId) -> Arc<PlayerSlot> {
        // A read lock for a player seen before (every player of a match being formed, and most
        // players entering a queue); the shard's write lock only to add one.
        if let Some(slot) = self.inner.players.get(id) {
            return slot.value().clone();
        }
        let (slot, made) = match self.inner.players.entry(id.clone()) {
            Entry::Occupied(e) => (e.get().clone(), false),
            Entry::Vacant(e) => (e.insert(Arc::new(PlayerSlot::new(id))).clone(), true),
        };
        if made {
            // With the shard let go: the sweep's list is never locked inside a shard.
            self.may_be_unrated(&slot);
        }
        slot
    }

    /// Locks the slots of `ids` in ascending id order (the deadlock-free order).
    pub(super) fn lock_players<'a>(
        slots: &'a [Arc<PlayerSlot>],
    ) -> Vec<MutexGuard<'a, PlayerState>> {
        debug_assert!(slots.windows(2).all(|w| w[0].id < w[1].id));
        slots.iter().map(|s| s.lock()).collect()
    }

    pub(super) fn sorted_slots(&self, ids: &[PlayerId]) -> Vec<Arc<PlayerSlot>> {
        let mut slots: Vec<_> = ids.iter().map(|id| self.slot(id)).collect();
        slots.sort_by(|a, b| a.id.cmp(&b.id));
        slots
    }

    /// A pool record for a player never rated in the pool.
    pub fn initial_record(&self, queue: &QueueInfo) -> PoolRecord {
        PoolRecord::initial(
            &queue.config.rating,
            queue.config.ranking,
            &self.inner.config.ranking,
        )
    }

    /// The skill in `queue`'s pool of the party `key` (see [`party_key`]): its record, or, on
    /// its first use there, a record made from the members' `skills` in the pool, kept and
    /// stored. Called holding every member's slot (see [`State::enter_ticket`]): an erasure
    /// of a member holds that member's record from before it erases the store until the
    /// player's party records are gone from memory, so a record made here is either in the
    /// store it erases, or made after it, from the cleared record.
    pub(super) fn party_record(
        &self,
        queue: &QueueInfo,
        key: &str,
        skills: &[Skill],
    ) -> Result<Skill, StoreError> {
        if let Some(r) = self
            .inner
            .parties
            .get(key)
            .and_then(|p| p.get(&queue.pool).cloned())
        {
            return Ok(r.skill);
        }
        let record = PartyRecord {
            skill: crate::rating::party_initial(&queue.config.rating, skills),
            games: 0,
            last_played_unix: None,
        };
        let pools = {
            let mut entry = self.inner.parties.entry(key.to_string()).or_default();
            entry.entry(queue.pool.clone()).or_insert(record);
            entry.clone()
        };
        self.inner.store.put_parties(&[(key, &pools)])?;
        Ok(pools[&queue.pool].skill)
    }

    /// A party's record in a pool, if it has one.
    pub fn party(&self, pool: &str, members: &[PlayerId]) -> Option<PartyRecord> {
        self.inner
            .parties
            .get(&party_key(members))
            .and_then(|p| p.get(pool).cloned())
    }
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
        let pairs: Vec<(String, PoolRecord)> = r.to_map().into_iter().collect();
        assert_eq!(PoolRecords::from_pairs(&pairs, &names), r);
    }

    #[test]
    fn the_sweep_forgets_a_player_only_once_idle_with_no_record_and_held_by_nobody() {
        let state = crate::state::test_util::state();
        let queue = state.queue("queue", "1v1").unwrap();
        let [held, queued, erased] = ["held", "queued", "c"].map(PlayerId::new);
        let call = state.slot(&held);
        let (ticket, _) = state
            .create_ticket(&queue, vec![queued.clone()], "t-q".into(), 0.0)
            .unwrap();
        let m = crate::state::test_util::formed_1v1(&state, "m-1", "c", "d", "");
        crate::state::test_util::win(&state, &m);
        assert_eq!(state.forget_idle_unrated_players(), 0);
        assert_eq!(state.player_count(), 4);

        drop(call);
        let cancelled = crate::state::TicketState::Cancelled;
        state.end_ticket(&ticket, cancelled, 1.0, "cancelled by client".into());
        assert_eq!(state.forget_idle_unrated_players(), 2);
        state.erase_player(&erased).unwrap().unwrap();
        assert_eq!(state.forget_idle_unrated_players(), 1);
        assert_eq!(state.player_count(), 1, "d is rated");
        assert!(state.unrated_slots().is_empty(), "nothing left to look at");
        // A forgotten player comes back as a new one.
        let (status, record) = state.player(&queued, &queue.pool);
        assert_eq!((status, record), (PlayerStatus::Idle, None));
        state
            .create_ticket(&queue, vec![queued], "t-q2".into(), 2.0)
            .unwrap();
        assert_eq!(state.player_count(), 2);
    }

    /// An erasure lists a slot the sweep may already list (a player seen since start-up): the
    /// slot is forgotten once and both entries go, and a slot listed while a call holds it
    /// stays listed until the call lets it go.
    #[test]
    fn a_slot_listed_twice_is_forgotten_once_and_leaves_the_list() {
        let state = crate::state::test_util::state();
        let player = PlayerId::new("seen-then-erased");
        drop(state.slot(&player));
        state.erase_player(&player).unwrap().unwrap();
        assert_eq!(state.unrated_slots().len(), 2);
        assert_eq!(state.forget_idle_unrated_players(), 1);
        assert!(state.unrated_slots().is_empty());
        assert_eq!(state.player_count(), 0);

        let call = state.slot(&player);
        assert_eq!(state.forget_idle_unrated_players(), 0);
        assert_eq!(state.unrated_slots().len(), 1, "held: looked at again");
        drop(call);
        assert_eq!(state.forget_idle_unrated_players(), 1);
        assert!(state.unrated_slots().is_empty());
    }

    #[test]
    fn a_single_record_needs_no_allocation_of_its_own() {
        // The inline variant is what keeps a million players within the 512 MiB budget.
        assert!(std::mem::size_of::<PoolRecords>() <= 96);
        let mut r = PoolRecords::default();
        r.insert("1v1".into(), record(1.0));
        assert!(matches!(r.0, Records::One(_)));
    }
}

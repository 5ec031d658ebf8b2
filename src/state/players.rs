//! Players: where each one is (its slot, the only place that says so), its records per rating
//! pool, and the lock order every multi-player transition follows.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

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
    pub(super) fn lock(&self) -> MutexGuard<'_, PlayerState> {
        // A panic while holding the lock cannot leave a half-written state (every writer checks
        // first and then assigns plain values), so a poisoned lock is still consistent.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl State {
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

    pub(super) fn slot_if_known(&self, id: &PlayerId) -> Option<Arc<PlayerSlot>> {
        self.inner.players.get(id).map(|r| r.value().clone())
    }

    pub(super) fn slot(&self, id: &PlayerId) -> Arc<PlayerSlot> {
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
    fn a_single_record_needs_no_allocation_of_its_own() {
        // The inline variant is what keeps a million players within the 512 MiB budget.
        assert!(std::mem::size_of::<PoolRecords>() <= 96);
        let mut r = PoolRecords::default();
        r.insert("1v1".into(), record(1.0));
        assert!(matches!(r.0, Records::One(_)));
    }
}

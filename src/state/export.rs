//! The id order of a pool's players for `ExportPlayers`: a page after a cursor costs
//! O(log N + page) instead of a walk over every player.
//!
//! The order is kept only while exports run: a shared id is 16 bytes, tens of MiB with the
//! tree's nodes for a million players, which the memory budget of a million rated players has
//! no room for at rest. The first page of an export
//! builds it (one walk over the players, as every page cost before), the pages after read it,
//! and the matchmaker's periodic sweep drops it once no page read it for [`IDLE_SWEEPS`]
//! sweeps; the next export builds it again.
//!
//! While it exists it is kept in step with the records: a player's first record in the pool
//! adds the id, an erasure removes it, each under the player's lock (lock order: the player's
//! slot, then the pool's leaderboard, then this). It is built without holding anything but
//! one player at a time: the changes made during the walk are noted in order, and applied to
//! what the walk found when it ends, so a change the walk missed is not lost and one it saw
//! ends as the last change says. A page is then exactly the players with a record in the pool
//! after the cursor at the time it is read, in id order.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;
use std::sync::{Mutex, MutexGuard};

use super::{QueueInfo, State};
use crate::ids::PlayerId;

/// Sweeps without a page read after which a pool's id order is dropped (the sweep runs every
/// 10 s: an export idle for 30 to 40 s builds it again).
pub(super) const IDLE_SWEEPS: u8 = 3;

/// One pool's id order, if an export keeps it.
#[derive(Debug, Default)]
pub(super) enum ExportIds {
    /// No export runs: nothing is kept and changes are not noted.
    #[default]
    Absent,
    /// A walk over the players is building it; the changes since it began, in order (`true`:
    /// the player got a record in the pool; `false`: erased).
    Building(Vec<(PlayerId, bool)>),
    /// The ids of the pool's players, and the sweeps since a page last read them.
    Ready { ids: BTreeSet<PlayerId>, idle: u8 },
}

impl ExportIds {
    /// Up to `limit` ids after `after`, if the order is built.
    fn page(&mut self, after: Option<&PlayerId>, limit: usize) -> Option<Vec<PlayerId>> {
        let Self::Ready { ids, idle } = self else {
            return None;
        };
        *idle = 0;
        let from = after.map_or(Bound::Unbounded, Bound::Excluded);
        Some(
            ids.range((from, Bound::Unbounded))
                .take(limit)
                .cloned()
                .collect(),
        )
    }

    /// Starts a build; `false` when one runs or the order is built.
    fn begin(&mut self) -> bool {
        if matches!(self, Self::Absent) {
            *self = Self::Building(Vec::new());
            true
        } else {
            false
        }
    }

    /// Ends the build begun with [`ExportIds::begin`]: what the walk found, with the changes
    /// made meanwhile applied in order.
    fn install(&mut self, mut found: BTreeSet<PlayerId>) {
        let Self::Building(changes) = std::mem::take(self) else {
            // Only the builder leaves `Building`; nothing else to do.
            return;
        };
        for (id, rated) in changes {
            if rated {
                found.insert(id);
            } else {
                found.remove(&id);
            }
        }
        *self = Self::Ready {
            ids: found,
            idle: 0,
        };
    }

    /// A player got their first record in the pool (`true`) or was erased (`false`).
    fn note(&mut self, id: &PlayerId, rated: bool) {
        match self {
            Self::Absent => {}
            Self::Building(changes) => changes.push((id.clone(), rated)),
            Self::Ready { ids, .. } => {
                if rated {
                    ids.insert(id.clone());
                } else {
                    ids.remove(id);
                }
            }
        }
    }

    /// One sweep: drops an order no page read for [`IDLE_SWEEPS`] sweeps.
    fn sweep(&mut self) {
        if let Self::Ready { idle, .. } = self {
            *idle += 1;
            if *idle >= IDLE_SWEEPS {
                *self = Self::Absent;
            }
        }
    }
}

/// Each configured pool's [`ExportIds`].
#[derive(Debug, Default)]
pub(super) struct ExportIndexes(BTreeMap<String, Mutex<ExportIds>>);

impl ExportIndexes {
    /// None kept yet for `pools`.
    pub(super) fn new<'a>(pools: impl Iterator<Item = &'a String>) -> Self {
        Self(pools.map(|p| (p.clone(), Mutex::default())).collect())
    }

    fn lock(&self, pool: &str) -> Option<MutexGuard<'_, ExportIds>> {
        self.0
            .get(pool)
            .map(|m| m.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

/// Puts a build begun and never installed (the walk panicked) back to `Absent`, so its
/// changes stop being noted.
struct Build<'a> {
    indexes: &'a ExportIndexes,
    pool: &'a str,
}

impl Drop for Build<'_> {
    fn drop(&mut self) {
        if let Some(mut ids) = self.indexes.lock(self.pool)
            && matches!(*ids, ExportIds::Building(_))
        {
            *ids = ExportIds::Absent;
        }
    }
}

impl State {
    /// Player ids with a record in the queue's pool, in id order, after `after` (exclusive),
    /// at most `limit`: the export order, resumable from the last id seen. O(log N + limit)
    /// once the pool's order is built (see the module documentation); the first page of an
    /// export walks every player.
    pub fn export_ids(
        &self,
        queue: &QueueInfo,
        after: Option<&PlayerId>,
        limit: usize,
    ) -> Vec<PlayerId> {
        let pool = queue.pool.as_str();
        let indexes = &self.inner.exports;
        let building = match indexes.lock(pool) {
            Some(mut ids) => {
                if let Some(page) = ids.page(after, limit) {
                    return page;
                }
                ids.begin()
            }
            None => false,
        };
        let found = self.pool_ids(pool);
        if !building {
            // Another export builds it now: this page walks, as all did before.
            return smallest_after(found, after, limit);
        }
        let build = Build { indexes, pool };
        #[cfg(test)]
        self.inner.hooks.export_walked.run();
        let found: BTreeSet<PlayerId> = found.into_iter().collect();
        let mut ids = indexes.lock(pool).expect("the pool was found above");
        ids.install(found);
        let page = ids.page(after, limit).unwrap_or_default();
        drop(ids);
        drop(build);
        page
    }

    /// Notes that `ids` got their first record in `pool`. Called holding their slots.
    pub(super) fn export_rated<'a>(&self, pool: &str, ids: impl IntoIterator<Item = &'a PlayerId>) {
        let mut ids = ids.into_iter().peekable();
        if ids.peek().is_none() {
            return;
        }
        if let Some(mut index) = self.inner.exports.lock(pool) {
            for id in ids {
                index.note(id, true);
            }
        }
    }

    /// Notes that `id` lost its record in `pool` (erased). Called holding its slot.
    pub(super) fn export_erased(&self, pool: &str, id: &PlayerId) {
        if let Some(mut index) = self.inner.exports.lock(pool) {
            index.note(id, false);
        }
    }

    /// Drops the id order of every pool no export read for a while (the matchmaker's sweep).
    pub fn drop_idle_export_orders(&self) {
        for ids in self.inner.exports.0.values() {
            ids.lock().unwrap_or_else(|p| p.into_inner()).sweep();
        }
    }

    /// Every player with a record in `pool`, in no order: one walk, one player locked at a time.
    fn pool_ids(&self, pool: &str) -> Vec<PlayerId> {
        self.inner
            .players
            .iter()
            .filter(|e| e.value().lock().pools.contains_key(pool))
            .map(|e| e.key().clone())
            .collect()
    }
}

/// The `limit` smallest of `ids` after `after`, sorted: in linear time, then only they sorted.
fn smallest_after(ids: Vec<PlayerId>, after: Option<&PlayerId>, limit: usize) -> Vec<PlayerId> {
    let mut ids: Vec<PlayerId> = ids
        .into_iter()
        .filter(|id| after.is_none_or(|a| id > a))
        .collect();
    if limit < ids.len() {
        ids.select_nth_unstable(limit);
        ids.truncate(limit);
    }
    ids.sort_unstable();
    ids
}

#[cfg(test)]
mod tests;

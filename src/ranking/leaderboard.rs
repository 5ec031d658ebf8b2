//! Leaderboard order (SPEC §4): who is shown above whom, page by page, and each player's place.
//!
//! The order is total and stable so two reads of the same data page identically: rank points
//! descending, then conservative rating descending (the skill lower bound: of two players on the
//! same points, the one the system is surer is strong), then wins descending (more play earned
//! it), then player id ascending (a deterministic last resort).
//!
//! [`RankIndex`] keeps one queue's entries in that order — a `BTreeSet` plus a map from player to
//! entry — so the server can hold one per queue: O(log n) insert, update and remove, pages in
//! O(log n + offset + limit), and a player's place in O(log n + rank). The Grandweaver check only
//! needs "is this player in the top 100", which [`RankIndex::rank_within`] answers in
//! O(log n + 100) however large the queue. This module is pure data structure: no I/O, no clock.

use std::cmp::Ordering;
use std::collections::{BTreeSet, HashMap};

use serde::{Deserialize, Serialize};

use super::RankPoints;
use crate::ids::PlayerId;

/// Largest page a caller may ask for; larger `limit`s are cut to it so one request cannot make
/// the server copy a whole queue.
pub const MAX_PAGE_SIZE: usize = 1000;

/// One row of a leaderboard: everything the order looks at.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct LeaderboardEntry {
    /// Who.
    pub player: PlayerId,
    /// Rank points: the primary key, descending.
    pub rank_points: RankPoints,
    /// Conservative skill (e.g. μ − 3φ in display units): first tie-break, descending.
    pub conservative_rating: f64,
    /// Wins in this queue: second tie-break, descending.
    pub wins: u32,
}

impl Ord for LeaderboardEntry {
    /// Leaderboard order: the entry shown first is the *smaller* one. `f64::total_cmp` keeps it a
    /// total order even for a NaN that should never arrive.
    fn cmp(&self, other: &Self) -> Ordering {
        other
            .rank_points
            .cmp(&self.rank_points)
            .then_with(|| {
                other
                    .conservative_rating
                    .total_cmp(&self.conservative_rating)
            })
            .then_with(|| other.wins.cmp(&self.wins))
            .then_with(|| self.player.cmp(&other.player))
    }
}

impl PartialOrd for LeaderboardEntry {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for LeaderboardEntry {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for LeaderboardEntry {}

/// Sorts entries into leaderboard order (best first).
pub fn sort(entries: &mut [LeaderboardEntry]) {
    entries.sort_unstable();
}

/// The `limit` entries starting at `offset` (0-based) of an already sorted slice; `limit` is cut
/// to [`MAX_PAGE_SIZE`] and a page past the end is empty. The first entry's rank is `offset + 1`.
#[must_use]
pub fn page<T>(sorted: &[T], offset: usize, limit: usize) -> &[T] {
    let start = offset.min(sorted.len());
    let end = start
        .saturating_add(limit.min(MAX_PAGE_SIZE))
        .min(sorted.len());
    &sorted[start..end]
}

/// One queue's leaderboard, kept in order under updates.
///
/// Invariant: `order` and `by_player` hold exactly the same entries.
#[derive(Clone, Debug, Default)]
pub struct RankIndex {
    order: BTreeSet<LeaderboardEntry>,
    by_player: HashMap<PlayerId, LeaderboardEntry>,
}

impl RankIndex {
    /// An empty index.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of players on the board.
    #[must_use]
    pub fn len(&self) -> usize {
        self.by_player.len()
    }

    /// Whether the board is empty.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.by_player.is_empty()
    }

    /// Inserts or replaces the player's entry (after every rated match); returns the old one.
    pub fn upsert(&mut self, entry: LeaderboardEntry) -> Option<LeaderboardEntry> {
        let previous = self.by_player.insert(entry.player.clone(), entry.clone());
        if let Some(old) = &previous {
            self.order.remove(old);
        }
        self.order.insert(entry);
        previous
    }

    /// Removes a player (account deleted, season wipe); returns their entry.
    pub fn remove(&mut self, player: &PlayerId) -> Option<LeaderboardEntry> {
        let old = self.by_player.remove(player)?;
        self.order.remove(&old);
        Some(old)
    }

    /// The player's entry.
    #[must_use]
    pub fn get(&self, player: &PlayerId) -> Option<&LeaderboardEntry> {
        self.by_player.get(player)
    }

    /// The player's 1-based place, or `None` if absent. O(log n + rank).
    #[must_use]
    pub fn rank_of(&self, player: &PlayerId) -> Option<usize> {
        let entry = self.by_player.get(player)?;
        Some(self.order.range(..entry).count() + 1)
    }

    /// The player's 1-based place if it is at most `limit`, else `None` (also when absent).
    /// O(log n + limit): the cheap form of "is this player Grandweaver (top 100)?".
    #[must_use]
    pub fn rank_within(&self, player: &PlayerId, limit: usize) -> Option<usize> {
        let entry = self.by_player.get(player)?;
        let ahead = self.order.range(..entry).take(limit).count();
        (ahead < limit).then_some(ahead + 1)
    }

    /// The `limit` entries from 0-based `offset` in order (`limit` cut to [`MAX_PAGE_SIZE`]); the
    /// first has rank `offset + 1`. O(log n + offset + limit).
    #[must_use]
    pub fn page(&self, offset: usize, limit: usize) -> Vec<&LeaderboardEntry> {
        self.order
            .iter()
            .skip(offset)
            .take(limit.min(MAX_PAGE_SIZE))
            .collect()
    }

    /// All entries in order, best first.
    pub fn iter(&self) -> impl Iterator<Item = &LeaderboardEntry> {
        self.order.iter()
    }
}

//! Leaderboard order: who is shown above whom, page by page, and each player's place.
//!
//! The order is total and stable so two reads of the same data page identically: rank points
//! descending, then conservative rating descending (the skill lower bound: of two players on the
//! same points, the one the system is surer is strong), then wins descending (more play earned
//! it), then player id ascending (a deterministic last resort).
//!
//! [`RankIndex`] keeps one queue's entries in that order in a `BTreeSet`, so the server can hold
//! one per queue: O(log n) insert, update and remove, pages in O(log n + offset + limit), and a
//! player's place in O(log n + rank). It holds no map from player to entry: the caller knows a
//! player's entry (it is a pure function of the player's record), and a second map cost ~100
//! bytes per player, a fifth of the 512 MiB memory budget for a million players. The Grandweaver
//! check only needs "is this player in the top 100", which [`RankIndex::rank_within`] answers in
//! O(log n + 100) however large the queue. This module is pure data structure: no I/O, no clock.

use std::cmp::Ordering;
use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use super::RankPoints;
use crate::ids::PlayerId;

/// Largest page a caller may ask for; larger `limit`s are cut to it so one request cannot make
/// the server copy a whole queue.
pub const MAX_PAGE_SIZE: usize = 1000;

/// Deepest page offset a player or game-server token may ask for. A page is walked to under the
/// pool's index lock, which applying a result needs too, in O(min(offset, n - offset)): with a
/// million players the middle page is half a million steps, milliseconds during which results
/// wait. An admin (and a server without auth) pages as deep as the board goes.
pub const MAX_OFFSET: usize = 10_000;

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

/// Boards at least this large are sorted on two threads (below, a thread costs more than it
/// saves).
const PARALLEL_SORT_FROM: usize = 1 << 16;

/// `entries` in leaderboard order: with `from` or more, each half sorted on a thread of its own,
/// then merged.
fn sorted_on_two_threads(mut entries: Vec<LeaderboardEntry>, from: usize) -> Vec<LeaderboardEntry> {
    if entries.len() < from.max(2) {
        entries.sort_unstable();
        return entries;
    }
    let mut right = entries.split_off(entries.len() / 2);
    let mut left = entries;
    std::thread::scope(|s| {
        s.spawn(|| right.sort_unstable());
        left.sort_unstable();
    });
    let mut merged = Vec::with_capacity(left.len() + right.len());
    let (mut left, mut right) = (left.into_iter().peekable(), right.into_iter().peekable());
    while let (Some(l), Some(r)) = (left.peek(), right.peek()) {
        let next = if l <= r { left.next() } else { right.next() };
        merged.extend(next);
    }
    merged.extend(left);
    merged.extend(right);
    merged
}

/// One queue's leaderboard, kept in order under updates.
///
/// Callers keep at most one entry per player in it: an update passes the player's previous
/// entry to [`RankIndex::replace`].
#[derive(Clone, Debug, Default)]
pub struct RankIndex {
    order: BTreeSet<LeaderboardEntry>,
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
        self.order.len()
    }

    /// Whether the board is empty.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    /// Puts `new` on the board in place of the player's previous entry `old` (`None` for a
    /// player not ranked yet).
    pub fn replace(&mut self, old: Option<&LeaderboardEntry>, new: LeaderboardEntry) {
        if let Some(old) = old {
            self.order.remove(old);
        }
        self.order.insert(new);
    }

    /// Replaces the whole board with `entries` (at most one per player), built in one pass
    /// over them sorted rather than an insertion each: a start-up (or a cluster node taking the
    /// queues over) ranks millions, sorted on two threads.
    pub fn rebuild(&mut self, entries: Vec<LeaderboardEntry>) {
        // Collecting sorted entries only checks that they are (one pass), then builds.
        self.order = sorted_on_two_threads(entries, PARALLEL_SORT_FROM)
            .into_iter()
            .collect();
    }

    /// Takes an entry off the board (account deleted, season wipe); false if it was not there.
    pub fn remove(&mut self, entry: &LeaderboardEntry) -> bool {
        self.order.remove(entry)
    }

    /// Whether exactly this entry is on the board.
    #[must_use]
    pub fn contains(&self, entry: &LeaderboardEntry) -> bool {
        self.order.contains(entry)
    }

    /// The entry's 1-based place, or `None` if it is not on the board. O(log n + rank).
    #[must_use]
    pub fn rank_of(&self, entry: &LeaderboardEntry) -> Option<usize> {
        self.contains(entry)
            .then(|| self.order.range(..entry).count() + 1)
    }

    /// The entry's 1-based place if it is at most `limit`, else `None` (also when absent).
    /// O(log n + limit): the cheap form of "is this player Grandweaver (top 100)?".
    #[must_use]
    pub fn rank_within(&self, entry: &LeaderboardEntry, limit: usize) -> Option<usize> {
        if !self.contains(entry) {
            return None;
        }
        let ahead = self.order.range(..entry).take(limit).count();
        (ahead < limit).then_some(ahead + 1)
    }

    /// The `limit` entries from 0-based `offset` in order (`limit` cut to [`MAX_PAGE_SIZE`]); the
    /// first has rank `offset + 1`. O(min(offset, n - offset) + limit): a page in the back half
    /// is walked to from the end, and one past the end costs nothing.
    #[must_use]
    pub fn page(&self, offset: usize, limit: usize) -> Vec<&LeaderboardEntry> {
        let len = self.order.len();
        if offset >= len {
            return Vec::new();
        }
        let limit = limit.min(MAX_PAGE_SIZE).min(len - offset);
        if offset <= len / 2 {
            return self.order.iter().skip(offset).take(limit).collect();
        }
        let mut page: Vec<_> = self
            .order
            .iter()
            .rev()
            .skip(len - offset - limit)
            .take(limit)
            .collect();
        page.reverse();
        page
    }

    /// All entries in order, best first.
    pub fn iter(&self) -> impl Iterator<Item = &LeaderboardEntry> {
        self.order.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn entry(
        id: &str,
        rank_points: RankPoints,
        conservative_rating: f64,
        wins: u32,
    ) -> LeaderboardEntry {
        LeaderboardEntry {
            player: PlayerId::new(id),
            rank_points,
            conservative_rating,
            wins,
        }
    }

    fn ids(entries: &[&LeaderboardEntry]) -> Vec<String> {
        entries
            .iter()
            .map(|e| e.player.as_str().to_owned())
            .collect()
    }

    fn sample() -> Vec<LeaderboardEntry> {
        vec![
            entry("zed", 900, 1400.0, 10),
            entry("amy", 1200, 1500.0, 5),
            entry("bob", 1200, 1600.0, 5),
            entry("cat", 1200, 1600.0, 9),
            entry("dan", 1200, 1600.0, 9),
            entry("eve", 300, 1700.0, 99),
        ]
    }

    #[test]
    fn order_is_points_then_conservative_rating_then_wins_then_id() {
        let mut all = sample();
        sort(&mut all);
        let order: Vec<&str> = all.iter().map(|e| e.player.as_str()).collect();
        assert_eq!(order, ["cat", "dan", "bob", "amy", "zed", "eve"]);
    }

    #[test]
    fn pages_cut_at_the_end_and_at_the_maximum_size() {
        let mut all = sample();
        sort(&mut all);
        assert_eq!(page(&all, 0, 2).len(), 2);
        assert_eq!(page(&all, 4, 10).len(), 2);
        assert!(page(&all, 6, 10).is_empty());
        assert!(page(&all, usize::MAX, usize::MAX).is_empty());
        let big: Vec<u32> = (0..5000).collect();
        assert_eq!(page(&big, 10, 4000).len(), MAX_PAGE_SIZE);
        assert_eq!(page(&big, 10, 4000)[0], 10);
    }

    #[test]
    fn every_page_of_the_index_is_the_same_from_the_front_or_the_back() {
        let mut index = RankIndex::new();
        let mut all: Vec<LeaderboardEntry> = (0..9)
            .map(|i| entry(&format!("p{i}"), 100 * i, 1500.0, i))
            .collect();
        for e in &all {
            index.replace(None, e.clone());
        }
        sort(&mut all);
        for offset in 0..12 {
            for limit in 0..12 {
                let expected: Vec<&str> = all
                    .iter()
                    .skip(offset)
                    .take(limit)
                    .map(|e| e.player.as_str())
                    .collect();
                assert_eq!(
                    ids(&index.page(offset, limit)),
                    expected,
                    "{offset} {limit}"
                );
            }
        }
        assert!(index.page(usize::MAX, usize::MAX).is_empty());
    }

    #[test]
    fn the_index_keeps_order_ranks_and_pages_under_updates() {
        let mut index = RankIndex::new();
        let all = sample();
        for e in &all {
            index.replace(None, e.clone());
        }
        let [zed, amy, bob, cat, _dan, eve] = all.clone().try_into().unwrap();
        assert_eq!(index.len(), 6);
        assert_eq!(ids(&index.page(0, 3)), ["cat", "dan", "bob"]);
        assert_eq!(ids(&index.page(3, 10)), ["amy", "zed", "eve"]);
        assert_eq!(index.rank_of(&cat), Some(1));
        assert_eq!(index.rank_of(&eve), Some(6));
        assert_eq!(index.rank_of(&entry("nobody", 1, 1.0, 1)), None);
        assert_eq!(index.rank_within(&bob, 3), Some(3));
        assert_eq!(index.rank_within(&amy, 3), None);
        assert_eq!(index.rank_within(&cat, 0), None);

        // Eve wins big: replaced, not duplicated; her old entry is gone.
        let new_eve = entry("eve", 1500, 1700.0, 100);
        index.replace(Some(&eve), new_eve.clone());
        assert_eq!(index.len(), 6);
        assert_eq!(index.rank_of(&new_eve), Some(1));
        assert_eq!(index.rank_of(&eve), None);
        assert_eq!(index.rank_of(&cat), Some(2));

        assert!(index.remove(&cat));
        assert!(!index.remove(&cat));
        assert_eq!(ids(&index.page(0, 10)), ["eve", "dan", "bob", "amy", "zed"]);
        assert!(index.contains(&zed));
        assert!(!index.is_empty());
    }

    fn entries() -> impl Strategy<Value = Vec<LeaderboardEntry>> {
        proptest::collection::vec((0u32..60, 0u32..50, 0u32..4, 0u32..6), 0..120).prop_map(|raw| {
            let mut seen = std::collections::BTreeMap::new();
            for (id, rp, rating, wins) in raw {
                seen.insert(
                    id,
                    entry(
                        &format!("p{id}"),
                        rp,
                        1400.0 + f64::from(rating) * 10.0,
                        wins,
                    ),
                );
            }
            seen.into_values().collect()
        })
    }

    proptest! {
        #[test]
        fn a_rebuilt_board_is_the_board_its_entries_inserted_one_by_one_make(
            all in entries(),
            earlier in entries(),
        ) {
            let mut one_by_one = RankIndex::new();
            for e in &all {
                one_by_one.replace(None, e.clone());
            }
            // A rebuild replaces what the board held.
            let mut rebuilt = RankIndex::new();
            for e in earlier {
                rebuilt.replace(None, e);
            }
            rebuilt.rebuild(all.clone());
            prop_assert_eq!(rebuilt.len(), all.len());
            prop_assert!(rebuilt.iter().eq(one_by_one.iter()));
            for e in &all {
                prop_assert_eq!(rebuilt.rank_of(e), one_by_one.rank_of(e));
            }
        }

        #[test]
        fn entries_sorted_on_two_threads_are_in_the_order_one_sort_gives(
            all in entries(),
            from in 0usize..8,
        ) {
            let mut once = all.clone();
            once.sort_unstable();
            let halves = sorted_on_two_threads(all, from);
            prop_assert!(halves.iter().map(|e| &e.player).eq(once.iter().map(|e| &e.player)));
        }

        #[test]
        fn page_concatenation_equals_the_full_order(all in entries(), size in 1usize..20) {
            let mut sorted = all.clone();
            sort(&mut sorted);
            let mut index = RankIndex::new();
            for e in all {
                index.replace(None, e);
            }
            let mut from_slices = Vec::new();
            let mut from_index = Vec::new();
            let mut offset = 0;
            while offset < sorted.len() {
                from_slices.extend(page(&sorted, offset, size).iter().cloned());
                from_index.extend(index.page(offset, size).into_iter().cloned());
                offset += size;
            }
            prop_assert_eq!(&from_slices, &sorted);
            prop_assert_eq!(&from_index, &sorted);
            for (i, e) in sorted.iter().enumerate() {
                prop_assert_eq!(index.rank_of(e), Some(i + 1));
                prop_assert_eq!(index.rank_within(e, size), (i < size).then_some(i + 1));
            }
            for pair in sorted.windows(2) {
                prop_assert!(pair[0].rank_points >= pair[1].rank_points);
            }
        }
    }
}

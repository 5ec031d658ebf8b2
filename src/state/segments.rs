//! Bookkeeping for the live-match segments of the store (`store::segment_bounds`): which
//! segment holds each stored match's newest copy, and how many live matches each segment still
//! holds, so a segment is dropped as soon as none of its matches is live.
//!
//! Pure: the caller keeps each match's segment id (in its `MatchSlot`) and writes to the store what
//! these methods decide, under one lock, so the bookkeeping and the writes happen in one order.

use std::collections::{HashMap, HashSet};

use crate::ids::PlayerId;

/// A match that was never written (formed, in its ready-check).
pub const NOT_STORED: u64 = 0;
/// A match that ended: a write that comes later (a race with its result) must skip it.
pub const ENDED: u64 = u64::MAX;

/// Live matches per segment, the players each segment's copies name, and the next segment id.
#[derive(Debug)]
pub struct Segments {
    next: u64,
    live: HashMap<u64, usize>,
    /// The copies in a segment outlive their matches until the segment goes: an erasure moves
    /// the live matches off the segments naming the erased player, so that they go.
    names: HashMap<u64, HashSet<PlayerId>>,
    /// Matches marked as ended without a result since this bookkeeping started: their marks
    /// stay in the store until the live matches are compacted.
    marked: usize,
    /// Stored matches of queues the config does not have, in segments of their own.
    pub kept: super::unrestored::Kept,
}

impl Segments {
    /// Segment ids continue after `last` (the highest in the store).
    pub fn after(last: u64) -> Self {
        Self {
            next: last + 1,
            live: HashMap::new(),
            names: HashMap::new(),
            marked: 0,
            kept: Default::default(),
        }
    }

    /// A new segment id, for segments this bookkeeping does not count (kept matches).
    pub fn next_id(&mut self) -> u64 {
        self.next += 1;
        self.next - 1
    }

    /// Bookkeeping that starts over, its ids after every one handed out so far: for writing
    /// every live match anew.
    pub fn fresh(&self) -> Self {
        Self::after(self.next - 1)
    }

    /// A match was marked as ended without a result.
    pub fn mark_ended(&mut self) {
        self.marked += 1;
    }

    /// Matches marked as ended since this bookkeeping started.
    pub fn marked(&self) -> usize {
        self.marked
    }

    /// A new segment for `count` matches whose current segments are `previous` (one entry per
    /// match; [`NOT_STORED`] for a first write) and whose copies name `players`. Returns the new
    /// id and the segments that no longer hold any live match. Callers skip [`ENDED`] matches
    /// before calling.
    pub fn write(
        &mut self,
        previous: &[u64],
        players: impl IntoIterator<Item = PlayerId>,
    ) -> (u64, Vec<u64>) {
        debug_assert!(!previous.contains(&ENDED));
        let id = self.next;
        self.next += 1;
        let dropped = previous.iter().filter_map(|&p| self.release(p)).collect();
        self.live.insert(id, previous.len());
        self.names.insert(id, players.into_iter().collect());
        (id, dropped)
    }

    /// The segments still stored whose copies name `player`.
    pub fn naming(&self, player: &PlayerId) -> HashSet<u64> {
        self.names
            .iter()
            .filter(|(_, names)| names.contains(player))
            .map(|(id, _)| *id)
            .collect()
    }

    /// A match held by `segment` ended (or moved to a newer segment). Returns the segment if it
    /// holds no live match any more.
    pub fn release(&mut self, segment: u64) -> Option<u64> {
        if segment == NOT_STORED || segment == ENDED {
            return None;
        }
        let live = self.live.get_mut(&segment)?;
        *live = live.saturating_sub(1);
        if *live > 0 {
            return None;
        }
        self.live.remove(&segment);
        self.names.remove(&segment);
        Some(segment)
    }

    /// Segments still holding live matches.
    #[cfg(test)]
    fn segments(&self) -> usize {
        self.live.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_segment_is_dropped_when_its_last_match_ends() {
        let mut s = Segments::after(7);
        let (a, dropped) = s.write(&[NOT_STORED, NOT_STORED, NOT_STORED], []);
        assert_eq!(
            (a, dropped),
            (8, vec![]),
            "ids continue after the store's last"
        );
        assert_eq!(s.release(a), None);
        assert_eq!(s.release(a), None);
        assert_eq!(s.release(a), Some(a), "third of three ended");
        assert_eq!(s.segments(), 0);
    }

    #[test]
    fn a_rewrite_moves_a_match_and_may_empty_its_old_segment() {
        let mut s = Segments::after(0);
        let (a, _) = s.write(&[NOT_STORED, NOT_STORED], []);
        let (b, dropped) = s.write(&[a], []);
        assert!(b > a);
        assert!(dropped.is_empty(), "the other match still lives in {a}");
        let (c, dropped) = s.write(&[a, b], []);
        assert_eq!(dropped, vec![a, b], "both old homes are empty now");
        assert_eq!(s.segments(), 1);
        assert_eq!(s.release(c), None);
        assert_eq!(s.release(c), Some(c));
    }

    #[test]
    fn unstored_and_ended_matches_release_nothing() {
        let mut s = Segments::after(0);
        let (a, _) = s.write(&[NOT_STORED], []);
        assert_eq!(s.release(NOT_STORED), None);
        assert_eq!(s.release(ENDED), None);
        assert_eq!(s.release(a + 100), None, "unknown segment");
        assert_eq!(s.segments(), 1);
    }
}

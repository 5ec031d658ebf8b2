//! The results this server applied since it started, newest kept: the Matches view's list of
//! recent results (no RPC lists every player's matches), and the win probabilities at formation
//! of matches recorded before the match record kept them. A bounded ring, lost on restart;
//! a match's page, a player's matches and their chart read the durable records instead. With it,
//! the erasures of the last seconds, for the results announced just after them. Pure: entries
//! and erasures come in with their time; queries scan the ring (it is small).

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::ids::PlayerId;

/// One player's change in a result, in the queue's display units.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Change {
    pub player_id: String,
    pub rating_before: f64,
    pub rating_after: f64,
    pub rank_points_before: u32,
    pub rank_points_after: u32,
}

/// One applied result.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Entry {
    pub match_id: String,
    pub queue: String,
    /// Unix seconds when it was applied.
    pub applied_unix: f64,
    /// Unix seconds when the match formed.
    pub formed_unix: f64,
    pub teams: Vec<Vec<String>>,
    /// Per team, as predicted when the match formed.
    pub win_probability: Vec<f64>,
    /// Per team, 1 = first.
    pub placements: Vec<u32>,
    pub changes: Vec<Change>,
}

/// The newest `capacity` results.
#[derive(Debug)]
pub struct Feed {
    capacity: usize,
    entries: VecDeque<Entry>,
}

impl Entry {
    /// Names `marker` wherever the entry names `player`.
    pub fn erase(&mut self, player: &str, marker: &str) {
        for id in self.teams.iter_mut().flatten() {
            if id == player {
                marker.clone_into(id);
            }
        }
        for change in &mut self.changes {
            if change.player_id == player {
                marker.clone_into(&mut change.player_id);
            }
        }
    }
}

impl Feed {
    #[must_use]
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity: capacity.max(1),
            entries: VecDeque::new(),
        }
    }

    /// Adds a result, dropping the oldest past the capacity.
    pub fn push(&mut self, entry: Entry) {
        if self.entries.len() == self.capacity {
            self.entries.pop_front();
        }
        self.entries.push_back(entry);
    }

    /// The newest `limit` results, of `queue` if given, newest first.
    #[must_use]
    pub fn recent(&self, queue: Option<&str>, limit: usize) -> Vec<&Entry> {
        self.entries
            .iter()
            .rev()
            .filter(|e| queue.is_none_or(|q| e.queue == q))
            .take(limit)
            .collect()
    }

    /// Forgets every kept result.
    pub fn clear(&mut self) {
        self.entries.clear();
    }

    /// Puts `marker` in `player`'s place in every kept result (the player was erased).
    pub fn erase(&mut self, player: &str, marker: &str) {
        for entry in &mut self.entries {
            entry.erase(player, marker);
        }
    }

    /// The result of `match_id`, if it is still in the ring.
    #[must_use]
    pub fn get(&self, match_id: &str) -> Option<&Entry> {
        self.entries.iter().rev().find(|e| e.match_id == match_id)
    }

    #[must_use]
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// The erasures of the last `window`. A result is applied (its players free) a moment before
/// it is announced, so an erasure can be announced first: the results announced within the
/// window after it are erased too. Erasures older than the window go as new ones come, so
/// erasures with no result announced meanwhile do not pile up.
#[derive(Debug)]
pub struct RecentErasures {
    window: Duration,
    /// `(when, player, marker)`, oldest first.
    erasures: VecDeque<(Instant, PlayerId, PlayerId)>,
}

impl RecentErasures {
    #[must_use]
    pub fn new(window: Duration) -> Self {
        Self {
            window,
            erasures: VecDeque::new(),
        }
    }

    /// `player` was erased at `now`, `marker` in their place.
    pub fn push(&mut self, now: Instant, player: PlayerId, marker: PlayerId) {
        self.forget_before(now);
        self.erasures.push_back((now, player, marker));
    }

    /// Puts each player erased within the window before `now` out of `entry`.
    pub fn erase_from(&mut self, now: Instant, entry: &mut Entry) {
        self.forget_before(now);
        for (_, player, marker) in &self.erasures {
            entry.erase(player.as_str(), marker.as_str());
        }
    }

    /// Erasures kept now.
    #[must_use]
    pub fn len(&self) -> usize {
        self.erasures.len()
    }

    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.erasures.is_empty()
    }

    fn forget_before(&mut self, now: Instant) {
        while self
            .erasures
            .front()
            .is_some_and(|(at, _, _)| now.saturating_duration_since(*at) > self.window)
        {
            self.erasures.pop_front();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(id: &str, queue: &str, t: f64, players: &[(&str, f64, f64)]) -> Entry {
        Entry {
            match_id: id.into(),
            queue: queue.into(),
            applied_unix: t,
            formed_unix: t - 5.0,
            teams: players.iter().map(|p| vec![p.0.to_string()]).collect(),
            win_probability: vec![0.5; players.len()],
            placements: (1..=players.len() as u32).collect(),
            changes: players
                .iter()
                .map(|&(p, before, after)| Change {
                    player_id: p.into(),
                    rating_before: before,
                    rating_after: after,
                    rank_points_before: before as u32 / 10,
                    rank_points_after: after as u32 / 10,
                })
                .collect(),
        }
    }

    #[test]
    fn an_erased_player_is_the_marker_in_every_kept_result() {
        let mut f = Feed::new(4);
        f.push(entry(
            "m1",
            "1v1",
            10.0,
            &[("a", 1500.0, 1510.0), ("b", 1500.0, 1490.0)],
        ));
        f.push(entry(
            "m2",
            "1v1",
            20.0,
            &[("ab", 1500.0, 1510.0), ("c", 1500.0, 1490.0)],
        ));
        f.erase("a", "erased:0123456789ab");
        let m1 = f.get("m1").unwrap();
        assert_eq!(m1.teams, [["erased:0123456789ab"], ["b"]]);
        assert_eq!(m1.changes[0].player_id, "erased:0123456789ab");
        assert_eq!(m1.changes[1].player_id, "b");
        let m2 = f.get("m2").unwrap();
        assert_eq!(
            m2.teams,
            [["ab"], ["c"]],
            "another player's id is left alone"
        );
    }

    #[test]
    fn erasures_with_no_result_announced_are_kept_only_for_their_window() {
        let window = Duration::from_secs(10);
        let mut recent = RecentErasures::new(window);
        let start = Instant::now();
        // An erasure a second for a day, and no result announced.
        for i in 0..86_400u64 {
            let id = PlayerId::new(format!("p-{i}"));
            let marker = PlayerId::new(format!("erased:{i:012x}"));
            recent.push(start + Duration::from_secs(i), id, marker);
        }
        assert!(recent.len() <= 11, "kept {}", recent.len());
        // A result announced within the window of the last erasure is still erased.
        let mut e = entry("m1", "1v1", 10.0, &[("p-86399", 1500.0, 1510.0)]);
        recent.erase_from(start + Duration::from_secs(86_405), &mut e);
        assert_eq!(e.teams, [[format!("erased:{:012x}", 86_399)]]);
        let mut later = entry("m2", "1v1", 20.0, &[("p-86399", 1500.0, 1510.0)]);
        recent.erase_from(start + Duration::from_secs(86_420), &mut later);
        assert_eq!(later.teams, [["p-86399"]], "past the window");
        assert!(recent.is_empty());
    }

    #[test]
    fn the_ring_keeps_the_newest_and_answers_newest_first() {
        let mut f = Feed::new(2);
        f.push(entry("m1", "1v1", 10.0, &[("a", 1500.0, 1510.0)]));
        f.push(entry("m2", "2v2", 20.0, &[("a", 1500.0, 1490.0)]));
        f.push(entry("m3", "1v1", 30.0, &[("b", 1500.0, 1520.0)]));
        assert_eq!(f.len(), 2);
        assert!(f.get("m1").is_none(), "the oldest went");
        let ids: Vec<&str> = f
            .recent(None, 10)
            .iter()
            .map(|e| e.match_id.as_str())
            .collect();
        assert_eq!(ids, ["m3", "m2"]);
        assert_eq!(f.recent(Some("1v1"), 10).len(), 1);
        assert_eq!(f.recent(None, 1)[0].match_id, "m3");
        assert_eq!(f.get("m2").unwrap().queue, "2v2");
    }
}

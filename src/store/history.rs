//! The match history's bookkeeping, shared by the backends that can read their current values
//! while they build a batch (sled and memory; Redis runs the same rules in its Lua script):
//! each player's list of match ids, most recently ended first and at most `keep` long, and
//! per record the number of lists that hold it, so a record goes once no player's history
//! names it.
//!
//! A record outlives its place in a player's list while other lists hold it, and it still
//! names that player. Each player's past index keeps those records (the ones that left the
//! player's list while another list still held them), so erasing the player rewrites them too.
//! A record leaves the past index of every player it names when it is dropped, so each index
//! only names stored records: it is bounded by the history the other lists keep.

use std::collections::HashMap;

use super::{HistoryWrite, StoreError};
use crate::ids::{MatchId, PlayerId};
use crate::records::MatchRecord;

/// What one batch does to the history, computed from the backend's current values.
#[derive(Debug, Default)]
pub(super) struct HistoryPlan {
    /// The new list of every player the batch touches, most recent first.
    pub(super) lists: HashMap<PlayerId, Vec<MatchId>>,
    /// The new holder count of every record the batch touches; 0 = drop the record.
    pub(super) refs: HashMap<MatchId, u32>,
    /// Records to write, in order (a record dropped later in the same batch is dropped after).
    pub(super) records: Vec<MatchRecord>,
    /// Each (player, record) cut off a player's list, in order.
    evicted: Vec<(PlayerId, MatchId)>,
}

/// What a batch does to the players' past indexes.
#[derive(Debug, Default, PartialEq)]
pub(super) struct PastChanges {
    /// Records that left a player's list while another list still holds them.
    pub(super) added: Vec<(PlayerId, MatchId)>,
    /// Dropped records, out of the index of every player they name.
    pub(super) removed: Vec<(PlayerId, MatchId)>,
}

/// A backend's current list of a player's matches.
pub(super) type ReadList<'a> = dyn FnMut(&PlayerId) -> Result<Vec<MatchId>, StoreError> + 'a;
/// A backend's current holder count of a record (0 when absent).
pub(super) type ReadRefs<'a> = dyn FnMut(&MatchId) -> Result<u32, StoreError> + 'a;

impl HistoryPlan {
    /// Adds `write`: its record at the head of each of its players' lists (once: a list that
    /// already holds it moves it to the head), every list cut to `keep`, evicted records'
    /// holder counts lowered.
    pub(super) fn add(
        &mut self,
        write: &HistoryWrite,
        list: &mut ReadList<'_>,
        refs: &mut ReadRefs<'_>,
    ) -> Result<(), StoreError> {
        let record = &write.record;
        let id = &record.match_id;
        let players = record.players();
        let keep = write.keep.max(1) as usize;
        self.refs.insert(id.clone(), players.len() as u32);
        self.records.push(record.clone());
        for player in players {
            let current = match self.lists.remove(&player) {
                Some(l) => l,
                None => list(&player)?,
            };
            let mut next = Vec::with_capacity(current.len() + 1);
            next.push(id.clone());
            next.extend(current.into_iter().filter(|m| m != id));
            for evicted in next.split_off(keep.min(next.len())) {
                let count = match self.refs.get(&evicted) {
                    Some(&n) => n,
                    None => refs(&evicted)?,
                };
                self.refs.insert(evicted.clone(), count.saturating_sub(1));
                self.evicted.push((player.clone(), evicted));
            }
            self.lists.insert(player, next);
        }
        Ok(())
    }

    /// Records no list holds any more.
    pub(super) fn dropped(&self) -> impl Iterator<Item = &MatchId> {
        self.refs.iter().filter(|(_, n)| **n == 0).map(|(id, _)| id)
    }

    /// The past indexes' changes: a record cut off a list goes to that player's index unless
    /// the batch drops it; a dropped record leaves the index of every player it names (read
    /// with `record` unless the batch writes it).
    pub(super) fn past(&self, record: &mut ReadRecord<'_>) -> Result<PastChanges, StoreError> {
        let mut changes = PastChanges::default();
        for (player, id) in &self.evicted {
            if self.refs.get(id).is_some_and(|n| *n > 0) {
                changes.added.push((player.clone(), id.clone()));
            }
        }
        let mut dropped: Vec<&MatchId> = self.dropped().collect();
        dropped.sort();
        for id in dropped {
            let players = match self.records.iter().rev().find(|r| &r.match_id == id) {
                Some(r) => r.players(),
                None => record(id)?.map(|r| r.players()).unwrap_or_default(),
            };
            changes
                .removed
                .extend(players.into_iter().map(|p| (p, id.clone())));
        }
        Ok(changes)
    }

    /// Whether the batch changes nothing.
    pub(super) fn is_empty(&self) -> bool {
        self.records.is_empty()
    }
}

/// A backend's current record of a match (`None` once dropped).
pub(super) type ReadRecord<'a> =
    dyn FnMut(&MatchId) -> Result<Option<MatchRecord>, StoreError> + 'a;

/// What erasing one player does to the history, computed from the backend's current values:
/// the player's list and past index go; each record the list held loses a holder, and goes
/// with its last one or else is kept with the player's id replaced by the erasure's marker, as
/// is every record of the past index (other lists hold it).
#[derive(Debug, Default, PartialEq)]
pub(super) struct HistoryErasure {
    /// The new holder count of each record the list held that another list still holds.
    pub(super) refs: Vec<(MatchId, u32)>,
    /// Those records and the past index's, rewritten to name the marker instead of the player.
    pub(super) rewritten: Vec<MatchRecord>,
    /// Records no list holds any more.
    pub(super) dropped: Vec<MatchId>,
    /// The dropped records, out of the past index of every other player they name.
    pub(super) unindexed: Vec<(PlayerId, MatchId)>,
}

impl HistoryErasure {
    /// Plans the erasure of `player`, whose list is `list` and past index `past`.
    pub(super) fn plan(
        player: &PlayerId,
        marker: &PlayerId,
        list: &[MatchId],
        past: &[MatchId],
        refs: &mut ReadRefs<'_>,
        record: &mut ReadRecord<'_>,
    ) -> Result<Self, StoreError> {
        let mut plan = Self::default();
        for id in list {
            let held = refs(id)?.saturating_sub(1);
            match record(id)? {
                Some(mut r) if held > 0 => {
                    r.erase(player, marker);
                    plan.refs.push((id.clone(), held));
                    plan.rewritten.push(r);
                }
                found => {
                    let others = found.map(|r| r.players()).unwrap_or_default();
                    plan.unindexed.extend(
                        others
                            .into_iter()
                            .filter(|p| p != player)
                            .map(|p| (p, id.clone())),
                    );
                    plan.dropped.push(id.clone());
                }
            }
        }
        for id in past.iter().filter(|id| !list.contains(id)) {
            // A record dropped since it entered the index left it then: nothing to rewrite.
            if let Some(mut r) = record(id)?
                && r.erase(player, marker)
            {
                plan.rewritten.push(r);
            }
        }
        Ok(plan)
    }
}

/// The page of a player's history after `after` (exclusive; `None` = from the most recent):
/// the ids in order, or `None` when `after` is not in the list.
pub fn page_after<'a>(ids: &'a [MatchId], after: Option<&MatchId>) -> Option<&'a [MatchId]> {
    match after {
        None => Some(ids),
        Some(after) => ids.iter().position(|m| m == after).map(|at| &ids[at + 1..]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::EndedPhase;

    fn record(id: &str, teams: &[&[&str]]) -> MatchRecord {
        MatchRecord {
            match_id: MatchId::from(id),
            queue: "1v1".into(),
            phase: EndedPhase::Cancelled,
            teams: teams
                .iter()
                .map(|t| t.iter().map(|p| PlayerId::from(*p)).collect())
                .collect(),
            placements: Vec::new(),
            changes: Vec::new(),
            server_address: "gs".into(),
            win_probability: Vec::new(),
            formed_unix: 1.0,
            started_unix: None,
            ended_unix: 2.0,
        }
    }

    #[derive(Default)]
    struct Backend {
        lists: HashMap<PlayerId, Vec<MatchId>>,
        refs: HashMap<MatchId, u32>,
    }

    impl Backend {
        /// Applies one write; returns the records dropped.
        fn apply(&mut self, id: &str, teams: &[&[&str]]) -> Vec<MatchId> {
            let w = HistoryWrite {
                record: record(id, teams),
                keep: 2,
            };
            let mut plan = HistoryPlan::default();
            plan.add(
                &w,
                &mut |p| Ok(self.lists.get(p).cloned().unwrap_or_default()),
                &mut |m| Ok(self.refs.get(m).copied().unwrap_or(0)),
            )
            .unwrap();
            let dropped: Vec<MatchId> = plan.dropped().cloned().collect();
            self.lists.extend(plan.lists);
            self.refs.extend(plan.refs);
            for d in &dropped {
                self.refs.remove(d);
            }
            dropped
        }

        fn list(&self, p: &str) -> Vec<&str> {
            self.lists[&PlayerId::from(p)]
                .iter()
                .map(MatchId::as_str)
                .collect()
        }
    }

    #[test]
    fn lists_keep_the_newest_and_records_go_with_their_last_holder() {
        let mut b = Backend::default();
        assert!(b.apply("a", &[&["p1"], &["p2"]]).is_empty());
        assert!(b.apply("b", &[&["p1"], &["p3"]]).is_empty());
        // p1 keeps b and c; a is still p2's.
        assert!(b.apply("c", &[&["p1"]]).is_empty());
        assert_eq!(b.refs[&MatchId::from("a")], 1);
        // p2's two newer matches push a out of its last list.
        assert!(b.apply("d", &[&["p2"]]).is_empty());
        assert_eq!(b.apply("e", &[&["p2"]]), vec![MatchId::from("a")]);
        assert_eq!(b.list("p1"), ["c", "b"]);
        assert!(!b.refs.contains_key(&MatchId::from("a")));
        // The same record again moves to the head, held once per player.
        b.apply("b", &[&["p1"], &["p3"]]);
        assert_eq!(b.list("p1"), ["b", "c"]);
        assert_eq!(b.refs[&MatchId::from("b")], 2);
    }

    #[test]
    fn erasing_drops_the_records_only_the_player_held_and_marks_the_others() {
        let mut b = Backend::default();
        b.apply("a", &[&["gone"], &["p2"]]);
        b.apply("b", &[&["gone"]]);
        let records: HashMap<MatchId, MatchRecord> = [
            record("a", &[&["gone"], &["p2"]]),
            record("b", &[&["gone"]]),
        ]
        .into_iter()
        .map(|r| (r.match_id.clone(), r))
        .collect();
        let gone = PlayerId::from("gone");
        let marker = PlayerId::from("erased:x");
        let plan = HistoryErasure::plan(
            &gone,
            &marker,
            &b.lists[&gone],
            &[],
            &mut |m| Ok(b.refs.get(m).copied().unwrap_or(0)),
            &mut |m| Ok(records.get(m).cloned()),
        )
        .unwrap();
        assert_eq!(plan.dropped, vec![MatchId::from("b")]);
        assert_eq!(plan.refs, vec![(MatchId::from("a"), 1)]);
        assert_eq!(plan.rewritten[0].teams[0], vec![marker]);
        assert_eq!(plan.rewritten[0].teams[1], vec![PlayerId::from("p2")]);
    }

    #[test]
    fn a_record_cut_off_a_list_joins_the_players_past_until_it_is_dropped() {
        let mut lists: HashMap<PlayerId, Vec<MatchId>> = HashMap::new();
        let mut refs: HashMap<MatchId, u32> = HashMap::new();
        let mut stored: HashMap<MatchId, MatchRecord> = HashMap::new();
        let mut apply = |writes: &[(&str, &[&[&str]])]| -> PastChanges {
            let mut plan = HistoryPlan::default();
            for (id, teams) in writes {
                let w = HistoryWrite {
                    record: record(id, teams),
                    keep: 1,
                };
                plan.add(
                    &w,
                    &mut |p| Ok(lists.get(p).cloned().unwrap_or_default()),
                    &mut |m| Ok(refs.get(m).copied().unwrap_or(0)),
                )
                .unwrap();
            }
            let past = plan.past(&mut |m| Ok(stored.get(m).cloned())).unwrap();
            for r in &plan.records {
                stored.insert(r.match_id.clone(), r.clone());
            }
            for d in plan.dropped() {
                stored.remove(d);
            }
            lists.extend(plan.lists);
            refs.extend(plan.refs);
            past
        };
        let pair = |p: &str, m: &str| (PlayerId::from(p), MatchId::from(m));
        apply(&[("a", &[&["p1"], &["p2"]])]);
        // p1's next match cuts a off p1's list; p2 still holds it.
        let past = apply(&[("b", &[&["p1"]])]);
        assert_eq!(past.added, vec![pair("p1", "a")]);
        assert!(past.removed.is_empty());
        // p2's next match drops a (read from the store): it leaves both players' indexes.
        let past = apply(&[("c", &[&["p2"]])]);
        assert!(past.added.is_empty());
        assert_eq!(past.removed, vec![pair("p1", "a"), pair("p2", "a")]);
        // Cut off and dropped in one batch: in no index.
        let past = apply(&[
            ("d", &[&["p1"], &["p3"]]),
            ("e", &[&["p1"]]),
            ("f", &[&["p3"]]),
        ]);
        assert!(
            past.added.iter().all(|(_, m)| m.as_str() != "d"),
            "{past:?}"
        );
        assert!(past.removed.contains(&pair("p1", "d")));
    }

    #[test]
    fn erasing_rewrites_the_records_of_the_past_index_and_unindexes_the_dropped() {
        let records: HashMap<MatchId, MatchRecord> = [
            record("old", &[&["gone"], &["p2"]]),
            record("last", &[&["gone"], &["p3"]]),
        ]
        .into_iter()
        .map(|r| (r.match_id.clone(), r))
        .collect();
        let gone = PlayerId::from("gone");
        let marker = PlayerId::from("erased:x");
        // "old" left gone's list (p2 holds it); "last" is gone's alone (p3's list cut it).
        // "lost" was dropped after it entered the index.
        let plan = HistoryErasure::plan(
            &gone,
            &marker,
            &[MatchId::from("last")],
            &[MatchId::from("lost"), MatchId::from("old")],
            &mut |m| Ok(u32::from(m.as_str() != "lost")),
            &mut |m| Ok(records.get(m).cloned()),
        )
        .unwrap();
        assert_eq!(plan.dropped, vec![MatchId::from("last")]);
        assert_eq!(
            plan.unindexed,
            vec![(PlayerId::from("p3"), MatchId::from("last"))]
        );
        assert!(plan.refs.is_empty(), "gone held no past record");
        assert_eq!(plan.rewritten.len(), 1);
        assert_eq!(
            plan.rewritten[0].teams,
            vec![vec![marker], vec![PlayerId::from("p2")]]
        );
    }

    #[test]
    fn pages_continue_after_their_token() {
        let ids: Vec<MatchId> = ["c", "b", "a"].into_iter().map(MatchId::from).collect();
        assert_eq!(page_after(&ids, None).unwrap().len(), 3);
        assert_eq!(
            page_after(&ids, Some(&MatchId::from("b"))).unwrap(),
            &ids[2..]
        );
        assert_eq!(
            page_after(&ids, Some(&MatchId::from("a"))).unwrap().len(),
            0
        );
        assert!(page_after(&ids, Some(&MatchId::from("z"))).is_none());
    }
}

//! Results in the state: claim a match, compute its journal entry with `results::compute`, and
//! apply the entry once it is durable.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::{Assignment, MatchPhase, MatchSlot, PlayerStatus, State, unix_now};
use crate::ids::PlayerId;
use crate::records::PoolRecord;
use crate::rejection::{MatchRefusal, Rejection};
use crate::results::{self, QueueRanker};
use crate::store::JournalEntry;

impl State {
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
        team_scores: &[f64],
        performance: &BTreeMap<String, f64>,
        abandoned: &[String],
    ) -> Result<(JournalEntry, MatchPhase), Rejection> {
        const ATTEMPTS: usize = 8;
        for _ in 0..ATTEMPTS {
            let assignment = Self::resultable(m)?;
            let entry = self.compute_result(
                m,
                &assignment,
                placements,
                team_scores,
                performance,
                abandoned,
            )?;
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
    pub(super) fn resultable(m: &MatchSlot) -> Result<Arc<Assignment>, Rejection> {
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
    pub(super) fn compute_result(
        &self,
        m: &MatchSlot,
        assignment: &Assignment,
        placements: &[u32],
        team_scores: &[f64],
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
                team_scores,
            },
            &before,
            now,
        )?;
        let history = self.history_write(
            m,
            assignment,
            crate::records::EndedPhase::Completed,
            placements,
            &computed.ack.changes,
            now,
        );
        Ok(JournalEntry {
            match_id: m.id.clone(),
            applied_unix: now,
            pool: queue.pool.clone(),
            records: computed.records,
            parties: computed.parties,
            ack: computed.ack,
            kind: crate::store::EntryKind::Result,
            season: None,
            calibration: computed.calibration,
            history: Some(history),
        })
    }

    /// Applies a durable journal entry: every player's record at once, players free again, the
    /// match completed and forgotten (its acknowledgement stays in the store for duplicates).
    /// Its events were journaled with it (`Committer::commit_with_events`).
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
    pub(super) fn apply_records(&self, entry: &JournalEntry) {
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
        if let Some(observation) = &entry.calibration {
            self.observe_calibration(&entry.pool, observation);
        }
        for (key, record) in &entry.parties {
            self.inner
                .parties
                .entry(key.clone())
                .or_default()
                .insert(entry.pool.clone(), record.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A state on an in-memory store with one FORMED 1v1 match between `a` and `b`.
    fn state_with_a_match() -> (State, Arc<MatchSlot>) {
        let state = crate::state::test_util::state();
        let m = crate::state::test_util::formed_1v1(&state, "m-1", "a", "b", "");
        (state, m)
    }

    #[test]
    fn a_result_being_journaled_holds_its_match_until_applied_or_given_back() {
        let (state, m) = state_with_a_match();
        let none = BTreeMap::new();
        let (entry, previous) = state.prepare_result(&m, &[1, 2], &[], &none, &[]).unwrap();
        assert_eq!(previous, MatchPhase::Formed);
        assert_eq!(m.phase(), MatchPhase::Completing);
        // While it is journaled: no cancel, no second result, no dissolving it.
        let cancel = state.cancel_match(&m, "test").unwrap_err().to_string();
        assert!(cancel.contains("result being applied"), "{cancel}");
        let again = state
            .prepare_result(&m, &[2, 1], &[], &none, &[])
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
        let (entry2, previous) = state.prepare_result(&m, &[1, 2], &[], &none, &[]).unwrap();
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
}

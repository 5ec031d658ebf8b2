//! Results in the state: claim a match, compute its journal entry with `results::compute`, and
//! apply the entry once it is durable.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::events::{period_close_events, result_events};
use super::{Assignment, MatchPhase, MatchSlot, PlayerStatus, QueueInfo, State};
use crate::ids::PlayerId;
use crate::records::{PoolRecord, ResultAck};
use crate::rejection::{MatchRefusal, Rejection};
use crate::results::{self, QueueRanker};
use crate::store::{EntryKind, EventRecord, JournalEntry};

/// Players an admin entry writes under one hold of their locks and the pool's leaderboard
/// ([`State::apply_records`]): a caller waits behind at most one chunk, and a million players
/// take the leaderboard's lock a thousand times, not a million.
const APPLY_CHUNK: usize = 1024;

/// A result computed from the players' current records, its match claimed for it.
#[derive(Debug)]
pub struct PreparedResult {
    /// What to journal.
    pub entry: JournalEntry,
    /// The phase to give back ([`State::unclaim`]) if journaling fails.
    pub claimed: MatchPhase,
    /// What to journal in the entry's batch ([`State::result_events_of`]).
    pub events: Vec<EventRecord>,
}

impl State {
    /// Validates a report, computes its journal entry from the players' current records and
    /// claims the match for it: the match is [`MatchPhase::Completing`] until
    /// [`State::apply_result`] applies the entry once it is durable, or [`State::unclaim`] gives
    /// the match back if journaling failed. Changes nothing else.
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
    ) -> Result<PreparedResult, Rejection> {
        const ATTEMPTS: usize = 8;
        for _ in 0..ATTEMPTS {
            let assignment = Self::resultable(m)?;
            let (entry, events) = self.compute_result(
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
                let claimed = std::mem::replace(&mut inner.phase, MatchPhase::Completing);
                return Ok(PreparedResult {
                    entry,
                    claimed,
                    events,
                });
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
    /// records: [`results::compute`] at the wall clock's time; with its events
    /// ([`State::result_events_of`]).
    pub(super) fn compute_result(
        &self,
        m: &MatchSlot,
        assignment: &Assignment,
        placements: &[u32],
        team_scores: &[f64],
        performance: &BTreeMap<String, f64>,
        abandoned: &[String],
    ) -> Result<(JournalEntry, Vec<EventRecord>), Rejection> {
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
        // The store's clock (Redis's in a cluster): rating periods and the acknowledgement's
        // retention are judged on it by whichever node owns the queues.
        let now = self.inner.store.now_unix();
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
        let events = Self::result_events_of(
            &queue,
            m.id.as_str(),
            &computed.ack,
            &computed.period_closes,
            &computed.void,
            now,
        );
        let entry = JournalEntry {
            match_id: m.id.clone(),
            applied_unix: now,
            pool: queue.pool.clone(),
            records: computed.records,
            parties: computed.parties,
            ack: computed.ack,
            kind: EntryKind::Result,
            season: None,
            calibration: computed.calibration,
            history: Some(history),
        };
        Ok((entry, events))
    }

    /// A result's events: first the rating periods it closed before it rated the match (their
    /// change is in no acknowledgement: its "before" is the closed record), then the match
    /// completed and each player's change, marked as waiting for the period in a periodic pool
    /// or as void for those whose opponents all quit.
    fn result_events_of(
        queue: &QueueInfo,
        match_id: &str,
        ack: &ResultAck,
        period_closes: &[results::PeriodClose],
        void: &[PlayerId],
        unix: f64,
    ) -> Vec<EventRecord> {
        let mut events = period_close_events(queue.id.as_str(), &queue.pool, period_closes, unix);
        events.extend(result_events(
            match_id,
            ack,
            unix,
            queue.config.rating.is_periodic(),
            void,
        ));
        events
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
        self.note_idle(&ids);
        let server = {
            let mut inner = m.lock();
            inner.phase = MatchPhase::Completed;
            inner.assignment.server_address.clone()
        };
        if server.is_empty() {
            // Reported before a game server took it (an admin, or anyone with auth off): its
            // tickets' watchers get their last update here, as no server will send one.
            for id in m.tickets() {
                if let Ok(ticket) = self.ticket(&id) {
                    ticket.publish_over(
                        super::TicketView {
                            ended: true,
                            reason: "the match's result was reported before a game server took it"
                                .into(),
                            ready: None,
                            ..ticket.view()
                        },
                        |now| now.state == super::TicketState::Matched,
                    );
                }
            }
        }
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

    /// Writes an entry's records into memory, then folds in its calibration observation and
    /// writes its party records.
    ///
    /// A result's entry (one match's players) is written under all its players' locks at once,
    /// so every reader sees the whole result or none of it. An admin entry is written in chunks
    /// of [`APPLY_CHUNK`] players in id order: each chunk's players are locked in ascending id
    /// order, then the pool's leaderboard (the lock order: players, then the pool's index),
    /// written, and released before the next chunk is locked. An admin entry can hold every
    /// record of a pool (a season reset, the end of a season, a rating period's close, a
    /// migration): for a million players that is seconds of work, during which holding them all
    /// would stop every caller that reads or locks any of them (entering a queue, a player's
    /// record or tier, a leaderboard, the matchmaker forming a match), and with them every
    /// worker of the runtime, down to health checks and a cluster node's lease renewals.
    ///
    /// What readers may see while an admin entry is applied: some players' new records and
    /// others' old ones. A leaderboard page or a ladder tier (Grandweaver places by rank) may
    /// rank new records among old ones, a ticket entered meanwhile may carry either rating, and
    /// a match formed meanwhile may pair a player rated after the change with one rated before
    /// it. What holds throughout: each player's record and leaderboard entry change together,
    /// under the player's lock and the index's, so a player's entry always matches their
    /// record; and no result or other admin change is computed or applied in between (the
    /// ledger's gate keeps results and admin changes out from their prepare to their apply,
    /// and start-up replay runs before anything else holds the state), so nothing is computed
    /// from the mix and the entry ends as if it had been applied at once.
    pub(super) fn apply_records(&self, entry: &JournalEntry) {
        let mut sorted: Vec<&(PlayerId, PoolRecord)> = entry.records.iter().collect();
        sorted.sort_by(|a, b| a.0.cmp(&b.0));
        let chunk = match entry.kind {
            EntryKind::Result => sorted.len().max(1),
            EntryKind::Admin => APPLY_CHUNK,
        };
        let pool = self.inner.pool_names.get(&entry.pool);
        let ranked = self.inner.pool_systems.contains_key(&entry.pool);
        for records in sorted.chunks(chunk) {
            let slots: Vec<_> = records.iter().map(|(p, _)| self.slot(p)).collect();
            let mut guards = Self::lock_players(&slots);
            let mut index = ranked.then(|| self.rank_index(&entry.pool));
            let mut first_records = Vec::new();
            for (((id, r), slot), guard) in records.iter().zip(&slots).zip(&mut guards) {
                debug_assert_eq!(id, &slot.id);
                if !guard.pools.contains_key(&entry.pool) {
                    first_records.push(id);
                }
                if let Some(index) = index.as_mut() {
                    let old = guard
                        .pools
                        .get(&entry.pool)
                        .and_then(|old| self.leaderboard_entry(id, &entry.pool, old));
                    if let Some(new) = self.leaderboard_entry(id, &entry.pool, r) {
                        index.replace(old.as_ref(), new);
                    }
                }
                guard.pools.insert(pool.clone(), r.clone());
            }
            // Still holding the players: an erasure of one is noted after this.
            self.export_rated(&entry.pool, first_records);
            drop(index);
            drop(guards);
        }
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
        let prepared = state.prepare_result(&m, &[1, 2], &[], &none, &[]).unwrap();
        let (entry, previous) = (prepared.entry, prepared.claimed);
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
        let prepared = state.prepare_result(&m, &[1, 2], &[], &none, &[]).unwrap();
        let (entry2, previous) = (prepared.entry, prepared.claimed);
        assert_eq!(
            entry2.records, entry.records,
            "same records from the same state"
        );
        state.apply_result(&m, &entry2);
        assert_eq!(m.phase(), MatchPhase::Completed);
        assert_eq!(previous, MatchPhase::Formed);
        // No game server took it: its tickets' watchers got their last update.
        for t in ["t-a", "t-b"] {
            let view = state.ticket(&crate::ids::TicketId::new(t)).unwrap().view();
            assert!(view.is_final(), "{t}: {view:?}");
            assert!(
                view.reason.contains("before a game server took it"),
                "{view:?}"
            );
        }
        assert_eq!(
            state.player(&PlayerId::new("a"), "1v1").0,
            PlayerStatus::Idle
        );
        let cancel = state.cancel_match(&m, "test").unwrap_err().to_string();
        assert!(cancel.contains("already completed"), "{cancel}");
    }

    /// A result in a periodic pool journals the close of a player's ended rating period as its
    /// own RATING_CHANGED, ahead of the match's: the match's "before" is the closed record, so
    /// the close's change would otherwise reach no watcher. Its own changes wait for the period.
    #[test]
    fn a_periodic_result_journals_the_close_it_makes_first_as_its_own_event() {
        use crate::store::EventKind;
        let state = crate::state::test_util::state_with(
            "[queues.1v1]\nranking = \"ladder\"\n\n[queues.1v1.rating]\nsystem = \"glicko2\"\nmode = \"periodic\"\n",
        );
        let queue = state.queue("queue", "1v1").unwrap();
        // `a` lost twice in period 0, long ended, and has not played since.
        let loss = crate::rating::teams::PeriodResult {
            opponent: queue.config.rating.initial(),
            score: 0.0,
            weight: 1.0,
        };
        let open = PoolRecord {
            rank_points: 700,
            period: Some(Box::new(crate::records::PendingPeriod {
                index: 0,
                results: vec![loss; 2],
            })),
            ..state.initial_record(&queue)
        };
        state.apply_admin(&State::admin_entry(
            "test:setup".into(),
            "1v1",
            vec![(PlayerId::new("a"), open.clone())],
        ));
        let m = crate::state::test_util::formed_1v1(&state, "m-1", "a", "b", "");
        let prepared = state
            .prepare_result(&m, &[1, 2], &[], &BTreeMap::new(), &[])
            .unwrap();
        let kinds: Vec<(EventKind, &str, &str)> = prepared
            .events
            .iter()
            .map(|e| (e.kind, e.match_id.as_str(), e.player_id.as_str()))
            .collect();
        assert_eq!(
            kinds,
            [
                (EventKind::RatingChanged, "", "a"),
                (EventKind::MatchCompleted, "m-1", ""),
                (EventKind::RatingChanged, "m-1", "a"),
                (EventKind::RatingChanged, "m-1", "b"),
            ]
        );
        let detail = |i: usize| -> serde_json::Value {
            serde_json::from_str(&prepared.events[i].detail_json).unwrap()
        };
        let (close, own) = (detail(0), detail(2));
        let change = &prepared.entry.ack.changes[0];
        assert_eq!(close["period_close"], true);
        assert_eq!(close["rank_points_before"], 700);
        assert!(
            change.rank_points_before < 700,
            "two losses cost rank points"
        );
        assert_eq!(close["rank_points_after"], change.rank_points_before);
        assert_eq!(close["mean_before"], open.skill.mean);
        assert_eq!(close["mean_after"], change.before.mean);
        // The match's own change starts where the close left off and waits for the period.
        assert_eq!(own["rank_points_before"], close["rank_points_after"]);
        assert_eq!(own["pending_period"], true);
        assert_eq!(own["mean_before"], own["mean_after"]);
        assert!(own.get("period_close").is_none());
    }

    /// An admin entry of a whole pool holds no player for the whole apply. With the apply held
    /// up halfway through (the lock of a player there taken here), the players of the chunks
    /// before it can be locked and have their new records, each with its leaderboard entry,
    /// the leaderboard itself can be locked, and the players after it can be locked too and
    /// have their old records: a reader sees a mix of new and old records, never a player
    /// whose entry does not match their record, and waits for at most one chunk.
    #[test]
    fn a_pool_wide_entry_frees_each_chunk_of_players_before_it_locks_the_next() {
        use std::time::{Duration, Instant};
        const PLAYERS: usize = 16 * APPLY_CHUNK;
        let state = crate::state::test_util::state();
        let queue = state.queue("queue", "1v1").unwrap();
        let pool = queue.pool.as_str();
        let record = PoolRecord {
            rank_points: 100,
            ..state.initial_record(&queue)
        };
        let ids: Vec<PlayerId> = (0..PLAYERS)
            .map(|i| PlayerId::new(format!("p{i:06}")))
            .collect();
        let entry = State::admin_entry(
            "test:pool-wide".into(),
            pool,
            ids.iter().map(|p| (p.clone(), record.clone())).collect(),
        );
        let (first, held, last) = (&ids[0], &ids[PLAYERS / 2], &ids[PLAYERS - 1]);
        let first_on_board = state.leaderboard_entry(first, pool, &record).unwrap();
        let (first_slot, held_slot, last_slot) =
            (state.slot(first), state.slot(held), state.slot(last));
        let board = state.inner.ranks.get(pool).unwrap();

        let (mixed, seen) = std::thread::scope(|scope| {
            let hold = held_slot.lock();
            let apply = scope.spawn(|| state.apply_records(&entry));
            let deadline = Instant::now() + Duration::from_secs(10);
            let observed = loop {
                let first_now = first_slot
                    .state
                    .try_lock()
                    .map(|s| s.pools.get(pool).cloned())
                    .map_err(|_| "locked");
                let last_now = last_slot
                    .state
                    .try_lock()
                    .map(|s| s.pools.get(pool).cloned())
                    .map_err(|_| "locked");
                let board_now = board
                    .try_lock()
                    .map(|b| (b.contains(&first_on_board), b.len()))
                    .map_err(|_| "locked");
                let seen = format!("first {first_now:?}, last {last_now:?}, board {board_now:?}");
                if first_now == Ok(Some(record.clone()))
                    && last_now == Ok(None)
                    && matches!(board_now, Ok((true, n)) if n <= PLAYERS / 2)
                {
                    break (true, seen);
                }
                if Instant::now() > deadline {
                    break (false, seen);
                }
                std::thread::sleep(Duration::from_millis(1));
            };
            drop(hold);
            apply.join().unwrap();
            observed
        });
        assert!(
            mixed,
            "while the apply waited for {held}, a reader should lock {first} (applied) and \
             {last} (not yet): {seen}"
        );

        // Once applied, every player has the new record and a board entry that matches it.
        for id in &ids {
            assert_eq!(state.player(id, pool).1.as_ref(), Some(&record), "{id}");
        }
        let board = state.rank_index(pool);
        assert_eq!(board.len(), PLAYERS);
        for id in &ids {
            let entry = state.leaderboard_entry(id, pool, &record).unwrap();
            assert!(board.contains(&entry), "{id}");
        }
    }
}

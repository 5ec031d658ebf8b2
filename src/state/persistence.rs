//! What the state writes through the store: live matches in segments, snapshots of every
//! player, and start-up recovery from the snapshot, the journal and the live matches.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use super::matches::MatchInner;
use super::{Assignment, MatchPhase, MatchSlot, PlayerSlot, PlayerStatus, State, segments};
use crate::ids::{PlayerId, QueueId};
use crate::records::{PartyRecord, PoolRecord};
use crate::store::write_failures::log_store_write_failure;
use crate::store::{StoreError, StoredMatch};

impl State {
    /// Records live matches (newly formed, or newly allocated to a server) in one store batch;
    /// the loop calls this once per tick. Durable with the store's next flush (the embedded
    /// store flushes every 500 ms, and every result flushes): a match lost to a crash in that window only means its players
    /// re-queue.
    pub fn persist_matches(&self, matches: &[Arc<MatchSlot>]) {
        // Logged and counted inside.
        let _ = self.write_matches(matches);
    }

    /// [`State::persist_matches`], saying whether the write was taken (it is durable with the
    /// store's next flush): for a change that must not reach a game server otherwise.
    pub fn write_matches(&self, matches: &[Arc<MatchSlot>]) -> Result<(), StoreError> {
        if matches.is_empty() {
            return Ok(());
        }
        // Encoded before the segments lock, which result handlers also take. Each copy is
        // numbered: two threads writing one match (the loop adding a backfilled player, a
        // handler marking it started) may reach the lock in the other order than they copied.
        let encoded: Result<Vec<(u64, Vec<u8>)>, _> = matches
            .iter()
            .map(|m| {
                let (copy, stored) = self.stored_match(m);
                crate::store::encode_match(&stored).map(|bytes| (copy, bytes))
            })
            .collect();
        match encoded {
            Ok(encoded) => self.write_copies(matches, encoded),
            Err(e) => {
                tracing::error!(matches = matches.len(), error = %e, "could not persist matches");
                crate::telemetry::store_error("persist_matches");
                Err(e)
            }
        }
    }

    /// Writes `encoded` (numbered copies, parallel to `matches`) under the segments lock.
    fn write_copies(
        &self,
        matches: &[Arc<MatchSlot>],
        encoded: Vec<(u64, Vec<u8>)>,
    ) -> Result<(), StoreError> {
        let mut segments = self.lock_segments();
        // A match whose result (or cancel) came in meanwhile is not written again, nor one a
        // newer copy of which is written already.
        let (live, encoded): (Vec<&Arc<MatchSlot>>, Vec<Vec<u8>>) = matches
            .iter()
            .zip(encoded)
            .filter(|(m, (copy, _))| {
                m.segment.load(Ordering::Relaxed) != segments::ENDED
                    && m.written.fetch_max(*copy, Ordering::Relaxed) < *copy
            })
            .map(|(m, (_, bytes))| (m, bytes))
            .unzip();
        let (written, dropped) = Self::place_in_segments(&mut segments, &live, &encoded);
        if written.is_empty() {
            return Ok(());
        }
        let put = self.inner.store.put_segments(&written, &dropped);
        if let Err(e) = &put {
            log_store_write_failure!(
                "persist_matches",
                e,
                matches = encoded.len(),
                "could not persist matches"
            );
        }
        put
    }

    /// Moves the live matches off the stored segments whose copies name `player` (copies of
    /// matches that ended stay in a segment until its last live match moves or ends), so that
    /// those segments go, and drops the kept matches of queues this config does not have that
    /// name them: after an erasure no stored match names the player.
    pub(super) fn move_matches_off_segments_naming(&self, player: &PlayerId) {
        self.drop_kept_naming(player);
        let naming = self.lock_segments().naming(player);
        if naming.is_empty() {
            return;
        }
        let live: Vec<Arc<MatchSlot>> = self
            .inner
            .matches
            .iter()
            .filter(|e| naming.contains(&e.value().segment.load(Ordering::Relaxed)))
            .map(|e| e.value().clone())
            .collect();
        self.persist_matches(&live);
    }

    /// A live match ended: it is never written again, and its segment goes once no match in it
    /// is live. A match that ended without a result is marked, so no older copy of it comes back
    /// at start (one with a result is recognised by its journaled result).
    pub(super) fn forget_stored_match(&self, m: &MatchSlot, with_result: bool) {
        let mut segments = self.lock_segments();
        let previous = m.segment.swap(segments::ENDED, Ordering::Relaxed);
        if previous == segments::NOT_STORED || previous == segments::ENDED {
            return;
        }
        let dropped: Vec<u64> = segments.release(previous).into_iter().collect();
        let ended = if with_result {
            Vec::new()
        } else {
            vec![m.id.clone()]
        };
        if ended.is_empty() && dropped.is_empty() {
            return;
        }
        if !ended.is_empty() {
            segments.mark_ended();
        }
        if let Err(e) = self.inner.store.end_matches(&ended, &dropped) {
            log_store_write_failure!(
                "end_match",
                e,
                match_id = %m.id,
                "could not forget a finished match"
            );
        }
    }

    /// Splits `encoded` (parallel to `slots`) into segments ([`crate::store::segment_bounds`]),
    /// moves each slot to its new segment, and returns the segments to write and those left
    /// with no live match. Call with the segments lock held, and write what it returns under it.
    pub(super) fn place_in_segments<'a, M: AsRef<MatchSlot>>(
        segments: &mut segments::Segments,
        slots: &[M],
        encoded: &'a [Vec<u8>],
    ) -> (Vec<crate::store::Segment<'a>>, Vec<u64>) {
        let mut written = Vec::new();
        let mut dropped = Vec::new();
        let sizes: Vec<usize> = encoded.iter().map(Vec::len).collect();
        for range in crate::store::segment_bounds(&sizes) {
            let (slots, chunk) = (&slots[range.clone()], &encoded[range]);
            let previous: Vec<u64> = slots
                .iter()
                .map(|m| m.as_ref().segment.load(Ordering::Relaxed))
                .collect();
            let names = slots.iter().flat_map(|m| named_players(m.as_ref()));
            let (id, emptied) = segments.write(&previous, names);
            for m in slots {
                m.as_ref().segment.store(id, Ordering::Relaxed);
            }
            written.push((id, chunk));
            dropped.extend(emptied);
        }
        (written, dropped)
    }

    /// Rewrites every stored live match into fresh segments, and drops every older segment
    /// and every ended mark with them, in one store batch: when matches ended without a result
    /// since the last time, whose marks would otherwise stay in the store (and in every standby
    /// copy) until the next start, or when a stored match of a queue this config does not have
    /// passed the match timeout (see `unrestored.rs`). Holds the segments lock throughout, so
    /// no match write comes in between. Returns the matches written (0 when there was nothing
    /// to drop).
    pub fn compact_stored_matches(&self) -> Result<usize, StoreError> {
        self.compact_stored_matches_at(self.inner.store.now_unix())
    }

    /// [`State::compact_stored_matches`] at `now_unix` on the store's clock.
    pub(super) fn compact_stored_matches_at(&self, now_unix: f64) -> Result<usize, StoreError> {
        let mut segments = self.lock_segments();
        if segments.marked() == 0 && !self.kept_expired(&segments, now_unix) {
            return Ok(0);
        }
        let live: Vec<Arc<MatchSlot>> = self
            .inner
            .matches
            .iter()
            .map(|e| e.value().clone())
            .filter(|m| {
                let at = m.segment.load(Ordering::Relaxed);
                at != segments::NOT_STORED && at != segments::ENDED
            })
            .collect();
        let mut encoded = Vec::with_capacity(live.len());
        let mut copies = Vec::with_capacity(live.len());
        for m in &live {
            let (copy, stored) = self.stored_match(m);
            encoded.push(crate::store::encode_match(&stored)?);
            copies.push(copy);
        }
        let previous: Vec<u64> = live
            .iter()
            .map(|m| m.segment.load(Ordering::Relaxed))
            .collect();
        let mut fresh = segments.fresh();
        let (mut written, _) = Self::place_in_segments(&mut fresh, &live, &encoded);
        // Matches of queues this config does not have stay, until their match timeout.
        let (kept, expired) = self.kept_after_timeout(&segments, now_unix, &mut fresh);
        written.extend(kept.segments());
        if let Err(e) = self.inner.store.compact_matches(&written) {
            // The bookkeeping stays as the store (most likely) still is.
            for (m, at) in live.iter().zip(previous) {
                m.segment.store(at, Ordering::Relaxed);
            }
            return Err(e);
        }
        drop(written);
        super::unrestored::warn_dropped(&expired);
        for (m, copy) in live.iter().zip(copies) {
            m.written.fetch_max(copy, Ordering::Relaxed);
        }
        let n = live.len() + kept.len();
        fresh.kept = kept;
        *segments = fresh;
        Ok(n)
    }

    pub(super) fn lock_segments(&self) -> MutexGuard<'_, segments::Segments> {
        self.inner
            .segments
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn stored_match(&self, m: &MatchSlot) -> (u64, StoredMatch) {
        let mut inner = m.lock();
        inner.copies += 1;
        let copy = inner.copies;
        let a = &inner.assignment;
        let tickets = inner
            .tickets
            .iter()
            .filter_map(|id| {
                let ticket = self.inner.tickets.get(id)?;
                Some((id.clone(), ticket.players.clone()))
            })
            .collect();
        let stored = StoredMatch {
            match_id: m.id.clone(),
            queue: m.queue.to_string(),
            teams: a.teams.clone(),
            win_probability: a.win_probability.clone(),
            region: a.region.clone(),
            server_address: a.server_address.clone(),
            formed_unix: m.formed_unix,
            parties: a.parties.clone(),
            backfill: a.backfill.clone(),
            left: a.left.clone(),
            roles: inner.roles.clone(),
            attributes: (*a.attributes).clone(),
            started_unix: inner.started_unix,
            tickets,
            kept_unix: None,
            backfill_opened_unix: inner.backfill_opened_unix,
        };
        (copy, stored)
    }

    /// Start-up recovery after [`State::load`]: replays the journal after the snapshot, then
    /// restores live matches (their players are in a match again); those of a queue this config
    /// does not have stay stored, unrestored (see `unrestored.rs`). Returns (replayed entries,
    /// restored matches, the highest journal sequence number).
    ///
    /// `now` is the matchmaker clock's time: a restored match formed, on that clock, as long
    /// before `now` as its stored wall-clock time is before the wall clock now (nothing, if it
    /// is ahead: written by an owner whose clock was ahead of this one's). Its match timeout
    /// counts from there, on the matchmaker clock only.
    pub fn recover(&self, now: f64) -> Result<(usize, Vec<Arc<MatchSlot>>, u64), StoreError> {
        let store = &self.inner.store;
        let from = store.snapshot_seq()?;
        let mut replayed = 0;
        let mut last = from;
        for item in store.journal_after(from) {
            let (seq, entry) = item?;
            self.apply_records(&entry);
            replayed += 1;
            last = seq;
        }
        let mut restored = Vec::new();
        let mut live = Vec::new();
        let mut unknown = Vec::new();
        let (stored, last_segment) = store.load_matches()?;
        // The clock the matches were dated by (Redis's in a cluster, shared by every node).
        let now_unix = store.now_unix();
        let mut current = Vec::with_capacity(stored.len());
        for m in stored {
            if store.result_of(&m.match_id)?.is_none() {
                current.push(m);
            }
        }
        // Every claim on the players is read before any match is restored (see
        // `superseded.rs`).
        let mut superseded: BTreeMap<usize, Vec<(PlayerId, String)>> =
            super::superseded::superseded(&current, &store.load_tickets()?)
                .into_iter()
                .map(|s| (s.index, s.by))
                .collect();
        let mut dropped = Vec::with_capacity(superseded.len());
        for (i, mut m) in current.into_iter().enumerate() {
            if let Some(by) = superseded.remove(&i) {
                dropped.push((m, by));
                continue;
            }
            let Some(queue) = self.queue_of(&QueueId::new(m.queue.as_str())) else {
                unknown.push(m);
                continue;
            };
            // Live again, if it was kept.
            m.kept_unix = None;
            let phase = phase_of(&m);
            let assignment = assignment_of(&m, queue.id.clone());
            // A match a server took: its tickets read as matched to that server again (the
            // loop forgets them after the retention, as any finished ticket).
            let mut tickets = Vec::new();
            if phase != MatchPhase::Formed {
                for (id, players) in &m.tickets {
                    let view = super::tickets::ViewCell {
                        current: super::tickets::TicketView {
                            state: super::TicketState::Matched,
                            assignment: Some(assignment.clone()),
                            ..super::tickets::TicketView::searching(0.0, String::new())
                        },
                        watchers: None,
                    };
                    let ticket = Arc::new(super::tickets::TicketSlot {
                        id: id.clone(),
                        queue: queue.id.clone(),
                        players: players.clone(),
                        entered_at: 0.0,
                        last_seen: std::sync::atomic::AtomicU64::new(0),
                        view: Mutex::new(view),
                    });
                    self.inner.tickets.insert(id.clone(), ticket);
                    tickets.push(id.clone());
                }
            }
            let formed_at = now - (now_unix - m.formed_unix).max(0.0);
            let slot = slot_of(&m, assignment, tickets, formed_at);
            let ids: Vec<PlayerId> = m.teams.iter().flatten().cloned().collect();
            let slots = self.sorted_slots(&ids);
            let mut guards = Self::lock_players(&slots);
            for guard in &mut guards {
                guard.status = PlayerStatus::InMatch(slot.id.clone());
            }
            drop(guards);
            self.inner.matches.insert(slot.id.clone(), slot.clone());
            let address = slot.lock().assignment.server_address.clone();
            self.note_placed(&slot, &address);
            restored.push(slot);
            live.push(m);
        }
        // The survivors are rewritten in fresh segments; stale copies, ended marks, empty
        // segments and superseded matches go.
        let mut segments = segments::Segments::after(last_segment);
        let live = live
            .iter()
            .map(crate::store::encode_match)
            .collect::<Result<Vec<_>, _>>()?;
        let (mut written, _) = Self::place_in_segments(&mut segments, &restored, &live);
        // Matches of queues this config does not have stay stored (see `unrestored.rs`).
        let kept = self.keep_unrestored(unknown, now_unix, &mut segments)?;
        written.extend(kept.segments());
        store.compact_matches(&written)?;
        drop(written);
        segments.kept = kept;
        *self.lock_segments() = segments;
        for (m, by) in &dropped {
            self.report_superseded(m, by);
        }
        Ok((replayed, restored, store.last_seq()?.max(last)))
    }

    /// Writes every player's records and marks the journal up to `horizon` as included, then
    /// trims it. `horizon` must come from `Committer::horizon` taken *before* this call, so every
    /// entry up to it is already in memory and so in what is written here.
    ///
    /// Players are written in batches of `SNAPSHOT_BATCH` (10,000) so a million players never sit in
    /// memory twice. A crash between batches is harmless: the snapshot mark is not moved, so
    /// start-up replays the journal from the previous mark, and its entries are absolute records,
    /// so every player ends on its latest record whichever batches landed. The calibrations
    /// are not absolute: they are the ones read with `horizon` ([`State::calibrations_now`]).
    pub fn snapshot(
        &self,
        horizon: u64,
        calibrations: &super::calibration::Calibrations,
    ) -> Result<usize, StoreError> {
        let slots: Vec<Arc<PlayerSlot>> = self
            .inner
            .players
            .iter()
            .map(|e| e.value().clone())
            .collect();
        let mut written = 0;
        for batch in slots.chunks(SNAPSHOT_BATCH) {
            // A player with no record (never rated, or erased) has nothing to write: the store
            // keeps no entry naming them.
            let records: Vec<(&PlayerId, BTreeMap<String, PoolRecord>)> = batch
                .iter()
                .map(|slot| (&slot.id, slot.lock().pools.to_map()))
                .filter(|(_, pools)| !pools.is_empty())
                .collect();
            let refs: Vec<_> = records.iter().map(|(id, pools)| (*id, pools)).collect();
            self.inner.store.put_players(&refs)?;
            written += refs.len();
        }
        let parties: Vec<(String, BTreeMap<String, PartyRecord>)> = self
            .inner
            .parties
            .iter()
            .map(|e| (e.key().clone(), e.value().clone()))
            .collect();
        self.inner.store.put_parties(
            &parties
                .iter()
                .map(|(k, v)| (k.as_str(), v))
                .collect::<Vec<_>>(),
        )?;
        self.persist_rosters()?;
        self.finish_snapshot(horizon, calibrations)?;
        Ok(written)
    }

    /// When the oldest live match formed (unix seconds; `None`: no match is live). A match's
    /// stored copy stays in its segment after the match completed while another match written
    /// with it is live (a segment goes with its last live match), and start-up restores no
    /// copy of a match whose result is acknowledged ([`State::recover`]). Every match in a
    /// segment was live when the segment was written, so a completed match's copy can only
    /// outlast it beside a match that formed before its result: the acknowledgement of a
    /// result applied before this time is needed by no stored copy.
    pub fn oldest_live_formed_unix(&self) -> Option<f64> {
        self.inner
            .matches
            .iter()
            .map(|e| e.value().formed_unix)
            .reduce(f64::min)
    }

    /// Bytes the store uses on disk.
    pub fn store_bytes(&self) -> u64 {
        self.inner.store.size_on_disk()
    }
}

/// Players per store batch when snapshotting.
const SNAPSHOT_BATCH: usize = 10_000;

/// The phase a stored match is restored in.
fn phase_of(m: &StoredMatch) -> MatchPhase {
    if m.server_address.is_empty() {
        MatchPhase::Formed
    } else if m.started_unix.is_some() {
        MatchPhase::Started
    } else {
        MatchPhase::Allocated
    }
}

/// A stored match's assignment, in `queue`.
pub(super) fn assignment_of(m: &StoredMatch, queue: QueueId) -> Arc<Assignment> {
    Arc::new(Assignment {
        match_id: m.match_id.clone(),
        queue,
        teams: m.teams.clone(),
        win_probability: m.win_probability.clone(),
        region: m.region.clone(),
        server_address: m.server_address.clone(),
        parties: m.parties.clone(),
        backfill: m.backfill.clone(),
        left: m.left.clone(),
        attributes: Arc::new(m.attributes.clone()),
    })
}

/// A stored match as a slot with `assignment` (made by [`assignment_of`]), holding `tickets`,
/// formed at `formed_at` on the matchmaker clock; not stored yet (placed in a segment by its
/// caller).
pub(super) fn slot_of(
    m: &StoredMatch,
    assignment: Arc<Assignment>,
    tickets: Vec<crate::ids::TicketId>,
    formed_at: f64,
) -> Arc<MatchSlot> {
    Arc::new(MatchSlot {
        id: m.match_id.clone(),
        queue: assignment.queue.clone(),
        quality: crate::matching::quality_of(&m.win_probability),
        formed_at,
        formed_unix: m.formed_unix,
        inner: Mutex::new(MatchInner {
            phase: phase_of(m),
            assignment,
            tickets,
            roles: m.roles.clone(),
            started_unix: m.started_unix,
            backfill_opened_unix: m.backfill_opened_unix,
            copies: 0,
        }),
        segment: AtomicU64::new(segments::NOT_STORED),
        written: AtomicU64::new(0),
        result: tokio::sync::OnceCell::new(),
    })
}

/// Every player a stored copy of `m` names.
fn named_players(m: &MatchSlot) -> Vec<PlayerId> {
    let inner = m.lock();
    let a = &inner.assignment;
    a.teams
        .iter()
        .chain(&a.backfill)
        .flatten()
        .chain(&a.left)
        .chain(inner.roles.keys())
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_older_copy_of_a_match_that_reaches_the_store_last_is_not_written() {
        let state = crate::state::test_util::state();
        let store = state.store().clone();
        let m = crate::state::test_util::formed_1v1(&state, "m-1", "a", "b", "gs:1");
        let copy = |state: &State| {
            let (n, stored) = state.stored_match(&m);
            (n, crate::store::encode_match(&stored).unwrap())
        };
        // One thread copies the match; another marks it started, copies and writes it first.
        let older = copy(&state);
        m.lock().started_unix = Some(42.0);
        let newer = copy(&state);
        state
            .write_copies(std::slice::from_ref(&m), vec![newer])
            .unwrap();
        state
            .write_copies(std::slice::from_ref(&m), vec![older])
            .unwrap();
        let (stored, _) = store.load_matches().unwrap();
        assert_eq!(stored.len(), 1);
        assert_eq!(stored[0].started_unix, Some(42.0), "the newer copy stays");
    }

    #[test]
    fn compacting_drops_the_marks_of_matches_that_ended_and_keeps_the_live_ones() {
        let config = Arc::new(crate::config::Config::from_toml_str("").unwrap());
        let memory = Arc::new(crate::store::MemoryStore::default());
        let store: crate::store::Store = memory.clone();
        let state = State::load(config, store.clone()).unwrap();
        let formed: Vec<Arc<MatchSlot>> = (0..3)
            .map(|i| {
                let (a, b) = (format!("a{i}"), format!("b{i}"));
                crate::state::test_util::formed_1v1(&state, &format!("m-{i}"), &a, &b, "gs:1")
            })
            .collect();
        assert_eq!(
            state.compact_stored_matches().unwrap(),
            0,
            "nothing ended yet"
        );
        state.persist_matches(&formed);
        state
            .cancel_match(&formed[0], "the map did not load")
            .unwrap();
        // The cancelled match is marked: its copy stays in the segment beside the live ones.
        assert_eq!(memory.marks_and_segments(), (1, 1));
        assert_eq!(state.compact_stored_matches().unwrap(), 2);
        assert_eq!(memory.marks_and_segments(), (0, 1));
        let (stored, _) = store.load_matches().unwrap();
        let mut ids: Vec<&str> = stored.iter().map(|m| m.match_id.as_str()).collect();
        ids.sort_unstable();
        assert_eq!(ids, ["m-1", "m-2"]);
        // Nothing ended since: nothing to do.
        assert_eq!(state.compact_stored_matches().unwrap(), 0);
        // The live matches still move and end as before.
        state
            .cancel_match(&formed[1], "the map did not load")
            .unwrap();
        state
            .cancel_match(&formed[2], "the map did not load")
            .unwrap();
        assert_eq!(store.load_matches().unwrap().0.len(), 0);
        assert_eq!(memory.marks_and_segments().1, 0, "the last segment went");
    }

    /// `StartMatch` answers OK only once the start is durable: a write that failed is the
    /// caller's error, and the retry (the match already STARTED in memory) writes it again, so
    /// a restart finds the match STARTED, not ALLOCATED (which a cancel would requeue).
    #[test]
    fn a_start_whose_write_failed_is_written_by_its_retry() {
        use crate::store::{FailingWrite, Storage};
        let memory = Arc::new(crate::store::MemoryStore::default());
        let state = crate::state::test_util::state_on(memory.clone());
        let m = crate::state::test_util::formed_1v1(&state, "m-1", "a", "b", "gs:1");
        // Allocated and written, as the loop does.
        m.lock().phase = MatchPhase::Allocated;
        state.persist_matches(std::slice::from_ref(&m));
        memory.fail_writes(FailingWrite::Matches, true);
        assert!(
            state.start_match(&m).is_err(),
            "the failed write is reported"
        );
        assert_eq!(memory.load_matches().unwrap().0[0].started_unix, None);
        memory.fail_writes(FailingWrite::Matches, false);
        let started = state.start_match(&m).unwrap().unwrap();
        assert_eq!(
            memory.load_matches().unwrap().0[0].started_unix,
            Some(started)
        );
        let restarted = crate::state::test_util::state_on(memory.clone());
        let (_, restored, _) = restarted.recover(0.0).unwrap();
        assert_eq!(restored.len(), 1);
        assert_eq!(restored[0].phase(), MatchPhase::Started);
    }

    /// A write of live matches refused because another node holds the lease is the normal end
    /// of an owner: not counted as a store error (an alert), as the result journal does.
    #[test]
    fn a_fenced_write_of_live_matches_is_not_counted_as_a_store_error() {
        let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
        let _local = metrics::set_default_local_recorder(&recorder);
        let memory = Arc::new(crate::store::MemoryStore::default());
        let state = crate::state::test_util::state_on(memory.clone());
        let m = crate::state::test_util::formed_1v1(&state, "m-1", "a", "b", "gs:1");
        memory.fail_flushes(Some(crate::store::FlushFailure::Fenced));
        state.persist_matches(std::slice::from_ref(&m));
        let counted = recorder
            .handle()
            .render()
            .lines()
            .any(|l| l.starts_with(crate::telemetry::STORE_ERRORS));
        assert!(!counted, "a fenced write is no store error");
        let stored = crate::store::Storage::load_matches(memory.as_ref()).unwrap();
        assert!(stored.0.is_empty(), "it was refused");
    }
}

//! Applies match results durably and takes snapshots.
//!
//! A report is validated and computed under no lock that outlives it (`State::prepare_result`),
//! journaled through group commit, and applied in memory only after its flush. So memory never
//! holds a result the disk does not, a snapshot can never contain an unacknowledged result, and
//! a result that got OK survives `kill -9`. Each match's result is computed once: concurrent and
//! later duplicates get the same acknowledgement with `duplicate = true`, for as long as it is
//! kept (`[results] ack_retention_seconds`; see `ledger/retention.rs`); a later one is refused.
//! A duplicate must report what was applied: its placements and team scores are checked as a
//! first report's are, then against those the acknowledgement keeps, and another outcome is
//! refused (FAILED_PRECONDITION naming the field).
//!
//! Crash guarantees, step by step:
//! 1. Nothing is written before validation: a rejected report changes nothing.
//! 2. The journal batch (entries + idempotency index + the results' events) is one atomic batch
//!    of the store.
//! 3. OK is sent only after that batch is flushed.
//! 4. Start-up loads the players snapshot, then replays every journal entry after the snapshot's
//!    sequence number. Entries are absolute after-states, so replaying one twice is harmless.
//! 5. A snapshot writes every player, then its horizon, flushes, and only then trims the journal.
//! 6. Acknowledgements older than the retention are trimmed apart from the journal: no replay
//!    reads them, and none the restore of live matches reads is trimmed (`ledger/retention.rs`).
//!
//! Admin changes (season resets, `EndSeason`, `SetRating`, migration) go through the same
//! journal as absolute after-records, so recovery replays them with no other code path. They are
//! atomic with respect to results through the reset gate: a result holds its read side from
//! prepare to apply, an admin change holds its write side from prepare through journal and apply.
//! So no result is computed from records before a reset and applied after it (which would undo
//! the reset for its players), and a reset sees no result half-applied.
//!
//! A rating period's close (the periodic pass, a reset or end of season, a result that closes
//! a player's ended period first) is reported by one `RATING_CHANGED` per player, journaled in
//! the close's own atomic batch, so watchers learn of every close that counts and of none that
//! does not (a reset or end of season of several pools: one batch of every pool's entry and
//! every event).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::ids::MatchId;
use crate::records::ResultAck;
use crate::rejection::Rejection;
use crate::state::{EntryWithEvents, MatchSlot, PreparedResult, State, Taken};
use crate::store::{CommitError, Committed, Committer, EventRecord, JournalEntry, StoreError};
use crate::telemetry as m;

mod retention;

/// Why a report was not applied.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error(transparent)]
    Rejected(#[from] Rejection),
    #[error(transparent)]
    Commit(#[from] CommitError),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The handle: state plus the journal's committer.
#[derive(Clone)]
pub struct Ledger {
    state: State,
    committer: Committer,
    /// Results read, admin changes write (see the module docs).
    gate: Arc<tokio::sync::RwLock<()>>,
    /// One snapshot at a time: two at once could write a player's older records after the
    /// newer one trimmed the journal entries that made them newer.
    snapshotting: Arc<tokio::sync::Mutex<()>>,
    /// Every applied result, for whoever listens (the operator console's recent results); a
    /// slow listener loses the oldest, never holds a report up. Sent only while someone listens.
    applied: tokio::sync::broadcast::Sender<Arc<AppliedResult>>,
}

/// A result that was journaled and applied, as [`Ledger::subscribe`] delivers it.
#[derive(Debug)]
pub struct AppliedResult {
    pub slot: Arc<MatchSlot>,
    pub placements: Vec<u32>,
    pub ack: Arc<ResultAck>,
    /// Unix seconds.
    pub applied_unix: f64,
}

/// Applied results buffered per listener before it loses the oldest.
const APPLIED_BUFFER: usize = 1024;

/// How [`Ledger::admin_with_events`] journals an admin change's entries and their events.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Batching {
    /// Every entry and every event in one atomic batch, all or none (a season reset or end of
    /// season of several pools).
    Together,
    /// Each entry in its own atomic batch with its events, in order: for changes whose entries
    /// are each complete alone (each pool's rating period close). A failure stops at its entry;
    /// those before it stay journaled and applied.
    EachAlone,
}

/// A result's acknowledgement and whether an earlier report already applied it.
pub struct Reported {
    pub ack: Arc<ResultAck>,
    pub duplicate: bool,
}

impl Ledger {
    /// Wraps the state and a running committer.
    pub fn new(state: State, committer: Committer) -> Self {
        Self {
            state,
            committer,
            gate: Arc::new(tokio::sync::RwLock::new(())),
            snapshotting: Arc::new(tokio::sync::Mutex::new(())),
            applied: tokio::sync::broadcast::channel(APPLIED_BUFFER).0,
        }
    }

    /// Every result applied from now on (bounded: a listener that falls behind by more than
    /// [`APPLIED_BUFFER`] results skips the oldest).
    pub fn subscribe(&self) -> tokio::sync::broadcast::Receiver<Arc<AppliedResult>> {
        self.applied.subscribe()
    }

    /// Applies a report for `match_id` (or returns the first outcome if it was already applied
    /// and its acknowledgement is still kept; refuses it when the acknowledgement was trimmed).
    /// Runs to completion even if the caller goes away: spawn it, don't race it.
    pub async fn report(
        &self,
        match_id: &MatchId,
        placements: Vec<u32>,
        team_scores: Vec<f64>,
        performance: std::collections::BTreeMap<String, f64>,
        abandoned: Vec<String>,
    ) -> Result<Reported, ReportError> {
        let slot: Arc<MatchSlot> = match self.state.match_slot(match_id) {
            Ok(slot) => slot,
            Err(not_found) => {
                return match self.state.store().result_of(match_id)? {
                    Some(ack) => {
                        // A repeat must report what was applied (from any node: the stored
                        // acknowledgement keeps it).
                        crate::results::check_repeat(match_id, &ack, &placements, &team_scores)?;
                        Ok(Reported {
                            ack: Arc::new(ack),
                            duplicate: true,
                        })
                    }
                    None => Err(self.refusal_without_ack(match_id, not_found).await?.into()),
                };
            }
        };
        let ran = AtomicBool::new(false);
        let ack = slot
            .result
            .get_or_try_init(|| async {
                ran.store(true, Ordering::Relaxed);
                let _gate = self.gate.read().await;
                let PreparedResult {
                    entry,
                    claimed,
                    events,
                } = self.state.prepare_result(
                    &slot,
                    &placements,
                    &team_scores,
                    &performance,
                    &abandoned,
                )?;
                // The result's events go in the same atomic batch and flush as its entry: an
                // OK means they are durable too.
                let (committed, _taken) =
                    match self.commit_carrying(vec![entry.clone()], events).await {
                        Ok(committed) => committed,
                        Err(e) => {
                            // A batch that failed to write may be on disk in part (its entry
                            // readable, then durable with the next flush): the match stays claimed,
                            // so no cancel or other result can follow one that may count. A journal
                            // that was closing wrote nothing.
                            if matches!(e, CommitError::Closed) {
                                self.state.unclaim(&slot, claimed);
                            }
                            return Err(e.into());
                        }
                    };
                self.state.apply_result(&slot, &entry);
                self.state.events_durable(committed.last_event);
                self.committer.applied(committed.seq);
                metrics::counter!(m::RESULTS_APPLIED, "queue" => slot.queue.to_string())
                    .increment(1);
                let ack = Arc::new(entry.ack);
                if self.applied.receiver_count() > 0 {
                    let _ = self.applied.send(Arc::new(AppliedResult {
                        slot: slot.clone(),
                        placements: placements.clone(),
                        ack: ack.clone(),
                        applied_unix: entry.applied_unix,
                    }));
                }
                Ok::<_, ReportError>(ack)
            })
            .await?;
        let duplicate = !ran.load(Ordering::Relaxed);
        if duplicate {
            // A concurrent or later report of a result this server applied: checked as a
            // first report is, against the match's teams, then against the applied outcome.
            let teams = &slot.assignment().teams;
            crate::results::validate_scored(
                teams,
                &placements,
                &team_scores,
                &performance,
                &abandoned,
            )?;
            crate::results::check_repeat(match_id, ack, &placements, &team_scores)?;
        }
        Ok(Reported {
            ack: ack.clone(),
            duplicate,
        })
    }

    /// Journals `entries` with `events` in one atomic batch and flush, the events emitted and not
    /// yet written carried ahead of them, so the log keeps the order things happened in. Keep
    /// the [`Taken`] until the events are published. A journal that was closing wrote nothing:
    /// the carried events go back to the writer, ahead of anything emitted since.
    async fn commit_carrying(
        &self,
        entries: Vec<JournalEntry>,
        events: Vec<EventRecord>,
    ) -> Result<(Committed, Taken), CommitError> {
        let (mut batch, taken) = self.state.take_emitted();
        let carried = batch.clone();
        batch.extend(events);
        match self.committer.commit_all_with_events(entries, batch).await {
            Ok(committed) => Ok((committed, taken)),
            Err(e) => {
                if matches!(e, CommitError::Closed) {
                    self.state.emit_first(carried);
                }
                Err(e)
            }
        }
    }

    /// Journals `entries` in one atomic batch, then applies them in memory.
    async fn commit_and_apply(&self, entries: &[JournalEntry]) -> Result<(), CommitError> {
        let first = self.committer.commit_all(entries.to_vec()).await?;
        crate::store::heavy(|| {
            for (seq, entry) in (first..).zip(entries) {
                self.state.apply_admin(entry);
                self.committer.applied(seq);
            }
        });
        Ok(())
    }

    fn log_admin_change<'a>(entries: impl Iterator<Item = &'a JournalEntry>, events: usize) {
        let entries: Vec<&JournalEntry> = entries.collect();
        if let Some(first) = entries.first() {
            tracing::info!(
                entries = entries.len(),
                records = entries.iter().map(|e| e.records.len()).sum::<usize>(),
                events,
                label = %first.match_id,
                "admin change journaled and applied"
            );
        }
    }

    /// Runs one admin change atomically with respect to results: `prepare` computes journal
    /// entries (and what to answer) from the current records under the gate's write side; they
    /// are journaled in one atomic batch, then applied in memory. Runs in its own task, so a
    /// caller going away cannot stop it between the flush and the apply.
    pub async fn admin<T, F>(&self, prepare: F) -> Result<T, ReportError>
    where
        T: Send + 'static,
        F: FnOnce(&State) -> Result<(Vec<JournalEntry>, T), ReportError> + Send + 'static,
    {
        let this = self.clone();
        tokio::spawn(async move {
            let _gate = this.gate.write().await;
            // Off the runtime's workers: a whole pool's change takes seconds (see `heavy`).
            let (entries, out) = crate::store::heavy(|| prepare(&this.state))?;
            if entries.is_empty() {
                return Ok(out);
            }
            this.commit_and_apply(&entries).await?;
            Self::log_admin_change(entries.iter(), 0);
            Ok(out)
        })
        .await
        .map_err(|e| ReportError::Store(StoreError::Task(e)))?
    }

    /// [`Ledger::admin`] for a change whose entries come with events (the rating periods it
    /// closes): journaled as `batching` says, and durable and published before it returns.
    /// Nothing is journaled, and no event written, for a change whose `prepare` fails or
    /// returns no entries (a dry run).
    pub async fn admin_with_events<T, F>(
        &self,
        batching: Batching,
        prepare: F,
    ) -> Result<T, ReportError>
    where
        T: Send + 'static,
        F: FnOnce(&State) -> Result<(Vec<EntryWithEvents>, T), ReportError> + Send + 'static,
    {
        let this = self.clone();
        tokio::spawn(async move {
            let _gate = this.gate.write().await;
            let (prepared, out) = crate::store::heavy(|| prepare(&this.state))?;
            let events = prepared.iter().map(|e| e.events.len()).sum::<usize>();
            if batching == Batching::Together && prepared.len() > 1 {
                let (entries, events): (Vec<JournalEntry>, Vec<Vec<EventRecord>>) =
                    prepared.into_iter().map(|e| (e.entry, e.events)).unzip();
                let events: Vec<EventRecord> = events.into_iter().flatten().collect();
                let n = events.len();
                let (committed, _taken) = this.commit_carrying(entries.clone(), events).await?;
                crate::store::heavy(|| {
                    for (seq, entry) in (committed.seq..).zip(&entries) {
                        this.state.apply_admin(entry);
                        this.committer.applied(seq);
                    }
                });
                this.state.events_durable(committed.last_event);
                Self::log_admin_change(entries.iter(), n);
                return Ok(out);
            }
            let mut applied = Vec::with_capacity(prepared.len());
            for EntryWithEvents { entry, events } in prepared {
                let (committed, _taken) = this.commit_carrying(vec![entry.clone()], events).await?;
                crate::store::heavy(|| this.state.apply_admin(&entry));
                this.state.events_durable(committed.last_event);
                this.committer.applied(committed.seq);
                applied.push(entry);
            }
            Self::log_admin_change(applied.iter(), events);
            Ok(out)
        })
        .await
        .map_err(|e| ReportError::Store(StoreError::Task(e)))?
    }

    /// Runs a change that is not a journal entry (a player's erasure) alone with respect to
    /// results, admin changes and snapshots (the gate's write side), then flushes the store, so
    /// it is durable when this returns. Runs in its own task, like [`Ledger::admin`].
    pub async fn exclusive<T, F>(&self, change: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&State) -> Result<T, StoreError> + Send + 'static,
    {
        let this = self.clone();
        tokio::spawn(async move {
            let _gate = this.gate.write().await;
            // An erasure scans the player's journal entries, acknowledgements and events: off
            // the runtime's other tasks.
            let out = crate::store::heavy(|| change(&this.state))?;
            this.state.store().flush_async().await?;
            Ok(out)
        })
        .await
        .map_err(StoreError::Task)?
    }

    /// Takes a snapshot now (blocking I/O runs off the async threads). Returns players written.
    /// Holds the gate's read side, so an erasure never lands between reading a player and
    /// writing it back, and runs alone among snapshots. Runs in its own task, like
    /// [`Ledger::admin`]: a caller going away (its deadline) must not let go of the gate while
    /// the snapshot still writes.
    pub async fn snapshot(&self) -> Result<usize, StoreError> {
        let this = self.clone();
        tokio::spawn(async move {
            let _alone = this.snapshotting.lock().await;
            // The horizon and the calibrations are read together, with no result between
            // journal and memory (results hold the gate's read side from one to the other): a
            // calibration is an estimate folded result by result, not an absolute record, so
            // one already counting a result past the horizon would count it again when the
            // journal is replayed after a crash. Then the read side, for the players.
            let exclusive = this.gate.write().await;
            let horizon = this.committer.horizon();
            let calibrations = this.state.calibrations_now();
            let _gate = exclusive.downgrade();
            let state = this.state.clone();
            let started = std::time::Instant::now();
            let (n, bytes) = tokio::task::spawn_blocking(move || {
                let n = state.snapshot(horizon, &calibrations)?;
                // Marks of matches that ended without a result go with the snapshot, so that
                // a long-running server's store does not keep one for every such match.
                if let Err(e) = state.compact_stored_matches() {
                    tracing::warn!(error = %e, "could not compact the stored live matches");
                }
                Ok::<_, StoreError>((n, state.store_bytes()))
            })
            .await
            .map_err(StoreError::Task)??;
            metrics::histogram!(m::SNAPSHOT_SECONDS).record(started.elapsed().as_secs_f64());
            m::engine_gauge(m::STORE_BYTES, this.state.shard()).set(bytes as f64);
            tracing::info!(
                players = n,
                horizon,
                seconds = started.elapsed().as_secs_f64(),
                "snapshot written"
            );
            Ok(n)
        })
        .await
        .map_err(StoreError::Task)?
    }

    /// Closes ended rating periods of periodic Glicko pools every `every` until `shutdown`
    /// ([`State::prepare_period_close`]): journaled like any admin change, so a closed period
    /// survives a crash and a result never lands half before, half after it; each pool's close
    /// with its `RATING_CHANGED` events in one atomic batch, so watchers learn of every close
    /// that counts and of none that does not.
    /// A pass reads every record of the periodic pools, so it runs only when a pool's period
    /// moved on since the last successful pass (and once at start, for periods that ended while
    /// the server was down).
    pub async fn close_periods_periodically(self, every: Duration, shutdown: CancellationToken) {
        let mut interval = tokio::time::interval(every);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut closed_through: Option<Vec<u64>> = None;
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                _ = interval.tick() => {
                    let now = crate::state::unix_now();
                    let current = self.state.period_indexes(now);
                    if closed_through.as_ref() == Some(&current) {
                        continue;
                    }
                    let closed = self
                        .admin_with_events(Batching::EachAlone, move |state| {
                            Ok(state.prepare_period_close(now)??)
                        })
                        .await;
                    match closed {
                        Ok(n) => {
                            closed_through = Some(current);
                            if n > 0 {
                                tracing::info!(players = n, "rating periods closed");
                            }
                        }
                        Err(e) => tracing::error!(error = %e, "closing rating periods failed"),
                    }
                }
            }
        }
    }

    /// Snapshots every `every` until `shutdown`.
    pub async fn snapshot_periodically(self, every: Duration, shutdown: CancellationToken) {
        let mut interval = tokio::time::interval(every);
        interval.tick().await;
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                _ = interval.tick() => {
                    if let Err(e) = self.snapshot().await {
                        crate::store::write_failures::log_store_write_failure!(
                            "snapshot",
                            e,
                            "periodic snapshot failed"
                        );
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::PlayerId;
    use crate::records::{PendingPeriod, PoolRecord};
    use crate::store::{EntryKind, EventKind, MemoryStore, Store};

    /// 1v1 and 2v2 as periodic Glicko-2 ladders, each its own pool.
    const PERIODIC_LADDERS: &str = r#"
[queues.1v1]
ranking = "ladder"
[queues.1v1.rating]
system = "glicko2"
mode = "periodic"

[queues.2v2]
ranking = "ladder"
[queues.2v2.rating]
system = "glicko2"
mode = "periodic"
"#;

    /// A ledger on an in-memory store where `a` has two losses pending in rating period 0 (long
    /// ended) in each of `pools`.
    fn ledger_with_ended_periods(pools: &[&str]) -> (Ledger, Arc<MemoryStore>) {
        let config = Arc::new(crate::config::Config::from_toml_str(PERIODIC_LADDERS).unwrap());
        let memory = Arc::new(MemoryStore::default());
        let store: Store = memory.clone();
        let state = State::load(config, store.clone()).unwrap();
        for pool in pools {
            let queue = state.queue("queue", pool).unwrap();
            let loss = crate::rating::teams::PeriodResult {
                opponent: queue.config.rating.initial(),
                score: 0.0,
                weight: 1.0,
            };
            let record = PoolRecord {
                rank_points: 700,
                period: Some(Box::new(PendingPeriod {
                    index: 0,
                    results: vec![loss; 2],
                })),
                ..state.initial_record(&queue)
            };
            state.apply_admin(&JournalEntry {
                match_id: MatchId::new("test:setup"),
                applied_unix: 0.0,
                pool: (*pool).into(),
                records: vec![(PlayerId::new("a"), record)],
                parties: Vec::new(),
                ack: ResultAck {
                    queue: String::new(),
                    changes: Vec::new(),
                    report: None,
                },
                kind: EntryKind::Admin,
                season: None,
                calibration: None,
                history: None,
            });
        }
        let (committer, _task) = Committer::spawn(store, 0, 8);
        (Ledger::new(state, committer), memory)
    }

    /// Each durable event's kind, player and whether it is a period close.
    fn durable_events(memory: &MemoryStore) -> Vec<(EventKind, String, bool)> {
        use crate::store::AdminRecords;
        memory
            .events_after(0, 100)
            .unwrap()
            .into_iter()
            .map(|(_, e)| {
                let detail: serde_json::Value = serde_json::from_str(&e.detail_json).unwrap();
                (e.kind, e.player_id, detail["period_close"] == true)
            })
            .collect()
    }

    fn rank_points(ledger: &Ledger, pool: &str) -> crate::ranking::RankPoints {
        let record = ledger.state.player(&PlayerId::new("a"), pool).1.unwrap();
        record.rank_points
    }

    #[tokio::test]
    async fn a_snapshot_reads_its_horizon_with_no_result_between_journal_and_memory() {
        let (ledger, _memory) = ledger_with_ended_periods(&["1v1"]);
        // A result in flight: journaled, not applied yet (it holds the gate's read side).
        let in_flight = ledger.gate.clone().read_owned().await;
        let snapshot = tokio::spawn({
            let ledger = ledger.clone();
            async move { ledger.snapshot().await }
        });
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        assert!(
            !snapshot.is_finished(),
            "the snapshot waits for the result to be applied"
        );
        drop(in_flight);
        assert_eq!(snapshot.await.unwrap().unwrap(), 1, "a's record");
    }

    #[tokio::test]
    async fn the_period_close_pass_journals_each_pools_close_with_its_events() {
        let (ledger, memory) = ledger_with_ended_periods(&["1v1", "2v2"]);
        let now = 10.0 * 14.0 * 86_400.0;
        let closed = ledger
            .admin_with_events(Batching::EachAlone, move |state| {
                Ok(state.prepare_period_close(now)??)
            })
            .await
            .unwrap();
        assert_eq!(closed, 2);
        let close = (EventKind::RatingChanged, "a".to_string(), true);
        assert_eq!(durable_events(&memory), vec![close.clone(), close]);
        // Each pool's entry went alone, with its events: two batches, each event published.
        assert_eq!(ledger.state.store().last_seq().unwrap(), 2);
        assert_eq!(ledger.state.last_durable_event(), 2);
        assert!(
            rank_points(&ledger, "1v1") < 700,
            "two losses cost rank points"
        );
    }

    #[tokio::test]
    async fn a_season_reset_of_several_pools_writes_their_closes_before_it_answers() {
        let (ledger, memory) = ledger_with_ended_periods(&["1v1", "2v2"]);
        let outcome = ledger
            .admin_with_events(Batching::Together, move |state| {
                let queues = state.season_queues(None)?;
                let kind = crate::state::ResetKind::Soft;
                Ok(state.prepare_season_reset(kind, &queues)??)
            })
            .await
            .unwrap();
        // Every ranked pool is reset; only the two periodic ones had a period to close. The
        // reset's own event follows, in the same batch.
        assert!(outcome.pools.len() > 2, "{:?}", outcome.pools);
        let close = (EventKind::RatingChanged, "a".to_string(), true);
        let reset = (EventKind::SeasonReset, String::new(), false);
        assert_eq!(durable_events(&memory), vec![close.clone(), close, reset]);
        assert_eq!(ledger.state.last_durable_event(), 3);
        let entries = ledger.state.store().last_seq().unwrap();
        assert_eq!(entries, outcome.pools.len() as u64);
    }

    /// A reset whose event cannot be written is not applied either (one atomic batch): the
    /// caller's retry, on the restarted server (a failed journal write stops the journal),
    /// resets once, not twice.
    #[tokio::test]
    async fn a_season_reset_whose_event_is_refused_changes_nothing_and_its_retry_resets_once() {
        use crate::store::Storage;
        let reset = |ledger: Ledger| async move {
            ledger
                .admin_with_events(Batching::Together, move |state| {
                    let queues = state.season_queues(Some("1v1"))?;
                    let kind = crate::state::ResetKind::Soft;
                    Ok(state.prepare_season_reset(kind, &queues)??)
                })
                .await
        };
        let (ledger, memory) = ledger_with_ended_periods(&[]);
        let week = || memory.season_state("1v1").unwrap().week;
        memory.fail_writes(crate::store::FailingWrite::Events, true);
        assert!(reset(ledger).await.is_err());
        assert_eq!(week(), 0, "not reset");
        assert_eq!(memory.last_seq().unwrap(), 0, "nothing journaled");
        memory.fail_writes(crate::store::FailingWrite::Events, false);
        let config = Arc::new(crate::config::Config::from_toml_str(PERIODIC_LADDERS).unwrap());
        let store: Store = memory.clone();
        let state = State::load(config, store.clone()).unwrap();
        let (_, _, last) = state.recover(0.0).unwrap();
        let (committer, _task) = Committer::spawn(store, last, 8);
        let outcome = reset(Ledger::new(state, committer)).await.unwrap();
        assert_eq!((outcome.state.week, week()), (1, 1));
        let reset = (EventKind::SeasonReset, String::new(), false);
        assert_eq!(durable_events(&memory), vec![reset]);
    }

    /// A close that does not commit is never reported, and changes nothing.
    #[tokio::test]
    async fn a_close_the_journal_refused_writes_no_event() {
        let (ledger, memory) = ledger_with_ended_periods(&["1v1"]);
        memory.fail_journal_writes();
        let now = 10.0 * 14.0 * 86_400.0;
        let refused = ledger
            .admin_with_events(Batching::EachAlone, move |state| {
                Ok(state.prepare_period_close(now)??)
            })
            .await;
        assert!(
            matches!(refused, Err(ReportError::Commit(_))),
            "{:?}",
            refused.err()
        );
        assert_eq!(durable_events(&memory), vec![]);
        assert_eq!(ledger.state.last_durable_event(), 0);
        assert_eq!(rank_points(&ledger, "1v1"), 700);
    }
}

//! Group commit for the result journal: one task takes every journal entry waiting in its
//! bounded channel, writes them (with the events of the results among them) as one atomic
//! batch, flushes once, and only then answers each caller. Under load one flush covers many results; alone a result costs one flush.
//!
//! It also tracks which committed entries are not yet applied in memory, so a snapshot never
//! claims to include an entry that memory has not seen (see `State::snapshot`).

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use super::{EventRecord, JournalEntry, Store, StoreError};

/// Entries written per batch at most (bounds one batch's latency).
const MAX_BATCH: usize = 4096;

/// Why a commit did not happen.
#[derive(Debug, thiserror::Error)]
pub enum CommitError {
    /// The batch this entry was in could not be written; the journal refuses further entries.
    #[error(transparent)]
    Store(Arc<StoreError>),
    #[error("the result journal is shutting down")]
    Closed,
}

/// Entries that must be durable together (one result, or every pool of one admin change), with
/// the events that go with them (a result's); the reply is the sequence number of the first
/// entry and the last event cursor.
struct Request {
    entries: Vec<JournalEntry>,
    events: Vec<EventRecord>,
    reply: oneshot::Sender<Result<Committed, CommitError>>,
}

/// What a commit made durable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Committed {
    /// The sequence number of the request's first entry.
    pub seq: u64,
    /// The event cursor every event of the batch is at or before (their watchers may read up
    /// to it).
    pub last_event: u64,
}

#[derive(Debug, Default)]
struct Progress {
    /// Highest sequence number made durable.
    last: u64,
    /// Durable but not yet applied in memory.
    unapplied: BTreeSet<u64>,
}

/// Whether the journal has stopped after a batch it could not write, and whether the fence
/// refused that batch (another node holds the lease now: the normal end of an owner, not a
/// store failure). Cloneable; every clone sees the same.
#[derive(Clone, Debug, Default)]
pub struct JournalStopped {
    token: CancellationToken,
    fenced: Arc<AtomicBool>,
}

impl JournalStopped {
    /// Cancelled once the journal has stopped, whatever the cause.
    pub fn token(&self) -> CancellationToken {
        self.token.clone()
    }

    /// Whether the journal has stopped.
    pub fn has_stopped(&self) -> bool {
        self.token.is_cancelled()
    }

    /// Whether it stopped because the fence refused a batch. Set before the token is cancelled,
    /// so whoever sees the journal stopped sees its cause.
    pub fn was_fenced(&self) -> bool {
        self.has_stopped() && self.fenced.load(Ordering::Acquire)
    }

    /// Stops the journal after a batch refused with `e`.
    pub fn stop(&self, e: &StoreError) {
        if matches!(e, StoreError::Fenced) {
            self.fenced.store(true, Ordering::Release);
        }
        self.token.cancel();
    }
}

/// The cloneable handle to the commit task.
#[derive(Clone)]
pub struct Committer {
    tx: mpsc::Sender<Request>,
    progress: Arc<Mutex<Progress>>,
    /// Stopped when a batch could not be written: the journal refuses everything after it.
    stopped: JournalStopped,
}

impl Committer {
    /// Starts the commit task; `last_seq` is the highest sequence number already in the store.
    pub fn spawn(
        store: Store,
        last_seq: u64,
        capacity: usize,
    ) -> (Self, tokio::task::JoinHandle<()>) {
        let (tx, rx) = mpsc::channel(capacity);
        let progress = Arc::new(Mutex::new(Progress {
            last: last_seq,
            unapplied: BTreeSet::new(),
        }));
        let stopped = JournalStopped::default();
        let task = tokio::spawn(run(store, rx, progress.clone(), stopped.clone()));
        (
            Self {
                tx,
                progress,
                stopped,
            },
            task,
        )
    }

    /// Journals `entry` durably; returns its sequence number once flushed. The caller must call
    /// [`Committer::applied`] with it after applying the entry in memory.
    pub async fn commit(&self, entry: JournalEntry) -> Result<u64, CommitError> {
        self.commit_all(vec![entry]).await
    }

    /// Journals `entry` and appends `events` in the same atomic batch and flush: once this
    /// returns, both are durable, and a crash before it keeps neither or both.
    pub async fn commit_with_events(
        &self,
        entry: JournalEntry,
        events: Vec<EventRecord>,
    ) -> Result<Committed, CommitError> {
        self.request(vec![entry], events).await
    }

    /// [`Committer::commit_with_events`] for several entries in one atomic batch: a season
    /// reset of several pools and the events of the rating periods it closes.
    pub async fn commit_all_with_events(
        &self,
        entries: Vec<JournalEntry>,
        events: Vec<EventRecord>,
    ) -> Result<Committed, CommitError> {
        self.request(entries, events).await
    }

    /// Journals several entries in one atomic batch (all durable or none); returns the first
    /// one's sequence number, the rest follow consecutively. The caller must call
    /// [`Committer::applied`] for each after applying it.
    pub async fn commit_all(&self, entries: Vec<JournalEntry>) -> Result<u64, CommitError> {
        Ok(self.request(entries, Vec::new()).await?.seq)
    }

    async fn request(
        &self,
        entries: Vec<JournalEntry>,
        events: Vec<EventRecord>,
    ) -> Result<Committed, CommitError> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(Request {
                entries,
                events,
                reply,
            })
            .await
            .map_err(|_| CommitError::Closed)?;
        rx.await.map_err(|_| CommitError::Closed)?
    }

    /// Cancelled once the journal has failed and refuses further entries (fail-stop: the server
    /// must restart). Health reports it.
    pub fn failed(&self) -> CancellationToken {
        self.stopped.token()
    }

    /// The journal's stop with its cause: a fenced batch is no store failure.
    pub fn stopped(&self) -> JournalStopped {
        self.stopped.clone()
    }

    /// Marks a committed entry as applied in memory.
    pub fn applied(&self, seq: u64) {
        self.lock().unapplied.remove(&seq);
    }

    /// Every entry up to the returned sequence number is both durable and applied in memory:
    /// a snapshot taken now includes at least that much.
    pub fn horizon(&self) -> u64 {
        let p = self.lock();
        p.unapplied.first().map_or(p.last, |first| first - 1)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Progress> {
        self.progress.lock().unwrap_or_else(|p| p.into_inner())
    }
}

async fn run(
    store: Store,
    mut rx: mpsc::Receiver<Request>,
    progress: Arc<Mutex<Progress>>,
    stopped: JournalStopped,
) {
    let mut batch: Vec<Request> = Vec::new();
    while let Some(first) = rx.recv().await {
        batch.push(first);
        while batch.iter().map(|r| r.entries.len()).sum::<usize>() < MAX_BATCH {
            match rx.try_recv() {
                Ok(r) => batch.push(r),
                Err(_) => break,
            }
        }
        let first_seq = progress.lock().unwrap_or_else(|p| p.into_inner()).last + 1;
        let entries: Vec<JournalEntry> = batch
            .iter()
            .flat_map(|r| r.entries.iter().cloned())
            .collect();
        let events: Vec<EventRecord> = batch
            .iter()
            .flat_map(|r| r.events.iter().cloned())
            .collect();
        let started = Instant::now();
        let records: usize = entries.iter().map(|e| e.records.len()).sum();
        let append = || store.append_journal_with_events(first_seq, &entries, &events);
        // A batch of a whole pool (a season reset) takes seconds to encode: off the runtime's
        // workers, so the node's other tasks (its lease renewals above all) go on meanwhile.
        let appended = if records > crate::store::HEAVY_RECORDS {
            crate::store::heavy(append)
        } else {
            append()
        };
        let written = match appended {
            Ok(last_event) => store.flush_async().await.map(|()| last_event),
            Err(e) => Err(e),
        };
        metrics::histogram!(crate::telemetry::JOURNAL_FLUSH_SECONDS)
            .record(started.elapsed().as_secs_f64());
        tracing::debug!(
            batch = batch.len(),
            ms = started.elapsed().as_secs_f64() * 1e3,
            "journal batch written and flushed"
        );
        metrics::histogram!(crate::telemetry::JOURNAL_BATCH_SIZE).record(entries.len() as f64);
        match written {
            Ok(last_event) => {
                {
                    let mut p = progress.lock().unwrap_or_else(|p| p.into_inner());
                    for i in 0..entries.len() as u64 {
                        p.unapplied.insert(first_seq + i);
                    }
                    p.last = first_seq + entries.len() as u64 - 1;
                }
                let mut seq = first_seq;
                for r in batch.drain(..) {
                    let n = r.entries.len() as u64;
                    let _ = r.reply.send(Ok(Committed { seq, last_event }));
                    seq += n;
                }
            }
            Err(e) => {
                // Fail-stop: the batch may be partly on disk, so nothing after it may be
                // acknowledged either. Callers get the error; the server must restart. A write
                // refused because another node holds the lease is no store failure: the engine
                // stops and the next owner carries on.
                if matches!(e, StoreError::Fenced) {
                    tracing::warn!(error = %e, "result journal write fenced; refusing further results");
                } else {
                    tracing::error!(error = %e, "result journal write failed; refusing further results");
                    crate::telemetry::store_error("journal");
                }
                stopped.stop(&e);
                let e = Arc::new(e);
                for r in batch.drain(..) {
                    let _ = r.reply.send(Err(CommitError::Store(e.clone())));
                }
                rx.close();
                while let Some(r) = rx.recv().await {
                    let _ = r.reply.send(Err(CommitError::Closed));
                }
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::ResultAck;
    use crate::store::{EntryKind, MemoryStore};

    fn entry(id: &str) -> JournalEntry {
        JournalEntry {
            match_id: crate::ids::MatchId::from(id),
            applied_unix: 1.0,
            pool: "1v1".into(),
            records: Vec::new(),
            parties: Vec::new(),
            ack: ResultAck {
                queue: "1v1".into(),
                changes: Vec::new(),
                report: None,
            },
            kind: EntryKind::Result,
            season: None,
            calibration: None,
            history: None,
        }
    }

    #[tokio::test]
    async fn a_failed_batch_is_reported_and_refuses_everything_after_it() {
        let memory = Arc::new(MemoryStore::default());
        let store: Store = memory.clone();
        let (committer, task) = Committer::spawn(store, 0, 8);
        assert_eq!(committer.commit(entry("m1")).await.unwrap(), 1);
        assert!(!committer.failed().is_cancelled());
        memory.fail_journal_writes();
        let e = committer.commit(entry("m2")).await.unwrap_err();
        assert!(matches!(e, CommitError::Store(_)), "{e}");
        assert!(committer.failed().is_cancelled(), "health learns of it");
        let after = committer.commit(entry("m3")).await.unwrap_err();
        assert!(matches!(after, CommitError::Closed), "{after}");
        drop(committer);
        task.await.unwrap();
    }

    /// The journal's store errors counted in `recorder`.
    fn journal_errors(recorder: &metrics_exporter_prometheus::PrometheusRecorder) -> usize {
        recorder
            .handle()
            .render()
            .lines()
            .filter(|l| {
                l.starts_with(crate::telemetry::STORE_ERRORS) && l.contains("op=\"journal\"")
            })
            .count()
    }

    /// A batch refused because the lease moved on stops the journal like any failure, but it
    /// is not counted as a store error (an alert): the next owner carries on.
    #[tokio::test]
    async fn a_fenced_batch_stops_the_journal_without_counting_a_store_error() {
        let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
        // The test's runtime runs the commit task on this thread.
        let _local = metrics::set_default_local_recorder(&recorder);
        let memory = Arc::new(MemoryStore::default());
        let store: Store = memory.clone();
        let (committer, task) = Committer::spawn(store, 0, 8);
        memory.fail_flushes(Some(crate::store::FlushFailure::Fenced));
        let e = committer.commit(entry("m1")).await.unwrap_err();
        assert!(
            matches!(&e, CommitError::Store(s) if matches!(**s, StoreError::Fenced)),
            "{e}"
        );
        assert!(committer.failed().is_cancelled(), "it stops all the same");
        assert!(committer.stopped().was_fenced());
        assert_eq!(journal_errors(&recorder), 0);
        drop(committer);
        task.await.unwrap();

        // A disk's failure is counted.
        let memory = Arc::new(MemoryStore::default());
        let store: Store = memory.clone();
        let (committer, task) = Committer::spawn(store, 0, 8);
        memory.fail_flushes(Some(crate::store::FlushFailure::Disk));
        committer.commit(entry("m1")).await.unwrap_err();
        assert!(committer.stopped().has_stopped() && !committer.stopped().was_fenced());
        assert_eq!(journal_errors(&recorder), 1);
        drop(committer);
        task.await.unwrap();
    }
}

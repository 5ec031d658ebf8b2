//! The event log's hub: state changes emit events here; one writer task appends them to the
//! store in batches, flushes, and only then publishes the new last cursor, so a watcher never
//! sees an event a crash could take back (cursors are never reused). Admin changes append and
//! flush their event themselves before they answer ([`State::emit_durable`]), and a result's
//! events are journaled in its entry's batch ([`State::events_durable`] publishes them).
//!
//! Emitting never blocks and never takes a player or match lock: the pending list is its own
//! small lock, drained by the writer every time it is woken.

use std::sync::Mutex;
use std::time::Duration;

use serde_json::json;
use tokio::sync::{Notify, mpsc, watch};
use tokio_util::sync::CancellationToken;

use super::State;
use super::matches::Assignment;
use crate::ids::PlayerId;
use crate::records::{PlayerChange, ResultAck};
use crate::results::PeriodClose;
use crate::store::write_failures::{LOG_EVERY, store_write_failed};
use crate::store::{EventKind, EventRecord, StoreError};
use crate::telemetry::LogLimit;

/// How long a closing watcher waits for events given a cursor to become durable before it
/// flushes them itself.
const STUCK: Duration = Duration::from_secs(1);

/// Events read from the store per step of a watcher.
const EVENT_BATCH: usize = 256;

/// Events after a watcher's cursor that retention dropped before it read them: it must resync
/// (from its own source of truth), then resume from 0 (the oldest kept) or from `oldest - 1`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "after_cursor: events after {after} are no longer kept ([events] retention dropped them); \
     {}: resync, then resume from 0 (the oldest kept event)",
    oldest.map_or_else(|| format!("no event is kept, the last written is {last}"), |o| format!("the oldest kept is {o}"))
)]
pub struct EventsTrimmed {
    /// The cursor the watcher resumed from.
    pub after: u64,
    /// The oldest event's cursor still kept, if any.
    pub oldest: Option<u64>,
    /// The last durable event's cursor.
    pub last: u64,
}

/// What a watcher is sent.
#[derive(Debug)]
pub enum Watched {
    /// An event and its cursor.
    Event(u64, EventRecord),
    /// No event sent later has a cursor at or below this one.
    Closed(u64),
}

/// Why a watcher's stream ended with an error.
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    #[error(transparent)]
    Trimmed(#[from] EventsTrimmed),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// How much of a log (the event log, the audit log) is kept: entries younger than `retention`,
/// at most the newest `max`.
#[derive(Clone, Copy, Debug)]
pub struct Kept {
    pub retention: Duration,
    pub max: u64,
}

impl Kept {
    /// The time before which entries go, at `now` (unix seconds).
    fn before(self, now: f64) -> f64 {
        now - self.retention.as_secs_f64()
    }
}

/// The hub inside the state.
pub(super) struct Events {
    pending: Mutex<Pending>,
    wake: Notify,
    /// The last durable cursor.
    published: watch::Sender<u64>,
    /// The oldest take whose events may not be durable yet (the next take's number when none
    /// is): a change that must answer after its events waits for every take before its own.
    settled: watch::Sender<u64>,
}

/// Events emitted and not taken yet, and the takes whose events are on their way to the store.
#[derive(Default)]
struct Pending {
    events: Vec<EventRecord>,
    next_take: u64,
    in_flight: std::collections::BTreeSet<u64>,
}

impl Pending {
    fn settled(&self) -> u64 {
        self.in_flight.first().copied().unwrap_or(self.next_take)
    }
}

impl Events {
    pub(super) fn new(last: u64) -> Self {
        Self {
            pending: Mutex::new(Pending::default()),
            wake: Notify::new(),
            published: watch::Sender::new(last),
            settled: watch::Sender::new(0),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Pending> {
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn take(&self) -> (Vec<EventRecord>, u64) {
        let mut pending = self.lock();
        let take = pending.next_take;
        pending.next_take += 1;
        pending.in_flight.insert(take);
        (std::mem::take(&mut pending.events), take)
    }

    fn settle(&self, take: u64) {
        let mut pending = self.lock();
        pending.in_flight.remove(&take);
        let settled = pending.settled();
        self.settled
            .send_if_modified(|s| (settled > *s).then(|| *s = settled).is_some());
    }
}

/// Events taken to be written (by the writer task, a result's batch, a tick's deliveries), until
/// they are durable or given up: dropped then, so that changes waiting for every earlier take
/// ([`State::flush_with_events`]) go on.
pub struct Taken {
    state: State,
    take: u64,
}

impl Drop for Taken {
    fn drop(&mut self) {
        self.state.inner.events.settle(self.take);
    }
}

/// A match event's detail, serialized straight from the assignment: a formed and an allocated
/// event are written for every match, and building a `serde_json::Value` first (a map per
/// level, a string per player) was most of the cost. The fields are in the order a
/// `serde_json` map keeps them (by name), so the text is what that map would print.
#[derive(serde::Serialize)]
struct MatchDetail<'a> {
    queue: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    reason: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    server_address: &'a str,
    teams: &'a [Vec<PlayerId>],
}

/// A match event's record (pure).
pub fn match_event(kind: EventKind, a: &Assignment, unix: f64, extra: &str) -> EventRecord {
    let detail = MatchDetail {
        queue: a.queue.as_str(),
        reason: extra,
        server_address: &a.server_address,
        teams: &a.teams,
    };
    EventRecord {
        kind,
        unix,
        match_id: a.match_id.to_string(),
        player_id: String::new(),
        detail_json: serde_json::to_string(&detail)
            .expect("a match detail is strings and lists of strings"),
    }
}

/// A rating change's detail: the queue and the skill and rank points before and after.
fn rating_detail(queue: &str, c: &PlayerChange) -> serde_json::Value {
    json!({
        "queue": queue,
        "mean_before": c.before.mean,
        "mean_after": c.after.mean,
        "deviation_before": c.before.deviation,
        "deviation_after": c.after.deviation,
        "rank_points_before": c.rank_points_before,
        "rank_points_after": c.rank_points_after,
    })
}

/// A result's events (pure): the match completed, then each player's rating change.
/// `pending_period`: the pool rates in periods (periodic Glicko), so the result waits in each
/// player's open rating period and its mean and deviation do not move here; each change says
/// so (`"pending_period": true`), and the rating moves in the close's own event
/// ([`period_close_events`]). A player for whom the match was void (`void`: an opponent team
/// quit entirely) says `"void": true` instead: nothing of theirs moved, and nothing waits.
pub fn result_events(
    match_id: &str,
    ack: &ResultAck,
    unix: f64,
    pending_period: bool,
    void: &[PlayerId],
) -> Vec<EventRecord> {
    let mut events = vec![EventRecord {
        kind: EventKind::MatchCompleted,
        unix,
        match_id: match_id.to_string(),
        player_id: String::new(),
        detail_json: json!({ "queue": ack.queue }).to_string(),
    }];
    events.extend(ack.changes.iter().map(|c| {
        let mut detail = rating_detail(&ack.queue, c);
        if void.contains(&c.player_id) {
            detail["void"] = json!(true);
        } else if pending_period {
            detail["pending_period"] = json!(true);
        }
        EventRecord {
            kind: EventKind::RatingChanged,
            unix,
            match_id: match_id.to_string(),
            player_id: c.player_id.to_string(),
            detail_json: detail.to_string(),
        }
    }));
    events
}

/// The events of rating periods that closed in `pool` (pure): one `RATING_CHANGED` per
/// player, before and after as the close found and left the record. A close is no match's
/// change, so `match_id` is empty (as for the other admin changes' events), and the detail
/// says `"period_close": true` with the closed period's index (`"period"`) and the pool.
pub fn period_close_events(
    queue: &str,
    pool: &str,
    closes: &[PeriodClose],
    unix: f64,
) -> Vec<EventRecord> {
    closes
        .iter()
        .map(|close| {
            let mut detail = rating_detail(queue, &close.change);
            detail["pool"] = json!(pool);
            detail["period"] = json!(close.period);
            detail["period_close"] = json!(true);
            EventRecord {
                kind: EventKind::RatingChanged,
                unix,
                match_id: String::new(),
                player_id: close.change.player_id.to_string(),
                detail_json: detail.to_string(),
            }
        })
        .collect()
}

/// An admin's change to one player's rating (pure): a `RATING_CHANGED` whose detail names the
/// admin call (`"admin": "set_rating"`) and the pool, with no match.
pub fn admin_rating_event(
    queue: &str,
    pool: &str,
    action: &str,
    change: &PlayerChange,
    unix: f64,
) -> EventRecord {
    let mut detail = rating_detail(queue, change);
    detail["pool"] = json!(pool);
    detail["admin"] = json!(action);
    EventRecord {
        kind: EventKind::RatingChanged,
        unix,
        match_id: String::new(),
        player_id: change.player_id.to_string(),
        detail_json: detail.to_string(),
    }
}

impl State {
    /// Queues an event for the writer task (durable within one of its flushes).
    pub fn emit(&self, events: impl IntoIterator<Item = EventRecord>) {
        let mut pending = self.inner.events.lock();
        let before = pending.events.len();
        pending.events.extend(events);
        if pending.events.len() > before {
            self.inner.events.wake.notify_one();
        }
    }

    /// The cursor of the last durable event (0 before the first).
    pub fn last_durable_event(&self) -> u64 {
        *self.inner.events.published.borrow()
    }

    /// Gives back events taken for a write that wrote nothing: they go ahead of those emitted
    /// since, so the log keeps the order things happened in.
    pub fn emit_first(&self, events: Vec<EventRecord>) {
        if events.is_empty() {
            return;
        }
        let mut pending = self.inner.events.lock();
        let later = std::mem::replace(&mut pending.events, events);
        pending.events.extend(later);
        self.inner.events.wake.notify_one();
    }

    /// Appends events and makes them durable now (admin changes, before they answer).
    pub async fn emit_durable(&self, events: &[EventRecord]) -> Result<(), StoreError> {
        let last = self.inner.store.append_events(events)?;
        self.inner.store.flush_async().await?;
        self.publish(last);
        Ok(())
    }

    /// Writes the events emitted so far, then flushes everything written before: for a change
    /// whose answer must not come before its events are durable (a game server's cancel). Events
    /// another writer took before (a result's batch, the writer task) may still be on their
    /// way: it waits until they are durable too.
    pub async fn flush_with_events(&self) -> Result<(), StoreError> {
        // Twice: a take given up without writing gives its events back ([`State::emit_first`])
        // and settles; the second round writes them, or waits for the writer that took them.
        for _ in 0..2 {
            let (events, taken) = self.take_emitted();
            self.emit_durable(&events).await?;
            let own = taken.take;
            drop(taken);
            let mut settled = self.inner.events.settled.subscribe();
            // Every take before this one settles (written, or given up by a failing store).
            let _ = settled.wait_for(|s| *s > own).await;
        }
        Ok(())
    }

    /// Takes the events emitted but not yet written, so that a result's batch carries them
    /// ahead of its own and the log keeps the order things happened in. Keep the [`Taken`]
    /// until they are durable (or given up).
    pub fn take_emitted(&self) -> (Vec<EventRecord>, Taken) {
        let (events, take) = self.inner.events.take();
        (
            events,
            Taken {
                state: self.clone(),
                take,
            },
        )
    }

    /// Lets watchers read every event up to `last`, which the caller made durable (a result's
    /// events, journaled with it).
    pub fn events_durable(&self, last: u64) {
        self.publish(last);
    }

    fn publish(&self, last: u64) {
        self.inner
            .events
            .published
            .send_if_modified(|p| (last > *p).then(|| *p = last).is_some());
    }

    /// Whether a watcher may resume after cursor `after`: not when retention dropped events
    /// after it that the watcher never read (the oldest kept is past `after + 1`, or none is
    /// kept though events after it were written), which it would otherwise skip without a
    /// word. Cursor 0 means "from the oldest kept" and is always resumable.
    pub fn resumable_after(&self, after: u64) -> Result<Result<(), EventsTrimmed>, StoreError> {
        let last = self.last_durable_event();
        if after == 0 || after >= last || after >= self.inner.store.events_trimmed_through()? {
            return Ok(Ok(()));
        }
        let oldest = self
            .inner
            .store
            .events_after(0, 1)?
            .first()
            .map(|(seq, _)| *seq);
        Ok(Err(EventsTrimmed {
            after,
            oldest,
            last,
        }))
    }

    /// The highest cursor that no event made durable later takes: the last durable one, or
    /// further while every event given a cursor is durable (see
    /// [`crate::store::AdminRecords::events_closed`]).
    pub fn events_closed(&self) -> Result<u64, StoreError> {
        // The store first: an event given a cursor after this reading is above what it says.
        let closed = self.inner.store.events_closed()?;
        let given = self.inner.store.append_events(&[])?;
        let durable = self.last_durable_event();
        Ok(if durable >= given { closed } else { durable })
    }

    /// Sends every durable event after `after` that `wanted` keeps, then each new one as it
    /// becomes durable, until the receiver goes, `shutdown`, or an error (sent last): a store
    /// error, or events after the watcher's cursor that retention dropped before it read them
    /// ([`State::resumable_after`]). With `closing`, it also sends how far the log is closed
    /// ([`Watched::Closed`]) every `closing` while the log holds no event to send, as long as
    /// this engine may act: a merge of several shards' logs waits for it.
    pub async fn send_events(
        self,
        after: u64,
        wanted: impl Fn(EventKind) -> bool,
        tx: mpsc::Sender<Result<Watched, WatchError>>,
        shutdown: CancellationToken,
        closing: Option<Duration>,
    ) {
        let mut published = self.inner.events.published.subscribe();
        let mut cursor = after;
        let mut closed = after;
        // The last durable cursor as the closing ticks saw it, and since when.
        let mut stuck: Option<(u64, tokio::time::Instant)> = None;
        let mut tick = tokio::time::interval(closing.unwrap_or(Duration::from_secs(3600)));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let durable = *published.borrow_and_update();
            while cursor < durable {
                let batch = match self.inner.store.events_after(cursor, EVENT_BATCH) {
                    Ok(b) => b,
                    Err(e) => {
                        let _ = tx.send(Err(e.into())).await;
                        return;
                    }
                };
                // Events after the cursor are missing: retention dropped them before this
                // watcher read them, which it must hear of.
                if batch.first().is_none_or(|(seq, _)| *seq > cursor + 1) {
                    let trimmed = match self.resumable_after(cursor) {
                        Ok(Ok(())) => None,
                        Ok(Err(trimmed)) => Some(WatchError::Trimmed(trimmed)),
                        Err(e) => Some(e.into()),
                    };
                    if let Some(e) = trimmed {
                        let _ = tx.send(Err(e)).await;
                        return;
                    }
                }
                // Nothing left up to the durable cursor (only events not yet durable follow,
                // or a watcher from 0 whose events were trimmed): skip ahead to it.
                if batch.first().is_none_or(|(seq, _)| *seq > durable) {
                    cursor = durable;
                    break;
                }
                for (seq, e) in batch {
                    if seq > durable {
                        break;
                    }
                    cursor = seq;
                    closed = closed.max(seq);
                    if wanted(e.kind) && tx.send(Ok(Watched::Event(seq, e))).await.is_err() {
                        return;
                    }
                }
            }
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tx.closed() => return,
                changed = published.changed() => if changed.is_err() { return },
                _ = tick.tick(), if closing.is_some() => {
                    // Events given a cursor whose write failed wait for the next flush, and
                    // a quiet log would hold every merged watcher back meanwhile: after a
                    // second without progress this flushes them itself.
                    let durable = self.last_durable_event();
                    if stuck.is_none_or(|(at, _)| at != durable) {
                        stuck = Some((durable, tokio::time::Instant::now()));
                    } else if stuck.is_some_and(|(_, since)| since.elapsed() >= STUCK) {
                        stuck = None;
                        if let Err(e) = self.flush_given().await {
                            tracing::debug!(error = %e, "events given a cursor are not durable yet");
                        }
                    }
                    let now = match self.events_closed() {
                        Ok(now) => now,
                        Err(e) => {
                            let _ = tx.send(Err(e.into())).await;
                            return;
                        }
                    };
                    // Only once every durable event was sent (those that became durable
                    // meanwhile go first), and only by an owner: a stalled one that lost its
                    // lease says nothing its successor's events could contradict.
                    if now > closed && self.last_durable_event() <= cursor && self.may_act() {
                        closed = now;
                        if tx.send(Ok(Watched::Closed(now))).await.is_err() {
                            return;
                        }
                    }
                }
            }
        }
    }

    /// Makes the events given a cursor durable, when a write of theirs failed and none was
    /// flushed since: the store keeps a failed write and sends it with the next flush.
    async fn flush_given(&self) -> Result<(), StoreError> {
        let given = self.inner.store.append_events(&[])?;
        if given > self.last_durable_event() {
            self.inner.store.flush_async().await?;
            self.publish(given);
        }
        Ok(())
    }

    /// Writes emitted events (append, flush, publish) until `shutdown`, then writes what is
    /// left; every `trim_every` drops the events and the audit entries their [`Kept`] bound
    /// lets go.
    pub async fn write_events(
        self,
        events: Kept,
        audit: Kept,
        trim_every: Duration,
        shutdown: CancellationToken,
    ) {
        let mut trim = tokio::time::interval(trim_every);
        trim.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let failing = LogLimit::new(LOG_EVERY);
        loop {
            let stop = tokio::select! {
                () = shutdown.cancelled() => true,
                () = self.inner.events.wake.notified() => false,
                _ = trim.tick() => {
                    let now = super::unix_now();
                    let store = &self.inner.store;
                    let events = store.trim_events(events.before(now), events.max);
                    let audit = store.trim_audit(audit.before(now), audit.max);
                    for (log, trimmed) in [("events", events), ("audit entries", audit)] {
                        match trimmed {
                            Ok(n) if n > 0 => tracing::debug!(n, log, "old log entries trimmed"),
                            Ok(_) => {}
                            Err(e) => tracing::warn!(error = %e, log, "trimming a log failed"),
                        }
                    }
                    false
                }
            };
            self.write_emitted(&failing).await;
            if stop {
                return;
            }
        }
    }

    /// Appends and flushes the events emitted since the last pass, then publishes them. A
    /// failure is counted each time (unless fenced) and logged as `failing` lets it: once a
    /// flush of the embedded store failed, every later one fails until the restart.
    async fn write_emitted(&self, failing: &LogLimit) {
        let (batch, _taken) = self.take_emitted();
        if batch.is_empty() {
            return;
        }
        let written = match self.inner.store.append_events(&batch) {
            Ok(last) => self.inner.store.flush_async().await.map(|()| last),
            Err(e) => Err(e),
        };
        match written {
            Ok(last) => self.publish(last),
            Err(e) => {
                let counted = store_write_failed("events", &e);
                let Some(failures) = failing.note(1, std::time::Instant::now()) else {
                    return;
                };
                let events = batch.len();
                if counted {
                    tracing::error!(error = %e, events, failures, "events not written (logged at most once a minute)");
                } else {
                    tracing::warn!(error = %e, events, failures, fenced = true, "events not written (logged at most once a minute)");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;

//! The matchmaker loop: one task owns every queue's pool and is fed by a bounded channel of
//! [`Command`]s. It ticks at the configured interval on an injected clock, turns the pure
//! optimizer's output into state transitions, hands matches to game servers and publishes
//! SEARCHING updates to watchers.
//!
//! Architecture invariant: pools are touched only by this task, so enter, cancel and tick are
//! totally ordered: a cancel that was answered OK happened before any later tick, and its players
//! are in no match formed after it.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

mod allocation;
mod backfill;
mod backfill_request;
mod clock;
mod ready_check;
mod reconfigure;
#[cfg(test)]
mod restore_tests;
mod retention;
mod stats;
#[cfg(test)]
mod test_util;
mod tick;

use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tracing::info;

use crate::ids::{MatchId, PlayerId, QueueId, TicketId};
use crate::matching::{self, BackfillConfig, Pool};
use crate::rating::SystemConfig;
use crate::rejection::Rejection;
use crate::state::{MatchSlot, State, TicketSlot, TicketState};
use crate::telemetry as m;

pub use clock::Clock;
pub use stats::QueueStats;

use allocation::Unallocated;
use backfill::BackfillJob;
pub use backfill_request::{BackfillAnswer, BackfillReply};
use ready_check::ReadyCheck;
use stats::{QueueMetrics, push_recent};

/// How often live matches are checked against the match timeout.
const STALE_SWEEP_SECONDS: f64 = 10.0;
/// Minimum spacing of SEARCHING updates to one watcher.
const SEARCHING_UPDATE_SECONDS: f64 = 1.0;

/// What the loop can be asked to do.
#[derive(Debug)]
pub enum Command {
    /// A new ticket, already recorded in the state as SEARCHING.
    Enter {
        ticket: Arc<TicketSlot>,
        entry: matching::Ticket,
    },
    /// Cancel a ticket; the reply is the ticket's state after the call.
    Cancel {
        ticket: TicketId,
        reply: oneshot::Sender<TicketState>,
    },
    /// Per-queue statistics for `GetQueueStats`.
    Stats {
        reply: oneshot::Sender<Vec<QueueStats>>,
    },
    /// A ready-check answer; the reply is the ticket's state after it.
    Accept {
        ticket: TicketId,
        match_id: MatchId,
        accept: bool,
        reply: oneshot::Sender<Result<TicketState, Rejection>>,
    },
    /// Players left a running match (`leavers[k]` from team `k`): open their slots for
    /// backfill; the reply, once the leavers are durable, is the backfill request's id.
    Backfill {
        match_id: MatchId,
        leavers: Vec<Vec<PlayerId>>,
        reply: BackfillReply,
    },
    // --- Records ---
    /// `CancelMatch`: before its start the match's tickets go back to the front of their
    /// queues (the reply lists them), after it the match ends as a cancel always did.
    CancelMatch {
        match_id: MatchId,
        reason: String,
        reply: oneshot::Sender<Result<Vec<TicketId>, Rejection>>,
    },
    /// New settings for some queues (a config reload): every pool is rebuilt with its waiting
    /// tickets, and only if every one fits are the new settings taken, in the state too.
    Reconfigure {
        queues: Vec<(QueueId, crate::config::QueueConfig)>,
        reply: oneshot::Sender<Result<(), String>>,
    },
}

/// The cloneable sender side.
#[derive(Clone)]
pub struct Handle {
    tx: mpsc::Sender<Command>,
}

/// The loop is gone (shutting down) or its channel stayed full past the deadline.
#[derive(Debug, thiserror::Error)]
pub enum HandleError {
    #[error("the matchmaker is busy: its command queue is full; retry shortly")]
    Busy,
    #[error("the matchmaker is shutting down")]
    Closed,
}

impl Handle {
    /// Reserves room for one command, waiting at most `wait`.
    pub async fn reserve(&self, wait: Duration) -> Result<mpsc::Permit<'_, Command>, HandleError> {
        match tokio::time::timeout(wait, self.tx.reserve()).await {
            Ok(Ok(permit)) => Ok(permit),
            Ok(Err(_)) => Err(HandleError::Closed),
            Err(_) => Err(HandleError::Busy),
        }
    }

    /// As [`Handle::reserve`], with a permit that can move into a task of its own.
    pub async fn reserve_owned(
        &self,
        wait: Duration,
    ) -> Result<mpsc::OwnedPermit<Command>, HandleError> {
        match tokio::time::timeout(wait, self.tx.clone().reserve_owned()).await {
            Ok(Ok(permit)) => Ok(permit),
            Ok(Err(_)) => Err(HandleError::Closed),
            Err(_) => Err(HandleError::Busy),
        }
    }

    /// Sends a command and waits for its reply.
    pub async fn ask<T>(
        &self,
        make: impl FnOnce(oneshot::Sender<T>) -> Command,
    ) -> Result<T, HandleError> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(make(reply))
            .await
            .map_err(|_| HandleError::Closed)?;
        rx.await.map_err(|_| HandleError::Closed)
    }
}

struct QueueRuntime {
    id: QueueId,
    pool: Pool,
    system: SystemConfig,
    stats: QueueStats,
    recent_waits: VecDeque<f64>,
    recent_quality: VecDeque<f64>,
    recent_fill_seconds: VecDeque<f64>,
    /// 0 = no ready-check.
    ready_check_seconds: f64,
    backfill: BackfillConfig,
    team_size: u32,
    /// This queue's per-ticket and per-match metrics, registered once.
    metrics: QueueMetrics,
    /// Seconds between this queue's optimizer runs, and the clock time of its last run.
    tick_every: f64,
    last_run: f64,
}

struct Waiting {
    slot: Arc<TicketSlot>,
    queue: usize,
    last_published: f64,
}

/// The task's own data.
struct Loop {
    state: State,
    clock: Clock,
    /// Seconds between loop ticks: the fastest queue's interval.
    tick_seconds: f64,
    queues: Vec<QueueRuntime>,
    queue_index: HashMap<QueueId, usize>,
    waiting: HashMap<TicketId, Waiting, matching::IdHash>,
    unallocated: VecDeque<Unallocated>,
    finished: retention::Retained,
    last_stale_sweep: f64,
    // The maps below are keyed by server-minted ids: the fast id hasher (every formed and
    // allocated match passes through some of them).
    ready: HashMap<MatchId, ReadyCheck, matching::IdHash>,
    ready_by_ticket: HashMap<TicketId, MatchId, matching::IdHash>,
    backfills: Vec<BackfillJob>,
    /// Per live match of a queue with match rules, its tickets as the rules see them, team by
    /// team, so backfill holds newcomers to the rules (dropped when the match ends).
    seated: HashMap<MatchId, Vec<Vec<matching::Seated>>, matching::IdHash>,
    /// Per allocated match that has not started, its tickets' pool entries, so a `CancelMatch`
    /// before `StartMatch` can put them back in their queues (dropped by the stale sweep once
    /// the match started or ended).
    unstarted: HashMap<MatchId, Vec<(usize, matching::Ticket)>, matching::IdHash>,
    /// The server's runtime, for the few sends that may wait (backfill updates to a stream).
    runtime: tokio::runtime::Handle,
    /// Allocated matches whose write did not flush, so no server got them: dissolved, their
    /// tickets requeued ([`Loop::requeue_undelivered`]).
    undelivered: mpsc::UnboundedReceiver<Vec<MatchId>>,
    undelivered_tx: mpsc::UnboundedSender<Vec<MatchId>>,
    /// What became of backfill additions' writes ([`Loop::fill_outcome`]): stored ones are
    /// counted; those whose write did not flush, so no server got them, are taken back, their
    /// tickets requeued ([`Loop::take_back_backfill`]).
    fill_outcomes: mpsc::UnboundedReceiver<backfill::FillOutcome>,
    fill_outcomes_tx: mpsc::UnboundedSender<backfill::FillOutcome>,
    /// Per match, the `RequestBackfill` whose write is being flushed (answered once it is:
    /// [`Loop::backfill_request_flushed`]).
    opening: HashMap<MatchId, backfill_request::Opening>,
    /// The outcomes of those flushes.
    backfill_flushed: mpsc::UnboundedReceiver<(MatchId, Result<(), crate::store::StoreError>)>,
    backfill_flushed_tx: mpsc::UnboundedSender<(MatchId, Result<(), crate::store::StoreError>)>,
}

/// The loop's thread; awaiting it waits until the loop has stopped (`Err` if it panicked).
pub type LoopTask = oneshot::Receiver<()>;

/// Most commands the loop takes from its channel at once (see [`Loop::run`]).
const COMMAND_BATCH: usize = 1024;
/// How long the loop lets commands gather after a batch (see [`Loop::run`]): under load, a
/// cancel or a stats request is answered this much later at most (plus the timer's 1 ms
/// granularity).
const COMMAND_GATHER: Duration = Duration::from_millis(1);

/// Creates the loop's channel and starts the loop on its own thread; it runs until `shutdown`
/// is cancelled or every [`Handle`] is gone. Must be called inside the server's runtime.
///
/// Its own thread, not a task on the server's runtime: a tick is tens of milliseconds of
/// synchronous work (forming, allocating and storing thousands of matches under load), and a
/// task would hold one of the runtime's worker threads for all of it. On a one-core server
/// nothing else would run meanwhile, not even refusing requests; as a thread, the OS shares the
/// core between the tick and the request handlers.
pub fn spawn(
    state: State,
    clock: Clock,
    shutdown: CancellationToken,
    restored: Vec<Arc<MatchSlot>>,
) -> std::io::Result<(Handle, LoopTask)> {
    let (tx, rx) = mpsc::channel(state.config().server.command_buffer);
    let tick = loop_tick(&state);
    let mut lp = Loop::new(state, clock, restored);
    // Timers only: the loop's channels and the server's streams work across runtimes.
    let own = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()?;
    let (done, task) = oneshot::channel();
    std::thread::Builder::new()
        .name("matchmaker-loop".into())
        .spawn(move || {
            own.block_on(lp.run(rx, tick, shutdown));
            let _ = done.send(());
        })?;
    Ok((Handle { tx }, task))
}

/// The loop wakes at the fastest queue's interval; each queue runs at its own (see `due`).
fn loop_tick(state: &State) -> Duration {
    let tick_ms = state
        .queues()
        .iter()
        .map(|q| q.config.tick_ms(state.config().server.tick_interval_ms))
        .min()
        .unwrap_or(state.config().server.tick_interval_ms);
    Duration::from_millis(tick_ms)
}

impl Loop {
    /// The loop's data before its first tick: every configured queue with an empty pool, and
    /// the `restored` matches (formed ones wait for a server again). Must be called inside the
    /// server's runtime.
    fn new(state: State, clock: Clock, restored: Vec<Arc<MatchSlot>>) -> Self {
        let queues: Vec<QueueRuntime> = state
            .queues()
            .iter()
            .map(|q| QueueRuntime {
                id: q.id.clone(),
                pool: Pool::new(q.config.shape(), q.config.matching.clone()),
                system: q.config.rating.clone(),
                stats: QueueStats {
                    queue: q.id.to_string(),
                    ..QueueStats::default()
                },
                recent_waits: VecDeque::new(),
                recent_quality: VecDeque::new(),
                recent_fill_seconds: VecDeque::new(),
                ready_check_seconds: q.config.ready_check_seconds,
                backfill: q.config.backfill.clone(),
                team_size: q.config.team_size,
                metrics: QueueMetrics::new(state.shard(), &q.id),
                tick_every: q.config.tick_ms(state.config().server.tick_interval_ms) as f64 / 1e3,
                last_run: f64::NEG_INFINITY,
            })
            .collect();
        let queue_index = queues
            .iter()
            .enumerate()
            .map(|(i, q)| (q.id.clone(), i))
            .collect();
        let now = clock.now();
        let allocation_timeout = state.config().server.allocation_timeout_seconds;
        let (undelivered_tx, undelivered) = mpsc::unbounded_channel();
        let (fill_outcomes_tx, fill_outcomes) = mpsc::unbounded_channel();
        let (backfill_flushed_tx, backfill_flushed) = mpsc::unbounded_channel();
        // The restored matches a server had taken hold their tickets again (matched to that
        // server): retained from now, like any finished ticket.
        let finished = restored
            .iter()
            .filter(|m| m.phase() != crate::state::MatchPhase::Formed)
            .flat_map(|m| m.tickets())
            .map(|id| (now, id))
            .collect();
        let running: Vec<Arc<MatchSlot>> = restored
            .iter()
            .filter(|m| m.phase() != crate::state::MatchPhase::Formed)
            .cloned()
            .collect();
        let mut lp = Self {
            tick_seconds: loop_tick(&state).as_secs_f64(),
            state,
            clock,
            queues,
            queue_index,
            waiting: HashMap::default(),
            unallocated: restored
                .into_iter()
                .filter(|m| m.phase() == crate::state::MatchPhase::Formed)
                .map(|m| Unallocated {
                    since: allocation::restored_since(now, m.formed_at, allocation_timeout),
                    region: m.assignment().region.clone(),
                    slot: m,
                    tickets: Vec::new(),
                })
                .collect(),
            finished,
            last_stale_sweep: f64::NEG_INFINITY,
            ready: HashMap::default(),
            ready_by_ticket: HashMap::default(),
            backfills: Vec::new(),
            seated: HashMap::default(),
            unstarted: HashMap::default(),
            runtime: tokio::runtime::Handle::current(),
            undelivered,
            undelivered_tx,
            fill_outcomes,
            fill_outcomes_tx,
            opening: HashMap::new(),
            backfill_flushed,
            backfill_flushed_tx,
        };
        lp.reopen_restored_requests(&running);
        lp
    }

    async fn run(
        &mut self,
        mut rx: mpsc::Receiver<Command>,
        tick: Duration,
        shutdown: CancellationToken,
    ) {
        let mut interval = tokio::time::interval(tick);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // Commands already queued are taken together: one pass through `select!` per batch
        // instead of per ticket. Bounded, so a tick is never held off long. After a batch the
        // loop lets the next one gather for `COMMAND_GATHER` before it listens again: a sender
        // only wakes a listening receiver, and waking this thread is a system call and a
        // context switch, once per batch under load instead of once per ticket. Idle, the loop
        // listens and answers at once.
        let mut batch = Vec::with_capacity(COMMAND_BATCH);
        loop {
            tokio::select! {
                // A due tick goes before commands: under load there is always a command
                // waiting, and ticks must not wait for a gap in the arrivals.
                biased;
                () = shutdown.cancelled() => break,
                _ = interval.tick() => {
                    self.tick();
                    self.state.flush_dropped_tickets(&self.runtime);
                }
                Some(ids) = self.undelivered.recv() => self.requeue_undelivered(&ids),
                Some(outcome) = self.fill_outcomes.recv() => self.fill_outcome(outcome),
                Some((id, flushed)) = self.backfill_flushed.recv() => {
                    self.backfill_request_flushed(&id, flushed);
                }
                n = rx.recv_many(&mut batch, COMMAND_BATCH) => {
                    if n == 0 {
                        break;
                    }
                    for cmd in batch.drain(..) {
                        self.handle(cmd);
                    }
                    self.state.flush_dropped_tickets(&self.runtime);
                    tokio::select! {
                        biased;
                        () = shutdown.cancelled() => break,
                        () = tokio::time::sleep(COMMAND_GATHER) => {}
                    }
                }
            }
        }
        self.persist_unallocated();
        info!(waiting = self.waiting.len(), "matchmaker loop stopped");
    }

    fn handle(&mut self, cmd: Command) {
        match cmd {
            Command::Enter { ticket, entry } => {
                let Some(&qi) = self.queue_index.get(&ticket.queue) else {
                    return;
                };
                // Cancelled while it was being written (see `cancel`): it never waits.
                if ticket.view().is_final() {
                    return;
                }
                self.queues[qi].metrics.entered.increment(1);
                // A ban set while the ticket was on its way: the ban is in the state before
                // `BanPlayer` cancels waiting tickets, so checking here closes that window.
                if let Err(banned) = self
                    .state
                    .check_bans(&ticket.players, crate::state::unix_now())
                {
                    let now = self.clock.now();
                    self.state
                        .end_ticket(&ticket, TicketState::Cancelled, now, banned.to_string());
                    self.finished.push_back((now, ticket.id.clone()));
                    return;
                }
                if let Err(e) = self.queues[qi].pool.insert(entry) {
                    // The API validated the ticket, so this is a shell bug; end the ticket
                    // rather than leave it SEARCHING outside any pool.
                    tracing::error!(ticket = %ticket.id, error = %e, "matcher refused a ticket");
                    let now = self.clock.now();
                    self.state.end_ticket(
                        &ticket,
                        TicketState::Cancelled,
                        now,
                        format!("refused by the matcher: {e}"),
                    );
                    self.finished.push_back((now, ticket.id.clone()));
                    return;
                }
                self.waiting.insert(
                    ticket.id.clone(),
                    Waiting {
                        slot: ticket,
                        queue: qi,
                        last_published: f64::NEG_INFINITY,
                    },
                );
            }
            Command::Cancel { ticket, reply } => {
                let state = self.cancel(&ticket);
                let _ = reply.send(state);
            }
            Command::Stats { reply } => {
                let now = self.clock.now();
                let stats = self.queues.iter().map(|q| {
                    let pool = q.pool.stats(now);
                    let longest = pool.longest_wait_seconds;
                    let limits = q.pool.config().limits(longest);
                    let waiting = !q.pool.is_empty();
                    QueueStats {
                        // Counted now, not at the last tick: the admission cap reads these,
                        // and tickets entered since that tick must count.
                        tickets_waiting: pool.waiting_tickets as u64,
                        players_waiting: pool.waiting_players as u64,
                        waiting_by_value: q.pool.waiting_by_value(),
                        longest_wait_seconds: longest,
                        skill_window: if waiting { limits.window } else { 0.0 },
                        starving: waiting && limits.starving,
                        ..q.stats.clone()
                    }
                });
                let _ = reply.send(stats.collect());
            }
            Command::Accept {
                ticket,
                match_id,
                accept,
                reply,
            } => {
                let _ = reply.send(self.answer_ready_check(&ticket, &match_id, accept));
            }
            Command::Backfill {
                match_id,
                leavers,
                reply,
            } => {
                self.request_backfill(match_id, leavers, reply);
            }
            Command::CancelMatch {
                match_id,
                reason,
                reply,
            } => {
                let _ = reply.send(self.cancel_match(&match_id, &reason));
            }
            Command::Reconfigure { queues, reply } => {
                let _ = reply.send(self.reconfigure(&queues));
            }
        }
    }

    /// `CancelMatch`: a match that has not started is dissolved with its tickets back at the
    /// front of their queues, wait kept (those whose entries this loop still holds: a match
    /// restored after a restart has none and frees its players); a started one ends.
    fn cancel_match(&mut self, id: &MatchId, reason: &str) -> Result<Vec<TicketId>, Rejection> {
        let slot = self.state.match_slot(id)?;
        let reason = if reason.is_empty() {
            "the game server cancelled the match before it started"
        } else {
            reason
        };
        if let Some(ids) = self.requeue_unstarted(&slot, reason, "server_requeue") {
            return Ok(ids);
        }
        self.unstarted.remove(id);
        self.state.cancel_match(&slot, reason)?;
        Ok(Vec::new())
    }

    /// Dissolves a match that has not started (ready-check, formed or allocated), its tickets
    /// back at the front of their queues, wait kept (those whose entries this loop still holds:
    /// a match restored after a restart has none and frees its players); `label` is the
    /// cancel's reason on `matchmaker_matches_cancelled_total`. `None`, and nothing changed,
    /// when the match started or ended.
    fn requeue_unstarted(
        &mut self,
        slot: &Arc<MatchSlot>,
        reason: &str,
        label: &'static str,
    ) -> Option<Vec<TicketId>> {
        let id = &slot.id;
        let entries: Option<Vec<(usize, &matching::Ticket)>> = match slot.phase() {
            crate::state::MatchPhase::ReadyCheck => self
                .ready
                .get(id)
                .map(|rc| rc.tickets.iter().map(|(_, t, _)| (rc.queue, t)).collect()),
            crate::state::MatchPhase::Formed => self
                .unallocated
                .iter()
                .find(|u| u.slot.id == *id)
                .map(|u| u.tickets.iter().map(|(q, t)| (*q, t)).collect()),
            crate::state::MatchPhase::Allocated => Some(
                self.unstarted
                    .get(id)
                    .map(|ts| ts.iter().map(|(q, t)| (*q, t)).collect())
                    .unwrap_or_default(),
            ),
            _ => None,
        };
        if let Some(entries) = entries {
            let named: Vec<(QueueId, &matching::Ticket)> = entries
                .iter()
                .map(|(q, t)| (self.queues[*q].id.clone(), *t))
                .collect();
            let now = self.clock.now();
            if let Some(slots) = self.state.requeue_match(slot, &named, now, reason, label) {
                // Only now, with the match dissolved, do its entries leave where they waited.
                let entries: Vec<(usize, matching::Ticket)> = if self.ready.contains_key(id) {
                    self.remove_ready(id)
                        .map(|rc| {
                            let q = rc.queue;
                            rc.tickets.into_iter().map(|(_, t, _)| (q, t)).collect()
                        })
                        .unwrap_or_default()
                } else if let Some(at) = self.unallocated.iter().position(|u| u.slot.id == *id) {
                    self.unallocated
                        .remove(at)
                        .map(|u| u.tickets)
                        .unwrap_or_default()
                } else {
                    self.unstarted.remove(id).unwrap_or_default()
                };
                let mut ids = Vec::with_capacity(slots.len());
                for (ticket, (qi, entry)) in slots.into_iter().zip(entries) {
                    let id = ticket.id.clone();
                    self.state.store_ticket_again(&ticket, &entry, now);
                    // Only a ticket back in its pool is named: one a ban or a changed queue
                    // ended instead waits nowhere.
                    if self.requeue(qi, ticket, entry) {
                        ids.push(id);
                    }
                }
                return Some(ids);
            }
        }
        None
    }

    /// Puts a ticket back in its pool with its original `entered_at`: the optimizer serves
    /// the oldest first, so this is the front of the queue. Its TTL counts from now
    /// ([`matching::Pool::insert_returning`]). Whether it is back in the pool (a ticket no
    /// longer SEARCHING, with a banned player, or that no longer fits the queue is not).
    fn requeue(&mut self, qi: usize, slot: Arc<TicketSlot>, entry: matching::Ticket) -> bool {
        if slot.view().state != TicketState::Searching {
            return false;
        }
        let id = entry.id.clone();
        let now = self.clock.now();
        // A player banned while the match was under way (`BanPlayer` cancels only waiting
        // tickets) does not wait again.
        if let Err(banned) = self
            .state
            .check_bans(&slot.players, crate::state::unix_now())
        {
            self.state
                .end_ticket(&slot, TicketState::Cancelled, now, banned.to_string());
            self.finished.push_back((now, id));
            return false;
        }
        // Its heartbeat counts from now: a client that polled while it was matched (the poll
        // touches only a waiting ticket) is not expired for the time its match took.
        slot.touch(now);
        match self.queues[qi].pool.insert_returning(entry, now) {
            Ok(()) => {
                self.waiting.insert(
                    id,
                    Waiting {
                        slot,
                        queue: qi,
                        last_published: f64::NEG_INFINITY,
                    },
                );
                true
            }
            Err(e) => {
                // The queue's settings changed while its match was under way (a reload made
                // parties smaller, or a rule it no longer meets): it ends, rather than stay
                // SEARCHING in no pool, where nothing would ever expire it.
                self.state.end_ticket(
                    &slot,
                    TicketState::Cancelled,
                    now,
                    format!("back in its queue, it no longer fits the queue's settings: {e}"),
                );
                self.finished.push_back((now, id));
                false
            }
        }
    }

    fn cancel(&mut self, id: &TicketId) -> TicketState {
        let now = self.clock.now();
        match self.waiting.remove(id) {
            Some(w) => {
                self.queues[w.queue].pool.remove(id);
                self.state.end_ticket(
                    &w.slot,
                    TicketState::Cancelled,
                    now,
                    "cancelled by client".into(),
                );
                metrics::counter!(m::TICKETS_CANCELLED, "queue" => w.slot.queue.to_string())
                    .increment(1);
                self.finished.push_back((now, id.clone()));
                TicketState::Cancelled
            }
            None => {
                if let Some(match_id) = self.ready_by_ticket.get(id).cloned() {
                    self.decline(&match_id, id);
                    return TicketState::Cancelled;
                }
                let Ok(slot) = self.state.ticket(id) else {
                    return TicketState::Cancelled;
                };
                let state = slot.view().state;
                if state != TicketState::Searching {
                    return state;
                }
                // Searching but in no pool: `EnterQueue` is still writing it and its `Enter`
                // has not come yet. It ends here, and is left out when it comes: the cancel
                // answered OK happened before any match could take it.
                self.state.end_ticket(
                    &slot,
                    TicketState::Cancelled,
                    now,
                    "cancelled by client".into(),
                );
                metrics::counter!(m::TICKETS_CANCELLED, "queue" => slot.queue.to_string())
                    .increment(1);
                self.finished.push_back((now, id.clone()));
                TicketState::Cancelled
            }
        }
    }
}

/// Whether a queue that runs every `every` seconds and last ran at `last` runs in the loop tick
/// at `now`, the loop ticking every `loop_tick` seconds: within half a loop tick of its time,
/// so timer jitter never skips a whole loop tick.
fn due(last: f64, every: f64, loop_tick: f64, now: f64) -> bool {
    now - last >= every - loop_tick / 2.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_queue_runs_at_its_own_interval_within_half_a_loop_tick() {
        // Loop every 0.1 s, queue every 0.5 s: first tick runs, then every fifth, with jitter.
        assert!(due(f64::NEG_INFINITY, 0.5, 0.1, 0.0));
        assert!(!due(10.0, 0.5, 0.1, 10.4));
        assert!(
            due(10.0, 0.5, 0.1, 10.46),
            "a tick arriving slightly early still runs"
        );
        assert!(due(10.0, 0.5, 0.1, 10.5));
        // A queue at the loop's own interval runs every tick, even one that came early.
        assert!(due(10.0, 0.1, 0.1, 10.06));
    }
}

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
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, info_span};

use crate::config::BackfillConfig;
use crate::ids::{MatchId, PlayerId, QueueId, TicketId};
use crate::matching::{self, Pool, SystemModel};
use crate::rating::SystemConfig;
use crate::rejection::{MatchRefusal, TicketRefusal};
use crate::state::{
    Assignment, BackfillError, MatchSlot, Rejection, Release, State, TicketSlot, TicketState,
    TicketView,
};
use crate::telemetry as m;

/// How often live matches are checked against the match timeout.
const STALE_SWEEP_SECONDS: f64 = 10.0;
/// Minimum spacing of SEARCHING updates to one watcher.
const SEARCHING_UPDATE_SECONDS: f64 = 1.0;

/// Monotonic seconds since the server started, plus whatever a test skipped ahead with
/// [`Clock::advance`]: tests inject time this way (ready-check and heartbeat deadlines) instead of
/// sleeping. Clones share the offset.
#[derive(Clone, Debug)]
pub struct Clock {
    start: tokio::time::Instant,
    /// Seconds skipped, as `f64` bits.
    skipped: Arc<std::sync::atomic::AtomicU64>,
}

impl Clock {
    /// Starts the clock now.
    pub fn start() -> Self {
        Self {
            start: tokio::time::Instant::now(),
            skipped: Arc::new(std::sync::atomic::AtomicU64::new(0f64.to_bits())),
        }
    }

    /// Seconds since start.
    pub fn now(&self) -> f64 {
        let skipped = f64::from_bits(self.skipped.load(std::sync::atomic::Ordering::Acquire));
        self.start.elapsed().as_secs_f64() + skipped
    }

    /// Moves the clock forward by `seconds` (tests only need this; the server never calls it).
    pub fn advance(&self, seconds: f64) {
        let _ = self.skipped.fetch_update(
            std::sync::atomic::Ordering::AcqRel,
            std::sync::atomic::Ordering::Acquire,
            |bits| Some((f64::from_bits(bits) + seconds.max(0.0)).to_bits()),
        );
    }
}

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
    /// backfill; the reply is the backfill request's id.
    Backfill {
        match_id: MatchId,
        leavers: Vec<Vec<PlayerId>>,
        reply: oneshot::Sender<Result<String, Rejection>>,
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

/// Numbers for `GetQueueStats` and the metrics endpoint.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct QueueStats {
    pub queue: String,
    pub tickets_waiting: u64,
    pub players_waiting: u64,
    pub matches_formed: u64,
    pub tickets_expired: u64,
    pub wait_p50_seconds: f64,
    pub wait_p95_seconds: f64,
    pub quality_mean: f64,
    pub last_tick_ms: f64,
    pub tickets_expired_heartbeat: u64,
    pub ready_checks: u64,
    pub ready_checks_passed: u64,
    pub ready_checks_declined: u64,
    pub ready_checks_timed_out: u64,
    /// Tickets of ended ready-checks that accepted, and that declined or let time run out.
    pub ready_tickets_accepted: u64,
    pub ready_tickets_refused: u64,
    pub backfill_requests: u64,
    pub backfill_slots_opened: u64,
    pub backfill_slots_filled: u64,
    pub backfill_requests_expired: u64,
    pub backfill_fill_p50_seconds: f64,
    pub backfill_fill_p95_seconds: f64,
}

impl QueueStats {
    /// Share of ready-check tickets that accepted (0 before any ready-check ended).
    pub fn accept_rate(&self) -> f64 {
        let answered = self.ready_tickets_accepted + self.ready_tickets_refused;
        if answered == 0 {
            0.0
        } else {
            self.ready_tickets_accepted as f64 / answered as f64
        }
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

/// A queue's metric handles, registered once at start: every ticket and match passes the loop,
/// and `counter!`/`histogram!` with a label allocate the label and look the key up in the
/// registry on each call. With the Prometheus exporter on, metrics were ~15% of the loop
/// thread's CPU under EnterQueue load, about half of it those lookups.
struct QueueMetrics {
    entered: metrics::Counter,
    expired_ttl: metrics::Counter,
    wait_seconds: metrics::Histogram,
    formed: metrics::Counter,
    quality: metrics::Histogram,
    tick_seconds: metrics::Histogram,
    waiting: metrics::Gauge,
}

impl QueueMetrics {
    fn new(queue: &QueueId) -> Self {
        let label = queue.to_string();
        QueueMetrics {
            entered: metrics::counter!(m::TICKETS_ENTERED, "queue" => label.clone()),
            expired_ttl: metrics::counter!(m::TICKETS_EXPIRED, "queue" => label.clone(), "reason" => "ttl"),
            wait_seconds: metrics::histogram!(m::WAIT_SECONDS, "queue" => label.clone()),
            formed: metrics::counter!(m::MATCHES_FORMED, "queue" => label.clone()),
            quality: metrics::histogram!(m::MATCH_QUALITY, "queue" => label.clone()),
            tick_seconds: metrics::histogram!(m::TICK_SECONDS, "queue" => label.clone()),
            waiting: metrics::gauge!(m::TICKETS_WAITING, "queue" => label),
        }
    }
}

const RECENT: usize = 1024;

fn push_recent(buf: &mut VecDeque<f64>, v: f64) {
    if buf.len() == RECENT {
        buf.pop_front();
    }
    buf.push_back(v);
}

/// A formed match waiting for a game server, with its tickets so they can return to the queue.
struct Unallocated {
    slot: Arc<MatchSlot>,
    tickets: Vec<(usize, matching::Ticket)>,
    /// Unix seconds since when a server may take it (formed, or passed its ready-check): the
    /// allocation timeout counts from here.
    since_unix: f64,
    /// The match's region (fixed when it formed).
    region: Option<String>,
}

struct Waiting {
    slot: Arc<TicketSlot>,
    queue: usize,
    last_published: f64,
}

/// A formed match waiting for every ticket to accept.
struct ReadyCheck {
    slot: Arc<MatchSlot>,
    queue: usize,
    /// Each ticket, its optimizer entry (to return it to the pool) and whether it accepted.
    tickets: Vec<(Arc<TicketSlot>, matching::Ticket, bool)>,
    deadline: f64,
}

impl ReadyCheck {
    fn progress(&self) -> Vec<(Arc<TicketSlot>, bool)> {
        self.tickets
            .iter()
            .map(|(t, _, accepted)| (t.clone(), *accepted))
            .collect()
    }
}

/// Open slots of a running match, filled from its queue's pool each tick.
struct BackfillJob {
    id: String,
    slot: Arc<MatchSlot>,
    queue: usize,
    open: Vec<u32>,
    requested_at: f64,
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
    finished: VecDeque<(f64, TicketId)>,
    last_stale_sweep: f64,
    ready: HashMap<MatchId, ReadyCheck>,
    ready_by_ticket: HashMap<TicketId, MatchId>,
    backfills: Vec<BackfillJob>,
    /// The server's runtime, for the few sends that may wait (backfill updates to a stream).
    runtime: tokio::runtime::Handle,
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
    let queues: Vec<QueueRuntime> = state
        .queues()
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
            metrics: QueueMetrics::new(&q.id),
            tick_every: q.config.tick_ms(state.config().server.tick_interval_ms) as f64 / 1e3,
            last_run: f64::NEG_INFINITY,
        })
        .collect();
    let queue_index = queues
        .iter()
        .enumerate()
        .map(|(i, q)| (q.id.clone(), i))
        .collect();
    // The loop wakes at the fastest queue's interval; each queue runs at its own (see `due`).
    let tick_ms = state
        .queues()
        .map(|q| q.config.tick_ms(state.config().server.tick_interval_ms))
        .min()
        .unwrap_or(state.config().server.tick_interval_ms);
    let tick = Duration::from_millis(tick_ms);
    let mut lp = Loop {
        tick_seconds: tick.as_secs_f64(),
        state,
        clock,
        queues,
        queue_index,
        waiting: HashMap::default(),
        unallocated: restored
            .into_iter()
            .filter(|m| m.phase() == crate::state::MatchPhase::Formed)
            .map(|m| Unallocated {
                since_unix: m.formed_unix,
                region: m.assignment().region.clone(),
                slot: m,
                tickets: Vec::new(),
            })
            .collect(),
        finished: VecDeque::new(),
        last_stale_sweep: f64::NEG_INFINITY,
        ready: HashMap::new(),
        ready_by_ticket: HashMap::new(),
        backfills: Vec::new(),
        runtime: tokio::runtime::Handle::current(),
    };
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

impl Loop {
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
                _ = interval.tick() => self.tick(),
                n = rx.recv_many(&mut batch, COMMAND_BATCH) => {
                    if n == 0 {
                        break;
                    }
                    for cmd in batch.drain(..) {
                        self.handle(cmd);
                    }
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

    /// Writes the matches no server has taken yet, so a graceful restart keeps them (and a
    /// result reported for one without auth still applies after it). Ready-checks in progress
    /// are not matches yet and are not written.
    fn persist_unallocated(&self) {
        let formed: Vec<Arc<MatchSlot>> = self
            .unallocated
            .iter()
            .filter(|u| u.slot.phase() == crate::state::MatchPhase::Formed)
            .map(|u| u.slot.clone())
            .collect();
        self.state.persist_matches(&formed);
    }

    fn handle(&mut self, cmd: Command) {
        match cmd {
            Command::Enter { ticket, entry } => {
                let Some(&qi) = self.queue_index.get(&ticket.queue) else {
                    return;
                };
                self.queues[qi].metrics.entered.increment(1);
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
                let _ = reply.send(self.queues.iter().map(|q| q.stats.clone()).collect());
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
                let _ = reply.send(self.open_backfill(&match_id, &leavers));
            }
        }
    }

    /// A ticket's AcceptMatch. Accepting is idempotent; declining (or cancelling the ticket)
    /// dissolves the match.
    fn answer_ready_check(
        &mut self,
        ticket: &TicketId,
        match_id: &MatchId,
        accept: bool,
    ) -> Result<TicketState, Rejection> {
        let slot = self.state.ticket(ticket)?;
        let Some(rc) = self.ready.get_mut(match_id) else {
            // No ready-check running for this match: tell the ticket where it stands.
            let view = slot.view();
            let in_it = view
                .assignment
                .as_ref()
                .is_some_and(|a| a.match_id == *match_id);
            return match (in_it, view.state, accept) {
                (true, TicketState::Matched, true) => Ok(TicketState::Matched),
                (true, TicketState::Matched, false) => Err(Rejection::for_match(
                    match_id,
                    MatchRefusal::PassedReadyCheck,
                )),
                _ => Err(Rejection::Ticket {
                    ticket: ticket.clone(),
                    refusal: TicketRefusal::NoReadyCheck {
                        match_id: match_id.clone(),
                        state: view.state.name(),
                    },
                }),
            };
        };
        let Some(i) = rc.tickets.iter().position(|(t, _, _)| t.id == *ticket) else {
            return Err(Rejection::invalid(
                "ticket_id",
                format!("ticket {ticket} is not in match {match_id}"),
            ));
        };
        if !accept {
            self.decline(match_id, ticket);
            return Ok(TicketState::Cancelled);
        }
        rc.tickets[i].2 = true;
        if !rc.tickets.iter().all(|(_, _, a)| *a) {
            let left = rc.deadline - self.clock.now();
            self.state.publish_ready(&rc.progress(), left);
            return Ok(TicketState::Matched);
        }
        let rc = self.remove_ready(match_id).expect("present above");
        let q = &mut self.queues[rc.queue];
        q.stats.ready_checks_passed += 1;
        q.stats.ready_tickets_accepted += rc.tickets.len() as u64;
        metrics::counter!(m::READY_CHECKS, "queue" => q.id.to_string(), "outcome" => "passed")
            .increment(1);
        if self.state.pass_ready_check(&rc.slot) {
            let now = self.clock.now();
            self.state.publish_ready(&rc.progress(), rc.deadline - now);
            let queue = rc.queue;
            self.unallocated.push_back(Unallocated {
                region: rc.slot.assignment().region.clone(),
                slot: rc.slot,
                tickets: rc.tickets.into_iter().map(|(_, t, _)| (queue, t)).collect(),
                since_unix: crate::state::unix_now(),
            });
        }
        Ok(TicketState::Matched)
    }

    fn remove_ready(&mut self, match_id: &MatchId) -> Option<ReadyCheck> {
        let rc = self.ready.remove(match_id)?;
        for (t, _, _) in &rc.tickets {
            self.ready_by_ticket.remove(&t.id);
        }
        Some(rc)
    }

    /// `decliner` declined (or cancelled its ticket): the match dissolves, the decliner's
    /// ticket is CANCELLED, every other ticket goes back to the front of its queue.
    fn decline(&mut self, match_id: &MatchId, decliner: &TicketId) {
        let Some(rc) = self.remove_ready(match_id) else {
            return;
        };
        let now = self.clock.now();
        let q = &mut self.queues[rc.queue];
        q.stats.ready_checks_declined += 1;
        q.stats.ready_tickets_accepted += rc.tickets.iter().filter(|t| t.2).count() as u64;
        q.stats.ready_tickets_refused += rc.tickets.iter().filter(|t| !t.2).count() as u64;
        metrics::counter!(m::READY_CHECKS, "queue" => q.id.to_string(), "outcome" => "declined")
            .increment(1);
        let dissolved = self.state.dissolve_ready_check(&rc.slot, |t| {
            if t.id == *decliner {
                Release::End {
                    state: TicketState::Cancelled,
                    reason: "declined the match".into(),
                    wait_seconds: now - t.entered_at,
                }
            } else {
                Release::Requeue {
                    reason: "another player declined the match; back at the front of the queue"
                        .into(),
                    wait_seconds: now - t.entered_at,
                }
            }
        });
        if dissolved {
            for (slot, entry, _) in rc.tickets {
                if slot.id == *decliner {
                    self.finished.push_back((now, slot.id.clone()));
                } else {
                    self.requeue(rc.queue, slot, entry);
                }
            }
        }
    }

    /// Ready-checks past their deadline: tickets that accepted go back to the front of the
    /// queue, the others EXPIRE.
    fn expire_ready_checks(&mut self, now: f64) {
        let due: Vec<MatchId> = self
            .ready
            .iter()
            .filter(|(_, rc)| now >= rc.deadline)
            .map(|(id, _)| id.clone())
            .collect();
        for id in due {
            let Some(rc) = self.remove_ready(&id) else {
                continue;
            };
            let q = &mut self.queues[rc.queue];
            let label = q.id.to_string();
            let refused = rc.tickets.iter().filter(|t| !t.2).count() as u64;
            q.stats.ready_checks_timed_out += 1;
            q.stats.ready_tickets_accepted += rc.tickets.len() as u64 - refused;
            q.stats.ready_tickets_refused += refused;
            q.stats.tickets_expired += refused;
            metrics::counter!(m::READY_CHECKS, "queue" => label.clone(), "outcome" => "timed_out")
                .increment(1);
            metrics::counter!(m::TICKETS_EXPIRED, "queue" => label, "reason" => "ready_check")
                .increment(refused);
            let seconds = q.ready_check_seconds;
            let accepted: Vec<TicketId> = rc
                .tickets
                .iter()
                .filter(|t| t.2)
                .map(|t| t.0.id.clone())
                .collect();
            let dissolved = self.state.dissolve_ready_check(&rc.slot, |t| {
                if accepted.contains(&t.id) {
                    Release::Requeue {
                        reason: "another player did not accept the match in time; back at the front of the queue".into(),
                        wait_seconds: now - t.entered_at,
                    }
                } else {
                    Release::End {
                        state: TicketState::Expired,
                        reason: format!("did not accept the match within {seconds} s"),
                        wait_seconds: now - t.entered_at,
                    }
                }
            });
            if dissolved {
                for (slot, entry, ok) in rc.tickets {
                    if ok {
                        self.requeue(rc.queue, slot, entry);
                    } else {
                        self.finished.push_back((now, slot.id.clone()));
                    }
                }
            }
        }
    }

    /// Puts a ticket back in its pool with its original `entered_at`: the optimizer serves
    /// the oldest first, so this is the front of the queue.
    fn requeue(&mut self, qi: usize, slot: Arc<TicketSlot>, entry: matching::Ticket) {
        if slot.view().state != TicketState::Searching {
            return;
        }
        let id = entry.id.clone();
        if self.queues[qi].pool.insert(entry).is_ok() {
            self.waiting.insert(
                id,
                Waiting {
                    slot,
                    queue: qi,
                    last_published: f64::NEG_INFINITY,
                },
            );
        }
    }

    /// RequestBackfill: marks the leavers and opens their slots (merged into the match's open
    /// request, if any).
    fn open_backfill(
        &mut self,
        match_id: &MatchId,
        leavers: &[Vec<PlayerId>],
    ) -> Result<String, Rejection> {
        let slot = self.state.match_slot(match_id)?;
        let Some(&qi) = self.queue_index.get(&slot.queue) else {
            return Err(Rejection::for_match(match_id, MatchRefusal::QueueGone));
        };
        if self.queues[qi].team_size < 2 {
            return Err(Rejection::Unsupported {
                queue: slot.queue.to_string(),
                reason: "has teams of one player; backfill needs teams of two or more",
            });
        }
        let (_, open) = self.state.mark_left(&slot, leavers)?;
        self.state.persist_matches(std::slice::from_ref(&slot));
        let q = &mut self.queues[qi];
        let opened: u32 = open.iter().sum();
        q.stats.backfill_requests += 1;
        q.stats.backfill_slots_opened += u64::from(opened);
        metrics::counter!(m::BACKFILL_REQUESTS, "queue" => q.id.to_string()).increment(1);
        if let Some(job) = self.backfills.iter_mut().find(|j| j.slot.id == *match_id) {
            for (o, n) in job.open.iter_mut().zip(&open) {
                *o += n;
            }
            return Ok(job.id.clone());
        }
        let id = new_id("b");
        self.backfills.push(BackfillJob {
            id: id.clone(),
            slot,
            queue: qi,
            open,
            requested_at: self.clock.now(),
        });
        Ok(id)
    }

    /// Fills open slots of queue `qi`'s running matches from its pool, oldest request first,
    /// and sends each match's additions to its game server.
    fn run_backfills(&mut self, qi: usize, now: f64) {
        if self.backfills.is_empty() {
            return;
        }
        let Ok(queue) = self.state.queue("queue", self.queues[qi].id.as_str()) else {
            return;
        };
        let timeout = self.queues[qi].backfill.timeout_seconds;
        let mut jobs = std::mem::take(&mut self.backfills);
        jobs.retain_mut(|job| {
            if job.queue != qi {
                return true;
            }
            let Some((assignment, roster)) = self.state.running_roster(&job.slot) else {
                return false; // the match ended
            };
            if now - job.requested_at > timeout {
                self.queues[qi].stats.backfill_requests_expired += 1;
                return false;
            }
            if self.queues[qi].pool.is_empty() {
                return true;
            }
            let open = matching::OpenMatch {
                teams: roster
                    .iter()
                    .map(|team| {
                        team.iter()
                            .map(|p| {
                                let s = self.state.skill_for_matching(p, &queue);
                                (s.mean, s.deviation)
                            })
                            .collect()
                    })
                    .collect(),
                open: job.open.clone(),
                roles: roster
                    .iter()
                    .map(|team| self.state.roles_in(&job.slot, team))
                    .collect(),
                region: assignment.region.clone(),
            };
            let q = &mut self.queues[qi];
            let fills = q.pool.fill(now, &open, &SystemModel(&q.system));
            let mut additions: Vec<Vec<PlayerId>> = vec![Vec::new(); job.open.len()];
            let mut latest = None;
            let mut ended = false;
            for fill in fills {
                let Some(w) = self.waiting.remove(&fill.ticket.id) else {
                    continue;
                };
                if ended {
                    self.requeue(qi, w.slot, fill.ticket);
                    continue;
                }
                match self.state.add_backfill(
                    &job.slot,
                    fill.team,
                    &w.slot,
                    &fill.ticket.roles,
                    now,
                ) {
                    Ok(a) => {
                        let n = fill.ticket.players.len() as u32;
                        job.open[fill.team] = job.open[fill.team].saturating_sub(n);
                        additions[fill.team].extend(fill.ticket.players.iter().cloned());
                        let q = &mut self.queues[qi];
                        q.stats.backfill_slots_filled += u64::from(n);
                        push_recent(&mut q.recent_waits, now - w.slot.entered_at);
                        q.metrics.wait_seconds.record(now - w.slot.entered_at);
                        metrics::counter!(m::BACKFILL_SLOTS_FILLED, "queue" => q.id.to_string())
                            .increment(u64::from(n));
                        self.finished.push_back((now, w.slot.id.clone()));
                        latest = Some(a);
                    }
                    Err(BackfillError::NotRunning) => {
                        ended = true;
                        self.requeue(qi, w.slot, fill.ticket);
                    }
                    Err(BackfillError::TicketGone) => {}
                }
            }
            if let Some(a) = latest {
                self.deliver_backfill(&job.slot, &a, additions);
            }
            if ended {
                return false;
            }
            if job.open.iter().all(|&o| o == 0) {
                let seconds = now - job.requested_at;
                let q = &mut self.queues[qi];
                push_recent(&mut q.recent_fill_seconds, seconds);
                metrics::histogram!(m::BACKFILL_FILL_SECONDS, "queue" => q.id.to_string())
                    .record(seconds);
                return false;
            }
            true
        });
        jobs.append(&mut self.backfills);
        self.backfills = jobs;
    }

    /// Sends a running match's new players to its game server (the stream's buffer is bounded;
    /// the send waits for room in its own task) and records the match.
    fn deliver_backfill(&self, slot: &Arc<MatchSlot>, a: &Assignment, added: Vec<Vec<PlayerId>>) {
        self.state.persist_matches(std::slice::from_ref(slot));
        let update = Arc::new(Assignment {
            backfill: added,
            ..a.clone()
        });
        match self.state.server_stream(&a.server_address) {
            Some(tx) => {
                // Like a new match, the update goes out once the match's new roster is durable.
                let store = self.state.store().clone();
                self.runtime.spawn(async move {
                    if let Err(e) = store.flush_async().await {
                        tracing::error!(error = %e, "could not flush a backfilled match");
                        crate::telemetry::store_error("persist_matches");
                    }
                    let _ = tx.send(update).await;
                });
            }
            None => tracing::warn!(
                match_id = %a.match_id,
                server = %a.server_address,
                "backfill players added to a match whose game server is not connected"
            ),
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
                self.state
                    .ticket(id)
                    .map_or(TicketState::Cancelled, |t| t.view().state)
            }
        }
    }

    fn tick(&mut self) {
        let now = self.clock.now();
        self.expire_ready_checks(now);
        for qi in 0..self.queues.len() {
            let q = &mut self.queues[qi];
            if !due(q.last_run, q.tick_every, self.tick_seconds, now) {
                continue;
            }
            q.last_run = now;
            let started = Instant::now();
            let backfill_first = self.queues[qi].backfill.prefer_backfill;
            if backfill_first {
                self.run_backfills(qi, now);
            }
            let q = &mut self.queues[qi];
            let span = info_span!("tick", queue = %q.id, waiting = q.pool.len());
            let _enter = span.enter();
            let outcome = q.pool.tick(now, &SystemModel(&q.system));
            for expired in outcome.expired {
                if let Some(w) = self.waiting.remove(&expired.id) {
                    self.state.end_ticket(
                        &w.slot,
                        TicketState::Expired,
                        now,
                        "ticket ttl reached".into(),
                    );
                    self.finished.push_back((now, expired.id.clone()));
                    q.stats.tickets_expired += 1;
                    q.metrics.expired_ttl.increment(1);
                }
            }
            for formed in outcome.matches {
                let mut slots = Vec::new();
                let mut teams = Vec::with_capacity(formed.teams.len());
                for team in &formed.teams {
                    let mut players = Vec::new();
                    for t in team {
                        if let Some(w) = self.waiting.remove(&t.id) {
                            push_recent(&mut q.recent_waits, now - w.slot.entered_at);
                            q.metrics.wait_seconds.record(now - w.slot.entered_at);
                            slots.push(w.slot);
                        }
                        players.extend(t.players.iter().cloned());
                    }
                    teams.push(players);
                }
                let assignment = Assignment {
                    match_id: MatchId::new(new_id("m")),
                    queue: q.id.clone(),
                    teams,
                    win_probability: formed.win_probability.to_vec(),
                    region: formed.region.clone(),
                    server_address: String::new(),
                    parties: formed
                        .teams
                        .iter()
                        .flatten()
                        .filter(|t| t.players.len() > 1)
                        .map(|t| t.players.clone())
                        .collect(),
                    backfill: Vec::new(),
                    left: Vec::new(),
                };
                debug!(match_id = %assignment.match_id, quality = formed.quality, "match formed");
                let roles = if q.pool.config().roles.is_empty() {
                    std::collections::BTreeMap::new()
                } else {
                    formed
                        .teams
                        .iter()
                        .flatten()
                        .flat_map(|t| crate::state::roles_map(&t.players, &t.roles))
                        .collect()
                };
                let ready_check = (q.ready_check_seconds > 0.0).then_some(q.ready_check_seconds);
                let region = formed.region.clone();
                // Kept (moved, not copied) to put back in the queue if the match dissolves.
                let returnable: Vec<(usize, matching::Ticket)> = formed
                    .teams
                    .into_tickets()
                    .into_iter()
                    .map(|t| (qi, *t))
                    .collect();
                let slot = self.state.form_match(
                    &slots,
                    assignment,
                    formed.quality,
                    now,
                    ready_check,
                    roles,
                );
                q.stats.matches_formed += 1;
                push_recent(&mut q.recent_quality, formed.quality);
                q.metrics.formed.increment(1);
                q.metrics.quality.record(formed.quality);
                if let Some(seconds) = ready_check {
                    // Not offered to servers (nor persisted) until every ticket accepted.
                    q.stats.ready_checks += 1;
                    for t in &slots {
                        self.ready_by_ticket.insert(t.id.clone(), slot.id.clone());
                    }
                    let tickets = slots
                        .into_iter()
                        .zip(returnable)
                        .map(|(s, (_, t))| (s, t, false))
                        .collect();
                    self.ready.insert(
                        slot.id.clone(),
                        ReadyCheck {
                            slot,
                            queue: qi,
                            tickets,
                            deadline: now + seconds,
                        },
                    );
                    continue;
                }
                self.unallocated.push_back(Unallocated {
                    since_unix: slot.formed_unix,
                    region,
                    slot,
                    tickets: returnable,
                });
            }
            q.stats.tickets_waiting = q.pool.len() as u64;
            q.stats.wait_p50_seconds = crate::math::percentile(&q.recent_waits, 0.5);
            q.stats.wait_p95_seconds = crate::math::percentile(&q.recent_waits, 0.95);
            q.stats.quality_mean = if q.recent_quality.is_empty() {
                0.0
            } else {
                q.recent_quality.iter().sum::<f64>() / q.recent_quality.len() as f64
            };
            q.stats.backfill_fill_p50_seconds =
                crate::math::percentile(&q.recent_fill_seconds, 0.5);
            q.stats.backfill_fill_p95_seconds =
                crate::math::percentile(&q.recent_fill_seconds, 0.95);
            if !backfill_first {
                self.run_backfills(qi, now);
            }
            let q = &mut self.queues[qi];
            let elapsed = started.elapsed();
            q.stats.last_tick_ms = elapsed.as_secs_f64() * 1e3;
            q.metrics.tick_seconds.record(elapsed.as_secs_f64());
            q.metrics.waiting.set(q.pool.len() as f64);
        }
        // A match goes to sled when a game server takes it, in one batch per tick, and the
        // server gets it only once that batch is flushed: a server never holds a match a crash
        // could lose. Until then it is like a waiting ticket: no server can report it (under
        // auth), and a crash that loses it frees its players to queue again at once instead of
        // binding them to a match nobody runs until the allocation timeout. Graceful shutdown
        // still writes the unallocated ones ([`Loop::persist_unallocated`]).
        let (allocated, placements) = self.allocate(now);
        self.state.persist_matches(&allocated);
        self.state.deliver_when_durable(placements, &self.runtime);
        if now - self.last_stale_sweep >= STALE_SWEEP_SECONDS {
            self.last_stale_sweep = now;
            let timeout = self.state.config().server.match_timeout_seconds;
            let n = self
                .state
                .cancel_stale_matches(crate::state::unix_now(), timeout);
            if n > 0 {
                tracing::warn!(
                    matches = n,
                    "cancelled matches with no result after the match timeout"
                );
            }
        }
        self.publish_searching(now);
        self.forget_finished(now);
        let mut players_waiting = vec![0u64; self.queues.len()];
        for w in self.waiting.values() {
            players_waiting[w.queue] += w.slot.players.len() as u64;
        }
        for (q, n) in self.queues.iter_mut().zip(players_waiting) {
            q.stats.players_waiting = n;
        }
    }

    /// Offers waiting matches to servers; returns the ones allocated now (to be persisted).
    fn allocate(&mut self, now: f64) -> (Vec<Arc<MatchSlot>>, Vec<crate::state::Placement>) {
        let mut allocated = Vec::new();
        let mut placements = Vec::new();
        let timeout = self.state.config().server.allocation_timeout_seconds;
        let unix = crate::state::unix_now();
        let pending = self.unallocated.len();
        // Once a match finds no server with room, later matches of the same region (or any
        // match, if a region-less one failed: it could have gone anywhere) would fail too; don't
        // retry them all every tick while no server is serving. The queue is in `since_unix`
        // order, so once nothing can be placed, the first match still inside its timeout ends the
        // pass: every match behind it is younger. (Walking the whole backlog each tick, locking
        // each match, was the largest cost of a server taking tickets with no game server
        // connected.)
        let mut nowhere = false;
        let mut full_regions: Vec<Option<String>> = Vec::new();
        // Matches that stay, in their order; they go back in front of the ones not visited.
        let mut kept: VecDeque<Unallocated> = VecDeque::new();
        for _ in 0..pending {
            let Some(front) = self.unallocated.front() else {
                break;
            };
            if nowhere && unix - front.since_unix < timeout {
                break;
            }
            let Some(u) = self.unallocated.pop_front() else {
                break;
            };
            let region = u.region.clone();
            let hopeless = nowhere || full_regions.contains(&region);
            if !hopeless {
                match self.state.try_allocate(&u.slot) {
                    crate::state::Allocation::Placed(placement) => {
                        // Its tickets are finished from here: their retention counts from now,
                        // not from when the match formed, so a match that waits for a server
                        // longer than the retention still finds its tickets to requeue.
                        self.finish_tickets(&u.tickets, now);
                        allocated.push(u.slot);
                        placements.push(placement);
                        continue;
                    }
                    crate::state::Allocation::Ended => {
                        self.finish_tickets(&u.tickets, now);
                        continue;
                    }
                    crate::state::Allocation::NoServer => {}
                }
            }
            if !hopeless {
                match region {
                    None => nowhere = true,
                    r => full_regions.push(r),
                }
            }
            if unix - u.since_unix < timeout {
                kept.push_back(u);
                continue;
            }
            if !self.state.dissolve_unallocated(&u.slot, now) {
                // Ended meanwhile (a result or a cancel): its tickets are done.
                self.finish_tickets(&u.tickets, now);
                continue;
            }
            tracing::info!(match_id = %u.slot.id, "no game server took the match in time; tickets requeued");
            for (qi, ticket) in u.tickets {
                if let Ok(slot) = self.state.ticket(&ticket.id) {
                    self.requeue(qi, slot, ticket);
                }
            }
        }
        while let Some(u) = kept.pop_back() {
            self.unallocated.push_front(u);
        }
        metrics::gauge!(m::MATCHES_UNALLOCATED).set(self.unallocated.len() as f64);
        (allocated, placements)
    }

    /// SEARCHING updates for watched tickets; tickets nobody watched or named for the heartbeat
    /// time expire.
    fn publish_searching(&mut self, now: f64) {
        let heartbeat = self.state.config().server.ticket_heartbeat_seconds;
        let mut unattended = Vec::new();
        for (id, w) in &mut self.waiting {
            if heartbeat > 0.0 && w.slot.unattended_for(now) > heartbeat {
                unattended.push(id.clone());
                continue;
            }
            if !w.slot.watched() || now - w.last_published < SEARCHING_UPDATE_SECONDS {
                continue;
            }
            w.last_published = now;
            let window = self.queues[w.queue].pool.window(id, now);
            // A requeued ticket keeps saying why it is searching again.
            let reason = w.slot.view().reason;
            w.slot.publish(TicketView {
                window,
                ..TicketView::searching(now - w.slot.entered_at, reason)
            });
        }
        for id in unattended {
            let Some(w) = self.waiting.remove(&id) else {
                continue;
            };
            let q = &mut self.queues[w.queue];
            q.pool.remove(&id);
            q.stats.tickets_waiting = q.pool.len() as u64;
            q.stats.tickets_expired += 1;
            q.stats.tickets_expired_heartbeat += 1;
            metrics::counter!(m::TICKETS_EXPIRED, "queue" => q.id.to_string(), "reason" => "heartbeat")
                .increment(1);
            self.state.end_ticket(
                &w.slot,
                TicketState::Expired,
                now,
                format!(
                    "heartbeat: no WatchTicket stream or call named the ticket for {heartbeat} s"
                ),
            );
            self.finished.push_back((now, id));
        }
    }

    fn finish_tickets(&mut self, tickets: &[(usize, matching::Ticket)], now: f64) {
        self.finished
            .extend(tickets.iter().map(|(_, t)| (now, t.id.clone())));
    }

    fn forget_finished(&mut self, now: f64) {
        while let Some((at, _)) = self.finished.front() {
            if now - at < self.state.config().server.finished_ticket_retention_seconds {
                break;
            }
            let (_, id) = self.finished.pop_front().expect("front exists");
            self.state.forget_ticket(&id);
        }
    }
}

/// An id with a readable prefix: 48 bits of unix milliseconds then 80 random bits (ULID-like),
/// so ids never repeat across restarts and ids minted close in time sort close together. That
/// matters for sled: match ids are keys of the `matches` tree, and time-ordered keys land on the
/// same few pages where random ones rewrote a different page per match (the loadgen profile
/// showed formed-match writes as a quarter of the server's EnterQueue CPU).
/// Whether a queue that runs every `every` seconds and last ran at `last` runs in the loop tick
/// at `now`, the loop ticking every `loop_tick` seconds: within half a loop tick of its time,
/// so timer jitter never skips a whole loop tick.
fn due(last: f64, every: f64, loop_tick: f64, now: f64) -> bool {
    now - last >= every - loop_tick / 2.0
}

pub fn new_id(prefix: &str) -> String {
    let millis = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis()) as u64;
    let random = rand::random::<u128>() & ((1u128 << 80) - 1);
    // The 128 bits as 32 lowercase hex digits, written directly: `format!`'s padded hex
    // formatting was most of an id's cost, and every ticket and match mints one.
    let bits = (u128::from(millis & 0xffff_ffff_ffff) << 80) | random;
    let mut id = String::with_capacity(prefix.len() + 33);
    id.push_str(prefix);
    id.push('-');
    for shift in (0..32).rev() {
        let digit = ((bits >> (shift * 4)) & 0xf) as u32;
        id.push(char::from_digit(digit, 16).expect("a hex digit is below 16"));
    }
    id
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

    #[test]
    fn ids_are_unique_fixed_width_and_ordered_by_time() {
        let a = new_id("m");
        assert_eq!(a.len(), 2 + 32);
        assert!(a.starts_with("m-"));
        let ids: std::collections::HashSet<String> = (0..10_000).map(|_| new_id("t")).collect();
        assert_eq!(ids.len(), 10_000);
        // The first 12 hex digits are the millisecond clock: never decreasing.
        let earlier = new_id("m");
        let later = new_id("m");
        assert!(earlier[2..14] <= later[2..14], "{earlier} {later}");
        // Lowercase hex throughout, and the time part is the unix milliseconds of now.
        assert!(
            a[2..]
                .chars()
                .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c)),
            "{a}"
        );
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64;
        let minted = u64::from_str_radix(&later[2..14], 16).unwrap();
        assert!(
            minted <= now && now - minted < 60_000,
            "{later} minted at {now}"
        );
    }

    #[test]
    fn an_advanced_clock_moves_now_forward_and_clones_share_it() {
        let clock = Clock::start();
        let other = clock.clone();
        let before = clock.now();
        other.advance(30.0);
        assert!(clock.now() >= before + 30.0);
        other.advance(-5.0);
        assert!(clock.now() >= before + 30.0, "advance never goes back");
    }
}

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

use crate::ids::{MatchId, QueueId, TicketId};
use crate::matching::{self, Pool, WinModel};
use crate::rating::{Skill, SystemConfig};
use crate::state::{Assignment, MatchSlot, State, TicketSlot, TicketState, TicketView};
use crate::telemetry as m;

/// How long a finished ticket stays readable (WatchTicket/CancelTicket after the fact).
const FINISHED_TICKET_RETENTION: f64 = 600.0;
/// How often live matches are checked against the match timeout.
const STALE_SWEEP_SECONDS: f64 = 10.0;
/// Minimum spacing of SEARCHING updates to one watcher.
const SEARCHING_UPDATE_SECONDS: f64 = 1.0;

/// Monotonic seconds since the server started; follows tokio's clock, so tests can pause it.
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    start: tokio::time::Instant,
}

impl Clock {
    /// Starts the clock now.
    pub fn start() -> Self {
        Self {
            start: tokio::time::Instant::now(),
        }
    }

    /// Seconds since start.
    pub fn now(&self) -> f64 {
        self.start.elapsed().as_secs_f64()
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
}

/// Adapts a queue's rating system to the optimizer's win model.
struct SystemModel<'a>(&'a SystemConfig);

impl WinModel for SystemModel<'_> {
    /// Called for every candidate pair of a 1v1 tick: the Glicko family answers without
    /// allocating; other systems go through the general prediction.
    fn win_probability_1v1(&self, a: (f64, f64), b: (f64, f64)) -> f64 {
        let skill = |(mean, deviation): (f64, f64)| Skill {
            mean,
            deviation,
            volatility: 0.06,
        };
        match self.0 {
            SystemConfig::Glicko2(_) => {
                crate::rating::glicko2::expected_score(&skill(a), &skill(b))
            }
            SystemConfig::Glicko(_) => crate::rating::glicko::expected_score(&skill(a), &skill(b)),
            _ => self
                .win_probabilities(&[vec![a], vec![b]])
                .first()
                .copied()
                .unwrap_or(0.5),
        }
    }

    fn win_probabilities(&self, teams: &[Vec<(f64, f64)>]) -> Vec<f64> {
        let initial = self.0.initial();
        let skills: Vec<Vec<Skill>> = teams
            .iter()
            .map(|team| {
                team.iter()
                    .map(|&(mean, deviation)| Skill {
                        mean,
                        deviation,
                        volatility: initial.volatility,
                    })
                    .collect()
            })
            .collect();
        let refs: Vec<&[Skill]> = skills.iter().map(Vec::as_slice).collect();
        match self.0.predict(&refs) {
            Ok(p) => p.win_probability,
            // Unreachable for validated ratings; an even split keeps the optimizer going.
            Err(_) => vec![1.0 / teams.len().max(1) as f64; teams.len()],
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
}

const RECENT: usize = 1024;

fn push_recent(buf: &mut VecDeque<f64>, v: f64) {
    if buf.len() == RECENT {
        buf.pop_front();
    }
    buf.push_back(v);
}

fn percentile(values: &VecDeque<f64>, p: f64) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    let mut v: Vec<f64> = values.iter().copied().collect();
    v.sort_by(f64::total_cmp);
    v[((v.len() - 1) as f64 * p).round() as usize]
}

/// A formed match waiting for a game server, with its tickets so they can return to the queue.
struct Unallocated {
    slot: Arc<MatchSlot>,
    tickets: Vec<(usize, matching::Ticket)>,
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
    queues: Vec<QueueRuntime>,
    queue_index: HashMap<QueueId, usize>,
    waiting: HashMap<TicketId, Waiting>,
    unallocated: VecDeque<Unallocated>,
    finished: VecDeque<(f64, TicketId)>,
    last_stale_sweep: f64,
}

/// Creates the loop's channel; the returned future runs until `shutdown` is cancelled.
pub fn spawn(
    state: State,
    clock: Clock,
    shutdown: CancellationToken,
    restored: Vec<Arc<MatchSlot>>,
) -> (Handle, tokio::task::JoinHandle<()>) {
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
        })
        .collect();
    let queue_index = queues
        .iter()
        .enumerate()
        .map(|(i, q)| (q.id.clone(), i))
        .collect();
    let tick = Duration::from_millis(state.config().server.tick_interval_ms);
    let mut lp = Loop {
        state,
        clock,
        queues,
        queue_index,
        waiting: HashMap::new(),
        unallocated: restored
            .into_iter()
            .filter(|m| m.phase() == crate::state::MatchPhase::Formed)
            .map(|m| Unallocated {
                slot: m,
                tickets: Vec::new(),
            })
            .collect(),
        finished: VecDeque::new(),
        last_stale_sweep: f64::NEG_INFINITY,
    };
    let task = tokio::spawn(async move { lp.run(rx, tick, shutdown).await });
    (Handle { tx }, task)
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
        loop {
            tokio::select! {
                biased;
                () = shutdown.cancelled() => break,
                cmd = rx.recv() => match cmd {
                    Some(cmd) => self.handle(cmd),
                    None => break,
                },
                _ = interval.tick() => self.tick(),
            }
        }
        info!(waiting = self.waiting.len(), "matchmaker loop stopped");
    }

    fn handle(&mut self, cmd: Command) {
        match cmd {
            Command::Enter { ticket, entry } => {
                let Some(&qi) = self.queue_index.get(&ticket.queue) else {
                    return;
                };
                metrics::counter!(m::TICKETS_ENTERED, "queue" => ticket.queue.to_string())
                    .increment(1);
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
            None => self
                .state
                .ticket(id)
                .map_or(TicketState::Cancelled, |t| t.view().state),
        }
    }

    fn tick(&mut self) {
        let now = self.clock.now();
        let first_new = self.unallocated.len();
        for qi in 0..self.queues.len() {
            let started = Instant::now();
            let q = &mut self.queues[qi];
            let span = info_span!("tick", queue = %q.id, waiting = q.pool.len());
            let _enter = span.enter();
            let outcome = q.pool.tick(now, &SystemModel(&q.system));
            let queue_label = q.id.to_string();
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
                    metrics::counter!(m::TICKETS_EXPIRED, "queue" => queue_label.clone())
                        .increment(1);
                }
            }
            for formed in outcome.matches {
                let returnable: Vec<(usize, matching::Ticket)> = formed
                    .teams
                    .iter()
                    .flatten()
                    .map(|t| (qi, (**t).clone()))
                    .collect();
                let mut slots = Vec::new();
                let mut teams = Vec::with_capacity(formed.teams.len());
                for team in &formed.teams {
                    let mut players = Vec::new();
                    for t in team {
                        if let Some(w) = self.waiting.remove(&t.id) {
                            push_recent(&mut q.recent_waits, now - w.slot.entered_at);
                            metrics::histogram!(m::WAIT_SECONDS, "queue" => queue_label.clone())
                                .record(now - w.slot.entered_at);
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
                };
                debug!(match_id = %assignment.match_id, quality = formed.quality, "match formed");
                let slot = self
                    .state
                    .form_match(&slots, assignment, formed.quality, now);
                for t in &slots {
                    self.finished.push_back((now, t.id.clone()));
                }
                q.stats.matches_formed += 1;
                push_recent(&mut q.recent_quality, formed.quality);
                metrics::counter!(m::MATCHES_FORMED, "queue" => queue_label.clone()).increment(1);
                metrics::histogram!(m::MATCH_QUALITY, "queue" => queue_label.clone())
                    .record(formed.quality);
                self.unallocated.push_back(Unallocated {
                    slot,
                    tickets: returnable,
                });
            }
            q.stats.tickets_waiting = q.pool.len() as u64;
            q.stats.wait_p50_seconds = percentile(&q.recent_waits, 0.5);
            q.stats.wait_p95_seconds = percentile(&q.recent_waits, 0.95);
            q.stats.quality_mean = if q.recent_quality.is_empty() {
                0.0
            } else {
                q.recent_quality.iter().sum::<f64>() / q.recent_quality.len() as f64
            };
            let elapsed = started.elapsed();
            q.stats.last_tick_ms = elapsed.as_secs_f64() * 1e3;
            metrics::histogram!(m::TICK_SECONDS, "queue" => queue_label.clone())
                .record(elapsed.as_secs_f64());
            metrics::gauge!(m::TICKETS_WAITING, "queue" => queue_label).set(q.pool.len() as f64);
        }
        // New matches and new allocations go to sled in one batch, written after allocation so
        // a match formed and allocated in the same tick is written once, with its server.
        let mut changed: Vec<Arc<MatchSlot>> = self
            .unallocated
            .iter()
            .skip(first_new)
            .map(|u| u.slot.clone())
            .collect();
        let new_ids: std::collections::HashSet<MatchId> =
            changed.iter().map(|m| m.id.clone()).collect();
        changed.extend(
            self.allocate(now)
                .into_iter()
                .filter(|m| !new_ids.contains(&m.id)),
        );
        self.state.persist_matches(&changed);
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
    fn allocate(&mut self, now: f64) -> Vec<Arc<MatchSlot>> {
        let mut allocated = Vec::new();
        let timeout = self.state.config().server.allocation_timeout_seconds;
        let unix = crate::state::unix_now();
        let pending = self.unallocated.len();
        // Once a match finds no server with room, later matches of the same region (or any
        // match, if a region-less one failed: it could have gone anywhere) would fail too; don't
        // retry them all every tick while no server is serving.
        let mut nowhere = false;
        let mut full_regions: Vec<Option<String>> = Vec::new();
        for _ in 0..pending {
            let Some(u) = self.unallocated.pop_front() else {
                break;
            };
            let region = u.slot.assignment().region.clone();
            let hopeless = nowhere || full_regions.contains(&region);
            if !hopeless && self.state.try_allocate(&u.slot) {
                allocated.push(u.slot);
                continue;
            }
            if !hopeless {
                match region {
                    None => nowhere = true,
                    r => full_regions.push(r),
                }
            }
            if unix - u.slot.formed_unix < timeout {
                self.unallocated.push_back(u);
                continue;
            }
            if !self.state.dissolve_unallocated(&u.slot, now) {
                continue;
            }
            tracing::info!(match_id = %u.slot.id, "no game server took the match in time; tickets requeued");
            for (qi, ticket) in u.tickets {
                let Ok(slot) = self.state.ticket(&ticket.id) else {
                    continue;
                };
                if slot.view().state != TicketState::Searching {
                    continue;
                }
                let id = ticket.id.clone();
                // Same entered_at: the optimizer serves the oldest first, so this is the front.
                if self.queues[qi].pool.insert(ticket).is_ok() {
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
        }
        metrics::gauge!(m::MATCHES_UNALLOCATED).set(self.unallocated.len() as f64);
        allocated
    }

    fn publish_searching(&mut self, now: f64) {
        for (id, w) in &mut self.waiting {
            if !w.slot.watched() || now - w.last_published < SEARCHING_UPDATE_SECONDS {
                continue;
            }
            w.last_published = now;
            let window = self.queues[w.queue].pool.window(id, now);
            // A requeued ticket keeps saying why it is searching again.
            let reason = w.slot.view().reason;
            w.slot.publish(TicketView {
                state: TicketState::Searching,
                wait_seconds: now - w.slot.entered_at,
                window,
                assignment: None,
                reason,
            });
        }
    }

    fn forget_finished(&mut self, now: f64) {
        while let Some((at, _)) = self.finished.front() {
            if now - at < FINISHED_TICKET_RETENTION {
                break;
            }
            let (_, id) = self.finished.pop_front().expect("front exists");
            self.state.forget_ticket(&id);
        }
    }
}

/// A random id with a readable prefix: 128 bits, so ids never repeat across restarts.
pub fn new_id(prefix: &str) -> String {
    format!("{prefix}-{:032x}", rand::random::<u128>())
}

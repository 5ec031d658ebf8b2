//! The operator console: a small web page served at `http://METRICS_ADDR/console/` on the same
//! listener as `/metrics`, with its assets (`assets/`: plain HTML, CSS and JavaScript, no
//! build step, no library) compiled into the binary, and a JSON API under `/console/api/`.
//!
//! Every number the page shows and every action it takes is a call of the server's own gRPC
//! stack, made in process: the console sends a framed gRPC request carrying the page's
//! `authorization` header to the server's layered service (RPC metrics, deadline, load
//! shedding, auth, rate limit, message size, then `ClientService`/`AdminService`). So a soft reset from the page
//! is the admin CLI's `SeasonReset`, with the same role check, the same metrics and the same
//! journal entry. A match's page and a player's matches and rating chart are the durable match
//! records (`GetMatch`, `ListPlayerMatches`), a player's ban is `GetPlayerBan`. What no RPC
//! answers yet the console reads itself, behind the same admin check (`auth::CONSOLE_API`): the
//! last hour of each queue's numbers (`history`, sampled from the matchmaker loop's
//! `GetQueueStats` numbers), the live matches in the state and the results applied since start
//! (`feed`, from the ledger's applied-results channel: the recent list).
//!
//! On a cluster node the console is attached to the node's front instead
//! ([`Console::attach_front`]): its calls reach the queues' owner like any client's (the live
//! matches by `ListLiveMatches`), and what only a server's state answers is left out.
//!
//! `http.rs` is the listener (metrics, health, assets); `api.rs` the JSON endpoints of queues,
//! leaderboards and seasons, `records.rs` those of matches and players, one thin handler each.
//! Docs: `docs/console.md`.

mod api;
pub mod feed;
pub mod history;
mod http;
mod records;

use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tonic::codegen::http as h;
use tracing::{info, warn};

use crate::auth::Verifier;
use crate::config::Config;
use crate::ledger::{AppliedResult, Ledger};
use crate::matchmaker::{Command, Handle};
use crate::state::{QueueInfo, State};

pub use crate::config::ConsoleConfig;
pub use http::serve;

/// The seconds of history the charts cover.
pub const HISTORY_SECONDS: f64 = 3600.0;

/// Results kept for the Matches and Players views.
pub const FEED_CAPACITY: usize = 10_000;

/// The server's whole gRPC stack as one service: what the console's calls go to.
pub type GrpcService = tower::util::BoxCloneSyncService<
    h::Request<tonic::body::Body>,
    h::Response<tonic::body::Body>,
    tower::BoxError,
>;

/// What the console reads once the server is up.
#[derive(Clone)]
struct Backend {
    grpc: GrpcService,
    host: Host,
}

/// Where the console runs.
#[derive(Clone)]
enum Host {
    /// A server: `grpc` is its own layered stack, and its state answers what no RPC does. (A
    /// cluster node's engine has no metrics listener, so no console of its own.)
    Server(State),
    /// A cluster node: `grpc` is the node's front, and the node has no state, only its config
    /// (queues, ladder tiers). The results applied since start are not shown there.
    ClusterNode(Arc<Config>),
}

impl Backend {
    /// The server's state; `None` on a cluster node.
    fn state(&self) -> Option<&State> {
        match &self.host {
            Host::Server(state) => Some(state),
            Host::ClusterNode(_) => None,
        }
    }

    /// The queues: the state's (config reloads included), or a cluster node's from its file.
    fn queues(&self) -> Vec<Arc<QueueInfo>> {
        match &self.host {
            Host::Server(state) => state.queues(),
            Host::ClusterNode(config) => config
                .queues
                .iter()
                .map(|(name, q)| {
                    Arc::new(QueueInfo {
                        id: crate::ids::QueueId::new(name.as_str()),
                        pool: q.rating_pool.clone().unwrap_or_else(|| name.clone()),
                        config: q.clone(),
                    })
                })
                .collect(),
        }
    }

    /// The running config.
    fn config(&self) -> &Config {
        match &self.host {
            Host::Server(state) => state.config(),
            Host::ClusterNode(config) => config,
        }
    }
}

/// The console: shared by the HTTP handlers, the sampler and the results listener.
pub struct Console {
    config: ConsoleConfig,
    verifier: Option<Arc<Verifier>>,
    auth_enabled: bool,
    /// Set by [`Console::attach`], taken back by [`Console::detach`] so the services (and the
    /// journal's committer they hold) can stop.
    backend: RwLock<Option<Backend>>,
    history: Mutex<history::History>,
    /// When the console was made: chart samples are taken on the monotonic clock from there
    /// (see [`Console::clock`]).
    started: tokio::time::Instant,
    feed: Mutex<feed::Feed>,
}

impl Console {
    /// The console on the metrics listener `addr` (`None`: no listener), or `None` when it is
    /// off: disabled, or auth is off and the listener is not on loopback (anyone who reaches it
    /// could reset a season) unless `auth.allow_insecure` says that is intended.
    pub fn new(
        config: &ConsoleConfig,
        addr: Option<std::net::SocketAddr>,
        auth: &crate::auth::AuthConfig,
        verifier: Option<Arc<Verifier>>,
    ) -> Option<Arc<Self>> {
        let addr = addr?;
        if !config.enabled {
            return None;
        }
        if !auth.enabled && !addr.ip().is_loopback() && !auth.allow_insecure {
            warn!(
                %addr,
                "console not served: server.metrics_addr is not a loopback address and auth is off \
                 (enable [auth], or set auth.allow_insecure = true)"
            );
            return None;
        }
        Some(Arc::new(Self {
            config: config.clone(),
            verifier,
            auth_enabled: auth.enabled,
            backend: RwLock::new(None),
            history: Mutex::new(history::History::new(
                HISTORY_SECONDS,
                config.sample_seconds,
            )),
            started: tokio::time::Instant::now(),
            feed: Mutex::new(feed::Feed::new(FEED_CAPACITY)),
        }))
    }

    /// Connects the console to the running server and starts sampling queues and listening for
    /// results; both tasks end on `shutdown`. Until this is called the API answers 503.
    pub fn attach(
        self: &Arc<Self>,
        grpc: GrpcService,
        state: State,
        matchmaker: Handle,
        ledger: &Ledger,
        shutdown: CancellationToken,
    ) -> Vec<JoinHandle<()>> {
        let results = ledger.subscribe();
        *self.backend.write().unwrap_or_else(|p| p.into_inner()) = Some(Backend {
            grpc,
            host: Host::Server(state.clone()),
        });
        info!("console serving /console/");
        vec![
            tokio::spawn(self.clone().sample(matchmaker, shutdown.clone())),
            tokio::spawn(self.clone().listen(state, results, shutdown)),
        ]
    }

    /// Connects the console of a cluster node to the node's front (`grpc`): every call goes to
    /// the queues' owner, wherever it runs. There is no matchmaker loop or ledger here, so queue
    /// samples are taken when a page asks for the queues (at most one per `sample_seconds`)
    /// and there is no feed of applied results.
    pub fn attach_front(&self, grpc: GrpcService, config: Arc<Config>) {
        *self.backend.write().unwrap_or_else(|p| p.into_inner()) = Some(Backend {
            grpc,
            host: Host::ClusterNode(config),
        });
        info!("console serving /console/ through this node's front");
    }

    /// Lets go of the server's services: calls from then on answer 503.
    pub fn detach(&self) {
        self.backend
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .take();
    }

    fn backend(&self) -> Option<Backend> {
        self.backend
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Seconds since the console was made, on the monotonic clock chart samples are ordered
    /// and rated on (a step of the wall clock does not move it).
    fn clock(&self) -> f64 {
        self.started.elapsed().as_secs_f64()
    }

    fn history(&self) -> MutexGuard<'_, history::History> {
        self.history.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn feed(&self) -> MutexGuard<'_, feed::Feed> {
        self.feed.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records every queue's numbers every `sample_seconds`, the first at once.
    async fn sample(self: Arc<Self>, matchmaker: Handle, shutdown: CancellationToken) {
        let mut every = tokio::time::interval(Duration::from_secs_f64(self.config.sample_seconds));
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = every.tick() => {}
                () = shutdown.cancelled() => return,
            }
            let Ok(stats) = matchmaker.ask(|reply| Command::Stats { reply }).await else {
                return;
            };
            let (at, now) = (self.clock(), crate::state::unix_now());
            let mut history = self.history();
            for s in &stats {
                history.record(
                    &s.queue,
                    at,
                    now,
                    &history::Reading {
                        tickets_waiting: s.tickets_waiting,
                        matches_formed: s.matches_formed,
                        wait_p50_seconds: s.wait_p50_seconds,
                        wait_p95_seconds: s.wait_p95_seconds,
                        quality_mean: s.quality_mean,
                        skill_window: s.skill_window,
                        starving: s.starving,
                        accept_rate: s.accept_rate(),
                        backfill_fill_p50_seconds: s.backfill_fill_p50_seconds,
                    },
                );
            }
        }
    }

    /// Keeps the newest applied results in the feed, and erases erased players from it.
    async fn listen(
        self: Arc<Self>,
        state: State,
        mut results: tokio::sync::broadcast::Receiver<Arc<AppliedResult>>,
        shutdown: CancellationToken,
    ) {
        use tokio::sync::broadcast::error::RecvError;
        let mut erasures = state.subscribe_erasures();
        let mut recent = feed::RecentErasures::new(RECENT_ERASURES);
        loop {
            let applied = tokio::select! {
                r = results.recv() => r,
                erased = erasures.recv() => {
                    match erased {
                        Ok((player, marker)) => {
                            self.feed().erase(player.as_str(), marker.as_str());
                            recent.push(std::time::Instant::now(), player, marker);
                        }
                        // Missed erasures cannot be redone: forget every kept result.
                        Err(RecvError::Lagged(_)) => self.feed().clear(),
                        Err(RecvError::Closed) => return,
                    }
                    continue;
                }
                () = shutdown.cancelled() => return,
            };
            match applied {
                Ok(applied) => {
                    let mut entry = feed_entry(&state, &applied);
                    recent.erase_from(std::time::Instant::now(), &mut entry);
                    self.feed().push(entry);
                }
                Err(RecvError::Lagged(n)) => {
                    warn!(skipped = n, "console fell behind the results; skipped some");
                }
                Err(RecvError::Closed) => return,
            }
        }
    }
}

/// How long an erasure is applied to results announced after it.
const RECENT_ERASURES: std::time::Duration = std::time::Duration::from_secs(10);

/// An applied result as the console shows it: ratings in the queue system's display units.
fn feed_entry(state: &State, applied: &AppliedResult) -> feed::Entry {
    let slot = &applied.slot;
    let assignment = slot.assignment();
    let queue = state.queue_of(&slot.queue);
    let display = |s: &crate::rating::Skill| {
        queue
            .as_ref()
            .map_or(s.mean, |q| q.config.rating.display(s).display)
    };
    feed::Entry {
        match_id: slot.id.to_string(),
        queue: slot.queue.to_string(),
        applied_unix: applied.applied_unix,
        formed_unix: slot.formed_unix,
        teams: assignment
            .teams
            .iter()
            .map(|t| t.iter().map(ToString::to_string).collect())
            .collect(),
        win_probability: assignment.win_probability.clone(),
        placements: applied.placements.clone(),
        changes: applied
            .ack
            .changes
            .iter()
            .map(|c| feed::Change {
                player_id: c.player_id.to_string(),
                rating_before: display(&c.before),
                rating_after: display(&c.after),
                rank_points_before: c.rank_points_before,
                rank_points_after: c.rank_points_after,
            })
            .collect(),
    }
}

//! Wires the process together: store → state → matchmaker loop → gRPC services, health,
//! reflection, metrics; and takes it apart again on one shutdown signal.
//!
//! Shutdown order: the token is cancelled → the listener stops accepting and streams end → the
//! matchmaker loop stops → player records are written → the store is flushed last.

use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tonic::codegen::http;
use tonic::server::NamedService;
use tonic::transport::Server;
use tonic_health::ServingStatus;
use tonic_health::server::HealthReporter;
use tower::ServiceBuilder;
use tower::limit::GlobalConcurrencyLimitLayer;
use tracing::{info, warn};

use crate::api;
use crate::api::layers::{
    AnswerErrorsLayer, AuthLayer, DeadlineLayer, MessageSizeLayer, OpenPathsBypass, RateLimitLayer,
};
use crate::api::rpc_metrics::RpcMetricsLayer;
use crate::auth::Verifier;
use crate::config::Config;
use crate::ledger::Ledger;
use crate::limits::RateLimiter;
use crate::listener;
use crate::matchmaker::{self, Clock};
use crate::proto;
use crate::state::State;
use crate::store::{Committer, Store, StoreError};

/// A failure that stops the server.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("cannot bind {addr}: {source}")]
    Bind {
        addr: String,
        source: std::io::Error,
    },
    #[error("grpc server: {0}")]
    Transport(#[from] tonic::transport::Error),
    #[error("reflection: {0}")]
    Reflection(#[from] tonic_reflection::server::Error),
    #[error("metrics endpoint: {0}")]
    Metrics(String),
    #[error("config: {0}")]
    Auth(#[from] crate::rejection::FieldError),
    #[error("tls: cannot read {path}: {source}")]
    Tls {
        path: String,
        source: std::io::Error,
    },
    #[error("loading the state failed: {0}")]
    Load(String),
    #[error("cannot start the matchmaker loop thread: {0}")]
    LoopThread(std::io::Error),
}

/// What the server needs before it binds a port: the token verifier (key files read and
/// parsed once) and the open store. A bad key or data dir fails here, before anything listens.
struct Prepared {
    config: Config,
    verifier: Option<Arc<Verifier>>,
    store: Store,
}

impl Prepared {
    async fn new(config: Config) -> Result<Self, ServerError> {
        let verifier = verifier(&config.auth).await?;
        let store = crate::store::open(&config.server.data_dir, &config.store)?;
        Ok(Self {
            config,
            verifier,
            store,
        })
    }
}

/// The token verifier `[auth]` asks for, with its key set fetched once (a failed fetch names
/// `auth.jwks_url`); `None` with auth off.
pub(crate) async fn verifier(
    auth: &crate::auth::AuthConfig,
) -> Result<Option<Arc<Verifier>>, ServerError> {
    let verifier = Verifier::from_config(auth)?.map(Arc::new);
    if let Some(v) = &verifier {
        v.refresh().await.map_err(|e| {
            ServerError::Auth(crate::rejection::FieldError::new(
                "auth.jwks_url",
                e.to_string(),
            ))
        })?;
    }
    Ok(verifier)
}

/// Binds the configured address and serves until `shutdown` is cancelled.
pub async fn bind_and_run(config: Config, shutdown: CancellationToken) -> Result<(), ServerError> {
    let prepared = Prepared::new(config).await?;
    let listener = TcpListener::bind(&prepared.config.server.addr)
        .await
        .map_err(|source| ServerError::Bind {
            addr: prepared.config.server.addr.clone(),
            source,
        })?;
    serve(
        prepared,
        Front::Listener(listener),
        shutdown,
        Clock::start(),
        Engine::default(),
    )
    .await
}

/// Serves on an already-bound listener (tests bind 127.0.0.1:0 themselves).
pub async fn run(
    config: Config,
    listener: TcpListener,
    shutdown: CancellationToken,
) -> Result<(), ServerError> {
    run_with_clock(config, listener, shutdown, Clock::start()).await
}

/// [`run`] on a given matchmaker clock: tests keep a clone and [`Clock::advance`] it to reach
/// ready-check and heartbeat deadlines without sleeping.
pub async fn run_with_clock(
    config: Config,
    listener: TcpListener,
    shutdown: CancellationToken,
    clock: Clock,
) -> Result<(), ServerError> {
    serve(
        Prepared::new(config).await?,
        Front::Listener(listener),
        shutdown,
        clock,
        Engine::default(),
    )
    .await
}

/// Runs the whole server on `store` as a cluster node's engine while `ownership` holds: the
/// node's front forwards every call to `listener`. Stored waiting tickets are put back in their
/// queues first. Tokens are checked with the node's `verifier` (its keys read when the node
/// started and refreshed by it). Ends when `shutdown` is cancelled (the lease was lost, or the
/// node stops).
pub async fn run_engine(
    config: Config,
    verifier: Option<Arc<Verifier>>,
    store: Store,
    ownership: Arc<crate::state::Ownership>,
    publish: Publish,
    shutdown: CancellationToken,
) -> Result<(), ServerError> {
    let prepared = Prepared {
        config,
        verifier,
        store,
    };
    let engine = Engine {
        ownership: Some(ownership),
    };
    serve(
        prepared,
        Front::InProcess(publish),
        shutdown,
        Clock::start(),
        engine,
    )
    .await
}

/// Receives the engine's service once its state is loaded.
pub type Publish = Box<dyn FnOnce(EngineService) + Send>;

/// A running engine's whole gRPC stack (the layers and every service), called in process by
/// its node's front: no second HTTP/2 hop on the owner.
#[derive(Clone)]
pub struct EngineService(
    tower::util::BoxCloneSyncService<
        http::Request<tonic::body::Body>,
        http::Response<tonic::body::Body>,
        tower::BoxError,
    >,
);

impl std::fmt::Debug for EngineService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("EngineService")
    }
}

impl EngineService {
    /// The engine's whole stack, as one service.
    pub fn new(service: crate::console::GrpcService) -> Self {
        Self(service)
    }

    /// Serves one call, in its per-RPC span as the listener would.
    pub async fn call(
        &self,
        request: http::Request<tonic::body::Body>,
    ) -> Result<http::Response<tonic::body::Body>, tower::BoxError> {
        use tower::ServiceExt;
        use tracing::Instrument;
        let (parts, body) = request.into_parts();
        let bodyless = http::Request::from_parts(parts, ());
        let span = crate::telemetry::tracing::rpc_span(&bodyless);
        let (parts, ()) = bodyless.into_parts();
        self.0
            .clone()
            .oneshot(http::Request::from_parts(parts, body))
            .instrument(span)
            .await
    }
}

/// Where calls come from: a listener, or a cluster node's front in process.
enum Front {
    Listener(TcpListener),
    InProcess(Publish),
}

/// What differs when the server runs as a cluster node's engine.
#[derive(Default)]
struct Engine {
    /// The queues' lease: the optimizer runs only while it holds.
    ownership: Option<Arc<crate::state::Ownership>>,
}

/// The health service name a liveness probe asks about: SERVING unless the store failed (a
/// restart is the fix then). The readiness probe asks about the server as a whole (`""`), which
/// also goes NOT_SERVING while the server drains.
pub const LIVENESS: &str = "liveness";

/// How often events older than `[events] retention_seconds` are dropped.
const EVENT_TRIM_INTERVAL: Duration = Duration::from_secs(60);

/// How often acknowledgements older than `[results] ack_retention_seconds` are dropped.
const ACK_TRIM_INTERVAL: Duration = Duration::from_secs(60);

async fn serve(
    prepared: Prepared,
    front: Front,
    signal: CancellationToken,
    clock: Clock,
    engine: Engine,
) -> Result<(), ServerError> {
    let Prepared {
        config,
        verifier,
        store,
    } = prepared;
    for warning in config.warnings() {
        warn!("{warning}");
    }
    let config = Arc::new(config);
    // `signal` asks the server to stop; `shutdown` stops it, after the drain time during which
    // health says NOT_SERVING (so load balancers and orchestrators route elsewhere) while every
    // call is still served.
    let shutdown = CancellationToken::new();
    let console = crate::console::Console::new(
        &config.console,
        config.metrics_addr(),
        &config.auth,
        verifier.clone(),
    );
    let exporter = match config.metrics_addr() {
        Some(addr) => install_metrics(addr, console.clone(), shutdown.clone())?,
        None => None,
    };
    let is_engine = engine.ownership.is_some();
    // A cluster engine's `signal` is its node's: cancelled when the engine stops.
    let engine_stop = is_engine.then(|| signal.clone());
    // Loading a large state takes seconds of CPU: on a thread of its own, so the runtime keeps
    // serving meanwhile (on a cluster node: its lease renewals, which would otherwise lapse
    // while a new owner loads, and pass the queues on again).
    let loading = {
        let (config, store, ownership) = (config.clone(), store.clone(), engine.ownership);
        let clock = clock.clone();
        tokio::task::spawn_blocking(move || -> Result<_, ServerError> {
            let state = State::load(config, store)?;
            if let Some(ownership) = ownership {
                state.set_ownership(ownership);
            }
            let recovered = state.recover(clock.now())?;
            state.rebuild_rank_indexes();
            Ok((state, recovered))
        })
    };
    let (state, (replayed, restored, last_seq)) = loading
        .await
        .map_err(|e| ServerError::Load(e.to_string()))??;
    crate::telemetry::engine_gauge(crate::telemetry::STORE_BYTES, state.shard())
        .set(state.store_bytes() as f64);
    info!(
        players = state.player_count(),
        journal_replayed = replayed,
        live_matches = restored.len(),
        store = %store.location(),
        "state loaded"
    );
    let (committer, committer_task) =
        Committer::spawn(store.clone(), last_seq, config.store.journal_buffer);
    let committer_failed = committer.failed();
    let committer_stopped = committer.stopped();
    if is_engine {
        // A cluster engine whose store failed stops, so the node gives the lease up and the
        // queues restart from what Redis holds (on a single node, health says restart).
        // `signal` is the node's own token for this engine: cancelled, it tells the node at
        // once (which then sends calls elsewhere and gives the lease up) rather than when the
        // engine has wound down.
        // The store itself may give up too (writes that kept failing while no result came).
        let (failed, stop, asked) = (committer_failed.clone(), shutdown.clone(), signal.clone());
        let journal = committer_stopped.clone();
        let gave_up = store.failure();
        tokio::spawn(async move {
            let gave_up = async {
                match gave_up {
                    Some(token) => token.cancelled_owned().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = failed.cancelled() => {}
                () = gave_up => {}
                () = stop.cancelled() => return,
            }
            if journal.was_fenced() {
                warn!("another node holds the queues' lease: the engine stops");
            } else {
                warn!("the store failed: the engine stops so the queues restart from Redis");
            }
            asked.cancel();
            stop.cancel();
        });
    }
    let ledger = Ledger::new(state.clone(), committer);
    // A cluster engine's keys are its node's, which refreshes them for as long as it runs.
    let key_refresh = verifier.clone().filter(|_| !is_engine).map(|v| {
        tokio::spawn(v.refresh_periodically(
            Duration::from_secs(config.auth.jwks_refresh_seconds),
            shutdown.clone(),
        ))
    });
    let snapshots = tokio::spawn(ledger.clone().snapshot_periodically(
        Duration::from_secs(config.store.snapshot_interval_seconds),
        shutdown.clone(),
    ));
    let ack_trims = tokio::spawn(
        ledger
            .clone()
            .trim_acks_periodically(ACK_TRIM_INTERVAL, shutdown.clone()),
    );
    // Periodic Glicko pools: ended rating periods are closed within a quarter period (at
    // most a minute) of their end.
    let shortest_period = config
        .queues
        .values()
        .filter(|q| q.rating.is_periodic())
        .map(|q| q.rating.rating_period_seconds())
        .reduce(f64::min);
    let period_closer = shortest_period.map(|seconds| {
        tokio::spawn(ledger.clone().close_periods_periodically(
            Duration::from_secs_f64((seconds / 4.0).clamp(0.1, 60.0)),
            shutdown.clone(),
        ))
    });
    let (handle, loop_task) =
        matchmaker::spawn(state.clone(), clock.clone(), shutdown.clone(), restored)
            .map_err(ServerError::LoopThread)?;
    let tickets = state.restore_tickets(clock.now())?;
    let tickets = state.claim_restored(tickets, clock.now()).await?;
    let now = clock.clone();
    state.spawn_shard_tasks(move || now.now(), &shutdown);
    for (ticket, entry) in tickets {
        let Ok(permit) = handle.reserve(Duration::from_secs(5)).await else {
            warn!("the matchmaker loop stopped while tickets were restored");
            break;
        };
        permit.send(matchmaker::Command::Enter { ticket, entry });
    }

    let (health, health_service) = tonic_health::server::health_reporter();
    set_ready(&health, ServingStatus::Serving).await;
    health
        .set_service_status(LIVENESS, ServingStatus::Serving)
        .await;
    let health_task = tokio::spawn(watch_health(
        health,
        signal,
        shutdown.clone(),
        committer_failed.clone(),
        Duration::from_millis(config.server.drain_ms),
    ));
    let reflection_v1 = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(proto::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1()?;
    let reflection_v1alpha = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(proto::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1alpha()?;

    let client = api::Client {
        state: state.clone(),
        matchmaker: handle.clone(),
        clock: clock.clone(),
        shutdown: shutdown.clone(),
        load: api::QueueLoad::default(),
    };
    let game_server = api::GameServer {
        state: state.clone(),
        ledger: ledger.clone(),
        matchmaker: handle.clone(),
    };
    let reloader = crate::reload::Reloader::new((*config).clone(), handle.clone(), store.clone());
    let sighup = tokio::spawn(reloader.clone().on_sighup(shutdown.clone()));
    // The event writer outlives the matchmaker loop (stopped after it), so the loop's last
    // events are written too.
    let events_stop = CancellationToken::new();
    let events_task = tokio::spawn(state.clone().write_events(
        crate::state::Kept {
            retention: Duration::from_secs(config.events.retention_seconds),
            max: config.events.max_events,
        },
        crate::state::Kept {
            retention: Duration::from_secs(config.audit.retention_seconds),
            max: config.audit.max_entries,
        },
        EVENT_TRIM_INTERVAL,
        events_stop.clone(),
    ));
    let console_matchmaker = handle.clone();
    let admin = api::Admin {
        state: state.clone(),
        matchmaker: handle,
        ledger: ledger.clone(),
        shutdown: shutdown.clone(),
        reloader,
    };
    let parties = api::Parties {
        state: state.clone(),
        clock,
    };

    let max_message = config.server.max_message_bytes;
    // Auth inside the limit: a flood of bad tokens is shed like any other overload, and a refused
    // request holds its slot only while it is answered. With auth off there is no auth layer at
    // all (not one that passes everything through at the cost of a boxed future per call).
    // The rate limit comes after auth: its key is the verified identity, so a caller cannot pick
    // its bucket with a forged header, and a refusal holds its slot only for one map lookup. It
    // also caps each caller's calls in flight, so one caller cannot hold the server-wide limit.
    // When no rate or in-flight limit can apply (the default without auth) there is no rate layer
    // either. Message size wraps the body of what passes, and bounds how long it takes to arrive.
    let limits = ServiceBuilder::new()
        .option_layer(cors(&config.server.grpc_web_origins))
        .option_layer(config.server.grpc_web.then(tonic_web::GrpcWebLayer::new))
        .layer(RpcMetricsLayer::default())
        .layer(AnswerErrorsLayer)
        .layer(DeadlineLayer::new(
            Duration::from_millis(config.server.request_timeout_ms),
            Duration::from_millis(config.server.admin_request_timeout_ms),
        ))
        .layer(OpenPathsBypass::new(
            ServiceBuilder::new().map_err(count_shed).load_shed().layer(
                GlobalConcurrencyLimitLayer::new(config.server.max_concurrent_requests),
            ),
        ))
        .option_layer(verifier.clone().map(|v| AuthLayer::new(Some(v))))
        .option_layer(
            RateLimiter::from_config(&config.rate_limit, config.auth.enabled, state.shard())
                .map(|limiter| match &engine_stop {
                    // Its node zeroes the engine's gauges when the engine stops.
                    Some(stop) => limiter.for_engine(stop.clone()),
                    None => limiter,
                })
                .map(RateLimitLayer::new),
        )
        .layer(MessageSizeLayer::new(
            max_message,
            (config.server.request_body_timeout_ms > 0)
                .then(|| Duration::from_millis(config.server.request_body_timeout_ms)),
        ))
        .into_inner();
    let routes = tonic::service::Routes::new(health_service)
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha)
        .add_service(
            proto::client_service_server::ClientServiceServer::new(client)
                .max_decoding_message_size(max_message),
        )
        .add_service(
            proto::game_server_service_server::GameServerServiceServer::new(game_server)
                .max_decoding_message_size(max_message),
        )
        .add_service(tower::Layer::layer(
            &api::audit::AuditLayer::new(store.clone(), committer_stopped),
            proto::admin_service_server::AdminServiceServer::new(admin)
                .max_decoding_message_size(max_message),
        ))
        .add_service(
            proto::party_service_server::PartyServiceServer::new(parties)
                .max_decoding_message_size(max_message),
        );
    // The console calls the same stack in process: every layer, every service.
    let console_tasks = match &console {
        Some(console) => console.attach(
            in_process(tower::Layer::layer(&limits, routes.clone())),
            state.clone(),
            console_matchmaker,
            &ledger,
            shutdown.clone(),
        ),
        None => Vec::new(),
    };
    let grace = Duration::from_millis(config.server.shutdown_grace_ms);
    let served = match front {
        Front::InProcess(publish) => {
            publish(EngineService::new(in_process(tower::Layer::layer(
                &limits, routes,
            ))));
            info!("engine serving its node's front");
            // When the node starts stopping, its front waits for its connections to end:
            // the streams, which never end on their own, end first (marked as no longer the
            // owner's, so other nodes move theirs on), and the engine answers its last calls.
            tokio::select! {
                () = shutdown.cancelled() => {}
                () = state.node_stopping() => {
                    state.close_server_streams();
                    shutdown.cancelled().await;
                }
            }
            state.close_server_streams();
            Ok(())
        }
        Front::Listener(listener) => {
            let local = listener.local_addr().map_err(|source| ServerError::Bind {
                addr: config.server.addr.clone(),
                source,
            })?;
            info!(addr = %local, "serving gRPC");
            let open_files = std::fs::read_to_string("/proc/self/limits")
                .ok()
                .and_then(|l| listener::open_file_limit(&l));
            let max_connections =
                listener::effective_max_connections(config.server.max_connections, open_files);
            if let Some(warning) = listener::descriptor_shortfall(max_connections, open_files) {
                warn!("{warning}");
            }
            info!(max_connections, open_files, "connection limit");
            let mut builder = Server::builder();
            if config.tls.enabled {
                builder = builder.tls_config(tls_config(&config.tls)?)?;
                info!("TLS on");
            }
            let per_connection = config.server.max_concurrent_requests_per_connection;
            let serve = builder
                // grpc-web clients may speak HTTP/1.1.
                .accept_http1(config.server.grpc_web)
                .http2_keepalive_interval(
                    (config.server.http2_keepalive_interval_ms > 0)
                        .then(|| Duration::from_millis(config.server.http2_keepalive_interval_ms)),
                )
                .http2_keepalive_timeout(Some(Duration::from_millis(
                    config.server.http2_keepalive_timeout_ms,
                )))
                .concurrency_limit_per_connection(per_connection)
                // Announced to clients as SETTINGS_MAX_CONCURRENT_STREAMS, so calls beyond the
                // limit wait in the client, not in server memory (tonic's default, None, lifts
                // even hyper's 200).
                .max_concurrent_streams(u32::try_from(per_connection).unwrap_or(u32::MAX))
                .trace_fn(crate::telemetry::tracing::rpc_span)
                .layer(limits)
                .add_routes(routes)
                .serve_with_incoming_shutdown(listener::incoming(listener, max_connections), {
                    let shutdown = shutdown.clone();
                    let state = state.clone();
                    async move {
                        shutdown.cancelled().await;
                        // Server streams end when their senders go; watcher tasks watch the token.
                        state.close_server_streams();
                    }
                });
            let mut serve = Box::pin(serve);
            let served = tokio::select! {
                r = &mut serve => r,
                () = async { shutdown.cancelled().await; tokio::time::sleep(grace).await } => {
                    warn!(grace_ms = grace.as_millis() as u64, "connections still open after the grace time; closing them");
                    Ok(())
                }
            };
            // Dropping the server drops the services.
            shutdown.cancel();
            drop(serve);
            served
        }
    };
    // Whatever ended serving, everything else stops too.
    shutdown.cancel();
    if let Some(console) = &console {
        // The console holds the services, and they the journal's committer.
        console.detach();
    }
    for task in console_tasks {
        let _ = task.await;
    }
    match tokio::time::timeout(grace, loop_task).await {
        Ok(Ok(())) => {}
        Ok(Err(_)) => warn!("matchmaker loop thread ended without stopping cleanly (panicked)"),
        Err(_) => warn!("matchmaker loop did not stop within the grace time"),
    }
    events_stop.cancel();
    let _ = events_task.await;
    let _ = sighup.await;
    // The services (and their committer handles) are gone with the server future; the last
    // handle is ours. Dropping it lets the committer finish what it has and stop.
    let _ = snapshots.await;
    let _ = ack_trims.await;
    if let Some(closer) = period_closer {
        let _ = closer.await;
    }
    let final_snapshot = ledger.snapshot().await;
    drop(ledger);
    if tokio::time::timeout(grace, committer_task).await.is_err() {
        warn!("result journal did not stop within the grace time");
    }
    if let Some(exporter) = exporter {
        let _ = exporter.await;
    }
    let _ = health_task.await;
    if let Some(task) = key_refresh {
        let _ = task.await;
    }
    let persisted = final_snapshot?;
    store.flush()?;
    info!(players = persisted, "state flushed; stopped");
    served.map_err(ServerError::from)
}

/// What the health service reports for the server as a whole and for each service.
async fn set_ready(health: &HealthReporter, status: ServingStatus) {
    health.set_service_status("", status).await;
    health
        .set_service_status(
            <proto::client_service_server::ClientServiceServer<api::Client> as NamedService>::NAME,
            status,
        )
        .await;
    health
        .set_service_status(
            <proto::game_server_service_server::GameServerServiceServer<api::GameServer> as NamedService>::NAME,
            status,
        )
        .await;
    health
        .set_service_status(
            <proto::admin_service_server::AdminServiceServer<api::Admin> as NamedService>::NAME,
            status,
        )
        .await;
    health
        .set_service_status(
            <proto::party_service_server::PartyServiceServer<api::Parties> as NamedService>::NAME,
            status,
        )
        .await;
}

/// Keeps health true to the server's state until it stops: on `signal`, NOT_SERVING, then
/// `drain` later the server stops (`shutdown`); when the result journal fails, NOT_SERVING for
/// readiness and liveness alike, because only a restart recovers it.
async fn watch_health(
    health: HealthReporter,
    signal: CancellationToken,
    shutdown: CancellationToken,
    store_failed: CancellationToken,
    drain: Duration,
) {
    tokio::select! {
        () = store_failed.cancelled() => {
            set_ready(&health, ServingStatus::NotServing).await;
            health.set_service_status(LIVENESS, ServingStatus::NotServing).await;
            tracing::error!("the result journal failed: health is NOT_SERVING; restart the server");
        }
        () = signal.cancelled() => {}
        () = shutdown.cancelled() => return,
    }
    tokio::select! {
        () = signal.cancelled() => {}
        () = shutdown.cancelled() => return,
    }
    set_ready(&health, ServingStatus::NotServing).await;
    if !drain.is_zero() {
        info!(
            drain_ms = drain.as_millis() as u64,
            "draining: health is NOT_SERVING, calls are still served"
        );
        tokio::select! {
            () = tokio::time::sleep(drain) => {}
            () = shutdown.cancelled() => {}
        }
    }
    shutdown.cancel();
}

/// CORS for grpc-web calls from browser pages on `origins` (`*` = any); `None` for none.
pub(crate) fn cors(origins: &[String]) -> Option<tower_http::cors::CorsLayer> {
    use tower_http::cors::{AllowOrigin, CorsLayer};
    if origins.is_empty() {
        return None;
    }
    let allow = if origins.iter().any(|o| o == "*") {
        AllowOrigin::any()
    } else {
        AllowOrigin::list(origins.iter().filter_map(|o| o.parse().ok()))
    };
    Some(
        CorsLayer::new()
            .allow_origin(allow)
            // Named: the Fetch standard does not count `authorization` under `*`.
            .allow_headers([
                http::header::CONTENT_TYPE,
                http::header::AUTHORIZATION,
                http::HeaderName::from_static("x-grpc-web"),
                http::HeaderName::from_static("x-user-agent"),
                http::HeaderName::from_static("grpc-timeout"),
                http::HeaderName::from_static("traceparent"),
            ])
            .allow_methods([http::Method::POST, http::Method::OPTIONS])
            .expose_headers([
                http::HeaderName::from_static("grpc-status"),
                http::HeaderName::from_static("grpc-message"),
                http::HeaderName::from_static("grpc-status-details-bin"),
            ]),
    )
}

/// How often the process metrics (memory, CPU, descriptors) are read.
const PROCESS_METRICS_EVERY: Duration = Duration::from_secs(5);

/// Counts the calls `load_shed` refused (the error passes on unchanged: tonic answers it
/// RESOURCE_EXHAUSTED). On the error path only, so a served call pays nothing.
fn count_shed(e: tower::BoxError) -> tower::BoxError {
    if e.is::<tower::load_shed::error::Overloaded>() {
        metrics::counter!(crate::telemetry::REQUESTS_SHED).increment(1);
    }
    e
}

/// The rustls identity from the configured PEM files (validated to exist at load).
pub(crate) fn tls_config(
    tls: &crate::config::TlsConfig,
) -> Result<tonic::transport::ServerTlsConfig, ServerError> {
    let identity =
        tonic::transport::Identity::from_pem(read_pem(&tls.cert_file)?, read_pem(&tls.key_file)?);
    // A client that starts a handshake and never ends it frees its connection slot then.
    Ok(tonic::transport::ServerTlsConfig::new()
        .identity(identity)
        .timeout(crate::listener::OPENING_TIMEOUT))
}

/// A PEM file of the TLS settings; the error names it.
pub(crate) fn read_pem(path: &std::path::Path) -> Result<Vec<u8>, ServerError> {
    std::fs::read(path).map_err(|source| ServerError::Tls {
        path: path.display().to_string(),
        source,
    })
}

/// The server's layered services as one service called in process (a cluster node's front,
/// the console).
fn in_process<S, B>(service: S) -> crate::console::GrpcService
where
    S: tower::Service<http::Request<tonic::body::Body>, Response = http::Response<B>>
        + Clone
        + Send
        + Sync
        + 'static,
    S::Error: Into<tower::BoxError>,
    S::Future: Send + 'static,
    B: http_body::Body<Data = bytes::Bytes> + Send + 'static,
    B::Error: Into<tower::BoxError>,
{
    let service = ServiceBuilder::new()
        .map_response(|r: http::Response<B>| r.map(tonic::body::Body::new))
        .map_err(Into::<tower::BoxError>::into)
        .service(service);
    tower::util::BoxCloneSyncService::new(service)
}

/// Installs the global Prometheus recorder and serves the metrics listener (`/metrics`, and
/// the operator console when `console` is given) until `shutdown`; returns the listener's task.
/// A second server in the same process (tests) keeps the first recorder: it serves no second
/// endpoint, unless it has a console to serve.
pub(crate) fn install_metrics(
    addr: std::net::SocketAddr,
    console: Option<std::sync::Arc<crate::console::Console>>,
    shutdown: CancellationToken,
) -> Result<Option<tokio::task::JoinHandle<()>>, ServerError> {
    let mut builder = metrics_exporter_prometheus::PrometheusBuilder::new();
    for (name, buckets) in crate::telemetry::HISTOGRAM_BUCKETS {
        builder = builder
            .set_buckets_for_metric(
                metrics_exporter_prometheus::Matcher::Full((*name).to_string()),
                buckets,
            )
            .map_err(|e| ServerError::Metrics(e.to_string()))?;
    }
    let recorder = builder.build_recorder();
    let handle = recorder.handle();
    let handle = if metrics::set_global_recorder(recorder).is_err() {
        if console.is_none() {
            warn!("a metrics recorder is already installed in this process; not serving {addr}");
            return Ok(None);
        }
        warn!(
            "a metrics recorder is already installed in this process; {addr} serves the console only"
        );
        None
    } else {
        crate::telemetry::describe();
        metrics::gauge!(
            crate::telemetry::BUILD_INFO,
            "version" => env!("CARGO_PKG_VERSION"),
            "git_sha" => env!("MATCHMAKER_GIT_SHA")
        )
        .set(1.0);
        Some(handle)
    };
    let listener = std::net::TcpListener::bind(addr)
        .and_then(|l| l.set_nonblocking(true).map(|()| l))
        .and_then(tokio::net::TcpListener::from_std)
        .map_err(|source| ServerError::Bind {
            addr: addr.to_string(),
            source,
        })?;
    // The address bound, which port 0 leaves to the system to choose.
    let addr = listener.local_addr().unwrap_or(addr);
    let process = metrics_process::Collector::default();
    process.describe();
    let upkeep = handle.clone();
    let with_console = console.is_some();
    let task = tokio::spawn(async move {
        let served = crate::console::serve(listener, handle, console, shutdown.clone());
        let mut served = std::pin::pin!(served);
        let mut every = tokio::time::interval(PROCESS_METRICS_EVERY);
        loop {
            tokio::select! {
                result = &mut served => {
                    if let Err(e) = result {
                        warn!(error = ?e, "metrics endpoint stopped");
                    }
                    return;
                }
                () = shutdown.cancelled() => {
                    // Open connections get a moment to finish their request, not longer.
                    let _ = tokio::time::timeout(Duration::from_secs(2), &mut served).await;
                    return;
                }
                _ = every.tick() => {
                    process.collect();
                    // Drains histogram buckets (the exporter's own listener did this itself).
                    if let Some(h) = &upkeep {
                        h.run_upkeep();
                    }
                }
            }
        }
    });
    info!(addr = %addr, console = with_console, "serving Prometheus metrics on /metrics");
    Ok(Some(task))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic_health::pb::health_server::Health;
    use tonic_health::pb::{HealthCheckRequest, health_check_response};
    use tonic_health::server::HealthService;

    async fn status(health: &HealthService, service: &str) -> health_check_response::ServingStatus {
        let answer = health
            .check(tonic::Request::new(HealthCheckRequest {
                service: service.into(),
            }))
            .await
            .unwrap()
            .into_inner();
        answer.status()
    }

    async fn serving() -> (HealthReporter, HealthService) {
        let (reporter, _) = tonic_health::server::health_reporter();
        set_ready(&reporter, ServingStatus::Serving).await;
        reporter
            .set_service_status(LIVENESS, ServingStatus::Serving)
            .await;
        let service = HealthService::from_health_reporter(reporter.clone());
        (reporter, service)
    }

    #[tokio::test]
    async fn draining_is_not_ready_but_alive_and_ends_in_shutdown() {
        use health_check_response::ServingStatus as S;
        let (reporter, health) = serving().await;
        let (signal, shutdown, failed) = (
            CancellationToken::new(),
            CancellationToken::new(),
            CancellationToken::new(),
        );
        let task = tokio::spawn(watch_health(
            reporter,
            signal.clone(),
            shutdown.clone(),
            failed,
            Duration::from_secs(3600),
        ));
        assert_eq!(status(&health, "").await, S::Serving);
        signal.cancel();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while status(&health, "").await != S::NotServing {
            assert!(tokio::time::Instant::now() < deadline, "never NOT_SERVING");
            tokio::task::yield_now().await;
        }
        let client =
            <proto::client_service_server::ClientServiceServer<api::Client> as NamedService>::NAME;
        assert_eq!(status(&health, client).await, S::NotServing);
        assert_eq!(
            status(&health, LIVENESS).await,
            S::Serving,
            "draining is alive"
        );
        assert!(
            !shutdown.is_cancelled(),
            "calls are served during the drain"
        );
        // Stopping for another reason ends the drain early; the watcher ends with it.
        shutdown.cancel();
        task.await.unwrap();
    }

    #[tokio::test]
    async fn the_drain_ends_in_shutdown() {
        let (reporter, _health) = serving().await;
        let (signal, shutdown) = (CancellationToken::new(), CancellationToken::new());
        signal.cancel();
        watch_health(
            reporter,
            signal,
            shutdown.clone(),
            CancellationToken::new(),
            Duration::from_millis(10),
        )
        .await;
        assert!(shutdown.is_cancelled());
    }

    #[tokio::test]
    async fn a_failed_journal_is_neither_ready_nor_alive() {
        use health_check_response::ServingStatus as S;
        let (reporter, health) = serving().await;
        let (signal, shutdown, failed) = (
            CancellationToken::new(),
            CancellationToken::new(),
            CancellationToken::new(),
        );
        let task = tokio::spawn(watch_health(
            reporter,
            signal.clone(),
            shutdown.clone(),
            failed.clone(),
            Duration::ZERO,
        ));
        failed.cancel();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while status(&health, LIVENESS).await != S::NotServing {
            assert!(
                tokio::time::Instant::now() < deadline,
                "liveness never failed"
            );
            tokio::task::yield_now().await;
        }
        assert_eq!(status(&health, "").await, S::NotServing);
        assert!(
            !shutdown.is_cancelled(),
            "the server keeps answering until it is stopped"
        );
        signal.cancel();
        task.await.unwrap();
        assert!(shutdown.is_cancelled());
    }
}

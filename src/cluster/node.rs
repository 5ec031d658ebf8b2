//! One cluster node: the front on the configured address, the lease task, the engine while
//! this node owns the queues, and the metrics listener with the operator console, whose calls
//! go through the front like any client's.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tonic::codegen::http;
use tonic::transport::Server;
use tonic_health::ServingStatus;
use tonic_health::server::HealthReporter;
use tracing::{error, info, warn};

use super::front::{Front, Route, Waits};
use super::lease::{self, Acquired, LeaseClient, Owner};
use crate::config::Config;
use crate::server::{self, ServerError};
use crate::state::Ownership;
use crate::store::{Followed, Patience, RedisOptions, RedisStore, Standby, Storage, Store, redact};
use crate::telemetry as m;

/// Why a node could not start.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error(transparent)]
    Server(#[from] ServerError),
    #[error("cluster.redis_url {url}: {detail}")]
    Redis { url: String, detail: String },
}

/// Runs a cluster node until `signal` is cancelled (then: health NOT_SERVING for
/// `server.drain_ms`, the front stops, the engine, if any, stops and writes its last state, and
/// the lease is given up so another node takes the queues at once).
pub async fn run_node(config: Config, signal: CancellationToken) -> Result<(), NodeError> {
    let cluster = config.cluster.clone();
    let url = redact(&cluster.redis_url);
    let redis_error = |detail: String| NodeError::Redis {
        url: url.clone(),
        detail,
    };
    let tls = cluster
        .redis_tls()
        .map_err(|e| redis_error(e.to_string()))?;
    let durability = crate::store::check_durability(
        &cluster.redis_url,
        tls.as_ref(),
        &cluster.keys(),
        cluster.wait_replicas,
        cluster.allow_volatile,
    )
    .await
    .map_err(|e| redis_error(e.to_string()))?;
    info!(redis = %url, durability = ?durability, "cluster store checked");
    let lease_time = Duration::from_millis(cluster.lease_ms);
    let patience = Patience::for_lease(lease_time);
    let conn = crate::store::RedisConn::connect(&cluster.redis_url, tls.as_ref(), patience)
        .await
        .map_err(|e| redis_error(e.to_string()))?;
    let listener = TcpListener::bind(&config.server.addr)
        .await
        .map_err(|source| ServerError::Bind {
            addr: config.server.addr.clone(),
            source,
        })?;
    let bound = listener.local_addr().map_err(|source| ServerError::Bind {
        addr: config.server.addr.clone(),
        source,
    })?;
    let node_id = if cluster.node_id.is_empty() {
        default_node_id()
    } else {
        cluster.node_id.clone()
    };
    let advertise = if cluster.advertise_addr.is_empty() {
        bound.to_string()
    } else {
        cluster.advertise_addr.clone()
    };
    info!(addr = %bound, node = %node_id, advertise = %advertise, keyspace = %cluster.keyspace, lease_ms = cluster.lease_ms, "serving gRPC");

    // Everything that can fail is checked before the lease task starts: a node that cannot
    // serve must not take the queues.
    let peer = peer_tls(&config)?;
    let mut builder = Server::builder();
    if config.tls.enabled {
        builder = builder
            .tls_config(server::tls_config(&config.tls)?)
            .map_err(ServerError::from)?;
    }
    let shutdown = CancellationToken::new();
    // The token keys are read once, here, and kept fresh for the node's life: a takeover must
    // not depend on the identity provider answering at that moment.
    let verifier = server::verifier(&config.auth).await?;
    let key_refresh = verifier.clone().map(|v| {
        tokio::spawn(v.refresh_periodically(
            Duration::from_secs(config.auth.jwks_refresh_seconds),
            shutdown.clone(),
        ))
    });
    let console = node_console(&config, verifier.clone());
    let exporter = match config.metrics_addr() {
        Some(addr) => server::install_metrics(addr, console.clone(), shutdown.clone())?,
        None => None,
    };
    let (route_tx, route_rx) = watch::channel(Route::default());
    let (health, health_service) = tonic_health::server::health_reporter();
    if cluster.standby {
        standby_status(&health, Warmth::Cold).await;
    } else {
        // No copy to wait for: the node is as ready for a takeover as it will ever be, and a
        // startup probe on `standby` passes.
        health
            .set_service_status(STANDBY, ServingStatus::Serving)
            .await;
    }
    let node = Arc::new(Node {
        stopping: shutdown.clone(),
        asked: signal.clone(),
        verifier,
        config: Arc::new(config),
        node_id: node_id.clone(),
        advertise,
        lease: LeaseClient::new(conn, lease_time, cluster.keys()),
        lease_time,
        redis_tls: tls,
        route: route_tx,
        standby: cluster
            .standby
            .then(|| Arc::new(tokio::sync::Mutex::new(None))),
        health: health.clone(),
        warm: AtomicBool::new(false),
    });
    let node_key = node
        .lease
        .node_key(&fresh_node_key())
        .await
        .map_err(|e| redis_error(e.to_string()))
        .and_then(|key| {
            http::HeaderValue::from_str(&key).map_err(|_| {
                redis_error(format!(
                    "{} holds no valid node key; delete it and start the nodes again",
                    node.lease.keys().node_key()
                ))
            })
        })?;
    let lease_stop = CancellationToken::new();
    let lease_task = tokio::spawn(node.clone().hold_lease(lease_stop.clone()));
    let standby_task = tokio::spawn(node.clone().keep_standby(lease_stop.clone()));

    health
        .set_service_status(server::LIVENESS, ServingStatus::Serving)
        .await;
    let health_task = tokio::spawn(report_health(
        health,
        route_rx.clone(),
        signal.clone(),
        shutdown.clone(),
        Duration::from_millis(node.config.server.drain_ms),
    ));
    let config = &node.config;
    let front = Front::new(
        node_id,
        route_rx,
        Waits {
            for_owner: lease_time * 2 + Duration::from_secs(1),
            for_answer: Duration::from_millis(config.server.request_timeout_ms),
            for_long_answer: Duration::from_millis(config.server.admin_request_timeout_ms),
            max_in_flight: config.server.max_concurrent_requests,
        },
        config.server.max_message_bytes,
        shutdown.clone(),
        peer,
        node_key,
    );
    if let Some(console) = &console {
        console.attach_front(console_service(front.clone()), node.config.clone());
    }
    let routes = tonic::service::Routes::from(axum::Router::new().fallback_service(front))
        .add_service(health_service);
    let open_files = std::fs::read_to_string("/proc/self/limits")
        .ok()
        .and_then(|l| crate::listener::open_file_limit(&l));
    let max_connections =
        crate::listener::effective_max_connections(config.server.max_connections, open_files);
    let serve = builder
        .accept_http1(config.server.grpc_web)
        .http2_keepalive_interval(
            (config.server.http2_keepalive_interval_ms > 0)
                .then(|| Duration::from_millis(config.server.http2_keepalive_interval_ms)),
        )
        .http2_keepalive_timeout(Some(Duration::from_millis(
            config.server.http2_keepalive_timeout_ms,
        )))
        .max_concurrent_streams(
            u32::try_from(config.server.max_concurrent_requests_per_connection).unwrap_or(u32::MAX),
        )
        .layer(
            tower::ServiceBuilder::new()
                .option_layer(server::cors(&config.server.grpc_web_origins))
                .option_layer(config.server.grpc_web.then(tonic_web::GrpcWebLayer::new)),
        )
        .add_routes(routes)
        .serve_with_incoming_shutdown(
            crate::listener::incoming(listener, max_connections),
            shutdown.clone().cancelled_owned(),
        );
    // A connection whose client reads nothing (a stream's flow-control window full) would keep
    // the graceful shutdown waiting, and the node holding the lease with its listener closed:
    // past the grace time the remaining connections are dropped.
    let grace = Duration::from_millis(config.server.shutdown_grace_ms);
    let mut serve = std::pin::pin!(serve);
    let served = tokio::select! {
        r = &mut serve => r,
        () = async { shutdown.cancelled().await; tokio::time::sleep(grace).await } => {
            warn!(grace_ms = grace.as_millis() as u64, "connections still open after the grace time; closing them");
            Ok(())
        }
    };
    // The front is closed: stop the engine (it writes its last state under the lease), then
    // give the lease up.
    shutdown.cancel();
    if let Some(console) = &console {
        console.detach();
    }
    lease_stop.cancel();
    match lease_task.await {
        Ok(()) => {}
        Err(e) => error!(error = %e, "the lease task failed"),
    }
    let _ = standby_task.await;
    let _ = health_task.await;
    if let Some(exporter) = exporter {
        let _ = exporter.await;
    }
    if let Some(task) = key_refresh {
        let _ = task.await;
    }
    info!("cluster node stopped");
    served.map_err(|e| NodeError::Server(e.into()))
}

/// TLS to the other nodes when the nodes serve it: their certificates are checked against
/// `cluster.peer_ca_file` (by default the node's own certificate, for nodes sharing one).
fn peer_tls(config: &Config) -> Result<Option<super::front::PeerTls>, NodeError> {
    if !config.tls.enabled {
        return Ok(None);
    }
    let cluster = &config.cluster;
    let path = if cluster.peer_ca_file.as_os_str().is_empty() {
        &config.tls.cert_file
    } else {
        &cluster.peer_ca_file
    };
    let ca_pem = server::read_pem(path)?;
    Ok(Some(super::front::PeerTls {
        ca_pem,
        server_name: cluster.peer_server_name.clone(),
    }))
}

/// The operator console on the node's metrics listener, when it is served there, checking
/// tokens with the node's verifier. Its calls go through the node's front, see
/// [`console_service`].
fn node_console(
    config: &Config,
    verifier: Option<Arc<crate::auth::Verifier>>,
) -> Option<Arc<crate::console::Console>> {
    let addr = config.metrics_addr();
    if addr.is_none() || !config.console.enabled {
        return None;
    }
    crate::console::Console::new(&config.console, addr, &config.auth, verifier)
}

/// The node's front as the console's gRPC service: the console's in-process calls take the
/// path every client call to this node takes, to the queues' owner wherever it runs.
fn console_service(front: Front) -> crate::console::GrpcService {
    let service = tower::ServiceBuilder::new()
        .map_request(|r: tonic::codegen::http::Request<tonic::body::Body>| {
            r.map(axum::body::Body::new)
        })
        .map_err(|never: std::convert::Infallible| -> tower::BoxError { match never {} })
        .service(front);
    tower::util::BoxCloneSyncService::new(service)
}

/// A new node key: 32 random bytes (rand's thread generator, a CSPRNG seeded by the operating
/// system), in hex.
fn fresh_node_key() -> String {
    rand::random::<[u8; 32]>()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The host name plus a random suffix: unique even for two nodes on one host.
fn default_node_id() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().replace(['|', ' '], "-"))
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "node".into());
    format!("{host}-{:04x}", rand::random::<u16>())
}

struct Node {
    /// Cancelled when the node starts stopping (its front closes).
    stopping: CancellationToken,
    /// The token verifier every engine of this node uses (its keys fetched once, at start).
    verifier: Option<Arc<crate::auth::Verifier>>,
    /// Cancelled when the node is asked to stop (before its drain): from then on it takes no
    /// lease and keeps no standby copy listed, so the queues go to a node that stays.
    asked: CancellationToken,
    config: Arc<Config>,
    node_id: String,
    advertise: String,
    lease: LeaseClient,
    lease_time: Duration,
    /// What the store's connection to a `rediss://` Redis trusts and presents.
    redis_tls: Option<crate::store::RedisTls>,
    route: watch::Sender<Route>,
    /// The standby copy of the state (`cluster.standby`), while another node owns the queues.
    standby: Option<Arc<tokio::sync::Mutex<Option<Standby>>>>,
    /// The node's health service: `standby` tells whether it holds a current copy.
    health: HealthReporter,
    /// Whether it holds a current standby copy now.
    warm: AtomicBool,
}

/// The engine while this node owns the queues.
struct Running {
    owner: Owner,
    ownership: Arc<Ownership>,
    stop: CancellationToken,
    task: JoinHandle<()>,
    /// The engine's store, once opened: it stops writing when the lease is lost.
    store: Arc<std::sync::OnceLock<Arc<RedisStore>>>,
}

impl Node {
    /// Takes the lease when it is free and renews it while held; starts the engine on taking it
    /// and stops it on losing it. On `stop`, stops the engine (renewing meanwhile, so its last
    /// writes are accepted), then releases the lease.
    async fn hold_lease(self: Arc<Self>, stop: CancellationToken) {
        let every = lease::renew_every(self.lease_time);
        let mut ticker = tokio::time::interval(every);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut running: Option<Running> = None;
        // Whether this node, without a standby copy, saw the lease free at its last look.
        let mut seen_free = false;
        loop {
            tokio::select! {
                () = stop.cancelled() => break,
                _ = ticker.tick() => {}
            }
            running = match running.take() {
                None if self.asked.is_cancelled() => None,
                // The engine stopped on its own (its store failed) and winds down: it serves
                // nothing from now, and the lease goes, rather than after its wind-down.
                Some(r) if r.stop.is_cancelled() => {
                    self.engine_stopped(&r, every).await;
                    None
                }
                Some(r) => self.renew(r, every).await,
                None if self.defers() && !seen_free => match self.free_lease(every).await {
                    // Nobody holds a copy: no node is faster to take over.
                    Some(0) => self.try_acquire(every).await,
                    Some(warm) => {
                        info!(
                            warm,
                            "the lease is free; a node with a standby copy may take it first"
                        );
                        seen_free = true;
                        None
                    }
                    None => None,
                },
                None => {
                    seen_free = false;
                    self.try_acquire(every).await
                }
            };
        }
        let Some(mut r) = running else {
            return;
        };
        r.stop.cancel();
        // The front is closed: nothing calls the engine any more, and the services it holds
        // keep the result journal open, which the engine waits for as it stops.
        self.route.send_modify(|route| route.engine = None);
        loop {
            tokio::select! {
                _ = &mut r.task => break,
                _ = ticker.tick() => {
                    let Some(renewed) = self.renew(r, every).await else {
                        return;
                    };
                    r = renewed;
                }
            }
        }
        match self.lease.release(&r.owner).await {
            Ok(true) => info!(token = r.owner.token, "lease released"),
            Ok(false) => warn!("the lease had already passed to another node"),
            Err(e) => warn!(error = %e, "could not release the lease; it expires on its own"),
        }
        metrics::gauge!(m::CLUSTER_QUEUES_OWNED).set(0.0);
    }

    /// Whether this node lets others take a free lease first: it keeps standby copies but holds
    /// none now (it started less than a lease ago, or its copy fell out of step), so a node
    /// holding one takes over faster. When some node says it holds one
    /// ([`LeaseClient::mark_warm`]), it takes the lease only if it still finds it free at its
    /// next try, a quarter lease later: by then every node with a copy has tried.
    fn defers(&self) -> bool {
        self.standby.is_some() && !self.warm.load(Ordering::Relaxed)
    }

    /// Looks at the lease without taking it (see [`Node::defers`]): when it is free, how many
    /// nodes hold a current copy; `None` when it is held or paused, or Redis did not answer.
    async fn free_lease(&self, within: Duration) -> Option<u64> {
        let sent = Instant::now();
        let peeked = tokio::time::timeout(within, self.lease.peek()).await;
        record_round_trip(sent);
        match peeked {
            Ok(Ok((owner, warm, paused))) => {
                let free = owner.is_none() && !paused;
                self.seen_owner(owner).await;
                free.then_some(warm)
            }
            Ok(Err(e)) => lease_request_failed(Some(&e)),
            Err(_) => lease_request_failed(None),
        }
    }

    /// Records whether this node holds a current standby copy, here and in Redis (for the
    /// others' [`Node::defers`]): warm nodes say so again every quarter lease, since each
    /// entry lapses after a lease.
    async fn set_warm(&self, warm: bool, said: &mut Option<Instant>) {
        let was = self.warm.swap(warm, Ordering::Relaxed);
        let due = said.is_none_or(|at| at.elapsed() >= lease::renew_every(self.lease_time));
        if warm && (!was || due) {
            match self.lease.mark_warm(&self.node_id).await {
                Ok(()) => *said = Some(Instant::now()),
                Err(e) => warn!(error = %e, "cannot record the standby copy in Redis"),
            }
        } else if !warm && (was || said.is_some()) {
            *said = None;
            if let Err(e) = self.lease.mark_cold(&self.node_id).await {
                warn!(error = %e, "cannot record in Redis that the standby copy is gone");
            }
        }
    }

    /// Records `owner`, the lease's holder as Redis names it while this node runs no engine.
    /// A lease naming this node then is one it does not know it holds: an acquisition or
    /// renewal Redis ran after this node stopped waiting for its answer, or one an earlier run
    /// of this node (same `node_id`) left. It is given up, so that the queues move on at the
    /// next try rather than when it expires, and no write is accepted under its token.
    async fn seen_owner(&self, owner: Option<Owner>) {
        let owner = match owner {
            Some(mine) if mine.node_id == self.node_id => {
                warn!(
                    token = mine.token,
                    "the lease names this node, which runs no engine under it; giving it up"
                );
                if let Err(e) = self.lease.release(&mine).await {
                    warn!(error = %e, "could not give the lease up; it expires on its own");
                }
                None
            }
            other => other,
        };
        self.route.send_if_modified(|route| {
            let changed = route.owner != owner;
            route.owner = owner;
            changed
        });
    }

    async fn try_acquire(&self, within: Duration) -> Option<Running> {
        let sent = Instant::now();
        let acquired =
            tokio::time::timeout(within, self.lease.acquire(&self.node_id, &self.advertise)).await;
        record_round_trip(sent);
        match acquired {
            Ok(Ok(Acquired::Mine(owner))) => {
                let ownership = Arc::new(Ownership::stopping_with(&self.stopping));
                ownership.extend(lease::valid_until(sent, self.lease_time));
                metrics::counter!(m::CLUSTER_LEASE_ACQUIRED).increment(1);
                metrics::gauge!(m::CLUSTER_QUEUES_OWNED).set(self.config.queues.len() as f64);
                info!(token = owner.token, "this node owns the queues now");
                self.route.send_modify(|route| {
                    route.owner = Some(owner.clone());
                    route.engine = None;
                });
                Some(self.start_engine(owner, ownership))
            }
            Ok(Ok(Acquired::Theirs(owner))) => {
                self.seen_owner(owner).await;
                None
            }
            // Owners' stores failed: nobody takes the queues until the pause ends.
            Ok(Ok(Acquired::Paused(_))) => {
                self.seen_owner(None).await;
                None
            }
            Ok(Err(e)) => lease_request_failed(Some(&e)),
            Err(_) => lease_request_failed(None),
        }
    }

    /// The engine stopped on its own (its store failed): calls go to the next owner at once,
    /// and the lease is given up so that another node takes over (its writes, and any the
    /// stopping engine still tries, are fenced by then), after a pause when owners' stores
    /// failed before in a row (see `lease`).
    async fn engine_stopped(&self, r: &Running, within: Duration) {
        warn!("the engine stopped; giving the lease up");
        self.lost(r);
        match tokio::time::timeout(within, self.lease.give_up(&r.owner)).await {
            Ok(Ok(lease::GaveUp::Paused { stops, pause })) if !pause.is_zero() => warn!(
                stops,
                pause_ms = pause.as_millis() as u64,
                "owners' stores failed in a row: no node takes the queues until the pause ends"
            ),
            Ok(Ok(_)) => {}
            _ => warn!("could not give the lease up; it expires on its own"),
        }
    }

    async fn renew(&self, r: Running, within: Duration) -> Option<Running> {
        if r.task.is_finished() {
            self.engine_stopped(&r, within).await;
            return None;
        }
        let sent = Instant::now();
        let renewed = tokio::time::timeout(within, self.lease.renew(&r.owner)).await;
        record_round_trip(sent);
        match renewed {
            Ok(Ok(true)) => {
                r.ownership
                    .extend(lease::valid_until(sent, self.lease_time));
                metrics::counter!(m::CLUSTER_LEASE_RENEWALS).increment(1);
                Some(r)
            }
            Ok(Ok(false)) => {
                warn!(token = r.owner.token, "the lease passed to another node");
                self.lost(&r);
                None
            }
            Ok(Err(_)) | Err(_) if r.ownership.holds() => Some(r),
            Ok(Err(e)) => {
                warn!(error = %e, "lease not renewed in time");
                self.lost(&r);
                None
            }
            Err(_) => {
                warn!("lease not renewed in time (Redis did not answer)");
                self.lost(&r);
                None
            }
        }
    }

    /// Whether the lease names this node.
    fn owns(&self) -> bool {
        self.route
            .borrow()
            .owner
            .as_ref()
            .is_some_and(|o| o.node_id == self.node_id)
    }

    /// While another node owns the queues, keeps the standby copy of the state that a takeover
    /// starts from: read whole once, then following the owner's change log. A copy that falls
    /// out of step is read again, less often each time it happens again soon.
    async fn keep_standby(self: Arc<Self>, stop: CancellationToken) {
        let Some(slot) = self.standby.clone() else {
            return;
        };
        let cluster = &self.config.cluster;
        let keys = cluster.keys();
        let follow_every = Duration::from_millis(250);
        // Nodes starting together first settle which one owns: the owner needs no copy.
        let mut wait = self.lease_time;
        let mut loaded = Instant::now();
        let mut misses = 0u32;
        // Loads failed in a row: each waits longer for the next.
        let mut load_failures = 0u32;
        let mut said = None;
        loop {
            tokio::select! {
                () = stop.cancelled() => {
                    self.set_warm(false, &mut said).await;
                    return;
                }
                () = self.asked.cancelled() => {
                    self.set_warm(false, &mut said).await;
                    if !self.owns() {
                        standby_status(&self.health, Warmth::Cold).await;
                    }
                    return;
                }
                () = tokio::time::sleep(wait) => {}
            }
            wait = follow_every;
            if self.owns() {
                slot.lock().await.take();
                self.set_warm(false, &mut said).await;
                standby_status(&self.health, Warmth::Owner).await;
                continue;
            }
            let mut copy = slot.lock().await;
            let Some(standby) = copy.as_mut() else {
                drop(copy);
                // Not if the lease came meanwhile: the owner's status is its own.
                if !self.owns() {
                    standby_status(&self.health, Warmth::Cold).await;
                }
                let started = Instant::now();
                let load = Standby::load(
                    &cluster.redis_url,
                    self.redis_tls.as_ref(),
                    &keys,
                    Patience::for_lease(self.lease_time),
                );
                // A node asked to stop does not wait for a load (seconds per million players).
                let loaded_copy = tokio::select! {
                    r = load => r,
                    () = self.asked.cancelled() => return,
                    () = stop.cancelled() => return,
                };
                match loaded_copy {
                    Ok(standby) if !self.owns() => {
                        let players = standby.player_count();
                        info!(
                            players,
                            seconds = started.elapsed().as_secs_f64(),
                            "standby copy loaded"
                        );
                        load_failures = 0;
                        *slot.lock().await = Some(standby);
                        self.set_warm(true, &mut said).await;
                        standby_status(&self.health, Warmth::Copy(players)).await;
                        loaded = Instant::now();
                    }
                    Ok(_) => {}
                    Err(e) => {
                        load_failures += 1;
                        wait = lease::retry_after(self.lease_time, load_failures, rand::random());
                        warn!(
                            error = %e,
                            retry_in_ms = wait.as_millis() as u64,
                            "cannot load a standby copy"
                        );
                    }
                }
                continue;
            };
            let sent = Instant::now();
            let followed = standby.follow().await;
            metrics::histogram!(m::CLUSTER_REDIS_SECONDS, "op" => "follow")
                .record(sent.elapsed().as_secs_f64());
            let why = match followed {
                Ok(Followed::InStep) => {
                    metrics::gauge!(m::CLUSTER_STANDBY_PLAYERS).set(standby.player_count() as f64);
                    drop(copy);
                    self.set_warm(true, &mut said).await;
                    continue;
                }
                Ok(Followed::Gap) => "it missed a change".to_string(),
                Err(e) => e.to_string(),
            };
            *copy = None;
            drop(copy);
            self.set_warm(false, &mut said).await;
            standby_status(&self.health, Warmth::Cold).await;
            misses = if loaded.elapsed() < Duration::from_secs(60) {
                (misses + 1).min(6)
            } else {
                0
            };
            wait = self.lease_time * (1 << misses);
            warn!(
                reason = %why,
                retry_in_ms = wait.as_millis() as u64,
                "the standby copy fell out of step; reading it again"
            );
        }
    }

    /// Stops acting at once; the engine winds down in the background (its writes are fenced).
    fn lost(&self, r: &Running) {
        r.ownership.revoke();
        r.stop.cancel();
        // After both: an engine that opens its store meanwhile sees them (`start_engine`).
        if let Some(store) = r.store.get() {
            store.stop_writing();
        }
        metrics::counter!(m::CLUSTER_LEASE_LOSSES).increment(1);
        // The engine's gauges count what the next owner counts now (again at the engine's
        // end, after the last of its wind-down).
        m::engine_stopped();
        metrics::gauge!(m::CLUSTER_QUEUES_OWNED).set(0.0);
        self.route.send_modify(|route| {
            route.engine = None;
            if route.owner.as_ref() == Some(&r.owner) {
                route.owner = None;
            }
        });
        if self.standby.is_some() {
            // The engine took the copy: none until the standby task reads one again (which,
            // after the copy fell out of step, can be many leases away).
            let health = self.health.clone();
            tokio::spawn(async move { standby_status(&health, Warmth::Cold).await });
        }
    }

    /// Opens the store under `owner`'s token and runs the engine; the front calls it in process
    /// once its state is loaded.
    fn start_engine(&self, owner: Owner, ownership: Arc<Ownership>) -> Running {
        let stop = CancellationToken::new();
        let config = engine_config(&self.config);
        let cluster = self.config.cluster.clone();
        let route = self.route.clone();
        let token = owner.token;
        let node_id = owner.node_id.clone();
        let this_node = owner.node_id.clone();
        let tls = self.redis_tls.clone();
        let standby = self.standby.clone();
        // The engine takes the copy.
        self.warm.store(false, Ordering::Relaxed);
        let health = self.health.clone();
        let verifier = self.verifier.clone();
        let opened_store = Arc::new(std::sync::OnceLock::new());
        let task = tokio::spawn({
            let ownership = ownership.clone();
            let stop = stop.clone();
            let opened_store = opened_store.clone();
            async move {
                let options = RedisOptions {
                    wait_replicas: cluster.wait_replicas,
                    wait_timeout_ms: cluster.wait_timeout_ms,
                    tls,
                    keys: cluster.keys(),
                    change_log: cluster.standby,
                    patience: Patience::for_lease(Duration::from_millis(cluster.lease_ms)),
                    node: node_id,
                };
                let started = Instant::now();
                let copy = match &standby {
                    Some(slot) => slot.lock().await.take(),
                    None => None,
                };
                if standby.is_some() {
                    standby_status(&health, Warmth::Owner).await;
                }
                let opened = tokio::select! {
                    r = RedisStore::open_from(&cluster.redis_url, token, &options, copy) => r,
                    () = stop.cancelled() => return,
                };
                let store = match opened {
                    Ok(s) => {
                        info!(
                            players = s.player_count(),
                            seconds = started.elapsed().as_secs_f64(),
                            "cluster store loaded"
                        );
                        s
                    }
                    Err(e) => {
                        error!(error = %e, "cannot open the cluster store");
                        return;
                    }
                };
                let redis = Arc::new(store);
                let _ = opened_store.set(redis.clone());
                if stop.is_cancelled() && !ownership.holds() {
                    // The lease was lost while the store opened.
                    redis.stop_writing();
                }
                // A keyspace of an earlier release gets its past indexes while the engine
                // serves (a large history takes a while); erasures are refused until then.
                tokio::spawn(build_past_indexes(redis.clone(), stop.clone()));
                let store: Store = redis;
                let after = route.clone();
                let publish: server::Publish = Box::new(move |engine| {
                    route.send_modify(|r| {
                        if r.owner.as_ref().is_some_and(|o| o.token == token) {
                            r.engine = Some(engine);
                        }
                    });
                });
                // The newest queue settings a reload could apply: the last reload an owner
                // accepted (kept in Redis) or the file as it is now.
                let reloaded = store.reloaded_queues();
                let store_ahead = store.now_unix() - crate::state::unix_now();
                let config =
                    crate::reload::with_current_queues(config, reloaded.as_ref(), store_ahead);
                if let Err(e) =
                    server::run_engine(config, verifier, store, ownership, publish, stop).await
                {
                    warn!(error = %e, "the engine stopped");
                }
                // Its gauges go to zero, unless this node took the lease again meanwhile and
                // a newer engine keeps them.
                let newer = after
                    .borrow()
                    .owner
                    .as_ref()
                    .is_some_and(|o| o.node_id == this_node && o.token != token);
                if !newer {
                    m::engine_stopped();
                }
            }
        });
        Running {
            owner,
            ownership,
            stop,
            task,
            store: opened_store,
        }
    }
}

/// Builds the match history's past indexes of a keyspace an earlier release wrote (see
/// `RedisStore::build_past_indexes`), trying again every 10 s after a failure, until done or
/// `stop` (the engine stops: the next owner carries on from the saved cursor).
async fn build_past_indexes(store: Arc<RedisStore>, stop: CancellationToken) {
    let building = Instant::now();
    loop {
        let built = tokio::select! {
            r = store.build_past_indexes() => r,
            () = stop.cancelled() => return,
        };
        match built {
            Ok(Some(entries)) => {
                info!(
                    entries,
                    seconds = building.elapsed().as_secs_f64(),
                    "built the match history's past indexes"
                );
                return;
            }
            Ok(None) => return,
            Err(crate::store::StoreError::Fenced) => return,
            Err(e @ crate::store::StoreError::Decode { .. }) => {
                // Trying again reads the same record: an operator must mend or remove it.
                error!(error = %e, "cannot build the match history's past indexes; erasures are refused until a record that decodes is there");
                return;
            }
            Err(e) => {
                warn!(error = %e, "cannot build the match history's past indexes yet; erasures wait for them");
            }
        }
        tokio::select! {
            () = tokio::time::sleep(Duration::from_secs(10)) => {}
            () = stop.cancelled() => return,
        }
    }
}

/// The health service that tells whether a node could carry on the queues without reading
/// everything: SERVING while it owns them or holds a current standby copy. A rolling restart
/// that waits for it on each restarted node (a startup probe) never stops a node while no other
/// is ready to take over from a copy. With `standby = false` it is always SERVING: there is no
/// copy to wait for.
pub const STANDBY: &str = "standby";

/// Where a node stands for a takeover.
enum Warmth {
    /// It owns the queues.
    Owner,
    /// It holds a current copy of this many players.
    Copy(usize),
    /// It has no copy (yet).
    Cold,
}

/// Reports `warmth`: the standby copy's gauge and the [`STANDBY`] health service.
async fn standby_status(health: &HealthReporter, warmth: Warmth) {
    let players = match warmth {
        Warmth::Copy(players) => players,
        Warmth::Owner | Warmth::Cold => 0,
    };
    metrics::gauge!(m::CLUSTER_STANDBY_PLAYERS).set(players as f64);
    let status = match warmth {
        Warmth::Owner | Warmth::Copy(_) => ServingStatus::Serving,
        Warmth::Cold => ServingStatus::NotServing,
    };
    health.set_service_status(STANDBY, status).await;
}

/// Logs why a lease request got no answer: Redis' error, or none in time (`None`).
fn lease_request_failed<T>(error: Option<&lease::LeaseError>) -> Option<T> {
    match error {
        Some(e) => warn!(error = %e, "cannot reach Redis for the lease"),
        None => warn!("Redis did not answer the lease request in time"),
    }
    None
}

fn record_round_trip(sent: Instant) {
    metrics::histogram!(m::CLUSTER_REDIS_SECONDS, "op" => "lease")
        .record(sent.elapsed().as_secs_f64());
}

/// The engine serves only its node's front, in process: no TLS, grpc-web, CORS or metrics
/// endpoint of its own, and it stops at once when told.
fn engine_config(config: &Config) -> Config {
    let mut c = config.clone();
    c.server.metrics_addr = String::new();
    c.server.drain_ms = 0;
    c.server.grpc_web = false;
    c.server.grpc_web_origins = Vec::new();
    c.tls.enabled = false;
    c
}

/// Readiness (`""`) is SERVING while some node owns the queues and the node is not draining;
/// on `signal`, NOT_SERVING for `drain`, then the node stops (`shutdown`).
async fn report_health(
    health: HealthReporter,
    mut route: watch::Receiver<Route>,
    signal: CancellationToken,
    shutdown: CancellationToken,
    drain: Duration,
) {
    loop {
        let ready = route.borrow_and_update().owner.is_some();
        let status = if ready {
            ServingStatus::Serving
        } else {
            ServingStatus::NotServing
        };
        health.set_service_status("", status).await;
        tokio::select! {
            changed = route.changed() => if changed.is_err() { return },
            () = signal.cancelled() => break,
            () = shutdown.cancelled() => return,
        }
    }
    health
        .set_service_status("", ServingStatus::NotServing)
        .await;
    if !drain.is_zero() {
        info!(
            drain_ms = drain.as_millis() as u64,
            "draining: health is NOT_SERVING"
        );
        tokio::select! {
            () = tokio::time::sleep(drain) => {}
            () = shutdown.cancelled() => {}
        }
    }
    shutdown.cancel();
}

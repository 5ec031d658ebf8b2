//! One cluster node: the front on the configured address, the lease task, the engine while
//! this node owns the queues, and the metrics listener with the operator console, whose calls
//! go through the front like any client's.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tonic::codegen::http;
use tonic::transport::Server;
use tonic_health::ServingStatus;
use tonic_health::server::HealthReporter;
use tracing::{error, info, warn};

use super::front::{Credentials, Dispatch, Front, Route, Waits};
use super::lease::LeaseClient;
use super::member::{Member, Together};
use crate::config::Config;
use crate::server::{self, ServerError};
use crate::store::{Patience, redact};

/// Why a node could not start.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error(transparent)]
    Server(#[from] ServerError),
    #[error("cluster.redis_url {url}: {detail}")]
    Redis { url: String, detail: String },
    /// The config moved queues to another shard than the one holding their records (the
    /// placement hash's key last).
    #[error("{}", moved(.0, .1))]
    Moved(Vec<crate::store::Moved>, String),
}

fn moved(moved: &[crate::store::Moved], key: &str) -> String {
    let each: Vec<String> = moved.iter().map(ToString::to_string).collect();
    let fields: Vec<&str> = moved.iter().map(|m| m.field.as_str()).collect();
    format!(
        "{}; queues do not move between shards: put them back, or, to start them afresh without \
         those records, delete fields {} of Redis hash {key} (docs/cluster.md, Shards)",
        each.join("; "),
        fields.join(", ")
    )
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
    // Each shard's keyspace may live on another primary of a Redis Cluster.
    for keyspace in cluster.keyspaces() {
        let durability = crate::store::check_durability(
            &cluster.redis_url,
            tls.as_ref(),
            &crate::store::Keys::new(keyspace),
            cluster.wait_replicas,
            cluster.allow_volatile,
        )
        .await
        .map_err(|e| redis_error(e.to_string()))?;
        info!(redis = %url, keyspace, durability = ?durability, "cluster store checked");
    }
    let lease_time = Duration::from_millis(cluster.lease_ms);
    let patience = Patience::for_lease(lease_time);
    let conn = crate::store::RedisConn::connect(&cluster.redis_url, tls.as_ref(), patience)
        .await
        .map_err(|e| redis_error(e.to_string()))?;
    // Before any engine runs a queue where its records are not.
    let home = crate::store::Keys::new(&cluster.keyspace);
    let moved = crate::store::check_placement(
        &mut conn.clone(),
        &home,
        &super::shards::placements(&config),
    )
    .await
    .map_err(|e| redis_error(e.to_string()))?;
    if !moved.is_empty() {
        return Err(NodeError::Moved(moved, home.placement()));
    }
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
    let (health, health_service) = tonic_health::server::health_reporter();
    let shards = super::shards::shard_configs(&config);
    // Without copies to wait for, a node is as ready for a takeover as it will ever be, and a
    // startup probe on `standby` passes.
    let together = Together::new(health.clone(), shards.len(), cluster.standby).await;
    let config = Arc::new(config);
    let mut members = Vec::with_capacity(shards.len());
    let mut routes_seen = Vec::with_capacity(shards.len());
    for (index, shard) in shards.into_iter().enumerate() {
        let (route_tx, route_rx) = watch::channel(Route::default());
        let keys = shard.cluster.keys();
        members.push(Arc::new(Member {
            stopping: shutdown.clone(),
            asked: signal.clone(),
            verifier: verifier.clone(),
            config: Arc::new(shard),
            node_id: node_id.clone(),
            advertise: advertise.clone(),
            lease: LeaseClient::new(conn.clone(), lease_time, keys),
            lease_time,
            redis_tls: tls.clone(),
            route: route_tx,
            standby: cluster
                .standby
                .then(|| Arc::new(tokio::sync::Mutex::new(None))),
            together: together.clone(),
            index,
            warm: AtomicBool::new(false),
            handover: AtomicBool::new(false),
            handed_over: std::sync::Mutex::new(None),
        }));
        routes_seen.push(route_rx);
    }
    // One node key for the whole cluster: the home shard's.
    let home = &members[0];
    let node_key = home
        .lease
        .node_key(&fresh_node_key())
        .await
        .map_err(|e| redis_error(e.to_string()))
        .and_then(|key| {
            http::HeaderValue::from_str(&key).map_err(|_| {
                redis_error(format!(
                    "{} holds no valid node key; delete it and start the nodes again",
                    home.lease.keys().node_key()
                ))
            })
        })?;
    let lease_stop = CancellationToken::new();
    let mut member_tasks = Vec::new();
    for member in &members {
        member_tasks.push(tokio::spawn(member.clone().hold_lease(lease_stop.clone())));
        member_tasks.push(tokio::spawn(
            member.clone().keep_standby(lease_stop.clone()),
        ));
    }
    // Stopped when the node is asked to stop: it takes no shard from then on.
    let spread_stop = signal.child_token();
    let spread_task = tokio::spawn(super::balance::spread(
        members.clone(),
        members[0].lease.clone(),
        node_id.clone(),
        lease_time,
        spread_stop.clone(),
    ));

    health
        .set_service_status(server::LIVENESS, ServingStatus::Serving)
        .await;
    let health_task = tokio::spawn(report_health(
        health,
        routes_seen.clone(),
        signal.clone(),
        shutdown.clone(),
        Duration::from_millis(config.server.drain_ms),
    ));
    let waits = Waits {
        for_owner: lease_time * 2 + Duration::from_secs(1),
        for_answer: Duration::from_millis(config.server.request_timeout_ms),
        for_long_answer: Duration::from_millis(config.server.admin_request_timeout_ms),
        max_in_flight: config.server.max_concurrent_requests,
    };
    let fronts = members
        .iter()
        .zip(routes_seen)
        .map(|(member, route)| {
            Front::new(
                node_id.clone(),
                route,
                waits,
                config.server.max_message_bytes,
                shutdown.clone(),
                peer.clone(),
                Credentials {
                    node_key: node_key.clone(),
                    shard: member.config.cluster.keyspace.clone(),
                },
            )
        })
        .collect();
    let front = Dispatch::new(fronts, &config);
    if let Some(console) = &console {
        console.attach_front(console_service(front.clone()), config.clone());
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
    spread_stop.cancel();
    let _ = spread_task.await;
    lease_stop.cancel();
    for task in member_tasks {
        if let Err(e) = task.await {
            error!(error = %e, "a shard's lease or standby task failed");
        }
    }
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
fn console_service(front: Dispatch) -> crate::console::GrpcService {
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

/// Readiness (`""`) is SERVING while some node owns each shard's queues and the node is not
/// draining; on `signal`, NOT_SERVING for `drain`, then the node stops (`shutdown`).
async fn report_health(
    health: HealthReporter,
    routes: Vec<watch::Receiver<Route>>,
    signal: CancellationToken,
    shutdown: CancellationToken,
    drain: Duration,
) {
    use tokio_stream::StreamExt;
    let mut owned = vec![false; routes.len()];
    let mut changes = tokio_stream::StreamMap::new();
    for (shard, route) in routes.into_iter().enumerate() {
        changes.insert(shard, tokio_stream::wrappers::WatchStream::new(route));
    }
    let mut status = None;
    loop {
        let now = if owned.iter().all(|o| *o) {
            ServingStatus::Serving
        } else {
            ServingStatus::NotServing
        };
        if status != Some(now) {
            health.set_service_status("", now).await;
            status = Some(now);
        }
        tokio::select! {
            changed = changes.next() => match changed {
                Some((shard, route)) => owned[shard] = route.owner.is_some(),
                None => return,
            },
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

//! The front of a cluster node: every gRPC call that reaches the node goes to the owner of the
//! queues, as it came (headers, token and body; a unary call's deadline less the time it
//! waited here), so any node serves any call behind a plain load balancer. On the owner the call goes to its own engine; elsewhere to the owner's
//! advertised address, marked as forwarded so it is never forwarded twice.
//!
//! Every request of the API is one message, so the front keeps it until the call is answered:
//! when the owner cannot be reached, or answers that it is no longer the owner, the call is sent
//! again to the next owner, for up to twice the lease (a failover's bound) and never past the
//! caller's deadline. Every call is safe to send again after its owner died, being idempotent
//! (`ReportMatchResult` by match id, `EnterQueue` by the player's one ticket, `StartMatch`,
//! `CancelMatch` of a cancelled match, `JoinParty` of one's own party, reads), except
//! `RequestBackfill`, `CreateParty`, `LeaveParty` and the admin changes ([`ONCE`]): those are answered
//! UNAVAILABLE instead when the owner went away after they were sent or did not answer in
//! time, and the caller checks before calling again.
//!
//! Streams are relayed by a task. `WatchTicket` and `ServeMatches` outlive owners: when the
//! owner changes or its connection breaks between two messages, the relay sends the same
//! request to the next owner and goes on, so a watcher keeps its updates and a game server its
//! registration through a failover without noticing. Other streams (`ExportPlayers`,
//! `WatchEvents`) end with UNAVAILABLE then, since sending them again would repeat what was
//! already sent; a `WatchEvents` client resumes after the last cursor it got. Calls of other
//! services than the API (server reflection, whose client keeps its side of the stream open)
//! are passed on as they come, their bodies streaming, and never sent again.

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tonic::body::Body;
use tonic::codegen::http;
use tonic::transport::server::TcpConnectInfo;
use tonic::transport::{Channel, Endpoint};
use tower::{Service, ServiceExt};

mod deadline;
mod framing;

use super::lease::Owner;
use super::link::{self, Link};
use crate::api::rpc_metrics::{RpcMetrics, RpcMetricsLayer};
use deadline::{budget, caller_timeout, grpc_timeout, margin, patience};
use framing::Framing;

/// Marks a call forwarded by another node's front (its value: that node's id).
pub const FORWARDED: &str = "x-matchmaker-forwarded-by";
/// The cluster's node key (in Redis, see `lease::NODE_KEY`), on a call or link one node's front
/// opens to another. A forwarded call that comes with it is believed about its client
/// ([`CLIENT_ADDR`]); one without it is served as a call from the node's own address.
pub const NODE_KEY: &str = "x-matchmaker-node-key";
/// The IP address of the client of a forwarded call, as the forwarding node saw it: the owner's
/// per-address rate limit (`rate_limit.anonymous`) counts the client, not the node.
pub const CLIENT_ADDR: &str = "x-matchmaker-client-addr";
/// The shard (its keyspace) a node's link or forwarded stream is for: the owner's dispatch
/// hands it to that shard's front (see [`Dispatch`]).
pub const SHARD: &str = "x-matchmaker-shard";
use crate::api::NOT_OWNER;
/// Connections a front keeps to each node it forwards to. Streams share them, and each link
/// rides one: several leave room beyond one connection's stream limit on the owner
/// (`server.max_concurrent_requests_per_connection`) for streams, which stay open.
const CONNECTIONS: usize = 16;
/// Links ([`link`]) a front keeps to the owner for unary calls, on different connections, so
/// one connection's task is not the bottleneck on a larger node. Fewer links make
/// larger batches: on one 2-core machine 1 and 2 links forwarded as many EnterQueue calls
/// (17.2k/s and 17.3k/s), 4 links 16.3k/s and 8 links 15.7k/s (docs/performance.md, C22).
const LINKS: usize = 2;
/// The API's calls begin so; any other (server reflection) is passed on as it comes.
const API: &str = "/matchmaker.v1.";
mod dispatch;
mod events;
mod fanout;
mod methods;
mod serve;
mod settings;
pub use dispatch::Dispatch;
use methods::{ONCE, RESUMABLE, STREAMS};
pub use settings::{Credentials, PeerTls, Waits};

/// Where calls go, as the node's lease task sees it.
#[derive(Clone, Debug, Default)]
pub struct Route {
    /// The lease holder.
    pub owner: Option<Owner>,
    /// This node's engine, while this node owns the queues and its state is loaded.
    pub engine: Option<crate::server::EngineService>,
}

/// The front service.
#[derive(Clone)]
pub struct Front {
    inner: Arc<Inner>,
    /// Clients' calls, counted by method as they saw them (`matchmaker_cluster_front_*`);
    /// other nodes' forwarded calls and links are not counted here.
    metered: RpcMetrics<Forward>,
}

/// The front's forwarding as a service, for the metrics layer to wrap.
#[derive(Clone)]
struct Forward(Arc<Inner>);

impl Service<http::Request<Body>> for Forward {
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        let inner = self.0.clone();
        Box::pin(async move { Ok(inner.forward(request).await) })
    }
}

/// The links to one owner, with the owner's token they were opened under.
type LinkPool = (u64, Vec<Arc<Link>>);

struct Inner {
    node_id: String,
    route: watch::Receiver<Route>,
    channels: Mutex<HashMap<String, Vec<Channel>>>,
    /// The links to the owner, by its address, with the owner's token they were opened under.
    links: Mutex<HashMap<String, LinkPool>>,
    turn: std::sync::atomic::AtomicUsize,
    /// `matchmaker_cluster_forwarded_calls_total`, registered once.
    forwarded: metrics::Counter,
    /// `matchmaker_cluster_forwarded_call_seconds`, registered once.
    forwarded_seconds: metrics::Histogram,
    /// How long a call may wait for an owner.
    patience: Duration,
    /// How long a call may take, the owner's answer included, when its caller sets no shorter
    /// deadline (`server.request_timeout_ms`, as on a single node).
    request_timeout: Duration,
    /// The same for the admin calls that change a whole pool
    /// (`server.admin_request_timeout_ms`).
    long_timeout: Duration,
    /// Largest request message (`server.max_message_bytes`): the engine would refuse a larger
    /// one anyway.
    max_body: usize,
    /// Cancelled when the node stops: the links other nodes opened to it end.
    closing: CancellationToken,
    /// TLS to the other nodes, when they serve it.
    peer_tls: Option<PeerTls>,
    /// The cluster's node key, as a header value (marked sensitive).
    node_key: http::HeaderValue,
    /// The keyspace of the shard this front forwards calls for, sent with each link and
    /// forwarded stream.
    shard: Option<http::HeaderValue>,
    /// Calls this front holds before they are answered or their stream starts
    /// (`server.max_concurrent_requests`): each may hold a request message of up to
    /// `max_body`, so this bounds what callers can make a node keep.
    in_flight: Arc<tokio::sync::Semaphore>,
}

/// Marks a call that came on a link opened with the cluster's node key.
#[derive(Clone, Copy)]
struct FromNode;

impl Front {
    pub fn new(
        node_id: String,
        route: watch::Receiver<Route>,
        waits: Waits,
        max_body: usize,
        closing: CancellationToken,
        peer_tls: Option<PeerTls>,
        credentials: Credentials,
    ) -> Self {
        let Credentials {
            mut node_key,
            shard,
        } = credentials;
        node_key.set_sensitive(true);
        let inner = Arc::new(Inner {
            node_id,
            route,
            channels: Mutex::new(HashMap::new()),
            links: Mutex::new(HashMap::new()),
            turn: std::sync::atomic::AtomicUsize::new(0),
            forwarded: metrics::counter!(crate::telemetry::CLUSTER_FORWARDED),
            forwarded_seconds: metrics::histogram!(crate::telemetry::CLUSTER_FORWARDED_SECONDS),
            patience: waits.for_owner,
            request_timeout: waits.for_answer,
            long_timeout: waits.for_long_answer,
            max_body,
            closing,
            peer_tls,
            node_key,
            shard: http::HeaderValue::from_str(&shard).ok(),
            in_flight: Arc::new(tokio::sync::Semaphore::new(waits.max_in_flight.max(1))),
        });
        let metered = tower::Layer::layer(
            &RpcMetricsLayer::new(crate::api::rpc_metrics::CLUSTER_FRONT),
            Forward(inner.clone()),
        );
        Self { inner, metered }
    }
}

/// Where one attempt goes, and the lease token of the owner it goes to.
enum Target {
    Engine(crate::server::EngineService, u64),
    /// A stream's own HTTP/2 call to the owner.
    Node(Channel, u64),
    /// A unary call, on a link to the owner.
    Link(Arc<Link>, u64),
}

impl Target {
    fn token(&self) -> u64 {
        match self {
            Self::Engine(_, t) | Self::Node(_, t) | Self::Link(_, t) => *t,
        }
    }
}

impl Inner {
    /// One of the connections to `addr`, in turn: calls and streams spread over
    /// [`CONNECTIONS`] HTTP/2 connections, so neither a peer's per-connection stream limit
    /// nor one connection's task caps what a node forwards.
    fn channel(&self, addr: &str) -> Option<Channel> {
        let turn = self.turn.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut channels = self.channels.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(pool) = channels.get(addr) {
            return Some(pool[turn % pool.len()].clone());
        }
        let endpoint = match &self.peer_tls {
            None => Endpoint::from_shared(format!("http://{addr}")).ok()?,
            Some(tls) => {
                let mut config = tonic::transport::ClientTlsConfig::new()
                    .ca_certificate(tonic::transport::Certificate::from_pem(&tls.ca_pem));
                if !tls.server_name.is_empty() {
                    config = config.domain_name(tls.server_name.clone());
                }
                Endpoint::from_shared(format!("https://{addr}"))
                    .ok()?
                    .tls_config(config)
                    .ok()?
            }
        }
        .tcp_nodelay(true)
        .connect_timeout(Duration::from_millis(500))
        .http2_keep_alive_interval(Duration::from_secs(10))
        .keep_alive_while_idle(true);
        let pool: Vec<Channel> = (0..CONNECTIONS).map(|_| endpoint.connect_lazy()).collect();
        let channel = pool[turn % pool.len()].clone();
        // Calls go to one owner at a time: the connections to earlier owners go (calls and
        // streams still on them keep their own handles), so a cluster whose nodes change
        // addresses (pods restarted) does not gather them.
        channels.clear();
        channels.insert(addr.to_string(), pool);
        Some(channel)
    }

    /// One of the links to `addr`, in turn; a broken one is replaced by a new link.
    fn link(&self, addr: &str, token: u64) -> Result<Arc<Link>, &'static str> {
        const BAD_ADDR: &str = "the owner's advertised address is not a valid URI authority";
        let turn = self.turn.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % LINKS;
        let mut links = self.links.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, pool)) = links.get_mut(addr).filter(|(t, _)| *t == token) {
            if !pool[turn].is_open() {
                if pool[turn].closed_by_owner() {
                    // The owner is stopping (or its engine did): a link opened to it now would
                    // race its connection's close, and calls sent on it could fail as maybe
                    // served. They wait for the next owner instead.
                    return Err("the owner is stopping");
                }
                pool[turn].close();
                pool[turn] = Link::open(
                    self.channel(addr).ok_or(BAD_ADDR)?,
                    self.max_body,
                    self.link_head(),
                );
            }
            return Ok(pool[turn].clone());
        }
        let pool = (0..LINKS)
            .map(|_| {
                self.channel(addr)
                    .map(|c| Link::open(c, self.max_body, self.link_head()))
            })
            .collect::<Option<Vec<_>>>()
            .ok_or(BAD_ADDR)?;
        let link = pool[turn].clone();
        // As with the connections: calls on an earlier owner's links hold them until answered,
        // then the links end (their tasks, and the streams they hold open on that node).
        for (_, (_, earlier)) in links.drain() {
            earlier.iter().for_each(|l| l.close());
        }
        links.insert(addr.to_string(), (token, pool));
        Ok(link)
    }

    /// Resolves when this node stops or, once it has run, its engine does (the lease lost or
    /// given up): the links other nodes opened to it stop serving calls then.
    fn engine_stopped(&self) -> impl Future<Output = ()> + Send + 'static {
        let closing = self.closing.clone();
        let mut route = self.route.clone();
        async move {
            let gone = async {
                let mut had = false;
                loop {
                    let has = route.borrow_and_update().engine.is_some();
                    if had && !has {
                        return;
                    }
                    had |= has;
                    if route.changed().await.is_err() {
                        std::future::pending::<()>().await;
                    }
                }
            };
            tokio::select! {
                () = closing.cancelled() => {}
                () = gone => {}
            }
        }
    }

    /// What a link's stream opens with: the node key.
    fn link_head(&self) -> tonic::metadata::MetadataMap {
        let mut head = http::HeaderMap::new();
        head.insert(NODE_KEY, self.node_key.clone());
        if let Some(shard) = &self.shard {
            head.insert(SHARD, shard.clone());
        }
        tonic::metadata::MetadataMap::from_headers(head)
    }

    /// Whether `presented` is the cluster's node key (compared in constant time).
    fn is_node_key(&self, presented: Option<&http::HeaderValue>) -> bool {
        let (Some(presented), key) = (presented, self.node_key.as_bytes()) else {
            return false;
        };
        let presented = presented.as_bytes();
        presented.len() == key.len()
            && presented
                .iter()
                .zip(key)
                .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                == 0
    }

    /// Where a call goes now, or why it cannot go anywhere yet. The route is read in place: a
    /// call copies only the engine handle or one connection, not the owner's names.
    fn target(&self, unary: bool) -> Result<Target, &'static str> {
        let route = self.route.borrow();
        let token = route.owner.as_ref().map_or(0, |o| o.token);
        if let Some(engine) = &route.engine {
            return Ok(Target::Engine(engine.clone(), token));
        }
        match &route.owner {
            Some(owner) if owner.node_id != self.node_id => {
                if unary {
                    self.link(&owner.addr, token)
                        .map(|l| Target::Link(l, token))
                } else {
                    self.channel(&owner.addr)
                        .map(|c| Target::Node(c, token))
                        .ok_or("the owner's advertised address is not a valid URI authority")
                }
            }
            // Ours but the engine is still loading, or nobody's yet.
            _ => Err("no node owns the queues yet"),
        }
    }

    async fn forward(self: Arc<Self>, mut request: http::Request<Body>) -> http::Response<Body> {
        // The caller's deadline runs from here, however long its body takes to come.
        let arrived = tokio::time::Instant::now();
        let forwarded = request.headers().contains_key(FORWARDED);
        if forwarded {
            // Another node's front sent it and keeps it to send again: here it is answered by
            // this node's engine as it came, or refused as not ours.
            let from_node = request.extensions().get::<FromNode>().is_some()
                || self.is_node_key(request.headers().get(NODE_KEY));
            believe(&mut request, from_node);
            let engine = self.route.borrow().engine.clone();
            return match engine {
                Some(engine) => engine.call(request).await.unwrap_or_else(|e| {
                    status(
                        tonic::Code::Unavailable,
                        &format!("the owner's engine failed the call: {e}"),
                        false,
                    )
                }),
                None => status(
                    tonic::Code::Unavailable,
                    "this node does not own the queues",
                    true,
                ),
            };
        }
        let caller = caller_timeout(request.headers());
        let waiting = arrived + patience(caller, self.patience);
        let limit = crate::api::layers::server_limit(
            request.uri().path(),
            self.request_timeout,
            self.long_timeout,
        );
        let deadline = arrived + budget(caller, limit);
        // What the caller says of itself is not passed on; what this node saw of it is.
        let client = crate::limits::peer_ip(request.extensions());
        let headers = request.headers_mut();
        headers.remove(NODE_KEY);
        headers.remove(CLIENT_ADDR);
        if let Some(ip) = client.and_then(|ip| http::HeaderValue::from_str(&ip.to_string()).ok()) {
            headers.insert(CLIENT_ADDR, ip);
        }
        let (mut parts, body) = request.into_parts();
        if let Ok(v) = http::HeaderValue::from_str(&self.node_id) {
            parts.headers.insert(FORWARDED, v);
        }
        match &self.shard {
            Some(shard) => parts.headers.insert(SHARD, shard.clone()),
            None => parts.headers.remove(SHARD),
        };
        if !parts.uri.path().starts_with(API) {
            // Another service's call (server reflection streams both ways, and its client
            // keeps its side open until it has its answers): passed on as it comes, once.
            return self.pass(parts, body).await;
        }
        // A caller that never sends its message holds its place only until its deadline.
        let bytes = match tokio::time::timeout_at(deadline, collect(body, self.max_body)).await {
            Ok(Ok(b)) => b,
            Ok(Err(message)) => return status(tonic::Code::ResourceExhausted, &message, false),
            Err(_) => {
                return status(
                    tonic::Code::DeadlineExceeded,
                    "the request message did not arrive within the call's deadline",
                    false,
                );
            }
        };
        let path = parts.uri.path();
        let resumable = RESUMABLE.contains(&path);
        if !resumable && !STREAMS.contains(&path) {
            return match self.call(&parts, &bytes, arrived, deadline, waiting).await {
                Ok((response, _)) => response,
                Err(answer) => answer,
            };
        }
        let (response, token) = match self.call(&parts, &bytes, arrived, deadline, waiting).await {
            Ok(answered) => answered,
            Err(answer) => return answer,
        };
        if response.headers().contains_key("grpc-status") {
            // Trailers-only: the call failed or ended at once.
            return response;
        }
        let (head, upstream) = response.into_parts();
        let (tx, rx) = tokio::sync::mpsc::channel(16);
        let relay = Relay {
            front: self,
            parts,
            bytes,
            arrived,
            resumable,
            tx,
        };
        tokio::spawn(relay.run(upstream, token));
        let body = http_body_util::StreamBody::new(tokio_stream::wrappers::ReceiverStream::new(rx));
        http::Response::from_parts(head, Body::new(body))
    }

    /// Sends a call of another service than the API to the owner as it comes, its request
    /// body streaming, and returns the owner's response as it comes: such a call is neither
    /// kept nor sent again.
    async fn pass(&self, parts: http::request::Parts, body: Body) -> http::Response<Body> {
        let target = match self.target(false) {
            Ok(target) => target,
            Err(why) => return status(tonic::Code::Unavailable, &format!("{why}; retry"), false),
        };
        let sent = match target {
            Target::Engine(engine, _) => engine.call(http::Request::from_parts(parts, body)).await,
            Target::Node(mut channel, _) => {
                self.forwarded.increment(1);
                let request = to_node(&parts, body, &self.node_key);
                match channel.ready().await {
                    Ok(ready) => ready.call(request).await.map_err(Into::into),
                    Err(e) => Err(e.into()),
                }
            }
            Target::Link(..) => unreachable!("a stream's target is never a link"),
        };
        sent.unwrap_or_else(|e| {
            status(
                tonic::Code::Unavailable,
                &format!("the owner cannot be reached: {e}"),
                false,
            )
        })
    }

    /// Sends the call (which `arrived` then) to the owner until it is answered by one before
    /// `deadline`, waiting out a failover until `waiting` at most; the answer and the token of
    /// the owner that gave it, or the UNAVAILABLE to return. An owner may take until `deadline`
    /// to answer: a call that takes longer than a failover (a season reset of a large pool) is
    /// not cut short by the wait for an owner.
    ///
    /// Each send of a unary call carries what is left until `deadline`, less a margin
    /// ([`margin`]), as its `grpc-timeout`: the owner gives up on it before this node answers
    /// the caller, so a call this node gave up on is not served after it said so. A stream's
    /// send carries what is left of the caller's own deadline, if it set one.
    async fn call(
        &self,
        parts: &http::request::Parts,
        bytes: &Bytes,
        arrived: tokio::time::Instant,
        deadline: tokio::time::Instant,
        waiting: tokio::time::Instant,
    ) -> Result<(http::Response<Body>, u64), http::Response<Body>> {
        let owner_deadline = deadline - margin(deadline.saturating_duration_since(arrived));
        let caller = caller_timeout(&parts.headers);
        let mut head = parts.clone();
        let mut route = self.route.clone();
        let path = parts.uri.path();
        let once = ONCE.contains(&path);
        let unary = is_unary(path);
        // Counted once, when it first leaves this node: not per send during a failover.
        let mut counted = false;
        loop {
            let why = match self.target(unary) {
                Ok(target) => {
                    let token = target.token();
                    let remote = !matches!(target, Target::Engine(..));
                    let linked = matches!(target, Target::Link(..)).then(std::time::Instant::now);
                    let mut watch = self.route.clone();
                    // A stalled owner never answers: give up on it when the lease moves on. A
                    // call sent only once waits for its answer even then (a stopping owner
                    // answers every call it took, served or not): given up on, it could only be
                    // answered "check whether it took effect".
                    let left = if unary {
                        Some(owner_deadline.saturating_duration_since(tokio::time::Instant::now()))
                    } else {
                        caller.map(|t| t.saturating_sub(arrived.elapsed()))
                    };
                    if let Some(left) = left {
                        head.headers.insert("grpc-timeout", grpc_timeout(left));
                    }
                    let sent = tokio::select! {
                        sent = send(target, &head, bytes, &self.node_key) => {
                            if let Some(started) = linked {
                                self.forwarded_seconds.record(started.elapsed().as_secs_f64());
                            }
                            Some(sent)
                        }
                        () = moved(&mut watch, token), if !once => None,
                        () = tokio::time::sleep_until(deadline) => {
                            return Err(status(
                                tonic::Code::Unavailable,
                                if once { MAYBE_SERVED } else { "the owner did not answer in time" },
                                false,
                            ));
                        }
                    };
                    let left_node = !matches!(
                        &sent,
                        Some(Err(e)) if matches!(
                            e.downcast_ref::<link::Failed>(),
                            Some(link::Failed::NotSent)
                        )
                    );
                    if remote && left_node && !counted {
                        counted = true;
                        self.forwarded.increment(1);
                    }
                    match sent {
                        Some(Ok(response)) if !is_not_owner(&response) => {
                            return Ok((response, token));
                        }
                        // The owner lost the lease while the call wrote: it may have written.
                        Some(Ok(response)) if once && was_fenced(&response) => {
                            return Err(status(tonic::Code::Unavailable, MAYBE_SERVED, false));
                        }
                        Some(Ok(_)) => "the node forwarded to no longer owns the queues",
                        // Known not to have left this node: safe to send to the next owner.
                        Some(Err(e))
                            if matches!(
                                e.downcast_ref::<link::Failed>(),
                                Some(link::Failed::NotSent)
                            ) =>
                        {
                            "the owner cannot be reached"
                        }
                        Some(Err(_)) | None if once => {
                            return Err(status(tonic::Code::Unavailable, MAYBE_SERVED, false));
                        }
                        Some(Err(_)) => "the owner cannot be reached",
                        None => "the owner changed during the call",
                    }
                }
                Err(why) => why,
            };
            // Wait for the route to change (a new owner, an engine up), a little at most.
            let pause = tokio::time::Instant::now() + Duration::from_millis(100);
            if pause >= waiting.min(deadline) {
                return Err(status(
                    tonic::Code::Unavailable,
                    &format!("{why}; retry (cluster failover in progress)"),
                    false,
                ));
            }
            let _ = tokio::time::timeout_at(pause, route.changed()).await;
        }
    }
}

/// The answer to a call sent once ([`ONCE`]) that the owner may have served without its
/// answer reaching this node.
const MAYBE_SERVED: &str = "the owner went away during the call or did not answer in time; check whether it took effect before calling again";

/// Returns once the owner with `token` no longer owns the queues (as this node sees it).
async fn moved(route: &mut watch::Receiver<Route>, token: u64) {
    loop {
        if route
            .borrow_and_update()
            .owner
            .as_ref()
            .is_none_or(|o| o.token != token)
        {
            return;
        }
        if route.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

/// The frames of a stream's response body, as the relay sends them on.
type Frames = tokio::sync::mpsc::Sender<Result<http_body::Frame<Bytes>, tonic::Status>>;

/// Relays one stream's response from the owner to the caller, moving to the next owner when
/// the stream is resumable.
struct Relay {
    front: Arc<Inner>,
    parts: http::request::Parts,
    bytes: Bytes,
    /// When the caller's call came, from which its deadline runs.
    arrived: tokio::time::Instant,
    resumable: bool,
    tx: Frames,
}

/// Why a relayed upstream stopped.
enum Stop {
    /// It ended (its trailers were sent on) or the caller went away: done.
    Done,
    /// The owner changed or the connection broke; `at_boundary`: between two messages.
    Moved { at_boundary: bool },
    /// This node is stopping: its callers go to another node.
    Closing,
}

impl Relay {
    async fn run(self, mut upstream: Body, mut token: u64) {
        loop {
            let at_boundary = match self.pipe(upstream, token).await {
                Stop::Done => return,
                Stop::Moved { at_boundary } => at_boundary,
                Stop::Closing => {
                    self.end(
                        tonic::Code::Unavailable,
                        "this matchmaker node is stopping; call again",
                    )
                    .await;
                    return;
                }
            };
            if self.front.closing.is_cancelled() {
                self.end(
                    tonic::Code::Unavailable,
                    "this matchmaker node is stopping; call again",
                )
                .await;
                return;
            }
            if !self.resumable || !at_boundary {
                self.end(
                    tonic::Code::Unavailable,
                    "the matchmaker owner changed; call again",
                )
                .await;
                return;
            }
            let deadline = tokio::time::Instant::now() + self.front.patience;
            match self
                .front
                .call(&self.parts, &self.bytes, self.arrived, deadline, deadline)
                .await
            {
                Ok((response, t)) => {
                    if let Some(s) = tonic::Status::from_header_map(response.headers()) {
                        self.end(s.code(), s.message()).await;
                        return;
                    }
                    token = t;
                    upstream = response.into_body();
                }
                Err(_) => {
                    self.end(tonic::Code::Unavailable, "no matchmaker owner; call again")
                        .await;
                    return;
                }
            }
        }
    }

    /// Sends `upstream`'s frames on until it ends, the caller leaves, or the owner `token`
    /// stops being the owner.
    async fn pipe(&self, mut upstream: Body, token: u64) -> Stop {
        let mut route = self.front.route.clone();
        let mut framing = Framing::default();
        loop {
            let moved = |route: &watch::Receiver<Route>| {
                route
                    .borrow()
                    .owner
                    .as_ref()
                    .is_none_or(|o| o.token != token)
            };
            if moved(&route) {
                return Stop::Moved {
                    at_boundary: framing.at_boundary(),
                };
            }
            tokio::select! {
                frame = upstream.frame() => match frame {
                    Some(Ok(frame)) => {
                        if let Some(data) = frame.data_ref() {
                            framing.feed(data);
                        } else if self.resumable
                            && (moved(&route)
                                || frame.trailers_ref().is_some_and(|t| t.contains_key(NOT_OWNER)))
                        {
                            // The old owner's engine ended the stream as it stopped (this
                            // node may not have seen the lease move yet).
                            return Stop::Moved { at_boundary: framing.at_boundary() };
                        }
                        let last = frame.is_trailers();
                        // A caller that does not read fills the channel: the send waits for
                        // room, and must not hold a stopping node open meanwhile.
                        tokio::select! {
                            sent = self.tx.send(Ok(frame)) => if sent.is_err() || last {
                                return Stop::Done;
                            },
                            () = self.front.closing.cancelled() => return Stop::Closing,
                        }
                    }
                    Some(Err(_)) | None => {
                        return Stop::Moved { at_boundary: framing.at_boundary() };
                    }
                },
                changed = route.changed() => {
                    if changed.is_err() {
                        return Stop::Moved { at_boundary: framing.at_boundary() };
                    }
                }
                () = self.tx.closed() => return Stop::Done,
                () = self.front.closing.cancelled() => return Stop::Closing,
            }
        }
    }

    /// Ends the caller's stream with a status in the trailers. While the node stops, a caller
    /// that does not read gets them only if there is room for them: its stream ends either way.
    async fn end(&self, code: tonic::Code, message: &str) {
        let mut trailers = http::HeaderMap::new();
        if tonic::Status::new(code, message)
            .add_header(&mut trailers)
            .is_err()
        {
            return;
        }
        let frame = Ok(http_body::Frame::trailers(trailers));
        let permit = tokio::select! {
            biased;
            permit = self.tx.reserve() => permit,
            () = self.front.closing.cancelled() => self.tx.try_reserve().map_err(|_| {
                tokio::sync::mpsc::error::SendError(())
            }),
        };
        if let Ok(permit) = permit {
            permit.send(frame);
        }
    }
}

/// What a forwarded call says of its client ([`CLIENT_ADDR`]) becomes its peer address for the
/// engine's layers, when it came from a node of this cluster (`from_node`); otherwise it is
/// dropped and the call counts as one from the address it came from.
fn believe(request: &mut http::Request<Body>, from_node: bool) {
    let headers = request.headers_mut();
    headers.remove(NODE_KEY);
    let client = headers.remove(CLIENT_ADDR);
    if !from_node {
        return;
    }
    let ip = client.and_then(|v| v.to_str().ok()?.parse::<std::net::IpAddr>().ok());
    if let Some(ip) = ip {
        request.extensions_mut().insert(connect_info(ip));
    }
}

/// A connection's info naming `ip` as its peer, as the rate limiter reads it.
fn connect_info(ip: std::net::IpAddr) -> TcpConnectInfo {
    TcpConnectInfo {
        local_addr: None,
        remote_addr: Some(std::net::SocketAddr::new(ip, 0)),
    }
}

async fn send(
    target: Target,
    parts: &http::request::Parts,
    bytes: &Bytes,
    node_key: &http::HeaderValue,
) -> Result<http::Response<Body>, tower::BoxError> {
    let body = || Body::new(http_body_util::Full::new(bytes.clone()));
    match target {
        Target::Engine(engine, _) => {
            engine
                .call(http::Request::from_parts(parts.clone(), body()))
                .await
        }
        Target::Node(mut channel, _) => {
            let request = to_node(parts, body(), node_key);
            let ready = channel.ready().await?;
            Ok(ready.call(request).await?)
        }
        Target::Link(link, _) => Ok(link.call(parts, bytes.clone()).await?),
    }
}

/// A request to another node with `parts`' head, `body` and the node key. Another process:
/// the extensions (this connection's peer address and such) mean nothing there, so only the
/// head is copied.
fn to_node(
    parts: &http::request::Parts,
    body: Body,
    node_key: &http::HeaderValue,
) -> http::Request<Body> {
    let mut request = http::Request::new(body);
    *request.method_mut() = parts.method.clone();
    *request.uri_mut() = parts.uri.clone();
    *request.version_mut() = parts.version;
    *request.headers_mut() = parts.headers.clone();
    request.headers_mut().insert(NODE_KEY, node_key.clone());
    request
}

/// A unary call of the API: it goes on a link. Streams, and any other service's calls (server
/// reflection streams both ways), each go on a call of their own.
fn is_unary(path: &str) -> bool {
    path.starts_with(API) && !RESUMABLE.contains(&path) && !STREAMS.contains(&path)
}

/// The request body: one gRPC message of at most `limit` bytes and its 5-byte prefix.
async fn collect(body: Body, limit: usize) -> Result<Bytes, String> {
    http_body_util::Limited::new(body, limit.saturating_add(5))
        .collect()
        .await
        .map(|c| c.to_bytes())
        .map_err(|e| format!("request message larger than server.max_message_bytes ({limit}): {e}"))
}

fn is_not_owner(response: &http::Response<Body>) -> bool {
    response.headers().contains_key(NOT_OWNER)
}

/// Whether a not-owner answer says the fence refused one of the call's writes (it may have
/// written before), rather than that the call was not served.
fn was_fenced(response: &http::Response<Body>) -> bool {
    response
        .headers()
        .get(NOT_OWNER)
        .is_some_and(|v| v == crate::api::NOT_OWNER_FENCED)
}

/// A trailers-only gRPC answer.
fn status(code: tonic::Code, message: &str, not_owner: bool) -> http::Response<Body> {
    let (mut parts, ()) = tonic::Status::new(code, message)
        .into_http::<()>()
        .into_parts();
    if not_owner {
        parts
            .headers
            .insert(NOT_OWNER, http::HeaderValue::from_static("1"));
    }
    http::Response::from_parts(parts, Body::empty())
}

impl Service<http::Request<axum::body::Body>> for Front {
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<axum::body::Body>) -> Self::Future {
        let inner = self.inner.clone();
        if request.uri().path() == link::PATH {
            // Another node's link: each of its calls is served as if it came on its own, until
            // this node stops or its engine does. Only a node opens one (it carries the node
            // key): a link holds many calls on one stream, past the limits a client's calls
            // meet, and its calls are believed about their clients.
            if !inner.is_node_key(request.headers().get(NODE_KEY)) {
                return Box::pin(async {
                    Ok(status(
                        tonic::Code::PermissionDenied,
                        "cluster links are opened by the cluster's nodes only (with the node key)",
                        false,
                    ))
                });
            }
            let stop = inner.engine_stopped();
            let max_body = inner.max_body;
            return Box::pin(async move {
                let serve = move |mut call: http::Request<Body>| {
                    let inner = inner.clone();
                    call.extensions_mut().insert(FromNode);
                    async move {
                        // A stream would hold its task until it ended; streams come on calls
                        // of their own.
                        if !is_unary(call.uri().path()) {
                            return status(
                                tonic::Code::InvalidArgument,
                                "only unary calls of the API travel on a cluster link",
                                false,
                            );
                        }
                        inner.forward(call).await
                    }
                };
                Ok(link::accept(request.map(Body::new), max_body, stop, serve).await)
            });
        }
        let Ok(place) = inner.in_flight.clone().try_acquire_owned() else {
            metrics::counter!(crate::telemetry::REQUESTS_SHED).increment(1);
            return Box::pin(async {
                Ok(status(
                    tonic::Code::ResourceExhausted,
                    "this node holds server.max_concurrent_requests calls; retry with backoff",
                    false,
                ))
            });
        };
        if request.headers().contains_key(FORWARDED) {
            return Box::pin(async move {
                let answer = inner.forward(request.map(Body::new)).await;
                drop(place);
                Ok(answer)
            });
        }
        let answered = self.metered.call(request.map(Body::new));
        Box::pin(async move {
            let answer = answered.await;
            drop(place);
            answer
        })
    }
}

#[cfg(test)]
mod tests;

//! One connection type for a single Redis (a primary, or an address that always reaches the
//! primary), for a Redis behind Sentinel (the URL names the sentinels) and for a Redis
//! Cluster, chosen by the URL and by asking the server. All reconnect on their own after Redis
//! restarts, the sentinels name another primary or the cluster moves slots.

use std::time::Duration;

use ::redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use ::redis::cluster_async::ClusterConnection;
use ::redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use ::redis::{Cmd, FromRedisValue, Pipeline, RedisFuture, Value};

use super::sentinel::{SentinelConn, is_sentinel_url};

/// What a `rediss://` connection trusts and presents, beyond the defaults (the system's trust
/// store, no client certificate).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct RedisTls {
    /// PEM certificates the server's certificate must chain to, instead of the system's.
    pub ca_pem: Option<Vec<u8>>,
    /// A PEM client certificate and its key, for a Redis that checks its clients
    /// (`tls-auth-clients yes`, Redis' default when TLS is on).
    pub client: Option<(Vec<u8>, Vec<u8>)>,
}

impl std::fmt::Debug for RedisTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisTls")
            .field("ca_pem", &self.ca_pem.is_some())
            .field("client", &self.client.is_some())
            .finish()
    }
}

impl RedisTls {
    pub(super) fn certificates(&self) -> ::redis::TlsCertificates {
        ::redis::TlsCertificates {
            client_tls: self
                .client
                .as_ref()
                .map(|(cert, key)| ::redis::ClientTlsConfig {
                    client_cert: cert.clone(),
                    client_key: key.clone(),
                }),
            root_cert: self.ca_pem.clone(),
        }
    }
}

/// A client of the single Redis at `url`, with `tls` for a `rediss://` one.
pub fn client(url: &str, tls: Option<&RedisTls>) -> ::redis::RedisResult<::redis::Client> {
    match tls {
        None => ::redis::Client::open(url),
        Some(tls) => ::redis::Client::build_with_tls(url, tls.certificates()),
    }
}

/// How long a call waits on Redis before it fails: for one reply, and for a lost connection
/// to come back. A node's calls must fail within about its lease: past it, its writes are
/// refused by the fence anyway, and a call that waits longer only holds its caller (the
/// client library's own defaults retry a lost connection for 6 to 13 s, or minutes on a
/// Redis Cluster).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Patience {
    /// The longest wait for one reply.
    pub reply: Duration,
    /// The longest wait for one connection attempt, and between two attempts.
    pub connect: Duration,
    /// Attempts after the first when the connection is lost; the waits between them double
    /// from 100 ms up to `connect`, with jitter.
    pub retries: usize,
}

impl Patience {
    /// For a node whose lease lasts `lease`: a reply within 500 ms (the client library's
    /// default), a connection attempt within a quarter lease (at most a second), and three
    /// retries, so that a call to a Redis that went away fails within about a lease (0.7 to
    /// 1.4 s of waits with the default lease, plus the attempts) and one that comes back
    /// within that time is not noticed.
    pub fn for_lease(lease: Duration) -> Self {
        Self {
            reply: Duration::from_millis(500),
            connect: (lease / 4).clamp(Duration::from_millis(100), Duration::from_secs(1)),
            retries: 3,
        }
    }

    /// The same, waiting at least `reply` for a reply (a flush that ends in `WAIT`).
    pub fn reply_within(self, reply: Duration) -> Self {
        Self {
            reply: self.reply.max(reply),
            ..self
        }
    }

    fn manager(self) -> ConnectionManagerConfig {
        ConnectionManagerConfig::new()
            .set_response_timeout(Some(self.reply))
            .set_connection_timeout(Some(self.connect))
            .set_max_delay(self.connect)
            .set_number_of_retries(self.retries)
    }
}

impl Default for Patience {
    /// For the default lease, 3 s.
    fn default() -> Self {
        Self::for_lease(Duration::from_secs(3))
    }
}

/// A connection to a single Redis, to the primary sentinels name, or to a Redis Cluster.
#[derive(Clone)]
pub enum RedisConn {
    Single(ConnectionManager),
    Sentinel(SentinelConn),
    Cluster(ClusterConnection),
}

impl RedisConn {
    /// Connects to `url`; a node with `cluster_enabled:1` gets a cluster connection that follows
    /// the cluster's slot map from there. Calls on it wait as `patience` says.
    pub async fn connect(
        url: &str,
        tls: Option<&RedisTls>,
        patience: Patience,
    ) -> Result<Self, ::redis::RedisError> {
        if is_sentinel_url(url) {
            return Ok(Self::Sentinel(
                SentinelConn::connect(url, tls, patience).await?,
            ));
        }
        let client = client(url, tls)?;
        let mut probe = client.get_multiplexed_async_connection().await?;
        let info: String = ::redis::cmd("INFO")
            .arg("cluster")
            .query_async(&mut probe)
            .await?;
        if info.lines().any(|l| l.trim() == "cluster_enabled:1") {
            let connect = u64::try_from(patience.connect.as_millis()).unwrap_or(u64::MAX);
            let mut cluster = ::redis::cluster::ClusterClient::builder(vec![url])
                .connection_timeout(patience.connect)
                .response_timeout(patience.reply)
                .overall_response_timeout(Some(
                    patience.reply + patience.connect * (patience.retries as u32 + 1),
                ))
                .retries(patience.retries as u32)
                .min_retry_wait(100.min(connect))
                .max_retry_wait(connect);
            if let Some(tls) = tls {
                cluster = cluster.certs(tls.certificates());
            }
            let cluster = cluster.build()?;
            return Ok(Self::Cluster(cluster.get_async_connection().await?));
        }
        Ok(Self::Single(
            client
                .get_connection_manager_with_config(patience.manager())
                .await?,
        ))
    }

    /// Whether this is a Redis Cluster.
    pub fn is_cluster(&self) -> bool {
        matches!(self, Self::Cluster(_))
    }

    /// Sends `cmd`, a command about one server that names no key (`WAIT`, `INFO`, `CONFIG`),
    /// to the primary holding `key`'s slot on a Redis Cluster, which a cluster connection would
    /// otherwise send to any node; elsewhere to the one primary. On a cluster connection it
    /// follows the writes this connection sent to that primary, so `WAIT` counts them.
    pub async fn on_primary_of<T: FromRedisValue>(
        &mut self,
        key: &str,
        cmd: Cmd,
    ) -> ::redis::RedisResult<T> {
        match self {
            Self::Cluster(c) => {
                let route = Route::with_key(key, SlotAddr::Master);
                let reply = c
                    .route_command(
                        cmd,
                        RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(route)),
                    )
                    .await?;
                T::from_redis_value(reply).map_err(Into::into)
            }
            _ => cmd.query_async(self).await,
        }
    }

    /// Sends the `count` commands of `pipe` as one request on one connection (on a Redis
    /// Cluster, the primary holding `key`'s slot) and returns each one's reply, a server error
    /// as [`Value::ServerError`]. A command that must follow another on its connection (`WAIT`
    /// after the writes it counts) goes this way: sent alone, it could go on a connection the
    /// client opened after a reconnection, which wrote nothing.
    pub async fn pipeline_on_primary_of(
        &mut self,
        key: &str,
        pipe: &Pipeline,
        count: usize,
    ) -> ::redis::RedisResult<Vec<Value>> {
        match self {
            Self::Cluster(c) => {
                let route = Route::with_key(key, SlotAddr::Master);
                c.route_pipeline(
                    pipe.clone(),
                    0,
                    count,
                    SingleNodeRoutingInfo::SpecificNode(route),
                )
                .await
            }
            _ => self.req_packed_commands(pipe, 0, count).await,
        }
    }
}

impl ConnectionLike for RedisConn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Self::Single(c) => c.req_packed_command(cmd),
            Self::Sentinel(c) => c.req_packed_command(cmd),
            Self::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Self::Single(c) => c.req_packed_commands(cmd, offset, count),
            Self::Sentinel(c) => c.req_packed_commands(cmd, offset, count),
            Self::Cluster(c) => c.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Self::Single(c) => c.get_db(),
            Self::Sentinel(c) => c.get_db(),
            Self::Cluster(c) => c.get_db(),
        }
    }
}

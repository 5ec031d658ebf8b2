//! One connection type for a single Redis (a primary, or an address that always reaches the
//! primary, as Sentinel setups provide) and for a Redis Cluster, chosen by asking the server.
//! Both reconnect on their own after Redis restarts or the cluster moves slots.

use ::redis::aio::{ConnectionLike, ConnectionManager};
use ::redis::cluster_async::ClusterConnection;
use ::redis::{Cmd, Pipeline, RedisFuture, Value};

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
    fn certificates(&self) -> ::redis::TlsCertificates {
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

/// A connection to a single Redis or to a Redis Cluster.
#[derive(Clone)]
pub enum RedisConn {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

impl RedisConn {
    /// Connects to `url`; a node with `cluster_enabled:1` gets a cluster connection that follows
    /// the cluster's slot map from there.
    pub async fn connect(url: &str, tls: Option<&RedisTls>) -> Result<Self, ::redis::RedisError> {
        let client = client(url, tls)?;
        let mut probe = client.get_multiplexed_async_connection().await?;
        let info: String = ::redis::cmd("INFO")
            .arg("cluster")
            .query_async(&mut probe)
            .await?;
        if info.lines().any(|l| l.trim() == "cluster_enabled:1") {
            let mut cluster = ::redis::cluster::ClusterClient::builder(vec![url]);
            if let Some(tls) = tls {
                cluster = cluster.certs(tls.certificates());
            }
            let cluster = cluster.build()?;
            return Ok(Self::Cluster(cluster.get_async_connection().await?));
        }
        Ok(Self::Single(client.get_connection_manager().await?))
    }

    /// Whether this is a Redis Cluster.
    pub fn is_cluster(&self) -> bool {
        matches!(self, Self::Cluster(_))
    }
}

impl ConnectionLike for RedisConn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Self::Single(c) => c.req_packed_command(cmd),
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
            Self::Cluster(c) => c.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Self::Single(c) => c.get_db(),
            Self::Cluster(c) => c.get_db(),
        }
    }
}

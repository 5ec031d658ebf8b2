//! One connection type for a single Redis (a primary, or an address that always reaches the
//! primary, as Sentinel setups provide) and for a Redis Cluster, chosen by asking the server.
//! Both reconnect on their own after Redis restarts or the cluster moves slots.

use ::redis::aio::{ConnectionLike, ConnectionManager};
use ::redis::cluster_async::ClusterConnection;
use ::redis::{Cmd, Pipeline, RedisFuture, Value};

/// A connection to a single Redis or to a Redis Cluster.
#[derive(Clone)]
pub enum RedisConn {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

impl RedisConn {
    /// Connects to `url`; a node with `cluster_enabled:1` gets a cluster connection that follows
    /// the cluster's slot map from there.
    pub async fn connect(url: &str) -> Result<Self, ::redis::RedisError> {
        let client = ::redis::Client::open(url)?;
        let mut probe = client.get_multiplexed_async_connection().await?;
        let info: String = ::redis::cmd("INFO")
            .arg("cluster")
            .query_async(&mut probe)
            .await?;
        if info.lines().any(|l| l.trim() == "cluster_enabled:1") {
            let cluster = ::redis::cluster::ClusterClient::new(vec![url])?;
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

//! What a Redis server keeps across a crash, checked before a node uses it.

use super::redis_error;
use crate::store::{StoreError, redact};

/// What a Redis server keeps across a crash, read at start-up.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Durability {
    /// `appendonly yes`.
    pub aof: bool,
    /// `appendfsync` (`always`, `everysec`, `no`), when CONFIG GET is allowed.
    pub appendfsync: Option<String>,
    /// Connected replicas.
    pub replicas: u32,
}

/// Reads the persistence and replication settings of the primary that holds the keyspace of
/// `keys` (on a Redis Cluster, the primary of its slot); refuses one with neither an
/// append-only file nor a replica unless `allow_volatile`.
pub async fn check_durability(
    url: &str,
    tls: Option<&super::RedisTls>,
    keys: &super::Keys,
    allow_volatile: bool,
) -> Result<Durability, StoreError> {
    let err = redis_error(url);
    let mut conn = super::RedisConn::connect(url, tls, super::Patience::default())
        .await
        .map_err(&err)?;
    let slot = keys.lease();
    let info = |section: &'static str| ::redis::cmd("INFO").arg(section).clone();
    let persistence: String = conn
        .on_primary_of(slot, info("persistence"))
        .await
        .map_err(&err)?;
    let replication: String = conn
        .on_primary_of(slot, info("replication"))
        .await
        .map_err(&err)?;
    let field = |text: &str, name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .map(|v| v.trim().to_string())
    };
    let aof = field(&persistence, "aof_enabled").as_deref() == Some("1");
    let replicas = field(&replication, "connected_slaves")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let appendfsync = conn
        .on_primary_of::<Vec<String>>(
            slot,
            ::redis::cmd("CONFIG").arg("GET").arg("appendfsync").clone(),
        )
        .await
        .ok()
        .and_then(|v| v.get(1).cloned());
    let found = Durability {
        aof,
        appendfsync,
        replicas,
    };
    if !aof && replicas == 0 && !allow_volatile {
        return Err(StoreError::Redis(format!(
            "{} has neither an append-only file nor replicas, so acknowledged results would not \
             survive its restart: set `appendonly yes` and `appendfsync everysec` (or `always`) \
             in redis.conf, or run replicas with [cluster] wait_replicas, or set \
             [cluster] allow_volatile = true for tests",
            redact(url)
        )));
    }
    Ok(found)
}

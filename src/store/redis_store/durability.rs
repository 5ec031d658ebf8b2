//! What a Redis server keeps across a crash, checked before a node uses it.

use super::redis_error;
use crate::store::{StoreError, redact};

/// What a Redis server keeps across a crash, read at start-up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Durability {
    /// `appendonly yes`.
    pub aof: bool,
    /// `appendfsync` (`always`, `everysec`, `no`), when CONFIG GET is allowed.
    pub appendfsync: Option<String>,
    /// Connected replicas.
    pub replicas: u32,
}

/// Reads the server's persistence and replication settings; refuses a Redis with neither an
/// append-only file nor a replica unless `allow_volatile`.
pub async fn check_durability(
    url: &str,
    tls: Option<&super::RedisTls>,
    allow_volatile: bool,
) -> Result<Durability, StoreError> {
    let err = redis_error(url);
    let client = super::conn::primary_client(url, tls).await.map_err(&err)?;
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .map_err(&err)?;
    let info = |section: &'static str| ::redis::cmd("INFO").arg(section).clone();
    let persistence: String = info("persistence")
        .query_async(&mut conn)
        .await
        .map_err(&err)?;
    let replication: String = info("replication")
        .query_async(&mut conn)
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
    let appendfsync = ::redis::cmd("CONFIG")
        .arg("GET")
        .arg("appendfsync")
        .query_async::<Vec<String>>(&mut conn)
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

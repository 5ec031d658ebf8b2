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
/// `keys` (on a Redis Cluster, the primary of its slot); refuses one that could lose an
/// acknowledged result (see [`refusal`]) unless `allow_volatile`.
pub async fn check_durability(
    url: &str,
    tls: Option<&super::RedisTls>,
    keys: &super::Keys,
    wait_replicas: u32,
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
    match refusal(&found, wait_replicas) {
        Some(why) if !allow_volatile => Err(StoreError::Redis(format!("{}: {why}", redact(url)))),
        _ => Ok(found),
    }
}

/// Why a primary with `found`'s settings could lose an acknowledged result, if it could.
/// Without an append-only file a result lives in the primary's memory only, unless each flush
/// waits for a replica to hold it (`wait_replicas`): replicas alone are not enough, since a
/// `kill -9` of the primary loses what they had not received yet, and a restarted primary
/// with an empty data set makes its replicas empty too.
fn refusal(found: &Durability, wait_replicas: u32) -> Option<String> {
    if found.aof {
        return None;
    }
    let what = "set `appendonly yes` and `appendfsync everysec` (or `always`) in redis.conf, or \
                run replicas with [cluster] wait_replicas = 1 or more (each write acknowledged \
                once that many replicas hold it), or set [cluster] allow_volatile = true for \
                tests";
    if found.replicas == 0 {
        return Some(format!(
            "has neither an append-only file nor replicas, so acknowledged results would not \
             survive its restart: {what}"
        ));
    }
    if wait_replicas == 0 {
        return Some(format!(
            "has no append-only file and [cluster] wait_replicas = 0, so a result is \
             acknowledged before any of its {} replica(s) holds it and a crash of the primary \
             can lose it: {what}",
            found.replicas
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn found(aof: bool, replicas: u32) -> Durability {
        Durability {
            aof,
            appendfsync: None,
            replicas,
        }
    }

    #[test]
    fn a_primary_without_an_append_only_file_needs_writes_to_wait_for_a_replica() {
        // An append-only file is enough on its own.
        assert_eq!(refusal(&found(true, 0), 0), None);
        assert_eq!(refusal(&found(true, 2), 0), None);
        // Without one, replicas count only when each write waits for them.
        assert_eq!(refusal(&found(false, 1), 1), None);
        assert_eq!(refusal(&found(false, 2), 1), None);
        let unwaited = refusal(&found(false, 2), 0).expect("replicas nobody waits for");
        assert!(unwaited.contains("wait_replicas = 0"), "{unwaited}");
        assert!(unwaited.contains("appendonly yes"), "{unwaited}");
        assert!(unwaited.contains("wait_replicas = 1 or more"), "{unwaited}");
        for wait in [0, 1] {
            let bare = refusal(&found(false, 0), wait).expect("neither AOF nor replicas");
            assert!(
                bare.contains("neither an append-only file nor replicas"),
                "{bare}"
            );
            assert!(bare.contains("allow_volatile = true"), "{bare}");
        }
    }
}

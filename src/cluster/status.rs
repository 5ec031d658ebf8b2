//! What a cluster's keys in Redis say about it, for its operators
//! (`matchmaker admin cluster-status`): which node owns the queues and until when, which nodes
//! hold a standby copy, how far the owner's writes have gone, and what Redis keeps across a
//! crash. Read in one script, so the figures are of one moment. One keyspace each: a sharded
//! cluster's tool reads each shard's in turn.

use crate::store::{Durability, Keys, Patience, RedisConn, RedisTls, StoreError, redact};

use super::lease::Owner;

const STATUS: &str = r"
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
return {
  redis.call('GET', KEYS[1]) or '',
  redis.call('PTTL', KEYS[1]),
  redis.call('ZRANGEBYSCORE', KEYS[2], '(' .. now, '+inf', 'WITHSCORES'),
  now,
  redis.call('GET', KEYS[3]) or '0',
  redis.call('GET', KEYS[4]) or '0',
  redis.call('XLEN', KEYS[5]),
  redis.call('HLEN', KEYS[6]),
  redis.call('HLEN', KEYS[7]),
  redis.call('HLEN', KEYS[8]),
  redis.call('HEXISTS', KEYS[9], 'staged')
}
";

/// A cluster as its keys in Redis describe it.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct ClusterStatus {
    pub keyspace: String,
    /// The lease's holder: `None` while no node owns the queues.
    pub owner: Option<OwnerStatus>,
    /// Nodes holding a current standby copy, by node id.
    pub standbys: Vec<StandbyStatus>,
    /// The last fencing token handed out (the owner's, unless the lease is free).
    pub fencing_token: u64,
    /// Flushes the owners have written so far.
    pub flushes: u64,
    /// Entries in the change log standby copies follow.
    pub change_log_entries: u64,
    pub players: u64,
    pub waiting_tickets: u64,
    /// A write too large for one script in progress (a large pool's season reset): its
    /// fields staged so far, and whether it is committed (then being applied, or left for the
    /// next owner to apply, see docs/cluster.md).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub large_write: Option<LargeWrite>,
    /// What the primary holding the keyspace keeps across a crash.
    pub durability: Durability,
}

/// A write in parts in progress.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct LargeWrite {
    pub staged_fields: u64,
    pub committed: bool,
}

/// The lease's holder.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct OwnerStatus {
    pub node_id: String,
    /// Where the other nodes forward calls to.
    pub addr: String,
    pub token: u64,
    /// Until the lease expires unless renewed (renewed every quarter lease).
    pub expires_in_ms: i64,
}

/// A node holding a standby copy.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct StandbyStatus {
    pub node_id: String,
    /// Until its entry lapses unless renewed (renewed every quarter lease).
    pub listed_for_ms: i64,
}

/// Reads the status of the cluster in the keyspace of `keys` on the Redis at `url`.
pub async fn read(
    url: &str,
    tls: Option<&RedisTls>,
    keys: &Keys,
) -> Result<ClusterStatus, StoreError> {
    let err = |e: redis::RedisError| StoreError::Redis(format!("{}: {e}", redact(url)));
    let durability = crate::store::check_durability(url, tls, keys, 0, true).await?;
    let mut conn = RedisConn::connect(url, tls, Patience::default())
        .await
        .map_err(&err)?;
    type Reply = (
        String,
        i64,
        Vec<(String, i64)>,
        i64,
        u64,
        u64,
        u64,
        u64,
        u64,
        u64,
        bool,
    );
    let (lease, pttl, standbys, now, fence, flushes, logged, players, tickets, staged, committed): Reply =
        redis::Script::new(STATUS)
            .key(keys.lease())
            .key(keys.standbys())
            .key(keys.fence())
            .key(keys.change_seq())
            .key(keys.changes())
            .key(keys.players())
            .key(keys.tickets())
            .key(keys.staged())
            .key(keys.meta())
            .invoke_async(&mut conn)
            .await
            .map_err(&err)?;
    Ok(ClusterStatus {
        keyspace: keys.keyspace().to_string(),
        owner: Owner::parse(&lease).map(|o| OwnerStatus {
            node_id: o.node_id,
            addr: o.addr,
            token: o.token,
            expires_in_ms: pttl,
        }),
        standbys: standbys
            .into_iter()
            .map(|(node_id, until)| StandbyStatus {
                node_id,
                listed_for_ms: until - now,
            })
            .collect(),
        fencing_token: fence,
        flushes,
        change_log_entries: logged,
        players,
        waiting_tickets: tickets,
        // The stage's own field (its attempt) is no staged write.
        large_write: (staged > 0 || committed).then(|| LargeWrite {
            staged_fields: staged.saturating_sub(1),
            committed,
        }),
        durability,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn a_write_in_parts_shows_its_staged_fields_and_whether_it_is_committed() {
        let server = crate::store::RedisServer::start().unwrap_or_else(|e| panic!("{e}"));
        let url = server.url();
        let keys = Keys::default();
        assert_eq!(read(&url, None, &keys).await.unwrap().large_write, None);
        let mut conn = redis::Client::open(url.as_str())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        // A stage as a write in parts leaves it: its attempt, then two staged fields.
        let () = redis::cmd("HSET")
            .arg(keys.staged())
            .arg("")
            .arg("1|a|7|00")
            .arg("2:p1")
            .arg("s{}")
            .arg("2:p2")
            .arg("d")
            .query_async(&mut conn)
            .await
            .unwrap();
        let staged = |committed| {
            Some(LargeWrite {
                staged_fields: 2,
                committed,
            })
        };
        assert_eq!(
            read(&url, None, &keys).await.unwrap().large_write,
            staged(false)
        );
        let () = redis::cmd("HSET")
            .arg(keys.meta())
            .arg("staged")
            .arg("1|a|7|00")
            .query_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(
            read(&url, None, &keys).await.unwrap().large_write,
            staged(true)
        );
    }
}

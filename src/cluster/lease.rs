//! The queues' lease: one key in Redis (in the cluster's keyspace) that names the node owning
//! every queue, with a fencing token. Acquire, renew and release are each one Lua script, so
//! they are atomic on the server.
//!
//! The token comes from a counter that only grows (`INCR`), so each new owner's token is larger
//! than every earlier one; the store sends it with every write and Redis refuses writes whose
//! token is not the lease's (Kleppmann, "How to do distributed locking", 2016). Timing only
//! decides when a node *stops trying*; fencing decides what is written.

use std::time::{Duration, Instant};

use crate::store::{Keys, RedisConn};
use redis::Script;

const NODE_KEY_SCRIPT: &str = r"
redis.call('SET', KEYS[1], ARGV[1], 'NX')
return redis.call('GET', KEYS[1])
";

const ACQUIRE: &str = r"
local cur = redis.call('GET', KEYS[1])
if cur then return {0, cur} end
local token = redis.call('INCR', KEYS[2])
local value = token .. '|' .. ARGV[1] .. '|' .. ARGV[2]
redis.call('SET', KEYS[1], value, 'PX', ARGV[3])
return {token, value}
";

const RENEW: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
";

const RELEASE: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
";

const PEEK: &str = r"
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
return {redis.call('GET', KEYS[1]) or '', redis.call('ZCOUNT', KEYS[2], '(' .. now, '+inf')}
";

const MARK_WARM: &str = r"
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
return 1
";

/// Who holds the lease, as its value says: `token|node_id|addr`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Owner {
    pub token: u64,
    pub node_id: String,
    /// Where other nodes forward calls to.
    pub addr: String,
}

impl Owner {
    /// Parses a lease value; `None` for anything else. Fields after the third (a later
    /// release's) are ignored, so the address stays the address.
    pub fn parse(value: &str) -> Option<Self> {
        let mut parts = value.split('|');
        let token = parts.next()?.parse().ok()?;
        let node_id = parts.next()?.to_string();
        let addr = parts.next()?.to_string();
        Some(Self {
            token,
            node_id,
            addr,
        })
    }

    /// The lease value naming this owner.
    pub fn value(&self) -> String {
        format!("{}|{}|{}", self.token, self.node_id, self.addr)
    }
}

/// What an acquire attempt found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Acquired {
    /// This node holds the lease now, with this token.
    Mine(Owner),
    /// Another node holds it (or a value this version cannot read: `None`).
    Theirs(Option<Owner>),
}

/// A lease failure: Redis unreachable or an unexpected answer.
#[derive(Debug, thiserror::Error)]
#[error("lease: {0}")]
pub struct LeaseError(String);

impl From<redis::RedisError> for LeaseError {
    fn from(e: redis::RedisError) -> Self {
        Self(e.to_string())
    }
}

/// The lease operations on one connection, on the lease of one keyspace.
#[derive(Clone)]
pub struct LeaseClient {
    conn: RedisConn,
    lease: Duration,
    keys: Keys,
}

impl LeaseClient {
    pub fn new(conn: RedisConn, lease: Duration, keys: Keys) -> Self {
        Self { conn, lease, keys }
    }

    /// The keyspace's keys.
    pub fn keys(&self) -> &Keys {
        &self.keys
    }

    fn lease_ms(&self) -> u64 {
        self.lease.as_millis() as u64
    }

    /// Takes the lease if nobody holds it.
    pub async fn acquire(&self, node_id: &str, addr: &str) -> Result<Acquired, LeaseError> {
        let (token, value): (u64, String) = Script::new(ACQUIRE)
            .key(self.keys.lease())
            .key(self.keys.fence())
            .arg(node_id)
            .arg(addr)
            .arg(self.lease_ms())
            .invoke_async(&mut self.conn.clone())
            .await?;
        if token == 0 {
            return Ok(Acquired::Theirs(Owner::parse(&value)));
        }
        Owner::parse(&value)
            .map(Acquired::Mine)
            .ok_or_else(|| LeaseError(format!("unreadable lease value {value:?}")))
    }

    /// Extends the lease if `owner` still holds it; `false` when it does not.
    pub async fn renew(&self, owner: &Owner) -> Result<bool, LeaseError> {
        let renewed: i64 = Script::new(RENEW)
            .key(self.keys.lease())
            .arg(owner.value())
            .arg(self.lease_ms())
            .invoke_async(&mut self.conn.clone())
            .await?;
        Ok(renewed == 1)
    }

    /// Gives the lease up (graceful stop), so another node takes the queues at once.
    pub async fn release(&self, owner: &Owner) -> Result<bool, LeaseError> {
        let released: i64 = Script::new(RELEASE)
            .key(self.keys.lease())
            .arg(owner.value())
            .invoke_async(&mut self.conn.clone())
            .await?;
        Ok(released == 1)
    }

    /// The cluster's node key: what a node's front shows the others to be believed about the
    /// client of a call it forwards (see `front`). The one in Redis, or `fresh` when there was
    /// none (the first node to start sets it).
    pub async fn node_key(&self, fresh: &str) -> Result<String, LeaseError> {
        Ok(Script::new(NODE_KEY_SCRIPT)
            .key(self.keys.node_key())
            .arg(fresh)
            .invoke_async(&mut self.conn.clone())
            .await?)
    }

    /// The lease's holder, if any, and how many nodes hold a current standby copy
    /// ([`LeaseClient::mark_warm`]), in one atomic look.
    pub async fn peek(&self) -> Result<(Option<Owner>, u64), LeaseError> {
        let (value, warm): (String, u64) = Script::new(PEEK)
            .key(self.keys.lease())
            .key(self.keys.standbys())
            .invoke_async(&mut self.conn.clone())
            .await?;
        Ok((Owner::parse(&value), warm))
    }

    /// Says that `node_id` holds a current standby copy, for a lease from now (so a node that
    /// died drops out on its own).
    pub async fn mark_warm(&self, node_id: &str) -> Result<(), LeaseError> {
        let _: i64 = Script::new(MARK_WARM)
            .key(self.keys.standbys())
            .arg(node_id)
            .arg(self.lease_ms())
            .invoke_async(&mut self.conn.clone())
            .await?;
        Ok(())
    }

    /// Says that `node_id` no longer holds a copy.
    pub async fn mark_cold(&self, node_id: &str) -> Result<(), LeaseError> {
        let _: i64 = redis::cmd("ZREM")
            .arg(self.keys.standbys())
            .arg(node_id)
            .query_async(&mut self.conn.clone())
            .await?;
        Ok(())
    }

    /// The current holder, if any.
    pub async fn owner(&self) -> Result<Option<Owner>, LeaseError> {
        let value: Option<String> = redis::cmd("GET")
            .arg(self.keys.lease())
            .query_async(&mut self.conn.clone())
            .await?;
        Ok(value.as_deref().and_then(Owner::parse))
    }
}

/// How long a holder may act on a renewal sent at `sent`: the lease runs from when Redis
/// executed the renewal, which is after it was sent, so `sent + lease` is a lower bound of the
/// key's expiry; the margin covers clock-rate differences between the two machines.
pub fn valid_until(sent: Instant, lease: Duration) -> Instant {
    sent + lease - safety_margin(lease)
}

/// A tenth of the lease, at least 50 ms.
pub fn safety_margin(lease: Duration) -> Duration {
    (lease / 10).max(Duration::from_millis(50))
}

/// How often holders renew and others try to take the lease: three tries within a lease.
pub fn renew_every(lease: Duration) -> Duration {
    lease / 4
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_owner_round_trips_through_its_lease_value() {
        let o = Owner {
            token: 42,
            node_id: "mm-a1b2".into(),
            addr: "10.0.0.7:50051".into(),
        };
        assert_eq!(Owner::parse(&o.value()), Some(o));
        assert_eq!(Owner::parse("x|a|b"), None);
        assert_eq!(Owner::parse("7|a"), None);
        // An IPv6 address keeps its colons.
        let v6 = Owner::parse("3|n|[::1]:5").unwrap();
        assert_eq!(v6.addr, "[::1]:5");
        // A later release's extra fields leave the address alone.
        let later = Owner::parse("9|n|10.0.0.7:50051|v2|more").unwrap();
        assert_eq!((later.token, later.addr.as_str()), (9, "10.0.0.7:50051"));
    }

    #[test]
    fn a_holder_stops_before_anyone_else_can_take_over() {
        let lease = Duration::from_millis(3000);
        let sent = Instant::now();
        // The key lives at least `lease` after `sent`; the holder stops acting earlier.
        assert!(valid_until(sent, lease) < sent + lease);
        assert_eq!(valid_until(sent, lease), sent + Duration::from_millis(2700));
        // Renewals come often enough that one lost renewal does not end the lease.
        assert!(renew_every(lease) * 2 < lease - safety_margin(lease));
        // A short lease keeps a usable margin.
        assert_eq!(
            safety_margin(Duration::from_millis(300)),
            Duration::from_millis(50)
        );
    }
}

//! The queues' lease: one key in Redis (in the cluster's keyspace) that names the node owning
//! every queue, with a fencing token. Acquire, renew and release are each one Lua script, so
//! they are atomic on the server.
//!
//! The token comes from a counter that only grows (`INCR`), so each new owner's token is larger
//! than every earlier one; the store sends it with every write and Redis refuses writes whose
//! token is not the lease's (Kleppmann, "How to do distributed locking", 2016). Timing only
//! decides when a node *stops trying*; fencing decides what is written.
//!
//! An owner whose store failed gives the lease up ([`LeaseClient::give_up`]) and may pause it:
//! the first such stop in a while lets the next node take the queues at once (a Redis failover
//! that failed one write); each further stop in a row keeps every node from taking the lease
//! for longer ([`pause_after`]), so that writes that fail on every owner (a replica `WAIT`
//! cannot reach) do not pass the queues round the nodes, each reading the state to fail again.
//! The pause is a key beside the lease that the acquire script honours, on Redis' clock: every
//! node keeps it. Tokens are untouched: a pause only delays the next acquisition.

use std::time::{Duration, Instant};

use crate::store::{Keys, RedisConn};
use redis::Script;

const NODE_KEY_SCRIPT: &str = r"
redis.call('SET', KEYS[1], ARGV[1], 'NX')
return redis.call('GET', KEYS[1])
";

/// Takes the lease (`KEYS[1]`) if nobody holds it and no pause (`KEYS[3]`, see [`GIVE_UP`])
/// runs: `{TOKEN, VALUE, 0}`; else `{0, HOLDER, 0}`, or `{0, '', MS}` while a pause has MS
/// milliseconds to run.
const ACQUIRE: &str = r"
local cur = redis.call('GET', KEYS[1])
if cur then return {0, cur, 0} end
local pause = redis.call('GET', KEYS[3])
if pause then
  local t = redis.call('TIME')
  local now = t[1] * 1000 + math.floor(t[2] / 1000)
  local till = tonumber(string.match(pause, '|(%d+)$'))
  if till and now < till then return {0, '', till - now} end
end
local token = redis.call('INCR', KEYS[2])
local value = token .. '|' .. ARGV[1] .. '|' .. ARGV[2]
redis.call('SET', KEYS[1], value, 'PX', ARGV[3])
return {token, value, 0}
";

/// Gives the lease (`KEYS[1]`) up if it still holds `ARGV[1]`, after its owner's store failed,
/// and pauses it: this is stop STOPS in a row (one more than the pause key, `KEYS[2]`, counts,
/// or the first), and no node takes the lease for `ARGV[STOPS + 2]` milliseconds (the last
/// argument for any stop past them). The key, `STOPS|UNTIL_MS` on Redis' clock, lasts the
/// pause plus `ARGV[2]` milliseconds: a stop after that is a first one again.
/// Returns `{1, STOPS, MS}`, or `{0, 0, 0}` when the lease holds another value.
const GIVE_UP: &str = r"
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return {0, 0, 0} end
redis.call('DEL', KEYS[1])
local stops = 1
local before = redis.call('GET', KEYS[2])
if before then stops = (tonumber(string.match(before, '^(%d+)|')) or 0) + 1 end
local pause = tonumber(ARGV[math.min(stops + 2, #ARGV)])
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
redis.call('SET', KEYS[2], stops .. '|' .. (now + pause), 'PX', pause + tonumber(ARGV[2]))
return {1, stops, pause}
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

/// The lease's value (`''` for none), the nodes listed with a current standby copy, and 1
/// while a pause (`KEYS[3]`, see [`GIVE_UP`]) runs.
const PEEK: &str = r"
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local paused = 0
local pause = redis.call('GET', KEYS[3])
if pause then
  local till = tonumber(string.match(pause, '|(%d+)$'))
  if till and now < till then paused = 1 end
end
return {redis.call('GET', KEYS[1]) or '', redis.call('ZCOUNT', KEYS[2], '(' .. now, '+inf'), paused}
";

const MARK_WARM: &str = r"
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
return 1
";

const HEARTBEAT: &str = r"
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
return redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now, '+inf')
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
    /// Nobody holds it, but owners' stores failed: no node takes it for this long yet
    /// ([`LeaseClient::give_up`]).
    Paused(Duration),
}

/// What [`LeaseClient::give_up`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GaveUp {
    /// The lease is free, and no node takes it for `pause`: owners' stores failed `stops`
    /// times in a row.
    Paused { stops: u32, pause: Duration },
    /// The lease had passed to another node already.
    NotHeld,
}

/// The most stops in a row a pause grows with: from then on it stays at its longest.
const PAUSE_STEPS: u32 = 5;

/// How long no node takes the lease after the `stops`-th owner in a row gave it up because its
/// store failed: none after the first, then a lease, doubling up to eight, each less
/// `jitter` (0 to 1) times half of it so that pauses do not fall into step with anything.
pub fn pause_after(stops: u32, lease: Duration, jitter: f64) -> Duration {
    if stops <= 1 {
        return Duration::ZERO;
    }
    let doublings = (stops - 2).min(PAUSE_STEPS - 2);
    (lease * (1 << doublings)).mul_f64(1.0 - jitter.clamp(0.0, 1.0) / 2.0)
}

/// The wait before trying again after `failures` in a row (at least one) of a standby load:
/// a lease, doubling up to 16, less `jitter` (0 to 1) times half of it.
pub fn retry_after(lease: Duration, failures: u32, jitter: f64) -> Duration {
    let doublings = failures.saturating_sub(1).min(4);
    (lease * (1 << doublings)).mul_f64(1.0 - jitter.clamp(0.0, 1.0) / 2.0)
}

/// How long a pause's count of stops outlives the pause: a stop later than that starts again
/// from the first.
pub fn stops_remembered(lease: Duration) -> Duration {
    lease * 20
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
        let (token, value, paused): (u64, String, u64) = Script::new(ACQUIRE)
            .key(self.keys.lease())
            .key(self.keys.fence())
            .key(self.keys.pause())
            .arg(node_id)
            .arg(addr)
            .arg(self.lease_ms())
            .invoke_async(&mut self.conn.clone())
            .await?;
        if token == 0 && paused > 0 {
            return Ok(Acquired::Paused(Duration::from_millis(paused)));
        }
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

    /// Gives the lease up after `owner`'s store failed, pausing it for every node (see
    /// [`pause_after`]).
    pub async fn give_up(&self, owner: &Owner) -> Result<GaveUp, LeaseError> {
        let jitter = rand::random::<f64>();
        let ms = |d: Duration| d.as_millis() as u64;
        let script = Script::new(GIVE_UP);
        let mut invocation = script.key(self.keys.lease());
        invocation
            .key(self.keys.pause())
            .arg(owner.value())
            .arg(ms(stops_remembered(self.lease)));
        for stops in 1..=PAUSE_STEPS {
            invocation.arg(ms(pause_after(stops, self.lease, jitter)));
        }
        let (released, stops, pause): (i64, u32, u64) =
            invocation.invoke_async(&mut self.conn.clone()).await?;
        Ok(if released == 1 {
            GaveUp::Paused {
                stops,
                pause: Duration::from_millis(pause),
            }
        } else {
            GaveUp::NotHeld
        })
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

    /// The lease's holder, if any, how many nodes hold a current standby copy
    /// ([`LeaseClient::mark_warm`]), and whether a pause keeps every node from taking it
    /// ([`LeaseClient::give_up`]), in one atomic look.
    pub async fn peek(&self) -> Result<(Option<Owner>, u64, bool), LeaseError> {
        let (value, warm, paused): (String, u64, u8) = Script::new(PEEK)
            .key(self.keys.lease())
            .key(self.keys.standbys())
            .key(self.keys.pause())
            .invoke_async(&mut self.conn.clone())
            .await?;
        Ok((Owner::parse(&value), warm, paused == 1))
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

    /// Says that `node_id` runs, for `within` from now, and returns every node whose word
    /// holds now (itself among them), in the keyspace's node set ([`Keys::nodes`]).
    pub async fn heartbeat(
        &self,
        node_id: &str,
        within: Duration,
    ) -> Result<Vec<String>, LeaseError> {
        Ok(Script::new(HEARTBEAT)
            .key(self.keys.nodes())
            .arg(node_id)
            .arg(within.as_millis() as u64)
            .invoke_async(&mut self.conn.clone())
            .await?)
    }

    /// Says that `node_id` no longer runs (a graceful stop).
    pub async fn sign_off(&self, node_id: &str) -> Result<(), LeaseError> {
        let _: i64 = redis::cmd("ZREM")
            .arg(self.keys.nodes())
            .arg(node_id)
            .query_async(&mut self.conn.clone())
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
    fn the_lease_pauses_longer_with_each_store_failure_in_a_row_up_to_eight_leases() {
        let lease = Duration::from_millis(3000);
        let pause = |stops| pause_after(stops, lease, 0.0);
        assert_eq!(
            pause(1),
            Duration::ZERO,
            "a first failure hands over at once"
        );
        assert_eq!(pause(2), lease);
        assert_eq!(pause(3), lease * 2);
        assert_eq!(pause(4), lease * 4);
        assert_eq!(pause(5), lease * 8);
        assert_eq!(pause(50), lease * 8, "no longer past that");
        assert_eq!(pause_after(2, lease, 1.0), lease / 2, "at most half less");
        assert_eq!(pause_after(1, lease, 1.0), Duration::ZERO);
        // Stops stay counted through a longest pause and the next owner's first try at
        // loading the state.
        assert!(stops_remembered(lease) > pause(PAUSE_STEPS) * 2);
    }

    #[test]
    fn a_failed_standby_load_waits_longer_each_time_up_to_sixteen_leases() {
        let lease = Duration::from_millis(3000);
        let wait = |failures| retry_after(lease, failures, 0.0);
        assert_eq!(wait(1), lease);
        assert_eq!(wait(2), lease * 2);
        assert_eq!(wait(5), lease * 16);
        assert_eq!(wait(100), lease * 16);
        assert_eq!(retry_after(lease, 1, 1.0), lease / 2);
    }

    async fn redis_lease(redis: &crate::store::RedisServer) -> LeaseClient {
        let conn = RedisConn::connect(&redis.url(), None, crate::store::Patience::default())
            .await
            .unwrap();
        LeaseClient::new(conn, Duration::from_millis(1000), Keys::default())
    }

    #[test]
    fn owners_whose_store_failed_pause_the_lease_for_every_node_and_longer_each_time() {
        let redis = crate::store::RedisServer::start().unwrap_or_else(|e| panic!("{e}"));
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let lease = redis_lease(&redis).await;
            let mine = |acquired| match acquired {
                Acquired::Mine(owner) => owner,
                other => panic!("the lease was free: {other:?}"),
            };
            let a = mine(lease.acquire("a", "addr-a").await.unwrap());
            // A first failure: the lease is free at once, for any node.
            let gave_up = lease.give_up(&a).await.unwrap();
            assert_eq!(
                gave_up,
                GaveUp::Paused {
                    stops: 1,
                    pause: Duration::ZERO
                }
            );
            let b = mine(lease.acquire("b", "addr-b").await.unwrap());
            assert!(b.token > a.token, "tokens still grow");
            // Only the holder gives the lease up.
            assert_eq!(lease.give_up(&a).await.unwrap(), GaveUp::NotHeld);
            // A second in a row: half a lease to a lease, for every node.
            let GaveUp::Paused { stops, pause } = lease.give_up(&b).await.unwrap() else {
                panic!("b held the lease");
            };
            assert_eq!(stops, 2);
            assert!(
                (Duration::from_millis(500)..=Duration::from_millis(1000)).contains(&pause),
                "{pause:?}"
            );
            let mut conn = ::redis::Client::open(redis.url())
                .unwrap()
                .get_multiplexed_async_connection()
                .await
                .unwrap();
            let kept: u64 = ::redis::cmd("PTTL")
                .arg(Keys::default().pause())
                .query_async(&mut conn)
                .await
                .unwrap();
            let remembered = stops_remembered(Duration::from_millis(1000));
            assert!(
                (remembered.as_millis() as u64..=(remembered + pause).as_millis() as u64)
                    .contains(&kept),
                "the count is kept {kept} ms"
            );
            for node in ["a", "b", "c"] {
                match lease.acquire(node, "addr").await.unwrap() {
                    Acquired::Paused(left) => assert!(left <= pause, "{left:?} of {pause:?}"),
                    other => panic!("{node} took a paused lease: {other:?}"),
                }
            }
            assert_eq!(lease.owner().await.unwrap(), None);
            assert_eq!(lease.peek().await.unwrap(), (None, 0, true));
            // Once the pause ran out (here: its end moved back), the lease is taken again, and
            // the next stop in a row pauses longer.
            let () = ::redis::cmd("SET")
                .arg(Keys::default().pause())
                .arg("2|0")
                .query_async(&mut conn)
                .await
                .unwrap();
            assert_eq!(lease.peek().await.unwrap(), (None, 0, false));
            let c = mine(lease.acquire("c", "addr-c").await.unwrap());
            let GaveUp::Paused { stops, pause } = lease.give_up(&c).await.unwrap() else {
                panic!("c held the lease");
            };
            assert_eq!(stops, 3);
            assert!(
                (Duration::from_millis(1000)..=Duration::from_millis(2000)).contains(&pause),
                "{pause:?}"
            );
            // Once the count lapsed (here: deleted), a failure is a first one again; a release
            // that is no failure (a node stopping) counts for nothing.
            let () = ::redis::cmd("DEL")
                .arg(Keys::default().pause())
                .query_async(&mut conn)
                .await
                .unwrap();
            let d = mine(lease.acquire("d", "addr-d").await.unwrap());
            assert!(lease.release(&d).await.unwrap());
            let e = mine(lease.acquire("e", "addr-e").await.unwrap());
            assert_eq!(
                lease.give_up(&e).await.unwrap(),
                GaveUp::Paused {
                    stops: 1,
                    pause: Duration::ZERO
                }
            );
        });
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

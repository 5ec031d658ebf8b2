//! The transport limits besides tower's shed and concurrency layers: the per-caller rate limit
//! and the request-size check. The server's tower layers (`api::layers`) apply them.
//!
//! - [`RateLimiter`]: a token bucket per caller (`[rate_limit]`). The caller is the verified
//!   token's `sub` and role when auth is on, else the client's IP address (IPv6: its /64).
//!   With it, the calls each caller has in flight ([`InFlight`], `[rate_limit.max_in_flight]`).
//! - [`Framing`]: follows the gRPC length prefix of each request message and refuses one bigger
//!   than `server.max_message_bytes` before it is buffered.
//!
//! The arithmetic ([`Bucket`], [`RateLimiter::check`], [`RateLimiter::sweep`], [`Framing`]) is
//! synchronous and takes the time as an argument, so it is unit-tested without a clock.
//!
//! This module owns no business rule beyond the limits: it must not touch state.

use std::fmt;
use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use dashmap::DashMap;
use dashmap::mapref::entry::Entry;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;
use tonic::codegen::http;
use tonic::transport::server::{TcpConnectInfo, TlsConnectInfo};

use crate::auth::{Identity, Role, is_open_path};
use crate::rejection::FieldError;

mod bucket_gauge;
mod in_flight;

use bucket_gauge::BucketGauge;
pub use in_flight::{InFlight, InFlightConfig, Slot, TooManyInFlight};

/// `[rate_limit]`: requests per second per caller, enforced by the server's rate-limit layer.
///
/// A caller is a token's `sub` and role when auth is on, else the client's IP address. Each rate
/// is requests per second; 0 = unlimited. Every caller has a token bucket of
/// `rate × burst_seconds` requests that refills at `rate`.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RateLimitConfig {
    /// Per player token (`sub`).
    pub player: f64,
    /// Per game-server token: trusted infrastructure, unlimited by default.
    pub server: f64,
    /// Per admin token: trusted, unlimited by default.
    pub admin: f64,
    /// Per client IP address when auth is off (IPv6 per /64 network).
    pub anonymous: f64,
    /// Bucket size in seconds of the caller's rate: how long a burst at full speed may last.
    pub burst_seconds: f64,
    /// Calls in flight per caller, by class.
    pub max_in_flight: InFlightConfig,
}

impl Default for RateLimitConfig {
    fn default() -> Self {
        Self {
            player: 20.0,
            server: 0.0,
            admin: 0.0,
            anonymous: 0.0,
            burst_seconds: 2.0,
            max_in_flight: InFlightConfig::default(),
        }
    }
}

impl RateLimitConfig {
    /// Each rate finite and >= 0; `burst_seconds` finite and > 0, and every non-zero rate's
    /// bucket holds at least one request (else that role could never call).
    pub fn validate(&self) -> Result<(), FieldError> {
        let b = self.burst_seconds;
        if !(b.is_finite() && b > 0.0) {
            return Err(FieldError::new(
                "rate_limit.burst_seconds",
                format!("must be finite and > 0 (got {b})"),
            ));
        }
        for (key, rate) in [
            ("rate_limit.player", self.player),
            ("rate_limit.server", self.server),
            ("rate_limit.admin", self.admin),
            ("rate_limit.anonymous", self.anonymous),
        ] {
            if !(rate.is_finite() && rate >= 0.0) {
                return Err(FieldError::new(
                    key,
                    format!("must be finite and >= 0 (0 = unlimited) (got {rate})"),
                ));
            }
            if rate > 0.0 && rate * b < 1.0 {
                return Err(FieldError::new(
                    key,
                    format!(
                        "{rate} × rate_limit.burst_seconds ({b}) must be at least 1 request (or the rate 0)"
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// Which `rate_limit.*` key applies to a caller.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Class {
    Player,
    Server,
    Admin,
    /// No token (auth off): counted per IP address.
    Anonymous,
}

impl Class {
    /// The config key's last part, also the metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Class::Player => "player",
            Class::Server => "server",
            Class::Admin => "admin",
            Class::Anonymous => "anonymous",
        }
    }

    fn index(self) -> usize {
        match self {
            Class::Player => 0,
            Class::Server => 1,
            Class::Admin => 2,
            Class::Anonymous => 3,
        }
    }
}

impl From<Role> for Class {
    fn from(role: Role) -> Self {
        match role {
            Role::Player => Class::Player,
            Role::Server => Class::Server,
            Role::Admin => Class::Admin,
        }
    }
}

/// Who is calling, as the limiter counts: a verified token's subject, or a network address.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Caller {
    Subject {
        role: Role,
        sub: Box<str>,
    },
    /// An IPv4 address, or an IPv6 /64 (one host usually holds a whole /64, so per address
    /// would let it pick a fresh bucket for every call).
    Network(IpAddr),
}

impl Caller {
    /// The caller counted for a peer address: IPv4-mapped IPv6 as IPv4, other IPv6 as its /64.
    pub fn network(ip: IpAddr) -> Self {
        Caller::Network(match ip.to_canonical() {
            IpAddr::V6(v6) => IpAddr::V6((v6.to_bits() & !u128::from(u64::MAX)).into()),
            v4 => v4,
        })
    }

    fn class(&self) -> Class {
        match self {
            Caller::Subject { role, .. } => Class::from(*role),
            Caller::Network(_) => Class::Anonymous,
        }
    }
}

impl fmt::Display for Caller {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Caller::Subject { role, sub } => write!(f, "{} {sub}", Class::from(*role).as_str()),
            Caller::Network(ip @ IpAddr::V6(_)) => write!(f, "{ip}/64"),
            Caller::Network(ip) => write!(f, "{ip}"),
        }
    }
}

/// One class's rate and bucket size.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Limit {
    /// Requests per second the bucket refills (> 0).
    pub per_second: f64,
    /// Requests the bucket holds: `per_second × burst_seconds` (>= 1, checked by config).
    pub capacity: f64,
}

/// A token bucket: `tokens` requests may come now; it refills at the limit's rate up to its
/// capacity.
#[derive(Clone, Copy, Debug)]
pub struct Bucket {
    tokens: f64,
    updated: Instant,
}

impl Bucket {
    /// A new caller's bucket: full.
    #[must_use]
    pub fn full(limit: Limit, now: Instant) -> Self {
        Self {
            tokens: limit.capacity,
            updated: now,
        }
    }

    fn refill(&mut self, limit: Limit, now: Instant) {
        let elapsed = now.saturating_duration_since(self.updated).as_secs_f64();
        self.tokens = (self.tokens + elapsed * limit.per_second).min(limit.capacity);
        self.updated = self.updated.max(now);
    }

    /// Takes one request's token, or says how long until one is back.
    pub fn take(&mut self, limit: Limit, now: Instant) -> Result<(), Duration> {
        self.refill(limit, now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            Ok(())
        } else {
            let wait = (1.0 - self.tokens) / limit.per_second;
            Err(Duration::try_from_secs_f64(wait).unwrap_or(Duration::MAX))
        }
    }

    /// Whether the bucket has refilled by `now`. Forgetting a full bucket changes nothing (a
    /// caller seen for the first time starts full), so the sweep drops exactly these.
    #[must_use]
    pub fn is_full(&self, limit: Limit, now: Instant) -> bool {
        let mut b = *self;
        b.refill(limit, now);
        b.tokens >= limit.capacity
    }
}

/// Why the rate-limit layer refused a call.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum Refused {
    #[error(transparent)]
    Rate(#[from] RateLimited),
    #[error(transparent)]
    InFlight(#[from] TooManyInFlight),
}

impl Refused {
    /// The class of the caller refused, the metric label.
    pub fn class(&self) -> Class {
        match self {
            Refused::Rate(r) => r.class,
            Refused::InFlight(r) => r.class,
        }
    }
}

/// A call refused by the rate limit. Its text is the RESOURCE_EXHAUSTED message.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error(
    "rate limit: {caller} exceeded rate_limit.{} ({} requests/s, burst {}); retry in {} ms",
    class.as_str(), limit.per_second, round3(limit.capacity), retry_after.as_millis().max(1)
)]
pub struct RateLimited {
    pub caller: String,
    pub class: Class,
    pub limit: Limit,
    pub retry_after: Duration,
}

/// `0.3 × 10` shows as `3`, not `3.0000000000000004`.
fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// Fewest limited calls between two sweeps of idle buckets.
const MIN_CALLS_BETWEEN_SWEEPS: usize = 1024;

/// The buckets of every limited caller.
///
/// Memory bound: a sweep drops every full bucket (a caller idle for `burst_seconds` has a full
/// one), leaving `L` buckets, the callers seen in the last `burst_seconds`. The next sweep comes
/// after `max(1024, L)` limited calls, each adding at most one bucket, so the map never holds
/// more than `2L + 1024` buckets, and the sweep's work is O(1) per call amortized. No timer task:
/// with no calls nothing grows.
///
/// The buckets held are the [`crate::telemetry::RATE_LIMIT_BUCKETS`] gauge, set as each is added
/// or swept.
pub struct RateLimiter {
    limits: [Option<Limit>; 4],
    in_flight: InFlight,
    buckets: DashMap<Caller, Bucket>,
    gauge: BucketGauge,
    calls_since_sweep: AtomicUsize,
    calls_between_sweeps: AtomicUsize,
}

impl RateLimiter {
    /// The limiter for `config`, or `None` when no rate or in-flight limit can apply (the server
    /// then installs no layer, so the hot path pays nothing). With auth on, only token holders
    /// get past the auth layer to a limited method, so `anonymous` never applies; with auth off
    /// no request carries a token, so only `anonymous` does. So the defaults (player 20/s and 16
    /// in flight, the rest unlimited) install no layer on a server without auth.
    ///
    /// `shard` is the keyspace of the shard whose engine the limiter serves, the label of its
    /// buckets gauge.
    pub fn from_config(config: &RateLimitConfig, auth_enabled: bool, shard: &str) -> Option<Self> {
        let limit = |per_second: f64, applies: bool| {
            (applies && per_second > 0.0).then_some(Limit {
                per_second,
                capacity: per_second * config.burst_seconds,
            })
        };
        let limits = [
            limit(config.player, auth_enabled),
            limit(config.server, auth_enabled),
            limit(config.admin, auth_enabled),
            limit(config.anonymous, !auth_enabled),
        ];
        let in_flight = InFlight::new(&config.max_in_flight, auth_enabled);
        (limits.iter().any(Option::is_some) || in_flight.any()).then(|| Self {
            limits,
            in_flight,
            buckets: DashMap::new(),
            gauge: BucketGauge::new(shard),
            calls_since_sweep: AtomicUsize::new(0),
            calls_between_sweeps: AtomicUsize::new(MIN_CALLS_BETWEEN_SWEEPS),
        })
    }

    /// This limiter as a cluster engine's, which stops with `engine_stop`: from then on it
    /// leaves the buckets gauge to the node, which zeroes it (the next owner counts the callers).
    #[must_use]
    pub fn for_engine(self, engine_stop: CancellationToken) -> Self {
        Self {
            gauge: self.gauge.until(engine_stop),
            ..self
        }
    }

    /// The limit of a class; `None` = unlimited.
    pub fn limit(&self, class: Class) -> Option<Limit> {
        self.limits[class.index()]
    }

    /// Buckets held now.
    pub fn len(&self) -> usize {
        self.buckets.len()
    }

    /// Whether no caller holds a bucket.
    pub fn is_empty(&self) -> bool {
        self.buckets.is_empty()
    }

    /// Counts one call of `caller` at `now`; sweeps idle buckets every so many calls.
    pub fn check(&self, caller: Caller, now: Instant) -> Result<(), RateLimited> {
        let class = caller.class();
        let Some(limit) = self.limit(class) else {
            return Ok(());
        };
        let mut added = false;
        let taken = {
            let mut entry = match self.buckets.entry(caller) {
                Entry::Occupied(held) => held.into_ref(),
                Entry::Vacant(new) => {
                    added = true;
                    new.insert(Bucket::full(limit, now))
                }
            };
            entry.take(limit, now).map_err(|retry_after| RateLimited {
                caller: entry.key().to_string(),
                class,
                limit,
                retry_after,
            })
        };
        // The entry's shard lock is released: the sweep locks every shard in turn.
        if added {
            self.gauge.added();
        }
        self.maybe_sweep(now);
        taken
    }

    /// The calls in flight per caller.
    pub fn in_flight(&self) -> &InFlight {
        &self.in_flight
    }

    /// Counts one call of the request's caller: its verified [`Identity`] (the auth layer runs
    /// first), else its peer address. Health and reflection are exempt, and so is a request with
    /// neither (no TCP peer: nothing to key on).
    pub fn check_request<B>(
        &self,
        request: &http::Request<B>,
        now: Instant,
    ) -> Result<(), RateLimited> {
        match self.caller(request) {
            Some(caller) => self.check(caller, now),
            None => Ok(()),
        }
    }

    /// Admits one call of the request's caller (as [`RateLimiter::check_request`] counts it):
    /// a slot of its calls in flight, to be held until the call's answer starts (`None` for an
    /// unlimited class), then a token of its bucket. A refused call holds neither.
    pub fn admit<B>(
        &self,
        request: &http::Request<B>,
        now: Instant,
    ) -> Result<Option<Slot>, Refused> {
        let Some(caller) = self.caller(request) else {
            return Ok(None);
        };
        let slot = self.in_flight.enter(&caller)?;
        self.check(caller, now)?;
        Ok(slot)
    }

    /// Who a request counts as, if a limit can apply to it.
    fn caller<B>(&self, request: &http::Request<B>) -> Option<Caller> {
        if is_open_path(request.uri().path()) {
            return None;
        }
        let extensions = request.extensions();
        // The class first: an unlimited caller costs no allocation and no map access.
        let limited = |class| self.limit(class).is_some() || self.in_flight.limit(class).is_some();
        match extensions.get::<Identity>() {
            Some(identity) => limited(Class::from(identity.role)).then(|| Caller::Subject {
                role: identity.role,
                sub: identity.sub.as_str().into(),
            }),
            None => {
                if !limited(Class::Anonymous) {
                    return None;
                }
                Some(Caller::network(peer_ip(extensions)?))
            }
        }
    }

    fn maybe_sweep(&self, now: Instant) {
        let calls = self.calls_since_sweep.fetch_add(1, Ordering::Relaxed) + 1;
        if calls < self.calls_between_sweeps.load(Ordering::Relaxed) {
            return;
        }
        // Whoever resets the count sweeps; a racing caller sees a small count and goes on.
        if self.calls_since_sweep.swap(0, Ordering::AcqRel)
            < self.calls_between_sweeps.load(Ordering::Relaxed)
        {
            return;
        }
        let left = self.sweep(now);
        self.calls_between_sweeps
            .store(left.max(MIN_CALLS_BETWEEN_SWEEPS), Ordering::Relaxed);
    }

    /// Drops every bucket that is full at `now` (its caller was idle for `burst_seconds`);
    /// returns how many are left.
    pub fn sweep(&self, now: Instant) -> usize {
        let mut swept = 0;
        self.buckets.retain(|caller, bucket| {
            let keep = match self.limit(caller.class()) {
                Some(limit) => !bucket.is_full(limit, now),
                None => false,
            };
            swept += usize::from(!keep);
            keep
        });
        self.gauge.swept(swept);
        self.buckets.len()
    }
}

/// A request message bigger than `server.max_message_bytes`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("request message of {length} bytes exceeds server.max_message_bytes ({limit} bytes)")]
pub struct MessageTooLarge {
    pub length: usize,
    pub limit: usize,
}

/// Follows the gRPC message framing (1 flag byte, 4-byte big-endian length, message) across the
/// body's data chunks, however they are split, and checks each message's length.
#[derive(Clone, Debug)]
pub struct Framing {
    limit: usize,
    prefix: [u8; 5],
    prefix_len: usize,
    message_left: usize,
}

impl Framing {
    /// Framing at the start of a request body.
    #[must_use]
    pub fn new(limit: usize) -> Self {
        Self {
            limit,
            prefix: [0; 5],
            prefix_len: 0,
            message_left: 0,
        }
    }

    /// Reads the next chunk of the body; fails at the first prefix announcing too large a
    /// message.
    pub fn scan(&mut self, mut data: &[u8]) -> Result<(), MessageTooLarge> {
        while !data.is_empty() {
            if self.message_left > 0 {
                let skip = self.message_left.min(data.len());
                self.message_left -= skip;
                data = &data[skip..];
                continue;
            }
            let take = (self.prefix.len() - self.prefix_len).min(data.len());
            self.prefix[self.prefix_len..self.prefix_len + take].copy_from_slice(&data[..take]);
            self.prefix_len += take;
            data = &data[take..];
            if self.prefix_len == self.prefix.len() {
                self.prefix_len = 0;
                let [_, a, b, c, d] = self.prefix;
                let length =
                    usize::try_from(u32::from_be_bytes([a, b, c, d])).unwrap_or(usize::MAX);
                if length > self.limit {
                    return Err(MessageTooLarge {
                        length,
                        limit: self.limit,
                    });
                }
                self.message_left = length;
            }
        }
        Ok(())
    }
}

/// The IP address of the client a request came from: its TCP peer (a cluster node's front puts
/// the forwarding node's client here, see `cluster::front`), if it has one.
pub fn peer_ip(extensions: &http::Extensions) -> Option<IpAddr> {
    // tonic 0.14 puts `TcpConnectInfo` in the extensions, under TLS too (besides
    // `TlsConnectInfo`); the second lookup only guards against that changing.
    extensions
        .get::<TcpConnectInfo>()
        .and_then(TcpConnectInfo::remote_addr)
        .or_else(|| {
            extensions
                .get::<TlsConnectInfo<TcpConnectInfo>>()
                .and_then(|tls| tls.get_ref().remote_addr())
        })
        .map(|a| a.ip())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limiter(player: f64, burst_seconds: f64) -> RateLimiter {
        limiter_of("eu", player, burst_seconds)
    }

    /// A limiter of the engine of shard `shard`.
    fn limiter_of(shard: &str, player: f64, burst_seconds: f64) -> RateLimiter {
        RateLimiter::from_config(
            &RateLimitConfig {
                player,
                server: 0.0,
                admin: 0.0,
                anonymous: 0.0,
                burst_seconds,
                max_in_flight: InFlightConfig::default(),
            },
            true,
            shard,
        )
        .expect("a limited class")
    }

    fn player(sub: &str) -> Caller {
        Caller::Subject {
            role: Role::Player,
            sub: sub.into(),
        }
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn a_full_bucket_allows_its_burst_then_refuses_until_it_refills() {
        let limit = Limit {
            per_second: 10.0,
            capacity: 20.0,
        };
        let t0 = Instant::now();
        let mut b = Bucket::full(limit, t0);
        for _ in 0..20 {
            assert_eq!(b.take(limit, t0), Ok(()));
        }
        let wait = b.take(limit, t0).unwrap_err();
        assert!((wait.as_secs_f64() - 0.1).abs() < 1e-9, "{wait:?}");
        // Half a token back is not enough; a whole one is.
        assert!(b.take(limit, t0 + ms(50)).is_err());
        assert_eq!(b.take(limit, t0 + ms(100)), Ok(()));
        assert!(b.take(limit, t0 + ms(100)).is_err());
        // A long pause refills to the capacity, not beyond.
        let later = t0 + Duration::from_secs(3600);
        assert!(b.is_full(limit, later));
        for _ in 0..20 {
            assert_eq!(b.take(limit, later), Ok(()));
        }
        assert!(b.take(limit, later).is_err());
    }

    #[test]
    fn a_clock_going_backwards_takes_nothing_back() {
        let limit = Limit {
            per_second: 1.0,
            capacity: 1.0,
        };
        let t0 = Instant::now() + Duration::from_secs(10);
        let mut b = Bucket::full(limit, t0);
        assert_eq!(b.take(limit, t0), Ok(()));
        assert!(b.take(limit, t0 - Duration::from_secs(5)).is_err());
        assert_eq!(b.take(limit, t0 + Duration::from_secs(1)), Ok(()));
    }

    #[test]
    fn callers_have_their_own_buckets_and_the_refusal_names_the_limit() {
        let l = limiter(5.0, 1.0);
        let t0 = Instant::now();
        for _ in 0..5 {
            l.check(player("p1"), t0).unwrap();
        }
        let refused = l.check(player("p1"), t0).unwrap_err();
        assert_eq!(refused.class, Class::Player);
        let text = refused.to_string();
        assert!(
            text.starts_with("rate limit: player p1 exceeded rate_limit.player (5 requests/s"),
            "{text}"
        );
        assert!(text.contains("retry in 200 ms"), "{text}");
        l.check(player("p2"), t0)
            .expect("another player has its own bucket");
        let odd = limiter(0.3, 10.0);
        for _ in 0..3 {
            odd.check(player("p1"), t0).unwrap();
        }
        let text = odd.check(player("p1"), t0).unwrap_err().to_string();
        assert!(text.contains("(0.3 requests/s, burst 3)"), "{text}");
        // The same sub under another role is another caller, and servers are unlimited here.
        let server = Caller::Subject {
            role: Role::Server,
            sub: "p1".into(),
        };
        for _ in 0..100 {
            l.check(server.clone(), t0).unwrap();
        }
        // Unlimited classes hold no bucket.
        assert_eq!(l.len(), 2);
    }

    #[test]
    fn no_limiter_when_no_rate_can_apply() {
        let defaults = RateLimitConfig::default();
        assert!(RateLimiter::from_config(&defaults, true, "mm").is_some());
        // Without auth only `anonymous` can apply, and it is 0 by default.
        assert!(RateLimiter::from_config(&defaults, false, "mm").is_none());
        let only_anonymous = RateLimitConfig {
            player: 0.0,
            anonymous: 5.0,
            max_in_flight: InFlightConfig {
                player: 0,
                ..InFlightConfig::default()
            },
            ..defaults.clone()
        };
        assert!(RateLimiter::from_config(&only_anonymous, false, "mm").is_some());
        assert!(RateLimiter::from_config(&only_anonymous, true, "mm").is_none());
        // An in-flight limit alone installs the layer.
        let only_in_flight = RateLimitConfig {
            player: 0.0,
            ..defaults
        };
        assert!(RateLimiter::from_config(&only_in_flight, true, "mm").is_some());
    }

    #[test]
    fn the_sweep_drops_exactly_the_idle_buckets() {
        let l = limiter(5.0, 1.0);
        let t0 = Instant::now();
        for i in 0..500 {
            l.check(player(&format!("idle{i}")), t0).unwrap();
        }
        l.check(player("busy"), t0 + ms(900)).unwrap();
        assert_eq!(l.len(), 501);
        // Not yet refilled: nothing is forgotten (a throttled caller keeps its debt).
        assert_eq!(l.sweep(t0 + ms(100)), 501);
        // One second (burst_seconds) after their call the idle buckets are full again.
        assert_eq!(l.sweep(t0 + ms(1000)), 1);
        assert_eq!(l.sweep(t0 + ms(1900)), 0);
        assert!(l.is_empty());
    }

    /// The buckets gauge of shard `shard` in `recorder`'s page.
    fn buckets_gauge(
        recorder: &metrics_exporter_prometheus::PrometheusRecorder,
        shard: &str,
    ) -> Option<f64> {
        let page = recorder.handle().render();
        let series = format!(
            "{}{{shard=\"{shard}\"}} ",
            crate::telemetry::RATE_LIMIT_BUCKETS
        );
        page.lines()
            .find_map(|l| l.strip_prefix(&series)?.parse().ok())
    }

    #[test]
    fn the_buckets_gauge_is_the_buckets_held_until_the_engine_stops() {
        let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
        let stop = CancellationToken::new();
        let l = limiter(1.0, 1.0).for_engine(stop.clone());
        let t0 = Instant::now();
        metrics::with_local_recorder(&recorder, || {
            l.check(player("a"), t0).unwrap();
            l.check(player("b"), t0 + ms(500)).unwrap();
            // A caller already held adds nothing, refused or not.
            assert!(l.check(player("a"), t0 + ms(600)).is_err());
        });
        // Between sweeps: what is held, not what the last sweep left (nothing yet).
        assert_eq!(buckets_gauge(&recorder, "eu"), Some(2.0));
        metrics::with_local_recorder(&recorder, || assert_eq!(l.sweep(t0 + ms(1200)), 1));
        assert_eq!(buckets_gauge(&recorder, "eu"), Some(1.0));
        // Another shard's engine on the same node keeps a gauge of its own.
        let other = limiter_of("mm", 1.0, 1.0);
        metrics::with_local_recorder(&recorder, || other.check(player("z"), t0).unwrap());
        assert_eq!(buckets_gauge(&recorder, "mm"), Some(1.0));

        // The engine stops: its node zeroes the gauge, and the limiter, which its last calls
        // may still reach, leaves it at zero.
        stop.cancel();
        metrics::with_local_recorder(&recorder, || {
            crate::telemetry::engine_stopped("eu", []);
            l.check(player("c"), t0 + ms(1700)).unwrap();
            l.sweep(t0 + ms(5000));
        });
        assert_eq!(buckets_gauge(&recorder, "eu"), Some(0.0));
        assert!(l.is_empty());
        assert_eq!(
            buckets_gauge(&recorder, "mm"),
            Some(1.0),
            "the other shard's engine still holds its caller"
        );
    }

    #[test]
    fn a_flood_of_distinct_callers_stays_bounded() {
        // 1,000 new callers a second, each calling once, for 50 seconds: 50,000 callers, of whom
        // about 1,000 (one burst_seconds' worth) are recent at any time.
        let l = limiter(5.0, 1.0);
        let t0 = Instant::now();
        let mut most = 0;
        for i in 0..50_000u64 {
            l.check(player(&format!("c{i}")), t0 + ms(i)).unwrap();
            most = most.max(l.len());
        }
        assert!(most <= 2 * 1000 + MIN_CALLS_BETWEEN_SWEEPS + 1, "{most}");
    }

    #[test]
    fn networks_are_ipv4_addresses_and_ipv6_slash_64s() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert_eq!(
            Caller::network(ip("2001:db8:1:2:aaaa::1")),
            Caller::network(ip("2001:db8:1:2:bbbb::9"))
        );
        assert_ne!(
            Caller::network(ip("2001:db8:1:2::1")),
            Caller::network(ip("2001:db8:1:3::1"))
        );
        assert_eq!(
            Caller::network(ip("::ffff:10.0.0.1")),
            Caller::network(ip("10.0.0.1"))
        );
        assert_eq!(
            Caller::network(ip("2001:db8:1:2::1")).to_string(),
            "2001:db8:1:2::/64"
        );
    }

    fn request(path: &str, identity: Option<Identity>) -> http::Request<()> {
        let mut r = http::Request::builder().uri(path).body(()).unwrap();
        r.extensions_mut().insert(TcpConnectInfo {
            local_addr: None,
            remote_addr: Some("10.1.2.3:4000".parse().unwrap()),
        });
        if let Some(id) = identity {
            r.extensions_mut().insert(id);
        }
        r
    }

    const ENTER: &str = "/matchmaker.v1.ClientService/EnterQueue";

    #[test]
    fn without_auth_callers_are_counted_per_address_and_health_is_not_counted() {
        let config = RateLimitConfig {
            anonymous: 1.0,
            burst_seconds: 1.0,
            ..RateLimitConfig::default()
        };
        let l = RateLimiter::from_config(&config, false, "mm").unwrap();
        let t0 = Instant::now();
        for _ in 0..10 {
            l.check_request(&request("/grpc.health.v1.Health/Check", None), t0)
                .unwrap();
            l.check_request(
                &request(
                    "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
                    None,
                ),
                t0,
            )
            .unwrap();
        }
        assert!(l.is_empty());
        l.check_request(&request(ENTER, None), t0).unwrap();
        let e = l.check_request(&request(ENTER, None), t0).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("rate limit: 10.1.2.3 exceeded rate_limit.anonymous (1 requests/s"),
            "{e}"
        );
    }

    #[test]
    fn with_auth_callers_are_counted_per_identity_and_unlimited_roles_not_at_all() {
        let l = limiter(1.0, 1.0);
        let t0 = Instant::now();
        let admin = Identity {
            sub: "root".into(),
            role: Role::Admin,
        };
        for _ in 0..10 {
            l.check_request(&request(ENTER, Some(admin.clone())), t0)
                .unwrap();
        }
        assert!(l.is_empty());
        let p1 = Identity {
            sub: "p1".into(),
            role: Role::Player,
        };
        l.check_request(&request(ENTER, Some(p1.clone())), t0)
            .unwrap();
        let e = l.check_request(&request(ENTER, Some(p1)), t0).unwrap_err();
        assert_eq!(e.caller, "player p1");
        // Same address, another player: its own bucket.
        let p2 = Identity {
            sub: "p2".into(),
            role: Role::Player,
        };
        l.check_request(&request(ENTER, Some(p2)), t0).unwrap();
    }

    #[test]
    fn a_call_holds_an_in_flight_slot_only_when_admitted() {
        let config = RateLimitConfig {
            player: 1.0,
            burst_seconds: 3.0,
            max_in_flight: InFlightConfig {
                player: 2,
                ..InFlightConfig::default()
            },
            ..RateLimitConfig::default()
        };
        let l = RateLimiter::from_config(&config, true, "mm").unwrap();
        let t0 = Instant::now();
        let p1 = || {
            request(
                ENTER,
                Some(Identity {
                    sub: "p1".into(),
                    role: Role::Player,
                }),
            )
        };
        let first = l.admit(&p1(), t0).unwrap();
        let second = l.admit(&p1(), t0).unwrap();
        assert!(first.is_some() && second.is_some());
        // Two in flight: the third is refused without taking a token of the bucket.
        let e = l.admit(&p1(), t0).unwrap_err();
        assert!(matches!(e, Refused::InFlight(_)), "{e}");
        assert_eq!(e.class(), Class::Player);
        drop(first);
        l.admit(&p1(), t0)
            .expect("the bucket's third token is still there")
            .expect("a slot");
        drop(second);
        // The bucket is empty now: refused by the rate, and the slot taken for it comes back.
        let e = l.admit(&p1(), t0).unwrap_err();
        assert!(matches!(e, Refused::Rate(_)), "{e}");
        assert_eq!(l.in_flight().callers(), 0);
        // Health is never counted; an admin is unlimited.
        assert!(
            l.admit(&request("/grpc.health.v1.Health/Check", None), t0)
                .unwrap()
                .is_none()
        );
        let admin = Identity {
            sub: "root".into(),
            role: Role::Admin,
        };
        assert!(l.admit(&request(ENTER, Some(admin)), t0).unwrap().is_none());
    }

    fn message(flag: u8, length: u32) -> Vec<u8> {
        let mut m = vec![flag];
        m.extend_from_slice(&length.to_be_bytes());
        m.resize(5 + length as usize, 7);
        m
    }

    #[test]
    fn framing_checks_every_message_however_the_chunks_split() {
        let mut body = message(0, 100);
        body.extend(message(0, 4096));
        body.extend(message(0, 10));
        for chunk in [1, 2, 5, 7, 64, 4096, usize::MAX] {
            let mut f = Framing::new(4096);
            for part in body.chunks(chunk.min(body.len())) {
                f.scan(part).unwrap();
            }
        }
        let mut too_big = message(0, 20);
        too_big.extend(message(1, 4097));
        for chunk in [1, 3, 6, 1000] {
            let mut f = Framing::new(4096);
            let failed = too_big
                .chunks(chunk)
                .map(|part| f.scan(part))
                .find(Result::is_err);
            assert_eq!(
                failed,
                Some(Err(MessageTooLarge {
                    length: 4097,
                    limit: 4096
                })),
                "chunks of {chunk}"
            );
        }
        assert_eq!(
            MessageTooLarge {
                length: 4097,
                limit: 4096
            }
            .to_string(),
            "request message of 4097 bytes exceeds server.max_message_bytes (4096 bytes)"
        );
    }
}

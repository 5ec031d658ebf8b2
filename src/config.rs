//! Typed, validated configuration: `config/default.toml` (compiled in), then a user file, then
//! `MATCHMAKER_*` environment variables, then command-line flags. Loaded and validated before any
//! port is bound; passed explicitly, never global.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use figment::Figment;
use figment::providers::{Env, Format, Toml};
use serde::{Deserialize, Serialize};

use crate::auth::AuthConfig;
use crate::limits::RateLimitConfig;
use crate::matching::{BackfillConfig, MatchRule, MatchingConfig, Shape};
use crate::ranking::{RankingConfig, RankingKind};

use crate::rating::SystemConfig;
use crate::rejection::FieldError;
use crate::store::StoreConfig;
use crate::telemetry::TelemetryConfig;

/// The top-level sections of the config, as environment variables name them.
pub const SECTIONS: &[&str] = &[
    "server",
    "store",
    "auth",
    "tls",
    "rate_limit",
    "ranking",
    "season",
    "queues",
    "telemetry",
    "cluster",
    "history",
    "parties",
    "events",
    "audit",
    "results",
    "console",
];

/// The first `MATCHMAKER_<SECTION>__<KEY>` variable among `keys` whose section is not one of
/// [`SECTIONS`]. Variables without `__` (Kubernetes service links such as
/// `MATCHMAKER_SERVICE_HOST`, the binary's own flags) are not config and pass.
fn section_unknown(keys: impl Iterator<Item = std::ffi::OsString>) -> Option<String> {
    keys.filter_map(|k| k.into_string().ok()).find(|key| {
        let Some(rest) = key
            .get(..11)
            .filter(|p| p.eq_ignore_ascii_case("MATCHMAKER_"))
            .map(|_| &key[11..])
        else {
            return false;
        };
        rest.split_once("__")
            .is_some_and(|(section, _)| !SECTIONS.iter().any(|s| s.eq_ignore_ascii_case(section)))
    })
}

/// The defaults shipped with the binary, so `matchmaker serve` works from any directory.
pub const DEFAULT_TOML: &str = include_str!("../config/default.toml");

/// The largest request limit, buffer or queue size the config takes (2^30).
pub const MAX_BUFFER: usize = 1 << 30;

/// A configuration problem, always naming the key and the rule it broke.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// Not TOML, a wrong type or an unknown key (figment names the key).
    #[error("config: {0}")]
    Parse(Box<figment::Error>),
    /// A value that breaks a rule. Not a `source`: the message already says it all, and an
    /// error chain would print it twice.
    #[error("config: {0}")]
    Invalid(FieldError),
}

impl From<FieldError> for ConfigError {
    fn from(e: FieldError) -> Self {
        Self::Invalid(e)
    }
}

impl ConfigError {
    fn invalid(key: impl Into<String>, rule: impl Into<String>) -> Self {
        Self::Invalid(FieldError::new(key, rule))
    }
}

/// Everything the server needs to start.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    pub server: ServerConfig,
    pub store: StoreConfig,
    pub auth: AuthConfig,
    /// TLS for the gRPC listener (rustls). Off by default.
    #[serde(default)]
    pub tls: TlsConfig,
    /// Requests per second per caller; absent = the defaults.
    #[serde(default)]
    pub rate_limit: RateLimitConfig,
    /// Rank-point settings shared by the queues that pick `inversus` or `ladder`.
    #[serde(default)]
    pub ranking: RankingConfig,
    /// Seasons: hard-reset rescale and the Elo migration's legacy-rank table .
    #[serde(default)]
    pub season: crate::ranking::season::SeasonConfig,
    pub queues: BTreeMap<String, QueueConfig>,
    /// Traces over OTLP (off by default).
    #[serde(default)]
    pub telemetry: TelemetryConfig,
    /// Cluster mode on Redis/Valkey (off by default: one embedded node).
    #[serde(default)]
    pub cluster: crate::store::ClusterConfig,
    // --- Records ---
    /// The match history kept per player.
    #[serde(default)]
    pub history: crate::records::HistoryConfig,
    /// `PartyService` parties.
    #[serde(default)]
    pub parties: crate::records::PartyConfig,
    /// The event log `WatchEvents` reads (retention).
    #[serde(default)]
    pub events: crate::store::EventsConfig,
    /// The admin audit log (retention).
    #[serde(default)]
    pub audit: crate::store::AuditConfig,
    /// Result acknowledgements (how long repeated reports are answered).
    #[serde(default)]
    pub results: crate::store::ResultsConfig,
    /// Where this config came from, so `ReloadConfig` and SIGHUP can read it again (`None`:
    /// built without a file; nothing to reload).
    /// The operator console on the metrics listener (`/console/`).
    #[serde(default)]
    pub console: ConsoleConfig,
    #[serde(skip)]
    pub source: Option<ConfigSource>,
}

/// The file and command-line values a config was loaded from.
#[derive(Clone, Debug)]
pub struct ConfigSource {
    pub path: PathBuf,
    pub overrides: Overrides,
}

/// `[console]`: the operator console (`console`). Kept here, not in `console`, which reads the
/// running server and so sits above `config` in the import graph.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ConsoleConfig {
    /// Serve the console on the metrics listener.
    pub enabled: bool,
    /// Seconds between two samples of each queue's numbers for the last-hour charts.
    pub sample_seconds: f64,
}

impl Default for ConsoleConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            sample_seconds: 10.0,
        }
    }
}

impl ConsoleConfig {
    /// The rules; errors name the key.
    pub fn validate(&self) -> Result<(), FieldError> {
        if !(self.sample_seconds.is_finite() && (0.1..=600.0).contains(&self.sample_seconds)) {
            return Err(FieldError::new(
                "console.sample_seconds",
                format!("must be in 0.1..=600 (got {})", self.sample_seconds),
            ));
        }
        Ok(())
    }
}

/// Network, timing and limit settings of the server process.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerConfig {
    pub addr: String,
    /// Empty disables the Prometheus endpoint.
    pub metrics_addr: String,
    pub data_dir: PathBuf,
    pub tick_interval_ms: u64,
    pub max_concurrent_requests: usize,
    pub request_timeout_ms: u64,
    /// The same for the admin calls that change a whole rating pool (`SeasonReset`,
    /// `EndSeason`, `MigrateFromElo`), which take as long as the pool is large.
    #[serde(default = "default_admin_request_timeout_ms")]
    pub admin_request_timeout_ms: u64,
    /// How long a call's request message may take to arrive (the body, to its end) while the
    /// call holds its slots of the concurrency limits; 0 = only the call's deadline.
    #[serde(default = "default_request_body_timeout_ms")]
    pub request_body_timeout_ms: u64,
    pub shutdown_grace_ms: u64,
    /// After the stop signal, how long health reports NOT_SERVING while calls are still served.
    #[serde(default)]
    pub drain_ms: u64,
    /// HTTP/2 PING interval on idle connections, so a dead peer of a long `WatchTicket` or
    /// `ServeMatches` stream is noticed and proxies keep the connection open; 0 = off.
    #[serde(default = "default_keepalive_interval_ms")]
    pub http2_keepalive_interval_ms: u64,
    /// How long a PING may go unanswered before the connection is closed.
    #[serde(default = "default_keepalive_timeout_ms")]
    pub http2_keepalive_timeout_ms: u64,
    /// Also accept grpc-web (HTTP/1.1 and HTTP/2), for browser and WebGL clients.
    #[serde(default)]
    pub grpc_web: bool,
    /// Origins a browser may call from with grpc-web (CORS), e.g. `https://play.example.com`;
    /// `["*"]` allows any. Empty: no CORS headers (same-origin pages and non-browser clients).
    #[serde(default)]
    pub grpc_web_origins: Vec<String>,
    pub command_buffer: usize,
    pub stream_buffer: usize,
    /// Matches buffered per `ServeMatches` stream: the most one game server (or director) can
    /// take per tick, since allocation stops at a full buffer.
    #[serde(default = "default_serve_matches_buffer")]
    pub serve_matches_buffer: usize,
    pub allocation_timeout_seconds: f64,
    pub match_timeout_seconds: f64,
    /// Largest decoded request message in bytes; a bigger one is refused before decoding.
    pub max_message_bytes: usize,
    /// Waiting tickets per queue before EnterQueue answers RESOURCE_EXHAUSTED.
    pub max_tickets_per_queue: usize,
    /// In-flight RPCs on one connection (HTTP/2 streams) before the connection waits.
    pub max_concurrent_requests_per_connection: usize,
    /// Open client connections; further ones wait in the kernel's accept backlog. 0: the
    /// process's open-file limit minus the server's own files (`listener::effective_max_connections`).
    #[serde(default)]
    pub max_connections: usize,
    /// A SEARCHING ticket with no `WatchTicket` stream and no call naming it for this long
    /// expires; 0 turns the heartbeat off.
    #[serde(default = "default_ticket_heartbeat_seconds")]
    pub ticket_heartbeat_seconds: f64,
    /// How long a finished ticket (matched, cancelled, expired) stays readable by `WatchTicket`
    /// and `CancelTicket` after the fact.
    #[serde(default = "default_finished_ticket_retention_seconds")]
    pub finished_ticket_retention_seconds: f64,
}

fn default_admin_request_timeout_ms() -> u64 {
    300_000
}

fn default_request_body_timeout_ms() -> u64 {
    3000
}

fn default_keepalive_interval_ms() -> u64 {
    30_000
}

fn default_keepalive_timeout_ms() -> u64 {
    10_000
}

fn default_serve_matches_buffer() -> usize {
    1024
}

fn default_finished_ticket_retention_seconds() -> f64 {
    120.0
}

fn default_ticket_heartbeat_seconds() -> f64 {
    30.0
}

/// TLS for the gRPC listener: a PEM certificate chain and its PEM private key.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    pub enabled: bool,
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
}

/// One queue: its shape, skill system, ranking and optimizer parameters.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QueueConfig {
    /// `false` leaves the queue out: the compiled-in queues are there, under the user's keys,
    /// unless turned off.
    #[serde(default = "queue_enabled")]
    pub enabled: bool,
    pub teams: u32,
    pub team_size: u32,
    pub max_party_size: u32,
    /// Queues naming the same pool share ratings; defaults to the queue's own name.
    #[serde(default)]
    pub rating_pool: Option<String>,
    pub ranking: RankingKind,
    #[serde(default)]
    pub rating: SystemConfig,
    #[serde(default)]
    pub matching: MatchingConfig,
    /// `[[queues.NAME.rules]]`: what every match of the queue must satisfy beyond skill (game
    /// mode, maps, crossplay, avoid-lists); see `docs/rules.md`. Copied into `matching.rules`
    /// at load.
    #[serde(default)]
    pub rules: Vec<MatchRule>,
    /// Ready-check: seconds every MATCHED ticket has to `AcceptMatch` before the
    /// match goes to a game server; 0 (the default) turns it off.
    #[serde(default)]
    pub ready_check_seconds: f64,
    #[serde(default)]
    pub backfill: BackfillConfig,
    /// How often this queue's optimizer runs (milliseconds, 1..=1000); unset = the server's
    /// `tick_interval_ms`. A slower tick lets a big or rarely played queue gather more tickets
    /// per pass (better matches, longer waits); a faster one answers sooner.
    #[serde(default)]
    pub tick_interval_ms: Option<u64>,
}

impl QueueConfig {
    /// This queue's tick interval in milliseconds, given the server's.
    #[must_use]
    pub fn tick_ms(&self, server_tick_ms: u64) -> u64 {
        self.tick_interval_ms.unwrap_or(server_tick_ms)
    }
}

impl QueueConfig {
    /// The matcher's view of the queue shape.
    pub fn shape(&self) -> Shape {
        Shape {
            teams: self.teams,
            team_size: self.team_size,
        }
    }

    /// Players in one match.
    pub fn players_per_match(&self) -> usize {
        self.teams as usize * self.team_size as usize
    }
}

/// Values given on the command line; each `Some` wins over every other source.
#[derive(Clone, Debug, Default)]
pub struct Overrides {
    pub addr: Option<String>,
    pub metrics_addr: Option<String>,
    pub data_dir: Option<PathBuf>,
}

impl Config {
    /// This config with its secrets hidden, as `matchmaker config` prints it: the HS256 secret
    /// reads `<redacted>` (empty stays empty: none is set), and the URLs that can carry
    /// credentials (Redis, the key set, the trace collector) lose them ([`crate::store::redact`]).
    pub fn redacted(&self) -> Config {
        let mut config = self.clone();
        if !config.auth.jwt_secret.is_empty() {
            config.auth.jwt_secret = "<redacted>".into();
        }
        for url in [
            &mut config.cluster.redis_url,
            &mut config.auth.jwks_url,
            &mut config.telemetry.otlp_endpoint,
        ] {
            *url = crate::store::redact(url);
        }
        config
    }

    /// Loads defaults ← `file` ← `MATCHMAKER_*` environment ← `overrides`, then validates.
    pub fn load(file: Option<&Path>, overrides: &Overrides) -> Result<Self, ConfigError> {
        if let Some(variable) = section_unknown(std::env::vars_os().map(|(k, _)| k)) {
            return Err(ConfigError::invalid(
                &variable,
                format!(
                    "names no config section (sections: {}); a misspelt or removed section would \
                     otherwise be ignored",
                    SECTIONS.join(", ")
                ),
            ));
        }
        Self::load_with_env(file, overrides, Self::environment())
    }

    /// The `MATCHMAKER_<SECTION>__<KEY>` variables that name a config section. Others that
    /// merely share the prefix are not config and are ignored: Kubernetes sets
    /// `MATCHMAKER_PORT`, `MATCHMAKER_SERVICE_HOST` and friends for a Service named
    /// `matchmaker`, and the binary's own `MATCHMAKER_LOG_JSON` and `MATCHMAKER_ADMIN_TOKEN` are
    /// flags. A variable in a known section with an unknown key is still an error.
    fn environment() -> Env {
        Env::prefixed("MATCHMAKER_")
            .filter(|key| {
                let key = key.as_str();
                SECTIONS.iter().any(|section| {
                    key.len() > section.len() + 2
                        && key[..section.len()].eq_ignore_ascii_case(section)
                        && key[section.len()..].starts_with("__")
                })
            })
            .split("__")
    }

    /// Loads from the compiled-in defaults and an optional TOML string only (tests, tools).
    pub fn from_toml_str(user: &str) -> Result<Self, ConfigError> {
        let figment = Figment::new()
            .merge(Toml::string(DEFAULT_TOML))
            .merge(Toml::string(user));
        Self::finish(figment, &Overrides::default())
    }

    fn load_with_env(
        file: Option<&Path>,
        overrides: &Overrides,
        env: Env,
    ) -> Result<Self, ConfigError> {
        let mut figment = Figment::new().merge(Toml::string(DEFAULT_TOML));
        if let Some(path) = file {
            if !path.is_file() {
                return Err(ConfigError::invalid(
                    "--config",
                    format!("file {} does not exist", path.display()),
                ));
            }
            figment = figment.merge(Toml::file(path));
        }
        let mut config = Self::finish(figment.merge(env), overrides)?;
        config.source = file.map(|path| ConfigSource {
            path: path.to_path_buf(),
            overrides: overrides.clone(),
        });
        Ok(config)
    }

    fn finish(figment: Figment, overrides: &Overrides) -> Result<Self, ConfigError> {
        let mut config: Config = figment
            .extract()
            .map_err(|e| ConfigError::Parse(Box::new(e)))?;
        if let Some(addr) = &overrides.addr {
            config.server.addr = addr.clone();
        }
        if let Some(addr) = &overrides.metrics_addr {
            config.server.metrics_addr = addr.clone();
        }
        if let Some(dir) = &overrides.data_dir {
            config.server.data_dir = dir.clone();
        }
        settle_queues(&mut config.queues)?;
        config.validate()?;
        Ok(config)
    }

    /// The gRPC address, parsed (validated by `load`).
    pub fn addr(&self) -> SocketAddr {
        self.server
            .addr
            .parse()
            .expect("server.addr is validated at load")
    }

    /// The metrics address, if the endpoint is enabled.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        (!self.server.metrics_addr.is_empty()).then(|| {
            self.server
                .metrics_addr
                .parse()
                .expect("server.metrics_addr is validated at load")
        })
    }

    /// What a valid config should still tell the operator, one line each, logged at start: a
    /// queue whose ranking lags its rating system ([`crate::ranking::lag_warning`]).
    #[must_use]
    pub fn warnings(&self) -> Vec<String> {
        self.queues
            .iter()
            .filter_map(|(name, q)| {
                crate::ranking::lag_warning(
                    name,
                    q.ranking,
                    q.rating.is_periodic(),
                    q.rating.rating_period_seconds() / 86_400.0,
                )
            })
            .collect()
    }

    /// Every rule a config must satisfy; the error names the key and the rule.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let s = &self.server;
        let addr: SocketAddr = s.addr.parse().map_err(|_| {
            ConfigError::invalid(
                "server.addr",
                format!("must be HOST:PORT with an IP host (got {:?})", s.addr),
            )
        })?;
        if !s.metrics_addr.is_empty() && s.metrics_addr.parse::<SocketAddr>().is_err() {
            return Err(ConfigError::invalid(
                "server.metrics_addr",
                format!(
                    "must be HOST:PORT with an IP host, or empty to disable (got {:?})",
                    s.metrics_addr
                ),
            ));
        }
        if !(1..=1000).contains(&s.tick_interval_ms) {
            return Err(ConfigError::invalid(
                "server.tick_interval_ms",
                format!("must be in 1..=1000 (got {})", s.tick_interval_ms),
            ));
        }
        for (key, value) in [
            ("server.max_concurrent_requests", s.max_concurrent_requests),
            ("server.command_buffer", s.command_buffer),
            ("server.stream_buffer", s.stream_buffer),
            ("server.serve_matches_buffer", s.serve_matches_buffer),
            ("server.max_message_bytes", s.max_message_bytes),
            ("server.max_tickets_per_queue", s.max_tickets_per_queue),
            (
                "server.max_concurrent_requests_per_connection",
                s.max_concurrent_requests_per_connection,
            ),
            ("store.journal_buffer", self.store.journal_buffer),
        ] {
            // Above the bound a channel or semaphore of that size panics (tokio allows about
            // 2^61 permits) or tries to allocate it; nothing sensible needs more.
            if !(1..=MAX_BUFFER).contains(&value) {
                return Err(ConfigError::invalid(
                    key,
                    format!("must be in 1..={MAX_BUFFER} (got {value})"),
                ));
            }
        }
        for (i, origin) in s.grpc_web_origins.iter().enumerate() {
            if origin != "*" && origin.parse::<tonic::codegen::http::HeaderValue>().is_err() {
                return Err(ConfigError::invalid(
                    format!("server.grpc_web_origins[{i}]"),
                    format!(
                        "must be an origin like https://play.example.com or \"*\" (got {origin:?})"
                    ),
                ));
            }
        }
        if !s.grpc_web_origins.is_empty() && !s.grpc_web {
            return Err(ConfigError::invalid(
                "server.grpc_web_origins",
                "needs server.grpc_web = true",
            ));
        }
        if s.http2_keepalive_timeout_ms == 0 {
            return Err(ConfigError::invalid(
                "server.http2_keepalive_timeout_ms",
                "must be at least 1",
            ));
        }
        if s.drain_ms > 600_000 {
            return Err(ConfigError::invalid(
                "server.drain_ms",
                format!("must be at most 600000 (got {})", s.drain_ms),
            ));
        }
        if s.request_timeout_ms == 0 {
            return Err(ConfigError::invalid(
                "server.request_timeout_ms",
                "must be at least 1",
            ));
        }
        if s.admin_request_timeout_ms == 0 {
            return Err(ConfigError::invalid(
                "server.admin_request_timeout_ms",
                "must be at least 1",
            ));
        }
        if !(s.allocation_timeout_seconds.is_finite() && s.allocation_timeout_seconds > 0.0) {
            return Err(ConfigError::invalid(
                "server.allocation_timeout_seconds",
                format!(
                    "must be finite and > 0 (got {})",
                    s.allocation_timeout_seconds
                ),
            ));
        }
        if !(s.match_timeout_seconds.is_finite()
            && s.match_timeout_seconds > s.allocation_timeout_seconds)
        {
            return Err(ConfigError::invalid(
                "server.match_timeout_seconds",
                format!(
                    "must be finite and greater than server.allocation_timeout_seconds ({}) (got {})",
                    s.allocation_timeout_seconds, s.match_timeout_seconds
                ),
            ));
        }
        if !(s.ticket_heartbeat_seconds.is_finite() && s.ticket_heartbeat_seconds >= 0.0) {
            return Err(ConfigError::invalid(
                "server.ticket_heartbeat_seconds",
                format!(
                    "must be finite and >= 0 (0 = off) (got {})",
                    s.ticket_heartbeat_seconds
                ),
            ));
        }
        if !(s.finished_ticket_retention_seconds.is_finite()
            && s.finished_ticket_retention_seconds >= 0.0)
        {
            return Err(ConfigError::invalid(
                "server.finished_ticket_retention_seconds",
                format!(
                    "must be finite and >= 0 (got {})",
                    s.finished_ticket_retention_seconds
                ),
            ));
        }
        if self.store.snapshot_interval_seconds == 0 {
            return Err(ConfigError::invalid(
                "store.snapshot_interval_seconds",
                "must be at least 1",
            ));
        }
        if s.data_dir.as_os_str().is_empty() {
            return Err(ConfigError::invalid("server.data_dir", "must not be empty"));
        }
        self.auth.validate()?;
        if self.tls.enabled {
            for (key, path) in [
                ("tls.cert_file", &self.tls.cert_file),
                ("tls.key_file", &self.tls.key_file),
            ] {
                if !path.is_file() {
                    return Err(ConfigError::invalid(
                        key,
                        format!("file {} does not exist", path.display()),
                    ));
                }
            }
            let ca = &self.cluster.peer_ca_file;
            if self.cluster.enabled() && !ca.as_os_str().is_empty() && !ca.is_file() {
                return Err(ConfigError::invalid(
                    "cluster.peer_ca_file",
                    format!("file {} does not exist", ca.display()),
                ));
            }
        }
        if !self.auth.enabled && !self.auth.allow_insecure && !addr.ip().is_loopback() {
            return Err(ConfigError::invalid(
                "server.addr",
                format!(
                    "{addr} is not a loopback address and auth is off: enable [auth] or set auth.allow_insecure = true"
                ),
            ));
        }
        self.rate_limit.validate()?;
        self.telemetry.validate()?;
        self.cluster.validate()?;
        self.history.validate()?;
        self.parties.validate()?;
        self.events.validate()?;
        self.audit.validate()?;
        self.results.validate()?;
        self.console.validate()?;
        self.ranking.validate()?;
        self.season.validate()?;
        if self.queues.is_empty() {
            return Err(ConfigError::invalid(
                "queues",
                "at least one queue is required",
            ));
        }
        for (name, q) in &self.queues {
            let key = |field: &str| format!("queues.{name}.{field}");
            if !valid_name(name) {
                return Err(ConfigError::invalid(
                    format!("queues.{name}"),
                    "queue names are 1-64 characters of A-Z a-z 0-9 _ -",
                ));
            }
            if q.teams < 2 {
                return Err(ConfigError::invalid(
                    key("teams"),
                    format!("must be at least 2 (got {})", q.teams),
                ));
            }
            if q.team_size < 1 {
                return Err(ConfigError::invalid(key("team_size"), "must be at least 1"));
            }
            if q.players_per_match() > 200 {
                return Err(ConfigError::invalid(
                    key("teams"),
                    format!(
                        "teams × team_size must be at most 200 (got {})",
                        q.players_per_match()
                    ),
                ));
            }
            if q.max_party_size < 1 || q.max_party_size > q.team_size {
                return Err(ConfigError::invalid(
                    key("max_party_size"),
                    format!(
                        "must be in 1..=team_size ({}) (got {})",
                        q.team_size, q.max_party_size
                    ),
                ));
            }
            if let Some(pool) = &q.rating_pool
                && !valid_name(pool)
            {
                return Err(ConfigError::invalid(
                    key("rating_pool"),
                    "pool names are 1-64 characters of A-Z a-z 0-9 _ -",
                ));
            }
            q.rating.validate().map_err(|e| e.under(&key("rating")))?;
            crate::matching::rules::validate_rules(&q.rules, q.shape())
                .map_err(|e| e.under(&format!("queues.{name}")))?;
            q.matching
                .validate(q.shape())
                .map_err(|e| e.under(&key("matching")))?;
            if let Some(ms) = q.tick_interval_ms
                && !(1..=1000).contains(&ms)
            {
                return Err(ConfigError::invalid(
                    key("tick_interval_ms"),
                    format!("must be in 1..=1000 (got {ms})"),
                ));
            }
            if !(q.ready_check_seconds.is_finite() && q.ready_check_seconds >= 0.0) {
                return Err(ConfigError::invalid(
                    key("ready_check_seconds"),
                    format!(
                        "must be finite and >= 0 (0 = off) (got {})",
                        q.ready_check_seconds
                    ),
                ));
            }
            // The match timeout counts from when a match formed, its ready-check included, and
            // the allocation timeout from when the ready-check passed: a match that passes at
            // the deadline must still have its whole allocation timeout before the match
            // timeout, as one without a ready-check has.
            if q.ready_check_seconds + s.allocation_timeout_seconds >= s.match_timeout_seconds {
                return Err(ConfigError::invalid(
                    key("ready_check_seconds"),
                    format!(
                        "plus server.allocation_timeout_seconds ({}) must be less than \
                         server.match_timeout_seconds ({}): a match that passes its ready-check \
                         at the deadline still waits up to the allocation timeout for a game \
                         server (got {})",
                        s.allocation_timeout_seconds,
                        s.match_timeout_seconds,
                        q.ready_check_seconds
                    ),
                ));
            }
            q.backfill
                .validate()
                .map_err(|e| e.under(&format!("queues.{name}")))?;
        }
        // Queues sharing a pool share one record per player, so they must agree on what its
        // rating and its rank points mean.
        let mut pools: BTreeMap<&str, (&str, &QueueConfig)> = BTreeMap::new();
        for (name, q) in &self.queues {
            let pool = q.rating_pool.as_deref().unwrap_or(name);
            if let Some((first, other)) = pools.get(pool) {
                if other.rating != q.rating {
                    return Err(ConfigError::invalid(
                        format!("queues.{name}.rating"),
                        format!("must equal queues.{first}.rating: both use rating_pool {pool:?}"),
                    ));
                }
                if other.ranking != q.ranking {
                    return Err(ConfigError::invalid(
                        format!("queues.{name}.ranking"),
                        format!("must equal queues.{first}.ranking: both use rating_pool {pool:?}"),
                    ));
                }
            } else {
                pools.insert(pool, (name, q));
            }
        }
        self.validate_shards()
    }

    /// This config as the engine of the shard in `keyspace` runs it: that shard's queues only,
    /// and the shard's own cluster settings (its keyspace, the tag its ids carry).
    pub fn shard(&self, keyspace: &str) -> Config {
        let mut shard = self.clone();
        shard.cluster = self.cluster.for_shard(keyspace);
        shard
            .queues
            .retain(|name, _| self.cluster.keyspace_of(name) == keyspace);
        shard
    }

    /// A config file read again, as the engine running `running` compares it: narrowed to
    /// `running`'s shard when the file splits the queues into shards.
    pub fn as_running(self, running: &Config) -> Config {
        if self.cluster.shards.is_empty() {
            self
        } else {
            self.shard(&running.cluster.keyspace)
        }
    }

    /// Every queue a shard names exists and is in no other shard, and the queues of one
    /// rating pool are in one shard: they share each player's record.
    fn validate_shards(&self) -> Result<(), ConfigError> {
        let cluster = &self.cluster;
        // The home shard and these: event cursors tell at most this many apart.
        let most = crate::store::event_clock::MAX_SHARDS - 1;
        if cluster.shards.len() > most {
            return Err(ConfigError::invalid(
                "cluster.shards",
                format!(
                    "at most {most} shards besides the home shard (got {})",
                    cluster.shards.len()
                ),
            ));
        }
        let mut named: BTreeMap<&str, usize> = BTreeMap::new();
        for (i, shard) in cluster.shards.iter().enumerate() {
            for (j, queue) in shard.queues.iter().enumerate() {
                let field = format!("cluster.shards[{i}].queues[{j}]");
                if !self.queues.contains_key(queue) {
                    return Err(ConfigError::invalid(
                        field,
                        format!("{queue:?} is not a configured queue"),
                    ));
                }
                if let Some(other) = named.insert(queue, i) {
                    return Err(ConfigError::invalid(
                        field,
                        format!("{queue:?} is already in cluster.shards[{other}]"),
                    ));
                }
            }
        }
        let mut pools: BTreeMap<&str, (&str, &str)> = BTreeMap::new();
        for (name, q) in &self.queues {
            let pool = q.rating_pool.as_deref().unwrap_or(name);
            let keyspace = cluster.keyspace_of(name);
            match pools.get(pool) {
                Some((first, other)) if *other != keyspace => {
                    return Err(ConfigError::invalid(
                        format!("queues.{name}.rating_pool"),
                        format!(
                            "queues.{first} shares rating_pool {pool:?} in keyspace {other:?}; \
                             a pool's queues must be in one shard (this one is in {keyspace:?})"
                        ),
                    ));
                }
                Some(_) => {}
                None => {
                    pools.insert(pool, (name, keyspace));
                }
            }
        }
        Ok(())
    }
}

fn valid_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Fills in the copies the matcher reads from each queue's own keys (its rules and its party
/// size), which a config read from a file or kept from a reload does not carry.
fn queue_enabled() -> bool {
    true
}

pub fn settle_queues(queues: &mut BTreeMap<String, QueueConfig>) -> Result<(), ConfigError> {
    queues.retain(|_, q| q.enabled);
    for q in queues.values_mut() {
        q.matching.rules = q.rules.clone();
    }
    for (name, q) in queues.iter_mut() {
        // The queue-level key is the one users set; the matcher reads its own copy.
        match q.matching.max_party_size {
            None => q.matching.max_party_size = Some(q.max_party_size),
            Some(n) if n == q.max_party_size => {}
            Some(n) => {
                return Err(ConfigError::invalid(
                    format!("queues.{name}.matching.max_party_size"),
                    format!(
                        "set queues.{name}.max_party_size instead ({n} here, {} there)",
                        q.max_party_size
                    ),
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;

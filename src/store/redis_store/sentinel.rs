//! Redis behind Sentinel: the nodes ask the sentinels where the primary is, and ask again when
//! it moves.
//!
//! `redis+sentinel://[[USER]:PASSWORD@]HOST:PORT[,HOST:PORT...]/SERVICE[/DB][?PARAMS]` names
//! the sentinels and the service they watch (`rediss+sentinel://` for TLS to both). The
//! credentials and the database are the primary's. The sentinels are asked without
//! credentials unless the parameters `sentinel_password` (and `sentinel_username`) give theirs
//! (Sentinel's `requirepass`; the Bitnami chart sets it to the primary's password). User names,
//! passwords and parameters are percent-decoded. This is the form of the `redis-sentinel-url`
//! convention (Python's `redis-sentinel-url`, Sidekiq's and Celery's multi-sentinel URLs), with
//! the sentinels' own credentials as go-redis and Lettuce keep them apart.
//!
//! A connection keeps one multiplexed connection to the primary the sentinels named, checked
//! with `ROLE` (Redis' documented client protocol for Sentinel). It drops it, and the next call
//! asks the sentinels again, when a call fails in a way a moved primary explains (the
//! connection broke or was refused, no reply in time, `READONLY` from a primary demoted to a
//! replica), and when the sentinels, asked every [`Patience::connect`], name another primary:
//! after a failover the old primary may go on taking writes until Sentinel reconfigures it,
//! which its periodic `INFO` (every 10 s) can take, and whatever it took then is lost when it
//! follows the new one. That question (`SENTINEL GET-MASTER-ADDR-BY-NAME`) goes on one kept
//! connection to a sentinel; only a connection to a new primary opens one to it (and checks its
//! `ROLE`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use ::redis::aio::{ConnectionLike, MultiplexedConnection};
use ::redis::sentinel::{SentinelClient, SentinelClientBuilder, SentinelServerType};
use ::redis::{
    AsyncConnectionConfig, Cmd, ConnectionAddr, ErrorKind, Pipeline, RedisError, RedisFuture,
    RedisResult, TlsMode, Value,
};

use super::conn::{Patience, RedisTls};

const SCHEMES: [(&str, bool); 2] = [("redis+sentinel://", false), ("rediss+sentinel://", true)];

/// A parsed `redis+sentinel://` URL.
#[derive(Clone, PartialEq, Eq)]
pub struct SentinelUrl {
    /// Where the sentinels listen.
    pub sentinels: Vec<(String, u16)>,
    /// The name the sentinels know the primary by (`sentinel monitor NAME ...`).
    pub service: String,
    /// The primary's database.
    pub db: i64,
    /// The primary's user and password.
    pub username: Option<String>,
    pub password: Option<String>,
    /// The sentinels' user and password.
    pub sentinel_username: Option<String>,
    pub sentinel_password: Option<String>,
    /// TLS to the sentinels and the primary.
    pub tls: bool,
}

impl std::fmt::Debug for SentinelUrl {
    /// Everything but the password.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SentinelUrl")
            .field("sentinels", &self.sentinels)
            .field("service", &self.service)
            .field("db", &self.db)
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "***"))
            .field("sentinel_username", &self.sentinel_username)
            .field(
                "sentinel_password",
                &self.sentinel_password.as_ref().map(|_| "***"),
            )
            .field("tls", &self.tls)
            .finish()
    }
}

/// Whether `url` names sentinels rather than a Redis.
pub fn is_sentinel_url(url: &str) -> bool {
    SCHEMES.iter().any(|(s, _)| url.starts_with(s))
}

impl SentinelUrl {
    /// Parses a sentinel URL; the error says what is wrong with it (never its password).
    pub fn parse(url: &str) -> Result<Self, String> {
        let (rest, tls) = SCHEMES
            .iter()
            .find_map(|(s, tls)| url.strip_prefix(s).map(|rest| (rest, *tls)))
            .ok_or("must start with redis+sentinel:// or rediss+sentinel://")?;
        let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
        let (userinfo, rest) = match rest.rsplit_once('@') {
            Some((userinfo, rest)) => (Some(userinfo), rest),
            None => (None, rest),
        };
        let (username, password) = match userinfo {
            None => (None, None),
            Some(info) => {
                let (user, password) = info.split_once(':').unwrap_or((info, ""));
                (decoded("user", user)?, decoded("password", password)?)
            }
        };
        let (mut sentinel_username, mut sentinel_password) = (None, None);
        for param in query.split('&').filter(|p| !p.is_empty()) {
            let (name, value) = param.split_once('=').unwrap_or((param, ""));
            match name {
                "sentinel_username" => sentinel_username = decoded(name, value)?,
                "sentinel_password" => sentinel_password = decoded(name, value)?,
                _ => {
                    return Err(format!(
                        "has an unknown parameter {name:?} (known: sentinel_username, \
                         sentinel_password)"
                    ));
                }
            }
        }
        let (hosts, path) = rest.split_once('/').unwrap_or((rest, ""));
        let sentinels = hosts
            .split(',')
            .map(|host| {
                let (name, port) = host
                    .rsplit_once(':')
                    .ok_or_else(|| format!("sentinel {host:?} needs a port (HOST:PORT)"))?;
                let port = port
                    .parse::<u16>()
                    .map_err(|_| format!("sentinel {host:?} has no valid port"))?;
                if name.is_empty() {
                    return Err(format!("sentinel {host:?} has no host"));
                }
                Ok((name.trim_matches(['[', ']']).to_string(), port))
            })
            .collect::<Result<Vec<_>, String>>()?;
        let mut path = path.split('/');
        let service = path.next().unwrap_or_default().to_string();
        if service.is_empty() {
            return Err("needs the service the sentinels watch: .../SERVICE[/DB]".into());
        }
        let db = match path.next() {
            None | Some("") => 0,
            Some(db) => db
                .parse()
                .map_err(|_| format!("database {db:?} is not a number"))?,
        };
        if path.next().is_some() {
            return Err("has more path than /SERVICE/DB".into());
        }
        Ok(Self {
            sentinels,
            service,
            db,
            username,
            password,
            sentinel_username,
            sentinel_password,
            tls,
        })
    }

    fn client(&self, tls: Option<&RedisTls>) -> RedisResult<SentinelClient> {
        let addr = |(host, port): &(String, u16)| match self.tls {
            false => ConnectionAddr::Tcp(host.clone(), *port),
            true => ConnectionAddr::TcpTls {
                host: host.clone(),
                port: *port,
                insecure: false,
                tls_params: None,
            },
        };
        let mut builder = SentinelClientBuilder::new(
            self.sentinels.iter().map(addr),
            &self.service,
            SentinelServerType::Master,
        )?
        .set_client_to_redis_db(self.db);
        if let Some(user) = &self.username {
            builder = builder.set_client_to_redis_username(user);
        }
        if let Some(password) = &self.password {
            builder = builder.set_client_to_redis_password(password);
        }
        if let Some(user) = &self.sentinel_username {
            builder = builder.set_client_to_sentinel_username(user);
        }
        if let Some(password) = &self.sentinel_password {
            builder = builder.set_client_to_sentinel_password(password);
        }
        if self.tls {
            builder = builder
                .set_client_to_redis_tls_mode(TlsMode::Secure)
                .set_client_to_sentinel_tls_mode(TlsMode::Secure);
            if let Some(tls) = tls {
                builder = builder
                    .set_client_to_redis_certificates(tls.certificates())
                    .set_client_to_sentinel_certificates(tls.certificates());
            }
        }
        builder.build()
    }
}

/// `value` percent-decoded; `None` when empty. The error names `what` (never the value).
fn decoded(what: &str, value: &str) -> Result<Option<String>, String> {
    let value = percent_encoding::percent_decode_str(value)
        .decode_utf8()
        .map_err(|_| format!("{what} is not UTF-8 once percent-decoded"))?;
    Ok((!value.is_empty()).then(|| value.into_owned()))
}

fn invalid(detail: String) -> RedisError {
    RedisError::from((ErrorKind::InvalidClientConfig, "redis_url", detail))
}

/// A connection to whichever Redis the sentinels name primary; see the module documentation.
#[derive(Clone)]
pub struct SentinelConn(Arc<Shared>);

struct Shared {
    sentinels: tokio::sync::Mutex<SentinelClient>,
    primary: Mutex<Primary>,
    config: AsyncConnectionConfig,
    db: i64,
    service: String,
    /// How many times the watcher heard from a sentinel which server is primary.
    checks: AtomicU64,
}

/// The primary's connection, its address, and its generation (so that a call that failed on
/// an older connection does not drop a newer).
#[derive(Default)]
struct Primary {
    generation: u64,
    addr: Option<ConnectionAddr>,
    conn: Option<MultiplexedConnection>,
}

impl SentinelConn {
    /// Connects to the primary the sentinels of `url` name now.
    pub async fn connect(
        url: &str,
        tls: Option<&RedisTls>,
        patience: Patience,
    ) -> RedisResult<Self> {
        let parsed = SentinelUrl::parse(url).map_err(invalid)?;
        let conn = Self(Arc::new(Shared {
            sentinels: tokio::sync::Mutex::new(parsed.client(tls)?),
            primary: Mutex::new(Primary::default()),
            config: AsyncConnectionConfig::new()
                .set_connection_timeout(Some(patience.connect))
                .set_response_timeout(Some(patience.reply)),
            db: parsed.db,
            service: parsed.service.clone(),
            checks: AtomicU64::new(0),
        }));
        conn.primary().await.map_err(|e| {
            let auth = e.kind() == ErrorKind::AuthenticationFailed
                || e.code().is_some_and(|c| c == "NOAUTH" || c == "WRONGPASS");
            match auth {
                true if parsed.sentinel_password.is_none() => invalid(format!(
                    "{e}: if the sentinels ask for a password (Sentinel's requirepass), give it \
                     as ?sentinel_password=... in the URL"
                )),
                _ => e,
            }
        })?;
        tokio::spawn(watch(
            Arc::downgrade(&conn.0),
            patience.connect.max(Duration::from_millis(100)),
        ));
        Ok(conn)
    }

    fn current(&self) -> (u64, Option<MultiplexedConnection>) {
        let primary = self.0.primary.lock().unwrap_or_else(|p| p.into_inner());
        (primary.generation, primary.conn.clone())
    }

    /// The primary's connection, asking the sentinels for it if there is none.
    async fn primary(&self) -> RedisResult<(u64, MultiplexedConnection)> {
        if let (generation, Some(conn)) = self.current() {
            return Ok((generation, conn));
        }
        let mut sentinels = self.0.sentinels.lock().await;
        // Another call may have asked while this one waited.
        if let (generation, Some(conn)) = self.current() {
            return Ok((generation, conn));
        }
        let client = sentinels.async_get_client().await?;
        let conn = client
            .get_multiplexed_async_connection_with_config(&self.0.config)
            .await?;
        let mut primary = self.0.primary.lock().unwrap_or_else(|p| p.into_inner());
        primary.generation += 1;
        primary.addr = Some(client.get_connection_info().addr().clone());
        primary.conn = Some(conn.clone());
        Ok((primary.generation, conn))
    }

    /// Drops the connection of `generation` after `error`, when a moved primary explains it.
    fn after(&self, generation: u64, error: &RedisError) {
        let moved = error.is_io_error()
            || error.is_connection_dropped()
            || error.is_connection_refusal()
            || error.is_timeout()
            || error.kind() == ErrorKind::Server(::redis::ServerErrorKind::ReadOnly);
        if moved {
            let mut primary = self.0.primary.lock().unwrap_or_else(|p| p.into_inner());
            if primary.generation == generation {
                primary.conn = None;
            }
        }
    }
}

/// Asks a sentinel every `every` which server is primary, and drops the connection to another;
/// ends with the connection's last clone. It keeps its connection to the sentinel that
/// answered and moves to the next one that does when it fails.
async fn watch(shared: Weak<Shared>, every: Duration) {
    let mut sentinel: Option<MultiplexedConnection> = None;
    loop {
        tokio::time::sleep(every).await;
        let Some(shared) = shared.upgrade() else {
            return;
        };
        if sentinel.is_none() {
            let client = shared
                .sentinels
                .lock()
                .await
                .async_get_sentinel_client()
                .await;
            sentinel = match client {
                Ok(client) => client
                    .get_multiplexed_async_connection_with_config(&shared.config)
                    .await
                    .ok(),
                Err(_) => None,
            };
        }
        let Some(conn) = sentinel.as_mut() else {
            // No sentinel answers: the calls find out on their own whether the primary moved.
            continue;
        };
        let named: RedisResult<Option<(String, u16)>> = ::redis::cmd("SENTINEL")
            .arg("GET-MASTER-ADDR-BY-NAME")
            .arg(&shared.service)
            .query_async(conn)
            .await;
        let (host, port) = match named {
            Ok(Some(addr)) => addr,
            Ok(None) => continue,
            Err(_) => {
                sentinel = None;
                continue;
            }
        };
        shared.checks.fetch_add(1, Ordering::Relaxed);
        let mut primary = shared.primary.lock().unwrap_or_else(|p| p.into_inner());
        let same = primary
            .addr
            .as_ref()
            .is_some_and(|addr| names(addr, &host, port));
        if primary.conn.is_some() && !same {
            tracing::info!(primary = %format!("{host}:{port}"), "the sentinels name another primary; connecting to it");
            primary.conn = None;
        }
    }
}

/// Whether `addr` is `host:port`.
fn names(addr: &ConnectionAddr, host: &str, port: u16) -> bool {
    match addr {
        ConnectionAddr::Tcp(h, p)
        | ConnectionAddr::TcpTls {
            host: h, port: p, ..
        } => h == host && *p == port,
        _ => false,
    }
}

impl ConnectionLike for SentinelConn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let (generation, mut conn) = self.primary().await?;
            let reply = conn.req_packed_command(cmd).await;
            if let Err(e) = &reply {
                self.after(generation, e);
            }
            reply
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            let (generation, mut conn) = self.primary().await?;
            let reply = conn.req_packed_commands(cmd, offset, count).await;
            if let Err(e) = &reply {
                self.after(generation, e);
            }
            reply
        })
    }

    fn get_db(&self) -> i64 {
        self.0.db
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sentinel_url_names_the_sentinels_the_service_and_the_primarys_database_and_password() {
        let url = SentinelUrl::parse(
            "redis+sentinel://:s3cret@10.0.0.1:26379,sentinel-b:26380/mm-primary/2",
        )
        .unwrap();
        assert_eq!(
            url,
            SentinelUrl {
                sentinels: vec![("10.0.0.1".into(), 26379), ("sentinel-b".into(), 26380)],
                service: "mm-primary".into(),
                db: 2,
                username: None,
                password: Some("s3cret".into()),
                sentinel_username: None,
                sentinel_password: None,
                tls: false,
            }
        );
        let tls = SentinelUrl::parse("rediss+sentinel://app:pw@[::1]:26379/m").unwrap();
        assert_eq!(tls.sentinels, vec![("::1".into(), 26379)]);
        assert_eq!((tls.db, tls.tls), (0, true));
        assert_eq!(tls.username.as_deref(), Some("app"));
        assert!(is_sentinel_url("rediss+sentinel://h:1/m"));
        assert!(!format!("{tls:?}").contains("pw"), "{tls:?}");
        assert!(!is_sentinel_url("redis://h:1/0"));
        let both = SentinelUrl::parse(
            "redis+sentinel://:p%40ss@h:26379/m?sentinel_username=watch&sentinel_password=s%26x",
        )
        .unwrap();
        assert_eq!(both.password.as_deref(), Some("p@ss"));
        assert_eq!(both.sentinel_username.as_deref(), Some("watch"));
        assert_eq!(both.sentinel_password.as_deref(), Some("s&x"));
        assert!(!format!("{both:?}").contains("s&x"), "{both:?}");
    }

    fn connections_received(info: &mut ::redis::Connection) -> u64 {
        let stats: String = ::redis::cmd("INFO").arg("stats").query(info).unwrap();
        stats
            .lines()
            .find_map(|l| l.strip_prefix("total_connections_received:"))
            .and_then(|n| n.trim().parse().ok())
            .unwrap()
    }

    fn primary_port(conn: &SentinelConn) -> Option<u16> {
        let primary = conn.0.primary.lock().unwrap();
        match primary.addr.as_ref()? {
            ConnectionAddr::Tcp(_, port) => Some(*port),
            _ => None,
        }
    }

    #[test]
    fn watching_the_sentinels_opens_no_connection_to_the_primary_and_sees_it_move() {
        use crate::store::RedisSentinels;
        use std::time::Instant;
        let sentinels = RedisSentinels::start().unwrap_or_else(|e| panic!("{e}"));
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        // A quarter of a 400 ms lease: the sentinels are asked every 100 ms.
        let patience = Patience::for_lease(Duration::from_millis(400));
        // The sentinel asks for a password: without it the URL is refused, saying where it goes.
        let url = sentinels.url();
        let (without, _) = url.split_once('?').unwrap();
        let refused = runtime
            .block_on(SentinelConn::connect(without, None, patience))
            .err()
            .expect("a sentinel that asks for a password answered without one");
        assert!(
            refused.to_string().contains("?sentinel_password="),
            "{refused}"
        );
        let mut conn = runtime
            .block_on(SentinelConn::connect(&sentinels.url(), None, patience))
            .unwrap();
        let old = sentinels.primary().unwrap();
        assert_eq!(primary_port(&conn), Some(sentinels.servers[old].port));
        let mut info = ::redis::Client::open(sentinels.servers[old].url())
            .unwrap()
            .get_connection()
            .unwrap();
        let before = connections_received(&mut info);
        let checks = conn.0.checks.load(Ordering::Relaxed);
        let deadline = Instant::now() + Duration::from_secs(10);
        while conn.0.checks.load(Ordering::Relaxed) < checks + 10 {
            assert!(Instant::now() < deadline, "the watcher asked no sentinel");
            std::thread::sleep(Duration::from_millis(20));
        }
        let opened = connections_received(&mut info) - before;
        assert!(
            opened <= 1,
            "ten checks opened {opened} connections to the primary"
        );

        sentinels.failover().unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        let new = loop {
            match sentinels.primary() {
                Ok(new) if new != old => break new,
                _ => assert!(Instant::now() < deadline, "no failover"),
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        // Sentinel reconfigures the old primary at its next INFO, up to 10 s later; until
        // then it takes writes. The watcher moves the connection on well before.
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let _: RedisResult<String> =
                runtime.block_on(::redis::cmd("PING").query_async(&mut conn));
            if primary_port(&conn) == Some(sentinels.servers[new].port) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "still on {:?} 5 s after the sentinel named {}",
                primary_port(&conn),
                sentinels.servers[new].port
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    #[test]
    fn a_sentinel_url_without_a_service_a_port_or_a_numeric_database_is_refused() {
        for (url, says) in [
            ("redis+sentinel://h:26379", "service"),
            ("redis+sentinel://h:26379/", "service"),
            ("redis+sentinel://h/m", "port"),
            ("redis+sentinel://h:x/m", "port"),
            ("redis+sentinel://:26379/m", "host"),
            ("redis+sentinel://h:26379/m/zero", "number"),
            ("redis+sentinel://h:26379/m/0/x", "path"),
            ("redis://h:26379/m", "redis+sentinel://"),
            (
                "redis+sentinel://h:26379/m?sentinel_pass=x",
                "unknown parameter",
            ),
            ("redis+sentinel://:%ff@h:26379/m", "password is not UTF-8"),
        ] {
            let error = SentinelUrl::parse(url).unwrap_err();
            assert!(error.contains(says), "{url}: {error}");
        }
    }
}

//! A real `redis-server` (or `valkey-server`) for tests and benchmarks: started on 127.0.0.1 on
//! a free port, in a fresh temporary directory, with the append-only file on; killed when
//! dropped.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a started server gets to answer PING.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// A running Redis server owned by this process.
pub struct RedisServer {
    child: Option<Child>,
    binary: PathBuf,
    pub(super) port: u16,
    dir: PathBuf,
    /// Extra command-line arguments (cluster mode).
    extra: Vec<String>,
    /// Set when the server takes only TLS: what a client must trust and present.
    tls: Option<super::RedisTls>,
}

/// Why a server could not start.
#[derive(Debug, thiserror::Error)]
pub enum RedisServerError {
    #[error(
        "neither redis-server nor valkey-server is on PATH: install it (Debian/Ubuntu: \
         apt-get install -y redis-server; scripts/test.sh does this when run as root)"
    )]
    Missing,
    #[error("redis-server: {0}")]
    Start(String),
}

fn find_binary() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    ["redis-server", "valkey-server"].iter().find_map(|name| {
        std::env::split_paths(&path)
            .map(|dir| dir.join(name))
            .find(|p| p.is_file())
    })
}

impl RedisServer {
    /// Starts a server on a free loopback port in a new temporary directory.
    pub fn start() -> Result<Self, RedisServerError> {
        Self::start_with(Vec::new())
    }

    /// Starts a server that takes only TLS on its port: its certificate `cert_file` with
    /// `key_file`, and clients must present a certificate that chains to `ca_file`
    /// (`tls-auth-clients yes`). `client` is what its own checks connect with.
    pub fn start_tls(
        cert_file: &std::path::Path,
        key_file: &std::path::Path,
        ca_file: &std::path::Path,
        client: super::RedisTls,
    ) -> Result<Self, RedisServerError> {
        let path = |p: &std::path::Path| p.display().to_string();
        let mut server = Self::create(vec![
            "--tls-cert-file".into(),
            path(cert_file),
            "--tls-key-file".into(),
            path(key_file),
            "--tls-ca-cert-file".into(),
            path(ca_file),
            "--tls-auth-clients".into(),
            "yes".into(),
        ])?;
        server.tls = Some(client);
        server.spawn()?;
        Ok(server)
    }

    fn start_with(extra: Vec<String>) -> Result<Self, RedisServerError> {
        let mut server = Self::create(extra)?;
        server.spawn()?;
        Ok(server)
    }

    /// A server not started yet, on a free port and in a new directory.
    fn create(extra: Vec<String>) -> Result<Self, RedisServerError> {
        let binary = find_binary().ok_or(RedisServerError::Missing)?;
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| RedisServerError::Start(format!("no free port: {e}")))?
            .port();
        let dir =
            std::env::temp_dir().join(format!("matchmaker-redis-{}", crate::ids::new_id("r")));
        std::fs::create_dir_all(&dir)
            .map_err(|e| RedisServerError::Start(format!("{}: {e}", dir.display())))?;
        Ok(Self {
            child: None,
            binary,
            port,
            dir,
            extra,
            tls: None,
        })
    }

    fn spawn(&mut self) -> Result<(), RedisServerError> {
        let port = self.port.to_string();
        let ports: &[&str] = match self.tls {
            None => &["--port", &port],
            Some(_) => &["--port", "0", "--tls-port", &port],
        };
        let child = Command::new(&self.binary)
            .args(["--bind", "127.0.0.1"])
            .args(ports)
            .arg("--dir")
            .arg(&self.dir)
            .args([
                "--appendonly",
                "yes",
                "--appendfsync",
                "everysec",
                "--save",
                "",
                "--daemonize",
                "no",
                "--protected-mode",
                "yes",
                "--logfile",
                "",
            ])
            .args(&self.extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| RedisServerError::Start(format!("{}: {e}", self.binary.display())))?;
        self.child = Some(child);
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            let ping = super::conn::client(&self.url(), self.tls.as_ref())
                .and_then(|c| c.get_connection_with_timeout(Duration::from_millis(200)))
                .and_then(|mut c| ::redis::cmd("PING").query::<String>(&mut c));
            match ping {
                Ok(_) => return Ok(()),
                Err(e) if Instant::now() > deadline => {
                    return Err(RedisServerError::Start(format!(
                        "no answer on port {} within {START_TIMEOUT:?}: {e}",
                        self.port
                    )));
                }
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    }

    /// `redis://127.0.0.1:PORT/0` (`rediss://` when it takes only TLS).
    pub fn url(&self) -> String {
        let scheme = if self.tls.is_some() {
            "rediss"
        } else {
            "redis"
        };
        format!("{scheme}://127.0.0.1:{}/0", self.port)
    }

    /// The server's process id while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// SIGKILL: Redis dies as in a crash (its AOF keeps what it synced).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts it again on the same port and directory (the AOF is replayed).
    pub fn restart(&mut self) -> Result<(), RedisServerError> {
        self.kill();
        self.spawn()
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A Redis Cluster of three primaries on loopback, each owning a third of the slots; killed
/// when dropped.
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
}

impl RedisCluster {
    /// Starts three cluster-enabled servers, assigns the slots and joins them, and returns once
    /// every node reports `cluster_state:ok`.
    pub fn start() -> Result<Self, RedisServerError> {
        const SLOTS: u16 = 16384;
        let mut nodes = Vec::new();
        for _ in 0..3 {
            nodes.push(RedisServer::start_with(
                [
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                ]
                .iter()
                .map(|a| (*a).to_string())
                .collect(),
            )?);
        }
        let fail = |e: ::redis::RedisError| RedisServerError::Start(format!("cluster: {e}"));
        let per_node = SLOTS / 3 + 1;
        for (i, node) in nodes.iter().enumerate() {
            let mut conn = ::redis::Client::open(node.url())
                .and_then(|c| c.get_connection())
                .map_err(fail)?;
            let first = i as u16 * per_node;
            let last = ((i as u16 + 1) * per_node - 1).min(SLOTS - 1);
            let () = ::redis::cmd("CLUSTER")
                .arg("ADDSLOTSRANGE")
                .arg(first)
                .arg(last)
                .query(&mut conn)
                .map_err(fail)?;
            if i > 0 {
                let mut first_node = ::redis::Client::open(nodes[0].url())
                    .and_then(|c| c.get_connection())
                    .map_err(fail)?;
                let () = ::redis::cmd("CLUSTER")
                    .arg("MEET")
                    .arg("127.0.0.1")
                    .arg(node.port)
                    .query(&mut first_node)
                    .map_err(fail)?;
            }
        }
        let deadline = Instant::now() + START_TIMEOUT;
        for node in &nodes {
            loop {
                let info: Result<String, _> = ::redis::Client::open(node.url())
                    .and_then(|c| c.get_connection())
                    .and_then(|mut c| ::redis::cmd("CLUSTER").arg("INFO").query(&mut c));
                if info
                    .as_deref()
                    .is_ok_and(|i| i.contains("cluster_state:ok"))
                {
                    break;
                }
                if Instant::now() > deadline {
                    return Err(RedisServerError::Start(format!(
                        "the cluster did not form within {START_TIMEOUT:?}: {info:?}"
                    )));
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        Ok(Self { nodes })
    }

    /// The URL of node `i` (any node reaches the whole cluster).
    pub fn url(&self, i: usize) -> String {
        self.nodes[i % self.nodes.len()].url()
    }
}

/// The service name [`RedisSentinels`] watch.
pub const SENTINEL_SERVICE: &str = "mm-primary";

/// A primary, two replicas of it and one sentinel watching them as [`SENTINEL_SERVICE`]
/// (quorum 1, a server is down after a second), on loopback; killed when dropped.
pub struct RedisSentinels {
    /// The first primary, then its replicas; the sentinel moves the roles.
    pub servers: Vec<RedisServer>,
    sentinel: Option<Child>,
    sentinel_port: u16,
    dir: PathBuf,
}

impl RedisSentinels {
    /// Starts them and returns once the replicas are in step and the sentinel knows them.
    pub fn start() -> Result<Self, RedisServerError> {
        const REPLICAS: usize = 2;
        let primary = RedisServer::start()?;
        let mut servers = vec![primary];
        for _ in 0..REPLICAS {
            servers.push(RedisServer::start_with(vec![
                "--replicaof".into(),
                "127.0.0.1".into(),
                servers[0].port.to_string(),
            ])?);
        }
        let sentinel_port = RedisServer::create(Vec::new())?.port;
        let dir = servers[0].dir.join("sentinel");
        std::fs::create_dir_all(&dir)
            .map_err(|e| RedisServerError::Start(format!("{}: {e}", dir.display())))?;
        let conf = dir.join("sentinel.conf");
        std::fs::write(
            &conf,
            format!(
                "port {sentinel_port}\nbind 127.0.0.1\ndir {}\n\
                 sentinel monitor {SENTINEL_SERVICE} 127.0.0.1 {} 1\n\
                 sentinel down-after-milliseconds {SENTINEL_SERVICE} 1000\n\
                 sentinel failover-timeout {SENTINEL_SERVICE} 2000\n",
                dir.display(),
                servers[0].port
            ),
        )
        .map_err(|e| RedisServerError::Start(format!("{}: {e}", conf.display())))?;
        let sentinel = Command::new(&servers[0].binary)
            .arg(&conf)
            .args(["--sentinel", "--logfile", ""])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| RedisServerError::Start(format!("sentinel: {e}")))?;
        let sentinels = Self {
            servers,
            sentinel: Some(sentinel),
            sentinel_port,
            dir,
        };
        sentinels.wait_until(
            "the replicas are in step and the sentinel knows them",
            |s| {
                let known = match s.sentinel_query(&["SENTINEL", "REPLICAS", SENTINEL_SERVICE])? {
                    ::redis::Value::Array(replicas) => replicas.len(),
                    _ => 0,
                };
                let mut in_step = 0;
                for replica in 1..=REPLICAS {
                    in_step += usize::from(
                        s.info(replica, "replication")?
                            .contains("master_link_status:up"),
                    );
                }
                Ok(known == REPLICAS && in_step == REPLICAS)
            },
        )?;
        Ok(sentinels)
    }

    /// `redis+sentinel://127.0.0.1:PORT/mm-primary/0`.
    pub fn url(&self) -> String {
        format!(
            "redis+sentinel://127.0.0.1:{}/{SENTINEL_SERVICE}/0",
            self.sentinel_port
        )
    }

    /// Which of [`RedisSentinels::servers`] the sentinel names primary now.
    pub fn primary(&self) -> Result<usize, RedisServerError> {
        let addr: Vec<String> = self
            .sentinel_query(&["SENTINEL", "GET-MASTER-ADDR-BY-NAME", SENTINEL_SERVICE])
            .and_then(|v| {
                ::redis::from_redis_value(v)
                    .map_err(|e| RedisServerError::Start(format!("sentinel: {e}")))
            })?;
        let port = addr.get(1).and_then(|p| p.parse::<u16>().ok());
        self.servers
            .iter()
            .position(|s| Some(s.port) == port)
            .ok_or_else(|| RedisServerError::Start(format!("sentinel names {addr:?}")))
    }

    /// `SENTINEL FAILOVER`: a replica becomes primary, the others and the primary its
    /// replicas.
    pub fn failover(&self) -> Result<(), RedisServerError> {
        self.sentinel_query(&["SENTINEL", "FAILOVER", SENTINEL_SERVICE])
            .map(|_| ())
    }

    /// Waits until the sentinel names a server other than `old` primary, it says so itself,
    /// and every other running server follows it in step (Sentinel reconfigures a demoted
    /// primary at its next `INFO`, up to 10 s later); returns which.
    pub fn wait_for_new_primary(&self, old: usize) -> Result<usize, RedisServerError> {
        self.wait_until(
            "the sentinel names a new primary and the others follow it",
            |s| {
                let new = s.primary()?;
                if new == old || !s.info(new, "replication")?.contains("role:master") {
                    return Ok(false);
                }
                let port = format!("master_port:{}", s.servers[new].port);
                for (i, server) in s.servers.iter().enumerate() {
                    if i == new || server.pid().is_none() {
                        continue;
                    }
                    let info = s.info(i, "replication")?;
                    if !(info.contains(&port) && info.contains("master_link_status:up")) {
                        return Ok(false);
                    }
                }
                Ok(true)
            },
        )?;
        self.primary()
    }

    fn sentinel_query(&self, args: &[&str]) -> Result<::redis::Value, RedisServerError> {
        let fail = |e: ::redis::RedisError| RedisServerError::Start(format!("sentinel: {e}"));
        let mut conn = ::redis::Client::open(format!("redis://127.0.0.1:{}", self.sentinel_port))
            .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(1)))
            .map_err(fail)?;
        let mut cmd = ::redis::cmd(args[0]);
        for a in &args[1..] {
            cmd.arg(*a);
        }
        cmd.query(&mut conn).map_err(fail)
    }

    fn info(&self, server: usize, section: &str) -> Result<String, RedisServerError> {
        ::redis::Client::open(self.servers[server].url())
            .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(1)))
            .and_then(|mut c| ::redis::cmd("INFO").arg(section).query(&mut c))
            .map_err(|e| RedisServerError::Start(format!("INFO {section}: {e}")))
    }

    fn wait_until(
        &self,
        what: &str,
        done: impl Fn(&Self) -> Result<bool, RedisServerError>,
    ) -> Result<(), RedisServerError> {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            let seen = done(self);
            if matches!(seen, Ok(true)) {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(RedisServerError::Start(format!(
                    "{what}: not within {START_TIMEOUT:?} ({seen:?})"
                )));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for RedisSentinels {
    fn drop(&mut self) {
        if let Some(mut child) = self.sentinel.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

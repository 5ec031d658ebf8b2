//! A real `redis-server` (or `valkey-server`) for tests and benchmarks: started on 127.0.0.1 on
//! a free port, in a fresh temporary directory, with the append-only file on; killed when
//! dropped.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a started server gets to answer PING.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// How many free ports a server is started on before it gives up: a port found free can be
/// taken by another process before the server binds it, and the server then exits.
const PORT_TRIES: usize = 5;

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

    /// [`RedisServer::start`] with `appendfsync always`: the server writes and syncs its AOF
    /// before it answers, so a SIGKILL loses nothing it acknowledged. (With `everysec` it may
    /// put the write off for up to two seconds while a background sync is slow, answering
    /// meanwhile.)
    pub fn start_fsync_always() -> Result<Self, RedisServerError> {
        Self::start_with(vec!["--appendfsync".into(), "always".into()])
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
        let extra = vec![
            "--tls-cert-file".into(),
            path(cert_file),
            "--tls-key-file".into(),
            path(key_file),
            "--tls-ca-cert-file".into(),
            path(ca_file),
            "--tls-auth-clients".into(),
            "yes".into(),
        ];
        Self::launch(extra, Some(client))
    }

    fn start_with(extra: Vec<String>) -> Result<Self, RedisServerError> {
        Self::launch(extra, None)
    }

    /// Creates and starts a server, on another free port when the one it was given was taken
    /// before it bound it (up to [`PORT_TRIES`] ports).
    fn launch(extra: Vec<String>, tls: Option<super::RedisTls>) -> Result<Self, RedisServerError> {
        let mut tries = 1;
        loop {
            let mut server = Self::create(extra.clone())?;
            server.tls = tls.clone();
            match server.spawn() {
                Ok(()) => return Ok(server),
                Err(NotServing::Exited(_)) if tries < PORT_TRIES => tries += 1,
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// A server not started yet, on a free port and in a new directory.
    fn create(extra: Vec<String>) -> Result<Self, RedisServerError> {
        let binary = find_binary().ok_or(RedisServerError::Missing)?;
        let port = free_port()?;
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

    /// Starts the server on its port and directory; returns once it answers there.
    fn spawn(&mut self) -> Result<(), NotServing> {
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
            .map_err(|e| {
                NotServing::Failed(RedisServerError::Start(format!(
                    "{}: {e}",
                    self.binary.display()
                )))
            })?;
        let url = self.url();
        let child = self.child.insert(child);
        let served = serving(child, &url, self.tls.as_ref(), self.port);
        if served.is_err() {
            self.kill();
        }
        served
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
        self.spawn().map_err(RedisServerError::from)
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Why a started server does not serve.
enum NotServing {
    /// It exited before it answered: its port was taken, say.
    Exited(String),
    Failed(RedisServerError),
}

impl From<NotServing> for RedisServerError {
    fn from(e: NotServing) -> Self {
        match e {
            NotServing::Exited(why) => RedisServerError::Start(why),
            NotServing::Failed(e) => e,
        }
    }
}

/// A loopback port free when asked.
fn free_port() -> Result<u16, RedisServerError> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| RedisServerError::Start(format!("no free port: {e}")))
}

/// Waits until `child`, a server just started on `port`, answers PING on `url` (so it has
/// loaded its data) as itself: `INFO server` names its process id, where a server of another
/// process that took the port meanwhile names another. Fails at once when `child` exits.
fn serving(
    child: &mut Child,
    url: &str,
    tls: Option<&super::RedisTls>,
    port: u16,
) -> Result<(), NotServing> {
    let deadline = Instant::now() + START_TIMEOUT;
    let itself = format!("process_id:{}", child.id());
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(NotServing::Exited(format!(
                "redis-server on port {port} exited before it answered ({status}); is the port \
                 taken?"
            )));
        }
        let answered = super::conn::client(url, tls)
            .and_then(|c| c.get_connection_with_timeout(Duration::from_millis(200)))
            .and_then(|mut c| {
                // Not for ever on a port that another kind of server took.
                c.set_read_timeout(Some(Duration::from_secs(1)))?;
                ::redis::cmd("PING").query::<String>(&mut c)?;
                ::redis::cmd("INFO").arg("server").query::<String>(&mut c)
            });
        let seen = match answered {
            Ok(info) if info.lines().any(|l| l.trim() == itself) => return Ok(()),
            Ok(_) => "another process answers on the port".to_string(),
            Err(e) => e.to_string(),
        };
        if Instant::now() > deadline {
            return Err(NotServing::Failed(RedisServerError::Start(format!(
                "no answer on port {port} within {START_TIMEOUT:?}: {seen}"
            ))));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A Redis Cluster of three primaries on loopback, each owning a third of the slots, with
/// replicas when asked; killed when dropped.
pub struct RedisCluster {
    /// The primaries as started, then their replicas.
    nodes: Vec<RedisServer>,
}

/// A cluster node as `CLUSTER NODES` lists it.
struct Listed {
    id: String,
    port: u16,
    primary: bool,
    failed: bool,
    /// The primary a replica follows.
    follows: String,
    slots: Vec<(u16, u16)>,
}

impl RedisCluster {
    /// Starts three cluster-enabled servers, assigns the slots and joins them, and returns once
    /// every node reports `cluster_state:ok`.
    pub fn start() -> Result<Self, RedisServerError> {
        Self::start_with_replicas(0)
    }

    /// The same with `replicas` replicas of each primary, in step when it returns. Nodes time
    /// out after a second, so a replica takes over a primary that died within a few seconds.
    pub fn start_with_replicas(replicas: usize) -> Result<Self, RedisServerError> {
        const SLOTS: u16 = 16384;
        const PRIMARIES: usize = 3;
        let args = || -> Vec<String> {
            [
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                "nodes.conf",
                "--cluster-node-timeout",
                "1000",
            ]
            .iter()
            .map(|a| (*a).to_string())
            .collect()
        };
        let mut cluster = Self { nodes: Vec::new() };
        for _ in 0..PRIMARIES {
            cluster.nodes.push(RedisServer::start_with(args())?);
        }
        let per_node = SLOTS / PRIMARIES as u16 + 1;
        for i in 0..PRIMARIES {
            let first = i as u16 * per_node;
            let last = ((i as u16 + 1) * per_node - 1).min(SLOTS - 1);
            let () = cluster.query(
                i,
                &[
                    "CLUSTER",
                    "ADDSLOTSRANGE",
                    &first.to_string(),
                    &last.to_string(),
                ],
            )?;
            if i > 0 {
                cluster.meet(i)?;
            }
        }
        cluster.wait_until("the cluster forms", |c| c.all_ok())?;
        for primary in 0..PRIMARIES {
            let id: String = cluster.query(primary, &["CLUSTER", "MYID"])?;
            for _ in 0..replicas {
                cluster.nodes.push(RedisServer::start_with(args())?);
                let replica = cluster.nodes.len() - 1;
                cluster.meet(replica)?;
                cluster.wait_until("a new node learns of its primary", |c| {
                    Ok(c.listed(replica)?.iter().any(|n| n.id == id))
                })?;
                let () = cluster.query(replica, &["CLUSTER", "REPLICATE", &id])?;
            }
        }
        cluster.wait_in_step()?;
        Ok(cluster)
    }

    /// Waits until every running replica is in step with its primary and every running node
    /// reports `cluster_state:ok` (after a node restarted, say: it comes back as a replica).
    pub fn wait_in_step(&self) -> Result<(), RedisServerError> {
        self.wait_until("the replicas are in step", |c| {
            // Every running node that is no primary of slots follows one with its link up, and
            // the primaries count each as online: a node restarted from its own files comes
            // back a primary of no slots until the cluster tells it to follow.
            let (mut nodes, mut followers, mut online) = (0, 0, 0);
            for node in c.up() {
                nodes += 1;
                let info: String = c.query(node, &["INFO", "replication"])?;
                if info.contains("role:slave") {
                    if !info.contains("master_link_status:up") {
                        return Ok(false);
                    }
                    followers += 1;
                } else {
                    online += info
                        .lines()
                        .filter(|l| l.starts_with("slave") && l.contains("state=online"))
                        .count();
                }
            }
            let asker = c.running()?;
            let primaries = c
                .listed(asker)?
                .iter()
                .filter(|n| n.primary && !n.failed && !n.slots.is_empty())
                .count();
            Ok(followers == nodes - primaries && online == followers && c.all_ok()?)
        })
    }

    /// The nodes running now.
    fn up(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.nodes.len()).filter(|i| self.nodes[*i].pid().is_some())
    }

    /// The URL of node `i` (any node reaches the whole cluster).
    pub fn url(&self, i: usize) -> String {
        self.nodes[i % self.nodes.len()].url()
    }

    /// Node `i`: the primaries as started, then their replicas.
    pub fn node(&mut self, i: usize) -> &mut RedisServer {
        &mut self.nodes[i]
    }

    /// Which node is, as a running node sees it, the primary holding `key`'s slot.
    pub fn primary_of(&self, key: &str) -> Result<usize, RedisServerError> {
        let asker = self.running()?;
        let slot: u16 = self.query(asker, &["CLUSTER", "KEYSLOT", key])?;
        let listed = self.listed(asker)?;
        let port = listed
            .iter()
            .find(|n| {
                n.primary && !n.failed && n.slots.iter().any(|(a, b)| (*a..=*b).contains(&slot))
            })
            .map(|n| n.port)
            .ok_or_else(|| RedisServerError::Start(format!("no primary holds slot {slot}")))?;
        self.index(port)
    }

    /// Which node replicates `primary`.
    pub fn replica_of(&self, primary: usize) -> Result<usize, RedisServerError> {
        let listed = self.listed(self.running()?)?;
        let id = listed
            .iter()
            .find(|n| n.port == self.nodes[primary].port)
            .map(|n| n.id.clone())
            .ok_or_else(|| RedisServerError::Start(format!("node {primary} is not listed")))?;
        let port = listed
            .iter()
            .find(|n| n.follows == id)
            .map(|n| n.port)
            .ok_or_else(|| RedisServerError::Start(format!("node {primary} has no replica")))?;
        self.index(port)
    }

    /// Moves the slot holding `key` from its primary to primary `to`, as a resharding does
    /// (`CLUSTER SETSLOT ... IMPORTING/MIGRATING`, `MIGRATE` of its keys a hundred at a time,
    /// then `CLUSTER SETSLOT ... NODE` on every primary), while clients go on using it.
    pub fn move_slot(&self, key: &str, to: usize) -> Result<(), RedisServerError> {
        let from = self.primary_of(key)?;
        let slot: u16 = self.query(from, &["CLUSTER", "KEYSLOT", key])?;
        let slot = slot.to_string();
        let from_id: String = self.query(from, &["CLUSTER", "MYID"])?;
        let to_id: String = self.query(to, &["CLUSTER", "MYID"])?;
        let () = self.query(to, &["CLUSTER", "SETSLOT", &slot, "IMPORTING", &from_id])?;
        let () = self.query(from, &["CLUSTER", "SETSLOT", &slot, "MIGRATING", &to_id])?;
        let port = self.nodes[to].port.to_string();
        loop {
            let keys: Vec<String> =
                self.query(from, &["CLUSTER", "GETKEYSINSLOT", &slot, "100"])?;
            if keys.is_empty() {
                break;
            }
            let mut args = vec!["MIGRATE", "127.0.0.1", &port, "", "0", "5000", "KEYS"];
            args.extend(keys.iter().map(String::as_str));
            let _: ::redis::Value = self.query(from, &args)?;
        }
        for node in [to, from] {
            let () = self.query(node, &["CLUSTER", "SETSLOT", &slot, "NODE", &to_id])?;
        }
        // The other nodes learn it from the two by gossip; telling them is quicker.
        for node in self.up().filter(|n| *n != to && *n != from) {
            let _ =
                self.query::<::redis::Value>(node, &["CLUSTER", "SETSLOT", &slot, "NODE", &to_id]);
        }
        let moved: u16 = slot.parse().unwrap_or_default();
        self.wait_until("every node sees the slot moved", |c| {
            for node in c.up() {
                let elsewhere = c.listed(node)?.iter().any(|n| {
                    n.primary
                        && n.port != c.nodes[to].port
                        && n.slots.iter().any(|(a, b)| (*a..=*b).contains(&moved))
                });
                if elsewhere {
                    return Ok(false);
                }
            }
            Ok(true)
        })
    }

    fn index(&self, port: u16) -> Result<usize, RedisServerError> {
        self.nodes
            .iter()
            .position(|n| n.port == port)
            .ok_or_else(|| RedisServerError::Start(format!("no node on port {port}")))
    }

    fn running(&self) -> Result<usize, RedisServerError> {
        self.up()
            .next()
            .ok_or_else(|| RedisServerError::Start("no node runs".into()))
    }

    fn meet(&self, node: usize) -> Result<(), RedisServerError> {
        self.query(
            0,
            &[
                "CLUSTER",
                "MEET",
                "127.0.0.1",
                &self.nodes[node].port.to_string(),
            ],
        )
    }

    fn all_ok(&self) -> Result<bool, RedisServerError> {
        for i in self.up() {
            let info: String = self.query(i, &["CLUSTER", "INFO"])?;
            if !info.contains("cluster_state:ok") {
                return Ok(false);
            }
        }
        Ok(true)
    }

    fn listed(&self, asker: usize) -> Result<Vec<Listed>, RedisServerError> {
        let text: String = self.query(asker, &["CLUSTER", "NODES"])?;
        Ok(text
            .lines()
            .filter_map(|line| {
                let fields: Vec<&str> = line.split_whitespace().collect();
                let port = fields
                    .get(1)?
                    .split('@')
                    .next()?
                    .rsplit_once(':')?
                    .1
                    .parse()
                    .ok()?;
                let flags = fields.get(2)?;
                let slots = fields
                    .iter()
                    .skip(8)
                    .filter_map(|range| {
                        let (a, b) = range.split_once('-').unwrap_or((range, range));
                        Some((a.parse().ok()?, b.parse().ok()?))
                    })
                    .collect();
                Some(Listed {
                    id: fields[0].to_string(),
                    port,
                    primary: flags.contains("master"),
                    failed: flags.contains("fail"),
                    follows: fields.get(3)?.to_string(),
                    slots,
                })
            })
            .collect())
    }

    fn query<T: ::redis::FromRedisValue>(
        &self,
        node: usize,
        args: &[&str],
    ) -> Result<T, RedisServerError> {
        query_at(&self.nodes[node].url(), "cluster", args)
    }

    fn wait_until(
        &self,
        what: &str,
        done: impl Fn(&Self) -> Result<bool, RedisServerError>,
    ) -> Result<(), RedisServerError> {
        wait_until(what, || done(self))
    }
}

/// The service name [`RedisSentinels`] watch.
pub const SENTINEL_SERVICE: &str = "mm-primary";

/// The password [`RedisSentinels`]' sentinel asks for (`requirepass`, as the Bitnami chart
/// sets by default), with characters a URL must percent-encode.
const SENTINEL_PASSWORD: &str = "s3cret&more";

/// A primary, two replicas of it and one sentinel watching them as [`SENTINEL_SERVICE`]
/// (quorum 1, a server is down after a second, [`SENTINEL_PASSWORD`] asked of its clients), on
/// loopback; killed when dropped.
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
        let dir = servers[0].dir.join("sentinel");
        std::fs::create_dir_all(&dir)
            .map_err(|e| RedisServerError::Start(format!("{}: {e}", dir.display())))?;
        let (sentinel, sentinel_port) = Self::start_sentinel(&servers[0], &dir)?;
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

    /// Starts the sentinel watching `primary`, its files in `dir`, on a free port (another
    /// when the one it was given was taken before it bound it); returns it and its port once
    /// it answers.
    fn start_sentinel(
        primary: &RedisServer,
        dir: &std::path::Path,
    ) -> Result<(Child, u16), RedisServerError> {
        let mut tries = 1;
        loop {
            let port = free_port()?;
            let conf = dir.join("sentinel.conf");
            std::fs::write(
                &conf,
                format!(
                    "port {port}\nbind 127.0.0.1\ndir {}\n\
                     sentinel monitor {SENTINEL_SERVICE} 127.0.0.1 {} 1\n\
                     sentinel down-after-milliseconds {SENTINEL_SERVICE} 1000\n\
                     sentinel failover-timeout {SENTINEL_SERVICE} 2000\n\
                     requirepass {SENTINEL_PASSWORD}\n",
                    dir.display(),
                    primary.port
                ),
            )
            .map_err(|e| RedisServerError::Start(format!("{}: {e}", conf.display())))?;
            let mut sentinel = Command::new(&primary.binary)
                .arg(&conf)
                .args(["--sentinel", "--logfile", ""])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .map_err(|e| RedisServerError::Start(format!("sentinel: {e}")))?;
            match serving(&mut sentinel, &sentinel_url(port), None, port) {
                Ok(()) => return Ok((sentinel, port)),
                Err(e) => {
                    let _ = sentinel.kill();
                    let _ = sentinel.wait();
                    match e {
                        NotServing::Exited(_) if tries < PORT_TRIES => tries += 1,
                        e => return Err(e.into()),
                    }
                }
            }
        }
    }

    /// `redis+sentinel://127.0.0.1:PORT/mm-primary/0?sentinel_password=...`.
    pub fn url(&self) -> String {
        format!(
            "redis+sentinel://127.0.0.1:{}/{SENTINEL_SERVICE}/0?sentinel_password={}",
            self.sentinel_port,
            percent_encoding::utf8_percent_encode(
                SENTINEL_PASSWORD,
                percent_encoding::NON_ALPHANUMERIC
            )
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
        query_at(&sentinel_url(self.sentinel_port), "sentinel", args)
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
        wait_until(what, || done(self))
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

/// The URL of the sentinel on `port` as a plain client of it (with its password).
fn sentinel_url(port: u16) -> String {
    format!(
        "redis://:{}@127.0.0.1:{port}",
        percent_encoding::utf8_percent_encode(
            SENTINEL_PASSWORD,
            percent_encoding::NON_ALPHANUMERIC
        )
    )
}

/// Polls `done` every 50 ms until it says so, for up to [`START_TIMEOUT`]; the error names
/// `what` and the last answer.
fn wait_until(
    what: &str,
    done: impl Fn() -> Result<bool, RedisServerError>,
) -> Result<(), RedisServerError> {
    let deadline = Instant::now() + START_TIMEOUT;
    loop {
        let seen = done();
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

/// Runs `args` on the server at `url`, on a connection of its own; errors say `what` it is.
fn query_at<T: ::redis::FromRedisValue>(
    url: &str,
    what: &str,
    args: &[&str],
) -> Result<T, RedisServerError> {
    let fail = |e: ::redis::RedisError| RedisServerError::Start(format!("{what}: {e}"));
    let mut conn = ::redis::Client::open(url)
        .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(1)))
        .map_err(fail)?;
    let mut cmd = ::redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    cmd.query(&mut conn).map_err(fail)
}

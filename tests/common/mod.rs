//! Shared helpers for integration tests: start the real server on 127.0.0.1:0 with a temporary
//! sled directory, and connect generated tonic clients to it.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_stream::StreamExt;
use tokio_util::sync::CancellationToken;
use tonic::transport::Channel;

use matchmaker::config::Config;
use matchmaker::proto::admin_service_client::AdminServiceClient;
use matchmaker::proto::client_service_client::ClientServiceClient;
use matchmaker::proto::game_server_service_client::GameServerServiceClient;
use matchmaker::proto::{self, TicketUpdate};
use matchmaker::server::ServerError;

/// Longest any test waits for an event before failing (never a sleep: a bound on awaiting).
pub const EVENT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long [`poll_until`] waits between two looks: short against [`EVENT_TIMEOUT`], long
/// enough that a waiting test leaves the shared CPU to the server it waits for.
pub const POLL_INTERVAL: Duration = Duration::from_millis(20);

/// Waits for state that changes on its own (a tick, a timer, a log line, a flush): calls
/// `probe` until it returns `Ok`, looking again every [`POLL_INTERVAL`], and fails the test
/// with `what` and the last `Err` (what was seen instead) once [`EVENT_TIMEOUT`] has passed.
/// The bound is on how long the test waits, not on how long the server takes: a fast server
/// passes at the first look.
pub async fn poll_until<T, E, Fut>(what: &str, probe: impl FnMut() -> Fut) -> T
where
    E: std::fmt::Debug,
    Fut: std::future::Future<Output = Result<T, E>>,
{
    poll_until_within(what, EVENT_TIMEOUT, probe).await
}

/// [`poll_until`] waiting up to `timeout`: for state that comes only after a wait of the
/// product's own (a lease), given as that wait plus [`EVENT_TIMEOUT`].
pub async fn poll_until_within<T, E, Fut>(
    what: &str,
    timeout: Duration,
    mut probe: impl FnMut() -> Fut,
) -> T
where
    E: std::fmt::Debug,
    Fut: std::future::Future<Output = Result<T, E>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        match probe().await {
            Ok(done) => return done,
            Err(seen) => assert!(
                tokio::time::Instant::now() < deadline,
                "{what}: not within {timeout:?}; last seen: {seen:?}"
            ),
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}

/// [`poll_until`] for a probe that blocks (a child process's log, a plain socket).
pub fn poll_until_blocking<T, E: std::fmt::Debug>(
    what: &str,
    mut probe: impl FnMut() -> Result<T, E>,
) -> T {
    let deadline = std::time::Instant::now() + EVENT_TIMEOUT;
    loop {
        match probe() {
            Ok(done) => return done,
            Err(seen) => assert!(
                std::time::Instant::now() < deadline,
                "{what}: not within {EVENT_TIMEOUT:?}; last seen: {seen:?}"
            ),
        }
        std::thread::sleep(POLL_INTERVAL);
    }
}

/// A running server and what is needed to stop it.
pub struct TestServer {
    pub addr: SocketAddr,
    pub shutdown: CancellationToken,
    pub task: Option<JoinHandle<Result<(), ServerError>>>,
    pub data_dir: std::path::PathBuf,
    /// The server's matchmaker clock: `advance` it to reach deadlines without sleeping.
    pub clock: matchmaker::matchmaker::Clock,
    _temp: Option<tempfile::TempDir>,
}

impl TestServer {
    /// Starts a server on a fresh temporary data dir; `extra_toml` is merged over the defaults.
    pub async fn start(extra_toml: &str) -> Self {
        let temp = tempfile::tempdir().expect("temp dir");
        let dir = temp.path().to_path_buf();
        let mut s = Self::start_in(&dir, extra_toml).await;
        s._temp = Some(temp);
        s
    }

    /// Starts a server on the given data dir.
    pub async fn start_in(data_dir: &std::path::Path, extra_toml: &str) -> Self {
        let config = Config::from_toml_str(extra_toml).expect("test config");
        Self::start_with(data_dir, config).await
    }

    /// Starts a server on the given data dir with a config built by the caller (e.g. loaded
    /// from a file, so `ReloadConfig` can read it again).
    pub async fn start_with(data_dir: &std::path::Path, mut config: Config) -> Self {
        config.server.tick_interval_ms = 20;
        config.server.metrics_addr = String::new();
        config.server.shutdown_grace_ms = 2000;
        config.server.data_dir = data_dir.to_path_buf();
        config.server.addr = "127.0.0.1:0".into();
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().unwrap();
        let shutdown = CancellationToken::new();
        let clock = matchmaker::matchmaker::Clock::start();
        let task = tokio::spawn(matchmaker::server::run_with_clock(
            config,
            listener,
            shutdown.clone(),
            clock.clone(),
        ));
        Self {
            addr,
            shutdown,
            task: Some(task),
            data_dir: data_dir.to_path_buf(),
            clock,
            _temp: None,
        }
    }

    pub async fn channel(&self) -> Channel {
        Channel::from_shared(format!("http://{}", self.addr))
            .unwrap()
            .connect_timeout(EVENT_TIMEOUT)
            .connect()
            .await
            .expect("connect")
    }

    pub async fn client(&self) -> ClientServiceClient<Channel> {
        ClientServiceClient::new(self.channel().await)
    }

    pub async fn game_server(&self) -> GameServerServiceClient<Channel> {
        GameServerServiceClient::new(self.channel().await)
    }

    pub async fn admin(&self) -> AdminServiceClient<Channel> {
        AdminServiceClient::new(self.channel().await)
    }

    /// Graceful shutdown; returns the server's result.
    pub async fn stop(&mut self) -> Result<(), ServerError> {
        self.shutdown.cancel();
        let task = self.task.take().expect("stopped once");
        tokio::time::timeout(EVENT_TIMEOUT, task)
            .await
            .expect("server stops within the timeout")
            .expect("server task did not panic")
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// Registers a game server (any region, unlimited capacity) and returns its match stream.
pub async fn serve(
    game_server: &mut GameServerServiceClient<Channel>,
    address: &str,
) -> tonic::Streaming<proto::MatchAssignment> {
    game_server
        .serve_matches(proto::ServeMatchesRequest {
            server_address: address.into(),
            ..Default::default()
        })
        .await
        .expect("serve_matches")
        .into_inner()
}

/// Enters a queue and returns the ticket id.
pub async fn enter(
    client: &mut ClientServiceClient<Channel>,
    queue: &str,
    players: &[&str],
) -> String {
    client
        .enter_queue(proto::EnterQueueRequest {
            queue: queue.into(),
            player_ids: players.iter().map(|p| p.to_string()).collect(),
            ..Default::default()
        })
        .await
        .expect("enter_queue")
        .into_inner()
        .ticket_id
}

/// A ticket's `WatchTicket` stream.
pub async fn watch(
    client: &mut ClientServiceClient<Channel>,
    ticket_id: &str,
) -> tonic::Streaming<TicketUpdate> {
    client
        .watch_ticket(proto::WatchTicketRequest {
            ticket_id: ticket_id.into(),
        })
        .await
        .expect("watch_ticket")
        .into_inner()
}

/// Watches a ticket until its stream ends; returns every update.
pub async fn watch_to_end(
    client: &mut ClientServiceClient<Channel>,
    ticket_id: &str,
) -> Vec<TicketUpdate> {
    let mut stream = watch(client, ticket_id).await;
    let mut updates = Vec::new();
    loop {
        match tokio::time::timeout(EVENT_TIMEOUT, stream.next()).await {
            Ok(Some(Ok(u))) => updates.push(u),
            Ok(Some(Err(status))) => panic!("watch stream failed: {status}"),
            Ok(None) => return updates,
            Err(_) => panic!("watch stream did not end; got {updates:?}"),
        }
    }
}

/// Waits for the next item of a stream, failing the test after [`EVENT_TIMEOUT`].
pub async fn next<T>(stream: &mut tonic::Streaming<T>) -> T {
    tokio::time::timeout(EVENT_TIMEOUT, stream.next())
        .await
        .expect("stream item within the timeout")
        .expect("stream still open")
        .expect("stream item ok")
}

/// `count` events from `WatchEvents` on `channel`, after cursor `after`, of `kinds` (empty: all).
pub async fn watch_events(
    channel: &Channel,
    after: u64,
    kinds: &[proto::EventKind],
    count: usize,
) -> Vec<proto::Event> {
    let mut stream = AdminServiceClient::new(channel.clone())
        .watch_events(proto::WatchEventsRequest {
            after_cursor: after,
            kinds: kinds.iter().map(|&k| k as i32).collect(),
        })
        .await
        .expect("watch_events")
        .into_inner();
    let mut events = Vec::new();
    while events.len() < count {
        events.push(next(&mut stream).await);
    }
    events
}

/// Enters every ticket and waits until the first one is MATCHED; returns its assignment.
pub async fn form_match(
    client: &mut ClientServiceClient<Channel>,
    queue: &str,
    tickets: &[&[&str]],
) -> proto::MatchAssignment {
    let mut ids = Vec::new();
    for players in tickets {
        ids.push(enter(client, queue, players).await);
    }
    let mut stream = watch(client, &ids[0]).await;
    loop {
        let u = next(&mut stream).await;
        if u.state == proto::TicketState::Matched as i32 {
            return u.assignment.expect("MATCHED carries the assignment");
        }
        assert_eq!(u.state, proto::TicketState::Searching as i32, "{u:?}");
    }
}

/// Reports placements per team of `assignment`, with the team containing `winner` first.
pub fn placements_with_winner(assignment: &proto::MatchAssignment, winner: &str) -> Vec<u32> {
    assignment
        .teams
        .iter()
        .map(|t| {
            if t.player_ids.iter().any(|p| p == winner) {
                1
            } else {
                2
            }
        })
        .collect()
}

/// Reports `m`'s result through a game server's client, the team containing `winner` first.
pub async fn report_winner(server: &TestServer, m: &proto::MatchAssignment, winner: &str) {
    report_winner_on(&server.channel().await, m, winner).await;
}

/// [`report_winner`] through any server's channel (a cluster node's).
pub async fn report_winner_on(channel: &Channel, m: &proto::MatchAssignment, winner: &str) {
    GameServerServiceClient::new(channel.clone())
        .report_match_result(proto::MatchResult {
            match_id: m.match_id.clone(),
            placements: placements_with_winner(m, winner),
            ..Default::default()
        })
        .await
        .expect("report");
}

/// A player's view in one queue.
pub async fn player(server: &TestServer, player: &str, queue: &str) -> proto::PlayerView {
    player_on(&server.channel().await, player, queue).await
}

/// [`player`] through any server's channel (a cluster node's).
pub async fn player_on(channel: &Channel, player: &str, queue: &str) -> proto::PlayerView {
    ClientServiceClient::new(channel.clone())
        .get_player(proto::GetPlayerRequest {
            player_id: player.into(),
            queue: queue.into(),
        })
        .await
        .expect("get_player")
        .into_inner()
}

/// The real `matchmaker` binary running as a child process (crash, chaos, kill -9, CLI,
/// descriptor and metrics tests). Dropping it SIGKILLs the child, so a failing test never
/// leaves a server behind.
pub struct ServerProcess {
    pub child: std::process::Child,
    /// The address the server logged (it was started on 127.0.0.1:0).
    pub addr: String,
    /// Every line the server wrote to stderr so far (drained by a thread, so the server never
    /// blocks on a full pipe).
    pub log: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl Drop for ServerProcess {
    /// Kills the server; when the test failed, prints the end of its log first.
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            let log = self.log.lock().unwrap_or_else(|p| p.into_inner());
            eprintln!("--- the last lines of the server on {} ---", self.addr);
            for line in log.iter().skip(log.len().saturating_sub(60)) {
                eprintln!("{line}");
            }
        }
    }
}

impl ServerProcess {
    /// Sends the process `signal` (`TERM`, `STOP`, `CONT`) with `kill`.
    pub fn signal(&self, signal: &str) {
        let status = std::process::Command::new("kill")
            .args([format!("-{signal}"), self.child.id().to_string()])
            .status()
            .expect("kill runs");
        assert!(status.success(), "kill -{signal} {}", self.child.id());
    }

    /// Starts `matchmaker serve` on `data_dir` with `config`; returns once it logged its address.
    pub fn start(data_dir: &std::path::Path, config: &std::path::Path) -> Self {
        let mut command = serve_command(config, "");
        command.arg("--data-dir").arg(data_dir);
        Self::spawn(command)
    }

    /// Runs `command`, a server on 127.0.0.1:0 (or a shell that execs one), at the server's
    /// default log level (or `MATCHMAKER_TEST_LOG`'s, to see more of a failing test's servers);
    /// returns once it logged its address.
    pub fn spawn(mut command: std::process::Command) -> Self {
        use std::io::{BufRead, BufReader};
        if !command.get_envs().any(|(k, _)| k == "RUST_LOG") {
            let level = std::env::var("MATCHMAKER_TEST_LOG")
                .unwrap_or_else(|_| matchmaker::telemetry::tracing::DEFAULT_LOG.to_string());
            command.env("RUST_LOG", level);
        }
        let mut child = command
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn the matchmaker binary");
        let stderr = child.stderr.take().expect("piped stderr");
        let log = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let (addr_tx, addr_rx) = std::sync::mpsc::channel();
        {
            let log = log.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stderr).lines() {
                    let Ok(line) = line else { break };
                    if let Some(rest) = line.split("serving gRPC addr=").nth(1) {
                        let addr = rest.split_whitespace().next().unwrap_or("").to_owned();
                        let _ = addr_tx.send(addr);
                    }
                    log.lock().unwrap_or_else(|p| p.into_inner()).push(line);
                }
            });
        }
        // The guard exists before the wait, so a server that never starts is killed too.
        let mut server = Self {
            child,
            addr: String::new(),
            log,
        };
        // Longer than an event: a restart replays the journal first, in a debug build.
        server.addr = addr_rx
            .recv_timeout(Duration::from_secs(60))
            .expect("server logged its address");
        server
    }

    /// Whether some line of the log contains `text`.
    pub fn logged(&self, text: &str) -> bool {
        self.times_logged(text) > 0
    }

    /// Waits until some line of the log contains `text`: a line the server wrote before an
    /// effect the test saw (an answer, a status) reaches the log a moment later, through the
    /// thread that reads it.
    pub async fn wait_logged(&self, text: &str) {
        poll_until(&format!("the server logs {text:?}"), || {
            let found = self.logged(text);
            async move { if found { Ok(()) } else { Err("not yet") } }
        })
        .await;
    }

    /// How many lines of the log contain `text`.
    pub fn times_logged(&self, text: &str) -> usize {
        self.log
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter(|l| l.contains(text))
            .count()
    }

    /// Every line of the log so far.
    pub fn log_lines(&self) -> Vec<String> {
        self.log.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// A connected channel to it.
    pub async fn channel(&self) -> Channel {
        Channel::from_shared(format!("http://{}", self.addr))
            .unwrap()
            .connect_timeout(EVENT_TIMEOUT)
            .connect()
            .await
            .expect("connect")
    }
}

/// RESOURCE_EXHAUSTED answers over both sides of a loadgen run.
pub fn resource_exhausted(report: &matchmaker::tools::loadgen::Report) -> u64 {
    [&report.target, &report.baseline]
        .iter()
        .map(|p| p.error_codes.get("ResourceExhausted").copied().unwrap_or(0))
        .sum()
}

/// `matchmaker serve` on 127.0.0.1:0 with `config` and the metrics listener on `metrics_addr`
/// (empty: none), not started yet.
pub fn serve_command(config: &std::path::Path, metrics_addr: &str) -> std::process::Command {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_matchmaker"));
    command
        .args([
            "serve",
            "--addr",
            "127.0.0.1:0",
            "--metrics-addr",
            metrics_addr,
            "--config",
        ])
        .arg(config);
    command
}

/// A Redis that takes only TLS and checks its clients' certificates, with one self-signed
/// certificate (for localhost and 127.0.0.1, written to `dir`) as its own, as the authority it
/// checks clients against and as the client certificate: the server, the certificate's and
/// the key's files, and what a client trusts and presents.
pub fn tls_redis(
    dir: &std::path::Path,
) -> (
    matchmaker::store::RedisServer,
    std::path::PathBuf,
    std::path::PathBuf,
    matchmaker::store::RedisTls,
) {
    let cert =
        rcgen::generate_simple_self_signed(vec!["localhost".into(), "127.0.0.1".into()]).unwrap();
    let (pem, key) = (cert.cert.pem(), cert.signing_key.serialize_pem());
    let (cert_file, key_file) = (dir.join("redis.pem"), dir.join("redis.key"));
    std::fs::write(&cert_file, &pem).unwrap();
    std::fs::write(&key_file, &key).unwrap();
    let tls = matchmaker::store::RedisTls {
        ca_pem: Some(pem.clone().into_bytes()),
        client: Some((pem.into_bytes(), key.into_bytes())),
    };
    let redis =
        matchmaker::store::RedisServer::start_tls(&cert_file, &key_file, &cert_file, tls.clone())
            .unwrap_or_else(|e| panic!("{e}"));
    (redis, cert_file, key_file, tls)
}

/// Writes `dir/cluster.toml` for nodes on `redis_url` with a lease of `lease_ms` and a 20 ms
/// tick, `extra` TOML in `[cluster]` after it; returns its path.
pub fn cluster_config(
    dir: &std::path::Path,
    redis_url: &str,
    lease_ms: u64,
    extra: &str,
) -> std::path::PathBuf {
    let path = dir.join("cluster.toml");
    std::fs::write(
        &path,
        format!(
            "[server]\ntick_interval_ms = 20\n[cluster]\nredis_url = \"{redis_url}\"\nlease_ms = {lease_ms}\n{extra}"
        ),
    )
    .unwrap();
    path
}

/// The node that owns the queues of the default keyspace in `redis`, as the lease says
/// (`None` while nobody does).
pub fn lease_holder(redis: &matchmaker::store::RedisServer) -> Option<String> {
    lease_holder_of(redis, "mm")
}

/// The node holding `keyspace`'s lease in `redis` (a shard's), if any.
pub fn lease_holder_of(redis: &matchmaker::store::RedisServer, keyspace: &str) -> Option<String> {
    let client = redis::Client::open(redis.url()).ok()?;
    let mut conn = client.get_connection().ok()?;
    let value: Option<String> = redis::cmd("GET")
        .arg(format!("{{{keyspace}}}:lease"))
        .query(&mut conn)
        .ok()?;
    Some(value?.split('|').nth(1)?.to_string())
}

/// Gives `keyspace`'s lease to a node that does not exist (`n9`), under a newer fencing token,
/// for a minute: its owner's next renewal finds it gone, as when another node took over.
pub fn take_lease(redis: &matchmaker::store::RedisServer, keyspace: &str) {
    let mut conn = redis::Client::open(redis.url())
        .unwrap()
        .get_connection()
        .unwrap();
    let token: u64 = redis::cmd("INCR")
        .arg(format!("{{{keyspace}}}:fence"))
        .query(&mut conn)
        .unwrap();
    let () = redis::cmd("SET")
        .arg(format!("{{{keyspace}}}:lease"))
        .arg(format!("{token}|n9|127.0.0.1:1"))
        .arg("PX")
        .arg(60_000)
        .query(&mut conn)
        .unwrap();
}

/// Waits until some node owns the queues and answers through `channel`.
pub async fn queues_answer(channel: &Channel) {
    poll_until("the cluster answers", || {
        let mut admin = AdminServiceClient::new(channel.clone());
        async move {
            admin
                .get_queue_stats(proto::GetQueueStatsRequest::default())
                .await
                .map(|_| ())
        }
    })
    .await;
}

/// Starts `matchmaker serve` as cluster node `name` on `config` (a file naming the Redis), at
/// log level `rust_log` (`info` by default); returns once it logged its address.
pub fn cluster_node(config: &std::path::Path, name: &str, rust_log: Option<&str>) -> ServerProcess {
    cluster_node_with_metrics(config, name, rust_log, "")
}

/// [`cluster_node`] with its metrics listener (and console) on `metrics_addr`.
pub fn cluster_node_with_metrics(
    config: &std::path::Path,
    name: &str,
    rust_log: Option<&str>,
    metrics_addr: &str,
) -> ServerProcess {
    let mut command = serve_command(config, metrics_addr);
    command.env("MATCHMAKER_CLUSTER__NODE_ID", name);
    if let Some(level) = rust_log {
        command.env("RUST_LOG", level);
    }
    ServerProcess::spawn(command)
}

impl ServerProcess {
    /// The address its metrics listener (and console) bound, as the server logged it: started
    /// with `--metrics-addr 127.0.0.1:0`, so no other process can take the port first. A
    /// cluster node logs it after its gRPC address, so this waits for the line.
    pub fn metrics_addr(&self) -> String {
        poll_until_blocking("the server logged its metrics address", || {
            self.log_lines()
                .iter()
                .find_map(|line| {
                    let rest = line
                        .split("serving Prometheus metrics on /metrics addr=")
                        .nth(1)?;
                    rest.split_whitespace().next().map(str::to_owned)
                })
                .ok_or("no metrics address logged yet")
        })
    }
}

/// A grpc-web request body: `message` as one data frame.
pub fn grpc_web_frame(message: &impl prost::Message) -> Vec<u8> {
    let bytes = message.encode_to_vec();
    let mut out = vec![0u8];
    out.extend_from_slice(&(bytes.len() as u32).to_be_bytes());
    out.extend_from_slice(&bytes);
    out
}

/// Skills equal bit for bit: records are read back exactly (serde_json with `float_roundtrip`),
/// so a replay must reproduce the same numbers.
pub fn same_skill(a: &matchmaker::rating::Skill, b: &matchmaker::rating::Skill) -> bool {
    a.mean.to_bits() == b.mean.to_bits()
        && a.deviation.to_bits() == b.deviation.to_bits()
        && a.volatility.to_bits() == b.volatility.to_bits()
}

/// A proto rating as a skill.
pub fn skill(r: &proto::Rating) -> matchmaker::rating::Skill {
    matchmaker::rating::Skill {
        mean: r.mean,
        deviation: r.deviation,
        volatility: r.volatility,
    }
}

/// Two acknowledgements' changes are the same, bit for bit.
pub fn same_changes(a: &[proto::PlayerChange], b: &[proto::PlayerChange]) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|(x, y)| {
            x.player_id == y.player_id
                && x.rank_points_before == y.rank_points_before
                && x.rank_points_after == y.rank_points_after
                && [(&x.before, &y.before), (&x.after, &y.after)]
                    .iter()
                    .all(|(r, s)| match (r, s) {
                        (Some(r), Some(s)) => same_skill(&skill(r), &skill(s)),
                        (None, None) => true,
                        _ => false,
                    })
        })
}

//! `matchmaker bench-cluster`: a cluster node against the embedded server in the same run, and
//! failover times. It starts a real `redis-server` (append-only file, `appendfsync everysec`) on
//! a free loopback port in a temporary directory, one embedded server and `--nodes` cluster
//! nodes, all as child processes of this binary; then, in alternating rounds, the load generator
//! runs `EnterQueue` and `ReportMatchResult` against the embedded server, against the owner of
//! the queues and against a node that forwards to it. Last, on a fresh cluster, it enters
//! `--waiting` tickets and kills the owner with SIGKILL, `--kills` times, and measures how long
//! the cluster takes to answer again through another node; with `--players N`, the cluster holds
//! N rated players, which each new owner loads before it answers. The kills run twice: with
//! standby copies (the default; each kill waits until every other node holds one), and with
//! `standby = false`, each new owner reading everything.
//! Everything runs on loopback, bounded in time, and is stopped at the end.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde::Serialize;

use super::ToolError;
use super::loadgen::{self, Rpc};
use crate::cluster::lease::Owner;
use crate::proto;
use crate::store::RedisServer;

/// What `bench-cluster --json` prints.
#[derive(Debug, Serialize)]
pub struct ClusterBench {
    pub nodes: usize,
    pub lease_ms: u64,
    pub seconds_per_side: f64,
    pub concurrency: usize,
    pub enter_queue: Sides,
    pub report_result: Sides,
    pub waiting_per_kill: usize,
    /// Rated players stored before the failovers, which each new owner loads.
    pub rated_players: usize,
    /// Kills of the owner while the other nodes keep standby copies (the default): each kill
    /// waits until every other node holds one.
    pub failover: Failovers,
    /// The same with `standby = false`: each new owner reads everything from Redis.
    pub failover_reading_everything: Failovers,
    /// `failover.p50_ms / failover_reading_everything.p50_ms`.
    pub failover_p50_ratio: f64,
    /// What each durable write costs Redis itself, measured on the store alone.
    pub redis_cost: RedisCost,
    /// The same with `standby = false`: flushes count themselves but log no change.
    pub redis_cost_without_change_log: RedisCost,
}

/// Failover times over repeated kills of the owner, measured on a fresh cluster with
/// `waiting_per_kill` more waiting tickets before each kill.
#[derive(Debug, Default, Serialize)]
pub struct Failovers {
    /// Kill of the owner → lease held by another node (ms), per kill.
    pub lease_handover_ms: Vec<f64>,
    /// Kill of the owner → a call through another node answered OK (ms), per kill.
    pub failover_ms: Vec<f64>,
    pub p50_ms: f64,
    pub max_ms: f64,
    /// Resident memory of the owner and of the other node before the first kill, MB.
    pub owner_rss_mb: f64,
    pub other_rss_mb: f64,
}

/// Kills the owner `opts.kills` times on a fresh cluster in database `db` of `redis`, with
/// standby copies on or off, and times each failover.
async fn failovers(
    redis: &RedisServer,
    config: &Path,
    opts: &Options,
    db: u32,
    standby: bool,
) -> Result<Failovers, ToolError> {
    let fresh = redis.url().replace("/0", &format!("/{db}"));
    let fresh_env = |i: usize| {
        vec![
            ("MATCHMAKER_CLUSTER__REDIS_URL", fresh.clone()),
            ("MATCHMAKER_CLUSTER__NODE_ID", format!("bench-{i}")),
            ("MATCHMAKER_CLUSTER__LEASE_MS", opts.lease_ms.to_string()),
            ("MATCHMAKER_CLUSTER__STANDBY", standby.to_string()),
        ]
    };
    store_players(&fresh, opts.players).await?;
    let mut nodes = Vec::new();
    for i in 0..opts.nodes {
        nodes.push(Process::start(config, &fresh_env(i))?);
    }
    let mut out = Failovers::default();
    for kill in 0..opts.kills {
        let owner = wait_for_owner(&fresh, None, Duration::from_secs(30)).await?;
        let i = nodes_index(&owner)?;
        let survivor = nodes[(i + 1) % nodes.len()].addr.clone();
        // The survivor answers before the kill, so what is measured is the failover alone.
        answer(&survivor, Duration::from_secs(30)).await?;
        if standby {
            for (j, node) in nodes.iter().enumerate() {
                if j != i {
                    standby_ready(&node.addr, Duration::from_secs(300)).await?;
                }
            }
        }
        if kill == 0 {
            out.owner_rss_mb = rss_mb(&nodes[i].child);
            out.other_rss_mb = rss_mb(&nodes[(i + 1) % nodes.len()].child);
        }
        enter_waiting(&survivor, kill, opts.waiting).await?;
        let killed = Instant::now();
        let _ = nodes[i].child.kill();
        let _ = nodes[i].child.wait();
        wait_for_owner(&fresh, Some(&owner), Duration::from_secs(60)).await?;
        out.lease_handover_ms
            .push(killed.elapsed().as_secs_f64() * 1e3);
        answer(&survivor, Duration::from_secs(60)).await?;
        out.failover_ms.push(killed.elapsed().as_secs_f64() * 1e3);
        nodes[i] = Process::start(config, &fresh_env(i))?;
    }
    let mut sorted = out.failover_ms.clone();
    sorted.sort_by(f64::total_cmp);
    out.p50_ms = crate::math::percentile(&sorted, 0.5);
    out.max_ms = sorted.last().copied().unwrap_or(0.0);
    Ok(out)
}

/// A child process's resident memory (`VmRSS`), MB; 0 where `/proc` does not tell.
fn rss_mb(child: &Child) -> f64 {
    std::fs::read_to_string(format!("/proc/{}/status", child.id()))
        .ok()
        .and_then(|status| {
            let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
            line.split_whitespace().nth(1)?.parse::<f64>().ok()
        })
        .map_or(0.0, |kb| kb / 1024.0)
}

/// Waits until the node at `addr` reports a current standby copy (its `standby` health).
async fn standby_ready(addr: &str, within: Duration) -> Result<(), ToolError> {
    use tonic_health::pb::health_check_response::ServingStatus;
    let deadline = Instant::now() + within;
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))?.connect_lazy();
    let mut health = tonic_health::pb::health_client::HealthClient::new(channel);
    loop {
        let request = tonic_health::pb::HealthCheckRequest {
            service: crate::cluster::STANDBY.into(),
        };
        if let Ok(r) = health.check(request).await
            && r.into_inner().status == ServingStatus::Serving as i32
        {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(ToolError::Run(format!(
                "{addr} held no standby copy within {within:?}"
            )));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Redis CPU (user + system, from `INFO cpu`) per durable write, in microseconds, with 64
/// writers flushing concurrently as under load; and the bytes each adds to Redis' memory.
#[derive(Debug, Default, Serialize)]
pub struct RedisCost {
    pub writes: usize,
    /// A waiting ticket written (EnterQueue).
    pub ticket_cpu_us: f64,
    /// A formed 1v1 match written and its two tickets removed (allocation).
    pub match_cpu_us: f64,
    /// A 1v1 result journaled with both players' records, its acknowledgement and its match
    /// record at the head of both players' histories.
    pub result_cpu_us: f64,
    /// Redis memory per rated player (one 1v1 record), bytes.
    pub player_bytes: f64,
}

/// One RPC's throughput on each side, calls per second.
#[derive(Debug, Default, Serialize)]
pub struct Sides {
    pub embedded_rps: f64,
    /// Through the node that owns the queues.
    pub owner_rps: f64,
    /// Through a node that forwards every call to the owner.
    pub forwarding_rps: f64,
    /// `owner_rps / embedded_rps`.
    pub owner_ratio: f64,
    /// `forwarding_rps / embedded_rps`.
    pub forwarding_ratio: f64,
    pub embedded_errors: u64,
    pub owner_errors: u64,
    pub forwarding_errors: u64,
}

/// The benchmark's settings.
#[derive(Clone, Debug)]
pub struct Options {
    pub nodes: usize,
    pub seconds: f64,
    pub rounds: usize,
    pub concurrency: usize,
    pub kills: usize,
    /// Tickets entered before each kill, for the next owner to restore.
    pub waiting: usize,
    /// Rated players stored before the failovers.
    pub players: usize,
    pub lease_ms: u64,
    pub scratch: PathBuf,
}

/// A server child process; killed when dropped.
struct Process {
    child: Child,
    addr: String,
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Process {
    /// Runs `matchmaker serve` with `env`; returns once it logged the address it serves on.
    fn start(config: &Path, env: &[(&str, String)]) -> Result<Self, ToolError> {
        let exe = std::env::current_exe().map_err(ToolError::read("this binary".into()))?;
        let mut command = Command::new(exe);
        command
            .args([
                "serve",
                "--addr",
                "127.0.0.1:0",
                "--metrics-addr",
                "",
                "--config",
            ])
            .arg(config)
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        for (k, v) in env {
            command.env(k, v);
        }
        let mut child = command
            .spawn()
            .map_err(ToolError::read("start a server".into()))?;
        let stderr = child.stderr.take().expect("stderr is piped");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut sent = false;
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if !sent && let Some(rest) = line.split("serving gRPC addr=").nth(1) {
                    let addr = rest.split_whitespace().next().unwrap_or("").to_string();
                    sent = tx.send(addr).is_ok();
                }
            }
        });
        let mut process = Self {
            child,
            addr: String::new(),
        };
        process.addr = rx
            .recv_timeout(Duration::from_secs(60))
            .map_err(|_| ToolError::Run("a server did not start within 60 s".into()))?;
        Ok(process)
    }
}

/// Runs the benchmark.
pub async fn run(opts: Options) -> Result<ClusterBench, ToolError> {
    if opts.nodes < 2 {
        return Err(ToolError::flag("--nodes", "must be at least 2"));
    }
    if !(300..=60_000).contains(&opts.lease_ms) {
        return Err(ToolError::flag("--lease-ms", "must be in 300..=60000"));
    }
    let redis = RedisServer::start().map_err(|e| ToolError::Run(e.to_string()))?;
    let dir = opts.scratch.join(format!(
        "matchmaker-bench-cluster-{}",
        crate::ids::new_id("b")
    ));
    std::fs::create_dir_all(&dir).map_err(ToolError::read(format!("{}", dir.display())))?;
    let result = measure(&opts, &redis, &dir).await;
    let _ = std::fs::remove_dir_all(&dir);
    result
}

async fn measure(
    opts: &Options,
    redis: &RedisServer,
    dir: &Path,
) -> Result<ClusterBench, ToolError> {
    let config = dir.join("bench.toml");
    std::fs::write(&config, "").map_err(ToolError::read(format!("{}", config.display())))?;
    // Every server may have every caller's call in flight: a cluster's EnterQueue waits for its
    // Redis write, so with more callers than the default limit (256) the owner would shed some
    // of them, which measures the limit, not the server. Same setting on every side.
    let limit = (
        "MATCHMAKER_SERVER__MAX_CONCURRENT_REQUESTS",
        max_concurrent_requests(opts.concurrency).to_string(),
    );
    let embedded = Process::start(
        &config,
        &[
            (
                "MATCHMAKER_SERVER__DATA_DIR",
                dir.join("embedded").display().to_string(),
            ),
            limit.clone(),
        ],
    )?;
    let node_env = |i: usize| {
        vec![
            ("MATCHMAKER_CLUSTER__REDIS_URL", redis.url().to_string()),
            ("MATCHMAKER_CLUSTER__NODE_ID", format!("bench-{i}")),
            ("MATCHMAKER_CLUSTER__LEASE_MS", opts.lease_ms.to_string()),
            limit.clone(),
        ]
    };
    let mut nodes = Vec::new();
    for i in 0..opts.nodes {
        nodes.push(Process::start(&config, &node_env(i))?);
    }
    let owner_id = wait_for_owner(&redis.url(), None, Duration::from_secs(30)).await?;
    let owner_index = nodes_index(&owner_id)?;
    let forwarding_index = (owner_index + 1) % nodes.len();
    let mut enter = Sides::default();
    let mut report = Sides::default();
    let slice = opts.seconds / opts.rounds as f64;
    for _ in 0..opts.rounds {
        for (rpc, sides) in [
            (Rpc::EnterQueue, &mut enter),
            (Rpc::ReportResult, &mut report),
        ] {
            let e = load(&embedded.addr, rpc, slice, opts.concurrency).await?;
            let o = load(&nodes[owner_index].addr, rpc, slice, opts.concurrency).await?;
            let f = load(&nodes[forwarding_index].addr, rpc, slice, opts.concurrency).await?;
            sides.embedded_rps += e.0 / opts.rounds as f64;
            sides.owner_rps += o.0 / opts.rounds as f64;
            sides.forwarding_rps += f.0 / opts.rounds as f64;
            sides.embedded_errors += e.1;
            sides.owner_errors += o.1;
            sides.forwarding_errors += f.1;
        }
    }
    for s in [&mut enter, &mut report] {
        s.owner_ratio = s.owner_rps / s.embedded_rps.max(f64::MIN_POSITIVE);
        s.forwarding_ratio = s.forwarding_rps / s.embedded_rps.max(f64::MIN_POSITIVE);
    }
    drop(embedded);
    drop(nodes);

    // Failover on a fresh cluster (its own database): the loaded one above holds every match
    // the load formed, which no game server ever ended. Once with standby copies (the
    // default), once with every new owner reading everything.
    let warm = failovers(redis, &config, opts, 2, true).await?;
    let cold = failovers(redis, &config, opts, 3, false).await?;
    let redis_cost_without_change_log = redis_cost(redis, 20_000, 4, false).await?;
    let redis_cost = redis_cost(redis, 20_000, 1, true).await?;
    Ok(ClusterBench {
        nodes: opts.nodes,
        lease_ms: opts.lease_ms,
        seconds_per_side: opts.seconds,
        concurrency: opts.concurrency,
        enter_queue: enter,
        report_result: report,
        waiting_per_kill: opts.waiting,
        failover_p50_ratio: warm.p50_ms / cold.p50_ms.max(f64::MIN_POSITIVE),
        failover: warm,
        failover_reading_everything: cold,
        rated_players: opts.players,
        redis_cost,
        redis_cost_without_change_log,
    })
}

/// Stores `n` rated 1v1 players in the cluster's Redis at `url` (before any node runs on it),
/// through the Redis store under a lease of its own, given up at the end.
async fn store_players(url: &str, n: usize) -> Result<(), ToolError> {
    use crate::store::Storage;
    if n == 0 {
        return Ok(());
    }
    let run = |e: redis::RedisError| ToolError::Run(format!("redis: {e}"));
    let mut conn = redis::Client::open(url)
        .map_err(run)?
        .get_multiplexed_async_connection()
        .await
        .map_err(run)?;
    let lease = |cmd: &str| {
        let mut c = redis::cmd(cmd);
        c.arg(crate::store::Keys::default().lease());
        c
    };
    let () = lease("SET")
        .arg("1|bench|-")
        .query_async(&mut conn)
        .await
        .map_err(run)?;
    let store =
        crate::store::RedisStore::open(url, 1, &crate::store::RedisOptions::default()).await?;
    let config = crate::config::Config::from_toml_str("")?;
    let mut rated = super::bench_memory::RatedPlayers::new(&config.queues["1v1"], "1v1");
    let mut done = 0;
    while done < n {
        let batch = super::bench_memory::RatedPlayers::BATCH.min(n - done);
        rated.write(&store, done..done + batch)?;
        store.flush_async().await?;
        done += batch;
    }
    drop(store);
    let _: i64 = lease("DEL").query_async(&mut conn).await.map_err(run)?;
    Ok(())
}

/// Redis' CPU seconds so far and its memory in use.
async fn redis_usage(
    conn: &mut redis::aio::MultiplexedConnection,
) -> Result<(f64, f64), ToolError> {
    let info: String = redis::cmd("INFO")
        .arg("all")
        .query_async(conn)
        .await
        .map_err(|e| ToolError::Run(format!("redis INFO: {e}")))?;
    let field = |name: &str| {
        info.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    Ok((
        field("used_cpu_user") + field("used_cpu_sys"),
        field("used_memory"),
    ))
}

/// Writes `n` tickets, then `n` matches (each removing two tickets), then `n` results through
/// the Redis store on database `db` of `redis`, 64 flushes at a time, and divides Redis' CPU by
/// the count; with or without the change log standby copies follow.
async fn redis_cost(
    redis: &RedisServer,
    n: usize,
    db: u32,
    change_log: bool,
) -> Result<RedisCost, ToolError> {
    use crate::ids::{MatchId, PlayerId, TicketId};
    use crate::store::{EntryKind, JournalEntry, Storage, StoredMatch, StoredTicket};
    let url = redis.url().replace("/0", &format!("/{db}"));
    let run = |e: redis::RedisError| ToolError::Run(format!("redis: {e}"));
    let client = redis::Client::open(url.as_str()).map_err(run)?;
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .map_err(run)?;
    let () = redis::cmd("SET")
        .arg(crate::store::Keys::default().lease())
        .arg("1|bench|-")
        .query_async(&mut conn)
        .await
        .map_err(run)?;
    let store = std::sync::Arc::new(
        crate::store::RedisStore::open(
            &url,
            1,
            &crate::store::RedisOptions {
                change_log,
                ..crate::store::RedisOptions::default()
            },
        )
        .await?,
    );
    let config = crate::config::Config::from_toml_str("")?;
    let q = &config.queues["1v1"];
    let record = crate::records::PoolRecord::initial(&q.rating, q.ranking, &config.ranking);
    let ticket = |i: usize| StoredTicket {
        ticket_id: TicketId::new(format!("t-{i}").as_str()),
        queue: "1v1".into(),
        players: vec![PlayerId::new(format!("p-{i}").as_str())],
        entered_unix: 1.7e9,
        party_skill: None,
        region_latency_ms: Vec::new(),
        roles: Vec::new(),
        attributes: Default::default(),
        avoid: Vec::new(),
    };
    let m = |i: usize| StoredMatch {
        match_id: MatchId::new(format!("m-{i}").as_str()),
        queue: "1v1".into(),
        teams: vec![
            vec![PlayerId::new(format!("p-{}", 2 * i).as_str())],
            vec![PlayerId::new(format!("p-{}", 2 * i + 1).as_str())],
        ],
        win_probability: vec![0.5, 0.5],
        region: None,
        server_address: "10.0.0.1:7777".into(),
        formed_unix: 1.7e9,
        parties: Vec::new(),
        backfill: Vec::new(),
        left: Vec::new(),
        roles: Default::default(),
        attributes: Default::default(),
        started_unix: None,
        // Its two tickets, stored with it as a server stores them.
        tickets: (2 * i..2 * i + 2)
            .map(|p| {
                (
                    crate::ids::TicketId::new(format!("t-{p:032x}").as_str()),
                    vec![PlayerId::new(format!("p-{p}").as_str())],
                )
            })
            .collect(),
        kept_unix: None,
        backfill_opened_unix: None,
    };
    let result = |i: usize| JournalEntry {
        match_id: MatchId::new(format!("m-{i}").as_str()),
        applied_unix: 1.7e9,
        pool: "1v1".into(),
        records: vec![
            (
                PlayerId::new(format!("p-{}", 2 * i).as_str()),
                record.clone(),
            ),
            (
                PlayerId::new(format!("p-{}", 2 * i + 1).as_str()),
                record.clone(),
            ),
        ],
        parties: Vec::new(),
        ack: crate::records::ResultAck {
            queue: "1v1".into(),
            changes: Vec::new(),
            report: None,
        },
        kind: EntryKind::Result,
        season: None,
        calibration: None,
        // As a server writes it: the match's record, at the head of both players' histories.
        history: Some(crate::store::HistoryWrite {
            record: crate::records::MatchRecord {
                match_id: MatchId::new(format!("m-{i}").as_str()),
                queue: "1v1".into(),
                phase: crate::records::EndedPhase::Completed,
                teams: vec![
                    vec![PlayerId::new(format!("p-{}", 2 * i).as_str())],
                    vec![PlayerId::new(format!("p-{}", 2 * i + 1).as_str())],
                ],
                placements: vec![1, 2],
                changes: Vec::new(),
                server_address: "10.0.0.1:7777".into(),
                win_probability: vec![0.5, 0.5],
                formed_unix: 1.7e9,
                started_unix: None,
                ended_unix: 1.7e9 + 600.0,
            },
            keep: config.history.matches_per_player,
        }),
    };
    // One phase: `write(i)` then a flush, 64 at a time; Redis CPU per write.
    async fn phase(
        store: &std::sync::Arc<crate::store::RedisStore>,
        conn: &mut redis::aio::MultiplexedConnection,
        n: usize,
        write: impl Fn(&crate::store::RedisStore, usize) -> Result<(), crate::store::StoreError>,
    ) -> Result<(f64, f64), ToolError> {
        let (cpu0, mem0) = redis_usage(conn).await?;
        for start in (0..n).step_by(64) {
            let mut flights = Vec::new();
            for i in start..(start + 64).min(n) {
                write(store, i)?;
                flights.push(store.flush_async());
            }
            for f in flights {
                f.await?;
            }
        }
        let (cpu1, mem1) = redis_usage(conn).await?;
        Ok(((cpu1 - cpu0) * 1e6 / n as f64, (mem1 - mem0) / n as f64))
    }
    // Two tickets per match: the match phase takes both of its players' tickets out.
    let (ticket_cpu_us, _) =
        phase(&store, &mut conn, 2 * n, |s, i| s.put_ticket(&ticket(i))).await?;
    let (match_cpu_us, _) = phase(&store, &mut conn, n, |s, i| {
        let encoded = vec![crate::store::encode_match(&m(i))?];
        s.put_segments(&[(i as u64 + 1, &encoded)], &[])?;
        s.remove_tickets(&[
            TicketId::new(format!("t-{}", 2 * i).as_str()),
            TicketId::new(format!("t-{}", 2 * i + 1).as_str()),
        ])
    })
    .await?;
    let (result_cpu_us, _) = phase(&store, &mut conn, n, |s, i| {
        s.append_journal(i as u64 + 1, &[result(i)])
    })
    .await?;
    let (_, player_bytes) = phase(&store, &mut conn, n, |s, i| {
        let id = PlayerId::new(format!("q-{i}").as_str());
        let pools = std::collections::BTreeMap::from([("1v1".to_string(), record.clone())]);
        s.put_players(&[(&id, &pools)])
    })
    .await?;
    Ok(RedisCost {
        writes: n,
        ticket_cpu_us,
        match_cpu_us,
        result_cpu_us,
        player_bytes,
    })
}

/// The servers' `server.max_concurrent_requests` for `callers` closed-loop callers: the default
/// (256), or room for every caller plus the generator's game-server streams.
fn max_concurrent_requests(callers: usize) -> usize {
    (callers + 64).max(256)
}

/// The node index in a `bench-N` node id.
fn nodes_index(node_id: &str) -> Result<usize, ToolError> {
    node_id
        .strip_prefix("bench-")
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| ToolError::Run(format!("unexpected lease holder {node_id:?}")))
}

/// Calls per second and errors of one closed-loop load slice.
async fn load(
    addr: &str,
    rpc: Rpc,
    seconds: f64,
    concurrency: usize,
) -> Result<(f64, u64), ToolError> {
    let mut opts = loadgen::Options::new(addr, rpc);
    opts.seconds = seconds;
    opts.rounds = 1;
    opts.concurrency = concurrency;
    // The baseline here is the embedded server, measured by the caller.
    opts.baseline = false;
    let report = loadgen::run(opts).await?;
    Ok((report.rps, report.errors))
}

/// Waits until the lease names a node other than `not` (any node for `None`); its id.
async fn wait_for_owner(
    url: &str,
    not: Option<&str>,
    within: Duration,
) -> Result<String, ToolError> {
    let run = |e: redis::RedisError| ToolError::Run(format!("redis: {e}"));
    let client = redis::Client::open(url).map_err(run)?;
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .map_err(run)?;
    let deadline = Instant::now() + within;
    loop {
        let value: Option<String> = redis::cmd("GET")
            .arg(crate::store::Keys::default().lease())
            .query_async(&mut conn)
            .await
            .map_err(run)?;
        if let Some(owner) = value.as_deref().and_then(Owner::parse)
            && Some(owner.node_id.as_str()) != not
        {
            return Ok(owner.node_id);
        }
        if Instant::now() > deadline {
            return Err(ToolError::Run(format!("no new owner within {within:?}")));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Enters `n` solo 1v1 tickets through `addr`, 64 at a time.
async fn enter_waiting(addr: &str, round: usize, n: usize) -> Result<(), ToolError> {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))?
        .connect()
        .await?;
    for start in (0..n).step_by(64) {
        let calls: Vec<_> = (start..(start + 64).min(n))
            .map(|j| {
                let mut client =
                    proto::client_service_client::ClientServiceClient::new(channel.clone());
                async move {
                    client
                        .enter_queue(proto::EnterQueueRequest {
                            queue: "1v1".into(),
                            player_ids: vec![format!("waiting-{round}-{j}")],
                            ..Default::default()
                        })
                        .await
                }
            })
            .collect();
        for call in calls {
            call.await?;
        }
    }
    Ok(())
}

/// Waits until `GetQueueStats` through `addr` answers OK.
async fn answer(addr: &str, within: Duration) -> Result<(), ToolError> {
    let deadline = Instant::now() + within;
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))?.connect_lazy();
    let mut admin = proto::admin_service_client::AdminServiceClient::new(channel);
    loop {
        let mut request = tonic::Request::new(proto::GetQueueStatsRequest::default());
        request.set_timeout(Duration::from_secs(5));
        if admin.get_queue_stats(request).await.is_ok() {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(ToolError::Run(format!(
                "{addr} did not answer within {within:?}"
            )));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

//! `matchmaker bench-results`: durable `ReportMatchResult` throughput over real gRPC on loopback,
//! against the store's unbatched flush rate measured in the same run (target: ≥ 5,000 results/s
//! with group commit). Bounded: a fixed number of results, then it stops.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;
use tokio::net::TcpListener;
use tokio_stream::StreamExt;
use tokio_util::sync::CancellationToken;
use tonic::transport::Channel;

use super::ToolError;
use crate::config::Config;
use crate::proto;
use crate::proto::client_service_client::ClientServiceClient;
use crate::proto::game_server_service_client::GameServerServiceClient;

/// What `bench-results --json` prints.
#[derive(Debug, Serialize)]
pub struct ResultsBench {
    pub results: usize,
    pub concurrency: usize,
    /// Durable results acknowledged per second (gRPC, validation, rating, journal, flush).
    pub results_per_s: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    /// The embedded store without batching: one small write and one flush at a time, per second.
    pub raw_flushes_per_s: f64,
    /// `results_per_s / raw_flushes_per_s`: what group commit buys over one flush per result.
    pub ratio_vs_raw_flush: f64,
}

/// The most results one run reports (two players each, all held in memory).
const MAX_RESULTS: usize = 10_000_000;
/// The most concurrent reporters.
const MAX_CONCURRENCY: usize = 100_000;

/// Runs the benchmark in a fresh directory under `scratch` (removed afterwards).
pub async fn run(
    results: usize,
    concurrency: usize,
    scratch: PathBuf,
) -> Result<ResultsBench, ToolError> {
    if !(1..=MAX_RESULTS).contains(&results) {
        return Err(crate::rejection::FieldError::new(
            "--results",
            format!("must be in 1..={MAX_RESULTS} (got {results})"),
        )
        .into());
    }
    if !(1..=MAX_CONCURRENCY).contains(&concurrency) {
        return Err(crate::rejection::FieldError::new(
            "--concurrency",
            format!("must be in 1..={MAX_CONCURRENCY} (got {concurrency})"),
        )
        .into());
    }
    let dir = scratch.join(format!("matchmaker-bench-{}", crate::ids::new_id("r")));
    let raw = crate::store::single_write_flush_rate(&dir.join("raw"), results.min(2000)).await?;
    let served = serve_and_report(&dir.join("server"), results, concurrency).await;
    let _ = std::fs::remove_dir_all(&dir);
    let (results_per_s, p50_ms, p99_ms) = served?;
    Ok(ResultsBench {
        results,
        concurrency,
        results_per_s,
        p50_ms,
        p99_ms,
        raw_flushes_per_s: raw,
        ratio_vs_raw_flush: results_per_s / raw,
    })
}

async fn serve_and_report(
    dir: &std::path::Path,
    results: usize,
    concurrency: usize,
) -> Result<(f64, f64, f64), ToolError> {
    let mut config =
        Config::from_toml_str("[server]\ntick_interval_ms = 10\nmetrics_addr = \"\"\n")?;
    config.server.data_dir = dir.to_path_buf();
    config.server.allocation_timeout_seconds = 3600.0;
    let io = |source| ToolError::Io {
        what: "binding 127.0.0.1:0".into(),
        source,
    };
    let listener = TcpListener::bind("127.0.0.1:0").await.map_err(io)?;
    let addr = listener.local_addr().map_err(io)?;
    let shutdown = CancellationToken::new();
    let server = tokio::spawn(crate::server::run(config, listener, shutdown.clone()));
    let channel = Channel::from_shared(format!("http://{addr}"))?
        .connect()
        .await?;

    // Form `results` 1v1 matches and collect them from a game server stream.
    let mut assignments = GameServerServiceClient::new(channel.clone())
        .serve_matches(proto::ServeMatchesRequest {
            server_address: "bench:1".into(),
            ..Default::default()
        })
        .await?
        .into_inner();
    let mut client = ClientServiceClient::new(channel.clone());
    for i in 0..results * 2 {
        client
            .enter_queue(proto::EnterQueueRequest {
                queue: "1v1".into(),
                player_ids: vec![format!("bench-{i}")],
                ..Default::default()
            })
            .await?;
    }
    let mut matches = Vec::with_capacity(results);
    while matches.len() < results {
        match assignments.next().await {
            Some(Ok(a)) => matches.push(a.match_id),
            other => {
                return Err(ToolError::Run(format!(
                    "match stream ended early: {other:?}"
                )));
            }
        }
    }

    // Report them all, `concurrency` at a time, each on its own clone of the channel.
    let queue = Arc::new(tokio::sync::Mutex::new(matches));
    let started = Instant::now();
    let mut workers = Vec::new();
    for _ in 0..concurrency.max(1) {
        let (queue, mut gs) = (queue.clone(), GameServerServiceClient::new(channel.clone()));
        workers.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            loop {
                let Some(id) = queue.lock().await.pop() else {
                    return Ok::<_, tonic::Status>(latencies);
                };
                let t = Instant::now();
                gs.report_match_result(proto::MatchResult {
                    match_id: id,
                    placements: vec![1, 2],
                    ..Default::default()
                })
                .await?;
                latencies.push(t.elapsed().as_secs_f64() * 1e3);
            }
        }));
    }
    let mut latencies = Vec::with_capacity(results);
    for w in workers {
        latencies.extend(w.await??);
    }
    let elapsed = started.elapsed().as_secs_f64();
    shutdown.cancel();
    server.await??;
    let at = |q| crate::math::percentile(&latencies, q);
    Ok((results as f64 / elapsed, at(0.5), at(0.99)))
}

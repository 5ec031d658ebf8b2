//! The Prometheus endpoint of the real binary: it serves the matchmaker's metrics, and
//! calls refused by the in-flight limit are counted there, so an operator sees shedding without
//! asking the clients.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;

use common::{EVENT_TIMEOUT, ServerProcess, poll_until_blocking, resource_exhausted};

/// The body of `GET /metrics` at `addr`, once the endpoint answers.
fn scrape(addr: &str) -> String {
    poll_until_blocking(&format!("metrics from {addr}"), || {
        let answer = TcpStream::connect(addr).and_then(|mut s| {
            s.set_read_timeout(Some(EVENT_TIMEOUT))?;
            s.write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n")?;
            let mut out = String::new();
            s.read_to_string(&mut out)?;
            Ok(out)
        });
        match answer {
            Ok(out) if out.starts_with("HTTP/1.") && out.contains(" 200 ") => {
                Ok(out.split("\r\n\r\n").nth(1).unwrap_or("").to_owned())
            }
            other => Err(other),
        }
    })
}

/// The histograms each formed match adds observations to, and how many per match (1v1: one
/// wait per ticket, one quality per match).
const PER_MATCH: [(&str, f64); 2] = [
    ("matchmaker_wait_seconds", 2.0),
    ("matchmaker_match_quality", 1.0),
];

/// The count of the `+Inf` bucket of histogram `name`, summed over its label sets: every
/// observation.
fn observations(body: &str, name: &str) -> f64 {
    body.lines()
        .filter(|l| l.starts_with(&format!("{name}_bucket{{")) && l.contains("le=\"+Inf\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The value of the sample `name` (no labels), if the scrape has it.
fn sample(body: &str, name: &str) -> Option<f64> {
    body.lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

/// The sum of the samples of `name` over all its label sets.
fn labelled_sum(body: &str, name: &str) -> f64 {
    body.lines()
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|r| r.starts_with('{') || r.starts_with(' '))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The sum of the samples of `name` whose labels include every one of `labels`.
fn with_labels(body: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    body.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")))
        .filter(|l| {
            labels
                .iter()
                .all(|(k, v)| l.contains(&format!("{k}=\"{v}\"")))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_metrics_endpoint_serves_the_matchmaker_metrics_and_counts_shed_calls() {
    let dir = tempfile::tempdir().unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_matchmaker"));
    command
        .args([
            "serve",
            "--addr",
            "127.0.0.1:0",
            "--metrics-addr",
            "127.0.0.1:0",
        ])
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        // One call in flight: 16 EnterQueue callers on a two-worker server are shed now and then.
        .env("MATCHMAKER_SERVER__MAX_CONCURRENT_REQUESTS", "1");
    let server = ServerProcess::spawn(command);
    let metrics_addr = server.metrics_addr();

    let before = scrape(&metrics_addr);
    assert_eq!(
        sample(&before, "matchmaker_requests_shed_total").unwrap_or(0.0),
        0.0,
        "{before}"
    );

    let report = matchmaker::tools::loadgen::run(matchmaker::tools::loadgen::Options {
        seconds: 1.0,
        concurrency: 16,
        rounds: 2,
        max_in_flight: 1,
        ..matchmaker::tools::loadgen::Options::new(
            &server.addr,
            matchmaker::tools::loadgen::Rpc::EnterQueue,
        )
    })
    .await
    .unwrap();
    let refused = resource_exhausted(&report);
    assert!(refused > 0, "nothing was shed: {report:?}");
    // Health checks skip the server-wide limit: 16 concurrent probes on a limit of 1 all pass,
    // so an orchestrator never takes a busy server out of service for being busy.
    assert_eq!(
        report.baseline.errors, 0,
        "health checks were shed: {report:?}"
    );
    assert!(report.baseline.requests > 0, "{report:?}");
    assert_eq!(
        report.target.errors + report.baseline.errors,
        refused,
        "only sheds, no other error: {report:?}"
    );

    // Tickets are counted as the matchmaker loop takes them, a moment after the answers.
    let target_refused = report
        .target
        .error_codes
        .get("ResourceExhausted")
        .copied()
        .unwrap_or(0);
    let entered_ok = (report.target.requests - target_refused) as f64;
    // The loop may still be forming matches from the last tickets, and a tick records a
    // match's count and its observations one after another: read a scrape taken between two
    // ticks, where every ticket is counted and the histograms saw every match counted.
    let after = poll_until_blocking(
        "every ticket counted, histograms level with matches",
        || {
            let body = scrape(&metrics_addr);
            let formed = labelled_sum(&body, "matchmaker_matches_formed_total");
            let level = PER_MATCH
                .iter()
                .all(|&(name, per_match)| observations(&body, name) == formed * per_match);
            if labelled_sum(&body, "matchmaker_tickets_entered_total") >= entered_ok
                && formed >= 1.0
                && level
            {
                Ok(body)
            } else {
                Err(body)
            }
        },
    );
    drop(server);
    // Every RESOURCE_EXHAUSTED the generator saw was a shed call, and each one was counted.
    assert_eq!(
        sample(&after, "matchmaker_requests_shed_total"),
        Some(refused as f64),
        "{after}"
    );
    assert_eq!(
        labelled_sum(&after, "matchmaker_tickets_entered_total"),
        entered_ok,
        "{after}"
    );
    assert!(
        sample(&after, "matchmaker_connections_open").is_some_and(|open| open >= 1.0),
        "{after}"
    );
    // Histograms, not summaries: `_bucket` series, with every observation in the +Inf bucket.
    let formed = labelled_sum(&after, "matchmaker_matches_formed_total");
    assert!(formed >= 1.0, "{after}");
    for (name, per_match) in PER_MATCH {
        assert_eq!(
            observations(&after, name),
            formed * per_match,
            "{name}: {after}"
        );
        assert!(
            !after
                .lines()
                .any(|l| l.starts_with(name) && l.contains("quantile=")),
            "{name} is a summary: {after}"
        );
    }
    assert!(after.contains("matchmaker_tick_seconds_bucket{"), "{after}");
    // Per-RPC metrics in go-grpc-prometheus's names, every call counted with its status.
    let enter = [
        ("grpc_service", "matchmaker.v1.ClientService"),
        ("grpc_method", "EnterQueue"),
    ];
    assert_eq!(
        with_labels(&after, "grpc_server_started_total", &enter),
        report.target.requests as f64,
        "{after}"
    );
    let handled = |code: &str| {
        let mut labels = enter.to_vec();
        labels.push(("grpc_code", code));
        with_labels(&after, "grpc_server_handled_total", &labels)
    };
    assert_eq!(handled("OK"), entered_ok, "{after}");
    assert_eq!(
        handled("RESOURCE_EXHAUSTED"),
        target_refused as f64,
        "{after}"
    );
    assert_eq!(
        with_labels(&after, "grpc_server_handling_seconds_count", &enter),
        report.target.requests as f64,
        "{after}"
    );
    // Process metrics and the build.
    assert!(
        sample(&after, "process_resident_memory_bytes").is_some_and(|b| b > 1e6),
        "{after}"
    );
    assert!(
        sample(&after, "process_open_fds").is_some_and(|n| n >= 3.0),
        "{after}"
    );
    assert_eq!(
        with_labels(
            &after,
            "matchmaker_build_info",
            &[("version", env!("CARGO_PKG_VERSION"))]
        ),
        1.0,
        "{after}"
    );
    // Measured at start: a data dir always holds sled's log and config. The embedded server's
    // engine gauges carry its `cluster.keyspace` as their shard, as a cluster node's do.
    let on_disk = dir_bytes(&dir.path().join("data"));
    assert!(on_disk > 0);
    let store_bytes = sample(&before, "matchmaker_store_bytes{shard=\"mm\"}");
    assert!(
        store_bytes.is_some_and(|b| b > 0.0 && b <= on_disk as f64),
        "store bytes {store_bytes:?} vs {on_disk} on disk: {before}",
    );
}

fn dir_bytes(dir: &std::path::Path) -> u64 {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            let meta = e.metadata().unwrap();
            if meta.is_dir() {
                dir_bytes(&e.path())
            } else {
                meta.len()
            }
        })
        .sum()
}

/// A reload cannot take a queue away from a running server (the set of queues is fixed until a
/// restart), so no queue's gauge is left behind by one: a file that turns a queue off is
/// refused, the queue keeps its tickets, and its gauge keeps following them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_a_reload_would_remove_keeps_running_and_its_gauge_stays_true() {
    use matchmaker::proto;
    use matchmaker::proto::admin_service_client::AdminServiceClient;
    use matchmaker::proto::client_service_client::ClientServiceClient;

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("matchmaker.toml");
    std::fs::write(&file, "[queues.2v2.matching]\nwindow = 50.0\n").unwrap();
    let mut command = common::serve_command(&file, "127.0.0.1:0");
    command.arg("--data-dir").arg(dir.path().join("data"));
    let server = ServerProcess::spawn(command);
    let metrics_addr = server.metrics_addr();
    let channel = server.channel().await;
    let mut client = ClientServiceClient::new(channel.clone());
    let mut admin = AdminServiceClient::new(channel);
    let waiting = |want: f64| {
        let metrics_addr = metrics_addr.clone();
        move || {
            let body = scrape(&metrics_addr);
            let seen = with_labels(
                &body,
                "matchmaker_tickets_waiting",
                &[("shard", "mm"), ("queue", "2v2")],
            );
            if seen == want { Ok(()) } else { Err(seen) }
        }
    };
    let ticket = common::enter(&mut client, "2v2", &["alone"]).await;
    poll_until_blocking("2v2 counts its ticket", waiting(1.0));

    std::fs::write(&file, "[queues.2v2]\nenabled = false\n").unwrap();
    let refused = admin
        .reload_config(proto::ReloadConfigRequest {})
        .await
        .unwrap_err();
    assert_eq!(
        refused.code(),
        tonic::Code::FailedPrecondition,
        "{refused:?}"
    );
    assert!(refused.message().contains("removed: [2v2]"), "{refused:?}");

    // The queue runs on: its ticket waits and leaves, and the gauge follows.
    poll_until_blocking("2v2 still counts its ticket", waiting(1.0));
    client
        .cancel_ticket(proto::CancelTicketRequest { ticket_id: ticket })
        .await
        .unwrap();
    poll_until_blocking("2v2's gauge follows the cancel", waiting(0.0));
}

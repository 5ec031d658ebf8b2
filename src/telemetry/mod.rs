//! Metric names (one place, so dashboards and code agree) and their descriptions; logs and
//! traces in `tracing`; log lines of events that can repeat fast, in `log_limit`.

mod log_limit;
pub mod tracing;

pub use self::log_limit::LogLimit;
pub use self::tracing::{TelemetryConfig, TracingGuard};

/// Tickets waiting, per [`SHARD`] and queue (gauge).
pub const TICKETS_WAITING: &str = "matchmaker_tickets_waiting";
/// Seconds a ticket waited before it was matched, per queue (histogram).
pub const WAIT_SECONDS: &str = "matchmaker_wait_seconds";
/// Quality of each formed match (underdog's win probability), per queue (histogram).
pub const MATCH_QUALITY: &str = "matchmaker_match_quality";
/// Matches formed, per queue (counter).
pub const MATCHES_FORMED: &str = "matchmaker_matches_formed_total";
/// Tickets that expired, per queue and reason (ttl | heartbeat | ready_check) (counter).
pub const TICKETS_EXPIRED: &str = "matchmaker_tickets_expired_total";
/// Tickets entered, per queue (counter).
pub const TICKETS_ENTERED: &str = "matchmaker_tickets_entered_total";
/// Tickets cancelled by clients, per queue (counter).
pub const TICKETS_CANCELLED: &str = "matchmaker_tickets_cancelled_total";
/// Duration of one optimizer tick, per queue (histogram, seconds).
pub const TICK_SECONDS: &str = "matchmaker_tick_seconds";
/// Matches waiting for a game server, per [`SHARD`] (gauge).
pub const MATCHES_UNALLOCATED: &str = "matchmaker_matches_unallocated";
/// Registered game server streams, per [`SHARD`] (gauge).
pub const SERVERS_CONNECTED: &str = "matchmaker_servers_connected";
/// Open client connections, against `server.max_connections` (gauge).
pub const CONNECTIONS_OPEN: &str = "matchmaker_connections_open";
/// Calls refused with RESOURCE_EXHAUSTED because `server.max_concurrent_requests` calls were
/// in flight (counter).
pub const REQUESTS_SHED: &str = "matchmaker_requests_shed_total";
/// RPCs started, by `grpc_service` and `grpc_method` (counter; the go-grpc-prometheus name).
pub const GRPC_STARTED: &str = "grpc_server_started_total";
/// RPCs finished, by `grpc_service`, `grpc_method` and `grpc_code` (counter).
pub const GRPC_HANDLED: &str = "grpc_server_handled_total";
/// Seconds from an RPC's start to its status, streams until they end (histogram).
pub const GRPC_HANDLING_SECONDS: &str = "grpc_server_handling_seconds";
/// Always 1, labelled with the build's `version` and `git_sha` (gauge).
pub const BUILD_INFO: &str = "matchmaker_build_info";
/// Fetches of `auth.jwks_url` that failed (counter): tokens signed with a new key are refused
/// until one succeeds.
pub const KEY_SET_REFRESH_FAILED: &str = "matchmaker_auth_key_set_refresh_failures_total";
/// Calls answered DEADLINE_EXCEEDED because their deadline passed first, or their request
/// message had not arrived within `server.request_body_timeout_ms` (counter).
pub const DEADLINES_EXCEEDED: &str = "matchmaker_deadlines_exceeded_total";

/// Seconds one journal batch took to write and flush (histogram).
pub const JOURNAL_FLUSH_SECONDS: &str = "matchmaker_journal_flush_seconds";
/// Results per journal flush (histogram): how well group commit is batching.
pub const JOURNAL_BATCH_SIZE: &str = "matchmaker_journal_batch_size";
/// Match results applied, per queue (counter).
pub const RESULTS_APPLIED: &str = "matchmaker_results_applied_total";
/// Seconds one snapshot took (histogram).
pub const SNAPSHOT_SECONDS: &str = "matchmaker_snapshot_seconds";
/// Bytes the store uses on disk, measured at start and after each snapshot, per [`SHARD`]
/// (gauge).
pub const STORE_BYTES: &str = "matchmaker_store_bytes";
/// Store writes that failed, per operation (journal | persist_matches | end_match | snapshot |
/// request | history | parties | audit | events) (counter). Any is worth an alert: a journal
/// failure stops results until a restart. A write fenced (the lease moved on) is not counted
/// ([`crate::store::write_failures::store_write_failed`]).
pub const STORE_ERRORS: &str = "matchmaker_store_errors_total";
/// Matches cancelled, per queue and reason (server: voided by its game server or an admin |
/// server_requeue: cancelled before it started, tickets requeued | store_failure: its write did
/// not flush, so no server got it, tickets requeued | allocation_timeout |
/// match_timeout: no result within server.match_timeout_seconds | superseded: a match kept
/// unrestored whose players were matched or queued again meanwhile, cancelled at its restore)
/// (counter).
pub const MATCHES_CANCELLED: &str = "matchmaker_matches_cancelled_total";

/// Ready-checks ended, per queue and outcome (passed | declined | timed_out) (counter).
pub const READY_CHECKS: &str = "matchmaker_ready_checks_total";
/// Backfill requests received, per queue (counter).
pub const BACKFILL_REQUESTS: &str = "matchmaker_backfill_requests_total";
/// Backfill slots filled, per queue (counter).
pub const BACKFILL_SLOTS_FILLED: &str = "matchmaker_backfill_slots_filled_total";
/// Seconds from a backfill request to its last slot filled, per queue (histogram).
pub const BACKFILL_FILL_SECONDS: &str = "matchmaker_backfill_fill_seconds";

/// Calls refused by the per-caller rate limit, per class (player | server | admin | anonymous)
/// (counter).
pub const RATE_LIMITED: &str = "matchmaker_rate_limited_total";
/// Calls refused because their caller had `[rate_limit.max_in_flight]` calls waiting for their
/// answers, per class (counter).
pub const IN_FLIGHT_LIMITED: &str = "matchmaker_in_flight_limited_total";
/// Callers holding a rate-limit bucket now, per [`SHARD`] (gauge): the callers seen within
/// `rate_limit.burst_seconds`, and idle ones until the next sweep drops them.
pub const RATE_LIMIT_BUCKETS: &str = "matchmaker_rate_limit_buckets";

/// Queues this cluster node owns now (gauge): the queues of every shard whose lease it holds,
/// summed over its shards (all of them while it holds the one lease of a cluster without
/// `[[cluster.shards]]`), else 0. A count of shards owned would add nothing to it.
pub const CLUSTER_QUEUES_OWNED: &str = "matchmaker_cluster_queues_owned";
/// Lease renewals that succeeded (counter).
pub const CLUSTER_LEASE_RENEWALS: &str = "matchmaker_cluster_lease_renewals_total";
/// Leases this node lost while holding them (renewal refused or too late) (counter).
pub const CLUSTER_LEASE_LOSSES: &str = "matchmaker_cluster_lease_losses_total";
/// Leases this node took (counter).
pub const CLUSTER_LEASE_ACQUIRED: &str = "matchmaker_cluster_lease_acquired_total";
/// Calls this node's front sent on to the owner on another node (counter).
pub const CLUSTER_FORWARDED: &str = "matchmaker_cluster_forwarded_calls_total";
/// Seconds from a unary call's sending on a link to the owner's answer, as the forwarding node
/// sees it: the extra hop's cost to a client of this node (histogram).
pub const CLUSTER_FORWARDED_SECONDS: &str = "matchmaker_cluster_forwarded_call_seconds";
/// Calls clients made to this cluster node, by `grpc_service` and `grpc_method`, whichever
/// node's engine answered them (counter; the owner's engine counts its own in `grpc_server_*`).
pub const CLUSTER_FRONT_STARTED: &str = "matchmaker_cluster_front_started_total";
/// Those calls finished, by `grpc_service`, `grpc_method` and `grpc_code` (counter).
pub const CLUSTER_FRONT_HANDLED: &str = "matchmaker_cluster_front_handled_total";
/// Seconds from such a call's start to its status, as this node's client saw it (histogram).
pub const CLUSTER_FRONT_SECONDS: &str = "matchmaker_cluster_front_handling_seconds";
/// Stores this node opened on taking the lease, by where the state came `from` (standby: its
/// standby copy; redis: read whole) (counter).
pub const CLUSTER_STORE_OPENED: &str = "matchmaker_cluster_store_opened_total";
/// Players in this node's standby copy of the state, 0 while it has none (gauge).
pub const CLUSTER_STANDBY_PLAYERS: &str = "matchmaker_cluster_standby_players";
/// Players a shard's engine holds a claim on, or may (queued or playing there, or idle and
/// about to be given up), by `shard` (gauge; with several shards only).
pub const CLUSTER_CLAIMS_HELD: &str = "matchmaker_cluster_claims_held";
/// Entries a shard refused because another shard holds one of their players, by `shard`
/// (counter).
pub const CLUSTER_CLAIMS_REFUSED: &str = "matchmaker_cluster_claims_refused_total";
/// Seconds of one round trip to Redis, per operation (lease | flush | follow: a standby's
/// reading of the change log and the fields it names) (histogram).
pub const CLUSTER_REDIS_SECONDS: &str = "matchmaker_cluster_redis_round_trip_seconds";

/// Bounds for an RPC's time: unary calls take milliseconds, streams up to minutes.
const GRPC_SECONDS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 60.0,
    300.0,
];

/// Bucket bounds of every histogram, so Prometheus gets `_bucket` series: quantiles that can
/// be aggregated across servers and over any window (the exporter's default is a summary,
/// whose quantiles are per process and over its own rolling window).
pub const HISTOGRAM_BUCKETS: &[(&str, &[f64])] = &[
    (
        WAIT_SECONDS,
        &[
            0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0,
        ],
    ),
    (
        MATCH_QUALITY,
        &[0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5],
    ),
    (TICK_SECONDS, SECONDS_FAST),
    (GRPC_HANDLING_SECONDS, GRPC_SECONDS),
    (CLUSTER_FRONT_SECONDS, GRPC_SECONDS),
    (JOURNAL_FLUSH_SECONDS, SECONDS_FAST),
    (CLUSTER_REDIS_SECONDS, SECONDS_FAST),
    (CLUSTER_FORWARDED_SECONDS, SECONDS_FAST),
    (
        JOURNAL_BATCH_SIZE,
        &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0],
    ),
    (
        SNAPSHOT_SECONDS,
        &[0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0],
    ),
    (
        BACKFILL_FILL_SECONDS,
        &[0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0],
    ),
];

/// Bounds for operations that take micro- to milliseconds (ticks, journal flushes).
const SECONDS_FAST: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
];

/// The label of every gauge an engine keeps ([`TICKETS_WAITING`] and [`ENGINE_GAUGES`]): the
/// keyspace of the engine's shard (`cluster.keyspace` of its config; an embedded server's is
/// `cluster.keyspace` too, `mm` by default). A cluster node runs one engine per shard it owns,
/// so each engine's gauges are series of their own: they add up per node, and a node zeroes
/// one engine's without touching another's ([`engine_stopped`]).
pub const SHARD: &str = "shard";

/// The gauges without a queue label that an engine keeps, each labelled [`SHARD`]: matches
/// unallocated, servers connected, store bytes, rate-limit buckets and players claimed.
pub const ENGINE_GAUGES: [&str; 5] = [
    MATCHES_UNALLOCATED,
    SERVERS_CONNECTED,
    STORE_BYTES,
    RATE_LIMIT_BUCKETS,
    CLUSTER_CLAIMS_HELD,
];

/// The gauge `name` (one of [`ENGINE_GAUGES`]) of the engine of shard `shard`.
pub fn engine_gauge(name: &'static str, shard: &str) -> metrics::Gauge {
    metrics::gauge!(name, SHARD => shard.to_owned())
}

/// The [`TICKETS_WAITING`] gauge of `queue`, kept by the engine of shard `shard`.
pub fn tickets_waiting(shard: &str, queue: &str) -> metrics::Gauge {
    metrics::gauge!(TICKETS_WAITING, SHARD => shard.to_owned(), "queue" => queue.to_owned())
}

/// Zeroes the gauges the engine of shard `shard` keeps: tickets waiting in each of `queues`
/// (the shard's queues, every one its engine gauges), and the [`ENGINE_GAUGES`]. A cluster
/// node calls it when that engine stops (the lease lost or given up): they count what the
/// owner holds, and the node that took over counts it now, so a sum over the nodes counts it
/// once. The gauges of the node's other shards' engines are theirs and stay.
pub fn engine_stopped<'a>(shard: &str, queues: impl IntoIterator<Item = &'a str>) {
    for queue in queues {
        tickets_waiting(shard, queue).set(0.0);
    }
    for gauge in ENGINE_GAUGES {
        engine_gauge(gauge, shard).set(0.0);
    }
}

/// Counts a failed store write (`STORE_ERRORS`) of operation `op`; the caller logs what failed.
/// The name every path outside [`known_method`] shares, in metric labels and span names.
pub const UNKNOWN_METHOD: &str = "/unknown/unknown";

/// The paths served besides `proto/`'s own: the health check and both reflection versions.
const OTHER_METHODS: [&str; 4] = [
    "/grpc.health.v1.Health/Check",
    "/grpc.health.v1.Health/Watch",
    "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
    "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
];

/// `path` when it names a method this server defines: only those get metric labels and span
/// names of their own, so a path a client makes up grows neither.
pub fn known_method(path: &str) -> Option<&'static str> {
    crate::proto::METHODS
        .iter()
        .chain(&OTHER_METHODS)
        .find(|known| **known == path)
        .copied()
}

pub fn store_error(op: &'static str) {
    metrics::counter!(STORE_ERRORS, "op" => op).increment(1);
}

/// Counts a failed fetch of the JWKS URL.
pub fn key_set_refresh_failed() {
    metrics::counter!(KEY_SET_REFRESH_FAILED).increment(1);
}

/// Registers descriptions with the installed recorder.
pub fn describe() {
    use metrics::{describe_counter, describe_gauge, describe_histogram};
    describe_gauge!(TICKETS_WAITING, "Tickets waiting in the queue");
    describe_histogram!(
        WAIT_SECONDS,
        metrics::Unit::Seconds,
        "Wait before a ticket was matched"
    );
    describe_histogram!(
        MATCH_QUALITY,
        "Underdog's predicted win probability of formed matches"
    );
    describe_counter!(MATCHES_FORMED, "Matches formed");
    describe_counter!(
        TICKETS_EXPIRED,
        "Tickets that expired (TTL, heartbeat, ready-check)"
    );
    describe_counter!(TICKETS_ENTERED, "Tickets entered");
    describe_counter!(TICKETS_CANCELLED, "Tickets cancelled");
    describe_histogram!(
        TICK_SECONDS,
        metrics::Unit::Seconds,
        "Optimizer tick duration"
    );
    describe_gauge!(
        MATCHES_UNALLOCATED,
        "Formed matches no game server has taken yet"
    );
    describe_gauge!(SERVERS_CONNECTED, "Game servers on ServeMatches");
    describe_gauge!(
        CONNECTIONS_OPEN,
        "Open client connections (server.max_connections bounds them)"
    );
    describe_histogram!(
        JOURNAL_FLUSH_SECONDS,
        metrics::Unit::Seconds,
        "Result journal batch write + flush"
    );
    describe_histogram!(JOURNAL_BATCH_SIZE, "Results per journal flush");
    describe_counter!(RESULTS_APPLIED, "Match results applied");
    describe_histogram!(
        SNAPSHOT_SECONDS,
        metrics::Unit::Seconds,
        "Snapshot duration"
    );
    describe_gauge!(
        STORE_BYTES,
        metrics::Unit::Bytes,
        "Bytes the store uses on disk (at start and after each snapshot)"
    );
    describe_counter!(STORE_ERRORS, "Store writes that failed, by operation");
    describe_counter!(MATCHES_CANCELLED, "Matches cancelled");
    describe_gauge!(
        CLUSTER_QUEUES_OWNED,
        "Queues this cluster node owns, summed over the shards whose lease it holds"
    );
    describe_counter!(CLUSTER_LEASE_RENEWALS, "Lease renewals that succeeded");
    describe_counter!(CLUSTER_LEASE_LOSSES, "Leases lost while held");
    describe_counter!(CLUSTER_LEASE_ACQUIRED, "Leases taken by this node");
    describe_counter!(
        CLUSTER_FORWARDED,
        "Calls forwarded to the owner on another node"
    );
    describe_counter!(
        CLUSTER_STORE_OPENED,
        "Stores opened on taking the lease, by where the state came from"
    );
    describe_gauge!(
        CLUSTER_STANDBY_PLAYERS,
        "Players in this node's standby copy of the state"
    );
    describe_gauge!(
        CLUSTER_CLAIMS_HELD,
        "Players a shard's engine holds a claim on, by shard"
    );
    describe_counter!(
        CLUSTER_CLAIMS_REFUSED,
        "Entries refused because another shard holds one of their players, by shard"
    );
    describe_histogram!(
        CLUSTER_REDIS_SECONDS,
        metrics::Unit::Seconds,
        "Round trips to Redis, by operation"
    );
    describe_counter!(
        CLUSTER_FRONT_STARTED,
        "Calls clients made to this cluster node, answered here or by the owner"
    );
    describe_counter!(
        CLUSTER_FRONT_HANDLED,
        "Calls clients made to this cluster node, completed, by status code"
    );
    describe_histogram!(
        CLUSTER_FRONT_SECONDS,
        metrics::Unit::Seconds,
        "Time from a call's start on this cluster node to its status, as its client saw it"
    );
    describe_histogram!(
        CLUSTER_FORWARDED_SECONDS,
        metrics::Unit::Seconds,
        "Unary calls forwarded on a link, from sending to the owner's answer"
    );
    describe_counter!(READY_CHECKS, "Ready-checks ended, by outcome");
    describe_counter!(BACKFILL_REQUESTS, "Backfill requests received");
    describe_counter!(BACKFILL_SLOTS_FILLED, "Backfill slots filled");
    describe_histogram!(
        BACKFILL_FILL_SECONDS,
        metrics::Unit::Seconds,
        "Backfill request to its last slot filled"
    );
    describe_counter!(
        REQUESTS_SHED,
        "Calls refused because server.max_concurrent_requests calls were in flight"
    );
    describe_counter!(RATE_LIMITED, "Calls refused by the per-caller rate limit");
    describe_counter!(
        IN_FLIGHT_LIMITED,
        "Calls refused because their caller had its limit of calls in flight"
    );
    describe_counter!(GRPC_STARTED, "RPCs started on the server");
    describe_counter!(
        KEY_SET_REFRESH_FAILED,
        "Fetches of auth.jwks_url that failed (the keys already known stay in use)"
    );
    describe_counter!(GRPC_HANDLED, "RPCs completed on the server, by status code");
    describe_histogram!(
        GRPC_HANDLING_SECONDS,
        metrics::Unit::Seconds,
        "Time from an RPC's start to its status (streams until they end)"
    );
    describe_gauge!(
        BUILD_INFO,
        "The running build: version and git_sha labels, value 1"
    );
    describe_counter!(
        DEADLINES_EXCEEDED,
        "Calls answered DEADLINE_EXCEEDED: the caller's grpc-timeout or server.request_timeout_ms passed first, or server.request_body_timeout_ms before the request message arrived"
    );
    describe_gauge!(
        RATE_LIMIT_BUCKETS,
        "Callers holding a rate-limit bucket (seen within rate_limit.burst_seconds, or idle and not swept yet)"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The value of the sample `series` (name and labels) in a Prometheus text page.
    fn value(page: &str, series: &str) -> Option<f64> {
        page.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
    }

    #[test]
    fn an_engine_that_stops_leaves_its_own_gauges_at_zero_and_the_other_shards_alone() {
        let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
        let series = |shard: &str| {
            let mut series = vec![
                format!("{TICKETS_WAITING}{{shard=\"{shard}\",queue=\"{shard}-1\"}}"),
                format!("{TICKETS_WAITING}{{shard=\"{shard}\",queue=\"{shard}-2\"}}"),
            ];
            series.extend(ENGINE_GAUGES.map(|g| format!("{g}{{shard=\"{shard}\"}}")));
            series
        };
        metrics::with_local_recorder(&recorder, || {
            for shard in ["mm", "eu"] {
                tickets_waiting(shard, &format!("{shard}-1")).set(7.0);
                tickets_waiting(shard, &format!("{shard}-2")).set(2.0);
                for (i, gauge) in ENGINE_GAUGES.into_iter().enumerate() {
                    engine_gauge(gauge, shard).set(i as f64 + 1.0);
                }
            }
        });
        let page = recorder.handle().render();
        for s in series("mm").iter().chain(&series("eu")) {
            assert!(value(&page, s).is_some_and(|v| v > 0.0), "{s}: {page}");
        }
        metrics::with_local_recorder(&recorder, || engine_stopped("eu", ["eu-1", "eu-2"]));
        let page = recorder.handle().render();
        for s in series("eu") {
            assert_eq!(value(&page, &s), Some(0.0), "{s}: {page}");
        }
        for s in series("mm") {
            assert!(value(&page, &s).is_some_and(|v| v > 0.0), "{s}: {page}");
        }
    }
}

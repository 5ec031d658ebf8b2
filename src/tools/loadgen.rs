//! `matchmaker loadgen`: a bounded load against a running server, with a no-op
//! baseline (the gRPC health check) measured in the same run at the same concurrency, so the
//! ratio means something on a noisy machine.
//!
//! Bounded in time (`--seconds` per phase, each call under a timeout) and in concurrency. It
//! owns no server: point it at one (loopback is the intended use).

use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use serde::Serialize;
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Request, Status};

use super::ToolError;
use crate::proto;
use crate::proto::client_service_client::ClientServiceClient;
use crate::proto::game_server_service_client::GameServerServiceClient;

/// Longest one call may take before it counts as an error.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// Workers that share one HTTP/2 connection.
const WORKERS_PER_CONNECTION: usize = 16;
/// Game-server streams taking the matches an EnterQueue run forms.
const DRAIN_SERVERS: usize = 8;

/// The RPC under load.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Rpc {
    /// `EnterQueue` with a fresh solo player per call (in `--queue`, 1v1 by default).
    EnterQueue,
    /// `WatchTicket` until its first update, on tickets entered beforehand.
    Watch,
    /// `ReportMatchResult` on matches formed and served beforehand.
    ReportResult,
    /// The baseline: `grpc.health.v1.Health/Check`.
    HealthCheck,
}

/// One phase's numbers.
#[derive(Debug, Serialize)]
pub struct Phase {
    pub rpc: Rpc,
    pub requests: u64,
    pub errors: u64,
    /// Non-OK answers by gRPC code name.
    pub error_codes: std::collections::BTreeMap<String, u64>,
    /// Successful calls per second.
    pub rps: f64,
    /// Latency of the successful calls.
    pub p50_ms: f64,
    pub p99_ms: f64,
    /// Latency of the non-OK answers (0 without any): how fast overload is refused.
    pub errors_p50_ms: f64,
    pub errors_p99_ms: f64,
    /// Open loop only: calls due while `--max-in-flight` calls were already waiting, so never
    /// sent (the generator's own limit, counted apart from the server's refusals).
    pub not_sent: u64,
    /// Seconds this side ran, over its slices: less than `--seconds` when its work ran out
    /// (`--rpc report-result` reports the matches it prepared, and stops when they are done).
    pub seconds: f64,
}

/// What `loadgen --json` prints.
#[derive(Debug, Serialize)]
pub struct Report {
    pub addr: String,
    pub seconds: f64,
    pub concurrency: usize,
    pub rounds: usize,
    pub rpc: Rpc,
    /// Open loop: calls started per second on schedule, answered or not (`--rate`); absent for
    /// closed-loop callers.
    pub offered_rps: Option<f64>,
    pub rps: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub errors: u64,
    pub target: Phase,
    pub baseline: Phase,
    /// Matches the generator's game servers received during an EnterQueue run (0 otherwise).
    pub matches_served: u64,
    /// `target.rps / baseline.rps` (target for EnterQueue: ≥ 0.7).
    pub ratio_vs_baseline: f64,
}

/// Options for one run.
#[derive(Clone, Debug)]
pub struct Options {
    pub addr: String,
    pub rpc: Rpc,
    pub seconds: f64,
    pub concurrency: usize,
    pub token: Option<String>,
    /// Baseline and target alternate this many times, each slice `seconds / rounds` long, and
    /// each side's figures are the totals over its slices. A machine that slows down or speeds
    /// up during the run (other processes, frequency, placement of connections on threads)
    /// then weighs on both sides alike instead of on whichever phase it hit.
    pub rounds: usize,
    /// Open loop: start this many calls per second on schedule, whether or not earlier ones
    /// answered, as players arrive in production (`concurrency` then only sizes the
    /// connections). `None`: `concurrency` closed-loop callers, each waiting for its answer.
    pub rate: Option<f64>,
    /// Open loop: most calls waiting for an answer at once; beyond it a due call is counted in
    /// `not_sent`, so a stalled server cannot grow the generator without bound.
    pub max_in_flight: usize,
    /// Open loop: each call's deadline, counted from when it was due, as a player's client
    /// counts it (sent as `grpc-timeout` with what is left of it, and enforced here). A call
    /// past it is a `DeadlineExceeded` error. `None`: the 10 s call timeout from when it starts.
    pub deadline: Option<Duration>,
    /// The queue `EnterQueue` calls enter, one new player each. Its matches are served to the
    /// generator's game servers like any other.
    pub queue: String,
    /// Run the health-check baseline slices. Off for callers that compare against a baseline
    /// of their own (`bench-cluster`: the embedded server); `baseline` is then empty.
    pub baseline: bool,
}

impl Options {
    /// `--seconds`' default.
    pub const SECONDS: f64 = 10.0;
    /// `--rounds`' default.
    pub const ROUNDS: usize = 5;
    /// `--concurrency`' default.
    pub const CONCURRENCY: usize = 64;
    /// `--max-in-flight`'s default.
    pub const MAX_IN_FLIGHT: usize = 20_000;
    /// The most `--concurrency` callers (each a task; a connection per 16).
    const MAX_CONCURRENCY: usize = 100_000;
    /// The most `--max-in-flight` calls (a semaphore's permits; far past any useful value).
    const MAX_MAX_IN_FLIGHT: usize = 1_000_000;
    /// `--queue`'s default.
    pub const QUEUE: &'static str = "1v1";

    /// A closed-loop run of `rpc` against `addr` with the command line's defaults, no token and
    /// no deadline; set the fields that differ.
    pub fn new(addr: impl Into<String>, rpc: Rpc) -> Self {
        Options {
            addr: addr.into(),
            rpc,
            seconds: Self::SECONDS,
            concurrency: Self::CONCURRENCY,
            token: None,
            rounds: Self::ROUNDS,
            rate: None,
            max_in_flight: Self::MAX_IN_FLIGHT,
            deadline: None,
            queue: Self::QUEUE.into(),
            baseline: true,
        }
    }
}

impl Options {
    /// Every flag within its range; the error names the flag.
    fn validate(&self) -> Result<(), ToolError> {
        let rule = |ok: bool, flag: &str, rule: &str| {
            if ok {
                Ok(())
            } else {
                Err(ToolError::flag(flag, rule))
            }
        };
        rule(
            (1..=Self::MAX_CONCURRENCY).contains(&self.concurrency),
            "--concurrency",
            "must be in 1..=100000",
        )?;
        rule(
            (1..=100).contains(&self.rounds),
            "--rounds",
            "must be in 1..=100",
        )?;
        rule(
            self.seconds > 0.0 && self.seconds <= 3600.0,
            "--seconds",
            "must be in (0, 3600]",
        )?;
        if let Some(rate) = self.rate {
            rule(
                rate.is_finite() && rate > 0.0 && rate <= 1e7,
                "--rate",
                "must be in (0, 10000000] calls per second",
            )?;
            rule(
                matches!(self.rpc, Rpc::EnterQueue | Rpc::HealthCheck),
                "--rate",
                "open loop runs enter-queue or health-check only (watch and report-result \
                 need ids prepared per caller)",
            )?;
            rule(
                (1..=Self::MAX_MAX_IN_FLIGHT).contains(&self.max_in_flight),
                "--max-in-flight",
                "must be in 1..=1000000",
            )?;
        }
        rule(!self.queue.is_empty(), "--queue", "must name a queue")?;
        rule(
            self.addr.split(',').all(|a| !a.trim().is_empty()),
            "--addr",
            "must be HOST:PORT, or several separated by commas",
        )?;
        if let Some(deadline) = self.deadline {
            rule(
                self.rate.is_some(),
                "--deadline-ms",
                "needs --rate (closed-loop calls use the 10 s call timeout)",
            )?;
            rule(
                !deadline.is_zero() && deadline <= CALL_TIMEOUT,
                "--deadline-ms",
                "must be in 1..=10000",
            )?;
        }
        Ok(())
    }
}

/// Runs the baseline and the target RPC for `seconds` each, alternating in `rounds` slices.
pub async fn run(opts: Options) -> Result<Report, ToolError> {
    opts.validate()?;
    // Several addresses (cluster nodes): connections and game servers go round-robin over them.
    let mut endpoints = Vec::new();
    for addr in opts.addr.split(',').map(str::trim) {
        let uri = if addr.contains("://") {
            addr.to_string()
        } else {
            format!("http://{addr}")
        };
        endpoints.push(
            Endpoint::from_shared(uri)?
                .connect_timeout(CALL_TIMEOUT)
                .tcp_nodelay(true),
        );
    }
    let connections = connections(opts.concurrency, endpoints.len());
    let mut channels = Vec::with_capacity(connections);
    for i in 0..connections {
        channels.push(endpoints[i % endpoints.len()].connect().await?);
    }
    let run_id = crate::ids::new_id("lg");
    let work = std::sync::Arc::new(std::sync::Mutex::new(
        prepare(&opts, &channels, &run_id).await?,
    ));
    // EnterQueue forms matches; game servers take them, as in production, so every match is
    // allocated and written to the store. (With none, formed matches would wait unallocated and
    // unwritten, which is not what a studio runs.) Enough streams that their buffers never
    // limit allocation: each takes `server.serve_matches_buffer` matches per tick.
    let mut drains = Vec::new();
    let served = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    if opts.rpc == Rpc::EnterQueue {
        for i in 0..DRAIN_SERVERS {
            // Each game server on its own connection, as in production: its match batches do
            // not queue in front of the players' answers on a shared HTTP/2 connection.
            let channel = endpoints[i % endpoints.len()].connect().await?;
            let mut assignments = GameServerServiceClient::new(channel)
                .serve_matches(stream_request(
                    proto::ServeMatchesRequest {
                        server_address: format!("{run_id}:drain-{i}"),
                        region: String::new(),
                        capacity: 0,
                    },
                    opts.token.as_deref(),
                ))
                .await?
                .into_inner();
            let served = served.clone();
            drains.push(tokio::spawn(async move {
                while let Ok(Some(_)) = assignments.message().await {
                    served.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
            }));
        }
    }
    let slice = Duration::from_secs_f64(opts.seconds / opts.rounds as f64);
    let mut baseline = Tally::default();
    let mut target = Ok(Tally::default());
    for round in 0..opts.rounds {
        if opts.baseline {
            let base = slice_run(
                &opts,
                Rpc::HealthCheck,
                slice,
                &channels,
                &run_id,
                &work,
                round,
            );
            baseline.add(base.await?)?;
        }
        let t = slice_run(&opts, opts.rpc, slice, &channels, &run_id, &work, round).await;
        if opts.rpc == Rpc::EnterQueue {
            // The last tick's tickets are matched, allocated, streamed and stored after the
            // slice ends: that work is the target's, so it is let finish before the next
            // health-check slice starts rather than slow it down.
            settle(&served).await;
        }
        target = match (target, t) {
            (Ok(mut sum), Ok(t)) => sum.add(t).map(|()| sum),
            (Err(e), _) | (_, Err(e)) => Err(e),
        };
    }
    for drain in drains {
        drain.abort();
    }
    let baseline = baseline.phase(Rpc::HealthCheck);
    let target = target.map(|t| t.phase(opts.rpc));
    let matches_served = served.load(std::sync::atomic::Ordering::Relaxed);
    let target = target?;
    if opts.rpc == Rpc::ReportResult && target.seconds < 0.9 * opts.seconds {
        eprintln!(
            "loadgen: the prepared matches were all reported after {:.1} s of the {} s asked \
             for: the results/s is over those {:.1} s, the baseline over its whole time",
            target.seconds, opts.seconds, target.seconds
        );
    }
    Ok(Report {
        addr: opts.addr.clone(),
        seconds: opts.seconds,
        concurrency: opts.concurrency,
        rounds: opts.rounds,
        rpc: opts.rpc,
        offered_rps: opts.rate,
        rps: target.rps,
        p50_ms: target.p50_ms,
        p99_ms: target.p99_ms,
        errors: target.errors,
        matches_served,
        ratio_vs_baseline: if baseline.rps > 0.0 {
            target.rps / baseline.rps
        } else {
            0.0
        },
        target,
        baseline,
    })
}

/// How many connections `concurrency` workers open to `addresses` addresses: at most
/// [`WORKERS_PER_CONNECTION`] workers on each, and the same number to every address (connection
/// `i` goes to address `i % addresses`). Worker `w` takes connection `w % connections`, so every
/// address gets its share of the workers, give or take one.
fn connections(concurrency: usize, addresses: usize) -> usize {
    concurrency
        .div_ceil(WORKERS_PER_CONNECTION)
        .div_ceil(addresses)
        .max(1)
        * addresses
}

/// The connection worker (or open-loop call) `n` uses, of [`connections`] ones.
fn channel_for(n: usize, connections: usize) -> usize {
    n % connections
}

fn request<T>(msg: T, token: Option<&str>) -> Request<T> {
    let mut r = stream_request(msg, token);
    r.set_timeout(CALL_TIMEOUT);
    r
}

/// A request with no deadline, for the `ServeMatches` streams that last the whole phase.
fn stream_request<T>(msg: T, token: Option<&str>) -> Request<T> {
    let mut r = Request::new(msg);
    if let Some(t) = token
        && let Ok(v) = format!("Bearer {t}").parse()
    {
        r.metadata_mut().insert("authorization", v);
    }
    r
}

/// Ids the target phase works on: tickets to watch or matches to report. Prepared before the
/// clock starts.
async fn prepare(
    opts: &Options,
    channels: &[Channel],
    run_id: &str,
) -> Result<Vec<String>, ToolError> {
    let token = opts.token.as_deref();
    match opts.rpc {
        Rpc::EnterQueue | Rpc::HealthCheck => Ok(Vec::new()),
        Rpc::Watch => {
            // One ticket per worker in 5v5, so they stay SEARCHING unless ten gather.
            let mut client = ClientServiceClient::new(channels[0].clone());
            let mut tickets = Vec::with_capacity(opts.concurrency);
            for w in 0..opts.concurrency {
                let t = client
                    .enter_queue(request(
                        proto::EnterQueueRequest {
                            queue: "5v5".into(),
                            player_ids: vec![format!("{run_id}-watch-{w}")],
                            ..Default::default()
                        },
                        token,
                    ))
                    .await?
                    .into_inner()
                    .ticket_id;
                tickets.push(t);
            }
            Ok(tickets)
        }
        Rpc::ReportResult => {
            // As many 1v1 matches as the server can form in a while, served to this generator.
            let want = (opts.concurrency * 200).clamp(1000, 20_000);
            let server_address = format!("{run_id}:1");
            let mut assignments = GameServerServiceClient::new(channels[0].clone())
                .serve_matches(stream_request(
                    proto::ServeMatchesRequest {
                        server_address,
                        region: String::new(),
                        capacity: 0,
                    },
                    token,
                ))
                .await?
                .into_inner();
            let mut client = ClientServiceClient::new(channels[0].clone());
            for i in 0..want * 2 {
                client
                    .enter_queue(request(
                        proto::EnterQueueRequest {
                            queue: "1v1".into(),
                            player_ids: vec![format!("{run_id}-r-{i}")],
                            ..Default::default()
                        },
                        token,
                    ))
                    .await?;
            }
            let mut matches = Vec::with_capacity(want);
            while matches.len() < want {
                match tokio::time::timeout(CALL_TIMEOUT, assignments.message()).await {
                    Ok(Ok(Some(a))) => matches.push(a.match_id),
                    Ok(other) => {
                        return Err(ToolError::Run(format!(
                            "match stream ended early: {other:?}"
                        )));
                    }
                    Err(_) => break,
                }
            }
            Ok(matches)
        }
    }
}

/// One side's figures, summed over its slices.
#[derive(Default)]
struct Tally {
    hist: Option<Histogram<u64>>,
    error_hist: Option<Histogram<u64>>,
    error_codes: std::collections::BTreeMap<String, u64>,
    requests: u64,
    not_sent: u64,
    seconds: f64,
}

impl Tally {
    fn add(&mut self, other: Tally) -> Result<(), ToolError> {
        for (mine, theirs) in [
            (&mut self.hist, other.hist),
            (&mut self.error_hist, other.error_hist),
        ] {
            let Some(theirs) = theirs else { continue };
            match mine {
                Some(h) => h
                    .add(&theirs)
                    .map_err(|e| ToolError::Run(format!("histogram: {e}")))?,
                None => *mine = Some(theirs),
            }
        }
        for (k, v) in other.error_codes {
            *self.error_codes.entry(k).or_default() += v;
        }
        self.requests += other.requests;
        self.not_sent += other.not_sent;
        self.seconds += other.seconds;
        Ok(())
    }

    fn phase(self, rpc: Rpc) -> Phase {
        let hist = self.hist.unwrap_or_else(latency_histogram);
        let error_hist = self.error_hist.unwrap_or_else(latency_histogram);
        let ms = |h: &Histogram<u64>, q: f64| h.value_at_quantile(q) as f64 / 1000.0;
        Phase {
            rpc,
            requests: self.requests,
            errors: self.error_codes.values().sum(),
            error_codes: self.error_codes,
            rps: if self.seconds > 0.0 {
                hist.len() as f64 / self.seconds
            } else {
                0.0
            },
            p50_ms: ms(&hist, 0.5),
            p99_ms: ms(&hist, 0.99),
            errors_p50_ms: ms(&error_hist, 0.5),
            errors_p99_ms: ms(&error_hist, 0.99),
            not_sent: self.not_sent,
            seconds: self.seconds,
        }
    }
}

/// Waits until the matches the generator's game servers receive stop coming (no new one for
/// [`SETTLE_QUIET`]), [`SETTLE_MAX`] at most.
async fn settle(served: &std::sync::atomic::AtomicU64) {
    let started = Instant::now();
    loop {
        let before = served.load(std::sync::atomic::Ordering::Relaxed);
        tokio::time::sleep(SETTLE_QUIET).await;
        if served.load(std::sync::atomic::Ordering::Relaxed) == before
            || started.elapsed() >= SETTLE_MAX
        {
            return;
        }
    }
}

/// How long no match must arrive for an EnterQueue slice's matches to count as delivered:
/// longer than the server's default tick (250 ms).
const SETTLE_QUIET: Duration = Duration::from_millis(400);
/// The longest wait for them.
const SETTLE_MAX: Duration = Duration::from_secs(5);

/// One slice of one side: every caller calls `rpc` back to back for `length`.
async fn slice_run(
    opts: &Options,
    rpc: Rpc,
    length: Duration,
    channels: &[Channel],
    run_id: &str,
    work: &std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    round: usize,
) -> Result<Tally, ToolError> {
    if let Some(rate) = opts.rate {
        return open_loop_slice(opts, rpc, rate, length, channels, run_id, round).await;
    }
    let started = Instant::now();
    let deadline = started + length;
    let mut workers = Vec::with_capacity(opts.concurrency);
    for w in 0..opts.concurrency {
        let channel = channels[channel_for(w, channels.len())].clone();
        let token = opts.token.clone();
        let queue: std::sync::Arc<str> = opts.queue.as_str().into();
        let run_id = run_id.to_string();
        let work = work.clone();
        let own_ticket = if rpc == Rpc::Watch {
            work.lock().ok().and_then(|v| v.get(w).cloned())
        } else {
            None
        };
        workers.push(tokio::spawn(async move {
            let mut hist = latency_histogram();
            let mut error_hist = latency_histogram();
            let mut errors: std::collections::BTreeMap<String, u64> = Default::default();
            let mut health = tonic_health::pb::health_client::HealthClient::new(channel.clone());
            let mut client = ClientServiceClient::new(channel.clone());
            let mut gs = GameServerServiceClient::new(channel);
            let token = token.as_deref();
            let mut i = 0u64;
            while Instant::now() < deadline {
                let t = Instant::now();
                let outcome: Result<(), Status> = match rpc {
                    Rpc::HealthCheck => health_check(&mut health, token, None).await,
                    Rpc::EnterQueue => {
                        let player = format!("{run_id}-{round}-{w}-{i}");
                        enter_queue(&mut client, &queue, player, token, None).await
                    }
                    Rpc::Watch => {
                        let ticket_id = own_ticket.clone().unwrap_or_default();
                        match client
                            .watch_ticket(request(proto::WatchTicketRequest { ticket_id }, token))
                            .await
                        {
                            Ok(stream) => stream.into_inner().message().await.map(drop),
                            Err(e) => Err(e),
                        }
                    }
                    Rpc::ReportResult => {
                        let next = work.lock().ok().and_then(|mut v| v.pop());
                        let Some(match_id) = next else { break };
                        gs.report_match_result(request(
                            proto::MatchResult {
                                match_id,
                                placements: vec![1, 2],
                                ..Default::default()
                            },
                            token,
                        ))
                        .await
                        .map(drop)
                    }
                };
                i += 1;
                let us = t.elapsed().as_micros().max(1) as u64;
                match outcome {
                    Ok(()) => hist.saturating_record(us),
                    Err(status) => {
                        error_hist.saturating_record(us);
                        *errors.entry(code_name(status.code())).or_default() += 1;
                    }
                }
            }
            (hist, error_hist, errors, i)
        }));
    }
    let mut tally = Tally::default();
    for w in workers {
        let (hist, error_hist, error_codes, requests) = w.await?;
        tally.add(Tally {
            hist: Some(hist),
            error_hist: Some(error_hist),
            error_codes,
            requests,
            not_sent: 0,
            seconds: 0.0,
        })?;
    }
    tally.seconds = started.elapsed().as_secs_f64();
    Ok(tally)
}

/// One slice with an open-loop arrival process: call `n` is due at `n / rate` seconds and starts
/// then, however many earlier calls are still waiting (up to `max_in_flight`). Latency counts
/// from when the call was due, so a generator or server that falls behind shows as latency
/// instead of as fewer calls (closed-loop callers slow down with the server and hide it).
async fn open_loop_slice(
    opts: &Options,
    rpc: Rpc,
    rate: f64,
    length: Duration,
    channels: &[Channel],
    run_id: &str,
    round: usize,
) -> Result<Tally, ToolError> {
    struct Shared {
        hist: Histogram<u64>,
        error_hist: Histogram<u64>,
        error_codes: std::collections::BTreeMap<String, u64>,
    }
    let shared = std::sync::Arc::new(std::sync::Mutex::new(Shared {
        hist: latency_histogram(),
        error_hist: latency_histogram(),
        error_codes: Default::default(),
    }));
    let in_flight = std::sync::Arc::new(tokio::sync::Semaphore::new(opts.max_in_flight));
    let queue: std::sync::Arc<str> = opts.queue.as_str().into();
    let mut calls = tokio::task::JoinSet::new();
    let started = Instant::now();
    let due_total = (rate * length.as_secs_f64()).round() as u64;
    let (mut sent, mut not_sent) = (0u64, 0u64);
    while sent + not_sent < due_total {
        let due_now = ((started.elapsed().as_secs_f64() * rate) as u64 + 1).min(due_total);
        while sent + not_sent < due_now {
            let n = sent + not_sent;
            let Ok(permit) = in_flight.clone().try_acquire_owned() else {
                not_sent += 1;
                continue;
            };
            sent += 1;
            let due = started + Duration::from_secs_f64(n as f64 / rate);
            let channel = channels[channel_for(n as usize, channels.len())].clone();
            let token = opts.token.clone();
            let player = format!("{run_id}-o{round}-{n}");
            let queue = queue.clone();
            let shared = shared.clone();
            let deadline = opts.deadline;
            calls.spawn(async move {
                let token = token.as_deref();
                // What is left of the caller's deadline when the call finally starts.
                let left = deadline.map(|d| (due + d).saturating_duration_since(Instant::now()));
                let call = async {
                    match rpc {
                        Rpc::EnterQueue => {
                            let mut client = ClientServiceClient::new(channel);
                            enter_queue(&mut client, &queue, player, token, left).await
                        }
                        _ => {
                            let mut health =
                                tonic_health::pb::health_client::HealthClient::new(channel);
                            health_check(&mut health, token, left).await
                        }
                    }
                };
                let (took, outcome) = match deadline {
                    // Past the deadline, whoever noticed first (this timer, which ticks in
                    // whole milliseconds, or tonic's timers on `grpc-timeout` in the client or
                    // the server, which answer CANCELLED), and whatever the answer, the caller
                    // gave up.
                    // A call whose deadline passed before it could start is not sent, as a
                    // client would not send it.
                    Some(_) if left.is_some_and(|l| l.is_zero()) => (due.elapsed(), Err(missed())),
                    Some(d) => {
                        let answer = tokio::time::timeout_at((due + d).into(), call).await;
                        // One reading of the clock decides the miss and is what is recorded.
                        let took = due.elapsed();
                        (
                            took,
                            match answer {
                                Ok(Err(s)) if s.code() == Code::Cancelled => Err(missed()),
                                Ok(outcome) if took <= d => outcome,
                                _ => Err(missed()),
                            },
                        )
                    }
                    None => {
                        let outcome = call.await;
                        (due.elapsed(), outcome)
                    }
                };
                let us = took.as_micros().max(1) as u64;
                drop(permit);
                let mut s = shared
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                match outcome {
                    Ok(()) => s.hist.saturating_record(us),
                    Err(status) => {
                        s.error_hist.saturating_record(us);
                        *s.error_codes.entry(code_name(status.code())).or_default() += 1;
                    }
                }
            });
        }
        while let Some(done) = calls.try_join_next() {
            done?;
        }
        // Tokio's timer ticks in milliseconds; the calls due meanwhile start together.
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    while let Some(done) = calls.join_next().await {
        done?;
    }
    let seconds = started.elapsed().as_secs_f64();
    let s = std::sync::Arc::try_unwrap(shared)
        .map_err(|_| ToolError::Run("open-loop calls still running".into()))?
        .into_inner()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    Ok(Tally {
        hist: Some(s.hist),
        error_hist: Some(s.error_hist),
        error_codes: s.error_codes,
        requests: sent,
        not_sent,
        seconds,
    })
}

/// `request` with `grpc-timeout` set to `left` when given (else the call timeout).
fn request_within<T>(msg: T, token: Option<&str>, left: Option<Duration>) -> Request<T> {
    let mut r = request(msg, token);
    if let Some(left) = left {
        r.set_timeout(left);
    }
    r
}

async fn health_check(
    health: &mut tonic_health::pb::health_client::HealthClient<Channel>,
    token: Option<&str>,
    left: Option<Duration>,
) -> Result<(), Status> {
    health
        .check(request_within(
            tonic_health::pb::HealthCheckRequest {
                service: String::new(),
            },
            token,
            left,
        ))
        .await
        .map(drop)
}

/// A solo ticket for a new player.
async fn enter_queue(
    client: &mut ClientServiceClient<Channel>,
    queue: &str,
    player: String,
    token: Option<&str>,
    left: Option<Duration>,
) -> Result<(), Status> {
    client
        .enter_queue(request_within(
            proto::EnterQueueRequest {
                queue: queue.to_owned(),
                player_ids: vec![player],
                ..Default::default()
            },
            token,
            left,
        ))
        .await
        .map(drop)
}

fn latency_histogram() -> Histogram<u64> {
    Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("valid histogram bounds")
}

/// An open-loop call past its `--deadline-ms`.
fn missed() -> Status {
    Status::deadline_exceeded("the caller's deadline passed")
}

fn code_name(code: Code) -> String {
    format!("{code:?}")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The workers of a closed-loop run on each address (connection `i` goes to address
    /// `i % addresses`); no connection carries more than its share.
    fn workers_per_address(concurrency: usize, addresses: usize) -> Vec<usize> {
        let connections = connections(concurrency, addresses);
        let mut per_connection = vec![0; connections];
        let mut per_address = vec![0; addresses];
        for w in 0..concurrency {
            let channel = channel_for(w, connections);
            per_connection[channel] += 1;
            per_address[channel % addresses] += 1;
        }
        assert!(
            per_connection.iter().all(|&n| n <= WORKERS_PER_CONNECTION),
            "{concurrency} on {addresses}: {per_connection:?}"
        );
        per_address
    }

    #[test]
    fn workers_spread_over_every_address() {
        assert_eq!(workers_per_address(32, 3), [11, 11, 10]);
        assert_eq!(workers_per_address(64, 3), [22, 21, 21]);
        assert_eq!(workers_per_address(1, 1), [1]);
        assert_eq!(workers_per_address(2, 3), [1, 1, 0]);
        for addresses in 1..=7 {
            for concurrency in [1, 5, 16, 17, 31, 32, 33, 48, 64, 100, 257, 1000] {
                let per_address = workers_per_address(concurrency, addresses);
                let (min, max) = (
                    per_address.iter().min().unwrap(),
                    per_address.iter().max().unwrap(),
                );
                assert!(
                    max - min <= 1,
                    "{concurrency} on {addresses}: {per_address:?}"
                );
                assert_eq!(per_address.iter().sum::<usize>(), concurrency);
            }
        }
    }

    #[test]
    fn flags_past_their_bounds_are_refused_naming_the_flag() {
        let flag = |opts: Options| match opts.validate() {
            Err(ToolError::Flag(e)) => e.field,
            other => panic!("{other:?}"),
        };
        let base = || Options::new("127.0.0.1:50051", Rpc::EnterQueue);
        assert!(base().validate().is_ok());
        let open = |max_in_flight| Options {
            rate: Some(100.0),
            max_in_flight,
            ..base()
        };
        assert!(open(1_000_000).validate().is_ok());
        assert_eq!(flag(open(0)), "--max-in-flight");
        assert_eq!(flag(open(1_000_001)), "--max-in-flight");
        assert_eq!(flag(open(usize::MAX)), "--max-in-flight");
        let closed = |concurrency| Options {
            concurrency,
            ..base()
        };
        assert!(closed(100_000).validate().is_ok());
        assert_eq!(flag(closed(0)), "--concurrency");
        assert_eq!(flag(closed(100_001)), "--concurrency");
        assert_eq!(flag(closed(usize::MAX)), "--concurrency");
    }
}

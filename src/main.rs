//! `matchmaker`: parses the command line, loads config, starts tracing, calls the library.

use std::path::PathBuf;

use anyhow::Context;
use clap::{Parser, Subcommand};
use tokio_util::sync::CancellationToken;

use matchmaker::config::{Config, Overrides};

/// mimalloc instead of glibc malloc: the server allocates and frees small buffers on every
/// request (HTTP/2 frames, headers, tickets), and glibc's malloc was ~13% of its CPU under
/// EnterQueue load (`perf`; docs/performance.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(name = "matchmaker", version, about = "gRPC matchmaking server")]
struct Cli {
    /// Log as JSON lines instead of human-readable text.
    #[arg(long, global = true, env = "MATCHMAKER_LOG_JSON")]
    log_json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the server (defaults: config/default.toml compiled in, 127.0.0.1:50051, ./data).
    Serve {
        /// A TOML file merged over the defaults.
        #[arg(long)]
        config: Option<PathBuf>,
        /// gRPC listen address (HOST:PORT; port 0 picks a free port).
        #[arg(long)]
        addr: Option<String>,
        /// Prometheus endpoint address (HOST:PORT; empty disables).
        #[arg(long)]
        metrics_addr: Option<String>,
        /// Data directory of the embedded store.
        #[arg(long)]
        data_dir: Option<PathBuf>,
    },
    /// One optimizer tick over N synthetic waiting tickets, against a sort floor and a
    /// first-come greedy baseline measured in the same run.
    BenchMatcher {
        /// Queue whose shape and matching config to use.
        #[arg(long, default_value = "1v1")]
        queue: String,
        /// Waiting tickets.
        #[arg(long, default_value_t = 100_000)]
        tickets: usize,
        /// RNG seed for the rating distribution.
        #[arg(long, default_value_t = 42)]
        seed: u64,
        /// A TOML file merged over the defaults (for custom queues).
        #[arg(long)]
        config: Option<PathBuf>,
        /// Give every ticket a mode, a platform and map preferences, and the queue match rules
        /// on them (mode equal, three crossplay groups, a common map); the report compares the
        /// tick and each partition's quality with the same tickets without rules.
        #[arg(long)]
        rules: bool,
        /// Print one JSON object instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Durable ReportMatchResult throughput over gRPC on loopback, against the store's unbatched
    /// flush rate in the same run. Uses a scratch directory it removes afterwards.
    BenchResults {
        /// Results to report (bounded run).
        #[arg(long, default_value_t = 20_000)]
        results: usize,
        /// Concurrent reporters.
        #[arg(long, default_value_t = 64)]
        concurrency: usize,
        /// Where the scratch store goes.
        #[arg(long, default_value_os_t = std::env::temp_dir())]
        scratch: PathBuf,
        /// Print one JSON object instead of text.
        #[arg(long)]
        json: bool,
    },
    /// A cluster node against the embedded server in the same run (EnterQueue and durable
    /// results per second, through the owner and through a forwarding node), then failover
    /// times over repeated kill -9 of the owner, with standby copies and without. Starts its
    /// own redis-server and servers on loopback.
    BenchCluster {
        /// Cluster nodes.
        #[arg(long, default_value_t = 2)]
        nodes: usize,
        /// Seconds of load per side and RPC, over the rounds.
        #[arg(long, default_value_t = 10.0)]
        seconds: f64,
        /// Sides alternate this many times.
        #[arg(long, default_value_t = 5)]
        rounds: usize,
        /// Concurrent callers.
        #[arg(long, default_value_t = 64)]
        concurrency: usize,
        /// Times the owner is killed with SIGKILL.
        #[arg(long, default_value_t = 10)]
        kills: usize,
        /// Waiting tickets entered before each kill, which the next owner restores.
        #[arg(long, default_value_t = 1000)]
        waiting: usize,
        /// Rated players stored before the kills, which each new owner loads.
        #[arg(long, default_value_t = 0)]
        players: usize,
        /// The nodes' lease (milliseconds).
        #[arg(long, default_value_t = 3000)]
        lease_ms: u64,
        /// Where the scratch stores go.
        #[arg(long, default_value_os_t = std::env::temp_dir())]
        scratch: PathBuf,
        /// Print one JSON object instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Resident memory of a server holding N rated players in one pool, loaded as `serve` does
    /// it, measured in a fresh process against that process's own baseline.
    BenchMemory {
        /// Players to write and load.
        #[arg(long, default_value_t = 1_000_000)]
        players: usize,
        /// Queue whose rating pool holds them.
        #[arg(long, default_value = "1v1")]
        queue: String,
        /// A TOML file merged over the defaults.
        #[arg(long)]
        config: Option<PathBuf>,
        /// Where the scratch store goes (removed afterwards).
        #[arg(long, default_value_os_t = std::env::temp_dir())]
        scratch: PathBuf,
        /// Print one JSON object instead of text.
        #[arg(long)]
        json: bool,
    },
    /// bench-memory's measuring process (not for direct use).
    #[command(hide = true)]
    BenchMemoryLoad {
        #[arg(long)]
        dir: PathBuf,
        #[arg(long)]
        config: Option<PathBuf>,
        #[arg(long)]
        queue: String,
        #[arg(long)]
        players: usize,
    },
    /// Replay a real match history: predict each match before applying it, report accuracy
    /// and calibration per system.
    Replay(matchmaker::tools::sim::ReplayArgs),
    /// Simulate a population through the real matcher and rating system.
    Simulate(matchmaker::tools::sim::SimulateArgs),
    /// Admin tools over gRPC against a running server (seasons, ratings, migration, export).
    Admin(matchmaker::tools::admin::AdminArgs),
    /// A bounded load against a running server, with a health-check baseline measured in the
    /// same run at the same concurrency.
    Loadgen {
        /// Server address (HOST:PORT, or a full http:// URI); several separated by commas
        /// (cluster nodes) spread the connections and game servers over them.
        #[arg(long, default_value = "127.0.0.1:50051")]
        addr: String,
        /// The RPC under load.
        #[arg(long, value_enum, default_value = "enter-queue")]
        rpc: matchmaker::tools::loadgen::Rpc,
        /// Seconds of load per side (baseline and target), in total over the rounds.
        #[arg(long, default_value_t = matchmaker::tools::loadgen::Options::SECONDS)]
        seconds: f64,
        /// Baseline and target alternate this many times (slices of seconds/rounds each), so a
        /// machine whose speed drifts during the run weighs on both sides alike.
        #[arg(long, default_value_t = matchmaker::tools::loadgen::Options::ROUNDS)]
        rounds: usize,
        /// Concurrent callers.
        #[arg(long, default_value_t = matchmaker::tools::loadgen::Options::CONCURRENCY)]
        concurrency: usize,
        /// Bearer token sent on every call (with auth on, an admin token may act for anyone).
        #[arg(long)]
        token: Option<String>,
        /// Open loop: start this many calls per second on schedule, answered or not (as players
        /// arrive), instead of `--concurrency` callers that each wait for their answer. Latency
        /// then counts from when a call was due. enter-queue and health-check only.
        #[arg(long)]
        rate: Option<f64>,
        /// Open loop: most calls waiting at once; further due calls are counted as not sent.
        #[arg(long, default_value_t = matchmaker::tools::loadgen::Options::MAX_IN_FLIGHT)]
        max_in_flight: usize,
        /// Open loop: each call's deadline in milliseconds from when it was due, as a player's
        /// client would set it; later answers count as DeadlineExceeded errors.
        #[arg(long)]
        deadline_ms: Option<u64>,
        /// The queue enter-queue calls enter, one new solo player each (e.g. 5v5 to load team
        /// matching and its larger matches).
        #[arg(long, default_value = matchmaker::tools::loadgen::Options::QUEUE)]
        queue: String,
        /// Print one JSON object instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Check the configuration as `serve` would (key files included) and print the effective
    /// configuration (defaults ← file ← environment) as TOML, secrets and URL credentials
    /// hidden.
    Config {
        #[arg(long)]
        config: Option<PathBuf>,
    },
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            // One readable line (with causes), not a backtrace: this is what an operator sees.
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    // `serve` starts tracing once its config (and so its trace exporter) is known.
    let _tracing = match &cli.command {
        Command::Serve { .. } => None,
        _ => Some(matchmaker::telemetry::tracing::init(cli.log_json, None)?),
    };
    match cli.command {
        Command::Serve {
            config,
            addr,
            metrics_addr,
            data_dir,
        } => {
            let overrides = Overrides {
                addr,
                metrics_addr,
                data_dir,
            };
            // Config is loaded and validated before anything binds a port.
            let config = Config::load(config.as_deref(), &overrides)?;
            let json = cli.log_json;
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
                .context("starting the tokio runtime")?;
            runtime.block_on(async move {
                let _tracing = matchmaker::telemetry::tracing::init(json, Some(&config.telemetry))?;
                let shutdown = CancellationToken::new();
                watch_shutdown_signals(shutdown.clone())?;
                // SIGHUP reloads the config (the server's own handler does it). Registered here
                // too, before anything starts, so a cluster node that does not own the queues (no
                // server running) ignores it instead of dying of SIGHUP's default action.
                #[cfg(unix)]
                let _hangup =
                    tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
                        .context("watching SIGHUP")?;
                if config.cluster.enabled() {
                    matchmaker::cluster::run_node(config, shutdown).await?;
                } else {
                    matchmaker::server::bind_and_run(config, shutdown).await?;
                }
                anyhow::Ok(())
            })?;
        }
        Command::BenchMatcher {
            queue,
            tickets,
            seed,
            config,
            rules,
            json,
        } => {
            let config = Config::load(config.as_deref(), &Overrides::default())?;
            let Some(q) = config.queues.get(&queue) else {
                let known: Vec<&str> = config.queues.keys().map(String::as_str).collect();
                anyhow::bail!(
                    "--queue: unknown queue {queue:?} (configured: {})",
                    known.join(", ")
                );
            };
            anyhow::ensure!(tickets > 0, "--tickets: must be at least 1");
            let report = matchmaker::tools::bench_matcher::run_bench(
                &queue,
                q.shape(),
                &q.matching,
                tickets,
                seed,
                rules,
            );
            if json {
                println!("{}", serde_json::to_string(&report)?);
            } else {
                print!("{}", toml::to_string_pretty(&report)?);
            }
        }
        Command::BenchResults {
            results,
            concurrency,
            scratch,
            json,
        } => {
            anyhow::ensure!(results > 0, "--results: must be at least 1");
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
                .context("starting the tokio runtime")?;
            let report = runtime.block_on(matchmaker::tools::bench_results::run(
                results,
                concurrency,
                scratch,
            ))?;
            if json {
                println!("{}", serde_json::to_string(&report)?);
            } else {
                print!("{}", toml::to_string_pretty(&report)?);
            }
        }
        Command::BenchCluster {
            nodes,
            seconds,
            rounds,
            concurrency,
            kills,
            waiting,
            players,
            lease_ms,
            scratch,
            json,
        } => {
            anyhow::ensure!(rounds > 0, "--rounds: must be at least 1");
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
                .context("starting the tokio runtime")?;
            let report = runtime.block_on(matchmaker::tools::bench_cluster::run(
                matchmaker::tools::bench_cluster::Options {
                    nodes,
                    seconds,
                    rounds,
                    concurrency,
                    kills,
                    waiting,
                    players,
                    lease_ms,
                    scratch,
                },
            ))?;
            if json {
                println!("{}", serde_json::to_string(&report)?);
            } else {
                print!("{}", toml::to_string_pretty(&report)?);
            }
        }
        Command::BenchMemory {
            players,
            queue,
            config: file,
            scratch,
            json,
        } => {
            anyhow::ensure!(players > 0, "--players: must be at least 1");
            let config = Config::load(file.as_deref(), &Overrides::default())?;
            let report = matchmaker::tools::bench_memory::run(
                &config,
                file.as_deref(),
                &queue,
                players,
                &scratch,
            )?;
            if json {
                println!("{}", serde_json::to_string(&report)?);
            } else {
                print!("{}", toml::to_string_pretty(&report)?);
            }
        }
        Command::BenchMemoryLoad {
            dir,
            config: file,
            queue,
            players,
        } => {
            let config = Config::load(file.as_deref(), &Overrides::default())?;
            let report =
                matchmaker::tools::bench_memory::load_and_measure(config, dir, &queue, players)?;
            println!("{}", serde_json::to_string(&report)?);
        }
        Command::Replay(args) => matchmaker::tools::sim::replay_main(args)?,
        Command::Simulate(args) => matchmaker::tools::sim::simulate_main(args)?,
        Command::Admin(args) => matchmaker::tools::admin::run(args)?,
        Command::Loadgen {
            addr,
            rpc,
            seconds,
            rounds,
            concurrency,
            token,
            rate,
            max_in_flight,
            deadline_ms,
            queue,
            json,
        } => {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
                .context("starting the tokio runtime")?;
            let report = runtime.block_on(matchmaker::tools::loadgen::run(
                matchmaker::tools::loadgen::Options {
                    addr,
                    rpc,
                    seconds,
                    concurrency,
                    token,
                    rounds,
                    rate,
                    max_in_flight,
                    deadline: deadline_ms.map(std::time::Duration::from_millis),
                    queue,
                    baseline: true,
                },
            ))?;
            if json {
                println!("{}", serde_json::to_string(&report)?);
            } else {
                print!("{}", toml::to_string_pretty(&report)?);
            }
        }
        Command::Config { config } => {
            let config = Config::load(config.as_deref(), &Overrides::default())?;
            // The key files are read and parsed here as `serve` reads them, so this command
            // checks everything a start would.
            matchmaker::auth::Verifier::from_config(&config.auth)
                .map_err(|e| anyhow::anyhow!("config: {e}"))?;
            // What `serve` would log as warnings, on stderr: stdout is the config.
            for warning in config.warnings() {
                eprintln!("warning: {warning}");
            }
            print!("{}", toml::to_string_pretty(&config.redacted())?);
        }
    }
    Ok(())
}

/// Cancels `shutdown` on SIGINT or SIGTERM. The handlers are in place when this returns, not
/// when the task first runs: a signal sent as soon as the server logged its address must not
/// meet the default action and kill the process without its graceful stop.
#[cfg(unix)]
fn watch_shutdown_signals(shutdown: CancellationToken) -> anyhow::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut interrupt = signal(SignalKind::interrupt()).context("watching SIGINT")?;
    let mut terminate = signal(SignalKind::terminate()).context("watching SIGTERM")?;
    tokio::spawn(async move {
        tokio::select! {
            _ = interrupt.recv() => tracing::info!("SIGINT: shutting down"),
            _ = terminate.recv() => tracing::info!("SIGTERM: shutting down"),
        }
        shutdown.cancel();
    });
    Ok(())
}

/// Cancels `shutdown` on Ctrl-C.
#[cfg(not(unix))]
fn watch_shutdown_signals(shutdown: CancellationToken) -> anyhow::Result<()> {
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            tracing::info!("Ctrl-C: shutting down");
            shutdown.cancel();
        }
    });
    Ok(())
}

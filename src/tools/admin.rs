//! `matchmaker admin …`: the operator's command line for `AdminService`. It talks gRPC to a
//! running server (it never opens the store), prints a human summary by default and one JSON
//! object (or one per line for `export`) with `--json`.
//!
//! `--token JWT` sends `authorization: Bearer JWT` on every call; whether the server checks it is
//! the server's auth config.

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};

use serde_json::json;
use tokio_stream::StreamExt;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::Interceptor;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

use crate::proto;
use crate::proto::admin_service_client::AdminServiceClient;

/// Rows sent per `MigrateFromElo` request by default.
const DEFAULT_MIGRATION_BATCH: usize = 1000;

/// `matchmaker admin`: flags shared by every admin command.
#[derive(clap::Args, Debug)]
pub struct AdminArgs {
    /// Server address: http://HOST:PORT (a bare HOST:PORT means http).
    #[arg(long, global = true, default_value = "http://127.0.0.1:50051")]
    pub addr: String,
    /// A JWT sent as `authorization: Bearer <JWT>`. `--help` names the variable but never
    /// shows its value: the token is a credential.
    #[arg(
        long,
        global = true,
        env = "MATCHMAKER_ADMIN_TOKEN",
        hide_env_values = true
    )]
    pub token: Option<String>,
    /// Print JSON (one object; `export` prints one object per line) instead of text.
    #[arg(long, global = true)]
    pub json: bool,
    #[command(subcommand)]
    pub command: AdminCommand,
}

/// How the commands that talk to a cluster's Redis reach it, as a node's `[cluster]` keys say.
#[derive(clap::Args, Debug, Clone)]
pub struct RedisFlags {
    /// For rediss://: PEM certificates Redis' certificate must chain to (default: the
    /// system's trust store), as `cluster.redis_ca_file`.
    #[arg(long)]
    redis_ca_file: Option<PathBuf>,
    /// For rediss://: a PEM client certificate, as `cluster.redis_cert_file`.
    #[arg(long)]
    redis_cert_file: Option<PathBuf>,
    /// Its PEM private key, as `cluster.redis_key_file`.
    #[arg(long)]
    redis_key_file: Option<PathBuf>,
    /// The cluster's `cluster.keyspace`: the hash tag of every key it writes (default `mm`).
    #[arg(long)]
    keyspace: Option<String>,
}

impl RedisFlags {
    /// The target as a node's `[cluster]` section (checked by the same rules, errors naming
    /// this command's flags; `url_flag` is the URL's), and its TLS.
    fn target(
        &self,
        url: &str,
        url_flag: &str,
    ) -> Result<(crate::store::ClusterConfig, Option<crate::store::RedisTls>), AdminCliError> {
        let keyspace = self.keyspace.as_deref();
        let base = crate::store::ClusterConfig {
            keyspace: keyspace
                .unwrap_or(crate::store::DEFAULT_KEYSPACE)
                .to_string(),
            ..crate::store::ClusterConfig::default()
        };
        self.over(base, Some(url), url_flag)
    }

    /// The target as the node config at `file` describes it (its `[cluster]`: the Redis URL,
    /// TLS files, and every shard's keyspace), `url` and these flags' files over it; `None`:
    /// [`RedisFlags::target`] of `url`. Also the node's config, for the shards' queues.
    fn target_of_node(
        &self,
        file: Option<&Path>,
        url: Option<&str>,
    ) -> Result<
        (
            crate::store::ClusterConfig,
            Option<crate::store::RedisTls>,
            Option<crate::config::Config>,
        ),
        AdminCliError,
    > {
        let Some(file) = file else {
            let url = url.ok_or_else(|| AdminCliError::Usage("--redis: required".into()))?;
            let (target, tls) = self.target(url, "--redis")?;
            return Ok((target, tls, None));
        };
        if self.keyspace.is_some() {
            return Err(AdminCliError::Usage(
                "--keyspace: the keyspaces are --config's ([cluster] keyspace and each \
                 [[cluster.shards]]); give one or the other"
                    .into(),
            ));
        }
        let node = crate::config::Config::load(Some(file), &crate::config::Overrides::default())
            .map_err(|e| AdminCliError::Usage(format!("--config {}: {e}", file.display())))?;
        if url.is_none() && !node.cluster.enabled() {
            return Err(AdminCliError::Usage(format!(
                "--redis: required, as --config {} names no cluster.redis_url",
                file.display()
            )));
        }
        let (target, tls) = self.over(node.cluster.clone(), url, "--redis")?;
        Ok((target, tls, Some(node)))
    }

    /// `base` with `url` (when given) and these flags' files over it, checked as a node's
    /// `[cluster]` is.
    fn over(
        &self,
        base: crate::store::ClusterConfig,
        url: Option<&str>,
        url_flag: &str,
    ) -> Result<(crate::store::ClusterConfig, Option<crate::store::RedisTls>), AdminCliError> {
        let file = |flag: &Option<PathBuf>, node: PathBuf| flag.clone().unwrap_or(node);
        let target = crate::store::ClusterConfig {
            redis_url: url.map_or(base.redis_url.clone(), str::to_string),
            redis_ca_file: file(&self.redis_ca_file, base.redis_ca_file.clone()),
            redis_cert_file: file(&self.redis_cert_file, base.redis_cert_file.clone()),
            redis_key_file: file(&self.redis_key_file, base.redis_key_file.clone()),
            ..base
        };
        let tls = target
            .validate()
            .and_then(|()| target.redis_tls())
            .map_err(|e| {
                let flag = match e.field.as_str() {
                    "cluster.redis_url" => url_flag.to_string(),
                    field => field.replace("cluster.", "--").replace('_', "-"),
                };
                AdminCliError::Usage(format!("{flag}: {}", e.rule))
            })?;
        Ok((target, tls))
    }
}

/// Reset kinds on the command line.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResetKindArg {
    /// Weekly: RP cut to tier caps, deviation grows one rating period, week + 1.
    Soft,
    /// Monthly: RP to the tier's hard-reset value, Glicko MMR rescaled, next season.
    Hard,
}

/// One admin command.
#[derive(clap::Subcommand, Debug)]
pub enum AdminCommand {
    /// Set a player's rating (and optionally rank points) in a queue's rating pool.
    SetRating {
        #[arg(long)]
        player: String,
        #[arg(long)]
        queue: String,
        /// Rating in the queue system's display units (Glicko r, Weng-Lin mu, Elo).
        #[arg(long, allow_negative_numbers = true)]
        mean: f64,
        /// Glicko RD, Weng-Lin sigma (0 for Elo).
        #[arg(long)]
        deviation: f64,
        /// Glicko-2 volatility; 0 keeps the current one.
        #[arg(long, default_value_t = 0.0)]
        volatility: f64,
        #[arg(long)]
        rank_points: Option<i64>,
    },
    /// Weekly soft or monthly hard season reset.
    SeasonReset {
        #[arg(long, value_enum)]
        kind: ResetKindArg,
        /// One queue only (default: every queue with a ranking).
        #[arg(long)]
        queue: Option<String>,
        /// Change nothing: print what the reset would do (players per tier before and after).
        #[arg(long)]
        dry_run: bool,
    },
    /// Record every player's season rank (Master and above by mean end-of-week RP).
    EndSeason {
        /// One queue only (default: every ladder queue).
        #[arg(long)]
        queue: Option<String>,
    },
    /// Migrate players from a CSV of `player_id,elo,legacy_rank` (a header line is optional).
    Migrate {
        #[arg(long)]
        queue: String,
        #[arg(long)]
        file: PathBuf,
        /// Rows per request.
        #[arg(long, default_value_t = DEFAULT_MIGRATION_BATCH)]
        batch: usize,
    },
    /// Waiting tickets, wait percentiles and match quality per queue.
    QueueStats {
        #[arg(long)]
        queue: Option<String>,
    },
    /// Write a snapshot now and trim the journal.
    Snapshot,
    /// Move a stopped embedded server's data dir into a cluster's Redis (no node running):
    /// resumable, verified by counts and a checksum. Talks to no server.
    MigrateStore {
        /// The embedded server's data directory.
        #[arg(long)]
        from_data_dir: PathBuf,
        /// The cluster's Redis: redis://HOST:PORT/DB (rediss:// for TLS).
        #[arg(long)]
        to_redis: String,
        #[command(flatten)]
        redis: RedisFlags,
        /// Records per write (1..=100000).
        #[arg(long, default_value_t = 5000)]
        batch: usize,
    },
    /// A cluster as its keys in Redis describe it: the node owning the queues and its lease,
    /// the nodes holding a standby copy, flushes, stored players and waiting tickets, and what
    /// Redis keeps across a crash; with `--config`, of each shard. Talks to Redis, not to a
    /// node.
    ClusterStatus {
        /// The cluster's `cluster.redis_url` (with `--config`: in place of the config's).
        #[arg(long, required_unless_present = "config")]
        redis: Option<String>,
        /// A node's config file: the Redis URL, its TLS files and every shard's keyspace
        /// (`[cluster] keyspace` and each `[[cluster.shards]]`) come from its `[cluster]`, and
        /// each shard's status is shown, the home shard's first.
        #[arg(long)]
        config: Option<PathBuf>,
        #[command(flatten)]
        flags: RedisFlags,
    },
    /// Stream every player of a queue in id order; resume with `--after LAST_ID`.
    Export {
        #[arg(long)]
        queue: String,
        /// Start after this player id (exclusive).
        #[arg(long)]
        after: Option<String>,
        /// At most this many players (0 = all).
        #[arg(long, default_value_t = 0)]
        limit: u32,
    },
    // --- Records: matches, live tickets and parties (ClientService, GameServerService and
    // PartyService calls made with the admin's token) ---
    /// One match: live (formed, allocated, started) or ended, from the match history.
    Match {
        #[arg(long)]
        id: String,
    },
    /// A player's ended matches, most recently ended first; page on with `--page-token`.
    Matches {
        #[arg(long)]
        player: String,
        #[arg(long)]
        queue: Option<String>,
        /// Matches per page (at most 100).
        #[arg(long, default_value_t = 20)]
        limit: u32,
        #[arg(long)]
        page_token: Option<String>,
    },
    /// A player's live ticket, or the match it is in.
    ActiveTicket {
        #[arg(long)]
        player: String,
    },
    /// A party's members, leader and invite code.
    Party {
        #[arg(long)]
        id: String,
    },
    /// Cancel a match: before it started its tickets go back to their queues (listed), after
    /// it the match is void.
    CancelMatch {
        #[arg(long)]
        id: String,
        #[arg(long, default_value = "cancelled by an admin")]
        reason: String,
    },
    #[command(flatten)]
    Records(super::admin_records::RecordsCommand),
}

impl AdminCommand {
    /// The records commands, answered by `match_records`.
    fn is_records(&self) -> bool {
        matches!(
            self,
            Self::Match { .. }
                | Self::Matches { .. }
                | Self::ActiveTicket { .. }
                | Self::Party { .. }
                | Self::CancelMatch { .. }
        )
    }
}

/// Why an admin command failed.
#[derive(Debug, thiserror::Error)]
pub enum AdminCliError {
    #[error("--addr {addr}: {detail}")]
    Connect { addr: String, detail: String },
    #[error("--token: {0}")]
    Token(String),
    #[error("server: {}: {}", .0.code(), .0.message())]
    Status(#[from] tonic::Status),
    #[error("{path}: {detail}")]
    File { path: PathBuf, detail: String },
    #[error("{0}")]
    Usage(String),
    #[error("writing output: {0}")]
    Output(#[from] std::io::Error),
    #[error("starting the tokio runtime: {0}")]
    Runtime(String),
}

/// Adds the bearer token to every request.
#[derive(Clone)]
pub struct Bearer(Option<MetadataValue<Ascii>>);

impl Interceptor for Bearer {
    fn call(
        &mut self,
        mut request: tonic::Request<()>,
    ) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(v) = &self.0 {
            request.metadata_mut().insert("authorization", v.clone());
        }
        Ok(request)
    }
}

/// The admin client every command uses.
pub type Client = AdminServiceClient<InterceptedService<Channel, Bearer>>;

/// Runs one admin command to completion on its own runtime.
pub fn run(args: AdminArgs) -> Result<(), AdminCliError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| AdminCliError::Runtime(e.to_string()))?;
    runtime.block_on(run_async(args))
}

async fn connect(addr: &str, token: Option<&str>) -> Result<Client, AdminCliError> {
    let (channel, bearer) = channel(addr, token).await?;
    Ok(AdminServiceClient::with_interceptor(channel, bearer))
}

/// A channel to `addr` and the interceptor that sends `token`.
pub(super) async fn channel(
    addr: &str,
    token: Option<&str>,
) -> Result<(Channel, Bearer), AdminCliError> {
    let url = if addr.contains("://") {
        addr.to_owned()
    } else {
        format!("http://{addr}")
    };
    let bad = |detail: String| AdminCliError::Connect {
        addr: addr.to_owned(),
        detail,
    };
    let channel = Channel::from_shared(url.clone())
        .map_err(|e| bad(format!("not a URL: {e}")))?
        .connect_timeout(std::time::Duration::from_secs(10))
        .connect()
        .await
        .map_err(|e| bad(format!("cannot connect: {e}")))?;
    let bearer = token
        .map(|t| {
            format!("Bearer {t}")
                .parse::<MetadataValue<Ascii>>()
                .map_err(|e| AdminCliError::Token(e.to_string()))
        })
        .transpose()?;
    Ok((channel, Bearer(bearer)))
}

pub(super) fn rating_json(r: Option<&proto::Rating>) -> serde_json::Value {
    r.map_or(serde_json::Value::Null, |r| {
        json!({"mean": r.mean, "deviation": r.deviation, "volatility": r.volatility,
               "display": r.display, "display_low": r.display_low, "display_high": r.display_high})
    })
}

fn player_json(v: &proto::PlayerView) -> serde_json::Value {
    json!({"player_id": v.player_id, "queue": v.queue, "rating": rating_json(v.rating.as_ref()),
           "rank_points": v.rank_points, "tier": v.tier, "games": v.games, "wins": v.wins,
           "status": v.status})
}

fn player_line(v: &proto::PlayerView) -> String {
    let (mean, dev) = v
        .rating
        .as_ref()
        .map_or((0.0, 0.0), |r| (r.mean, r.deviation));
    format!(
        "{}\t{}\trating {:.2} ± {:.2}\trp {}\t{}\tgames {} wins {}",
        v.player_id,
        v.queue,
        mean,
        dev,
        v.rank_points,
        if v.tier.is_empty() { "-" } else { &v.tier },
        v.games,
        v.wins
    )
}

async fn run_async(args: AdminArgs) -> Result<(), AdminCliError> {
    let mut out = std::io::stdout().lock();
    let json = args.json;
    if let AdminCommand::ClusterStatus {
        redis,
        config,
        flags,
    } = &args.command
    {
        let (target, tls, node) = flags.target_of_node(config.as_deref(), redis.as_deref())?;
        let shards = super::cluster_status::shards(&target, node.as_ref());
        let statuses = super::cluster_status::read(&target.redis_url, tls.as_ref(), shards)
            .await
            .map_err(|e| AdminCliError::Usage(e.to_string()))?;
        if json {
            writeln!(out, "{}", super::cluster_status::json(&statuses))?;
        } else {
            write!(out, "{}", super::cluster_status::text(&statuses))?;
        }
        return Ok(());
    }
    if let AdminCommand::MigrateStore {
        from_data_dir,
        to_redis,
        redis,
        batch,
    } = &args.command
    {
        let (target, tls) = redis.target(to_redis, "--to-redis")?;
        let report = crate::tools::migrate_store::migrate(
            from_data_dir,
            to_redis,
            tls.as_ref(),
            target.keys(),
            *batch,
            |line| {
                if !json {
                    eprintln!("{line}");
                } else {
                    eprintln!(
                        "{{\"progress\":{}}}",
                        serde_json::Value::String(line.into())
                    );
                }
            },
        )
        .await
        .map_err(|e| AdminCliError::Usage(e.to_string()))?;
        if json {
            writeln!(out, "{}", json!(report))?;
        } else {
            writeln!(
                out,
                "migrated {} players, {} parties, {} results, {} live matches; checksum {} verified",
                report.counts.players,
                report.counts.parties,
                report.counts.results,
                report.counts.live_matches,
                report.counts.checksum
            )?;
        }
        return Ok(());
    }
    if args.command.is_records() {
        let (channel, bearer) = channel(&args.addr, args.token.as_deref()).await?;
        return super::match_records::run(channel, bearer, json, args.command, &mut out).await;
    }
    let mut client = connect(&args.addr, args.token.as_deref()).await?;
    match args.command {
        AdminCommand::SetRating {
            player,
            queue,
            mean,
            deviation,
            volatility,
            rank_points,
        } => {
            let v = client
                .set_rating(proto::SetRatingRequest {
                    player_id: player,
                    queue,
                    rating: Some(proto::Rating {
                        mean,
                        deviation,
                        volatility,
                        ..Default::default()
                    }),
                    rank_points,
                })
                .await?
                .into_inner();
            if json {
                writeln!(out, "{}", player_json(&v))?;
            } else {
                writeln!(out, "set {}", player_line(&v))?;
            }
        }
        AdminCommand::SeasonReset {
            kind,
            queue,
            dry_run,
        } => {
            let kind = match kind {
                ResetKindArg::Soft => proto::SeasonResetKind::Soft,
                ResetKindArg::Hard => proto::SeasonResetKind::Hard,
            };
            let r = client
                .season_reset(proto::SeasonResetRequest {
                    kind: kind as i32,
                    queue: queue.unwrap_or_default(),
                    dry_run,
                })
                .await?
                .into_inner();
            let name = if kind == proto::SeasonResetKind::Soft {
                "soft"
            } else {
                "hard"
            };
            if json {
                writeln!(
                    out,
                    "{}",
                    json!({"kind": name, "season": r.season, "week": r.week,
                           "players_changed": r.players_changed, "dry_run": r.dry_run,
                           "tiers": r.tiers.iter().map(|t| json!({"pool": t.pool,
                               "tier": t.tier, "before": t.before, "after": t.after}))
                               .collect::<Vec<_>>()})
                )?;
            } else {
                let done = if r.dry_run {
                    "dry run (nothing changed)"
                } else {
                    "done"
                };
                writeln!(
                    out,
                    "{name} reset {done}: season {} week {}, {} players changed",
                    r.season, r.week, r.players_changed
                )?;
                // A dry run shows what it would do per tier (tiers nobody is in, before or
                // after, left out); a reset's own line stays as it always was.
                for t in r
                    .tiers
                    .iter()
                    .filter(|t| r.dry_run && t.before + t.after > 0)
                {
                    writeln!(out, "  {} {}: {} -> {}", t.pool, t.tier, t.before, t.after)?;
                }
            }
        }
        AdminCommand::EndSeason { queue } => {
            let r = client
                .end_season(proto::EndSeasonRequest {
                    queue: queue.unwrap_or_default(),
                })
                .await?
                .into_inner();
            if json {
                writeln!(
                    out,
                    "{}",
                    json!({"season": r.season, "players_ranked": r.players_ranked})
                )?;
            } else {
                writeln!(
                    out,
                    "season {} ended: {} players ranked",
                    r.season, r.players_ranked
                )?;
            }
        }
        AdminCommand::Migrate { queue, file, batch } => {
            let report = migrate(&mut client, &queue, &file, batch.max(1), json).await?;
            if json {
                writeln!(out, "{report}")?;
            } else {
                writeln!(
                    out,
                    "migrated {}, unchanged {}, rejected {}",
                    report["migrated"], report["unchanged"], report["rejected_count"]
                )?;
                for r in report["rejected"].as_array().into_iter().flatten() {
                    writeln!(
                        out,
                        "  line {}: {}: {}",
                        r["line"],
                        r["player_id"].as_str().unwrap_or_default(),
                        r["reason"].as_str().unwrap_or_default()
                    )?;
                }
            }
            // A file whose every row was refused (another separator, a wrong column order)
            // migrated nothing: a script must not carry on as if it had.
            let count = |key: &str| report[key].as_u64().unwrap_or(0);
            if count("migrated") + count("unchanged") == 0 && count("rejected_count") > 0 {
                return Err(AdminCliError::Usage(format!(
                    "{}: every row was rejected; nothing was migrated",
                    file.display()
                )));
            }
        }
        AdminCommand::QueueStats { queue } => {
            let s = client
                .get_queue_stats(proto::GetQueueStatsRequest {
                    queue: queue.unwrap_or_default(),
                })
                .await?
                .into_inner();
            if json {
                let queues: Vec<_> = s
                    .queues
                    .iter()
                    .map(|q| {
                        json!({"queue": q.queue, "tickets_waiting": q.tickets_waiting,
                               "players_waiting": q.players_waiting,
                               "matches_formed": q.matches_formed,
                               "wait_p50_seconds": q.wait_p50_seconds,
                               "wait_p95_seconds": q.wait_p95_seconds,
                               "quality_mean": q.quality_mean, "last_tick_ms": q.last_tick_ms,
                               "tickets_expired": q.tickets_expired})
                    })
                    .collect();
                writeln!(out, "{}", json!({ "queues": queues }))?;
            } else {
                for q in &s.queues {
                    writeln!(
                        out,
                        "{}: {} tickets ({} players) waiting, {} matches formed, wait p50 {:.1}s p95 {:.1}s, quality {:.3}, last tick {:.2} ms, {} expired",
                        q.queue,
                        q.tickets_waiting,
                        q.players_waiting,
                        q.matches_formed,
                        q.wait_p50_seconds,
                        q.wait_p95_seconds,
                        q.quality_mean,
                        q.last_tick_ms,
                        q.tickets_expired
                    )?;
                }
            }
        }
        AdminCommand::Snapshot => {
            let r = client
                .snapshot(proto::SnapshotRequest {})
                .await?
                .into_inner();
            if json {
                writeln!(
                    out,
                    "{}",
                    json!({"players": r.players, "bytes": r.bytes, "seconds": r.seconds})
                )?;
            } else {
                writeln!(
                    out,
                    "snapshot: {} players, {} bytes on disk, {:.3} s",
                    r.players, r.bytes, r.seconds
                )?;
            }
        }
        // Answered above, without a server, or by `match_records`.
        AdminCommand::MigrateStore { .. }
        | AdminCommand::ClusterStatus { .. }
        | AdminCommand::Match { .. }
        | AdminCommand::Matches { .. }
        | AdminCommand::ActiveTicket { .. }
        | AdminCommand::Party { .. }
        | AdminCommand::CancelMatch { .. } => {}
        AdminCommand::Records(command) => {
            super::admin_records::run(command, &mut client, json, &mut out).await?;
        }
        AdminCommand::Export {
            queue,
            after,
            limit,
        } => {
            let mut stream = client
                .export_players(proto::ExportPlayersRequest {
                    queue,
                    after_player_id: after.unwrap_or_default(),
                    limit,
                })
                .await?
                .into_inner();
            let mut last = None;
            let mut n = 0u64;
            while let Some(item) = stream.next().await {
                let v = match item {
                    Ok(v) => v,
                    Err(status) => {
                        if let Some(last) = &last {
                            eprintln!("export interrupted; resume with --after {last}");
                        }
                        return Err(status.into());
                    }
                };
                if json {
                    writeln!(out, "{}", player_json(&v))?;
                } else {
                    writeln!(out, "{}", player_line(&v))?;
                }
                n += 1;
                last = Some(v.player_id);
            }
            if !json {
                match last {
                    Some(last) => writeln!(out, "{n} players exported; next page: --after {last}")?,
                    None => writeln!(out, "0 players exported")?,
                }
            }
        }
    }
    Ok(())
}

/// One CSV data line as (player id, Elo, legacy rank), or why it cannot be a row. Fields are
/// split on commas and may be wrapped in double quotes (no embedded commas).
fn parse_line(line: &str) -> Result<(String, f64, String), String> {
    let fields: Vec<&str> = line
        .split(',')
        .map(|f| f.trim().trim_matches('"').trim())
        .collect();
    let [player, elo, rank] = fields.as_slice() else {
        return Err(format!(
            "expected 3 fields player_id,elo,legacy_rank (got {})",
            fields.len()
        ));
    };
    let elo: f64 = elo
        .parse()
        .map_err(|_| format!("elo: not a number: {elo:?}"))?;
    Ok(((*player).to_owned(), elo, (*rank).to_owned()))
}

async fn migrate(
    client: &mut Client,
    queue: &str,
    file: &Path,
    batch: usize,
    json: bool,
) -> Result<serde_json::Value, AdminCliError> {
    let open_err = |e: std::io::Error| AdminCliError::File {
        path: file.to_path_buf(),
        detail: e.to_string(),
    };
    let lines: Vec<String> = std::io::BufReader::new(std::fs::File::open(file).map_err(open_err)?)
        .lines()
        .collect::<Result<_, _>>()
        .map_err(open_err)?;
    let mut rows: Vec<(usize, proto::EloRow)> = Vec::new();
    let mut rejected: Vec<serde_json::Value> = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let line_no = i + 1;
        if line.trim().is_empty() || line.trim_start().starts_with('#') {
            continue;
        }
        if rows.is_empty()
            && rejected.is_empty()
            && line
                .trim_start()
                .to_ascii_lowercase()
                .starts_with("player_id")
        {
            continue; // header
        }
        match parse_line(line) {
            Ok((player_id, elo, legacy_rank)) => rows.push((
                line_no,
                proto::EloRow {
                    player_id,
                    elo,
                    legacy_rank,
                },
            )),
            Err(reason) => {
                rejected.push(json!({"line": line_no, "player_id": "", "reason": reason}));
            }
        }
    }
    if rows.is_empty() && rejected.is_empty() {
        return Err(AdminCliError::Usage(format!(
            "{}: no rows (expected lines of player_id,elo,legacy_rank)",
            file.display()
        )));
    }
    let total = rows.len() as u64;
    let unparsed = rejected.len() as u64;
    let bar = if json {
        indicatif::ProgressBar::hidden()
    } else {
        let bar = indicatif::ProgressBar::new(total);
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "{bar:40} {pos}/{len} rows ({per_sec}, eta {eta})",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        bar
    };
    let (mut migrated, mut unchanged) = (0u64, 0u64);
    for chunk in rows.chunks(batch) {
        let r = client
            .migrate_from_elo(proto::MigrateFromEloRequest {
                queue: queue.to_owned(),
                rows: chunk.iter().map(|(_, r)| r.clone()).collect(),
            })
            .await
            .inspect_err(|_| bar.abandon())?
            .into_inner();
        migrated += r.migrated;
        unchanged += r.unchanged;
        for rej in r.rejected {
            let line = chunk.get(rej.index as usize).map_or(0, |(l, _)| *l);
            rejected.push(json!({"line": line, "player_id": rej.player_id, "reason": rej.reason}));
        }
        bar.inc(chunk.len() as u64);
    }
    bar.finish_and_clear();
    rejected.sort_by_key(|r| r["line"].as_u64().unwrap_or(0));
    Ok(json!({"queue": queue, "rows": total + unparsed,
              "migrated": migrated, "unchanged": unchanged,
              "rejected_count": rejected.len(), "rejected": rejected}))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_is_sent_as_a_bearer_authorization_header() {
        let mut bearer = Bearer(Some("Bearer abc.def.ghi".parse().unwrap()));
        let req = bearer.call(tonic::Request::new(())).unwrap();
        assert_eq!(
            req.metadata().get("authorization").unwrap(),
            "Bearer abc.def.ghi"
        );
        let req = Bearer(None).call(tonic::Request::new(())).unwrap();
        assert!(req.metadata().get("authorization").is_none());
    }

    #[test]
    fn csv_lines_parse_or_say_why_not() {
        assert_eq!(
            parse_line(" p1 , 1650.5 ,\"Gold\""),
            Ok(("p1".to_owned(), 1650.5, "Gold".to_owned()))
        );
        assert!(parse_line("p1,abc,Gold").unwrap_err().starts_with("elo"));
        assert!(parse_line("p1,1500").unwrap_err().contains("3 fields"));
    }
}

//! `matchmaker admin` commands for player and match records: `ban`, `unban`, `player-ban`,
//! `delete-player`, `live-matches`, `recent-results`, `audit-log`, `events` and `reload-config`.
//! Text by default, JSON with `--json` (`events` prints one object per line, so a pipeline can
//! read it as it comes).

use std::io::Write;

use serde_json::json;
use tokio_stream::StreamExt;

use super::admin::{AdminCliError, Client};
use crate::proto;

/// A match record's teams, as lists of player ids.
fn teams(m: &proto::MatchRecord) -> Vec<Vec<String>> {
    m.teams.iter().map(|t| t.player_ids.clone()).collect()
}

/// The record commands (flattened into `matchmaker admin`).
#[derive(clap::Subcommand, Debug)]
pub enum RecordsCommand {
    /// Ban a player from queueing until a unix time (0 or absent: for good).
    Ban {
        #[arg(long)]
        player: String,
        #[arg(long, default_value_t = 0)]
        until: i64,
        /// Shown to the player on every refused EnterQueue.
        #[arg(long)]
        reason: String,
    },
    /// Lift a player's ban.
    Unban {
        #[arg(long)]
        player: String,
    },
    /// Show a player's stored ban: its end, reason and whether it holds now.
    PlayerBan {
        #[arg(long)]
        player: String,
    },
    /// Erase a player: ratings in every pool, rank points, leaderboard and season entries,
    /// party records, a ban, a waiting ticket.
    DeletePlayer {
        #[arg(long)]
        player: String,
    },
    /// List the matches held now (formed, allocated or started), newest first.
    LiveMatches {
        /// Only this queue's matches.
        #[arg(long)]
        queue: Option<String>,
        /// At most this many (at most 1000).
        #[arg(long, default_value_t = 50)]
        limit: u32,
    },
    /// List the matches whose results were applied most recently, newest first (from the
    /// durable event log and match history: the same on every node).
    RecentResults {
        /// Only this queue's results.
        #[arg(long)]
        queue: Option<String>,
        /// At most this many (at most 1000).
        #[arg(long, default_value_t = 50)]
        limit: u32,
    },
    /// Page through the audit log, oldest first; resume with `--page-token`.
    AuditLog {
        #[arg(long)]
        page_token: Option<String>,
        /// Entries per page (at most 1000).
        #[arg(long, default_value_t = 100)]
        limit: u32,
    },
    /// Stream events after a cursor (one line each); stop after `--count` events, or follow.
    Events {
        /// Resume after this cursor (0: the oldest kept).
        #[arg(long, default_value_t = 0)]
        after: u64,
        /// Only these kinds, e.g. `--kind match-formed --kind rating-changed`.
        #[arg(long = "kind", value_enum)]
        kinds: Vec<KindArg>,
        /// Stop after this many events (0: follow until interrupted).
        #[arg(long, default_value_t = 0)]
        count: u64,
    },
    /// Reload the server's config file (queue settings only), as SIGHUP does.
    ReloadConfig,
}

/// Event kinds on the command line.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum KindArg {
    MatchFormed,
    MatchAllocated,
    MatchStarted,
    MatchCompleted,
    MatchCancelled,
    RatingChanged,
    SeasonReset,
    PlayerDeleted,
    PlayerBanned,
    PlayerUnbanned,
}

impl KindArg {
    fn to_proto(self) -> proto::EventKind {
        use proto::EventKind as K;
        match self {
            Self::MatchFormed => K::MatchFormed,
            Self::MatchAllocated => K::MatchAllocated,
            Self::MatchStarted => K::MatchStarted,
            Self::MatchCompleted => K::MatchCompleted,
            Self::MatchCancelled => K::MatchCancelled,
            Self::RatingChanged => K::RatingChanged,
            Self::SeasonReset => K::SeasonReset,
            Self::PlayerDeleted => K::PlayerDeleted,
            Self::PlayerBanned => K::PlayerBanned,
            Self::PlayerUnbanned => K::PlayerUnbanned,
        }
    }
}

/// An event kind's name as printed (`MATCH_FORMED`).
fn kind_name(kind: i32) -> String {
    proto::EventKind::try_from(kind).map_or_else(
        |_| kind.to_string(),
        |k| {
            k.as_str_name()
                .trim_start_matches("EVENT_KIND_")
                .to_string()
        },
    )
}

/// Runs one record command.
pub async fn run(
    command: RecordsCommand,
    client: &mut Client,
    json: bool,
    out: &mut impl Write,
) -> Result<(), AdminCliError> {
    match command {
        RecordsCommand::Ban {
            player,
            until,
            reason,
        } => {
            let r = client
                .ban_player(proto::BanPlayerRequest {
                    player_id: player.clone(),
                    until_unix: until,
                    reason,
                })
                .await?
                .into_inner();
            if json {
                writeln!(
                    out,
                    "{}",
                    json!({"player_id": player, "until_unix": until, "ticket_cancelled": r.ticket_cancelled})
                )?;
            } else {
                let end = if until == 0 {
                    "for good".to_string()
                } else {
                    format!("until {until}")
                };
                let cancelled = if r.ticket_cancelled {
                    "; waiting ticket cancelled"
                } else {
                    ""
                };
                writeln!(out, "banned {player} {end}{cancelled}")?;
            }
        }
        RecordsCommand::Unban { player } => {
            let r = client
                .unban_player(proto::UnbanPlayerRequest {
                    player_id: player.clone(),
                })
                .await?
                .into_inner();
            if json {
                writeln!(
                    out,
                    "{}",
                    json!({"player_id": player, "was_banned": r.was_banned})
                )?;
            } else if r.was_banned {
                writeln!(out, "unbanned {player}")?;
            } else {
                writeln!(out, "{player} was not banned")?;
            }
        }
        RecordsCommand::PlayerBan { player } => {
            let r = client
                .get_player_ban(proto::GetPlayerBanRequest {
                    player_id: player.clone(),
                })
                .await?
                .into_inner();
            if json {
                let ban = r.ban.as_ref().map(|b| {
                    json!({"until_unix": b.until_unix, "reason": b.reason,
                           "since_unix": b.since_unix, "active": b.active})
                });
                writeln!(out, "{}", json!({"player_id": player, "ban": ban}))?;
            } else {
                match &r.ban {
                    None => writeln!(out, "{player} is not banned")?,
                    Some(b) => {
                        let end = if b.until_unix == 0 {
                            "for good".to_string()
                        } else {
                            format!("until {}", b.until_unix)
                        };
                        let state = if b.active { "banned" } else { "ended" };
                        writeln!(
                            out,
                            "{player}: {state}, {end} (set at {:.0}): {}",
                            b.since_unix, b.reason
                        )?;
                    }
                }
            }
        }
        RecordsCommand::LiveMatches { queue, limit } => {
            let r = client
                .list_live_matches(proto::ListLiveMatchesRequest {
                    queue: queue.clone().unwrap_or_default(),
                    limit,
                })
                .await?
                .into_inner();
            let phase = |p: i32| {
                proto::MatchPhase::try_from(p).map_or("unknown".to_string(), |p| {
                    p.as_str_name()
                        .trim_start_matches("MATCH_PHASE_")
                        .to_lowercase()
                })
            };
            if json {
                let matches: Vec<_> = r
                    .matches
                    .iter()
                    .map(|m| {
                        json!({"match_id": m.match_id, "queue": m.queue, "phase": phase(m.phase),
                               "teams": teams(m), "formed_unix": m.formed_unix,
                               "server_address": m.server_address,
                               "win_probability": m.win_probability})
                    })
                    .collect();
                writeln!(out, "{}", json!({"total": r.total, "matches": matches}))?;
            } else {
                writeln!(out, "{} live matches", r.total)?;
                for m in &r.matches {
                    let sides: Vec<String> = teams(m).iter().map(|t| t.join(", ")).collect();
                    writeln!(
                        out,
                        "{} {} {} formed {}: {}",
                        m.match_id,
                        m.queue,
                        phase(m.phase),
                        m.formed_unix,
                        sides.join(" vs ")
                    )?;
                }
            }
        }
        RecordsCommand::RecentResults { queue, limit } => {
            let r = client
                .list_recent_results(proto::ListRecentResultsRequest {
                    queue: queue.clone().unwrap_or_default(),
                    limit,
                })
                .await?
                .into_inner();
            if json {
                let matches: Vec<_> = r
                    .matches
                    .iter()
                    .map(|m| {
                        let changes: Vec<_> = m
                            .changes
                            .iter()
                            .map(|c| {
                                let display =
                                    |r: &Option<proto::Rating>| r.as_ref().map(|r| r.display);
                                json!({"player_id": c.player_id,
                                       "rating_before": display(&c.before),
                                       "rating_after": display(&c.after),
                                       "rank_points_before": c.rank_points_before,
                                       "rank_points_after": c.rank_points_after})
                            })
                            .collect();
                        json!({"match_id": m.match_id, "queue": m.queue, "teams": teams(m),
                               "placements": m.placements, "ended_unix": m.ended_unix,
                               "server_address": m.server_address, "changes": changes})
                    })
                    .collect();
                writeln!(out, "{}", json!({"matches": matches}))?;
            } else {
                writeln!(out, "{} recent results", r.matches.len())?;
                for m in &r.matches {
                    let sides: Vec<String> = teams(m)
                        .iter()
                        .zip(&m.placements)
                        .map(|(t, place)| format!("#{place} {}", t.join(", ")))
                        .collect();
                    writeln!(
                        out,
                        "{} {} ended {}: {}",
                        m.match_id,
                        m.queue,
                        m.ended_unix,
                        sides.join(" vs ")
                    )?;
                }
            }
        }
        RecordsCommand::DeletePlayer { player } => {
            let r = client
                .delete_player(proto::DeletePlayerRequest {
                    player_id: player.clone(),
                })
                .await?
                .into_inner();
            if json {
                writeln!(
                    out,
                    "{}",
                    json!({"player_id": player, "pools": r.pools, "ticket_cancelled": r.ticket_cancelled})
                )?;
            } else {
                writeln!(
                    out,
                    "deleted {player} (pools: {}){}",
                    if r.pools.is_empty() {
                        "none".to_string()
                    } else {
                        r.pools.join(", ")
                    },
                    if r.ticket_cancelled {
                        "; waiting ticket cancelled"
                    } else {
                        ""
                    }
                )?;
            }
        }
        RecordsCommand::AuditLog { page_token, limit } => {
            let r = client
                .list_audit_log(proto::ListAuditLogRequest {
                    page_token: page_token.unwrap_or_default(),
                    limit,
                })
                .await?
                .into_inner();
            if json {
                let entries: Vec<serde_json::Value> = r
                    .entries
                    .iter()
                    .map(|e| json!({"unix": e.unix, "actor": e.actor, "action": e.action, "detail": e.detail}))
                    .collect();
                writeln!(
                    out,
                    "{}",
                    json!({"entries": entries, "next_page_token": r.next_page_token})
                )?;
            } else {
                for e in &r.entries {
                    writeln!(out, "{:.3} {} {} {}", e.unix, e.actor, e.action, e.detail)?;
                }
                if !r.next_page_token.is_empty() {
                    writeln!(out, "next page: --page-token {}", r.next_page_token)?;
                }
            }
        }
        RecordsCommand::Events {
            after,
            kinds,
            count,
        } => {
            let mut stream = client
                .watch_events(proto::WatchEventsRequest {
                    after_cursor: after,
                    kinds: kinds.iter().map(|k| k.to_proto() as i32).collect(),
                })
                .await?
                .into_inner();
            let mut n = 0u64;
            while count == 0 || n < count {
                let Some(item) = stream.next().await else {
                    break;
                };
                let e = item?;
                if json {
                    let detail: serde_json::Value =
                        serde_json::from_str(&e.detail_json).unwrap_or(serde_json::Value::Null);
                    writeln!(
                        out,
                        "{}",
                        json!({"cursor": e.cursor, "kind": kind_name(e.kind), "unix": e.unix,
                               "match_id": e.match_id, "player_id": e.player_id, "detail": detail})
                    )?;
                } else {
                    writeln!(
                        out,
                        "{} {:.3} {} match={} player={} {}",
                        e.cursor,
                        e.unix,
                        kind_name(e.kind),
                        e.match_id,
                        e.player_id,
                        e.detail_json
                    )?;
                }
                out.flush()?;
                n += 1;
            }
        }
        RecordsCommand::ReloadConfig => {
            let r = client
                .reload_config(proto::ReloadConfigRequest {})
                .await?
                .into_inner();
            if json {
                writeln!(out, "{}", json!({"changed_queues": r.changed_queues}))?;
            } else if r.changed_queues.is_empty() {
                writeln!(out, "config reloaded; no queue changed")?;
            } else {
                writeln!(
                    out,
                    "config reloaded; changed: {}",
                    r.changed_queues.join(", ")
                )?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_print_without_their_prefix() {
        assert_eq!(
            kind_name(proto::EventKind::MatchFormed as i32),
            "MATCH_FORMED"
        );
        assert_eq!(kind_name(99), "99");
        assert_eq!(
            KindArg::PlayerUnbanned.to_proto(),
            proto::EventKind::PlayerUnbanned
        );
    }
}

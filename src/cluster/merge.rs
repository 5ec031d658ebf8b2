//! The answers of every shard to a call about no one queue, merged into the answer one node
//! gives (see `front::Dispatch`). Each takes the shards' answers in shard order.

use std::collections::BTreeSet;

use crate::proto;

/// `GetQueueStats` of every queue: each shard's queues, in queue-name order as one node lists
/// them.
pub fn queue_stats(answers: Vec<proto::QueueStats>) -> proto::QueueStats {
    let mut queues: Vec<proto::QueueStat> = answers.into_iter().flat_map(|a| a.queues).collect();
    queues.sort_by(|a, b| a.queue.cmp(&b.queue));
    proto::QueueStats { queues }
}

/// `Snapshot`: every shard's records written; the time is the slowest shard's (they run at
/// once). A player with records in two shards' pools counts in each.
pub fn snapshot(answers: Vec<proto::SnapshotResponse>) -> proto::SnapshotResponse {
    answers
        .into_iter()
        .fold(proto::SnapshotResponse::default(), |all, a| {
            proto::SnapshotResponse {
                players: all.players + a.players,
                bytes: all.bytes + a.bytes,
                seconds: all.seconds.max(a.seconds),
            }
        })
}

/// The newest `limit` matches of every shard's, newest first (ties by match id, newest
/// first), as one node orders its own.
fn newest(
    answers: impl IntoIterator<Item = Vec<proto::MatchRecord>>,
    limit: usize,
    at: impl Fn(&proto::MatchRecord) -> i64,
) -> Vec<proto::MatchRecord> {
    let mut matches: Vec<proto::MatchRecord> = answers.into_iter().flatten().collect();
    matches.sort_by(|a, b| at(b).cmp(&at(a)).then_with(|| b.match_id.cmp(&a.match_id)));
    matches.truncate(limit);
    matches
}

/// The page size a list call asked for (`limit`, or the default page when 0).
fn page(limit: u32) -> usize {
    match limit {
        0 => crate::api::LIVE_MATCHES_PAGE,
        n => n as usize,
    }
}

/// `ListLiveMatches` of every queue: how many are live in all, and the newest formed.
pub fn live_matches(
    answers: Vec<proto::ListLiveMatchesResponse>,
    limit: u32,
) -> proto::ListLiveMatchesResponse {
    let total = answers.iter().map(|a| a.total).sum();
    proto::ListLiveMatchesResponse {
        total,
        matches: newest(answers.into_iter().map(|a| a.matches), page(limit), |m| {
            m.formed_unix
        }),
    }
}

/// `ListRecentResults` of every queue: the newest ended.
pub fn recent_results(
    answers: Vec<proto::ListRecentResultsResponse>,
    limit: u32,
) -> proto::ListRecentResultsResponse {
    proto::ListRecentResultsResponse {
        matches: newest(answers.into_iter().map(|a| a.matches), page(limit), |m| {
            m.ended_unix
        }),
    }
}

/// `ReloadConfig`: the queues that changed in any shard, in name order.
pub fn reload(answers: Vec<proto::ReloadConfigResponse>) -> proto::ReloadConfigResponse {
    let changed: BTreeSet<String> = answers.into_iter().flat_map(|a| a.changed_queues).collect();
    proto::ReloadConfigResponse {
        changed_queues: changed.into_iter().collect(),
    }
}

/// `SeasonReset` of every queue: each shard's pools, in pool-name order; the season clock of
/// the first of them (pools reset together agree), the players changed in all.
pub fn season_reset(answers: Vec<proto::SeasonResetResponse>) -> proto::SeasonResetResponse {
    let dry_run = answers.iter().any(|a| a.dry_run);
    let players_changed = answers.iter().map(|a| a.players_changed).sum();
    let mut pools: Vec<proto::PoolSeason> = Vec::new();
    let mut tiers: Vec<proto::TierCount> = Vec::new();
    for answer in answers {
        pools.extend(answer.pools);
        tiers.extend(answer.tiers);
    }
    pools.sort_by(|a, b| a.pool.cmp(&b.pool));
    // Stable: each pool's tiers keep their order.
    tiers.sort_by(|a, b| a.pool.cmp(&b.pool));
    let (season, week) = pools.first().map_or((0, 0), |p| (p.season, p.week));
    proto::SeasonResetResponse {
        season,
        week,
        players_changed,
        tiers,
        dry_run,
        pools,
    }
}

/// `EndSeason` of every ladder queue: the players ranked in all; the season of the first
/// shard that ended one.
pub fn end_season(answers: Vec<proto::EndSeasonResponse>) -> proto::EndSeasonResponse {
    proto::EndSeasonResponse {
        season: answers
            .iter()
            .map(|a| a.season)
            .find(|s| *s > 0)
            .unwrap_or(0),
        players_ranked: answers.iter().map(|a| a.players_ranked).sum(),
    }
}

/// `DeletePlayer`: the pools any shard erased records of, in name order; whether any shard
/// cancelled a ticket.
pub fn delete_player(answers: Vec<proto::DeletePlayerResponse>) -> proto::DeletePlayerResponse {
    let ticket_cancelled = answers.iter().any(|a| a.ticket_cancelled);
    let pools: BTreeSet<String> = answers.into_iter().flat_map(|a| a.pools).collect();
    proto::DeletePlayerResponse {
        pools: pools.into_iter().collect(),
        ticket_cancelled,
    }
}

/// `BanPlayer`: whether any shard cancelled the player's ticket.
pub fn ban(answers: Vec<proto::BanPlayerResponse>) -> proto::BanPlayerResponse {
    proto::BanPlayerResponse {
        ticket_cancelled: answers.iter().any(|a| a.ticket_cancelled),
    }
}

/// `UnbanPlayer`: whether any shard held a ban.
pub fn unban(answers: Vec<proto::UnbanPlayerResponse>) -> proto::UnbanPlayerResponse {
    proto::UnbanPlayerResponse {
        was_banned: answers.iter().any(|a| a.was_banned),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(id: &str, formed: i64, ended: i64) -> proto::MatchRecord {
        proto::MatchRecord {
            match_id: id.into(),
            formed_unix: formed,
            ended_unix: ended,
            ..Default::default()
        }
    }

    #[test]
    fn queue_stats_list_every_shard_s_queues_in_name_order() {
        let stat = |q: &str| proto::QueueStat {
            queue: q.into(),
            ..Default::default()
        };
        let merged = queue_stats(vec![
            proto::QueueStats {
                queues: vec![stat("1v1"), stat("ffa8")],
            },
            proto::QueueStats {
                queues: vec![stat("2v2")],
            },
        ]);
        let names: Vec<&str> = merged.queues.iter().map(|q| q.queue.as_str()).collect();
        assert_eq!(names, ["1v1", "2v2", "ffa8"]);
    }

    #[test]
    fn live_matches_count_all_and_list_the_newest_up_to_the_page() {
        let merged = live_matches(
            vec![
                proto::ListLiveMatchesResponse {
                    total: 7,
                    matches: vec![record("a", 30, 0), record("b", 10, 0)],
                },
                proto::ListLiveMatchesResponse {
                    total: 2,
                    matches: vec![record("c", 20, 0), record("d", 30, 0)],
                },
            ],
            3,
        );
        assert_eq!(merged.total, 9);
        let ids: Vec<&str> = merged.matches.iter().map(|m| m.match_id.as_str()).collect();
        assert_eq!(ids, ["d", "a", "c"]);
        let all = recent_results(
            vec![
                proto::ListRecentResultsResponse {
                    matches: vec![record("x", 0, 5)],
                },
                proto::ListRecentResultsResponse {
                    matches: vec![record("y", 0, 9)],
                },
            ],
            0,
        );
        let ids: Vec<&str> = all.matches.iter().map(|m| m.match_id.as_str()).collect();
        assert_eq!(ids, ["y", "x"], "the default page holds both");
    }

    #[test]
    fn writes_merge_as_one_node_answers_them() {
        let deleted = delete_player(vec![
            proto::DeletePlayerResponse {
                pools: vec!["5v5".into()],
                ticket_cancelled: false,
            },
            proto::DeletePlayerResponse {
                pools: vec!["1v1".into()],
                ticket_cancelled: true,
            },
        ]);
        assert_eq!(deleted.pools, ["1v1", "5v5"]);
        assert!(deleted.ticket_cancelled);
        assert!(!ban(vec![proto::BanPlayerResponse::default(); 2]).ticket_cancelled);
        assert!(
            unban(vec![
                proto::UnbanPlayerResponse { was_banned: false },
                proto::UnbanPlayerResponse { was_banned: true }
            ])
            .was_banned
        );
        let reloaded = reload(vec![
            proto::ReloadConfigResponse {
                changed_queues: vec!["ffa8".into()],
            },
            proto::ReloadConfigResponse {
                changed_queues: vec!["1v1".into()],
            },
        ]);
        assert_eq!(reloaded.changed_queues, ["1v1", "ffa8"]);
        let snap = snapshot(vec![
            proto::SnapshotResponse {
                players: 3,
                bytes: 10,
                seconds: 0.5,
            },
            proto::SnapshotResponse {
                players: 4,
                bytes: 5,
                seconds: 0.25,
            },
        ]);
        assert_eq!((snap.players, snap.bytes, snap.seconds), (7, 15, 0.5));
    }

    #[test]
    fn a_season_reset_lists_every_pool_in_order_with_the_first_pool_s_clock() {
        let pool = |name: &str, season: u32| proto::PoolSeason {
            pool: name.into(),
            season,
            week: 1,
            ..Default::default()
        };
        let tier = |pool: &str, tier: &str| proto::TierCount {
            pool: pool.into(),
            tier: tier.into(),
            ..Default::default()
        };
        let merged = season_reset(vec![
            proto::SeasonResetResponse {
                season: 4,
                week: 1,
                players_changed: 10,
                tiers: vec![tier("5v5", "gold"), tier("5v5", "bronze")],
                dry_run: false,
                pools: vec![pool("5v5", 4)],
            },
            proto::SeasonResetResponse {
                season: 3,
                week: 1,
                players_changed: 5,
                tiers: vec![tier("2v2", "gold")],
                dry_run: false,
                pools: vec![pool("2v2", 3)],
            },
        ]);
        assert_eq!(merged.players_changed, 15);
        assert_eq!(merged.season, 3, "2v2 comes first");
        let pools: Vec<&str> = merged.pools.iter().map(|p| p.pool.as_str()).collect();
        assert_eq!(pools, ["2v2", "5v5"]);
        let tiers: Vec<(&str, &str)> = merged
            .tiers
            .iter()
            .map(|t| (t.pool.as_str(), t.tier.as_str()))
            .collect();
        assert_eq!(tiers, [("2v2", "gold"), ("5v5", "gold"), ("5v5", "bronze")]);
        let ended = end_season(vec![
            proto::EndSeasonResponse {
                season: 0,
                players_ranked: 0,
            },
            proto::EndSeasonResponse {
                season: 2,
                players_ranked: 8,
            },
        ]);
        assert_eq!((ended.season, ended.players_ranked), (2, 8));
    }
}

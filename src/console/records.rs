//! The console's Matches and Players endpoints. A match's page is `GetMatch` (the durable match
//! record: teams, phase, times, server, placements and rating changes), a player's recent
//! matches and rating chart are `ListPlayerMatches` (durable, paged) and their ban is
//! `GetPlayerBan`, all called in process through the server's gRPC stack (or a cluster node's
//! front), so they read the same after a restart or on any node; so does a match's prediction
//! at formation (`MatchRecord.win_probability`). The live list comes from the state. Handlers
//! translate; the conversions are pure and tested here.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, Query, State as Axum};
use axum::http::{HeaderMap, Uri};
use serde_json::{Value, json};

use super::Console;
use super::api::{Answer, ApiError, Caller, ListQuery, gate, player_view};
use crate::proto;

/// One point of a player's rating chart.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct Point {
    /// Unix seconds.
    pub t: f64,
    /// In the queue system's display units.
    pub rating: f64,
    pub rank_points: u32,
}

/// Most of a player's matches one page load reads (`ListPlayerMatches` pages of 100); the
/// history keeps at most `[history] matches_per_player` anyway.
const PLAYER_MATCHES: usize = 500;

/// A match the server holds now (single server only).
fn live_match(m: &crate::state::MatchSlot) -> Value {
    let a = m.assignment();
    json!({
        "match_id": m.id.as_str(),
        "queue": m.queue.as_str(),
        "phase": m.phase().name(),
        "formed_unix": m.formed_unix,
        "quality": m.quality,
        "teams": a.teams.iter().map(|t| t.iter().map(|p| p.as_str()).collect::<Vec<_>>()).collect::<Vec<_>>(),
        "win_probability": a.win_probability,
        "server_address": a.server_address,
        "region": a.region,
        "left": a.left.iter().map(|p| p.as_str()).collect::<Vec<_>>(),
    })
}

/// A match phase as the page names it (`completed`).
fn phase_name(phase: i32) -> &'static str {
    match proto::MatchPhase::try_from(phase) {
        Ok(proto::MatchPhase::Formed) => "formed",
        Ok(proto::MatchPhase::Allocated) => "allocated",
        Ok(proto::MatchPhase::Started) => "started",
        Ok(proto::MatchPhase::Completed) => "completed",
        Ok(proto::MatchPhase::Cancelled) => "cancelled",
        Ok(proto::MatchPhase::Unspecified) | Err(_) => "unknown",
    }
}

/// The rating shown for a `Rating` (display units), or NaN when absent.
fn display(r: Option<&proto::Rating>) -> f64 {
    r.map_or(f64::NAN, |r| r.display)
}

/// A `MatchRecord` as JSON: ratings in display units, times in unix seconds (null when they
/// did not happen).
fn match_record(r: &proto::MatchRecord) -> Value {
    let time = |t: i64| (t > 0).then_some(t);
    json!({
        "match_id": r.match_id,
        "queue": r.queue,
        "phase": phase_name(r.phase),
        "teams": r.teams.iter().map(|t| &t.player_ids).collect::<Vec<_>>(),
        "placements": r.placements,
        "changes": r.changes.iter().map(|c| json!({
            "player_id": c.player_id,
            "rating_before": display(c.before.as_ref()),
            "rating_after": display(c.after.as_ref()),
            "rank_points_before": c.rank_points_before,
            "rank_points_after": c.rank_points_after,
        })).collect::<Vec<_>>(),
        "server_address": r.server_address,
        "win_probability": r.win_probability,
        "formed_unix": time(r.formed_unix),
        "started_unix": time(r.started_unix),
        "ended_unix": time(r.ended_unix),
    })
}

/// `player`'s rating and rank points in `queue` over time, oldest first, from their match
/// records (newest first, as `ListPlayerMatches` answers): the value before their oldest
/// completed match, then after each completed match at its end.
#[must_use]
pub fn rating_points(records: &[proto::MatchRecord], player: &str, queue: &str) -> Vec<Point> {
    let mut points = Vec::new();
    for r in records.iter().rev().filter(|r| {
        r.queue == queue && r.phase == proto::MatchPhase::Completed as i32 && r.ended_unix > 0
    }) {
        let Some(c) = r.changes.iter().find(|c| c.player_id == player) else {
            continue;
        };
        let rank_points = |v: i64| u32::try_from(v.max(0)).unwrap_or(u32::MAX);
        if points.is_empty() {
            let start = if r.formed_unix > 0 {
                r.formed_unix.min(r.ended_unix)
            } else {
                r.ended_unix
            };
            points.push(Point {
                t: start as f64,
                rating: display(c.before.as_ref()),
                rank_points: rank_points(c.rank_points_before),
            });
        }
        points.push(Point {
            t: r.ended_unix as f64,
            rating: display(c.after.as_ref()),
            rank_points: rank_points(c.rank_points_after),
        });
    }
    points
}

/// `player`'s match records, most recently ended first, at most [`PLAYER_MATCHES`]: every page
/// of `ListPlayerMatches`.
async fn player_matches(
    caller: &Caller,
    player: &str,
) -> Result<Vec<proto::MatchRecord>, ApiError> {
    let mut records = Vec::new();
    let mut page_token = String::new();
    loop {
        let page: proto::ListPlayerMatchesResponse = caller
            .call(
                "/matchmaker.v1.ClientService/ListPlayerMatches",
                proto::ListPlayerMatchesRequest {
                    player_id: player.to_owned(),
                    queue: String::new(),
                    page_token,
                    limit: 100,
                },
            )
            .await?;
        records.extend(page.matches);
        if page.next_page_token.is_empty() || records.len() >= PLAYER_MATCHES {
            records.truncate(PLAYER_MATCHES);
            return Ok(records);
        }
        page_token = page.next_page_token;
    }
}

/// `GET /console/api/matches?queue=&limit=`: the live matches (newest first; on a cluster
/// node, the owner's, by `ListLiveMatches`) and the results applied since the server started
/// (newest first, at most [`super::FEED_CAPACITY`] kept; on a cluster node, the cluster's
/// latest, by `ListRecentResults`).
pub async fn matches(
    Axum(console): Axum<Arc<Console>>,
    uri: Uri,
    headers: HeaderMap,
    Query(q): Query<ListQuery>,
) -> Answer {
    let caller = gate(&console, &uri, &headers).await?;
    let limit = q.limit(50);
    let live = match caller.backend.state() {
        Some(state) => {
            let (total, live) = state.live_matches(q.queue(), limit);
            json!({
                "total": total,
                "matches": live.iter().map(|m| live_match(m)).collect::<Vec<_>>(),
            })
        }
        // A cluster node holds no matches: the owner lists its own.
        None => {
            let page: proto::ListLiveMatchesResponse = caller
                .call(
                    "/matchmaker.v1.AdminService/ListLiveMatches",
                    proto::ListLiveMatchesRequest {
                        queue: q.queue().unwrap_or_default().to_string(),
                        limit: u32::try_from(limit).unwrap_or(u32::MAX),
                    },
                )
                .await?;
            json!({
                "total": page.total,
                "matches": page.matches.iter().map(match_record).collect::<Vec<_>>(),
            })
        }
    };
    if caller.backend.state().is_none() {
        let page: proto::ListRecentResultsResponse = caller
            .call(
                "/matchmaker.v1.AdminService/ListRecentResults",
                proto::ListRecentResultsRequest {
                    queue: q.queue().unwrap_or_default().to_string(),
                    limit: u32::try_from(limit).unwrap_or(u32::MAX),
                },
            )
            .await?;
        let recent: Vec<Value> = page
            .matches
            .iter()
            .map(|r| {
                let mut entry = match_record(r);
                entry["applied_unix"] = json!(r.ended_unix);
                entry
            })
            .collect();
        return Ok(Json(json!({
            "live": live,
            "recent": recent,
            "recent_kept": recent.len(),
            "recent_from": "cluster",
        })));
    }
    let feed = console.feed();
    let recent = feed.recent(q.queue(), limit);
    Ok(Json(json!({
        "live": live,
        "recent": recent,
        "recent_kept": feed.len(),
        "recent_from": "server",
    })))
}

/// `GET /console/api/matches/{id}`: `GetMatch`, with `PredictMatch`'s prediction for its
/// teams now, the win probabilities it was formed with (the record's, or for a record written
/// before it kept them, this server's memory) and, for a live match on a single server, what
/// the state holds of it (quality, region, leavers).
pub async fn one_match(
    Axum(console): Axum<Arc<Console>>,
    uri: Uri,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Answer {
    let caller = gate(&console, &uri, &headers).await?;
    let record: proto::MatchRecord = caller
        .call(
            "/matchmaker.v1.ClientService/GetMatch",
            proto::GetMatchRequest {
                match_id: id.clone(),
            },
        )
        .await?;
    let live = caller.backend.state().and_then(|state| {
        state
            .match_slot(&crate::ids::MatchId::new(id.as_str()))
            .ok()
    });
    let at_formation = match &live {
        Some(slot) => Some(slot.assignment().win_probability.clone()),
        None if !record.win_probability.is_empty() => Some(record.win_probability.clone()),
        None => console.feed().get(&id).map(|e| e.win_probability.clone()),
    };
    // A prediction is an extra: a queue no longer configured, or a player erased since, leaves
    // it out rather than the match.
    let prediction: Option<proto::Prediction> = caller
        .call(
            "/matchmaker.v1.ClientService/PredictMatch",
            proto::PredictMatchRequest {
                queue: record.queue.clone(),
                teams: record.teams.clone(),
            },
        )
        .await
        .ok();
    Ok(Json(json!({
        "match": match_record(&record),
        "live": live.as_deref().map(live_match),
        "win_probability_at_formation": at_formation,
        "prediction_now": prediction.map(|p| json!({
            "win_probability": p.win_probability,
            "draw_probability": p.draw_probability,
        })),
    })))
}

/// `GET /console/api/players/{id}?queue=`: `GetPlayer` in each queue (or the one named), the
/// player's match records (`ListPlayerMatches`) with the rating and rank points after each,
/// and their ban (`GetPlayerBan`).
pub async fn player(
    Axum(console): Axum<Arc<Console>>,
    uri: Uri,
    headers: HeaderMap,
    Path(id): Path<String>,
    Query(q): Query<ListQuery>,
) -> Answer {
    let caller = gate(&console, &uri, &headers).await?;
    let names: Vec<String> = match q.queue() {
        Some(name) => vec![name.to_owned()],
        None => caller
            .backend
            .queues()
            .into_iter()
            .map(|i| i.id.to_string())
            .collect(),
    };
    let records = player_matches(&caller, &id).await?;
    let mut views = Vec::new();
    for queue in names {
        let view: proto::PlayerView = caller
            .call(
                "/matchmaker.v1.ClientService/GetPlayer",
                proto::GetPlayerRequest {
                    player_id: id.clone(),
                    queue: queue.clone(),
                },
            )
            .await?;
        let points = rating_points(&records, &id, &queue);
        views.push(json!({ "view": player_view(&view), "points": points }));
    }
    let ban: proto::GetPlayerBanResponse = caller
        .call(
            "/matchmaker.v1.AdminService/GetPlayerBan",
            proto::GetPlayerBanRequest {
                player_id: id.clone(),
            },
        )
        .await?;
    let recent: Vec<Value> = records
        .iter()
        .filter(|r| q.queue().is_none_or(|queue| r.queue == queue))
        .map(match_record)
        .collect();
    Ok(Json(json!({
        "player_id": id,
        "queues": views,
        "recent": recent,
        "ban": ban.ban.map(|b| json!({
            "until_unix": b.until_unix,
            "reason": b.reason,
            "since_unix": b.since_unix,
            "active": b.active,
        })),
    })))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rating(display: f64) -> Option<proto::Rating> {
        Some(proto::Rating {
            display,
            ..Default::default()
        })
    }

    fn completed(
        id: &str,
        queue: &str,
        ended: i64,
        changes: &[(&str, f64, f64)],
    ) -> proto::MatchRecord {
        proto::MatchRecord {
            match_id: id.into(),
            queue: queue.into(),
            phase: proto::MatchPhase::Completed as i32,
            win_probability: vec![0.5; changes.len()],
            teams: changes
                .iter()
                .map(|c| proto::Team {
                    player_ids: vec![c.0.to_string()],
                })
                .collect(),
            placements: (1..=changes.len() as u32).collect(),
            changes: changes
                .iter()
                .map(|&(p, before, after)| proto::PlayerChange {
                    player_id: p.into(),
                    before: rating(before),
                    after: rating(after),
                    rank_points_before: before as i64 / 10,
                    rank_points_after: after as i64 / 10,
                })
                .collect(),
            server_address: "gs:1".into(),
            formed_unix: ended - 30,
            started_unix: ended - 25,
            ended_unix: ended,
        }
    }

    #[test]
    fn the_chart_starts_before_the_oldest_match_and_follows_each_completed_one() {
        // Newest first, as ListPlayerMatches answers.
        let mut cancelled = completed("m4", "1v1", 400, &[]);
        cancelled.phase = proto::MatchPhase::Cancelled as i32;
        let records = vec![
            cancelled,
            completed("m3", "1v1", 300, &[("a", 1510.0, 1525.0)]),
            completed("m2", "2v2", 200, &[("a", 1500.0, 1400.0)]),
            completed(
                "m1",
                "1v1",
                100,
                &[("a", 1500.0, 1510.0), ("b", 1500.0, 1490.0)],
            ),
        ];
        let p = rating_points(&records, "a", "1v1");
        let ratings: Vec<f64> = p.iter().map(|p| p.rating).collect();
        assert_eq!(ratings, [1500.0, 1510.0, 1525.0]);
        let times: Vec<f64> = p.iter().map(|p| p.t).collect();
        assert_eq!(times, [70.0, 100.0, 300.0], "formed, then each end");
        assert_eq!(p[2].rank_points, 152);
        assert_eq!(rating_points(&records, "a", "2v2").len(), 2);
        assert!(rating_points(&records, "nobody", "1v1").is_empty());
    }

    #[test]
    fn a_record_reads_as_the_page_shows_it() {
        let mut r = completed("m1", "1v1", 100, &[("a", 1500.0, 1510.0)]);
        r.started_unix = 0;
        let v = match_record(&r);
        assert_eq!(v["phase"], "completed");
        assert_eq!(v["teams"], json!([["a"]]));
        assert_eq!(v["started_unix"], Value::Null, "did not happen");
        assert_eq!(v["ended_unix"], 100);
        assert_eq!(v["changes"][0]["rating_after"], 1510.0);
        assert_eq!(phase_name(99), "unknown");
    }
}

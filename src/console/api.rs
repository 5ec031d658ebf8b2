//! The console's JSON API. Each handler checks the caller ([`gate`]), then either makes one
//! or more calls of the server's own gRPC stack in process (carrying the page's
//! `authorization` header, so the auth layer checks it again exactly as for the admin CLI) or
//! reads what no RPC answers yet (chart history). The matches and players
//! endpoints are in `records.rs`. Handlers only translate: no rule lives here.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Json;
use axum::extract::{Query, State as Axum};
use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};
use tonic::Code;

use super::{Backend, Console};
use crate::proto;
use crate::ranking::RankingKind;

/// The header every API call must carry. A cross-site page cannot send it without a CORS
/// preflight, which this listener never grants, so another site open in the operator's browser
/// cannot make the console act (with auth off there is no token to stop it).
pub const CONSOLE_HEADER: &str = "x-matchmaker-console";

/// Most rows one page of a list may ask for.
const MAX_LIMIT: usize = 500;

/// An answer that is not 200: a status and a message the page shows.
pub struct ApiError(pub(super) StatusCode, pub(super) String);

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.0, Json(json!({ "error": self.1 }))).into_response()
    }
}

impl From<tonic::Status> for ApiError {
    fn from(s: tonic::Status) -> Self {
        let code = match s.code() {
            Code::Unauthenticated => StatusCode::UNAUTHORIZED,
            Code::PermissionDenied => StatusCode::FORBIDDEN,
            Code::InvalidArgument | Code::OutOfRange => StatusCode::BAD_REQUEST,
            Code::NotFound => StatusCode::NOT_FOUND,
            Code::AlreadyExists | Code::FailedPrecondition | Code::Aborted => StatusCode::CONFLICT,
            Code::ResourceExhausted => StatusCode::TOO_MANY_REQUESTS,
            Code::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            Code::DeadlineExceeded => StatusCode::GATEWAY_TIMEOUT,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        Self(code, format!("{:?}: {}", s.code(), s.message()))
    }
}

pub(super) type Answer = Result<Json<Value>, ApiError>;

/// An admitted call: the server to ask and the credentials to ask with.
pub(super) struct Caller {
    pub(super) backend: Backend,
    authorization: Option<HeaderValue>,
}

impl Caller {
    /// One unary call of the server's gRPC stack, in process: `path` is the method's gRPC path
    /// (`/matchmaker.v1.AdminService/SeasonReset`), the request carries the page's credentials.
    /// The answer is what a remote client would get: the message, or the status.
    pub(super) async fn call<Req, Resp>(
        &self,
        path: &'static str,
        message: Req,
    ) -> Result<Resp, tonic::Status>
    where
        Req: prost::Message,
        Resp: prost::Message + Default,
    {
        use http_body_util::BodyExt;
        use tower::ServiceExt;
        let encoded = message.encode_to_vec();
        let length = u32::try_from(encoded.len())
            .map_err(|_| tonic::Status::resource_exhausted("request too large"))?;
        let mut frame = Vec::with_capacity(5 + encoded.len());
        frame.push(0);
        frame.extend_from_slice(&length.to_be_bytes());
        frame.extend_from_slice(&encoded);
        let mut request = axum::http::Request::builder()
            .method("POST")
            .uri(path)
            .header(header::CONTENT_TYPE, "application/grpc")
            .header(header::TE, "trailers");
        if let Some(value) = &self.authorization {
            request = request.header(header::AUTHORIZATION, value.clone());
        }
        let request = request
            .body(tonic::body::Body::new(http_body_util::Full::new(
                bytes::Bytes::from(frame),
            )))
            .map_err(|e| tonic::Status::internal(e.to_string()))?;
        let response = self
            .backend
            .grpc
            .clone()
            .oneshot(request)
            .await
            .map_err(|e| tonic::Status::unavailable(e.to_string()))?;
        let (parts, body) = response.into_parts();
        // Trailers-only: the status is in the headers.
        if let Some(status) = tonic::Status::from_header_map(&parts.headers)
            && status.code() != Code::Ok
        {
            return Err(status);
        }
        let collected = body.collect().await?;
        if let Some(status) = collected
            .trailers()
            .and_then(tonic::Status::from_header_map)
            && status.code() != Code::Ok
        {
            return Err(status);
        }
        let bytes = collected.to_bytes();
        let body = bytes
            .get(5..)
            .filter(|_| bytes[0] == 0)
            .ok_or_else(|| tonic::Status::internal("malformed gRPC answer"))?;
        Resp::decode(body).map_err(|e| tonic::Status::internal(e.to_string()))
    }
}

/// Admits a call to the API: the console header, a loopback `Host` when auth is off (so a DNS
/// name rebound to 127.0.0.1 cannot reach it), and the admin role by the same verifier and rule
/// as every RPC (`auth::authorize`, `auth::CONSOLE_API`).
pub(super) async fn gate(
    console: &Console,
    uri: &Uri,
    headers: &HeaderMap,
) -> Result<Caller, ApiError> {
    if !headers.contains_key(CONSOLE_HEADER) {
        return Err(ApiError(
            StatusCode::FORBIDDEN,
            format!("console API calls carry the {CONSOLE_HEADER} header"),
        ));
    }
    if !console.auth_enabled && !loopback_host(headers) {
        return Err(ApiError(
            StatusCode::FORBIDDEN,
            "with auth off the console answers only on a loopback host name or an IP address"
                .into(),
        ));
    }
    let verifier = console.verifier.as_deref();
    let mut authorized = crate::auth::authorize(verifier, uri.path(), headers);
    if let (Err(crate::auth::AuthError::UnknownKey(_)), Some(v)) = (&authorized, verifier)
        && v.fetches_keys()
    {
        // A key the sets do not hold yet: the provider may have rotated its keys (as for RPCs).
        // Told to retry or not, the unknown key is refused as such here.
        let _ = v.refresh_for_unknown_key().await;
        authorized = crate::auth::authorize(verifier, uri.path(), headers);
    }
    authorized.map_err(|e| {
        let status = match e {
            crate::auth::AuthError::Denied(_) => StatusCode::FORBIDDEN,
            _ => StatusCode::UNAUTHORIZED,
        };
        ApiError(status, e.to_string())
    })?;
    let backend = console.backend().ok_or_else(|| {
        ApiError(
            StatusCode::SERVICE_UNAVAILABLE,
            "the server is still starting".into(),
        )
    })?;
    Ok(Caller {
        backend,
        authorization: headers.get(header::AUTHORIZATION).cloned(),
    })
}

/// `localhost` or an IP literal, with or without a port.
fn loopback_host(headers: &HeaderMap) -> bool {
    let Some(host) = headers.get(header::HOST).and_then(|h| h.to_str().ok()) else {
        return false;
    };
    let name = match host.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(""),
        None => host.rsplit_once(':').map_or(host, |(name, _)| name),
    };
    name.eq_ignore_ascii_case("localhost") || name.parse::<std::net::IpAddr>().is_ok()
}

/// `GET /console/api/session`: whether the page must ask for a token. Open: it tells nothing
/// about the server's data.
pub async fn session(Axum(console): Axum<Arc<Console>>) -> Json<Value> {
    Json(json!({
        "auth": console.auth_enabled,
        "version": env!("CARGO_PKG_VERSION"),
        "git_sha": env!("MATCHMAKER_GIT_SHA"),
        "sample_seconds": console.config.sample_seconds,
        "history_seconds": super::HISTORY_SECONDS,
        // A cluster node's console: no live matches or results feed.
        "cluster_node": console.backend().is_some_and(|b| b.state().is_none()),
    }))
}

#[derive(Deserialize)]
pub struct After {
    /// The `at` of the newest sample the page holds; none: the whole hour.
    #[serde(default = "whole_hour")]
    after: f64,
}

fn whole_hour() -> f64 {
    f64::NEG_INFINITY
}

/// `GET /console/api/queues?after=AT`: `GetQueueStats` now, each queue's settings, and its
/// chart samples taken after `AT` on the console's monotonic clock (`at`; absent: the whole
/// hour). The answer gives the wall clock's `now` and the monotonic clock's `now_at`, so a page
/// places each sample `now_at - at` seconds before `now` whatever the wall clock did meanwhile;
/// `now_at` below the page's `after` means the server restarted (its clock began again).
pub async fn queues(
    Axum(console): Axum<Arc<Console>>,
    uri: Uri,
    headers: HeaderMap,
    Query(q): Query<After>,
) -> Answer {
    let caller = gate(&console, &uri, &headers).await?;
    let stats: proto::QueueStats = caller
        .call(
            "/matchmaker.v1.AdminService/GetQueueStats",
            proto::GetQueueStatsRequest::default(),
        )
        .await?;
    let queues = caller.backend.queues();
    let mut history = console.history();
    if caller.backend.state().is_none() {
        // A cluster node has no matchmaker loop to sample: the page's asking does.
        let (at, now) = (console.clock(), crate::state::unix_now());
        for s in &stats.queues {
            let every = console.config.sample_seconds;
            history.record_due(&s.queue, at, now, every, &reading(s));
        }
    }
    let queues: Vec<Value> = stats
        .queues
        .iter()
        .map(|s| {
            let info = queues.iter().find(|i| i.id.as_str() == s.queue);
            json!({
                "queue": s.queue,
                "settings": info.map(|i| json!({
                    "pool": i.pool,
                    "teams": i.config.teams,
                    "team_size": i.config.team_size,
                    "rating": i.config.rating.name(),
                    "ranking": i.config.ranking,
                    "ready_check_seconds": i.config.ready_check_seconds,
                    "max_wait_seconds": i.config.matching.max_wait_seconds,
                })),
                "stats": queue_stat(s),
                "history": history.after(&s.queue, q.after),
            })
        })
        .collect();
    Ok(Json(json!({
        "now": crate::state::unix_now(),
        "now_at": console.clock(),
        "queues": queues,
    })))
}

/// The chart numbers of a `QueueStat`.
fn reading(s: &proto::QueueStat) -> super::history::Reading {
    super::history::Reading {
        tickets_waiting: s.tickets_waiting,
        matches_formed: s.matches_formed,
        wait_p50_seconds: s.wait_p50_seconds,
        wait_p95_seconds: s.wait_p95_seconds,
        quality_mean: s.quality_mean,
        skill_window: s.skill_window,
        starving: s.starving,
        accept_rate: s.accept_rate,
        backfill_fill_p50_seconds: s.backfill_fill_p50_seconds,
    }
}

/// Every field of `QueueStat`, by its proto name.
fn queue_stat(s: &proto::QueueStat) -> Value {
    json!({
        "tickets_waiting": s.tickets_waiting,
        "players_waiting": s.players_waiting,
        "matches_formed": s.matches_formed,
        "wait_p50_seconds": s.wait_p50_seconds,
        "wait_p95_seconds": s.wait_p95_seconds,
        "quality_mean": s.quality_mean,
        "last_tick_ms": s.last_tick_ms,
        "tickets_expired": s.tickets_expired,
        "tickets_expired_heartbeat": s.tickets_expired_heartbeat,
        "ready_checks": s.ready_checks,
        "ready_checks_passed": s.ready_checks_passed,
        "ready_checks_declined": s.ready_checks_declined,
        "ready_checks_timed_out": s.ready_checks_timed_out,
        "accept_rate": s.accept_rate,
        "backfill_requests": s.backfill_requests,
        "backfill_slots_opened": s.backfill_slots_opened,
        "backfill_slots_filled": s.backfill_slots_filled,
        "backfill_requests_expired": s.backfill_requests_expired,
        "backfill_fill_p50_seconds": s.backfill_fill_p50_seconds,
        "backfill_fill_p95_seconds": s.backfill_fill_p95_seconds,
        "longest_wait_seconds": s.longest_wait_seconds,
        "skill_window": s.skill_window,
        "starving": s.starving,
        "waiting_by_value": s.waiting_by_value.iter().map(|w| json!({
            "attribute": w.attribute, "value": w.value, "tickets": w.tickets,
        })).collect::<Vec<_>>(),
    })
}

#[derive(Deserialize)]
pub struct ListQuery {
    #[serde(default)]
    pub(super) queue: String,
    #[serde(default)]
    limit: Option<usize>,
    #[serde(default)]
    offset: Option<usize>,
}

impl ListQuery {
    pub(super) fn queue(&self) -> Option<&str> {
        (!self.queue.is_empty()).then_some(self.queue.as_str())
    }

    pub(super) fn limit(&self, default: usize) -> usize {
        self.limit.unwrap_or(default).clamp(1, MAX_LIMIT)
    }
}

/// A `PlayerView` as JSON.
pub(super) fn player_view(v: &proto::PlayerView) -> Value {
    json!({
        "player_id": v.player_id,
        "queue": v.queue,
        "rating": v.rating.as_ref().map(|r| json!({
            "mean": r.mean, "deviation": r.deviation, "volatility": r.volatility,
            "display": r.display, "display_low": r.display_low, "display_high": r.display_high,
        })),
        "rank_points": v.rank_points,
        "tier": v.tier,
        "games": v.games,
        "wins": v.wins,
        "status": v.status,
        "season": v.season,
        "week": v.week,
        "week_history": v.week_history.iter().map(|w| json!({
            "season": w.season, "week": w.week, "rank_points": w.rank_points,
        })).collect::<Vec<_>>(),
        "season_history": v.season_history.iter().map(|s| json!({
            "season": s.season, "tier": s.tier, "rank_points": s.rank_points,
            "mean_week_rank_points": s.mean_week_rank_points, "place": s.place,
        })).collect::<Vec<_>>(),
    })
}

/// `GET /console/api/leaderboard?queue=&offset=&limit=`: `GetLeaderboard`, with the ladder's
/// tiers when the queue has one.
pub async fn leaderboard(
    Axum(console): Axum<Arc<Console>>,
    uri: Uri,
    headers: HeaderMap,
    Query(q): Query<ListQuery>,
) -> Answer {
    let caller = gate(&console, &uri, &headers).await?;
    let board: proto::Leaderboard = caller
        .call(
            "/matchmaker.v1.ClientService/GetLeaderboard",
            proto::GetLeaderboardRequest {
                queue: q.queue.clone(),
                offset: u32::try_from(q.offset.unwrap_or(0)).unwrap_or(u32::MAX),
                limit: u32::try_from(q.limit(50)).unwrap_or(50),
            },
        )
        .await?;
    let ladder = caller
        .backend
        .queues()
        .into_iter()
        .find(|i| i.id.as_str() == q.queue)
        .is_some_and(|i| i.config.ranking == RankingKind::Ladder);
    let tiers: Vec<Value> = if ladder {
        caller
            .backend
            .config()
            .ranking
            .ladder
            .tiers
            .iter()
            .map(|t| json!({ "name": t.name, "min_rp": t.min_rp, "top_n": t.top_n }))
            .collect()
    } else {
        Vec::new()
    };
    Ok(Json(json!({
        "queue": q.queue,
        "total": board.total,
        "entries": board.entries.iter().map(player_view).collect::<Vec<_>>(),
        "tiers": tiers,
    })))
}

/// `GET /console/api/seasons`: each ranked rating pool's queues and season clock (from
/// `GetQueueStats`, so a cluster node shows the owner's clock).
pub async fn seasons(Axum(console): Axum<Arc<Console>>, uri: Uri, headers: HeaderMap) -> Answer {
    let caller = gate(&console, &uri, &headers).await?;
    let stats: proto::QueueStats = caller
        .call(
            "/matchmaker.v1.AdminService/GetQueueStats",
            proto::GetQueueStatsRequest::default(),
        )
        .await?;
    let mut pools: BTreeMap<String, (Vec<String>, RankingKind)> = BTreeMap::new();
    for info in caller.backend.queues() {
        if info.config.ranking != RankingKind::None {
            let entry = pools
                .entry(info.pool.clone())
                .or_insert_with(|| (Vec::new(), info.config.ranking));
            entry.0.push(info.id.to_string());
        }
    }
    let mut out = Vec::new();
    for (pool, (queues, ranking)) in pools {
        let clock = stats
            .queues
            .iter()
            .find(|s| queues.contains(&s.queue) && s.season > 0);
        out.push(json!({
            "pool": pool,
            "queues": queues,
            "ranking": ranking,
            "season": clock.map(|c| c.season),
            "week": clock.map(|c| c.week),
        }));
    }
    Ok(Json(json!({ "pools": out })))
}

#[derive(Deserialize)]
pub struct ResetBody {
    kind: String,
    #[serde(default)]
    queue: String,
    #[serde(default)]
    dry_run: bool,
}

/// `POST /console/api/seasons/reset {kind: "soft"|"hard", queue, dry_run}`: `SeasonReset`.
pub async fn season_reset(
    Axum(console): Axum<Arc<Console>>,
    uri: Uri,
    headers: HeaderMap,
    Json(body): Json<ResetBody>,
) -> Answer {
    let caller = gate(&console, &uri, &headers).await?;
    let kind = match body.kind.as_str() {
        "soft" => proto::SeasonResetKind::Soft,
        "hard" => proto::SeasonResetKind::Hard,
        other => {
            return Err(ApiError(
                StatusCode::BAD_REQUEST,
                format!("kind must be \"soft\" or \"hard\" (got {other:?})"),
            ));
        }
    };
    let r: proto::SeasonResetResponse = caller
        .call(
            "/matchmaker.v1.AdminService/SeasonReset",
            proto::SeasonResetRequest {
                kind: kind as i32,
                queue: body.queue,
                dry_run: body.dry_run,
            },
        )
        .await?;
    Ok(Json(json!({
        "kind": body.kind,
        "dry_run": r.dry_run,
        "season": r.season,
        "week": r.week,
        "players_changed": r.players_changed,
        "pools": r.pools.iter().map(|p| json!({
            "pool": p.pool, "season_before": p.season_before, "week_before": p.week_before,
            "season": p.season, "week": p.week, "players": p.players,
        })).collect::<Vec<_>>(),
        "tiers": r.tiers.iter().map(|t| json!({
            "pool": t.pool, "tier": t.tier, "before": t.before, "after": t.after,
        })).collect::<Vec<_>>(),
    })))
}

#[derive(Deserialize)]
pub struct EndBody {
    #[serde(default)]
    queue: String,
}

/// `POST /console/api/seasons/end {queue}`: `EndSeason`.
pub async fn end_season(
    Axum(console): Axum<Arc<Console>>,
    uri: Uri,
    headers: HeaderMap,
    Json(body): Json<EndBody>,
) -> Answer {
    let caller = gate(&console, &uri, &headers).await?;
    let r: proto::EndSeasonResponse = caller
        .call(
            "/matchmaker.v1.AdminService/EndSeason",
            proto::EndSeasonRequest { queue: body.queue },
        )
        .await?;
    Ok(Json(
        json!({ "season": r.season, "players_ranked": r.players_ranked }),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(h: &str) -> HeaderMap {
        let mut m = HeaderMap::new();
        m.insert(header::HOST, HeaderValue::from_str(h).unwrap());
        m
    }

    #[test]
    fn loopback_hosts_are_names_of_this_machine_or_ip_literals() {
        for ok in [
            "localhost",
            "localhost:9090",
            "127.0.0.1:9090",
            "[::1]:9090",
            "[::1]",
            "10.0.0.5:9090",
        ] {
            assert!(loopback_host(&host(ok)), "{ok}");
        }
        for bad in [
            "evil.example:9090",
            "evil.example",
            "localhost.evil.example",
        ] {
            assert!(!loopback_host(&host(bad)), "{bad}");
        }
        assert!(!loopback_host(&HeaderMap::new()));
    }

    #[test]
    fn statuses_map_to_http() {
        let e = ApiError::from(tonic::Status::unauthenticated("no token"));
        assert_eq!(e.0, StatusCode::UNAUTHORIZED);
        let e = ApiError::from(tonic::Status::invalid_argument("kind"));
        assert_eq!(e.0, StatusCode::BAD_REQUEST);
    }
}

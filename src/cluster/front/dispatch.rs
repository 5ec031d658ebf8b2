//! The node's service when the queues are split over shards: each call goes to the front of
//! the shard that serves it ([`crate::cluster::shards`]), which forwards it to that shard's
//! owner as a front always does. Calls about no one queue are asked of every shard and their
//! answers merged ([`super::fanout`]); a game server's `ServeMatches` is opened on every shard
//! and their streams merged ([`super::serve`]). With one shard every call goes to its front as
//! it comes.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tonic::body::Body;
use tonic::codegen::http;
use tower::Service;

use bytes::Bytes;
use prost::Message;

use super::deadline::{budget, caller_timeout};
use super::fanout::{answer, ask, ask_all, ask_each, frame, refuse};
use super::{API, FORWARDED, Front, SHARD, collect, link, status};
use super::{events, serve};
use crate::cluster::merge;
use crate::cluster::pages::{self, AuditCursor, AuditPage, MatchesCursor};
use crate::cluster::shards::{Destination, Shards};
use crate::proto;

/// Hands each call to its shard's [`Front`].
#[derive(Clone)]
pub struct Dispatch {
    inner: Arc<Inner>,
}

struct Inner {
    /// By shard, the home shard's first.
    fronts: Vec<Front>,
    shards: Shards,
    /// `[history] matches_per_player`: how many matches a listing of a player's every queue
    /// gives in all.
    history: u32,
    max_body: usize,
    request_timeout: Duration,
    long_timeout: Duration,
    /// Calls whose request message is being read to find their shard
    /// (`server.max_concurrent_requests`), each holding up to `max_body`.
    reading: Arc<tokio::sync::Semaphore>,
}

impl Dispatch {
    /// `fronts` by shard, in the order of [`Shards::new`] over `config`.
    pub fn new(fronts: Vec<Front>, config: &crate::config::Config) -> Self {
        Self {
            inner: Arc::new(Inner {
                fronts,
                shards: Shards::new(config),
                history: config.history.matches_per_player,
                max_body: config.server.max_message_bytes,
                request_timeout: Duration::from_millis(config.server.request_timeout_ms),
                long_timeout: Duration::from_millis(config.server.admin_request_timeout_ms),
                reading: Arc::new(tokio::sync::Semaphore::new(
                    config.server.max_concurrent_requests.max(1),
                )),
            }),
        }
    }
}

impl Inner {
    /// The shard a call names in its [`SHARD`] header: a node's link or forwarded stream (a
    /// client's call is routed by what it asks, whatever headers it sends).
    fn named(&self, request: &http::Request<axum::body::Body>) -> Option<usize> {
        let headers = request.headers();
        if request.uri().path() != link::PATH && !headers.contains_key(FORWARDED) {
            return None;
        }
        let shard = headers.get(SHARD)?.to_str().ok()?;
        self.shards.by_keyspace(shard)
    }

    /// Reads the call's request message, then hands the call to the front of the shard it
    /// names.
    async fn route(
        self: Arc<Self>,
        request: http::Request<axum::body::Body>,
    ) -> http::Response<Body> {
        let Ok(_place) = self.reading.clone().try_acquire_owned() else {
            metrics::counter!(crate::telemetry::REQUESTS_SHED).increment(1);
            return status(
                tonic::Code::ResourceExhausted,
                "this node holds server.max_concurrent_requests calls; retry with backoff",
                false,
            );
        };
        let limit = crate::api::layers::server_limit(
            request.uri().path(),
            self.request_timeout,
            self.long_timeout,
        );
        let deadline =
            tokio::time::Instant::now() + budget(caller_timeout(request.headers()), limit);
        let (parts, body) = request.into_parts();
        let bytes = match tokio::time::timeout_at(deadline, collect(Body::new(body), self.max_body))
            .await
        {
            Ok(Ok(b)) => b,
            Ok(Err(message)) => return status(tonic::Code::ResourceExhausted, &message, false),
            Err(_) => {
                return status(
                    tonic::Code::DeadlineExceeded,
                    "the request message did not arrive within the call's deadline",
                    false,
                );
            }
        };
        let shard = match self.shards.destination(parts.uri.path(), &bytes) {
            Destination::Shard(shard) => shard,
            Destination::Every => match self.every(&parts, &bytes).await {
                Some(answer) => return answer,
                // Not merged (yet): the home shard's.
                None => 0,
            },
        };
        let request = http::Request::from_parts(parts, axum::body::Body::from(bytes));
        let mut front = self.fronts[shard].clone();
        match front.call(request).await {
            Ok(response) => response,
            Err(never) => match never {},
        }
    }
}

impl Inner {
    /// Asks every shard and merges their answers, for the calls whose merge is defined;
    /// `None` for the others.
    async fn every(
        &self,
        parts: &http::request::Parts,
        bytes: &Bytes,
    ) -> Option<http::Response<Body>> {
        let method = parts.uri.path().strip_prefix(API)?;
        let fronts = &self.fronts;
        macro_rules! merged {
            ($answer:ty, $merge:expr) => {
                Some(match ask_all::<$answer>(fronts, parts, bytes).await {
                    Ok(answers) => answer(&$merge(answers)),
                    Err(status) => refuse(status),
                })
            };
        }
        let limit = |decoded: Option<u32>| decoded.unwrap_or(0);
        let message = bytes.get(5..).unwrap_or_default();
        match method {
            "AdminService/GetQueueStats" => merged!(proto::QueueStats, merge::queue_stats),
            "AdminService/Snapshot" => merged!(proto::SnapshotResponse, merge::snapshot),
            "AdminService/ReloadConfig" => merged!(proto::ReloadConfigResponse, merge::reload),
            "AdminService/SeasonReset" => {
                merged!(proto::SeasonResetResponse, merge::season_reset)
            }
            "AdminService/EndSeason" => merged!(proto::EndSeasonResponse, merge::end_season),
            "AdminService/DeletePlayer" => {
                merged!(proto::DeletePlayerResponse, merge::delete_player)
            }
            "AdminService/BanPlayer" => merged!(proto::BanPlayerResponse, merge::ban),
            "AdminService/UnbanPlayer" => merged!(proto::UnbanPlayerResponse, merge::unban),
            "AdminService/ListLiveMatches" => {
                let limit = limit(
                    proto::ListLiveMatchesRequest::decode(message)
                        .ok()
                        .map(|r| r.limit),
                );
                merged!(proto::ListLiveMatchesResponse, |a| merge::live_matches(
                    a, limit
                ))
            }
            "AdminService/ListRecentResults" => {
                let limit = limit(
                    proto::ListRecentResultsRequest::decode(message)
                        .ok()
                        .map(|r| r.limit),
                );
                merged!(proto::ListRecentResultsResponse, |a| merge::recent_results(
                    a, limit
                ))
            }
            "ClientService/GetActiveTicket" => Some(self.active_ticket(parts, bytes).await),
            "GameServerService/ServeMatches" => serve::serve(fronts, parts, message).await,
            "AdminService/WatchEvents" => events::watch(fronts, &self.shards, parts, message).await,
            "ClientService/ListPlayerMatches" => self.player_matches(parts, message).await,
            "AdminService/ListAuditLog" => self.audit_log(parts, message).await,
            _ => None,
        }
    }

    /// `GetActiveTicket`: the one shard that has the player's ticket answers; NOT_FOUND when
    /// none has.
    async fn active_ticket(
        &self,
        parts: &http::request::Parts,
        bytes: &Bytes,
    ) -> http::Response<Body> {
        let mut not_found = None;
        for front in &self.fronts {
            match ask::<proto::TicketUpdate>(front, parts, bytes).await {
                Ok(ticket) => return answer(&ticket),
                Err(status) if status.code() == tonic::Code::NotFound => {
                    not_found.get_or_insert(status);
                }
                Err(status) => return refuse(status),
            }
        }
        refuse(not_found.unwrap_or_else(|| tonic::Status::not_found("no active ticket")))
    }
}

impl Inner {
    /// `ListPlayerMatches` of every queue: each shard is asked for a page after where the
    /// listing stands in its list, and the pages merged ([`pages::merge_matches`]). `None`
    /// when the request does not decode (the home shard refuses it as one node does).
    async fn player_matches(
        &self,
        parts: &http::request::Parts,
        message: &[u8],
    ) -> Option<http::Response<Body>> {
        let request = proto::ListPlayerMatchesRequest::decode(message).ok()?;
        let shard_of = |id: &str| {
            crate::ids::id_tag(id)
                .and_then(|tag| self.shards.by_keyspace(tag))
                .unwrap_or(0)
        };
        let cursor = match MatchesCursor::from_token(
            &request.page_token,
            self.fronts.len(),
            shard_of,
            self.history,
        ) {
            Ok(cursor) => cursor,
            Err(refused) => return Some(refuse(refused.into())),
        };
        let each = (0..self.fronts.len())
            .map(|shard| {
                cursor.shard_token(shard).map(|token| {
                    frame(&proto::ListPlayerMatchesRequest {
                        page_token: token.to_string(),
                        ..request.clone()
                    })
                })
            })
            .collect();
        Some(
            match ask_each::<proto::ListPlayerMatchesResponse>(&self.fronts, parts, each).await {
                Ok(answers) => answer(&pages::merge_matches(
                    &cursor,
                    answers.into_iter().map(|a| a.map(|(_, a)| a)).collect(),
                    request.limit,
                    self.history,
                )),
                Err(status) => refuse(status),
            },
        )
    }

    /// `ListAuditLog`: each shard's log is asked for a page after where the listing stands in
    /// it, and the pages merged ([`pages::merge_audit`]). `None` when the request does not
    /// decode (the home shard refuses it as one node does).
    async fn audit_log(
        &self,
        parts: &http::request::Parts,
        message: &[u8],
    ) -> Option<http::Response<Body>> {
        let request = proto::ListAuditLogRequest::decode(message).ok()?;
        let cursor = match AuditCursor::from_token(&request.page_token, self.fronts.len()) {
            Ok(cursor) => cursor,
            Err(refused) => return Some(refuse(refused.into())),
        };
        let each = cursor
            .after
            .iter()
            .map(|after| {
                Some(frame(&proto::ListAuditLogRequest {
                    page_token: if *after == 0 {
                        String::new()
                    } else {
                        after.to_string()
                    },
                    ..request.clone()
                }))
            })
            .collect();
        let answers = match ask_each::<proto::ListAuditLogResponse>(&self.fronts, parts, each).await
        {
            Ok(answers) => answers,
            Err(status) => return Some(refuse(status)),
        };
        let mut numbered = Vec::with_capacity(answers.len());
        for (headers, answer) in answers.into_iter().flatten() {
            let seqs = if answer.entries.is_empty() {
                Some(Vec::new())
            } else {
                headers
                    .get(crate::api::AUDIT_SEQS)
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| crate::api::parse_audit_seqs(v, answer.entries.len()))
                    .filter(|seqs| seqs.len() == answer.entries.len())
            };
            let Some(seqs) = seqs else {
                return Some(refuse(tonic::Status::internal(
                    "a shard's audit log page did not number its entries",
                )));
            };
            numbered.push(AuditPage { answer, seqs });
        }
        Some(answer(&pages::merge_audit(
            &cursor,
            numbered,
            request.limit,
        )))
    }
}

impl Service<http::Request<axum::body::Body>> for Dispatch {
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<axum::body::Body>) -> Self::Future {
        let inner = self.inner.clone();
        let path = request.uri().path();
        let at_once = if inner.fronts.len() == 1 {
            Some(0)
        } else if let Some(shard) = inner.named(&request) {
            Some(shard)
        } else if path == link::PATH || !path.starts_with(API) {
            // A link naming no shard of these (a node of another config), or another
            // service's call (reflection): the home shard's.
            Some(0)
        } else {
            None
        };
        match at_once {
            Some(shard) => inner.fronts[shard].clone().call(request),
            None => Box::pin(async move { Ok(inner.route(request).await) }),
        }
    }
}

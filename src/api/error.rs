//! The one place domain errors become gRPC statuses.

use tonic::Status;
use tonic::codegen::http;
use tonic_types::{ErrorDetails, StatusExt};

use crate::auth::AuthError;
use crate::ledger::ReportError;
use crate::limits::{MessageTooLarge, RateLimited};
use crate::matchmaker::HandleError;
use crate::rejection::Rejection;
use crate::store::CommitError;
use crate::store::StoreError;

/// The longest message a refusal carries. Refusals quote what the caller sent (an unknown
/// queue, a bad key), which can be as long as a request; past this the message is cut, so the
/// status (sent as a header) stays within what clients and proxies accept.
pub const MAX_STATUS_MESSAGE: usize = 1024;

impl From<Rejection> for Status {
    fn from(r: Rejection) -> Self {
        let message = bounded(r.to_string());
        match r {
            Rejection::Invalid(_) => Status::invalid_argument(message),
            Rejection::NotFound { .. } => Status::not_found(message),
            Rejection::AlreadyQueued { .. }
            | Rejection::BusyElsewhere { .. }
            | Rejection::InMatch { .. }
            | Rejection::Match { .. }
            | Rejection::Ticket { .. }
            | Rejection::Unsupported { .. }
            | Rejection::Rating { .. }
            | Rejection::Party { .. } => Status::failed_precondition(message),
            Rejection::QueueFull { .. } => Status::resource_exhausted(message),
            Rejection::Banned { .. } => Status::permission_denied(message),
        }
    }
}

/// `message` cut to [`MAX_STATUS_MESSAGE`] bytes (at a character boundary), marked as cut.
fn bounded(mut message: String) -> String {
    if message.len() > MAX_STATUS_MESSAGE {
        let mut end = MAX_STATUS_MESSAGE;
        while !message.is_char_boundary(end) {
            end -= 1;
        }
        message.truncate(end);
        message.push_str("… (cut)");
    }
    message
}

impl From<crate::reload::ReloadError> for Status {
    fn from(e: crate::reload::ReloadError) -> Self {
        use crate::reload::ReloadError;
        match e {
            ReloadError::Loop(h) => h.into(),
            ReloadError::Store(s) => store_failure(&s),
            ReloadError::NoFile | ReloadError::Config(_) | ReloadError::Refused(_) => {
                Status::failed_precondition(e.to_string())
            }
        }
    }
}

impl From<AuthError> for Status {
    fn from(e: AuthError) -> Self {
        match e {
            AuthError::Unauthenticated(msg) => Status::unauthenticated(msg),
            AuthError::Denied(msg) => Status::permission_denied(msg),
            AuthError::UnknownKey(_) => Status::unauthenticated(e.to_string()),
        }
    }
}

impl From<HandleError> for Status {
    fn from(e: HandleError) -> Self {
        match e {
            HandleError::Busy => Status::resource_exhausted(e.to_string()),
            HandleError::Closed => Status::unavailable(e.to_string()),
        }
    }
}

impl From<crate::state::EventsTrimmed> for Status {
    fn from(e: crate::state::EventsTrimmed) -> Self {
        Status::out_of_range(e.to_string())
    }
}

impl From<crate::state::WatchError> for Status {
    fn from(e: crate::state::WatchError) -> Self {
        match e {
            crate::state::WatchError::Trimmed(t) => t.into(),
            crate::state::WatchError::Store(s) => store_failure(&s),
        }
    }
}

impl From<StoreError> for Status {
    fn from(e: StoreError) -> Self {
        store_failure(&e)
    }
}

/// Marks an answer or a stream's end from a cluster node whose engine does not (or no longer)
/// serve the queues: the node that forwarded the call sends it on to the next owner.
pub const NOT_OWNER: &str = "x-matchmaker-not-owner";

/// The value of [`NOT_OWNER`] on the answer to a call one of whose writes the fence refused:
/// the call wrote nothing from there on, but may have written before (a large write's first
/// parts, a change whose events were refused), so a call that must not run twice is not sent
/// on. Any other value means the call was not served at all.
pub const NOT_OWNER_FENCED: &str = "fenced";

/// How a cluster engine ends a stream that outlives owners (`WatchTicket`, `ServeMatches`)
/// when it stops: the forwarding node's relay moves the stream to the next owner.
pub(super) fn engine_stopped() -> Status {
    let mut status = Status::unavailable("this node no longer serves the queues; call again");
    status
        .metadata_mut()
        .insert(NOT_OWNER, tonic::metadata::MetadataValue::from_static("1"));
    status
}

/// How an engine whose streams are closed (it or its node is stopping) answers a new stream:
/// on a cluster node as [`engine_stopped`], so the stream goes to the next owner.
pub(super) fn streams_closed(state: &crate::state::State) -> Status {
    if state.is_cluster_engine() {
        engine_stopped()
    } else {
        Status::unavailable("the server is stopping; call again")
    }
}

/// A storage failure: logged and counted here, INTERNAL to the caller. A write the fence
/// refused wrote nothing (another node holds the queues' lease): on a cluster the call is
/// answered as by a stopped engine, so the node that forwarded it sends it to the next owner.
///
/// While the store stays broken every call fails so: one line per few seconds says so, with how
/// many calls failed since the last (`matchmaker_store_errors_total` counts each).
fn store_failure(e: &StoreError) -> Status {
    use crate::telemetry::LogLimit;
    use std::time::{Duration, Instant};
    static FENCED: LogLimit = LogLimit::new(Duration::from_secs(5));
    static FAILED: LogLimit = LogLimit::new(Duration::from_secs(5));
    if matches!(e, StoreError::Fenced) {
        if let Some(calls) = FENCED.note(1, Instant::now()) {
            tracing::warn!(error = %e, calls, "a write was fenced; the call goes to the next owner");
        }
        let mut status = engine_stopped();
        status.metadata_mut().insert(
            NOT_OWNER,
            tonic::metadata::MetadataValue::from_static(NOT_OWNER_FENCED),
        );
        return status;
    }
    if let StoreError::NotYet(why) = e {
        return Status::unavailable(why.clone());
    }
    if let Some(calls) = FAILED.note(1, Instant::now()) {
        tracing::error!(error = %e, calls, "store failure");
    }
    crate::telemetry::store_error("request");
    Status::internal(format!("storage failure: {e}"))
}

impl From<crate::state::PartyError> for Status {
    fn from(e: crate::state::PartyError) -> Self {
        match e {
            crate::state::PartyError::Rejected(r) => r.into(),
            crate::state::PartyError::Store(s) => s.into(),
        }
    }
}

impl From<ReportError> for Status {
    fn from(e: ReportError) -> Self {
        match e {
            ReportError::Rejected(r) => r.into(),
            ReportError::Store(s) => s.into(),
            ReportError::Commit(CommitError::Closed) => {
                Status::unavailable("the result journal is shutting down; retry")
            }
            ReportError::Commit(CommitError::Store(s)) => store_failure(&s),
        }
    }
}

/// RESOURCE_EXHAUSTED with a `google.rpc.RetryInfo` detail: when the caller's bucket holds a
/// request again, so well-behaved clients back off exactly as long as needed.
impl From<RateLimited> for Status {
    fn from(e: RateLimited) -> Self {
        Status::with_error_details(
            tonic::Code::ResourceExhausted,
            e.to_string(),
            ErrorDetails::with_retry_info(Some(e.retry_after)),
        )
    }
}

/// A call's deadline passed before it was answered: the caller's `grpc-timeout`, or the
/// server's `server.request_timeout_ms`, whichever is shorter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("deadline exceeded after {0:?}")]
pub struct DeadlineExceeded(pub std::time::Duration);

impl From<DeadlineExceeded> for Status {
    fn from(e: DeadlineExceeded) -> Self {
        Status::deadline_exceeded(e.to_string())
    }
}

/// RESOURCE_EXHAUSTED, the gRPC convention for a size limit (grpc-go, grpc-java), where tonic's
/// own decoder says OUT_OF_RANGE.
impl From<MessageTooLarge> for Status {
    fn from(e: MessageTooLarge) -> Self {
        Status::resource_exhausted(e.to_string())
    }
}

/// The status of an error a tower layer below the services returned: a call shed by the
/// server-wide limit is RESOURCE_EXHAUSTED naming the limit; anything else as tonic maps it.
pub(super) fn layer_error(e: tower::BoxError) -> Status {
    if e.is::<tower::load_shed::error::Overloaded>() {
        return Status::resource_exhausted(
            "server overloaded: server.max_concurrent_requests calls are in flight; retry with backoff",
        );
    }
    Status::from_error(e)
}

/// A task the handler waited for failed (it panicked): the request's outcome is unknown to it.
pub(super) fn task_failed(e: tokio::task::JoinError) -> Status {
    tracing::error!(error = %e, "request task failed");
    Status::internal(format!("the request's task failed: {e}"))
}

/// A broken invariant the handler can name (a value it just wrote cannot be read back).
pub(super) fn internal(what: &str) -> Status {
    tracing::error!(what, "internal error");
    Status::internal(what.to_string())
}

/// The HTTP response of a request a layer refused.
pub(super) fn refusal<B: Default>(e: impl Into<Status>) -> http::Response<B> {
    e.into().into_http()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_quoting_a_huge_value_is_cut_to_a_bounded_message() {
        let queue = "\u{1}é".repeat(300_000);
        let status = Status::from(Rejection::invalid(
            "queue",
            format!("unknown queue {queue:?}"),
        ));
        assert_eq!(status.code(), tonic::Code::InvalidArgument);
        assert!(
            status.message().starts_with("queue: "),
            "{}",
            &status.message()[..40]
        );
        assert!(status.message().ends_with("… (cut)"));
        assert!(status.message().len() <= MAX_STATUS_MESSAGE + "… (cut)".len());
        // A short one is left as it is.
        let short = Status::from(Rejection::invalid("queue", "unknown queue \"x\""));
        assert_eq!(short.message(), "queue: unknown queue \"x\"");
    }

    #[test]
    fn a_fenced_write_is_answered_as_not_the_owner_so_the_call_goes_to_the_next_one() {
        let direct = Status::from(StoreError::Fenced);
        let result = Status::from(ReportError::Commit(CommitError::Store(
            StoreError::Fenced.into(),
        )));
        for status in [direct, result] {
            assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
            // Marked as fenced: a call sent only once is not sent on.
            assert_eq!(
                status
                    .metadata()
                    .get(NOT_OWNER)
                    .map(|v| v.to_str().unwrap()),
                Some(NOT_OWNER_FENCED),
                "{status:?}"
            );
        }
        assert_ne!(
            engine_stopped().metadata().get(NOT_OWNER).unwrap(),
            NOT_OWNER_FENCED,
            "a stopped engine served nothing"
        );
        // Any other storage failure may have written: INTERNAL, never sent again.
        let failed = Status::from(StoreError::Redis("connection reset".into()));
        assert_eq!(failed.code(), tonic::Code::Internal);
        assert!(!failed.metadata().contains_key(NOT_OWNER));
    }
}

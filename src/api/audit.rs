//! The audit log of the admin service: a tower layer around `AdminService` that writes one
//! durable entry per call (when, who, which method, what it named and how it ended) before the
//! answer leaves. It runs after authentication, so the actor is the verified token's `sub`
//! ("anonymous" with auth off); calls the auth layer refused never reach it.
//!
//! Handlers say what a call named through [`AuditNote`], a slot the layer puts in the request's
//! extensions; the outcome is read from the answer's `grpc-status` header (a unary error or a
//! refused stream), and is `OK` otherwise.
//!
//! Once the store has failed (the result journal refuses everything after a batch it could not
//! write) no entry is written: the write would wait on that store (in cluster mode, as long as a
//! replica is waited for) and hold the answer, which names the failure, until the caller's
//! deadline. A journal stopped by the fence (another node holds the lease) is no store failure:
//! the call is answered as any fenced write is, so it goes to the next owner, which audits it,
//! and nothing is counted in `matchmaker_store_errors_total`.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use tonic::body::Body;
use tonic::codegen::http;
use tonic::server::NamedService;
use tower::{Layer, Service};

use crate::auth::Identity;
use crate::store::write_failures::log_store_write_failure;
use crate::store::{AuditRecord, JournalStopped, Store, StoreError};

/// The actor written when auth is off.
pub const ANONYMOUS: &str = "anonymous";

/// The longest note an audit entry keeps.
pub const MAX_NOTE_BYTES: usize = 512;

/// What the call named, filled in by its handler.
#[derive(Clone, Default)]
pub struct AuditNote(Arc<Mutex<String>>);

impl AuditNote {
    /// Records what the call named (e.g. `player_id="p1"`), cut to [`MAX_NOTE_BYTES`]: a
    /// refused request's oversized field must not become an oversized durable entry.
    pub fn set(&self, detail: impl Into<String>) {
        let mut detail = detail.into();
        if detail.len() > MAX_NOTE_BYTES {
            let mut end = MAX_NOTE_BYTES;
            while !detail.is_char_boundary(end) {
                end -= 1;
            }
            detail.truncate(end);
            detail.push('…');
        }
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = detail;
    }

    fn take(&self) -> String {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

/// Notes what a call named, when it runs behind the audit layer.
pub fn note<T>(request: &tonic::Request<T>, detail: impl Into<String>) {
    if let Some(n) = request.extensions().get::<AuditNote>() {
        n.set(detail);
    }
}

/// The layer.
#[derive(Clone)]
pub struct AuditLayer {
    store: Store,
    journal: JournalStopped,
}

impl AuditLayer {
    /// Entries go to `store`; `journal` says once the store has failed, or was fenced (the
    /// result journal's [`crate::store::Committer::stopped`]).
    pub fn new(store: Store, journal: JournalStopped) -> Self {
        Self { store, journal }
    }
}

impl<S> Layer<S> for AuditLayer {
    type Service = Audited<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Audited {
            inner,
            store: self.store.clone(),
            journal: self.journal.clone(),
        }
    }
}

/// The service [`AuditLayer`] makes.
#[derive(Clone)]
pub struct Audited<S> {
    inner: S,
    store: Store,
    journal: JournalStopped,
}

impl<S: NamedService> NamedService for Audited<S> {
    const NAME: &'static str = S::NAME;
}

/// The entry for one answered call (pure, so it is unit-tested).
pub fn entry(
    unix: f64,
    path: &str,
    identity: Option<&Identity>,
    detail: &str,
    headers: &http::HeaderMap,
) -> AuditRecord {
    let action = path.rsplit('/').next().unwrap_or(path).to_string();
    let code = grpc_code(headers);
    let outcome = if code == 0 {
        "OK".to_string()
    } else {
        let message = headers
            .get("grpc-message")
            .and_then(|v| v.to_str().ok())
            .map(|m| {
                percent_encoding::percent_decode_str(m)
                    .decode_utf8_lossy()
                    .into_owned()
            })
            .unwrap_or_default();
        format!("{:?}: {message}", tonic::Code::from(code))
    };
    AuditRecord {
        unix,
        actor: identity.map_or_else(|| ANONYMOUS.to_string(), |i| i.sub.clone()),
        action,
        detail: if detail.is_empty() {
            outcome
        } else {
            format!("{detail}: {outcome}")
        },
    }
}

/// The answer's gRPC status code: its `grpc-status` header, 0 (OK) without one.
fn grpc_code(headers: &http::HeaderMap) -> i32 {
    headers
        .get("grpc-status")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<i32>().ok())
        .unwrap_or(0)
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S, ReqBody> Service<http::Request<ReqBody>> for Audited<S>
where
    S: Service<http::Request<ReqBody>, Response = http::Response<Body>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    ReqBody: Send + 'static,
{
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: http::Request<ReqBody>) -> Self::Future {
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let store = self.store.clone();
        let journal = self.journal.clone();
        let note = AuditNote::default();
        req.extensions_mut().insert(note.clone());
        let identity = req.extensions().get::<Identity>().cloned();
        let path = req.uri().path().to_string();
        // The call and its entry run on a task of their own: a caller that gives up (its
        // deadline, a reset stream) drops this future, and an admin change that then still ran
        // (an erasure, a season reset) would go unaudited.
        let audited = tokio::spawn(async move {
            let response = inner.call(req).await?;
            if response.headers().contains_key(super::NOT_OWNER) {
                // This engine no longer serves the queues: the node that forwarded the call
                // sends it on (or, for a call sent once, tells its caller to check), and the
                // next owner audits it. The mark must reach that node as it is.
                return Ok(response);
            }
            let record = entry(
                crate::state::unix_now(),
                &path,
                identity.as_ref(),
                &note.take(),
                response.headers(),
            );
            if journal.was_fenced() {
                // Another node holds the lease: this engine writes nothing any more, and its
                // store has not failed. Answered as a fenced write, so the call goes to the
                // next owner, which writes its entry.
                tracing::warn!(action = %record.action, fenced = true, "audit entry not written: the result journal was fenced; the call goes to the next owner");
                return Ok(tonic::Status::from(StoreError::Fenced).into_http());
            }
            if journal.has_stopped() {
                // Nothing is durable any more: the call's own refusal (the store failure, for a
                // change) goes back now, and an answer that was OK cannot be acknowledged.
                tracing::error!(action = %record.action, "audit entry not written: the store failed");
                crate::telemetry::store_error("audit");
                return Ok(if grpc_code(response.headers()) == 0 {
                    tonic::Status::unavailable(
                        "the call ran but its audit entry could not be written: the store failed",
                    )
                    .into_http()
                } else {
                    response
                });
            }
            // Durable before the answer leaves: an acknowledged admin call is always audited.
            let written = match store.append_audit(&record) {
                Ok(_) => store.flush_async().await,
                Err(e) => Err(e),
            };
            match written {
                Ok(()) => Ok(response),
                Err(e) => {
                    // Counted unless fenced: the lease moved on after the call, which is then
                    // answered as any fenced write is, so it goes to the next owner, which
                    // writes its entry.
                    log_store_write_failure!("audit", e, action = %record.action, "audit entry not written");
                    Ok(match e {
                        StoreError::Fenced => tonic::Status::from(e),
                        e => tonic::Status::unavailable(format!(
                            "the call ran but its audit entry could not be written: {e}"
                        )),
                    }
                    .into_http())
                }
            }
        });
        Box::pin(async move {
            audited.await.unwrap_or_else(|e| {
                tracing::error!(error = %e, "admin call failed");
                Ok(tonic::Status::internal("the call failed").into_http())
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::Role;

    /// A handler that notes its call, then answers once `done` is notified.
    #[derive(Clone)]
    struct Slow {
        done: Arc<tokio::sync::Notify>,
    }

    impl Service<http::Request<Body>> for Slow {
        type Response = http::Response<Body>;
        type Error = Infallible;
        type Future = BoxFuture<Result<Self::Response, Self::Error>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, req: http::Request<Body>) -> Self::Future {
            if let Some(n) = req.extensions().get::<AuditNote>() {
                n.set("player_id=\"p1\"");
            }
            let done = self.done.clone();
            Box::pin(async move {
                done.notified().await;
                Ok(http::Response::new(Body::empty()))
            })
        }
    }

    #[tokio::test]
    async fn a_call_whose_caller_gave_up_is_still_audited_once_it_ran() {
        let store: Store = Arc::new(crate::store::MemoryStore::default());
        let done = Arc::new(tokio::sync::Notify::new());
        let mut audited = AuditLayer::new(store.clone(), JournalStopped::default())
            .layer(Slow { done: done.clone() });
        let request = http::Request::builder()
            .uri("/matchmaker.v1.AdminService/DeletePlayer")
            .body(Body::empty())
            .unwrap();
        let call = audited.call(request);
        // The caller's deadline passes while the handler runs (it cannot answer before it is
        // told to): the answer is dropped.
        let gave_up = tokio::time::timeout(std::time::Duration::from_millis(5), call).await;
        assert!(gave_up.is_err(), "the call answered before its handler did");
        assert!(store.audit_after(0, 10).unwrap().is_empty());
        // Then the handler ends.
        done.notify_one();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        let entries = loop {
            let entries = store.audit_after(0, 10).unwrap();
            if !entries.is_empty() || std::time::Instant::now() > deadline {
                break entries;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        };
        assert_eq!(entries.len(), 1, "{entries:?}");
        assert_eq!(entries[0].1.action, "DeletePlayer");
        assert_eq!(entries[0].1.detail, "player_id=\"p1\": OK");
    }

    /// A handler answering as an engine whose store the fence refused.
    #[derive(Clone)]
    struct Fenced;

    impl Service<http::Request<Body>> for Fenced {
        type Response = http::Response<Body>;
        type Error = Infallible;
        type Future = BoxFuture<Result<Self::Response, Self::Error>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, _: http::Request<Body>) -> Self::Future {
            Box::pin(async {
                Ok(tonic::Status::from(crate::store::StoreError::Fenced).into_http())
            })
        }
    }

    fn fenced_mark(response: &http::Response<Body>) -> Option<&str> {
        response
            .headers()
            .get(super::super::NOT_OWNER)
            .and_then(|v| v.to_str().ok())
    }

    #[tokio::test]
    async fn a_call_the_fence_refused_keeps_its_mark_so_it_goes_to_the_next_owner() {
        let memory = Arc::new(crate::store::MemoryStore::default());
        memory.fence_audit_writes();
        let store: Store = memory;
        let request = |method: &str| {
            http::Request::builder()
                .uri(format!("/matchmaker.v1.AdminService/{method}"))
                .body(Body::empty())
                .unwrap()
        };
        // The handler's write was fenced: its answer goes back marked, unaudited here.
        let mut audited = AuditLayer::new(store.clone(), JournalStopped::default()).layer(Fenced);
        let response = audited.call(request("BanPlayer")).await.unwrap();
        assert_eq!(fenced_mark(&response), Some(super::super::NOT_OWNER_FENCED));
        // The handler wrote nothing the fence refused, but its audit entry was: marked too.
        let done = Arc::new(tokio::sync::Notify::new());
        done.notify_one();
        let mut audited =
            AuditLayer::new(store.clone(), JournalStopped::default()).layer(Slow { done });
        let response = audited.call(request("SetRating")).await.unwrap();
        assert_eq!(fenced_mark(&response), Some(super::super::NOT_OWNER_FENCED));
        assert!(store.audit_after(0, 10).unwrap().is_empty());
    }

    /// A handler answering as one whose change the failed store refused.
    #[derive(Clone)]
    struct StoreFailed;

    impl Service<http::Request<Body>> for StoreFailed {
        type Response = http::Response<Body>;
        type Error = Infallible;
        type Future = BoxFuture<Result<Self::Response, Self::Error>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, _: http::Request<Body>) -> Self::Future {
            Box::pin(async {
                Ok(
                    tonic::Status::internal("storage failure: 0 of 1 replicas acknowledged")
                        .into_http(),
                )
            })
        }
    }

    #[tokio::test]
    async fn once_the_store_failed_the_answer_goes_back_without_an_entry() {
        let store: Store = Arc::new(crate::store::MemoryStore::default());
        let failed = JournalStopped::default();
        failed.stop(&StoreError::Redis("0 of 1 replicas acknowledged".into()));
        let request = || {
            http::Request::builder()
                .uri("/matchmaker.v1.AdminService/SetRating")
                .body(Body::empty())
                .unwrap()
        };
        // The change's own refusal names the failure, and is what the caller gets.
        let mut audited = AuditLayer::new(store.clone(), failed.clone()).layer(StoreFailed);
        let response = audited.call(request()).await.unwrap();
        let status = tonic::Status::from_header_map(response.headers()).unwrap();
        assert_eq!(status.code(), tonic::Code::Internal, "{status:?}");
        assert!(
            status.message().starts_with("storage failure"),
            "{status:?}"
        );
        // A call that ran cannot be acknowledged without its entry.
        let done = Arc::new(tokio::sync::Notify::new());
        done.notify_one();
        let mut audited = AuditLayer::new(store.clone(), failed).layer(Slow { done });
        let response = audited.call(request()).await.unwrap();
        let status = tonic::Status::from_header_map(response.headers()).unwrap();
        assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
        assert!(status.message().contains("the store failed"), "{status:?}");
        assert!(store.audit_after(0, 10).unwrap().is_empty());
    }

    /// The store errors counted in `recorder`.
    fn store_errors(recorder: &metrics_exporter_prometheus::PrometheusRecorder) -> Vec<String> {
        recorder
            .handle()
            .render()
            .lines()
            .filter(|l| l.starts_with(crate::telemetry::STORE_ERRORS))
            .map(str::to_owned)
            .collect()
    }

    /// A journal the fence stopped (the lease moved on) is no store failure: a call is answered
    /// as fenced, so it goes to the next owner, nothing is written and nothing counted.
    #[tokio::test]
    async fn once_the_journal_was_fenced_a_call_goes_to_the_next_owner_uncounted() {
        let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
        // The test's runtime runs the audit task on this thread.
        let _local = metrics::set_default_local_recorder(&recorder);
        let memory = Arc::new(crate::store::MemoryStore::default());
        let store: Store = memory.clone();
        // A real journal, whose batch the fence refuses.
        let (committer, task) = crate::store::Committer::spawn(store.clone(), 0, 8);
        memory.fail_flushes(Some(crate::store::FlushFailure::Fenced));
        committer.commit_all(Vec::new()).await.unwrap_err();
        let journal = committer.stopped();
        assert!(journal.was_fenced());
        memory.fail_flushes(None);
        let request = |method: &str| {
            http::Request::builder()
                .uri(format!("/matchmaker.v1.AdminService/{method}"))
                .body(Body::empty())
                .unwrap()
        };
        // A call that succeeded here (a read) and a change refused by the stopped journal.
        let done = Arc::new(tokio::sync::Notify::new());
        done.notify_one();
        let mut audited = AuditLayer::new(store.clone(), journal.clone()).layer(Slow { done });
        let response = audited.call(request("GetQueueStats")).await.unwrap();
        assert_eq!(fenced_mark(&response), Some(super::super::NOT_OWNER_FENCED));
        let mut audited = AuditLayer::new(store.clone(), journal).layer(StoreFailed);
        let response = audited.call(request("SetRating")).await.unwrap();
        assert_eq!(fenced_mark(&response), Some(super::super::NOT_OWNER_FENCED));
        assert!(store.audit_after(0, 10).unwrap().is_empty());
        assert_eq!(store.last_audit().unwrap(), 0);
        assert!(
            store_errors(&recorder).is_empty(),
            "{:?}",
            store_errors(&recorder)
        );

        // A store that failed is counted, once per call.
        let failed = JournalStopped::default();
        failed.stop(&StoreError::Redis("0 of 1 replicas acknowledged".into()));
        let mut audited = AuditLayer::new(store.clone(), failed).layer(StoreFailed);
        audited.call(request("SetRating")).await.unwrap();
        assert_eq!(
            store_errors(&recorder).len(),
            1,
            "{:?}",
            store_errors(&recorder)
        );
        drop(committer);
        task.await.unwrap();
    }

    #[test]
    fn a_long_note_is_cut_on_a_character_boundary() {
        let note = AuditNote::default();
        note.set(format!("reason={:?}", "é".repeat(1000)));
        let kept = note.take();
        assert!(
            kept.len() <= MAX_NOTE_BYTES + '…'.len_utf8(),
            "{}",
            kept.len()
        );
        assert!(kept.starts_with("reason=\"éé") && kept.ends_with('…'));
        note.set("player_id=\"p1\"");
        assert_eq!(note.take(), "player_id=\"p1\"");
    }

    #[test]
    fn an_entry_names_the_actor_the_method_and_the_outcome() {
        let admin = Identity {
            sub: "ops-1".into(),
            role: Role::Admin,
        };
        let ok = entry(
            5.0,
            "/matchmaker.v1.AdminService/BanPlayer",
            Some(&admin),
            "player_id=\"p1\"",
            &http::HeaderMap::new(),
        );
        assert_eq!(
            ok,
            AuditRecord {
                unix: 5.0,
                actor: "ops-1".into(),
                action: "BanPlayer".into(),
                detail: "player_id=\"p1\": OK".into(),
            }
        );
        let mut headers = http::HeaderMap::new();
        headers.insert("grpc-status", "3".parse().unwrap());
        headers.insert(
            "grpc-message",
            "reason%3A must not be empty".parse().unwrap(),
        );
        let bad = entry(6.0, "/x/DeletePlayer", None, "", &headers);
        assert_eq!(bad.actor, ANONYMOUS);
        assert_eq!(bad.action, "DeletePlayer");
        assert_eq!(bad.detail, "InvalidArgument: reason: must not be empty");
    }
}

//! The server's tower layers in front of every service: the call's deadline
//! ([`DeadlineLayer`]), then after load shedding and the global concurrency limit,
//! authentication ([`AuthLayer`]), the per-caller rate limit ([`RateLimitLayer`]) and the
//! request-size check ([`MessageSizeLayer`]). Each answers a refused
//! request itself, without reaching the inner service; the rules they apply are pure and live in
//! `auth` and `limits`.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::{Duration, Instant};

use http_body::{Body, Frame, SizeHint};
use tonic::Status;
use tonic::codegen::{Bytes, http};
use tower::{Layer, Service};

use super::error;
use crate::auth::{AuthError, Verifier, authorize, is_open_path};
use crate::limits::{Framing, RateLimiter, Refused, Slot};

/// The tower layer: authenticate, role-check, attach the [`crate::auth::Identity`].
#[derive(Clone)]
pub struct AuthLayer {
    verifier: Option<Arc<Verifier>>,
}

impl AuthLayer {
    /// `None` passes everything through (the server leaves the layer out instead when auth is
    /// off).
    pub fn new(verifier: Option<Arc<Verifier>>) -> Self {
        Self { verifier }
    }
}

impl<S> Layer<S> for AuthLayer {
    type Service = Auth<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Auth {
            inner,
            verifier: self.verifier.clone(),
        }
    }
}

/// The service [`AuthLayer`] makes.
#[derive(Clone)]
pub struct Auth<S> {
    inner: S,
    verifier: Option<Arc<Verifier>>,
}

type BoxFuture<T> = Pin<Box<dyn std::future::Future<Output = T> + Send>>;

impl<S, ReqBody, ResBody> Service<http::Request<ReqBody>> for Auth<S>
where
    S: Service<http::Request<ReqBody>, Response = http::Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    ReqBody: Send + 'static,
    ResBody: Default + Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = BoxFuture<Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: http::Request<ReqBody>) -> Self::Future {
        // The clone is not ready; the one that was polled ready serves this call.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let verifier = self.verifier.clone();
        let first = authorize(verifier.as_deref(), req.uri().path(), req.headers());
        Box::pin(async move {
            let outcome = match (first, &verifier) {
                // A key the sets do not hold yet: the provider may have rotated its keys.
                (Err(AuthError::UnknownKey(_)), Some(v)) if v.fetches_keys() => {
                    if !v.refresh_for_unknown_key().await {
                        // Too many calls wait for the key set already: a retry, not a refusal.
                        return Ok(error::refusal(Status::unavailable(
                            "the identity provider's key set is being fetched; retry",
                        )));
                    }
                    authorize(Some(v), req.uri().path(), req.headers())
                }
                (first, _) => first,
            };
            match outcome {
                Ok(Some(identity)) => {
                    req.extensions_mut().insert(identity);
                }
                Ok(None) => {}
                Err(e) => {
                    tracing::debug!(path = req.uri().path(), error = %e, "request refused");
                    return Ok(error::refusal(e));
                }
            }
            inner.call(req).await
        })
    }
}

/// The tower layer of [`RateLimiter`]. It runs after the auth layer, whose verified
/// [`crate::auth::Identity`] is the key: a caller cannot choose its bucket through an unverified header.
/// A call it admits holds its caller's in-flight slot until its answer starts (for a stream:
/// until the stream opens), as the server-wide limit holds its permit.
#[derive(Clone)]
pub struct RateLimitLayer {
    limiter: Arc<RateLimiter>,
}

impl RateLimitLayer {
    pub fn new(limiter: RateLimiter) -> Self {
        Self {
            limiter: Arc::new(limiter),
        }
    }
}

impl<S> Layer<S> for RateLimitLayer {
    type Service = RateLimit<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RateLimit {
            inner,
            limiter: self.limiter.clone(),
        }
    }
}

/// The service [`RateLimitLayer`] makes.
#[derive(Clone)]
pub struct RateLimit<S> {
    inner: S,
    limiter: Arc<RateLimiter>,
}

impl<S, ReqBody, ResBody> Service<http::Request<ReqBody>> for RateLimit<S>
where
    S: Service<http::Request<ReqBody>, Response = http::Response<ResBody>>,
    ResBody: Default,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = RefusedOr<InFlightCall<S::Future>, Result<S::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<ReqBody>) -> Self::Future {
        match self.limiter.admit(&request, Instant::now()) {
            Ok(slot) => RefusedOr::Inner {
                future: InFlightCall {
                    future: self.inner.call(request),
                    slot,
                },
            },
            Err(refused) => {
                let (metric, class) = match &refused {
                    Refused::Rate(r) => (crate::telemetry::RATE_LIMITED, r.class),
                    Refused::InFlight(r) => (crate::telemetry::IN_FLIGHT_LIMITED, r.class),
                };
                metrics::counter!(metric, "class" => class.as_str()).increment(1);
                tracing::debug!(path = request.uri().path(), error = %refused, "request refused");
                let response = error::refusal(match refused {
                    Refused::Rate(r) => Status::from(r),
                    Refused::InFlight(r) => Status::resource_exhausted(r.to_string()),
                });
                RefusedOr::Refused {
                    ready: std::future::ready(Ok(response)),
                }
            }
        }
    }
}

pin_project_lite::pin_project! {
    /// A call admitted by the rate-limit layer: its caller's in-flight slot is given back when
    /// the answer starts (or the call is dropped).
    pub struct InFlightCall<F> {
        #[pin]
        future: F,
        slot: Option<Slot>,
    }
}

impl<F: Future> Future for InFlightCall<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        let answer = ready!(this.future.poll(cx));
        this.slot.take();
        Poll::Ready(answer)
    }
}

pin_project_lite::pin_project! {
    /// The answer of a limit layer: a refusal made without the inner service, or the inner
    /// service's own future (no box on the path that passes).
    #[project = RefusedOrProjection]
    pub enum RefusedOr<F, T> {
        Refused { ready: std::future::Ready<T> },
        Inner { #[pin] future: F },
    }
}

impl<F, T> Future for RefusedOr<F, T>
where
    F: Future<Output = T>,
{
    type Output = T;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        match self.project() {
            RefusedOrProjection::Refused { ready } => Pin::new(ready).poll(cx),
            RefusedOrProjection::Inner { future } => future.poll(cx),
        }
    }
}

/// Refuses a request message over `server.max_message_bytes` with RESOURCE_EXHAUSTED, the gRPC
/// convention for a size limit (grpc-go, grpc-java), where tonic's decoder says OUT_OF_RANGE.
///
/// Why a body wrapper and not a rewrite of tonic's error response: the length prefix is the gRPC
/// wire format, stable by specification, while tonic's error is only recognisable by its
/// percent-encoded message text, which no API promises. The wrapper returns a `tonic::Status`
/// as the body's error; tonic passes a `Status` found in a body error through unchanged, so the
/// client gets this code and message from a unary and a streaming request alike, before the
/// oversized message is buffered. tonic's own limit (`max_decoding_message_size`, the same
/// value) stays behind it; this one also covers health and reflection requests.
///
/// It also bounds how long the body of a limited call may take to arrive
/// (`server.request_body_timeout_ms`): every such method takes one request message, and tonic
/// reads its body to the end before the handler runs, while the call holds its slots of the
/// server-wide and per-caller limits. A caller that sends the headers and never the message
/// (or never ends the body) is answered DEADLINE_EXCEEDED then, not at the call's deadline.
/// Health and reflection (whose reflection stream is read for as long as it is open) hold no
/// such slot and have no such bound.
#[derive(Clone, Copy, Debug)]
pub struct MessageSizeLayer {
    limit: usize,
    body_timeout: Option<Duration>,
}

impl MessageSizeLayer {
    /// `body_timeout`: `None` = the call's deadline alone bounds its body.
    pub fn new(limit: usize, body_timeout: Option<Duration>) -> Self {
        Self {
            limit,
            body_timeout,
        }
    }
}

impl<S> Layer<S> for MessageSizeLayer {
    type Service = MessageSize<S>;

    fn layer(&self, inner: S) -> Self::Service {
        MessageSize {
            inner,
            limit: self.limit,
            body_timeout: self.body_timeout,
        }
    }
}

/// The largest request message of a health or reflection call (theirs are a few dozen bytes).
pub const OPEN_MESSAGE_BYTES: usize = 4096;

/// The service [`MessageSizeLayer`] makes.
#[derive(Clone)]
pub struct MessageSize<S> {
    inner: S,
    limit: usize,
    body_timeout: Option<Duration>,
}

impl<S, ReqBody> Service<http::Request<ReqBody>> for MessageSize<S>
where
    S: Service<http::Request<LimitedBody<ReqBody>>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<ReqBody>) -> Self::Future {
        // Health and reflection skip the concurrency and rate limits and need no token: their
        // small requests are all they may send, since tonic sets aside the length a message
        // claims before it arrives.
        let open = crate::auth::is_open_path(request.uri().path());
        let limit = if open {
            self.limit.min(OPEN_MESSAGE_BYTES)
        } else {
            self.limit
        };
        let body_timeout = self.body_timeout.filter(|_| !open);
        self.inner.call(request.map(|inner| LimitedBody {
            inner,
            framing: Framing::new(limit),
            deadline: body_timeout.map(tokio::time::sleep),
            body_timeout: body_timeout.unwrap_or_default(),
        }))
    }
}

type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

pin_project_lite::pin_project! {
    /// A request body checked by [`Framing`] as it is read, and refused if it has not ended
    /// by its deadline.
    pub struct LimitedBody<B> {
        #[pin]
        inner: B,
        framing: Framing,
        // Until the body ends; `None` without a bound, or once it ended.
        #[pin]
        deadline: Option<tokio::time::Sleep>,
        body_timeout: Duration,
    }
}

impl<B> Body for LimitedBody<B>
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let mut this = self.project();
        let frame = match this.inner.poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => frame,
            Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e.into()))),
            Poll::Ready(None) => {
                this.deadline.set(None);
                return Poll::Ready(None);
            }
            Poll::Pending => {
                if let Some(deadline) = this.deadline.as_mut().as_pin_mut() {
                    ready!(deadline.poll(cx));
                    this.deadline.set(None);
                    metrics::counter!(crate::telemetry::DEADLINES_EXCEEDED).increment(1);
                    let late = Status::deadline_exceeded(format!(
                        "the request message did not arrive within \
                         server.request_body_timeout_ms ({} ms)",
                        this.body_timeout.as_millis()
                    ));
                    tracing::debug!(error = %late, "request refused");
                    return Poll::Ready(Some(Err(Box::new(late))));
                }
                return Poll::Pending;
            }
        };
        if let Some(data) = frame.data_ref()
            && let Err(too_large) = this.framing.scan(data)
        {
            tracing::debug!(error = %too_large, "request refused");
            return Poll::Ready(Some(Err(Box::new(Status::from(too_large)))));
        }
        Poll::Ready(Some(Ok(frame)))
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// Health and reflection skip the layers `L` stands for (the server-wide load shedding and
/// concurrency limit): an orchestrator must not take a busy server out of service, or restart
/// it, because its probes were shed with the calls that made it busy.
#[derive(Clone, Debug)]
pub struct OpenPathsBypass<L> {
    limited: L,
}

impl<L> OpenPathsBypass<L> {
    pub fn new(limited: L) -> Self {
        Self { limited }
    }
}

impl<L, S> Layer<S> for OpenPathsBypass<L>
where
    L: Layer<S>,
    S: Clone,
{
    type Service = Bypass<L::Service, S>;

    fn layer(&self, inner: S) -> Self::Service {
        Bypass {
            limited: self.limited.layer(inner.clone()),
            open: inner,
        }
    }
}

/// The service [`OpenPathsBypass`] makes.
#[derive(Clone)]
pub struct Bypass<L, S> {
    limited: L,
    open: S,
}

impl<L, S, ReqBody, Res> Service<http::Request<ReqBody>> for Bypass<L, S>
where
    L: Service<http::Request<ReqBody>, Response = Res>,
    L::Error: Into<tower::BoxError>,
    S: Service<http::Request<ReqBody>, Response = Res> + Clone,
    S::Error: Into<tower::BoxError>,
{
    type Response = Res;
    type Error = tower::BoxError;
    type Future = BypassFuture<L::Future, tower::util::Oneshot<S, http::Request<ReqBody>>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.limited.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: http::Request<ReqBody>) -> Self::Future {
        if is_open_path(request.uri().path()) {
            BypassFuture::Open {
                future: tower::ServiceExt::oneshot(self.open.clone(), request),
            }
        } else {
            BypassFuture::Limited {
                future: self.limited.call(request),
            }
        }
    }
}

pin_project_lite::pin_project! {
    /// The answer of one of [`Bypass`]'s two paths, errors boxed alike.
    #[project = BypassProjection]
    pub enum BypassFuture<L, O> {
        Limited { #[pin] future: L },
        Open { #[pin] future: O },
    }
}

impl<L, O, T, LE, OE> Future for BypassFuture<L, O>
where
    L: Future<Output = Result<T, LE>>,
    LE: Into<tower::BoxError>,
    O: Future<Output = Result<T, OE>>,
    OE: Into<tower::BoxError>,
{
    type Output = Result<T, tower::BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project() {
            BypassProjection::Limited { future } => future.poll(cx).map_err(Into::into),
            BypassProjection::Open { future } => future.poll(cx).map_err(Into::into),
        }
    }
}

/// Turns the errors of the layers below (a shed call, above all) into gRPC answers, so every
/// call ends in a response with a status that the layers above (metrics) can read.
#[derive(Clone, Copy, Debug, Default)]
pub struct AnswerErrorsLayer;

impl<S> Layer<S> for AnswerErrorsLayer {
    type Service = AnswerErrors<S>;

    fn layer(&self, inner: S) -> Self::Service {
        AnswerErrors {
            inner,
            broken: None,
        }
    }
}

/// The service [`AnswerErrorsLayer`] makes.
#[derive(Clone)]
pub struct AnswerErrors<S> {
    inner: S,
    /// Why the layers below could not take a call, for the next call's answer.
    broken: Option<Status>,
}

impl<S, ReqBody, ResBody> Service<http::Request<ReqBody>> for AnswerErrors<S>
where
    S: Service<http::Request<ReqBody>, Response = http::Response<ResBody>>,
    S::Error: Into<tower::BoxError>,
    ResBody: Default,
{
    type Response = S::Response;
    type Error = std::convert::Infallible;
    type Future = Answered<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        // A layer below that is not ready fails the call, answered in `call`'s future; tonic
        // would otherwise drop the connection's request.
        match self.inner.poll_ready(cx) {
            Poll::Ready(Err(e)) => {
                self.broken = Some(error::layer_error(e.into()));
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Ok(())) => Poll::Ready(Ok(())),
            Poll::Pending => Poll::Pending,
        }
    }

    fn call(&mut self, request: http::Request<ReqBody>) -> Self::Future {
        match self.broken.take() {
            Some(status) => Answered::Refused {
                status: Some(status),
            },
            None => Answered::Inner {
                future: self.inner.call(request),
            },
        }
    }
}

pin_project_lite::pin_project! {
    /// The inner answer, or its error as a gRPC answer.
    #[project = AnsweredProjection]
    pub enum Answered<F> {
        Refused { status: Option<Status> },
        Inner { #[pin] future: F },
    }
}

impl<F, ResBody, E> Future for Answered<F>
where
    F: Future<Output = Result<http::Response<ResBody>, E>>,
    E: Into<tower::BoxError>,
    ResBody: Default,
{
    type Output = Result<http::Response<ResBody>, std::convert::Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project() {
            AnsweredProjection::Refused { status } => {
                Poll::Ready(Ok(error::refusal(status.take().unwrap_or_else(|| {
                    error::internal("a refusal was polled after it was answered")
                }))))
            }
            AnsweredProjection::Inner { future } => {
                Poll::Ready(Ok(match ready!(future.poll(cx)) {
                    Ok(response) => response,
                    Err(e) => error::refusal(error::layer_error(e.into())),
                }))
            }
        }
    }
}

/// The admin calls that change a whole rating pool and take as long as the pool is large
/// (seconds per million players): bounded by `server.admin_request_timeout_ms` rather than
/// `server.request_timeout_ms`.
pub const LONG_CALLS: [&str; 3] = [
    "/matchmaker.v1.AdminService/SeasonReset",
    "/matchmaker.v1.AdminService/EndSeason",
    "/matchmaker.v1.AdminService/MigrateFromElo",
];

/// The server's limit for a call to `path`: `long` for [`LONG_CALLS`], `max` for the rest.
pub fn server_limit(path: &str, max: Duration, long: Duration) -> Duration {
    if LONG_CALLS.contains(&path) {
        long
    } else {
        max
    }
}

/// Answers DEADLINE_EXCEEDED when a call is not answered within its deadline: the caller's
/// `grpc-timeout` header, capped by the server's own limit ([`server_limit`]). (tonic's server
/// timeout answers CANCELLED, which clients cannot tell from a hang-up.) For a streaming call
/// the deadline covers the answer's start, as in tonic.
#[derive(Clone, Copy, Debug)]
pub struct DeadlineLayer {
    max: Duration,
    long: Duration,
}

impl DeadlineLayer {
    /// `max` for every call but [`LONG_CALLS`], which get `long`.
    pub fn new(max: Duration, long: Duration) -> Self {
        Self { max, long }
    }
}

impl<S> Layer<S> for DeadlineLayer {
    type Service = Deadline<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Deadline {
            inner,
            max: self.max,
            long: self.long,
        }
    }
}

/// The service [`DeadlineLayer`] makes.
#[derive(Clone)]
pub struct Deadline<S> {
    inner: S,
    max: Duration,
    long: Duration,
}

impl<S, ReqBody, ResBody> Service<http::Request<ReqBody>> for Deadline<S>
where
    S: Service<http::Request<ReqBody>, Response = http::Response<ResBody>>,
    ResBody: Default,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = WithDeadline<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<ReqBody>) -> Self::Future {
        let max = server_limit(request.uri().path(), self.max, self.long);
        let timeout = grpc_timeout(request.headers()).map_or(max, |t| t.min(max));
        WithDeadline {
            inner: self.inner.call(request),
            sleep: tokio::time::sleep(timeout),
            timeout,
        }
    }
}

pin_project_lite::pin_project! {
    /// A call's answer, or DEADLINE_EXCEEDED once its deadline passes.
    pub struct WithDeadline<F> {
        #[pin]
        inner: F,
        #[pin]
        sleep: tokio::time::Sleep,
        timeout: Duration,
    }
}

impl<F, ResBody, E> Future for WithDeadline<F>
where
    F: Future<Output = Result<http::Response<ResBody>, E>>,
    ResBody: Default,
{
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        if let Poll::Ready(answer) = this.inner.poll(cx) {
            return Poll::Ready(answer);
        }
        ready!(this.sleep.poll(cx));
        metrics::counter!(crate::telemetry::DEADLINES_EXCEEDED).increment(1);
        Poll::Ready(Ok(error::refusal(error::DeadlineExceeded(*this.timeout))))
    }
}

/// The caller's deadline from a `grpc-timeout` header (up to 8 digits and a unit: `H`, `M`,
/// `S`, `m`, `u`, `n`); `None` when absent or malformed.
pub fn grpc_timeout(headers: &http::HeaderMap) -> Option<Duration> {
    let value = headers.get("grpc-timeout")?.to_str().ok()?;
    let (digits, unit) = value.split_at(value.len().checked_sub(1)?);
    if digits.is_empty() || digits.len() > 8 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n * 3600),
        "M" => Duration::from_secs(n * 60),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

#[cfg(test)]
mod limit_tests;

#[cfg(test)]
mod tests {
    use super::*;

    fn timeout(value: &str) -> Option<Duration> {
        let mut headers = http::HeaderMap::new();
        headers.insert("grpc-timeout", value.parse().unwrap());
        grpc_timeout(&headers)
    }

    /// A service that never answers, like a handler stuck behind a slow dependency.
    fn stuck() -> impl Service<
        http::Request<()>,
        Response = http::Response<tonic::body::Body>,
        Error = std::convert::Infallible,
        Future = std::future::Pending<
            Result<http::Response<tonic::body::Body>, std::convert::Infallible>,
        >,
    > + Clone {
        tower::service_fn(|_: http::Request<()>| std::future::pending())
    }

    fn grpc_status(response: &http::Response<tonic::body::Body>) -> Option<&str> {
        response.headers().get("grpc-status")?.to_str().ok()
    }

    #[tokio::test]
    async fn a_call_past_its_deadline_is_answered_deadline_exceeded() {
        use tower::ServiceExt;
        // The server's own limit applies when the caller sent none.
        let started = tokio::time::Instant::now();
        let answer = DeadlineLayer::new(Duration::from_millis(20), Duration::from_secs(3600))
            .layer(stuck())
            .oneshot(http::Request::new(()))
            .await
            .unwrap();
        assert_eq!(grpc_status(&answer), Some("4"), "DEADLINE_EXCEEDED");
        assert!(started.elapsed() >= Duration::from_millis(20));
        // The caller's shorter deadline wins over a long server limit.
        let mut request = http::Request::new(());
        request
            .headers_mut()
            .insert("grpc-timeout", "30m".parse().unwrap());
        let answer = DeadlineLayer::new(Duration::from_secs(3600), Duration::from_secs(3600))
            .layer(stuck())
            .oneshot(request)
            .await
            .unwrap();
        assert_eq!(grpc_status(&answer), Some("4"));
    }

    /// On paused time: the limits are tokio timers, and the elapsed times compared are theirs
    /// alone, however slowly the machine runs the test.
    #[tokio::test(start_paused = true)]
    async fn a_call_that_changes_a_whole_pool_has_the_longer_admin_limit() {
        use tower::ServiceExt;
        let call = |path: &str| {
            let request = http::Request::builder().uri(path).body(()).unwrap();
            DeadlineLayer::new(Duration::from_millis(20), Duration::from_millis(300))
                .layer(stuck())
                .oneshot(request)
        };
        let started = tokio::time::Instant::now();
        let answer = call("/matchmaker.v1.AdminService/SeasonReset")
            .await
            .unwrap();
        assert_eq!(grpc_status(&answer), Some("4"));
        assert!(
            started.elapsed() >= Duration::from_millis(300),
            "the admin limit"
        );
        let started = tokio::time::Instant::now();
        let answer = call("/matchmaker.v1.AdminService/SetRating").await.unwrap();
        assert_eq!(grpc_status(&answer), Some("4"));
        assert!(
            started.elapsed() < Duration::from_millis(300),
            "the usual limit"
        );
    }

    #[test]
    fn grpc_timeouts_parse_by_the_spec() {
        assert_eq!(timeout("1H"), Some(Duration::from_secs(3600)));
        assert_eq!(timeout("2M"), Some(Duration::from_secs(120)));
        assert_eq!(timeout("3S"), Some(Duration::from_secs(3)));
        assert_eq!(timeout("250m"), Some(Duration::from_millis(250)));
        assert_eq!(
            timeout("99999999u"),
            Some(Duration::from_micros(99_999_999))
        );
        assert_eq!(timeout("5n"), Some(Duration::from_nanos(5)));
        for bad in ["", "S", "123456789S", "10x", "-1S", "1.5S"] {
            let mut headers = http::HeaderMap::new();
            if !bad.is_empty() {
                headers.insert("grpc-timeout", bad.parse().unwrap());
            }
            assert_eq!(grpc_timeout(&headers), None, "{bad:?}");
        }
    }
}

//! The link between two nodes' fronts: the unary calls a node forwards to the owner travel as
//! messages on a few long-lived streams, many calls to a message, instead of one HTTP/2 stream
//! each. A call on its own stream costs both nodes its headers' encoding, the stream's state
//! machine and, at a loaded node, about one write system call; on the link a batch of calls
//! shares one frame and one write, so forwarding costs the forwarding node and the owner less
//! per call (the figures are in docs/performance.md, cluster mode).
//!
//! Each [`Call`] keeps what the caller sent (path, every header, the length-prefixed message),
//! and the owner's front serves it exactly as if it had come on its own stream: marked as
//! forwarded, through every layer of the engine. Its [`Answer`] carries the response's head,
//! message and trailers back. Batching is by availability: a sender takes every call that is
//! waiting when the stream can take a message, so a lone call goes at once and, under load,
//! calls ride together. A link that breaks fails the calls in flight on it, as a broken
//! connection does, and the next call opens a new one.
//!
//! The messages are declared here with prost rather than in `proto/`: they are the private
//! wire between nodes of one release, not part of the API.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::{Buf, Bytes, BytesMut};
use http_body_util::BodyExt;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tonic::body::Body;
use tonic::codegen::http;
use tonic::transport::Channel;

/// The link's one RPC (bidirectional streaming: [`Calls`] in, [`Answers`] out).
pub const PATH: &str = "/matchmaker.cluster.v1.Link/Calls";
/// A batch stops growing past this many bytes of calls or answers (a lone larger one still
/// goes, alone).
const BATCH_BYTES: usize = 1 << 20;
/// Nor past this many calls or answers.
const BATCH_CALLS: usize = 512;
/// Allowance for one call's or answer's headers and framing on top of its message.
const HEAD_BYTES: usize = 64 << 10;
/// Calls (or answers) waiting for the stream at most: past it a caller waits for room, so a
/// slow owner slows its forwarders' callers down rather than their memory growing.
const QUEUED: usize = 16_384;

/// One forwarded unary call.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Call {
    /// Names the call's answer on this link.
    #[prost(uint64, tag = "1")]
    pub id: u64,
    #[prost(string, tag = "2")]
    pub path: String,
    /// Every header, as `name:value` lines ([`to_headers`]).
    #[prost(bytes = "bytes", tag = "3")]
    pub headers: Bytes,
    /// The request body as the caller sent it: one length-prefixed gRPC message.
    #[prost(bytes = "bytes", tag = "4")]
    pub body: Bytes,
}

/// What a node sends on the link.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Calls {
    #[prost(message, repeated, tag = "1")]
    pub calls: Vec<Call>,
}

/// The answer to one call.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Answer {
    #[prost(uint64, tag = "1")]
    pub id: u64,
    /// The HTTP status of the response (200 for every gRPC answer).
    #[prost(uint32, tag = "2")]
    pub status: u32,
    #[prost(bytes = "bytes", tag = "3")]
    pub headers: Bytes,
    /// The response body: the length-prefixed message, or nothing (trailers-only).
    #[prost(bytes = "bytes", tag = "4")]
    pub body: Bytes,
    #[prost(bytes = "bytes", tag = "5")]
    pub trailers: Bytes,
}

/// What the owner sends back.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Answers {
    #[prost(message, repeated, tag = "1")]
    pub answers: Vec<Answer>,
}

/// The link failed before the call was answered: it may or may not have reached the owner.
#[derive(Debug, thiserror::Error)]
#[error("the link to the owner broke")]
pub struct Broken;

/// What a batch is made of, weighed for the batch limit.
trait Weighed {
    fn size(&self) -> usize;
}

impl Weighed for Call {
    fn size(&self) -> usize {
        self.body.len() + self.path.len() + self.headers.len()
    }
}

impl Weighed for Answer {
    fn size(&self) -> usize {
        self.body.len() + self.headers.len() + self.trailers.len()
    }
}

/// The largest link message a node accepts: a full batch and one call or answer past it.
pub fn message_limit(max_message: usize) -> usize {
    BATCH_BYTES
        .saturating_add(max_message)
        .saturating_add(HEAD_BYTES)
}

/// Whether an item waiting in a link's channel is still wanted by whoever queued it.
type Wanted<T> = Box<dyn Fn(&T) -> bool + Send + Sync>;

/// A stream of batches: each poll takes every item waiting in the channel, up to the batch
/// limits, leaving out the ones no longer wanted.
struct Batches<T, B> {
    rx: mpsc::Receiver<T>,
    wrap: fn(Vec<T>) -> B,
    wanted: Wanted<T>,
}

impl<T, B> Batches<T, B> {
    fn new(rx: mpsc::Receiver<T>, wrap: fn(Vec<T>) -> B) -> Self {
        Self {
            rx,
            wrap,
            wanted: Box::new(|_| true),
        }
    }
}

impl<T: Weighed, B> tokio_stream::Stream for Batches<T, B> {
    type Item = B;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<B>> {
        let first = loop {
            match self.rx.poll_recv(cx) {
                Poll::Ready(Some(first)) if (self.wanted)(&first) => break first,
                Poll::Ready(Some(_)) => continue,
                Poll::Ready(None) => return Poll::Ready(None),
                Poll::Pending => return Poll::Pending,
            }
        };
        let mut bytes = first.size();
        let mut batch = vec![first];
        while bytes < BATCH_BYTES && batch.len() < BATCH_CALLS {
            match self.rx.try_recv() {
                Ok(next) if (self.wanted)(&next) => {
                    bytes += next.size();
                    batch.push(next);
                }
                Ok(_) => continue,
                Err(_) => break,
            }
        }
        Poll::Ready(Some((self.wrap)(batch)))
    }
}

/// A forwarding node's end of one link to the owner.
pub struct Link {
    next: AtomicU64,
    /// Calls sent and not answered yet; `None` once the link broke.
    pending: Mutex<Option<HashMap<u64, oneshot::Sender<Answer>>>>,
    /// Where calls queue for the stream; `None` once the link is closed ([`Link::close`]): the
    /// stream's request side then ends once the calls queued are sent, and with it the link.
    out: Mutex<Option<mpsc::Sender<Call>>>,
    broken: AtomicBool,
}

impl Link {
    /// Opens a link over `channel` (the stream starts with the first call, its request
    /// carrying `metadata`).
    pub fn open(
        channel: Channel,
        max_message: usize,
        metadata: tonic::metadata::MetadataMap,
    ) -> Arc<Self> {
        let (out, rx) = mpsc::channel(QUEUED);
        let link = Arc::new(Self {
            next: AtomicU64::new(0),
            pending: Mutex::new(Some(HashMap::new())),
            out: Mutex::new(Some(out)),
            broken: AtomicBool::new(false),
        });
        let calls = link.batches(rx);
        tokio::spawn(link.clone().run(channel, calls, max_message, metadata));
        link
    }

    /// The calls queued on `rx` in batches. A call whose caller gave up (its deadline passed,
    /// or the owner moved on) while it waited for the stream is left out: the owner would do
    /// work nobody waits for.
    fn batches(self: &Arc<Self>, rx: mpsc::Receiver<Call>) -> Batches<Call, Calls> {
        let link = Arc::downgrade(self);
        Batches {
            wanted: Box::new(move |call: &Call| {
                link.upgrade().is_some_and(|link| link.is_waiting(call.id))
            }),
            ..Batches::new(rx, |calls| Calls { calls })
        }
    }

    /// Whether the caller of call `id` still waits for its answer.
    fn is_waiting(&self, id: u64) -> bool {
        self.pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .is_some_and(|pending| pending.contains_key(&id))
    }

    /// Whether the link broke (a new one is needed).
    pub fn is_broken(&self) -> bool {
        self.broken.load(Ordering::Relaxed)
    }

    /// Takes no further call: the calls already taken are sent and answered, then the stream
    /// ends, and the link's task and the owner's end of it with it. For a link to a node that
    /// no longer owns the queues, which would otherwise stay open for as long as the process.
    pub fn close(&self) {
        self.out.lock().unwrap_or_else(|p| p.into_inner()).take();
    }

    async fn run(
        self: Arc<Self>,
        channel: Channel,
        calls: Batches<Call, Calls>,
        max_message: usize,
        metadata: tonic::metadata::MetadataMap,
    ) {
        let limit = message_limit(max_message);
        let mut grpc = tonic::client::Grpc::new(channel)
            .max_decoding_message_size(limit)
            .max_encoding_message_size(limit);
        let served = async {
            grpc.ready()
                .await
                .map_err(|e| tonic::Status::unavailable(e.to_string()))?;
            let mut answers = grpc
                .streaming(
                    tonic::Request::from_parts(metadata, tonic::Extensions::new(), calls),
                    http::uri::PathAndQuery::from_static(PATH),
                    tonic_prost::ProstCodec::<Calls, Answers>::default(),
                )
                .await?
                .into_inner();
            while let Some(batch) = answers.message().await? {
                let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
                let Some(pending) = pending.as_mut() else {
                    break;
                };
                for answer in batch.answers {
                    if let Some(waiting) = pending.remove(&answer.id) {
                        let _ = waiting.send(answer);
                    }
                }
            }
            Ok::<(), tonic::Status>(())
        };
        if let Err(e) = served.await {
            tracing::debug!(error = %e, "cluster link closed");
        }
        self.broken.store(true, Ordering::Relaxed);
        // Every call still waiting fails now, as on a broken connection.
        self.pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
    }

    /// Sends one call and waits for its answer.
    pub async fn call(
        &self,
        parts: &http::request::Parts,
        body: Bytes,
    ) -> Result<http::Response<Body>, Broken> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        match self
            .pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_mut()
        {
            Some(pending) => pending.insert(id, tx),
            None => return Err(Broken),
        };
        // A caller that gives up (its deadline, the owner moving on) takes its entry back.
        let _forget = Forget { link: self, id };
        let call = Call {
            id,
            path: parts.uri.path().to_string(),
            headers: to_headers(&parts.headers),
            body,
        };
        let out = self
            .out
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .ok_or(Broken)?;
        out.send(call).await.map_err(|_| Broken)?;
        let answer = rx.await.map_err(|_| Broken)?;
        Ok(into_response(answer))
    }
}

struct Forget<'a> {
    link: &'a Link,
    id: u64,
}

impl Drop for Forget<'_> {
    fn drop(&mut self) {
        if let Some(pending) = self
            .link
            .pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_mut()
        {
            pending.remove(&self.id);
        }
    }
}

/// The owner's end of a link: each call is handed to `serve` (the front, as for a call on its
/// own stream) in a task of its own, and its answer sent back as soon as it is ready. Once
/// `closing` is cancelled (the node stops) no further call is taken, and the link ends when
/// the calls taken are answered, so it does not hold the node's shutdown open; the forwarding
/// node sends the calls it had in flight again elsewhere, as after a broken connection.
pub async fn accept<S, F>(
    request: http::Request<Body>,
    max_message: usize,
    closing: CancellationToken,
    serve: S,
) -> http::Response<Body>
where
    S: Fn(http::Request<Body>) -> F + Clone + Send + Sync + 'static,
    F: std::future::Future<Output = http::Response<Body>> + Send + 'static,
{
    let limit = message_limit(max_message);
    let service = Accept { serve, closing };
    tonic::server::Grpc::new(tonic_prost::ProstCodec::<Answers, Calls>::default())
        .max_decoding_message_size(limit)
        .max_encoding_message_size(limit)
        .streaming(service, request)
        .await
}

struct Accept<S> {
    serve: S,
    closing: CancellationToken,
}

impl<S, F> tower::Service<tonic::Request<tonic::Streaming<Calls>>> for Accept<S>
where
    S: Fn(http::Request<Body>) -> F + Clone + Send + Sync + 'static,
    F: std::future::Future<Output = http::Response<Body>> + Send + 'static,
{
    type Response = tonic::Response<Batches<Answer, Result<Answers, tonic::Status>>>;
    type Error = tonic::Status;
    type Future = std::future::Ready<Result<Self::Response, tonic::Status>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), tonic::Status>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: tonic::Request<tonic::Streaming<Calls>>) -> Self::Future {
        let (tx, rx) = mpsc::channel(QUEUED);
        let mut calls = request.into_inner();
        let serve = self.serve.clone();
        let closing = self.closing.clone();
        tokio::spawn(async move {
            // Ends when the forwarding node closes its side, the link breaks or this node
            // stops; calls already taken finish and their answers go before the stream ends.
            while let Some(Ok(Some(batch))) = closing.run_until_cancelled(calls.message()).await {
                for call in batch.calls {
                    let serve = serve.clone();
                    let tx = tx.clone();
                    tokio::spawn(async move {
                        let id = call.id;
                        let response = serve(into_request(call)).await;
                        let _ = tx.send(answer(id, response).await).await;
                    });
                }
            }
        });
        std::future::ready(Ok(tonic::Response::new(Batches::new(rx, |answers| {
            Ok(Answers { answers })
        }))))
    }
}

/// Headers as `name:value` lines, in one buffer: a header's name has no `:` and its value no
/// line break, so the lines split back unambiguously.
fn to_headers(map: &http::HeaderMap) -> Bytes {
    let size = map
        .iter()
        .map(|(n, v)| n.as_str().len() + v.len() + 2)
        .sum();
    let mut out = BytesMut::with_capacity(size);
    for (name, value) in map {
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b":");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\n");
    }
    out.freeze()
}

/// Headers back from their lines (each value shares the message's buffer), dropping any line
/// that is not a valid header (a node of the same release sends none).
fn from_headers(lines: &Bytes) -> http::HeaderMap {
    let mut map = http::HeaderMap::new();
    let mut rest = lines.clone();
    while !rest.is_empty() {
        let end = rest.iter().position(|&b| b == b'\n').unwrap_or(rest.len());
        let line = rest.split_to(end);
        if !rest.is_empty() {
            rest.advance(1);
        }
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            continue;
        };
        if let (Ok(name), Ok(value)) = (
            http::HeaderName::from_bytes(&line[..colon]),
            http::HeaderValue::from_maybe_shared(line.slice(colon + 1..)),
        ) {
            map.append(name, value);
        }
    }
    map
}

fn into_request(call: Call) -> http::Request<Body> {
    let mut request = http::Request::new(Body::new(http_body_util::Full::new(call.body)));
    *request.method_mut() = http::Method::POST;
    *request.version_mut() = http::Version::HTTP_2;
    *request.uri_mut() = http::Uri::from_maybe_shared(Bytes::from(call.path)).unwrap_or_default();
    *request.headers_mut() = from_headers(&call.headers);
    request
}

/// The response, collected: a unary answer is one message and its trailers.
async fn answer(id: u64, response: http::Response<Body>) -> Answer {
    let (head, mut body) = response.into_parts();
    let mut data = BytesMut::new();
    let mut trailers = Bytes::new();
    while let Some(frame) = body.frame().await {
        match frame {
            Ok(frame) => match frame.into_data() {
                Ok(chunk) => data.extend_from_slice(&chunk),
                Err(frame) => {
                    if let Ok(t) = frame.into_trailers() {
                        trailers = to_headers(&t);
                    }
                }
            },
            Err(e) => {
                let status = tonic::Status::internal(format!("the answer broke off: {e}"));
                let mut map = http::HeaderMap::new();
                let _ = status.add_header(&mut map);
                trailers = to_headers(&map);
                break;
            }
        }
    }
    Answer {
        id,
        status: u32::from(head.status.as_u16()),
        headers: to_headers(&head.headers),
        body: data.freeze(),
        trailers,
    }
}

fn into_response(answer: Answer) -> http::Response<Body> {
    let trailers = (!answer.trailers.is_empty()).then(|| from_headers(&answer.trailers));
    let mut frames = Vec::with_capacity(2);
    if !answer.body.is_empty() {
        frames.push(Ok::<_, tonic::Status>(http_body::Frame::data(answer.body)));
    }
    if let Some(t) = trailers {
        frames.push(Ok(http_body::Frame::trailers(t)));
    }
    let body = http_body_util::StreamBody::new(tokio_stream::iter(frames));
    let mut response = http::Response::new(Body::new(body));
    *response.status_mut() =
        http::StatusCode::from_u16(u16::try_from(answer.status).unwrap_or(500))
            .unwrap_or(http::StatusCode::INTERNAL_SERVER_ERROR);
    *response.headers_mut() = from_headers(&answer.headers);
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::convert::Infallible;
    use std::time::Duration;

    fn call(id: u64, body: usize) -> Call {
        Call {
            id,
            path: "/matchmaker.v1.ClientService/GetPlayer".into(),
            headers: Bytes::new(),
            body: Bytes::from(vec![0u8; body]),
        }
    }

    #[tokio::test]
    async fn a_batch_takes_every_waiting_call_up_to_its_limits() {
        use tokio_stream::StreamExt;
        let (tx, rx) = mpsc::channel(QUEUED);
        let mut batches = Batches::new(rx, |calls| Calls { calls });
        for id in 0..3 {
            tx.send(call(id, 10)).await.unwrap();
        }
        let ids = |b: Calls| b.calls.iter().map(|c| c.id).collect::<Vec<_>>();
        assert_eq!(ids(batches.next().await.unwrap()), [0, 1, 2]);
        for id in 0..BATCH_CALLS as u64 + 5 {
            tx.send(call(id, 10)).await.unwrap();
        }
        assert_eq!(batches.next().await.unwrap().calls.len(), BATCH_CALLS);
        assert_eq!(batches.next().await.unwrap().calls.len(), 5);
        // By bytes: a batch stops once it holds the byte limit; a larger call goes alone.
        tx.send(call(1, BATCH_BYTES / 2)).await.unwrap();
        tx.send(call(2, BATCH_BYTES / 2)).await.unwrap();
        tx.send(call(3, 10)).await.unwrap();
        assert_eq!(ids(batches.next().await.unwrap()), [1, 2]);
        assert_eq!(ids(batches.next().await.unwrap()), [3]);
        tx.send(call(4, 2 * BATCH_BYTES)).await.unwrap();
        assert_eq!(ids(batches.next().await.unwrap()), [4]);
        drop(tx);
        assert!(batches.next().await.is_none());
    }

    #[tokio::test]
    async fn a_call_whose_caller_gave_up_while_it_waited_is_not_sent() {
        use tokio_stream::StreamExt;
        let (out, rx) = mpsc::channel(QUEUED);
        let link = Arc::new(Link {
            next: AtomicU64::new(0),
            pending: Mutex::new(Some(HashMap::new())),
            out: Mutex::new(Some(out)),
            broken: AtomicBool::new(false),
        });
        let out = link.out.lock().unwrap().clone().unwrap();
        let mut batches = link.batches(rx);
        let (waiting, gave_up, also_waiting) = (1, 2, 3);
        for id in [waiting, gave_up, also_waiting] {
            let (tx, _rx) = oneshot::channel();
            link.pending
                .lock()
                .unwrap()
                .as_mut()
                .unwrap()
                .insert(id, tx);
            out.send(call(id, 10)).await.unwrap();
        }
        // The caller's future is dropped: its entry goes, as `Forget` takes it.
        drop(Forget {
            link: &link,
            id: gave_up,
        });
        let ids = |b: Calls| b.calls.iter().map(|c| c.id).collect::<Vec<_>>();
        assert_eq!(ids(batches.next().await.unwrap()), [waiting, also_waiting]);
        // Nobody waits for anything once the link broke.
        let (tx, _rx) = oneshot::channel();
        link.pending.lock().unwrap().as_mut().unwrap().insert(4, tx);
        out.send(call(4, 10)).await.unwrap();
        link.pending.lock().unwrap().take();
        drop((link, out));
        assert!(batches.next().await.is_none());
    }

    #[test]
    fn headers_cross_as_lines_and_come_back_the_same() {
        let mut map = http::HeaderMap::new();
        map.insert("authorization", "Bearer a:b:c".parse().unwrap());
        map.append("x-many", "one".parse().unwrap());
        map.append("x-many", "two".parse().unwrap());
        map.insert("grpc-timeout", "5S".parse().unwrap());
        map.insert("x-empty", "".parse().unwrap());
        let lines = to_headers(&map);
        assert_eq!(from_headers(&lines), map);
        assert!(from_headers(&to_headers(&http::HeaderMap::new())).is_empty());
        // A line that is no header is dropped, the others kept.
        let mixed = Bytes::from_static(b"no colon here\nx-a:1\nbad name:2\nx-b:3");
        let back = from_headers(&mixed);
        assert_eq!(back.len(), 2);
        assert_eq!(back["x-a"], "1");
        assert_eq!(back["x-b"], "3");
    }

    /// A server on a free loopback port, on `runtime`, whose link answers each call with
    /// `serve`; its address and the token that ends the link (`closing`).
    async fn serve_link<S, F>(
        runtime: &tokio::runtime::Handle,
        serve: S,
    ) -> (String, CancellationToken)
    where
        S: Fn(http::Request<Body>) -> F + Clone + Send + Sync + 'static,
        F: std::future::Future<Output = http::Response<Body>> + Send + 'static,
    {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let closing = CancellationToken::new();
        let link_closing = closing.clone();
        let service = tower::service_fn(move |request: http::Request<axum::body::Body>| {
            let serve = serve.clone();
            let closing = link_closing.clone();
            async move {
                Ok::<_, Infallible>(accept(request.map(Body::new), 1 << 20, closing, serve).await)
            }
        });
        let routes = tonic::service::Routes::from(axum::Router::new().fallback_service(service));
        runtime.spawn(async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
            tonic::transport::Server::builder()
                .add_routes(routes)
                .serve_with_incoming(incoming)
                .await
        });
        (addr, closing)
    }

    fn channel(addr: &str) -> Channel {
        tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
            .unwrap()
            .connect_lazy()
    }

    fn request(path: &str, authorization: &str) -> http::request::Parts {
        let (parts, ()) = http::Request::builder()
            .method("POST")
            .uri(path)
            .header("authorization", authorization)
            .header("grpc-timeout", "5S")
            .body(())
            .unwrap()
            .into_parts();
        parts
    }

    async fn read(response: http::Response<Body>) -> (http::HeaderMap, Bytes, http::HeaderMap) {
        let (head, body) = response.into_parts();
        let collected = body.collect().await.unwrap();
        let trailers = collected.trailers().cloned().unwrap_or_default();
        (head.headers, collected.to_bytes(), trailers)
    }

    #[tokio::test]
    async fn calls_cross_a_link_with_their_headers_and_come_back_with_head_message_and_trailers() {
        // The far end echoes: the path and the token as headers, the body reversed, and a
        // trailer naming the call.
        let here = tokio::runtime::Handle::current();
        let (addr, _closing) = serve_link(&here, |request: http::Request<Body>| async move {
            let (parts, body) = request.into_parts();
            let mut bytes = body.collect().await.unwrap().to_bytes().to_vec();
            bytes.reverse();
            let mut trailers = http::HeaderMap::new();
            trailers.insert("grpc-status", "0".parse().unwrap());
            trailers.insert("x-token", parts.headers["authorization"].clone());
            let body = http_body_util::StreamBody::new(tokio_stream::iter([
                Ok::<_, Infallible>(http_body::Frame::data(Bytes::from(bytes))),
                Ok(http_body::Frame::trailers(trailers)),
            ]));
            http::Response::builder()
                .header("content-type", "application/grpc")
                .header("x-path", parts.uri.path())
                .header("x-timeout", parts.headers["grpc-timeout"].clone())
                .body(Body::new(body))
                .unwrap()
        })
        .await;
        let link = Link::open(channel(&addr), 1 << 20, Default::default());
        // Many calls at once: each gets its own answer.
        let calls = (0..50u8).map(|i| {
            let link = link.clone();
            async move {
                let path = format!("/matchmaker.v1.ClientService/Call{i}");
                let parts = request(&path, &format!("Bearer t{i}"));
                let answer = link.call(&parts, Bytes::from(vec![0, 1, i])).await;
                (i, path, answer)
            }
        });
        for (i, path, answer) in join_all(calls).await {
            let (headers, body, trailers) = read(answer.unwrap()).await;
            assert_eq!(headers["x-path"], path.as_str());
            assert_eq!(headers["x-timeout"], "5S");
            assert_eq!(body.as_ref(), [i, 1, 0]);
            assert_eq!(trailers["grpc-status"], "0");
            assert_eq!(trailers["x-token"], format!("Bearer t{i}").as_str());
        }
        assert!(!link.is_broken());
    }

    /// Runs every future to its end, concurrently.
    async fn join_all<F>(futures: impl Iterator<Item = F>) -> Vec<F::Output>
    where
        F: std::future::Future + Send + 'static,
        F::Output: Send + 'static,
    {
        let handles: Vec<_> = futures.map(tokio::spawn).collect();
        let mut out = Vec::with_capacity(handles.len());
        for handle in handles {
            out.push(handle.await.unwrap());
        }
        out
    }

    #[tokio::test]
    async fn a_closed_link_answers_the_calls_it_took_then_ends() {
        let here = tokio::runtime::Handle::current();
        let (addr, _closing) = serve_link(&here, |_request: http::Request<Body>| async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            http::Response::new(Body::empty())
        })
        .await;
        let parts = request("/matchmaker.v1.ClientService/GetPlayer", "Bearer x");
        let link = Link::open(channel(&addr), 1 << 20, Default::default());
        let answered = tokio::spawn({
            let link = link.clone();
            let parts = parts.clone();
            async move { link.call(&parts, Bytes::new()).await.is_ok() }
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
        link.close();
        assert!(
            link.call(&parts, Bytes::new()).await.is_err(),
            "no call after"
        );
        assert!(answered.await.unwrap(), "the call taken before is answered");
        tokio::time::timeout(Duration::from_secs(5), async {
            while !link.is_broken() {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
        .expect("the closed link ended");
    }

    #[tokio::test]
    async fn a_call_in_flight_fails_when_its_link_breaks_and_a_closing_node_ends_its_links() {
        let here = tokio::runtime::Handle::current();
        let (addr, closing) = serve_link(&here, |_request: http::Request<Body>| async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            http::Response::new(Body::empty())
        })
        .await;
        let parts = request("/matchmaker.v1.ClientService/GetPlayer", "Bearer x");

        // The node closes: the call it took is answered, then the link ends.
        let link = Link::open(channel(&addr), 1 << 20, Default::default());
        let answered = tokio::spawn({
            let link = link.clone();
            let parts = parts.clone();
            async move { link.call(&parts, Bytes::new()).await.is_ok() }
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
        closing.cancel();
        assert!(answered.await.unwrap(), "a call taken is answered");
        tokio::time::timeout(Duration::from_secs(5), async {
            while !link.is_broken() {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
        .expect("the closing node ended the link");
        assert!(link.call(&parts, Bytes::new()).await.is_err());

        // The far end dies with a call in flight (its runtime, every connection with it, is
        // gone): the call fails, it does not hang.
        let far = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let (addr, _closing) =
            serve_link(far.handle(), |_request: http::Request<Body>| async move {
                std::future::pending::<()>().await;
                http::Response::new(Body::empty())
            })
            .await;
        let link = Link::open(channel(&addr), 1 << 20, Default::default());
        let in_flight = tokio::spawn({
            let link = link.clone();
            async move { link.call(&parts, Bytes::new()).await.is_err() }
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
        far.shutdown_background();
        let failed = tokio::time::timeout(Duration::from_secs(10), in_flight)
            .await
            .expect("the call in flight ended")
            .unwrap();
        assert!(failed, "the call in flight failed");
        assert!(link.is_broken());
    }
}

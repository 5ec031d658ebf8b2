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
//! connection does (telling apart those that never left the node, [`Failed::NotSent`]), and
//! the next call opens a new one. An owner that stops serving (its node or its engine stops)
//! tells the forwarding node to close the link, and answers every call that reaches it after
//! that as not the owner's, so none is lost between the two ends.
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
use tonic::body::Body;
use tonic::codegen::http;
use tonic::transport::Channel;

use crate::api::NOT_OWNER;

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
/// Calls of one link served at once. A forwarding node holds at most
/// `server.max_concurrent_requests` of its clients' calls (256 by default) over its links, so
/// this bounds only a peer gone wrong.
const SERVED_AT_ONCE: usize = 1024;

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
    /// The owner serves no further call on this link (it stops, or its engine did): the
    /// forwarding node closes the link, and the calls it sent meanwhile come back answered as
    /// not the owner's, to be sent to the next owner.
    #[prost(bool, tag = "2")]
    pub closing: bool,
}

/// Why a call on a link got no answer.
#[derive(Debug, thiserror::Error)]
pub enum Failed {
    /// The call never left this node (the link's stream never opened, or ended before the
    /// call's turn): no owner can have served it.
    #[error("the link to the owner could not take the call")]
    NotSent,
    /// The link failed after the call was sent: it may or may not have reached the owner.
    #[error("the link to the owner broke")]
    Broken,
}

/// A call waiting for its answer.
struct Waiting {
    answer: oneshot::Sender<Result<Answer, Failed>>,
    /// Whether the stream took it (it may have reached the owner).
    taken: bool,
}

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

/// A stream of batches: once an item arrives, the stream yields to the runtime once (the
/// other tasks ready to queue an item, such as calls that arrived in the same read of their
/// connections, queue it meanwhile), then takes every item waiting in the channel, up to the
/// batch limits, leaving out the ones no longer wanted. A lone call waits one turn of the
/// scheduler; calls under load share a message, one write on each side instead of one each.
struct Batches<T, B> {
    rx: mpsc::Receiver<T>,
    wrap: fn(Vec<T>) -> B,
    wanted: Wanted<T>,
    /// The first item of the next batch, held while the stream yields.
    first: Option<T>,
    pause: Option<Pin<Box<dyn Future<Output = ()> + Send + Sync>>>,
    /// The stream has yielded its turn since its last batch (items no longer wanted at the
    /// head of the channel cost no further turns).
    turned: bool,
}

impl<T, B> Batches<T, B> {
    fn new(rx: mpsc::Receiver<T>, wrap: fn(Vec<T>) -> B) -> Self {
        Self {
            rx,
            wrap,
            wanted: Box::new(|_| true),
            first: None,
            pause: None,
            turned: false,
        }
    }
}

impl<T: Weighed + Unpin, B> tokio_stream::Stream for Batches<T, B> {
    type Item = B;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<B>> {
        let first = loop {
            let first = match self.first.take() {
                Some(first) => first,
                None => match self.rx.poll_recv(cx) {
                    Poll::Ready(Some(first)) => {
                        if !self.turned {
                            self.pause = Some(Box::pin(tokio::task::yield_now()));
                        }
                        first
                    }
                    Poll::Ready(None) => return Poll::Ready(None),
                    Poll::Pending => return Poll::Pending,
                },
            };
            if let Some(pause) = self.pause.as_mut() {
                if pause.as_mut().poll(cx).is_pending() {
                    self.first = Some(first);
                    return Poll::Pending;
                }
                self.pause = None;
                self.turned = true;
            }
            // Asked after the turn: a caller may have given up during it.
            if (self.wanted)(&first) {
                break first;
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
        self.turned = false;
        Poll::Ready(Some((self.wrap)(batch)))
    }
}

/// A forwarding node's end of one link to the owner.
pub struct Link {
    next: AtomicU64,
    /// Calls queued or sent and not answered yet; `None` once the link broke.
    pending: Mutex<Option<HashMap<u64, Waiting>>>,
    /// Where calls queue for the stream; `None` once the link is closed ([`Link::close`]): the
    /// stream's request side then ends once the calls queued are sent, and with it the link.
    out: Mutex<Option<mpsc::Sender<Call>>>,
    broken: AtomicBool,
    /// The owner said it serves no further call ([`Answers::closing`]).
    owner_closed: AtomicBool,
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
            owner_closed: AtomicBool::new(false),
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
                link.upgrade().is_some_and(|link| link.take(call.id))
            }),
            ..Batches::new(rx, |calls| Calls { calls })
        }
    }

    /// Whether the caller of call `id` still waits for its answer; if so the stream takes the
    /// call, which from then on may reach the owner.
    fn take(&self, id: u64) -> bool {
        self.pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_mut()
            .and_then(|pending| pending.get_mut(&id))
            .map(|waiting| waiting.taken = true)
            .is_some()
    }

    /// Whether the link takes calls: neither broken nor closed.
    pub fn is_open(&self) -> bool {
        !self.is_broken() && self.out.lock().unwrap_or_else(|p| p.into_inner()).is_some()
    }

    /// Whether the owner closed the link: it is stopping, or its engine stopped.
    pub fn closed_by_owner(&self) -> bool {
        self.owner_closed.load(Ordering::Relaxed)
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
        // Answers are not bounded by the calls' limit (a list of a thousand live matches is
        // larger than any request): the owner's batches of answers are read whatever their
        // size, from the node holding the lease.
        let mut grpc = tonic::client::Grpc::new(channel)
            .max_decoding_message_size(usize::MAX)
            .max_encoding_message_size(message_limit(max_message));
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
                if batch.closing {
                    // The stream ends once the owner has answered what it was sent.
                    self.owner_closed.store(true, Ordering::Relaxed);
                    self.close();
                }
                let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
                let Some(pending) = pending.as_mut() else {
                    break;
                };
                for answer in batch.answers {
                    if let Some(waiting) = pending.remove(&answer.id) {
                        let _ = waiting.answer.send(Ok(answer));
                    }
                }
            }
            Ok::<(), tonic::Status>(())
        };
        if let Err(e) = served.await {
            tracing::debug!(error = %e, "cluster link closed");
        }
        self.broken.store(true, Ordering::Relaxed);
        // Every call still waiting fails now, as on a broken connection; one the stream never
        // took is known not to have been sent.
        let pending = self
            .pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        for waiting in pending.into_iter().flat_map(HashMap::into_values) {
            if !waiting.taken {
                let _ = waiting.answer.send(Err(Failed::NotSent));
            }
        }
    }

    /// Sends one call and waits for its answer.
    pub async fn call(
        &self,
        parts: &http::request::Parts,
        body: Bytes,
    ) -> Result<http::Response<Body>, Failed> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        match self
            .pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_mut()
        {
            Some(pending) => pending.insert(
                id,
                Waiting {
                    answer: tx,
                    taken: false,
                },
            ),
            None => return Err(Failed::NotSent),
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
            .ok_or(Failed::NotSent)?;
        out.send(call).await.map_err(|_| Failed::NotSent)?;
        let answer = rx.await.map_err(|_| Failed::Broken)??;
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
/// `stop` resolves (the node stops, or its engine did) no further call is served: the
/// forwarding node is told to close the link, each call that reaches this end after that is
/// answered UNAVAILABLE marked as not the owner's ([`NOT_OWNER`], as a stopping engine
/// answers), so the forwarding node sends it to the next owner knowing it was not served, and
/// the link ends once the forwarding node has closed its side and every call is answered.
pub async fn accept<S, F, E>(
    request: http::Request<Body>,
    max_message: usize,
    stop: E,
    serve: S,
) -> http::Response<Body>
where
    S: Fn(http::Request<Body>) -> F + Clone + Send + Sync + 'static,
    F: std::future::Future<Output = http::Response<Body>> + Send + 'static,
    E: std::future::Future<Output = ()> + Send + 'static,
{
    let service = Accept {
        serve,
        stop: Mutex::new(Some(Box::pin(stop))),
    };
    // Calls are bounded (a caller's message past `max_message` is refused before it is
    // forwarded); answers are not, as on the engine's own streams: one larger than a batch
    // goes in a batch of its own rather than failing the link and every call on it.
    tonic::server::Grpc::new(tonic_prost::ProstCodec::<Answers, Calls>::default())
        .max_decoding_message_size(message_limit(max_message))
        .max_encoding_message_size(usize::MAX)
        .streaming(service, request)
        .await
}

struct Accept<S> {
    serve: S,
    /// What ends the serving of calls; the one stream takes it.
    stop: Mutex<Option<Pin<Box<dyn std::future::Future<Output = ()> + Send>>>>,
}

/// What the owner's end queues for the stream back.
enum Reply {
    Answer(Answer),
    /// The owner serves no further call ([`Answers::closing`]).
    Closing,
}

impl Weighed for Reply {
    fn size(&self) -> usize {
        match self {
            Self::Answer(answer) => answer.size(),
            Self::Closing => 0,
        }
    }
}

/// The replies of a batch as one message.
fn answers(replies: Vec<Reply>) -> Result<Answers, tonic::Status> {
    let mut answers = Answers {
        answers: Vec::with_capacity(replies.len()),
        closing: false,
    };
    for reply in replies {
        match reply {
            Reply::Answer(answer) => answers.answers.push(answer),
            Reply::Closing => answers.closing = true,
        }
    }
    Ok(answers)
}

/// The answer to call `id`, which reached the owner's end after it stopped serving: not
/// served, as a node that does not own the queues answers a forwarded call.
fn not_served(id: u64) -> Answer {
    let mut headers = http::HeaderMap::new();
    let _ = tonic::Status::unavailable("this node no longer serves calls for the queues")
        .add_header(&mut headers);
    headers.insert(NOT_OWNER, http::HeaderValue::from_static("1"));
    headers.insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/grpc"),
    );
    Answer {
        id,
        status: 200,
        headers: to_headers(&headers),
        body: Bytes::new(),
        trailers: Bytes::new(),
    }
}

impl<S, F> tower::Service<tonic::Request<tonic::Streaming<Calls>>> for Accept<S>
where
    S: Fn(http::Request<Body>) -> F + Clone + Send + Sync + 'static,
    F: std::future::Future<Output = http::Response<Body>> + Send + 'static,
{
    type Response = tonic::Response<Batches<Reply, Result<Answers, tonic::Status>>>;
    type Error = tonic::Status;
    type Future = std::future::Ready<Result<Self::Response, tonic::Status>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), tonic::Status>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: tonic::Request<tonic::Streaming<Calls>>) -> Self::Future {
        let (tx, rx) = mpsc::channel(QUEUED);
        let mut calls = request.into_inner();
        let serve = self.serve.clone();
        let stop = self.stop.lock().unwrap_or_else(|p| p.into_inner()).take();
        let in_flight = Arc::new(tokio::sync::Semaphore::new(SERVED_AT_ONCE));
        tokio::spawn(async move {
            let mut stop = stop.unwrap_or_else(|| Box::pin(std::future::ready(())));
            // Serves until the forwarding node closes its side, the link breaks or `stop`;
            // calls already taken finish and their answers go before the stream ends.
            loop {
                let batch = tokio::select! {
                    biased;
                    () = &mut stop => break,
                    batch = calls.message() => batch,
                };
                let Ok(Some(batch)) = batch else {
                    return;
                };
                for call in batch.calls {
                    // At most [`SERVED_AT_ONCE`] calls of a link are served at once: past it
                    // the link is read no further (HTTP/2 flow control holds the sender back)
                    // until one is answered.
                    let Ok(place) = in_flight.clone().acquire_owned().await else {
                        return;
                    };
                    let serve = serve.clone();
                    let tx = tx.clone();
                    tokio::spawn(async move {
                        let id = call.id;
                        let response = serve(into_request(call)).await;
                        let _ = tx.send(Reply::Answer(answer(id, response).await)).await;
                        drop(place);
                    });
                }
            }
            // The forwarding node closes its side once it reads this; what it sent before is
            // answered as not served, for it to send to the next owner.
            if tx.send(Reply::Closing).await.is_err() {
                return;
            }
            while let Ok(Some(batch)) = calls.message().await {
                for call in batch.calls {
                    if tx.send(Reply::Answer(not_served(call.id))).await.is_err() {
                        return;
                    }
                }
            }
        });
        std::future::ready(Ok(tonic::Response::new(Batches::new(rx, answers))))
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
mod tests;

//! `ServeMatches` over shards: a game server's one stream registers it with every shard's
//! engine, each through that shard's front (which keeps it registered through that shard's
//! failovers), and every shard's matches reach it on that one stream, a whole message at a
//! time. Its capacity is split between the shards so that it never holds more matches at once
//! than it said it can.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use prost::Message;
use tonic::body::Body;
use tonic::codegen::http;

use super::Front;
use super::fanout::{copy_parts, frame, open_streams};
use super::framing::Framing;
use crate::proto;

/// Each shard's capacity for a game server that can hold `capacity` matches at once (0:
/// unlimited), over `shards` shards: unlimited stays unlimited everywhere; otherwise each shard
/// gets `capacity / shards`, the first `capacity % shards` one more, so the shares sum to
/// `capacity`. `None` for a shard whose share is 0: it is not asked (0 would mean unlimited).
#[must_use]
pub(super) fn shares(capacity: u32, shards: usize) -> Vec<Option<u32>> {
    if capacity == 0 {
        return vec![Some(0); shards];
    }
    let n = u32::try_from(shards).unwrap_or(u32::MAX).max(1);
    let (each, more) = (capacity / n, capacity % n);
    (0..shards)
        .map(|i| {
            let share = each + u32::from(u32::try_from(i).is_ok_and(|i| i < more));
            (share > 0).then_some(share)
        })
        .collect()
}

/// The game server's stream: the call `parts` with request `message` (the message without its
/// gRPC prefix) opened on each shard's front with that shard's share of the capacity, their
/// answers merged. `None` when the message does not decode: the home shard's engine refuses it
/// as one node would.
pub(super) async fn serve(
    fronts: &[Front],
    parts: &http::request::Parts,
    message: &[u8],
) -> Option<http::Response<Body>> {
    let request = proto::ServeMatchesRequest::decode(message).ok()?;
    let calls = shares(request.capacity, fronts.len())
        .into_iter()
        .map(|share| {
            let body = frame(&proto::ServeMatchesRequest {
                capacity: share?,
                ..request.clone()
            });
            Some(http::Request::from_parts(
                copy_parts(parts),
                axum::body::Body::from(body),
            ))
        })
        .collect();
    let opened = match open_streams(fronts, calls).await {
        Ok(opened) => opened,
        Err(answer) => return Some(answer),
    };
    let mut responses = opened.into_iter().map(|(_, response)| response);
    let (head, first) = responses.next()?.into_parts();
    let bodies = std::iter::once(first)
        .chain(responses.map(http::Response::into_body))
        .collect();
    Some(http::Response::from_parts(
        head,
        Body::new(Merged::new(bodies)),
    ))
}

/// One shard's response body and where it is in its messages.
struct Part {
    body: Body,
    framing: Framing,
}

/// The shards' response bodies as one: their frames in turn, moving from one shard to another
/// only between two whole messages. The first shard's stream to end (its trailers, an error,
/// or no status at all) ends it, with that status, and every other is dropped then: a game
/// server stays registered with every shard or with none, and calls again as it would on one
/// node.
pub(super) struct Merged {
    parts: Vec<Part>,
    /// The shard in the middle of a message, which alone is read until that message is whole.
    within: Option<usize>,
    /// The shard read first at the next message, so a busy shard does not starve the others.
    turn: usize,
}

impl Merged {
    pub(super) fn new(bodies: Vec<Body>) -> Self {
        Self {
            parts: bodies
                .into_iter()
                .map(|body| Part {
                    body,
                    framing: Framing::default(),
                })
                .collect(),
            within: None,
            turn: 0,
        }
    }

    /// Ends the stream with `frame`: every shard's stream is dropped now, so each shard's
    /// engine sees the game server go.
    fn end(
        &mut self,
        frame: http_body::Frame<Bytes>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, tonic::Status>>> {
        self.parts.clear();
        self.within = None;
        Poll::Ready(Some(Ok(frame)))
    }
}

/// `status` as a stream's trailers.
pub(super) fn trailers(status: &tonic::Status) -> http_body::Frame<Bytes> {
    let mut map = http::HeaderMap::new();
    if status.add_header(&mut map).is_err() {
        map.insert("grpc-status", http::HeaderValue::from(status.code() as i32));
    }
    http_body::Frame::trailers(map)
}

impl http_body::Body for Merged {
    type Data = Bytes;
    type Error = tonic::Status;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, tonic::Status>>> {
        let this = self.get_mut();
        let n = this.parts.len();
        if n == 0 {
            return Poll::Ready(None);
        }
        let (first, count) = match this.within {
            Some(shard) => (shard, 1),
            None => (this.turn, n),
        };
        for shard in (first..first + count).map(|i| i % n) {
            let part = &mut this.parts[shard];
            match Pin::new(&mut part.body).poll_frame(cx) {
                Poll::Pending => {}
                Poll::Ready(Some(Ok(frame))) => {
                    let Some(data) = frame.data_ref() else {
                        return this.end(frame);
                    };
                    part.framing.feed(data);
                    if part.framing.at_boundary() {
                        this.within = None;
                        this.turn = (shard + 1) % n;
                    } else {
                        this.within = Some(shard);
                    }
                    return Poll::Ready(Some(Ok(frame)));
                }
                Poll::Ready(Some(Err(status))) => return this.end(trailers(&status)),
                Poll::Ready(None) => {
                    return this.end(trailers(&tonic::Status::unavailable(
                        "a shard's stream ended without a status; call again",
                    )));
                }
            }
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.parts.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body::Body as _;
    use http_body_util::BodyExt;
    use tokio::sync::mpsc;

    type Sent = mpsc::Sender<Result<http_body::Frame<Bytes>, tonic::Status>>;

    /// A body whose frames the test sends, and the sender.
    fn body() -> (Sent, Body) {
        let (tx, rx) = mpsc::channel(16);
        let stream = tokio_stream::wrappers::ReceiverStream::new(rx);
        (tx, Body::new(http_body_util::StreamBody::new(stream)))
    }

    fn data(bytes: &[u8]) -> Result<http_body::Frame<Bytes>, tonic::Status> {
        Ok(http_body::Frame::data(Bytes::copy_from_slice(bytes)))
    }

    /// One gRPC message of `len` bytes, each `fill`.
    fn message(len: u8, fill: u8) -> Vec<u8> {
        let mut m = vec![0, 0, 0, 0, len];
        m.extend(std::iter::repeat_n(fill, usize::from(len)));
        m
    }

    /// The next frame of `merged`, or `None` when none is ready.
    fn ready(merged: &mut Merged) -> Option<Option<http_body::Frame<Bytes>>> {
        let waker = std::task::Waker::noop();
        let mut cx = Context::from_waker(waker);
        match Pin::new(merged).poll_frame(&mut cx) {
            Poll::Ready(frame) => Some(frame.map(|f| f.expect("frames, not errors"))),
            Poll::Pending => None,
        }
    }

    fn bytes_of(frame: Option<Option<http_body::Frame<Bytes>>>) -> Vec<u8> {
        frame
            .flatten()
            .and_then(|f| f.into_data().ok())
            .expect("a data frame")
            .to_vec()
    }

    fn status_of(frame: Option<Option<http_body::Frame<Bytes>>>) -> tonic::Status {
        let trailers = frame
            .flatten()
            .and_then(|f| f.into_trailers().ok())
            .expect("trailers");
        tonic::Status::from_header_map(&trailers).expect("a status")
    }

    #[test]
    fn capacity_is_split_so_the_shares_sum_to_it_and_a_zero_share_is_not_asked() {
        assert_eq!(shares(0, 3), [Some(0), Some(0), Some(0)], "unlimited");
        assert_eq!(shares(1, 2), [Some(1), None]);
        assert_eq!(shares(2, 2), [Some(1), Some(1)]);
        assert_eq!(shares(5, 3), [Some(2), Some(2), Some(1)]);
        assert_eq!(shares(2, 3), [Some(1), Some(1), None]);
        assert_eq!(shares(7, 1), [Some(7)]);
        for capacity in 1..40u32 {
            for shards in 1..7 {
                let split = shares(capacity, shards);
                assert_eq!(split.len(), shards);
                let sum: u32 = split.iter().flatten().sum();
                assert_eq!(sum, capacity, "{capacity} over {shards}");
                assert!(split.iter().flatten().all(|&s| s > 0), "0 is never sent");
                let asked: Vec<u32> = split.iter().flatten().copied().collect();
                assert!(asked.windows(2).all(|w| w[0] >= w[1] && w[0] - w[1] <= 1));
            }
        }
        assert_eq!(
            shares(u32::MAX, 2),
            [Some(u32::MAX / 2 + 1), Some(u32::MAX / 2)]
        );
    }

    #[tokio::test]
    async fn shards_take_turns_only_between_whole_messages() {
        let (a, body_a) = body();
        let (b, body_b) = body();
        let mut merged = Merged::new(vec![body_a, body_b]);
        let long = message(6, 1);
        // Shard a's message comes in two frames; shard b's whole one waits until a's is whole.
        a.send(data(&long[..4])).await.unwrap();
        b.send(data(&message(2, 2))).await.unwrap();
        assert_eq!(bytes_of(ready(&mut merged)), &long[..4]);
        assert!(
            ready(&mut merged).is_none(),
            "b waits for the rest of a's message"
        );
        a.send(data(&long[4..])).await.unwrap();
        a.send(data(&message(1, 3))).await.unwrap();
        assert_eq!(bytes_of(ready(&mut merged)), &long[4..]);
        // Then b's turn, though a has another message ready.
        assert_eq!(bytes_of(ready(&mut merged)), message(2, 2));
        assert_eq!(bytes_of(ready(&mut merged)), message(1, 3));
        assert!(ready(&mut merged).is_none());
    }

    #[tokio::test]
    async fn the_first_stream_to_end_ends_the_merged_one_with_its_status_and_drops_the_rest() {
        let (a, body_a) = body();
        let (b, body_b) = body();
        let mut merged = Merged::new(vec![body_a, body_b]);
        let mut refused = http::HeaderMap::new();
        tonic::Status::permission_denied("not this server")
            .add_header(&mut refused)
            .unwrap();
        b.send(Ok(http_body::Frame::trailers(refused)))
            .await
            .unwrap();
        let status = status_of(ready(&mut merged));
        assert_eq!(status.code(), tonic::Code::PermissionDenied);
        assert_eq!(status.message(), "not this server");
        assert!(a.is_closed(), "the other shard's stream is dropped at once");
        assert!(merged.is_end_stream());
        assert!(matches!(ready(&mut merged), Some(None)));

        // A shard's stream that breaks off, or stops with no status, ends it too.
        let (a, body_a) = body();
        let (b, body_b) = body();
        let mut merged = Merged::new(vec![body_a, body_b]);
        a.send(Err(tonic::Status::unavailable("gone")))
            .await
            .unwrap();
        assert_eq!(
            status_of(ready(&mut merged)).code(),
            tonic::Code::Unavailable
        );
        assert!(b.is_closed());
        let (a, body_a) = body();
        let (_b, body_b) = body();
        let mut merged = Merged::new(vec![body_a, body_b]);
        drop(a);
        assert_eq!(
            status_of(ready(&mut merged)).code(),
            tonic::Code::Unavailable
        );
    }

    #[tokio::test]
    async fn dropping_the_merged_stream_drops_every_shard_s_stream() {
        let (a, body_a) = body();
        let (b, body_b) = body();
        let mut merged = Merged::new(vec![body_a, body_b]);
        a.send(data(&message(1, 1))).await.unwrap();
        assert!(merged.frame().await.is_some());
        drop(merged);
        assert!(a.is_closed() && b.is_closed());
    }
}

//! `WatchEvents` over shards: each shard keeps its own event log, and a watcher's one stream
//! carries every shard's events in cursor order, as one node's log would. Each shard's cursors
//! compare with the others' ([`crate::store::event_clock`]), and each shard's stream, opened
//! through that shard's front, also says how far its log is closed (an event of no kind and no
//! time, [`crate::api::EVENTS_CLOSING`]): no later event of that shard has a cursor at or below
//! it. An event is passed on once every other shard has a later event waiting or is closed
//! past it, so a watcher that resumes after the last cursor it got misses nothing and is sent
//! nothing twice. A shard's stream that ends (its owner changed, the node stops) ends the
//! watcher's with its status, and the watcher resumes as it would on one node.

use bytes::{Buf, Bytes, BytesMut};
use http_body_util::BodyExt;
use prost::Message;
use tokio::sync::mpsc;
use tokio_stream::{StreamExt, StreamMap, wrappers::ReceiverStream};
use tonic::body::Body;
use tonic::codegen::http;

use super::Front;
use super::fanout::{copy_parts, frame, open_streams, refuse};
use super::serve::trailers;
use crate::api::{EVENTS_CLOSING, EVENTS_LAST, is_closing_mark};
use crate::proto;

/// Several shards' event streams as one, in cursor order (pure).
#[derive(Debug)]
pub(super) struct Merge {
    shards: Vec<Shard>,
    /// The last cursor passed on.
    last: u64,
}

#[derive(Debug)]
struct Shard {
    /// The shard's next event, once read.
    next: Option<proto::Event>,
    /// No event of this shard still to come has a cursor at or below this.
    closed: u64,
}

impl Merge {
    /// `shards` streams, each of events after `after`.
    pub(super) fn new(shards: usize, after: u64) -> Self {
        Self {
            shards: (0..shards)
                .map(|_| Shard {
                    next: None,
                    closed: after,
                })
                .collect(),
            last: after,
        }
    }

    /// Whether shard `shard` is to be read: it has no event waiting.
    pub(super) fn wants(&self, shard: usize) -> bool {
        self.shards[shard].next.is_none()
    }

    /// What shard `shard` sent next: an event (read only while [`Merge::wants`] it), or a
    /// closing mark.
    pub(super) fn push(&mut self, shard: usize, event: proto::Event) {
        let s = &mut self.shards[shard];
        s.closed = s.closed.max(event.cursor);
        if !is_closing_mark(&event) {
            s.next = Some(event);
        }
    }

    /// The next event in cursor order, once no shard can still send an earlier one.
    pub(super) fn pop(&mut self) -> Option<proto::Event> {
        let (at, cursor) = self
            .shards
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.next.as_ref().map(|e| (i, e.cursor)))
            .min_by_key(|&(_, cursor)| cursor)?;
        let settled = self
            .shards
            .iter()
            .all(|s| s.next.is_some() || s.closed >= cursor);
        if !settled {
            return None;
        }
        if cursor <= self.last {
            // A shard's clock ran further behind another's than a new owner's lead allows.
            tracing::warn!(
                cursor,
                after = self.last,
                "a shard's event came after a later cursor of another shard"
            );
        }
        self.last = self.last.max(cursor);
        self.shards[at].next.take()
    }
}

/// What a shard's stream gave next.
enum Got {
    Event(proto::Event),
    /// It ended, with this status.
    End(tonic::Status),
}

/// The watcher's stream: the call `parts` with request `message` (the message without its gRPC
/// prefix) opened on each shard's front, their events merged. `None` when the message does
/// not decode: the home shard's engine refuses it as one node would.
pub(super) async fn watch(
    fronts: &[Front],
    shards: &crate::cluster::shards::Shards,
    parts: &http::request::Parts,
    message: &[u8],
) -> Option<http::Response<Body>> {
    let request = proto::WatchEventsRequest::decode(message).ok()?;
    let body = frame(&request);
    let calls = fronts
        .iter()
        .map(|_| {
            let mut call = copy_parts(parts);
            call.headers
                .insert(EVENTS_CLOSING, http::HeaderValue::from_static("1"));
            Some(http::Request::from_parts(
                call,
                axum::body::Body::from(body.clone()),
            ))
        })
        .collect();
    let opened = match open_streams(fronts, calls).await {
        Ok(opened) => opened,
        Err(answer) => return Some(answer),
    };
    // An owner of an older build (a rolling upgrade) sends no closing marks: its shard's
    // events could not be put in order with the others'.
    if let Some((shard, _)) = opened
        .iter()
        .find(|(_, r)| !r.headers().contains_key(EVENTS_LAST))
    {
        return Some(refuse(tonic::Status::unavailable(format!(
            "the owner of shard {:?} runs an older build that cannot merge its events with the \
             other shards'; retry once every node runs this build",
            shards.keyspace(*shard)
        ))));
    }
    // A cursor past every shard's last event is one this deployment never gave (a Redis
    // restored from an older backup, a failover that lost writes): refused as one node does.
    let last = opened
        .iter()
        .filter_map(|(_, r)| {
            r.headers()
                .get(EVENTS_LAST)?
                .to_str()
                .ok()?
                .parse::<u64>()
                .ok()
        })
        .max()
        .unwrap_or(0);
    if request.after_cursor > last {
        return Some(refuse(tonic::Status::out_of_range(format!(
            "after_cursor: {} is past the last event written ({last}); resume from {last} or 0",
            request.after_cursor
        ))));
    }
    let mut responses = opened.into_iter().map(|(_, response)| response);
    let (mut head, first) = responses.next()?.into_parts();
    head.headers.remove(EVENTS_LAST);
    let bodies: Vec<Body> = std::iter::once(first)
        .chain(responses.map(http::Response::into_body))
        .collect();
    let (tx, rx) = mpsc::channel(16);
    tokio::spawn(merge(bodies, request.after_cursor, tx));
    let body = http_body_util::StreamBody::new(ReceiverStream::new(rx));
    Some(http::Response::from_parts(head, Body::new(body)))
}

type Out = mpsc::Sender<Result<http_body::Frame<Bytes>, tonic::Status>>;

/// Passes the shards' events on to `out` in cursor order, reading only the shards that have
/// none waiting, until one shard's stream ends or the watcher goes.
async fn merge(bodies: Vec<Body>, after: u64, out: Out) {
    let mut merge = Merge::new(bodies.len(), after);
    let mut parked: Vec<Option<ReceiverStream<Got>>> = Vec::with_capacity(bodies.len());
    let mut reading = StreamMap::new();
    for (shard, body) in bodies.into_iter().enumerate() {
        let (tx, rx) = mpsc::channel(16);
        tokio::spawn(read(body, tx));
        reading.insert(shard, ReceiverStream::new(rx));
        parked.push(None);
    }
    loop {
        while let Some(event) = merge.pop() {
            if out
                .send(Ok(http_body::Frame::data(frame(&event))))
                .await
                .is_err()
            {
                return;
            }
            // The shard whose event went is read again.
            for (i, p) in parked.iter_mut().enumerate() {
                if merge.wants(i)
                    && let Some(stream) = p.take()
                {
                    reading.insert(i, stream);
                }
            }
        }
        let got = tokio::select! {
            got = reading.next() => got,
            () = out.closed() => return,
        };
        let Some((shard, got)) = got else {
            let _ = out.send(Ok(trailers(&unavailable()))).await;
            return;
        };
        match got {
            Got::Event(event) => {
                merge.push(shard, event);
                if !merge.wants(shard) {
                    parked[shard] = reading.remove(&shard);
                }
            }
            Got::End(status) => {
                let _ = out.send(Ok(trailers(&status))).await;
                return;
            }
        }
    }
}

/// Reads one shard's stream into `tx`, a message at a time, until it ends (its status last) or
/// the merge goes.
async fn read(mut body: Body, tx: mpsc::Sender<Got>) {
    let mut buffer = BytesMut::new();
    let end = loop {
        let frame = tokio::select! {
            frame = body.frame() => frame,
            () = tx.closed() => return,
        };
        let data = match frame {
            None => break unavailable(),
            Some(Err(status)) => break status,
            Some(Ok(frame)) => match frame.into_data() {
                Ok(data) => data,
                Err(frame) => {
                    break frame
                        .trailers_ref()
                        .and_then(tonic::Status::from_header_map)
                        .unwrap_or_else(unavailable);
                }
            },
        };
        buffer.extend_from_slice(&data);
        loop {
            match next_message(&mut buffer) {
                Ok(Some(event)) => {
                    if tx.send(Got::Event(event)).await.is_err() {
                        return;
                    }
                }
                Ok(None) => break,
                Err(status) => {
                    let _ = tx.send(Got::End(status)).await;
                    return;
                }
            }
        }
    };
    let _ = tx.send(Got::End(end)).await;
}

fn unavailable() -> tonic::Status {
    tonic::Status::unavailable(
        "a shard's stream ended without a status; resume after the last cursor",
    )
}

/// The next whole event in `buffer` (taken out of it), if one is there.
fn next_message(buffer: &mut BytesMut) -> Result<Option<proto::Event>, tonic::Status> {
    let [flag, a, b, c, d, ..] = buffer[..] else {
        return Ok(None);
    };
    if flag != 0 {
        return Err(tonic::Status::internal(
            "a shard's stream sent a compressed message",
        ));
    }
    let len = u32::from_be_bytes([a, b, c, d]) as usize;
    if buffer.len() < 5 + len {
        return Ok(None);
    }
    buffer.advance(5);
    let message = buffer.split_to(len);
    proto::Event::decode(message.freeze())
        .map(Some)
        .map_err(|e| tonic::Status::internal(format!("a shard's event does not decode: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(cursor: u64) -> proto::Event {
        proto::Event {
            cursor,
            kind: proto::EventKind::MatchFormed as i32,
            unix: 1.0,
            ..proto::Event::default()
        }
    }

    fn mark(cursor: u64) -> proto::Event {
        proto::Event {
            cursor,
            ..proto::Event::default()
        }
    }

    fn drain(merge: &mut Merge) -> Vec<u64> {
        std::iter::from_fn(|| merge.pop())
            .map(|e| e.cursor)
            .collect()
    }

    #[test]
    fn an_event_goes_once_every_other_shard_is_past_it_or_has_a_later_one() {
        let mut merge = Merge::new(3, 10);
        merge.push(0, event(20));
        assert_eq!(
            drain(&mut merge),
            Vec::<u64>::new(),
            "1 and 2 may still send earlier"
        );
        assert!(!merge.wants(0) && merge.wants(1) && merge.wants(2));
        merge.push(1, event(15));
        merge.push(2, mark(12));
        assert_eq!(drain(&mut merge), Vec::<u64>::new(), "2 may still send 13");
        merge.push(2, mark(25));
        assert_eq!(drain(&mut merge), vec![15], "1 has nothing newer read yet");
        merge.push(1, mark(30));
        assert_eq!(drain(&mut merge), vec![20]);
        merge.push(0, event(26));
        assert_eq!(
            drain(&mut merge),
            Vec::<u64>::new(),
            "2 is closed only to 25"
        );
        merge.push(2, event(27));
        assert_eq!(drain(&mut merge), vec![26]);
        merge.push(0, mark(40));
        assert_eq!(drain(&mut merge), vec![27]);
        assert!((0..3).all(|s| merge.wants(s)));
    }

    #[test]
    fn shards_interleave_into_one_increasing_stream_whatever_order_they_are_read_in() {
        // Three shards' logs, their marks between events; read in every rotation.
        let logs: Vec<Vec<proto::Event>> = vec![
            vec![event(3), mark(5), event(9), mark(30)],
            vec![mark(4), event(6), event(7), mark(30)],
            vec![event(1), event(8), event(12), mark(30)],
        ];
        for first in 0..3 {
            let mut merge = Merge::new(3, 0);
            let mut at = [0usize; 3];
            let mut got = Vec::new();
            for turn in first..first + 100 {
                let s = turn % 3;
                if merge.wants(s) && at[s] < logs[s].len() {
                    merge.push(s, logs[s][at[s]].clone());
                    at[s] += 1;
                }
                got.extend(drain(&mut merge));
            }
            assert_eq!(
                got,
                vec![1, 3, 6, 7, 8, 9, 12],
                "starting with shard {first}"
            );
        }
    }

    #[test]
    fn a_message_split_over_frames_is_read_once_whole() {
        let mut bytes = BytesMut::new();
        let (a, b) = (frame(&event(7)), frame(&mark(9)));
        bytes.extend_from_slice(&a[..3]);
        assert_eq!(next_message(&mut bytes).unwrap(), None);
        bytes.extend_from_slice(&a[3..]);
        bytes.extend_from_slice(&b[..6]);
        assert_eq!(next_message(&mut bytes).unwrap(), Some(event(7)));
        assert_eq!(next_message(&mut bytes).unwrap(), None);
        bytes.extend_from_slice(&b[6..]);
        let got = next_message(&mut bytes).unwrap().unwrap();
        assert!(is_closing_mark(&got) && got.cursor == 9);
        assert!(bytes.is_empty());
        let mut compressed = BytesMut::from(&[1u8, 0, 0, 0, 0][..]);
        assert_eq!(
            next_message(&mut compressed).unwrap_err().code(),
            tonic::Code::Internal
        );
    }
}

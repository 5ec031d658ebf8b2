//! Asking every shard: a call about no one queue goes to each shard's front as it came, and
//! the answers are merged into the one a single node gives ([`crate::cluster::merge`]).

use bytes::{BufMut, Bytes, BytesMut};
use http_body_util::BodyExt;
use prost::Message;
use tonic::body::Body;
use tonic::codegen::http;
use tower::Service;

use super::Front;

/// The call as it came (method, path, headers, the client's address), with its message.
fn copy(parts: &http::request::Parts, message: &Bytes) -> http::Request<axum::body::Body> {
    http::Request::from_parts(copy_parts(parts), axum::body::Body::from(message.clone()))
}

/// The answer of one shard's front to the call: its message, or its status.
pub(super) async fn ask<M: Message + Default>(
    front: &Front,
    parts: &http::request::Parts,
    message: &Bytes,
) -> Result<M, tonic::Status> {
    ask_head(front, parts, message)
        .await
        .map(|(_, answer)| answer)
}

/// [`ask`] with the answer's headers.
pub(super) async fn ask_head<M: Message + Default>(
    front: &Front,
    parts: &http::request::Parts,
    message: &Bytes,
) -> Result<(http::HeaderMap, M), tonic::Status> {
    let mut front = front.clone();
    let response = match front.call(copy(parts, message)).await {
        Ok(response) => response,
        Err(never) => match never {},
    };
    if let Some(status) = tonic::Status::from_header_map(response.headers())
        && status.code() != tonic::Code::Ok
    {
        return Err(status);
    }
    let (head, body) = response.into_parts();
    let collected = body
        .collect()
        .await
        .map_err(|e| tonic::Status::unavailable(format!("a shard's answer broke off: {e}")))?;
    if let Some(status) = collected
        .trailers()
        .and_then(tonic::Status::from_header_map)
        && status.code() != tonic::Code::Ok
    {
        return Err(status);
    }
    let body = collected.to_bytes();
    match body.as_ref() {
        [0, a, b, c, d, rest @ ..]
            if u32::from_be_bytes([*a, *b, *c, *d]) as usize == rest.len() =>
        {
            M::decode(rest)
                .map(|answer| (head.headers, answer))
                .map_err(|e| {
                    tonic::Status::internal(format!("a shard's answer does not decode: {e}"))
                })
        }
        _ => Err(tonic::Status::internal(
            "a shard's answer is not one uncompressed message",
        )),
    }
}

/// The answers of every front, in order; the first refusal when any refused.
pub(super) async fn ask_all<M: Message + Default + 'static>(
    fronts: &[Front],
    parts: &http::request::Parts,
    message: &Bytes,
) -> Result<Vec<M>, tonic::Status> {
    let each = vec![Some(message.clone()); fronts.len()];
    let answers = ask_each::<M>(fronts, parts, each).await?;
    Ok(answers.into_iter().flatten().map(|(_, a)| a).collect())
}

/// The answers of every front to its own message (`None`: that front is not asked), at once
/// and in order, with their headers; the first refusal when any refused.
pub(super) async fn ask_each<M: Message + Default + 'static>(
    fronts: &[Front],
    parts: &http::request::Parts,
    messages: Vec<Option<Bytes>>,
) -> Result<Vec<Option<(http::HeaderMap, M)>>, tonic::Status> {
    let asked: Vec<_> = fronts
        .iter()
        .zip(messages)
        .map(|(front, message)| {
            let message = message?;
            let (front, parts) = (front.clone(), copy_parts(parts));
            Some(tokio::spawn(async move {
                ask_head::<M>(&front, &parts, &message).await
            }))
        })
        .collect();
    let mut answers = Vec::with_capacity(asked.len());
    let mut refused = None;
    for task in asked {
        let Some(task) = task else {
            answers.push(None);
            continue;
        };
        match task.await {
            Ok(Ok(answer)) => answers.push(Some(answer)),
            Ok(Err(status)) => {
                refused.get_or_insert(status);
            }
            Err(e) => {
                refused.get_or_insert(tonic::Status::internal(format!(
                    "asking a shard failed: {e}"
                )));
            }
        }
    }
    match refused {
        Some(status) => Err(status),
        None => Ok(answers),
    }
}

/// Opens a stream on each front given a call (`None`: that front is not asked), at once: their
/// responses in front order, each with its front's place; or, when one refuses (or ends) at
/// once, that answer, the others' openings dropped.
pub(super) async fn open_streams(
    fronts: &[Front],
    calls: Vec<Option<http::Request<axum::body::Body>>>,
) -> Result<Vec<(usize, http::Response<Body>)>, http::Response<Body>> {
    // Opened together; when the caller goes or one shard refuses, dropping the set aborts the
    // others' openings.
    let mut opening = tokio::task::JoinSet::new();
    for (shard, (front, call)) in fronts.iter().zip(calls).enumerate() {
        let Some(call) = call else { continue };
        let mut front = front.clone();
        opening.spawn(async move {
            match front.call(call).await {
                Ok(response) => (shard, response),
                Err(never) => match never {},
            }
        });
    }
    let mut opened = Vec::with_capacity(opening.len());
    while let Some(joined) = opening.join_next().await {
        let (shard, response) = joined.map_err(|e| {
            refuse(tonic::Status::internal(format!(
                "opening a shard's stream failed: {e}"
            )))
        })?;
        if response.headers().contains_key("grpc-status") {
            // Refused (or ended) at once: so is the whole call; the others are dropped.
            return Err(response);
        }
        opened.push((shard, response));
    }
    opened.sort_by_key(|(shard, _)| *shard);
    Ok(opened)
}

/// `message` as one uncompressed gRPC message, its 5-byte prefix included: a request as a
/// front reads it.
pub(super) fn frame(message: &impl Message) -> Bytes {
    let encoded = message.encode_to_vec();
    let mut frame = BytesMut::with_capacity(encoded.len() + 5);
    frame.put_u8(0);
    frame.put_u32(encoded.len() as u32);
    frame.put_slice(&encoded);
    frame.freeze()
}

/// `parts` without its extensions other than the client's address (which [`copy`] keeps).
pub(super) fn copy_parts(parts: &http::request::Parts) -> http::request::Parts {
    let (mut copied, ()) = http::Request::new(()).into_parts();
    copied.method = parts.method.clone();
    copied.uri = parts.uri.clone();
    copied.version = parts.version;
    copied.headers = parts.headers.clone();
    // A shard may be sent a message of its own ([`ask_each`]).
    copied.headers.remove(http::header::CONTENT_LENGTH);
    if let Some(info) = parts
        .extensions
        .get::<tonic::transport::server::TcpConnectInfo>()
    {
        copied.extensions.insert(info.clone());
    }
    copied
}

/// `message` as a whole gRPC answer: the message, then status OK.
pub(super) fn answer(message: &impl Message) -> http::Response<Body> {
    let mut trailers = http::HeaderMap::new();
    trailers.insert("grpc-status", http::HeaderValue::from_static("0"));
    let frames = [
        Ok::<_, std::convert::Infallible>(http_body::Frame::data(frame(message))),
        Ok(http_body::Frame::trailers(trailers)),
    ];
    let body = http_body_util::StreamBody::new(tokio_stream::iter(frames));
    let mut response = http::Response::new(Body::new(body));
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/grpc"),
    );
    response
}

/// `status` as a trailers-only gRPC answer.
pub(super) fn refuse(status: tonic::Status) -> http::Response<Body> {
    status.into_http::<Body>()
}

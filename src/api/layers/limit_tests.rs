//! The rate-limit layer's cap on calls in flight and the message-size layer's bound on how long
//! a request body takes, through the layers themselves.

use std::convert::Infallible;
use std::sync::Arc;

use http_body_util::{BodyExt, StreamBody};
use tokio::sync::{Semaphore, mpsc};
use tokio_stream::wrappers::ReceiverStream;

use super::*;
use crate::auth::{Identity, Role};
use crate::limits::{InFlightConfig, RateLimitConfig};

const ENTER: &str = "/matchmaker.v1.ClientService/EnterQueue";

fn call_as(sub: &str, role: Role) -> http::Request<()> {
    let mut request = http::Request::builder().uri(ENTER).body(()).unwrap();
    request.extensions_mut().insert(Identity {
        sub: sub.into(),
        role,
    });
    request
}

fn refusal_of(response: &http::Response<tonic::body::Body>) -> Status {
    Status::from_header_map(response.headers()).expect("a refusal")
}

#[tokio::test]
async fn a_caller_past_its_calls_in_flight_is_refused_until_an_answer_starts() {
    // Unlimited rate: only the calls in flight count here.
    let config = RateLimitConfig {
        player: 0.0,
        max_in_flight: InFlightConfig {
            player: 2,
            ..InFlightConfig::default()
        },
        ..RateLimitConfig::default()
    };
    let limiter = RateLimiter::from_config(&config, true, "mm").expect("an in-flight limit");
    // Each call is answered when the test adds a permit; its answer is a stream that starts
    // then and goes on (like WatchTicket's).
    let answers = Arc::new(Semaphore::new(0));
    let inner = tower::service_fn({
        let answers = answers.clone();
        move |_: http::Request<()>| {
            let answers = answers.clone();
            async move {
                answers.acquire().await.unwrap().forget();
                let stream = tokio_stream::pending::<Result<http_body::Frame<Bytes>, Status>>();
                Ok::<_, Infallible>(http::Response::new(tonic::body::Body::new(
                    StreamBody::new(stream),
                )))
            }
        }
    });
    let mut layer = RateLimitLayer::new(limiter).layer(inner);
    let admitted = |call: &RefusedOr<_, _>| matches!(call, RefusedOr::Inner { .. });

    let first = layer.call(call_as("p1", Role::Player));
    let second = layer.call(call_as("p1", Role::Player));
    assert!(admitted(&first) && admitted(&second));
    let refused = layer.call(call_as("p1", Role::Player));
    assert!(!admitted(&refused));
    let status = refusal_of(&refused.await.unwrap());
    assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status:?}");
    assert!(
        status
            .message()
            .contains("(rate_limit.max_in_flight.player)"),
        "{status:?}"
    );
    // Another player, and an unlimited admin however many calls it has waiting.
    let other = layer.call(call_as("p2", Role::Player));
    assert!(admitted(&other));
    let admin: Vec<_> = (0..10)
        .map(|_| layer.call(call_as("ops", Role::Admin)))
        .collect();
    assert!(admin.iter().all(admitted));

    // The first call's answer starts: its slot comes back, while its stream goes on.
    answers.add_permits(1);
    let stream = first.await.unwrap();
    assert!(!stream.body().is_end_stream());
    let third = layer.call(call_as("p1", Role::Player));
    assert!(admitted(&third), "an open stream holds no slot");
    assert!(!admitted(&layer.call(call_as("p1", Role::Player))));
    // A call its caller gave up on gives its slot back too.
    drop(second);
    assert!(admitted(&layer.call(call_as("p1", Role::Player))));
    drop(stream);
}

/// What the service behind the message-size layer read of a body: its length, or the refusal
/// the body ended with.
async fn read_body(request: http::Request<LimitedBody<BodyOf>>) -> Result<usize, Status> {
    match request.into_body().collect().await {
        Ok(body) => Ok(body.to_bytes().len()),
        Err(e) => Err(*e.downcast::<Status>().expect("a status")),
    }
}

type BodyOf = StreamBody<ReceiverStream<Result<http_body::Frame<Bytes>, Infallible>>>;

/// A request body the test sends, frame by frame; it ends when the sender is dropped.
fn body_to(
    path: &str,
) -> (
    mpsc::Sender<Result<http_body::Frame<Bytes>, Infallible>>,
    http::Request<BodyOf>,
) {
    let (tx, rx) = mpsc::channel(4);
    let request = http::Request::builder()
        .uri(path)
        .body(StreamBody::new(ReceiverStream::new(rx)))
        .unwrap();
    (tx, request)
}

fn message(length: u32) -> Result<http_body::Frame<Bytes>, Infallible> {
    let mut m = vec![0];
    m.extend_from_slice(&length.to_be_bytes());
    m.resize(5 + length as usize, 7);
    Ok(http_body::Frame::data(Bytes::from(m)))
}

/// On paused time: the bound is a tokio timer, so the times compared are its own.
#[tokio::test(start_paused = true)]
async fn a_request_body_that_does_not_end_in_time_is_refused_at_the_body_bound() {
    let bound = Duration::from_secs(3);
    let mut layer =
        MessageSizeLayer::new(1024, Some(bound)).layer(tower::service_fn(|r| async move {
            Ok::<_, Infallible>(read_body(r).await)
        }));

    // The headers came, the message never does.
    let (_silent, request) = body_to(ENTER);
    let started = tokio::time::Instant::now();
    let status = tokio::time::timeout(bound * 2, layer.call(request))
        .await
        .expect("refused at the body bound")
        .unwrap()
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::DeadlineExceeded, "{status:?}");
    assert_eq!(
        status.message(),
        "the request message did not arrive within server.request_body_timeout_ms (3000 ms)"
    );
    assert_eq!(started.elapsed(), bound);

    // The message came, but the body never ends: tonic reads it to its end before the handler.
    let (unended, request) = body_to(ENTER);
    unended.send(message(10)).await.unwrap();
    let status = tokio::time::timeout(bound * 2, layer.call(request))
        .await
        .expect("refused at the body bound")
        .unwrap()
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::DeadlineExceeded, "{status:?}");

    // A body that ends in time is read whole, and nothing fires after it.
    let (sender, request) = body_to(ENTER);
    sender.send(message(10)).await.unwrap();
    drop(sender);
    assert_eq!(layer.call(request).await.unwrap().unwrap(), 15);

    // Health and reflection hold no slot of the limits: their bodies have no such bound.
    let (_silent, request) = body_to("/grpc.reflection.v1.ServerReflection/ServerReflectionInfo");
    let open = tokio::time::timeout(bound * 20, layer.call(request)).await;
    assert!(open.is_err(), "a reflection stream was cut: {open:?}");
    // Nor has any body with the bound off.
    let mut unbounded =
        MessageSizeLayer::new(1024, None).layer(tower::service_fn(|r| async move {
            Ok::<_, Infallible>(read_body(r).await)
        }));
    let (_silent, request) = body_to(ENTER);
    let waited = tokio::time::timeout(bound * 20, unbounded.call(request)).await;
    assert!(waited.is_err(), "{waited:?}");
}

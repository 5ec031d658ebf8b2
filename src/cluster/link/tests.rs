use super::*;
use std::convert::Infallible;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

fn call(id: u64, body: usize) -> Call {
    Call {
        id,
        path: "/matchmaker.v1.ClientService/GetPlayer".into(),
        headers: Bytes::new(),
        body: Bytes::from(vec![0u8; body]),
    }
}

/// One poll of a stream, whatever it answers.
async fn poll_once<S: tokio_stream::Stream + Unpin>(s: &mut S) -> Poll<Option<S::Item>> {
    std::future::poll_fn(|cx| Poll::Ready(Pin::new(&mut *s).poll_next(cx))).await
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

/// Once a call arrives the stream yields one turn before it takes its batch: a call queued in
/// that turn (another caller's, ready at the same time) goes in the same message.
#[tokio::test]
async fn calls_queued_while_the_stream_yields_its_turn_share_the_message() {
    let (tx, rx) = mpsc::channel(QUEUED);
    let mut batches = Batches::new(rx, |calls| Calls { calls });
    assert!(
        poll_once(&mut batches).await.is_pending(),
        "nothing queued yet"
    );
    tx.send(call(1, 10)).await.unwrap();
    assert!(
        poll_once(&mut batches).await.is_pending(),
        "the first call waits one turn"
    );
    tx.send(call(2, 10)).await.unwrap();
    tokio::task::yield_now().await;
    let ids = |b: Calls| b.calls.iter().map(|c| c.id).collect::<Vec<_>>();
    match poll_once(&mut batches).await {
        Poll::Ready(Some(batch)) => assert_eq!(ids(batch), [1, 2]),
        other => panic!(
            "expected one batch of both calls, got {:?}",
            other.map(|b| b.map(ids))
        ),
    }
    drop(tx);
    assert!(matches!(poll_once(&mut batches).await, Poll::Ready(None)));
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
        owner_closed: AtomicBool::new(false),
    });
    let out = link.out.lock().unwrap().clone().unwrap();
    let mut batches = link.batches(rx);
    let (waiting, gave_up, also_waiting) = (1, 2, 3);
    // A caller waiting for call `id`'s answer.
    let wait_for = |id| {
        let (tx, _rx) = oneshot::channel();
        link.pending.lock().unwrap().as_mut().unwrap().insert(
            id,
            Waiting {
                answer: tx,
                taken: false,
            },
        );
    };
    for id in [waiting, gave_up, also_waiting] {
        wait_for(id);
        out.send(call(id, 10)).await.unwrap();
    }
    // The caller's future is dropped: its entry goes, as `Forget` takes it.
    drop(Forget {
        link: &link,
        id: gave_up,
    });
    let ids = |b: Calls| b.calls.iter().map(|c| c.id).collect::<Vec<_>>();
    assert_eq!(ids(batches.next().await.unwrap()), [waiting, also_waiting]);
    // A caller that gives up during the stream's turn, its call the first of the next batch.
    let (gives_up, stays) = (5, 6);
    wait_for(gives_up);
    wait_for(stays);
    out.send(call(gives_up, 10)).await.unwrap();
    assert!(poll_once(&mut batches).await.is_pending());
    drop(Forget {
        link: &link,
        id: gives_up,
    });
    out.send(call(stays, 10)).await.unwrap();
    tokio::task::yield_now().await;
    assert_eq!(ids(batches.next().await.unwrap()), [stays]);
    // Nobody waits for anything once the link broke.
    wait_for(4);
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
async fn serve_link<S, F>(runtime: &tokio::runtime::Handle, serve: S) -> (String, CancellationToken)
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
            let stop = closing.cancelled_owned();
            Ok::<_, Infallible>(accept(request.map(Body::new), 1 << 20, stop, serve).await)
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

#[tokio::test]
async fn an_answer_larger_than_a_calls_limit_comes_back_whole_and_the_link_goes_on() {
    // The far end answers with as many MiB as the call's first byte says.
    let here = tokio::runtime::Handle::current();
    let (addr, _closing) = serve_link(&here, |request: http::Request<Body>| async move {
        let body = request.into_body().collect().await.unwrap().to_bytes();
        let size = usize::from(body[0]) << 20;
        http::Response::builder()
            .header("content-type", "application/grpc")
            .body(Body::new(http_body_util::Full::new(Bytes::from(
                vec![7u8; size + 1],
            ))))
            .unwrap()
    })
    .await;
    let link = Link::open(channel(&addr), 1 << 20, Default::default());
    let parts = request("/matchmaker.v1.AdminService/ListLiveMatches", "Bearer a");
    let calls = [5u8, 0, 3].map(|mib| {
        let (link, parts) = (link.clone(), parts.clone());
        async move { link.call(&parts, Bytes::from(vec![mib])).await }
    });
    let answers = join_all(calls.into_iter()).await;
    for (mib, answer) in [5usize, 0, 3].into_iter().zip(answers) {
        let (_, body, _) = read(answer.expect("answered")).await;
        assert_eq!(body.len(), (mib << 20) + 1);
    }
    assert!(!link.is_broken());
    let (_, body, _) = read(link.call(&parts, Bytes::from(vec![0u8])).await.unwrap()).await;
    assert_eq!(body.len(), 1, "the link still carries calls");
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
async fn a_call_reaching_a_node_that_stopped_serving_comes_back_as_not_served() {
    let here = tokio::runtime::Handle::current();
    let served = Arc::new(AtomicU64::new(0));
    let (addr, closing) = serve_link(&here, {
        let served = served.clone();
        move |_request: http::Request<Body>| {
            served.fetch_add(1, Ordering::Relaxed);
            async move { http::Response::new(Body::empty()) }
        }
    })
    .await;
    // The node stops before the call reaches it: the call is on the wire, not served.
    closing.cancel();
    let parts = request("/matchmaker.v1.PartyService/CreateParty", "Bearer x");
    let link = Link::open(channel(&addr), 1 << 20, Default::default());
    let answer = link
        .call(&parts, Bytes::new())
        .await
        .expect("an answer, not a broken link");
    assert!(
        answer.headers().contains_key(NOT_OWNER),
        "marked as not served"
    );
    let status = tonic::Status::from_header_map(answer.headers()).unwrap();
    assert_eq!(status.code(), tonic::Code::Unavailable);
    assert_eq!(served.load(Ordering::Relaxed), 0);
    // The forwarding node was told to close the link, and it ends.
    ended(&link, "the link ended").await;
}

#[tokio::test]
async fn a_call_on_a_link_whose_stream_never_opened_is_known_not_sent() {
    let nobody = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = nobody.local_addr().unwrap().to_string();
    drop(nobody);
    let parts = request("/matchmaker.v1.PartyService/CreateParty", "Bearer x");
    let link = Link::open(channel(&addr), 1 << 20, Default::default());
    let failed = link.call(&parts, Bytes::new()).await.unwrap_err();
    assert!(matches!(failed, Failed::NotSent), "{failed:?}");
    // So is one on the link once it broke.
    let failed = link.call(&parts, Bytes::new()).await.unwrap_err();
    assert!(matches!(failed, Failed::NotSent), "{failed:?}");
}

/// A handler for [`serve_link`] that tells `taken` when a call reached it, then answers once
/// `answer` is notified.
fn held_until(
    taken: &Arc<tokio::sync::Notify>,
    answer: &Arc<tokio::sync::Notify>,
) -> impl Fn(
    http::Request<Body>,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = http::Response<Body>> + Send>>
+ Clone
+ Send
+ Sync
+ 'static {
    let (taken, answer) = (taken.clone(), answer.clone());
    move |_request: http::Request<Body>| {
        let (taken, answer) = (taken.clone(), answer.clone());
        Box::pin(async move {
            taken.notify_one();
            answer.notified().await;
            http::Response::new(Body::empty())
        })
    }
}

/// Waits (5 s at most) until `taken` says a call reached the far end.
async fn reached(taken: &tokio::sync::Notify) {
    tokio::time::timeout(Duration::from_secs(5), taken.notified())
        .await
        .expect("the call reached the far end");
}

#[tokio::test]
async fn a_closed_link_answers_the_calls_it_took_then_ends() {
    let here = tokio::runtime::Handle::current();
    let (taken, answer) = Default::default();
    let (addr, _closing) = serve_link(&here, held_until(&taken, &answer)).await;
    let parts = request("/matchmaker.v1.ClientService/GetPlayer", "Bearer x");
    let link = Link::open(channel(&addr), 1 << 20, Default::default());
    let answered = answered_in_background(&link, &parts);
    reached(&taken).await;
    link.close();
    assert!(
        link.call(&parts, Bytes::new()).await.is_err(),
        "no call after"
    );
    answer.notify_one();
    assert!(answered.await.unwrap(), "the call taken before is answered");
    ended(&link, "the closed link ended").await;
}

#[tokio::test]
async fn a_call_in_flight_fails_when_its_link_breaks_and_a_closing_node_ends_its_links() {
    let here = tokio::runtime::Handle::current();
    let (taken, answer) = Default::default();
    let (addr, closing) = serve_link(&here, held_until(&taken, &answer)).await;
    let parts = request("/matchmaker.v1.ClientService/GetPlayer", "Bearer x");

    // The node closes: the call it took is answered, then the link ends.
    let link = Link::open(channel(&addr), 1 << 20, Default::default());
    let answered = answered_in_background(&link, &parts);
    reached(&taken).await;
    closing.cancel();
    answer.notify_one();
    assert!(answered.await.unwrap(), "a call taken is answered");
    ended(&link, "the closing node ended the link").await;
    assert!(link.call(&parts, Bytes::new()).await.is_err());

    // The far end dies with a call in flight (its runtime, every connection with it, is
    // gone): the call fails, it does not hang.
    let far = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let (taken, never) = Default::default();
    let (addr, _closing) = serve_link(far.handle(), held_until(&taken, &never)).await;
    let link = Link::open(channel(&addr), 1 << 20, Default::default());
    let in_flight = tokio::spawn({
        let link = link.clone();
        async move { link.call(&parts, Bytes::new()).await.is_err() }
    });
    reached(&taken).await;
    far.shutdown_background();
    let failed = tokio::time::timeout(Duration::from_secs(10), in_flight)
        .await
        .expect("the call in flight ended")
        .unwrap();
    assert!(failed, "the call in flight failed");
    assert!(link.is_broken());
}

/// Waits (5 s at most) until `link` ended, failing with `what` otherwise.
async fn ended(link: &Link, what: &str) {
    tokio::time::timeout(Duration::from_secs(5), async {
        while !link.is_broken() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect(what);
}

/// Sends a call on `link` from a task of its own: whether the far end served it (an answer,
/// and not the one saying it was not served).
fn answered_in_background(
    link: &Arc<Link>,
    parts: &http::request::Parts,
) -> tokio::task::JoinHandle<bool> {
    let (link, parts) = (link.clone(), parts.clone());
    tokio::spawn(async move {
        link.call(&parts, Bytes::new())
            .await
            .is_ok_and(|answer| !answer.headers().contains_key(NOT_OWNER))
    })
}

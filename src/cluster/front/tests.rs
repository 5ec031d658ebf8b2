use super::*;

#[test]
fn the_callers_deadline_is_read_in_every_unit() {
    let at = |v: &str| {
        let mut h = http::HeaderMap::new();
        h.insert("grpc-timeout", v.parse().unwrap());
        caller_timeout(&h)
    };
    assert_eq!(at("5S"), Some(Duration::from_secs(5)));
    assert_eq!(at("250m"), Some(Duration::from_millis(250)));
    assert_eq!(at("2M"), Some(Duration::from_secs(120)));
    assert_eq!(at("7u"), Some(Duration::from_micros(7)));
    assert_eq!(at("x"), None);
    assert_eq!(at(""), None);
    assert_eq!(caller_timeout(&http::HeaderMap::new()), None);
}

#[test]
fn a_call_sent_again_carries_what_is_left_of_the_callers_deadline() {
    let value = |d: Duration| grpc_timeout(d).to_str().unwrap().to_string();
    assert_eq!(value(Duration::from_millis(1500)), "1500m");
    assert_eq!(
        value(Duration::ZERO),
        "1m",
        "never zero: the owner refuses at once"
    );
    assert_eq!(value(Duration::from_secs(1_000_000)), "99999999m");
    let mut h = http::HeaderMap::new();
    h.insert("grpc-timeout", grpc_timeout(Duration::from_millis(250)));
    assert_eq!(caller_timeout(&h), Some(Duration::from_millis(250)));
}

#[test]
fn a_call_gives_up_waiting_a_little_before_the_callers_deadline() {
    let node = Duration::from_secs(7);
    let ms = Duration::from_millis;
    assert_eq!(
        patience(None, node),
        node,
        "no deadline: the node's patience"
    );
    assert_eq!(
        patience(Some(ms(60_000)), node),
        node,
        "the node's patience comes first"
    );
    assert_eq!(
        patience(Some(ms(2000)), node),
        ms(1900),
        "a twentieth before it"
    );
    assert_eq!(
        patience(Some(ms(7000)), node),
        ms(6900),
        "100 ms before at most"
    );
    assert_eq!(patience(Some(ms(100)), node), ms(95));
    assert_eq!(patience(Some(Duration::ZERO), node), Duration::ZERO);
}

#[test]
fn framing_knows_message_boundaries_across_chunks() {
    let mut f = Framing::default();
    assert!(f.at_boundary());
    // A 3-byte message split over three chunks, then a 0-byte one.
    f.feed(&[0, 0, 0]);
    assert!(!f.at_boundary());
    f.feed(&[0, 3, 7]);
    assert!(!f.at_boundary());
    f.feed(&[8, 9]);
    assert!(f.at_boundary());
    f.feed(&[0, 0, 0, 0, 0]);
    assert!(f.at_boundary());
    // Two whole messages in one chunk, the second cut short.
    f.feed(&[0, 0, 0, 0, 1, 5, 0, 0, 0, 0, 2, 1]);
    assert!(!f.at_boundary());
    f.feed(&[2]);
    assert!(f.at_boundary());
}

#[tokio::test]
async fn a_request_up_to_the_message_limit_is_kept_and_a_larger_one_refused() {
    let body = |n: usize| Body::new(http_body_util::Full::new(Bytes::from(vec![0u8; n])));
    assert_eq!(collect(body(105), 100).await.unwrap().len(), 105);
    let refused = collect(body(106), 100).await.unwrap_err();
    assert!(refused.contains("max_message_bytes (100)"), "{refused}");
}

const KEY: &str = "0123abcd";

/// An engine that answers every call with the client address its layers would see (the
/// `x-seen` header, empty when none) and whether any of the cluster's own headers reached it.
fn echoing_engine() -> crate::server::EngineService {
    crate::server::EngineService::new(tower::util::BoxCloneSyncService::new(tower::service_fn(
        |request: http::Request<Body>| async move {
            let seen = crate::limits::peer_ip(request.extensions())
                .map_or(String::new(), |ip| ip.to_string());
            let leaked = [NODE_KEY, CLIENT_ADDR]
                .iter()
                .any(|h| request.headers().contains_key(*h));
            let mut response = tonic::Status::ok("").into_http::<Body>();
            response
                .headers_mut()
                .insert("x-seen", http::HeaderValue::from_str(&seen).unwrap());
            response.headers_mut().insert(
                "x-leaked",
                http::HeaderValue::from_static(if leaked { "yes" } else { "no" }),
            );
            Ok::<_, tower::BoxError>(response)
        },
    )))
}

/// A node's front with `route`, served on a free loopback port; its address.
/// The front of node `name` on `route` (and the route's sender, which must live as long as the
/// front is used), waiting at most `patience` for an owner, and as long for its answer.
fn front(route: Route, name: &str, patience: Duration) -> (watch::Sender<Route>, Front) {
    front_answered_within(route, name, patience, patience)
}

/// [`front`], its calls answered within `request_timeout` when their callers set no deadline.
fn front_answered_within(
    route: Route,
    name: &str,
    patience: Duration,
    request_timeout: Duration,
) -> (watch::Sender<Route>, Front) {
    front_holding(route, name, patience, request_timeout, 256)
}

/// [`front_answered_within`], holding at most `max_in_flight` calls at once.
fn front_holding(
    route: Route,
    name: &str,
    patience: Duration,
    request_timeout: Duration,
    max_in_flight: usize,
) -> (watch::Sender<Route>, Front) {
    let (tx, rx) = watch::channel(route);
    let front = Front::new(
        name.into(),
        rx,
        Waits {
            for_owner: patience,
            for_answer: request_timeout,
            for_long_answer: request_timeout,
            max_in_flight,
        },
        1 << 20,
        CancellationToken::new(),
        None,
        Credentials {
            node_key: http::HeaderValue::from_static(KEY),
            shard: "mm".into(),
        },
    );
    (tx, front)
}

async fn serve_front(route: Route, name: &str) -> (watch::Sender<Route>, Front, String) {
    let (tx, front) = front(route, name, Duration::from_secs(2));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let routes = tonic::service::Routes::from(axum::Router::new().fallback_service(front.clone()));
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_routes(routes)
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );
    (tx, front, addr)
}

fn owner_route(addr: &str) -> Route {
    Route {
        owner: Some(Owner {
            token: 1,
            node_id: "owner".into(),
            addr: addr.into(),
        }),
        engine: Some(echoing_engine()),
    }
}

fn seen(response: &http::Response<Body>) -> (String, String) {
    let header = |h: &str| response.headers()[h].to_str().unwrap().to_string();
    (header("x-seen"), header("x-leaked"))
}

#[tokio::test]
async fn the_owner_believes_a_forwarded_calls_client_address_only_with_the_node_key() {
    let (_route, owner, _) = serve_front(owner_route("127.0.0.1:1"), "owner").await;
    let forwarded = |key: &'static str| {
        http::Request::builder()
            .uri("/matchmaker.v1.ClientService/GetPlayer")
            .header(FORWARDED, "other")
            .header(NODE_KEY, key)
            .header(CLIENT_ADDR, "10.1.2.3")
            .body(Body::empty())
            .unwrap()
    };
    let believed = owner.inner.clone().forward(forwarded(KEY)).await;
    assert_eq!(seen(&believed), ("10.1.2.3".into(), "no".into()));
    let doubted = owner.inner.clone().forward(forwarded("0123abce")).await;
    assert_eq!(seen(&doubted), (String::new(), "no".into()));
}

#[tokio::test]
async fn a_link_opened_with_the_node_key_is_believed_and_any_other_refused() {
    let (_route, _owner, addr) = serve_front(owner_route("127.0.0.1:1"), "owner").await;
    let call = || {
        let (parts, ()) = http::Request::builder()
            .method("POST")
            .uri("/matchmaker.v1.ClientService/GetPlayer")
            .header(FORWARDED, "other")
            .header(CLIENT_ADDR, "10.1.2.3")
            .body(())
            .unwrap()
            .into_parts();
        parts
    };
    let channel = || {
        Endpoint::from_shared(format!("http://{addr}"))
            .unwrap()
            .connect_lazy()
    };
    let mut head = http::HeaderMap::new();
    head.insert(NODE_KEY, http::HeaderValue::from_static(KEY));
    let node = Link::open(
        channel(),
        1 << 20,
        tonic::metadata::MetadataMap::from_headers(head),
    );
    let answer = node.call(&call(), Bytes::new()).await.unwrap();
    assert_eq!(seen(&answer), ("10.1.2.3".into(), "no".into()));
    // Without the key (a client dressed as a node): no call is served on it.
    let stranger = Link::open(channel(), 1 << 20, Default::default());
    let refused = stranger.call(&call(), Bytes::new()).await;
    assert!(refused.is_err(), "a keyless link served a call");
}

#[tokio::test]
async fn a_forwarding_node_passes_on_the_address_it_saw_not_the_one_a_caller_claims() {
    let (_owner_route, _owner, addr) = serve_front(owner_route("127.0.0.1:1"), "owner").await;
    let route = Route {
        engine: None,
        ..owner_route(&addr)
    };
    let (_route, node, _) = serve_front(route, "me").await;
    for path in [
        // On a link, and on a call of its own.
        "/matchmaker.v1.ClientService/GetPlayer",
        "/matchmaker.v1.AdminService/WatchEvents",
    ] {
        let mut request = http::Request::builder()
            .method("POST")
            .uri(path)
            .header(CLIENT_ADDR, "1.1.1.1")
            .header(NODE_KEY, KEY)
            .body(Body::empty())
            .unwrap();
        request
            .extensions_mut()
            .insert(connect_info("10.9.9.9".parse().unwrap()));
        let answer = node.inner.clone().forward(request).await;
        assert_eq!(seen(&answer), ("10.9.9.9".into(), "no".into()), "{path}");
    }
}

/// The front of node "me", while node "other" owns the queues (and the route's sender,
/// which must live as long as the front is used).
fn front_of_a_node_without_the_queues() -> (watch::Sender<Route>, Front) {
    let route = Route {
        owner: Some(Owner {
            token: 1,
            node_id: "other".into(),
            addr: "127.0.0.1:1".into(),
        }),
        engine: None,
    };
    front(route, "me", Duration::from_millis(300))
}

#[tokio::test]
async fn a_forwarded_call_to_a_node_without_the_queues_is_refused_as_not_owner() {
    let (_route, front) = front_of_a_node_without_the_queues();
    let request = http::Request::builder()
        .uri("/matchmaker.v1.ClientService/GetPlayer")
        .header(FORWARDED, "other")
        .body(Body::empty())
        .unwrap();
    let response = front.inner.clone().forward(request).await;
    assert!(
        is_not_owner(&response),
        "the forwarding node learns to retry"
    );
    let status = tonic::Status::from_header_map(response.headers()).unwrap();
    assert_eq!(status.code(), tonic::Code::Unavailable);
}

#[tokio::test]
async fn a_front_takes_unary_calls_on_a_link_and_refuses_streams_there() {
    let (_route, front) = front_of_a_node_without_the_queues();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let routes = tonic::service::Routes::from(axum::Router::new().fallback_service(front));
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_routes(routes)
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );
    let channel = Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect_lazy();
    let mut head = http::HeaderMap::new();
    head.insert(NODE_KEY, http::HeaderValue::from_static(KEY));
    let link = Link::open(
        channel,
        1 << 20,
        tonic::metadata::MetadataMap::from_headers(head),
    );
    let call = |path: &str| {
        let (parts, ()) = http::Request::builder()
            .method("POST")
            .uri(path)
            .header(FORWARDED, "other")
            .body(())
            .unwrap()
            .into_parts();
        parts
    };
    let answer = link
        .call(
            &call("/matchmaker.v1.ClientService/GetPlayer"),
            Bytes::new(),
        )
        .await
        .unwrap();
    assert!(
        is_not_owner(&answer),
        "a forwarded call to a node without the queues"
    );
    let status = tonic::Status::from_header_map(answer.headers()).unwrap();
    assert_eq!(status.code(), tonic::Code::Unavailable);
    let answer = link
        .call(
            &call("/matchmaker.v1.ClientService/WatchTicket"),
            Bytes::new(),
        )
        .await
        .unwrap();
    let status = tonic::Status::from_header_map(answer.headers()).unwrap();
    assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
}

#[tokio::test]
async fn with_no_owner_a_call_waits_then_is_unavailable_naming_the_failover() {
    let (_tx, front) = front(Route::default(), "me", Duration::from_millis(250));
    let request = http::Request::builder()
        .uri("/matchmaker.v1.ClientService/GetPlayer")
        .body(Body::empty())
        .unwrap();
    let started = tokio::time::Instant::now();
    let response = front.inner.clone().forward(request).await;
    assert!(
        started.elapsed() >= Duration::from_millis(150),
        "it waited for an owner"
    );
    let status = tonic::Status::from_header_map(response.headers()).unwrap();
    assert_eq!(status.code(), tonic::Code::Unavailable);
    assert!(
        status.message().contains("failover"),
        "{}",
        status.message()
    );
}

#[tokio::test]
async fn a_stopping_node_ends_a_relayed_stream_whose_caller_reads_nothing() {
    let (_route, front) = front(owner_route("127.0.0.1:1"), "owner", Duration::from_secs(2));
    // The owner sends messages for ever; the caller takes none, so the relay's channel fills.
    let messages = std::iter::repeat_with(|| {
        Ok::<_, tonic::Status>(http_body::Frame::data(Bytes::from_static(&[0; 5])))
    });
    let upstream = Body::new(http_body_util::StreamBody::new(tokio_stream::iter(
        messages,
    )));
    let (tx, _unread) = tokio::sync::mpsc::channel(1);
    let (parts, ()) = http::Request::builder()
        .uri("/matchmaker.v1.AdminService/WatchEvents")
        .body(())
        .unwrap()
        .into_parts();
    let relay = Relay {
        front: front.inner.clone(),
        parts,
        bytes: Bytes::new(),
        arrived: tokio::time::Instant::now(),
        resumable: false,
        tx,
    };
    let relaying = tokio::spawn(relay.run(upstream, 1));
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        !relaying.is_finished(),
        "the stream goes on while the node runs"
    );
    front.inner.closing.cancel();
    tokio::time::timeout(Duration::from_secs(2), relaying)
        .await
        .expect("the relay ended when the node began to stop")
        .unwrap();
}

/// An engine that answers every call with the `grpc-timeout` it came with (the `x-timeout`
/// header, empty when none), or never when `answers` is false.
fn timing_engine(answers: bool) -> crate::server::EngineService {
    crate::server::EngineService::new(tower::util::BoxCloneSyncService::new(tower::service_fn(
        move |request: http::Request<Body>| async move {
            if !answers {
                std::future::pending::<()>().await;
            }
            let timeout = request
                .headers()
                .get("grpc-timeout")
                .cloned()
                .unwrap_or(http::HeaderValue::from_static(""));
            let mut response = tonic::Status::ok("").into_http::<Body>();
            response.headers_mut().insert("x-timeout", timeout);
            Ok::<_, tower::BoxError>(response)
        },
    )))
}

/// A call with a deadline of `timeout` to `path`, as a client sends it.
fn call_with_deadline(path: &str, timeout: &str) -> http::Request<Body> {
    http::Request::builder()
        .uri(path)
        .header("grpc-timeout", timeout)
        .body(Body::empty())
        .unwrap()
}

/// On paused time: the front's deadlines are tokio's, so what is left of one depends on the
/// test's waits alone, not on how slowly a loaded machine runs the test.
#[tokio::test(start_paused = true)]
async fn a_call_that_waited_for_an_owner_is_sent_with_what_is_left_of_its_deadline() {
    let (route, front) = front(Route::default(), "me", Duration::from_secs(10));
    let owner = Route {
        engine: Some(timing_engine(true)),
        ..owner_route("127.0.0.1:1")
    };
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(600)).await;
        route.send_replace(owner);
        // The sender lives as long as the call may need it.
        tokio::time::sleep(Duration::from_secs(5)).await;
    });
    let response = front
        .inner
        .clone()
        .forward(call_with_deadline(
            "/matchmaker.v1.ClientService/GetPlayer",
            "2S",
        ))
        .await;
    let mut seen = http::HeaderMap::new();
    seen.insert("grpc-timeout", response.headers()["x-timeout"].clone());
    let sent = caller_timeout(&seen).expect("a deadline went with the call");
    // 2 s less the 600 ms it waited, less the caller's margin and the owner's (about 100 ms
    // each).
    assert!(
        sent <= Duration::from_millis(1300),
        "the owner was given {sent:?}"
    );
    assert!(
        sent >= Duration::from_millis(900),
        "the owner was given {sent:?}"
    );
}

/// On paused time: the front's deadlines are tokio's, so what is left of one depends on the
/// test's waits alone, not on how slowly a loaded machine runs the test.
#[tokio::test(start_paused = true)]
async fn an_owner_may_take_longer_than_a_failover_to_answer_within_the_request_timeout() {
    // An engine that answers after 1.5 s (a season reset of a large pool, say), with the
    // deadline it was given.
    let slow = crate::server::EngineService::new(tower::util::BoxCloneSyncService::new(
        tower::service_fn(|request: http::Request<Body>| async move {
            tokio::time::sleep(Duration::from_millis(1500)).await;
            let timeout = request.headers().get("grpc-timeout").cloned();
            let mut response = tonic::Status::ok("").into_http::<Body>();
            response.headers_mut().insert(
                "x-timeout",
                timeout.unwrap_or(http::HeaderValue::from_static("")),
            );
            Ok::<_, tower::BoxError>(response)
        }),
    ));
    let owner = Route {
        engine: Some(slow),
        ..owner_route("127.0.0.1:1")
    };
    // Waiting for an owner ends after 500 ms; the call may take 5 s.
    let (_route, front) = front_answered_within(
        owner,
        "me",
        Duration::from_millis(500),
        Duration::from_secs(5),
    );
    let call = http::Request::builder()
        .uri("/matchmaker.v1.AdminService/SeasonReset")
        .body(Body::empty())
        .unwrap();
    let response = front.inner.clone().forward(call).await;
    let status = tonic::Status::from_header_map(response.headers()).unwrap();
    assert_eq!(status.code(), tonic::Code::Ok, "{}", status.message());
    let mut seen = http::HeaderMap::new();
    seen.insert("grpc-timeout", response.headers()["x-timeout"].clone());
    let given = caller_timeout(&seen).expect("a deadline went with the call");
    // 5 s less this node's margin and the owner's (100 ms each).
    assert!(
        given >= Duration::from_millis(4700) && given <= Duration::from_millis(4900),
        "the owner was given {given:?}"
    );
}

#[tokio::test]
async fn a_call_sent_once_that_the_owner_did_not_answer_in_time_is_to_be_checked() {
    let owner = Route {
        engine: Some(timing_engine(false)),
        ..owner_route("127.0.0.1:1")
    };
    let (_route, front) = front(owner, "me", Duration::from_secs(10));
    let response = front
        .inner
        .clone()
        .forward(call_with_deadline(
            "/matchmaker.v1.PartyService/CreateParty",
            "300m",
        ))
        .await;
    let status = tonic::Status::from_header_map(response.headers()).unwrap();
    assert_eq!(status.code(), tonic::Code::Unavailable);
    assert!(status.message().contains("check"), "{}", status.message());
}

/// An engine whose first answer is a write the fence refused, and every later one OK; how
/// many calls reached it.
fn fenced_once_engine() -> (
    crate::server::EngineService,
    Arc<std::sync::atomic::AtomicUsize>,
) {
    let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = calls.clone();
    let engine = crate::server::EngineService::new(tower::util::BoxCloneSyncService::new(
        tower::service_fn(move |_: http::Request<Body>| {
            let n = counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            async move {
                let status = if n == 0 {
                    tonic::Status::from(crate::store::StoreError::Fenced)
                } else {
                    tonic::Status::ok("")
                };
                Ok::<_, tower::BoxError>(status.into_http::<Body>())
            }
        }),
    ));
    (engine, calls)
}

#[tokio::test]
async fn a_call_sent_once_whose_write_was_fenced_is_to_be_checked_and_any_other_goes_on() {
    for (path, once) in [
        ("/matchmaker.v1.AdminService/SeasonReset", true),
        // Run twice, these would undo what happened in between, or announce a change twice.
        ("/matchmaker.v1.AdminService/SetRating", true),
        ("/matchmaker.v1.AdminService/BanPlayer", true),
        ("/matchmaker.v1.AdminService/UnbanPlayer", true),
        ("/matchmaker.v1.AdminService/DeletePlayer", true),
        ("/matchmaker.v1.ClientService/GetPlayer", false),
    ] {
        let (engine, calls) = fenced_once_engine();
        let owner = Route {
            engine: Some(engine),
            ..owner_route("127.0.0.1:1")
        };
        let (_route, front) = front(owner, "me", Duration::from_secs(2));
        let response = front
            .inner
            .clone()
            .forward(call_with_deadline(path, "1S"))
            .await;
        let status = tonic::Status::from_header_map(response.headers()).unwrap();
        if once {
            // The owner may have written before the fence refused it: not sent again.
            assert_eq!(status.code(), tonic::Code::Unavailable, "{path}");
            assert!(status.message().contains("check"), "{}", status.message());
            assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 1, "{path}");
        } else {
            assert_eq!(status.code(), tonic::Code::Ok, "{path}: {status:?}");
            assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 2, "{path}");
        }
    }
}

#[tokio::test]
async fn the_links_to_an_earlier_owner_end_once_calls_go_to_the_next() {
    let (_a, _front_a, a) = serve_front(owner_route("127.0.0.1:1"), "a").await;
    let (_b, _front_b, b) = serve_front(owner_route("127.0.0.1:1"), "b").await;
    let on = |addr: &str, token| Route {
        owner: Some(Owner {
            token,
            node_id: "owner".into(),
            addr: addr.into(),
        }),
        engine: None,
    };
    let (route, front) = front(on(&a, 1), "me", Duration::from_secs(2));
    let get = || {
        http::Request::builder()
            .uri("/matchmaker.v1.ClientService/GetPlayer")
            .body(Body::empty())
            .unwrap()
    };
    let response = front.inner.clone().forward(get()).await;
    assert_eq!(response.headers()["x-leaked"], "no", "answered by a");
    let earlier = front.inner.links.lock().unwrap()[&a].1.clone();
    assert!(earlier.iter().all(|l| !l.is_broken()));
    route.send_replace(on(&b, 2));
    let response = front.inner.clone().forward(get()).await;
    assert_eq!(response.headers()["x-leaked"], "no", "answered by b");
    tokio::time::timeout(Duration::from_secs(5), async {
        while !earlier.iter().all(|l| l.is_broken()) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the links to the earlier owner ended");
}

#[tokio::test]
async fn a_call_sent_once_that_never_left_this_node_waits_for_an_owner_instead_of_failing() {
    // The owner's address takes no connection: the link's stream never opens.
    let (_route, front) = front_of_a_node_without_the_queues();
    let request = http::Request::builder()
        .uri("/matchmaker.v1.PartyService/CreateParty")
        .body(Body::empty())
        .unwrap();
    let response = front.inner.clone().forward(request).await;
    let status = tonic::Status::from_header_map(response.headers()).unwrap();
    assert_eq!(status.code(), tonic::Code::Unavailable);
    assert!(
        status.message().contains("failover") && !status.message().contains("check"),
        "{}",
        status.message()
    );
}

/// A front holds at most `server.max_concurrent_requests` calls: past it a call is refused at
/// once, and a caller that never sends its message holds its place only until its deadline.
#[tokio::test]
async fn a_front_holds_so_many_calls_and_a_silent_caller_only_until_its_deadline() {
    let second = Duration::from_secs(1);
    let (_route, mut front) = front_holding(owner_route("127.0.0.1:1"), "owner", second, second, 1);
    let call = |body: Body| {
        http::Request::builder()
            .method("POST")
            .uri("/matchmaker.v1.ClientService/GetPlayer")
            .header("grpc-timeout", "300m")
            .body(axum::body::Body::new(body))
            .unwrap()
    };
    let grpc_status = |r: &http::Response<Body>| {
        tonic::Status::from_header_map(r.headers()).map_or(tonic::Code::Ok, |s| s.code())
    };
    // A caller that sends its headers and never its message.
    let (_keep_open, silent) =
        tokio::sync::mpsc::channel::<Result<http_body::Frame<Bytes>, std::convert::Infallible>>(1);
    let silent = Body::new(http_body_util::StreamBody::new(
        tokio_stream::wrappers::ReceiverStream::new(silent),
    ));
    let held = tokio::spawn(front.call(call(silent)));
    tokio::task::yield_now().await;
    let empty = || Body::new(http_body_util::Full::new(Bytes::new()));
    let shed = front.call(call(empty())).await.unwrap();
    assert_eq!(grpc_status(&shed), tonic::Code::ResourceExhausted);
    let held = held.await.unwrap().unwrap();
    assert_eq!(grpc_status(&held), tonic::Code::DeadlineExceeded);
    // Its place is free again.
    let served = front.call(call(empty())).await.unwrap();
    assert_eq!(grpc_status(&served), tonic::Code::Ok);
    assert_eq!(seen(&served).1, "no");
}

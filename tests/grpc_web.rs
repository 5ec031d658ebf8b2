//! grpc-web, as a browser or WebGL build speaks it: HTTP/1.1 POSTs with length-prefixed frames
//! and the status in a trailer frame, plus the CORS preflight a browser sends first.

mod common;

use common::TestServer;
use matchmaker::proto;
use prost::Message;

/// An HTTP client (reqwest's rustls needs the process's crypto provider, as in the server).
fn http_client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::new()
}

/// The frames of a grpc-web response body: (flag, payload).
fn frames(mut body: &[u8]) -> Vec<(u8, Vec<u8>)> {
    let mut out = Vec::new();
    while body.len() >= 5 {
        let len = u32::from_be_bytes([body[1], body[2], body[3], body[4]]) as usize;
        out.push((body[0], body[5..5 + len].to_vec()));
        body = &body[5 + len..];
    }
    out
}

#[tokio::test]
async fn a_browser_client_calls_over_http1_and_reads_the_status_trailer() {
    let server = TestServer::start(
        "[server]\ngrpc_web = true\ngrpc_web_origins = [\"https://play.example.com\"]\n",
    )
    .await;
    let http = http_client();
    let url = format!(
        "http://{}/matchmaker.v1.ClientService/EnterQueue",
        server.addr
    );
    let answer = http
        .post(&url)
        .header("content-type", "application/grpc-web+proto")
        .header("x-grpc-web", "1")
        .header("origin", "https://play.example.com")
        .body(common::grpc_web_frame(&proto::EnterQueueRequest {
            queue: "1v1".into(),
            player_ids: vec!["web-player".into()],
            ..Default::default()
        }))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.version(), reqwest::Version::HTTP_11);
    assert_eq!(answer.status(), 200);
    assert_eq!(
        answer.headers()["access-control-allow-origin"],
        "https://play.example.com"
    );
    let body = answer.bytes().await.unwrap();
    let parts = frames(&body);
    assert_eq!(parts.len(), 2, "a message and the trailers: {parts:?}");
    let ticket = proto::EnterQueueResponse::decode(&parts[0].1[..]).unwrap();
    assert!(!ticket.ticket_id.is_empty());
    assert_eq!(parts[1].0, 0x80, "the trailer frame");
    let trailers = String::from_utf8_lossy(&parts[1].1).to_lowercase();
    assert!(trailers.contains("grpc-status:0"), "{trailers}");

    // A refusal carries its status and message in the answer too.
    let answer = http
        .post(&url)
        .header("content-type", "application/grpc-web+proto")
        .body(common::grpc_web_frame(&proto::EnterQueueRequest {
            queue: "no-such-queue".into(),
            player_ids: vec!["web-player-2".into()],
            ..Default::default()
        }))
        .send()
        .await
        .unwrap();
    let status = answer
        .headers()
        .get("grpc-status")
        .map(|v| v.to_str().unwrap().to_string());
    let body = answer.bytes().await.unwrap();
    let in_trailer = frames(&body)
        .iter()
        .any(|(flag, t)| *flag == 0x80 && String::from_utf8_lossy(t).contains("grpc-status:3"));
    assert!(
        status.as_deref() == Some("3") || in_trailer,
        "INVALID_ARGUMENT expected: {status:?} {body:?}"
    );

    // The browser's preflight for a cross-origin call is answered for the configured origin only.
    let preflight = |origin: &'static str| {
        http.request(reqwest::Method::OPTIONS, &url)
            .header("origin", origin)
            .header("access-control-request-method", "POST")
            .header("access-control-request-headers", "content-type,x-grpc-web")
            .send()
    };
    let ok = preflight("https://play.example.com").await.unwrap();
    assert_eq!(
        ok.headers()["access-control-allow-origin"],
        "https://play.example.com"
    );
    // Headers are named, `authorization` among them (browsers do not count it under `*`).
    let allowed = ok.headers()["access-control-allow-headers"]
        .to_str()
        .unwrap()
        .to_lowercase();
    for header in [
        "authorization",
        "content-type",
        "x-grpc-web",
        "grpc-timeout",
    ] {
        assert!(allowed.contains(header), "{allowed}");
    }
    let other = preflight("https://evil.example").await.unwrap();
    assert!(other.headers().get("access-control-allow-origin").is_none());
}

#[tokio::test]
async fn without_the_switch_grpc_web_is_not_served() {
    let server = TestServer::start("").await;
    let answer = http_client()
        .post(format!(
            "http://{}/matchmaker.v1.ClientService/EnterQueue",
            server.addr
        ))
        .header("content-type", "application/grpc-web+proto")
        .body(common::grpc_web_frame(&proto::EnterQueueRequest::default()))
        .send()
        .await;
    // An HTTP/1.1 request to an HTTP/2-only server fails at the protocol level.
    assert!(
        answer.is_err() || !answer.unwrap().status().is_success(),
        "grpc-web answered with the switch off"
    );
}

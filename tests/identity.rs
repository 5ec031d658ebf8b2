//! Tokens as identity providers issue them: an issuer and an audience, a role in a claim of the
//! provider's choosing or none at all, secrets in files, and keys published as a JSON Web Key
//! Set that rotates while the server runs (served here by a loopback HTTP server).

mod common;

use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use common::TestServer;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use matchmaker::proto;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tonic::{Code, Request};

const SECRET: &str = "identity-secret-0123456789abcdef";

fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

fn sign(header: &Header, claims: &serde_json::Value, key: &EncodingKey) -> String {
    jsonwebtoken::encode(header, claims, key).unwrap()
}

fn hs256(claims: serde_json::Value) -> String {
    sign(
        &Header::default(),
        &claims,
        &EncodingKey::from_secret(SECRET.as_bytes()),
    )
}

fn with<T>(msg: T, token: &str) -> Request<T> {
    let mut r = Request::new(msg);
    r.metadata_mut()
        .insert("authorization", format!("Bearer {token}").parse().unwrap());
    r
}

/// EnterQueue for `player` with `token`.
async fn enter(server: &TestServer, token: &str, player: &str) -> Result<(), tonic::Status> {
    server
        .client()
        .await
        .enter_queue(with(
            proto::EnterQueueRequest {
                queue: "1v1".into(),
                player_ids: vec![player.into()],
                ..Default::default()
            },
            token,
        ))
        .await
        .map(drop)
}

/// An admin-only call with `token`.
async fn queue_stats(server: &TestServer, token: &str) -> Result<(), tonic::Status> {
    server
        .admin()
        .await
        .get_queue_stats(with(proto::GetQueueStatsRequest::default(), token))
        .await
        .map(drop)
}

#[tokio::test]
async fn issuer_audience_and_a_providers_role_claim_are_checked() {
    let server = TestServer::start(&format!(
        "[auth]\nenabled = true\njwt_secret = \"{SECRET}\"\nissuer = \"https://idp.example\"\n\
         audience = [\"matchmaker\", \"matchmaker-staging\"]\n\
         role_claim = \"https://matchmaker.example/role\"\ndefault_role = \"player\"\n"
    ))
    .await;
    let claims = |sub: &str, iss: &str, aud: serde_json::Value| serde_json::json!({ "sub": sub, "iss": iss, "aud": aud, "exp": now() + 600 });
    // A player token from the provider: right issuer, one of the audiences, no role claim.
    let player = hs256(claims("alice", "https://idp.example", "matchmaker".into()));
    enter(&server, &player, "alice")
        .await
        .expect("accepted as a player");
    let e = queue_stats(&server, &player).await.unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
    // The role claim the config names, as a list (groups): the first that is a role counts.
    let mut admin = claims(
        "ops",
        "https://idp.example",
        serde_json::json!(["other-api", "matchmaker-staging"]),
    );
    admin["https://matchmaker.example/role"] = serde_json::json!(["staff", "admin"]);
    queue_stats(&server, &hs256(admin))
        .await
        .expect("admin by claim");
    // Another audience, another issuer: refused, saying which.
    let wrong_aud = hs256(claims("bob", "https://idp.example", "billing".into()));
    let e = enter(&server, &wrong_aud, "bob").await.unwrap_err();
    assert_eq!(e.code(), Code::Unauthenticated);
    assert!(e.message().contains("auth.audience"), "{e:?}");
    let wrong_iss = hs256(claims("bob", "https://evil.example", "matchmaker".into()));
    let e = enter(&server, &wrong_iss, "bob").await.unwrap_err();
    assert_eq!(e.code(), Code::Unauthenticated);
    assert!(e.message().contains("auth.issuer"), "{e:?}");
    // A configured issuer and audience must be in the token: one without them (another client
    // of the same provider, a token minted for something else) is refused.
    for missing in ["iss", "aud"] {
        let mut token = claims("dan", "https://idp.example", "matchmaker".into());
        token.as_object_mut().unwrap().remove(missing);
        let e = enter(&server, &hs256(token), "dan").await.unwrap_err();
        assert_eq!(e.code(), Code::Unauthenticated);
        assert!(
            e.message().contains(&format!("no {missing} claim")),
            "{e:?}"
        );
    }
    // A role claim that names no role is refused, not defaulted.
    let mut odd = claims("carol", "https://idp.example", "matchmaker".into());
    odd["https://matchmaker.example/role"] = "superuser".into();
    let e = enter(&server, &hs256(odd), "carol").await.unwrap_err();
    assert_eq!(e.code(), Code::Unauthenticated);
    assert!(e.message().contains("names no role"), "{e:?}");
}

#[tokio::test]
async fn without_an_audience_configured_a_token_with_aud_is_accepted_and_one_without_role_refused()
{
    // The provider's tokens all carry `aud`; a server that checks none must not refuse them.
    let dir = tempfile::tempdir().unwrap();
    let secret_file = dir.path().join("secret");
    std::fs::write(&secret_file, format!("  {SECRET}\n")).unwrap();
    let server = TestServer::start(&format!(
        "[auth]\nenabled = true\njwt_secret = \"\"\njwt_secret_file = {:?}\n",
        secret_file.display().to_string()
    ))
    .await;
    let with_aud = hs256(serde_json::json!({
        "sub": "alice", "role": "player", "aud": "some-api", "exp": now() + 600
    }));
    enter(&server, &with_aud, "alice")
        .await
        .expect("aud is not checked when auth.audience is empty");
    let no_role = hs256(serde_json::json!({ "sub": "bob", "exp": now() + 600 }));
    let e = enter(&server, &no_role, "bob").await.unwrap_err();
    assert_eq!(e.code(), Code::Unauthenticated);
    assert!(e.message().contains("auth.default_role"), "{e:?}");
}

/// A JSON Web Key Set served over HTTP on loopback: what it serves can be swapped, and it counts
/// how often it was fetched.
struct KeySetServer {
    url: String,
    body: Arc<Mutex<String>>,
    fetches: Arc<Mutex<usize>>,
}

impl KeySetServer {
    async fn start(body: String) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!(
            "http://{}/.well-known/jwks.json",
            listener.local_addr().unwrap()
        );
        let body = Arc::new(Mutex::new(body));
        let fetches = Arc::new(Mutex::new(0));
        let (served, counted) = (body.clone(), fetches.clone());
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                let (served, counted) = (served.clone(), counted.clone());
                tokio::spawn(async move {
                    let mut request = Vec::new();
                    let mut buf = [0u8; 1024];
                    while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                        match socket.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => request.extend_from_slice(&buf[..n]),
                        }
                    }
                    let body = served.lock().unwrap().clone();
                    *counted.lock().unwrap() += 1;
                    let answer = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\
                         content-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = socket.write_all(answer.as_bytes()).await;
                });
            }
        });
        Self { url, body, fetches }
    }

    fn serve(&self, body: String) {
        *self.body.lock().unwrap() = body;
    }

    fn fetches(&self) -> usize {
        *self.fetches.lock().unwrap()
    }
}

/// An Ed25519 key pair: its JWK (public) and its signing key.
fn ed25519(kid: &str) -> (serde_json::Value, EncodingKey) {
    use base64::Engine;
    let pair = rcgen::KeyPair::generate_for(&rcgen::PKCS_ED25519).unwrap();
    let x = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(pair.public_key_raw());
    (
        serde_json::json!({ "kty": "OKP", "crv": "Ed25519", "x": x, "kid": kid, "alg": "EdDSA", "use": "sig" }),
        EncodingKey::from_ed_pem(pair.serialize_pem().as_bytes()).unwrap(),
    )
}

fn signed_by(kid: &str, key: &EncodingKey, sub: &str) -> String {
    let mut header = Header::new(Algorithm::EdDSA);
    header.kid = Some(kid.into());
    sign(
        &header,
        &serde_json::json!({ "sub": sub, "role": "player", "exp": now() + 600 }),
        key,
    )
}

#[tokio::test]
async fn keys_rotate_at_the_provider_without_a_restart() {
    let (jwk1, key1) = ed25519("k1");
    let (jwk2, key2) = ed25519("k2");
    let set = |keys: &[&serde_json::Value]| serde_json::json!({ "keys": keys }).to_string();
    let idp = KeySetServer::start(set(&[&jwk1])).await;
    let server = TestServer::start(&format!(
        "[auth]\nenabled = true\njwt_secret = \"\"\njwks_url = \"{}\"\n",
        idp.url
    ))
    .await;
    enter(&server, &signed_by("k1", &key1, "alice"), "alice")
        .await
        .expect("a token of the published key");
    assert_eq!(idp.fetches(), 1, "fetched once, before serving");

    // The provider rotates: k2 replaces k1. The first k2 token makes the server fetch again.
    idp.serve(set(&[&jwk2]));
    enter(&server, &signed_by("k2", &key2, "bob"), "bob")
        .await
        .expect("a token of the new key, after one refetch");
    assert_eq!(idp.fetches(), 2);
    // The retired key is gone, and a flood of tokens with unknown key ids does not make the
    // server fetch again and again.
    for who in ["carol", "dave", "erin"] {
        let e = enter(&server, &signed_by("k1", &key1, who), who)
            .await
            .unwrap_err();
        assert_eq!(e.code(), Code::Unauthenticated);
        assert!(e.message().contains("\"k1\""), "{e:?}");
    }
    let e = enter(&server, &signed_by("k9", &key2, "frank"), "frank")
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::Unauthenticated);
    assert_eq!(
        idp.fetches(),
        2,
        "at most one fetch per {:?}",
        matchmaker::auth::MIN_REFETCH
    );
    // A token signed by a key the set does not hold, under a kid it does, is a bad signature.
    let (_, stranger) = ed25519("k2");
    let e = enter(&server, &signed_by("k2", &stranger, "gina"), "gina")
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::Unauthenticated);
    assert!(e.message().contains("bad signature"), "{e:?}");
}

#[tokio::test]
async fn a_fetched_key_set_gives_no_shared_secret_and_an_empty_one_keeps_the_keys_there_are() {
    use base64::Engine;
    let (jwk1, key1) = ed25519("k1");
    // The set also publishes a shared secret: anyone who could answer the fetch could sign
    // with it, so it is ignored.
    let published = b"published-secret-0123456789";
    let oct = serde_json::json!({
        "kty": "oct", "kid": "s1", "alg": "HS256",
        "k": base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(published),
    });
    // The same for a shared secret that names another HMAC algorithm.
    let oct512 = serde_json::json!({
        "kty": "oct", "kid": "s5", "alg": "HS512",
        "k": base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(published),
    });
    let idp =
        KeySetServer::start(serde_json::json!({ "keys": [jwk1, oct, oct512] }).to_string()).await;
    let server = TestServer::start(&format!(
        "[auth]\nenabled = true\njwt_secret = \"{SECRET}\"\njwks_url = \"{}\"\n",
        idp.url
    ))
    .await;
    // The configured secret verifies its tokens whatever key id their signer put in them,
    // without a fetch for each.
    let mut header = Header::new(Algorithm::HS256);
    header.kid = Some("game-servers".into());
    let own = sign(
        &header,
        &serde_json::json!({ "sub": "ops", "role": "admin", "exp": now() + 600 }),
        &EncodingKey::from_secret(SECRET.as_bytes()),
    );
    queue_stats(&server, &own)
        .await
        .expect("a token of the configured secret");
    assert_eq!(idp.fetches(), 1, "no fetch for a token the secret verifies");
    // The provider answers an empty set: the keys there are stay.
    idp.serve(r#"{"keys":[]}"#.into());
    let (_, key9) = ed25519("k9");
    let e = enter(&server, &signed_by("k9", &key9, "zoe"), "zoe")
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::Unauthenticated);
    assert_eq!(idp.fetches(), 2, "the unknown key id made it fetch");
    enter(&server, &signed_by("k1", &key1, "alice"), "alice")
        .await
        .expect("k1 is still there");
    // The shared secret the set published verifies nothing.
    let mut header = Header::new(Algorithm::HS256);
    header.kid = Some("s1".into());
    let forged = sign(
        &header,
        &serde_json::json!({ "sub": "mallory", "role": "admin", "exp": now() + 600 }),
        &EncodingKey::from_secret(published),
    );
    let e = queue_stats(&server, &forged).await.unwrap_err();
    assert_eq!(e.code(), Code::Unauthenticated, "{e:?}");
    let mut header = Header::new(Algorithm::HS512);
    header.kid = Some("s5".into());
    let forged = sign(
        &header,
        &serde_json::json!({ "sub": "mallory", "role": "admin", "exp": now() + 600 }),
        &EncodingKey::from_secret(published),
    );
    let e = queue_stats(&server, &forged).await.unwrap_err();
    assert_eq!(e.code(), Code::Unauthenticated, "{e:?}");
}

#[tokio::test]
async fn a_key_set_that_cannot_be_fetched_stops_the_server_before_it_serves() {
    // Nothing listens on port 1: the fetch is refused.
    let mut config = matchmaker::config::Config::from_toml_str(
        "[auth]\nenabled = true\njwt_secret = \"\"\njwks_url = \"http://127.0.0.1:1/jwks.json\"\n",
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    config.server.data_dir = dir.path().join("data");
    config.server.metrics_addr = String::new();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let e = matchmaker::server::run(config, listener, tokio_util::sync::CancellationToken::new())
        .await
        .unwrap_err();
    assert!(e.to_string().contains("auth.jwks_url"), "{e}");
    assert!(!dir.path().join("data").exists(), "nothing opened");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_node_takes_over_with_the_keys_it_read_while_the_provider_is_down() {
    let (jwk, key) = ed25519("k1");
    let idp = KeySetServer::start(serde_json::json!({ "keys": [jwk] }).to_string()).await;
    let redis = matchmaker::store::RedisServer::start().unwrap_or_else(|e| panic!("{e}"));
    let dir = tempfile::tempdir().unwrap();
    let config = common::cluster_config(dir.path(), &redis.url(), 1000, "");
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(
        &config,
        format!(
            "[auth]\nenabled = true\njwt_secret = \"\"\njwks_url = \"{}\"\n{text}",
            idp.url
        ),
    )
    .unwrap();
    let mut nodes: std::collections::BTreeMap<String, common::ServerProcess> = ["n1", "n2"]
        .iter()
        .map(|n| (n.to_string(), common::cluster_node(&config, n, None)))
        .collect();
    let mut header = Header::new(Algorithm::EdDSA);
    header.kid = Some("k1".into());
    let admin = sign(
        &header,
        &serde_json::json!({ "sub": "ops", "role": "admin", "exp": now() + 600 }),
        &key,
    );
    let answers = |channel: tonic::transport::Channel| {
        let admin = admin.clone();
        async move {
            proto::admin_service_client::AdminServiceClient::new(channel)
                .get_queue_stats(with(proto::GetQueueStatsRequest::default(), &admin))
                .await
                .map(drop)
        }
    };
    let first = nodes["n1"].channel().await;
    common::poll_until("the cluster answers a token of the published key", || {
        answers(first.clone())
    })
    .await;
    // Both nodes read the key set when they start; the standby's read may come after the owner
    // answers, so wait for it before breaking the provider.
    common::poll_until("both nodes fetched the key set", || async {
        if idp.fetches() >= 2 {
            Ok(())
        } else {
            Err(idp.fetches())
        }
    })
    .await;
    // The provider breaks (its key set no longer parses); the owner dies.
    idp.serve("not a key set".into());
    let owner = common::lease_holder(&redis).expect("an owner");
    let mut dead = nodes.remove(&owner).unwrap();
    dead.child.kill().unwrap();
    let _ = dead.child.wait();
    // The other node takes the queues with the keys it read when it started.
    let survivor = nodes.values().next().unwrap().channel().await;
    common::poll_until("the survivor answers as the owner", || {
        answers(survivor.clone())
    })
    .await;
    let (survivor_name, _) = nodes.iter().next().unwrap();
    assert_eq!(
        common::lease_holder(&redis).as_deref(),
        Some(survivor_name.as_str())
    );
}

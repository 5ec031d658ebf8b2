//! Token verification: the keys a token may be signed with and the rules its claims must meet.
//!
//! Keys come from an HS256 secret (inline or in a file), a PEM public key, and JSON Web Key
//! Sets (RFC 7517) from a file or from the identity provider's URL. A token that names a key id
//! (`kid`) is checked against that key only; one without is tried against every key. A `kid`
//! the sets do not hold makes the verifier fetch the URL again (at most every
//! [`MIN_REFETCH`]), so a provider's key rotation is picked up on the first token signed with
//! the new key, and the scheduled refresh drops retired keys.
//!
//! The algorithm must belong to the key (an RSA key never verifies an HS256 token, which closes
//! the classic algorithm-confusion hole), and a key set entry that names its algorithm accepts
//! only that one.

use std::path::Path;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, Jwk, JwkSet, KeyAlgorithm};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;

use super::{AuthConfig, AuthError, Identity, Role};
use crate::rejection::FieldError;

/// The shortest time between two fetches of the key set for unknown key ids, so tokens naming
/// made-up key ids cannot make the server hammer the identity provider.
pub const MIN_REFETCH: Duration = Duration::from_secs(10);

/// How long one fetch of the key set may take.
const FETCH_TIMEOUT: Duration = Duration::from_secs(10);

/// How many calls with an unknown key id may wait for one fetch. Each waits holding a place of
/// the server's concurrency limit, so without a bound tokens naming made-up key ids could hold
/// every place while a slow provider answers; past it a call is refused at once, as if the
/// fetch had not found the key.
const MAX_WAITING_FOR_KEYS: usize = 16;

/// One verification key.
struct Key {
    kid: Option<String>,
    key: DecodingKey,
    /// The algorithms it may verify.
    algorithms: Vec<Algorithm>,
}

/// What a token's claims must say.
struct Rules {
    issuer: Option<String>,
    audience: Vec<String>,
    role_claim: String,
    default_role: Option<Role>,
    leeway: u64,
}

/// Verifies tokens. Built once, before the server binds; share it in an `Arc`.
pub struct Verifier {
    /// The secret, the PEM key and the key-set file: fixed for the process's life.
    fixed: Vec<Key>,
    /// The keys last fetched from `jwks_url`.
    fetched: RwLock<Vec<Key>>,
    source: Option<Source>,
    rules: Rules,
}

/// Where fetched keys come from.
struct Source {
    url: String,
    /// `url` as logs and errors show it: credentials in it (user info, query values) masked.
    shown: String,
    client: reqwest::Client,
    /// When a token's unknown key id last made the verifier fetch.
    last_on_demand: Mutex<Option<Instant>>,
    /// One fetch at a time; callers that waited find the keys fresh.
    fetching: tokio::sync::Mutex<()>,
    /// Places for callers waiting on a fetch ([`MAX_WAITING_FOR_KEYS`]).
    waiting: tokio::sync::Semaphore,
}

/// A key set that could not be fetched or read.
#[derive(Debug, thiserror::Error)]
pub enum KeySetError {
    #[error("cannot fetch {url}: {detail}")]
    Fetch { url: String, detail: String },
    #[error("{what} is not a JSON Web Key Set: {detail}")]
    Parse { what: String, detail: String },
}

impl Verifier {
    /// The verifier for `config`, or `None` when auth is off. Reads the key files; call
    /// [`Verifier::refresh`] once to fetch `jwks_url` before serving.
    pub fn from_config(config: &AuthConfig) -> Result<Option<Self>, FieldError> {
        if !config.enabled {
            return Ok(None);
        }
        let mut fixed = Vec::new();
        let secret = |bytes: &[u8]| Key {
            kid: None,
            key: DecodingKey::from_secret(bytes),
            algorithms: vec![Algorithm::HS256],
        };
        if !config.jwt_secret.is_empty() {
            fixed.push(secret(config.jwt_secret.as_bytes()));
        }
        if !config.jwt_secret_file.as_os_str().is_empty() {
            let text = read(&config.jwt_secret_file, "auth.jwt_secret_file")?;
            let trimmed = text.trim();
            if trimmed.len() < super::config::MIN_SECRET_BYTES {
                return Err(FieldError::new(
                    "auth.jwt_secret_file",
                    format!(
                        "the secret must be at least {} bytes",
                        super::config::MIN_SECRET_BYTES
                    ),
                ));
            }
            fixed.push(secret(trimmed.as_bytes()));
        }
        if !config.public_key_file.as_os_str().is_empty() {
            let pem = read(&config.public_key_file, "auth.public_key_file")?;
            let (key, algorithm) = match config.public_key_algorithm.as_str() {
                "RS256" => (DecodingKey::from_rsa_pem(pem.as_bytes()), Algorithm::RS256),
                "EdDSA" => (DecodingKey::from_ed_pem(pem.as_bytes()), Algorithm::EdDSA),
                other => {
                    return Err(FieldError::new(
                        "auth.public_key_algorithm",
                        format!("must be RS256 or EdDSA (got {other:?})"),
                    ));
                }
            };
            fixed.push(Key {
                kid: None,
                key: key.map_err(|e| FieldError::new("auth.public_key_file", e.to_string()))?,
                algorithms: vec![algorithm],
            });
        }
        if !config.jwks_file.as_os_str().is_empty() {
            let text = read(&config.jwks_file, "auth.jwks_file")?;
            let keys = parse_key_set(&text, &config.jwks_file.display().to_string())
                .map_err(|e| FieldError::new("auth.jwks_file", e.to_string()))?;
            fixed.extend(keys);
        }
        let source = (!config.jwks_url.is_empty())
            .then(|| {
                // reqwest's rustls needs a process-wide crypto provider; the server already links
                // ring (tonic's TLS). Installing it twice is harmless.
                let _ = rustls::crypto::ring::default_provider().install_default();
                reqwest::Client::builder()
                    .timeout(FETCH_TIMEOUT)
                    .build()
                    .map(|client| Source {
                        url: config.jwks_url.clone(),
                        shown: crate::store::redact(&config.jwks_url),
                        client,
                        last_on_demand: Mutex::new(None),
                        fetching: tokio::sync::Mutex::new(()),
                        waiting: tokio::sync::Semaphore::new(MAX_WAITING_FOR_KEYS),
                    })
                    .map_err(|e| FieldError::new("auth.jwks_url", e.to_string()))
            })
            .transpose()?;
        Ok(Some(Self {
            fixed,
            fetched: RwLock::new(Vec::new()),
            source,
            rules: Rules {
                issuer: (!config.issuer.is_empty()).then(|| config.issuer.clone()),
                audience: config.audience.clone(),
                role_claim: config.role_claim.clone(),
                default_role: config.default_role,
                leeway: config.leeway_seconds,
            },
        }))
    }

    /// Whether keys come from a URL (so an unknown key id is worth a fetch).
    pub fn fetches_keys(&self) -> bool {
        self.source.is_some()
    }

    /// Fetches the key set from `jwks_url` and replaces the fetched keys; returns how many
    /// there are now. Without a URL, does nothing.
    pub async fn refresh(&self) -> Result<usize, KeySetError> {
        let Some(source) = &self.source else {
            return Ok(0);
        };
        let _one_at_a_time = source.fetching.lock().await;
        self.fetch(source).await
    }

    async fn fetch(&self, source: &Source) -> Result<usize, KeySetError> {
        let failed = |detail: String| KeySetError::Fetch {
            url: source.shown.clone(),
            detail,
        };
        let response = source
            .client
            .get(&source.url)
            .send()
            .await
            .map_err(|e| failed(e.without_url().to_string()))?;
        if !response.status().is_success() {
            return Err(failed(format!("HTTP {}", response.status())));
        }
        let body = response
            .text()
            .await
            .map_err(|e| failed(e.without_url().to_string()))?;
        let keys: Vec<Key> = parse_key_set(&body, &source.shown)?
            .into_iter()
            .filter(|key| {
                // A shared secret published at a URL is no secret: anyone who can answer the
                // fetch could sign tokens with it. Secrets come from files only.
                let symmetric = key.algorithms.iter().any(|a| {
                    matches!(a, Algorithm::HS256 | Algorithm::HS384 | Algorithm::HS512)
                });
                if symmetric {
                    tracing::warn!(url = %source.shown, kid = ?key.kid, "a symmetric key in a key set fetched from a URL is ignored");
                }
                !symmetric
            })
            .collect();
        if keys.is_empty() {
            // Keeps the keys there are: an empty answer (a provider's outage page, a
            // misconfigured endpoint) must not stop every token from verifying.
            return Err(failed("it holds no key that can verify signatures".into()));
        }
        let n = keys.len();
        *self.fetched.write().unwrap_or_else(|p| p.into_inner()) = keys;
        tracing::info!(url = %source.shown, keys = n, "key set fetched");
        Ok(n)
    }

    /// After a token named a key id no set holds: fetches the key set again, unless a token did
    /// that less than [`MIN_REFETCH`] ago (then the keys are as fresh as they get for now), or
    /// [`MAX_WAITING_FOR_KEYS`] callers wait already (then it returns false at once: the
    /// caller should be told to retry, not that its token is bad).
    pub async fn refresh_for_unknown_key(&self) -> bool {
        let Some(source) = &self.source else {
            return true;
        };
        let Ok(_place) = source.waiting.try_acquire() else {
            return false;
        };
        let _one_at_a_time = source.fetching.lock().await;
        {
            let mut last = source
                .last_on_demand
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            if let Some(at) = *last
                && at.elapsed() < MIN_REFETCH
            {
                return true;
            }
            *last = Some(Instant::now());
        }
        if let Err(e) = self.fetch(source).await {
            tracing::warn!(error = %e, "key set refresh for an unknown key id failed");
            crate::telemetry::key_set_refresh_failed();
        }
        true
    }

    /// Refreshes the key set every `every` until `shutdown`; a failed fetch keeps the keys
    /// there are and is logged and counted.
    pub async fn refresh_periodically(
        self: Arc<Self>,
        every: Duration,
        shutdown: CancellationToken,
    ) {
        if self.source.is_none() {
            return;
        }
        let mut ticks = tokio::time::interval(every);
        ticks.tick().await;
        loop {
            tokio::select! {
                _ = ticks.tick() => {
                    if let Err(e) = self.refresh().await {
                        tracing::warn!(error = %e, "scheduled key set refresh failed; keeping the keys there are");
                        crate::telemetry::key_set_refresh_failed();
                    }
                }
                () = shutdown.cancelled() => return,
            }
        }
    }

    /// The identity in a bearer token, or why it is not acceptable. `UnknownKey` when the token
    /// names a key id no set holds and keys come from a URL: worth
    /// [`Verifier::refresh_for_unknown_key`] and one more try.
    pub fn verify(&self, token: &str) -> Result<Identity, AuthError> {
        let header = jsonwebtoken::decode_header(token)
            .map_err(|e| AuthError::Unauthenticated(format!("invalid token: {e}")))?;
        let fetched = self.fetched.read().unwrap_or_else(|p| p.into_inner());
        let all = || self.fixed.iter().chain(fetched.iter());
        let candidates: Vec<&Key> = match &header.kid {
            Some(kid) => {
                let named: Vec<&Key> = all().filter(|k| k.kid.as_deref() == Some(kid)).collect();
                if !named.is_empty() {
                    named
                } else {
                    // Keys without an id (the secret, the PEM key) verify tokens whatever id
                    // their signer put in them; a token none of them verifies may be signed
                    // by a key the provider added since the set was fetched.
                    let unnamed: Vec<&Key> = all().filter(|k| k.kid.is_none()).collect();
                    if self.source.is_some()
                        && !unnamed
                            .iter()
                            .any(|key| self.decode(token, key, header.alg).is_ok())
                    {
                        return Err(AuthError::UnknownKey(kid.clone()));
                    }
                    unnamed
                }
            }
            None => all().collect(),
        };
        let mut last = String::from("no key accepts its algorithm");
        for key in candidates {
            if !key.algorithms.contains(&header.alg) {
                continue;
            }
            match self.decode(token, key, header.alg) {
                Ok(claims) => return self.identity(&claims),
                Err(e) => last = describe(&e),
            }
        }
        Err(AuthError::Unauthenticated(format!("invalid token: {last}")))
    }

    fn decode(
        &self,
        token: &str,
        key: &Key,
        algorithm: Algorithm,
    ) -> Result<Map<String, Value>, jsonwebtoken::errors::Error> {
        if !key.algorithms.contains(&algorithm) {
            return Err(jsonwebtoken::errors::ErrorKind::InvalidAlgorithm.into());
        }
        jsonwebtoken::decode::<Map<String, Value>>(token, &key.key, &self.validation(algorithm))
            .map(|data| data.claims)
    }

    fn validation(&self, algorithm: Algorithm) -> Validation {
        let mut v = Validation::new(algorithm);
        v.leeway = self.rules.leeway;
        v.validate_nbf = true;
        if self.rules.audience.is_empty() {
            v.validate_aud = false;
        } else {
            v.set_audience(&self.rules.audience);
        }
        if let Some(issuer) = &self.rules.issuer {
            v.set_issuer(&[issuer]);
        }
        // A configured issuer or audience must be in the token, not only match when present:
        // a token another client of the same provider got without them passes otherwise.
        let mut required = vec!["exp"];
        if self.rules.issuer.is_some() {
            required.push("iss");
        }
        if !self.rules.audience.is_empty() {
            required.push("aud");
        }
        v.set_required_spec_claims(&required);
        v
    }

    fn identity(&self, claims: &Map<String, Value>) -> Result<Identity, AuthError> {
        let sub = match claims.get("sub") {
            Some(Value::String(s)) if !s.is_empty() && s.len() <= 128 => s.clone(),
            _ => {
                return Err(AuthError::Unauthenticated(
                    "token sub must be a string of 1-128 bytes".into(),
                ));
            }
        };
        let claim = &self.rules.role_claim;
        let role = match claims.get(claim) {
            None => self.rules.default_role.ok_or_else(|| {
                AuthError::Unauthenticated(format!(
                    "token has no {claim:?} claim (auth.role_claim) and auth.default_role is not set"
                ))
            })?,
            Some(value) => role_in(value).ok_or_else(|| {
                AuthError::Unauthenticated(format!(
                    "token claim {claim:?} names no role (player, server or admin)"
                ))
            })?,
        };
        Ok(Identity { sub, role })
    }
}

/// The role a claim names: a string, or the first string of a list that is a role.
fn role_in(value: &Value) -> Option<Role> {
    let parse = |s: &str| match s {
        "player" => Some(Role::Player),
        "server" => Some(Role::Server),
        "admin" => Some(Role::Admin),
        _ => None,
    };
    match value {
        Value::String(s) => parse(s),
        Value::Array(items) => items.iter().find_map(|v| v.as_str().and_then(parse)),
        _ => None,
    }
}

/// A verification failure in words an operator can act on.
fn describe(e: &jsonwebtoken::errors::Error) -> String {
    use jsonwebtoken::errors::ErrorKind;
    match e.kind() {
        ErrorKind::InvalidAudience => "its aud is not one of auth.audience".into(),
        ErrorKind::InvalidIssuer => "its iss is not auth.issuer".into(),
        ErrorKind::ExpiredSignature => "it has expired".into(),
        ErrorKind::ImmatureSignature => "it is not valid yet (nbf)".into(),
        ErrorKind::InvalidSignature => "bad signature".into(),
        ErrorKind::MissingRequiredClaim(claim) => format!("it has no {claim} claim"),
        _ => e.to_string(),
    }
}

fn read(path: &Path, key: &str) -> Result<String, FieldError> {
    std::fs::read_to_string(path)
        .map_err(|e| FieldError::new(key, format!("cannot read {}: {e}", path.display())))
}

/// The usable keys of a JWKS document. A key whose type or curve is not supported is skipped
/// with a warning (providers publish encryption keys in the same set); a set with no usable key
/// at all is an error.
fn parse_key_set(text: &str, what: &str) -> Result<Vec<Key>, KeySetError> {
    let set: JwkSet = serde_json::from_str(text).map_err(|e| KeySetError::Parse {
        what: what.to_string(),
        detail: e.to_string(),
    })?;
    let keys: Vec<Key> = set
        .keys
        .iter()
        .filter_map(|jwk| match key_of(jwk) {
            Ok(key) => Some(key),
            Err(detail) => {
                tracing::warn!(source = what, kid = ?jwk.common.key_id, detail, "key set entry skipped");
                None
            }
        })
        .collect();
    if keys.is_empty() && !set.keys.is_empty() {
        return Err(KeySetError::Parse {
            what: what.to_string(),
            detail: "none of its keys can verify signatures".into(),
        });
    }
    Ok(keys)
}

fn key_of(jwk: &Jwk) -> Result<Key, String> {
    let family: Vec<Algorithm> = match &jwk.algorithm {
        AlgorithmParameters::RSA(_) => vec![
            Algorithm::RS256,
            Algorithm::RS384,
            Algorithm::RS512,
            Algorithm::PS256,
            Algorithm::PS384,
            Algorithm::PS512,
        ],
        AlgorithmParameters::EllipticCurve(p) => match p.curve {
            EllipticCurve::P256 => vec![Algorithm::ES256],
            EllipticCurve::P384 => vec![Algorithm::ES384],
            _ => return Err("unsupported curve".into()),
        },
        AlgorithmParameters::OctetKeyPair(_) => vec![Algorithm::EdDSA],
        AlgorithmParameters::OctetKey(_) => {
            vec![Algorithm::HS256, Algorithm::HS384, Algorithm::HS512]
        }
        _ => return Err("unsupported key type".into()),
    };
    let algorithms = match jwk.common.key_algorithm.map(algorithm_of) {
        // A key that names its algorithm accepts only that one, if it fits the key.
        Some(Some(named)) if family.contains(&named) => vec![named],
        Some(_) => return Err("its alg does not fit the key or cannot sign".into()),
        None => family,
    };
    Ok(Key {
        kid: jwk.common.key_id.clone(),
        key: DecodingKey::from_jwk(jwk).map_err(|e| e.to_string())?,
        algorithms,
    })
}

fn algorithm_of(a: KeyAlgorithm) -> Option<Algorithm> {
    Some(match a {
        KeyAlgorithm::HS256 => Algorithm::HS256,
        KeyAlgorithm::HS384 => Algorithm::HS384,
        KeyAlgorithm::HS512 => Algorithm::HS512,
        KeyAlgorithm::ES256 => Algorithm::ES256,
        KeyAlgorithm::ES384 => Algorithm::ES384,
        KeyAlgorithm::RS256 => Algorithm::RS256,
        KeyAlgorithm::RS384 => Algorithm::RS384,
        KeyAlgorithm::RS512 => Algorithm::RS512,
        KeyAlgorithm::PS256 => Algorithm::PS256,
        KeyAlgorithm::PS384 => Algorithm::PS384,
        KeyAlgorithm::PS512 => Algorithm::PS512,
        KeyAlgorithm::EdDSA => Algorithm::EdDSA,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A provider that takes connections and never answers: callers past the bound do not
    /// wait for its fetch.
    #[tokio::test]
    async fn only_a_few_calls_wait_for_a_slow_key_set_fetch() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let held = tokio::spawn(async move {
            let mut open = Vec::new();
            while let Ok((conn, _)) = listener.accept().await {
                open.push(conn);
            }
        });
        let config: AuthConfig =
            toml::from_str(&format!(
            "enabled = true\njwt_secret = \"\"\nallow_insecure = false\njwks_url = \"http://{addr}/keys\""
        ))
        .unwrap();
        let verifier = Arc::new(Verifier::from_config(&config).unwrap().unwrap());
        let waiting: Vec<_> = (0..MAX_WAITING_FOR_KEYS)
            .map(|_| {
                let v = verifier.clone();
                tokio::spawn(async move { v.refresh_for_unknown_key().await })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(
            waiting.iter().all(|w| !w.is_finished()),
            "they wait for the fetch"
        );
        let waited =
            tokio::time::timeout(Duration::from_secs(1), verifier.refresh_for_unknown_key())
                .await
                .expect("one more caller does not wait");
        assert!(!waited, "told to retry");
        for w in waiting {
            w.abort();
        }
        held.abort();
    }

    /// Credentials in `jwks_url` (user info, query values) are not in what a failed fetch
    /// says, which the server logs and prints.
    #[tokio::test]
    async fn a_failed_fetch_names_the_url_without_its_credentials() {
        let config: AuthConfig = toml::from_str(
            "enabled = true\njwt_secret = \"\"\nallow_insecure = true\n\
             jwks_url = \"http://ops:hunter2@127.0.0.1:1/keys?token=abc123\"",
        )
        .unwrap();
        let verifier = Verifier::from_config(&config).unwrap().unwrap();
        let said = verifier.refresh().await.unwrap_err().to_string();
        assert!(said.contains("127.0.0.1:1/keys"), "{said}");
        assert!(
            !said.contains("hunter2") && !said.contains("abc123"),
            "{said}"
        );
    }

    #[test]
    fn a_role_claim_may_be_a_string_or_a_list() {
        assert_eq!(role_in(&"admin".into()), Some(Role::Admin));
        assert_eq!(
            role_in(&serde_json::json!(["staff", "server", "admin"])),
            Some(Role::Server)
        );
        assert_eq!(role_in(&serde_json::json!(["staff"])), None);
        assert_eq!(role_in(&serde_json::json!(3)), None);
    }

    #[test]
    fn a_key_accepts_only_its_own_algorithms() {
        let oct = |alg: Option<&str>| {
            let mut jwk =
                serde_json::json!({ "kty": "oct", "k": "c2VjcmV0LXNlY3JldC1zZWNyZXQ", "kid": "s" });
            if let Some(alg) = alg {
                jwk["alg"] = alg.into();
            }
            serde_json::from_value::<Jwk>(jwk).unwrap()
        };
        let any_hmac = key_of(&oct(None)).unwrap();
        assert_eq!(
            any_hmac.algorithms,
            [Algorithm::HS256, Algorithm::HS384, Algorithm::HS512]
        );
        assert_eq!(
            key_of(&oct(Some("HS384"))).unwrap().algorithms,
            [Algorithm::HS384]
        );
        // A symmetric key that claims an RSA algorithm is refused, not trusted for either.
        assert!(key_of(&oct(Some("RS256"))).is_err());
    }

    #[test]
    fn a_key_set_with_no_usable_key_is_an_error_naming_it() {
        let e = parse_key_set(
            r#"{"keys":[{"kty":"oct","k":"YQ","alg":"RS256"}]}"#,
            "jwks.json",
        )
        .err()
        .unwrap();
        assert!(e.to_string().contains("jwks.json"), "{e}");
        assert!(parse_key_set("{}", "x").is_err(), "not a key set");
        assert!(parse_key_set(r#"{"keys":[]}"#, "x").unwrap().is_empty());
    }
}

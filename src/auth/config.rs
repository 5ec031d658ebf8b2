//! `[auth]`: where the keys come from and what a token must say.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::Role;
use crate::rejection::FieldError;

/// The shortest HS256 secret accepted: as long as the hash's output, as RFC 7518 (section 3.2)
/// requires, so a token signed with it cannot be cracked offline by guessing a short secret.
pub const MIN_SECRET_BYTES: usize = 32;

/// `[auth]`: JWT bearer tokens. Off by default for local development.
///
/// Keys, any combination: an HS256 secret inline (`jwt_secret`) or in a file
/// (`jwt_secret_file`, e.g. a mounted Kubernetes secret), a PEM public key
/// (`public_key_file`), and JSON Web Key Sets from a file (`jwks_file`) or from the identity
/// provider (`jwks_url`, refreshed every `jwks_refresh_seconds` and when a token names a key id
/// the set does not have, so keys rotate without a restart).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthConfig {
    pub enabled: bool,
    /// HS256 secret, at least [`MIN_SECRET_BYTES`]; empty when the keys come from elsewhere.
    pub jwt_secret: String,
    /// A file holding the HS256 secret (surrounding whitespace ignored).
    #[serde(default)]
    pub jwt_secret_file: PathBuf,
    pub allow_insecure: bool,
    /// Optional PEM public key (RS256 or EdDSA) accepted besides the HS256 secret.
    #[serde(default)]
    pub public_key_file: PathBuf,
    /// `RS256` or `EdDSA`: the algorithm of `public_key_file`.
    #[serde(default = "default_public_key_algorithm")]
    pub public_key_algorithm: String,
    /// A JSON Web Key Set file (RSA, EC, Ed25519 or symmetric keys, picked by `kid`).
    #[serde(default)]
    pub jwks_file: PathBuf,
    /// The identity provider's JWKS endpoint (`https://.../.well-known/jwks.json`).
    #[serde(default)]
    pub jwks_url: String,
    /// Seconds between refreshes of `jwks_url`.
    #[serde(default = "default_jwks_refresh_seconds")]
    pub jwks_refresh_seconds: u64,
    /// The `iss` every token must carry; empty accepts any issuer.
    #[serde(default)]
    pub issuer: String,
    /// Accepted `aud` values: a token must name one of them. Empty: `aud` is not checked
    /// (a token may carry one or not).
    #[serde(default)]
    pub audience: Vec<String>,
    /// The claim that holds the caller's role (`player`, `server` or `admin`), as a string or a
    /// list of strings (the first that is a role counts), e.g. `role`,
    /// `https://example.com/role` or `cognito:groups`.
    #[serde(default = "default_role_claim")]
    pub role_claim: String,
    /// The role of a token without the role claim (identity providers issue player tokens
    /// without one); unset: such a token is refused.
    #[serde(default)]
    pub default_role: Option<Role>,
    /// Clock skew allowed on `exp` and `nbf`, in seconds.
    #[serde(default = "default_leeway_seconds")]
    pub leeway_seconds: u64,
}

fn default_public_key_algorithm() -> String {
    "RS256".into()
}

fn default_jwks_refresh_seconds() -> u64 {
    300
}

fn default_role_claim() -> String {
    "role".into()
}

fn default_leeway_seconds() -> u64 {
    30
}

impl AuthConfig {
    /// The rules a config must satisfy. Reading the key files and fetching the key set happen
    /// once, when the server builds its verifier (before it binds a port).
    pub fn validate(&self) -> Result<(), FieldError> {
        if !self.enabled {
            return Ok(());
        }
        let secret_file = !self.jwt_secret_file.as_os_str().is_empty();
        let public_key = !self.public_key_file.as_os_str().is_empty();
        let jwks_file = !self.jwks_file.as_os_str().is_empty();
        if !self.jwt_secret.is_empty() && self.jwt_secret.len() < MIN_SECRET_BYTES {
            return Err(FieldError::new(
                "auth.jwt_secret",
                format!("must be at least {MIN_SECRET_BYTES} bytes when auth.enabled = true"),
            ));
        }
        if self.jwt_secret.is_empty()
            && !secret_file
            && !public_key
            && !jwks_file
            && self.jwks_url.is_empty()
        {
            return Err(FieldError::new(
                "auth.jwt_secret",
                format!(
                    "must be at least {MIN_SECRET_BYTES} bytes when auth.enabled = true (or set \
                     auth.jwt_secret_file, auth.public_key_file, auth.jwks_file or auth.jwks_url)"
                ),
            ));
        }
        for (key, on, path) in [
            ("auth.jwt_secret_file", secret_file, &self.jwt_secret_file),
            ("auth.public_key_file", public_key, &self.public_key_file),
            ("auth.jwks_file", jwks_file, &self.jwks_file),
        ] {
            if on && !path.is_file() {
                return Err(FieldError::new(
                    key,
                    format!("file {} does not exist", path.display()),
                ));
            }
        }
        if public_key && !matches!(self.public_key_algorithm.as_str(), "RS256" | "EdDSA") {
            return Err(FieldError::new(
                "auth.public_key_algorithm",
                format!(
                    "must be RS256 or EdDSA (got {:?})",
                    self.public_key_algorithm
                ),
            ));
        }
        if !self.jwks_url.is_empty() && !key_set_url_is_safe(&self.jwks_url) {
            return Err(FieldError::new(
                "auth.jwks_url",
                format!(
                    "must be an https URL, or http on a loopback address (got {:?}): whoever \
                     answers a plain fetch could sign tokens",
                    crate::store::redact(&self.jwks_url)
                ),
            ));
        }
        if !(10..=86_400).contains(&self.jwks_refresh_seconds) {
            return Err(FieldError::new(
                "auth.jwks_refresh_seconds",
                format!("must be in 10..=86400 (got {})", self.jwks_refresh_seconds),
            ));
        }
        if self.role_claim.is_empty() {
            return Err(FieldError::new("auth.role_claim", "must name a claim"));
        }
        if self.leeway_seconds > 600 {
            return Err(FieldError::new(
                "auth.leeway_seconds",
                format!("must be at most 600 (got {})", self.leeway_seconds),
            ));
        }
        Ok(())
    }
}

/// Whether keys fetched from `url` can be trusted: over TLS, or from this machine.
fn key_set_url_is_safe(url: &str) -> bool {
    let Ok(url) = reqwest::Url::parse(url) else {
        return false;
    };
    match url.scheme() {
        "https" => url.host().is_some(),
        "http" => url.host_str().is_some_and(|host| {
            host.eq_ignore_ascii_case("localhost")
                || host
                    .trim_start_matches('[')
                    .trim_end_matches(']')
                    .parse::<std::net::IpAddr>()
                    .is_ok_and(|ip| ip.is_loopback())
        }),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::key_set_url_is_safe;

    #[test]
    fn keys_are_fetched_over_tls_or_from_this_machine_only() {
        for safe in [
            "https://login.example.com/.well-known/jwks.json",
            "http://127.0.0.1:8080/jwks.json",
            "http://localhost/jwks.json",
            "http://[::1]:9000/jwks.json",
        ] {
            assert!(key_set_url_is_safe(safe), "{safe}");
        }
        for unsafe_url in [
            "http://auth.internal/jwks.json",
            "http://10.0.0.7/jwks.json",
            "ftp://example.com/jwks.json",
            "jwks.json",
        ] {
            assert!(!key_set_url_is_safe(unsafe_url), "{unsafe_url}");
        }
    }
}

//! Authentication and the role check for every call; the tower layer in `api::layers` applies
//! them in front of every service.
//!
//! The layer reads `authorization: Bearer <JWT>`, verifies it (HS256 with `auth.jwt_secret`, or
//! an RS256/EdDSA public key), checks the token's role against the method, and puts the caller's
//! [`Identity`] into the request's extensions. Handlers read it only for the checks that need the
//! request's data (whose ticket, whose match) through the `may_*` methods here.
//!
//! Health and reflection stay open. With auth off (the local default) the server installs no auth
//! layer at all, requests carry no identity, and every ownership check allows.
//!
//! This module owns no business rule beyond "who may call what"; it must not touch state.

use std::path::PathBuf;

use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::{Deserialize, Serialize};
use tonic::codegen::http;

use crate::ids::PlayerId;
use crate::rejection::FieldError;

/// `[auth]`: JWT bearer tokens. Off by default for local development.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthConfig {
    pub enabled: bool,
    pub jwt_secret: String,
    pub allow_insecure: bool,
    /// Optional PEM public key (RS256 or EdDSA) accepted besides the HS256 secret.
    #[serde(default)]
    pub public_key_file: PathBuf,
    /// `RS256` or `EdDSA`: the algorithm of `public_key_file`.
    #[serde(default = "default_public_key_algorithm")]
    pub public_key_algorithm: String,
}

fn default_public_key_algorithm() -> String {
    "RS256".into()
}

impl AuthConfig {
    /// The rules a config must satisfy; reading and parsing the key file happens once, when the
    /// server builds its [`Verifier`] (before it binds a port).
    pub fn validate(&self) -> Result<(), FieldError> {
        let has_public_key = !self.public_key_file.as_os_str().is_empty();
        if self.enabled
            && self.jwt_secret.len() < 16
            && !(self.jwt_secret.is_empty() && has_public_key)
        {
            return Err(FieldError::new(
                "auth.jwt_secret",
                "must be at least 16 bytes when auth.enabled = true (or empty with auth.public_key_file set)",
            ));
        }
        if self.enabled && has_public_key {
            if !matches!(self.public_key_algorithm.as_str(), "RS256" | "EdDSA") {
                return Err(FieldError::new(
                    "auth.public_key_algorithm",
                    format!(
                        "must be RS256 or EdDSA (got {:?})",
                        self.public_key_algorithm
                    ),
                ));
            }
            if !self.public_key_file.is_file() {
                return Err(FieldError::new(
                    "auth.public_key_file",
                    format!("file {} does not exist", self.public_key_file.display()),
                ));
            }
        }
        Ok(())
    }
}

/// Why a call may not proceed. Mapped to gRPC codes in `api::error` (UNAUTHENTICATED and
/// PERMISSION_DENIED).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    /// Missing, malformed, badly signed or expired credentials.
    #[error("{0}")]
    Unauthenticated(String),
    /// A valid token whose role or subject may not do this.
    #[error("{0}")]
    Denied(String),
}

/// What a token may do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Player,
    Server,
    Admin,
}

/// The authenticated caller, put into request extensions by the auth layer (`api::layers`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    /// The player id (role `player`) or the server's id (role `server`).
    pub sub: String,
    pub role: Role,
}

#[derive(Deserialize)]
struct Claims {
    sub: String,
    role: Role,
}

/// Ownership checks for handlers. `None` (auth off) allows everything; an admin may do
/// everything.
pub trait MayAct {
    /// A player may enter, cancel or watch only a ticket that contains itself.
    fn may_act_for(&self, players: &[PlayerId], what: &str) -> Result<(), AuthError>;
    /// A server may report or cancel only a match assigned to it (`server_address` = its `sub`),
    /// and may register for matches only under its own `sub`.
    fn may_serve_as(&self, server_address: &str, what: &str) -> Result<(), AuthError>;
}

impl MayAct for Option<Identity> {
    fn may_act_for(&self, players: &[PlayerId], what: &str) -> Result<(), AuthError> {
        match self {
            None => Ok(()),
            Some(Identity {
                role: Role::Admin, ..
            }) => Ok(()),
            Some(Identity {
                role: Role::Player,
                sub,
            }) if players.iter().any(|p| p.as_str() == sub) => Ok(()),
            Some(id) => Err(AuthError::Denied(format!(
                "{:?} {:?} may not {what}: it does not contain that player",
                id.role, id.sub
            ))),
        }
    }

    fn may_serve_as(&self, server_address: &str, what: &str) -> Result<(), AuthError> {
        match self {
            None => Ok(()),
            Some(Identity {
                role: Role::Admin, ..
            }) => Ok(()),
            Some(Identity {
                role: Role::Server,
                sub,
            }) if sub == server_address => Ok(()),
            Some(id) => Err(AuthError::Denied(format!(
                "{:?} {:?} may not {what}: it is assigned to server {server_address:?}",
                id.role, id.sub
            ))),
        }
    }
}

/// Verifies tokens. Built once from config.
pub struct Verifier {
    keys: Vec<(DecodingKey, Validation)>,
}

impl Verifier {
    /// The verifier for `config`, or `None` when auth is off. Fails on an unreadable or invalid
    /// public key (config validation names the key).
    pub fn from_config(config: &AuthConfig) -> Result<Option<Self>, FieldError> {
        if !config.enabled {
            return Ok(None);
        }
        let mut keys = Vec::new();
        if !config.jwt_secret.is_empty() {
            keys.push((
                DecodingKey::from_secret(config.jwt_secret.as_bytes()),
                Validation::new(Algorithm::HS256),
            ));
        }
        if !config.public_key_file.as_os_str().is_empty() {
            let pem = std::fs::read(&config.public_key_file).map_err(|e| {
                FieldError::new(
                    "auth.public_key_file",
                    format!("cannot read {}: {e}", config.public_key_file.display()),
                )
            })?;
            let (key, alg) = match config.public_key_algorithm.as_str() {
                "RS256" => (DecodingKey::from_rsa_pem(&pem), Algorithm::RS256),
                "EdDSA" => (DecodingKey::from_ed_pem(&pem), Algorithm::EdDSA),
                other => {
                    return Err(FieldError::new(
                        "auth.public_key_algorithm",
                        format!("must be RS256 or EdDSA (got {other:?})"),
                    ));
                }
            };
            let key = key.map_err(|e| FieldError::new("auth.public_key_file", e.to_string()))?;
            keys.push((key, Validation::new(alg)));
        }
        Ok(Some(Self { keys }))
    }

    /// The identity in a bearer token, or why it is not acceptable.
    pub fn verify(&self, token: &str) -> Result<Identity, AuthError> {
        let mut last = String::from("no verification key is configured");
        for (key, validation) in &self.keys {
            match jsonwebtoken::decode::<Claims>(token, key, validation) {
                Ok(data) => {
                    if data.claims.sub.is_empty() || data.claims.sub.len() > 128 {
                        return Err(AuthError::Unauthenticated(
                            "token sub must be 1-128 bytes".into(),
                        ));
                    }
                    return Ok(Identity {
                        sub: data.claims.sub,
                        role: data.claims.role,
                    });
                }
                Err(e) => last = e.to_string(),
            }
        }
        Err(AuthError::Unauthenticated(format!("invalid token: {last}")))
    }
}

/// Health and reflection: open to everyone, and exempt from the rate limit too (`limits`), so
/// probes and tools keep working while a caller is throttled.
pub fn is_open_path(path: &str) -> bool {
    path.starts_with("/grpc.health.v1.Health/") || path.starts_with("/grpc.reflection.")
}

/// Which roles a method needs; `None` = open (health, reflection).
fn required_roles(path: &str) -> Option<&'static [Role]> {
    const ANY: &[Role] = &[Role::Player, Role::Server, Role::Admin];
    const PLAYER: &[Role] = &[Role::Player, Role::Admin];
    const SERVER: &[Role] = &[Role::Server, Role::Admin];
    const ADMIN: &[Role] = &[Role::Admin];
    if is_open_path(path) {
        return None;
    }
    if let Some(method) = path.strip_prefix("/matchmaker.v1.ClientService/") {
        return Some(match method {
            "EnterQueue" | "CancelTicket" | "WatchTicket" | "AcceptMatch" => PLAYER,
            _ => ANY,
        });
    }
    if path.starts_with("/matchmaker.v1.GameServerService/") {
        return Some(SERVER);
    }
    if path.starts_with("/matchmaker.v1.AdminService/") {
        return Some(ADMIN);
    }
    Some(ANY)
}

/// Authenticates and role-checks one request by its path and headers. `Ok(None)`: open method or
/// auth off.
pub fn authorize(
    verifier: Option<&Verifier>,
    path: &str,
    headers: &http::HeaderMap,
) -> Result<Option<Identity>, AuthError> {
    let Some(verifier) = verifier else {
        return Ok(None);
    };
    let Some(roles) = required_roles(path) else {
        return Ok(None);
    };
    let value = headers
        .get(http::header::AUTHORIZATION)
        .ok_or_else(|| AuthError::Unauthenticated("missing authorization metadata".into()))?;
    let token = value
        .to_str()
        .ok()
        .and_then(|v| v.strip_prefix("Bearer "))
        .ok_or_else(|| {
            AuthError::Unauthenticated("authorization must be \"Bearer <JWT>\"".into())
        })?;
    let identity = verifier.verify(token.trim())?;
    if !roles.contains(&identity.role) {
        return Err(AuthError::Denied(format!(
            "role {:?} may not call {path}",
            identity.role
        )));
    }
    Ok(Some(identity))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn open_paths_need_no_token() {
        assert_eq!(required_roles("/grpc.health.v1.Health/Check"), None);
        assert_eq!(
            required_roles("/grpc.reflection.v1.ServerReflection/ServerReflectionInfo"),
            None
        );
        assert_eq!(
            required_roles("/matchmaker.v1.AdminService/Snapshot"),
            Some(&[Role::Admin][..])
        );
    }

    #[test]
    fn ownership_rules() {
        let p = |s: &str| {
            Some(Identity {
                sub: s.into(),
                role: Role::Player,
            })
        };
        let ids = [PlayerId::new("a"), PlayerId::new("b")];
        assert!(p("a").may_act_for(&ids, "x").is_ok());
        assert!(p("c").may_act_for(&ids, "x").is_err());
        assert!(None::<Identity>.may_act_for(&ids, "x").is_ok());
        let s = Some(Identity {
            sub: "gs-1".into(),
            role: Role::Server,
        });
        assert!(s.may_serve_as("gs-1", "x").is_ok());
        assert!(s.may_serve_as("gs-2", "x").is_err());
        assert!(s.may_act_for(&ids, "x").is_err());
    }
}

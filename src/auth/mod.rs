//! Authentication and the role check for every call; the tower layer in `api::layers` applies
//! them in front of every service.
//!
//! The layer reads `authorization: Bearer <JWT>`, verifies it against the configured keys
//! (`keys`: an HS256 secret, a PEM public key, JSON Web Key Sets from a file or the identity
//! provider's URL), checks its issuer, audience and role, and puts the caller's
//! [`Identity`] into the request's extensions. Handlers read it only for the checks that need the
//! request's data (whose ticket, whose match) through the `may_*` methods here.
//!
//! Health and reflection stay open. With auth off (the local default) the server installs no auth
//! layer at all, requests carry no identity, and every ownership check allows.
//!
//! This module owns no business rule beyond "who may call what"; it must not touch state.

mod config;
mod keys;

pub use config::AuthConfig;
pub use keys::{KeySetError, MIN_REFETCH, Verifier};

use serde::{Deserialize, Serialize};
use tonic::codegen::http;

use crate::ids::PlayerId;

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
    /// Signed with a key id no key set holds (yet): after a key set refresh, try once more.
    #[error("invalid token: its key id {0:?} is not in the key set")]
    UnknownKey(String),
}

/// What a token may do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
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

/// Ownership checks for handlers. `None` (auth off) allows everything; an admin may do
/// everything.
pub trait MayAct {
    /// A player may enter, cancel or watch only a ticket that contains itself.
    fn may_act_for(&self, players: &[PlayerId], what: &str) -> Result<(), AuthError>;
    /// A server may report or cancel only a match assigned to it (`server_address` = its `sub`),
    /// and may register for matches only under its own `sub`.
    fn may_serve_as(&self, server_address: &str, what: &str) -> Result<(), AuthError>;

    // --- Records ---

    /// A player may enter a ticket that names only itself, or the party it leads
    /// (`party_leader`: the leader of the party the ticket names by id).
    fn may_enter(
        &self,
        players: &[PlayerId],
        party_leader: Option<&PlayerId>,
    ) -> Result<(), AuthError>;
    /// A player may act as (or ask about) only itself.
    fn may_be(&self, player: &str, what: &str) -> Result<(), AuthError>;
    /// A match record is readable by its players, its game server and admins.
    fn may_read_match(&self, players: &[PlayerId], server_address: &str) -> Result<(), AuthError>;
    /// Whose matches in `player`'s history the caller may read: `Ok(None)` all of them (the
    /// player itself, an admin, auth off), `Ok(Some(server))` only those that server hosted.
    fn history_reader(&self, player: &str) -> Result<Option<String>, AuthError>;
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

    fn may_enter(
        &self,
        players: &[PlayerId],
        party_leader: Option<&PlayerId>,
    ) -> Result<(), AuthError> {
        match self {
            None
            | Some(Identity {
                role: Role::Admin, ..
            }) => Ok(()),
            Some(Identity {
                role: Role::Player,
                sub,
            }) => match party_leader {
                Some(leader) if leader.as_str() == sub => Ok(()),
                Some(leader) => Err(AuthError::Denied(format!(
                    "player {sub:?} may not enter this party: only its leader {leader:?} may"
                ))),
                None if players.len() == 1 && players[0].as_str() == sub => Ok(()),
                None => Err(AuthError::Denied(format!(
                    "player {sub:?} may name only itself in player_ids; a party enters by \
                     party_id (PartyService), entered by its leader"
                ))),
            },
            Some(id) => Err(AuthError::Denied(format!(
                "{:?} {:?} may not enter tickets",
                id.role, id.sub
            ))),
        }
    }

    fn may_be(&self, player: &str, what: &str) -> Result<(), AuthError> {
        match self {
            None
            | Some(Identity {
                role: Role::Admin, ..
            }) => Ok(()),
            Some(Identity {
                role: Role::Player,
                sub,
            }) if sub == player => Ok(()),
            Some(id) => Err(AuthError::Denied(format!(
                "{:?} {:?} may not {what} for player {player:?}: a player acts only as itself",
                id.role, id.sub
            ))),
        }
    }

    fn may_read_match(&self, players: &[PlayerId], server_address: &str) -> Result<(), AuthError> {
        match self {
            None
            | Some(Identity {
                role: Role::Admin, ..
            }) => Ok(()),
            Some(Identity {
                role: Role::Player,
                sub,
            }) if players.iter().any(|p| p.as_str() == sub) => Ok(()),
            Some(Identity {
                role: Role::Server,
                sub,
            }) if !server_address.is_empty() && sub == server_address => Ok(()),
            Some(id) => Err(AuthError::Denied(format!(
                "{:?} {:?} may not read this match: only its players, its game server and \
                 admins may",
                id.role, id.sub
            ))),
        }
    }

    fn history_reader(&self, player: &str) -> Result<Option<String>, AuthError> {
        match self {
            Some(Identity {
                role: Role::Server,
                sub,
            }) => Ok(Some(sub.clone())),
            _ => self.may_be(player, "list matches").map(|()| None),
        }
    }
}

/// Health and reflection: open to everyone, and exempt from the rate limit too (`limits`), so
/// probes and tools keep working while a caller is throttled.
pub fn is_open_path(path: &str) -> bool {
    path.starts_with("/grpc.health.v1.Health/") || path.starts_with("/grpc.reflection.")
}

/// The path prefix of the operator console's JSON API; every call under it needs an admin.
pub const CONSOLE_API: &str = "/console/api/";

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
            // Records: a player asks about itself; GetMatch and ListPlayerMatches check the
            // record's players and server in the handler.
            "GetActiveTicket" => PLAYER,
            _ => ANY,
        });
    }
    if path.starts_with("/matchmaker.v1.PartyService/") {
        return Some(PLAYER);
    }
    if path.starts_with("/matchmaker.v1.GameServerService/") {
        return Some(SERVER);
    }
    if path.starts_with("/matchmaker.v1.AdminService/") {
        return Some(ADMIN);
    }
    // The operator console's JSON API on the metrics listener (`console`): admins only, like
    // the AdminService whose calls it makes.
    if path.starts_with(CONSOLE_API) {
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
        assert_eq!(
            required_roles("/console/api/queues"),
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

    #[test]
    fn records_rules() {
        let p = |s: &str| {
            Some(Identity {
                sub: s.into(),
                role: Role::Player,
            })
        };
        let server = Some(Identity {
            sub: "gs-1".into(),
            role: Role::Server,
        });
        let admin = Some(Identity {
            sub: "root".into(),
            role: Role::Admin,
        });
        let (a, b) = (PlayerId::new("a"), PlayerId::new("b"));
        // Tickets name only the caller, or the party it leads.
        assert!(p("a").may_enter(std::slice::from_ref(&a), None).is_ok());
        assert!(p("a").may_enter(&[a.clone(), b.clone()], None).is_err());
        assert!(p("a").may_enter(std::slice::from_ref(&b), None).is_err());
        assert!(p("a").may_enter(&[a.clone(), b.clone()], Some(&a)).is_ok());
        assert!(p("b").may_enter(&[a.clone(), b.clone()], Some(&a)).is_err());
        assert!(admin.may_enter(&[a.clone(), b.clone()], None).is_ok());
        assert!(server.may_enter(std::slice::from_ref(&a), None).is_err());
        // A player asks only about itself.
        assert!(p("a").may_be("a", "x").is_ok());
        assert!(p("a").may_be("b", "x").is_err());
        assert!(server.may_be("a", "x").is_err());
        // A match: its players, its server, admins.
        let players = [a.clone(), b.clone()];
        assert!(p("b").may_read_match(&players, "gs-1").is_ok());
        assert!(p("c").may_read_match(&players, "gs-1").is_err());
        assert!(server.may_read_match(&players, "gs-1").is_ok());
        assert!(server.may_read_match(&players, "gs-2").is_err());
        assert!(server.may_read_match(&players, "").is_err());
        assert!(admin.may_read_match(&players, "").is_ok());
        // History: the player, admins; a server sees what it hosted.
        assert_eq!(p("a").history_reader("a"), Ok(None));
        assert!(p("a").history_reader("b").is_err());
        assert_eq!(server.history_reader("a"), Ok(Some("gs-1".into())));
        assert_eq!(None::<Identity>.history_reader("a"), Ok(None));
    }
}

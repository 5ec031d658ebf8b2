//! The tonic services. Thin: validate the proto into domain values once, call the state or the
//! matchmaker loop, map back. Proto types stop here.
//!
//! Architecture invariant: errors become `tonic::Status` only in `error.rs`.

mod admin;
mod admin_records;
pub mod audit;
mod client;
mod closing;
pub mod convert;
mod error;
pub use admin_records::{
    AUDIT_PAGE, AUDIT_SEQS, EVENTS_CLOSING, EVENTS_LAST, LIVE_MATCHES_PAGE, audit_seqs,
    is_closing_mark, parse_audit_seqs,
};
pub use error::{NOT_OWNER, NOT_OWNER_FENCED};
mod game_server;
pub mod layers;
mod party;
pub mod records;
pub mod rpc_metrics;

pub use admin::Admin;
pub use client::{Client, QueueLoad};
pub use game_server::GameServer;
pub use party::Parties;

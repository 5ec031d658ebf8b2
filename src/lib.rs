//! The matchmaker library: everything but command-line parsing lives here.
//!
//! The core (`rating`, `matching`) is pure and synchronous; the shell (`api`, `store`,
//! `matchmaker`, `server`) is async and thin. See ARCHITECTURE.md.
#![forbid(unsafe_code)]

pub mod api;
pub mod auth;
pub mod cluster;
pub mod config;
pub mod console;
pub mod ids;
pub mod ledger;
pub mod limits;
pub mod listener;
pub mod matching;
pub mod matchmaker;
pub mod math;
pub mod proto;
pub mod ranking;
pub mod rating;
pub mod records;
pub mod rejection;
pub mod reload;
pub mod results;
pub mod server;
pub mod sim;
pub mod state;
pub mod store;
pub mod telemetry;
pub mod tools;

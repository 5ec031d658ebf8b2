//! The matchmaker library: everything but command-line parsing lives here.
//!
//! The core (`rating`, `matching`) is pure and synchronous; the shell (`api`, `store`,
//! `matchmaker`, `server`) is async and thin. See ARCHITECTURE.md.
#![forbid(unsafe_code)]

pub mod admin_cli;
pub mod api;
pub mod auth;
pub mod bench_memory;
pub mod bench_results;
pub mod config;
pub mod ids;
pub mod ledger;
pub mod limits;
pub mod listener;
pub mod loadgen;
pub mod matching;
pub mod matchmaker;
pub mod proto;
pub mod ranking;
pub mod rating;
pub mod results;
pub mod server;
pub mod sim;
pub mod state;
pub mod store;
pub mod telemetry;

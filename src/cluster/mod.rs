//! Cluster mode: several nodes share their state in Redis or Valkey, and any node serves any call.
//!
//! One node at a time owns the queues, by a lease in Redis with a fencing token
//! ([`lease`]); it runs the whole server ([`crate::server::run_engine`]) on the Redis store,
//! which sends the token with every write, so a stale owner's writes are refused. Every node's
//! front ([`front`]) forwards each call to the owner's engine. When the owner dies, stalls or is
//! cut off, its lease expires and another node takes it within two lease periods, loads the
//! state (players, parties, seasons, live matches, waiting tickets) and continues: from the
//! standby copy it kept by following the owner's change log (`store::Standby`), or by reading
//! everything.
//!
//! The node itself ([`node`]) runs the front, the lease task, the standby copy and, while it
//! owns the queues, the engine.

mod balance;
pub mod front;
pub mod lease;
pub mod link;
mod member;
pub mod merge;
mod node;
pub mod pages;
pub mod shards;
pub mod status;

pub use member::STANDBY;
pub use node::{NodeError, run_node};

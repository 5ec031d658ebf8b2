//! Operator tools built into the same binary: the admin client, the load generator and the
//! benchmarks. They talk to a server (or build one) like any other client; the server never
//! imports them.

pub mod admin;
pub mod bench_memory;
pub mod bench_results;
pub mod loadgen;
pub mod sim;

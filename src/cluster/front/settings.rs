//! What a node's front is set up with: how long calls wait, how it reaches the other nodes
//! and what it shows them.

use std::time::Duration;

use tonic::codegen::http;

/// How a node reaches the others when the nodes serve TLS (`[tls] enabled`).
#[derive(Clone, Debug)]
pub struct PeerTls {
    /// PEM certificates the other node's certificate must chain to.
    pub ca_pem: Vec<u8>,
    /// The name its certificate must carry; empty: the host of its advertised address.
    pub server_name: String,
}

/// How long a front waits for a call's owner, and for its answer.
#[derive(Clone, Copy, Debug)]
pub struct Waits {
    /// For an owner (a failover): 2 × `lease_ms` plus a second.
    pub for_owner: Duration,
    /// For the call's answer when its caller sets no shorter deadline:
    /// `server.request_timeout_ms`, as on a single node.
    pub for_answer: Duration,
    /// The same for the admin calls that change a whole rating pool
    /// (`server.admin_request_timeout_ms`).
    pub for_long_answer: Duration,
    /// Calls held at once (`server.max_concurrent_requests`); past it a call is refused
    /// RESOURCE_EXHAUSTED at once, as a single node sheds it.
    pub max_in_flight: usize,
}

/// What a front shows the owner with each link and forwarded stream.
pub struct Credentials {
    /// The cluster's node key.
    pub node_key: http::HeaderValue,
    /// The keyspace of the shard the front forwards calls for.
    pub shard: String,
}

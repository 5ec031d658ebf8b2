//! Operator tools built into the same binary: the admin client, the load generator and the
//! benchmarks. They talk to a server (or build one) like any other client; the server never
//! imports them.

pub mod admin;
pub mod bench_matcher;
pub mod bench_memory;
pub mod bench_results;
pub mod loadgen;

/// Why a tool could not finish: a bad flag, a server or store that failed, or a run that did not
/// go as the tool needs (a stream that ended early). Printed to the operator by `main`.
#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    /// A flag's value breaks its rule.
    #[error(transparent)]
    Flag(#[from] crate::rejection::FieldError),
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    #[error(transparent)]
    Server(#[from] crate::server::ServerError),
    #[error("invalid server address: {0}")]
    Address(#[from] tonic::codegen::http::uri::InvalidUri),
    #[error("cannot connect: {0}")]
    Connect(#[from] tonic::transport::Error),
    #[error("call failed: {0}")]
    Call(#[from] tonic::Status),
    #[error("a worker task failed: {0}")]
    Task(#[from] tokio::task::JoinError),
    #[error("{what}: {source}")]
    Io {
        what: String,
        source: std::io::Error,
    },
    #[error("{what}: {source}")]
    Json {
        what: String,
        source: serde_json::Error,
    },
    /// The run did not go as the tool needs.
    #[error("{0}")]
    Run(String),
}

impl ToolError {
    /// A flag's value breaks `rule`.
    pub fn flag(flag: &str, rule: impl Into<String>) -> Self {
        Self::Flag(crate::rejection::FieldError::new(flag, rule))
    }
}

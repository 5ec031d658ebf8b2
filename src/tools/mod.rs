//! Operator tools built into the same binary: the admin client, the load generator, the
//! benchmarks and the designer's `replay` and `simulate` commands. They talk to a server (or build one) like any other client; the server never
//! imports them.

pub mod admin;
pub mod admin_records;
pub mod bench_cluster;
pub mod bench_matcher;
pub mod bench_memory;
pub mod bench_results;
mod cluster_status;
pub mod loadgen;
mod match_records;
pub mod migrate_store;

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
    #[error("{what}: {source}")]
    Toml {
        what: String,
        source: Box<toml::de::Error>,
    },
    #[error("cannot write the output: {0}")]
    Output(#[from] std::io::Error),
    #[error("cannot encode the report: {0}")]
    Report(#[from] serde_json::Error),
    #[error(transparent)]
    History(#[from] crate::sim::history::HistoryError),
    #[error(transparent)]
    Plot(#[from] crate::sim::plot::PlotError),
    /// The run did not go as the tool needs.
    #[error("{0}")]
    Run(String),
}

impl ToolError {
    /// A flag's value breaks `rule`.
    pub fn flag(flag: &str, rule: impl Into<String>) -> Self {
        Self::Flag(crate::rejection::FieldError::new(flag, rule))
    }

    /// A file named by `what` (a flag and its path) could not be read.
    pub fn read(what: String) -> impl FnOnce(std::io::Error) -> Self {
        move |source| Self::Io { what, source }
    }

    /// A TOML file named by `what` could not be parsed.
    pub fn toml(what: String) -> impl FnOnce(toml::de::Error) -> Self {
        move |source| Self::Toml {
            what,
            source: Box::new(source),
        }
    }
}
pub mod sim;

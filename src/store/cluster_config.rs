//! `[cluster]`: where a cluster node keeps its state (Redis or Valkey) and how it holds the
//! queues. Absent `redis_url`, the server is one embedded node on sled and nothing here applies.

use serde::{Deserialize, Serialize};

use crate::rejection::FieldError;

/// `[cluster]` settings.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ClusterConfig {
    /// `redis://HOST:PORT/DB` (or `rediss://` for TLS, `redis://:PASSWORD@HOST...`); empty: one
    /// embedded node on sled.
    pub redis_url: String,
    /// This node's name in the lease and in logs; empty: the host name plus a random suffix.
    pub node_id: String,
    /// The address other nodes reach this node's gRPC on (`HOST:PORT`); empty: the bound one.
    pub advertise_addr: String,
    /// How long the queues' lease lasts without a renewal (milliseconds). A dead or cut-off
    /// owner loses the queues to another node within twice this.
    pub lease_ms: u64,
    /// Start on a Redis with neither an append-only file nor replicas (acknowledged results
    /// could then be lost with it).
    pub allow_volatile: bool,
    /// Replicas that must hold each write before it is acknowledged (Redis `WAIT`); 0: the
    /// primary's own persistence only.
    pub wait_replicas: u32,
    /// How long a write waits for those replicas (milliseconds) before it fails.
    pub wait_timeout_ms: u64,
    /// With `[tls] enabled`, nodes forward calls to each other over TLS and check the other
    /// node's certificate against these PEM certificates (the authority that signed the nodes'
    /// certificates); empty: the node's own `tls.cert_file`, for nodes sharing one certificate.
    pub peer_ca_file: std::path::PathBuf,
    /// The name the other node's certificate must carry; empty: the host of its
    /// `advertise_addr` (an IP address or DNS name in the certificate's subject alt names).
    pub peer_server_name: String,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        Self {
            redis_url: String::new(),
            node_id: String::new(),
            advertise_addr: String::new(),
            lease_ms: 3000,
            allow_volatile: false,
            wait_replicas: 0,
            wait_timeout_ms: 1000,
            peer_ca_file: std::path::PathBuf::new(),
            peer_server_name: String::new(),
        }
    }
}

impl ClusterConfig {
    /// Whether this process is a cluster node.
    pub fn enabled(&self) -> bool {
        !self.redis_url.is_empty()
    }

    /// Each key's rule; the error names the key.
    pub fn validate(&self) -> Result<(), FieldError> {
        let url = &self.redis_url;
        let schemes = ["redis://", "rediss://", "valkey://", "valkeys://"];
        if !url.is_empty() && !schemes.iter().any(|s| url.starts_with(s)) {
            return Err(FieldError::new(
                "cluster.redis_url",
                format!("must be a redis://HOST:PORT/DB URL (got {:?})", redact(url)),
            ));
        }
        if self.node_id.contains('|') || self.node_id.chars().any(char::is_whitespace) {
            return Err(FieldError::new(
                "cluster.node_id",
                "must not contain '|' or whitespace",
            ));
        }
        if !self.advertise_addr.is_empty() && !self.advertise_addr.contains(':') {
            return Err(FieldError::new(
                "cluster.advertise_addr",
                format!("must be HOST:PORT (got {:?})", self.advertise_addr.as_str()),
            ));
        }
        if !(300..=600_000).contains(&self.lease_ms) {
            return Err(FieldError::new(
                "cluster.lease_ms",
                format!("must be in 300..=600000 (got {})", self.lease_ms),
            ));
        }
        if self.wait_replicas > 0 && self.wait_timeout_ms == 0 {
            return Err(FieldError::new(
                "cluster.wait_timeout_ms",
                "must be above 0 when wait_replicas is set",
            ));
        }
        Ok(())
    }
}

/// A Redis URL with any password replaced by `***`, for messages and logs.
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    match rest.split_once('@') {
        Some((_, host)) => format!("{scheme}://***@{host}"),
        None => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_is_no_cluster_and_valid() {
        let c = ClusterConfig::default();
        assert!(!c.enabled());
        assert_eq!(c.validate(), Ok(()));
    }

    #[test]
    fn each_bad_value_names_its_key() {
        let bad = |c: ClusterConfig| c.validate().unwrap_err().field;
        let base = || ClusterConfig {
            redis_url: "redis://127.0.0.1:6379/0".into(),
            ..ClusterConfig::default()
        };
        assert_eq!(base().validate(), Ok(()));
        assert_eq!(
            bad(ClusterConfig {
                redis_url: "http://x".into(),
                ..base()
            }),
            "cluster.redis_url"
        );
        assert_eq!(
            bad(ClusterConfig {
                node_id: "a|b".into(),
                ..base()
            }),
            "cluster.node_id"
        );
        assert_eq!(
            bad(ClusterConfig {
                advertise_addr: "nohost".into(),
                ..base()
            }),
            "cluster.advertise_addr"
        );
        assert_eq!(
            bad(ClusterConfig {
                lease_ms: 10,
                ..base()
            }),
            "cluster.lease_ms"
        );
    }

    #[test]
    fn passwords_never_reach_messages() {
        assert_eq!(redact("redis://:s3cret@db:6379/0"), "redis://***@db:6379/0");
        assert_eq!(redact("redis://db:6379/0"), "redis://db:6379/0");
    }
}

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
    /// For a `rediss://` URL: PEM certificates Redis' certificate must chain to; empty: the
    /// system's trust store (managed Redis services' public authorities).
    pub redis_ca_file: std::path::PathBuf,
    /// For a `rediss://` URL: this node's PEM client certificate, for a Redis that checks its
    /// clients (`tls-auth-clients yes`, Redis' default with TLS on); with `redis_key_file`.
    pub redis_cert_file: std::path::PathBuf,
    /// The client certificate's PEM private key.
    pub redis_key_file: std::path::PathBuf,
    /// The hash tag of every key this cluster writes (`{mm}:lease`, `{mm}:players`, ...).
    /// Clusters in different keyspaces share one Redis without seeing each other (one per
    /// region, say); on a Redis Cluster each keyspace is one slot, so they spread over the
    /// primaries. Every node of one cluster names the same.
    pub keyspace: String,
    /// This node's name in the lease and in logs; empty: the host name plus a random suffix.
    pub node_id: String,
    /// The address other nodes reach this node's gRPC on (`HOST:PORT`); empty: the bound one.
    pub advertise_addr: String,
    /// How long the queues' lease lasts without a renewal (milliseconds). A dead or cut-off
    /// owner loses the queues to another node within twice this.
    pub lease_ms: u64,
    /// Keep a standby copy of the state while another node owns the queues, following the
    /// owner's change log, so that a takeover starts from it rather than reading everything
    /// (the owner logs its writes when this is set). Costs each node the state's memory.
    pub standby: bool,
    /// Start on a Redis without an append-only file whose writes wait for no replica (none,
    /// or `wait_replicas` 0): acknowledged results could then be lost with the primary.
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
    /// Further shards (`[[cluster.shards]]`): each takes its queues out of `keyspace` into a
    /// keyspace of its own, with its own lease, so that several nodes run queues' optimizers at
    /// once. The queues no shard names stay in `keyspace`, the home shard, which also keeps
    /// what no queue owns (party rosters). Empty: one lease for every queue.
    pub shards: Vec<ShardConfig>,
    /// What the ids this engine mints carry to name its shard: empty in the home shard (and
    /// with no shards), the keyspace in the others. Set by the node, never read from config.
    #[serde(skip)]
    pub id_tag: String,
    /// Every shard's keyspace, the home shard's first, in whose name every shard claims the
    /// players it queues (see `store::Claim`); empty without shards. Set by the node, never
    /// read from config.
    #[serde(skip)]
    pub claims: Vec<String>,
}

/// One `[[cluster.shards]]` entry.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShardConfig {
    /// The shard's keyspace (the hash tag of its keys), unlike every other shard's.
    pub keyspace: String,
    /// Its queues: every queue of a rating pool its queues name (queues sharing a pool share
    /// each player's record).
    pub queues: Vec<String>,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        Self {
            redis_url: String::new(),
            redis_ca_file: std::path::PathBuf::new(),
            redis_cert_file: std::path::PathBuf::new(),
            redis_key_file: std::path::PathBuf::new(),
            keyspace: super::DEFAULT_KEYSPACE.to_string(),
            node_id: String::new(),
            advertise_addr: String::new(),
            lease_ms: 3000,
            standby: true,
            allow_volatile: false,
            wait_replicas: 0,
            wait_timeout_ms: 1000,
            peer_ca_file: std::path::PathBuf::new(),
            peer_server_name: String::new(),
            shards: Vec::new(),
            id_tag: String::new(),
            claims: Vec::new(),
        }
    }
}

impl ClusterConfig {
    /// Whether this process is a cluster node.
    pub fn enabled(&self) -> bool {
        !self.redis_url.is_empty()
    }

    /// The names of this cluster's keys.
    pub fn keys(&self) -> super::Keys {
        super::Keys::new(&self.keyspace)
    }

    /// Every shard's keyspace, the home shard's first.
    pub fn keyspaces(&self) -> Vec<&str> {
        std::iter::once(self.keyspace.as_str())
            .chain(self.shards.iter().map(|s| s.keyspace.as_str()))
            .collect()
    }

    /// The keyspace of the shard that holds `queue`: the one naming it, else the home shard.
    pub fn keyspace_of(&self, queue: &str) -> &str {
        self.shards
            .iter()
            .find(|s| s.queues.iter().any(|q| q == queue))
            .map_or(self.keyspace.as_str(), |s| s.keyspace.as_str())
    }

    /// This config as one shard's node sees it: `keyspace` is the shard's, and it has no further
    /// shards (the caller keeps only the shard's queues).
    pub fn for_shard(&self, keyspace: &str) -> Self {
        let home = keyspace == self.keyspace;
        Self {
            keyspace: keyspace.to_string(),
            shards: Vec::new(),
            id_tag: if home {
                String::new()
            } else {
                keyspace.to_string()
            },
            claims: if self.shards.is_empty() {
                Vec::new()
            } else {
                self.keyspaces().into_iter().map(str::to_string).collect()
            },
            ..self.clone()
        }
    }

    fn redis_tls_files(&self) -> [(&'static str, &std::path::Path); 3] {
        [
            ("cluster.redis_ca_file", &self.redis_ca_file),
            ("cluster.redis_cert_file", &self.redis_cert_file),
            ("cluster.redis_key_file", &self.redis_key_file),
        ]
    }

    /// What a `rediss://` connection trusts and presents, read from the files (`None`: the
    /// defaults); the error names the key whose file could not be read.
    pub fn redis_tls(&self) -> Result<Option<super::RedisTls>, FieldError> {
        let read = |(key, path): (&'static str, &std::path::Path)| {
            if path.as_os_str().is_empty() {
                return Ok(None);
            }
            std::fs::read(path)
                .map(Some)
                .map_err(|e| FieldError::new(key, format!("{}: {e}", path.display())))
        };
        let [ca, cert, key] = self.redis_tls_files();
        let tls = super::RedisTls {
            ca_pem: read(ca)?,
            client: read(cert)?.zip(read(key)?),
        };
        Ok((tls != super::RedisTls::default()).then_some(tls))
    }

    /// Each key's rule; the error names the key.
    pub fn validate(&self) -> Result<(), FieldError> {
        let url = &self.redis_url;
        let schemes = ["redis://", "rediss://", "valkey://", "valkeys://"];
        if super::redis_store::is_sentinel_url(url) {
            super::redis_store::SentinelUrl::parse(url).map_err(|e| {
                FieldError::new(
                    "cluster.redis_url",
                    format!(
                        "a redis+sentinel://HOST:PORT[,HOST:PORT...]/SERVICE[/DB] URL {e} (got {:?})",
                        redact(url)
                    ),
                )
            })?;
        } else if !url.is_empty() && !schemes.iter().any(|s| url.starts_with(s)) {
            return Err(FieldError::new(
                "cluster.redis_url",
                format!(
                    "must be a redis://HOST:PORT/DB URL, or redis+sentinel://HOST:PORT/SERVICE \
                     for Sentinel (got {:?})",
                    redact(url)
                ),
            ));
        }
        let files = self.redis_tls_files();
        let tls_url = ["rediss://", "valkeys://", "rediss+sentinel://"]
            .iter()
            .any(|s| url.starts_with(s));
        for (key, path) in files {
            if path.as_os_str().is_empty() {
                continue;
            }
            if !tls_url {
                return Err(FieldError::new(
                    key,
                    format!(
                        "applies to a rediss:// cluster.redis_url only (got {:?})",
                        redact(url)
                    ),
                ));
            }
            if !path.is_file() {
                return Err(FieldError::new(
                    key,
                    format!("file {} does not exist", path.display()),
                ));
            }
        }
        let [_, (cert_key, cert), (key_key, key)] = files;
        if cert.as_os_str().is_empty() != key.as_os_str().is_empty() {
            let missing = if cert.as_os_str().is_empty() {
                cert_key
            } else {
                key_key
            };
            return Err(FieldError::new(
                missing,
                "a client certificate needs both cluster.redis_cert_file and cluster.redis_key_file",
            ));
        }
        super::check_keyspace(&self.keyspace)
            .map_err(|rule| FieldError::new("cluster.keyspace", rule))?;
        if !self.shards.is_empty() && self.redis_url.is_empty() {
            return Err(FieldError::new(
                "cluster.shards",
                "needs cluster.redis_url: shards split a cluster's queues over several leases",
            ));
        }
        for (i, shard) in self.shards.iter().enumerate() {
            let field = format!("cluster.shards[{i}].keyspace");
            super::check_keyspace(&shard.keyspace).map_err(|rule| FieldError::new(&field, rule))?;
            if self.keyspaces()[..=i].contains(&shard.keyspace.as_str()) {
                return Err(FieldError::new(
                    field,
                    format!("{:?} is already another shard's keyspace", shard.keyspace),
                ));
            }
            if shard.queues.is_empty() {
                return Err(FieldError::new(
                    format!("cluster.shards[{i}].queues"),
                    "must name at least one queue",
                ));
            }
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

/// A URL with its credentials replaced by `***`, for messages and logs: the user and password
/// before the host, and the value of every query parameter (a Sentinel URL's
/// `sentinel_password`).
///
/// The credentials end at the last `@` that is followed by a host list (up to the next `/` or
/// `?`: names, addresses, ports, commas) and not preceded by a query parameter (`?name=`): so a
/// password holding an unescaped `@`, `/` or `?` is hidden whole (URL parsers would read such a
/// URL otherwise, but Sentinel URLs take everything before the last `@` as the user and
/// password), and an `@` in a query value is not taken for one.
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let host_list = |after: &str| {
        let end = after.find(['/', '?']).unwrap_or(after.len());
        end > 0
            && after[..end]
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || ".-_:,[]".contains(c))
    };
    let in_query = |before: &str| before.split_once('?').is_some_and(|(_, q)| q.contains('='));
    let at = rest
        .match_indices('@')
        .map(|(i, _)| i)
        .rev()
        .find(|&i| host_list(&rest[i + 1..]) && !in_query(&rest[..i]));
    let (credentials, rest) = match at {
        Some(at) => (true, &rest[at + 1..]),
        None => (false, rest),
    };
    let (rest, query) = match rest.split_once('?') {
        Some((rest, query)) => (rest, Some(query)),
        None => (rest, None),
    };
    let mut out = if credentials {
        format!("{scheme}://***@{rest}")
    } else {
        format!("{scheme}://{rest}")
    };
    if let Some(query) = query {
        out.push('?');
        let params: Vec<String> = query
            .split('&')
            .map(|param| match param.split_once('=') {
                Some((name, _)) => format!("{name}=***"),
                None => param.to_string(),
            })
            .collect();
        out.push_str(&params.join("&"));
    }
    out
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
        let sentinel = |url: &str| ClusterConfig {
            redis_url: url.into(),
            ..base()
        };
        assert_eq!(
            sentinel("redis+sentinel://a:26379,b:26379/mm/0").validate(),
            Ok(())
        );
        let error = sentinel("redis+sentinel://:pw@a:26379")
            .validate()
            .unwrap_err();
        assert_eq!(error.field, "cluster.redis_url");
        assert!(error.rule.contains("SERVICE"), "{}", error.rule);
        assert!(!error.rule.contains("pw"), "{}", error.rule);
        assert_eq!(
            bad(ClusterConfig {
                keyspace: "{eu}".into(),
                ..base()
            }),
            "cluster.keyspace"
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
    fn redis_tls_files_need_a_rediss_url_an_existing_file_and_come_in_pairs() {
        let dir = tempfile::tempdir().unwrap();
        let pem = dir.path().join("a.pem");
        std::fs::write(&pem, "PEM").unwrap();
        let tls = |url: &str| ClusterConfig {
            redis_url: url.into(),
            ..ClusterConfig::default()
        };
        let bad = |c: ClusterConfig| c.validate().unwrap_err().field;
        assert_eq!(tls("rediss://db:6380/0").redis_tls(), Ok(None));
        assert_eq!(
            bad(ClusterConfig {
                redis_ca_file: pem.clone(),
                ..tls("redis://db:6379/0")
            }),
            "cluster.redis_ca_file"
        );
        assert_eq!(
            bad(ClusterConfig {
                redis_ca_file: dir.path().join("missing.pem"),
                ..tls("rediss://db:6380/0")
            }),
            "cluster.redis_ca_file"
        );
        assert_eq!(
            bad(ClusterConfig {
                redis_cert_file: pem.clone(),
                ..tls("rediss://db:6380/0")
            }),
            "cluster.redis_key_file"
        );
        assert_eq!(
            bad(ClusterConfig {
                redis_key_file: pem.clone(),
                ..tls("valkeys://db:6380/0")
            }),
            "cluster.redis_cert_file"
        );
        let both = ClusterConfig {
            redis_ca_file: pem.clone(),
            redis_cert_file: pem.clone(),
            redis_key_file: pem.clone(),
            ..tls("rediss://db:6380/0")
        };
        assert_eq!(both.validate(), Ok(()));
        let read = both.redis_tls().unwrap().unwrap();
        assert_eq!(read.ca_pem.as_deref(), Some(&b"PEM"[..]));
        assert_eq!(read.client, Some((b"PEM".to_vec(), b"PEM".to_vec())));
    }

    #[test]
    fn passwords_never_reach_messages() {
        assert_eq!(redact("redis://:s3cret@db:6379/0"), "redis://***@db:6379/0");
        assert_eq!(redact("redis://db:6379/0"), "redis://db:6379/0");
        assert_eq!(
            redact("redis://user:p@ss@db:6379/0"),
            "redis://***@db:6379/0"
        );
        assert_eq!(
            redact("rediss://:a@b@c@db.example:6380"),
            "rediss://***@db.example:6380"
        );
        assert_eq!(
            redact("redis+sentinel://:pw@a:26379,b:26379/mm/0?sentinel_password=s3cret"),
            "redis+sentinel://***@a:26379,b:26379/mm/0?sentinel_password=***"
        );
        assert_eq!(
            redact("redis+sentinel://:p/w@d@a:26379/mm"),
            "redis+sentinel://***@a:26379/mm"
        );
        assert_eq!(
            redact("redis://:pa?ss@db:6379/0?x=1"),
            "redis://***@db:6379/0?x=***"
        );
        assert_eq!(redact("redis://db:6379/0?x=a@b"), "redis://db:6379/0?x=***");
        assert_eq!(
            redact("redis://:pw@db/0?x=a@b"),
            "redis://***@db/0?x=***",
            "the credentials' `@`, not the query's"
        );
        // A password holding a `?` and then a `/` (or the other way round).
        assert_eq!(redact("redis://:pa?s/s@db:6379/0"), "redis://***@db:6379/0");
        assert_eq!(redact("redis://:p/a?ss@db:6379"), "redis://***@db:6379");
        assert_eq!(
            redact("redis://[::1]:6379/0"),
            "redis://[::1]:6379/0",
            "an address in brackets is no credential"
        );
        assert_eq!(redact("not a url"), "not a url");
    }
}

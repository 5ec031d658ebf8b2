//! The names of a cluster's keys. Every key carries the hash tag of the cluster's keyspace
//! (`{mm}` by default, `cluster.keyspace`): a script may only touch keys of one slot in Redis
//! Cluster, and each flush touches several of them. Clusters in different keyspaces share a
//! Redis without seeing each other's keys; on a Redis Cluster each keyspace is one slot, so
//! keyspaces spread over the primaries.

use super::{HASHES, Hash};
use crate::ids::{PartyId, PlayerId};

/// The keyspace of a cluster that names none.
pub const DEFAULT_KEYSPACE: &str = "mm";

/// The longest keyspace name.
const MAX_KEYSPACE: usize = 64;

/// Every key name of one keyspace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Keys {
    keyspace: String,
    lease: String,
    pause: String,
    fence: String,
    node_key: String,
    standbys: String,
    nodes: String,
    changes: String,
    change_seq: String,
    flight: String,
    migration: String,
    staged: String,
    /// By `Hash as usize - 2`, as the script receives them.
    hashes: Vec<String>,
}

impl Default for Keys {
    fn default() -> Self {
        Self::new(DEFAULT_KEYSPACE)
    }
}

impl Keys {
    /// The keys of `keyspace` (check it first with [`check_keyspace`]).
    pub fn new(keyspace: &str) -> Self {
        let key = |name: &str| format!("{{{keyspace}}}:{name}");
        Self {
            keyspace: keyspace.to_string(),
            lease: key("lease"),
            pause: key("lease_pause"),
            fence: key("fence"),
            node_key: key("node_key"),
            standbys: key("standbys"),
            nodes: key("nodes"),
            changes: key("changes"),
            change_seq: key("change_seq"),
            flight: key("flight"),
            migration: key("migration"),
            staged: key("staged"),
            hashes: HASHES.iter().map(|(_, name)| key(name)).collect(),
        }
    }

    /// The keyspace's name.
    pub fn keyspace(&self) -> &str {
        &self.keyspace
    }

    /// In the home keyspace: the keyspace each queue and rating pool keeps its records in
    /// (see `placement.rs`).
    pub fn placement(&self) -> String {
        format!("{{{}}}:placement", self.keyspace)
    }

    /// The lease: `token|node_id|advertise_addr`, with a time to live.
    pub fn lease(&self) -> &str {
        &self.lease
    }

    /// How many owners in a row gave the lease up because their store failed, and until when
    /// (Redis' clock, in milliseconds) no node takes the lease: `STOPS|UNTIL_MS`, with a time
    /// to live (see `cluster::lease`).
    pub fn pause(&self) -> &str {
        &self.pause
    }

    /// The fencing counter.
    pub fn fence(&self) -> &str {
        &self.fence
    }

    /// The key the nodes show each other (set once, by the first node to start).
    pub fn node_key(&self) -> &str {
        &self.node_key
    }

    /// The nodes holding a current standby copy: a sorted set of node ids, each scored with
    /// the time (Redis' clock, in milliseconds) its entry lapses unless renewed.
    pub fn standbys(&self) -> &str {
        &self.standbys
    }

    /// The nodes that run, each until when (Redis' clock, in milliseconds) its last word
    /// holds: a sorted set the nodes of a sharded cluster keep in the home shard's keyspace,
    /// so that each knows how many share the shards.
    pub fn nodes(&self) -> &str {
        &self.nodes
    }

    /// The change log: a stream with one entry per flush naming the fields it wrote, which
    /// standby nodes follow to keep a copy of the state (see `standby.rs`).
    pub fn changes(&self) -> &str {
        &self.changes
    }

    /// The flush counter: every flush adds one, logged or not, so a follower that misses one
    /// sees the gap.
    pub fn change_seq(&self) -> &str {
        &self.change_seq
    }

    /// Every player's records, by player id.
    pub fn players(&self) -> &str {
        self.hash(Hash::Players)
    }

    /// The waiting tickets, by ticket id.
    pub fn tickets(&self) -> &str {
        self.hash(Hash::Tickets)
    }

    /// The last flush call the owner's store had applied, as `TOKEN|NODE|N` (see the flush's
    /// script).
    pub fn flight(&self) -> &str {
        &self.flight
    }

    /// What `admin migrate-store` wrote into the keyspace (see `tools::migrate_store`): a hash
    /// naming its source, and once verified, the flush counter it left.
    pub fn migration(&self) -> &str {
        &self.migration
    }

    /// The stage of a batch too large for one script, written in parts (see `stage.rs`).
    pub fn staged(&self) -> &str {
        &self.staged
    }

    /// The store's meta hash (`snapshot_seq`, `last_seq`, the keyspace's `format`, ...).
    pub fn meta(&self) -> &str {
        self.hash(Hash::Meta)
    }

    /// Every key a node or a store's flush writes, but the lease, its pause, the fencing
    /// counter and the players' history lists and past indexes (a flush that writes one also
    /// creates `change_seq`): none of them exists in a keyspace nothing has written to.
    pub fn written(&self) -> Vec<&str> {
        let mut keys: Vec<&str> = self.hashes.iter().map(String::as_str).collect();
        keys.extend([
            self.node_key.as_str(),
            &self.standbys,
            &self.changes,
            &self.change_seq,
            &self.flight,
            &self.staged,
        ]);
        keys
    }

    /// One of the store's hashes.
    pub(super) fn hash(&self, h: Hash) -> &str {
        &self.hashes[h as usize - 2]
    }

    /// Every hash, in the order the script receives them.
    pub(super) fn hashes(&self) -> impl Iterator<Item = (Hash, &str)> {
        HASHES
            .iter()
            .zip(&self.hashes)
            .map(|((h, _), name)| (*h, name.as_str()))
    }

    /// When party `party` (of this home shard) last entered a queue of another shard (its
    /// store's clock, Unix seconds), with a time to live: the home shard's expiry counts it.
    pub(super) fn party_entered(&self, party: &PartyId) -> String {
        format!("{{{}}}:party-entered:{party}", self.keyspace)
    }

    /// A player's history list: match ids, most recently ended first.
    pub(super) fn history(&self, player: &PlayerId) -> String {
        format!("{{{}}}:history:{player}", self.keyspace)
    }

    /// A player's past index: a set of the stored records that left their history list while
    /// other lists held them.
    pub(super) fn past(&self, player: &PlayerId) -> String {
        format!("{}{player}", self.past_prefix())
    }

    /// What every past index's name starts with (the flush's script appends a player id).
    pub(super) fn past_prefix(&self) -> String {
        format!("{{{}}}:past:", self.keyspace)
    }
}

/// Why `keyspace` cannot name a keyspace, if it cannot: 1 to 64 letters, digits, `-`, `_`
/// or `.` (the braces of a hash tag, and anything a shell or URL would mangle, are out).
pub fn check_keyspace(keyspace: &str) -> Result<(), String> {
    if keyspace.is_empty() || keyspace.len() > MAX_KEYSPACE {
        return Err(format!("must be 1 to {MAX_KEYSPACE} characters"));
    }
    match keyspace
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
    {
        Some(c) => Err(format!(
            "{c:?} is not allowed: use letters, digits, '-', '_' or '.'"
        )),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_of_a_keyspace_carries_its_hash_tag() {
        let keys = Keys::new("eu-west");
        assert_eq!(keys.lease(), "{eu-west}:lease");
        assert_eq!(keys.fence(), "{eu-west}:fence");
        assert_eq!(keys.pause(), "{eu-west}:lease_pause");
        assert_eq!(keys.node_key(), "{eu-west}:node_key");
        assert_eq!(keys.changes(), "{eu-west}:changes");
        assert_eq!(keys.change_seq(), "{eu-west}:change_seq");
        assert_eq!(keys.hash(Hash::Players), "{eu-west}:players");
        assert_eq!(keys.hash(Hash::Admin), "{eu-west}:admin");
        assert_eq!(keys.history(&PlayerId::new("p1")), "{eu-west}:history:p1");
        assert_eq!(keys.past(&PlayerId::new("p1")), "{eu-west}:past:p1");
        assert_eq!(keys.migration(), "{eu-west}:migration");
        assert_eq!(keys.staged(), "{eu-west}:staged");
        assert_eq!(keys.written().len(), HASHES.len() + 6);
        assert!(keys.written().iter().all(|k| k.starts_with("{eu-west}:")));
        assert_eq!(keys.hashes().count(), HASHES.len());
        assert!(keys.hashes().all(|(h, name)| keys.hash(h) == name));
        assert!(
            keys.hashes()
                .all(|(_, name)| name.starts_with("{eu-west}:"))
        );
        // The default keyspace names the keys every earlier cluster wrote.
        assert_eq!(Keys::default().hash(Hash::Tickets), "{mm}:tickets");
    }

    #[test]
    fn a_keyspace_is_a_short_plain_name() {
        assert!(check_keyspace("mm").is_ok());
        assert!(check_keyspace("na.ranked_2-v2").is_ok());
        assert!(check_keyspace("").is_err());
        assert!(check_keyspace(&"x".repeat(65)).is_err());
        for bad in ["a}b", "{a", "a b", "a:b", "é"] {
            let err = check_keyspace(bad).unwrap_err();
            assert!(err.contains("is not allowed"), "{bad}: {err}");
        }
    }
}

//! Newtype ids shared by every module, so a player id can never be passed where a match id belongs.

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

macro_rules! string_id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(Arc<str>);

        impl $name {
            /// Wraps a string that has already been validated by the caller.
            pub fn new(s: impl Into<Arc<str>>) -> Self {
                Self(s.into())
            }

            /// The id as a string slice.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}({:?})", stringify!($name), &*self.0)
            }
        }

        impl From<&str> for $name {
            fn from(s: &str) -> Self {
                Self::new(s)
            }
        }
    };
}

string_id!(
    /// A player, as the game names it.
    PlayerId
);
string_id!(
    /// A queue name from config (`1v1`, `5v5`, ...).
    QueueId
);
string_id!(
    /// A ticket: one player or one party waiting in one queue.
    TicketId
);
string_id!(
    /// A formed match.
    MatchId
);
string_id!(
    /// A party made with `PartyService`.
    PartyId
);

/// An id with a readable prefix: 48 bits of unix milliseconds then 80 random bits (ULID-like),
/// so ids never repeat across restarts and ids minted close in time sort close together. That
/// matters for the store: match ids are keys of its live-match records, and time-ordered keys
/// land on the same few pages where random ones rewrote a different page per match.
pub fn new_id(prefix: &str) -> String {
    let millis = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis()) as u64;
    let random = rand::random::<u128>() & ((1u128 << 80) - 1);
    // The 128 bits as 32 lowercase hex digits, written directly: `format!`'s padded hex
    // formatting was most of an id's cost, and every ticket and match mints one.
    let bits = (u128::from(millis & 0xffff_ffff_ffff) << 80) | random;
    let mut id = String::with_capacity(prefix.len() + 33);
    id.push_str(prefix);
    id.push('-');
    for shift in (0..32).rev() {
        let digit = ((bits >> (shift * 4)) & 0xf) as u32;
        id.push(char::from_digit(digit, 16).expect("a hex digit is below 16"));
    }
    id
}

/// An id as [`new_id`] mints it, naming the shard that minted it after the prefix
/// (`t.eu-...`): a cluster node sends each call about it to that shard's owner. An empty `tag`
/// (the home shard's, and every id without shards) mints the plain id.
pub fn new_tagged_id(prefix: &str, tag: &str) -> String {
    if tag.is_empty() {
        new_id(prefix)
    } else {
        new_id(&format!("{prefix}.{tag}"))
    }
}

/// The shard an id [`new_tagged_id`] minted names; `None` for a plain id.
#[must_use]
pub fn id_tag(id: &str) -> Option<&str> {
    let (head, _) = id.rsplit_once('-')?;
    head.split_once('.')
        .map(|(_, tag)| tag)
        .filter(|t| !t.is_empty())
}

/// When an id [`new_id`] minted was minted (unix seconds, to the millisecond), read from its
/// time part; `None` for an id of another shape (a client's, a test's). A match id's is when
/// the match formed.
#[must_use]
pub fn minted_unix(id: &str) -> Option<f64> {
    let (_, bits) = id.rsplit_once('-')?;
    if bits.len() != 32 || !bits.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
        return None;
    }
    let millis = u64::from_str_radix(&bits[..12], 16).ok()?;
    Some(millis as f64 / 1000.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tagged_id_names_its_shard_and_keeps_its_mint_time() {
        let id = new_tagged_id("t", "eu-west.2");
        assert!(id.starts_with("t.eu-west.2-"), "{id}");
        assert_eq!(id_tag(&id), Some("eu-west.2"));
        assert!(minted_unix(&id).is_some());
        let plain = new_tagged_id("m", "");
        assert!(plain.starts_with("m-"), "{plain}");
        assert_eq!(id_tag(&plain), None);
        assert_eq!(id_tag("no-dash.here"), None);
        assert_eq!(id_tag("client-id"), None);
    }

    #[test]
    fn the_mint_time_is_read_back_from_a_minted_id_only() {
        let before = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        let minted = minted_unix(&new_id("m")).unwrap();
        assert!((minted - before).abs() < 60.0, "{minted} vs {before}");
        assert_eq!(
            minted_unix("m-0000000003e8ffffffffffffffffffff"),
            Some(1.0),
            "1000 ms"
        );
        for other in [
            "m1",
            "m-1",
            "match-7",
            "m-0000000003E8FFFFFFFFFFFFFFFFFFFF",
            "",
        ] {
            assert_eq!(minted_unix(other), None, "{other}");
        }
    }

    #[test]
    fn ids_are_unique_fixed_width_and_ordered_by_time() {
        let a = new_id("m");
        assert_eq!(a.len(), 2 + 32);
        assert!(a.starts_with("m-"));
        let ids: std::collections::HashSet<String> = (0..10_000).map(|_| new_id("t")).collect();
        assert_eq!(ids.len(), 10_000);
        // The first 12 hex digits are the millisecond clock: never decreasing.
        let earlier = new_id("m");
        let later = new_id("m");
        assert!(earlier[2..14] <= later[2..14], "{earlier} {later}");
        // Lowercase hex throughout, and the time part is the unix milliseconds of now.
        assert!(
            a[2..]
                .chars()
                .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c)),
            "{a}"
        );
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64;
        let minted = u64::from_str_radix(&later[2..14], 16).unwrap();
        assert!(
            minted <= now && now - minted < 60_000,
            "{later} minted at {now}"
        );
    }
}

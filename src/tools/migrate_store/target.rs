//! Which Redis keyspace a migration may write into: an empty one, or one holding an unfinished
//! or finished migration from the same data dir that no cluster node has touched since.
//!
//! A migration copies the source's records whole over what the keyspace holds, moves
//! `snapshot_seq` to the source's and replaces the live matches: run over a keyspace a cluster
//! has written to, it would put back the ratings, matches and histories of the day the source
//! stopped. So before its first write it leaves a marker, `{keyspace}:migration` (a hash:
//! `source`, `source_state`, `state`, and once verified the flush counter `change_seq` it
//! left), and a later run goes ahead only when
//! - the marker names the same source (its canonical path),
//! - no node has started on the keyspace (every node sets the node key when it starts),
//! - after a finished migration, no flush has happened since (`change_seq` as it left it),
//! - the source is as it was when the migration began (`source_state`: its journal, event
//!   and audit counters and the checksum of everything a migration moves): a migration only
//!   writes records, so what the server dropped from the source since (an erased player, a
//!   party that broke up, trimmed events) would stay in the keyspace and no run would verify,
//! - the journal and snapshot marks are not past the source's.

use std::collections::HashMap;

use redis::Script;

use crate::cluster::lease::Owner;
use crate::store::{Keys, RedisConn};

/// Writes the marker if the lease is still the migration's (one script: a migration whose
/// lease lapsed cannot mark a keyspace a node now owns). With `done`, it also keeps the flush
/// counter as the migration left it. The source's state is written as it was found: a run
/// goes ahead only when it equals the marker's, or the marker has none (an earlier release
/// wrote it).
const MARK: &str = r"
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return redis.error_reply('FENCED the migration no longer holds the lease')
end
if ARGV[3] == 'done' then
  redis.call('HSET', KEYS[2], 'source', ARGV[2], 'source_state', ARGV[4], 'state', 'done',
    'change_seq', redis.call('GET', KEYS[3]) or '0')
else
  redis.call('HDEL', KEYS[2], 'change_seq')
  redis.call('HSET', KEYS[2], 'source', ARGV[2], 'source_state', ARGV[4], 'state', ARGV[3])
end
return 1
";

/// What the source holds that a keyspace written since would be past.
#[derive(Clone, Debug)]
pub(super) struct Source {
    /// The data dir's canonical path.
    pub(super) id: String,
    pub(super) last_seq: u64,
    pub(super) snapshot_seq: u64,
    /// Where the source stands (see [`source_state`]): a server that ran on it since the
    /// migration began changed it.
    pub(super) state: String,
}

/// The source's state as the marker keeps it: its journal, event and audit counters, for the
/// operator to read, and the checksum of everything a migration moves, which any change to
/// those records alters.
pub(super) fn source_state(
    last_seq: u64,
    snapshot_seq: u64,
    last_event: u64,
    last_audit: u64,
    checksum: &str,
) -> String {
    format!(
        "journal {last_seq} (snapshot {snapshot_seq}), event log {last_event}, audit log \
         {last_audit}, checksum {checksum}"
    )
}

/// A migration's marker, as read back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Marker {
    pub(super) source: String,
    /// The source's state when the migration began (`None`: an earlier release's marker).
    pub(super) source_state: Option<String>,
    pub(super) done: bool,
    /// The flush counter a finished migration left.
    pub(super) change_seq: u64,
}

/// What the keyspace holds, as far as deciding goes.
#[derive(Clone, Debug, Default)]
pub(super) struct Found {
    pub(super) marker: Option<Marker>,
    /// Any key a node or a store writes exists.
    pub(super) written: bool,
    /// A node has started on the keyspace (its node key is set).
    pub(super) node_started: bool,
    pub(super) change_seq: u64,
    pub(super) last_seq: u64,
    pub(super) snapshot_seq: u64,
}

/// Why a migration from `source` may not write into a keyspace holding `found`, if it may not.
pub(super) fn refusal(found: &Found, source: &Source, keys: &Keys) -> Option<String> {
    let redo = "a migration writes the source's records over the keyspace's, so it would undo \
                what was written since; migrate into an empty keyspace (another --keyspace, or \
                delete this one's keys first)";
    let Some(marker) = &found.marker else {
        if found.written {
            return Some(format!(
                "keyspace {} already holds data that no migration from {} wrote; {redo}",
                keys.keyspace(),
                source.id
            ));
        }
        return None;
    };
    if marker.source != source.id {
        return Some(format!(
            "keyspace {} holds a migration from {}, not from {}; {redo}",
            keys.keyspace(),
            marker.source,
            source.id
        ));
    }
    if found.node_started {
        return Some(format!(
            "a cluster node has started on keyspace {} since the migration from {} (it set {}), \
             so the keyspace may hold newer data than the source; {redo}",
            keys.keyspace(),
            source.id,
            keys.node_key()
        ));
    }
    if let Some(began) = marker
        .source_state
        .as_deref()
        .filter(|began| *began != source.state)
    {
        return Some(format!(
            "the source {} changed since the migration into keyspace {} began (then: {began}; \
             now: {}), as when the server ran on it in between. A migration writes records and \
             removes none, so what left the source since (an erased player, a party that broke \
             up, trimmed events) would stay in the keyspace and no run could verify. To \
             migrate the source as it is now, delete this keyspace's keys first (`redis-cli \
             --scan --pattern '{{{}}}:*' | xargs redis-cli del`), or migrate into another \
             keyspace (--keyspace)",
            source.id,
            keys.keyspace(),
            source.state,
            keys.keyspace(),
        ));
    }
    if marker.done && found.change_seq != marker.change_seq {
        return Some(format!(
            "keyspace {} was written {} times since the migration from {} finished; {redo}",
            keys.keyspace(),
            found.change_seq.saturating_sub(marker.change_seq),
            source.id
        ));
    }
    if found.last_seq > source.last_seq || found.snapshot_seq > source.snapshot_seq {
        return Some(format!(
            "keyspace {} has journaled up to {} (snapshot {}), past the source's {} (snapshot \
             {}); {redo}",
            keys.keyspace(),
            found.last_seq,
            found.snapshot_seq,
            source.last_seq,
            source.snapshot_seq
        ));
    }
    None
}

/// Reads what [`refusal`] decides on.
pub(super) async fn read(conn: &RedisConn, keys: &Keys) -> Result<Found, String> {
    let mut conn = conn.clone();
    let err = |e: redis::RedisError| e.to_string();
    let marker: HashMap<String, String> = redis::cmd("HGETALL")
        .arg(keys.migration())
        .query_async(&mut conn)
        .await
        .map_err(err)?;
    let written: u64 = redis::cmd("EXISTS")
        .arg(keys.written())
        .query_async(&mut conn)
        .await
        .map_err(err)?;
    let node_started: bool = redis::cmd("EXISTS")
        .arg(keys.node_key())
        .query_async(&mut conn)
        .await
        .map_err(err)?;
    let change_seq: Option<String> = redis::cmd("GET")
        .arg(keys.change_seq())
        .query_async(&mut conn)
        .await
        .map_err(err)?;
    let meta: Vec<Option<String>> = redis::cmd("HMGET")
        .arg(keys.meta())
        .arg("last_seq")
        .arg("snapshot_seq")
        .query_async(&mut conn)
        .await
        .map_err(err)?;
    let number = |key: &str, value: Option<&str>| -> Result<u64, String> {
        value.map_or(Ok(0), |v| {
            v.parse()
                .map_err(|_| format!("{key} holds {v:?}, not a sequence number"))
        })
    };
    let marker = if marker.is_empty() {
        None
    } else {
        let field = |name: &str| marker.get(name).map(String::as_str);
        let source = field("source")
            .ok_or_else(|| format!("{} names no source", keys.migration()))?
            .to_string();
        Some(Marker {
            source,
            source_state: field("source_state").map(str::to_string),
            done: field("state") == Some("done"),
            change_seq: number(
                &format!("{} change_seq", keys.migration()),
                field("change_seq"),
            )?,
        })
    };
    Ok(Found {
        marker,
        written: written > 0,
        node_started,
        change_seq: number(keys.change_seq(), change_seq.as_deref())?,
        last_seq: number(
            &format!("{} last_seq", keys.meta()),
            meta.first().cloned().flatten().as_deref(),
        )?,
        snapshot_seq: number(
            &format!("{} snapshot_seq", keys.meta()),
            meta.get(1).cloned().flatten().as_deref(),
        )?,
    })
}

/// Marks the keyspace as holding a migration from `source`: `done` once it is verified.
pub(super) async fn mark(
    conn: &RedisConn,
    keys: &Keys,
    owner: &Owner,
    source: &Source,
    done: bool,
) -> Result<(), String> {
    Script::new(MARK)
        .key(keys.lease())
        .key(keys.migration())
        .key(keys.change_seq())
        .arg(owner.value())
        .arg(&source.id)
        .arg(if done { "done" } else { "copying" })
        .arg(&source.state)
        .invoke_async::<i64>(&mut conn.clone())
        .await
        .map(|_| ())
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source() -> Source {
        Source {
            id: "/srv/mm/data".into(),
            last_seq: 40,
            snapshot_seq: 30,
            state: source_state(40, 30, 12, 3, "ab12"),
        }
    }

    fn marker(done: bool, change_seq: u64) -> Option<Marker> {
        Some(Marker {
            source: "/srv/mm/data".into(),
            source_state: Some(source().state),
            done,
            change_seq,
        })
    }

    #[test]
    fn an_empty_keyspace_or_this_sources_own_migration_is_written_into() {
        let keys = Keys::default();
        assert_eq!(refusal(&Found::default(), &source(), &keys), None);
        // Interrupted: whatever it wrote, short of the source's marks.
        let interrupted = Found {
            marker: marker(false, 0),
            written: true,
            change_seq: 12,
            last_seq: 40,
            snapshot_seq: 30,
            ..Found::default()
        };
        assert_eq!(refusal(&interrupted, &source(), &keys), None);
        // Finished, and nothing flushed since.
        let finished = Found {
            marker: marker(true, 57),
            written: true,
            change_seq: 57,
            last_seq: 40,
            snapshot_seq: 30,
            ..Found::default()
        };
        assert_eq!(refusal(&finished, &source(), &keys), None);
        // A marker an earlier release left keeps no state of the source to compare.
        let earlier = Found {
            marker: marker(false, 0).map(|m| Marker {
                source_state: None,
                ..m
            }),
            ..interrupted
        };
        assert_eq!(refusal(&earlier, &source(), &keys), None);
    }

    #[test]
    fn a_source_that_changed_since_the_migration_began_is_refused_saying_how_to_start_over() {
        let keys = Keys::new("eu");
        for done in [false, true] {
            let found = Found {
                marker: marker(done, 57),
                written: true,
                change_seq: 57,
                last_seq: 40,
                snapshot_seq: 30,
                ..Found::default()
            };
            let moved = Source {
                last_seq: 41,
                state: source_state(41, 30, 14, 3, "cd34"),
                ..source()
            };
            let why = refusal(&found, &moved, &keys)
                .unwrap_or_else(|| panic!("done {done}: a changed source was not refused"));
            for says in [
                "the source /srv/mm/data changed since the migration into keyspace eu began",
                "then: journal 40 (snapshot 30), event log 12, audit log 3, checksum ab12",
                "now: journal 41 (snapshot 30), event log 14, audit log 3, checksum cd34",
                "--pattern '{eu}:*'",
                "another keyspace",
            ] {
                assert!(why.contains(says), "{says:?} not in {why}");
            }
            // Only the checksum moved (a party broke up, say): refused all the same.
            let rewritten = Source {
                state: source_state(40, 30, 12, 3, "ef56"),
                ..source()
            };
            assert!(refusal(&found, &rewritten, &keys).is_some(), "done {done}");
        }
    }

    #[test]
    fn a_keyspace_anything_else_wrote_to_is_refused_saying_why() {
        let keys = Keys::new("eu");
        let finished = Found {
            marker: marker(true, 57),
            written: true,
            change_seq: 57,
            last_seq: 40,
            snapshot_seq: 30,
            ..Found::default()
        };
        let cases = [
            (
                Found {
                    written: true,
                    ..Found::default()
                },
                "no migration from /srv/mm/data wrote",
            ),
            (
                Found {
                    marker: Some(Marker {
                        source: "/srv/other".into(),
                        source_state: Some(source().state),
                        done: true,
                        change_seq: 57,
                    }),
                    ..finished.clone()
                },
                "holds a migration from /srv/other",
            ),
            (
                Found {
                    node_started: true,
                    ..finished.clone()
                },
                "a cluster node has started on keyspace eu",
            ),
            (
                Found {
                    node_started: true,
                    marker: marker(false, 0),
                    ..finished.clone()
                },
                "{eu}:node_key",
            ),
            (
                Found {
                    change_seq: 60,
                    ..finished.clone()
                },
                "written 3 times since",
            ),
            (
                Found {
                    marker: marker(false, 0),
                    snapshot_seq: 31,
                    ..finished.clone()
                },
                "past the source's 40 (snapshot 30)",
            ),
            (
                Found {
                    marker: marker(false, 0),
                    last_seq: 41,
                    ..finished.clone()
                },
                "journaled up to 41",
            ),
        ];
        for (found, says) in cases {
            let why = refusal(&found, &source(), &keys)
                .unwrap_or_else(|| panic!("{found:?} was not refused"));
            assert!(why.contains(says), "{why}");
            assert!(why.contains("migrate into an empty keyspace"), "{why}");
        }
    }
}

//! The keyspace's format: field `format` of the meta hash, the layout of the keys and values
//! a build writes. A build refuses to own a keyspace of a later format than its own, naming
//! both, before it reads anything else there: in a rolling upgrade, an older node that takes
//! the lease of a keyspace a newer one has written to stops at once instead of misreading it.
//! A keyspace without the field (a new one, or one written before the field existed) is of
//! the first format, and the field is written with the owner's first flush.
//!
//! A release that changes the layout so that an older build would misread it raises
//! [`CURRENT`]; one that only adds what older builds skip does not.

use super::{Hash, Op, RedisStore, StoreError, redact, redis_error};

/// The meta hash's field.
pub(super) const FIELD: &str = "format";
/// The format this build writes for the keyspace of a cluster whose queues are not split over
/// shards.
pub(super) const PLAIN: u32 = 1;
/// The format of a shard's keyspace when the queues are split over shards: its event cursors
/// are numbered by time, with gaps (`store::event_clock`), which an older build would trim and
/// page through as if they were 1, 2, 3, and its owner says how far its log is closed, which a
/// newer node's merge of every shard's events waits for.
pub(super) const SHARDED: u32 = 2;
/// The newest format this build reads.
pub(super) const CURRENT: u32 = SHARDED;

/// Refuses the keyspace of `store` if a later release wrote it; queues the mark of this
/// build's format for the first flush where the keyspace has none (or an older one).
pub(super) async fn check(store: &RedisStore) -> Result<(), StoreError> {
    let mut conn = store.conn.clone();
    let found: Option<String> = ::redis::cmd("HGET")
        .arg(store.keys.meta())
        .arg(FIELD)
        .query_async(&mut conn)
        .await
        .map_err(redis_error(&store.url))?;
    let version = match found {
        None => 0,
        Some(v) => v.parse::<u32>().map_err(|_| StoreError::Decode {
            key: format!("meta {FIELD}"),
            detail: format!("{v:?} is not a format number"),
        })?,
    };
    if version > CURRENT {
        return Err(StoreError::Newer {
            location: format!(
                "cluster keyspace {{{}}} at {}",
                store.keys.keyspace(),
                redact(&store.url)
            ),
            found: version.to_string(),
            reads: CURRENT.to_string(),
        });
    }
    if version < PLAIN {
        mark(store, PLAIN);
    }
    Ok(())
}

/// Queues the mark of format `format` for the next flush.
pub(super) fn mark(store: &RedisStore, format: u32) {
    store.queue(vec![Op::Set(
        Hash::Meta,
        FIELD.into(),
        format.to_string().into_bytes(),
    )]);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::PlayerId;
    use crate::store::Storage;
    use crate::store::contract::{record, with_redis};
    use crate::store::redis_store::{Keys, RedisOptions};

    fn redis(url: &str) -> ::redis::Connection {
        ::redis::Client::open(url)
            .unwrap()
            .get_connection()
            .unwrap()
    }

    fn format_field(url: &str) -> Option<String> {
        ::redis::cmd("HGET")
            .arg(Keys::default().meta())
            .arg(FIELD)
            .query(&mut redis(url))
            .unwrap()
    }

    fn open(runtime: &tokio::runtime::Handle, url: &str) -> Result<RedisStore, StoreError> {
        let () = ::redis::cmd("SET")
            .arg(Keys::default().lease())
            .arg("7|a|127.0.0.1:1")
            .query(&mut redis(url))
            .unwrap();
        let options = RedisOptions {
            node: "a".into(),
            ..RedisOptions::default()
        };
        runtime.block_on(RedisStore::open(url, 7, &options))
    }

    #[test]
    fn the_first_flush_marks_the_keyspace_and_a_later_format_is_refused_naming_both() {
        with_redis(|server, runtime| {
            let url = server.url();
            let store = open(&runtime, &url).unwrap();
            assert_eq!(format_field(&url), None, "nothing written yet");
            store
                .put_players(&[(&PlayerId::new("p1"), &record(1500.0))])
                .unwrap();
            store.flush().unwrap();
            assert_eq!(format_field(&url).as_deref(), Some("1"));
            drop(store);
            // This build's own format opens again.
            drop(open(&runtime, &url).unwrap());

            // A later release wrote the keyspace.
            // A shard's keyspace, once its queues are split over shards.
            let store = open(&runtime, &url).unwrap();
            store.claim_across(&["mm".to_string(), "eu".to_string()]);
            store.flush().unwrap();
            assert_eq!(format_field(&url).as_deref(), Some("2"));
            drop(store);
            drop(open(&runtime, &url).unwrap());
            assert_eq!(format_field(&url).as_deref(), Some("2"), "kept");

            let () = ::redis::cmd("HSET")
                .arg(Keys::default().meta())
                .arg(FIELD)
                .arg("3")
                .query(&mut redis(&url))
                .unwrap();
            let e = open(&runtime, &url).err().expect("refused");
            assert!(matches!(e, StoreError::Newer { .. }), "{e}");
            let msg = e.to_string();
            assert!(msg.contains("later release"), "{msg}");
            assert!(msg.contains("format 3"), "{msg}");
            assert!(msg.contains("reads 2"), "{msg}");
            assert!(msg.contains("{mm}"), "{msg}");
            assert_eq!(format_field(&url).as_deref(), Some("3"), "left as it was");

            let () = ::redis::cmd("HSET")
                .arg(Keys::default().meta())
                .arg(FIELD)
                .arg("two")
                .query(&mut redis(&url))
                .unwrap();
            let e = open(&runtime, &url).err().expect("refused");
            assert!(e.to_string().contains("meta format"), "{e}");
        });
    }
}

//! A standby's copy of the state: a node that does not own the queues reads everything once,
//! then follows the owner's change log (one stream entry per flush, naming the fields it set
//! or deleted: see the flush's script) and reads those fields again, so that when it takes the
//! lease it opens its store from this copy instead of reading every hash from Redis.
//!
//! The copy is exact once the lease is this node's: every earlier flush is then in the log
//! (a stale owner's later flushes are refused by the fence), so reading the log to its end
//! and checking that the flush counter names its last entry, and that the log still holds
//! that entry under its id, leaves nothing out. A gap (a flush that logged nothing, or entries
//! trimmed before they were read) means the copy can no longer be trusted: it is dropped and
//! read again. So does a copy that is not of the Redis
//! the new owner's store writes to: one followed on another server (the old primary, before
//! this connection saw the sentinels name a new one), or holding values of a flush that
//! Redis then lost in a failover (values are read after the log entries that name them, so
//! they can be of a later flush): the counter the store reads must be the copy's, and no
//! lower than the latest the copy's values were read at.

use std::collections::{BTreeSet, HashMap};

use ::redis::{Script, Value};

use super::load::{self, Loaded};
use super::script::UNLOGGED;
use super::{HASHES, loaded_hash};
use super::{Hash, Keys, MemoryStore, Patience, RedisConn, RedisTls, StoreError, redis_error};
use crate::ids::PlayerId;

/// Where the change log stands: the flush counter, and the id of the log's last entry and the
/// flush number it holds, read in one step.
const POSITION: &str = r"
local seq = redis.call('GET', KEYS[1]) or '0'
local last = redis.call('XREVRANGE', KEYS[2], '+', '-', 'COUNT', 1)[1]
if last then
  local q = ''
  if last[2][1] == 'q' then
    q = last[2][2]
  end
  return {seq, last[1], q}
end
return {seq, '0-0', ''}
";

/// Log entries after ARGV[1] (at most ARGV[2]) and the flush counter, read in one step: when
/// the entries reach the log's end, the counter must name the last of them.
const FOLLOW: &str = r"
local entries = redis.call('XRANGE', KEYS[1], ARGV[1], '+', 'COUNT', ARGV[2])
return {redis.call('GET', KEYS[2]) or '0', entries}
";

/// Log entries read at a time.
const PAGE: usize = 1000;

/// Whether a standby copy still follows the log.
#[derive(Debug, PartialEq, Eq)]
pub enum Followed {
    /// Every flush so far is in the copy (as far as the log has been read).
    InStep,
    /// A flush is missing from the log: the copy is out of date for good.
    Gap,
}

/// A copy of the store's state kept by a node that does not own the queues.
pub struct Standby {
    url: String,
    keys: Keys,
    conn: RedisConn,
    /// The players, decoded (most of the state, and most of the work of a load).
    mirror: MemoryStore,
    /// Every other hash the mirror holds, as Redis returns it; decoded when the copy is used.
    rest: HashMap<Hash, HashMap<Vec<u8>, Vec<u8>>>,
    /// The last flush in the copy, and its log entry's id.
    seq: u64,
    last_id: String,
    /// The flush number the entry `last_id` held when it was read (`None`: the log was empty,
    /// or its entry named none).
    last_q: Option<u64>,
    /// The flush counter as read after the copy's latest values: none of them is of a later
    /// flush.
    seen: u64,
    /// [`FOLLOW`], its digest computed once.
    follow: Script,
}

impl Standby {
    /// Reads everything, after noting where the log stands: what changes during the reading
    /// is in the log after that point and is read again by [`Standby::follow`].
    pub async fn load(
        url: &str,
        tls: Option<&RedisTls>,
        keys: &Keys,
        patience: Patience,
    ) -> Result<Self, StoreError> {
        let err = redis_error(url);
        let mut conn = RedisConn::connect(url, tls, patience).await.map_err(&err)?;
        let (seq, last_id, last_q): (String, String, String) = Script::new(POSITION)
            .key(keys.change_seq())
            .key(keys.changes())
            .invoke_async(&mut conn)
            .await
            .map_err(&err)?;
        let seq = seq.parse().map_err(|_| StoreError::Decode {
            key: keys.change_seq().to_string(),
            detail: format!("{seq:?} is not a count"),
        })?;
        let (mirror, loaded) = load::read(&mut conn, url, keys).await?;
        let seen = counter(&mut conn, url, keys).await?;
        let rest = loaded
            .into_iter()
            .map(|(h, fields)| (h, fields.into_iter().collect()))
            .collect();
        Ok(Self {
            url: url.to_string(),
            keys: keys.clone(),
            conn,
            mirror,
            rest,
            seq,
            last_id,
            last_q: parse(last_q.as_bytes()),
            seen,
            follow: Script::new(FOLLOW),
        })
    }

    /// Players in the copy.
    pub fn player_count(&self) -> usize {
        self.mirror.data().players.len()
    }

    /// Reads the log from the last entry in the copy to its end, and every field it names.
    pub async fn follow(&mut self) -> Result<Followed, StoreError> {
        loop {
            let (counter, page): (String, Value) = self
                .follow
                .key(self.keys.changes())
                .key(self.keys.change_seq())
                .arg(format!("({}", self.last_id))
                .arg(PAGE)
                .invoke_async(&mut self.conn)
                .await
                .map_err(redis_error(&self.url))?;
            let counter = parse(counter.as_bytes())
                .ok_or_else(|| self.bad_log("the flush counter is not a count"))?;
            let entries = entries(page).ok_or_else(|| self.bad_log("an entry is malformed"))?;
            let Some((last, _)) = entries.last() else {
                // The end of the log: a flush counted but not logged is a gap.
                return Ok(if counter == self.seq {
                    Followed::InStep
                } else {
                    Followed::Gap
                });
            };
            let last = last.clone();
            let mut touched: HashMap<Hash, BTreeSet<Vec<u8>>> = HashMap::new();
            let mut seq = self.seq;
            for (_, pairs) in &entries {
                let mut pairs = pairs.iter();
                match pairs.next() {
                    Some((q, n)) if q == b"q" && parse(n) == Some(seq + 1) => seq += 1,
                    _ => return Ok(Followed::Gap),
                }
                let changes = match pairs.next() {
                    Some((c, changes)) if c == b"c" => changes,
                    _ => return Ok(Followed::Gap),
                };
                let changes =
                    changed(changes).ok_or_else(|| self.bad_log("an entry is malformed"))?;
                for (index, field) in changes {
                    if let Some(cleared) = index.strip_prefix(b"x") {
                        let Some(h) = hash(cleared) else { continue };
                        // Deleted whole: fields named before in this page are read again
                        // below, and come back only if they were set after.
                        if h == Hash::Players {
                            self.mirror.data().players.clear();
                        } else {
                            self.rest.remove(&h);
                        }
                        continue;
                    }
                    if let Some(h) = hash(index) {
                        touched.entry(h).or_default().insert(field.to_vec());
                    }
                }
            }
            if !touched.is_empty() {
                for (h, fields) in touched {
                    let fields: Vec<Vec<u8>> = fields.into_iter().collect();
                    for chunk in fields.chunks(PAGE) {
                        self.read_again(h, chunk).await?;
                    }
                }
                self.note_seen().await?;
            }
            self.seq = seq;
            self.last_id = last;
            self.last_q = Some(seq);
            if entries.len() < PAGE {
                return Ok(if counter == self.seq {
                    Followed::InStep
                } else {
                    Followed::Gap
                });
            }
        }
    }

    /// Reads the flush counter after values were read: none of them is of a later flush.
    async fn note_seen(&mut self) -> Result<(), StoreError> {
        let now = counter(&mut self.conn, &self.url, &self.keys).await?;
        self.seen = self.seen.max(now);
        Ok(())
    }

    /// The copy as the store's mirror, once the lease is this node's: `None` when it is out of
    /// date or not of the Redis the store writes to (the store then reads everything). `conn`
    /// is the store's connection, which found the lease this node's.
    pub(super) async fn into_mirror(
        mut self,
        conn: &mut RedisConn,
    ) -> Result<Option<MemoryStore>, StoreError> {
        // No flush lands after the lease passed to this node: following the log to its end
        // leaves nothing out.
        if self.follow().await? == Followed::Gap {
            return Ok(None);
        }
        let expected = counter(conn, &self.url, &self.keys).await?;
        if self.seq != expected || self.seen > expected {
            tracing::warn!(
                copy = self.seq,
                values_of = self.seen,
                redis = expected,
                "the standby copy is not of the Redis the store writes to (another server, or \
                 flushes Redis lost)"
            );
            return Ok(None);
        }
        if !self.last_entry_is_in(conn).await? {
            tracing::warn!(
                copy = self.seq,
                entry = self.last_id,
                "the change log no longer holds the standby copy's last entry (flushes Redis \
                 lost were written again under other ids)"
            );
            return Ok(None);
        }
        self.conn = conn.clone();
        let unlogged = self.read_whole(UNLOGGED).await?;
        self.rest.insert(UNLOGGED, unlogged.into_iter().collect());
        let loaded: Loaded = self
            .rest
            .into_iter()
            .map(|(h, fields)| (h, fields.into_iter().collect()))
            .collect();
        // Off the runtime's other tasks (the lease renewals): the hashes can be large.
        crate::store::heavy(|| load::fill(&mut self.mirror.data(), loaded))?;
        Ok(Some(self.mirror))
    }

    /// Whether the log on `conn` still holds the copy's last entry under its id, with the flush
    /// number it held when the copy read it. A counter equal to the copy's is not enough: after
    /// a Redis failover that lost flushes, the owner's next flushes take the lost numbers again,
    /// logged under other ids (below the copy's when the new primary's clock is behind, so
    /// following the log does not see them), and the counter can come back to the copy's with
    /// other values written. A copy read while the log was empty has no entry to find.
    async fn last_entry_is_in(&self, conn: &mut RedisConn) -> Result<bool, StoreError> {
        if self.last_id == "0-0" {
            return Ok(true);
        }
        let page: Value = ::redis::cmd("XRANGE")
            .arg(self.keys.changes())
            .arg(&self.last_id)
            .arg(&self.last_id)
            .query_async(conn)
            .await
            .map_err(redis_error(&self.url))?;
        let found = entries(page).ok_or_else(|| self.bad_log("an entry is malformed"))?;
        let held = found
            .first()
            .filter(|(id, _)| *id == self.last_id)
            .and_then(|(_, pairs)| pairs.first())
            .filter(|(q, _)| q == b"q")
            .and_then(|(_, n)| parse(n));
        Ok(held.is_some() && held == self.last_q)
    }

    /// Every field of `h`, a page at a time.
    async fn read_whole(&mut self, h: Hash) -> Result<super::Fields, StoreError> {
        let mut fields = Vec::new();
        let mut cursor: u64 = 0;
        loop {
            let (next, page): (u64, super::Fields) = ::redis::cmd("HSCAN")
                .arg(self.keys.hash(h))
                .arg(cursor)
                .arg("COUNT")
                .arg(10_000)
                .query_async(&mut self.conn)
                .await
                .map_err(redis_error(&self.url))?;
            fields.extend(page);
            if next == 0 {
                return Ok(fields);
            }
            cursor = next;
        }
    }

    /// Reads `fields` of `h` from Redis into the copy (a field no longer there leaves it).
    async fn read_again(&mut self, h: Hash, fields: &[Vec<u8>]) -> Result<(), StoreError> {
        let values: Vec<Option<Vec<u8>>> = ::redis::cmd("HMGET")
            .arg(self.keys.hash(h))
            .arg(fields)
            .query_async(&mut self.conn)
            .await
            .map_err(redis_error(&self.url))?;
        if h == Hash::Players {
            let mut gone = Vec::new();
            let mut present = Vec::new();
            for (field, value) in fields.iter().zip(values) {
                match value {
                    Some(v) => present.push((field.clone(), v)),
                    None => gone.push(PlayerId::new(load::text(field).as_str())),
                }
            }
            let decoded = load::decode_players(present)?;
            let mut data = self.mirror.data();
            for id in gone {
                data.players.remove(&id);
            }
            data.players.extend(decoded);
            return Ok(());
        }
        let copy = self.rest.entry(h).or_default();
        for (field, value) in fields.iter().zip(values) {
            match value {
                Some(v) => copy.insert(field.clone(), v),
                None => copy.remove(field),
            };
        }
        Ok(())
    }

    fn bad_log(&self, detail: &str) -> StoreError {
        StoreError::Decode {
            key: self.keys.changes().to_string(),
            detail: detail.to_string(),
        }
    }
}

/// The store's mirror at open: the standby's copy when it is current, or everything read from
/// Redis.
/// The flush counter.
async fn counter(conn: &mut RedisConn, url: &str, keys: &Keys) -> Result<u64, StoreError> {
    let seq: Option<String> = ::redis::cmd("GET")
        .arg(keys.change_seq())
        .query_async(conn)
        .await
        .map_err(redis_error(url))?;
    let seq = seq.unwrap_or_else(|| "0".into());
    parse(seq.as_bytes()).ok_or_else(|| StoreError::Decode {
        key: keys.change_seq().to_string(),
        detail: format!("{seq:?} is not a count"),
    })
}

pub(super) async fn mirror(
    standby: Option<Standby>,
    conn: &mut RedisConn,
    url: &str,
    keys: &Keys,
) -> Result<MemoryStore, StoreError> {
    let started = std::time::Instant::now();
    let from = match standby {
        Some(standby) => match standby.into_mirror(conn).await {
            Ok(Some(mirror)) => {
                tracing::info!(
                    seconds = started.elapsed().as_secs_f64(),
                    "took over from the standby copy"
                );
                Some(mirror)
            }
            Ok(None) => {
                tracing::info!("the standby copy is out of date; reading everything");
                None
            }
            Err(e) => {
                tracing::warn!(error = %e, "the standby copy failed; reading everything");
                None
            }
        },
        None => None,
    };
    let copy = if from.is_some() { "standby" } else { "redis" };
    metrics::counter!(crate::telemetry::CLUSTER_STORE_OPENED, "from" => copy).increment(1);
    match from {
        Some(mirror) => Ok(mirror),
        None => load::mirror(conn, url, keys).await,
    }
}

/// The hash a log entry names by its index in the script's keys, if the copy follows it (the
/// mirror holds it, and it is not read whole at takeover).
fn hash(index: &[u8]) -> Option<Hash> {
    let index = parse(index)?;
    HASHES
        .iter()
        .map(|(h, _)| *h)
        .find(|h| *h as u64 == index)
        .filter(|h| loaded_hash(*h) && *h != UNLOGGED)
}

/// An entry's changes, `INDEX,LEN:FIELD` after one another, as (index, field) pairs.
fn changed(mut bytes: &[u8]) -> Option<Vec<(&[u8], &[u8])>> {
    let mut out = Vec::new();
    while !bytes.is_empty() {
        let comma = bytes.iter().position(|b| *b == b',')?;
        let (index, rest) = (&bytes[..comma], &bytes[comma + 1..]);
        let colon = rest.iter().position(|b| *b == b':')?;
        let len = usize::try_from(parse(&rest[..colon])?).ok()?;
        let field = rest.get(colon + 1..colon + 1 + len)?;
        out.push((index, field));
        bytes = &rest[colon + 1 + len..];
    }
    Some(out)
}

fn parse(bytes: &[u8]) -> Option<u64> {
    std::str::from_utf8(bytes).ok()?.parse().ok()
}

/// A log entry: its id and its field-value pairs, in order (a field may come twice).
type Entry = (String, Vec<(Vec<u8>, Vec<u8>)>);

/// XRANGE's answer as entries; `None` if it is not one.
fn entries(page: Value) -> Option<Vec<Entry>> {
    let Value::Array(items) = page else {
        return None;
    };
    items
        .into_iter()
        .map(|item| {
            let Value::Array(mut parts) = item else {
                return None;
            };
            if parts.len() != 2 {
                return None;
            }
            let Value::Array(flat) = parts.pop()? else {
                return None;
            };
            let id = bulk(parts.pop()?)?;
            let mut pairs = Vec::with_capacity(flat.len() / 2);
            let mut flat = flat.into_iter();
            while let Some(field) = flat.next() {
                pairs.push((bulk(field)?, bulk(flat.next()?)?));
            }
            Some((String::from_utf8(id).ok()?, pairs))
        })
        .collect()
}

fn bulk(value: Value) -> Option<Vec<u8>> {
    match value {
        Value::BulkString(b) => Some(b),
        Value::SimpleString(s) => Some(s.into_bytes()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn a_log_page_parses_into_entries_with_repeated_fields_kept_in_order() {
        let page = Value::Array(vec![
            Value::Array(vec![
                b("1-0"),
                Value::Array(vec![b("q"), b("1"), b("2"), b("p1"), b("2"), b("p2")]),
            ]),
            Value::Array(vec![b("2-0"), Value::Array(vec![b("q"), b("2")])]),
        ]);
        let parsed = entries(page).unwrap();
        assert_eq!(parsed.len(), 2);
        assert_eq!(parsed[0].0, "1-0");
        let fields: Vec<&[u8]> = parsed[0].1.iter().map(|(_, f)| f.as_slice()).collect();
        assert_eq!(fields, [b"1".as_slice(), b"p1", b"p2"]);
        assert!(entries(Value::Array(vec![b("1-0")])).is_none());
        assert!(entries(Value::Nil).is_none());
    }

    #[test]
    fn an_entrys_changes_parse_with_any_bytes_in_a_field() {
        let parsed = changed(b"2,2:p12,5:a,b:c13,0:x13,0:").unwrap();
        assert_eq!(
            parsed,
            [
                (b"2".as_slice(), b"p1".as_slice()),
                (b"2", b"a,b:c"),
                (b"13", b""),
                (b"x13", b""),
            ]
        );
        assert_eq!(changed(b"").unwrap(), []);
        assert!(
            changed(b"2,9:p1").is_none(),
            "a field shorter than its length"
        );
        assert!(changed(b"2,p1").is_none());
    }

    #[test]
    fn a_calls_change_list_names_what_a_copy_follows_as_the_copy_reads_it() {
        use super::super::script::{ChangeList, LOGGED_FIELDS};
        let mut list = ChangeList::default();
        list.field(Hash::Players, "p1");
        list.field(Hash::Tickets, "t-1");
        list.field(Hash::MatchRecords, "m-1");
        list.field(Hash::Players, "a,b:c");
        list.cleared(Hash::Parties);
        let (what, changes) = list.into_entry();
        assert_eq!(what, "c");
        let read: Vec<(Option<Hash>, &[u8])> = changed(&changes)
            .unwrap()
            .into_iter()
            .map(|(index, field)| (hash(index.strip_prefix(b"x").unwrap_or(index)), field))
            .collect();
        // Waiting tickets and match records are left out: copies do not hold them.
        assert_eq!(
            read,
            [
                (Some(Hash::Players), b"p1".as_slice()),
                (Some(Hash::Players), b"a,b:c"),
                (Some(Hash::Parties), b""),
            ]
        );
        assert!(changes.ends_with(b"x3,0:"), "a hash deleted whole");
        // Past the limit a copy reads everything again.
        let mut many = ChangeList::default();
        for i in 0..=LOGGED_FIELDS {
            many.field(Hash::Players, &i.to_string());
        }
        assert_eq!(many.into_entry(), ("r", Vec::new()));
    }

    #[test]
    fn log_indexes_name_the_hashes_the_mirror_holds() {
        assert_eq!(hash(b"2"), Some(Hash::Players));
        assert_eq!(hash(b"3"), Some(Hash::Parties));
        assert_eq!(
            hash(b"13"),
            None,
            "waiting tickets are read whole at takeover"
        );
        assert_eq!(hash(b"15"), None, "match records stay in Redis");
        assert_eq!(hash(b"1"), None, "the lease is no hash");
        assert_eq!(hash(b"x"), None);
    }
}

#[cfg(test)]
mod against_redis;

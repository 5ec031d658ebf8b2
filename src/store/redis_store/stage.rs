//! Batches too large for one script, written in parts and still applied all or nothing.
//!
//! A season reset or an end of season of a large pool rewrites every player of the pool in one
//! journal batch. As one script, Redis would run it for seconds, and nothing else meanwhile:
//! not the owner's lease renewals, not the other nodes' tries, not the other keyspaces on the
//! same Redis; past the owner's reply time the script is cut off with its connection, and the
//! write fails. A batch of whole-field writes past [`STAGE_ABOVE_ARGS`] goes instead:
//!
//! 1. **Staged**: its writes, the last of each field, into the stage hash (`{mm}:staged`) in
//!    parts of at most [`PART_FIELDS`] fields or [`PART_BYTES`] bytes of values, each a short fenced
//!    script. The first part empties the stage and names it with the attempt's id. Nothing a
//!    reader loads changes.
//! 2. **Committed**: one flush script checks that the stage holds the attempt's every field and
//!    marks it in the meta hash (`staged`). Before this the batch was not applied (the next
//!    attempt empties the stage); from here it is, whoever finishes it.
//! 3. **Applied**: flush scripts write the same parts into their hashes (plain `HSET`s, the
//!    fastest way to them), each naming its fields in the change log so that standby copies
//!    follow; the last one deletes the stage (`UNLINK`: freed in the background) and its mark.
//!    Nothing else writes meanwhile, so a store that opens with the mark set (its last owner
//!    stopped midway) applies the whole stage again before it loads anything, moving its
//!    fields into their hashes inside Redis, in parts bounded by their sizes.
//!
//! This is the write-ahead pattern of a redo log (the stage) with a single commit record, as
//! in ARIES (Mohan et al., "ARIES: a transaction recovery method", 1992), on Redis' atomic
//! scripts.

use std::collections::HashMap;
use std::sync::LazyLock;
use std::sync::atomic::Ordering;

use ::redis::Script;

use super::script::{ChangeList, Op};
use super::{HASHES, Hash, RedisStore, StoreError, fence, redis_error};

/// Script arguments past which a batch made only of whole-field writes is staged (about 10,000
/// fields: a season reset of a pool of that size).
pub(super) const STAGE_ABOVE_ARGS: usize = 50_000;

/// Most fields one part stages or applies.
const PART_FIELDS: usize = 10_000;

/// When a store stages a batch, and the size of a part ([`STAGE_ABOVE_ARGS`] and
/// [`PART_FIELDS`]; tests take smaller ones).
#[derive(Clone, Copy, Debug)]
pub(super) struct Bounds {
    pub above_args: usize,
    pub part_fields: usize,
}

impl Default for Bounds {
    fn default() -> Self {
        Self {
            above_args: STAGE_ABOVE_ARGS,
            part_fields: PART_FIELDS,
        }
    }
}

/// Most bytes of values one part stages (a single larger value goes alone).
const PART_BYTES: usize = 8 << 20;

/// Stages one part: `KEYS` the lease, the stage and the meta hash; `ARGV` the fence, the
/// attempt's id, `1` for the first part (which empties the stage, unless a committed one waits
/// to be applied) and the part's fields and values.
const STAGE: &str = r"
local lease = redis.call('GET', KEYS[1])
local token = ARGV[1]
if not lease or string.sub(lease, 1, string.len(token) + 1) ~= token .. '|' then
  return redis.error_reply('FENCED the lease no longer carries ' .. token)
end
if ARGV[3] == '1' then
  if redis.call('HEXISTS', KEYS[3], 'staged') == 1 then
    return redis.error_reply('STAGE a committed stage is not applied yet')
  end
  redis.call('UNLINK', KEYS[2])
  redis.call('HSET', KEYS[2], '', ARGV[2])
elseif redis.call('HGET', KEYS[2], '') ~= ARGV[2] then
  return redis.error_reply('STAGE another attempt took the stage')
end
local n = #ARGV
local i = 4
while i <= n do
  local last = math.min(i + 1999, n)
  redis.call('HSET', KEYS[2], unpack(ARGV, i, last))
  i = last + 1
end
return n
";

static STAGE_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(STAGE));

/// One page of a stage's field names with their values' sizes, read inside Redis so the values
/// are not sent (HSCAN's NOVALUES is Redis 7.4 and newer): `KEYS` the stage; `ARGV` the cursor
/// and the page's size. Returns the next cursor, then each name followed by its value's length.
const STAGE_NAMES: &str = r"
local page = redis.call('HSCAN', KEYS[1], ARGV[1], 'COUNT', ARGV[2])
local out = {page[1]}
local items = page[2]
for i = 1, #items, 2 do
  out[#out + 1] = items[i]
  out[#out + 1] = string.len(items[i + 1])
end
return out
";

static STAGE_NAMES_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(STAGE_NAMES));

/// How many fields one page of [`STAGE_NAMES`] reads: Redis is busy with one page at a time.
const NAMES_PAGE: usize = 1_000;

/// The change-log entry of a part moved into its hashes: the fields it names there.
pub(super) fn note_moved(list: &mut ChangeList, fields: &[String]) {
    for field in fields {
        if let Some((h, name)) = target(field) {
            list.field(h, name);
        }
    }
}

/// The hash and field a staged field (`INDEX:FIELD`) goes to.
fn target(staged: &str) -> Option<(Hash, &str)> {
    let (index, name) = staged.split_once(':')?;
    let index: usize = index.parse().ok()?;
    HASHES
        .iter()
        .find(|(h, _)| *h as usize == index)
        .map(|(h, _)| (*h, name))
}

/// A field's last write in a batch: its hash, its name and its value (`None`: deleted).
type Write<'a> = (Hash, &'a str, Option<&'a [u8]>);

/// The last write of each field of `batch` (only whole-field writes), in the order each was
/// first written.
fn last_writes(batch: &[Op]) -> Vec<Write<'_>> {
    let mut at: HashMap<(Hash, &str), usize> = HashMap::new();
    let mut fields: Vec<Write<'_>> = Vec::new();
    for op in batch {
        let (h, field, value) = match op {
            Op::Set(h, field, value) => (*h, field.as_str(), Some(value.as_slice())),
            Op::Del(h, field) => (*h, field.as_str(), None),
            _ => unreachable!("only whole-field writes are staged"),
        };
        match at.get(&(h, field)) {
            Some(&i) => fields[i].2 = value,
            None => {
                at.insert((h, field), fields.len());
                fields.push((h, field, value));
            }
        }
    }
    fields
}

/// Where parts of `sizes` end: at most `fields` fields or [`PART_BYTES`] bytes each (a single
/// larger value goes alone).
fn part_ends(sizes: impl Iterator<Item = usize>, fields: usize) -> Vec<usize> {
    let mut ends = Vec::new();
    let (mut count, mut bytes) = (0, 0);
    for (i, size) in sizes.enumerate() {
        if count > 0 && (count == fields || bytes + size > PART_BYTES) {
            ends.push(i);
            (count, bytes) = (0, 0);
        }
        count += 1;
        bytes += size;
    }
    if count > 0 {
        ends.push(ends.last().copied().unwrap_or(0) + count);
    }
    ends
}

/// A page of [`STAGE_NAMES`]: the next cursor, and each name with its value's length.
fn names_page(page: &[::redis::Value]) -> Option<(String, Vec<(String, usize)>)> {
    use ::redis::FromRedisValue;
    let (cursor, rest) = page.split_first()?;
    let cursor = String::from_redis_value_ref(cursor).ok()?;
    let pairs = rest
        .chunks(2)
        .map(|pair| match pair {
            [name, size] => Some((
                String::from_redis_value_ref(name).ok()?,
                usize::from_redis_value_ref(size).ok()?,
            )),
            _ => None,
        })
        .collect::<Option<Vec<_>>>()?;
    Some((cursor, pairs))
}

impl RedisStore {
    /// Whether `batch` is written in parts: past the store's bound, and only whole-field writes
    /// (their order within the batch does not matter beyond the last write of each field).
    pub(super) fn staged(&self, batch: &[Op]) -> bool {
        batch.iter().map(Op::args).sum::<usize>() > self.stage.above_args
            && batch
                .iter()
                .all(|op| matches!(op, Op::Set(..) | Op::Del(..)))
    }

    /// Writes `batch` staged, committed, then applied (see the module documentation).
    pub(super) async fn send_staged(&self, batch: &[Op]) -> Result<(), StoreError> {
        self.finish_staged().await?;
        // Unique to this attempt: a store reopened under the same token and node numbers its
        // calls from where Redis saw the last applied, which staging does not record.
        let id = format!(
            "{}|{}|{:016x}",
            fence(self.token, &self.options.node),
            self.calls.fetch_add(1, Ordering::Relaxed),
            rand::random::<u64>()
        );
        // A whole pool's worth of work: off the runtime's workers (see `heavy`).
        let fields = crate::store::heavy(|| last_writes(batch));
        let ends = part_ends(
            fields.iter().map(|(_, _, v)| v.map_or(0, <[u8]>::len)),
            self.stage.part_fields,
        );
        let starts = std::iter::once(0).chain(ends.iter().copied());
        let parts: Vec<&[Write<'_>]> = starts
            .zip(&ends)
            .map(|(start, &end)| &fields[start..end])
            .collect();
        let started = std::time::Instant::now();
        for (i, part) in parts.iter().enumerate() {
            let staged: Vec<(String, Vec<u8>)> = part
                .iter()
                .map(|(h, field, value)| {
                    let value = match value {
                        Some(v) => [b"s".as_slice(), v].concat(),
                        None => b"d".to_vec(),
                    };
                    (format!("{}:{field}", *h as usize), value)
                })
                .collect();
            self.stage_part(&id, i == 0, &staged).await?;
        }
        let stage = self.keys.staged().to_string();
        self.send_script(&[vec![Op::Commit {
            stage: stage.clone(),
            id,
            count: fields.len(),
        }]])
        .await?;
        for part in &parts {
            let ops: Vec<Op> = part
                .iter()
                .map(|(h, field, value)| match value {
                    Some(v) => Op::Set(*h, (*field).to_string(), v.to_vec()),
                    None => Op::Del(*h, (*field).to_string()),
                })
                .collect();
            self.send_script(&[ops]).await?;
        }
        self.send_script(&[vec![Op::Unstage(stage)]]).await?;
        tracing::info!(
            fields = fields.len(),
            parts = ends.len(),
            seconds = started.elapsed().as_secs_f64(),
            "wrote a large batch in parts"
        );
        Ok(())
    }

    /// Applies the rest of a batch committed but not applied whole (its writer stopped or
    /// failed midway); nothing when there is none.
    pub(super) async fn finish_staged(&self) -> Result<(), StoreError> {
        let err = redis_error(&self.url);
        let mut conn = self.conn.clone();
        let marked: Option<String> = ::redis::cmd("HGET")
            .arg(self.keys.meta())
            .arg("staged")
            .query_async(&mut conn)
            .await
            .map_err(&err)?;
        let Some(id) = marked else {
            return Ok(());
        };
        // The stage the mark names, or none to apply: a stage gone (evicted, deleted by hand)
        // would leave the batch half applied without a word.
        let owner: Option<String> = ::redis::cmd("HGET")
            .arg(self.keys.staged())
            .arg("")
            .query_async(&mut conn)
            .await
            .map_err(&err)?;
        if owner.as_deref() != Some(id.as_str()) {
            return Err(StoreError::Decode {
                key: self.keys.staged().to_string(),
                detail: format!(
                    "the meta hash marks attempt {id} committed but its stage holds {}; the \
                     batch is applied in part: restore the keyspace from a backup",
                    owner.as_deref().unwrap_or("nothing")
                ),
            });
        }
        let (names, sizes) = self.stage_fields(NAMES_PAGE).await?;
        tracing::info!(
            attempt = %id,
            fields = names.len(),
            "applying a batch committed in parts whose writer stopped midway"
        );
        let stage = self.keys.staged().to_string();
        let mut start = 0;
        for end in part_ends(sizes.into_iter(), self.stage.part_fields) {
            let part = names[start..end].to_vec();
            self.send_script(&[vec![Op::Move(stage.clone(), part)]])
                .await?;
            start = end;
        }
        self.send_script(&[vec![Op::Unstage(stage)]]).await
    }

    /// The stage's field names, sorted, and their values' sizes, read `page` fields at a time:
    /// a stage can hold a million fields, which one HKEYS would return in one reply, Redis
    /// busy meanwhile.
    async fn stage_fields(&self, page: usize) -> Result<(Vec<String>, Vec<usize>), StoreError> {
        let mut conn = self.conn.clone();
        let mut staged: Vec<(String, usize)> = Vec::new();
        let mut cursor = "0".to_string();
        loop {
            let reply: Vec<::redis::Value> = STAGE_NAMES_SCRIPT
                .key(self.keys.staged())
                .arg(&cursor)
                .arg(page)
                .invoke_async(&mut conn)
                .await
                .map_err(redis_error(&self.url))?;
            let (next, pairs) = names_page(&reply).ok_or_else(|| StoreError::Decode {
                key: self.keys.staged().to_string(),
                detail: "a page of the stage's field names was not a cursor and pairs".into(),
            })?;
            staged.extend(pairs.into_iter().filter(|(name, _)| !name.is_empty()));
            if next == "0" {
                break;
            }
            cursor = next;
        }
        // HSCAN may return a field twice (the hash grew while it was read).
        staged.sort_unstable();
        staged.dedup_by(|a, b| a.0 == b.0);
        Ok(staged.into_iter().unzip())
    }

    /// Stages one part of attempt `id` (the first empties the stage).
    async fn stage_part(
        &self,
        id: &str,
        first: bool,
        fields: &[(String, Vec<u8>)],
    ) -> Result<(), StoreError> {
        let mut invocation = STAGE_SCRIPT.prepare_invoke();
        invocation
            .key(self.keys.lease())
            .key(self.keys.staged())
            .key(self.keys.meta())
            .arg(fence(self.token, &self.options.node))
            .arg(id)
            .arg(if first { "1" } else { "0" });
        for (name, value) in fields {
            invocation.arg(name).arg(value.as_slice());
        }
        let mut conn = self.conn.clone();
        match invocation.invoke_async::<i64>(&mut conn).await {
            Ok(_) => Ok(()),
            Err(e) if e.to_string().contains("FENCED") => {
                self.fenced.store(true, Ordering::Release);
                Err(StoreError::Fenced)
            }
            Err(e) => Err(redis_error(&self.url)(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::PlayerId;
    use crate::store::contract::{entry, record, with_redis};
    use crate::store::redis_store::{Followed, Keys, Patience, RedisOptions, Standby};
    use crate::store::{AdminRecords, JournalEntry, Storage};

    fn redis(url: &str) -> ::redis::Connection {
        ::redis::Client::open(url)
            .unwrap()
            .get_connection()
            .unwrap()
    }

    fn lease(url: &str, value: &str) {
        let () = ::redis::cmd("SET")
            .arg(Keys::default().lease())
            .arg(value)
            .query(&mut redis(url))
            .unwrap();
    }

    /// A store whose batches past 100 arguments are staged, in parts of 7 fields; it logs its
    /// changes for standby copies.
    fn small_parts(runtime: &tokio::runtime::Handle, url: &str, token: u64) -> RedisStore {
        let options = RedisOptions {
            change_log: true,
            ..RedisOptions::default()
        };
        let mut store = runtime
            .block_on(RedisStore::open(url, token, &options))
            .unwrap();
        store.stage = Bounds {
            above_args: 100,
            part_fields: 7,
        };
        store
    }

    /// A reset-like journal entry rewriting players 0..n at `mean`.
    fn reset(seq: &str, n: usize, mean: f64) -> JournalEntry {
        let mut e = entry(seq, "p0", mean);
        let one = e.records[0].1.clone();
        e.records = (0..n)
            .map(|i| (PlayerId::new(format!("p{i}").as_str()), one.clone()))
            .collect();
        e
    }

    fn dump(store: &dyn Storage) -> String {
        let mut players: Vec<_> = store.load_players().unwrap().map(Result::unwrap).collect();
        players.sort_by(|a, b| a.0.cmp(&b.0));
        let journal: Vec<_> = store
            .journal_after(0)
            .map(|e| e.unwrap().0)
            .collect::<Vec<_>>();
        format!("{players:?}\n{journal:?}\n{}", store.last_seq().unwrap())
    }

    fn hlen(url: &str, key: &str) -> usize {
        ::redis::cmd("HLEN")
            .arg(key)
            .query(&mut redis(url))
            .unwrap()
    }

    fn staged_left(url: &str) -> (bool, bool) {
        let mut conn = redis(url);
        let stage: bool = ::redis::cmd("EXISTS")
            .arg(Keys::default().staged())
            .query(&mut conn)
            .unwrap();
        let mark: bool = ::redis::cmd("HEXISTS")
            .arg(Keys::default().meta())
            .arg("staged")
            .query(&mut conn)
            .unwrap();
        (stage, mark)
    }

    fn script_calls(url: &str) -> u64 {
        let info: String = ::redis::cmd("INFO")
            .arg("commandstats")
            .query(&mut redis(url))
            .unwrap();
        info.lines()
            .filter(|l| l.starts_with("cmdstat_evalsha:") || l.starts_with("cmdstat_eval:"))
            .map(|l| {
                let count = |name: &str| -> u64 {
                    l.split(&format!(",{name}="))
                        .nth(1)
                        .or_else(|| l.split(&format!(":{name}=")).nth(1))
                        .and_then(|v| v.split(',').next()?.parse().ok())
                        .unwrap_or(0)
                };
                // A call refused as NOSCRIPT (the script loaded, then called again) is no call.
                count("calls") - count("failed_calls")
            })
            .sum()
    }

    #[test]
    fn a_batch_past_the_bound_lands_whole_in_parts_and_a_standby_copy_follows_it() {
        with_redis(|server, runtime| {
            let url = server.url();
            lease(&url, "1|a|127.0.0.1:1");
            let store = small_parts(&runtime, &url, 1);
            store.append_journal(1, &[reset("m1", 3, 1500.0)]).unwrap();
            store.flush().unwrap();
            let mut standby = runtime
                .block_on(Standby::load(
                    &url,
                    None,
                    &Keys::default(),
                    Patience::default(),
                ))
                .unwrap();
            let before = script_calls(&url);
            // 40 players, the entry, its acknowledgement and `last_seq`: 43 fields.
            store.append_journal(2, &[reset("m2", 40, 1700.0)]).unwrap();
            store.flush().unwrap();
            let calls = script_calls(&url) - before;
            // Staged in 7 parts of at most 7 fields, committed, moved in 7, unstaged.
            assert_eq!(calls, 7 + 1 + 7 + 1, "written in parts");
            assert_eq!(staged_left(&url), (false, false));
            let reopened = runtime
                .block_on(RedisStore::open(&url, 1, &RedisOptions::default()))
                .unwrap();
            assert_eq!(dump(&reopened), dump(&store));
            assert!(dump(&reopened).contains("1700.0"));
            assert_eq!(reopened.player_count(), 40);
            // A standby copy reads the moved fields from the change log.
            assert_eq!(
                runtime.block_on(standby.follow()).unwrap(),
                Followed::InStep
            );
            let copy = runtime
                .block_on(standby.into_mirror(&mut reopened.conn.clone()))
                .unwrap()
                .expect("the copy is in step");
            assert_eq!(dump(&copy), dump(&store));
        });
    }

    #[test]
    fn a_batch_committed_but_not_applied_is_applied_by_the_next_store_to_open() {
        with_redis(|server, runtime| {
            let url = server.url();
            lease(&url, "1|a|127.0.0.1:1");
            let store = small_parts(&runtime, &url, 1);
            store.append_journal(1, &[reset("m1", 20, 1500.0)]).unwrap();
            store.flush().unwrap();
            let expected = {
                let whole = small_parts(&runtime, &url, 1);
                whole.append_journal(2, &[reset("m2", 30, 1800.0)]).unwrap();
                dump(&whole)
            };
            // The next batch staged and committed; its writer stops before moving anything.
            let fields: Vec<(String, Vec<u8>)> = (0..30)
                .map(|i| {
                    let value = serde_json::to_vec(&record(1800.0)).unwrap();
                    (
                        format!("{}:p{i}", Hash::Players as usize),
                        [b"s".as_slice(), &value].concat(),
                    )
                })
                .chain([
                    (
                        format!("{}:2", Hash::Journal as usize),
                        [
                            b"s".as_slice(),
                            &serde_json::to_vec(&reset("m2", 30, 1800.0)).unwrap(),
                        ]
                        .concat(),
                    ),
                    (format!("{}:last_seq", Hash::Meta as usize), b"s2".to_vec()),
                ])
                .collect();
            runtime
                .block_on(store.stage_part("1|a|x", true, &fields[..10]))
                .unwrap();
            runtime
                .block_on(store.stage_part("1|a|x", false, &fields[10..]))
                .unwrap();
            runtime
                .block_on(store.send_script(&[vec![Op::Commit {
                    stage: Keys::default().staged().into(),
                    id: "1|a|x".into(),
                    count: fields.len(),
                }]]))
                .unwrap();
            drop(store);
            assert_eq!(staged_left(&url), (true, true));

            // The next owner applies it before loading.
            lease(&url, "2|b|127.0.0.1:2");
            let next = runtime
                .block_on(RedisStore::open(&url, 2, &RedisOptions::default()))
                .unwrap();
            assert_eq!(staged_left(&url), (false, false));
            assert_eq!(dump(&next), expected);
        });
    }

    #[test]
    fn a_stage_never_committed_changes_nothing_and_a_fenced_store_stages_nothing() {
        with_redis(|server, runtime| {
            let url = server.url();
            lease(&url, "1|a|127.0.0.1:1");
            let store = small_parts(&runtime, &url, 1);
            store.append_journal(1, &[reset("m1", 20, 1500.0)]).unwrap();
            store.flush().unwrap();
            let before = dump(&store);
            let field = |i: usize| {
                (
                    format!("{}:p{i}", Hash::Players as usize),
                    [
                        b"s".as_slice(),
                        &serde_json::to_vec(&record(1900.0)).unwrap(),
                    ]
                    .concat(),
                )
            };
            let fields: Vec<_> = (0..20).map(field).collect();
            runtime
                .block_on(store.stage_part("1|a|x", true, &fields))
                .unwrap();
            // A commit naming more fields than were staged is refused.
            let short = runtime.block_on(store.send_script(&[vec![Op::Commit {
                stage: Keys::default().staged().into(),
                id: "1|a|x".into(),
                count: 21,
            }]]));
            assert!(
                matches!(&short, Err(StoreError::Redis(e)) if e.contains("STAGE")),
                "{short:?}"
            );
            // A part of another attempt does not mix into this one.
            let other = runtime.block_on(store.stage_part("1|a|y", false, &fields[..1]));
            assert!(matches!(&other, Err(StoreError::Redis(e)) if e.contains("another attempt")));
            drop(store);
            let reopened = small_parts(&runtime, &url, 1);
            assert_eq!(dump(&reopened), before, "the stage changed nothing");
            // The next staged batch starts a stage of its own.
            reopened
                .append_journal(2, &[reset("m2", 25, 1600.0)])
                .unwrap();
            reopened.flush().unwrap();
            assert_eq!(staged_left(&url), (false, false));
            let after = runtime
                .block_on(RedisStore::open(&url, 1, &RedisOptions::default()))
                .unwrap();
            assert_eq!(dump(&after), dump(&reopened));
            assert!(!dump(&after).contains("1900.0"));
            // A store that lost the lease stages nothing.
            lease(&url, "2|b|127.0.0.1:2");
            reopened
                .append_journal(3, &[reset("m3", 25, 1300.0)])
                .unwrap();
            assert!(matches!(reopened.flush(), Err(StoreError::Fenced)));
            assert_eq!(staged_left(&url), (false, false));
        });
    }

    #[test]
    fn a_commit_mark_whose_stage_is_gone_stops_the_next_owner_instead_of_half_applying() {
        with_redis(|server, runtime| {
            let url = server.url();
            lease(&url, "1|a|127.0.0.1:1");
            drop(small_parts(&runtime, &url, 1));
            // Committed, then the stage lost (evicted, or deleted by hand).
            let () = ::redis::cmd("HSET")
                .arg(Keys::default().meta())
                .arg("staged")
                .arg("1|a|7|00")
                .query(&mut redis(&url))
                .unwrap();
            let refused = runtime.block_on(RedisStore::open(&url, 1, &RedisOptions::default()));
            assert!(
                matches!(&refused, Err(StoreError::Decode { key, detail })
                    if key == Keys::default().staged() && detail.contains("1|a|7|00")),
                "{:?}",
                refused.err()
            );
        });
    }

    /// A stage past Redis' small-hash encoding is read a page at a time, each name once with
    /// its value's size, the attempt's own field left out.
    #[test]
    fn a_large_stage_is_read_page_by_page_each_field_once_with_its_size() {
        with_redis(|server, runtime| {
            let url = server.url();
            lease(&url, "1|a|127.0.0.1:1");
            let store = small_parts(&runtime, &url, 1);
            let fields: Vec<(String, Vec<u8>)> = (0..600)
                .map(|i| (format!("1:p{i:03}"), vec![b's'; 1 + i % 17]))
                .collect();
            runtime
                .block_on(store.stage_part("1|a|x", true, &fields))
                .unwrap();
            for page in [10, 1_000] {
                let (names, sizes) = runtime.block_on(store.stage_fields(page)).unwrap();
                let expected: Vec<String> = fields.iter().map(|(n, _)| n.clone()).collect();
                assert_eq!(names, expected, "page {page}");
                let lengths: Vec<usize> = fields.iter().map(|(_, v)| v.len()).collect();
                assert_eq!(sizes, lengths, "page {page}");
            }
        });
    }

    #[test]
    fn parts_end_at_their_field_count_or_byte_bound_and_a_large_value_goes_alone() {
        assert_eq!(part_ends([1, 1, 1, 1, 1].into_iter(), 2), [2, 4, 5]);
        assert_eq!(part_ends([1, 1].into_iter(), 2), [2]);
        assert_eq!(part_ends(std::iter::empty(), 2), Vec::<usize>::new());
        let half = PART_BYTES / 2;
        assert_eq!(part_ends([half, half, 1].into_iter(), 10), [2, 3]);
        assert_eq!(
            part_ends([1, PART_BYTES + 5, 1].into_iter(), 10),
            [1, 2, 3],
            "a value past the bound goes alone"
        );
    }

    #[test]
    fn a_large_journal_entry_is_kept_in_parts_and_read_back_whole_after_a_rewrite_and_a_trim() {
        with_redis(|server, runtime| {
            let url = server.url();
            lease(&url, "1|a|127.0.0.1:1");
            let store = small_parts(&runtime, &url, 1);
            let journal = Keys::default().hash(Hash::Journal).to_string();
            // 1,001 records and the party of the last one.
            let mut large = reset("m1", 1_001, 1500.0);
            let last = PlayerId::new("p1000");
            large.parties = vec![(
                crate::records::party_key(&[last.clone(), PlayerId::new("p0")]),
                crate::records::PartyRecord {
                    skill: large.records[0].1.skill,
                    games: 3,
                    last_played_unix: None,
                },
            )];
            store.append_journal(1, &[large.clone()]).unwrap();
            store.append_journal(2, &[reset("m2", 3, 1600.0)]).unwrap();
            store.flush().unwrap();
            // Its own field and three parts (1,000 records, 1 record, the party).
            assert_eq!(hlen(&url, &journal), 1 + 3 + 1);
            let reopened = || {
                runtime
                    .block_on(RedisStore::open(&url, 1, &RedisOptions::default()))
                    .unwrap()
            };
            let back: Vec<JournalEntry> =
                reopened().journal_after(0).map(|e| e.unwrap().1).collect();
            assert_eq!(back, vec![large.clone(), reset("m2", 3, 1600.0)]);
            // An erasure takes the last record and the party out: 1,000 records are kept whole,
            // and every part goes.
            let store = reopened();
            store
                .erase_player(&last, &PlayerId::new("erased:000000000000"))
                .unwrap();
            store.flush().unwrap();
            let mut erased = large.clone();
            erased.records.retain(|(p, _)| *p != last);
            erased.parties.clear();
            let back: Vec<JournalEntry> =
                reopened().journal_after(0).map(|e| e.unwrap().1).collect();
            assert_eq!(back[0], erased);
            assert_eq!(hlen(&url, &journal), 1 + 1);
            // A snapshot trims an entry with its parts.
            let store = reopened();
            store.append_journal(3, &[large.clone()]).unwrap();
            store.flush().unwrap();
            assert_eq!(hlen(&url, &journal), 2 + 1 + 3);
            store.finish_snapshot(2).unwrap();
            assert_eq!(hlen(&url, &journal), 1 + 3);
            assert_eq!(reopened().journal_after(0).count(), 1);
            // A part gone (by hand) stops the load, naming the entry.
            let () = ::redis::cmd("HDEL")
                .arg(&journal)
                .arg("3/3")
                .query(&mut redis(&url))
                .unwrap();
            let refused = runtime.block_on(RedisStore::open(&url, 1, &RedisOptions::default()));
            assert!(
                matches!(&refused, Err(StoreError::Decode { key, .. }) if key == "journal 3"),
                "{:?}",
                refused.err()
            );
        });
    }
}

//! The flush's script, and the grouping of queued writes into the commands it runs.

use std::io::Write;

use ::redis::{Cmd, Script, ToRedisArgs};

use super::{HASHES, Hash, loaded_hash};

/// One queued Redis write.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Op {
    Set(Hash, String, Vec<u8>),
    Del(Hash, String),
    Clear(Hash),
    /// A match id to the head of a player's history list (its key), which keeps `keep`; a
    /// record cut off that other lists still hold joins the player's past index (its key).
    Push {
        list: String,
        past: String,
        member: String,
        keep: u32,
    },
    /// A match id out of an erased player's history list (its key); the record as it stays
    /// for its other holders (empty: leave it).
    Unhold(String, String, Vec<u8>),
    /// A match id out of an erased player's past index (its key); the record as it stays for
    /// its holders (empty: leave it).
    Forget(String, String, Vec<u8>),
    /// A player's history list (its key) replaced whole (migration).
    List(String, Vec<String>),
    /// A player's past index (its key) replaced whole (migration).
    Past(String, Vec<String>),
    /// A stored record into a player's past index (its key) if the player has a history list
    /// (its key) that does not hold it: the one-time build of an index a keyspace of an
    /// earlier release lacks (see `past.rs`).
    Index {
        past: String,
        list: String,
        member: String,
    },
    /// A staged batch's commit (see `stage.rs`): the stage (its key) must hold the attempt
    /// `id` and its `count` fields; then the meta hash marks it committed.
    Commit {
        stage: String,
        id: String,
        count: usize,
    },
    /// Staged fields (`INDEX:FIELD`) moved from the stage (its key) into their hashes.
    Move(String, Vec<String>),
    /// The stage (its key) deleted and its mark with it: a staged batch applied whole.
    Unstage(String),
}

impl Op {
    /// Arguments the op takes in the script.
    pub(super) fn args(&self) -> usize {
        match self {
            Self::Set(..) => 5,
            Self::Del(..) => 4,
            Self::Clear(..) => 2,
            Self::Push { .. } => 7,
            Self::Unhold(..) => 6,
            Self::Forget(..) | Self::Index { .. } => 5,
            Self::List(_, members) | Self::Past(_, members) | Self::Move(_, members) => {
                3 + members.len()
            }
            Self::Commit { .. } => 5,
            Self::Unstage(_) => 3,
        }
    }

    /// About how many bytes the op holds (its names and values), for the bound on what may
    /// wait unsent (see `backlog.rs`).
    pub(super) fn bytes(&self) -> usize {
        let strings = |s: &[String]| s.iter().map(String::len).sum::<usize>();
        // Each op's own allocation and the lengths it carries.
        const OVERHEAD: usize = 32;
        OVERHEAD
            + match self {
                Self::Set(_, field, value) => field.len() + value.len(),
                Self::Del(_, field) => field.len(),
                Self::Clear(_) => 0,
                Self::Push {
                    list, past, member, ..
                }
                | Self::Index { past, list, member } => list.len() + past.len() + member.len(),
                Self::Unhold(key, member, value) | Self::Forget(key, member, value) => {
                    key.len() + member.len() + value.len()
                }
                Self::List(key, members) | Self::Past(key, members) | Self::Move(key, members) => {
                    key.len() + strings(members)
                }
                Self::Commit { stage, id, .. } => stage.len() + id.len(),
                Self::Unstage(stage) => stage.len(),
            }
    }

    /// The keys of its own the op names (history lists and past indexes), which the script
    /// receives after the hashes.
    pub(super) fn own_keys(&self) -> impl Iterator<Item = &str> {
        let (first, second) = match self {
            Self::Push { list, past, .. } | Self::Index { list, past, .. } => {
                (Some(list), Some(past))
            }
            Self::Unhold(key, ..)
            | Self::Forget(key, ..)
            | Self::List(key, _)
            | Self::Past(key, _)
            | Self::Move(key, _)
            | Self::Unstage(key)
            | Self::Commit { stage: key, .. } => (Some(key), None),
            Self::Set(..) | Self::Del(..) | Self::Clear(..) => (None, None),
        };
        first.into_iter().chain(second).map(String::as_str)
    }
}

/// One call of the script, built up key by key and argument by argument: its `EVALSHA`
/// command, to send alone or followed by `WAIT` in one request.
#[derive(Default)]
pub(super) struct Invocation {
    keys: Vec<Vec<u8>>,
    args: Vec<Vec<u8>>,
}

impl Invocation {
    pub(super) fn key(&mut self, key: impl ToRedisArgs) -> &mut Self {
        key.write_redis_args(&mut self.keys);
        self
    }

    pub(super) fn arg(&mut self, arg: impl ToRedisArgs) -> &mut Self {
        arg.write_redis_args(&mut self.args);
        self
    }

    /// `EVALSHA` of `script` with these keys and arguments (`SCRIPT LOAD` it first where Redis
    /// answers `NOSCRIPT`).
    pub(super) fn cmd(&self, script: &Script) -> Cmd {
        let mut cmd = ::redis::cmd("EVALSHA");
        cmd.arg(script.get_hash()).arg(self.keys.len());
        for key in &self.keys {
            cmd.arg(key.as_slice());
        }
        for arg in &self.args {
            cmd.arg(arg.as_slice());
        }
        cmd
    }
}

/// Applies queued writes if the lease's value starts with ARGV[1] and a `|` (the token, or the
/// token and the node). Every flush adds one, before it writes anything (a call that fails
/// midway keeps its earlier writes, and must be counted and logged all the same),
/// to the flush counter (`KEYS[3 + HASHES]`, after the lease, the hashes and the change log);
/// with ARGV[2] above 0 it also appends to the change log (`KEYS[2 + HASHES]`, a stream cut to
/// about ARGV[2] entries) the entry `q SEQ ARGV[4] ARGV[5]`: the client names there the fields
/// the call sets or deletes ([`ChangeList`]), so the script builds no strings for it. ARGV[3]
/// numbers the
/// call among this owner's (`KEYS[4 + HASHES]` keeps the last one applied, as `TOKEN|NODE|N`):
/// a call numbered no higher than that is skipped whole, so a flight that timed out and was
/// sent again in a later call cannot land after it (on a connection opened meanwhile) and put
/// back what the later call changed. Operations follow from ARGV[6] as
/// `s KEY N FIELD VALUE…` (one HSET of N fields), `d KEY N FIELD…` (one HDEL of N fields),
/// `x KEY` (DEL) or `p LIST MEMBER KEEP
/// RECORDS REFS PAST` (history: MEMBER to the head of LIST, once; LIST cut to KEEP; each record
/// cut off loses a holder in REFS and goes from RECORDS with its last, or else joins PAST) or
/// `a PAST LIST MEMBER RECORDS` (MEMBER into PAST if RECORDS holds it and LIST exists without
/// it: the past index's one-time build) or `u LIST MEMBER RECORDS
/// REFS VALUE` (an erasure: MEMBER out of LIST; if it was there, the record loses a holder and
/// goes with its last, or else takes VALUE) or `l LIST N MEMBER…` (LIST replaced by the N
/// members), KEY an index into KEYS; and for a batch written in parts (`stage.rs`),
/// `c STAGE ID COUNT META` (STAGE must hold attempt ID and COUNT fields, else the script fails;
/// then META marks it `staged`), `g STAGE N FIELD…` (each staged `INDEX:FIELD` into its hash,
/// out of STAGE) and `e STAGE META` (STAGE unlinked, freed in the background, and its mark
/// deleted).
/// Sending the same batches again in order (a flight whose answer was lost) leaves the same
/// history: a record's write resets its holder count before its pushes.
/// It answers `{N, SECONDS, MICROSECONDS}`: N the arguments it read (0 for a call skipped
/// whole) and Redis's `TIME`, which keeps the store's reading of Redis's clock current.
pub(super) const APPLY: &str = r"
local time = redis.call('TIME')
local lease = redis.call('GET', KEYS[1])
local token = ARGV[1]
if not lease or string.sub(lease, 1, string.len(token) + 1) ~= token .. '|' then
  return redis.error_reply('FENCED the lease no longer carries ' .. token)
end
local flight = tonumber(ARGV[3])
local landed = redis.call('GET', KEYS[HASHES + 4])
if landed and string.sub(landed, 1, string.len(token) + 1) == token .. '|' then
  local last = tonumber(string.sub(landed, string.len(token) + 2))
  if last and last >= flight then
    return {0, time[1], time[2]}
  end
end
redis.call('SET', KEYS[HASHES + 4], token .. '|' .. flight)
local logged = tonumber(ARGV[2])
-- Counted and logged before any write: Redis does not roll a script back, so a call that
-- fails midway (a key moving to another Redis Cluster node, say) keeps what it wrote so far,
-- and a standby copy must still learn of it (it reads the named fields again).
local seq = redis.call('INCR', KEYS[HASHES + 3])
if logged > 0 then
  redis.call('XADD', KEYS[HASHES + 2], 'MAXLEN', '~', logged, '*', 'q', seq, ARGV[4], ARGV[5])
end
local past = ARGV[6]
-- Adds members i..j of ARGV to a list or a set, a thousand per command: Lua's unpack takes
-- at most about 8,000 values.
local function add(command, key, i, j)
  while i <= j do
    local last = math.min(i + 999, j)
    redis.call(command, key, unpack(ARGV, i, last))
    i = last + 1
  end
end
local function drop(records, refs, id)
  local value = redis.call('HGET', records, id)
  if value then
    local ok, record = pcall(cjson.decode, value)
    if ok and type(record) == 'table' and type(record.teams) == 'table' then
      for _, team in ipairs(record.teams) do
        for _, player in ipairs(team) do
          redis.call('SREM', past .. player, id)
        end
      end
    end
  end
  redis.call('HDEL', refs, id)
  redis.call('HDEL', records, id)
end
local i = 7
local n = #ARGV
while i <= n do
  local op = ARGV[i]
  local key = KEYS[tonumber(ARGV[i + 1])]
  if op == 's' then
    local count = tonumber(ARGV[i + 2])
    redis.call('HSET', key, unpack(ARGV, i + 3, i + 2 + 2 * count))
    i = i + 3 + 2 * count
  elseif op == 'd' then
    local count = tonumber(ARGV[i + 2])
    redis.call('HDEL', key, unpack(ARGV, i + 3, i + 2 + count))
    i = i + 3 + count
  elseif op == 'x' then
    redis.call('DEL', key)
    i = i + 2
  elseif op == 'l' then
    local count = tonumber(ARGV[i + 2])
    redis.call('DEL', key)
    add('RPUSH', key, i + 3, i + 2 + count)
    i = i + 3 + count
  elseif op == 'u' then
    local member = ARGV[i + 2]
    local records = KEYS[tonumber(ARGV[i + 3])]
    local refs = KEYS[tonumber(ARGV[i + 4])]
    if redis.call('LREM', key, 0, member) > 0 then
      if redis.call('HINCRBY', refs, member, -1) <= 0 then
        drop(records, refs, member)
      elseif ARGV[i + 5] ~= '' and redis.call('HEXISTS', records, member) == 1 then
        redis.call('HSET', records, member, ARGV[i + 5])
      end
    end
    i = i + 6
  elseif op == 'f' then
    local member = ARGV[i + 2]
    local records = KEYS[tonumber(ARGV[i + 3])]
    if redis.call('SREM', key, member) > 0 and ARGV[i + 4] ~= ''
        and redis.call('HEXISTS', records, member) == 1 then
      redis.call('HSET', records, member, ARGV[i + 4])
    end
    i = i + 5
  elseif op == 'a' then
    local list = KEYS[tonumber(ARGV[i + 2])]
    local member = ARGV[i + 3]
    local records = KEYS[tonumber(ARGV[i + 4])]
    if redis.call('HEXISTS', records, member) == 1 and redis.call('EXISTS', list) == 1
        and not redis.call('LPOS', list, member) then
      redis.call('SADD', key, member)
    end
    i = i + 5
  elseif op == 't' then
    local count = tonumber(ARGV[i + 2])
    redis.call('DEL', key)
    add('SADD', key, i + 3, i + 2 + count)
    i = i + 3 + count
  elseif op == 'p' then
    local member = ARGV[i + 2]
    local keep = tonumber(ARGV[i + 3])
    local records = KEYS[tonumber(ARGV[i + 4])]
    local refs = KEYS[tonumber(ARGV[i + 5])]
    local owner = KEYS[tonumber(ARGV[i + 6])]
    redis.call('LREM', key, 0, member)
    redis.call('LPUSH', key, member)
    local evicted = redis.call('LRANGE', key, keep, -1)
    if #evicted > 0 then
      redis.call('LTRIM', key, 0, keep - 1)
      for _, old in ipairs(evicted) do
        if redis.call('HINCRBY', refs, old, -1) <= 0 then
          drop(records, refs, old)
        else
          redis.call('SADD', owner, old)
        end
      end
    end
    i = i + 7
  elseif op == 'c' then
    if redis.call('HGET', key, '') ~= ARGV[i + 2]
        or redis.call('HLEN', key) ~= tonumber(ARGV[i + 3]) + 1 then
      return redis.error_reply('STAGE the stage does not hold attempt ' .. ARGV[i + 2] .. ' whole')
    end
    redis.call('HSET', KEYS[tonumber(ARGV[i + 4])], 'staged', ARGV[i + 2])
    i = i + 5
  elseif op == 'g' then
    local count = tonumber(ARGV[i + 2])
    for j = i + 3, i + 2 + count do
      local field = ARGV[j]
      local value = redis.call('HGET', key, field)
      if value then
        local sep = string.find(field, ':', 1, true)
        local target = KEYS[tonumber(string.sub(field, 1, sep - 1))]
        if string.sub(value, 1, 1) == 's' then
          redis.call('HSET', target, string.sub(field, sep + 1), string.sub(value, 2))
        else
          redis.call('HDEL', target, string.sub(field, sep + 1))
        end
        redis.call('HDEL', key, field)
      end
    end
    i = i + 3 + count
  elseif op == 'e' then
    redis.call('UNLINK', key)
    redis.call('HDEL', KEYS[tonumber(ARGV[i + 2])], 'staged')
    i = i + 3
  else
    return redis.error_reply('bad operation ' .. tostring(op))
  end
end
return {n, time[1], time[2]}
";

/// The hash whose writes the change log leaves out: waiting tickets, written on every
/// `EnterQueue` and gone again when matched, are few at any time, so a standby reads them whole
/// when it takes over rather than following every one.
pub(super) const UNLOGGED: Hash = Hash::Tickets;

/// The most fields one change-log entry names; a call that changes more (a large batch that is
/// not only whole-field writes, so not written in parts) logs `r`: followers read everything
/// again rather than field by field.
pub(super) const LOGGED_FIELDS: usize = 100_000;

/// The script as sent: [`APPLY`] with its constants filled in.
pub(super) fn apply_script() -> Script {
    Script::new(&APPLY.replace("HASHES", &HASHES.len().to_string()))
}

/// Whether writes to `h` are named in the change log: not those of [`UNLOGGED`], nor of the
/// hashes no copy holds (the match history, read from Redis: each result writes a record and
/// its holder count).
fn logged(h: Hash) -> bool {
    h != UNLOGGED && loaded_hash(h)
}

/// The change-log entry of one call: `INDEX,LEN:FIELD` for each field set or deleted in a
/// logged hash (`xINDEX,0:` for a hash deleted whole), in the order written, or `r` with
/// nothing once more than [`LOGGED_FIELDS`] changed (followers read everything again).
#[derive(Default)]
pub(super) struct ChangeList {
    changes: Vec<u8>,
    count: usize,
    whole: bool,
}

impl ChangeList {
    fn note(&mut self, index: &str, h: Hash, field: &str) {
        if !logged(h) || self.whole {
            return;
        }
        if self.count >= LOGGED_FIELDS {
            self.whole = true;
            return;
        }
        self.count += 1;
        let _ = write!(self.changes, "{index}{},{}:", h as usize, field.len());
        self.changes.extend_from_slice(field.as_bytes());
    }

    /// A field of `h` set or deleted.
    pub fn field(&mut self, h: Hash, field: &str) {
        self.note("", h, field);
    }

    /// `h` deleted whole.
    pub fn cleared(&mut self, h: Hash) {
        self.note("x", h, "");
    }

    /// The entry's kind (`c` or `r`) and its changes.
    pub fn into_entry(self) -> (&'static str, Vec<u8>) {
        if self.whole {
            ("r", Vec::new())
        } else {
            ("c", self.changes)
        }
    }
}

/// How many flushes the change log keeps (about: Redis trims whole nodes of the stream). A
/// standby that falls further behind than this reads everything again.
pub const CHANGE_LOG_ENTRIES: u64 = 20_000;

/// Most fields one `s` or `d` op carries: the script spreads them over one command's arguments
/// (`unpack`), which Lua bounds.
pub(super) const MAX_RUN: usize = 1000;

/// Ops as the script receives them: consecutive writes to one hash go as one command.
#[derive(Debug, PartialEq)]
pub(super) enum Run<'a> {
    Set(Hash, Vec<(&'a str, &'a [u8])>),
    Del(Hash, Vec<&'a str>),
    One(&'a Op),
}

/// Groups consecutive sets (and consecutive deletes) of one hash, at most [`MAX_RUN`] fields a
/// run, keeping the order of everything: Redis applies the same writes in the same order, in
/// fewer commands.
pub(super) fn runs<'a>(ops: impl Iterator<Item = &'a Op>) -> Vec<Run<'a>> {
    let mut out: Vec<Run<'a>> = Vec::new();
    for op in ops {
        match (op, out.last_mut()) {
            (Op::Set(h, f, v), Some(Run::Set(last, fields)))
                if last == h && fields.len() < MAX_RUN =>
            {
                fields.push((f, v));
            }
            (Op::Del(h, f), Some(Run::Del(last, fields)))
                if last == h && fields.len() < MAX_RUN =>
            {
                fields.push(f);
            }
            (Op::Set(h, f, v), _) => out.push(Run::Set(*h, vec![(f.as_str(), v.as_slice())])),
            (Op::Del(h, f), _) => out.push(Run::Del(*h, vec![f.as_str()])),
            (op, _) => out.push(Run::One(op)),
        }
    }
    out
}

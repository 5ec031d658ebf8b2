//! The Redis backend's admin records, in the hash `admin` (the same hash tag as every other
//! key, so a flush stays one script): `b/<player>` → ban, `a/<seq>` → audit entry, `e/<seq>` →
//! event (sequence numbers zero-padded to 20 digits), `n/a` and `n/e` → the last sequence numbers.
//!
//! Only the lease holder writes, so the mirror hands out the numbers: events written by every
//! owner in turn form one ordered stream, and a new owner continues after the last number it
//! loaded. A player's erasure is one batch, so one script: all of it or none (its match history
//! part included, see `APPLY`'s `u` and `f` ops).

use super::super::AdminRecords;
use super::super::admin_records::{AdminData, Erasure};
use super::super::memory::Data;
use super::{Fields, Hash, Op, RedisStore, decode, json, ranks_field, text, week_field};
use crate::ids::PlayerId;
use crate::records::MatchRecord;
use crate::store::{AuditRecord, Ban, EventRecord, StoreError};

pub(super) fn seq_field(prefix: char, seq: u64) -> String {
    format!("{prefix}/{seq:020}")
}

/// The admin hash's field with the highest cursor trimming dropped (written once cursors have
/// gaps: see `AdminRecords::events_trimmed_through`).
const TRIMMED_EVENTS: &str = "t/e";

fn trimmed_op(data: &Data) -> Op {
    Op::Set(
        Hash::Admin,
        TRIMMED_EVENTS.into(),
        data.events_trimmed_through().to_string().into_bytes(),
    )
}

/// Appends `events` (`values`, their JSON) to the mirror at `now_ms`: the writes that make them
/// durable.
pub(super) fn append_events(
    data: &mut Data,
    events: &[EventRecord],
    values: Vec<Vec<u8>>,
    now_ms: u64,
) -> Vec<Op> {
    if events.is_empty() {
        return Vec::new();
    }
    let cursors = data.append_events(events, now_ms);
    let mut batch: Vec<Op> = values
        .into_iter()
        .zip(cursors)
        .map(|(v, seq)| Op::Set(Hash::Admin, seq_field('e', seq), v))
        .collect();
    batch.push(Op::Set(
        Hash::Admin,
        "n/e".into(),
        data.admin.last_event.to_string().into_bytes(),
    ));
    if data.admin.clock.is_some() {
        batch.push(trimmed_op(data));
    }
    batch
}

/// Loads the admin hash into the mirror.
pub(super) fn fill(data: &mut Data, fields: Fields) -> Result<(), StoreError> {
    let admin: &mut AdminData = &mut data.admin;
    for (k, v) in fields {
        let key = text(&k);
        let seq = |rest: &str| -> Result<u64, StoreError> {
            rest.parse().map_err(|_| StoreError::Decode {
                key: format!("admin {key}"),
                detail: "not a sequence number".into(),
            })
        };
        if let Some(player) = key.strip_prefix("b/") {
            let ban: Ban = decode(&v, &format!("ban {player}"))?;
            admin.bans.insert(PlayerId::new(player), ban);
        } else if let Some(rest) = key.strip_prefix("a/") {
            admin
                .audit
                .insert(seq(rest)?, decode(&v, &format!("audit {rest}"))?);
        } else if let Some(rest) = key.strip_prefix("e/") {
            admin
                .events
                .insert(seq(rest)?, decode(&v, &format!("event {rest}"))?);
        } else if key == "n/a" {
            admin.last_audit = seq(&text(&v))?;
        } else if key == "n/e" {
            admin.last_event = seq(&text(&v))?;
        } else if key == TRIMMED_EVENTS {
            admin.trimmed_events = Some(seq(&text(&v))?);
        }
    }
    Ok(())
}

impl RedisStore {
    /// Redis's clock in milliseconds, for event cursors
    /// ([`crate::store::event_clock::EventClock`]).
    pub(super) fn event_ms(&self) -> u64 {
        (self.clock.now_unix() * 1000.0) as u64
    }
}

impl AdminRecords for RedisStore {
    fn put_ban(&self, ban: &Ban) -> Result<(), StoreError> {
        let _order = self.write_order();
        self.check_fence()?;
        let batch = vec![Op::Set(
            Hash::Admin,
            format!("b/{}", ban.player),
            json(ban)?,
        )];
        self.mirror.put_ban(ban)?;
        self.queue(batch);
        Ok(())
    }

    fn remove_ban(&self, player: &PlayerId) -> Result<bool, StoreError> {
        let _order = self.write_order();
        self.check_fence()?;
        let had = self.mirror.remove_ban(player)?;
        self.queue(vec![Op::Del(Hash::Admin, format!("b/{player}"))]);
        Ok(had)
    }

    fn load_bans(&self) -> Result<Vec<Ban>, StoreError> {
        self.mirror.load_bans()
    }

    fn append_audit(&self, entry: &AuditRecord) -> Result<u64, StoreError> {
        let _order = self.write_order();
        self.check_fence()?;
        let value = json(entry)?;
        let mut data = self.mirror.data();
        let seq = data.append_audit(entry);
        // Queued under the mirror's lock, so batches reach Redis in sequence order.
        self.queue(vec![
            Op::Set(Hash::Admin, seq_field('a', seq), value),
            Op::Set(Hash::Admin, "n/a".into(), seq.to_string().into_bytes()),
        ]);
        Ok(seq)
    }

    fn audit_after(&self, after: u64, limit: usize) -> Result<Vec<(u64, AuditRecord)>, StoreError> {
        self.mirror.audit_after(after, limit)
    }

    fn last_audit(&self) -> Result<u64, StoreError> {
        self.mirror.last_audit()
    }

    fn append_events(&self, events: &[EventRecord]) -> Result<u64, StoreError> {
        let _order = self.write_order();
        self.check_fence()?;
        let values = events.iter().map(json).collect::<Result<Vec<_>, _>>()?;
        let now = self.event_ms();
        let mut data = self.mirror.data();
        let batch = append_events(&mut data, events, values, now);
        if !batch.is_empty() {
            self.queue(batch);
        }
        Ok(data.admin.last_event)
    }

    fn events_before(
        &self,
        before: u64,
        limit: usize,
    ) -> Result<Vec<(u64, EventRecord)>, StoreError> {
        self.mirror.events_before(before, limit)
    }

    fn events_trimmed_through(&self) -> Result<u64, StoreError> {
        Ok(self.mirror.data().events_trimmed_through())
    }

    fn events_closed(&self) -> Result<u64, StoreError> {
        let now = self.event_ms();
        Ok(self.mirror.data().events_closed(now))
    }

    fn events_after(
        &self,
        after: u64,
        limit: usize,
    ) -> Result<Vec<(u64, EventRecord)>, StoreError> {
        self.mirror.events_after(after, limit)
    }

    fn trim_events(&self, before_unix: f64, keep_at_most: u64) -> Result<usize, StoreError> {
        let _order = self.write_order();
        self.check_fence()?;
        let mut data = self.mirror.data();
        let old = data.trim_events(before_unix, keep_at_most);
        let mut batch: Vec<Op> = old
            .iter()
            .map(|s| Op::Del(Hash::Admin, seq_field('e', *s)))
            .collect();
        if !old.is_empty() {
            batch.push(trimmed_op(&data));
        }
        self.queue(batch);
        Ok(old.len())
    }

    fn trim_audit(&self, before_unix: f64, keep_at_most: u64) -> Result<usize, StoreError> {
        let _order = self.write_order();
        self.check_fence()?;
        let old = self.mirror.data().trim_audit(before_unix, keep_at_most);
        self.queue(
            old.iter()
                .map(|s| Op::Del(Hash::Admin, seq_field('a', *s)))
                .collect(),
        );
        Ok(old.len())
    }

    fn import_log(
        &self,
        audit: &[(u64, AuditRecord)],
        events: &[(u64, EventRecord)],
        last_audit: u64,
        last_event: u64,
    ) -> Result<(), StoreError> {
        let _order = self.write_order();
        self.check_fence()?;
        let mut batch = Vec::new();
        for (seq, entry) in audit {
            batch.push(Op::Set(Hash::Admin, seq_field('a', *seq), json(entry)?));
        }
        for (seq, event) in events {
            batch.push(Op::Set(Hash::Admin, seq_field('e', *seq), json(event)?));
        }
        let mut data = self.mirror.data();
        data.import_log(audit, events, last_audit, last_event);
        batch.push(Op::Set(
            Hash::Admin,
            "n/a".into(),
            data.admin.last_audit.to_string().into_bytes(),
        ));
        batch.push(Op::Set(
            Hash::Admin,
            "n/e".into(),
            data.admin.last_event.to_string().into_bytes(),
        ));
        self.queue(batch);
        Ok(())
    }

    fn erase_player(&self, player: &PlayerId, marker: &PlayerId) -> Result<(), StoreError> {
        self.check_fence()?;
        if !self.past_ready.load(std::sync::atomic::Ordering::Relaxed) {
            return Err(StoreError::NotYet(
                "the match history's past indexes are not complete yet (the first owner after \
                 an upgrade builds them while it serves; its log says when it is done, or why \
                 it cannot be); erase the player again later"
                    .into(),
            ));
        }
        // The history stays in Redis: its records are read (after every queued write) and
        // rewritten here; the script drops each from the player's list and lowers its holder
        // count, and takes each out of their past index, in the same batch as the rest of the
        // erasure. The player is in no match and
        // the caller holds the ledger's admin gate, so no write adds to their list meanwhile.
        let (held, past) = super::blocking::run(self.history_held(player))?;
        // After the reads from Redis: other writes wait only for the mirror's change.
        let _order = self.write_order();
        let mut data = self.mirror.data();
        // The parts each large entry is kept in now: one rewritten with fewer (the erased
        // player's record and parties out of it) has its extra parts deleted.
        let parted: std::collections::HashMap<u64, usize> = data
            .journal
            .iter()
            .map(|(seq, entry)| (*seq, super::journal::parts(entry)))
            .filter(|(_, n)| *n > 0)
            .collect();
        let e: Erasure = data.erase_player(player, marker);
        let mut batch = Vec::new();
        if e.player_removed {
            batch.push(Op::Del(Hash::Players, player.to_string()));
        }
        for k in e.parties_removed {
            batch.push(Op::Del(Hash::Parties, k));
        }
        for seq in e.journal_rewritten {
            if let Some(entry) = data.journal.get(&seq) {
                batch.extend(super::journal::journal_ops(
                    seq,
                    entry,
                    parted.get(&seq).copied().unwrap_or(0),
                )?);
            }
        }
        for (pool, season, week) in e.weeks_rewritten {
            if let Some(rp) = data.weeks.get(&(pool.clone(), season, week)) {
                batch.push(Op::Set(
                    Hash::Weeks,
                    week_field(&pool, season, week),
                    json(rp)?,
                ));
            }
        }
        for (pool, season) in e.ranks_rewritten {
            if let Some(ranks) = data.ranks.get(&(pool.clone(), season)) {
                batch.push(Op::Set(
                    Hash::Ranks,
                    ranks_field(&pool, season),
                    json(ranks)?,
                ));
            }
        }
        for id in e.tickets_removed {
            batch.push(Op::Del(Hash::Tickets, id.to_string()));
        }
        if e.ban_removed {
            batch.push(Op::Del(Hash::Admin, format!("b/{player}")));
        }
        for id in e.acks_rewritten {
            if let Some(record) = data.acks.get(&id) {
                batch.push(Op::Set(Hash::Acks, id.to_string(), json(record)?));
            }
        }
        for seq in e.events_rewritten {
            if let Some(event) = data.admin.events.get(&seq) {
                batch.push(Op::Set(Hash::Admin, seq_field('e', seq), json(event)?));
            }
        }
        let erased = |record: Option<MatchRecord>| -> Result<Vec<u8>, StoreError> {
            match record {
                Some(mut r) => {
                    r.erase(player, marker);
                    json(&r)
                }
                None => Ok(Vec::new()),
            }
        };
        for (id, record) in held {
            let value = erased(record)?;
            batch.push(Op::Unhold(self.keys.history(player), id.to_string(), value));
        }
        // After the list's: a record its last holder's erasure dropped left every index.
        for (id, record) in past {
            let value = erased(record)?;
            batch.push(Op::Forget(self.keys.past(player), id.to_string(), value));
        }
        self.queue(batch);
        Ok(())
    }
}

//! Player and match records the admin service keeps: bans, the audit log, the event log, and
//! the erasure of one player. Every backend implements [`AdminRecords`] (a supertrait of
//! [`super::Storage`], so the state sees one store); this module also holds the in-memory
//! logic the memory backend and the Redis backend's mirror share.
//!
//! Guarantees (checked by the contract tests in `contract.rs` for every backend):
//! - audit entries and events get increasing sequence numbers that are never reused, even after
//!   every event was trimmed, so a cursor stays meaningful across restarts and owners;
//! - [`AdminRecords::erase_player`] is one atomic operation: afterwards no stored record names
//!   the player (player record, party records, journal entries not yet in a snapshot, end-of-week
//!   and season-rank lists with their per-player indexes, waiting tickets, a ban, their match
//!   history list and past index); the match records other players' histories still hold
//!   (those the player's list holds, and those that left it, kept by their past index) and
//!   every result's acknowledgement name the erasure's marker in their place, and a record only
//!   the player's list held is dropped;
//! - like every other write, nothing is durable until a flush.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::event_clock::EventClock;
use super::history::{HistoryErasure, PastChanges};
use super::memory::Data;
use super::{JournalEntry, StoreError};
use crate::ids::{MatchId, PlayerId, TicketId};
use crate::ranking::RankPoints;
use crate::ranking::season::SeasonRank;

/// `[events]`: how long the event log keeps events.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EventsConfig {
    /// Events older than this are dropped (checked every minute); a watcher that was away
    /// longer resumes at the oldest event kept.
    pub retention_seconds: u64,
    /// At most this many events are kept (the oldest go first): bounds the disk, and in
    /// cluster mode the memory of each owner's mirror of Redis (~300 bytes per event).
    pub max_events: u64,
}

impl Default for EventsConfig {
    fn default() -> Self {
        Self {
            retention_seconds: 24 * 3600,
            max_events: 1_000_000,
        }
    }
}

impl EventsConfig {
    /// Checks the section, naming the key.
    pub fn validate(&self) -> Result<(), crate::rejection::FieldError> {
        if !(60..=366 * 24 * 3600).contains(&self.retention_seconds) {
            return Err(crate::rejection::FieldError::new(
                "events.retention_seconds",
                format!(
                    "must be in 60..=31622400 (one minute to a year; got {})",
                    self.retention_seconds
                ),
            ));
        }
        if !(1_000..=1_000_000_000).contains(&self.max_events) {
            return Err(crate::rejection::FieldError::new(
                "events.max_events",
                format!("must be in 1000..=1000000000 (got {})", self.max_events),
            ));
        }
        Ok(())
    }
}

/// `[audit]`: how long the admin audit log keeps its entries. Every `AdminService` call writes
/// one (an open console's polling included), so without a bound it would grow for good: on
/// disk, and in cluster mode in Redis and in each owner's memory (~250 bytes per entry).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AuditConfig {
    /// Entries older than this are dropped (checked every minute).
    pub retention_seconds: u64,
    /// At most this many entries are kept (the oldest go first).
    pub max_entries: u64,
}

impl Default for AuditConfig {
    fn default() -> Self {
        Self {
            retention_seconds: 90 * 24 * 3600,
            max_entries: 1_000_000,
        }
    }
}

impl AuditConfig {
    /// Checks the section, naming the key.
    pub fn validate(&self) -> Result<(), crate::rejection::FieldError> {
        if !(3600..=10 * 366 * 24 * 3600).contains(&self.retention_seconds) {
            return Err(crate::rejection::FieldError::new(
                "audit.retention_seconds",
                format!(
                    "must be in 3600..=316224000 (an hour to ten years; got {})",
                    self.retention_seconds
                ),
            ));
        }
        if !(1_000..=1_000_000_000).contains(&self.max_entries) {
            return Err(crate::rejection::FieldError::new(
                "audit.max_entries",
                format!("must be in 1000..=1000000000 (got {})", self.max_entries),
            ));
        }
        Ok(())
    }
}

/// A ban: EnterQueue refuses the player until `until_unix` (0: for good).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Ban {
    pub player: PlayerId,
    /// Unix seconds when the ban ends; 0 means never.
    pub until_unix: i64,
    pub reason: String,
    /// Unix seconds when it was set.
    pub since_unix: f64,
}

impl Ban {
    /// Whether the ban still holds at `now` (unix seconds).
    #[must_use]
    pub fn holds_at(&self, now: f64) -> bool {
        self.until_unix == 0 || (self.until_unix as f64) > now
    }
}

/// One admin call, as the audit log keeps it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AuditRecord {
    pub unix: f64,
    pub actor: String,
    pub action: String,
    pub detail: String,
}

/// What happened. Adding a kind is one variant here and one in the proto's `EventKind`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    MatchFormed,
    MatchAllocated,
    MatchStarted,
    MatchCompleted,
    MatchCancelled,
    RatingChanged,
    SeasonReset,
    PlayerDeleted,
    PlayerBanned,
    PlayerUnbanned,
    /// A kind a later release wrote: read, kept and passed on as unspecified, so a store that
    /// a newer node wrote to (a rolling upgrade, a rollback) still opens.
    #[serde(other)]
    Unknown,
}

/// One durable event.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EventRecord {
    pub kind: EventKind,
    pub unix: f64,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub match_id: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub player_id: String,
    /// A JSON object with the rest.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub detail_json: String,
}

/// The admin records every backend keeps. Grouped apart from the rest of [`super::Storage`] so
/// that later records (match history, parties) join the erasure in one place.
pub trait AdminRecords {
    // Bans.

    /// Writes a ban, replacing the player's previous one. Not durable until a flush.
    fn put_ban(&self, ban: &Ban) -> Result<(), StoreError>;
    /// Removes a player's ban; whether there was one.
    fn remove_ban(&self, player: &PlayerId) -> Result<bool, StoreError>;
    /// Every stored ban, in player order.
    fn load_bans(&self) -> Result<Vec<Ban>, StoreError>;

    // The audit log.

    /// Appends an audit entry; its sequence number (increasing, never reused).
    fn append_audit(&self, entry: &AuditRecord) -> Result<u64, StoreError>;
    /// Up to `limit` audit entries after sequence number `after`, oldest first.
    fn audit_after(&self, after: u64, limit: usize) -> Result<Vec<(u64, AuditRecord)>, StoreError>;
    /// The last audit sequence number handed out (0: none), kept when its entry is trimmed.
    fn last_audit(&self) -> Result<u64, StoreError>;

    // The event log.

    /// Appends events in one atomic batch; the cursor of the last one (the last cursor so far
    /// when `events` is empty). Cursors increase and are never reused.
    fn append_events(&self, events: &[EventRecord]) -> Result<u64, StoreError>;
    /// Up to `limit` events after cursor `after`, oldest first.
    fn events_after(&self, after: u64, limit: usize)
    -> Result<Vec<(u64, EventRecord)>, StoreError>;
    /// Up to `limit` events before cursor `before`, newest first.
    fn events_before(
        &self,
        before: u64,
        limit: usize,
    ) -> Result<Vec<(u64, EventRecord)>, StoreError>;
    /// Drops events older than `before_unix`, and the oldest beyond the newest `keep_at_most`;
    /// how many.
    fn trim_events(&self, before_unix: f64, keep_at_most: u64) -> Result<usize, StoreError>;
    /// The highest cursor retention dropped (0: none): a watcher resuming after an earlier
    /// cursor would miss events. Cursors 1, 2, 3, ... read it from the oldest kept; a store
    /// whose cursors have gaps ([`EventClock`]) records it.
    fn events_trimmed_through(&self) -> Result<u64, StoreError> {
        let last = self.append_events(&[])?;
        Ok(self
            .events_after(0, 1)?
            .first()
            .map_or(last, |(oldest, _)| oldest - 1))
    }
    /// The highest cursor that no event appended later takes (the last one given, for cursors
    /// 1, 2, 3, ...).
    fn events_closed(&self) -> Result<u64, StoreError> {
        self.append_events(&[])
    }
    /// Drops audit entries older than `before_unix`, and the oldest beyond the newest
    /// `keep_at_most`; how many.
    fn trim_audit(&self, before_unix: f64, keep_at_most: u64) -> Result<usize, StoreError>;

    /// Writes audit entries and events under their own sequence numbers (replacing any with
    /// the same number) and raises the last numbers handed out to the highest given, and to
    /// `last_audit` and `last_event` at least (the source's, whose last entries may have been
    /// trimmed), so numbers keep their meaning in the new store and none is handed out twice
    /// (`admin migrate-store`). Not durable until a flush.
    fn import_log(
        &self,
        audit: &[(u64, AuditRecord)],
        events: &[(u64, EventRecord)],
        last_audit: u64,
        last_event: u64,
    ) -> Result<(), StoreError>;

    // Erasure.

    /// Erases every stored record that names `player`, in one atomic operation (see the module
    /// documentation); records that stay for other players (journal entries, match records,
    /// result acknowledgements) name `marker` ([`crate::records::erased_marker`]) where they
    /// named the player. Not durable until a flush.
    fn erase_player(&self, player: &PlayerId, marker: &PlayerId) -> Result<(), StoreError>;
}

/// The admin records of the in-memory backend (and the Redis mirror).
#[derive(Default)]
pub(super) struct AdminData {
    pub(super) bans: BTreeMap<PlayerId, Ban>,
    pub(super) audit: BTreeMap<u64, AuditRecord>,
    pub(super) events: BTreeMap<u64, EventRecord>,
    /// The last sequence number handed out, kept past trimming.
    pub(super) last_audit: u64,
    pub(super) last_event: u64,
    /// The shard's event clock, when the queues are split over shards (cursors 1, 2, 3, ...
    /// otherwise).
    pub(super) clock: Option<EventClock>,
    /// The highest cursor trimming dropped, once recorded (see
    /// [`AdminRecords::events_trimmed_through`]).
    pub(super) trimmed_events: Option<u64>,
}

/// What one erasure changed in [`Data`], so the Redis backend can send the same changes.
#[derive(Default)]
pub(super) struct Erasure {
    pub(super) player_removed: bool,
    pub(super) parties_removed: Vec<String>,
    pub(super) journal_rewritten: Vec<u64>,
    pub(super) weeks_rewritten: Vec<(String, u32, u32)>,
    pub(super) ranks_rewritten: Vec<(String, u32)>,
    pub(super) tickets_removed: Vec<TicketId>,
    pub(super) ban_removed: bool,
    /// Result acknowledgements now naming the marker.
    pub(super) acks_rewritten: Vec<MatchId>,
    /// Events now naming the marker.
    pub(super) events_rewritten: Vec<u64>,
}

/// The fields of an event's detail that list players: a match event's `teams`.
const PLAYER_LISTS: &[&str] = &["teams"];

/// An event without `player`: the marker in their place, as the event's player and in the
/// player lists of its detail ([`PLAYER_LISTS`]); whether it named them. Nothing else in the detail changes, though it may equal the id: an id can be any
/// string, such as a queue's name.
pub(super) fn event_without(event: &mut EventRecord, player: &PlayerId, marker: &PlayerId) -> bool {
    /// The id's occurrences among the strings of `v`, an array of player ids or of teams.
    fn replace(v: &mut serde_json::Value, from: &str, to: &str) -> bool {
        match v {
            serde_json::Value::String(s) if s == from => {
                *s = to.to_owned();
                true
            }
            serde_json::Value::Array(a) => {
                a.iter_mut().fold(false, |c, x| replace(x, from, to) | c)
            }
            _ => false,
        }
    }
    fn replace_players(detail: &mut serde_json::Value, from: &str, to: &str) -> bool {
        let Some(fields) = detail.as_object_mut() else {
            return false;
        };
        PLAYER_LISTS.iter().fold(false, |c, key| {
            fields.get_mut(*key).is_some_and(|v| replace(v, from, to)) | c
        })
    }
    let mut changed = false;
    if event.player_id == player.as_str() {
        event.player_id = marker.to_string();
        changed = true;
    }
    // An id with a quote or a backslash is escaped inside the detail: parse it then.
    let escaped = player.as_str().contains(['"', '\\']);
    if (escaped || event.detail_json.contains(player.as_str()))
        && let Ok(mut detail) = serde_json::from_str::<serde_json::Value>(&event.detail_json)
        && replace_players(&mut detail, player.as_str(), marker.as_str())
    {
        event.detail_json = detail.to_string();
        changed = true;
    }
    changed
}

/// A journal entry without `player`: their records and parties gone, the marker in their place
/// in its acknowledgement and its history record; whether it named them.
pub(super) fn entry_without(
    entry: &mut JournalEntry,
    player: &PlayerId,
    marker: &PlayerId,
) -> bool {
    let before = entry.records.len() + entry.parties.len();
    entry.records.retain(|(p, _)| p != player);
    entry.parties.retain(|(k, _)| !party_names(k, player));
    let acked = entry.ack.erase(player, marker);
    let recorded = entry
        .history
        .as_mut()
        .is_some_and(|h| h.record.erase(player, marker));
    // A season reset's end-of-week rank points and an end of season's ranks name players too.
    let mut seasonal = false;
    if let Some(season) = entry.season.as_mut() {
        if let Some((_, _, rp)) = season.week_rp.as_mut()
            && let Some(kept) = week_without(rp, player)
        {
            *rp = kept;
            seasonal = true;
        }
        if let Some((_, ranks)) = season.ranks.as_mut()
            && let Some(kept) = ranks_without(ranks, player)
        {
            *ranks = kept;
            seasonal = true;
        }
    }
    entry.records.len() + entry.parties.len() != before || acked || recorded || seasonal
}

/// Whether a party key (member ids joined by U+001F) names `player`.
pub fn party_names(key: &str, player: &PlayerId) -> bool {
    key.split('\u{1f}').any(|m| m == player.as_str())
}

/// An end-of-week list without `player`, if it named them.
pub(super) fn week_without(
    rp: &[(PlayerId, RankPoints)],
    player: &PlayerId,
) -> Option<Vec<(PlayerId, RankPoints)>> {
    rp.iter()
        .any(|(p, _)| p == player)
        .then(|| rp.iter().filter(|(p, _)| p != player).cloned().collect())
}

/// A season-rank list without `player`, if it named them.
pub(super) fn ranks_without(ranks: &[SeasonRank], player: &PlayerId) -> Option<Vec<SeasonRank>> {
    ranks.iter().any(|r| r.player == player.as_str()).then(|| {
        ranks
            .iter()
            .filter(|r| r.player != player.as_str())
            .cloned()
            .collect()
    })
}

impl Data {
    /// Erases `player` from everything held here; what changed.
    pub(super) fn erase_player(&mut self, player: &PlayerId, marker: &PlayerId) -> Erasure {
        let mut e = Erasure {
            player_removed: self.players.remove(player).is_some(),
            ..Erasure::default()
        };
        e.parties_removed = self
            .parties
            .keys()
            .filter(|k| party_names(k, player))
            .cloned()
            .collect();
        for k in &e.parties_removed {
            self.parties.remove(k);
        }
        for (seq, entry) in self.journal.iter_mut() {
            if entry_without(entry, player, marker) {
                e.journal_rewritten.push(*seq);
            }
        }
        e.acks_rewritten = self.acks.erase(player, marker);
        for (seq, event) in self.admin.events.iter_mut() {
            if event_without(event, player, marker) {
                e.events_rewritten.push(*seq);
            }
        }
        if !self.history_off {
            self.erase_history(player, marker);
        }
        for (key, rp) in self.weeks.iter_mut() {
            if let Some(kept) = week_without(rp, player) {
                *rp = kept;
                e.weeks_rewritten.push(key.clone());
            }
        }
        self.player_weeks.retain(|(_, p, _, _), _| p != player);
        for (key, ranks) in self.ranks.iter_mut() {
            if let Some(kept) = ranks_without(ranks, player) {
                *ranks = kept;
                e.ranks_rewritten.push(key.clone());
            }
        }
        self.player_ranks
            .retain(|(_, p, _), _| p.as_str() != player.as_str());
        e.tickets_removed = self
            .tickets
            .values()
            .filter(|t| t.players.contains(player))
            .map(|t| t.ticket_id.clone())
            .collect();
        for id in &e.tickets_removed {
            self.tickets.remove(id);
        }
        e.ban_removed = self.admin.bans.remove(player).is_some();
        e
    }

    /// Erases `player` from the match history (see [`HistoryErasure`]).
    fn erase_history(&mut self, player: &PlayerId, marker: &PlayerId) {
        let list = self.history_lists.remove(player).unwrap_or_default();
        let past: Vec<MatchId> = self
            .history_past
            .remove(player)
            .map(|p| p.into_iter().collect())
            .unwrap_or_default();
        let (refs, records) = (&self.history_refs, &self.history_records);
        // Reading memory cannot fail.
        let plan = HistoryErasure::plan(
            player,
            marker,
            &list,
            &past,
            &mut |m| Ok(refs.get(m).copied().unwrap_or(0)),
            &mut |m| Ok(records.get(m).cloned()),
        )
        .unwrap_or_default();
        self.index_past(PastChanges {
            added: Vec::new(),
            removed: plan.unindexed,
        });
        for id in plan.dropped {
            self.history_refs.remove(&id);
            self.history_records.remove(&id);
        }
        self.history_refs.extend(plan.refs);
        for r in plan.rewritten {
            self.history_records.insert(r.match_id.clone(), r);
        }
    }

    /// Writes a log under its own numbers (see [`AdminRecords::import_log`]).
    pub(super) fn import_log(
        &mut self,
        audit: &[(u64, AuditRecord)],
        events: &[(u64, EventRecord)],
        last_audit: u64,
        last_event: u64,
    ) {
        let admin = &mut self.admin;
        for (seq, entry) in audit {
            admin.audit.insert(*seq, entry.clone());
            admin.last_audit = admin.last_audit.max(*seq);
        }
        for (seq, event) in events {
            admin.events.insert(*seq, event.clone());
            admin.last_event = admin.last_event.max(*seq);
        }
        admin.last_audit = admin.last_audit.max(last_audit);
        admin.last_event = admin.last_event.max(last_event);
    }

    /// Appends audit entries; their sequence numbers.
    pub(super) fn append_audit(&mut self, entry: &AuditRecord) -> u64 {
        self.admin.last_audit += 1;
        let seq = self.admin.last_audit;
        self.admin.audit.insert(seq, entry.clone());
        seq
    }

    /// Appends events at `now_ms` (the store's clock); the cursors given (the last one is
    /// `last_event` after this).
    pub(super) fn append_events(&mut self, events: &[EventRecord], now_ms: u64) -> Vec<u64> {
        if events.is_empty() {
            return Vec::new();
        }
        if self.admin.clock.is_some() && self.admin.trimmed_events.is_none() {
            // Cursors with gaps from here on: what was trimmed can no longer be read from the
            // oldest kept.
            self.admin.trimmed_events = Some(self.events_trimmed_through());
        }
        let mut cursors = Vec::with_capacity(events.len());
        for event in events {
            let last = self.admin.last_event;
            let seq = match &mut self.admin.clock {
                Some(clock) => clock.next(last, now_ms),
                None => last + 1,
            };
            self.admin.last_event = seq;
            self.admin.events.insert(seq, event.clone());
            cursors.push(seq);
        }
        cursors
    }

    /// See [`AdminRecords::events_trimmed_through`].
    pub(super) fn events_trimmed_through(&self) -> u64 {
        self.admin.trimmed_events.unwrap_or_else(|| {
            self.admin
                .events
                .keys()
                .next()
                .map_or(self.admin.last_event, |oldest| oldest - 1)
        })
    }

    /// See [`AdminRecords::events_closed`], at `now_ms` (the store's clock).
    pub(super) fn events_closed(&mut self, now_ms: u64) -> u64 {
        let last = self.admin.last_event;
        match &mut self.admin.clock {
            Some(clock) => clock.closed(last, now_ms),
            None => last,
        }
    }

    /// Events older than `before_unix` or beyond the newest `keep_at_most`, removed; their
    /// cursors. Events are appended in time order, so both are a prefix.
    pub(super) fn trim_events(&mut self, before_unix: f64, keep_at_most: u64) -> Vec<u64> {
        let excess = (self.admin.events.len() as u64).saturating_sub(keep_at_most);
        let old: Vec<u64> = self
            .admin
            .events
            .iter()
            .enumerate()
            .take_while(|(i, (_, e))| (*i as u64) < excess || e.unix < before_unix)
            .map(|(_, (s, _))| *s)
            .collect();
        for s in &old {
            self.admin.events.remove(s);
        }
        if let Some(&through) = old.last() {
            let before = self.events_trimmed_through();
            self.admin.trimmed_events = Some(through.max(before));
        }
        old
    }

    /// Audit entries older than `before_unix` or beyond the newest `keep_at_most`, removed;
    /// their sequence numbers. Entries are appended in time order, so both are a prefix.
    pub(super) fn trim_audit(&mut self, before_unix: f64, keep_at_most: u64) -> Vec<u64> {
        let floor = self.admin.last_audit.saturating_sub(keep_at_most);
        trim_prefix(&mut self.admin.audit, floor, before_unix, |a| a.unix)
    }
}

/// Removes the entries of a time-ordered log up to sequence `floor` or older than
/// `before_unix` (a prefix); their sequence numbers.
fn trim_prefix<T>(
    log: &mut BTreeMap<u64, T>,
    floor: u64,
    before_unix: f64,
    unix: impl Fn(&T) -> f64,
) -> Vec<u64> {
    let old: Vec<u64> = log
        .iter()
        .take_while(|(s, e)| **s <= floor || unix(e) < before_unix)
        .map(|(s, _)| *s)
        .collect();
    for s in &old {
        log.remove(s);
    }
    old
}

/// Up to `limit` values before `before` in a sequence-keyed map, newest first.
pub(super) fn page_back<T: Clone>(
    map: &BTreeMap<u64, T>,
    before: u64,
    limit: usize,
) -> Vec<(u64, T)> {
    map.range(..before)
        .rev()
        .take(limit)
        .map(|(s, v)| (*s, v.clone()))
        .collect()
}

/// Up to `limit` values after `after` in a sequence-keyed map.
pub(super) fn page<T: Clone>(map: &BTreeMap<u64, T>, after: u64, limit: usize) -> Vec<(u64, T)> {
    map.range(after.saturating_add(1)..)
        .take(limit)
        .map(|(s, v)| (*s, v.clone()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_of_a_kind_a_later_release_added_is_read_as_unknown() {
        let stored = br#"{"kind":"player_renamed","unix":5.0,"player_id":"p1"}"#;
        let event: EventRecord = serde_json::from_slice(stored).unwrap();
        assert_eq!(
            (event.kind, event.player_id.as_str()),
            (EventKind::Unknown, "p1")
        );
        let known: EventRecord =
            serde_json::from_slice(br#"{"kind":"match_formed","unix":1.0}"#).unwrap();
        assert_eq!(known.kind, EventKind::MatchFormed);
    }

    #[test]
    fn an_erased_player_leaves_a_season_entrys_week_points_and_ranks() {
        let rank = |player: &str| SeasonRank {
            player: player.into(),
            tier: "Gold".into(),
            rank_points: 1200,
            mean_week_rp: None,
            place: None,
        };
        let mut entry = crate::store::contract::entry("reset", "other", 1500.0);
        entry.season = Some(crate::store::SeasonWrite {
            state: Default::default(),
            week_rp: Some((1, 2, vec![("p1".into(), 900), ("other".into(), 700)])),
            ranks: Some((1, vec![rank("p1"), rank("other")])),
        });
        let (p1, marker) = (PlayerId::new("p1"), PlayerId::new("erased:x"));
        assert!(entry_without(&mut entry, &p1, &marker));
        let season = entry.season.as_ref().unwrap();
        assert_eq!(
            season.week_rp.as_ref().unwrap().2,
            vec![(PlayerId::new("other"), 700)]
        );
        let ranks = &season.ranks.as_ref().unwrap().1;
        assert_eq!(ranks.len(), 1);
        assert_eq!(ranks[0].player, "other");
        assert!(!entry_without(&mut entry, &p1, &marker), "nothing left");
    }

    #[test]
    fn an_erasure_rewrites_a_match_events_teams_and_nothing_else_equal_to_the_id() {
        // A player whose id is also a queue's name.
        let mut event = EventRecord {
            kind: EventKind::MatchCompleted,
            unix: 1.0,
            match_id: "m1".into(),
            player_id: String::new(),
            detail_json: serde_json::json!({
                "queue": "1v1",
                "teams": [["1v1"], ["b"]],
                "reason": "1v1",
            })
            .to_string(),
        };
        let (player, marker) = (PlayerId::new("1v1"), PlayerId::new("erased:y"));
        assert!(event_without(&mut event, &player, &marker));
        let detail: serde_json::Value = serde_json::from_str(&event.detail_json).unwrap();
        assert_eq!(
            detail,
            serde_json::json!({
                "queue": "1v1",
                "teams": [["erased:y"], ["b"]],
                "reason": "1v1",
            })
        );
    }
}

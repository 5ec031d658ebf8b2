//! A backend in memory: the same contract as the embedded store without a disk (a flush makes
//! nothing more durable). It proves that the state needs nothing of sled and that the contract
//! tests say what a backend must do, and it is the Redis backend's mirror that answers reads.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Mutex;

use super::history::{HistoryPlan, PastChanges};
use super::{
    AckRecord, EntryKind, History, HistoryWrite, JournalEntry, RecordStorage, Segment, Storage,
    StoreError, StoreFuture, StoredMatch, StoredParty, StoredPlayer, StoredTicket,
};
use crate::ids::{MatchId, PartyId, PlayerId, TicketId};
use crate::ranking::RankPoints;
use crate::ranking::season::{SeasonRank, SeasonState};
use crate::rating::calibration::Calibration;
use crate::records::{MatchRecord, PartyRecord, PartyRoster, PoolRecord, ResultAck};

/// A player's records in every rating pool as the in-memory stores keep them: sorted by pool
/// name, in one allocation. A `BTreeMap` allocates a whole node (about 1.4 KB) for a player's
/// one record, which made a million players' mirror 1.4 GB. Written as a JSON map, like the
/// `BTreeMap` it stands for.
#[derive(Clone, Debug, Default, PartialEq)]
pub(super) struct Pools(Vec<(String, PoolRecord)>);

impl Pools {
    pub(super) fn from_map(map: BTreeMap<String, PoolRecord>) -> Self {
        // A map's entries come out sorted, and as many as it holds: one exact allocation.
        Self(map.into_iter().collect())
    }

    pub(super) fn copy_of(map: &BTreeMap<String, PoolRecord>) -> Self {
        Self(map.iter().map(|(p, r)| (p.clone(), r.clone())).collect())
    }

    pub(super) fn to_map(&self) -> BTreeMap<String, PoolRecord> {
        self.0.iter().cloned().collect()
    }

    /// Sets the record in `pool`.
    pub(super) fn insert(&mut self, pool: String, record: PoolRecord) {
        match self.0.binary_search_by(|(p, _)| p.cmp(&pool)) {
            Ok(i) => self.0[i].1 = record,
            Err(i) => self.0.insert(i, (pool, record)),
        }
    }

    /// Whether these are exactly the records of `map`.
    pub(super) fn same_as(&self, map: &BTreeMap<String, PoolRecord>) -> bool {
        self.0.len() == map.len()
            && self
                .0
                .iter()
                .zip(map)
                .all(|((p, r), (q, s))| p == q && r == s)
    }
}

impl serde::Serialize for Pools {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for (pool, record) in &self.0 {
            map.serialize_entry(pool, record)?;
        }
        map.end()
    }
}

/// Everything the store holds, under one lock.
#[derive(Default)]
pub(super) struct Data {
    pub(super) players: BTreeMap<PlayerId, Pools>,
    pub(super) parties: BTreeMap<String, BTreeMap<String, PartyRecord>>,
    pub(super) journal: BTreeMap<u64, JournalEntry>,
    pub(super) acks: super::acks::Acks,
    pub(super) snapshot_seq: u64,
    pub(super) seasons: BTreeMap<String, SeasonState>,
    /// (pool, season, week) → end-of-week RP.
    pub(super) weeks: BTreeMap<(String, u32, u32), Vec<(PlayerId, RankPoints)>>,
    /// (pool, player, season, week) → RP.
    pub(super) player_weeks: BTreeMap<(String, PlayerId, u32, u32), RankPoints>,
    /// (pool, season) → ranks.
    pub(super) ranks: BTreeMap<(String, u32), Vec<SeasonRank>>,
    /// (pool, player, season) → rank.
    pub(super) player_ranks: BTreeMap<(String, String, u32), SeasonRank>,
    pub(super) segments: BTreeMap<u64, Vec<StoredMatch>>,
    pub(super) ended: HashSet<MatchId>,
    pub(super) calibrations: BTreeMap<String, Calibration>,
    pub(super) tickets: BTreeMap<TicketId, StoredTicket>,
    // --- Records ---
    pub(super) rosters: BTreeMap<PartyId, PartyRoster>,
    /// Set on the Redis store's mirror: the match history stays in Redis (it is read from
    /// there), so the mirror does not hold it in memory.
    pub(super) history_off: bool,
    /// Audit writes fail as a cluster store's do once another node holds the lease.
    #[cfg(test)]
    pub(super) audit_fenced: bool,
    /// Flushes fail, as a broken disk's or a fenced cluster store's do.
    #[cfg(test)]
    pub(super) flushes_fail: Option<FlushFailure>,
    /// Writes that fail, as a broken disk's do.
    #[cfg(test)]
    pub(super) writes_fail: HashSet<FailingWrite>,
    /// Per player, the history's match ids, most recently ended first.
    pub(super) history_lists: HashMap<PlayerId, Vec<MatchId>>,
    /// Per record, how many lists hold it.
    pub(super) history_refs: HashMap<MatchId, u32>,
    pub(super) history_records: HashMap<MatchId, MatchRecord>,
    /// Per player, the stored records that left their list while other lists held them (see
    /// `history.rs`).
    pub(super) history_past: HashMap<PlayerId, BTreeSet<MatchId>>,
    pub(super) admin: super::admin_records::AdminData,
    /// The Redis store's mirror: the last accepted reload's queue settings.
    pub(super) reloaded: Option<super::ReloadedQueues>,
}

impl Data {
    /// Adds history writes (see [`Storage::append_history`]).
    fn append_history<'a>(&mut self, writes: impl IntoIterator<Item = &'a HistoryWrite>) {
        if self.history_off {
            return;
        }
        let mut plan = HistoryPlan::default();
        for w in writes {
            let (lists, refs) = (&self.history_lists, &self.history_refs);
            plan.add(
                w,
                &mut |p| Ok(lists.get(p).cloned().unwrap_or_default()),
                &mut |m| Ok(refs.get(m).copied().unwrap_or(0)),
            )
            .expect("memory reads do not fail");
        }
        if plan.is_empty() {
            return;
        }
        let dropped: Vec<MatchId> = plan.dropped().cloned().collect();
        let records = &self.history_records;
        let past = plan
            .past(&mut |m| Ok(records.get(m).cloned()))
            .expect("memory reads do not fail");
        self.index_past(past);
        for r in plan.records {
            self.history_records.insert(r.match_id.clone(), r);
        }
        self.history_lists.extend(plan.lists);
        self.history_refs.extend(plan.refs);
        for d in dropped {
            self.history_refs.remove(&d);
            self.history_records.remove(&d);
        }
    }
}

impl Data {
    /// Applies changes to the past indexes (an emptied index goes).
    pub(super) fn index_past(&mut self, changes: PastChanges) {
        for (player, id) in changes.added {
            self.history_past.entry(player).or_default().insert(id);
        }
        for (player, id) in changes.removed {
            if let Some(past) = self.history_past.get_mut(&player) {
                past.remove(&id);
                if past.is_empty() {
                    self.history_past.remove(&player);
                }
            }
        }
    }
}

/// How a test makes flushes fail.
#[cfg(test)]
#[derive(Clone, Copy, Debug)]
pub(crate) enum FlushFailure {
    /// As a disk that cannot write.
    Disk,
    /// As a cluster store once another node holds the lease.
    Fenced,
}

#[cfg(test)]
impl FlushFailure {
    fn error(self) -> StoreError {
        match self {
            Self::Disk => StoreError::Io {
                path: "memory".into(),
                source: std::io::Error::other("flush fails (test)"),
            },
            Self::Fenced => StoreError::Fenced,
        }
    }
}

/// Which writes a test makes fail ([`MemoryStore::fail_writes`]).
#[cfg(test)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum FailingWrite {
    /// Live-match segments ([`Storage::put_segments`]).
    Matches,
    /// Removals of party rosters (an expired party's end).
    RosterRemovals,
    /// Events, alone or with journal entries: the batch fails whole, as the embedded and the
    /// cluster stores' do.
    Events,
}

/// Runs at the end of the next erasure (tests: something written after a store's erasure
/// read what to erase, before it returned).
#[cfg(test)]
type OnErase = Mutex<Option<Box<dyn FnOnce() + Send>>>;

/// The in-memory backend.
#[derive(Default)]
pub struct MemoryStore(
    Mutex<Data>,
    std::sync::atomic::AtomicBool,
    #[cfg(test)] OnErase,
);

impl MemoryStore {
    /// The Redis store's mirror: everything but the match history, which Redis answers.
    pub(super) fn mirror() -> Self {
        let store = Self::default();
        store.data().history_off = true;
        store
    }

    /// Runs `f` at the end of the next erasure, once the store has erased what it found.
    #[cfg(test)]
    pub fn on_next_erase(&self, f: impl FnOnce() + Send + 'static) {
        *self.2.lock().unwrap_or_else(|p| p.into_inner()) = Some(Box::new(f));
    }

    /// From now on every journal write fails, as a full or broken disk would.
    pub fn fail_journal_writes(&self) {
        self.1.store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// From now on audit entries are refused as a fenced cluster store refuses writes.
    #[cfg(test)]
    pub(crate) fn fence_audit_writes(&self) {
        self.data().audit_fenced = true;
    }

    /// Numbers events from now on as shard number `shard` of a cluster split over shards does.
    #[cfg(test)]
    pub(crate) fn number_events_as_shard(&self, shard: usize) {
        let mut data = self.data();
        let last = data.admin.last_event;
        data.admin.clock = Some(super::event_clock::EventClock::new(
            shard,
            super::event_clock::now_ms(),
            last,
        ));
    }

    /// From now on every flush fails as `how` says (`None`: flushes work again).
    #[cfg(test)]
    pub(crate) fn fail_flushes(&self, how: Option<FlushFailure>) {
        self.data().flushes_fail = how;
    }

    /// From now on the writes of `what` fail (or work again, when `fail` is false).
    #[cfg(test)]
    pub(crate) fn fail_writes(&self, what: FailingWrite, fail: bool) {
        let writes = &mut self.data().writes_fail;
        if fail {
            writes.insert(what);
        } else {
            writes.remove(&what);
        }
    }

    /// Refuses a write of `what` that a test made fail.
    #[cfg(test)]
    fn refuse(&self, what: FailingWrite) -> Result<(), StoreError> {
        if self.data().writes_fail.contains(&what) {
            return Err(StoreError::Io {
                path: "memory".into(),
                source: std::io::Error::other(format!("{what:?} writes fail (test)")),
            });
        }
        Ok(())
    }

    /// From now on every write of live matches fails as a broken disk's would (`false`: they
    /// work again).
    #[cfg(test)]
    pub(crate) fn fail_segment_writes(&self, fail: bool) {
        self.fail_writes(FailingWrite::Matches, fail);
    }

    /// Matches marked as ended, and live-match segments, stored now.
    #[cfg(test)]
    pub(crate) fn marks_and_segments(&self) -> (usize, usize) {
        let data = self.data();
        (data.ended.len(), data.segments.len())
    }

    pub(super) fn data(&self) -> std::sync::MutexGuard<'_, Data> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl super::AdminRecords for MemoryStore {
    fn put_ban(&self, ban: &super::Ban) -> Result<(), StoreError> {
        self.data()
            .admin
            .bans
            .insert(ban.player.clone(), ban.clone());
        Ok(())
    }

    fn remove_ban(&self, player: &PlayerId) -> Result<bool, StoreError> {
        Ok(self.data().admin.bans.remove(player).is_some())
    }

    fn load_bans(&self) -> Result<Vec<super::Ban>, StoreError> {
        Ok(self.data().admin.bans.values().cloned().collect())
    }

    fn append_audit(&self, entry: &super::AuditRecord) -> Result<u64, StoreError> {
        #[cfg(test)]
        if self.data().audit_fenced {
            return Err(StoreError::Fenced);
        }
        Ok(self.data().append_audit(entry))
    }

    fn last_audit(&self) -> Result<u64, StoreError> {
        Ok(self.data().admin.last_audit)
    }

    fn audit_after(
        &self,
        after: u64,
        limit: usize,
    ) -> Result<Vec<(u64, super::AuditRecord)>, StoreError> {
        Ok(super::admin_records::page(
            &self.data().admin.audit,
            after,
            limit,
        ))
    }

    fn append_events(&self, events: &[super::EventRecord]) -> Result<u64, StoreError> {
        #[cfg(test)]
        if !events.is_empty() {
            self.refuse(FailingWrite::Events)?;
        }
        let mut data = self.data();
        data.append_events(events, super::event_clock::now_ms());
        Ok(data.admin.last_event)
    }

    fn events_after(
        &self,
        after: u64,
        limit: usize,
    ) -> Result<Vec<(u64, super::EventRecord)>, StoreError> {
        Ok(super::admin_records::page(
            &self.data().admin.events,
            after,
            limit,
        ))
    }

    fn trim_events(&self, before_unix: f64, keep_at_most: u64) -> Result<usize, StoreError> {
        Ok(self.data().trim_events(before_unix, keep_at_most).len())
    }

    fn events_before(
        &self,
        before: u64,
        limit: usize,
    ) -> Result<Vec<(u64, super::EventRecord)>, StoreError> {
        Ok(super::admin_records::page_back(
            &self.data().admin.events,
            before,
            limit,
        ))
    }

    fn events_trimmed_through(&self) -> Result<u64, StoreError> {
        Ok(self.data().events_trimmed_through())
    }

    fn events_closed(&self) -> Result<u64, StoreError> {
        Ok(self.data().events_closed(super::event_clock::now_ms()))
    }

    fn trim_audit(&self, before_unix: f64, keep_at_most: u64) -> Result<usize, StoreError> {
        Ok(self.data().trim_audit(before_unix, keep_at_most).len())
    }

    fn import_log(
        &self,
        audit: &[(u64, super::AuditRecord)],
        events: &[(u64, super::EventRecord)],
        last_audit: u64,
        last_event: u64,
    ) -> Result<(), StoreError> {
        self.data()
            .import_log(audit, events, last_audit, last_event);
        Ok(())
    }

    fn erase_player(&self, player: &PlayerId, marker: &PlayerId) -> Result<(), StoreError> {
        self.data().erase_player(player, marker);
        #[cfg(test)]
        if let Some(during) = self.2.lock().unwrap_or_else(|p| p.into_inner()).take() {
            during();
        }
        Ok(())
    }
}

fn decode_segment(matches: &[Vec<u8>]) -> Result<Vec<StoredMatch>, StoreError> {
    matches
        .iter()
        .map(|m| {
            serde_json::from_slice(m).map_err(|e| StoreError::Decode {
                key: "segment".into(),
                detail: e.to_string(),
            })
        })
        .collect()
}

impl Storage for MemoryStore {
    fn location(&self) -> String {
        "memory".into()
    }

    fn load_players(&self) -> Result<Box<dyn Iterator<Item = StoredPlayer> + '_>, StoreError> {
        let players: Vec<StoredPlayer> = self
            .data()
            .players
            .iter()
            .map(|(id, pools)| Ok((id.clone(), pools.to_map())))
            .collect();
        Ok(Box::new(players.into_iter()))
    }

    fn visit_players(&self, visit: &mut super::PlayerVisit<'_>) -> Result<(), StoreError> {
        for (id, pools) in &self.data().players {
            visit(id, &pools.0);
        }
        Ok(())
    }

    fn put_players(
        &self,
        records: &[(&PlayerId, &BTreeMap<String, PoolRecord>)],
    ) -> Result<(), StoreError> {
        let mut data = self.data();
        for (id, pools) in records {
            data.players.insert((*id).clone(), Pools::copy_of(pools));
        }
        Ok(())
    }

    fn player_count(&self) -> usize {
        self.data().players.len()
    }

    fn load_parties(&self) -> Result<Vec<StoredParty>, StoreError> {
        Ok(self
            .data()
            .parties
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect())
    }

    fn put_parties(
        &self,
        records: &[(&str, &BTreeMap<String, PartyRecord>)],
    ) -> Result<(), StoreError> {
        let mut data = self.data();
        for (key, pools) in records {
            data.parties.insert((*key).to_string(), (*pools).clone());
        }
        Ok(())
    }

    fn append_journal_with_events(
        &self,
        first_seq: u64,
        entries: &[JournalEntry],
        events: &[super::EventRecord],
    ) -> Result<u64, StoreError> {
        // One batch: an event write that fails writes no entry either.
        #[cfg(test)]
        if !events.is_empty() {
            self.refuse(FailingWrite::Events)?;
        }
        self.append_journal(first_seq, entries)?;
        super::AdminRecords::append_events(self, events)
    }

    fn append_journal(&self, first_seq: u64, entries: &[JournalEntry]) -> Result<(), StoreError> {
        if self.1.load(std::sync::atomic::Ordering::Relaxed) {
            return Err(StoreError::Io {
                path: "memory".into(),
                source: std::io::Error::other("journal writes fail (test)"),
            });
        }
        let mut data = self.data();
        for (i, entry) in entries.iter().enumerate() {
            data.journal.insert(first_seq + i as u64, entry.clone());
            if entry.kind == EntryKind::Result {
                let record = AckRecord::of_entry(entry);
                data.acks.insert(entry.match_id.clone(), record);
            }
            data.append_history(entry.history.as_ref());
            let Some(season) = &entry.season else {
                continue;
            };
            let pool = entry.pool.clone();
            data.seasons.insert(pool.clone(), season.state);
            if let Some((n, week, rp)) = &season.week_rp {
                data.weeks.insert((pool.clone(), *n, *week), rp.clone());
                for (player, points) in rp {
                    data.player_weeks
                        .insert((pool.clone(), player.clone(), *n, *week), *points);
                }
            }
            if let Some((n, ranks)) = &season.ranks {
                data.ranks.insert((pool.clone(), *n), ranks.clone());
                for rank in ranks {
                    data.player_ranks
                        .insert((pool.clone(), rank.player.clone(), *n), rank.clone());
                }
            }
        }
        Ok(())
    }

    fn journal_after(
        &self,
        seq: u64,
    ) -> Box<dyn Iterator<Item = Result<(u64, JournalEntry), StoreError>> + '_> {
        let entries: Vec<_> = self
            .data()
            .journal
            .range(seq.saturating_add(1)..)
            .map(|(s, e)| Ok((*s, e.clone())))
            .collect();
        Box::new(entries.into_iter())
    }

    fn last_seq(&self) -> Result<u64, StoreError> {
        let data = self.data();
        let last = data.journal.keys().next_back().copied().unwrap_or(0);
        Ok(last.max(data.snapshot_seq))
    }

    fn snapshot_seq(&self) -> Result<u64, StoreError> {
        Ok(self.data().snapshot_seq)
    }

    fn finish_snapshot(&self, seq: u64) -> Result<(), StoreError> {
        let mut data = self.data();
        data.snapshot_seq = seq;
        data.journal.retain(|&s, _| s > seq);
        Ok(())
    }

    fn result_of(&self, match_id: &MatchId) -> Result<Option<ResultAck>, StoreError> {
        Ok(self.data().acks.get(match_id).map(|r| r.ack.clone()))
    }

    fn trim_acks(&self, before_unix: f64, at_most: usize) -> Result<usize, StoreError> {
        Ok(self.data().acks.trim(before_unix, at_most).len())
    }

    fn season_state(&self, pool: &str) -> Result<SeasonState, StoreError> {
        Ok(self.data().seasons.get(pool).copied().unwrap_or_default())
    }

    fn week_rp(
        &self,
        pool: &str,
        season: u32,
    ) -> Result<Vec<Vec<(PlayerId, RankPoints)>>, StoreError> {
        Ok(self
            .data()
            .weeks
            .iter()
            .filter(|((p, s, _), _)| p == pool && *s == season)
            .map(|(_, rp)| rp.clone())
            .collect())
    }

    fn player_weeks(
        &self,
        pool: &str,
        player: &PlayerId,
    ) -> Result<Vec<(u32, u32, RankPoints)>, StoreError> {
        Ok(self
            .data()
            .player_weeks
            .iter()
            .filter(|((p, id, _, _), _)| p == pool && id == player)
            .map(|((_, _, season, week), rp)| (*season, *week, *rp))
            .collect())
    }

    fn player_season_ranks(
        &self,
        pool: &str,
        player: &PlayerId,
    ) -> Result<Vec<(u32, SeasonRank)>, StoreError> {
        Ok(self
            .data()
            .player_ranks
            .iter()
            .filter(|((p, id, _), _)| p == pool && id == player.as_str())
            .map(|((_, _, season), rank)| (*season, rank.clone()))
            .collect())
    }

    fn season_ranks(&self, pool: &str, season: u32) -> Result<Option<Vec<SeasonRank>>, StoreError> {
        Ok(self.data().ranks.get(&(pool.to_string(), season)).cloned())
    }

    fn put_calibrations(&self, states: &[(&str, &Calibration)]) -> Result<(), StoreError> {
        let mut data = self.data();
        for (pool, state) in states {
            data.calibrations.insert((*pool).to_string(), **state);
        }
        Ok(())
    }

    fn load_calibrations(&self) -> Result<Vec<(String, Calibration)>, StoreError> {
        Ok(self
            .data()
            .calibrations
            .iter()
            .map(|(k, v)| (k.clone(), *v))
            .collect())
    }

    fn put_segments(&self, segments: &[Segment<'_>], dropped: &[u64]) -> Result<(), StoreError> {
        // A fenced cluster store refuses every write once a flush was refused.
        #[cfg(test)]
        if matches!(self.data().flushes_fail, Some(FlushFailure::Fenced)) {
            return Err(StoreError::Fenced);
        }
        #[cfg(test)]
        self.refuse(FailingWrite::Matches)?;
        let decoded: Vec<(u64, Vec<StoredMatch>)> = segments
            .iter()
            .map(|(id, m)| Ok((*id, decode_segment(m)?)))
            .collect::<Result<_, StoreError>>()?;
        let mut data = self.data();
        data.segments.extend(decoded);
        for d in dropped {
            data.segments.remove(d);
        }
        Ok(())
    }

    fn end_matches(&self, ended: &[MatchId], dropped: &[u64]) -> Result<(), StoreError> {
        let mut data = self.data();
        data.ended.extend(ended.iter().cloned());
        for d in dropped {
            data.segments.remove(d);
        }
        Ok(())
    }

    fn load_matches(&self) -> Result<(Vec<StoredMatch>, u64), StoreError> {
        let data = self.data();
        let mut newest: BTreeMap<MatchId, StoredMatch> = BTreeMap::new();
        for matches in data.segments.values() {
            for m in matches {
                newest.insert(m.match_id.clone(), m.clone());
            }
        }
        let mut live: Vec<StoredMatch> = newest
            .into_values()
            .filter(|m| !data.ended.contains(&m.match_id))
            .collect();
        live.sort_by(|a, b| a.formed_unix.total_cmp(&b.formed_unix));
        let last = data.segments.keys().next_back().copied().unwrap_or(0);
        Ok((live, last))
    }

    fn compact_matches(&self, segments: &[Segment<'_>]) -> Result<(), StoreError> {
        let decoded: Vec<(u64, Vec<StoredMatch>)> = segments
            .iter()
            .map(|(id, m)| Ok((*id, decode_segment(m)?)))
            .collect::<Result<_, StoreError>>()?;
        let mut data = self.data();
        data.segments = decoded.into_iter().collect();
        data.ended.clear();
        Ok(())
    }

    fn keeps_tickets(&self) -> bool {
        true
    }

    fn put_ticket(&self, ticket: &StoredTicket) -> Result<(), StoreError> {
        self.data()
            .tickets
            .insert(ticket.ticket_id.clone(), ticket.clone());
        Ok(())
    }

    fn remove_tickets(&self, ids: &[TicketId]) -> Result<(), StoreError> {
        let mut data = self.data();
        for id in ids {
            data.tickets.remove(id);
        }
        Ok(())
    }

    fn load_tickets(&self) -> Result<Vec<StoredTicket>, StoreError> {
        let mut tickets: Vec<StoredTicket> = self.data().tickets.values().cloned().collect();
        tickets.sort_by(|a, b| a.entered_unix.total_cmp(&b.entered_unix));
        Ok(tickets)
    }

    fn export_history(&self) -> Result<History, StoreError> {
        let data = self.data();
        let mut results: Vec<(MatchId, AckRecord)> = data
            .acks
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        results.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(History {
            results,
            seasons: data.seasons.iter().map(|(k, v)| (k.clone(), *v)).collect(),
            weeks: data
                .weeks
                .iter()
                .map(|((pool, season, week), rp)| (pool.clone(), *season, *week, rp.clone()))
                .collect(),
            ranks: data
                .ranks
                .iter()
                .map(|((pool, season), ranks)| (pool.clone(), *season, ranks.clone()))
                .collect(),
        })
    }

    fn import_history(&self, history: &History) -> Result<(), StoreError> {
        let mut data = self.data();
        for (match_id, record) in &history.results {
            data.acks.insert(match_id.clone(), record.clone());
        }
        for (pool, state) in &history.seasons {
            data.seasons.insert(pool.clone(), *state);
        }
        for (pool, season, week, rp) in &history.weeks {
            data.weeks
                .insert((pool.clone(), *season, *week), rp.clone());
            for (player, points) in rp {
                data.player_weeks
                    .insert((pool.clone(), player.clone(), *season, *week), *points);
            }
        }
        for (pool, season, ranks) in &history.ranks {
            data.ranks.insert((pool.clone(), *season), ranks.clone());
            for rank in ranks {
                data.player_ranks.insert(
                    (pool.clone(), rank.player.to_string(), *season),
                    rank.clone(),
                );
            }
        }
        Ok(())
    }

    fn flush(&self) -> Result<(), StoreError> {
        #[cfg(test)]
        if let Some(how) = self.data().flushes_fail {
            return Err(how.error());
        }
        Ok(())
    }

    fn flush_async(&self) -> StoreFuture<'_, ()> {
        let flushed = self.flush();
        Box::pin(async { flushed })
    }

    fn size_on_disk(&self) -> u64 {
        0
    }
}

impl RecordStorage for MemoryStore {
    fn append_history(&self, writes: &[HistoryWrite]) -> Result<(), StoreError> {
        self.data().append_history(writes);
        Ok(())
    }

    fn match_record<'a>(&'a self, id: &'a MatchId) -> StoreFuture<'a, Option<MatchRecord>> {
        let found = self.data().history_records.get(id).cloned();
        Box::pin(std::future::ready(Ok(found)))
    }

    fn player_matches<'a>(&'a self, player: &'a PlayerId) -> StoreFuture<'a, Vec<MatchId>> {
        let ids = self
            .data()
            .history_lists
            .get(player)
            .cloned()
            .unwrap_or_default();
        Box::pin(std::future::ready(Ok(ids)))
    }

    fn past_matches<'a>(&'a self, player: &'a PlayerId) -> StoreFuture<'a, Vec<MatchId>> {
        let ids = self
            .data()
            .history_past
            .get(player)
            .map(|p| p.iter().cloned().collect())
            .unwrap_or_default();
        Box::pin(std::future::ready(Ok(ids)))
    }

    fn match_records<'a>(&'a self, ids: &'a [MatchId]) -> StoreFuture<'a, Vec<MatchRecord>> {
        let data = self.data();
        let found = ids
            .iter()
            .filter_map(|id| data.history_records.get(id).cloned())
            .collect();
        Box::pin(std::future::ready(Ok(found)))
    }

    fn put_rosters(&self, rosters: &[&PartyRoster]) -> Result<(), StoreError> {
        let mut data = self.data();
        for r in rosters {
            data.rosters.insert(r.party_id.clone(), (*r).clone());
        }
        Ok(())
    }

    fn remove_rosters(&self, ids: &[PartyId]) -> Result<(), StoreError> {
        #[cfg(test)]
        self.refuse(FailingWrite::RosterRemovals)?;
        let mut data = self.data();
        for id in ids {
            data.rosters.remove(id);
        }
        Ok(())
    }

    fn load_rosters(&self) -> Result<Vec<PartyRoster>, StoreError> {
        Ok(self.data().rosters.values().cloned().collect())
    }

    fn history_players(&self) -> Result<Vec<PlayerId>, StoreError> {
        let mut players: Vec<PlayerId> = self.data().history_lists.keys().cloned().collect();
        players.sort();
        Ok(players)
    }

    fn import_match_history(
        &self,
        lists: &[(PlayerId, Vec<MatchId>)],
        past: &[(PlayerId, Vec<MatchId>)],
        records: &[(MatchRecord, u32)],
    ) -> Result<(), StoreError> {
        let mut data = self.data();
        for (player, list) in lists {
            data.history_lists.insert(player.clone(), list.clone());
        }
        for (player, ids) in past {
            if ids.is_empty() {
                data.history_past.remove(player);
            } else {
                let ids = ids.iter().cloned().collect();
                data.history_past.insert(player.clone(), ids);
            }
        }
        for (record, holders) in records {
            data.history_refs.insert(record.match_id.clone(), *holders);
            data.history_records
                .insert(record.match_id.clone(), record.clone());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::contract::record;

    #[test]
    fn pools_keep_a_maps_order_and_are_written_as_the_same_json() {
        let mut map = record(1500.0);
        let one = map["1v1"].clone();
        map.insert("5v5".into(), record(1600.0)["1v1"].clone());
        let mut pools = Pools::copy_of(&map);
        assert!(pools.same_as(&map));
        assert_eq!(
            serde_json::to_string(&pools).unwrap(),
            serde_json::to_string(&map).unwrap()
        );
        // A pool sorted between the two, and one replaced.
        pools.insert("2v2".into(), one.clone());
        map.insert("2v2".into(), one.clone());
        pools.insert("5v5".into(), one.clone());
        map.insert("5v5".into(), one);
        assert_eq!(pools.to_map(), map);
        assert!(pools.same_as(&map));
        assert_eq!(
            serde_json::to_string(&pools).unwrap(),
            serde_json::to_string(&map).unwrap()
        );
        map.remove("2v2");
        assert!(!pools.same_as(&map));
        assert_eq!(Pools::from_map(map.clone()).to_map(), map);
    }
}

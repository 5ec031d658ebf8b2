//! Stored live matches of queues this node's config does not have: a release that renamed or
//! dropped a queue, or one node started with another config. They are not restored (their
//! queue's rules and rating pool are unknown here), but they stay in the store, so a config
//! that has the queue again restores them at its next start (or on the next owner of a
//! cluster's queues). They stay until `server.match_timeout_seconds` has passed since they
//! formed (the timeout would have cancelled them by then), and are then dropped with a warning:
//! at start, and at the compaction that goes with each snapshot.
//!
//! They sit in segments of their own, which no live match shares, rewritten with every
//! compaction of the live matches. So they keep no completed match's copy in the store, and
//! none has a result here (a result of one finds no match), which is why the trim of the
//! results' acknowledgements does not wait for them ([`State::oldest_live_formed_unix`]).
//! Erasing a player drops the ones naming them.
//!
//! Their players are free while they are kept: they may enter other queues and be matched
//! again. So each is marked with when it was first kept (`kept_unix`), and a restore cancels
//! one whose players have a newer claim (another live match, a waiting ticket, a match kept
//! since later) instead of restoring it: a player is never in two live matches, nor in one
//! and queued (`superseded.rs`).
//!
//! Waiting tickets of such queues stay stored the same way, unrestored, until they have waited
//! longer than any queue of this config lets a ticket wait (its first tick would expire it).

use std::collections::BTreeMap;
use std::ops::Range;

use super::State;
use super::segments::Segments;
use crate::ids::{PlayerId, QueueId, TicketId};
use crate::store::{Segment, StoreError, StoredMatch, StoredTicket};

/// What a kept match is looked at for.
#[derive(Clone, Debug)]
struct Info {
    queue: String,
    formed_unix: f64,
    players: Vec<PlayerId>,
}

/// The kept matches, encoded, and the store's segments holding them.
#[derive(Clone, Debug, Default)]
pub struct Kept {
    info: Vec<Info>,
    encoded: Vec<Vec<u8>>,
    /// Segment id and the range of `encoded` it holds.
    segments: Vec<(u64, Range<usize>)>,
}

impl Kept {
    /// Matches kept.
    pub fn len(&self) -> usize {
        self.info.len()
    }

    fn push(&mut self, m: &StoredMatch) -> Result<(), StoreError> {
        let roles = m.roles.keys();
        let tickets = m.tickets.iter().flat_map(|(_, players)| players);
        let players = m.teams.iter().chain(&m.backfill).flatten();
        self.info.push(Info {
            queue: m.queue.clone(),
            formed_unix: m.formed_unix,
            players: players
                .chain(&m.left)
                .chain(roles)
                .chain(tickets)
                .cloned()
                .collect(),
        });
        self.encoded.push(crate::store::encode_match(m)?);
        Ok(())
    }

    /// The segments to write.
    pub fn segments(&self) -> Vec<Segment<'_>> {
        self.segments
            .iter()
            .map(|(id, range)| (*id, &self.encoded[range.clone()]))
            .collect()
    }

    /// The ids of the segments holding them now.
    fn segment_ids(&self) -> Vec<u64> {
        self.segments.iter().map(|(id, _)| *id).collect()
    }

    /// The ones `keep` keeps, placed in new segments numbered by `ids`, and the ones it does not
    /// keep per queue.
    fn rewritten(
        &self,
        keep: impl Fn(&Info) -> bool,
        ids: &mut Segments,
    ) -> (Self, BTreeMap<String, usize>) {
        let mut out = Self::default();
        let mut gone = BTreeMap::new();
        for (info, encoded) in self.info.iter().zip(&self.encoded) {
            if keep(info) {
                out.info.push(info.clone());
                out.encoded.push(encoded.clone());
            } else {
                *gone.entry(info.queue.clone()).or_default() += 1;
            }
        }
        out.place(ids);
        (out, gone)
    }

    /// Numbers new segments for them.
    fn place(&mut self, ids: &mut Segments) {
        let sizes: Vec<usize> = self.encoded.iter().map(Vec::len).collect();
        self.segments = crate::store::segment_bounds(&sizes)
            .into_iter()
            .map(|range| (ids.next_id(), range))
            .collect();
    }
}

/// Whether a match formed at `formed_unix` is still within the match timeout at `now_unix`.
fn within(timeout: f64, now_unix: f64) -> impl Fn(&Info) -> bool {
    move |info| now_unix - info.formed_unix <= timeout
}

impl State {
    /// Sorts the stored matches of queues this node does not have (see the module docs): those
    /// within the match timeout are kept, placed in segments numbered by `ids`, the others
    /// dropped; each with a warning per queue.
    ///
    /// Each is marked kept since `now_unix` (unless it was already): its players are free from
    /// then, and a newer claim on one of them supersedes it when a config with its queue
    /// restores it (`superseded.rs`).
    pub(super) fn keep_unrestored(
        &self,
        stored: Vec<StoredMatch>,
        now_unix: f64,
        ids: &mut Segments,
    ) -> Result<Kept, StoreError> {
        let timeout = self.config().server.match_timeout_seconds;
        let mut all = Kept::default();
        for mut m in stored {
            m.kept_unix.get_or_insert(now_unix);
            all.push(&m)?;
        }
        let (kept, dropped) = all.rewritten(within(timeout, now_unix), ids);
        let mut per_queue: BTreeMap<&str, usize> = BTreeMap::new();
        for info in &kept.info {
            *per_queue.entry(info.queue.as_str()).or_default() += 1;
        }
        for (queue, matches) in per_queue {
            tracing::warn!(
                queue,
                matches,
                "live matches of a queue this config does not have are kept in the store but not \
                 restored: a config with the queue restores them until the match timeout passes"
            );
        }
        warn_dropped(&dropped);
        Ok(kept)
    }

    /// The kept matches of `segments` past the match timeout at `now_unix`, and the rest placed
    /// in new segments numbered by `fresh`: for a compaction, which writes them and drops every
    /// other segment. [`warn_dropped`] once the compaction is written.
    pub(super) fn kept_after_timeout(
        &self,
        segments: &Segments,
        now_unix: f64,
        fresh: &mut Segments,
    ) -> (Kept, BTreeMap<String, usize>) {
        let timeout = self.config().server.match_timeout_seconds;
        segments.kept.rewritten(within(timeout, now_unix), fresh)
    }

    /// Whether a kept match is past the match timeout at `now_unix` (a compaction drops it).
    pub(super) fn kept_expired(&self, segments: &Segments, now_unix: f64) -> bool {
        let timeout = self.config().server.match_timeout_seconds;
        let within = within(timeout, now_unix);
        segments.kept.info.iter().any(|info| !within(info))
    }

    /// Drops the kept matches naming `player` from the store (an erasure): the others move to
    /// new segments, and the old ones go, in one store batch.
    pub(super) fn drop_kept_naming(&self, player: &PlayerId) {
        let mut segments = self.lock_segments();
        if !segments
            .kept
            .info
            .iter()
            .any(|i| i.players.contains(player))
        {
            return;
        }
        let old = segments.kept.segment_ids();
        let current = std::mem::take(&mut segments.kept);
        let (kept, gone) = current.rewritten(|i| !i.players.contains(player), &mut segments);
        match self.inner.store.put_segments(&kept.segments(), &old) {
            Ok(()) => {
                let matches: usize = gone.values().sum();
                tracing::info!(
                    matches,
                    "dropped kept matches of queues this config does not have, naming an erased player"
                );
                segments.kept = kept;
            }
            Err(e) => {
                crate::store::write_failures::log_store_write_failure!(
                    "end_match",
                    e,
                    "could not drop the kept matches naming an erased player"
                );
                segments.kept = current;
            }
        }
    }
}

impl State {
    /// The stored waiting tickets whose queue this config has, to restore. Of the others, those
    /// that waited (at `now_unix`) longer than the longest ticket TTL here go into `dropped`, to
    /// be removed from the store; the rest stay stored. A warning per queue says which.
    pub(super) fn tickets_to_restore(
        &self,
        stored: Vec<StoredTicket>,
        now_unix: f64,
        dropped: &mut Vec<TicketId>,
    ) -> Vec<StoredTicket> {
        let longest_ttl = self
            .queues()
            .iter()
            .map(|q| q.config.matching.ticket_ttl_seconds)
            .fold(0.0, f64::max);
        let mut kept: BTreeMap<String, usize> = BTreeMap::new();
        let mut expired: BTreeMap<String, usize> = BTreeMap::new();
        let mut known = Vec::with_capacity(stored.len());
        for t in stored {
            if self.queue_of(&QueueId::new(t.queue.as_str())).is_some() {
                known.push(t);
            } else if now_unix - t.entered_unix > longest_ttl {
                *expired.entry(t.queue).or_default() += 1;
                dropped.push(t.ticket_id);
            } else {
                *kept.entry(t.queue).or_default() += 1;
            }
        }
        for (queue, tickets) in kept {
            tracing::warn!(
                queue,
                tickets,
                "waiting tickets of a queue this config does not have are kept in the store but \
                 not restored: a config with the queue restores them"
            );
        }
        for (queue, tickets) in expired {
            tracing::warn!(
                queue,
                tickets,
                "dropped stored waiting tickets of a queue this config does not have: they \
                 waited longer than any queue here lets a ticket wait"
            );
        }
        known
    }
}

/// Warns of the kept matches dropped past the match timeout, per queue.
pub(super) fn warn_dropped(dropped: &BTreeMap<String, usize>) {
    for (queue, matches) in dropped {
        tracing::warn!(
            queue,
            matches,
            "dropped stored live matches of a queue this config does not have: the match \
             timeout has passed since they formed"
        );
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::ids::MatchId;
    use crate::state::test_util::{formed_1v1, state_on};
    use crate::store::{MemoryStore, Store};

    /// A node whose config has no 1v1 queue, on `store`.
    fn without_1v1(store: &Store) -> State {
        let config =
            crate::config::Config::from_toml_str("[queues.1v1]\nenabled = false\n").unwrap();
        State::load(Arc::new(config), store.clone()).unwrap()
    }

    fn stored_ids(store: &Store) -> Vec<String> {
        let mut ids: Vec<String> = store
            .load_matches()
            .unwrap()
            .0
            .into_iter()
            .map(|m| m.match_id.to_string())
            .collect();
        ids.sort();
        ids
    }

    /// A 1v1 match between `a` and `b` formed at `formed_unix`, written to `store`.
    fn store_match(store: &Store, id: &str, a: &str, b: &str, formed_unix: f64, segment: u64) {
        store_copy(store, &a_1v1(id, a, b, formed_unix), segment);
    }

    /// `m` written to `store` in a segment of its own.
    fn store_copy(store: &Store, m: &StoredMatch, segment: u64) {
        let encoded = [crate::store::encode_match(m).unwrap()];
        store.put_segments(&[(segment, &encoded)], &[]).unwrap();
    }

    /// A stored 1v1 match between `a` and `b` formed at `formed_unix`, allocated to `gs:1`.
    fn a_1v1(id: &str, a: &str, b: &str, formed_unix: f64) -> StoredMatch {
        StoredMatch {
            match_id: MatchId::new(id),
            queue: "1v1".into(),
            teams: vec![vec![PlayerId::new(a)], vec![PlayerId::new(b)]],
            win_probability: vec![0.5, 0.5],
            region: None,
            server_address: "gs:1".into(),
            formed_unix,
            parties: Vec::new(),
            backfill: vec![Vec::new(), Vec::new()],
            left: Vec::new(),
            roles: BTreeMap::new(),
            attributes: Default::default(),
            started_unix: None,
            tickets: Vec::new(),
            kept_unix: None,
            backfill_opened_unix: None,
        }
    }

    /// The stored copy of match `id`.
    fn stored_copy(store: &Store, id: &str) -> StoredMatch {
        let (stored, _) = store.load_matches().unwrap();
        stored
            .into_iter()
            .find(|m| m.match_id.as_str() == id)
            .unwrap()
    }

    /// A waiting ticket of `player` in 2v2, entered at `entered_unix`.
    fn waiting(id: &str, player: &str, entered_unix: f64) -> StoredTicket {
        StoredTicket {
            ticket_id: TicketId::new(id),
            queue: "2v2".into(),
            players: vec![PlayerId::new(player)],
            entered_unix,
            party_skill: None,
            region_latency_ms: Vec::new(),
            roles: Vec::new(),
            attributes: Default::default(),
            avoid: Vec::new(),
        }
    }

    /// A 2v2 match `id` of two parties of two formed in `state`, allocated to `gs:2`, and
    /// written through the store as the loop writes matches.
    fn matched_2v2(state: &State, id: &str, players: [&str; 4]) -> Arc<crate::state::MatchSlot> {
        let queue = state.queue("queue", "2v2").unwrap();
        let pair = |k: usize| vec![PlayerId::new(players[k]), PlayerId::new(players[k + 1])];
        let tickets: Vec<_> = [0, 2]
            .iter()
            .map(|&k| {
                let id = TicketId::new(format!("t-{}", players[k]));
                state.create_ticket(&queue, pair(k), id, 0.0).unwrap().0
            })
            .collect();
        let m = state.form_match(
            &tickets,
            crate::state::Assignment {
                match_id: MatchId::new(id),
                queue: queue.id.clone(),
                teams: vec![pair(0), pair(2)],
                win_probability: vec![0.5, 0.5],
                region: None,
                server_address: "gs:2".into(),
                parties: vec![pair(0), pair(2)],
                backfill: vec![vec![], vec![]],
                left: vec![],
                attributes: Default::default(),
            },
            1.0,
            0.0,
            None,
            BTreeMap::new(),
        );
        state.persist_matches(std::slice::from_ref(&m));
        m
    }

    fn status(state: &State, player: &str) -> crate::state::PlayerStatus {
        state.player(&PlayerId::new(player), "1v1").0
    }

    #[test]
    fn a_live_match_of_a_queue_the_config_lacks_stays_stored_until_a_config_with_it_restores_it() {
        let store: Store = Arc::new(MemoryStore::default());
        let with = state_on(store.clone());
        let m = formed_1v1(&with, "m-1", "a", "b", "gs:1");
        with.persist_matches(&[m]);
        drop(with);

        let without = without_1v1(&store);
        let (_, restored, _) = without.recover(0.0).unwrap();
        assert!(restored.is_empty(), "its queue is unknown here");
        assert_eq!(stored_ids(&store), ["m-1"], "kept in the store");
        let kept_since = stored_copy(&store, "m-1").kept_unix;
        assert!(kept_since.is_some(), "marked kept");
        // A compaction (a match ended meanwhile) rewrites it rather than dropping it.
        without.lock_segments().mark_ended();
        assert_eq!(without.compact_stored_matches().unwrap(), 1);
        assert_eq!(stored_ids(&store), ["m-1"]);
        assert_eq!(without.oldest_live_formed_unix(), None);
        drop(without);

        let back = state_on(store.clone());
        let (_, restored, _) = back.recover(0.0).unwrap();
        let ids: Vec<&str> = restored.iter().map(|m| m.id.as_str()).collect();
        assert_eq!(ids, ["m-1"], "a config with the queue restores it");
        assert_eq!(stored_ids(&store), ["m-1"]);
        assert_eq!(stored_copy(&store, "m-1").kept_unix, None, "live again");
    }

    #[test]
    fn a_kept_match_is_marked_once_so_a_later_start_without_its_queue_keeps_the_first_time() {
        let store: Store = Arc::new(MemoryStore::default());
        let now = store.now_unix();
        store_copy(
            &store,
            &StoredMatch {
                kept_unix: Some(now - 30.0),
                ..a_1v1("m-1", "a", "b", now - 60.0)
            },
            1,
        );
        without_1v1(&store).recover(0.0).unwrap();
        assert_eq!(stored_copy(&store, "m-1").kept_unix, Some(now - 30.0));
    }

    #[test]
    fn a_kept_match_whose_player_was_matched_again_meanwhile_is_cancelled_not_restored() {
        let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
        let _local = metrics::set_default_local_recorder(&recorder);
        let store: Store = Arc::new(MemoryStore::default());
        let with = state_on(store.clone());
        let m = formed_1v1(&with, "m-kept", "a", "b", "gs:1");
        with.persist_matches(&[m]);
        drop(with);
        // A node without the queue keeps it; `a` is free there, and is matched in 2v2.
        let without = without_1v1(&store);
        without.recover(0.0).unwrap();
        matched_2v2(&without, "m-new", ["a", "x", "c", "y"]);
        drop(without);

        let back = state_on(store.clone());
        let (_, restored, _) = back.recover(0.0).unwrap();
        let ids: Vec<&str> = restored.iter().map(|m| m.id.as_str()).collect();
        assert_eq!(ids, ["m-new"], "the newer match only");
        assert_eq!(
            stored_ids(&store),
            ["m-new"],
            "the superseded one left the store"
        );
        let in_new = crate::state::PlayerStatus::InMatch(MatchId::new("m-new"));
        assert_eq!(status(&back, "a"), in_new);
        assert_eq!(
            status(&back, "b"),
            crate::state::PlayerStatus::Idle,
            "free to queue"
        );
        // Reported as cancellations are.
        let (events, _taken) = back.take_emitted();
        let cancelled: Vec<&crate::store::EventRecord> = events
            .iter()
            .filter(|e| e.kind == crate::store::EventKind::MatchCancelled)
            .collect();
        assert_eq!(cancelled.len(), 1, "{events:?}");
        assert_eq!(cancelled[0].match_id, "m-kept");
        assert!(
            cancelled[0].detail_json.contains("superseded"),
            "{cancelled:?}"
        );
        let counted = recorder.handle().render();
        assert!(
            counted
                .lines()
                .any(|l| l.starts_with(crate::telemetry::MATCHES_CANCELLED)
                    && l.contains("reason=\"superseded\"")
                    && l.contains("queue=\"1v1\"")
                    && l.ends_with(" 1")),
            "{counted}"
        );
        // Its players' histories say it was cancelled (a game server had taken it).
        let read = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let b = PlayerId::new("b");
        let history = read.block_on(back.store().player_matches(&b)).unwrap();
        assert_eq!(history, [MatchId::new("m-kept")]);
    }

    #[test]
    fn a_kept_match_read_after_the_newer_match_is_cancelled_all_the_same() {
        let store: Store = Arc::new(MemoryStore::default());
        let now = store.now_unix();
        // The live match in the first segment, the kept one (kept since before `a` was
        // matched again) in the next, so the restore reads the newer one first.
        store_copy(&store, &a_1v1("m-new", "a", "c", now - 10.0), 1);
        let kept = StoredMatch {
            kept_unix: Some(now - 30.0),
            ..a_1v1("m-kept", "a", "b", now - 60.0)
        };
        store_copy(&store, &kept, 2);
        let back = state_on(store.clone());
        let (_, restored, _) = back.recover(0.0).unwrap();
        let ids: Vec<&str> = restored.iter().map(|m| m.id.as_str()).collect();
        assert_eq!(ids, ["m-new"]);
        assert_eq!(stored_ids(&store), ["m-new"]);
        let in_new = crate::state::PlayerStatus::InMatch(MatchId::new("m-new"));
        assert_eq!(status(&back, "a"), in_new);
        assert_eq!(status(&back, "b"), crate::state::PlayerStatus::Idle);
    }

    #[test]
    fn a_kept_match_whose_player_holds_a_waiting_ticket_is_cancelled_and_the_ticket_waits() {
        let store: Store = Arc::new(MemoryStore::default());
        let now = store.now_unix();
        let kept = StoredMatch {
            kept_unix: Some(now - 30.0),
            ..a_1v1("m-kept", "a", "b", now - 60.0)
        };
        store_copy(&store, &kept, 1);
        store.put_ticket(&waiting("t-b", "b", now - 5.0)).unwrap();
        // A kept match without a conflict is restored beside it.
        let other = StoredMatch {
            kept_unix: Some(now - 30.0),
            ..a_1v1("m-other", "c", "d", now - 60.0)
        };
        store_copy(&store, &other, 2);

        let back = state_on(store.clone());
        let (_, restored, _) = back.recover(0.0).unwrap();
        let ids: Vec<&str> = restored.iter().map(|m| m.id.as_str()).collect();
        assert_eq!(ids, ["m-other"]);
        assert_eq!(stored_ids(&store), ["m-other"]);
        let tickets = back.restore_tickets(0.0).unwrap();
        assert_eq!(tickets.len(), 1, "the ticket is restored, not dropped");
        assert_eq!(
            status(&back, "b"),
            crate::state::PlayerStatus::Queued(TicketId::new("t-b"))
        );
        assert_eq!(status(&back, "a"), crate::state::PlayerStatus::Idle);
        assert_eq!(
            status(&back, "c"),
            crate::state::PlayerStatus::InMatch(MatchId::new("m-other"))
        );
    }

    #[test]
    fn a_kept_match_goes_once_the_match_timeout_has_passed_since_it_formed() {
        let store: Store = Arc::new(MemoryStore::default());
        let now = store.now_unix();
        let without = without_1v1(&store);
        let timeout = without.config().server.match_timeout_seconds;
        store_match(&store, "m-old", "a", "b", now - timeout - 60.0, 1);
        store_match(&store, "m-new", "c", "d", now - 60.0, 2);
        without.recover(0.0).unwrap();
        assert_eq!(stored_ids(&store), ["m-new"], "past its timeout at start");
        // Nothing ended and nothing is past its timeout yet: nothing to compact.
        assert_eq!(without.compact_stored_matches_at(now).unwrap(), 0);
        assert_eq!(stored_ids(&store), ["m-new"]);
        // The compaction after its timeout drops it.
        assert_eq!(without.compact_stored_matches_at(now + timeout).unwrap(), 0);
        assert!(stored_ids(&store).is_empty());
        assert_eq!(without.lock_segments().kept.len(), 0);
    }

    #[test]
    fn erasing_a_player_drops_the_kept_matches_naming_them_and_keeps_the_others() {
        let store: Store = Arc::new(MemoryStore::default());
        let now = store.now_unix();
        store_match(&store, "m-ab", "a", "b", now, 1);
        store_match(&store, "m-cd", "c", "d", now, 2);
        let without = without_1v1(&store);
        without.recover(0.0).unwrap();
        assert_eq!(stored_ids(&store), ["m-ab", "m-cd"]);
        assert!(without.erase_player(&PlayerId::new("a")).unwrap().is_ok());
        assert_eq!(stored_ids(&store), ["m-cd"]);
        assert!(
            store.load_matches().unwrap().0.iter().all(|m| !m
                .teams
                .iter()
                .flatten()
                .any(|p| p.as_str() == "a"))
        );
        // Still kept through a compaction.
        without.lock_segments().mark_ended();
        without.compact_stored_matches().unwrap();
        assert_eq!(stored_ids(&store), ["m-cd"]);
    }

    #[test]
    fn a_waiting_ticket_of_a_queue_the_config_lacks_stays_stored_until_a_config_with_it_restores_it()
     {
        let store: Store = Arc::new(MemoryStore::default());
        let now = store.now_unix();
        let ticket = |id: &str, player: &str, entered_unix: f64| StoredTicket {
            ticket_id: TicketId::new(id),
            queue: "1v1".into(),
            players: vec![PlayerId::new(player)],
            entered_unix,
            party_skill: None,
            region_latency_ms: Vec::new(),
            roles: Vec::new(),
            attributes: Default::default(),
            avoid: Default::default(),
        };
        store.put_ticket(&ticket("t-new", "a", now - 5.0)).unwrap();
        // Longer than any queue lets a ticket wait (600 s by default).
        store
            .put_ticket(&ticket("t-old", "b", now - 3600.0))
            .unwrap();

        let without = without_1v1(&store);
        assert!(without.restore_tickets(0.0).unwrap().is_empty());
        let ids: Vec<String> = store
            .load_tickets()
            .unwrap()
            .into_iter()
            .map(|t| t.ticket_id.to_string())
            .collect();
        assert_eq!(ids, ["t-new"], "the one within any TTL stays stored");

        let back = state_on(store.clone());
        let restored = back.restore_tickets(0.0).unwrap();
        assert_eq!(restored.len(), 1);
        assert_eq!(restored[0].0.id.as_str(), "t-new");
    }
}

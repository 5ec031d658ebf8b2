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
    pub(super) fn keep_unrestored(
        &self,
        stored: &[StoredMatch],
        now_unix: f64,
        ids: &mut Segments,
    ) -> Result<Kept, StoreError> {
        let timeout = self.config().server.match_timeout_seconds;
        let mut all = Kept::default();
        for m in stored {
            all.push(m)?;
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
        let m = StoredMatch {
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
        };
        let encoded = [crate::store::encode_match(&m).unwrap()];
        store.put_segments(&[(segment, &encoded)], &[]).unwrap();
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

//! `PartyService` parties in a cluster whose queues are split over shards. The home shard
//! runs `PartyService`, and only its store keeps the rosters; a party still enters a queue of
//! another shard by id, with the same meaning as on one node:
//! - the other shard's entry reads the roster the home shard keeps durably
//!   ([`crate::store::Storage::home_roster`]; `PartyService` answers only once a change is
//!   durable, so the entry sees every answered change) and checks it as the home shard would;
//! - the home shard counts such an entry as the party's activity, and keeps the party from
//!   expiring while its members wait or play in another shard. Its own `party_busy` sees
//!   only its own tickets and matches, so the entering shard notes the entry in the home
//!   shard's keyspace ([`crate::store::Storage::note_party_entry`]), and every
//!   [`check_every`] the home shard reads, for the parties idle past half their expiry, when
//!   each last entered elsewhere ([`crate::store::Storage::parties_entered`]) and which of
//!   their members some shard holds a claim on ([`crate::store::Storage::players_held`]),
//!   and touches them accordingly.
//!
//! Without shards nothing here runs: the rosters are the state's own.

use std::collections::HashSet;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::State;
use super::rosters::PartyError;
use crate::ids::{PartyId, PlayerId};
use crate::records::PartyRoster;
use crate::rejection::Rejection;
use crate::store::StoreError;

/// How often the home shard asks about the members of its idle parties: a quarter of the
/// parties' expiry (at most 30 s), so a party whose members are held elsewhere is seen at
/// least once between half its expiry and its expiry.
fn check_every(idle_expiry_seconds: f64) -> Duration {
    Duration::from_secs_f64((idle_expiry_seconds / 4.0).clamp(0.05, 30.0))
}

/// The longest a note of a party's entry is kept ([`State::party_entered`]).
const LONGEST_NOTE: Duration = Duration::from_secs(10 * 365 * 24 * 3600);

impl State {
    /// `EnterQueue` by party id: the party as [`State::party_to_enter`] reads it here or, in a
    /// shard whose store reads the home shard's rosters, as the home shard keeps it; NOT_FOUND
    /// naming the party when neither has it. Touched by neither: see the module documentation
    /// for what keeps a party entered in another shard alive.
    pub async fn party_for_entry(&self, id: &PartyId, now: f64) -> Result<PartyRoster, PartyError> {
        match self.party_to_enter(id, now) {
            Err(PartyError::Rejected(Rejection::NotFound { .. })) => {}
            found => return found,
        }
        self.inner.store.home_roster(id).await?.ok_or_else(|| {
            Rejection::NotFound {
                what: "party",
                id: id.to_string(),
            }
            .into()
        })
    }

    /// A ticket of party `id` was created at `now` (matchmaker clock): the party is active,
    /// here and, for a party the home shard keeps, in the home shard's eyes too (noted in its
    /// keyspace, [`crate::store::Storage::note_party_entry`]). A note that fails is logged:
    /// the ticket stands, and the home shard still sees the members held.
    pub async fn party_entered(&self, id: &PartyId, now: f64) {
        self.touch_party(id, now);
        // Any finite expiry is valid: one of centuries is kept for ten years.
        let keep = Duration::try_from_secs_f64(self.inner.config.parties.idle_expiry_seconds)
            .map_or(LONGEST_NOTE, |keep| keep.min(LONGEST_NOTE));
        if let Err(e) = self.inner.store.note_party_entry(id, keep).await {
            tracing::warn!(error = %e, party = %id, "cannot tell the home shard of a party's entry");
        }
    }

    /// Spawns, until `stop`, what an engine of a cluster whose queues are split over shards
    /// runs beside it: the sweep of its claims ([`State::keep_claims`]) and the check that
    /// keeps parties whose members another shard holds ([`State::keep_held_parties`], on the
    /// matchmaker clock `now`). Without shards both end at once.
    pub fn spawn_shard_tasks(
        &self,
        now: impl Fn() -> f64 + Send + 'static,
        stop: &CancellationToken,
    ) {
        tokio::spawn(self.clone().keep_claims(stop.clone()));
        tokio::spawn(self.clone().keep_held_parties(now, stop.clone()));
    }

    /// Whether this engine is the home shard's in a cluster whose store claims players
    /// across shards (the only engine that keeps rosters there).
    pub(super) fn keeps_rosters_for_shards(&self) -> bool {
        let cluster = &self.inner.config.cluster;
        self.inner.store.claims_players() && cluster.claims.first() == Some(&cluster.keyspace)
    }

    /// Until `stop`, every [`check_every`], touches (at `now()`, the matchmaker clock) the
    /// parties idle past half `[parties] idle_expiry_seconds` one of whose members some shard
    /// holds: they wait or play there. Returns at once but on the home shard of a cluster
    /// whose queues are split over shards.
    pub async fn keep_held_parties(
        self,
        now: impl Fn() -> f64 + Send + 'static,
        stop: CancellationToken,
    ) {
        if !self.keeps_rosters_for_shards() {
            return;
        }
        let every = check_every(self.inner.config.parties.idle_expiry_seconds);
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(every) => {}
            }
            if !self.may_act() {
                continue;
            }
            // Parties end only after the check: one that entered another shard's queue or
            // whose members play there is touched first, as one node's entry touches it.
            let now = now();
            match self.touch_held_parties(now).await {
                Ok(_) => {
                    if let Err(e) = self.expire_idle_parties(now) {
                        crate::store::write_failures::log_store_write_failure!(
                            "parties",
                            e,
                            "could not expire idle parties"
                        );
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "cannot ask which parties' members other shards hold");
                }
            }
        }
    }

    /// One check at `now` (see [`State::keep_held_parties`]); how many parties it touched.
    async fn touch_held_parties(&self, now: f64) -> Result<usize, StoreError> {
        let parties = self.parties_to_check(now);
        if parties.is_empty() {
            return Ok(0);
        }
        // When each last entered another shard's queue: active then, as on one node.
        let ids: Vec<PartyId> = parties.iter().map(|(id, _)| id.clone()).collect();
        let entered = self.inner.store.parties_entered(&ids).await?;
        let store_now = self.store_now();
        for (id, at) in ids.iter().zip(entered) {
            if let Some(at) = at {
                self.touch_party(id, now - (store_now - at).max(0.0));
            }
        }
        let members: Vec<PlayerId> = parties.iter().flat_map(|(_, m)| m.clone()).collect();
        let held = self.inner.store.players_held(&members).await?;
        Ok(self.touch_parties_held(&parties, &held, now))
    }

    /// The parties idle past half their expiry at `now` with no member queued or playing
    /// here (those are kept by the expiry sweep itself), each with its members.
    fn parties_to_check(&self, now: f64) -> Vec<(PartyId, Vec<PlayerId>)> {
        let half = self.inner.config.parties.idle_expiry_seconds / 2.0;
        let mut rosters = self.rosters();
        let idle = rosters.idle_past(now, half, || self.store_now());
        idle.into_iter()
            .filter_map(|id| {
                let roster = rosters.get(&id)?;
                (!self.party_busy(roster)).then(|| (id, roster.members.clone()))
            })
            .collect()
    }

    /// Touches at `now` each of `parties` with a member in `held`; how many.
    fn touch_parties_held(
        &self,
        parties: &[(PartyId, Vec<PlayerId>)],
        held: &[PlayerId],
        now: f64,
    ) -> usize {
        let held: HashSet<&PlayerId> = held.iter().collect();
        let mut touched = 0;
        for (id, members) in parties {
            if members.iter().any(|m| held.contains(m)) {
                self.touch_party(id, now);
                touched += 1;
            }
        }
        touched
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::TicketId;

    #[test]
    fn a_party_whose_member_another_shard_holds_is_kept_and_one_idle_everywhere_expires() {
        let s = crate::state::test_util::state_with("[parties]\nidle_expiry_seconds = 60\n");
        let lead = |p: &str| s.create_party(&PlayerId::new(p), 0.0).unwrap().party_id;
        let (away, idle, here) = (lead("away"), lead("idle"), lead("here"));
        let mate = PlayerId::new("mate");
        let code = s.party_roster(&away, 1.0, |_| false).unwrap().invite_code;
        s.join_party(&code, &mate, 2.0).unwrap();
        let fresh = s
            .create_party(&PlayerId::new("fresh"), 20.0)
            .unwrap()
            .party_id;
        let queue = s.queue("queue", "1v1").unwrap();
        s.create_ticket(
            &queue,
            vec![PlayerId::new("here")],
            TicketId::new("t-1"),
            3.0,
        )
        .unwrap();

        // At 35 s: idle past half the expiry, but for the fresh party (15 s) and the one
        // whose leader is queued here (the sweep keeps it).
        let mut asked = s.parties_to_check(35.0);
        asked.sort();
        let names: Vec<&str> = asked.iter().map(|(id, _)| id.as_str()).collect();
        let mut expected = vec![away.as_str(), idle.as_str()];
        expected.sort_unstable();
        assert_eq!(names, expected);
        let members = &asked.iter().find(|(id, _)| *id == away).unwrap().1;
        assert_eq!(members, &[PlayerId::new("away"), mate.clone()]);

        // Another shard holds the mate: that party is touched, the other is not.
        assert_eq!(s.touch_parties_held(&asked, &[mate], 35.0), 1);
        assert_eq!(s.expire_parties(61.0).unwrap(), 1);
        assert!(s.party_roster(&idle, 62.0, |_| false).is_err());
        for kept in [&away, &here, &fresh] {
            s.party_roster(kept, 62.0, |_| false)
                .unwrap_or_else(|e| panic!("{kept} expired: {e}"));
        }
        assert_eq!(
            s.expire_parties(96.0).unwrap(),
            2,
            "idle since 35 s, and the fresh one since 20 s"
        );
        assert!(s.party_roster(&away, 97.0, |_| false).is_err());
    }

    #[tokio::test]
    async fn without_shards_a_party_enters_from_the_state_alone_and_nothing_is_checked() {
        let s = crate::state::test_util::state();
        let p = s.create_party(&PlayerId::new("a"), 0.0).unwrap();
        assert_eq!(s.party_for_entry(&p.party_id, 1.0).await.unwrap(), p);
        let missing = s
            .party_for_entry(&PartyId::new("party-none"), 1.0)
            .await
            .unwrap_err();
        assert_eq!(missing.to_string(), "party \"party-none\" not found");
        tokio::time::timeout(
            Duration::from_secs(5),
            s.clone()
                .keep_held_parties(|| 0.0, CancellationToken::new()),
        )
        .await
        .expect("returns at once");
    }

    /// Any finite expiry is valid, and an entry of a party under one of centuries is no
    /// different from any other: touched, and nothing to note without shards.
    #[tokio::test]
    async fn a_party_entry_under_an_expiry_of_centuries_touches_it_as_any_other() {
        let s = crate::state::test_util::state_with("[parties]\nidle_expiry_seconds = 1e20\n");
        let p = s.create_party(&PlayerId::new("a"), 0.0).unwrap();
        s.party_entered(&p.party_id, 5.0).await;
        assert_eq!(s.expire_parties(1e19).unwrap(), 0);
        assert!(s.party_roster(&p.party_id, 6.0, |_| false).is_ok());
    }

    #[test]
    fn the_check_runs_a_quarter_of_the_expiry_apart_and_at_most_30_s() {
        assert_eq!(check_every(3600.0), Duration::from_secs(30));
        assert_eq!(check_every(60.0), Duration::from_secs(15));
        assert_eq!(check_every(0.01), Duration::from_millis(50));
    }
}

//! `PartyService` parties: who is in which party, its leader and invite code. Every change is
//! written through the store under the rosters' lock (so the store sees changes in the order
//! they happened); the caller flushes before it answers. A party expires after
//! `[parties] idle_expiry_seconds` with no call naming it (a refused call does not count) and
//! no member queued or playing.
//!
//! Idle time is measured on the matchmaker clock (monotonic): a wall clock that steps neither
//! ends parties early nor keeps them past their time. Each party's last activity is also kept
//! as `active_unix` on the store's clock ([`crate::store::Storage::now_unix`]: Redis's in a
//! cluster) and written with the party, so a restart or a new owner of the queues carries the
//! idle time on: a party loaded from the store counts as idle since that stamp.
//!
//! With the queues split over shards only the home shard keeps parties, and its tickets and
//! matches are not all there are: `shard_parties.rs` lets another shard enter a party and keeps
//! a party whose members another shard holds from expiring here.
//!
//! Lock order: the rosters' lock, then a player's slot (never the other way round).

use std::collections::HashMap;
use std::sync::MutexGuard;

use super::{PlayerStatus, State};
use crate::ids::{PartyId, PlayerId, new_id};
use crate::records::PartyRoster;
use crate::rejection::{PartyRefusal, Rejection};
use crate::store::StoreError;

/// A party call that failed: refused (nothing changed), or the store failed.
#[derive(Debug, thiserror::Error)]
pub enum PartyError {
    #[error(transparent)]
    Rejected(#[from] Rejection),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Every party, by id, by member and by invite code.
#[derive(Debug, Default)]
pub(super) struct Rosters {
    by_id: HashMap<PartyId, PartyRoster>,
    by_player: HashMap<PlayerId, PartyId>,
    by_code: HashMap<String, PartyId>,
    /// Each party's last activity on the matchmaker clock. A party loaded from the store has
    /// none until a call or a sweep first reads it (see [`Rosters::active_at`]): loading
    /// happens before the clock is there to read.
    active_at: HashMap<PartyId, f64>,
}

impl Rosters {
    pub(super) fn load(rosters: Vec<PartyRoster>) -> Self {
        let mut r = Self::default();
        for roster in rosters {
            r.insert(roster);
        }
        r
    }

    fn insert(&mut self, roster: PartyRoster) {
        for m in &roster.members {
            self.by_player.insert(m.clone(), roster.party_id.clone());
        }
        self.by_code
            .insert(roster.invite_code.clone(), roster.party_id.clone());
        self.by_id.insert(roster.party_id.clone(), roster);
    }

    /// Party `id`, if it is here (live or not yet found expired).
    pub(super) fn get(&self, id: &PartyId) -> Option<&PartyRoster> {
        self.by_id.get(id)
    }

    fn remove(&mut self, id: &PartyId) -> Option<PartyRoster> {
        let roster = self.by_id.remove(id)?;
        for m in &roster.members {
            if self.by_player.get(m) == Some(id) {
                self.by_player.remove(m);
            }
        }
        self.by_code.remove(&roster.invite_code);
        self.active_at.remove(id);
        Some(roster)
    }

    /// Party `id`'s last activity on the matchmaker clock, which reads `now`. A party loaded
    /// from the store gets it here, from its stamp: idle since then on the store's clock, which
    /// reads `store_now()` (not idle at all yet when the stamp is ahead of that clock).
    fn active_at(
        &mut self,
        id: &PartyId,
        now: f64,
        store_now: impl FnOnce() -> f64,
    ) -> Option<f64> {
        let roster = self.by_id.get(id)?;
        let at = *self
            .active_at
            .entry(id.clone())
            .or_insert_with(|| now - (store_now() - roster.active_unix).max(0.0));
        Some(at)
    }

    /// Marks party `id` active at `now` (matchmaker clock), and at `store_now()` on the
    /// store's clock for its stored stamp; an older `now` than its last activity changes
    /// nothing.
    fn touch(&mut self, id: &PartyId, now: f64, store_now: impl Fn() -> f64) {
        let Some(at) = self.active_at(id, now, &store_now) else {
            return;
        };
        if now > at {
            self.active_at.insert(id.clone(), now);
            if let Some(roster) = self.by_id.get_mut(id) {
                roster.active_unix = store_now();
            }
        }
    }

    /// The parties idle for more than `ttl` seconds at `now` (matchmaker clock; see
    /// [`Rosters::active_at`] for `store_now`).
    pub(super) fn idle_past(
        &mut self,
        now: f64,
        ttl: f64,
        store_now: impl Fn() -> f64,
    ) -> Vec<PartyId> {
        let loaded: Vec<PartyId> = self
            .by_id
            .keys()
            .filter(|id| !self.active_at.contains_key(*id))
            .cloned()
            .collect();
        for id in &loaded {
            self.active_at(id, now, &store_now);
        }
        self.active_at
            .iter()
            .filter(|(_, at)| now - **at > ttl)
            .map(|(id, _)| id.clone())
            .collect()
    }
}

/// Letters and digits without look-alikes (no 0/O, 1/I/L).
const CODE_ALPHABET: &[u8] = b"ABCDEFGHJKMNPQRSTUVWXYZ23456789";
/// Characters of an invite code.
pub const INVITE_CODE_LEN: usize = 8;

fn invite_code() -> String {
    (0..INVITE_CODE_LEN)
        .map(|_| CODE_ALPHABET[rand::random_range(0..CODE_ALPHABET.len())] as char)
        .collect()
}

impl State {
    pub(super) fn rosters(&self) -> MutexGuard<'_, Rosters> {
        self.inner.rosters.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether any member is queued or in a match (a busy party never expires).
    pub(super) fn party_busy(&self, roster: &PartyRoster) -> bool {
        roster.members.iter().any(|m| {
            self.slot_if_known(m)
                .is_some_and(|s| s.lock().status != PlayerStatus::Idle)
        })
    }

    /// The store's clock now (see the module documentation).
    pub(super) fn store_now(&self) -> f64 {
        self.inner.store.now_unix()
    }

    /// Whether party `id` is live at `now` (matchmaker clock); an expired one is removed
    /// (written through) and is NOT_FOUND. A live one is not touched: see [`Rosters::touch`].
    fn live_party(&self, rosters: &mut Rosters, id: &PartyId, now: f64) -> Result<(), PartyError> {
        let ttl = self.inner.config.parties.idle_expiry_seconds;
        let not_found = || {
            PartyError::from(Rejection::NotFound {
                what: "party",
                id: id.to_string(),
            })
        };
        let at = rosters
            .active_at(id, now, || self.store_now())
            .ok_or_else(not_found)?;
        // The home shard of a cluster split over shards ends parties only once it asked the
        // other shards ([`State::keep_held_parties`]).
        if now - at > ttl
            && !self.keeps_rosters_for_shards()
            && !rosters.by_id.get(id).is_some_and(|r| self.party_busy(r))
        {
            self.inner.store.remove_rosters(std::slice::from_ref(id))?;
            rosters.remove(id);
            return Err(not_found());
        }
        Ok(())
    }

    /// [`Self::live_party`], then touched at `now`.
    fn touch_live_party<'a>(
        &self,
        rosters: &'a mut Rosters,
        id: &PartyId,
        now: f64,
    ) -> Result<&'a mut PartyRoster, PartyError> {
        self.live_party(rosters, id, now)?;
        rosters.touch(id, now, || self.store_now());
        Ok(rosters.by_id.get_mut(id).expect("live above"))
    }

    /// Refuses `player`, whom the rosters name as a member of `party`, while that party is live
    /// (it is touched then); one that expired no longer holds them. A store failure while
    /// removing an expired party is a failure, never "not in a party": the player could end up
    /// in two parties.
    fn not_in_live_party(
        &self,
        rosters: &mut Rosters,
        player: &PlayerId,
        party: &PartyId,
        now: f64,
    ) -> Result<(), PartyError> {
        match self.touch_live_party(rosters, party, now) {
            Ok(_) => Err(Rejection::Party {
                party: party.clone(),
                refusal: PartyRefusal::HasPlayer(player.clone()),
            }
            .into()),
            Err(PartyError::Rejected(Rejection::NotFound { .. })) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// `CreateParty`: a new party with `player` as leader and only member, at `now` on the
    /// matchmaker clock (as every party call's `now`).
    pub fn create_party(&self, player: &PlayerId, now: f64) -> Result<PartyRoster, PartyError> {
        let mut rosters = self.rosters();
        if let Some(id) = rosters.by_player.get(player).cloned() {
            // A party the player is in but that expired no longer holds it.
            self.not_in_live_party(&mut rosters, player, &id, now)?;
        }
        let mut code = invite_code();
        while rosters.by_code.contains_key(&code) {
            code = invite_code();
        }
        let stamp = self.store_now();
        let roster = PartyRoster {
            party_id: PartyId::new(new_id("party")),
            invite_code: code,
            members: vec![player.clone()],
            leader: player.clone(),
            created_unix: stamp,
            active_unix: stamp,
        };
        self.inner.store.put_rosters(&[&roster])?;
        rosters.insert(roster.clone());
        rosters.active_at.insert(roster.party_id.clone(), now);
        tracing::debug!(party = %roster.party_id, leader = %player, "party created");
        Ok(roster)
    }

    /// `JoinParty`: `player` joins the party of `code` (upper-cased). Joining one's own party
    /// again changes nothing.
    pub fn join_party(
        &self,
        code: &str,
        player: &PlayerId,
        now: f64,
    ) -> Result<PartyRoster, PartyError> {
        let code = code.to_ascii_uppercase();
        let mut rosters = self.rosters();
        let not_found = || Rejection::NotFound {
            what: "party invite code",
            id: code.clone(),
        };
        let id = rosters.by_code.get(&code).cloned().ok_or_else(not_found)?;
        if let Some(other) = rosters.by_player.get(player).cloned()
            && other != id
        {
            self.not_in_live_party(&mut rosters, player, &other, now)?;
        }
        let max = self.inner.config.parties.max_members;
        let roster = match self.touch_live_party(&mut rosters, &id, now) {
            Ok(r) => r,
            Err(PartyError::Rejected(Rejection::NotFound { .. })) => {
                return Err(not_found().into());
            }
            Err(e) => return Err(e),
        };
        if roster.members.contains(player) {
            return Ok(roster.clone());
        }
        if roster.members.len() >= max as usize {
            return Err(Rejection::Party {
                party: id,
                refusal: PartyRefusal::Full(max),
            }
            .into());
        }
        let mut next = roster.clone();
        next.members.push(player.clone());
        self.inner.store.put_rosters(&[&next])?;
        *roster = next.clone();
        rosters.by_player.insert(player.clone(), id);
        Ok(next)
    }

    /// `LeaveParty`: `player` leaves; a leader hands the lead to the longest-standing member,
    /// the last member ends the party (the answer then lists no members). A player not in the
    /// party changes nothing. Returned with the party: whether `player` was a member.
    pub fn leave_party(
        &self,
        id: &PartyId,
        player: &PlayerId,
        now: f64,
    ) -> Result<(PartyRoster, bool), PartyError> {
        let mut rosters = self.rosters();
        self.live_party(&mut rosters, id, now)?;
        let member = rosters
            .by_id
            .get(id)
            .is_some_and(|r| r.members.contains(player));
        if !member {
            // Changes nothing: a player outside the party does not keep it from expiring.
            return Ok((rosters.by_id[id].clone(), false));
        }
        rosters.touch(id, now, || self.store_now());
        Ok((self.remove_member(&mut rosters, id, player)?, true))
    }

    /// Takes `player`, a member, out of party `id`, written through: the lead passes to the
    /// longest-standing member, and the last member ends the party (then the answer lists no
    /// members).
    fn remove_member(
        &self,
        rosters: &mut Rosters,
        id: &PartyId,
        player: &PlayerId,
    ) -> Result<PartyRoster, StoreError> {
        let mut next = rosters.by_id[id].clone();
        next.members.retain(|m| m != player);
        if next.members.is_empty() {
            self.inner.store.remove_rosters(std::slice::from_ref(id))?;
            rosters.remove(id);
            tracing::debug!(party = %id, "party ended: its last member left");
            return Ok(next);
        }
        if next.leader == *player {
            next.leader = next.members[0].clone();
        }
        self.inner.store.put_rosters(&[&next])?;
        rosters.by_id.insert(id.clone(), next.clone());
        rosters.by_player.remove(player);
        Ok(next)
    }

    /// Whether `player` is in a `PartyService` party.
    pub(super) fn in_a_party(&self, player: &PlayerId) -> bool {
        self.rosters().by_player.contains_key(player)
    }

    /// Takes `player` out of the party they are in, as [`Self::leave_party`] would (player
    /// erasure); whether there was one. No member's call: the party's idle time runs on.
    pub(super) fn leave_any_party(&self, player: &PlayerId) -> Result<bool, StoreError> {
        let mut rosters = self.rosters();
        let Some(id) = rosters.by_player.get(player).cloned() else {
            return Ok(false);
        };
        self.remove_member(&mut rosters, &id, player)?;
        Ok(true)
    }

    /// `GetParty`: the party, touched if `may` allows the caller to use it (a refused call
    /// changes nothing: it does not keep the party from expiring).
    pub fn party_roster(
        &self,
        id: &PartyId,
        now: f64,
        may: impl FnOnce(&PartyRoster) -> bool,
    ) -> Result<PartyRoster, PartyError> {
        let mut rosters = self.rosters();
        self.live_party(&mut rosters, id, now)?;
        if may(&rosters.by_id[id]) {
            rosters.touch(id, now, || self.store_now());
        }
        Ok(rosters.by_id[id].clone())
    }

    /// `EnterQueue` by party id: the party, not touched. The entry is checked after this
    /// (size, bans, roles, members' whereabouts), and a refused one changes nothing: it does
    /// not keep the party from expiring. An entry that creates the ticket then calls
    /// [`Self::touch_party`].
    pub fn party_to_enter(&self, id: &PartyId, now: f64) -> Result<PartyRoster, PartyError> {
        self.party_roster(id, now, |_| false)
    }

    /// Restarts the idle clock of party `id` at `now` (its ticket was created); a party that
    /// ended meanwhile stays ended.
    pub fn touch_party(&self, id: &PartyId, now: f64) {
        self.rosters().touch(id, now, || self.store_now());
    }

    /// Ends parties idle past `[parties] idle_expiry_seconds` at `now`, on the matchmaker
    /// clock (a party with a member queued or playing is touched instead). Returns how many
    /// ended. The home shard of a cluster split over shards ends none here: its check of
    /// what the other shards hold does, right after it ([`State::keep_held_parties`]).
    pub fn expire_parties(&self, now: f64) -> Result<usize, StoreError> {
        if self.keeps_rosters_for_shards() {
            return Ok(0);
        }
        self.expire_idle_parties(now)
    }

    /// [`State::expire_parties`], wherever it runs.
    pub(super) fn expire_idle_parties(&self, now: f64) -> Result<usize, StoreError> {
        let ttl = self.inner.config.parties.idle_expiry_seconds;
        let mut rosters = self.rosters();
        let mut ended = Vec::new();
        for id in rosters.idle_past(now, ttl, || self.store_now()) {
            if rosters.by_id.get(&id).is_some_and(|r| self.party_busy(r)) {
                rosters.touch(&id, now, || self.store_now());
            } else {
                ended.push(id);
            }
        }
        if ended.is_empty() {
            return Ok(0);
        }
        self.inner.store.remove_rosters(&ended)?;
        for id in &ended {
            rosters.remove(id);
        }
        tracing::info!(parties = ended.len(), "idle parties expired");
        Ok(ended.len())
    }

    /// Writes every party (snapshots: their activity times are otherwise written only with
    /// changes).
    pub(super) fn persist_rosters(&self) -> Result<(), StoreError> {
        let rosters = self.rosters();
        let all: Vec<&PartyRoster> = rosters.by_id.values().collect();
        if all.is_empty() {
            return Ok(());
        }
        self.inner.store.put_rosters(&all)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(extra: &str) -> State {
        let config = crate::config::Config::from_toml_str(extra).unwrap();
        State::load(
            std::sync::Arc::new(config),
            std::sync::Arc::new(crate::store::MemoryStore::default()),
        )
        .unwrap()
    }

    fn ids(r: &PartyRoster) -> Vec<&str> {
        r.members.iter().map(PlayerId::as_str).collect()
    }

    #[test]
    fn a_party_is_created_joined_by_code_and_left_with_the_lead_passed_on() {
        let s = state("[parties]\nmax_members = 3\n");
        let (a, b, c, d) = ("a".into(), "b".into(), "c".into(), "d".into());
        let p = s.create_party(&a, 100.0).unwrap();
        assert_eq!((ids(&p), p.leader.as_str()), (vec!["a"], "a"));
        assert_eq!(p.invite_code.len(), INVITE_CODE_LEN);
        let again = s.create_party(&a, 101.0).unwrap_err();
        assert!(
            again.to_string().contains("already has player a"),
            "{again}"
        );
        let code = p.invite_code.to_ascii_lowercase();
        assert_eq!(ids(&s.join_party(&code, &b, 102.0).unwrap()), ["a", "b"]);
        assert_eq!(ids(&s.join_party(&code, &b, 103.0).unwrap()), ["a", "b"]);
        s.join_party(&code, &c, 104.0).unwrap();
        let full = s.join_party(&code, &d, 105.0).unwrap_err();
        assert!(full.to_string().contains("is full (3 members"), "{full}");
        let (left, _) = s.leave_party(&p.party_id, &a, 106.0).unwrap();
        assert_eq!((ids(&left), left.leader.as_str()), (vec!["b", "c"], "b"));
        // a may make a party of its own now; d's join sees room again.
        s.create_party(&a, 107.0).unwrap();
        s.join_party(&code, &d, 108.0).unwrap();
        for who in [&b, &c] {
            s.leave_party(&p.party_id, who, 109.0).unwrap();
        }
        let (last, was_member) = s.leave_party(&p.party_id, &d, 110.0).unwrap();
        assert!(was_member);
        assert!(last.members.is_empty());
        let gone = s.party_roster(&p.party_id, 111.0, |_| true).unwrap_err();
        assert!(matches!(
            gone,
            PartyError::Rejected(Rejection::NotFound { .. })
        ));
        assert!(
            s.join_party(&code, &b, 112.0).is_err(),
            "its code went with it"
        );
    }

    #[test]
    fn an_idle_party_expires_and_frees_its_members() {
        let s = state("[parties]\nidle_expiry_seconds = 60\n");
        let a: PlayerId = "a".into();
        let p = s.create_party(&a, 0.0).unwrap();
        s.party_roster(&p.party_id, 50.0, |_| true)
            .expect("touched at 50");
        // A caller refused the party (not a member) reads it without touching it.
        s.party_roster(&p.party_id, 105.0, |_| false)
            .expect("still there at 105");
        assert_eq!(s.expire_parties(100.0).unwrap(), 0, "idle for 50 s only");
        assert_eq!(s.expire_parties(111.0).unwrap(), 1);
        assert!(s.party_roster(&p.party_id, 112.0, |_| true).is_err());
        s.create_party(&a, 113.0)
            .expect("a is in no party any more");
    }

    /// After a restart (or on a new owner of a cluster's queues) a party counts as idle since
    /// its stored stamp, on the store's clock; a stamp ahead of that clock (written before the
    /// clock stepped back) counts as idle since the load, and the next touch stamps the
    /// store's clock again.
    #[test]
    fn a_party_loaded_from_the_store_is_idle_since_its_stored_stamp() {
        use crate::store::{RecordStorage, Storage};
        let memory = std::sync::Arc::new(crate::store::MemoryStore::default());
        let unix = memory.now_unix();
        let roster = |id: &str, member: &str, active_unix: f64| PartyRoster {
            party_id: PartyId::new(id),
            invite_code: format!("CODE{id}"),
            members: vec![member.into()],
            leader: member.into(),
            created_unix: unix - 4000.0,
            active_unix,
        };
        let (idle, ahead) = (
            roster("idle", "a", unix - 3000.0),
            roster("ahead", "b", unix + 7200.0),
        );
        memory.put_rosters(&[&idle, &ahead]).unwrap();
        let config =
            crate::config::Config::from_toml_str("[parties]\nidle_expiry_seconds = 3600\n");
        let s = State::load(std::sync::Arc::new(config.unwrap()), memory.clone()).unwrap();

        // The matchmaker clock reads 5 s: the server just started.
        assert_eq!(s.expire_parties(5.0).unwrap(), 0);
        assert_eq!(s.expire_parties(600.0).unwrap(), 0, "idle 3595 s");
        assert_eq!(s.expire_parties(610.0).unwrap(), 1, "idle 3605 s");
        assert!(s.party_roster(&idle.party_id, 611.0, |_| true).is_err());
        let touched = s.party_roster(&ahead.party_id, 611.0, |_| true).unwrap();
        assert!(
            touched.active_unix < unix + 60.0,
            "stamped on the store's clock, not kept ahead of it: {} vs {unix}",
            touched.active_unix
        );
        s.persist_rosters().unwrap();
        let stored = memory.load_rosters().unwrap();
        assert_eq!(stored.len(), 1);
        assert_eq!(stored[0].active_unix, touched.active_unix);
    }

    #[test]
    fn a_party_read_to_enter_is_touched_only_once_its_ticket_is_created() {
        let s = state("[parties]\nidle_expiry_seconds = 60\n");
        let p = s.create_party(&"a".into(), 0.0).unwrap();
        // Read for an entry that is then refused: still idle since 0.
        s.party_to_enter(&p.party_id, 50.0).unwrap();
        assert_eq!(s.expire_parties(61.0).unwrap(), 1);

        let p = s.create_party(&"b".into(), 100.0).unwrap();
        s.party_to_enter(&p.party_id, 150.0).unwrap();
        s.touch_party(&p.party_id, 150.0);
        assert_eq!(s.expire_parties(161.0).unwrap(), 0, "idle since 150");
        s.touch_party(&p.party_id, 120.0);
        assert_eq!(
            s.expire_parties(211.0).unwrap(),
            1,
            "an older touch moves nothing"
        );
        s.touch_party(&p.party_id, 300.0);
        assert!(
            s.party_roster(&p.party_id, 301.0, |_| true).is_err(),
            "ended stays ended"
        );
    }

    /// An expired party the store could not remove still holds its members: a store failure
    /// is not "in no party", which would let them into a second party.
    #[test]
    fn a_store_failure_ending_an_expired_party_is_not_read_as_in_no_party() {
        use crate::store::FailingWrite;
        let memory = std::sync::Arc::new(crate::store::MemoryStore::default());
        let config = crate::config::Config::from_toml_str("[parties]\nidle_expiry_seconds = 60\n");
        let s = State::load(std::sync::Arc::new(config.unwrap()), memory.clone()).unwrap();
        let (a, b) = ("a".into(), "b".into());
        let first = s.create_party(&a, 0.0).unwrap();
        let other = s.create_party(&b, 100.0).unwrap();
        memory.fail_writes(FailingWrite::RosterRemovals, true);
        let created = s.create_party(&a, 120.0);
        assert!(matches!(created, Err(PartyError::Store(_))), "{created:?}");
        let joined = s.join_party(&other.invite_code, &a, 120.0);
        assert!(matches!(joined, Err(PartyError::Store(_))), "{joined:?}");
        let member_of = |id| {
            s.party_roster(id, 130.0, |_| true)
                .map(|r| ids(&r).join(","))
        };
        assert_eq!(member_of(&other.party_id).unwrap(), "b");
        // Once the store works again, the expired party goes and a is free to join.
        memory.fail_writes(FailingWrite::RosterRemovals, false);
        assert_eq!(
            ids(&s.join_party(&other.invite_code, &a, 140.0).unwrap()),
            ["b", "a"]
        );
        assert!(s.party_roster(&first.party_id, 141.0, |_| true).is_err());
    }
}

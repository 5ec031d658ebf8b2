//! `PartyService` parties: who is in which party, its leader and invite code. Every change is
//! written through the store under the rosters' lock (so the store sees changes in the order
//! they happened); the caller flushes before it answers. A party expires after
//! `[parties] idle_expiry_seconds` with no call naming it (a refused call does not count) and
//! no member queued or playing.
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

    fn remove(&mut self, id: &PartyId) -> Option<PartyRoster> {
        let roster = self.by_id.remove(id)?;
        for m in &roster.members {
            if self.by_player.get(m) == Some(id) {
                self.by_player.remove(m);
            }
        }
        self.by_code.remove(&roster.invite_code);
        Some(roster)
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
    fn rosters(&self) -> MutexGuard<'_, Rosters> {
        self.inner.rosters.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether any member is queued or in a match (a busy party never expires).
    fn party_busy(&self, roster: &PartyRoster) -> bool {
        roster.members.iter().any(|m| {
            self.slot_if_known(m)
                .is_some_and(|s| s.lock().status != PlayerStatus::Idle)
        })
    }

    /// The party `id` if it is live at `now`, touched; an expired one is removed (written
    /// through) and is NOT_FOUND.
    fn live_party<'a>(
        &self,
        rosters: &'a mut Rosters,
        id: &PartyId,
        now: f64,
    ) -> Result<&'a mut PartyRoster, PartyError> {
        let ttl = self.inner.config.parties.idle_expiry_seconds;
        let Some(roster) = rosters.by_id.get(id) else {
            return Err(Rejection::NotFound {
                what: "party",
                id: id.to_string(),
            }
            .into());
        };
        if now - roster.active_unix > ttl && !self.party_busy(roster) {
            self.inner.store.remove_rosters(std::slice::from_ref(id))?;
            rosters.remove(id);
            return Err(Rejection::NotFound {
                what: "party",
                id: id.to_string(),
            }
            .into());
        }
        let roster = rosters.by_id.get_mut(id).expect("present above");
        roster.active_unix = roster.active_unix.max(now);
        Ok(roster)
    }

    /// `CreateParty`: a new party with `player` as leader and only member.
    pub fn create_party(&self, player: &PlayerId, now: f64) -> Result<PartyRoster, PartyError> {
        let mut rosters = self.rosters();
        if let Some(id) = rosters.by_player.get(player).cloned() {
            // A party the player is in but that expired no longer holds it.
            if self.live_party(&mut rosters, &id, now).is_ok() {
                return Err(Rejection::Party {
                    party: id,
                    refusal: PartyRefusal::HasPlayer(player.clone()),
                }
                .into());
            }
        }
        let mut code = invite_code();
        while rosters.by_code.contains_key(&code) {
            code = invite_code();
        }
        let roster = PartyRoster {
            party_id: PartyId::new(new_id("party")),
            invite_code: code,
            members: vec![player.clone()],
            leader: player.clone(),
            created_unix: now,
            active_unix: now,
        };
        self.inner.store.put_rosters(&[&roster])?;
        rosters.insert(roster.clone());
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
            && self.live_party(&mut rosters, &other, now).is_ok()
        {
            return Err(Rejection::Party {
                party: other,
                refusal: PartyRefusal::HasPlayer(player.clone()),
            }
            .into());
        }
        let max = self.inner.config.parties.max_members;
        let roster = match self.live_party(&mut rosters, &id, now) {
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
    /// party gets it unchanged.
    pub fn leave_party(
        &self,
        id: &PartyId,
        player: &PlayerId,
        now: f64,
    ) -> Result<PartyRoster, PartyError> {
        let mut rosters = self.rosters();
        let active = rosters.by_id.get(id).map(|r| r.active_unix);
        let roster = self.live_party(&mut rosters, id, now)?;
        if !roster.members.contains(player) {
            // Changes nothing: a player outside the party does not keep it from expiring.
            if let Some(active) = active {
                roster.active_unix = active;
            }
            return Ok(roster.clone());
        }
        let mut next = roster.clone();
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
        *roster = next.clone();
        rosters.by_player.remove(player);
        Ok(next)
    }

    /// Takes `player` out of the party they are in, as [`Self::leave_party`] would (player
    /// erasure); whether there was one.
    /// Whether `player` is in a `PartyService` party.
    pub(super) fn in_a_party(&self, player: &PlayerId) -> bool {
        self.rosters().by_player.contains_key(player)
    }

    pub(super) fn leave_any_party(&self, player: &PlayerId, now: f64) -> Result<bool, StoreError> {
        let party = self.rosters().by_player.get(player).cloned();
        let Some(id) = party else {
            return Ok(false);
        };
        match self.leave_party(&id, player, now) {
            Ok(_) => Ok(true),
            // Expired meanwhile: nothing names the player any more.
            Err(PartyError::Rejected(_)) => Ok(false),
            Err(PartyError::Store(e)) => Err(e),
        }
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
        let active = rosters.by_id.get(id).map(|r| r.active_unix);
        let roster = self.live_party(&mut rosters, id, now)?;
        if !may(roster)
            && let Some(active) = active
        {
            roster.active_unix = active;
        }
        Ok(roster.clone())
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
        if let Some(roster) = self.rosters().by_id.get_mut(id) {
            roster.active_unix = roster.active_unix.max(now);
        }
    }

    /// Ends parties idle past `[parties] idle_expiry_seconds` at `now` (a party with a member
    /// queued or playing is touched instead). Returns how many ended.
    pub fn expire_parties(&self, now: f64) -> Result<usize, StoreError> {
        let ttl = self.inner.config.parties.idle_expiry_seconds;
        let mut rosters = self.rosters();
        let stale: Vec<PartyId> = rosters
            .by_id
            .values()
            .filter(|r| now - r.active_unix > ttl)
            .map(|r| r.party_id.clone())
            .collect();
        let mut ended = Vec::new();
        for id in stale {
            let busy = rosters.by_id.get(&id).is_some_and(|r| self.party_busy(r));
            match rosters.by_id.get_mut(&id) {
                Some(r) if busy => r.active_unix = now,
                Some(_) => ended.push(id),
                None => {}
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
        let left = s.leave_party(&p.party_id, &a, 106.0).unwrap();
        assert_eq!((ids(&left), left.leader.as_str()), (vec!["b", "c"], "b"));
        // a may make a party of its own now; d's join sees room again.
        s.create_party(&a, 107.0).unwrap();
        s.join_party(&code, &d, 108.0).unwrap();
        for who in [&b, &c] {
            s.leave_party(&p.party_id, who, 109.0).unwrap();
        }
        let last = s.leave_party(&p.party_id, &d, 110.0).unwrap();
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
}

//! Player records the admin service changes: bans, which `EnterQueue` checks, and the erasure
//! of a player. Each change is written through the store here; the caller flushes before it
//! answers.

use std::hash::BuildHasher;

use super::{PlayerStatus, PoolRecords, State};
use crate::ids::{PlayerId, TicketId};
use crate::records::erased_marker;
use crate::rejection::Rejection;
use crate::store::{Ban, StoreError};

/// What erasing a player removed.
#[derive(Debug, PartialEq)]
pub struct Erased {
    /// Rating pools the player had a record in.
    pub pools: Vec<String>,
    /// Party records that named the player (party ratings and `PartyService` parties).
    pub parties: usize,
    /// What the stored records name in the player's place.
    pub marker: PlayerId,
}

impl State {
    /// The first banned player of `players` at `now`, as a refusal.
    pub fn check_bans(&self, players: &[PlayerId], now: f64) -> Result<(), Rejection> {
        for p in players {
            if let Some(ban) = self.inner.bans.get(p)
                && ban.holds_at(now)
            {
                return Err(Rejection::Banned {
                    player: p.clone(),
                    until_unix: ban.until_unix,
                    reason: ban.reason.clone(),
                });
            }
        }
        Ok(())
    }

    /// Whether any ban is stored (ended or not): the tick checks formed matches for banned
    /// players only then.
    pub fn any_bans(&self) -> bool {
        !self.inner.bans.is_empty()
    }

    /// A player's ban, if one is stored (ended or not).
    pub fn ban_of(&self, player: &PlayerId) -> Option<Ban> {
        self.inner.bans.get(player).map(|b| b.clone())
    }

    /// Bans a player (replacing a previous ban). Durable after the next flush.
    pub fn ban(&self, ban: Ban) -> Result<(), StoreError> {
        self.inner.store.put_ban(&ban)?;
        self.inner.bans.insert(ban.player.clone(), ban);
        Ok(())
    }

    /// Lifts a player's ban; whether there was one. Durable after the next flush.
    pub fn unban(&self, player: &PlayerId) -> Result<bool, StoreError> {
        let stored = self.inner.store.remove_ban(player)?;
        Ok(self.inner.bans.remove(player).is_some() || stored)
    }

    /// The ticket a player waits in, if any.
    pub fn waiting_ticket_of(&self, player: &PlayerId) -> Option<TicketId> {
        match self.slot_if_known(player)?.lock().status {
            PlayerStatus::Queued(ref t) => Some(t.clone()),
            _ => None,
        }
    }

    /// Erases a player: records in every pool, leaderboard entries, party records, ban and
    /// match history, in memory and (one operation) in the store; in the records other players
    /// keep, a random marker takes their place. Refused while the player waits or plays: the
    /// caller cancels a waiting ticket first. Run under the ledger's admin gate, so no result
    /// or admin change for the player is journaled meanwhile. Durable after the next flush.
    pub fn erase_player(&self, player: &PlayerId) -> Result<Result<Erased, Rejection>, StoreError> {
        // A fresh random key each time (std's `RandomState`): the marker cannot be computed
        // back from the id.
        let marker =
            &erased_marker(std::collections::hash_map::RandomState::new().hash_one(player));
        let mut erased = Erased {
            pools: Vec::new(),
            parties: 0,
            marker: marker.clone(),
        };
        // The player's record is held from before the store is erased until their party
        // records are gone from memory: a party with them makes its first record holding it
        // too (`party_record`), so that record is in the store erased here, or made after, from
        // the cleared record. An id never seen gets a slot for this (an empty one, which no
        // snapshot writes and the sweep of idle players forgets).
        let slot = self.slot(player);
        let mut guard = slot.lock();
        match &guard.status {
            PlayerStatus::Idle => {}
            PlayerStatus::Queued(ticket) => {
                return Ok(Err(Rejection::AlreadyQueued {
                    player: player.clone(),
                    ticket: ticket.clone(),
                }));
            }
            PlayerStatus::InMatch(match_id) => {
                return Ok(Err(Rejection::InMatch {
                    player: player.clone(),
                    match_id: match_id.clone(),
                }));
            }
        }
        // The store first: if it fails, memory still matches the disk.
        self.inner.store.erase_player(player, marker)?;
        for (pool, record) in guard.pools.iter() {
            erased.pools.push(pool.to_string());
            self.export_erased(pool, player);
            if self.inner.pool_systems.contains_key(pool)
                && let Some(entry) = self.leaderboard_entry(player, pool, record)
            {
                self.rank_index(pool).remove(&entry);
            }
        }
        guard.pools = PoolRecords::default();
        self.may_be_unrated(&slot);
        let before = self.inner.parties.len();
        self.inner
            .parties
            .retain(|key, _| !crate::store::party_names(key, player));
        erased.parties = before - self.inner.parties.len();
        drop(guard);
        self.inner.bans.remove(player);
        self.move_matches_off_segments_naming(player);
        // A `PartyService` party the player is in loses them as if they had left it (the lead
        // passes on; a party of one ends).
        if self.leave_any_party(player)? {
            erased.parties += 1;
        }
        // No receiver (no console) is not an error.
        let _ = self.inner.erasures.send((player.clone(), marker.clone()));
        Ok(Ok(erased))
    }

    /// Erases `player` from the store once more, under the same `marker`: for what was on its
    /// way to the store while [`State::erase_player`] rewrote it (the event of a match
    /// cancelled just before the player was free). Only while nothing new names the id (no
    /// record, ticket, ban or party of a new player of that id since): the store would erase
    /// that too. Whether it ran.
    pub fn erase_stored_again(
        &self,
        player: &PlayerId,
        marker: &PlayerId,
    ) -> Result<bool, StoreError> {
        // The parties are looked at before the player's record is held: their lock comes
        // first wherever both are held (`party_busy` holds it while it locks members).
        let in_a_party = self.in_a_party(player);
        // The player's record is held while the store is erased, as in the first pass. The
        // sweep of idle players may have forgotten the slot since the erasure: a fresh one
        // says the same (idle, no record).
        let slot = self.slot(player);
        let guard = slot.lock();
        if guard.status != PlayerStatus::Idle
            || !guard.pools.is_empty()
            || in_a_party
            || self.inner.bans.contains_key(player)
        {
            return Ok(false);
        }
        self.inner.store.erase_player(player, marker)?;
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::state::test_util::win;

    fn state() -> State {
        crate::state::test_util::state()
    }

    /// Forms one 1v1 match between `a` and `b`, leaving them in it until its result.
    fn form(state: &State, a: &str, b: &str) -> Arc<crate::state::MatchSlot> {
        crate::state::test_util::formed_1v1(state, &format!("m-{a}-{b}"), a, b, "")
    }

    /// A party with the player that enters (and so makes its first record) while the store is
    /// being erased waits for the erasure, then makes it from the cleared record, in memory and
    /// in the store alike. A snapshot after the erasure writes no record naming the id.
    #[test]
    fn a_party_record_made_during_an_erasure_is_made_after_it_from_the_cleared_record() {
        let config = Arc::new(crate::config::Config::from_toml_str("").unwrap());
        let memory = Arc::new(crate::store::MemoryStore::default());
        let state = State::load(config, memory.clone()).unwrap();
        let m = form(&state, "a", "b");
        win(&state, &m);
        let queue = state.queue("queue", "1v1").unwrap();
        let initial = queue.config.rating.initial();
        let (a, c) = (PlayerId::new("a"), PlayerId::new("c"));
        assert_ne!(state.skill_for_matching(&a, &queue), initial);

        let members = vec![a.clone(), c.clone()];
        let maker: Arc<std::sync::Mutex<Option<std::thread::JoinHandle<_>>>> = Arc::default();
        let (during, q, m2, made) = (state.clone(), queue.clone(), members.clone(), maker.clone());
        memory.on_next_erase(move || {
            // The store is erased, the erasure still holds the player's record.
            let handle = std::thread::spawn(move || {
                let entered = during.enter_ticket(&q, m2, crate::ids::TicketId::new("t-ac"), 0.0);
                entered.unwrap().unwrap().party_skill.unwrap()
            });
            *made.lock().unwrap() = Some(handle);
            std::thread::sleep(std::time::Duration::from_millis(50));
        });
        state.erase_player(&a).unwrap().unwrap();
        let handle = maker.lock().unwrap().take().unwrap();
        let skill = handle.join().unwrap();
        let fresh = crate::rating::party_initial(&queue.config.rating, &[initial, initial]);
        assert_eq!(skill, fresh, "made from the cleared record");
        assert_eq!(state.party(&queue.pool, &members).unwrap().skill, fresh);
        let stored = crate::store::Storage::load_parties(memory.as_ref()).unwrap();
        assert_eq!(stored.len(), 1, "in the store as in memory");
        assert_eq!(stored[0].1[&queue.pool].skill, fresh);

        state.snapshot(1, &state.calibrations_now()).unwrap();
        let players: Vec<PlayerId> = crate::store::Storage::load_players(memory.as_ref())
            .unwrap()
            .map(|player| player.unwrap().0)
            .collect();
        assert_eq!(players, vec![PlayerId::new("b")]);
    }

    /// The second pass erases only while nothing new names the id: a new player who took it
    /// meanwhile keeps what they made.
    #[test]
    fn the_second_pass_leaves_a_new_player_of_the_same_id_alone() {
        let state = state();
        let a = PlayerId::new("a");
        let erased = state.erase_player(&a).unwrap().unwrap();
        assert!(state.erase_stored_again(&a, &erased.marker).unwrap());
        // The id queues again before the second pass.
        let queue = state.queue("queue", "1v1").unwrap();
        state
            .create_ticket(
                &queue,
                vec![a.clone()],
                crate::ids::TicketId::new("t-a"),
                0.0,
            )
            .unwrap();
        assert!(!state.erase_stored_again(&a, &erased.marker).unwrap());
    }

    #[test]
    fn erasing_clears_records_and_board_and_waits_for_the_match_to_end() {
        let state = state();
        let m = form(&state, "a", "b");
        let refused = state.erase_player(&PlayerId::new("a")).unwrap();
        assert!(
            matches!(refused, Err(Rejection::InMatch { .. })),
            "{refused:?}"
        );
        win(&state, &m);
        let queue = state.queue("queue", "1v1").unwrap();
        assert_eq!(state.leaderboard(&queue, 0, 10).0, 2);

        let erased = state.erase_player(&PlayerId::new("a")).unwrap().unwrap();
        assert_eq!(erased.pools, vec!["1v1".to_string()]);
        assert_eq!(state.player(&PlayerId::new("a"), "1v1").1, None);
        let (total, page) = state.leaderboard(&queue, 0, 10);
        assert_eq!(total, 1);
        assert_eq!(page[0].0, PlayerId::new("b"));
        // The store forgot the player, in the journal too, so a restart cannot bring them back.
        let stored: Vec<PlayerId> = state
            .store()
            .journal_after(0)
            .flat_map(|e| e.unwrap().1.records.into_iter().map(|(p, _)| p))
            .collect();
        assert_eq!(stored, vec![PlayerId::new("b")]);
        // The id is free to play again.
        form(&state, "a", "c");
    }

    #[test]
    fn after_an_erasure_no_stored_match_names_the_player() {
        let state = state();
        // Two matches stored in one segment; the first ends with a result, the second plays on,
        // so the segment (and the first match's copy in it) stays.
        let ended = form(&state, "a", "b");
        let live = form(&state, "c", "d");
        state.persist_matches(&[ended.clone(), live.clone()]);
        crate::state::test_util::win(&state, &ended);
        let names = |state: &State| -> Vec<String> {
            let (stored, _) = state.store().load_matches().unwrap();
            let mut names: Vec<String> = stored
                .iter()
                .flat_map(|m| m.teams.iter().flatten().map(|p| p.to_string()))
                .collect();
            names.sort();
            names
        };
        assert_eq!(
            names(&state),
            ["a", "b", "c", "d"],
            "the ended copy is still stored"
        );
        state.erase_player(&PlayerId::new("a")).unwrap().unwrap();
        assert_eq!(
            names(&state),
            ["c", "d"],
            "the live match moved; its old segment went"
        );
    }

    #[test]
    fn a_ban_holds_until_its_end_and_names_the_first_banned_player() {
        let state = state();
        let ban = |p: &str, until_unix| Ban {
            player: PlayerId::new(p),
            until_unix,
            reason: format!("reason {p}"),
            since_unix: 0.0,
        };
        state.ban(ban("x", 100)).unwrap();
        state.ban(ban("y", 0)).unwrap();
        let party = [PlayerId::new("ok"), PlayerId::new("x"), PlayerId::new("y")];
        match state.check_bans(&party, 50.0) {
            Err(Rejection::Banned {
                player,
                until_unix,
                reason,
            }) => assert_eq!(
                (player.as_str(), until_unix, reason.as_str()),
                ("x", 100, "reason x")
            ),
            other => panic!("{other:?}"),
        }
        // x's ban ended at 100; y's never ends.
        match state.check_bans(&party, 100.0) {
            Err(Rejection::Banned { player, .. }) => assert_eq!(player.as_str(), "y"),
            other => panic!("{other:?}"),
        }
        assert!(state.unban(&PlayerId::new("y")).unwrap());
        assert!(state.check_bans(&party, 100.0).is_ok());
        assert!(!state.unban(&PlayerId::new("y")).unwrap());
        assert_eq!(state.store().load_bans().unwrap().len(), 1);
    }

    #[test]
    fn a_ban_stored_after_the_callers_check_still_stops_the_ticket() {
        // `EnterQueue` checks bans, then waits for room in the loop's queue; a ban stored
        // meanwhile is seen when the ticket is made, holding the players.
        let state = state();
        let queue = state.queue("queue", "1v1").unwrap();
        let p = PlayerId::new("p");
        assert!(
            state
                .check_bans(std::slice::from_ref(&p), crate::state::unix_now())
                .is_ok()
        );
        state
            .ban(Ban {
                player: p.clone(),
                until_unix: 0,
                reason: "cheating".into(),
                since_unix: 0.0,
            })
            .unwrap();
        let made = state.create_ticket(&queue, vec![p.clone()], TicketId::new("t-p"), 0.0);
        assert!(
            matches!(made, Err(Rejection::Banned { ref player, .. }) if player == &p),
            "{:?}",
            made.map(|_| ())
        );
        assert_eq!(state.waiting_ticket_of(&p), None);
    }
}

//! Player records the admin service changes: bans, which `EnterQueue` checks, and the erasure
//! of a player. Each change is written through the store here; the caller flushes before it
//! answers.

use super::{PlayerStatus, PoolRecords, State};
use crate::ids::{PlayerId, TicketId};
use crate::rejection::Rejection;
use crate::store::{Ban, StoreError};

/// What erasing a player removed.
#[derive(Debug, Default, PartialEq)]
pub struct Erased {
    /// Rating pools the player had a record in.
    pub pools: Vec<String>,
    /// Party records that named the player.
    pub parties: usize,
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

    /// Erases a player: records in every pool, leaderboard entries, party records and ban, in
    /// memory and (one operation) in the store. Refused while the player waits or plays: the
    /// caller cancels a waiting ticket first. Run under the ledger's admin gate, so no result
    /// or admin change for the player is journaled meanwhile. Durable after the next flush.
    pub fn erase_player(&self, player: &PlayerId) -> Result<Result<Erased, Rejection>, StoreError> {
        let mut erased = Erased::default();
        if let Some(slot) = self.slot_if_known(player) {
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
            self.inner.store.erase_player(player)?;
            for (pool, record) in guard.pools.iter() {
                erased.pools.push(pool.to_string());
                if self.inner.pool_systems.contains_key(pool)
                    && let Some(entry) = self.leaderboard_entry(player, pool, record)
                {
                    self.rank_index(pool).remove(&entry);
                }
            }
            guard.pools = PoolRecords::default();
        } else {
            self.inner.store.erase_player(player)?;
        }
        let before = self.inner.parties.len();
        self.inner
            .parties
            .retain(|key, _| !crate::store::party_names(key, player));
        erased.parties = before - self.inner.parties.len();
        self.inner.bans.remove(player);
        Ok(Ok(erased))
    }
}

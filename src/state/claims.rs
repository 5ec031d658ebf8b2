//! Claims on players across shards (see `store::Claim`): with the queues split over shards,
//! each shard's engine claims the players it queues before it queues them, so that a player
//! waits or plays in one shard at a time, as on one node. A claim is given up once the player
//! is idle here again and that is durable, by the sweep this module runs beside the engine.
//! Without shards nothing here runs.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::State;
use super::TicketSlot;
use super::TicketState;
use super::players::PlayerStatus;
use crate::ids::PlayerId;
use crate::rejection::Rejection;
use crate::store::{Claim, StoreError};

/// How often the sweep gives up the claims of players idle here.
const SWEEP_EVERY: Duration = Duration::from_millis(250);

/// How long an entry looks again at a player another shard holds before it is refused: two
/// sweeps and their Redis round trips.
const CLAIM_PATIENCE: Duration = Duration::from_millis(750);

/// How many sweeps pass between two reads of the shard's claim index (claims an earlier owner
/// of the shard, or a stalled one, left) and two looks at every held player (five minutes; a
/// new owner reads it at once): the sweeps between look at the players who became idle.
const INDEX_EVERY: u32 = 1200;

/// At most this many claims are given up at once, so that entries wait for the sweep only
/// that long.
const RELEASE_CHUNK: usize = 64;

/// This engine's claims.
#[derive(Default)]
pub(super) struct Claims {
    /// Held (shared) by an entry from its claim until its ticket is in the state, and
    /// (exclusively) by the sweep while it finds idle players and gives their claims up: a
    /// player the sweep finds idle is not queued here meanwhile.
    gate: tokio::sync::RwLock<()>,
    /// Players this shard holds a claim on, or may.
    held: std::sync::Mutex<HashSet<PlayerId>>,
    /// Players who became idle here since the last sweep: the only ones it looks at, but for
    /// a look at every held player each [`INDEX_EVERY`] sweeps.
    freed: std::sync::Mutex<Vec<PlayerId>>,
}

impl Claims {
    /// `players` may hold a claim here: the next sweep looks at them (a refused entry's are
    /// idle at once).
    fn hold(&self, players: impl IntoIterator<Item = PlayerId>) {
        let players: Vec<PlayerId> = players.into_iter().collect();
        self.held
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend(players.iter().cloned());
        self.freed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend(players);
    }
}

/// The claims made for one entry, held (against the sweep) until the entry's ticket is in the
/// state or the entry was refused. Either way its players join those the sweep looks at: a
/// refused entry's claims are not given up here, since another entry of the same player may
/// have queued them meanwhile; the sweep gives them up once the player is idle. Empty without
/// shards.
pub struct EntryClaim<'a> {
    held: Option<(&'a Claims, tokio::sync::RwLockReadGuard<'a, ()>)>,
    players: Vec<PlayerId>,
}

impl EntryClaim<'_> {
    /// The entry's ticket is in the state.
    pub fn keep(self) {}
}

impl Drop for EntryClaim<'_> {
    fn drop(&mut self) {
        if let Some((claims, _gate)) = &self.held {
            claims.hold(self.players.drain(..));
        }
    }
}

impl State {
    /// Claims `players` for this shard before they are queued here (a cluster whose queues
    /// are split over shards; otherwise nothing to claim). Refused when another shard holds
    /// one of them: after looking again for [`CLAIM_PATIENCE`], since a player who just left
    /// another shard (a ticket cancelled, a match ended) is held there until its sweep gives
    /// the claim up.
    pub async fn claim_for_entry(
        &self,
        players: &[PlayerId],
    ) -> Result<Result<EntryClaim<'_>, Rejection>, StoreError> {
        let store = &self.inner.store;
        if !store.claims_players() {
            return Ok(Ok(EntryClaim {
                held: None,
                players: Vec::new(),
            }));
        }
        let claims = &self.inner.claims;
        let patience = tokio::time::Instant::now() + CLAIM_PATIENCE;
        loop {
            let gate = claims.gate.read().await;
            // Whatever happens, the players join those the sweep looks at: some may be
            // claimed now (before a refusal or a failure), and only the sweep gives up a claim.
            claims.hold(players.iter().cloned());
            match store.claim_players(players).await? {
                Claim::Claimed(_) => {
                    return Ok(Ok(EntryClaim {
                        held: Some((claims, gate)),
                        players: players.to_vec(),
                    }));
                }
                Claim::Elsewhere { player, keyspace } => {
                    drop(gate);
                    if tokio::time::Instant::now() >= patience {
                        metrics::counter!(
                            crate::telemetry::CLUSTER_CLAIMS_REFUSED,
                            crate::telemetry::SHARD => self.shard().to_owned()
                        )
                        .increment(1);
                        return Ok(Err(Rejection::BusyElsewhere { player, keyspace }));
                    }
                    tokio::time::sleep(SWEEP_EVERY / 2).await;
                }
            }
        }
    }

    /// Claims the players of the waiting tickets a new owner restored, before they go back to
    /// the matchmaker; a ticket one of whose players another shard holds meanwhile (an earlier
    /// owner of this shard gave the claim up before it stopped, and another shard queued the
    /// player) is cancelled rather than matched in two shards. Without shards, `tickets` as
    /// they are.
    pub async fn claim_restored<T>(
        &self,
        tickets: Vec<(Arc<TicketSlot>, T)>,
        now: f64,
    ) -> Result<Vec<(Arc<TicketSlot>, T)>, StoreError> {
        let store = self.inner.store.clone();
        if !store.claims_players() {
            return Ok(tickets);
        }
        let mut kept = Vec::with_capacity(tickets.len());
        let mut dropped = Vec::new();
        for (slot, entry) in tickets {
            self.inner.claims.hold(slot.players.iter().cloned());
            match store.claim_players(&slot.players).await? {
                Claim::Claimed(_) => kept.push((slot, entry)),
                Claim::Elsewhere { player, keyspace } => {
                    tracing::warn!(
                        ticket = %slot.id,
                        player = %player,
                        keyspace = %keyspace,
                        "a restored ticket's player is held by another shard: the ticket is cancelled"
                    );
                    self.end_ticket(
                        &slot,
                        TicketState::Cancelled,
                        now,
                        format!("player {player} is queued or in a match in shard {keyspace}"),
                    );
                    dropped.push(slot.id.clone());
                }
            }
        }
        if !dropped.is_empty() {
            store.remove_tickets(&dropped)?;
            store.flush_async().await?;
        }
        Ok(kept)
    }

    /// Notes that `players` may have become idle here (a ticket ended, a match ended or was
    /// cancelled), for the next sweep.
    pub(super) fn note_idle(&self, players: &[PlayerId]) {
        if self.inner.store.claims_players() {
            self.inner
                .claims
                .freed
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .extend(players.iter().cloned());
        }
    }

    /// Whether `player` waits or plays here.
    fn busy_here(&self, player: &PlayerId) -> bool {
        self.slot_if_known(player)
            .is_some_and(|slot| !matches!(slot.lock().status, PlayerStatus::Idle))
    }

    /// Keeps this shard's claims until `stop`: first claims the players of the live matches
    /// restored here under this owner's lease (the tickets' are claimed before they are
    /// restored), then every [`SWEEP_EVERY`] gives up the claims of players idle here once
    /// that is durable, reading the shard's claim index now and then for claims an earlier
    /// owner left.
    pub async fn keep_claims(self, stop: CancellationToken) {
        let store = self.inner.store.clone();
        if !store.claims_players() {
            return;
        }
        let busy: Vec<PlayerId> = self
            .inner
            .players
            .iter()
            .filter(|e| matches!(e.value().lock().status, PlayerStatus::InMatch(_)))
            .map(|e| e.key().clone())
            .collect();
        for player in busy {
            if stop.is_cancelled() {
                return;
            }
            self.inner.claims.hold([player.clone()]);
            match store.claim_players(std::slice::from_ref(&player)).await {
                Ok(Claim::Claimed(_)) => {}
                Ok(Claim::Elsewhere { player, keyspace }) => tracing::warn!(
                    player = %player,
                    keyspace = %keyspace,
                    "a player in a live match here is held by another shard (an owner of this shard stopped meanwhile)"
                ),
                Err(StoreError::Fenced) => return,
                Err(e) => tracing::warn!(error = %e, "cannot claim a restored player"),
            }
        }
        let mut sweeps = 0u32;
        loop {
            if sweeps.is_multiple_of(INDEX_EVERY) {
                match store.claimed_players().await {
                    Ok(indexed) => self.inner.claims.hold(indexed),
                    Err(e) => tracing::warn!(error = %e, "cannot read this shard's claims"),
                }
            }
            let everyone = sweeps.is_multiple_of(INDEX_EVERY);
            sweeps = sweeps.wrapping_add(1);
            match self.give_up_idle_claims(everyone).await {
                Ok(()) => {}
                Err(StoreError::Fenced) => return,
                Err(e) => tracing::warn!(error = %e, "cannot give up the claims of idle players"),
            }
            let held = self.inner.claims.held.lock().map_or(0, |h| h.len());
            crate::telemetry::engine_gauge(crate::telemetry::CLUSTER_CLAIMS_HELD, self.shard())
                .set(held as f64);
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(SWEEP_EVERY) => {}
            }
        }
    }

    /// Gives up the claims of players idle here (of those noted idle since the last sweep, or
    /// of `everyone` held), [`RELEASE_CHUNK`] at a time, each chunk holding new entries out:
    /// idle is made durable first (a cancelled ticket's or match's write), so that a next
    /// owner of this shard never restores a player another shard queued meanwhile; and nothing
    /// is given up once the lease is gone.
    async fn give_up_idle_claims(&self, everyone: bool) -> Result<(), StoreError> {
        let store = &self.inner.store;
        let claims = &self.inner.claims;
        let mut candidates: Vec<PlayerId> = if everyone {
            claims
                .freed
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clear();
            let held = claims.held.lock().unwrap_or_else(|p| p.into_inner());
            held.iter().cloned().collect()
        } else {
            std::mem::take(&mut *claims.freed.lock().unwrap_or_else(|p| p.into_inner()))
        };
        candidates.retain(|p| !self.busy_here(p));
        candidates.sort_unstable();
        candidates.dedup();
        while !candidates.is_empty() {
            if !self.may_act() {
                return Ok(());
            }
            let chunk: Vec<PlayerId> = candidates
                .drain(..candidates.len().min(RELEASE_CHUNK))
                .collect();
            let _gate = claims.gate.write().await;
            // Looked at again holding entries out: one may have queued them meanwhile.
            let idle: Vec<PlayerId> = {
                let held = claims.held.lock().unwrap_or_else(|p| p.into_inner());
                chunk
                    .into_iter()
                    .filter(|p| held.contains(p) && !self.busy_here(p))
                    .collect()
            };
            if idle.is_empty() {
                continue;
            }
            store.flush_async().await?;
            store.release_claims(&idle).await?;
            let mut held = claims.held.lock().unwrap_or_else(|p| p.into_inner());
            for p in &idle {
                held.remove(p);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn without_shards_an_entry_claims_nothing_and_keeps_nothing() {
        let state = crate::state::test_util::state();
        let players = [PlayerId::new("a"), PlayerId::new("b")];
        state
            .claim_for_entry(&players)
            .await
            .unwrap()
            .unwrap()
            .keep();
        drop(state.claim_for_entry(&players).await.unwrap().unwrap());
        assert!(state.inner.claims.held.lock().unwrap().is_empty());
        // The sweep has nothing to do and ends at once.
        tokio::time::timeout(
            Duration::from_secs(5),
            state.clone().keep_claims(CancellationToken::new()),
        )
        .await
        .unwrap();
    }
}

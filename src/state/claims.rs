//! Claims on players across shards (see `store::Claim`): with the queues split over shards,
//! each shard's engine claims the players it queues before it queues them, so that a player
//! waits or plays in one shard at a time, as on one node. A claim is given up once the player
//! is idle here again, by the sweep this module runs beside the engine.

use std::collections::HashSet;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::State;
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
/// of the shard, or a stalled one, left).
const INDEX_EVERY: u32 = 40;

/// This engine's claims.
#[derive(Default)]
pub(super) struct Claims {
    /// Held (shared) by an entry from its claim until its ticket is in the state, and
    /// (exclusively) by the sweep while it finds idle players and gives their claims up: a
    /// player the sweep finds idle is not queued here meanwhile.
    gate: tokio::sync::RwLock<()>,
    /// Players this shard holds a claim on, or may.
    held: std::sync::Mutex<HashSet<PlayerId>>,
}

/// The claims made for one entry, held (against the sweep) until the entry's ticket is in the
/// state or the entry was refused. Either way its players join those the sweep looks at: a
/// refused entry's claims are not given up here, since another entry of the same player may
/// have queued them meanwhile; the sweep gives them up once the player is idle.
pub struct EntryClaim<'a> {
    state: &'a State,
    players: Vec<PlayerId>,
    _gate: tokio::sync::RwLockReadGuard<'a, ()>,
}

impl EntryClaim<'_> {
    /// The entry's ticket is in the state.
    pub fn keep(self) {}
}

impl Drop for EntryClaim<'_> {
    fn drop(&mut self) {
        let held = &self.state.inner.claims.held;
        held.lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend(self.players.drain(..));
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
        let patience = tokio::time::Instant::now() + CLAIM_PATIENCE;
        loop {
            let gate = self.inner.claims.gate.read().await;
            match store.claim_players(players).await? {
                Claim::Claimed(_) => {
                    return Ok(Ok(EntryClaim {
                        state: self,
                        players: players.to_vec(),
                        _gate: gate,
                    }));
                }
                Claim::Elsewhere { player, keyspace } => {
                    // Those claimed before the refusal are given up by the sweep.
                    self.inner
                        .claims
                        .held
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .extend(players.iter().cloned());
                    drop(gate);
                    if tokio::time::Instant::now() >= patience {
                        return Ok(Err(Rejection::BusyElsewhere { player, keyspace }));
                    }
                    tokio::time::sleep(SWEEP_EVERY / 2).await;
                }
            }
        }
    }

    /// Whether `player` waits or plays here.
    fn busy_here(&self, player: &PlayerId) -> bool {
        self.slot_if_known(player)
            .is_some_and(|slot| !matches!(slot.lock().status, PlayerStatus::Idle))
    }

    /// Keeps this shard's claims until `stop`: first claims every player busy here under this
    /// owner's lease (a new owner's restored tickets and matches), then every [`SWEEP_EVERY`]
    /// gives up the claims of players idle here, reading the shard's claim index now and then
    /// for claims an earlier owner left.
    pub async fn keep_claims(self, stop: CancellationToken) {
        let store = self.inner.store.clone();
        if !store.claims_players() {
            return;
        }
        let busy: Vec<PlayerId> = self
            .inner
            .players
            .iter()
            .filter(|e| !matches!(e.value().lock().status, PlayerStatus::Idle))
            .map(|e| e.key().clone())
            .collect();
        for player in busy {
            match store.claim_players(std::slice::from_ref(&player)).await {
                Ok(Claim::Claimed(_)) => {
                    self.inner
                        .claims
                        .held
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .insert(player);
                }
                Ok(Claim::Elsewhere { player, keyspace }) => tracing::warn!(
                    player = %player,
                    keyspace = %keyspace,
                    "a player busy here is held by another shard (an owner of this shard stalled meanwhile)"
                ),
                Err(e) => tracing::warn!(error = %e, "cannot claim a restored player"),
            }
        }
        let mut sweeps = 0u32;
        loop {
            if sweeps.is_multiple_of(INDEX_EVERY) {
                match store.claimed_players().await {
                    Ok(indexed) => self
                        .inner
                        .claims
                        .held
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .extend(indexed),
                    Err(e) => tracing::warn!(error = %e, "cannot read this shard's claims"),
                }
            }
            sweeps = sweeps.wrapping_add(1);
            {
                let _gate = self.inner.claims.gate.write().await;
                let idle: Vec<PlayerId> = self
                    .inner
                    .claims
                    .held
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .iter()
                    .filter(|p| !self.busy_here(p))
                    .cloned()
                    .collect();
                if !idle.is_empty() {
                    match store.release_claims(&idle).await {
                        Ok(()) => {
                            let mut held = self
                                .inner
                                .claims
                                .held
                                .lock()
                                .unwrap_or_else(|p| p.into_inner());
                            for p in &idle {
                                held.remove(p);
                            }
                        }
                        Err(StoreError::Fenced) => return,
                        Err(e) => {
                            tracing::warn!(error = %e, "cannot give up the claims of idle players")
                        }
                    }
                }
            }
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(SWEEP_EVERY) => {}
            }
        }
    }
}

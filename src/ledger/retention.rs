//! How long results' acknowledgements are kept (`[results] ack_retention_seconds`): the trim
//! that drops older ones, and the answer to a report that finds neither a live match nor an
//! acknowledgement.
//!
//! What a trim must not break, and why it does not:
//! 1. **Exactly once.** A completed match is no longer live, so a report of it that finds no
//!    acknowledgement is refused ([`Ledger::refusal_without_ack`]), never applied: dropping an
//!    acknowledgement changes what a late repeat is answered, not what it does.
//! 2. **Recovery.** Replaying the journal writes players' records only, never an
//!    acknowledgement, so a trim before or after a snapshot changes no replay. Restoring live
//!    matches skips each stored copy whose result is acknowledged, and a completed match's
//!    copy can outlast it beside a live match written with it: the trim keeps every
//!    acknowledgement of a result applied after the oldest live match formed, less
//!    [`LIVE_COPY_MARGIN_SECONDS`] ([`crate::state::State::oldest_live_formed_unix`]), so no
//!    copy a restart could read loses the acknowledgement that keeps it out. A restart (or a
//!    new owner) rewrites the live matches into fresh segments, dropping every such copy.
//! 3. **Atomic, bounded.** Each store trims at most [`ACK_TRIM_BATCH`] acknowledgements per
//!    atomic batch (in cluster mode one fenced script, which standby copies follow), flushed
//!    before the next.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::Ledger;
use crate::ids::MatchId;
use crate::records::EndedPhase;
use crate::rejection::{MatchRefusal, Rejection};
use crate::store::{ACK_TRIM_BATCH, StoreError};

/// Kept between the oldest live match's formation and the newest acknowledgement a trim may
/// drop: a result is timed when it is computed, a moment before its match stops being written,
/// and a match restored from another cluster node carries that node's clock.
pub const LIVE_COPY_MARGIN_SECONDS: f64 = 600.0;

impl Ledger {
    /// The time before which a trim at `now` (unix seconds) drops acknowledgements: the
    /// retention before `now`, and no later than the oldest live match's formation less
    /// [`LIVE_COPY_MARGIN_SECONDS`] (see the module docs).
    pub fn ack_horizon(&self, now: f64) -> f64 {
        let retention = self.state.config().results.ack_retention_seconds as f64;
        let horizon = now - retention;
        match self.state.oldest_live_formed_unix() {
            Some(formed) => horizon.min(formed - LIVE_COPY_MARGIN_SECONDS),
            None => horizon,
        }
    }

    /// Drops the acknowledgements [`Ledger::ack_horizon`] names at `now`, a bounded atomic
    /// batch at a time, each flushed before the next; how many.
    pub async fn trim_acks(&self, now: f64) -> Result<usize, StoreError> {
        let before = self.ack_horizon(now);
        let store = self.state.store();
        let mut trimmed = 0;
        loop {
            let n = crate::store::heavy(|| store.trim_acks(before, ACK_TRIM_BATCH))?;
            if n > 0 {
                store.flush_async().await?;
            }
            trimmed += n;
            if n < ACK_TRIM_BATCH {
                return Ok(trimmed);
            }
        }
    }

    /// Trims the acknowledgements every `every` until `shutdown`, the first time at once (those
    /// that aged while the server was down).
    pub async fn trim_acks_periodically(self, every: Duration, shutdown: CancellationToken) {
        let mut interval = tokio::time::interval(every);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                _ = interval.tick() => {
                    match self.trim_acks(self.state.store().now_unix()).await {
                        Ok(0) => {}
                        Ok(n) => tracing::debug!(n, "old result acknowledgements trimmed"),
                        Err(e) => tracing::warn!(error = %e, "trimming result acknowledgements failed"),
                    }
                }
            }
        }
    }

    /// Why a report of `id`, a match that is not live and has no acknowledgement, is refused:
    /// [`MatchRefusal::AckTrimmed`] when the match history says it completed (its
    /// acknowledgement was trimmed), [`MatchRefusal::Cancelled`] when it says the match was
    /// cancelled (by its server or the match timeout), as `StartMatch` answers it,
    /// [`MatchRefusal::PastAckRetention`] when the history does not hold it but its id says it
    /// formed longer ago than the retention, else `not_found` (a match this server never
    /// formed, or one no game server took).
    pub(super) async fn refusal_without_ack(
        &self,
        id: &MatchId,
        not_found: Rejection,
    ) -> Result<Rejection, StoreError> {
        if let Some(record) = self.state.store().match_record(id).await? {
            return Ok(match record.phase {
                EndedPhase::Completed => Rejection::for_match(id, MatchRefusal::AckTrimmed),
                EndedPhase::Cancelled => Rejection::for_match(id, MatchRefusal::Cancelled),
            });
        }
        let retention = self.state.config().results.ack_retention_seconds as f64;
        let formed = crate::ids::minted_unix(id.as_str());
        if formed.is_some_and(|formed| formed < crate::state::unix_now() - retention) {
            return Ok(Rejection::for_match(id, MatchRefusal::PastAckRetention));
        }
        Ok(not_found)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Arc;

    use super::*;
    use crate::ids::PlayerId;
    use crate::ledger::{ReportError, Reported};
    use crate::state::State;
    use crate::state::test_util::formed_1v1;
    use crate::store::{Committer, MemoryStore, Store};

    /// A ledger on `store` with the default config, after start-up recovery: the ids of the
    /// live matches it restored.
    fn start(store: &Store) -> (Ledger, Vec<MatchId>) {
        let config = Arc::new(crate::config::Config::from_toml_str("").unwrap());
        let state = State::load(config, store.clone()).unwrap();
        let (_, restored, last_seq) = state.recover(0.0).unwrap();
        let (committer, _task) = Committer::spawn(store.clone(), last_seq, 8);
        let restored = restored.iter().map(|m| m.id.clone()).collect();
        (Ledger::new(state, committer), restored)
    }

    async fn report(ledger: &Ledger, id: &MatchId) -> Result<Reported, ReportError> {
        ledger
            .report(id, vec![1, 2], Vec::new(), BTreeMap::new(), Vec::new())
            .await
    }

    fn retention(ledger: &Ledger) -> f64 {
        ledger.state.config().results.ack_retention_seconds as f64
    }

    fn refusal(outcome: Result<Reported, ReportError>) -> Rejection {
        match outcome {
            Err(ReportError::Rejected(r)) => r,
            Err(e) => panic!("not a refusal: {e}"),
            Ok(r) => panic!("answered (duplicate = {})", r.duplicate),
        }
    }

    #[tokio::test]
    async fn a_repeat_after_the_acknowledgement_was_trimmed_is_refused_and_applies_nothing() {
        let store: Store = Arc::new(MemoryStore::default());
        let (ledger, _) = start(&store);
        let id = MatchId::new(crate::ids::new_id("m"));
        formed_1v1(&ledger.state, id.as_str(), "a", "b", "gs:1");
        assert!(!report(&ledger, &id).await.unwrap().duplicate);
        assert!(report(&ledger, &id).await.unwrap().duplicate);
        let rated = ledger.state.player(&PlayerId::new("a"), "1v1").1.unwrap();

        // Within the retention nothing goes; past it, the acknowledgement does.
        let now = crate::state::unix_now();
        assert_eq!(
            ledger
                .trim_acks(now + retention(&ledger) - 60.0)
                .await
                .unwrap(),
            0
        );
        assert!(report(&ledger, &id).await.unwrap().duplicate);
        assert_eq!(
            ledger
                .trim_acks(now + retention(&ledger) + 60.0)
                .await
                .unwrap(),
            1
        );
        assert_eq!(store.result_of(&id).unwrap(), None);

        let refused = refusal(report(&ledger, &id).await);
        assert_eq!(refused, Rejection::for_match(&id, MatchRefusal::AckTrimmed));
        assert!(
            refused.to_string().contains("ack_retention_seconds"),
            "{refused}"
        );
        let after = ledger.state.player(&PlayerId::new("a"), "1v1").1.unwrap();
        assert_eq!(after, rated, "applied once");
        assert_eq!(store.last_seq().unwrap(), 1, "nothing journaled again");

        // A restart replays the entry (no snapshot took it yet): the same records, and no
        // acknowledgement comes back.
        drop(ledger);
        let (ledger, _) = start(&store);
        assert_eq!(store.snapshot_seq().unwrap(), 0);
        let replayed = ledger.state.player(&PlayerId::new("a"), "1v1").1.unwrap();
        assert_eq!(replayed, rated);
        assert_eq!(store.result_of(&id).unwrap(), None);
        let refused = refusal(report(&ledger, &id).await);
        assert_eq!(refused, Rejection::for_match(&id, MatchRefusal::AckTrimmed));
    }

    #[tokio::test]
    async fn a_match_not_live_and_formed_before_the_retention_is_refused_as_past_it() {
        let store: Store = Arc::new(MemoryStore::default());
        let (ledger, _) = start(&store);
        // Minted at 1 s (1970): long before any retention. Neither live nor in the history.
        let old = MatchId::new("m-0000000003e8ffffffffffffffffffff");
        assert_eq!(
            refusal(report(&ledger, &old).await),
            Rejection::for_match(&old, MatchRefusal::PastAckRetention)
        );
        // Formed just now, or an id this server never mints: unknown.
        for unknown in [crate::ids::new_id("m"), "m1".to_string()] {
            let refused = refusal(report(&ledger, &MatchId::new(unknown)).await);
            assert!(matches!(refused, Rejection::NotFound { .. }), "{refused}");
        }
    }

    #[tokio::test]
    async fn a_report_of_a_match_its_server_cancelled_is_refused_as_cancelled() {
        let store: Store = Arc::new(MemoryStore::default());
        let (ledger, _) = start(&store);
        let m = formed_1v1(&ledger.state, "m-gone", "a", "b", "gs:1");
        ledger
            .state
            .cancel_match(&m, "the map did not load")
            .unwrap();
        // No longer live; the match history says how it ended.
        assert!(ledger.state.match_slot(&m.id).is_err());
        let refused = refusal(report(&ledger, &m.id).await);
        assert_eq!(
            refused,
            Rejection::for_match(&m.id, MatchRefusal::Cancelled)
        );
        assert_eq!(store.last_seq().unwrap(), 0, "nothing journaled");
    }

    #[tokio::test]
    async fn no_trim_takes_the_acknowledgement_a_stored_copy_of_a_completed_match_needs() {
        let store: Store = Arc::new(MemoryStore::default());
        let (ledger, _) = start(&store);
        let done = formed_1v1(&ledger.state, "m-done", "a", "b", "gs:1");
        let live = formed_1v1(&ledger.state, "m-live", "c", "d", "gs:1");
        // Written together: one segment, which stays while m-live is live.
        ledger.state.persist_matches(&[done.clone(), live.clone()]);
        report(&ledger, &done.id).await.unwrap();
        let far = crate::state::unix_now() + retention(&ledger) + 86_400.0;
        assert!(
            ledger.ack_horizon(far) < live.formed_unix,
            "held back by the live match"
        );
        assert_eq!(ledger.trim_acks(far).await.unwrap(), 0);
        assert!(store.result_of(&done.id).unwrap().is_some());

        // A restart restores the live match only: the completed one's copy is known as done.
        drop(ledger);
        let (ledger, restored) = start(&store);
        assert_eq!(restored, std::slice::from_ref(&live.id));
        let live = ledger.state.match_slot(&live.id).unwrap();
        ledger
            .state
            .cancel_match(&live, "the map did not load")
            .unwrap();
        // With no match live, the acknowledgement goes, and no copy is left to need it.
        assert_eq!(ledger.trim_acks(far).await.unwrap(), 1);
        let (ledger, restored) = start(&store);
        assert_eq!(restored, Vec::<MatchId>::new());
        assert_eq!(
            refusal(report(&ledger, &done.id).await),
            Rejection::for_match(&done.id, MatchRefusal::AckTrimmed)
        );
    }
}

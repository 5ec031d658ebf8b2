//! Each calibrating rating pool's calibration ([`crate::rating::calibration`]): read by
//! `PredictMatch` and the matchmaker's win model, refitted as results are applied, written with
//! every snapshot and brought back at start-up (the snapshot's value, then the observations of
//! the journal entries replayed after it).
//!
//! The state is a statistical estimate folded result by result, not an absolute record, so a
//! snapshot writes the value it read together with its journal horizon (no result between
//! journal and memory then): the results replayed after a crash are exactly those it does not
//! count yet.

use std::collections::BTreeMap;
use std::sync::Mutex;

use super::State;
use crate::rating::SystemConfig;
use crate::rating::calibration::{Calibration, Observation};
use crate::store::{Store, StoreError};

/// The calibration of every pool whose system has `calibration.enabled`, from the store's
/// values (a pool with none starts at the identity).
pub(super) fn load(
    pool_systems: &BTreeMap<String, SystemConfig>,
    store: &Store,
) -> Result<BTreeMap<String, Mutex<Calibration>>, StoreError> {
    let stored: BTreeMap<String, Calibration> = store.load_calibrations()?.into_iter().collect();
    Ok(pool_systems
        .iter()
        .filter(|(_, system)| system.calibration().enabled)
        .map(|(pool, system)| {
            let state = stored
                .get(pool)
                .copied()
                .unwrap_or_else(|| system.calibration().initial());
            (pool.clone(), Mutex::new(state))
        })
        .collect())
}

/// Each calibrating pool's calibration at one moment.
pub struct Calibrations(Vec<(String, Calibration)>);

impl State {
    /// The pool's calibration, when the pool calibrates.
    pub fn calibration(&self, pool: &str) -> Option<Calibration> {
        self.inner
            .calibrations
            .get(pool)
            .map(|c| *c.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// The calibration of a queue's pool, when the pool calibrates.
    pub fn queue_calibration(&self, queue: &crate::ids::QueueId) -> Option<Calibration> {
        if self.inner.calibrations.is_empty() {
            return None;
        }
        self.queue_of(queue).and_then(|q| self.calibration(&q.pool))
    }

    /// Folds one result's observation into the pool's calibration (nothing for a pool that
    /// does not calibrate).
    pub(super) fn observe_calibration(&self, pool: &str, observation: &Observation) {
        let (Some(state), Some(system)) = (
            self.inner.calibrations.get(pool),
            self.inner.pool_systems.get(pool),
        ) else {
            return;
        };
        let mut state = state.lock().unwrap_or_else(|p| p.into_inner());
        *state = state.observe(observation, system.calibration());
    }

    /// Every calibrating pool's state now, for a snapshot to write.
    pub fn calibrations_now(&self) -> Calibrations {
        Calibrations(
            self.inner
                .calibrations
                .iter()
                .map(|(pool, c)| (pool.clone(), *c.lock().unwrap_or_else(|p| p.into_inner())))
                .collect(),
        )
    }

    /// Marks a snapshot up to `horizon` with the calibrations it read with it (see
    /// [`State::calibrations_now`]), in one atomic step.
    pub(super) fn finish_snapshot(
        &self,
        horizon: u64,
        states: &Calibrations,
    ) -> Result<(), StoreError> {
        let refs: Vec<(&str, &Calibration)> =
            states.0.iter().map(|(p, c)| (p.as_str(), c)).collect();
        self.inner.store.finish_snapshot_with(horizon, &refs)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::ids::MatchId;
    use crate::rating::calibration::Observation;
    use crate::records::ResultAck;
    use crate::store::{EntryKind, JournalEntry, MemoryStore};

    fn entry(observation: Option<Observation>) -> JournalEntry {
        JournalEntry {
            match_id: MatchId::new("m"),
            applied_unix: 1.0,
            pool: "1v1".into(),
            records: Vec::new(),
            parties: Vec::new(),
            ack: ResultAck {
                queue: "1v1".into(),
                changes: Vec::new(),
                report: None,
            },
            kind: EntryKind::Result,
            season: None,
            calibration: observation,
            history: None,
        }
    }

    /// A calibrating pool learns from applied entries, writes its state with a snapshot, and
    /// comes back after a restart with the snapshot's state plus the entries journaled after
    /// it; a pool that does not calibrate has no state at all.
    #[test]
    fn the_calibration_learns_persists_and_recovers() {
        let config = Arc::new(
            crate::config::Config::from_toml_str(
                "[queues.1v1.rating]\nsystem = \"glicko2\"\ncalibration = { enabled = true }\n",
            )
            .unwrap(),
        );
        let store: Store = Arc::new(MemoryStore::default());
        let state = State::load(config.clone(), store.clone()).unwrap();
        assert_eq!(state.calibration("5v5"), None, "5v5 does not calibrate");
        let start = state.calibration("1v1").unwrap();
        assert_eq!(start.slope, 1.0);
        // A timid system: favourites at 0.6 win 90% of the time.
        for i in 0..200 {
            let y = if i % 10 == 0 { 0.0 } else { 1.0 };
            state.apply_records(&entry(Some(Observation::two(0.6, y))));
        }
        state.apply_records(&entry(None));
        let learnt = state.calibration("1v1").unwrap();
        assert_eq!(learnt.results, 200);
        assert!(learnt.slope > 2.0, "{learnt:?}");
        state.snapshot(0, &state.calibrations_now()).unwrap();

        let again = State::load(config.clone(), store.clone()).unwrap();
        assert_eq!(again.calibration("1v1"), Some(learnt));
        // One more result journaled after the snapshot is folded in at recovery, once.
        let late = entry(Some(Observation::two(0.6, 1.0)));
        store
            .append_journal(1, std::slice::from_ref(&late))
            .unwrap();
        let recovered = State::load(config, store).unwrap();
        recovered.recover(0.0).unwrap();
        let after = recovered.calibration("1v1").unwrap();
        assert_eq!(after, learnt.observe_two(0.6, 1.0, &Default::default()));
        assert_eq!(after.results, 201);
    }
}

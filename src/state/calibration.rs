//! Each calibrating rating pool's calibration ([`crate::rating::calibration`]): read by
//! `PredictMatch` and the matchmaker's win model, refitted as results are applied, written with
//! every snapshot and brought back at start-up (the snapshot's value, then the observations of
//! the journal entries replayed after it).
//!
//! The state is a statistical estimate, not a record: a result applied while a snapshot was
//! being written is in that snapshot's value and, after a crash, is replayed from the journal
//! too, so it may count twice; one result among the thousands the map is fitted on moves its
//! slope by far less than the slope's own uncertainty.

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

    /// Writes every calibrating pool's state (part of a snapshot).
    pub(super) fn persist_calibrations(&self) -> Result<(), StoreError> {
        if self.inner.calibrations.is_empty() {
            return Ok(());
        }
        let states: Vec<(&str, Calibration)> = self
            .inner
            .calibrations
            .iter()
            .map(|(pool, c)| (pool.as_str(), *c.lock().unwrap_or_else(|p| p.into_inner())))
            .collect();
        let refs: Vec<(&str, &Calibration)> = states.iter().map(|(p, c)| (*p, c)).collect();
        self.inner.store.put_calibrations(&refs)
    }
}

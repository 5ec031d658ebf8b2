//! The win model the optimizer uses on a live server and in simulations: the queue's own rating
//! system's prediction, so a match's shown odds, its quality and the simulator's predictions are
//! one computation. When the pool calibrates, the model answers with calibrated probabilities
//! ([`crate::rating::calibration`]): a monotone map, so who is favoured never changes, only by
//! how much, and on the 1v1 hot path it costs one multiplication (the Glicko family's logit is
//! scaled before its `exp`).

use super::WinModel;
use crate::rating::calibration::Calibration;
use crate::rating::{Skill, SystemConfig, glicko, glicko2};

/// Adapts a queue's rating system (and its pool's calibration, if any) to the optimizer's win
/// model.
pub struct SystemModel<'a> {
    system: &'a SystemConfig,
    calibration: Option<Calibration>,
}

impl<'a> SystemModel<'a> {
    /// The system's own probabilities.
    #[must_use]
    pub fn new(system: &'a SystemConfig) -> Self {
        Self {
            system,
            calibration: None,
        }
    }

    /// The system's probabilities through the pool's calibration (`None`: uncalibrated).
    #[must_use]
    pub fn calibrated(system: &'a SystemConfig, calibration: Option<Calibration>) -> Self {
        Self {
            system,
            calibration,
        }
    }
}

impl WinModel for SystemModel<'_> {
    /// Called for every candidate pair of a 1v1 tick: the Glicko family answers without
    /// allocating; other systems go through the general prediction.
    fn win_probability_1v1(&self, a: (f64, f64), b: (f64, f64)) -> f64 {
        let skill = |(mean, deviation): (f64, f64)| Skill {
            mean,
            deviation,
            volatility: 0.06,
        };
        match (self.system, &self.calibration) {
            (SystemConfig::Glicko2(_), None) => glicko2::expected_score(&skill(a), &skill(b)),
            (SystemConfig::Glicko(_), None) => glicko::expected_score(&skill(a), &skill(b)),
            (SystemConfig::Glicko2(_), Some(c)) => {
                c.two_from_logit(glicko2::expected_logit(&skill(a), &skill(b)))
            }
            (SystemConfig::Glicko(_), Some(c)) => {
                c.two_from_logit(glicko::expected_logit(&skill(a), &skill(b)))
            }
            _ => self
                .win_probabilities(&[vec![a], vec![b]])
                .first()
                .copied()
                .unwrap_or(0.5),
        }
    }

    fn win_probabilities(&self, teams: &[Vec<(f64, f64)>]) -> Vec<f64> {
        let initial = self.system.initial();
        let skills: Vec<Vec<Skill>> = teams
            .iter()
            .map(|team| {
                team.iter()
                    .map(|&(mean, deviation)| Skill {
                        mean,
                        deviation,
                        volatility: initial.volatility,
                    })
                    .collect()
            })
            .collect();
        let refs: Vec<&[Skill]> = skills.iter().map(Vec::as_slice).collect();
        match self
            .system
            .predict_calibrated(&refs, self.calibration.as_ref())
        {
            Ok(p) => p.win_probability,
            // Unreachable for validated ratings; an even split keeps the optimizer going.
            Err(_) => vec![1.0 / teams.len().max(1) as f64; teams.len()],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rating::glicko2;

    /// Calibrated answers are the calibration applied to the system's, on both paths, and the
    /// uncalibrated model is the system itself.
    #[test]
    fn the_calibrated_model_maps_the_systems_probabilities() {
        let system = SystemConfig::Glicko2(glicko2::Config::default());
        let c = Calibration {
            slope: 1.6,
            variance: 1e-4,
            results: 1000,
        };
        let (a, b) = ((1700.0, 80.0), (1500.0, 120.0));
        let plain = SystemModel::new(&system);
        let calibrated = SystemModel::calibrated(&system, Some(c));
        let raw = plain.win_probability_1v1(a, b);
        let pair = plain.win_probabilities(&[vec![a], vec![b]]);
        assert!((raw - pair[0]).abs() < 1e-12);
        let mapped = calibrated.win_probability_1v1(a, b);
        assert!(
            (mapped - c.two(raw)).abs() < 1e-12,
            "{mapped} vs {}",
            c.two(raw)
        );
        assert!(mapped > raw, "a slope above 1 sharpens");
        let both = calibrated.win_probabilities(&[vec![a], vec![b]]);
        assert!((both[0] - mapped).abs() < 1e-12 && (both[0] + both[1] - 1.0).abs() < 1e-12);
        let fast = calibrated.pair_win_probabilities(a, b);
        assert!((fast[0] - mapped).abs() < 1e-12);
        // Other systems go through the general prediction, calibrated the same way.
        let wl = SystemConfig::WengLinBt(crate::rating::weng_lin::Config::default());
        let (x, y) = ((30.0, 3.0), (25.0, 4.0));
        let raw = SystemModel::new(&wl).win_probability_1v1(x, y);
        let mapped = SystemModel::calibrated(&wl, Some(c)).win_probability_1v1(x, y);
        assert!((mapped - c.two(raw)).abs() < 1e-12);
    }
}

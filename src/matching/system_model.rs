//! The win model the optimizer uses on a live server and in simulations: the queue's own rating
//! system's prediction, so a match's shown odds, its quality and the simulator's predictions are
//! one computation.

use super::WinModel;
use crate::rating::{Skill, SystemConfig, glicko, glicko2};

/// Adapts a queue's rating system to the optimizer's win model.
pub struct SystemModel<'a>(pub &'a SystemConfig);

impl WinModel for SystemModel<'_> {
    /// Called for every candidate pair of a 1v1 tick: the Glicko family answers without
    /// allocating; other systems go through the general prediction.
    fn win_probability_1v1(&self, a: (f64, f64), b: (f64, f64)) -> f64 {
        let skill = |(mean, deviation): (f64, f64)| Skill {
            mean,
            deviation,
            volatility: 0.06,
        };
        match self.0 {
            SystemConfig::Glicko2(_) => glicko2::expected_score(&skill(a), &skill(b)),
            SystemConfig::Glicko(_) => glicko::expected_score(&skill(a), &skill(b)),
            _ => self
                .win_probabilities(&[vec![a], vec![b]])
                .first()
                .copied()
                .unwrap_or(0.5),
        }
    }

    fn win_probabilities(&self, teams: &[Vec<(f64, f64)>]) -> Vec<f64> {
        let initial = self.0.initial();
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
        match self.0.predict(&refs) {
            Ok(p) => p.win_probability,
            // Unreachable for validated ratings; an even split keeps the optimizer going.
            Err(_) => vec![1.0 / teams.len().max(1) as f64; teams.len()],
        }
    }
}

//! The hidden truth behind a simulation: how a match's placements are drawn from true skills,
//! the win probability an oracle that knows them would give, and where a rating sits on the
//! true-skill scale.
//!
//! The outcome model is the one Josh Menke describes for simulation testing ("Skill,
//! Matchmaking, and Ranking", GDC 2016): "sample from the normal each player has, the higher
//! sample wins". Each player performs at N(true skill, `performance_sd`²), a team's performance
//! is the sum of its members', and teams are placed by performance. So team A beats team B with
//! probability Φ((ΣA − ΣB) / (`performance_sd` · sqrt(n_A + n_B))).

use rand::Rng;
use rand::rngs::StdRng;

use super::params::SimParams;
use crate::rating::SystemConfig;
use crate::rating::numeric::phi_major;

/// Maps a rating mean onto the true-skill scale, so ratings and truths can be compared.
///
/// Glicko, Glicko-2 and Elo rate on the 1500 scale the true skills are drawn on, so their means
/// are taken as they are. A Weng-Lin μ maps as `skill_mean + (μ − μ₀) · performance_sd / β`:
/// β is Weng-Lin's per-player performance noise, as `performance_sd` is the simulation's.
#[must_use]
pub fn to_true_scale(system: &SystemConfig, mean: f64, params: &SimParams) -> f64 {
    match system {
        SystemConfig::WengLinBt(c) | SystemConfig::WengLinPl(c) | SystemConfig::WengLinTm(c) => {
            params.skill_mean + (mean - c.mu) * params.performance_sd / c.beta
        }
        _ => mean,
    }
}

/// Draws one match's placements (1 = first, one per team, no ties) from the players' true skills
/// `truths` (per team): one normal performance draw per player, in team order.
pub(super) fn draw_placements(
    truths: &[Vec<f64>],
    performance_sd: f64,
    rng: &mut StdRng,
) -> Vec<u32> {
    let performance: Vec<f64> = truths
        .iter()
        .map(|team| {
            team.iter()
                .map(|truth| {
                    truth + performance_sd * rng.sample::<f64, _>(rand_distr::StandardNormal)
                })
                .sum()
        })
        .collect();
    let mut order: Vec<usize> = (0..truths.len()).collect();
    order.sort_by(|&a, &b| performance[b].total_cmp(&performance[a]));
    let mut placements = vec![0u32; truths.len()];
    for (rank, &team) in order.iter().enumerate() {
        placements[team] = rank as u32 + 1;
    }
    placements
}

/// The probability that team 0 beats team 1 given their true skills: what an oracle would
/// predict, the best any rating system could do.
#[must_use]
pub(super) fn oracle_two_team(team0: &[f64], team1: &[f64], performance_sd: f64) -> f64 {
    let players = (team0.len() + team1.len()) as f64;
    let gap = team0.iter().sum::<f64>() - team1.iter().sum::<f64>();
    phi_major(gap / (performance_sd * players.sqrt()))
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;

    use super::*;

    #[test]
    fn the_oracle_is_the_normal_cdf_of_the_scaled_gap() {
        assert_eq!(oracle_two_team(&[1500.0], &[1500.0], 200.0), 0.5);
        // A gap of one combined performance sd (200 · √2) is Φ(1).
        let gap = 200.0 * 2f64.sqrt();
        let p = oracle_two_team(&[1500.0 + gap], &[1500.0], 200.0);
        assert!((p - 0.841_344_746_068_542_9).abs() < 1e-12, "{p}");
        let q = oracle_two_team(&[1500.0], &[1500.0 + gap], 200.0);
        assert!((p + q - 1.0).abs() < 1e-12);
    }

    /// The drawn placements follow the oracle: over many draws the stronger team wins about as
    /// often as the oracle says.
    #[test]
    fn placements_follow_the_oracle() {
        let mut rng = StdRng::seed_from_u64(1);
        let teams = vec![vec![1600.0, 1500.0], vec![1450.0, 1500.0]];
        let n = 20_000;
        let wins = (0..n)
            .filter(|_| draw_placements(&teams, 200.0, &mut rng) == [1, 2])
            .count();
        let p = oracle_two_team(&teams[0], &teams[1], 200.0);
        let observed = wins as f64 / f64::from(n);
        // Four standard errors of a binomial proportion.
        let tolerance = 4.0 * (p * (1.0 - p) / f64::from(n)).sqrt();
        assert!((observed - p).abs() < tolerance, "{observed} vs {p}");
    }
}

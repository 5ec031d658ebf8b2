//! Party skill: Josh Menke's "track skill of friends together" (GDC 2016, "Skill, Matchmaking,
//! and Ranking Systems Design"). The talk gives the idea, not a formula: the initial value and
//! its widening below are this module's.
//!
//! A pre-made party (same member set) gets its own skill per rating pool: created on its first
//! queue from its members' skills with a widened deviation, then updated after each match it
//! plays, so a party that over-performs together is matched as the stronger unit it is. The
//! members' own skills still update through the normal [`SystemConfig::rate`]; this module only
//! computes the party's value. Storage and "use the party rating once it exists" belong to the
//! server.
//!
//! A party skill is per member (same scale as a player's skill): a party of four rated 1700 plays
//! like four 1700 players.

use super::{Skill, SystemConfig};

/// How far the party deviation is widened from its members' toward an unrated deviation: we
/// know the members, but not how they play together (½ = halfway).
pub const PARTY_WIDENING: f64 = 0.5;

/// A new party's skill from its members' skills.
///
/// mean = mean of the members' means; deviation d = sqrt(mean member deviation² + variance of
/// member means) widened halfway toward the unrated deviation, d + ½·(d₀ − d) when d < d₀;
/// volatility = mean member volatility (Glicko-2). Elo has no deviation: 0. The result is
/// clamped into the system's bounds. Non-finite members are skipped; with no usable member it
/// is the unrated skill.
#[must_use]
pub fn party_initial(config: &SystemConfig, members: &[Skill]) -> Skill {
    let initial = config.initial();
    let usable: Vec<&Skill> = members
        .iter()
        .filter(|s| s.mean.is_finite() && s.deviation.is_finite() && s.volatility.is_finite())
        .filter(|s| {
            s.mean.abs() <= super::MAX_ABS_MEAN && s.deviation.abs() <= super::MAX_DEVIATION
        })
        .collect();
    if usable.is_empty() {
        return initial;
    }
    let n = usable.len() as f64;
    let mean = usable.iter().map(|s| s.mean).sum::<f64>() / n;
    let spread2 = usable
        .iter()
        .map(|s| (s.mean - mean) * (s.mean - mean))
        .sum::<f64>()
        / n;
    let dev2 = usable
        .iter()
        .map(|s| s.deviation * s.deviation)
        .sum::<f64>()
        / n;
    let members_dev = (dev2 + spread2).sqrt();
    let deviation = if initial.deviation <= 0.0 {
        // Elo carries no deviation.
        0.0
    } else if members_dev < initial.deviation {
        members_dev + PARTY_WIDENING * (initial.deviation - members_dev)
    } else {
        members_dev
    };
    let volatility = if initial.volatility > 0.0 {
        usable.iter().map(|s| s.volatility).sum::<f64>() / n
    } else {
        0.0
    };
    let raw = Skill {
        mean,
        deviation,
        volatility,
    };
    // A zero-length decay applies the system's bounds (and validates the domain).
    config.decay(&raw, 0.0).unwrap_or(initial)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rating::test_util::*;
    use crate::rating::{elo, glicko, weng_lin};

    #[test]
    fn party_starts_at_member_mean_with_widened_deviation() {
        let sys = SystemConfig::Glicko(glicko::Config::default());
        let m = Skill {
            mean: 1700.0,
            deviation: 50.0,
            volatility: 0.0,
        };
        let party = party_initial(&sys, &[m, m, m]);
        assert_close(party.mean, 1700.0, 1e-9);
        // Halfway from 50 to the unrated 350.
        assert_close(party.deviation, 200.0, 1e-9);
        // Spread between members widens it further.
        let mixed = party_initial(
            &sys,
            &[Skill { mean: 1600.0, ..m }, Skill { mean: 1800.0, ..m }],
        );
        let d = (2500.0f64 + 10_000.0).sqrt();
        assert_close(mixed.deviation, d + 0.5 * (350.0 - d), 1e-9);
        // Nothing usable: unrated.
        assert_eq!(party_initial(&sys, &[]), sys.initial());
    }

    #[test]
    fn party_initial_respects_bounds_for_every_system() {
        for sys in [
            SystemConfig::default(),
            SystemConfig::WengLinPl(weng_lin::Config::default()),
            SystemConfig::Elo(elo::Config::default()),
        ] {
            let i = sys.initial();
            let party = party_initial(&sys, &[i, i]);
            assert!(party.deviation <= i.deviation + 1e-9, "{}", sys.name());
            assert_close(party.mean, i.mean, 1e-9);
        }
        let elo = SystemConfig::Elo(elo::Config::default());
        let mixed = [
            Skill {
                mean: 1400.0,
                deviation: 0.0,
                volatility: 0.0,
            },
            Skill {
                mean: 1600.0,
                deviation: 0.0,
                volatility: 0.0,
            },
        ];
        assert_eq!(
            party_initial(&elo, &mixed),
            Skill {
                mean: 1500.0,
                deviation: 0.0,
                volatility: 0.0
            }
        );
    }
}

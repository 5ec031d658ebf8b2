//! Party skill (SPEC §3.6; seed 003, "track skill of friends together").
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

use super::{MatchInput, PlayerInput, RatingError, Skill, SystemConfig};

/// How far the party deviation is widened from its members' toward an unrated deviation: we
/// know the members, but not how they play together (½ = halfway).
pub const PARTY_WIDENING: f64 = 0.5;

/// A new party's skill from its members' skills.
///
/// mean = mean of the members' means; deviation d = sqrt(mean member deviation² + variance of
/// member means) widened halfway toward the unrated deviation, d + ½·(d₀ − d) when d < d₀;
/// volatility = mean member volatility (Glicko-2) . The result is clamped into the system's
/// bounds. Non-finite members are skipped; with no usable member it is the unrated skill.
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
    let deviation = if members_dev < initial.deviation {
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

/// The party's new skill after a match in which it played as team `team` of `m`.
///
/// The match is rated as if every party member had the party skill (keeping each member's
/// elapsed time, performance and wins); the party's new skill is the mean of those members' new
/// skills. In periodic Glicko queues it is unchanged, as all ratings are until the period ends.
pub fn party_rate(
    config: &SystemConfig,
    party: &Skill,
    m: &MatchInput<'_>,
    team: usize,
) -> Result<Skill, RatingError> {
    if team >= m.teams.len() {
        return Err(RatingError::InvalidShape {
            field: "team".into(),
            rule: format!(
                "party team index {team} is out of range ({} teams)",
                m.teams.len()
            ),
        });
    }
    let teams: Vec<Vec<PlayerInput>> = m
        .teams
        .iter()
        .enumerate()
        .map(|(i, t)| {
            if i == team {
                t.iter()
                    .map(|p| PlayerInput {
                        skill: *party,
                        ..*p
                    })
                    .collect()
            } else {
                t.clone()
            }
        })
        .collect();
    let out = config.rate(&MatchInput {
        teams: &teams,
        placements: m.placements,
    })?;
    let mine = &out[team];
    let n = mine.len() as f64;
    Ok(Skill {
        mean: mine.iter().map(|s| s.mean).sum::<f64>() / n,
        deviation: mine.iter().map(|s| s.deviation).sum::<f64>() / n,
        volatility: mine.iter().map(|s| s.volatility).sum::<f64>() / n,
    })
}

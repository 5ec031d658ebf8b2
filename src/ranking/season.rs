//! Seasons: the pure arithmetic of weekly soft resets, monthly hard resets, the end-of-season
//! rank, and Elo migration, as the Skyweaver white paper (Petit, "Ranking Changes White Paper",
//! 2022) describes them.
//!
//! Everything here is values in, values out. The server (`state::admin`) decides which players a
//! reset touches, journals the after-records and applies them; this module only says what each
//! record becomes.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::RankPoints;
use super::ladder::{LadderConfig, Tier};
use crate::rating::Skill;
use crate::rejection::FieldError;

/// `[season]`: the knobs of resets and migration.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SeasonConfig {
    /// Hard reset: the rescaled Glicko ratings span `[base, base + span]` (default 750, what the
    /// white paper's formula gives; its prose says the range ends at 2000, so it is configurable).
    pub rescale_span: f64,
    /// Hard reset: the lowest rescaled rating.
    pub rescale_base: f64,
    /// Hard reset and migration: the Glicko deviation everyone starts the season with.
    pub reset_deviation: f64,
    /// Migration from Elo: legacy rank name → starting rank points.
    pub legacy_ranks: BTreeMap<String, RankPoints>,
}

impl Default for SeasonConfig {
    fn default() -> Self {
        Self {
            rescale_span: 750.0,
            rescale_base: 1500.0,
            reset_deviation: 350.0,
            legacy_ranks: BTreeMap::from([
                ("Bronze".to_owned(), 200),
                ("Silver".to_owned(), 400),
                ("Gold".to_owned(), 600),
                ("Platinum".to_owned(), 800),
                ("Diamond".to_owned(), 1000),
                ("Master".to_owned(), 1200),
            ]),
        }
    }
}

impl SeasonConfig {
    /// Checks every rule; the error's field is `season.<key>`, the path in the server config.
    pub fn validate(&self) -> Result<(), FieldError> {
        let err = |key: &str, rule: String| Err(FieldError::new(key, rule).under("season"));
        if !(self.rescale_span.is_finite() && self.rescale_span > 0.0) {
            return err(
                "rescale_span",
                format!("must be finite and > 0 (got {})", self.rescale_span),
            );
        }
        if !self.rescale_base.is_finite() {
            return err(
                "rescale_base",
                format!("must be finite (got {})", self.rescale_base),
            );
        }
        if !(self.reset_deviation.is_finite() && self.reset_deviation > 0.0) {
            return err(
                "reset_deviation",
                format!("must be finite and > 0 (got {})", self.reset_deviation),
            );
        }
        if let Some(name) = self.legacy_ranks.keys().find(|k| k.trim().is_empty()) {
            return err(
                "legacy_ranks",
                format!("rank names must not be empty (got {name:?})"),
            );
        }
        Ok(())
    }
}

/// The server's season clock. Persisted; starts at season 1, week 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SeasonState {
    /// The running season (1-based). A hard reset starts the next one.
    pub season: u32,
    /// Soft resets so far this season.
    pub week: u32,
}

impl Default for SeasonState {
    fn default() -> Self {
        Self { season: 1, week: 0 }
    }
}

/// One player's season rank, kept as history after `EndSeason`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SeasonRank {
    pub player: String,
    /// The tier the player finished in.
    pub tier: String,
    /// Rank points at the end of the season.
    pub rank_points: RankPoints,
    /// Master and above: the mean of the player's end-of-week RP (current RP if no week ended).
    pub mean_week_rp: Option<f64>,
    /// Master and above: 1-based place by `mean_week_rp` (ties broken by player id).
    pub place: Option<u32>,
}

/// Weekly soft reset of ladder RP: cut to the tier's cap if it has one.
#[must_use]
pub fn soft_reset_rp(rp: RankPoints, tier: &Tier) -> RankPoints {
    tier.soft_reset_cap.map_or(rp, |cap| rp.min(cap))
}

/// Monthly hard reset of ladder RP: the hard-reset value of the tier achieved; a tier without
/// one (Wanderer) keeps its RP.
#[must_use]
pub fn hard_reset_rp(rp: RankPoints, tier: &Tier) -> RankPoints {
    tier.hard_reset_rp.unwrap_or(rp)
}

/// Players per tier before and after a season reset, in the ladder's tier order: `before` names
/// the tier each player holds now, `after_rp` the rank points the reset leaves each player with.
/// After the reset a top-N tier goes to the best players by rank points (ties: the order given,
/// which is player id order), as the leaderboard would rank them. Returns `(tier, before, after)`.
#[must_use]
pub fn tier_counts(
    ladder: &LadderConfig,
    before: &[&str],
    after_rp: &[RankPoints],
) -> Vec<(String, u64, u64)> {
    let mut counts: Vec<(String, u64, u64)> = ladder
        .tiers
        .iter()
        .map(|t| (t.name.clone(), 0, 0))
        .collect();
    let mut bump = |name: &str, after: bool| {
        if let Some(c) = counts.iter_mut().find(|c| c.0 == name) {
            if after { c.2 += 1 } else { c.1 += 1 }
        }
    };
    for name in before {
        bump(name, false);
    }
    let mut order: Vec<usize> = (0..after_rp.len()).collect();
    // Stable: equal rank points keep the order given.
    order.sort_by(|&a, &b| after_rp[b].cmp(&after_rp[a]));
    for (rank, &i) in order.iter().enumerate() {
        bump(&ladder.tier_of(after_rp[i], Some(rank + 1)).name, true);
    }
    counts
}

/// Whether a tier counts as "Master and above" for the season rank: the tiers with a weekly cap.
#[must_use]
pub fn is_master_or_above(tier: &Tier) -> bool {
    tier.soft_reset_cap.is_some()
}

/// The hard-reset MMR rescale: `base + (r − lowest)/(highest − lowest) · span`. When every
/// player has the same rating (`highest == lowest`) everyone gets the middle of the span.
#[must_use]
pub fn rescale(r: f64, lowest: f64, highest: f64, cfg: &SeasonConfig) -> f64 {
    let width = highest - lowest;
    if !(width.is_finite() && width > 0.0) {
        return cfg.rescale_base + cfg.rescale_span / 2.0;
    }
    cfg.rescale_base + (r - lowest) / width * cfg.rescale_span
}

/// The Glicko scale the `[season]` rescale numbers are written in: initial rating and RD.
const GLICKO_SCALE: (f64, f64) = (1500.0, 350.0);

/// A player's skill after a hard reset in a pool whose initial skill is `initial`, or `None`
/// where the reset leaves skill alone (Elo: no deviation to reset and no scale to map to).
///
/// Glicko family: `rescale` with deviation `reset_deviation` and the initial volatility (the white
/// paper's rule). Weng-Lin: the same rule carried over to its own scale, reading the Glicko numbers
/// as multiples of the initial RD from the initial rating, so with the defaults μ spans μ₀ to μ₀ +
/// (750/350)·σ₀ and σ goes back to σ₀, just as r spans 1500–2250 and RD goes back to 350.
#[must_use]
pub fn hard_reset_skill(
    glicko: bool,
    initial: Skill,
    skill: Skill,
    lowest: f64,
    highest: f64,
    cfg: &SeasonConfig,
) -> Option<Skill> {
    let r = rescale(skill.mean, lowest, highest, cfg);
    if glicko {
        return Some(Skill {
            mean: r,
            deviation: cfg.reset_deviation,
            volatility: initial.volatility,
        });
    }
    if initial.deviation <= 0.0 || initial.deviation.is_nan() {
        return None;
    }
    let (base, rd) = GLICKO_SCALE;
    Some(Skill {
        mean: initial.mean + (r - base) / rd * initial.deviation,
        deviation: cfg.reset_deviation / rd * initial.deviation,
        volatility: skill.volatility,
    })
}

/// Mean of end-of-week rank points; `None` for no weeks.
#[must_use]
pub fn mean_rp(weeks: &[RankPoints]) -> Option<f64> {
    if weeks.is_empty() {
        return None;
    }
    let sum: f64 = weeks.iter().copied().map(f64::from).sum();
    #[allow(
        clippy::cast_precision_loss,
        reason = "a season has a handful of weeks"
    )]
    let n = weeks.len() as f64;
    Some(sum / n)
}

/// Season ranks of one pool: every player's tier; Master and above (by [`is_master_or_above`])
/// placed by the mean of their end-of-week RP, best first, ties by player id. `players` holds
/// (id, current RP, tier, end-of-week RP this season).
#[must_use]
pub fn season_ranks(players: Vec<(String, RankPoints, &Tier, Vec<RankPoints>)>) -> Vec<SeasonRank> {
    let mut ranks: Vec<SeasonRank> = players
        .into_iter()
        .map(|(player, rp, tier, weeks)| {
            let mean = is_master_or_above(tier).then(|| mean_rp(&weeks).unwrap_or(f64::from(rp)));
            SeasonRank {
                player,
                tier: tier.name.clone(),
                rank_points: rp,
                mean_week_rp: mean,
                place: None,
            }
        })
        .collect();
    let mut placed: Vec<usize> = (0..ranks.len())
        .filter(|&i| ranks[i].mean_week_rp.is_some())
        .collect();
    placed.sort_by(|&a, &b| {
        let (ma, mb) = (ranks[a].mean_week_rp, ranks[b].mean_week_rp);
        mb.partial_cmp(&ma)
            .unwrap_or(std::cmp::Ordering::Equal)
            .then_with(|| ranks[a].player.cmp(&ranks[b].player))
    });
    for (place, i) in placed.into_iter().enumerate() {
        ranks[i].place = u32::try_from(place + 1).ok();
    }
    ranks
}

/// Rank points a legacy rank migrates to, from `[season.legacy_ranks]`.
#[must_use]
pub fn legacy_rp(cfg: &SeasonConfig, legacy_rank: &str) -> Option<RankPoints> {
    cfg.legacy_ranks.get(legacy_rank).copied()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ranking::ladder::default_tiers;

    #[test]
    fn a_hard_reset_maps_each_system_onto_its_own_scale() {
        let cfg = SeasonConfig::default();
        let skill = |mean, deviation, volatility| Skill {
            mean,
            deviation,
            volatility,
        };
        // Glicko: the white paper's numbers as they are.
        let g = hard_reset_skill(
            true,
            skill(1500.0, 350.0, 0.06),
            skill(1800.0, 60.0, 0.07),
            1200.0,
            2000.0,
            &cfg,
        )
        .unwrap();
        assert_eq!((g.mean, g.deviation, g.volatility), (2062.5, 350.0, 0.06));
        // Weng-Lin: the same position, in initial deviations from the initial mean.
        let s0 = 25.0 / 3.0;
        let w = hard_reset_skill(
            false,
            skill(25.0, s0, 0.0),
            skill(27.5, 2.0, 0.0),
            20.0,
            30.0,
            &cfg,
        )
        .unwrap();
        assert!(
            (w.mean - (25.0 + 562.5 / 350.0 * s0)).abs() < 1e-12,
            "{w:?}"
        );
        assert!((w.deviation - s0).abs() < 1e-12, "{w:?}");
        // Elo: no deviation, left alone.
        assert!(
            hard_reset_skill(
                false,
                skill(1500.0, 0.0, 0.0),
                skill(1600.0, 0.0, 0.0),
                1500.0,
                1700.0,
                &cfg
            )
            .is_none()
        );
    }

    fn tier(name: &str) -> Tier {
        default_tiers()
            .into_iter()
            .find(|t| t.name == name)
            .unwrap()
    }

    #[test]
    fn tier_counts_before_and_after_a_reset() {
        let ladder = LadderConfig::default();
        // A Grandweaver cut to 1400, a Master cut to 1300 (still in the top 100 of those with
        // Grandweaver's 1200, so Grandweaver after), one Expert below.
        let before = ["Grandweaver", "Master", "Expert III"];
        let after = [1400, 1300, 1150];
        let counts = tier_counts(&ladder, &before, &after);
        assert_eq!(counts.len(), ladder.tiers.len());
        let row = |name: &str| counts.iter().find(|c| c.0 == name).cloned().unwrap();
        assert_eq!(row("Grandweaver"), ("Grandweaver".into(), 1, 2));
        assert_eq!(row("Master"), ("Master".into(), 1, 0));
        assert_eq!(row("Expert III"), ("Expert III".into(), 1, 1));
        let total = |f: fn(&(String, u64, u64)) -> u64| counts.iter().map(f).sum::<u64>();
        assert_eq!(total(|c| c.1), 3);
        assert_eq!(total(|c| c.2), 3);
        // A top-N tier holds at most N after the reset; the rest fall to the tier their RP earns.
        let top_n = ladder.tiers.last().unwrap().top_n.unwrap();
        let many = vec![1400; top_n + 2];
        let names = vec!["Grandweaver"; top_n + 2];
        let counts = tier_counts(&ladder, &names, &many);
        let row = |name: &str| counts.iter().find(|c| c.0 == name).cloned().unwrap();
        assert_eq!(row("Grandweaver").2, top_n as u64);
        assert_eq!(row("Master").2, 2);
    }

    #[test]
    fn soft_reset_cuts_only_above_the_cap() {
        assert_eq!(soft_reset_rp(1350, &tier("Master")), 1300);
        assert_eq!(soft_reset_rp(1250, &tier("Master")), 1250);
        assert_eq!(soft_reset_rp(1500, &tier("Grandweaver")), 1400);
        assert_eq!(soft_reset_rp(1150, &tier("Expert III")), 1150);
    }

    #[test]
    fn hard_reset_uses_the_table() {
        assert_eq!(hard_reset_rp(1350, &tier("Master")), 900);
        assert_eq!(hard_reset_rp(1500, &tier("Grandweaver")), 1000);
        assert_eq!(hard_reset_rp(950, &tier("Expert I")), 600);
        assert_eq!(hard_reset_rp(250, &tier("Wanderer")), 250);
    }

    #[test]
    fn rescale_maps_lowest_and_highest_to_the_span_ends() {
        let c = SeasonConfig::default();
        assert!((rescale(1200.0, 1200.0, 2000.0, &c) - 1500.0).abs() < 1e-12);
        assert!((rescale(2000.0, 1200.0, 2000.0, &c) - 2250.0).abs() < 1e-12);
        assert!((rescale(1600.0, 1200.0, 2000.0, &c) - 1875.0).abs() < 1e-12);
        assert!((rescale(1700.0, 1700.0, 1700.0, &c) - 1875.0).abs() < 1e-12);
    }

    #[test]
    fn season_ranks_place_masters_by_mean_weekly_rp() {
        let master = tier("Master");
        let expert = tier("Expert I");
        let ranks = season_ranks(vec![
            ("a".into(), 1300, &master, vec![1300, 1200]),
            ("b".into(), 1210, &master, vec![1400, 1300]),
            ("c".into(), 950, &expert, vec![950]),
            ("d".into(), 1240, &master, vec![]),
            ("e".into(), 1250, &master, vec![1250]),
        ]);
        let by: BTreeMap<&str, &SeasonRank> =
            ranks.iter().map(|r| (r.player.as_str(), r)).collect();
        assert_eq!(by["b"].place, Some(1));
        assert_eq!(by["b"].mean_week_rp, Some(1350.0));
        // a and e tie at 1250: player id breaks it; d has no week, so its current RP counts.
        assert_eq!(by["a"].place, Some(2));
        assert_eq!(by["e"].place, Some(3));
        assert_eq!(by["d"].place, Some(4));
        assert_eq!(by["d"].mean_week_rp, Some(1240.0));
        assert_eq!(by["c"].place, None);
        assert_eq!(by["c"].tier, "Expert I");
    }

    #[test]
    fn default_config_is_valid() {
        SeasonConfig::default().validate().unwrap();
        let c = SeasonConfig {
            rescale_span: 0.0,
            ..SeasonConfig::default()
        };
        assert!(
            c.validate()
                .unwrap_err()
                .to_string()
                .starts_with("season.rescale_span")
        );
    }
}

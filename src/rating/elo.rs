//! Elo for random teams: Samuel White, "Rated Multiplayer Competitions" (2011).
//!
//! - Team rating = Σ members / sqrt(N) ("normalised"; the exponent is configurable).
//! - Expected loss rate of the winner f = 1/(1 + 10^((R_w − R_l)/400)); adjustment
//!   = round(K·f·m), K = 16.
//! - Margin multiplier m from the **losing** team's reported productivity: 1 if the losers met
//!   what their ratings predict, 2 if short, 4 if short by more than the blowout threshold
//!   (White: 1000 skill per player, which is 100 rating points per player).
//! - Winners each gain the adjustment; losers share the winners' total gain unequally, so the
//!   total is conserved exactly (integer shares by largest remainder).
//! - Inflation: +1 per win for a player's first 800 wins (both configurable, 0 disables). This
//!   is the only term that does not conserve the total, by design.
//!
//! Productivity (`PlayerInput::performance`) is read on the rating scale: the rating the player
//! performed at this match, as the game's stats pipeline estimates it. The expected productivity
//! of a player is their own rating, so the shortfall is `rating − performance`. Without
//! productivity in the report, m = 1 and losses are shared equally. Draws: each underdog gains
//! K·(½ − E_underdog), the favourites share that loss equally. More than two teams: every pair
//! by placement with K/(n − 1).
//!
//! Deviations from the paper: players start at 1500, not 0; productivity is a performance
//! rating rather than White's game statistics; White gives no formula for the losers' unequal
//! shares, so the weights here (1 + shortfall / blowout threshold, within [¼, 4]) are this
//! module's; draws and more than two teams are extensions (White rates two-team wins).

use serde::{Deserialize, Serialize};

use crate::rejection::FieldError;

use super::calibration::CalibrationConfig;
use super::margin::{Margin, PairOutcome};
use super::{
    DisplayRating, InputRules, MatchInput, PlayerInput, Prediction, RatingError, RatingSystem,
    Skill, check_non_negative, check_positive, ensure_finite, validate_match, validate_skill,
    validate_teams, win_shares,
};

/// Parameters of an Elo queue; `Default` is White's setting, starting at 1500.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// K-factor (16: White's best trade-off of convergence and prediction).
    pub k: f64,
    /// Rating of a new player. White lets players start at 0 and ride inflation up; we start
    /// at the conventional 1500 so Elo, Glicko and the matchmaker share one scale.
    pub initial_rating: f64,
    /// Team rating = Σ ratings / N^exponent (0.5 = White's sqrt(N) normalisation).
    pub normalization_exponent: f64,
    /// Multiplier when the losers fell short of their expected productivity.
    pub short_multiplier: f64,
    /// Multiplier when they fell short by more than `blowout_threshold` per player.
    pub blowout_multiplier: f64,
    /// Shortfall per player (rating points) that makes a blowout (White: 100).
    pub blowout_threshold: f64,
    /// Rating added per win while a player has fewer than `inflation_wins` wins (White: 1).
    pub inflation_per_win: f64,
    /// Wins that earn inflation (White: 800).
    pub inflation_wins: u32,
    /// Round each adjustment to a whole rating point, as White does.
    pub round_adjustment: bool,
    /// Margin of victory from the reported team scores ([`super::margin`]); off by default.
    pub margin: Margin,
    /// Calibration of the pool's predictions ([`super::calibration`]); off by default.
    pub calibration: CalibrationConfig,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            k: 16.0,
            initial_rating: 1500.0,
            normalization_exponent: 0.5,
            short_multiplier: 2.0,
            blowout_multiplier: 4.0,
            blowout_threshold: 100.0,
            inflation_per_win: 1.0,
            inflation_wins: 800,
            round_adjustment: true,
            margin: Margin::default(),
            calibration: CalibrationConfig::default(),
        }
    }
}

impl Config {
    /// Plain two-player Elo as in the textbook (and `skillratings`): no rounding, no inflation.
    #[must_use]
    pub fn plain() -> Self {
        Self {
            round_adjustment: false,
            inflation_per_win: 0.0,
            ..Self::default()
        }
    }
}

/// f = 1/(1 + 10^((R_w − R_l)/400)): the winner's expected loss rate.
#[must_use]
#[inline]
pub fn loss_rate(winner: f64, loser: f64) -> f64 {
    1.0 / (1.0 + ((winner - loser) * (std::f64::consts::LN_10 / 400.0)).exp())
}

/// Normalised team rating Σ r / N^exponent.
#[must_use]
pub fn team_rating(ratings: impl ExactSizeIterator<Item = f64>, config: &Config) -> f64 {
    let n = ratings.len().max(1) as f64;
    ratings.sum::<f64>() / n.powf(config.normalization_exponent)
}

#[inline]
fn maybe_round(x: f64, config: &Config) -> f64 {
    if config.round_adjustment {
        x.round()
    } else {
        x
    }
}

/// Plain two-player Elo, allocation-free: `score_a` 1 win, ½ draw, 0 loss. No productivity and
/// no inflation (they need per-player reports; use [`RatingSystem::rate`]).
#[must_use]
#[inline]
pub fn rate_1v1(a: &Skill, b: &Skill, score_a: f64, config: &Config) -> (Skill, Skill) {
    // a's change is K·(s − E_a); E_a = loss_rate(b, a).
    let delta = maybe_round(config.k * (score_a - loss_rate(b.mean, a.mean)), config);
    (
        Skill {
            mean: a.mean + delta,
            ..*a
        },
        Skill {
            mean: b.mean - delta,
            ..*b
        },
    )
}

/// The margin multiplier and the loss-sharing weights of a losing team.
fn losing_team_terms(losers: &[PlayerInput], config: &Config) -> (f64, Vec<f64>) {
    let mut reported = 0usize;
    let mut total_shortfall = 0.0;
    let weights: Vec<f64> = losers
        .iter()
        .map(|p| match p.performance {
            Some(perf) => {
                let shortfall = p.skill.mean - perf;
                reported += 1;
                total_shortfall += shortfall;
                (1.0 + shortfall / config.blowout_threshold).clamp(0.25, 4.0)
            }
            None => 1.0,
        })
        .collect();
    if reported == 0 {
        return (1.0, weights);
    }
    let mean_shortfall = total_shortfall / reported as f64;
    let m = if mean_shortfall <= 0.0 {
        1.0
    } else if mean_shortfall <= config.blowout_threshold {
        config.short_multiplier
    } else {
        config.blowout_multiplier
    };
    (m, weights)
}

/// Splits `total` over `weights`: exact proportional shares, or with rounding whole points by the
/// largest-remainder method, so the shares always sum to `total` (a whole number).
fn share(total: f64, weights: &[f64], config: &Config) -> Vec<f64> {
    let sum: f64 = weights.iter().sum();
    if !config.round_adjustment {
        return weights.iter().map(|w| total * w / sum).collect();
    }
    let sign = total.signum();
    let magnitude = total.abs();
    let raw: Vec<f64> = weights.iter().map(|w| magnitude * w / sum).collect();
    let mut out: Vec<f64> = raw.iter().map(|r| r.floor()).collect();
    let mut left = (magnitude - out.iter().sum::<f64>()).round().max(0.0) as usize;
    let mut order: Vec<usize> = (0..raw.len()).collect();
    order.sort_by(|&i, &j| {
        (raw[j] - out[j])
            .total_cmp(&(raw[i] - out[i]))
            .then(i.cmp(&j))
    });
    for &i in order.iter().cycle().take(left.min(raw.len() * 64)) {
        out[i] += 1.0;
        left -= 1;
        if left == 0 {
            break;
        }
    }
    out.iter().map(|v| v * sign).collect()
}

/// Per-player rating changes from one pair of teams, `a` placed `ord` relative to `b`, added
/// into `da`, `db`. `scores` are the two teams' scores, if reported (the margin option reads
/// them).
#[allow(clippy::too_many_arguments)]
fn rate_pair(
    a: &[PlayerInput],
    b: &[PlayerInput],
    ord: std::cmp::Ordering,
    scores: Option<(f64, f64)>,
    k: f64,
    config: &Config,
    da: &mut [f64],
    db: &mut [f64],
) {
    let ra = team_rating(a.iter().map(|p| p.skill.mean), config);
    let rb = team_rating(b.iter().map(|p| p.skill.mean), config);
    let y = match ord {
        std::cmp::Ordering::Less => 1.0,
        std::cmp::Ordering::Equal => 0.5,
        std::cmp::Ordering::Greater => 0.0,
    };
    let o = match scores {
        Some((sa, sb)) => config.margin.pair(y, sa, sb, ra - rb),
        None => PairOutcome { s: y, w: 1.0 },
    };
    let flip = PairOutcome {
        s: 1.0 - o.s,
        w: o.w,
    };
    match ord {
        // Oriented by rating, not by position, so the order of teams cannot matter.
        std::cmp::Ordering::Equal if ra <= rb => draw(a, b, ra, rb, o, k, config, da, db),
        std::cmp::Ordering::Equal => draw(b, a, rb, ra, flip, k, config, db, da),
        std::cmp::Ordering::Less => win(a, b, ra, rb, o, k, config, da, db),
        std::cmp::Ordering::Greater => win(b, a, rb, ra, flip, k, config, db, da),
    }
}

/// A draw: each underdog gains K·(½ − E_underdog) (≥ 0), the favourites share that total
/// equally. With a margin, the underdog's outcome `o.s` replaces ½ and `o.w` scales the change
/// (a draw the favourite dominated on points can cost the underdog).
#[allow(clippy::too_many_arguments)]
fn draw(
    underdogs: &[PlayerInput],
    favourites: &[PlayerInput],
    ru: f64,
    rf: f64,
    o: PairOutcome,
    k: f64,
    config: &Config,
    du: &mut [f64],
    df: &mut [f64],
) {
    let per = maybe_round(k * o.w * (o.s - loss_rate(rf, ru)), config);
    for d in du.iter_mut() {
        *d += per;
    }
    let total = per * underdogs.len() as f64;
    for (d, s) in df
        .iter_mut()
        .zip(share(-total, &vec![1.0; favourites.len()], config))
    {
        *d += s;
    }
}

/// A win: each winner gains K·f·m with f the winner's expected loss rate and m the
/// productivity multiplier, the losers share the total. With a margin, the winners' outcome
/// `o.s` replaces 1 (the residual is `o.s − E_w = f − (1 − o.s)`) and `o.w` scales it.
#[allow(clippy::too_many_arguments)]
fn win(
    winners: &[PlayerInput],
    losers: &[PlayerInput],
    rw: f64,
    rl: f64,
    o: PairOutcome,
    k: f64,
    config: &Config,
    dw: &mut [f64],
    dl: &mut [f64],
) {
    let (m, weights) = losing_team_terms(losers, config);
    let residual = loss_rate(rw, rl) - (1.0 - o.s);
    let adjustment = maybe_round(k * o.w * residual * m, config);
    for d in dw.iter_mut() {
        *d += adjustment;
    }
    let total = adjustment * winners.len() as f64;
    for (d, s) in dl.iter_mut().zip(share(-total, &weights, config)) {
        *d += s;
    }
}

/// Rounds every player's change to a whole point keeping their sum (rounded): the floors, then
/// a point more for the largest remainders (Hamilton's method), ties to the earlier player.
fn round_keeping_total(deltas: &mut [Vec<f64>]) {
    let total = deltas.iter().flatten().sum::<f64>().round();
    let mut cells: Vec<(usize, usize, f64)> = deltas
        .iter()
        .enumerate()
        .flat_map(|(t, d)| d.iter().enumerate().map(move |(i, &x)| (t, i, x)))
        .collect();
    let floors: f64 = cells.iter().map(|c| c.2.floor()).sum();
    let mut left = (total - floors).max(0.0) as usize;
    cells.sort_by(|a, b| {
        (b.2 - b.2.floor())
            .total_cmp(&(a.2 - a.2.floor()))
            .then((a.0, a.1).cmp(&(b.0, b.1)))
    });
    for (t, i, x) in cells {
        let up = left > 0;
        left = left.saturating_sub(1);
        deltas[t][i] = x.floor() + if up { 1.0 } else { 0.0 };
    }
}

/// Any match: pairwise by placement, K/(n − 1) per pair, then inflation for the outright winners.
#[must_use]
pub fn rate_teams(
    teams: &[Vec<PlayerInput>],
    placements: &[u32],
    config: &Config,
) -> Vec<Vec<Skill>> {
    rate_teams_scored(teams, placements, &[], config)
}

/// [`rate_teams`] with the teams' reported scores (one per team, or none), which the margin
/// option reads.
#[must_use]
pub fn rate_teams_scored(
    teams: &[Vec<PlayerInput>],
    placements: &[u32],
    scores: &[f64],
    config: &Config,
) -> Vec<Vec<Skill>> {
    let margin = config.margin.is_active() && scores.len() == teams.len();
    let n = teams.len();
    let k = config.k / (n.max(2) - 1) as f64;
    // With more than two teams each pair's change is a fraction of K: rounded pair by pair,
    // a large free-for-all would move nobody (K/(n − 1) below ½ point) or always round the
    // favourite's share down. The pairs add up unrounded; each player's total is rounded.
    let round_totals = n > 2 && config.round_adjustment;
    let pair_config = Config {
        round_adjustment: config.round_adjustment && !round_totals,
        ..*config
    };
    let config = &pair_config;
    let mut deltas: Vec<Vec<f64>> = teams.iter().map(|t| vec![0.0; t.len()]).collect();
    for i in 0..n {
        for j in (i + 1)..n {
            let (left, right) = deltas.split_at_mut(j);
            rate_pair(
                &teams[i],
                &teams[j],
                placements[i].cmp(&placements[j]),
                margin.then(|| (scores[i], scores[j])),
                k,
                config,
                &mut left[i],
                &mut right[0],
            );
        }
    }
    if round_totals {
        round_keeping_total(&mut deltas);
    }
    let best = placements.iter().copied().min().unwrap_or(0);
    let outright = placements.iter().filter(|&&p| p == best).count() == 1;
    teams
        .iter()
        .zip(&deltas)
        .zip(placements)
        .map(|((team, d), &place)| {
            team.iter()
                .zip(d)
                .map(|(p, delta)| {
                    let bonus = if outright && place == best && p.wins < config.inflation_wins {
                        config.inflation_per_win
                    } else {
                        0.0
                    };
                    Skill {
                        mean: p.skill.mean + delta + bonus,
                        deviation: 0.0,
                        volatility: 0.0,
                    }
                })
                .collect()
        })
        .collect()
}

/// What Elo accepts as input skill (deviation and volatility are ignored but must be finite).
pub(crate) fn input_rules() -> InputRules {
    InputRules {
        deviation_positive: false,
        volatility_positive: false,
    }
}

impl RatingSystem for Config {
    fn name(&self) -> &'static str {
        "elo"
    }

    fn validate(&self) -> Result<(), FieldError> {
        check_positive("k", self.k)?;
        if !self.initial_rating.is_finite() {
            return Err(FieldError::new(
                "initial_rating",
                format!("must be finite (got {})", self.initial_rating),
            ));
        }
        check_non_negative("normalization_exponent", self.normalization_exponent)?;
        if self.normalization_exponent > 1.0 {
            return Err(FieldError::new(
                "normalization_exponent",
                format!("must be in [0, 1] (got {})", self.normalization_exponent),
            ));
        }
        check_positive("short_multiplier", self.short_multiplier)?;
        check_positive("blowout_multiplier", self.blowout_multiplier)?;
        check_positive("blowout_threshold", self.blowout_threshold)?;
        check_non_negative("inflation_per_win", self.inflation_per_win)?;
        self.margin.validate()?;
        self.calibration.validate()?;
        if self.k > 1000.0 {
            return Err(FieldError::new(
                "k",
                format!("must be at most 1000 (got {})", self.k),
            ));
        }
        Ok(())
    }

    fn initial(&self) -> Skill {
        Skill {
            mean: self.initial_rating,
            deviation: 0.0,
            volatility: 0.0,
        }
    }

    fn display(&self, s: &Skill) -> DisplayRating {
        DisplayRating {
            display: s.mean,
            low: s.mean,
            high: s.mean,
        }
    }

    fn predict(&self, teams: &[&[Skill]]) -> Result<Prediction, RatingError> {
        validate_teams(teams, &input_rules())?;
        let ratings: Vec<f64> = teams
            .iter()
            .map(|t| team_rating(t.iter().map(|s| s.mean), self))
            .collect();
        let win_probability = win_shares(ratings.len(), |i, j| loss_rate(ratings[j], ratings[i]));
        Ok(Prediction {
            win_probability,
            draw_probability: 0.0,
        })
    }

    fn rate_scored(
        &self,
        m: &MatchInput<'_>,
        scores: &[f64],
    ) -> Result<Vec<Vec<Skill>>, RatingError> {
        validate_match(m, &input_rules())?;
        super::margin::validate_scores(scores, m.teams.len())?;
        ensure_finite(
            "elo",
            rate_teams_scored(m.teams, m.placements, scores, self),
        )
    }

    fn decay(&self, s: &Skill, elapsed_seconds: f64) -> Result<Skill, RatingError> {
        validate_skill(s, &input_rules(), || "skill".into())?;
        super::validate_elapsed(elapsed_seconds, || "elapsed_seconds".into())?;
        Ok(*s)
    }

    fn rating_period_seconds(&self) -> f64 {
        7.0 * super::DAY_SECONDS
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rating::test_util::*;

    fn p(mean: f64) -> PlayerInput {
        PlayerInput::new(Skill {
            mean,
            deviation: 0.0,
            volatility: 0.0,
        })
    }

    fn with_perf(mean: f64, perf: f64) -> PlayerInput {
        PlayerInput {
            performance: Some(perf),
            ..p(mean)
        }
    }

    fn means(out: &[Vec<Skill>]) -> Vec<Vec<f64>> {
        out.iter()
            .map(|t| t.iter().map(|s| s.mean).collect())
            .collect()
    }

    #[test]
    fn equal_1v1_moves_by_half_k_plus_inflation() {
        let c = Config::default();
        let out = rate_teams(&[vec![p(1500.0)], vec![p(1500.0)]], &[1, 2], &c);
        // f = ½, adjustment = round(16·½) = 8; the winner's first-800-wins bonus adds 1.
        assert_eq!(means(&out), vec![vec![1509.0], vec![1492.0]]);
    }

    #[test]
    fn teams_are_normalised_by_sqrt_n() {
        // Σ/sqrt(N): [1600, 1400] and [1500, 1500] are both 3000/√2, so f = ½ → 8 each.
        let c = Config::plain();
        assert_close(
            team_rating([1600.0, 1400.0].into_iter(), &c),
            3000.0 / 2f64.sqrt(),
            1e-9,
        );
        let out = rate_teams(
            &[vec![p(1600.0), p(1400.0)], vec![p(1500.0), p(1500.0)]],
            &[1, 2],
            &c,
        );
        assert_eq!(
            means(&out),
            vec![vec![1608.0, 1408.0], vec![1492.0, 1492.0]]
        );
        // An upset against a 400-point (normalised) favourite pays K·10/11.
        let out = rate_teams(&[vec![p(1100.0)], vec![p(1500.0)]], &[1, 2], &c);
        assert_close(out[0][0].mean - 1100.0, 16.0 * 10.0 / 11.0, 1e-9);
    }

    #[test]
    fn productivity_multipliers_and_unequal_loss_sharing() {
        let c = Config {
            inflation_per_win: 0.0,
            ..Config::default()
        };
        let winners = vec![p(1500.0), p(1500.0)];
        // Losers met their ratings: m = 1, equal shares.
        let met = vec![with_perf(1500.0, 1500.0), with_perf(1500.0, 1520.0)];
        let out = rate_teams(&[winners.clone(), met], &[1, 2], &c);
        assert_eq!(out[0][0].mean, 1508.0);
        // Mean shortfall 50 (≤ 100 per player): m = 2, adjustment 16, total 32 shared 1 : 2 by
        // the weights 1 + shortfall/100 → 10.67 / 21.33 → 11 / 21 by largest remainder.
        let short = vec![with_perf(1500.0, 1500.0), with_perf(1500.0, 1400.0)];
        let out = rate_teams(&[winners.clone(), short], &[1, 2], &c);
        assert_eq!(
            means(&out),
            vec![vec![1516.0, 1516.0], vec![1489.0, 1479.0]]
        );
        // Mean shortfall 150 (> 100): m = 4, adjustment 32 each.
        let blowout = vec![with_perf(1500.0, 1350.0), with_perf(1500.0, 1350.0)];
        let out = rate_teams(&[winners, blowout], &[1, 2], &c);
        assert_eq!(
            means(&out),
            vec![vec![1532.0, 1532.0], vec![1468.0, 1468.0]]
        );
    }

    #[test]
    fn inflation_stops_after_the_configured_wins() {
        let c = Config::default();
        let veteran = PlayerInput {
            wins: 800,
            ..p(1500.0)
        };
        let newer = PlayerInput {
            wins: 799,
            ..p(1500.0)
        };
        let out = rate_teams(
            &[vec![veteran, newer], vec![p(1500.0), p(1500.0)]],
            &[1, 2],
            &c,
        );
        assert_eq!(means(&out)[0], vec![1508.0, 1509.0]);
        let off = Config {
            inflation_per_win: 0.0,
            ..c
        };
        let out = rate_teams(&[vec![newer], vec![p(1500.0)]], &[1, 2], &off);
        assert_eq!(out[0][0].mean, 1508.0);
    }

    #[test]
    fn draw_moves_the_underdog_up() {
        let c = Config::plain();
        let out = rate_teams(&[vec![p(1700.0)], vec![p(1500.0)]], &[1, 1], &c);
        assert!(out[0][0].mean < 1700.0 && out[1][0].mean > 1500.0);
        assert_close(out[0][0].mean + out[1][0].mean, 3200.0, 1e-9);
    }

    #[test]
    fn free_for_all_is_pairwise_with_k_over_n_minus_1() {
        let c = Config::plain();
        let out = rate_teams(
            &[vec![p(1500.0)], vec![p(1500.0)], vec![p(1500.0)]],
            &[1, 2, 3],
            &c,
        );
        // Each pair at K/2 = 8 with f = ½: +4 per win.
        assert_eq!(means(&out), vec![vec![1508.0], vec![1500.0], vec![1492.0]]);
    }

    #[test]
    fn a_large_rounded_free_for_all_moves_its_players_and_keeps_the_total() {
        // 40 players at K = 16: each pair is worth K/39 · ½ ≈ 0.2 points, which rounded pair
        // by pair would be 0; the totals are rounded instead.
        let c = Config {
            inflation_per_win: 0.0,
            ..Config::default()
        };
        assert!(c.round_adjustment);
        let teams: Vec<Vec<PlayerInput>> = (0..40).map(|_| vec![p(1500.0)]).collect();
        let placements: Vec<u32> = (1..=40).collect();
        let out = means(&rate_teams(&teams, &placements, &c));
        assert_eq!(out[0][0], 1508.0, "the winner beat 39 at ≈0.2 each");
        assert_eq!(out[39][0], 1492.0);
        assert!(out.iter().flatten().all(|m| m.fract() == 0.0));
        let total: f64 = out.iter().flatten().map(|m| m - 1500.0).sum();
        assert_eq!(total, 0.0, "points move, none are made");
        // In the middle, better places never end lower.
        assert!(out.windows(2).all(|w| w[0][0] >= w[1][0]), "{out:?}");
    }
}

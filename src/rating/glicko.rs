//! Continuous Glicko-1: Mark Glickman, "Parameter estimation in large dynamic paired comparison
//! experiments" (Applied Statistics, 1999) and his summary "The Glicko system", rated after
//! every game as in rating-update's "modified-glicko.md" (ratingupdate.info), with the RD bounds
//! of the Skyweaver white paper (Robert Petit, "Ranking Changes White Paper", 2022).
//!
//! r = 1500 and RD = 350 at start; q = ln 10 / 400; g(RD) = 1/sqrt(1 + 3q²RD²/π²);
//! E = 1/(1 + 10^(−g(RD_j)(r − r_j)/400)); d² = 1/(q² Σ g² E (1 − E));
//! r' = r + q/(1/RD² + 1/d²) · Σ g(RD_j)(s_j − E_j); RD' = sqrt(1/(1/RD² + 1/d²)) in [30, 350].
//!
//! Continuous mode: there are no rating periods for updates; before a game the deviation grows
//! by closed-form decay RD = min(sqrt(RD² + c²·t), 350) for t = elapsed virtual periods
//! (fractional), with c = sqrt((350² − RD_typical²)/t_return). Periodic mode batches a period with
//! [`rate_period`]. Win probability uses both deviations, g(sqrt(RD_a² + RD_b²)): Glickman's
//! predictive formula, which rating-update uses too.
//!
//! Deviations from the paper: in continuous mode there are no rating periods: each game is rated
//! at once, as rating-update does, and before it the deviation grows over the virtual periods
//! elapsed (closed form and fractional, where rating-update loops over whole periods); RD never
//! falls below 30 (Skyweaver; the paper has no floor). Not taken from rating-update's code: its
//! `calc_new_rating` drops the `r +` and misplaces a parenthesis; the update above is
//! Glickman's.

use serde::{Deserialize, Serialize};

use crate::rejection::FieldError;

use super::calibration::CalibrationConfig;
use super::glicko2::{display_glicko, predict_glicko, skills_unchanged};
use super::margin::Margin;
use super::teams::{self, PeriodResult, TeamStrategy};
use super::{
    DAY_SECONDS, DisplayRating, InputRules, MatchInput, Mode, Prediction, RatingError,
    RatingSystem, Skill, check_positive, ensure_finite, pair_score, validate_elapsed,
    validate_match, validate_skill,
};

/// q = ln 10 / 400.
pub const Q: f64 = std::f64::consts::LN_10 / 400.0;

/// Parameters of a Glicko-1 queue; `Default` is the continuous setting of the module docs.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// r of an unrated player.
    pub initial_rating: f64,
    /// RD of an unrated player (also the largest RD).
    pub initial_deviation: f64,
    /// Smallest RD (30, the Skyweaver white paper's), so ratings keep moving.
    pub min_deviation: f64,
    /// Largest RD (350: Glickman's unrated RD, also Skyweaver's bound).
    pub max_deviation: f64,
    /// Length of one (virtual) rating period in days (default 7).
    pub rating_period_days: f64,
    /// RD of a typical regular player, the start of the "return to unrated" clock (default 50).
    pub typical_deviation: f64,
    /// Periods of inactivity for a typical RD to grow back to `max_deviation` (default 26).
    pub periods_to_unrated: f64,
    /// Streaming (continuous) or periodic (batch at period end).
    pub mode: Mode,
    /// How team matches become per-player results.
    pub team_strategy: TeamStrategy,
    /// Glickman's c per day: RD² grows by `c_per_day²` for each day without a match. 0 (the
    /// default) derives c from `typical_deviation` and `periods_to_unrated` instead.
    pub c_per_day: f64,
    /// Margin of victory from the reported team scores ([`super::margin`]); off by default.
    pub margin: Margin,
    /// Calibration of the pool's predictions ([`super::calibration`]); off by default.
    pub calibration: CalibrationConfig,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            initial_rating: 1500.0,
            initial_deviation: 350.0,
            min_deviation: 30.0,
            max_deviation: 350.0,
            rating_period_days: 7.0,
            typical_deviation: 50.0,
            periods_to_unrated: 26.0,
            mode: Mode::Streaming,
            team_strategy: TeamStrategy::CompositeTeam,
            c_per_day: 0.0,
            margin: Margin::default(),
            calibration: CalibrationConfig::default(),
        }
    }
}

impl Config {
    /// The textbook setting: no RD floor or ceiling. Glickman's example runs on it.
    #[must_use]
    pub fn unbounded() -> Self {
        Self {
            min_deviation: 1e-9,
            max_deviation: 1e9,
            ..Self::default()
        }
    }

    /// c = sqrt((RD_max² − RD_typical²) / t): deviation growth per period (≈ 68.0 by default),
    /// or `c_per_day · sqrt(rating_period_days)` when `c_per_day` is set.
    #[must_use]
    pub fn c(&self) -> f64 {
        if self.c_per_day > 0.0 {
            return self.c_per_day * self.rating_period_days.sqrt();
        }
        let d = self.max_deviation.min(self.initial_deviation);
        ((d * d - self.typical_deviation * self.typical_deviation).max(0.0)
            / self.periods_to_unrated)
            .sqrt()
    }
}

#[inline]
fn clamp_rd(rd: f64, config: &Config) -> f64 {
    super::bound(rd, config.min_deviation, config.max_deviation)
}

/// g(RD).
#[must_use]
#[inline]
fn g(rd: f64) -> f64 {
    1.0 / (1.0 + 3.0 * Q * Q * rd * rd / (std::f64::consts::PI * std::f64::consts::PI)).sqrt()
}

/// E(r, r_j, g_j) = 1/(1 + 10^(−g_j(r − r_j)/400)), computed as exp(−g_j·q·(r − r_j)).
#[must_use]
#[inline]
fn e(r: f64, r_j: f64, g_j: f64) -> f64 {
    1.0 / (1.0 + (-g_j * Q * (r - r_j)).exp())
}

/// Probability that `a` beats `b`, using both deviations: g(sqrt(RD_a² + RD_b²)) (Glickman's
/// predictive formula).
#[must_use]
pub fn expected_score(a: &Skill, b: &Skill) -> f64 {
    e(a.mean, b.mean, g(a.deviation.hypot(b.deviation)))
}

/// The log-odds of [`expected_score`]: `g(sqrt(RD_a² + RD_b²))·q·(r_a − r_b)`.
#[must_use]
#[inline]
pub fn expected_logit(a: &Skill, b: &Skill) -> f64 {
    g(a.deviation.hypot(b.deviation)) * Q * (a.mean - b.mean)
}

/// Deviation growth for `periods` (fractional) periods of inactivity, closed form:
/// RD = min(sqrt(RD² + c²·t), RD_max), then the RD floor.
#[must_use]
pub fn decay(s: &Skill, periods: f64, config: &Config) -> Skill {
    let c = config.c();
    let rd = (s.deviation * s.deviation + c * c * periods).sqrt();
    Skill {
        deviation: clamp_rd(rd, config),
        ..*s
    }
}

/// The update from Σ q²g²E(1−E) (= 1/d²) and Σ g(s − E).
#[must_use]
#[inline]
fn update(s: &Skill, inv_d2: f64, g_score_sum: f64, config: &Config) -> Skill {
    let rd = clamp_rd(s.deviation, config);
    let precision = 1.0 / (rd * rd) + inv_d2;
    let mean = s.mean + Q / precision * g_score_sum;
    let deviation = clamp_rd((1.0 / precision).sqrt(), config);
    Skill {
        mean,
        deviation,
        volatility: 0.0,
    }
}

/// One match between two players with no inactivity: `score_a` is 1 if `a` won, ½ draw, 0 loss.
/// Allocation-free: the 1v1 hot path.
#[must_use]
#[inline]
pub fn rate_1v1(a: &Skill, b: &Skill, score_a: f64, config: &Config) -> (Skill, Skill) {
    rate_1v1_weighted(a, b, score_a, 1.0, config)
}

/// [`rate_1v1`] with a margin's outcome: `score_a` may be partial and `weight` scales both
/// players' residuals ([`super::margin`]).
#[must_use]
#[inline]
pub fn rate_1v1_weighted(
    a: &Skill,
    b: &Skill,
    score_a: f64,
    weight: f64,
    config: &Config,
) -> (Skill, Skill) {
    let ga = g(b.deviation);
    let gb = g(a.deviation);
    let ea = e(a.mean, b.mean, ga);
    let eb = e(b.mean, a.mean, gb);
    let na = update(
        a,
        Q * Q * ga * ga * ea * (1.0 - ea),
        weight * ga * (score_a - ea),
        config,
    );
    let nb = update(
        b,
        Q * Q * gb * gb * eb * (1.0 - eb),
        weight * gb * ((1.0 - score_a) - eb),
        config,
    );
    (na, nb)
}

/// Glickman's batch update of one player from a whole rating period. With no results the
/// player is unchanged (inactivity is [`decay`]'s job, applied by the caller with elapsed time).
#[must_use]
pub fn rate_period(player: &Skill, results: &[PeriodResult], config: &Config) -> Skill {
    let (mut inv_d2, mut gs) = (0.0, 0.0);
    for r in results {
        let gj = g(r.opponent.deviation);
        let ej = e(player.mean, r.opponent.mean, gj);
        inv_d2 += Q * Q * gj * gj * ej * (1.0 - ej);
        gs += r.weight * gj * (r.score - ej);
    }
    update(player, inv_d2, gs, config)
}

/// The periodic-mode update at the end of a rating period: Glickman's step 1 (RD grows by one
/// period of c, plus `elapsed_seconds` of earlier inactivity), then [`rate_period`]. With no
/// results this is one period of inactivity, as for Glicko-2. Validates everything.
pub fn rate_period_checked(
    player: &Skill,
    results: &[PeriodResult],
    elapsed_seconds: f64,
    config: &Config,
) -> Result<Skill, RatingError> {
    let rules = input_rules();
    validate_skill(player, &rules, || "player".into())?;
    validate_elapsed(elapsed_seconds, || "elapsed_seconds".into())?;
    for (k, r) in results.iter().enumerate() {
        validate_skill(&r.opponent, &rules, || format!("results[{k}].opponent"))?;
        if !(0.0..=1.0).contains(&r.score) {
            return Err(super::invalid(
                format!("results[{k}].score"),
                "must be in [0, 1]",
                r.score,
            ));
        }
        super::check_weight(r.weight, k)?;
    }
    let p = decay(
        player,
        1.0 + elapsed_seconds / config.rating_period_seconds(),
        config,
    );
    let out = rate_period(&p, results, config);
    ensure_finite("glicko", vec![vec![out]]).map(|_| out)
}

/// What Glicko-1 accepts as input skill (volatility is ignored).
pub(crate) fn input_rules() -> InputRules {
    InputRules {
        deviation_positive: true,
        volatility_positive: false,
    }
}

impl RatingSystem for Config {
    fn name(&self) -> &'static str {
        "glicko"
    }

    fn validate(&self) -> Result<(), FieldError> {
        if !self.initial_rating.is_finite() {
            return Err(FieldError::new(
                "initial_rating",
                format!("must be finite (got {})", self.initial_rating),
            ));
        }
        check_positive("initial_deviation", self.initial_deviation)?;
        check_positive("min_deviation", self.min_deviation)?;
        check_positive("max_deviation", self.max_deviation)?;
        check_positive("rating_period_days", self.rating_period_days)?;
        check_positive("typical_deviation", self.typical_deviation)?;
        check_positive("periods_to_unrated", self.periods_to_unrated)?;
        if self.min_deviation > self.max_deviation {
            return Err(FieldError::new(
                "min_deviation",
                format!(
                    "must be <= max_deviation ({} > {})",
                    self.min_deviation, self.max_deviation
                ),
            ));
        }
        if self.typical_deviation > self.max_deviation {
            return Err(FieldError::new(
                "typical_deviation",
                format!(
                    "must be <= max_deviation ({} > {})",
                    self.typical_deviation, self.max_deviation
                ),
            ));
        }
        super::check_non_negative("c_per_day", self.c_per_day)?;
        self.margin.validate()?;
        self.calibration.validate()?;
        Ok(())
    }

    fn initial(&self) -> Skill {
        Skill {
            mean: self.initial_rating,
            deviation: clamp_rd(self.initial_deviation, self),
            volatility: 0.0,
        }
    }

    fn display(&self, s: &Skill) -> DisplayRating {
        display_glicko(s)
    }

    fn predict(&self, teams: &[&[Skill]]) -> Result<Prediction, RatingError> {
        predict_glicko(teams, &input_rules(), expected_score)
    }

    fn rate_scored(
        &self,
        m: &MatchInput<'_>,
        scores: &[f64],
    ) -> Result<Vec<Vec<Skill>>, RatingError> {
        validate_match(m, &input_rules())?;
        super::margin::validate_scores(scores, m.teams.len())?;
        if self.mode == Mode::Periodic {
            return Ok(skills_unchanged(m));
        }
        let period = self.rating_period_seconds();
        let prepared = |p: &super::PlayerInput| {
            let s = Skill {
                deviation: clamp_rd(p.skill.deviation, self),
                ..p.skill
            };
            decay(&s, p.elapsed_seconds / period, self)
        };
        if let ([a], [b]) = (m.teams[0].as_slice(), m.teams[1].as_slice())
            && m.teams.len() == 2
        {
            let (pa, pb) = (prepared(a), prepared(b));
            let y = pair_score(m.placements[0], m.placements[1]);
            let o = match scores {
                [sa, sb] => self.margin.pair(y, *sa, *sb, pa.mean - pb.mean),
                _ => super::margin::PairOutcome { s: y, w: 1.0 },
            };
            let (na, nb) = rate_1v1_weighted(&pa, &pb, o.s, o.w, self);
            return ensure_finite("glicko", vec![vec![na], vec![nb]]);
        }
        let decayed: Vec<Vec<Skill>> = m
            .teams
            .iter()
            .map(|t| t.iter().map(prepared).collect())
            .collect();
        let results = teams::pairwise_scored(
            &decayed,
            m.placements,
            scores,
            &self.margin,
            self.team_strategy,
        );
        let out = decayed
            .iter()
            .zip(&results)
            .map(|(team, res)| {
                team.iter()
                    .zip(res)
                    .map(|(s, r)| rate_period(s, r, self))
                    .collect()
            })
            .collect();
        ensure_finite("glicko", out)
    }

    fn decay(&self, s: &Skill, elapsed_seconds: f64) -> Result<Skill, RatingError> {
        validate_skill(s, &input_rules(), || "skill".into())?;
        validate_elapsed(elapsed_seconds, || "elapsed_seconds".into())?;
        let out = decay(s, elapsed_seconds / self.rating_period_seconds(), self);
        ensure_finite("glicko", vec![vec![out]]).map(|_| out)
    }

    fn rating_period_seconds(&self) -> f64 {
        self.rating_period_days * DAY_SECONDS
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rating::test_util::*;

    fn skill(r: f64, rd: f64) -> Skill {
        Skill {
            mean: r,
            deviation: rd,
            volatility: 0.0,
        }
    }

    /// Glickman, "The Glicko system" example: 1500/200 beats 1400/30, loses to 1550/100 and
    /// 1700/300 → r' ≈ 1464, RD' ≈ 151.4.
    #[test]
    fn glickman_example() {
        let results = [
            PeriodResult {
                opponent: skill(1400.0, 30.0),
                score: 1.0,
                weight: 1.0,
            },
            PeriodResult {
                opponent: skill(1550.0, 100.0),
                score: 0.0,
                weight: 1.0,
            },
            PeriodResult {
                opponent: skill(1700.0, 300.0),
                score: 0.0,
                weight: 1.0,
            },
        ];
        let out = rate_period(&skill(1500.0, 200.0), &results, &Config::default());
        assert_close(out.mean, 1464.0, 0.5);
        assert_close(out.deviation, 151.4, 0.05);
        // Glickman prints d² = 231.67² (his rounding), r' = 1464.1 to one decimal.
        assert_close(out.mean, 1464.1, 0.06);
    }

    #[test]
    fn c_follows_the_closed_form() {
        let c = Config::default().c();
        assert_close(c, ((350.0_f64 * 350.0 - 2500.0) / 26.0).sqrt(), 1e-12);
        // 26 periods take RD 50 back to 350, in one closed-form step.
        let d = decay(&skill(1500.0, 50.0), 26.0, &Config::default());
        assert_close(d.deviation, 350.0, 1e-9);
        let half = decay(&skill(1500.0, 50.0), 0.5, &Config::default());
        assert_close(half.deviation, (2500.0 + 0.5 * c * c).sqrt(), 1e-9);
    }

    #[test]
    fn win_probability_uses_both_deviations() {
        let a = skill(1700.0, 300.0);
        let b = skill(1500.0, 50.0);
        let p = expected_score(&a, &b);
        let one_sided = e(1700.0, 1500.0, g(50.0));
        assert!(p < one_sided, "uncertainty about a pulls its edge toward ½");
        assert_close(expected_score(&a, &b) + expected_score(&b, &a), 1.0, 1e-12);
    }

    #[test]
    fn periodic_step_one_grows_rd_by_one_period() {
        let c = Config::default();
        let idle = rate_period_checked(&skill(1500.0, 50.0), &[], 0.0, &c).unwrap();
        assert_close(idle.deviation, (2500.0 + c.c() * c.c()).sqrt(), 1e-9);
        assert_close(idle.mean, 1500.0, 0.0);
        assert!(rate_period_checked(&skill(1500.0, 50.0), &[], -1.0, &c).is_err());
    }

    #[test]
    fn rd_floor_applies() {
        // From RD 30 one game takes the deviation below 30 (29.89 without the floor), so the
        // floor is what holds it.
        let config = Config::default();
        let unfloored = Config {
            min_deviation: 1e-9,
            ..config
        };
        let (free, _) = rate_1v1(&skill(1500.0, 30.0), &skill(1500.0, 30.0), 1.0, &unfloored);
        assert!(free.deviation < 29.95, "{}", free.deviation);
        let (a, _) = rate_1v1(&skill(1500.0, 30.0), &skill(1500.0, 30.0), 1.0, &config);
        assert_eq!(a.deviation, config.min_deviation);
    }
}

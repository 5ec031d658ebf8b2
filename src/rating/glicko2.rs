//! Glicko-2, bounded: Mark Glickman, "Example of the Glicko-2 system" (2012), with the bounds
//! and the per-match rating of Ryan Juckett, "Adding Online Skill Ranking to INVERSUS Deluxe"
//! (2018).
//!
//! Internally μ, φ, σ on the Glicko-2 scale; at the API a [`Skill`] in display units
//! (r = 173.7178·μ + 1500, RD = 173.7178·φ, volatility = σ; 173.7178 = 400/ln 10).
//!
//! - Active period: Glickman's steps 1–8, volatility by the Illinois variant of regula falsi
//!   from Glickman's initial bracket B = ln(Δ² − φ² − v).
//! - Inactivity: φ' = sqrt(φ² + t·σ²) for t rating periods, t fractional, O(1) (no loop).
//! - Bounds (INVERSUS, configurable, `bounded = false` turns them off): φ ∈ [0.175, 2.015],
//!   μ ∈ [−6.045, 6.045], σ ∈ [0.04, 0.08], applied after every update and every decay.
//! - Streaming mode: each match is one rating period for its players; periodic mode batches a
//!   period's results with [`rate_period`].
//!
//! Deviations from the paper, all as in INVERSUS: the bounds; inactivity over a fractional
//! number of periods (the paper grows φ once per whole period without games); streaming mode
//! (the paper rates a whole period's games at once). Not taken from the INVERSUS code: its
//! conversion factor 172.7178 (a typo for 173.7178) and its initial bracket, which subtracts
//! the volatility σ where Glickman subtracts the variance estimate v.
//!
//! This module does no I/O and never panics on finite input.

use serde::{Deserialize, Serialize};

use crate::rejection::FieldError;

use super::calibration::CalibrationConfig;
use super::margin::Margin;
use super::teams::{self, PeriodResult, TeamStrategy};
use super::{
    DAY_SECONDS, DisplayRating, InputRules, MatchInput, Mode, Prediction, RatingError,
    RatingSystem, Skill, bound, check_non_negative, check_positive, ensure_finite, pair_score,
    validate_elapsed, validate_match, validate_skill, validate_teams, win_shares,
};

/// Display-scale factor: r = SCALE·μ + 1500 (= 400 / ln 10, rounded as Glickman prints it).
pub const SCALE: f64 = 173.7178;
/// Display rating of μ = 0.
pub const CENTER: f64 = 1500.0;

/// Parameters of a Glicko-2 queue; `Default` is the INVERSUS setting.
///
/// Deviation, mean and volatility bounds are on the internal Glicko-2 scale, as INVERSUS states
/// them.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// System constant τ: how fast volatility may change (Glickman suggests 0.3–1.2).
    pub tau: f64,
    /// Convergence tolerance ε of the volatility iteration.
    pub convergence_tolerance: f64,
    /// φ of an unrated player (2.015 ≈ RD 350).
    pub initial_deviation: f64,
    /// σ of an unrated player.
    pub initial_volatility: f64,
    /// Apply the bounds below after every update and decay (INVERSUS). Off only for textbook
    /// checks such as Glickman's example.
    pub bounded: bool,
    /// Smallest φ: keeps ratings from stagnating.
    pub min_deviation: f64,
    /// Largest φ: never less certain than an unrated player.
    pub max_deviation: f64,
    /// |μ| bound: ±3 unrated deviations (99.7%).
    pub max_abs_mean: f64,
    /// Smallest σ.
    pub min_volatility: f64,
    /// Largest σ.
    pub max_volatility: f64,
    /// Length of one rating period in days (default 14).
    pub rating_period_days: f64,
    /// Inactivity is counted in whole multiples of this many seconds (default one day);
    /// 0 counts it exactly.
    pub inactivity_granularity_seconds: f64,
    /// Streaming (each match is a period) or periodic (batch at period end).
    pub mode: Mode,
    /// How team matches become per-player results.
    pub team_strategy: TeamStrategy,
    /// Streaming mode: grow φ by the new volatility at every match (Glickman's step 6, each
    /// match being a period). `false` measures drift in time only: φ grows by σ² per rating
    /// period of the days since the player's last match, and not again per match, so a player
    /// who plays ten matches in a day drifts as much as one who plays one.
    pub per_match_drift: bool,
    /// Margin of victory from the reported team scores ([`super::margin`]); off by default.
    pub margin: Margin,
    /// Calibration of the pool's predictions ([`super::calibration`]); off by default.
    pub calibration: CalibrationConfig,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            tau: 0.5,
            convergence_tolerance: 1e-6,
            initial_deviation: 2.015,
            initial_volatility: 0.06,
            bounded: true,
            min_deviation: 0.175,
            max_deviation: 2.015,
            max_abs_mean: 6.045,
            min_volatility: 0.04,
            max_volatility: 0.08,
            rating_period_days: 14.0,
            inactivity_granularity_seconds: DAY_SECONDS,
            mode: Mode::Streaming,
            team_strategy: TeamStrategy::CompositeTeam,
            per_match_drift: true,
            margin: Margin::default(),
            calibration: CalibrationConfig::default(),
        }
    }
}

impl Config {
    /// The textbook setting: no bounds, otherwise defaults. Glickman's example runs on it.
    #[must_use]
    pub fn unbounded() -> Self {
        Self {
            bounded: false,
            ..Self::default()
        }
    }
}

/// A rating on the internal Glicko-2 scale.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Internal {
    /// μ = (r − 1500) / 173.7178.
    pub mu: f64,
    /// φ = RD / 173.7178.
    pub phi: f64,
    /// Volatility σ.
    pub sigma: f64,
}

/// Display units → internal scale.
#[must_use]
#[inline]
pub fn to_internal(s: &Skill) -> Internal {
    Internal {
        mu: (s.mean - CENTER) / SCALE,
        phi: s.deviation / SCALE,
        sigma: s.volatility,
    }
}

/// Internal scale → display units.
#[must_use]
#[inline]
pub fn to_skill(i: Internal) -> Skill {
    Skill {
        // Plain multiply-add: without the `fma` target feature `mul_add` is a libm call.
        mean: i.mu * SCALE + CENTER,
        deviation: i.phi * SCALE,
        volatility: i.sigma,
    }
}

/// Clamps μ, φ, σ into the configured bounds (no-op when `bounded` is false).
#[must_use]
#[inline]
pub fn apply_bounds(i: Internal, config: &Config) -> Internal {
    if !config.bounded {
        return i;
    }
    Internal {
        mu: bound(i.mu, -config.max_abs_mean, config.max_abs_mean),
        phi: bound(i.phi, config.min_deviation, config.max_deviation),
        sigma: bound(i.sigma, config.min_volatility, config.max_volatility),
    }
}

/// Rating periods in `elapsed_seconds`: counted in whole granules (default days), then divided by
/// the period length, so the result is fractional.
#[must_use]
pub fn periods(elapsed_seconds: f64, config: &Config) -> f64 {
    let g = config.inactivity_granularity_seconds;
    let counted = if g > 0.0 {
        (elapsed_seconds / g).floor() * g
    } else {
        elapsed_seconds
    };
    counted / (config.rating_period_days * DAY_SECONDS)
}

/// Inactivity on the internal scale: φ' = sqrt(φ² + t·σ²), O(1) for any fractional t, then
/// bounds.
#[must_use]
#[inline]
pub fn decay_internal(i: Internal, periods: f64, config: &Config) -> Internal {
    let phi = (i.phi * i.phi + periods * i.sigma * i.sigma).sqrt();
    apply_bounds(Internal { phi, ..i }, config)
}

/// Inactivity in display units for `periods` rating periods (fractional).
#[must_use]
pub fn decay(s: &Skill, periods: f64, config: &Config) -> Skill {
    to_skill(decay_internal(to_internal(s), periods, config))
}

/// Glickman's g(φ).
#[must_use]
#[inline]
fn g(phi: f64) -> f64 {
    1.0 / (1.0 + 3.0 * phi * phi / (std::f64::consts::PI * std::f64::consts::PI)).sqrt()
}

/// Glickman's E(μ, μ_j, φ_j) given g(φ_j).
#[must_use]
#[inline]
fn e(mu: f64, mu_j: f64, g_j: f64) -> f64 {
    1.0 / (1.0 + (-g_j * (mu - mu_j)).exp())
}

/// Probability that `a` beats `b`, with both deviations combined: E with g(sqrt(φ_a² + φ_b²)).
#[must_use]
pub fn expected_score(a: &Skill, b: &Skill) -> f64 {
    let (ia, ib) = (to_internal(a), to_internal(b));
    e(ia.mu, ib.mu, g(ia.phi.hypot(ib.phi)))
}

/// The log-odds of [`expected_score`]: `g(sqrt(φ_a² + φ_b²))·(μ_a − μ_b)`, so a calibrated
/// probability is one `exp` away ([`super::calibration::Calibration::two_from_logit`]).
#[must_use]
#[inline]
pub fn expected_logit(a: &Skill, b: &Skill) -> f64 {
    let (ia, ib) = (to_internal(a), to_internal(b));
    g(ia.phi.hypot(ib.phi)) * (ia.mu - ib.mu)
}

/// The second end B of the volatility root's initial bracket, and f(B), where `gap` is
/// Δ² − φ² − v: Glickman's ln(Δ² − φ² − v) when that is defined (not the INVERSUS code's
/// `deltaSqr - variance - volatility`), else the first A − kτ where f is not negative.
#[must_use]
fn upper_bracket(a0: f64, gap: f64, tau: f64, f: impl Fn(f64) -> f64) -> (f64, f64) {
    if gap > 0.0 {
        // e^B = Δ² − φ² − v, so the first term of f(B) is 0.
        let b = gap.ln();
        (b, -(b - a0) / (tau * tau))
    } else {
        let mut k = 1.0;
        let mut fk = f(a0 - tau);
        while fk < 0.0 && k < 1000.0 {
            k += 1.0;
            fk = f(a0 - k * tau);
        }
        (a0 - k * tau, fk)
    }
}

/// Step 5: the new volatility by the Illinois variant of regula falsi (Glickman), with
/// Glickman's initial bracket B = ln(Δ² − φ² − v).
///
/// Both loops are capped so no input can spin forever; the result is finite or the old σ.
fn new_volatility(sigma: f64, phi2: f64, v: f64, delta2: f64, tau: f64, eps: f64) -> f64 {
    let s2 = sigma * sigma;
    let a0 = s2.ln();
    let inv_tau2 = 1.0 / (tau * tau);
    let gap = delta2 - phi2 - v;
    // f with e^x supplied, so the two end points whose e^x is known skip the `exp` call.
    let f_with = |x: f64, ex: f64| {
        let d = phi2 + v + ex;
        ex * (gap - ex) / (2.0 * d * d) - (x - a0) * inv_tau2
    };
    let f = |x: f64| f_with(x, x.exp());
    let mut a = a0;
    let mut fa = f_with(a0, s2);
    let (mut b, mut fb) = upper_bracket(a0, gap, tau, f);
    let mut iterations = 0;
    while (b - a).abs() > eps && iterations < 200 {
        let c = a + (a - b) * fa / (fb - fa);
        if !c.is_finite() {
            break;
        }
        let fc = f(c);
        if fc * fb <= 0.0 {
            a = b;
            fa = fb;
        } else {
            fa /= 2.0;
        }
        b = c;
        fb = fc;
        iterations += 1;
    }
    let out = (a / 2.0).exp();
    if out.is_finite() && out > 0.0 {
        out
    } else {
        sigma
    }
}

/// Steps 3–8 for one player given Σ g²E(1−E) and Σ g(s−E) over the period's results; `drift`
/// is step 6 (φ grows by the new volatility), which streaming mode may leave out
/// (`per_match_drift = false`) and a real rating period always takes.
#[must_use]
#[inline]
fn update(p: Internal, v_inv: f64, g_score_sum: f64, config: &Config, drift: bool) -> Internal {
    if v_inv.is_nan() || v_inv <= 1e-12 {
        // No information (no games, or results so lopsided E is exactly 0 or 1): one period of
        // inactivity, as Glickman prescribes for a player who did not compete.
        return decay_internal(p, 1.0, config);
    }
    let v = 1.0 / v_inv;
    let delta = v * g_score_sum;
    let sigma = new_volatility(
        p.sigma,
        p.phi * p.phi,
        v,
        delta * delta,
        config.tau,
        config.convergence_tolerance,
    );
    // φ*² = φ² + σ'² directly: no `hypot` libm call (values are O(1), no overflow risk).
    let phi_star2 = if drift {
        p.phi * p.phi + sigma * sigma
    } else {
        p.phi * p.phi
    };
    let phi = 1.0 / (1.0 / phi_star2 + v_inv).sqrt();
    let mu = p.mu + phi * phi * g_score_sum;
    apply_bounds(Internal { mu, phi, sigma }, config)
}

/// One match between two players, each as its own rating period (streaming), with no
/// inactivity: `score_a` is 1 if `a` won, ½ draw, 0 loss. Allocation-free: the 1v1 hot path.
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
    let (ia, ib) = (to_internal(a), to_internal(b));
    let (na, nb) = rate_1v1_internal(ia, ib, score_a, weight, config);
    (to_skill(na), to_skill(nb))
}

#[inline]
fn rate_1v1_internal(
    a: Internal,
    b: Internal,
    score_a: f64,
    weight: f64,
    config: &Config,
) -> (Internal, Internal) {
    let ga = g(b.phi);
    let gb = g(a.phi);
    let ea = e(a.mu, b.mu, ga);
    let eb = e(b.mu, a.mu, gb);
    let na = update(
        a,
        ga * ga * ea * (1.0 - ea),
        weight * ga * (score_a - ea),
        config,
        config.per_match_drift,
    );
    let nb = update(
        b,
        gb * gb * eb * (1.0 - eb),
        weight * gb * ((1.0 - score_a) - eb),
        config,
        config.per_match_drift,
    );
    (na, nb)
}

/// Glickman's batch update of one player from a whole rating period (periodic mode, or the
/// textbook example). No results = one period of inactivity. Opponents are read as they are
/// (their deviations are not decayed here).
#[must_use]
pub fn rate_period(player: &Skill, results: &[PeriodResult], config: &Config) -> Skill {
    to_skill(rate_period_internal(
        to_internal(player),
        results,
        config,
        true,
    ))
}

/// The update from `results`; `drift` as in [`update`]: a real rating period always grows φ,
/// one match rated as a period in streaming mode only with `per_match_drift`.
fn rate_period_internal(
    p: Internal,
    results: &[PeriodResult],
    config: &Config,
    drift: bool,
) -> Internal {
    let (mut v_inv, mut gs) = (0.0, 0.0);
    for r in results {
        let o = to_internal(&r.opponent);
        let gj = g(o.phi);
        let ej = e(p.mu, o.mu, gj);
        v_inv += gj * gj * ej * (1.0 - ej);
        gs += r.weight * gj * (r.score - ej);
    }
    update(p, v_inv, gs, config, drift)
}

/// [`rate_period`] with validation and `elapsed_seconds` of extra inactivity before the period.
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
        validate_skill(
            &r.opponent,
            &InputRules {
                volatility_positive: false,
                ..rules
            },
            || format!("results[{k}].opponent"),
        )?;
        if !(0.0..=1.0).contains(&r.score) {
            return Err(super::invalid(
                format!("results[{k}].score"),
                "must be in [0, 1]",
                r.score,
            ));
        }
        super::check_weight(r.weight, k)?;
    }
    let p = decay_internal(
        apply_bounds(to_internal(player), config),
        periods(elapsed_seconds, config),
        config,
    );
    let out = to_skill(rate_period_internal(p, results, config, true));
    ensure_finite("glicko2", vec![vec![out]]).map(|_| out)
}

/// What Glicko-2 accepts as input skill.
pub(crate) fn input_rules() -> InputRules {
    InputRules {
        deviation_positive: true,
        volatility_positive: true,
    }
}

impl RatingSystem for Config {
    fn name(&self) -> &'static str {
        "glicko2"
    }

    fn validate(&self) -> Result<(), FieldError> {
        check_positive("tau", self.tau)?;
        check_positive("convergence_tolerance", self.convergence_tolerance)?;
        check_positive("initial_deviation", self.initial_deviation)?;
        check_positive("initial_volatility", self.initial_volatility)?;
        check_positive("min_deviation", self.min_deviation)?;
        check_positive("max_deviation", self.max_deviation)?;
        check_positive("max_abs_mean", self.max_abs_mean)?;
        check_positive("min_volatility", self.min_volatility)?;
        check_positive("max_volatility", self.max_volatility)?;
        check_positive("rating_period_days", self.rating_period_days)?;
        check_non_negative(
            "inactivity_granularity_seconds",
            self.inactivity_granularity_seconds,
        )?;
        if self.tau > 10.0 {
            return Err(FieldError::new(
                "tau",
                format!("must be at most 10 (got {})", self.tau),
            ));
        }
        if self.min_deviation > self.max_deviation {
            return Err(FieldError::new(
                "min_deviation",
                format!(
                    "must be <= max_deviation ({} > {})",
                    self.min_deviation, self.max_deviation
                ),
            ));
        }
        if self.min_volatility > self.max_volatility {
            return Err(FieldError::new(
                "min_volatility",
                format!(
                    "must be <= max_volatility ({} > {})",
                    self.min_volatility, self.max_volatility
                ),
            ));
        }
        if self.max_deviation > 100.0 || self.max_abs_mean > 1000.0 {
            return Err(FieldError::new(
                "max_deviation / max_abs_mean",
                "internal-scale bounds, must be <= 100 / 1000",
            ));
        }
        self.margin.validate()?;
        self.calibration.validate()?;
        Ok(())
    }

    fn initial(&self) -> Skill {
        to_skill(apply_bounds(
            Internal {
                mu: 0.0,
                phi: self.initial_deviation,
                sigma: self.initial_volatility,
            },
            self,
        ))
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
        let prepared = |p: &super::PlayerInput| {
            decay_internal(
                apply_bounds(to_internal(&p.skill), self),
                periods(p.elapsed_seconds, self),
                self,
            )
        };
        if let ([a], [b]) = (m.teams[0].as_slice(), m.teams[1].as_slice())
            && m.teams.len() == 2
        {
            let (ia, ib) = (prepared(a), prepared(b));
            let y = pair_score(m.placements[0], m.placements[1]);
            let o = match scores {
                [sa, sb] => self.margin.pair(y, *sa, *sb, SCALE * (ia.mu - ib.mu)),
                _ => super::margin::PairOutcome { s: y, w: 1.0 },
            };
            let (na, nb) = rate_1v1_internal(ia, ib, o.s, o.w, self);
            return ensure_finite("glicko2", vec![vec![to_skill(na)], vec![to_skill(nb)]]);
        }
        let decayed: Vec<Vec<Skill>> = m
            .teams
            .iter()
            .map(|t| t.iter().map(|p| to_skill(prepared(p))).collect())
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
                    .map(|(s, r)| {
                        to_skill(rate_period_internal(
                            to_internal(s),
                            r,
                            self,
                            self.per_match_drift,
                        ))
                    })
                    .collect()
            })
            .collect();
        ensure_finite("glicko2", out)
    }

    fn decay(&self, s: &Skill, elapsed_seconds: f64) -> Result<Skill, RatingError> {
        validate_skill(s, &input_rules(), || "skill".into())?;
        validate_elapsed(elapsed_seconds, || "elapsed_seconds".into())?;
        let out = to_skill(decay_internal(
            apply_bounds(to_internal(s), self),
            periods(elapsed_seconds, self),
            self,
        ));
        ensure_finite("glicko2", vec![vec![out]]).map(|_| out)
    }

    fn rating_period_seconds(&self) -> f64 {
        self.rating_period_days * DAY_SECONDS
    }
}

/// The Glicko family's display: the rating ± its 95% interval (1.96 deviations).
pub(crate) fn display_glicko(s: &Skill) -> DisplayRating {
    DisplayRating {
        display: s.mean,
        low: s.mean - 1.96 * s.deviation,
        high: s.mean + 1.96 * s.deviation,
    }
}

/// A periodic Glicko queue rates at period end, not per match: the skills as they came in.
pub(crate) fn skills_unchanged(m: &MatchInput<'_>) -> Vec<Vec<Skill>> {
    m.teams
        .iter()
        .map(|t| t.iter().map(|p| p.skill).collect())
        .collect()
}

/// Prediction shared by the Glicko family: composite teams (mean rating, mean deviation), then
/// pairwise win probabilities spread over teams by [`win_shares`]. No draw model.
pub(crate) fn predict_glicko(
    teams: &[&[Skill]],
    rules: &InputRules,
    pairwise: fn(&Skill, &Skill) -> f64,
) -> Result<Prediction, RatingError> {
    validate_teams(teams, rules)?;
    let composite: Vec<Skill> = teams
        .iter()
        .map(|t| {
            let (mean, deviation) = teams::team_average(t);
            Skill {
                mean,
                deviation,
                volatility: 0.0,
            }
        })
        .collect();
    let win_probability = win_shares(composite.len(), |i, j| {
        pairwise(&composite[i], &composite[j])
    });
    if win_probability.iter().all(|p| p.is_finite()) {
        Ok(Prediction {
            win_probability,
            draw_probability: 0.0,
        })
    } else {
        Err(RatingError::NonFinite("prediction"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rating::test_util::*;

    fn skill(r: f64, rd: f64, vol: f64) -> Skill {
        Skill {
            mean: r,
            deviation: rd,
            volatility: vol,
        }
    }

    /// Glickman, "Example of the Glicko-2 system" (2013): 1500/200/0.06 beats 1400/30, loses to
    /// 1550/100 and 1700/300 in one period, τ = 0.5 → r' 1464.06, RD' 151.52, σ' 0.05999.
    #[test]
    fn glickman_example() {
        let player = skill(1500.0, 200.0, 0.06);
        let results = [
            PeriodResult {
                opponent: skill(1400.0, 30.0, 0.06),
                score: 1.0,
                weight: 1.0,
            },
            PeriodResult {
                opponent: skill(1550.0, 100.0, 0.06),
                score: 0.0,
                weight: 1.0,
            },
            PeriodResult {
                opponent: skill(1700.0, 300.0, 0.06),
                score: 0.0,
                weight: 1.0,
            },
        ];
        let out = rate_period(&player, &results, &Config::unbounded());
        // Glickman converts his rounded μ' = −0.2069 back (±0.00005·173.7 = ±0.009): exact
        // arithmetic gives 1464.0507.
        assert_close(out.mean, 1464.06, 0.01);
        assert_close(out.deviation, 151.52, 0.005);
        // Glickman prints σ' = 0.05999 (truncated); the exact value is 0.0599959…, the same
        // number `skillratings` documents for this example.
        assert_close(out.volatility, 0.05999, 0.000_01);
        assert_close(out.volatility, 0.059_995_984_286_488_495, 1e-15);
        // Internal-scale values Glickman prints: μ' = −0.2069, φ' = 0.8722.
        let i = to_internal(&out);
        assert_close(i.mu, -0.2069, 0.00005);
        assert_close(i.phi, 0.8722, 0.00005);
    }

    #[test]
    fn glickman_example_through_the_generic_path_matches_the_batch() {
        // Individual strategy, free-for-all would differ; here we check the periodic API.
        let sys = crate::rating::SystemConfig::Glicko2(Config {
            mode: Mode::Periodic,
            ..Config::unbounded()
        });
        let results = [
            PeriodResult {
                opponent: skill(1400.0, 30.0, 0.06),
                score: 1.0,
                weight: 1.0,
            },
            PeriodResult {
                opponent: skill(1550.0, 100.0, 0.06),
                score: 0.0,
                weight: 1.0,
            },
            PeriodResult {
                opponent: skill(1700.0, 300.0, 0.06),
                score: 0.0,
                weight: 1.0,
            },
        ];
        let out = sys
            .rate_period(&skill(1500.0, 200.0, 0.06), &results, 0.0)
            .unwrap();
        assert_close(out.mean, 1464.06, 0.01);
        // `per_match_drift` is about streaming: a real period always takes step 6, so the
        // deviation of a player who plays every period still grows by σ'² before the update.
        let no_drift = crate::rating::SystemConfig::Glicko2(Config {
            mode: Mode::Periodic,
            per_match_drift: false,
            ..Config::unbounded()
        });
        let same = no_drift
            .rate_period(&skill(1500.0, 200.0, 0.06), &results, 0.0)
            .unwrap();
        assert_eq!(same, out);
        assert_close(same.deviation, 151.52, 0.01);
    }

    #[test]
    fn scale_constant_is_400_over_ln10() {
        assert_close(SCALE, 400.0 / std::f64::consts::LN_10, 0.0001);
    }

    #[test]
    fn fractional_inactivity_is_closed_form_and_bounded() {
        let c = Config::default();
        let s = to_skill(Internal {
            mu: 1.0,
            phi: 0.5,
            sigma: 0.06,
        });
        // 7 days of a 14-day period: t = 0.5.
        let d = RatingSystem::decay(&c, &s, 7.0 * DAY_SECONDS).unwrap();
        assert_close(d.deviation / SCALE, (0.25_f64 + 0.5 * 0.0036).sqrt(), 1e-12);
        // Counted in whole days: 7.9 days is 7.
        let d2 = RatingSystem::decay(&c, &s, 7.9 * DAY_SECONDS).unwrap();
        assert_close(d2.deviation, d.deviation, 1e-12);
        // A thousand years of absence stops at the unrated deviation.
        let far = RatingSystem::decay(&c, &s, 3.0e10).unwrap();
        assert_close(far.deviation / SCALE, 2.015, 1e-12);
    }

    #[test]
    fn bounds_hold_after_update() {
        let c = Config::default();
        let top = to_skill(Internal {
            mu: 6.0,
            phi: 0.2,
            sigma: 0.08,
        });
        let low = to_skill(Internal {
            mu: -6.0,
            phi: 2.0,
            sigma: 0.04,
        });
        let (a, b) = rate_1v1(&top, &low, 1.0, &c);
        for s in [a, b] {
            let i = to_internal(&s);
            assert!(i.mu.abs() <= 6.045 + 1e-12 && (0.175..=2.015).contains(&i.phi));
            assert!((0.04..=0.08).contains(&i.sigma));
        }
    }

    #[test]
    fn an_unvalidated_config_cannot_make_the_pure_functions_panic() {
        let bad = Config {
            min_deviation: 3.0,
            max_deviation: 1.0,
            tau: f64::NAN,
            ..Config::default()
        };
        assert!(RatingSystem::validate(&bad).is_err());
        let s = to_skill(Internal {
            mu: 0.0,
            phi: 1.0,
            sigma: 0.06,
        });
        let (a, b) = rate_1v1(&s, &s, 1.0, &bad);
        assert!(a.deviation.is_finite() && b.deviation.is_finite());
    }

    #[test]
    fn the_volatility_bracket_is_glickmans_not_the_inversus_codes() {
        // A big surprise with a large variance estimate v: Glickman's B = ln(Δ² − φ² − v) and the
        // INVERSUS code's ln(Δ² − φ² − σ) differ by far. The result must be the root of Glickman's
        // f(x) = e^x(Δ² − φ² − v − e^x) / (2(φ² + v + e^x)²) − (x − ln σ²)/τ².
        let (sigma, phi2, v, delta2, tau) = (0.06_f64, 0.01, 2.0, 9.0, 0.5);
        let a0 = (sigma * sigma).ln();
        let f = |x: f64| {
            let ex = x.exp();
            ex * (delta2 - phi2 - v - ex) / (2.0 * (phi2 + v + ex).powi(2)) - (x - a0) / (tau * tau)
        };
        let glickman_b = (delta2 - phi2 - v).ln();
        let inversus_b = (delta2 - phi2 - sigma).ln();
        assert!(f(glickman_b) * f(a0) <= 0.0, "Glickman's bracket holds");
        assert!(
            (glickman_b - inversus_b).abs() > 0.2,
            "the INVERSUS bracket would differ"
        );
        // The bracket the solver starts from is Glickman's, not INVERSUS's. (Both brackets
        // hold the root here, so σ' alone could not tell them apart.)
        let (b, fb) = upper_bracket(a0, delta2 - phi2 - v, tau, f);
        assert_eq!(b, glickman_b);
        assert!(
            (fb - f(b)).abs() < 1e-12,
            "f(B) = {fb}, recomputed {}",
            f(b)
        );
        let out = new_volatility(sigma, phi2, v, delta2, tau, 1e-12);
        assert!(f((out * out).ln()).abs() < 1e-9, "σ' = {out} is the root");
        assert!(out > sigma, "a big surprise raises volatility: {out}");
    }
}

//! Self-calibration: an optional map from a rating system's win probabilities to calibrated
//! ones, refitted online from the pool's own past predictions and results.
//!
//! A rating system's probabilities are right only if its scale is: a system that learns from
//! margins (partial outcomes pull ratings together) or a K, β or deviation tuned for ranking
//! rather than prediction is systematically under- or over-confident. The map is temperature
//! scaling: team i's calibrated probability is proportional to `p_i^a`, so for two teams
//! `p' = σ(a · logit p)`, a logistic recalibration of the predicted logit with no intercept (team
//! order carries no meaning, so the map treats both teams alike), and for more teams the
//! multinomial version (Guo, Pleiss, Sun and Weinberger, "On Calibration of Modern Neural
//! Networks", ICML 2017). The map is monotone: it never changes who is favoured, only by how
//! much. `a > 1` sharpens, `a < 1` softens.
//!
//! The slope `a` is learnt one result at a time by a Laplace (extended Kalman) step, the online
//! Newton update of a one-parameter logistic regression: a Gaussian belief N(a, P) over the
//! slope, its variance grown by `drift` before each result (so the map follows a changing
//! population), then
//! `1/P' = 1/P + Var_q(ℓ)` and `a' = a + P'·(Σ_i y_i ℓ_i − Σ_i q_i ℓ_i)`, where `ℓ_i = ln p_i`
//! are the system's log-probabilities, `q_i ∝ p_i^a` the calibrated ones and `y_i` the
//! outcome (1 for the winner, shared among teams tied first). It starts at `a = 1` (the
//! system as it is) with standard deviation `prior_sd`. Each result is seen once, after its
//! prediction was made, so the map never sees the match it predicts.
//!
//! Pure: values in, values out; the server keeps one [`Calibration`] per rating pool.

use serde::{Deserialize, Serialize};

use crate::rejection::FieldError;

/// `[queues.NAME.rating.calibration]`: whether the pool calibrates and how fast it learns.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CalibrationConfig {
    /// Calibrate the pool's predictions (`PredictMatch`, match quality, shown odds). Off by
    /// default.
    pub enabled: bool,
    /// Standard deviation of the slope's starting belief around 1.
    pub prior_sd: f64,
    /// Variance added to the slope's belief before each result: how fast old results are
    /// forgotten. 0 weighs every result ever seen alike.
    pub drift: f64,
}

impl Default for CalibrationConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            prior_sd: 0.5,
            drift: 1e-6,
        }
    }
}

impl CalibrationConfig {
    /// Checks the parameters; errors name `calibration.prior_sd` / `calibration.drift`.
    pub fn validate(&self) -> Result<(), FieldError> {
        if !(self.prior_sd.is_finite() && self.prior_sd > 0.0 && self.prior_sd <= 10.0) {
            return Err(FieldError::new(
                "calibration.prior_sd",
                format!("must be finite and in (0, 10] (got {})", self.prior_sd),
            ));
        }
        if !(self.drift.is_finite() && (0.0..=1.0).contains(&self.drift)) {
            return Err(FieldError::new(
                "calibration.drift",
                format!("must be finite and in [0, 1] (got {})", self.drift),
            ));
        }
        Ok(())
    }

    /// The state of a pool that has seen no result: the identity map.
    #[must_use]
    pub fn initial(&self) -> Calibration {
        Calibration {
            slope: 1.0,
            variance: self.prior_sd * self.prior_sd,
            results: 0,
        }
    }
}

/// One pool's calibration: the slope's belief and how many results shaped it.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Calibration {
    /// The temperature `a`: calibrated `p_i ∝ p_i^a`.
    pub slope: f64,
    /// Variance of the belief about `slope`.
    pub variance: f64,
    /// Results folded in.
    pub results: u64,
}

impl Default for Calibration {
    fn default() -> Self {
        CalibrationConfig::default().initial()
    }
}

/// One result as the calibration learns from it: the system's uncalibrated win probability of
/// each team and the outcome (1 for the winner, `1/k` for each of `k` teams tied first).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Observation {
    /// The system's probability that each team finishes first, before the match.
    pub p: Vec<f64>,
    /// The outcome per team; sums to 1.
    pub y: Vec<f64>,
}

/// Smallest probability read: keeps `ln p` finite for a prediction of certainty.
const P_FLOOR: f64 = 1e-12;
/// The slope is kept in this range, whatever the data: a map never flips or flattens the
/// prediction entirely.
const SLOPE_RANGE: (f64, f64) = (0.05, 20.0);

impl Observation {
    /// The observation of a match from the system's probabilities (per team, any
    /// normalisation; a draw probability is left out) and its placements (1 = first). `None`
    /// for fewer than two teams or probabilities that are not a distribution.
    #[must_use]
    pub fn new(win_probability: &[f64], placements: &[u32]) -> Option<Self> {
        let n = win_probability.len();
        if n < 2 || placements.len() != n {
            return None;
        }
        let total: f64 = win_probability.iter().sum();
        if !(total.is_finite() && total > 0.0)
            || win_probability.iter().any(|p| p.is_nan() || *p < 0.0)
        {
            return None;
        }
        let best = placements.iter().copied().min()?;
        let firsts = placements.iter().filter(|&&p| p == best).count() as f64;
        Some(Self {
            p: win_probability.iter().map(|p| p / total).collect(),
            y: placements
                .iter()
                .map(|&p| if p == best { 1.0 / firsts } else { 0.0 })
                .collect(),
        })
    }

    /// A two-team observation: team 0's probability and its outcome (1 won, ½ draw, 0 lost).
    #[must_use]
    pub fn two(p0: f64, y0: f64) -> Self {
        Self {
            p: vec![p0, 1.0 - p0],
            y: vec![y0, 1.0 - y0],
        }
    }
}

impl Calibration {
    /// Team 0's calibrated probability in a two-team match from its uncalibrated one.
    #[must_use]
    #[inline]
    pub fn two(&self, p0: f64) -> f64 {
        let p = p0.clamp(P_FLOOR, 1.0 - P_FLOOR);
        self.two_from_logit((p / (1.0 - p)).ln())
    }

    /// Team 0's calibrated probability from its uncalibrated log-odds: `σ(a · z)`. The
    /// cheapest form, for systems whose prediction is a logistic of a known `z`.
    #[must_use]
    #[inline]
    pub fn two_from_logit(&self, z: f64) -> f64 {
        1.0 / (1.0 + (-self.slope * z).exp())
    }

    /// Calibrates per-team probabilities in place (`p_i ∝ p_i^a`, renormalised to their
    /// original total, so a draw probability outside them keeps its share).
    pub fn apply(&self, p: &mut [f64]) {
        if p.len() == 2 {
            let total = p[0] + p[1];
            if total > 0.0 && total.is_finite() {
                let p0 = self.two(p[0] / total);
                p[0] = p0 * total;
                p[1] = (1.0 - p0) * total;
            }
            return;
        }
        let total: f64 = p.iter().sum();
        if !(total > 0.0 && total.is_finite()) {
            return;
        }
        let logs: Vec<f64> = p.iter().map(|x| (x / total).max(P_FLOOR).ln()).collect();
        let top = logs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let mut sum = 0.0;
        for (x, l) in p.iter_mut().zip(&logs) {
            *x = (self.slope * (l - top)).exp();
            sum += *x;
        }
        for x in p.iter_mut() {
            *x *= total / sum;
        }
    }

    /// [`Calibration::observe`] for a two-team match without building an [`Observation`]:
    /// team 0's uncalibrated probability and its outcome (1, ½, 0). The same numbers.
    #[must_use]
    #[inline]
    pub fn observe_two(&self, p0: f64, y0: f64, config: &CalibrationConfig) -> Self {
        if !(p0.is_finite() && (0.0..=1.0).contains(&p0) && y0.is_finite()) {
            return *self;
        }
        // ℓ_0 − ℓ_1 = logit p0; with two teams Var_q(ℓ) = q0·q1·z² and the residual is
        // (y0 − q0)·z.
        let (l0, l1) = (p0.max(P_FLOOR).ln(), (1.0 - p0).max(P_FLOOR).ln());
        let z = l0 - l1;
        let q0 = 1.0 / (1.0 + (-self.slope * z).exp());
        let information = q0 * (1.0 - q0) * z * z;
        let variance = 1.0 / (1.0 / (self.variance + config.drift) + information);
        let slope = self.slope + variance * (y0 - q0) * z;
        if !(slope.is_finite() && variance.is_finite()) {
            return *self;
        }
        Self {
            slope: slope.clamp(SLOPE_RANGE.0, SLOPE_RANGE.1),
            variance,
            results: self.results.saturating_add(1),
        }
    }

    /// Folds one result in (the Laplace step of the module docs). An observation that cannot
    /// be read (NaN, wrong shape) leaves the state as it is.
    #[must_use]
    pub fn observe(&self, o: &Observation, config: &CalibrationConfig) -> Self {
        let n = o.p.len();
        if n < 2 || o.y.len() != n || o.p.iter().any(|p| !(p.is_finite() && *p >= 0.0)) {
            return *self;
        }
        let logs: Vec<f64> = o.p.iter().map(|x| x.max(P_FLOOR).ln()).collect();
        if logs.iter().any(|l| !l.is_finite()) || o.y.iter().any(|y| !y.is_finite()) {
            return *self;
        }
        let top = logs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let weights: Vec<f64> = logs
            .iter()
            .map(|l| (self.slope * (l - top)).exp())
            .collect();
        let total: f64 = weights.iter().sum();
        let (mut mean, mut second, mut target) = (0.0, 0.0, 0.0);
        for ((w, l), y) in weights.iter().zip(&logs).zip(&o.y) {
            let q = w / total;
            mean += q * l;
            second += q * l * l;
            target += y * l;
        }
        let information = (second - mean * mean).max(0.0);
        let variance = 1.0 / (1.0 / (self.variance + config.drift) + information);
        let slope = self.slope + variance * (target - mean);
        if !(slope.is_finite() && variance.is_finite()) {
            return *self;
        }
        Self {
            slope: slope.clamp(SLOPE_RANGE.0, SLOPE_RANGE.1),
            variance,
            results: self.results.saturating_add(1),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::math::SplitMix64;
    use crate::rating::test_util::assert_close;

    fn sigmoid(x: f64) -> f64 {
        1.0 / (1.0 + (-x).exp())
    }

    #[test]
    fn the_identity_changes_nothing_and_the_map_is_monotone() {
        let c = Calibration::default();
        assert_close(c.two(0.73), 0.73, 1e-12);
        let mut p = [0.5, 0.3, 0.2];
        c.apply(&mut p);
        assert_close(p[0], 0.5, 1e-12);
        assert_close(p[2], 0.2, 1e-12);
        let sharp = Calibration { slope: 2.0, ..c };
        // σ(2 · logit 0.7) = 0.7² / (0.7² + 0.3²).
        assert_close(sharp.two(0.7), 0.49 / 0.58, 1e-12);
        assert_close(
            sharp.two_from_logit((0.7f64 / 0.3).ln()),
            0.49 / 0.58,
            1e-12,
        );
        // Three teams: ∝ p², order kept, total kept (a draw share outside stays).
        let mut p = [0.45, 0.27, 0.18];
        sharp.apply(&mut p);
        let norm = 0.45f64.powi(2) + 0.27f64.powi(2) + 0.18f64.powi(2);
        assert_close(p[0], 0.9 * 0.45f64.powi(2) / norm, 1e-12);
        assert!(p[0] > p[1] && p[1] > p[2]);
        assert_close(p.iter().sum::<f64>(), 0.9, 1e-12);
        let mut two = [0.6, 0.3];
        sharp.apply(&mut two);
        assert_close(two[0] + two[1], 0.9, 1e-12);
        assert_close(two[0] / 0.9, sharp.two(0.6 / 0.9), 1e-12);
    }

    /// Synthetic matches whose true probability is σ(z) but whose system reports σ(z / 2.5)
    /// (a system 2.5 times too timid): the map learns a ≈ 2.5 and the calibrated log loss
    /// reaches the truth's. And one that reports σ(2z), twice too bold: a ≈ 0.5.
    #[test]
    fn a_known_distortion_is_recovered() {
        for (distortion, want) in [(2.5, 2.5), (0.5, 0.5)] {
            // No drift: every result weighs alike, as for a population that does not change.
            let config = CalibrationConfig {
                drift: 0.0,
                ..CalibrationConfig::default()
            };
            let mut c = config.initial();
            let mut rng = SplitMix64(11);
            let (mut raw, mut calibrated, mut truth) = (0.0, 0.0, 0.0);
            let n = 40_000;
            for i in 0..n {
                let z = 4.0 * (rng.uniform() - 0.5);
                let p_true = sigmoid(z);
                let y = if rng.uniform() < p_true { 1.0 } else { 0.0 };
                let reported = sigmoid(z / distortion);
                if i >= n / 2 {
                    let ll = |p: f64| -(y * p.ln() + (1.0 - y) * (1.0 - p).ln());
                    raw += ll(reported);
                    calibrated += ll(c.two(reported));
                    truth += ll(p_true);
                }
                c = c.observe(&Observation::two(reported, y), &config);
            }
            assert!(
                (c.slope - want).abs() < 0.05 * want,
                "distortion {distortion}: slope {}",
                c.slope
            );
            assert_eq!(c.results, n as u64);
            assert!(c.variance.sqrt() < 0.05 * want, "sd {}", c.variance.sqrt());
            assert!(calibrated < raw, "calibration helps: {calibrated} vs {raw}");
            assert!(
                (calibrated - truth) / f64::from(n / 2) < 0.002,
                "close to the truth: {calibrated} vs {truth}"
            );
        }
    }

    /// With drift, the map follows a population that changes: a system that is right and
    /// becomes 2.5 times too timid halfway is followed to a ≈ 2.5, where a map without drift
    /// stays between the two.
    #[test]
    fn drift_follows_a_change() {
        let run = |drift: f64| {
            let config = CalibrationConfig {
                drift,
                ..CalibrationConfig::default()
            };
            let mut c = config.initial();
            let mut rng = SplitMix64(21);
            for i in 0..40_000 {
                let z = 4.0 * (rng.uniform() - 0.5);
                let y = if rng.uniform() < sigmoid(z) { 1.0 } else { 0.0 };
                let distortion = if i < 20_000 { 1.0 } else { 2.5 };
                c = c.observe_two(sigmoid(z / distortion), y, &config);
            }
            c.slope
        };
        let followed = run(CalibrationConfig::default().drift);
        let stuck = run(0.0);
        assert!((followed - 2.5).abs() < 0.3, "with drift: {followed}");
        assert!(stuck < 2.0, "without drift: {stuck}");
    }

    /// Free-for-alls: a four-player system twice too timid (reports p ∝ s^0.5) is sharpened
    /// to a ≈ 2 by the multinomial step.
    #[test]
    fn a_free_for_all_distortion_is_recovered() {
        let config = CalibrationConfig::default();
        let mut c = config.initial();
        let mut rng = SplitMix64(5);
        for _ in 0..30_000 {
            let strengths: Vec<f64> = (0..4).map(|_| (3.0 * rng.uniform()).exp()).collect();
            let total: f64 = strengths.iter().sum();
            let u = rng.uniform() * total;
            let mut acc = 0.0;
            let winner = strengths
                .iter()
                .position(|s| {
                    acc += s;
                    u < acc
                })
                .unwrap_or(3);
            let reported: Vec<f64> = strengths.iter().map(|s| s.sqrt()).collect();
            let placements: Vec<u32> = (0..4).map(|i| if i == winner { 1 } else { 2 }).collect();
            let o = Observation::new(&reported, &placements).unwrap();
            c = c.observe(&o, &config);
        }
        assert!((c.slope - 2.0).abs() < 0.1, "slope {}", c.slope);
    }

    #[test]
    fn the_two_team_step_is_the_general_step() {
        let config = CalibrationConfig::default();
        let mut a = config.initial();
        let mut b = a;
        for (i, p) in [0.7, 0.2, 0.55, 0.93, 0.5, 0.01].iter().enumerate() {
            let y = [1.0, 0.0, 0.5, 1.0, 0.0, 1.0][i];
            a = a.observe(&Observation::two(*p, y), &config);
            b = b.observe_two(*p, y, &config);
            assert!((a.slope - b.slope).abs() < 1e-12, "{a:?} {b:?}");
            assert!((a.variance - b.variance).abs() < 1e-15);
            assert_eq!(a.results, b.results);
        }
        assert_eq!(b.observe_two(f64::NAN, 1.0, &config), b);
    }

    #[test]
    fn unreadable_input_changes_nothing_and_config_errors_are_named() {
        let config = CalibrationConfig::default();
        let c = config.initial();
        assert_eq!(c.observe(&Observation::two(f64::NAN, 1.0), &config), c);
        assert_eq!(Observation::new(&[0.5], &[1]), None);
        assert_eq!(Observation::new(&[0.5, f64::NAN], &[1, 2]), None);
        // Ties for first share the outcome.
        let o = Observation::new(&[0.2, 0.2, 0.6], &[1, 1, 2]).unwrap();
        assert_eq!(o.y, vec![0.5, 0.5, 0.0]);
        let bad = CalibrationConfig {
            prior_sd: 0.0,
            ..config
        };
        assert_eq!(bad.validate().unwrap_err().field, "calibration.prior_sd");
        let bad = CalibrationConfig {
            drift: -1.0,
            ..config
        };
        assert_eq!(bad.validate().unwrap_err().field, "calibration.drift");
    }
}

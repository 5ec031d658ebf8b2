//! Accuracy measures of predicted match outcomes, with the calibration test of Josh Menke's
//! "Skill, Matchmaking, and Ranking" (GDC 2016, "Test if it predicts match outcomes
//! correctly"): record each match's prediction for the favourite, then compare, prediction by
//! prediction, with how often the favourite won.
//!
//! Pure: numbers in, numbers out, no I/O. `replay`, `simulate` and `scripts/peers_replay.py` all
//! score a match the same way, written out here once:
//!
//! - Every match is reduced to one binary event, "the favourite finished first". The favourite
//!   is the team with the highest predicted win probability `p` (with two teams `p ≥ ½`). A
//!   two-team match is the usual binary forecast (log loss is symmetric, so scoring the
//!   favourite equals scoring team 0); a free-for-all becomes favourite versus the field.
//! - Predictions of systems that model draws are renormalised over the teams
//!   (`p = p_fav / Σ p_i`), so they are compared on the same event as the others.
//! - The outcome `y` is 1 if the favourite placed first alone, 0 if another team did, and
//!   `1/k` if the favourite shared first place with `k − 1` others (a 1v1 tie is ½).
//! - A prediction of exactly ½ has no favourite: it counts ½ towards accuracy whatever happened
//!   (the expected score of a coin flip), and `y` is taken as ½ in the calibration table, so an
//!   honest "I don't know" is neither rewarded nor punished by the arbitrary choice of team.
//!   Log loss and Brier are unaffected by that choice (they are symmetric at ½).
//! - Log loss `−[y ln p + (1 − y) ln(1 − p)]` with `p` clamped to `[1e-15, 1 − 1e-15]`;
//!   Brier `(p − y)²`; accuracy the mean of `y` (the favourite won); expected calibration error
//!   over 10 equal bins of the favourite's probability on `[½, 1]`:
//!   `ECE = Σ_b (n_b / n) · |mean p_b − mean y_b|`. In a free-for-all the favourite's
//!   probability can be below ½; such predictions fall in the first bin, so there ECE is
//!   coarser (calibration in the large for long-shot favourites).

use serde::Serialize;

/// Number of calibration bins on the favourite's probability: ten buckets 5 points wide.
pub const BINS: usize = 10;

/// Lower clamp on probabilities in the log loss, so one confident miss is large but finite.
const EPS: f64 = 1e-15;

/// One scored prediction: the favourite's probability and its outcome (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Scored {
    /// The favourite's win probability, in `[½, 1]` for two teams.
    pub p: f64,
    /// 1 = the favourite won, 0 = it lost, fractions for shared first places.
    pub y: f64,
}

/// Reduces a prediction and the placements of one match to a [`Scored`] event.
///
/// `win_probability` is per team (any normalisation: it is renormalised over the teams);
/// `placements` is per team, 1 = first, equal = tie. Returns `None` for a match with fewer than
/// two teams or a prediction that is not a probability vector (callers count those as skipped).
#[must_use]
pub fn score(win_probability: &[f64], placements: &[u32]) -> Option<Scored> {
    if win_probability.len() < 2 || win_probability.len() != placements.len() {
        return None;
    }
    let total: f64 = win_probability.iter().sum();
    if !(total.is_finite() && total > 0.0) || win_probability.iter().any(|p| *p < 0.0) {
        return None;
    }
    let mut fav = 0;
    for (i, p) in win_probability.iter().enumerate() {
        if *p > win_probability[fav] {
            fav = i;
        }
    }
    let p = win_probability[fav] / total;
    let best = placements.iter().copied().min()?;
    let firsts = placements.iter().filter(|&&x| x == best).count() as f64;
    let coin = win_probability.len() == 2 && win_probability[0] == win_probability[1];
    let y = if coin {
        0.5
    } else if placements[fav] == best {
        1.0 / firsts
    } else {
        0.0
    };
    Some(Scored { p, y })
}

/// [`score`] for the common two-team case without slices: `p0` is team 0's win probability
/// (draw-free), `placements` the two placements. Allocation-free for the replay hot loop.
#[must_use]
#[inline]
pub fn score_two(p0: f64, placement0: u32, placement1: u32) -> Scored {
    let y0 = match placement0.cmp(&placement1) {
        std::cmp::Ordering::Less => 1.0,
        std::cmp::Ordering::Equal => 0.5,
        std::cmp::Ordering::Greater => 0.0,
    };
    if p0 > 0.5 {
        Scored { p: p0, y: y0 }
    } else if p0 < 0.5 {
        Scored {
            p: 1.0 - p0,
            y: 1.0 - y0,
        }
    } else {
        Scored { p: 0.5, y: 0.5 }
    }
}

/// Running sums from which every measure is read; adding one match is O(1), no allocation.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Accumulator {
    n: u64,
    log_loss: f64,
    brier: f64,
    correct: f64,
    bins: [Bin; BINS],
}

/// One calibration bucket's sums.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Bin {
    n: u64,
    p: f64,
    y: f64,
}

/// Which of the [`BINS`] buckets on `[½, 1]` a favourite's probability falls in.
#[must_use]
#[inline]
pub fn bin_of(p: f64) -> usize {
    // The small nudge puts probabilities that print as a bin edge (0.6) in the bin they open,
    // whatever the rounding of `p − ½`.
    let b = ((p - 0.5) * 2.0 * BINS as f64 + 1e-9).floor();
    if b.is_nan() || b < 0.0 {
        0
    } else {
        (b as usize).min(BINS - 1)
    }
}

/// Binary log loss of `p` for outcome `y` with the clamp of the module docs.
#[must_use]
#[inline]
pub fn log_loss(p: f64, y: f64) -> f64 {
    let p = p.clamp(EPS, 1.0 - EPS);
    -(y * p.ln() + (1.0 - y) * (1.0 - p).ln())
}

impl Accumulator {
    /// An empty accumulator.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds one scored match.
    #[inline]
    pub fn add(&mut self, s: Scored) {
        self.n += 1;
        self.log_loss += log_loss(s.p, s.y);
        self.brier += (s.p - s.y) * (s.p - s.y);
        // A coin flip (p = ½) scores ½ whatever happened; `score` already set y = ½ for it.
        self.correct += s.y;
        let b = &mut self.bins[bin_of(s.p)];
        b.n += 1;
        b.p += s.p;
        b.y += s.y;
    }

    /// Adds every match of `other` (for merging per-thread or per-queue results).
    pub fn merge(&mut self, other: &Accumulator) {
        self.n += other.n;
        self.log_loss += other.log_loss;
        self.brier += other.brier;
        self.correct += other.correct;
        for (a, b) in self.bins.iter_mut().zip(&other.bins) {
            a.n += b.n;
            a.p += b.p;
            a.y += b.y;
        }
    }

    /// Matches scored.
    #[must_use]
    pub fn n(&self) -> u64 {
        self.n
    }

    /// The summary measures (all 0 when nothing was scored).
    #[must_use]
    pub fn summary(&self) -> Summary {
        if self.n == 0 {
            return Summary::default();
        }
        let n = self.n as f64;
        Summary {
            n: self.n,
            log_loss: self.log_loss / n,
            brier: self.brier / n,
            accuracy: self.correct / n,
            ece: self.ece(),
        }
    }

    /// Expected calibration error over the [`BINS`] buckets.
    #[must_use]
    pub fn ece(&self) -> f64 {
        if self.n == 0 {
            return 0.0;
        }
        let n = self.n as f64;
        self.bins
            .iter()
            .filter(|b| b.n > 0)
            .map(|b| (b.n as f64 / n) * (b.p / b.n as f64 - b.y / b.n as f64).abs())
            .sum()
    }

    /// The calibration table: per non-empty bucket, its range, count, mean prediction and how
    /// often the favourite won (Menke's "predictions vs. actuals").
    #[must_use]
    pub fn calibration(&self) -> Vec<CalibrationBin> {
        self.bins
            .iter()
            .enumerate()
            .filter(|(_, b)| b.n > 0)
            .map(|(i, b)| {
                let width = 0.5 / BINS as f64;
                CalibrationBin {
                    low: 0.5 + i as f64 * width,
                    high: 0.5 + (i + 1) as f64 * width,
                    n: b.n,
                    predicted: b.p / b.n as f64,
                    actual: b.y / b.n as f64,
                }
            })
            .collect()
    }
}

/// The headline numbers every report prints.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Summary {
    /// Matches scored.
    pub n: u64,
    /// Mean binary log loss (lower is better; ln 2 ≈ 0.693 is a coin flip).
    pub log_loss: f64,
    /// Mean Brier score (lower is better; 0.25 is a coin flip).
    pub brier: f64,
    /// How often the favourite won (coin flips count ½).
    pub accuracy: f64,
    /// Expected calibration error over 10 bins of the favourite's probability.
    pub ece: f64,
}

/// One row of the calibration table.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct CalibrationBin {
    /// Lower edge of the bucket (favourite's probability).
    pub low: f64,
    /// Upper edge.
    pub high: f64,
    /// Matches in the bucket.
    pub n: u64,
    /// Mean predicted probability of the favourite.
    pub predicted: f64,
    /// How often the favourite won.
    pub actual: f64,
}

/// The ECE a perfectly calibrated forecaster would show on these same predictions, in
/// expectation, without drawing: if each outcome were a coin with its predicted probability,
/// a bucket's gap `mean p − mean y` would be close to normal with variance
/// `Σ p(1 − p) / n_b²`, whose absolute value has mean `√(2/π)·sd`; the buckets are weighted by
/// their share of the matches as in the ECE. One pass, no randomness: it agrees with
/// [`ece_noise_floor`]'s redraws to within their own noise once buckets hold a few dozen
/// matches. An ECE near this floor is sampling noise, not miscalibration.
#[must_use]
pub fn ece_noise_expected(predictions: &[Scored]) -> f64 {
    if predictions.is_empty() {
        return 0.0;
    }
    let mut bins = [(0u64, 0.0f64); BINS];
    for s in predictions {
        let b = &mut bins[bin_of(s.p)];
        b.0 += 1;
        b.1 += s.p * (1.0 - s.p);
    }
    let n = predictions.len() as f64;
    let root_two_over_pi = (2.0 / std::f64::consts::PI).sqrt();
    bins.iter()
        .filter(|b| b.0 > 0)
        .map(|&(count, variance)| {
            (count as f64 / n) * root_two_over_pi * variance.sqrt() / count as f64
        })
        .sum()
}

/// The ECE a perfectly calibrated forecaster would show on these same predictions: each
/// outcome is redrawn as a coin with the predicted probability, `draws` times, and the mean ECE
/// is returned. An ECE near this floor is sampling noise, not miscalibration (on 6,000 matches the
/// floor is about 0.015). `next_uniform` supplies uniforms in `[0, 1)` (a seeded RNG), so the
/// result is reproducible.
pub fn ece_noise_floor(
    predictions: &[Scored],
    draws: usize,
    next_uniform: &mut dyn FnMut() -> f64,
) -> f64 {
    if predictions.is_empty() || draws == 0 {
        return 0.0;
    }
    let mut total = 0.0;
    for _ in 0..draws {
        let mut acc = Accumulator::new();
        for s in predictions {
            let y = if next_uniform() < s.p { 1.0 } else { 0.0 };
            acc.add(Scored { p: s.p, y });
        }
        total += acc.ece();
    }
    total / draws as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64, tol: f64) {
        assert!((a - b).abs() <= tol, "{a} vs {b}");
    }

    #[test]
    fn two_team_scoring_takes_the_favourites_view() {
        assert_eq!(score_two(0.7, 1, 2), Scored { p: 0.7, y: 1.0 });
        assert_eq!(score_two(0.7, 2, 1), Scored { p: 0.7, y: 0.0 });
        let s = score_two(0.3, 2, 1);
        close(s.p, 0.7, 1e-15);
        assert_eq!(s.y, 1.0);
        assert_eq!(score_two(0.5, 2, 1), Scored { p: 0.5, y: 0.5 });
        assert_eq!(score_two(0.8, 1, 1), Scored { p: 0.8, y: 0.5 });
        // The slice version agrees with the fast one.
        for (p0, a, b) in [(0.7, 1, 2), (0.3, 1, 2), (0.5, 2, 1), (0.9, 1, 1)] {
            assert_eq!(score(&[p0, 1.0 - p0], &[a, b]), Some(score_two(p0, a, b)));
        }
    }

    #[test]
    fn draws_are_renormalised_and_ffa_is_favourite_versus_field() {
        // Team 0 0.6, team 1 0.2, draw 0.2 → favourite 0.75.
        let s = score(&[0.6, 0.2], &[1, 2]).unwrap();
        close(s.p, 0.75, 1e-12);
        // Four teams, favourite (team 2) finished second.
        let s = score(&[0.1, 0.2, 0.5, 0.2], &[1, 3, 2, 4]).unwrap();
        assert_eq!(s, Scored { p: 0.5, y: 0.0 });
        // Favourite shares first with one other.
        let s = score(&[0.1, 0.2, 0.5, 0.2], &[2, 1, 1, 3]).unwrap();
        assert_eq!(s.y, 0.5);
        assert_eq!(score(&[1.0], &[1]), None);
        assert_eq!(score(&[f64::NAN, 0.5], &[1, 2]), None);
    }

    /// Measures against a direct computation by hand on a small set.
    #[test]
    fn measures_match_a_direct_computation() {
        let events = [(0.9, 1.0), (0.9, 0.0), (0.6, 1.0), (0.55, 1.0), (0.5, 0.5)];
        let mut acc = Accumulator::new();
        for (p, y) in events {
            acc.add(Scored { p, y });
        }
        let s = acc.summary();
        assert_eq!(s.n, 5);
        let ll = (-(0.9f64.ln()) - (0.1f64.ln()) - 0.6f64.ln() - 0.55f64.ln() - 0.5f64.ln()) / 5.0;
        close(s.log_loss, ll, 1e-12);
        let brier = (0.01 + 0.81 + 0.16 + 0.2025 + 0.0) / 5.0;
        close(s.brier, brier, 1e-12);
        close(s.accuracy, (1.0 + 0.0 + 1.0 + 1.0 + 0.5) / 5.0, 1e-12);
        // Bins: [0.5,0.55): {0.5 → y .5} gap 0; [0.55,0.6): {0.55 → 1} gap .45;
        // [0.6,0.65): {0.6 → 1} gap .4; [0.9,0.95): {0.9,0.9 → 0.5} gap .4.
        let ece = (0.0 + 0.45 + 0.4 + 2.0 * 0.4) / 5.0;
        close(s.ece, ece, 1e-12);
        let table = acc.calibration();
        assert_eq!(table.len(), 4);
        assert_eq!(table[3].n, 2);
        close(table[3].predicted, 0.9, 1e-12);
        close(table[3].actual, 0.5, 1e-12);
        close(table[3].low, 0.9, 1e-12);
    }

    #[test]
    fn bins_cover_the_favourites_range() {
        assert_eq!(bin_of(0.5), 0);
        assert_eq!(bin_of(0.549), 0);
        assert_eq!(bin_of(0.55), 1);
        assert_eq!(bin_of(0.999), 9);
        assert_eq!(bin_of(1.0), 9);
        assert_eq!(bin_of(f64::NAN), 0);
    }

    #[test]
    fn log_loss_is_finite_for_certain_misses_and_merge_adds_up() {
        assert!(log_loss(1.0, 0.0).is_finite());
        close(log_loss(0.5, 1.0), std::f64::consts::LN_2, 1e-15);
        let mut a = Accumulator::new();
        let mut b = Accumulator::new();
        let mut all = Accumulator::new();
        for (i, p) in [0.6, 0.7, 0.8, 0.95].into_iter().enumerate() {
            let s = Scored {
                p,
                y: (i % 2) as f64,
            };
            if i < 2 {
                a.add(s)
            } else {
                b.add(s)
            }
            all.add(s);
        }
        a.merge(&b);
        let (x, y) = (a.summary(), all.summary());
        assert_eq!(x.n, y.n);
        close(x.log_loss, y.log_loss, 1e-12);
        close(x.brier, y.brier, 1e-12);
        close(x.ece, y.ece, 1e-12);
        assert_eq!(a.calibration(), all.calibration());
    }

    #[test]
    fn the_noise_floor_shrinks_like_one_over_root_n() {
        let mut state = 1u64;
        let mut uniform = || {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1);
            (state >> 11) as f64 / (1u64 << 53) as f64
        };
        let preds = |n: usize| -> Vec<Scored> {
            (0..n)
                .map(|i| Scored {
                    p: 0.5 + 0.45 * (i % 10) as f64 / 10.0,
                    y: 0.0,
                })
                .collect()
        };
        let small = ece_noise_floor(&preds(1000), 20, &mut uniform);
        let large = ece_noise_floor(&preds(16_000), 20, &mut uniform);
        assert!(small > 0.0 && large > 0.0);
        // Four times the root: 16× the matches.
        assert!((small / large - 4.0).abs() < 1.2, "{small} {large}");
        // The closed form agrees with the redraws.
        for n in [1000, 16_000] {
            let drawn = ece_noise_floor(&preds(n), 200, &mut uniform);
            let expected = ece_noise_expected(&preds(n));
            assert!(
                (drawn / expected - 1.0).abs() < 0.1,
                "{n}: {drawn} vs {expected}"
            );
        }
        assert_eq!(ece_noise_expected(&[]), 0.0);
    }
}

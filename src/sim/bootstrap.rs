//! Is one system really better than another on a history, or is the difference noise? The
//! paired difference in log loss with a block-bootstrap confidence interval.
//!
//! Both systems predict the same matches, so the question is about the per-match differences
//! `d_i = loss_A(i) − loss_B(i)` (negative: A is better). Matches are not independent: a player
//! in form wins a whole tournament, and every match of a week shares the same ratings. So the
//! matches are resampled in blocks, one block per calendar week (weeks start on Monday): the
//! moving-block idea of Künsch ("The jackknife and the bootstrap for general stationary
//! observations", Annals of Statistics 17(3), 1989), with blocks that follow the calendar. Each
//! of `resamples` draws takes as many weeks as there are, with replacement, and computes
//! `Σ d / Σ n` over them; the 95% interval is the 2.5th to 97.5th percentile of those means (the
//! percentile bootstrap, Efron and Tibshirani, "An Introduction to the Bootstrap", 1993). An
//! interval entirely below zero says A's lead is outside the noise.
//!
//! Pure and seeded (SplitMix64): the same input gives the same interval on every platform.

use serde::Serialize;

use crate::math::{SplitMix64, percentile};

/// Draws of the bootstrap unless told otherwise.
pub const RESAMPLES: usize = 2000;
/// The seed of the draws, so a report is reproducible.
pub const SEED: u64 = 2022;

/// The paired difference of two systems' log losses on the same matches.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PairedDifference {
    /// The system compared against (the "B" of `A − B`).
    pub baseline: String,
    /// Mean of `loss_A − loss_B` over the matches both scored (negative: A is better).
    pub mean: f64,
    /// Lower end of the 95% interval.
    pub low: f64,
    /// Upper end of the 95% interval.
    pub high: f64,
    /// Matches in the comparison.
    pub matches: u64,
    /// Weeks (blocks) they fall in.
    pub weeks: usize,
    /// Bootstrap draws.
    pub resamples: usize,
}

/// The week of a day (days since 1970-01-01, a Thursday): weeks run Monday to Sunday.
#[must_use]
#[inline]
pub fn week_of(day: i32) -> i32 {
    (day + 3).div_euclid(7)
}

/// The paired difference of per-match differences `(day, loss_A − loss_B)`, in any order, with
/// its week-block bootstrap interval. `None` when there is nothing to compare.
#[must_use]
pub fn paired_difference(
    baseline: &str,
    differences: &[(i32, f64)],
    resamples: usize,
    seed: u64,
) -> Option<PairedDifference> {
    if differences.is_empty() || resamples == 0 {
        return None;
    }
    // Per-week sums and counts, in week order.
    let mut blocks: Vec<(i32, f64, u64)> = Vec::new();
    let mut sorted: Vec<(i32, f64)> = differences
        .iter()
        .map(|&(day, d)| (week_of(day), d))
        .collect();
    sorted.sort_by_key(|&(w, _)| w);
    for (week, d) in sorted {
        match blocks.last_mut() {
            Some((w, sum, n)) if *w == week => {
                *sum += d;
                *n += 1;
            }
            _ => blocks.push((week, d, 1)),
        }
    }
    let total: f64 = blocks.iter().map(|b| b.1).sum();
    let n: u64 = blocks.iter().map(|b| b.2).sum();
    let mut rng = SplitMix64(seed);
    let means: Vec<f64> = (0..resamples)
        .map(|_| {
            let (mut sum, mut count) = (0.0, 0u64);
            for _ in 0..blocks.len() {
                let b = &blocks[rng.below(blocks.len())];
                sum += b.1;
                count += b.2;
            }
            sum / count as f64
        })
        .collect();
    Some(PairedDifference {
        baseline: baseline.to_string(),
        mean: total / n as f64,
        low: percentile(&means, 0.025),
        high: percentile(&means, 0.975),
        matches: n,
        weeks: blocks.len(),
        resamples,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weeks_start_on_monday() {
        // 1970-01-01 was a Thursday; 1970-01-05 a Monday.
        assert_eq!(week_of(0), week_of(3));
        assert_ne!(week_of(3), week_of(4));
        assert_eq!(week_of(4), week_of(10));
        assert_eq!(week_of(-3), week_of(3));
        assert_ne!(week_of(-4), week_of(-3));
    }

    /// Synthetic seasons where system A's log loss is exactly 0.004 below B's on average, with
    /// noise shared within a week (form) and per match: the 95% interval covers the true 0.004
    /// in about 95% of seasons, and its width shrinks with more weeks.
    #[test]
    fn the_interval_covers_a_known_difference() {
        let truth = -0.004;
        let seasons = 200;
        let mut covered = 0;
        let mut rng = SplitMix64(99);
        let mut widths = Vec::new();
        for season in 0..seasons {
            let weeks = if season % 2 == 0 { 100 } else { 400 };
            let mut d = Vec::new();
            for week in 0..weeks {
                let form = 0.02 * rng.normal();
                for m in 0..30 {
                    // Day 4 (1970-01-05) is a Monday: each week's matches fall in one block.
                    let day = 4 + 7 * week + (m % 7);
                    d.push((day, truth + form + 0.05 * rng.normal()));
                }
            }
            // The true mean of this season's population is `truth`; the sample mean differs.
            let r = paired_difference("b", &d, 1000, season as u64).unwrap();
            assert_eq!(r.weeks, weeks as usize);
            assert_eq!(r.matches, 30 * weeks as u64);
            assert!(r.low <= r.mean && r.mean <= r.high);
            if r.low <= truth && truth <= r.high {
                covered += 1;
            }
            widths.push((weeks, r.high - r.low));
        }
        let rate = f64::from(covered) / f64::from(seasons);
        assert!((0.90..=0.99).contains(&rate), "coverage {rate}");
        let width = |w: i32| {
            let v: Vec<f64> = widths.iter().filter(|x| x.0 == w).map(|x| x.1).collect();
            v.iter().sum::<f64>() / v.len() as f64
        };
        // Four times the weeks: half the width.
        let ratio = width(100) / width(400);
        assert!((1.7..2.3).contains(&ratio), "width ratio {ratio}");
    }

    /// Ignoring the weekly form would understate the noise: the week blocks give a wider
    /// interval than resampling single matches would, close to the form's own spread.
    #[test]
    fn week_blocks_carry_the_weekly_noise() {
        let mut rng = SplitMix64(3);
        let mut d = Vec::new();
        for week in 0..200 {
            let form = 0.03 * rng.normal();
            for m in 0..40 {
                d.push((4 + 7 * week + m % 7, form + 0.01 * rng.normal()));
            }
        }
        let blocked = paired_difference("b", &d, 2000, 1).unwrap();
        // One day per "week" turns every match into its own block.
        let single: Vec<(i32, f64)> = d
            .iter()
            .enumerate()
            .map(|(i, x)| (7 * i as i32, x.1))
            .collect();
        let naive = paired_difference("b", &single, 2000, 1).unwrap();
        assert!((blocked.mean - naive.mean).abs() < 1e-12);
        let (wb, wn) = (blocked.high - blocked.low, naive.high - naive.low);
        assert!(wb > 3.0 * wn, "blocked {wb} vs naive {wn}");
        // The spread of a mean of 200 weekly forms of sd 0.03: 2·1.96·0.03/√200 ≈ 0.0083.
        assert!((0.006..0.011).contains(&wb), "blocked width {wb}");
    }

    #[test]
    fn nothing_to_compare_is_none_and_the_result_is_reproducible() {
        assert_eq!(paired_difference("b", &[], 100, 1), None);
        let d: Vec<(i32, f64)> = (0..500).map(|i| (i, (i % 13) as f64 * 0.001)).collect();
        assert_eq!(
            paired_difference("b", &d, 300, 7),
            paired_difference("b", &d, 300, 7)
        );
    }
}

//! Small numeric helpers shared by the server, the simulator and the tools.

/// The `q`-quantile (0..=1) of the finite `values` by nearest rank (the smallest value with at
/// least `q·n` values at or below it); 0 when there are none.
#[must_use]
pub fn percentile<'a>(values: impl IntoIterator<Item = &'a f64>, q: f64) -> f64 {
    let mut v: Vec<f64> = values
        .into_iter()
        .copied()
        .filter(|x| x.is_finite())
        .collect();
    if v.is_empty() {
        return 0.0;
    }
    v.sort_unstable_by(f64::total_cmp);
    let rank = (q.clamp(0.0, 1.0) * v.len() as f64).ceil() as usize;
    v[rank.clamp(1, v.len()) - 1]
}

#[cfg(test)]
mod tests {
    use super::percentile;

    #[test]
    fn percentiles_by_nearest_rank() {
        let v: Vec<f64> = (1..=10).map(f64::from).collect();
        assert_eq!(percentile(&v, 0.5), 5.0);
        assert_eq!(percentile(&v, 0.95), 10.0);
        assert_eq!(percentile(&v, 0.0), 1.0);
        assert_eq!(percentile(&v, 1.0), 10.0);
        assert_eq!(percentile(&[3.0, f64::NAN, 1.0, 2.0], 0.5), 2.0);
        assert_eq!(percentile(&[], 0.5), 0.0);
        assert_eq!(percentile(&[f64::INFINITY], 0.5), 0.0);
    }
}

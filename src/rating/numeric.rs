//! Small numeric helpers without dependencies: the standard normal distribution to double
//! precision (Thurstone-Mosteller needs it, and the crate has no statistics dependency).

use std::f64::consts::PI;

/// erfc(x) for x >= 0, to about 1e-15 relative: a positive-term series for erf below 2 (no
/// cancellation), Lentz's continued fraction above (keeps relative accuracy deep in the tail).
fn erfc_non_negative(x: f64) -> f64 {
    if x < 2.0 {
        // erf(x) = 2/sqrt(π) · e^{−x²} · Σ 2ⁿ x^{2n+1} / (1·3·…·(2n+1)).
        let mut term = x;
        let mut sum = x;
        let mut n = 0.0;
        while n < 200.0 {
            term *= 2.0 * x * x / (2.0 * n + 3.0);
            sum += term;
            if term < sum * 1e-17 {
                break;
            }
            n += 1.0;
        }
        1.0 - 2.0 / PI.sqrt() * (-x * x).exp() * sum
    } else {
        // erfc(x) = e^{−x²}/sqrt(π) / (x + (1/2)/(x + 1/(x + (3/2)/(x + …)))).
        let tiny = 1e-300;
        let mut f = x;
        let mut c = x;
        let mut d = 0.0;
        let mut j = 1.0;
        while j < 1000.0 {
            let a = j * 0.5;
            d = x + a * d;
            if d == 0.0 {
                d = tiny;
            }
            c = x + a / c;
            if c == 0.0 {
                c = tiny;
            }
            d = 1.0 / d;
            let delta = c * d;
            f *= delta;
            if (delta - 1.0).abs() < 1e-16 {
                break;
            }
            j += 1.0;
        }
        (-x * x).exp() / PI.sqrt() / f
    }
}

/// erfc(x) for any finite x.
#[must_use]
pub fn erfc(x: f64) -> f64 {
    if x.is_nan() {
        return f64::NAN;
    }
    if x >= 0.0 {
        erfc_non_negative(x)
    } else {
        2.0 - erfc_non_negative(-x)
    }
}

/// Standard normal CDF Φ(x).
#[must_use]
pub fn phi_major(x: f64) -> f64 {
    0.5 * erfc(-x / std::f64::consts::SQRT_2)
}

/// Standard normal density φ(x).
#[must_use]
pub fn phi_minor(x: f64) -> f64 {
    (-0.5 * x * x).exp() / (2.0 * PI).sqrt()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_values() {
        // Reference values: Python 3.11 `math.erfc(x)` and `statistics.NormalDist()`.
        let cases = [
            (0.0, 1.0),
            (0.5, 0.4795001221869535),
            (1.0, 0.15729920705028513),
            (1.9, 0.0072095707647425325),
            (2.0, 0.004677734981047265),
            (3.0, 2.2090496998585438e-05),
            (6.0, 2.1519736712498916e-17),
            (-1.0, 1.842700792949715),
        ];
        for (x, want) in cases {
            let got = erfc(x);
            assert!(
                ((got - want) / want).abs() < 1e-13,
                "erfc({x}) = {got}, want {want}"
            );
        }
        assert!((phi_major(1.0) - 0.8413447460685429).abs() < 1e-15);
        assert!((phi_minor(0.0) - 0.3989422804014327).abs() < 1e-16);
    }
}

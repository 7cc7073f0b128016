//! Orthonormal associated Legendre functions.
//!
//! `P̄_l^m(x)` is normalised so that `Y_l^m(θ, φ) = P̄_l^m(cos θ) e^{imφ}`
//! is orthonormal on the unit sphere (`2π ∫_{-1}^{1} P̄_l^m P̄_{l'}^m dx =
//! δ_{ll'}`), with the Condon–Shortley phase `(−1)^m` when asked — the
//! conventions of torch-harmonics' `legpoly(norm="ortho")`. The values
//! come from the standard stable recurrences: the sectoral diagonal
//! `P̄_m^m` from `P̄_{m−1}^{m−1}`, the first off-diagonal from it, and the
//! three-term recurrence in degree for the rest.

use core::f64::consts::PI;
use core::ops::Range;

/// `P̄_l^m(x_k)` for the orders `m` in `orders`, degrees `0..lmax` and the
/// points `xs`, laid out `[m − orders.start][l][k]` (zero where `l < m`).
///
/// # Example
/// ```
/// use ruda_sphere::legendre_table;
/// let x = 0.3_f64;
/// let t = legendre_table(0..2, 2, &[x], true);
/// // [m][l][k]: P̄_1^0 = sqrt(3/4π) x and P̄_1^1 = −sqrt(3/8π) sin θ.
/// let pi = std::f64::consts::PI;
/// assert!((t[1] - (3.0 / (4.0 * pi)).sqrt() * x).abs() < 1e-15);
/// assert!((t[3] + (3.0 / (8.0 * pi)).sqrt() * (1.0 - x * x).sqrt()).abs() < 1e-15);
/// ```
pub fn legendre_table(orders: Range<usize>, lmax: usize, xs: &[f64], csphase: bool) -> Vec<f64> {
    let nk = xs.len();
    let nm = orders.len();
    let mut out = vec![0.0; nm * lmax * nk];
    if nm == 0 || lmax == 0 || nk == 0 {
        return out;
    }
    let at = |m: usize, l: usize| ((m - orders.start) * lmax + l) * nk;
    // P̄_m^m for the current m, starting at m = 0.
    let mut diag = vec![1.0 / (4.0 * PI).sqrt(); nk];
    for m in 0..orders.end.min(lmax) {
        if m > 0 {
            let f = (2 * m + 1) as f64 / (2 * m) as f64;
            for (d, &x) in diag.iter_mut().zip(xs) {
                *d *= (f * (1.0 + x) * (1.0 - x)).sqrt();
            }
        }
        if m < orders.start {
            continue;
        }
        let sign = if csphase && m % 2 == 1 { -1.0 } else { 1.0 };
        let base = at(m, m);
        for k in 0..nk {
            out[base + k] = sign * diag[k];
        }
        if m + 1 < lmax {
            let c = ((2 * m + 3) as f64).sqrt();
            let base = at(m, m + 1);
            for k in 0..nk {
                out[base + k] = sign * c * xs[k] * diag[k];
            }
        }
        for l in m + 2..lmax {
            let (lf, mf) = (l as f64, m as f64);
            let a = ((2.0 * lf - 1.0) / (lf - mf) * (2.0 * lf + 1.0) / (lf + mf)).sqrt();
            let b = ((lf + mf - 1.0) / (lf - mf) * (2.0 * lf + 1.0) / (2.0 * lf - 3.0)
                * (lf - mf - 1.0)
                / (lf + mf))
                .sqrt();
            let (l1, l2, here) = (at(m, l - 1), at(m, l - 2), at(m, l));
            for k in 0..nk {
                out[here + k] = a * xs[k] * out[l1 + k] - b * out[l2 + k];
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{LatitudeGrid, Latitudes};

    #[test]
    fn low_degrees_match_their_closed_forms() {
        let xs = [0.9, 0.25, -0.4, -0.99];
        let t = legendre_table(0..4, 4, &xs, true);
        let nk = xs.len();
        let get = |m: usize, l: usize, k: usize| t[(m * 4 + l) * nk + k];
        for (k, &x) in xs.iter().enumerate() {
            let s = (1.0 - x * x).sqrt();
            // Normalisation sqrt((2l+1)/4π (l−m)!/(l+m)!) times P_l^m with
            // the Condon–Shortley phase.
            let n = |l: f64, ratio: f64| ((2.0 * l + 1.0) / (4.0 * PI) * ratio).sqrt();
            let cases = [
                (0, 0, n(0.0, 1.0)),
                (1, 0, n(1.0, 1.0) * x),
                (1, 1, -n(1.0, 0.5) * s),
                (2, 0, n(2.0, 1.0) * 0.5 * (3.0 * x * x - 1.0)),
                (2, 1, -n(2.0, 1.0 / 6.0) * 3.0 * x * s),
                (2, 2, n(2.0, 1.0 / 24.0) * 3.0 * s * s),
                (3, 2, n(3.0, 1.0 / 120.0) * 15.0 * x * s * s),
                (3, 3, -n(3.0, 1.0 / 720.0) * 15.0 * s * s * s),
            ];
            for (l, m, want) in cases {
                let got = get(m, l, k);
                assert!(
                    (got - want).abs() < 1e-14,
                    "l={l} m={m} x={x}: {got} vs {want}"
                );
            }
            // Below the diagonal everything is zero.
            assert_eq!(get(3, 1, k), 0.0);
        }
        // Without the phase, odd orders flip sign.
        let u = legendre_table(0..4, 4, &xs, false);
        assert_eq!(u[(4 + 1) * nk], -t[(4 + 1) * nk]);
        assert_eq!(u[(2 * 4 + 2) * nk], t[(2 * 4 + 2) * nk]);
    }

    #[test]
    fn orthonormal_under_gauss_quadrature_to_high_degree() {
        let n = 64;
        let q = Latitudes::new(n, LatitudeGrid::LegendreGauss).unwrap();
        let lmax = 64;
        let orders = [0usize, 1, 17, 40, 63];
        for &m in &orders {
            let t = legendre_table(m..m + 1, lmax, &q.cosines, true);
            for l in m..lmax {
                for l2 in [m, l, (l + 3).min(lmax - 1)] {
                    let s: f64 = (0..n)
                        .map(|k| q.weights[k] * t[l * n + k] * t[l2 * n + k])
                        .sum::<f64>()
                        * 2.0
                        * PI;
                    let want = if l == l2 { 1.0 } else { 0.0 };
                    assert!((s - want).abs() < 1e-12, "m={m} l={l} l2={l2}: {s}");
                }
            }
        }
    }

    #[test]
    fn a_block_of_orders_equals_the_same_rows_of_the_whole_table() {
        let xs = [0.7, 0.1, -0.3];
        let whole = legendre_table(0..9, 9, &xs, true);
        let part = legendre_table(3..6, 9, &xs, true);
        assert_eq!(&whole[3 * 9 * 3..6 * 9 * 3], &part[..]);
    }
}

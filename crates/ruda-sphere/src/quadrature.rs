//! Latitude grids and their quadrature: nodes in colatitude (ascending,
//! north pole first) and weights for integrals over `x = cos θ` on
//! `[-1, 1]`, as torch-harmonics' `precompute_latitudes` orders them.

use core::f64::consts::PI;
use core::fmt;

use crate::SphereError;

/// How the latitudes of a field are placed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LatitudeGrid {
    /// `nlat` equally spaced colatitudes `θ_j = π j / (nlat − 1)`, poles
    /// included, with Clenshaw–Curtis weights (exact for polynomials in
    /// `cos θ` of degree `nlat − 1`). torch-harmonics' `"equiangular"`.
    Equiangular,
    /// The `nlat` Gauss–Legendre nodes, poles excluded (exact for degree
    /// `2 nlat − 1`). torch-harmonics' `"legendre-gauss"`.
    LegendreGauss,
}

impl LatitudeGrid {
    /// The fewest latitudes the grid accepts.
    ///
    /// ```
    /// use ruda_sphere::LatitudeGrid;
    /// assert_eq!(LatitudeGrid::Equiangular.min_nlat(), 2);
    /// assert_eq!(LatitudeGrid::LegendreGauss.min_nlat(), 1);
    /// ```
    pub fn min_nlat(self) -> usize {
        match self {
            LatitudeGrid::Equiangular => 2,
            LatitudeGrid::LegendreGauss => 1,
        }
    }

    /// torch-harmonics' default degree cut-off (exclusive) for `nlat`
    /// latitudes: `(nlat + 1) / 2` on the equiangular grid (torch-harmonics
    /// 0.9), `nlat` on the Gauss–Legendre grid.
    ///
    /// ```
    /// use ruda_sphere::LatitudeGrid;
    /// assert_eq!(LatitudeGrid::Equiangular.default_lmax(181), 91);
    /// assert_eq!(LatitudeGrid::LegendreGauss.default_lmax(180), 180);
    /// ```
    pub fn default_lmax(self, nlat: usize) -> usize {
        match self {
            LatitudeGrid::Equiangular => nlat.div_ceil(2),
            LatitudeGrid::LegendreGauss => nlat,
        }
    }
}

impl fmt::Display for LatitudeGrid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LatitudeGrid::Equiangular => "equiangular",
            LatitudeGrid::LegendreGauss => "Legendre–Gauss",
        })
    }
}

/// The nodes and weights of a latitude grid.
#[derive(Clone, Debug, PartialEq)]
pub struct Latitudes {
    /// Colatitudes `θ` in radians, ascending from the north pole.
    pub colatitudes: Vec<f64>,
    /// `cos θ` of each node (descending from 1 towards −1).
    pub cosines: Vec<f64>,
    /// Quadrature weights for `∫_{-1}^{1} f(x) dx` (they sum to 2).
    pub weights: Vec<f64>,
}

impl Latitudes {
    /// The nodes and weights of `nlat` latitudes on `grid`.
    ///
    /// # Errors
    /// [`SphereError::GridTooSmall`] below [`LatitudeGrid::min_nlat`].
    ///
    /// # Example
    /// ```
    /// use ruda_sphere::{LatitudeGrid, Latitudes};
    /// let q = Latitudes::new(5, LatitudeGrid::Equiangular)?;
    /// // ∫ x² dx over [-1, 1] = 2/3, exactly (up to round-off).
    /// let integral: f64 = q.cosines.iter().zip(&q.weights).map(|(x, w)| w * x * x).sum();
    /// assert!((integral - 2.0 / 3.0).abs() < 1e-15);
    /// # Ok::<(), ruda_sphere::SphereError>(())
    /// ```
    pub fn new(nlat: usize, grid: LatitudeGrid) -> Result<Self, SphereError> {
        if nlat < grid.min_nlat() {
            return Err(SphereError::GridTooSmall {
                grid,
                nlat,
                nlon: 1,
                min_nlat: grid.min_nlat(),
            });
        }
        Ok(match grid {
            LatitudeGrid::Equiangular => clenshaw_curtis(nlat),
            LatitudeGrid::LegendreGauss => legendre_gauss(nlat),
        })
    }
}

/// Clenshaw–Curtis nodes and weights (Waldvogel's closed form, written as
/// the cosine sum rather than through an FFT).
fn clenshaw_curtis(n: usize) -> Latitudes {
    let big_n = n - 1;
    let colatitudes: Vec<f64> = (0..n).map(|j| PI * j as f64 / big_n as f64).collect();
    let cosines = colatitudes.iter().map(|t| t.cos()).collect();
    let weights = (0..n)
        .map(|j| {
            let c = if j == 0 || j == big_n { 1.0 } else { 2.0 };
            let mut s = 1.0;
            for k in 1..=big_n / 2 {
                let b = if 2 * k == big_n { 1.0 } else { 2.0 };
                // cos(2kθ_j) with the angle reduced exactly: 2kj mod 2N.
                let turns = (2 * k * j) % (2 * big_n);
                let angle = PI * turns as f64 / big_n as f64;
                s -= b / (4.0 * (k * k) as f64 - 1.0) * angle.cos();
            }
            c * s / big_n as f64
        })
        .collect();
    Latitudes {
        colatitudes,
        cosines,
        weights,
    }
}

/// `(P_n(x), P_n'(x))` by the three-term recurrence.
fn legendre_and_derivative(n: usize, x: f64) -> (f64, f64) {
    let (mut p0, mut p1) = (1.0, x);
    if n == 0 {
        return (1.0, 0.0);
    }
    for k in 2..=n {
        let kf = k as f64;
        let p2 = ((2.0 * kf - 1.0) * x * p1 - (kf - 1.0) * p0) / kf;
        p0 = p1;
        p1 = p2;
    }
    let nf = n as f64;
    (p1, nf * (x * p1 - p0) / (x * x - 1.0))
}

/// Gauss–Legendre nodes by Newton's method from Tricomi-style initial
/// guesses, mirrored so the rule is exactly symmetric.
fn legendre_gauss(n: usize) -> Latitudes {
    let mut x = vec![0.0; n];
    let mut w = vec![0.0; n];
    let nf = n as f64;
    for i in 0..n.div_ceil(2) {
        let mut xi = (PI * (i as f64 + 0.75) / (nf + 0.5)).cos();
        for _ in 0..100 {
            let (p, dp) = legendre_and_derivative(n, xi);
            let step = p / dp;
            xi -= step;
            if step.abs() <= 1e-16 {
                break;
            }
        }
        if 2 * i + 1 == n {
            xi = 0.0; // the middle node of an odd rule
        }
        let (_, dp) = legendre_and_derivative(n, xi);
        let wi = 2.0 / ((1.0 - xi) * (1.0 + xi) * dp * dp);
        x[i] = xi;
        x[n - 1 - i] = -xi;
        w[i] = wi;
        w[n - 1 - i] = wi;
    }
    Latitudes {
        colatitudes: x.iter().map(|v| v.acos()).collect(),
        cosines: x,
        weights: w,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `∫_{-1}^{1} x^p dx`.
    fn moment(p: usize) -> f64 {
        if p % 2 == 1 {
            0.0
        } else {
            2.0 / (p + 1) as f64
        }
    }

    fn rule_error(q: &Latitudes, p: usize) -> f64 {
        let s: f64 = q
            .cosines
            .iter()
            .zip(&q.weights)
            .map(|(x, w)| w * x.powi(p as i32))
            .sum();
        (s - moment(p)).abs()
    }

    #[test]
    fn clenshaw_curtis_integrates_polynomials_up_to_its_degree() {
        for n in [2usize, 3, 4, 7, 10, 33] {
            let q = Latitudes::new(n, LatitudeGrid::Equiangular).unwrap();
            for p in 0..n {
                assert!(rule_error(&q, p) < 1e-14, "n = {n}, p = {p}");
            }
            assert!((q.colatitudes[n - 1] - PI).abs() < 1e-15 && q.colatitudes[0] == 0.0);
        }
        // Simpson's rule for three points.
        let q = Latitudes::new(3, LatitudeGrid::Equiangular).unwrap();
        for (w, e) in q.weights.iter().zip([1.0 / 3.0, 4.0 / 3.0, 1.0 / 3.0]) {
            assert!((w - e).abs() < 1e-15);
        }
    }

    #[test]
    fn legendre_gauss_integrates_polynomials_up_to_twice_its_size() {
        for n in [1usize, 2, 5, 8, 31, 64] {
            let q = Latitudes::new(n, LatitudeGrid::LegendreGauss).unwrap();
            for p in 0..2 * n {
                assert!(rule_error(&q, p) < 1e-13, "n = {n}, p = {p}");
            }
            // Ascending colatitudes, inside (0, π).
            assert!(q.colatitudes.windows(2).all(|c| c[0] < c[1]));
            assert!(q.colatitudes[0] > 0.0 && q.colatitudes[n - 1] < PI);
        }
        // Not exact one degree further: the rule is what it claims.
        let q = Latitudes::new(3, LatitudeGrid::LegendreGauss).unwrap();
        assert!(rule_error(&q, 6) > 1e-3);
    }

    #[test]
    fn too_few_latitudes_are_an_error() {
        assert!(matches!(
            Latitudes::new(1, LatitudeGrid::Equiangular),
            Err(SphereError::GridTooSmall { min_nlat: 2, .. })
        ));
        assert!(Latitudes::new(0, LatitudeGrid::LegendreGauss).is_err());
    }
}

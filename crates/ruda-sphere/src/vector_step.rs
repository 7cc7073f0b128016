//! The vector transforms' Legendre step, on the scalar kernel: the
//! derivative functions of torch-harmonics' `RealVectorSHT`,
//!
//! - `D0_l^m = ∂_θ P̄_l^m(cos θ)` and
//! - `D1_l^m = m P̄_l^m(cos θ) / sin θ`
//!
//! (Condon–Shortley sign included), written with the functions `R_l` of
//! [`Seeds::OverSine`] (`Q̄_l^m = P̄_l^m / sin θ` for `m ≥ 1`, finite at the
//! poles; `P̄_l^1` without the sign for `m = 0`) as three-term combinations
//! of neighbouring degrees:
//!
//! - `D1 = m R_l`;
//! - `D0 = c1_l R_{l+1} + c2_l R_{l−1}` for `m ≥ 1` (`sin θ ∂_θ P̄_l =
//!   l ε_{l+1} P̄_{l+1} − (l+1) ε_l P̄_{l−1}` with `ε_l = sqrt((l² −
//!   m²)/(4l² − 1))`, divided by `sin θ`): `c1 = l ε_{l+1}`,
//!   `c2 = −(l+1) ε_l`;
//! - `D0 = c0_l R_l` with `c0 = −sqrt(l(l+1))` for `m = 0`.
//!
//! So the kernel runs over one extra degree (`lmax + 1` in all) and on the
//! fields' columns alone. With `A_j(X)_l = Σ_k ω_k D_j X_k` and
//! `S_j(C)_k = Σ_l D_j C_l` per order, the analysis of a tangential field's
//! (θ, φ) spectra `(X0, X1)` is
//!
//! - `s = (A0(X0) − i A1(X1)) / (l(l+1))` (spheroidal),
//! - `t = (−i A1(X0) − A0(X1)) / (l(l+1))` (toroidal),
//!
//! and the synthesis of `(s, t)` is `F0 = S0(s) + i S1(t)`,
//! `F1 = i S1(s) − S0(t)` (torch-harmonics 0.9.3, `sht.py`): per degree `j`
//! of `R`, `F0 = Σ_j R_j (E(s)_j + i m t_j)` and
//! `F1 = Σ_j R_j (i m s_j − E(t)_j)` with
//! `E(C)_j = c0_j C_j + c1_{j−1} C_{j−1} + c2_{j+1} C_{j+1}`. Here each is
//! one kernel call and Burn tensor operations around it for the degree
//! factors, the shifts by one degree and the products with `i`, so that
//! autodiff records the adjoint of every piece (the serial transforms run
//! the same algebra fused, [`crate::fused_vector`]).
//!
//! [`Seeds::OverSine`]: crate::legendre_kernel::Seeds::OverSine

use alloc::sync::Arc;
use alloc::vec;
use alloc::vec::Vec;

use burn_tensor::{Tensor, TensorData};
use ruda_tensor::reshape;

use crate::SphereError;
use crate::legendre_fly::Step;
use crate::route::{leg_analysis, leg_synthesis};

/// The Legendre step of a vector transform over some orders and latitudes.
#[derive(Clone, Debug)]
pub(crate) struct VectorStep {
    /// The recurrence of [`Seeds::OverSine`] of these orders and latitudes
    /// over `lmax + 1` degrees, weighted for analysis.
    ///
    /// [`Seeds::OverSine`]: crate::legendre_kernel::Seeds::OverSine
    pub(crate) step: Step,
    /// The factors around it (shared).
    pub(crate) f: Arc<VectorFactors>,
}

/// The degree factors that make the derivative functions of `R` (module
/// docs), for some orders; `L` is the transform's `lmax`.
#[derive(Debug)]
pub(crate) struct VectorFactors {
    /// The transform's degrees `L` (the recurrence walks `L + 1`).
    pub(crate) lmax: usize,
    /// `c0`, `c1`, `c2` per order and degree, `[m, L]`.
    pub(crate) c0: Vec<f64>,
    pub(crate) c1: Vec<f64>,
    pub(crate) c2: Vec<f64>,
    /// The synthesis' `c0_j`, `c1_{j−1}`, `c2_{j+1}` per order and degree of
    /// `R`, `[m, L + 1]` (zero where the degree falls outside `0..L`).
    pub(crate) k0: Vec<f64>,
    pub(crate) k1: Vec<f64>,
    pub(crate) k2: Vec<f64>,
    /// The order `m` per order, `[m]`.
    pub(crate) m: Vec<f64>,
    /// `1 / (l (l+1))`, 1 at `l = 0`, `[L]`.
    pub(crate) inv_ll: Vec<f64>,
}

impl VectorFactors {
    /// The factors of the (ascending) `orders` for `lmax` degrees.
    pub(crate) fn new(orders: &[usize], lmax: usize) -> Self {
        let eps = |m: usize, l: usize| -> f64 {
            if l < m {
                return 0.0;
            }
            let (l, m) = (l as f64, m as f64);
            ((l * l - m * m) / (4.0 * l * l - 1.0)).sqrt()
        };
        // (c0, c1, c2) of order m at degree l < lmax.
        let c = |m: usize, l: usize| -> (f64, f64, f64) {
            let lf = l as f64;
            if m == 0 {
                (-(lf * (lf + 1.0)).sqrt(), 0.0, 0.0)
            } else if l < m {
                (0.0, 0.0, 0.0)
            } else {
                (0.0, lf * eps(m, l + 1), -(lf + 1.0) * eps(m, l))
            }
        };
        let table = |f: &dyn Fn(usize, usize) -> f64, degrees: usize| -> Vec<f64> {
            orders
                .iter()
                .flat_map(|&m| (0..degrees).map(move |l| (m, l)))
                .map(|(m, l)| f(m, l))
                .collect()
        };
        let inside = |l: Option<usize>| l.filter(|&l| l < lmax);
        VectorFactors {
            lmax,
            c0: table(&|m, l| c(m, l).0, lmax),
            c1: table(&|m, l| c(m, l).1, lmax),
            c2: table(&|m, l| c(m, l).2, lmax),
            k0: table(&|m, j| inside(Some(j)).map_or(0.0, |l| c(m, l).0), lmax + 1),
            k1: table(
                &|m, j| inside(j.checked_sub(1)).map_or(0.0, |l| c(m, l).1),
                lmax + 1,
            ),
            k2: table(
                &|m, j| inside(Some(j + 1)).map_or(0.0, |l| c(m, l).2),
                lmax + 1,
            ),
            m: orders.iter().map(|&m| m as f64).collect(),
            inv_ll: (0..lmax)
                .map(|l| {
                    if l == 0 {
                        1.0
                    } else {
                        1.0 / (l as f64 * (l as f64 + 1.0))
                    }
                })
                .collect(),
        }
    }
}

impl VectorStep {
    /// The step of the `orders` of a transform of `lmax` degrees, around
    /// the `step` of their recurrence (which walks `lmax + 1` degrees).
    pub(crate) fn new(orders: &[usize], lmax: usize, step: Step) -> Self {
        debug_assert_eq!(step.rec.lmax(), lmax + 1);
        VectorStep {
            step,
            f: Arc::new(VectorFactors::new(orders, lmax)),
        }
    }

    /// `[m, k, 2b, 2]` spectra of `b` tangential fields (the (θ, φ)
    /// components of each field adjacent) → `[m, l, 2b, 2]` coefficients
    /// (spheroidal and toroidal adjacent).
    pub(crate) fn analysis(
        &self,
        op: &'static str,
        f: Tensor<4>,
    ) -> Result<Tensor<4>, SphereError> {
        let [nm, _, b2, _] = f.dims();
        let nl = self.f.lmax;
        if b2 == 0 {
            // An empty batch: Burn's slices of an empty tensor are new
            // tensors off the autodiff graph; a reshape keeps it. Every
            // layout gives each rank at least one order and latitude.
            return Ok(reshape(f, [nm, nl, 0, 2]));
        }
        let b = b2 / 2;
        // [m, l + 1, b, (θ | φ), 2]
        let q = reshape(
            leg_analysis(op, f, self.step.clone())?,
            [nm, nl + 1, b, 2, 2],
        );
        let comp =
            |c: usize| -> Tensor<4> { reshape(q.clone().narrow(3, c, 1), [nm, nl + 1, b, 2]) };
        let (h0, h1) = (comp(0), comp(1));
        let c0 = self.constant(&self.f.c0, [nm, nl, 1, 1], &h0);
        let c1 = self.constant(&self.f.c1, [nm, nl, 1, 1], &h0);
        let c2 = self.constant(&self.f.c2, [nm, nl, 1, 1], &h0);
        let m = self.constant(&self.f.m, [nm, 1, 1, 1], &h0);
        let inv = self.constant(&self.f.inv_ll, [1, nl, 1, 1], &h0);
        // A0(X)_l = c0 H_l + c1 H_{l+1} + c2 H_{l−1}, A1(X)_l = m H_l.
        let a0 = |h: &Tensor<4>| -> Tensor<4> {
            let here = h.clone().narrow(1, 0, nl);
            let up = h.clone().narrow(1, 1, nl);
            here.clone() * c0.clone() + up * c1.clone() + shift_down(here) * c2.clone()
        };
        let a1 = |h: &Tensor<4>| -> Tensor<4> { h.clone().narrow(1, 0, nl) * m.clone() };
        let s = (a0(&h0) - times_i(a1(&h1))) * inv.clone();
        let t = (times_i(a1(&h0)).neg() - a0(&h1)) * inv;
        Ok(reshape(Tensor::stack::<5>(vec![s, t], 3), [nm, nl, b2, 2]))
    }

    /// `[m, l, 2b, 2]` coefficients (spheroidal and toroidal adjacent) →
    /// `[m, k, 2b, 2]` spectra of the (θ, φ) components; the adjoint of
    /// [`VectorStep::analysis`] with the weights and degree factors of the
    /// inverse transform.
    pub(crate) fn synthesis(
        &self,
        op: &'static str,
        c: Tensor<4>,
    ) -> Result<Tensor<4>, SphereError> {
        let [nm, nl, b2, _] = c.dims();
        let nk = self.step.rec.nlat();
        if b2 == 0 {
            return Ok(reshape(c, [nm, nk, 0, 2]));
        }
        let b = b2 / 2;
        let st = reshape(c, [nm, nl, b, 2, 2]);
        // Each part padded with a zero degree L: [m, L + 1, b, 2].
        let part = |p: usize| -> Tensor<4> {
            let v = reshape(st.clone().narrow(3, p, 1), [nm, nl, b, 2]);
            let zero = Tensor::zeros([nm, 1, b, 2], (&v.device(), v.dtype()));
            Tensor::cat(vec![v, zero], 1)
        };
        let (s, t) = (part(0), part(1));
        let k0 = self.constant(&self.f.k0, [nm, nl + 1, 1, 1], &s);
        let k1 = self.constant(&self.f.k1, [nm, nl + 1, 1, 1], &s);
        let k2 = self.constant(&self.f.k2, [nm, nl + 1, 1, 1], &s);
        let m = self.constant(&self.f.m, [nm, 1, 1, 1], &s);
        // E(C)_j = c0_j C_j + c1_{j−1} C_{j−1} + c2_{j+1} C_{j+1}.
        let e = |c: &Tensor<4>| -> Tensor<4> {
            c.clone() * k0.clone()
                + shift_down(c.clone()) * k1.clone()
                + shift_up(c.clone()) * k2.clone()
        };
        // F0 = Σ R (E(s) + i m t), F1 = Σ R (i m s − E(t)).
        let u0 = e(&s) + times_i(t.clone() * m.clone());
        let u1 = times_i(s * m) - e(&t);
        let u = reshape(Tensor::stack::<5>(vec![u0, u1], 3), [nm, nl + 1, b2, 2]);
        leg_synthesis(op, u, self.step.clone())
    }

    /// `values` as a constant tensor of `shape` beside `like`.
    fn constant(&self, values: &[f64], shape: [usize; 4], like: &Tensor<4>) -> Tensor<4> {
        Tensor::<4>::from_data(
            TensorData::new(values.to_vec(), shape),
            (&like.device(), like.dtype()),
        )
    }
}

/// `i z` of `[.., 2]` complex values: `(re, im) → (−im, re)`.
fn times_i(z: Tensor<4>) -> Tensor<4> {
    let re = z.clone().narrow(3, 0, 1);
    let im = z.narrow(3, 1, 1);
    Tensor::cat(vec![im.neg(), re], 3)
}

/// Degree `l − 1`'s values at degree `l` (zero at `l = 0`), `[m, l, b, 2]`.
fn shift_down(z: Tensor<4>) -> Tensor<4> {
    let [nm, nl, b, _] = z.dims();
    let zero = Tensor::zeros([nm, 1, b, 2], (&z.device(), z.dtype()));
    if nl == 1 {
        return zero;
    }
    Tensor::cat(vec![zero, z.narrow(1, 0, nl - 1)], 1)
}

/// Degree `l + 1`'s values at degree `l` (zero at the last), `[m, l, b, 2]`.
fn shift_up(z: Tensor<4>) -> Tensor<4> {
    let [nm, nl, b, _] = z.dims();
    let zero = Tensor::zeros([nm, 1, b, 2], (&z.device(), z.dtype()));
    if nl == 1 {
        return zero;
    }
    Tensor::cat(vec![z.narrow(1, 1, nl - 1), zero], 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::legendre_kernel::{Recurrence, Seeds};
    use crate::{LatitudeGrid, Latitudes, legendre_table};

    /// `R_l(x_k)` of each listed order from the kernel (`Q̄_l^m`, or `P̄_l^1`
    /// for order 0), `[m][l][k]`: the synthesis of unit coefficients.
    fn q_values(rec: &Recurrence) -> Vec<Vec<Vec<f64>>> {
        let (nm, nl, nk) = (rec.orders().len(), rec.lmax(), rec.nlat());
        let mut unit = vec![0.0; nm * nl * nl];
        for i in 0..nm {
            for l in 0..nl {
                unit[(i * nl + l) * nl + l] = 1.0;
            }
        }
        let out = rec.synthesis(&unit, nl, false);
        (0..nm)
            .map(|i| {
                (0..nl)
                    .map(|l| (0..nk).map(|k| out[(i * nk + k) * nl + l]).collect())
                    .collect()
            })
            .collect()
    }

    /// The derivative functions made of `R` (this module's formulas) equal
    /// torch-harmonics' construction from the neighbouring orders
    /// (`legendre.py`, `dlegpoly`: `½(a P̄^{m−1}_l − b P̄^{m+1}_l)` and
    /// `½ c (a' P̄^{m−1}_{l+1} + b' P̄^{m+1}_{l+1})`, without the sign, then
    /// `(−1)^m`), poles included, on both grids.
    #[test]
    // `m`, `l` and `k` index the kernel's values, the step's factors and
    // the table at once.
    #[allow(clippy::needless_range_loop)]
    fn derivative_functions_match_torch_harmonics_construction() {
        for (grid, nlat) in [
            (LatitudeGrid::Equiangular, 13),
            (LatitudeGrid::Equiangular, 12),
            (LatitudeGrid::LegendreGauss, 11),
        ] {
            let q = Latitudes::new(nlat, grid).unwrap();
            let lmax = nlat;
            let orders: Vec<usize> = (0..lmax).collect();
            for paired in [true, false] {
                // One degree more than the transform's.
                let rec = Recurrence::new(
                    &orders,
                    lmax + 1,
                    &q.cosines,
                    &q.weights,
                    true,
                    Seeds::OverSine,
                    paired,
                );
                let qv = q_values(&rec);
                let vs = VectorStep::new(&orders, lmax, Step::new(rec, false));
                // P̄ without the sign, orders 0..=lmax, degrees 0..=lmax.
                let p = legendre_table(0..lmax + 1, lmax + 1, &q.cosines, false);
                let pv = |m: usize, l: usize, k: usize| p[(m * (lmax + 1) + l) * nlat + k];
                for m in 0..lmax {
                    let sign = if m % 2 == 1 { -1.0 } else { 1.0 };
                    for l in 0..lmax {
                        let (lf, mf) = (l as f64, m as f64);
                        for k in 0..nlat {
                            let (d0, d1) = if m == 0 {
                                (-(lf * (lf + 1.0)).sqrt() * pv(1, l, k), 0.0)
                            } else if m <= l {
                                let a0 = ((lf + mf) * (lf - mf + 1.0)).sqrt();
                                let b0 = ((lf - mf) * (lf + mf + 1.0)).sqrt();
                                let c1 = ((2.0 * lf + 1.0) / (2.0 * lf + 3.0)).sqrt();
                                let a1 = ((lf - mf + 1.0) * (lf - mf + 2.0)).sqrt();
                                let b1 = ((lf + mf + 1.0) * (lf + mf + 2.0)).sqrt();
                                (
                                    sign * 0.5 * (a0 * pv(m - 1, l, k) - b0 * pv(m + 1, l, k)),
                                    sign * 0.5
                                        * c1
                                        * (a1 * pv(m - 1, l + 1, k) + b1 * pv(m + 1, l + 1, k)),
                                )
                            } else {
                                (0.0, 0.0)
                            };
                            let below = if l == 0 { 0.0 } else { qv[m][l - 1][k] };
                            let at = m * lmax + l;
                            let ours0 = vs.f.c0[at] * qv[m][l][k]
                                + vs.f.c1[at] * qv[m][l + 1][k]
                                + vs.f.c2[at] * below;
                            let ours1 = vs.f.m[m] * qv[m][l][k];
                            let scale = 1.0 + lf * lf;
                            assert!(
                                (ours0 - d0).abs() < 1e-12 * scale,
                                "{grid:?} {nlat} paired {paired}: D0 m {m} l {l} k {k}: {ours0} vs {d0}"
                            );
                            assert!(
                                (ours1 - d1).abs() < 1e-12 * scale,
                                "{grid:?} {nlat} paired {paired}: D1 m {m} l {l} k {k}: {ours1} vs {d1}"
                            );
                        }
                    }
                }
            }
        }
    }
}

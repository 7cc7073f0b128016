//! The vector transforms' Legendre step, on the scalar kernel: the
//! derivative functions of torch-harmonics' `RealVectorSHT`,
//!
//! - `D0_l^m = ∂_θ P̄_l^m(cos θ)` and
//! - `D1_l^m = m P̄_l^m(cos θ) / sin θ`
//!
//! (Condon–Shortley sign included), written with `Q̄_l^m = P̄_l^m / sin θ`
//! ([`Seeds::OverSine`], finite at the poles) as
//!
//! - `D1 = m Q̄_l^m`,
//! - `D0 = α_l^m μ Q̄_l^m − e_l^m Q̄_{l−1}^m` for `m ≥ 1`, with `μ = cos θ`,
//!   `α = l` and `e_l^m = sqrt((2l+1)/(2l−1) (l² − m²))`;
//! - `D0 = −sqrt(l(l+1)) sin θ Q̄_l^1` (no sign) and `D1 = 0` for `m = 0`,
//!   that is `μ = sin θ`, `α = −sqrt(l(l+1))`, `e = 0`.
//!
//! With `A_j(X)_l = Σ_k ω_k D_j X_k` and `S_j(C)_k = Σ_l D_j C_l` per order,
//! the analysis of a tangential field's (θ, φ) spectra `(X0, X1)` is
//!
//! - `s = (A0(X0) − i A1(X1)) / (l(l+1))` (spheroidal),
//! - `t = (−i A1(X0) − A0(X1)) / (l(l+1))` (toroidal),
//!
//! and the synthesis of `(s, t)` is `F0 = S0(s) + i S1(t)`,
//! `F1 = i S1(s) − S0(t)` (torch-harmonics 0.9.3, `sht.py`). Both are one
//! scalar-kernel call on twice the columns (`Q̄` of `μ X` and of `X`), and
//! Burn tensor operations around it for the degree factors, the shift by one
//! degree and the products with `i`, so that autodiff records the adjoint
//! of every piece.

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
    /// The `Q̄` recurrence ([`Seeds::OverSine`]) of these orders and
    /// latitudes, weighted for analysis.
    ///
    /// [`Seeds::OverSine`]: crate::legendre_kernel::Seeds::OverSine
    pub(crate) step: Step,
    /// The factors around it (shared).
    pub(crate) f: Arc<VectorFactors>,
}

/// The factors that make the derivative functions of `Q̄` (module docs),
/// for some orders, latitudes and degrees.
#[derive(Debug)]
pub(crate) struct VectorFactors {
    /// `μ` per order and latitude, `[m, k]`.
    pub(crate) mu: Vec<f64>,
    /// `α` per order and degree, `[m, l]`.
    pub(crate) alpha: Vec<f64>,
    /// `e_l^m` per order and degree, `[m, l]`.
    pub(crate) e: Vec<f64>,
    /// `e_{l+1}^m` at `l` (0 at the last degree), `[m, l]`.
    pub(crate) e_next: Vec<f64>,
    /// The order `m` per order, `[m]`.
    pub(crate) m: Vec<f64>,
    /// `1 / (l (l+1))`, 1 at `l = 0`, `[l]`.
    pub(crate) inv_ll: Vec<f64>,
}

impl VectorStep {
    /// The step of the `orders` over latitudes with cosines `x`, around
    /// the `step` of their `Q̄` recurrence.
    pub(crate) fn new(orders: &[usize], x: &[f64], step: Step) -> Self {
        let lmax = step.rec.lmax();
        let mu = orders
            .iter()
            .flat_map(|&m| {
                x.iter().map(move |&x| {
                    if m == 0 {
                        // sin θ as the scalar seeds compute it.
                        ((1.0 + x) * (1.0 - x)).sqrt()
                    } else {
                        x
                    }
                })
            })
            .collect();
        let alpha = orders
            .iter()
            .flat_map(|&m| {
                (0..lmax).map(move |l| {
                    let l = l as f64;
                    if m == 0 { -(l * (l + 1.0)).sqrt() } else { l }
                })
            })
            .collect();
        let e_of = |m: usize, l: usize| -> f64 {
            if m == 0 || l <= m {
                return 0.0;
            }
            let (l, m) = (l as f64, m as f64);
            ((2.0 * l + 1.0) / (2.0 * l - 1.0) * (l * l - m * m)).sqrt()
        };
        let e = orders
            .iter()
            .flat_map(|&m| (0..lmax).map(move |l| e_of(m, l)))
            .collect();
        let e_next = orders
            .iter()
            .flat_map(|&m| (0..lmax).map(move |l| if l + 1 < lmax { e_of(m, l + 1) } else { 0.0 }))
            .collect();
        let inv_ll = (0..lmax)
            .map(|l| {
                if l == 0 {
                    1.0
                } else {
                    1.0 / (l as f64 * (l as f64 + 1.0))
                }
            })
            .collect();
        VectorStep {
            step,
            f: Arc::new(VectorFactors {
                mu,
                alpha,
                e,
                e_next,
                m: orders.iter().map(|&m| m as f64).collect(),
                inv_ll,
            }),
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
        let [nm, nk, b2, _] = f.dims();
        let nl = self.step.rec.lmax();
        if b2 == 0 {
            // An empty batch: Burn's slices of an empty tensor are new
            // tensors off the autodiff graph; a reshape keeps it. Every layout
            // gives each rank at least one order and latitude.
            return Ok(reshape(f, [nm, nl, 0, 2]));
        }
        let b = b2 / 2;
        let mu = self.constant(&self.f.mu, [nm, nk, 1, 1], &f);
        let both = Tensor::cat(vec![f.clone() * mu, f], 2);
        // [m, l, (μX | X), b, (θ | φ), 2]
        let q = reshape(
            leg_analysis(op, both, self.step.clone())?,
            [nm, nl, 2, b, 2, 2],
        );
        let part = |j: usize, comp: usize| -> Tensor<4> {
            reshape(q.clone().narrow(2, j, 1).narrow(4, comp, 1), [nm, nl, b, 2])
        };
        let (g0, g1, h0, h1) = (part(0, 0), part(0, 1), part(1, 0), part(1, 1));
        let alpha = self.constant(&self.f.alpha, [nm, nl, 1, 1], &g0);
        let e = self.constant(&self.f.e, [nm, nl, 1, 1], &g0);
        let m = self.constant(&self.f.m, [nm, 1, 1, 1], &g0);
        let inv = self.constant(&self.f.inv_ll, [1, nl, 1, 1], &g0);
        // A0(X) = α Q̄(μX) − e shift(Q̄X), A1(X) = m Q̄X.
        let a0_x0 = g0 * alpha.clone() - shift_down(h0.clone()) * e.clone();
        let a0_x1 = g1 * alpha - shift_down(h1.clone()) * e;
        let (a1_x0, a1_x1) = (h0 * m.clone(), h1 * m);
        let s = (a0_x0 - times_i(a1_x1)) * inv.clone();
        let t = (times_i(a1_x0).neg() - a0_x1) * inv;
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
        let nk = self.f.mu.len().checked_div(nm).unwrap_or(0);
        if b2 == 0 {
            return Ok(reshape(c, [nm, nk, 0, 2]));
        }
        let b = b2 / 2;
        let st = reshape(c, [nm, nl, b, 2, 2]);
        let part =
            |comp: usize| -> Tensor<4> { reshape(st.clone().narrow(3, comp, 1), [nm, nl, b, 2]) };
        let (s, t) = (part(0), part(1));
        let alpha = self.constant(&self.f.alpha, [nm, nl, 1, 1], &s);
        let e_next = self.constant(&self.f.e_next, [nm, nl, 1, 1], &s);
        let m = self.constant(&self.f.m, [nm, 1, 1, 1], &s);
        // S0(C) = μ Q̄(αC) − Q̄(e▷C), (e▷C)_l = e_{l+1} C_{l+1}; S1(C) = m Q̄C.
        // F0 = μ Q̄(αs) + Q̄(i m t − e▷s), F1 = −μ Q̄(αt) + Q̄(i m s + e▷t).
        let u = s.clone() * alpha.clone();
        let v = t.clone() * alpha;
        let w0 = times_i(t.clone() * m.clone()) - shift_up(s.clone()) * e_next.clone();
        let w1 = times_i(s * m) + shift_up(t) * e_next;
        let all = reshape(
            Tensor::stack::<5>(vec![u, v, w0, w1], 2),
            [nm, nl, 4 * b, 2],
        );
        let q = reshape(
            leg_synthesis(op, all, self.step.clone())?,
            [nm, nk, 4, b, 2],
        );
        let part = |j: usize| -> Tensor<4> { reshape(q.clone().narrow(2, j, 1), [nm, nk, b, 2]) };
        let mu = self.constant(&self.f.mu, [nm, nk, 1, 1], &part(0));
        let f0 = part(0) * mu.clone() + part(2);
        let f1 = part(3) - part(1) * mu;
        Ok(reshape(
            Tensor::stack::<5>(vec![f0, f1], 3),
            [nm, nk, b2, 2],
        ))
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

    /// `Q̄_l^m(x_k)` of each listed order from the kernel, `[m][l][k]`:
    /// the synthesis of unit coefficients.
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

    /// The derivative functions made of `Q̄` (this module's formulas) equal
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
                let rec = Recurrence::new(
                    &orders,
                    lmax,
                    &q.cosines,
                    &q.weights,
                    true,
                    Seeds::OverSine,
                    paired,
                );
                let qv = q_values(&rec);
                let vs = VectorStep::new(
                    &orders,
                    &q.cosines,
                    Step {
                        rec: alloc::sync::Arc::new(rec),
                        weighted: false,
                    },
                );
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
                            let ours0 =
                                vs.f.alpha[m * lmax + l] * vs.f.mu[m * nlat + k] * qv[m][l][k]
                                    - vs.f.e[m * lmax + l] * below;
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

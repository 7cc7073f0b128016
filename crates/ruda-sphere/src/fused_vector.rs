//! The serial vector transforms as one backend operation each (as
//! [`crate::fused`] for the scalar ones): the longitude FFT of both
//! components' rows, then per order the `Q̄` kernel on `μ X` and `X` read
//! straight from the FFT's rows, the degree factors, the shift by one
//! degree and the products with `i` of [`crate::vector_step`] on that
//! order's block, and one scatter into `[b, 2, l, m, 2]` (the synthesis:
//! the mirror image, each row's inverse FFT reading its orders from the
//! blocks).
//!
//! | op | maps |
//! |---|---|
//! | [`FusedVectorSht::vsht_analysis`] | `[2b, k, nlon] → [2b, l, m, 2]` ((θ, φ) → (s, t) per field) |
//! | [`FusedVectorSht::vsht_synthesis`] | `[2b, l, m, 2] → [2b, k, nlon]` |
//!
//! As a complex-linear map the analysis is
//! `(s, t) = (1/L) [[A0, −i A1], [−i A1, −A0]] (X0, X1)` with real `A_j`
//! (`L = l(l+1)`), so its adjoint is `[[A0ᵀ, i A1ᵀ], [i A1ᵀ, −A0ᵀ]]`
//! after `1/L`: the synthesis with the quadrature weights on coefficients
//! divided by `L` (`scaled`). The synthesis' adjoint is likewise the
//! analysis without weights or `1/L`. Each operation's backward is the
//! other with the same weighting and scaling and the adjoint longitude
//! factors.

use alloc::sync::Arc;
use alloc::vec;
use alloc::vec::Vec;

use burn_autodiff::Autodiff;
use burn_autodiff::checkpoint::base::Checkpointer;
use burn_autodiff::checkpoint::strategy::CheckpointStrategy;
use burn_autodiff::grads::Gradients;
use burn_autodiff::ops::{Backward, Ops, OpsKind, unary};
use burn_backend::tensor::FloatTensor;
use burn_backend::{Backend, TensorMetadata};
use burn_flex::Flex;
use rayon::prelude::*;

use crate::fourier::Modes;
use crate::fused::{Real, fields_first, on_values, scatter_orders};
use crate::legendre_fly::Step;
use crate::profile::{Stage, timed};
use crate::vector_step::VectorFactors;

/// One serial vector transform's parameters.
#[derive(Clone, Debug)]
pub(crate) struct FusedVector {
    /// The `Q̄` recurrence of every order over the grid, and whether the
    /// quadrature weights are applied.
    pub(crate) step: Step,
    /// The factors around it.
    pub(crate) factors: Arc<VectorFactors>,
    /// The longitude kernel (rows first).
    pub(crate) modes: Modes,
    /// Whether the coefficients carry `1 / (l (l+1))`: after the analysis,
    /// before the synthesis.
    pub(crate) scaled: bool,
}

/// The fused vector transforms as backend operations.
pub(crate) trait FusedVectorSht: Backend {
    /// `[2b, k, nlon] → [2b, l, m, 2]`.
    fn vsht_analysis(x: FloatTensor<Self>, f: FusedVector) -> FloatTensor<Self>;
    /// `[2b, l, m, 2] → [2b, k, nlon]`.
    fn vsht_synthesis(c: FloatTensor<Self>, f: FusedVector) -> FloatTensor<Self>;
}

/// `(re, im)` of entry `c` of a row of complex pairs.
fn at(row: &[f64], c: usize) -> (f64, f64) {
    (row[2 * c], row[2 * c + 1])
}

/// The analysis on host values `x` (`[2b, k, nlon]`, fields of (θ, φ)).
fn analysis<T: Real>(x: &[T], b: usize, f: &FusedVector) -> Vec<T> {
    let rec = &f.step.rec;
    let (nk, nl, nm) = (rec.nlat(), rec.lmax(), f.modes.mmax);
    let fc = &*f.factors;
    // [2b, k, m, 2]
    debug_assert_eq!(f.modes.layout, crate::fourier::SpectralLayout::RowsFirst);
    let rows = f.modes.forward(x, 2 * b, nk);
    // Columns: μX of the 2b fields (re, im), then X.
    let half = 4 * b;
    let cols = 2 * half;
    let blocks: Vec<Vec<f64>> = timed(Stage::Legendre, || {
        (0..nm)
            .into_par_iter()
            .map(|m| {
                let mut s = vec![0.0; nk * cols];
                for k in 0..nk {
                    let mu = fc.mu[m * nk + k];
                    for field in 0..2 * b {
                        let from = ((field * nk + k) * nm + m) * 2;
                        let (re, im) = (rows[from].into(), rows[from + 1].into());
                        let to = k * cols + field * 2;
                        s[to] = mu * re;
                        s[to + 1] = mu * im;
                        s[to + half] = re;
                        s[to + half + 1] = im;
                    }
                }
                let mut o = vec![0.0; nl * cols];
                rec.analysis_order(m, &s, &mut o, cols, f.step.weighted);
                // [l, 2b, 2]: (s, t) of each field.
                let mut st = vec![0.0; nl * half];
                let mf = fc.m[m];
                for l in 0..nl {
                    let (alpha, e) = (fc.alpha[m * nl + l], fc.e[m * nl + l]);
                    let inv = if f.scaled { fc.inv_ll[l] } else { 1.0 };
                    let row = &o[l * cols..(l + 1) * cols];
                    let below = (l > 0).then(|| &o[(l - 1) * cols..l * cols]);
                    for bi in 0..b {
                        let (th, ph) = (2 * bi, 2 * bi + 1);
                        let (g0, g1) = (at(row, th), at(row, ph));
                        let (h0, h1) = (at(&row[half..], th), at(&row[half..], ph));
                        let (p0, p1) = below.map_or(((0.0, 0.0), (0.0, 0.0)), |r| {
                            (at(&r[half..], th), at(&r[half..], ph))
                        });
                        // A0(X) = α Q̄(μX) − e Q̄(X)_{l−1}, A1(X) = m Q̄(X).
                        let a0x0 = (alpha * g0.0 - e * p0.0, alpha * g0.1 - e * p0.1);
                        let a0x1 = (alpha * g1.0 - e * p1.0, alpha * g1.1 - e * p1.1);
                        let (a1x0, a1x1) = ((mf * h0.0, mf * h0.1), (mf * h1.0, mf * h1.1));
                        // s = A0(X0) − i A1(X1), t = −i A1(X0) − A0(X1).
                        let out = &mut st[(l * 2 * b + th) * 2..(l * 2 * b + ph + 1) * 2];
                        out[0] = inv * (a0x0.0 + a1x1.1);
                        out[1] = inv * (a0x0.1 - a1x1.0);
                        out[2] = inv * (a1x0.1 - a0x1.0);
                        out[3] = inv * (-a1x0.0 - a0x1.1);
                    }
                }
                fields_first(&st, nl, 2 * b)
            })
            .collect()
    });
    drop(rows);
    // [2b, l, m, 2]
    timed(Stage::Reorder, || scatter_orders(&blocks, 2 * b * nl))
}

/// The synthesis on host values `c` (`[2b, l, m, 2]`, fields of (s, t)).
fn synthesis<T: Real>(c: &[T], b: usize, f: &FusedVector) -> Vec<T> {
    let rec = &f.step.rec;
    let (nk, nl, nm) = (rec.nlat(), rec.lmax(), f.modes.mmax);
    let fc = &*f.factors;
    // Columns: αs, αt, i m t − e▷s, i m s + e▷t of each of the b fields.
    let group = 2 * b;
    let cols = 4 * group;
    let blocks: Vec<Vec<f64>> = timed(Stage::Legendre, || {
        (0..nm)
            .into_par_iter()
            .map(|m| {
                let coef = |field: usize, l: usize| -> (f64, f64) {
                    if l >= nl {
                        return (0.0, 0.0);
                    }
                    let from = ((field * nl + l) * nm + m) * 2;
                    let inv = if f.scaled { fc.inv_ll[l] } else { 1.0 };
                    (inv * c[from].into(), inv * c[from + 1].into())
                };
                let mf = fc.m[m];
                let mut a = vec![0.0; nl * cols];
                for l in 0..nl {
                    let (alpha, e_next) = (fc.alpha[m * nl + l], fc.e_next[m * nl + l]);
                    let row = &mut a[l * cols..(l + 1) * cols];
                    for bi in 0..b {
                        let (s, t) = (coef(2 * bi, l), coef(2 * bi + 1, l));
                        let (s1, t1) = (coef(2 * bi, l + 1), coef(2 * bi + 1, l + 1));
                        let put = |row: &mut [f64], g: usize, v: (f64, f64)| {
                            row[g * group + 2 * bi] = v.0;
                            row[g * group + 2 * bi + 1] = v.1;
                        };
                        put(row, 0, (alpha * s.0, alpha * s.1));
                        put(row, 1, (alpha * t.0, alpha * t.1));
                        // i m t − e s_{l+1}, i m s + e t_{l+1}.
                        put(
                            row,
                            2,
                            (-mf * t.1 - e_next * s1.0, mf * t.0 - e_next * s1.1),
                        );
                        put(
                            row,
                            3,
                            (-mf * s.1 + e_next * t1.0, mf * s.0 + e_next * t1.1),
                        );
                    }
                }
                let mut o = vec![0.0; nk * cols];
                rec.synthesis_order(m, &a, &mut o, cols, f.step.weighted);
                // [k, 2b, 2]: (θ, φ) of each field.
                let mut v = vec![0.0; nk * 2 * group];
                for k in 0..nk {
                    let mu = fc.mu[m * nk + k];
                    let row = &o[k * cols..(k + 1) * cols];
                    for bi in 0..b {
                        for r in 0..2 {
                            let q = |g: usize| row[g * group + 2 * bi + r];
                            // F0 = μ P0 + P2, F1 = P3 − μ P1.
                            v[(k * 2 * b + 2 * bi) * 2 + r] = mu * q(0) + q(2);
                            v[(k * 2 * b + 2 * bi + 1) * 2 + r] = q(3) - mu * q(1);
                        }
                    }
                }
                fields_first(&v, nk, 2 * b)
            })
            .collect()
    });
    // Each row's orders read from the blocks as its FFT fills its spectrum.
    f.modes.inverse_with(2 * b * nk, |row, m| {
        let block = &blocks[m];
        (T::narrow(block[2 * row]), T::narrow(block[2 * row + 1]))
    })
}

impl FusedVectorSht for Flex {
    fn vsht_analysis(x: FloatTensor<Self>, f: FusedVector) -> FloatTensor<Self> {
        let shape = x.shape().to_vec();
        let rec = &f.step.rec;
        assert!(
            shape.len() == 3
                && shape[0].is_multiple_of(2)
                && shape[1] == rec.nlat()
                && shape[2] == f.modes.nlon,
            "a [2b, nlat, nlon] field (checked before routing)"
        );
        let b = shape[0] / 2;
        let out = vec![2 * b, rec.lmax(), f.modes.mmax, 2];
        on_values(x, out, |v| analysis(v, b, &f), |v| analysis(v, b, &f))
    }

    fn vsht_synthesis(c: FloatTensor<Self>, f: FusedVector) -> FloatTensor<Self> {
        let shape = c.shape().to_vec();
        let rec = &f.step.rec;
        assert!(
            shape.len() == 4
                && shape[0].is_multiple_of(2)
                && shape[1] == rec.lmax()
                && shape[2] == f.modes.mmax
                && shape[3] == 2,
            "[2b, lmax, mmax, 2] coefficients (checked before routing)"
        );
        let b = shape[0] / 2;
        let out = vec![2 * b, rec.nlat(), f.modes.nlon];
        on_values(c, out, |v| synthesis(v, b, &f), |v| synthesis(v, b, &f))
    }
}

/// Backward of [`FusedVectorSht::vsht_analysis`].
#[derive(Debug)]
struct AnalysisBackward;

impl<B: FusedVectorSht> Backward<B, 1> for AnalysisBackward {
    type State = FusedVector;
    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        let Ops {
            parents,
            node,
            state,
        } = ops;
        unary::<B, _>(parents, node, grads, |g| {
            let modes = state.modes.adjoint_of_forward();
            B::vsht_synthesis(g, FusedVector { modes, ..state })
        });
    }
}

/// Backward of [`FusedVectorSht::vsht_synthesis`].
#[derive(Debug)]
struct SynthesisBackward;

impl<B: FusedVectorSht> Backward<B, 1> for SynthesisBackward {
    type State = FusedVector;
    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        let Ops {
            parents,
            node,
            state,
        } = ops;
        unary::<B, _>(parents, node, grads, |g| {
            let modes = state.modes.adjoint_of_inverse();
            B::vsht_analysis(g, FusedVector { modes, ..state })
        });
    }
}

impl<B: FusedVectorSht, C: CheckpointStrategy> FusedVectorSht for Autodiff<B, C> {
    fn vsht_analysis(x: FloatTensor<Self>, f: FusedVector) -> FloatTensor<Self> {
        let (x, guard) = x.into_parts();
        let out = B::vsht_analysis(x, f.clone());
        match AnalysisBackward
            .prepare::<C>([guard])
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(prep) => prep.finish(f, out),
            OpsKind::UnTracked(prep) => prep.finish(out),
        }
    }

    fn vsht_synthesis(c: FloatTensor<Self>, f: FusedVector) -> FloatTensor<Self> {
        let (c, guard) = c.into_parts();
        let out = B::vsht_synthesis(c, f.clone());
        match SynthesisBackward
            .prepare::<C>([guard])
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(prep) => prep.finish(f, out),
            OpsKind::UnTracked(prep) => prep.finish(out),
        }
    }
}

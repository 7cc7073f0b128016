//! The serial vector transforms as one backend operation each (as
//! [`crate::fused`] for the scalar ones): the longitude FFT of both
//! components' rows writing each order's block
//! ([`crate::fourier::Modes::forward_orders`]), then per order the kernel
//! of `R` ([`crate::vector_step`]) on that block, the degree factors over
//! neighbouring degrees and the products with `i`, and one scatter into
//! `[b, 2, l, m, 2]` (the synthesis: the mirror image, the coefficients
//! gathered into per-order blocks, each row's inverse FFT reading its
//! orders from the blocks).
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

use crate::linear_op::linear;
use burn_autodiff::Autodiff;
use burn_autodiff::checkpoint::strategy::CheckpointStrategy;
use burn_backend::tensor::FloatTensor;
use burn_backend::{Backend, TensorMetadata};
use burn_flex::Flex;
use rayon::prelude::*;

use crate::fourier::Modes;
use crate::fused::{Real, gather_orders, on_values, scatter_orders};
use crate::legendre_fly::Step;
use crate::profile::{Stage, timed};
use crate::vector_step::VectorFactors;

/// One serial vector transform's parameters.
#[derive(Clone, Debug)]
pub(crate) struct FusedVector {
    /// The recurrence of `R` (every order, `lmax + 1` degrees, mirrored
    /// latitude pairs), and whether the quadrature weights are applied.
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

/// The analysis on host values `x` (`[2b, k, nlon]`, fields of (θ, φ)).
fn analysis<T: Real>(x: &[T], b: usize, f: &FusedVector) -> Vec<T> {
    let rec = &f.step.rec;
    let fc = &*f.factors;
    let (nk, nl, nm) = (rec.nlat(), fc.lmax, f.modes.mmax);
    // [k, 2b, 2] per order, straight from the FFT; columns: (re, im) of
    // the 2b fields. Every block from the step's pool and back to it.
    let pool = &*f.step.blocks;
    let inputs = f.modes.forward_orders(x, 2 * b, nk, pool);
    debug_assert_eq!(inputs.len(), nm);
    let cols = 4 * b;
    let blocks: Vec<Vec<f64>> = timed(Stage::Legendre, || {
        inputs
            .par_iter()
            .enumerate()
            .map_init(
                // Per task: H's rows, and a row of zeros for H_{−1}.
                || (vec![0.0; (nl + 1) * cols], vec![0.0; cols]),
                |(o, none), (m, s)| {
                    // H = R̂(X) over degrees 0..=L (the kernel adds to `o`).
                    o.fill(0.0);
                    rec.analysis_order(m, s, o, cols, f.step.weighted);
                    // [2b, l, 2], fields first (as `scatter_orders` reads
                    // them): field 2j holds s and field 2j + 1 holds t of
                    // input field j, whose four values in `o` are (re, im)
                    // of θ, then of φ.
                    // Every value written below.
                    let mut st = pool.take(nl * cols);
                    let mf = fc.m[m];
                    for l in 0..nl {
                        let at_l = m * nl + l;
                        let (c0, c1, c2) = (fc.c0[at_l], fc.c1[at_l], fc.c2[at_l]);
                        let inv = if f.scaled { fc.inv_ll[l] } else { 1.0 };
                        let row = &o[l * cols..(l + 1) * cols];
                        let up = &o[(l + 1) * cols..(l + 2) * cols];
                        let below = if l > 0 {
                            &o[(l - 1) * cols..l * cols]
                        } else {
                            &none[..]
                        };
                        for (j, ((h, u), d)) in row
                            .chunks_exact(4)
                            .zip(up.chunks_exact(4))
                            .zip(below.chunks_exact(4))
                            .enumerate()
                        {
                            // A0(X) = c0 H_l + c1 H_{l+1} + c2 H_{l−1}.
                            let a0 = |i: usize| c0 * h[i] + c1 * u[i] + c2 * d[i];
                            let (a0x0, a0x1) = ((a0(0), a0(1)), (a0(2), a0(3)));
                            let (a1x0, a1x1) = ((mf * h[0], mf * h[1]), (mf * h[2], mf * h[3]));
                            // s = A0(X0) − i A1(X1), t = −i A1(X0) − A0(X1).
                            let (s_at, t_at) = ((2 * j * nl + l) * 2, ((2 * j + 1) * nl + l) * 2);
                            st[s_at] = inv * (a0x0.0 + a1x1.1);
                            st[s_at + 1] = inv * (a0x0.1 - a1x1.0);
                            st[t_at] = inv * (a1x0.1 - a0x1.0);
                            st[t_at + 1] = inv * (-a1x0.0 - a0x1.1);
                        }
                    }
                    st
                },
            )
            .collect()
    });
    pool.give(inputs);
    // [2b, l, m, 2]
    let out = timed(Stage::Reorder, || scatter_orders(&blocks, 2 * b * nl));
    pool.give(blocks);
    out
}

/// The synthesis on host values `c` (`[2b, l, m, 2]`, fields of (s, t)).
fn synthesis<T: Real>(c: &[T], b: usize, f: &FusedVector) -> Vec<T> {
    let rec = &f.step.rec;
    let fc = &*f.factors;
    let (nk, nl, nm) = (rec.nlat(), fc.lmax, f.modes.mmax);
    // Columns: (re, im) of F0's and F1's sums per field, over degrees 0..=L.
    let cols = 4 * b;
    // [l, 2b, 2] per order. Every block from the step's pool and back to
    // it.
    let pool = &*f.step.blocks;
    let inputs = timed(Stage::Reorder, || gather_orders(c, 2 * b, nl, nm, pool));
    let blocks: Vec<Vec<f64>> = timed(Stage::Legendre, || {
        inputs
            .par_iter()
            .enumerate()
            .map_init(
                // Per task: the padded coefficients (rows 0, L + 1 and
                // L + 2 stay zero: only rows 1..=L are ever written) and
                // the sums `a` (every row written for each order).
                || (vec![0.0; (nl + 3) * cols], vec![0.0; (nl + 1) * cols]),
                |(padded, a), (m, block)| {
                    // Row `l + 1`: the coefficients of degree `l` scaled, per
                    // field (re, im) of s, then of t; rows of degrees −1, L and
                    // L + 1 are zero.
                    for l in 0..nl {
                        let inv = if f.scaled { fc.inv_ll[l] } else { 1.0 };
                        let to = &mut padded[(l + 1) * cols..(l + 2) * cols];
                        for (t, &v) in to.iter_mut().zip(&block[l * cols..(l + 1) * cols]) {
                            *t = inv * v;
                        }
                    }
                    let mf = fc.m[m];
                    for j in 0..=nl {
                        let at_j = m * (nl + 1) + j;
                        let (k0, k1, k2) = (fc.k0[at_j], fc.k1[at_j], fc.k2[at_j]);
                        let (d, h, u) = (
                            &padded[j * cols..(j + 1) * cols],
                            &padded[(j + 1) * cols..(j + 2) * cols],
                            &padded[(j + 2) * cols..(j + 3) * cols],
                        );
                        let row = &mut a[j * cols..(j + 1) * cols];
                        for (((row, h), d), u) in row
                            .chunks_exact_mut(4)
                            .zip(h.chunks_exact(4))
                            .zip(d.chunks_exact(4))
                            .zip(u.chunks_exact(4))
                        {
                            // E(C)_j = c0_j C_j + c1_{j−1} C_{j−1} + c2_{j+1} C_{j+1}.
                            let e = |i: usize| k0 * h[i] + k1 * d[i] + k2 * u[i];
                            let (s, t) = ((h[0], h[1]), (h[2], h[3]));
                            let (es, et) = ((e(0), e(1)), (e(2), e(3)));
                            // F0: E(s) + i m t; F1: i m s − E(t).
                            row[0] = es.0 - mf * t.1;
                            row[1] = es.1 + mf * t.0;
                            row[2] = -mf * s.1 - et.0;
                            row[3] = mf * s.0 - et.1;
                        }
                    }
                    // [k, 2b, 2]: (θ, φ) of each field (the kernel writes
                    // every row).
                    let mut o = pool.take(nk * cols);
                    rec.synthesis_order(m, a, &mut o, cols, f.step.weighted);
                    o
                },
            )
            .collect()
    });
    pool.give(inputs);
    // Each row's FFT reads its orders straight from the blocks.
    let out = f.modes.inverse_orders(&blocks, 2 * b, nk, T::narrow);
    pool.give(blocks);
    out
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
        let out = vec![2 * b, f.factors.lmax, f.modes.mmax, 2];
        on_values(x, out, |v| analysis(v, b, &f), |v| analysis(v, b, &f))
    }

    fn vsht_synthesis(c: FloatTensor<Self>, f: FusedVector) -> FloatTensor<Self> {
        let shape = c.shape().to_vec();
        let rec = &f.step.rec;
        assert!(
            shape.len() == 4
                && shape[0].is_multiple_of(2)
                && shape[1] == f.factors.lmax
                && shape[2] == f.modes.mmax
                && shape[3] == 2,
            "[2b, lmax, mmax, 2] coefficients (checked before routing)"
        );
        let b = shape[0] / 2;
        let out = vec![2 * b, rec.nlat(), f.modes.nlon];
        on_values(c, out, |v| synthesis(v, b, &f), |v| synthesis(v, b, &f))
    }
}

impl<B: FusedVectorSht, C: CheckpointStrategy> FusedVectorSht for Autodiff<B, C> {
    fn vsht_analysis(x: FloatTensor<Self>, f: FusedVector) -> FloatTensor<Self> {
        linear::<B, C, _>(x, f, B::vsht_analysis, |g, f| {
            let modes = f.modes.adjoint_of_forward();
            B::vsht_synthesis(g, FusedVector { modes, ..f })
        })
    }

    fn vsht_synthesis(c: FloatTensor<Self>, f: FusedVector) -> FloatTensor<Self> {
        linear::<B, C, _>(c, f, B::vsht_synthesis, |g, f| {
            let modes = f.modes.adjoint_of_inverse();
            B::vsht_analysis(g, FusedVector { modes, ..f })
        })
    }
}

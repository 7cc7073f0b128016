//! The serial scalar transforms as one backend operation each, on the host
//! values of a Flex tensor: the longitude FFT of every row writing each
//! order's values (widened to f64) straight into that order's block
//! ([`Modes::forward_orders`]), then per order the Legendre kernel on its
//! block, then the orders' results scattered into the coefficients'
//! `[b, l, m, 2]` layout; the synthesis is the mirror image (the
//! coefficients gathered into per-order blocks, the Legendre kernel per
//! order, each row's inverse FFT reading its orders straight from the
//! blocks and writing into the result). Compared with the three operations it replaces (FFT, Legendre
//! step, and the permutes between them), it skips two passes over the
//! spectrum (the orders-first reorder and the f64 copy) and the copies of
//! tensors read back from Burn (an input is read in place); the
//! coefficients' permute is one blocked pass each way ([`scatter_orders`],
//! [`gather_orders`], timed as the reorder stage).
//!
//! | op | maps | value |
//! |---|---|---|
//! | [`FusedSht::sht_analysis`] | `[b, k, nlon] → [b, l, m, 2]` | Legendre analysis ∘ [`Modes::forward_orders`] |
//! | [`FusedSht::sht_synthesis`] | `[b, l, m, 2] → [b, k, nlon]` | [`Modes::inverse_orders`] ∘ Legendre synthesis |
//!
//! The backward of each is the other with the adjoint longitude factors
//! ([`Modes`]) and the same Legendre weighting.
//!
//! With [`Fused::degrees_first`] the coefficients are `[l, m, b, 2]`
//! instead: each order's rows as the Legendre kernel writes (and reads)
//! them, `mmax·b·2` values apart, with no scatter or gather. A polar rank of
//! a distributed scalar transform takes this form: the polar
//! reduce-scatter along the degrees then cuts contiguous rows (no
//! transposing copy before it), the gather before the synthesis yields
//! them contiguous, and only the rank's own share of the degrees is
//! permuted to `[b, l, m, 2]`.

use alloc::vec;
use alloc::vec::Vec;

use crate::block_pool::BlockPool;
use crate::linear_op::linear;
use burn_autodiff::Autodiff;
use burn_autodiff::checkpoint::strategy::CheckpointStrategy;
use burn_backend::ops::FloatTensorOps;
use burn_backend::tensor::FloatTensor;
use burn_backend::{Backend, DType, TensorData, TensorMetadata};
use burn_flex::Flex;
use rayon::prelude::*;
use realfft::FftNum;

use crate::fourier::Modes;
use crate::legendre_fly::Step;
use crate::profile::{Stage, timed};

/// One serial transform's parameters, or one polar rank's: its Legendre
/// step (every order, over the whole grid's mirrored latitude pairs or a
/// rank's latitudes) and its longitude kernel (natural order
/// sequence: [`Modes::forward_orders`] writes each order's block, and the
/// synthesis reads the orders of each row).
#[derive(Clone, Debug)]
pub(crate) struct Fused {
    pub(crate) step: Step,
    pub(crate) modes: Modes,
    /// Coefficients `[l, m, b, 2]` (each order's rows as the kernel
    /// writes them) rather than `[b, l, m, 2]`.
    pub(crate) degrees_first: bool,
}

/// The fused transforms as backend operations.
pub(crate) trait FusedSht: Backend {
    /// `[b, k, nlon] → [b, l, m, 2]` (`[l, m, b, 2]` when
    /// [`Fused::degrees_first`]).
    fn sht_analysis(x: FloatTensor<Self>, f: Fused) -> FloatTensor<Self>;
    /// `[b, l, m, 2]` (`[l, m, b, 2]` when [`Fused::degrees_first`]) →
    /// `[b, k, nlon]`.
    fn sht_synthesis(c: FloatTensor<Self>, f: Fused) -> FloatTensor<Self>;
}

/// The element types the host kernels run on.
pub(crate) trait Real: FftNum + Into<f64> {
    fn narrow(v: f64) -> Self;
}
impl Real for f64 {
    fn narrow(v: f64) -> Self {
        v
    }
}
impl Real for f32 {
    fn narrow(v: f64) -> Self {
        v as f32
    }
}

/// The analysis on host values `x` (`[b, k, nlon]`).
fn analysis<T: Real>(x: &[T], b: usize, f: &Fused) -> Vec<T> {
    let rec = &f.step.rec;
    let (nk, nl, nm) = (rec.nlat(), rec.lmax(), f.modes.mmax);
    debug_assert_eq!(rec.orders().len(), nm);
    // [k, b, 2] per order, straight from the FFT; every block from the
    // step's pool and back to it.
    let pool = &*f.step.blocks;
    let inputs = f.modes.forward_orders(x, b, nk, pool);
    let cols = 2 * b;
    if f.degrees_first {
        // [l, m, b, 2]: row (l, m) is order m's row l as the kernel
        // writes it. The rows below are in bounds only with a block per
        // order: checked in every build.
        assert_eq!(inputs.len(), nm, "a block per order");
        let mut out = crate::huge_pages::zeroed::<T>(nl * nm * cols);
        if out.is_empty() {
            pool.give(inputs);
            return out;
        }
        let rows = RowsOf::new(&mut out);
        timed(Stage::Legendre, || {
            let scratch = || vec![0.0; nl * cols];
            inputs
                .par_iter()
                .enumerate()
                .for_each_init(scratch, |o, (m, s)| {
                    // The kernel adds to `o`.
                    o.fill(0.0);
                    rec.analysis_order(m, s, o, cols, f.step.weighted);
                    for (l, row) in o.chunks_exact(cols).enumerate() {
                        // Rows (l, m) of distinct orders never overlap (`m <
                        // nm`: one block per order, asserted above); this task
                        // alone handles order `m`, one row at a time (each
                        // slice is dropped before the next is made).
                        // SAFETY: valid: `row` checks the bounds; unaliased: no other task or slice touches row (l, m).
                        let dst = unsafe { rows.row((l * nm + m) * cols, cols) };
                        for (d, &v) in dst.iter_mut().zip(row) {
                            *d = T::narrow(v);
                        }
                    }
                });
        });
        pool.give(inputs);
        return out;
    }
    let blocks: Vec<Vec<f64>> = timed(Stage::Legendre, || {
        inputs
            .par_iter()
            .enumerate()
            .map_init(
                || vec![0.0; nl * cols],
                |o, (m, s)| {
                    // The kernel adds to `o`.
                    o.fill(0.0);
                    rec.analysis_order(m, s, o, cols, f.step.weighted);
                    fields_first(o, nl, b, pool)
                },
            )
            .collect()
    });
    pool.give(inputs);
    // [b, l, m, 2]
    let out = timed(Stage::Reorder, || scatter_orders(&blocks, b * nl));
    pool.give(blocks);
    out
}

/// The synthesis on host values `c` (`[b, l, m, 2]`, or `[l, m, b, 2]`
/// when [`Fused::degrees_first`]).
fn synthesis<T: Real>(c: &[T], b: usize, f: &Fused) -> Vec<T> {
    let rec = &f.step.rec;
    let (nk, nl, nm) = (rec.nlat(), rec.lmax(), f.modes.mmax);
    let cols = 2 * b;
    // Every block from the step's pool and back to it; the kernel writes
    // every row of its result.
    let pool = &*f.step.blocks;
    if f.degrees_first {
        // [l, m, b, 2]: order m's block is its rows, `nm · cols` apart.
        let blocks: Vec<Vec<f64>> = timed(Stage::Legendre, || {
            (0..nm)
                .into_par_iter()
                .map_init(
                    || vec![0.0; nl * cols],
                    |a, m| {
                        // No rows to read in an empty batch (`cols` = 0).
                        for (l, row) in a.chunks_exact_mut(cols.max(1)).enumerate() {
                            let at = (l * nm + m) * cols;
                            for (d, &v) in row.iter_mut().zip(&c[at..at + cols]) {
                                *d = v.into();
                            }
                        }
                        let mut o = pool.take(nk * cols);
                        rec.synthesis_order(m, a, &mut o, cols, f.step.weighted);
                        o
                    },
                )
                .collect()
        });
        let out = f.modes.inverse_orders(&blocks, b, nk, T::narrow);
        pool.give(blocks);
        return out;
    }
    // [l, b, 2] per order.
    let inputs = timed(Stage::Reorder, || gather_orders(c, b, nl, nm, pool));
    let blocks: Vec<Vec<f64>> = timed(Stage::Legendre, || {
        inputs
            .par_iter()
            .enumerate()
            .map(|(m, a)| {
                let mut o = pool.take(nk * cols);
                rec.synthesis_order(m, a, &mut o, cols, f.step.weighted);
                o
            })
            .collect()
    });
    pool.give(inputs);
    // Each row's FFT reads its orders straight from the blocks.
    let out = f.modes.inverse_orders(&blocks, b, nk, T::narrow);
    pool.give(blocks);
    out
}

/// The rows of a `[l, m, b, 2]` output that the analysis's parallel tasks
/// write, one order's rows each: the buffer borrowed for `'a`, so it
/// outlives every row handed out.
struct RowsOf<'a, T> {
    ptr: *mut T,
    len: usize,
    _buffer: core::marker::PhantomData<&'a mut [T]>,
}

// SAFETY: a `RowsOf` stands for the exclusive borrow of its buffer, which
// may move to or be shared with other threads as `&mut [T]` may for
// `T: Send`; every access goes through `RowsOf::row`, whose callers
// promise that no two threads touch the same elements.
unsafe impl<T: Send> Send for RowsOf<'_, T> {}
// SAFETY: as above.
unsafe impl<T: Send> Sync for RowsOf<'_, T> {}

impl<'a, T> RowsOf<'a, T> {
    fn new(buffer: &'a mut [T]) -> Self {
        RowsOf {
            ptr: buffer.as_mut_ptr(),
            len: buffer.len(),
            _buffer: core::marker::PhantomData,
        }
    }

    /// The `len` elements at `at`.
    ///
    /// # Panics
    /// If they are not all within the buffer.
    ///
    /// # Safety
    /// No other reference to, or access through this `RowsOf` of, those
    /// elements exists while the slice lives.
    #[allow(clippy::mut_from_ref)]
    unsafe fn row(&self, at: usize, len: usize) -> &'a mut [T] {
        let end = at.checked_add(len).expect("a row's end fits in usize");
        assert!(end <= self.len, "row {at}..{end} of {} elements", self.len);
        // `at..end` is within the borrowed buffer (checked above), which
        // lives for `'a`.
        // SAFETY: valid: in bounds of a live buffer; unaliased: the caller's promise (`# Safety`).
        unsafe { core::slice::from_raw_parts_mut(self.ptr.add(at), len) }
    }
}

/// Each order's `[r, fields, 2]` block, widened to f64, from `[fields, r,
/// m, 2]` values (`r` rows per field, `nm` orders): the inverse of
/// [`scatter_orders`]. In parallel over runs of [`SCATTER_ROWS`] rows: a
/// task reads its rows contiguously and writes a contiguous piece of every
/// block (instead of one strided value per cache line for each order).
/// The blocks come from `pool`, every value written.
pub(crate) fn gather_orders<T: Real>(
    values: &[T],
    fields: usize,
    r: usize,
    nm: usize,
    pool: &BlockPool,
) -> Vec<Vec<f64>> {
    debug_assert_eq!(values.len(), fields * r * nm * 2);
    let cols = 2 * fields;
    let mut blocks: Vec<Vec<f64>> = (0..nm).map(|_| pool.take(r * cols)).collect();
    if fields == 0 || r == 0 {
        return blocks;
    }
    let runs = r.div_ceil(SCATTER_ROWS);
    let mut pieces: Vec<Vec<&mut [f64]>> = (0..runs).map(|_| Vec::with_capacity(nm)).collect();
    for block in blocks.iter_mut() {
        for (run, piece) in block.chunks_mut(SCATTER_ROWS * cols).enumerate() {
            pieces[run].push(piece);
        }
    }
    pieces
        .into_par_iter()
        .enumerate()
        .for_each(|(run, mut pieces)| {
            let x0 = run * SCATTER_ROWS;
            for x in x0..(x0 + SCATTER_ROWS).min(r) {
                for field in 0..fields {
                    let row = &values[(field * r + x) * nm * 2..(field * r + x + 1) * nm * 2];
                    let at = ((x - x0) * fields + field) * 2;
                    for (piece, v) in pieces.iter_mut().zip(row.chunks_exact(2)) {
                        piece[at] = v[0].into();
                        piece[at + 1] = v[1].into();
                    }
                }
            }
        });
    blocks
}

/// Rows per task of [`scatter_orders`]: their outputs stay in cache while
/// every order's block is visited.
const SCATTER_ROWS: usize = 16;

/// One order's `[r, b, 2]` kernel result as `[b, r, 2]` (in cache, in the
/// order's own task), so that [`scatter_orders`] reads it contiguously; in
/// a block from `pool`, every value written.
pub(crate) fn fields_first(o: &[f64], r: usize, b: usize, pool: &BlockPool) -> Vec<f64> {
    let mut t = pool.take(o.len());
    for x in 0..r {
        for bi in 0..b {
            let (from, to) = ((x * b + bi) * 2, (bi * r + x) * 2);
            t[to] = o[from];
            t[to + 1] = o[from + 1];
        }
    }
    t
}

/// `[b, r, m, 2]` values (`r` rows per field) from each order's `[b, r, 2]`
/// block, in parallel over runs of rows; within a run, order by order, so
/// that each block is read along consecutive rows.
pub(crate) fn scatter_orders<T: Real>(blocks: &[Vec<f64>], rows_in_all: usize) -> Vec<T> {
    let nm = blocks.len();
    let mut out = crate::huge_pages::zeroed::<T>(rows_in_all * nm * 2);
    if out.is_empty() {
        return out;
    }
    out.par_chunks_mut(SCATTER_ROWS * nm * 2)
        .enumerate()
        .for_each(|(run, o)| {
            let first = run * SCATTER_ROWS;
            let rows = o.len() / (nm * 2);
            for (m, block) in blocks.iter().enumerate() {
                for j in 0..rows {
                    let from = (first + j) * 2;
                    let to = (j * nm + m) * 2;
                    o[to] = T::narrow(block[from]);
                    o[to + 1] = T::narrow(block[from + 1]);
                }
            }
        });
    out
}

/// Run `kernel` on the values of `x` (read in place when contiguous) and
/// make its result a tensor of `shape`.
pub(crate) fn on_values(
    x: FloatTensor<Flex>,
    out_shape: Vec<usize>,
    f64_kernel: impl FnOnce(&[f64]) -> Vec<f64>,
    f32_kernel: impl FnOnce(&[f32]) -> Vec<f32>,
) -> FloatTensor<Flex> {
    let x = if x.is_contiguous() {
        x
    } else {
        timed(Stage::HostCopies, || x.to_contiguous())
    };
    let data = match x.dtype() {
        DType::F64 => {
            let v = f64_kernel(x.as_slice::<f64>().expect("a contiguous f64 tensor"));
            TensorData::new(v, out_shape)
        }
        DType::F32 => {
            let v = f32_kernel(x.as_slice::<f32>().expect("a contiguous f32 tensor"));
            TensorData::new(v, out_shape)
        }
        other => panic!("ruda-sphere: transform of {other:?} (checked before routing)"),
    };
    timed(Stage::HostCopies, || {
        Flex::float_from_data(data, &burn_flex::FlexDevice)
    })
}

impl FusedSht for Flex {
    fn sht_analysis(x: FloatTensor<Self>, f: Fused) -> FloatTensor<Self> {
        let shape = x.shape().to_vec();
        let rec = &f.step.rec;
        assert!(
            shape.len() == 3 && shape[1] == rec.nlat() && shape[2] == f.modes.nlon,
            "a [b, nlat, nlon] field (checked before routing)"
        );
        let b = shape[0];
        let out = if f.degrees_first {
            vec![rec.lmax(), f.modes.mmax, b, 2]
        } else {
            vec![b, rec.lmax(), f.modes.mmax, 2]
        };
        on_values(x, out, |v| analysis(v, b, &f), |v| analysis(v, b, &f))
    }

    fn sht_synthesis(c: FloatTensor<Self>, f: Fused) -> FloatTensor<Self> {
        let shape = c.shape().to_vec();
        let rec = &f.step.rec;
        assert_eq!(
            shape.len(),
            4,
            "coefficients of rank 4 (checked before routing)"
        );
        let (degrees, orders, b) = if f.degrees_first {
            (shape[0], shape[1], shape[2])
        } else {
            (shape[1], shape[2], shape[0])
        };
        assert!(
            degrees == rec.lmax() && orders == f.modes.mmax && shape[3] == 2,
            "[b, lmax, mmax, 2] or [lmax, mmax, b, 2] coefficients (checked before routing)"
        );
        let out = vec![b, rec.nlat(), f.modes.nlon];
        on_values(c, out, |v| synthesis(v, b, &f), |v| synthesis(v, b, &f))
    }
}

impl<B: FusedSht, C: CheckpointStrategy> FusedSht for Autodiff<B, C> {
    fn sht_analysis(x: FloatTensor<Self>, f: Fused) -> FloatTensor<Self> {
        linear::<B, C, _>(x, f, B::sht_analysis, |g, f| {
            let modes = f.modes.adjoint_of_forward();
            B::sht_synthesis(g, Fused { modes, ..f })
        })
    }

    fn sht_synthesis(c: FloatTensor<Self>, f: Fused) -> FloatTensor<Self> {
        linear::<B, C, _>(c, f, B::sht_synthesis, |g, f| {
            let modes = f.modes.adjoint_of_inverse();
            B::sht_analysis(g, Fused { modes, ..f })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fourier::SpectralLayout::RowsFirst;
    use crate::legendre_stage::{Kind, LegendreStage};
    use crate::{LatitudeGrid, ShtSpec};

    /// The scalar fused operations of `spec` on the latitudes `bands`.
    fn fused(spec: &ShtSpec, bands: &[core::ops::Range<usize>], forward: bool) -> Fused {
        let orders: Vec<usize> = (0..spec.mmax()).collect();
        let LegendreStage::Scalar(step) =
            LegendreStage::new(spec, Kind::Scalar, &orders, bands, forward)
        else {
            unreachable!("a scalar stage")
        };
        let modes = if forward {
            Modes::analysis(spec.nlon(), spec.mmax(), RowsFirst)
        } else {
            Modes::synthesis(spec.nlon(), spec.mmax(), RowsFirst)
        };
        Fused {
            step,
            modes,
            degrees_first: false,
        }
    }

    /// What a transform keeps between calls is one call's blocks (two per
    /// order), each at most the largest batch's size: at least `(nlat +
    /// lmax) · mmax · 2 · batch` values (the crate docs' figure), at most
    /// `2 · nlat · mmax · 2 · batch`, the same after a call repeated or a
    /// smaller batch, and a larger batch's after it (the outgrown blocks
    /// dropped): for the analysis and the synthesis.
    #[test]
    fn a_transform_keeps_one_calls_blocks_of_its_largest_batch() {
        let spec = ShtSpec::new(13, 22, LatitudeGrid::Equiangular).unwrap();
        let (nk, nl, nm) = (13, spec.lmax(), spec.mmax());
        let whole = core::slice::from_ref(&(0..13));
        let (ana, syn) = (fused(&spec, whole, true), fused(&spec, whole, false));
        let (mut before, mut largest) = ((0, 0), 0);
        for b in [3usize, 3, 1, 0, 5, 5, 2] {
            let grows = b > largest;
            largest = largest.max(b);
            let x = vec![0.5f64; b * nk * 22];
            let c = analysis(&x, b, &ana);
            let _ = synthesis(&c, b, &syn);
            for (what, pool, previous) in [
                ("analysis", &ana.step.blocks, before.0),
                ("synthesis", &syn.step.blocks, before.1),
            ] {
                let (held, at) = (pool.held(), format!("{what} of {b}"));
                assert_eq!(pool.held_blocks(), 2 * nm, "{at}");
                assert!(held >= (nk + nl) * nm * 2 * largest, "{at}: {held}");
                assert!(held <= 2 * nk * nm * 2 * largest, "{at}: {held}");
                if !grows {
                    assert_eq!(held, previous, "{at}: no growth");
                }
            }
            before = (ana.step.blocks.held(), syn.step.blocks.held());
        }
    }

    #[test]
    fn degrees_first_coefficients_are_the_same_values_permuted() {
        // Whole grid and a mirrored band, 0, 1 and 3 fields, f64 and f32:
        // [l, m, b, 2] holds bit for bit the values [b, l, m, 2] holds.
        let spec = ShtSpec::new(13, 22, LatitudeGrid::Equiangular).unwrap();
        let (nl, nm) = (spec.lmax(), spec.mmax());
        let whole = 0..13;
        for bands in [vec![whole], vec![0..4, 9..13]] {
            let nk: usize = bands.iter().map(|r| r.len()).sum();
            for b in [0, 1, 3] {
                let x: Vec<f64> = (0..b * nk * 22)
                    .map(|i| ((i * 37) % 101) as f64 / 50.0 - 1.0)
                    .collect();
                let rows = fused(&spec, &bands, true);
                let degrees = Fused {
                    degrees_first: true,
                    ..rows.clone()
                };
                let (c_rows, c_degrees) = (analysis(&x, b, &rows), analysis(&x, b, &degrees));
                let c32_degrees = analysis(
                    &x.iter().map(|&v| v as f32).collect::<Vec<_>>(),
                    b,
                    &degrees,
                );
                let c32_rows = analysis(&x.iter().map(|&v| v as f32).collect::<Vec<_>>(), b, &rows);
                assert_eq!(c_degrees.len(), c_rows.len());
                for bi in 0..b {
                    for l in 0..nl {
                        for m in 0..nm {
                            for p in 0..2 {
                                let r = ((bi * nl + l) * nm + m) * 2 + p;
                                let o = ((l * nm + m) * b + bi) * 2 + p;
                                assert_eq!(c_degrees[o].to_bits(), c_rows[r].to_bits());
                                assert_eq!(c32_degrees[o].to_bits(), c32_rows[r].to_bits());
                            }
                        }
                    }
                }
                // Synthesis from each layout gives the same field.
                let inv = fused(&spec, &bands, false);
                let inv_degrees = Fused {
                    degrees_first: true,
                    ..inv.clone()
                };
                let (y_rows, y_degrees) = (
                    synthesis(&c_rows, b, &inv),
                    synthesis(&c_degrees, b, &inv_degrees),
                );
                assert_eq!((y_rows.len(), y_degrees.len()), (b * nk * 22, b * nk * 22));
                assert!(
                    y_rows
                        .iter()
                        .zip(&y_degrees)
                        .all(|(a, c)| a.to_bits() == c.to_bits())
                );
                let (y32_rows, y32_degrees) = (
                    synthesis(&c32_rows, b, &inv),
                    synthesis(&c32_degrees, b, &inv_degrees),
                );
                assert_eq!(y32_degrees.len(), y32_rows.len());
                assert!(
                    y32_rows
                        .iter()
                        .zip(&y32_degrees)
                        .all(|(a, c)| a.to_bits() == c.to_bits())
                );
            }
        }
    }

    /// Gathering each order's block from `[fields, r, m, 2]` values undoes
    /// scattering the blocks there (after `fields_first`), bit for bit, f64
    /// and f32: row counts that are and are not a multiple of a task's
    /// run, one and three fields, and no rows; blocks from pools that held
    /// NaNs.
    #[test]
    fn gathering_orders_undoes_scattering_them() {
        for (fields, r, nm) in [(3, 37, 5), (1, SCATTER_ROWS, 4), (2, 1, 3), (2, 0, 3)] {
            let cols = 2 * fields;
            // [r, fields, 2] per order, as a kernel writes them.
            let blocks: Vec<Vec<f64>> = (0..nm)
                .map(|m| {
                    (0..r * cols)
                        .map(|i| ((i * 31 + m * 7) % 97) as f64 / 8.0 - 6.0)
                        .collect()
                })
                .collect();
            // Every block from pools that held NaNs (longer than needed).
            let dirty = || BlockPool::dirty(nm, r * cols + 5);
            let firsts_pool = dirty();
            let firsts: Vec<Vec<f64>> = blocks
                .iter()
                .map(|b| fields_first(b, r, fields, &firsts_pool))
                .collect();
            let values: Vec<f64> = scatter_orders(&firsts, fields * r);
            assert_eq!(
                gather_orders(&values, fields, r, nm, &dirty()),
                blocks,
                "f64 {fields} {r} {nm}"
            );
            // The values are exact in f32 too (multiples of 1/8).
            let values32: Vec<f32> = scatter_orders(&firsts, fields * r);
            assert_eq!(
                gather_orders(&values32, fields, r, nm, &dirty()),
                blocks,
                "f32 {fields} {r} {nm}"
            );
        }
    }
}

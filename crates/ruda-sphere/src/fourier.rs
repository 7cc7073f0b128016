//! The longitude transform: a real DFT along the last axis, truncated to
//! the orders a transform keeps, as a differentiable Burn operation.
//!
//! Burn's own FFT (`burn-signal` 0.22 on Flex) handles power-of-two
//! lengths only, and sphere grids have 180, 360 or 720 longitudes; the
//! transforms here run `realfft` (any length, O(N log N)) on the host
//! tensor and record their adjoint on `Autodiff`. Two kernels, each the
//! other's adjoint up to a factor on the interior orders:
//!
//! | kernel | maps | value |
//! |---|---|---|
//! | [`Modes::forward`] | `[.., nlon] → [.., mmax, 2]` | `c_m = s·a_m Σ_j x_j e^{−2πi mj/N}` |
//! | [`Modes::inverse`] | `[.., mmax, 2] → [.., nlon]` | `x_j = s (Re c_0 + Σ_{0<m<N/2} 2b·Re(c_m e^{2πi mj/N}) + Re c_{N/2} (−1)^j)` |
//!
//! (or, with [`SpectralLayout::OrdersFirst`], `[b, k, nlon] ↔ [mmax, k, b, 2]`)
//!
//! with `a_m = a` (`b`) on the interior orders and 1 at `m = 0` and
//! `m = N/2`, whose imaginary parts are zero (forward) or ignored
//! (inverse); orders beyond `N/2` are zero (forward) or ignored (inverse).
//! The adjoint of `forward(s, a)` is `inverse(s, a/2)`, that of
//! `inverse(s, b)` is `forward(s, 2b)`.

use alloc::vec::Vec;
use core::mem::MaybeUninit;

use crate::linear_op::linear;
use burn_autodiff::Autodiff;
use burn_autodiff::checkpoint::strategy::CheckpointStrategy;
use burn_backend::ops::FloatTensorOps;
use burn_backend::tensor::FloatTensor;
use burn_backend::{Backend, DType, Shape, TensorData, TensorMetadata, read_sync};
use burn_flex::{Flex, FlexDevice};
use rayon::prelude::*;
use realfft::FftNum;

use crate::block_pool::BlockPool;
use crate::huge_pages::{Fresh, zeroed_piece};
use crate::profile::{Stage, timed};
use realfft::num_complex::Complex;

/// Where the orders sit in the spectral tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpectralLayout {
    /// The field `[.., nlon]` becomes `[.., mmax, 2]`: every row keeps its
    /// place, its orders last.
    RowsFirst,
    /// The field `[b, k, nlon]` becomes `[mmax, k, b, 2]`: orders first,
    /// so that each order's `[k, 2b]` block is contiguous — the layout of
    /// the Legendre step (the serial kernel, the distributed batched
    /// matmul), reached without a copy.
    OrdersFirst,
}

/// One longitude kernel's parameters.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Modes {
    /// Longitudes `N`.
    pub nlon: usize,
    /// Orders on the spectral side.
    pub mmax: usize,
    /// Overall factor `s`.
    pub scale: f64,
    /// Extra factor on the interior orders `0 < m < N/2`.
    pub interior: f64,
    /// Where the orders sit.
    pub layout: SpectralLayout,
    /// With [`SpectralLayout::OrdersFirst`], the orders' sequence along the
    /// first axis: `0, s, 2s, …, 1, 1 + s, …` for a stride `s` (the
    /// round-robin deal of orders over `s` azimuth ranks, see
    /// [`SphereLayout`](crate::SphereLayout)); 1 is the natural order.
    pub order_stride: usize,
}

impl Modes {
    /// The analysis of a spherical harmonic transform: torch-harmonics'
    /// `2π · rfft(x, norm="forward")[..mmax]`.
    pub fn analysis(nlon: usize, mmax: usize, layout: SpectralLayout) -> Self {
        Modes {
            nlon,
            mmax,
            scale: 2.0 * core::f64::consts::PI / nlon as f64,
            interior: 1.0,
            layout,
            order_stride: 1,
        }
    }

    /// The synthesis of an inverse transform: torch-harmonics'
    /// `irfft(c, n=nlon, norm="forward")` with the imaginary parts of
    /// orders 0 and N/2 dropped.
    pub fn synthesis(nlon: usize, mmax: usize, layout: SpectralLayout) -> Self {
        Modes {
            nlon,
            mmax,
            scale: 1.0,
            interior: 1.0,
            layout,
            order_stride: 1,
        }
    }

    /// The same kernel with the orders dealt over `stride` ranks (see
    /// [`Modes::order_stride`]).
    pub fn dealt(self, stride: usize) -> Self {
        Modes {
            order_stride: stride.max(1),
            ..self
        }
    }

    /// The order at each position of the first axis of an
    /// [`SpectralLayout::OrdersFirst`] buffer.
    pub(crate) fn order_sequence(&self) -> Vec<usize> {
        let s = self.order_stride.max(1);
        (0..s).flat_map(|r| (r..self.mmax).step_by(s)).collect()
    }

    /// The kernel whose [`Modes::inverse`] is the adjoint of this
    /// [`Modes::forward`].
    pub(crate) fn adjoint_of_forward(self) -> Self {
        Modes {
            interior: self.interior / 2.0,
            ..self
        }
    }

    /// The kernel whose [`Modes::forward`] is the adjoint of this
    /// [`Modes::inverse`].
    pub(crate) fn adjoint_of_inverse(self) -> Self {
        Modes {
            interior: self.interior * 2.0,
            ..self
        }
    }

    fn factor(&self, m: usize) -> (f64, bool) {
        let edge = m == 0 || 2 * m == self.nlon;
        (self.scale * if edge { 1.0 } else { self.interior }, edge)
    }

    fn factors<T: FftNum>(&self) -> Vec<(T, bool)> {
        (0..self.mmax.min(self.nlon / 2 + 1))
            .map(|m| {
                let (f, edge) = self.factor(m);
                (T::from_f64(f).expect("a float"), edge)
            })
            .collect()
    }

    /// Forward kernel on a field of `b_len × k_len` rows of `nlon` values
    /// (for [`SpectralLayout::RowsFirst`] only the product matters). Rows
    /// are transformed in parallel (rayon).
    pub fn forward<T: FftNum>(&self, input: &[T], b_len: usize, k_len: usize) -> Vec<T> {
        let (n, mmax) = (self.nlon, self.mmax);
        debug_assert_eq!(input.len(), b_len * k_len * n);
        if b_len == 0 || k_len == 0 {
            // No rows (an empty batch, or a rank without latitudes).
            return Vec::new();
        }
        let plan = crate::fft_plans::forward::<T>(n);
        let factors = self.factors::<T>();
        let mut rows = crate::huge_pages::zeroed::<T>(b_len * k_len * mmax * 2);
        timed(Stage::Fourier, || {
            rows.par_chunks_mut(mmax * 2)
                .zip(input.par_chunks(n))
                .for_each_init(
                    || {
                        (
                            plan.make_input_vec(),
                            plan.make_output_vec(),
                            plan.make_scratch_vec(),
                        )
                    },
                    |(buf, spec, scratch), (o, row)| {
                        buf.copy_from_slice(row);
                        plan.process_with_scratch(buf, spec, scratch)
                            .expect("buffers made by the plan");
                        for (m, &(f, edge)) in factors.iter().enumerate() {
                            o[2 * m] = spec[m].re * f;
                            o[2 * m + 1] = if edge { T::zero() } else { spec[m].im * f };
                        }
                    },
                )
        });
        match self.layout {
            SpectralLayout::RowsFirst => rows,
            SpectralLayout::OrdersFirst => timed(Stage::Reorder, || {
                // [b, k, m, 2] → [m, k, b, 2], one order per task, the
                // orders in their dealt sequence.
                let sequence = self.order_sequence();
                let mut out = crate::huge_pages::zeroed::<T>(rows.len());
                out.par_chunks_mut(k_len * b_len * 2)
                    .zip(sequence.par_iter())
                    .for_each(|(o, &m)| {
                        for k in 0..k_len {
                            for b in 0..b_len {
                                let from = ((b * k_len + k) * mmax + m) * 2;
                                let to = (k * b_len + b) * 2;
                                o[to] = rows[from];
                                o[to + 1] = rows[from + 1];
                            }
                        }
                    });
                out
            }),
        }
    }

    /// The forward kernel straight into one block per order (the fused
    /// transforms' analysis): for `input` of `fields × k_len` rows of
    /// `nlon` values, order `m`'s block is `[k, fields, 2]` in f64, the
    /// layout the Legendre kernel reads. No spectral buffer of every row is
    /// made: each task transforms the rows of a run of latitudes and
    /// writes every order's values of them, a contiguous piece of each
    /// block. Orders in their natural sequence. The blocks come from
    /// `pool` (give them back when done).
    pub(crate) fn forward_orders<T: FftNum + Into<f64>>(
        &self,
        input: &[T],
        fields: usize,
        k_len: usize,
        pool: &BlockPool,
    ) -> Vec<Vec<f64>> {
        let (n, mmax) = (self.nlon, self.mmax);
        debug_assert_eq!(input.len(), fields * k_len * n);
        debug_assert_eq!(self.order_stride, 1, "the natural order sequence");
        let cols = 2 * fields;
        if fields == 0 || k_len == 0 {
            return (0..mmax).map(|_| Vec::new()).collect();
        }
        let plan = crate::fft_plans::forward::<T>(n);
        let factors = self.factors::<T>();
        // The orders the FFT gives (`0..=nlon/2`): the tasks below write
        // every value of their blocks (which may hold a former call's
        // values); the blocks of any orders above are zeros.
        let given = factors.len();
        let mut blocks: Vec<Vec<f64>> = (0..mmax)
            .map(|m| {
                if m < given {
                    pool.take(k_len * cols)
                } else {
                    pool.take_zeroed(k_len * cols)
                }
            })
            .collect();
        // Each task's piece of every block given.
        let run_len = latitude_run(k_len);
        let runs = k_len.div_ceil(run_len);
        let mut pieces: Vec<Vec<&mut [f64]>> =
            (0..runs).map(|_| Vec::with_capacity(given)).collect();
        for block in blocks.iter_mut().take(given) {
            for (run, piece) in block.chunks_mut(run_len * cols).enumerate() {
                pieces[run].push(piece);
            }
        }
        let h = plan.complex_len();
        // A group's rows, at most: no more than a run has.
        let held = SPECTRA_ROWS.min(run_len * fields);
        timed(Stage::Fourier, || {
            pieces.into_par_iter().enumerate().for_each_init(
                || {
                    (
                        plan.make_input_vec(),
                        vec![Complex::new(T::zero(), T::zero()); held * h],
                        plan.make_scratch_vec(),
                    )
                },
                |(buf, spectra, scratch), (run, mut pieces)| {
                    let k0 = run * run_len;
                    let k_end = (k0 + run_len).min(k_len);
                    // The run's rows in groups of `SPECTRA_ROWS`: every
                    // row's spectrum first, then each order's values of
                    // them, written in one stretch of its block (row by
                    // row, the values of one row went to as many blocks as
                    // there are orders, a line each).
                    for (g0, rows) in row_groups(k0 * fields, k_end * fields) {
                        let spectra = &mut spectra[..rows * h];
                        for (g, spec) in (g0..).zip(spectra.chunks_exact_mut(h)) {
                            let (k, field) = (g / fields, g % fields);
                            let row = &input[(field * k_len + k) * n..(field * k_len + k + 1) * n];
                            buf.copy_from_slice(row);
                            plan.process_with_scratch(buf, spec, scratch)
                                .expect("buffers made by the plan");
                        }
                        // Row `g` (latitude `g / fields`, field `g %
                        // fields`) is at `2 g` of a block, whose run's
                        // piece starts at row `k0 · fields`.
                        let at = (g0 - k0 * fields) * 2;
                        for (m, (piece, &(f, edge))) in pieces.iter_mut().zip(&factors).enumerate()
                        {
                            let out = &mut piece[at..at + 2 * rows];
                            for (o, spec) in out.chunks_exact_mut(2).zip(spectra.chunks_exact(h)) {
                                let c = spec[m];
                                o[0] = (c.re * f).into();
                                o[1] = if edge { 0.0 } else { (c.im * f).into() };
                            }
                        }
                    }
                },
            )
        });
        blocks
    }

    /// The inverse kernel straight from one block per order (the fused
    /// transforms' synthesis; the mirror of [`Modes::forward_orders`]):
    /// order `m`'s block is `[k, fields, 2]` in f64, as the Legendre kernel
    /// writes it; the result is `fields × k_len` rows of `nlon` values,
    /// each value made by `narrow`. Each task transforms the rows of a run
    /// of latitudes, reading a contiguous piece of every block, and writes
    /// the FFT's output straight into the result's rows.
    pub(crate) fn inverse_orders<T: FftNum>(
        &self,
        blocks: &[Vec<f64>],
        fields: usize,
        k_len: usize,
        narrow: impl Fn(f64) -> T + Sync,
    ) -> Vec<T> {
        let n = self.nlon;
        debug_assert_eq!(self.order_stride, 1, "the natural order sequence");
        debug_assert!(blocks.iter().all(|b| b.len() == k_len * fields * 2));
        let len = fields * k_len * n;
        if len == 0 {
            return Vec::new();
        }
        let mut out = Fresh::<T>::new(len);
        let plan = crate::fft_plans::inverse::<T>(n);
        let factors = self.factors::<T>();
        // The orders written into each row's spectrum; those past them are
        // zeroed on every row (the FFT uses the whole spectrum as scratch).
        let given = blocks.len().min(factors.len());
        // Each task's rows: per field, the run's latitudes.
        debug_assert_eq!(blocks.len(), self.mmax, "a block per order");
        let run_len = latitude_run(k_len);
        let runs = k_len.div_ceil(run_len);
        let mut pieces: Vec<Vec<&mut [MaybeUninit<T>]>> =
            (0..runs).map(|_| Vec::with_capacity(fields)).collect();
        // The pieces split the whole room: every field's rows, in runs.
        for field_rows in out.room().chunks_mut(k_len * n) {
            for (run, piece) in field_rows.chunks_mut(run_len * n).enumerate() {
                pieces[run].push(piece);
            }
        }
        let h = plan.complex_len();
        // A group's rows, at most: no more than a run has.
        let held = SPECTRA_ROWS.min(run_len * fields);
        timed(Stage::Fourier, || {
            pieces.into_par_iter().enumerate().for_each_init(
                || {
                    (
                        vec![Complex::new(T::zero(), T::zero()); held * h],
                        plan.make_scratch_vec(),
                    )
                },
                |(spectra, scratch), (run, mut pieces)| {
                    let k0 = run * run_len;
                    let k_end = (k0 + run_len).min(k_len);
                    // The run's rows in groups, as in `forward_orders`:
                    // each order's values of them read in one stretch of
                    // its block into every row's spectrum, then the rows
                    // transformed. Row `g` (latitude `g / fields`, field
                    // `g % fields`) is at `2 g` of a block.
                    for (g0, rows) in row_groups(k0 * fields, k_end * fields) {
                        let spectra = &mut spectra[..rows * h];
                        for (m, (block, &(f, edge))) in blocks.iter().zip(&factors).enumerate() {
                            for (v, spec) in block[2 * g0..2 * (g0 + rows)]
                                .chunks_exact(2)
                                .zip(spectra.chunks_exact_mut(h))
                            {
                                let im = if edge { T::zero() } else { narrow(v[1]) * f };
                                spec[m] = Complex::new(narrow(v[0]) * f, im);
                            }
                        }
                        for (g, spec) in (g0..).zip(spectra.chunks_exact_mut(h)) {
                            let (k, field) = (g / fields, g % fields);
                            spec[given..].fill(Complex::new(T::zero(), T::zero()));
                            // Each row is initialised here, then
                            // overwritten whole by the FFT.
                            let row =
                                zeroed_piece(&mut pieces[field][(k - k0) * n..(k - k0 + 1) * n]);
                            plan.process_with_scratch(spec, row, scratch)
                                .expect("real edge orders and buffers of the plan's lengths");
                        }
                    }
                },
            )
        });
        // The tasks covered every run of every field's rows (`k0..k0 +
        // run_len` over `runs` runs is `0..k_len`, and a run's groups its
        // rows `k0 · fields..k_end · fields`), each row initialised by
        // `zeroed_piece`; a panic in a task reaches here as a panic, and
        // the room is freed uninitialised.
        // SAFETY: valid: every element of the room was initialised above.
        unsafe { out.assume_init() }
    }

    /// Inverse kernel on a spectral buffer of `b_len × k_len` rows (laid
    /// out as [`Modes::layout`] says); gives `b_len × k_len` rows of
    /// `nlon` values. Rows are transformed in parallel (rayon).
    pub fn inverse<T: FftNum>(&self, input: &[T], b_len: usize, k_len: usize) -> Vec<T> {
        let mmax = self.mmax;
        debug_assert_eq!(input.len(), b_len * k_len * mmax * 2);
        if b_len == 0 || k_len == 0 {
            return Vec::new();
        }
        let gathered: Option<Vec<T>> = match self.layout {
            SpectralLayout::RowsFirst => None,
            SpectralLayout::OrdersFirst => Some(timed(Stage::Reorder, || {
                // [m, k, b, 2] (orders in their dealt sequence) → [b, k,
                // m, 2], one row per task.
                let mut position = alloc::vec![0; mmax];
                for (p, m) in self.order_sequence().into_iter().enumerate() {
                    position[m] = p;
                }
                let mut r = crate::huge_pages::zeroed::<T>(input.len());
                r.par_chunks_mut(mmax * 2).enumerate().for_each(|(row, o)| {
                    let (b, k) = (row / k_len, row % k_len);
                    for (m, &p) in position.iter().enumerate() {
                        let from = ((p * k_len + k) * b_len + b) * 2;
                        o[2 * m] = input[from];
                        o[2 * m + 1] = input[from + 1];
                    }
                });
                r
            })),
        };
        let rows: &[T] = gathered.as_deref().unwrap_or(input);
        self.inverse_with(b_len * k_len, |row, m| {
            let at = (row * mmax + m) * 2;
            (rows[at], rows[at + 1])
        })
    }

    /// The inverse kernel on `rows` rows whose order-`m` value `fill(row,
    /// m)` gives (real, imaginary), read as the FFT needs it (no spectral
    /// buffer of every row first). Rows are transformed in parallel.
    fn inverse_with<T: FftNum>(
        &self,
        rows: usize,
        fill: impl Fn(usize, usize) -> (T, T) + Sync,
    ) -> Vec<T> {
        let n = self.nlon;
        let plan = crate::fft_plans::inverse::<T>(n);
        let factors = self.factors::<T>();
        let mut out = crate::huge_pages::zeroed::<T>(rows * n);
        if out.is_empty() {
            return out;
        }
        timed(Stage::Fourier, || {
            out.par_chunks_mut(n).enumerate().for_each_init(
                || (plan.make_input_vec(), plan.make_scratch_vec()),
                |(spec, scratch), (row, o)| {
                    spec.fill(Complex::new(T::zero(), T::zero()));
                    for (m, &(f, edge)) in factors.iter().enumerate() {
                        let (re, im) = fill(row, m);
                        let im = if edge { T::zero() } else { im * f };
                        spec[m] = Complex::new(re * f, im);
                    }
                    // Straight into the output row (its length is the
                    // plan's), no copy.
                    plan.process_with_scratch(spec, o, scratch)
                        .expect("real edge orders and buffers of the plan's lengths");
                },
            )
        });
        out
    }
}

/// Rows whose spectra [`Modes::forward_orders`] and
/// [`Modes::inverse_orders`] hold at once, whatever the number of fields
/// (about 180 KB of `f64` spectra at 1440 longitudes): a task's rows are
/// taken in groups of this many, so that each order's values of a group
/// are one stretch of its block.
const SPECTRA_ROWS: usize = 16;

/// The groups of rows `from..to` (row `g`: latitude `g / fields`, field
/// `g % fields`, in a block's `[k, fields, 2]` order): the first row of
/// each and its length, [`SPECTRA_ROWS`] but the last. Which group
/// transforms a row does not change its values.
fn row_groups(from: usize, to: usize) -> impl Iterator<Item = (usize, usize)> {
    (from..to)
        .step_by(SPECTRA_ROWS)
        .map(move |g0| (g0, SPECTRA_ROWS.min(to - g0)))
}

/// Latitudes per task of [`Modes::forward_orders`] and
/// [`Modes::inverse_orders`] at most: a task writes `LATITUDE_RUN × fields
/// × 2` consecutive values of every order's block (forward) or reads them
/// (inverse), whole cache lines mostly.
const LATITUDE_RUN: usize = 8;

/// The latitudes per task for `k_len` latitudes: [`LATITUDE_RUN`], fewer
/// when that would leave rayon's threads without four tasks each (a small
/// grid with a large batch). Which task transforms a row does not change
/// its values.
fn latitude_run(k_len: usize) -> usize {
    let tasks = 4 * rayon::current_num_threads();
    LATITUDE_RUN.min(k_len.div_ceil(tasks)).max(1)
}

/// The longitude kernels as a backend operation, for Flex and (with their
/// adjoints) for `Autodiff` over it.
pub trait LongitudeFourier: Backend {
    /// [`Modes::forward`] along the last axis: `[.., nlon] → [.., mmax, 2]`.
    fn lon_forward(x: FloatTensor<Self>, modes: Modes) -> FloatTensor<Self>;
    /// [`Modes::inverse`] along the last two axes: `[.., mmax, 2] → [.., nlon]`.
    fn lon_inverse(c: FloatTensor<Self>, modes: Modes) -> FloatTensor<Self>;
}

/// Run `kernel` on the host values of a Flex tensor of f32 or f64.
fn on_host(
    x: FloatTensor<Flex>,
    out_shape: Vec<usize>,
    kernel: impl Fn(&dyn Kernel) -> HostOut,
) -> FloatTensor<Flex> {
    let data = timed(Stage::HostCopies, || {
        read_sync(Flex::float_into_data(x)).expect("a Flex tensor reads back")
    });
    let out = match data.dtype() {
        DType::F64 => kernel(&data.as_slice::<f64>().expect("f64 values")),
        DType::F32 => kernel(&data.as_slice::<f32>().expect("f32 values")),
        other => panic!("ruda-sphere: longitude transform of {other:?} (checked before routing)"),
    };
    timed(Stage::HostCopies, || {
        let data = match out {
            HostOut::F64(v) => TensorData::new(v, Shape::from(out_shape)),
            HostOut::F32(v) => TensorData::new(v, Shape::from(out_shape)),
        };
        Flex::float_from_data(data, &FlexDevice)
    })
}

/// The values a kernel returns, in the input's precision.
enum HostOut {
    F32(Vec<f32>),
    F64(Vec<f64>),
}

/// Host values of either precision.
trait Kernel {
    fn forward(&self, m: &Modes, b_len: usize, k_len: usize) -> HostOut;
    fn inverse(&self, m: &Modes, b_len: usize, k_len: usize) -> HostOut;
}

impl Kernel for &[f64] {
    fn forward(&self, m: &Modes, b_len: usize, k_len: usize) -> HostOut {
        HostOut::F64(m.forward(self, b_len, k_len))
    }
    fn inverse(&self, m: &Modes, b_len: usize, k_len: usize) -> HostOut {
        HostOut::F64(m.inverse(self, b_len, k_len))
    }
}

impl Kernel for &[f32] {
    fn forward(&self, m: &Modes, b_len: usize, k_len: usize) -> HostOut {
        HostOut::F32(m.forward(self, b_len, k_len))
    }
    fn inverse(&self, m: &Modes, b_len: usize, k_len: usize) -> HostOut {
        HostOut::F32(m.inverse(self, b_len, k_len))
    }
}

impl LongitudeFourier for Flex {
    fn lon_forward(x: FloatTensor<Self>, modes: Modes) -> FloatTensor<Self> {
        let shape = x.shape().to_vec();
        assert_eq!(shape.last(), Some(&modes.nlon), "checked before routing");
        let rows = shape[..shape.len() - 1].iter().product::<usize>();
        let (b_len, k_len, out) = match modes.layout {
            SpectralLayout::RowsFirst => {
                let mut out = shape[..shape.len() - 1].to_vec();
                out.extend([modes.mmax, 2]);
                (rows, 1, out)
            }
            SpectralLayout::OrdersFirst => {
                assert_eq!(shape.len(), 3, "a [b, k, nlon] field");
                (shape[0], shape[1], vec![modes.mmax, shape[1], shape[0], 2])
            }
        };
        on_host(x, out, |h| h.forward(&modes, b_len, k_len))
    }

    fn lon_inverse(c: FloatTensor<Self>, modes: Modes) -> FloatTensor<Self> {
        let shape = c.shape().to_vec();
        let (b_len, k_len, out) = match modes.layout {
            SpectralLayout::RowsFirst => {
                assert!(shape.ends_with(&[modes.mmax, 2]), "checked before routing");
                let lead = &shape[..shape.len() - 2];
                let mut out = lead.to_vec();
                out.push(modes.nlon);
                (lead.iter().product(), 1, out)
            }
            SpectralLayout::OrdersFirst => {
                assert!(
                    shape.len() == 4 && shape[0] == modes.mmax && shape[3] == 2,
                    "an [mmax, k, b, 2] spectrum"
                );
                (shape[2], shape[1], vec![shape[2], shape[1], modes.nlon])
            }
        };
        on_host(c, out, |h| h.inverse(&modes, b_len, k_len))
    }
}

impl<B: LongitudeFourier, C: CheckpointStrategy> LongitudeFourier for Autodiff<B, C> {
    fn lon_forward(x: FloatTensor<Self>, modes: Modes) -> FloatTensor<Self> {
        linear::<B, C, _>(x, modes, B::lon_forward, |g, m| {
            B::lon_inverse(g, m.adjoint_of_forward())
        })
    }

    fn lon_inverse(c: FloatTensor<Self>, modes: Modes) -> FloatTensor<Self> {
        linear::<B, C, _>(c, modes, B::lon_inverse, |g, m| {
            B::lon_forward(g, m.adjoint_of_inverse())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::f64::consts::PI;

    /// Direct O(N·M) evaluation of the forward kernel.
    fn forward_direct(x: &[f64], m: &Modes) -> Vec<f64> {
        let n = m.nlon;
        let mut out = vec![0.0; m.mmax * 2];
        for k in 0..m.mmax.min(n / 2 + 1) {
            let (f, edge) = m.factor(k);
            let (mut re, mut im) = (0.0, 0.0);
            for (j, v) in x.iter().enumerate() {
                let a = 2.0 * PI * ((k * j) % n) as f64 / n as f64;
                re += v * a.cos();
                im -= v * a.sin();
            }
            out[2 * k] = f * re;
            out[2 * k + 1] = if edge { 0.0 } else { f * im };
        }
        out
    }

    fn sample(len: usize, seed: u64) -> Vec<f64> {
        (0..len)
            .map(|i| {
                let h = (i as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ seed;
                (h % 10_000) as f64 / 5_000.0 - 1.0
            })
            .collect()
    }

    fn dot(a: &[f64], b: &[f64]) -> f64 {
        a.iter().zip(b).map(|(x, y)| x * y).sum()
    }

    #[test]
    fn forward_matches_the_direct_sum_for_odd_even_and_truncated_lengths() {
        for (n, mmax) in [(12, 7), (12, 4), (15, 8), (15, 3), (8, 9), (1, 1), (2, 2)] {
            let m = Modes {
                nlon: n,
                mmax,
                scale: 0.7,
                interior: 1.5,
                layout: SpectralLayout::RowsFirst,
                order_stride: 1,
            };
            let x = sample(2 * n, 3);
            let got = m.forward(&x, 2, 1);
            for r in 0..2 {
                let want = forward_direct(&x[r * n..(r + 1) * n], &m);
                for (g, w) in got[r * mmax * 2..(r + 1) * mmax * 2].iter().zip(&want) {
                    assert!((g - w).abs() < 1e-13, "n={n} mmax={mmax}: {g} vs {w}");
                }
            }
        }
    }

    #[test]
    fn each_kernel_is_the_others_adjoint() {
        let layouts = [
            (SpectralLayout::RowsFirst, 1),
            (SpectralLayout::OrdersFirst, 1),
            (SpectralLayout::OrdersFirst, 3),
        ];
        for ((n, mmax), (layout, order_stride)) in [(12, 7), (12, 5), (15, 8), (9, 3), (6, 6)]
            .into_iter()
            .flat_map(|c| layouts.map(|l| (c, l)))
        {
            let m = Modes {
                nlon: n,
                mmax,
                scale: 1.3,
                interior: 0.8,
                layout,
                order_stride,
            };
            // Six rows: b = 2, k = 3.
            let x = sample(6 * n, 11);
            let y = sample(6 * mmax * 2, 29);
            // <F x, y> = <x, Fᵀ y> and <I y, x> = <y, Iᵀ x>.
            let lhs = dot(&m.forward(&x, 2, 3), &y);
            let rhs = dot(&x, &m.adjoint_of_forward().inverse(&y, 2, 3));
            assert!(
                (lhs - rhs).abs() < 1e-12 * lhs.abs().max(1.0),
                "{lhs} {rhs}"
            );
            let lhs = dot(&m.inverse(&y, 2, 3), &x);
            let rhs = dot(&y, &m.adjoint_of_inverse().forward(&x, 2, 3));
            // The inverse ignores the imaginary parts of the edge orders
            // and the adjoint gives them zero gradient: the identity holds.
            assert!(
                (lhs - rhs).abs() < 1e-12 * lhs.abs().max(1.0),
                "{lhs} {rhs}"
            );
        }
    }

    #[test]
    fn orders_first_is_a_permutation_of_rows_first() {
        let (b, k, n, mmax) = (2, 3, 10, 4);
        let x = sample(b * k * n, 17);
        let rows = Modes::analysis(n, mmax, SpectralLayout::RowsFirst).forward(&x, b, k);
        let orders = Modes::analysis(n, mmax, SpectralLayout::OrdersFirst).forward(&x, b, k);
        for bi in 0..b {
            for ki in 0..k {
                for m in 0..mmax {
                    for part in 0..2 {
                        let r = (((bi * k + ki) * mmax) + m) * 2 + part;
                        let o = ((m * k + ki) * b + bi) * 2 + part;
                        assert_eq!(rows[r], orders[o]);
                    }
                }
            }
        }
        let back = Modes::synthesis(n, mmax, SpectralLayout::OrdersFirst).inverse(&orders, b, k);
        let want = Modes::synthesis(n, mmax, SpectralLayout::RowsFirst).inverse(&rows, b, k);
        assert_eq!(back, want);
        // Dealt over 3 ranks the orders come as 0, 3, 1, 2: position 1
        // holds order 3.
        let analysis = Modes::analysis(n, mmax, SpectralLayout::OrdersFirst).dealt(3);
        let dealt = analysis.forward(&x, b, k);
        let block = k * b * 2;
        assert_eq!(dealt[block..2 * block], orders[3 * block..4 * block]);
        assert_eq!(dealt[3 * block..], orders[2 * block..3 * block]);
        let synthesis = Modes::synthesis(n, mmax, SpectralLayout::OrdersFirst).dealt(3);
        assert_eq!(synthesis.inverse(&dealt, b, k), want);
    }

    #[test]
    fn synthesis_undoes_analysis_on_band_limited_rows() {
        let (n, mmax) = (10, 6); // includes the Nyquist order 5
        let mut c = sample(mmax * 2, 5);
        c[1] = 0.0;
        c[2 * 5 + 1] = 0.0;
        let rows = SpectralLayout::RowsFirst;
        let x = Modes::synthesis(n, mmax, rows).inverse(&c, 1, 1);
        let back = Modes::analysis(n, mmax, rows).forward(&x, 1, 1);
        for (b, w) in back.iter().zip(&c) {
            // analysis carries 2π/N, synthesis none: 2π/N · N = 2π.
            assert!((b / (2.0 * PI) - w).abs() < 1e-14);
        }
        let x32: Vec<f32> = x.iter().map(|&v| v as f32).collect();
        let back32 = Modes::analysis(n, mmax, rows).forward(&x32, 1, 1);
        for (b, w) in back32.iter().zip(&back) {
            assert!((f64::from(*b) - w).abs() < 1e-5);
        }
    }

    /// The FFT straight into order blocks equals the rows-first kernel's
    /// values rearranged, widened to f64: more orders than the length has
    /// (zero past N/2), latitude counts that are and are not a multiple of
    /// the run, one and three fields, no fields and no latitudes; on two
    /// threads, runs whose rows make several groups of `SPECTRA_ROWS`
    /// with a shorter last one (5 fields × 8 latitudes: 16, 16, 8), and
    /// groups that split a latitude's fields (17 fields); in blocks of a
    /// pool that held NaNs.
    #[test]
    fn forward_orders_rearranges_the_rows_first_kernel() {
        on_two_threads(forward_orders_cases);
    }

    /// The rayon pool of the tests of the order blocks, whose tasks' runs
    /// (`latitude_run`) depend on its size: two threads, as on the
    /// development machine.
    fn on_two_threads(f: impl FnOnce() + Send) {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .expect("a pool of two threads");
        pool.install(|| {
            assert_eq!((latitude_run(70), latitude_run(20)), (8, 3));
            f()
        });
    }

    fn forward_orders_cases() {
        for (n, mmax, fields, k_len) in [
            (16, 12, 3, 11),
            (15, 8, 1, 16),
            (8, 5, 2, 1),
            (8, 5, 0, 4),
            (8, 5, 2, 0),
            (10, 6, 5, 70),
            (12, 7, 17, 20),
        ] {
            let m = Modes::analysis(n, mmax, SpectralLayout::RowsFirst);
            let x = sample(fields * k_len * n, 7);
            let rows = m.forward(&x, fields, k_len);
            // Blocks left by a former call, longer than needed: every
            // value is written again.
            let pool = BlockPool::dirty(mmax, k_len * fields * 2 + 3);
            let blocks = m.forward_orders(&x, fields, k_len, &pool);
            assert_eq!(blocks.len(), mmax);
            for (order, block) in blocks.iter().enumerate() {
                assert_eq!(block.len(), k_len * fields * 2);
                for k in 0..k_len {
                    for f in 0..fields {
                        for part in 0..2 {
                            let want = rows[((f * k_len + k) * mmax + order) * 2 + part];
                            let got = block[(k * fields + f) * 2 + part];
                            assert_eq!(
                                got.to_bits(),
                                want.to_bits(),
                                "n {n} m {order} k {k} f {f}"
                            );
                        }
                    }
                }
                if 2 * order > n {
                    assert!(block.iter().all(|&v| v == 0.0), "order {order} past N/2");
                }
            }
            let x32: Vec<f32> = x.iter().map(|&v| v as f32).collect();
            let rows32 = m.forward(&x32, fields, k_len);
            pool.give(blocks);
            let blocks32 = m.forward_orders(&x32, fields, k_len, &pool);
            for (order, block) in blocks32.iter().enumerate() {
                for k in 0..k_len {
                    for f in 0..fields {
                        let want = f64::from(rows32[((f * k_len + k) * mmax + order) * 2]);
                        assert_eq!(block[(k * fields + f) * 2], want, "f32 n {n} m {order}");
                    }
                }
            }
        }
    }

    /// The inverse straight from order blocks equals the rows-first inverse
    /// of the same values: more orders than the length has, fewer (the
    /// spectrum past them zeroed on every row, after the FFT of the row
    /// before used it as scratch), latitude counts that are and are not a
    /// multiple of the run, 1 to 3 fields, no latitudes, and as in
    /// `forward_orders_rearranges_the_rows_first_kernel` several groups of
    /// rows in a run and groups that split a latitude's fields, with fewer
    /// orders than the spectrum holds too (each group's spectra zeroed
    /// past them again after the group before used them).
    #[test]
    fn inverse_orders_equals_the_rows_first_inverse() {
        on_two_threads(inverse_orders_cases);
    }

    fn inverse_orders_cases() {
        for (n, mmax, fields, k_len) in [
            (16, 12, 3, 11),
            (15, 8, 1, 16),
            (8, 5, 2, 1),
            (16, 5, 3, 11),
            (15, 3, 2, 9),
            (8, 5, 2, 0),
            (10, 6, 5, 70),
            (10, 4, 5, 70),
            (12, 7, 17, 20),
        ] {
            let m = Modes::synthesis(n, mmax, SpectralLayout::RowsFirst);
            // [fields, k, m, 2] rows and the same values as [k, fields, 2]
            // blocks per order.
            let rows = sample(fields * k_len * mmax * 2, 9);
            let blocks: Vec<Vec<f64>> = (0..mmax)
                .map(|order| {
                    let mut b = alloc::vec![0.0; k_len * fields * 2];
                    for k in 0..k_len {
                        for f in 0..fields {
                            for part in 0..2 {
                                b[(k * fields + f) * 2 + part] =
                                    rows[((f * k_len + k) * mmax + order) * 2 + part];
                            }
                        }
                    }
                    b
                })
                .collect();
            let want = m.inverse(&rows, fields, k_len);
            let got = m.inverse_orders(&blocks, fields, k_len, |v| v);
            assert_eq!(want.len(), got.len());
            for (i, (w, g)) in want.iter().zip(&got).enumerate() {
                assert_eq!(w.to_bits(), g.to_bits(), "n {n} fields {fields} at {i}");
            }
            // In f32, narrowing the blocks' values as it reads them.
            let rows32: Vec<f32> = rows.iter().map(|&v| v as f32).collect();
            let want32 = m.inverse(&rows32, fields, k_len);
            let got32 = m.inverse_orders(&blocks, fields, k_len, |v| v as f32);
            assert_eq!(want32.len(), got32.len());
            for (i, (w, g)) in want32.iter().zip(&got32).enumerate() {
                assert_eq!(w.to_bits(), g.to_bits(), "f32 n {n} fields {fields} at {i}");
            }
            assert!(m.inverse_orders::<f64>(&[], 0, k_len, |v| v).is_empty());
        }
    }
}

//! The transforms' two steps on backends other than Flex (wgpu, CUDA,
//! ROCm through CubeCL, or any other Burn backend), as plain Burn tensor
//! operations on the input's device, so that a model training there keeps
//! its fields there and autodiff records the exact adjoint of every piece:
//!
//! | step | maps | as |
//! |---|---|---|
//! | [`lon_forward`] | `[b, k, nlon] → [.., mmax, 2]` | `x · F`, `F` the `[nlon, 2 mmax]` DFT matrix of [`Modes::forward`] |
//! | [`lon_inverse`] | `[.., mmax, 2] → [b, k, nlon]` | `c · G`, `G` the `[2 mmax, nlon]` matrix of [`Modes::inverse`] |
//! | [`leg_analysis`] | `[m, nlat, b, 2] → [m, lmax, b, 2]` | per order `T_m · s_m`, `T` the weighted table of [`Recurrence::table`] |
//! | [`leg_synthesis`] | `[m, lmax, b, 2] → [m, nlat, b, 2]` | per order `T_mᵀ · c_m` |
//!
//! (what torch-harmonics does on GPUs: batched matmuls against Legendre
//! tables, O(L³) values, held on the device). Every matrix is made once per
//! transform, device and dtype from the host kernels' own code (the DFT
//! matrices are [`Modes`] applied to the identity, the tables the
//! recurrence's values, walked without fused multiply-adds), so both paths
//! compute the same linear maps up to rounding; it is uploaded in the
//! input's dtype and kept ([`DeviceConstants`]).
//!
//! [`Recurrence::table`]: crate::legendre_kernel::Recurrence::table

use alloc::vec;
use alloc::vec::Vec;
use std::sync::Mutex;

use burn_tensor::{DType, Device, Tensor, TensorData};
use ruda_tensor::reshape;

use crate::fourier::{Modes, SpectralLayout};
use crate::legendre_fly::Step;

/// One constant matrix of a transform, kept on every device (and in every
/// dtype) the transform has run on. Cheap to share (`Arc`); the matrix is
/// made on first use on a device.
#[derive(Default)]
pub(crate) struct DeviceConstants {
    /// `(device without autodiff, dtype, matrix)`.
    held: Mutex<Vec<(Device, DType, Tensor<3>)>>,
}

impl core::fmt::Debug for DeviceConstants {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let devices = self.held.lock().map(|h| h.len()).unwrap_or(0);
        f.debug_struct("DeviceConstants")
            .field("devices", &devices)
            .finish()
    }
}

impl DeviceConstants {
    /// The matrix on `device` in `dtype`, made by `make` (its f64 values
    /// and shape) the first time. Kept without autodiff: a constant in
    /// every graph it enters.
    fn get(
        &self,
        device: &Device,
        dtype: DType,
        make: impl FnOnce() -> (Vec<f64>, [usize; 3]),
    ) -> Tensor<3> {
        let device = device.clone().inner();
        let find = |held: &[(Device, DType, Tensor<3>)]| {
            held.iter()
                .find(|(d, t, _)| *d == device && *t == dtype)
                .map(|(_, _, t)| t.clone())
        };
        // A panic while the lock was held leaves at worst a missing entry.
        let lock = || self.held.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(t) = find(&lock()) {
            return t;
        }
        // Made without the lock: `make` runs rayon loops, whose waiting
        // thread may pick up another task of the caller's that asks for
        // this matrix; and other devices need not wait. Threads that use a
        // transform on a device for the first time at once each make the
        // matrix (and hold it until this returns); the first one kept
        // wins, the others are dropped.
        let (values, shape) = make();
        let made = Tensor::<3>::from_data(TensorData::new(values, shape), (&device, dtype));
        let mut held = lock();
        if let Some(t) = find(&held) {
            return t;
        }
        held.push((device, dtype, made.clone()));
        made
    }
}

/// `modes` with its orders in their natural sequence, rows first: what the
/// matrices below are made from.
fn natural(modes: Modes) -> Modes {
    Modes {
        layout: SpectralLayout::RowsFirst,
        order_stride: 1,
        ..modes
    }
}

/// The orders along the spectral axis of `modes`' layout: the dealt
/// sequence orders first, the natural one rows first.
fn sequence(modes: Modes) -> Vec<usize> {
    match modes.layout {
        SpectralLayout::RowsFirst => (0..modes.mmax).collect(),
        SpectralLayout::OrdersFirst => modes.order_sequence(),
    }
}

/// The `[1, nlon, 2 mmax]` matrix of [`Modes::forward`], its columns in
/// the order sequence of `modes`' layout.
fn forward_matrix(modes: Modes) -> (Vec<f64>, [usize; 3]) {
    let (n, mm) = (modes.nlon, modes.mmax);
    let mut eye = vec![0.0; n * n];
    for j in 0..n {
        eye[j * n + j] = 1.0;
    }
    // [1, n, mm, 2]: row j the spectrum of the j-th unit field.
    let natural_rows = natural(modes).forward(&eye, 1, n);
    let sequence = sequence(modes);
    let mut f = vec![0.0; n * mm * 2];
    for j in 0..n {
        for (p, &m) in sequence.iter().enumerate() {
            f[(j * mm + p) * 2] = natural_rows[(j * mm + m) * 2];
            f[(j * mm + p) * 2 + 1] = natural_rows[(j * mm + m) * 2 + 1];
        }
    }
    (f, [1, n, 2 * mm])
}

/// The `[1, 2 mmax, nlon]` matrix of [`Modes::inverse`], its rows in the
/// order sequence of `modes`' layout.
fn inverse_matrix(modes: Modes) -> (Vec<f64>, [usize; 3]) {
    let (n, mm) = (modes.nlon, modes.mmax);
    let mut eye = vec![0.0; 4 * mm * mm];
    for r in 0..2 * mm {
        eye[r * 2 * mm + r] = 1.0;
    }
    // [1, 2 mm, n]: row r the field of the r-th unit spectrum.
    let natural_rows = natural(modes).inverse(&eye, 1, 2 * mm);
    let sequence = sequence(modes);
    let mut g = vec![0.0; 2 * mm * n];
    for (p, &m) in sequence.iter().enumerate() {
        for c in 0..2 {
            let (to, from) = ((2 * p + c) * n, (2 * m + c) * n);
            g[to..to + n].copy_from_slice(&natural_rows[from..from + n]);
        }
    }
    (g, [1, 2 * mm, n])
}

/// [`Modes::forward`] of `x` (`[b, k, nlon]`) as one matmul: `[b, k, mmax,
/// 2]` ([`SpectralLayout::RowsFirst`]) or `[mmax, k, b, 2]`
/// ([`SpectralLayout::OrdersFirst`], orders in their dealt sequence).
pub(crate) fn lon_forward(x: Tensor<3>, modes: Modes, dft: &DeviceConstants) -> Tensor<4> {
    let [b, k, n] = x.dims();
    let mm = modes.mmax;
    let rows_first = [b, k, mm, 2];
    let y = if b * k == 0 {
        // No rows: a reshape keeps an empty input on the graph.
        reshape(x, rows_first)
    } else {
        let f = dft.get(&x.device(), x.dtype(), || forward_matrix(modes));
        debug_assert_eq!(f.dims(), [1, n, 2 * mm], "a forward transform's DFT matrix");
        reshape(reshape(x, [1, b * k, n]).matmul(f), rows_first)
    };
    match modes.layout {
        SpectralLayout::RowsFirst => y,
        SpectralLayout::OrdersFirst => y.permute([2, 1, 0, 3]),
    }
}

/// [`Modes::inverse`] of `c` (laid out as `modes.layout` says) as one
/// matmul: `[b, k, nlon]`.
pub(crate) fn lon_inverse(c: Tensor<4>, modes: Modes, dft: &DeviceConstants) -> Tensor<3> {
    let c = match modes.layout {
        SpectralLayout::RowsFirst => c,
        SpectralLayout::OrdersFirst => c.permute([2, 1, 0, 3]),
    };
    let [b, k, mm, _] = c.dims();
    let n = modes.nlon;
    if b * k == 0 {
        return reshape(c, [b, k, n]);
    }
    let g = dft.get(&c.device(), c.dtype(), || inverse_matrix(modes));
    debug_assert_eq!(
        g.dims(),
        [1, 2 * mm, n],
        "an inverse transform's DFT matrix"
    );
    reshape(reshape(c, [1, b * k, 2 * mm]).matmul(g), [b, k, n])
}

/// The step's table on `like`'s device: `[m, lmax, nlat]`, weighted when
/// the step is.
fn table(step: &Step, like: &Tensor<4>) -> Tensor<3> {
    let rec = &step.rec;
    step.tables.get(&like.device(), like.dtype(), || {
        (
            rec.table(step.weighted),
            [rec.orders().len(), rec.lmax(), rec.nlat()],
        )
    })
}

/// The Legendre analysis of `s` (`[m, nlat, b, 2]`) as a batched matmul:
/// `[m, lmax, b, 2]`.
pub(crate) fn leg_analysis(s: Tensor<4>, step: &Step) -> Tensor<4> {
    let [nm, nk, b, _] = s.dims();
    let nl = step.rec.lmax();
    if nm * b == 0 {
        return reshape(s, [nm, nl, b, 2]);
    }
    let t = table(step, &s);
    reshape(t.matmul(reshape(s, [nm, nk, 2 * b])), [nm, nl, b, 2])
}

/// The Legendre synthesis of `c` (`[m, lmax, b, 2]`) as a batched matmul
/// against the transposed table: `[m, nlat, b, 2]`.
pub(crate) fn leg_synthesis(c: Tensor<4>, step: &Step) -> Tensor<4> {
    let [nm, nl, b, _] = c.dims();
    let nk = step.rec.nlat();
    if nm * b == 0 {
        return reshape(c, [nm, nk, b, 2]);
    }
    let t = table(step, &c).swap_dims(1, 2);
    reshape(t.matmul(reshape(c, [nm, nl, 2 * b])), [nm, nk, b, 2])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::legendre_kernel::{Recurrence, Seeds};
    use crate::{LatitudeGrid, Latitudes};

    fn field(len: usize, salt: u64) -> Vec<f64> {
        let mut s = salt.wrapping_mul(0x9e37_79b9_7f4a_7c15).wrapping_add(1);
        (0..len)
            .map(|_| {
                s = s
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                (s >> 11) as f64 / (1u64 << 53) as f64 - 0.5
            })
            .collect()
    }

    fn host<const D: usize>(values: Vec<f64>, shape: [usize; D]) -> Tensor<D> {
        Tensor::from_data(
            TensorData::new(values, shape),
            (&Device::flex(), DType::F64),
        )
    }

    fn read<const D: usize>(t: Tensor<D>) -> Vec<f64> {
        t.into_data().try_to_vec::<f64>().unwrap()
    }

    fn assert_close(got: &[f64], want: &[f64], what: &str) {
        assert_eq!(got.len(), want.len(), "{what}: length");
        let scale = want.iter().fold(1e-300f64, |m, v| m.max(v.abs()));
        for (i, (a, b)) in got.iter().zip(want).enumerate() {
            assert!(
                (a - b).abs() <= 1e-13 * scale,
                "{what}, element {i}: {a} vs {b}"
            );
        }
    }

    #[test]
    fn dft_matmuls_equal_the_fft_kernels_in_every_layout() {
        // Odd and even longitudes, orders up to and below the Nyquist
        // order, the dealt sequences of 1 to 3 azimuth ranks.
        for (nlon, mmax) in [(1, 1), (2, 2), (7, 4), (16, 9), (16, 5), (15, 8)] {
            for layout in [SpectralLayout::RowsFirst, SpectralLayout::OrdersFirst] {
                for stride in 1..=3 {
                    let (b, k) = (2, 3);
                    let what = format!("nlon {nlon}, mmax {mmax}, {layout:?}, stride {stride}");
                    let fwd = Modes::analysis(nlon, mmax, layout).dealt(stride);
                    let x = field(b * k * nlon, 1);
                    let dft = DeviceConstants::default();
                    let got = lon_forward(host(x.clone(), [b, k, nlon]), fwd, &dft);
                    let want = fwd.forward(&x, b, k);
                    assert_close(&read(got), &want, &format!("forward, {what}"));

                    let inv = Modes::synthesis(nlon, mmax, layout).dealt(stride);
                    let c = field(b * k * mmax * 2, 2);
                    let shape = match layout {
                        SpectralLayout::RowsFirst => [b, k, mmax, 2],
                        SpectralLayout::OrdersFirst => [mmax, k, b, 2],
                    };
                    let dft = DeviceConstants::default();
                    let got = lon_inverse(host(c.clone(), shape), inv, &dft);
                    assert_eq!(got.dims(), [b, k, nlon]);
                    let want = inv.inverse(&c, b, k);
                    assert_close(&read(got), &want, &format!("inverse, {what}"));
                }
            }
        }
    }

    #[test]
    fn table_matmuls_equal_the_recurrence_kernels() {
        // Whole grids (mirrored pairs, odd and even) and bands of them
        // (unpaired), both kinds of functions, weighted or not.
        for (nlat, grid) in [
            (9, LatitudeGrid::Equiangular),
            (10, LatitudeGrid::Equiangular),
            (7, LatitudeGrid::LegendreGauss),
        ] {
            let q = Latitudes::new(nlat, grid).unwrap();
            let lmax = 6;
            for lats in [0..nlat, 1..nlat - 2, 3..4] {
                let paired = lats == (0..nlat);
                for seeds in [Seeds::Plain, Seeds::OverSine] {
                    for orders in [vec![0, 1, 2, 3, 4, 5], vec![1, 4], vec![0]] {
                        for weighted in [false, true] {
                            let (x, w) = (&q.cosines[lats.clone()], &q.weights[lats.clone()]);
                            let rec = Recurrence::new(&orders, lmax, x, w, true, seeds, paired);
                            let step = Step::new(rec.clone(), weighted);
                            let (nm, nk, b) = (orders.len(), lats.len(), 3);
                            let what = format!(
                                "nlat {nlat} {grid:?}, latitudes {lats:?}, {seeds:?}, \
                                 orders {orders:?}, weighted {weighted}"
                            );
                            let s = field(nm * nk * b * 2, 3);
                            let got = leg_analysis(host(s.clone(), [nm, nk, b, 2]), &step);
                            assert_eq!(got.dims(), [nm, lmax, b, 2]);
                            let want = rec.analysis(&s, 2 * b, weighted);
                            assert_close(&read(got), &want, &format!("analysis, {what}"));

                            let c = field(nm * lmax * b * 2, 4);
                            let got = leg_synthesis(host(c.clone(), [nm, lmax, b, 2]), &step);
                            assert_eq!(got.dims(), [nm, nk, b, 2]);
                            let want = rec.synthesis(&c, 2 * b, weighted);
                            assert_close(&read(got), &want, &format!("synthesis, {what}"));
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn transforms_holding_device_constants_can_be_shared_between_threads() {
        fn shared<T: Send + Sync>() {}
        shared::<crate::RealSht>();
        shared::<crate::InverseRealSht>();
        shared::<crate::RealVectorSht>();
        shared::<crate::InverseRealVectorSht>();
        shared::<crate::DistributedRealSht<ruda_tensor::DeviceGroup>>();
        shared::<crate::DistributedInverseRealVectorSht<ruda_tensor::DeviceGroup>>();
    }

    #[test]
    fn a_matrix_is_made_once_per_device_and_dtype() {
        let consts = DeviceConstants::default();
        let made = core::cell::Cell::new(0);
        let make = || {
            made.set(made.get() + 1);
            (vec![1.0, 2.0], [1, 1, 2])
        };
        let flex = Device::flex();
        let a = consts.get(&flex, DType::F64, make);
        // Autodiff or not, the same device: the same constant.
        let b = consts.get(&flex.clone().autodiff(), DType::F64, make);
        assert_eq!(made.get(), 1);
        assert_eq!(read(a), read(b));
        let c = consts.get(&flex, DType::F32, make);
        assert_eq!(made.get(), 2);
        assert_eq!(c.dtype(), DType::F32);
        assert!(!c.is_autodiff(), "kept without autodiff");
    }
}

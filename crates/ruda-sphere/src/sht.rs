//! The serial transforms: [`RealSht`] and [`InverseRealSht`].

use burn_tensor::Tensor;

use crate::fourier::Modes;
use crate::fourier::SpectralLayout::{OrdersFirst, RowsFirst};
use crate::fused::Fused;
use crate::fused_vector::FusedVector;
use crate::legendre_stage::{Kind, LegendreStage, check_components};
use crate::on_device::DeviceConstants;
use crate::route::{
    check_dtype, host_kernels, lon_forward, lon_inverse, sht_analysis, sht_synthesis,
    vsht_analysis, vsht_synthesis,
};
use crate::shapes::{check_rank, flatten_coefficients, flatten_field, swap_orders, unflatten};
use crate::{ShtSpec, SphereError};

/// What a serial transform keeps: its Legendre stage and, for tensors off
/// Flex, its DFT matrix on their devices.
#[derive(Debug)]
pub(crate) struct Serial {
    stage: LegendreStage,
    dft: DeviceConstants,
}

/// The serial transform of `spec`: every order, every latitude (in
/// mirrored pairs), generated on the fly; `weighted` for the analysis of a
/// field.
pub(crate) fn serial_stage(spec: &ShtSpec, kind: Kind, weighted: bool) -> Serial {
    let orders: alloc::vec::Vec<usize> = (0..spec.mmax()).collect();
    let all = 0..spec.nlat();
    Serial {
        stage: LegendreStage::new(spec, kind, &orders, core::slice::from_ref(&all), weighted),
        dft: DeviceConstants::default(),
    }
}

/// A serial forward transform: fields `[.., nlat, nlon]` (for a vector
/// transform `[.., 2, nlat, nlon]`) to coefficients `[.., lmax, mmax, 2]`.
pub(crate) fn analyse<const D: usize, const E: usize>(
    op: &'static str,
    s: &ShtSpec,
    serial: &Serial,
    x: Tensor<D>,
) -> Result<Tensor<E>, SphereError> {
    let stage = &serial.stage;
    check_rank::<D, E>(op, 1)?;
    let (x, lead) = flatten_field(op, 0, x, [s.nlat(), s.nlon()])?;
    check_components(op, 0, stage.kind(), &lead, &[s.nlat(), s.nlon()])?;
    if !host_kernels(&x.device()) {
        // Off Flex: the steps as tensor operations on the tensor's device,
        // [m, k, b, 2] → [m, l, b, 2] → [b, l, m, 2].
        check_dtype(op, x.dtype())?;
        let modes = Modes::analysis(s.nlon(), s.mmax(), OrdersFirst);
        let f = lon_forward(op, x, modes, &serial.dft)?;
        let c = swap_orders(stage.analysis(op, f)?);
        return Ok(unflatten(c, &lead, &[s.lmax(), s.mmax(), 2]));
    }
    let c = fused_analysis(op, s, stage, x)?;
    Ok(unflatten(c, &lead, &[s.lmax(), s.mmax(), 2]))
}

/// The host kernels' one operation from a field `[b, lat, nlon]` (the
/// latitudes `stage` was made for, all longitudes) to its coefficients
/// `[b, l, m, 2]` over all of `stage`'s degrees and orders: the serial
/// transform's, or a rank's part of a polar split of a vector transform
/// (its latitudes' share of every coefficient; a scalar one's rank writes
/// its share degrees first instead, [`crate::fused::Fused::degrees_first`]).
pub(crate) fn fused_analysis(
    op: &'static str,
    s: &ShtSpec,
    stage: &LegendreStage,
    x: Tensor<3>,
) -> Result<Tensor<4>, SphereError> {
    let modes = Modes::analysis(s.nlon(), s.mmax(), RowsFirst);
    match stage {
        LegendreStage::Scalar(step) => {
            let step = step.clone();
            let degrees_first = false;
            sht_analysis(
                op,
                x,
                Fused {
                    step,
                    modes,
                    degrees_first,
                },
            )
        }
        LegendreStage::Vector(v) => {
            let (step, factors) = (v.step.clone(), v.f.clone());
            let f = FusedVector {
                step,
                factors,
                modes,
                scaled: true,
            };
            vsht_analysis(op, x, f)
        }
    }
}

/// A serial inverse transform: coefficients `[.., lmax, mmax, 2]` to
/// fields `[.., nlat, nlon]`.
pub(crate) fn synthesise<const D: usize, const E: usize>(
    op: &'static str,
    s: &ShtSpec,
    serial: &Serial,
    c: Tensor<D>,
) -> Result<Tensor<E>, SphereError> {
    let stage = &serial.stage;
    check_rank::<D, E>(op, -1)?;
    let (c, lead) = flatten_coefficients(op, 0, c, [s.lmax(), s.mmax()])?;
    check_components(op, 0, stage.kind(), &lead, &[s.lmax(), s.mmax(), 2])?;
    check_dtype(op, c.dtype())?;
    if !host_kernels(&c.device()) {
        // Off Flex: [b, l, m, 2] → [m, l, b, 2] → [m, k, b, 2] → [b, k, n].
        let f = stage.synthesis(op, swap_orders(c))?;
        let modes = Modes::synthesis(s.nlon(), s.mmax(), OrdersFirst);
        let x = lon_inverse(op, f, modes, &serial.dft)?;
        return Ok(unflatten(x, &lead, &[s.nlat(), s.nlon()]));
    }
    let x = fused_synthesis(op, s, stage, c)?;
    Ok(unflatten(x, &lead, &[s.nlat(), s.nlon()]))
}

/// The host kernels' one operation from coefficients `[b, l, m, 2]` (all
/// of `stage`'s degrees and orders) to the field `[b, lat, nlon]` on the
/// latitudes `stage` was made for: [`fused_analysis`]'s direction reversed.
pub(crate) fn fused_synthesis(
    op: &'static str,
    s: &ShtSpec,
    stage: &LegendreStage,
    c: Tensor<4>,
) -> Result<Tensor<3>, SphereError> {
    let modes = Modes::synthesis(s.nlon(), s.mmax(), RowsFirst);
    match stage {
        LegendreStage::Scalar(step) => {
            let step = step.clone();
            let degrees_first = false;
            sht_synthesis(
                op,
                c,
                Fused {
                    step,
                    modes,
                    degrees_first,
                },
            )
        }
        LegendreStage::Vector(v) => {
            let (step, factors) = (v.step.clone(), v.f.clone());
            let f = FusedVector {
                step,
                factors,
                modes,
                scaled: false,
            };
            vsht_synthesis(op, c, f)
        }
    }
}

/// The forward real spherical harmonic transform of fields `[.., nlat,
/// nlon]` into coefficients `[.., lmax, mmax, 2]` (real and imaginary
/// parts last), in torch-harmonics' conventions: orthonormal harmonics,
/// Condon–Shortley phase, `c_lm = ∫ f conj(Y_l^m) dΩ` by the grid's
/// quadrature (`RealSHT(norm="ortho", csphase=True)`). Coefficients with
/// `m > l` are zero. Differentiable; f32 and f64, on any backend.
///
/// On Flex the associated Legendre functions are generated by their
/// three-term recurrence inside the kernel, over the northern latitudes
/// with their mirrored southern partners (no O(L³) table: a 721×1440
/// transform holds O(L²) values), in f64 whatever the input's precision.
/// On any other backend (wgpu, CUDA, ROCm through CubeCL) the tensor stays
/// on its device: the longitude step is a DFT matmul and the Legendre step
/// batched matmuls against the table of `P̄_l^m` (what torch-harmonics does
/// on GPUs), in the tensor's precision. The matrices are made on first use
/// on a device and kept with the transform: O(mmax · lmax · nlat) values,
/// 0.75 GB in f64 (0.38 GB in f32) at 721×1440 on the equiangular grid, 4
/// times that on a Legendre–Gauss grid of 721 latitudes. On Flex it keeps
/// the per-order buffers of the largest batch it has seen for its next
/// calls (see the crate's "Memory kept between calls").
///
/// # Example
/// ```
/// use burn_tensor::{DType, Device, Tensor, TensorData};
/// use ruda_sphere::{LatitudeGrid, RealSht, ShtSpec};
///
/// let spec = ShtSpec::new(9, 16, LatitudeGrid::Equiangular)?; // lmax = mmax = 5
/// let sht = RealSht::new(spec);
/// let ones = Tensor::<3>::from_data(TensorData::new(vec![1.0f64; 2 * 9 * 16], [2, 9, 16]), (&Device::flex(), DType::F64));
/// let c: Tensor<4> = sht.forward(ones)?;
/// assert_eq!(c.dims(), [2, 5, 5, 2]);
/// // A constant 1 is sqrt(4π) Y_0^0.
/// let c00: f64 = c.narrow(0, 0, 1).narrow(1, 0, 1).narrow(2, 0, 1).narrow(3, 0, 1).into_scalar();
/// assert!((c00 - (4.0 * std::f64::consts::PI).sqrt()).abs() < 1e-13);
/// # Ok::<(), ruda_sphere::SphereError>(())
/// ```
#[derive(Debug)]
pub struct RealSht {
    spec: ShtSpec,
    /// The weighted analysis over every order.
    stage: Serial,
}

impl RealSht {
    /// The transform for `spec` (computes its recurrence coefficients).
    pub fn new(spec: ShtSpec) -> Self {
        RealSht {
            spec,
            stage: serial_stage(&spec, Kind::Scalar, true),
        }
    }

    /// The grid and truncation.
    pub fn spec(&self) -> &ShtSpec {
        &self.spec
    }

    /// Transform `x` (`D ≥ 2` dimensions, the last two `[nlat, nlon]`) into
    /// coefficients of `E = D + 1` dimensions.
    ///
    /// # Errors
    /// [`SphereError::Rank`] when `E ≠ D + 1`; [`SphereError::Shape`] for
    /// other trailing dimensions; [`SphereError::DType`] for an element
    /// type other than f32 or f64; [`SphereError::Device`] for a Flex
    /// tensor the host kernels cannot read.
    pub fn forward<const D: usize, const E: usize>(
        &self,
        x: Tensor<D>,
    ) -> Result<Tensor<E>, SphereError> {
        analyse("RealSht::forward", &self.spec, &self.stage, x)
    }
}

/// The inverse of [`RealSht`]: coefficients `[.., lmax, mmax, 2]` to fields
/// `[.., nlat, nlon]`, `f = Σ_l (c_l0 Y_l^0 + 2 Re Σ_{m>0} c_lm Y_l^m)`
/// (torch-harmonics' `InverseRealSHT`: the imaginary parts of order 0, and
/// of order `nlon/2` where kept, do not contribute). Differentiable.
///
/// # Example
/// ```
/// use burn_tensor::{DType, Device, Tensor, TensorData};
/// use ruda_sphere::{InverseRealSht, LatitudeGrid, RealSht, ShtSpec};
///
/// let spec = ShtSpec::new(8, 16, LatitudeGrid::LegendreGauss)?; // lmax = mmax = 8
/// let (sht, isht) = (RealSht::new(spec), InverseRealSht::new(spec));
/// let mut c = vec![0.0f64; 8 * 8 * 2];
/// c[(3 * 8 + 2) * 2] = 1.0; // Re c_{3,2}
/// let c = Tensor::<3>::from_data(TensorData::new(c, [8, 8, 2]), (&Device::flex(), DType::F64));
/// let f: Tensor<2> = isht.forward(c.clone())?;
/// let back: Tensor<3> = sht.forward(f)?;
/// let err: f64 = (back - c).abs().max().into_scalar();
/// assert!(err < 1e-13);
/// # Ok::<(), ruda_sphere::SphereError>(())
/// ```
#[derive(Debug)]
pub struct InverseRealSht {
    spec: ShtSpec,
    /// The unweighted synthesis over every order.
    stage: Serial,
}

impl InverseRealSht {
    /// The inverse transform for `spec` (computes its recurrence
    /// coefficients).
    pub fn new(spec: ShtSpec) -> Self {
        InverseRealSht {
            spec,
            stage: serial_stage(&spec, Kind::Scalar, false),
        }
    }

    /// The grid and truncation.
    pub fn spec(&self) -> &ShtSpec {
        &self.spec
    }

    /// Synthesise fields of `E = D − 1` dimensions from coefficients `c`
    /// (`D ≥ 3` dimensions, the last three `[lmax, mmax, 2]`).
    ///
    /// # Errors
    /// As [`RealSht::forward`].
    pub fn forward<const D: usize, const E: usize>(
        &self,
        c: Tensor<D>,
    ) -> Result<Tensor<E>, SphereError> {
        synthesise("InverseRealSht::forward", &self.spec, &self.stage, c)
    }
}

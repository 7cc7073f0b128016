//! The serial vector transforms: [`RealVectorSht`] and
//! [`InverseRealVectorSht`].

use burn_tensor::Tensor;

use crate::legendre_stage::Kind;
use crate::sht::{Serial, analyse, serial_stage, synthesise};
use crate::{ShtSpec, SphereError};

/// The forward real vector spherical harmonic transform of tangential
/// fields `[.., 2, nlat, nlon]` (the colatitude and longitude components
/// `(v_θ, v_φ)`) into spheroidal and toroidal coefficients
/// `[.., 2, lmax, mmax, 2]` (real and imaginary parts last), in
/// torch-harmonics' conventions (`RealVectorSHT(norm="ortho",
/// csphase=True)`): with `D0 = ∂_θ P̄_l^m`, `D1 = m P̄_l^m / sin θ` and the
/// longitude spectra `X0`, `X1` of the two components,
///
/// `s_lm = Σ_k w_k (D0 X0 − i D1 X1) / (l(l+1))`,
/// `t_lm = −Σ_k w_k (i D1 X0 + D0 X1) / (l(l+1))`
///
/// (`l = 0` divided by 1; its coefficients are zero). Differentiable; f32
/// and f64, on any backend: on Flex the derivative functions are generated
/// on the fly from the scalar recurrence (no tables), in f64; elsewhere the
/// steps are tensor operations on the tensor's device, as for
/// [`RealSht`](crate::RealSht).
///
/// # Example
/// ```
/// use burn_tensor::{DType, Device, Tensor, TensorData};
/// use ruda_sphere::{InverseRealVectorSht, LatitudeGrid, RealVectorSht, ShtSpec};
///
/// let spec = ShtSpec::new(12, 24, LatitudeGrid::LegendreGauss)?; // lmax = mmax = 12
/// let (vsht, ivsht) = (RealVectorSht::new(spec), InverseRealVectorSht::new(spec));
/// // A purely toroidal (rotational) field: t_{2,1} = 1.
/// let mut c = vec![0.0f64; 2 * 12 * 12 * 2];
/// c[((12 + 2) * 12 + 1) * 2] = 1.0;
/// let c = Tensor::<4>::from_data(TensorData::new(c, [2, 12, 12, 2]), (&Device::flex(), DType::F64));
/// let wind: Tensor<3> = ivsht.forward(c.clone())?;
/// assert_eq!(wind.dims(), [2, 12, 24]);
/// let back: Tensor<4> = vsht.forward(wind)?;
/// let err: f64 = (back - c).abs().max().into_scalar();
/// assert!(err < 1e-13);
/// # Ok::<(), ruda_sphere::SphereError>(())
/// ```
#[derive(Debug)]
pub struct RealVectorSht {
    spec: ShtSpec,
    stage: Serial,
}

impl RealVectorSht {
    /// The transform for `spec` (computes its recurrence coefficients).
    pub fn new(spec: ShtSpec) -> Self {
        RealVectorSht {
            spec,
            stage: serial_stage(&spec, Kind::Vector, true),
        }
    }

    /// The grid and truncation.
    pub fn spec(&self) -> &ShtSpec {
        &self.spec
    }

    /// Transform `x` (`D ≥ 3` dimensions, the last three `[2, nlat,
    /// nlon]`) into coefficients of `E = D + 1` dimensions (the last four
    /// `[2, lmax, mmax, 2]`).
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
        analyse("RealVectorSht::forward", &self.spec, &self.stage, x)
    }
}

/// The inverse of [`RealVectorSht`]: spheroidal and toroidal coefficients
/// `[.., 2, lmax, mmax, 2]` to tangential fields `[.., 2, nlat, nlon]`
/// (torch-harmonics' `InverseRealVectorSHT`: per order the components'
/// spectra `F0 = Σ_l (D0 s + i D1 t)`, `F1 = Σ_l (i D1 s − D0 t)`, then the
/// inverse real Fourier transform, in which the imaginary parts of order 0,
/// and of order `nlon/2` where kept, do not contribute). Differentiable.
///
/// # Example
/// ```
/// use burn_tensor::{DType, Device, Tensor};
/// use ruda_sphere::{InverseRealVectorSht, LatitudeGrid, ShtSpec};
///
/// let spec = ShtSpec::new(9, 16, LatitudeGrid::Equiangular)?;
/// let ivsht = InverseRealVectorSht::new(spec);
/// let c = Tensor::<5>::zeros([3, 2, spec.lmax(), spec.mmax(), 2], (&Device::flex(), DType::F32));
/// let wind: Tensor<4> = ivsht.forward(c)?;
/// assert_eq!(wind.dims(), [3, 2, 9, 16]);
/// # Ok::<(), ruda_sphere::SphereError>(())
/// ```
#[derive(Debug)]
pub struct InverseRealVectorSht {
    spec: ShtSpec,
    stage: Serial,
}

impl InverseRealVectorSht {
    /// The inverse transform for `spec` (computes its recurrence
    /// coefficients).
    pub fn new(spec: ShtSpec) -> Self {
        InverseRealVectorSht {
            spec,
            stage: serial_stage(&spec, Kind::Vector, false),
        }
    }

    /// The grid and truncation.
    pub fn spec(&self) -> &ShtSpec {
        &self.spec
    }

    /// Synthesise fields of `E = D − 1` dimensions (the last three `[2,
    /// nlat, nlon]`) from coefficients `c` (`D ≥ 4` dimensions, the last
    /// four `[2, lmax, mmax, 2]`).
    ///
    /// # Errors
    /// As [`RealVectorSht::forward`].
    pub fn forward<const D: usize, const E: usize>(
        &self,
        c: Tensor<D>,
    ) -> Result<Tensor<E>, SphereError> {
        synthesise("InverseRealVectorSht::forward", &self.spec, &self.stage, c)
    }
}

//! The serial transforms: [`RealSht`] and [`InverseRealSht`].

use burn_tensor::Tensor;

use crate::fourier::Modes;
use crate::fourier::SpectralLayout::OrdersFirst;
use crate::legendre_op::{
    Legendre, check_rank, flatten_coefficients, flatten_field, swap_orders, unflatten,
};
use crate::route::{lon_forward, lon_inverse};
use crate::{Latitudes, ShtSpec, SphereError, legendre_table};

/// The Legendre table for the (ascending) `orders`, all degrees and the
/// latitudes `lats`: for the forward transform times the quadrature
/// weights.
pub(crate) fn table(
    spec: &ShtSpec,
    orders: &[usize],
    lats: core::ops::Range<usize>,
    forward: bool,
) -> Legendre {
    let q = Latitudes::new(spec.nlat(), spec.grid()).expect("the spec checked the grid");
    let xs = &q.cosines[lats.clone()];
    let (nl, nk) = (spec.lmax(), lats.len());
    let first = orders.first().copied().unwrap_or(0);
    let last = orders.last().map_or(0, |&o| o + 1);
    let all = legendre_table(first..last, nl, xs, true);
    let mut t = Vec::with_capacity(orders.len() * nl * nk);
    for &m in orders {
        t.extend_from_slice(&all[(m - first) * nl * nk..(m - first + 1) * nl * nk]);
    }
    if forward {
        let w = &q.weights[lats];
        for row in t.chunks_exact_mut(nk) {
            for (v, w) in row.iter_mut().zip(w) {
                *v *= w;
            }
        }
    }
    Legendre::new(&t, orders, nl, nk, forward)
}

/// The forward real spherical harmonic transform of fields `[.., nlat,
/// nlon]` into coefficients `[.., lmax, mmax, 2]` (real and imaginary
/// parts last), in torch-harmonics' conventions: orthonormal harmonics,
/// Condon–Shortley phase, `c_lm = ∫ f conj(Y_l^m) dΩ` by the grid's
/// quadrature (`RealSHT(norm="ortho", csphase=True)`). Coefficients with
/// `m > l` are zero. Differentiable; f32 and f64 on Flex devices.
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
    /// `P̄_l^m(x_k) w_k`, `[mmax, lmax, nlat]`.
    weights: Legendre,
}

impl RealSht {
    /// The transform for `spec` (computes its Legendre table).
    pub fn new(spec: ShtSpec) -> Self {
        let orders: Vec<usize> = (0..spec.mmax()).collect();
        let weights = table(&spec, &orders, 0..spec.nlat(), true);
        RealSht { spec, weights }
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
    /// type other than f32 or f64; [`SphereError::Device`] for a tensor not
    /// on a Flex device.
    pub fn forward<const D: usize, const E: usize>(
        &self,
        x: Tensor<D>,
    ) -> Result<Tensor<E>, SphereError> {
        const OP: &str = "RealSht::forward";
        let s = &self.spec;
        check_rank::<D, E>(OP, 1)?;
        let (x, lead) = flatten_field(OP, 0, x, [s.nlat(), s.nlon()])?;
        let f = lon_forward(OP, x, Modes::analysis(s.nlon(), s.mmax(), OrdersFirst))?;
        let c = swap_orders(self.weights.analysis(f));
        Ok(unflatten(c, &lead, &[s.lmax(), s.mmax(), 2]))
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
    /// `P̄_l^m(x_k)`, `[mmax, nlat, lmax]`.
    legendre: Legendre,
}

impl InverseRealSht {
    /// The inverse transform for `spec` (computes its Legendre table).
    pub fn new(spec: ShtSpec) -> Self {
        let orders: Vec<usize> = (0..spec.mmax()).collect();
        let legendre = table(&spec, &orders, 0..spec.nlat(), false);
        InverseRealSht { spec, legendre }
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
        const OP: &str = "InverseRealSht::forward";
        let s = &self.spec;
        check_rank::<D, E>(OP, -1)?;
        let (c, lead) = flatten_coefficients(OP, 0, c, [s.lmax(), s.mmax()])?;
        crate::route::check_dtype(OP, c.dtype())?;
        let f = self.legendre.synthesis(swap_orders(c));
        let x = lon_inverse(OP, f, Modes::synthesis(s.nlon(), s.mmax(), OrdersFirst))?;
        Ok(unflatten(x, &lead, &[s.nlat(), s.nlon()]))
    }
}

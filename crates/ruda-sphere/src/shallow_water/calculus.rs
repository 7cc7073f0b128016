//! Differential operators on the sphere in spectral space: the Laplacian
//! and its inverse, and the maps between winds and vorticity/divergence.

use burn_tensor::{DType, Device, Tensor, TensorData};

use super::SphereTransforms;
use crate::{Latitudes, SphereError};

/// The spectral calculus of a sphere of radius `radius` on some
/// [`SphereTransforms`]: the Laplacian and its inverse (diagonal in the
/// degree `l`), the vorticity and divergence of a wind and the wind of a
/// vorticity and divergence, and the grid's coordinates and quadrature, in
/// the conventions of torch-harmonics' `ShallowWaterSolver`:
///
/// - `∇² Y_l^m = −l(l+1)/R² Y_l^m`; the inverse is zero at `l = 0`;
/// - winds are `[2, lat, lon]`: the eastward component `u`, then the
///   northward `v`; vorticity and divergence are `[2, l, m, 2]` in that
///   order: `vrtdiv = −l(l+1)/R · vsht(u, v)`, `wind = ivsht(−R/(l(l+1)) ·
///   vrtdiv)`.
///
/// Differentiable throughout (Burn tensor operations and the transforms).
/// Coefficients and fields are this rank's parts (see
/// [`SphereTransforms`]); on a process grid every method that transforms
/// is collective.
///
/// # Example
/// ```
/// use burn_tensor::{DType, Device, Tensor, TensorData};
/// use ruda_sphere::shallow_water::{SerialTransforms, SphereCalculus};
/// use ruda_sphere::{LatitudeGrid, ShtSpec};
///
/// let spec = ShtSpec::new(32, 64, LatitudeGrid::LegendreGauss)?;
/// let (device, r) = (Device::flex(), 6.37122e6);
/// let calc = SphereCalculus::new(SerialTransforms::new(spec), r, &device, DType::F64)?;
/// // Solid-body rotation u = U cos φ has vorticity 2 U sin φ / R, divergence 0.
/// let (lats, nlon) = (calc.latitudes(), 64);
/// let u: Vec<f64> = lats.iter().flat_map(|p| vec![10.0 * p.cos(); nlon]).collect();
/// let mut wind = u.clone();
/// wind.extend(vec![0.0; u.len()]);
/// let wind = Tensor::<3>::from_data(TensorData::new(wind, [2, 32, nlon]), (&device, DType::F64));
/// let vd = calc.spec2grid(calc.vrtdiv_from_wind(wind)?)?;
/// let want: Vec<f64> = lats.iter().flat_map(|p| vec![20.0 * p.sin() / r; nlon]).collect();
/// let got = vd.narrow(0, 0, 1).into_data().try_to_vec::<f64>().unwrap();
/// let err = got.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
/// assert!(err < 1e-18);
/// # Ok::<(), ruda_sphere::SphereError>(())
/// ```
#[derive(Debug)]
pub struct SphereCalculus<T> {
    transforms: T,
    radius: f64,
    device: Device,
    dtype: DType,
    /// `−l(l+1)/R²`, `[1, l, 1, 1]`.
    lap: Tensor<4>,
    /// `−R²/(l(l+1))` (0 at `l = 0`), `[1, l, 1, 1]`.
    invlap: Tensor<4>,
    /// `−l(l+1)/R² · R`, `[1, l, 1, 1]`.
    lap_radius: Tensor<4>,
    /// 1 where `m ≤ l`, else 0: `[1, l, m, 1]`.
    lower: Tensor<4>,
    /// This rank's latitudes in radians (north first) and weights.
    lats: Vec<f64>,
    weights: Vec<f64>,
}

impl<T: SphereTransforms> SphereCalculus<T> {
    /// The calculus of a sphere of `radius` metres on `transforms`, its
    /// factors made on `device` in `dtype` (computed in f64 and rounded
    /// once).
    ///
    /// # Errors
    /// [`SphereError::Setting`] for a radius that is not finite and
    /// positive; [`SphereError::DType`] for a dtype other than f32 or f64.
    pub fn new(
        transforms: T,
        radius: f64,
        device: &Device,
        dtype: DType,
    ) -> Result<Self, SphereError> {
        if !(radius.is_finite() && radius > 0.0) {
            return Err(SphereError::Setting {
                what: "radius",
                value: radius,
                expected: "finite and positive",
            });
        }
        if !matches!(dtype, DType::F32 | DType::F64) {
            return Err(SphereError::DType {
                op: "SphereCalculus::new",
                dtype,
            });
        }
        let ls = transforms.l_range();
        let per_degree = |f: &dyn Fn(f64) -> f64| -> Tensor<4> {
            let v: Vec<f64> = ls.clone().map(|l| f(l as f64)).collect();
            Tensor::from_data(TensorData::new(v, [1, ls.len(), 1, 1]), (device, dtype))
        };
        // As torch-harmonics evaluates them, operation by operation.
        let lap = per_degree(&|l| -l * (l + 1.0) / (radius * radius));
        let invlap = per_degree(&|l| {
            if l == 0.0 {
                0.0
            } else {
                -(radius * radius) / l / (l + 1.0)
            }
        });
        let lap_radius = per_degree(&|l| -l * (l + 1.0) / (radius * radius) * radius);
        let orders = transforms.orders();
        let lower: Vec<f64> = ls
            .clone()
            .flat_map(|l| orders.iter().map(move |&m| if m <= l { 1.0 } else { 0.0 }))
            .collect();
        let lower = Tensor::from_data(
            TensorData::new(lower, [1, ls.len(), orders.len(), 1]),
            (device, dtype),
        );
        let spec = *transforms.spec();
        let q = Latitudes::new(spec.nlat(), spec.grid())?;
        let range = transforms.lat_range();
        let lats = q.cosines[range.clone()].iter().map(|x| x.asin()).collect();
        let weights = q.weights[range].to_vec();
        Ok(SphereCalculus {
            transforms,
            radius,
            device: device.clone(),
            dtype,
            lap,
            invlap,
            lap_radius,
            lower,
            lats,
            weights,
        })
    }

    /// The transforms.
    pub fn transforms(&self) -> &T {
        &self.transforms
    }

    /// The sphere's radius in metres.
    pub fn radius(&self) -> f64 {
        self.radius
    }

    /// The device the factors live on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The dtype of the factors.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// This rank's latitudes in radians, north first (`asin` of the grid's
    /// cosines of colatitude).
    pub fn latitudes(&self) -> &[f64] {
        &self.lats
    }

    /// This rank's longitudes in radians, `2π j / nlon`.
    pub fn longitudes(&self) -> Vec<f64> {
        let nlon = self.transforms.spec().nlon();
        self.transforms
            .lon_range()
            .map(|j| 2.0 * core::f64::consts::PI * j as f64 / nlon as f64)
            .collect()
    }

    /// Fields `[b, lat, lon]` to coefficients `[b, l, m, 2]`.
    ///
    /// # Errors
    /// As [`SphereTransforms::sht`].
    pub fn grid2spec(&self, x: Tensor<3>) -> Result<Tensor<4>, SphereError> {
        self.transforms.sht(x)
    }

    /// Coefficients `[b, l, m, 2]` to fields `[b, lat, lon]`.
    ///
    /// # Errors
    /// As [`SphereTransforms::isht`].
    pub fn spec2grid(&self, c: Tensor<4>) -> Result<Tensor<3>, SphereError> {
        self.transforms.isht(c)
    }

    /// The Laplacian of fields given by their coefficients `[b, l, m, 2]`.
    pub fn laplacian(&self, c: Tensor<4>) -> Tensor<4> {
        self.lap.clone() * c
    }

    /// The inverse Laplacian (the solution of mean zero) of `[b, l, m, 2]`.
    pub fn inverse_laplacian(&self, c: Tensor<4>) -> Tensor<4> {
        self.invlap.clone() * c
    }

    /// `c` with its coefficients of `m > l` set to zero (`torch.tril`).
    pub fn triangular(&self, c: Tensor<4>) -> Tensor<4> {
        c * self.lower.clone()
    }

    /// The vorticity and divergence coefficients `[2, l, m, 2]` of a wind
    /// `[2, lat, lon]` (eastward, northward).
    ///
    /// # Errors
    /// As [`SphereTransforms::vsht`].
    pub fn vrtdiv_from_wind(&self, wind: Tensor<3>) -> Result<Tensor<4>, SphereError> {
        let [c, lat, lon] = wind.dims();
        let out = self.vrtdiv_from_winds(wind.reshape([1, c, lat, lon]))?;
        let [_, c, l, m, two] = out.dims();
        Ok(out.reshape([c, l, m, two]))
    }

    /// [`SphereCalculus::vrtdiv_from_wind`] of a batch of winds `[b, 2,
    /// lat, lon]`: `[b, 2, l, m, 2]`.
    ///
    /// # Errors
    /// As [`SphereTransforms::vsht`].
    pub fn vrtdiv_from_winds(&self, winds: Tensor<4>) -> Result<Tensor<5>, SphereError> {
        let s = self.transforms.vsht(winds)?;
        let [b, c, l, m, two] = s.dims();
        let flat = self.lap_radius.clone() * s.reshape([b * c, l, m, two]);
        Ok(flat.reshape([b, c, l, m, two]))
    }

    /// The wind `[2, lat, lon]` of vorticity and divergence coefficients
    /// `[2, l, m, 2]`.
    ///
    /// # Errors
    /// [`SphereError::Shape`] for coefficients that are not this rank's
    /// block, and [`SphereError::PeerInput`] on the other ranks (before any
    /// data moves); as [`SphereTransforms::ivsht`].
    pub fn wind_from_vrtdiv(&self, vrtdiv: Tensor<4>) -> Result<Tensor<3>, SphereError> {
        const OP: &str = "SphereCalculus::wind_from_vrtdiv";
        let t = &self.transforms;
        let expected = [2, t.l_range().len(), t.orders().len(), 2];
        self.agree_shape(OP, &expected, &vrtdiv.dims())?;
        self.wind_of_checked(vrtdiv)
    }

    /// Check an input's shape on every rank and agree on the verdicts
    /// ([`SphereTransforms::agree`]): [`SphereError::Shape`] on a rank whose
    /// input is not `expected`, [`SphereError::PeerInput`] on the others,
    /// before any data moves.
    pub(crate) fn agree_shape(
        &self,
        op: &'static str,
        expected: &[usize],
        got: &[usize],
    ) -> Result<(), SphereError> {
        let t = &self.transforms;
        let local = if got == expected {
            Ok(())
        } else {
            Err(SphereError::Shape {
                op,
                rank: t.rank(),
                expected: expected.to_vec(),
                got: got.to_vec(),
            })
        };
        t.agree(op, local)
    }

    /// [`SphereCalculus::wind_from_vrtdiv`] of coefficients already checked
    /// on every rank (the solver's, after its state check).
    pub(crate) fn wind_of_checked(&self, vrtdiv: Tensor<4>) -> Result<Tensor<3>, SphereError> {
        let [c, l, m, two] = vrtdiv.dims();
        let scaled = (self.invlap.clone() * vrtdiv).div_scalar(self.radius);
        let wind = self.transforms.ivsht(scaled.reshape([1, c, l, m, two]))?;
        let [_, c, lat, lon] = wind.dims();
        Ok(wind.reshape([c, lat, lon]))
    }

    /// The integral over the sphere of each of the fields `[b, lat, lon]`
    /// (`∫ f dA` in m², summed over the ranks): `[b]`. Differentiable;
    /// collective on a process grid.
    ///
    /// # Errors
    /// [`SphereError::Shape`] for fields that are not this rank's patch,
    /// and [`SphereError::PeerInput`] on the other ranks (before any data
    /// moves); as [`SphereTransforms::sum_over_ranks`].
    pub fn integrate(&self, x: Tensor<3>) -> Result<Tensor<1>, SphereError> {
        const OP: &str = "SphereCalculus::integrate";
        let [b, lat, lon] = x.dims();
        let t = &self.transforms;
        self.agree_shape(
            OP,
            &[b, self.weights.len(), t.lon_range().len()],
            &[b, lat, lon],
        )?;
        let nlon = self.transforms.spec().nlon() as f64;
        let scale = 2.0 * core::f64::consts::PI / nlon * self.radius * self.radius;
        let w: Vec<f64> = self.weights.iter().map(|w| w * scale).collect();
        let w = Tensor::<3>::from_data(TensorData::new(w, [1, lat, 1]), (&x.device(), x.dtype()));
        let local = (x * w).sum_dim(2).sum_dim(1).reshape([b]);
        self.transforms.sum_over_ranks(local)
    }
}

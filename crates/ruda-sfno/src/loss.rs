//! The loss: squared error integrated over the sphere.

use alloc::sync::Arc;

use burn_tensor::{DType, Tensor, TensorData};
use ruda_sphere::Latitudes;

use crate::{DynTransforms, Sfno, SfnoError};

/// The mean squared error over the sphere, `Σ_b Σ_c ∫ (p − t)² dΩ / (4π ·
/// b · c)`, by the grid's quadrature (torch-harmonics' `l2loss_sphere`
/// squared, averaged over fields): on a uniform field it is the plain mean
/// square, and it does not over-weight the crowded polar rows as a mean
/// over grid points would.
///
/// On a process grid [`SphereMse::local`] is this rank's part (its patch's
/// share of the integral) and [`SphereMse::total`] the sum over ranks:
/// back-propagate each rank's local part, then sum the parameters'
/// gradients over the domain (see [`Sfno`]).
///
/// # Example
/// ```
/// use burn_tensor::{DType, Device, Tensor};
/// use ruda_sfno::{SfnoConfig, SphereMse};
/// use ruda_sphere::shallow_water::SerialDomain;
///
/// let cfg = SfnoConfig { embed_dim: 4, num_layers: 1, ..SfnoConfig::new(16, 32) };
/// let model = cfg.init(&SerialDomain, 1, &Device::flex(), DType::F64)?;
/// let mse = SphereMse::for_model(&model);
/// let two = Tensor::<4>::full([1, 3, 16, 32], 2.0, (&Device::flex(), DType::F64));
/// let zero = two.zeros_like();
/// let loss = mse.total(mse.local(two, zero)?)?;
/// assert!((loss - 4.0).abs() < 1e-12);
/// # Ok::<(), ruda_sfno::SfnoError>(())
/// ```
#[derive(Debug, Clone)]
pub struct SphereMse {
    transforms: Arc<dyn DynTransforms>,
    /// This rank's `w_k · 2π/nlon / 4π`, f64.
    weights: Vec<f64>,
}

impl SphereMse {
    /// The loss on `model`'s input and output grid.
    pub fn for_model(model: &Sfno) -> Self {
        Self::new(model.transforms_arc())
    }

    /// The loss on the grid of `transforms`.
    pub fn new(transforms: Arc<dyn DynTransforms>) -> Self {
        let spec = *transforms.spec();
        let q = Latitudes::new(spec.nlat(), spec.grid()).expect("a spec's grid is valid");
        let scale =
            2.0 * core::f64::consts::PI / spec.nlon() as f64 / (4.0 * core::f64::consts::PI);
        let weights = q.weights[transforms.lat_range()]
            .iter()
            .map(|w| w * scale)
            .collect();
        SphereMse {
            transforms,
            weights,
        }
    }

    /// This rank's part of the loss of `pred` against `target` (both `[b,
    /// c, lat, lon]`, this rank's patch): a one-element tensor,
    /// differentiable.
    ///
    /// # Errors
    /// [`SfnoError::Shape`] (naming this rank) when `pred` is not this
    /// rank's patch or `target` is not `pred`'s shape.
    pub fn local(&self, pred: Tensor<4>, target: Tensor<4>) -> Result<Tensor<1>, SfnoError> {
        let [b, c, lat, _] = pred.dims();
        let t = &self.transforms;
        let expected = vec![b, c, self.weights.len(), t.lon_range().len()];
        for got in [pred.dims().to_vec(), target.dims().to_vec()] {
            if got != expected {
                return Err(SfnoError::Shape {
                    op: "SphereMse::local",
                    rank: t.rank(),
                    expected,
                    got,
                });
            }
        }
        let w = Tensor::<4>::from_data(
            TensorData::new(self.weights.clone(), [1, 1, lat, 1]),
            (&pred.device(), pred.dtype()),
        );
        // `mul_scalar` by the reciprocal, not `div_scalar`: burn-autodiff
        // 0.22.1's `div_scalar` backward rounds `1 / divisor` to f32, which
        // would leave f64 gradients f32-accurate.
        Ok(((pred - target).powi_scalar(2) * w)
            .sum()
            .mul_scalar(1.0 / (b * c).max(1) as f64))
    }

    /// The loss: the sum over the domain's ranks of their local parts
    /// (collective on a process grid; no gradient).
    ///
    /// # Errors
    /// [`SfnoError::Sphere`] when the sum over ranks fails.
    pub fn total(&self, local: Tensor<1>) -> Result<f64, SfnoError> {
        let summed = self.transforms.sum_over_ranks(local.detach())?;
        let v = summed.cast(DType::F64).into_data();
        Ok(v.try_to_vec::<f64>().expect("f64 values")[0])
    }

    /// The relative L2 error `‖p − t‖ / ‖t‖` over the sphere (and every
    /// field), summed over the ranks (collective; no gradient).
    ///
    /// # Errors
    /// As [`SphereMse::local`] and [`SphereMse::total`].
    pub fn relative_l2(&self, pred: Tensor<4>, target: Tensor<4>) -> Result<f64, SfnoError> {
        let zero = target.zeros_like();
        let err = self.total(self.local(pred, target.clone())?)?;
        let norm = self.total(self.local(target, zero)?)?;
        Ok((err / norm.max(f64::MIN_POSITIVE)).sqrt())
    }
}

//! One block of a spherical Fourier neural operator.

use alloc::sync::Arc;

use burn_core as burn;

use burn::module::Module;
use burn_tensor::Tensor;
use burn_tensor::activation::gelu;
use ruda_sphere::SphereError;

use crate::init::Init;
use crate::{DynTransforms, Pointwise, SpectralConv};

/// A block of torch-harmonics' `SphericalFourierNeuralOperatorBlock` with
/// its defaults (no normalisation, no inner skip, an MLP, an identity outer
/// skip): `y = MLP(ISHT_out(W ⋆ SHT_in(x))) + x̃`, where `W ⋆` is the
/// [`SpectralConv`], the MLP a [`Pointwise`] layer with bias, GELU and a
/// [`Pointwise`] layer without, and `x̃` the input, or its band-limited
/// resampling `ISHT_out(SHT_in(x))` when the block changes grids (the
/// first block goes from the input grid to the internal one, the last
/// back).
#[derive(Module, Debug)]
pub struct SfnoBlock {
    /// The spectral convolution.
    pub filter: SpectralConv,
    /// The MLP's first layer (with bias).
    pub fc1: Pointwise,
    /// The MLP's second layer (no bias).
    pub fc2: Pointwise,
    #[module(skip)]
    forward: Arc<dyn DynTransforms>,
    #[module(skip)]
    inverse: Arc<dyn DynTransforms>,
}

impl SfnoBlock {
    /// A block of `dim` channels from `forward`'s grid to `inverse`'s, with
    /// torch-harmonics' initial scales (GELU's gain 2 for the filter).
    pub(crate) fn new(
        init: &mut Init,
        forward: Arc<dyn DynTransforms>,
        inverse: Arc<dyn DynTransforms>,
        dim: usize,
        mlp_ratio: f64,
    ) -> Self {
        let lmax = inverse.spec().lmax();
        let hidden = (dim as f64 * mlp_ratio) as usize;
        SfnoBlock {
            filter: SpectralConv::new(init, dim, dim, lmax, (2.0 / dim as f64).sqrt()),
            fc1: Pointwise::new(init, dim, hidden, (2.0 / dim as f64).sqrt(), true),
            fc2: Pointwise::new(init, hidden, dim, (1.0 / hidden as f64).sqrt(), false),
            forward,
            inverse,
        }
    }

    /// The transforms of the grid the block takes.
    pub fn input_transforms(&self) -> &dyn DynTransforms {
        self.forward.as_ref()
    }

    /// The same, shared.
    pub fn input_transforms_arc(&self) -> Arc<dyn DynTransforms> {
        self.forward.clone()
    }

    /// Apply to this rank's patch `[b, dim, lat, lon]` of the forward
    /// transform's grid; returns its patch of the inverse's.
    ///
    /// # Errors
    /// The transforms' errors.
    pub fn forward(&self, x: Tensor<4>) -> Result<Tensor<4>, SphereError> {
        let [b, c, lat, lon] = x.dims();
        let coeffs = self.forward.sht(x.clone().reshape([b * c, lat, lon]))?;
        let [_, l, m, two] = coeffs.dims();
        let same_grid = self.forward.spec().nlat() == self.inverse.spec().nlat()
            && self.forward.spec().nlon() == self.inverse.spec().nlon();
        let synth = |c: Tensor<4>, channels: usize| -> Result<Tensor<4>, SphereError> {
            let f = self.inverse.isht(c)?;
            let [_, lat, lon] = f.dims();
            Ok(f.reshape([b, channels, lat, lon]))
        };
        let residual = if same_grid {
            x
        } else {
            synth(coeffs.clone(), c)?
        };
        let start = self.inverse.l_range().start;
        let y = self
            .filter
            .forward(coeffs.reshape([b, c, l, m, two]), start);
        let o = y.dims()[1];
        let y = synth(y.reshape([b * o, l, m, two]), o)?;
        let y = self.fc2.forward(gelu(self.fc1.forward(y)));
        Ok(y + residual)
    }
}

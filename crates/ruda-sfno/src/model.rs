//! The spherical Fourier neural operator and its configuration.

use alloc::sync::Arc;

use burn_core as burn;

use burn::module::Module;
use burn_tensor::{DType, Device, Tensor};
use ruda_sphere::shallow_water::SphereDomain;
use ruda_sphere::{LatitudeGrid, ShtSpec};

use crate::init::Init;
use crate::{DynTransforms, Pointwise, SfnoBlock, SfnoError};

/// The shape of a [`Sfno`]: torch-harmonics' `SphericalFourierNeuralOperator`
/// arguments of the same names, with its defaults from [`SfnoConfig::new`]
/// (`encoder_layers`, `pos_embed`, dropout and normalisation at their
/// defaults: one encoder and decoder layer, none, none, none).
///
/// # Example
/// ```
/// use ruda_sfno::SfnoConfig;
/// let c = SfnoConfig { embed_dim: 8, num_layers: 2, ..SfnoConfig::new(32, 64) };
/// let (outer, inner) = c.specs()?;
/// // Internal grid ((32 − 1)/3 + 1) × (64/3) on Legendre–Gauss latitudes, 10 modes.
/// assert_eq!((inner.nlat(), inner.nlon(), inner.lmax()), (11, 21, 10));
/// assert_eq!((outer.nlat(), outer.lmax()), (32, 10));
/// # Ok::<(), ruda_sfno::SfnoError>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct SfnoConfig {
    /// Latitudes of the input and output grid.
    pub nlat: usize,
    /// Longitudes of the input and output grid.
    pub nlon: usize,
    /// The input and output grid (equiangular).
    pub grid: LatitudeGrid,
    /// The internal grid (Legendre–Gauss).
    pub internal_grid: LatitudeGrid,
    /// The internal grid is `(nlat − 1)/scale_factor + 1` by
    /// `nlon/scale_factor` (3).
    pub scale_factor: usize,
    /// Input channels (3).
    pub in_chans: usize,
    /// Output channels (3).
    pub out_chans: usize,
    /// Channels inside the blocks (256).
    pub embed_dim: usize,
    /// Blocks (4).
    pub num_layers: usize,
    /// The MLPs' hidden channels per channel (2.0).
    pub mlp_ratio: f64,
    /// The fraction of the internal grid's modes kept (1.0).
    pub hard_thresholding_fraction: f64,
    /// Predict the change: add the input to the output (false; needs
    /// `in_chans == out_chans`).
    pub residual_prediction: bool,
    /// A factor on the decoder's initial standard deviation (1:
    /// torch-harmonics' `√(1/embed_dim)`; 0 with a residual prediction: the
    /// model starts as the identity, persistence, and learns the change).
    pub decoder_scale: f64,
}

impl SfnoConfig {
    /// torch-harmonics' defaults on an `nlat × nlon` grid.
    pub fn new(nlat: usize, nlon: usize) -> Self {
        SfnoConfig {
            nlat,
            nlon,
            grid: LatitudeGrid::Equiangular,
            internal_grid: LatitudeGrid::LegendreGauss,
            scale_factor: 3,
            in_chans: 3,
            out_chans: 3,
            embed_dim: 256,
            num_layers: 4,
            mlp_ratio: 2.0,
            hard_thresholding_fraction: 1.0,
            residual_prediction: false,
            decoder_scale: 1.0,
        }
    }

    /// The transforms' grids and truncation: the outer grid's and the
    /// internal grid's, both cut to the same modes (`min(h, w/2)` times
    /// the thresholding fraction).
    ///
    /// # Errors
    /// [`SfnoError::Setting`] for a zero size or factor, no modes left, a
    /// ratio or fraction out of range, or a residual prediction between
    /// different channel counts; [`SfnoError::Sphere`] for grids too small.
    pub fn specs(&self) -> Result<(ShtSpec, ShtSpec), SfnoError> {
        let setting = |what, value: f64, expected| SfnoError::Setting {
            what,
            value,
            expected,
        };
        for (what, v) in [
            ("scale_factor", self.scale_factor),
            ("in_chans", self.in_chans),
            ("out_chans", self.out_chans),
            ("embed_dim", self.embed_dim),
            ("num_layers", self.num_layers),
        ] {
            if v == 0 {
                return Err(setting(what, 0.0, "at least 1"));
            }
        }
        if !(self.mlp_ratio.is_finite() && self.mlp_ratio > 0.0)
            || (self.embed_dim as f64 * self.mlp_ratio) < 1.0
        {
            return Err(setting(
                "mlp_ratio",
                self.mlp_ratio,
                "positive, with at least one hidden channel",
            ));
        }
        let f = self.hard_thresholding_fraction;
        if !(f > 0.0 && f <= 1.0) {
            return Err(setting("hard_thresholding_fraction", f, "in (0, 1]"));
        }
        if !(self.decoder_scale.is_finite() && self.decoder_scale >= 0.0) {
            return Err(setting(
                "decoder_scale",
                self.decoder_scale,
                "finite and non-negative",
            ));
        }
        if self.residual_prediction && self.in_chans != self.out_chans {
            return Err(setting(
                "out_chans",
                self.out_chans as f64,
                "equal to in_chans for a residual prediction",
            ));
        }
        let h = self.nlat.saturating_sub(1) / self.scale_factor + 1;
        let w = self.nlon / self.scale_factor;
        let modes = (h.min(w / 2) as f64 * f) as usize;
        if modes == 0 {
            return Err(setting("modes", 0.0, "at least 1 (a larger grid)"));
        }
        let outer =
            ShtSpec::with_truncation(self.nlat, self.nlon, self.grid, Some(modes), Some(modes))?;
        let inner = ShtSpec::with_truncation(h, w, self.internal_grid, Some(modes), Some(modes))?;
        Ok((outer, inner))
    }

    /// A model of this shape on `domain`, its parameters drawn from `seed`
    /// (the same on every rank: no broadcast needed) with
    /// torch-harmonics' initial scales, on `device` in `dtype`.
    ///
    /// # Errors
    /// As [`SfnoConfig::specs`], and [`SfnoError::Sphere`] when the domain
    /// does not fit a grid.
    pub fn init<D: SphereDomain>(
        &self,
        domain: &D,
        seed: u64,
        device: &Device,
        dtype: DType,
    ) -> Result<Sfno, SfnoError> {
        let (outer, inner) = self.specs()?;
        let outer: Arc<dyn DynTransforms> = Arc::new(domain.transforms(outer)?);
        let inner = if self.num_layers > 1 {
            Arc::new(domain.transforms(inner)?) as Arc<dyn DynTransforms>
        } else {
            outer.clone()
        };
        let mut init = Init::new(seed, device, dtype);
        let e = self.embed_dim;
        let encoder = Pointwise::new(
            &mut init,
            self.in_chans,
            e,
            (1.0 / self.in_chans as f64).sqrt(),
            false,
        );
        let blocks = (0..self.num_layers)
            .map(|i| {
                let from = if i == 0 { &outer } else { &inner };
                let to = if i + 1 == self.num_layers {
                    &outer
                } else {
                    &inner
                };
                SfnoBlock::new(&mut init, from.clone(), to.clone(), e, self.mlp_ratio)
            })
            .collect();
        let decoder = Pointwise::new(
            &mut init,
            e,
            self.out_chans,
            self.decoder_scale * (1.0 / e as f64).sqrt(),
            false,
        );
        Ok(Sfno {
            encoder,
            blocks,
            decoder,
            residual_prediction: self.residual_prediction,
        })
    }
}

/// A spherical Fourier neural operator (Bonev et al. 2023) as a Burn
/// [`Module`]: a pointwise encoder, [`SfnoBlock`]s (the first from the
/// input grid to the internal one, the last back), a pointwise decoder,
/// optionally plus the input. Serial on [`SerialTransforms`], distributed
/// on a process grid's [`DistributedTransforms`], from the same code.
///
/// **Distributed, per layer.** Fields are split by latitude and longitude
/// ([`SphereLayout`](ruda_sphere::SphereLayout)); every parameter is
/// replicated on every rank of the domain:
///
/// | layer | parameters | what a rank computes |
/// |---|---|---|
/// | encoder, decoder, block MLPs ([`Pointwise`]) | replicated | its patch |
/// | spectral filter ([`SpectralConv`]) | replicated; a rank uses its degrees | its block of coefficients |
///
/// so the gradient of the global loss is the **sum over the domain's
/// ranks** of each rank's gradient (each sees only its patch, or its
/// degrees): reduce with
/// `ruda_tensor::ddp::all_reduce_gradients(grid.world(), .., GradientReduction::Sum)`
/// after `backward` (see `tests/distributed.rs`). With data parallelism
/// over replicas on top, reduce over the domain, then average over the
/// replica group.
///
/// [`SerialTransforms`]: ruda_sphere::shallow_water::SerialTransforms
/// [`DistributedTransforms`]: ruda_sphere::shallow_water::DistributedTransforms
///
/// # Example
/// ```
/// use burn_tensor::{DType, Device, Tensor};
/// use ruda_sfno::SfnoConfig;
/// use ruda_sphere::shallow_water::SerialDomain;
///
/// let cfg = SfnoConfig { embed_dim: 4, num_layers: 2, ..SfnoConfig::new(16, 32) };
/// let model = cfg.init(&SerialDomain, 7, &Device::flex(), DType::F32)?;
/// let x = Tensor::<4>::ones([2, 3, 16, 32], (&Device::flex(), DType::F32));
/// let y = model.forward(x)?;
/// assert_eq!(y.dims(), [2, 3, 16, 32]);
/// # Ok::<(), ruda_sfno::SfnoError>(())
/// ```
#[derive(Module, Debug)]
pub struct Sfno {
    /// `in_chans → embed_dim`, no bias.
    encoder: Pointwise,
    /// The blocks (at least one: [`SfnoConfig::init`] makes them).
    blocks: Vec<SfnoBlock>,
    /// `embed_dim → out_chans`, no bias.
    decoder: Pointwise,
    /// Whether the input is added to the output.
    residual_prediction: bool,
}

impl Sfno {
    /// Apply to this rank's patch `[b, in_chans, lat, lon]` of the input
    /// grid: its patch `[b, out_chans, lat, lon]` of the output.
    /// Collective on a process grid.
    ///
    /// # Errors
    /// [`SfnoError::Shape`] (naming this rank) for an input of other
    /// channels or another patch; the transforms' errors.
    pub fn forward(&self, x: Tensor<4>) -> Result<Tensor<4>, SfnoError> {
        let t = self.transforms();
        let [b, c, lat, lon] = x.dims();
        let expected = vec![
            b,
            self.encoder.weight.val().dims()[1],
            t.lat_range().len(),
            t.lon_range().len(),
        ];
        if vec![b, c, lat, lon] != expected {
            return Err(SfnoError::Shape {
                op: "Sfno::forward",
                rank: t.rank(),
                expected,
                got: vec![b, c, lat, lon],
            });
        }
        let mut h = self.encoder.forward(x.clone());
        for block in &self.blocks {
            h = block.forward(h)?;
        }
        let y = self.decoder.forward(h);
        Ok(if self.residual_prediction { y + x } else { y })
    }

    /// The transforms of the input and output grid (this rank's part).
    pub fn transforms(&self) -> &dyn DynTransforms {
        self.blocks[0].input_transforms()
    }

    /// The same, shared.
    pub fn transforms_arc(&self) -> Arc<dyn DynTransforms> {
        self.blocks[0].input_transforms_arc()
    }

    /// The encoder.
    pub fn encoder(&self) -> &Pointwise {
        &self.encoder
    }

    /// The blocks.
    pub fn blocks(&self) -> &[SfnoBlock] {
        &self.blocks
    }

    /// The decoder.
    pub fn decoder(&self) -> &Pointwise {
        &self.decoder
    }
}

//! One rank's training of the SFNO (or the serial model's): steps on the
//! batches it is given, validation, and the autoregressive rollout.

use std::ops::Range;
use std::path::Path;

use burn_core as burn;

use burn::module::{Module, ModuleVisitor, Param};
use burn_optim::{AdamConfig, GradientsParams, ModuleOptimizer};
use burn_tensor::{DType, Device, Tensor};
use ruda_sfno::{Sfno, SfnoConfig, SfnoError, SphereMse, patch};
use ruda_sphere::shallow_water::SphereDomain;
use ruda_tensor::Group;
use ruda_tensor::ddp::{load_checkpoint, save_checkpoint};

/// A batch of pairs, whole fields `[b, 3, nlat, nlon]` flattened.
#[derive(Clone, Debug)]
pub struct Batch {
    /// Samples in it.
    pub size: usize,
    /// The states.
    pub inputs: std::sync::Arc<Vec<f64>>,
    /// The states `dt` later.
    pub targets: std::sync::Arc<Vec<f64>>,
    /// Write a checkpoint to this folder after the step.
    pub save: Option<std::path::PathBuf>,
}

impl Batch {
    /// Samples `range` of this batch (a replica's share), without the
    /// checkpoint request.
    ///
    /// # Panics
    /// When `range` reaches past the batch.
    pub fn samples(&self, range: Range<usize>) -> Batch {
        assert!(range.end <= self.size, "samples {range:?} of {}", self.size);
        let per = self.inputs.len() / self.size.max(1);
        let cut = |v: &[f64]| std::sync::Arc::new(v[range.start * per..range.end * per].to_vec());
        Batch {
            size: range.len(),
            inputs: cut(&self.inputs),
            targets: cut(&self.targets),
            save: None,
        }
    }
}

/// What one step reports: the loss before the update and every parameter
/// after it.
#[derive(Clone, Debug)]
pub struct StepReport {
    /// The loss over the whole sphere and batch.
    pub loss: f64,
    /// Every float parameter, flattened in visiting order.
    pub params: Vec<f64>,
}

/// Every float parameter's values, flattened.
#[derive(Default)]
struct Flatten(Vec<f64>);

impl ModuleVisitor for Flatten {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        let v = param.val().cast(DType::F64).into_data();
        self.0.extend(v.try_to_vec::<f64>().expect("f64 values"));
    }
}

/// How a rank turns its gradients into the update: serially Adam's step;
/// distributed, the sum over the domain first.
pub type Reduce<'a> =
    dyn FnMut(&mut ModuleOptimizer, f64, Sfno, GradientsParams) -> Result<Sfno, SfnoError> + 'a;

/// A model, its optimizer and the part of the sphere this rank holds.
pub struct Trainer {
    model: Option<Sfno>,
    optim: ModuleOptimizer,
    mse: SphereMse,
    rows: Range<usize>,
    cols: Range<usize>,
    grid: (usize, usize),
    device: Device,
    lr: f64,
}

impl Trainer {
    /// The model of `cfg` on `domain` from `seed` (the same parameters on
    /// every rank and in the serial run), in f64 with autodiff.
    ///
    /// # Errors
    /// The model's configuration and the domain's fit.
    pub fn new<D: SphereDomain>(
        cfg: &SfnoConfig,
        domain: &D,
        seed: u64,
        lr: f64,
    ) -> Result<Self, SfnoError> {
        let device = Device::flex().autodiff();
        let model = cfg.init(domain, seed, &device, DType::F64)?;
        let t = model.transforms();
        let (rows, cols) = (t.lat_range(), t.lon_range());
        Ok(Trainer {
            mse: SphereMse::for_model(&model),
            model: Some(model),
            optim: AdamConfig::new().init(),
            rows,
            cols,
            grid: (cfg.nlat, cfg.nlon),
            device,
            lr,
        })
    }

    fn model(&self) -> &Sfno {
        self.model.as_ref().expect("a model between steps")
    }

    /// This rank's patch of fields `[b, 3, nlat, nlon]`.
    fn patch(&self, v: &[f64], b: usize) -> Tensor<4> {
        let (nlat, nlon) = self.grid;
        patch(
            v,
            [b, 3, nlat, nlon],
            self.rows.clone(),
            self.cols.clone(),
            &self.device,
            DType::F64,
        )
    }

    /// One Adam step on `batch`; `reduce` turns this rank's gradients into
    /// the update (serially Adam's step; distributed, the sum over the
    /// domain first).
    ///
    /// # Errors
    /// The model's and the reduction's errors.
    pub fn step(
        &mut self,
        batch: &Batch,
        reduce: &mut Reduce<'_>,
    ) -> Result<StepReport, SfnoError> {
        let model = self.model.take().expect("a model between steps");
        let x = self.patch(&batch.inputs, batch.size);
        let y = self.patch(&batch.targets, batch.size);
        let out = model.forward(x)?;
        let local = self.mse.local(out, y)?;
        let loss = self.mse.total(local.clone())?;
        let grads = GradientsParams::from_grads(local.backward(), &model);
        let model = reduce(&mut self.optim, self.lr, model, grads)?;
        let mut flat = Flatten::default();
        model.visit(&mut flat);
        self.model = Some(model);
        Ok(StepReport {
            loss,
            params: flat.0,
        })
    }

    /// The loss on `batch` without training.
    ///
    /// # Errors
    /// The model's errors.
    pub fn loss(&self, batch: &Batch) -> Result<f64, SfnoError> {
        let x = self.patch(&batch.inputs, batch.size);
        let y = self.patch(&batch.targets, batch.size);
        let out = self.model().forward(x)?.detach();
        self.mse.total(self.mse.local(out, y)?)
    }

    /// Roll the model out from `states[0]`: the relative L2 error against
    /// `states[k]` after each of `states.len() − 1` steps, and this
    /// rank's patch of the last prediction `[3, rows, cols]`.
    ///
    /// # Errors
    /// The model's errors.
    pub fn rollout(&self, states: &[Vec<f64>]) -> Result<(Vec<f64>, Vec<f64>), SfnoError> {
        let mut x = self.patch(&states[0], 1);
        let mut errors = Vec::with_capacity(states.len().saturating_sub(1));
        for truth in &states[1..] {
            x = self.model().forward(x)?.detach();
            errors.push(self.mse.relative_l2(x.clone(), self.patch(truth, 1))?);
        }
        let last = x
            .into_data()
            .try_to_vec::<f64>()
            .expect("the demo trains in f64");
        Ok((errors, last))
    }

    /// Write the model and the optimizer state to `dir` from rank 0 of
    /// `group` (collective: every rank of `group` holds the same
    /// replicated parameters).
    ///
    /// # Errors
    /// [`ruda_tensor::ddp::save_checkpoint`]'s.
    pub fn save<G: Group>(&self, group: &G, dir: &Path) -> Result<(), SfnoError> {
        Ok(save_checkpoint(group, 0, dir, self.model(), &self.optim)?)
    }

    /// Replace the model and the optimizer state with the checkpoint in
    /// `dir` (collective over `group`, which may be another grid than the
    /// one that wrote it: the parameters are replicated).
    ///
    /// # Errors
    /// [`ruda_tensor::ddp::load_checkpoint`]'s; the trainer is left
    /// without a model on error.
    pub fn load<G: Group>(&mut self, group: &G, dir: &Path) -> Result<(), SfnoError> {
        let model = self.model.take().expect("a model between steps");
        let optim = std::mem::replace(&mut self.optim, AdamConfig::new().init());
        let (model, optim) = load_checkpoint(group, dir, model, optim)?;
        self.model = Some(model);
        self.optim = optim;
        Ok(())
    }

    /// This rank's latitudes and longitudes.
    pub fn patch_ranges(&self) -> (Range<usize>, Range<usize>) {
        (self.rows.clone(), self.cols.clone())
    }
}

//! [`SyncBatchNorm`]: batch normalization whose statistics are those of
//! the global batch, every rank's shard together.

use burn_core as burn;

use alloc::vec::Vec;
use burn::module::{Module, Param, RunningState};
use burn_tensor::{DType, Device, Tensor};

use crate::error::{Error, ShapeProblem, TensorOp};
use crate::group::Group;
use crate::methods::TensorExt;

/// Marks a SyncBatchNorm call's record ("rudaSBN1").
const MAGIC: i64 = 0x7275_6461_5342_4e31;

/// The settings of a [`SyncBatchNorm`]: as burn-nn's `BatchNormConfig`
/// (epsilon 1e-5, momentum 0.1 by default).
///
/// # Example
/// ```
/// use burn_tensor::Device;
/// use ruda_tensor::ddp::SyncBatchNormConfig;
///
/// let bn = SyncBatchNormConfig::new(8).with_momentum(0.01).init(&Device::flex())?;
/// assert_eq!(bn.gamma.val().dims(), [8]);
/// # Ok::<(), ruda_tensor::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SyncBatchNormConfig {
    /// The number of channels (the input's second axis); at least 1.
    pub num_features: usize,
    /// Added to the variance before its square root; finite and positive.
    pub epsilon: f64,
    /// The weight of each step's batch statistics in the running ones, in
    /// `[0, 1]`.
    pub momentum: f64,
}

impl SyncBatchNormConfig {
    /// `num_features` channels, epsilon 1e-5, momentum 0.1.
    pub fn new(num_features: usize) -> Self {
        SyncBatchNormConfig {
            num_features,
            epsilon: 1e-5,
            momentum: 0.1,
        }
    }

    /// These settings with `epsilon`.
    pub fn with_epsilon(self, epsilon: f64) -> Self {
        SyncBatchNormConfig { epsilon, ..self }
    }

    /// These settings with `momentum`.
    pub fn with_momentum(self, momentum: f64) -> Self {
        SyncBatchNormConfig { momentum, ..self }
    }

    /// A new module on `device` in the device's float dtype: `gamma` ones,
    /// `beta` zeros, running mean zeros, running variance ones (as
    /// burn-nn's `BatchNorm`).
    ///
    /// # Errors
    /// [`Error::InvalidSetting`] for no features, an epsilon that is not
    /// finite and positive, or a momentum outside `[0, 1]`.
    pub fn init(&self, device: &Device) -> Result<SyncBatchNorm, Error> {
        let op = TensorOp::SyncBatchNorm;
        let invalid = |setting, value, domain| Error::InvalidSetting {
            op,
            setting,
            value,
            domain,
        };
        if self.num_features == 0 {
            return Err(invalid("num_features", 0.0, "at least 1"));
        }
        if !(self.epsilon.is_finite() && self.epsilon > 0.0) {
            return Err(invalid("epsilon", self.epsilon, "finite and positive"));
        }
        if !(0.0..=1.0).contains(&self.momentum) {
            return Err(invalid("momentum", self.momentum, "[0, 1]"));
        }
        let n = self.num_features;
        Ok(SyncBatchNorm {
            gamma: Param::from_tensor(Tensor::ones([n], device)),
            beta: Param::from_tensor(Tensor::zeros([n], device)),
            running_mean: RunningState::new(Tensor::zeros([n], device)),
            running_var: RunningState::new(Tensor::ones([n], device)),
            momentum: self.momentum,
            epsilon: self.epsilon,
        })
    }
}

/// Batch normalization over the global batch (PyTorch's `SyncBatchNorm`):
/// in training each channel's mean and variance are those of every rank's
/// shard together, reduced over the group with ruda's differentiable
/// all-reduce, so the output, the gradients and the running statistics are
/// those of burn-nn's `BatchNorm` applied to the whole batch by one
/// process (up to floating-point rounding: the tests hold one rank to
/// `BatchNorm` and 2 to 8 ranks to one rank within 1e-12 · (1 + |x|) in
/// f64). It computes as `BatchNorm` does: a two-pass variance,
/// biased (divided by the sample count) in the normalization and in the
/// running variance alike.
///
/// The running statistics are the same on every rank (the same reduced
/// values update them), so [`super::BufferSync::Off`] suffices for them.
/// Half-precision inputs are normalized in f32 and the output rounded
/// once.
///
/// **Every rank together.** Training mode is chosen by the input's device
/// (autodiff: training), per rank: every rank of the group must run the
/// forward pass in the same mode, in the same order among its collectives,
/// and then `backward()` on a loss that depends on the output (the
/// statistics' all-reduces run again in the backward pass); a rank that
/// does not waits out the group's deadline on the others, which then fail
/// with its timeout. Unlike burn-nn's `BatchNorm` there is no training
/// flag: `freeze()` does not switch it to the running statistics; run it
/// on a device without autodiff (after `valid()`) for inference.
///
/// **Gradients.** The backward pass sums each statistic's gradient over
/// the ranks (the all-reduce is its own adjoint): the gradient that reaches
/// rank r's input is that of the *sum* of the ranks' losses. That is the
/// global loss for [`super::GradientReduction::Sum`] with each rank's loss
/// its share of the global one (e.g. a sum over its shard divided by the
/// global batch size: exact for uneven shards), and for
/// [`super::GradientReduction::Mean`] with equal shards (each loss a mean
/// over its shard). It is not for `WeightedMean` over uneven shards, which
/// weights the statistics' gradients by the wrong rank's share.
///
/// # Example
/// ```
/// use burn_tensor::{Device, Tensor, TensorData};
/// use ruda_comm::LocalWorld;
/// use ruda_tensor::{Group, HostCollective};
/// use ruda_tensor::ddp::SyncBatchNormConfig;
///
/// let out = LocalWorld::new(2).run(|comm| {
///     let world = HostCollective::new(comm);
///     let device = Device::flex().autodiff();
///     let bn = SyncBatchNormConfig::new(1).init(&device)?;
///     // Rank 0 holds the sample 1, rank 1 the samples 3 and 5: the
///     // global mean is 3 and the variance 8/3.
///     let x: Vec<f32> = if world.rank() == 0 { vec![1.0] } else { vec![3.0, 5.0] };
///     let rows = x.len();
///     let x = Tensor::<2>::from_data(TensorData::new(x, [rows, 1]), &device);
///     let y = bn.forward(&world, x)?;
///     Ok::<_, ruda_tensor::Error>(y.into_data().try_to_vec::<f32>().unwrap())
/// }).unwrap();
/// let s = (8.0f32 / 3.0 + 1e-5).sqrt();
/// assert!((out[0][0] + 2.0 / s).abs() < 1e-6);
/// assert!((out[1][1] - 2.0 / s).abs() < 1e-6);
/// ```
#[derive(Module, Debug)]
pub struct SyncBatchNorm {
    /// The learnable scale, one per channel.
    pub gamma: Param<Tensor<1>>,
    /// The learnable shift, one per channel.
    pub beta: Param<Tensor<1>>,
    /// The running mean of the global batch's means.
    pub running_mean: RunningState<Tensor<1>>,
    /// The running mean of the global batch's (biased) variances.
    pub running_var: RunningState<Tensor<1>>,
    /// The weight of each step's statistics in the running ones.
    pub momentum: f64,
    /// Added to the variance before its square root.
    pub epsilon: f64,
}

impl SyncBatchNorm {
    /// Normalize `input` (`[batch, channels, ...]`, this rank's shard of
    /// the batch; any shard may be empty) with the global batch's
    /// statistics when its device has autodiff (training), with the
    /// running statistics otherwise (no communication then). Every rank of
    /// `group` calls it in training, in the same order relative to its
    /// other collectives.
    ///
    /// # Errors
    /// [`Error::BadShape`] with [`ShapeProblem::Channels`] on every rank
    /// when a rank's input has fewer than two axes or another number of
    /// channels; [`Error::EmptyBatch`] on every rank when every shard is
    /// empty; the group's errors (the statistics' all-reduce, and its
    /// backward pass).
    ///
    /// # Example
    /// ```
    /// use burn_tensor::{Device, Tensor};
    /// use ruda_comm::LocalWorld;
    /// use ruda_tensor::HostCollective;
    /// use ruda_tensor::ddp::SyncBatchNormConfig;
    ///
    /// LocalWorld::new(2).run(|comm| {
    ///     let world = HostCollective::new(comm);
    ///     let device = Device::flex().autodiff();
    ///     let bn = SyncBatchNormConfig::new(3).init(&device)?;
    ///     let y = bn.forward(&world, Tensor::<4>::ones([2, 3, 4, 4], &device))?;
    ///     assert_eq!(y.dims(), [2, 3, 4, 4]);
    ///     Ok::<_, ruda_tensor::Error>(())
    /// }).unwrap();
    /// ```
    pub fn forward<const D: usize, G: Group>(
        &self,
        group: &G,
        input: Tensor<D>,
    ) -> Result<Tensor<D>, Error> {
        if input.device().is_autodiff() {
            self.forward_train(group, input)
                .map_err(|e| e.in_named_call(TensorOp::SyncBatchNorm.name()))
        } else {
            self.forward_inference(input)
        }
    }

    /// The number of channels.
    fn channels(&self) -> usize {
        self.gamma.val().dims()[0]
    }

    /// `[1, channels, 1, …]`: a per-channel vector that broadcasts over an
    /// input of `D` axes.
    fn per_channel<const D: usize>(&self, v: Tensor<1>) -> Tensor<D> {
        let mut dims = [1usize; D];
        dims[1] = self.channels();
        crate::reshape(v, dims)
    }

    fn forward_inference<const D: usize>(&self, input: Tensor<D>) -> Result<Tensor<D>, Error> {
        let c = self.channels();
        if D < 2 || input.dims()[1] != c {
            return Err(bad_shape(0, 0, &input.dims(), c));
        }
        let device = input.device();
        // In the parameters' dtype (half-precision input in a wider
        // module), the output back in the input's.
        let dtype = input.dtype();
        let work = self.gamma.val().dtype();
        let cast = |t: Tensor<1>| if t.dtype() == work { t } else { t.cast(work) };
        let input = if dtype == work {
            input
        } else {
            input.cast(work)
        };
        let out = burn::tensor::module::batch_norm(
            input,
            self.gamma.val(),
            cast(self.beta.val()),
            cast(self.running_mean.value().to_device(&device)),
            cast(self.running_var.value().to_device(&device)),
            self.epsilon,
        );
        Ok(if dtype == work { out } else { out.cast(dtype) })
    }

    fn forward_train<const D: usize, G: Group>(
        &self,
        group: &G,
        input: Tensor<D>,
    ) -> Result<Tensor<D>, Error> {
        let op = TensorOp::SyncBatchNorm;
        let me = group.rank();
        let c = self.channels();
        let dims = input.dims();
        let fits = D >= 2 && dims[1] == c;
        // Elements per channel on this rank.
        let count = if fits {
            dims.iter().product::<usize>() / c
        } else {
            0
        };
        let mine = [
            MAGIC,
            op.code(),
            i64::from(fits),
            i64::try_from(count).unwrap_or(i64::MAX),
        ];
        let all = group.exchange_words(&mine)?;
        let fields = [("record marker", MAGIC), ("operation", op.code())];
        super::structure::check_records(group, op, &all, mine.len(), &fields)?;
        let mut total = 0u64;
        for (r, w) in all.chunks(mine.len()).enumerate() {
            if w[2] == 0 {
                let shape = if r == me { dims.to_vec() } else { Vec::new() };
                return Err(bad_shape(me, r, &shape, c));
            }
            total = total.saturating_add(w[3] as u64);
        }
        if total == 0 {
            return Err(Error::EmptyBatch { op, rank: me });
        }
        let inv = 1.0 / total as f64;
        // Half precision computes in f32: a channel's sum of 100k values
        // of 1 is already past f16's 65504.
        let dtype = input.dtype();
        let work = match dtype {
            DType::F16 | DType::BF16 => DType::F32,
            d => d,
        };
        let input = if work == dtype {
            input
        } else {
            input.cast(work)
        };
        let param = |p: &Param<Tensor<1>>| {
            let v = p.val();
            if v.dtype() == work { v } else { v.cast(work) }
        };
        // [channels, elements per channel] (zero columns on an empty
        // shard: its sums are zeros, still tracked like every rank's).
        // Each rank's sum is scaled by 1/total before the all-reduce, so
        // the reduction adds means, not sums.
        let flat = |t: Tensor<D>| crate::reshape(t.swap_dims(0, 1), [c, count]);
        let share = |t: Tensor<D>| crate::reshape(flat(t).sum_dim(1), [c]).mul_scalar(inv);
        let mean = share(input.clone()).all_reduce(group)?;
        let centered = input - self.per_channel::<D>(mean.clone());
        let var = share(centered.clone().powi_scalar(2)).all_reduce(group)?;
        let scale = var.clone().add_scalar(self.epsilon).sqrt().recip() * param(&self.gamma);
        let out =
            centered * self.per_channel::<D>(scale) + self.per_channel::<D>(param(&self.beta));
        self.update(&self.running_mean, mean);
        self.update(&self.running_var, var);
        Ok(if work == dtype { out } else { out.cast(dtype) })
    }

    /// `state ← (1 − momentum) · state + momentum · batch`, as burn-nn's
    /// `BatchNorm` updates its running statistics.
    fn update(&self, state: &RunningState<Tensor<1>>, batch: Tensor<1>) {
        let device = batch.device();
        let old = state.value_sync().to_device(&device);
        let batch = if batch.dtype() == old.dtype() {
            batch
        } else {
            batch.cast(old.dtype())
        };
        let new = old
            .mul_scalar(1.0 - self.momentum)
            .add(batch.detach().mul_scalar(self.momentum));
        state.update(new.detach());
    }
}

/// [`Error::BadShape`] for rank `offender`'s input of shape `dims` (known
/// on its own rank only) and a module of `channels` channels.
fn bad_shape(rank: usize, offender: usize, dims: &[usize], channels: usize) -> Error {
    Error::BadShape {
        op: TensorOp::SyncBatchNorm,
        rank,
        offender,
        shape: dims.iter().copied().take(8).collect(),
        problem: ShapeProblem::Channels { expected: channels },
    }
}

//! [`step`]: one data-parallel optimizer step, buffers included.

use burn_core::module::Module;
use burn_optim::{GradientsParams, LearningRate, ModuleOptimizer};

use super::buffers::{BufferSync, sync_buffers};
use super::gradients::{GradientReduction, all_reduce_gradients};
use crate::error::Error;
use crate::group::Group;

/// One data-parallel training step after `backward()`: reduce `grads` over
/// `group` ([`super::all_reduce_gradients`] with `reduction`), step
/// `optim` with learning rate `lr`, then make the replicas' buffers equal
/// by broadcasting rank 0's ([`super::sync_buffers`] with
/// [`BufferSync::default`], as PyTorch's DDP broadcasts buffers before
/// every forward pass). With it, every replica of a model with running
/// statistics (a `BatchNorm`) stays bit for bit equal after every step;
/// [`step_with`] chooses another [`BufferSync`].
///
/// # Errors
/// The errors of [`super::all_reduce_gradients`] and
/// [`super::sync_buffers`], on every rank (the module is consumed: after an
/// error, load a checkpoint to go on). The buffer sync is a collective
/// after the optimizer step: a rank whose optimizer panics leaves its
/// peers waiting until the group's deadline, which they then report.
///
/// # Example
/// ```
/// use burn_core::module::Module;
/// use burn_nn::{BatchNorm, BatchNormConfig};
/// use burn_optim::{GradientsParams, ModuleOptimizer, SgdConfig};
/// use burn_tensor::{Device, Tensor};
/// use ruda_comm::LocalWorld;
/// use ruda_tensor::{Group, HostCollective};
/// use ruda_tensor::ddp::{GradientReduction, broadcast_module, check_replicas, step};
///
/// LocalWorld::new(2).run(|comm| {
///     let world = HostCollective::new(comm);
///     let device = Device::flex().autodiff();
///     let bn: BatchNorm = BatchNormConfig::new(2).init(&device);
///     let mut bn = broadcast_module(&world, bn, 0)?;
///     let mut optim: ModuleOptimizer = SgdConfig::new().init();
///     for _ in 0..3 {
///         // Each rank's shard: its running statistics move their own way.
///         let x = Tensor::<2>::ones([2, 2], &device).mul_scalar(1.0 + world.rank() as f64);
///         let x = x.clone() * x.clone().cumsum(0);
///         let loss = bn.forward(x).powi_scalar(3).mean();
///         let grads = GradientsParams::from_grads(loss.backward(), &bn);
///         bn = step(&world, &mut optim, 0.1, bn, grads, GradientReduction::Mean)?;
///         check_replicas(&world, &bn)?; // running statistics included
///     }
///     Ok::<_, ruda_tensor::Error>(())
/// }).unwrap();
/// ```
pub fn step<M: Module, G: Group>(
    group: &G,
    optim: &mut ModuleOptimizer,
    lr: LearningRate,
    module: M,
    grads: GradientsParams,
    reduction: GradientReduction,
) -> Result<M, Error> {
    step_with(
        group,
        optim,
        lr,
        module,
        grads,
        reduction,
        BufferSync::default(),
    )
}

/// [`step`] with the replicas' buffers made equal as `buffers` says.
///
/// # Errors
/// As [`step`].
///
/// # Example
/// ```
/// use burn_core::module::Module;
/// use burn_nn::{Linear, LinearConfig};
/// use burn_optim::{GradientsParams, ModuleOptimizer, SgdConfig};
/// use burn_tensor::{Device, Tensor};
/// use ruda_comm::LocalWorld;
/// use ruda_tensor::HostCollective;
/// use ruda_tensor::ddp::{BufferSync, GradientReduction, broadcast_module, step_with};
///
/// LocalWorld::new(2).run(|comm| {
///     let world = HostCollective::new(comm);
///     let device = Device::flex().autodiff();
///     let model: Linear = LinearConfig::new(3, 1).init(&device);
///     let model = broadcast_module(&world, model, 0)?;
///     let mut optim: ModuleOptimizer = SgdConfig::new().init();
///     let loss = model.forward(Tensor::<2>::ones([2, 3], &device)).mean();
///     let grads = GradientsParams::from_grads(loss.backward(), &model);
///     // A model without buffers: nothing to keep equal.
///     let how = GradientReduction::WeightedMean { samples: 2 };
///     step_with(&world, &mut optim, 0.1, model, grads, how, BufferSync::Off).map(|_| ())
/// }).unwrap();
/// ```
pub fn step_with<M: Module, G: Group>(
    group: &G,
    optim: &mut ModuleOptimizer,
    lr: LearningRate,
    module: M,
    grads: GradientsParams,
    reduction: GradientReduction,
    buffers: BufferSync,
) -> Result<M, Error> {
    let grads = all_reduce_gradients(group, &module, grads, reduction)?;
    let module = optim.step(lr, module, grads);
    sync_buffers(group, module, buffers)
}

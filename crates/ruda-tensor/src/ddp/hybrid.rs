//! [`hybrid_step`]: one optimizer step of a domain-decomposed model
//! trained data-parallel (replicas × polar × azimuth).

use burn_core::module::Module;
use burn_optim::{GradientsParams, LearningRate, ModuleOptimizer};

use super::gradients::{GradientReduction, all_reduce_gradients};
use super::step::step;
use crate::error::Error;
use crate::group::Group;
use crate::hybrid_grid::HybridGrid;

/// One training step on a [`HybridGrid`] after `backward()`, for a model
/// whose parameters are all replicated over the domain (every rank of a
/// replica holds all of them, as ruda-sfno's SFNO does) and whose loss on
/// each rank is that rank's part of its replica's loss (the sum over the
/// domain is the replica's loss, as with a loss integrated over each
/// rank's patch):
///
/// 1. gradients summed over the replica's domain
///    ([`all_reduce_gradients`] over `grid.domain().world()` with
///    [`GradientReduction::Sum`]): every rank of a replica then holds the
///    gradient of the replica's loss;
/// 2. [`step`] over the replicas group with `reduction` (typically
///    [`GradientReduction::WeightedMean`] with the replica's samples):
///    the gradient of the global batch's loss, the optimizer step, and
///    buffers made equal across replicas.
///
/// `reduction` (and its sample count) must be the same on every rank of a
/// replica: it is agreed over the replicas group only, and ranks of one
/// domain passing different counts would step their copies of the
/// replicated parameters differently (`check_replicas` over
/// `grid.world()` finds that).
///
/// Every rank then makes the same update, so the replicas stay equal and
/// the run equals the serial model on the global batch to round-off (the
/// sums run in another order). For parameters sharded over the domain
/// (each rank its own slice) use [`hybrid_step_with`]: here the module's
/// structure must agree over the domain, and the first reduction reports
/// [`Error::ModuleMismatch`] on every rank when it does not.
///
/// # Errors
/// Those of [`all_reduce_gradients`] and [`step`], on every rank of the
/// group that fails (the module is consumed: after an error, load a
/// checkpoint to go on).
///
/// # Example
/// ```
/// use burn_core::module::Module;
/// use burn_nn::{Linear, LinearConfig};
/// use burn_optim::{GradientsParams, ModuleOptimizer, SgdConfig};
/// use burn_tensor::{Device, Tensor};
/// use ruda_comm::LocalWorld;
/// use ruda_tensor::{Group, HybridGrid};
/// use ruda_tensor::ddp::{GradientReduction, broadcast_module, hybrid_step};
///
/// let weights = LocalWorld::new(4).run(|comm| {
///     let grid = HybridGrid::new(comm, 2, 1, 2)?; // 2 replicas of a 1 × 2 domain
///     let device = Device::flex().autodiff();
///     let model: Linear = LinearConfig::new(2, 1).init(&device);
///     let model = broadcast_module(grid.world(), model, 0)?;
///     let mut optim: ModuleOptimizer = SgdConfig::new().init();
///     // Each rank's part of its replica's loss: here its own input row.
///     let x = Tensor::<2>::ones([1, 2], &device).mul_scalar(grid.world().rank() as f64);
///     let loss = model.forward(x).sum();
///     let grads = GradientsParams::from_grads(loss.backward(), &model);
///     let how = GradientReduction::WeightedMean { samples: 1 };
///     let model = hybrid_step(&grid, &mut optim, 0.1, model, grads, how)?;
///     Ok::<_, ruda_tensor::Error>(model.weight.val().into_data().to_vec::<f32>().unwrap())
/// }).unwrap();
/// assert!(weights.iter().all(|w| w == &weights[0])); // one model everywhere
/// ```
pub fn hybrid_step<M: Module, G: Group>(
    grid: &HybridGrid<G>,
    optim: &mut ModuleOptimizer,
    lr: LearningRate,
    module: M,
    grads: GradientsParams,
    reduction: GradientReduction,
) -> Result<M, Error> {
    hybrid_step_with(grid, optim, lr, module, grads, reduction, |m| m)
}

/// [`hybrid_step`] for a model with parameters sharded over the domain
/// (each rank holding its own slice, e.g. a per-latitude bias of its
/// patch): only the sub-module `replicated(&module)` returns has its
/// gradients summed over the domain; every other parameter's gradient is
/// already its slice's whole gradient and is left alone there. Then every
/// parameter is averaged over the replicas group (which joins the ranks
/// holding the same slice in every replica, so shapes agree) and stepped.
///
/// # Errors
/// As [`hybrid_step`]; [`Error::ModuleMismatch`] on every rank of the
/// domain when the replicated sub-module differs between its ranks.
///
/// # Example
/// ```
/// use burn_core as burn;
/// use burn::module::{Module, Param};
/// use burn_nn::{Linear, LinearConfig};
/// use burn_optim::{GradientsParams, ModuleOptimizer, SgdConfig};
/// use burn_tensor::{Device, Tensor};
/// use ruda_comm::LocalWorld;
/// use ruda_tensor::{Group, HybridGrid};
/// use ruda_tensor::ddp::{GradientReduction, hybrid_step_with};
///
/// #[derive(Module, Debug)]
/// struct Net {
///     shared: Linear,              // replicated over the domain
///     local: Param<Tensor<1>>,     // this rank's slice of a per-column bias
/// }
///
/// LocalWorld::new(4).run(|comm| {
///     let grid = HybridGrid::new(comm, 2, 1, 2)?;
///     let device = Device::flex().autodiff();
///     let cols = 1 + grid.domain().azimuth_rank(); // uneven slices: 1 and 2 columns
///     let net = Net {
///         shared: LinearConfig::new(1, 1).init(&device),
///         local: Param::from_tensor(Tensor::zeros([cols], &device)),
///     };
///     let net = ruda_tensor::ddp::broadcast_module(grid.replicas(), net, 0)?;
///     let net = Net { shared: ruda_tensor::ddp::broadcast_module(grid.world(), net.shared, 0)?, ..net };
///     let x = Tensor::<2>::ones([cols, 1], &device);
///     let y = net.shared.forward(x).reshape([cols]) + net.local.val();
///     let grads = GradientsParams::from_grads(y.sum().backward(), &net);
///     let mut optim: ModuleOptimizer = SgdConfig::new().init();
///     let how = GradientReduction::WeightedMean { samples: 1 };
///     hybrid_step_with(&grid, &mut optim, 0.1, net, grads, how, |n| &n.shared).map(|_| ())
/// }).unwrap();
/// ```
pub fn hybrid_step_with<M: Module, R: Module, G: Group>(
    grid: &HybridGrid<G>,
    optim: &mut ModuleOptimizer,
    lr: LearningRate,
    module: M,
    grads: GradientsParams,
    reduction: GradientReduction,
    replicated: impl FnOnce(&M) -> &R,
) -> Result<M, Error> {
    let grads = all_reduce_gradients(
        grid.domain().world(),
        replicated(&module),
        grads,
        GradientReduction::Sum,
    )?;
    step(grid.replicas(), optim, lr, module, grads, reduction)
}

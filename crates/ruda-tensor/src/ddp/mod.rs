//! Data-parallel training of a Burn [`Module`](burn_core::module::Module):
//! every rank holds a replica of the model and computes gradients on its
//! own shard of the batch.
//!
//! 1. [`broadcast_module`] once at the start: every replica takes one
//!    rank's parameters;
//!    [`check_replicas`] confirms it (or, after loading a checkpoint on
//!    every rank, that the ranks loaded the same one).
//! 2. After each `backward()`, [`all_reduce_gradients`] with
//!    [`GradientReduction::WeightedMean`] (each rank's loss a mean over its
//!    shard, shards of any size) combines every parameter's gradient over
//!    the group: each gradient of 1 MiB or more on its own, in place, the
//!    smaller ones packed into buckets of at most 25 MiB (one collective
//!    per bucket, not per parameter). Then every rank's optimizer makes
//!    the same step.
//! 3. Buffers — values without a gradient, such as a `BatchNorm`'s running
//!    statistics, which each replica updates from its own shard — are made
//!    equal again after the step: [`sync_buffers`] (rank 0's by default,
//!    as PyTorch's DDP broadcasts them; or their mean).
//!
//! [`step`] does 2 and 3 in one call (reduce, optimizer step, buffers
//! from rank 0), so a model with running statistics keeps bit-identical
//! replicas by default. [`SyncBatchNorm`] instead normalizes with the
//! statistics of the global batch (every rank's shard), with exact
//! gradients: the model then equals the serial one on the whole batch.
//!
//! **Communication during the backward pass**: [`Overlap`] in place of
//! step 2 reduces each bucket as soon as the backward pass has finished
//! its gradients, while it goes on with the earlier layers; the result is
//! the same bits for the same local gradients, and the local gradients
//! are the same bits unless a tensor of the model has three or more uses
//! (see [`Overlap`]); [`Overlap::report`] says how much was hidden.
//!
//! **Sharded optimizer state** (ZeRO stages 1 and 2): [`Sharded::step`]
//! in place of [`step`] gives each parameter one owner rank, which alone
//! steps it and holds its optimizer state (1/n of Adam's per rank), and
//! makes the same steps as [`step`] bit for bit;
//! [`save_sharded_checkpoint`] writes one file per rank and
//! [`load_sharded_checkpoint`] reads them on any number of ranks.
//!
//! [`save_checkpoint`] writes the model and the optimizer state from one
//! rank; [`load_checkpoint`] reads them on every rank into fresh replicas
//! and checks them, so a run stopped after step k and resumed equals the
//! uninterrupted run bit for bit.
//!
//! **Hybrid parallelism** (replicas × polar × azimuth): on a
//! [`HybridGrid`](crate::HybridGrid), [`hybrid_step`] sums the gradients
//! of a domain-decomposed model over each replica's domain, then averages
//! them over the replicas; [`hybrid_step_with`] leaves parameters sharded
//! over the domain out of the domain's sum.
//!
//! **Gradient accumulation** (PyTorch's `no_sync`): run several
//! micro-batches' backward passes without communicating, sum their
//! gradients locally (`burn_optim::GradientsAccumulator`), and reduce once:
//! with each micro-batch's mean loss scaled by its share of the shard
//! (`micro-batch size / shard size`), the sum is the gradient of the mean
//! over the shard, and `WeightedMean { samples: shard size }` makes it the
//! global one.
//!
//! Every call first checks that the ranks agree (the same call, the same
//! module structure, the same reduction or root) and otherwise returns a
//! typed error on every rank.
//!
//! ```
//! use burn_core::module::Module;
//! use burn_nn::{Linear, LinearConfig};
//! use burn_optim::{GradientsParams, SgdConfig};
//! use burn_tensor::{Device, Tensor};
//! use ruda_comm::LocalWorld;
//! use ruda_tensor::{Group, HostCollective};
//! use ruda_tensor::ddp::{GradientReduction, all_reduce_gradients, broadcast_module};
//!
//! let models = LocalWorld::new(2).run(|comm| {
//!     let world = HostCollective::new(comm);
//!     let device = Device::flex().autodiff();
//!     let model: Linear = LinearConfig::new(3, 1).init(&device);
//!     let mut model = broadcast_module(&world, model, 0)?; // replicas start equal
//!     let mut optim = SgdConfig::new().init();
//!     let samples = 2 + world.rank();                     // uneven shards: 2 and 3 rows
//!     let x = Tensor::<2>::ones([samples, 3], &device);
//!     let loss = model.forward(x).mean();
//!     let grads = GradientsParams::from_grads(loss.backward(), &model);
//!     let reduction = GradientReduction::WeightedMean { samples };
//!     let grads = all_reduce_gradients(&world, &model, grads, reduction)?;
//!     model = optim.step(0.1, model, grads);
//!     Ok::<_, ruda_tensor::Error>(model.weight.val().into_data().try_to_vec::<f32>().unwrap())
//! }).unwrap();
//! assert_eq!(models[0], models[1]); // the replicas stay equal
//! ```

mod broadcast;
mod buckets;
mod buffers;
mod checkpoint;
mod gradients;
mod hybrid;
mod outlast;
mod overlap;
mod replicas;
mod running;
mod sampler;
mod sharded;
mod sharded_checkpoint;
mod step;
mod structure;
mod sync_batch_norm;
mod tap;
mod zeros;

pub use broadcast::broadcast_module;
pub use buckets::Buckets;
pub use buffers::{BufferSync, sync_buffers};
pub use checkpoint::{CHECKPOINT_FILE, load_checkpoint, save_checkpoint};
pub use gradients::{GradientReduction, all_reduce_gradients, all_reduce_gradients_with};
pub use hybrid::{hybrid_step, hybrid_step_with};
pub use overlap::{Attached, Overlap, OverlapReport};
pub use replicas::check_replicas;
pub use sampler::{DistributedSampler, Tail};
pub use sharded::{Sharded, ZeroStage};
pub use sharded_checkpoint::{
    SHARDED_MODEL_FILE, load_sharded_checkpoint, save_sharded_checkpoint,
};
pub use step::{step, step_with};
pub use sync_batch_norm::{SyncBatchNorm, SyncBatchNormConfig};
pub use zeros::Zeros;

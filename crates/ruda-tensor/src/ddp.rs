//! Data-parallel training of a Burn [`Module`]: every rank holds a replica
//! of the model and computes gradients on its own shard of the batch; after
//! `backward()`, [`all_reduce_gradients`] sums (or averages) every
//! parameter's gradient over the group in **one collective per element
//! type**, by packing all of them into one flat buffer (a bucket), rather
//! than one collective per parameter. Then every rank's optimizer makes the
//! same step.
//!
//! ```
//! use burn_core::module::Module;
//! use burn_nn::{Linear, LinearConfig};
//! use burn_optim::{GradientsParams, SgdConfig};
//! use burn_tensor::{Device, Tensor};
//! use ruda_comm::LocalWorld;
//! use ruda_tensor::{HostCollective, ddp::{GradientReduction, all_reduce_gradients}};
//!
//! let models = LocalWorld::new(2).run(|comm| {
//!     let world = HostCollective::new(comm);
//!     let device = Device::flex().autodiff();
//!     // Replicas must start equal; here every weight starts at zero.
//!     let mut model: Linear = LinearConfig::new(3, 1).init(&device);
//!     model = model.map(&mut ruda_tensor::ddp::Zeros);
//!     let mut optim = SgdConfig::new().init();
//!     let x = Tensor::<2>::ones([4, 3], &device);   // this rank's shard
//!     let loss = model.forward(x).sum();
//!     let grads = GradientsParams::from_grads(loss.backward(), &model);
//!     let grads = all_reduce_gradients(&world, &model, grads, GradientReduction::Mean)?;
//!     model = optim.step(0.1, model, grads);
//!     Ok::<_, ruda_tensor::Error>(model.weight.val().into_data().try_to_vec::<f32>().unwrap())
//! }).unwrap();
//! assert_eq!(models[0], models[1]); // the replicas stay equal
//! ```

use alloc::boxed::Box;
use alloc::vec::Vec;

use burn_core::module::{Module, ModuleMapper, ModuleVisitor, Param, ParamId};
use burn_optim::GradientsParams;
use burn_tensor::{DType, Tensor};

use crate::error::Error;
use crate::group::Group;
use crate::methods::TensorExt;

/// How gradients combine across ranks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GradientReduction {
    /// The sum (each rank's loss is already its share of the global loss,
    /// e.g. a sum over its shard divided by the global batch size).
    Sum,
    /// The mean over ranks (each rank's loss is a mean over an equal shard).
    Mean,
}

/// Puts a flattened gradient back under its parameter, in its shape.
type Restore = Box<dyn FnOnce(Tensor<1>, &mut GradientsParams)>;

/// One parameter's gradient, flattened, and how to put it back.
struct Item {
    dtype: DType,
    flat: Tensor<1>,
    restore: Restore,
}

/// Takes every parameter's gradient out of `grads`, in the module's order.
struct Collect<'a> {
    grads: &'a mut GradientsParams,
    items: Vec<Item>,
}

impl ModuleVisitor for Collect<'_> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        let id: ParamId = param.id;
        let Some(g) = self.grads.remove::<D>(id) else {
            return;
        };
        let dims = g.dims();
        let len = dims.iter().product::<usize>();
        let dtype = g.dtype();
        self.items.push(Item {
            dtype,
            flat: g.reshape([len]),
            restore: Box::new(move |t: Tensor<1>, grads: &mut GradientsParams| {
                grads.register::<D>(id, t.reshape(dims));
            }),
        });
    }
}

/// Sum or average every parameter gradient of `module` in `grads` over
/// `group`, one collective per element type (all of a dtype's gradients
/// packed into one buffer, in the module's parameter order), and return
/// them ready for the optimizer. Every rank must call it with the same
/// module structure; the result is the same bits on every rank.
///
/// # Errors
/// The group's errors; [`Error::ShapeMismatch`] on every rank when the
/// ranks' gradients differ in size (different models, or a parameter with
/// a gradient on some ranks only).
pub fn all_reduce_gradients<M: Module, G: Group>(
    group: &G,
    module: &M,
    mut grads: GradientsParams,
    reduction: GradientReduction,
) -> Result<GradientsParams, Error> {
    let mut visitor = Collect {
        grads: &mut grads,
        items: Vec::new(),
    };
    module.visit(&mut visitor);
    let mut items = visitor.items;
    // Buckets by dtype, in order of first appearance (the same on every rank).
    let mut dtypes: Vec<DType> = Vec::new();
    for it in &items {
        if !dtypes.contains(&it.dtype) {
            dtypes.push(it.dtype);
        }
    }
    let n = group.size() as f64;
    for dtype in dtypes {
        let (bucket, rest): (Vec<Item>, Vec<Item>) =
            items.into_iter().partition(|it| it.dtype == dtype);
        items = rest;
        let lens: Vec<usize> = bucket.iter().map(|it| it.flat.dims()[0]).collect();
        let (flats, restores): (Vec<Tensor<1>>, Vec<_>) =
            bucket.into_iter().map(|it| (it.flat, it.restore)).unzip();
        let mut summed = Tensor::cat(flats, 0).all_reduce(group)?;
        if reduction == GradientReduction::Mean {
            summed = summed.div_scalar(n);
        }
        let mut start = 0;
        for (restore, len) in restores.into_iter().zip(lens) {
            restore(summed.clone().narrow(0, start, len), &mut grads);
            start += len;
        }
    }
    Ok(grads)
}

/// A [`ModuleMapper`] that sets every float parameter to zeros (keeping its
/// id and shape), e.g. to start replicas equal in examples.
#[derive(Clone, Copy, Debug, Default)]
pub struct Zeros;

impl ModuleMapper for Zeros {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
        let id = param.id;
        let t = param.val();
        let zeros = Tensor::<D>::zeros(t.dims(), (&t.device(), t.dtype()));
        Param::initialized(id, zeros.detach().require_grad())
    }
}

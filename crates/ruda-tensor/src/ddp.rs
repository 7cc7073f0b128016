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
use burn_tensor::{DType, Device, Tensor};

use crate::error::{Error, ModuleProblem, TensorOp};
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

/// Marks a DDP structure record ("rudaDDP1").
const MAGIC: i64 = 0x7275_6461_4444_5031;

/// Puts a flattened gradient back under its parameter, in its shape.
type Restore = Box<dyn FnOnce(Tensor<1>, &mut GradientsParams)>;

/// One float parameter of the module, in visiting order: its size and
/// dtype, its gradient on this rank (flattened) if it has one, a zero
/// gradient's device, and how to put a reduced gradient back.
struct Entry {
    numel: usize,
    dims_hash: i64,
    /// The parameter's dtype (what the replicas must agree on).
    param_dtype: DType,
    /// The gradient's dtype, or the parameter's without one (the bucket).
    dtype: DType,
    device: Device,
    grad: Option<Tensor<1>>,
    restore: Restore,
}

impl Entry {
    /// The words this parameter contributes to the structure exchange:
    /// dtype and whether this rank has a gradient, element count, shape.
    fn words(&self) -> [i64; 3] {
        let code = crate::agreement::dtype_code(self.param_dtype);
        [
            code * 2 + i64::from(self.grad.is_some()),
            self.numel as i64,
            self.dims_hash,
        ]
    }
}

/// Takes every float parameter's gradient out of `grads`, in the module's
/// order, and records the parameters without one.
struct Collect<'a> {
    grads: &'a mut GradientsParams,
    entries: Vec<Entry>,
}

impl ModuleVisitor for Collect<'_> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        let id: ParamId = param.id;
        let value = param.val();
        let dims = value.dims();
        let numel = dims.iter().product::<usize>();
        let grad = self.grads.remove::<D>(id);
        let param_dtype = value.dtype();
        let (dtype, device) = match &grad {
            Some(g) => (g.dtype(), g.device()),
            None => (value.dtype(), value.inner().device()),
        };
        self.entries.push(Entry {
            numel,
            dims_hash: crate::shape_hash::sizes(&dims),
            param_dtype,
            dtype,
            device,
            grad: grad.map(|g| crate::reshape(g, [numel])),
            restore: Box::new(move |t: Tensor<1>, grads: &mut GradientsParams| {
                grads.register::<D>(id, crate::reshape(t, dims));
            }),
        });
    }
}

/// Check that every rank's module has the same float parameters (count,
/// then each one's dtype, size and shape, in order) and return, for each
/// parameter, whether some rank has a gradient for it.
fn agree_structure<G: Group>(group: &G, entries: &[Entry]) -> Result<Vec<bool>, Error> {
    let op = TensorOp::DdpGradients;
    let me = group.rank();
    let counts = group.exchange_words(&[MAGIC, entries.len() as i64])?;
    for (r, w) in counts.chunks(2).enumerate() {
        if w[0] != MAGIC {
            // A peer in another call that also exchanges two words.
            return Err(Error::Record {
                op,
                rank: me,
                offender: r,
                what: "record marker",
                code: w[0],
            });
        }
    }
    let expected = counts[1] as usize;
    for (r, w) in counts.chunks(2).enumerate() {
        if w[1] as usize != expected {
            return Err(Error::ModuleMismatch {
                op,
                rank: me,
                offender: r,
                reference: 0,
                problem: ModuleProblem::ParamCount {
                    expected,
                    got: w[1] as usize,
                },
            });
        }
    }
    let words: Vec<i64> = entries.iter().flat_map(|e| e.words()).collect();
    let all = group.exchange_words(&words)?;
    let per_rank = words.len();
    let reference = &all[..per_rank];
    let mut used = alloc::vec![false; entries.len()];
    for (r, theirs) in all.chunks(per_rank.max(1)).enumerate().take(group.size()) {
        for (i, (w, w0)) in theirs.chunks(3).zip(reference.chunks(3)).enumerate() {
            if w[0] / 2 != w0[0] / 2 || w[1] != w0[1] || w[2] != w0[2] {
                let view = |w: &[i64]| (w[1] as usize, crate::agreement::dtype_of(w[0] / 2));
                return Err(Error::ModuleMismatch {
                    op,
                    rank: me,
                    offender: r,
                    reference: 0,
                    problem: ModuleProblem::Param {
                        index: i,
                        expected: view(w0),
                        got: view(w),
                    },
                });
            }
            used[i] |= w[0] % 2 == 1;
        }
    }
    Ok(used)
}

/// Sum or average every float parameter's gradient of `module` over
/// `group`, one collective per element type (all of a dtype's gradients
/// packed into one buffer, in the module's parameter order), and return
/// them ready for the optimizer; the result is the same bits on every rank.
///
/// A parameter without a gradient on some ranks (unused by their loss)
/// counts as a zero gradient there, as in PyTorch's DDP; a parameter
/// without a gradient on every rank stays without one. Before any data
/// moves, the ranks check that their modules match: the same number of
/// float parameters, each with the same dtype and shape, in the same order.
///
/// # Errors
/// The group's errors; [`Error::ModuleMismatch`] on every rank when the
/// replicas' modules differ (naming the first differing parameter).
pub fn all_reduce_gradients<M: Module, G: Group>(
    group: &G,
    module: &M,
    grads: GradientsParams,
    reduction: GradientReduction,
) -> Result<GradientsParams, Error> {
    reduce_gradients(group, module, grads, reduction)
        .map_err(|e| e.in_named_call(TensorOp::DdpGradients.name()))
}

/// [`all_reduce_gradients`], with errors as its steps report them.
fn reduce_gradients<M: Module, G: Group>(
    group: &G,
    module: &M,
    mut grads: GradientsParams,
    reduction: GradientReduction,
) -> Result<GradientsParams, Error> {
    let mut visitor = Collect {
        grads: &mut grads,
        entries: Vec::new(),
    };
    module.visit(&mut visitor);
    let entries = visitor.entries;
    let used = agree_structure(group, &entries)?;
    // Buckets by dtype, in order of first appearance among the parameters
    // some rank has a gradient for (the same on every rank).
    let mut dtypes: Vec<DType> = Vec::new();
    for (e, &u) in entries.iter().zip(&used) {
        if u && !dtypes.contains(&e.dtype) {
            dtypes.push(e.dtype);
        }
    }
    let mut items: Vec<Entry> = entries
        .into_iter()
        .zip(used)
        .filter_map(|(e, u)| u.then_some(e))
        .collect();
    let n = group.size() as f64;
    for dtype in dtypes {
        let (bucket, rest): (Vec<Entry>, Vec<Entry>) =
            items.into_iter().partition(|e| e.dtype == dtype);
        items = rest;
        let lens: Vec<usize> = bucket.iter().map(|e| e.numel).collect();
        let (flats, restores): (Vec<Tensor<1>>, Vec<_>) = bucket
            .into_iter()
            .map(|e| {
                let flat = e
                    .grad
                    .unwrap_or_else(|| Tensor::zeros([e.numel], (&e.device, e.dtype)));
                (flat, e.restore)
            })
            .unzip();
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

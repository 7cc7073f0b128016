//! [`all_reduce_gradients`]: every parameter's gradient reduced over the
//! replicas: parameters of 1 MiB or more each in place, smaller ones
//! packed into buckets.

use alloc::boxed::Box;
use alloc::vec::Vec;

use burn_core::module::{Module, ModuleVisitor, Param};
use burn_optim::GradientsParams;
use burn_tensor::{DType, Tensor};

use super::buckets::Buckets;
use super::structure::{self, Entry, Header};
use crate::error::{Error, ModuleProblem, TensorOp};
use crate::group::Group;
use crate::methods::TensorExt;

/// How gradients combine across ranks. Every rank must pass the same kind
/// (a rank that sums while another averages is
/// [`Error::ModuleMismatch`] with [`ModuleProblem::Reduction`] on every
/// rank, never a silently wrong step).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GradientReduction {
    /// The mean over every sample of every rank, when each rank's loss is
    /// the mean over its own shard of `samples` samples: rank r's gradient
    /// counts with weight `samples_r / Σ samples`, so uneven shards (and
    /// empty ones) give the gradient of the mean loss over the global batch,
    /// as one process would compute it (up to floating-point rounding: the
    /// tests hold it to 1e-13 relative in f64). The sample counts
    /// travel in the agreement that precedes the reduction (no extra
    /// collective). A rank with `samples: 0` contributes nothing (its
    /// gradient, even NaN from a mean over no samples, is not read).
    WeightedMean {
        /// This rank's number of samples in the step.
        samples: usize,
    },
    /// The sum (each rank's loss is already its share of the global loss,
    /// e.g. a sum over its shard divided by the global batch size).
    Sum,
    /// The plain mean over ranks: right only when every rank's loss is a
    /// mean over a shard of the same size; with uneven shards use
    /// [`GradientReduction::WeightedMean`]. Each rank's gradient is scaled
    /// by `1 / ranks` before the sum (in at least f32, rounded once to the
    /// parameter's dtype), as PyTorch's DDP divides before its all-reduce: a
    /// half-precision sum whose mean fits never overflows on the way.
    Mean,
}

impl GradientReduction {
    /// The words this rank's reduction contributes to the agreement.
    pub(super) fn words(self) -> [i64; 2] {
        match self {
            GradientReduction::Sum => [0, 0],
            GradientReduction::Mean => [1, 0],
            // Sample counts beyond i64::MAX cannot occur in a real batch.
            GradientReduction::WeightedMean { samples } => [2, samples as i64],
        }
    }

    /// The name of the kind a code stands for, for messages.
    fn name_of(code: i64) -> &'static str {
        match code {
            0 => "sum",
            1 => "mean",
            2 => "weighted mean",
            _ => "unknown",
        }
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
        let id = param.id;
        let grad = self.grads.remove::<D>(id);
        let value = param.val();
        let mut entry = Entry::new::<D>(id, &value, None);
        let dims = value.dims();
        // Flattened in its own dtype: `prepare` scales it first and casts
        // it to the parameter's after (an f32 gradient of an f16 weight may
        // not fit f16 until it is scaled).
        if let Some(g) = grad {
            entry.own_dtype = g.dtype();
            entry.data = Some(crate::reshape(g, [entry.numel]));
        }
        entry.restore = Some(Box::new(
            move |t: Tensor<1>, grads: &mut GradientsParams| {
                grads.register::<D>(id, crate::reshape(t, dims));
            },
        ));
        self.entries.push(entry);
    }
}

/// Sum or average every float parameter's gradient of `module` over
/// `group`, and return
/// them ready for the optimizer; the result is the same bits on every rank.
///
/// How the gradients travel: each of 1 MiB or more on its own, reduced in
/// place (no copy: packing a large gradient would cost more than the
/// collective), the smaller ones of each element type concatenated, in the
/// module's order, into buckets of at most 25 MiB (one collective each, so
/// packing never holds a second copy of a large model's gradients): the
/// default [`Buckets`]; [`all_reduce_gradients_with`] takes others.
///
/// Lead with [`GradientReduction::WeightedMean`] when each rank's loss is a
/// mean over its shard: it is exact for uneven shards. A parameter without
/// a gradient on some ranks (unused by their loss) counts as a zero
/// gradient there, as in PyTorch's DDP; a parameter without a gradient on
/// every rank stays without one. Before any data moves, the ranks check
/// that their calls and modules match: the same kind of reduction, the same
/// number of float parameters, each with the same dtype and shape, in the
/// same order.
///
/// # Errors
/// The group's errors; [`Error::ModuleMismatch`] on every rank when the
/// replicas' modules (or reductions) differ, naming the first difference;
/// [`Error::EmptyBatch`] on every rank for a weighted mean over no samples.
///
/// # Example
/// ```
/// use burn_core::module::Module;
/// use burn_nn::{Linear, LinearConfig};
/// use burn_optim::GradientsParams;
/// use burn_tensor::{Device, Tensor};
/// use ruda_comm::LocalWorld;
/// use ruda_tensor::{Group, HostCollective};
/// use ruda_tensor::ddp::{GradientReduction, Zeros, all_reduce_gradients};
///
/// let grads = LocalWorld::new(2).run(|comm| {
///     let world = HostCollective::new(comm);
///     let device = Device::flex().autodiff();
///     let model: Linear = LinearConfig::new(2, 1).init(&device).map(&mut Zeros);
///     // Uneven shards: rank 0 has 1 sample of ones, rank 1 has 3 of threes.
///     let samples = 1 + 2 * world.rank();
///     let x = Tensor::<2>::ones([samples, 2], &device).mul_scalar(samples as f64);
///     let loss = model.forward(x).mean();
///     let grads = GradientsParams::from_grads(loss.backward(), &model);
///     let reduction = GradientReduction::WeightedMean { samples };
///     let grads = all_reduce_gradients(&world, &model, grads, reduction)?;
///     let w = grads.get::<2>(model.weight.id).unwrap();
///     Ok::<_, ruda_tensor::Error>(w.into_data().try_to_vec::<f32>().unwrap())
/// }).unwrap();
/// // The mean input over all four samples [1, 3, 3, 3] (a plain mean of the
/// // ranks' gradients would give 2).
/// assert_eq!(grads[0], vec![2.5, 2.5]);
/// assert_eq!(grads[1], grads[0]);
/// ```
pub fn all_reduce_gradients<M: Module, G: Group>(
    group: &G,
    module: &M,
    grads: GradientsParams,
    reduction: GradientReduction,
) -> Result<GradientsParams, Error> {
    all_reduce_gradients_with(group, module, grads, reduction, Buckets::default())
}

/// [`all_reduce_gradients`] with gradients grouped into collectives as
/// `buckets` says.
///
/// # Errors
/// As [`all_reduce_gradients`]; [`Error::ModuleMismatch`] with
/// [`ModuleProblem::Buckets`] on every rank when the ranks' `buckets`
/// differ.
///
/// # Example
/// ```
/// use burn_core::module::Module;
/// use burn_nn::{Linear, LinearConfig};
/// use burn_optim::GradientsParams;
/// use burn_tensor::{Device, Tensor};
/// use ruda_comm::LocalWorld;
/// use ruda_tensor::HostCollective;
/// use ruda_tensor::ddp::{Buckets, GradientReduction, Zeros, all_reduce_gradients_with};
///
/// LocalWorld::new(2).run(|comm| {
///     let world = HostCollective::new(comm);
///     let device = Device::flex().autodiff();
///     let model: Linear = LinearConfig::new(2, 1).init(&device).map(&mut Zeros);
///     let loss = model.forward(Tensor::<2>::ones([3, 2], &device)).mean();
///     let grads = GradientsParams::from_grads(loss.backward(), &model);
///     // Every gradient in a bucket of its own.
///     let buckets = Buckets { alone_bytes: usize::MAX, bucket_bytes: 0 };
///     let how = GradientReduction::WeightedMean { samples: 3 };
///     all_reduce_gradients_with(&world, &model, grads, how, buckets).map(|_| ())
/// }).unwrap();
/// ```
pub fn all_reduce_gradients_with<M: Module, G: Group>(
    group: &G,
    module: &M,
    grads: GradientsParams,
    reduction: GradientReduction,
    buckets: Buckets,
) -> Result<GradientsParams, Error> {
    reduce_gradients(group, module, grads, reduction, buckets)
        .map_err(|e| e.in_named_call(TensorOp::DdpGradients.name()))
}

/// [`all_reduce_gradients_with`], with errors as its steps report them.
fn reduce_gradients<M: Module, G: Group>(
    group: &G,
    module: &M,
    grads: GradientsParams,
    reduction: GradientReduction,
    buckets: Buckets,
) -> Result<GradientsParams, Error> {
    let Prepared {
        entries,
        used,
        mut grads,
        ..
    } = prepare(
        group,
        module,
        grads,
        reduction,
        buckets,
        TensorOp::DdpGradients,
        0,
    )?;
    structure::per_bucket(
        entries,
        &used,
        buckets,
        |bucket| bucket.all_reduce(group),
        |entry, reduced| restore(entry, reduced, &mut grads),
    )?;
    Ok(grads)
}

/// Every float parameter's gradient taken out of the caller's
/// `GradientsParams`, agreed on by the ranks and scaled for the sum.
pub(super) struct Prepared {
    /// Every float parameter, in the module's order, with this rank's
    /// scaled gradient (if any) in the parameter's dtype.
    pub entries: Vec<Entry>,
    /// Whether some rank has a gradient for each entry.
    pub used: Vec<bool>,
    /// What is left of the caller's gradients (no float parameter's).
    pub grads: GradientsParams,
    /// Every rank's `variant` word, in rank order.
    pub variants: Vec<i64>,
}

/// Take every float parameter's gradient out of `grads`, check that the
/// ranks agree on the call (`op`, the reduction, `buckets`, and a
/// `variant` word the caller checks in [`Prepared::variants`]) and on the
/// module's structure, and scale each gradient by this rank's weight in the
/// sum (1/ranks for a mean, samples/total for a weighted mean).
///
/// # Errors
/// As [`all_reduce_gradients_with`].
pub(super) fn prepare<M: Module, G: Group>(
    group: &G,
    module: &M,
    mut grads: GradientsParams,
    reduction: GradientReduction,
    buckets: Buckets,
    op: TensorOp,
    variant: i64,
) -> Result<Prepared, Error> {
    let mut visitor = Collect {
        grads: &mut grads,
        entries: Vec::new(),
    };
    module.visit(&mut visitor);
    let mut entries = visitor.entries;
    if let GradientReduction::WeightedMean { samples: 0 } = reduction {
        // Nothing of this rank's counts, not even a NaN from a mean over no
        // samples; and a parameter only empty ranks have a gradient for
        // stays without one.
        for e in &mut entries {
            e.data = None;
        }
    }
    let header = Header {
        op,
        words: [reduction.words()[0], reduction.words()[1], variant],
        buckets,
    };
    let agreed = structure::agree(group, header, &entries)?;
    let scale = agreed_scale(group, op, reduction, &agreed)?;
    for e in &mut entries {
        let dtype = e.dtype;
        e.data = e.data.take().map(|g| for_the_sum(g, scale, dtype));
    }
    Ok(Prepared {
        entries,
        variants: agreed.headers.iter().map(|w| w[2]).collect(),
        used: agreed.used,
        grads,
    })
}

/// The factor this rank's gradients carry into the sum under `reduction`
/// (`None`: unscaled), once the ranks agreed on the call: 1/ranks for a
/// mean, samples/total for a weighted mean.
///
/// # Errors
/// [`Error::ModuleMismatch`] with [`ModuleProblem::Reduction`] when a rank
/// reduces another way; [`Error::EmptyBatch`] for a weighted mean over no
/// samples.
pub(super) fn agreed_scale<G: Group>(
    group: &G,
    op: TensorOp,
    reduction: GradientReduction,
    agreed: &structure::Agreed,
) -> Result<Option<f64>, Error> {
    let me = group.rank();
    let kind = agreed.headers[0][0];
    if let Some((r, w)) = agreed
        .headers
        .iter()
        .enumerate()
        .find(|(_, w)| w[0] != kind)
    {
        return Err(Error::ModuleMismatch {
            op,
            rank: me,
            offender: r,
            reference: 0,
            problem: ModuleProblem::Reduction {
                expected: GradientReduction::name_of(kind),
                got: GradientReduction::name_of(w[0]),
            },
        });
    }
    Ok(match reduction {
        GradientReduction::Sum => None,
        // Scaled before the sum, not divided after: two f16 gradients of
        // 40000 sum to inf, their halves to 40000.
        GradientReduction::Mean => Some(1.0 / group.size() as f64),
        GradientReduction::WeightedMean { samples } => {
            let total = agreed
                .headers
                .iter()
                .try_fold(0u64, |a, w| a.checked_add(w[1] as u64))
                .unwrap_or(u64::MAX);
            if total == 0 {
                return Err(Error::EmptyBatch { op, rank: me });
            }
            Some(samples as f64 / total as f64)
        }
    })
}

/// This rank's gradient `g` ready for the sum: scaled by `scale` (see
/// [`agreed_scale`]) and cast to the parameter's dtype `param`.
pub(super) fn for_the_sum(g: Tensor<1>, scale: Option<f64>, param: DType) -> Tensor<1> {
    let g = match scale.filter(|&s| s != 1.0) {
        Some(s) => scaled(g, s, param),
        None => g,
    };
    if g.dtype() == param { g } else { g.cast(param) }
}

/// Register `reduced` (flattened, in the parameter's dtype) as `entry`'s
/// gradient in `grads`, back in the dtype this rank's gradient had.
pub(super) fn restore(entry: Entry, reduced: Tensor<1>, grads: &mut GradientsParams) {
    if let Some(restore) = entry.restore {
        let reduced = if reduced.dtype() == entry.own_dtype {
            reduced
        } else {
            reduced.cast(entry.own_dtype)
        };
        restore(reduced, grads);
    }
}

/// `g × s` for a parameter of dtype `param`, computed in the wider of the
/// two dtypes and at least f32 (a weight such as 1/3 or 1/20000 held in
/// f16 or bf16 would bias every step; an f32 gradient of an f16 weight may
/// not fit f16 until it is scaled), so that the caller's cast to the
/// parameter's dtype is the only rounding.
fn scaled(g: Tensor<1>, s: f64, param: DType) -> Tensor<1> {
    let work = if g.dtype() == DType::F64 || param == DType::F64 {
        DType::F64
    } else {
        DType::F32
    };
    let g = if g.dtype() == work { g } else { g.cast(work) };
    g.mul_scalar(s)
}

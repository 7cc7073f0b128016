//! Reductions other than the sum ([`ruda_comm::ReduceOp`]) on tensors:
//! [`crate::TensorExt::all_reduce_with`] and
//! [`crate::TensorExt::reduce_scatter_with`], with their gradients.
//!
//! | reduction | forward | gradient of rank `r`'s input |
//! |---|---|---|
//! | `Sum` | sum | the sum of every rank's output gradient (the all-reduce) |
//! | `Mean` | mean | that sum divided by the group size (its own adjoint) |
//! | `Max`, `Min` | the extremum | that sum, where `r` holds the extremum, divided by the number of ranks holding it (a tie shares it equally); zero elsewhere |
//! | `Prod` | product | refused under autodiff ([`Error::NotDifferentiable`]) |
//!
//! `Max`/`Min` follow the communicator for NaN (the local transport's
//! IEEE `maxNum`/`minNum`: a NaN loses to a number); an element whose
//! result is NaN gets no gradient.

use burn_backend::tensor::FloatTensor;
use burn_backend::{Backend, DType};
use burn_tensor::Tensor;
use ruda_comm::ReduceOp;

use crate::agreement::{self, Facts, Problem, reduce_op_code, reduce_op_of};
use crate::backend::DistBackend;
use crate::error::{Error, TensorOp};
use crate::group::Group;
use crate::linear_op::{LinearOp, Role};
use crate::ops::{AllReduce, apply, balanced, resolve};
use crate::route::{routed, unsupported};

/// The chunk `(dim, start, len)` of `shape` this rank keeps when the call
/// scatters along `scatter`, or the problem to report.
fn chunk(
    scatter: Option<isize>,
    shape: &[usize],
    n: usize,
    me: usize,
) -> Result<Option<(usize, usize, usize)>, Problem> {
    let Some(dim) = scatter else {
        return Ok(None);
    };
    let dim = resolve(dim, shape.len())?;
    let sizes = balanced(shape[dim], n)?;
    let start = sizes[..me].iter().sum();
    Ok(Some((dim, start, sizes[me])))
}

/// Agreement of a reduction with `reduce`: the same operator, shape and
/// dtype everywhere, the same tracking, and (for a reduce-scatter) a
/// dimension every rank gets a chunk of. Returns this rank's chunk.
fn agree_reduce<G: Group>(
    g: &G,
    role: Role,
    reduce: ReduceOp,
    shape: &[usize],
    dtype: DType,
    tracked: bool,
    scatter: Option<isize>,
) -> Result<Option<(usize, usize, usize)>, Error> {
    let mut f = Facts::new(role.op, dtype, shape);
    f.backward = role.backward;
    f.tracked = Some(tracked);
    f.param = reduce_op_code(reduce);
    let mine = chunk(scatter, shape, g.size(), g.rank());
    f.problem = if !agreement::summable(dtype) {
        Some(Problem::UnsupportedDType)
    } else if reduce == ReduceOp::Prod && tracked {
        Some(Problem::NotDifferentiable)
    } else {
        mine.err()
    };
    let (me, op) = (g.rank(), role.op);
    agreement::agree(g, f, |offender, got, expected| Error::ReduceOpMismatch {
        op,
        rank: me,
        offender,
        reference: 0,
        expected: reduce_op_of(expected).unwrap_or(ReduceOp::Sum),
        got: reduce_op_of(got).unwrap_or(ReduceOp::Sum),
    })?;
    Ok(mine.ok().flatten())
}

/// Agreement, then the reduction of `x`'s values (no gradient path):
/// `tracked` is whether the caller's input is tracked.
fn reduce_values<B: Backend, G: Group>(
    g: &G,
    role: Role,
    reduce: ReduceOp,
    x: FloatTensor<B>,
    tracked: bool,
    scatter: Option<isize>,
) -> Result<FloatTensor<B>, Error> {
    use burn_backend::TensorMetadata;
    agree_reduce(
        g,
        role,
        reduce,
        &x.shape().to_vec(),
        x.dtype(),
        tracked,
        scatter,
    )
    .map_err(|e| e.in_call(role))?;
    if g.size() == 1 {
        return Ok(x);
    }
    g.reduce::<B>(role.op, x, reduce)
        .map_err(|e| e.in_call(role))
}

/// The mean over the group: linear and its own adjoint.
#[derive(Clone, Copy, Debug)]
struct Average {
    role: Role,
    scatter: Option<isize>,
}

impl LinearOp for Average {
    type Plan = ();
    type Adjoint = Average;

    fn role(&self) -> Role {
        self.role
    }

    fn plan<G: Group>(
        &self,
        g: &G,
        shape: &[usize],
        dtype: DType,
        tracked: bool,
    ) -> Result<(), Error> {
        agree_reduce(
            g,
            self.role,
            ReduceOp::Mean,
            shape,
            dtype,
            tracked,
            self.scatter,
        )
        .map(|_| ())
    }

    fn forward<B: Backend, G: Group>(
        &self,
        g: &G,
        _: &(),
        x: FloatTensor<B>,
    ) -> Result<FloatTensor<B>, Error> {
        if g.size() == 1 {
            return Ok(x);
        }
        g.reduce::<B>(self.role.op, x, ReduceOp::Mean)
    }

    fn adjoint(&self, _: &()) -> Average {
        // The backward pass averages the whole gradient (a reduce-scatter's
        // chunk was cut after this operation, so its gradient arrives
        // zero-padded to the whole shape).
        Average {
            role: self.role.adjoint(),
            scatter: None,
        }
    }
}

/// Identity forward (the value reduction agreed already), all-reduce
/// backward: the gradient path of an extremum.
#[derive(Clone, Copy, Debug)]
struct Carrier {
    role: Role,
}

impl LinearOp for Carrier {
    type Plan = ();
    type Adjoint = AllReduce;

    fn role(&self) -> Role {
        self.role
    }

    fn plan<G: Group>(&self, _: &G, _: &[usize], _: DType, _: bool) -> Result<(), Error> {
        Ok(())
    }

    fn forward<B: Backend, G: Group>(
        &self,
        _: &G,
        _: &(),
        x: FloatTensor<B>,
    ) -> Result<FloatTensor<B>, Error> {
        Ok(x)
    }

    fn adjoint(&self, _: &()) -> AllReduce {
        AllReduce::with_role(self.role.adjoint())
    }
}

/// Whether autodiff tracks `x` (a leaf that requires a gradient, or a
/// result computed from one).
pub(crate) fn is_tracked<const D: usize>(x: &Tensor<D>) -> Result<bool, Error> {
    let mut tracked = false;
    let _ = routed!(x.clone(), D, burn_tensor::Float, |B, t| {
        tracked = B::is_tracked(&t);
        Ok::<_, Error>(t)
    })?;
    Ok(tracked)
}

/// `x` reduced over `g` with `reduce`; with `scatter`, this rank's
/// balanced chunk along that dimension. `Sum` is the sum's own operation
/// ([`crate::TensorExt::all_reduce`], [`crate::TensorExt::reduce_scatter`]).
pub(crate) fn reduce_with<const D: usize, G: Group>(
    x: Tensor<D>,
    g: &G,
    reduce: ReduceOp,
    scatter: Option<isize>,
) -> Result<Tensor<D>, Error> {
    use crate::TensorExt;
    if reduce == ReduceOp::Sum {
        return match scatter {
            Some(dim) => x.reduce_scatter(g, dim),
            None => x.all_reduce(g),
        };
    }
    let role = Role::forward(if scatter.is_some() {
        TensorOp::ReduceScatterWith
    } else {
        TensorOp::AllReduceWith
    });
    let dims = x.dims();
    let whole = match reduce {
        ReduceOp::Sum | ReduceOp::Mean => routed!(
            x,
            D,
            burn_tensor::Float,
            |B, t| apply::<B, _, _>(g, Average { role, scatter }, t)
        )?,
        ReduceOp::Prod => routed!(x, D, burn_tensor::Float, |B, t| {
            let tracked = B::is_tracked(&t);
            reduce_values::<B, G>(g, role, reduce, t, tracked, scatter)
        })?,
        ReduceOp::Max | ReduceOp::Min => extremum(x, g, role, reduce, scatter)?,
    };
    // Agreed: every rank has a chunk along a valid dimension.
    match chunk(scatter, &dims, g.size(), g.rank()) {
        Ok(Some((dim, _, len))) if len == dims[dim] => Ok(whole),
        Ok(Some((dim, start, len))) if dims.iter().all(|&d| d > 0) => {
            Ok(whole.narrow(dim, start, len))
        }
        Ok(Some((dim, _, len))) => {
            // Nothing to keep: Burn's narrow of an empty tensor leaves the
            // autodiff graph, a reshape does not.
            let mut shape = dims;
            shape[dim] = len;
            Ok(crate::reshape(whole, shape))
        }
        _ => Ok(whole),
    }
}

/// The extremum over the group, its gradient shared by the ranks holding it.
fn extremum<const D: usize, G: Group>(
    x: Tensor<D>,
    g: &G,
    role: Role,
    reduce: ReduceOp,
    scatter: Option<isize>,
) -> Result<Tensor<D>, Error> {
    let tracked = is_tracked(&x)?;
    let value = routed!(x.clone().detach(), D, burn_tensor::Float, |B, t| {
        reduce_values::<B, G>(g, role, reduce, t, tracked, scatter)
    })?;
    if !tracked {
        return Ok(value);
    }
    // Where this rank holds the extremum, and how many ranks do (counted
    // in f32 for half-precision inputs: bf16 holds integers exactly only
    // up to 256).
    let dtype = x.dtype();
    let count_dtype = match dtype {
        DType::F16 | DType::BF16 => DType::F32,
        d => d,
    };
    let hits = value
        .zeros_like()
        .cast(count_dtype)
        .mask_fill(x.clone().detach().equal(value.clone()), 1.0);
    // The ranks agreed on the shape and dtype for the value's reduction
    // just above: the count needs no agreement of its own.
    let holders = routed!(hits.clone(), D, burn_tensor::Float, |B, t| {
        if g.size() == 1 {
            Ok(t)
        } else {
            g.sum::<B>(role.op, t).map_err(|e| e.in_call(role))
        }
    })?;
    let share = (hits / holders.clamp_min(1.0)).cast(dtype);
    // The gradient path: x · share, whose backward all-reduces the output
    // gradient and multiplies it by the share. Its forward value (NaN where
    // an infinite input meets a zero share) is replaced by the extremum.
    let carrier = routed!(x * share, D, burn_tensor::Float, |B, t| apply::<B, _, _>(
        g,
        Carrier { role },
        t
    ))?;
    routed!(carrier, D, burn_tensor::Float, |B, c| {
        value
            .try_into_primitive::<B>()
            .map_err(unsupported)
            .map(|v| <B as crate::backend::carry::Carry>::with_value(c, v))
    })
}

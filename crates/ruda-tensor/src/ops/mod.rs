//! The differentiable operations, one file per family, each with its
//! forward, its agreement (shape rule) and its adjoint side by side, as
//! JAX's `lax.parallel` keeps each primitive's transpose rule beside it.
//!
//! Every operation of ruda is linear in its input, so one rule serves them
//! all ([`LinearOp`]): the forward runs on the backend's plain tensors, and
//! on `burn_autodiff::Autodiff` the backward pass applies the adjoint
//! operator to the gradient (see [`crate::DistBackend`]). The adjoint of
//! each operation is DESIGN.md §2's table:
//!
//! | operation | forward | adjoint |
//! |---|---|---|
//! | [`AllReduce`] | sum over the group | [`AllReduce`] |
//! | [`CopyTo`] | identity | [`AllReduce`] |
//! | [`ReduceFrom`] | sum over the group | [`Identity`] |
//! | [`Gather`] (copy-to kind) | all-gather along a dimension | [`ReduceScatter`] |
//! | [`Gather`] (replicated kind, `gather_from`) | all-gather along a dimension | [`KeepChunk`] |
//! | [`ReduceScatter`] | sum, keep this rank's chunk | [`Gather`] |
//! | [`KeepChunk`] (`scatter_to`) | keep this rank's chunk | [`Gather`] |
//! | [`Broadcast`] | the root's value everywhere | [`SumToRoot`] |
//! | [`SumToRoot`] | sum at the root, zeros elsewhere | [`Broadcast`] |
//! | [`GatherToRoot`] | every rank's tensor concatenated at the root | [`ScatterFromRoot`] |
//! | [`ScatterFromRoot`] | the root's tensor split over the ranks | [`GatherToRoot`] |
//! | [`AllToAllV`] | rows to chosen ranks | the reverse [`AllToAllV`] |
//! | [`Transpose`] | all-to-all: split along `dims.1` → along `dims.0` | the inverse [`Transpose`] |
//! | [`HaloExchange`] | borrow rows from each neighbour | [`HaloReduce`] |
//! | [`HaloReduce`] | send halo rows home and add | [`HaloExchange`] |
//!
//! Because an adjoint is the other operation's forward, a backward pass
//! equals that forward bit for bit (e.g. `halo_exchange`'s backward is
//! `halo_reduce`).

mod broadcast;
mod exchange;
mod gather;
mod halo;
mod reduce;
mod rooted_gather;
mod transpose;

use alloc::vec::Vec;

use burn_backend::Backend;
use burn_backend::tensor::FloatTensor;

pub use broadcast::{Broadcast, SumToRoot};
pub(crate) use exchange::agree_exchange;
pub use exchange::{AllToAllV, ExchangePlan, Expect};
pub use gather::{ChunkPlan, Gather, GatherAdjoint, KeepChunk, ReduceScatter};
pub use halo::{HaloExchange, HaloPlan, HaloReduce};
pub use reduce::{AllReduce, CopyTo, Identity, ReduceFrom};
pub use rooted_gather::{GatherToRoot, RootedPlan, ScatterFromRoot, ScatterPlan};
pub use transpose::{Transpose, TransposeAxes, TransposePlan};

use crate::backend::DistBackend;
use crate::error::{Error, TensorOp};
use crate::group::Group;
use crate::layout::{self, LayoutError};
use crate::linear_op::agree;
pub use crate::linear_op::{LinearOp, Role};

/// Run `op` on `x` over `g`: agreement, then the forward; on `Autodiff`
/// the adjoint is recorded for the backward pass.
///
/// # Errors
/// As [`LinearOp::plan`] and [`LinearOp::forward`].
pub fn apply<B: DistBackend, G: Group, O: LinearOp>(
    g: &G,
    op: O,
    x: FloatTensor<B>,
) -> Result<FloatTensor<B>, Error> {
    let role = op.role();
    let plan = agree::<B, _, _>(g, &op, &x, B::is_tracked(&x))?;
    B::run(g, op, plan, x).map_err(|e| e.in_call(role))
}

/// [`apply`], also returning the plan the ranks agreed on (sizes, counts).
///
/// # Errors
/// As [`apply`].
pub fn apply_planned<B: DistBackend, G: Group, O: LinearOp>(
    g: &G,
    op: O,
    x: FloatTensor<B>,
) -> Result<(FloatTensor<B>, O::Plan), Error> {
    let role = op.role();
    let plan = agree::<B, _, _>(g, &op, &x, B::is_tracked(&x))?;
    let out = B::run(g, op, plan.clone(), x).map_err(|e| e.in_call(role))?;
    Ok((out, plan))
}

/// `dim` resolved for a tensor of `ndim` dimensions, or the problem to report.
pub(crate) fn resolve(dim: isize, ndim: usize) -> Result<usize, crate::agreement::Problem> {
    layout::normalize_dim(dim, ndim).map_err(|_| crate::agreement::Problem::Dim { dim, ndim })
}

/// Balanced chunks of `len` over `n` ranks, or the problem to report.
pub(crate) fn balanced(len: usize, n: usize) -> Result<Vec<usize>, crate::agreement::Problem> {
    layout::compute_split_shapes(len, n).map_err(|e| match e {
        LayoutError::EmptyChunk { size, chunks } => {
            crate::agreement::Problem::EmptyChunk { size, chunks }
        }
        _ => crate::agreement::Problem::EmptyChunk {
            size: len,
            chunks: n,
        },
    })
}

/// Swap `dim` to the front (or back); a no-op for dimension 0.
pub(crate) fn front<B: Backend>(x: FloatTensor<B>, dim: usize) -> FloatTensor<B> {
    if dim == 0 {
        x
    } else {
        B::float_swap_dims(x, 0, dim)
    }
}

/// Swap `dim` of an integer tensor to the front (or back).
pub(crate) fn front_int<B: Backend>(
    x: burn_backend::tensor::IntTensor<B>,
    dim: usize,
) -> burn_backend::tensor::IntTensor<B> {
    if dim == 0 {
        x
    } else {
        B::int_swap_dims(x, 0, dim)
    }
}

/// The forward role of `op`.
pub(crate) fn role_of(op: TensorOp) -> Role {
    Role::forward(op)
}

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
mod transpose;

use alloc::vec::Vec;
use core::fmt::Debug;

use burn_backend::tensor::FloatTensor;
use burn_backend::{Backend, DType, TensorMetadata};

pub use broadcast::{Broadcast, SumToRoot};
pub(crate) use exchange::agree_exchange;
pub use exchange::{AllToAllV, ExchangePlan, Expect};
pub use gather::{ChunkPlan, Gather, GatherAdjoint, KeepChunk, ReduceScatter};
pub use halo::{HaloExchange, HaloPlan, HaloReduce};
pub use reduce::{AllReduce, CopyTo, Identity, ReduceFrom};
pub use transpose::{Transpose, TransposeAxes, TransposePlan};

use crate::backend::DistBackend;
use crate::error::{Error, TensorOp};
use crate::group::Group;
use crate::layout::{self, LayoutError};

/// Which call an operation is: its name, and whether it runs as the
/// backward pass of that operation (then its agreement says so, and a
/// desync names it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Role {
    /// The operation.
    pub op: TensorOp,
    /// Whether this is the backward pass of `op`.
    pub backward: bool,
}

impl Role {
    /// The forward call of `op`.
    pub const fn forward(op: TensorOp) -> Self {
        Role {
            op,
            backward: false,
        }
    }

    /// The backward pass of this call.
    pub const fn adjoint(self) -> Self {
        Role {
            op: self.op,
            backward: true,
        }
    }

    /// The call as error messages name it: `all_reduce`, or `the backward
    /// pass of all_reduce`.
    pub fn label(self) -> alloc::string::String {
        if self.backward {
            alloc::format!("the backward pass of {}", self.op)
        } else {
            alloc::string::ToString::to_string(self.op.name())
        }
    }
}

/// A linear operation over a group with a known adjoint: the unit the
/// tensor layer is built from, and the way to add one of your own.
///
/// [`apply`] runs it: [`LinearOp::plan`] reaches agreement with the other
/// ranks (at most one small exchange, the same verdict on every rank), then
/// the backend runs [`LinearOp::forward`]; on `Autodiff` the backward pass
/// later applies [`LinearOp::adjoint`] (built from the plan, so sizes
/// discovered in the forward travel to the backward) to the gradient.
///
/// # Example
/// ```
/// use burn_flex::{Flex, FlexDevice};
/// use burn_backend::{TensorData, ops::FloatTensorOps, read_sync};
/// use ruda_comm::LocalWorld;
/// use ruda_tensor::{HostCollective, ops::{apply, AllReduce}};
///
/// let out = LocalWorld::new(2).run(|c| {
///     let g = HostCollective::new(c);
///     let x = Flex::float_from_data(TensorData::new(vec![1.0f64, 2.0], [2]), &FlexDevice);
///     let y = apply::<Flex, _, _>(&g, AllReduce::new(), x)?;
///     Ok::<_, ruda_tensor::Error>(read_sync(Flex::float_into_data(y)).unwrap().try_to_vec::<f64>().unwrap())
/// }).unwrap();
/// assert_eq!(out[0], vec![2.0, 4.0]);
/// ```
pub trait LinearOp: Clone + Debug + Send + Sync + 'static {
    /// What the agreement established (sizes discovered, counts…).
    type Plan: Clone + Debug + Send + Sync + 'static;
    /// The adjoint operation.
    type Adjoint: LinearOp;

    /// The call this is.
    fn role(&self) -> Role;

    /// Reach agreement for an input of `shape` and `dtype` (`tracked`:
    /// whether this rank's input is tracked by autodiff).
    ///
    /// # Errors
    /// The operation's rule violations, the same on every rank; the
    /// group's errors.
    fn plan<G: Group>(
        &self,
        g: &G,
        shape: &[usize],
        dtype: DType,
        tracked: bool,
    ) -> Result<Self::Plan, Error>;

    /// The forward operation on a plain (non-autodiff) backend.
    ///
    /// # Errors
    /// The group's and the backend's errors.
    fn forward<B: Backend, G: Group>(
        &self,
        g: &G,
        plan: &Self::Plan,
        x: FloatTensor<B>,
    ) -> Result<FloatTensor<B>, Error>;

    /// The adjoint operation, knowing the forward's plan.
    fn adjoint(&self, plan: &Self::Plan) -> Self::Adjoint;
}

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
    let shape = x.shape().to_vec();
    let plan = op
        .plan(g, &shape, x.dtype(), B::is_tracked(&x))
        .map_err(|e| e.in_call(role))?;
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
    let shape = x.shape().to_vec();
    let plan = op
        .plan(g, &shape, x.dtype(), B::is_tracked(&x))
        .map_err(|e| e.in_call(role))?;
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

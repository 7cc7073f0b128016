//! The unit the tensor layer is built from: a linear operation over a
//! group with a known adjoint ([`LinearOp`]), and which call it is
//! ([`Role`]). Both the operations ([`crate::ops`]) and the backends that
//! run them and record their adjoints ([`crate::backend`]) build on this
//! file; it depends on neither.

use core::fmt::Debug;

use burn_backend::tensor::FloatTensor;
use burn_backend::{Backend, DType, TensorMetadata};

use crate::error::{Error, TensorOp};
use crate::group::Group;

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
/// [`apply`](crate::ops::apply) runs it: [`LinearOp::plan`] reaches agreement with the other
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

/// Reach agreement on `op`'s plan for `x` (`tracked`: whether this rank's
/// input is tracked by autodiff), its errors naming the call.
///
/// # Errors
/// As [`LinearOp::plan`].
pub(crate) fn agree<B: Backend, G: Group, O: LinearOp>(
    g: &G,
    op: &O,
    x: &FloatTensor<B>,
    tracked: bool,
) -> Result<O::Plan, Error> {
    op.plan(g, &x.shape().to_vec(), x.dtype(), tracked)
        .map_err(|e| e.in_call(op.role()))
}

/// Agreement, then the forward on a plain backend: how the backward pass
/// applies an adjoint to a gradient (which autodiff no longer tracks).
///
/// # Errors
/// As [`LinearOp::plan`] and [`LinearOp::forward`].
pub(crate) fn run_plain<B: Backend, G: Group, O: LinearOp>(
    g: &G,
    op: O,
    x: FloatTensor<B>,
) -> Result<FloatTensor<B>, Error> {
    let plan = agree::<B, _, _>(g, &op, &x, false)?;
    op.forward::<B, G>(g, &plan, x)
        .map_err(|e| e.in_call(op.role()))
}
